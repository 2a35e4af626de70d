#pragma once
// NeighborTable: ARP (IPv4, RFC 826) and IPv6 neighbour discovery (RFC 4861)
// for droce's own addresses: it answers requests for them and resolves the
// link-layer addresses of next hops for outgoing QPs.
//
// I/O-free, like the transport engine: the caller hands it received frames
// (handle_frame), asks it for next hops (resolve), drives its timers (poll)
// with the time it reads once per loop, and drains the frames it wants sent
// (drain_tx). Tests drive it in virtual time without a port.
//
// Feeding frames. Pass every received frame that is not RoCEv2 (the parser's
// foreign statuses: not_ip, not_udp) to handle_frame: Ethernet II with at most
// one 802.1Q tag (VID 0, a priority tag, counts as untagged); trailing
// Ethernet padding or FCS is ignored. It returns true when the frame was ARP
// or ND (neighbor solicitation / advertisement) that it understood, whatever
// it then did with it (answered, learned, or ignored as not for us); false for
// anything else, including ARP/ND it dropped as malformed (those are counted
// in NeighborCounters::dropped with a reason; other protocols are not counted
// here). An mbuf chain must be made contiguous first (rte_pktmbuf_read into a
// stack buffer: ARP/ND frames are small). It never reads outside `frame`.
//
// Sending frames. Replies and requests are queued as complete Ethernet frames
// (no FCS, not padded to 60 bytes: NICs pad) in plain std::vector<uint8_t>:
// this is control traffic, a few frames per second, so it allocates. The
// caller drains them with drain_tx and copies each into an mbuf. The queue is
// bounded (max_tx_queue); overflow drops the new frame and counts
// tx_queue_full.
//
// Answering. For each configured local address (add_local: IP, MAC, VLAN) it
// answers, on that VLAN only and with the request's 802.1Q tag (PCP and DEI
// kept):
//   - ARP requests for it (RFC 826), ARP probes from 0.0.0.0 included
//     (RFC 5227: the reply, to the prober's MAC, defends the address);
//   - neighbor solicitations for it (RFC 4861 7.2.4) with a solicited,
//     override NA carrying the target link-layer address option, sent to the
//     solicitation's source (Ethernet destination: its source link-layer
//     option if present, else the frame's Ethernet source). A duplicate
//     address detection probe (source ::) is answered to all-nodes ff02::1
//     (33:33:00:00:00:01) with S = 0, O = 1, which tells the prober the
//     address is taken.
// Requests for other addresses are ignored (counted not_for_us). droce does
// not run DAD for its own addresses; a frame from another MAC claiming one of
// them (ARP sender, NA target) is counted as an address conflict and never
// learned.
//
// Validation (dropped and counted, RFC 4861 7.1.1 / 7.1.2 for ND): ARP must be
// Ethernet/IPv4 (htype 1, ptype 0x0800, lengths 6/4) with op request or reply
// and a unicast sender MAC and a usable sender IP; ND messages must have hop
// limit 255 (proof they were not routed), a valid ICMPv6 checksum over the
// pseudo-header, code 0, at least 24 bytes, a non-multicast target, options of
// non-zero length inside the message, and an IPv6 payload length inside the
// frame; a DAD probe must go to a solicited-node group and carry no source
// link-layer option; an NA to a multicast destination must not be solicited.
// IPv6 packets with extension headers before ICMPv6 are not recognised as ND.
//
// Resolving. resolve(dst) answers from the cache, or starts a resolution: a
// broadcast ARP request, or an NS to dst's solicited-node multicast group
// ff02::1:ffXX:XXXX (Ethernet 33:33:ff:XX:XX:XX) with a source link-layer
// option. The entry is pending (incomplete) until an answer arrives; poll()
// repeats the request every request_interval_ns, max_requests requests in all
// (the first plus max_requests - 1 retries), and declares the entry failed
// request_interval_ns after the last one. A failed entry answers `failed`
// for failed_hold_ns (no requests sent), then is forgotten, so the next
// resolve starts again. A resolved entry is reachable for reachable_ns,
// refreshed by each confirmation (an ARP reply, a solicited NA); then it ages
// out and the next resolve starts again. Aging removes cache entries only:
// MACs a caller copied (a QP's address vector) stay as they were.
//
// Cache policy (no poisoning): entries are created only by resolve(). Frames
// about an address that has no entry (a gratuitous ARP, an unsolicited NA, an
// ARP request or NS from a stranger, a reply nobody asked for) never create
// one (counted unsolicited_ignored); frames about an address that has an
// entry update it: any ARP from it (RFC 826's merge), an NS with a source
// link-layer option (RFC 4861 7.2.3), an NA with a target link-layer option
// (an NA without the override flag does not change a known MAC, RFC 4861
// 7.2.5). A pending or failed entry becomes reachable on any such answer.
//
// Failures surface through poll(): it returns the keys that resolved (by
// frames since the previous poll) and the keys that failed during this call,
// so the engine can release or fail the sends parked on them instead of
// waiting for ever. resolve() on a failed entry keeps returning failed until
// the hold-down ends.
//
// Cost: resolve() on a cached entry is a hash lookup with no allocation; a
// miss allocates only the request frame. The table itself (max_entries
// entries) is allocated once, at construction. poll() returns at once when
// no deadline is due (next_deadline_ns()), else scans the table.
//
// Threading: none. One NeighborTable per port, owned by the lcore that
// receives the port's non-RoCE frames; every call comes from that lcore
// (droced forwards configuration to it). now_ns must not decrease.
//
// Errors: configuration calls return 0 or -errno; packets never cause errors,
// only counters.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/counter_table.h"
#include "net/addr.h"
#include "net/headers.h"

