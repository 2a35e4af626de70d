// Device memory: ibv_alloc_dm, ibv_free_dm, ibv_reg_dm_mr. A NIC's device memory is on-chip
// memory the host maps; droce's is a sealed memfd droced makes and maps, whose descriptor the
// client maps as well: the client copies in and out of it (ibv_memcpy_to_dm/_from_dm), the
// engine reads and writes it through zero-based MRs registered here. droced owns the file, so
// no client can shrink it under the engine (it is sealed before it is handed out).

#include <algorithm>

#include "droced/session_objects.h"
#include "core/log.h"

namespace droce::droced {

using namespace abi::ctl;

namespace {

// What an MR on device memory may allow (as mlx5's DM MRs): local and remote access; it is
// always zero-based (ibv_alloc_dm(3)).
constexpr uint32_t kDmMrAccess = abi::kAccessLocalWrite | abi::kAccessRemoteWrite | abi::kAccessRemoteRead |
                                 abi::kAccessRemoteAtomic | abi::kAccessZeroBased;

}  // namespace

template <>
void Session::serve<MsgType::alloc_dm>(const Control& c, const AllocDmRequest& q) {
  const uint64_t max = dev_->session_limits.max_dm_bytes;
  if (q.length == 0) return reply(c.h, -EINVAL);
  if (q.length > max) return reply(c.h, -ENOMEM);  // more device memory than there is (as mlx5's MEMIC)
  // The region starts on a page: any alignment up to that holds.
  if ((uint64_t{1} << std::min<uint32_t>(q.log_align, 63)) > core::page_size()) return reply(c.h, -EINVAL);
  const uint64_t bytes = (q.length + core::page_size() - 1) / core::page_size() * core::page_size();
  if (dms_.size() >= dev_->session_limits.max_dms || bytes > max - std::min(dm_bytes_, max))
    return reply(c.h, -ENOMEM);
  auto d = std::make_unique<DmEntry>();
  if (int rc = make_region("droce-dm", bytes, &d->region); rc != 0) return reply(c.h, rc);
  d->length = q.length;
  AllocDmReply r{};
  r.dm_id = next_dm_id_++;
  r.region_bytes = d->region.size();
  const int fd = d->region.fd();
  dm_bytes_ += d->region.size();
  dms_[r.dm_id] = std::move(d);
  reply(c.h, 0, &r, sizeof r, std::span<const int>(&fd, 1));
}

template <>
void Session::serve<MsgType::free_dm>(const Control& c, const IdRequest& q) {
  auto it = dms_.find(q.id);
  if (it == dms_.end()) return reply(c.h, -EINVAL);
  if (it->second->mrs != 0) return reply(c.h, -EBUSY);  // ibv_alloc_dm(3): an MR still on it
  dm_bytes_ -= it->second->region.size();
  dms_.erase(it);
  reply(c.h, 0);
}

template <>
void Session::serve<MsgType::reg_dm_mr>(const Control& c, const RegDmMrRequest& q) {
  if (std::find(pds_.begin(), pds_.end(), q.pd) == pds_.end()) return reply(c.h, -EINVAL);
  auto it = dms_.find(q.dm_id);
  if (it == dms_.end()) return reply(c.h, -EINVAL);
  DmEntry& d = *it->second;
  if (!(q.access & abi::kAccessZeroBased) || (q.access & ~kDmMrAccess)) return reply(c.h, -EINVAL);
  if (q.offset > d.length || q.length > d.length - q.offset) return reply(c.h, -EINVAL);
  if (mrs_.size() >= dev_->session_limits.max_mrs) return reply(c.h, -ENOMEM);
  rocev2::Mr* mr = nullptr;
  // Zero-based: the region is addressed from 0 (va 0), its bytes start at the offset.
  const int rc = dev_->core->engine().reg_mr(q.pd, 0, q.length, reinterpret_cast<uint8_t*>(d.region.data()) + q.offset,
                                             q.access, &mr);
  if (rc != 0) return reply(c.h, rc);
  auto m = std::make_unique<MrEntry>();
  m->lkey = mr->lkey;
  m->rkey = mr->rkey;
  m->dm = q.dm_id;
  ++d.mrs;
  RegMrReply r{mr->lkey, mr->rkey};
  mrs_[mr->lkey] = std::move(m);
  reply(c.h, 0, &r, sizeof r);
}

void Session::dm_mr_gone(uint32_t dm) {
  auto it = dms_.find(dm);
  if (it != dms_.end() && it->second->mrs != 0) --it->second->mrs;
}

std::span<const Session::ControlEntry> Session::dm_controls() {
  static constexpr ControlEntry kEntries[] = {
      control<MsgType::alloc_dm, AllocDmRequest>(),
      control<MsgType::free_dm, IdRequest>(),
      control<MsgType::reg_dm_mr, RegDmMrRequest>(),
  };
  return kEntries;
}

}  // namespace droce::droced
