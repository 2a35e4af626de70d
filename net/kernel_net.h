#pragma once
// KernelNet: the kernel's view of the network, for a droced that shares a netdev
// with the kernel (the rxe model: `rdma link add rxe0 type rxe netdev eth0`).
// The kernel's rxe asks the kernel for each QP's route and neighbour
// (rxe_net.c: ip_route_output_key, dst_neigh_lookup) and builds its GID table
// from the netdev's addresses; droced asks the same questions over rtnetlink:
//   - routes: RTM_GETROUTE for the destination, from the QP's source address,
//     out of the netdev: the gateway if any (whatever `ip route` and `ip rule`
//     say: several subnets, gateways, policy), and the route's hop limit;
//   - neighbours: RTM_GETNEIGH for the next hop on the netdev; when the kernel has
//     no usable entry, RTM_NEWNEIGH with NTF_USE makes it resolve (ARP / ND sent by
//     the kernel, as for its own traffic), and the answer is read again later;
//   - addresses: an RTM_GETADDR dump of the netdev at start, then RTM_NEWADDR /
//     RTM_DELADDR on RTNLGRP_IPV4_IFADDR / RTNLGRP_IPV6_IFADDR while droced runs
//     (the GID table follows them, as rxe's does). IPv6 addresses still in
//     duplicate address detection (IFA_F_TENTATIVE) or that failed it
//     (IFA_F_DADFAILED) are not usable yet: they are reported as absent until the
//     kernel says otherwise.
//
// The message codec (build_* and parse_*) is I/O-free and tested with crafted
// messages; KernelNet adds the two sockets. Both sockets belong to the network
// namespace of the thread that opens them (netlink sockets stay in the namespace
// they were made in), so open KernelNet where the netdev lives.
//
// Threading: a KernelNet is used by one thread at a time (droced: under the
// CoreGroup's neighbour lock). The requests are synchronous (a send and a
// receive with a timeout of kRequestTimeoutMs): control path only, never per
// packet. Errors: -errno (ENODEV: no such netdev; ENETUNREACH / EHOSTUNREACH: the
// kernel has no route; ETIMEDOUT: the kernel did not answer).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/counter_table.h"
#include "core/unix_socket.h"
#include "net/addr.h"
#include "net/neighbor.h"
#include "net/route_table.h"

namespace droce::net {

/// What RTM_GETROUTE answered.
struct KernelRoute {
  int oif = 0;              ///< the netdev the route leaves by
  IpAddr gateway{};         ///< all-zero: on link
  IpAddr prefsrc{};         ///< the kernel's preferred source (all-zero if none)
  uint8_t hop_limit = 0;    ///< RTAX_HOPLIMIT, 0 when the route sets none
  uint8_t type = 0;         ///< RTN_UNICAST, RTN_LOCAL, RTN_UNREACHABLE, ...
};

/// One neighbour entry (RTM_NEWNEIGH, as a reply or an event).
struct KernelNeighbor {
  int ifindex = 0;
  IpAddr ip{};
  uint16_t state = 0;  ///< NUD_* bits
  bool has_lladdr = false;
  MacAddr lladdr{};
};

/// One address message (RTM_NEWADDR / RTM_DELADDR).
struct KernelAddress {
  int ifindex = 0;
  IpAddr ip{};          ///< GID form
  uint8_t prefix_len = 0;  ///< in the address's own family (24, 64)
  uint32_t flags = 0;   ///< IFA_F_* (IFA_FLAGS when present)
  bool added = true;    ///< RTM_NEWADDR; false: RTM_DELADDR
  /// Present and usable: added, not tentative, not DAD-failed.
  bool usable() const;
};

/// One link message (RTM_NEWLINK / RTM_DELLINK): the netdev's state as the kernel saw it then.
struct KernelLink {
  int ifindex = 0;
  /// Administratively up and running (IFF_UP and IFF_RUNNING: carrier, operstate up), as
  /// the kernel's rxe judges a netdev's port active; false for RTM_DELLINK.
  bool up = false;
};

/// What the event socket held: address changes and link states, this netdev's only, in order.
struct KernelEvents {
  std::vector<KernelAddress> addresses;
  std::vector<KernelLink> links;
};

// ---- the codec (I/O-free) ----
/// Each build_* writes one request into `buf` (at least kRequestBufferSize bytes)
/// and returns its length.
inline constexpr size_t kRequestBufferSize = 128;
size_t build_route_get(uint8_t* buf, uint32_t seq, const IpAddr& dst, const IpAddr& src, int oif);
size_t build_neigh_get(uint8_t* buf, uint32_t seq, int ifindex, const IpAddr& ip);
/// RTM_NEWNEIGH, NLM_F_CREATE, NTF_USE: "resolve this now" (the kernel's neigh_event_send).
size_t build_neigh_use(uint8_t* buf, uint32_t seq, int ifindex, const IpAddr& ip);
/// RTM_GETADDR dump of both families.
size_t build_addr_dump(uint8_t* buf, uint32_t seq);

/// The outcome of parsing one netlink message.
enum class NlParse : uint8_t {
  ok,          ///< *out filled
  error,       ///< NLMSG_ERROR with a non-zero error: *err is -errno
  ack,         ///< NLMSG_ERROR with error 0
  done,        ///< NLMSG_DONE (end of a dump)
  other,       ///< a message of another type (ignored)
  malformed,   ///< lengths that do not add up
};

/// Walks the messages in `buf` (a datagram from the kernel), calling f(header
/// type, message) for each; false when the lengths do not add up.
bool for_each_message(std::span<const uint8_t> buf,
                      const std::function<void(uint16_t type, std::span<const uint8_t> msg)>& f);
NlParse parse_route(std::span<const uint8_t> msg, KernelRoute* out, int* err);
NlParse parse_neigh(std::span<const uint8_t> msg, KernelNeighbor* out, int* err);
NlParse parse_addr(std::span<const uint8_t> msg, KernelAddress* out, int* err);
NlParse parse_link(std::span<const uint8_t> msg, KernelLink* out, int* err);

/// What each counts is in kKernelNetCounters.
struct KernelNetCounters {
  uint64_t route_queries = 0;
  uint64_t route_failures = 0;
  uint64_t neigh_queries = 0;
  uint64_t neigh_triggers = 0;
  uint64_t neigh_failures = 0;
  uint64_t address_events = 0;
  uint64_t link_events = 0;
  uint64_t malformed = 0;
};

/// KernelNetCounters described once (core/counter_table.h).
inline constexpr core::Counter<KernelNetCounters> kKernelNetCounters[] = {
    {"route_queries", &KernelNetCounters::route_queries, "routes asked of the kernel (RTM_GETROUTE)"},
    {"route_failures", &KernelNetCounters::route_failures, "no route, or one that leaves by another netdev"},
    {"neigh_queries", &KernelNetCounters::neigh_queries, "neighbours asked of the kernel (RTM_GETNEIGH)"},
    {"neigh_triggers", &KernelNetCounters::neigh_triggers, "NTF_USE sent: the kernel resolves"},
    {"neigh_failures", &KernelNetCounters::neigh_failures, "FAILED entries, or no answer in time"},
    {"address_events", &KernelNetCounters::address_events, "RTM_NEWADDR / RTM_DELADDR for the netdev"},
    {"link_events", &KernelNetCounters::link_events, "RTM_NEWLINK / RTM_DELLINK for the netdev"},
    {"malformed", &KernelNetCounters::malformed, "messages whose lengths did not add up (dropped)"},
};
static_assert(core::covers(kKernelNetCounters));

class KernelNet {
 public:
  static constexpr int kRequestTimeoutMs = 1000;
  /// How long a next hop may stay unresolved before resolve() says failed: the
  /// kernel's own default (3 probes a second apart) and a second more.
  static constexpr uint64_t kResolveTimeoutNs = 4'000'000'000;
  /// How often resolve() asks the kernel again about a pending next hop.
  static constexpr uint64_t kRequeryNs = 5'000'000;

