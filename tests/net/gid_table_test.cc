// GidTable: index 0 is the port's link-local GID and stays; addresses take
// the lowest free index and never move; IPv4 appears IPv4-mapped; source GID
// selection follows the destination's version and scope.

#include "net/gid_table.h"
#include "tests/test_support.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cerrno>

namespace droce::net {
namespace {

constexpr MacAddr kPortMac = {0x52, 0x54, 0x00, 0x12, 0x34, 0x56};

using test::ip4;
using test::ip6;

TEST(GidTable, LinkLocalGidIsTheModifiedEui64OfTheMac) {
  EXPECT_EQ(ipv6_link_local_from_mac(kPortMac), ip6("fe80::5054:ff:fe12:3456"));
  // The universal/local bit is inverted, not set.
  EXPECT_EQ(ipv6_link_local_from_mac({0x02, 0, 0, 0, 0, 1}), ip6("fe80::ff:fe00:1"));
  EXPECT_EQ(ipv6_link_local_from_mac({0x00, 0x1b, 0x21, 0xaa, 0xbb, 0xcc}), ip6("fe80::21b:21ff:feaa:bbcc"));
}

TEST(GidTable, IndexZeroIsTheLinkLocalGidAndIsPermanent) {
  GidTable t(kPortMac, "eth0");
  EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(t.capacity(), GidTable::kDefaultCapacity);
  const GidEntry* e = t.at(0);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->gid, ip6("fe80::5054:ff:fe12:3456"));
  EXPECT_EQ(e->type, GidType::roce_v2);
  EXPECT_EQ(e->vlan, kNoVlan);
  EXPECT_EQ(e->mac, kPortMac);
  EXPECT_EQ(e->netdev, "eth0");
  EXPECT_EQ(t.at(1), nullptr);
  EXPECT_EQ(t.at(t.capacity()), nullptr);

  EXPECT_EQ(t.remove(ip6("fe80::5054:ff:fe12:3456")), -EBUSY);
  EXPECT_EQ(t.add(ip6("fe80::5054:ff:fe12:3456")), -EEXIST);
  EXPECT_NE(t.at(0), nullptr);
  // The same link-local address on a VLAN is that VLAN's GID.
  EXPECT_EQ(t.add(ip6("fe80::5054:ff:fe12:3456"), 100), 1);
  EXPECT_EQ(t.find(ip6("fe80::5054:ff:fe12:3456")), 0);
  EXPECT_EQ(t.find(ip6("fe80::5054:ff:fe12:3456"), 100), 1);
}

TEST(GidTable, Ipv4AddressesAreIpv4MappedRoceV2Gids) {
  GidTable t(kPortMac, "eth0");
  const int i = t.add(ip4("192.168.1.10"));
  ASSERT_EQ(i, 1);
  const GidEntry* e = t.at(1);
  ASSERT_NE(e, nullptr);
  const Gid expected = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 1, 10};
  EXPECT_EQ(e->gid, expected);
  EXPECT_EQ(e->gid, ip6("::ffff:192.168.1.10"));
  EXPECT_EQ(e->type, GidType::roce_v2);
  EXPECT_EQ(e->mac, kPortMac);
  EXPECT_EQ(e->netdev, "eth0");
  EXPECT_EQ(t.find(expected), 1);
  EXPECT_EQ(t.find(ip4("192.168.1.11")), -ENOENT);
  // IPv6 addresses are their own GIDs.
  ASSERT_EQ(t.add(ip6("2001:db8::10")), 2);
  EXPECT_EQ(t.at(2)->gid, ip6("2001:db8::10"));
}

TEST(GidTable, IndexesAreStableAcrossAddAndRemove) {
  GidTable t(kPortMac, "eth0");
  const IpAddr a = ip4("10.0.0.1"), b = ip6("2001:db8::1"), c = ip4("10.0.0.3");
  ASSERT_EQ(t.add(a), 1);
  ASSERT_EQ(t.add(b), 2);
  ASSERT_EQ(t.add(c), 3);
  ASSERT_EQ(t.remove(b), 0);
  EXPECT_EQ(t.at(2), nullptr) << "a freed slot stays empty";
  EXPECT_EQ(t.find(a), 1);
  EXPECT_EQ(t.find(c), 3) << "nothing moved down";
  EXPECT_EQ(t.at(3)->gid, c);
  EXPECT_EQ(t.size(), 3u);
  EXPECT_EQ(t.remove(b), -ENOENT);
  // The hole is reused first, then the table grows.
  EXPECT_EQ(t.add(ip4("10.0.0.4")), 2);
  EXPECT_EQ(t.add(ip4("10.0.0.5")), 4);
  EXPECT_EQ(t.add(b), 5) << "a returning address gets whatever is free, not its old index";
  EXPECT_EQ(t.find(a), 1);
  EXPECT_EQ(t.find(c), 3);
  EXPECT_EQ(t.add(a), -EEXIST);
}

