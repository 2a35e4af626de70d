#pragma once
// XdpFilter: droce's XDP program (net/xdp/droce_xdp.bpf.c) on a netdev droce
// shares with the kernel, seen from droced.
//
// DPDK's af_xdp PMD loads the program and attaches it (its xdp_prog devarg) and
// fills the program's xsks_map with its sockets; the program sends only RoCEv2
// for droce's addresses to droce and passes everything else to the kernel. What
// is left is telling the program which addresses are droce's: XdpFilter finds
// the program attached to the netdev (bpf_xdp_query_id), and among its maps the
// address map and the counters, by name; set_addresses() then keeps the address
// map equal to droce's GIDs (the GID table's addresses, as they follow the
// netdev's).
//
// On net_af_packet nothing loads the program, and nothing needs to redirect: the
// PMD's socket is a tap and gets every frame. attach_tc() loads the object's
// droce_tc program itself and attaches it to the netdev's TC ingress (a clsact
// qdisc, made if missing), where it drops RoCEv2 for droce's addresses after the
// tap took its copy, so the kernel does not run IP and UDP receive on frames
// only droce wants. The filter has a fixed handle and priority and replaces one
// left by a droced that crashed; it is detached when the XdpFilter goes (the
// clsact qdisc stays: removing it would take other programs' filters along). Its counters: redirected = dropped at TC
// after the tap.
//
// object_path() says where the compiled program is: $DROCE_XDP_PROG if set, else
// the build tree's copy when it exists, else the installed one.
//
// Threading: none; control path. Needs CAP_SYS_ADMIN / CAP_BPF (as the PMD does).
// Open it in the netdev's namespace. Errors: -errno (ENOENT: no program, or not
// droce's, on the netdev).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/counter_table.h"
#include "core/unix_socket.h"

struct bpf_object;  // libbpf's
#include "net/addr.h"

namespace droce::net {

/// What each counts is in kXdpFilterCounters.
struct XdpFilterCounters {
  uint64_t redirected = 0;
  uint64_t not_ours = 0;
  uint64_t passed = 0;
};

/// XdpFilterCounters described once (core/counter_table.h).
inline constexpr core::Counter<XdpFilterCounters> kXdpFilterCounters[] = {
    {"redirected", &XdpFilterCounters::redirected, "RoCEv2 frames sent to droce's sockets"},
    {"roce_not_ours", &XdpFilterCounters::not_ours,
     "RoCEv2 frames for addresses droce does not own (passed to the kernel)"},
    {"passed_to_kernel", &XdpFilterCounters::passed, "all frames passed to the kernel, roce_not_ours included"},
};
static_assert(core::covers(kXdpFilterCounters));

class XdpFilter {
 public:
  /// The compiled program droced gives the PMD (see the header).
  static std::string object_path();
  /// Finds droce's program on `ifname` and its maps. -ENOENT when the netdev has no
  /// program or one without droce's maps.
  static int open(const std::string& ifname, std::unique_ptr<XdpFilter>* out);

  /// The name of the XDP program attached to `ifname` ("" when none, or unreadable): a
  /// "droce_xdp" found before droced attached its own is a crashed droced's.
  static std::string attached_program(const std::string& ifname);

  /// Loads droce_tc from object_path() and attaches it to `ifname`'s TC ingress
  /// (see the header). -errno; the netdev is left as it was on failure.
  static int attach_tc(const std::string& ifname, std::unique_ptr<XdpFilter>* out);
  ~XdpFilter();
  XdpFilter(const XdpFilter&) = delete;
  XdpFilter& operator=(const XdpFilter&) = delete;

  /// Makes the address map hold exactly `gids` (duplicates ignored). 0 or -errno.
  int set_addresses(const std::vector<IpAddr>& gids);
  /// The program's counters summed over CPUs. 0 or -errno.
  int counters(XdpFilterCounters* out) const;
  uint32_t program_id() const { return prog_id_; }
  /// The TC ingress filter of attach_tc(), not the XDP program the PMD attached.
  bool on_tc() const { return tc_ifindex_ != 0; }

 private:
  XdpFilter() = default;
  uint32_t prog_id_ = 0;
  // attach_tc: the loaded object and where its filter is (ifindex 0: none).
  ::bpf_object* object_ = nullptr;
  int tc_ifindex_ = 0;
  core::Fd addrs_;
  core::Fd stats_;
};

}  // namespace droce::net
