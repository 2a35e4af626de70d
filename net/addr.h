#pragma once
// Link and network addresses as droce passes them around: MACs, and IP
// addresses in GID form (IPv6, or IPv4 mapped as ::ffff:a.b.c.d), which is
// how RoCEv2 GIDs carry them. Pure value types; safe anywhere.

#include <array>
#include <cstdint>
#include <cstring>
#include <string>

namespace droce::net {

using MacAddr = std::array<uint8_t, 6>;
using IpAddr = std::array<uint8_t, 16>;

/// Whether the 6 bytes at a and b are the same MAC: two loads and compares, where
/// std::array's == and memcmp are a libc call per frame on the data path.
inline bool same_mac(const uint8_t* a, const uint8_t* b) {
  uint32_t a4, b4;
  uint16_t a2, b2;
  std::memcpy(&a4, a, 4);
  std::memcpy(&b4, b, 4);
  std::memcpy(&a2, a + 4, 2);
  std::memcpy(&b2, b + 4, 2);
  return ((a4 ^ b4) | uint32_t(a2 ^ b2)) == 0;
}

inline bool same_mac(const MacAddr& a, const MacAddr& b) { return same_mac(a.data(), b.data()); }

/// Whether two addresses are the same: two 8-byte loads each, for the same reason.
inline bool same_ip(const IpAddr& a, const IpAddr& b) {
  uint64_t a0, a1, b0, b1;
  std::memcpy(&a0, a.data(), 8);
  std::memcpy(&a1, a.data() + 8, 8);
  std::memcpy(&b0, b.data(), 8);
  std::memcpy(&b1, b.data() + 8, 8);
  return ((a0 ^ b0) | (a1 ^ b1)) == 0;
}

/// "No 802.1Q tag" wherever a VLAN ID is expected.
inline constexpr uint16_t kNoVlan = 0xffff;

/// ::ffff:a.b.c.d for an IPv4 address in host order.
constexpr IpAddr ipv4_mapped(uint32_t ipv4) {
  IpAddr a{};
  a[10] = a[11] = 0xff;
  a[12] = static_cast<uint8_t>(ipv4 >> 24);
  a[13] = static_cast<uint8_t>(ipv4 >> 16);
  a[14] = static_cast<uint8_t>(ipv4 >> 8);
  a[15] = static_cast<uint8_t>(ipv4);
  return a;
}

constexpr bool is_ipv4_mapped(const IpAddr& a) {
  for (int i = 0; i < 10; ++i)
    if (a[i] != 0) return false;
  return a[10] == 0xff && a[11] == 0xff;
}

/// IPv4 224.0.0.0/4 or IPv6 ff00::/8.
constexpr bool is_multicast(const IpAddr& a) {
  if (is_ipv4_mapped(a)) return (a[12] & 0xf0) == 0xe0;
  return a[0] == 0xff;
}

/// The IPv4 address (host order) of an IPv4-mapped address.
constexpr uint32_t ipv4_of(const IpAddr& a) {
  return (uint32_t{a[12]} << 24) | (uint32_t{a[13]} << 16) | (uint32_t{a[14]} << 8) | a[15];
}

/// An address as text: dotted IPv4 for an IPv4-mapped one, else IPv6. Control path.
std::string format_ip(const IpAddr& a);
/// An IPv4 address (as its IPv4-mapped GID) or an IPv6 address; false if neither.
bool parse_ip(const std::string& text, IpAddr* out);

}  // namespace droce::net
