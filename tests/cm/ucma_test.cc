// The rdma_cm device's commands (cm/ucma.h), as librdmacm 44 writes them: two hosts, A
// (10.77.0.1) and B (10.77.0.2), each a Ucma over its own Agent, the agents' MADs carried by a
// wire the test holds. Each test writes command structs (<rdma/rdma_user_cm.h>) byte for byte as
// librdmacm does, and checks the answers, the events GET_EVENT hands out, what crossed the wire
// and how each channel's readiness moved.

#include "cm/ucma.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <rdma/ib_user_verbs.h>

#include <cerrno>
#include <cstring>
#include <map>

namespace droce::cm {
namespace {

const net::IpAddr kIpA = net::ipv4_mapped(0x0a4d0001);
const net::IpAddr kIpB = net::ipv4_mapped(0x0a4d0002);
const net::IpAddr kIpNobody = net::ipv4_mapped(0x0a4d0063);
constexpr uint16_t kPsTcp = 0x0106;
constexpr uint16_t kPsUdp = 0x0111;
constexpr uint16_t kPsIb = 0x013F;

// The host's network as the ucma layer sees it: one address, neighbours known or not.
struct FakeNet : UcmaNetwork {
  net::IpAddr mine;
  std::map<net::IpAddr, Resolve> neighbours;  // absent: pending forever
  std::optional<std::pair<net::IpAddr, uint32_t>> source_for(const net::IpAddr&) const override {
    return std::make_pair(mine, 1u);
  }
  int gid_index(const net::IpAddr& ip) const override { return ip == mine ? 1 : -1; }
  Resolve resolve(const net::IpAddr&, const net::IpAddr& dst, uint64_t) override {
    auto it = neighbours.find(dst);
    return it == neighbours.end() ? Resolve::pending : it->second;
  }
  std::vector<std::pair<net::IpAddr, bool>> memberships;  // what the host was told to report
  void multicast_membership(const net::IpAddr& src, const net::IpAddr& group, bool joined) override {
    EXPECT_EQ(src, mine);
    memberships.emplace_back(group, joined);
  }
};

struct Host {
  FakeNet net;
  Agent agent;
  Ucma ucma;
  std::map<uint32_t, int> ready;  // each channel's eventfd count, from take_signals()
  Host(net::IpAddr ip, uint64_t guid, uint32_t seed)
      : agent(guid, seed), ucma(&agent, &net, UcmaConfig{guid, 5, 15, 64, 16, seed}) {
    net.mine = ip;
  }
  void signals() {
    for (auto [ch, n] : ucma.take_signals()) ready[ch] += n;
  }
};

template <typename T>
std::vector<uint8_t> command(uint32_t num, const T& body, uint16_t out) {
  std::vector<uint8_t> b(sizeof(rdma_ucm_cmd_hdr) + sizeof(T));
  rdma_ucm_cmd_hdr h{num, static_cast<uint16_t>(sizeof(T)), out};
  std::memcpy(b.data(), &h, sizeof h);
  std::memcpy(b.data() + sizeof h, &body, sizeof(T));
  return b;
}

sockaddr_in6 sin(const net::IpAddr& ip, uint16_t port) {
  sockaddr_in s{};
  s.sin_family = AF_INET;
  s.sin_port = htons(port);
  s.sin_addr.s_addr = htonl(net::ipv4_of(ip));
  sockaddr_in6 out{};
  std::memcpy(&out, &s, sizeof s);
  return out;
}

struct Test2 : ::testing::Test {
  Host a{kIpA, 0xaaaa, 0x1000};
  Host b{kIpB, 0xbbbb, 0x2000};
  uint64_t now = 1000;
  int crossed = 0;

  void SetUp() override {
    a.net.neighbours[kIpB] = UcmaNetwork::Resolve::resolved;
    b.net.neighbours[kIpA] = UcmaNetwork::Resolve::resolved;
  }

  // Carries MADs both ways, hands the agents' events to their ucma, until nothing moves.
  void flush() {
    for (bool moved = true; moved;) {
      moved = false;
      for (Host* h : {&a, &b}) {
        Host* other = h == &a ? &b : &a;
        for (auto& o : h->agent.take_outgoing()) {
          EXPECT_EQ(o.peer.gid, other->net.mine);
          other->agent.on_mad(o.mad, Peer{h->net.mine}, now);
          ++crossed;
          moved = true;
        }
        for (auto& e : h->agent.take_events()) {
          h->ucma.on_agent_event(e, now);
          moved = true;
        }
      }
    }
    a.signals();
    b.signals();
  }

  int call(Host& h, uint32_t ch, const std::vector<uint8_t>& cmd, std::vector<uint8_t>* resp = nullptr,
           std::span<const uint8_t> optval = {}) {
    std::vector<uint8_t> r;
    const int rc = h.ucma.command(ch, cmd, optval, resp ? resp : &r, now);
    flush();
    return rc;
  }

  uint32_t create(Host& h, uint32_t ch, uint64_t uid, uint16_t ps = kPsTcp, uint8_t qp_type = 0) {
    rdma_ucm_create_id c{};
    c.uid = uid;
    c.ps = ps;
    c.qp_type = qp_type;
    std::vector<uint8_t> r;
    EXPECT_EQ(call(h, ch, command(RDMA_USER_CM_CMD_CREATE_ID, c, 4), &r), 0);
    EXPECT_EQ(r.size(), 4u);
    uint32_t id = 0;
    if (r.size() == 4) std::memcpy(&id, r.data(), 4);
    return id;
  }

  rdma_ucm_event_resp event(Host& h, uint32_t ch) {
    rdma_ucm_get_event g{};
    std::vector<uint8_t> r;
    rdma_ucm_event_resp e{};
    e.event = 0xffff;
    // As the preload does: one count off the eventfd, then the event.
    EXPECT_GT(h.ready[ch], 0) << "GET_EVENT would block";
    --h.ready[ch];
    EXPECT_EQ(call(h, ch, command(RDMA_USER_CM_CMD_GET_EVENT, g, sizeof(rdma_ucm_event_resp)), &r), 0);
    if (r.size() == sizeof e) std::memcpy(&e, r.data(), sizeof e);
    return e;
  }

