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
// a range that wraps the address space.
bool valid_region(uint64_t va, uint64_t length, const uint8_t* host, uint32_t access) {
  constexpr uint32_t kKnown = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead |
                              kAccessRemoteAtomic | kAccessMwBind | kAccessZeroBased |
                              kAccessOnDemand | kAccessHugetlb | kAccessRelaxedOrdering;
  if (access & ~kKnown) return false;
  if ((access & (kAccessRemoteWrite | kAccessRemoteAtomic)) && !(access & kAccessLocalWrite)) return false;
  if (length != 0 && host == nullptr) return false;
  return va + length >= va;
}

}  // namespace

int MrTable::reg(uint32_t pd, uint64_t va, uint64_t length, uint8_t* host, uint32_t access, Mr** out,
                 bool invalidatable) {
  if (!valid_region(va, length, host, access)) return -EINVAL;
  if (free_head_ == free_.size()) return -ENOMEM;
  const uint32_t i = free_[free_head_++];
  if (free_head_ > 1024 && free_head_ * 2 > free_.size()) {  // compact now and then
    free_.erase(free_.begin(), free_.begin() + static_cast<ptrdiff_t>(free_head_));
    free_head_ = 0;
  }
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

int MrTable::rereg(uint32_t lkey, uint32_t pd, uint64_t va, uint64_t length, uint8_t* host, uint32_t access) {
  Mr* mr = find(lkey);
  if (mr == nullptr || mr->invalidatable || !valid_region(va, length, host, access)) return -EINVAL;
  mr->pd = pd;
  mr->access = access;
  mr->va = va;
  mr->length = length;
  mr->host = host;
  mr->remote_key_valid = true;
  return 0;
}

int MrTable::dereg(uint32_t lkey) {
  Mr* mr = find(lkey);
  if (mr == nullptr) return -EINVAL;
  mr->valid = false;
  mr->remote_key_valid = false;
  free_.push_back(lkey >> 8);
  --registered_;
  return 0;
}

MrCheck MrTable::check_local(uint32_t lkey, uint32_t pd, uint64_t va, uint64_t len, uint32_t need, Mr** out) {
  Mr* mr = find(lkey);
  if (mr == nullptr) return MrCheck::bad_key;
  if (mr->pd != pd) return MrCheck::wrong_pd;
  if ((mr->access & need) != need) return MrCheck::no_access;
  if (MrCheck c = bounds(*mr, va, len); c != MrCheck::ok) return c;
  *out = mr;
  return MrCheck::ok;
}

MrCheck MrTable::check_remote(uint32_t rkey, uint32_t pd, uint64_t va, uint64_t len, uint32_t need, Mr** out) {
  Mr* mr = find(rkey);
  if (mr == nullptr || !mr->remote_key_valid) return MrCheck::bad_key;
  if (mr->pd != pd) return MrCheck::wrong_pd;  // C9-88: the R_Key must belong to the QP's PD
  if ((mr->access & need) != need) return MrCheck::no_access;
  if (MrCheck c = bounds(*mr, va, len); c != MrCheck::ok) return c;
  *out = mr;
  return MrCheck::ok;
}

int MrTable::invalidate(uint32_t rkey, uint32_t pd) {
  Mr* mr = find(rkey);
  if (mr == nullptr || mr->pd != pd || !mr->invalidatable) return -EINVAL;
  mr->remote_key_valid = false;
  return 0;
}

}  // namespace droce::rocev2
