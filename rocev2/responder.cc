// The responder (IBA 9.7.4.2, 9.7.5.1; rxe_resp.c's role). responder_rx is a short driver: it
// takes each RC or UC request through a chain of small checks in the specification's order
// (QP state, PSN, opcode sequence, lengths, resources, then the operation's own: R_Key and
// bounds and access, a receive WQE), each returning a named verdict (rocev2/responder.h); the
// operation is executed when all pass, and the driver acts on the verdict that ends the chain
// (ACKs, READ responses, atomic ACKs, NAKs, drops). Checks that need only the QP are free
// functions here; those that need the engine (MRs, receive queues, TX) are Engine members.
// Every verdict passes responder_step, which records it in debug builds (responder_trace) and
// logs it in DROCE_DATAPATH_LOG builds; in release builds it is only the verdict.
// UD receives are here too.

#include "rocev2/responder.h"

#include <rte_byteorder.h>

#include <cstdio>

#include "core/log.h"
#include "rocev2/engine.h"

namespace droce::rocev2 {

/// One RC or UC request on its way through the checks: what they read, and what one leaves
/// for a later one.
struct ResponderRequest {
  ResponderRequest(Qp* qp, const ParsedPacket& pkt, rte_mbuf* mbuf, bool* kept_out)
      : q(qp),
        p(pkt),
        m(mbuf),
        kept(kept_out),
        info(*pkt.info),
        psn(pkt.hdr.bth.psn),
        len(pkt.layout.payload_len),
        psn_delta(psn_diff(pkt.hdr.bth.psn, qp->resp.epsn)),
        rc(qp->type == QpType::rc) {}

