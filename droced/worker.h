#pragma once
// One poll-mode lcore of droced: a DeviceCore (its port queue and engine),
// the client contexts it serves, and its loop (docs/droced.md, "Several
// lcores"). Each iteration, under the worker's state lock:
//   sessions handed over by the accepting lcore join;
//   doorbells and ring slots of every client here (Session::poll);
//   RX burst, hand-offs, ARP/ND, engine timers, requester, TX (DeviceCore);
//   the engine's async events to the clients that own the objects, and port
//   events the link check published;
//   every 64 iterations, or when idle: this worker's sockets (epoll, no wait).
//
// A context lives on one worker with all its objects (verbs objects never
// cross contexts), so the session code stays single-threaded and no CQ, SRQ
// or MR is shared between engines. Worker 0 runs on the main lcore and also
// accepts clients (each goes to the worker with the fewest), reads signals
// and checks the link.
//
// Waiting for work (docs/droced.md, "Waking up"). A worker is in one of two
// modes, chosen at start and shown by `droce cores` with the reason:
//   poll:  it owns its core (--poll-mode poll, or auto on a CPU the kernel
//          keeps out of its scheduler, isolcpus): it never sleeps.
//   event: the core is shared with other programs (every small machine, VM,
//          CI box). Its thread may run on any CPU the process was given (EAL's
//          pinning is undone), timers sleep with 1 ns slack, and after work it
//          spins 1-64 us (SpinPolicy: longer while events come back within a
//          measured wake-up of the spin's end, shorter while they do not), then marks
//          its contexts and its CoreGroup slot "sleeping", arms its port
//          queue's wake-up (the same-host link's flag, a tap or NIC RX
//          interrupt), looks once more at every ring, and blocks in epoll on
//          its sockets, its eventfd (a client's doorbell, a frame another core
//          hands it) and the port's descriptor, until the next engine timer.
//          (af_packet and af_xdp: their queue's own kernel socket,
//          net/kernel_socket_discovery.h). Only a port that gives no wake-up
//          (net_memif in DPDK 22.11) makes it sleep on a timer: 16 us at first,
//          doubling up to --max-sleep-us while nothing happens.
// The state lock is released while it blocks.
//
// The state lock: held by the worker for each loop iteration; `stats`
// (rendered by whichever worker serves the CLI) takes every worker's in
// index order after releasing its own, so it reads engines and sessions
// that are not moving, without deadlock.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "droced/ack_hold.h"
#include "droced/cm_host.h"
#include "droced/config.h"
#include "droced/device_core.h"
#include "droced/idle_waker.h"
#include "droced/realtime_budget.h"
#include "droced/rt_rescue.h"
#include "droced/session.h"
#include "droced/spin_policy.h"
#include "droced/yield_policy.h"
#include "core/counter_table.h"
#include "core/unix_socket.h"

