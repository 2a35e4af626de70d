// Protocol tests, one role at a time (eRPC's style): the test plays the remote
// peer, feeds one crafted frame (or one burst) to the engine, and checks the
// frames the engine sent and the completions it made, step by step. Time is
// virtual. What each step expects is what IBA Vol. 1 ch. 9-10 and rxe do on
// the wire (../shared/REFERENCES.md), not what the engine happens to do.

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <string>

#include "tests/rocev2/protocol_harness.h"

namespace droce::test {
namespace {

constexpr uint32_t kS = 0x1000;  // our requester's first PSN (QpOptions::sq_psn)
constexpr uint32_t kE = 0x5000;  // the first PSN our responder expects (QpOptions::rq_psn)
constexpr uint32_t kPeerQpn = 0x0abcde;

constexpr uint8_t kAckSyndrome = 0x1f;  // ACK, no credit limit
constexpr uint8_t kNakPsnSeq = 0x60;
constexpr uint8_t kNakInvalidRequest = 0x61;
constexpr uint8_t kNakRemoteAccess = 0x62;
constexpr uint8_t kNakRemoteOperational = 0x63;
constexpr uint8_t rnr_nak(uint8_t code) { return static_cast<uint8_t>(0x20 | code); }

constexpr uint8_t rc(uint8_t operation) { return make_opcode(Transport::rc, operation); }
constexpr uint8_t uc(uint8_t operation) { return make_opcode(Transport::uc, operation); }

uint32_t psn(uint32_t base, uint32_t k) { return psn_add(base, k); }

std::vector<uint8_t> slice(const std::vector<uint8_t>& v, size_t off, size_t len) {
  return {v.begin() + static_cast<ptrdiff_t>(off), v.begin() + static_cast<ptrdiff_t>(off + len)};
}

// =====================================================================================
// Responder
// =====================================================================================

class ResponderTest : public ProtocolTest {
 protected:
  // A request at `at_psn` that breaks a rule: expect exactly one NAK with `syndrome`
  // for that PSN, the QP in ERR and the receives still posted flushed in order.
  // With `exact_flush` false a receive may instead complete with another error
  // (rxe binds the receive before it checks lengths, and completes it REM_INV_REQ_ERR).
  void expect_fatal_nak(uint32_t qpn, uint32_t at_psn, uint8_t syndrome, uint32_t msn,
                        std::vector<uint64_t> flushed, bool exact_flush = true) {
    auto out = sent();
    ASSERT_EQ(out.size(), 1u);
    expect_ack(out[0], at_psn, syndrome, msn);
    EXPECT_EQ(state(qpn), QpState::err);
    auto wc = drain(rcq_);
    ASSERT_EQ(wc.size(), flushed.size());
    for (size_t i = 0; i < wc.size(); ++i) {
      EXPECT_EQ(wc[i].wr_id, flushed[i]);
      if (exact_flush) {
        EXPECT_EQ(wc[i].status, WcStatus::wr_flush_err) << to_string(wc[i].status);
      } else {
        EXPECT_NE(wc[i].status, WcStatus::success);
      }
      EXPECT_EQ(wc[i].qp_num, qpn);
    }
  }

  // The R_Key cases: one good SEND (MSN becomes 1), then a WRITE at kE+1 that
  // the responder must refuse with NAK remote access error.
  // A dma_len beyond one MTU sends only the WRITE FIRST: the RETH covers the
  // whole message, so the check covers it too.
  void rkey_violation(uint32_t qpn, uint64_t va, uint32_t rkey, const std::shared_ptr<Buf>& target,
                      uint32_t dma_len = 200) {
    auto rbuf = reg(256);
    for (uint64_t id : {10, 11, 12}) ASSERT_EQ(engine().post_recv(qpn, recv_wr(id, rbuf->sge(0, 256))), 0);
    deliver(peer(op::kSendOnly, kE, true), pattern(16, 1));
    auto out = sent();
    ASSERT_EQ(out.size(), 1u);
    expect_ack(out[0], kE, kAckSyndrome, 1);
    ASSERT_EQ(drain(rcq_).size(), 1u);

    // Step: a WRITE the QP or the key does not allow.
    const bool only = dma_len <= 1024;
    PacketHeaders h = peer(only ? op::kWriteOnly : op::kWriteFirst, psn(kE, 1), only);
    h.ext.reth = {va, rkey, dma_len};
    deliver(h, pattern(only ? dma_len : 1024, 2));
    // Expect: NAK remote access error (0x62) for the WRITE's PSN, MSN 1; the QP in
    // ERR; receives 11 and 12 flushed in order; the memory untouched.
    expect_fatal_nak(qpn, psn(kE, 1), kNakRemoteAccess, 1, {11, 12});
    EXPECT_EQ(target->bytes, std::vector<uint8_t>(target->bytes.size(), 0));
    // Expect: the access error is reported as an async event on this QP.
    bool event = false;
    for (const AsyncEvent& e : engine().events()) event |= e.type == AsyncEventType::qp_access_err && e.id == qpn;
    EXPECT_TRUE(event);

    // Step: the peer goes on; a QP in ERR answers nothing.
    deliver(peer(op::kSendOnly, psn(kE, 2), true), pattern(16, 3));
    // Expect: silence, and the drop counted.
    EXPECT_TRUE(sent().empty());
    EXPECT_GE(engine().counters().rx_wrong_state, 1u);
  }
};

TEST_F(ResponderTest, ExpectedPsnIsAcceptedAndAcked) {
  const uint32_t qpn = make_qp();
  auto buf = reg(4 * 4096);
  for (uint64_t id : {1, 2}) ASSERT_EQ(engine().post_recv(qpn, recv_wr(id, buf->sge(4096 * (id - 1), 4096))), 0);

  // Step: SEND ONLY at the expected PSN, AckReq set.
  const auto one = pattern(100, 1);
  deliver(peer(op::kSendOnly, kE, true), one);
  // Expect: one ACK for that PSN, syndrome 0x1F, MSN 1 (one message done).
  auto out = sent();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kE, kAckSyndrome, 1);
  EXPECT_FALSE(out[0].bth().ackreq);
  EXPECT_EQ(engine().counters().tx_acks, 1u) << "droced tells ACK-only traffic by it (AckHold)";
  // Expect: one receive completion with the bytes.
  auto wc = drain(rcq_);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 1u);
  EXPECT_EQ(wc[0].status, WcStatus::success);
  EXPECT_EQ(wc[0].opcode, WcOpcode::recv);
  EXPECT_EQ(wc[0].byte_len, 100u);
  EXPECT_EQ(wc[0].qp_num, qpn);
  EXPECT_EQ(wc[0].src_qp, kPeerQpn);
  EXPECT_EQ(slice(buf->bytes, 0, 100), one);
  EXPECT_EQ(epsn(qpn), psn(kE, 1));

  // Step: a three-packet SEND, AckReq on the last packet only.
  const auto msg = pattern(2548, 2);
  deliver({{peer(op::kSendFirst, psn(kE, 1)), slice(msg, 0, 1024)},
           {peer(op::kSendMiddle, psn(kE, 2)), slice(msg, 1024, 1024)},
           {peer(op::kSendLast, psn(kE, 3), true), slice(msg, 2048, 500)}});
  // Expect: an ACK for the last PSN with MSN 2: MSN counts messages, not packets.
  out = sent();
  ASSERT_GE(out.size(), 1u);
  expect_ack(out.back(), psn(kE, 3), kAckSyndrome, 2);
  wc = drain(rcq_);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 2u);
  EXPECT_EQ(wc[0].byte_len, 2548u);
  EXPECT_EQ(slice(buf->bytes, 4096, 2548), msg);
  EXPECT_EQ(epsn(qpn), psn(kE, 4));
  EXPECT_EQ(engine().counters().tx_acks, out.size() + 1);
}

TEST_F(ResponderTest, DuplicateSendAndWriteAreAckedAgainNotDeliveredTwice) {
  const uint32_t qpn = make_qp();
  auto buf = reg(4096);
  auto target = reg(4096);
  for (uint64_t id : {1, 2, 3}) ASSERT_EQ(engine().post_recv(qpn, recv_wr(id, buf->sge(0, 4096))), 0);

  // Step: SEND ONLY at kE.
  PacketHeaders send = peer(op::kSendOnly, kE, true);
  deliver(send, pattern(64, 1));
  auto out = sent();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kE, kAckSyndrome, 1);
  ASSERT_EQ(drain(rcq_).size(), 1u);

  // Step: the same SEND again (its ACK was lost).
  deliver(send, pattern(64, 1));
  // Expect: acknowledged again (C9-105: for the newest PSN, kE), MSN still 1; no second receive.
  out = sent();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kE, kAckSyndrome, 1);
  EXPECT_TRUE(drain(rcq_).empty());
  EXPECT_EQ(qp_counters(qpn).duplicate_requests, 1u);

  // Step: WRITE ONLY with immediate at kE+1 (it consumes a receive).
  PacketHeaders write = peer(op::kWriteOnlyImm, psn(kE, 1), true);
  write.ext.reth = {target->va(), target->rkey(), 32};
  write.ext.imm = {0xabad1dea};
  deliver(write, pattern(32, 2));
  out = sent();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], psn(kE, 1), kAckSyndrome, 2);
  auto wc = drain(rcq_);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].opcode, WcOpcode::recv_rdma_with_imm);
  EXPECT_EQ(wc[0].wr_id, 2u);

  // Step: the same WRITE again.
  deliver(write, pattern(32, 2));
  // Expect: ACKed again for kE+1 with MSN 2; no second receive completion.
  out = sent();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], psn(kE, 1), kAckSyndrome, 2);
  EXPECT_TRUE(drain(rcq_).empty());
  EXPECT_EQ(qp_counters(qpn).duplicate_requests, 2u);
  // Expect: the expected PSN did not move; the next new request is served normally.
  EXPECT_EQ(epsn(qpn), psn(kE, 2));
  deliver(peer(op::kSendOnly, psn(kE, 2), true), pattern(8, 3));
  out = sent();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], psn(kE, 2), kAckSyndrome, 3);
  wc = drain(rcq_);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 3u);
}

TEST_F(ResponderTest, OutOfSequenceGetsOneSequenceNakThenGoBackN) {
  const uint32_t qpn = make_qp();
  auto buf = reg(4096);
  for (uint64_t id = 1; id <= 4; ++id) ASSERT_EQ(engine().post_recv(qpn, recv_wr(id, buf->sge(0, 4096))), 0);

  // Step: kE is lost; kE+1..kE+3 arrive in one burst, each asking for an ACK.
  deliver({{peer(op::kSendOnly, psn(kE, 1), true), pattern(10, 1)},
           {peer(op::kSendOnly, psn(kE, 2), true), pattern(20, 2)},
           {peer(op::kSendOnly, psn(kE, 3), true), pattern(30, 3)}});
  // Expect: exactly one NAK, PSN sequence error (0x60), for the expected PSN kE, MSN 0.
  auto out = sent();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kE, kNakPsnSeq, 0);
  EXPECT_TRUE(drain(rcq_).empty());
  EXPECT_EQ(qp_counters(qpn).seq_naks_sent, 1u);
  EXPECT_EQ(epsn(qpn), kE);

  // Step: one more later packet, in a burst of its own.
  deliver(peer(op::kSendOnly, psn(kE, 4), true), pattern(40, 4));
  // Expect: dropped in silence: one NAK per gap.
  EXPECT_TRUE(sent().empty());
  EXPECT_EQ(qp_counters(qpn).seq_naks_sent, 1u);

  // Step: the requester goes back to kE and sends kE..kE+3 again.
  deliver({{peer(op::kSendOnly, kE, true), pattern(5, 0)},
           {peer(op::kSendOnly, psn(kE, 1), true), pattern(10, 1)},
           {peer(op::kSendOnly, psn(kE, 2), true), pattern(20, 2)},
           {peer(op::kSendOnly, psn(kE, 3), true), pattern(30, 3)}});
  // Expect: normal service: only ACKs (no NAK), the newest for kE+3 with MSN 4.
  out = sent();
  ASSERT_GE(out.size(), 1u);
  for (const Sent& s : out) EXPECT_EQ(s.ext().aeth.syndrome, kAckSyndrome);
  expect_ack(out.back(), psn(kE, 3), kAckSyndrome, 4);
  // Expect: four receives, in order, each with its own length.
  auto wc = drain(rcq_);
  ASSERT_EQ(wc.size(), 4u);
  const uint32_t lens[] = {5, 10, 20, 30};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(wc[i].wr_id, i + 1);
    EXPECT_EQ(wc[i].status, WcStatus::success);
    EXPECT_EQ(wc[i].byte_len, lens[i]);
  }
  EXPECT_EQ(epsn(qpn), psn(kE, 4));
}

TEST_F(ResponderTest, PsnWrapsFromFFFFFFToZero) {
  QpOptions o;
  o.rq_psn = 0xfffffe;
  const uint32_t qpn = make_qp(o);
  auto buf = reg(4096);
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_EQ(engine().post_recv(qpn, recv_wr(id, buf->sge(0, 4096))), 0);

  uint32_t msn = 0;
  for (uint32_t p : {0xfffffeu, 0xffffffu, 0x000000u}) {
    SCOPED_TRACE("psn " + std::to_string(p));
    // Step: SEND ONLY at PSN p, AckReq set.
    deliver(peer(op::kSendOnly, p, true), pattern(16, p));
    // Expect: accepted in order: an ACK for p, the MSN one higher.
    auto out = sent();
    ASSERT_EQ(out.size(), 1u);
    expect_ack(out[0], p, kAckSyndrome, ++msn);
    EXPECT_EQ(drain(rcq_).size(), 1u);
  }
  EXPECT_EQ(epsn(qpn), 1u);

  // Step: 0xFFFFFF again, now behind the wrap.
  deliver(peer(op::kSendOnly, 0xffffff, true), pattern(16, 0xffffff));
  // Expect: a duplicate (not out of sequence): ACKed again for the newest PSN, 0.
  auto out = sent();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], 0, kAckSyndrome, 3);
  EXPECT_TRUE(drain(rcq_).empty());
}

