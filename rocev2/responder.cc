// The responder (IBA 9.7.4.2, 9.7.5.1; rxe_resp.c's role). responder_rx is a short driver: it
// takes each RC or UC request through a chain of small checks in the specification's order
// (QP state, PSN, opcode sequence, lengths, resources, then the operation's own: R_Key and
// bounds and access, a receive WQE), each returning a named verdict (rocev2/responder.h); the
// operation is executed when all pass, and the driver acts on the verdict that ends the chain
// (ACKs, READ responses, atomic ACKs, NAKs, drops). The checks are member functions of
// Engine::ResponderRequest, the request's context. Every verdict passes its step(), which records
// it in debug builds (Engine::responder_trace) and logs it in DROCE_DATAPATH_LOG builds; in
// release builds it is only the verdict. UD receives are here too.

#include "rocev2/responder.h"

#include <rte_byteorder.h>

#include <cstdio>

#include "core/log.h"
#include "rocev2/engine.h"
#include "rocev2/probes.h"
#include "rocev2/sge_walk.h"

namespace droce::rocev2 {

namespace {

using Check = ResponderCheck;
using Verdict = ResponderVerdict;

constexpr uint8_t kSyndromeAck = 0x1f;  // ACK, no credit limit (what rxe and SRQ users send)

uint8_t nak(NakCode c) { return Aeth::make_syndrome(AethKind::nak, static_cast<uint8_t>(c)); }

bool is_read_or_atomic(OpKind k) {
  return k == OpKind::read_request || k == OpKind::compare_swap || k == OpKind::fetch_add;
}

// What a duplicate is answered from: a saved resource (READ, atomic, and IBA 1.5's ATOMIC WRITE
// and FLUSH, which are never executed twice either), not a plain ACK.
bool replayed(OpKind k) { return is_read_or_atomic(k) || k == OpKind::atomic_write || k == OpKind::flush; }

// The region access a FLUSH's placement type asks for (rxe's check_rkey): each type bit its flag.
uint32_t flush_access(uint8_t placement_type) {
  return ((placement_type & kFlushGlobal) ? kAccessFlushGlobal : 0u) |
         ((placement_type & kFlushPersistent) ? kAccessFlushPersistent : 0u);
}

}  // namespace

/// One RC or UC request on its way through the responder's checks: what they read, what one
/// leaves for a later one, and the checks themselves, each a small member function stating the
/// rule it enforces. A nested type of Engine, so the checks can use the engine's state (MRs,
/// receive queues, TX); defined, and its functions inline, in this file only, so the whole chain
/// compiles into responder_rx as the one function it replaced did.
struct Engine::ResponderRequest {
  ResponderRequest(Engine& engine, Qp* qp, const ParsedPacket& pkt, rte_mbuf* mbuf, bool* kept_out)
      : e(engine),
        q(qp),
        p(pkt),
        m(mbuf),
        kept(kept_out),
        info(*pkt.info),
        psn(pkt.hdr.bth.psn),
        len(pkt.layout.payload_len),
        psn_delta(psn_diff(pkt.hdr.bth.psn, qp->resp.epsn)),
        rc(is_reliable(qp->type)) {}

  Engine& e;
  Qp* const q;
  const ParsedPacket& p;
  rte_mbuf* const m;
  bool* const kept;          ///< set when the request is held: the caller must not free `m`
  const OpcodeInfo& info;
  const uint32_t psn;
  const uint32_t len;        ///< payload bytes
  const int32_t psn_delta;   ///< the PSN minus the expected one, on arrival
  const bool rc;             ///< RC or an XRC target (else UC)
  Mr* mr = nullptr;          ///< the region check_rkey found (atomics use it)
  WcStatus recv_status = WcStatus::success;  ///< with a NAK verdict: how the bound receive completes

  // The hot path is inline and compiles into responder_rx, as the one function it replaced did.
  // GCC 12 at -O3 left checks(), serve_write() and check_recv() out of line, and each call cost
  // 20 to 25 instructions per request (callgrind on bench/engine_bench.cc): they are forced.
  // The rare paths (fatal, duplicates) stay out of line.

  // The driver's part: the chain, the trace and log of each verdict, the fatal NAK.
  [[gnu::always_inline]] Verdict checks();
  Verdict step(Check check, Verdict v);
  void fatal(NakCode code);
  // The checks every request meets, and the answer to a duplicate.
  Verdict check_state();
  Verdict check_reading();
  Verdict check_psn();
  Verdict duplicate_request();
  Verdict replay_read(const RdAtomicResource& res);
  Verdict replay_atomic(const RdAtomicResource& res);
  Verdict replay_ack_only(const RdAtomicResource& res);
  Verdict check_xrc_srq();
  Verdict check_op_seq() const;
  Verdict check_length() const;
  Verdict check_resource() const;
  Verdict check_op_valid() const;
  // Each operation's own.
  Verdict check_dma_length(const Reth& reth) const;
  Verdict check_qp_access(uint32_t need) const;
  Verdict check_rkey(uint32_t rkey, uint64_t va, uint32_t length, uint32_t need);
  Verdict check_atomic_align(uint64_t va) const;
  Verdict check_qp_allows(uint32_t need) const;
  Verdict check_atomic_write_length() const;
  Verdict check_flush_rkey();
  Verdict check_write_length() const;
  [[gnu::always_inline]] Verdict check_recv();
  Verdict serve_send();
  Verdict execute_send();
  Verdict invalidate_rkey();
  Verdict complete_send();
  [[gnu::always_inline]] Verdict serve_write();
  Verdict execute_write();
  Verdict complete_write();
  Verdict serve_read();
  Verdict execute_read();
  Verdict serve_atomic();
  Verdict execute_atomic();
  Verdict atomic_odp(uint64_t* orig);
  Verdict page_wait(OdpReady why);
  void send_atomic_ack(uint32_t at_psn, uint32_t msn, uint64_t orig);
  Verdict serve_atomic_write();
  Verdict execute_atomic_write();
  Verdict serve_flush();
  Verdict execute_flush();
  Verdict answer_ack_only();
  void send_read_response_ack(uint32_t at_psn, uint32_t msn);
  void send_response(uint8_t opcode, uint32_t at_psn, const ExtHeaders& ext);
  void save_resource(const RdAtomicResource& res);
  Verdict acknowledge();
};

namespace {

// Each check's and verdict's name and one-line text, in enum order, from the lists in
// responder.h; one lookup serves the four functions below.
struct NameText {
  const char* name;
  const char* text;
};
constexpr NameText kCheckNames[] = {
#define DROCE_X(name, rule) {#name, rule},
    DROCE_RESPONDER_CHECK_LIST(DROCE_X)
#undef DROCE_X
};
constexpr NameText kVerdictNames[] = {
#define DROCE_X(name, text) {#name, text},
    DROCE_RESPONDER_VERDICT_LIST(DROCE_X)
#undef DROCE_X
};

template <size_t N>
const char* lookup(const NameText (&table)[N], size_t i, bool text) {
  if (i >= N) return "?";
  return text ? table[i].text : table[i].name;
}

}  // namespace

const char* to_string(ResponderCheck c) { return lookup(kCheckNames, static_cast<size_t>(c), false); }
const char* describe(ResponderCheck c) { return lookup(kCheckNames, static_cast<size_t>(c), true); }
const char* to_string(ResponderVerdict v) { return lookup(kVerdictNames, static_cast<size_t>(v), false); }
const char* describe(ResponderVerdict v) { return lookup(kVerdictNames, static_cast<size_t>(v), true); }

std::string to_string(const ResponderTraceEntry& e) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "qp 0x%x psn 0x%06x %s %s: %s", e.qpn, e.psn, opcode_info(e.opcode).name,
                to_string(e.check), to_string(e.verdict));
  return buf;
}

