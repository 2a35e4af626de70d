#pragma once
// Single-producer single-consumer rings of fixed-size entries in shared
// memory, between two processes that do not trust each other: the provider
// (an application) posts work requests into send and receive rings and droced
// consumes them; droced posts completions into CQ rings and the provider
// consumes them. No syscall on the data path.
//
// Layout (ShmRingHeader, then the entries): a 256-byte header of four cache
// lines, then entry_count entries of entry_size bytes.
//
//   0    descriptor: magic, abi_version, header_size, entry_count, entry_size,
//        flags. Written once by shm_ring_format, read once by attach.
//   64   producer_index   (written only by the producer)
//   128  consumer_index   (written only by the consumer)
//   192  spare
//   256  entries: entry i of the ring lives at 256 + (i & (count-1)) * size
//
// The two indexes are on separate lines so the producer's and the consumer's
// stores never invalidate each other's line (false sharing); the spare line
// puts them in separate 128-byte pairs too, which Intel's adjacent-line
// prefetcher fetches together. Both indexes are free-running uint32_t: they
// only ever increase, modulo 2^32; producer - consumer is the fill level, so
// a count of at most 2^31 keeps every difference unambiguous.
//
// Trust. Each side works through a view (ShmRingProducer, ShmRingConsumer)
// that lives in its own private memory and keeps
//   - the geometry (count, mask, entry size, where the entries start), taken
//     once at attach and checked against what the caller expects: nothing in
//     the shared header is read again, so a peer rewriting it cannot move an
//     access;
//   - its own index: the producer never reads producer_index back, nor the
//     consumer consumer_index, so a peer scribbling on them hurts only itself;
//   - the last value of the peer's index it accepted. The peer's index is
//     re-read only when the cached one does not suffice, and every value read
//     is checked: a producer index must lie in [last seen, consumer + count],
//     a consumer index in [last seen, producer]. Anything else (an index
//     ahead, behind, moving backward, random) means the peer corrupted the
//     ring: the operation returns ShmRingStatus::corrupt, and so does every
//     later one (sticky), without touching shared memory again. droced
//     answers it by killing that client; the provider by reporting the device
//     fatal.
// Every entry address is entries + (index & mask) * entry_size with the
// view's own mask and entry size, so no index value, however hostile, leads
// outside the entry area.
//
// Entry contents are the peer's to write at any time. A consumer that cannot
// trust its producer copies an entry out (try_pop, pop_*, copy_entry) and
// validates the copy, never the shared original: reading a field twice in
// shared memory can return two values.
//
// Memory ordering (the indexes are accessed through std::atomic_ref, lock-free
// and address-free, so the same atomics work across two mappings in two
// processes):
//   producer: write entries, then store-release producer_index;
//   consumer: load-acquire producer_index, read entries, then store-release
//             consumer_index;
//   producer: load-acquire consumer_index before reusing the released slots.
// Each site below names the pairing it relies on. On x86 all four are plain
// moves; the ordering constrains the compiler.
//
// The memory under a ring must be a sealed region (core/shm_region.h), so
// the peer cannot truncate it and make the trusted side fault on a page that
// is gone; at least shm_ring_bytes() of it, 64-byte aligned.
//
// Threading: one thread drives a producer view, one a consumer view (either
// may be in another process). Views are move-only: two live producers on one
// ring would be a bug. The hot path (everything but attach and format)
// allocates nothing, takes no lock, makes no syscall.

#include <atomic>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <utility>

