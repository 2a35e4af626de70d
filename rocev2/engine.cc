// The engine's control path (resources, modify, post) and the machinery the
// three roles share: frame building, completions, the error flush, timers
// and the loop itself. The roles live in requester.cc, completer.cc and
// responder.cc.

#include "rocev2/engine.h"

#include <algorithm>
#include <cerrno>

#include "core/endian.h"
#include "net/frame_bytes.h"
#include "rocev2/builder.h"
#include "rocev2/icrc.h"
#include "rocev2/probes.h"
#include "rocev2/qp_modify.h"

namespace droce::rocev2 {

namespace {

WcOpcode wc_opcode_of(WrOpcode op) {
  switch (op) {
    case WrOpcode::rdma_write:
    case WrOpcode::rdma_write_with_imm: return WcOpcode::rdma_write;
    case WrOpcode::rdma_read: return WcOpcode::rdma_read;
    case WrOpcode::atomic_cmp_and_swp: return WcOpcode::comp_swap;
    case WrOpcode::atomic_fetch_and_add: return WcOpcode::fetch_add;
    case WrOpcode::local_inv: return WcOpcode::local_inv;
    case WrOpcode::bind_mw: return WcOpcode::bind_mw;
    case WrOpcode::flush: return WcOpcode::flush;
    case WrOpcode::atomic_write: return WcOpcode::atomic_write;
    default: return WcOpcode::send;
  }
}

uint16_t sport_for(uint32_t qpn) {
  // Flow entropy per QP (Annex A17.4.3.2): 0xC000 | 14 bits, stable for the QP.
  uint32_t h = qpn * 0x9e3779b1u;
  return static_cast<uint16_t>(0xc000 | ((h >> 18) & 0x3fff));
}

bool valid_for_type(QpType t, WrOpcode op) {
  switch (t) {
    case QpType::ud: return op == WrOpcode::send || op == WrOpcode::send_with_imm;
    case QpType::uc:
      return op == WrOpcode::send || op == WrOpcode::send_with_imm || op == WrOpcode::rdma_write ||
             op == WrOpcode::rdma_write_with_imm || op == WrOpcode::local_inv || op == WrOpcode::bind_mw;
    case QpType::rc:
      return op == WrOpcode::send || op == WrOpcode::send_with_imm || op == WrOpcode::send_with_inv ||
             op == WrOpcode::rdma_write || op == WrOpcode::rdma_write_with_imm ||
             op == WrOpcode::rdma_read || op == WrOpcode::atomic_cmp_and_swp ||
             op == WrOpcode::atomic_fetch_and_add || op == WrOpcode::local_inv || op == WrOpcode::bind_mw ||
             op == WrOpcode::flush || op == WrOpcode::atomic_write;
    case QpType::xrc_send:  // RC's operations without IBA 1.5's (XRC has no opcodes for them)
      return valid_for_type(QpType::rc, op) && op != WrOpcode::flush && op != WrOpcode::atomic_write;
    case QpType::xrc_recv: return false;  // no send queue
    case QpType::raw_packet: return op == WrOpcode::send;  // the frame is the message
  }
  return false;
}

}  // namespace

uint64_t rnr_timer_ns(uint8_t code) {
  // IBA table 45, in microseconds; code 0 is 655.36 ms.
  static constexpr uint32_t kUs100[32] = {
      65536, 1,    2,    3,    4,    6,    8,     12,    16,    24,    32,
      48,    64,   96,   128,  192,  256,  384,   512,   768,   1024,  1536,
      2048,  3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152};
  return uint64_t{kUs100[code & 31]} * 10000;  // units of 10 us -> ns
}

Engine::Engine(const EngineConfig& cfg) : cfg_(cfg), mrs_(cfg.max_mrs), ready_(std::max<uint32_t>(1, cfg.max_qps)) {
  qps_.resize(cfg.max_qps);
  for (uint32_t i = 0; i < cfg.max_qps; ++i) free_qp_slots_.push_back(i);
  pd_refs_.push_back(0);  // PD 0 is never handed out
  pd_used_.push_back(false);
  ahs_.emplace_back();
  ah_used_.push_back(false);
  ah_pd_.push_back(0);
  tx_.reserve(cfg.tx_budget + 64);
}

Engine::~Engine() {
  for (rte_mbuf* m : tx_) rte_pktmbuf_free(m);
  for (auto& q : qps_)
    if (q) drop_held(q.get());
  if (gsi_) drop_held(gsi_.get());
}

// ---- Resources -----------------------------------------------------------------

int Engine::alloc_pd(uint32_t* pd) {
  for (uint32_t i = 1; i < pd_used_.size(); ++i) {
    if (!pd_used_[i]) {
      pd_used_[i] = true;
      pd_refs_[i] = 0;
      *pd = i;
      return 0;
    }
  }
  pd_used_.push_back(true);
  pd_refs_.push_back(0);
  *pd = static_cast<uint32_t>(pd_used_.size() - 1);
  return 0;
}

int Engine::dealloc_pd(uint32_t pd) {
  if (pd == 0 || pd >= pd_used_.size() || !pd_used_[pd]) return -EINVAL;
  if (pd_refs_[pd] != 0) return -EBUSY;
  pd_used_[pd] = false;
  return 0;
}

int Engine::reg_mr(uint32_t pd, uint64_t va, uint64_t length, uint8_t* host, uint32_t access, Mr** out,
                   bool invalidatable) {
  if (pd == 0 || pd >= pd_used_.size() || !pd_used_[pd]) return -EINVAL;
  int rc = mrs_.reg(pd, va, length, host, access, out, invalidatable);
  if (rc == 0) ++pd_refs_[pd];
  return rc;
}

int Engine::reg_odp_mr(uint32_t pd, uint64_t va, uint64_t length, OdpMemory* odp, uint32_t access, Mr** out) {
  if (pd == 0 || pd >= pd_used_.size() || !pd_used_[pd]) return -EINVAL;
  int rc = mrs_.reg_odp(pd, va, length, odp, access, out);
  if (rc == 0) ++pd_refs_[pd];
  return rc;
}

int Engine::rereg_mr(uint32_t lkey, uint32_t pd, uint64_t va, uint64_t length, uint8_t* host, uint32_t access) {
  if (pd == 0 || pd >= pd_used_.size() || !pd_used_[pd]) return -EINVAL;
  Mr* mr = mrs_.find(lkey);
  if (mr == nullptr) return -EINVAL;
  const uint32_t old_pd = mr->pd;
  int rc = mrs_.rereg(lkey, pd, va, length, host, access);
  if (rc == 0 && old_pd != pd) {
    --pd_refs_[old_pd];
    ++pd_refs_[pd];
  }
  return rc;
}

int Engine::dereg_mr(uint32_t lkey) {
  Mr* mr = mrs_.find(lkey);
  if (mr == nullptr) return -EINVAL;
  const uint32_t pd = mr->pd;
  int rc = mrs_.dereg(lkey);
  if (rc == 0) --pd_refs_[pd];
  return rc;
}

int Engine::alloc_mw(uint32_t pd, MwType type, uint32_t* rkey) {
  if (pd == 0 || pd >= pd_used_.size() || !pd_used_[pd]) return -EINVAL;
  int rc = mrs_.alloc_mw(pd, type, rkey);
  if (rc == 0) ++pd_refs_[pd];
  return rc;
}

int Engine::dealloc_mw(uint32_t rkey) {
  Mr* mw = mrs_.find(rkey);
  if (mw == nullptr || !mw->is_mw()) return -EINVAL;
  const uint32_t pd = mw->pd;
  int rc = mrs_.dealloc_mw(rkey);
  if (rc == 0) --pd_refs_[pd];
  return rc;
}

namespace {
// The first free slot of an object table (control path: a scan is fine), so
// ids are reused and the table stays as large as the most objects alive.
template <class T>
uint32_t free_slot(std::vector<std::unique_ptr<T>>& table) {
  for (uint32_t i = 0; i < table.size(); ++i)
    if (!table[i]) return i;
  table.emplace_back();
  return static_cast<uint32_t>(table.size() - 1);
}
}  // namespace

int Engine::create_cq(uint32_t depth, Cq** out, CqSink* sink) {
  if (depth == 0 || depth > cfg_.limits.max_cqe) return -EINVAL;
  const uint32_t id = free_slot(cqs_);
  cqs_[id] = std::make_unique<Cq>(id, depth, sink);
  *out = cqs_[id].get();
  return 0;
}

int Engine::destroy_cq(Cq* cq) {
  for (auto& q : qps_)
    if (q && (q->send_cq == cq || q->recv_cq == cq)) return -EBUSY;
  for (auto& s : srqs_)
    if (s && s->cq() == cq) return -EBUSY;
  if (gsi_ && (gsi_->send_cq == cq || gsi_->recv_cq == cq)) return -EBUSY;
  for (auto& c : cqs_) {
    if (c.get() == cq) {
      c.reset();
      return 0;
    }
  }
  return -EINVAL;
}

int Engine::create_srq(uint32_t pd, uint32_t max_wr, uint32_t max_sge, Srq** out, uint32_t xrcd, Cq* cq) {
  if (pd == 0 || pd >= pd_used_.size() || !pd_used_[pd]) return -EINVAL;
  if (max_wr == 0 || max_wr > cfg_.limits.max_qp_wr || max_sge == 0 || max_sge > cfg_.limits.max_sge)
    return -EINVAL;
  if (xrcd != 0 && cq == nullptr) return -EINVAL;
  const uint32_t id = free_slot(srqs_);
  srqs_[id] = std::make_unique<Srq>(id, pd, max_wr, max_sge, xrcd, xrcd != 0 ? cq : nullptr);
  ++pd_refs_[pd];
  *out = srqs_[id].get();
  return 0;
}

int Engine::destroy_srq(Srq* srq) {
  for (auto& q : qps_)
    if (q && q->srq == srq && q->type != QpType::xrc_recv) return -EBUSY;
  for (auto& q : qps_) {
    if (!q || q->srq != srq) continue;
    // An XRC receive QP served it last: it lets go (its CQ with it); a message in progress
    // whose receive came from it completes nowhere.
    q->srq = nullptr;
    q->recv_cq = nullptr;
  }
  if (gsi_ && gsi_->srq == srq) return -EBUSY;
  for (auto& s : srqs_) {
    if (s.get() == srq) {
      --pd_refs_[srq->pd()];
      s.reset();
      return 0;
    }
  }
  return -EINVAL;
}

int Engine::create_ah(uint32_t pd, const AddressVector& av, uint32_t* ah) {
  if (pd == 0 || pd >= pd_used_.size() || !pd_used_[pd]) return -EINVAL;
  uint32_t slot = 1;
  while (slot < ahs_.size() && ah_used_[slot]) ++slot;  // control path: a scan is fine
  if (slot == ahs_.size()) {
    ahs_.emplace_back();
    ah_used_.push_back(false);
    ah_pd_.push_back(0);
  }
  ahs_[slot] = av;
  ah_used_[slot] = true;
  ah_pd_[slot] = pd;
  ++pd_refs_[pd];
  *ah = slot;
  return 0;
}

int Engine::destroy_ah(uint32_t ah) {
  if (ah == 0 || ah >= ahs_.size() || !ah_used_[ah]) return -EINVAL;
  ah_used_[ah] = false;
  --pd_refs_[ah_pd_[ah]];
  return 0;
}

int Engine::check_qp_init(const QpInit& init) const {
  const DeviceLimits& lim = cfg_.limits;
  if (init.type == QpType::xrc_recv) {
    // No queues: only its domain (IBA A14.5.3).
    return init.xrcd != 0 && init.srq == nullptr ? 0 : -EINVAL;
  }
  if (init.pd == 0 || init.pd >= pd_used_.size() || !pd_used_[init.pd]) return -EINVAL;
  if (init.type == QpType::xrc_send) {
    // A send queue only: its CQ, no receive side.
    if (init.send_cq == nullptr || init.srq != nullptr) return -EINVAL;
    if (init.cap.max_send_wr > lim.max_qp_wr || init.cap.max_send_sge > lim.max_sge ||
        init.cap.max_inline_data > lim.max_inline_data)
      return -EINVAL;
    return 0;
  }
  if (init.send_cq == nullptr || init.recv_cq == nullptr) return -EINVAL;
  if (init.cap.max_send_wr > lim.max_qp_wr || init.cap.max_send_sge > lim.max_sge ||
      init.cap.max_inline_data > lim.max_inline_data)
    return -EINVAL;
  if (init.srq == nullptr && (init.cap.max_recv_wr > lim.max_qp_wr || init.cap.max_recv_sge > lim.max_sge))
    return -EINVAL;
  return 0;
}

std::unique_ptr<Qp> Engine::make_qp(const QpInit& init, uint32_t qpn) {
  auto q = std::make_unique<Qp>();
  q->qpn = qpn;
  q->incarnation = ++incarnations_;
  q->type = init.type;
  const bool tgt = init.type == QpType::xrc_recv;
  q->pd = tgt ? 0 : init.pd;
  q->send_cq = tgt ? nullptr : init.send_cq;
  q->recv_cq = is_xrc(init.type) ? nullptr : init.recv_cq;
  q->srq = is_xrc(init.type) ? nullptr : init.srq;
  q->xrcd = tgt ? init.xrcd : 0;
  q->sq_sig_all = init.sq_sig_all;
  q->block_self_mcast_loopback = init.block_self_mcast_loopback;
  q->sq_depth = std::max<uint32_t>(1, init.cap.max_send_wr);
  q->max_send_sge = std::max<uint32_t>(1, init.cap.max_send_sge);
  q->max_inline = init.cap.max_inline_data;
  q->sq.resize(q->sq_depth);
  q->inline_buf.resize(size_t{q->sq_depth} * q->max_inline);
  if (init.srq == nullptr && !is_xrc(init.type)) {
    q->rq_depth = std::max<uint32_t>(1, init.cap.max_recv_wr);
    q->max_recv_sge = std::max<uint32_t>(1, init.cap.max_recv_sge);
    q->rq.resize(q->rq_depth);
  }
  q->udp_sport = sport_for(q->qpn);
  if (init.type == QpType::ud) q->mtu = mtu_bytes(cfg_.active_mtu);  // UD has no path MTU attribute
  if (init.type == QpType::raw_packet) q->mtu = cfg_.max_raw_frame;   // one frame per message
  q->attr.cap = init.cap;
  q->resp.resources.resize(1);
  q->resp.held.reserve(kMaxHeldRequests);
  if (!tgt) ++pd_refs_[init.pd];  // a target's PD is its SRQs', borrowed per request
  return q;
}

int Engine::create_qp(const QpInit& init, uint32_t* qpn) {
  if (int rc = check_qp_init(init); rc != 0) return rc;
  if (free_qp_slots_.empty()) return -ENOMEM;
  // Oldest free slot first: a QPN comes back only after every other free one,
  // so late packets for a destroyed QP do not land on a new one (as rxe does).
  const uint32_t slot = free_qp_slots_.front();
  free_qp_slots_.pop_front();
  auto q = make_qp(init, cfg_.first_qpn + slot);
  *qpn = q->qpn;
  qps_[slot] = std::move(q);
  return 0;
}

int Engine::create_gsi_qp(const QpInit& init) {
  if (init.type != QpType::ud || gsi_ != nullptr) return -EINVAL;
  if (int rc = check_qp_init(init); rc != 0) return rc;
  gsi_ = make_qp(init, kGsiQpn);
  gsi_->attr.qkey = kGsiQkey;  // fixed (IBA 13.4.6.1 / A17: 0x80010000)
  return 0;
}

Qp* Engine::lookup(uint32_t qpn) {
  if (qpn == kGsiQpn) return gsi_.get();
  const uint32_t slot = qpn - cfg_.first_qpn;  // wraps for qpn < first_qpn
  return slot < qps_.size() ? qps_[slot].get() : nullptr;
}

Qp* Engine::qp(uint32_t qpn) { return lookup(qpn); }

QpCounters Engine::qp_totals() const {
  QpCounters sum = retired_qp_counters_;
  if (gsi_) sum += gsi_->counters;
  for (const auto& q : qps_)
    if (q) sum += q->counters;
  return sum;
}

int Engine::modify_qp(uint32_t qpn, const QpAttr& a, uint32_t mask) {
  Qp* q = lookup(qpn);
  if (q == nullptr) return -EINVAL;
  if (qpn == kGsiQpn && (mask & kAttrQkey) && a.qkey != kGsiQkey) return -EINVAL;  // QP1's is fixed
  const char* why = nullptr;
  if (int rc = check_modify_qp({q->type, q->state}, a, mask, cfg_.limits, &why); rc != 0) return rc;
  const QpState to = (mask & kAttrState) ? a.qp_state : q->state;

  // Attributes first (the checker has vetted every bit in the mask).
  QpAttr& at = q->attr;
  if (mask & kAttrAccessFlags) at.qp_access_flags = a.qp_access_flags;
  if (mask & kAttrPkeyIndex) at.pkey_index = a.pkey_index;
  if (mask & kAttrPort) at.port_num = a.port_num;
  if (mask & kAttrQkey) at.qkey = a.qkey;
  if (mask & kAttrAv) at.ah_attr = a.ah_attr;
  if (mask & kAttrPathMtu) {
    at.path_mtu = a.path_mtu;
    q->mtu = mtu_bytes(a.path_mtu);
  }
  if (mask & kAttrTimeout) at.timeout = a.timeout;
  if (mask & kAttrRetryCnt) {
    at.retry_cnt = a.retry_cnt;
    q->req.retry_left = a.retry_cnt;
  }
  if (mask & kAttrRnrRetry) {
    at.rnr_retry = a.rnr_retry;
    q->req.rnr_retry_left = a.rnr_retry;
  }
  if (mask & kAttrMinRnrTimer) at.min_rnr_timer = a.min_rnr_timer;
  if (mask & kAttrMaxQpRdAtomic) at.max_rd_atomic = a.max_rd_atomic;
  if (mask & kAttrMaxDestRdAtomic) {
    at.max_dest_rd_atomic = a.max_dest_rd_atomic;
    q->resp.resources.assign(std::max<uint32_t>(1, a.max_dest_rd_atomic), RdAtomicResource{});
    q->resp.resource_next = 0;
  }
  if (mask & kAttrDestQpn) at.dest_qp_num = a.dest_qp_num;
  if (mask & kAttrRqPsn) {
    at.rq_psn = a.rq_psn & kPsnMask;
    q->resp.epsn = at.rq_psn;
  }
  if (mask & kAttrSqPsn) {
    at.sq_psn = a.sq_psn & kPsnMask;
    q->req.next_psn = at.sq_psn;
    q->req.max_psn = at.sq_psn;
    q->req.cwnd = q->req.ssthresh = cfg_.max_unacked_psns;
    q->req.unacked_psn = at.sq_psn;
  }
  if (mask & kAttrEnSqdAsyncNotify) at.en_sqd_async_notify = a.en_sqd_async_notify;
  if (mask & kAttrPathMigState) at.path_mig_state = a.path_mig_state;

  if (to != q->state) {
    const QpState from = q->state;
    DROCE_PROBE(qp_state, q->qpn, unsigned(from), unsigned(to));
    q->state = to;
    switch (to) {
      case QpState::reset: {
        // IBA 10.3.1: RESET empties the queues and forgets all transport state.
        cancel_retry_timer(q);
        drop_held(q);
        q->sq_head = q->sq_tail = 0;
        q->rq_head = q->rq_tail = 0;
        q->req = Qp::Requester{};
        q->rp = ReactionPoint{};
        q->np = NotificationPoint{};
        auto resources = std::move(q->resp.resources);
        auto held = std::move(q->resp.held);
        q->resp = Qp::Responder{};
        q->resp.resources = std::move(resources);
        q->resp.held = std::move(held);
        for (auto& r : q->resp.resources) r = RdAtomicResource{};
        q->error_flushed = false;
        break;
      }
      case QpState::err:
        enter_error(q);
        break;
      case QpState::rts:
        if (from == QpState::sqd) q->req.drained_notified = false;
        if (from == QpState::sqe) {
          // The flushed send queue starts afresh where it stands.
          q->req.next_wqe = q->sq_tail;
          q->req.next_offset = 0;
        }
        mark_ready(q);  // WRs posted while draining may go now
        break;
      case QpState::sqd:
        q->req.drained_notified = false;
        mark_ready(q);
        break;
      default:
        break;
    }
  }
  at.qp_state = q->state;
  at.cur_qp_state = q->state;
  return 0;
}

int Engine::query_qp(uint32_t qpn, QpAttr* attr, QpState* state) const {
  const uint32_t slot = qpn - cfg_.first_qpn;
  const Qp* found = qpn == kGsiQpn ? gsi_.get() : slot < qps_.size() ? qps_[slot].get() : nullptr;
  if (found == nullptr) return -EINVAL;
  const Qp& q = *found;
  *attr = q.attr;
  attr->qp_state = attr->cur_qp_state = q.state;
  attr->sq_psn = q.req.next_psn;
  attr->rq_psn = q.resp.epsn;
  attr->sq_draining = q.state == QpState::sqd && q.sq_tail != q.sq_head;
  if (state) *state = q.state;
  return 0;
}

int Engine::destroy_qp(uint32_t qpn) {
  Qp* q = lookup(qpn);
  if (q == nullptr) return -EINVAL;
  cancel_retry_timer(q);
  drop_held(q);
  detach_all(qpn);
  if (q->type == QpType::raw_packet) raw_flows_.remove_qp(qpn);
  mrs_.unbind_qp(qpn);
  if (q->type != QpType::xrc_recv) --pd_refs_[q->pd];
  retired_qp_counters_ += q->counters;
  if (qpn == kGsiQpn) {
    gsi_.reset();
    return 0;
  }
  const uint32_t slot = qpn - cfg_.first_qpn;
  qps_[slot].reset();
  free_qp_slots_.push_back(slot);
  return 0;
}

// ---- Multicast ---------------------------------------------------------------------

int Engine::attach_mcast(uint32_t qpn, const IpAddr& gid) {
  const Qp* q = lookup(qpn);
  if (q == nullptr || q->type != QpType::ud || qpn == kGsiQpn || !net::is_multicast(gid)) return -EINVAL;
  auto g = std::find_if(mcast_.begin(), mcast_.end(), [&](const McastGroup& x) { return x.gid == gid; });
  if (g != mcast_.end() && std::find(g->qpns.begin(), g->qpns.end(), qpn) != g->qpns.end()) return 0;
  if (g == mcast_.end() && mcast_.size() >= cfg_.limits.max_mcast_grp) return -ENOMEM;
  if (g != mcast_.end() && g->qpns.size() >= cfg_.limits.max_mcast_qp_attach) return -ENOMEM;
  if (mcast_attachments() >= cfg_.limits.max_total_mcast_qp_attach) return -ENOMEM;
  if (g == mcast_.end()) g = mcast_.insert(mcast_.end(), McastGroup{gid, {}});
  g->qpns.push_back(qpn);
  return 0;
}

int Engine::detach_mcast(uint32_t qpn, const IpAddr& gid) {
  auto g = std::find_if(mcast_.begin(), mcast_.end(), [&](const McastGroup& x) { return x.gid == gid; });
  if (g == mcast_.end()) return -EINVAL;
  auto it = std::find(g->qpns.begin(), g->qpns.end(), qpn);
  if (it == g->qpns.end()) return -EINVAL;
  g->qpns.erase(it);
  if (g->qpns.empty()) mcast_.erase(g);
  return 0;
}

void Engine::detach_all(uint32_t qpn) {
  for (McastGroup& g : mcast_) std::erase(g.qpns, qpn);
  std::erase_if(mcast_, [](const McastGroup& g) { return g.qpns.empty(); });
}

size_t Engine::mcast_attachments() const {
  size_t n = 0;
  for (const McastGroup& g : mcast_) n += g.qpns.size();
  return n;
}

void Engine::rx_multicast(const ParsedPacket& p, const rte_mbuf* m) {
  // Only UD datagrams to a multicast address go to QPN 0xFFFFFF (IBA 10.5.2.5, C10-?).
  if (p.info->transport != Transport::ud || !net::is_multicast(p.hdr.l3.dst)) {
    ++counters_.rx_bad_dest;
    return;
  }
  if ((p.hdr.bth.pkey & 0x7fff) != 0x7fff) {
    ++counters_.rx_bad_pkey;
    return;
  }
  auto g = std::find_if(mcast_.begin(), mcast_.end(), [&](const McastGroup& x) { return x.gid == p.hdr.l3.dst; });
  if (g == mcast_.end()) {
    ++counters_.rx_mcast_unattached;
    return;
  }
  // responder_ud_rx copies out of the frame, so one frame serves every QP (each checks its
  // own state and Q_Key, and takes its own receive WQE).
  // This host's own datagram (looped back) skips its sender if the sender asked so.
  const bool own = is_local_ip(p.hdr.l3.src);
  for (uint32_t qpn : g->qpns) {
    Qp* q = lookup(qpn);
    if (q == nullptr) continue;
    if (own && q->block_self_mcast_loopback && p.hdr.ext.deth.src_qp == qpn) continue;
    ++q->counters.rx_packets;
    q->counters.rx_bytes += m->pkt_len;
    responder_ud_rx(q, p, m, nullptr);
  }
}

// ---- Posting -------------------------------------------------------------------

int Engine::post_send(uint32_t qpn, const SendWr& wr) {
  Qp* q = lookup(qpn);
  if (q == nullptr) return -EINVAL;
  if (q->state == QpState::reset || q->state == QpState::init || q->state == QpState::rtr) return -EINVAL;
  if (!valid_for_type(q->type, wr.opcode)) return -EINVAL;
  if (wr.num_sge > q->max_send_sge) return -EINVAL;
  if (q->sq_head - q->sq_tail >= q->sq_depth) return -ENOMEM;
  uint64_t length = 0;
  for (uint32_t i = 0; i < wr.num_sge; ++i) length += wr.sg_list[i].length;
  if (length > 0x80000000ull) return -EINVAL;  // IBA: at most 2^31 bytes per message
  const bool is_atomic = wr.opcode == WrOpcode::atomic_cmp_and_swp || wr.opcode == WrOpcode::atomic_fetch_and_add;
  if (is_atomic && (wr.num_sge != 1 || wr.sg_list[0].length != 8)) return -EINVAL;
  // IBA 1.5: ATOMIC WRITE carries its 8 bytes and FLUSH its length in the WR, neither a list.
  const bool iba15 = wr.opcode == WrOpcode::atomic_write || wr.opcode == WrOpcode::flush;
  if (iba15 && wr.num_sge != 0) return -EINVAL;
  if (wr.opcode == WrOpcode::atomic_write) length = 8;
  if (wr.opcode == WrOpcode::flush) {
    if (wr.compare_add > 0x80000000ull) return -EINVAL;
    length = wr.compare_add;
  }
  const bool inl = (wr.send_flags & kSendInline) != 0 && wr.opcode != WrOpcode::rdma_read && !is_atomic && !iba15;
  if (inl && length > q->max_inline) return -EINVAL;
  if (q->type == QpType::ud) {
    if (length > q->mtu) return -EINVAL;  // UD messages are one packet (C10-?)
    // An AH of another PD is as foreign as a bad id: in droced, PDs are what
    // keeps one client from sending with another's address handles.
    if (wr.ah == 0 || wr.ah >= ahs_.size() || !ah_used_[wr.ah] || ah_pd_[wr.ah] != q->pd) return -EINVAL;
  }
  // A raw frame has at least its Ethernet header and fits the port.
  if (q->type == QpType::raw_packet && (length < 14 || length > cfg_.max_raw_frame)) return -EINVAL;

  // A message may not span a quarter of the 24-bit PSN space: PSN distances
  // must stay unambiguous (a 2 GiB message at MTU 256 would need 2^23 PSNs).
  if (!iba15 && (length + q->mtu - 1) / q->mtu > (1u << 22)) return -EINVAL;

  const uint32_t slot = q->sq_head % q->sq_depth;
  SendWqe& w = q->sq[slot];
  w.reset(wr);
  if (q->type == QpType::ud) w.ud_av = ahs_[wr.ah];
  w.length = static_cast<uint32_t>(length);
  if (!inl) w.wr.send_flags &= ~kSendInline;
  if (inl) {
    // The application may reuse an inline buffer as soon as post returns:
    // copy now. (Inline addresses are the caller's own pointers.)
    w.inline_off = slot * q->max_inline;
    uint32_t at = 0;
    for (uint32_t i = 0; i < wr.num_sge; ++i) {
      std::memcpy(q->inline_buf.data() + w.inline_off + at,
                  reinterpret_cast<const void*>(static_cast<uintptr_t>(wr.sg_list[i].addr)), wr.sg_list[i].length);
      at += wr.sg_list[i].length;
    }
  }
  if (wr.opcode == WrOpcode::rdma_read) {
    w.npackets = std::max<uint32_t>(1, (w.length + q->mtu - 1) / q->mtu);
  } else if (is_atomic || iba15 || wr.opcode == WrOpcode::local_inv || wr.opcode == WrOpcode::bind_mw) {
    w.npackets = is_atomic || iba15 ? 1 : 0;  // local operations send nothing
  } else {
    w.npackets = std::max<uint32_t>(1, (w.length + q->mtu - 1) / q->mtu);
  }
  ++q->sq_head;
  if (q->state == QpState::err || q->state == QpState::sqe) {
    flush_qp(q);
    return 0;
  }
  mark_ready(q);
  return 0;
}

int Engine::post_recv(uint32_t qpn, const RecvWr& wr) {
  Qp* q = lookup(qpn);
  if (q == nullptr || q->srq != nullptr || is_xrc(q->type)) return -EINVAL;  // XRC: no receive queue
  if (q->state == QpState::reset) return -EINVAL;  // as rxe: no receives in RESET
  if (wr.num_sge > q->max_recv_sge) return -EINVAL;
  if (q->rq_head - q->rq_tail >= q->rq_depth) return -ENOMEM;
  RecvWqe& w = q->rq[q->rq_head % q->rq_depth];
  w.wr_id = wr.wr_id;
  w.num_sge = wr.num_sge;
  for (uint32_t i = 0; i < wr.num_sge; ++i) w.sg_list[i] = wr.sg_list[i];
  ++q->rq_head;
  if (q->state == QpState::err) flush_qp(q);
  return 0;
}

bool Engine::take_recv(Qp* q, RecvWqe* out) {
  if (take_recv_now(q, out)) return true;
  if (recv_refill_ == nullptr) return false;
  recv_refill_(recv_refill_ctx_, q->qpn);
  return take_recv_now(q, out);
}

bool Engine::take_recv_now(Qp* q, RecvWqe* out) {
  if (q->srq != nullptr) {
    bool limit = false;
    if (!q->srq->take(out, &limit)) return false;
    if (limit) events_.push_back({AsyncEventType::srq_limit_reached, q->srq->id()});
    return true;
  }
  if (q->rq_head == q->rq_tail) return false;
  *out = q->rq[q->rq_tail % q->rq_depth];
  ++q->rq_tail;
  return true;
}

// ---- Completions and errors -------------------------------------------------------

bool Engine::push_cq(Qp* q, Cq* cq, const Completion& c, bool solicited) {
  const bool was_error = cq->in_error();
  if (cq->push(c, solicited)) return true;
  if (!was_error) {  // the overflow itself: counted and reported once
    ++counters_.cq_overflows;
    events_.push_back({AsyncEventType::cq_err, cq->id()});
  }
  // The completion is lost; the QP cannot go on (IBA 11.4.2.1).
  if (q->state != QpState::err) {
    events_.push_back({AsyncEventType::qp_fatal, q->qpn});
    enter_error(q);
  }
  return false;
}

void Engine::complete_send(Qp* q, SendWqe& w, WcStatus status) {
  const bool signaled = q->sq_sig_all || (w.wr.send_flags & kSendSignaled);
  if (status != WcStatus::success && status != WcStatus::wr_flush_err) ++q->counters.send_errors;
  // The WQE is retired before its completion is pushed: a full CQ moves the
  // QP to ERR from inside push_cq, and that flush must find this one gone.
  ++q->sq_tail;
  if (status != WcStatus::success || signaled) {
    Completion c;
    c.wr_id = w.wr.wr_id;
    c.status = status;
    c.opcode = wc_opcode_of(w.wr.opcode);
    c.qp_num = q->qpn;
    if (status == WcStatus::success) {
      c.byte_len = (w.wr.opcode == WrOpcode::atomic_cmp_and_swp || w.wr.opcode == WrOpcode::atomic_fetch_and_add)
                       ? 8
                       : w.length;
    }
    push_cq(q, q->send_cq, c, false);
  }
}

void Engine::complete_recv(Qp* q, const RecvWqe&, const Completion& c, bool solicited) {
  if (q->recv_cq == nullptr) return;  // an XRC receive QP whose SRQ was destroyed under the message
  push_cq(q, q->recv_cq, c, solicited);
}

void Engine::enter_error(Qp* q) {
  DROCE_PROBE(qp_state, q->qpn, unsigned(q->state), unsigned(QpState::err));
  q->state = QpState::err;
  q->attr.qp_state = QpState::err;
  cancel_retry_timer(q);
  q->resp.reading = false;
  q->resp.ack_pending = false;
  drop_held(q);
  flush_qp(q);
}

void Engine::flush_qp(Qp* q) {
  // IBA 10.3.1 / C10-?: every outstanding WR completes, in order, with WR_FLUSH_ERR.
  while (q->sq_tail != q->sq_head && q->state == QpState::err) {
    SendWqe& w = q->sq[q->sq_tail % q->sq_depth];
    complete_send(q, w, WcStatus::wr_flush_err);
  }
  if (q->state == QpState::sqe) {
    while (q->sq_tail != q->sq_head) complete_send(q, q->sq[q->sq_tail % q->sq_depth], WcStatus::wr_flush_err);
  }
  q->req.next_wqe = q->sq_tail;
  q->req.next_offset = 0;
  q->req.rd_atomic_inflight = 0;
  if (q->state != QpState::err) return;
  if (q->resp.have_recv) {
    Completion c;
    c.wr_id = q->resp.recv.wr_id;
    c.status = WcStatus::wr_flush_err;
    c.opcode = WcOpcode::recv;
    c.qp_num = q->qpn;
    q->resp.have_recv = false;
    complete_recv(q, q->resp.recv, c, false);
  }
  while (q->srq == nullptr && q->rq_tail != q->rq_head && q->state == QpState::err) {
    Completion c;
    c.wr_id = q->rq[q->rq_tail % q->rq_depth].wr_id;
    c.status = WcStatus::wr_flush_err;
    c.opcode = WcOpcode::recv;
    c.qp_num = q->qpn;
    ++q->rq_tail;
    push_cq(q, q->recv_cq, c, false);
  }
  // An XRC receive QP's SRQs are not its own: no LAST_WQE_REACHED for them.
  if (q->srq != nullptr && q->type != QpType::xrc_recv && !q->error_flushed)
    events_.push_back({AsyncEventType::qp_last_wqe_reached, q->qpn});
  q->error_flushed = true;
}

// ---- Frames ----------------------------------------------------------------------

rte_mbuf* Engine::new_frame(const net::MacAddr& dst, uint32_t len) {
  bool none_now = false;
  rte_mbuf* m = cfg_.port->alloc_frame(dst, len, &none_now);
  if (m == nullptr && !none_now) m = rte_pktmbuf_alloc(cfg_.pool);
  if (m == nullptr) ++counters_.tx_no_mbuf;
  return m;
}

rte_mbuf* Engine::build(Qp* q, const AddressVector& av, const Bth& bth, const ExtHeaders& ext,
                        uint32_t payload_len) {
  PacketHeaders h;
  h.l2.dst = av.dmac;
  h.l2.src = av.smac;
  if (net::same_mac(h.l2.src, MacAddr{})) h.l2.src = cfg_.local_mac;
  h.l2.vlan = av.vlan_id != 0xffff;
  h.l2.vlan_tci = h.l2.vlan ? static_cast<uint16_t>((av.sl << 13) | (av.vlan_id & 0xfff)) : 0;
  const bool v4 = is_ipv4_mapped(av.dgid);
  h.l3.version = v4 ? 4 : 6;
  // A QP under DCQCN sends ECN-capable, ECT(0), as mlx5 does: a switch marks it CE instead of
  // dropping it (RFC 3168). The DSCP stays the address handle's.
  h.l3.tos = cfg_.cc.rp_enable ? static_cast<uint8_t>((av.traffic_class & ~net::kEcnMask) | net::kEcnEct0)
                               : av.traffic_class;
  h.l3.ttl = av.hop_limit;
  h.l3.flow_label = v4 ? 0 : av.flow_label;
  h.l3.ipv4_frag = v4 ? net::kIpv4FlagDf : 0;
  h.l3.ipv4_id = v4 ? q->ip_id++ : 0;
  h.l3.src = net::same_ip(av.sgid, IpAddr{}) ? cfg_.local_ip : av.sgid;
  h.l3.dst = av.dgid;
  h.l4.src_port = q->udp_sport;
  h.bth = bth;
  h.ext = ext;
  return emit(h, payload_len);
}

rte_mbuf* Engine::emit(const PacketHeaders& h, uint32_t payload_len) {
  const size_t len = frame_len(h, payload_len);
  rte_mbuf* m = new_frame(h.l2.dst, static_cast<uint32_t>(len));
  if (m == nullptr) return nullptr;
  if (len > rte_pktmbuf_tailroom(m)) {
    rte_pktmbuf_free(m);
    return nullptr;
  }
  auto* out = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, static_cast<uint16_t>(len)));
  PacketLayout at;
  write_headers(h, payload_len, out, &at);
  // Pad bytes are zero; the caller fills the payload, then send_frame() seals it.
  if (const uint32_t pad = at.icrc_off - at.payload_off - payload_len; pad != 0)
    std::memset(out + at.payload_off + payload_len, 0, pad);
  m->l2_len = at.l3_off;
  m->l3_len = static_cast<uint16_t>(at.l4_off - at.l3_off);
  m->l4_len = static_cast<uint16_t>(at.payload_off - at.l4_off);  // UDP + BTH + extension headers
  return m;
}

