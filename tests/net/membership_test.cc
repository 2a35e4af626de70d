// IGMPv2 / MLDv1 host reports for droce's multicast groups (net/membership.h). The expected
// frames were built by scapy (Ether/IP(options=Router_Alert)/IGMP, IPv6/HopByHop(RouterAlert,
// PadN)/ICMPv6MLReport), an implementation that is not droce's; queries likewise.

#include "net/membership.h"

#include <gtest/gtest.h>

#include <string>

namespace droce::net {
namespace {

std::vector<uint8_t> hex(const std::string& s) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < s.size(); i += 2) out.push_back(static_cast<uint8_t>(std::stoul(s.substr(i, 2), nullptr, 16)));
  return out;
}

const MacAddr kMac = {0x02, 0, 0, 0, 0, 0x01};
const IpAddr kSrc4 = ipv4_mapped(0x0a4d0001);                 // 10.77.0.1
const IpAddr kGroup4 = ipv4_mapped(0xef010203);               // 239.1.2.3
const IpAddr kSrc6 = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01};
const IpAddr kGroup6 = {0xff, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x42};
constexpr uint64_t kSecond = 1'000'000'000;

// scapy: the report for 239.1.2.3 from 10.77.0.1, the leave (to 224.0.0.2), the MLD report for
// ff0e::42 from fe80::1, an IGMPv2 general query (1 s), an MLDv1 general query (500 ms).
const char* const kIgmpReport =
    "01005e010203020000000001080046c00020000040000102e8c50a4d0001ef010203940400001600f8faef010203";
const char* const kIgmpLeave =
    "01005e000002020000000001080046c00020000040000102f9c70a4d0001e0000002940400001700f7faef010203";
const char* const kMldReport =
    "33330000004202000000000186dd6000000000200001fe800000000000000000000000000001ff0e000000000000000000000000"
    "00423a0005020000010083007f8900000000ff0e0000000000000000000000000042";
const char* const kIgmpQuery =
    "01005e000001020000000099080046000020000100000102398b0a4d00fee000000194040000110aeef500000000";
const char* const kMldQuery =
    "33330000000102000000009986dd6000000000200001fe800000000000000000000000000099ff02000000000000000000000000"
    "00013a0005020000010082007d9b01f4000000000000000000000000000000000000";

std::vector<std::vector<uint8_t>> drain(MembershipReporter& r) {
  std::vector<std::vector<uint8_t>> out;
  r.drain_tx(&out);
  return out;
}

TEST(Membership, AJoinReportsTwiceAndALeaveSaysSoAsScapyBuildsThem) {
  MembershipReporter r(MembershipConfig{kMac});
  // Step: 10.77.0.1 joins 239.1.2.3 (twice: one membership).
  r.join(kSrc4, kGroup4, 0);
  r.join(kSrc4, kGroup4, 0);
  // Expect: one report at once, byte for byte; the repeat due a second later.
  auto tx = drain(r);
  ASSERT_EQ(tx.size(), 1u);
  EXPECT_EQ(tx[0], hex(kIgmpReport));
  EXPECT_EQ(r.next_deadline_ns(), kSecond);
  r.poll(kSecond - 1);
  EXPECT_TRUE(drain(r).empty());
  r.poll(kSecond);
  tx = drain(r);
  ASSERT_EQ(tx.size(), 1u);
  EXPECT_EQ(tx[0], hex(kIgmpReport));
  EXPECT_EQ(r.next_deadline_ns(), UINT64_MAX);
  // Step: leave, twice.
  r.leave(kSrc4, kGroup4, 2 * kSecond);
  r.leave(kSrc4, kGroup4, 2 * kSecond);
  tx = drain(r);
  ASSERT_EQ(tx.size(), 1u);
  EXPECT_EQ(tx[0], hex(kIgmpLeave));
  EXPECT_EQ(r.counters().reports_sent, 2u);
  EXPECT_EQ(r.counters().leaves_sent, 1u);
  EXPECT_TRUE(r.groups().empty());
}

TEST(Membership, AnIpv6GroupIsReportedWithMld) {
  MembershipReporter r(MembershipConfig{kMac});
  r.join(kSrc6, kGroup6, 0);
  auto tx = drain(r);
  ASSERT_EQ(tx.size(), 1u);
  EXPECT_EQ(tx[0], hex(kMldReport));
  r.leave(kSrc6, kGroup6, 0);
  tx = drain(r);
  ASSERT_EQ(tx.size(), 1u);
  // The Done goes to ff02::2 (33:33:00:00:00:02), ICMPv6 type 132.
  EXPECT_EQ(std::vector<uint8_t>(tx[0].begin(), tx[0].begin() + 6), hex("333300000002"));
  EXPECT_EQ(tx[0][14 + 40 + 8], 132);
}

