// The congestion point's queue (net/congestion_point.h) on crafted arrival sequences: exact
// departure times at a fixed rate, drop-tail at the buffer, RED marking between kmin and kmax at
// fixed seeds, RFC 3168's drop of frames that are not ECN-capable, and the text form.

#include "net/congestion_point.h"

#include <gtest/gtest.h>

#include "net/fault_model.h"
#include "net/headers.h"

namespace droce::net {
namespace {

// 1 Gbit/s: a 1000-byte frame takes 8000 ns.
QueueSpec gbit(uint64_t buffer = 0) {
  QueueSpec s;
  s.rate_bps = 1000000000;
  s.buffer_bytes = buffer;
  return s;
}

TEST(CongestionPoint, FramesLeaveBackToBackAtTheRateAndTheDepthDrainsLinearly) {
  CongestionPoint cp;
  const QueueSpec s = gbit();
  // Expect: the first frame on an idle queue leaves one serialization time after it arrives.
  QueueDecision d = cp.enqueue(s, 1000, kEcnEct0, 100);
  EXPECT_EQ(d.verdict, QueueVerdict::queued);
  EXPECT_EQ(d.depart_ns, 8100u);
  // Expect: two more at the same instant queue behind it.
  EXPECT_EQ(cp.enqueue(s, 1000, kEcnEct0, 100).depart_ns, 16100u);
  EXPECT_EQ(cp.enqueue(s, 500, kEcnEct0, 100).depart_ns, 20100u);
  EXPECT_EQ(cp.depth(s, 100), 2500u);
  EXPECT_EQ(cp.depth(s, 8100), 1500u);
  EXPECT_EQ(cp.depth(s, 20100), 0u);
  EXPECT_EQ(cp.depth(s, 99999), 0u);
  // Expect: after it emptied, a frame starts at its own arrival again.
  EXPECT_EQ(cp.enqueue(s, 1000, kEcnEct0, 50000).depart_ns, 58000u);
  EXPECT_EQ(cp.counters().enqueued, 4u);
  EXPECT_EQ(cp.counters().bytes, 3500u);
  EXPECT_EQ(cp.counters().depth_max, 2500u);
}

TEST(CongestionPoint, FractionsOfANanosecondAddUpWithoutDrift) {
  CongestionPoint cp;
  QueueSpec s;
  s.rate_bps = 3000000000;  // 3 Gbit/s: 1 byte = 2.666... ns
  uint64_t last = 0;
  for (int i = 0; i < 3000; ++i) last = cp.enqueue(s, 1, kEcnEct0, 0).depart_ns;
  EXPECT_EQ(last, 8000u);  // 3000 bytes = 24000 bits at 3 bit/ns
}

TEST(CongestionPoint, AFullBufferDropsTheTailAndTheQueueGoesOn) {
  CongestionPoint cp;
  const QueueSpec s = gbit(2500);
  EXPECT_EQ(cp.enqueue(s, 1000, kEcnNotEct, 0).verdict, QueueVerdict::queued);
  EXPECT_EQ(cp.enqueue(s, 1000, kEcnNotEct, 0).verdict, QueueVerdict::queued);
  // Expect: 2000 waiting + 1000 > 2500: dropped, the queue unchanged.
  EXPECT_EQ(cp.enqueue(s, 1000, kEcnNotEct, 0).verdict, QueueVerdict::dropped_full);
  EXPECT_EQ(cp.depth(s, 0), 2000u);
  // Expect: 500 still fits exactly.
  EXPECT_EQ(cp.enqueue(s, 500, kEcnEct0, 0).verdict, QueueVerdict::queued);
  // Expect: once one frame left there is room again.
  EXPECT_EQ(cp.enqueue(s, 1000, kEcnNotEct, 8000).verdict, QueueVerdict::queued);
  EXPECT_EQ(cp.counters().dropped_full, 1u);
  EXPECT_EQ(cp.counters().enqueued, 4u);
  EXPECT_EQ(cp.counters().depth_max, 2500u);
}

QueueSpec red(double pmax) {
  QueueSpec s = gbit(100000);
  s.ecn_min = 10000;
  s.ecn_max = 20000;
  s.ecn_pmax = pmax;
  return s;
}

TEST(CongestionPoint, RedMarksNothingUpToKminAndEverythingAboveKmax) {
  CongestionPoint cp;
  const QueueSpec s = red(1.0);
  // 10 frames of 1000: the 11th finds exactly kmin waiting, not above it.
  for (int i = 0; i < 11; ++i) EXPECT_EQ(cp.enqueue(s, 1000, kEcnEct0, 0).verdict, QueueVerdict::queued) << i;
  // Fill to just above kmax with pmax 0 rules (a separate point, same arrivals).
  CongestionPoint cp2;
  const QueueSpec s0 = red(0.0);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(cp2.enqueue(s0, 1000, kEcnEct0, 0).verdict, QueueVerdict::queued) << i;
  // Expect: at q = kmax (20000) pmax 0 still marks nothing; above kmax every frame is marked.
  EXPECT_EQ(cp2.enqueue(s0, 1000, kEcnEct0, 0).verdict, QueueVerdict::queued);
  EXPECT_EQ(cp2.enqueue(s0, 1000, kEcnEct0, 0).verdict, QueueVerdict::marked);
  EXPECT_EQ(cp2.enqueue(s0, 1000, kEcnCe, 0).verdict, QueueVerdict::marked);
  EXPECT_EQ(cp2.enqueue(s0, 1000, kEcnEct1, 0).verdict, QueueVerdict::marked);
  // Expect: RFC 3168: a frame that is not ECN-capable is dropped where it would be marked.
  EXPECT_EQ(cp2.enqueue(s0, 1000, kEcnNotEct, 0).verdict, QueueVerdict::dropped_red);
  EXPECT_EQ(cp2.counters().marked, 3u);
  EXPECT_EQ(cp2.counters().dropped_red, 1u);
  EXPECT_EQ(cp2.depth(s0, 0), 24000u);
}

TEST(CongestionPoint, BetweenKminAndKmaxTheMarkingProbabilityRisesLinearly) {
  // Hold the queue at a fixed depth: arrivals spaced exactly one serialization time apart.
  auto fraction_marked = [](uint64_t depth, uint64_t seed) {
    CongestionPoint cp(seed);
    const QueueSpec s = red(0.2);
    uint64_t t = 0;
    for (uint64_t q = 0; q < depth; q += 1000) cp.enqueue(s, 1000, kEcnEct0, t);
    int marked = 0;
    const int n = 20000;
    for (int i = 0; i < n; ++i) {
      t += 8000;
      marked += cp.enqueue(s, 1000, kEcnEct0, t).verdict == QueueVerdict::marked;
    }
    return static_cast<double>(marked) / n;
  };
  // Expect: p = 0.2 * (q - kmin) / (kmax - kmin), q the bytes an arrival finds waiting (the
  // fill less the one frame that left since the last arrival).
  const double at_15k = fraction_marked(16000, 7);  // q seen = 15000: p = 0.1
  const double at_19k = fraction_marked(20000, 7);  // q seen = 19000: p = 0.18
  EXPECT_NEAR(at_15k, 0.10, 0.01);
  EXPECT_NEAR(at_19k, 0.18, 0.015);
  // Expect: the same seed and arrivals make the same decisions; another seed other ones.
  EXPECT_EQ(fraction_marked(16000, 7), at_15k);
  EXPECT_NE(fraction_marked(16000, 8), at_15k);
}

TEST(CongestionPoint, MarkingOnDequeueJudgesTheDepthAFrameLeavesBehind) {
  QueueSpec s = red(0.0);  // marks only above kmax (20000)
  s.mark_dequeue = true;
  CongestionPoint cp;
  // A burst of 30 frames at t = 0: on enqueue every one past the 21st would be marked.
  uint64_t depart[30];
  for (int i = 0; i < 30; ++i) {
    const QueueDecision d = cp.enqueue(s, 1000, kEcnEct0, 0);
    EXPECT_EQ(d.verdict, QueueVerdict::queued) << i;  // Expect: nothing decided on arrival
    depart[i] = d.depart_ns;
  }
  EXPECT_EQ(cp.counters().marked, 0u);
  // Expect: the first 9 leave with more than kmax behind them (29000 ... 21000 bytes) and are
  // marked: the first frame out carries the news of the burst, not the 22nd.
  for (int i = 0; i < 9; ++i) EXPECT_EQ(cp.dequeue(s, kEcnEct0, depart[i]), QueueVerdict::marked) << i;
  // Expect: from the 10th on, 20000 or less is behind them: not marked.
  for (int i = 9; i < 30; ++i) EXPECT_EQ(cp.dequeue(s, kEcnEct0, depart[i]), QueueVerdict::queued) << i;
  EXPECT_EQ(cp.counters().marked, 9u);

  // Expect: RFC 3168 on dequeue too: a Not-ECT frame with kmax behind it is dropped.
  CongestionPoint cp3;
  const uint64_t t3 = cp3.enqueue(s, 1000, kEcnNotEct, 0).depart_ns;
  for (int i = 0; i < 25; ++i) cp3.enqueue(s, 1000, kEcnEct0, 0);
  EXPECT_EQ(cp3.dequeue(s, kEcnNotEct, t3), QueueVerdict::dropped_red);
  EXPECT_EQ(cp3.counters().dropped_red, 1u);
  // Expect: a queue that marks on enqueue decides nothing on dequeue.
  s.mark_dequeue = false;
  EXPECT_EQ(cp3.dequeue(s, kEcnEct0, 0), QueueVerdict::queued);
}

TEST(CongestionPoint, WithoutARateNothingIsQueued) {
  CongestionPoint cp;
  const QueueDecision d = cp.enqueue(QueueSpec{}, 1000, kEcnNotEct, 42);
  EXPECT_EQ(d.verdict, QueueVerdict::queued);
  EXPECT_EQ(d.depart_ns, 42u);
  EXPECT_EQ(cp.counters().enqueued, 0u);
}

TEST(CongestionPointText, RatesAndSizesParseAndPrintBack) {
  uint64_t v = 0;
  EXPECT_TRUE(parse_rate("1gbit", &v));
  EXPECT_EQ(v, 1000000000u);
  EXPECT_TRUE(parse_rate("1.5Gbit", &v));
  EXPECT_EQ(v, 1500000000u);
  EXPECT_TRUE(parse_rate("800mbit", &v));
  EXPECT_EQ(rate_text(v), "800mbit");
  EXPECT_FALSE(parse_rate("fast", &v));
  EXPECT_FALSE(parse_rate("0", &v));
  EXPECT_TRUE(parse_bytes("256k", &v));
  EXPECT_EQ(v, 262144u);
  EXPECT_TRUE(parse_bytes("64KiB", &v));
  EXPECT_EQ(v, 65536u);
  EXPECT_TRUE(parse_bytes("9000", &v));
  EXPECT_EQ(bytes_text(v), "9000");
  EXPECT_FALSE(parse_bytes("-1k", &v));

  FaultSpec f;
  EXPECT_EQ(f.parse("rate=1gbit buffer=256k delay=10us ecn-min=40k ecn-max=160k ecn-pmax=0.2"), "");
  EXPECT_EQ(f.queue.rate_bps, 1000000000u);
  EXPECT_EQ(f.queue.buffer_bytes, 262144u);
  EXPECT_EQ(f.queue.ecn_min, 40960u);
  EXPECT_EQ(f.queue.ecn_max, 163840u);
  EXPECT_DOUBLE_EQ(f.queue.ecn_pmax, 0.002);  // bare numbers are percentages, as drop= reads them
  EXPECT_EQ(f.delay_ns, 10000u);
  EXPECT_TRUE(f.any());
  EXPECT_TRUE(f.holds());
  FaultSpec g;
  EXPECT_EQ(g.parse(f.to_string()), "");
  EXPECT_EQ(g, f);
  EXPECT_FALSE(f.queue.mark_dequeue);
  EXPECT_EQ(f.parse("rate=1gbit ecn-min=40k ecn-max=160k ecn-pmax=20% mark=dequeue"), "");
  EXPECT_TRUE(f.queue.mark_dequeue);
  EXPECT_NE(f.to_string().find("mark=dequeue"), std::string::npos);
  EXPECT_EQ(g.parse(f.to_string()), "");
  EXPECT_EQ(g, f);
  FaultSpec h;
  EXPECT_NE(h.parse("rate=1gbit mark=sometimes"), "");
  EXPECT_NE(h.parse("mark=dequeue"), "");  // a queue's option: needs a rate
  EXPECT_NE(h.parse("ecn-min=40k,ecn-max=10k,rate=1gbit"), "");
  EXPECT_NE(h.parse("buffer=10k"), "");
  EXPECT_EQ(h, FaultSpec{});
}

}  // namespace
}  // namespace droce::net
