#pragma once
// Ethernet, 802.1Q, IPv4, IPv6 and UDP as RoCEv2 uses them.
//
// The wire layouts are DPDK's (rte_ether_hdr, rte_vlan_hdr, rte_ipv4_hdr,
// rte_ipv6_hdr, rte_udp_hdr); this header adds the constants droce needs
// and checks the sizes it relies on.

#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_udp.h>

#include <cstdint>

namespace droce::net {

inline constexpr uint16_t kEtherTypeIpv4 = RTE_ETHER_TYPE_IPV4;
inline constexpr uint16_t kEtherTypeIpv6 = RTE_ETHER_TYPE_IPV6;
inline constexpr uint16_t kEtherTypeVlan = RTE_ETHER_TYPE_VLAN;
inline constexpr uint16_t kEtherTypeArp = RTE_ETHER_TYPE_ARP;
inline constexpr uint8_t kIpProtoUdp = 17;
inline constexpr uint8_t kIpProtoIcmpv6 = 58;

inline constexpr size_t kEthHdrLen = 14;
inline constexpr size_t kVlanHdrLen = 4;
inline constexpr size_t kIpv4HdrLen = 20;  // without options
inline constexpr size_t kIpv6HdrLen = 40;
inline constexpr size_t kUdpHdrLen = 8;

static_assert(sizeof(rte_ether_hdr) == kEthHdrLen);
static_assert(sizeof(rte_vlan_hdr) == kVlanHdrLen);
static_assert(sizeof(rte_ipv4_hdr) == kIpv4HdrLen);
static_assert(sizeof(rte_ipv6_hdr) == kIpv6HdrLen);
static_assert(sizeof(rte_udp_hdr) == kUdpHdrLen);

/// IPv4 flags/fragment-offset field: Don't Fragment, More Fragments, offset.
inline constexpr uint16_t kIpv4FlagDf = 0x4000;
inline constexpr uint16_t kIpv4FlagMf = 0x2000;
inline constexpr uint16_t kIpv4FragOffsetMask = 0x1fff;

/// The ECN field, the low two bits of the IPv4 TOS / IPv6 traffic class (RFC 3168 5).
inline constexpr uint8_t kEcnMask = 0x03;
inline constexpr uint8_t kEcnNotEct = 0x00;
inline constexpr uint8_t kEcnEct1 = 0x01;
inline constexpr uint8_t kEcnEct0 = 0x02;
inline constexpr uint8_t kEcnCe = 0x03;

}  // namespace droce::net