  /// Opens both sockets for `ifname` in the calling thread's namespace. -ENODEV
  /// when the namespace has no such netdev.
  static int open(const std::string& ifname, std::unique_ptr<KernelNet>* out);

  int ifindex() const { return ifindex_; }
  const std::string& ifname() const { return ifname_; }

  /// The route to `dst` from `src` (all-zero: any) out of the netdev, as a next
  /// hop; the hop limit is the route's, else kDefaultHopLimit. -ENETUNREACH when the
  /// kernel has no route, or its route leaves by another netdev.
  int route(const IpAddr& dst, const IpAddr& src, NextHop* out);
  /// The MAC of the on-link next hop `ip`: resolved (*mac set), pending (the
  /// kernel is resolving; call again), failed (the kernel gave up, or nothing came
  /// within kResolveTimeoutNs). Multicast maps at once. Asks the kernel at most once
  /// per kRequeryNs for one pending next hop.
  ResolveStatus neighbor(const IpAddr& ip, uint64_t now_ns, MacAddr* mac);
  /// When a pending next hop is next worth asking about (UINT64_MAX: none pending).
  /// Forgets next hops nobody asked about for kAbandonedNs (a client that gave up, or
  /// went away): they would otherwise keep the caller from ever sleeping.
  uint64_t next_deadline_ns(uint64_t now_ns);
  static constexpr uint64_t kAbandonedNs = 50'000'000;
  size_t pending() const { return pending_.size(); }

  /// Every address of the netdev now (a dump).
  int addresses(std::vector<KernelAddress>* out);
  /// The event socket (non-blocking; readable when address or link messages wait) and
  /// what it holds, for this netdev only, appended to *out. -errno on a socket error
  /// (-ENOBUFS: events were lost; read the tables again).
  int event_fd() const { return events_.get(); }
  int read_events(KernelEvents* out);

  const KernelNetCounters& counters() const { return counters_; }

 private:
  KernelNet() = default;
  /// Sends one request and gives each reply message to f until the ack, the
  /// dump's end or an error. 0 or -errno (the kernel's, or ETIMEDOUT).
  int request(const uint8_t* req, size_t len,
              const std::function<void(uint16_t type, std::span<const uint8_t> msg)>& f);

  struct Pending {
    uint64_t first_ns = 0;
    uint64_t asked_ns = 0;
  };
  struct IpHash {
    size_t operator()(const IpAddr& a) const;
  };

  std::string ifname_;
  int ifindex_ = 0;
  core::Fd requests_;
  core::Fd events_;
  uint32_t seq_ = 1;
  std::unordered_map<IpAddr, Pending, IpHash> pending_;
  KernelNetCounters counters_;
};

}  // namespace droce::net
