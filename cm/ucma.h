#pragma once
// The rdma_cm device (`/dev/infiniband/rdma_cm`) as Linux's ucma serves it to librdmacm, I/O-free
// (issue #15, docs/cm.md). librdmacm writes fixed command structs (<rdma/rdma_user_cm.h>, ABI 4)
// to its event channel; the host (droced, through the preload's hidden socket) hands each write
// here as bytes and copies the answer back to the command's `response` pointer. This layer keeps
// what the kernel's ucma and rdma_cm keep: event channels and their FIFO of events, cm_ids with
// their port space, bound address and state, the ports in use, address and route resolution
// (through the host's GID table and neighbour table: RoCE needs no SA), the IP CM private-data
// header, and the bookkeeping librdmacm depends on (`events_reported` exact per id, CONNECT_REQUEST
// counted on the listener, events of a destroyed id withdrawn). The wire is the cm::Agent's: REQ,
// REP, RTU, REJ, DREQ and DREP come and go through it, and its events come back here.
//
// The command set is the legacy one (BIND_IP, RESOLVE_IP, QUERY_ROUTE): the AF_IB probe librdmacm
// makes at start (a BIND of an AF_IB address) is refused, so it never takes the AF_IB path.
// Connected (RC, PS_TCP) and SIDR (UD, PS_UDP) ids are served, both sides; so is multicast for UD
// ids (JOIN_IP_MCAST, JOIN_MCAST, LEAVE_MCAST), which on RoCE has no wire protocol of its own: the
// join completes here, as the kernel's cma_iboe_join_multicast does, and the host is told which
// groups have full members (UcmaNetwork::multicast_membership) to send the IGMP/MLD reports a
// switch wants. The app attaches its QP itself (librdmacm does on MULTICAST_JOIN).
//
// Readiness: every channel's queue length is what its eventfd counts. The host learns how it moved
// from take_signals() after each call, and writes (or reads) the eventfd that many times, so
// poll/epoll/O_NONBLOCK on the app's fd behave as on the kernel's. GET_EVENT moves nothing: the
// reader takes one count off the eventfd before it asks (and asks again when the event it counted
// was withdrawn meanwhile: -EAGAIN).
//
// Threading: one thread (droced's worker 0, with the agent).

#include <rdma/rdma_user_cm.h>

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cm/agent.h"
#include "net/addr.h"

namespace droce::cm {

/// What the ucma layer needs from its host's network side.
class UcmaNetwork {
 public:
  enum class Resolve { resolved, pending, failed };
  virtual ~UcmaNetwork() = default;
  /// The local address (and its RoCEv2 GID index) a connection to `dst` leaves from; nullopt
  /// when no local address reaches it.
  virtual std::optional<std::pair<net::IpAddr, uint32_t>> source_for(const net::IpAddr& dst) const = 0;
  /// The RoCEv2 GID index of local address `ip`, or -1 when it is not ours.
  virtual int gid_index(const net::IpAddr& ip) const = 0;
  /// Neighbour resolution of `dst` (ARP): asked again while pending.
  virtual Resolve resolve(const net::IpAddr& src, const net::IpAddr& dst, uint64_t now_ms) = 0;
  /// The first full member of `group` on local address `src` joined (true), or the last one
  /// left (false): the host reports it to the network (IGMP/MLD), as ip_mc_inc_group does.
  virtual void multicast_membership(const net::IpAddr& src, const net::IpAddr& group, bool joined) {
    (void)src, (void)group, (void)joined;
  }
};

struct UcmaConfig {
  uint64_t node_guid = 0;        ///< host order; the ABI carries it big-endian, as sysfs shows it
  uint8_t path_mtu = 3;          ///< IB enum (1 = 256 ... 5 = 4096): the port's active MTU
  uint8_t ca_ack_delay = 15;     ///< REP target ACK delay (rxe's 15)
  uint32_t max_ids = 65536;      ///< per channel: a client cannot exhaust droced
  uint32_t max_events = 4096;    ///< per channel queue (beyond it events are dropped and counted)
  uint32_t seed = 1;             ///< starting PSNs and ephemeral ports
};

/// What each counts is in kUcmaCounters.
struct UcmaCounters {
  uint64_t commands = 0;
  uint64_t errors = 0;
  uint64_t events = 0;
  uint64_t events_dropped = 0;
  uint64_t events_orphaned = 0;
  uint64_t addr_errors = 0;
  uint64_t mcast_joins = 0;
  uint64_t mcast_leaves = 0;
};

/// UcmaCounters described once (core/counter_table.h); droced shows them prefixed cm_.
inline constexpr core::Counter<UcmaCounters> kUcmaCounters[] = {
    {"commands", &UcmaCounters::commands, "rdma_cm commands from librdmacm programs"},
    {"command_errors", &UcmaCounters::errors, "commands answered with an error"},
    {"events", &UcmaCounters::events, "events queued"},
    {"events_dropped", &UcmaCounters::events_dropped, "events dropped: a channel's queue was full"},
    {"events_orphaned", &UcmaCounters::events_orphaned,
     "agent events for no id (destroyed, or a child not accepted)"},
    {"addr_errors", &UcmaCounters::addr_errors, "ADDR_ERROR: no local address or no neighbour in time"},
    {"mcast_joins", &UcmaCounters::mcast_joins, "JOIN_IP_MCAST / JOIN_MCAST answered with MULTICAST_JOIN"},
    {"mcast_leaves", &UcmaCounters::mcast_leaves, "LEAVE_MCAST, and joins dropped with their id"},
};
static_assert(core::covers(kUcmaCounters));

/// One cm_id as `droce cm` shows it.
struct UcmaIdInfo {
  uint32_t channel = 0;
  uint32_t handle = 0;
  std::string state;
  uint16_t ps = 0;
  net::IpAddr src{}, dst{};
  uint16_t sport = 0, dport = 0;
  uint32_t conn = 0;      ///< the agent's comm ID, 0 without a connection
  uint32_t qp_num = 0;    ///< the app's QP (from CONNECT/ACCEPT)
  uint32_t remote_qpn = 0;
  uint32_t events_reported = 0;
  std::vector<net::IpAddr> groups;  ///< multicast groups joined through this id
};

class Ucma {
 public:
  Ucma(Agent* agent, UcmaNetwork* net, UcmaConfig cfg);

