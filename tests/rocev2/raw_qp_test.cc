// Raw packet QPs and their flow rules (rocev2/raw_qp.cc, rocev2/raw_flow.h), one engine whose
// port is a capture (protocol_harness.h): crafted frames in, what the QP receives and what the
// port was given checked byte for byte.

#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "tests/rocev2/protocol_harness.h"

namespace droce::test {
namespace {

using abi::FlowMatch;
using abi::FlowType;

// An Ethernet | IPv4 | UDP (or TCP) frame as pyverbs' raw traffic builds one, `len` bytes.
std::vector<uint8_t> l4_frame(size_t len, uint8_t proto = 17, uint16_t sport = 1234, uint16_t dport = 5678,
                              const std::array<uint8_t, 6>& dst = {0x01, 0x50, 0x56, 0x19, 0x20, 0xa7},
                              uint8_t last_src_ip_byte = 1) {
  std::vector<uint8_t> f(len, 'a');
  const uint8_t eth[14] = {dst[0], dst[1], dst[2], dst[3], dst[4], dst[5], 0x24, 0x8a, 0x07, 0xa5, 0x28, 0xc8,
                           0x08, 0x00};
  std::memcpy(f.data(), eth, 14);
  uint8_t* ip = f.data() + 14;
  const uint16_t total = static_cast<uint16_t>(len - 14);
  const uint8_t hdr[20] = {0x45, 0, uint8_t(total >> 8), uint8_t(total), 0, 0, 0x40, 0, 64, proto, 0, 0,
                           1,    1, 1, last_src_ip_byte, 2, 2, 2, 2};
  std::memcpy(ip, hdr, 20);
  uint8_t* l4 = ip + 20;
  l4[0] = uint8_t(sport >> 8);
  l4[1] = uint8_t(sport);
  l4[2] = uint8_t(dport >> 8);
  l4[3] = uint8_t(dport);
  return f;
}

std::vector<uint8_t> ipv6_frame(size_t len, uint8_t next_hdr) {
  std::vector<uint8_t> f(len, 'b');
  const uint8_t eth[14] = {0x01, 0x50, 0x56, 0x19, 0x20, 0xa7, 0x24, 0x8a, 0x07, 0xa5, 0x28, 0xc8, 0x86, 0xdd};
  std::memcpy(f.data(), eth, 14);
  uint8_t* ip = f.data() + 14;
  ip[0] = 0x6a;  // version 6, traffic class 0xa5
  ip[1] = 0x51;  // flow label 0x12345
  ip[2] = 0x23;
  ip[3] = 0x45;
  const uint16_t payload = static_cast<uint16_t>(len - 54);
  ip[4] = uint8_t(payload >> 8);
  ip[5] = uint8_t(payload);
  ip[6] = next_hdr;
  ip[7] = 64;
  for (int i = 0; i < 16; ++i) ip[8 + i] = uint8_t(0xa0 + i);
  for (int i = 0; i < 16; ++i) ip[24 + i] = uint8_t(0xb0 + i);
  ip[40] = 0x04;  // source port 1234
  ip[41] = 0xd2;
  ip[42] = 0x16;  // destination port 5678
  ip[43] = 0x2e;
  return f;
}

FlowMatch eth_match(const std::array<uint8_t, 6>& dst, uint16_t type) {
  FlowMatch m{};
  m.layers = abi::kFlowEth;
  std::memcpy(m.eth_dst, dst.data(), 6);
  std::memset(m.eth_dst_mask, 0xff, 6);
  m.ether_type = type;
  m.ether_type_mask = 0xffff;
  return m;
}

TEST(FlowMatch, EthernetFieldsUnderTheirMasks) {
  const auto f = l4_frame(100);
  FlowMatch m = eth_match({0x01, 0x50, 0x56, 0x19, 0x20, 0xa7}, 0x0800);
  EXPECT_TRUE(rocev2::flow_matches(m, f));
  m.eth_dst[5] = 0xa8;
  EXPECT_FALSE(rocev2::flow_matches(m, f));
  m.eth_dst_mask[5] = 0;  // a byte the mask leaves out does not count
  EXPECT_TRUE(rocev2::flow_matches(m, f));
  m.ether_type = 0x86dd;
  EXPECT_FALSE(rocev2::flow_matches(m, f));
  // Source MAC.
  FlowMatch s{};
  s.layers = abi::kFlowEth;
  const uint8_t src[6] = {0x24, 0x8a, 0x07, 0xa5, 0x28, 0xc8};
  std::memcpy(s.eth_src, src, 6);
  std::memset(s.eth_src_mask, 0xff, 6);
  EXPECT_TRUE(rocev2::flow_matches(s, f));
  s.eth_src[0] = 0x26;
  EXPECT_FALSE(rocev2::flow_matches(s, f));
  // Too short for an Ethernet header.
  EXPECT_FALSE(rocev2::flow_matches(eth_match({}, 0), std::span<const uint8_t>(f.data(), 13)));
  // No specs: every frame.
  EXPECT_TRUE(rocev2::flow_matches(FlowMatch{}, std::span<const uint8_t>(f.data(), 3)));
}

TEST(FlowMatch, VlanTagIsTheTciAndTheTypeBehindIt) {
  auto f = l4_frame(100);
  const uint8_t tag[4] = {0x81, 0x00, 0x20, 0x07};  // priority 1, VLAN 7
  f.insert(f.begin() + 12, tag, tag + 4);
  FlowMatch m = eth_match({0x01, 0x50, 0x56, 0x19, 0x20, 0xa7}, 0x0800);
  m.vlan_tag = 0x0007;
  m.vlan_tag_mask = 0x0fff;
  EXPECT_TRUE(rocev2::flow_matches(m, f));
  m.vlan_tag = 0x0008;
  EXPECT_FALSE(rocev2::flow_matches(m, f));
  // The UDP ports are found behind the tag too.
  FlowMatch u{};
  u.layers = abi::kFlowUdp;
  u.l4_dst = 5678;
  u.l4_dst_mask = 0xffff;
  EXPECT_TRUE(rocev2::flow_matches(u, f));
}

TEST(FlowMatch, Ipv4AddressesProtocolAndFlags) {
  const auto f = l4_frame(100);
  FlowMatch m{};
  m.layers = abi::kFlowIpv4;
  EXPECT_TRUE(rocev2::flow_matches(m, f));  // a layer with zero masks: the frame must have it
  EXPECT_FALSE(rocev2::flow_matches(m, ipv6_frame(100, 17)));
  const uint8_t src[4] = {1, 1, 1, 1}, dst[4] = {2, 2, 2, 2};
  std::memcpy(m.ip4_src, src, 4);
  std::memcpy(m.ip4_dst, dst, 4);
  std::memset(m.ip4_src_mask, 0xff, 4);
  std::memset(m.ip4_dst_mask, 0xff, 4);
  m.ip4_proto = 17;
  m.ip4_proto_mask = 0xff;
  m.ip4_flags = 2;  // DF
  m.ip4_flags_mask = 7;
  m.ip4_ttl = 64;
  m.ip4_ttl_mask = 0xff;
  EXPECT_TRUE(rocev2::flow_matches(m, f));
  m.ip4_proto = 6;
  EXPECT_FALSE(rocev2::flow_matches(m, f));
  m.ip4_proto = 17;
  m.ip4_dst[3] = 3;
  EXPECT_FALSE(rocev2::flow_matches(m, f));
  m.ip4_dst_mask[3] = 0;  // 2.2.2.0/24
  EXPECT_TRUE(rocev2::flow_matches(m, f));
}

TEST(FlowMatch, Ipv6FieldsAndTransportPorts) {
  const auto f = ipv6_frame(120, 6);
  FlowMatch m{};
  m.layers = abi::kFlowIpv6 | abi::kFlowTcp;
  for (int i = 0; i < 16; ++i) {
    m.ip6_src[i] = uint8_t(0xa0 + i);
    m.ip6_dst[i] = uint8_t(0xb0 + i);
  }
  std::memset(m.ip6_src_mask, 0xff, 16);
  std::memset(m.ip6_dst_mask, 0xff, 16);
  m.ip6_flow_label = 0x12345;
  m.ip6_flow_label_mask = 0xfffff;
  m.ip6_tclass = 0xa5;
  m.ip6_tclass_mask = 0xff;
  m.l4_src = 1234;
  m.l4_src_mask = 0xffff;
  m.l4_dst = 5678;
  m.l4_dst_mask = 0xffff;
  EXPECT_TRUE(rocev2::flow_matches(m, f));
  // A UDP rule does not take TCP, nor the other way round.
  FlowMatch u = m;
  u.layers = abi::kFlowIpv6 | abi::kFlowUdp;
  EXPECT_FALSE(rocev2::flow_matches(u, f));
  EXPECT_TRUE(rocev2::flow_matches(u, ipv6_frame(120, 17)));
  m.l4_dst = 5679;
  EXPECT_FALSE(rocev2::flow_matches(m, f));
  m.l4_dst = 5678;
  m.ip6_flow_label = 0x12346;
  EXPECT_FALSE(rocev2::flow_matches(m, f));
  // A transport rule needs its header whole.
  FlowMatch t{};
  t.layers = abi::kFlowTcp;
  EXPECT_FALSE(rocev2::flow_matches(t, std::span<const uint8_t>(f.data(), 14 + 40 + 3)));
}

TEST(RawFlowTable, BestPriorityThenDefaultsAndSniffersEachQpOnce) {
  rocev2::RawFlowTable t;
  const auto mc = l4_frame(80);
  auto uc = l4_frame(80, 17, 1, 2, {0x02, 0, 0, 0, 0, 9});
  FlowMatch any_udp{};
  any_udp.layers = abi::kFlowUdp;
  FlowMatch port_5678 = any_udp;
  port_5678.l4_dst = 5678;
  port_5678.l4_dst_mask = 0xffff;
  const uint32_t a = t.add(100, FlowType::normal, 5, any_udp);
  t.add(101, FlowType::normal, 1, port_5678);
  t.add(102, FlowType::normal, 1, port_5678);  // same rule, same priority: both QPs
  t.add(103, FlowType::all_default, 0, FlowMatch{});
  t.add(104, FlowType::mc_default, 0, FlowMatch{});
  t.add(105, FlowType::sniffer, 0, FlowMatch{});
  t.add(105, FlowType::normal, 1, port_5678);  // 105 takes it twice over: once
  std::vector<uint32_t> q;
  t.select(mc, false, &q);
  EXPECT_EQ(q, (std::vector<uint32_t>{101, 102, 105}));
  t.select(uc, false, &q);  // port 2: only the priority-5 rule
  EXPECT_EQ(q, (std::vector<uint32_t>{100, 105}));
  EXPECT_TRUE(t.remove(a));
  EXPECT_FALSE(t.remove(a));
  t.select(uc, false, &q);  // no normal rule: the all-default (unicast: not the multicast default)
  EXPECT_EQ(q, (std::vector<uint32_t>{103, 105}));
  const auto arp = [] {
    std::vector<uint8_t> f(60, 0);
    std::memset(f.data(), 0xff, 6);
    f[12] = 0x08;
    f[13] = 0x06;
    return f;
  }();
  t.select(arp, false, &q);  // broadcast: both defaults
  EXPECT_EQ(q, (std::vector<uint32_t>{103, 104, 105}));
  t.select(mc, true, &q);  // a frame the transport took: sniffers only
  EXPECT_EQ(q, (std::vector<uint32_t>{105}));
  EXPECT_EQ(t.remove_qp(105), 2u);
  EXPECT_FALSE(t.has_sniffers());
  t.select(mc, true, &q);
  EXPECT_TRUE(q.empty());
}

// Microsoft's RSS verification suite: its key and the first IPv4 case (66.9.149.187:2794 ->
// 161.142.100.80:1766), with and without the ports.
TEST(RssHash, ToeplitzMatchesTheVerificationSuite) {
  const uint8_t key[40] = {0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3,
                           0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3,
                           0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa};
  const uint8_t ips[8] = {66, 9, 149, 187, 161, 142, 100, 80};
  EXPECT_EQ(rocev2::toeplitz_hash(key, ips), 0x323e8fc2u);
  const uint8_t with_ports[12] = {66, 9, 149, 187, 161, 142, 100, 80, 0x0a, 0xea, 0x06, 0xe6};
  EXPECT_EQ(rocev2::toeplitz_hash(key, with_ports), 0x51ccc178u);
  // From a frame: the same fields, picked by the mask.
  rocev2::RawRss rss;
  std::memcpy(rss.key.data(), key, 40);
  rss.key_len = 40;
  rss.fields = rocev2::kRxHashSrcIpv4 | rocev2::kRxHashDstIpv4;
  auto f = l4_frame(80, 17, 2794, 1766);
  std::memcpy(f.data() + 14 + 12, ips, 8);
  EXPECT_EQ(rocev2::rss_hash(rss, f), 0x323e8fc2u);
  rss.fields |= rocev2::kRxHashSrcPortUdp | rocev2::kRxHashDstPortUdp;
  EXPECT_EQ(rocev2::rss_hash(rss, f), 0x51ccc178u);
  rss.fields = rocev2::kRxHashSrcIpv4 | rocev2::kRxHashDstIpv4 | rocev2::kRxHashSrcPortTcp;  // UDP: no TCP port
  EXPECT_EQ(rocev2::rss_hash(rss, f), 0x323e8fc2u);
}

class RawQpTest : public ProtocolTest {
 protected:
  uint32_t make_raw(QpState to = QpState::rts) {
    QpInit init;
    init.type = QpType::raw_packet;
    init.pd = pd_;
    init.send_cq = scq_;
    init.recv_cq = rcq_;
    init.cap = {16, 16, 2, 2, 64};
    init.sq_sig_all = true;
    uint32_t qpn = 0;
    EXPECT_EQ(engine_->create_qp(init, &qpn), 0);
    QpAttr at;
    at.qp_state = QpState::init;
    at.port_num = 1;
    EXPECT_EQ(engine_->modify_qp(qpn, at, kAttrState | kAttrPort), 0);
    if (to == QpState::init) return qpn;
    at = QpAttr{};
    at.qp_state = QpState::rtr;
    EXPECT_EQ(engine_->modify_qp(qpn, at, kAttrState), 0);
    if (to == QpState::rtr) return qpn;
    at.qp_state = QpState::rts;
    EXPECT_EQ(engine_->modify_qp(qpn, at, kAttrState), 0);
    return qpn;
  }

