#pragma once
// A RoCEv2 packet's headers in host order, from Ethernet to the last
// extension header, and where each part sits in the frame.
//
// The parser fills a ParsedPacket; the builder turns PacketHeaders (plus a
// payload) back into a frame. Everything the wire carries is kept, reserved
// bits included, so parse -> build reproduces the frame byte for byte.

#include <array>
#include <cstdint>

#include "net/addr.h"
#include "net/headers.h"
#include "rocev2/headers.h"
#include "rocev2/opcode.h"

namespace droce::rocev2 {

using net::IpAddr;  // GID form: IPv6, or IPv4 mapped as ::ffff:a.b.c.d
using net::ipv4_mapped;
using net::ipv4_of;
using net::is_ipv4_mapped;
using net::MacAddr;

struct L2Header {
  MacAddr dst{};
  MacAddr src{};
  bool vlan = false;
  uint16_t vlan_tci = 0;  ///< PCP(3) DEI(1) VID(12)
  friend bool operator==(const L2Header&, const L2Header&) = default;
};

struct L3Header {
  uint8_t version = 4;      ///< 4 or 6
  uint8_t tos = 0;          ///< IPv4 TOS / IPv6 traffic class (DSCP << 2 | ECN)
  uint8_t ttl = 64;         ///< IPv4 TTL / IPv6 hop limit
  uint32_t flow_label = 0;  ///< IPv6 only, 20 bits
  uint16_t ipv4_id = 0;
  uint16_t ipv4_frag = net::kIpv4FlagDf;  ///< flags and fragment offset
  IpAddr src{};
  IpAddr dst{};
  friend bool operator==(const L3Header&, const L3Header&) = default;
};

struct L4Header {
  uint16_t src_port = 0xc000;  ///< flow entropy, 0xC000 | 14 bits
  uint16_t checksum = 0;       ///< sent as 0 (Annex A17.4.3.3); kept as found
  friend bool operator==(const L4Header&, const L4Header&) = default;
};

/// Extension headers; which of them are present follows from the opcode.
struct ExtHeaders {
  Xrceth xrceth;
  Feth feth;
  Deth deth;
  Reth reth;
  AtomicEth atomic_eth;
  Aeth aeth;
  AtomicAckEth atomic_ack_eth;
  ImmDt imm;
  Ieth ieth;
  Cnp cnp;
  friend bool operator==(const ExtHeaders&, const ExtHeaders&) = default;
};

struct PacketHeaders {
  L2Header l2;
  L3Header l3;
  L4Header l4;
  Bth bth;
  ExtHeaders ext;
  friend bool operator==(const PacketHeaders&, const PacketHeaders&) = default;
};

/// `h` as the wire will carry it with `payload_len` bytes of payload: the
/// extension headers the opcode lacks reset, the pad count derived, fields
/// of the other IP version and an absent VLAN tag zeroed. A parsed packet's
/// headers equal the canonical form of the headers it was built from.
PacketHeaders canonical(const PacketHeaders& h, uint32_t payload_len);

/// Offsets into the frame, in bytes.
struct PacketLayout {
  uint16_t l3_off = 0;       ///< IP header
  uint16_t l4_off = 0;       ///< UDP header
  uint16_t bth_off = 0;
  uint16_t payload_off = 0;  ///< first payload byte (after the extension headers)
  uint32_t payload_len = 0;  ///< payload bytes, without pad and ICRC
  uint32_t icrc_off = 0;     ///< the ICRC; the RoCEv2 packet ends 4 bytes later
};

struct ParsedPacket {
  PacketHeaders hdr;
  PacketLayout layout;
  const OpcodeInfo* info = nullptr;
  uint32_t icrc = 0;  ///< as carried (the wire's little-endian bytes as a number)
};

/// Longest header run droce builds or parses: Ethernet, VLAN, IPv6, UDP,
/// BTH and the longest extension headers (an XRC atomic's XRCETH and AtomicETH).
inline constexpr size_t kMaxHeaderLen = 14 + 4 + 40 + 8 + 12 + 4 + 28;

}  // namespace droce::rocev2