TEST_F(ResponderTest, RnrNakWithoutReceiveThenSamePsnAccepted) {
  QpOptions o;
  o.min_rnr_timer = 14;  // 1.28 ms
  const uint32_t qpn = make_qp(o);
  auto buf = reg(4096);

  // Step: SEND ONLY at kE with no receive posted.
  deliver(peer(op::kSendOnly, kE, true), pattern(100, 1));
  // Expect: an RNR NAK carrying our min_rnr_timer (0x20 | 14), PSN kE, MSN 0.
  auto out = sent();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kE, rnr_nak(14), 0);
  // Expect: the PSN is not consumed, nothing completes, the QP stays up.
  EXPECT_EQ(epsn(qpn), kE);
  EXPECT_TRUE(drain(rcq_).empty());
  EXPECT_EQ(state(qpn), QpState::rts);
  EXPECT_EQ(qp_counters(qpn).rnr_naks_sent, 1u);

  // Step: the application posts a receive; the requester sends kE again.
  ASSERT_EQ(engine().post_recv(qpn, recv_wr(7, buf->sge(0, 4096))), 0);
  deliver(peer(op::kSendOnly, kE, true), pattern(100, 1));
  // Expect: accepted: ACK for kE with MSN 1, the receive completes.
  out = sent();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kE, kAckSyndrome, 1);
  auto wc = drain(rcq_);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 7u);
  EXPECT_EQ(wc[0].byte_len, 100u);
  EXPECT_EQ(slice(buf->bytes, 0, 100), pattern(100, 1));
}

TEST_F(ResponderTest, RKeyViolationBadKey) {
  const uint32_t qpn = make_qp();
  auto target = reg(4096);
  rkey_violation(qpn, target->va(), target->rkey() ^ 0x80, target);  // another key byte: stale or forged
}

TEST_F(ResponderTest, RKeyViolationOutOfBounds) {
  const uint32_t qpn = make_qp();
  auto target = reg(4096);
  rkey_violation(qpn, target->va() + 4000, target->rkey(), target);  // 200 bytes from 4000: past the end
}

TEST_F(ResponderTest, RKeyViolationMessageEndsOutOfBounds) {
  const uint32_t qpn = make_qp();
  auto target = reg(4096);
  // A 2048-byte WRITE at 3000: its first packet fits, the message does not.
  rkey_violation(qpn, target->va() + 3000, target->rkey(), target, 2048);
}

TEST_F(ResponderTest, RKeyViolationMrWithoutRemoteWrite) {
  const uint32_t qpn = make_qp();
  auto target = reg(4096, kAccessLocalWrite | kAccessRemoteRead);
  rkey_violation(qpn, target->va(), target->rkey(), target);
}

TEST_F(ResponderTest, RKeyViolationQpWithoutRemoteWrite) {
  QpOptions o;
  o.access = kAccessLocalWrite | kAccessRemoteRead;
  const uint32_t qpn = make_qp(o);
  auto target = reg(4096);
  rkey_violation(qpn, target->va(), target->rkey(), target);
}

TEST_F(ResponderTest, InvalidRequestMiddleWithNothingInProgress) {
  const uint32_t qpn = make_qp();
  auto buf = reg(4096);
  ASSERT_EQ(engine().post_recv(qpn, recv_wr(1, buf->sge(0, 4096))), 0);
  // Step: SEND MIDDLE at the expected PSN, but no SEND was started.
  deliver(peer(op::kSendMiddle, kE), pattern(1024, 1));
  // Expect: NAK invalid request (0x61) for kE; QP in ERR; the receive flushed.
  expect_fatal_nak(qpn, kE, kNakInvalidRequest, 0, {1}, false);

  // Step: on a new QP, an empty SEND LAST with nothing in progress (no other
  // rule than the opcode sequence refuses this one).
  const uint32_t qpn2 = make_qp();
  ASSERT_EQ(engine().post_recv(qpn2, recv_wr(2, buf->sge(0, 4096))), 0);
  deliver(peer(op::kSendLast, kE, true));
  // Expect: NAK invalid request for kE; no receive completes successfully.
  expect_fatal_nak(qpn2, kE, kNakInvalidRequest, 0, {2}, false);
}

TEST_F(ResponderTest, InvalidRequestFirstPacketShorterThanMtu) {
  const uint32_t qpn = make_qp();
  auto buf = reg(4096);
  ASSERT_EQ(engine().post_recv(qpn, recv_wr(1, buf->sge(0, 4096))), 0);
  // Step: SEND FIRST with 100 bytes on a 1024-byte path MTU.
  deliver(peer(op::kSendFirst, kE), pattern(100, 1));
  // Expect: NAK invalid request (first and middle packets carry exactly the MTU);
  // QP in ERR; the receive completes once, in error.
  expect_fatal_nak(qpn, kE, kNakInvalidRequest, 0, {1}, false);
}

TEST_F(ResponderTest, InvalidRequestWritePayloadBeyondRethLength) {
  const uint32_t qpn = make_qp();
  auto target = reg(4096);
  // Step: WRITE ONLY whose RETH says 16 bytes, carrying 32.
  PacketHeaders h = peer(op::kWriteOnly, kE, true);
  h.ext.reth = {target->va(), target->rkey(), 16};
  deliver(h, pattern(32, 1));
  // Expect: NAK invalid request for kE; QP in ERR; the 16 bytes beyond the RETH not written.
  expect_fatal_nak(qpn, kE, kNakInvalidRequest, 0, {});
  EXPECT_EQ(slice(target->bytes, 16, 16), std::vector<uint8_t>(16, 0));
}

TEST_F(ResponderTest, InvalidRequestMisalignedAtomic) {
  const uint32_t qpn = make_qp();
  auto target = reg(64);
  target->set_u64(8, 100);
  // Step: FETCH_ADD at an address that is not 8-byte aligned.
  PacketHeaders h = peer(op::kFetchAdd, kE, true);
  h.ext.atomic_eth = {target->va() + 12, target->rkey(), 1, 0};
  deliver(h);
  // Expect: NAK invalid request (0x61), QP in ERR, memory unchanged.
  expect_fatal_nak(qpn, kE, kNakInvalidRequest, 0, {});
  EXPECT_EQ(target->u64(8), 100u);
  EXPECT_EQ(target->u64(16), 0u);
}

TEST_F(ResponderTest, ReadAnsweredWithFirstMiddleLastFromMemory) {
  const uint32_t qpn = make_qp();
  auto mem = reg(4096);
  mem->fill(pattern(4096, 9));

  // Step: READ request at kE for 2600 bytes from offset 100.
  PacketHeaders h = peer(op::kReadRequest, kE, true);
  h.ext.reth = {mem->va() + 100, mem->rkey(), 2600};
  deliver(h);
  // Expect: READ RESPONSE FIRST, MIDDLE, LAST with PSNs kE, kE+1, kE+2 (one PSN per
  // response packet); AETH (ACK, MSN 1) on first and last only; the memory's bytes.
  auto out = sent();
  ASSERT_EQ(out.size(), 3u);
  const uint8_t ops[] = {rc(op::kReadResponseFirst), rc(op::kReadResponseMiddle), rc(op::kReadResponseLast)};
  const uint32_t lens[] = {1024, 1024, 552};
  uint32_t off = 100;
  for (size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE("response " + std::to_string(i));
    expect_to_peer(out[i]);
    EXPECT_EQ(out[i].opcode(), ops[i]);
    EXPECT_EQ(out[i].psn(), psn(kE, uint32_t(i)));
    EXPECT_EQ(out[i].has(kHdrAeth), i != 1);
    if (i != 1) {
      EXPECT_EQ(out[i].ext().aeth.syndrome, kAckSyndrome);
      EXPECT_EQ(out[i].ext().aeth.msn, 1u);
    }
    EXPECT_EQ(out[i].payload(), slice(mem->bytes, off, lens[i]));
    off += lens[i];
  }
  // Expect: the READ used three PSNs.
  EXPECT_EQ(epsn(qpn), psn(kE, 3));

  // Step: an 8-byte READ at kE+3.
  h = peer(op::kReadRequest, psn(kE, 3), true);
  h.ext.reth = {mem->va(), mem->rkey(), 8};
  deliver(h);
  // Expect: one READ RESPONSE ONLY, AETH with MSN 2.
  out = sent();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), rc(op::kReadResponseOnly));
  EXPECT_EQ(out[0].psn(), psn(kE, 3));
  EXPECT_EQ(out[0].ext().aeth.msn, 2u);
  EXPECT_EQ(out[0].payload(), slice(mem->bytes, 0, 8));
  EXPECT_EQ(engine().counters().tx_acks, 0u) << "READ responses carry an AETH but are no acknowledgements";
}

TEST_F(ResponderTest, DuplicateReadOutsideTheSavedRangeIsNotReplayed) {
  const uint32_t qpn = make_qp();
  auto mem = reg(8192);
  mem->fill(pattern(8192, 11));
  PacketHeaders read = peer(op::kReadRequest, kE, true);
  read.ext.reth = {mem->va(), mem->rkey(), 2600};
  deliver(read);
  ASSERT_EQ(sent().size(), 3u);
  // Step: a "duplicate" at kE+1 asking for bytes the original READ never covered.
  PacketHeaders beyond = peer(op::kReadRequest, psn(kE, 1), true);
  beyond.ext.reth = {mem->va() + 4096, mem->rkey(), 2048};
  deliver(beyond);
  // Expect: nothing sent, nothing replayed, counted as dropped.
  EXPECT_TRUE(sent().empty());
  EXPECT_EQ(qp_counters(qpn).read_replays, 0u);
  EXPECT_EQ(qp_counters(qpn).dropped, 1u);
  // Step: a duplicate with another R_Key.
  PacketHeaders other_key = peer(op::kReadRequest, kE, true);
  other_key.ext.reth = {mem->va(), mem->rkey() ^ 0x80, 2600};
  deliver(other_key);
  EXPECT_TRUE(sent().empty());
  EXPECT_EQ(qp_counters(qpn).dropped, 2u);
  EXPECT_EQ(epsn(qpn), psn(kE, 3));
}

TEST_F(ResponderTest, DuplicateReadIsReplayedFromSavedState) {
  const uint32_t qpn = make_qp();
  auto mem = reg(4096);
  mem->fill(pattern(4096, 10));
  PacketHeaders read = peer(op::kReadRequest, kE, true);
  read.ext.reth = {mem->va(), mem->rkey(), 2600};
  deliver(read);
  ASSERT_EQ(sent().size(), 3u);

  // Step: the same READ again (its responses were lost).
  deliver(read);
  // Expect: the three responses again, same PSNs, opcodes and bytes; counted as a replay.
  auto out = sent();
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].opcode(), rc(op::kReadResponseFirst));
  EXPECT_EQ(out[1].opcode(), rc(op::kReadResponseMiddle));
  EXPECT_EQ(out[2].opcode(), rc(op::kReadResponseLast));
  for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(out[i].psn(), psn(kE, i));
  EXPECT_EQ(out[0].payload(), slice(mem->bytes, 0, 1024));
  EXPECT_EQ(out[2].payload(), slice(mem->bytes, 2048, 552));
  EXPECT_EQ(qp_counters(qpn).read_replays, 1u);
  EXPECT_EQ(epsn(qpn), psn(kE, 3));

  // Step: the requester got the first response only and asks again from kE+1,
  // the RETH advanced by one MTU.
  PacketHeaders again = peer(op::kReadRequest, psn(kE, 1), true);
  again.ext.reth = {mem->va() + 1024, mem->rkey(), 2600 - 1024};
  deliver(again);
  // Expect: responses from kE+1 on: kE+1 (1024 bytes from offset 1024) and
  // kE+2 (READ RESPONSE LAST, AETH, the last 552 bytes). The first one is
  // MIDDLE as rxe sends it, or FIRST (a retried READ may restart either way).
  out = sent();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(out[0].opcode() == rc(op::kReadResponseMiddle) || out[0].opcode() == rc(op::kReadResponseFirst))
      << int(out[0].opcode());
  EXPECT_EQ(out[0].psn(), psn(kE, 1));
  EXPECT_EQ(out[0].payload(), slice(mem->bytes, 1024, 1024));
  EXPECT_EQ(out[1].opcode(), rc(op::kReadResponseLast));
  EXPECT_EQ(out[1].psn(), psn(kE, 2));
  EXPECT_TRUE(out[1].has(kHdrAeth));
  EXPECT_EQ(out[1].payload(), slice(mem->bytes, 2048, 552));
  EXPECT_EQ(qp_counters(qpn).read_replays, 2u);
  EXPECT_EQ(epsn(qpn), psn(kE, 3));
}

// Responses leave in PSN order (IBA 9.7.5.1): an acknowledgement for a PSN
// says everything up to it has been answered, so it must not overtake the
// READ responses for earlier PSNs, even when a duplicate asks for it while a
// long READ is still being answered.
TEST_F(ResponderTest, DuplicateDuringLongReadDoesNotAckAheadOfReadResponses) {
  QpOptions o;
  o.mtu = PathMtu::mtu256;
  const uint32_t qpn = make_qp(o);
  auto rbuf = reg(4096);
  ASSERT_EQ(engine().post_recv(qpn, recv_wr(1, rbuf->sge(0, 4096))), 0);
  constexpr uint32_t kPackets = 300;  // more than one poll's TX budget (256)
  auto mem = reg(kPackets * 256);
  mem->fill(pattern(kPackets * 256, 12));

  // Step: SEND ONLY at kE, acknowledged.
  PacketHeaders send = peer(op::kSendOnly, kE, true);
  deliver(send, pattern(16, 1));
  ASSERT_EQ(sent().size(), 1u);

  // Step: in one burst, a 300-packet READ at kE+1 and the SEND at kE again (a duplicate).
  PacketHeaders read = peer(op::kReadRequest, psn(kE, 1), true);
  read.ext.reth = {mem->va(), mem->rkey(), kPackets * 256};
  deliver({{read, {}}, {send, pattern(16, 1)}});
  for (int i = 0; i < 4; ++i) at(now_ + 1000);
  // Expect: all 300 READ responses, kE+1..kE+300, in order; any ACK for a PSN
  // comes after every READ response up to that PSN.
  auto out = sent();
  uint32_t responses = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i].opcode() == rc(op::kAcknowledge)) {
      EXPECT_LE(psn_diff(out[i].psn(), psn(kE, responses)), 0)
          << "frame " << i << ": ACK for PSN " << out[i].psn() - kE << " (relative) after only " << responses
          << " of " << kPackets << " READ responses";
      continue;
    }
    EXPECT_EQ(out[i].psn(), psn(kE, 1 + responses)) << "frame " << i;
    ++responses;
  }
  EXPECT_EQ(responses, kPackets);
}

