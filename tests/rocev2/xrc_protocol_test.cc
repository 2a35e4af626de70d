// XRC (IBA Annex A14) in the engine, one crafted frame at a time (the protocol harness): the
// initiator names the target's XRC SRQ in every request and takes XRC responses; the target
// has no queues of its own and serves each request for the XRC SRQ its XRCETH names, with that
// SRQ's PD, receives and CQ, after checking the SRQ is of its own XRC domain.

#include <gtest/gtest.h>

#include "tests/rocev2/protocol_harness.h"

namespace droce::test {
namespace {

constexpr uint32_t kDomain = 7;
constexpr uint8_t kNakInvalidRequest = 0x61;
constexpr uint8_t kNakRemoteAccess = 0x62;
constexpr uint8_t kAckNoCredit = 0x1f;

uint8_t xrc(uint8_t operation) { return make_opcode(Transport::xrc, operation); }

class XrcTest : public ProtocolTest {
 protected:
  /// An XRC SRQ of `domain`, completing into the harness's receive CQ.
  Srq* make_xrc_srq(uint32_t domain = kDomain, uint32_t pd = 0) {
    Srq* s = nullptr;
    EXPECT_EQ(engine().create_srq(pd ? pd : pd_, 16, 4, &s, domain, rcq_), 0);
    return s;
  }
  uint32_t make_target(uint32_t domain = kDomain) {
    QpOptions o;
    o.type = QpType::xrc_recv;
    o.xrcd = domain;
    return make_qp(o);
  }
  /// A request from the peer to our target, for XRC SRQ `srqn`.
  PacketHeaders request(uint8_t operation, uint32_t psn, uint32_t srqn, bool ackreq = true) const {
    PacketHeaders h = peer(operation, psn, ackreq);
    h.ext.xrceth.xrc_srq = srqn;
    return h;
  }
};

// Expect: an XRC send QP's SEND goes out as XRC SEND ONLY with the WR's XRC SRQ number in its
// XRCETH; the peer's XRC ACK completes it.
TEST_F(XrcTest, InitiatorNamesTheSrqAndTakesAnXrcAck) {
  QpOptions o;
  o.type = QpType::xrc_send;
  const uint32_t qpn = make_qp(o);
  auto buf = reg(64);
  buf->fill(pattern(64, 1));
  SendWr w = send_wr(WrOpcode::send, 42, buf->sge(0, 64));
  w.remote_qpn = 0x000123;  // wr.qp_type.xrc.remote_srqn
  ASSERT_EQ(engine().post_send(qpn, w), 0);
  at(now_ + 1);
  auto out = sent();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), xrc(op::kSendOnly));
  EXPECT_TRUE(out[0].has(kHdrXrceth));
  EXPECT_EQ(out[0].ext().xrceth.xrc_srq, 0x123u);
  EXPECT_EQ(out[0].psn(), o.sq_psn);
  EXPECT_EQ(out[0].payload(), pattern(64, 1));
  expect_to_peer(out[0]);

  // An RC ACK is another transport's: dropped and counted. The XRC one completes the SEND.
  const uint64_t bad_dest = engine().counters().rx_bad_dest;
  PacketHeaders rc_ack = ack(o.sq_psn, kAckNoCredit, 1);
  rc_ack.bth.opcode = make_opcode(Transport::rc, op::kAcknowledge);
  deliver(rc_ack);
  EXPECT_EQ(engine().counters().rx_bad_dest, bad_dest + 1);
  EXPECT_TRUE(drain(scq_).empty());
  deliver(ack(o.sq_psn, kAckNoCredit, 1));
  auto wc = drain(scq_);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 42u);
  EXPECT_EQ(wc[0].status, WcStatus::success);
  EXPECT_EQ(wc[0].opcode, WcOpcode::send);
  // No receive queue: post_recv is refused; FLUSH and ATOMIC WRITE have no XRC opcodes.
  EXPECT_EQ(engine().post_recv(qpn, recv_wr(1, buf->sge(0, 8))), -EINVAL);
  SendWr aw;
  aw.opcode = WrOpcode::atomic_write;
  EXPECT_EQ(engine().post_send(qpn, aw), -EINVAL);
}

