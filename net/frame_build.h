#pragma once
// Small pieces every builder of droce's own control frames needs (ARP/ND in neighbor.cc,
// IGMP/MLD in membership.cc): the Internet checksum, the ICMPv6 pseudo-header sum, the
// Ethernet header, and the Ethernet address of an IP multicast group.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "net/addr.h"

namespace droce::net {

/// The 16-bit one's-complement sum of `n` bytes as big-endian words, added to acc.
uint64_t sum_be16(const uint8_t* p, size_t n, uint64_t acc);
/// Folds a sum to 16 bits (not complemented).
uint16_t fold_sum(uint64_t acc);
/// RFC 1071: the checksum field's value for `n` bytes (whose checksum field is zero).
inline uint16_t inet_checksum(const uint8_t* p, size_t n) { return static_cast<uint16_t>(~fold_sum(sum_be16(p, n, 0))); }
/// RFC 4443 2.3 / RFC 8200 8.1: the sum over the pseudo-header (source, final destination,
/// upper-layer length, next header 58) and the ICMPv6 message (not complemented).
uint16_t icmpv6_sum(const uint8_t* src, const uint8_t* dst, const uint8_t* msg, size_t len);

/// Writes the Ethernet header (and 802.1Q tag with `tci` when `tagged`) of a frame of `payload`
/// bytes into f (resized, zero-filled); returns the payload's offset.
size_t start_frame(std::vector<uint8_t>& f, const MacAddr& dst, const MacAddr& src, bool tagged, uint16_t tci,
                   uint16_t ethertype, size_t payload);

/// The Ethernet address of multicast group `group`: 01:00:5e and the low 23 bits for IPv4
/// (RFC 1112 6.4), 33:33 and the low 32 bits for IPv6 (RFC 2464 7).
MacAddr multicast_mac(const IpAddr& group);

}  // namespace droce::net