// A QP given no responder resources (max_dest_rd_atomic 0) cannot take a READ
// or an atomic: that is an invalid request (responder class C), as rxe answers too.
TEST_F(ResponderTest, ReadWithoutResponderResourcesNaksInvalidRequest) {
  QpOptions o;
  o.max_dest_rd_atomic = 0;
  const uint32_t qpn = make_qp(o);
  auto mem = reg(4096);
  // Step: READ request at kE.
  PacketHeaders h = peer(op::kReadRequest, kE, true);
  h.ext.reth = {mem->va(), mem->rkey(), 64};
  deliver(h);
  // Expect: no READ response; NAK invalid request for kE; QP in ERR.
  expect_fatal_nak(qpn, kE, kNakInvalidRequest, 0, {});
}

TEST_F(ResponderTest, FetchAddExecutesOnceAndDuplicateGetsOriginalValue) {
  const uint32_t qpn = make_qp();
  auto mem = reg(64);
  mem->set_u64(8, 100);
  PacketHeaders fa = peer(op::kFetchAdd, kE, true);
  fa.ext.atomic_eth = {mem->va() + 8, mem->rkey(), 5, 0};

  // Step: FETCH_ADD +5 at kE.
  deliver(fa);
  // Expect: one ATOMIC ACKNOWLEDGE for kE: AETH ACK with MSN 1, original value 100; memory 105.
  auto out = sent();
  ASSERT_EQ(out.size(), 1u);
  expect_to_peer(out[0]);
  EXPECT_EQ(out[0].opcode(), rc(op::kAtomicAcknowledge));
  EXPECT_EQ(out[0].psn(), kE);
  EXPECT_EQ(out[0].ext().aeth.syndrome, kAckSyndrome);
  EXPECT_EQ(out[0].ext().aeth.msn, 1u);
  EXPECT_EQ(out[0].ext().atomic_ack_eth.orig, 100u);
  EXPECT_EQ(mem->u64(8), 105u);

  // Step: the same FETCH_ADD again (its ATOMIC ACK was lost).
  deliver(fa);
  // Expect: the same ATOMIC ACK (original value 100, not 105); memory NOT added to again.
  out = sent();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), rc(op::kAtomicAcknowledge));
  EXPECT_EQ(out[0].psn(), kE);
  EXPECT_EQ(out[0].ext().atomic_ack_eth.orig, 100u);
  EXPECT_EQ(out[0].ext().aeth.msn, 1u);
  EXPECT_EQ(mem->u64(8), 105u);
  EXPECT_EQ(qp_counters(qpn).atomic_replays, 1u);

  // Step: a new FETCH_ADD +1 at kE+1.
  fa = peer(op::kFetchAdd, psn(kE, 1), true);
  fa.ext.atomic_eth = {mem->va() + 8, mem->rkey(), 1, 0};
  deliver(fa);
  // Expect: executed: original 105, memory 106, MSN 2.
  out = sent();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].psn(), psn(kE, 1));
  EXPECT_EQ(out[0].ext().atomic_ack_eth.orig, 105u);
  EXPECT_EQ(out[0].ext().aeth.msn, 2u);
  EXPECT_EQ(mem->u64(8), 106u);
}

TEST_F(ResponderTest, CompareSwapMatchAndMismatch) {
  make_qp();
  auto mem = reg(64);
  mem->set_u64(16, 42);

  // Step: COMPARE_SWAP compare 42, swap 7: matches.
  PacketHeaders cs = peer(op::kCompareSwap, kE, true);
  cs.ext.atomic_eth = {mem->va() + 16, mem->rkey(), 7, 42};
  deliver(cs);
  // Expect: ATOMIC ACK with the original 42; memory swapped to 7.
  auto out = sent();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), rc(op::kAtomicAcknowledge));
  EXPECT_EQ(out[0].psn(), kE);
  EXPECT_EQ(out[0].ext().atomic_ack_eth.orig, 42u);
  EXPECT_EQ(mem->u64(16), 7u);

  // Step: COMPARE_SWAP compare 42, swap 9: no longer matches.
  cs = peer(op::kCompareSwap, psn(kE, 1), true);
  cs.ext.atomic_eth = {mem->va() + 16, mem->rkey(), 9, 42};
  deliver(cs);
  // Expect: ATOMIC ACK with the original 7; memory unchanged.
  out = sent();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].psn(), psn(kE, 1));
  EXPECT_EQ(out[0].ext().atomic_ack_eth.orig, 7u);
  EXPECT_EQ(mem->u64(16), 7u);
}

// =====================================================================================
// The responder's checks by name (rocev2/responder.h): which rule a request met
// =====================================================================================

// The names are what logs and traces print, and what a developer greps for: each is its
// enumerator's own name.
TEST(ResponderNames, ChecksAndVerdictsPrintTheirEnumeratorNames) {
  EXPECT_STREQ(to_string(ResponderVerdict::ok), "ok");
  EXPECT_STREQ(to_string(ResponderVerdict::done), "done");
  EXPECT_STREQ(to_string(ResponderVerdict::drop), "drop");
  EXPECT_STREQ(to_string(ResponderVerdict::hold), "hold");
  EXPECT_STREQ(to_string(ResponderVerdict::duplicate), "duplicate");
  EXPECT_STREQ(to_string(ResponderVerdict::nak_seq), "nak_seq");
  EXPECT_STREQ(to_string(ResponderVerdict::nak_rnr), "nak_rnr");
  EXPECT_STREQ(to_string(ResponderVerdict::nak_inv_req), "nak_inv_req");
  EXPECT_STREQ(to_string(ResponderVerdict::nak_rem_acc), "nak_rem_acc");
  EXPECT_STREQ(to_string(ResponderVerdict::nak_rem_op), "nak_rem_op");
  EXPECT_STREQ(to_string(ResponderCheck::state), "state");
  EXPECT_STREQ(to_string(ResponderCheck::psn), "psn");
  EXPECT_STREQ(to_string(ResponderCheck::op_seq), "op_seq");
  EXPECT_STREQ(to_string(ResponderCheck::rkey), "rkey");
  EXPECT_STREQ(to_string(ResponderCheck::recv), "recv");
  EXPECT_STREQ(to_string(ResponderCheck::acknowledge), "acknowledge");
  // Expect: every check has a name and a rule, all names differ; past the end is "?".
  std::set<std::string> names;
  for (auto c = ResponderCheck::state; to_string(c) != std::string("?");
       c = static_cast<ResponderCheck>(static_cast<int>(c) + 1)) {
    EXPECT_TRUE(names.insert(to_string(c)).second) << to_string(c);
    EXPECT_GT(std::strlen(describe(c)), 10u) << to_string(c);
  }
  EXPECT_EQ(names.size(), 20u);  // atomic_write_length (IBA 1.5) the 19th, xrc_srq (XRC) the 20th
  EXPECT_STREQ(to_string(static_cast<ResponderVerdict>(200)), "?");
  EXPECT_STREQ(describe(static_cast<ResponderCheck>(200)), "?");
}

class ResponderTraceTest : public ResponderTest {
 protected:
  void SetUp() override {
    ResponderTest::SetUp();
    if (HasFatalFailure()) return;
    if (!kResponderTrace) {
      // Release builds: nothing is recorded (the recording compiles out).
      EXPECT_EQ(engine().responder_trace().size(), 0u);
      GTEST_SKIP() << "release build: the responder records no trace (kResponderTrace)";
    }
  }
  // "check: verdict" for every check the responder ran since the last call, oldest first.
  std::vector<std::string> verdicts() {
    std::vector<std::string> out;
    const ResponderTrace& t = engine().responder_trace();
    for (size_t i = 0; i < t.size(); ++i) {
      EXPECT_EQ(t[i].qpn, qpn_) << to_string(t[i]);
      out.push_back(std::string(to_string(t[i].check)) + ": " + to_string(t[i].verdict));
    }
    engine().clear_responder_trace();
    return out;
  }
  using V = std::vector<std::string>;
};

TEST_F(ResponderTraceTest, ThePsnRulesAreNamedInTheTrace) {
  const uint32_t qpn = make_qp();
  auto buf = reg(4096);
  ASSERT_EQ(engine().post_recv(qpn, recv_wr(1, buf->sge(0, 4096))), 0);

  // Step: SEND ONLY at kE+1: kE was lost.
  deliver(peer(op::kSendOnly, psn(kE, 1), true), pattern(8, 1));
  // Expect: it passed the state and reading checks and stopped at the PSN check with a sequence NAK,
  // which went out for kE.
  EXPECT_EQ(verdicts(), (V{"state: ok", "reading: ok", "psn: nak_seq"}));
  auto out = sent();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kE, kNakPsnSeq, 0);

  // Step: SEND ONLY at kE+2, still past the gap.
  deliver(peer(op::kSendOnly, psn(kE, 2), true), pattern(8, 2));
  // Expect: dropped at the PSN check (one NAK per gap), nothing sent.
  EXPECT_EQ(verdicts(), (V{"state: ok", "reading: ok", "psn: drop"}));
  EXPECT_TRUE(sent().empty());

  // Step: SEND ONLY at kE.
  deliver(peer(op::kSendOnly, kE, true), pattern(8, 0));
  // Expect: every check a SEND meets, in order, then executed and acknowledged.
  EXPECT_EQ(verdicts(), (V{"state: ok", "reading: ok", "psn: ok", "op_seq: ok", "length: ok", "resource: ok",
                           "op_valid: ok", "recv: ok", "execute: ok", "complete: ok", "acknowledge: done"}));
  out = sent();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kE, kAckSyndrome, 1);

  // Step: the same SEND again.
  deliver(peer(op::kSendOnly, kE, true), pattern(8, 0));
  // Expect: a duplicate at the PSN check, answered again (not executed) by the duplicate rule.
  EXPECT_EQ(verdicts(), (V{"state: ok", "reading: ok", "psn: duplicate", "duplicate: done"}));
  EXPECT_EQ(drain(rcq_).size(), 1u);  // the first SEND's receive only
}

TEST_F(ResponderTraceTest, AnRnrNakIsNamedAtTheReceiveCheck) {
  make_qp();
  // Step: SEND ONLY at kE with no receive posted.
  deliver(peer(op::kSendOnly, kE, true), pattern(8, 1));
  // Expect: stopped at the receive check with an RNR NAK, which went out.
  const V v = verdicts();
  ASSERT_FALSE(v.empty());
  EXPECT_EQ(v.back(), "recv: nak_rnr");
  auto out = sent();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kE, rnr_nak(opts_.min_rnr_timer), 0);
}

// A request held behind a streaming READ and NAKed fatally when it is replayed: the QP goes to
// error, which frees every held packet, and the replay had freed the same packet again and
// erased the held list past its end (under the sanitizer: negative-size-param). A peer could do
// it: a READ of more responses than one poll sends (256), then a WRITE with a bad R_Key.
TEST_F(ResponderTest, AHeldRequestNakedFatallyOnReplayIsFreedOnce) {
  QpOptions o;
  o.mtu = PathMtu::mtu256;
  const uint32_t qpn = make_qp(o);
  auto mem = reg(1 << 17);
  PacketHeaders rd = peer(op::kReadRequest, kE, true);
  rd.ext.reth = {mem->va(), mem->rkey(), 80000};  // 313 responses
  PacketHeaders wr = peer(op::kWriteOnly, psn_add(kE, (80000 + 255) / 256), true);
  wr.ext.reth = {mem->va(), mem->rkey() ^ 0x80, 16};
  deliver({{rd, {}}, {wr, pattern(16, 1)}});
  at(now_ + 1000);
  at(now_ + 2000);
  EXPECT_EQ(state(qpn), QpState::err);
}

TEST_F(ResponderTraceTest, ABadRkeyIsNamedAtTheRkeyCheck) {
  const uint32_t qpn = make_qp();
  auto target = reg(4096);
  // Step: WRITE ONLY with an R_Key that is not the region's.
  PacketHeaders h = peer(op::kWriteOnly, kE, true);
  h.ext.reth = {target->va(), target->rkey() ^ 0x80, 16};
  deliver(h, pattern(16, 1));
  // Expect: the WRITE passed the common checks, the DMA length and the QP's access flags, and
  // stopped at the R_Key check with NAK remote access error.
  EXPECT_EQ(verdicts(), (V{"state: ok", "reading: ok", "psn: ok", "op_seq: ok", "length: ok", "resource: ok",
                           "op_valid: ok", "dma_length: ok", "qp_access: ok", "rkey: nak_rem_acc"}));
  expect_fatal_nak(qpn, kE, kNakRemoteAccess, 0, {});
}

TEST_F(ResponderTraceTest, AMisalignedAtomicIsNamedAtTheAlignmentCheck) {
  const uint32_t qpn = make_qp();
  auto target = reg(64);
  // Step: FETCH_ADD at an address that is not 8-byte aligned.
  PacketHeaders h = peer(op::kFetchAdd, kE, true);
  h.ext.atomic_eth = {target->va() + 12, target->rkey(), 1, 0};
  deliver(h);
  // Expect: stopped at the alignment check, before the R_Key check; NAK invalid request.
  const V v = verdicts();
  ASSERT_GE(v.size(), 2u);
  EXPECT_EQ(v[v.size() - 2], "qp_access: ok");
  EXPECT_EQ(v.back(), "atomic_align: nak_inv_req");
  expect_fatal_nak(qpn, kE, kNakInvalidRequest, 0, {});
}

// =====================================================================================
// Requester and completer
// =====================================================================================