TEST(GidTable, FullTableRefusesAndReusesFreedSlots) {
  GidTable t(kPortMac, "eth0", 3);
  EXPECT_EQ(t.add(ip4("10.0.0.1")), 1);
  EXPECT_EQ(t.add(ip4("10.0.0.2")), 2);
  EXPECT_EQ(t.add(ip4("10.0.0.3")), -ENOSPC);
  EXPECT_EQ(t.remove(ip4("10.0.0.1")), 0);
  EXPECT_EQ(t.add(ip4("10.0.0.3")), 1);
}

TEST(GidTable, BadAddressesAreRefused) {
  GidTable t(kPortMac, "eth0");
  EXPECT_EQ(t.add(ip6("::")), -EINVAL);
  EXPECT_EQ(t.add(ip4("0.0.0.0")), -EINVAL);
  EXPECT_EQ(t.add(ip6("ff02::1")), -EINVAL);
  EXPECT_EQ(t.add(ip4("224.0.0.1")), -EINVAL);
  EXPECT_EQ(t.add(ip4("255.255.255.255")), -EINVAL);
  EXPECT_EQ(t.add(ip6("::1")), -EINVAL);
  EXPECT_EQ(t.add(ip4("127.0.0.1")), -EINVAL);
  EXPECT_EQ(t.add(ip4("10.0.0.1"), 0), -EINVAL);
  EXPECT_EQ(t.add(ip4("10.0.0.1"), 4095), -EINVAL);
  EXPECT_EQ(t.add(ip4("10.0.0.1"), kNoVlan, {}, MacAddr{0x01, 0, 0, 0, 0, 1}), -EINVAL);
  EXPECT_EQ(t.size(), 1u);
}

TEST(GidTable, VlanEntriesCarryTheirVlanNetdevAndMac) {
  GidTable t(kPortMac, "eth0");
  const MacAddr macvlan = {0x02, 0x11, 0x22, 0x33, 0x44, 0x55};
  ASSERT_EQ(t.add(ip4("10.0.100.10"), 100), 1);
  ASSERT_EQ(t.add(ip4("10.0.200.10"), 200, "vlan200", macvlan), 2);
  ASSERT_EQ(t.add(ip4("10.0.100.10")), 3) << "the same address untagged is another GID entry";
  EXPECT_EQ(t.at(1)->vlan, 100);
  EXPECT_EQ(t.at(1)->netdev, "eth0.100");
  EXPECT_EQ(t.at(1)->mac, kPortMac);
  EXPECT_EQ(t.at(2)->vlan, 200);
  EXPECT_EQ(t.at(2)->netdev, "vlan200");
  EXPECT_EQ(t.at(2)->mac, macvlan);
  EXPECT_EQ(t.find(ip4("10.0.100.10")), 1);
  EXPECT_EQ(t.find(ip4("10.0.100.10"), kNoVlan), 3);
  EXPECT_EQ(t.find(ip4("10.0.100.10"), 200), -ENOENT);
  EXPECT_EQ(t.remove(ip4("10.0.100.10"), 100), 0);
  EXPECT_EQ(t.find(ip4("10.0.100.10")), 3);
}

