#include "cm/ucma.h"

#include <endian.h>
#include <netinet/in.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

namespace droce::cm {
namespace {

// rdma_cma.h's event numbers and port spaces (librdmacm's, which the ABI carries as integers).
enum : uint32_t {
  kAddrResolved = 0,
  kAddrError = 1,
  kRouteResolved = 2,
  kRouteError = 3,
  kConnectRequest = 4,
  kConnectResponse = 5,
  kConnectError = 6,
  kUnreachable = 7,
  kRejected = 8,
  kEstablished = 9,
  kDisconnected = 10,
  kDeviceRemoval = 11,
  kMulticastJoin = 12,
  kMulticastError = 13,
  kAddrChange = 14,
  kTimewaitExit = 15,
};
constexpr uint16_t kPsIpoib = 0x0002, kPsIb = 0x013F, kPsTcp = 0x0106, kPsUdp = 0x0111;
constexpr uint8_t kQptRc = 2, kQptUd = 4;
constexpr uint32_t kUdpQkey = 0x01234567;  // RDMA_UDP_QKEY
constexpr uint8_t kCmResponseTimeout = 20;  // CMA_CM_RESPONSE_TIMEOUT
constexpr uint8_t kMaxCmRetries = 15;       // CMA_MAX_CM_RETRIES
constexpr uint8_t kPacketLifeTime = 16;     // CMA_IBOE_PACKET_LIFETIME
constexpr uint8_t kHopLimit = 64;
constexpr uint32_t kMaxBacklog = 1024;      // net.rdma_ucm.max_backlog
constexpr uint16_t kPortLow = 32768, kPortHigh = 60999;  // ip_local_port_range
// The smallest GET_EVENT answer the kernel accepts (the event without `reserved` and `ece`).
constexpr size_t kMinEventOut = sizeof(rdma_ucm_event_resp) - sizeof(uint32_t) - sizeof(rdma_ucm_ece);

// ib_verbs.h's QP states and attribute mask bits (as ibv_modify_qp takes them).
enum : uint32_t { kQpsInit = 1, kQpsRtr = 2, kQpsRts = 3 };
enum : uint32_t {
  kMaskState = 1u << 0,
  kMaskAccess = 1u << 3,
  kMaskPkeyIndex = 1u << 4,
  kMaskPort = 1u << 5,
  kMaskQkey = 1u << 6,
  kMaskAv = 1u << 7,
  kMaskPathMtu = 1u << 8,
  kMaskTimeout = 1u << 9,
  kMaskRetryCnt = 1u << 10,
  kMaskRnrRetry = 1u << 11,
  kMaskRqPsn = 1u << 12,
  kMaskMaxQpRdAtomic = 1u << 13,
  kMaskMinRnrTimer = 1u << 15,
  kMaskSqPsn = 1u << 16,
  kMaskMaxDestRdAtomic = 1u << 17,
  kMaskDestQpn = 1u << 20,
};
enum : uint32_t { kAccessRemoteWrite = 2, kAccessRemoteRead = 4, kAccessRemoteAtomic = 8 };

// The body of a command: the bytes after the header, zero-filled to the struct's size (the
// kernel reads a struct from user memory whatever `in` says; CONNECT and ACCEPT from old
// librdmacm lack the trailing ECE).
template <typename T>
T body_as(std::span<const uint8_t> body) {
  T t{};
  std::memcpy(&t, body.data(), std::min(body.size(), sizeof t));
  return t;
}

template <typename T>
void respond(const T& t, std::vector<uint8_t>* resp) {
  resp->resize(sizeof t);
  std::memcpy(resp->data(), &t, sizeof t);
}

bool is_wildcard(const net::IpAddr& a) {
  static const net::IpAddr v4_any = net::ipv4_mapped(0);
  return a == net::IpAddr{} || a == v4_any;
}

bool is_loopback(const net::IpAddr& a) {
  static const net::IpAddr v6_loopback = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  return (net::is_ipv4_mapped(a) && a[12] == 127) || a == v6_loopback;
}

// The kernel's cma_any_addr(): the wildcard and loopback addresses bind no device, listen
// everywhere and overlap every other bind of their port.
bool is_any(const net::IpAddr& a) { return is_wildcard(a) || is_loopback(a); }

// A sockaddr in a sockaddr_in6-sized (or larger) field: AF_INET or AF_INET6.
bool parse_sockaddr(const void* raw, net::IpAddr* ip, uint16_t* port, uint16_t* family) {
  sockaddr_in6 sa{};
  std::memcpy(&sa, raw, sizeof sa);
  if (sa.sin6_family == AF_INET) {
    sockaddr_in s4{};
    std::memcpy(&s4, raw, sizeof s4);
    *ip = net::ipv4_mapped(be32toh(s4.sin_addr.s_addr));
    *port = be16toh(s4.sin_port);
    *family = AF_INET;
    return true;
  }
  if (sa.sin6_family == AF_INET6) {
    std::memcpy(ip->data(), &sa.sin6_addr, 16);
    *port = be16toh(sa.sin6_port);
    *family = AF_INET6;
    return true;
  }
  return false;
}

void put_sockaddr(const net::IpAddr& ip, uint16_t port, uint16_t family, void* out) {
  if (family == AF_INET) {
    sockaddr_in s4{};
    s4.sin_family = AF_INET;
    s4.sin_port = htobe16(port);
    s4.sin_addr.s_addr = htobe32(net::ipv4_of(ip));
    std::memcpy(out, &s4, sizeof s4);
    return;
  }
  sockaddr_in6 s6{};
  s6.sin6_family = AF_INET6;
  s6.sin6_port = htobe16(port);
  std::memcpy(&s6.sin6_addr, ip.data(), 16);
  std::memcpy(out, &s6, sizeof s6);
}

uint16_t service_ps(uint16_t ps) { return ps & 0xff; }

// An address handle toward `dgid` on RoCE, as the kernel's ib_init_ah_attr_from_path and
// ib_init_ah_from_mcmember make it: global (a GRH), port 1, hop limit 64.
ib_uverbs_ah_attr roce_ah(const net::IpAddr& dgid, uint32_t flow_label, uint32_t sgid_index, uint8_t tclass) {
  ib_uverbs_ah_attr a{};
  std::memcpy(a.grh.dgid, dgid.data(), 16);
  a.grh.flow_label = flow_label;
  a.grh.sgid_index = static_cast<uint8_t>(sgid_index);
  a.grh.hop_limit = kHopLimit;
  a.grh.traffic_class = tclass;
  a.is_global = 1;
  a.port_num = 1;
  return a;
}

// ib_cm's cm_ack_timeout(): the QP's local ACK timeout from the peer's ACK delay and the path.
uint8_t ack_timeout(uint8_t ca_ack_delay, uint8_t packet_life_time) {
  int t = packet_life_time + 1;
  if (t >= ca_ack_delay)
    t += (ca_ack_delay >= t - 1);
  else
    t = ca_ack_delay + (t >= ca_ack_delay - 1);
  return static_cast<uint8_t>(std::min(t, 31));
}

}  // namespace

const char* ucma_event_name(uint32_t event) {
  static const char* const names[] = {
      "RDMA_CM_EVENT_ADDR_RESOLVED",    "RDMA_CM_EVENT_ADDR_ERROR",      "RDMA_CM_EVENT_ROUTE_RESOLVED",
      "RDMA_CM_EVENT_ROUTE_ERROR",      "RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
      "RDMA_CM_EVENT_CONNECT_ERROR",    "RDMA_CM_EVENT_UNREACHABLE",     "RDMA_CM_EVENT_REJECTED",
      "RDMA_CM_EVENT_ESTABLISHED",      "RDMA_CM_EVENT_DISCONNECTED",    "RDMA_CM_EVENT_DEVICE_REMOVAL",
      "RDMA_CM_EVENT_MULTICAST_JOIN",   "RDMA_CM_EVENT_MULTICAST_ERROR", "RDMA_CM_EVENT_ADDR_CHANGE",
      "RDMA_CM_EVENT_TIMEWAIT_EXIT"};
  return event < std::size(names) ? names[event] : "UNKNOWN EVENT";
}

Ucma::Ucma(Agent* agent, UcmaNetwork* net, UcmaConfig cfg)
    : agent_(agent), net_(net), cfg_(cfg), rng_(0x9e3779b97f4a7c15ULL ^ cfg.seed) {}

uint32_t Ucma::new_psn() {
  rng_ ^= rng_ << 13;
  rng_ ^= rng_ >> 7;
  rng_ ^= rng_ << 17;
  return static_cast<uint32_t>(rng_ >> 20) & 0xFFFFFF;
}

uint32_t Ucma::open_channel() {
  const uint32_t ch = next_channel_++;
  channels_[ch] = Channel{};
  return ch;
}

void Ucma::close_channel(uint32_t channel, uint64_t now_ms) {
  std::vector<uint32_t> mine;
  for (const auto& [h, id] : ids_)
    if (id.channel == channel) mine.push_back(h);
  for (uint32_t h : mine)
    if (Id* id = find(h)) destroy(id, now_ms);
  channels_.erase(channel);
  signals_.erase(channel);
}

size_t Ucma::queued(uint32_t channel) const {
  auto it = channels_.find(channel);
  return it == channels_.end() ? 0 : it->second.events.size();
}

std::vector<std::pair<uint32_t, int>> Ucma::take_signals() {
  std::vector<std::pair<uint32_t, int>> out;
  for (const auto& [ch, n] : signals_)
    if (n != 0) out.emplace_back(ch, n);
  signals_.clear();
  return out;
}

Ucma::Id* Ucma::find(uint32_t handle) {
  auto it = ids_.find(handle);
  return it == ids_.end() ? nullptr : &it->second;
}

Ucma::Id* Ucma::find(uint32_t channel, uint32_t handle) {
  Id* id = find(handle);
  return id != nullptr && id->channel == channel ? id : nullptr;
}

Ucma::Id* Ucma::by_conn(uint32_t conn) {
  auto it = conn_to_id_.find(conn);
  return it == conn_to_id_.end() ? nullptr : find(it->second);
}

// The handler of command number `cmd` (<rdma/rdma_user_cm.h>), nullptr past the table (EINVAL,
// as the kernel's). GET_OPTION and the AF_IB address commands (QUERY, RESOLVE_ADDR) answer ENOSYS.
Ucma::Handler Ucma::handler(uint32_t cmd) {
  static const auto kTable = [] {
    struct Entry {
      uint32_t cmd;
      Handler handler;
    };
    static constexpr Entry kEntries[] = {
      {RDMA_USER_CM_CMD_CREATE_ID, &Ucma::create_id},
      {RDMA_USER_CM_CMD_DESTROY_ID, &Ucma::destroy_id},
      {RDMA_USER_CM_CMD_BIND_IP, &Ucma::bind_ip},
      {RDMA_USER_CM_CMD_RESOLVE_IP, &Ucma::resolve_ip},
      {RDMA_USER_CM_CMD_RESOLVE_ROUTE, &Ucma::resolve_route},
      {RDMA_USER_CM_CMD_QUERY_ROUTE, &Ucma::query_route},
      {RDMA_USER_CM_CMD_CONNECT, &Ucma::connect},
      {RDMA_USER_CM_CMD_LISTEN, &Ucma::listen},
      {RDMA_USER_CM_CMD_ACCEPT, &Ucma::accept},
      {RDMA_USER_CM_CMD_REJECT, &Ucma::reject},
      {RDMA_USER_CM_CMD_DISCONNECT, &Ucma::disconnect},
      {RDMA_USER_CM_CMD_INIT_QP_ATTR, &Ucma::init_qp_attr},
      {RDMA_USER_CM_CMD_GET_EVENT, &Ucma::get_event},
      {RDMA_USER_CM_CMD_SET_OPTION, &Ucma::set_option},
      {RDMA_USER_CM_CMD_NOTIFY, &Ucma::notify},
      {RDMA_USER_CM_CMD_MIGRATE_ID, &Ucma::migrate_id},
      {RDMA_USER_CM_CMD_BIND, &Ucma::bind_af_ib},
      {RDMA_USER_CM_CMD_JOIN_IP_MCAST, &Ucma::join_ip_mcast},
      {RDMA_USER_CM_CMD_JOIN_MCAST, &Ucma::join_mcast},
      {RDMA_USER_CM_CMD_LEAVE_MCAST, &Ucma::leave_mcast},
      {RDMA_USER_CM_CMD_GET_OPTION, &Ucma::not_supported},
      {RDMA_USER_CM_CMD_QUERY, &Ucma::not_supported},
      {RDMA_USER_CM_CMD_RESOLVE_ADDR, &Ucma::not_supported},
    };
    std::array<Handler, RDMA_USER_CM_CMD_JOIN_MCAST + 1> t{};
    for (const Entry& e : kEntries) t.at(e.cmd) = e.handler;
    return t;
  }();
  return cmd < kTable.size() ? kTable[cmd] : nullptr;
}

int Ucma::command(uint32_t channel, std::span<const uint8_t> cmd, std::span<const uint8_t> optval,
                  std::vector<uint8_t>* resp, uint64_t now_ms) {
  ++counters_.commands;
  resp->clear();
  rdma_ucm_cmd_hdr hdr{};
  int rc = -EINVAL;
  if (channels_.count(channel) != 0 && cmd.size() >= sizeof hdr) {
    std::memcpy(&hdr, cmd.data(), sizeof hdr);
    if (size_t{hdr.in} + sizeof hdr <= cmd.size())
      if (const Handler h = handler(hdr.cmd); h != nullptr)
        rc = (this->*h)(channel, cmd.subspan(sizeof hdr, hdr.in), optval, resp, now_ms);
  }
  if (rc == 0 && !resp->empty()) {
    if (hdr.out < resp->size() && !(hdr.cmd == RDMA_USER_CM_CMD_GET_EVENT && hdr.out >= kMinEventOut))
      rc = -ENOSPC;  // checked after the fact only for answers that change nothing
    else
      resp->resize(std::min<size_t>(resp->size(), hdr.out));
  }
  if (rc != 0) {
    resp->clear();
    if (rc != -EAGAIN) ++counters_.errors;
  }
  return rc;
}

// ---- ids ----------------------------------------------------------------------------------------

int Ucma::create_id(uint32_t channel, std::span<const uint8_t> body, std::span<const uint8_t>,
                    std::vector<uint8_t>* resp, uint64_t) {
  const auto c = body_as<rdma_ucm_create_id>(body);
  uint8_t qp_type = 0;
  switch (c.ps) {
    case kPsTcp: qp_type = kQptRc; break;
    case kPsUdp:
    case kPsIpoib: qp_type = kQptUd; break;
    case kPsIb: qp_type = c.qp_type; break;
    default: return -EINVAL;
  }
  if (qp_type != kQptRc && qp_type != kQptUd) return -EINVAL;
  Channel& ch = channels_[channel];
  if (ch.ids >= cfg_.max_ids) return -ENOMEM;
  Id id;
  id.handle = next_handle_++;
  id.channel = channel;
  id.uid = c.uid;
  id.ps = c.ps;
  id.qp_type = qp_type;
  id.qkey = qp_type == kQptUd ? kUdpQkey : 0;
  id.psn = new_psn();
  id.path_mtu = cfg_.path_mtu;
  ++ch.ids;
  ids_[id.handle] = id;
  respond(rdma_ucm_create_id_resp{id.handle}, resp);
  return 0;
}

int Ucma::destroy_id(uint32_t channel, std::span<const uint8_t> body, std::span<const uint8_t>,
                     std::vector<uint8_t>* resp, uint64_t now_ms) {
  const auto c = body_as<rdma_ucm_destroy_id>(body);
  Id* id = find(channel, c.id);
  if (id == nullptr) return -EINVAL;
  respond(rdma_ucm_destroy_id_resp{destroy(id, now_ms)}, resp);
  return 0;
}

uint32_t Ucma::destroy(Id* id, uint64_t now_ms) {
  const uint32_t handle = id->handle;
  const uint32_t reported = id->events_reported;
  if (id->listener != 0) agent_->stop_listening(id->listener, now_ms);
  if (id->conn != 0) {
    const uint32_t conn = id->conn;
    conn_to_id_.erase(conn);
    id->conn = 0;
    if (id->qp_type == kQptUd) agent_->cancel_sidr(conn);
    switch (agent_->state(conn).value_or(ConnState::closed)) {
      case ConnState::req_sent:
        agent_->reject(conn, uint16_t(RejReason::timeout), {}, now_ms);
        break;
      case ConnState::req_rcvd:
      case ConnState::rep_sent:
      case ConnState::rep_rcvd:
        agent_->reject(conn, uint16_t(RejReason::consumer_defined), {}, now_ms);
        break;
      case ConnState::established:
      case ConnState::dreq_rcvd:
        agent_->disconnect(conn, now_ms);
        break;
      default:
        break;
    }
  }
  // Its multicasts go with it (the kernel's ucma_cleanup_multicast), their events too.
  std::vector<uint32_t> joined;
  for (const auto& [h, mc] : mcasts_)
    if (mc.id == handle) joined.push_back(h);
  for (uint32_t h : joined) leave(h);
  // A listener's connect requests still queued die with it (their ids were never the app's).
  std::vector<uint32_t> orphans;
  if (auto ch = channels_.find(id->channel); ch != channels_.end()) {
    for (const Queued& q : ch->second.events)
      if (q.owner == handle && q.child != 0) orphans.push_back(q.child);
    withdraw(id->channel, handle);
    --ch->second.ids;
  }
  ids_.erase(handle);
  for (uint32_t o : orphans)
    if (Id* c = find(o)) destroy(c, now_ms);
  return reported;
}

void Ucma::withdraw(uint32_t channel, uint32_t owner) {
  auto ch = channels_.find(channel);
  if (ch == channels_.end()) return;
  auto& q = ch->second.events;
  const size_t before = q.size();
  q.erase(std::remove_if(q.begin(), q.end(), [&](const Queued& e) { return e.owner == owner; }), q.end());
  signals_[channel] -= static_cast<int>(before - q.size());
}

bool Ucma::port_taken(const Id& id, const net::IpAddr& addr, uint16_t port) const {
  for (const auto& [h, o] : ids_) {
    if (h == id.handle || !o.bound || o.ps != id.ps || o.sport != port) continue;
    const bool overlap = is_any(o.src) || is_any(addr) || o.src == addr;
    if (!overlap) continue;
    if (!id.reuseaddr || !o.reuseaddr || o.state == State::listen) return true;
  }
  return false;
}

int Ucma::bind(Id* id, const net::IpAddr& addr, uint16_t port) {
  if (!is_any(addr) && net_->gid_index(addr) < 0) return -EADDRNOTAVAIL;
  if (port == 0) {
    const uint32_t span = kPortHigh - kPortLow + 1;
    const uint32_t start = static_cast<uint32_t>(new_psn()) % span;
    for (uint32_t i = 0; i < span && port == 0; ++i) {
      const uint16_t p = static_cast<uint16_t>(kPortLow + (start + i) % span);
      if (!port_taken(*id, addr, p)) port = p;
    }
    if (port == 0) return -EADDRNOTAVAIL;
  } else if (port_taken(*id, addr, port)) {
    return -EADDRINUSE;
  }
  id->src = addr;
  id->sport = port;
  id->bound = true;
  if (!is_any(addr)) id->gid_index = static_cast<uint32_t>(net_->gid_index(addr));
  return 0;
}

int Ucma::bind_ip(uint32_t channel, std::span<const uint8_t> body, std::span<const uint8_t>,
                  std::vector<uint8_t>*, uint64_t) {
  const auto c = body_as<rdma_ucm_bind_ip>(body);
  Id* id = find(channel, c.id);
  if (id == nullptr) return -EINVAL;
  if (id->state != State::idle || id->bound) return -EINVAL;
  net::IpAddr ip;
  uint16_t port = 0, family = 0;
  if (!parse_sockaddr(&c.addr, &ip, &port, &family)) return -EAFNOSUPPORT;
  id->family = family;
  return bind(id, ip, port);
}

int Ucma::bind_af_ib(uint32_t channel, std::span<const uint8_t> body, std::span<const uint8_t>,
                     std::vector<uint8_t>*, uint64_t) {
  // librdmacm's AF_IB probe: refused, so it speaks the legacy (IP) command set.
  const auto c = body_as<rdma_ucm_bind>(body);
  return find(channel, c.id) == nullptr ? -EINVAL : -EAFNOSUPPORT;
}

int Ucma::not_supported(uint32_t, std::span<const uint8_t>, std::span<const uint8_t>, std::vector<uint8_t>*,
                        uint64_t) {
  return -ENOSYS;
}

// ---- address and route ----------------------------------------------------------------------

int Ucma::resolve_ip(uint32_t channel, std::span<const uint8_t> body, std::span<const uint8_t>,
                     std::vector<uint8_t>*, uint64_t now_ms) {
  const auto c = body_as<rdma_ucm_resolve_ip>(body);
  Id* id = find(channel, c.id);
  if (id == nullptr) return -EINVAL;
  if (id->state != State::idle && id->state != State::addr_resolved) return -EINVAL;
  net::IpAddr dst, src{};
  uint16_t dport = 0, sport = 0, family = 0, src_family = 0;
  if (!parse_sockaddr(&c.dst_addr, &dst, &dport, &family)) return -EAFNOSUPPORT;
  const bool have_src = parse_sockaddr(&c.src_addr, &src, &sport, &src_family) && !is_any(src);
  if (!id->bound) {
    id->family = family;
    if (int rc = bind(id, have_src ? src : net::IpAddr{}, sport); rc != 0) return rc;
  }
  // A loopback destination is this host (cma_resolve_loopback): its address toward anywhere.
  if (is_loopback(dst)) {
    auto s = net_->source_for(net::is_ipv4_mapped(dst) ? net::ipv4_mapped(0x01010101) : net::IpAddr{0x20, 0x01});
    if (s) dst = s->first;
  }
  id->dst = dst;
  id->dport = dport;
  // The source: what the id is bound to, else the address the host's routes pick.
  if (is_any(id->src)) {
    if (net_->gid_index(dst) >= 0) {
      id->src = dst;  // a local destination: loopback
    } else if (auto s = net_->source_for(dst)) {
      id->src = s->first;
    } else {
      ++counters_.addr_errors;
      id->state = State::addr_query;
      queue(*id, kAddrError, -EHOSTUNREACH);
      id->state = State::idle;
      return 0;
    }
  }
  id->gid_index = static_cast<uint32_t>(std::max(net_->gid_index(id->src), 0));
  id->state = State::addr_query;
  id->resolve_deadline_ms = now_ms + std::max<uint32_t>(c.timeout_ms, 1);
  on_timer(now_ms);  // answers at once when the neighbour is known
  return 0;
}

void Ucma::on_timer(uint64_t now_ms) {
  for (auto& [h, id] : ids_) {
    if (id.state != State::addr_query) continue;
    const bool local = net_->gid_index(id.dst) >= 0;
    const auto r = local ? UcmaNetwork::Resolve::resolved : net_->resolve(id.src, id.dst, now_ms);
    if (r == UcmaNetwork::Resolve::resolved) {
      id.state = State::addr_resolved;
      queue(id, kAddrResolved, 0);
    } else if (r == UcmaNetwork::Resolve::failed || now_ms >= id.resolve_deadline_ms) {
      ++counters_.addr_errors;
      queue(id, kAddrError, r == UcmaNetwork::Resolve::failed ? -EHOSTUNREACH : -ETIMEDOUT);
      id.state = State::idle;
    }
  }
}

bool Ucma::resolving() const {
  return std::any_of(ids_.begin(), ids_.end(), [](const auto& kv) { return kv.second.state == State::addr_query; });
}

int Ucma::resolve_route(uint32_t channel, std::span<const uint8_t> body, std::span<const uint8_t>,
                        std::vector<uint8_t>*, uint64_t) {
  const auto c = body_as<rdma_ucm_resolve_route>(body);
  Id* id = find(channel, c.id);
  if (id == nullptr) return -EINVAL;
  if (id->state != State::addr_resolved && id->state != State::route_resolved) return -EINVAL;
  // RoCE: the path record is made here (cma_resolve_iboe_route), no SA.
  id->has_path = true;
  id->path_mtu = cfg_.path_mtu;
  id->flow_label = (uint32_t{id->sport} * 31 + id->dport) & 0xFFFFF;
  id->local_ack_timeout = kPacketLifeTime + 1;
  id->state = State::route_resolved;
  queue(*id, kRouteResolved, 0);
  return 0;
}

int Ucma::query_route(uint32_t channel, std::span<const uint8_t> body, std::span<const uint8_t>,
                      std::vector<uint8_t>* resp, uint64_t) {
  const auto c = body_as<rdma_ucm_query>(body);
  Id* id = find(channel, c.id);
  if (id == nullptr) return -EINVAL;
  rdma_ucm_query_route_resp r{};
  put_sockaddr(id->src, id->sport, id->family, &r.src_addr);
  put_sockaddr(id->dst, id->dport, id->family, &r.dst_addr);
  r.ibdev_index = 0xFFFFFFFF;  // libibverbs knows droce0 by its GUID only
  // An id bound to a wildcard address has no device yet (node_guid 0, as the kernel answers).
  if (!is_any(id->src)) {
    r.node_guid = htobe64(cfg_.node_guid);
    r.port_num = 1;
    ib_user_path_rec& p = r.ib_route[0];
    std::memcpy(p.sgid, id->src.data(), 16);
    std::memcpy(p.dgid, id->dst.data(), 16);
    p.pkey = htobe16(0xFFFF);
    if (id->has_path) {
      r.num_paths = 1;
      p.flow_label = htobe32(id->flow_label);
      p.reversible = 1;
      p.mtu = id->path_mtu;
      p.hop_limit = kHopLimit;
      p.traffic_class = id->tos;
      p.numb_path = 1;
      p.mtu_selector = 2;  // exactly
      p.rate_selector = 2;
      p.packet_life_time_selector = 2;
      p.packet_life_time = kPacketLifeTime;
    }
  }
  respond(r, resp);
  return 0;
}

// ---- connections ----------------------------------------------------------------------------

int Ucma::connect(uint32_t channel, std::span<const uint8_t> body, std::span<const uint8_t>,
                  std::vector<uint8_t>*, uint64_t now_ms) {
  const auto c = body_as<rdma_ucm_connect>(body);
  Id* id = find(channel, c.id);
  if (id == nullptr) return -EINVAL;
  if (id->state != State::route_resolved) return -EINVAL;
  const rdma_ucm_conn_param& p = c.conn_param;
  IpCmHeader h;
  h.ip_version = net::is_ipv4_mapped(id->src) ? 4 : 6;
  h.src_port = id->sport;
  h.src = id->src;
  h.dst = id->dst;
  if (id->qp_type == kQptUd) {
    // SIDR: the peer answers with its QPN and Q_Key; ESTABLISHED carries them and the AH.
    if (p.private_data_len > kSidrReqPrivate - kIpCmHeaderSize) return -EINVAL;
    SidrReq q;
    q.service_id = ip_service_id(PortSpace(service_ps(id->ps)), id->dport);
    encode_ip_cm_header(h, q.private_data);
    std::memcpy(q.private_data.data() + kIpCmHeaderSize, p.private_data, p.private_data_len);
    id->qp_num = p.qp_num & 0xFFFFFF;
    id->state = State::connect;
    id->conn = agent_->sidr_request(q, Peer{id->dst}, now_ms, cm_timeout_ms(kCmResponseTimeout), kMaxCmRetries);
    conn_to_id_[id->conn] = id->handle;
    return 0;
  }
  if (p.private_data_len > kReqPrivate - kIpCmHeaderSize) return -EINVAL;
  ConnectParams cp;
  Req& q = cp.req;
  q.service_id = ip_service_id(PortSpace(service_ps(id->ps)), id->dport);
  q.local_qpn = p.qp_num & 0xFFFFFF;
  q.responder_resources = p.responder_resources;
  q.initiator_depth = p.initiator_depth;
  q.remote_cm_response_timeout = kCmResponseTimeout;
  q.local_cm_response_timeout = kCmResponseTimeout;
  q.transport = TransportType::rc;
  q.end_to_end_flow_control = p.flow_control != 0;
  q.starting_psn = id->psn;
  q.retry_count = std::min<uint8_t>(p.retry_count, 7);
  q.rnr_retry_count = std::min<uint8_t>(p.rnr_retry_count, 7);
  q.max_cm_retries = kMaxCmRetries;
  q.srq = p.srq != 0;
  q.path_mtu = id->path_mtu;
  q.primary.local_gid = id->src;
  q.primary.remote_gid = id->dst;
  q.primary.flow_label = id->flow_label;
  q.primary.hop_limit = kHopLimit;
  q.primary.traffic_class = id->tos;
  q.primary.local_ack_timeout = id->local_ack_timeout;
  encode_ip_cm_header(h, q.private_data);
  std::memcpy(q.private_data.data() + kIpCmHeaderSize, p.private_data, p.private_data_len);
  cp.packet_life_time = kPacketLifeTime;
  id->qp_num = q.local_qpn;
  id->retry_count = q.retry_count;
  id->rnr_retry_count = q.rnr_retry_count;
  id->state = State::connect;
  id->conn = agent_->connect(cp, Peer{id->dst}, now_ms);
  conn_to_id_[id->conn] = id->handle;
  return 0;
}

int Ucma::listen(uint32_t channel, std::span<const uint8_t> body, std::span<const uint8_t>,
                 std::vector<uint8_t>*, uint64_t now_ms) {
  const auto c = body_as<rdma_ucm_listen>(body);
  Id* id = find(channel, c.id);
  if (id == nullptr) return -EINVAL;
  if (id->state == State::listen) return 0;  // a new backlog only, as rdma_listen allows
  if (id->state != State::idle) return -EINVAL;
  if (!id->bound)
    if (int rc = bind(id, net::IpAddr{}, 0); rc != 0) return rc;
  // Nobody else may listen here, reuseaddr or not.
  for (const auto& [h, o] : ids_)
    if (h != id->handle && o.state == State::listen && o.ps == id->ps && o.sport == id->sport &&
        (is_any(o.src) || is_any(id->src) || o.src == id->src))
      return -EADDRINUSE;
  const uint32_t backlog = c.backlog > 0 && c.backlog <= kMaxBacklog ? c.backlog : kMaxBacklog;
  // Requests held for this service (Agent::stop_listening) come as events, after this returns.
  const int64_t l = agent_->listen(ip_service_id(PortSpace(service_ps(id->ps)), id->sport), backlog, now_ms);
  if (l < 0) return static_cast<int>(l);
  id->listener = static_cast<uint32_t>(l);
  id->state = State::listen;
  return 0;
}

Ucma::Id* Ucma::listener_for(uint32_t agent_listener, std::span<const uint8_t> private_data, IpCmHeader* h,
                             RejReason* why) {
  Id* l = nullptr;
  for (auto& [handle, id] : ids_)
    if (id.state == State::listen && id.listener == agent_listener) l = &id;
  // The listener must be bound to the address the request is for (or to any), and its channel
  // have room for the request's id and event.
  if (l == nullptr || !decode_ip_cm_header(private_data, h) || (!is_any(l->src) && l->src != h->dst)) {
    *why = RejReason::invalid_service_id;
  } else if (channels_[l->channel].events.size() >= cfg_.max_events ||
             channels_[l->channel].ids >= cfg_.max_ids) {
    *why = RejReason::no_resources;
  } else {
    return l;
  }
  ++counters_.events_orphaned;
  return nullptr;
}

Ucma::Id& Ucma::add_child(const Id& l, const IpCmHeader& h) {
  Id c;
  c.handle = next_handle_++;
  c.channel = l.channel;
  c.ps = l.ps;
  c.qp_type = l.qp_type;
  c.family = l.family;
  c.qkey = l.qkey;
  c.child = true;
  c.parent = l.handle;
  c.state = State::connect;
  c.src = h.dst;
  c.sport = l.sport;
  c.dst = h.src;
  c.dport = h.src_port;
  c.gid_index = static_cast<uint32_t>(std::max(net_->gid_index(c.src), 0));
  c.psn = new_psn();
  c.has_path = true;
  ++channels_[c.channel].ids;
  return ids_[c.handle] = c;
}

void Ucma::on_connect_request(const AgentEvent& e, uint64_t now_ms) {
  const Req& req = std::get<Req>(e.event.msg);
  IpCmHeader h;
  RejReason why{};
  const Id* l = listener_for(e.listener, req.private_data, &h, &why);
  if (l == nullptr) {
    agent_->reject(e.conn, uint16_t(why), {}, now_ms);
    return;
  }
  Id& c = add_child(*l, h);
  c.tos = req.primary.traffic_class;
  c.conn = e.conn;
  c.remote_qpn = req.local_qpn;
  c.remote_psn = req.starting_psn;
  c.responder_resources = req.initiator_depth;
  c.initiator_depth = req.responder_resources;
  c.retry_count = req.retry_count;
  c.rnr_retry_count = req.rnr_retry_count;
  c.path_mtu = std::min(req.path_mtu, cfg_.path_mtu);
  c.flow_label = req.primary.flow_label;
  c.local_ack_timeout = req.primary.local_ack_timeout;
  conn_to_id_[e.conn] = c.handle;

  rdma_ucm_conn_param p{};
  p.qp_num = req.local_qpn;
  p.private_data_len = static_cast<uint8_t>(kReqPrivate - kIpCmHeaderSize);
  std::memcpy(p.private_data, req.private_data.data() + kIpCmHeaderSize, p.private_data_len);
  p.responder_resources = req.initiator_depth;
  p.initiator_depth = req.responder_resources;
  p.flow_control = req.end_to_end_flow_control;
  p.retry_count = req.retry_count;
  p.rnr_retry_count = req.rnr_retry_count;
  p.srq = req.srq;
  // The event is the listener's (its uid, counted on it) and names the new id.
  Id ev = *l;
  ev.handle = c.handle;
  queue(ev, kConnectRequest, 0, l->handle, c.handle, &p);
}

void Ucma::on_sidr_request(const AgentEvent& e, uint64_t) {
  const SidrReq& sreq = std::get<SidrReq>(e.event.msg);
  IpCmHeader h;
  RejReason why{};
  const Id* l = listener_for(e.listener, sreq.private_data, &h, &why);
  if (l == nullptr) {
    SidrRep rep;
    rep.request_id = sreq.request_id;
    rep.status = uint8_t(SidrStatus::reject);
    rep.service_id = sreq.service_id;
    agent_->sidr_reply(e.peer, e.tid, rep);
    return;
  }
  Id& c = add_child(*l, h);
  c.sidr_tid = e.tid;
  c.sidr_request_id = sreq.request_id;
  c.service_id = sreq.service_id;
  c.sidr_peer = e.peer.gid;

  Queued q;
  q.owner = l->handle;
  q.child = c.handle;
  q.resp.uid = l->uid;
  q.resp.id = c.handle;
  q.resp.event = kConnectRequest;
  rdma_ucm_ud_param& ud = q.resp.param.ud;
  ud.private_data_len = static_cast<uint8_t>(kSidrReqPrivate - kIpCmHeaderSize);
  std::memcpy(ud.private_data, sreq.private_data.data() + kIpCmHeaderSize,
              std::min<size_t>(ud.private_data_len, sizeof ud.private_data));
  push(l->channel, q);
}

int Ucma::accept(uint32_t channel, std::span<const uint8_t> body, std::span<const uint8_t>,
                 std::vector<uint8_t>*, uint64_t now_ms) {
  const auto c = body_as<rdma_ucm_accept>(body);
  Id* id = find(channel, c.id);
  if (id == nullptr) return -EINVAL;
  const rdma_ucm_conn_param& p = c.conn_param;
  if (!id->child) {
    // The active side's "accept" (valid = 0): librdmacm moved its QP to RTS, send the RTU.
    if (id->conn == 0 || id->state != State::connect) return -EINVAL;
    return agent_->ready_to_use(id->conn, now_ms);
  }
  if (id->state != State::connect) return -EINVAL;
  if (c.uid != 0) id->uid = c.uid;
  if (id->qp_type == kQptUd) {
    if (p.private_data_len > kSidrRepPrivate) return -EINVAL;
    SidrRep rep;
    rep.request_id = id->sidr_request_id;
    rep.status = uint8_t(SidrStatus::success);
    rep.qpn = p.qp_num & 0xFFFFFF;
    rep.service_id = id->service_id;
    rep.qkey = p.qkey != 0 ? p.qkey : id->qkey;
    std::memcpy(rep.private_data.data(), p.private_data, p.private_data_len);
    agent_->sidr_reply(Peer{id->sidr_peer}, id->sidr_tid, rep);
    id->qp_num = rep.qpn;
    id->state = State::established;  // nothing more comes for a SIDR id
    return 0;
  }
  if (id->conn == 0) return -EINVAL;
  if (p.private_data_len > kRepPrivate) return -EINVAL;
  AcceptParams ap;
  Rep& r = ap.rep;
  r.local_qpn = p.qp_num & 0xFFFFFF;
  r.starting_psn = id->psn;
  r.responder_resources = p.responder_resources;
  r.initiator_depth = p.initiator_depth;
  r.target_ack_delay = cfg_.ca_ack_delay;
  r.end_to_end_flow_control = p.flow_control != 0;
  r.rnr_retry_count = std::min<uint8_t>(p.rnr_retry_count, 7);
  r.srq = p.srq != 0;
  std::memcpy(r.private_data.data(), p.private_data, p.private_data_len);
  id->qp_num = r.local_qpn;
  id->responder_resources = p.responder_resources;
  id->initiator_depth = p.initiator_depth;
  return agent_->accept(id->conn, ap, now_ms);
}

int Ucma::reject(uint32_t channel, std::span<const uint8_t> body, std::span<const uint8_t>,
                 std::vector<uint8_t>*, uint64_t now_ms) {
  const auto c = body_as<rdma_ucm_reject>(body);
  Id* id = find(channel, c.id);
  if (id == nullptr) return -EINVAL;
  if (id->child && id->qp_type == kQptUd && id->state == State::connect) {
    SidrRep rep;
    rep.request_id = id->sidr_request_id;
    rep.status = uint8_t(SidrStatus::reject);
    rep.service_id = id->service_id;
    std::memcpy(rep.private_data.data(), c.private_data, std::min<size_t>(c.private_data_len, kSidrRepPrivate));
    agent_->sidr_reply(Peer{id->sidr_peer}, id->sidr_tid, rep);
    id->state = State::idle;
    return 0;
  }
  if (id->conn == 0 || id->state != State::connect) return -EINVAL;
  if (c.private_data_len > kRejPrivate) return -EINVAL;
  std::array<uint8_t, kRejPrivate> pd{};
  std::memcpy(pd.data(), c.private_data, c.private_data_len);
  const uint16_t reason = c.reason != 0 ? c.reason : uint16_t(RejReason::consumer_defined);
  const int rc = agent_->reject(id->conn, reason, pd, now_ms);
  if (rc == 0) {
    conn_to_id_.erase(id->conn);
    id->conn = 0;
    id->state = State::idle;
  }
  return rc;
}

int Ucma::disconnect(uint32_t channel, std::span<const uint8_t> body, std::span<const uint8_t>,
                     std::vector<uint8_t>*, uint64_t now_ms) {
  const auto c = body_as<rdma_ucm_disconnect>(body);
  Id* id = find(channel, c.id);
  if (id == nullptr) return -EINVAL;
  if (id->conn == 0) return -EINVAL;
  // DREQ from established, the DREP when the peer asked first; in other states the kernel's
  // rdma_disconnect fails quietly too (nothing to tear down on the wire yet).
  (void)agent_->disconnect(id->conn, now_ms);
  return 0;
}

int Ucma::init_qp_attr(uint32_t channel, std::span<const uint8_t> body, std::span<const uint8_t>,
                       std::vector<uint8_t>* resp, uint64_t) {
  const auto c = body_as<rdma_ucm_init_qp_attr>(body);
  Id* id = find(channel, c.id);
  if (id == nullptr) return -EINVAL;
  ib_uverbs_qp_attr a{};
  a.qp_state = c.qp_state;
  a.pkey_index = 0;
  a.port_num = 1;
  const bool connected = id->conn != 0 && id->remote_qpn != 0;
  if (id->qp_type == kQptUd) {
    switch (c.qp_state) {
      case kQpsInit:
        a.qp_attr_mask = kMaskState | kMaskPkeyIndex | kMaskPort | kMaskQkey;
        a.qkey = id->qkey;
        break;
      case kQpsRtr: a.qp_attr_mask = kMaskState; break;
      case kQpsRts:
        a.qp_attr_mask = kMaskState | kMaskSqPsn;
        a.sq_psn = id->psn;
        break;
      default: return -EINVAL;
    }
  } else {
    switch (c.qp_state) {
      case kQpsInit:
        a.qp_attr_mask = kMaskState | kMaskAccess | kMaskPkeyIndex | kMaskPort;
        // Before a connection no remote access; then what ib_cm grants (cm_init_qp_init_attr).
        if (connected)
          a.qp_access_flags =
              kAccessRemoteWrite | (id->responder_resources != 0 ? kAccessRemoteRead | kAccessRemoteAtomic : 0);
        break;
      case kQpsRtr:
        if (!connected) return -EINVAL;
        a.qp_attr_mask = kMaskState | kMaskAv | kMaskPathMtu | kMaskDestQpn | kMaskRqPsn | kMaskMaxDestRdAtomic |
                         kMaskMinRnrTimer;
        a.ah_attr = roce_ah(id->dst, id->flow_label, id->gid_index, id->tos);
        a.path_mtu = id->path_mtu;
        a.dest_qp_num = id->remote_qpn;
        a.rq_psn = id->psn;
        a.max_dest_rd_atomic = id->responder_resources;
        a.min_rnr_timer = 0;
        break;
      case kQpsRts:
        if (!connected) return -EINVAL;
        a.qp_attr_mask =
            kMaskState | kMaskSqPsn | kMaskTimeout | kMaskRetryCnt | kMaskRnrRetry | kMaskMaxQpRdAtomic;
        a.sq_psn = id->remote_psn;
        // The app's RDMA_OPTION_ID_ACK_TIMEOUT wins over the path's (rdma_init_qp_attr).
        a.timeout = id->ack_timeout.value_or(id->local_ack_timeout);
        a.retry_cnt = id->retry_count;
        a.rnr_retry = id->rnr_retry_count;
        a.max_rd_atomic = id->initiator_depth;
        break;
      default: return -EINVAL;
    }
  }
  respond(a, resp);
  return 0;
}

int Ucma::notify(uint32_t channel, std::span<const uint8_t> body, std::span<const uint8_t>, std::vector<uint8_t>*,
                 uint64_t) {
  // rdma_notify(COMM_EST): the first data packet came before the RTU. The RTU (or its
  // retransmission through the REP's timer) establishes the connection here anyway.
  const auto c = body_as<rdma_ucm_notify>(body);
  return find(channel, c.id) == nullptr ? -EINVAL : 0;
}

int Ucma::set_option(uint32_t channel, std::span<const uint8_t> body, std::span<const uint8_t> optval,
                     std::vector<uint8_t>*, uint64_t) {
  const auto c = body_as<rdma_ucm_set_option>(body);
  Id* id = find(channel, c.id);
  if (id == nullptr) return -EINVAL;
  if (optval.size() != c.optlen) return -EINVAL;
  auto as_int = [&](int* v) {
    if (optval.size() != sizeof(int)) return false;
    std::memcpy(v, optval.data(), sizeof(int));
    return true;
  };
  int v = 0;
  if (c.level == RDMA_OPTION_ID) {
    switch (c.optname) {
      case RDMA_OPTION_ID_TOS:
        if (optval.size() != 1) return -EINVAL;
        id->tos = optval[0];
        return 0;
      case RDMA_OPTION_ID_REUSEADDR:
        if (!as_int(&v)) return -EINVAL;
        if (id->state != State::idle) return -EINVAL;
        id->reuseaddr = v != 0;
        return 0;
      case RDMA_OPTION_ID_AFONLY:
        if (!as_int(&v)) return -EINVAL;
        return 0;  // IPv4 and IPv6 listens never share a port here
      case RDMA_OPTION_ID_ACK_TIMEOUT:
        if (optval.size() != 1) return -EINVAL;
        id->ack_timeout = std::min<uint8_t>(optval[0], 31);  // as the kernel: 5 bits
        return 0;
      default: return -ENOSYS;
    }
  }
  if (c.level == RDMA_OPTION_IB && c.optname == RDMA_OPTION_IB_PATH) {
    // A path record from ibacm: RoCE builds its own, as the kernel does for iWARP/RoCE ids.
    return optval.size() % sizeof(ib_path_rec_data) == 0 && !optval.empty() ? 0 : -EINVAL;
  }
  return -ENOSYS;
}

int Ucma::migrate_id(uint32_t channel, std::span<const uint8_t> body, std::span<const uint8_t>,
                     std::vector<uint8_t>* resp, uint64_t) {
  const auto c = body_as<rdma_ucm_migrate_id>(body);
  // `fd` names the old channel (the preload turned the app's fd into droced's channel number).
  Id* id = find(c.fd, c.id);
  if (id == nullptr) return -EINVAL;
  auto from = channels_.find(c.fd);
  auto to = channels_.find(channel);
  if (from == channels_.end() || to == channels_.end()) return -EINVAL;
  if (c.fd != channel) {
    auto& q = from->second.events;
    int moved = 0;
    for (auto it = q.begin(); it != q.end();) {
      if (owned_by(it->owner, *id)) {  // its multicasts' events move with it
        to->second.events.push_back(*it);
        it = q.erase(it);
        ++moved;
      } else {
        ++it;
      }
    }
    signals_[c.fd] -= moved;
    signals_[channel] += moved;
    --from->second.ids;
    ++to->second.ids;
    id->channel = channel;
  }
  respond(rdma_ucm_migrate_resp{id->events_reported}, resp);
  return 0;
}

// ---- multicast ------------------------------------------------------------------------------

int Ucma::join_ip_mcast(uint32_t channel, std::span<const uint8_t> body, std::span<const uint8_t>,
                        std::vector<uint8_t>* resp, uint64_t) {
  const auto c = body_as<rdma_ucm_join_ip_mcast>(body);
  // The legacy command has no flags: a full member (librdmacm, knowing the app asked for a
  // send-only join, still skips the attach; the membership is reported all the same).
  return join(channel, c.id, c.uid, &c.addr, false, resp);
}

int Ucma::join_mcast(uint32_t channel, std::span<const uint8_t> body, std::span<const uint8_t>,
                     std::vector<uint8_t>* resp, uint64_t) {
  const auto c = body_as<rdma_ucm_join_mcast>(body);
  sockaddr_storage sa{};
  std::memcpy(&sa, &c.addr, sizeof sa);
  const size_t want = sa.ss_family == AF_INET ? sizeof(sockaddr_in) : sa.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : 0;
  if (want == 0) return -EAFNOSUPPORT;  // AF_IB: this ucma serves the IP command set
  if (c.addr_size != want) return -EINVAL;
  if (c.join_flags != RDMA_MC_JOIN_FLAG_FULLMEMBER && c.join_flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER)
    return -EINVAL;
  return join(channel, c.id, c.uid, &c.addr, c.join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER, resp);
}

int Ucma::join(uint32_t channel, uint32_t id_handle, uint64_t uid, const void* addr, bool send_only,
               std::vector<uint8_t>* resp) {
  Id* id = find(channel, id_handle);
  if (id == nullptr) return -EINVAL;
  net::IpAddr group;
  uint16_t port = 0, family = 0;
  if (!parse_sockaddr(addr, &group, &port, &family)) return -EAFNOSUPPORT;
  // rdma_join_multicast: a UD id with a device (bound to an address, or resolved).
  const bool bound_to_device = id->state == State::idle && id->bound && !is_any(id->src);
  if (id->qp_type != kQptUd || (!bound_to_device && id->state != State::addr_resolved)) return -EINVAL;
  // The kernel would join any IPv4 address (the attach then fails); droce says so at once.
  // RoCEv2 over IPv6 groups the kernel refuses (ENOTSUPP); droce serves them (the MGID is the
  // group itself), with an MLD report.
  if (!net::is_multicast(group)) return -EINVAL;
  const uint32_t handle = next_handle_++;
  Mcast& mc = mcasts_[handle];
  mc.id = id->handle;
  mc.uid = uid;
  mc.group = group;
  mc.src = id->src;
  mc.send_only = send_only;
  if (!send_only && members_[{mc.src, group}]++ == 0) net_->multicast_membership(mc.src, group, true);
  ++counters_.mcast_joins;

  // MULTICAST_JOIN, as cma_make_mc_event fills it for RoCE: the AH toward the group, the
  // multicast QPN and the id's Q_Key; the event names the multicast, not the id.
  Queued q;
  q.owner = handle;
  q.resp.uid = uid;
  q.resp.id = handle;
  q.resp.event = kMulticastJoin;
  rdma_ucm_ud_param& ud = q.resp.param.ud;
  ud.qp_num = 0xFFFFFF;
  ud.qkey = id->qkey;
  ud.ah_attr = roce_ah(group, 0, id->gid_index, id->tos);  // hop limit 64: IPV6_DEFAULT_HOPLIMIT
  push(id->channel, q);
  respond(rdma_ucm_create_id_resp{handle}, resp);
  return 0;
}

int Ucma::leave_mcast(uint32_t channel, std::span<const uint8_t> body, std::span<const uint8_t>,
                      std::vector<uint8_t>* resp, uint64_t) {
  const auto c = body_as<rdma_ucm_destroy_id>(body);
  auto mc = mcasts_.find(c.id);
  if (mc == mcasts_.end()) return -ENOENT;  // ucma_leave_multicast
  const Id* id = find(mc->second.id);
  if (id == nullptr || id->channel != channel) return -EINVAL;
  respond(rdma_ucm_destroy_id_resp{leave(c.id)}, resp);
  return 0;
}

uint32_t Ucma::leave(uint32_t handle) {
  auto it = mcasts_.find(handle);
  if (it == mcasts_.end()) return 0;
  const Mcast mc = it->second;
  mcasts_.erase(it);
  if (const Id* id = find(mc.id)) withdraw(id->channel, handle);
  if (!mc.send_only) {
    auto m = members_.find({mc.src, mc.group});
    if (m != members_.end() && --m->second == 0) {
      members_.erase(m);
      net_->multicast_membership(mc.src, mc.group, false);
    }
  }
  ++counters_.mcast_leaves;
  return mc.events_reported;
}

bool Ucma::owned_by(uint32_t owner, const Id& id) const {
  if (owner == id.handle) return true;
  auto mc = mcasts_.find(owner);
  return mc != mcasts_.end() && mc->second.id == id.handle;
}

// ---- events ---------------------------------------------------------------------------------

void Ucma::push(uint32_t channel, const Queued& q) {
  auto ch = channels_.find(channel);
  if (ch == channels_.end()) return;
  if (ch->second.events.size() >= cfg_.max_events) {
    ++counters_.events_dropped;
    return;
  }
  ch->second.events.push_back(q);
  ++signals_[channel];
  ++counters_.events;
}

void Ucma::queue(const Id& id, uint32_t event, int32_t status, uint32_t owner, uint32_t child,
                 const rdma_ucm_conn_param* conn) {
  Queued q;
  q.owner = owner != 0 ? owner : id.handle;
  q.child = child;
  q.resp.uid = id.uid;
  q.resp.id = id.handle;
  q.resp.event = event;
  q.resp.status = static_cast<uint32_t>(status);
  if (conn != nullptr) q.resp.param.conn = *conn;
  push(id.channel, q);
}

int Ucma::get_event(uint32_t channel, std::span<const uint8_t>, std::span<const uint8_t>,
                    std::vector<uint8_t>* resp, uint64_t) {
  auto& q = channels_[channel].events;
  if (q.empty()) return -EAGAIN;
  // No signal: the reader took this event's count off the eventfd before asking.
  const Queued e = q.front();
  q.pop_front();
  if (Id* owner = find(e.owner)) ++owner->events_reported;
  else if (auto mc = mcasts_.find(e.owner); mc != mcasts_.end()) ++mc->second.events_reported;
  respond(e.resp, resp);
  return 0;
}

void Ucma::on_agent_event(const AgentEvent& e, uint64_t now_ms) {
  const CmEvent& ev = e.event;
  if (ev.type == CmEventType::connect_request) {
    if (std::holds_alternative<SidrReq>(ev.msg))
      on_sidr_request(e, now_ms);
    else
      on_connect_request(e, now_ms);
    return;
  }
  Id* id = by_conn(e.conn);
  // Events for an id the app destroyed, or for a child it never accepted, go nowhere (ucma:
  // `if (!ctx->uid)`), as do the active side's ESTABLISHED (librdmacm makes that event itself).
  if (id == nullptr || (id->child && id->uid == 0)) {
    ++counters_.events_orphaned;
    if (id != nullptr && ev.type != CmEventType::established && ev.type != CmEventType::disconnected) {
      conn_to_id_.erase(e.conn);
      id->conn = 0;
    }
    return;
  }
  if (const auto* srep = std::get_if<SidrRep>(&ev.msg); srep != nullptr && ev.type == CmEventType::connect_response) {
    on_sidr_reply(id, *srep);
    return;
  }
  rdma_ucm_conn_param p{};
  switch (ev.type) {
    case CmEventType::connect_response: {
      const Rep& r = std::get<Rep>(ev.msg);
      id->remote_qpn = r.local_qpn;
      id->remote_psn = r.starting_psn;
      id->responder_resources = r.initiator_depth;
      id->initiator_depth = r.responder_resources;
      id->rnr_retry_count = r.rnr_retry_count;
      id->local_ack_timeout = ack_timeout(r.target_ack_delay, kPacketLifeTime);
      p.qp_num = r.local_qpn;
      p.private_data_len = static_cast<uint8_t>(kRepPrivate);
      std::memcpy(p.private_data, r.private_data.data(), kRepPrivate);
      p.responder_resources = r.initiator_depth;
      p.initiator_depth = r.responder_resources;
      p.flow_control = r.end_to_end_flow_control;
      p.rnr_retry_count = r.rnr_retry_count;
      p.srq = r.srq;
      queue(*id, kConnectResponse, 0, 0, 0, &p);
      return;
    }
    case CmEventType::established:
      id->state = State::established;
      if (id->child) queue(*id, kEstablished, 0);
      return;
    case CmEventType::rejected: {
      const Rej* r = std::get_if<Rej>(&ev.msg);
      if (r != nullptr) {
        p.private_data_len = static_cast<uint8_t>(kRejPrivate);
        std::memcpy(p.private_data, r->private_data.data(), kRejPrivate);
      }
      conn_to_id_.erase(e.conn);
      id->conn = 0;
      id->state = State::idle;
      queue(*id, kRejected, ev.reason, 0, 0, &p);
      return;
    }
    case CmEventType::unreachable:
      conn_to_id_.erase(e.conn);
      id->conn = 0;
      id->state = State::idle;
      queue(*id, kUnreachable, -ETIMEDOUT);
      return;
    case CmEventType::disconnected:
      id->state = State::disconnect;
      queue(*id, kDisconnected, 0);
      return;
    case CmEventType::timewait_exit:
      conn_to_id_.erase(e.conn);
      id->conn = 0;
      if (id->state == State::disconnect) queue(*id, kTimewaitExit, 0);
      return;
    case CmEventType::connect_request:
      return;
  }
}

void Ucma::on_sidr_reply(Id* id, const SidrRep& rep) {
  conn_to_id_.erase(id->conn);
  id->conn = 0;
  Queued q;
  q.owner = id->handle;
  q.resp.uid = id->uid;
  q.resp.id = id->handle;
  rdma_ucm_ud_param& ud = q.resp.param.ud;
  ud.private_data_len = static_cast<uint8_t>(kSidrRepPrivate);
  std::memcpy(ud.private_data, rep.private_data.data(), kSidrRepPrivate);
  if (rep.status != uint8_t(SidrStatus::success)) {
    id->state = State::idle;
    q.resp.event = kUnreachable;
    q.resp.status = rep.status;
    push(id->channel, q);
    return;
  }
  // The AH toward the peer's QP, as ib_init_ah_attr_from_path makes it for RoCE.
  id->state = State::established;
  id->remote_qpn = rep.qpn;
  q.resp.event = kEstablished;
  ud.qp_num = rep.qpn;
  ud.qkey = rep.qkey;
  ud.ah_attr = roce_ah(id->dst, id->flow_label, id->gid_index, id->tos);
  push(id->channel, q);
}

std::vector<UcmaIdInfo> Ucma::ids() const {
  static const char* const names[] = {"idle",    "addr_query",  "addr_resolved", "route_resolved",
                                      "listen",  "connect",     "established",   "disconnect"};
  std::vector<UcmaIdInfo> out;
  for (const auto& [h, id] : ids_) {
    UcmaIdInfo i;
    i.channel = id.channel;
    i.handle = h;
    i.state = names[static_cast<int>(id.state)];
    i.ps = id.ps;
    i.src = id.src;
    i.dst = id.dst;
    i.sport = id.sport;
    i.dport = id.dport;
    i.conn = id.conn;
    i.qp_num = id.qp_num;
    i.remote_qpn = id.remote_qpn;
    i.events_reported = id.events_reported;
    for (const auto& [mh, mc] : mcasts_)
      if (mc.id == h) i.groups.push_back(mc.group);
    out.push_back(i);
  }
  return out;
}

}  // namespace droce::cm