  // ---- channels (one per rdma_create_event_channel) -------------------------------------------
  uint32_t open_channel();
  /// The app closed the fd (or died): every id on it is destroyed, connections torn down.
  void close_channel(uint32_t channel, uint64_t now_ms);

  /// One write() of librdmacm on `channel`: `cmd` is what was written (header and body);
  /// `optval` SET_OPTION's input bytes. The response (up to the header's `out`) goes to *resp.
  /// 0, or -errno as the kernel's write() fails (a GET_EVENT with nothing queued: -EAGAIN).
  int command(uint32_t channel, std::span<const uint8_t> cmd, std::span<const uint8_t> optval,
              std::vector<uint8_t>* resp, uint64_t now_ms);

  // ---- the agent and the clock ------------------------------------------------------------
  void on_agent_event(const AgentEvent& e, uint64_t now_ms);
  /// Address resolution retries and timeouts.
  void on_timer(uint64_t now_ms);
  /// An address is being resolved: the host calls on_timer() every few milliseconds meanwhile
  /// (the neighbour table says nothing when an ARP reply comes).
  bool resolving() const;

  /// Per channel, how its queue length moved since the last take (+queued, -withdrawn).
  std::vector<std::pair<uint32_t, int>> take_signals();
  /// Events queued on `channel` and not yet taken.
  size_t queued(uint32_t channel) const;

  const UcmaCounters& counters() const { return counters_; }
  std::vector<UcmaIdInfo> ids() const;
  size_t channels() const { return channels_.size(); }