TEST(GidTable, DestinationPicksTheSameVersionGlobalBeforeLinkLocal) {
  GidTable t(kPortMac, "eth0");
  // Only the link-local GID: it serves IPv6 of any scope; IPv4 has nothing.
  EXPECT_EQ(t.find_for_destination(ip6("2001:db8::99")), 0);
  EXPECT_EQ(t.find_for_destination(ip6("fe80::99")), 0);
  EXPECT_EQ(t.find_for_destination(ip4("192.168.1.1")), -ENOENT);
  EXPECT_EQ(t.find_for_destination(ip6("::")), -EINVAL);
  EXPECT_EQ(t.find_for_destination(ip4("0.0.0.0")), -EINVAL);

  ASSERT_EQ(t.add(ip4("10.0.0.1")), 1);
  ASSERT_EQ(t.add(ip4("192.168.1.10")), 2);
  ASSERT_EQ(t.add(ip6("2001:db8::1")), 3);
  ASSERT_EQ(t.add(ip6("2001:db8:1::1")), 4);
  ASSERT_EQ(t.add(ip6("fd00::1")), 5);

  EXPECT_EQ(t.find_for_destination(ip4("192.168.1.20")), 2);
  EXPECT_EQ(t.find_for_destination(ip4("10.1.1.1")), 1);
  EXPECT_EQ(t.find_for_destination(ip4("20.0.0.1")), 1) << "longest common prefix (3 bits against 0)";
  EXPECT_EQ(t.find_for_destination(ip4("172.16.0.1")), 2) << "longest common prefix (1 bit against 0)";
  EXPECT_EQ(t.find_for_destination(ip6("2001:db8:1::2")), 4);
  EXPECT_EQ(t.find_for_destination(ip6("2001:db8::5")), 3);
  EXPECT_EQ(t.find_for_destination(ip6("fd00::9")), 5);
  EXPECT_EQ(t.find_for_destination(ip6("2a00::1")), 3) << "any global beats link-local; a tie (3, 4) takes the lowest index";
  EXPECT_EQ(t.find_for_destination(ip6("fe80::1234")), 0) << "link-local to link-local";

  // A VLAN narrows the choice to that VLAN's GIDs.
  ASSERT_EQ(t.add(ip6("2001:db8::100"), 100), 6);
  ASSERT_EQ(t.add(ip4("10.0.100.10"), 100), 7);
  EXPECT_EQ(t.find_for_destination(ip6("2001:db8::5"), 100), 6);
  EXPECT_EQ(t.find_for_destination(ip6("2001:db8::5"), kNoVlan), 3);
  EXPECT_EQ(t.find_for_destination(ip4("10.0.0.2"), 100), 7);
  EXPECT_EQ(t.find_for_destination(ip6("fe80::1"), 100), -ENOENT) << "no link-local GID on VLAN 100";
  EXPECT_EQ(t.find_for_destination(ip6("fe80::1"), kNoVlan), 0);

  // Remove the globals: a global IPv6 destination falls back to link-local.
  for (const char* g : {"2001:db8::1", "2001:db8:1::1", "fd00::1"}) ASSERT_EQ(t.remove(ip6(g)), 0);
  EXPECT_EQ(t.find_for_destination(ip6("2001:db8::5"), kNoVlan), 0);
}

TEST(GidTable, TypeNamesAreSysfsNames) {
  EXPECT_STREQ(to_string(GidType::roce_v2), "RoCE v2");
  EXPECT_STREQ(to_string(GidType::roce_v1), "IB/RoCE v1");
  EXPECT_STREQ(to_string(GidType::ib), "IB");
  EXPECT_EQ(static_cast<int>(GidType::roce_v2), 2) << "ibv_gid_type's IBV_GID_TYPE_ROCE_V2";
}

}  // namespace
}  // namespace droce::net

namespace droce::net {
namespace {

// The data path's address compares (Engine::build, is_local_ip, the port's MAC filter):
// each byte counts, including the last of each half.
TEST(Addr, SameIpAndSameMacCompareEveryByte) {
  const IpAddr a = ipv4_mapped(0x0a4d0001);
  EXPECT_TRUE(same_ip(a, a));
  EXPECT_TRUE(same_ip(IpAddr{}, IpAddr{}));
  for (size_t i = 0; i < a.size(); ++i) {
    IpAddr b = a;
    b[i] ^= 0x80;
    EXPECT_FALSE(same_ip(a, b)) << i;
    EXPECT_FALSE(same_ip(b, a)) << i;
  }
  const MacAddr m{0x02, 0x00, 0x00, 0x00, 0x00, 0x01};
  EXPECT_TRUE(same_mac(m.data(), m.data()));
  for (size_t i = 0; i < m.size(); ++i) {
    MacAddr n = m;
    n[i] ^= 0x01;
    EXPECT_FALSE(same_mac(m.data(), n.data())) << i;
  }
}

}  // namespace
}  // namespace droce::net