bool Engine::scatter(Qp* q, const Sge* sges, uint32_t num_sge, uint32_t offset, const rte_mbuf* m,
                     uint32_t src_off, uint32_t len, WcStatus* err) {
  bool ok = true;
  const uint32_t left = for_each_sge_piece(sges, num_sge, offset, len,
                                           [&](const Sge& sge, uint64_t addr, uint32_t n, bool) {
    Mr* mr = nullptr;
    // A bad key, or an ODP page the application does not map.
    ok = mrs_.check_local(sge.lkey, q->pd, addr, n, kAccessLocalWrite, &mr) == MrCheck::ok &&
         place(*mr, addr, m, src_off, n);
    src_off += n;
    return ok;
  });
  if (!ok || left != 0) {
    *err = ok ? WcStatus::loc_len_err : WcStatus::loc_prot_err;  // LOC_LEN: longer than the list
    return false;
  }
  return true;
}

bool Engine::place(const Mr& mr, uint64_t va, const rte_mbuf* m, uint32_t src_off, uint32_t n) {
  if (mr.odp == nullptr) [[likely]] {
    uint8_t* dst = mr_host(mr, va);
    net::FrameBytes(m).for_each_piece(src_off, n, [&](const uint8_t* piece, size_t k) {
      std::memcpy(dst, piece, k);
      dst += k;
    });
    return true;
  }
  bool ok = true;
  net::FrameBytes(m).for_each_piece(src_off, n, [&](const uint8_t* piece, size_t k) {
    ok = ok && mr_write(mr, va, piece, k);
    va += k;
  });
  return ok;
}

void Engine::responder_send_ack(Qp* q) {
  Qp::Responder& s = q->resp;
  if (!s.ack_pending) return;
  s.ack_pending = false;
  Bth bth;
  bth.opcode = make_opcode(transport_of(q->type), op::kAcknowledge);
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
  DROCE_PROBE(nak_sent, q->qpn, syndrome, psn);
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
    bth.opcode = make_opcode(transport_of(q->type), o);
    bth.pkey = 0xffff;
    bth.dest_qp = q->attr.dest_qp_num;
    bth.psn = s.read_psn;
    ExtHeaders ext;
    ext.aeth = {kSyndromeAck, rd.msn};
    Mr* mr = nullptr;
    if (len != 0) {
      mr = mrs_.find(rd.rkey);
      // Checked when the READ arrived; re-checked in case it was deregistered since.
      if (mr == nullptr || mrs_.check_remote(rd.rkey, q->pd, rd.va + s.read_offset, len, kAccessRemoteRead, &mr,
                                             q->qpn) != MrCheck::ok) {
        s.reading = false;
        responder_nak(q, nak(NakCode::remote_access_error), s.read_psn);
        enter_error(q);
        return;
      }
      // On-demand pages not yet in: the stream pauses here (the timer resumes it).
      if (OdpReady ready = mr_ready(*mr, rd.va + s.read_offset, len, false, rd.length - s.read_offset - len);
          ready != OdpReady::now) {
        s.paging = true;
        odp_wait(q, ready);
        return;
      }
    }
    rte_mbuf* m = build(q, q->attr.ah_attr, bth, ext, len);
    if (m == nullptr) {
      mark_ready(q);  // out of mbufs: continue next loop
      return;
    }
    if (len != 0) {
      uint8_t* dst = rte_pktmbuf_mtod_offset(m, uint8_t*, m->l2_len + m->l3_len + m->l4_len);
      // An ODP page the application unmapped since the READ arrived: as a region deregistered.
      if (!mr_read(*mr, rd.va + s.read_offset, dst, len)) {
        rte_pktmbuf_free(m);
        s.reading = false;
        responder_nak(q, nak(NakCode::remote_access_error), s.read_psn);
        enter_error(q);
        return;
      }
    }
    send_frame(m, q);
    --*budget;
    s.read_offset += len;
    s.read_psn = psn_add(s.read_psn, 1);
    // A later READ that arrived meanwhile waits in `held` and starts after this.
    if (last) s.reading = false;
  }
  if (s.reading && !s.paging) mark_ready(q);
}

void Engine::drop_held(Qp* q) {
  for (rte_mbuf* m : q->resp.held) rte_pktmbuf_free(m);
  q->resp.held.clear();
}

void Engine::responder_replay_held(Qp* q, uint64_t now_ns) {
  auto& held = q->resp.held;
  // In arrival order, until one of them starts a READ that streams again or waits for its
  // on-demand pages (it goes back to the front). Each leaves the list before it runs: a fatal
  // verdict moves the QP to error, which frees every packet still held (once freed twice, and
  // the list erased past its end).
  q->resp.replaying = true;
  while (!held.empty() && !q->resp.reading && !q->resp.paging && q->state != QpState::err) {
    rte_mbuf* m = held.front();
    held.erase(held.begin());
    ParsedPacket p;
    bool kept = false;
    if (parse_frame(m, &p) == ParseStatus::ok) {
      if (q->type == QpType::ud) responder_ud_rx(q, p, m, &kept);
      else responder_rx(q, p, m, now_ns, &kept);
    }
    if (!kept) rte_pktmbuf_free(m);
  }
  q->resp.replaying = false;
}

