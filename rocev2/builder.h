#pragma once
// Building RoCEv2 frames from PacketHeaders and a payload.
//
// The builder derives what follows from the rest and never trusts the caller
// for it: ethertypes, IP and UDP lengths (which include the ICRC), the IPv4
// header checksum, the BTH pad count and the pad bytes (zero), and the ICRC.
// Everything else (addresses, TOS, TTL, flow label, IPv4 id and flags, UDP
// source port and checksum, every BTH and extension header field, reserved
// bits included) is written as given.
//
// Hot path: no allocation except the optional tail segment of
// build_mbuf_chained; no syscalls.

#include <cstddef>
#include <cstdint>
#include <span>

#include "rocev2/packet.h"

struct rte_mbuf;
struct rte_mempool;

namespace droce::rocev2 {

/// Length of everything before the payload: Ethernet through the last
/// extension header.
size_t header_len(const PacketHeaders& h);

/// Frame length for `payload_len` bytes of payload: headers, payload, pad, ICRC.
size_t frame_len(const PacketHeaders& h, uint32_t payload_len);

/// Writes the headers for a packet of `payload_len` payload bytes into
/// out[0, header_len(h)) and fills in *layout. Returns header_len(h), or 0 if
/// the opcode is not one droce sends (unknown, RD, invalid for its transport)
/// or carries no payload while payload_len != 0.
size_t write_headers(const PacketHeaders& h, uint32_t payload_len, uint8_t* out,
                     PacketLayout* layout = nullptr);

/// Builds a whole frame into `out`. Returns its length, or 0 when the headers
/// are refused (see write_headers) or `out` is too small.
size_t build_frame(const PacketHeaders& h, std::span<const uint8_t> payload,
                   std::span<uint8_t> out);

/// Builds a frame into the empty mbuf `m`, payload copied, all in one segment.
/// Returns 0, -EINVAL (headers refused) or -ENOSPC (no room in `m`).
int build_mbuf(const PacketHeaders& h, std::span<const uint8_t> payload, rte_mbuf* m);

/// Builds a frame whose headers go into the empty mbuf `head` and whose
/// payload is the chain `payload` (already filled: zero-copy TX). Pad and
/// ICRC go at the end of the chain's last segment when it has writable
/// tailroom, else into a segment from `tail_pool`. On success `head` owns
/// the whole chain. Returns 0, -EINVAL, -ENOSPC or -ENOMEM (tail_pool empty);
/// on error nothing is chained and the caller still owns both.
int build_mbuf_chained(const PacketHeaders& h, rte_mbuf* head, rte_mbuf* payload,
                       rte_mempool* tail_pool);

}  // namespace droce::rocev2
