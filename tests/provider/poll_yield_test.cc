// EmptyPollYield (provider/verbs/poll_yield.h): when a thread whose CQ polls
// keep finding nothing gives its CPU away, and what DROCE_POLL_YIELD may say.
#include "provider/verbs/poll_yield.h"

#include <gtest/gtest.h>

namespace droce::provider {
namespace {

// How many polls in a row, all empty, until the first yield, and whether the count starts again.
TEST(EmptyPollYield, YieldsAfterEveryNEmptyPollsInARow) {
  EmptyPollYield p(4);
  for (int round = 0; round < 3; ++round) {
    EXPECT_FALSE(p.after_poll(false));
    EXPECT_FALSE(p.after_poll(false));
    EXPECT_FALSE(p.after_poll(false));
    EXPECT_TRUE(p.after_poll(false)) << "round " << round;
  }
}

TEST(EmptyPollYield, APollThatFindsACompletionStartsTheCountAgain) {
  EmptyPollYield p(3);
  EXPECT_FALSE(p.after_poll(false));
  EXPECT_FALSE(p.after_poll(false));
  EXPECT_FALSE(p.after_poll(true)) << "a poll that found something never yields";
  EXPECT_FALSE(p.after_poll(false));
  EXPECT_FALSE(p.after_poll(false));
  EXPECT_TRUE(p.after_poll(false));
}

TEST(EmptyPollYield, ZeroNeverYields) {
  EmptyPollYield p(0);
  for (int i = 0; i < 10000; ++i) ASSERT_FALSE(p.after_poll(false));
}

TEST(EmptyPollYield, OneYieldsAtEachEmptyPoll) {
  EmptyPollYield p(1);
  EXPECT_TRUE(p.after_poll(false));
  EXPECT_TRUE(p.after_poll(false));
  EXPECT_FALSE(p.after_poll(true));
}

TEST(EmptyPollYield, TheDefaultAndWhatTheEnvironmentMaySay) {
  EXPECT_EQ(EmptyPollYield::every_from(nullptr), EmptyPollYield::kDefaultEvery);
  EXPECT_EQ(EmptyPollYield::every_from(""), EmptyPollYield::kDefaultEvery);
  EXPECT_EQ(EmptyPollYield::every_from("0"), 0u);
  EXPECT_EQ(EmptyPollYield::every_from("32"), 32u);
  EXPECT_EQ(EmptyPollYield::every_from("1000000"), 1'000'000u);
  // Anything else is ignored, not half read.
  EXPECT_EQ(EmptyPollYield::every_from("1000001"), EmptyPollYield::kDefaultEvery);
  EXPECT_EQ(EmptyPollYield::every_from("-1"), EmptyPollYield::kDefaultEvery);
  EXPECT_EQ(EmptyPollYield::every_from("12x"), EmptyPollYield::kDefaultEvery);
  EXPECT_EQ(EmptyPollYield::every_from("never"), EmptyPollYield::kDefaultEvery);
  EmptyPollYield d;
  for (uint32_t i = 1; i < EmptyPollYield::kDefaultEvery; ++i) ASSERT_FALSE(d.after_poll(false));
  EXPECT_TRUE(d.after_poll(false));
}

// A yield that came back at once found nothing else to run: the next comes after twice as many
// empty polls, up to kMaxGrowth times the base; one that gave the CPU away sets the base again.
TEST(EmptyPollYield, AYieldThatFoundTheCpuFreeMakesTheNextOneRarer) {
  EmptyPollYield p(4);
  auto polls_to_yield = [&p] {
    uint32_t n = 1;
    while (!p.after_poll(false)) ++n;
    return n;
  };
  EXPECT_EQ(polls_to_yield(), 4u);
  p.after_yield(300);  // alone on the CPU
  EXPECT_EQ(p.every(), 8u);
  EXPECT_EQ(polls_to_yield(), 8u);
  for (int i = 0; i < 20; ++i) p.after_yield(EmptyPollYield::kAloneNs - 1);
  EXPECT_EQ(p.every(), 4u * EmptyPollYield::kMaxGrowth) << "grows no further";
  EXPECT_EQ(polls_to_yield(), 4u * EmptyPollYield::kMaxGrowth);
  p.after_yield(EmptyPollYield::kAloneNs);  // another task ran
  EXPECT_EQ(p.every(), 4u);
  EXPECT_EQ(polls_to_yield(), 4u);
}

}  // namespace
}  // namespace droce::provider