TEST(Membership, AllHostsAndNodeLocalGroupsAreNeverReported) {
  MembershipReporter r(MembershipConfig{kMac});
  r.join(kSrc4, ipv4_mapped(0xe0000001), 0);  // 224.0.0.1
  IpAddr node_local = kGroup6;
  node_local[1] = 0x01;  // ff01::42
  r.join(kSrc6, node_local, 0);
  r.leave(kSrc4, ipv4_mapped(0xe0000001), 0);
  EXPECT_TRUE(drain(r).empty());
  EXPECT_EQ(r.next_deadline_ns(), UINT64_MAX);
}

TEST(Membership, AQueryIsAnsweredWithinItsMaxResponseTime) {
  MembershipConfig cfg{kMac};
  cfg.vlan = 7;
  MembershipReporter r(cfg);
  r.join(kSrc4, kGroup4, 0);
  r.join(kSrc6, kGroup6, 0);
  r.poll(10 * kSecond);  // the joins' repeats
  drain(r);
  // Step: an IGMPv2 general query (max 1 s) at t = 100 s.
  const uint64_t t = 100 * kSecond;
  EXPECT_TRUE(r.handle_frame(hex(kIgmpQuery), t));
  // Expect: the IPv4 group's report is due within a second; the IPv6 group's is not asked for.
  EXPECT_GE(r.next_deadline_ns(), t);
  EXPECT_LE(r.next_deadline_ns(), t + kSecond);
  r.poll(t + kSecond);
  auto tx = drain(r);
  ASSERT_EQ(tx.size(), 1u);
  // Tagged on VLAN 7 this time: 802.1Q after the MACs, then the same IPv4 packet.
  EXPECT_EQ(std::vector<uint8_t>(tx[0].begin() + 12, tx[0].begin() + 18), hex("810000070800"));
  EXPECT_EQ(tx[0][18 + 24], 0x16);
  // Step: an MLD general query (500 ms).
  EXPECT_TRUE(r.handle_frame(hex(kMldQuery), t + 2 * kSecond));
  EXPECT_LE(r.next_deadline_ns(), t + 2 * kSecond + kSecond / 2);
  r.poll(t + 3 * kSecond);
  tx = drain(r);
  ASSERT_EQ(tx.size(), 1u);
  EXPECT_EQ(tx[0][18 + 40 + 8], 131);
  EXPECT_EQ(r.counters().queries_seen, 2u);
}

TEST(Membership, BadAndForeignFramesAreNotTakenForQueries) {
  MembershipReporter r(MembershipConfig{kMac});
  r.join(kSrc4, kGroup4, 0);
  r.poll(10 * kSecond);
  drain(r);
  // A query with a wrong checksum; a query for another group; a report from another host.
  auto bad = hex(kIgmpQuery);
  bad.back() ^= 1;
  EXPECT_TRUE(r.handle_frame(bad, 20 * kSecond));
  auto other = hex(kIgmpQuery);
  other[14 + 24 + 4] = 0xef;  // group 239.0.0.0, with the checksum mended below
  other[14 + 24 + 2] = 0;
  other[14 + 24 + 3] = 0;
  uint32_t sum = 0;
  for (size_t i = 0; i < 8; i += 2) sum += (other[14 + 24 + i] << 8) | other[14 + 24 + i + 1];
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  other[14 + 24 + 2] = static_cast<uint8_t>(~sum >> 8);
  other[14 + 24 + 3] = static_cast<uint8_t>(~sum);
  EXPECT_TRUE(r.handle_frame(other, 20 * kSecond));
  EXPECT_TRUE(r.handle_frame(hex(kIgmpReport), 20 * kSecond));
  // Not IGMP at all: left to others.
  auto udp = hex(kIgmpQuery);
  udp[14 + 9] = 17;
  EXPECT_FALSE(r.handle_frame(udp, 20 * kSecond));
  EXPECT_FALSE(r.handle_frame(hex("0102"), 20 * kSecond));
  // Expect: nothing scheduled, three counted as ignored.
  EXPECT_EQ(r.next_deadline_ns(), UINT64_MAX);
  EXPECT_EQ(r.counters().frames_ignored, 3u);
  EXPECT_EQ(r.counters().queries_seen, 0u);
}

}  // namespace
}  // namespace droce::net
