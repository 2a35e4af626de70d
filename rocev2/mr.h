#pragma once
// Memory regions: registration, L_Key/R_Key lookup and the checks every
// access makes (IBA 10.6, 11.2.8.x; C9-88 for R_Key checks at the responder).
//
// A key is (index << 8) | key byte. The key byte changes on every
// registration of an index, so a stale key from a freed region never matches
// its successor. Lookup is an array index plus a compare.
//
// An MR maps the application's virtual range [va, va + length) to `host`,
// where the engine's process sees the same bytes (in droced, the shared
// mapping of the application's memory; in tests, the same pointer).
//
// Memory windows (IBA 10.6.7) live in the same table and key space: a
// window's slot holds the range it is bound to (its `host` points into the
// bound MR's mapping), so the responder checks an MW's R_Key exactly as an
// MR's. A window has no L_Key (check_local refuses it). Each bind replaces
// the key's low 8 bits with the tag the bind asks for (ibv_inc_rkey), so the
// key of an earlier binding stops matching. A zero-based window (type 2 only,
// o10-36.2.2) is kept with va 0: remote addresses are offsets into it.
//
// On-demand paging (IBV_ACCESS_ON_DEMAND): an ODP region has no `host`
// mapping at all. The engine reaches its bytes through an OdpMemory that the
// owner of the registration supplies (droced: the application's
// /proc/<pid>/mem, so pages fault in the application's address space when
// first touched and nothing is pinned or mapped here). A window bound to an
// ODP region reaches it through the same OdpMemory. The copy helpers below
// (mr_read, mr_write) branch once on `odp`: pinned regions keep their memcpy.
//
// Threading: registration is control path; lookups happen on the owning
// lcore. The table is not internally synchronized.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "rocev2/verbs.h"

namespace droce::rocev2 {

/// How the engine reads and writes an on-demand-paged region: by the
/// application's own virtual address. Implementations may make a system call;
/// they are called only for ODP regions, on the lcore that owns the table.
///
/// Page faults, as an HCA takes them: before it touches a range the engine asks
/// ready(). An implementation that would have to wait for the application's
/// pages (not present: swap, a file, a page never touched) answers "not now"
/// and brings them in elsewhere, off the engine's lcore; the engine then parks
/// what needed them (a request held, a READ's responses paused, a send not yet
/// built, a response dropped to be asked for again) and asks again on its ODP
/// timer (Engine: kOdpTimer, 16 us after a fault begins, backing off to 1 ms
/// while one is still on its way). Nothing the peer sees changes but time: no
/// NAK, no retry spent. read() and write() after `now` should not wait on I/O;
/// they may still fail (EIO: unmapped).
enum class OdpReady : uint8_t {
  now,       ///< copy now
  faulting,  ///< not in: bringing them in began with this answer
  waiting,   ///< not in: still on the way (an earlier answer began it)
};

class OdpMemory {
 public:
  /// Whether [addr, addr + n) can be copied now without waiting on a fault
  /// (`write`: for writing). `ahead`: bytes after the range that the same
  /// operation reaches next, at the addresses that follow (a WRITE's rest, a
  /// READ's); a fault may bring them in too, as an HCA's ODP fault prefetches
  /// the operation's range. A range that can never come in (unmapped) must
  /// eventually answer `now`, so that the read or write that follows fails and
  /// becomes the access error.
  virtual OdpReady ready(uint64_t addr, size_t n, bool write, uint64_t ahead) {
    (void)addr, (void)n, (void)write, (void)ahead;
    return OdpReady::now;
  }
  /// Copies `n` bytes at the application's address `addr` to `dst`. False when
  /// any byte of the range is not mapped (or not readable) in the application:
  /// the caller turns it into an access error, never a crash.
  virtual bool read(uint64_t addr, void* dst, size_t n) = 0;
  /// Copies `n` bytes from `src` to the application's address `addr`. False
  /// as read(); bytes before the failing page may have been written.
  virtual bool write(uint64_t addr, const void* src, size_t n) = 0;