namespace droce::droced {

/// epoll keys: the daemon's descriptors (in worker 0's epoll) and each
/// worker's own; sessions count up from kFirstSessionKey.
inline constexpr uint64_t kListenKey = 1, kSignalKey = 2, kWakeKey = 3, kRxInterruptKey = 4, kCmKey = 5,
                          kKernelNetKey = 6;
inline constexpr uint64_t kFirstSessionKey = 16;

/// What a worker is given by the daemon that hosts it; nothing else of the
/// daemon is visible to a worker. The pointers outlive every worker.
struct WorkerContext {
  const DaemonConfig* config = nullptr;
  const std::atomic<bool>* stopping = nullptr;               ///< the loops end
  const std::atomic<bool>* link_up = nullptr;                ///< the port's link, as last checked
  const std::atomic<uint64_t>* link_generation = nullptr;    ///< moves at each link change
  const std::atomic<uint64_t>* link_downs = nullptr;         ///< times the link went down (flaps too)
  const std::atomic<uint64_t>* gid_generation = nullptr;     ///< moves at each GID table change
  /// Copies the master GID table, and its addresses, into a worker's own.
  std::function<void(net::GidTable*, std::vector<net::IpAddr>*)> copy_gids;
  /// Worker 0's duties: a daemon descriptor became readable (a key below
  /// kFirstSessionKey), and the periodic link check.
  std::function<void(uint64_t key)> on_daemon_key;
  std::function<void(uint64_t now_ns)> check_link;
  /// The CM channels' listening socket (worker 0; opened after the workers are made).
  const core::Fd* cm_listen = nullptr;
};

/// What each counts is in kWorkerCounters.
struct WorkerCounters {
  uint64_t loops = 0;
  uint64_t sleeps = 0;
  uint64_t wakeups_by_client = 0;
  uint64_t wakeups_by_port = 0;
  uint64_t wakeups_by_timer = 0;
  uint64_t stuck_blocks = 0;
  uint64_t clients_closed = 0;
  uint64_t clients_faulted = 0;
  uint64_t events_unrouted = 0;
  uint64_t affinity_changes = 0;
  uint64_t affinity_stays = 0;
};

/// WorkerCounters described once (core/counter_table.h).
inline constexpr core::Counter<WorkerCounters> kWorkerCounters[] = {
    {"loops", &WorkerCounters::loops, "turns of the worker's loop"},
    {"sleeps", &WorkerCounters::sleeps, "times the loop slept"},
    {"wakeups_by_client", &WorkerCounters::wakeups_by_client, "sleeps the eventfd ended (a doorbell or a hand-off)"},
    {"wakeups_by_port", &WorkerCounters::wakeups_by_port, "sleeps a port RX interrupt ended"},
    {"wakeups_by_timer", &WorkerCounters::wakeups_by_timer,
     "sleeps that ended with no event (a timer, or a port that cannot wake us)"},
    {"stuck_blocks", &WorkerCounters::stuck_blocks,
     "a worker at SCHED_RR blocked, frames waiting for room (Worker::block_stuck)"},
    {"clients_closed", &WorkerCounters::clients_closed, "clients gone"},
    {"clients_faulted", &WorkerCounters::clients_faulted, "clients disconnected for breaking the protocol"},
    {"events_unrouted", &WorkerCounters::events_unrouted, "engine events for objects no client owns"},
    {"affinity_changes", &WorkerCounters::affinity_changes,
     "--event-affinity auto: moves between the lcore's CPU and any"},
    {"affinity_stays", &WorkerCounters::affinity_stays, "busy, yet kept on the lcore's CPU: no other CPU had room"},
};
static_assert(core::covers(kWorkerCounters));

class Worker {
 public:
  /// Worker `index`, on EAL lcore `lcore`, with what its daemon gives it
  /// (`context`), `core` and a Device made from `shared` (its core, wake fd
  /// and owner maps its own).
  Worker(WorkerContext context, unsigned index, unsigned lcore, std::unique_ptr<DeviceCore> core,
         const Device& shared, int* rc);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  /// The loop, until the daemon stops; then every client here is told the
  /// device is gone. Worker 0 on the main thread; the others through
  /// rte_eal_remote_launch(launch, worker, lcore).
  void run();
  static int launch(void* worker);

  /// A session accepted elsewhere (thread-safe); it joins at the next loop.
  void adopt(uint64_t key, std::unique_ptr<Session> s);
  /// The epoll this worker sleeps on (worker 0: the daemon adds its own fds).
  int epoll_fd() const { return epoll_.get(); }
  /// Sessions here, counting those about to join (the accept balance).
  size_t load() const { return load_.load(std::memory_order_relaxed); }

  unsigned index() const { return index_; }
  unsigned lcore() const { return lcore_; }
  DeviceCore& core() { return *core_; }
  Device& device() { return device_; }
  const WorkerCounters& counters() const { return counters_; }
  const std::map<uint64_t, std::unique_ptr<Session>>& sessions() const { return sessions_; }
  /// Takes this worker's state lock from another thread (`stats`): the
  /// worker lets it in between two iterations.
  void lock_state();
  void unlock_state() { state_.unlock(); }
  /// The worker whose loop runs on this thread (nullptr elsewhere); its
  /// state lock is held while it runs a request.
  static Worker* current();

