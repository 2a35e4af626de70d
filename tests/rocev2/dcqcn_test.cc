// rocev2/dcqcn.h: the reaction point's state machine, the notification point's interval and
// the parameters' text form, in fixed time steps (no clock, no engine).

#include <gtest/gtest.h>

#include <cmath>

#include "rocev2/dcqcn.h"

namespace droce::rocev2 {
namespace {

constexpr uint32_t kLine = 10000;  // Mbit/s
constexpr uint64_t kUs = 1000;

double g_of(const CcParams& p) { return p.dce_tcp_g / 1024.0; }

// The rate after one cut with alpha `a`, as mlx5 documents it (rpg_gd 11: alpha/2).
double cut(double rc, double a, const CcParams& p) {
  const double next = rc * (1 - a * 1024 / std::ldexp(1.0, int(p.rpg_gd)));
  return std::max({next, rc * p.rpg_min_dec_fac / 100.0, double(p.rpg_min_rate)});
}

TEST(DcqcnParams, DefaultsAreMlx5s) {
  const CcParams p;
  EXPECT_EQ(p.rpg_time_reset, 300u);
  EXPECT_EQ(p.rpg_byte_reset, 32767u);
  EXPECT_EQ(p.rpg_threshold, 1u);
  EXPECT_EQ(p.rpg_ai_rate, 5u);
  EXPECT_EQ(p.rpg_hai_rate, 50u);
  EXPECT_EQ(p.rpg_gd, 11u);
  EXPECT_EQ(p.rpg_min_dec_fac, 50u);
  EXPECT_EQ(p.dce_tcp_g, 1019u);
  EXPECT_EQ(p.initial_alpha_value, 1023u);
  EXPECT_EQ(p.rate_reduce_monitor_period, 4u);
  EXPECT_EQ(p.min_time_between_cnps, 4u);
  EXPECT_EQ(p.cnp_dscp, 48u);
  EXPECT_EQ(p.rp_enable, 1u);
  EXPECT_EQ(CcParams::off().rp_enable, 0u);
  EXPECT_EQ(CcParams::off().np_enable, 0u);
}

TEST(DcqcnParams, SetByNameOrAliasWithinRangeAllOrNone) {
  CcParams p;
  EXPECT_EQ(set_cc_param(&p, "rpg_ai_rate=20"), "");
  EXPECT_EQ(p.rpg_ai_rate, 20u);
  EXPECT_EQ(set_cc_param(&p, "np_cnp_dscp=26"), "");  // the kernel's debugfs name
  EXPECT_EQ(p.cnp_dscp, 26u);
  EXPECT_NE(set_cc_param(&p, "cnp_dscp=64"), "");     // 6 bits
  EXPECT_NE(set_cc_param(&p, "rpg_ai_rate=fast"), "");
  EXPECT_NE(set_cc_param(&p, "no_such=1"), "");
  EXPECT_NE(set_cc_param(&p, "rpg_ai_rate"), "");
  EXPECT_EQ(p.cnp_dscp, 26u);
  EXPECT_EQ(p.rpg_ai_rate, 20u);

  EXPECT_NE(set_cc_params(&p, "rpg_hai_rate=100,rpg_threshold=0"), "");  // threshold is 1..31
  EXPECT_EQ(p.rpg_hai_rate, 50u) << "a failed list changes nothing";
  EXPECT_EQ(set_cc_params(&p, "rpg_hai_rate=100, rpg_threshold=5 np_enable=0"), "");
  EXPECT_EQ(p.rpg_hai_rate, 100u);
  EXPECT_EQ(p.rpg_threshold, 5u);
  EXPECT_EQ(p.np_enable, 0u);
  ASSERT_NE(find_cc_param("rp_clamp_tgt_rate_ati"), nullptr);
  EXPECT_STREQ(find_cc_param("rp_clamp_tgt_rate_ati")->name, "clamp_tgt_rate_after_time_inc");
}

TEST(DcqcnRp, FirstCnpCutsTheLineRateByAlphaHalf) {
  const CcParams p;
  ReactionPoint rp;
  EXPECT_FALSE(rp.limited());
  EXPECT_TRUE(rp.may_send(0));
  EXPECT_EQ(rp.on_cnp(p, kLine, 100 * kUs), ReactionPoint::Cnp::cut);
  // Expect: RT = the line, RC = line * (1 - 1023/2048).
  EXPECT_TRUE(rp.limited());
  EXPECT_DOUBLE_EQ(rp.rt(), kLine);
  EXPECT_DOUBLE_EQ(rp.rc(), kLine * (1 - 1023.0 / 2048));
  EXPECT_DOUBLE_EQ(rp.alpha(), 1023.0 / 1024);
}

TEST(DcqcnRp, FirstCnpSetsRateToSetOnFirstCnp) {
  CcParams p;
  p.rate_to_set_on_first_cnp = 2000;
  ReactionPoint rp;
  rp.on_cnp(p, kLine, 0);
  EXPECT_DOUBLE_EQ(rp.rc(), 2000);
  EXPECT_DOUBLE_EQ(rp.rt(), 2000);
}

TEST(DcqcnRp, OneCutPerMonitorPeriodAndAlphaRisesWithCnps) {
  const CcParams p;
  const double g = g_of(p);
  ReactionPoint rp;
  rp.on_cnp(p, kLine, 0);
  const double rc1 = rp.rc();
  // Expect: 2 us later, within rate_reduce_monitor_period (4 us): held, no cut.
  EXPECT_EQ(rp.on_cnp(p, kLine, 2 * kUs), ReactionPoint::Cnp::held);
  EXPECT_DOUBLE_EQ(rp.rc(), rc1);
  // alpha's periods (dce_tcp_rtt 1 us): [0,1) had a CNP, [1,2) none.
  double a = (g * (1023.0 / 1024) + (1 - g)) * g;
  EXPECT_DOUBLE_EQ(rp.alpha(), a);
  // Expect: at 5 us a cut with alpha of [2,3) (a CNP) and two quiet periods.
  EXPECT_EQ(rp.on_cnp(p, kLine, 5 * kUs), ReactionPoint::Cnp::cut);
  a = (g * a + (1 - g)) * g * g;
  EXPECT_NEAR(rp.alpha(), a, 1e-12);
  EXPECT_NEAR(rp.rc(), cut(rc1, a, p), 1e-9);
  // No increase since the first cut: RT stays where the first cut set it.
  EXPECT_DOUBLE_EQ(rp.rt(), kLine);
}

TEST(DcqcnRp, AlphaDecaysWithoutCnpsSoALateCutIsSmall) {
  CcParams p;
  p.rpg_time_reset = 0;  // no increase events: only alpha moves
  p.rpg_byte_reset = 0;
  const double g = g_of(p);
  ReactionPoint rp;
  rp.on_cnp(p, kLine, 0);
  const double rc1 = rp.rc();
  rp.on_cnp(p, kLine, 1000 * kUs);
  const double a = (g * (1023.0 / 1024) + (1 - g)) * std::pow(g, 999);
  EXPECT_NEAR(rp.alpha(), a, 1e-12);
  EXPECT_LT(rp.alpha(), 0.01);
  EXPECT_NEAR(rp.rc(), rc1 * (1 - a / 2), 1e-6);
  EXPECT_GT(rp.rc(), rc1 * 0.99);
}

TEST(DcqcnRp, ClampTgtRateSetsRtOnEveryCut) {
  CcParams p;
  p.clamp_tgt_rate = 1;
  ReactionPoint rp;
  rp.on_cnp(p, kLine, 0);
  const double rc1 = rp.rc();
  rp.on_cnp(p, kLine, 10 * kUs);
  EXPECT_DOUBLE_EQ(rp.rt(), rc1);
}

TEST(DcqcnRp, FastRecoveryForFStagesThenAdditiveIncrease) {
  CcParams p;
  p.rpg_threshold = 5;  // the paper's F
  p.rpg_byte_reset = 0;
  ReactionPoint rp;
  rp.on_cnp(p, kLine, 0);
  const double rt = rp.rt();
  double rc = rp.rc();
  for (uint32_t k = 1; k <= 5; ++k) {
    rp.advance(p, kLine, k * 300 * kUs);
    rc = (rt + rc) / 2;
    EXPECT_EQ(rp.timer_stage(), k);
    EXPECT_DOUBLE_EQ(rp.rt(), rt) << "fast recovery keeps RT, stage " << k;
    EXPECT_DOUBLE_EQ(rp.rc(), rc) << "and halves RC's gap to it, stage " << k;
  }
  // Not yet due: nothing moves.
  rp.advance(p, kLine, 6 * 300 * kUs - 1);
  EXPECT_DOUBLE_EQ(rp.rc(), rc);
  // Expect: the 6th event is additive: RT += rpg_ai_rate... but RT is the line already, so
  // start below it instead.
  ReactionPoint low;
  p.rate_to_set_on_first_cnp = 1000;
  low.on_cnp(p, kLine, 0);
  for (uint32_t k = 1; k <= 5; ++k) low.advance(p, kLine, k * 300 * kUs);
  EXPECT_DOUBLE_EQ(low.rt(), 1000);
  const double rc5 = low.rc();
  low.advance(p, kLine, 6 * 300 * kUs);
  EXPECT_DOUBLE_EQ(low.rt(), 1000 + p.rpg_ai_rate);
  EXPECT_DOUBLE_EQ(low.rc(), (1000 + p.rpg_ai_rate + rc5) / 2);
}

TEST(DcqcnRp, ByteCounterTriggersIncreaseEveryRpgByteReset) {
  CcParams p;
  p.rpg_time_reset = 0;
  p.rpg_byte_reset = 16;  // 1024 bytes
  p.rate_to_set_on_first_cnp = 1000;
  ReactionPoint rp;
  rp.on_cnp(p, kLine, 0);
  rp.on_sent(p, kLine, 1 * kUs, 1023);
  EXPECT_EQ(rp.byte_stage(), 0u);
  EXPECT_DOUBLE_EQ(rp.rc(), 1000);
  rp.on_sent(p, kLine, 2 * kUs, 1);
  EXPECT_EQ(rp.byte_stage(), 1u);
  EXPECT_DOUBLE_EQ(rp.rc(), 1000) << "fast recovery toward RT = RC changes nothing";
  rp.on_sent(p, kLine, 3 * kUs, 2048);  // two events: B = 2, 3 > F = 1, T = 0: additive
  EXPECT_EQ(rp.byte_stage(), 3u);
  EXPECT_DOUBLE_EQ(rp.rt(), 1000 + 2 * p.rpg_ai_rate);
}

TEST(DcqcnRp, HyperIncreaseWhenTimerAndByteStagesBothPassF) {
  CcParams p;  // F = 1
  p.rpg_byte_reset = 1;  // 64 bytes
  p.rate_to_set_on_first_cnp = 1000;
  ReactionPoint rp;
  rp.on_cnp(p, kLine, 0);
  rp.on_sent(p, kLine, 1 * kUs, 64);   // B1, T0: fast recovery
  rp.on_sent(p, kLine, 2 * kUs, 64);   // B2, T0: additive
  EXPECT_DOUBLE_EQ(rp.rt(), 1000 + 5);
  rp.advance(p, kLine, 300 * kUs);     // T1, B2: additive
  EXPECT_DOUBLE_EQ(rp.rt(), 1000 + 10);
  rp.advance(p, kLine, 600 * kUs);     // T2, B2: hyper, (2 - 1) x 50
  EXPECT_DOUBLE_EQ(rp.rt(), 1000 + 10 + 50);
  rp.on_sent(p, kLine, 601 * kUs, 64);  // B3, T2: hyper, (2 - 1) x 50
  EXPECT_DOUBLE_EQ(rp.rt(), 1000 + 10 + 100);
  rp.advance(p, kLine, 900 * kUs);      // T3, B3: hyper, (3 - 1) x 50
  EXPECT_DOUBLE_EQ(rp.rt(), 1000 + 10 + 100 + 100);
  // A cut restarts the stages.
  rp.on_cnp(p, kLine, 901 * kUs);
  EXPECT_EQ(rp.timer_stage(), 0u);
  EXPECT_EQ(rp.byte_stage(), 0u);
}

TEST(DcqcnRp, MinRateAndMinDecFacBoundACut) {
  CcParams p;
  p.rpg_min_dec_fac = 0;
  p.rpg_min_rate = 100;
  p.rate_to_set_on_first_cnp = 150;
  ReactionPoint rp;
  rp.on_cnp(p, kLine, 0);
  for (uint64_t k = 1; k <= 20; ++k) rp.on_cnp(p, kLine, k * 10 * kUs);
  EXPECT_DOUBLE_EQ(rp.rc(), 100);

  p.rpg_min_dec_fac = 90;  // a cut keeps at least 90 %
  p.rpg_min_rate = 1;
  p.rate_to_set_on_first_cnp = 0;
  ReactionPoint fac;
  fac.on_cnp(p, kLine, 0);
  EXPECT_DOUBLE_EQ(fac.rc(), kLine * 0.9);
}

TEST(DcqcnRp, ReleasedNearTheMaximumAndCutAgainFromIt) {
  CcParams p;
  p.rpg_byte_reset = 0;
  p.rpg_max_rate = 2000;  // below the line: the maximum
  ReactionPoint rp;
  rp.on_cnp(p, kLine, 0);
  EXPECT_DOUBLE_EQ(rp.rt(), 2000);
  uint64_t t = 0;
  while (rp.limited() && t < 100 * 300 * kUs) rp.advance(p, kLine, t += 300 * kUs);
  EXPECT_FALSE(rp.limited()) << "fast recovery and AI reach the maximum";
  EXPECT_TRUE(rp.may_send(t));
  rp.on_cnp(p, kLine, t + 1);
  EXPECT_DOUBLE_EQ(rp.rc(), 2000 * (1 - 1023.0 / 2048)) << "a new first cut, from the maximum";
}

TEST(DcqcnRp, LongIdleCatchUpEqualsStepByStep) {
  CcParams p;
  p.rpg_byte_reset = 0;
  p.rate_to_set_on_first_cnp = 1000;
  const uint32_t line = 100000;
  const uint64_t events = 3000;  // past kMaxCatchUp
  ReactionPoint steps, once;
  steps.on_cnp(p, line, 0);
  once.on_cnp(p, line, 0);
  steps.on_cnp(p, line, 10 * kUs);  // RC below RT
  once.on_cnp(p, line, 10 * kUs);
  for (uint64_t k = 1; k <= events; ++k) steps.advance(p, line, 10 * kUs + k * 300 * kUs);
  once.advance(p, line, 10 * kUs + events * 300 * kUs);
  ASSERT_TRUE(steps.limited());
  EXPECT_EQ(once.timer_stage(), steps.timer_stage());
  EXPECT_NEAR(once.rt(), steps.rt(), 1e-6);
  EXPECT_NEAR(once.rc(), steps.rc(), 1e-6);
  EXPECT_DOUBLE_EQ(steps.rt(), 1000 + 5.0 * (events - 1));  // the first event is fast recovery
}

TEST(DcqcnRp, PacerSpacesFramesAtTheCurrentRate) {
  CcParams p;
  p.rpg_byte_reset = 0;
  p.rate_to_set_on_first_cnp = 1000;  // 1 Gbit/s: 8 ns a byte
  ReactionPoint rp;
  const uint64_t t0 = 1000 * kUs;
  rp.on_cnp(p, kLine, t0);
  EXPECT_TRUE(rp.may_send(t0));
  rp.on_sent(p, kLine, t0, 1000);
  EXPECT_FALSE(rp.may_send(t0)) << "the next frame waits its 8 us";
  EXPECT_TRUE(rp.may_send(t0 + 8000));
  // After an idle spell the bucket lets kBurstBytes go at once; then one frame per its time.
  const uint64_t t1 = t0 + 1000 * kUs;
  uint32_t sent = 0;
  while (rp.may_send(t1) && sent < 100) {
    rp.on_sent(p, kLine, t1, 1000);
    ++sent;
  }
  EXPECT_EQ(sent, (ReactionPoint::kBurstBytes + 999) / 1000);
  const uint64_t next = rp.next_send_ns();
  EXPECT_FALSE(rp.may_send(next - 1));
  EXPECT_TRUE(rp.may_send(next));
  rp.on_sent(p, kLine, next, 1000);
  EXPECT_EQ(rp.next_send_ns(), next + 8000) << "1000 bytes at 1 Gbit/s";
}

TEST(DcqcnNp, OneCnpPerQpPerMinTimeBetweenCnps) {
  CcParams p;  // 4 us
  NotificationPoint np;
  EXPECT_TRUE(np.on_ce(p, 100 * kUs));
  EXPECT_FALSE(np.on_ce(p, 100 * kUs));
  EXPECT_FALSE(np.on_ce(p, 103 * kUs + 999));
  EXPECT_TRUE(np.on_ce(p, 104 * kUs));
  p.min_time_between_cnps = 0;
  EXPECT_TRUE(np.on_ce(p, 104 * kUs));
  EXPECT_TRUE(np.on_ce(p, 104 * kUs));
}

}  // namespace
}  // namespace droce::rocev2
