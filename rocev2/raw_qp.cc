// Raw packet QPs (IBV_QPT_RAW_PACKET): a SEND is one Ethernet frame, put on the port as the
// application built it; received frames reach the QP through flow rules (rocev2/raw_flow.h).
// Nothing here is RoCE: no BTH, no PSN, no ICRC, no acknowledgement. Sends complete once the
// frame is queued to the port, as UD's do; a receive without a posted WQE drops the frame
// (counted in the QP's `dropped`), as a NIC's raw queue does.

#include "rocev2/engine.h"

namespace droce::rocev2 {

int Engine::create_flow(uint32_t qpn, abi::FlowType type, uint16_t priority, const abi::FlowMatch& match,
                        uint32_t* id) {
  const Qp* q = lookup(qpn);
  if (q == nullptr || q->type != QpType::raw_packet) return -EINVAL;
  if (static_cast<uint8_t>(type) > static_cast<uint8_t>(abi::FlowType::sniffer)) return -EINVAL;
  *id = raw_flows_.add(qpn, type, priority, match);
  return 0;
}

int Engine::destroy_flow(uint32_t id) { return raw_flows_.remove(id) ? 0 : -EINVAL; }

int Engine::set_rss(uint32_t qpn, const RawRss& rss) {
  Qp* q = lookup(qpn);
  if (q == nullptr || q->type != QpType::raw_packet) return -EINVAL;
  const size_t n = rss.table.size();
  if (n == 0 || n > RawRss::kMaxTable || (n & (n - 1)) != 0 || rss.key_len > RawRss::kMaxKey ||
      (rss.fields & ~kRxHashKnown) != 0)
    return -EINVAL;
  auto r = std::make_unique<RawRss>(rss);
  r->incarnations.clear();
  for (uint32_t wq : rss.table) {
    const Qp* w = lookup(wq);
    if (w == nullptr || w->type != QpType::raw_packet || w->rss != nullptr || wq == qpn) return -EINVAL;
    r->incarnations.push_back(w->incarnation);
  }
  q->rss = std::move(r);
  return 0;
}

bool Engine::raw_send_one(Qp* q, uint64_t now_ns) {
  Qp::Requester& r = q->req;
  SendWqe& w = q->sq[r.next_wqe % q->sq_depth];
  // SQD: a raw QP has no message in progress between calls; start none.
  if (q->state == QpState::sqd) return false;
  WcStatus err = WcStatus::success;
  MacAddr dst{};
  rte_mbuf* m = nullptr;
  if (gather(q, w, 0, static_cast<uint32_t>(dst.size()), dst.data(), &err)) {
    m = new_frame(dst, w.length);
    if (m == nullptr) {
      mark_ready(q);  // no buffer now: next loop (counted in new_frame)
      return false;
    }
    if (w.length > rte_pktmbuf_tailroom(m)) {
      // post_send kept the frame within max_raw_frame, which droced sizes to its pool's mbufs.
      rte_pktmbuf_free(m);
      m = nullptr;
      err = WcStatus::loc_len_err;
    } else {
      auto* out = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, static_cast<uint16_t>(w.length)));
      if (!gather(q, w, 0, w.length, out, &err)) {
        rte_pktmbuf_free(m);
        m = nullptr;
      }
    }
  }
  if (m == nullptr) {
    w.has_local_error = true;
    w.local_error = err;
    retire_sent(q, now_ns);
    return false;
  }
  m->l2_len = 14;
  m->l3_len = 0;
  m->l4_len = 0;
  queue_tx(m, q);
  w.resp_complete = true;
  ++r.next_wqe;
  r.next_offset = 0;
  retire_sent(q, now_ns);
  return true;
}

void Engine::raw_rx(const rte_mbuf* m, bool sniffers_only) {
  if (sniffers_only && !raw_flows_.has_sniffers()) return;
  // Rules look at the headers only: the first segment holds them (or all there is).
  const std::span<const uint8_t> head(rte_pktmbuf_mtod(m, const uint8_t*), m->data_len);
  raw_flows_.select(head, sniffers_only, &raw_picked_);
  for (uint32_t qpn : raw_picked_) {
    Qp* q = lookup(qpn);
    if (q == nullptr) continue;
    if (q->rss != nullptr) {
      // Spread: the receive queue the hash picks (a WQ destroyed under the table drops it).
      const RawRss& r = *q->rss;
      const size_t k = rss_hash(r, head) & (r.table.size() - 1);
      q = lookup(r.table[k]);
      if (q == nullptr || q->incarnation != r.incarnations[k]) continue;
    }
    raw_deliver(q, m);
  }
}

void Engine::raw_deliver(Qp* q, const rte_mbuf* m) {
  if (q->state != QpState::rtr && q->state != QpState::rts && q->state != QpState::sqd &&
      q->state != QpState::sqe) {
    ++counters_.rx_wrong_state;
    return;
  }
  RecvWqe w;
  if (!take_recv(q, &w)) {
    ++q->counters.dropped;
    return;
  }
  ++q->counters.rx_packets;
  q->counters.rx_bytes += m->pkt_len;
  Completion c;
  c.wr_id = w.wr_id;
  c.opcode = WcOpcode::recv;
  c.qp_num = q->qpn;
  WcStatus err = WcStatus::success;
  if (scatter(q, w.sg_list, w.num_sge, 0, m, 0, m->pkt_len, &err)) {
    c.byte_len = m->pkt_len;
  } else {
    c.status = err;
  }
  complete_recv(q, w, c, false);
}

}  // namespace droce::rocev2