  /// The mode this worker waits in, and why (see the header).
  bool polling() const { return polling_; }
  const std::string& mode_reason() const { return mode_reason_; }
  /// The CPUs this worker's thread may run on ("0", "0-1"), set when it starts.
  const std::string& cpus() const { return cpus_; }
  /// The kernel's id of this worker's thread once it runs (0 before): `droce cores`
  /// reads how the scheduler treats it (core/proc.h).
  pid_t tid() const { return tid_.load(std::memory_order_relaxed); }
  /// Worker 0's connection manager (QP1), once its thread runs; nullptr elsewhere.
  const CmHost* cm() const { return cm_.get(); }
  /// Event mode: the current spin before blocking, in microseconds.
  uint64_t spin_us() const { return spin_.spin_ns() / 1000; }
  const SpinCounters& spin_counters() const { return spin_.counters(); }
  /// Event mode: the measured wake-up (SpinPolicy::wake_ns), in microseconds.
  uint64_t wake_us() const { return spin_.wake_ns() / 1000; }
  /// Event mode on a droce_shm link: the CPU handed to the peer by yielding (YieldPolicy).
  const YieldCounters& yield_counters() const { return yield_.counters(); }
  /// Event mode at SCHED_RR: the times it ran too long without a break (RealtimeBudget).
  const RealtimeCounters& realtime_counters() const { return realtime_.counters(); }
  /// Event mode on a droce_shm link: wake-ups for acknowledgements alone held past a block (AckHold).
  const AckHoldCounters& ack_hold_counters() const { return ack_hold_.counters(); }
  /// Call once in main() before EAL starts: the CPUs an event-mode worker may
  /// run on (EAL pins each lcore's thread to one).
  static void remember_startup_affinity();

 private:
  void iterate(uint64_t now, uint64_t* idle_since);
  int control(int timeout_us);
  void take_inbox();
  void close_session(uint64_t key);
  void route_events();
  void push_port_events();
  /// for_peer: taken to let a droce_shm peer asleep on this CPU run (SpinPolicy::Sleep).
  void sleep(uint64_t now_ns, bool for_peer);
  /// A loop that did no work (idle since idle_since_ns, or stuck on a full ring): hands the
  /// CPU to a droce_shm peer that needs it when YieldPolicy says so, and says whether it did
  /// and, in *peer_ran_ns, how long the peer had of it.
  bool yield_to_peer(uint64_t now_ns, uint64_t idle_since_ns, bool stuck, bool owed, uint64_t* peer_ran_ns = nullptr);
  /// At SCHED_RR, frames waiting for room in the ring of a droce_shm peer on this CPU that
  /// needs the CPU to make it (a wake-up owed, or a yield it did not run in): block for
  /// kStuckBlockUs (see iterate).
  static constexpr int kStuckBlockUs = 200;
  void block_stuck();
  void choose_mode();
  /// The earliest wake-up stamp (the port's, the clients') raised at or after since_ns.
  core::WakeStamp first_wake_since(uint64_t since_ns) const;
  /// The newest wake-up stamp of a client here (ns 0: none).
  core::WakeStamp last_client_wake() const;
  /// Before blocking with a wake-up owed: how long the sleep may keep it (AckHold), 0: flush it.
  uint64_t ack_hold_ns();
  /// The engine's frames other than acknowledgements (AckHold::loop_start, acks_only).
  uint64_t non_ack_frames() const;
  bool arm_rx_interrupt();
  /// Reads the port's interrupt event (a level-triggered one stays readable until read).
  void consume_rx_interrupt();
  void shutdown();

  const DaemonConfig& config() const { return *context_.config; }

