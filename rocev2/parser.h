#pragma once
// Parsing received frames: Ethernet [802.1Q] -> IPv4 | IPv6 -> UDP 4791 ->
// BTH -> extension headers -> payload -> pad -> ICRC.
//
// The parser validates everything that can be checked without QP state and
// says exactly why it refused a frame: each ParseStatus is a counter in the
// engine and a reason in `droce decode`. It never reads outside the frame
// and never allocates; frames may be contiguous or mbuf chains.
//
// What the parser does NOT check (the transport does, with QP state):
// destination address and QP, P_Key against the QP's, PSN, opcode sequence,
// payload length against the path MTU.

#include <cstdint>
#include <span>

#include "net/frame_bytes.h"
#include "rocev2/packet.h"

struct rte_mbuf;

namespace droce::rocev2 {

#define DROCE_PARSE_STATUS_LIST(X)                                                     \
  X(ok, "accepted")                                                                    \
  /* Foreign: not RoCEv2 at all; handed elsewhere (ARP, ND) or ignored. */             \
  X(not_ip, "ethertype is neither IPv4 nor IPv6")                                      \
  X(not_udp, "IP protocol is not UDP")                                                 \
  X(not_roce_port, "UDP destination port is not 4791")                                 \
  /* Malformed: RoCEv2-bound but broken; dropped and counted. */                       \
  X(truncated_eth, "frame shorter than an Ethernet header")                            \
  X(truncated_vlan, "frame ends inside the 802.1Q tag")                                \
  X(truncated_ip, "frame ends inside the IP header")                                   \
  X(bad_ip_version, "IP version does not match the ethertype")                         \
  X(ipv4_options, "IPv4 header has options (IHL != 5)")                                \
  X(bad_ipv4_checksum, "IPv4 header checksum is wrong")                                \
  X(ip_fragment, "IPv4 fragment (RoCEv2 packets are never fragmented)")                \
  X(ipv6_ext_headers, "IPv6 extension headers before UDP")                             \
  X(bad_ip_length, "IP length disagrees with the frame")                               \
  X(truncated_udp, "IP payload ends inside the UDP header")                            \
  X(bad_udp_length, "UDP length disagrees with the IP length")                         \
  X(truncated_bth, "UDP payload ends inside the BTH")                                  \
  X(bad_tver, "BTH transport header version is not 0")                                 \
  X(invalid_pkey, "BTH P_Key is 0x0000 or 0x8000 (invalid, IBA 10.9.1.2)")              \
  X(unknown_opcode, "BTH opcode is not defined")                                       \
  X(opcode_invalid_for_transport, "operation not allowed on this transport")           \
  X(unsupported_transport, "RD (reliable datagram) is not supported")                  \
  X(truncated_ext_header, "packet ends inside an extension header")                    \
  X(truncated_icrc, "no room for the 4-byte ICRC")                                     \
  X(bad_pad_count, "pad count is larger than the payload or set where it must be 0")  \
  X(unexpected_payload, "payload on an opcode that carries none")                      \
  X(bad_icrc, "ICRC does not match")

enum class ParseStatus : uint8_t {
#define DROCE_X(name, text) name,
  DROCE_PARSE_STATUS_LIST(DROCE_X)
#undef DROCE_X
};

inline constexpr size_t kParseStatusCount = 0
#define DROCE_X(name, text) +1
    DROCE_PARSE_STATUS_LIST(DROCE_X)
#undef DROCE_X
    ;

/// The status's identifier ("bad_icrc") and a sentence saying what it means.
const char* to_string(ParseStatus s);
const char* describe(ParseStatus s);

/// Not RoCEv2 at all (as opposed to malformed RoCEv2).
inline bool is_foreign(ParseStatus s) {
  return s == ParseStatus::not_ip || s == ParseStatus::not_udp || s == ParseStatus::not_roce_port;
}

struct ParseOptions {
  bool verify_icrc = true;           ///< off when the NIC has checked it
  bool verify_ipv4_checksum = true;  ///< off when the NIC has checked it
};

/// Parses a frame. On ok, *out is complete; otherwise *out holds whatever was
/// parsed before the failure (enough for `droce decode` to show it).
ParseStatus parse_frame(const net::FrameBytes& frame, ParsedPacket* out,
                        const ParseOptions& opts = {});

inline ParseStatus parse_frame(std::span<const uint8_t> frame, ParsedPacket* out,
                               const ParseOptions& opts = {}) {
  return parse_frame(net::FrameBytes(frame), out, opts);
}

inline ParseStatus parse_frame(const rte_mbuf* m, ParsedPacket* out,
                               const ParseOptions& opts = {}) {
  return parse_frame(net::FrameBytes(m), out, opts);
}

/// The destination QP of a RoCEv2 frame, read from the first `len` bytes
/// (Ethernet, an optional 802.1Q tag, IPv4 of any header length or IPv6
/// without extension headers, UDP to 4791, the BTH) without checking
/// anything else: how droced finds the lcore that owns a frame before the
/// engine parses it in full. False when those headers are not all there.
bool peek_dest_qpn(const uint8_t* frame, size_t len, uint32_t* qpn);

/// Counts of parse results, one per status (the engine's RX drop counters).
struct ParseCounters {
  uint64_t by_status[kParseStatusCount] = {};
  void count(ParseStatus s) { ++by_status[static_cast<size_t>(s)]; }
  uint64_t operator[](ParseStatus s) const { return by_status[static_cast<size_t>(s)]; }
  ParseCounters& operator+=(const ParseCounters& o) {
    for (size_t i = 0; i < kParseStatusCount; ++i) by_status[i] += o.by_status[i];
    return *this;
  }
};

}  // namespace droce::rocev2