  uint32_t destroy(Host& h, uint32_t ch, uint32_t id) {
    rdma_ucm_destroy_id d{};
    d.id = id;
    std::vector<uint8_t> r;
    EXPECT_EQ(call(h, ch, command(RDMA_USER_CM_CMD_DESTROY_ID, d, 4), &r), 0);
    uint32_t n = 0xffffffff;
    if (r.size() == 4) std::memcpy(&n, r.data(), 4);
    return n;
  }

  ib_uverbs_qp_attr qp_attr(Host& h, uint32_t ch, uint32_t id, uint32_t state, int* rc = nullptr) {
    rdma_ucm_init_qp_attr q{};
    q.id = id;
    q.qp_state = state;
    std::vector<uint8_t> r;
    const int got = call(h, ch, command(RDMA_USER_CM_CMD_INIT_QP_ATTR, q, sizeof(ib_uverbs_qp_attr)), &r);
    if (rc) *rc = got; else EXPECT_EQ(got, 0);
    ib_uverbs_qp_attr attr{};
    if (r.size() == sizeof attr) std::memcpy(&attr, r.data(), sizeof attr);
    return attr;
  }

  void listen(Host& h, uint32_t ch, uint32_t id, const net::IpAddr& ip, uint16_t port, uint32_t backlog = 8) {
    rdma_ucm_bind_ip bi{};
    bi.addr = sin(ip, port);
    bi.id = id;
    ASSERT_EQ(call(h, ch, command(RDMA_USER_CM_CMD_BIND_IP, bi, 0)), 0);
    rdma_ucm_listen l{id, backlog};
    ASSERT_EQ(call(h, ch, command(RDMA_USER_CM_CMD_LISTEN, l, 0)), 0);
  }

  // rdma_resolve_addr + rdma_resolve_route, with the events taken as librdmacm does.
  void resolve(Host& h, uint32_t ch, uint32_t id, const net::IpAddr& dst, uint16_t port) {
    rdma_ucm_resolve_ip r{};
    r.dst_addr = sin(dst, port);
    r.id = id;
    r.timeout_ms = 2000;
    ASSERT_EQ(call(h, ch, command(RDMA_USER_CM_CMD_RESOLVE_IP, r, 0)), 0);
    ASSERT_EQ(event(h, ch).event, 0u);  // ADDR_RESOLVED
    rdma_ucm_resolve_route rr{id, 2000};
    ASSERT_EQ(call(h, ch, command(RDMA_USER_CM_CMD_RESOLVE_ROUTE, rr, 0)), 0);
    ASSERT_EQ(event(h, ch).event, 2u);  // ROUTE_RESOLVED
  }

  int connect(Host& h, uint32_t ch, uint32_t id, uint32_t qpn, const char* hello) {
    rdma_ucm_connect c{};
    c.id = id;
    c.conn_param.qp_num = qpn;
    c.conn_param.responder_resources = 4;
    c.conn_param.initiator_depth = 2;
    c.conn_param.retry_count = 7;
    c.conn_param.rnr_retry_count = 7;
    c.conn_param.valid = 1;
    c.conn_param.private_data_len = static_cast<uint8_t>(std::strlen(hello));
    std::memcpy(c.conn_param.private_data, hello, std::strlen(hello));
    return call(h, ch, command(RDMA_USER_CM_CMD_CONNECT, c, 0));
  }

  int accept(Host& h, uint32_t ch, uint32_t id, uint64_t uid, uint32_t qpn) {
    rdma_ucm_accept c{};
    c.uid = uid;
    c.id = id;
    c.conn_param.qp_num = qpn;
    c.conn_param.responder_resources = 2;
    c.conn_param.initiator_depth = 4;
    c.conn_param.rnr_retry_count = 7;
    c.conn_param.valid = 1;
    std::memcpy(c.conn_param.private_data, "yes", 3);
    c.conn_param.private_data_len = 3;
    return call(h, ch, command(RDMA_USER_CM_CMD_ACCEPT, c, 0));
  }

  // The usual start: a channel on each host, B listening on `listen_ip`:7174 with `ps`, A's id
  // resolved toward it and connected from QP 0x11 (CONNECT's result in `connected`).
  struct Started {
    uint32_t ca = 0, cb = 0, listener = 0, id = 0;
    int connected = -1;
  };
  Started start(uint16_t ps = kPsTcp, net::IpAddr listen_ip = kIpB) {
    Started st;
    st.cb = b.ucma.open_channel();
    st.ca = a.ucma.open_channel();
    st.listener = create(b, st.cb, 0xb1, ps);
    listen(b, st.cb, st.listener, listen_ip, 7174);
    st.id = create(a, st.ca, 0xa1, ps);
    resolve(a, st.ca, st.id, kIpB, 7174);
    st.connected = connect(a, st.ca, st.id, 0x11, "");
    return st;
  }

