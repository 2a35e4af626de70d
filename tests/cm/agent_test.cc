// A host's CM agent (cm/agent.h): two agents, A (10.77.0.1) and B (10.77.0.2), face each other
// through a wire the test holds. Each test is a few steps (a consumer call, MADs delivered, the
// clock moved) and what came out: the MADs on the wire, the events, the counters.

#include "cm/agent.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <set>

namespace droce::cm {
namespace {

const Peer kA{net::ipv4_mapped(0x0a4d0001)};
const Peer kB{net::ipv4_mapped(0x0a4d0002)};
const Peer kMallory{net::ipv4_mapped(0x0a4d0099)};
constexpr uint64_t kService = ip_service_id(PortSpace::tcp, 7174);

ConnectParams req_to_b(uint32_t qpn = 0x11) {
  ConnectParams p;
  p.req.service_id = kService;
  p.req.local_qpn = qpn;
  p.req.remote_cm_response_timeout = 20;
  p.req.local_cm_response_timeout = 20;
  p.req.max_cm_retries = 15;
  p.req.path_mtu = 5;
  p.req.primary.local_gid = kA.gid;
  p.req.primary.remote_gid = kB.gid;
  p.req.primary.local_ack_timeout = 17;
  return p;
}

AcceptParams rep(uint32_t qpn = 0x22) {
  AcceptParams a;
  a.rep.local_qpn = qpn;
  a.rep.rnr_retry_count = 7;
  return a;
}

Message decoded(const Mad& m) {
  MadHeader h;
  Message msg;
  EXPECT_EQ(decode(m, &h, &msg), MadError::ok);
  return msg;
}

struct Wire {
  Agent a{0xaaaa, 0x1000};
  Agent b{0xbbbb, 0x2000};
  uint64_t now = 0;

  // Delivers everything each side sent to the other (the peer named in each must be the other
  // side), until nothing moves. Returns how many MADs crossed.
  int flush() {
    int n = 0;
    for (bool moved = true; moved;) {
      moved = false;
      for (auto& o : a.take_outgoing()) {
        EXPECT_EQ(o.peer, kB);
        b.on_mad(o.mad, kA, now);
        moved = true;
        ++n;
      }
      for (auto& o : b.take_outgoing()) {
        EXPECT_EQ(o.peer, kA);
        a.on_mad(o.mad, kB, now);
        moved = true;
        ++n;
      }
    }
    return n;
  }

