#include "droced/spin_policy.h"

#include <algorithm>

namespace droce::droced {

void SpinPolicy::after_sleep(const Sleep& s) {
  const bool stamped = s.by_event && s.waker.ns != 0;
  const bool here = stamped && s.cpu >= 0 && s.waker.cpu == s.cpu;
  if (stamped && !here && s.back_ns >= s.waker.ns && s.back_ns - s.waker.ns <= kMaxWakeSampleNs) {
    // A moving average over about eight wake-ups: quick to follow the CPU going idle or busy.
    wake_ns_ = (wake_ns_ * 7 + (s.back_ns - s.waker.ns)) / 8;
  }
  if (fixed_) return;
  if (s.for_peer) {
    ++counters_.unjudged;
    return;
  }
  // A waker stamps after it saw our sleeping flag, set after the spin ended; a stamp a
  // little before the end is the CPUs' clocks disagreeing: soon.
  const uint64_t after_end = s.waker.ns > s.spin_end_ns ? s.waker.ns - s.spin_end_ns : 0;
  if (stamped && !here && after_end < std::max(spin_ns_, wake_ns_)) {
    spin_ns_ = std::min(spin_ns_ * 2, kMaxNs);
    ++counters_.grown;
    return;
  }
  spin_ns_ = std::max(spin_ns_ / 2, kMinNs);
  ++counters_.shrunk;
  if (here) ++counters_.woken_here;
}

}  // namespace droce::droced