  int simple(Host& h, uint32_t ch, uint32_t cmd, uint32_t id) {
    rdma_ucm_disconnect d{id};
    return call(h, ch, command(cmd, d, 0));
  }
};

TEST_F(Test2, AnRcConnectionAsRpingMakesItAndTearsItDown) {
  const uint32_t cb = b.ucma.open_channel(), ca = a.ucma.open_channel();
  const uint32_t listener = create(b, cb, 0xb1);
  listen(b, cb, listener, kIpB, 7174);
  const uint32_t id = create(a, ca, 0xa1);
  resolve(a, ca, id, kIpB, 7174);

  // QUERY_ROUTE after the route: the device by GUID (big-endian), one path, the addresses.
  rdma_ucm_query q{};
  q.id = id;
  std::vector<uint8_t> r;
  ASSERT_EQ(call(a, ca, command(RDMA_USER_CM_CMD_QUERY_ROUTE, q, sizeof(rdma_ucm_query_route_resp)), &r), 0);
  rdma_ucm_query_route_resp route{};
  ASSERT_EQ(r.size(), sizeof route);
  std::memcpy(&route, r.data(), sizeof route);
  EXPECT_EQ(be64toh(route.node_guid), 0xaaaau);
  EXPECT_EQ(route.num_paths, 1u);
  EXPECT_EQ(route.port_num, 1);
  EXPECT_EQ(std::memcmp(route.ib_route[0].dgid, kIpB.data(), 16), 0);
  EXPECT_EQ(route.ib_route[0].mtu, 5u);
  sockaddr_in dst{};
  std::memcpy(&dst, &route.dst_addr, sizeof dst);
  EXPECT_EQ(dst.sin_family, AF_INET);
  EXPECT_EQ(ntohs(dst.sin_port), 7174);

  // The QP to INIT before the connection: no remote access yet.
  ib_uverbs_qp_attr init = qp_attr(a, ca, id, 1);
  EXPECT_EQ(init.qp_access_flags, 0u);
  EXPECT_EQ(init.port_num, 1);

  ASSERT_EQ(connect(a, ca, id, 0x11, "hello"), 0);
  // B: CONNECT_REQUEST on the listener's uid, naming a new id; the app's bytes after the IP CM header.
  ASSERT_EQ(b.ready[cb], 1);
  rdma_ucm_event_resp req = event(b, cb);
  EXPECT_EQ(req.event, 4u);
  EXPECT_EQ(req.uid, 0xb1u);
  const uint32_t child = req.id;
  EXPECT_NE(child, listener);
  EXPECT_EQ(req.param.conn.qp_num, 0x11u);
  EXPECT_EQ(req.param.conn.private_data_len, 56);
  EXPECT_EQ(std::memcmp(req.param.conn.private_data, "hello", 5), 0);
  EXPECT_EQ(req.param.conn.responder_resources, 2);  // the peer's initiator depth
  EXPECT_EQ(req.param.conn.initiator_depth, 4);

  // B's QP: INIT with remote access, RTR toward 0x11 with its own PSN, RTS with A's.
  EXPECT_EQ(qp_attr(b, cb, child, 1).qp_access_flags, 2u | 4u | 8u);
  const ib_uverbs_qp_attr brtr = qp_attr(b, cb, child, 2);
  EXPECT_EQ(brtr.dest_qp_num, 0x11u);
  EXPECT_EQ(brtr.ah_attr.is_global, 1);
  EXPECT_EQ(std::memcmp(brtr.ah_attr.grh.dgid, kIpA.data(), 16), 0);
  EXPECT_EQ(brtr.ah_attr.grh.sgid_index, 1);
  EXPECT_EQ(brtr.ah_attr.grh.hop_limit, 64);
  EXPECT_EQ(brtr.path_mtu, 5u);
  const ib_uverbs_qp_attr brts = qp_attr(b, cb, child, 3);
  EXPECT_EQ(brts.timeout, 17);
  ASSERT_EQ(accept(b, cb, child, 0xb2, 0x22), 0);

  // A: CONNECT_RESPONSE with B's QP; its RTR/RTS mirror B's PSNs; the "accept" sends the RTU.
  rdma_ucm_event_resp resp = event(a, ca);
  EXPECT_EQ(resp.event, 5u);
  EXPECT_EQ(resp.uid, 0xa1u);
  EXPECT_EQ(resp.param.conn.qp_num, 0x22u);
  EXPECT_EQ(std::memcmp(resp.param.conn.private_data, "yes", 3), 0);
  const ib_uverbs_qp_attr artr = qp_attr(a, ca, id, 2);
  const ib_uverbs_qp_attr arts = qp_attr(a, ca, id, 3);
  EXPECT_EQ(artr.dest_qp_num, 0x22u);
  EXPECT_EQ(artr.rq_psn, brts.sq_psn);
  EXPECT_EQ(brtr.rq_psn, arts.sq_psn);
  EXPECT_EQ(artr.max_dest_rd_atomic, 4);  // B's initiator depth
  EXPECT_EQ(arts.max_rd_atomic, 2);       // B's responder resources
  rdma_ucm_accept est{};
  est.id = id;
  ASSERT_EQ(call(a, ca, command(RDMA_USER_CM_CMD_ACCEPT, est, 0)), 0);
  // librdmacm makes the active side's ESTABLISHED itself: nothing queued on A; B has its own.
  EXPECT_EQ(a.ready[ca], 0);
  EXPECT_EQ(a.ucma.queued(ca), 0u);
  rdma_ucm_event_resp e = event(b, cb);
  EXPECT_EQ(e.event, 9u);
  EXPECT_EQ(e.uid, 0xb2u);
  EXPECT_EQ(e.id, child);

  // A disconnects: DREQ; B sees DISCONNECTED and answers (DREP); A sees DISCONNECTED.
  ASSERT_EQ(simple(a, ca, RDMA_USER_CM_CMD_DISCONNECT, id), 0);
  EXPECT_EQ(event(b, cb).event, 10u);
  ASSERT_EQ(simple(b, cb, RDMA_USER_CM_CMD_DISCONNECT, child), 0);
  EXPECT_EQ(event(a, ca).event, 10u);

  // events_reported: what GET_EVENT handed out, per id (CONNECT_REQUEST on the listener).
  EXPECT_EQ(destroy(a, ca, id), 4u);        // ADDR, ROUTE, CONNECT_RESPONSE, DISCONNECTED
  EXPECT_EQ(destroy(b, cb, child), 2u);     // ESTABLISHED, DISCONNECTED
  EXPECT_EQ(destroy(b, cb, listener), 1u);  // CONNECT_REQUEST
  EXPECT_EQ(a.ready[ca], 0);
  EXPECT_EQ(b.ready[cb], 0);
}

TEST_F(Test2, NobodyListeningIsRejectedWithReason8) {
  const uint32_t ca = a.ucma.open_channel();
  const uint32_t id = create(a, ca, 1);
  resolve(a, ca, id, kIpB, 9999);
  ASSERT_EQ(connect(a, ca, id, 0x11, ""), 0);
  const rdma_ucm_event_resp e = event(a, ca);
  EXPECT_EQ(e.event, 8u);  // REJECTED
  EXPECT_EQ(e.status, 8u);
  // The QP may no longer go to RTR: there is no connection.
  int rc = 0;
  qp_attr(a, ca, id, 2, &rc);
  EXPECT_EQ(rc, -EINVAL);
}

TEST_F(Test2, AnAddressNobodyAnswersForIsAnAddrErrorAfterTheTimeout) {
  const uint32_t ca = a.ucma.open_channel();
  const uint32_t id = create(a, ca, 1);
  rdma_ucm_resolve_ip r{};
  r.dst_addr = sin(kIpNobody, 1);
  r.id = id;
  r.timeout_ms = 500;
  ASSERT_EQ(call(a, ca, command(RDMA_USER_CM_CMD_RESOLVE_IP, r, 0)), 0);
  EXPECT_EQ(a.ucma.queued(ca), 0u);
  now += 499;
  a.ucma.on_timer(now);
  EXPECT_EQ(a.ucma.queued(ca), 0u);
  now += 1;
  a.ucma.on_timer(now);
  a.signals();
  ASSERT_EQ(a.ready[ca], 1);
  const rdma_ucm_event_resp e = event(a, ca);
  EXPECT_EQ(e.event, 1u);  // ADDR_ERROR
  EXPECT_EQ(static_cast<int>(e.status), -ETIMEDOUT);
  EXPECT_EQ(a.ucma.counters().addr_errors, 1u);
}

TEST_F(Test2, TheAfIbProbeIsRefusedSoLibrdmacmSpeaksTheIpCommands) {
  const uint32_t ca = a.ucma.open_channel();
  const uint32_t id = create(a, ca, 1, kPsIb, 2);  // as librdmacm's probe: PS_IB, RC
  rdma_ucm_bind bind{};
  bind.id = id;
  bind.addr_size = 48;
  bind.addr.ss_family = 27;  // AF_IB
  EXPECT_EQ(call(a, ca, command(RDMA_USER_CM_CMD_BIND, bind, 0)), -EAFNOSUPPORT);
  EXPECT_EQ(destroy(a, ca, id), 0u);
}

TEST_F(Test2, MalformedAndForeignCommandsGetTheKernelsErrors) {
  const uint32_t ca = a.ucma.open_channel(), other = a.ucma.open_channel();
  const uint32_t id = create(a, ca, 1);
  std::vector<uint8_t> r;
  // Shorter than the header; a command number past the table; `in` past what was written.
  EXPECT_EQ(a.ucma.command(ca, std::vector<uint8_t>(4), {}, &r, now), -EINVAL);
  EXPECT_EQ(a.ucma.command(ca, command(99, rdma_ucm_disconnect{id}, 0), {}, &r, now), -EINVAL);
  auto shortened = command(RDMA_USER_CM_CMD_DISCONNECT, rdma_ucm_disconnect{id}, 0);
  shortened.pop_back();
  EXPECT_EQ(a.ucma.command(ca, shortened, {}, &r, now), -EINVAL);
  // GET_OPTION: not served.
  EXPECT_EQ(a.ucma.command(ca, command(13, rdma_ucm_disconnect{id}, 0), {}, &r, now), -ENOSYS);
  // An id of another channel is not there.
  EXPECT_EQ(simple(a, other, RDMA_USER_CM_CMD_DISCONNECT, id), -EINVAL);
  rdma_ucm_destroy_id d{};
  d.id = id;
  EXPECT_EQ(a.ucma.command(other, command(RDMA_USER_CM_CMD_DESTROY_ID, d, 4), {}, &r, now), -EINVAL);
  // A response that does not fit `out`.
  rdma_ucm_create_id c{};
  c.ps = kPsTcp;
  EXPECT_EQ(a.ucma.command(ca, command(RDMA_USER_CM_CMD_CREATE_ID, c, 2), {}, &r, now), -ENOSPC);
  // An unknown port space.
  c.ps = 0x77;
  EXPECT_EQ(a.ucma.command(ca, command(RDMA_USER_CM_CMD_CREATE_ID, c, 4), {}, &r, now), -EINVAL);
  // GET_EVENT with nothing queued (the preload then waits on the eventfd again).
  EXPECT_EQ(a.ucma.command(ca, command(RDMA_USER_CM_CMD_GET_EVENT, rdma_ucm_get_event{}, 336), {}, &r, now),
            -EAGAIN);
  // SET_OPTION whose optval is not the length it says.
  rdma_ucm_set_option so{};
  so.id = id;
  so.level = RDMA_OPTION_ID;
  so.optname = RDMA_OPTION_ID_TOS;
  so.optlen = 1;
  const uint8_t two[2] = {1, 2};
  EXPECT_EQ(a.ucma.command(ca, command(RDMA_USER_CM_CMD_SET_OPTION, so, 0), two, &r, now), -EINVAL);
  EXPECT_EQ(a.ucma.command(ca, command(RDMA_USER_CM_CMD_SET_OPTION, so, 0), std::span(two, 1), &r, now), 0);
  // Binding an address that is not ours.
  rdma_ucm_bind_ip bi{};
  bi.addr = sin(kIpNobody, 1);
  bi.id = create(a, ca, 2);
  EXPECT_EQ(a.ucma.command(ca, command(RDMA_USER_CM_CMD_BIND_IP, bi, 0), {}, &r, now), -EADDRNOTAVAIL);
  EXPECT_GE(a.ucma.counters().errors, 10u);
}

TEST_F(Test2, APortIsTakenUntilItsIdIsDestroyedUnlessBothReuseIt) {
  const uint32_t ca = a.ucma.open_channel();
  const uint32_t one = create(a, ca, 1), two = create(a, ca, 2);
  rdma_ucm_bind_ip bi{};
  bi.addr = sin(net::ipv4_mapped(0), 5000);  // the wildcard overlaps the specific address
  bi.id = one;
  ASSERT_EQ(call(a, ca, command(RDMA_USER_CM_CMD_BIND_IP, bi, 0)), 0);
  bi.addr = sin(kIpA, 5000);
  bi.id = two;
  EXPECT_EQ(call(a, ca, command(RDMA_USER_CM_CMD_BIND_IP, bi, 0)), -EADDRINUSE);
  // Another port space is another namespace.
  const uint32_t udp = create(a, ca, 3, kPsUdp);
  bi.id = udp;
  EXPECT_EQ(call(a, ca, command(RDMA_USER_CM_CMD_BIND_IP, bi, 0)), 0);
  destroy(a, ca, one);
  bi.id = two;
  EXPECT_EQ(call(a, ca, command(RDMA_USER_CM_CMD_BIND_IP, bi, 0)), 0);
}

TEST_F(Test2, ADestroyedListenerTakesItsUnfetchedRequestsWithItAndThePeerIsRejected) {
  [[maybe_unused]] const auto [ca, cb, listener, id, connected] = start(kPsTcp, net::ipv4_mapped(0));
  ASSERT_EQ(connected, 0);
  ASSERT_EQ(b.ready[cb], 1);
  EXPECT_EQ(destroy(b, cb, listener), 0u);  // the CONNECT_REQUEST was never fetched
  EXPECT_EQ(b.ready[cb], 0);
  EXPECT_EQ(b.ucma.ids().size(), 0u);
  const rdma_ucm_event_resp e = event(a, ca);
  EXPECT_EQ(e.event, 8u);
  EXPECT_EQ(e.status, 28u);  // consumer defined, as the kernel's destroy of an unanswered REQ
}

TEST_F(Test2, AClosedChannelDisconnectsItsConnectionsOnTheWire) {
  [[maybe_unused]] const auto [ca, cb, listener, id, connected] = start();
  ASSERT_EQ(connected, 0);
  const uint32_t child = event(b, cb).id;
  ASSERT_EQ(accept(b, cb, child, 0xb2, 0x22), 0);
  ASSERT_EQ(event(a, ca).event, 5u);
  rdma_ucm_accept est{};
  est.id = id;
  ASSERT_EQ(call(a, ca, command(RDMA_USER_CM_CMD_ACCEPT, est, 0)), 0);
  ASSERT_EQ(event(b, cb).event, 9u);
  // The app on B dies: its fd closes.
  b.ucma.close_channel(cb, now);
  flush();
  EXPECT_EQ(b.ucma.ids().size(), 0u);
  EXPECT_EQ(event(a, ca).event, 10u);  // DISCONNECTED on the survivor
}

TEST_F(Test2, MigrateMovesAnIdAndItsQueuedEventsToTheNewChannel) {
  const uint32_t old_ch = a.ucma.open_channel(), new_ch = a.ucma.open_channel();
  const uint32_t id = create(a, old_ch, 7);
  rdma_ucm_resolve_ip r{};
  r.dst_addr = sin(kIpB, 1);
  r.id = id;
  r.timeout_ms = 100;
  ASSERT_EQ(call(a, old_ch, command(RDMA_USER_CM_CMD_RESOLVE_IP, r, 0)), 0);
  ASSERT_EQ(a.ready[old_ch], 1);
  rdma_ucm_migrate_id m{};
  m.id = id;
  m.fd = old_ch;
  std::vector<uint8_t> resp;
  ASSERT_EQ(call(a, new_ch, command(RDMA_USER_CM_CMD_MIGRATE_ID, m, 4), &resp), 0);
  EXPECT_EQ(a.ready[old_ch], 0);
  EXPECT_EQ(a.ready[new_ch], 1);
  EXPECT_EQ(event(a, new_ch).event, 0u);
  // The id now answers on the new channel only.
  EXPECT_EQ(simple(a, old_ch, RDMA_USER_CM_CMD_DISCONNECT, id), -EINVAL);
  EXPECT_EQ(destroy(a, new_ch, id), 1u);
}

TEST_F(Test2, AUdListenerAnswersASidrRequestWithTheAcceptedQp) {
  const uint32_t cb = b.ucma.open_channel();
  const uint32_t listener = create(b, cb, 0xb1, kPsUdp);
  listen(b, cb, listener, kIpB, 7174);
  // A SIDR_REQ as a kernel's rdma_connect on a UD id sends it.
  SidrReq s;
  s.request_id = 0x77;
  s.service_id = ip_service_id(PortSpace::udp, 7174);
  IpCmHeader h;
  h.src_port = 40000;
  h.src = kIpA;
  h.dst = kIpB;
  encode_ip_cm_header(h, s.private_data);
  s.private_data[kIpCmHeaderSize] = 0x5a;
  MadHeader mh;
  mh.tid = 0x1234;
  mh.attr_id = AttrId::sidr_req;
  Mad mad;
  encode(mh, Message{s}, &mad);
  b.agent.on_mad(mad, Peer{kIpA}, now);
  flush();
  const rdma_ucm_event_resp e = event(b, cb);
  EXPECT_EQ(e.event, 4u);
  EXPECT_EQ(e.param.ud.private_data[0], 0x5a);
  // INIT for a UD QP carries the id's Q_Key.
  EXPECT_EQ(qp_attr(b, cb, e.id, 1).qkey, 0x01234567u);
  rdma_ucm_accept acc{};
  acc.uid = 0xb2;
  acc.id = e.id;
  acc.conn_param.qp_num = 0x33;
  std::vector<uint8_t> none;
  ASSERT_EQ(b.ucma.command(cb, command(RDMA_USER_CM_CMD_ACCEPT, acc, 0), {}, &none, now), 0);
  auto out = b.agent.take_outgoing();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].peer.gid, kIpA);
  MadHeader oh;
  Message om;
  ASSERT_EQ(decode(out[0].mad, &oh, &om), MadError::ok);
  EXPECT_EQ(oh.tid, 0x1234u);
  const SidrRep& rep = std::get<SidrRep>(om);
  EXPECT_EQ(rep.request_id, 0x77u);
  EXPECT_EQ(rep.status, 0);
  EXPECT_EQ(rep.qpn, 0x33u);
  EXPECT_EQ(rep.qkey, 0x01234567u);
}

}  // namespace
}  // namespace droce::cm

