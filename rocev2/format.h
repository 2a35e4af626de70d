#pragma once
// Human and machine renderings of parsed packets, for `droce decode`, the
// demo and test failure messages. Control path: allocates strings.

#include <string>
#include <string_view>

#include "rocev2/packet.h"
#include "rocev2/parser.h"

namespace droce::rocev2 {

using net::format_ip;  // net/addr.h
using net::parse_ip;
std::string format_mac(const MacAddr& m);

/// Multi-line text, tshark-like: one line per layer, then the verdict.
/// Shows as much as was parsed before a failure.
std::string format_text(const ParsedPacket& p, ParseStatus status, bool icrc_ok);

/// One JSON object (no newline) with the fields `droce decode --json` promises; with `mad`
/// (cm::describe_mad of a CM MAD the frame carries), a "mad" field too.
std::string format_json(size_t frame_no, const ParsedPacket& p, ParseStatus status, bool icrc_ok,
                        std::string_view mad = {});

}  // namespace droce::rocev2
