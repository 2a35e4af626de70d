// FrameLoss (droced --drop-rate): no loss at rate 0, all at 100 %, close to
// the rate in between, the same frames for the same seed, and no long runs
// that would make "1 %" act like a link outage.

#include "net/frame_loss.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace droce::net {
namespace {

std::vector<bool> draws(FrameLoss loss, int n) {
  std::vector<bool> out;
  for (int i = 0; i < n; ++i) out.push_back(loss.drop());
  return out;
}

int count(const std::vector<bool>& v) {
  int n = 0;
  for (bool b : v) n += b;
  return n;
}

TEST(FrameLoss, ZeroRateNeverDrops) {
  FrameLoss loss(0, 7);
  EXPECT_FALSE(loss.enabled());
  EXPECT_EQ(count(draws(loss, 100000)), 0);
}

TEST(FrameLoss, FullRateDropsEveryFrame) {
  EXPECT_EQ(count(draws(FrameLoss(FrameLoss::kMillion, 7), 100000)), 100000);
}

TEST(FrameLoss, DropsCloseToTheRate) {
  // 1 %: 10000 of a million expected; the draw is deterministic, the bound is
  // 5 standard deviations (sqrt(9900) ~ 100).
  for (uint64_t seed : {1ull, 42ull, 0xdeadbeefull}) {
    const int got = count(draws(FrameLoss(10000, seed), 1000000));
    EXPECT_NEAR(got, 10000, 500) << "seed " << seed;
  }
  // 50 %.
  EXPECT_NEAR(count(draws(FrameLoss(500000, 3), 100000)), 50000, 800);
}

TEST(FrameLoss, SameSeedSameFramesOtherSeedOthers) {
  const auto a = draws(FrameLoss(100000, 5), 10000);
  EXPECT_EQ(a, draws(FrameLoss(100000, 5), 10000));
  EXPECT_NE(a, draws(FrameLoss(100000, 6), 10000));
  // Seed 0 works (xorshift would be stuck at zero and never drop).
  EXPECT_GT(count(draws(FrameLoss(100000, 0), 10000)), 500);
}

TEST(FrameLoss, LossesAreSpreadOut) {
  // At 1 %, the longest run of consecutive losses in a million frames stays
  // short (a run of 6 has probability 1e-12 per frame).
  FrameLoss loss(10000, 9);
  int run = 0, longest = 0;
  for (int i = 0; i < 1000000; ++i) {
    run = loss.drop() ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  EXPECT_LE(longest, 5);
  EXPECT_GE(longest, 2);
}

}  // namespace
}  // namespace droce::net
