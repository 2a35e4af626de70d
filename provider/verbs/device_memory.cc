// Device memory (ibv_alloc_dm(3)): a region droced makes and owns (a sealed memfd), mapped
// here and in droced. ibv_memcpy_to_dm / _from_dm copy into and out of this process's mapping;
// the engine reads and writes the same bytes through MRs registered on it (ibv_reg_dm_mr),
// which are zero-based: SGEs and RETHs address them by offset.
#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>

#include "provider/verbs/objects.h"

namespace droce::verbs {

namespace {

client::Dm* dm_of(ibv_dm* dm) { return static_cast<client::Dm*>(droce_object(dm)); }

// The range and granularity checks of both copies, as mlx5's (whose device memory takes
// 4-byte accesses only, and pyverbs expects): EFAULT outside the DM, EINVAL for an offset or
// length that is not a multiple of 4.
int check_copy(const client::Dm* d, uint64_t offset, size_t length) {
  if (offset > d->length() || length > d->length() - offset) return EFAULT;
  if ((offset & 3) || (length & 3)) return EINVAL;
  return 0;
}

// In 4-byte words, each copied whole: the engine may read or write the DM at the same time (a
// peer's RDMA READ or WRITE through a DM MR), and sees or leaves no torn word, as on a NIC's
// device memory.
int copy_to_dm(ibv_dm* dm, uint64_t offset, const void* host, size_t length) {
  client::Dm* d = dm_of(dm);
  if (int rc = check_copy(d, offset, length); rc != 0) return rc;
  auto* to = reinterpret_cast<uint32_t*>(d->data() + offset);
  const auto* from = static_cast<const uint8_t*>(host);
  for (size_t i = 0; i < length / 4; ++i) {
    uint32_t w;
    std::memcpy(&w, from + 4 * i, 4);
    std::atomic_ref<uint32_t>(to[i]).store(w, std::memory_order_relaxed);
  }
  std::atomic_thread_fence(std::memory_order_release);
  return 0;
}

int copy_from_dm(void* host, ibv_dm* dm, uint64_t offset, size_t length) {
  client::Dm* d = dm_of(dm);
  if (int rc = check_copy(d, offset, length); rc != 0) return rc;
  std::atomic_thread_fence(std::memory_order_acquire);
  auto* from = reinterpret_cast<uint32_t*>(d->data() + offset);
  auto* to = static_cast<uint8_t*>(host);
  for (size_t i = 0; i < length / 4; ++i) {
    const uint32_t w = std::atomic_ref<uint32_t>(from[i]).load(std::memory_order_relaxed);
    std::memcpy(to + 4 * i, &w, 4);
  }
  return 0;
}

// What a DM MR may allow (as mlx5's): local and remote access, zero-based; relaxed ordering
// and the other optional flags are dropped, as for reg_mr.
constexpr unsigned kDmMrAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                 IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ZERO_BASED;

}  // namespace

}  // namespace droce::verbs

using namespace droce;
using namespace droce::verbs;

extern "C" {

ibv_dm* droce_alloc_dm(ibv_context* context, ibv_alloc_dm_attr* attr) {
  if (attr == nullptr || attr->comp_mask != 0) return fail<ibv_dm>(EINVAL);
  VerbsContext* ctx = context_of(context);
  if (ctx->device.max_dm_size == 0) return fail<ibv_dm>(EOPNOTSUPP);  // a droced before minor 11
  auto* o = new (std::nothrow) Object<ibv_dm>();
  if (o == nullptr) return fail<ibv_dm>(ENOMEM);
  client::Dm* d = nullptr;
  if (int rc = ctx->client->alloc_dm(attr->length, attr->log_align_req, &d); rc != 0) {
    delete o;
    return fail<ibv_dm>(rc);
  }
  o->droce = d;
  o->obj.context = context;
  o->obj.memcpy_to_dm = copy_to_dm;
  o->obj.memcpy_from_dm = copy_from_dm;
  o->obj.handle = d->id();
  o->obj.comp_mask = IBV_DM_MASK_HANDLE;
  return &o->obj;
}

int droce_free_dm(ibv_dm* dm) {
  if (int rc = context_of(dm->context)->client->free_dm(dm_of(dm)); rc != 0) return positive(rc);  // EBUSY: an MR on it
  delete object_of(dm);
  return 0;
}

int droce_glue_reg_dm_mr(ibv_pd* pd, ibv_dm* dm, uint64_t dm_offset, size_t length, unsigned int access,
                         ibv_mr* mr) {
  if (pd == nullptr || dm == nullptr || mr == nullptr || dm->context != pd->context) return EINVAL;
  const unsigned a = access & ~unsigned{IBV_ACCESS_OPTIONAL_RANGE};
  // ibv_alloc_dm(3): a DM MR is zero-based, and the caller must say so.
  if (!(a & IBV_ACCESS_ZERO_BASED) || (a & ~kDmMrAccess)) return EINVAL;
  if ((a & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(a & IBV_ACCESS_LOCAL_WRITE)) return EINVAL;
  static_assert(uint32_t(IBV_ACCESS_ZERO_BASED) == uint32_t(abi::kAccessZeroBased));  // passed as they are
  uint32_t lkey = 0, rkey = 0;
  if (int rc = context_of(pd->context)->client->reg_dm_mr(pd->handle, dm_of(dm), dm_offset, length, a, &lkey, &rkey);
      rc != 0)
    return positive(rc);
  mr->context = pd->context;
  mr->pd = pd;
  mr->addr = nullptr;
  mr->length = length;
  mr->lkey = lkey;
  mr->rkey = rkey;
  mr->handle = lkey;
  return 0;
}

}  // extern "C"