namespace droce::cm {
namespace {

TEST_F(Test2, TwoConnectionsFromOneChannelToOneListenerBothComeUp) {
  const uint32_t cb = b.ucma.open_channel(), ca = a.ucma.open_channel();
  const uint32_t listener = create(b, cb, 0xb1);
  listen(b, cb, listener, kIpB, 7174, 0);
  const uint32_t id1 = create(a, ca, 0xa1), id2 = create(a, ca, 0xa2);
  resolve(a, ca, id1, kIpB, 7174);
  resolve(a, ca, id2, kIpB, 7174);
  ASSERT_EQ(connect(a, ca, id1, 0x11, ""), 0);
  ASSERT_EQ(connect(a, ca, id2, 0x12, ""), 0);
  const rdma_ucm_event_resp r1 = event(b, cb), r2 = event(b, cb);
  ASSERT_EQ(r1.event, 4u);
  ASSERT_EQ(r2.event, 4u);
  EXPECT_NE(r1.id, r2.id);
  ASSERT_EQ(accept(b, cb, r1.id, 0xb2, 0x21), 0);
  ASSERT_EQ(accept(b, cb, r2.id, 0xb3, 0x22), 0);
  const rdma_ucm_event_resp c1 = event(a, ca), c2 = event(a, ca);
  EXPECT_EQ(c1.event, 5u);
  EXPECT_EQ(c2.event, 5u);
  EXPECT_EQ(c1.uid, 0xa1u);
  EXPECT_EQ(c2.uid, 0xa2u);
  EXPECT_EQ(c1.param.conn.qp_num, 0x21u);
  EXPECT_EQ(c2.param.conn.qp_num, 0x22u);
}

}  // namespace
}  // namespace droce::cm

