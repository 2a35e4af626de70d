#pragma once
// Time for driver loops: a virtual clock for deterministic simulation, and the
// real monotonic clock.
//
// The transport engine reads no clock: it takes `now` (ns) as an argument.
// Whoever drives it owns the time. A simulation advances a VirtualClock,
// typically straight to the next event (SimLink::next_arrival_ns, the engine's
// next timer), so seconds of protocol time run in milliseconds and replay
// identically. A real loop reads monotonic_ns() once per iteration.
//
// Threading: a VirtualClock is a plain value; share it between threads only
// with external synchronisation. monotonic_ns() is safe from any thread.

#include <time.h>

#include <cstdint>

namespace droce::core {

class VirtualClock {
 public:
  explicit VirtualClock(uint64_t start_ns = 0) : now_ns_(start_ns) {}

  uint64_t now_ns() const { return now_ns_; }

  /// Moves time forward by `ns`, saturating at UINT64_MAX.
  void advance(uint64_t ns) { now_ns_ = ns > UINT64_MAX - now_ns_ ? UINT64_MAX : now_ns_ + ns; }

  /// Moves time to `t_ns`. Time never goes backwards: an earlier `t_ns` is a
  /// no-op. (A driver that jumps to "no next event", UINT64_MAX, ends time.)
  void advance_to(uint64_t t_ns) {
    if (t_ns > now_ns_) now_ns_ = t_ns;
  }

 private:
  uint64_t now_ns_;
};

/// CLOCK_MONOTONIC in ns: real time for loops that run against the world.
/// A syscall-free vDSO read on Linux, but still one read per loop, not per packet.
inline uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

/// CLOCK_REALTIME in ns: wall-clock time, for what leaves the process (a capture's timestamps).
inline uint64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

/// How far CLOCK_REALTIME is ahead of CLOCK_MONOTONIC now, in ns: what turns a time on one into
/// the other (the kernel's packet timestamps are realtime, droce's loops monotonic).
inline int64_t realtime_ahead_of_monotonic_ns() {
  const uint64_t mono = monotonic_ns();
  return static_cast<int64_t>(realtime_ns()) - static_cast<int64_t>(mono);
}

/// When something woke a sleeping thread, and from which CPU: what a waker leaves in shared
/// memory beside its eventfd write (a client's doorbell, the same-host link), a hint the
/// woken thread uses to judge its spin (droced/spin_policy.h). Never trusted beyond that.
struct WakeStamp {
  uint64_t ns = 0;  ///< CLOCK_MONOTONIC; 0: none
  int cpu = -1;     ///< -1: unknown
};

}  // namespace droce::core