  void rx(const std::vector<uint8_t>& f) {
    rte_mbuf* m = rte_pktmbuf_alloc(pool());
    ASSERT_NE(m, nullptr);
    auto* p = rte_pktmbuf_append(m, static_cast<uint16_t>(f.size()));
    ASSERT_NE(p, nullptr);
    std::memcpy(p, f.data(), f.size());
    engine_->rx_burst(&m, 1, now_);
    engine_->poll(now_);
  }

  std::vector<std::vector<uint8_t>> frames_out() {
    std::vector<std::vector<uint8_t>> out;
    for (rte_mbuf* m : port_.take()) {
      std::vector<uint8_t> f(m->pkt_len);
      net::FrameBytes(m).for_each_piece(0, m->pkt_len, [&, at = size_t{0}](const uint8_t* p, size_t n) mutable {
        std::memcpy(f.data() + at, p, n);
        at += n;
      });
      rte_pktmbuf_free(m);
      out.push_back(std::move(f));
    }
    return out;
  }
};

TEST_F(RawQpTest, ModifyTakesAPortThenNothing) {
  QpInit init;
  init.type = QpType::raw_packet;
  init.pd = pd_;
  init.send_cq = scq_;
  init.recv_cq = rcq_;
  init.cap = {4, 4, 1, 1, 0};
  uint32_t qpn = 0;
  ASSERT_EQ(engine().create_qp(init, &qpn), 0);
  QpAttr at;
  at.qp_state = QpState::init;
  at.port_num = 1;
  EXPECT_EQ(engine().modify_qp(qpn, at, kAttrState), -EINVAL);  // the port is required
  at.qkey = 5;
  EXPECT_EQ(engine().modify_qp(qpn, at, kAttrState | kAttrPort | kAttrQkey), -EINVAL);  // no Q_Key
  EXPECT_EQ(engine().modify_qp(qpn, at, kAttrState | kAttrPort), 0);
  at.qp_state = QpState::rtr;
  EXPECT_EQ(engine().modify_qp(qpn, at, kAttrState | kAttrPathMtu), -EINVAL);
  EXPECT_EQ(engine().modify_qp(qpn, at, kAttrState), 0);
  at.qp_state = QpState::rts;
  EXPECT_EQ(engine().modify_qp(qpn, at, kAttrState | kAttrSqPsn), -EINVAL);
  EXPECT_EQ(engine().modify_qp(qpn, at, kAttrState), 0);
  EXPECT_EQ(state(qpn), QpState::rts);
}

TEST_F(RawQpTest, ASendIsOneFrameAsBuiltWithNothingAdded) {
  const uint32_t qpn = make_raw();
  auto buf = reg(2048);
  const auto f = l4_frame(300);
  buf->fill(f);
  // Two SGEs: the headers and the rest; the frame is their concatenation.
  SendWr w = send_wr(WrOpcode::send, 7, buf->sge(0, 42));
  w.num_sge = 2;
  w.sg_list[1] = buf->sge(42, 300 - 42);
  ASSERT_EQ(engine().post_send(qpn, w), 0);
  engine().poll(now_);
  const auto out = frames_out();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], f);  // no ICRC, no padding, no rewritten field
  const auto c = drain(scq_);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].wr_id, 7u);
  EXPECT_EQ(c[0].status, WcStatus::success);
  EXPECT_EQ(c[0].opcode, WcOpcode::send);
  EXPECT_EQ(qp_counters(qpn).tx_packets, 1u);
}

