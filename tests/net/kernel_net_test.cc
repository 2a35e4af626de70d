// KernelNet's rtnetlink codec with crafted messages, and one live round trip on
// the loopback netdev of the test's own namespace (net/kernel_net.h).

#include "net/kernel_net.h"

#include <gtest/gtest.h>
#include <linux/if_addr.h>
#include <net/if.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>

#include <cstring>
#include <vector>

#include "net/route_table.h"

namespace droce::net {
namespace {

// Builds one netlink message: header, fixed body, attributes.
class Msg {
 public:
  Msg(uint16_t type, const void* body, size_t len) {
    b_.resize(NLMSG_HDRLEN);
    nlmsghdr h{};
    h.nlmsg_type = type;
    std::memcpy(b_.data(), &h, sizeof h);
    const size_t at = b_.size();
    b_.resize(at + NLMSG_ALIGN(len));
    std::memcpy(b_.data() + at, body, len);
  }
  Msg& attr(uint16_t type, const void* data, size_t len) {
    const size_t at = b_.size();
    b_.resize(at + RTA_SPACE(len));
    rtattr a{uint16_t(RTA_LENGTH(len)), type};
    std::memcpy(b_.data() + at, &a, sizeof a);
    std::memcpy(b_.data() + at + RTA_LENGTH(0), data, len);
    return *this;
  }
  Msg& u32(uint16_t type, uint32_t v) { return attr(type, &v, 4); }
  std::vector<uint8_t> done() {
    nlmsghdr h;
    std::memcpy(&h, b_.data(), sizeof h);
    h.nlmsg_len = uint32_t(b_.size());
    std::memcpy(b_.data(), &h, sizeof h);
    return b_;
  }

