#pragma once
// The engine's verbs vocabulary: the words the provider and droced share
// (abi/verbs.h, declared in droce::abi), named here in droce::rocev2 as well
// so that the engine, droced and their tests keep speaking them unqualified;
// and what the engine adds: how a UD receive's completion and GRH area are
// filled on RoCE, which the provider never computes.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "abi/verbs.h"
#include "core/endian.h"
#include "net/addr.h"

namespace droce::rocev2 {

using abi::AccessFlags;
using abi::AddressVector;
using abi::Completion;
using abi::DeviceLimits;
using abi::is_reliable;
using abi::is_xrc;
using abi::kMaxSge;
using abi::MigState;
using abi::mtu_bytes;
using abi::MwType;
using abi::path_mtu_for;
using abi::PathMtu;
using abi::QpAttr;
using abi::QpAttrMask;
using abi::QpCap;
using abi::QpState;
using abi::QpType;
using abi::RecvWr;
using abi::SendFlags;
using abi::SendWr;
using abi::Sge;
using abi::to_string;
using abi::WcFlags;
using abi::WcOpcode;
using abi::WcStatus;
using abi::WrOpcode;
// The unscoped enums' enumerators (kAttrState, kAccessLocalWrite, kSendInline, kWcGrh, ...).
using enum abi::AccessFlags;
using enum abi::QpAttrMask;
using enum abi::SendFlags;
using enum abi::WcFlags;

/// A UD receive's ibv_wc.sl on RoCE. The frame carries no SL, so the field is
/// free, and droce fills it as mlx5 NICs do (their CQE's 4 bits there): bit 3
/// says the frame had a UDP header (RoCE v2), bits 2:0 the L3 header (1 IPv6,
/// 2 IPv4). UCX's ud_verbs reads it to know where the destination address sits
/// in the 40-byte GRH area, and drops every datagram when it reads 0 (taken as
/// IPv6) for an IPv4 frame; the kernel's rxe leaves 0 there.
constexpr uint8_t roce_rx_packet_type(bool ipv6) { return 0x8 | (ipv6 ? 0x1 : 0x2); }

/// The 40-byte GRH area a UD receive starts with (IBA 11.4.1.2, Annex A17.4.5.1): for IPv6 the
/// IPv6 header, for IPv4 20 undefined bytes (droce writes zeros) and then the IPv4 header.
/// `ip` is the frame's IP header (40 or 20 bytes).
inline void write_grh_area(const uint8_t* ip, bool ipv6, uint8_t out[40]) {
  const size_t len = ipv6 ? 40 : 20;
  std::memset(out, 0, 40 - len);
  std::memcpy(out + (40 - len), ip, len);
}
/// The source and destination addresses in a GRH area (GID form: IPv4 as ::ffff:a.b.c.d).
inline void grh_area_addresses(const uint8_t grh[40], net::IpAddr* src, net::IpAddr* dst) {
  if ((grh[0] >> 4) == 6) {
    std::memcpy(src->data(), grh + 8, 16);
    std::memcpy(dst->data(), grh + 24, 16);
  } else {
    *src = net::ipv4_mapped(core::load_be32(grh + 20 + 12));
    *dst = net::ipv4_mapped(core::load_be32(grh + 20 + 16));
  }
}

}  // namespace droce::rocev2
