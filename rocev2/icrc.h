#pragma once
// The RoCEv2 invariant CRC (IBA 7.8.1, Annex A17.4.3.4).
//
// CRC-32 (IEEE 802.3, reflected, as zlib's crc32) seeded as if eight 0xFF
// bytes (the absent LRH) had been processed, over the IP header, UDP header,
// BTH, extension headers, payload and pad, with the variant fields replaced
// by ones: IPv4 TOS, TTL, header checksum; IPv6 traffic class, flow label,
// hop limit; UDP checksum; BTH byte 4 (FECN, BECN, resv6). The value goes on
// the wire least significant byte first.
//
// The CRC itself is ISA-L's crc32_gzip_refl (runtime-dispatched to PCLMUL);
// see CONTRIBUTING.md for why no table loop is written here.
//
// Hot path: allocation-free; one 60-byte copy for the masked headers.

#include <cstddef>
#include <cstdint>
#include <span>

#include "net/frame_bytes.h"

namespace droce::rocev2 {

/// zlib-compatible CRC-32 continuing from `crc` (0 to start).
uint32_t crc32(uint32_t crc, const void* data, size_t len);

/// The ICRC of the RoCEv2 packet whose IP header starts at `l3_off` and whose
/// ICRC field starts at `icrc_off`. `ip_version` is 4 (20-byte header, no
/// options) or 6. The frame must hold [l3_off, icrc_off); returns 0 and sets
/// *ok = false otherwise.
uint32_t compute_icrc(const net::FrameBytes& frame, size_t l3_off, size_t icrc_off,
                      uint8_t ip_version, bool* ok = nullptr);

/// Recomputes and stores the ICRC of a contiguous frame in place (for tests
/// and tools that edit packets). Returns false if the layout does not fit.
bool refresh_icrc(std::span<uint8_t> frame, size_t l3_off, size_t icrc_off, uint8_t ip_version);

}  // namespace droce::rocev2