namespace droce::cm {
namespace {

TEST_F(Test2, AUdIdResolvesItsPeersQpThroughSidr) {
  const uint32_t cb = b.ucma.open_channel(), ca = a.ucma.open_channel();
  const uint32_t listener = create(b, cb, 0xb1, kPsUdp);
  listen(b, cb, listener, kIpB, 7174);
  const uint32_t id = create(a, ca, 0xa1, kPsUdp);
  resolve(a, ca, id, kIpB, 7174);
  ASSERT_EQ(connect(a, ca, id, 0x11, "ud"), 0);
  const rdma_ucm_event_resp req = event(b, cb);
  ASSERT_EQ(req.event, 4u);
  EXPECT_EQ(std::memcmp(req.param.ud.private_data, "ud", 2), 0);
  rdma_ucm_accept acc{};
  acc.uid = 0xb2;
  acc.id = req.id;
  acc.conn_param.qp_num = 0x33;
  acc.conn_param.qkey = 0x01234567;
  ASSERT_EQ(call(b, cb, command(RDMA_USER_CM_CMD_ACCEPT, acc, 0)), 0);
  // A: ESTABLISHED with B's QP, Q_Key and the AH toward it (udaddy makes its AH from this).
  const rdma_ucm_event_resp e = event(a, ca);
  EXPECT_EQ(e.event, 9u);
  EXPECT_EQ(e.uid, 0xa1u);
  EXPECT_EQ(e.param.ud.qp_num, 0x33u);
  EXPECT_EQ(e.param.ud.qkey, 0x01234567u);
  EXPECT_EQ(e.param.ud.ah_attr.is_global, 1);
  EXPECT_EQ(std::memcmp(e.param.ud.ah_attr.grh.dgid, kIpB.data(), 16), 0);
  EXPECT_EQ(e.param.ud.ah_attr.grh.sgid_index, 1);
  EXPECT_EQ(e.param.ud.ah_attr.port_num, 1);
}

TEST_F(Test2, ASidrNobodyListensForIsUnreachableWithTheSidrStatus) {
  const uint32_t ca = a.ucma.open_channel();
  const uint32_t id = create(a, ca, 0xa1, kPsUdp);
  resolve(a, ca, id, kIpB, 9);
  ASSERT_EQ(connect(a, ca, id, 0x11, ""), 0);
  const rdma_ucm_event_resp e = event(a, ca);
  EXPECT_EQ(e.event, 7u);   // UNREACHABLE
  EXPECT_EQ(e.status, 1u);  // the SIDR_REP's status: no such service
}

TEST_F(Test2, ASidrNobodyAnswersIsResentThenUnreachableWithTimedOut) {
  const uint32_t ca = a.ucma.open_channel();
  const uint32_t id = create(a, ca, 0xa1, kPsUdp);
  resolve(a, ca, id, kIpB, 9);
  std::vector<uint8_t> r;
  rdma_ucm_connect c{};
  c.id = id;
  ASSERT_EQ(a.ucma.command(ca, command(RDMA_USER_CM_CMD_CONNECT, c, 0), {}, &r, now), 0);
  int sent = static_cast<int>(a.agent.take_outgoing().size());
  for (int i = 0; i < 15; ++i) {
    now += 4096;
    a.agent.on_timer(now);
    sent += static_cast<int>(a.agent.take_outgoing().size());
    for (auto& ev : a.agent.take_events()) a.ucma.on_agent_event(ev, now);
  }
  EXPECT_EQ(sent, 16);  // the first and 15 retries, as ib_cm
  EXPECT_EQ(a.ucma.queued(ca), 0u);
  now += 4096;
  a.agent.on_timer(now);
  for (auto& ev : a.agent.take_events()) a.ucma.on_agent_event(ev, now);
  a.signals();
  const rdma_ucm_event_resp e = event(a, ca);
  EXPECT_EQ(e.event, 7u);
  EXPECT_EQ(static_cast<int>(e.status), -ETIMEDOUT);
}

}  // namespace
}  // namespace droce::cm