 private:
  std::vector<uint8_t> b_;
};

IpAddr ip(const char* text) {
  IpAddr a;
  int len;
  EXPECT_EQ(parse_address_prefix(text, &a, &len), 0);
  return a;
}

const uint8_t kV4Gw[4] = {10, 61, 1, 1};

TEST(KernelNetCodec, RouteGetAsksForTheDestinationOutOfTheNetdev) {
  uint8_t buf[kRequestBufferSize];
  const size_t len = build_route_get(buf, 7, ip("10.61.2.2"), ip("10.61.1.2"), 5);
  nlmsghdr h;
  std::memcpy(&h, buf, sizeof h);
  EXPECT_EQ(h.nlmsg_len, len);
  EXPECT_EQ(h.nlmsg_type, RTM_GETROUTE);
  EXPECT_EQ(h.nlmsg_seq, 7u);
  EXPECT_EQ(h.nlmsg_flags & NLM_F_REQUEST, NLM_F_REQUEST);
  rtmsg rt;
  std::memcpy(&rt, buf + NLMSG_HDRLEN, sizeof rt);
  EXPECT_EQ(rt.rtm_family, AF_INET);
  EXPECT_EQ(rt.rtm_dst_len, 32);
  // RTA_DST (4 bytes), RTA_SRC (4 bytes), RTA_OIF (5).
  size_t off = NLMSG_HDRLEN + NLMSG_ALIGN(sizeof rt);
  std::vector<std::pair<uint16_t, std::vector<uint8_t>>> attrs;
  while (off < len) {
    rtattr a;
    std::memcpy(&a, buf + off, sizeof a);
    attrs.push_back({a.rta_type, std::vector<uint8_t>(buf + off + 4, buf + off + a.rta_len)});
    off += RTA_ALIGN(a.rta_len);
  }
  ASSERT_EQ(attrs.size(), 3u);
  EXPECT_EQ(attrs[0].first, RTA_DST);
  EXPECT_EQ(attrs[0].second, (std::vector<uint8_t>{10, 61, 2, 2}));
  EXPECT_EQ(attrs[1].first, RTA_SRC);
  EXPECT_EQ(attrs[1].second, (std::vector<uint8_t>{10, 61, 1, 2}));
  EXPECT_EQ(attrs[2].first, RTA_OIF);
  int oif;
  std::memcpy(&oif, attrs[2].second.data(), 4);
  EXPECT_EQ(oif, 5);

  // IPv6, no source: RTA_DST of 16 bytes and RTA_OIF only.
  const size_t len6 = build_route_get(buf, 8, ip("fd00:62::2"), IpAddr{}, 5);
  std::memcpy(&rt, buf + NLMSG_HDRLEN, sizeof rt);
  EXPECT_EQ(rt.rtm_family, AF_INET6);
  EXPECT_EQ(len6, NLMSG_HDRLEN + NLMSG_ALIGN(sizeof rt) + RTA_SPACE(16) + RTA_SPACE(4));
}

TEST(KernelNetCodec, NeighUseAsksTheKernelToResolve) {
  uint8_t buf[kRequestBufferSize];
  build_neigh_use(buf, 9, 3, ip("fd00::1"));
  nlmsghdr h;
  std::memcpy(&h, buf, sizeof h);
  EXPECT_EQ(h.nlmsg_type, RTM_NEWNEIGH);
  EXPECT_EQ(h.nlmsg_flags & (NLM_F_CREATE | NLM_F_ACK), NLM_F_CREATE | NLM_F_ACK);
  ndmsg nd;
  std::memcpy(&nd, buf + NLMSG_HDRLEN, sizeof nd);
  EXPECT_EQ(nd.ndm_family, AF_INET6);
  EXPECT_EQ(nd.ndm_ifindex, 3);
  EXPECT_EQ(nd.ndm_flags, NTF_USE);
}

TEST(KernelNetCodec, ParsesARouteThroughAGateway) {
  rtmsg rt{};
  rt.rtm_family = AF_INET;
  rt.rtm_type = RTN_UNICAST;
  // RTA_METRICS holding RTAX_HOPLIMIT 32, nested.
  std::vector<uint8_t> metrics(RTA_SPACE(4));
  rtattr inner{uint16_t(RTA_LENGTH(4)), RTAX_HOPLIMIT};
  std::memcpy(metrics.data(), &inner, sizeof inner);
  const uint32_t hl = 32;
  std::memcpy(metrics.data() + RTA_LENGTH(0), &hl, 4);
  const uint8_t src[4] = {10, 61, 1, 2};
  auto m = Msg(RTM_NEWROUTE, &rt, sizeof rt)
               .u32(RTA_OIF, 4)
               .attr(RTA_GATEWAY, kV4Gw, 4)
               .attr(RTA_PREFSRC, src, 4)
               .attr(RTA_METRICS, metrics.data(), metrics.size())
               .done();
  KernelRoute r;
  int err = 0;
  ASSERT_EQ(parse_route(m, &r, &err), NlParse::ok);
  EXPECT_EQ(r.oif, 4);
  EXPECT_TRUE(same_ip(r.gateway, ip("10.61.1.1")));
  EXPECT_TRUE(same_ip(r.prefsrc, ip("10.61.1.2")));
  EXPECT_EQ(r.hop_limit, 32);
  EXPECT_EQ(r.type, RTN_UNICAST);
}

TEST(KernelNetCodec, ErrorsAcksAndMalformedMessages) {
  nlmsgerr e{};
  e.error = -ENETUNREACH;
  auto m = Msg(NLMSG_ERROR, &e, sizeof e).done();
  KernelRoute r;
  int err = 0;
  EXPECT_EQ(parse_route(m, &r, &err), NlParse::error);
  EXPECT_EQ(err, -ENETUNREACH);
  e.error = 0;
  m = Msg(NLMSG_ERROR, &e, sizeof e).done();
  EXPECT_EQ(parse_route(m, &r, &err), NlParse::ack);

  // An attribute that claims to run past the message.
  rtmsg rt{};
  rt.rtm_family = AF_INET;
  m = Msg(RTM_NEWROUTE, &rt, sizeof rt).attr(RTA_GATEWAY, kV4Gw, 4).done();
  m[NLMSG_HDRLEN + NLMSG_ALIGN(sizeof rt)] = 200;  // rta_len
  EXPECT_EQ(parse_route(m, &r, &err), NlParse::malformed);
  // A gateway of the wrong length for the family.
  m = Msg(RTM_NEWROUTE, &rt, sizeof rt).attr(RTA_GATEWAY, kV4Gw, 3).done();
  EXPECT_EQ(parse_route(m, &r, &err), NlParse::malformed);
  // A header longer than the datagram.
  m = Msg(RTM_NEWROUTE, &rt, sizeof rt).done();
  m.resize(m.size() - 2);
  EXPECT_EQ(parse_route(m, &r, &err), NlParse::malformed);
  // Another type.
  ndmsg nd{};
  m = Msg(RTM_NEWNEIGH, &nd, sizeof nd).done();
  EXPECT_EQ(parse_route(m, &r, &err), NlParse::other);
}

TEST(KernelNetCodec, ParsesNeighbours) {
  ndmsg nd{};
  nd.ndm_family = AF_INET;
  nd.ndm_ifindex = 4;
  nd.ndm_state = NUD_REACHABLE;
  const uint8_t mac[6] = {2, 0, 0, 0, 0, 9};
  auto m = Msg(RTM_NEWNEIGH, &nd, sizeof nd).attr(NDA_DST, kV4Gw, 4).attr(NDA_LLADDR, mac, 6).done();
  KernelNeighbor n;
  int err = 0;
  ASSERT_EQ(parse_neigh(m, &n, &err), NlParse::ok);
  EXPECT_EQ(n.ifindex, 4);
  EXPECT_TRUE(same_ip(n.ip, ip("10.61.1.1")));
  EXPECT_TRUE(n.has_lladdr);
  EXPECT_EQ(n.lladdr, (MacAddr{2, 0, 0, 0, 0, 9}));
  EXPECT_EQ(n.state, NUD_REACHABLE);
  // INCOMPLETE: no link-layer address yet.
  nd.ndm_state = NUD_INCOMPLETE;
  m = Msg(RTM_NEWNEIGH, &nd, sizeof nd).attr(NDA_DST, kV4Gw, 4).done();
  ASSERT_EQ(parse_neigh(m, &n, &err), NlParse::ok);
  EXPECT_FALSE(n.has_lladdr);
  // No destination, or a link-layer address that is not Ethernet's.
  m = Msg(RTM_NEWNEIGH, &nd, sizeof nd).attr(NDA_LLADDR, mac, 6).done();
  EXPECT_EQ(parse_neigh(m, &n, &err), NlParse::malformed);
  m = Msg(RTM_NEWNEIGH, &nd, sizeof nd).attr(NDA_DST, kV4Gw, 4).attr(NDA_LLADDR, mac, 5).done();
  EXPECT_EQ(parse_neigh(m, &n, &err), NlParse::malformed);
}

TEST(KernelNetCodec, ParsesLinkStatesAsUpOnlyWhenUpAndRunning) {
  ifinfomsg ifi{};
  ifi.ifi_family = AF_UNSPEC;
  ifi.ifi_index = 7;
  ifi.ifi_flags = IFF_UP | IFF_RUNNING | 0x10000;  // and IFF_LOWER_UP (linux/if.h, which net/if.h excludes)
  const char name[] = "vb";
  auto m = Msg(RTM_NEWLINK, &ifi, sizeof ifi).attr(IFLA_IFNAME, name, sizeof name).u32(IFLA_MTU, 9000).done();
  KernelLink l;
  int err = 0;
  ASSERT_EQ(parse_link(m, &l, &err), NlParse::ok);
  EXPECT_EQ(l.ifindex, 7);
  EXPECT_TRUE(l.up);
  // Administratively up, no carrier (the veth's peer went down): not up.
  ifi.ifi_flags = IFF_UP;
  m = Msg(RTM_NEWLINK, &ifi, sizeof ifi).done();
  ASSERT_EQ(parse_link(m, &l, &err), NlParse::ok);
  EXPECT_FALSE(l.up);
  // Running but set down by the operator: not up.
  ifi.ifi_flags = IFF_RUNNING;
  m = Msg(RTM_NEWLINK, &ifi, sizeof ifi).done();
  ASSERT_EQ(parse_link(m, &l, &err), NlParse::ok);
  EXPECT_FALSE(l.up);
  // The netdev removed.
  ifi.ifi_flags = IFF_UP | IFF_RUNNING;
  m = Msg(RTM_DELLINK, &ifi, sizeof ifi).done();
  ASSERT_EQ(parse_link(m, &l, &err), NlParse::ok);
  EXPECT_FALSE(l.up);
  // An address message is another type; an attribute running past the message is malformed.
  ifaddrmsg ifa{};
  EXPECT_EQ(parse_link(Msg(RTM_NEWADDR, &ifa, sizeof ifa).done(), &l, &err), NlParse::other);
  m = Msg(RTM_NEWLINK, &ifi, sizeof ifi).u32(IFLA_MTU, 1500).done();
  rtattr bad{uint16_t(RTA_LENGTH(64)), IFLA_MTU};
  std::memcpy(m.data() + NLMSG_HDRLEN + NLMSG_ALIGN(sizeof ifi), &bad, sizeof bad);
  EXPECT_EQ(parse_link(m, &l, &err), NlParse::malformed);
  // Shorter than its header says.
  m = Msg(RTM_NEWLINK, &ifi, sizeof ifi).done();
  m.resize(NLMSG_HDRLEN + 4);
  EXPECT_EQ(parse_link(m, &l, &err), NlParse::malformed);
}

TEST(KernelNetCodec, ParsesAddressesAndTheirUsability) {
  ifaddrmsg ifa{};
  ifa.ifa_family = AF_INET;
  ifa.ifa_prefixlen = 24;
  ifa.ifa_index = 4;
  const uint8_t local[4] = {10, 61, 1, 2};
  auto m = Msg(RTM_NEWADDR, &ifa, sizeof ifa).attr(IFA_ADDRESS, kV4Gw, 4).attr(IFA_LOCAL, local, 4).done();
  KernelAddress a;
  int err = 0;
  ASSERT_EQ(parse_addr(m, &a, &err), NlParse::ok);
  EXPECT_TRUE(same_ip(a.ip, ip("10.61.1.2"))) << "IFA_LOCAL is the netdev's own";
  EXPECT_EQ(a.prefix_len, 24);
  EXPECT_EQ(a.ifindex, 4);
  EXPECT_TRUE(a.usable());

  ifa.ifa_family = AF_INET6;
  ifa.ifa_prefixlen = 64;
  const IpAddr v6 = ip("fd00:61::2");
  m = Msg(RTM_NEWADDR, &ifa, sizeof ifa).attr(IFA_ADDRESS, v6.data(), 16).u32(IFA_FLAGS, IFA_F_TENTATIVE).done();
  ASSERT_EQ(parse_addr(m, &a, &err), NlParse::ok);
  EXPECT_TRUE(same_ip(a.ip, v6));
  EXPECT_FALSE(a.usable()) << "still in duplicate address detection";
  m = Msg(RTM_NEWADDR, &ifa, sizeof ifa).attr(IFA_ADDRESS, v6.data(), 16).u32(IFA_FLAGS, IFA_F_NODAD).done();
  ASSERT_EQ(parse_addr(m, &a, &err), NlParse::ok);
  EXPECT_TRUE(a.usable());
  m = Msg(RTM_DELADDR, &ifa, sizeof ifa).attr(IFA_ADDRESS, v6.data(), 16).done();
  ASSERT_EQ(parse_addr(m, &a, &err), NlParse::ok);
  EXPECT_FALSE(a.added);
  EXPECT_FALSE(a.usable());
  // Neither address attribute.
  m = Msg(RTM_NEWADDR, &ifa, sizeof ifa).done();
  EXPECT_EQ(parse_addr(m, &a, &err), NlParse::malformed);
}

TEST(KernelNetCodec, WalksSeveralMessagesInOneDatagram) {
  ndmsg nd{};
  nd.ndm_family = AF_INET;
  auto a = Msg(RTM_NEWNEIGH, &nd, sizeof nd).attr(NDA_DST, kV4Gw, 4).done();
  auto b = Msg(NLMSG_DONE, &nd, 4).done();
  std::vector<uint8_t> both = a;
  both.resize(NLMSG_ALIGN(both.size()));
  both.insert(both.end(), b.begin(), b.end());
  std::vector<uint16_t> types;
  EXPECT_TRUE(for_each_message(both, [&](uint16_t t, std::span<const uint8_t>) { types.push_back(t); }));
  EXPECT_EQ(types, (std::vector<uint16_t>{RTM_NEWNEIGH, NLMSG_DONE}));
  both[both.size() - b.size()] = 0xff;  // the second's length runs past the datagram
  types.clear();
  EXPECT_FALSE(for_each_message(both, [&](uint16_t t, std::span<const uint8_t>) { types.push_back(t); }));
}

// The kernel itself, in the test's own namespace: needs no privileges.
TEST(KernelNetLive, LoopbackRouteAndAddresses) {
  std::unique_ptr<KernelNet> k;
  EXPECT_EQ(KernelNet::open("droce-no-such0", &k), -ENODEV);
  ASSERT_EQ(KernelNet::open("lo", &k), 0);
  std::vector<KernelAddress> addrs;
  ASSERT_EQ(k->addresses(&addrs), 0);
  bool has_127 = false;
  for (const auto& a : addrs) has_127 = has_127 || same_ip(a.ip, ip("127.0.0.1"));
  if (!has_127) GTEST_SKIP() << "lo has no 127.0.0.1 in this namespace (down?)";
  NextHop nh;
  ASSERT_EQ(k->route(ip("127.0.0.1"), IpAddr{}, &nh), 0);
  EXPECT_TRUE(same_ip(nh.ip, ip("127.0.0.1")));
  EXPECT_FALSE(nh.via_gateway);
  EXPECT_EQ(k->counters().route_queries, 1u);
  // Multicast next hops need no kernel.
  MacAddr mac;
  EXPECT_EQ(k->neighbor(ip("239.1.2.3"), 1, &mac), ResolveStatus::resolved);
  EXPECT_EQ(mac, (MacAddr{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03}));
}

}  // namespace
}  // namespace droce::net