class RequesterTest : public ProtocolTest {
 protected:
  // Asserts `out` is exactly the packets of a SEND of `data` (1024-byte MTU) from
  // byte `offset` on, the first of them at `first_psn`.
  void expect_send_packets(const std::vector<Sent>& out, uint32_t first_psn, const std::vector<uint8_t>& data,
                           uint32_t offset = 0) {
    constexpr uint32_t kMtu = 1024;
    size_t i = 0;
    uint32_t p = first_psn;
    for (uint32_t off = offset; off < data.size(); off += kMtu, ++i, p = psn_add(p, 1)) {
      SCOPED_TRACE("packet at offset " + std::to_string(off));
      ASSERT_LT(i, out.size());
      const bool first = off == 0;
      const bool last = off + kMtu >= data.size();
      const uint8_t o = first && last ? op::kSendOnly : first ? op::kSendFirst : last ? op::kSendLast : op::kSendMiddle;
      EXPECT_EQ(out[i].opcode(), rc(o));
      EXPECT_EQ(out[i].psn(), p);
      EXPECT_EQ(out[i].bth().ackreq, last);
      EXPECT_EQ(out[i].payload(), slice(data, off, std::min<size_t>(kMtu, data.size() - off)));
      expect_to_peer(out[i]);
    }
    EXPECT_EQ(i, out.size());
  }

  void expect_completion(const Completion& c, uint64_t wr_id, WcStatus status, WcOpcode opcode) {
    EXPECT_EQ(c.wr_id, wr_id);
    EXPECT_EQ(c.status, status) << to_string(c.status);
    if (status == WcStatus::success) {
      EXPECT_EQ(c.opcode, opcode);
    }
  }

  // Three WRs at kS, kS+1, kS+2; the peer NAKs kS+1 with `syndrome`.
  void nak_completes_with(uint8_t syndrome, WcStatus status) {
    const uint32_t qpn = make_qp();
    auto src = reg(4096);
    SendWr w = send_wr(WrOpcode::rdma_write, 1, src->sge(0, 100));
    w.remote_addr = 0x7000;
    w.rkey = 0x1234;
    ASSERT_EQ(engine().post_send(qpn, w), 0);
    w.wr_id = 2;
    ASSERT_EQ(engine().post_send(qpn, w), 0);
    ASSERT_EQ(engine().post_send(qpn, send_wr(WrOpcode::send, 3, src->sge(0, 10))), 0);
    at(now_);
    ASSERT_EQ(sent().size(), 3u);

    // Step: the peer NAKs kS+1.
    now_ += 1000;
    deliver(ack(psn(kS, 1), syndrome, 1));
    // Expect: WR 1 (before the NAK's PSN) succeeds; WR 2 carries the error; WR 3
    // is flushed; the QP is in ERR and nothing is sent again.
    auto wc = drain(scq_);
    ASSERT_EQ(wc.size(), 3u);
    expect_completion(wc[0], 1, WcStatus::success, WcOpcode::rdma_write);
    expect_completion(wc[1], 2, status, WcOpcode::rdma_write);
    expect_completion(wc[2], 3, WcStatus::wr_flush_err, WcOpcode::send);
    EXPECT_EQ(state(qpn), QpState::err);
    at(now_ + 1'000'000'000);
    EXPECT_TRUE(sent().empty());
  }
};

TEST_F(RequesterTest, SendIsSplitByMtuWithConsecutivePsnsAndAckReqOnLast) {
  QpOptions o;
  o.sq_psn = 0xffffff;  // the PSNs wrap inside the message
  const uint32_t qpn = make_qp(o);
  auto src = reg(4096);
  src->fill(pattern(4096, 1));

  // Step: post a 2500-byte SEND; one poll.
  ASSERT_EQ(engine().post_send(qpn, send_wr(WrOpcode::send, 77, src->sge(0, 2500))), 0);
  at(now_);
  // Expect: SEND FIRST, MIDDLE, LAST at 0xFFFFFF, 0, 1: full MTUs then the rest,
  // AckReq on the last only, bytes in order, addressed to the peer's QP.
  auto out = sent();
  ASSERT_EQ(out.size(), 3u);
  expect_send_packets(out, 0xffffff, slice(src->bytes, 0, 2500));
  EXPECT_EQ(out[1].psn(), 0u);
  EXPECT_EQ(out[2].psn(), 1u);
  // Expect: nothing completes before an ACK.
  EXPECT_TRUE(drain(scq_).empty());
}

TEST_F(RequesterTest, EachQpNumbersItsIpv4PacketsOneUp) {
  // The packets a QP builds back to back carry IPv4 identifications one apart, as the kernel
  // numbers the segments it cuts from one UDP GSO frame (net/udp_gso.h): a packet-socket link
  // may send them as one. Each QP counts on its own (told apart here by their PSNs); a resent
  // packet takes the next number.
  QpOptions oa, ob;
  oa.sq_psn = 1000;
  ob.sq_psn = 5000;
  const uint32_t a = make_qp(oa);
  const uint32_t b = make_qp(ob);
  auto src = reg(8192);
  ASSERT_EQ(engine().post_send(a, send_wr(WrOpcode::send, 1, src->sge(0, 3000))), 0);
  ASSERT_EQ(engine().post_send(b, send_wr(WrOpcode::send, 2, src->sge(0, 2000))), 0);
  at(now_);
  auto ids_of = [](const std::vector<Sent>& out, uint32_t lo) {
    std::vector<uint16_t> v;
    for (const Sent& s : out)
      if (s.psn() >= lo && s.psn() < lo + 1000) v.push_back(s.pkt.hdr.l3.ipv4_id);
    return v;
  };
  const auto out = sent();
  const auto ia = ids_of(out, 1000), ib = ids_of(out, 5000);
  ASSERT_EQ(ia.size(), 3u);
  ASSERT_EQ(ib.size(), 2u);
  EXPECT_EQ(ia, (std::vector<uint16_t>{0, 1, 2}));
  EXPECT_EQ(ib, (std::vector<uint16_t>{0, 1}));
  // No ACK: the ACK timeout resends each message with the numbers after these.
  at(now_ + 10'000'000'000ull);
  const auto again = sent();
  const auto ra = ids_of(again, 1000), rb = ids_of(again, 5000);
  ASSERT_FALSE(ra.empty());
  ASSERT_FALSE(rb.empty());
  EXPECT_EQ(ra[0], 3);
  EXPECT_EQ(rb[0], 2);
}

TEST_F(RequesterTest, AckRetiresSendAndCompletionCarriesWr) {
  const uint32_t qpn = make_qp();
  auto src = reg(4096);
  src->fill(pattern(4096, 2));
  ASSERT_EQ(engine().post_send(qpn, send_wr(WrOpcode::send, 77, src->sge(0, 2500))), 0);
  at(now_);
  ASSERT_EQ(sent().size(), 3u);

  // Step: the peer acknowledges kS+1 (two of three packets).
  deliver(ack(psn(kS, 1), kAckSyndrome, 0));
  // Expect: no completion yet.
  EXPECT_TRUE(drain(scq_).empty());

  // Step: the peer acknowledges kS+2.
  deliver(ack(psn(kS, 2), kAckSyndrome, 1));
  // Expect: one completion: wr_id 77, SUCCESS, opcode SEND, byte_len 2500; nothing resent.
  auto wc = drain(scq_);
  ASSERT_EQ(wc.size(), 1u);
  expect_completion(wc[0], 77, WcStatus::success, WcOpcode::send);
  EXPECT_EQ(wc[0].byte_len, 2500u);
  EXPECT_EQ(wc[0].qp_num, qpn);
  EXPECT_TRUE(sent().empty());

  // Step: time passes well beyond the ACK timeout.
  at(now_ + ack_timeout_ns(14) * 4);
  // Expect: nothing is outstanding, so nothing is sent.
  EXPECT_TRUE(sent().empty());
  EXPECT_EQ(qp_counters(qpn).timeouts, 0u);
}

TEST_F(RequesterTest, AckTimeoutResendsThenRetryExceededFlushesInOrder) {
  QpOptions o;
  o.timeout = 10;  // 4.096 us << 10 = 4.19 ms
  o.retry_cnt = 2;
  const uint32_t qpn = make_qp(o);
  const uint64_t t_out = 4096ull << 10;
  auto src = reg(4096);
  src->fill(pattern(4096, 3));
  ASSERT_EQ(engine().post_recv(qpn, recv_wr(50, src->sge(2048, 1024))), 0);
  ASSERT_EQ(engine().post_send(qpn, send_wr(WrOpcode::send, 1, src->sge(0, 1500))), 0);   // kS, kS+1
  ASSERT_EQ(engine().post_send(qpn, send_wr(WrOpcode::send, 2, src->sge(100, 10))), 0);   // kS+2
  ASSERT_EQ(engine().post_send(qpn, send_wr(WrOpcode::send, 3, src->sge(200, 10))), 0);   // kS+3
  const uint64_t t0 = now_;
  at(t0);
  auto first = sent();
  ASSERT_EQ(first.size(), 4u);

  for (uint64_t round = 1; round <= 2; ++round) {
    SCOPED_TRACE("timeout " + std::to_string(round));
    // Step: just before the local ACK timeout.
    at(t0 + round * t_out - 1);
    // Expect: nothing yet.
    EXPECT_TRUE(sent().empty());
    // Step: the timeout.
    at(t0 + round * t_out);
    // Expect: the same four packets again (PSNs, opcodes, AckReq, bytes).
    auto again = sent();
    ASSERT_EQ(again.size(), 4u);
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(again[i].psn(), first[i].psn());
      EXPECT_EQ(again[i].opcode(), first[i].opcode());
      EXPECT_EQ(again[i].bth().ackreq, first[i].bth().ackreq);
      EXPECT_EQ(again[i].payload(), first[i].payload());
    }
    EXPECT_EQ(qp_counters(qpn).timeouts, round);
    EXPECT_EQ(qp_counters(qpn).retransmits, 4 * round);
    EXPECT_TRUE(drain(scq_).empty());
  }

  // Step: the third timeout (retry_cnt 2 allowed two retries).
  at(t0 + 3 * t_out);
  // Expect: nothing sent; WR 1 completes RETRY_EXC_ERR, WRs 2 and 3 WR_FLUSH_ERR, in order; QP in ERR.
  EXPECT_TRUE(sent().empty());
  auto wc = drain(scq_);
  ASSERT_EQ(wc.size(), 3u);
  expect_completion(wc[0], 1, WcStatus::retry_exc_err, WcOpcode::send);
  expect_completion(wc[1], 2, WcStatus::wr_flush_err, WcOpcode::send);
  expect_completion(wc[2], 3, WcStatus::wr_flush_err, WcOpcode::send);
  EXPECT_EQ(state(qpn), QpState::err);
  EXPECT_EQ(qp_counters(qpn).timeouts, 3u);
  // Expect: the QP's receive is flushed too (the whole QP is in ERR).
  auto rwc = drain(rcq_);
  ASSERT_EQ(rwc.size(), 1u);
  EXPECT_EQ(rwc[0].wr_id, 50u);
  EXPECT_EQ(rwc[0].status, WcStatus::wr_flush_err);

  // Step: a WR posted to the QP in ERR.
  ASSERT_EQ(engine().post_send(qpn, send_wr(WrOpcode::send, 4, src->sge(0, 10))), 0);
  at(now_ + 1);
  // Expect: flushed at once, never sent.
  wc = drain(scq_);
  ASSERT_EQ(wc.size(), 1u);
  expect_completion(wc[0], 4, WcStatus::wr_flush_err, WcOpcode::send);
  EXPECT_TRUE(sent().empty());
}

TEST_F(RequesterTest, RnrNakHoldsResendUntilTheNaksTimerElapses) {
  QpOptions o;
  o.timeout = 14;         // 67 ms: far beyond the RNR wait
  o.min_rnr_timer = 1;    // ours; the NAK's code is what counts
  const uint32_t qpn = make_qp(o);
  auto src = reg(4096);
  src->fill(pattern(4096, 4));
  ASSERT_EQ(engine().post_send(qpn, send_wr(WrOpcode::send, 1, src->sge(0, 300))), 0);
  at(now_);
  auto first = sent();
  ASSERT_EQ(first.size(), 1u);

  // Step: the peer has no receive: RNR NAK for kS, timer code 16 (2.56 ms).
  now_ += 1000;
  const uint64_t t1 = now_;
  const uint64_t rnr = rnr_timer_ns(16);
  ASSERT_EQ(rnr, 2'560'000u);
  deliver(ack(kS, rnr_nak(16), 0));
  // Expect: nothing resent, nothing completed.
  EXPECT_TRUE(sent().empty());
  EXPECT_TRUE(drain(scq_).empty());
  EXPECT_EQ(qp_counters(qpn).rnr_naks_received, 1u);

  // Step: just before the RNR timer ends.
  at(t1 + rnr - 1);
  // Expect: still nothing.
  EXPECT_TRUE(sent().empty());

  // Step: the RNR timer ends.
  at(t1 + rnr);
  // Expect: the SEND goes out again at kS with the same bytes.
  auto again = sent();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].psn(), kS);
  EXPECT_EQ(again[0].opcode(), rc(op::kSendOnly));
  EXPECT_EQ(again[0].payload(), first[0].payload());

  // Step: ACK.
  deliver(ack(kS, kAckSyndrome, 1));
  // Expect: success.
  auto wc = drain(scq_);
  ASSERT_EQ(wc.size(), 1u);
  expect_completion(wc[0], 1, WcStatus::success, WcOpcode::send);
}

// A responder (rxe's and droce's alike) that RNR-NAKs kS answers the request
// pipelined behind it, kS+1, with a PSN-sequence NAK for kS. That NAK must not
// replace the RNR wait with the (much longer) local ACK timeout.
TEST_F(RequesterTest, RnrWaitHoldsWhenASequenceNakFollows) {
  QpOptions o;
  o.timeout = 14;  // 67 ms
  const uint32_t qpn = make_qp(o);
  auto src = reg(4096);
  ASSERT_EQ(engine().post_send(qpn, send_wr(WrOpcode::send, 1, src->sge(0, 100))), 0);
  ASSERT_EQ(engine().post_send(qpn, send_wr(WrOpcode::send, 2, src->sge(0, 100))), 0);
  at(now_);
  ASSERT_EQ(sent().size(), 2u);

  // Step: RNR NAK for kS (code 8: 0.16 ms), then the sequence NAK for kS.
  now_ += 1000;
  const uint64_t t1 = now_;
  deliver(ack(kS, rnr_nak(8), 0));
  now_ += 1000;
  deliver(ack(kS, kNakPsnSeq, 0));
  // Expect: nothing resent during the RNR wait.
  EXPECT_TRUE(sent().empty());
  at(t1 + rnr_timer_ns(8) - 1);
  EXPECT_TRUE(sent().empty());

  // Step: the RNR timer of the NAK ends.
  at(t1 + rnr_timer_ns(8));
  // Expect: both SENDs go out again from kS (not one local ACK timeout later).
  auto again = sent();
  EXPECT_EQ(again.size(), 2u);
  if (again.size() != 2) {
    at(t1 + 1000 + ack_timeout_ns(14));
    ADD_FAILURE() << "not resent when the RNR timer ended; " << sent().size()
                  << " packets went out one local ACK timeout (" << ack_timeout_ns(14)
                  << " ns) after the sequence NAK";
    return;
  }
  EXPECT_EQ(again[0].psn(), kS);
  EXPECT_EQ(again[1].psn(), psn(kS, 1));
}