  Qp* const q;
  const ParsedPacket& p;
  rte_mbuf* const m;
  bool* const kept;          ///< set when the request is held: the caller must not free `m`
  const OpcodeInfo& info;
  const uint32_t psn;
  const uint32_t len;        ///< payload bytes
  const int32_t psn_delta;   ///< the PSN minus the expected one, on arrival
  const bool rc;             ///< RC (else UC)
  Mr* mr = nullptr;          ///< the region check_rkey found (atomics use it)
  WcStatus recv_status = WcStatus::success;  ///< with a NAK verdict: how the bound receive completes
};

namespace {

using Check = ResponderCheck;
using Verdict = ResponderVerdict;

constexpr uint8_t kSyndromeAck = 0x1f;  // ACK, no credit limit (what rxe and SRQ users send)

uint8_t nak(NakCode c) { return Aeth::make_syndrome(AethKind::nak, static_cast<uint8_t>(c)); }

bool is_read_or_atomic(OpKind k) {
  return k == OpKind::read_request || k == OpKind::compare_swap || k == OpKind::fetch_add;
}

// ---- The checks that need only the QP ---------------------------------------------------------

// Responses leave in request order: while a READ streams its responses, anything answered now (an
// ACK, a NAK, an atomic ACK) would overtake them, so a request waits behind it, in order (rxe
// queues likewise); only a duplicate READ (the requester going back) is served at once. Past
// kMaxHeldRequests it is dropped and the requester sends it again.
Verdict check_reading(ResponderRequest& r) {
  Qp::Responder& s = r.q->resp;
  if (!r.rc || !s.reading || (r.psn_delta < 0 && r.info.kind == OpKind::read_request)) return Verdict::ok;
  if (s.held.size() >= kMaxHeldRequests) {
    ++r.q->counters.dropped;
    return Verdict::drop;
  }
  s.held.push_back(r.m);
  *r.kept = true;
  ++r.q->counters.held_requests;
  return Verdict::hold;
}

// IBA 9.7.5.1.1: the expected PSN goes on. RC: an older one is a duplicate; a newer one gets one
// PSN sequence NAK per gap, then silence until the expected PSN comes (go-back-N). UC: any other
// PSN ends the message in progress (IBA 9.8.3); a new message may start at it.
Verdict check_psn(ResponderRequest& r) {
  Qp* q = r.q;
  Qp::Responder& s = q->resp;
  if (r.rc && r.psn_delta < 0) {
    ++q->counters.duplicate_requests;
    return Verdict::duplicate;
  }
  if (r.psn_delta != 0) {
    ++q->counters.out_of_sequence;
    if (r.rc) {
      if (s.seq_nak_sent) return Verdict::drop;
      s.seq_nak_sent = true;
      ++q->counters.seq_naks_sent;
      return Verdict::nak_seq;
    }
    s.msg = Qp::Responder::none;
    s.recv_offset = 0;
    s.epsn = r.psn;
    if (!r.info.starts_message()) {
      s.epsn = psn_add(r.psn, 1);
      ++q->counters.dropped;
      return Verdict::drop;
    }
  }
  s.seq_nak_sent = false;
  return Verdict::ok;
}

// C9-? opcode sequence: a middle or last packet continues the message in progress (a SEND's or a
// WRITE's, of the same kind); a first or only packet needs none in progress.
Verdict check_op_seq(const ResponderRequest& r) {
  const bool continues = r.info.position == Position::middle || r.info.position == Position::last;
  bool ok = false;
  switch (r.q->resp.msg) {
    case Qp::Responder::none: ok = !continues; break;
    case Qp::Responder::send: ok = continues && r.info.kind == OpKind::send; break;
    case Qp::Responder::write: ok = continues && r.info.kind == OpKind::write; break;
  }
  return ok ? Verdict::ok : Verdict::nak_inv_req;
}

// C9-? packet length: first and middle packets carry exactly the path MTU; a last one 1 to MTU
// bytes (a message of k MTUs ends with a full one); no packet more than the MTU.
Verdict check_length(const ResponderRequest& r) {
  const Position pos = r.info.position;
  const uint32_t mtu = r.q->mtu;
  if ((pos == Position::first || pos == Position::middle) && r.len != mtu) return Verdict::nak_inv_req;
  if (r.len > mtu || (pos == Position::last && r.len == 0)) return Verdict::nak_inv_req;
  return Verdict::ok;
}

// o9-? READs and atomics need responder resources: a QP with max_dest_rd_atomic 0 takes none.
Verdict check_resource(const ResponderRequest& r) {
  if (is_read_or_atomic(r.info.kind) && r.q->attr.max_dest_rd_atomic == 0) return Verdict::nak_inv_req;
  return Verdict::ok;
}

// The operation is one a responder serves: SEND, RDMA WRITE, RDMA READ, or an atomic.
Verdict check_op_valid(const ResponderRequest& r) {
  const OpKind k = r.info.kind;
  return k == OpKind::send || k == OpKind::write || is_read_or_atomic(k) ? Verdict::ok : Verdict::nak_inv_req;
}

// A message is at most 2^31 bytes: so is a RETH's DMA length.
Verdict check_dma_length(const Reth& reth) {
  return reth.dma_len > 0x80000000u ? Verdict::nak_inv_req : Verdict::ok;
}

// The QP allows the remote access it is asked for (its qp_access_flags; C9-88).
Verdict check_qp_access(const ResponderRequest& r, uint32_t need) {
  return (r.q->attr.qp_access_flags & need) ? Verdict::ok : Verdict::nak_rem_acc;
}

// C9-? atomics operate on 8-byte aligned addresses.
Verdict check_atomic_align(uint64_t va) { return (va & 7) ? Verdict::nak_inv_req : Verdict::ok; }

// C9-? a WRITE's payloads add up to its RETH's DMA length: none goes past it, the last one ends
// exactly at it.
Verdict check_write_length(const ResponderRequest& r) {
  const uint32_t left = r.q->resp.write_left;
  if (r.len > left || (r.info.ends_message() && r.len != left)) return Verdict::nak_inv_req;
  return Verdict::ok;
}

}  // namespace

const char* to_string(ResponderCheck c) {
  static constexpr const char* kNames[] = {
#define DROCE_X(name, rule) #name,
      DROCE_RESPONDER_CHECK_LIST(DROCE_X)
#undef DROCE_X
  };
  const auto i = static_cast<size_t>(c);
  return i < std::size(kNames) ? kNames[i] : "?";
}

const char* describe(ResponderCheck c) {
  static constexpr const char* kRules[] = {
#define DROCE_X(name, rule) rule,
      DROCE_RESPONDER_CHECK_LIST(DROCE_X)
#undef DROCE_X
  };
  const auto i = static_cast<size_t>(c);
  return i < std::size(kRules) ? kRules[i] : "?";
}

const char* to_string(ResponderVerdict v) {
  static constexpr const char* kNames[] = {
#define DROCE_X(name, text) #name,
      DROCE_RESPONDER_VERDICT_LIST(DROCE_X)
#undef DROCE_X
  };
  const auto i = static_cast<size_t>(v);
  return i < std::size(kNames) ? kNames[i] : "?";
}

const char* describe(ResponderVerdict v) {
  static constexpr const char* kTexts[] = {
#define DROCE_X(name, text) text,
      DROCE_RESPONDER_VERDICT_LIST(DROCE_X)
#undef DROCE_X
  };
  const auto i = static_cast<size_t>(v);
  return i < std::size(kTexts) ? kTexts[i] : "?";
}

std::string to_string(const ResponderTraceEntry& e) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "qp 0x%x psn 0x%06x %s %s: %s", e.qpn, e.psn, opcode_info(e.opcode).name,
                to_string(e.check), to_string(e.verdict));
  return buf;
}

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

