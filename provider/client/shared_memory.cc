#include "provider/client/shared_memory.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "core/shm_region.h"

namespace droce::client {

namespace {

// A System V shared memory mapping (shmat) overlapping the range asked about.
struct SysvMapping {
  uintptr_t start = 0, end = 0;
  uint64_t offset = 0;  ///< of `start` in the segment
};

// The SysV mappings in /proc/self/maps that overlap [start, end), in address order.
std::vector<SysvMapping> sysv_mappings(uintptr_t start, uintptr_t end) {
  std::vector<SysvMapping> out;
  FILE* maps = std::fopen("/proc/self/maps", "re");
  if (maps == nullptr) return out;
  char line[4096];
  while (std::fgets(line, sizeof line, maps) != nullptr) {
    unsigned long lo = 0, hi = 0, off = 0;
    char perms[8] = {};
    int name_at = 0;
    if (std::sscanf(line, "%lx-%lx %7s %lx %*x:%*x %*u %n", &lo, &hi, perms, &off, &name_at) < 4) continue;
    if (hi <= start) continue;
    if (lo >= end) break;
    if (perms[3] == 's' && name_at > 0 && std::strncmp(line + name_at, "/SYSV", 5) == 0)
      out.push_back(SysvMapping{lo, hi, off});
  }
  std::fclose(maps);
  return out;
}

// The memfd name of converted pages: the fork handler finds them by it in /proc/self/maps.
constexpr char kMrMemfd[] = "droce-mr";

// In a fork()ed child: every run of converted pages becomes a private copy of what it held at
// the fork, as the kernel gives a child its own copy of pinned anonymous pages (Linux 5.13+):
// the child's heap and stack around a registered buffer stay usable, and what it writes there
// stays its own. Registered or not any more, the pages are found by their memfd's name. Runs in
// the child's only thread; no allocation (the parent's other threads may have held malloc's
// locks): a fixed table of ranges read with plain read(2).
void privatize_converted_pages() {
  struct Range {
    uintptr_t lo, hi;
  };
  static Range ranges[4096];
  size_t n = 0;
  const int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  static char buf[1 << 16];
  static char line[4096 + 256];
  size_t len = 0;
  for (;;) {
    const ssize_t got = ::read(fd, buf, sizeof buf);
    if (got <= 0) break;
    for (ssize_t i = 0; i < got; ++i) {
      if (buf[i] != '\n') {
        if (len + 1 < sizeof line) line[len++] = buf[i];
        continue;
      }
      line[len] = '\0';
      len = 0;
      unsigned long lo = 0, hi = 0;
      if (std::strstr(line, "/memfd:") == nullptr || std::strstr(line, kMrMemfd) == nullptr) continue;
      if (std::sscanf(line, "%lx-%lx", &lo, &hi) == 2 && n < std::size(ranges)) ranges[n++] = Range{lo, hi};
    }
  }
  ::close(fd);
  for (size_t i = 0; i < n; ++i) {
    const size_t size = ranges[i].hi - ranges[i].lo;
    void* copy = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (copy == MAP_FAILED) continue;
    // The kernel copies (process_vm_readv): no sanitizer's view of what the program freed in
    // those pages applies to a copy of whole pages.
    const iovec to{copy, size};
    const iovec from{reinterpret_cast<void*>(ranges[i].lo), size};
    if (::process_vm_readv(::getpid(), &to, 1, &from, 1, 0) != static_cast<ssize_t>(size)) {
      ::munmap(copy, size);
      continue;
    }
    // Same protection as before is not known here; converted pages are read-write.
    if (::mremap(copy, size, size, MREMAP_MAYMOVE | MREMAP_FIXED, reinterpret_cast<void*>(ranges[i].lo)) ==
        MAP_FAILED)
      ::munmap(copy, size);
  }
}

void install_fork_handler() {
  static std::once_flag once;
  std::call_once(once, [] { ::pthread_atfork(nullptr, nullptr, privatize_converted_pages); });
}

// What one process_vm_readv in convert() copies (under MAX_RW_COUNT, a whole number of pages).
constexpr size_t kCopyChunk = size_t{1} << 30;

void page_bounds(const void* addr, size_t length, uintptr_t* start, uintptr_t* end) {
  const uintptr_t page = core::page_size();
  const auto a = reinterpret_cast<uintptr_t>(addr);
  *start = a & ~(page - 1);
  *end = (a + length + page - 1) & ~(page - 1);
}

}  // namespace

int SharedMemory::convert(uintptr_t start, uintptr_t end) {
  const size_t len = end - start;
  install_fork_handler();
  int raw = ::memfd_create(kMrMemfd, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (raw < 0) return -errno;
  auto fd = std::make_shared<core::Fd>(raw);
  if (::ftruncate(raw, static_cast<off_t>(len)) != 0) return -errno;
  // droced refuses memory that could shrink under it (SIGBUS in the daemon).
  if (::fcntl(raw, F_ADD_SEALS, core::ShmRegion::kRequiredSeals) != 0) return -errno;
  void* tmp = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, raw, 0);
  if (tmp == MAP_FAILED) return -errno;
  // Copy the current contents without trusting that every page is readable:
  // process_vm_readv reports EFAULT where a plain copy would crash. One call
  // moves at most MAX_RW_COUNT (2 GiB less a page) and returns that much as a
  // partial count, so a larger region goes in chunks.
  for (size_t off = 0; off < len;) {
    const size_t n = std::min(len - off, kCopyChunk);
    const iovec local{static_cast<uint8_t*>(tmp) + off, n};
    const iovec remote{reinterpret_cast<void*>(start + off), n};
    const ssize_t got = ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0);
    if (got != static_cast<ssize_t>(n)) {
      const int e = got < 0 ? errno : EFAULT;
      ::munmap(tmp, len);
      return -(e == ESRCH || e == EPERM ? EFAULT : e);
    }
    off += n;
  }
  void* p = ::mmap(reinterpret_cast<void*>(start), len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, raw, 0);
  ::munmap(tmp, len);
  if (p == MAP_FAILED) return -errno;
  runs_[start] = Run{end, std::move(fd), 0, 0};
  return 0;
}

