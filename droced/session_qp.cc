// Queue pairs: ibv_create_qp (the send and receive rings in one shared region), ibv_modify_qp
// (deferred while a neighbour is resolved), ibv_query_qp, ibv_destroy_qp.

#include <algorithm>
#include <cstring>

#include "droced/session_objects.h"
#include "core/log.h"

namespace droce::droced {

using namespace abi::ctl;

int Session::on_create_qp(const CreateQpRequest& q, CreateQpReply* out) {
  if (qps_.size() >= dev_->session_limits.max_qps) return -ENOMEM;
  if (std::find(pds_.begin(), pds_.end(), q.pd) == pds_.end()) return -EINVAL;
  const bool xrc_send = q.qp_type == uint8_t(rocev2::QpType::xrc_send);  // minor 12: a send queue only
  auto scq = cqs_.find(q.send_cq);
  auto rcq = cqs_.find(xrc_send ? q.send_cq : q.recv_cq);
  if (scq == cqs_.end() || rcq == cqs_.end()) return -EINVAL;
  SharedSrq* srq = nullptr;
  if (q.srq != 0) {
    auto it = srqs_.find(q.srq - 1);  // the wire's SRQ field is id + 1 (0: none)
    if (it == srqs_.end()) return -EINVAL;
    srq = it->second.get();
  }
  const bool raw = q.qp_type == uint8_t(rocev2::QpType::raw_packet);  // minor 14
  if (q.qp_type != uint8_t(rocev2::QpType::rc) && q.qp_type != uint8_t(rocev2::QpType::uc) &&
      q.qp_type != uint8_t(rocev2::QpType::ud) && !raw && (!xrc_send || srq != nullptr))
    return -EINVAL;
  // A raw packet QP sends any frame and receives others' traffic: the kernel keeps it for
  // CAP_NET_RAW (ib_uverbs' create_qp, EPERM), and so does droced (privileged_: the client's own).
  if (raw && !privileged_) return -EPERM;
  const rocev2::DeviceLimits& L = dev_->limits;
  if (q.max_send_wr == 0 || q.max_send_wr > L.max_qp_wr || q.max_send_sge > L.max_sge ||
      q.max_inline_data > L.max_inline_data ||
      (srq == nullptr && !xrc_send && (q.max_recv_wr == 0 || q.max_recv_wr > L.max_qp_wr)) ||
      q.max_recv_sge > L.max_sge)
    return -EINVAL;

  rocev2::QpInit init;
  init.type = static_cast<rocev2::QpType>(q.qp_type);
  init.pd = q.pd;
  init.send_cq = scq->second->cq;
  init.recv_cq = rcq->second->cq;
  init.srq = srq ? srq->srq : nullptr;
  init.cap = {q.max_send_wr, srq ? 0 : q.max_recv_wr, std::max(q.max_send_sge, 1u), std::max(q.max_recv_sge, 1u),
              q.max_inline_data};
  init.sq_sig_all = q.sq_sig_all != 0;
  if (q.flags & ~uint16_t{kQpBlockSelfMcastLoopback}) return -EINVAL;
  init.block_self_mcast_loopback = (q.flags & kQpBlockSelfMcastLoopback) != 0;

  auto s = std::make_unique<SharedQp>();
  const abi::ShmRingGeometry sq{pow2_at_least(init.cap.max_send_wr),
                                 abi::send_wqe_size(init.cap.max_send_sge, init.cap.max_inline_data)};
  const abi::ShmRingGeometry rq{pow2_at_least(std::max(init.cap.max_recv_wr, 1u)),
                                 abi::recv_wqe_size(init.cap.max_recv_sge)};
  const size_t sq_off = sizeof(abi::QueueDoorbellBlock);
  const size_t rq_off = align64(sq_off + abi::shm_ring_bytes(sq));
  s->has_rq = srq == nullptr && !xrc_send;
  const size_t total = s->has_rq ? rq_off + abi::shm_ring_bytes(rq) : rq_off;
  if (int rc = make_region("droce-qp", total, &s->region); rc != 0) return rc;
  auto* base = s->region.data();
  auto* block = reinterpret_cast<abi::QueueDoorbellBlock*>(base);
  std::span<std::byte> sq_mem{base + sq_off, abi::shm_ring_bytes(sq)};
  if (int rc = abi::shm_ring_format(sq_mem, sq); rc != 0) return rc;
  if (int rc = abi::ShmRingConsumer::attach(sq_mem, sq, &s->sq.ring); rc != 0) return rc;
  s->sq.pending = &block->sq_pending;
  s->sq.limits = {init.cap.max_send_sge, init.cap.max_inline_data};
  if (s->has_rq) {
    std::span<std::byte> rq_mem{base + rq_off, abi::shm_ring_bytes(rq)};
    if (int rc = abi::shm_ring_format(rq_mem, rq); rc != 0) return rc;
    if (int rc = abi::ShmRingConsumer::attach(rq_mem, rq, &s->rq.ring); rc != 0) return rc;
    s->rq.pending = &block->rq_pending;
    s->rq.limits = {init.cap.max_recv_sge, 0};
  }
  uint32_t qpn = 0;
  if (int rc = dev_->core->engine().create_qp(init, &qpn); rc != 0) return rc;
  s->qpn = qpn;
  s->type = init.type;
  s->send_cq = scq->second.get();
  s->recv_cq = rcq->second.get();
  ++s->send_cq->users;
  ++s->recv_cq->users;
  if (srq) {
    s->srq = srq;
    ++srq->users;
  }
  out->qpn = qpn;
  out->max_send_wr = init.cap.max_send_wr;
  out->max_recv_wr = init.cap.max_recv_wr;
  out->max_send_sge = init.cap.max_send_sge;
  out->max_recv_sge = init.cap.max_recv_sge;
  out->max_inline_data = init.cap.max_inline_data;
  out->sq_entries = sq.entry_count;
  out->sq_entry_size = sq.entry_size;
  out->rq_entries = s->has_rq ? rq.entry_count : 0;
  out->rq_entry_size = s->has_rq ? rq.entry_size : 0;
  out->sq_offset = sq_off;
  out->rq_offset = s->has_rq ? static_cast<uint32_t>(rq_off) : 0;
  out->region_bytes = s->region.size();
  dev_->qp_owner[qpn] = this;
  qps_[qpn] = std::move(s);
  return 0;
}

int Session::destroy_qp(uint32_t qpn) {
  if (holds_xrc_qp(qpn)) return close_xrc_qp(qpn);
  auto it = qps_.find(qpn);
  if (it == qps_.end()) return -EINVAL;
  int rc = dev_->core->engine().destroy_qp(qpn);
  if (rc != 0) return rc;
  std::erase_if(flows_, [qpn](const auto& f) { return f.second == qpn; });  // the engine dropped them
  SharedQp* q = it->second.get();
  --q->send_cq->users;
  --q->recv_cq->users;
  if (q->srq != nullptr) --q->srq->users;
  if (q->active) std::erase(active_qps_, q);
  qps_.erase(it);
  dev_->qp_owner.erase(qpn);
  return 0;
}


int Session::on_modify_qp(const ModifyQpRequest& r, uint64_t now_ns) {
  auto it = qps_.find(r.qpn);
  if (it == qps_.end() && !holds_xrc_qp(r.qpn)) return -EINVAL;
  rocev2::QpAttr a;
  if (!abi::from_wire(r.attr, &a)) return -EINVAL;
  // A Q_Key with its top bit set is controlled (IBA 10.2.5): QP1's 0x80010000 is one. With it an
  // unprivileged program could send MADs to every host's connection manager.
  if ((r.mask & rocev2::kAttrQkey) && (a.qkey & 0x80000000u) && !privileged_) return -EPERM;
  if (r.mask & rocev2::kAttrAv) {
    if (int rc = build_av(r.attr.ah_attr, &a.ah_attr); rc != 0) return rc;
    int err = 0;
    switch (dev_->core->resolve(&a.ah_attr, now_ns, &err)) {
      case net::ResolveStatus::pending: return 1;
      case net::ResolveStatus::failed: return err;  // EHOSTUNREACH, or ENETUNREACH: no route
      case net::ResolveStatus::resolved: break;
    }
  }
  rocev2::Engine& e = dev_->core->engine();
  const int rc = e.modify_qp(r.qpn, a, r.mask);
  if (rc == 0 && (r.mask & rocev2::kAttrState) && a.qp_state == rocev2::QpState::reset && it != qps_.end()) {
    // RESET empties the queues without completions: give back every slot
    // read so far; the engine's retire counts restart at zero.
    SharedQp& q = *it->second;
    for (SharedQueue* sq : {&q.sq, &q.rq}) {
      if (sq->pending == nullptr) continue;
      uint32_t got;
      (void)sq->ring.peek(sq->ahead, &got);
      sq->ring.release(std::min(got, sq->ahead));
      sq->ahead = sq->mark = sq->refused = 0;
      sq->backlog = false;
    }
  }
  return rc;
}

int Session::on_query_qp(uint32_t qpn, WireQpAttr* out) {
  if (qps_.find(qpn) == qps_.end() && !holds_xrc_qp(qpn)) return -EINVAL;
  rocev2::QpAttr a;
  rocev2::QpState st;
  if (int rc = dev_->core->engine().query_qp(qpn, &a, &st); rc != 0) return rc;
  a.qp_state = a.cur_qp_state = st;
  abi::to_wire(a, out);
  return 0;
}


template <>
void Session::serve<MsgType::create_qp>(const Control& c, const CreateQpRequest& q) {
  CreateQpReply r{};
  const int rc = on_create_qp(q, &r);
  const int fd = rc == 0 ? qps_.at(r.qpn)->region.fd() : -1;
  reply(c.h, rc, &r, sizeof r, std::span<const int>(&fd, rc == 0 ? 1 : 0));
}

template <>
void Session::serve<MsgType::modify_qp>(const Control& c, const ModifyQpRequest& q) {
  const int rc = on_modify_qp(q, c.now_ns);
  if (rc < 0)
    DROCE_LOG(DEBUG, app, "client %u: modify_qp %u (mask 0x%x): %s", id_, q.qpn, unsigned(q.mask),
              std::strerror(-rc));
  if (rc == 1) {  // waiting for a neighbour: poll_pending() replies
    pending_.active = true;
    pending_.header = c.h;
    pending_.modify = q;
    return;
  }
  reply(c.h, rc);
}

template <>
void Session::serve<MsgType::query_qp>(const Control& c, const IdRequest& q) {
  WireQpAttr r{};
  const int rc = on_query_qp(q.id, &r);
  reply(c.h, rc, &r, sizeof r);
}

template <>
void Session::serve<MsgType::destroy_qp>(const Control& c, const IdRequest& q) {
  reply(c.h, destroy_qp(q.id));
}

std::span<const Session::ControlEntry> Session::qp_controls() {
  static constexpr ControlEntry kEntries[] = {
      control<MsgType::create_qp, CreateQpRequest>(),
      control<MsgType::modify_qp, ModifyQpRequest>(),
      control<MsgType::query_qp, IdRequest>(),
      control<MsgType::destroy_qp, IdRequest>(),
  };
  return kEntries;
}

}  // namespace droce::droced
