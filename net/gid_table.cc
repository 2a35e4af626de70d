#include "net/gid_table.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>

namespace droce::net {

namespace {

bool is_ipv4(const IpAddr& a) {
  for (int i = 0; i < 10; ++i)
    if (a[i] != 0) return false;
  return a[10] == 0xff && a[11] == 0xff;
}

bool is_unspecified(const IpAddr& a) {
  const size_t from = is_ipv4(a) ? 12 : 0;
  return std::all_of(a.begin() + from, a.end(), [](uint8_t b) { return b == 0; });
}

// IPv4: multicast, and the reserved 240/4 with the broadcast address.
bool is_multicast_or_reserved(const IpAddr& a) { return is_ipv4(a) ? a[12] >= 0xe0 : a[0] == 0xff; }

bool is_loopback(const IpAddr& a) {
  if (is_ipv4(a)) return a[12] == 127;
  IpAddr one{};
  one[15] = 1;
  return a == one;
}

bool is_link_local6(const IpAddr& a) { return !is_ipv4(a) && a[0] == 0xfe && (a[1] & 0xc0) == 0x80; }

int common_prefix_bits(const IpAddr& a, const IpAddr& b) {
  for (int i = 0; i < 16; ++i)
    if (a[i] != b[i]) return i * 8 + std::countl_zero(static_cast<uint8_t>(a[i] ^ b[i]));
  return 128;
}

}  // namespace

const char* to_string(GidType t) {
  switch (t) {
    case GidType::ib: return "IB";
    case GidType::roce_v1: return "IB/RoCE v1";
    case GidType::roce_v2: return "RoCE v2";
  }
  return "?";
}

Gid ipv6_link_local_from_mac(const MacAddr& mac) {
  Gid g{};
  g[0] = 0xfe;
  g[1] = 0x80;
  // RFC 4291 appendix A: invert the universal/local bit, insert ff:fe.
  g[8] = mac[0] ^ 0x02;
  g[9] = mac[1];
  g[10] = mac[2];
  g[11] = 0xff;
  g[12] = 0xfe;
  g[13] = mac[3];
  g[14] = mac[4];
  g[15] = mac[5];
  return g;
}

uint64_t node_guid_from_mac(const MacAddr& mac) {
  const Gid g = ipv6_link_local_from_mac(mac);
  uint64_t v = 0;
  for (int i = 8; i < 16; ++i) v = (v << 8) | g[i];
  return v;
}

std::string format_guid(uint64_t guid) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%04x:%04x:%04x:%04x", static_cast<unsigned>(guid >> 48),
                static_cast<unsigned>((guid >> 32) & 0xffff),
                static_cast<unsigned>((guid >> 16) & 0xffff), static_cast<unsigned>(guid & 0xffff));
  return buf;
}

std::string format_gid(const Gid& gid) {
  std::string s;
  s.reserve(39);
  char buf[8];
  for (int i = 0; i < 8; ++i) {
    std::snprintf(buf, sizeof buf, i ? ":%02x%02x" : "%02x%02x", gid[2 * i], gid[2 * i + 1]);
    s += buf;
  }
  return s;
}

GidTable::GidTable(const MacAddr& port_mac, std::string netdev, uint32_t capacity)
    : port_mac_(port_mac), netdev_(std::move(netdev)), slots_(std::max<uint32_t>(capacity, 1)) {
  slots_[0] = GidEntry{ipv6_link_local_from_mac(port_mac_), GidType::roce_v2, kNoVlan, port_mac_, netdev_};
}

int GidTable::add(const IpAddr& ip, uint16_t vlan, std::string_view netdev, std::optional<MacAddr> mac) {
  if (is_unspecified(ip) || is_multicast_or_reserved(ip) || is_loopback(ip)) return -EINVAL;
  if (vlan != kNoVlan && (vlan == 0 || vlan >= 4095)) return -EINVAL;
  if (mac && (((*mac)[0] & 1) != 0 || *mac == MacAddr{})) return -EINVAL;
  if (find_impl(ip, vlan) >= 0) return -EEXIST;
  const auto free_slot = std::find_if(slots_.begin(), slots_.end(), [](const auto& s) { return !s; });
  if (free_slot == slots_.end()) return -ENOSPC;
  GidEntry e;
  e.gid = ip;  // an IPv4 address is already in its mapped (GID) form
  e.type = GidType::roce_v2;
  e.vlan = vlan;
  e.mac = mac.value_or(port_mac_);
  if (!netdev.empty())
    e.netdev = netdev;
  else
    e.netdev = vlan == kNoVlan || netdev_.empty() ? netdev_ : netdev_ + "." + std::to_string(vlan);
  *free_slot = std::move(e);
  return static_cast<int>(free_slot - slots_.begin());
}

int GidTable::remove(const IpAddr& ip, uint16_t vlan) {
  const int i = find_impl(ip, vlan);
  if (i < 0) return -ENOENT;
  if (i == 0) return -EBUSY;
  slots_[static_cast<size_t>(i)].reset();
  return 0;
}

const GidEntry* GidTable::at(uint32_t index) const {
  if (index >= slots_.size() || !slots_[index]) return nullptr;
  return &*slots_[index];
}

int GidTable::find(const Gid& gid) const { return find_impl(gid, std::nullopt); }
int GidTable::find(const Gid& gid, uint16_t vlan) const { return find_impl(gid, vlan); }

int GidTable::find_impl(const Gid& gid, std::optional<uint16_t> vlan) const {
  for (size_t i = 0; i < slots_.size(); ++i) {
    const auto& s = slots_[i];
    if (s && s->gid == gid && (!vlan || s->vlan == *vlan)) return static_cast<int>(i);
  }
  return -ENOENT;
}

int GidTable::find_for_destination(const IpAddr& dst) const {
  return find_for_destination_impl(dst, std::nullopt);
}

int GidTable::find_for_destination(const IpAddr& dst, uint16_t vlan) const {
  return find_for_destination_impl(dst, vlan);
}

int GidTable::find_for_destination_impl(const IpAddr& dst, std::optional<uint16_t> vlan) const {
  if (is_unspecified(dst)) return -EINVAL;
  const bool v4 = is_ipv4(dst);
  const bool dst_link_local = is_link_local6(dst);
  // Rank: scope first (global before link-local for a non-link-local IPv6
  // dst), then the common prefix; the lowest index wins ties.
  int best = -ENOENT;
  int best_rank = -1;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const auto& s = slots_[i];
    if (!s || s->type != GidType::roce_v2 || (vlan && s->vlan != *vlan)) continue;
    if (is_ipv4(s->gid) != v4) continue;
    int rank = common_prefix_bits(s->gid, dst);
    if (!v4) {
      const bool ll = is_link_local6(s->gid);
      if (dst_link_local && !ll) continue;
      if (!dst_link_local && !ll) rank += 256;
    }
    if (rank > best_rank) {
      best = static_cast<int>(i);
      best_rank = rank;
    }
  }
  return best;
}

uint32_t GidTable::size() const {
  return static_cast<uint32_t>(std::count_if(slots_.begin(), slots_.end(), [](const auto& s) { return s.has_value(); }));
}

}  // namespace droce::net
