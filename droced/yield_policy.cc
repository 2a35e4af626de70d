#include "droced/yield_policy.h"

#include <algorithm>

namespace droce::droced {

void YieldPolicy::after_yield(const Yield& y) {
  ++counters_.yields;
  const uint64_t took = y.back_ns > y.start_ns ? y.back_ns - y.start_ns : 0;
  // The peer's clock and ours are one machine's monotonic clock: what it ran is part of
  // what the yield took, but a peer that published late (it was preempted mid-loop) may
  // claim less; never more than the whole.
  const uint64_t others = took - std::min(took, y.peer_ran_ns);
  if (others <= kCrowdedNs) {
    if (clean_yields_ < kForgetYields) ++clean_yields_;
    return;
  }
  ++counters_.crowded;
  const bool again = pause_ns_ != 0 && clean_yields_ < kForgetYields;
  pause_ns_ = again ? std::min(pause_ns_ * 2, kMaxOffNs) : kFirstOffNs;
  clean_yields_ = 0;
  paused_until_ns_ = y.back_ns + pause_ns_;
}

}  // namespace droce::droced