TEST_F(RequesterTest, RnrRetryExhaustedCompletesWithRnrRetryExcErr) {
  QpOptions o;
  o.rnr_retry = 2;
  const uint32_t qpn = make_qp(o);
  auto src = reg(4096);
  ASSERT_EQ(engine().post_send(qpn, send_wr(WrOpcode::send, 1, src->sge(0, 100))), 0);
  ASSERT_EQ(engine().post_send(qpn, send_wr(WrOpcode::send, 2, src->sge(0, 100))), 0);
  at(now_);
  ASSERT_EQ(sent().size(), 2u);

  for (int i = 1; i <= 2; ++i) {
    SCOPED_TRACE("RNR NAK " + std::to_string(i));
    // Step: RNR NAK for kS, code 1 (10 us).
    now_ += 1000;
    deliver(ack(kS, rnr_nak(1), 0));
    // Expect: after the timer, the two SENDs again; no completion.
    at(now_ + rnr_timer_ns(1));
    auto again = sent();
    ASSERT_EQ(again.size(), 2u);
    EXPECT_EQ(again[0].psn(), kS);
    EXPECT_TRUE(drain(scq_).empty());
  }

  // Step: a third RNR NAK (rnr_retry 2 allowed two retries).
  now_ += 1000;
  deliver(ack(kS, rnr_nak(1), 0));
  // Expect: WR 1 RNR_RETRY_EXC_ERR, WR 2 WR_FLUSH_ERR; QP in ERR; nothing more sent.
  auto wc = drain(scq_);
  ASSERT_EQ(wc.size(), 2u);
  expect_completion(wc[0], 1, WcStatus::rnr_retry_exc_err, WcOpcode::send);
  expect_completion(wc[1], 2, WcStatus::wr_flush_err, WcOpcode::send);
  EXPECT_EQ(state(qpn), QpState::err);
  at(now_ + rnr_timer_ns(1) * 10);
  EXPECT_TRUE(sent().empty());
}

TEST_F(RequesterTest, RnrRetrySevenRetriesForever) {
  QpOptions o;
  o.rnr_retry = 7;
  const uint32_t qpn = make_qp(o);
  auto src = reg(4096);
  ASSERT_EQ(engine().post_send(qpn, send_wr(WrOpcode::send, 1, src->sge(0, 100))), 0);
  at(now_);
  ASSERT_EQ(sent().size(), 1u);

  for (int i = 1; i <= 20; ++i) {
    SCOPED_TRACE("RNR NAK " + std::to_string(i));
    // Step: RNR NAK for kS.
    now_ += 1000;
    deliver(ack(kS, rnr_nak(1), 0));
    // Expect: still retrying: the SEND goes out again after the timer; no completion.
    at(now_ + rnr_timer_ns(1));
    auto again = sent();
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(again[0].psn(), kS);
    ASSERT_TRUE(drain(scq_).empty());
  }
  EXPECT_EQ(state(qpn), QpState::rts);
  EXPECT_EQ(qp_counters(qpn).rnr_naks_received, 20u);

  // Step: the receiver is finally ready.
  deliver(ack(kS, kAckSyndrome, 1));
  auto wc = drain(scq_);
  ASSERT_EQ(wc.size(), 1u);
  expect_completion(wc[0], 1, WcStatus::success, WcOpcode::send);
}

TEST_F(RequesterTest, SequenceNakResendsFromThatPsn) {
  const uint32_t qpn = make_qp();
  auto src = reg(4096);
  src->fill(pattern(4096, 5));
  ASSERT_EQ(engine().post_send(qpn, send_wr(WrOpcode::send, 1, src->sge(0, 100))), 0);   // kS
  ASSERT_EQ(engine().post_send(qpn, send_wr(WrOpcode::send, 2, src->sge(0, 3000))), 0);  // kS+1..kS+3
  at(now_);
  ASSERT_EQ(sent().size(), 4u);

  // Step: the peer lost kS+2: NAK PSN sequence error for kS+2, MSN 1.
  now_ += 1000;
  deliver(ack(psn(kS, 2), kNakPsnSeq, 1));
  // Expect: WR 1 completes (the NAK acknowledges everything before kS+2).
  auto wc = drain(scq_);
  ASSERT_EQ(wc.size(), 1u);
  expect_completion(wc[0], 1, WcStatus::success, WcOpcode::send);
  // Expect: go-back-N from kS+2: SEND MIDDLE with bytes 1024..2047, SEND LAST with the rest.
  auto out = sent();
  ASSERT_EQ(out.size(), 2u);
  expect_send_packets(out, psn(kS, 2), slice(src->bytes, 0, 3000), 1024);
  EXPECT_EQ(qp_counters(qpn).seq_naks_received, 1u);
  EXPECT_EQ(qp_counters(qpn).retransmits, 2u);

  // Step: ACK kS+3.
  deliver(ack(psn(kS, 3), kAckSyndrome, 2));
  wc = drain(scq_);
  ASSERT_EQ(wc.size(), 1u);
  expect_completion(wc[0], 2, WcStatus::success, WcOpcode::send);
  EXPECT_EQ(wc[0].byte_len, 3000u);
}

// A NAK moves the send point into a message; before the resend goes out, an ACK arrives that
// covers the whole message (its first transmission got through after all: the NAK was about a
// duplicate or a reordered packet). The message must complete then: nothing will ever
// acknowledge it again. (Found by the soak: the WQE stayed, the retry timer fired on a QP with
// nothing outstanding until RETRY_EXC_ERR.)
TEST_F(RequesterTest, AnAckCoveringAMessageTheSendPointIsInsideCompletesIt) {
  QpOptions o;
  o.timeout = 10;
  o.retry_cnt = 2;
  const uint32_t qpn = make_qp(o);
  auto src = reg(4096);
  src->fill(pattern(4096, 6));
  ASSERT_EQ(engine().post_send(qpn, send_wr(WrOpcode::send, 9, src->sge(0, 3000))), 0);  // kS..kS+2
  at(now_);
  ASSERT_EQ(sent().size(), 3u);

  // Step: in one burst, a sequence NAK for kS+1, then the ACK for kS+2 (the whole message).
  now_ += 1000;
  deliver({{ack(psn(kS, 1), kNakPsnSeq, 0), {}}, {ack(psn(kS, 2), kAckSyndrome, 1), {}}});
  // Expect: the SEND completes; nothing outstanding is left to resend.
  auto wc = drain(scq_);
  ASSERT_EQ(wc.size(), 1u);
  expect_completion(wc[0], 9, WcStatus::success, WcOpcode::send);
  sent();

  // Step: ten ACK timeouts pass.
  at(now_ + (4096ull << 10) * 10);
  // Expect: no timeout counted, nothing sent, the QP still in RTS (before: RETRY_EXC_ERR).
  EXPECT_EQ(qp_counters(qpn).timeouts, 0u);
  EXPECT_TRUE(sent().empty());
  EXPECT_EQ(state(qpn), QpState::rts);
  EXPECT_TRUE(drain(scq_).empty());
}

TEST_F(RequesterTest, NakRemoteAccessCompletesWithRemAccessErr) {
  nak_completes_with(kNakRemoteAccess, WcStatus::rem_access_err);
}

TEST_F(RequesterTest, NakInvalidRequestCompletesWithRemInvReqErr) {
  nak_completes_with(kNakInvalidRequest, WcStatus::rem_inv_req_err);
}

TEST_F(RequesterTest, NakRemoteOperationalCompletesWithRemOpErr) {
  nak_completes_with(kNakRemoteOperational, WcStatus::rem_op_err);
}

TEST_F(RequesterTest, AckBeyondOutstandingReadResendsTheRead) {
  const uint32_t qpn = make_qp();
  auto local = reg(4096);
  auto src = reg(4096);
  SendWr r = send_wr(WrOpcode::rdma_read, 1, local->sge(0, 100));
  r.remote_addr = 0x12345678;
  r.rkey = 0xabcd;
  ASSERT_EQ(engine().post_send(qpn, r), 0);                                                // kS
  ASSERT_EQ(engine().post_send(qpn, send_wr(WrOpcode::send, 2, src->sge(0, 10))), 0);    // kS+1
  at(now_);
  auto out = sent();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].opcode(), rc(op::kReadRequest));
  EXPECT_EQ(out[0].psn(), kS);
  EXPECT_EQ(out[0].ext().reth, (Reth{0x12345678, 0xabcd, 100}));

  // Step: an ACK for kS+1 arrives; the READ's response never did.
  now_ += 1000;
  deliver(ack(psn(kS, 1), kAckSyndrome, 2));
  // Expect: implied NAK: the READ request goes out again (PSN kS, same RETH); nothing completes.
  out = sent();
  ASSERT_GE(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), rc(op::kReadRequest));
  EXPECT_EQ(out[0].psn(), kS);
  EXPECT_EQ(out[0].ext().reth, (Reth{0x12345678, 0xabcd, 100}));
  EXPECT_EQ(qp_counters(qpn).implied_naks, 1u);
  EXPECT_TRUE(drain(scq_).empty());

  // Step: the READ's response arrives.
  const auto data = pattern(100, 6);
  deliver(read_response(op::kReadResponseOnly, kS, 1), data);
  // Expect: the READ completes with its bytes, then the SEND, in order.
  auto wc = drain(scq_);
  ASSERT_EQ(wc.size(), 2u);
  expect_completion(wc[0], 1, WcStatus::success, WcOpcode::rdma_read);
  EXPECT_EQ(wc[0].byte_len, 100u);
  expect_completion(wc[1], 2, WcStatus::success, WcOpcode::send);
  EXPECT_EQ(slice(local->bytes, 0, 100), data);
}

TEST_F(RequesterTest, ReadResponseGapReRequestsFromFirstMissingPsn) {
  const uint32_t qpn = make_qp();
  auto local = reg(4096);
  const uint64_t remote = 0x40000000;
  SendWr r = send_wr(WrOpcode::rdma_read, 1, local->sge(0, 3000));
  r.remote_addr = remote;
  r.rkey = 0x4242;
  ASSERT_EQ(engine().post_send(qpn, r), 0);  // kS..kS+2
  at(now_);
  auto out = sent();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].ext().reth, (Reth{remote, 0x4242, 3000}));

  const auto data = pattern(3000, 7);
  // Step: READ RESPONSE FIRST (kS) arrives, MIDDLE (kS+1) is lost, LAST (kS+2) arrives.
  now_ += 1000;
  deliver({{read_response(op::kReadResponseFirst, kS, 1), slice(data, 0, 1024)},
           {read_response(op::kReadResponseLast, psn(kS, 2), 1), slice(data, 2048, 952)}});
  // Expect: the READ asked for again from the first missing PSN, kS+1, with the
  // RETH's address advanced by 1024 and its length reduced to 1976.
  out = sent();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), rc(op::kReadRequest));
  EXPECT_EQ(out[0].psn(), psn(kS, 1));
  EXPECT_EQ(out[0].ext().reth, (Reth{remote + 1024, 0x4242, 3000 - 1024}));
  EXPECT_TRUE(drain(scq_).empty());

  // Step: the responder replays from kS+1: MIDDLE then LAST.
  deliver({{peer(op::kReadResponseMiddle, psn(kS, 1)), slice(data, 1024, 1024)},
           {read_response(op::kReadResponseLast, psn(kS, 2), 1), slice(data, 2048, 952)}});
  // Expect: the READ completes with all 3000 bytes in place.
  auto wc = drain(scq_);
  ASSERT_EQ(wc.size(), 1u);
  expect_completion(wc[0], 1, WcStatus::success, WcOpcode::rdma_read);
  EXPECT_EQ(wc[0].byte_len, 3000u);
  EXPECT_EQ(slice(local->bytes, 0, 3000), data);
}

// A long READ under loss: each time its responses stop short, the timer resumes it at the
// first missing response. Every in-order response packet is progress, so the retry budget
// starts over with each (as rxe's completer resets it per packet): a READ that keeps moving
// does not fail with RETRY_EXC_ERR however many resumes it takes.
TEST_F(RequesterTest, ReadResponsesThatArriveRefillTheRetryBudget) {
  QpOptions o;
  o.timeout = 10;
  o.retry_cnt = 1;
  const uint32_t qpn = make_qp(o);
  const uint64_t t_out = 4096ull << 10;
  auto local = reg(8192);
  SendWr r = send_wr(WrOpcode::rdma_read, 1, local->sge(0, 4096));
  r.remote_addr = 0x40000000;
  r.rkey = 0x4242;
  ASSERT_EQ(engine().post_send(qpn, r), 0);  // kS..kS+3
  at(now_);
  ASSERT_EQ(sent().size(), 1u);
  const auto data = pattern(4096, 8);

  // Step: FIRST arrives, the rest is lost; a timeout resumes the READ at kS+1 (the one retry).
  deliver(read_response(op::kReadResponseFirst, kS, 1), slice(data, 0, 1024));
  at(now_ + t_out + 1);
  auto out = sent();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].psn(), psn(kS, 1));
  // Step: MIDDLE kS+1 arrives, then the rest is lost again; another timeout.
  deliver(peer(op::kReadResponseMiddle, psn(kS, 1)), slice(data, 1024, 1024));
  at(now_ + t_out + 1);
  // Expect: resumed at kS+2, not failed: the response that came refilled the budget.
  out = sent();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].psn(), psn(kS, 2));
  EXPECT_TRUE(drain(scq_).empty());
  EXPECT_EQ(state(qpn), QpState::rts);
  // Step: the rest arrives.
  deliver({{peer(op::kReadResponseMiddle, psn(kS, 2)), slice(data, 2048, 1024)},
           {read_response(op::kReadResponseLast, psn(kS, 3), 1), slice(data, 3072, 1024)}});
  auto wc = drain(scq_);
  ASSERT_EQ(wc.size(), 1u);
  expect_completion(wc[0], 1, WcStatus::success, WcOpcode::rdma_read);
  EXPECT_EQ(slice(local->bytes, 0, 4096), data);
  EXPECT_EQ(qp_counters(qpn).timeouts, 2u);
}

