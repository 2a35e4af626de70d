// NeighborTable: ARP (RFC 826) and IPv6 ND (RFC 4861) answered and resolved
// without a port. Frames fed in are built here, independently of the table's
// own builders; frames it emits are checked field by field, one ARP reply and
// one NA byte for byte against frames written out from the RFCs, and the
// table's requests are fed to a second table to prove both ends agree.

#include "net/neighbor.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <vector>

#include "tests/test_support.h"

namespace droce::net {
namespace {

using Frames = std::vector<std::vector<uint8_t>>;

constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kSec = 1'000'000'000;

constexpr MacAddr kOurMac = {0x02, 0x00, 0x00, 0x00, 0x00, 0x01};
constexpr MacAddr kPeerMac = {0x52, 0x54, 0x00, 0x12, 0x34, 0x56};
constexpr MacAddr kOtherMac = {0x52, 0x54, 0x00, 0xab, 0xcd, 0xef};
constexpr MacAddr kBroadcast = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

using test::ip4;
using test::ip6;

const IpAddr kOur4 = ip4("192.168.1.10");
const IpAddr kPeer4 = ip4("192.168.1.1");
const IpAddr kOur6 = ip6("2001:db8::10");
const IpAddr kPeer6 = ip6("2001:db8::1");

// ---- frames built by the test ----------------------------------------------

void put16(std::vector<uint8_t>& v, uint16_t x) {
  v.push_back(static_cast<uint8_t>(x >> 8));
  v.push_back(static_cast<uint8_t>(x));
}
template <size_t N>
void put(std::vector<uint8_t>& v, const std::array<uint8_t, N>& a) {
  v.insert(v.end(), a.begin(), a.end());
}
void put_v4(std::vector<uint8_t>& v, const IpAddr& a) { v.insert(v.end(), a.begin() + 12, a.end()); }

std::vector<uint8_t> eth(const MacAddr& dst, const MacAddr& src, uint16_t type, std::optional<uint16_t> tci) {
  std::vector<uint8_t> f;
  put(f, dst);
  put(f, src);
  if (tci) {
    put16(f, 0x8100);
    put16(f, *tci);
  }
  put16(f, type);
  return f;
}

struct Arp {
  uint16_t htype = 1, ptype = 0x0800;
  uint8_t hlen = 6, plen = 4;
  uint16_t op = 1;
  MacAddr sha = kPeerMac;
  IpAddr spa = kPeer4;
  MacAddr tha{};
  IpAddr tpa = kOur4;
  MacAddr eth_dst = kBroadcast;
  std::optional<uint16_t> tci;
};

std::vector<uint8_t> arp_frame(const Arp& a) {
  std::vector<uint8_t> f = eth(a.eth_dst, a.sha, 0x0806, a.tci);
  put16(f, a.htype);
  put16(f, a.ptype);
  f.push_back(a.hlen);
  f.push_back(a.plen);
  put16(f, a.op);
  put(f, a.sha);
  put_v4(f, a.spa);
  put(f, a.tha);
  put_v4(f, a.tpa);
  return f;
}

// RFC 4443 2.3, written out again here: the checksum the message should carry.
uint16_t icmp6_checksum(const uint8_t* src, const uint8_t* dst, const uint8_t* msg, size_t len) {
  std::vector<uint8_t> pseudo(src, src + 16);
  pseudo.insert(pseudo.end(), dst, dst + 16);
  pseudo.insert(pseudo.end(), {uint8_t(len >> 24), uint8_t(len >> 16), uint8_t(len >> 8), uint8_t(len), 0, 0, 0, 58});
  pseudo.insert(pseudo.end(), msg, msg + len);
  if (pseudo.size() % 2) pseudo.push_back(0);
  uint32_t sum = 0;
  for (size_t i = 0; i < pseudo.size(); i += 2) sum += (pseudo[i] << 8) | pseudo[i + 1];
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

std::vector<uint8_t> lla(uint8_t type, const MacAddr& m) {
  std::vector<uint8_t> o{type, 1};
  o.insert(o.end(), m.begin(), m.end());
  return o;
}

struct Nd {
  uint8_t type = 135, code = 0, flags = 0, hop = 255;
  IpAddr src = kPeer6;
  IpAddr dst = solicited_node_multicast(kOur6);
  IpAddr target = kOur6;
  std::vector<uint8_t> options = lla(1, kPeerMac);
  MacAddr eth_dst = ipv6_multicast_mac(solicited_node_multicast(kOur6));
  MacAddr eth_src = kPeerMac;
  std::optional<uint16_t> tci;
  int checksum_delta = 0;                  ///< added to the correct checksum
  std::optional<uint16_t> payload_length;  ///< IPv6 payload length if not the real one
};

std::vector<uint8_t> nd_frame(const Nd& n) {
  std::vector<uint8_t> msg{n.type, n.code, 0, 0, n.flags, 0, 0, 0};
  put(msg, n.target);
  msg.insert(msg.end(), n.options.begin(), n.options.end());
  const uint16_t cs = static_cast<uint16_t>(icmp6_checksum(n.src.data(), n.dst.data(), msg.data(), msg.size()) + n.checksum_delta);
  msg[2] = static_cast<uint8_t>(cs >> 8);
  msg[3] = static_cast<uint8_t>(cs);
  std::vector<uint8_t> f = eth(n.eth_dst, n.eth_src, 0x86dd, n.tci);
  f.insert(f.end(), {0x60, 0, 0, 0});
  put16(f, n.payload_length.value_or(static_cast<uint16_t>(msg.size())));
  f.push_back(58);
  f.push_back(n.hop);
  put(f, n.src);
  put(f, n.dst);
  f.insert(f.end(), msg.begin(), msg.end());
  return f;
}

// ---- frames emitted by the table, read back by the test --------------------

struct L2Out {
  MacAddr dst{}, src{};
  std::optional<uint16_t> tci;
  uint16_t type = 0;
  size_t off = 0;
};

L2Out read_l2(const std::vector<uint8_t>& f) {
  L2Out l;
  if (f.size() < 14) {
    ADD_FAILURE() << "short frame";
    return l;
  }
  std::copy(f.begin(), f.begin() + 6, l.dst.begin());
  std::copy(f.begin() + 6, f.begin() + 12, l.src.begin());
  l.type = uint16_t(f[12] << 8 | f[13]);
  l.off = 14;
  if (l.type == 0x8100 && f.size() >= 18) {
    l.tci = uint16_t(f[14] << 8 | f[15]);
    l.type = uint16_t(f[16] << 8 | f[17]);
    l.off = 18;
  }
  return l;
}

struct ArpOut {
  L2Out l2;
  Arp arp;
};

ArpOut read_arp(const std::vector<uint8_t>& f) {
  ArpOut o{read_l2(f), {}};
  EXPECT_EQ(o.l2.type, 0x0806);
  EXPECT_EQ(f.size(), o.l2.off + 28) << "ARP frames are sent unpadded";
  if (f.size() < o.l2.off + 28) return o;
  const uint8_t* a = f.data() + o.l2.off;
  o.arp.htype = uint16_t(a[0] << 8 | a[1]);
  o.arp.ptype = uint16_t(a[2] << 8 | a[3]);
  o.arp.hlen = a[4];
  o.arp.plen = a[5];
  o.arp.op = uint16_t(a[6] << 8 | a[7]);
  std::copy(a + 8, a + 14, o.arp.sha.begin());
  o.arp.spa = ip4("0.0.0.0");
  std::copy(a + 14, a + 18, o.arp.spa.begin() + 12);
  std::copy(a + 18, a + 24, o.arp.tha.begin());
  o.arp.tpa = ip4("0.0.0.0");
  std::copy(a + 24, a + 28, o.arp.tpa.begin() + 12);
  return o;
}

struct NdOut {
  L2Out l2;
  uint8_t version = 0, next_header = 0, hop = 0, type = 0, code = 0, flags = 0;
  uint16_t payload_length = 0;
  IpAddr src{}, dst{}, target{};
  bool checksum_ok = false;
  std::vector<std::pair<uint8_t, MacAddr>> options;
};

NdOut read_nd(const std::vector<uint8_t>& f) {
  NdOut o;
  o.l2 = read_l2(f);
  EXPECT_EQ(o.l2.type, 0x86dd);
  if (f.size() < o.l2.off + 40 + 24) {
    ADD_FAILURE() << "short ND frame";
    return o;
  }
  const uint8_t* ip = f.data() + o.l2.off;
  o.version = ip[0] >> 4;
  EXPECT_EQ(ip[0] & 0x0f, 0);
  EXPECT_EQ(ip[1] | ip[2] | ip[3], 0) << "traffic class and flow label";
  o.payload_length = uint16_t(ip[4] << 8 | ip[5]);
  o.next_header = ip[6];
  o.hop = ip[7];
  std::copy(ip + 8, ip + 24, o.src.begin());
  std::copy(ip + 24, ip + 40, o.dst.begin());
  EXPECT_EQ(f.size(), o.l2.off + 40 + o.payload_length);
  if (f.size() != o.l2.off + 40 + o.payload_length) return o;
  const uint8_t* m = ip + 40;
  o.type = m[0];
  o.code = m[1];
  o.flags = m[4];
  EXPECT_EQ(m[5] | m[6] | m[7], 0) << "reserved bits";
  if (o.type == 135) {
    EXPECT_EQ(m[4], 0);
  }
  std::copy(m + 8, m + 24, o.target.begin());
  o.checksum_ok = icmp6_checksum(ip + 8, ip + 24, m, o.payload_length) == 0;
  for (size_t i = 24; i + 8 <= o.payload_length; i += 8) {
    EXPECT_EQ(m[i + 1], 1);
    MacAddr mac;
    std::copy(m + i + 2, m + i + 8, mac.begin());
    o.options.push_back({m[i], mac});
  }
  return o;
}

// ---- fixture ---------------------------------------------------------------

NeighborConfig test_config() {
  return {.max_entries = 16, .max_requests = 3, .request_interval_ns = kSec, .reachable_ns = 60 * kSec,
          .failed_hold_ns = 10 * kSec, .max_tx_queue = 64};
}

class Neighbor : public ::testing::Test {
 protected:
  Neighbor() : t_(test_config()) {
    EXPECT_EQ(t_.add_local(kOur4, kOurMac), 0);
    EXPECT_EQ(t_.add_local(kOur6, kOurMac), 0);
  }
  Frames drain() {
    Frames out;
    t_.drain_tx(&out);
    return out;
  }
  bool feed(const std::vector<uint8_t>& f, uint64_t now = 0) { return t_.handle_frame(f, now); }
  // An answer from the peer to our request.
  std::vector<uint8_t> arp_reply_from_peer(const MacAddr& mac = kPeerMac, std::optional<uint16_t> tci = {}) {
    return arp_frame({.op = 2, .sha = mac, .spa = kPeer4, .tha = kOurMac, .tpa = kOur4, .eth_dst = kOurMac, .tci = tci});
  }
  std::vector<uint8_t> na_from_peer(uint8_t flags, std::optional<MacAddr> tlla = kPeerMac) {
    return nd_frame({.type = 136, .flags = flags, .src = kPeer6, .dst = kOur6, .target = kPeer6,
                     .options = tlla ? lla(2, *tlla) : std::vector<uint8_t>{}, .eth_dst = kOurMac,
                     .eth_src = tlla.value_or(kPeerMac)});
  }

  NeighborTable t_;
};

// ---- ARP: answering --------------------------------------------------------

TEST_F(Neighbor, ArpRequestForALocalAddressGetsExactlyThisReply) {
  ASSERT_TRUE(feed(arp_frame({})));
  const Frames tx = drain();
  ASSERT_EQ(tx.size(), 1u);
  // RFC 826: the request's sender becomes the target, our address the sender.
  const std::vector<uint8_t> expected = {
      0x52, 0x54, 0x00, 0x12, 0x34, 0x56,  // Ethernet destination: the asker
      0x02, 0x00, 0x00, 0x00, 0x00, 0x01,  // Ethernet source: us
      0x08, 0x06,                          // ARP
      0x00, 0x01,                          // hardware type: Ethernet
      0x08, 0x00,                          // protocol type: IPv4
      0x06, 0x04,                          // address lengths
      0x00, 0x02,                          // op: reply
      0x02, 0x00, 0x00, 0x00, 0x00, 0x01,  // sender MAC: us
      192,  168,  1,    10,                // sender IP: the address asked for
      0x52, 0x54, 0x00, 0x12, 0x34, 0x56,  // target MAC: the asker
      192,  168,  1,    1,                 // target IP: the asker
  };
  EXPECT_EQ(tx[0], expected) << test::hex(tx[0]);
  EXPECT_EQ(t_.counters().arp.requests_received, 1u);
  EXPECT_EQ(t_.counters().arp.replies_sent, 1u);
  EXPECT_EQ(t_.counters().total_dropped(), 0u);
  // The asker is not learned: entries come only from resolve().
  EXPECT_FALSE(t_.lookup(kPeer4).has_value());
}

TEST_F(Neighbor, ArpRequestForAnotherAddressIsIgnored) {
  EXPECT_TRUE(feed(arp_frame({.tpa = ip4("192.168.1.11")})));
  EXPECT_TRUE(drain().empty());
  EXPECT_EQ(t_.counters().not_for_us, 1u);
  EXPECT_EQ(t_.counters().arp.replies_sent, 0u);
}

TEST_F(Neighbor, ArpRequestWithEthernetPaddingAndFcsIsAnswered) {
  std::vector<uint8_t> f = arp_frame({});
  f.resize(64, 0xee);
  EXPECT_TRUE(feed(f));
  EXPECT_EQ(drain().size(), 1u);
}

TEST_F(Neighbor, ArpProbeFromZeroIsAnsweredToTheProber) {
  ASSERT_TRUE(feed(arp_frame({.spa = ip4("0.0.0.0")})));
  const Frames tx = drain();
  ASSERT_EQ(tx.size(), 1u);
  const ArpOut r = read_arp(tx[0]);
  EXPECT_EQ(r.l2.dst, kPeerMac);
  EXPECT_EQ(r.arp.op, 2);
  EXPECT_EQ(r.arp.sha, kOurMac);
  EXPECT_EQ(r.arp.spa, kOur4);
  EXPECT_EQ(r.arp.tha, kPeerMac);
  EXPECT_EQ(r.arp.tpa, ip4("0.0.0.0"));
}

TEST_F(Neighbor, VlanTaggedRequestsAreAnsweredWithTheSameTagOnTheirVlanOnly) {
  const IpAddr vlan_ip = ip4("10.0.100.10");
  ASSERT_EQ(t_.add_local(vlan_ip, kOurMac, 100), 0);
  const uint16_t tci = 0x6064;  // PCP 3, VID 100
  ASSERT_TRUE(feed(arp_frame({.tpa = vlan_ip, .tci = tci})));
  Frames tx = drain();
  ASSERT_EQ(tx.size(), 1u);
  const ArpOut r = read_arp(tx[0]);
  ASSERT_TRUE(r.l2.tci.has_value());
  EXPECT_EQ(*r.l2.tci, tci);
  EXPECT_EQ(r.l2.dst, kPeerMac);
  EXPECT_EQ(r.arp.spa, vlan_ip);
  EXPECT_EQ(r.arp.tpa, kPeer4);

  // The same address asked for untagged, or on VLAN 200: not ours there.
  EXPECT_TRUE(feed(arp_frame({.tpa = vlan_ip})));
  EXPECT_TRUE(feed(arp_frame({.tpa = vlan_ip, .tci = 200})));
  // An untagged address asked for on VLAN 100: not ours there either.
  EXPECT_TRUE(feed(arp_frame({.tci = 100})));
  EXPECT_TRUE(drain().empty());
  EXPECT_EQ(t_.counters().not_for_us, 3u);

  // A priority tag (VID 0) is untagged traffic; the reply keeps the tag.
  ASSERT_TRUE(feed(arp_frame({.tci = 0xa000})));
  tx = drain();
  ASSERT_EQ(tx.size(), 1u);
  const ArpOut p = read_arp(tx[0]);
  ASSERT_TRUE(p.l2.tci.has_value());
  EXPECT_EQ(*p.l2.tci, 0xa000);
  EXPECT_EQ(p.arp.spa, kOur4);

  // ND on a VLAN the same way.
  const IpAddr vlan_ip6 = ip6("2001:db8:100::10");
  ASSERT_EQ(t_.add_local(vlan_ip6, kOurMac, 100), 0);
  ASSERT_TRUE(feed(nd_frame({.dst = solicited_node_multicast(vlan_ip6), .target = vlan_ip6, .tci = tci})));
  tx = drain();
  ASSERT_EQ(tx.size(), 1u);
  const NdOut na = read_nd(tx[0]);
  ASSERT_TRUE(na.l2.tci.has_value());
  EXPECT_EQ(*na.l2.tci, tci);
  EXPECT_EQ(na.target, vlan_ip6);
  EXPECT_TRUE(na.checksum_ok);
  EXPECT_TRUE(feed(nd_frame({.dst = solicited_node_multicast(vlan_ip6), .target = vlan_ip6})));
  EXPECT_TRUE(drain().empty());
}

TEST_F(Neighbor, AnotherMacClaimingOurAddressIsAConflictAndNotLearned) {
  EXPECT_TRUE(feed(arp_frame({.op = 2, .sha = kOtherMac, .spa = kOur4, .tpa = kOur4})));
  EXPECT_TRUE(feed(nd_frame({.type = 136, .flags = 0x20, .src = kOur6, .dst = ip6("ff02::1"), .target = kOur6,
                             .options = lla(2, kOtherMac), .eth_dst = ipv6_multicast_mac(ip6("ff02::1")),
                             .eth_src = kOtherMac})));
  EXPECT_EQ(t_.counters().address_conflicts, 2u);
  EXPECT_TRUE(drain().empty());
  // Our own announcement looped back is neither.
  EXPECT_TRUE(feed(arp_frame({.op = 2, .sha = kOurMac, .spa = kOur4, .tpa = kOur4})));
  EXPECT_EQ(t_.counters().address_conflicts, 2u);
}

// ---- ND: answering ---------------------------------------------------------

TEST_F(Neighbor, NeighborSolicitationGetsExactlyThisAdvertisement) {
  // The NS from 2001:db8::1 (52:54:00:12:34:56) to our solicited-node group,
  // with a source link-layer address option.
  ASSERT_TRUE(feed(nd_frame({})));
  const Frames tx = drain();
  ASSERT_EQ(tx.size(), 1u);
  // RFC 4861 4.4 / 7.2.4: a solicited NA with override to the asker, from the
  // target, hop limit 255, with our link-layer address. Checksum (RFC 4443
  // 2.3) worked out by hand, and matches scapy 2.5.0's.
  const std::vector<uint8_t> expected = {
      0x52, 0x54, 0x00, 0x12, 0x34, 0x56,  // Ethernet destination: the SLLA
      0x02, 0x00, 0x00, 0x00, 0x00, 0x01,  // Ethernet source: us
      0x86, 0xdd,                          // IPv6
      0x60, 0x00, 0x00, 0x00,              // version 6, class 0, flow 0
      0x00, 0x20,                          // payload length 32
      0x3a,                                // ICMPv6
      0xff,                                // hop limit 255
      0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,  // source 2001:db8::10
      0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01,  // destination 2001:db8::1
      0x88, 0x00,                          // NA, code 0
      0x8a, 0x56,                          // checksum
      0x60, 0x00, 0x00, 0x00,              // R=0 S=1 O=1
      0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,  // target
      0x02, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01,  // target link-layer address option
  };
  EXPECT_EQ(tx[0], expected) << test::hex(tx[0]);
  EXPECT_EQ(t_.counters().nd.requests_received, 1u);
  EXPECT_EQ(t_.counters().nd.replies_sent, 1u);
}

TEST_F(Neighbor, SolicitationWithoutSourceOptionIsAnsweredToTheFrameSource) {
  // A unicast NS (neighbour unreachability detection) may omit the option.
  ASSERT_TRUE(feed(nd_frame({.dst = kOur6, .options = {}, .eth_dst = kOurMac, .eth_src = kOtherMac})));
  const Frames tx = drain();
  ASSERT_EQ(tx.size(), 1u);
  const NdOut na = read_nd(tx[0]);
  EXPECT_EQ(na.l2.dst, kOtherMac);
  EXPECT_EQ(na.l2.src, kOurMac);
  EXPECT_FALSE(na.l2.tci.has_value());
  EXPECT_EQ(na.version, 6);
  EXPECT_EQ(na.next_header, 58);
  EXPECT_EQ(na.hop, 255);
  EXPECT_EQ(na.src, kOur6);
  EXPECT_EQ(na.dst, kPeer6);
  EXPECT_EQ(na.type, 136);
  EXPECT_EQ(na.code, 0);
  EXPECT_EQ(na.flags, 0x60) << "solicited and override, not router";
  EXPECT_EQ(na.target, kOur6);
  EXPECT_TRUE(na.checksum_ok);
  ASSERT_EQ(na.options.size(), 1u);
  EXPECT_EQ(na.options[0].first, 2);
  EXPECT_EQ(na.options[0].second, kOurMac);
}

TEST_F(Neighbor, DuplicateAddressProbeIsAnsweredToAllNodes) {
  ASSERT_TRUE(feed(nd_frame({.src = ip6("::"), .options = {}})));
  const Frames tx = drain();
  ASSERT_EQ(tx.size(), 1u);
  const NdOut na = read_nd(tx[0]);
  EXPECT_EQ(na.l2.dst, (MacAddr{0x33, 0x33, 0, 0, 0, 1}));
  EXPECT_EQ(na.l2.src, kOurMac);
  EXPECT_EQ(na.dst, ip6("ff02::1"));
  EXPECT_EQ(na.src, kOur6);
  EXPECT_EQ(na.hop, 255);
  EXPECT_EQ(na.flags, 0x20) << "override only: not solicited (RFC 4861 7.2.4)";
  EXPECT_EQ(na.target, kOur6);
  EXPECT_TRUE(na.checksum_ok);
  ASSERT_EQ(na.options.size(), 1u);
  EXPECT_EQ(na.options[0], (std::pair<uint8_t, MacAddr>{2, kOurMac}));
  // And the same probe for an address that is not ours: silence.
  EXPECT_TRUE(feed(nd_frame({.src = ip6("::"), .dst = solicited_node_multicast(ip6("2001:db8::99")),
                             .target = ip6("2001:db8::99"), .options = {}})));
  EXPECT_TRUE(drain().empty());
}

TEST_F(Neighbor, SolicitationWithHopLimit64IsDroppedAndCounted) {
  EXPECT_FALSE(feed(nd_frame({.hop = 64})));
  EXPECT_TRUE(drain().empty());
  EXPECT_EQ(t_.counters().drops(NeighborDrop::bad_hop_limit), 1u);
  EXPECT_EQ(t_.counters().nd.requests_received, 0u);
}

TEST_F(Neighbor, BadChecksumIsDroppedAndCounted) {
  EXPECT_FALSE(feed(nd_frame({.checksum_delta = 1})));
  EXPECT_TRUE(drain().empty());
  EXPECT_EQ(t_.counters().drops(NeighborDrop::bad_checksum), 1u);
}

TEST_F(Neighbor, OtherProtocolsAreNotOursAndNotCounted) {
  std::vector<uint8_t> echo = nd_frame({.type = 128, .options = {}});
  EXPECT_FALSE(feed(echo));
  std::vector<uint8_t> udp6 = nd_frame({});
  udp6[14 + 6] = 17;
  EXPECT_FALSE(feed(udp6));
  std::vector<uint8_t> ipv4 = arp_frame({});
  ipv4[12] = 0x08;
  ipv4[13] = 0x00;
  EXPECT_FALSE(feed(ipv4));
  EXPECT_FALSE(feed(std::vector<uint8_t>{}));
  EXPECT_TRUE(drain().empty());
  EXPECT_EQ(t_.counters().total_dropped(), 0u);
}

// ---- malformed input -------------------------------------------------------

struct MalformedCase {
  const char* what;
  NeighborDrop expect;
  std::function<std::vector<uint8_t>()> make;
};

std::vector<MalformedCase> malformed_cases() {
  using D = NeighborDrop;
  const IpAddr all_nodes = ip6("ff02::1");
  return {
      {"ARP cut by one byte", D::truncated_arp, [] { auto f = arp_frame({}); f.pop_back(); return f; }},
      {"ARP htype 6", D::bad_arp_format, [] { return arp_frame({.htype = 6}); }},
      {"ARP ptype IPv6", D::bad_arp_format, [] { return arp_frame({.ptype = 0x86dd}); }},
      {"ARP hlen 8", D::bad_arp_format, [] { return arp_frame({.hlen = 8}); }},
      {"ARP plen 16", D::bad_arp_format, [] { return arp_frame({.plen = 16}); }},
      {"ARP op 3 (RARP)", D::bad_arp_op, [] { return arp_frame({.op = 3}); }},
      {"ARP from a multicast MAC", D::bad_sender, [] { return arp_frame({.sha = {0x01, 0x00, 0x5e, 0, 0, 1}}); }},
      {"ARP from MAC zero", D::bad_sender, [] { return arp_frame({.sha = {}}); }},
      {"ARP from 224.0.0.5", D::bad_sender, [] { return arp_frame({.spa = ip4("224.0.0.5")}); }},
      {"ARP from 255.255.255.255", D::bad_sender, [] { return arp_frame({.spa = ip4("255.255.255.255")}); }},
      {"ARP from 127.0.0.1", D::bad_sender, [] { return arp_frame({.spa = ip4("127.0.0.1")}); }},
      {"ARP reply from 0.0.0.0", D::bad_sender, [] { return arp_frame({.op = 2, .spa = ip4("0.0.0.0")}); }},
      {"NS from a multicast source", D::bad_sender, [=] { return nd_frame({.src = all_nodes}); }},
      {"NA from ::", D::bad_sender, [=] { return nd_frame({.type = 136, .src = ip6("::"), .dst = all_nodes, .target = kPeer6, .options = {}}); }},
      {"NS with a multicast source LL address", D::bad_sender, [] { return nd_frame({.options = lla(1, {0x33, 0x33, 0, 0, 0, 1})}); }},
      {"IPv6 payload length one past the frame", D::bad_ip_length, [] { return nd_frame({.payload_length = 33}); }},
      {"NS of 20 bytes", D::truncated_nd, [] {
         // Checksummed as 20 bytes, then the IPv6 header says 20 as well.
         auto f = nd_frame({.options = {}});
         f.resize(f.size() - 4);
         f[14 + 5] = 20;
         f[14 + 40 + 2] = f[14 + 40 + 3] = 0;
         const uint16_t cs = icmp6_checksum(&f[14 + 8], &f[14 + 24], &f[14 + 40], 20);
         f[14 + 40 + 2] = uint8_t(cs >> 8);
         f[14 + 40 + 3] = uint8_t(cs);
         return f;
       }},
      {"NS hop limit 64", D::bad_hop_limit, [] { return nd_frame({.hop = 64}); }},
      {"NA hop limit 254", D::bad_hop_limit, [] { return nd_frame({.type = 136, .hop = 254, .dst = kOur6, .target = kPeer6, .options = lla(2, kPeerMac)}); }},
      {"NS checksum off by one", D::bad_checksum, [] { return nd_frame({.checksum_delta = 1}); }},
      {"NS target byte changed after checksumming", D::bad_checksum, [] { auto f = nd_frame({}); f[14 + 40 + 23] ^= 1; return f; }},
      {"NS code 1", D::bad_icmp_code, [] { return nd_frame({.code = 1}); }},
      {"NS for a multicast target", D::wrong_target, [=] { return nd_frame({.target = all_nodes}); }},
      {"NS for ::", D::wrong_target, [] { return nd_frame({.target = ip6("::")}); }},
      {"option of length 0", D::bad_nd_option, [] { return nd_frame({.options = {1, 0, 0, 0, 0, 0, 0, 0}}); }},
      {"option running past the message", D::bad_nd_option, [] { return nd_frame({.options = {1, 2, 0x52, 0x54, 0, 0x12, 0x34, 0x56}}); }},
      {"one stray byte after the target", D::bad_nd_option, [] { return nd_frame({.options = {1}}); }},
      {"source LL option of 16 bytes", D::bad_nd_option, [] {
         return nd_frame({.options = {1, 2, 0x52, 0x54, 0, 0x12, 0x34, 0x56, 0, 0, 0, 0, 0, 0, 0, 0}});
       }},
      {"DAD probe with a source LL option", D::bad_dad_probe, [] { return nd_frame({.src = ip6("::")}); }},
      {"DAD probe to a unicast address", D::bad_dad_probe, [] { return nd_frame({.src = ip6("::"), .dst = kOur6, .options = {}}); }},
      {"solicited NA to all-nodes", D::bad_na_flags, [=] { return nd_frame({.type = 136, .flags = 0x60, .dst = all_nodes, .target = kPeer6, .options = lla(2, kPeerMac)}); }},
  };
}

TEST_F(Neighbor, EachMalformedFrameIsDroppedForItsOwnReason) {
  std::set<NeighborDrop> covered;
  for (const auto& c : malformed_cases()) {
    SCOPED_TRACE(c.what);
    const std::vector<uint8_t> f = c.make();
    const NeighborCounters before = t_.counters();
    EXPECT_FALSE(feed(f)) << test::hex(f);
    EXPECT_TRUE(drain().empty());
    for (size_t i = 0; i < kNeighborDropCount; ++i) {
      const auto r = static_cast<NeighborDrop>(i);
      EXPECT_EQ(t_.counters().drops(r) - before.drops(r), r == c.expect ? 1u : 0u) << to_string(r);
    }
    EXPECT_EQ(t_.counters().arp.requests_received, before.arp.requests_received);
    EXPECT_EQ(t_.counters().nd.requests_received, before.nd.requests_received);
    EXPECT_EQ(t_.counters().nd.replies_received, before.nd.replies_received);
    covered.insert(c.expect);
  }
  for (size_t i = 0; i < kNeighborDropCount; ++i)
    EXPECT_TRUE(covered.count(static_cast<NeighborDrop>(i))) << "no case for " << to_string(static_cast<NeighborDrop>(i));
}

TEST(NeighborDropNames, EveryReasonHasANameAndADescription) {
  std::set<std::string> names;
  for (size_t i = 0; i < kNeighborDropCount; ++i) {
    const auto r = static_cast<NeighborDrop>(i);
    EXPECT_STRNE(to_string(r), "?");
    EXPECT_STRNE(describe(r), "?");
    names.insert(to_string(r));
  }
  EXPECT_EQ(names.size(), kNeighborDropCount);
}

// Every prefix of every valid frame, in a heap block of exactly that size (so
// ASan catches a read past it), is refused and changes nothing.
TEST_F(Neighbor, NoPrefixOfAFrameIsAcceptedOrReadPast) {
  MacAddr mac;
  ASSERT_EQ(t_.resolve(kPeer4, 0, &mac), ResolveStatus::pending);
  ASSERT_EQ(t_.resolve(kPeer6, 0, &mac), ResolveStatus::pending);
  drain();
  const std::vector<std::pair<const char*, std::vector<uint8_t>>> frames = {
      {"ARP request", arp_frame({})},
      {"tagged ARP request", arp_frame({.tci = 0})},
      {"ARP reply", arp_reply_from_peer()},
      {"NS", nd_frame({})},
      {"tagged NS", nd_frame({.tci = 0})},
      {"DAD NS", nd_frame({.src = ip6("::"), .options = {}})},
      {"NA", na_from_peer(0x60)},
  };
  for (const auto& [what, f] : frames) {
    SCOPED_TRACE(what);
    for (size_t n = 0; n < f.size(); ++n) {
      const auto copy = std::make_unique<uint8_t[]>(n == 0 ? 1 : n);
      std::memcpy(copy.get(), f.data(), n);
      const NeighborCounters before = t_.counters();
      EXPECT_FALSE(t_.handle_frame({copy.get(), n}, 0)) << "prefix of " << n << " bytes";
      EXPECT_EQ(t_.tx_queued(), 0u) << n;
      EXPECT_EQ(t_.counters().arp.requests_received + t_.counters().arp.replies_received +
                    t_.counters().nd.requests_received + t_.counters().nd.replies_received,
                before.arp.requests_received + before.arp.replies_received + before.nd.requests_received +
                    before.nd.replies_received)
          << n;
    }
    EXPECT_EQ(t_.lookup(kPeer4)->state, NeighborState::incomplete);
    EXPECT_EQ(t_.lookup(kPeer6)->state, NeighborState::incomplete);
  }
  // The whole frames are fine (and the last two resolve the entries).
  for (const auto& [what, f] : frames) EXPECT_TRUE(feed(f)) << what;
  EXPECT_EQ(t_.lookup(kPeer4)->state, NeighborState::reachable);
  EXPECT_EQ(t_.lookup(kPeer6)->state, NeighborState::reachable);
}

// ---- resolving -------------------------------------------------------------

TEST_F(Neighbor, ArpResolutionSendsABroadcastRequestAndLearnsTheReply) {
  MacAddr mac = kBroadcast;
  ASSERT_EQ(t_.resolve(kPeer4, 5 * kMs, &mac), ResolveStatus::pending);
  EXPECT_EQ(mac, kBroadcast) << "untouched unless resolved";
  Frames tx = drain();
  ASSERT_EQ(tx.size(), 1u);
  const ArpOut q = read_arp(tx[0]);
  EXPECT_EQ(q.l2.dst, kBroadcast);
  EXPECT_EQ(q.l2.src, kOurMac);
  EXPECT_FALSE(q.l2.tci.has_value());
  EXPECT_EQ(q.arp.htype, 1);
  EXPECT_EQ(q.arp.ptype, 0x0800);
  EXPECT_EQ(q.arp.hlen, 6);
  EXPECT_EQ(q.arp.plen, 4);
  EXPECT_EQ(q.arp.op, 1);
  EXPECT_EQ(q.arp.sha, kOurMac);
  EXPECT_EQ(q.arp.spa, kOur4);
  EXPECT_EQ(q.arp.tha, MacAddr{});
  EXPECT_EQ(q.arp.tpa, kPeer4);
  EXPECT_EQ(t_.counters().arp.requests_sent, 1u);

  // Asking again while pending sends nothing more.
  EXPECT_EQ(t_.resolve(kPeer4, 6 * kMs, &mac), ResolveStatus::pending);
  EXPECT_TRUE(drain().empty());

  ASSERT_TRUE(feed(arp_reply_from_peer(), 7 * kMs));
  ASSERT_EQ(t_.resolve(kPeer4, 8 * kMs, &mac), ResolveStatus::resolved);
  EXPECT_EQ(mac, kPeerMac);
  EXPECT_EQ(t_.counters().arp.replies_received, 1u);
  const NeighborEvents ev = t_.poll(9 * kMs);
  ASSERT_EQ(ev.resolved.size(), 1u);
  EXPECT_EQ(ev.resolved[0], (NeighborKey{kPeer4, kNoVlan}));
  EXPECT_TRUE(ev.failed.empty());
  EXPECT_TRUE(t_.poll(10 * kMs).resolved.empty()) << "reported once";
}

TEST_F(Neighbor, NdResolutionSolicitsTheSolicitedNodeGroupAndLearnsTheAdvertisement) {
  MacAddr mac{};
  ASSERT_EQ(t_.resolve(kPeer6, 0, &mac), ResolveStatus::pending);
  Frames tx = drain();
  ASSERT_EQ(tx.size(), 1u);
  const NdOut ns = read_nd(tx[0]);
  EXPECT_EQ(ns.l2.dst, (MacAddr{0x33, 0x33, 0xff, 0x00, 0x00, 0x01}));
  EXPECT_EQ(ns.l2.src, kOurMac);
  EXPECT_EQ(ns.src, kOur6);
  EXPECT_EQ(ns.dst, ip6("ff02::1:ff00:1"));
  EXPECT_EQ(ns.hop, 255);
  EXPECT_EQ(ns.next_header, 58);
  EXPECT_EQ(ns.type, 135);
  EXPECT_EQ(ns.code, 0);
  EXPECT_EQ(ns.target, kPeer6);
  EXPECT_TRUE(ns.checksum_ok);
  ASSERT_EQ(ns.options.size(), 1u);
  EXPECT_EQ(ns.options[0], (std::pair<uint8_t, MacAddr>{1, kOurMac}));
  EXPECT_EQ(t_.counters().nd.requests_sent, 1u);

  ASSERT_TRUE(feed(na_from_peer(0x60), kMs));
  ASSERT_EQ(t_.resolve(kPeer6, 2 * kMs, &mac), ResolveStatus::resolved);
  EXPECT_EQ(mac, kPeerMac);
}

TEST_F(Neighbor, SourceIsTheLocalAddressWithTheLongestCommonPrefix) {
  ASSERT_EQ(t_.add_local(ip4("10.1.2.3"), kOurMac), 0);
  ASSERT_EQ(t_.add_local(ip6("fe80::1"), kOurMac), 0);
  MacAddr mac;
  ASSERT_EQ(t_.resolve(ip4("10.1.9.9"), 0, &mac), ResolveStatus::pending);
  ASSERT_EQ(t_.resolve(ip6("fe80::2"), 0, &mac), ResolveStatus::pending);
  ASSERT_EQ(t_.resolve_from(kOur6, ip6("fe80::3"), 0, &mac), ResolveStatus::pending);
  const Frames tx = drain();
  ASSERT_EQ(tx.size(), 3u);
  EXPECT_EQ(read_arp(tx[0]).arp.spa, ip4("10.1.2.3"));
  EXPECT_EQ(read_nd(tx[1]).src, ip6("fe80::1"));
  EXPECT_EQ(read_nd(tx[2]).src, kOur6);
  // A source that is not local, or of the other family: failed, nothing sent.
  EXPECT_EQ(t_.resolve_from(ip6("2001:db8::99"), kPeer6, 0, &mac), ResolveStatus::failed);
  EXPECT_EQ(t_.resolve_from(kOur4, kPeer6, 0, &mac), ResolveStatus::failed);
  EXPECT_EQ(t_.counters().resolve_invalid, 2u);
  EXPECT_TRUE(drain().empty());
}

// Two tables on one wire: each one's frames are the other's input.
TEST(NeighborPair, TwoTablesResolveEachOtherThroughTheirOwnFrames) {
  NeighborTable a(test_config()), b(test_config());
  ASSERT_EQ(a.add_local(kOur4, kOurMac), 0);
  ASSERT_EQ(a.add_local(kOur6, kOurMac), 0);
  ASSERT_EQ(b.add_local(kPeer4, kPeerMac), 0);
  ASSERT_EQ(b.add_local(kPeer6, kPeerMac), 0);
  for (const IpAddr& dst : {kPeer4, kPeer6}) {
    MacAddr mac{};
    ASSERT_EQ(a.resolve(dst, 0, &mac), ResolveStatus::pending);
    Frames requests, replies;
    ASSERT_EQ(a.drain_tx(&requests), 1u);
    EXPECT_TRUE(b.handle_frame(requests[0], 0));
    ASSERT_EQ(b.drain_tx(&replies), 1u);
    EXPECT_TRUE(a.handle_frame(replies[0], 0));
    ASSERT_EQ(a.resolve(dst, 0, &mac), ResolveStatus::resolved);
    EXPECT_EQ(mac, kPeerMac);
  }
  EXPECT_EQ(a.counters().total_dropped() + b.counters().total_dropped(), 0u);
  EXPECT_FALSE(b.lookup(kOur4).has_value()) << "requests do not create entries";
  EXPECT_FALSE(b.lookup(kOur6).has_value());
}

struct Schedule {
  uint32_t requests;
  uint64_t interval_ns, hold_ns;
  bool ipv6;
};

void PrintTo(const Schedule& s, std::ostream* os) {
  *os << s.requests << " requests " << s.interval_ns << " ns apart, hold " << s.hold_ns << " ns, "
      << (s.ipv6 ? "ND" : "ARP");
}

class NeighborSchedule : public ::testing::TestWithParam<Schedule> {};

TEST_P(NeighborSchedule, NoAnswerMeansExactlyTheConfiguredRequestsThenFailedThenHoldDown) {
  const Schedule s = GetParam();
  NeighborConfig cfg = test_config();
  cfg.max_requests = s.requests;
  cfg.request_interval_ns = s.interval_ns;
  cfg.failed_hold_ns = s.hold_ns;
  NeighborTable t(cfg);
  ASSERT_EQ(t.add_local(kOur4, kOurMac), 0);
  ASSERT_EQ(t.add_local(kOur6, kOurMac), 0);
  const IpAddr dst = s.ipv6 ? kPeer6 : kPeer4;
  const NeighborKey key{dst, kNoVlan};
  auto drain = [&] {
    Frames f;
    t.drain_tx(&f);
    for (const auto& x : f) {
      if (s.ipv6)
        EXPECT_EQ(read_nd(x).target, dst);
      else
        EXPECT_EQ(read_arp(x).arp.tpa, dst);
    }
    return f.size();
  };

  const uint64_t t0 = 7 * kSec;
  MacAddr mac{};
  ASSERT_EQ(t.resolve(dst, t0, &mac), ResolveStatus::pending);
  EXPECT_EQ(drain(), 1u);
  EXPECT_EQ(t.next_deadline_ns(), t0 + s.interval_ns);
  for (uint32_t k = 1; k < s.requests; ++k) {
    SCOPED_TRACE("retry " + std::to_string(k));
    EXPECT_TRUE(t.poll(t0 + k * s.interval_ns - 1).failed.empty());
    EXPECT_EQ(drain(), 0u);
    EXPECT_TRUE(t.poll(t0 + k * s.interval_ns).failed.empty());
    EXPECT_EQ(drain(), 1u);
    EXPECT_EQ(t.resolve(dst, t0 + k * s.interval_ns, &mac), ResolveStatus::pending);
    EXPECT_EQ(drain(), 0u);
  }
  const uint64_t tf = t0 + s.requests * s.interval_ns;
  EXPECT_TRUE(t.poll(tf - 1).failed.empty());
  const NeighborEvents ev = t.poll(tf);
  ASSERT_EQ(ev.failed.size(), 1u);
  EXPECT_EQ(ev.failed[0], key);
  EXPECT_EQ(drain(), 0u);
  EXPECT_TRUE(t.poll(tf).failed.empty()) << "reported once";
  const auto& proto = s.ipv6 ? t.counters().nd : t.counters().arp;
  EXPECT_EQ(proto.requests_sent, s.requests);
  EXPECT_EQ(t.counters().resolutions_failed, 1u);

  // Hold-down: failed, and silent, until it ends; then a fresh resolution.
  EXPECT_EQ(t.resolve(dst, tf + 1, &mac), ResolveStatus::failed);
  EXPECT_TRUE(t.poll(tf + s.hold_ns - 1).failed.empty());
  EXPECT_EQ(t.resolve(dst, tf + s.hold_ns - 1, &mac), ResolveStatus::failed);
  EXPECT_EQ(drain(), 0u);
  t.poll(tf + s.hold_ns);
  EXPECT_FALSE(t.lookup(dst).has_value());
  EXPECT_EQ(t.resolve(dst, tf + s.hold_ns, &mac), ResolveStatus::pending);
  EXPECT_EQ(drain(), 1u);
  EXPECT_EQ(proto.requests_sent, s.requests + 1);
}

INSTANTIATE_TEST_SUITE_P(Configs, NeighborSchedule,
                         ::testing::Values(Schedule{3, kSec, 10 * kSec, false}, Schedule{3, kSec, 10 * kSec, true},
                                           Schedule{5, 250 * kMs, 2 * kSec, false}, Schedule{1, 100 * kMs, kSec, true}));

TEST_F(Neighbor, PollingOftenSendsNoExtraRequests) {
  MacAddr mac;
  ASSERT_EQ(t_.resolve(kPeer4, 0, &mac), ResolveStatus::pending);
  size_t failed = 0;
  for (uint64_t now = 0; now <= 5 * kSec; now += 10 * kMs) failed += t_.poll(now).failed.size();
  EXPECT_EQ(drain().size(), 3u);
  EXPECT_EQ(failed, 1u);
}

TEST_F(Neighbor, ALateAnswerRevivesAFailedEntry) {
  MacAddr mac;
  ASSERT_EQ(t_.resolve(kPeer4, 0, &mac), ResolveStatus::pending);
  for (uint64_t k = 1; k <= 3; ++k) t_.poll(k * kSec);
  ASSERT_EQ(t_.lookup(kPeer4)->state, NeighborState::failed);
  ASSERT_TRUE(feed(arp_reply_from_peer(), 4 * kSec));
  ASSERT_EQ(t_.resolve(kPeer4, 4 * kSec, &mac), ResolveStatus::resolved);
  EXPECT_EQ(mac, kPeerMac);
  EXPECT_EQ(t_.poll(4 * kSec).resolved.size(), 1u);
}

TEST_F(Neighbor, EntriesAgeOutUnlessConfirmed) {
  MacAddr mac;
  ASSERT_EQ(t_.resolve(kPeer4, 0, &mac), ResolveStatus::pending);
  ASSERT_TRUE(feed(arp_reply_from_peer(), kSec));
  EXPECT_EQ(t_.lookup(kPeer4)->deadline_ns, 61 * kSec);
  EXPECT_EQ(t_.resolve(kPeer4, 61 * kSec - 1, &mac), ResolveStatus::resolved);

  // A reply confirms: 60 s from now.
  ASSERT_TRUE(feed(arp_reply_from_peer(), 30 * kSec));
  EXPECT_EQ(t_.lookup(kPeer4)->deadline_ns, 90 * kSec);
  // A gratuitous announcement does not confirm.
  ASSERT_TRUE(feed(arp_frame({.op = 1, .spa = kPeer4, .tpa = kPeer4}), 50 * kSec));
  EXPECT_EQ(t_.lookup(kPeer4)->deadline_ns, 90 * kSec);

  t_.poll(61 * kSec);
  EXPECT_EQ(t_.resolve(kPeer4, 89 * kSec, &mac), ResolveStatus::resolved);
  t_.poll(90 * kSec - 1);
  EXPECT_EQ(t_.counters().aged_out, 0u);
  t_.poll(90 * kSec);
  EXPECT_EQ(t_.counters().aged_out, 1u);
  EXPECT_FALSE(t_.lookup(kPeer4).has_value());
  drain();
  EXPECT_EQ(t_.resolve(kPeer4, 90 * kSec, &mac), ResolveStatus::pending);
  EXPECT_EQ(drain().size(), 1u);
}

TEST_F(Neighbor, UnsolicitedAnswersAboutUnknownAddressesAreNotCached) {
  const IpAddr stranger4 = ip4("192.168.1.99");
  const IpAddr stranger6 = ip6("2001:db8::99");
  EXPECT_TRUE(feed(arp_frame({.op = 2, .spa = stranger4, .tha = kOurMac, .tpa = kOur4, .eth_dst = kOurMac})));
  EXPECT_TRUE(feed(arp_frame({.op = 1, .spa = stranger4, .tpa = stranger4})));  // gratuitous
  EXPECT_TRUE(feed(nd_frame({.type = 136, .flags = 0x20, .src = stranger6, .dst = ip6("ff02::1"), .target = stranger6,
                             .options = lla(2, kPeerMac), .eth_dst = ipv6_multicast_mac(ip6("ff02::1"))})));
  EXPECT_TRUE(feed(nd_frame({.type = 136, .flags = 0x60, .src = stranger6, .dst = kOur6, .target = stranger6,
                             .options = lla(2, kPeerMac), .eth_dst = kOurMac})));
  EXPECT_FALSE(t_.lookup(stranger4).has_value());
  EXPECT_FALSE(t_.lookup(stranger6).has_value());
  EXPECT_TRUE(t_.snapshot().empty());
  EXPECT_EQ(t_.counters().unsolicited_ignored, 4u);
  EXPECT_TRUE(drain().empty());
}

TEST_F(Neighbor, AnnouncementsUpdateKnownEntriesAndOverrideRulesHold) {
  MacAddr mac;
  ASSERT_EQ(t_.resolve(kPeer4, 0, &mac), ResolveStatus::pending);
  ASSERT_EQ(t_.resolve(kPeer6, 0, &mac), ResolveStatus::pending);
  ASSERT_TRUE(feed(arp_reply_from_peer()));
  ASSERT_TRUE(feed(na_from_peer(0x60)));

  // Gratuitous ARP with a new MAC: the known entry follows.
  ASSERT_TRUE(feed(arp_frame({.op = 1, .sha = kOtherMac, .spa = kPeer4, .tpa = kPeer4}), kSec));
  EXPECT_EQ(t_.lookup(kPeer4)->mac, kOtherMac);

  // Unsolicited NA without override: the known MAC stays (RFC 4861 7.2.5).
  ASSERT_TRUE(feed(nd_frame({.type = 136, .flags = 0, .src = kPeer6, .dst = ip6("ff02::1"), .target = kPeer6,
                             .options = lla(2, kOtherMac), .eth_dst = ipv6_multicast_mac(ip6("ff02::1")),
                             .eth_src = kOtherMac}),
                   kSec));
  EXPECT_EQ(t_.lookup(kPeer6)->mac, kPeerMac);
  // With override it changes, but is not a confirmation.
  ASSERT_TRUE(feed(nd_frame({.type = 136, .flags = 0x20, .src = kPeer6, .dst = ip6("ff02::1"), .target = kPeer6,
                             .options = lla(2, kOtherMac), .eth_dst = ipv6_multicast_mac(ip6("ff02::1")),
                             .eth_src = kOtherMac}),
                   2 * kSec));
  EXPECT_EQ(t_.lookup(kPeer6)->mac, kOtherMac);
  EXPECT_EQ(t_.lookup(kPeer6)->deadline_ns, 60 * kSec);
  // A solicited NA without the option confirms without changing the MAC.
  ASSERT_TRUE(feed(na_from_peer(0x40, std::nullopt), 3 * kSec));
  EXPECT_EQ(t_.lookup(kPeer6)->mac, kOtherMac);
  EXPECT_EQ(t_.lookup(kPeer6)->deadline_ns, 63 * kSec);
  // An NS from the known neighbour with a source option updates it too.
  ASSERT_TRUE(feed(nd_frame({.options = lla(1, kPeerMac)}), 4 * kSec));
  EXPECT_EQ(t_.lookup(kPeer6)->mac, kPeerMac);
  EXPECT_EQ(drain().size(), 3u);  // the two requests and the NA answering the NS
}

TEST_F(Neighbor, VlanResolutionIsTaggedAndOnlyThatVlanAnswers) {
  const IpAddr src = ip4("10.0.100.10"), dst = ip4("10.0.100.1");
  ASSERT_EQ(t_.add_local(src, kOurMac, 100), 0);
  MacAddr mac{};
  ASSERT_EQ(t_.resolve(dst, 0, &mac, 100), ResolveStatus::pending);
  const Frames tx = drain();
  ASSERT_EQ(tx.size(), 1u);
  const ArpOut q = read_arp(tx[0]);
  ASSERT_TRUE(q.l2.tci.has_value());
  EXPECT_EQ(*q.l2.tci, 100);
  EXPECT_EQ(q.arp.spa, src);

  const Arp reply{.op = 2, .sha = kPeerMac, .spa = dst, .tha = kOurMac, .tpa = src, .eth_dst = kOurMac};
  ASSERT_TRUE(feed(arp_frame(reply)));  // untagged: another broadcast domain
  EXPECT_EQ(t_.resolve(dst, 0, &mac, 100), ResolveStatus::pending);
  Arp tagged = reply;
  tagged.tci = 100;
  ASSERT_TRUE(feed(arp_frame(tagged)));
  ASSERT_EQ(t_.resolve(dst, 0, &mac, 100), ResolveStatus::resolved);
  EXPECT_EQ(mac, kPeerMac);
  EXPECT_FALSE(t_.lookup(dst).has_value()) << "not on the untagged LAN";
  // No local address on VLAN 200: nothing to send from.
  EXPECT_EQ(t_.resolve(dst, 0, &mac, 200), ResolveStatus::failed);
}

TEST_F(Neighbor, SpecialDestinationsResolveWithoutRequests) {
  MacAddr mac{};
  ASSERT_EQ(t_.resolve(ip4("224.1.2.3"), 0, &mac), ResolveStatus::resolved);
  EXPECT_EQ(mac, (MacAddr{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03}));
  ASSERT_EQ(t_.resolve(ip4("239.129.2.3"), 0, &mac), ResolveStatus::resolved);
  EXPECT_EQ(mac, (MacAddr{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03})) << "low 23 bits";
  ASSERT_EQ(t_.resolve(ip6("ff02::1:ff00:1"), 0, &mac), ResolveStatus::resolved);
  EXPECT_EQ(mac, (MacAddr{0x33, 0x33, 0xff, 0x00, 0x00, 0x01}));
  ASSERT_EQ(t_.resolve(ip4("255.255.255.255"), 0, &mac), ResolveStatus::resolved);
  EXPECT_EQ(mac, kBroadcast);
  ASSERT_EQ(t_.resolve(kOur6, 0, &mac), ResolveStatus::resolved);
  EXPECT_EQ(mac, kOurMac);
  EXPECT_EQ(t_.resolve(ip6("::"), 0, &mac), ResolveStatus::failed);
  EXPECT_EQ(t_.resolve(ip4("0.0.0.0"), 0, &mac), ResolveStatus::failed);
  EXPECT_EQ(t_.resolve(ip4("127.0.0.1"), 0, &mac), ResolveStatus::failed);
  EXPECT_EQ(t_.resolve(ip6("::1"), 0, &mac), ResolveStatus::failed);
  EXPECT_EQ(t_.counters().resolve_invalid, 4u);
  EXPECT_TRUE(drain().empty());
  EXPECT_TRUE(t_.snapshot().empty());
}

TEST(NeighborLimits, AFullTableAndAFullQueueAreCountedNotFatal) {
  NeighborConfig cfg = test_config();
  cfg.max_entries = 2;
  cfg.max_tx_queue = 1;
  NeighborTable t(cfg);
  ASSERT_EQ(t.add_local(kOur4, kOurMac), 0);
  MacAddr mac;
  EXPECT_EQ(t.resolve(ip4("192.168.1.1"), 0, &mac), ResolveStatus::pending);
  EXPECT_EQ(t.resolve(ip4("192.168.1.2"), 0, &mac), ResolveStatus::pending);
  EXPECT_EQ(t.resolve(ip4("192.168.1.3"), 0, &mac), ResolveStatus::failed);
  EXPECT_EQ(t.counters().table_full, 1u);
  EXPECT_EQ(t.tx_queued(), 1u);
  EXPECT_EQ(t.counters().tx_queue_full, 1u);
  EXPECT_EQ(t.counters().arp.requests_sent, 1u);
  // The entry whose request was lost still follows its schedule.
  EXPECT_EQ(t.lookup(ip4("192.168.1.2"))->requests, 1u);
}

TEST(NeighborConfigErrors, LocalAddressesAreChecked) {
  NeighborTable t;
  EXPECT_EQ(t.add_local(ip6("::"), kOurMac), -EINVAL);
  EXPECT_EQ(t.add_local(ip4("0.0.0.0"), kOurMac), -EINVAL);
  EXPECT_EQ(t.add_local(ip6("ff02::1"), kOurMac), -EINVAL);
  EXPECT_EQ(t.add_local(ip4("127.0.0.1"), kOurMac), -EINVAL);
  EXPECT_EQ(t.add_local(kOur4, {0x01, 0, 0, 0, 0, 1}), -EINVAL);
  EXPECT_EQ(t.add_local(kOur4, kOurMac, 0), -EINVAL);
  EXPECT_EQ(t.add_local(kOur4, kOurMac, 4095), -EINVAL);
  EXPECT_EQ(t.add_local(kOur4, kOurMac), 0);
  EXPECT_EQ(t.add_local(kOur4, kOurMac), -EEXIST);
  EXPECT_EQ(t.add_local(kOur4, kOurMac, 100), 0);
  EXPECT_TRUE(t.is_local(kOur4, 100));
  EXPECT_EQ(t.remove_local(kOur4, 100), 0);
  EXPECT_EQ(t.remove_local(kOur4, 100), -ENOENT);
  EXPECT_FALSE(t.is_local(kOur4, 100));
  EXPECT_TRUE(t.is_local(kOur4));
}

TEST_F(Neighbor, MulticastMacsCoverAllNodesAndEachSolicitedNodeGroup) {
  ASSERT_EQ(t_.add_local(ip6("fe80::10"), kOurMac), 0);  // same group as 2001:db8::10
  ASSERT_EQ(t_.add_local(ip6("2001:db8::abcd:1234"), kOurMac), 0);
  const std::vector<MacAddr> macs = t_.multicast_macs();
  const std::vector<MacAddr> expected = {{0x33, 0x33, 0, 0, 0, 1},
                                         {0x33, 0x33, 0xff, 0, 0, 0x10},
                                         {0x33, 0x33, 0xff, 0xcd, 0x12, 0x34}};
  EXPECT_EQ(macs, expected);
  EXPECT_EQ(solicited_node_multicast(ip6("2001:db8::abcd:1234")), ip6("ff02::1:ffcd:1234"));
}

}  // namespace
}  // namespace droce::net
