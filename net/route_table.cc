#include "net/route_table.h"

#include <cerrno>
#include <charconv>
#include <cstring>

namespace droce::net {

namespace {

bool is_zero(const IpAddr& a) { return same_ip(a, IpAddr{}); }

bool is_link_local_v6(const IpAddr& a) { return !is_ipv4_mapped(a) && a[0] == 0xfe && (a[1] & 0xc0) == 0x80; }

// One address in either family, in GID form (net/addr.h's parser, on a piece of the text).
bool parse_one(std::string_view text, IpAddr* out) { return parse_ip(std::string(text), out); }

std::string format_one(const IpAddr& a) { return format_ip(a); }

bool parse_uint(std::string_view s, uint64_t max, uint64_t* out) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size() || v > max) return false;
  *out = v;
  return true;
}

std::vector<std::string_view> words(std::string_view s) {
  std::vector<std::string_view> w;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
    size_t j = i;
    while (j < s.size() && s[j] != ' ' && s[j] != '\t') ++j;
    if (j > i) w.push_back(s.substr(i, j - i));
    i = j;
  }
  return w;
}

}  // namespace

bool Route::on_link() const { return is_zero(gateway); }

IpAddr mask_prefix(const IpAddr& ip, uint8_t len) {
  IpAddr out{};
  for (unsigned i = 0; i < 16 && len > 0; ++i) {
    const unsigned take = len >= 8 ? 8 : len;
    out[i] = uint8_t(ip[i] & uint8_t(0xff00u >> take));
    len = uint8_t(len - take);
  }
  return out;
}

bool prefix_matches(const IpAddr& a, const IpAddr& b, uint8_t len) {
  return same_ip(mask_prefix(a, len), mask_prefix(b, len));
}

int parse_address_prefix(std::string_view text, IpAddr* ip, int* prefix_len) {
  const size_t slash = text.find('/');
  IpAddr a;
  if (!parse_one(text.substr(0, slash), &a)) return -EINVAL;
  int len = -1;
  if (slash != std::string_view::npos) {
    uint64_t v;
    const uint64_t max = is_ipv4_mapped(a) ? 32 : 128;
    if (!parse_uint(text.substr(slash + 1), max, &v)) return -EINVAL;
    len = int(v) + (is_ipv4_mapped(a) ? 96 : 0);
  }
  *ip = a;
  *prefix_len = len;
  return 0;
}

int parse_route(std::string_view text, Route* out, std::string* err) {
  const std::vector<std::string_view> w = words(text);
  if (w.empty()) {
    *err = "empty route";
    return -EINVAL;
  }
  Route r;
  size_t i = 1;
  std::string_view dst = w[0];
  bool v4 = true;
  if (dst == "default") {
    // The family comes from the gateway; without one, IPv4.
    r.prefix_len = 96;
    r.prefix = ipv4_mapped(0);
    for (size_t k = 1; k + 1 < w.size(); ++k)
      if (w[k] == "via") {
        IpAddr g;
        if (parse_one(w[k + 1], &g) && !is_ipv4_mapped(g)) {
          v4 = false;
          r.prefix = IpAddr{};
          r.prefix_len = 0;
        }
      }
  } else {
    int len;
    if (parse_address_prefix(dst, &r.prefix, &len) != 0) {
      *err = "not an address or prefix: " + std::string(dst);
      return -EINVAL;
    }
    v4 = is_ipv4_mapped(r.prefix);
    r.prefix_len = uint8_t(len < 0 ? 128 : len);
    if (!same_ip(mask_prefix(r.prefix, r.prefix_len), r.prefix)) {
      *err = "the prefix " + std::string(dst) + " has host bits set";
      return -EINVAL;
    }
  }
  for (; i < w.size(); i += 2) {
    if (i + 1 >= w.size()) {
      *err = "\"" + std::string(w[i]) + "\" needs a value";
      return -EINVAL;
    }
    uint64_t v;
    if (w[i] == "via") {
      if (!parse_one(w[i + 1], &r.gateway)) {
        *err = "not a gateway address: " + std::string(w[i + 1]);
        return -EINVAL;
      }
      if (is_ipv4_mapped(r.gateway) != v4) {
        *err = "the gateway " + std::string(w[i + 1]) + " is not of the prefix's family";
        return -EINVAL;
      }
    } else if (w[i] == "metric" && parse_uint(w[i + 1], UINT32_MAX, &v)) {
      r.metric = uint32_t(v);
    } else if (w[i] == "hoplimit" && parse_uint(w[i + 1], 255, &v) && v > 0) {
      r.hop_limit = uint8_t(v);
    } else {
      *err = "cannot read \"" + std::string(w[i]) + " " + std::string(w[i + 1]) +
             "\" (via ADDRESS, metric N, hoplimit 1..255)";
      return -EINVAL;
    }
  }
  *out = r;
  return 0;
}