TEST_F(RequesterTest, UnsignaledWrsCompleteOnlyOnErrorOrFlush) {
  QpOptions o;
  o.sq_sig_all = false;
  const uint32_t qpn = make_qp(o);
  auto src = reg(4096);
  ASSERT_EQ(engine().post_send(qpn, send_wr(WrOpcode::send, 1, src->sge(0, 10), 0)), 0);              // kS
  ASSERT_EQ(engine().post_send(qpn, send_wr(WrOpcode::send, 2, src->sge(0, 10), kSendSignaled)), 0);  // kS+1
  at(now_);
  ASSERT_EQ(sent().size(), 2u);

  // Step: ACK for both.
  deliver(ack(psn(kS, 1), kAckSyndrome, 2));
  // Expect: one completion, for the signaled WR 2 only.
  auto wc = drain(scq_);
  ASSERT_EQ(wc.size(), 1u);
  expect_completion(wc[0], 2, WcStatus::success, WcOpcode::send);

  // Step: two more unsignaled WRs; the peer NAKs the first (remote access).
  ASSERT_EQ(engine().post_send(qpn, send_wr(WrOpcode::send, 3, src->sge(0, 10), 0)), 0);  // kS+2
  ASSERT_EQ(engine().post_send(qpn, send_wr(WrOpcode::send, 4, src->sge(0, 10), 0)), 0);  // kS+3
  at(now_);
  ASSERT_EQ(sent().size(), 2u);
  deliver(ack(psn(kS, 2), kNakRemoteAccess, 2));
  // Expect: errors are always reported: WR 3 REM_ACCESS_ERR, WR 4 WR_FLUSH_ERR.
  wc = drain(scq_);
  ASSERT_EQ(wc.size(), 2u);
  expect_completion(wc[0], 3, WcStatus::rem_access_err, WcOpcode::send);
  expect_completion(wc[1], 4, WcStatus::wr_flush_err, WcOpcode::send);
}

TEST_F(RequesterTest, FenceHoldsSendBehindOutstandingRead) {
  const uint32_t qpn = make_qp();
  auto local = reg(4096);
  SendWr r = send_wr(WrOpcode::rdma_read, 1, local->sge(0, 64));
  r.remote_addr = 0x9000;
  r.rkey = 0x77;
  ASSERT_EQ(engine().post_send(qpn, r), 0);  // kS
  ASSERT_EQ(engine().post_send(qpn, send_wr(WrOpcode::send, 2, local->sge(1024, 16), kSendSignaled | kSendFence)), 0);

  // Step: one poll.
  at(now_);
  // Expect: only the READ request; the fenced SEND waits for it.
  auto out = sent();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), rc(op::kReadRequest));
  at(now_ + 1000);
  EXPECT_TRUE(sent().empty());

  // Step: the READ's response.
  deliver(read_response(op::kReadResponseOnly, kS, 1), pattern(64, 8));
  // Expect: the READ completes; the SEND goes out at kS+1.
  auto wc = drain(scq_);
  ASSERT_EQ(wc.size(), 1u);
  expect_completion(wc[0], 1, WcStatus::success, WcOpcode::rdma_read);
  at(now_);
  out = sent();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), rc(op::kSendOnly));
  EXPECT_EQ(out[0].psn(), psn(kS, 1));
}

TEST_F(RequesterTest, AtMostMaxRdAtomicOutstanding) {
  QpOptions o;
  o.max_rd_atomic = 2;
  const uint32_t qpn = make_qp(o);
  auto local = reg(4096);
  for (uint64_t id : {1, 2}) {
    SendWr r = send_wr(WrOpcode::rdma_read, id, local->sge(uint32_t(id) * 64, 8));
    r.remote_addr = 0x9000;
    r.rkey = 0x77;
    ASSERT_EQ(engine().post_send(qpn, r), 0);
  }
  SendWr fa = send_wr(WrOpcode::atomic_fetch_and_add, 3, local->sge(512, 8));
  fa.remote_addr = 0x9000;
  fa.rkey = 0x77;
  fa.compare_add = 1;
  ASSERT_EQ(engine().post_send(qpn, fa), 0);
  SendWr r4 = send_wr(WrOpcode::rdma_read, 4, local->sge(1024, 8));
  r4.remote_addr = 0x9000;
  r4.rkey = 0x77;
  ASSERT_EQ(engine().post_send(qpn, r4), 0);

  // Step: one poll.
  at(now_);
  // Expect: two READ requests (kS, kS+1) and no more: max_rd_atomic is 2.
  auto out = sent();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].psn(), kS);
  EXPECT_EQ(out[1].psn(), psn(kS, 1));

  // Step: READ 1's response.
  deliver(read_response(op::kReadResponseOnly, kS, 1), pattern(8, 1));
  // Expect: one slot freed: the FETCH_ADD goes out at kS+2, nothing else.
  out = sent();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), rc(op::kFetchAdd));
  EXPECT_EQ(out[0].psn(), psn(kS, 2));

  // Step: READ 2's response.
  deliver(read_response(op::kReadResponseOnly, psn(kS, 1), 2), pattern(8, 2));
  // Expect: READ 4 goes out at kS+3.
  out = sent();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), rc(op::kReadRequest));
  EXPECT_EQ(out[0].psn(), psn(kS, 3));
  EXPECT_EQ(drain(scq_).size(), 2u);
}

TEST_F(RequesterTest, PostSendAndPostRecvErrnos) {
  auto buf = reg(8192);
  const SendWr send = send_wr(WrOpcode::send, 1, buf->sge(0, 10));
  const RecvWr recv = recv_wr(1, buf->sge(0, 10));

  // Expect: RESET: both refused.
  QpOptions o;
  o.depth = 4;
  o.state = QpState::reset;
  uint32_t qpn = make_qp(o);
  EXPECT_EQ(engine().post_send(qpn, send), -EINVAL);
  EXPECT_EQ(engine().post_recv(qpn, recv), -EINVAL);
  // Expect: INIT and RTR: no sends; receives allowed.
  o.state = QpState::init;
  qpn = make_qp(o);
  EXPECT_EQ(engine().post_send(qpn, send), -EINVAL);
  EXPECT_EQ(engine().post_recv(qpn, recv), 0);
  o.state = QpState::rtr;
  qpn = make_qp(o);
  EXPECT_EQ(engine().post_send(qpn, send), -EINVAL);
  EXPECT_EQ(engine().post_recv(qpn, recv), 0);

  // RTS from here on.
  o.state = QpState::rts;
  qpn = make_qp(o);
  // Expect: more SGEs than max_send_sge / max_recv_sge (4): EINVAL.
  SendWr many = send;
  many.num_sge = 5;
  for (uint32_t i = 0; i < 5; ++i) many.sg_list[i] = buf->sge(i * 8, 8);
  EXPECT_EQ(engine().post_send(qpn, many), -EINVAL);
  RecvWr rmany = recv;
  rmany.num_sge = 5;
  for (uint32_t i = 0; i < 5; ++i) rmany.sg_list[i] = buf->sge(i * 8, 8);
  EXPECT_EQ(engine().post_recv(qpn, rmany), -EINVAL);
  // Expect: queue full (depth 4): ENOMEM.
  for (int i = 0; i < 4; ++i) EXPECT_EQ(engine().post_send(qpn, send), 0);
  EXPECT_EQ(engine().post_send(qpn, send), -ENOMEM);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(engine().post_recv(qpn, recv), 0);
  EXPECT_EQ(engine().post_recv(qpn, recv), -ENOMEM);

  // Expect: READ (and atomics) on UC: EINVAL.
  o.type = QpType::uc;
  qpn = make_qp(o);
  SendWr rd = send_wr(WrOpcode::rdma_read, 1, buf->sge(0, 8));
  EXPECT_EQ(engine().post_send(qpn, rd), -EINVAL);
  rd.opcode = WrOpcode::atomic_fetch_and_add;
  EXPECT_EQ(engine().post_send(qpn, rd), -EINVAL);

  // Expect: UD larger than the path MTU: EINVAL; exactly the MTU: accepted.
  o.type = QpType::ud;
  qpn = make_qp(o);
  uint32_t ah = 0;
  ASSERT_EQ(engine().create_ah(pd_, peer_av(), &ah), 0);
  SendWr ud = send_wr(WrOpcode::send, 1, buf->sge(0, 1025));
  ud.ah = ah;
  ud.remote_qpn = kPeerQpn;
  ud.remote_qkey = 0x11111111;
  EXPECT_EQ(engine().post_send(qpn, ud), -EINVAL);
  ud.sg_list[0].length = 1024;
  EXPECT_EQ(engine().post_send(qpn, ud), 0);
  // Nothing was polled: no frame went out.
  EXPECT_TRUE(sent().empty());
}

// =====================================================================================
// UC and UD
// =====================================================================================

class UcTest : public ProtocolTest {
 protected:
  QpOptions uc_options() {
    QpOptions o;
    o.type = QpType::uc;
    return o;
  }
};

TEST_F(UcTest, NeverAcknowledged) {
  const uint32_t qpn = make_qp(uc_options());
  auto buf = reg(4096);
  buf->fill(pattern(4096, 11));
  auto rbuf = reg(4096);
  ASSERT_EQ(engine().post_recv(qpn, recv_wr(1, rbuf->sge(0, 4096))), 0);

  // Step: UC SEND ONLY at kE, even with AckReq set.
  deliver(peer(op::kSendOnly, kE, true), pattern(50, 1));
  // Expect: delivered, and no ACK on the wire.
  auto wc = drain(rcq_);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].byte_len, 50u);
  EXPECT_TRUE(sent().empty());

  // Step: post a 2500-byte UC SEND.
  ASSERT_EQ(engine().post_send(qpn, send_wr(WrOpcode::send, 9, buf->sge(0, 2500))), 0);
  at(now_);
  // Expect: UC SEND FIRST, MIDDLE, LAST at kS.., none asking for an ACK; the WR
  // completes once sent, with no ACK ever coming.
  auto out = sent();
  ASSERT_EQ(out.size(), 3u);
  const uint8_t ops[] = {uc(op::kSendFirst), uc(op::kSendMiddle), uc(op::kSendLast)};
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(out[i].opcode(), ops[i]);
    EXPECT_EQ(out[i].psn(), psn(kS, i));
    EXPECT_FALSE(out[i].bth().ackreq);
  }
  wc = drain(scq_);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 9u);
  EXPECT_EQ(wc[0].status, WcStatus::success);
}

TEST_F(UcTest, PsnGapDropsTheMessageAndTheNextIsDelivered) {
  const uint32_t qpn = make_qp(uc_options());
  auto rbuf = reg(8192);
  ASSERT_EQ(engine().post_recv(qpn, recv_wr(1, rbuf->sge(0, 4096))), 0);
  ASSERT_EQ(engine().post_recv(qpn, recv_wr(2, rbuf->sge(4096, 4096))), 0);

  // Step: SEND FIRST at kE, MIDDLE (kE+1) lost, SEND LAST at kE+2.
  deliver({{peer(op::kSendFirst, kE), pattern(1024, 1)},
           {peer(op::kSendLast, psn(kE, 2)), pattern(100, 2)}});
  // Expect: the message is dropped: no completion, nothing sent, the drop counted.
  EXPECT_TRUE(drain(rcq_).empty());
  EXPECT_TRUE(sent().empty());
  EXPECT_GE(qp_counters(qpn).dropped, 1u);

  // Step: the next message, SEND ONLY at kE+3.
  const auto next = pattern(200, 3);
  deliver(peer(op::kSendOnly, psn(kE, 3)), next);
  // Expect: delivered whole. The dropped message consumed no receive WQE (rxe
  // reuses it, IBA 9.8.3 class D1), so it lands in receive 1.
  auto wc = drain(rcq_);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WcStatus::success);
  EXPECT_EQ(wc[0].byte_len, 200u);
  EXPECT_EQ(wc[0].wr_id, 1u);
  EXPECT_EQ(slice(rbuf->bytes, 0, 200), next);
  EXPECT_TRUE(sent().empty());
}

// UC has no duplicates: a packet whose PSN is not the expected one means
// packets were lost or repeated, and the message in progress is dropped (rxe:
// any PSN other than the expected one, unless it starts a message).
TEST_F(UcTest, RepeatedPacketInsideAMessageIsNotPlacedTwice) {
  const uint32_t qpn = make_qp(uc_options());
  auto rbuf = reg(16384);
  ASSERT_EQ(engine().post_recv(qpn, recv_wr(1, rbuf->sge(0, 8192))), 0);
  ASSERT_EQ(engine().post_recv(qpn, recv_wr(2, rbuf->sge(8192, 8192))), 0);

  // Step: FIRST kE, MIDDLE kE+1, MIDDLE kE+1 again (the network repeated it), LAST kE+2.
  deliver({{peer(op::kSendFirst, kE), pattern(1024, 1)},
           {peer(op::kSendMiddle, psn(kE, 1)), pattern(1024, 2)},
           {peer(op::kSendMiddle, psn(kE, 1)), pattern(1024, 2)},
           {peer(op::kSendLast, psn(kE, 2)), pattern(100, 3)}});
  // Expect: never a 3172-byte message holding the repeated packet twice; the
  // message is dropped (no completion).
  auto wc = drain(rcq_);
  for (const Completion& c : wc) EXPECT_NE(c.byte_len, 3u * 1024 + 100) << "the repeated packet was placed twice";
  EXPECT_TRUE(wc.empty());

  // Step: the next message at kE+3.
  deliver(peer(op::kSendOnly, psn(kE, 3)), pattern(10, 4));
  // Expect: delivered.
  wc = drain(rcq_);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].byte_len, 10u);
  EXPECT_EQ(state(qpn), QpState::rts);
}

