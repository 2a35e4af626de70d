#pragma once
// droced: one software HCA (docs/droced.md). It owns a DPDK port, runs the
// transport engine on one or more poll-mode lcores (Worker, one DeviceCore
// each), and serves clients on a unix control socket (<run_dir>/<name>.sock)
// and through shared memory.
//
// The Daemon holds what the workers share: the port, the GID table, the
// CoreGroup (neighbour table, hand-off rings), the listening socket, the
// signalfd, the sysfs-shaped tree and the link state. Worker 0 runs on the
// main lcore and also accepts clients, reads signals and checks the link;
// workers 1..N-1 run on the other lcores given (--lcores). Control requests
// are short and bounded; each worker runs its own clients' requests between
// bursts, so every engine stays single-threaded without a command ring.
//
// SIGTERM / SIGINT: every worker moves its clients' QPs to the error state
// (completions flushed into their CQ rings), marks every context fatal with
// an IBV_EVENT_DEVICE_FATAL event, and the sockets close.

#include <sys/types.h>

#include <cstdint>
#include <atomic>
#include <map>
#include <vector>
#include <memory>
#include <mutex>
#include <string>

#include "droced/config.h"
#include "droced/device_core.h"
#include "droced/metrics.h"
#include "droced/metrics_server.h"
#include "droced/session.h"
#include "droced/stats.h"
#include "droced/worker.h"
#include "core/unix_socket.h"
#include "net/gid_table.h"
#include "net/kernel_net.h"
#include "net/port.h"
#include "net/xdp_filter.h"
#include "provider/discovery/sysfs_tree.h"

namespace droce::droced {

class Daemon {
 public:
  Daemon() = default;
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  /// EAL (already started by the caller, with cfg.lcores), port, cores,
  /// socket. 0 or -errno.
  int start(const DaemonConfig& cfg);
  /// Runs until SIGTERM / SIGINT (blocked by the caller before EAL started,
  /// so no DPDK thread takes them). Returns the exit status.
  int run();

  /// droced's state as JSON (the `stats` message, droced/stats.h): every
  /// worker's, read under their state locks.
  std::string render_stats() const;
  /// The counter totals and every live QP's counters (what `droce counters --json` and the
  /// `qps` rows show), read under every worker's state lock as render_stats() reads them; for
  /// the metrics thread (--metrics), which is no worker.
  MetricsSnapshot metrics_snapshot() const;

  // ---- for the workers ----
  const DaemonConfig& config() const { return cfg_; }
  /// The rdma_cm channels' listening socket (<run_dir>/<name>.cm.sock, non-blocking), which
  /// worker 0's CmHost serves; -1 when it could not be made.
  int cm_listen_fd() const { return cm_listen_.get(); }
  bool stopping() const { return stopping_.load(std::memory_order_relaxed); }
  /// Link changes so far, and whether the link is up now (worker 0 writes
  /// both; each worker tells its clients when the count moves).
  uint64_t link_generation() const { return link_generation_.load(std::memory_order_acquire); }
  bool link_up() const { return link_up_.load(std::memory_order_relaxed); }
  /// Worker 0's duties: the daemon's descriptors, and the link check.
  void on_daemon_key(uint64_t key);
  /// What each worker is given of this daemon (its configuration, the state it watches, worker
  /// 0's duties); workers see nothing else of it.
  WorkerContext worker_context();
  void check_link(uint64_t now_ns);
  /// GID table changes so far (a netdev shared with the kernel: its addresses come and
  /// go); each worker copies the table and its addresses when the count moves, and tells
  /// its clients (IBV_EVENT_GID_CHANGE).
  uint64_t gid_generation() const { return gid_generation_.load(std::memory_order_acquire); }
  void copy_gids(net::GidTable* out, std::vector<net::IpAddr>* addresses) const;

 private:
  void accept_clients();
  /// Address messages from the kernel: the GID table, the neighbour table's own
  /// addresses, the XDP program's address map and the sysfs tree follow them.
  /// The netdev's address and link messages (worker 0, kKernelNetKey).
  void on_kernel_events();
  /// The table's addresses, the engine's source first and GID 0 last.
  static std::vector<net::IpAddr> addresses_of(const net::GidTable& gids);
  std::string render_locked() const;
  /// What stats_json() and the metrics read of this daemon; under every worker's state lock.
  StatsSources sources_locked() const;
  /// --metrics: listens and starts the metrics thread. 0 or -errno (said in the log).
  int start_metrics();
  /// Writes the sysfs-shaped tree and the char node (docs/discovery.md).
  void publish_device();
  void shutdown();

  DaemonConfig cfg_;
  std::unique_ptr<net::Port> port_;
  std::unique_ptr<net::GidTable> gids_;  ///< the master copy (gid_mutex_); workers keep their own
  mutable std::mutex gid_mutex_;
  std::atomic<uint64_t> gid_generation_{0};
  std::unique_ptr<net::KernelNet> kernel_;  ///< until start() hands it to the group
  net::KernelNet* kernel_events_ = nullptr;  ///< the group's, for its event socket
  std::unique_ptr<net::XdpFilter> xdp_;
  std::unique_ptr<CoreGroup> group_;
  std::unique_ptr<Capture> capture_;  ///< `droce capture`; outlives the cores that tap it
  std::vector<std::unique_ptr<Worker>> workers_;
  Device shared_;  ///< what every worker's Device starts from
  FaultRules faults_;  ///< `droce fault` and --drop-rate (every core reads them)
  CcSettings cc_;      ///< `droce cc` and --cc (every core reads them)
  std::unique_ptr<ControlJobs> jobs_;  ///< long control work off the workers (control_jobs.h)
  std::string socket_path_;
  core::Fd listen_;
  std::string cm_socket_path_;
  core::Fd cm_listen_;
  core::Fd signal_;
  core::Fd udp_sink_;  ///< net::open_udp_sink on a netdev the kernel shares
  std::unique_ptr<provider::SysfsTree> sysfs_;
  std::unique_ptr<MetricsServer> metrics_;  ///< --metrics; stopped first at shutdown
  uint64_t next_key_ = kFirstSessionKey;
  DaemonCounters counters_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> link_up_{false};
  std::atomic<uint64_t> link_generation_{0};
  std::atomic<uint64_t> link_downs_{0};  ///< downs seen, a flap's too (workers tell PORT_ERR for each new one)
  uint64_t next_link_check_ns_ = 0;
  /// The kernel said the netdev went down since the last link check (worker 0): a down and up
  /// between two looks is a flap the clients hear of (PORT_ERR, then PORT_ACTIVE).
  bool down_heard_ = false;
};

}  // namespace droce::droced
