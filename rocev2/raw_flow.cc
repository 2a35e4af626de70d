#include "rocev2/raw_flow.h"

#include <algorithm>
#include <cstring>

#include "core/endian.h"
#include "net/headers.h"

namespace droce::rocev2 {

namespace {

constexpr uint8_t kProtoTcp = 6;
using core::load_be16;

// Where a frame's layers start, found once for the rules and the RSS hash alike.
struct Layers {
  uint16_t type = 0;  ///< the ether type (behind an 802.1Q tag when there is one)
  uint16_t tci = 0;   ///< the tag's TCI; 0 untagged
  size_t l3 = 0;
  bool v4 = false, v6 = false;
  uint8_t proto = 0;  ///< IPv4 protocol or IPv6 next header
  size_t l4 = 0;      ///< 0: no transport header to look at (none, or a later IPv4 fragment)
};

// False when the frame is too short for its Ethernet header (and tag).
bool walk(std::span<const uint8_t> frame, Layers* out) {
  const uint8_t* f = frame.data();
  const size_t len = frame.size();
  if (len < 14) return false;
  Layers& w = *out;
  w.l3 = 14;
  w.type = load_be16(f + 12);
  if (w.type == net::kEtherTypeVlan) {
    if (len < 18) return false;
    w.tci = load_be16(f + 14);
    w.type = load_be16(f + 16);
    w.l3 = 18;
  }
  const size_t l3 = w.l3;
  if (w.type == net::kEtherTypeIpv4 && len >= l3 + 20 && (f[l3] >> 4) == 4) {
    const size_t ihl = size_t{f[l3] & 0xfu} * 4;
    if (ihl >= 20 && len >= l3 + ihl) {
      w.v4 = true;
      w.proto = f[l3 + 9];
      if ((load_be16(f + l3 + 6) & 0x1fff) == 0) w.l4 = l3 + ihl;
    }
  } else if (w.type == net::kEtherTypeIpv6 && len >= l3 + 40 && (f[l3] >> 4) == 6) {
    w.v6 = true;
    w.proto = f[l3 + 6];
    w.l4 = l3 + 40;
  }
  if (w.l4 != 0 && len < w.l4 + 4) w.l4 = 0;  // no room for the ports
  return true;
}

bool bytes_match(const uint8_t* got, const uint8_t* want, const uint8_t* mask, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if ((got[i] & mask[i]) != (want[i] & mask[i])) return false;
  return true;
}

template <typename T>
bool field_match(T got, T want, T mask) {
  return (got & mask) == (want & mask);
}

bool is_multicast_mac(std::span<const uint8_t> frame) { return !frame.empty() && (frame[0] & 1) != 0; }

}  // namespace

bool flow_matches(const abi::FlowMatch& m, std::span<const uint8_t> frame) {
  const uint8_t* f = frame.data();
  if (m.layers == 0) return true;  // a rule without specs takes every frame
  Layers w;
  if (!walk(frame, &w)) return false;
  const size_t l3 = w.l3;
  if (m.layers & abi::kFlowEth) {
    if (!bytes_match(f, m.eth_dst, m.eth_dst_mask, 6) || !bytes_match(f + 6, m.eth_src, m.eth_src_mask, 6) ||
        !field_match<uint16_t>(w.type, m.ether_type, m.ether_type_mask) ||
        !field_match<uint16_t>(w.tci, m.vlan_tag, m.vlan_tag_mask))
      return false;
  }
  if (m.layers & abi::kFlowIpv4) {
    if (!w.v4) return false;
    const uint8_t* ip = f + l3;
    if (!bytes_match(ip + 12, m.ip4_src, m.ip4_src_mask, 4) || !bytes_match(ip + 16, m.ip4_dst, m.ip4_dst_mask, 4) ||
        !field_match<uint8_t>(ip[9], m.ip4_proto, m.ip4_proto_mask) ||
        !field_match<uint8_t>(ip[1], m.ip4_tos, m.ip4_tos_mask) ||
        !field_match<uint8_t>(ip[8], m.ip4_ttl, m.ip4_ttl_mask) ||
        !field_match<uint8_t>(static_cast<uint8_t>(ip[6] >> 5), m.ip4_flags, m.ip4_flags_mask))
      return false;
  }
  if (m.layers & abi::kFlowIpv6) {
    if (!w.v6) return false;
    const uint8_t* ip = f + l3;
    const auto tclass = static_cast<uint8_t>(((ip[0] & 0xfu) << 4) | (ip[1] >> 4));
    const uint32_t flow_label = (uint32_t{ip[1] & 0xfu} << 16) | (uint32_t{ip[2]} << 8) | ip[3];
    if (!bytes_match(ip + 8, m.ip6_src, m.ip6_src_mask, 16) || !bytes_match(ip + 24, m.ip6_dst, m.ip6_dst_mask, 16) ||
        !field_match<uint32_t>(flow_label, m.ip6_flow_label, m.ip6_flow_label_mask) ||
        !field_match<uint8_t>(ip[6], m.ip6_next_hdr, m.ip6_next_hdr_mask) ||
        !field_match<uint8_t>(tclass, m.ip6_tclass, m.ip6_tclass_mask) ||
        !field_match<uint8_t>(ip[7], m.ip6_hop_limit, m.ip6_hop_limit_mask))
      return false;
  }
  if (m.layers & (abi::kFlowTcp | abi::kFlowUdp)) {
    const uint8_t want = (m.layers & abi::kFlowTcp) ? kProtoTcp : net::kIpProtoUdp;
    if (!(w.v4 || w.v6) || w.proto != want || w.l4 == 0) return false;
    if (!field_match<uint16_t>(load_be16(f + w.l4), m.l4_src, m.l4_src_mask) ||
        !field_match<uint16_t>(load_be16(f + w.l4 + 2), m.l4_dst, m.l4_dst_mask))
      return false;
  }
  return true;
}

uint32_t RawFlowTable::add(uint32_t qpn, abi::FlowType type, uint16_t priority, const abi::FlowMatch& match) {
  const uint32_t id = next_id_++;
  rules_.push_back({id, qpn, priority, type, match});
  if (type == abi::FlowType::sniffer) ++sniffers_;
  return id;
}

bool RawFlowTable::remove(uint32_t id) {
  auto it = std::find_if(rules_.begin(), rules_.end(), [id](const Rule& r) { return r.id == id; });
  if (it == rules_.end()) return false;
  if (it->type == abi::FlowType::sniffer) --sniffers_;
  rules_.erase(it);
  return true;
}

size_t RawFlowTable::remove_qp(uint32_t qpn) {
  size_t n = 0;
  std::erase_if(rules_, [&](const Rule& r) {
    if (r.qpn != qpn) return false;
    if (r.type == abi::FlowType::sniffer) --sniffers_;
    ++n;
    return true;
  });
  return n;
}

uint32_t RawFlowTable::qpn_of(uint32_t id) const {
  for (const Rule& r : rules_)
    if (r.id == id) return r.qpn;
  return 0;
}

void RawFlowTable::select(std::span<const uint8_t> frame, bool sniffers_only, std::vector<uint32_t>* qpns) const {
  qpns->clear();
  auto take = [qpns](uint32_t qpn) {
    if (std::find(qpns->begin(), qpns->end(), qpn) == qpns->end()) qpns->push_back(qpn);
  };
  if (!sniffers_only) {
    // The best priority among the normal rules that match.
    bool any = false;
    uint16_t best = 0;
    for (const Rule& r : rules_) {
      if (r.type != abi::FlowType::normal || (any && r.priority > best) || !flow_matches(r.match, frame)) continue;
      best = any ? std::min(best, r.priority) : r.priority;
      any = true;
    }
    if (any) {
      for (const Rule& r : rules_)
        if (r.type == abi::FlowType::normal && r.priority == best && flow_matches(r.match, frame)) take(r.qpn);
    } else {
      const bool mc = is_multicast_mac(frame);
      for (const Rule& r : rules_)
        if (r.type == abi::FlowType::all_default || (mc && r.type == abi::FlowType::mc_default)) take(r.qpn);
    }
  }
  if (sniffers_ != 0)
    for (const Rule& r : rules_)
      if (r.type == abi::FlowType::sniffer) take(r.qpn);
}

}  // namespace droce::rocev2

