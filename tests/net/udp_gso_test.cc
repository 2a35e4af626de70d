// net/udp_gso: which frames one GSO frame may carry, the GSO frame's header, and the cut that
// gives back each frame the engine built, ICRC and all.

#include "net/udp_gso.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/endian.h"
#include "rocev2/builder.h"
#include "rocev2/opcode.h"
#include "rocev2/parser.h"

namespace droce::net {
namespace {

using Frame = std::vector<uint8_t>;

struct Flow {
  uint8_t version = 4;
  uint16_t sport = 0xc123;
  uint8_t tos = 0x02;
  bool vlan = false;
};

// One RC WRITE packet of `payload` bytes, as the engine builds it (ICRC sealed).
Frame roce_frame(const Flow& fl, uint8_t opcode, uint32_t psn, uint16_t ip_id, uint32_t payload) {
  rocev2::PacketHeaders h;
  h.l2.dst = {0x02, 0, 0, 0, 0, 0x02};
  h.l2.src = {0x02, 0, 0, 0, 0, 0x01};
  h.l2.vlan = fl.vlan;
  h.l2.vlan_tci = fl.vlan ? 0x2007 : 0;
  h.l3.version = fl.version;
  h.l3.tos = fl.tos;
  h.l3.ipv4_id = fl.version == 4 ? ip_id : 0;
  h.l3.ipv4_frag = fl.version == 4 ? kIpv4FlagDf : 0;
  h.l3.flow_label = fl.version == 6 ? 0x12345 : 0;
  if (fl.version == 4) {
    h.l3.src = ipv4_mapped(0x0a3d0102);
    h.l3.dst = ipv4_mapped(0x0a3d0202);
  } else {
    h.l3.src = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    h.l3.dst = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
  }
  h.l4.src_port = fl.sport;
  h.bth.opcode = opcode;
  h.bth.dest_qp = 0x11;
  h.bth.psn = psn;
  h.ext.reth.va = 0x1000;
  h.ext.reth.rkey = 0x77;
  h.ext.reth.dma_len = 4 * payload;
  std::vector<uint8_t> data(payload);
  for (uint32_t i = 0; i < payload; ++i) data[i] = static_cast<uint8_t>(psn * 7 + i);
  Frame f(rocev2::frame_len(h, payload));
  EXPECT_EQ(rocev2::build_frame(h, data, f), f.size());
  return f;
}

// A message as a requester sends it: FIRST (with its RETH), MIDDLEs, a shorter LAST, IPv4
// identifications counting up from `id0`.
std::vector<Frame> message(const Flow& fl, int middles, uint16_t id0 = 100) {
  std::vector<Frame> m;
  uint32_t psn = 5;
  uint16_t id = id0;
  m.push_back(roce_frame(fl, rocev2::op::kWriteFirst, psn++, id++, 1024));
  for (int i = 0; i < middles; ++i) m.push_back(roce_frame(fl, rocev2::op::kWriteMiddle, psn++, id++, 1024));
  m.push_back(roce_frame(fl, rocev2::op::kWriteLast, psn++, id++, 300));
  return m;
}

std::vector<FrameView> views(const std::vector<Frame>& fs, size_t from = 0) {
  std::vector<FrameView> v;
  for (size_t i = from; i < fs.size(); ++i) v.push_back({fs[i].data(), uint32_t(fs[i].size())});
  return v;
}

// The GSO frame of frames[from, from + k), as the kernel would carry it: header, then payloads.
Frame gso_frame(const std::vector<Frame>& fs, size_t from, size_t k, VnetHdr* vh) {
  const auto v = views(fs, from);
  uint8_t hdr[128];
  const uint32_t hl = gso_build_header(v.data(), k, hdr);
  *vh = load_vnet_hdr(hdr);
  Frame g(hdr + kVnetHdrLen, hdr + hl);
  for (size_t i = 0; i < k; ++i) {
    const uint8_t* f = fs[from + i].data();
    const uint32_t udp_len = core::load_be16(f + vh->csum_start + 4);
    g.insert(g.end(), f + vh->hdr_len, f + vh->csum_start + udp_len);
  }
  return g;
}

// Cuts a GSO frame and checks each segment against the frame it came from.
void expect_cut_gives_back(const Frame& g, const VnetHdr& vh, const std::vector<Frame>& fs, size_t from,
                           size_t k) {
  GsoFrame p;
  ASSERT_EQ(gso_parse(vh, g.data(), uint32_t(g.size()), &p), 0);
  ASSERT_EQ(p.segments, k);
  for (uint32_t i = 0; i < k; ++i) {
    Frame seg(p.at.payload_off + p.seg_size);
    seg.resize(gso_write_segment(g.data(), p, i, seg.data()));
    const Frame& want = fs[from + i];
    ASSERT_EQ(seg.size(), want.size()) << "segment " << i;
    Frame got = seg;
    if (!p.at.ipv4) {
      // IPv6 forbids a zero UDP checksum: the cut computes it; the ICRC masks it.
      EXPECT_NE(core::load_be16(got.data() + p.at.l4_off + 6), 0);
      core::store_be16(got.data() + p.at.l4_off + 6, 0);
    }
    EXPECT_EQ(got, want) << "segment " << i;
    rocev2::ParsedPacket pp;
    EXPECT_EQ(rocev2::parse_frame(std::span<const uint8_t>(seg), &pp), rocev2::ParseStatus::ok) << "segment " << i;
  }
}

TEST(UdpGso, OneMessageRunsFromTheFirstMiddleToTheShorterLast) {
  const Flow fl;
  const auto m = message(fl, 6);
  const auto v = views(m);
  // FIRST carries a RETH, so its segment is longer than a MIDDLE's: the MIDDLE after it can
  // only end its run (a shorter segment is the last), then the rest go together.
  EXPECT_EQ(gso_run_length(v.data(), v.size(), kGsoMaxSegments, 0xffff), 2u);
  EXPECT_EQ(gso_run_length(v.data() + 2, v.size() - 2, kGsoMaxSegments, 0xffff), 6u);
  EXPECT_EQ(gso_run_length(v.data() + 2, v.size() - 2, 3, 0xffff), 3u);
  EXPECT_EQ(gso_run_length(v.data() + 7, 1, kGsoMaxSegments, 0xffff), 1u);
}

TEST(UdpGso, TheHeaderDescribesTheWholeAndTheCutGivesBackEachFrame) {
  const Flow fl;
  const auto m = message(fl, 6);
  VnetHdr vh;
  const Frame g = gso_frame(m, 2, 6, &vh);
  EXPECT_EQ(vh.gso_type, kVnetGsoUdpL4);
  EXPECT_EQ(vh.flags, kVnetNeedsCsum);
  EXPECT_EQ(vh.hdr_len, 14 + 20 + 8);
  EXPECT_EQ(vh.gso_size, 12 + 1024 + 4);
  EXPECT_EQ(vh.csum_start, 14 + 20);
  EXPECT_EQ(vh.csum_offset, 6);
  const uint32_t udp_len = 8 + 5 * (12 + 1024 + 4) + (12 + 300 + 4);
  EXPECT_EQ(g.size(), 14 + 20 + udp_len);
  EXPECT_EQ(core::load_be16(g.data() + 14 + 2), 20 + udp_len);  // IPv4 total length
  EXPECT_EQ(core::load_be16(g.data() + 14 + 4), 102);           // the first segment's identification
  EXPECT_EQ(core::load_be16(g.data() + 34 + 4), udp_len);
  // The UDP checksum is the pseudo-header's sum for the whole (a partial checksum).
  uint32_t s = 0x0a3d + 0x0102 + 0x0a3d + 0x0202 + 17 + udp_len;
  while (s >> 16) s = (s & 0xffff) + (s >> 16);
  EXPECT_EQ(core::load_be16(g.data() + 34 + 6), s);
  expect_cut_gives_back(g, vh, m, 2, 6);
}

TEST(UdpGso, IdentificationsMustCountUp) {
  const Flow fl;
  auto m = message(fl, 6);
  m[5] = roce_frame(fl, rocev2::op::kWriteMiddle, 8, 900, 1024);  // a retransmission's, say
  const auto v = views(m);
  EXPECT_EQ(gso_run_length(v.data() + 2, v.size() - 2, kGsoMaxSegments, 0xffff), 3u);
  // Wrapping at 16 bits is counting up.
  const auto w = message(fl, 4, 0xfffe);
  const auto wv = views(w);
  EXPECT_EQ(gso_run_length(wv.data() + 1, wv.size() - 1, kGsoMaxSegments, 0xffff), 5u);
  VnetHdr vh;
  expect_cut_gives_back(gso_frame(w, 1, 5, &vh), vh, w, 1, 5);
}

TEST(UdpGso, HeadersMustMatchOutsideLengthsIdentificationAndChecksums) {
  const Flow a;
  Flow b = a;
  b.sport = 0xc124;
  Flow c = a;
  c.tos = 0x03;  // CE: a marked packet is not the same flow's header
  for (const Flow& other : {b, c}) {
    std::vector<Frame> m = {roce_frame(a, rocev2::op::kWriteMiddle, 1, 10, 1024),
                            roce_frame(other, rocev2::op::kWriteMiddle, 2, 11, 1024)};
    const auto v = views(m);
    EXPECT_EQ(gso_run_length(v.data(), 2, kGsoMaxSegments, 0xffff), 1u);
  }
  // Not UDP (an ARP frame) never leads a run.
  Frame arp(60, 0);
  core::store_be16(arp.data() + 12, kEtherTypeArp);
  const FrameView av[2] = {{arp.data(), 60}, {arp.data(), 60}};
  EXPECT_EQ(gso_run_length(av, 2, kGsoMaxSegments, 0xffff), 1u);
}

TEST(UdpGso, TheWholeFitsTheIpv4TotalLength) {
  const Flow fl;
  const auto m = message(fl, 70);
  const auto v = views(m);
  // 20 + 8 + k x 1040 <= 65535: 62 segments.
  EXPECT_EQ(gso_run_length(v.data() + 2, v.size() - 2, kGsoMaxSegments, 0xffff), 62u);
  EXPECT_EQ(gso_run_length(v.data() + 2, v.size() - 2, kGsoMaxSegments, 4 * 1040), 4u);
  VnetHdr vh;
  expect_cut_gives_back(gso_frame(m, 2, 62, &vh), vh, m, 2, 62);
}

TEST(UdpGso, Ipv6AndVlan) {
  Flow fl;
  fl.version = 6;
  fl.vlan = true;
  const auto m = message(fl, 5);
  const auto v = views(m);
  ASSERT_EQ(gso_run_length(v.data() + 2, v.size() - 2, kGsoMaxSegments, 0xffff), 5u);
  VnetHdr vh;
  const Frame g = gso_frame(m, 2, 5, &vh);
  EXPECT_EQ(vh.hdr_len, 18 + 40 + 8);
  EXPECT_EQ(core::load_be16(g.data() + 18 + 4), g.size() - 18 - 40);  // IPv6 payload length
  expect_cut_gives_back(g, vh, m, 2, 5);
}

TEST(UdpGso, ParseRefusesWhatItsHeaderDoesNotDescribe) {
  const Flow fl;
  const auto m = message(fl, 3);
  VnetHdr vh;
  Frame g = gso_frame(m, 2, 3, &vh);
  GsoFrame p;
  VnetHdr tcp = vh;
  tcp.gso_type = kVnetGsoTcpV4;
  EXPECT_EQ(gso_parse(tcp, g.data(), uint32_t(g.size()), &p), -EINVAL);
  VnetHdr zero = vh;
  zero.gso_size = 0;
  EXPECT_EQ(gso_parse(zero, g.data(), uint32_t(g.size()), &p), -EINVAL);
  // Cut short: the UDP length says more than the frame holds.
  EXPECT_EQ(gso_parse(vh, g.data(), uint32_t(g.size() - 10), &p), -EINVAL);
  VnetHdr ecn = vh;
  ecn.gso_type |= kVnetGsoEcn;
  EXPECT_EQ(gso_parse(ecn, g.data(), uint32_t(g.size()), &p), 0);
}

TEST(UdpGso, VnetHeaderBytes) {
  VnetHdr h;
  h.flags = kVnetNeedsCsum;
  h.gso_type = kVnetGsoUdpL4;
  h.hdr_len = 42;
  h.gso_size = 1040;
  h.csum_start = 34;
  h.csum_offset = 6;
  uint8_t b[kVnetHdrLen];
  store_vnet_hdr(h, b);
  const uint8_t want[kVnetHdrLen] = {1, 5, 42, 0, 0x10, 0x04, 34, 0, 6, 0};
  EXPECT_EQ(std::memcmp(b, want, kVnetHdrLen), 0);
  const VnetHdr back = load_vnet_hdr(b);
  EXPECT_EQ(back.gso_size, 1040);
  EXPECT_EQ(back.csum_start, 34);
}

TEST(UdpGso, APartialChecksumIsCompleted) {
  // A UDP datagram whose sender left the pseudo-header's sum (CHECKSUM_PARTIAL).
  const Flow fl;
  Frame f = roce_frame(fl, rocev2::op::kWriteMiddle, 1, 1, 100);
  const uint32_t udp_len = core::load_be16(f.data() + 34 + 4);
  uint32_t s = 0x0a3d + 0x0102 + 0x0a3d + 0x0202 + 17 + udp_len;
  while (s >> 16) s = (s & 0xffff) + (s >> 16);
  core::store_be16(f.data() + 34 + 6, static_cast<uint16_t>(s));
  VnetHdr vh;
  vh.flags = kVnetNeedsCsum;
  vh.csum_start = 34;
  vh.csum_offset = 6;
  ASSERT_TRUE(complete_partial_csum(vh, f.data(), uint32_t(f.size())));
  // Verified as a receiver does: pseudo-header plus the datagram sums to 0xffff.
  uint64_t t = 0x0a3d + 0x0102 + 0x0a3d + 0x0202 + 17 + udp_len;
  for (uint32_t i = 0; i < udp_len; i += 2)
    t += i + 1 < udp_len ? core::load_be16(f.data() + 34 + i) : uint32_t{f[34 + i]} << 8;
  while (t >> 16) t = (t & 0xffff) + (t >> 16);
  EXPECT_EQ(t, 0xffffu);
  VnetHdr out = vh;
  out.csum_start = 2000;
  EXPECT_FALSE(complete_partial_csum(out, f.data(), uint32_t(f.size())));
}

}  // namespace
}  // namespace droce::net
