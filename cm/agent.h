#pragma once
// A host's CM agent: every connection and listener of one device, and the MADs of its QP1, I/O-free
// (issue #15). It decodes what arrives (counting what it must drop, by reason), finds the
// connection a MAD is for by the comm IDs in it, answers REQs for services nobody listens on with
// REJ 8 and SIDR_REQs with status 1 as the kernel does, refuses a REQ from a QP it is still
// connected to (REJ 10, stale connection), bounds each listener's backlog, hands out comm IDs that
// do not come back soon, and drives each connection's timers. The host (droced) turns Outgoing
// into UD SENDs on QP1 to `peer` and events into rdma_cm events for its clients.
//
// Identity: a connection is known here by its local comm ID (what the peer echoes as "remote comm
// ID" in REP, RTU, REJ, MRA, DREQ, DREP) and, for a REQ that arrives again, by (the peer's comm ID,
// the peer's CA GUID), as ib_cm keys it.

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "cm/connection.h"
#include "core/counter_table.h"
#include "cm/mad.h"
#include "net/addr.h"

namespace droce::cm {

/// Where a MAD came from or goes to: the peer's GID (its IP, IPv4-mapped). The host resolves the
/// rest (MAC, source GID index) as for any UD destination.
struct Peer {
  net::IpAddr gid{};
  friend bool operator==(const Peer&, const Peer&) = default;
};

struct AgentOutgoing {
  Peer peer;
  Mad mad;
};

/// What the agent tells the host (and through it the consumers: rdma_cm ids).
struct AgentEvent {
  uint32_t conn = 0;        ///< the connection's local comm ID (0 for listener-only events)
  uint32_t listener = 0;    ///< connect_request / sidr_request: the listener it came to
  CmEvent event;            ///< connection events; for a SIDR_REQ, connect_request with the SidrReq
  Peer peer;
  uint64_t tid = 0;         ///< a SIDR_REQ's TID, for sidr_reply()
};

/// What each counts is in kAgentCounters.
struct AgentCounters {
  uint64_t mads_in = 0;
  uint64_t mads_out = 0;
  uint64_t dropped[8] = {};  ///< by MadError (index), what decode refused
  uint64_t unmatched = 0;
  uint64_t rej_no_listener = 0;
  uint64_t rej_stale = 0;
  uint64_t rej_backlog = 0;
  uint64_t sidr_no_listener = 0;
  uint64_t held = 0;

  uint64_t malformed() const {
    uint64_t n = 0;
    for (uint64_t d : dropped) n += d;
    return n;
  }
};

/// AgentCounters described once (core/counter_table.h); droced shows them prefixed cm_.
inline constexpr core::Counter<AgentCounters> kAgentCounters[] = {
    {"agent_mads_in", &AgentCounters::mads_in, "MADs handed to the agent"},
    {"agent_mads_out", &AgentCounters::mads_out, "MADs the agent sent"},
    {"mads_unmatched", &AgentCounters::unmatched, "MADs for no connection we have (or not expected in its state)"},
    {"rej_no_listener", &AgentCounters::rej_no_listener, "REJ 8 sent: nobody listens on the service ID"},
    {"rej_stale", &AgentCounters::rej_stale, "REJ 10 sent: a REQ from a QP still connected here"},
    {"rej_backlog", &AgentCounters::rej_backlog, "REJ 3 sent: the listener's backlog was full"},
    {"sidr_no_listener", &AgentCounters::sidr_no_listener, "SIDR_REP status 1 sent: nobody listens"},
    {"requests_held", &AgentCounters::held, "REQs and SIDR_REQs held for a listener that had just gone"},
};
static_assert(core::covers(kAgentCounters, sizeof(AgentCounters::dropped)));

class Agent {
 public:
  /// `ca_guid`: this device's node GUID (REQ/REP Local CA GUID). `id_seed` scrambles the comm
  /// IDs handed out (the kernel XORs a random value in), so two runs do not reuse each other's.
  Agent(uint64_t ca_guid, uint32_t id_seed);

  // ---- listeners ---------------------------------------------------------------------------
  /// Listens on `service_id` (exact; an IP CM service ID names port space and port). At most
  /// `backlog` connect requests may wait for accept/reject at once. A listener ID > 0, or
  /// -EADDRINUSE when someone listens there already. Requests held for this service (below)
  /// come to it now.
  int64_t listen(uint64_t service_id, uint32_t backlog, uint64_t now_ms = 0);
  /// A listener gone. For kListenGapMs its service's REQs and SIDR_REQs (and those for its port in
  /// the other IP port spaces) are held (up to kHoldMs)
  /// rather than refused at once, in case the consumer listens again: perftest -R destroys its
  /// listener after its parameter exchange and makes a new one for the test's connection, and a
  /// client quicker than its server would otherwise get REJECTED 8 (the kernel rejects at once;
  /// on a fast software stack the race is lost). Held requests that find no listener in time
  /// are refused as before (REJ 8, SIDR status 1).
  void stop_listening(uint32_t listener, uint64_t now_ms = 0);
  static constexpr uint64_t kListenGapMs = 4000;
  static constexpr uint64_t kHoldMs = 4000;
  static constexpr size_t kMaxHeld = 256;