namespace droce::abi {

/// "drng" in memory order on a little-endian host.
inline constexpr uint32_t kShmRingMagic = 0x676e7264;
/// Bumped when the layout changes incompatibly; fields are only appended
/// (into the reserved words) and announced through `flags`.
inline constexpr uint32_t kShmRingAbiVersion = 1;
inline constexpr uint32_t kShmRingHeaderSize = 256;
/// Flags this build understands; attach refuses a ring with any other.
inline constexpr uint32_t kShmRingKnownFlags = 0;
inline constexpr uint32_t kShmRingMaxEntries = 1u << 31;
inline constexpr uint32_t kShmRingMaxEntrySize = 1u << 16;
/// Where a ring may start: its header's cache-line alignment.
inline constexpr size_t kShmRingAlignment = 64;

/// The shared header: an ABI between processes built separately. Native byte
/// order (both sides are on one host).
struct alignas(64) ShmRingHeader {
  // Line 0: the descriptor.
  uint32_t magic;           // kShmRingMagic
  uint32_t abi_version;     // kShmRingAbiVersion
  uint32_t header_size;     // offset of the entries: kShmRingHeaderSize
  uint32_t entry_count;     // a power of two, 1 .. kShmRingMaxEntries
  uint32_t entry_size;      // bytes, a multiple of 8, 8 .. kShmRingMaxEntrySize
  uint32_t flags;           // within kShmRingKnownFlags
  uint32_t reserved0[10];   // zero
  // Line 1: the producer's.
  uint32_t producer_index;  // free-running: entries published so far
  uint32_t reserved1[15];   // zero; future producer-written fields
  // Line 2: the consumer's.
  uint32_t consumer_index;  // free-running: entries released so far
  uint32_t reserved2[15];   // zero; future consumer-written fields (a sleep flag)
  // Line 3: spare, so each index has its own 128-byte pair.
  uint32_t reserved3[16];
};
static_assert(std::is_standard_layout_v<ShmRingHeader> && std::is_trivially_copyable_v<ShmRingHeader>);
static_assert(sizeof(ShmRingHeader) == kShmRingHeaderSize);
static_assert(alignof(ShmRingHeader) == kShmRingAlignment);
static_assert(offsetof(ShmRingHeader, magic) == 0);
static_assert(offsetof(ShmRingHeader, abi_version) == 4);
static_assert(offsetof(ShmRingHeader, header_size) == 8);
static_assert(offsetof(ShmRingHeader, entry_count) == 12);
static_assert(offsetof(ShmRingHeader, entry_size) == 16);
static_assert(offsetof(ShmRingHeader, flags) == 20);
static_assert(offsetof(ShmRingHeader, reserved0) == 24);
static_assert(offsetof(ShmRingHeader, producer_index) == 64);
static_assert(offsetof(ShmRingHeader, reserved1) == 68);
static_assert(offsetof(ShmRingHeader, consumer_index) == 128);
static_assert(offsetof(ShmRingHeader, reserved2) == 132);
static_assert(offsetof(ShmRingHeader, reserved3) == 192);

// The indexes are plain uint32_t in the struct (so it stays a C-layout ABI)
// and accessed through std::atomic_ref. That is only sound between processes
// if the atomics never fall back to a lock (a lock table in one process's
// private memory would not exclude the other): always lock-free, and needing
// no more than a uint32_t's own alignment. Lock-free atomics on GCC/Clang are
// single instructions on the location, hence address-free ([atomics.lockfree]
// p4), which is what two mappings at different addresses require.
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic_ref<uint32_t>::is_always_lock_free);
static_assert(std::atomic_ref<uint32_t>::required_alignment == alignof(uint32_t));
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));

/// A ring's shape, as the trusted side knows it (from its own records, e.g.
/// the sizes droced granted in the create reply), never from shared memory.
struct ShmRingGeometry {
  uint32_t entry_count = 0;
  uint32_t entry_size = 0;
};

/// Whether `g` is a ring this ABI can describe: entry_count a power of two in
/// 1..kShmRingMaxEntries, entry_size a multiple of 8 in 8..kShmRingMaxEntrySize.
bool shm_ring_geometry_valid(ShmRingGeometry g);

/// Bytes a ring of geometry `g` occupies (header and entries); 0 if `g` is
/// not valid.
size_t shm_ring_bytes(ShmRingGeometry g);

/// Writes a fresh header (both indexes = `first_index`) at the start of
/// `mem`. Done by the side that creates the ring, before the peer can attach.
/// Entries are left as they are (a new memfd is zero).
/// Errors: -EINVAL (geometry not valid, `mem` smaller than
/// shm_ring_bytes(g) or not aligned to kShmRingAlignment).
int shm_ring_format(std::span<std::byte> mem, ShmRingGeometry g, uint32_t first_index = 0);

/// Outcome of a ring operation. `corrupt` is sticky and means the peer wrote
/// an impossible index: stop using the ring, and deal with the peer.
enum class [[nodiscard]] ShmRingStatus : uint8_t {
  ok,       // all that was asked for
  full,     // producer: fewer slots free than asked (see the count returned)
  empty,    // consumer: fewer entries available than asked
  corrupt,  // the peer's index is impossible; nothing was read or written
};

const char* to_string(ShmRingStatus s);

