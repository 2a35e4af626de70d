// RealtimeBudget (apps/droced/realtime_budget.h): crafted loops and blocks in, policy changes out.
#include "apps/droced/realtime_budget.h"

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
    b.after_block(t);
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
  b.after_block(kT0 + 51 * kBurst);
  // The budget counts from the end of that block, not from the start.
  EXPECT_EQ(b.on_loop(kT0 + 52 * kBurst - 1), Change::none);
  EXPECT_EQ(b.on_loop(kT0 + 52 * kBurst), Change::to_normal);
  EXPECT_EQ(b.on_loop(kT0 + 53 * kBurst), Change::none);
  EXPECT_EQ(b.counters().demotions, 2u);
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

}  // namespace
}  // namespace droce::droced
