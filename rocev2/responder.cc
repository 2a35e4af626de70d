// The responder (IBA 9.7.4.2, 9.7.5.1; rxe_resp.c's role): checks each
// request in the specification's order (PSN, opcode sequence, R_Key and
// bounds and access, a receive WQE), executes it, and answers with ACKs,
// READ responses, atomic ACKs or NAKs. UD receives are here too.

#include <rte_byteorder.h>

#include "rocev2/engine.h"

namespace droce::rocev2 {

namespace {

constexpr uint8_t kSyndromeAck = 0x1f;  // ACK, no credit limit (what rxe and SRQ users send)

uint8_t nak(NakCode c) { return Aeth::make_syndrome(AethKind::nak, static_cast<uint8_t>(c)); }

// Whether `info` may follow the message state `msg` (C9-? opcode sequence).
bool sequence_ok(Qp::Responder::Msg msg, const OpcodeInfo& info) {
  const bool continues = info.position == Position::middle || info.position == Position::last;
  switch (msg) {
    case Qp::Responder::none: return !continues;
    case Qp::Responder::send: return continues && info.kind == OpKind::send;
    case Qp::Responder::write: return continues && info.kind == OpKind::write;
  }
  return false;
}

}  // namespace

bool Engine::scatter(Qp* q, const Sge* sges, uint32_t num_sge, uint32_t offset, const rte_mbuf* m,
                     uint32_t src_off, uint32_t len, WcStatus* err) {
  uint32_t skip = offset;
  for (uint32_t i = 0; i < num_sge && len > 0; ++i) {
    const Sge& sge = sges[i];
    if (skip >= sge.length) {
      skip -= sge.length;
      continue;
    }
    const uint32_t n = std::min(sge.length - skip, len);
    Mr* mr = nullptr;
    if (mrs_.check_local(sge.lkey, q->pd, sge.addr + skip, n, kAccessLocalWrite, &mr) != MrCheck::ok) {
      *err = WcStatus::loc_prot_err;
      return false;
    }
    uint8_t* dst = mr_host(*mr, sge.addr + skip);
    net::FrameBytes(m).for_each_piece(src_off, n, [&](const uint8_t* piece, size_t k) {
      std::memcpy(dst, piece, k);
      dst += k;
    });
    src_off += n;
    len -= n;
    skip = 0;
  }
  if (len != 0) {
    *err = WcStatus::loc_len_err;  // longer than the scatter list
    return false;
  }
  return true;
}

bool Engine::bind_recv(Qp* q, uint32_t psn) {
  Qp::Responder& s = q->resp;
  RecvWqe w;
  if (take_recv(q, &w)) {
    s.recv = w;
    s.have_recv = true;
    return true;
  }
  if (q->type != QpType::rc) {
    // UC: no receive, no message; the next one may start at the next PSN.
    ++q->counters.dropped;
    s.msg = Qp::Responder::none;
    s.epsn = psn_add(psn, 1);
    return false;
  }
  // No receive WQE: an RNR NAK with our min_rnr_timer; the PSN is not
  // consumed, the requester sends it again (IBA 9.7.5.2.8).
  ++q->counters.rnr_naks_sent;
  responder_nak(q, Aeth::make_syndrome(AethKind::rnr_nak, q->attr.min_rnr_timer), psn);
  return false;
}

bool Engine::remote_access_ok(Qp* q, const Reth& reth, uint32_t need) {
  if (!(q->attr.qp_access_flags & need)) return false;
  Mr* mr = nullptr;
  // C9-88: a zero-length RDMA operation checks no R_Key.
  return reth.dma_len == 0 || mrs_.check_remote(reth.rkey, q->pd, reth.va, reth.dma_len, need, &mr) == MrCheck::ok;
}

void Engine::responder_send_ack(Qp* q) {
  Qp::Responder& s = q->resp;
  if (!s.ack_pending) return;
  s.ack_pending = false;
  Bth bth;
  bth.opcode = make_opcode(Transport::rc, op::kAcknowledge);
  bth.pkey = 0xffff;
  bth.dest_qp = q->attr.dest_qp_num;
  bth.psn = s.ack_psn;
  ExtHeaders ext;
  ext.aeth = {s.ack_syndrome, s.ack_msn};
  rte_mbuf* m = build(q, q->attr.ah_attr, bth, ext, 0);
  if (m == nullptr) return;  // lost like a dropped ACK: the requester's timer recovers
  ++counters_.tx_acks;
  send_frame(m, q);
}

void Engine::responder_nak(Qp* q, uint8_t syndrome, uint32_t psn) {
  responder_send_ack(q);  // keep order: what was acknowledged goes first
  Qp::Responder& s = q->resp;
  s.ack_pending = true;
  s.ack_psn = psn;
  s.ack_syndrome = syndrome;
  s.ack_msn = s.msn;
  responder_send_ack(q);
}

void Engine::responder_read_run(Qp* q, uint32_t* budget) {
  Qp::Responder& s = q->resp;
  while (s.reading && *budget > 0) {
    const RdAtomicResource& rd = s.read;
    const uint32_t left = rd.length - s.read_offset;
    const uint32_t len = std::min(left, q->mtu);
    const bool first = s.read_offset == 0 || s.read_psn == rd.first_psn;
    const bool last = len == left;
    uint8_t o;
    if (first && last) o = op::kReadResponseOnly;
    else if (first) o = op::kReadResponseFirst;
    else if (last) o = op::kReadResponseLast;
    else o = op::kReadResponseMiddle;
    Bth bth;
    bth.opcode = make_opcode(Transport::rc, o);
    bth.pkey = 0xffff;
    bth.dest_qp = q->attr.dest_qp_num;
    bth.psn = s.read_psn;
    ExtHeaders ext;
    ext.aeth = {kSyndromeAck, rd.msn};
    rte_mbuf* m = build(q, q->attr.ah_attr, bth, ext, len);
    if (m == nullptr) {
      mark_ready(q);  // out of mbufs: continue next loop
      return;
    }
    if (len != 0) {
      Mr* mr = mrs_.find(rd.rkey);
      uint8_t* dst = rte_pktmbuf_mtod_offset(m, uint8_t*, m->l2_len + m->l3_len + m->l4_len);
      // Checked when the READ arrived; re-checked in case it was deregistered since.
      if (mr == nullptr || mrs_.check_remote(rd.rkey, q->pd, rd.va + s.read_offset, len, kAccessRemoteRead, &mr) !=
                               MrCheck::ok) {
        rte_pktmbuf_free(m);
        s.reading = false;
        responder_nak(q, nak(NakCode::remote_access_error), s.read_psn);
        enter_error(q);
        return;
      }
      std::memcpy(dst, mr_host(*mr, rd.va + s.read_offset), len);
    }
    send_frame(m, q);
    --*budget;
    s.read_offset += len;
    s.read_psn = psn_add(s.read_psn, 1);
    // A later READ that arrived meanwhile waits in `held` and starts after this.
    if (last) s.reading = false;
  }
  if (s.reading) mark_ready(q);
}

void Engine::drop_held(Qp* q) {
  for (rte_mbuf* m : q->resp.held) rte_pktmbuf_free(m);
  q->resp.held.clear();
}

void Engine::responder_replay_held(Qp* q, uint64_t now_ns) {
  auto& held = q->resp.held;
  size_t done = 0;
  // In arrival order, until one of them starts a READ that streams again.
  while (done < held.size() && !q->resp.reading && q->state != QpState::err) {
    rte_mbuf* m = held[done++];
    ParsedPacket p;
    bool kept = false;
    if (parse_frame(m, &p) == ParseStatus::ok) responder_rx(q, p, m, now_ns, &kept);
    if (!kept) rte_pktmbuf_free(m);
  }
  held.erase(held.begin(), held.begin() + static_cast<ptrdiff_t>(done));
}

void Engine::responder_rx(Qp* q, const ParsedPacket& p, rte_mbuf* m, uint64_t, bool* kept) {
  Qp::Responder& s = q->resp;
  if (q->state == QpState::reset || q->state == QpState::init) {
    ++counters_.rx_wrong_state;
    return;
  }
  const OpcodeInfo& info = *p.info;
  const Bth& bth = p.hdr.bth;
  const bool rc = q->type == QpType::rc;
  const uint32_t psn = bth.psn;
  const uint32_t len = p.layout.payload_len;

  // 1. PSN (IBA 9.7.5.1.1 / C9-?): expected, duplicate, or out of sequence.
  const int32_t d = psn_diff(psn, s.epsn);
  if (rc && s.reading && !(d < 0 && info.kind == OpKind::read_request)) {
    // Still streaming a READ's responses: anything answered now (an ACK, a
    // NAK, an atomic ACK) would overtake them. Only a duplicate READ (the
    // requester going back) is served; the rest waits, in order, until the
    // responses are out (rxe queues likewise), or past kMaxHeldRequests is
    // dropped and sent again by the requester.
    if (s.held.size() < kMaxHeldRequests) {
      s.held.push_back(m);
      *kept = true;
      ++q->counters.held_requests;
    } else {
      ++q->counters.dropped;
    }
    return;
  }
  if (rc && d < 0) {
    ++q->counters.duplicate_requests;
    if (info.kind == OpKind::read_request || info.kind == OpKind::compare_swap || info.kind == OpKind::fetch_add) {
      // Replay from the saved resource, never execute again (9.7.5.1.4, C9-?).
      for (const RdAtomicResource& r : s.resources) {
        if (r.kind == RdAtomicResource::none) continue;
        if (psn_diff(psn, r.first_psn) < 0 || psn_diff(psn, r.last_psn) > 0) continue;
        if (r.kind == RdAtomicResource::read && info.kind == OpKind::read_request) {
          // The duplicate must ask for a part of the READ it repeats (rxe
          // checks the same): same R_Key, inside the saved range.
          const Reth& reth = p.hdr.ext.reth;
          if (reth.rkey != r.rkey || reth.va < r.va || reth.va - r.va > r.length ||
              reth.dma_len > r.length - (reth.va - r.va)) {
            ++q->counters.dropped;
            return;
          }
          ++q->counters.read_replays;
          responder_send_ack(q);
          s.read = r;
          s.reading = true;
          s.read_offset = static_cast<uint32_t>(psn_diff(psn, r.first_psn)) * q->mtu;
          s.read_psn = psn;
          uint32_t budget = cfg_.tx_budget;
          responder_read_run(q, &budget);
          return;
        }
        if (r.kind == RdAtomicResource::atomic && info.kind != OpKind::read_request) {
          ++q->counters.atomic_replays;
          responder_send_ack(q);
          Bth a;
          a.opcode = make_opcode(Transport::rc, op::kAtomicAcknowledge);
          a.pkey = 0xffff;
          a.dest_qp = q->attr.dest_qp_num;
          a.psn = r.first_psn;
          ExtHeaders ext;
          ext.aeth = {kSyndromeAck, r.msn};
          ext.atomic_ack_eth = {r.orig};
          if (rte_mbuf* out = build(q, q->attr.ah_attr, a, ext, 0)) send_frame(out, q);
          return;
        }
      }
      return;  // too old to replay: dropped (counted above)
    }
    // A duplicate SEND or WRITE: acknowledge again what has arrived (C9-?).
    s.ack_pending = true;
    s.ack_psn = psn_add(s.epsn, kPsnMask);
    s.ack_syndrome = kSyndromeAck;
    s.ack_msn = s.msn;
    mark_ready(q);
    return;
  }
  if (d != 0) {
    // RC: d > 0 here (duplicates returned above). UC: any PSN but the expected one.
    ++q->counters.out_of_sequence;
    if (!rc) {
      // UC: a gap drops the message in progress (IBA 9.8.3); a new one may start here.
      s.msg = Qp::Responder::none;
      s.recv_offset = 0;
      s.epsn = psn;
      if (!info.starts_message()) {
        s.epsn = psn_add(psn, 1);
        ++q->counters.dropped;
        return;
      }
    } else {
      // Go-back-N: one NAK per gap, then silence until the expected PSN comes.
      if (!s.seq_nak_sent) {
        s.seq_nak_sent = true;
        ++q->counters.seq_naks_sent;
        responder_nak(q, nak(NakCode::psn_sequence_error), s.epsn);
      }
      return;
    }
  }
  s.seq_nak_sent = false;

  auto fatal_nak = [&](NakCode code, WcStatus recv_status) {
    if (!rc) {
      // UC has no NAKs: the message is dropped.
      ++q->counters.dropped;
      s.msg = Qp::Responder::none;
      s.recv_offset = 0;
      s.epsn = psn_add(psn, 1);
      return;
    }
    responder_nak(q, nak(code), psn);
    if (s.have_recv && recv_status != WcStatus::success) {
      Completion c;
      c.wr_id = s.recv.wr_id;
      c.status = recv_status;
      c.opcode = WcOpcode::recv;
      c.qp_num = q->qpn;
      s.have_recv = false;
      complete_recv(q, s.recv, c, false);
    }
    events_.push_back({code == NakCode::remote_access_error ? AsyncEventType::qp_access_err
                                                            : AsyncEventType::qp_req_err,
                       q->qpn});
    enter_error(q);
  };

  // 2. Opcode sequence.
  if (!sequence_ok(s.msg, info)) {
    fatal_nak(NakCode::invalid_request, WcStatus::success);
    return;
  }
  // Full packets in the middle of a message (C9-?).
  if ((info.position == Position::first || info.position == Position::middle) && len != q->mtu) {
    fatal_nak(NakCode::invalid_request, WcStatus::success);
    return;
  }
  // A last packet carries 1..MTU bytes: a message of k MTUs ends with a full one.
  if (len > q->mtu || (info.position == Position::last && len == 0)) {
    fatal_nak(NakCode::invalid_request, WcStatus::success);
    return;
  }
  // READs and atomics need responder resources (max_dest_rd_atomic, o9-?).
  if ((info.kind == OpKind::read_request || info.kind == OpKind::compare_swap || info.kind == OpKind::fetch_add) &&
      q->attr.max_dest_rd_atomic == 0) {
    fatal_nak(NakCode::invalid_request, WcStatus::success);
    return;
  }

  switch (info.kind) {
    case OpKind::send: {
      if (info.starts_message() && !s.have_recv) {
        if (!bind_recv(q, psn)) return;
        s.recv_offset = 0;
      }
      if (info.starts_message()) s.recv_offset = 0;
      WcStatus err = WcStatus::success;
      if (!scatter(q, s.recv.sg_list, s.recv.num_sge, s.recv_offset, m, p.layout.payload_off, len, &err)) {
        fatal_nak(err == WcStatus::loc_len_err ? NakCode::invalid_request : NakCode::remote_operational_error, err);
        return;
      }
      s.recv_offset += len;
      s.msg = info.ends_message() ? Qp::Responder::none : Qp::Responder::send;
      if (info.ends_message()) {
        Completion c;
        c.wr_id = s.recv.wr_id;
        c.opcode = WcOpcode::recv;
        c.byte_len = s.recv_offset;
        c.qp_num = q->qpn;
        c.src_qp = q->attr.dest_qp_num;
        if (info.immediate()) {
          c.wc_flags |= kWcWithImm;
          c.imm_data = p.hdr.ext.imm.imm;
        }
        if (info.invalidate()) {
          // IBA 9.4.1.2.x: SEND with invalidate; the R_Key must be ours to invalidate.
          if (mrs_.invalidate(p.hdr.ext.ieth.rkey, q->pd) != 0) {
            fatal_nak(NakCode::invalid_request, WcStatus::loc_qp_op_err);
            return;
          }
          c.wc_flags |= kWcWithInv;
          c.imm_data = p.hdr.ext.ieth.rkey;
        }
        s.have_recv = false;
        s.msn = (s.msn + 1) & 0xffffff;
        complete_recv(q, s.recv, c, bth.se);
      }
      break;
    }
    case OpKind::write: {
      if (info.starts_message()) {
        ++q->counters.rdma_recvs;
        const Reth& reth = p.hdr.ext.reth;
        if (reth.dma_len > 0x80000000u) {  // messages are at most 2^31 bytes
          fatal_nak(NakCode::invalid_request, WcStatus::success);
          return;
        }
        if (!remote_access_ok(q, reth, kAccessRemoteWrite)) {
          fatal_nak(NakCode::remote_access_error, WcStatus::success);
          return;
        }
        s.write_va = reth.va;
        s.write_rkey = reth.rkey;
        s.write_left = reth.dma_len;
        s.write_total = reth.dma_len;
      }
      // The payload must add up to the RETH's DMA length (C9-?).
      if (len > s.write_left || (info.ends_message() && len != s.write_left)) {
        fatal_nak(NakCode::invalid_request, WcStatus::success);
        return;
      }
      // WRITE with immediate consumes a receive WQE; check before placing data.
      if (info.ends_message() && info.immediate() && !s.have_recv && !bind_recv(q, psn)) return;
      if (len != 0) {
        Mr* mr = mrs_.find(s.write_rkey);
        if (mr == nullptr || mrs_.check_remote(s.write_rkey, q->pd, s.write_va, len, kAccessRemoteWrite, &mr) !=
                                 MrCheck::ok) {
          fatal_nak(NakCode::remote_access_error, WcStatus::success);
          return;
        }
        uint8_t* dst = mr_host(*mr, s.write_va);
        net::FrameBytes(m).for_each_piece(p.layout.payload_off, len, [&](const uint8_t* piece, size_t k) {
          std::memcpy(dst, piece, k);
          dst += k;
        });
      }
      s.write_va += len;
      s.write_left -= len;
      s.msg = info.ends_message() ? Qp::Responder::none : Qp::Responder::write;
      if (info.ends_message()) {
        s.msn = (s.msn + 1) & 0xffffff;
        if (info.immediate()) {
          Completion c;
          c.wr_id = s.recv.wr_id;
          c.opcode = WcOpcode::recv_rdma_with_imm;
          c.byte_len = s.write_total;
          c.qp_num = q->qpn;
          c.src_qp = q->attr.dest_qp_num;
          c.wc_flags = kWcWithImm;
          c.imm_data = p.hdr.ext.imm.imm;
          s.have_recv = false;
          complete_recv(q, s.recv, c, bth.se);
        }
      }
      break;
    }
    case OpKind::read_request: {
      const Reth& reth = p.hdr.ext.reth;
      if (!remote_access_ok(q, reth, kAccessRemoteRead)) {
        fatal_nak(NakCode::remote_access_error, WcStatus::success);
        return;
      }
      if (reth.dma_len > 0x80000000u) {
        fatal_nak(NakCode::invalid_request, WcStatus::success);
        return;
      }
      const uint32_t npackets = std::max<uint32_t>(1, (reth.dma_len + q->mtu - 1) / q->mtu);
      ++q->counters.rdma_recvs;
      responder_send_ack(q);
      s.msn = (s.msn + 1) & 0xffffff;
      RdAtomicResource r;
      r.kind = RdAtomicResource::read;
      r.first_psn = psn;
      r.last_psn = psn_add(psn, npackets - 1);
      r.va = reth.va;
      r.rkey = reth.rkey;
      r.length = reth.dma_len;
      r.msn = s.msn;
      const uint32_t slot = s.resource_next;
      s.resources[slot] = r;
      s.resource_next = (slot + 1) % static_cast<uint32_t>(s.resources.size());
      s.epsn = psn_add(psn, npackets);
      s.read = r;
      s.reading = true;
      s.read_offset = 0;
      s.read_psn = psn;
      uint32_t budget = cfg_.tx_budget;
      responder_read_run(q, &budget);
      return;
    }
    case OpKind::compare_swap:
    case OpKind::fetch_add: {
      const AtomicEth& a = p.hdr.ext.atomic_eth;
      if (!(q->attr.qp_access_flags & kAccessRemoteAtomic)) {
        fatal_nak(NakCode::remote_access_error, WcStatus::success);
        return;
      }
      if (a.va & 7) {  // C9-? atomics need 8-byte alignment
        fatal_nak(NakCode::invalid_request, WcStatus::success);
        return;
      }
      Mr* mr = nullptr;
      if (mrs_.check_remote(a.rkey, q->pd, a.va, 8, kAccessRemoteAtomic, &mr) != MrCheck::ok) {
        fatal_nak(NakCode::remote_access_error, WcStatus::success);
        return;
      }
      // A real atomic on the memory the application sees (host byte order).
      auto* target = reinterpret_cast<uint64_t*>(mr_host(*mr, a.va));
      uint64_t orig;
      if (info.kind == OpKind::fetch_add) {
        orig = __atomic_fetch_add(target, a.swap_add, __ATOMIC_SEQ_CST);
      } else {
        orig = a.compare;
        __atomic_compare_exchange_n(target, &orig, a.swap_add, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
      }
      responder_send_ack(q);
      s.msn = (s.msn + 1) & 0xffffff;
      RdAtomicResource r;
      r.kind = RdAtomicResource::atomic;
      r.first_psn = r.last_psn = psn;
      r.va = a.va;
      r.rkey = a.rkey;
      r.length = 8;
      r.orig = orig;
      r.msn = s.msn;
      s.resources[s.resource_next] = r;
      s.resource_next = (s.resource_next + 1) % static_cast<uint32_t>(s.resources.size());
      s.epsn = psn_add(psn, 1);
      Bth ab;
      ab.opcode = make_opcode(Transport::rc, op::kAtomicAcknowledge);
      ab.pkey = 0xffff;
      ab.dest_qp = q->attr.dest_qp_num;
      ab.psn = psn;
      ExtHeaders ext;
      ext.aeth = {kSyndromeAck, s.msn};
      ext.atomic_ack_eth = {orig};
      if (rte_mbuf* out = build(q, q->attr.ah_attr, ab, ext, 0)) send_frame(out, q);
      return;
    }
    default:
      fatal_nak(NakCode::invalid_request, WcStatus::success);
      return;
  }

  s.epsn = psn_add(psn, 1);
  if (rc && bth.ackreq) {
    // Coalesced: one ACK per QP per loop, for the newest PSN (C9-? allows it).
    if (s.ack_pending) ++q->counters.acks_coalesced;
    s.ack_pending = true;
    s.ack_psn = psn;
    s.ack_syndrome = kSyndromeAck;
    s.ack_msn = s.msn;
    mark_ready(q);
  }
}

void Engine::responder_ud_rx(Qp* q, const ParsedPacket& p, const rte_mbuf* m) {
  if (q->state != QpState::rtr && q->state != QpState::rts && q->state != QpState::sqd &&
      q->state != QpState::sqe) {
    ++counters_.rx_wrong_state;
    return;
  }
  // Q_Key (IBA 10.2.5, C10-?): must match the QP's.
  if (p.hdr.ext.deth.qkey != q->attr.qkey) {
    ++counters_.rx_bad_qkey;
    ++q->counters.dropped;
    return;
  }
  RecvWqe w;
  if (!take_recv(q, &w)) {
    ++q->counters.dropped;  // UD has no RNR: the datagram is lost
    return;
  }
  Completion c;
  c.wr_id = w.wr_id;
  c.opcode = WcOpcode::recv;
  c.qp_num = q->qpn;
  c.src_qp = p.hdr.ext.deth.src_qp;
  c.wc_flags = kWcGrh;
  c.sl = roce_rx_packet_type(p.hdr.l3.version == 6);
  if (p.info->immediate()) {
    c.wc_flags |= kWcWithImm;
    c.imm_data = p.hdr.ext.imm.imm;
  }
  // The first 40 bytes receive the GRH area (write_grh_area: the IP header, at its end).
  uint8_t grh[40];
  const bool v6 = p.hdr.l3.version == 6;
  uint8_t scratch[40];
  write_grh_area(net::FrameBytes(m).read(p.layout.l3_off, v6 ? 40 : 20, scratch), v6, grh);
  WcStatus err = WcStatus::success;
  bool ok = true;
  // Scatter the GRH area, then the payload after it.
  uint32_t skip = 0;
  uint32_t left = 40;
  for (uint32_t i = 0; i < w.num_sge && left > 0 && ok; ++i) {
    const Sge& sge = w.sg_list[i];
    const uint32_t n = std::min(sge.length, left);
    Mr* mr = nullptr;
    if (mrs_.check_local(sge.lkey, q->pd, sge.addr, n, kAccessLocalWrite, &mr) != MrCheck::ok) {
      ok = false;
      err = WcStatus::loc_prot_err;
      break;
    }
    std::memcpy(mr_host(*mr, sge.addr), grh + skip, n);
    skip += n;
    left -= n;
  }
  if (ok && left != 0) {
    ok = false;
    err = WcStatus::loc_len_err;
  }
  if (ok) ok = scatter(q, w.sg_list, w.num_sge, 40, m, p.layout.payload_off, p.layout.payload_len, &err);
  c.byte_len = 40 + p.layout.payload_len;
  if (!ok) {
    c.status = err;
    c.byte_len = 0;
  }
  complete_recv(q, w, c, p.hdr.bth.se);
}

}  // namespace droce::rocev2