namespace detail {

// What attach hands a view: the addresses of the parts of one ring, and both
// indexes as read once.
struct ShmRingState {
  std::byte* entries = nullptr;
  uint32_t* producer_index = nullptr;
  uint32_t* consumer_index = nullptr;
  uint32_t count = 0;
  uint32_t mask = 0;
  uint32_t entry_size = 0;
  uint32_t own = 0;        // this side's index (private truth from attach on)
  uint32_t peer_seen = 0;  // the peer's index, last value accepted
  uint32_t claimed = 0;    // slots reserved / entries peeked, not yet published / released
  bool corrupt = true;     // a detached view behaves as a corrupted one
};

int shm_ring_attach(std::span<std::byte> mem, ShmRingGeometry expected, bool producer,
                    ShmRingState* out);

// Reads of shared entries are done; the compiler may not re-read the shared
// originals in place of the private copies made before this point (a hostile
// peer may have changed them since). Emits no instruction.
inline void shm_copy_done() { std::atomic_signal_fence(std::memory_order_seq_cst); }

}  // namespace detail

/// The producing side of a ring.
class ShmRingProducer {
 public:
  /// Attaches to the ring at the start of `mem`, which must hold a header
  /// matching `expected` (magic, ABI version, header size, count, entry size,
  /// known flags) and consistent indexes. The view's geometry is `expected`;
  /// the header is not read again.
  /// Errors: -EINVAL (`expected` not valid, `mem` too small or misaligned),
  /// -EPROTO (header does not match), -EBADMSG (indexes inconsistent:
  /// producer - consumer > count).
  static int attach(std::span<std::byte> mem, ShmRingGeometry expected, ShmRingProducer* out);

  ShmRingProducer() = default;
  ShmRingProducer(ShmRingProducer&& o) noexcept : s_(std::exchange(o.s_, detail::ShmRingState{})) {}
  ShmRingProducer& operator=(ShmRingProducer&& o) noexcept {
    if (this != &o) s_ = std::exchange(o.s_, detail::ShmRingState{});
    return *this;
  }
  ShmRingProducer(const ShmRingProducer&) = delete;
  ShmRingProducer& operator=(const ShmRingProducer&) = delete;

  uint32_t capacity() const { return s_.count; }
  uint32_t entry_size() const { return s_.entry_size; }
  /// True once the consumer was caught writing an impossible index (or for a
  /// view never attached).
  bool corrupted() const { return s_.corrupt; }
  /// The next index this side will publish (for tests and diagnostics).
  uint32_t index() const { return s_.own; }

  /// Slots free now (re-reads the consumer index); 0 once corrupted.
  uint32_t free() { return refresh() ? s_.count - (s_.own - s_.peer_seen) : 0; }
  /// Entries published and not yet released (re-reads the consumer index);
  /// 0 once corrupted.
  uint32_t size() { return refresh() ? s_.own - s_.peer_seen : 0; }

  /// Zero-copy: claims up to `want` slots to fill in place with slot(i), then
  /// publish(). Returns ok with *got == want, full with *got < want (maybe 0),
  /// or corrupt with *got == 0. A new reserve() replaces the previous claim.
  ShmRingStatus reserve(uint32_t want, uint32_t* got) {
    s_.claimed = 0;
    *got = 0;
    if (s_.corrupt) return ShmRingStatus::corrupt;
    if (s_.count - (s_.own - s_.peer_seen) < want && !refresh()) return ShmRingStatus::corrupt;
    const uint32_t avail = s_.count - (s_.own - s_.peer_seen);
    const uint32_t n = want < avail ? want : avail;
    s_.claimed = n;
    *got = n;
    return n == want ? ShmRingStatus::ok : ShmRingStatus::full;
  }

  /// The i-th reserved slot (i < what reserve() granted), entry_size() bytes,
  /// 8-byte aligned. Slots are not contiguous across the end of the ring.
  void* slot(uint32_t i) const {
    assert(i < s_.claimed);
    return at(s_.own + i);
  }

  /// Publishes the first `n` reserved slots (n <= what reserve() granted).
  /// Does nothing once corrupted.
  void publish(uint32_t n) {
    if (s_.corrupt) return;
    assert(n <= s_.claimed);
    if (n > s_.claimed) n = s_.claimed;
    s_.claimed -= n;
    s_.own += n;
    // Release: pairs with the consumer's load-acquire of producer_index. The
    // entry writes above become visible no later than the index that
    // announces them, so the consumer never reads a slot before it is filled.
    std::atomic_ref<uint32_t>(*s_.producer_index).store(s_.own, std::memory_order_release);
  }

  /// Copies one entry (entry_size() bytes) in: ok, full, or corrupt.
  ShmRingStatus try_push(const void* entry) { return push_bulk(entry, 1); }

