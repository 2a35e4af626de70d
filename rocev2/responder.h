#pragma once
// The responder's checks and their verdicts (IBA 9.7.5.1; the shape of rxe_resp.c's states).
//
// Engine::responder_rx (rocev2/responder.cc) takes each RC or UC request through a chain of
// small checks, in the specification's order, each enforcing one rule and returning a verdict:
// `ok` sends the request on to the next check; any other verdict ends the chain and says what
// the responder does with the request (executes and answers it, drops it, holds it, NAKs it).
// ResponderCheck names the checks and ResponderVerdict the verdicts; their names double as log
// and trace names, so a trace can say which rule a request met.
//
// Tracing: debug builds (no NDEBUG) record every check's verdict for the latest requests in a
// ResponderTrace (Engine::responder_trace()), for a test or a debugger to read; release builds
// record nothing and the recording compiles out (kResponderTrace). Builds with
// DROCE_DATAPATH_LOG also log every verdict other than ok and done (core/log.h, at debug level).
//
// Threading: the trace belongs to its engine's lcore; nothing here is synchronized.

#include <array>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <string>

namespace droce::rocev2 {

// The checks and the rule each enforces. A request meets the first nine in this order (state to
// op_valid; `duplicate` only a duplicate, which ends there; `xrc_srq` only an XRC
// target's requests), then its operation's own in the order
// below, until a verdict other than `ok` ends the chain:
//   SEND     recv, execute, [last packet: invalidate (with invalidate), complete], acknowledge
//   WRITE    [first packet: dma_length, qp_access, rkey], write_length, [last with immediate:
//            recv], execute, [last packet: complete], acknowledge
//   READ     qp_access, rkey, dma_length, execute
//   atomics  qp_access, atomic_align, rkey, execute
//   ATOMIC WRITE  qp_access, dma_length, rkey, atomic_write_length, atomic_align, execute
//   FLUSH    qp_access, dma_length, rkey, execute
// (ATOMIC WRITE and FLUSH as rxe checks them: a QP without the access is an invalid request,
// a region without it a remote access error.)
#define DROCE_RESPONDER_CHECK_LIST(X)                                                                  \
  X(state, "the QP takes requests from RTR on; in RESET or INIT they are dropped")                      \
  X(reading, "responses leave in request order: a request behind a streaming READ waits")             \
  X(psn, "the PSN is the expected one; older is a duplicate, newer is out of sequence (IBA 9.7.5.1.1)") \
  X(duplicate, "a duplicate is answered again, never executed again (IBA 9.7.5.1.4)")                  \
  X(xrc_srq, "XRC: the XRCETH names an XRC SRQ of the target QP's XRC domain (IBA A14)")          \
  X(op_seq, "a middle or last packet continues the message in progress, a first or only starts one")  \
  X(length, "first and middle packets carry exactly the MTU, a last one 1 to MTU bytes, none more")   \
  X(resource, "READs, atomics and ATOMIC WRITEs need responder resources (max_dest_rd_atomic > 0)")    \
  X(op_valid, "the operation is one a responder serves: SEND, WRITE, READ, an atomic, ATOMIC WRITE or FLUSH") \
  X(dma_length, "a RETH's DMA length is at most 2^31 bytes")                                          \
  X(qp_access, "the QP allows the remote access (its qp_access_flags)")                                \
  X(rkey, "the R_Key names a region of the QP's PD that allows the access and holds the range (C9-88)") \
  X(atomic_align, "an atomic's address is 8-byte aligned")                                            \
  X(atomic_write_length, "an ATOMIC WRITE's RETH length and payload are 8 bytes, no pad (oA19-28)")    \
  X(write_length, "a WRITE's payloads add up to its RETH's DMA length")                                \
  X(recv, "a SEND, or the last packet of a WRITE with immediate, takes a receive WQE (IBA 9.7.5.2.8)") \
  X(execute, "the operation is carried out: payload placed, READ streamed, atomic applied, flushed")   \
  X(invalidate, "SEND with invalidate: the IETH's R_Key is one the QP's PD may invalidate")            \
  X(complete, "the last packet of a message ends it: the MSN advances, the receive completes")         \
  X(acknowledge, "the expected PSN advances; an ACK request is answered (coalesced per QP and loop)")

enum class ResponderCheck : uint8_t {
#define DROCE_X(name, rule) name,
  DROCE_RESPONDER_CHECK_LIST(DROCE_X)
#undef DROCE_X
};

#define DROCE_RESPONDER_VERDICT_LIST(X)                                                                \
  X(ok, "passed: on to the next check")                                                               \
  X(done, "executed; answered (ACK, READ responses, atomic ACK) now or by the coalesced ACK")          \
  X(drop, "dropped without an answer; the check that decided counted it")                             \
  X(hold, "kept, unanswered, until the READ responses ahead of it are out")                           \
  X(paging, "kept, unanswered, until its on-demand pages are in (tried again on the ODP timer)")      \
  X(duplicate, "a PSN already served: answered again, not executed again")                            \
  X(nak_seq, "NAK PSN sequence error for the expected PSN: the first request past a gap")             \
  X(nak_rnr, "RNR NAK: no receive WQE; the requester sends the request again after the timer")        \
  X(nak_inv_req, "NAK invalid request; the QP goes to ERR (UC, without NAKs: the message is dropped)") \
  X(nak_rem_acc, "NAK remote access error; the QP goes to ERR (UC: the message is dropped)")          \
  X(nak_rem_op, "NAK remote operational error; the QP goes to ERR (UC: the message is dropped)")

enum class ResponderVerdict : uint8_t {
#define DROCE_X(name, text) name,
  DROCE_RESPONDER_VERDICT_LIST(DROCE_X)
#undef DROCE_X
};

/// The enumerator's name ("rkey", "nak_rem_acc"), as logs and traces print it; "?" if none.
const char* to_string(ResponderCheck c);
const char* to_string(ResponderVerdict v);
/// The rule a check enforces, or what a verdict means, in a sentence.
const char* describe(ResponderCheck c);
const char* describe(ResponderVerdict v);

/// Whether the responder records its checks' verdicts: in debug builds only.
#ifdef NDEBUG
inline constexpr bool kResponderTrace = false;
#else
inline constexpr bool kResponderTrace = true;
#endif

/// One check's verdict on one request.
struct ResponderTraceEntry {
  uint32_t qpn = 0;
  uint32_t psn = 0;
  uint8_t opcode = 0;  ///< the request's BTH opcode
  ResponderCheck check = ResponderCheck::state;
  ResponderVerdict verdict = ResponderVerdict::ok;
};

/// "qp 0x11 psn 0x005001 RC_SEND_ONLY psn: nak_seq" (for failure messages and debuggers).
std::string to_string(const ResponderTraceEntry& e);

/// The latest kDepth entries, a ring: enough for the last dozens of requests (one makes 3 to 12
/// entries). Its size does not depend on NDEBUG, so neither does the Engine's layout (translation
/// units built with and without it still agree); in release builds it is simply never written
/// (3 KB per engine, never touched).
class ResponderTrace {
 public:
  static constexpr size_t kDepth = 256;

  void record(const ResponderTraceEntry& e) {
    ring_[recorded_ % kDepth] = e;
    ++recorded_;
  }
  /// Entries held, at most kDepth; [0] is the oldest, [size() - 1] the newest.
  size_t size() const { return recorded_ < kDepth ? static_cast<size_t>(recorded_) : kDepth; }
  const ResponderTraceEntry& operator[](size_t i) const {
    assert(i < size());
    return ring_[(recorded_ - size() + i) % kDepth];
  }
  /// Entries recorded since the start or clear(), the overwritten ones included.
  uint64_t recorded() const { return recorded_; }
  void clear() { recorded_ = 0; }

 private:
  std::array<ResponderTraceEntry, kDepth> ring_{};
  uint64_t recorded_ = 0;
};

}  // namespace droce::rocev2
