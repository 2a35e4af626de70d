// RouteTable and the route / address parsers (net/route_table.h).

#include "net/route_table.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <string>

namespace droce::net {
namespace {

IpAddr ip(const char* text) {
  IpAddr a;
  int len;
  EXPECT_EQ(parse_address_prefix(text, &a, &len), 0) << text;
  return a;
}

Route route(const char* text) {
  Route r;
  std::string err;
  EXPECT_EQ(parse_route(text, &r, &err), 0) << text << ": " << err;
  return r;
}

TEST(RouteParse, ReadsIproute2Words) {
  Route r = route("10.61.2.0/24 via 10.61.1.1 metric 5 hoplimit 32");
  EXPECT_TRUE(same_ip(r.prefix, ip("10.61.2.0")));
  EXPECT_EQ(r.prefix_len, 96 + 24);
  EXPECT_TRUE(same_ip(r.gateway, ip("10.61.1.1")));
  EXPECT_EQ(r.metric, 5u);
  EXPECT_EQ(r.hop_limit, 32);
  EXPECT_EQ(format_route(r), "10.61.2.0/24 via 10.61.1.1 metric 5 hoplimit 32");

  r = route("default via 10.0.0.1");
  EXPECT_EQ(r.prefix_len, 96);
  EXPECT_TRUE(same_ip(r.prefix, ipv4_mapped(0)));
  EXPECT_EQ(format_route(r), "default via 10.0.0.1");

  r = route("default via fd00::1");
  EXPECT_EQ(r.prefix_len, 0);
  EXPECT_EQ(format_route(r), "default via fd00::1");

  r = route("fd00:2::/64");
  EXPECT_TRUE(r.on_link());
  EXPECT_EQ(r.prefix_len, 64);
  r = route("10.9.9.9");  // a host route
  EXPECT_EQ(r.prefix_len, 128);
}

TEST(RouteParse, RefusesWhatIpRouteRefuses) {
  Route r;
  std::string err;
  EXPECT_EQ(parse_route("", &r, &err), -EINVAL);
  EXPECT_EQ(parse_route("10.61.2.1/24 via 10.61.1.1", &r, &err), -EINVAL);
  EXPECT_NE(err.find("host bits"), std::string::npos) << err;
  EXPECT_EQ(parse_route("10.61.2.0/33", &r, &err), -EINVAL);
  EXPECT_EQ(parse_route("10.61.2.0/24 via fd00::1", &r, &err), -EINVAL);
  EXPECT_NE(err.find("family"), std::string::npos) << err;
  EXPECT_EQ(parse_route("10.61.2.0/24 via", &r, &err), -EINVAL);
  EXPECT_EQ(parse_route("10.61.2.0/24 dev eth0", &r, &err), -EINVAL);
  EXPECT_EQ(parse_route("10.61.2.0/24 hoplimit 0", &r, &err), -EINVAL);
  EXPECT_EQ(parse_route("10.61.2.0/24 hoplimit 256", &r, &err), -EINVAL);
  EXPECT_EQ(parse_route("bogus/24", &r, &err), -EINVAL);
}

TEST(AddressPrefix, PrefixInGidBits) {
  IpAddr a;
  int len;
  ASSERT_EQ(parse_address_prefix("10.61.1.2/24", &a, &len), 0);
  EXPECT_EQ(len, 120);
  EXPECT_TRUE(same_ip(a, ipv4_mapped(0x0a3d0102)));
  ASSERT_EQ(parse_address_prefix("fd00::2/64", &a, &len), 0);
  EXPECT_EQ(len, 64);
  ASSERT_EQ(parse_address_prefix("10.61.1.2", &a, &len), 0);
  EXPECT_EQ(len, -1);
  EXPECT_EQ(parse_address_prefix("10.61.1.2/40", &a, &len), -EINVAL);
  EXPECT_EQ(parse_address_prefix("10.61.1.2/", &a, &len), -EINVAL);
  EXPECT_EQ(parse_address_prefix("fd00::2/129", &a, &len), -EINVAL);
}

TEST(RouteTable, EmptyTableKeepsEveryDestinationOnLink) {
  RouteTable t;
  NextHop nh;
  ASSERT_EQ(t.lookup(ip("10.1.2.3"), &nh), 0);
  EXPECT_TRUE(same_ip(nh.ip, ip("10.1.2.3")));
  EXPECT_FALSE(nh.via_gateway);
  EXPECT_EQ(nh.hop_limit, kDefaultHopLimit);
  EXPECT_EQ(t.lookup(IpAddr{}, &nh), -EINVAL);
}

TEST(RouteTable, LongestPrefixThenMetricThenFirst) {
  RouteTable t;
  ASSERT_EQ(t.add_on_link(ip("10.61.1.2"), 120), 0);
  ASSERT_EQ(t.add_on_link(ip("10.61.1.3"), 120), 0);  // same subnet: not an error
  ASSERT_EQ(t.add(route("default via 10.61.1.1")), 0);
  ASSERT_EQ(t.add(route("10.62.0.0/16 via 10.61.1.254 metric 10")), 0);
  ASSERT_EQ(t.add(route("10.62.0.0/16 via 10.61.1.253 metric 5 hoplimit 9")), 0);
  EXPECT_EQ(t.add(route("10.62.0.0/16 via 10.61.1.253 metric 5")), -EEXIST);

  NextHop nh;
  ASSERT_EQ(t.lookup(ip("10.61.1.77"), &nh), 0);  // on link
  EXPECT_TRUE(same_ip(nh.ip, ip("10.61.1.77")));
  EXPECT_FALSE(nh.via_gateway);
  ASSERT_EQ(t.lookup(ip("10.62.3.4"), &nh), 0);  // /16, lower metric
  EXPECT_TRUE(same_ip(nh.ip, ip("10.61.1.253")));
  EXPECT_TRUE(nh.via_gateway);
  EXPECT_EQ(nh.hop_limit, 9);
  ASSERT_EQ(t.lookup(ip("192.0.2.1"), &nh), 0);  // default
  EXPECT_TRUE(same_ip(nh.ip, ip("10.61.1.1")));
  EXPECT_EQ(nh.hop_limit, kDefaultHopLimit);

  ASSERT_EQ(t.remove(route("default via 10.61.1.1")), 0);
  EXPECT_EQ(t.remove(route("default via 10.61.1.1")), -ENOENT);
  EXPECT_EQ(t.lookup(ip("192.0.2.1"), &nh), -ENETUNREACH);
}

TEST(RouteTable, FamiliesAreSeparate) {
  RouteTable t;
  ASSERT_EQ(t.add(route("default via fd00::1")), 0);
  NextHop nh;
  // IPv6's ::/0 does not catch IPv4, which has no route at all: on link.
  ASSERT_EQ(t.lookup(ip("10.1.1.1"), &nh), 0);
  EXPECT_TRUE(same_ip(nh.ip, ip("10.1.1.1")));
  ASSERT_EQ(t.lookup(ip("fd01::5"), &nh), 0);
  EXPECT_TRUE(same_ip(nh.ip, ip("fd00::1")));
  // Link-local and multicast destinations never go through a gateway.
  ASSERT_EQ(t.lookup(ip("fe80::1234"), &nh), 0);
  EXPECT_FALSE(nh.via_gateway);
  ASSERT_EQ(t.lookup(ip("ff02::1"), &nh), 0);
  EXPECT_FALSE(nh.via_gateway);
}

TEST(RouteTable, RefusesBadRoutes) {
  RouteTable t;
  Route r = route("10.0.0.0/8 via 10.0.0.1");
  r.prefix[13] = 1;  // host bits
  EXPECT_EQ(t.add(r), -EINVAL);
  r = route("10.0.0.0/8");
  r.gateway = ip("fd00::1");
  EXPECT_EQ(t.add(r), -EINVAL);
  r.gateway = ip("224.0.0.1");
  EXPECT_EQ(t.add(r), -EINVAL);
  r.gateway = ip("127.0.0.1");
  EXPECT_EQ(t.add(r), -EINVAL);
  r.gateway = IpAddr{};
  r.prefix_len = 129;
  EXPECT_EQ(t.add(r), -EINVAL);
  EXPECT_TRUE(t.routes().empty());
}

}  // namespace
}  // namespace droce::net