  /// All or nothing: copies `n` consecutive entries in, or none (full).
  ShmRingStatus push_bulk(const void* entries, uint32_t n) {
    uint32_t got;
    const ShmRingStatus st = reserve(n, &got);
    if (st != ShmRingStatus::ok) {
      s_.claimed = 0;
      return st;
    }
    copy_in(static_cast<const std::byte*>(entries), n);
    publish(n);
    return ShmRingStatus::ok;
  }

  /// As many as fit: copies the first *pushed of `n` entries in. ok when all
  /// went, full when not all (maybe none), corrupt with *pushed == 0.
  ShmRingStatus push_burst(const void* entries, uint32_t n, uint32_t* pushed) {
    const ShmRingStatus st = reserve(n, pushed);
    if (st == ShmRingStatus::corrupt) return st;
    copy_in(static_cast<const std::byte*>(entries), *pushed);
    publish(*pushed);
    return st;
  }

 private:
  // Re-reads the consumer index and accepts it if possible; false (and
  // corrupted from now on) if not.
  bool refresh() {
    if (s_.corrupt) return false;
    // Acquire: pairs with the consumer's store-release of consumer_index. The
    // consumer finished copying every slot below `c` before it published `c`,
    // so the writes into those slots that follow cannot tear an entry it is
    // still reading.
    const uint32_t c = std::atomic_ref<uint32_t>(*s_.consumer_index).load(std::memory_order_acquire);
    // The consumer index only moves forward and never past what was
    // published: it must lie in [peer_seen, own] (modulo 2^32).
    if (c - s_.peer_seen > s_.own - s_.peer_seen) {
      s_.corrupt = true;
      s_.claimed = 0;
      return false;
    }
    s_.peer_seen = c;
    return true;
  }

  std::byte* at(uint32_t index) const {
    return s_.entries + static_cast<size_t>(index & s_.mask) * s_.entry_size;
  }

  // Copies n (<= claimed) entries into the claimed slots, in at most two
  // pieces (before and after the end of the ring).
  void copy_in(const std::byte* src, uint32_t n) {
    if (n == 0) return;
    const uint32_t first_slot = s_.own & s_.mask;
    const uint32_t head = n < s_.count - first_slot ? n : s_.count - first_slot;
    std::memcpy(at(s_.own), src, static_cast<size_t>(head) * s_.entry_size);
    std::memcpy(s_.entries, src + static_cast<size_t>(head) * s_.entry_size,
                static_cast<size_t>(n - head) * s_.entry_size);
  }

  detail::ShmRingState s_;
};

/// The consuming side of a ring.
class ShmRingConsumer {
 public:
  /// As ShmRingProducer::attach.
  static int attach(std::span<std::byte> mem, ShmRingGeometry expected, ShmRingConsumer* out);

  ShmRingConsumer() = default;
  ShmRingConsumer(ShmRingConsumer&& o) noexcept : s_(std::exchange(o.s_, detail::ShmRingState{})) {}
  ShmRingConsumer& operator=(ShmRingConsumer&& o) noexcept {
    if (this != &o) s_ = std::exchange(o.s_, detail::ShmRingState{});
    return *this;
  }
  ShmRingConsumer(const ShmRingConsumer&) = delete;
  ShmRingConsumer& operator=(const ShmRingConsumer&) = delete;

  uint32_t capacity() const { return s_.count; }
  uint32_t entry_size() const { return s_.entry_size; }
  /// True once the producer was caught writing an impossible index (or for a
  /// view never attached).
  bool corrupted() const { return s_.corrupt; }
  /// The next index this side will consume (for tests and diagnostics).
  uint32_t index() const { return s_.own; }

  /// Entries available now (re-reads the producer index); 0 once corrupted.
  uint32_t size() { return refresh() ? s_.peer_seen - s_.own : 0; }
  /// Slots the producer could still fill (re-reads the producer index); 0
  /// once corrupted.
  uint32_t free() { return refresh() ? s_.count - (s_.peer_seen - s_.own) : 0; }

  /// Zero-copy: makes up to `want` entries readable in place with entry(i)
  /// or copy_entry(i), then release(). Returns ok with *got == want, empty
  /// with *got < want (maybe 0), or corrupt with *got == 0. A new peek()
  /// replaces the previous one.
  ShmRingStatus peek(uint32_t want, uint32_t* got) {
    s_.claimed = 0;
    *got = 0;
    if (s_.corrupt) return ShmRingStatus::corrupt;
    if (s_.peer_seen - s_.own < want && !refresh()) return ShmRingStatus::corrupt;
    const uint32_t avail = s_.peer_seen - s_.own;
    const uint32_t n = want < avail ? want : avail;
    s_.claimed = n;
    *got = n;
    return n == want ? ShmRingStatus::ok : ShmRingStatus::empty;
  }