// ---- The driver ---------------------------------------------------------------------------------

void Engine::responder_rx(Qp* q, const ParsedPacket& p, rte_mbuf* m, uint64_t, bool* kept) {
  ResponderRequest r(*this, q, p, m, kept);
  // What the chain decided is done; the NAKs go out here. The other verdicts need nothing more:
  // `done` was executed and answered, `drop` counted by its check, `hold` kept.
  switch (r.checks()) {
    case Verdict::nak_seq:
      responder_nak(q, nak(NakCode::psn_sequence_error), q->resp.epsn);
      break;
    case Verdict::nak_rnr:
      responder_nak(q, Aeth::make_syndrome(AethKind::rnr_nak, q->attr.min_rnr_timer), r.psn);
      break;
    case Verdict::nak_inv_req: r.fatal(NakCode::invalid_request); break;
    case Verdict::nak_rem_acc: r.fatal(NakCode::remote_access_error); break;
    case Verdict::nak_rem_op: r.fatal(NakCode::remote_operational_error); break;
    case Verdict::ok:
    case Verdict::done:
    case Verdict::drop:
    case Verdict::hold:
    case Verdict::paging:
    case Verdict::duplicate: break;
  }
}

// The checks every request meets, in order, then its operation's own; the first verdict that is
// not `ok` ends the chain.
inline Verdict Engine::ResponderRequest::checks() {
  Verdict v;
  if ((v = step(Check::state, check_state())) != Verdict::ok) return v;
  if ((v = step(Check::reading, check_reading())) != Verdict::ok) return v;
  v = step(Check::psn, check_psn());
  if (v == Verdict::duplicate) return step(Check::duplicate, duplicate_request());
  if (v != Verdict::ok) return v;
  if (q->type == QpType::xrc_recv && (v = step(Check::xrc_srq, check_xrc_srq())) != Verdict::ok) return v;
  if ((v = step(Check::op_seq, check_op_seq())) != Verdict::ok) return v;
  if ((v = step(Check::length, check_length())) != Verdict::ok) return v;
  if ((v = step(Check::resource, check_resource())) != Verdict::ok) return v;
  if ((v = step(Check::op_valid, check_op_valid())) != Verdict::ok) return v;
  switch (info.kind) {
    case OpKind::send: return serve_send();
    case OpKind::write: return serve_write();
    case OpKind::read_request: return serve_read();
    case OpKind::atomic_write: return serve_atomic_write();
    case OpKind::flush: return serve_flush();
    default: return serve_atomic();  // check_op_valid let nothing else through
  }
}

// Every check's verdict passes here, so the trace and the log can say which rule a request met.
// The trace compiles out of release builds, the log out of every build without DROCE_DATAPATH_LOG.
inline Verdict Engine::ResponderRequest::step([[maybe_unused]] Check check, Verdict v) {
  if constexpr (kResponderTrace) e.responder_trace_.record({q->qpn, psn, p.hdr.bth.opcode, check, v});
  if (v != Verdict::ok && v != Verdict::done) {
    // Data-path log: compiled out unless DROCE_DATAPATH_LOG; each of these outcomes is counted.
    DROCE_DP_LOG(DEBUG, rocev2, "qp 0x%x psn 0x%06x opcode 0x%02x: %s: %s", q->qpn, psn, p.hdr.bth.opcode,
                 to_string(check), to_string(v));
  }
  return v;
}

// A request that breaks a rule: RC answers with the NAK, completes the receive bound to the
// message if the error is its own (a local one), raises the async event and goes to ERR. UC has
// no NAKs: the message is dropped and the next may start at the next PSN.
void Engine::ResponderRequest::fatal(NakCode code) {
  Qp::Responder& s = q->resp;
  if (!rc) {
    ++q->counters.dropped;
    s.msg = Qp::Responder::none;
    s.recv_offset = 0;
    s.epsn = psn_add(psn, 1);
    return;
  }
  e.responder_nak(q, nak(code), psn);
  if (s.have_recv && recv_status != WcStatus::success) {
    Completion c;
    c.wr_id = s.recv.wr_id;
    c.status = recv_status;
    c.opcode = WcOpcode::recv;
    c.qp_num = q->qpn;
    s.have_recv = false;
    e.complete_recv(q, s.recv, c, false);
  }
  e.events_.push_back(
      {code == NakCode::remote_access_error ? AsyncEventType::qp_access_err : AsyncEventType::qp_req_err, q->qpn});
  e.enter_error(q);
}

// ---- The checks every request meets -------------------------------------------------------------

// A QP takes requests from RTR on: in RESET or INIT they are dropped (rx_burst drops them before
// they get here; the check keeps the rule for every way into the responder).
inline Verdict Engine::ResponderRequest::check_state() {
  if (q->state != QpState::reset && q->state != QpState::init) return Verdict::ok;
  ++e.counters_.rx_wrong_state;
  return Verdict::drop;
}

// Responses leave in request order: while a READ streams its responses, anything answered now (an
// ACK, a NAK, an atomic ACK) would overtake them, so a request waits behind it, in order (rxe
// queues likewise); only a duplicate READ (the requester going back) is served at once. Past
// kMaxHeldRequests it is dropped and the requester sends it again.
// A request also waits (UC's too) behind one whose on-demand pages are coming in, and behind
// held ones not yet replayed.
inline Verdict Engine::ResponderRequest::check_reading() {
  Qp::Responder& s = q->resp;
  const bool behind_pages = s.paging || (!s.held.empty() && !s.reading && !s.replaying);
  if (!behind_pages && (!rc || !s.reading || (psn_delta < 0 && info.kind == OpKind::read_request)))
    return Verdict::ok;
  if (behind_pages) e.mark_ready(q);  // the replay comes from poll
  if (s.held.size() >= kMaxHeldRequests) {
    ++q->counters.dropped;
    return Verdict::drop;
  }
  s.held.push_back(m);
  *kept = true;
  ++q->counters.held_requests;
  return Verdict::hold;
}