void Engine::send_frame(rte_mbuf* m, Qp* q) {
  // The ICRC, over the finished frame (zero where the port fills it or the link carries none).
  const uint32_t l3 = m->l2_len;
  const uint32_t icrc_off = m->pkt_len - kIcrcLen;
  const uint8_t ipv = (*rte_pktmbuf_mtod_offset(m, uint8_t*, l3) >> 4) == 6 ? 6 : 4;
  const uint32_t icrc = cfg_.offloads.tx_icrc ? 0 : compute_icrc(net::FrameBytes(m), l3, icrc_off, ipv);
  core::store_le32(rte_pktmbuf_mtod_offset(m, uint8_t*, icrc_off), icrc);
  if (cfg_.offloads.tx_ipv4_checksum && ipv == 4) m->ol_flags |= RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM;
  queue_tx(m, q);
}

void Engine::queue_tx(rte_mbuf* m, Qp* q) {
  ++q->counters.tx_packets;
  q->counters.tx_bytes += m->pkt_len;
  m->hash.usr = q->qpn;  // frame_source_qpn()
  tx_.push_back(m);
  if (tx_.size() >= 32) flush_tx();
}

void Engine::flush_tx() {
  size_t sent = 0;
  while (sent < tx_.size()) {
    const uint16_t n = static_cast<uint16_t>(std::min<size_t>(tx_.size() - sent, 64));
    const uint16_t k = cfg_.port->tx_burst(tx_.data() + sent, n);
    sent += k;
    counters_.tx_frames += k;
    if (k < n) {
      // Back-pressure: keep the rest for the next flush, in order.
      counters_.tx_port_full += n - k;
      break;
    }
  }
  tx_.erase(tx_.begin(), tx_.begin() + static_cast<ptrdiff_t>(sent));
}