TEST_F(RawQpTest, PostRefusesWhatIsNotOneFrame) {
  const uint32_t qpn = make_raw();
  auto buf = reg(4096);
  EXPECT_EQ(engine().post_send(qpn, send_wr(WrOpcode::send, 1, buf->sge(0, 13))), -EINVAL);  // no Ethernet header
  EXPECT_EQ(engine().post_send(qpn, send_wr(WrOpcode::send, 1, buf->sge(0, 1519))), -EINVAL);  // past max_raw_frame
  EXPECT_EQ(engine().post_send(qpn, send_wr(WrOpcode::rdma_write, 1, buf->sge(0, 100))), -EINVAL);
  EXPECT_EQ(engine().post_send(qpn, send_wr(WrOpcode::send_with_imm, 1, buf->sge(0, 100))), -EINVAL);
  EXPECT_EQ(engine().post_send(qpn, send_wr(WrOpcode::send, 1, buf->sge(0, 1518))), 0);
  engine().poll(now_);
  EXPECT_EQ(frames_out().size(), 1u);
  // A bad key completes in error and stops the send queue, as UD's does.
  Sge bad = buf->sge(0, 64);
  bad.lkey ^= 0x100;
  ASSERT_EQ(engine().post_send(qpn, send_wr(WrOpcode::send, 2, bad)), 0);
  engine().poll(now_);
  const auto c = drain(scq_);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[1].status, WcStatus::loc_prot_err);
  EXPECT_EQ(state(qpn), QpState::sqe);
  EXPECT_TRUE(frames_out().empty());
}

