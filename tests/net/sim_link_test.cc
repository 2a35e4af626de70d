// SimLink: the simulated link the transport engine's tests run over. Timing,
// serialization, every fault and its counters, determinism per seed, the
// driver loop on a virtual clock, tail drop, and mbuf ownership.
//
// Statistical checks use a fixed seed (override with DROCE_SEED=n) and a
// tolerance of 5 standard deviations, so a correct link fails one in ~1.7
// million seeds while an off-by-a-few-percent one fails at once; see each test.

#include <gtest/gtest.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/clock.h"
#include "net/eal.h"
#include "net/frame_bytes.h"
#include "net/sim_link.h"
#include "tests/test_support.h"

namespace droce::net {
namespace {

uint64_t base_seed(uint64_t fallback) {
  const char* s = std::getenv("DROCE_SEED");
  return s != nullptr ? std::strtoull(s, nullptr, 0) : fallback;
}

std::string seed_note(uint64_t seed) {
  return "seed " + std::to_string(seed) + " (rerun with DROCE_SEED=" + std::to_string(seed) + ")";
}

// The bytes of frame `index`: its index (little-endian) in the first four
// bytes, then a pattern that differs per frame.
std::vector<uint8_t> frame_bytes(uint32_t index, uint32_t len) {
  std::vector<uint8_t> b(len);
  for (uint32_t j = 0; j < len; ++j) b[j] = uint8_t(index * 31u + j * 7u + (j >> 8));
  for (uint32_t j = 0; j < 4 && j < len; ++j) b[j] = uint8_t(index >> (8 * j));
  return b;
}

std::vector<uint8_t> flatten(const rte_mbuf* m) {
  std::vector<uint8_t> out;
  FrameBytes(m).for_each_piece(0, m->pkt_len, [&](const uint8_t* p, size_t n) { out.insert(out.end(), p, p + n); });
  return out;
}

uint32_t index_of(const std::vector<uint8_t>& b) {
  uint32_t i = 0;
  for (uint32_t j = 0; j < 4 && j < b.size(); ++j) i |= uint32_t(b[j]) << (8 * j);
  return i;
}

// Bits that differ (lengths must match; a length change counts as 1000).
int bit_distance(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return 1000;
  int d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += std::popcount(unsigned(a[i] ^ b[i]));
  return d;
}

size_t first_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

bool all_private(const rte_mbuf* m) {
  for (; m != nullptr; m = m->next)
    if (!RTE_MBUF_DIRECT(m) || rte_mbuf_refcnt_read(m) != 1) return false;
  return true;
}

struct Send {
  uint64_t at_ns;
  int from;
  uint32_t len;
  uint32_t seg_len;  ///< 0: one segment
  uint32_t index;    ///< what the frame carries (frame_bytes)
};

struct Delivery {
  int end;
  uint64_t at_ns;
  std::vector<uint8_t> bytes;
  uint32_t index() const { return index_of(bytes); }
  bool operator==(const Delivery&) const = default;
};

// n frames of `len` bytes from end `from`, one every spacing_ns from start_ns.
std::vector<Send> evenly(size_t n, uint64_t spacing_ns, int from = 0, uint32_t len = 64, uint64_t start_ns = 0) {
  std::vector<Send> plan;
  for (size_t i = 0; i < n; ++i) plan.push_back({start_ns + i * spacing_ns, from, len, 0, uint32_t(i)});
  return plan;
}

class SimLinkTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { pool_ = create_mbuf_pool("sim_link_pool", 8191, 2048); }
  void SetUp() override {
    ASSERT_NE(pool_, nullptr);
    in_use_ = rte_mempool_in_use_count(pool_);
  }
  void TearDown() override {
    // Expect: every test, and every link, returns every mbuf it took.
    EXPECT_EQ(rte_mempool_in_use_count(pool_), in_use_);
  }

  // Frame `index` of `len` bytes, in segments of seg_len bytes (0: one).
  static rte_mbuf* make_frame(uint32_t index, uint32_t len, uint32_t seg_len = 0) {
    const std::vector<uint8_t> b = frame_bytes(index, len);
    if (seg_len == 0) seg_len = std::max<uint32_t>(len, 1);
    rte_mbuf* head = nullptr;
    uint32_t off = 0;
    do {
      rte_mbuf* s = rte_pktmbuf_alloc(pool_);
      if (s == nullptr) break;
      const uint32_t n = std::min(seg_len, len - off);
      if (n != 0) std::memcpy(rte_pktmbuf_append(s, uint16_t(n)), b.data() + off, n);
      off += n;
      if (head == nullptr) {
        head = s;
      } else if (rte_pktmbuf_chain(head, s) != 0) {
        rte_pktmbuf_free(s);
        break;
      }
    } while (off < len);
    if (head == nullptr || off < len) {
      rte_pktmbuf_free(head);
      ADD_FAILURE() << "cannot build frame " << index;
      return nullptr;
    }
    return head;
  }