// ---- Congestion control (rocev2/dcqcn.h) -------------------------------------------

void Engine::np_rx_ce(Qp* q, const ParsedPacket& p) {
  ++counters_.np_ecn_marked_roce_packets;
  if (!cfg_.cc.np_enable || !q->np.on_ce(cfg_.cc, now_ns_)) {
    ++counters_.np_cnp_suppressed;
    return;
  }
  // The CNP goes back to whoever sent the marked packet, from the address it was sent to
  // (Annex A17.9.3): the QP that must slow down is the connected peer (RC, UC) or the
  // datagram's source QP (UD). Not ECN-capable, DSCP cnp_dscp, 802.1p cnp_802p_prio.
  PacketHeaders h;
  h.l2.dst = p.hdr.l2.src;
  h.l2.src = p.hdr.l2.dst;
  h.l2.vlan = p.hdr.l2.vlan;
  h.l2.vlan_tci = h.l2.vlan ? static_cast<uint16_t>(((cfg_.cc.cnp_802p_prio & 7) << 13) | (p.hdr.l2.vlan_tci & 0x0fff)) : 0;
  const bool v4 = p.hdr.l3.version == 4;
  h.l3.version = p.hdr.l3.version;
  h.l3.tos = static_cast<uint8_t>((cfg_.cc.cnp_dscp & 0x3f) << 2);
  h.l3.ttl = q->type != QpType::ud && q->attr.ah_attr.hop_limit != 0 ? q->attr.ah_attr.hop_limit : 64;
  h.l3.flow_label = v4 ? 0 : p.hdr.l3.flow_label;
  h.l3.ipv4_frag = v4 ? net::kIpv4FlagDf : 0;
  h.l3.src = p.hdr.l3.dst;
  h.l3.dst = p.hdr.l3.src;
  h.l4.src_port = q->udp_sport;
  h.bth.opcode = kOpcodeCnp;
  h.bth.becn = true;
  h.bth.pkey = 0xffff;
  h.bth.dest_qp = q->type == QpType::ud ? p.hdr.ext.deth.src_qp : q->attr.dest_qp_num;
  h.bth.psn = 0;
  rte_mbuf* m = emit(h, 0);
  if (m == nullptr) return;  // counted (tx_no_mbuf); the next marked packet asks again
  ++counters_.np_cnp_sent;
  DROCE_PROBE(cnp_sent, q->qpn, h.bth.dest_qp);
  send_frame(m, q);
}

