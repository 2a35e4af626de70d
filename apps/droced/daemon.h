#pragma once
// droced: one software HCA (docs/droced.md). It owns a DPDK port, runs the
// transport engine on one poll-mode core, and serves clients on a unix
// control socket (<run_dir>/<name>.sock) and through shared memory.
//
// The loop, on one thread (the lcore):
//   doorbells and ring slots of every client (Session::poll);
//   RX burst, ARP/ND, engine timers, requester, one TX flush (DeviceCore);
//   the engine's async events to the clients that own the objects;
//   every 64 iterations, or when idle: the control sockets (epoll, no wait).
// Control requests are short and bounded; running them between bursts on the
// lcore keeps the engine single-threaded without a command ring. (The design
// puts them on a control thread with a command ring to the lcores; with one
// lcore that ring would only add a hop. It comes with several lcores.)
//
// Idle: after idle_spin_us without work, droced marks every context
// "sleeping", checks the doorbell rings once more, and sleeps in epoll_wait
// on the control sockets, the clients' wake eventfd and a signalfd, 16 us at
// first and doubling up to max_sleep_us while nothing happens (never past the
// next engine timer). A client's doorbell writes the eventfd when it sees the
// flag, so a sleeping droced wakes in microseconds for local work. Frames
// arriving on the port wait for the sleep's end, unless the port gives an RX
// interrupt descriptor (then the sleep waits on it, up to the 50 ms link
// check).
//
// SIGTERM / SIGINT: every client's QPs go to the error state (completions
// flushed into their CQ rings), every context is marked fatal with an
// IBV_EVENT_DEVICE_FATAL event, and the sockets close.

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "apps/droced/config.h"
#include "apps/droced/device_core.h"
#include "apps/droced/session.h"
#include "core/unix_socket.h"
#include "net/gid_table.h"
#include "net/port.h"
#include "provider/discovery/sysfs_tree.h"

namespace droce::droced {

struct DaemonCounters {
  uint64_t loops = 0;
  uint64_t sleeps = 0;           ///< times the loop slept
  uint64_t wakeups_by_client = 0;  ///< sleeps a client's doorbell ended
  uint64_t wakeups_by_port = 0;    ///< sleeps a port RX interrupt ended
  uint64_t clients_accepted = 0;
  uint64_t clients_closed = 0;
  uint64_t clients_faulted = 0;  ///< disconnected for breaking the protocol
  uint64_t events_unrouted = 0;  ///< engine events for objects no client owns
};

class Daemon {
 public:
  Daemon() = default;
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  /// EAL (already started by the caller), port, device core, socket. 0 or -errno.
  int start(const DaemonConfig& cfg);
  /// Runs until SIGTERM / SIGINT (blocked by the caller before EAL started,
  /// so no DPDK thread takes them). Returns the exit status.
  int run();

  std::string render_stats() const;

 private:
  void control(int timeout_us);
  void accept_clients();
  void close_session(uint64_t key);
  void route_events();
  void check_link(uint64_t now_ns);
  void sleep(uint64_t now_ns);
  /// Writes the sysfs-shaped tree and the char node (docs/discovery.md).
  void publish_device();
  /// Arms the port's RX interrupt and watches its descriptor; false when the
  /// port has none (then sleeps last at most --max-sleep-us).
  bool arm_rx_interrupt();
  void shutdown();

  DaemonConfig cfg_;
  std::unique_ptr<net::Port> port_;
  std::unique_ptr<DeviceCore> core_;
  std::unique_ptr<net::GidTable> gids_;
  Device device_;
  std::string socket_path_;
  core::Fd listen_;
  core::Fd epoll_;
  core::Fd signal_;
  core::Fd wake_;
  core::Fd udp_sink_;
  std::unique_ptr<provider::SysfsTree> sysfs_;
  std::string dev_node_;  ///< the /dev/infiniband node droced made (removed at exit)  ///< net::open_udp_sink on a netdev the kernel shares
  std::map<uint64_t, std::unique_ptr<Session>> sessions_;  ///< by epoll key
  uint64_t next_key_ = 16;
  bool stopping_ = false;
  bool link_up_ = false;
  int rx_intr_fd_ = -1;  ///< the port's RX interrupt descriptor in epoll_ (not owned)
  uint64_t next_link_check_ns_ = 0;
  uint64_t sleep_us_ = 16;  ///< the next unarmed sleep (grows while idle)
  DaemonCounters counters_;
};

}  // namespace droce::droced
