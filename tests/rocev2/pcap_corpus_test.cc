// Byte-level agreement with the Linux kernel's rxe: every packet it put on the
// wire in ../shared/pcaps parses, its ICRC recomputed by droce equals the
// captured one, and rebuilding it from the parsed fields gives the same bytes.
// Field checks against what the peers logged (NAME.log) follow.

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "net/pcap_file.h"
#include "rocev2/builder.h"
#include "rocev2/icrc.h"
#include "rocev2/parser.h"
#include "tests/test_support.h"

namespace droce::rocev2 {
namespace {

struct Capture {
  std::vector<net::CapturedFrame> frames;
  std::vector<ParsedPacket> packets;
};

Capture load(const std::string& name) {
  Capture c;
  const auto path = test::pcap_dir() / (name + ".pcap");
  std::string error;
  c.frames = net::read_pcap(path.string(), &error);
  EXPECT_TRUE(error.empty()) << path << ": " << error;
  for (const auto& f : c.frames) {
    ParsedPacket p;
    EXPECT_EQ(parse_frame(std::span<const uint8_t>(f.bytes), &p), ParseStatus::ok);
    c.packets.push_back(p);
  }
  return c;
}

const char* const kCaptures[] = {"rc_pingpong_64B", "ud_pingpong_512B", "rc_send_verbs",  "rc_write_verbs",
                                 "rc_read_verbs",   "rc_atomic_verbs",  "nak_rnr",        "nak_remote_access",
                                 "nak_psn_seq_loss", "host_scapy_to_rxe"};

class RxeCapture : public ::testing::TestWithParam<const char*> {};

TEST_P(RxeCapture, EveryPacketParsesKeepsItsIcrcAndRebuildsToTheSameBytes) {
  const auto path = test::pcap_dir() / (std::string(GetParam()) + ".pcap");
  if (!std::filesystem::exists(test::pcap_dir())) GTEST_SKIP() << "no " << test::pcap_dir() << " beside the checkout";
  std::string error;
  const auto frames = net::read_pcap(path.string(), &error);
  ASSERT_TRUE(error.empty()) << error;
  ASSERT_FALSE(frames.empty());
  for (size_t i = 0; i < frames.size(); ++i) {
    SCOPED_TRACE("frame " + std::to_string(i + 1));
    const auto& bytes = frames[i].bytes;
    ParsedPacket p;
    ASSERT_EQ(parse_frame(std::span<const uint8_t>(bytes), &p), ParseStatus::ok) << test::hex(bytes);

    // Expect: droce's ICRC over the frame equals the one rxe put there.
    bool ok = false;
    const uint32_t icrc = compute_icrc(net::FrameBytes(std::span<const uint8_t>(bytes)), p.layout.l3_off,
                                       p.layout.icrc_off, p.hdr.l3.version, &ok);
    ASSERT_TRUE(ok);
    EXPECT_EQ(icrc, p.icrc);

    // Expect: the parsed fields and payload rebuild the identical frame.
    std::span<const uint8_t> payload(bytes.data() + p.layout.payload_off, p.layout.payload_len);
    std::vector<uint8_t> rebuilt(bytes.size() + 64);
    const size_t len = build_frame(p.hdr, payload, rebuilt);
    ASSERT_EQ(len, p.layout.icrc_off + kIcrcLen);
    rebuilt.resize(len);
    const std::vector<uint8_t> original(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(len));
    EXPECT_EQ(rebuilt, original) << "rebuilt:\n" << test::hex(rebuilt) << "\noriginal:\n" << test::hex(original);
    EXPECT_EQ(p.hdr, canonical(p.hdr, p.layout.payload_len));
  }
}

INSTANTIATE_TEST_SUITE_P(AllCaptures, RxeCapture, ::testing::ValuesIn(kCaptures),
                         [](const auto& param_info) { return std::string(param_info.param); });

class RxeFields : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(test::pcap_dir())) GTEST_SKIP() << "no " << test::pcap_dir();
  }
};

