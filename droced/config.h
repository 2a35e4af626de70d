#pragma once
// droced's configuration: command-line flags, and the same keys in a
// configuration file (`--config FILE`; one `key = value` per line, `#`
// comments; flags given on the command line win). docs/droced.md lists them.

#include <cstdint>
#include <string>
#include <vector>

#include "net/addr.h"
#include "rocev2/dcqcn.h"

namespace droce::droced {

struct DaemonConfig {
  std::string name = "droce0";       ///< the device name clients see
  std::string run_dir = "/run/droce";  ///< where <name>.sock lives ($DROCE_RUN_DIR)
  std::string port;                  ///< DPDK devargs ("net_memif0,role=server,socket=/tmp/m.sock")
  std::vector<std::string> addresses;  ///< IPv4 / IPv6 addresses of this host on the port ("A" or "A/LEN")
  /// Own-address mode: routes as `ip route` writes them ("10.2.0.0/16 via 10.1.0.1").
  std::vector<std::string> routes;
  /// Shared-NIC mode (the rxe model): the kernel netdev droce shares. Then the port is
  /// `link` on it, the GIDs are the netdev's addresses and next hops the kernel's.
  std::string netdev;
  std::string link = "af_xdp";
  /// With netdev: K=V options added to the link's device string (packet's frames=, a PMD's devargs).
  std::string link_args;
  uint16_t vlan = net::kNoVlan;      ///< 802.1Q VLAN of the addresses (none by default)
  uint16_t mtu = 0;                  ///< Ethernet MTU to set (0: the port's)
  /// The poll cores (EAL lcores), one worker each; the first is EAL's main
  /// lcore (worker 0, which also serves the control socket).
  std::vector<unsigned> lcores = {0};
  unsigned memory_mb = 512;          ///< EAL memory without hugepages
  unsigned mbufs = 16384;            ///< the port's mbuf pool
  uint32_t max_qps = 16384;
  uint32_t queue_depth = 1024;       ///< port RX/TX descriptors
  /// How a worker waits for work (docs/droced.md, "Waking up"): "poll" never
  /// sleeps (it owns its core); "event" spins briefly after work, then blocks
  /// on its events; "auto" polls on a core the kernel keeps for it (isolcpus),
  /// else events.
  std::string poll_mode = "auto";
  /// Event mode: busy-poll this long after the last work before blocking.
  /// kAutoSpin: adaptive (kMinSpinUs..kMaxSpinUs, from how soon work came back).
  uint64_t idle_spin_us = kAutoSpin;
  static constexpr uint64_t kAutoSpin = UINT64_MAX;
  uint32_t cm_channels_per_process = 4096;  ///< rdma_cm event channels one process may hold
  uint64_t max_sleep_us = 1000;      ///< longest sleep on a port that cannot wake us (memif)
  /// Event mode: the workers' nice value (setpriority; needs CAP_SYS_NICE to
  /// go below 0, else it stays as it was). A woken worker then preempts a
  /// program spinning on the same CPU at once instead of after a scheduler
  /// slice, as an interrupt handler would; it blocks when idle, so it takes
  /// nothing from others then.
  int event_nice = -10;
  /// Event mode: where a worker's thread runs. "lcore": on its lcore's CPU, as
  /// EAL pins it (both droced of one machine then share CPU 0 with their default
  /// --lcores, and the programs they serve get the other CPUs, as a NIC's
  /// interrupts are steered to one CPU); "any": wherever the scheduler puts it;
  /// "auto": on the lcore's CPU while the worker is mostly idle, anywhere while
  /// it is busy most of the time (it then needs a CPU of its own more than it
  /// needs to stay out of its programs' way). Measured on 2 vCPUs (issue #13,
  /// docs/droced.md "Waking up"): pinned, ib_write_lat 64 B is 13 us typical
  /// against 18-21 us and 1 QP of 64 B WRITEs 1.7-1.8 M msg/s against 1.0-1.3;
  /// but 64 QPs, which keep the daemons busy, make 1.3 M msg/s pinned against
  /// 3.4 anywhere.
  std::string event_affinity = "auto";
  /// Event mode: the workers' scheduling policy. "rr": SCHED_RR at priority 1
  /// (needs CAP_SYS_NICE; refused, the worker stays at "other" with a warning),
  /// above every normal program, as the kernel's rxe runs in softirq above them:
  /// a worker preempted when it wakes its peer, or woken while a program spins on
  /// its CPU, runs again at once instead of after that program's slice; after 2 ms
  /// without sleeping it goes normal until it next blocks (RealtimeBudget), and
  /// stuck on a full ring it blocks for its peer (Worker::block_stuck). "other":
  /// the normal policy, at event_nice. "auto" (the default): rr where the machine
  /// allows it, else other (said at INFO). Measured on 2 vCPUs (docs/droced.md
  /// "Waking up"): ib_write_lat 64 B p99.9 2.1-2.5 ms with "other" (a runnable
  /// worker behind perftest's spinning client for a whole slice), 0.1-0.8 ms with
  /// "rr"; 64 KiB alike since 2e73a52 and the commit after it.
  std::string event_policy = "auto";
  std::vector<std::string> eal_args;  ///< passed through to EAL
  std::string log_level;             ///< EAL --log-level for droce.* (e.g. "debug")
  /// Where the sysfs-shaped tree libibverbs reads goes (programs run with
  /// SYSFS_PATH=<it>; `droce exec` sets that). Empty: <run_dir>/sys; "none": no tree.
  std::string sysfs_root;
  /// Make /dev/infiniband/<uverbs> (a char node with /dev/full's numbers)
  /// when running as root and it is missing. It stays after exit (an alias of
  /// /dev/full, perhaps shared with another droced of the same name).
  bool dev_node = true;
  /// A lossy link for tests and labs: each received RoCE frame (from the port
  /// or looped back) is discarded with this probability, in parts per million:
  /// fault rule 1 (droced/fault_stage.h). 0: none.
  uint32_t drop_ppm = 0;
  uint64_t drop_seed = 1;  ///< the rule's seed (each core derives its own dice from it)
  /// Where to serve the counters as OpenMetrics (`GET /metrics`, droced/metrics.h):
  /// "ADDRESS:PORT" ("[V6]:PORT"), normalised from "PORT" to "127.0.0.1:PORT". Empty: nowhere.
  std::string metrics;
  /// DCQCN's parameters at start (`--cc NAME=VALUE[,...]`, repeatable; `cc = ...` in the
  /// file), checked, in the order given: mlx5's names (rocev2/dcqcn.h). They apply over the
  /// device's defaults, which depend on its link (cc_defaults_for()). `droce cc set` changes
  /// them while droced runs.
  std::string cc;
};

/// DCQCN's defaults for a device on a link over a kernel netdev or not: mlx5's, with the timers
/// of CcParams::kernel_netdev() on the former. Both points on.
rocev2::CcParams cc_defaults_for(bool kernel_netdev);

/// Parses argv (and a --config file). 0, 1 for --help (usage printed), or
/// -EINVAL with a message in *err.
int parse_config(int argc, char** argv, DaemonConfig* out, std::string* err);
const char* usage();

}  // namespace droce::droced
