#pragma once
// AckHold: whether an event-mode worker about to block may keep, past the block, a wake-up it
// owes its droce_shm peer asleep on its CPU (ShmLink::set_defer_wakes), because all it sent
// since is acknowledgements and a client of its own waits for that CPU (docs/droced.md,
// "Waking up"). I/O-free: the worker asks before each block that owes a wake-up and says how
// a held sleep ended; tests/droced/ack_hold_test.cc drives it with crafted blocks.
//
// Why. ib_write_lat 64 B at SCHED_RR, the client and both droced on one CPU of a 2-vCPU VM:
// the client's droced ends each round trip by acknowledging the server's WRITE. Flushed when
// that droced blocks, the wake-up runs the other droced (at SCHED_RR, before the client at the
// normal policy) for the ACK alone, ~13 us of a ~49 us round trip, before the client may look
// at the data it waits for. Held, the client runs first and posts its next WRITE; its droced,
// woken by the doorbell, sends the WRITE behind the ACK and wakes the peer once, for both.
//
// Never blind, never long:
//   - only acknowledgements (ACK, NAK): data, requests and responses wake the peer as before;
//   - only while a client of ours last woke us from this very CPU, recently (kClientRecentNs):
//     a hint that it runs here and needs the CPU (perftest's latency tools spin on memory, so
//     no verbs call can say so);
//   - only where an IdleWaker watches the CPU (the worker's part): if the client blocks
//     instead of posting, the CPU goes idle and that thread wakes the peer at once;
//   - never past kMaxHoldNs after the wake-up became owed: the worker's sleep ends by then
//     and it wakes the peer. This bound is for a client that keeps the CPU busy without
//     posting; it is longer than a scheduler tick (4 ms at HZ=250) on purpose: a sleep whose
//     timer is the CPU's next event reprograms the local APIC timer when it starts and again
//     when it is cancelled, and on the 2-vCPU VM a 50 us bound made the holding droced's run
//     about twice as long (ib_write_lat 64 B typical 27-31 us against 19-23 without holds);
//     at SCHED_RR epoll's timeout has no slack to merge it with the tick;
//   - a hold its bound ended stops holds for kQuietNs (a client that stopped answering).

#include <cstdint>

#include "core/clock.h"
#include "core/counter_table.h"

namespace droce::droced {

/// What each counts is in kAckHoldCounters.
struct AckHoldCounters {
  uint64_t held = 0;
  uint64_t paid = 0;
  uint64_t missed = 0;
  uint64_t idle = 0;
};

/// AckHoldCounters described once (core/counter_table.h): a worker's row of `droce cores`.
inline constexpr core::Counter<AckHoldCounters> kAckHoldCounters[] = {
    {"ack_holds", &AckHoldCounters::held, "blocks that kept an ACK-only wake-up owed"},
    {"ack_holds_paid", &AckHoldCounters::paid, "of those, ended by a client of ours (its next post came first)"},
    {"ack_holds_missed", &AckHoldCounters::missed, "of those, ended by the hold's bound: holds paused for kQuietNs"},
    {"ack_holds_idle", &AckHoldCounters::idle, "of those, sent when the CPU went idle (IdleWaker)"},
};
static_assert(core::covers(kAckHoldCounters));

class AckHold {
 public:
  /// The longest a held wake-up waits (see the header: past the next scheduler tick).
  static constexpr uint64_t kMaxHoldNs = 5'000'000;
  /// A hold leaves at least this much sleep (less is not worth a timer).
  static constexpr uint64_t kMinHoldNs = 2'000;
  /// A client's wake-up stamp older than this says nothing about where it runs now.
  static constexpr uint64_t kClientRecentNs = 1'000'000;
  /// No holds for this long after one missed.
  static constexpr uint64_t kQuietNs = 10'000'000;

  /// The worker sleeps whole microseconds: its timer may end a sleep this much before the bound.
  static constexpr uint64_t kTimerSlackNs = 1'000;

  struct Block {
    uint64_t now_ns = 0;
    uint64_t owed_since_ns = 0;  ///< when the wake-up became owed (0: none is)
    bool acks_only = false;      ///< every frame sent since was an acknowledgement
    core::WakeStamp client;      ///< the newest wake-up stamp of a client of this worker
    int cpu = -1;                ///< the CPU the worker runs on
  };
  /// How long the worker may sleep with the wake-up still owed, in ns; 0: wake the peer now.
  uint64_t hold_ns(const Block& b);

  /// Whether the wake-up owed now is for acknowledgements alone, from the engine's count of
  /// frames other than ACKs and NAKs (tx_frames - tx_acks): the worker tells it at the start of
  /// each loop whether a wake-up is owed, and asks before it blocks. The count seen last with
  /// none owed is the mark; any other frame since, and it is not.
  void loop_start(bool owed, uint64_t non_ack_frames) {
    if (!owed) non_acks_unowed_ = non_ack_frames;
  }
  bool acks_only(uint64_t non_ack_frames) const { return non_ack_frames == non_acks_unowed_; }

  /// client: its doorbell; idle: the CPU went idle and the peer was woken then; timer: the
  /// sleep's timer; other: anything else (the peer's frames, a socket).
  enum class End { client, idle, timer, other };
  /// After a sleep that hold_ns let keep its wake-up: what ended it, and when. A timer is a
  /// miss only at the hold's bound (an engine timer due earlier ends a sleep too).
  void after_hold(End how, uint64_t back_ns);

  const AckHoldCounters& counters() const { return counters_; }

 private:
  uint64_t quiet_until_ns_ = 0;
  uint64_t due_ns_ = 0;  ///< the last hold's bound
  uint64_t non_acks_unowed_ = 0;  ///< see loop_start
  AckHoldCounters counters_;
};

}  // namespace droce::droced
