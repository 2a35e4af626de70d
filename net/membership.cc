#include "net/membership.h"

#include <algorithm>

#include "core/endian.h"
#include "net/frame_build.h"
#include "net/headers.h"

namespace droce::net {

using core::load_be16;
using core::store_be16;

namespace {

constexpr uint8_t kIpProtoIgmp = 2;
constexpr uint8_t kIpProtoHopByHop = 0;
constexpr uint8_t kIgmpQuery = 0x11;
constexpr uint8_t kIgmpV2Report = 0x16;
constexpr uint8_t kIgmpLeave = 0x17;
constexpr uint8_t kMldQuery = 130;
constexpr uint8_t kMldReport = 131;
constexpr uint8_t kMldDone = 132;
constexpr uint8_t kMldV2Report = 143;
constexpr size_t kIgmpLen = 8;
constexpr size_t kIpv4WithRouterAlert = kIpv4HdrLen + 4;
constexpr size_t kHopByHopLen = 8;
constexpr size_t kMldLen = 24;
constexpr uint64_t kNsPerDecisecond = 100'000'000;
constexpr uint64_t kNsPerMs = 1'000'000;

const IpAddr kAllRouters4 = ipv4_mapped(0xe0000002);  // 224.0.0.2
const IpAddr kAllHosts4 = ipv4_mapped(0xe0000001);    // 224.0.0.1
constexpr IpAddr kAllRouters6 = {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02};
constexpr IpAddr kAllNodes6 = {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01};

// An IGMPv2 message (RFC 2236 2) in an IPv4 packet with the Router Alert option (RFC 2113), TTL 1.
std::vector<uint8_t> igmp_frame(const MembershipConfig& cfg, uint8_t type, const IpAddr& src, const IpAddr& dst,
                                const IpAddr& group) {
  std::vector<uint8_t> f;
  const bool tagged = cfg.vlan != kNoVlan;
  const size_t off = start_frame(f, multicast_mac(dst), cfg.mac, tagged, cfg.vlan & 0xfff, kEtherTypeIpv4,
                                 kIpv4WithRouterAlert + kIgmpLen);
  uint8_t* ip = f.data() + off;
  ip[0] = 0x46;  // version 4, 6 words: the Router Alert option
  ip[1] = 0xc0;  // internetwork control, as Linux sends IGMP
  store_be16(ip + 2, kIpv4WithRouterAlert + kIgmpLen);
  store_be16(ip + 6, kIpv4FlagDf);
  ip[8] = 1;  // TTL
  ip[9] = kIpProtoIgmp;
  std::copy(src.begin() + 12, src.end(), ip + 12);
  std::copy(dst.begin() + 12, dst.end(), ip + 16);
  ip[20] = 0x94;  // Router Alert, copied; length 4; value 0
  ip[21] = 0x04;
  store_be16(ip + 10, inet_checksum(ip, kIpv4WithRouterAlert));
  uint8_t* m = ip + kIpv4WithRouterAlert;
  m[0] = type;
  std::copy(group.begin() + 12, group.end(), m + 4);
  store_be16(m + 2, inet_checksum(m, kIgmpLen));
  return f;
}

// An MLDv1 message (RFC 2710 3) after a Hop-by-Hop header with the Router Alert option
// (RFC 2711, value 0: MLD), hop limit 1.
std::vector<uint8_t> mld_frame(const MembershipConfig& cfg, uint8_t type, const IpAddr& src, const IpAddr& dst,
                               const IpAddr& group) {
  std::vector<uint8_t> f;
  const bool tagged = cfg.vlan != kNoVlan;
  const size_t off = start_frame(f, multicast_mac(dst), cfg.mac, tagged, cfg.vlan & 0xfff, kEtherTypeIpv6,
                                 kIpv6HdrLen + kHopByHopLen + kMldLen);
  uint8_t* ip = f.data() + off;
  ip[0] = 0x60;
  store_be16(ip + 4, kHopByHopLen + kMldLen);
  ip[6] = kIpProtoHopByHop;
  ip[7] = 1;
  std::copy(src.begin(), src.end(), ip + 8);
  std::copy(dst.begin(), dst.end(), ip + 24);
  uint8_t* h = ip + kIpv6HdrLen;
  const uint8_t hbh[kHopByHopLen] = {kIpProtoIcmpv6, 0, 5, 2, 0, 0, 1, 0};  // Router Alert, PadN
  std::copy(hbh, hbh + kHopByHopLen, h);
  uint8_t* m = h + kHopByHopLen;
  m[0] = type;
  std::copy(group.begin(), group.end(), m + 8);
  store_be16(m + 2, static_cast<uint16_t>(~icmpv6_sum(src.data(), dst.data(), m, kMldLen)));
  return f;
}

// RFC 3376 4.1.1 / RFC 3810 5.1.3: a v3 query's code, exponential past 128 (32768 for MLDv2).
uint64_t igmpv3_code(uint8_t c) { return c < 128 ? c : uint64_t((c & 0x0f) | 0x10) << (((c >> 4) & 7) + 3); }
uint64_t mldv2_code(uint16_t c) {
  return c < 32768 ? c : uint64_t((c & 0x0fff) | 0x1000) << (((c >> 12) & 7) + 3);
}

}  // namespace

MembershipReporter::MembershipReporter(const MembershipConfig& cfg) : cfg_(cfg), rng_(cfg.seed | 1) {}

bool MembershipReporter::reportable(const IpAddr& group) {
  if (!is_multicast(group)) return false;
  if (is_ipv4_mapped(group)) return group != kAllHosts4;
  const uint8_t scope = group[1] & 0x0f;
  return scope > 1 && group != kAllNodes6;
}

std::vector<uint8_t> MembershipReporter::report_frame(const IpAddr& src, const IpAddr& group) const {
  return is_ipv4_mapped(group) ? igmp_frame(cfg_, kIgmpV2Report, src, group, group)
                               : mld_frame(cfg_, kMldReport, src, group, group);
}

std::vector<uint8_t> MembershipReporter::leave_frame(const IpAddr& src, const IpAddr& group) const {
  return is_ipv4_mapped(group) ? igmp_frame(cfg_, kIgmpLeave, src, kAllRouters4, group)
                               : mld_frame(cfg_, kMldDone, src, kAllRouters6, group);
}

void MembershipReporter::join(const IpAddr& src, const IpAddr& group, uint64_t now_ns) {
  auto [it, fresh] = members_.try_emplace(Key{group, src});
  if (!fresh || !reportable(group)) return;
  tx_.push_back(report_frame(src, group));
  ++counters_.reports_sent;
  it->second.due_ns = now_ns + cfg_.repeat_ns;
}

void MembershipReporter::leave(const IpAddr& src, const IpAddr& group, uint64_t) {
  if (members_.erase(Key{group, src}) == 0 || !reportable(group)) return;
  tx_.push_back(leave_frame(src, group));
  ++counters_.leaves_sent;
}

void MembershipReporter::poll(uint64_t now_ns) {
  for (auto& [key, m] : members_) {
    if (m.due_ns > now_ns) continue;
    m.due_ns = UINT64_MAX;
    tx_.push_back(report_frame(key.second, key.first));
    ++counters_.reports_sent;
  }
}

uint64_t MembershipReporter::next_deadline_ns() const {
  uint64_t t = UINT64_MAX;
  for (const auto& [key, m] : members_) t = std::min(t, m.due_ns);
  return t;
}

size_t MembershipReporter::drain_tx(std::vector<std::vector<uint8_t>>* out) {
  const size_t n = tx_.size();
  for (auto& f : tx_) out->push_back(std::move(f));
  tx_.clear();
  return n;
}

std::vector<std::pair<IpAddr, IpAddr>> MembershipReporter::groups() const {
  std::vector<std::pair<IpAddr, IpAddr>> out;
  for (const auto& [key, m] : members_) out.emplace_back(key.first, key.second);
  return out;
}

uint64_t MembershipReporter::random_below(uint64_t n) {
  rng_ ^= rng_ << 13;
  rng_ ^= rng_ >> 7;
  rng_ ^= rng_ << 17;
  return n == 0 ? 0 : rng_ % n;
}

void MembershipReporter::on_query(bool v6, const IpAddr& asked, uint64_t max_delay_ns, uint64_t now_ns) {
  const bool general = asked == IpAddr{} || asked == ipv4_mapped(0);
  bool ours = general;
  for (auto& [key, m] : members_) {
    if (is_ipv4_mapped(key.first) == v6 || (!general && key.first != asked) || !reportable(key.first)) continue;
    ours = true;
    const uint64_t due = now_ns + random_below(max_delay_ns + 1);
    m.due_ns = std::min(m.due_ns, due);
  }
  if (ours) ++counters_.queries_seen;
  else ++counters_.frames_ignored;
}

bool MembershipReporter::handle_frame(std::span<const uint8_t> f, uint64_t now_ns) {
  size_t off = 12;
  if (f.size() < off + 2) return false;
  uint16_t type = load_be16(&f[off]);
  if (type == kEtherTypeVlan) {
    off += 4;
    if (f.size() < off + 2) return false;
    type = load_be16(&f[off]);
  }
  off += 2;
  if (type == kEtherTypeIpv4) {
    if (f.size() < off + kIpv4HdrLen || (f[off] >> 4) != 4 || f[off + 9] != kIpProtoIgmp) return false;
    const size_t ihl = size_t(f[off] & 0x0f) * 4;
    const size_t total = load_be16(&f[off + 2]);
    if (ihl < kIpv4HdrLen || total < ihl + kIgmpLen || off + total > f.size()) {
      ++counters_.frames_ignored;
      return true;
    }
    const uint8_t* m = &f[off + ihl];
    const size_t len = total - ihl;
    if (m[0] != kIgmpQuery || inet_checksum(m, len) != 0) {  // a valid sum over the message sums to 0
      ++counters_.frames_ignored;
      return true;
    }
    // v1 (8 bytes, code 0): 10 s; v2: code in tenths; v3 (12 or more): the exponential code.
    const uint64_t tenths = len >= 12 ? igmpv3_code(m[1]) : m[1] == 0 ? 100 : m[1];
    on_query(false, ipv4_mapped(core::load_be32(m + 4)), tenths * kNsPerDecisecond, now_ns);
    return true;
  }
  if (type == kEtherTypeIpv6) {
    if (f.size() < off + kIpv6HdrLen + kHopByHopLen || (f[off] >> 4) != 6 || f[off + 6] != kIpProtoHopByHop)
      return false;
    const uint8_t* ip = &f[off];
    const size_t plen = load_be16(ip + 4);
    const uint8_t* h = ip + kIpv6HdrLen;
    const size_t hlen = (size_t(h[1]) + 1) * 8;
    if (h[0] != kIpProtoIcmpv6) return false;  // another Hop-by-Hop packet: not ours to judge
    if (plen < hlen + kMldLen || off + kIpv6HdrLen + plen > f.size()) {
      ++counters_.frames_ignored;
      return true;
    }
    const uint8_t* m = h + hlen;
    const size_t len = plen - hlen;
    const bool mld = m[0] == kMldQuery || m[0] == kMldReport || m[0] == kMldDone || m[0] == kMldV2Report;
    if (!mld) return false;
    if (m[0] != kMldQuery || icmpv6_sum(ip + 8, ip + 24, m, len) != 0xffff) {
      ++counters_.frames_ignored;
      return true;
    }
    IpAddr asked;
    std::copy(m + 8, m + 24, asked.begin());
    const uint16_t code = load_be16(m + 4);
    on_query(true, asked, (len >= 28 ? mldv2_code(code) : code) * kNsPerMs, now_ns);
    return true;
  }
  return false;
}

}  // namespace droce::net