TEST_F(RxeFields, SendVerbsCarryImmediateAndSegmentByPathMtu) {
  const Capture c = load("rc_send_verbs");
  // Expect: SEND only 64 B, ACK, SEND only with immediate 0xdeadbeef (32 B),
  // ACK, then a 2,500 B SEND as first/middle/last with 1024 B per full packet.
  std::vector<uint8_t> ops;
  for (const auto& p : c.packets) ops.push_back(p.hdr.bth.opcode);
  EXPECT_EQ(ops, (std::vector<uint8_t>{0x04, 0x11, 0x05, 0x11, 0x00, 0x01, 0x02, 0x11}));
  EXPECT_EQ(c.packets[0].layout.payload_len, 64u);
  EXPECT_EQ(c.packets[2].hdr.ext.imm.imm, 0xdeadbeefu);
  EXPECT_EQ(c.packets[2].layout.payload_len, 32u);
  EXPECT_EQ(c.packets[4].layout.payload_len, 1024u);
  EXPECT_EQ(c.packets[5].layout.payload_len, 1024u);
  EXPECT_EQ(c.packets[6].layout.payload_len, 2500u - 2048u);
  // rxe's facts: AckReq on only/last, P_Key 0xFFFF, UDP checksum 0, DF, TTL 64.
  EXPECT_TRUE(c.packets[0].hdr.bth.ackreq);
  EXPECT_FALSE(c.packets[4].hdr.bth.ackreq);
  EXPECT_TRUE(c.packets[6].hdr.bth.ackreq);
  for (const auto& p : c.packets) {
    EXPECT_EQ(p.hdr.bth.pkey, 0xffff);
    EXPECT_EQ(p.hdr.l4.checksum, 0);
    EXPECT_EQ(p.hdr.l3.ttl, 64);
    EXPECT_TRUE(p.hdr.l3.ipv4_frag & net::kIpv4FlagDf);
    EXPECT_EQ(p.hdr.l4.src_port & 0xc000, 0xc000);
  }
  // Consecutive PSNs across the multi-packet message.
  EXPECT_EQ(c.packets[5].hdr.bth.psn, psn_add(c.packets[4].hdr.bth.psn, 1));
  EXPECT_EQ(c.packets[6].hdr.bth.psn, psn_add(c.packets[4].hdr.bth.psn, 2));
  // The ACK after the 3-packet message acknowledges its last PSN, syndrome 0x1F.
  EXPECT_EQ(c.packets[7].hdr.bth.psn, c.packets[6].hdr.bth.psn);
  EXPECT_EQ(c.packets[7].hdr.ext.aeth.syndrome, 0x1f);
}

TEST_F(RxeFields, AtomicsCarryAtomicEthAndTheOriginalValueComesBack) {
  const Capture c = load("rc_atomic_verbs");
  ASSERT_EQ(c.packets.size(), 6u);
  EXPECT_EQ(c.packets[0].hdr.bth.opcode, make_opcode(Transport::rc, op::kFetchAdd));
  EXPECT_EQ(c.packets[0].hdr.ext.atomic_eth.swap_add, 1u);
  EXPECT_EQ(c.packets[1].hdr.bth.opcode, make_opcode(Transport::rc, op::kAtomicAcknowledge));
  EXPECT_EQ(c.packets[1].hdr.ext.atomic_ack_eth.orig, 0x5a5a5a5a5a5a5a5au);
  EXPECT_EQ(c.packets[2].hdr.bth.opcode, make_opcode(Transport::rc, op::kCompareSwap));
  EXPECT_EQ(c.packets[2].hdr.ext.atomic_eth.va, c.packets[0].hdr.ext.atomic_eth.va);
}

TEST_F(RxeFields, NakSyndromesAreTheSpecificationsCodes) {
  // RNR NAK: AETH 0x21 (kind 1, timer code 1), three times for rnr_retry 2.
  const Capture rnr = load("nak_rnr");
  int rnr_naks = 0;
  for (const auto& p : rnr.packets) {
    if (p.hdr.bth.opcode != 0x11) continue;
    EXPECT_EQ(p.hdr.ext.aeth.kind(), AethKind::rnr_nak);
    EXPECT_EQ(p.hdr.ext.aeth.value(), 1);
    ++rnr_naks;
  }
  EXPECT_EQ(rnr_naks, 3);

  const Capture access = load("nak_remote_access");
  ASSERT_EQ(access.packets.size(), 2u);
  EXPECT_EQ(access.packets[1].hdr.ext.aeth.syndrome, 0x62);
  EXPECT_EQ(access.packets[1].hdr.ext.aeth.kind(), AethKind::nak);
  EXPECT_EQ(static_cast<NakCode>(access.packets[1].hdr.ext.aeth.value()), NakCode::remote_access_error);

  // Go-back-N under loss: PSN sequence NAKs (0x60), and every NAKed PSN is sent again.
  const Capture loss = load("nak_psn_seq_loss");
  std::multiset<uint32_t> request_psns;
  std::vector<uint32_t> nak_psns;
  for (const auto& p : loss.packets) {
    if (p.info->requester) request_psns.insert(p.hdr.bth.psn);
    if (p.hdr.bth.opcode == 0x11 && p.hdr.ext.aeth.syndrome == 0x60) nak_psns.push_back(p.hdr.bth.psn);
  }
  ASSERT_FALSE(nak_psns.empty());
  for (uint32_t psn : nak_psns) EXPECT_GE(request_psns.count(psn), 1u) << "NAKed PSN " << psn << " never resent";
}

TEST_F(RxeFields, UdSendCarriesDethWithQkeyAndSourceQp) {
  const Capture c = load("ud_pingpong_512B");
  for (const auto& p : c.packets) {
    EXPECT_EQ(p.hdr.bth.opcode, make_opcode(Transport::ud, op::kSendOnly));
    EXPECT_EQ(p.layout.payload_len, 512u);
    EXPECT_NE(p.hdr.ext.deth.src_qp, 0u);
    EXPECT_EQ(p.hdr.ext.deth.resv8, 0);
  }
}

TEST_F(RxeFields, ReadResponsesCarryAethOnlyOnFirstLastAndOnly) {
  const Capture c = load("rc_read_verbs");
  int responses = 0;
  for (const auto& p : c.packets) {
    if (p.info->kind != OpKind::read_response) continue;
    ++responses;
    EXPECT_EQ(p.info->has(kHdrAeth), p.info->position != Position::middle);
  }
  EXPECT_EQ(responses, 4);
}

}  // namespace
}  // namespace droce::rocev2
