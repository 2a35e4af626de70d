#include "rocev2/mr.h"

#include <cerrno>

namespace droce::rocev2 {

MrTable::MrTable(uint32_t max_mrs) : slots_(max_mrs), key_byte_(max_mrs, 0) {
  free_.reserve(max_mrs);
  // Index 0 is never used: key 0 is what an uninitialized SGE carries.
  for (uint32_t i = 1; i < max_mrs; ++i) free_.push_back(i);
}

namespace {

// What reg() and rereg() both refuse: unknown access bits, remote write or
// atomic without local write (IBA 10.6.3.1), memory without a host mapping,
// a range that wraps the address space. FLUSH_GLOBAL is known; FLUSH_PERSISTENT
// is not (droce's regions are ordinary memory, never a persistence domain: rxe
// too refuses it on memory that is not pmem).
bool valid_region(uint64_t va, uint64_t length, const uint8_t* host, uint32_t access, bool odp = false) {
  constexpr uint32_t kKnown = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead |
                              kAccessRemoteAtomic | kAccessMwBind | kAccessZeroBased |
                              kAccessOnDemand | kAccessHugetlb | kAccessRelaxedOrdering | kAccessFlushGlobal;
  if (access & ~kKnown) return false;
  if ((access & (kAccessRemoteWrite | kAccessRemoteAtomic)) && !(access & kAccessLocalWrite)) return false;
  if (length != 0 && host == nullptr && !odp) return false;
  return va + length >= va;
}

}  // namespace

// The next free index, or 0 when the table is full.
uint32_t MrTable::take_slot() {
  if (free_head_ == free_.size()) return 0;
  const uint32_t i = free_[free_head_++];
  if (free_head_ > 1024 && free_head_ * 2 > free_.size()) {  // compact now and then
    free_.erase(free_.begin(), free_.begin() + static_cast<ptrdiff_t>(free_head_));
    free_head_ = 0;
  }
  return i;
}

int MrTable::reg(uint32_t pd, uint64_t va, uint64_t length, uint8_t* host, uint32_t access, Mr** out,
                 bool invalidatable) {
  if (!valid_region(va, length, host, access)) return -EINVAL;
  const uint32_t i = take_slot();
  if (i == 0) return -ENOMEM;
  const uint8_t kb = ++key_byte_[i];
  Mr& mr = slots_[i];
  mr = Mr{};
  mr.lkey = mr.rkey = (i << 8) | kb;
  mr.pd = pd;
  mr.access = access;
  mr.va = va;
  mr.length = length;
  mr.host = host;
  mr.valid = true;
  mr.remote_key_valid = true;
  mr.invalidatable = invalidatable;
  ++registered_;
  *out = &mr;
  return 0;
}

int MrTable::reg_odp(uint32_t pd, uint64_t va, uint64_t length, OdpMemory* odp, uint32_t access, Mr** out) {
  if (odp == nullptr || !valid_region(va, length, nullptr, access, true)) return -EINVAL;
  if (int rc = reg(pd, va, 0, nullptr, access, out); rc != 0) return rc;
  (*out)->length = length;
  (*out)->odp = odp;
  (*out)->odp_addr = va;
  ++odp_regions_;
  return 0;
}

int MrTable::rereg(uint32_t lkey, uint32_t pd, uint64_t va, uint64_t length, uint8_t* host, uint32_t access) {
  Mr* mr = find(lkey);
  // Windows bound to a region hold pointers into its mapping (IBA 10.6.7.2.6 forbids
  // deregistering it; moving it under them is no better).
  if (mr == nullptr || mr->is_mw() || mr->bound_mws != 0 || mr->invalidatable) return -EINVAL;
  const bool odp = mr->odp != nullptr;
  if ((odp && host != nullptr) || !valid_region(va, length, host, access, odp)) return -EINVAL;
  mr->pd = pd;
  mr->access = access;
  mr->va = va;
  mr->length = length;
  mr->host = host;
  if (odp) mr->odp_addr = va;
  mr->remote_key_valid = true;
  return 0;
}

int MrTable::dereg(uint32_t lkey) {
  Mr* mr = find(lkey);
  if (mr == nullptr || mr->is_mw() || mr->bound_mws != 0) return -EINVAL;  // IBA 10.6.7.2.6, as rxe
  mr->valid = false;
  mr->remote_key_valid = false;
  free_.push_back(lkey >> 8);
  --registered_;
  if (mr->odp != nullptr) --odp_regions_;
  return 0;
}

MrCheck MrTable::check_local(uint32_t lkey, uint32_t pd, uint64_t va, uint64_t len, uint32_t need, Mr** out) {
  Mr* mr = find(lkey);
  if (mr == nullptr || mr->is_mw()) return MrCheck::bad_key;  // a window has no L_Key
  if (mr->pd != pd) return MrCheck::wrong_pd;
  if ((mr->access & need) != need) return MrCheck::no_access;
  if (MrCheck c = bounds(*mr, va, len); c != MrCheck::ok) return c;
  *out = mr;
  return MrCheck::ok;
}

MrCheck MrTable::check_remote(uint32_t rkey, uint32_t pd, uint64_t va, uint64_t len, uint32_t need, Mr** out,
                              uint32_t qpn) {
  Mr* mr = find(rkey);
  if (mr == nullptr || !mr->remote_key_valid) return MrCheck::bad_key;
  if (mr->pd != pd) return MrCheck::wrong_pd;  // C9-88: the R_Key must belong to the QP's PD
  // A type 2 window answers only the QP it is bound to (IBA 10.6.7.3.2; rxe_lookup_mw).
  if (mr->mw_type == uint8_t(MwType::type2) && mr->mw_qpn != qpn) return MrCheck::wrong_pd;
  if ((mr->access & need) != need) return MrCheck::no_access;
  if (MrCheck c = bounds(*mr, va, len); c != MrCheck::ok) return c;
  *out = mr;
  return MrCheck::ok;
}

int MrTable::invalidate(uint32_t rkey, uint32_t pd, uint32_t qpn) {
  Mr* mr = find(rkey);
  if (mr == nullptr || mr->pd != pd) return -EINVAL;
  if (mr->is_mw()) {
    // o10-37.2.26: a type 1 window is never invalidated (it is unbound by a zero-length bind).
    if (mr->mw_type != uint8_t(MwType::type2) || !mr->remote_key_valid) return -EINVAL;
    if (qpn != 0 && mr->mw_qpn != qpn) return -EINVAL;
    unbind(*mr);
    return 0;
  }
  if (!mr->invalidatable || mr->bound_mws != 0) return -EINVAL;
  mr->remote_key_valid = false;
  return 0;
}

// ---- Memory windows --------------------------------------------------------------

int MrTable::alloc_mw(uint32_t pd, MwType type, uint32_t* rkey) {
  if (type != MwType::type1 && type != MwType::type2) return -EINVAL;
  const uint32_t i = take_slot();
  if (i == 0) return -ENOMEM;
  Mr& mw = slots_[i];
  mw = Mr{};
  mw.lkey = mw.rkey = (i << 8) | ++key_byte_[i];
  mw.pd = pd;
  mw.valid = true;
  mw.mw_type = uint8_t(type);
  ++registered_;
  *rkey = mw.rkey;
  return 0;
}

void MrTable::unbind(Mr& mw) {
  if (mw.mw_mr_index != 0) --slots_[mw.mw_mr_index].bound_mws;
  if (mw.mw_qpn != 0) --bound_type2_;
  mw.mw_mr_index = 0;
  mw.mw_qpn = 0;
  mw.remote_key_valid = false;
  mw.access = 0;
  mw.va = 0;
  mw.length = 0;
  mw.host = nullptr;
  mw.odp = nullptr;
  mw.odp_addr = 0;
}

void MrTable::unbind_qp(uint32_t qpn) {
  if (bound_type2_ == 0) return;
  for (Mr& mw : slots_)
    if (mw.valid && mw.mw_type == uint8_t(MwType::type2) && mw.remote_key_valid && mw.mw_qpn == qpn) unbind(mw);
}

int MrTable::dealloc_mw(uint32_t rkey) {
  Mr* mw = find(rkey);
  if (mw == nullptr || !mw->is_mw()) return -EINVAL;
  unbind(*mw);
  mw->valid = false;
  free_.push_back(rkey >> 8);
  --registered_;
  return 0;
}

int MrTable::bind_mw(const MwBind& b, uint32_t qp_pd, uint32_t qpn) {
  // Local write and MW_BIND mean nothing for a window; rxe accepts them (pyverbs binds with
  // LOCAL_WRITE | REMOTE_WRITE), so droce does too.
  constexpr uint32_t kMwAccess = kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic | kAccessZeroBased |
                                 kAccessLocalWrite | kAccessMwBind;
  Mr* mw = find(b.mw_rkey);
  if (mw == nullptr || !mw->is_mw() || mw->pd != qp_pd) return -EINVAL;  // C10-72
  if (b.access & ~kMwAccess) return -EINVAL;
  const bool type2 = mw->mw_type == uint8_t(MwType::type2);
  if (!type2 && (b.access & kAccessZeroBased)) return -EINVAL;           // o10-36.2.2
  if (type2 && mw->remote_key_valid) return -EINVAL;                     // o10-37.2.30
  if (type2 && b.length == 0) return -EINVAL;                            // o10-37.2.40
  Mr* mr = nullptr;
  if (b.length != 0) {
    mr = find(b.mr_lkey);
    if (mr == nullptr || mr->is_mw() || mr->pd != mw->pd) return -EINVAL;
    if (!(mr->access & kAccessMwBind)) return -EINVAL;                   // C10-73
    if ((b.access & (kAccessRemoteWrite | kAccessRemoteAtomic)) && !(mr->access & kAccessLocalWrite))
      return -EINVAL;                                                    // C10-74
    if (bounds(*mr, b.addr, b.length) != MrCheck::ok) return -EINVAL;    // C10-75
  }
  unbind(*mw);
  const uint32_t i = b.mw_rkey >> 8;
  const uint8_t tag = uint8_t(b.new_rkey & 0xff);
  key_byte_[i] = tag;
  mw->lkey = mw->rkey = (i << 8) | tag;
  if (mr == nullptr) return 0;  // a type 1 window bound to nothing: no access passes
  mw->access = b.access;
  mw->va = (b.access & kAccessZeroBased) ? 0 : b.addr;
  mw->length = b.length;
  if (mr->odp != nullptr) {  // the window reaches the application's pages as its region does
    mw->odp = mr->odp;
    mw->odp_addr = mr_odp_addr(*mr, b.addr);
  } else {
    mw->host = mr_host(*mr, b.addr);
  }
  mw->mw_mr_index = b.mr_lkey >> 8;
  mw->mw_qpn = type2 ? qpn : 0;
  if (type2) ++bound_type2_;
  mw->remote_key_valid = true;
  ++mr->bound_mws;
  return 0;
}

}  // namespace droce::rocev2
