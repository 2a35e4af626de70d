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
// Threading: registration is control path; lookups happen on the owning
// lcore. The table is not internally synchronized.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "rocev2/verbs.h"

namespace droce::rocev2 {

struct Mr {
  uint32_t lkey = 0;
  uint32_t rkey = 0;
  uint32_t pd = 0;
  uint32_t access = 0;   ///< AccessFlags
  uint64_t va = 0;
  uint64_t length = 0;
  uint8_t* host = nullptr;
  bool valid = false;    ///< registered and not invalidated
  bool remote_key_valid = false;  ///< cleared by SEND_WITH_INV / LOCAL_INV
  /// Only fast-registration regions (and memory windows) may be invalidated
  /// (IBA 10.6.6; rxe refuses others): never one from an ordinary reg_mr.
  bool invalidatable = false;
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
  /// Deregisters by L_Key. -EINVAL if no such region.
  int dereg(uint32_t lkey);
  /// ibv_rereg_mr in place: the region with this L_Key takes the new PD,
  /// range, host mapping and access; its keys stay (as an HCA's do, so a peer
  /// that holds the R_Key keeps using it). -EINVAL for an unknown key or the
  /// access and range rules of reg().
  int rereg(uint32_t lkey, uint32_t pd, uint64_t va, uint64_t length, uint8_t* host, uint32_t access);

  /// The region with this key, or nullptr (unknown index, stale key byte, freed).
  Mr* find(uint32_t key) {
    const uint32_t i = key >> 8;
    if (i >= slots_.size()) return nullptr;
    Mr& mr = slots_[i];
    return (mr.valid && mr.lkey == key) ? &mr : nullptr;
  }

  /// Local access through an L_Key (a gather or scatter list entry).
  MrCheck check_local(uint32_t lkey, uint32_t pd, uint64_t va, uint64_t len, uint32_t need,
                      Mr** out);
  /// Remote access through an R_Key (RETH, AtomicETH).
  MrCheck check_remote(uint32_t rkey, uint32_t pd, uint64_t va, uint64_t len, uint32_t need,
                       Mr** out);

  /// SEND_WITH_INV / LOCAL_INV: the R_Key stops working. -EINVAL if unknown,
  /// of another PD, or not an invalidatable region.
  int invalidate(uint32_t rkey, uint32_t pd);

  size_t registered() const { return registered_; }

 private:
  static MrCheck bounds(const Mr& mr, uint64_t va, uint64_t len) {
    if (va < mr.va || len > mr.length || va - mr.va > mr.length - len) return MrCheck::out_of_bounds;
    return MrCheck::ok;
  }

  std::vector<Mr> slots_;
  // Free indexes, reused oldest first: an index comes back only after every
  // other free one has, so its 8-bit key byte repeats only after
  // 256 x (free slots) registrations, not 256 (a register/deregister per I/O).
  std::vector<uint32_t> free_;
  size_t free_head_ = 0;
  std::vector<uint8_t> key_byte_;
  size_t registered_ = 0;
};

/// The host pointer for va inside a checked region.
inline uint8_t* mr_host(const Mr& mr, uint64_t va) { return mr.host + (va - mr.va); }

}  // namespace droce::rocev2