  // A connects from `qpn` to B's listener, B accepts, A is ready: both established, every event
  // taken. Returns {A's comm ID, B's}.
  std::pair<uint32_t, uint32_t> establish(uint32_t qpn = 0x11) {
    const uint32_t ca = a.connect(req_to_b(qpn), kB, now);
    flush();
    const uint32_t cb = b.take_events().at(0).conn;
    EXPECT_EQ(b.accept(cb, rep(), now), 0);
    flush();
    EXPECT_EQ(a.ready_to_use(ca, now), 0);
    flush();
    a.take_events();
    b.take_events();
    EXPECT_EQ(a.state(ca), ConnState::established);
    EXPECT_EQ(b.state(cb), ConnState::established);
    return {ca, cb};
  }
};

std::vector<CmEventType> types(const std::vector<AgentEvent>& ev) {
  std::vector<CmEventType> t;
  for (const auto& e : ev) t.push_back(e.event.type);
  return t;
}

TEST(CmAgent, AListenerAcceptsAConnectionAndBothSidesTearItDown) {
  Wire w;
  const int64_t l = w.b.listen(kService, 8);
  ASSERT_GT(l, 0);
  const uint32_t ca = w.a.connect(req_to_b(), kB, w.now);
  // The REQ carries A's comm ID and GUID.
  auto out = w.a.take_outgoing();
  ASSERT_EQ(out.size(), 1u);
  const Req req = std::get<Req>(decoded(out[0].mad));
  EXPECT_EQ(req.local_comm_id, ca);
  EXPECT_EQ(req.local_ca_guid, 0xaaaau);
  w.b.on_mad(out[0].mad, kA, w.now);
  auto ev = w.b.take_events();
  ASSERT_EQ(types(ev), std::vector<CmEventType>{CmEventType::connect_request});
  EXPECT_EQ(ev[0].listener, uint32_t(l));
  EXPECT_EQ(ev[0].peer, kA);
  const uint32_t cb = ev[0].conn;
  ASSERT_EQ(w.b.accept(cb, rep(), w.now), 0);
  w.flush();
  ev = w.a.take_events();
  ASSERT_EQ(types(ev), std::vector<CmEventType>{CmEventType::connect_response});
  EXPECT_EQ(std::get<Rep>(ev[0].event.msg).local_ca_guid, 0xbbbbu);
  ASSERT_EQ(w.a.ready_to_use(ca, w.now), 0);
  w.flush();
  EXPECT_EQ(types(w.a.take_events()), std::vector<CmEventType>{CmEventType::established});
  EXPECT_EQ(types(w.b.take_events()), std::vector<CmEventType>{CmEventType::established});
  // Teardown: A's DREQ, B answers, both wait out timewait, then nothing is left.
  ASSERT_EQ(w.a.disconnect(ca, w.now), 0);
  w.flush();
  EXPECT_EQ(types(w.b.take_events()), std::vector<CmEventType>{CmEventType::disconnected});
  ASSERT_EQ(w.b.disconnect(cb, w.now), 0);
  w.flush();
  EXPECT_EQ(types(w.a.take_events()), std::vector<CmEventType>{CmEventType::disconnected});
  EXPECT_EQ(w.a.state(ca), ConnState::timewait);
  ASSERT_TRUE(w.a.deadline_ms());
  w.now = 10000;
  w.a.on_timer(w.now);
  w.b.on_timer(w.now);
  EXPECT_EQ(types(w.a.take_events()), std::vector<CmEventType>{CmEventType::timewait_exit});
  EXPECT_EQ(types(w.b.take_events()), std::vector<CmEventType>{CmEventType::timewait_exit});
  EXPECT_EQ(w.a.connections(), 0u);
  EXPECT_EQ(w.b.connections(), 0u);
  EXPECT_FALSE(w.a.state(ca));
  EXPECT_EQ(w.a.accept(ca, rep(), w.now), -ENOENT);
}

TEST(CmAgent, NobodyListeningIsRejectedWithReason8AndNothingIsKept) {
  Wire w;
  const uint32_t ca = w.a.connect(req_to_b(), kB, w.now);
  auto out = w.a.take_outgoing();
  w.b.on_mad(out[0].mad, kA, w.now);
  auto back = w.b.take_outgoing();
  ASSERT_EQ(back.size(), 1u);
  const Rej rej = std::get<Rej>(decoded(back[0].mad));
  EXPECT_EQ(rej.reason, uint16_t(RejReason::invalid_service_id));
  EXPECT_EQ(rej.local_comm_id, 0u);
  EXPECT_EQ(rej.remote_comm_id, ca);
  EXPECT_EQ(w.b.counters().rej_no_listener, 1u);
  EXPECT_EQ(w.b.connections(), 0u);
  EXPECT_TRUE(w.b.take_events().empty());
  w.a.on_mad(back[0].mad, kB, w.now);
  const auto ev = w.a.take_events();
  ASSERT_EQ(types(ev), std::vector<CmEventType>{CmEventType::rejected});
  EXPECT_EQ(ev[0].event.reason, 8);
  EXPECT_EQ(w.a.connections(), 0u);
}

TEST(CmAgent, ARetransmittedReqIsTheSameConnectionAndGetsAnMra) {
  Wire w;
  w.b.listen(kService, 8);
  w.a.connect(req_to_b(), kB, w.now);
  w.flush();
  EXPECT_EQ(types(w.b.take_events()), std::vector<CmEventType>{CmEventType::connect_request});
  // A's REQ timer fires: the same REQ again.
  w.now = 4608;
  w.a.on_timer(w.now);
  auto out = w.a.take_outgoing();
  ASSERT_EQ(out.size(), 1u);
  w.b.on_mad(out[0].mad, kA, w.now);
  EXPECT_TRUE(w.b.take_events().empty());
  EXPECT_EQ(w.b.connections(), 1u);
  auto back = w.b.take_outgoing();
  ASSERT_EQ(back.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<Mra>(decoded(back[0].mad)));
}

TEST(CmAgent, AReqFromAQpStillConnectedHereIsStale) {
  Wire w;
  w.b.listen(kService, 8);
  const auto [ca, cb] = w.establish(0x11);
  // A (rebooted, same GUID, new comm IDs) asks again from QP 0x11 while B still holds it.
  Agent a2(0xaaaa, 0x7777);
  a2.connect(req_to_b(0x11), kB, w.now);
  auto out = a2.take_outgoing();
  w.b.on_mad(out[0].mad, kA, w.now);
  auto back = w.b.take_outgoing();
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(std::get<Rej>(decoded(back[0].mad)).reason, uint16_t(RejReason::stale_conn));
  EXPECT_EQ(w.b.counters().rej_stale, 1u);
  EXPECT_EQ(w.b.state(cb), ConnState::established);  // the old one is untouched
  // Another QP of the same host is welcome.
  a2.connect(req_to_b(0x12), kB, w.now);
  w.b.on_mad(a2.take_outgoing().at(0).mad, kA, w.now);
  EXPECT_EQ(types(w.b.take_events()), std::vector<CmEventType>{CmEventType::connect_request});
}

TEST(CmAgent, AListenersBacklogIsBounded) {
  Wire w;
  w.b.listen(kService, 2);
  std::vector<uint32_t> waiting;
  for (uint32_t q = 1; q <= 3; ++q) {
    w.a.connect(req_to_b(0x100 + q), kB, w.now);
    for (auto& o : w.a.take_outgoing()) w.b.on_mad(o.mad, kA, w.now);
  }
  for (auto& e : w.b.take_events()) waiting.push_back(e.conn);
  EXPECT_EQ(waiting.size(), 2u);
  auto back = w.b.take_outgoing();
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(std::get<Rej>(decoded(back[0].mad)).reason, uint16_t(RejReason::no_resources));
  EXPECT_EQ(w.b.counters().rej_backlog, 1u);
  // Accepting one makes room for the next.
  ASSERT_EQ(w.b.accept(waiting[0], rep(), w.now), 0);
  w.b.take_outgoing();
  w.a.connect(req_to_b(0x104), kB, w.now);
  for (auto& o : w.a.take_outgoing()) w.b.on_mad(o.mad, kA, w.now);
  EXPECT_EQ(types(w.b.take_events()), std::vector<CmEventType>{CmEventType::connect_request});
  EXPECT_EQ(w.b.listen(kService, 1), -EADDRINUSE);
}

TEST(CmAgent, MalformedAndForeignMadsAreCountedAndDisturbNoConnection) {
  Wire w;
  w.b.listen(kService, 8);
  const auto [ca, cb] = w.establish();
  // Garbage: too short, not CM, a bad class version.
  Mad junk{};
  w.b.on_mad(std::span<const uint8_t>(junk.data(), 100), kMallory, w.now);
  junk[0] = 1;
  junk[1] = 0x04;
  w.b.on_mad(junk, kMallory, w.now);
  junk[1] = 0x07;
  junk[2] = 1;
  w.b.on_mad(junk, kMallory, w.now);
  EXPECT_EQ(w.b.counters().dropped[size_t(MadError::short_mad)], 1u);
  EXPECT_EQ(w.b.counters().dropped[size_t(MadError::not_cm)], 1u);
  EXPECT_EQ(w.b.counters().dropped[size_t(MadError::bad_class_version)], 1u);
  // A forged DREQ naming the connection's comm IDs, but from another host: ignored.
  Mad forged{};
  encode(MadHeader{}, Message{Dreq{ca, cb, 0x22, {}}}, &forged);
  w.b.on_mad(forged, kMallory, w.now);
  // From A's address but with the wrong sender comm ID: ignored too.
  encode(MadHeader{}, Message{Dreq{ca + 1, cb, 0x22, {}}}, &forged);
  w.b.on_mad(forged, kA, w.now);
  // A DREQ for a comm ID B never gave out.
  encode(MadHeader{}, Message{Dreq{ca, cb ^ 0x5555, 0x22, {}}}, &forged);
  w.b.on_mad(forged, kA, w.now);
  EXPECT_EQ(w.b.counters().unmatched, 3u);
  EXPECT_EQ(w.b.state(cb), ConnState::established);
  EXPECT_TRUE(w.b.take_events().empty());
  EXPECT_TRUE(w.b.take_outgoing().empty());
  // A replayed RTU is ignored the same way (the connection is past it).
  Mad rtu{};
  encode(MadHeader{}, Message{Rtu{ca, cb, {}}}, &rtu);
  w.b.on_mad(rtu, kA, w.now);
  EXPECT_EQ(w.b.counters().unmatched, 4u);
  EXPECT_EQ(w.b.state(cb), ConnState::established);
}

TEST(CmAgent, SidrForUdServicesAnswersWithTheQpOrStatus1) {
  Wire w;
  const uint64_t udp = ip_service_id(PortSpace::udp, 7174);
  SidrReq s;
  s.request_id = 0x42;
  s.service_id = udp;
  Mad m{};
  MadHeader h;
  h.tid = 0x99;
  encode(h, Message{s}, &m);
  // Nobody listens: SIDR_REP with status 1 (unsupported), on the request's TID.
  w.b.on_mad(m, kA, w.now);
  auto out = w.b.take_outgoing();
  ASSERT_EQ(out.size(), 1u);
  MadHeader rh;
  Message rm;
  ASSERT_EQ(decode(out[0].mad, &rh, &rm), MadError::ok);
  EXPECT_EQ(rh.tid, 0x99u);
  EXPECT_EQ(std::get<SidrRep>(rm).status, uint8_t(SidrStatus::unsupported));
  EXPECT_EQ(std::get<SidrRep>(rm).request_id, 0x42u);
  EXPECT_EQ(w.b.counters().sidr_no_listener, 1u);
  // A listener gets the request, and its answer goes back with the QPN and Q_Key.
  const int64_t l = w.b.listen(udp, 8);
  w.b.on_mad(m, kA, w.now);
  const auto ev = w.b.take_events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].listener, uint32_t(l));
  EXPECT_EQ(ev[0].tid, 0x99u);
  EXPECT_TRUE(std::holds_alternative<SidrReq>(ev[0].event.msg));
  SidrRep answer;
  answer.request_id = 0x42;
  answer.qpn = 0x33;
  answer.qkey = 0x01234567;
  answer.service_id = udp;
  w.b.sidr_reply(ev[0].peer, ev[0].tid, answer);
  out = w.b.take_outgoing();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].peer, kA);
  EXPECT_EQ(std::get<SidrRep>(decoded(out[0].mad)).qpn, 0x33u);
  EXPECT_EQ(w.b.connections(), 0u);  // UD keeps no connection
}

