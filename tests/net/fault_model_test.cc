// The fault model (net/fault_model.h) alone: the text form both ways and its errors, each fault
// at its rate with fixed seeds, the same fates for the same seed, a fault turned on or off not
// changing another's dice, and where corruption and truncation land.

#include "net/fault_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace droce::net {
namespace {

// A RoCE frame of 1078 bytes: 58 bytes of headers (Ethernet, IPv4, UDP, BTH), 1016 of payload, the ICRC.
const FrameRegions kRoceFrame{1078, 58, 1016, 4};

FaultSpec spec(std::string_view text) {
  FaultSpec s;
  EXPECT_EQ(s.parse(text), "") << text;
  return s;
}

std::vector<FrameFate> fates(const FaultSpec& f, uint64_t seed, int n, FrameRegions r = kRoceFrame) {
  FaultDice dice(seed);
  std::vector<FrameFate> out;
  for (int i = 0; i < n; ++i) out.push_back(dice.roll(f, r));
  return out;
}

template <class Pred>
int count(const std::vector<FrameFate>& v, Pred p) {
  return static_cast<int>(std::count_if(v.begin(), v.end(), p));
}

TEST(FaultSpecText, ParsesEveryKeyAndUnits) {
  const FaultSpec s = spec("drop=1%,burst=2%/50%/80%,delay=2ms,jitter=500ns,reorder=5,window=50us,"
                           "duplicate=0.5%,corrupt=0.1%,corrupt-at=payload,truncate=3%");
  EXPECT_DOUBLE_EQ(s.loss, 0.01);
  EXPECT_DOUBLE_EQ(s.burst_enter, 0.02);
  EXPECT_DOUBLE_EQ(s.burst_exit, 0.5);
  EXPECT_DOUBLE_EQ(s.burst_loss, 0.8);
  EXPECT_EQ(s.delay_ns, 2'000'000u);
  EXPECT_EQ(s.jitter_ns, 500u);
  EXPECT_DOUBLE_EQ(s.reorder, 0.05);
  EXPECT_EQ(s.reorder_window_ns, 50'000u);
  EXPECT_DOUBLE_EQ(s.duplicate, 0.005);
  EXPECT_DOUBLE_EQ(s.corrupt, 0.001);
  EXPECT_EQ(s.corrupt_target, CorruptTarget::payload);
  EXPECT_DOUBLE_EQ(s.truncate, 0.03);
  EXPECT_EQ(spec("delay=20").delay_ns, 20'000u);  // bare times are microseconds
  EXPECT_EQ(spec("delay=1s").delay_ns, 1'000'000'000u);
}

TEST(FaultSpecText, RoundTripsAndNoneIsNothing) {
  const FaultSpec s = spec("drop=1%,delay=100us,jitter=20us,reorder=5%,window=50us,corrupt=1%,corrupt-at=icrc");
  FaultSpec back;
  ASSERT_EQ(back.parse(s.to_string()), "") << s.to_string();
  EXPECT_EQ(back, s);
  EXPECT_EQ(FaultSpec{}.to_string(), "none");
  EXPECT_FALSE(spec("none").any());
  EXPECT_FALSE(spec("").any());
  EXPECT_TRUE(spec("delay=1us").any());
  EXPECT_TRUE(spec("delay=1us").holds());
  EXPECT_FALSE(spec("drop=50%").holds());
}

TEST(FaultSpecText, ArrivalSaysWhatTimesAFrameAndIsNoFaultOfItsOwn) {
  EXPECT_FALSE(FaultSpec{}.loop_arrival);  // wire: a link's receive stamp where there is one
  EXPECT_FALSE(spec("rate=1gbit,arrival=wire").loop_arrival);
  const FaultSpec loop = spec("rate=1gbit,ecn-min=20k,ecn-max=100k,ecn-pmax=20%,arrival=loop");
  EXPECT_TRUE(loop.loop_arrival);
  FaultSpec back;
  ASSERT_EQ(back.parse(loop.to_string()), "") << loop.to_string();
  EXPECT_EQ(back, loop);
  EXPECT_EQ(spec("rate=1gbit,arrival=wire").to_string(), "rate=1gbit");  // the default is not written
  EXPECT_FALSE(spec("arrival=loop").any());
  FaultSpec s;
  EXPECT_NE(s.parse("arrival=kernel"), "");
}

TEST(FaultSpecText, PfcMakesACongestionPointLosslessWithXonHalfOfXoffUnlessGiven) {
  const FaultSpec s = spec("rate=1gbit,buffer=2m,pfc-xoff=512k");
  EXPECT_EQ(s.queue.pfc.xoff, 512u * 1024);
  EXPECT_EQ(s.queue.pfc.xon, 256u * 1024);
  EXPECT_EQ(s.queue.pfc.quanta, 0xffff);
  EXPECT_EQ(s.to_string(), "rate=1gbit,buffer=2m,pfc-xoff=512k,pfc-xon=256k");
  const FaultSpec t = spec("rate=1gbit,buffer=2m,pfc-xon=100k,pfc-xoff=512k,pfc-quanta=1000");
  EXPECT_EQ(t.queue.pfc.xon, 100u * 1024);
  EXPECT_EQ(t.queue.pfc.quanta, 1000);
  FaultSpec back;
  ASSERT_EQ(back.parse(t.to_string()), "") << t.to_string();
  EXPECT_EQ(back, t);
  // pfc-xoff=0 turns it off again.
  EXPECT_FALSE(spec("rate=1gbit,pfc-xoff=0").queue.pfc.any());
  // What cannot work: no queue, xon not below xoff, no headroom, quanta out of 1..65535.
  FaultSpec bad;
  for (const char* text : {"pfc-xoff=10k", "rate=1gbit,pfc-xoff=10k,pfc-xon=10k", "rate=1gbit,buffer=64k,pfc-xoff=64k",
                           "rate=1gbit,pfc-xoff=10k,pfc-quanta=0", "rate=1gbit,pfc-xoff=10k,pfc-quanta=65536",
                           "rate=1gbit,pfc-xoff=10k,pfc-quanta=1k", "rate=1gbit,pfc-xon=1k", "rate=1gbit,pfc-quanta=9"}) {
    EXPECT_NE(bad.parse(text), "") << text;
    EXPECT_FALSE(bad.queue.pfc.any()) << text;
  }
}

TEST(FaultSpecText, RefusesWhatItCannotReadAndChangesNothing) {
  FaultSpec s = spec("drop=1%");
  const FaultSpec before = s;
  for (const char* bad : {"drop=101%", "drop=-1", "drop=x", "drop", "delay=5 years", "delay=-3us", "jitter=2h",
                          "corrupt-at=header", "burst=1%/0%", "burst=1%/2%/3%/4%", "frobnicate=1", "drop=1%%",
                          "drop=nan"}) {
    EXPECT_NE(s.parse(bad), "") << bad;
    EXPECT_EQ(s, before) << bad;
  }
  EXPECT_NE(s.parse("frobnicate=1").find("unknown fault"), std::string::npos);
}

TEST(FaultDice, NothingHappensWithoutFaults) {
  for (const FrameFate& f : fates(FaultSpec{}, 3, 10000)) {
    EXPECT_FALSE(f.lost || f.corrupt || f.truncate || f.duplicate || f.reordered);
    EXPECT_EQ(f.hold_ns, 0u);
  }
}

TEST(FaultDice, EachFaultAtItsRate) {
  // 100 000 frames at p: sd = sqrt(n p (1-p)); bounds of 5 sd, fixed seeds.
  const int n = 100000;
  for (uint64_t seed : {1ull, 42ull, 0ull}) {
    EXPECT_NEAR(count(fates(spec("drop=1%"), seed, n), [](auto& f) { return f.lost; }), 1000, 160) << seed;
    EXPECT_NEAR(count(fates(spec("duplicate=5%"), seed, n), [](auto& f) { return f.duplicate; }), 5000, 345);
    EXPECT_NEAR(count(fates(spec("reorder=10%"), seed, n), [](auto& f) { return f.reordered; }), 10000, 475);
    EXPECT_NEAR(count(fates(spec("corrupt=2%"), seed, n), [](auto& f) { return f.corrupt; }), 2000, 225);
    EXPECT_NEAR(count(fates(spec("truncate=50%"), seed, n), [](auto& f) { return f.truncate; }), 50000, 800);
  }
  EXPECT_EQ(count(fates(spec("drop=100%"), 9, 1000), [](auto& f) { return f.lost; }), 1000);
}

TEST(FaultDice, SameSeedSameFatesOtherSeedOthers) {
  auto lost = [](const std::vector<FrameFate>& v) {
    std::vector<bool> b;
    for (auto& f : v) b.push_back(f.lost);
    return b;
  };
  const FaultSpec f = spec("drop=10%");
  EXPECT_EQ(lost(fates(f, 5, 10000)), lost(fates(f, 5, 10000)));
  EXPECT_NE(lost(fates(f, 5, 10000)), lost(fates(f, 6, 10000)));
}

TEST(FaultDice, TurningAFaultOnLeavesTheOthersDiceAlone) {
  // The same frames are lost whether or not duplication and corruption are on.
  const auto a = fates(spec("drop=10%"), 11, 20000);
  const auto b = fates(spec("drop=10%,duplicate=30%,corrupt=30%,delay=5us,jitter=5us"), 11, 20000);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i].lost, b[i].lost) << "frame " << i;
}

TEST(FaultDice, LossesAreSpreadOutWithoutBurstAndBunchedWithIt) {
  auto longest_run = [](const std::vector<FrameFate>& v) {
    int run = 0, longest = 0;
    for (auto& f : v) longest = std::max(longest, run = f.lost ? run + 1 : 0);
    return longest;
  };
  // 1 % independent: a run of 6 has probability 1e-12 per frame.
  EXPECT_LE(longest_run(fates(spec("drop=1%"), 9, 1000000)), 5);
  // Bursts of mean length 1/exit = 10 frames.
  const auto burst = fates(spec("burst=0.1%/10%"), 9, 1000000);
  EXPECT_GE(longest_run(burst), 20);
  EXPECT_GT(count(burst, [](auto& f) { return f.burst_lost; }), 0);
  EXPECT_EQ(count(burst, [](auto& f) { return f.lost && !f.burst_lost; }), 0);
}

TEST(FaultDice, HoldsAreDelayPlusJitterPlusTheReorderWindow) {
  for (const FrameFate& f : fates(spec("delay=100us,jitter=10us,reorder=20%,window=1ms"), 4, 20000)) {
    const uint64_t base = f.hold_ns - (f.reordered ? 1'000'000 : 0);
    EXPECT_GE(base, 100'000u);
    EXPECT_LE(base, 110'000u);
  }
}

TEST(FaultDice, CorruptionLandsInItsTarget) {
  for (const FrameFate& f : fates(spec("corrupt=100%,corrupt-at=payload"), 2, 5000)) {
    ASSERT_TRUE(f.corrupt);
    EXPECT_GE(f.corrupt_bit, uint64_t{kRoceFrame.payload_off} * 8);
    EXPECT_LT(f.corrupt_bit, uint64_t{kRoceFrame.payload_off + kRoceFrame.payload_len} * 8);
  }
  for (const FrameFate& f : fates(spec("corrupt=100%,corrupt-at=icrc"), 2, 5000)) {
    EXPECT_GE(f.corrupt_bit, uint64_t{kRoceFrame.len - 4} * 8);
    EXPECT_LT(f.corrupt_bit, uint64_t{kRoceFrame.len} * 8);
  }
  // An acknowledgement has no payload: a payload fault leaves it alone.
  EXPECT_EQ(count(fates(spec("corrupt=100%,corrupt-at=payload"), 2, 100, FrameRegions{62, 58, 0, 4}),
                  [](auto& f) { return f.corrupt; }),
            0);
}

TEST(FaultDice, TruncationKeepsAHeaderAndLosesSomeTail) {
  std::vector<uint32_t> kept;
  for (const FrameFate& f : fates(spec("truncate=100%"), 8, 5000)) {
    ASSERT_TRUE(f.truncate);
    EXPECT_GE(f.keep_len, kMinTruncatedLen);
    EXPECT_LT(f.keep_len, kRoceFrame.len);
    kept.push_back(f.keep_len);
  }
  // Spread over the frame, not one length.
  EXPECT_LT(*std::min_element(kept.begin(), kept.end()), 100u);
  EXPECT_GT(*std::max_element(kept.begin(), kept.end()), 1000u);
}

}  // namespace
}  // namespace droce::net