  WorkerContext context_;
  unsigned index_;
  unsigned lcore_;
  std::unique_ptr<DeviceCore> core_;
  Device device_;
  core::Fd epoll_;
  core::Fd wake_;
  std::map<uint64_t, std::unique_ptr<Session>> sessions_;  ///< by epoll key
  std::mutex inbox_mutex_;
  std::vector<std::pair<uint64_t, std::unique_ptr<Session>>> inbox_;
  std::atomic<bool> inbox_filled_{false};  ///< inbox_ not empty; set and cleared under inbox_mutex_
  std::atomic<size_t> load_{0};
  std::mutex state_;
  std::atomic<unsigned> state_waiters_{0};
  uint64_t link_generation_ = 0;  ///< the daemon's link changes already told to the clients here
  uint64_t link_downs_ = 0;       ///< the downs already told
  uint64_t gid_generation_ = 0;   ///< the daemon's GID table changes already taken here
  std::unique_ptr<net::GidTable> gids_;  ///< this worker's copy of the GID table
  int rx_queue_ = -1;
  int rx_intr_fd_ = -1;  ///< the port's RX interrupt descriptor in epoll_ (not owned)
  bool rx_intr_edge_ = false;  ///< watched edge-triggered, never read (Port::rx_interrupt_edge)
  /// The port's scheduling hints with its peer (droce_shm), or nullptr: asked once, in run().
  net::PeerScheduling* peer_ = nullptr;
  uint64_t sleep_us_ = 16;  ///< the next unarmed sleep (grows while idle)
  bool polling_ = false;
  std::string mode_reason_;
  std::string cpus_;
  std::atomic<pid_t> tid_{0};
  std::unique_ptr<CmHost> cm_;
  // --event-affinity auto: on the lcore's CPU (pinned_) while the last window was mostly
  // blocked, on any CPU while it was mostly busy and another CPU had room.
  static constexpr uint64_t kAffinityWindowNs = 50'000'000;
  void adapt_affinity(uint64_t now);
  bool room_elsewhere(uint64_t now);
  std::vector<uint64_t> idle_ticks_;  ///< each CPU's idle time at idle_sampled_ns_ (/proc/stat)
  uint64_t idle_sampled_ns_ = 0;      ///< 0: no sample from the window before
  bool adaptive_affinity_ = false;
  bool pinned_ = true;
  uint64_t window_start_ns_ = 0;
  uint64_t away_at_window_start_ = 0;  ///< away_ns_ when the window began
  static std::string describe_affinity();
  SpinPolicy spin_;  ///< event mode: how long to spin before blocking
  YieldPolicy yield_;  ///< event mode on droce_shm: when to yield to the peer instead
  RealtimeBudget realtime_;  ///< event mode at SCHED_RR: when to drop to the normal policy, and back
  RtRescue rescue_;          ///< gives it SCHED_RR back when, demoted, it does not get to run
  AckHold ack_hold_;         ///< event mode on droce_shm: when a wake-up for ACKs alone may wait
  IdleWaker idle_waker_;     ///< wakes the peer when this worker's CPU would idle with one held
  std::atomic<uint64_t> idle_wakes_{0};  ///< held wake-ups the idle waker sent
  static void wake_peer_when_idle(void* worker);
  void apply(RealtimeBudget::Change change);
  /// SCHED_RR priority 1 (on) or the normal policy: pthread_setschedparam's result.
  static int set_realtime(bool on);
  /// Blocks in control() up to timeout_us, as a sleep or a wait for room: the time counts as
  /// given away (away_ns_) and RealtimeBudget hears of it. control()'s result; *back_ns: when
  /// it returned.
  int block(int timeout_us, uint64_t* back_ns);
  /// This thread's voluntary context switches so far into *n (getrusage RUSAGE_THREAD); false
  /// if it could not be read.
  static bool voluntary_switches(uint64_t* n);
  SleepJudge sleep_judge_;  ///< whether each block left the CPU (at SCHED_RR only)
  uint64_t away_ns_ = 0;  ///< time spent blocked or yielding: publish_running, adapt_affinity
  WorkerCounters counters_;
};

}  // namespace droce::droced