namespace droce::net {

inline constexpr size_t kArpLen = 28;  ///< Ethernet/IPv4 ARP packet
inline constexpr uint8_t kIcmpv6NeighborSolicitation = 135;
inline constexpr uint8_t kIcmpv6NeighborAdvertisement = 136;
inline constexpr uint8_t kNdHopLimit = 255;  ///< RFC 4861 7.1: sent and required

#define DROCE_NEIGHBOR_DROP_LIST(X)                                                          \
  X(truncated_arp, "frame ends inside the ARP packet")                                       \
  X(bad_arp_format, "ARP is not Ethernet/IPv4 (htype, ptype, hlen or plen)")                  \
  X(bad_arp_op, "ARP operation is neither request nor reply")                                \
  X(bad_sender, "sender MAC is multicast or zero, or sender IP is unusable")                 \
  X(bad_ip_length, "IPv6 payload length runs past the frame")                                \
  X(truncated_nd, "ND message shorter than 24 bytes")                                        \
  X(bad_hop_limit, "ND hop limit is not 255 (RFC 4861 7.1)")                                 \
  X(bad_checksum, "ICMPv6 checksum is wrong")                                                \
  X(bad_icmp_code, "ICMPv6 code is not 0")                                                   \
  X(wrong_target, "ND target address is multicast or unspecified")                          \
  X(bad_nd_option, "ND option of length 0, past the message, or a bad link-layer length")    \
  X(bad_dad_probe, "NS from :: not to a solicited-node group, or with a source LL option")   \
  X(bad_na_flags, "solicited NA sent to a multicast destination")

enum class NeighborDrop : uint8_t {
#define DROCE_X(name, text) name,
  DROCE_NEIGHBOR_DROP_LIST(DROCE_X)
#undef DROCE_X
};

inline constexpr size_t kNeighborDropCount = 0
#define DROCE_X(name, text) +1
    DROCE_NEIGHBOR_DROP_LIST(DROCE_X)
#undef DROCE_X
    ;

/// The reason's identifier ("bad_checksum") and a sentence saying what it means.
const char* to_string(NeighborDrop r);
const char* describe(NeighborDrop r);

/// One protocol's message counts (valid messages only); what each counts is in
/// kNeighborProtoCounters.
struct NeighborProtoCounters {
  uint64_t requests_sent = 0;
  uint64_t requests_received = 0;
  uint64_t replies_sent = 0;
  uint64_t replies_received = 0;
};

/// NeighborProtoCounters described once (core/counter_table.h); droced shows ARP's and ND's,
/// prefixed arp_ and nd_.
inline constexpr core::Counter<NeighborProtoCounters> kNeighborProtoCounters[] = {
    {"requests_sent", &NeighborProtoCounters::requests_sent, "requests (ARP request, NS) sent to resolve"},
    {"requests_received", &NeighborProtoCounters::requests_received, "valid requests received, for any target"},
    {"replies_sent", &NeighborProtoCounters::replies_sent, "replies (ARP reply, NA) sent"},
    {"replies_received", &NeighborProtoCounters::replies_received, "valid replies received, for any target"},
};
static_assert(core::covers(kNeighborProtoCounters));

/// The neighbour table's counters; what each counts is in kNeighborCounters (and ARP's and
/// ND's own in kNeighborProtoCounters, the drops' reasons in NeighborDrop).
struct NeighborCounters {
  NeighborProtoCounters arp, nd;
  uint64_t not_for_us = 0;
  uint64_t unsolicited_ignored = 0;
  uint64_t cache_updates = 0;
  uint64_t address_conflicts = 0;
  uint64_t resolutions_failed = 0;
  uint64_t aged_out = 0;
  uint64_t table_full = 0;
  uint64_t resolve_invalid = 0;
  uint64_t tx_queue_full = 0;
  uint64_t dropped[kNeighborDropCount] = {};  ///< malformed ARP/ND by reason