// ---- The driver ---------------------------------------------------------------------------------

void Engine::responder_rx(Qp* q, const ParsedPacket& p, rte_mbuf* m, uint64_t, bool* kept) {
  ResponderRequest r(q, p, m, kept);
  // What the chain decided is done; the NAKs go out here. The other verdicts need nothing more:
  // `done` was executed and answered, `drop` counted by its check, `hold` kept.
  switch (responder_checks(r)) {
    case Verdict::nak_seq:
      responder_nak(q, nak(NakCode::psn_sequence_error), q->resp.epsn);
      break;
    case Verdict::nak_rnr:
      responder_nak(q, Aeth::make_syndrome(AethKind::rnr_nak, q->attr.min_rnr_timer), r.psn);
      break;
    case Verdict::nak_inv_req: responder_fatal(r, NakCode::invalid_request); break;
    case Verdict::nak_rem_acc: responder_fatal(r, NakCode::remote_access_error); break;
    case Verdict::nak_rem_op: responder_fatal(r, NakCode::remote_operational_error); break;
    case Verdict::ok:
    case Verdict::done:
    case Verdict::drop:
    case Verdict::hold:
    case Verdict::duplicate: break;
  }
}

// Every check's verdict passes here, so the trace and the log can say which rule a request met.
// The trace compiles out of release builds, the log out of every build without DROCE_DATAPATH_LOG.
ResponderVerdict Engine::responder_step([[maybe_unused]] const ResponderRequest& r,
                                        [[maybe_unused]] ResponderCheck check, ResponderVerdict v) {
  if constexpr (kResponderTrace) responder_trace_.record({r.q->qpn, r.psn, r.p.hdr.bth.opcode, check, v});
  if (v != Verdict::ok && v != Verdict::done) {
    // Data-path log: compiled out unless DROCE_DATAPATH_LOG; each of these outcomes is counted.
    DROCE_DP_LOG(DEBUG, rocev2, "qp 0x%x psn 0x%06x opcode 0x%02x: %s: %s", r.q->qpn, r.psn, r.p.hdr.bth.opcode,
                 to_string(check), to_string(v));
  }
  return v;
}

// The checks every request meets, in order, then its operation's own; the first verdict that is
// not `ok` ends the chain.
ResponderVerdict Engine::responder_checks(ResponderRequest& r) {
  Verdict v;
  if ((v = responder_step(r, Check::state, check_state(r))) != Verdict::ok) return v;
  if ((v = responder_step(r, Check::reading, check_reading(r))) != Verdict::ok) return v;
  v = responder_step(r, Check::psn, check_psn(r));
  if (v == Verdict::duplicate) return responder_step(r, Check::duplicate, duplicate_request(r));
  if (v != Verdict::ok) return v;
  if ((v = responder_step(r, Check::op_seq, check_op_seq(r))) != Verdict::ok) return v;
  if ((v = responder_step(r, Check::length, check_length(r))) != Verdict::ok) return v;
  if ((v = responder_step(r, Check::resource, check_resource(r))) != Verdict::ok) return v;
  if ((v = responder_step(r, Check::op_valid, check_op_valid(r))) != Verdict::ok) return v;
  switch (r.info.kind) {
    case OpKind::send: return serve_send(r);
    case OpKind::write: return serve_write(r);
    case OpKind::read_request: return serve_read(r);
    default: return serve_atomic(r);  // check_op_valid let nothing else through
  }
}