void Engine::rp_rx_cnp(const ParsedPacket& p) {
  ++counters_.cnp_received;
  Qp* q = lookup(p.hdr.bth.dest_qp);
  if (q == nullptr) {
    ++counters_.rx_unknown_qp;  // a CNP for a QP gone (or never here): counted, dropped
    return;
  }
  if (!is_local_dest(p.hdr.l3.dst, false)) {
    ++counters_.rx_bad_dest;
    return;
  }
  DROCE_PROBE(cnp_received, q->qpn);
  if (!cfg_.cc.rp_enable) {
    ++counters_.rp_cnp_ignored;
    return;
  }
  ++counters_.rp_cnp_handled;
  if (q->rp.on_cnp(cfg_.cc, cfg_.line_rate_mbps, now_ns_) == ReactionPoint::Cnp::cut) {
    ++counters_.rp_rate_cuts;
    DROCE_PROBE(rate_change, q->qpn, static_cast<uint64_t>(q->rp.rc()), static_cast<uint64_t>(q->rp.rt()));
  }
}

// ---- Timers and the loop -----------------------------------------------------------

void Engine::arm_retry_timer(Qp* q, uint64_t now_ns) {
  const uint64_t t = ack_timeout_ns(q->attr.timeout);
  if (t == 0 || !is_reliable(q->type)) return;
  Qp::Requester& r = q->req;
  r.retry_deadline = now_ns + t;
  // Re-arming on every ACK only moves the deadline; the queued entry, when it
  // surfaces early, is queued again at the deadline then in force.
  if (r.retry_queued == 0 || r.retry_queued > r.retry_deadline) {
    timers_.arm(q->qpn, kRetryTimer, r.retry_deadline, q->incarnation);
    r.retry_queued = r.retry_deadline;
  }
}

