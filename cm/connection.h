#pragma once
// One IB CM connection's state machine (IBTA Vol. 1 12.9, as the Linux kernel's ib_cm runs it for
// rdma_cm on RoCE), I/O-free: the caller hands it its consumer's calls (connect, accept, reject,
// ready-to-use, disconnect), the CM MADs that arrived for it and the time; it answers with the MADs
// to send and the events for its consumer, and says when it next needs the time (retransmission,
// MRA-extended waits, timewait). The host (droced, issue #15) addresses the MADs, owns the QP and
// keeps the table that finds a connection by comm ID; the engine's shape (rocev2/) applies: crafted
// MADs in, emitted MADs checked, in tests/cm/connection_test.cc.
//
// States (ib_cm's names): idle -> req_sent -> rep_rcvd -> established (active; rep_rcvd is where
// rdma_cm's librdmacm moves its QP to RTR/RTS before ready_to_use() sends the RTU), or
// req_rcvd -> rep_sent -> established (passive); established -> dreq_sent | dreq_rcvd ->
// timewait -> closed; rejects and timeouts end in closed directly (a REJ'd or timed-out
// connection has no QP traffic to wait out).
//
// Timers, as ib_cm computes them (cm_timeout_ms = 4.096 us x 2^t, rounded as the kernel does):
//   REQ:  2 x packet life + the peer's CM response timeout (4608 ms for rdma_cm on RoCE), resent
//         with the same TID up to Max CM Retries times, then unreachable;
//   REP:  the REQ's Local CM Response Timeout, up to the REQ's Max CM Retries, then unreachable;
//   DREQ: the connection's timeout (2 x packet life + the peer's response time), up to Max CM
//         Retries, then disconnected as if answered;
//   an MRA for our REQ or REP extends that wait by its Service Timeout plus the packet life;
//   timewait lasts the QP's ACK timeout (cm_timeout_ms of the path's local ACK timeout).
// Duplicates: a REQ again while the consumer decides (req_rcvd) is answered by an MRA (service
// timeout kMraServiceTimeout, as a 6.1 kernel does); after our REP it is dropped (the REP's own
// timer resends); a REP again after our RTU gets the RTU again, while we decide (rep_rcvd) an MRA;
// a DREQ again in timewait gets the DREP again.

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "cm/mad.h"

namespace droce::cm {

enum class ConnState {
  idle,
  req_sent,
  req_rcvd,
  rep_sent,
  rep_rcvd,
  established,
  dreq_sent,
  dreq_rcvd,
  timewait,
  closed,
};
const char* to_string(ConnState s);

/// What the connection tells its consumer (rdma_cm's events, by the names librdmacm uses).
enum class CmEventType {
  connect_request,   ///< passive: a REQ came (Req in the event)
  connect_response,  ///< active: the REP came (Rep in the event); call ready_to_use() or reject()
  established,       ///< both: the RTU came (passive) or ready_to_use() sent it (active)
  rejected,          ///< a REJ came (reason, private data in the event)
  unreachable,       ///< our REQ or REP went unanswered through every retry
  disconnected,      ///< a DREQ came, or our DREQ was answered or timed out
  timewait_exit,     ///< timewait is over: the QP may be reused
};

struct CmEvent {
  CmEventType type;
  uint16_t reason = 0;  ///< rejected: the REJ's reason
  Message msg;          ///< connect_request: the Req; connect_response: the Rep; rejected: the Rej
};

/// A MAD to send, and for which purpose (the host addresses it: the peer of this connection).
struct Outgoing {
  MadHeader hdr;
  Message msg;
};

/// The active side's REQ, as rdma_cm fills it (the caller sets comm ID, QPN, PSN, GIDs, ...).
struct ConnectParams {
  Req req;
  uint64_t tid = 0;
  /// The packet life time exponent of the path (rdma_cm on RoCE: 16, i.e. 256 ms).
  uint8_t packet_life_time = 16;
};

/// The passive side's REP (the caller sets comm IDs' own half, QPN, PSN, resources, ...).
struct AcceptParams {
  Rep rep;
};

class Connection {
 public:
  /// The MRA service timeout a 6.1 kernel sends on a duplicate REQ or REP (2^16 ms, ~65 s).
  static constexpr uint8_t kMraServiceTimeout = 24;

