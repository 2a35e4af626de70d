#pragma once
// RouteTable: where a frame to an address goes next, for droce's own addresses
// (own-address mode: a NIC droce owns through a PMD, or addresses the kernel does
// not have). With a kernel netdev whose addresses droce shares, the kernel's FIB
// answers instead (net/kernel_net.h); both give a NextHop, so the caller resolves
// the next hop's MAC the same way.
//
// I/O-free, like the neighbour table: the caller adds routes (droced's --route
// and the prefixes of its --address A/LEN), and asks lookup(dst).
//
// Contents. Each route is a prefix in GID form (IPv4 as ::ffff:a.b.c.d, its
// length counted from bit 0 of the 16 bytes, so an IPv4 /24 is /120), a gateway
// (all-zero: on link, the destination is its own next hop), a metric (lower
// wins among routes of the same prefix length) and a hop limit (0: the default,
// 64, as Linux's ip_default_ttl and IPv6 hop_limit).
//
// Lookup. The longest matching prefix, then the lowest metric, then the first
// added. No match: -ENETUNREACH, unless the table holds no route at all of the
// destination's family, in which case every destination of that family is on
// link (droce before routes existed, and a lab on one segment: `--address` with
// no prefix and no --route). IPv6 link-local destinations (fe80::/10) are always
// on link, as RFC 4291 says they are never forwarded. Multicast destinations are
// their own next hop (the MAC is derived from the group).
//
// Hop limit. The next hop carries the route's hop limit; droced writes it into
// the address vector, replacing the one the program gave, as the kernel does for
// RoCE (ib_resolve_unicast_gid_dmac takes the route's hop limit): programs such
// as ibv_rc_pingpong ask for 1, which a router would drop.
//
// Threading: none (droced's control path owns it). Errors: -errno.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "net/addr.h"

namespace droce::net {

inline constexpr uint8_t kDefaultHopLimit = 64;

struct Route {
  IpAddr prefix{};          ///< GID form; bits past prefix_len are zero
  uint8_t prefix_len = 0;   ///< 0..128, in GID bits (IPv4: 96 + its length)
  IpAddr gateway{};         ///< all-zero: on link
  uint32_t metric = 0;
  uint8_t hop_limit = 0;    ///< 0: kDefaultHopLimit
  bool on_link() const;
  friend bool operator==(const Route&, const Route&) = default;
};

struct NextHop {
  IpAddr ip{};            ///< whose MAC the frame goes to: the gateway, or the destination
  bool via_gateway = false;
  uint8_t hop_limit = kDefaultHopLimit;
};

/// The first `len` bits of `ip`, the rest zero.
IpAddr mask_prefix(const IpAddr& ip, uint8_t len);
/// Whether the first `len` bits of a and b agree.
bool prefix_matches(const IpAddr& a, const IpAddr& b, uint8_t len);

/// Parses "PREFIX[/LEN] [via GATEWAY] [metric N] [hoplimit N]" (iproute2's words;
/// PREFIX may be "default", LEN is in the address's own family: /24 for IPv4).
/// A prefix with host bits set is refused (as `ip route` refuses it); a prefix
/// without /LEN is a host route. 0, or -EINVAL with a sentence in *err.
int parse_route(std::string_view text, Route* out, std::string* err);
/// "ADDRESS[/LEN]" as --address takes it: *ip, and *prefix_len in GID bits, or
/// -1 when no /LEN was given. 0 or -EINVAL.
int parse_address_prefix(std::string_view text, IpAddr* ip, int* prefix_len);
/// iproute2's way round: "10.1.0.0/16 via 10.0.0.1 metric 5".
std::string format_route(const Route& r);

class RouteTable {
 public:
  /// Adds `r`. -EINVAL: prefix_len > 128 (IPv4: below 96), host bits set, a
  /// gateway of the other family or multicast / unspecified-but-not-zero / loopback
  /// destinations; -EEXIST: the same prefix, length, gateway and metric already there;
  /// -ENOSPC past kMaxRoutes.
  int add(const Route& r);
  /// Removes the route equal to `r` in prefix, length, gateway and metric. -ENOENT.
  int remove(const Route& r);
  /// The on-link route of an address with its prefix (`10.0.0.2/24` -> 10.0.0.0/24).
  int add_on_link(const IpAddr& ip, uint8_t prefix_len);

  /// The next hop toward `dst` (see the header). 0, -ENETUNREACH, or -EINVAL for
  /// an unspecified destination.
  int lookup(const IpAddr& dst, NextHop* out) const;

  const std::vector<Route>& routes() const { return routes_; }
  static constexpr size_t kMaxRoutes = 4096;

 private:
  std::vector<Route> routes_;
};

}  // namespace droce::net
