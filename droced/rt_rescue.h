#pragma once
// RtRescue: gives an event-mode worker that RealtimeBudget sent to the normal policy its
// SCHED_RR back when it has not started a loop for kStarvedNs (docs/droced.md, "The
// scheduling policy").
//
// Why: a worker past its budget drops to the normal policy so that normal programs on its CPU
// get their turn, and takes SCHED_RR back when it next blocks. But a thread at the normal
// policy runs only when no real-time thread wants the CPU, and other real-time threads may
// want it for long: another droced's workers (a lab of four droced on a 2-vCPU VM), this
// droced's other workers, anybody's. RT throttling then leaves the normal policy 50 ms a
// second. Measured in bench/incast.sh: a demoted sender worker went 700-900 ms without running
// a loop, with no voluntary and 0-2 involuntary context switches. Its QP's pacer timer came
// due and waited; the receiver, never asked for an ACK, sent none; RC timed out 67 ms into the
// stall and the QP went back N. With the whole lab at the normal policy none of this happened.
// The worker cannot take its policy back itself while it does not run, so a thread above every
// worker (SCHED_FIFO priority 2), asleep on a timer armed at each demotion, looks when the
// worker should have run: if it has not started a loop for kStarvedNs, the worker goes back to
// SCHED_RR and is told so (take_rescued), so its budget starts again. A demoted worker that
// does run (at its nice, beside normal programs) is left alone.

#include <pthread.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>

#include "core/unix_socket.h"
#include "droced/setup_thread.h"

namespace droce::droced {

class RtRescue {
 public:
  /// How long a demoted worker may go without starting a loop: under half an RC ACK timeout
  /// as perftest and rdma_cm set it (67 ms), and long enough that a worker only slowed by its
  /// peers is not rescued. In the incast lab, 5 ms rescued 518-570 of 520-570 demotions per
  /// sender. The senders then ran flat out, and the queue lost its control: under K in 6-18 %
  /// of the samples, 59-1027 drops, retransmits in the thousands. 30 ms rescued 1-3 per run and
  /// kept the queue as before (docs/droced.md).
  static constexpr uint64_t kStarvedNs = 30'000'000;

  RtRescue() = default;
  ~RtRescue() { stop(); }
  RtRescue(const RtRescue&) = delete;
  RtRescue& operator=(const RtRescue&) = delete;

  /// Starts the watching thread at SCHED_FIFO priority `priority` (above the workers' SCHED_RR
  /// priority 1), for the worker thread `worker` at SCHED_RR priority `worker_priority`.
  /// -errno: no timer or thread, or the policy refused (no thread then).
  int start(pthread_t worker, int worker_priority = 1, int priority = 2, uint64_t starved_ns = kStarvedNs);
  /// Ends and joins the thread.
  void stop();
  bool running() const { return thread_.running(); }

  /// The worker, each loop: it is running now.
  void loop_started(uint64_t now_ns) { loop_ns_.store(now_ns, std::memory_order_relaxed); }
  /// The worker, as it goes to the normal policy: watch it from now on.
  void demoted(uint64_t now_ns);
  /// The worker, as it takes SCHED_RR back itself: nothing to watch.
  void promoted() { demoted_.store(false, std::memory_order_release); }
  /// The worker, each loop: whether the thread gave it SCHED_RR back since it last asked (its
  /// budget starts again then). One relaxed load when it did not.
  bool take_rescued() {
    return rescued_.load(std::memory_order_relaxed) && rescued_.exchange(false, std::memory_order_acq_rel);
  }

  /// Times a starved worker got SCHED_RR back.
  uint64_t rescues() const { return rescues_.load(std::memory_order_relaxed); }
  /// The longest a demoted worker went without a loop when it was rescued, in ns.
  uint64_t longest_starved_ns() const { return longest_ns_.load(std::memory_order_relaxed); }

 private:
  int setup();
  void loop();
  void arm(uint64_t at_ns);
  /// The timer came due: rescue, look again later, or nothing (no longer demoted).
  void check(uint64_t now_ns);

  core::Fd timer_;
  SetupThread thread_;
  pthread_t worker_{};
  int worker_priority_ = 1;
  int priority_ = 2;
  uint64_t starved_ns_ = kStarvedNs;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> loop_ns_{0};
  std::atomic<bool> demoted_{false};
  std::atomic<bool> rescued_{false};
  std::atomic<uint64_t> rescues_{0};
  std::atomic<uint64_t> longest_ns_{0};
};

}  // namespace droce::droced
