#include "provider/client/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>

#include "core/shm_region.h"

namespace droce::client {

namespace {

void page_bounds(const void* addr, size_t length, uintptr_t* start, uintptr_t* end) {
  const uintptr_t page = core::page_size();
  const auto a = reinterpret_cast<uintptr_t>(addr);
  *start = a & ~(page - 1);
  *end = (a + length + page - 1) & ~(page - 1);
}

}  // namespace

int SharedMemory::convert(uintptr_t start, uintptr_t end) {
  const size_t len = end - start;
  int raw = ::memfd_create("droce-mr", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (raw < 0) return -errno;
  auto fd = std::make_shared<core::Fd>(raw);
  if (::ftruncate(raw, static_cast<off_t>(len)) != 0) return -errno;
  // droced refuses memory that could shrink under it (SIGBUS in the daemon).
  if (::fcntl(raw, F_ADD_SEALS, core::ShmRegion::kRequiredSeals) != 0) return -errno;
  void* tmp = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, raw, 0);
  if (tmp == MAP_FAILED) return -errno;
  // Copy the current contents without trusting that every page is readable:
  // process_vm_readv reports EFAULT where a plain copy would crash.
  const iovec local{tmp, len};
  const iovec remote{reinterpret_cast<void*>(start), len};
  const ssize_t got = ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0);
  if (got != static_cast<ssize_t>(len)) {
    const int e = got < 0 ? errno : EFAULT;
    ::munmap(tmp, len);
    return -(e == ESRCH || e == EPERM ? EFAULT : e);
  }
  void* p = ::mmap(reinterpret_cast<void*>(start), len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, raw, 0);
  ::munmap(tmp, len);
  if (p == MAP_FAILED) return -errno;
  ::madvise(p, len, MADV_DONTFORK);
  runs_[start] = Run{end, std::move(fd), 0, 0};
  return 0;
}

int SharedMemory::share(const void* addr, size_t length, uintptr_t* page_start, std::vector<Piece>* pieces) {
  if (length == 0) return -EINVAL;
  uintptr_t start, end;
  page_bounds(addr, length, &start, &end);
  if (end <= start) return -EINVAL;
  // Convert the gaps between runs already converted.
  uintptr_t at = start;
  while (at < end) {
    auto it = runs_.upper_bound(at);
    if (it != runs_.begin()) {
      auto prev = std::prev(it);
      if (prev->second.end > at) {  // `at` is inside a run
        at = prev->second.end;
        continue;
      }
    }
    const uintptr_t gap_end = (it != runs_.end() && it->first < end) ? it->first : end;
    if (int rc = convert(at, gap_end); rc != 0) return rc;
    at = gap_end;
  }
  // The pieces, in order.
  std::vector<Piece> out;
  auto it = runs_.upper_bound(start);
  if (it != runs_.begin()) --it;
  for (; it != runs_.end() && it->first < end; ++it) {
    if (it->second.end <= start) continue;
    const uintptr_t a = std::max(start, it->first);
    const uintptr_t b = std::min(end, it->second.end);
    Piece p;
    p.start = a;
    p.segment.length = b - a;
    p.segment.fd_offset = it->second.fd_offset + (a - it->first);
    p.fd = it->second.fd->get();
    out.push_back(p);
  }
  if (out.size() > core::ctl::kMaxMrSegments) return -E2BIG;
  for (auto r = runs_.upper_bound(start); r != runs_.begin();) {
    --r;
    if (r->second.end <= start) break;
    ++r->second.refs;
  }
  for (auto r = runs_.upper_bound(start); r != runs_.end() && r->first < end; ++r) ++r->second.refs;
  *page_start = start;
  *pieces = std::move(out);
  return 0;
}

void SharedMemory::release(const void* addr, size_t length) {
  uintptr_t start, end;
  page_bounds(addr, length, &start, &end);
  for (auto it = runs_.begin(); it != runs_.end();) {
    if (it->first < end && it->second.end > start && it->second.refs != 0 && --it->second.refs == 0) {
      // The pages stay memfd-backed (nothing to undo); only the registry
      // forgets them, and the descriptor closes.
      it = runs_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace droce::client