// IBA 9.7.5.1.1: the expected PSN goes on. RC: an older one is a duplicate; a newer one gets one
// PSN sequence NAK per gap, then silence until the expected PSN comes (go-back-N). UC: any other
// PSN ends the message in progress (IBA 9.8.3); a new message may start at it.
inline Verdict Engine::ResponderRequest::check_psn() {
  Qp::Responder& s = q->resp;
  if (rc && psn_delta < 0) {
    ++q->counters.duplicate_requests;
    return Verdict::duplicate;
  }
  if (psn_delta != 0) {
    ++q->counters.out_of_sequence;
    if (rc) {
      if (s.seq_nak_sent) return Verdict::drop;
      s.seq_nak_sent = true;
      ++q->counters.seq_naks_sent;
      return Verdict::nak_seq;
    }
    s.msg = Qp::Responder::none;
    s.recv_offset = 0;
    s.epsn = psn;
    if (!info.starts_message()) {
      s.epsn = psn_add(psn, 1);
      ++q->counters.dropped;
      return Verdict::drop;
    }
  }
  s.seq_nak_sent = false;
  return Verdict::ok;
}

// IBA Annex A14.5.3: an XRC target QP serves each request for the XRC SRQ its XRCETH names,
// which must be an XRC SRQ of the QP's own XRC domain; anything else is an invalid request. The
// SRQ's PD guards the memory the request reaches, its receives take the SEND, its CQ the
// completion: the QP takes all three for this request (Qp::pd, srq, recv_cq).
inline Verdict Engine::ResponderRequest::check_xrc_srq() {
  Srq* srq = e.srq_by_num(p.hdr.ext.xrceth.xrc_srq);
  if (srq == nullptr || !srq->is_xrc() || srq->xrcd() != q->xrcd) return Verdict::nak_inv_req;
  q->srq = srq;
  q->pd = srq->pd();
  q->recv_cq = srq->cq();
  return Verdict::ok;
}

// IBA 9.7.5.1.4: a duplicate is answered again, never executed again. A SEND or WRITE is
// acknowledged again for the newest PSN served (C9-105); a READ or an atomic is replayed from
// its saved resource while that is still kept (max_dest_rd_atomic of them), else dropped.
Verdict Engine::ResponderRequest::duplicate_request() {
  Qp::Responder& s = q->resp;
  if (!replayed(info.kind)) {
    s.ack_pending = true;
    s.ack_psn = psn_add(s.epsn, kPsnMask);
    s.ack_syndrome = kSyndromeAck;
    s.ack_msn = s.msn;
    e.mark_ready(q);
    return Verdict::done;
  }
  for (const RdAtomicResource& res : s.resources) {
    if (res.kind == RdAtomicResource::none) continue;
    if (psn_diff(psn, res.first_psn) < 0 || psn_diff(psn, res.last_psn) > 0) continue;
    if (res.kind == RdAtomicResource::read && info.kind == OpKind::read_request) return replay_read(res);
    if (res.kind == RdAtomicResource::atomic && is_read_or_atomic(info.kind) && info.kind != OpKind::read_request)
      return replay_atomic(res);
    if (res.kind == RdAtomicResource::ack_only && !is_read_or_atomic(info.kind)) return replay_ack_only(res);
  }
  return Verdict::drop;  // too old to replay (counted as a duplicate)
}

// A duplicate READ streams its responses again from the PSN it names. It must ask for a part of
// the READ it repeats (rxe checks the same): the same R_Key, inside the saved range.
Verdict Engine::ResponderRequest::replay_read(const RdAtomicResource& res) {
  Qp::Responder& s = q->resp;
  const Reth& reth = p.hdr.ext.reth;
  if (reth.rkey != res.rkey || reth.va < res.va || reth.va - res.va > res.length ||
      reth.dma_len > res.length - (reth.va - res.va)) {
    ++q->counters.dropped;
    return Verdict::drop;
  }
  ++q->counters.read_replays;
  e.responder_send_ack(q);
  s.read = res;
  s.reading = true;
  s.read_offset = static_cast<uint32_t>(psn_diff(psn, res.first_psn)) * q->mtu;
  s.read_psn = psn;
  uint32_t budget = e.cfg_.tx_budget;
  e.responder_read_run(q, &budget);
  return Verdict::done;
}

// A duplicate atomic gets the saved original value again; the operation is not repeated.
Verdict Engine::ResponderRequest::replay_atomic(const RdAtomicResource& res) {
  ++q->counters.atomic_replays;
  e.responder_send_ack(q);
  send_atomic_ack(res.first_psn, res.msn, res.orig);
  return Verdict::done;
}

// A duplicate ATOMIC WRITE or FLUSH gets its READ response only again (rxe: oA19-14, oA19-15);
// neither is carried out twice.
Verdict Engine::ResponderRequest::replay_ack_only(const RdAtomicResource& res) {
  ++q->counters.atomic_replays;
  e.responder_send_ack(q);
  send_read_response_ack(res.first_psn, res.msn);
  return Verdict::done;
}

// C9-? opcode sequence: a middle or last packet continues the message in progress (a SEND's or a
// WRITE's, of the same kind); a first or only packet needs none in progress.
inline Verdict Engine::ResponderRequest::check_op_seq() const {
  const bool continues = info.position == Position::middle || info.position == Position::last;
  bool ok = false;
  switch (q->resp.msg) {
    case Qp::Responder::none: ok = !continues; break;
    case Qp::Responder::send: ok = continues && info.kind == OpKind::send; break;
    case Qp::Responder::write: ok = continues && info.kind == OpKind::write; break;
  }
  return ok ? Verdict::ok : Verdict::nak_inv_req;
}

// C9-? packet length: first and middle packets carry exactly the path MTU; a last one 1 to MTU
// bytes (a message of k MTUs ends with a full one); no packet more than the MTU.
inline Verdict Engine::ResponderRequest::check_length() const {
  const Position pos = info.position;
  if ((pos == Position::first || pos == Position::middle) && len != q->mtu) return Verdict::nak_inv_req;
  if (len > q->mtu || (pos == Position::last && len == 0)) return Verdict::nak_inv_req;
  return Verdict::ok;
}