 protected:
  ~OdpMemory() = default;
};

struct Mr {
  uint32_t lkey = 0;
  uint32_t rkey = 0;
  uint32_t pd = 0;
  uint32_t access = 0;   ///< AccessFlags
  uint64_t va = 0;
  uint64_t length = 0;
  uint8_t* host = nullptr;  ///< nullptr for an ODP region (odp is set instead)
  /// On-demand paging: the application's memory is reached through `odp`, at
  /// `odp_addr` for `va` (a region's own va; a window's bound address).
  OdpMemory* odp = nullptr;
  uint64_t odp_addr = 0;
  bool valid = false;    ///< registered and not invalidated
  bool remote_key_valid = false;  ///< cleared by SEND_WITH_INV / LOCAL_INV
  /// Only fast-registration regions (and memory windows) may be invalidated
  /// (IBA 10.6.6; rxe refuses others): never one from an ordinary reg_mr.
  bool invalidatable = false;
  /// Memory windows: the type (0 for a region), the QP a bound type 2
  /// window belongs to (C10-?: only it may use the key), the bound region's
  /// slot index; on a region, how many windows are bound to it.
  uint8_t mw_type = 0;
  uint32_t mw_qpn = 0;
  uint32_t mw_mr_index = 0;
  uint32_t bound_mws = 0;
  bool is_mw() const { return mw_type != 0; }
};

/// A bind (IBV_WR_BIND_MW, or ibv_bind_mw's type 1 bind), as the engine
/// executes it.
struct MwBind {
  uint32_t mw_rkey = 0;   ///< the window's current R_Key
  uint32_t new_rkey = 0;  ///< its low 8 bits become the window's new tag
  uint32_t mr_lkey = 0;   ///< the region to bind to (unused with length 0)
  uint64_t addr = 0;
  uint64_t length = 0;
  uint32_t access = 0;    ///< remote read/write/atomic, zero-based
};

/// Why an access was refused; each maps to a completion status or NAK.
enum class MrCheck : uint8_t { ok, bad_key, wrong_pd, out_of_bounds, no_access };

class MrTable {
 public:
  explicit MrTable(uint32_t max_mrs = 1u << 16);

  /// Registers [va, va + length) seen at `host`. Returns 0 and *out, or
  /// -ENOMEM (table full), -EINVAL (bad access flags: remote write or atomic
  /// without local write, C10-? of IBA 10.6.3.1; length 0 with host null is allowed).
  int reg(uint32_t pd, uint64_t va, uint64_t length, uint8_t* host, uint32_t access, Mr** out,
          bool invalidatable = false);
  /// Registers an on-demand-paged region: [va, va + length) of the
  /// application, reached through `odp` at the same addresses (never
  /// dereferenced here). va 0 and length UINT64_MAX is implicit ODP (the
  /// whole address space). Errors as reg(); -EINVAL without `odp`.
  int reg_odp(uint32_t pd, uint64_t va, uint64_t length, OdpMemory* odp, uint32_t access, Mr** out);
  /// Deregisters by L_Key. -EINVAL if no such region.
  int dereg(uint32_t lkey);
  /// ibv_rereg_mr in place: the region with this L_Key takes the new PD,
  /// range, host mapping and access; its keys stay (as an HCA's do, so a peer
  /// that holds the R_Key keeps using it). -EINVAL for an unknown key or the
  /// access and range rules of reg(). An ODP region stays one (host must be
  /// nullptr): its new range is reached through the same OdpMemory.
  int rereg(uint32_t lkey, uint32_t pd, uint64_t va, uint64_t length, uint8_t* host, uint32_t access);

  /// The region with this key, or nullptr (unknown index, stale key byte, freed).
  Mr* find(uint32_t key) {
    const uint32_t i = key >> 8;
    if (i >= slots_.size()) return nullptr;
    Mr& mr = slots_[i];
    return (mr.valid && mr.lkey == key) ? &mr : nullptr;
  }

  /// ibv_alloc_mw: a window of `type` on `pd`, unbound (type 1 windows are
  /// valid but of length 0, so no access passes). -ENOMEM when full.
  int alloc_mw(uint32_t pd, MwType type, uint32_t* rkey);
  /// ibv_dealloc_mw by the window's current R_Key; a bound window is unbound
  /// first (as rxe). -EINVAL if no such window.
  int dealloc_mw(uint32_t rkey);
  /// Executes a bind posted on QP `qpn` of PD `qp_pd`. -EINVAL for every rule
  /// it breaks (the caller completes the WR with IBV_WC_MW_BIND_ERR): an
  /// unknown or stale window key, another PD's window or region, a type 1
  /// zero-based bind (o10-36.2.2), a bound type 2 window (o10-37.2.30) or one
  /// bound with no region or length 0 (o10-37.2.40), a region without
  /// IBV_ACCESS_MW_BIND (C10-73) or without local write for a writable or
  /// atomic window (C10-74), a range outside the region (C10-75), access
  /// bits other than remote access, zero-based, local write and MW_BIND
  /// (the last two accepted and meaningless, as rxe).
  int bind_mw(const MwBind& b, uint32_t qp_pd, uint32_t qpn);

