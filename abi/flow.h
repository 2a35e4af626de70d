#pragma once
// Flow steering for raw packet QPs (ibv_create_flow(3)): what one rule matches, in the form
// the provider sends and the engine keeps. The provider folds a rule's verbs specs (Ethernet,
// IPv4 or IPv4 extended, IPv6, TCP or UDP; at most one of each layer) into one FlowMatch;
// rocev2/raw_flow.h matches frames against it.
//
// Every field is a value and a mask: a frame matches when (field & mask) == (value & mask) for
// every layer the rule names. A layer named with all-zero masks still asks that the frame has
// that layer (an IPv4 spec matches IPv4 frames only), as verbs specs do. Multi-byte fields are
// in host order here (the provider converts from the specs' network order); addresses are
// bytes as on the wire.
//
// Control path only: trivially copyable, fixed size, it crosses the control socket inside
// CreateFlowRequest (abi/ctl_protocol.h).

#include <cstdint>

namespace droce::abi {

/// Which layers a FlowMatch names (FlowMatch::layers).
enum FlowLayer : uint8_t {
  kFlowEth = 1u << 0,
  kFlowIpv4 = 1u << 1,
  kFlowIpv6 = 1u << 2,
  kFlowTcp = 1u << 3,
  kFlowUdp = 1u << 4,
};

/// ibv_flow_attr_type, by value.
enum class FlowType : uint8_t {
  normal = 0,       ///< IBV_FLOW_ATTR_NORMAL: frames the specs match
  all_default = 1,  ///< IBV_FLOW_ATTR_ALL_DEFAULT: frames no normal rule took
  mc_default = 2,   ///< IBV_FLOW_ATTR_MC_DEFAULT: multicast frames no normal rule took
  sniffer = 3,      ///< IBV_FLOW_ATTR_SNIFFER: a copy of every frame received
};

struct FlowMatch {
  uint8_t layers;  ///< FlowLayer bits
  uint8_t reserved[3];
  // Ethernet (kFlowEth).
  uint8_t eth_dst[6], eth_dst_mask[6];
  uint8_t eth_src[6], eth_src_mask[6];
  uint16_t ether_type, ether_type_mask;
  uint16_t vlan_tag, vlan_tag_mask;  ///< the 802.1Q TCI; a frame without a tag has 0
  // IPv4 (kFlowIpv4).
  uint8_t ip4_src[4], ip4_src_mask[4];
  uint8_t ip4_dst[4], ip4_dst_mask[4];
  uint8_t ip4_proto, ip4_proto_mask;
  uint8_t ip4_tos, ip4_tos_mask;
  uint8_t ip4_ttl, ip4_ttl_mask;
  uint8_t ip4_flags, ip4_flags_mask;  ///< the three flag bits (DF is 2)
  // IPv6 (kFlowIpv6).
  uint8_t ip6_src[16], ip6_src_mask[16];
  uint8_t ip6_dst[16], ip6_dst_mask[16];
  uint32_t ip6_flow_label, ip6_flow_label_mask;
  uint8_t ip6_next_hdr, ip6_next_hdr_mask;
  uint8_t ip6_tclass, ip6_tclass_mask;
  uint8_t ip6_hop_limit, ip6_hop_limit_mask;
  uint8_t reserved2[2];
  // TCP or UDP (kFlowTcp or kFlowUdp: the L4 protocol must be that one).
  uint16_t l4_src, l4_src_mask;
  uint16_t l4_dst, l4_dst_mask;
};
static_assert(sizeof(FlowMatch) == 4 + 24 + 8 + 24 + 64 + 8 + 8 + 8);

}  // namespace droce::abi