 private:
  enum class State {
    idle,
    addr_query,     ///< RESOLVE_IP sent, waiting for the neighbour
    addr_resolved,
    route_resolved,
    listen,
    connect,        ///< REQ (or SIDR_REQ) out, or a child between CONNECT_REQUEST and RTU
    established,
    disconnect,     ///< DREQ sent or received, or the peer gone
  };
  struct Id {
    uint32_t handle = 0;
    uint32_t channel = 0;
    uint64_t uid = 0;
    uint16_t ps = 0;
    uint16_t family = 2;          ///< AF_INET or AF_INET6: how addresses go back to the app
    uint8_t qp_type = 0;          ///< IBV_QPT_RC (2) or IBV_QPT_UD (4)
    State state = State::idle;
    bool bound = false;
    bool reuseaddr = false;
    bool child = false;           ///< made for a CONNECT_REQUEST; uid set by ACCEPT
    net::IpAddr src{}, dst{};
    uint16_t sport = 0, dport = 0;
    uint32_t gid_index = 0;
    uint8_t tos = 0;
    std::optional<uint8_t> ack_timeout;  ///< RDMA_OPTION_ID_ACK_TIMEOUT: the QP's, whatever the path says
    uint64_t resolve_deadline_ms = 0;
    uint32_t listener = 0;        ///< the agent's listener ID while listening
    uint32_t conn = 0;            ///< the agent's comm ID while connected
    uint32_t parent = 0;          ///< a child: its listener's handle
    uint32_t events_reported = 0;
    // The connection's parameters, as INIT_QP_ATTR answers them.
    uint32_t psn = 0;             ///< our starting PSN (RTR rq_psn)
    uint32_t qp_num = 0;
    uint32_t remote_qpn = 0;
    uint32_t remote_psn = 0;      ///< RTS sq_psn
    uint32_t qkey = 0;
    uint8_t responder_resources = 0;  ///< RTR max_dest_rd_atomic
    uint8_t initiator_depth = 0;      ///< RTS max_rd_atomic
    uint8_t retry_count = 7;
    uint8_t rnr_retry_count = 7;
    uint8_t path_mtu = 3;
    uint8_t local_ack_timeout = 17;
    uint32_t flow_label = 0;
    uint64_t sidr_tid = 0;        ///< a SIDR child: the request it answers (TID, ID, service, peer)
    uint32_t sidr_request_id = 0;
    uint64_t service_id = 0;
    net::IpAddr sidr_peer{};
    bool has_path = false;        ///< ROUTE_RESOLVED (or made from a REQ)
  };
  struct Queued {
    uint32_t owner = 0;            ///< the id it counts on (the listener for CONNECT_REQUEST)
    uint32_t child = 0;            ///< CONNECT_REQUEST: the new id
    rdma_ucm_event_resp resp{};
  };
  struct Channel {
    std::deque<Queued> events;
    uint32_t ids = 0;
  };
  using Handler = int (Ucma::*)(uint32_t channel, std::span<const uint8_t> body, std::span<const uint8_t> optval,
                                std::vector<uint8_t>* resp, uint64_t now_ms);

  static Handler handler(uint32_t cmd);
  int create_id(uint32_t, std::span<const uint8_t>, std::span<const uint8_t>, std::vector<uint8_t>*, uint64_t);
  int destroy_id(uint32_t, std::span<const uint8_t>, std::span<const uint8_t>, std::vector<uint8_t>*, uint64_t);
  int bind_ip(uint32_t, std::span<const uint8_t>, std::span<const uint8_t>, std::vector<uint8_t>*, uint64_t);
  int resolve_ip(uint32_t, std::span<const uint8_t>, std::span<const uint8_t>, std::vector<uint8_t>*, uint64_t);
  int resolve_route(uint32_t, std::span<const uint8_t>, std::span<const uint8_t>, std::vector<uint8_t>*, uint64_t);
  int query_route(uint32_t, std::span<const uint8_t>, std::span<const uint8_t>, std::vector<uint8_t>*, uint64_t);
  int connect(uint32_t, std::span<const uint8_t>, std::span<const uint8_t>, std::vector<uint8_t>*, uint64_t);
  int listen(uint32_t, std::span<const uint8_t>, std::span<const uint8_t>, std::vector<uint8_t>*, uint64_t);
  int accept(uint32_t, std::span<const uint8_t>, std::span<const uint8_t>, std::vector<uint8_t>*, uint64_t);
  int reject(uint32_t, std::span<const uint8_t>, std::span<const uint8_t>, std::vector<uint8_t>*, uint64_t);
  int disconnect(uint32_t, std::span<const uint8_t>, std::span<const uint8_t>, std::vector<uint8_t>*, uint64_t);
  int init_qp_attr(uint32_t, std::span<const uint8_t>, std::span<const uint8_t>, std::vector<uint8_t>*, uint64_t);
  int get_event(uint32_t, std::span<const uint8_t>, std::span<const uint8_t>, std::vector<uint8_t>*, uint64_t);
  int set_option(uint32_t, std::span<const uint8_t>, std::span<const uint8_t>, std::vector<uint8_t>*, uint64_t);
  int notify(uint32_t, std::span<const uint8_t>, std::span<const uint8_t>, std::vector<uint8_t>*, uint64_t);
  int migrate_id(uint32_t, std::span<const uint8_t>, std::span<const uint8_t>, std::vector<uint8_t>*, uint64_t);
  int join_ip_mcast(uint32_t, std::span<const uint8_t>, std::span<const uint8_t>, std::vector<uint8_t>*, uint64_t);
  int join_mcast(uint32_t, std::span<const uint8_t>, std::span<const uint8_t>, std::vector<uint8_t>*, uint64_t);
  int leave_mcast(uint32_t, std::span<const uint8_t>, std::span<const uint8_t>, std::vector<uint8_t>*, uint64_t);
  int bind_af_ib(uint32_t, std::span<const uint8_t>, std::span<const uint8_t>, std::vector<uint8_t>*, uint64_t);
  int not_supported(uint32_t, std::span<const uint8_t>, std::span<const uint8_t>, std::vector<uint8_t>*, uint64_t);