// Expect: a multi-packet XRC SEND to the target lands in a receive of the XRC SRQ it names and
// completes into that SRQ's CQ with the target's QPN; the ACK is XRC's and has no XRCETH.
TEST_F(XrcTest, TargetDeliversToTheNamedSrqAndItsCq) {
  Srq* srq = make_xrc_srq();
  const uint32_t tgt = make_target();
  auto buf = reg(4096);
  ASSERT_EQ(engine().post_srq_recv(srq, recv_wr(7, buf->sge(0, 4096))), 0);
  const auto data = pattern(1500, 3);
  const uint32_t psn = opts_.rq_psn;
  deliver({Frame{request(op::kSendFirst, psn, srq->id(), false), {data.begin(), data.begin() + 1024}},
           Frame{request(op::kSendLast, psn + 1, srq->id()), {data.begin() + 1024, data.end()}}});
  auto out = sent();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], psn + 1, kAckNoCredit, 1);
  EXPECT_FALSE(out[0].has(kHdrXrceth));
  auto wc = drain(rcq_);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 7u);
  EXPECT_EQ(wc[0].status, WcStatus::success);
  EXPECT_EQ(wc[0].opcode, WcOpcode::recv);
  EXPECT_EQ(wc[0].byte_len, 1500u);
  EXPECT_EQ(wc[0].qp_num, tgt);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), buf->bytes.begin()));
  EXPECT_EQ(engine().post_recv(tgt, recv_wr(1, buf->sge(0, 8))), -EINVAL);  // no receive queue
  SendWr w = send_wr(WrOpcode::send, 1, buf->sge(0, 8));
  EXPECT_EQ(engine().post_send(tgt, w), -EINVAL);  // no send queue
}

// Expect: an XRCETH naming an XRC SRQ of another XRC domain is an invalid request (A14): NAK
// invalid request, the target goes to ERR, the SRQ's receive stays untouched.
TEST_F(XrcTest, SrqOfAnotherDomainIsAnInvalidRequest) {
  Srq* other = make_xrc_srq(kDomain + 1);
  const uint32_t tgt = make_target();
  auto buf = reg(64);
  ASSERT_EQ(engine().post_srq_recv(other, recv_wr(9, buf->sge(0, 64))), 0);
  deliver(request(op::kSendOnly, opts_.rq_psn, other->id()), {1, 2, 3, 4});
  auto out = sent();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], opts_.rq_psn, kNakInvalidRequest, 0);
  EXPECT_EQ(state(tgt), QpState::err);
  EXPECT_EQ(other->size(), 1u);
  EXPECT_TRUE(drain(rcq_).empty());
  if constexpr (kResponderTrace) {  // debug builds: the trace names the rule
    const ResponderTrace& t = engine().responder_trace();
    ASSERT_GT(t.size(), 0u);
    EXPECT_EQ(t[t.size() - 1].check, ResponderCheck::xrc_srq);
    EXPECT_EQ(t[t.size() - 1].verdict, ResponderVerdict::nak_inv_req);
  }
  ASSERT_FALSE(engine().events().empty());
  EXPECT_EQ(engine().events().back().type, AsyncEventType::qp_req_err);
}

// Expect: a number that is no SRQ, or a basic SRQ's, is refused the same way.
TEST_F(XrcTest, UnknownOrBasicSrqIsAnInvalidRequest) {
  Srq* basic = nullptr;
  ASSERT_EQ(engine().create_srq(pd_, 16, 1, &basic), 0);
  make_target();
  deliver(request(op::kSendOnly, opts_.rq_psn, basic->id()), {1, 2, 3, 4});
  auto out = sent();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], opts_.rq_psn, kNakInvalidRequest, 0);

  make_target();
  deliver(request(op::kSendOnly, opts_.rq_psn, 0x00fff0), {1, 2, 3, 4});
  out = sent();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], opts_.rq_psn, kNakInvalidRequest, 0);
}

// Expect: with no receive posted on the named SRQ the target answers RNR (XRC NAK), and serves
// the request again once one is there.
TEST_F(XrcTest, EmptySrqIsReceiverNotReady) {
  Srq* srq = make_xrc_srq();
  make_target();
  deliver(request(op::kSendOnly, opts_.rq_psn, srq->id()), {1, 2, 3, 4});
  auto out = sent();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), xrc(op::kAcknowledge));
  EXPECT_EQ(out[0].ext().aeth.kind(), AethKind::rnr_nak);
  auto buf = reg(64);
  ASSERT_EQ(engine().post_srq_recv(srq, recv_wr(5, buf->sge(0, 64))), 0);
  deliver(request(op::kSendOnly, opts_.rq_psn, srq->id()), {1, 2, 3, 4});
  out = sent();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], opts_.rq_psn, kAckNoCredit, 1);
  ASSERT_EQ(drain(rcq_).size(), 1u);
}