  /// Local access through an L_Key (a gather or scatter list entry).
  MrCheck check_local(uint32_t lkey, uint32_t pd, uint64_t va, uint64_t len, uint32_t need,
                      Mr** out);
  /// Remote access through an R_Key (RETH, AtomicETH) arriving on QP `qpn`
  /// (a type 2 window answers only the QP it is bound to).
  MrCheck check_remote(uint32_t rkey, uint32_t pd, uint64_t va, uint64_t len, uint32_t need,
                       Mr** out, uint32_t qpn = 0);

  /// SEND_WITH_INV / LOCAL_INV: the R_Key stops working. -EINVAL if unknown,
  /// of another PD, not an invalidatable region, a type 1 window (o10-37.2.26),
  /// or a window not bound. A type 2 window becomes free to bind again.
  /// `qpn` nonzero (a SEND with invalidate arriving): a type 2 window must be
  /// bound to that QP.
  int invalidate(uint32_t rkey, uint32_t pd, uint32_t qpn = 0);

  /// The current key of slot `index`, 0 when it holds nothing (droced frees a client's
  /// windows by index: each bind changed their tag).
  uint32_t key_at(uint32_t index) const {
    return index < slots_.size() && slots_[index].valid ? slots_[index].lkey : 0;
  }
  /// The QP went: type 2 windows bound to it are unbound (its QPN may come back).
  void unbind_qp(uint32_t qpn);

  size_t registered() const { return registered_; }
  /// Whether any on-demand-paged region is registered: the data path asks ODP's questions
  /// (Engine::sges_ready) only then.
  bool has_odp() const { return odp_regions_ != 0; }

 private:
  static MrCheck bounds(const Mr& mr, uint64_t va, uint64_t len) {
    if (va < mr.va || len > mr.length || va - mr.va > mr.length - len) return MrCheck::out_of_bounds;
    return MrCheck::ok;
  }

  uint32_t take_slot();
  void unbind(Mr& mw);

  std::vector<Mr> slots_;
  // Free indexes, reused oldest first: an index comes back only after every
  // other free one has, so its 8-bit key byte repeats only after
  // 256 x (free slots) registrations, not 256 (a register/deregister per I/O).
  std::vector<uint32_t> free_;
  size_t free_head_ = 0;
  std::vector<uint8_t> key_byte_;
  size_t registered_ = 0;
  size_t odp_regions_ = 0;
  size_t bound_type2_ = 0;  ///< type 2 windows bound to a QP (unbind_qp skips its scan without)
};

/// The host pointer for va inside a checked region (not an ODP one).
inline uint8_t* mr_host(const Mr& mr, uint64_t va) { return mr.host + (va - mr.va); }
/// The application's address of va inside a checked ODP region.
inline uint64_t mr_odp_addr(const Mr& mr, uint64_t va) { return mr.odp_addr + (va - mr.va); }

/// Whether [va, va + n) of a checked region can be copied without waiting on a
/// page fault (OdpMemory::ready; always for pinned regions). `ahead` is bounded
/// by the region's end.
inline OdpReady mr_ready(const Mr& mr, uint64_t va, size_t n, bool write, uint64_t ahead = 0) {
  if (mr.odp == nullptr) [[likely]] return OdpReady::now;
  const uint64_t room = mr.length - (va - mr.va) - n;  // va and n are inside the region
  return mr.odp->ready(mr_odp_addr(mr, va), n, write, ahead < room ? ahead : room);
}

/// Copies [va, va + n) of a checked region to dst. False only for an ODP
/// region whose pages are not all mapped in the application.
inline bool mr_read(const Mr& mr, uint64_t va, void* dst, size_t n) {
  if (mr.odp == nullptr) [[likely]] {
    std::memcpy(dst, mr_host(mr, va), n);
    return true;
  }
  return mr.odp->read(mr_odp_addr(mr, va), dst, n);
}
/// Copies src to [va, va + n) of a checked region; false as mr_read.
inline bool mr_write(const Mr& mr, uint64_t va, const void* src, size_t n) {
  if (mr.odp == nullptr) [[likely]] {
    std::memcpy(mr_host(mr, va), src, n);
    return true;
  }
  return mr.odp->write(mr_odp_addr(mr, va), src, n);
}

}  // namespace droce::rocev2
