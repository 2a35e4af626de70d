#pragma once
// RealtimeBudget: how long an event-mode worker at SCHED_RR (--event-policy
// rr, or auto where the machine allows it) may run without a break before it
// goes back to the normal policy (docs/droced.md, "Waking up"). I/O-free: the
// worker reports its loops and its blocks and applies what this says;
// tests/droced/realtime_budget_test.cc drives it with crafted times.
//
// Why a worker runs at SCHED_RR: as the kernel's rxe runs in softirq, above
// every program, so a worker woken or preempted while a program spins on its
// CPU runs again at once instead of after that program's slice (ib_write_lat
// 64 B p99.9 2 ms at the normal policy on a 2-vCPU VM, 81-191 us at rr).
// Why not for long: a task at SCHED_RR that never blocks keeps every normal
// task off its CPU (save RT throttling's 5 %): a busy worker would starve the
// very programs it serves, and a bug that spins would take the CPU from the
// whole machine. The kernel's answer for softirq is the same budget: after
// 2 ms of softirq work __do_softirq leaves the rest to ksoftirqd, a normal
// thread. So a worker that has not slept for kBurstNs drops to the normal
// policy (at its nice) and takes SCHED_RR back when it next blocks: a worker
// that serves messages one at a time (latency) keeps it; one streaming runs as
// any other program part of the time. A wait that returned without leaving the
// CPU is no sleep (after_block): a descriptor left readable once made every
// wait of a worker return at once, and it spun at SCHED_RR (docs/droced.md,
// "That failure, found").

#include <cstdint>

#include "core/counter_table.h"

namespace droce::droced {

/// What it counts is in kRealtimeCounters.
struct RealtimeCounters {
  uint64_t demotions = 0;
  uint64_t rescues = 0;
};

/// RealtimeCounters described once (core/counter_table.h): a worker's row of `droce cores`.
inline constexpr core::Counter<RealtimeCounters> kRealtimeCounters[] = {
    {"rt_demotions", &RealtimeCounters::demotions,
     "times kBurstNs without sleeping sent the worker to the normal policy"},
    {"rt_rescues", &RealtimeCounters::rescues,
     "times a worker at the normal policy went RtRescue::kStarvedNs without running and got SCHED_RR back"},
};
static_assert(core::covers(kRealtimeCounters));

class RealtimeBudget {
 public:
  /// The longest stretch at SCHED_RR without blocking (__do_softirq's MAX_SOFTIRQ_TIME).
  static constexpr uint64_t kBurstNs = 2'000'000;

  enum class Change { none, to_normal, to_realtime };

  /// Never changes anything when disabled (a worker that did not get SCHED_RR).
  explicit RealtimeBudget(bool enabled = false, uint64_t now_ns = 0) : enabled_(enabled), rested_ns_(now_ns) {}

  /// Each loop: to_normal once the worker has run kBurstNs since it last blocked.
  Change on_loop(uint64_t now_ns) {
    if (!enabled_ || demoted_ || now_ns - rested_ns_ < kBurstNs) return Change::none;
    demoted_ = true;
    ++counters_.demotions;
    return Change::to_normal;
  }
  /// Before each block (a sleep, a wait for room): to_realtime if it had gone to the normal
  /// policy, so that what wakes it finds it at SCHED_RR again (woken at the normal policy, it
  /// would wait behind a spinning program, the very thing rr is for).
  Change before_block() {
    if (!demoted_) return Change::none;
    demoted_ = false;
    return Change::to_realtime;
  }
  /// After each block: the budget starts again if the worker really slept (left its CPU).
  /// A wait that returned at once (an event already there) is no rest: past the budget the
  /// worker goes back to the normal policy at once, or a wait that never sleeps (a readable
  /// descriptor nobody drains) would keep it at SCHED_RR, spinning, for ever.
  Change after_block(uint64_t now_ns, bool slept) {
    if (slept) {
      rested_ns_ = now_ns;
      return Change::none;
    }
    return on_loop(now_ns);
  }

  /// SCHED_RR given back from outside (RtRescue: at the normal policy the worker did not run
  /// at all): the budget starts again, as after a rest.
  void rescued(uint64_t now_ns) {
    if (!enabled_) return;
    demoted_ = false;
    rested_ns_ = now_ns;
    ++counters_.rescues;
  }

  /// Never again (SCHED_RR refused when taken back); the counters stay.
  void disable() {
    enabled_ = false;
    demoted_ = false;
  }

  bool enabled() const { return enabled_; }
  /// At SCHED_RR now (enabled and not sent to the normal policy).
  bool realtime() const { return enabled_ && !demoted_; }
  const RealtimeCounters& counters() const { return counters_; }

 private:
  bool enabled_;
  bool demoted_ = false;
  uint64_t rested_ns_;
  RealtimeCounters counters_;
};

/// Whether a wait left the CPU (RealtimeBudget::after_block's `slept`), asking the thread's
/// voluntary switch count, a system call (getrusage: 400-450 ns on a 2-vCPU VM; read after
/// every wait, it was one per hand-over between two droced), only when the wait's length does
/// not say. A wait of kSurelySleptNs or more slept: one that finds its event returns in about
/// a microsecond, and a sleep is two switches and whatever ran meanwhile (a wait stretched by
/// a host that took the vCPU away is taken for a sleep too: one early rest now and then, and a
/// wait that never sleeps is still caught). A shorter one slept if the count moved
/// since the last read; a count last read before a wait judged by its length is stale (a
/// switch since may belong to that wait), so the first short wait after one, like the first
/// of all and one whose read failed, is no rest: the safe side, the budget runs on.
class SleepJudge {
 public:
  static constexpr uint64_t kSurelySleptNs = 10'000;

  /// read_switches(uint64_t* n) reads the count into *n and says whether it could.
  template <class Read>
  bool slept(uint64_t wait_ns, Read&& read_switches) {
    if (wait_ns >= kSurelySleptNs) {
      known_ = false;
      return true;
    }
    uint64_t n = 0;
    const bool ok = read_switches(&n);
    const bool moved = ok && known_ && n != last_;
    if (ok) last_ = n;
    known_ = ok;
    return moved;
  }

 private:
  uint64_t last_ = 0;   ///< the count at the last read
  bool known_ = false;  ///< last_ is current: read after the last wait
};

}  // namespace droce::droced
