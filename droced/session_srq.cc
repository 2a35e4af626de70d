// Shared receive queues: ibv_create_srq, ibv_modify_srq, ibv_query_srq, ibv_destroy_srq.

#include <algorithm>

#include "droced/session_objects.h"

namespace droce::droced {

using namespace abi::ctl;

int Session::on_create_srq(const CreateSrqRequest& q, CreateSrqReply* out, uint32_t xrcd, SharedCq* cq) {
  if (srqs_.size() >= dev_->session_limits.max_srqs) return -ENOMEM;
  if (std::find(pds_.begin(), pds_.end(), q.pd) == pds_.end()) return -EINVAL;
  if (q.max_wr == 0 || q.max_wr > dev_->limits.max_qp_wr || q.max_sge == 0 || q.max_sge > dev_->limits.max_sge)
    return -EINVAL;
  auto s = std::make_unique<SharedSrq>();
  const abi::ShmRingGeometry g{pow2_at_least(q.max_wr), abi::recv_wqe_size(q.max_sge)};
  const size_t ring_off = sizeof(abi::QueueDoorbellBlock);
  if (int rc = make_region("droce-srq", ring_off + abi::shm_ring_bytes(g), &s->region); rc != 0) return rc;
  std::span<std::byte> ring{s->region.data() + ring_off, abi::shm_ring_bytes(g)};
  if (int rc = abi::shm_ring_format(ring, g); rc != 0) return rc;
  if (int rc = abi::ShmRingConsumer::attach(ring, g, &s->rq.ring); rc != 0) return rc;
  s->rq.pending = &reinterpret_cast<abi::QueueDoorbellBlock*>(s->region.data())->rq_pending;
  s->rq.limits = {q.max_sge, 0};
  if (int rc = dev_->core->engine().create_srq(q.pd, q.max_wr, q.max_sge, &s->srq, xrcd, cq ? cq->cq : nullptr);
      rc != 0)
    return rc;
  if (q.srq_limit != 0 && s->srq->set_limit(q.srq_limit) != 0) {
    (void)dev_->core->engine().destroy_srq(s->srq);
    return -EINVAL;
  }
  out->srq_id = s->srq->id();
  out->max_wr = q.max_wr;
  out->max_sge = q.max_sge;
  out->ring_entries = g.entry_count;
  out->entry_size = g.entry_size;
  out->ring_offset = ring_off;
  out->region_bytes = s->region.size();
  dev_->srq_owner[out->srq_id] = this;
  s->xrcd = xrcd;
  s->cq = cq;
  if (cq != nullptr) ++cq->users;
  srqs_[out->srq_id] = std::move(s);
  return 0;
}

int Session::destroy_srq(uint32_t id) {
  auto it = srqs_.find(id);
  if (it == srqs_.end()) return -EINVAL;
  if (it->second->users != 0) return -EBUSY;
  int rc = dev_->core->engine().destroy_srq(it->second->srq);
  if (rc != 0) return rc;
  if (it->second->cq != nullptr) --it->second->cq->users;  // an XRC SRQ's CQ
  if (it->second->active) std::erase(active_srqs_, it->second.get());
  srqs_.erase(it);
  dev_->srq_owner.erase(id);
  return 0;
}


template <>
void Session::serve<MsgType::create_srq>(const Control& c, const CreateSrqRequest& q) {
  CreateSrqReply r{};
  const int rc = on_create_srq(q, &r);
  const int fd = rc == 0 ? srqs_.at(r.srq_id)->region.fd() : -1;
  reply(c.h, rc, &r, sizeof r, std::span<const int>(&fd, rc == 0 ? 1 : 0));
}

template <>
void Session::serve<MsgType::modify_srq>(const Control& c, const ModifySrqRequest& q) {
  auto it = srqs_.find(q.srq_id);
  if (it == srqs_.end() || (q.mask & ~3u) != 0) return reply(c.h, -EINVAL);
  // Resizing is not supported (as on many HCAs: IBV_DEVICE_SRQ_RESIZE unset).
  if (q.mask & 1u) return reply(c.h, -EINVAL);
  reply(c.h, (q.mask & 2u) ? it->second->srq->set_limit(q.srq_limit) : 0);
}

template <>
void Session::serve<MsgType::query_srq>(const Control& c, const IdRequest& q) {
  auto it = srqs_.find(q.id);
  if (it == srqs_.end()) return reply(c.h, -EINVAL);
  ModifySrqRequest r{};
  r.srq_id = q.id;
  r.max_wr = it->second->srq->depth();
  r.max_sge = it->second->srq->max_sge();
  r.srq_limit = it->second->srq->limit();
  reply(c.h, 0, &r, sizeof r);
}

template <>
void Session::serve<MsgType::destroy_srq>(const Control& c, const IdRequest& q) {
  reply(c.h, destroy_srq(q.id));
}

std::span<const Session::ControlEntry> Session::srq_controls() {
  static constexpr ControlEntry kEntries[] = {
      control<MsgType::create_srq, CreateSrqRequest>(),
      // Its first version: srq_id, mask, max_wr, srq_limit (16 bytes).
      control<MsgType::modify_srq, ModifySrqRequest, 16>(),
      control<MsgType::query_srq, IdRequest>(),
      control<MsgType::destroy_srq, IdRequest>(),
  };
  return kEntries;
}

}  // namespace droce::droced
