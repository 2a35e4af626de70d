// The completer (IBA 9.7.5.1-2, rxe_comp.c's role): acknowledgements, NAKs,
// READ responses and atomic ACKs coming back to the requester; retiring WQEs
// in order; retry on NAK, RNR wait, implied NAK for lost READ responses, and
// the error statuses that end a QP.

#include "rocev2/engine.h"
#include "rocev2/probes.h"

namespace droce::rocev2 {

namespace {

// The oldest READ or atomic ever sent that still waits for its response, or nullptr.
SendWqe* oldest_pending_response(Qp* q) {
  for (uint32_t i = q->sq_tail; i != q->sq_head; ++i) {
    SendWqe& w = q->sq[i % q->sq_depth];
    if (!w.psn_assigned) break;
    if (awaits_response(w.wr.opcode) && !w.resp_complete) return &w;
  }
  return nullptr;
}

}  // namespace

void Engine::completer_retire(Qp* q, uint32_t acked_psn, uint64_t now_ns) {
  Qp::Requester& r = q->req;
  // Everything through acked_psn is acknowledged, unless that is beyond what was sent.
  const uint32_t next_unacked = psn_add(acked_psn, 1);
  if (psn_diff(next_unacked, r.unacked_psn) > 0 && psn_diff(next_unacked, r.max_psn) <= 0) {
    window_grow(q, static_cast<uint32_t>(psn_diff(next_unacked, r.unacked_psn)));
    r.unacked_psn = next_unacked;
    r.retry_left = q->attr.retry_cnt;       // progress resets the retry budgets
    r.rnr_retry_left = q->attr.rnr_retry;
  }
  RetireStop stop = retire_acknowledged(q);
  if (stop == RetireStop::error) return;
  // Acknowledged ahead of a go-back-N resend: move the send point up to the
  // first unacknowledged PSN (wherever it falls inside a message).
  const uint32_t resend = resend_point(q);
  if (static_cast<int32_t>(q->sq_tail - r.next_wqe) > 0 || psn_diff(r.next_psn, resend) < 0) {
    requester_rewind(q, resend);
    // The send point was inside a WQE that this acknowledgement covers whole (its first
    // transmission got through while the resend was under way): past it now, the WQE retires.
    // Left in place, nothing would ever acknowledge it again, and the retry timer would run
    // out on a QP with nothing outstanding (the soak's seed 11703024350081094955).
    if (stop == RetireStop::held && retire_acknowledged(q) == RetireStop::error) return;
  }
  if (r.unacked_psn == r.max_psn && q->sq_tail == r.next_wqe) {
    cancel_retry_timer(q);
  } else if (r.rnr_until == 0) {
    arm_retry_timer(q, now_ns);  // progress: a fresh timeout for what is still out
  }
  mark_ready(q);  // the window may have opened
}

Engine::RetireStop Engine::retire_acknowledged(Qp* q) {
  Qp::Requester& r = q->req;
  const uint32_t done_through = psn_add(r.unacked_psn, kPsnMask);
  while (q->sq_tail != q->sq_head) {
    SendWqe& w = q->sq[q->sq_tail % q->sq_depth];
    if (w.has_local_error) {
      complete_send(q, w, w.local_error);
      enter_error(q);
      return RetireStop::error;
    }
    if (!w.psn_assigned) return RetireStop::unsent;
    // Only a WQE whose every packet went out at least once may retire.
    const bool partly_sent = q->sq_tail == r.next_wqe && (r.next_offset != 0 || psn_diff(r.max_psn, w.last_psn) <= 0);
    if (partly_sent && w.npackets != 0) return RetireStop::held;
    if (psn_diff(w.last_psn, done_through) > 0) return RetireStop::unacknowledged;
    if (q->state == QpState::err) return RetireStop::error;
    if (awaits_response(w.wr.opcode) && !w.resp_complete) {
      // Acknowledged past a READ or atomic whose response never came: the
      // response was lost (implied NAK, IBA 9.7.5.1.3). Send it again.
      ++q->counters.implied_naks;
      window_cut(q);
      requester_rewind(q, w.first_psn);
      return RetireStop::response_owed;
    }
    if (uses_rd_atomic(w.wr.opcode) && r.rd_atomic_inflight > 0) --r.rd_atomic_inflight;
    complete_send(q, w, WcStatus::success);
    if (q->state == QpState::err) return RetireStop::error;  // the CQ overflowed
  }
  return RetireStop::all;
}

void Engine::completer_fail(Qp* q, WcStatus status) {
  if (status == WcStatus::retry_exc_err) ++q->counters.retry_exceeded;
  if (status == WcStatus::rnr_retry_exc_err) ++q->counters.rnr_retry_exceeded;
  if (status == WcStatus::retry_exc_err) DROCE_PROBE(retry_exceeded, q->qpn);
  if (status == WcStatus::rnr_retry_exc_err) DROCE_PROBE(rnr_retry_exceeded, q->qpn);
  // The oldest outstanding WQE carries the error; the rest are flushed.
  if (q->sq_tail != q->sq_head) complete_send(q, q->sq[q->sq_tail % q->sq_depth], status);
  enter_error(q);
}

void Engine::completer_rx(Qp* q, const ParsedPacket& p, const rte_mbuf* m, uint64_t now_ns) {
  if (q->state != QpState::rts && q->state != QpState::sqd) {
    ++counters_.rx_wrong_state;
    return;
  }
  Qp::Requester& r = q->req;
  const uint32_t psn = p.hdr.bth.psn;
  // A response to a PSN never sent is stale (or forged).
  if (psn_diff(psn, r.max_psn) >= 0) {
    ++counters_.rx_unexpected;
    return;
  }
  const OpcodeInfo& info = *p.info;
  const Aeth& aeth = p.hdr.ext.aeth;

  if (info.kind == OpKind::ack) {
    switch (aeth.kind()) {
      case AethKind::ack:
        if (psn_diff(psn, r.unacked_psn) < 0) {
          ++counters_.rx_unexpected;  // a duplicate ACK: nothing new
          return;
        }
        completer_retire(q, psn, now_ns);
        return;
      case AethKind::rnr_nak: {
        if (psn_diff(psn, r.unacked_psn) < 0) return;  // stale
        ++q->counters.rnr_naks_received;
        DROCE_PROBE(rnr_nak_received, q->qpn, psn);
        DROCE_PROBE(nak_received, q->qpn, aeth.syndrome, psn);
        completer_retire(q, psn_add(psn, kPsnMask), now_ns);  // all before it arrived
        if (q->state == QpState::err) return;
        if (q->attr.rnr_retry != 7) {  // 7: retry forever
          if (r.rnr_retry_left == 0) {
            completer_fail(q, WcStatus::rnr_retry_exc_err);
            return;
          }
          --r.rnr_retry_left;
        }
        requester_rewind(q, psn);
        // Hold sending until the timer the responder asked for runs out (IBA 9.7.5.2.8).
        arm_rnr_timer(q, now_ns + rnr_timer_ns(aeth.value()));
        return;
      }
      case AethKind::nak: {
        if (psn_diff(psn, r.unacked_psn) < 0) return;  // stale
        DROCE_PROBE(nak_received, q->qpn, aeth.syndrome, psn);
        completer_retire(q, psn_add(psn, kPsnMask), now_ns);
        if (q->state == QpState::err) return;
        switch (static_cast<NakCode>(aeth.value())) {
          case NakCode::psn_sequence_error:
            ++q->counters.seq_naks_received;
            // During an RNR wait this NAK only repeats what the RNR NAK said
            // (the responder saw the packets behind the refused one): the
            // resend is already scheduled, and it costs no retry.
            if (r.rnr_until != 0) return;
            if (r.retry_left == 0) {
              completer_fail(q, WcStatus::retry_exc_err);
              return;
            }
            --r.retry_left;
            window_cut(q);
            requester_rewind(q, psn);
            arm_retry_timer(q, now_ns);
            return;
          case NakCode::invalid_request: completer_fail(q, WcStatus::rem_inv_req_err); return;
          case NakCode::remote_access_error: completer_fail(q, WcStatus::rem_access_err); return;
          case NakCode::remote_operational_error: completer_fail(q, WcStatus::rem_op_err); return;
          default: completer_fail(q, WcStatus::bad_resp_err); return;
        }
      }
      case AethKind::reserved:
        ++counters_.rx_unexpected;
        return;
    }
    return;
  }

  SendWqe* w = oldest_pending_response(q);
  if (w == nullptr) {
    ++counters_.rx_unexpected;
    return;
  }
  if (r.paging) {
    // A response before this one waits for its on-demand pages: this one is asked for again
    // with it (completer_ask_again), so it is not taken now (nor read as a gap).
    ++q->counters.dropped;
    return;
  }

  if (info.kind == OpKind::atomic_ack) {
    if ((w->wr.opcode != WrOpcode::atomic_cmp_and_swp && w->wr.opcode != WrOpcode::atomic_fetch_and_add) ||
        psn != w->first_psn) {
      ++counters_.rx_unexpected;
      return;
    }
    Mr* mr = nullptr;
    const Sge& sge = w->wr.sg_list[0];
    if (mrs_.check_local(sge.lkey, q->pd, sge.addr, 8, kAccessLocalWrite, &mr) != MrCheck::ok) {
      w->has_local_error = true;
      w->local_error = WcStatus::loc_prot_err;
    } else if (OdpReady o = mr_ready(*mr, sge.addr, 8, true); o != OdpReady::now) {
      r.paging = true;  // the atomic is asked for again; the responder answers from its resources
      odp_wait(q, o);
      return;
    } else {
      const uint64_t orig = p.hdr.ext.atomic_ack_eth.orig;
      if (!mr_write(*mr, sge.addr, &orig, 8)) {  // host order, as the application reads it
        w->has_local_error = true;                // an ODP page the application does not map
        w->local_error = WcStatus::loc_prot_err;
      }
    }
    w->resp_complete = true;
    completer_retire(q, psn, now_ns);
    return;
  }

  if (w->wr.opcode == WrOpcode::atomic_write || w->wr.opcode == WrOpcode::flush) {
    // IBA 1.5: an RDMA READ response only of no payload, with an ACK syndrome, at the request's
    // PSN answers an ATOMIC WRITE or a FLUSH (rxe's send_read_response_ack).
    if (info.kind != OpKind::read_response || psn != w->first_psn) {
      ++counters_.rx_unexpected;
      return;
    }
    if (info.position != Position::only || p.layout.payload_len != 0 || aeth.kind() != AethKind::ack) {
      completer_fail(q, WcStatus::bad_resp_err);
      return;
    }
    w->resp_complete = true;
    completer_retire(q, psn, now_ns);
    return;
  }

  // READ response (IBA 9.7.5.1.4): in PSN order from the request's PSN.
  if (w->wr.opcode != WrOpcode::rdma_read) {
    ++counters_.rx_unexpected;
    return;
  }
  const int32_t d = psn_diff(psn, w->resp_next_psn);
  if (d < 0) {
    ++counters_.rx_unexpected;  // duplicate of data already placed
    return;
  }
  if (d > 0) {
    // A response packet was lost: ask again, once per gap.
    if (!w->resp_gap_seen && psn_diff(psn, w->last_psn) <= 0) {
      w->resp_gap_seen = true;
      ++q->counters.implied_naks;
      window_cut(q);
      requester_rewind(q, w->first_psn);
    }
    return;
  }
  if (info.has(kHdrAeth) && aeth.kind() != AethKind::ack) {
    completer_fail(q, WcStatus::bad_resp_err);  // a READ response carries an ACK syndrome (9.7.5.1.4)
    return;
  }
  if (info.position == Position::first || info.position == Position::only) {
    completer_retire(q, psn_add(psn, kPsnMask), now_ns);  // the response acknowledges what came before
    if (q->state == QpState::err) return;
  }
  w->resp_gap_seen = false;
  const uint32_t len = p.layout.payload_len;
  const bool last = info.position == Position::last || info.position == Position::only;
  const bool size_ok = last ? (len <= q->mtu && w->resp_bytes + len == w->length)
                            : (len == q->mtu && w->resp_bytes + len < w->length);
  if (!size_ok) {
    completer_fail(q, WcStatus::bad_resp_err);  // C9-? a response that does not fit the request
    return;
  }
  // Place the data in the local list at resp_bytes, once its on-demand pages are in: until
  // then this response and those after it are dropped, and asked for again (not counted as lost).
  if (OdpReady o = sges_ready(q, w->wr.sg_list, w->wr.num_sge, w->resp_bytes, len, true,
                              w->length - w->resp_bytes - len);
      o != OdpReady::now) {
    r.paging = true;
    odp_wait(q, o);
    return;
  }
  WcStatus err = WcStatus::success;
  if (!scatter(q, w->wr.sg_list, w->wr.num_sge, w->resp_bytes, m, p.layout.payload_off, len, &err)) {
    w->has_local_error = true;
    w->local_error = err;
    w->resp_complete = true;
    completer_retire(q, psn, now_ns);
    return;
  }
  w->resp_bytes += len;
  w->resp_next_psn = psn_add(psn, 1);
  // Each in-order response packet is progress, as an ACK that moves unacked_psn is: the retry
  // budgets start over (rxe resets them per response packet too). Without this a long READ
  // that needs several resumes under loss spent one retry per resume, never refilled until it
  // completed, and failed with RETRY_EXC_ERR while it was moving (the soak found a seed).
  r.retry_left = q->attr.retry_cnt;
  r.rnr_retry_left = q->attr.rnr_retry;
  if (last) {
    w->resp_complete = true;
    completer_retire(q, psn, now_ns);
  }
}

void Engine::completer_ask_again(Qp* q) {
  q->req.paging = false;
  if (q->state != QpState::rts && q->state != QpState::sqd) return;
  // The READ goes again from its next response PSN (requester_send_one), for what has not
  // been placed; an atomic goes again whole and the responder answers it from its resources.
  if (SendWqe* w = oldest_pending_response(q); w != nullptr) requester_rewind(q, w->first_psn);
}

}  // namespace droce::rocev2
