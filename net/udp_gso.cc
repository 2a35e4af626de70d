#include "net/udp_gso.h"

#include <rte_ip.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/endian.h"
#include "net/headers.h"

namespace droce::net {

using core::load_be16;
using core::store_be16;

namespace {

// Checksums are DPDK's (rte_ip.h): computed over the bytes as they lie, so each is stored with
// memcpy, in the order it was summed.
void store_sum(uint8_t* at, uint16_t sum) { std::memcpy(at, &sum, 2); }

void set_ipv4_checksum(uint8_t* ip) {
  store_be16(ip + 10, 0);
  store_sum(ip + 10, rte_ipv4_cksum(reinterpret_cast<const rte_ipv4_hdr*>(ip)));
}

// Header bytes two frames of a run must share: all but lengths, identification and checksums.
bool same_headers(const uint8_t* a, const uint8_t* b, const UdpFrameLayout& at) {
  const uint16_t l3 = at.l3_off, l4 = at.l4_off;
  if (at.ipv4)
    return std::memcmp(a, b, l3 + 2u) == 0 && std::memcmp(a + l3 + 6, b + l3 + 6, 4) == 0 &&
           std::memcmp(a + l3 + 12, b + l3 + 12, l4 + 4u - (l3 + 12u)) == 0;
  return std::memcmp(a, b, l3 + 4u) == 0 && std::memcmp(a + l3 + 6, b + l3 + 6, l4 + 4u - (l3 + 6u)) == 0;
}

uint32_t udp_payload_len(const uint8_t* f, const UdpFrameLayout& at) {
  return uint32_t{load_be16(f + at.l4_off + 4)} - kUdpHdrLen;
}

}  // namespace

void store_vnet_hdr(const VnetHdr& h, uint8_t* out) {
  out[0] = h.flags;
  out[1] = h.gso_type;
  std::memcpy(out + 2, &h.hdr_len, 2);  // little-endian, as the host
  std::memcpy(out + 4, &h.gso_size, 2);
  std::memcpy(out + 6, &h.csum_start, 2);
  std::memcpy(out + 8, &h.csum_offset, 2);
}

VnetHdr load_vnet_hdr(const uint8_t* in) {
  VnetHdr h;
  h.flags = in[0];
  h.gso_type = in[1];
  std::memcpy(&h.hdr_len, in + 2, 2);
  std::memcpy(&h.gso_size, in + 4, 2);
  std::memcpy(&h.csum_start, in + 6, 2);
  std::memcpy(&h.csum_offset, in + 8, 2);
  return h;
}

bool udp_frame_layout(const uint8_t* f, uint32_t len, bool exact_length, UdpFrameLayout* out) {
  if (len < kEthHdrLen) return false;
  uint16_t l3 = kEthHdrLen;
  uint16_t type = load_be16(f + 12);
  if (type == kEtherTypeVlan) {
    if (len < kEthHdrLen + kVlanHdrLen) return false;
    type = load_be16(f + 16);
    l3 += kVlanHdrLen;
  }
  UdpFrameLayout at;
  at.l3_off = l3;
  const uint8_t* ip = f + l3;
  uint32_t ip_len = 0;
  if (type == kEtherTypeIpv4) {
    if (len < l3 + kIpv4HdrLen + kUdpHdrLen || ip[0] != 0x45 || ip[9] != kIpProtoUdp) return false;
    if ((load_be16(ip + 6) & (kIpv4FlagMf | kIpv4FragOffsetMask)) != 0) return false;
    at.ipv4 = true;
    at.l4_off = static_cast<uint16_t>(l3 + kIpv4HdrLen);
    ip_len = load_be16(ip + 2);
  } else if (type == kEtherTypeIpv6) {
    if (len < l3 + kIpv6HdrLen + kUdpHdrLen || (ip[0] >> 4) != 6 || ip[6] != kIpProtoUdp) return false;
    at.l4_off = static_cast<uint16_t>(l3 + kIpv6HdrLen);
    ip_len = uint32_t{load_be16(ip + 4)} + kIpv6HdrLen;
  } else {
    return false;
  }
  at.payload_off = static_cast<uint16_t>(at.l4_off + kUdpHdrLen);
  if (exact_length) {
    const uint32_t udp_len = load_be16(f + at.l4_off + 4);
    // Ethernet pads short frames: the IP length may be less than the frame's, never more.
    if (ip_len > len - l3 || udp_len < kUdpHdrLen || udp_len != ip_len - (at.l4_off - l3)) return false;
  }
  *out = at;
  return true;
}

size_t gso_run_length(const FrameView* frames, size_t n, uint32_t max_segments, uint32_t max_bytes) {
  if (n < 2 || max_segments < 2) return 1;
  const uint8_t* first = frames[0].data;
  UdpFrameLayout at;
  if (!udp_frame_layout(first, frames[0].len, true, &at)) return 1;
  const uint32_t seg = udp_payload_len(first, at);
  if (seg == 0) return 1;
  // The whole must fit the IP and UDP length fields.
  const uint32_t cap =
      std::min<uint32_t>(max_bytes, at.ipv4 ? kGsoMaxIpv4Total - kIpv4HdrLen - kUdpHdrLen : 0xffff - kUdpHdrLen);
  uint32_t total = seg;
  if (total > cap) return 1;
  const uint16_t id0 = at.ipv4 ? load_be16(first + at.l3_off + 4) : 0;
  const size_t limit = std::min<size_t>(n, max_segments);
  size_t k = 1;
  for (; k < limit; ++k) {
    const uint8_t* g = frames[k].data;
    UdpFrameLayout gat;
    if (!udp_frame_layout(g, frames[k].len, true, &gat) || gat.l4_off != at.l4_off || gat.ipv4 != at.ipv4 ||
        gat.l3_off != at.l3_off || !same_headers(first, g, at))
      break;
    if (at.ipv4 && load_be16(g + at.l3_off + 4) != static_cast<uint16_t>(id0 + k)) break;
    const uint32_t p = udp_payload_len(g, at);
    if (p == 0 || p > seg || total + p > cap) break;
    total += p;
    if (p < seg) return k + 1;  // a shorter segment can only be the last
  }
  return k;
}

uint32_t gso_build_header(const FrameView* frames, size_t k, uint8_t* out) {
  const uint8_t* first = frames[0].data;
  UdpFrameLayout at;
  udp_frame_layout(first, frames[0].len, true, &at);
  uint32_t total = 0;
  for (size_t i = 0; i < k; ++i) total += udp_payload_len(frames[i].data, at);
  VnetHdr vh;
  vh.flags = kVnetNeedsCsum;
  vh.gso_type = kVnetGsoUdpL4;
  vh.hdr_len = at.payload_off;
  vh.gso_size = static_cast<uint16_t>(udp_payload_len(first, at));
  vh.csum_start = at.l4_off;
  vh.csum_offset = 6;
  store_vnet_hdr(vh, out);
  uint8_t* h = out + kVnetHdrLen;
  std::memcpy(h, first, at.payload_off);
  const uint32_t udp_len = kUdpHdrLen + total;
  if (at.ipv4) {
    store_be16(h + at.l3_off + 2, static_cast<uint16_t>(kIpv4HdrLen + udp_len));
    set_ipv4_checksum(h + at.l3_off);
  } else {
    store_be16(h + at.l3_off + 4, static_cast<uint16_t>(udp_len));
  }
  store_be16(h + at.l4_off + 4, static_cast<uint16_t>(udp_len));
  // A partial checksum: the pseudo-header's sum (with the lengths just written), which the kernel
  // adjusts to each segment's length and completes over the segment.
  const uint8_t* ip = h + at.l3_off;
  store_sum(h + at.l4_off + 6, at.ipv4 ? rte_ipv4_phdr_cksum(reinterpret_cast<const rte_ipv4_hdr*>(ip), 0)
                                       : rte_ipv6_phdr_cksum(reinterpret_cast<const rte_ipv6_hdr*>(ip), 0));
  return static_cast<uint32_t>(kVnetHdrLen + at.payload_off);
}

int gso_parse(const VnetHdr& vh, const uint8_t* f, uint32_t len, GsoFrame* out) {
  if ((vh.gso_type & ~kVnetGsoEcn) != kVnetGsoUdpL4 || vh.gso_size == 0) return -EINVAL;
  GsoFrame g;
  if (!udp_frame_layout(f, len, false, &g.at) || len <= g.at.payload_off) return -EINVAL;
  g.payload_len = len - g.at.payload_off;
  if (uint32_t{load_be16(f + g.at.l4_off + 4)} != kUdpHdrLen + g.payload_len) return -EINVAL;
  g.seg_size = vh.gso_size;
  g.segments = (g.payload_len + g.seg_size - 1) / g.seg_size;
  *out = g;
  return 0;
}

uint32_t gso_write_segment(const uint8_t* f, const GsoFrame& g, uint32_t i, uint8_t* out) {
  const UdpFrameLayout& at = g.at;
  const uint32_t off = i * g.seg_size;
  const uint32_t plen = std::min<uint32_t>(g.seg_size, g.payload_len - off);
  const uint32_t udp_len = kUdpHdrLen + plen;
  std::memcpy(out, f, at.payload_off);
  std::memcpy(out + at.payload_off, f + at.payload_off + off, plen);
  uint8_t* ip = out + at.l3_off;
  uint8_t* udp = out + at.l4_off;
  store_be16(udp + 4, static_cast<uint16_t>(udp_len));
  store_be16(udp + 6, 0);
  if (at.ipv4) {
    store_be16(ip + 2, static_cast<uint16_t>(kIpv4HdrLen + udp_len));
    store_be16(ip + 4, static_cast<uint16_t>(load_be16(f + at.l3_off + 4) + i));
    set_ipv4_checksum(ip);
  } else {
    store_be16(ip + 4, static_cast<uint16_t>(udp_len));
    store_sum(udp + 6, rte_ipv6_udptcp_cksum(reinterpret_cast<const rte_ipv6_hdr*>(ip), udp));  // 0 is 0xffff
  }
  return at.payload_off + plen;
}

bool complete_partial_csum(const VnetHdr& vh, uint8_t* f, uint32_t len) {
  const uint32_t at = uint32_t{vh.csum_start} + vh.csum_offset;
  if (vh.csum_start >= len || at + 2 > len) return false;
  uint32_t end = len;
  // UDP's own length, not the frame's: Ethernet may have padded it.
  if (vh.csum_offset == 6 && vh.csum_start + kUdpHdrLen <= len) {
    const uint32_t udp_len = load_be16(f + vh.csum_start + 4);
    if (udp_len >= kUdpHdrLen && vh.csum_start + udp_len <= len) end = vh.csum_start + udp_len;
  }
  const uint16_t c = static_cast<uint16_t>(~rte_raw_cksum(f + vh.csum_start, end - vh.csum_start));
  store_sum(f + at, c == 0 && vh.csum_offset == 6 ? 0xffff : c);  // UDP's 0 says "none"
  return true;
}

}  // namespace droce::net
