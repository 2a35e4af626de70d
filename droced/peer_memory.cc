#include "droced/peer_memory.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "core/shm_region.h"

namespace droce::droced {

PeerMemory::PeerMemory(PeerMemory&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

PeerMemory& PeerMemory::operator=(PeerMemory&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

void PeerMemory::reset() {
  if (data_ != nullptr) ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

int64_t PeerMemory::populate(const std::atomic<bool>* cancelled) const {
#ifndef MADV_POPULATE_WRITE
  constexpr int MADV_POPULATE_WRITE = 23;  // Linux 5.14; glibc 2.36's headers have it
#endif
  constexpr size_t kChunk = size_t{64} << 20;
  size_t done = 0;
  while (done < size_) {
    if (cancelled != nullptr && cancelled->load(std::memory_order_relaxed)) break;
    const size_t n = std::min(kChunk, size_ - done);
    if (::madvise(data_ + done, n, MADV_POPULATE_WRITE) != 0) return -errno;
    done += n;
  }
  return static_cast<int64_t>(done);
}

int PeerMemory::map(std::span<const abi::ctl::MrSegment> segments, std::span<const int> fds, PeerMemory* out) {
  if (segments.empty() || segments.size() != fds.size()) return -EINVAL;
  const uint64_t page = core::page_size();
  uint64_t total = 0;
  for (const auto& s : segments) {
    if (s.length == 0 || s.length % page != 0 || s.fd_offset % page != 0) return -EINVAL;
    if (s.length > kMaxBytes || total + s.length > kMaxBytes || s.fd_offset > kMaxBytes) return -EINVAL;
    total += s.length;
  }
  for (size_t i = 0; i < segments.size(); ++i)
    if (int rc = core::check_peer_memory(fds[i], segments[i].fd_offset + segments[i].length); rc != 0) return rc;

  // Reserve the whole range first so the segments land side by side and
  // nothing else can be mapped between them.
  void* base = ::mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return -errno;
  PeerMemory m;
  m.data_ = static_cast<uint8_t*>(base);
  m.size_ = total;
  uint64_t at = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    void* p = ::mmap(m.data_ + at, segments[i].length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fds[i],
                     static_cast<off_t>(segments[i].fd_offset));
    if (p == MAP_FAILED) return -errno;  // m unmaps the reservation
    at += segments[i].length;
  }
  // A forked helper of droced must not inherit client memory.
  ::madvise(m.data_, m.size_, MADV_DONTFORK);
  *out = std::move(m);
  return 0;
}

}  // namespace droce::droced
