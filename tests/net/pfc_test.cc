// PFC (net/pfc.h): the frames byte for byte as 802.1Qbb and 802.3x lay them out, the pause times,
// a frame's priority, the sender's gate and the congestion point's XOFF/refresh/XON decisions.

#include "net/pfc.h"

#include <gtest/gtest.h>

#include <vector>

namespace droce::net {
namespace {

constexpr MacAddr kSwitch{0x02, 0x00, 0x00, 0x00, 0x00, 0x01};
constexpr MacAddr kA{0x02, 0x00, 0x00, 0x00, 0x00, 0x0a};
constexpr MacAddr kB{0x02, 0x00, 0x00, 0x00, 0x00, 0x0b};
constexpr MacAddr kC{0x02, 0x00, 0x00, 0x00, 0x00, 0x0c};

std::vector<uint8_t> frame_with(std::vector<uint8_t> head) {
  head.resize(60, 0);
  return head;
}

TEST(PfcFrame, BuildsThe8021QbbLayout) {
  uint8_t f[kPauseFrameLen];
  build_pfc(f, kPauseGroupMac, kSwitch, 0x08, 0xffff);  // priority 3, the longest pause
  const std::vector<uint8_t> want = frame_with({
      0x01, 0x80, 0xc2, 0x00, 0x00, 0x01,  // the reserved group address
      0x02, 0x00, 0x00, 0x00, 0x00, 0x01,  // the switch
      0x88, 0x08, 0x01, 0x01,              // MAC Control, PFC
      0x00, 0x08,                          // class-enable vector: priority 3
      0, 0, 0, 0, 0, 0, 0xff, 0xff,        // quanta of priorities 0..3
      0, 0, 0, 0, 0, 0, 0, 0,              // 4..7
  });
  EXPECT_EQ(std::vector<uint8_t>(f, f + sizeof f), want);
}

TEST(PfcFrame, ParsesWhatItBuilds) {
  uint8_t f[kPauseFrameLen];
  build_pfc(f, kA, kSwitch, 0x09, 300);
  PauseFrame p;
  ASSERT_EQ(parse_pause(f, &p), PauseParse::ok);
  EXPECT_EQ(p.dst, kA);
  EXPECT_EQ(p.src, kSwitch);
  EXPECT_EQ(p.enable, 0x09);
  EXPECT_EQ(p.quanta[0], 300);
  EXPECT_EQ(p.quanta[3], 300);
  EXPECT_EQ(p.quanta[1], 0);
}

TEST(PfcFrame, ParsesAnOldPauseAsEveryPriority) {
  // 802.3x PAUSE: opcode 1, one quanta for the whole link.
  const auto f = frame_with({0x01, 0x80, 0xc2, 0, 0, 1, 2, 0, 0, 0, 0, 0x0b, 0x88, 0x08, 0x00, 0x01, 0x12, 0x34});
  PauseFrame p;
  ASSERT_EQ(parse_pause(f, &p), PauseParse::ok);
  EXPECT_EQ(p.enable, 0xff);
  for (uint16_t q : p.quanta) EXPECT_EQ(q, 0x1234);
  EXPECT_EQ(p.src, kB);
}

TEST(PfcFrame, RefusesWhatIsNotAPause) {
  PauseFrame p;
  p.enable = 0x55;
  // Too short to hold the opcode, or a PFC frame without its quanta.
  std::vector<uint8_t> f(15, 0);
  f[12] = 0x88, f[13] = 0x08;
  EXPECT_EQ(parse_pause(f, &p), PauseParse::malformed);
  f = {0x01, 0x80, 0xc2, 0, 0, 1, 2, 0, 0, 0, 0, 0x0b, 0x88, 0x08, 0x01, 0x01, 0x00, 0x08, 0xff, 0xff};
  EXPECT_EQ(parse_pause(f, &p), PauseParse::malformed);
  // MAC Control of another kind (EPON's GATE), and another EtherType.
  EXPECT_EQ(parse_pause(frame_with({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x88, 0x08, 0x00, 0x02}), &p),
            PauseParse::unknown_opcode);
  EXPECT_EQ(parse_pause(frame_with({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x08, 0x06}), &p), PauseParse::not_mac_control);
  EXPECT_EQ(p.enable, 0x55);  // untouched by a refusal
}

TEST(PfcFrame, QuantaAre512BitTimesOfTheReceivingPort) {
  EXPECT_EQ(pause_ns(0xffff, 10'000'000'000ull), 3'355'392u);  // 65535 * 51.2 ns
  EXPECT_EQ(pause_ns(1, 100'000'000'000ull), 6u);              // 5.12 ns, rounded up
  EXPECT_EQ(pause_ns(0xffff, 25'000'000'000ull), 1'342'157u);
  EXPECT_EQ(pause_ns(0, 10'000'000'000ull), 0u);
}

TEST(PfcFrame, PriorityFromTheVlanTagElseTheDscp) {
  // IPv4, TOS 0x68 (DSCP 26, RoCE's usual): priority 3.
  EXPECT_EQ(frame_priority(frame_with({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x08, 0x00, 0x45, 0x68})), 3);
  // IPv6, traffic class 0xc0 (DSCP 48, CNPs): priority 6.
  EXPECT_EQ(frame_priority(frame_with({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x86, 0xdd, 0x6c, 0x00})), 6);
  // Tagged: the PCP decides, whatever the DSCP.
  EXPECT_EQ(frame_priority(frame_with({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x81, 0x00, 0xa0, 0x05, 0x08, 0x00, 0x45,
                                       0xfc})),
            5);
  EXPECT_EQ(frame_priority(frame_with({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x08, 0x06})), 0);  // ARP
}

TEST(PauseGate, HoldsAPriorityForItsQuantaAndXonEndsIt) {
  PauseGate g;
  EXPECT_FALSE(g.engaged());
  PauseFrame f;
  f.enable = 0x08;
  f.quanta[3] = 1000;  // 51.2 us at 10 Gbit/s
  g.apply(f, 1'000'000, 10'000'000'000ull);
  EXPECT_TRUE(g.engaged());
  EXPECT_TRUE(g.paused(3, 1'000'000));
  EXPECT_TRUE(g.paused(3, 1'051'199));
  EXPECT_FALSE(g.paused(3, 1'051'200));
  EXPECT_FALSE(g.paused(0, 1'000'000));
  EXPECT_EQ(g.next_resume_ns(1'000'000), 1'051'200u);
  // A refresh before it ends extends it; XON ends it at once.
  g.apply(f, 1'040'000, 10'000'000'000ull);
  EXPECT_TRUE(g.paused(3, 1'060'000));
  f.quanta[3] = 0;
  g.apply(f, 1'050'000, 10'000'000'000ull);
  EXPECT_FALSE(g.paused(3, 1'050'000));
  EXPECT_EQ(g.next_resume_ns(1'050'000), UINT64_MAX);
  g.settle(1'050'000);
  EXPECT_FALSE(g.engaged());
}

TEST(PauseGate, SettlesOnlyOnceEveryPauseRanOut) {
  PauseGate g;
  PauseFrame f;
  f.enable = 0xff;
  f.quanta.fill(100);  // 5.12 us
  g.apply(f, 0, 10'000'000'000ull);
  g.settle(5'000);
  EXPECT_TRUE(g.engaged());
  g.settle(5'120);
  EXPECT_FALSE(g.engaged());
  EXPECT_FALSE(g.paused(7, 5'120));
}

TEST(PfcPoint, PausesItsSendersAtXoffRefreshesAndResumesAtXon) {
  const PfcSpec s{100'000, 50'000, 0xffff};
  PfcPoint p(10'000'000'000ull);  // a pause lasts 3.355 ms; refreshed every 1.678 ms
  std::vector<PauseOut> out;
  p.on_enqueue(kA, 3, 0);
  p.on_enqueue(kB, 3, 0);
  p.on_enqueue(kB, 0, 0);
  p.on_depth(s, 99'999, 1'000, &out);
  EXPECT_TRUE(out.empty());
  EXPECT_FALSE(p.paused());

  p.on_depth(s, 100'000, 2'000, &out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].dst, kA);
  EXPECT_EQ(out[0].enable, 0x08);
  EXPECT_EQ(out[0].quanta, 0xffff);
  EXPECT_EQ(out[1].dst, kB);
  EXPECT_EQ(out[1].enable, 0x09);
  EXPECT_TRUE(p.paused());
  out.clear();

  // Above xon, before the refresh: nothing, but a sender first seen now is paused at once.
  p.on_depth(s, 80'000, 100'000, &out);
  EXPECT_TRUE(out.empty());
  p.on_enqueue(kC, 3, 150'000);
  p.on_depth(s, 80'000, 200'000, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].dst, kC);
  out.clear();

  // Half the pause gone: everyone again.
  p.on_depth(s, 70'000, 2'000 + 1'677'696, &out);
  EXPECT_EQ(out.size(), 3u);
  out.clear();

  // At xon: XON (quanta 0) for what each was paused on.
  p.on_depth(s, 50'000, 2'000'000, &out);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[1].dst, kB);
  EXPECT_EQ(out[1].enable, 0x09);
  EXPECT_EQ(out[1].quanta, 0);
  EXPECT_FALSE(p.paused());
  EXPECT_EQ(p.counters().xoff_sent, 6u);
  EXPECT_EQ(p.counters().xon_sent, 3u);
  EXPECT_EQ(p.counters().paused_ns, 1'998'000u);
  out.clear();
  p.on_depth(s, 10'000, 3'000'000, &out);
  EXPECT_TRUE(out.empty());
}

TEST(PfcPoint, ASenderStillSendingLongAfterItsPauseIsPausedAgain) {
  // A droced whose receive ring overflowed lost the pause: its frames keep coming.
  const PfcSpec s{1000, 500, 0xffff};
  PfcPoint p(10'000'000'000ull);
  std::vector<PauseOut> out;
  p.on_enqueue(kA, 0, 0);
  p.on_enqueue(kB, 0, 0);
  p.on_depth(s, 2000, 1'000, &out);
  ASSERT_EQ(out.size(), 2u);
  out.clear();
  // Step: A's frames that were on their way (within kRepauseAfterNs of the XOFF). Expect: nothing.
  p.on_enqueue(kA, 0, 1'000 + PfcPoint::kRepauseAfterNs);
  p.on_depth(s, 2000, 300'000, &out);
  EXPECT_TRUE(out.empty());
  // Step: a frame of A's later than that. Expect: A alone paused again, counted.
  p.on_enqueue(kA, 0, 1'001 + PfcPoint::kRepauseAfterNs);
  p.on_depth(s, 2000, 310'000, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].dst, kA);
  EXPECT_EQ(out[0].quanta, 0xffff);
  EXPECT_EQ(p.counters().repaused, 1u);
  out.clear();
  // The grace runs from the new pause: a frame just after it is in flight, not deafness.
  p.on_enqueue(kA, 0, 320'000);
  p.on_depth(s, 2000, 330'000, &out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(p.counters().xoff_sent, 3u);
}

TEST(PfcPoint, SwitchedOffWhilePausingLetsItsSendersGo) {
  PfcPoint p;
  std::vector<PauseOut> out;
  p.on_enqueue(kA, 0, 0);
  p.on_depth(PfcSpec{1000, 500, 10}, 2000, 0, &out);
  ASSERT_EQ(out.size(), 1u);
  out.clear();
  p.on_depth(PfcSpec{}, 2000, 10, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].quanta, 0);
  EXPECT_FALSE(p.paused());
}

TEST(PfcPoint, CountsSendersItCannotTrack) {
  PfcPoint p;
  for (size_t i = 0; i < PfcPoint::kMaxUpstream + 2; ++i) p.on_enqueue(MacAddr{2, 0, 0, 0, 1, uint8_t(i)}, 0, 0);
  p.on_enqueue(MacAddr{2, 0, 0, 0, 1, 0}, 0, 0);  // known: not counted again
  EXPECT_EQ(p.counters().untracked, 2u);
  std::vector<PauseOut> out;
  p.on_depth(PfcSpec{1, 0, 1}, 1, 0, &out);
  EXPECT_EQ(out.size(), PfcPoint::kMaxUpstream);
}

}  // namespace
}  // namespace droce::net