namespace droce::cm {
namespace {

TEST_F(Test2, TheAppsAckTimeoutOptionIsTheQpsTimeout) {
  [[maybe_unused]] const auto [ca, cb, listener, id, connected] = start();
  ASSERT_EQ(connected, 0);
  const uint32_t child = event(b, cb).id;
  EXPECT_EQ(qp_attr(b, cb, child, 3).timeout, 17);  // the path's (the REQ's local ACK timeout)
  rdma_ucm_set_option so{};
  so.id = child;
  so.level = RDMA_OPTION_ID;
  so.optname = RDMA_OPTION_ID_ACK_TIMEOUT;
  so.optlen = 1;
  const uint8_t t21[1] = {21};
  ASSERT_EQ(call(b, cb, command(RDMA_USER_CM_CMD_SET_OPTION, so, 0), nullptr, t21), 0);
  EXPECT_EQ(qp_attr(b, cb, child, 3).timeout, 21);
}

}  // namespace
}  // namespace droce::cm

namespace droce::cm {
namespace {

// libfabric's verbs provider binds 127.0.0.1 for a passive endpoint with no address, and then
// looks for the interface addresses: the kernel takes a loopback bind as a wildcard one.
TEST_F(Test2, ALoopbackBindIsAWildcardBindWithNoDevice) {
  const uint32_t ca = a.ucma.open_channel();
  const uint32_t id = create(a, ca, 1), other = create(a, ca, 2);
  rdma_ucm_bind_ip bi{};
  bi.addr = sin(net::ipv4_mapped(0x7f000001), 0);
  bi.id = id;
  ASSERT_EQ(call(a, ca, command(RDMA_USER_CM_CMD_BIND_IP, bi, 0)), 0);
  rdma_ucm_query q{};
  q.id = id;
  std::vector<uint8_t> r;
  ASSERT_EQ(call(a, ca, command(RDMA_USER_CM_CMD_QUERY_ROUTE, q, sizeof(rdma_ucm_query_route_resp)), &r), 0);
  rdma_ucm_query_route_resp route{};
  std::memcpy(&route, r.data(), sizeof route);
  EXPECT_EQ(route.node_guid, 0u);
  sockaddr_in src{};
  std::memcpy(&src, &route.src_addr, sizeof src);
  EXPECT_EQ(ntohl(src.sin_addr.s_addr), 0x7f000001u);
  // Its port is taken on every address.
  bi.addr = sin(kIpA, ntohs(src.sin_port));
  bi.id = other;
  EXPECT_EQ(call(a, ca, command(RDMA_USER_CM_CMD_BIND_IP, bi, 0)), -EADDRINUSE);
}

}  // namespace
}  // namespace droce::cm