  uint64_t drops(NeighborDrop r) const { return dropped[static_cast<size_t>(r)]; }
  uint64_t total_dropped() const {
    uint64_t n = 0;
    for (uint64_t d : dropped) n += d;
    return n;
  }
};

/// NeighborCounters' own counters described once (core/counter_table.h).
inline constexpr core::Counter<NeighborCounters> kNeighborCounters[] = {
    {"resolutions_failed", &NeighborCounters::resolutions_failed, "entries that ran out of requests"},
    {"not_for_us", &NeighborCounters::not_for_us, "requests for addresses we do not own (ignored)"},
    {"unsolicited_ignored", &NeighborCounters::unsolicited_ignored,
     "answers (replies, gratuitous ARPs, NAs) about addresses with no entry (ignored)"},
    {"cache_updates", &NeighborCounters::cache_updates, "entries resolved, confirmed or given a new MAC"},
    {"address_conflicts", &NeighborCounters::address_conflicts, "another MAC claims one of our addresses"},
    {"aged_out", &NeighborCounters::aged_out, "reachable entries that expired"},
    {"table_full", &NeighborCounters::table_full, "resolutions that found no free entry (answered failed)"},
    {"resolve_invalid", &NeighborCounters::resolve_invalid,
     "resolutions of ::, 0.0.0.0, loopback, or with no local source (answered failed)"},
    {"tx_queue_full", &NeighborCounters::tx_queue_full, "frames dropped because the TX queue was full"},
};
static_assert(core::covers(kNeighborCounters, 2 * sizeof(NeighborProtoCounters) + sizeof(NeighborCounters::dropped)));

/// max_entries and max_requests of 0 are taken as 1.
struct NeighborConfig {
  uint32_t max_entries = 1024;                  ///< cache entries (allocated once)
  uint32_t max_requests = 3;                    ///< requests per resolution (>= 1)
  uint64_t request_interval_ns = 1'000'000'000;  ///< between requests, and after the last
  uint64_t reachable_ns = 60'000'000'000;       ///< an answer is trusted this long
  uint64_t failed_hold_ns = 10'000'000'000;     ///< a failure is remembered this long
  uint32_t max_tx_queue = 256;                  ///< frames waiting for drain_tx
};

enum class ResolveStatus : uint8_t { resolved, pending, failed };

/// A neighbour: its address and the VLAN it lives on (kNoVlan: untagged).
struct NeighborKey {
  IpAddr ip{};
  uint16_t vlan = kNoVlan;
  friend bool operator==(const NeighborKey&, const NeighborKey&) = default;
};

enum class NeighborState : uint8_t { incomplete, reachable, failed };

/// A cache entry as seen from outside (lookup, snapshot).
struct NeighborInfo {
  NeighborKey key;
  NeighborState state = NeighborState::incomplete;
  MacAddr mac{};             ///< valid when reachable
  uint32_t requests = 0;     ///< requests sent in the current resolution
  uint64_t deadline_ns = 0;  ///< next request or failure / expiry / end of hold-down
};

/// What poll() reports; the spans stay valid until the next poll() call.
struct NeighborEvents {
  std::span<const NeighborKey> resolved;  ///< became reachable since the previous poll
  std::span<const NeighborKey> failed;    ///< failed in this poll
};

/// The solicited-node multicast group of `ip` (ff02::1:ffXX:XXXX, RFC 4291
/// 2.7.1) and the Ethernet address of an IPv6 multicast group (33:33 and the
/// group's last 32 bits, RFC 2464 7).
IpAddr solicited_node_multicast(const IpAddr& ip);
MacAddr ipv6_multicast_mac(const IpAddr& group);

class NeighborTable {
 public:
  explicit NeighborTable(const NeighborConfig& cfg = {});
  NeighborTable(const NeighborTable&) = delete;
  NeighborTable& operator=(const NeighborTable&) = delete;

  /// Answers for `ip` with `mac` on `vlan` (1..4094, or kNoVlan). -EINVAL for
  /// an unspecified, multicast or loopback address, a multicast MAC or a bad
  /// VLAN; -EEXIST when (ip, vlan) is already local.
  int add_local(const IpAddr& ip, const MacAddr& mac, uint16_t vlan = kNoVlan);
  /// 0, or -ENOENT.
  int remove_local(const IpAddr& ip, uint16_t vlan = kNoVlan);
  bool is_local(const IpAddr& ip, uint16_t vlan = kNoVlan) const;
  /// The multicast MACs the port must accept for ND to work: all-nodes and
  /// the solicited-node group of each local IPv6 address (deduplicated).
  std::vector<MacAddr> multicast_macs() const;