std::string format_route(const Route& r) {
  std::string s;
  const bool v4 = is_ipv4_mapped(r.prefix) && r.prefix_len >= 96;
  if ((v4 && r.prefix_len == 96) || (!v4 && r.prefix_len == 0)) {
    s = "default";
  } else {
    s = format_one(r.prefix) + "/" + std::to_string(v4 ? r.prefix_len - 96 : r.prefix_len);
  }
  if (!r.on_link()) s += " via " + format_one(r.gateway);
  if (r.metric != 0) s += " metric " + std::to_string(r.metric);
  if (r.hop_limit != 0) s += " hoplimit " + std::to_string(r.hop_limit);
  return s;
}

int RouteTable::add(const Route& r) {
  if (r.prefix_len > 128) return -EINVAL;
  const bool v4 = is_ipv4_mapped(r.prefix) || (r.prefix_len >= 96 && prefix_matches(r.prefix, ipv4_mapped(0), 96));
  if (v4 && r.prefix_len < 96) return -EINVAL;
  if (!same_ip(mask_prefix(r.prefix, r.prefix_len), r.prefix)) return -EINVAL;
  if (!r.on_link()) {
    if (is_ipv4_mapped(r.gateway) != v4 || is_multicast(r.gateway)) return -EINVAL;
    if (v4 ? (ipv4_of(r.gateway) >> 24) == 127 : same_ip(r.gateway, IpAddr{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}))
      return -EINVAL;
  }
  for (const Route& x : routes_)
    if (same_ip(x.prefix, r.prefix) && x.prefix_len == r.prefix_len && same_ip(x.gateway, r.gateway) &&
        x.metric == r.metric)
      return -EEXIST;
  if (routes_.size() >= kMaxRoutes) return -ENOSPC;
  routes_.push_back(r);
  return 0;
}

int RouteTable::remove(const Route& r) {
  for (auto it = routes_.begin(); it != routes_.end(); ++it)
    if (same_ip(it->prefix, r.prefix) && it->prefix_len == r.prefix_len && same_ip(it->gateway, r.gateway) &&
        it->metric == r.metric) {
      routes_.erase(it);
      return 0;
    }
  return -ENOENT;
}

int RouteTable::add_on_link(const IpAddr& ip, uint8_t prefix_len) {
  Route r;
  r.prefix_len = prefix_len;
  r.prefix = mask_prefix(ip, prefix_len);
  const int rc = add(r);
  return rc == -EEXIST ? 0 : rc;  // two addresses of one subnet
}

int RouteTable::lookup(const IpAddr& dst, NextHop* out) const {
  if (is_zero(dst)) return -EINVAL;
  const bool v4 = is_ipv4_mapped(dst);
  if (is_multicast(dst) || (!v4 && is_link_local_v6(dst))) {
    *out = NextHop{dst, false, kDefaultHopLimit};
    return 0;
  }
  const Route* best = nullptr;
  bool family_has_routes = false;
  for (const Route& r : routes_) {
    const bool rv4 = r.prefix_len >= 96 && prefix_matches(r.prefix, ipv4_mapped(0), 96);
    if (rv4 != v4) continue;  // ::/0 is IPv6's default, not IPv4's
    family_has_routes = true;
    if (!prefix_matches(dst, r.prefix, r.prefix_len)) continue;
    if (best == nullptr || r.prefix_len > best->prefix_len ||
        (r.prefix_len == best->prefix_len && r.metric < best->metric))
      best = &r;
  }
  if (best == nullptr) {
    if (family_has_routes) return -ENETUNREACH;
    *out = NextHop{dst, false, kDefaultHopLimit};
    return 0;
  }
  out->via_gateway = !best->on_link();
  out->ip = out->via_gateway ? best->gateway : dst;
  out->hop_limit = best->hop_limit != 0 ? best->hop_limit : kDefaultHopLimit;
  return 0;
}

}  // namespace droce::net
