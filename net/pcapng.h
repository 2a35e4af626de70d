#pragma once
// The pcapng capture format's blocks (draft-ietf-opsawg-pcapng), appended to a byte buffer:
// what `droce capture` streams (droced/capture.h). I/O-free, so the exact bytes are tested and
// whoever holds the buffer decides where it goes (a pipe, a file). pcapng rather than classic
// pcap (net/pcap_file.h) because it carries each frame's direction (epb_flags) and the drops at
// the end (an Interface Statistics Block), and `tshark -i -` reads it from a pipe.
//
// Little-endian (the byte-order magic tells readers), one section, one Ethernet interface with
// nanosecond timestamps (if_tsresol 9). Control path: appends allocate.

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace droce::net::pcapng {

inline constexpr uint32_t kSectionHeaderType = 0x0A0D0D0A;
inline constexpr uint32_t kInterfaceType = 1;
inline constexpr uint32_t kInterfaceStatsType = 5;
inline constexpr uint32_t kEnhancedPacketType = 6;
inline constexpr uint16_t kLinkTypeEthernet = 1;

/// epb_flags' direction bits (0: unknown).
enum class Direction : uint8_t { unknown = 0, inbound = 1, outbound = 2 };

/// The Section Header Block (section length unknown: a stream).
void append_section_header(std::vector<uint8_t>* out);
/// Interface 0: Ethernet, `snaplen`, ns timestamps, named `name` (if_name; empty: none).
void append_interface(std::vector<uint8_t>* out, uint32_t snaplen, std::string_view name);
/// One frame on interface 0: `bytes` captured of `wire_len`, at `time_ns` (ns since the epoch).
void append_packet(std::vector<uint8_t>* out, uint64_t time_ns, uint32_t wire_len, std::span<const uint8_t> bytes,
                   Direction dir);
/// Interface 0's statistics at `time_ns`: frames seen (isb_ifrecv) and lost by the capture
/// (isb_ifdrop).
void append_interface_stats(std::vector<uint8_t>* out, uint64_t time_ns, uint64_t received, uint64_t dropped);

}  // namespace droce::net::pcapng
