#pragma once
// YieldPolicy: when an event-mode worker that has nothing to do gives its CPU
// to the droced at the other end of a droce_shm link with sched_yield, rather
// than blocking (docs/droced.md, "Waking up"). I/O-free: the worker reports
// each yield; tests/droced/yield_policy_test.cc drives it with crafted yields.
//
// Two droced on one machine often share a CPU (the demo, the benchmarks, CI:
// `--event-affinity auto` keeps both on CPU 0 of a 2-vCPU VM while perftest's
// client spins on the other). A 1 QP ib_write_bw then runs in turns: the
// requester sends a window of frames and stops, the responder takes them and
// ACKs, the requester takes the ACKs. Handing the CPU over by blocking costs an
// eventfd write that wakes the peer, the peer's epoll return and eventfd read,
// and back the same way: six system calls and two wake-ups per turn (a
// cpu-clock profile put 28 % of both daemons' time in the kernel). While the
// peer is awake on this CPU and still holds frames of ours
// (ShmLink::peer_busy_with_ours), it needs the CPU, not a wake-up: sched_yield
// hands it over in one system call, and the peer, which sees this worker
// awake, publishes its answer without an eventfd write.
// Measured (1 QP 64 B, 3 M messages, 16 interleaved pairs): 3.03 against 2.58
// M msg/s (docs/droced.md).
//
// The risk: sched_yield gives the CPU to whichever task the scheduler picks,
// and where a third task shares the CPU (perftest's latency tests spin on the
// CPU the two droced are on), it may run a whole slice, milliseconds, before
// the peer does; a blocked-and-woken peer would have preempted it. So each
// yield is judged: of the time it took, what the peer was not awake (the peer
// publishes its awake time each loop) went to someone else. Awake is not
// running: a third task that preempted the peer mid-loop is not seen (the
// peer's own CPU time would be, at a system call per publish). More than
// kCrowdedNs of that, and yields stop for kFirstOffNs, doubling up to kMaxOffNs
// while they keep finding the CPU crowded (a first try prototype that judged
// by the yield's length alone stopped yields whenever the peer itself ran long,
// 64 KiB WRITEs: 5 % slower). And only within kWindowNs of the last work (a
// worker idle longer than that spins, SpinPolicy, and blocks, as before), or
// while its frames wait for room in a ring the peer must empty (should_yield).

#include <cstdint>

#include "core/counter_table.h"

namespace droce::droced {

/// What each counts is in kYieldCounters.
struct YieldCounters {
  uint64_t yields = 0;
  uint64_t crowded = 0;
};

/// YieldCounters described once (core/counter_table.h): a worker's row of `droce cores`.
inline constexpr core::Counter<YieldCounters> kYieldCounters[] = {
    {"yields", &YieldCounters::yields, "times the CPU was handed to the peer"},
    {"yields_crowded", &YieldCounters::crowded, "yields in which another task ran: yields paused"},
};
static_assert(core::covers(kYieldCounters));

class YieldPolicy {
 public:
  /// Yields only this soon after the last work; later the worker spins and blocks.
  static constexpr uint64_t kWindowNs = 50'000;
  /// Time in one yield that neither this worker nor its peer ran, above which a third task
  /// shares the CPU (a scheduler slice is 0.75-3 ms; a yield the peer answers takes tens of us).
  static constexpr uint64_t kCrowdedNs = 200'000;
  /// Pauses: a few ms of the slower hand-off where the judgement was wrong (the host took the
  /// vCPU away), up to a second where a spinner lives on the CPU.
  static constexpr uint64_t kFirstOffNs = 10'000'000;
  static constexpr uint64_t kMaxOffNs = 1'000'000'000;
  /// A crowded yield after this many clean ones starts the pause at kFirstOffNs again: a
  /// program that shares the CPU for good (a spinner) crowds a yield every few, one starting
  /// up crowds a few and is gone. (By time, 5 s, back-to-back perftest runs on one pair kept
  /// doubling the pause on each run's start-up, and 1 QP lost its yields for whole seconds.)
  static constexpr uint32_t kForgetYields = 64;

  /// Never yields when disabled (a worker whose port is not a droce_shm link it alone reads).
  explicit YieldPolicy(bool enabled = false) : enabled_(enabled) {}

  /// What the worker found in one loop that did no work.
  struct Loop {
    uint64_t now_ns = 0;
    uint64_t idle_since_ns = 0;  ///< its last work
    bool stuck = false;          ///< frames wait to be sent and none went: the link's ring is full
    bool owed = false;           ///< a wake-up is owed to the peer (asleep: it needs that instead)
    bool peer_busy = false;      ///< the peer is awake on our CPU with frames of ours to take
  };
  /// Yield to the peer now? Only to a peer that needs the CPU and is awake (one asleep is
  /// woken by the sleep that follows); while stuck at once, or else within kWindowNs of the
  /// last work (later the worker spins and blocks); never while paused.
  bool should_yield(const Loop& l) const {
    if (!enabled_ || l.owed || !l.peer_busy || l.now_ns < paused_until_ns_) return false;
    return l.stuck || l.now_ns - l.idle_since_ns < kWindowNs;
  }

  struct Yield {
    uint64_t start_ns = 0;     ///< just before sched_yield
    uint64_t back_ns = 0;      ///< when it returned
    uint64_t peer_ran_ns = 0;  ///< the peer's published running time grew by this meanwhile
  };
  void after_yield(const Yield& y);

  bool enabled() const { return enabled_; }
  bool paused(uint64_t now_ns) const { return now_ns < paused_until_ns_; }
  const YieldCounters& counters() const { return counters_; }

 private:
  bool enabled_;
  uint64_t paused_until_ns_ = 0;
  uint64_t pause_ns_ = 0;       ///< the last pause's length (0: none yet)
  uint32_t clean_yields_ = 0;   ///< yields since the last crowded one
  YieldCounters counters_;
};

}  // namespace droce::droced
