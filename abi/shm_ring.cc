#include "abi/shm_ring.h"

#include <cerrno>

namespace droce::abi {

// 2^31 entries of 64 KiB: offsets need 48 bits.
static_assert(sizeof(size_t) >= 8);

namespace {

bool aligned(const std::byte* p) { return reinterpret_cast<uintptr_t>(p) % kShmRingAlignment == 0; }

}  // namespace

bool shm_ring_geometry_valid(ShmRingGeometry g) {
  const bool count_ok = g.entry_count != 0 && g.entry_count <= kShmRingMaxEntries &&
                        (g.entry_count & (g.entry_count - 1)) == 0;
  const bool size_ok = g.entry_size >= 8 && g.entry_size <= kShmRingMaxEntrySize && g.entry_size % 8 == 0;
  return count_ok && size_ok;
}

size_t shm_ring_bytes(ShmRingGeometry g) {
  if (!shm_ring_geometry_valid(g)) return 0;
  return kShmRingHeaderSize + static_cast<size_t>(g.entry_count) * g.entry_size;
}

int shm_ring_format(std::span<std::byte> mem, ShmRingGeometry g, uint32_t first_index) {
  if (!shm_ring_geometry_valid(g) || mem.data() == nullptr || !aligned(mem.data()) ||
      mem.size() < shm_ring_bytes(g))
    return -EINVAL;
  ShmRingHeader h{};
  h.magic = kShmRingMagic;
  h.abi_version = kShmRingAbiVersion;
  h.header_size = kShmRingHeaderSize;
  h.entry_count = g.entry_count;
  h.entry_size = g.entry_size;
  h.flags = 0;
  h.producer_index = first_index;
  h.consumer_index = first_index;
  auto* shared = reinterpret_cast<ShmRingHeader*>(mem.data());
  // Everything but the indexes as plain bytes, the indexes as the atomics
  // they are everywhere else; release so that a peer that acquires an index
  // sees the descriptor written before it.
  std::memcpy(shared, &h, offsetof(ShmRingHeader, producer_index));
  std::memcpy(shared->reserved1, h.reserved1, sizeof h.reserved1);
  std::memcpy(shared->reserved2, h.reserved2, sizeof h.reserved2);
  std::memcpy(shared->reserved3, h.reserved3, sizeof h.reserved3);
  std::atomic_ref<uint32_t>(shared->consumer_index).store(first_index, std::memory_order_release);
  std::atomic_ref<uint32_t>(shared->producer_index).store(first_index, std::memory_order_release);
  return 0;
}

const char* to_string(ShmRingStatus s) {
  switch (s) {
    case ShmRingStatus::ok: return "ok";
    case ShmRingStatus::full: return "full";
    case ShmRingStatus::empty: return "empty";
    case ShmRingStatus::corrupt: return "corrupt";
  }
  return "?";
}

namespace detail {

int shm_ring_attach(std::span<std::byte> mem, ShmRingGeometry expected, bool producer, ShmRingState* out) {
  if (!shm_ring_geometry_valid(expected) || mem.data() == nullptr || !aligned(mem.data()) ||
      mem.size() < shm_ring_bytes(expected))
    return -EINVAL;
  auto* h = reinterpret_cast<ShmRingHeader*>(mem.data());
  // One read of the descriptor line into private memory, then checks on the
  // copy only: the peer may be rewriting the original as we look.
  uint32_t d[6];
  std::memcpy(d, h, sizeof d);
  shm_copy_done();
  static_assert(offsetof(ShmRingHeader, flags) + sizeof(uint32_t) == sizeof d);
  const uint32_t magic = d[0], version = d[1], header_size = d[2], count = d[3], entry_size = d[4],
                 flags = d[5];
  if (magic != kShmRingMagic || version != kShmRingAbiVersion || header_size != kShmRingHeaderSize ||
      count != expected.entry_count || entry_size != expected.entry_size ||
      (flags & ~kShmRingKnownFlags) != 0)
    return -EPROTO;
  // Acquire on both: whatever the other side wrote into the entries before
  // publishing the index it left there is visible to this side from now on.
  const uint32_t prod = std::atomic_ref<uint32_t>(h->producer_index).load(std::memory_order_acquire);
  const uint32_t cons = std::atomic_ref<uint32_t>(h->consumer_index).load(std::memory_order_acquire);
  if (prod - cons > expected.entry_count) return -EBADMSG;
  ShmRingState s;
  s.entries = mem.data() + kShmRingHeaderSize;
  s.producer_index = &h->producer_index;
  s.consumer_index = &h->consumer_index;
  s.count = expected.entry_count;
  s.mask = expected.entry_count - 1;
  s.entry_size = expected.entry_size;
  s.own = producer ? prod : cons;
  s.peer_seen = producer ? cons : prod;
  s.claimed = 0;
  s.corrupt = false;
  *out = s;
  return 0;
}

}  // namespace detail

int ShmRingProducer::attach(std::span<std::byte> mem, ShmRingGeometry expected, ShmRingProducer* out) {
  return detail::shm_ring_attach(mem, expected, true, &out->s_);
}

int ShmRingConsumer::attach(std::span<std::byte> mem, ShmRingGeometry expected, ShmRingConsumer* out) {
  return detail::shm_ring_attach(mem, expected, false, &out->s_);
}

}  // namespace droce::abi