// A request that breaks a rule: RC answers with the NAK, completes the receive bound to the
// message if the error is its own (a local one), raises the async event and goes to ERR. UC has
// no NAKs: the message is dropped and the next may start at the next PSN.
void Engine::responder_fatal(ResponderRequest& r, NakCode code) {
  Qp* q = r.q;
  Qp::Responder& s = q->resp;
  if (!r.rc) {
    ++q->counters.dropped;
    s.msg = Qp::Responder::none;
    s.recv_offset = 0;
    s.epsn = psn_add(r.psn, 1);
    return;
  }
  responder_nak(q, nak(code), r.psn);
  if (s.have_recv && r.recv_status != WcStatus::success) {
    Completion c;
    c.wr_id = s.recv.wr_id;
    c.status = r.recv_status;
    c.opcode = WcOpcode::recv;
    c.qp_num = q->qpn;
    s.have_recv = false;
    complete_recv(q, s.recv, c, false);
  }
  events_.push_back(
      {code == NakCode::remote_access_error ? AsyncEventType::qp_access_err : AsyncEventType::qp_req_err, q->qpn});
  enter_error(q);
}

// ---- The checks that need the engine ------------------------------------------------------------

// A QP takes requests from RTR on: in RESET or INIT they are dropped (rx_burst drops them before
// they get here; the check keeps the rule for every way into the responder).
ResponderVerdict Engine::check_state(ResponderRequest& r) {
  if (r.q->state != QpState::reset && r.q->state != QpState::init) return Verdict::ok;
  ++counters_.rx_wrong_state;
  return Verdict::drop;
}

// C9-88: the R_Key names a region of the QP's PD that allows `need` and holds [va, va + len); a
// zero-length RDMA operation checks no R_Key.
ResponderVerdict Engine::check_rkey(ResponderRequest& r, uint32_t rkey, uint64_t va, uint32_t len, uint32_t need) {
  if (len == 0) return Verdict::ok;
  return mrs_.check_remote(rkey, r.q->pd, va, len, need, &r.mr) == MrCheck::ok ? Verdict::ok : Verdict::nak_rem_acc;
}

// A SEND, or the last packet of a WRITE with immediate, takes a receive WQE for its message. With
// none, RC answers with an RNR NAK and the PSN is not consumed: the requester sends it again
// (IBA 9.7.5.2.8). UC drops the message; the next may start at the next PSN.
ResponderVerdict Engine::check_recv(ResponderRequest& r) {
  Qp* q = r.q;
  Qp::Responder& s = q->resp;
  const bool send = r.info.kind == OpKind::send;
  const bool takes = send ? r.info.starts_message() : r.info.ends_message() && r.info.immediate();
  if (takes && !s.have_recv) {
    RecvWqe w;
    if (!take_recv(q, &w)) {
      if (r.rc) {
        ++q->counters.rnr_naks_sent;
        return Verdict::nak_rnr;
      }
      ++q->counters.dropped;
      s.msg = Qp::Responder::none;
      s.epsn = psn_add(r.psn, 1);
      return Verdict::drop;
    }
    s.recv = w;
    s.have_recv = true;
  }
  if (send && r.info.starts_message()) s.recv_offset = 0;
  return Verdict::ok;
}

// IBA 9.7.5.1.4: a duplicate is answered again, never executed again. A SEND or WRITE is
// acknowledged again for the newest PSN served (C9-105); a READ or an atomic is replayed from
// its saved resource while that is still kept (max_dest_rd_atomic of them), else dropped.
ResponderVerdict Engine::duplicate_request(ResponderRequest& r) {
  Qp* q = r.q;
  Qp::Responder& s = q->resp;
  if (!is_read_or_atomic(r.info.kind)) {
    s.ack_pending = true;
    s.ack_psn = psn_add(s.epsn, kPsnMask);
    s.ack_syndrome = kSyndromeAck;
    s.ack_msn = s.msn;
    mark_ready(q);
    return Verdict::done;
  }
  for (const RdAtomicResource& res : s.resources) {
    if (res.kind == RdAtomicResource::none) continue;
    if (psn_diff(r.psn, res.first_psn) < 0 || psn_diff(r.psn, res.last_psn) > 0) continue;
    if (res.kind == RdAtomicResource::read && r.info.kind == OpKind::read_request) return replay_read(r, res);
    if (res.kind == RdAtomicResource::atomic && r.info.kind != OpKind::read_request) return replay_atomic(r, res);
  }
  return Verdict::drop;  // too old to replay (counted as a duplicate)
}

