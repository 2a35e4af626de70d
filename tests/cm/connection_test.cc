// One CM connection's state machine (cm/connection.h), driven like the transport engine's protocol
// tests: each step is a consumer call, a MAD delivered (through the codec: encoded to 256 bytes
// and decoded again) or the clock moved; each expectation is the MADs it emitted, the events it
// raised and its state. Two connections face each other through a wire the test holds, so a MAD
// can be lost, repeated or answered out of turn.

#include "cm/connection.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <vector>

namespace droce::cm {
namespace {

net::IpAddr v4(uint32_t a) { return net::ipv4_mapped(a); }

// A REQ as rdma_cm fills it on RoCE (rdma-cm.md 3.6).
ConnectParams rdma_cm_req() {
  ConnectParams p;
  Req& q = p.req;
  q.local_comm_id = 0xa1;
  q.service_id = ip_service_id(PortSpace::tcp, 7174);
  q.local_ca_guid = 0x02db02fffe000001ULL;
  q.local_qpn = 0x11;
  q.responder_resources = 1;
  q.initiator_depth = 1;
  q.remote_cm_response_timeout = 20;
  q.local_cm_response_timeout = 20;
  q.starting_psn = 0x1234;
  q.retry_count = 7;
  q.rnr_retry_count = 7;
  q.max_cm_retries = 15;
  q.path_mtu = 5;
  q.primary.local_gid = v4(0x0a4d0001);
  q.primary.remote_gid = v4(0x0a4d0002);
  q.primary.hop_limit = 64;
  q.primary.local_ack_timeout = 17;
  p.tid = 0x00000002000000a1ULL;
  p.packet_life_time = 16;
  return p;
}

AcceptParams rdma_cm_rep() {
  AcceptParams a;
  a.rep.local_qpn = 0x22;
  a.rep.starting_psn = 0x5678;
  a.rep.responder_resources = 1;
  a.rep.initiator_depth = 1;
  a.rep.target_ack_delay = 15;
  a.rep.rnr_retry_count = 7;
  a.rep.local_ca_guid = 0x02db02fffe000002ULL;
  return a;
}

// What crosses the wire, through the codec.
Outgoing over_the_wire(const Outgoing& o) {
  Mad bytes{};
  encode(o.hdr, o.msg, &bytes);
  Outgoing back;
  EXPECT_EQ(decode(bytes, &back.hdr, &back.msg), MadError::ok);
  return back;
}

template <typename M>
const M& only(const std::vector<Outgoing>& out) {
  EXPECT_EQ(out.size(), 1u);
  static const M none{};
  if (out.size() != 1 || !std::holds_alternative<M>(out[0].msg)) {
    ADD_FAILURE() << "expected one " << attr_name(uint16_t(attr_of(Message{M{}})));
    return none;
  }
  return std::get<M>(out[0].msg);
}

std::vector<CmEventType> types(const std::vector<CmEvent>& ev) {
  std::vector<CmEventType> t;
  for (const auto& e : ev) t.push_back(e.type);
  return t;
}

// Active A and passive B, up to the point where B has the REQ.
struct Pair {
  uint64_t now = 1000;
  Connection a = Connection::connect(rdma_cm_req(), 1000);
  Outgoing req = over_the_wire(a.take_outgoing().at(0));
  Connection b = Connection::from_req(req.hdr, std::get<Req>(req.msg), 0xb2, 1000);