TEST(CmAgent, CommIdsAreUniqueAndDifferBetweenSeeds) {
  Agent a(1, 0x1000), b(1, 0x2000);
  std::set<uint32_t> seen;
  for (int i = 0; i < 100; ++i) {
    const uint32_t id = a.connect(req_to_b(uint32_t(i)), kB, 0);
    EXPECT_NE(id, 0u);
    EXPECT_TRUE(seen.insert(id).second);
  }
  EXPECT_EQ(seen.count(b.connect(req_to_b(), kB, 0)), 0u);
  ASSERT_TRUE(a.deadline_ms());
  EXPECT_EQ(*a.deadline_ms(), 4608u);
}

}  // namespace
}  // namespace droce::cm

namespace droce::cm {
namespace {

// perftest -R's server destroys its listener and listens again on the same port: a REQ that
// comes in between is held for the new listener instead of refused.
TEST(CmAgent, AReqForAListenerThatJustWentWaitsForTheNextOne) {
  Wire w;
  w.now = 10'000;
  const int64_t l1 = w.b.listen(kService, 8, w.now);
  w.b.stop_listening(static_cast<uint32_t>(l1), w.now);
  w.now += 100;
  w.a.connect(req_to_b(), kB, w.now);
  EXPECT_EQ(w.flush(), 1);  // the REQ, no REJ
  EXPECT_EQ(w.b.counters().held, 1u);
  EXPECT_TRUE(w.a.take_events().empty());
  w.now += 50;
  const int64_t l2 = w.b.listen(kService, 8, w.now);
  const auto ev = w.b.take_events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].event.type, CmEventType::connect_request);
  EXPECT_EQ(ev[0].listener, static_cast<uint32_t>(l2));
}

TEST(CmAgent, AHeldReqNobodyListensForIsRejectedWithReason8WhenItsTimeIsUp) {
  Wire w;
  w.now = 10'000;
  const int64_t l1 = w.b.listen(kService, 8, w.now);
  w.b.stop_listening(static_cast<uint32_t>(l1), w.now);
  w.a.connect(req_to_b(), kB, w.now);
  w.flush();
  w.now += Agent::kHoldMs - 1;
  w.b.on_timer(w.now);
  EXPECT_EQ(w.flush(), 0);
  w.now += 1;
  w.b.on_timer(w.now);
  EXPECT_EQ(w.flush(), 1);  // the REJ
  const auto ev = w.a.take_events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].event.type, CmEventType::rejected);
  EXPECT_EQ(ev[0].event.reason, uint16_t(RejReason::invalid_service_id));
  // Long after the listener went, a REQ is refused at once, as ever.
  w.now += Agent::kListenGapMs + 1;
  w.a.connect(req_to_b(0x12), kB, w.now);
  EXPECT_EQ(w.flush(), 2);
  EXPECT_EQ(w.b.counters().rej_no_listener, 2u);
}

}  // namespace
}  // namespace droce::cm
