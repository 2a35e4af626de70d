// YieldPolicy (droced/yield_policy.h): crafted yields in, when to yield out.
#include "droced/yield_policy.h"

#include <gtest/gtest.h>

namespace droce::droced {
namespace {

constexpr uint64_t kT0 = 1'000'000'000;

// A yield from `start_ns` that took `took_ns`, of which the peer ran `peer_ns`.
YieldPolicy::Yield yield_at(uint64_t start_ns, uint64_t took_ns, uint64_t peer_ns) {
  YieldPolicy::Yield y;
  y.start_ns = start_ns;
  y.back_ns = start_ns + took_ns;
  y.peer_ran_ns = peer_ns;
  return y;
}

// A loop at `now_ns` of a worker idle since `idle_since_ns`, its peer needing the CPU.
YieldPolicy::Loop idle(uint64_t now_ns, uint64_t idle_since_ns) {
  YieldPolicy::Loop l;
  l.now_ns = now_ns;
  l.idle_since_ns = idle_since_ns;
  l.peer_busy = true;
  return l;
}

YieldPolicy::Loop stuck(uint64_t now_ns) {
  YieldPolicy::Loop l = idle(now_ns, now_ns);
  l.stuck = true;
  return l;
}

TEST(YieldPolicy, ADisabledPolicyNeverYields) {
  const YieldPolicy p;
  EXPECT_FALSE(p.enabled());
  EXPECT_FALSE(p.should_yield(idle(kT0, kT0)));
  EXPECT_FALSE(p.should_yield(stuck(kT0)));
}

TEST(YieldPolicy, YieldsOnlyToAnAwakePeerThatNeedsTheCpu) {
  const YieldPolicy p(true);
  EXPECT_TRUE(p.should_yield(idle(kT0, kT0)));
  YieldPolicy::Loop l = idle(kT0, kT0);
  l.peer_busy = false;  // nothing of ours to take, or on another CPU, or not publishing
  EXPECT_FALSE(p.should_yield(l));
  l.stuck = true;
  EXPECT_FALSE(p.should_yield(l)) << "stuck on a ring a peer elsewhere empties: nothing to give it";
  l = idle(kT0, kT0);
  l.owed = true;  // the peer sleeps: the sleep that follows wakes it
  EXPECT_FALSE(p.should_yield(l));
  l.stuck = true;
  EXPECT_FALSE(p.should_yield(l));
}

TEST(YieldPolicy, YieldsOnlyWithinTheWindowAfterTheLastWorkUnlessStuck) {
  const YieldPolicy p(true);
  EXPECT_TRUE(p.should_yield(idle(kT0 + YieldPolicy::kWindowNs - 1, kT0)));
  EXPECT_FALSE(p.should_yield(idle(kT0 + YieldPolicy::kWindowNs, kT0))) << "idle this long: spin and block";
  YieldPolicy::Loop l = idle(kT0 + 10 * YieldPolicy::kWindowNs, kT0);
  l.stuck = true;
  EXPECT_TRUE(p.should_yield(l)) << "a full ring waits for the peer however long ago the last work was";
}

// The peer took the CPU and ran nearly all of the yield (the 1 QP turns): yields go on, even
// when the peer ran long (64 KiB WRITEs, hundreds of microseconds of copying).
TEST(YieldPolicy, AYieldThePeerRanGoesOnHoweverLongThePeerRan) {
  YieldPolicy p(true);
  uint64_t t = kT0;
  p.after_yield(yield_at(t, 30'000, 29'000));
  t += 30'000;
  p.after_yield(yield_at(t, 900'000, 890'000));
  t += 900'000;
  EXPECT_TRUE(p.should_yield(idle(t, t)));
  EXPECT_EQ(p.counters().yields, 2u);
  EXPECT_EQ(p.counters().crowded, 0u);
  // Up to kCrowdedNs that the peer did not run is the switches and the scheduler's own.
  p.after_yield(yield_at(t, YieldPolicy::kCrowdedNs + 5'000, 5'000));
  EXPECT_EQ(p.counters().crowded, 0u);
}

// A third task ran a slice during the yield (perftest spinning on the droceds' CPU): yields
// pause, for longer each time the CPU is still crowded, up to kMaxOffNs.
TEST(YieldPolicy, ASliceSomeoneElseRanPausesYieldsLongerEachTime) {
  YieldPolicy p(true);
  uint64_t t = kT0;
  const uint64_t slice = 1'500'000;
  p.after_yield(yield_at(t, slice + 10'000, 10'000));
  t += slice + 10'000;
  EXPECT_EQ(p.counters().crowded, 1u);
  EXPECT_TRUE(p.paused(t));
  EXPECT_FALSE(p.should_yield(idle(t, t)));
  EXPECT_FALSE(p.should_yield(stuck(t))) << "paused is paused, stuck or not";
  EXPECT_FALSE(p.should_yield(idle(t + YieldPolicy::kFirstOffNs - 1, t + YieldPolicy::kFirstOffNs - 1)));
  t += YieldPolicy::kFirstOffNs;
  EXPECT_TRUE(p.should_yield(idle(t, t))) << "the first pause is kFirstOffNs";
  uint64_t pause = YieldPolicy::kFirstOffNs;
  for (int i = 0; i < 8; ++i) {
    p.after_yield(yield_at(t, slice, 0));  // the peer did not run at all
    t += slice;
    pause = std::min(pause * 2, YieldPolicy::kMaxOffNs);
    EXPECT_FALSE(p.should_yield(idle(t + pause - 1, t + pause - 1))) << "crowded " << i + 2 << " times";
    t += pause;
    EXPECT_TRUE(p.should_yield(idle(t, t)));
  }
  EXPECT_EQ(pause, YieldPolicy::kMaxOffNs);
  EXPECT_EQ(p.counters().crowded, 9u);
  // A few clean yields between crowded ones do not reset the pause: a spinner leaves a gap.
  for (uint32_t i = 0; i + 1 < YieldPolicy::kForgetYields; ++i) {
    p.after_yield(yield_at(t, 20'000, 19'000));
    t += 20'000;
  }
  p.after_yield(yield_at(t, slice, 0));
  t += slice;
  EXPECT_FALSE(p.should_yield(idle(t + YieldPolicy::kMaxOffNs - 1, t + YieldPolicy::kMaxOffNs - 1)));
  t += YieldPolicy::kMaxOffNs;
  // After kForgetYields clean yields (a program that started up and is gone), the next crowded
  // one pauses only kFirstOffNs again, however soon it comes.
  for (uint32_t i = 0; i < YieldPolicy::kForgetYields; ++i) {
    p.after_yield(yield_at(t, 20'000, 19'000));
    t += 20'000;
  }
  p.after_yield(yield_at(t, slice, 0));
  t += slice;
  EXPECT_FALSE(p.should_yield(idle(t + YieldPolicy::kFirstOffNs - 1, t + YieldPolicy::kFirstOffNs - 1)));
  EXPECT_TRUE(p.should_yield(idle(t + YieldPolicy::kFirstOffNs, t + YieldPolicy::kFirstOffNs)));
}

// The peer's running time is another process's word: one that claims more than the whole
// yield (a stale or hostile value) judges the yield as the peer's, never as negative time.
TEST(YieldPolicy, APeerClaimingMoreThanTheYieldCountsAsTheWholeYield) {
  YieldPolicy p(true);
  p.after_yield(yield_at(kT0, 2'000'000, UINT64_MAX));
  EXPECT_EQ(p.counters().crowded, 0u);
  // A clock that went backwards (back before start) took nothing.
  YieldPolicy::Yield y;
  y.start_ns = kT0;
  y.back_ns = kT0 - 1;
  p.after_yield(y);
  EXPECT_EQ(p.counters().crowded, 0u);
  EXPECT_EQ(p.counters().yields, 2u);
}

}  // namespace
}  // namespace droce::droced