  /// Consumes one received frame; see the header comment.
  bool handle_frame(std::span<const uint8_t> frame, uint64_t now_ns);

  /// The MAC of the on-link next hop `dst` on `vlan`. resolved: *out is set.
  /// pending: a resolution is under way (poll() reports its end). failed:
  /// the resolution failed (within the hold-down), the table is full, dst is
  /// unusable (::, 0.0.0.0, loopback) or `vlan` is not 1..4094 / kNoVlan, or
  /// no local address of dst's family exists on `vlan` to send from. *out is
  /// untouched unless resolved.
  /// Multicast destinations (and 255.255.255.255) map to their MAC at once;
  /// a local address resolves to its own MAC (the caller loops it back).
  /// The request's source is the local address of dst's family on `vlan`
  /// sharing the longest prefix with dst (the first added on a tie).
  ResolveStatus resolve(const IpAddr& dst, uint64_t now_ns, MacAddr* out, uint16_t vlan = kNoVlan);
  /// The same with an explicit source, which must be local on `vlan` (else
  /// failed): a QP's source GID.
  ResolveStatus resolve_from(const IpAddr& src, const IpAddr& dst, uint64_t now_ns, MacAddr* out,
                             uint16_t vlan = kNoVlan);

  /// Sends due retries, fails and ages entries; see NeighborEvents.
  NeighborEvents poll(uint64_t now_ns);
  /// When poll() next has work (UINT64_MAX: none). May be early, never late.
  uint64_t next_deadline_ns() const { return next_deadline_ns_; }

  /// Moves the queued frames to the end of *out; returns how many.
  size_t drain_tx(std::vector<std::vector<uint8_t>>* out);
  size_t tx_queued() const { return tx_.size(); }

  std::optional<NeighborInfo> lookup(const IpAddr& ip, uint16_t vlan = kNoVlan) const;
  std::vector<NeighborInfo> snapshot() const;  ///< every entry (for `droce` status)
  const NeighborCounters& counters() const { return counters_; }
  const NeighborConfig& config() const { return cfg_; }

 private:
  struct Local {
    IpAddr ip;
    MacAddr mac;
    uint16_t vlan;
  };
  struct Entry {
    NeighborKey key;
    IpAddr src{};      ///< the request's source (kept for retries)
    MacAddr src_mac{};
    MacAddr mac{};
    NeighborState state = NeighborState::incomplete;
    bool used = false;
    uint32_t requests = 0;
    uint64_t deadline_ns = 0;
    uint32_t next = 0;  ///< hash chain
  };
  struct L2 {
    MacAddr dst, src;
    bool tagged;
    uint16_t tci;
    uint16_t vlan;  ///< kNoVlan when untagged or priority-tagged
  };

  bool handle_arp(const L2& l2, std::span<const uint8_t> arp, uint64_t now_ns);
  bool handle_nd(const L2& l2, std::span<const uint8_t> ip6, uint64_t now_ns);
  bool drop(NeighborDrop r);

  const Local* find_local(const IpAddr& ip, uint16_t vlan) const;
  const Local* pick_source(const IpAddr& dst, uint16_t vlan) const;
  ResolveStatus resolve_with(const Local* src, const IpAddr& dst, uint16_t vlan, uint64_t now_ns,
                             MacAddr* out);

  uint32_t bucket_of(const NeighborKey& k) const;
  Entry* find_entry(const NeighborKey& k);
  const Entry* find_entry(const NeighborKey& k) const;
  Entry* insert_entry(const NeighborKey& k);
  void erase_entry(Entry* e);
  void set_deadline(Entry* e, uint64_t t);
  static NeighborInfo info_of(const Entry& e);

  /// An answer about `k` carrying `mac`. confirm: it proves reachability
  /// (refreshes the expiry); override: it may replace a known MAC.
  /// False when `k` has no entry (nothing learned).
  bool learn(const NeighborKey& k, const MacAddr& mac, bool confirm, bool override_mac,
             uint64_t now_ns);
  /// Confirms a reachable entry without a MAC (an NA with S and no option).
  void confirm_only(Entry* e, uint64_t now_ns);

  void send_request(Entry* e);
  bool queue(std::vector<uint8_t>&& frame);  ///< false: queue full (counted)

  NeighborConfig cfg_;
  NeighborCounters counters_;
  std::vector<Local> locals_;
  std::vector<Entry> entries_;
  std::vector<uint32_t> buckets_;  ///< heads of hash chains (kNil: empty)
  std::vector<uint32_t> free_;     ///< unused entry indexes
  std::vector<std::vector<uint8_t>> tx_;
  std::vector<NeighborKey> resolved_since_poll_, resolved_out_, failed_out_;
  uint64_t next_deadline_ns_ = UINT64_MAX;
};

}  // namespace droce::net