void Engine::arm_rnr_timer(Qp* q, uint64_t deadline_ns) {
  Qp::Requester& r = q->req;
  r.rnr_until = deadline_ns;
  if (r.rnr_queued == 0 || r.rnr_queued > deadline_ns) {
    timers_.arm(q->qpn, kRnrTimer, deadline_ns, q->incarnation);
    r.rnr_queued = deadline_ns;
  }
}

void Engine::cancel_retry_timer(Qp* q) {
  q->req.retry_deadline = 0;
  q->req.rnr_until = 0;
}

void Engine::note_rate_rises(Qp* q, uint64_t before) {
  const uint64_t n = q->rp.increases() - before;
  if (n == 0) return;
  counters_.rp_rate_increases += n;
  // rc and rt read 0 once the last increase released the QP: back to the line rate.
  DROCE_PROBE(rate_change, q->qpn, static_cast<uint64_t>(q->rp.rc()), static_cast<uint64_t>(q->rp.rt()));
}

void Engine::odp_wait(Qp* q, OdpReady why) {
  constexpr uint64_t kFirstNs = 16'000, kMaxNs = 1'000'000;
  ++q->counters.odp_page_waits;
  DROCE_PROBE(odp_page_wait, q->qpn, static_cast<unsigned>(why));
  if (q->odp_queued != 0) return;  // already coming back
  // A fault that just began is looked at again soon; one still on its way, less and less often.
  const bool again = why == OdpReady::waiting && q->odp_interval_ns != 0;
  q->odp_interval_ns = again ? std::min(2 * q->odp_interval_ns, kMaxNs) : kFirstNs;
  q->odp_queued = now_ns_ + q->odp_interval_ns;
  timers_.arm(q->qpn, kOdpTimer, q->odp_queued, q->incarnation);
}

