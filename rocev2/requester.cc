// The requester (IBA 9.7.4.1): turns send WQEs into request packets, within
// the send window and the READ/atomic limit, honouring fences; and rewinds
// for go-back-N retransmission. One packet per call to requester_send_one.

#include "rocev2/engine.h"
#include "rocev2/probes.h"
#include "rocev2/sge_walk.h"

namespace droce::rocev2 {

namespace {

// The opcode of one SEND or WRITE packet, from where it sits in the message.
uint8_t data_opcode(Transport t, WrOpcode op, bool first, bool last) {
  uint8_t o = 0;
  const bool imm = op == WrOpcode::send_with_imm || op == WrOpcode::rdma_write_with_imm;
  const bool inv = op == WrOpcode::send_with_inv;
  if (op == WrOpcode::rdma_write || op == WrOpcode::rdma_write_with_imm) {
    if (first && last) o = imm ? op::kWriteOnlyImm : op::kWriteOnly;
    else if (first) o = op::kWriteFirst;
    else if (last) o = imm ? op::kWriteLastImm : op::kWriteLast;
    else o = op::kWriteMiddle;
  } else {
    if (first && last) o = imm ? op::kSendOnlyImm : inv ? op::kSendOnlyInv : op::kSendOnly;
    else if (first) o = op::kSendFirst;
    else if (last) o = imm ? op::kSendLastImm : inv ? op::kSendLastInv : op::kSendLast;
    else o = op::kSendMiddle;
  }
  return make_opcode(t, o);
}

}  // namespace

bool Engine::gather(Qp* q, SendWqe& w, uint32_t offset, uint32_t len, uint8_t* dst, WcStatus* err) {
  if (w.wr.send_flags & kSendInline) {
    std::memcpy(dst, q->inline_buf.data() + w.inline_off + offset, len);
    return true;
  }
  // Reading local memory needs no access right beyond a valid key in the QP's PD.
  bool ok = true;
  const uint32_t left = for_each_sge_piece(w.wr.sg_list, w.wr.num_sge, offset, len,
                                           [&](const Sge& sge, uint64_t addr, uint32_t n, bool) {
    Mr* mr = nullptr;
    // A bad key, or an ODP page the application does not map.
    ok = mrs_.check_local(sge.lkey, q->pd, addr, n, 0, &mr) == MrCheck::ok && mr_read(*mr, addr, dst, n);
    dst += n;
    return ok;
  });
  if (!ok || left != 0) {
    *err = ok ? WcStatus::loc_len_err : WcStatus::loc_prot_err;
    return false;
  }
  return true;
}

OdpReady Engine::odp_sges_ready(Qp* q, const Sge* sges, uint32_t num_sge, uint32_t offset, uint32_t len,
                                bool write, uint64_t ahead) {
  OdpReady r = OdpReady::now;
  for_each_sge_piece(sges, num_sge, offset, len, [&](const Sge& sge, uint64_t addr, uint32_t n, bool last) {
    Mr* mr = nullptr;
    if (mrs_.check_local(sge.lkey, q->pd, addr, n, 0, &mr) != MrCheck::ok) return true;  // the copy reports it
    // The operation's rest that lies in this entry, after the last piece.
    const uint64_t rest = last ? std::min<uint64_t>(ahead, sge.addr + sge.length - (addr + n)) : 0;
    r = mr_ready(*mr, addr, n, write, rest);
    return r == OdpReady::now;
  });
  return r;
}

void Engine::requester_run(Qp* q, uint64_t now_ns, uint32_t* budget) {
  if (q->state != QpState::rts && q->state != QpState::sqd) return;
  if (q->req.rnr_until != 0) return;  // waiting out an RNR NAK
  while (*budget > 0) {
    if (!requester_send_one(q, now_ns)) break;
    --*budget;
  }
  if (*budget == 0) mark_ready(q);  // more may be waiting: another turn
  if (q->state == QpState::sqd && q->sq_tail == q->req.next_wqe && q->req.next_offset == 0 &&
      !q->req.drained_notified) {
    q->req.drained_notified = true;
    if (q->attr.en_sqd_async_notify) events_.push_back({AsyncEventType::sq_drained, q->qpn});
  }
}

bool Engine::requester_send_one(Qp* q, uint64_t now_ns) {
  Qp::Requester& r = q->req;
  if (r.next_wqe == q->sq_head) return false;
  SendWqe& w = q->sq[r.next_wqe % q->sq_depth];
  if (w.has_local_error) return false;
  if (q->type == QpType::raw_packet) return raw_send_one(q, now_ns);  // frames, not RoCE packets
  if (q->rp.limited()) [[unlikely]] {
    // DCQCN's pacer (rocev2/dcqcn.h): a QP over its rate gives up its turn until a timer
    // puts it back; the other QPs go on.
    const uint64_t rises = q->rp.increases();
    q->rp.advance(cfg_.cc, cfg_.line_rate_mbps, now_ns);
    note_rate_rises(q, rises);
    if (!q->rp.may_send(now_ns)) {
      arm_pace_timer(q, q->rp.next_send_ns());
      return false;
    }
  }
  const bool rc = is_reliable(q->type);  // RC or an XRC initiator: acknowledged, windowed
  const bool new_wqe = r.next_offset == 0 && !w.psn_assigned;
  // SQD: finish the message in progress, start no new one (IBA 10.3.2.5).
  if (q->state == QpState::sqd && r.next_offset == 0 && !w.psn_assigned) return false;
  // The window gates new PSNs; a resend (below max_psn) was inside it when first sent.
  if (rc && psn_diff(r.next_psn, r.max_psn) >= 0 &&
      psn_diff(r.next_psn, r.unacked_psn) >= static_cast<int32_t>(std::max(r.cwnd, cfg_.min_unacked_psns)))
    return false;
  const bool rd_atomic = uses_rd_atomic(w.wr.opcode);
  const bool response = awaits_response(w.wr.opcode);
  if (response && w.psn_assigned && w.resp_complete) {
    // Go-back-N came back over a READ or atomic whose response is already
    // here (it waits only for an earlier WQE's ACK to retire): nothing to send.
    r.next_psn = psn_add(w.last_psn, 1);
    ++r.next_wqe;
    r.next_offset = 0;
    return true;
  }
  if (!response && w.psn_assigned && r.next_offset == 0 && w.npackets != 0 &&
      psn_diff(w.last_psn, r.unacked_psn) < 0) {
    // Acknowledged already (it waits to retire behind an earlier READ): skip.
    r.next_psn = psn_add(w.last_psn, 1);
    ++r.next_wqe;
    return true;
  }
  if (r.next_offset == 0) {
    // A fence waits for every earlier READ and atomic to complete (IBA 10.8.3.3).
    if ((w.wr.send_flags & kSendFence) && r.rd_atomic_inflight > 0) return false;
    // At most max_rd_atomic READs/atomics outstanding (IBA 9.5, o9-?); 0 acts as 1.
    if (rd_atomic && r.rd_atomic_inflight >= std::max<uint32_t>(1, q->attr.max_rd_atomic)) return false;
  }
  // A new message must keep everything outstanding within 2^23 PSNs, where
  // 24-bit PSN comparisons stay unambiguous: a huge READ waits for the rest.
  if (new_wqe && rc && psn_diff(r.next_psn, r.unacked_psn) + int64_t{w.npackets} >= (int64_t{1} << 23) - 1)
    return false;
  // A packet whose payload lies on on-demand pages not yet in waits for them before anything of
  // it is decided (its PSN, its ACK request): the ODP timer brings the QP back.
  if (!response && !(w.wr.send_flags & kSendInline) && w.wr.opcode != WrOpcode::local_inv &&
      w.wr.opcode != WrOpcode::bind_mw && mrs_.has_odp()) {
    const uint32_t n = std::min(q->mtu, w.length - r.next_offset);
    if (OdpReady o = sges_ready(q, w.wr.sg_list, w.wr.num_sge, r.next_offset, n, false, w.length - r.next_offset - n);
        o != OdpReady::now) {
      odp_wait(q, o);
      return false;
    }
  }
  if (new_wqe) {
    w.first_psn = r.next_psn;
    w.last_psn = psn_add(r.next_psn, w.npackets == 0 ? kPsnMask : w.npackets - 1);  // npackets 0: the PSN before
    w.psn_assigned = true;
  }

  const Transport t = transport_of(q->type);
  const AddressVector& av = q->type == QpType::ud ? w.ud_av : q->attr.ah_attr;
  Bth bth;
  bth.pkey = 0xffff;
  bth.dest_qp = q->type == QpType::ud ? w.wr.remote_qpn : q->attr.dest_qp_num;
  bth.psn = r.next_psn;
  ExtHeaders ext;
  // XRC: every request packet names the target's XRC SRQ (A14.4.1); the WR carries it.
  ext.xrceth.xrc_srq = w.wr.remote_qpn & kQpnMask;
  uint32_t payload = 0;
  uint32_t psns = 1;
  bool last = true;

  switch (w.wr.opcode) {
    case WrOpcode::local_inv:
    case WrOpcode::bind_mw: {
      // Local operations: no packet. They complete in order with the others, with rxe's
      // statuses for what they refuse.
      const bool bind = w.wr.opcode == WrOpcode::bind_mw;
      const int err = bind ? mrs_.bind_mw({w.wr.invalidate_rkey, w.wr.rkey, w.wr.bind_mr_lkey, w.wr.remote_addr,
                                           w.wr.bind_length, w.wr.bind_access},
                                          q->pd, q->qpn)
                           : mrs_.invalidate(w.wr.invalidate_rkey, q->pd);
      if (err != 0) {
        w.has_local_error = true;
        w.local_error = bind ? WcStatus::mw_bind_err : WcStatus::loc_qp_op_err;
      }
      w.resp_complete = true;
      ++r.next_wqe;
      r.next_offset = 0;
      retire_sent(q, now_ns);
      return true;
    }
    case WrOpcode::rdma_read:
      if (new_wqe) ++q->counters.rdma_sends;
      // A READ sent again asks only for what has not arrived: from the next
      // response PSN, the address and length advanced to match (IBA 9.7.4.1.4).
      if (new_wqe) {
        w.resp_next_psn = w.first_psn;
        w.resp_bytes = 0;
      }
      bth.opcode = make_opcode(t, op::kReadRequest);
      bth.psn = w.resp_next_psn;
      r.next_psn = w.resp_next_psn;
      ext.reth = {w.wr.remote_addr + w.resp_bytes, w.wr.rkey, w.length - w.resp_bytes};
      psns = static_cast<uint32_t>(psn_diff(w.last_psn, w.resp_next_psn)) + 1;
      bth.ackreq = true;
      w.resp_complete = false;
      break;
    case WrOpcode::atomic_cmp_and_swp:
      bth.opcode = make_opcode(t, op::kCompareSwap);
      ext.atomic_eth = {w.wr.remote_addr, w.wr.rkey, w.wr.swap, w.wr.compare_add};
      bth.ackreq = true;
      w.resp_complete = false;
      break;
    case WrOpcode::atomic_fetch_and_add:
      bth.opcode = make_opcode(t, op::kFetchAdd);
      ext.atomic_eth = {w.wr.remote_addr, w.wr.rkey, w.wr.compare_add, 0};
      bth.ackreq = true;
      w.resp_complete = false;
      break;
    case WrOpcode::atomic_write:
      // IBA 1.5 (A19.4.2): a RETH of length 8 and the 8 bytes; answered like a READ of nothing.
      bth.opcode = make_opcode(t, op::kAtomicWrite);
      ext.reth = {w.wr.remote_addr, w.wr.rkey, 8};
      payload = 8;
      bth.ackreq = true;
      w.resp_complete = false;
      break;
    case WrOpcode::flush:
      // IBA 1.5 (A19.4.1): FETH (placement type, selectivity level), then a RETH of the range;
      // no payload (oA19-2).
      bth.opcode = make_opcode(t, op::kFlush);
      ext.feth = {w.wr.flush_type, w.wr.flush_level, 0};
      ext.reth = {w.wr.remote_addr, w.wr.rkey, w.length};
      bth.ackreq = true;
      w.resp_complete = false;
      break;
    default: {
      const bool first = r.next_offset == 0;
      payload = std::min(q->mtu, w.length - r.next_offset);
      last = r.next_offset + payload == w.length;
      bth.opcode = data_opcode(t, w.wr.opcode, first, last);
      const OpcodeInfo& info = opcode_info(bth.opcode);
      if (info.has(kHdrReth)) {
        ext.reth = {w.wr.remote_addr, w.wr.rkey, w.length};
        if (new_wqe) ++q->counters.rdma_sends;
      }
      if (info.has(kHdrImmDt)) ext.imm = {w.wr.imm_data};
      if (info.has(kHdrIeth)) ext.ieth = {w.wr.invalidate_rkey};
      if (info.has(kHdrDeth)) {
        // IBA 10.2.5: a Q_Key with the high bit set means "use the QP's".
        ext.deth = {(w.wr.remote_qkey & 0x80000000u) ? q->attr.qkey : w.wr.remote_qkey, 0, q->qpn};
      }
      bth.se = last && (w.wr.send_flags & kSendSolicited) &&
               (info.kind == OpKind::send || info.immediate());
      ++r.packets_since_ackreq;
      // Ask for an ACK at the end of a message, every ack_req_every packets,
      // and when the window is about to close; and, on a QP DCQCN paces, once an eighth of the
      // ACK timeout has gone by since the last ask: paced at a few Mbit/s, ack_req_every packets
      // take longer than the timeout, and the packets sent first would time out and be sent again
      // though none was lost (the incast bench's retransmits without drops).
      bth.ackreq = rc && (last || r.packets_since_ackreq >= std::min(cfg_.ack_req_every, std::max(r.cwnd / 2, 1u)) ||
                          psn_diff(r.next_psn, r.unacked_psn) + 1 >= static_cast<int32_t>(std::max(r.cwnd, cfg_.min_unacked_psns)) ||
                          (q->rp.limited() && now_ns - r.last_ackreq_ns >= ack_timeout_ns(q->attr.timeout) / 8));
      break;
    }
  }
  if (bth.ackreq) {
    r.packets_since_ackreq = 0;
    r.last_ackreq_ns = now_ns;
  }

  rte_mbuf* m = build(q, av, bth, ext, payload);
  if (m == nullptr) {
    mark_ready(q);  // no mbuf: try again next loop (counted in build)
    return false;
  }
  if (payload != 0) {
    uint8_t* dst = rte_pktmbuf_mtod_offset(m, uint8_t*, m->l2_len + m->l3_len + m->l4_len);
    WcStatus err = WcStatus::success;
    if (w.wr.opcode == WrOpcode::atomic_write) {
      std::memcpy(dst, &w.wr.compare_add, 8);  // the bytes the application gave, as they lay
    } else if (!gather(q, w, r.next_offset, payload, dst, &err)) {
      rte_pktmbuf_free(m);
      w.has_local_error = true;
      w.local_error = err;
      retire_sent(q, now_ns);
      return false;
    }
  }
  if (psn_diff(bth.psn, r.max_psn) < 0) ++q->counters.retransmits;  // this PSN went out before
  if (psn_diff(bth.psn, r.max_psn) < 0) DROCE_PROBE(retransmit, q->qpn, bth.psn);

  const uint32_t frame_bytes = m->pkt_len;
  send_frame(m, q);
  if (q->rp.limited()) [[unlikely]] {
    const uint64_t rises = q->rp.increases();
    q->rp.on_sent(cfg_.cc, cfg_.line_rate_mbps, now_ns, frame_bytes);
    note_rate_rises(q, rises);
  }

  r.next_psn = psn_add(r.next_psn, psns);
  if (psn_diff(r.next_psn, r.max_psn) > 0) r.max_psn = r.next_psn;
  if (rd_atomic && r.next_offset == 0) ++r.rd_atomic_inflight;
  if (last) {
    ++r.next_wqe;
    r.next_offset = 0;
  } else {
    r.next_offset += payload;
  }
  if (rc) {
    if (r.retry_deadline == 0) arm_retry_timer(q, now_ns);
  } else if (last) {
    w.resp_complete = true;
    retire_sent(q, now_ns);
  }
  return true;
}

void Engine::retire_sent(Qp* q, uint64_t now_ns) {
  if (is_reliable(q->type)) {
    // Everything through the last acknowledged PSN may retire now.
    completer_retire(q, psn_add(q->req.unacked_psn, kPsnMask), now_ns);
    return;
  }
  // UC and UD are never acknowledged: a WQE is done once it is on the wire.
  while (q->sq_tail != q->req.next_wqe || (q->sq_tail != q->sq_head && q->sq[q->sq_tail % q->sq_depth].has_local_error)) {
    SendWqe& w = q->sq[q->sq_tail % q->sq_depth];
    if (w.has_local_error) {
      // UC and UD: a send error stops only the send queue (SQE, IBA 10.3.1);
      // receives go on, and modify SQE->RTS resumes sending.
      complete_send(q, w, w.local_error);
      if (q->state == QpState::err) return;  // its completion overflowed the CQ: ERR, not SQE
      DROCE_PROBE(qp_state, q->qpn, unsigned(q->state), unsigned(QpState::sqe));
      q->state = QpState::sqe;
      q->attr.qp_state = QpState::sqe;
      flush_qp(q);
      return;
    }
    complete_send(q, w, WcStatus::success);
  }
}

void Engine::window_cut(Qp* q) {
  Qp::Requester& r = q->req;
  r.ssthresh = std::max(cfg_.min_unacked_psns, r.cwnd / 2);
  r.cwnd = r.ssthresh;
  r.acked_credit = 0;
  ++q->counters.window_cuts;
}

void Engine::window_grow(Qp* q, uint32_t acked) {
  Qp::Requester& r = q->req;
  if (r.cwnd >= cfg_.max_unacked_psns) return;
  if (r.cwnd < r.ssthresh) {
    r.cwnd = std::min(r.cwnd + acked, cfg_.max_unacked_psns);  // slow start
    return;
  }
  r.acked_credit += acked;  // then one PSN per window acknowledged
  if (r.acked_credit >= r.cwnd) {
    r.acked_credit -= r.cwnd;
    ++r.cwnd;
  }
}

uint32_t Engine::resend_point(Qp* q) const {
  uint32_t psn = q->req.unacked_psn;
  for (uint32_t i = q->sq_tail; i != q->sq_head; ++i) {
    const SendWqe& w = q->sq[i % q->sq_depth];
    if (!w.psn_assigned) break;
    if (awaits_response(w.wr.opcode) && !w.resp_complete) {
      // The oldest READ or atomic still owed a response: acknowledgements of
      // later PSNs do not cover it (implied NAK, 9.7.5.1.3).
      const uint32_t at = w.wr.opcode == WrOpcode::rdma_read ? w.resp_next_psn : w.first_psn;
      if (psn_diff(at, psn) < 0) psn = at;
      break;
    }
  }
  return psn;
}

void Engine::requester_rewind(Qp* q, uint32_t psn) {
  Qp::Requester& r = q->req;
  // Past every PSN handed out: carry on with the first WQE never sent.
  uint32_t first_unsent = q->sq_tail;
  while (first_unsent != q->sq_head && q->sq[first_unsent % q->sq_depth].psn_assigned) ++first_unsent;
  r.next_wqe = first_unsent;
  r.next_offset = 0;
  r.next_psn = psn;
  // Find the WQE that holds psn among those ever sent (go-back-N, IBA 9.7.5.2.x).
  for (uint32_t i = q->sq_tail; i != first_unsent; ++i) {
    SendWqe& w = q->sq[i % q->sq_depth];
    if (w.npackets == 0) continue;
    if (psn_diff(psn, w.first_psn) < 0 || psn_diff(psn, w.last_psn) > 0) continue;
    r.next_wqe = i;
    if (w.wr.opcode == WrOpcode::rdma_read) {
      // A READ resumes at its first missing response; the responder replays
      // from its saved state (a duplicate READ, 9.7.5.1.4).
      r.next_offset = 0;
      r.next_psn = w.resp_next_psn;
      w.resp_gap_seen = false;
    } else if (awaits_response(w.wr.opcode)) {
      r.next_offset = 0;
      r.next_psn = w.first_psn;
    } else {
      r.next_offset = static_cast<uint32_t>(psn_diff(psn, w.first_psn)) * q->mtu;
      r.next_psn = psn;
    }
    break;
  }
  // WQEs from the rewind point on are unsent again: recount the READs/atomics still out.
  r.rd_atomic_inflight = 0;
  for (uint32_t i = q->sq_tail; i != r.next_wqe; ++i) {
    const SendWqe& w = q->sq[i % q->sq_depth];
    if (uses_rd_atomic(w.wr.opcode) && !w.resp_complete) ++r.rd_atomic_inflight;
  }
  r.packets_since_ackreq = 0;
  mark_ready(q);
}

}  // namespace droce::rocev2