// A duplicate READ streams its responses again from the PSN it names. It must ask for a part of
// the READ it repeats (rxe checks the same): the same R_Key, inside the saved range.
ResponderVerdict Engine::replay_read(ResponderRequest& r, const RdAtomicResource& res) {
  Qp* q = r.q;
  Qp::Responder& s = q->resp;
  const Reth& reth = r.p.hdr.ext.reth;
  if (reth.rkey != res.rkey || reth.va < res.va || reth.va - res.va > res.length ||
      reth.dma_len > res.length - (reth.va - res.va)) {
    ++q->counters.dropped;
    return Verdict::drop;
  }
  ++q->counters.read_replays;
  responder_send_ack(q);
  s.read = res;
  s.reading = true;
  s.read_offset = static_cast<uint32_t>(psn_diff(r.psn, res.first_psn)) * q->mtu;
  s.read_psn = r.psn;
  uint32_t budget = cfg_.tx_budget;
  responder_read_run(q, &budget);
  return Verdict::done;
}

// A duplicate atomic gets the saved original value again; the operation is not repeated.
ResponderVerdict Engine::replay_atomic(ResponderRequest& r, const RdAtomicResource& res) {
  ++r.q->counters.atomic_replays;
  responder_send_ack(r.q);
  send_atomic_ack(r.q, res.first_psn, res.msn, res.orig);
  return Verdict::done;
}

// ---- SEND -----------------------------------------------------------------------------------

ResponderVerdict Engine::serve_send(ResponderRequest& r) {
  Verdict v;
  if ((v = responder_step(r, Check::recv, check_recv(r))) != Verdict::ok) return v;
  if ((v = responder_step(r, Check::execute, execute_send(r))) != Verdict::ok) return v;
  if (r.info.ends_message()) {
    if (r.info.invalidate() && (v = responder_step(r, Check::invalidate, invalidate_rkey(r))) != Verdict::ok)
      return v;
    responder_step(r, Check::complete, complete_send(r));
  }
  return responder_step(r, Check::acknowledge, acknowledge(r));
}

// Places the payload in the receive WQE's scatter list at the message's offset. A scatter list
// too short is an invalid request, a bad L_Key a remote operational error; the receive
// completes with the local error.
ResponderVerdict Engine::execute_send(ResponderRequest& r) {
  Qp::Responder& s = r.q->resp;
  WcStatus err = WcStatus::success;
  if (!scatter(r.q, s.recv.sg_list, s.recv.num_sge, s.recv_offset, r.m, r.p.layout.payload_off, r.len, &err)) {
    r.recv_status = err;
    return err == WcStatus::loc_len_err ? Verdict::nak_inv_req : Verdict::nak_rem_op;
  }
  s.recv_offset += r.len;
  s.msg = r.info.ends_message() ? Qp::Responder::none : Qp::Responder::send;
  return Verdict::ok;
}

// IBA 9.4.1.2.x: SEND with invalidate; the IETH's R_Key must be one the QP's PD may invalidate.
ResponderVerdict Engine::invalidate_rkey(ResponderRequest& r) {
  if (mrs_.invalidate(r.p.hdr.ext.ieth.rkey, r.q->pd) == 0) return Verdict::ok;
  r.recv_status = WcStatus::loc_qp_op_err;
  return Verdict::nak_inv_req;
}

// The SEND's last packet: the MSN advances and the receive completes.
ResponderVerdict Engine::complete_send(ResponderRequest& r) {
  Qp::Responder& s = r.q->resp;
  Completion c;
  c.wr_id = s.recv.wr_id;
  c.opcode = WcOpcode::recv;
  c.byte_len = s.recv_offset;
  c.qp_num = r.q->qpn;
  c.src_qp = r.q->attr.dest_qp_num;
  if (r.info.immediate()) {
    c.wc_flags |= kWcWithImm;
    c.imm_data = r.p.hdr.ext.imm.imm;
  }
  if (r.info.invalidate()) {
    c.wc_flags |= kWcWithInv;
    c.imm_data = r.p.hdr.ext.ieth.rkey;
  }
  s.have_recv = false;
  s.msn = (s.msn + 1) & 0xffffff;
  complete_recv(r.q, s.recv, c, r.p.hdr.bth.se);
  return Verdict::ok;
}

// ---- RDMA WRITE -----------------------------------------------------------------------------