// o9-? READs and atomics need responder resources: a QP with max_dest_rd_atomic 0 takes none.
inline Verdict Engine::ResponderRequest::check_resource() const {
  const bool needs = is_read_or_atomic(info.kind) || info.kind == OpKind::atomic_write;  // not FLUSH (rxe)
  if (needs && q->attr.max_dest_rd_atomic == 0) return Verdict::nak_inv_req;
  return Verdict::ok;
}

// The operation is one a responder serves: SEND, RDMA WRITE, RDMA READ, or an atomic.
inline Verdict Engine::ResponderRequest::check_op_valid() const {
  const OpKind k = info.kind;
  return k == OpKind::send || k == OpKind::write || replayed(k) ? Verdict::ok : Verdict::nak_inv_req;
}

// ---- The checks of each operation ---------------------------------------------------------------

// A message is at most 2^31 bytes: so is a RETH's DMA length.
inline Verdict Engine::ResponderRequest::check_dma_length(const Reth& reth) const {
  return reth.dma_len > 0x80000000u ? Verdict::nak_inv_req : Verdict::ok;
}

// The QP allows the remote access it is asked for (its qp_access_flags; with the R_Key, C9-88).
inline Verdict Engine::ResponderRequest::check_qp_access(uint32_t need) const {
  return (q->attr.qp_access_flags & need) ? Verdict::ok : Verdict::nak_rem_acc;
}

// C9-88: the R_Key names a region of the QP's PD that allows `need` and holds [va, va + length);
// a zero-length RDMA operation checks no R_Key.
inline Verdict Engine::ResponderRequest::check_rkey(uint32_t rkey, uint64_t va, uint32_t length, uint32_t need) {
  if (length == 0) return Verdict::ok;
  return e.mrs_.check_remote(rkey, q->pd, va, length, need, &mr, q->qpn) == MrCheck::ok ? Verdict::ok
                                                                                      : Verdict::nak_rem_acc;
}

// C9-? atomics operate on 8-byte aligned addresses.
inline Verdict Engine::ResponderRequest::check_atomic_align(uint64_t va) const {
  return (va & 7) ? Verdict::nak_inv_req : Verdict::ok;
}

// IBA 1.5's operations, as rxe's check_op_valid: a QP whose qp_access_flags lack any access the
// request needs refuses it as an invalid request (the older operations' QP check answers a remote
// access error instead, above).
inline Verdict Engine::ResponderRequest::check_qp_allows(uint32_t need) const {
  return (q->attr.qp_access_flags & need) == need ? Verdict::ok : Verdict::nak_inv_req;
}

// oA19-28: an ATOMIC WRITE's RETH asks for 8 bytes and its payload is those 8, with no pad.
inline Verdict Engine::ResponderRequest::check_atomic_write_length() const {
  return p.hdr.ext.reth.dma_len == 8 && len == 8 && p.hdr.bth.pad == 0 ? Verdict::ok : Verdict::nak_inv_req;
}

// A FLUSH's R_Key names a region (or window) of the QP's PD with the access its placement type
// asks for, and the range lies in it; a whole-region FLUSH (selectivity level 1) names no range.
// Unlike a READ or WRITE of length 0, a FLUSH of length 0 still has its R_Key checked (rxe).
inline Verdict Engine::ResponderRequest::check_flush_rkey() {
  const Reth& reth = p.hdr.ext.reth;
  const Feth& feth = p.hdr.ext.feth;
  uint64_t va = reth.va;
  uint32_t length = reth.dma_len;
  if (feth.selectivity == kFlushMr) {
    Mr* found = e.mrs_.find(reth.rkey);
    if (found == nullptr) return Verdict::nak_rem_acc;
    va = found->va;
    length = 0;
  }
  return e.mrs_.check_remote(reth.rkey, q->pd, va, length, flush_access(feth.placement_type), &mr, q->qpn) ==
                 MrCheck::ok
             ? Verdict::ok
             : Verdict::nak_rem_acc;
}

// C9-? a WRITE's payloads add up to its RETH's DMA length: none goes past it, the last one ends
// exactly at it.
inline Verdict Engine::ResponderRequest::check_write_length() const {
  const uint32_t left = q->resp.write_left;
  if (len > left || (info.ends_message() && len != left)) return Verdict::nak_inv_req;
  return Verdict::ok;
}

// A SEND, or the last packet of a WRITE with immediate, takes a receive WQE for its message. With
// none, RC answers with an RNR NAK and the PSN is not consumed: the requester sends it again
// (IBA 9.7.5.2.8). UC drops the message; the next may start at the next PSN.
inline Verdict Engine::ResponderRequest::check_recv() {
  Qp::Responder& s = q->resp;
  const bool send = info.kind == OpKind::send;
  const bool takes = send ? info.starts_message() : info.ends_message() && info.immediate();
  if (takes && !s.have_recv) {
    RecvWqe w;
    if (!e.take_recv(q, &w)) {
      if (rc) {
        ++q->counters.rnr_naks_sent;
        DROCE_PROBE(rnr_nak_sent, q->qpn, psn);
        return Verdict::nak_rnr;
      }
      ++q->counters.dropped;
      s.msg = Qp::Responder::none;
      s.epsn = psn_add(psn, 1);
      return Verdict::drop;
    }
    s.recv = w;
    s.have_recv = true;
  }
  if (send && info.starts_message()) s.recv_offset = 0;
  return Verdict::ok;
}

// ---- SEND -------------------------------------------------------------------------------------

inline Verdict Engine::ResponderRequest::serve_send() {
  Verdict v;
  if ((v = step(Check::recv, check_recv())) != Verdict::ok) return v;
  if ((v = step(Check::execute, execute_send())) != Verdict::ok) return v;
  if (info.ends_message()) {
    if (info.invalidate() && (v = step(Check::invalidate, invalidate_rkey())) != Verdict::ok) return v;
    step(Check::complete, complete_send());
  }
  return step(Check::acknowledge, acknowledge());
}