namespace droce::rocev2 {

uint32_t toeplitz_hash(std::span<const uint8_t> key, std::span<const uint8_t> in) {
  auto key_byte = [&](size_t i) -> uint32_t { return i < key.size() ? key[i] : 0; };
  uint32_t window = (key_byte(0) << 24) | (key_byte(1) << 16) | (key_byte(2) << 8) | key_byte(3);
  uint32_t hash = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const uint32_t next = key_byte(i + 4);
    for (int b = 7; b >= 0; --b) {
      if (in[i] & (1u << b)) hash ^= window;
      window = (window << 1) | ((next >> b) & 1u);
    }
  }
  return hash;
}

uint32_t rss_hash(const RawRss& rss, std::span<const uint8_t> frame) {
  const uint8_t* f = frame.data();
  Layers w;
  if (!walk(frame, &w)) return 0;
  uint8_t in[36];
  size_t n = 0;
  auto add = [&](const uint8_t* p, size_t k) {
    std::memcpy(in + n, p, k);
    n += k;
  };
  if (w.v4) {
    if (rss.fields & kRxHashSrcIpv4) add(f + w.l3 + 12, 4);
    if (rss.fields & kRxHashDstIpv4) add(f + w.l3 + 16, 4);
  } else if (w.v6) {
    if (rss.fields & kRxHashSrcIpv6) add(f + w.l3 + 8, 16);
    if (rss.fields & kRxHashDstIpv6) add(f + w.l3 + 24, 16);
  }
  if (w.l4 != 0) {
    const bool tcp = w.proto == kProtoTcp, udp = w.proto == net::kIpProtoUdp;
    if ((tcp && (rss.fields & kRxHashSrcPortTcp)) || (udp && (rss.fields & kRxHashSrcPortUdp))) add(f + w.l4, 2);
    if ((tcp && (rss.fields & kRxHashDstPortTcp)) || (udp && (rss.fields & kRxHashDstPortUdp))) add(f + w.l4 + 2, 2);
  }
  return toeplitz_hash(std::span<const uint8_t>(rss.key.data(), rss.key_len), std::span<const uint8_t>(in, n));
}

}  // namespace droce::rocev2