void Engine::arm_pace_timer(Qp* q, uint64_t deadline_ns) {
  Qp::Requester& r = q->req;
  if (r.pace_queued == 0 || r.pace_queued > deadline_ns) {
    timers_.arm(q->qpn, kPaceTimer, deadline_ns, q->incarnation);
    r.pace_queued = deadline_ns;
  }
}

void Engine::mark_ready(Qp* q) {
  if (q->on_ready_list) return;
  q->on_ready_list = true;
  ready_.push_back(q->qpn);
}

void Engine::set_local_ips(const std::vector<IpAddr>& ips) {
  if (ips.empty()) return;
  cfg_.local_ip = ips.front();
  cfg_.local_ips = ips;
}

bool Engine::is_local_ip(const IpAddr& a) const {
  if (net::same_ip(a, cfg_.local_ip)) return true;
  for (const IpAddr& l : cfg_.local_ips)
    if (net::same_ip(a, l)) return true;
  return false;
}

bool Engine::is_local_dest(const IpAddr& dst, bool ud) const {
  return is_local_ip(dst) || (ud && net::is_multicast(dst));
}

void Engine::rx_burst(rte_mbuf** frames, uint16_t n, uint64_t now_ns) {
  now_ns_ = now_ns;
  for (uint16_t i = 0; i < n; ++i) {
    rte_mbuf* m = frames[i];
    ++counters_.rx_frames;
    ParsedPacket p;
    ParseOptions opts;
    if (cfg_.offloads.rx_ipv4_checksum) {
      // The NIC checked the IPv4 header: trust its verdict either way.
      const uint64_t ck = m->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_MASK;
      if (ck == RTE_MBUF_F_RX_IP_CKSUM_BAD) {
        counters_.parse.count(ParseStatus::bad_ipv4_checksum);
        rte_pktmbuf_free(m);
        continue;
      }
      opts.verify_ipv4_checksum = ck != RTE_MBUF_F_RX_IP_CKSUM_GOOD;
    }
    opts.verify_icrc = !cfg_.offloads.rx_icrc;
    const ParseStatus s = parse_frame(m, &p, opts);
    counters_.parse.count(s);
    // Raw packet QPs' rules: what the transport does not take, and every frame for sniffers.
    if (!raw_flows_.empty()) [[unlikely]] raw_rx(m, s == ParseStatus::ok);
    if (s != ParseStatus::ok) {
      rte_pktmbuf_free(m);
      continue;
    }
    const OpcodeInfo& info = *p.info;
    if (info.kind == OpKind::cnp) {
      rp_rx_cnp(p);
      rte_pktmbuf_free(m);
      continue;
    }
    if (p.hdr.bth.dest_qp == kMulticastQpn) {
      rx_multicast(p, m);
      rte_pktmbuf_free(m);
      continue;
    }
    Qp* q = lookup(p.hdr.bth.dest_qp);
    if (q == nullptr) {
      ++counters_.rx_unknown_qp;
      rte_pktmbuf_free(m);
      continue;
    }
    // The transport in the opcode must be the QP's (C9-?): RC packets to an RC QP. And the
    // packet must be for this host: a port that sees others' frames (a bridge flooding, a
    // promiscuous vdev) must not hand them to a QP that happens to have the same number.
    // XRC: an initiator takes only responses, a target only requests (A14.5).
    const bool xrc_misdirected = (q->type == QpType::xrc_send && !info.responder) ||
                                 (q->type == QpType::xrc_recv && info.responder);
    if (info.transport != transport_of(q->type) || xrc_misdirected ||
        !is_local_dest(p.hdr.l3.dst, q->type == QpType::ud)) {
      ++counters_.rx_bad_dest;
      rte_pktmbuf_free(m);
      continue;
    }
    // P_Key: droce's table holds the default 0xFFFF; accept full or limited members of it (C9-42).
    if ((p.hdr.bth.pkey & 0x7fff) != 0x7fff) {
      ++counters_.rx_bad_pkey;
      rte_pktmbuf_free(m);
      continue;
    }
    if (q->state == QpState::reset || q->state == QpState::init || q->state == QpState::err) {
      ++counters_.rx_wrong_state;
      rte_pktmbuf_free(m);
      continue;
    }
    ++q->counters.rx_packets;
    q->counters.rx_bytes += m->pkt_len;
    if ((p.hdr.l3.tos & net::kEcnMask) == net::kEcnCe) [[unlikely]] np_rx_ce(q, p);
    bool kept = false;
    if (q->type == QpType::ud) responder_ud_rx(q, p, m, &kept);
    else if (info.responder) completer_rx(q, p, m, now_ns);
    else responder_rx(q, p, m, now_ns, &kept);
    if (!kept) rte_pktmbuf_free(m);
  }
}