ResponderVerdict Engine::serve_write(ResponderRequest& r) {
  Qp::Responder& s = r.q->resp;
  Verdict v;
  if (r.info.starts_message()) {
    ++r.q->counters.rdma_recvs;
    const Reth& reth = r.p.hdr.ext.reth;
    if ((v = responder_step(r, Check::dma_length, check_dma_length(reth))) != Verdict::ok) return v;
    if ((v = responder_step(r, Check::qp_access, check_qp_access(r, kAccessRemoteWrite))) != Verdict::ok) return v;
    v = check_rkey(r, reth.rkey, reth.va, reth.dma_len, kAccessRemoteWrite);
    if ((v = responder_step(r, Check::rkey, v)) != Verdict::ok) return v;
    s.write_va = reth.va;
    s.write_rkey = reth.rkey;
    s.write_left = reth.dma_len;
    s.write_total = reth.dma_len;
  }
  if ((v = responder_step(r, Check::write_length, check_write_length(r))) != Verdict::ok) return v;
  // WRITE with immediate takes its receive before any data is placed.
  if (r.info.ends_message() && r.info.immediate() &&
      (v = responder_step(r, Check::recv, check_recv(r))) != Verdict::ok)
    return v;
  if ((v = responder_step(r, Check::execute, execute_write(r))) != Verdict::ok) return v;
  if (r.info.ends_message()) responder_step(r, Check::complete, complete_write(r));
  return responder_step(r, Check::acknowledge, acknowledge(r));
}

// Copies the payload to the WRITE's next address. The region is looked up again for every
// packet: one deregistered since the first packet is a remote access error.
ResponderVerdict Engine::execute_write(ResponderRequest& r) {
  Qp::Responder& s = r.q->resp;
  if (r.len != 0) {
    Mr* mr = mrs_.find(s.write_rkey);
    if (mr == nullptr ||
        mrs_.check_remote(s.write_rkey, r.q->pd, s.write_va, r.len, kAccessRemoteWrite, &mr) != MrCheck::ok)
      return Verdict::nak_rem_acc;
    uint8_t* dst = mr_host(*mr, s.write_va);
    net::FrameBytes(r.m).for_each_piece(r.p.layout.payload_off, r.len, [&](const uint8_t* piece, size_t k) {
      std::memcpy(dst, piece, k);
      dst += k;
    });
  }
  s.write_va += r.len;
  s.write_left -= r.len;
  s.msg = r.info.ends_message() ? Qp::Responder::none : Qp::Responder::write;
  return Verdict::ok;
}

// The WRITE's last packet: the MSN advances; WRITE with immediate completes its receive.
ResponderVerdict Engine::complete_write(ResponderRequest& r) {
  Qp::Responder& s = r.q->resp;
  s.msn = (s.msn + 1) & 0xffffff;
  if (!r.info.immediate()) return Verdict::ok;
  Completion c;
  c.wr_id = s.recv.wr_id;
  c.opcode = WcOpcode::recv_rdma_with_imm;
  c.byte_len = s.write_total;
  c.qp_num = r.q->qpn;
  c.src_qp = r.q->attr.dest_qp_num;
  c.wc_flags = kWcWithImm;
  c.imm_data = r.p.hdr.ext.imm.imm;
  s.have_recv = false;
  complete_recv(r.q, s.recv, c, r.p.hdr.bth.se);
  return Verdict::ok;
}

// ---- RDMA READ ------------------------------------------------------------------------------

ResponderVerdict Engine::serve_read(ResponderRequest& r) {
  const Reth& reth = r.p.hdr.ext.reth;
  Verdict v;
  if ((v = responder_step(r, Check::qp_access, check_qp_access(r, kAccessRemoteRead))) != Verdict::ok) return v;
  v = check_rkey(r, reth.rkey, reth.va, reth.dma_len, kAccessRemoteRead);
  if ((v = responder_step(r, Check::rkey, v)) != Verdict::ok) return v;
  if ((v = responder_step(r, Check::dma_length, check_dma_length(reth))) != Verdict::ok) return v;
  return responder_step(r, Check::execute, execute_read(r));
}

