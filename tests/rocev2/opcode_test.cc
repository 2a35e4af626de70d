// The opcode table against IBA Vol. 1 table 38 and Annex A17.

#include <gtest/gtest.h>

#include "rocev2/headers.h"
#include "rocev2/opcode.h"

namespace droce::rocev2 {
namespace {

uint8_t rc(uint8_t o) { return make_opcode(Transport::rc, o); }
uint8_t uc(uint8_t o) { return make_opcode(Transport::uc, o); }
uint8_t ud(uint8_t o) { return make_opcode(Transport::ud, o); }

TEST(OpcodeTable, ExtensionHeaderLengthsFollowTheSpecification) {
  EXPECT_EQ(opcode_info(rc(op::kSendOnly)).ext_len, 0);
  EXPECT_EQ(opcode_info(rc(op::kSendOnlyImm)).ext_len, 4);
  EXPECT_EQ(opcode_info(rc(op::kWriteFirst)).ext_len, 16);
  EXPECT_EQ(opcode_info(rc(op::kWriteMiddle)).ext_len, 0);
  EXPECT_EQ(opcode_info(rc(op::kWriteOnlyImm)).ext_len, 20);
  EXPECT_EQ(opcode_info(rc(op::kReadRequest)).ext_len, 16);
  EXPECT_EQ(opcode_info(rc(op::kReadResponseFirst)).ext_len, 4);
  EXPECT_EQ(opcode_info(rc(op::kReadResponseMiddle)).ext_len, 0);
  EXPECT_EQ(opcode_info(rc(op::kAcknowledge)).ext_len, 4);
  EXPECT_EQ(opcode_info(rc(op::kAtomicAcknowledge)).ext_len, 12);
  EXPECT_EQ(opcode_info(rc(op::kCompareSwap)).ext_len, 28);
  EXPECT_EQ(opcode_info(rc(op::kSendLastInv)).ext_len, 4);
  EXPECT_EQ(opcode_info(ud(op::kSendOnly)).ext_len, 8);
  EXPECT_EQ(opcode_info(ud(op::kSendOnlyImm)).ext_len, 12);
  EXPECT_EQ(opcode_info(kOpcodeCnp).ext_len, 16);
  EXPECT_EQ(opcode_info(rc(op::kFlush)).ext_len, 20);        // FETH 4 + RETH 16
  EXPECT_EQ(opcode_info(rc(op::kAtomicWrite)).ext_len, 16);  // RETH
}

// IBA 1.5 (Annex A19), as rxe's rxe_opcode.c has them: RC only, first and last at once.
TEST(OpcodeTable, FlushAndAtomicWrite) {
  const auto& flush = opcode_info(0x1c);
  EXPECT_STREQ(flush.name, "RC_FLUSH");
  EXPECT_TRUE(flush.valid());
  EXPECT_EQ(flush.kind, OpKind::flush);
  EXPECT_EQ(flush.position, Position::only);
  EXPECT_TRUE(flush.has(kHdrFeth) && flush.has(kHdrReth));
  EXPECT_FALSE(flush.payload);
  EXPECT_TRUE(flush.requester);
  const auto& aw = opcode_info(0x1d);
  EXPECT_STREQ(aw.name, "RC_ATOMIC_WRITE");
  EXPECT_TRUE(aw.valid());
  EXPECT_EQ(aw.kind, OpKind::atomic_write);
  EXPECT_EQ(aw.position, Position::only);
  EXPECT_EQ(aw.headers, kHdrReth);
  EXPECT_TRUE(aw.payload);
  EXPECT_TRUE(aw.requester);
  EXPECT_EQ(opcode_info(uc(op::kFlush)).cls, OpcodeClass::invalid_for_transport);
  EXPECT_EQ(opcode_info(uc(op::kAtomicWrite)).cls, OpcodeClass::invalid_for_transport);
  EXPECT_EQ(opcode_info(ud(op::kAtomicWrite)).cls, OpcodeClass::invalid_for_transport);
  EXPECT_STREQ(to_string(OpKind::flush), "flush");
  EXPECT_STREQ(to_string(OpKind::atomic_write), "atomic_write");
}

uint8_t xrc(uint8_t o) { return make_opcode(Transport::xrc, o); }

// Annex A14 (XRC), as Wireshark's dissector and mlx5 have it: RC's operations 0x00-0x17 on
// transport 0b101; every request carries an XRCETH (4 bytes) right after the BTH, before its
// RETH, AtomicETH, ImmDt or IETH; responses carry none. IBA 1.5's FLUSH and ATOMIC WRITE are RC's.
TEST(OpcodeTable, XrcRequestsCarryAnXrcethFirst) {
  EXPECT_EQ(xrc(op::kSendFirst), 0xa0);
  EXPECT_STREQ(opcode_info(xrc(op::kSendOnly)).name, "XRC_SEND_ONLY");
  EXPECT_STREQ(to_string(Transport::xrc), "XRC");
  for (unsigned o = 0; o < 32; ++o) {
    const OpcodeInfo& r = opcode_info(rc(static_cast<uint8_t>(o)));
    const OpcodeInfo& x = opcode_info(xrc(static_cast<uint8_t>(o)));
    SCOPED_TRACE(o);
    EXPECT_EQ(x.transport, Transport::xrc);
    if (o == op::kFlush || o == op::kAtomicWrite) {
      EXPECT_EQ(x.cls, OpcodeClass::invalid_for_transport);
      continue;
    }
    EXPECT_EQ(x.cls, r.cls);
    if (!r.valid()) continue;
    EXPECT_EQ(x.kind, r.kind);
    EXPECT_EQ(x.position, r.position);
    EXPECT_EQ(x.payload, r.payload);
    EXPECT_EQ(x.requester, r.requester);
    EXPECT_EQ(x.has(kHdrXrceth), r.requester);
    EXPECT_EQ(x.headers & ~kHdrXrceth, r.headers);
    EXPECT_EQ(x.ext_len, r.ext_len + (r.requester ? 4 : 0));
  }
  EXPECT_EQ(opcode_info(xrc(op::kCompareSwap)).ext_len, 32);    // XRCETH 4 + AtomicETH 28
  EXPECT_EQ(opcode_info(xrc(op::kWriteOnlyImm)).ext_len, 24);   // XRCETH, RETH, ImmDt
  EXPECT_EQ(opcode_info(xrc(op::kAcknowledge)).ext_len, 4);     // AETH only
  EXPECT_EQ(header_len(kHdrXrceth), 4);
  EXPECT_EQ(opcode_info(make_opcode(Transport::reserved6, op::kSendOnly)).cls, OpcodeClass::unknown);
}

TEST(OpcodeTable, TransportsAllowOnlyTheirOperations) {
  int rc_valid = 0, uc_valid = 0, ud_valid = 0;
  for (unsigned o = 0; o < 32; ++o) {
    rc_valid += opcode_info(rc(uint8_t(o))).valid();
    uc_valid += opcode_info(uc(uint8_t(o))).valid();
    ud_valid += opcode_info(ud(uint8_t(o))).valid();
  }
  EXPECT_EQ(rc_valid, 25);  // 0x00-0x14, 0x16, 0x17, 0x1c, 0x1d
  EXPECT_EQ(uc_valid, 12);  // SEND and WRITE
  EXPECT_EQ(ud_valid, 2);   // SEND only, with or without immediate
  EXPECT_EQ(opcode_info(uc(op::kReadRequest)).cls, OpcodeClass::invalid_for_transport);
  EXPECT_EQ(opcode_info(ud(op::kWriteOnly)).cls, OpcodeClass::invalid_for_transport);
  EXPECT_EQ(opcode_info(ud(op::kSendFirst)).cls, OpcodeClass::invalid_for_transport);
  EXPECT_EQ(opcode_info(make_opcode(Transport::rd, op::kSendOnly)).cls, OpcodeClass::unsupported_transport);
  EXPECT_EQ(opcode_info(rc(0x15)).cls, OpcodeClass::unknown);
  EXPECT_EQ(opcode_info(rc(0x1f)).cls, OpcodeClass::unknown);
  EXPECT_EQ(opcode_info(0x80).cls, OpcodeClass::unknown);
  EXPECT_EQ(opcode_info(0xff).cls, OpcodeClass::unknown);
  EXPECT_TRUE(opcode_info(kOpcodeCnp).valid());
}

TEST(OpcodeTable, PositionsPayloadAndDirection) {
  const auto& first = opcode_info(rc(op::kSendFirst));
  EXPECT_EQ(first.position, Position::first);
  EXPECT_TRUE(first.starts_message());
  EXPECT_FALSE(first.ends_message());
  EXPECT_TRUE(first.payload);
  EXPECT_TRUE(first.requester);
  EXPECT_FALSE(first.responder);

  const auto& read = opcode_info(rc(op::kReadRequest));
  EXPECT_FALSE(read.payload);
  EXPECT_TRUE(read.requester);

  const auto& resp = opcode_info(rc(op::kReadResponseMiddle));
  EXPECT_TRUE(resp.payload);
  EXPECT_TRUE(resp.responder);
  EXPECT_EQ(resp.position, Position::middle);

  const auto& ack = opcode_info(rc(op::kAcknowledge));
  EXPECT_FALSE(ack.payload);
  EXPECT_TRUE(ack.responder);
  EXPECT_EQ(ack.kind, OpKind::ack);

  EXPECT_TRUE(opcode_info(rc(op::kWriteLastImm)).immediate());
  EXPECT_TRUE(opcode_info(rc(op::kSendOnlyInv)).invalidate());
  EXPECT_TRUE(opcode_info(ud(op::kSendOnly)).has(kHdrDeth));
  EXPECT_STREQ(opcode_info(ud(op::kSendOnlyImm)).name, "UD_SEND_ONLY_WITH_IMMEDIATE");
  EXPECT_STREQ(opcode_info(rc(op::kReadResponseLast)).name, "RC_RDMA_READ_RESPONSE_LAST");
  EXPECT_STREQ(opcode_info(kOpcodeCnp).name, "CNP");
}

TEST(PsnArithmetic, ComparesAcrossThe24BitWrap) {
  EXPECT_EQ(psn_add(0xffffff, 1), 0u);
  EXPECT_LT(psn_diff(0xffffff, 0), 0);  // 0xffffff is just before 0
  EXPECT_GT(psn_diff(0, 0xffffff), 0);
  EXPECT_EQ(psn_diff(5, 5), 0);
  EXPECT_EQ(psn_diff(0x000002, 0xfffffe), 4);
  EXPECT_EQ(psn_diff(0x7fffff, 0), 0x7fffff);
  EXPECT_EQ(psn_diff(0x800000, 0), -0x800000);  // half the space away reads as behind
}

}  // namespace
}  // namespace droce::rocev2

namespace droce::rocev2 {
namespace {

TEST(Aeth, SyndromeKindsAndReservedBits) {
  EXPECT_EQ((Aeth{0x1f, 0}).kind(), AethKind::ack);
  EXPECT_EQ((Aeth{0x21, 0}).kind(), AethKind::rnr_nak);
  EXPECT_EQ((Aeth{0x62, 0}).kind(), AethKind::nak);
  EXPECT_EQ((Aeth{0x62, 0}).value(), 2);
  EXPECT_EQ((Aeth{0x40, 0}).kind(), AethKind::reserved);
  // Bit 7 set is reserved whatever follows (found by the parser fuzzer).
  for (unsigned s = 0x80; s < 0x100; ++s) EXPECT_EQ((Aeth{uint8_t(s), 0}).kind(), AethKind::reserved);
  EXPECT_EQ(Aeth::make_syndrome(AethKind::rnr_nak, 14), 0x2e);
}

}  // namespace
}  // namespace droce::rocev2