TEST_F(RawQpTest, FramesTheRulesPickArriveWhole) {
  const uint32_t qpn = make_raw();
  auto buf = reg(4096);
  FlowMatch udp{};
  udp.layers = abi::kFlowEth | abi::kFlowIpv4 | abi::kFlowUdp;
  udp.l4_dst = 5678;
  udp.l4_dst_mask = 0xffff;
  uint32_t id = 0;
  ASSERT_EQ(engine().create_flow(qpn, FlowType::normal, 0, udp, &id), 0);
  ASSERT_EQ(engine().post_recv(qpn, recv_wr(1, buf->sge(0, 2048))), 0);
  ASSERT_EQ(engine().post_recv(qpn, recv_wr(2, buf->sge(2048, 2048))), 0);
  const auto f = l4_frame(200);
  rx(l4_frame(200, 17, 1234, 9999));  // another port: not ours
  rx(l4_frame(200, 6));               // TCP: not ours
  EXPECT_TRUE(drain(rcq_).empty());
  rx(f);
  auto c = drain(rcq_);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].wr_id, 1u);
  EXPECT_EQ(c[0].status, WcStatus::success);
  EXPECT_EQ(c[0].opcode, WcOpcode::recv);
  EXPECT_EQ(c[0].byte_len, 200u);
  EXPECT_EQ(c[0].qp_num, qpn);
  EXPECT_EQ(c[0].wc_flags, 0u);  // no GRH area on a raw QP
  EXPECT_EQ(std::vector<uint8_t>(buf->bytes.begin(), buf->bytes.begin() + 200), f);
  // A frame larger than the receive buffer: a length error, the QP goes on.
  rx(l4_frame(3000));
  c = drain(rcq_);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::loc_len_err);
  // Nothing posted: dropped and counted.
  rx(f);
  EXPECT_TRUE(drain(rcq_).empty());
  EXPECT_EQ(qp_counters(qpn).dropped, 1u);
  // The rule gone, nothing more arrives.
  ASSERT_EQ(engine().post_recv(qpn, recv_wr(3, buf->sge(0, 2048))), 0);
  EXPECT_EQ(engine().destroy_flow(id), 0);
  EXPECT_EQ(engine().destroy_flow(id), -EINVAL);
  rx(f);
  EXPECT_TRUE(drain(rcq_).empty());
  EXPECT_EQ(engine().raw_flows(), 0u);
}

