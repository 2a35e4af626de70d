#include "net/neighbor.h"

#include <algorithm>
#include <bit>
#include <cerrno>

#include "core/endian.h"
#include "net/frame_build.h"
#include "net/headers.h"

namespace droce::net {

using core::load_be16;
using core::store_be16;

namespace {

constexpr uint32_t kNil = UINT32_MAX;
constexpr uint16_t kArpHtypeEthernet = 1;
constexpr uint16_t kArpOpRequest = 1;
constexpr uint16_t kArpOpReply = 2;
constexpr size_t kNdMinLen = 24;  // type, code, checksum, reserved/flags, target
constexpr size_t kNdLen = kNdMinLen + 8;  // what we send: one link-layer option
constexpr uint8_t kOptSourceLinkLayer = 1;
constexpr uint8_t kOptTargetLinkLayer = 2;
constexpr uint8_t kNaSolicited = 0x40;
constexpr uint8_t kNaOverride = 0x20;
constexpr MacAddr kBroadcastMac = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
constexpr IpAddr kAllNodes = {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01};

// The IPv4 address at v4 (4 wire bytes), in GID form.
IpAddr mapped(const uint8_t* v4) { return ipv4_mapped(core::load_be32(v4)); }

bool is_unspecified(const IpAddr& a) {
  if (is_ipv4_mapped(a)) return a[12] == 0 && a[13] == 0 && a[14] == 0 && a[15] == 0;
  return std::all_of(a.begin(), a.end(), [](uint8_t b) { return b == 0; });
}

bool is_ipv4_broadcast(const IpAddr& a) {
  return is_ipv4_mapped(a) && a[12] == 0xff && a[13] == 0xff && a[14] == 0xff && a[15] == 0xff;
}

bool is_loopback(const IpAddr& a) {
  if (is_ipv4_mapped(a)) return a[12] == 127;
  IpAddr one{};
  one[15] = 1;
  return a == one;
}

bool mac_is_multicast(const MacAddr& m) { return (m[0] & 1) != 0; }
bool mac_is_zero(const MacAddr& m) { return m == MacAddr{}; }

bool is_solicited_node_group(const IpAddr& a) {
  static constexpr uint8_t kPrefix[13] = {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff};
  return std::equal(kPrefix, kPrefix + 13, a.begin());
}

int common_prefix_bits(const IpAddr& a, const IpAddr& b) {
  for (int i = 0; i < 16; ++i)
    if (a[i] != b[i]) return i * 8 + std::countl_zero(static_cast<uint8_t>(a[i] ^ b[i]));
  return 128;
}

MacAddr mac_at(const uint8_t* p) {
  MacAddr m;
  std::copy(p, p + 6, m.begin());
  return m;
}

IpAddr ip_at(const uint8_t* p) {
  IpAddr a;
  std::copy(p, p + 16, a.begin());
  return a;
}

std::vector<uint8_t> build_arp(uint16_t op, const MacAddr& eth_dst, bool tagged, uint16_t tci,
                               const MacAddr& sha, const IpAddr& spa, const MacAddr& tha,
                               const IpAddr& tpa) {
  std::vector<uint8_t> f;
  const size_t off = start_frame(f, eth_dst, sha, tagged, tci, kEtherTypeArp, kArpLen);
  uint8_t* a = f.data() + off;
  store_be16(a + 0, kArpHtypeEthernet);
  store_be16(a + 2, kEtherTypeIpv4);
  a[4] = 6;
  a[5] = 4;
  store_be16(a + 6, op);
  std::copy(sha.begin(), sha.end(), a + 8);
  std::copy(spa.begin() + 12, spa.end(), a + 14);
  std::copy(tha.begin(), tha.end(), a + 18);
  std::copy(tpa.begin() + 12, tpa.end(), a + 24);
  return f;
}

// An NS (flags 0) or NA with one link-layer address option.
std::vector<uint8_t> build_nd(uint8_t type, const MacAddr& eth_dst, const MacAddr& eth_src,
                              bool tagged, uint16_t tci, const IpAddr& src, const IpAddr& dst,
                              uint8_t flags, const IpAddr& target, uint8_t opt_type,
                              const MacAddr& opt_mac) {
  std::vector<uint8_t> f;
  const size_t off = start_frame(f, eth_dst, eth_src, tagged, tci, kEtherTypeIpv6, kIpv6HdrLen + kNdLen);
  uint8_t* ip = f.data() + off;
  ip[0] = 0x60;  // version 6, traffic class 0, flow label 0
  store_be16(ip + 4, kNdLen);
  ip[6] = kIpProtoIcmpv6;
  ip[7] = kNdHopLimit;
  std::copy(src.begin(), src.end(), ip + 8);
  std::copy(dst.begin(), dst.end(), ip + 24);
  uint8_t* m = ip + kIpv6HdrLen;
  m[0] = type;
  m[4] = flags;
  std::copy(target.begin(), target.end(), m + 8);
  m[24] = opt_type;
  m[25] = 1;  // 8 octets
  std::copy(opt_mac.begin(), opt_mac.end(), m + 26);
  store_be16(m + 2, static_cast<uint16_t>(~icmpv6_sum(ip + 8, ip + 24, m, kNdLen)));
  return f;
}

}  // namespace

const char* to_string(NeighborDrop r) {
  static constexpr const char* kNames[] = {
#define DROCE_X(name, text) #name,
      DROCE_NEIGHBOR_DROP_LIST(DROCE_X)
#undef DROCE_X
  };
  const auto i = static_cast<size_t>(r);
  return i < kNeighborDropCount ? kNames[i] : "?";
}

const char* describe(NeighborDrop r) {
  static constexpr const char* kTexts[] = {
#define DROCE_X(name, text) text,
      DROCE_NEIGHBOR_DROP_LIST(DROCE_X)
#undef DROCE_X
  };
  const auto i = static_cast<size_t>(r);
  return i < kNeighborDropCount ? kTexts[i] : "?";
}

IpAddr solicited_node_multicast(const IpAddr& ip) {
  IpAddr g{};
  g[0] = 0xff;
  g[1] = 0x02;
  g[11] = 0x01;
  g[12] = 0xff;
  g[13] = ip[13];
  g[14] = ip[14];
  g[15] = ip[15];
  return g;
}

MacAddr ipv6_multicast_mac(const IpAddr& group) { return multicast_mac(group); }

NeighborTable::NeighborTable(const NeighborConfig& cfg) : cfg_(cfg) {
  // Clamp what would make the schedule meaningless.
  cfg_.max_entries = std::max<uint32_t>(cfg_.max_entries, 1);
  cfg_.max_requests = std::max<uint32_t>(cfg_.max_requests, 1);
  entries_.resize(cfg_.max_entries);
  buckets_.assign(std::bit_ceil(cfg_.max_entries), kNil);
  free_.reserve(cfg_.max_entries);
  for (uint32_t i = cfg_.max_entries; i-- > 0;) free_.push_back(i);
  resolved_since_poll_.reserve(cfg_.max_entries);
  resolved_out_.reserve(cfg_.max_entries);
  failed_out_.reserve(cfg_.max_entries);
}

// ---- local addresses -------------------------------------------------------

int NeighborTable::add_local(const IpAddr& ip, const MacAddr& mac, uint16_t vlan) {
  if (is_unspecified(ip) || is_multicast(ip) || is_loopback(ip) || is_ipv4_broadcast(ip)) return -EINVAL;
  if (mac_is_multicast(mac) || mac_is_zero(mac)) return -EINVAL;
  if (vlan != kNoVlan && (vlan == 0 || vlan >= 4095)) return -EINVAL;
  if (find_local(ip, vlan) != nullptr) return -EEXIST;
  locals_.push_back({ip, mac, vlan});
  return 0;
}

int NeighborTable::remove_local(const IpAddr& ip, uint16_t vlan) {
  for (auto it = locals_.begin(); it != locals_.end(); ++it) {
    if (it->ip == ip && it->vlan == vlan) {
      locals_.erase(it);
      return 0;
    }
  }
  return -ENOENT;
}

bool NeighborTable::is_local(const IpAddr& ip, uint16_t vlan) const {
  return find_local(ip, vlan) != nullptr;
}

const NeighborTable::Local* NeighborTable::find_local(const IpAddr& ip, uint16_t vlan) const {
  for (const Local& l : locals_)
    if (l.ip == ip && l.vlan == vlan) return &l;
  return nullptr;
}

const NeighborTable::Local* NeighborTable::pick_source(const IpAddr& dst, uint16_t vlan) const {
  const Local* best = nullptr;
  int best_bits = -1;
  for (const Local& l : locals_) {
    if (l.vlan != vlan || is_ipv4_mapped(l.ip) != is_ipv4_mapped(dst)) continue;
    const int bits = common_prefix_bits(l.ip, dst);
    if (bits > best_bits) {
      best = &l;
      best_bits = bits;
    }
  }
  return best;
}

std::vector<MacAddr> NeighborTable::multicast_macs() const {
  std::vector<MacAddr> macs{ipv6_multicast_mac(kAllNodes)};
  for (const Local& l : locals_) {
    if (is_ipv4_mapped(l.ip)) continue;
    const MacAddr m = ipv6_multicast_mac(solicited_node_multicast(l.ip));
    if (std::find(macs.begin(), macs.end(), m) == macs.end()) macs.push_back(m);
  }
  return macs;
}

// ---- the cache -------------------------------------------------------------

uint32_t NeighborTable::bucket_of(const NeighborKey& k) const {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (uint8_t b : k.ip) h = (h ^ b) * 0x100000001b3ull;
  h = (h ^ (k.vlan & 0xff)) * 0x100000001b3ull;
  h = (h ^ (k.vlan >> 8)) * 0x100000001b3ull;
  return static_cast<uint32_t>(h ^ (h >> 32)) & static_cast<uint32_t>(buckets_.size() - 1);
}

NeighborTable::Entry* NeighborTable::find_entry(const NeighborKey& k) {
  for (uint32_t i = buckets_[bucket_of(k)]; i != kNil; i = entries_[i].next)
    if (entries_[i].key == k) return &entries_[i];
  return nullptr;
}

const NeighborTable::Entry* NeighborTable::find_entry(const NeighborKey& k) const {
  return const_cast<NeighborTable*>(this)->find_entry(k);
}

NeighborTable::Entry* NeighborTable::insert_entry(const NeighborKey& k) {
  if (free_.empty()) return nullptr;
  const uint32_t i = free_.back();
  free_.pop_back();
  Entry& e = entries_[i];
  e = Entry{};
  e.key = k;
  e.used = true;
  const uint32_t b = bucket_of(k);
  e.next = buckets_[b];
  buckets_[b] = i;
  return &e;
}

void NeighborTable::erase_entry(Entry* e) {
  const auto i = static_cast<uint32_t>(e - entries_.data());
  for (uint32_t* link = &buckets_[bucket_of(e->key)]; *link != kNil; link = &entries_[*link].next) {
    if (*link == i) {
      *link = e->next;
      break;
    }
  }
  e->used = false;
  free_.push_back(i);
}

void NeighborTable::set_deadline(Entry* e, uint64_t t) {
  e->deadline_ns = t;
  next_deadline_ns_ = std::min(next_deadline_ns_, t);
}

NeighborInfo NeighborTable::info_of(const Entry& e) {
  return {e.key, e.state, e.mac, e.requests, e.deadline_ns};
}

std::optional<NeighborInfo> NeighborTable::lookup(const IpAddr& ip, uint16_t vlan) const {
  const Entry* e = find_entry({ip, vlan});
  if (e == nullptr) return std::nullopt;
  return info_of(*e);
}

std::vector<NeighborInfo> NeighborTable::snapshot() const {
  std::vector<NeighborInfo> out;
  for (const Entry& e : entries_)
    if (e.used) out.push_back(info_of(e));
  return out;
}

// ---- resolving -------------------------------------------------------------

ResolveStatus NeighborTable::resolve(const IpAddr& dst, uint64_t now_ns, MacAddr* out, uint16_t vlan) {
  return resolve_with(nullptr, dst, vlan, now_ns, out);
}

ResolveStatus NeighborTable::resolve_from(const IpAddr& src, const IpAddr& dst, uint64_t now_ns,
                                          MacAddr* out, uint16_t vlan) {
  const Local* l = find_local(src, vlan);
  if (l == nullptr || is_ipv4_mapped(src) != is_ipv4_mapped(dst)) {
    ++counters_.resolve_invalid;
    return ResolveStatus::failed;
  }
  return resolve_with(l, dst, vlan, now_ns, out);
}

ResolveStatus NeighborTable::resolve_with(const Local* src, const IpAddr& dst, uint16_t vlan,
                                          uint64_t now_ns, MacAddr* out) {
  if (is_unspecified(dst) || is_loopback(dst) || (vlan != kNoVlan && (vlan == 0 || vlan >= 4095))) {
    ++counters_.resolve_invalid;
    return ResolveStatus::failed;
  }
  if (is_ipv4_broadcast(dst)) {
    *out = kBroadcastMac;
    return ResolveStatus::resolved;
  }
  if (is_multicast(dst)) {
    *out = multicast_mac(dst);
    return ResolveStatus::resolved;
  }
  if (const Local* self = find_local(dst, vlan)) {
    *out = self->mac;
    return ResolveStatus::resolved;
  }

  const NeighborKey key{dst, vlan};
  Entry* e = find_entry(key);
  if (e != nullptr) {
    switch (e->state) {
      case NeighborState::reachable:
        if (now_ns < e->deadline_ns) {
          *out = e->mac;
          return ResolveStatus::resolved;
        }
        ++counters_.aged_out;  // expired before poll() removed it: start again
        break;
      case NeighborState::incomplete:
        return ResolveStatus::pending;
      case NeighborState::failed:
        if (now_ns < e->deadline_ns) return ResolveStatus::failed;
        break;  // hold-down over: start again
    }
  }
  if (src == nullptr) src = pick_source(dst, vlan);
  if (src == nullptr) {
    ++counters_.resolve_invalid;
    return ResolveStatus::failed;
  }
  if (e == nullptr) e = insert_entry(key);
  if (e == nullptr) {
    ++counters_.table_full;
    return ResolveStatus::failed;
  }
  e->state = NeighborState::incomplete;
  e->requests = 0;
  e->src = src->ip;
  e->src_mac = src->mac;
  send_request(e);
  set_deadline(e, now_ns + cfg_.request_interval_ns);
  return ResolveStatus::pending;
}

void NeighborTable::send_request(Entry* e) {
  ++e->requests;  // counts toward the schedule even if the TX queue is full
  const bool tagged = e->key.vlan != kNoVlan;
  const uint16_t tci = tagged ? e->key.vlan : 0;
  if (is_ipv4_mapped(e->key.ip)) {
    if (queue(build_arp(kArpOpRequest, kBroadcastMac, tagged, tci, e->src_mac, e->src, MacAddr{}, e->key.ip)))
      ++counters_.arp.requests_sent;
  } else {
    const IpAddr group = solicited_node_multicast(e->key.ip);
    if (queue(build_nd(kIcmpv6NeighborSolicitation, ipv6_multicast_mac(group), e->src_mac, tagged, tci,
                       e->src, group, 0, e->key.ip, kOptSourceLinkLayer, e->src_mac)))
      ++counters_.nd.requests_sent;
  }
}

NeighborEvents NeighborTable::poll(uint64_t now_ns) {
  resolved_out_.swap(resolved_since_poll_);
  resolved_since_poll_.clear();
  failed_out_.clear();
  if (now_ns >= next_deadline_ns_) {
    uint64_t next = UINT64_MAX;
    for (Entry& e : entries_) {
      if (!e.used) continue;
      if (now_ns >= e.deadline_ns) {
        switch (e.state) {
          case NeighborState::incomplete:
            if (e.requests < cfg_.max_requests) {
              send_request(&e);
              e.deadline_ns = now_ns + cfg_.request_interval_ns;
            } else {
              e.state = NeighborState::failed;
              e.deadline_ns = now_ns + cfg_.failed_hold_ns;
              ++counters_.resolutions_failed;
              failed_out_.push_back(e.key);
            }
            break;
          case NeighborState::reachable:
            ++counters_.aged_out;
            erase_entry(&e);
            continue;
          case NeighborState::failed:
            erase_entry(&e);
            continue;
        }
      }
      next = std::min(next, e.deadline_ns);
    }
    next_deadline_ns_ = next;
  }
  return {resolved_out_, failed_out_};
}

size_t NeighborTable::drain_tx(std::vector<std::vector<uint8_t>>* out) {
  const size_t n = tx_.size();
  for (auto& f : tx_) out->push_back(std::move(f));
  tx_.clear();
  return n;
}

bool NeighborTable::queue(std::vector<uint8_t>&& frame) {
  if (tx_.size() >= cfg_.max_tx_queue) {
    ++counters_.tx_queue_full;
    return false;
  }
  tx_.push_back(std::move(frame));
  return true;
}

// ---- learning --------------------------------------------------------------

bool NeighborTable::learn(const NeighborKey& k, const MacAddr& mac, bool confirm, bool override_mac,
                          uint64_t now_ns) {
  Entry* e = find_entry(k);
  if (e == nullptr) return false;
  if (e->state != NeighborState::reachable) {
    e->state = NeighborState::reachable;
    e->mac = mac;
    set_deadline(e, now_ns + cfg_.reachable_ns);
    if (resolved_since_poll_.size() < resolved_since_poll_.capacity()) resolved_since_poll_.push_back(k);
    ++counters_.cache_updates;
    return true;
  }
  bool changed = false;
  if (mac != e->mac) {
    if (!override_mac) return true;  // RFC 4861 7.2.5: keep the known MAC
    e->mac = mac;
    changed = true;
  }
  if (confirm) {
    set_deadline(e, now_ns + cfg_.reachable_ns);
    changed = true;
  }
  if (changed) ++counters_.cache_updates;
  return true;
}

void NeighborTable::confirm_only(Entry* e, uint64_t now_ns) {
  if (e->state != NeighborState::reachable) return;  // no MAC to confirm
  set_deadline(e, now_ns + cfg_.reachable_ns);
  ++counters_.cache_updates;
}

// ---- receiving -------------------------------------------------------------

bool NeighborTable::drop(NeighborDrop r) {
  ++counters_.dropped[static_cast<size_t>(r)];
  return false;
}

bool NeighborTable::handle_frame(std::span<const uint8_t> frame, uint64_t now_ns) {
  if (frame.size() < kEthHdrLen) return false;
  L2 l2{mac_at(&frame[0]), mac_at(&frame[6]), false, 0, kNoVlan};
  uint16_t ethertype = load_be16(&frame[12]);
  size_t off = kEthHdrLen;
  if (ethertype == kEtherTypeVlan) {
    if (frame.size() < kEthHdrLen + kVlanHdrLen) return false;
    l2.tagged = true;
    l2.tci = load_be16(&frame[14]);
    const uint16_t vid = l2.tci & 0x0fff;
    if (vid == 0x0fff) return false;  // reserved VID
    l2.vlan = vid == 0 ? kNoVlan : vid;  // VID 0: priority tag, untagged
    ethertype = load_be16(&frame[16]);
    off += kVlanHdrLen;
  }
  if (ethertype == kEtherTypeArp) return handle_arp(l2, frame.subspan(off), now_ns);
  if (ethertype == kEtherTypeIpv6) return handle_nd(l2, frame.subspan(off), now_ns);
  return false;
}

bool NeighborTable::handle_arp(const L2& l2, std::span<const uint8_t> arp, uint64_t now_ns) {
  if (arp.size() < kArpLen) return drop(NeighborDrop::truncated_arp);
  const uint8_t* a = arp.data();
  if (load_be16(a) != kArpHtypeEthernet || load_be16(a + 2) != kEtherTypeIpv4 || a[4] != 6 || a[5] != 4)
    return drop(NeighborDrop::bad_arp_format);
  const uint16_t op = load_be16(a + 6);
  if (op != kArpOpRequest && op != kArpOpReply) return drop(NeighborDrop::bad_arp_op);
  const MacAddr sha = mac_at(a + 8);
  const IpAddr spa = mapped(a + 14);
  const IpAddr tpa = mapped(a + 24);
  if (mac_is_multicast(sha) || mac_is_zero(sha)) return drop(NeighborDrop::bad_sender);
  // 0.0.0.0 only in a probe (RFC 5227 2.1.1), which is a request.
  if (is_multicast(spa) || is_ipv4_broadcast(spa) || is_loopback(spa) ||
      (is_unspecified(spa) && op != kArpOpRequest))
    return drop(NeighborDrop::bad_sender);

  const bool request = op == kArpOpRequest;
  ++(request ? counters_.arp.requests_received : counters_.arp.replies_received);

  if (const Local* mine = find_local(spa, l2.vlan)) {
    if (sha != mine->mac) ++counters_.address_conflicts;  // else our own frame, looped back
    return true;
  }
  const bool gratuitous = spa == tpa;
  if (!is_unspecified(spa)) {
    // RFC 826's merge: update an entry we already have. Only a reply to a
    // request (not a gratuitous announcement) confirms reachability.
    const bool known = learn({spa, l2.vlan}, sha, !request && !gratuitous, true, now_ns);
    if (!known && (!request || gratuitous)) ++counters_.unsolicited_ignored;
  }
  if (!request) return true;
  const Local* target = find_local(tpa, l2.vlan);
  if (target == nullptr) {
    if (!gratuitous) ++counters_.not_for_us;
    return true;
  }
  // RFC 826: swap sender and target, fill in our MAC, send to the asker.
  if (queue(build_arp(kArpOpReply, sha, l2.tagged, l2.tci, target->mac, target->ip, sha, spa)))
    ++counters_.arp.replies_sent;
  return true;
}

bool NeighborTable::handle_nd(const L2& l2, std::span<const uint8_t> ip6, uint64_t now_ns) {
  // Recognise ND first: IPv6, ICMPv6 directly after the header, type NS/NA.
  if (ip6.size() < kIpv6HdrLen + 1 || (ip6[0] >> 4) != 6 || ip6[6] != kIpProtoIcmpv6) return false;
  const size_t plen = load_be16(&ip6[4]);
  const uint8_t type = ip6[kIpv6HdrLen];
  if (plen == 0 || (type != kIcmpv6NeighborSolicitation && type != kIcmpv6NeighborAdvertisement)) return false;
  if (plen > ip6.size() - kIpv6HdrLen) return drop(NeighborDrop::bad_ip_length);

  // RFC 4861 7.1.1 (NS) and 7.1.2 (NA).
  const uint8_t* m = ip6.data() + kIpv6HdrLen;
  if (plen < kNdMinLen) return drop(NeighborDrop::truncated_nd);
  if (ip6[7] != kNdHopLimit) return drop(NeighborDrop::bad_hop_limit);
  if (icmpv6_sum(&ip6[8], &ip6[24], m, plen) != 0xffff) return drop(NeighborDrop::bad_checksum);
  if (m[1] != 0) return drop(NeighborDrop::bad_icmp_code);
  const IpAddr src = ip_at(&ip6[8]);
  const IpAddr dst = ip_at(&ip6[24]);
  const IpAddr target = ip_at(m + 8);
  if (is_multicast(target) || is_unspecified(target)) return drop(NeighborDrop::wrong_target);
  std::optional<MacAddr> lladdr;  // source LL option in an NS, target LL option in an NA
  for (size_t o = kNdMinLen; o < plen;) {
    if (plen - o < 2 || m[o + 1] == 0 || size_t{m[o + 1]} * 8 > plen - o)
      return drop(NeighborDrop::bad_nd_option);
    const uint8_t opt = m[o];
    if (opt == kOptSourceLinkLayer || opt == kOptTargetLinkLayer) {
      if (m[o + 1] != 1) return drop(NeighborDrop::bad_nd_option);  // RFC 2464 8: Ethernet is 8 bytes
      const bool wanted = opt == (type == kIcmpv6NeighborSolicitation ? kOptSourceLinkLayer : kOptTargetLinkLayer);
      if (wanted && !lladdr) lladdr = mac_at(m + o + 2);
    }
    o += size_t{m[o + 1]} * 8;  // unknown options are skipped (RFC 4861 4.6)
  }
  if (is_multicast(src)) return drop(NeighborDrop::bad_sender);
  if (lladdr && (mac_is_multicast(*lladdr) || mac_is_zero(*lladdr))) return drop(NeighborDrop::bad_sender);

  if (type == kIcmpv6NeighborSolicitation) {
    const bool dad = is_unspecified(src);
    if (dad && (!is_solicited_node_group(dst) || lladdr)) return drop(NeighborDrop::bad_dad_probe);
    ++counters_.nd.requests_received;
    if (!dad) {
      if (const Local* mine = find_local(src, l2.vlan)) {
        if (lladdr.value_or(l2.src) != mine->mac) ++counters_.address_conflicts;
        return true;
      }
      if (lladdr) learn({src, l2.vlan}, *lladdr, false, true, now_ns);  // RFC 4861 7.2.3
    }
    const Local* t = find_local(target, l2.vlan);
    if (t == nullptr) {
      ++counters_.not_for_us;
      return true;
    }
    // RFC 4861 7.2.4. A DAD probe is answered to all-nodes, unsolicited.
    // Without a source LL option the asker is reached at the frame's
    // Ethernet source (rather than resolving it first).
    const IpAddr& to = dad ? kAllNodes : src;
    const MacAddr eth_to = dad ? ipv6_multicast_mac(kAllNodes) : lladdr.value_or(l2.src);
    const uint8_t flags = dad ? kNaOverride : static_cast<uint8_t>(kNaSolicited | kNaOverride);
    if (queue(build_nd(kIcmpv6NeighborAdvertisement, eth_to, t->mac, l2.tagged, l2.tci, t->ip, to, flags,
                       t->ip, kOptTargetLinkLayer, t->mac)))
      ++counters_.nd.replies_sent;
    return true;
  }

  // Neighbor advertisement.
  const uint8_t flags = m[4];
  if (is_unspecified(src)) return drop(NeighborDrop::bad_sender);
  if ((flags & kNaSolicited) && is_multicast(dst)) return drop(NeighborDrop::bad_na_flags);
  ++counters_.nd.replies_received;
  if (const Local* mine = find_local(target, l2.vlan)) {
    if (lladdr.value_or(l2.src) != mine->mac) ++counters_.address_conflicts;
    return true;
  }
  const NeighborKey key{target, l2.vlan};
  const bool solicited = (flags & kNaSolicited) != 0;
  Entry* e = find_entry(key);
  if (e == nullptr) {
    ++counters_.unsolicited_ignored;  // solicited or not, nobody here asked
  } else if (lladdr) {
    learn(key, *lladdr, solicited, (flags & kNaOverride) != 0, now_ns);
  } else if (solicited) {
    confirm_only(e, now_ns);
  }
  return true;
}

}  // namespace droce::net