class UdTest : public ProtocolTest {
 protected:
  PacketHeaders ud_send(uint32_t qkey, uint32_t src_qp) {
    PacketHeaders h = peer(op::kSendOnly, 0x123);
    h.ext.deth = {qkey, 0, src_qp};
    return h;
  }
  QpOptions ud_options() {
    QpOptions o;
    o.type = QpType::ud;
    o.qkey = 0x11111111;
    return o;
  }
  /// What a UD QP is made with (for create_qp and create_gsi_qp called directly).
  QpInit ud_init() {
    QpInit init;
    init.type = QpType::ud;
    init.pd = pd_;
    init.send_cq = scq_;
    init.recv_cq = rcq_;
    init.cap = {16, 16, 1, 1, 0};
    return init;
  }
  /// A datagram to multicast `group` (QPN 0xFFFFFF, the group's MAC) from `src_qp`.
  PacketHeaders to_group(const IpAddr& group, uint32_t qkey, uint32_t src_qp) {
    PacketHeaders h = ud_send(qkey, src_qp);
    h.l2.dst = {0x01, 0x00, 0x5e, static_cast<uint8_t>(group[13] & 0x7f), group[14], group[15]};
    h.l3.dst = group;
    h.bth.dest_qp = Engine::kMulticastQpn;
    return h;
  }
};

TEST_F(UdTest, WrongQkeyIsDroppedAndCounted) {
  const uint32_t qpn = make_qp(ud_options());
  auto rbuf = reg(4096);
  ASSERT_EQ(engine().post_recv(qpn, recv_wr(1, rbuf->sge(0, 4096))), 0);

  // Step: a datagram with Q_Key 0x22222222 (ours is 0x11111111).
  deliver(ud_send(0x22222222, 0x777), pattern(100, 1));
  // Expect: dropped: no completion, nothing sent, counted on the engine and on the QP.
  EXPECT_TRUE(drain(rcq_).empty());
  EXPECT_TRUE(sent().empty());
  EXPECT_EQ(engine().counters().rx_bad_qkey, 1u);
  EXPECT_EQ(qp_counters(qpn).dropped, 1u);

  // Step: the same datagram with the right Q_Key.
  deliver(ud_send(0x11111111, 0x777), pattern(100, 1));
  // Expect: delivered into the receive the dropped one did not take: GRH + 100 bytes, source QP from the DETH.
  auto wc = drain(rcq_);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 1u);
  EXPECT_EQ(wc[0].status, WcStatus::success);
  EXPECT_EQ(wc[0].byte_len, 140u);
  EXPECT_EQ(wc[0].src_qp, 0x777u);
  EXPECT_TRUE(wc[0].wc_flags & kWcGrh);
  EXPECT_EQ(slice(rbuf->bytes, 40, 100), pattern(100, 1));
}

// A NIC takes only what is sent to its addresses: a datagram to another host's
// IP (a bridge flooding it, a promiscuous port) is dropped, not received by
// the QP that happens to have the number in its BTH.
TEST_F(UdTest, ADatagramForAnotherHostIsDropped) {
  const uint32_t qpn = make_qp(ud_options());
  auto rbuf = reg(4096);
  ASSERT_EQ(engine().post_recv(qpn, recv_wr(1, rbuf->sge(0, 4096))), 0);
  PacketHeaders h = ud_send(0x11111111, 0x888);
  h.l3.dst = ipv4_mapped(0xc0a86463);  // 192.168.100.99, not ours
  deliver(h, pattern(64, 3));
  EXPECT_TRUE(drain(rcq_).empty());
  EXPECT_EQ(engine().counters().rx_bad_dest, 1u);
  // To our IPv6 address, the datagram is ours.
  ipv6_ = true;
  deliver(ud_send(0x11111111, 0x888), pattern(64, 3));
  EXPECT_EQ(drain(rcq_).size(), 1u);
}

// Multicast (ibv_attach_mcast): a UD datagram to QPN 0xFFFFFF and a group address goes to every
// QP attached to that group, each with its own receive WQE and its own Q_Key check, as rxe's
// rxe_rcv_mcast_pkt; a group nobody here joined, a multicast QPN on a unicast address or on an RC
// opcode, are dropped and counted.
TEST_F(UdTest, AMulticastDatagramReachesEveryAttachedQp) {
  const IpAddr group = ipv4_mapped(0xef010203);  // 239.1.2.3 as RoCEv2's MGID ::ffff:239.1.2.3
  const uint32_t a = make_qp(ud_options());
  const uint32_t b = make_qp(ud_options());
  QpOptions other_qkey = ud_options();
  other_qkey.qkey = 0x33333333;
  const uint32_t c = make_qp(other_qkey);
  auto rbuf = reg(3 * 4096);
  ASSERT_EQ(engine().post_recv(a, recv_wr(0xa, rbuf->sge(0, 4096))), 0);
  ASSERT_EQ(engine().post_recv(b, recv_wr(0xb, rbuf->sge(4096, 4096))), 0);
  ASSERT_EQ(engine().post_recv(c, recv_wr(0xc, rbuf->sge(8192, 4096))), 0);
  ASSERT_EQ(engine().attach_mcast(a, group), 0);
  ASSERT_EQ(engine().attach_mcast(b, group), 0);
  ASSERT_EQ(engine().attach_mcast(b, group), 0);  // twice: still one attachment
  ASSERT_EQ(engine().attach_mcast(c, group), 0);
  EXPECT_EQ(engine().mcast_groups(), 1u);
  EXPECT_EQ(engine().mcast_attachments(), 3u);

  // Step: one datagram to the group (Q_Key 0x11111111, a's and b's).
  PacketHeaders h = to_group(group, 0x11111111, 0x999);
  deliver(h, pattern(200, 9));
  // Expect: a and b each complete their own receive with the payload after the GRH; c's Q_Key
  // differs: dropped and counted, its receive untouched.
  auto wc = drain(rcq_);
  ASSERT_EQ(wc.size(), 2u);
  EXPECT_EQ(wc[0].qp_num, a);
  EXPECT_EQ(wc[0].wr_id, 0xau);
  EXPECT_EQ(wc[1].qp_num, b);
  EXPECT_EQ(wc[1].wr_id, 0xbu);
  for (const Completion& x : wc) {
    EXPECT_EQ(x.status, WcStatus::success);
    EXPECT_EQ(x.byte_len, 240u);
    EXPECT_EQ(x.src_qp, 0x999u);
  }
  EXPECT_EQ(slice(rbuf->bytes, 40, 200), pattern(200, 9));
  EXPECT_EQ(slice(rbuf->bytes, 4096 + 40, 200), pattern(200, 9));
  EXPECT_EQ(engine().counters().rx_bad_qkey, 1u);
  EXPECT_TRUE(sent().empty());

  // Step: a detaches; b is destroyed (its attachment goes with it); the datagram again.
  ASSERT_EQ(engine().detach_mcast(a, group), 0);
  EXPECT_EQ(engine().detach_mcast(a, group), -EINVAL);  // no longer attached
  ASSERT_EQ(engine().destroy_qp(b), 0);
  EXPECT_EQ(engine().mcast_attachments(), 1u);
  ASSERT_EQ(engine().post_recv(a, recv_wr(0xa2, rbuf->sge(0, 4096))), 0);
  ASSERT_EQ(engine().detach_mcast(c, group), 0);
  EXPECT_EQ(engine().mcast_groups(), 0u);
  deliver(h, pattern(200, 9));
  // Expect: nobody is attached: counted, a's receive still posted.
  EXPECT_TRUE(drain(rcq_).empty());
  EXPECT_EQ(engine().counters().rx_mcast_unattached, 1u);

  // Step: the multicast QPN on a unicast address, and on an RC opcode to the group.
  ASSERT_EQ(engine().attach_mcast(a, group), 0);
  PacketHeaders unicast = h;
  unicast.l3.dst = local_ip();
  deliver(unicast, pattern(20, 1));
  PacketHeaders rc = h;
  rc.bth.opcode = make_opcode(Transport::rc, op::kSendOnly);
  rc.ext = {};
  deliver(rc, pattern(20, 1));
  // Expect: both dropped as not for us.
  EXPECT_TRUE(drain(rcq_).empty());
  EXPECT_EQ(engine().counters().rx_bad_dest, 2u);
}

// IBV_QP_CREATE_BLOCK_SELF_MCAST_LB (mckey -l): a QP made with it does not receive the multicast
// it sent itself (this host's address, its own QPN in the DETH); other attached QPs do, and so
// does it for another host's datagram from a QP of the same number.
TEST_F(UdTest, ABlockingQpDoesNotReceiveItsOwnMulticast) {
  const IpAddr group = ipv4_mapped(0xef010204);
  QpInit init = ud_init();
  init.block_self_mcast_loopback = true;
  uint32_t blocking = 0;
  ASSERT_EQ(engine().create_qp(init, &blocking), 0);
  QpAttr qa;
  qa.qp_state = QpState::init;
  qa.port_num = 1;
  qa.qkey = 0x11111111;
  ASSERT_EQ(engine().modify_qp(blocking, qa, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrQkey), 0);
  qa = QpAttr{};
  qa.qp_state = QpState::rtr;
  ASSERT_EQ(engine().modify_qp(blocking, qa, kAttrState), 0);
  const uint32_t other = make_qp(ud_options());
  auto rbuf = reg(4 * 4096);
  ASSERT_EQ(engine().post_recv(blocking, recv_wr(1, rbuf->sge(0, 4096))), 0);
  ASSERT_EQ(engine().post_recv(other, recv_wr(2, rbuf->sge(4096, 4096))), 0);
  ASSERT_EQ(engine().attach_mcast(blocking, group), 0);
  ASSERT_EQ(engine().attach_mcast(other, group), 0);

  // Step: the blocking QP's own datagram, looped back (source: this host, DETH source QP: it).
  PacketHeaders h = to_group(group, 0x11111111, blocking);
  h.l3.src = local_ip();
  deliver(h, pattern(32, 1));
  // Expect: only the other QP receives it.
  auto wc = drain(rcq_);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].qp_num, other);

  // Step: a peer's datagram from a QP that happens to have the same number.
  h.l3.src = peer_ip();
  ASSERT_EQ(engine().post_recv(other, recv_wr(3, rbuf->sge(8192, 4096))), 0);
  deliver(h, pattern(32, 2));
  // Expect: both receive it.
  wc = drain(rcq_);
  ASSERT_EQ(wc.size(), 2u);
  EXPECT_EQ(wc[0].qp_num, blocking);
  EXPECT_EQ(wc[1].qp_num, other);
}

TEST_F(UdTest, AttachRefusesWhatIsNotAUdQpOrAMulticastGid) {
  const IpAddr group = ipv4_mapped(0xe0000105);
  const uint32_t ud = make_qp(ud_options());
  QpOptions o;
  o.type = QpType::rc;
  const uint32_t rc = make_qp(o);
  EXPECT_EQ(engine().attach_mcast(rc, group), -EINVAL);
  EXPECT_EQ(engine().attach_mcast(ud, local_ip()), -EINVAL);
  EXPECT_EQ(engine().attach_mcast(0x7777, group), -EINVAL);
  IpAddr v6group{};
  v6group[0] = 0xff;
  v6group[1] = 0x0e;
  v6group[15] = 1;
  EXPECT_EQ(engine().attach_mcast(ud, v6group), 0);
  EXPECT_EQ(engine().detach_mcast(ud, group), -EINVAL);
  EXPECT_EQ(engine().detach_mcast(ud, v6group), 0);
}

// The GSI QP (QP1), which droced makes for connection management: number 1, its Q_Key fixed at
// 0x80010000 (a datagram with another is dropped, a modify to another refused), and what it sends
// says so (source QP 1 in the DETH, the GSI Q_Key), as the kernel's CM MADs do.
TEST_F(UdTest, TheGsiQpIsQp1WithItsFixedQkey) {
  const QpInit init = ud_init();
  ASSERT_EQ(engine().create_gsi_qp(init), 0);
  EXPECT_EQ(engine().create_gsi_qp(init), -EINVAL);  // one per engine
  QpAttr qa;
  qa.qp_state = QpState::init;
  qa.port_num = 1;
  qa.qkey = 0x11111111;
  EXPECT_EQ(engine().modify_qp(1, qa, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrQkey), -EINVAL);
  qa.qkey = Engine::kGsiQkey;
  ASSERT_EQ(engine().modify_qp(1, qa, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrQkey), 0);
  qa = QpAttr{};
  qa.qp_state = QpState::rtr;
  ASSERT_EQ(engine().modify_qp(1, qa, kAttrState), 0);
  qa.qp_state = QpState::rts;
  ASSERT_EQ(engine().modify_qp(1, qa, kAttrState | kAttrSqPsn), 0);
  // A regular QP never gets number 1.
  EXPECT_GT(make_qp(ud_options()), 1u);

  // Step: a MAD-sized datagram to QP 1 with the GSI Q_Key, then one with another Q_Key.
  auto rbuf = reg(4096);
  ASSERT_EQ(engine().post_recv(1, recv_wr(7, rbuf->sge(0, 40 + 256))), 0);
  qpn_ = 1;
  deliver(ud_send(0x11111111, 1), pattern(256, 5));
  EXPECT_TRUE(drain(rcq_).empty());
  EXPECT_EQ(engine().counters().rx_bad_qkey, 1u);
  deliver(ud_send(Engine::kGsiQkey, 1), pattern(256, 5));
  // Expect: the second is received, GRH first, from source QP 1.
  auto wc = drain(rcq_);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 7u);
  EXPECT_EQ(wc[0].qp_num, 1u);
  EXPECT_EQ(wc[0].src_qp, 1u);
  EXPECT_EQ(wc[0].byte_len, 40u + 256);
  EXPECT_EQ(slice(rbuf->bytes, 40, 256), pattern(256, 5));

  // Step: QP 1 answers the peer's QP 1 (a controlled remote Q_Key: the QP's own is used).
  auto sbuf = reg(256);
  uint32_t ah = 0;
  ASSERT_EQ(engine().create_ah(pd_, peer_av(), &ah), 0);
  SendWr w = send_wr(WrOpcode::send, 9, sbuf->sge(0, 256));
  w.ah = ah;
  w.remote_qpn = 1;
  w.remote_qkey = 0x80000000;
  ASSERT_EQ(engine().post_send(1, w), 0);
  at(now_ + 1);
  const auto out = sent();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].bth().dest_qp, 1u);
  EXPECT_EQ(out[0].ext().deth.src_qp, 1u);
  EXPECT_EQ(out[0].ext().deth.qkey, Engine::kGsiQkey);
  EXPECT_EQ(out[0].bth().pkey, 0xffff);
  EXPECT_EQ(out[0].payload().size(), 256u);

  // Step: QP 1 destroyed. Expect: datagrams to it are unknown-QP drops, and it can be made again.
  ASSERT_EQ(engine().destroy_qp(1), 0);
  const uint64_t unknown = engine().counters().rx_unknown_qp;
  deliver(ud_send(Engine::kGsiQkey, 1), pattern(256, 5));
  EXPECT_EQ(engine().counters().rx_unknown_qp, unknown + 1);
  EXPECT_EQ(engine().create_gsi_qp(init), 0);
}