// Places the payload in the receive WQE's scatter list at the message's offset. A scatter list
// too short is an invalid request, a bad L_Key a remote operational error; the receive
// completes with the local error.
inline Verdict Engine::ResponderRequest::execute_send() {
  Qp::Responder& s = q->resp;
  // A message that goes on may fill the rest of the receive: offered as the fault's prefetch.
  const uint64_t ahead = info.ends_message() ? 0 : UINT64_MAX;
  if (OdpReady o = e.sges_ready(q, s.recv.sg_list, s.recv.num_sge, s.recv_offset, len, true, ahead);
      o != OdpReady::now)
    return page_wait(o);
  WcStatus err = WcStatus::success;
  if (!e.scatter(q, s.recv.sg_list, s.recv.num_sge, s.recv_offset, m, p.layout.payload_off, len, &err)) {
    recv_status = err;
    return err == WcStatus::loc_len_err ? Verdict::nak_inv_req : Verdict::nak_rem_op;
  }
  s.recv_offset += len;
  s.msg = info.ends_message() ? Qp::Responder::none : Qp::Responder::send;
  return Verdict::ok;
}

// IBA 9.4.1.2.x: SEND with invalidate; the IETH's R_Key must be one the QP's PD may invalidate.
inline Verdict Engine::ResponderRequest::invalidate_rkey() {
  if (e.mrs_.invalidate(p.hdr.ext.ieth.rkey, q->pd, q->qpn) == 0) return Verdict::ok;
  recv_status = WcStatus::loc_qp_op_err;
  return Verdict::nak_inv_req;
}

// The SEND's last packet: the MSN advances and the receive completes.
inline Verdict Engine::ResponderRequest::complete_send() {
  Qp::Responder& s = q->resp;
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
    c.wc_flags |= kWcWithInv;
    c.imm_data = p.hdr.ext.ieth.rkey;
  }
  s.have_recv = false;
  s.msn = (s.msn + 1) & 0xffffff;
  e.complete_recv(q, s.recv, c, p.hdr.bth.se);
  return Verdict::ok;
}

// ---- RDMA WRITE -------------------------------------------------------------------------------

inline Verdict Engine::ResponderRequest::serve_write() {
  Qp::Responder& s = q->resp;
  Verdict v;
  if (info.starts_message()) {
    ++q->counters.rdma_recvs;
    const Reth& reth = p.hdr.ext.reth;
    if ((v = step(Check::dma_length, check_dma_length(reth))) != Verdict::ok) return v;
    if ((v = step(Check::qp_access, check_qp_access(kAccessRemoteWrite))) != Verdict::ok) return v;
    v = check_rkey(reth.rkey, reth.va, reth.dma_len, kAccessRemoteWrite);
    if ((v = step(Check::rkey, v)) != Verdict::ok) return v;
    s.write_va = reth.va;
    s.write_rkey = reth.rkey;
    s.write_left = reth.dma_len;
    s.write_total = reth.dma_len;
  }
  if ((v = step(Check::write_length, check_write_length())) != Verdict::ok) return v;
  // WRITE with immediate takes its receive before any data is placed.
  if (info.ends_message() && info.immediate() && (v = step(Check::recv, check_recv())) != Verdict::ok) return v;
  if ((v = step(Check::execute, execute_write())) != Verdict::ok) return v;
  if (info.ends_message()) step(Check::complete, complete_write());
  return step(Check::acknowledge, acknowledge());
}

// Copies the payload to the WRITE's next address. The region is looked up again for every
// packet: one deregistered since the first packet is a remote access error.
inline Verdict Engine::ResponderRequest::execute_write() {
  Qp::Responder& s = q->resp;
  if (len != 0) {
    Mr* target = e.mrs_.find(s.write_rkey);
    if (target == nullptr ||
        e.mrs_.check_remote(s.write_rkey, q->pd, s.write_va, len, kAccessRemoteWrite, &target, q->qpn) !=
            MrCheck::ok)
      return Verdict::nak_rem_acc;
    if (OdpReady o = mr_ready(*target, s.write_va, len, true, s.write_left - len); o != OdpReady::now)
      return page_wait(o);
    // An ODP page the application does not map is a remote access error, as an HCA's failed page fault.
    if (!place(*target, s.write_va, m, p.layout.payload_off, len)) return Verdict::nak_rem_acc;
  }
  s.write_va += len;
  s.write_left -= len;
  s.msg = info.ends_message() ? Qp::Responder::none : Qp::Responder::write;
  return Verdict::ok;
}

// The WRITE's last packet: the MSN advances; WRITE with immediate completes its receive.
inline Verdict Engine::ResponderRequest::complete_write() {
  Qp::Responder& s = q->resp;
  s.msn = (s.msn + 1) & 0xffffff;
  if (!info.immediate()) return Verdict::ok;
  Completion c;
  c.wr_id = s.recv.wr_id;
  c.opcode = WcOpcode::recv_rdma_with_imm;
  c.byte_len = s.write_total;
  c.qp_num = q->qpn;
  c.src_qp = q->attr.dest_qp_num;
  c.wc_flags = kWcWithImm;
  c.imm_data = p.hdr.ext.imm.imm;
  s.have_recv = false;
  e.complete_recv(q, s.recv, c, p.hdr.bth.se);
  return Verdict::ok;
}

// ---- RDMA READ --------------------------------------------------------------------------------

inline Verdict Engine::ResponderRequest::serve_read() {
  const Reth& reth = p.hdr.ext.reth;
  Verdict v;
  if ((v = step(Check::qp_access, check_qp_access(kAccessRemoteRead))) != Verdict::ok) return v;
  v = check_rkey(reth.rkey, reth.va, reth.dma_len, kAccessRemoteRead);
  if ((v = step(Check::rkey, v)) != Verdict::ok) return v;
  if ((v = step(Check::dma_length, check_dma_length(reth))) != Verdict::ok) return v;
  return step(Check::execute, execute_read());
}

// Saves the READ as a responder resource (for a duplicate's replay), moves the expected PSN past
// every response PSN it uses, and starts streaming the responses.
inline Verdict Engine::ResponderRequest::execute_read() {
  Qp::Responder& s = q->resp;
  const Reth& reth = p.hdr.ext.reth;
  const uint32_t npackets = std::max<uint32_t>(1, (reth.dma_len + q->mtu - 1) / q->mtu);
  ++q->counters.rdma_recvs;
  e.responder_send_ack(q);
  s.msn = (s.msn + 1) & 0xffffff;
  RdAtomicResource res;
  res.kind = RdAtomicResource::read;
  res.first_psn = psn;
  res.last_psn = psn_add(psn, npackets - 1);
  res.va = reth.va;
  res.rkey = reth.rkey;
  res.length = reth.dma_len;
  res.msn = s.msn;
  save_resource(res);
  s.epsn = psn_add(psn, npackets);
  s.read = res;
  s.reading = true;
  s.read_offset = 0;
  s.read_psn = psn;
  uint32_t budget = e.cfg_.tx_budget;
  e.responder_read_run(q, &budget);
  return Verdict::done;
}

