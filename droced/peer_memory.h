#pragma once
// A client's registered memory as droced sees it: the memfd segments the
// client mapped over its buffer (provider/client), mapped again here side by
// side in one reserved range, so the engine reads and writes the very pages
// the application uses and atomics act on the same memory.
//
// Each descriptor is checked before it is mapped (a sealed memfd large
// enough for its segment, or a SysV segment: core::check_peer_memory): a client can hand droced
// only memory it cannot shrink afterwards, so no access here can SIGBUS.
// Control path only.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>

#include "abi/ctl_protocol.h"

namespace droce::droced {

class PeerMemory {
 public:
  /// Most bytes one registration may map (1 TiB).
  static constexpr uint64_t kMaxBytes = uint64_t{1} << 40;

  PeerMemory() = default;
  ~PeerMemory() { reset(); }
  PeerMemory(PeerMemory&& o) noexcept;
  PeerMemory& operator=(PeerMemory&& o) noexcept;
  PeerMemory(const PeerMemory&) = delete;
  PeerMemory& operator=(const PeerMemory&) = delete;

  /// Maps `segments` (one descriptor each, in order) contiguously.
  /// -EINVAL: no segment, a count that differs from the descriptors', a
  /// length or offset not a page multiple, a total over kMaxBytes; what
  /// check_peer_memfd and mmap return.
  static int map(std::span<const abi::ctl::MrSegment> segments, std::span<const int> fds, PeerMemory* out);

  /// Builds droced's page table entries for the whole mapping (writable), in
  /// chunks, stopping early once *cancelled: what a NIC's pinning does at
  /// registration, so that the engine's writes do not fault on the data path.
  /// Returns the bytes populated, or -errno (-EINVAL: a kernel before 5.14,
  /// without MADV_POPULATE_WRITE). Not needed for correctness: pages left
  /// unpopulated fault in when first touched. Safe from any thread.
  int64_t populate(const std::atomic<bool>* cancelled = nullptr) const;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  void reset();

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace droce::droced