int SharedMemory::adopt_sysv(uintptr_t start, uintptr_t end, uintptr_t map_start, uintptr_t map_end,
                             uint64_t map_offset) {
  char path[80];
  std::snprintf(path, sizeof path, "/proc/self/map_files/%lx-%lx", static_cast<unsigned long>(map_start),
                static_cast<unsigned long>(map_end));
  const int raw = ::open(path, O_RDWR | O_CLOEXEC);
  if (raw < 0) return -errno;
  runs_[start] = Run{end, std::make_shared<core::Fd>(raw), map_offset + (start - map_start), 0};
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
    // SysV segments stay what they are: droced maps the segment itself, so
    // the processes attached to it keep sharing it with this one (UCX's
    // and MPI's intra-node memory, registered for RDMA too). The rest of
    // the gap is converted.
    for (const SysvMapping& m : sysv_mappings(at, gap_end)) {
      const uintptr_t a = std::max(at, m.start), b = std::min(gap_end, m.end);
      if (a > at)
        if (int rc = convert(at, a); rc != 0) return rc;
      if (adopt_sysv(a, b, m.start, m.end, m.offset) != 0) {
        // Opening map_files takes CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE.
        if (!warned_private_sysv_) {
          std::fprintf(stderr,
                       "droce: SysV shared memory at %#lx registered as a private copy (opening "
                       "/proc/self/map_files needs CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE): other "
                       "processes attached to it no longer share those pages with this one\n",
                       static_cast<unsigned long>(a));
          warned_private_sysv_ = true;
        }
        if (int rc = convert(a, b); rc != 0) return rc;
      }
      at = b;
    }
    if (at < gap_end)
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
  if (out.size() > abi::ctl::kMaxMrSegments) return -E2BIG;
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
