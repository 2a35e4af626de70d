// RealtimeBudget (droced/realtime_budget.h): crafted loops and blocks in, policy changes out.
#include "droced/realtime_budget.h"

#include <gtest/gtest.h>

namespace droce::droced {
namespace {

using Change = RealtimeBudget::Change;
constexpr uint64_t kT0 = 1'000'000'000;
constexpr uint64_t kBurst = RealtimeBudget::kBurstNs;

TEST(RealtimeBudget, ADisabledBudgetChangesNothing) {
  RealtimeBudget b(false, kT0);
  EXPECT_FALSE(b.realtime());
  EXPECT_EQ(b.on_loop(kT0 + 100 * kBurst), Change::none);
  EXPECT_EQ(b.before_block(), Change::none);
  EXPECT_EQ(b.counters().demotions, 0u);
}

TEST(RealtimeBudget, AWorkerThatBlocksOftenStaysRealtime) {
  RealtimeBudget b(true, kT0);
  uint64_t t = kT0;
  for (int i = 0; i < 1000; ++i) {  // busy just under the budget between blocks, for 2 s
    t += kBurst - 1;
    EXPECT_EQ(b.on_loop(t), Change::none);
    EXPECT_EQ(b.before_block(), Change::none);
    t += 10 * kBurst;  // a long sleep is no work
    EXPECT_EQ(b.after_block(t, /*slept=*/true), Change::none);
  }
  EXPECT_TRUE(b.realtime());
  EXPECT_EQ(b.counters().demotions, 0u);
}

TEST(RealtimeBudget, ABurstPastTheBudgetGoesNormalOnceAndTheNextBlockTakesRealtimeBack) {
  RealtimeBudget b(true, kT0);
  EXPECT_EQ(b.on_loop(kT0 + kBurst - 1), Change::none);
  EXPECT_EQ(b.on_loop(kT0 + kBurst), Change::to_normal);
  EXPECT_FALSE(b.realtime());
  EXPECT_EQ(b.on_loop(kT0 + 50 * kBurst), Change::none) << "told once, not every loop";
  EXPECT_EQ(b.before_block(), Change::to_realtime) << "what wakes it must find it at SCHED_RR";
  EXPECT_TRUE(b.realtime());
  EXPECT_EQ(b.before_block(), Change::none);
  EXPECT_EQ(b.after_block(kT0 + 51 * kBurst, /*slept=*/true), Change::none);
  // The budget counts from the end of that block, not from the start.
  EXPECT_EQ(b.on_loop(kT0 + 52 * kBurst - 1), Change::none);
  EXPECT_EQ(b.on_loop(kT0 + 52 * kBurst), Change::to_normal);
  EXPECT_EQ(b.on_loop(kT0 + 53 * kBurst), Change::none);
  EXPECT_EQ(b.counters().demotions, 2u);
}

// A wait whose event was already there (a descriptor left readable) returns without leaving the
// CPU: no rest. Counted as one, a worker stuck on a full ring kept SCHED_RR while it "blocked"
// 270 000 times in half a second, and the peer that had to empty the ring never ran.
TEST(RealtimeBudget, AWaitThatDidNotSleepIsNoRest) {
  RealtimeBudget b(true, kT0);
  uint64_t t = kT0;
  for (int i = 0; i < 7; ++i) {  // waits that return at once, 0.3 ms apart: 2.1 ms in all
    t += kBurst * 3 / 40;
    EXPECT_EQ(b.on_loop(t), Change::none);
    EXPECT_EQ(b.before_block(), Change::none);
    t += kBurst * 3 / 40;
    ASSERT_EQ(b.after_block(t, /*slept=*/false), i < 6 ? Change::none : Change::to_normal) << i;
  }
  EXPECT_FALSE(b.realtime());
  EXPECT_EQ(b.counters().demotions, 1u);
  // Each later wait takes SCHED_RR back (it may sleep), and one that did not sleep gives it up
  // again at once: at the normal policy but for the wait itself.
  EXPECT_EQ(b.before_block(), Change::to_realtime);
  EXPECT_EQ(b.after_block(t + 1000, /*slept=*/false), Change::to_normal);
  EXPECT_EQ(b.counters().demotions, 2u);
  // A wait that slept is a rest: SCHED_RR kept, the budget full again.
  EXPECT_EQ(b.before_block(), Change::to_realtime);
  EXPECT_EQ(b.after_block(t + 2000, /*slept=*/true), Change::none);
  EXPECT_TRUE(b.realtime());
  EXPECT_EQ(b.on_loop(t + 2000 + kBurst - 1), Change::none);
}

TEST(RealtimeBudget, DisabledAfterARefusalItChangesNothingAndKeepsItsCounts) {
  RealtimeBudget b(true, kT0);
  EXPECT_EQ(b.on_loop(kT0 + kBurst), Change::to_normal);
  b.disable();  // taking SCHED_RR back was refused
  EXPECT_FALSE(b.realtime());
  EXPECT_EQ(b.before_block(), Change::none);
  EXPECT_EQ(b.on_loop(kT0 + 10 * kBurst), Change::none);
  EXPECT_EQ(b.counters().demotions, 1u);
}

TEST(RealtimeBudget, TheBudgetStartsWhenTheWorkerDoes) {
  RealtimeBudget b(true, kT0);
  EXPECT_EQ(b.on_loop(kT0 + kBurst / 2), Change::none);
  EXPECT_EQ(b.on_loop(kT0 + kBurst), Change::to_normal);
}

// RtRescue gave a starved worker SCHED_RR back from outside: realtime again, a full budget
// from then, counted; a budget never enabled is left alone.
TEST(RealtimeBudget, ARescueIsARestAndIsCounted) {
  RealtimeBudget b(true, kT0);
  EXPECT_EQ(b.on_loop(kT0 + kBurst), Change::to_normal);
  b.rescued(kT0 + 400 * kBurst);  // it did not run for 400 budgets
  EXPECT_TRUE(b.realtime());
  EXPECT_EQ(b.counters().rescues, 1u);
  EXPECT_EQ(b.before_block(), Change::none) << "already at SCHED_RR: nothing to take back";
  EXPECT_EQ(b.on_loop(kT0 + 401 * kBurst - 1), Change::none);
  EXPECT_EQ(b.on_loop(kT0 + 401 * kBurst), Change::to_normal) << "and past a new budget, normal again";
  EXPECT_EQ(b.counters().demotions, 2u);
  RealtimeBudget off;
  off.rescued(kT0);
  EXPECT_FALSE(off.realtime());
  EXPECT_EQ(off.counters().rescues, 0u);
}

// SleepJudge: a long wait is a sleep without the system call; a short one only if the switch
// count moved since a read that is still current.
struct SwitchCounter {
  uint64_t count = 0;
  bool ok = true;
  int reads = 0;
  auto reader() {
    return [this](uint64_t* n) {
      ++reads;
      if (ok) *n = count;
      return ok;
    };
  }
};

TEST(SleepJudge, AWaitAsLongAsASleepIsOneWithoutReadingTheCount) {
  SleepJudge j;
  SwitchCounter c;
  EXPECT_TRUE(j.slept(SleepJudge::kSurelySleptNs, c.reader()));
  EXPECT_TRUE(j.slept(50'000, c.reader()));
  EXPECT_EQ(c.reads, 0);
}

TEST(SleepJudge, AShortWaitSleptOnlyIfTheCountMoved) {
  SleepJudge j;
  SwitchCounter c;
  c.count = 7;
  EXPECT_FALSE(j.slept(500, c.reader())) << "the first read has nothing to compare with";
  EXPECT_FALSE(j.slept(500, c.reader())) << "the count did not move: the event was already there";
  c.count = 8;
  EXPECT_TRUE(j.slept(SleepJudge::kSurelySleptNs - 1, c.reader()));
  EXPECT_EQ(c.reads, 3);
}

TEST(SleepJudge, TheCountIsStaleAfterAWaitJudgedByItsLength) {
  SleepJudge j;
  SwitchCounter c;
  c.count = 3;
  EXPECT_FALSE(j.slept(500, c.reader()));  // a baseline: 3
  c.count = 4;                              // the long wait's own switch
  EXPECT_TRUE(j.slept(40'000, c.reader()));
  // A wait that found its event: 4 against the baseline 3 would read as a sleep.
  EXPECT_FALSE(j.slept(500, c.reader()));
  c.count = 5;
  EXPECT_TRUE(j.slept(500, c.reader())) << "current again after a read";
}

TEST(SleepJudge, AFailedReadIsNoRestAndLeavesNoBaseline) {
  SleepJudge j;
  SwitchCounter c;
  c.count = 1;
  EXPECT_FALSE(j.slept(500, c.reader()));
  c.ok = false;
  c.count = 2;
  EXPECT_FALSE(j.slept(500, c.reader()));
  c.ok = true;
  c.count = 3;
  EXPECT_FALSE(j.slept(500, c.reader())) << "compared with a count from before the failed read";
  c.count = 4;
  EXPECT_TRUE(j.slept(500, c.reader()));
}

}  // namespace
}  // namespace droce::droced