  // Runs the handshake to established on both sides.
  void establish() {
    b.take_events();
    ASSERT_EQ(b.accept(rdma_cm_rep(), now), 0);
    const Outgoing rep = over_the_wire(b.take_outgoing().at(0));
    ASSERT_TRUE(a.on_mad(rep.hdr, rep.msg, now));
    ASSERT_EQ(a.ready_to_use(now), 0);
    const Outgoing rtu = over_the_wire(a.take_outgoing().at(0));
    ASSERT_TRUE(b.on_mad(rtu.hdr, rtu.msg, now));
    a.take_events();
    b.take_events();
    ASSERT_EQ(a.state(), ConnState::established);
    ASSERT_EQ(b.state(), ConnState::established);
  }
};

TEST(CmConnection, TheHandshakeRdmaCmDrivesEstablishesBothSides) {
  Pair p;
  // Step: the REQ as sent. Expect: rdma_cm's values, the TID given; B raises connect_request.
  const Req& req = std::get<Req>(p.req.msg);
  EXPECT_EQ(p.req.hdr.tid, 0x00000002000000a1ULL);
  EXPECT_EQ(req.local_comm_id, 0xa1u);
  EXPECT_EQ(req.local_qpn, 0x11u);
  EXPECT_EQ(p.a.state(), ConnState::req_sent);
  EXPECT_EQ(p.b.state(), ConnState::req_rcvd);
  auto ev = p.b.take_events();
  ASSERT_EQ(types(ev), std::vector<CmEventType>{CmEventType::connect_request});
  EXPECT_EQ(std::get<Req>(ev[0].msg).service_id, ip_service_id(PortSpace::tcp, 7174));

  // Step: B accepts. Expect: a REP answering the REQ's TID, both comm IDs, B's QPN and PSN.
  ASSERT_EQ(p.b.accept(rdma_cm_rep(), p.now), 0);
  const Outgoing rep = over_the_wire(p.b.take_outgoing().at(0));
  const Rep& r = std::get<Rep>(rep.msg);
  EXPECT_EQ(rep.hdr.tid, p.req.hdr.tid);
  EXPECT_EQ(r.local_comm_id, 0xb2u);
  EXPECT_EQ(r.remote_comm_id, 0xa1u);
  EXPECT_EQ(r.local_qpn, 0x22u);
  EXPECT_EQ(r.starting_psn, 0x5678u);
  EXPECT_EQ(p.b.state(), ConnState::rep_sent);

  // Step: A gets the REP. Expect: connect_response with it, nothing sent until the consumer says.
  ASSERT_TRUE(p.a.on_mad(rep.hdr, rep.msg, p.now));
  ev = p.a.take_events();
  ASSERT_EQ(types(ev), std::vector<CmEventType>{CmEventType::connect_response});
  EXPECT_EQ(std::get<Rep>(ev[0].msg).local_qpn, 0x22u);
  EXPECT_TRUE(p.a.take_outgoing().empty());
  EXPECT_EQ(p.a.state(), ConnState::rep_rcvd);
  EXPECT_EQ(p.a.remote_comm_id(), 0xb2u);
  EXPECT_FALSE(p.a.deadline_ms());  // the REQ's retransmission stopped

  // Step: A's consumer moved its QP and says ready. Expect: an RTU on the REQ's TID, established.
  ASSERT_EQ(p.a.ready_to_use(p.now), 0);
  const Outgoing rtu = over_the_wire(p.a.take_outgoing().at(0));
  EXPECT_EQ(rtu.hdr.tid, p.req.hdr.tid);
  EXPECT_EQ(std::get<Rtu>(rtu.msg).local_comm_id, 0xa1u);
  EXPECT_EQ(std::get<Rtu>(rtu.msg).remote_comm_id, 0xb2u);
  EXPECT_EQ(types(p.a.take_events()), std::vector<CmEventType>{CmEventType::established});

  // Step: B gets the RTU. Expect: established, its REP timer stopped.
  ASSERT_TRUE(p.b.on_mad(rtu.hdr, rtu.msg, p.now));
  EXPECT_EQ(types(p.b.take_events()), std::vector<CmEventType>{CmEventType::established});
  EXPECT_EQ(p.b.state(), ConnState::established);
  EXPECT_FALSE(p.b.deadline_ms());
}

TEST(CmConnection, ALostReqIsResentEvery4608MsWithItsTidThenUnreachable) {
  Connection a = Connection::connect(rdma_cm_req(), 0);
  const Outgoing first = a.take_outgoing().at(0);
  // 2 x 256 ms packet life + 4096 ms response time, as ib_cm computes it for rdma_cm on RoCE.
  ASSERT_EQ(a.deadline_ms(), 4608u);
  a.on_timer(4607);
  EXPECT_TRUE(a.take_outgoing().empty());
  for (int i = 1; i <= 15; ++i) {
    a.on_timer(4608u * i);
    const auto out = a.take_outgoing();
    ASSERT_EQ(out.size(), 1u) << "retry " << i;
    EXPECT_EQ(out[0].hdr.tid, first.hdr.tid);
    EXPECT_TRUE(std::get<Req>(out[0].msg) == std::get<Req>(first.msg));
    EXPECT_TRUE(a.take_events().empty());
  }
  // Max CM Retries (15) spent: the 16th timeout gives up.
  a.on_timer(4608u * 16);
  EXPECT_TRUE(a.take_outgoing().empty());
  EXPECT_EQ(types(a.take_events()), std::vector<CmEventType>{CmEventType::unreachable});
  EXPECT_EQ(a.state(), ConnState::closed);
  EXPECT_FALSE(a.deadline_ms());
}

TEST(CmConnection, ADuplicateReqWhileDecidingGetsAnMraAndTheMraExtendsTheWait) {
  Pair p;
  EXPECT_EQ(types(p.b.take_events()), std::vector<CmEventType>{CmEventType::connect_request});
  // Step: A times out and resends the REQ before B's consumer decided.
  p.a.on_timer(1000 + 4608);
  const Outgoing again = over_the_wire(p.a.take_outgoing().at(0));
  ASSERT_TRUE(p.b.on_mad(again.hdr, again.msg, 1000 + 4608));
  // Expect: B answers with an MRA for the REQ, service timeout 24 (about 65 s), as a 6.1 kernel.
  const auto out = p.b.take_outgoing();
  const Mra& mra = only<Mra>(out);
  EXPECT_EQ(mra.message_mraed, MsgRef::req);
  EXPECT_EQ(mra.service_timeout, Connection::kMraServiceTimeout);
  EXPECT_EQ(mra.local_comm_id, 0xb2u);
  EXPECT_EQ(mra.remote_comm_id, 0xa1u);
  EXPECT_EQ(out[0].hdr.tid, p.req.hdr.tid);
  EXPECT_TRUE(p.b.take_events().empty());  // no second connect_request
  // Step: A gets the MRA. Expect: its next retry waits 2^16 ms + the packet life, not 4608 ms.
  const Outgoing m = over_the_wire(out[0]);
  const uint64_t at = 1000 + 4608;
  ASSERT_TRUE(p.a.on_mad(m.hdr, m.msg, at));
  EXPECT_EQ(p.a.deadline_ms(), at + 65536 + 256);
  p.a.on_timer(at + 4608);
  EXPECT_TRUE(p.a.take_outgoing().empty());
  EXPECT_EQ(p.a.retries_left(), 14u);  // one was spent before the MRA, none since
  // Step: B accepts within that time. Expect: the handshake completes.
  ASSERT_EQ(p.b.accept(rdma_cm_rep(), at + 30000), 0);
  const Outgoing rep = over_the_wire(p.b.take_outgoing().at(0));
  EXPECT_TRUE(p.a.on_mad(rep.hdr, rep.msg, at + 30000));
  EXPECT_EQ(p.a.state(), ConnState::rep_rcvd);
}

TEST(CmConnection, ALostRepIsResentAndALostRtuIsAnsweredAgain) {
  Pair p;
  ASSERT_EQ(p.b.accept(rdma_cm_rep(), p.now), 0);
  const Outgoing rep = p.b.take_outgoing().at(0);
  // Step: the REP is lost; B's timer: the REQ's Local CM Response Timeout (20: 4096 ms).
  EXPECT_EQ(p.b.deadline_ms(), p.now + 4096);
  p.b.on_timer(p.now + 4096);
  const Outgoing rep2 = over_the_wire(p.b.take_outgoing().at(0));
  EXPECT_TRUE(std::get<Rep>(rep2.msg) == std::get<Rep>(rep.msg));
  EXPECT_EQ(rep2.hdr.tid, p.req.hdr.tid);
  // A duplicate REQ now (after the REP) is dropped: the REP's timer answers it.
  EXPECT_TRUE(p.b.on_mad(p.req.hdr, p.req.msg, p.now + 4100));
  EXPECT_TRUE(p.b.take_outgoing().empty());
  // Step: A gets the REP, and the REP again while its consumer decides: an MRA for the REP.
  ASSERT_TRUE(p.a.on_mad(rep2.hdr, rep2.msg, p.now + 4100));
  ASSERT_TRUE(p.a.on_mad(rep2.hdr, rep2.msg, p.now + 4101));
  const auto mra_out = p.a.take_outgoing();
  EXPECT_EQ(only<Mra>(mra_out).message_mraed, MsgRef::rep);
  EXPECT_EQ(types(p.a.take_events()), std::vector<CmEventType>{CmEventType::connect_response});
  // Step: A is ready; its RTU is lost; B resends the REP. Expect: A answers with the RTU again.
  ASSERT_EQ(p.a.ready_to_use(p.now + 4200), 0);
  const Outgoing rtu = p.a.take_outgoing().at(0);
  EXPECT_EQ(types(p.a.take_events()), std::vector<CmEventType>{CmEventType::established});
  ASSERT_TRUE(p.a.on_mad(rep2.hdr, rep2.msg, p.now + 8200));
  const auto again = p.a.take_outgoing();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_TRUE(std::get<Rtu>(again[0].msg) == std::get<Rtu>(rtu.msg));
  EXPECT_TRUE(p.a.take_events().empty());  // established once
  const Outgoing rtu2 = over_the_wire(again[0]);
  ASSERT_TRUE(p.b.on_mad(rtu2.hdr, rtu2.msg, p.now + 8200));
  EXPECT_EQ(p.b.state(), ConnState::established);
}

TEST(CmConnection, APassiveRejectReachesTheActiveSideWithItsReasonAndData) {
  Pair p;
  std::array<uint8_t, kRejPrivate> pd{};
  pd[0] = 0x42;
  // Step: B's consumer rejects (rdma_reject: consumer defined, 28).
  ASSERT_EQ(p.b.reject(uint16_t(RejReason::consumer_defined), pd, p.now), 0);
  const Outgoing rej = over_the_wire(p.b.take_outgoing().at(0));
  const Rej& j = std::get<Rej>(rej.msg);
  // Expect: a REJ of the REQ on its TID; no local comm ID yet (none was sent to A).
  EXPECT_EQ(rej.hdr.tid, p.req.hdr.tid);
  EXPECT_EQ(j.message_rejected, MsgRef::req);
  EXPECT_EQ(j.local_comm_id, 0u);
  EXPECT_EQ(j.remote_comm_id, 0xa1u);
  EXPECT_EQ(j.reason, 28);
  EXPECT_EQ(p.b.state(), ConnState::closed);
  EXPECT_TRUE(p.b.take_events().size() == 1);  // only the connect_request from before
  // Step: A gets it. Expect: rejected with reason and data, closed, no more REQs.
  ASSERT_TRUE(p.a.on_mad(rej.hdr, rej.msg, p.now));
  const auto ev = p.a.take_events();
  ASSERT_EQ(types(ev), std::vector<CmEventType>{CmEventType::rejected});
  EXPECT_EQ(ev[0].reason, 28);
  EXPECT_EQ(std::get<Rej>(ev[0].msg).private_data[0], 0x42);
  EXPECT_EQ(p.a.state(), ConnState::closed);
  p.a.on_timer(p.now + 100000);
  EXPECT_TRUE(p.a.take_outgoing().empty());
}

TEST(CmConnection, TheActiveSideRejectsTheRepAfterAnMraTheLocalIdIsKnown) {
  Pair p;
  // B sent an MRA for a duplicate REQ, so A knows B's comm ID: a later REJ carries it.
  p.b.on_mad(p.req.hdr, p.req.msg, p.now);
  p.b.take_outgoing();
  ASSERT_EQ(p.b.reject(uint16_t(RejReason::consumer_defined), {}, p.now), 0);
  EXPECT_EQ(only<Rej>(p.b.take_outgoing()).local_comm_id, 0xb2u);
  // A rejecting B's REP (its consumer failed to move the QP): message rejected = REP.
  Pair q;
  ASSERT_EQ(q.b.accept(rdma_cm_rep(), q.now), 0);
  const Outgoing rep = over_the_wire(q.b.take_outgoing().at(0));
  ASSERT_TRUE(q.a.on_mad(rep.hdr, rep.msg, q.now));
  ASSERT_EQ(q.a.reject(uint16_t(RejReason::consumer_defined), {}, q.now), 0);
  const Outgoing rej = over_the_wire(q.a.take_outgoing().at(0));
  EXPECT_EQ(std::get<Rej>(rej.msg).message_rejected, MsgRef::rep);
  EXPECT_EQ(std::get<Rej>(rej.msg).local_comm_id, 0xa1u);
  EXPECT_EQ(std::get<Rej>(rej.msg).remote_comm_id, 0xb2u);
  ASSERT_TRUE(q.b.on_mad(rej.hdr, rej.msg, q.now));
  EXPECT_EQ(types(q.b.take_events()).back(), CmEventType::rejected);
  EXPECT_EQ(q.b.state(), ConnState::closed);
  EXPECT_FALSE(q.b.deadline_ms());  // no REP resent after the REJ
}

TEST(CmConnection, DisconnectIsDreqDrepThenTimewaitOnBothSides) {
  Pair p;
  p.establish();
  // Step: A disconnects. Expect: a DREQ naming B's QP, on a TID of its own.
  ASSERT_EQ(p.a.disconnect(p.now), 0);
  const Outgoing dreq = over_the_wire(p.a.take_outgoing().at(0));
  const Dreq& d = std::get<Dreq>(dreq.msg);
  EXPECT_EQ(d.local_comm_id, 0xa1u);
  EXPECT_EQ(d.remote_comm_id, 0xb2u);
  EXPECT_EQ(d.remote_qpn, 0x22u);
  EXPECT_NE(dreq.hdr.tid, p.req.hdr.tid);
  EXPECT_EQ(p.a.state(), ConnState::dreq_sent);
  // Step: B gets it. Expect: disconnected; B answers when its consumer disconnects too.
  ASSERT_TRUE(p.b.on_mad(dreq.hdr, dreq.msg, p.now));
  EXPECT_EQ(types(p.b.take_events()), std::vector<CmEventType>{CmEventType::disconnected});
  EXPECT_EQ(p.b.state(), ConnState::dreq_rcvd);
  ASSERT_EQ(p.b.disconnect(p.now + 5), 0);
  const Outgoing drep = over_the_wire(p.b.take_outgoing().at(0));
  EXPECT_EQ(drep.hdr.tid, dreq.hdr.tid);
  EXPECT_EQ(std::get<Drep>(drep.msg).local_comm_id, 0xb2u);
  EXPECT_EQ(p.b.state(), ConnState::timewait);
  // Timewait: the QP's ACK timeout (17: 512 ms).
  EXPECT_EQ(p.b.deadline_ms(), p.now + 5 + 512);
  // Step: the DREP is lost; A resends the DREQ; B, in timewait, answers it again.
  const uint64_t dreq_timeout = 2 * 256 + 4096;
  EXPECT_EQ(p.a.deadline_ms(), p.now + dreq_timeout);
  p.a.on_timer(p.now + dreq_timeout);
  const Outgoing dreq2 = over_the_wire(p.a.take_outgoing().at(0));
  EXPECT_EQ(dreq2.hdr.tid, dreq.hdr.tid);
  ASSERT_TRUE(p.b.on_mad(dreq2.hdr, dreq2.msg, p.now + 100));
  const Outgoing drep2 = over_the_wire(p.b.take_outgoing().at(0));
  // Step: A gets the DREP. Expect: disconnected, timewait, then timewait_exit and closed.
  ASSERT_TRUE(p.a.on_mad(drep2.hdr, drep2.msg, p.now + dreq_timeout + 1));
  EXPECT_EQ(types(p.a.take_events()), std::vector<CmEventType>{CmEventType::disconnected});
  EXPECT_EQ(p.a.state(), ConnState::timewait);
  const uint64_t a_end = p.now + dreq_timeout + 1 + 512;
  p.a.on_timer(a_end - 1);
  EXPECT_EQ(p.a.state(), ConnState::timewait);
  p.a.on_timer(a_end);
  EXPECT_EQ(types(p.a.take_events()), std::vector<CmEventType>{CmEventType::timewait_exit});
  EXPECT_EQ(p.a.state(), ConnState::closed);
  p.b.on_timer(p.now + 5 + 512);
  EXPECT_EQ(types(p.b.take_events()), std::vector<CmEventType>{CmEventType::timewait_exit});
}

TEST(CmConnection, AnUnansweredDreqStillEndsInDisconnectedAndTimewait) {
  Pair p;
  p.establish();
  ASSERT_EQ(p.a.disconnect(0), 0);
  p.a.take_outgoing();
  const uint64_t t = 2 * 256 + 4096;
  for (int i = 1; i <= 15; ++i) p.a.on_timer(t * i);
  EXPECT_EQ(p.a.take_outgoing().size(), 15u);
  EXPECT_TRUE(p.a.take_events().empty());
  p.a.on_timer(t * 16);
  EXPECT_EQ(types(p.a.take_events()), std::vector<CmEventType>{CmEventType::disconnected});
  EXPECT_EQ(p.a.state(), ConnState::timewait);
}

TEST(CmConnection, BothSidesDisconnectingAtOnceEachAnswerTheOther) {
  Pair p;
  p.establish();
  ASSERT_EQ(p.a.disconnect(p.now), 0);
  ASSERT_EQ(p.b.disconnect(p.now), 0);
  const Outgoing da = over_the_wire(p.a.take_outgoing().at(0));
  const Outgoing db = over_the_wire(p.b.take_outgoing().at(0));
  ASSERT_TRUE(p.a.on_mad(db.hdr, db.msg, p.now));
  ASSERT_TRUE(p.b.on_mad(da.hdr, da.msg, p.now));
  EXPECT_EQ(only<Drep>(p.a.take_outgoing()).remote_comm_id, 0xb2u);
  EXPECT_EQ(only<Drep>(p.b.take_outgoing()).remote_comm_id, 0xa1u);
  EXPECT_EQ(types(p.a.take_events()), std::vector<CmEventType>{CmEventType::disconnected});
  EXPECT_EQ(p.a.state(), ConnState::timewait);
  EXPECT_EQ(p.b.state(), ConnState::timewait);
}

TEST(CmConnection, CallsInTheWrongStateAreRefusedAndStrayMadsIgnored) {
  Pair p;
  EXPECT_EQ(p.a.accept(rdma_cm_rep(), p.now), -EINVAL);  // active sides do not accept
  EXPECT_EQ(p.b.ready_to_use(p.now), -EINVAL);           // passive sides get the RTU
  EXPECT_EQ(p.a.ready_to_use(p.now), -EINVAL);           // no REP yet
  EXPECT_EQ(p.a.disconnect(p.now), -EINVAL);             // not established
  EXPECT_EQ(p.b.disconnect(p.now), -EINVAL);
  // An RTU or DREP to a side that expects neither, a REQ to the active side.
  const Outgoing rtu{MadHeader{}, Message{Rtu{0xb2, 0xa1, {}}}};
  EXPECT_FALSE(p.a.on_mad(rtu.hdr, rtu.msg, p.now));
  EXPECT_FALSE(p.b.on_mad(rtu.hdr, rtu.msg, p.now));  // B has not sent a REP
  EXPECT_FALSE(p.a.on_mad(MadHeader{}, Message{Drep{}}, p.now));
  EXPECT_FALSE(p.a.on_mad(p.req.hdr, p.req.msg, p.now));
  EXPECT_FALSE(p.a.on_mad(MadHeader{}, Message{SidrRep{}}, p.now));
  // An MRA for the wrong message does not move A's timer.
  const auto before = p.a.deadline_ms();
  EXPECT_FALSE(p.a.on_mad(MadHeader{}, Message{Mra{0xb2, 0xa1, MsgRef::rep, 24, {}}}, p.now));
  EXPECT_EQ(p.a.deadline_ms(), before);
  EXPECT_EQ(p.a.state(), ConnState::req_sent);
  EXPECT_EQ(p.b.state(), ConnState::req_rcvd);
  p.establish();
  EXPECT_EQ(p.a.reject(28, {}, p.now), -EINVAL);  // too late to reject: disconnect
  EXPECT_STREQ(to_string(p.a.state()), "established");
}

}  // namespace
}  // namespace droce::cm
