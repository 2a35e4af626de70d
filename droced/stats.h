#pragma once
// droced's state as the control protocol's `stats` message returns it: one JSON object, which
// `droce status --json` prints and the CLI's tables (`droce devices|ports|gids|qps|clients|
// cores|cm|multicast|counters|fault`) are read from. Its sections: device, ports, gids, counters,
// cores, clients, qps, multicast, membership, cm, faults.
//
// Every counter in it comes from a counter table (core/counter_table.h) next to its struct:
// the totals (`counters`) are walked in one place, walk_counters(), which the JSON, the text of
// `droce counters` (made from the JSON, apps/status_text.h) and any exporter are generated
// from; the rows (cores, clients, qps) show their structs' tables too, or pick entries of them
// by name (a name not in the table does not compile). Adding a counter to a struct and its
// table is all it takes to show it.
//
// Threading: stats_json() reads every worker's state; its caller holds every worker's state
// lock (Daemon::render_stats). walk_counters() and counters_json() only read their argument.
// Errors: none; JSON strings that are not UTF-8 (a program's name) have the bad bytes replaced.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cm/agent.h"
#include "cm/ucma.h"
#include "core/counter_table.h"
#include "droced/cm_host.h"
#include "droced/config.h"
#include "droced/control_jobs.h"
#include "droced/device_core.h"
#include "droced/worker.h"
#include "net/gid_table.h"
#include "net/kernel_net.h"
#include "net/neighbor.h"
#include "net/port.h"
#include "net/xdp_filter.h"
#include "rocev2/engine.h"
#include "rocev2/qp.h"

namespace droce::droced {

/// The daemon's own counters (not a worker's); what each counts is in kDaemonCounters.
struct DaemonCounters {
  uint64_t clients_accepted = 0;
  uint64_t link_downs = 0;
};

/// DaemonCounters described once (core/counter_table.h).
inline constexpr core::Counter<DaemonCounters> kDaemonCounters[] = {
    {"clients_accepted", &DaemonCounters::clients_accepted, "clients that connected to the control socket"},
    {"link_downs", &DaemonCounters::link_downs, "times the port's link went down"},
};
static_assert(core::covers(kDaemonCounters));

/// The connection manager's counters (worker 0's CmHost, its agent and its rdma_cm commands).
struct CmCounters {
  CmHostCounters host;
  cm::AgentCounters agent;
  cm::UcmaCounters ucma;
};

/// Everything the `counters` section shows: every worker's added up.
struct CounterTotals {
  rocev2::EngineCounters engine;
  DeviceCoreCounters device;
  WorkerCounters worker;
  DaemonCounters daemon;
  std::optional<CmCounters> cm;  ///< when droced has a connection manager
  rocev2::QpCounters transport;  ///< every QP's, destroyed QPs' too
  net::NeighborCounters neighbor;
  std::optional<net::KernelNetCounters> kernel;  ///< --netdev: what droced asked the kernel
  std::optional<net::XdpFilterCounters> xdp;     ///< --netdev: droce's XDP (af_xdp) or TC (af_packet) filter
  std::optional<ControlJobCounters> jobs;        ///< long control work off the workers
  FaultCounters faults;                          ///< every fault rule's, removed ones' too
};

/// What a rendering of the totals is told, in output order.
class CounterSink {
 public:
  virtual ~CounterSink() = default;
  /// The counters that follow, up to the next group(), belong to the group `name` (a nested
  /// object in the JSON: "transport", "parse", "neighbor", "kernel", "xdp", "faults"); those before the
  /// first group() to none. Called for every group the totals have, even one with no counters.
  virtual void group(std::string_view name) = 0;
  virtual void counter(std::string_view name, uint64_t value, std::string_view help) = 0;
};

/// Walks every counter of `t` from the tables, in output order. The parse results ("parse")
/// are walked by status name (rocev2::to_string, help rocev2::describe), only those not 0.
void walk_counters(const CounterTotals& t, CounterSink& sink);

/// The `counters` section alone (what `droce counters --json` prints), from walk_counters().
std::string counters_json(const CounterTotals& t);

/// What stats_json() reads, the daemon's (Daemon::render_locked fills it).
struct StatsSources {
  const DaemonConfig* cfg = nullptr;
  uint64_t node_guid = 0;
  std::string socket_path;
  net::Port* port = nullptr;
  const net::GidTable* gids = nullptr;
  CoreGroup* group = nullptr;
  const std::vector<std::unique_ptr<Worker>>* workers = nullptr;
  net::XdpFilter* xdp = nullptr;  ///< null without droce's XDP or TC filter
  const ControlJobs* jobs = nullptr;
  const FaultRules* faults = nullptr;  ///< null: no fault rules can be set
  const CcSettings* cc = nullptr;      ///< null: no DCQCN parameters
  DaemonCounters counters;
};

/// droced's state as JSON (no newline). The caller holds every worker's state lock; the
/// neighbour lock is taken here.
std::string stats_json(const StatsSources& s);

/// The totals the `counters` section shows, for exporters (droced/metrics.h). Locks as
/// stats_json().
CounterTotals counter_totals(const StatsSources& s);

/// One live QP's counters.
struct QpCounterRow {
  uint32_t qpn = 0;
  rocev2::QpCounters counters;
};

/// Every live QP's counters, in the order of the `qps` section. The caller holds every
/// worker's state lock.
std::vector<QpCounterRow> qp_counter_rows(const StatsSources& s);

}  // namespace droce::droced
