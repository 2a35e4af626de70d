#pragma once
// PeerScheduling: an optional capability of a link whose peer is another
// process on the same host, for two ends that share CPUs to schedule each
// other: defer a wake-up the peer would preempt us for, yield the CPU to a
// peer that holds our frames, tell who woke us.
//
// Optional: Port::peer_scheduling() (Link::peer_scheduling()) is nullptr for
// links without it, every ethdev. droce_shm offers it (net/droce_shm_link.h;
// the mechanism, the ring header's sleeping flag, CPU and awake time, is
// ShmLink's, net/shm_link.h). Ask once, keep the pointer: it lives as long as
// the Port and never changes; after close() the calls do nothing and report
// nothing owed, no peer, 0.
//
// Threading: the thread that reads the link (the rx thread), except
// flush_wake, which another thread may call while that one is blocked
// (droced's IdleWaker), and the readers, from any thread.

#include <cstdint>

#include "core/clock.h"

namespace droce::net {

class PeerScheduling {
 public:
  /// Defer waking a peer that went to sleep on the CPU this end runs on, until
  /// this end blocks (flush_wake), half a ring is waiting, or the wake-up is
  /// late (flush_wake_if_late). Only for a sender that blocks when idle and
  /// calls both flushes (droced's single event-mode worker).
  virtual void set_defer_wakes(bool on) = 0;
  /// Writes a wake-up deferred since; call before blocking.
  virtual void flush_wake() = 0;
  /// Writes a deferred wake-up that has waited too long by `now_ns`.
  virtual void flush_wake_if_late(uint64_t now_ns) = 0;
  /// A deferred wake-up is owed, and since when (0: none is).
  virtual bool wake_owed() const = 0;
  virtual uint64_t wake_owed_since_ns() const = 0;

  /// For two ends that share a CPU and hand it over by yielding: true while the
  /// peer is awake, last ran on `cpu` and holds frames of ours, so that it needs
  /// the CPU and no wake-up. Never for a peer that does not publish_running.
  virtual bool peer_busy_with_ours(int cpu) const = 0;
  /// True while the peer is awake and last ran on `cpu`, whatever it holds.
  virtual bool peer_awake_on(int cpu) const = 0;
  /// Writes, each loop, the CPU this end runs on and its awake time (a
  /// monotonic clock less the time spent yielding or blocked).
  virtual void publish_running(int cpu, uint64_t awake_ns) = 0;
  /// The peer's awake time as it last published it (0: none, or the link is down).
  virtual uint64_t peer_awake_ns() const = 0;
  /// When and from which CPU the peer last woke this end.
  virtual core::WakeStamp wake_stamp() const = 0;

 protected:
  PeerScheduling() = default;
  ~PeerScheduling() = default;  // owned through its Link, never deleted through this
};

}  // namespace droce::net