  // The driver loop the engine tests use: a virtual clock that jumps to the
  // next event (a planned send or SimLink::next_arrival_ns), both ends
  // receiving whatever has arrived. Starts its clock at 0: a plan on a link
  // already used starts after that use.
  // Records every delivery with the exact time it became receivable, and
  // checks the counters' invariant at every step.
  static std::vector<Delivery> drive(SimLink& link, const std::vector<Send>& plan) {
    core::VirtualClock clock;
    std::vector<Delivery> got;
    size_t next = 0;
    while (next < plan.size() || link.in_flight() != 0) {
      const uint64_t t_send = next < plan.size() ? plan[next].at_ns : UINT64_MAX;
      clock.advance_to(std::min(t_send, link.next_arrival_ns()));
      for (int end : {0, 1}) {
        rte_mbuf* out[32];
        uint16_t k;
        while ((k = link.receive(end, out, 32, clock.now_ns())) != 0) {
          for (uint16_t j = 0; j < k; ++j) {
            got.push_back({end, clock.now_ns(), flatten(out[j])});
            rte_pktmbuf_free(out[j]);
          }
        }
      }
      while (next < plan.size() && plan[next].at_ns <= clock.now_ns()) {
        rte_mbuf* m = make_frame(plan[next].index, plan[next].len, plan[next].seg_len);
        if (m == nullptr) return got;
        link.send(plan[next].from, &m, 1, clock.now_ns());
        ++next;
      }
      uint64_t in = 0, out = 0;
      for (int from : {0, 1}) {
        const LinkStats& s = link.stats(from);
        in += s.sent + s.duplicated;
        out += s.delivered + s.lost + s.queue_dropped;
      }
      if (in != out + link.in_flight()) {
        ADD_FAILURE() << "counters do not add up at " << clock.now_ns() << " ns, " << seed_note(link.seed());
        return got;
      }
    }
    return got;
  }

  static std::vector<Delivery> at_end(const std::vector<Delivery>& all, int end) {
    std::vector<Delivery> v;
    for (const Delivery& d : all)
      if (d.end == end) v.push_back(d);
    return v;
  }

  // Lengths of the runs of consecutive lost frames among 0..n-1.
  static std::vector<size_t> loss_runs(const std::vector<Delivery>& got, size_t n) {
    std::vector<bool> arrived(n);
    for (const Delivery& d : got) arrived.at(d.index()) = true;
    std::vector<size_t> runs;
    size_t run = 0;
    for (size_t i = 0; i < n; ++i) {
      if (!arrived[i]) {
        ++run;
      } else if (run != 0) {
        runs.push_back(run);
        run = 0;
      }
    }
    if (run != 0) runs.push_back(run);
    return runs;
  }

  static double mean(const std::vector<size_t>& v) {
    double s = 0;
    for (size_t x : v) s += double(x);
    return v.empty() ? 0 : s / double(v.size());
  }

  // count ~ Binomial(n, p) within 5 standard deviations.
  static void expect_binomial(uint64_t count, uint64_t n, double p, const char* what, uint64_t seed) {
    const double sd = std::sqrt(double(n) * p * (1 - p));
    EXPECT_NEAR(double(count), double(n) * p, 5 * sd)
        << what << ": " << count << " of " << n << " at p=" << p << ", " << seed_note(seed);
  }