TEST_F(UdTest, ReceiveStartsWithTheGrhArea) {
  for (bool v6 : {false, true}) {
    SCOPED_TRACE(v6 ? "IPv6" : "IPv4");
    ipv6_ = v6;
    const uint32_t qpn = make_qp(ud_options());
    auto rbuf = reg(4096);
    ASSERT_EQ(engine().post_recv(qpn, recv_wr(1, rbuf->sge(0, 4096))), 0);
    PacketHeaders h = ud_send(0x11111111, 0x888);
    h.l3.tos = 0x28;
    h.l3.ttl = 17;
    if (v6) h.l3.flow_label = 0x12345;
    const auto data = pattern(64, 2);
    // The IP header the peer's frame carries, as the test builds it.
    std::vector<uint8_t> frame(frame_len(h, 64));
    PacketLayout lay;
    ASSERT_NE(build_frame(h, data, frame), 0u);
    write_headers(h, 64, frame.data(), &lay);
    const size_t ip_len = v6 ? 40 : 20;
    const auto ip = slice(frame, lay.l3_off, ip_len);

    // Step: one datagram.
    deliver(h, data);
    // Expect: 40 bytes of GRH area, then the payload. IPv6: the whole IPv6 header;
    // IPv4 (Annex A17.4.5.1): 20 bytes left undefined, then the IPv4 header.
    auto wc = drain(rcq_);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].byte_len, 40u + 64);
    EXPECT_TRUE(wc[0].wc_flags & kWcGrh);
    // And sl says which (as mlx5 NICs report it, which UCX's ud_verbs reads):
    // RoCE v2 (bit 3) over IPv6 (1) or IPv4 (2).
    EXPECT_EQ(wc[0].sl, v6 ? 0x9 : 0xA);
    EXPECT_EQ(slice(rbuf->bytes, 40 - ip_len, ip_len), ip);
    EXPECT_EQ(slice(rbuf->bytes, 40, 64), data);
    // And read back by grh_area_addresses (droced's QP1 answers the address it finds there).
    IpAddr src{}, dst{};
    grh_area_addresses(rbuf->bytes.data(), &src, &dst);
    EXPECT_EQ(src, v6 ? peer_ip6() : peer_ip());
    EXPECT_EQ(dst, v6 ? local_ip6() : local_ip());
  }
}

// =====================================================================================
// IBA 1.5: ATOMIC WRITE and FLUSH, as rxe serves and sends them
// =====================================================================================

constexpr uint32_t kQpFlush = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic |
                              kAccessFlushGlobal | kAccessFlushPersistent;

TEST_F(ResponderTest, AtomicWriteStoresOnceAndAnswersWithAReadResponseOnly) {
  const uint32_t qpn = make_qp();
  auto mem = reg(64);
  mem->set_u64(8, 1);
  PacketHeaders h = peer(op::kAtomicWrite, kE, true);
  h.ext.reth = {mem->va() + 8, mem->rkey(), 8};
  const std::vector<uint8_t> bytes = {0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8};

  // Step: ATOMIC WRITE of 8 bytes at kE.
  deliver(h, bytes);
  // Expect: the 8 bytes in memory as sent; one RDMA READ RESPONSE ONLY for kE, no payload, AETH
  // ACK with MSN 1 (rxe's send_read_response_ack).
  auto out = sent();
  ASSERT_EQ(out.size(), 1u);
  expect_to_peer(out[0]);
  EXPECT_EQ(out[0].opcode(), rc(op::kReadResponseOnly));
  EXPECT_EQ(out[0].psn(), kE);
  EXPECT_EQ(out[0].ext().aeth.syndrome, kAckSyndrome);
  EXPECT_EQ(out[0].ext().aeth.msn, 1u);
  EXPECT_TRUE(out[0].payload().empty());
  EXPECT_EQ(slice(mem->bytes, 8, 8), bytes);

  // Step: memory changes; the same ATOMIC WRITE again (its answer was lost).
  mem->set_u64(8, 7);
  deliver(h, bytes);
  // Expect: the same answer, the memory not written again.
  out = sent();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), rc(op::kReadResponseOnly));
  EXPECT_EQ(out[0].psn(), kE);
  EXPECT_EQ(out[0].ext().aeth.msn, 1u);
  EXPECT_EQ(mem->u64(8), 7u);
  EXPECT_EQ(state(qpn), QpState::rts);
}

TEST_F(ResponderTest, AtomicWriteRefusalsAsRxeAnswersThem) {
  struct Case {
    const char* what;
    uint32_t qp_access;
    uint32_t mr_access;
    uint64_t offset;
    uint32_t dma_len;
    uint8_t syndrome;
  };
  const uint32_t all = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
  const Case cases[] = {
      {"QP without remote write: invalid request", all & ~kAccessRemoteWrite, all, 8, 8, kNakInvalidRequest},
      {"region without remote write: remote access error", all, kAccessLocalWrite | kAccessRemoteRead, 8, 8,
       kNakRemoteAccess},
      {"outside the region: remote access error", all, all, 60, 8, kNakRemoteAccess},
      {"RETH length 16: invalid request (oA19-28)", all, all, 8, 16, kNakInvalidRequest},
      {"not 8-byte aligned: invalid request", all, all, 4, 8, kNakInvalidRequest},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    QpOptions o;
    o.access = c.qp_access;
    const uint32_t qpn = make_qp(o);
    auto mem = reg(64, c.mr_access);
    PacketHeaders h = peer(op::kAtomicWrite, kE, true);
    h.ext.reth = {mem->va() + c.offset, mem->rkey(), c.dma_len};
    deliver(h, std::vector<uint8_t>(8, 0xee));
    expect_fatal_nak(qpn, kE, c.syndrome, 0, {});
    EXPECT_EQ(mem->u64(8), 0u);
  }
}

TEST_F(ResponderTest, FlushOfARangeAndOfTheWholeRegion) {
  QpOptions o;
  o.access = kQpFlush;
  const uint32_t qpn = make_qp(o);
  auto mem = reg(4096, kAccessLocalWrite | kAccessRemoteWrite | kAccessFlushGlobal);

  // Step: FLUSH global, range [64, 64 + 1024) at kE; then global, whole region, length 0 and an
  // address outside the region at kE+1 (the whole region needs no range).
  PacketHeaders f = peer(op::kFlush, kE, true);
  f.ext.feth = {kFlushGlobal, kFlushRange, 0};
  f.ext.reth = {mem->va() + 64, mem->rkey(), 1024};
  deliver(f);
  PacketHeaders g = peer(op::kFlush, psn(kE, 1), true);
  g.ext.feth = {kFlushGlobal, kFlushMr, 0};
  g.ext.reth = {1, mem->rkey(), 0};
  deliver(g);
  // Expect: a READ RESPONSE ONLY of no payload for each, MSN 1 then 2.
  auto out = sent();
  ASSERT_EQ(out.size(), 2u);
  for (uint32_t i = 0; i < 2; ++i) {
    EXPECT_EQ(out[i].opcode(), rc(op::kReadResponseOnly));
    EXPECT_EQ(out[i].psn(), psn(kE, i));
    EXPECT_EQ(out[i].ext().aeth.syndrome, kAckSyndrome);
    EXPECT_EQ(out[i].ext().aeth.msn, i + 1);
    EXPECT_TRUE(out[i].payload().empty());
  }
  // Step: the first FLUSH again.
  deliver(f);
  // Expect: answered again from its resource, MSN 1.
  out = sent();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), rc(op::kReadResponseOnly));
  EXPECT_EQ(out[0].psn(), kE);
  EXPECT_EQ(out[0].ext().aeth.msn, 1u);
  EXPECT_EQ(state(qpn), QpState::rts);
}

TEST_F(ResponderTest, FlushRefusalsAsRxeAnswersThem) {
  struct Case {
    const char* what;
    uint32_t qp_access;
    uint32_t mr_access;
    uint8_t type;
    uint64_t offset;
    uint32_t length;
    uint8_t syndrome;
  };
  const uint32_t lw = kAccessLocalWrite | kAccessRemoteWrite;
  const Case cases[] = {
      {"QP without FLUSH_GLOBAL: invalid request", lw | kAccessFlushPersistent, lw | kAccessFlushGlobal,
       kFlushGlobal, 0, 64, kNakInvalidRequest},
      {"region without FLUSH_GLOBAL: remote access error", kQpFlush, lw, kFlushGlobal, 0, 64, kNakRemoteAccess},
      // pyverbs' test_qp_ex_rc_flush_type_violate: no region here takes FLUSH_PERSISTENT.
      {"persistent placement: remote access error", kQpFlush, lw | kAccessFlushGlobal, kFlushPersistent, 0, 64,
       kNakRemoteAccess},
      {"range past the region: remote access error", kQpFlush, lw | kAccessFlushGlobal, kFlushGlobal, 4000, 200,
       kNakRemoteAccess},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    QpOptions o;
    o.access = c.qp_access;
    const uint32_t qpn = make_qp(o);
    auto mem = reg(4096, c.mr_access);
    PacketHeaders f = peer(op::kFlush, kE, true);
    f.ext.feth = {c.type, kFlushRange, 0};
    f.ext.reth = {mem->va() + c.offset, mem->rkey(), c.length};
    deliver(f);
    expect_fatal_nak(qpn, kE, c.syndrome, 0, {});
  }
}

TEST_F(RequesterTest, AtomicWriteAndFlushGoOutAsRxeSendsThemAndCompleteOnTheirAnswers) {
  const uint32_t qpn = make_qp();
  SendWr aw;
  aw.wr_id = 1;
  aw.opcode = WrOpcode::atomic_write;
  aw.send_flags = kSendSignaled;
  aw.remote_addr = 0x7f0000002000;
  aw.rkey = 0x1234;
  const uint8_t bytes[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  std::memcpy(&aw.compare_add, bytes, 8);
  SendWr fl;
  fl.wr_id = 2;
  fl.opcode = WrOpcode::flush;
  fl.send_flags = kSendSignaled;
  fl.remote_addr = 0x7f0000001000;
  fl.rkey = 0x1234;
  fl.compare_add = 4096;
  fl.flush_type = kFlushGlobal;
  fl.flush_level = kFlushMr;

  // Step: post the ATOMIC WRITE, then the FLUSH; one poll.
  ASSERT_EQ(engine().post_send(qpn, aw), 0);
  ASSERT_EQ(engine().post_send(qpn, fl), 0);
  at(now_);
  // Expect: ATOMIC WRITE at kS (AckReq, RETH va rkey 8, the 8 bytes), then FLUSH at kS+1 (AckReq,
  // FETH type 1 level 1, RETH va rkey 4096, no payload).
  auto out = sent();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].opcode(), rc(op::kAtomicWrite));
  EXPECT_EQ(out[0].psn(), kS);
  EXPECT_TRUE(out[0].bth().ackreq);
  EXPECT_EQ(out[0].ext().reth, (Reth{0x7f0000002000, 0x1234, 8}));
  EXPECT_EQ(out[0].payload(), std::vector<uint8_t>(bytes, bytes + 8));
  EXPECT_EQ(out[1].opcode(), rc(op::kFlush));
  EXPECT_EQ(out[1].psn(), psn(kS, 1));
  EXPECT_TRUE(out[1].bth().ackreq);
  EXPECT_EQ(out[1].ext().feth, (Feth{kFlushGlobal, kFlushMr, 0}));
  EXPECT_EQ(out[1].ext().reth, (Reth{0x7f0000001000, 0x1234, 4096}));
  EXPECT_TRUE(out[1].payload().empty());

  // Step: a plain ACK of kS+1 (not their answer).
  deliver(ack(psn(kS, 1), kAckSyndrome, 2));
  // Expect: nothing completes (each waits for its own response), and they are sent again.
  EXPECT_TRUE(drain(scq_).empty());
  (void)sent();

  // Step: their answers, READ RESPONSE ONLY of no payload at kS and kS+1.
  deliver(read_response(op::kReadResponseOnly, kS, 1));
  deliver(read_response(op::kReadResponseOnly, psn(kS, 1), 2));
  // Expect: two completions in order, IBV_WC_ATOMIC_WRITE (byte_len 8) and IBV_WC_FLUSH (4096).
  auto wc = drain(scq_);
  ASSERT_EQ(wc.size(), 2u);
  expect_completion(wc[0], 1, WcStatus::success, WcOpcode::atomic_write);
  EXPECT_EQ(wc[0].byte_len, 8u);
  expect_completion(wc[1], 2, WcStatus::success, WcOpcode::flush);
  EXPECT_EQ(wc[1].byte_len, 4096u);
  EXPECT_EQ(state(qpn), QpState::rts);
}

TEST_F(RequesterTest, AtomicWriteAndFlushTakeNoScatterList) {
  const uint32_t qpn = make_qp();
  auto src = reg(64);
  SendWr w = send_wr(WrOpcode::atomic_write, 1, src->sge(0, 8));
  EXPECT_EQ(engine().post_send(qpn, w), -EINVAL);
  w.opcode = WrOpcode::flush;
  EXPECT_EQ(engine().post_send(qpn, w), -EINVAL);
  w.num_sge = 0;
  w.compare_add = 0x80000001ull;  // past 2^31
  EXPECT_EQ(engine().post_send(qpn, w), -EINVAL);
}

}  // namespace
}  // namespace droce::test