  /// The i-th peeked entry (i < what peek() granted), in shared memory: the
  /// producer can still change it. Validate a copy (copy_entry), not this.
  const void* entry(uint32_t i) const {
    assert(i < s_.claimed);
    return at(s_.own + i);
  }

  /// Copies the i-th peeked entry (entry_size() bytes) to `out`; what `out`
  /// holds afterwards is private and safe to validate.
  void copy_entry(uint32_t i, void* out) const {
    std::memcpy(out, entry(i), s_.entry_size);
    detail::shm_copy_done();
  }

  /// Copies bytes [from, to) of the i-th peeked entry to the same place in
  /// `out` (to is clamped to entry_size()): an entry's header first, then
  /// only as much of the rest as the private copy of the header says is used.
  void copy_entry(uint32_t i, void* out, uint32_t from, uint32_t to) const {
    if (to > s_.entry_size) to = s_.entry_size;
    if (from < to)
      std::memcpy(static_cast<uint8_t*>(out) + from, static_cast<const uint8_t*>(entry(i)) + from, to - from);
    detail::shm_copy_done();
  }

  /// Gives the first `n` peeked entries back to the producer (n <= what
  /// peek() granted). Does nothing once corrupted.
  void release(uint32_t n) {
    if (s_.corrupt) return;
    assert(n <= s_.claimed);
    if (n > s_.claimed) n = s_.claimed;
    s_.claimed -= n;
    s_.own += n;
    // Release: pairs with the producer's load-acquire of consumer_index. Our
    // reads of the released slots happen before the producer's next writes
    // to them, so it cannot overwrite an entry still being copied.
    std::atomic_ref<uint32_t>(*s_.consumer_index).store(s_.own, std::memory_order_release);
  }

  /// Copies one entry out and releases it: ok, empty, or corrupt.
  ShmRingStatus try_pop(void* entry) { return pop_bulk(entry, 1); }

  /// All or nothing: copies `n` entries out and releases them, or none
  /// (empty).
  ShmRingStatus pop_bulk(void* entries, uint32_t n) {
    uint32_t got;
    const ShmRingStatus st = peek(n, &got);
    if (st != ShmRingStatus::ok) {
      s_.claimed = 0;
      return st;
    }
    copy_out(static_cast<std::byte*>(entries), n);
    release(n);
    return ShmRingStatus::ok;
  }

  /// As many as there are: copies the first *popped of up to `n` entries out
  /// and releases them. ok when `n` came, empty when fewer (maybe none),
  /// corrupt with *popped == 0.
  ShmRingStatus pop_burst(void* entries, uint32_t n, uint32_t* popped) {
    const ShmRingStatus st = peek(n, popped);
    if (st == ShmRingStatus::corrupt) return st;
    copy_out(static_cast<std::byte*>(entries), *popped);
    release(*popped);
    return st;
  }

 private:
  // Re-reads the producer index and accepts it if possible; false (and
  // corrupted from now on) if not.
  bool refresh() {
    if (s_.corrupt) return false;
    // Acquire: pairs with the producer's store-release of producer_index.
    // Every entry below `p` was written before `p` was published, so reading
    // them after this load sees them whole.
    const uint32_t p = std::atomic_ref<uint32_t>(*s_.producer_index).load(std::memory_order_acquire);
    // The producer index only moves forward and never more than `count`
    // past what was released: it must lie in [peer_seen, own + count]
    // (modulo 2^32). Behind, too far ahead, backward or random fails.
    if (p - s_.peer_seen > s_.own + s_.count - s_.peer_seen) {
      s_.corrupt = true;
      s_.claimed = 0;
      return false;
    }
    s_.peer_seen = p;
    return true;
  }

  std::byte* at(uint32_t index) const {
    return s_.entries + static_cast<size_t>(index & s_.mask) * s_.entry_size;
  }

  // Copies n (<= claimed) entries out, in at most two pieces.
  void copy_out(std::byte* dst, uint32_t n) {
    if (n == 0) return;
    const uint32_t first_slot = s_.own & s_.mask;
    const uint32_t head = n < s_.count - first_slot ? n : s_.count - first_slot;
    std::memcpy(dst, at(s_.own), static_cast<size_t>(head) * s_.entry_size);
    std::memcpy(dst + static_cast<size_t>(head) * s_.entry_size, s_.entries,
                static_cast<size_t>(n - head) * s_.entry_size);
    detail::shm_copy_done();
  }

  detail::ShmRingState s_;
};

}  // namespace droce::abi