// ---- Atomics ----------------------------------------------------------------------------------

inline Verdict Engine::ResponderRequest::serve_atomic() {
  const AtomicEth& a = p.hdr.ext.atomic_eth;
  Verdict v;
  if ((v = step(Check::qp_access, check_qp_access(kAccessRemoteAtomic))) != Verdict::ok) return v;
  if ((v = step(Check::atomic_align, check_atomic_align(a.va))) != Verdict::ok) return v;
  if ((v = step(Check::rkey, check_rkey(a.rkey, a.va, 8, kAccessRemoteAtomic))) != Verdict::ok) return v;
  return step(Check::execute, execute_atomic());
}

// A real atomic on the memory the application sees (host byte order), saved as a responder
// resource with the original value, answered with an atomic ACK.
inline Verdict Engine::ResponderRequest::execute_atomic() {
  Qp::Responder& s = q->resp;
  const AtomicEth& a = p.hdr.ext.atomic_eth;
  uint64_t orig;
  if (mr->odp == nullptr) [[likely]] {
    auto* target = reinterpret_cast<uint64_t*>(mr_host(*mr, a.va));
    if (info.kind == OpKind::fetch_add) {
      orig = __atomic_fetch_add(target, a.swap_add, __ATOMIC_SEQ_CST);
    } else {
      orig = a.compare;
      __atomic_compare_exchange_n(target, &orig, a.swap_add, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    }
  } else if (OdpReady o = mr_ready(*mr, a.va, 8, true); o != OdpReady::now) {
    return page_wait(o);
  } else if (Verdict v = atomic_odp(&orig); v != Verdict::ok) {
    return v;
  }
  e.responder_send_ack(q);
  s.msn = (s.msn + 1) & 0xffffff;
  RdAtomicResource res;
  res.kind = RdAtomicResource::atomic;
  res.first_psn = res.last_psn = psn;
  res.va = a.va;
  res.rkey = a.rkey;
  res.length = 8;
  res.orig = orig;
  res.msn = s.msn;
  save_resource(res);
  s.epsn = psn_add(psn, 1);
  send_atomic_ack(psn, s.msn, orig);
  return Verdict::done;
}

// An atomic on an ODP region: read, modify, write through the region's OdpMemory. Atomic
// against every other RDMA access this engine makes (one lcore), not against the application's
// CPUs (docs/droced.md "On-demand paging"). A page the application does not map: a remote access
// error, before anything is written.
inline Verdict Engine::ResponderRequest::atomic_odp(uint64_t* orig) {
  const AtomicEth& a = p.hdr.ext.atomic_eth;
  uint64_t value;
  if (!mr_read(*mr, a.va, &value, 8)) return Verdict::nak_rem_acc;
  *orig = value;
  if (info.kind == OpKind::fetch_add) value += a.swap_add;
  else if (value == a.compare) value = a.swap_add;
  else return Verdict::ok;  // compare failed: nothing to write
  return mr_write(*mr, a.va, &value, 8) ? Verdict::ok : Verdict::nak_rem_acc;
}

// The request's on-demand pages are coming in (OdpMemory::ready): it waits first in `held`, with
// nothing of it done that its replay would do twice (the expected PSN, the MSN and the receive's
// offset have not moved; a receive WQE it took stays bound to its message), and what arrives
// after it waits behind it (check_reading). Nothing goes to the peer: no NAK, no retry spent.
// Past the cap it is dropped, and the requester sends it again.
inline Verdict Engine::ResponderRequest::page_wait(OdpReady why) {
  Qp::Responder& s = q->resp;
  s.paging = true;
  e.odp_wait(q, why);
  if (s.held.size() < kMaxHeldRequests) {
    s.held.insert(s.held.begin(), m);
    *kept = true;
  } else {
    ++q->counters.dropped;
  }
  return Verdict::paging;
}

void Engine::ResponderRequest::send_atomic_ack(uint32_t at_psn, uint32_t msn, uint64_t orig) {
  ExtHeaders ext;
  ext.aeth = {kSyndromeAck, msn};
  ext.atomic_ack_eth = {orig};
  send_response(op::kAtomicAcknowledge, at_psn, ext);
}

// A response of headers only at `at_psn` (`opcode` of the QP's transport).
void Engine::ResponderRequest::send_response(uint8_t opcode, uint32_t at_psn, const ExtHeaders& ext) {
  Bth bth;
  bth.opcode = make_opcode(transport_of(q->type), opcode);
  bth.pkey = 0xffff;
  bth.dest_qp = q->attr.dest_qp_num;
  bth.psn = at_psn;
  if (rte_mbuf* out = e.build(q, q->attr.ah_attr, bth, ext, 0)) e.send_frame(out, q);
}

// A READ, atomic, ATOMIC WRITE or FLUSH kept in the ring of responder resources, for a
// duplicate's replay (the oldest is overwritten: max_dest_rd_atomic bounds what is in flight).
void Engine::ResponderRequest::save_resource(const RdAtomicResource& res) {
  Qp::Responder& s = q->resp;
  s.resources[s.resource_next] = res;
  s.resource_next = (s.resource_next + 1) % static_cast<uint32_t>(s.resources.size());
}

// ---- IBA 1.5: ATOMIC WRITE and FLUSH --------------------------------------------------------

inline Verdict Engine::ResponderRequest::serve_atomic_write() {
  const Reth& reth = p.hdr.ext.reth;
  Verdict v;
  // In rxe's order: the QP's access, the DMA length, the R_Key over the RETH's range, then the
  // lengths and the alignment.
  if ((v = step(Check::qp_access, check_qp_allows(kAccessRemoteWrite))) != Verdict::ok) return v;
  if ((v = step(Check::dma_length, check_dma_length(reth))) != Verdict::ok) return v;
  v = e.mrs_.check_remote(reth.rkey, q->pd, reth.va, reth.dma_len, kAccessRemoteWrite, &mr, q->qpn) == MrCheck::ok
          ? Verdict::ok
          : Verdict::nak_rem_acc;
  if ((v = step(Check::rkey, v)) != Verdict::ok) return v;
  if ((v = step(Check::atomic_write_length, check_atomic_write_length())) != Verdict::ok) return v;
  if ((v = step(Check::atomic_align, check_atomic_align(reth.va))) != Verdict::ok) return v;
  return step(Check::execute, execute_atomic_write());
}

// The 8 bytes land in one aligned 64-bit store, after everything the QP placed before them
// (release order: a reader that sees them sees the earlier WRITEs too; rxe's smp_store_release).
// Saved as a responder resource so that a duplicate is answered and not written again.
inline Verdict Engine::ResponderRequest::execute_atomic_write() {
  uint8_t scratch[8];
  uint64_t value;
  std::memcpy(&value, net::FrameBytes(m).read(p.layout.payload_off, 8, scratch), 8);
  if (mr->odp == nullptr) [[likely]] {
    __atomic_store_n(reinterpret_cast<uint64_t*>(mr_host(*mr, p.hdr.ext.reth.va)), value, __ATOMIC_RELEASE);
  } else if (OdpReady o = mr_ready(*mr, p.hdr.ext.reth.va, 8, true); o != OdpReady::now) {
    return page_wait(o);
  } else if (!mr_write(*mr, p.hdr.ext.reth.va, &value, 8)) {  // one 8-byte write of the application's page
    return Verdict::nak_rem_acc;
  }
  ++q->counters.rdma_recvs;
  return answer_ack_only();
}

inline Verdict Engine::ResponderRequest::serve_flush() {
  Verdict v;
  if ((v = step(Check::qp_access, check_qp_allows(flush_access(p.hdr.ext.feth.placement_type)))) != Verdict::ok)
    return v;
  if ((v = step(Check::dma_length, check_dma_length(p.hdr.ext.reth))) != Verdict::ok) return v;
  if ((v = step(Check::rkey, check_flush_rkey())) != Verdict::ok) return v;
  return step(Check::execute, execute_flush());
}

// Global visibility: everything this QP placed before the FLUSH is visible to every reader of the
// memory before the answer leaves. droce writes the application's memory with ordinary stores of
// this thread, so a full fence is all it takes. Persistence is never reached: no region takes
// FLUSH_PERSISTENT (rocev2/mr.cc), so a FLUSH that asks for it failed check_flush_rkey.
inline Verdict Engine::ResponderRequest::execute_flush() {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  return answer_ack_only();
}

// An ATOMIC WRITE or FLUSH done: the message counted, kept as a resource answered again by a
// duplicate (never carried out twice), and answered with its READ response only.
Verdict Engine::ResponderRequest::answer_ack_only() {
  Qp::Responder& s = q->resp;
  e.responder_send_ack(q);
  s.msn = (s.msn + 1) & 0xffffff;
  RdAtomicResource res;
  res.kind = RdAtomicResource::ack_only;
  res.first_psn = res.last_psn = psn;
  res.msn = s.msn;
  save_resource(res);
  s.epsn = psn_add(psn, 1);
  send_read_response_ack(psn, s.msn);
  return Verdict::done;
}

// IBA 1.5 answers ATOMIC WRITE and FLUSH with an RDMA READ response only of no payload, its AETH
// an ACK (rxe's send_read_response_ack).
void Engine::ResponderRequest::send_read_response_ack(uint32_t at_psn, uint32_t msn) {
  ExtHeaders ext;
  ext.aeth = {kSyndromeAck, msn};
  send_response(op::kReadResponseOnly, at_psn, ext);
}

// ---- Acknowledgement --------------------------------------------------------------------------

// The expected PSN moves past the request. An ACK request is answered coalesced: one ACK per QP
// per loop, for the newest PSN (C9-? allows it); UC is never acknowledged.
inline Verdict Engine::ResponderRequest::acknowledge() {
  Qp::Responder& s = q->resp;
  s.epsn = psn_add(psn, 1);
  if (rc && p.hdr.bth.ackreq) {
    if (s.ack_pending) ++q->counters.acks_coalesced;
    s.ack_pending = true;
    s.ack_psn = psn;
    s.ack_syndrome = kSyndromeAck;
    s.ack_msn = s.msn;
    e.mark_ready(q);
  }
  return Verdict::done;
}

void Engine::responder_ud_rx(Qp* q, const ParsedPacket& p, const rte_mbuf* m, bool* kept) {
  // With `kept` the caller owns the frame and may leave it to us (held, freed later).
  auto keep = [&](bool front) {
    auto* own = const_cast<rte_mbuf*>(m);
    if (front) q->resp.held.insert(q->resp.held.begin(), own);
    else q->resp.held.push_back(own);
    *kept = true;
  };
  Qp::Responder& s = q->resp;
  // Behind a datagram waiting for its on-demand pages, in order; a shared (multicast) frame
  // cannot wait and is dropped.
  if (s.paging || (!s.held.empty() && !s.replaying)) {
    if (kept == nullptr || s.held.size() >= kMaxHeldRequests) {
      ++q->counters.dropped;
      return;
    }
    keep(false);
    mark_ready(q);
    return;
  }
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
  if (s.have_recv) {  // the receive a datagram took before it waited for its pages
    w = s.recv;
    s.have_recv = false;
  } else if (!take_recv(q, &w)) {
    ++q->counters.dropped;  // UD has no RNR: the datagram is lost
    return;
  }
  // The GRH area and the payload go to on-demand pages not yet in: the datagram waits for them
  // first in `held`, its receive kept bound (enter_error flushes it as an RC message's). A shared
  // frame is dropped; the receive waits for the next datagram.
  if (OdpReady o = sges_ready(q, w.sg_list, w.num_sge, 0, 40 + p.layout.payload_len, true); o != OdpReady::now) {
    s.recv = w;
    s.have_recv = true;
    odp_wait(q, o);
    if (kept == nullptr) {
      ++q->counters.dropped;
      return;
    }
    s.paging = true;
    keep(true);
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
    if (!mr_write(*mr, sge.addr, grh + skip, n)) {  // an ODP page the application does not map
      ok = false;
      err = WcStatus::loc_prot_err;
      break;
    }
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