// Saves the READ as a responder resource (for a duplicate's replay), moves the expected PSN past
// every response PSN it uses, and starts streaming the responses.
ResponderVerdict Engine::execute_read(ResponderRequest& r) {
  Qp* q = r.q;
  Qp::Responder& s = q->resp;
  const Reth& reth = r.p.hdr.ext.reth;
  const uint32_t npackets = std::max<uint32_t>(1, (reth.dma_len + q->mtu - 1) / q->mtu);
  ++q->counters.rdma_recvs;
  responder_send_ack(q);
  s.msn = (s.msn + 1) & 0xffffff;
  RdAtomicResource res;
  res.kind = RdAtomicResource::read;
  res.first_psn = r.psn;
  res.last_psn = psn_add(r.psn, npackets - 1);
  res.va = reth.va;
  res.rkey = reth.rkey;
  res.length = reth.dma_len;
  res.msn = s.msn;
  const uint32_t slot = s.resource_next;
  s.resources[slot] = res;
  s.resource_next = (slot + 1) % static_cast<uint32_t>(s.resources.size());
  s.epsn = psn_add(r.psn, npackets);
  s.read = res;
  s.reading = true;
  s.read_offset = 0;
  s.read_psn = r.psn;
  uint32_t budget = cfg_.tx_budget;
  responder_read_run(q, &budget);
  return Verdict::done;
}

// ---- Atomics --------------------------------------------------------------------------------

ResponderVerdict Engine::serve_atomic(ResponderRequest& r) {
  const AtomicEth& a = r.p.hdr.ext.atomic_eth;
  Verdict v;
  if ((v = responder_step(r, Check::qp_access, check_qp_access(r, kAccessRemoteAtomic))) != Verdict::ok) return v;
  if ((v = responder_step(r, Check::atomic_align, check_atomic_align(a.va))) != Verdict::ok) return v;
  v = check_rkey(r, a.rkey, a.va, 8, kAccessRemoteAtomic);
  if ((v = responder_step(r, Check::rkey, v)) != Verdict::ok) return v;
  return responder_step(r, Check::execute, execute_atomic(r));
}

// A real atomic on the memory the application sees (host byte order), saved as a responder
// resource with the original value, answered with an atomic ACK.
ResponderVerdict Engine::execute_atomic(ResponderRequest& r) {
  Qp* q = r.q;
  Qp::Responder& s = q->resp;
  const AtomicEth& a = r.p.hdr.ext.atomic_eth;
  auto* target = reinterpret_cast<uint64_t*>(mr_host(*r.mr, a.va));
  uint64_t orig;
  if (r.info.kind == OpKind::fetch_add) {
    orig = __atomic_fetch_add(target, a.swap_add, __ATOMIC_SEQ_CST);
  } else {
    orig = a.compare;
    __atomic_compare_exchange_n(target, &orig, a.swap_add, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  }
  responder_send_ack(q);
  s.msn = (s.msn + 1) & 0xffffff;
  RdAtomicResource res;
  res.kind = RdAtomicResource::atomic;
  res.first_psn = res.last_psn = r.psn;
  res.va = a.va;
  res.rkey = a.rkey;
  res.length = 8;
  res.orig = orig;
  res.msn = s.msn;
  s.resources[s.resource_next] = res;
  s.resource_next = (s.resource_next + 1) % static_cast<uint32_t>(s.resources.size());
  s.epsn = psn_add(r.psn, 1);
  send_atomic_ack(q, r.psn, s.msn, orig);
  return Verdict::done;
}

void Engine::send_atomic_ack(Qp* q, uint32_t psn, uint32_t msn, uint64_t orig) {
  Bth bth;
  bth.opcode = make_opcode(Transport::rc, op::kAtomicAcknowledge);
  bth.pkey = 0xffff;
  bth.dest_qp = q->attr.dest_qp_num;
  bth.psn = psn;
  ExtHeaders ext;
  ext.aeth = {kSyndromeAck, msn};
  ext.atomic_ack_eth = {orig};
  if (rte_mbuf* out = build(q, q->attr.ah_attr, bth, ext, 0)) send_frame(out, q);
}

// ---- Acknowledgement ------------------------------------------------------------------------

// The expected PSN moves past the request. An ACK request is answered coalesced: one ACK per QP
// per loop, for the newest PSN (C9-? allows it); UC is never acknowledged.
ResponderVerdict Engine::acknowledge(ResponderRequest& r) {
  Qp::Responder& s = r.q->resp;
  s.epsn = psn_add(r.psn, 1);
  if (r.rc && r.p.hdr.bth.ackreq) {
    if (s.ack_pending) ++r.q->counters.acks_coalesced;
    s.ack_pending = true;
    s.ack_psn = r.psn;
    s.ack_syndrome = kSyndromeAck;
    s.ack_msn = s.msn;
    mark_ready(r.q);
  }
  return Verdict::done;
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
