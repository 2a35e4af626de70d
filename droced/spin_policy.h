#pragma once
// SpinPolicy: how long an event-mode worker spins after its last work before
// it blocks (docs/droced.md, "Waking up"). I/O-free: the worker reports each
// sleep; tests/droced/spin_policy_test.cc drives it with crafted sleeps.
//
// A sleep costs its wake-up: from the waker's eventfd write to the worker
// running again. That is a few microseconds while the worker's CPU is busy
// with another task (an eventfd hand-off between two blocked processes took
// 7 us round trip on a 2-vCPU VM, issue 13), and 12-45 us there when the vCPU
// halted meanwhile (its idle state: the host must wake the vCPU). A spin costs the CPU time it burns, and delays any
// program waiting for that CPU (perftest's latency tests spin on memory).
// So a sleep whose event came less than a wake-up after the spin ended, or
// while a spin twice as long would still have been spinning, doubles the next
// spin (spinning on would have cost less than the sleep did); any other sleep
// halves it. The wake-up is measured, not assumed: each sleep an event ended
// adds (worker back - waker's stamp) to a moving average. On a 2-vCPU VM the
// requester of a 1 QP ib_write_bw otherwise slept between its client's posts
// and left its CPU idle a quarter of the time, each post a 12-45 us wake-up.
//
// "When the event came" is the waker's stamp (core::WakeStamp: a client
// ringing its doorbell, the same-host link's peer publishing frames), not when
// the worker was running again: judged by its own return, as before, a worker
// whose spin was shorter than a wake-up could never find an event "soon", and
// its spin only ever shrank (to its 1 us floor on a 2-vCPU VM).
//
// Sleeps that say nothing about the spin's length:
//   - a sleep taken to let a peer on the worker's own CPU run (it owed it a
//     wake-up, ShmLink::set_defer_wakes; or, at SCHED_RR, the peer was awake
//     there and could not run while the worker spun): left out;
//   - a sleep ended by a waker on the worker's own CPU: the waker could only
//     run because the worker stopped spinning, so spinning longer would have
//     delayed that event, not caught it: halves, like a sleep nothing ended.

#include <cstdint>

#include "core/clock.h"
#include "core/counter_table.h"

namespace droce::droced {

/// What each counts is in kSpinCounters.
struct SpinCounters {
  uint64_t grown = 0;
  uint64_t shrunk = 0;
  uint64_t woken_here = 0;
  uint64_t unjudged = 0;
};

/// SpinCounters described once (core/counter_table.h): a worker's row of `droce cores`.
inline constexpr core::Counter<SpinCounters> kSpinCounters[] = {
    {"spin_grown", &SpinCounters::grown, "sleeps whose event came soon enough: the spin doubled"},
    {"spin_shrunk", &SpinCounters::shrunk, "sleeps it did not pay to avoid: the spin halved"},
    {"spin_woken_here", &SpinCounters::woken_here, "of those, ended by a waker on the worker's own CPU"},
    {"spin_unjudged", &SpinCounters::unjudged, "sleeps taken to let a peer on our CPU run: the spin kept"},
};
static_assert(core::covers(kSpinCounters));

class SpinPolicy {
 public:
  static constexpr uint64_t kFirstNs = 4'000;
  static constexpr uint64_t kMinNs = 1'000;
  static constexpr uint64_t kMaxNs = 64'000;
  /// The wake-up assumed until one is measured: about half the 7 us eventfd hand-off round
  /// trip between two blocked processes on a 2-vCPU VM (issue 13).
  static constexpr uint64_t kFirstWakeNs = 4'000;
  /// Wake-ups longer than this are not averaged in (a worker descheduled meanwhile).
  static constexpr uint64_t kMaxWakeSampleNs = 1'000'000;

  /// Adapts; or, with fixed_ns (--idle-spin-us), always spins that long.
  SpinPolicy() = default;
  explicit SpinPolicy(uint64_t fixed_ns) : spin_ns_(fixed_ns), fixed_(true) {}

  uint64_t spin_ns() const { return spin_ns_; }
  /// The moving average of measured wake-ups (kFirstWakeNs until one is).
  uint64_t wake_ns() const { return wake_ns_; }
  const SpinCounters& counters() const { return counters_; }

  struct Sleep {
    uint64_t spin_end_ns = 0;  ///< when the worker stopped spinning to sleep
    uint64_t back_ns = 0;      ///< when it ran again
    bool for_peer = false;     ///< taken to let a peer on the worker's CPU run (see the header)
    bool by_event = false;     ///< an event ended it, not its timer
    core::WakeStamp waker;     ///< the earliest stamp raised since spin_end_ns (ns 0: none seen)
    int cpu = -1;              ///< the CPU the worker slept on
  };
  /// Called for each sleep that blocked, once the worker knows what woke it.
  void after_sleep(const Sleep& s);

 private:
  uint64_t spin_ns_ = kFirstNs;
  uint64_t wake_ns_ = kFirstWakeNs;
  bool fixed_ = false;
  SpinCounters counters_;
};

}  // namespace droce::droced
