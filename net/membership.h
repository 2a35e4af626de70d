#pragma once
// Multicast group membership on the wire, host side: IGMPv2 (RFC 2236) for IPv4 groups and
// MLDv1 (RFC 2710) for IPv6 ones, for the groups droce's UD QPs joined through rdma_cm (issue
// #15). RoCE multicast has no protocol of its own: a switch learns where a group's members are
// from these reports (IGMP/MLD snooping), as it does for the kernel's rxe, whose join calls
// ip_mc_inc_group on its netdev. droced's port has no kernel interface, so droced reports.
//
// What a host does, and this class does, I/O-free:
//  - join(): an unsolicited report at once and a second one later (the robustness of RFC 2236
//    3 / RFC 2710 4: a lost report is repeated), per (source address, group);
//  - leave(): a Leave Group (IGMP, to 224.0.0.2) or Done (MLD, to ff02::2);
//  - handle_frame(): a query (general, or for one of our groups) schedules a report for each
//    group it asks about at a random delay within its Max Response Time; a group already due
//    earlier keeps its time. IGMPv3 and MLDv2 queries are answered as v2/v1 hosts answer them.
//    Reports from other hosts do not suppress ours (a snooping switch wants every member's).
//  - poll() sends what is due; drain_tx() hands the frames over.
// The all-hosts group 224.0.0.1, all-nodes ff02::1, and node-local IPv6 scopes are never
// reported (RFC 2236 6, RFC 2710 5).
//
// Threading: none of its own; droced keeps it beside the neighbour table, under its lock.

#include <cstdint>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include "core/counter_table.h"
#include "net/addr.h"
#include "net/neighbor.h"

namespace droce::net {

struct MembershipConfig {
  MacAddr mac{};                ///< the port's
  uint16_t vlan = kNoVlan;      ///< frames go tagged when set (priority 0)
  uint64_t repeat_ns = 1'000'000'000;  ///< the second unsolicited report (Linux's 1 s)
  uint64_t seed = 1;            ///< query response delays
};

/// What each counts is in kMembershipCounters.
struct MembershipCounters {
  uint64_t reports_sent = 0;
  uint64_t leaves_sent = 0;
  uint64_t queries_seen = 0;
  uint64_t frames_ignored = 0;
};

/// MembershipCounters described once (core/counter_table.h).
inline constexpr core::Counter<MembershipCounters> kMembershipCounters[] = {
    {"reports_sent", &MembershipCounters::reports_sent, "IGMP/MLD membership reports sent"},
    {"leaves_sent", &MembershipCounters::leaves_sent, "IGMP Leave Group / MLD Done sent"},
    {"queries_seen", &MembershipCounters::queries_seen, "valid queries (general or for a group of ours)"},
    {"frames_ignored", &MembershipCounters::frames_ignored, "IGMP/MLD that is not a query for us, or malformed"},
};
static_assert(core::covers(kMembershipCounters));

class MembershipReporter {
 public:
  explicit MembershipReporter(const MembershipConfig& cfg = {});

  /// `src` (a local address of the group's family) joins `group`. Joining again is a no-op.
  void join(const IpAddr& src, const IpAddr& group, uint64_t now_ns);
  /// Sends the leave for (src, group) if it was joined.
  void leave(const IpAddr& src, const IpAddr& group, uint64_t now_ns);
  /// A received frame (Ethernet first). True when it was IGMP or MLD (consumed, counted).
  bool handle_frame(std::span<const uint8_t> frame, uint64_t now_ns);
  /// Queues the reports due by now.
  void poll(uint64_t now_ns);
  /// When poll() next has work; UINT64_MAX for none.
  uint64_t next_deadline_ns() const;

  /// Moves the queued frames to the end of *out; returns how many.
  size_t drain_tx(std::vector<std::vector<uint8_t>>* out);
  size_t tx_queued() const { return tx_.size(); }

  /// The joined groups and the address each is reported from.
  std::vector<std::pair<IpAddr, IpAddr>> groups() const;
  const MembershipCounters& counters() const { return counters_; }

  /// True for groups that are reported at all (not all-hosts/all-nodes, not node-local).
  static bool reportable(const IpAddr& group);

  /// The frames themselves (for tests and `droce decode`-style checks).
  std::vector<uint8_t> report_frame(const IpAddr& src, const IpAddr& group) const;
  std::vector<uint8_t> leave_frame(const IpAddr& src, const IpAddr& group) const;

 private:
  struct Member {
    uint64_t due_ns = UINT64_MAX;  ///< next report, UINT64_MAX: none scheduled
  };
  using Key = std::pair<IpAddr, IpAddr>;  ///< (group, src)
  void on_query(bool v6, const IpAddr& asked, uint64_t max_delay_ns, uint64_t now_ns);
  uint64_t random_below(uint64_t n);

  MembershipConfig cfg_;
  std::map<Key, Member> members_;
  std::vector<std::vector<uint8_t>> tx_;
  MembershipCounters counters_;
  uint64_t rng_;
};

}  // namespace droce::net