  /// The id `handle` if it is on `channel` (another channel's ids are not there: -EINVAL).
  Id* find(uint32_t channel, uint32_t handle);
  Id* find(uint32_t handle);
  Id* by_conn(uint32_t conn);
  /// Binds `id` to `addr`:`port` (0: an ephemeral port). -EADDRINUSE, -EADDRNOTAVAIL.
  int bind(Id* id, const net::IpAddr& addr, uint16_t port);
  bool port_taken(const Id& id, const net::IpAddr& addr, uint16_t port) const;
  /// Tears the id's connection or listener down on the wire, withdraws its queued events,
  /// releases its port. Returns its events_reported.
  uint32_t destroy(Id* id, uint64_t now_ms);
  void queue(const Id& id, uint32_t event, int32_t status, uint32_t owner = 0, uint32_t child = 0,
             const rdma_ucm_conn_param* conn = nullptr);
  void push(uint32_t channel, const Queued& q);
  void withdraw(uint32_t channel, uint32_t owner);
  /// The listening id agent listener `agent_listener` stands for, if the request's IP CM header
  /// (decoded into *h) is for its address and its channel has room; else nullptr (counted) and
  /// the REJ reason: 8 for no such listener or address, 3 for no room.
  Id* listener_for(uint32_t agent_listener, std::span<const uint8_t> private_data, IpCmHeader* h,
                   RejReason* why);
  /// A new id on listener `l`'s channel for a request from h.src to h.dst.
  Id& add_child(const Id& l, const IpCmHeader& h);
  void on_connect_request(const AgentEvent& e, uint64_t now_ms);
  void on_sidr_request(const AgentEvent& e, uint64_t now_ms);
  void on_sidr_reply(Id* id, const SidrRep& rep);
  uint32_t new_psn();
  /// A join of `id` (on `channel`) to the group at `addr`; `send_only` joins report no
  /// membership. Answers the multicast's handle, and queues MULTICAST_JOIN.
  int join(uint32_t channel, uint32_t id_handle, uint64_t uid, const void* addr, bool send_only,
           std::vector<uint8_t>* resp);
  /// Drops multicast `handle`: its queued events withdrawn, its membership reported gone.
  /// Returns its events_reported.
  uint32_t leave(uint32_t handle);
  /// True when `owner` (of a queued event) is `id` or one of its multicasts.
  bool owned_by(uint32_t owner, const Id& id) const;

  Agent* agent_;
  UcmaNetwork* net_;
  UcmaConfig cfg_;
  uint64_t rng_;
  uint32_t next_channel_ = 1;
  uint32_t next_handle_ = 1;
  std::map<uint32_t, Channel> channels_;
  std::map<uint32_t, Id> ids_;
  std::map<uint32_t, uint32_t> conn_to_id_;  ///< the agent's comm ID -> id handle
  /// A multicast join (the kernel's ucma_multicast). Its handle comes from the ids' counter, so
  /// a queued event's owner names either an id or a multicast, never both.
  struct Mcast {
    uint32_t id = 0;          ///< the id that joined
    uint64_t uid = 0;         ///< librdmacm's cma_multicast pointer
    net::IpAddr group{};      ///< the MGID: ::ffff:a.b.c.d for IPv4 (RoCEv2), else the IPv6 group
    net::IpAddr src{};        ///< the id's source address when it joined
    bool send_only = false;
    uint32_t events_reported = 0;
  };
  std::map<uint32_t, Mcast> mcasts_;
  /// Full members per (source address, group): the host reports the first and the last.
  std::map<std::pair<net::IpAddr, net::IpAddr>, uint32_t> members_;
  std::map<uint32_t, int> signals_;
  UcmaCounters counters_;
};

/// The event names librdmacm uses (rdma_event_str), for logs and `droce cm`.
const char* ucma_event_name(uint32_t event);

}  // namespace droce::cm