  /// Active side: sends the REQ at `now_ms`.
  static Connection connect(const ConnectParams& p, uint64_t now_ms);
  /// Passive side: a REQ arrived (with its MAD header); raises connect_request.
  /// `local_comm_id` is this side's ID for the connection.
  static Connection from_req(const MadHeader& hdr, const Req& req, uint32_t local_comm_id, uint64_t now_ms);

  // ---- the consumer -----------------------------------------------------------------------
  /// Passive, in req_rcvd: send the REP (comm IDs filled in here). -EINVAL in another state.
  int accept(const AcceptParams& p, uint64_t now_ms);
  /// Active, in rep_rcvd: send the RTU, raise established. -EINVAL in another state.
  int ready_to_use(uint64_t now_ms);
  /// Either side before established: send a REJ with `reason` (consumer_defined for
  /// rdma_reject) and close. -EINVAL once established or closed.
  int reject(uint16_t reason, const std::array<uint8_t, kRejPrivate>& private_data, uint64_t now_ms);
  /// established: send a DREQ. dreq_rcvd: send the DREP (the peer asked first). Else -EINVAL.
  int disconnect(uint64_t now_ms);

  // ---- the wire and the clock -------------------------------------------------------------
  /// A MAD for this connection (the host matched its comm IDs). Unexpected ones in this state
  /// are ignored (counted by the caller through the return value: false).
  bool on_mad(const MadHeader& hdr, const Message& msg, uint64_t now_ms);
  /// Runs what is due at `now_ms` (retransmission, giving up, timewait's end).
  void on_timer(uint64_t now_ms);
  /// When on_timer next has something to do; nullopt when nothing is pending.
  std::optional<uint64_t> deadline_ms() const { return deadline_; }

  /// MADs to send and events raised since the last take (in order).
  std::vector<Outgoing> take_outgoing() { return std::exchange(out_, {}); }
  std::vector<CmEvent> take_events() { return std::exchange(events_, {}); }

  ConnState state() const { return state_; }
  uint32_t local_comm_id() const { return local_id_; }
  uint32_t remote_comm_id() const { return remote_id_; }
  uint32_t retries_left() const { return retries_left_; }

 private:
  Connection() = default;
  void send(const MadHeader& hdr, const Message& msg);
  void send_with_retry(const MadHeader& hdr, const Message& msg, uint64_t timeout_ms, uint32_t retries,
                       uint64_t now_ms);
  void stop_retry();
  void enter_timewait(uint64_t now_ms);
  void close();
  void raise(CmEventType t, uint16_t reason = 0, Message msg = Message{});
  MadHeader header(uint64_t tid) const;

  ConnState state_ = ConnState::idle;
  bool active_ = false;
  uint32_t local_id_ = 0;
  uint32_t remote_id_ = 0;
  uint32_t remote_qpn_ = 0;
  uint64_t req_tid_ = 0;        ///< the REQ's TID: REP, REJ, MRA and RTU answer with it
  uint64_t dreq_tid_ = 0;
  uint8_t packet_life_ = 16;
  uint8_t max_cm_retries_ = 15;
  uint8_t remote_response_timeout_ = 20;  ///< the peer's CM response time (REQ: remote, passive: local field)
  uint8_t local_ack_timeout_ = 17;
  bool mra_sent_ = false;       ///< passive: an MRA answered a duplicate REQ
  // The one MAD awaiting an answer, resent on its timer.
  std::optional<Outgoing> pending_;
  uint64_t retry_timeout_ms_ = 0;
  uint32_t retries_left_ = 0;
  std::optional<Outgoing> last_answer_;  ///< RTU or DREP, resent on a duplicate REP or DREQ
  std::optional<uint64_t> deadline_;
  std::vector<Outgoing> out_;
  std::vector<CmEvent> events_;
};

}  // namespace droce::cm
