// SpinPolicy (droced/spin_policy.h): crafted sleeps in, the spin out.
#include "droced/spin_policy.h"

#include <gtest/gtest.h>

namespace droce::droced {
namespace {

constexpr int kHere = 0;
constexpr int kElsewhere = 1;
constexpr uint64_t kT0 = 1'000'000'000;

// A sleep that began when a whole spin ended at kT0, that an event raised `after_ns` later
// on `cpu` ended, the worker running again `wake_ns` after the event.
SpinPolicy::Sleep woken(uint64_t after_ns, int cpu, uint64_t wake_ns = SpinPolicy::kFirstWakeNs) {
  SpinPolicy::Sleep s;
  s.spin_end_ns = kT0;
  s.by_event = true;
  s.waker = {kT0 + after_ns, cpu};
  s.back_ns = kT0 + after_ns + wake_ns;
  s.cpu = kHere;
  return s;
}

SpinPolicy::Sleep timed_out() {
  SpinPolicy::Sleep s;
  s.spin_end_ns = kT0;
  s.back_ns = kT0 + 50'000;
  s.cpu = kHere;
  return s;
}

// A worker whose next event always comes `gap_ns` after its last work, `rounds` times:
// each spin shorter than the gap ends in a sleep that the event, raised on `cpu`, ends.
void run_gaps(SpinPolicy* p, uint64_t gap_ns, int cpu, int rounds, uint64_t wake_ns = SpinPolicy::kFirstWakeNs) {
  for (int i = 0; i < rounds; ++i) {
    if (p->spin_ns() >= gap_ns) continue;  // the spin caught it: no sleep
    p->after_sleep(woken(gap_ns - p->spin_ns(), cpu, wake_ns));
  }
}

TEST(SpinPolicy, StartsAtFourMicroseconds) {
  SpinPolicy p;
  EXPECT_EQ(p.spin_ns(), 4'000u);
  EXPECT_EQ(p.wake_ns(), SpinPolicy::kFirstWakeNs);
}

TEST(SpinPolicy, EventsSoonAfterTheSpinGrowItPastTheWakeUpCost) {
  // The client posts 3 us after the last work, from the other CPU. The worker is back 4 us
  // after each post; judged by that (before this policy), the spin sank to 1 us and stayed.
  SpinPolicy p;
  for (int i = 0; i < 5; ++i) p.after_sleep(timed_out());
  ASSERT_EQ(p.spin_ns(), SpinPolicy::kMinNs);
  run_gaps(&p, 3'000, kElsewhere, 20);
  EXPECT_EQ(p.spin_ns(), 4'000u);
  EXPECT_EQ(p.counters().grown, 2u) << "1 -> 2 -> 4 us, then every post is caught spinning";
  // 3 us past a 4 us spin: within a wake-up.
  SpinPolicy q;
  run_gaps(&q, 7'000, kElsewhere, 20);
  EXPECT_EQ(q.spin_ns(), 8'000u);
  // 6 us past an 8 us spin: more than a wake-up, but within a doubled spin.
  run_gaps(&q, 14'000, kElsewhere, 20);
  EXPECT_EQ(q.spin_ns(), 16'000u);
}

TEST(SpinPolicy, EventsLaterThanAWakeUpPastTheSpinShrinkIt) {
  SpinPolicy p;
  p.after_sleep(woken(SpinPolicy::kFirstWakeNs, kElsewhere));
  EXPECT_EQ(p.spin_ns(), 2'000u) << "an event a whole wake-up past the spin's end";
  run_gaps(&p, 30'000, kElsewhere, 20);
  EXPECT_EQ(p.spin_ns(), SpinPolicy::kMinNs);
  EXPECT_EQ(p.counters().grown, 0u);
  EXPECT_EQ(p.counters().shrunk, 21u);
}

TEST(SpinPolicy, SlowWakeUpsMakeLongerSpinsPay) {
  // The worker's CPU halts while it sleeps (a VM's idle vCPU): each wake-up takes 30 us. A
  // post 20 us after the last work is then worth spinning for.
  SpinPolicy p;
  run_gaps(&p, 20'000, kElsewhere, 40, 30'000);
  EXPECT_GT(p.wake_ns(), 15'000u);  // sleeps stop once the spin catches the posts
  EXPECT_EQ(p.spin_ns(), 32'000u);
  // The same posts with 3 us wake-ups (a busy CPU): not worth it.
  SpinPolicy q;
  run_gaps(&q, 20'000, kElsewhere, 40, 3'000);
  EXPECT_LT(q.wake_ns(), 4'000u);
  EXPECT_EQ(q.spin_ns(), SpinPolicy::kMinNs);
}

TEST(SpinPolicy, TheWakeUpAverageFollowsAndSkipsWhatIsNoWakeUp) {
  SpinPolicy p;
  for (int i = 0; i < 40; ++i) p.after_sleep(woken(50'000, kElsewhere, 10'000));
  EXPECT_NEAR(double(p.wake_ns()), 10'000.0, 200.0);
  const uint64_t before = p.wake_ns();
  p.after_sleep(woken(50'000, kElsewhere, 5'000'000));  // descheduled for 5 ms: not a wake-up
  SpinPolicy::Sleep s = woken(50'000, kElsewhere, 0);
  s.back_ns = s.waker.ns - 1;  // a stamp after the worker was back: a later event's
  p.after_sleep(s);
  p.after_sleep(woken(50'000, kHere, 200));  // our own CPU's waker ran only once we slept
  EXPECT_EQ(p.wake_ns(), before);
}

TEST(SpinPolicy, StaysWithinItsBounds) {
  SpinPolicy p;
  for (int i = 0; i < 50; ++i) p.after_sleep(woken(0, kElsewhere));
  EXPECT_EQ(p.spin_ns(), SpinPolicy::kMaxNs);
  for (int i = 0; i < 50; ++i) p.after_sleep(woken(1'000'000, kElsewhere));
  EXPECT_EQ(p.spin_ns(), SpinPolicy::kMinNs);
}

TEST(SpinPolicy, AWakerOnOurCpuShrinksIt) {
  // It ran because we stopped spinning: a longer spin would only have delayed it.
  SpinPolicy p;
  p.after_sleep(woken(500, kHere));
  EXPECT_EQ(p.spin_ns(), 2'000u);
  EXPECT_EQ(p.counters().woken_here, 1u);
}

TEST(SpinPolicy, NoStampOrTimerShrinksIt) {
  SpinPolicy p;
  SpinPolicy::Sleep s = woken(500, kElsewhere);
  s.waker = {};  // the control socket, an older client: nothing says when
  p.after_sleep(s);
  EXPECT_EQ(p.spin_ns(), 2'000u);
  p.after_sleep(timed_out());
  EXPECT_EQ(p.spin_ns(), 1'000u);
  EXPECT_EQ(p.wake_ns(), SpinPolicy::kFirstWakeNs);
}

TEST(SpinPolicy, AStampJustBeforeTheEndCountsAsSoon) {
  // Two CPUs' clocks a little apart.
  SpinPolicy p;
  SpinPolicy::Sleep s = woken(0, kElsewhere);
  s.waker.ns = kT0 - 200;
  p.after_sleep(s);
  EXPECT_EQ(p.spin_ns(), 8'000u);
}

TEST(SpinPolicy, SleepsForAPeerOnOurCpuLeaveItButTimeTheirWakeUp) {
  SpinPolicy p;
  SpinPolicy::Sleep s = woken(500, kElsewhere, 20'000);
  s.for_peer = true;
  p.after_sleep(s);
  s.by_event = false;
  p.after_sleep(s);
  EXPECT_EQ(p.spin_ns(), SpinPolicy::kFirstNs);
  EXPECT_EQ(p.counters().unjudged, 2u);
  EXPECT_EQ(p.wake_ns(), (SpinPolicy::kFirstWakeNs * 7 + 20'000) / 8);
}

TEST(SpinPolicy, AFixedSpinNeverMoves) {
  SpinPolicy p(10'000);
  for (int i = 0; i < 5; ++i) p.after_sleep(woken(0, kElsewhere));
  for (int i = 0; i < 5; ++i) p.after_sleep(woken(50'000, kHere));
  EXPECT_EQ(p.spin_ns(), 10'000u);
  SpinPolicy none(0);  // --idle-spin-us 0: block at once
  none.after_sleep(woken(0, kElsewhere));
  EXPECT_EQ(none.spin_ns(), 0u);
}

}  // namespace
}  // namespace droce::droced