// Expect: WRITE, READ and FETCH_ADD through the target check the R_Key against the named SRQ's
// PD (A14: the XRC SRQ's PD guards the memory); the answers are XRC READ responses and an XRC
// atomic ACK. A region of another PD is a remote access error.
TEST_F(XrcTest, RdmaAndAtomicsUseTheSrqsPd) {
  Srq* srq = make_xrc_srq();
  make_target();
  auto mem = reg(4096);
  uint32_t psn = opts_.rq_psn;

  PacketHeaders w = request(op::kWriteOnly, psn, srq->id());
  w.ext.reth = {mem->va() + 16, mem->rkey(), 8};
  deliver(w, {1, 2, 3, 4, 5, 6, 7, 8});
  auto out = sent();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], psn, kAckNoCredit, 1);
  EXPECT_EQ(mem->bytes[16], 1);
  EXPECT_EQ(mem->bytes[23], 8);

  PacketHeaders r = request(op::kReadRequest, ++psn, srq->id());
  r.ext.reth = {mem->va() + 16, mem->rkey(), 8};
  deliver(r);
  out = sent();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), xrc(op::kReadResponseOnly));
  EXPECT_FALSE(out[0].has(kHdrXrceth));
  EXPECT_EQ(out[0].psn(), psn);
  EXPECT_EQ(out[0].payload(), (std::vector<uint8_t>{1, 2, 3, 4, 5, 6, 7, 8}));

  mem->set_u64(64, 41);
  PacketHeaders a = request(op::kFetchAdd, ++psn, srq->id());
  a.ext.atomic_eth = {mem->va() + 64, mem->rkey(), 1, 0};
  deliver(a);
  out = sent();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), xrc(op::kAtomicAcknowledge));
  EXPECT_EQ(out[0].ext().atomic_ack_eth.orig, 41u);
  EXPECT_EQ(mem->u64(64), 42u);

  // A second PD's region: the SRQ's PD does not reach it.
  uint32_t pd2 = 0;
  ASSERT_EQ(engine().alloc_pd(&pd2), 0);
  std::vector<uint8_t> other(64);
  Mr* mr2 = nullptr;
  ASSERT_EQ(engine().reg_mr(pd2, reinterpret_cast<uint64_t>(other.data()), other.size(), other.data(),
                            kAccessLocalWrite | kAccessRemoteWrite, &mr2),
            0);
  PacketHeaders w2 = request(op::kWriteOnly, ++psn, srq->id());
  w2.ext.reth = {reinterpret_cast<uint64_t>(other.data()), mr2->rkey, 4};
  deliver(w2, {9, 9, 9, 9});
  out = sent();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], psn, kNakRemoteAccess, 3);
  EXPECT_EQ(other[0], 0);
  ASSERT_EQ(engine().dereg_mr(mr2->lkey), 0);
}

// Expect: an XRC SRQ needs a CQ; its CQ cannot be destroyed under it; destroying the SRQ a
// target served lets the target go (no EBUSY), and the next request naming it is refused.
TEST_F(XrcTest, SrqLifetime) {
  Srq* s = nullptr;
  EXPECT_EQ(engine().create_srq(pd_, 16, 1, &s, kDomain, nullptr), -EINVAL);
  Srq* srq = make_xrc_srq();
  EXPECT_EQ(engine().destroy_cq(rcq_), -EBUSY);
  const uint32_t tgt = make_target();
  auto buf = reg(64);
  ASSERT_EQ(engine().post_srq_recv(srq, recv_wr(1, buf->sge(0, 64))), 0);
  const uint32_t num = srq->id();
  deliver(request(op::kSendOnly, opts_.rq_psn, num), {1, 2, 3, 4});
  ASSERT_EQ(drain(rcq_).size(), 1u);
  sent();
  EXPECT_EQ(engine().destroy_srq(srq), 0);
  EXPECT_EQ(engine().srq_by_num(num), nullptr);
  deliver(request(op::kSendOnly, opts_.rq_psn + 1, num), {1, 2, 3, 4});
  auto out = sent();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], opts_.rq_psn + 1, kNakInvalidRequest, 1);
  EXPECT_EQ(state(tgt), QpState::err);
  // A target needs its domain; it takes no SRQ.
  QpInit init;
  init.type = QpType::xrc_recv;
  uint32_t qpn = 0;
  EXPECT_EQ(engine().create_qp(init, &qpn), -EINVAL);
  EXPECT_EQ(engine().destroy_qp(tgt), 0);
}

}  // namespace
}  // namespace droce::test