TEST_F(RawQpTest, RulesBelongToRawQpsAndGoWithThem) {
  const uint32_t rc = make_qp();  // an RC QP
  uint32_t id = 0;
  EXPECT_EQ(engine().create_flow(rc, FlowType::normal, 0, FlowMatch{}, &id), -EINVAL);
  const uint32_t raw = make_raw(QpState::init);
  EXPECT_EQ(engine().create_flow(raw, static_cast<FlowType>(9), 0, FlowMatch{}, &id), -EINVAL);
  ASSERT_EQ(engine().create_flow(raw, FlowType::all_default, 0, FlowMatch{}, &id), 0);
  // INIT does not receive (as UD): the frame is not the QP's yet.
  auto buf = reg(2048);
  ASSERT_EQ(engine().post_recv(raw, recv_wr(1, buf->sge(0, 2048))), 0);
  rx(l4_frame(100));
  EXPECT_TRUE(drain(rcq_).empty());
  EXPECT_EQ(engine().destroy_qp(raw), 0);
  EXPECT_EQ(engine().raw_flows(), 0u);
  EXPECT_EQ(engine().destroy_flow(id), -EINVAL);
}

TEST_F(RawQpTest, ASnifferSeesRoceTheTransportTakesToo) {
  const uint32_t rc = make_qp();
  auto rc_buf = reg(4096);
  ASSERT_EQ(engine().post_recv(rc, recv_wr(10, rc_buf->sge(0, 1024))), 0);
  const uint32_t raw = make_raw();
  auto buf = reg(4096);
  ASSERT_EQ(engine().post_recv(raw, recv_wr(20, buf->sge(0, 2048))), 0);
  uint32_t id = 0;
  ASSERT_EQ(engine().create_flow(raw, FlowType::sniffer, 0, FlowMatch{}, &id), 0);
  qpn_ = rc;
  opts_.type = QpType::rc;
  deliver(peer(op::kSendOnly, 0x5000, true), pattern(64, 1));
  const auto c = drain(rcq_);
  ASSERT_EQ(c.size(), 2u);  // the sniffer's copy first (it sees the frame as it comes), then RC's
  EXPECT_EQ(c[0].qp_num, raw);
  EXPECT_EQ(c[1].qp_num, rc);
  EXPECT_EQ(c[1].byte_len, 64u);
  EXPECT_GT(c[0].byte_len, 64u + 14 + 20 + 8 + 12);  // the whole frame, headers and ICRC
}