  // ---- connections ------------------------------------------------------------------------
  /// Active side: a new comm ID for the REQ (filled into p.req.local_comm_id, the CA GUID too),
  /// the REQ sent to `peer`. Returns the comm ID.
  uint32_t connect(ConnectParams p, const Peer& peer, uint64_t now_ms);
  /// The consumer's calls on connection `conn` (its local comm ID): as Connection's, -ENOENT for
  /// an unknown one.
  int accept(uint32_t conn, AcceptParams p, uint64_t now_ms);
  int ready_to_use(uint32_t conn, uint64_t now_ms);
  int reject(uint32_t conn, uint16_t reason, const std::array<uint8_t, kRejPrivate>& private_data,
             uint64_t now_ms);
  int disconnect(uint32_t conn, uint64_t now_ms);
  /// The connection's state, or nullopt once it is gone.
  std::optional<ConnState> state(uint32_t conn) const;

  // ---- SIDR (UD) ---------------------------------------------------------------------------
  /// Passive: answer a SIDR_REQ (raised as a sidr_request event) from `peer` with `rep`.
  void sidr_reply(const Peer& peer, uint64_t tid, const SidrRep& rep);
  /// Active: sends `req` (its Request ID chosen here, from the comm IDs) to `peer`, again every
  /// `timeout_ms` up to `retries` times, as ib_cm does (rdma_cm: 4096 ms, 15). The SIDR_REP from
  /// that peer comes back as a connect_response event (conn = the Request ID, msg = the SidrRep);
  /// no answer at all as unreachable. Returns the Request ID.
  uint32_t sidr_request(SidrReq req, const Peer& peer, uint64_t now_ms, uint64_t timeout_ms = 4096,
                        uint32_t retries = 15);
  /// Forgets a SIDR request (its consumer is gone): a late answer is unmatched.
  void cancel_sidr(uint32_t request_id) { sidr_.erase(request_id); }

  // ---- the wire and the clock --------------------------------------------------------------
  /// A MAD that arrived on QP1 from `from` (its GRH source).
  void on_mad(std::span<const uint8_t> bytes, const Peer& from, uint64_t now_ms);
  void on_timer(uint64_t now_ms);
  std::optional<uint64_t> deadline_ms() const;

  std::vector<AgentOutgoing> take_outgoing() { return std::exchange(out_, {}); }
  bool has_outgoing() const { return !out_.empty(); }
  std::vector<AgentEvent> take_events() { return std::exchange(events_, {}); }
  const AgentCounters& counters() const { return counters_; }
  size_t connections() const { return conns_.size(); }

 private:
  struct Entry {
    Connection conn;
    Peer peer;
    uint32_t listener = 0;        ///< passive: the listener, while its request waits in the backlog
    uint64_t remote_guid = 0;
    uint32_t remote_qpn = 0;
  };
  struct SidrPending {
    Peer peer;
    MadHeader hdr;
    SidrReq req;
    uint64_t timeout_ms = 0;
    uint64_t deadline_ms = 0;
    uint32_t retries_left = 0;
  };
  struct Listener {
    uint64_t service_id = 0;
    uint32_t backlog = 0;
    uint32_t waiting = 0;         ///< connect requests not yet accepted or rejected
  };

  uint32_t new_comm_id();
  void send(const Peer& peer, const MadHeader& hdr, const Message& msg);
  /// Moves what connection `id` emitted to the outbox and events, and drops it once closed.
  void collect(uint32_t id);
  void on_req(const MadHeader& hdr, const Req& req, const Peer& from, uint64_t now_ms);
  void on_sidr_req(const MadHeader& hdr, const SidrReq& req, const Peer& from, uint64_t now_ms);
  /// Holds a request for `service_id` if its listener went away moments ago; false if not.
  bool hold(uint64_t service_id, const MadHeader& hdr, const Message& msg, const Peer& from, uint64_t now_ms);
  void refuse_sidr(const Peer& to, const MadHeader& hdr, const SidrReq& req);
  void reject_req(const Peer& to, const MadHeader& hdr, const Req& req, RejReason reason);
  Entry* find(uint32_t id);

  uint64_t ca_guid_;
  uint32_t id_seed_;
  uint32_t next_id_ = 1;
  uint32_t next_listener_ = 1;
  std::map<uint32_t, Entry> conns_;                          ///< by local comm ID
  std::map<std::pair<uint64_t, uint32_t>, uint32_t> by_remote_;  ///< (peer GUID, peer comm ID) -> local
  std::map<uint32_t, Listener> listeners_;
  std::map<uint32_t, SidrPending> sidr_;                     ///< active SIDR requests by Request ID
  struct Held {
    uint64_t service_id = 0;
    MadHeader hdr;
    Message msg;
    Peer peer;
    uint64_t deadline_ms = 0;
  };
  std::vector<Held> held_;                                   ///< requests waiting for a listener
  std::map<uint64_t, uint64_t> closed_;                      ///< service ID -> when its listener went
  std::vector<AgentOutgoing> out_;
  std::vector<AgentEvent> events_;
  AgentCounters counters_;
};

}  // namespace droce::cm