  static rte_mempool* pool_;
  unsigned in_use_ = 0;
};

rte_mempool* SimLinkTest::pool_ = nullptr;

// ---- the clock ------------------------------------------------------------

TEST(VirtualClock, AdvancesAndNeverGoesBackwards) {
  core::VirtualClock c;
  EXPECT_EQ(c.now_ns(), 0u);
  c.advance(1500);
  EXPECT_EQ(c.now_ns(), 1500u);
  c.advance_to(1000);  // earlier: no-op
  EXPECT_EQ(c.now_ns(), 1500u);
  c.advance_to(1500);
  EXPECT_EQ(c.now_ns(), 1500u);
  c.advance_to(7000);
  EXPECT_EQ(c.now_ns(), 7000u);
  core::VirtualClock late(UINT64_MAX - 5);
  late.advance(10);  // saturates rather than wrapping to the past
  EXPECT_EQ(late.now_ns(), UINT64_MAX);
}

TEST(MonotonicClock, NeverDecreasesAndMoves) {
  const uint64_t a = core::monotonic_ns();
  uint64_t b = a;
  for (int i = 0; i < 1000000 && b == a; ++i) b = core::monotonic_ns();
  EXPECT_GT(b, a);
  EXPECT_GE(core::monotonic_ns(), b);
}

// ---- timing ---------------------------------------------------------------

TEST_F(SimLinkTest, CleanLinkDeliversEverythingInOrderAfterExactlyTheDelay) {
  LinkFaults f;
  f.delay_ns = 5000;
  SimLink link(base_seed(1), f, f, pool_);

  // A burst of 8 at t=100, one of them in three segments: the same mbufs
  // come out, untouched, in send order, at 5100 and not a nanosecond before.
  rte_mbuf* burst[8];
  for (uint32_t i = 0; i < 8; ++i) burst[i] = make_frame(i, 100, i == 3 ? 40 : 0);
  rte_mbuf* sent[8];
  std::copy(burst, burst + 8, sent);
  link.send(0, burst, 8, 100);
  EXPECT_EQ(link.in_flight(), 8u);
  EXPECT_EQ(link.next_arrival_ns(), 5100u);
  rte_mbuf* out[16];
  EXPECT_EQ(link.receive(1, out, 16, 5099), 0);
  EXPECT_EQ(link.receive(0, out, 16, 5100), 0);  // nothing was sent towards end 0
  ASSERT_EQ(link.receive(1, out, 16, 5100), 8);
  for (uint32_t i = 0; i < 8; ++i) {
    EXPECT_EQ(out[i], sent[i]) << i;
    EXPECT_EQ(flatten(out[i]), frame_bytes(i, 100)) << i;
    rte_pktmbuf_free(out[i]);
  }
  EXPECT_EQ(link.next_arrival_ns(), UINT64_MAX);

  // 1,000 frames at irregular times, both directions: each arrives exactly
  // delay_ns after it was sent, at the end it was sent to, in order.
  std::vector<Send> plan;
  uint64_t t = 10000;  // after the burst: time only moves forward
  for (uint32_t i = 0; i < 1000; ++i) {
    t += (i * 7919u) % 3000;
    plan.push_back({t, int(i % 3 == 0), 64, 0, i});
  }
  const std::vector<Delivery> got = drive(link, plan);
  ASSERT_EQ(got.size(), plan.size());
  uint32_t last[2] = {0, 0};
  bool seen[2] = {false, false};
  for (const Delivery& d : got) {
    const uint32_t i = d.index();
    ASSERT_LT(i, plan.size());
    EXPECT_EQ(d.end, 1 - plan[i].from) << i;
    EXPECT_EQ(d.at_ns, plan[i].at_ns + 5000) << i;
    EXPECT_EQ(d.bytes, frame_bytes(i, 64)) << i;
    if (seen[d.end]) {
      EXPECT_GT(i, last[d.end]) << "out of order";
    }
    seen[d.end] = true;
    last[d.end] = i;
  }
  for (int from : {0, 1}) {
    const LinkStats& s = link.stats(from);
    EXPECT_EQ(s.sent, s.delivered);
    EXPECT_EQ(s.lost + s.burst_lost + s.duplicated + s.corrupted + s.reordered + s.queue_dropped + s.copy_failed, 0u);
  }
  EXPECT_EQ(link.stats(0).sent, 8u + 666u);
  EXPECT_EQ(link.stats(1).sent, 334u);
}

TEST_F(SimLinkTest, RateSerializesFramesBackToBack) {
  LinkFaults f;
  f.delay_ns = 1000;
  f.rate_bps = 10'000'000'000;  // 1000 bytes = 8000 bits = 800 ns
  SimLink link(base_seed(2), f, f, pool_);
  rte_mbuf* burst[10];
  for (uint32_t i = 0; i < 10; ++i) burst[i] = make_frame(i, 1000);
  link.send(0, burst, 10, 0);
  rte_mbuf* out[16];
  for (uint32_t n = 0; n < 10; ++n) {
    const uint64_t want = (n + 1) * 800 + 1000;  // serialized behind n frames, then propagated
    EXPECT_EQ(link.next_arrival_ns(), want) << n;
    EXPECT_EQ(link.receive(1, out, 16, want - 1), 0) << n;
    ASSERT_EQ(link.receive(1, out, 16, want), 1) << n;
    EXPECT_EQ(index_of(flatten(out[0])), n);
    rte_pktmbuf_free(out[0]);
  }

  // An idle link banks no credit: a frame sent later starts when it is sent.
  rte_mbuf* m = make_frame(10, 1000);
  link.send(0, &m, 1, 50000);
  EXPECT_EQ(link.next_arrival_ns(), 50000u + 800 + 1000);
  // A frame sent while that one is still serializing waits for it.
  m = make_frame(11, 1000);
  link.send(0, &m, 1, 50100);
  // Partial nanoseconds round up: 1001 bytes take 800.8 -> 801 ns.
  m = make_frame(12, 1001);
  link.send(0, &m, 1, 50100);
  // The other direction has its own serializer.
  m = make_frame(13, 1000);
  link.send(1, &m, 1, 50100);
  const std::pair<int, uint64_t> want[] = {{1, 51800}, {0, 51900}, {1, 52600}, {1, 53401}};
  for (auto [end, at] : want) {
    EXPECT_EQ(link.next_arrival_ns(), at);
    EXPECT_EQ(link.receive(end, out, 16, at - 1), 0);
    ASSERT_EQ(link.receive(end, out, 16, at), 1) << at;
    rte_pktmbuf_free(out[0]);
  }
  EXPECT_EQ(link.in_flight(), 0u);
}

// ---- loss -----------------------------------------------------------------

// loss 0.3 over 20,000 frames: lost ~ Binomial(20000, 0.3), sd 64.8, so the
// tolerance is +-324 (5 sd); three seeds, so a tolerance that only one lucky
// seed passes does not hide a biased link.
TEST_F(SimLinkTest, IndependentLossIsBinomialAndCounted) {
  constexpr size_t kFrames = 20000;
  for (uint64_t seed = base_seed(3); seed < base_seed(3) + 3; ++seed) {
    SCOPED_TRACE(seed_note(seed));
    LinkFaults f;
    f.loss = 0.3;
    SimLink link(seed, f, LinkFaults{}, pool_);
    const std::vector<Delivery> got = drive(link, evenly(kFrames, 100));
    const LinkStats& s = link.stats(0);
    EXPECT_EQ(s.sent, kFrames);
    EXPECT_EQ(s.delivered, got.size());
    EXPECT_EQ(s.lost, kFrames - got.size());
    EXPECT_EQ(s.burst_lost, 0u);
    expect_binomial(s.lost, kFrames, 0.3, "lost", seed);
    for (size_t i = 1; i < got.size(); ++i) ASSERT_GT(got[i].index(), got[i - 1].index());
    for (const Delivery& d : got) ASSERT_EQ(d.bytes, frame_bytes(d.index(), 64));
  }
}

// Gilbert-Elliott with burst_loss 1: the loss rate is enter/(enter+exit) and a
// run of losses is one stay in the bad state, geometric with mean 1/exit = 4
// (sd 3.46; ~1,500 runs in 20,000 frames, so the mean's sd is ~0.09: +-0.5
// is 5.6 sd). Independent loss at the same 0.3 has runs of mean 1/(1-0.3) =
// 1.43 (its mean's sd ~0.012): below 1.6. The GE loss rate is correlated
// (lag-1 correlation 1-enter-exit = 0.64, variance x4.6): sd ~0.007, +-0.03.
TEST_F(SimLinkTest, BurstLossComesInRunsIndependentLossDoesNot) {
  constexpr size_t kFrames = 20000;
  for (uint64_t seed = base_seed(4); seed < base_seed(4) + 3; ++seed) {
    SCOPED_TRACE(seed_note(seed));
    LinkFaults burst;
    burst.burst_exit = 0.25;
    burst.burst_enter = 0.3 * burst.burst_exit / 0.7;
    burst.burst_loss = 1.0;
    SimLink bursty(seed, burst, LinkFaults{}, pool_);
    const std::vector<Delivery> b = drive(bursty, evenly(kFrames, 100));
    const LinkStats& bs = bursty.stats(0);
    EXPECT_EQ(bs.lost, kFrames - b.size());
    EXPECT_EQ(bs.burst_lost, bs.lost);
    EXPECT_NEAR(double(bs.lost) / kFrames, 0.3, 0.03);
    const std::vector<size_t> b_runs = loss_runs(b, kFrames);
    EXPECT_NEAR(mean(b_runs), 1 / burst.burst_exit, 0.5) << b_runs.size() << " runs";

    LinkFaults independent;
    independent.loss = 0.3;
    SimLink flat(seed, independent, LinkFaults{}, pool_);
    const std::vector<Delivery> i = drive(flat, evenly(kFrames, 100));
    const std::vector<size_t> i_runs = loss_runs(i, kFrames);
    EXPECT_LT(mean(i_runs), 1.6) << i_runs.size() << " runs";
    // Runs of 8 or more: (3/4)^7 = 13% of ~1,500 GE runs (~200, Poisson sd
    // 14), 0.3^7 = 0.02% of ~4,200 independent ones (~0.9; 12 or more has
    // probability ~1e-10).
    const auto long_runs = [](const std::vector<size_t>& r) {
      return std::count_if(r.begin(), r.end(), [](size_t x) { return x >= 8; });
    };
    EXPECT_GT(long_runs(b_runs), 100);
    EXPECT_LT(long_runs(i_runs), 12);
  }
}

// ---- duplication ----------------------------------------------------------

TEST_F(SimLinkTest, DuplicateDeliversTwoIdenticalDeepCopies) {
  const uint64_t seed = base_seed(5);
  SCOPED_TRACE(seed_note(seed));
  LinkFaults f;
  f.duplicate = 1.0;
  {
    SimLink link(seed, f, f, pool_);
    rte_mbuf* m = make_frame(7, 300, 100);  // three segments
    rte_mbuf* const original = m;
    link.send(0, &m, 1, 0);
    rte_mbuf* out[4];
    ASSERT_EQ(link.receive(1, out, 4, 1000), 2);
    EXPECT_EQ(out[0], original);  // the original first, then the copy
    EXPECT_NE(out[1], original);
    EXPECT_EQ(flatten(out[0]), frame_bytes(7, 300));
    EXPECT_EQ(flatten(out[1]), frame_bytes(7, 300));
    EXPECT_TRUE(all_private(out[0]));
    EXPECT_TRUE(all_private(out[1]));
    // Deep: writing every byte of one leaves the other as it was.
    for (rte_mbuf* s = out[1]; s != nullptr; s = s->next) std::memset(rte_pktmbuf_mtod(s, uint8_t*), 0xEE, s->data_len);
    EXPECT_EQ(flatten(out[0]), frame_bytes(7, 300));
    EXPECT_EQ(link.stats(0).duplicated, 1u);
    EXPECT_EQ(link.stats(0).delivered, 2u);
    rte_pktmbuf_free(out[0]);
    rte_pktmbuf_free(out[1]);
  }

  // At p=0.5 over 4,000 frames: duplicated ~ Binomial (sd 31.6, +-158); each
  // frame arrives once or twice, a copy right after its original.
  f.duplicate = 0.5;
  SimLink link(seed, f, f, pool_);
  const std::vector<Delivery> got = drive(link, evenly(4000, 100));
  const LinkStats& s = link.stats(0);
  expect_binomial(s.duplicated, 4000, 0.5, "duplicated", seed);
  EXPECT_EQ(s.delivered, s.sent + s.duplicated);
  EXPECT_EQ(got.size(), s.delivered);
  uint64_t pairs = 0;
  uint32_t expect_next = 0;
  for (size_t k = 0; k < got.size(); ++k) {
    ASSERT_EQ(got[k].index(), expect_next) << k;
    ASSERT_EQ(got[k].bytes, frame_bytes(expect_next, 64));
    if (k + 1 < got.size() && got[k + 1].index() == expect_next) {
      EXPECT_EQ(got[k + 1], got[k]);  // same bytes, same time
      ++pairs;
      ++k;
    }
    ++expect_next;
  }
  EXPECT_EQ(expect_next, 4000u);
  EXPECT_EQ(pairs, s.duplicated);
}

// ---- corruption -----------------------------------------------------------

// corrupt 0.5 over 2,000 frames of 1..300 bytes cut into random segments:
// every frame that differs from what was sent differs in exactly one bit,
// their number is the counter, ~Binomial (sd 22.4, +-112), and the flips land
// everywhere: in the Ethernet header, in later segments, in the last byte.
TEST_F(SimLinkTest, CorruptFlipsExactlyOneBitAnywhere) {
  const uint64_t seed = base_seed(6);
  SCOPED_TRACE(seed_note(seed));
  constexpr size_t kFrames = 2000;
  std::mt19937_64 rng(seed);
  std::vector<Send> plan;
  for (size_t i = 0; i < kFrames; ++i) {
    const uint32_t len = 1 + uint32_t(rng() % 300);
    plan.push_back({i * 10000, 0, len, 1 + uint32_t(rng() % len), uint32_t(i)});
  }
  LinkFaults f;
  f.corrupt = 0.5;
  SimLink link(seed, f, LinkFaults{}, pool_);
  const std::vector<Delivery> got = drive(link, plan);
  ASSERT_EQ(got.size(), kFrames);
  uint64_t differing = 0, in_header = 0, in_last_byte = 0, past_first_segment = 0;
  for (size_t k = 0; k < got.size(); ++k) {
    const size_t i = (got[k].at_ns - f.delay_ns) / 10000;  // corruption may hit the index bytes
    ASSERT_EQ(i, k);
    const std::vector<uint8_t> want = frame_bytes(uint32_t(i), plan[i].len);
    const int d = bit_distance(got[k].bytes, want);
    ASSERT_LE(d, 1) << "frame " << i << " (" << plan[i].len << " bytes in segments of " << plan[i].seg_len << ")";
    if (d == 1) {
      ++differing;
      const size_t at = first_difference(got[k].bytes, want);
      in_header += at < 14;
      in_last_byte += at + 1 == want.size();
      past_first_segment += at >= plan[i].seg_len;
    }
  }
  EXPECT_EQ(differing, link.stats(0).corrupted);
  EXPECT_EQ(link.stats(0).copy_failed, 0u);
  expect_binomial(differing, kFrames, 0.5, "corrupted", seed);
  EXPECT_GT(in_header, 20u);
  EXPECT_GT(in_last_byte, 5u);
  EXPECT_GT(past_first_segment, 200u);
}

TEST_F(SimLinkTest, CorruptNeverTouchesFramesSharingData) {
  const uint64_t seed = base_seed(7);
  SCOPED_TRACE(seed_note(seed));
  LinkFaults f;
  f.corrupt = 1.0;
  SimLink link(seed, f, f, pool_);
  rte_mbuf* out[4];
  uint64_t now = 0;

  for (uint32_t round = 0; round < 50; ++round, now += 10000) {
    SCOPED_TRACE("round " + std::to_string(round));
    const std::vector<uint8_t> want = frame_bytes(round, 200);

    // A clone (indirect segments) of a three-segment frame.
    rte_mbuf* m = make_frame(round, 200, 70);
    rte_mbuf* c = rte_pktmbuf_clone(m, pool_);
    ASSERT_NE(c, nullptr);
    link.send(0, &c, 1, now);
    ASSERT_EQ(link.receive(1, out, 4, now + f.delay_ns), 1);
    EXPECT_EQ(flatten(m), want);
    EXPECT_EQ(bit_distance(flatten(out[0]), want), 1);
    rte_pktmbuf_free(out[0]);
    EXPECT_TRUE(all_private(m));  // the clone was released
    rte_pktmbuf_free(m);

    // A direct frame whose sender kept a reference (refcnt 2).
    m = make_frame(round, 200, 70);
    rte_pktmbuf_refcnt_update(m, 1);
    link.send(1, &m, 1, now);
    ASSERT_EQ(link.receive(0, out, 4, now + f.delay_ns), 1);
    EXPECT_NE(out[0], m);
    EXPECT_EQ(flatten(m), want);
    EXPECT_EQ(bit_distance(flatten(out[0]), want), 1);
    rte_pktmbuf_free(out[0]);
    EXPECT_TRUE(all_private(m));
    rte_pktmbuf_free(m);

    // Zero-copy style: a private header segment chained to a clone of a
    // payload the sender keeps. Flips in the header stay in place; flips in
    // the payload go to a copy. The payload never changes.
    rte_mbuf* payload = make_frame(round + 1000, 150, 50);
    rte_mbuf* head = make_frame(round, 50);
    rte_mbuf* shared_payload = rte_pktmbuf_clone(payload, pool_);
    ASSERT_NE(shared_payload, nullptr);
    ASSERT_EQ(rte_pktmbuf_chain(head, shared_payload), 0);
    std::vector<uint8_t> whole = frame_bytes(round, 50);
    const std::vector<uint8_t> payload_bytes = frame_bytes(round + 1000, 150);
    whole.insert(whole.end(), payload_bytes.begin(), payload_bytes.end());
    link.send(0, &head, 1, now);
    ASSERT_EQ(link.receive(1, out, 4, now + f.delay_ns), 1);
    EXPECT_EQ(flatten(payload), payload_bytes);
    EXPECT_EQ(bit_distance(flatten(out[0]), whole), 1);
    rte_pktmbuf_free(out[0]);
    rte_pktmbuf_free(payload);
  }
  EXPECT_EQ(link.stats(0).corrupted, 100u);
  EXPECT_EQ(link.stats(1).corrupted, 50u);
}

TEST_F(SimLinkTest, WithoutAPoolCopiesAreSkippedAndCounted) {
  LinkFaults f;
  f.duplicate = 1.0;
  f.corrupt = 1.0;
  SimLink link(base_seed(8), f, f, nullptr);
  // A private frame is corrupted in place (no copy needed), not duplicated.
  rte_mbuf* m = make_frame(1, 64);
  link.send(0, &m, 1, 0);
  // A shared one can be neither: it arrives once, intact.
  rte_mbuf* keep = make_frame(2, 64);
  rte_mbuf* c = rte_pktmbuf_clone(keep, pool_);
  ASSERT_NE(c, nullptr);
  link.send(0, &c, 1, 0);
  rte_mbuf* out[4];
  ASSERT_EQ(link.receive(1, out, 4, f.delay_ns), 2);
  EXPECT_EQ(bit_distance(flatten(out[0]), frame_bytes(1, 64)), 1);
  EXPECT_EQ(flatten(out[1]), frame_bytes(2, 64));
  EXPECT_EQ(flatten(keep), frame_bytes(2, 64));
  const LinkStats& s = link.stats(0);
  EXPECT_EQ(s.corrupted, 1u);
  EXPECT_EQ(s.duplicated, 0u);
  EXPECT_EQ(s.copy_failed, 3u);  // two duplicates, one copy-on-corrupt
  EXPECT_EQ(s.delivered, 2u);
  rte_pktmbuf_free(out[0]);
  rte_pktmbuf_free(out[1]);
  rte_pktmbuf_free(keep);
}

// ---- reordering and jitter -------------------------------------------------

// reorder 0.2 over 2,000 frames 1 us apart, held back 20 us: each frame
// arrives at send + delay or send + delay + 20 us, the held ones are the
// counter, ~Binomial (sd 17.9, +-89), and frames overtake them.
TEST_F(SimLinkTest, ReorderHoldsFramesBackSoOthersOvertake) {
  const uint64_t seed = base_seed(9);
  SCOPED_TRACE(seed_note(seed));
  LinkFaults f;
  f.reorder = 0.2;
  f.reorder_window_ns = 20000;
  SimLink link(seed, f, LinkFaults{}, pool_);
  const std::vector<Delivery> got = drive(link, evenly(2000, 1000));
  ASSERT_EQ(got.size(), 2000u);
  std::vector<int> times_seen(2000);
  uint64_t held = 0, inversions = 0;
  for (size_t k = 0; k < got.size(); ++k) {
    const uint32_t i = got[k].index();
    ASSERT_LT(i, 2000u);
    ++times_seen[i];
    const uint64_t sent_at = i * 1000ull;
    if (got[k].at_ns == sent_at + f.delay_ns + f.reorder_window_ns) {
      ++held;
    } else {
      EXPECT_EQ(got[k].at_ns, sent_at + f.delay_ns) << i;
    }
    if (k > 0 && i < got[k - 1].index()) ++inversions;
  }
  EXPECT_TRUE(std::all_of(times_seen.begin(), times_seen.end(), [](int n) { return n == 1; }));
  EXPECT_EQ(held, link.stats(0).reordered);
  expect_binomial(held, 2000, 0.2, "reordered", seed);
  EXPECT_GT(inversions, 100u);
}

// jitter 0..5000 ns: every extra delay in range, their mean 2500 within 5 sd
// (uniform sd 1443, of the mean over 2,000: 32, so +-161), both ends of the
// range reached, and frames 1 us apart overtake each other.
TEST_F(SimLinkTest, JitterStaysInRangeAndMayReorder) {
  const uint64_t seed = base_seed(10);
  SCOPED_TRACE(seed_note(seed));
  LinkFaults f;
  f.jitter_ns = 5000;
  SimLink link(seed, f, LinkFaults{}, pool_);
  const std::vector<Delivery> got = drive(link, evenly(2000, 1000));
  ASSERT_EQ(got.size(), 2000u);
  double sum = 0;
  uint64_t lo = UINT64_MAX, hi = 0, inversions = 0;
  for (size_t k = 0; k < got.size(); ++k) {
    const uint64_t extra = got[k].at_ns - got[k].index() * 1000ull - f.delay_ns;
    ASSERT_LE(extra, f.jitter_ns);  // (a negative extra wraps and fails here too)
    sum += double(extra);
    lo = std::min(lo, extra);
    hi = std::max(hi, extra);
    if (k > 0 && got[k].index() < got[k - 1].index()) ++inversions;
  }
  EXPECT_NEAR(sum / 2000, 2500, 161);
  EXPECT_LT(lo, 50u);
  EXPECT_GT(hi, 4950u);
  EXPECT_GT(inversions, 100u);
  EXPECT_EQ(link.stats(0).reordered, 0u);  // jitter is not "reorder"
}

// ---- determinism ------------------------------------------------------------

TEST_F(SimLinkTest, SameSeedAndCallsReplayExactlyAndDirectionsAreIndependent) {
  const uint64_t seed = base_seed(11);
  SCOPED_TRACE(seed_note(seed));
  LinkFaults f;
  f.loss = 0.05;
  f.burst_enter = 0.01;
  f.reorder = 0.1;
  f.duplicate = 0.05;
  f.corrupt = 0.05;
  f.jitter_ns = 3000;
  f.rate_bps = 25'000'000'000;
  f.queue_limit = 12;
  LinkFaults g = f;
  g.delay_ns = 2500;

  std::mt19937_64 rng(seed);
  std::vector<Send> both;
  uint64_t t = 0;
  for (uint32_t i = 0; i < 3000; ++i) {
    t += rng() % 400;
    const uint32_t len = 60 + uint32_t(rng() % 1400);
    both.push_back({t, int(rng() % 2), len, 1 + len / 3, i});
  }
  struct Run {
    std::vector<Delivery> got;
    LinkStats s0, s1;
  };
  const auto run = [&](uint64_t s, const std::vector<Send>& plan) {
    SimLink link(s, f, g, pool_);
    Run r;
    r.got = drive(link, plan);
    r.s0 = link.stats(0);
    r.s1 = link.stats(1);
    return r;
  };

  const Run a = run(seed, both);
  // Every fault fired, in both directions, so the comparison means something.
  for (const LinkStats* s : {&a.s0, &a.s1}) {
    EXPECT_GT(s->lost, s->burst_lost);
    EXPECT_GT(s->burst_lost, 0u);
    EXPECT_GT(s->duplicated, 0u);
    EXPECT_GT(s->corrupted, 0u);
    EXPECT_GT(s->reordered, 0u);
    EXPECT_GT(s->queue_dropped, 0u);
  }
  const Run b = run(seed, both);
  EXPECT_TRUE(a.got == b.got) << "same seed, same calls, different deliveries";
  EXPECT_EQ(a.s0, b.s0);
  EXPECT_EQ(a.s1, b.s1);
  const Run c = run(seed + 1, both);
  EXPECT_FALSE(a.got == c.got) << "seeds " << seed << " and " << seed + 1 << " gave the same deliveries";
  EXPECT_NE(a.s0, c.s0);

  // One direction's traffic does not change the other's fate: the frames
  // end 1 receives, time for time and bit for bit, are the same whether or
  // not end 1 was sending too.
  std::vector<Send> forward_only;
  for (const Send& s : both)
    if (s.from == 0) forward_only.push_back(s);
  const Run d = run(seed, forward_only);
  EXPECT_TRUE(d.got == at_end(a.got, 1));
  EXPECT_EQ(d.s0, a.s0);
  EXPECT_EQ(d.s1, LinkStats{});
}

// ---- the driver loop ---------------------------------------------------------

TEST_F(SimLinkTest, NextArrivalLetsTheDriverJumpTheClock) {
  LinkFaults fast;
  fast.delay_ns = 1000;
  LinkFaults slow;
  slow.delay_ns = 3000;
  SimLink link(base_seed(12), fast, slow, pool_);
  EXPECT_EQ(link.next_arrival_ns(), UINT64_MAX);
  EXPECT_EQ(link.in_flight(), 0u);

  // Ten seconds of protocol time: one frame each way every millisecond.
  constexpr uint64_t kMs = 1'000'000;
  constexpr uint64_t kEnd = 10'000 * kMs;
  core::VirtualClock clock;
  uint64_t sent = 0, received = 0, steps = 0, next_send = 0;
  rte_mbuf* out[8];
  for (;;) {
    // Everything that happens at this instant: arrivals, then sends.
    ++steps;
    uint16_t arrived = 0;
    for (int end : {0, 1}) {
      const uint16_t k = link.receive(end, out, 8, clock.now_ns());
      for (uint16_t j = 0; j < k; ++j) rte_pktmbuf_free(out[j]);
      arrived = uint16_t(arrived + k);
    }
    received += arrived;
    const bool sending = clock.now_ns() == next_send && next_send < kEnd;
    if (sending) {
      for (int from : {0, 1}) {
        rte_mbuf* m = make_frame(uint32_t(sent++), 64);
        link.send(from, &m, 1, clock.now_ns());
      }
      next_send += kMs;
    }
    // Each instant the loop visits has something to do.
    ASSERT_TRUE(sending || arrived != 0) << "idle step at " << clock.now_ns();
    const uint64_t next = std::min(link.next_arrival_ns(), next_send < kEnd ? next_send : UINT64_MAX);
    if (next == UINT64_MAX) break;
    ASSERT_GT(next, clock.now_ns());
    // Nothing is receivable before the time next_arrival_ns names.
    for (int end : {0, 1}) ASSERT_EQ(link.receive(end, out, 8, next - 1), 0) << next;
    clock.advance_to(next);
  }
  EXPECT_EQ(sent, 20'000u);
  EXPECT_EQ(received, sent);
  EXPECT_EQ(link.in_flight(), 0u);
  // One step per event time: the sends (every ms) and the two arrivals after
  // each (+1 us, +3 us), nothing in between.
  EXPECT_EQ(steps, 30'000u);
  EXPECT_EQ(clock.now_ns(), kEnd - kMs + 3000);
  EXPECT_EQ(link.next_arrival_ns(), UINT64_MAX);
}

// ---- tail drop ---------------------------------------------------------------

TEST_F(SimLinkTest, QueueLimitTailDrops) {
  LinkFaults f;
  f.queue_limit = 4;
  SimLink link(base_seed(13), f, LinkFaults{}, pool_);
  rte_mbuf* burst[10];
  for (uint32_t i = 0; i < 10; ++i) burst[i] = make_frame(i, 64);
  link.send(0, burst, 10, 0);
  EXPECT_EQ(link.stats(0).queue_dropped, 6u);
  EXPECT_EQ(link.in_flight(), 4u);
  rte_mbuf* out[16];
  ASSERT_EQ(link.receive(1, out, 16, f.delay_ns), 4);
  for (uint32_t i = 0; i < 4; ++i) {
    EXPECT_EQ(index_of(flatten(out[i])), i);  // the head of the burst got through
    rte_pktmbuf_free(out[i]);
  }
  // Received frames make room again.
  for (uint32_t i = 0; i < 10; ++i) burst[i] = make_frame(10 + i, 64);
  link.send(0, burst, 10, 2000);
  EXPECT_EQ(link.stats(0).queue_dropped, 12u);
  // Frames that have arrived but wait for the receiver still count (a full
  // RX ring): at 5000 ns all four have arrived and a fifth is still dropped.
  rte_mbuf* m = make_frame(20, 64);
  link.send(0, &m, 1, 5000);
  EXPECT_EQ(link.stats(0).queue_dropped, 13u);
  // The other direction has its own limit (none here).
  for (uint32_t i = 0; i < 10; ++i) burst[i] = make_frame(30 + i, 64);
  link.send(1, burst, 10, 5000);
  EXPECT_EQ(link.stats(1).queue_dropped, 0u);
  ASSERT_EQ(link.receive(1, out, 16, 5000), 4);
  for (uint32_t i = 0; i < 4; ++i) {
    EXPECT_EQ(index_of(flatten(out[i])), 10 + i);
    rte_pktmbuf_free(out[i]);
  }
  ASSERT_EQ(link.receive(0, out, 16, 6000), 10);
  for (uint32_t i = 0; i < 10; ++i) rte_pktmbuf_free(out[i]);
  const LinkStats& s = link.stats(0);
  EXPECT_EQ(s.sent, 21u);
  EXPECT_EQ(s.delivered, 8u);
}

// ---- healing, ownership ----------------------------------------------------------

TEST_F(SimLinkTest, SetFaultsHealsTheLinkMidRun) {
  LinkFaults dead;
  dead.loss = 1.0;
  SimLink link(base_seed(14), dead, LinkFaults{}, pool_);
  constexpr uint64_t kPhase = 100'000;
  std::vector<Delivery> got = drive(link, evenly(100, 100));
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(link.stats(0).lost, 100u);

  link.set_faults(0, LinkFaults{});
  got = drive(link, evenly(100, 100, 0, 64, kPhase));
  EXPECT_EQ(got.size(), 100u);

  // A Gilbert-Elliott channel stuck bad (exit 0) loses everything...
  LinkFaults stuck;
  stuck.burst_enter = 1.0;
  stuck.burst_exit = 0;
  link.set_faults(0, stuck);
  got = drive(link, evenly(100, 100, 0, 64, 2 * kPhase));
  EXPECT_TRUE(got.empty());
  // ...keeps its state across a change that leaves bursts on...
  stuck.burst_enter = 1e-9;
  link.set_faults(0, stuck);
  got = drive(link, evenly(100, 100, 0, 64, 3 * kPhase));
  EXPECT_TRUE(got.empty());
  // ...and turning bursts off makes it good, also for the next burst setting.
  link.set_faults(0, LinkFaults{});
  link.set_faults(0, stuck);
  got = drive(link, evenly(100, 100, 0, 64, 4 * kPhase));
  EXPECT_EQ(got.size(), 100u);
  EXPECT_EQ(link.stats(0).burst_lost, 200u);
}

TEST_F(SimLinkTest, DestructorFreesEverythingInFlight) {
  const unsigned before = rte_mempool_in_use_count(pool_);
  {
    LinkFaults f;
    f.delay_ns = 1'000'000'000;
    f.duplicate = 0.5;
    f.corrupt = 0.5;
    f.reorder = 0.5;
    SimLink link(base_seed(15), f, f, pool_);
    for (uint32_t i = 0; i < 200; ++i) {
      rte_mbuf* m = make_frame(i, 500, 120);
      if (i % 4 == 0) {  // some frames shared with a copy the test frees at once
        rte_mbuf* c = rte_pktmbuf_clone(m, pool_);
        ASSERT_NE(c, nullptr);
        rte_pktmbuf_free(m);
        m = c;
      }
      link.send(int(i % 2), &m, 1, i);
    }
    EXPECT_GT(link.in_flight(), 200u);
    EXPECT_GT(rte_mempool_in_use_count(pool_), before + 800);
  }
  EXPECT_EQ(rte_mempool_in_use_count(pool_), before);
}

}  // namespace
}  // namespace droce::net