void Engine::on_timer(uint32_t qpn, uint32_t kind, uint32_t gen, uint64_t deadline, uint64_t now_ns) {
  Qp* q = lookup(qpn);
  if (q == nullptr || gen != q->incarnation) return;  // a destroyed QP's entry
  Qp::Requester& r = q->req;
  if (kind == kPaceTimer) {
    if (deadline == r.pace_queued) r.pace_queued = 0;
    if (q->state == QpState::rts || q->state == QpState::sqd) mark_ready(q);  // its turn may come
    return;
  }
  if (kind == kOdpTimer) {
    if (deadline == q->odp_queued) q->odp_queued = 0;
    if (q->odp_queued != 0) return;  // an earlier entry; the QP comes back at the later one
    // Try again what waited for on-demand pages: the held request first (poll's replay), the
    // paused READ stream, the send not yet built; a response that could not be placed is asked
    // for again. Whatever still finds its pages out waits once more.
    q->resp.paging = false;
    if (r.paging) completer_ask_again(q);
    mark_ready(q);
    return;
  }
  if (kind == kRnrTimer) {
    if (deadline == r.rnr_queued) r.rnr_queued = 0;
    if (r.rnr_until == 0) return;
    if (now_ns < r.rnr_until) {
      arm_rnr_timer(q, r.rnr_until);  // the wait was extended: come back then
      return;
    }
    // The RNR wait ended: resend, no retry consumed (IBA 9.7.5.2.8).
    r.rnr_until = 0;
    if (q->state != QpState::rts && q->state != QpState::sqd) return;
    mark_ready(q);
    arm_retry_timer(q, now_ns);
    return;
  }
  if (kind != kRetryTimer) return;
  if (deadline == r.retry_queued) r.retry_queued = 0;
  if (r.retry_deadline == 0) return;
  if (now_ns < r.retry_deadline) {
    // Progress moved the deadline since this entry was queued.
    if (r.retry_queued == 0 || r.retry_queued > r.retry_deadline) {
      timers_.arm(q->qpn, kRetryTimer, r.retry_deadline, q->incarnation);
      r.retry_queued = r.retry_deadline;
    }
    return;
  }
  r.retry_deadline = 0;
  if (q->state != QpState::rts && q->state != QpState::sqd) return;
  if (r.rnr_until != 0) return;  // waiting out an RNR NAK: that timer decides
  if (q->sq_tail == q->sq_head) return;  // nothing outstanding
  ++q->counters.timeouts;
  if (q->req.retry_left == 0) {
    completer_fail(q, WcStatus::retry_exc_err);
    return;
  }
  --q->req.retry_left;
  window_cut(q);
  requester_rewind(q, resend_point(q));
  arm_retry_timer(q, now_ns);
}

void Engine::poll(uint64_t now_ns) {
  now_ns_ = now_ns;
  timers_.expire(now_ns, [&](uint32_t id, uint32_t kind, uint32_t gen, uint64_t deadline) {
    on_timer(id, kind, gen, deadline, now_ns);
  });
  uint32_t budget = cfg_.tx_budget;
  // Each ready QP gets a turn; one that still has work goes to the back.
  size_t turns = ready_.size();
  while (turns-- > 0 && budget > 0 && !ready_.empty()) {
    const uint32_t qpn = ready_.pop_front();
    Qp* q = lookup(qpn);
    if (q == nullptr) continue;
    q->on_ready_list = false;
    if (q->resp.ack_pending) responder_send_ack(q);
    if (q->resp.reading && !q->resp.paging) responder_read_run(q, &budget);
    if (!q->resp.reading && !q->resp.paging && !q->resp.held.empty()) {
      responder_replay_held(q, now_ns);
      if (q->resp.ack_pending) responder_send_ack(q);  // what the replay acknowledged, now
    }
    requester_run(q, now_ns, &budget);
  }
  flush_tx();
}

}  // namespace droce::rocev2