namespace droce::cm {
namespace {

// perftest -c UD -R: its server's first listener goes (a UDP one, or the TCP one of its parameter
// exchange on the same port) and a second listens; a SIDR_REQ in between reaches the second
// (held by the agent) instead of coming back UNREACHABLE 1.
TEST_F(Test2, ASidrBetweenTwoListensOnAPortReachesTheSecondListener) {
  for (const uint16_t first_ps : {kPsUdp, kPsTcp}) {
    SCOPED_TRACE(first_ps);
    const uint32_t cb = b.ucma.open_channel(), ca = a.ucma.open_channel();
    const uint32_t first = create(b, cb, 0xb1, first_ps);
    listen(b, cb, first, kIpB, 7174);
    destroy(b, cb, first);
    const uint32_t id = create(a, ca, 0xa1, kPsUdp);
    resolve(a, ca, id, kIpB, 7174);
    ASSERT_EQ(connect(a, ca, id, 0x11, ""), 0);
    EXPECT_EQ(a.ucma.queued(ca), 0u);  // no UNREACHABLE
    const uint32_t second = create(b, cb, 0xb2, kPsUdp);
    listen(b, cb, second, kIpB, 7174);
    const rdma_ucm_event_resp req = event(b, cb);
    EXPECT_EQ(req.event, 4u);
    EXPECT_EQ(req.uid, 0xb2u);
    b.ucma.close_channel(cb, now);
    a.ucma.close_channel(ca, now);
    flush();
    now += Agent::kListenGapMs + 1;  // the next round's hold is its own first listener's doing
  }
}

// Multicast as mckey makes it: a UD id resolves the group's address (no neighbour to ask), joins
// (JOIN_IP_MCAST: librdmacm's command with AF_IB off), and gets MULTICAST_JOIN naming the
// multicast (its uid and handle), with the AH toward the group, QPN 0xFFFFFF and the id's Q_Key,
// from which the app attaches its QP and sends. The host is told to report the first full member
// of a group and the last one gone; LEAVE_MCAST answers the events the multicast reported.
TEST_F(Test2, AUdIdJoinsAGroupAndLeavesIt) {
  const net::IpAddr group = net::ipv4_mapped(0xef010203);  // 239.1.2.3
  a.net.neighbours[group] = UcmaNetwork::Resolve::resolved;
  const uint32_t ca = a.ucma.open_channel();
  const uint32_t id = create(a, ca, 0xa1, kPsUdp);
  rdma_ucm_resolve_ip r{};
  r.dst_addr = sin(group, 0);
  r.id = id;
  r.timeout_ms = 2000;
  ASSERT_EQ(call(a, ca, command(RDMA_USER_CM_CMD_RESOLVE_IP, r, 0)), 0);
  ASSERT_EQ(event(a, ca).event, 0u);  // ADDR_RESOLVED

  // Step: two joins of the group through the id (two multicasts, as two rdma_join_multicast).
  rdma_ucm_join_ip_mcast j{};
  j.uid = 0x5151;
  j.addr = sin(group, 0);
  j.id = id;
  std::vector<uint8_t> resp;
  ASSERT_EQ(call(a, ca, command(RDMA_USER_CM_CMD_JOIN_IP_MCAST, j, 4), &resp), 0);
  ASSERT_EQ(resp.size(), 4u);
  uint32_t mc1 = 0, mc2 = 0;
  std::memcpy(&mc1, resp.data(), 4);
  j.uid = 0x5252;
  ASSERT_EQ(call(a, ca, command(RDMA_USER_CM_CMD_JOIN_IP_MCAST, j, 4), &resp), 0);
  std::memcpy(&mc2, resp.data(), 4);
  EXPECT_NE(mc1, mc2);
  EXPECT_NE(mc1, id);
  // Expect: the membership reported once; MULTICAST_JOIN for each, naming the multicast.
  ASSERT_EQ(a.net.memberships.size(), 1u);
  EXPECT_EQ(a.net.memberships[0], std::make_pair(group, true));
  rdma_ucm_event_resp e = event(a, ca);
  EXPECT_EQ(e.event, 12u);  // MULTICAST_JOIN
  EXPECT_EQ(e.status, 0u);
  EXPECT_EQ(e.uid, 0x5151u);
  EXPECT_EQ(e.id, mc1);
  EXPECT_EQ(e.param.ud.qp_num, 0xFFFFFFu);
  EXPECT_EQ(e.param.ud.qkey, 0x01234567u);
  EXPECT_EQ(e.param.ud.ah_attr.is_global, 1);
  EXPECT_EQ(std::memcmp(e.param.ud.ah_attr.grh.dgid, group.data(), 16), 0);  // ::ffff:239.1.2.3
  EXPECT_EQ(e.param.ud.ah_attr.grh.sgid_index, 1);
  EXPECT_EQ(e.param.ud.ah_attr.grh.hop_limit, 64);
  EXPECT_EQ(e.param.ud.ah_attr.dlid, 0);
  EXPECT_EQ(e.param.ud.ah_attr.port_num, 1);

  // Step: leave the first (its event was taken), then the second (its event still queued).
  rdma_ucm_destroy_id l{};
  l.id = mc1;
  ASSERT_EQ(call(a, ca, command(RDMA_USER_CM_CMD_LEAVE_MCAST, l, 4), &resp), 0);
  uint32_t reported = 0xffff;
  std::memcpy(&reported, resp.data(), 4);
  EXPECT_EQ(reported, 1u);
  EXPECT_EQ(a.net.memberships.size(), 1u);  // a member is left
  l.id = mc2;
  ASSERT_EQ(call(a, ca, command(RDMA_USER_CM_CMD_LEAVE_MCAST, l, 4), &resp), 0);
  std::memcpy(&reported, resp.data(), 4);
  // Expect: nothing reported for it, its event withdrawn (the eventfd count with it), the last
  // member gone reported, and the id's own count untouched (its ADDR_RESOLVED).
  EXPECT_EQ(reported, 0u);
  EXPECT_EQ(a.ready[ca], 0);
  EXPECT_EQ(a.ucma.queued(ca), 0u);
  ASSERT_EQ(a.net.memberships.size(), 2u);
  EXPECT_EQ(a.net.memberships[1], std::make_pair(group, false));
  l.id = mc2;
  EXPECT_EQ(call(a, ca, command(RDMA_USER_CM_CMD_LEAVE_MCAST, l, 4), &resp), -ENOENT);

  // Step: join again, and destroy the id without leaving.
  ASSERT_EQ(call(a, ca, command(RDMA_USER_CM_CMD_JOIN_IP_MCAST, j, 4), &resp), 0);
  EXPECT_EQ(destroy(a, ca, id), 1u);  // the id's ADDR_RESOLVED only
  // Expect: the membership went with it.
  ASSERT_EQ(a.net.memberships.size(), 4u);
  EXPECT_EQ(a.net.memberships[3], std::make_pair(group, false));
  EXPECT_EQ(a.ucma.queued(ca), 0u);
  EXPECT_EQ(a.ucma.counters().mcast_joins, 3u);
  EXPECT_EQ(a.ucma.counters().mcast_leaves, 3u);
}

TEST_F(Test2, JoinsTheKernelWouldRefuseAreRefused) {
  const net::IpAddr group = net::ipv4_mapped(0xe0000102);
  const uint32_t ca = a.ucma.open_channel(), other = a.ucma.open_channel();
  const uint32_t rc_id = create(a, ca, 0xa1, kPsTcp);
  const uint32_t ud = create(a, ca, 0xa2, kPsUdp);
  rdma_ucm_join_ip_mcast j{};
  j.addr = sin(group, 0);
  std::vector<uint8_t> resp;
  // An unbound id has no device; an RC id cannot join.
  j.id = ud;
  EXPECT_EQ(call(a, ca, command(RDMA_USER_CM_CMD_JOIN_IP_MCAST, j, 4), &resp), -EINVAL);
  rdma_ucm_bind_ip bi{};
  bi.addr = sin(kIpA, 0);
  for (uint32_t id : {rc_id, ud}) {
    bi.id = id;
    ASSERT_EQ(call(a, ca, command(RDMA_USER_CM_CMD_BIND_IP, bi, 0)), 0);
  }
  j.id = rc_id;
  EXPECT_EQ(call(a, ca, command(RDMA_USER_CM_CMD_JOIN_IP_MCAST, j, 4), &resp), -EINVAL);
  // Another channel's id; a unicast address.
  j.id = ud;
  EXPECT_EQ(call(a, other, command(RDMA_USER_CM_CMD_JOIN_IP_MCAST, j, 4), &resp), -EINVAL);
  j.addr = sin(kIpB, 0);
  EXPECT_EQ(call(a, ca, command(RDMA_USER_CM_CMD_JOIN_IP_MCAST, j, 4), &resp), -EINVAL);
  // JOIN_MCAST: the address size must be the family's, the flags one of the two.
  rdma_ucm_join_mcast jm{};
  jm.id = ud;
  jm.uid = 0x77;
  const sockaddr_in6 g = sin(group, 0);
  std::memcpy(&jm.addr, &g, sizeof g);
  jm.addr_size = sizeof(sockaddr_in6);
  EXPECT_EQ(call(a, ca, command(RDMA_USER_CM_CMD_JOIN_MCAST, jm, 4), &resp), -EINVAL);
  jm.addr_size = sizeof(sockaddr_in);
  jm.join_flags = 2;
  EXPECT_EQ(call(a, ca, command(RDMA_USER_CM_CMD_JOIN_MCAST, jm, 4), &resp), -EINVAL);
  EXPECT_TRUE(a.net.memberships.empty());
  // A send-only member (bound, not resolved: a device is enough) reports no membership.
  jm.join_flags = RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
  ASSERT_EQ(call(a, ca, command(RDMA_USER_CM_CMD_JOIN_MCAST, jm, 4), &resp), 0);
  EXPECT_TRUE(a.net.memberships.empty());
  const rdma_ucm_event_resp e = event(a, ca);
  EXPECT_EQ(e.event, 12u);
  EXPECT_EQ(e.uid, 0x77u);
  // A LEAVE on another channel than its id's.
  rdma_ucm_destroy_id l{};
  std::memcpy(&l.id, resp.data(), 4);
  EXPECT_EQ(call(a, other, command(RDMA_USER_CM_CMD_LEAVE_MCAST, l, 4), &resp), -EINVAL);
}

}  // namespace
}  // namespace droce::cm