TEST_F(RawQpTest, AnRssQpSpreadsByHashOverItsReceiveQueues) {
  // Four receive queues (raw QPs in RTR), one RSS QP left in RESET holding the rule.
  uint32_t wq[4];
  for (uint32_t& w : wq) w = make_raw(QpState::rtr);
  QpInit init;
  init.type = QpType::raw_packet;
  init.pd = pd_;
  init.send_cq = scq_;
  init.recv_cq = rcq_;
  init.cap = {1, 1, 1, 1, 0};
  uint32_t rss_qp = 0;
  ASSERT_EQ(engine().create_qp(init, &rss_qp), 0);
  rocev2::RawRss rss;
  rss.table = {wq[0], wq[1], wq[2], wq[3]};
  for (size_t i = 0; i < 40; ++i) rss.key[i] = uint8_t(i * 37 + 11);
  rss.key_len = 40;
  rss.fields = rocev2::kRxHashSrcIpv4 | rocev2::kRxHashDstIpv4;
  rocev2::RawRss bad = rss;
  bad.table.pop_back();  // three: not a power of two
  EXPECT_EQ(engine().set_rss(rss_qp, bad), -EINVAL);
  bad = rss;
  bad.table[0] = rss_qp;  // itself
  EXPECT_EQ(engine().set_rss(rss_qp, bad), -EINVAL);
  ASSERT_EQ(engine().set_rss(rss_qp, rss), 0);
  uint32_t id = 0;
  ASSERT_EQ(engine().create_flow(rss_qp, FlowType::normal, 0, FlowMatch{}, &id), 0);
  auto buf = reg(64 * 256);
  for (uint32_t k = 0; k < 4; ++k)
    for (uint32_t i = 0; i < 16; ++i)
      ASSERT_EQ(engine().post_recv(wq[k], recv_wr(k * 16 + i, buf->sge((k * 16 + i) * 256, 256))), 0);
  // 32 sources: each frame lands in the queue its hash names, and only there.
  std::vector<uint32_t> expect;
  for (uint8_t s = 0; s < 32; ++s) {
    const auto f = l4_frame(100, 17, 1234, 5678, {0x01, 0x50, 0x56, 0x19, 0x20, 0xa7}, s);
    expect.push_back(wq[rocev2::rss_hash(rss, f) & 3]);
    rx(f);
  }
  const auto c = drain(rcq_);
  ASSERT_EQ(c.size(), 32u);
  std::set<uint32_t> used;
  for (size_t i = 0; i < c.size(); ++i) {
    EXPECT_EQ(c[i].qp_num, expect[i]);
    EXPECT_EQ(c[i].status, WcStatus::success);
    used.insert(c[i].qp_num);
  }
  EXPECT_GT(used.size(), 1u);  // 32 sources under this key do not all hash alike
}

}  // namespace
}  // namespace droce::test
