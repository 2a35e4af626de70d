// droced's fault rules on crafted frames (droced/fault_stage.h): which frames a rule takes (by
// destination QP received, by sending QP sent, QP rules before port rules), what each fault does
// to the frames that come out (dropped, held until due and in order, copied out of a lent
// buffer, corrupted and discarded where the link has no ICRC, truncated, duplicated), rules
// changed and cleared between frames, FaultPort's order and back-pressure, and received frames
// timed by the link's receive stamp (net/rx_timestamp.h) where they carry one.

#include <gtest/gtest.h>

#include <rte_mbuf.h>

#include <cstring>
#include <vector>

#include "core/clock.h"
#include "droced/fault_stage.h"
#include "net/eal.h"
#include "net/frame_faults.h"
#include "net/headers.h"
#include "net/rx_timestamp.h"
#include "rocev2/builder.h"
#include "rocev2/opcode.h"
#include "rocev2/parser.h"
#include "tests/test_support.h"

namespace droce::droced {
namespace {

using rocev2::PacketHeaders;

class FaultStageTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    pool_ = net::create_mbuf_pool("fault_pool", 4096, 2048);
    ASSERT_EQ(stamps_.setup(), 0);
  }

  void TearDown() override {
    for (rte_mbuf* m : out_) rte_pktmbuf_free(m);
  }

  // A SEND Only to QP `dqpn` from QP `sqpn` (the engine's tag), `payload` bytes of `fill`.
  static rte_mbuf* frame(uint32_t dqpn, uint32_t sqpn = 0, uint32_t payload = 256, uint8_t fill = 0xab,
                         uint8_t tos = 0) {
    PacketHeaders h;
    h.l3.tos = tos;
    h.l3.src = rocev2::ipv4_mapped(0x0a000001);
    h.l3.dst = rocev2::ipv4_mapped(0x0a000002);
    h.bth.opcode = rocev2::op::kSendOnly;  // RC
    h.bth.dest_qp = dqpn;
    std::vector<uint8_t> data(payload, fill);
    rte_mbuf* m = rte_pktmbuf_alloc(pool_);
    EXPECT_NE(m, nullptr);
    EXPECT_EQ(rocev2::build_mbuf(h, data, m), 0);
    m->hash.usr = sqpn;
    return m;
  }
  static uint32_t dest_qp(const rte_mbuf* m) {
    uint32_t q = 0;
    EXPECT_TRUE(rocev2::peek_dest_qpn(rte_pktmbuf_mtod(m, const uint8_t*), m->data_len, &q));
    return q;
  }

  // The frame parses with its ICRC and IPv4 header checksum verified.
  static bool parses_checked(const rte_mbuf* m, rocev2::ParsedPacket* p) {
    rocev2::ParseOptions o;
    o.verify_icrc = true;
    o.verify_ipv4_checksum = true;
    return rocev2::parse_frame(m, p, o) == rocev2::ParseStatus::ok;
  }

  uint32_t add(const char* spec, uint32_t qpn = kAllQps, FaultDirection d = FaultDirection::rx, uint32_t id = 0) {
    FaultRule r;
    r.id = id;
    r.qpn = qpn;
    r.direction = d;
    EXPECT_EQ(r.spec.parse(spec), "");
    uint32_t got = 0;
    EXPECT_EQ(rules_.set(r, &got), 0);
    return got;
  }
  FaultCounters counters_of(const FaultStage& s, uint32_t id) {
    for (const auto& [i, c] : s.rule_counters())
      if (i == id) return c;
    ADD_FAILURE() << "no rule " << id;
    return {};
  }
  // Runs frames through direction d at time now; what came out is in out_ (appended).
  void run(FaultStage& s, FaultDirection d, std::vector<rte_mbuf*> in, uint64_t now) {
    s.refresh();
    s.process(d, in.data(), in.size(), now, &out_);
  }

  // A frame as a stamping link delivers it: received at t_ns (CLOCK_MONOTONIC).
  static rte_mbuf* stamped(rte_mbuf* m, uint64_t t_ns) {
    stamps_.stamp(m, t_ns);
    return m;
  }

  static rte_mempool* pool_;
  static net::RxTimestamp stamps_;
  FaultRules rules_;
  std::vector<rte_mbuf*> out_;
};
rte_mempool* FaultStageTest::pool_ = nullptr;
net::RxTimestamp FaultStageTest::stamps_;

TEST_F(FaultStageTest, WithoutRulesEveryFrameGoesOnUntouched) {
  FaultStage s(&rules_, 0, pool_, true);
  EXPECT_FALSE(s.active(FaultDirection::rx));
  rte_mbuf* a = frame(17);
  rte_mbuf* b = frame(18);
  run(s, FaultDirection::rx, {a, b}, 0);
  EXPECT_EQ(out_, (std::vector<rte_mbuf*>{a, b}));
}

TEST_F(FaultStageTest, AQpRuleTakesOnlyThatQpsFramesAndComesBeforeThePortRule) {
  const uint32_t port = add("delay=1us");  // added first, yet the QP's rule matches first
  const uint32_t qp = add("drop=100%", 17);
  FaultStage s(&rules_, 0, pool_, true);
  rte_mbuf* other = frame(18);
  run(s, FaultDirection::rx, {frame(17), other, frame(17)}, 1000);
  EXPECT_TRUE(out_.empty());  // QP 17's are lost, QP 18's held a microsecond
  EXPECT_EQ(counters_of(s, qp).dropped, 2u);
  EXPECT_EQ(counters_of(s, port).delayed, 1u);
  s.release(FaultDirection::rx, 2000, &out_);
  EXPECT_EQ(out_, (std::vector<rte_mbuf*>{other}));
  EXPECT_EQ(s.totals().matched, 3u);
}

TEST_F(FaultStageTest, ReceivedFramesThatAreNotRoceMatchNoRule) {
  // A port rule that drops everything, and a congestion point behind it for QP 17.
  const uint32_t drop = add("drop=100%");
  FaultStage s(&rules_, 0, pool_, true);
  // Step: the kernel's TCP segment (what af_packet shows droced on a shared netdev), and a UDP
  // datagram to another port. Expect: both pass untouched; no rule counts them.
  rte_mbuf* tcp = frame(17);
  rte_pktmbuf_mtod_offset(tcp, uint8_t*, net::kEthHdrLen)[9] = 6;  // IPv4 protocol: TCP
  rte_mbuf* udp = frame(17);
  rte_pktmbuf_mtod_offset(udp, uint8_t*, net::kEthHdrLen + net::kIpv4HdrLen)[3] = 0x00;  // dest port 4608
  run(s, FaultDirection::rx, {tcp, udp, frame(17)}, 0);
  EXPECT_EQ(out_, (std::vector<rte_mbuf*>{tcp, udp}));
  EXPECT_EQ(counters_of(s, drop).dropped, 1u) << "only the RoCE frame";
  EXPECT_EQ(s.totals().matched, 1u);
}

TEST_F(FaultStageTest, SentFramesMatchTheirSendingQpAndDirectionsStayApart) {
  const uint32_t id = add("drop=100%", 5, FaultDirection::tx);
  FaultStage s(&rules_, 0, pool_, true);
  EXPECT_TRUE(s.active(FaultDirection::tx));
  EXPECT_FALSE(s.active(FaultDirection::rx));
  rte_mbuf* kept = frame(5, /*sqpn=*/6);  // to QP 5, but from QP 6
  run(s, FaultDirection::tx, {frame(99, 5), kept}, 0);
  EXPECT_EQ(out_, (std::vector<rte_mbuf*>{kept}));
  EXPECT_EQ(counters_of(s, id).dropped, 1u);
  rte_mbuf* received = frame(5);
  run(s, FaultDirection::rx, {received}, 0);  // a tx rule leaves received frames alone
  EXPECT_EQ(out_.back(), received);
}

TEST_F(FaultStageTest, ACongestionPointHoldsFramesUntilTheyLeaveMarksCeAndDrops) {
  // 314-byte frames (256 payload) at 1 Gbit/s: 2512 ns each. kmin 300, kmax 600, pmax 0: a frame
  // finding more than 600 bytes queued is marked; more than 1000 with it does not fit.
  const uint32_t id = add("rate=1gbit,buffer=1000,ecn-min=300,ecn-max=600,ecn-pmax=0");
  FaultStage s(&rules_, 0, pool_, true);
  std::vector<rte_mbuf*> ect;
  for (uint8_t i = 0; i < 4; ++i) ect.push_back(frame(17, 0, 256, i, net::kEcnEct0));
  ASSERT_EQ(ect[0]->pkt_len, 314u);
  std::vector<rte_mbuf*> kept(ect.begin(), ect.begin() + 3);
  run(s, FaultDirection::rx, ect, 0);
  // Expect: nothing leaves at once; the 4th frame found 942 queued and was dropped.
  EXPECT_TRUE(out_.empty());
  EXPECT_EQ(s.next_release_ns(), 2512u);
  // Expect: at 2512 the first left; a frame that is not ECN-capable finds 628 > kmax: RED drops it.
  run(s, FaultDirection::rx, {frame(17, 0, 256, 9, net::kEcnNotEct)}, 2512);
  ASSERT_EQ(out_.size(), 1u);
  EXPECT_EQ(out_[0], kept[0]);
  EXPECT_EQ(counters_of(s, id).queue_depth, 628u);
  s.release(FaultDirection::rx, 7536, &out_);
  ASSERT_EQ(out_.size(), 3u);
  EXPECT_EQ(out_[1], kept[1]);
  // Expect: the third left with CE, its IPv4 checksum and ICRC still good (the ICRC masks TOS).
  for (size_t i = 0; i < 3; ++i) {
    rocev2::ParsedPacket p;
    ASSERT_TRUE(parses_checked(out_[i], &p)) << i;
    EXPECT_EQ(p.hdr.l3.tos & net::kEcnMask, i == 2 ? net::kEcnCe : net::kEcnEct0) << i;
  }
  const FaultCounters c = counters_of(s, id);
  EXPECT_EQ(c.matched, 5u);
  EXPECT_EQ(c.queue_marked, 1u);
  EXPECT_EQ(c.queue_dropped, 1u);
  EXPECT_EQ(c.queue_red_dropped, 1u);
  EXPECT_EQ(c.queue_bytes, 3u * 314);
  EXPECT_EQ(c.queue_depth, 0u);
  EXPECT_EQ(c.queue_depth_max, 942u);
  EXPECT_EQ(s.totals().queue_marked, 1u);
  EXPECT_EQ(s.totals().queue_depth, 0u);
  EXPECT_EQ(s.next_release_ns(), UINT64_MAX);
}

TEST_F(FaultStageTest, MarkOnDequeueMarksTheFirstFrameOutOfABurstAndItsDuplicate) {
  // The same queue as above marking on dequeue, every frame duplicated: three frames at 0 leave at
  // 2512, 5024 and 7536 with 628, 314 and 0 bytes behind them.
  const uint32_t id = add("rate=1gbit,buffer=2000,ecn-min=300,ecn-max=600,ecn-pmax=0,mark=dequeue,duplicate=100%");
  FaultStage s(&rules_, 0, pool_, true);
  std::vector<rte_mbuf*> in;
  for (uint8_t i = 0; i < 3; ++i) in.push_back(frame(17, 0, 256, i, net::kEcnEct0));
  run(s, FaultDirection::rx, in, 0);
  // Expect: nothing marked on arrival, though the third found 628 bytes queued.
  EXPECT_TRUE(out_.empty());
  EXPECT_EQ(counters_of(s, id).queue_marked, 0u);
  s.release(FaultDirection::rx, 2512, &out_);
  // Expect: the first out left more than kmax behind: it and its copy carry CE.
  ASSERT_EQ(out_.size(), 2u);
  s.release(FaultDirection::rx, 7536, &out_);
  ASSERT_EQ(out_.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    rocev2::ParsedPacket p;
    ASSERT_TRUE(parses_checked(out_[i], &p)) << i;
    EXPECT_EQ(p.hdr.l3.tos & net::kEcnMask, i < 2 ? net::kEcnCe : net::kEcnEct0) << i;
    EXPECT_EQ(rte_pktmbuf_mtod(out_[i], const uint8_t*)[p.layout.payload_off], i / 2) << i;  // each, then its copy
  }
  FaultCounters c = counters_of(s, id);
  EXPECT_EQ(c.queue_marked, 1u);
  EXPECT_EQ(c.duplicated, 3u);
  EXPECT_EQ(s.totals().queue_marked, 1u);
  EXPECT_EQ(s.totals().duplicated, 3u);

  // Expect: a frame that is not ECN-capable, leaving with kmax behind it, is RED dropped then
  // (and no copy is made of it).
  run(s, FaultDirection::rx,
      {frame(17, 0, 256, 7, net::kEcnNotEct), frame(17, 0, 256, 8, net::kEcnEct0), frame(17, 0, 256, 9, net::kEcnEct0)},
      10000);
  s.release(FaultDirection::rx, 12512, &out_);
  EXPECT_EQ(out_.size(), 6u);
  c = counters_of(s, id);
  EXPECT_EQ(c.queue_red_dropped, 1u);
  EXPECT_EQ(c.duplicated, 3u);
  s.release(FaultDirection::rx, 20000, &out_);
  EXPECT_EQ(out_.size(), 10u);
  EXPECT_EQ(s.next_release_ns(), UINT64_MAX);
}

TEST_F(FaultStageTest, MarkOnDequeueDecidesAtTheQueuesEndAndTheDelayComesAfter) {
  // Three frames at 0 through a queue marking on dequeue, then the link's 10 us: the first leaves
  // the queue at 2512 with 628 bytes behind it and arrives at 12512.
  const uint32_t id = add("rate=1gbit,ecn-min=300,ecn-max=600,ecn-pmax=0,mark=dequeue,delay=10us");
  FaultStage s(&rules_, 0, pool_, true);
  run(s, FaultDirection::rx,
      {frame(17, 0, 256, 1, net::kEcnEct0), frame(17, 0, 256, 2, net::kEcnEct0), frame(17, 0, 256, 3, net::kEcnEct0)}, 0);
  s.release(FaultDirection::rx, 2512, &out_);
  // Expect: decided as it left the queue (the depth then: 628), still on the link.
  EXPECT_TRUE(out_.empty());
  EXPECT_EQ(counters_of(s, id).queue_marked, 1u);
  EXPECT_EQ(s.next_release_ns(), 5024u);  // the second leaving the queue
  s.release(FaultDirection::rx, 12511, &out_);
  EXPECT_TRUE(out_.empty());
  s.release(FaultDirection::rx, 12512, &out_);
  ASSERT_EQ(out_.size(), 1u);
  EXPECT_EQ(net::frame_ecn(out_[0]), net::kEcnCe);
  s.release(FaultDirection::rx, 17536, &out_);
  ASSERT_EQ(out_.size(), 3u);
  EXPECT_EQ(net::frame_ecn(out_[2]), net::kEcnEct0);
  EXPECT_EQ(counters_of(s, id).queue_marked, 1u);
  EXPECT_EQ(s.next_release_ns(), UINT64_MAX);
}

TEST_F(FaultStageTest, AClearedCongestionPointLeavesNoDepthInTheTotals) {
  const uint32_t id = add("rate=1gbit");
  FaultStage s(&rules_, 0, pool_, true);
  run(s, FaultDirection::rx, {frame(17, 0, 256, 1, net::kEcnEct0), frame(17, 0, 256, 2, net::kEcnEct0)}, 0);
  EXPECT_EQ(s.totals().queue_depth, 628u);
  ASSERT_EQ(rules_.clear(id), 0);
  s.refresh();
  // Expect: the queue's frames still leave when due; the gauge no longer counts a queue that is gone.
  EXPECT_EQ(s.totals().queue_depth, 0u);
  s.release(FaultDirection::rx, 5024, &out_);
  EXPECT_EQ(out_.size(), 2u);
  EXPECT_EQ(s.totals().queue_marked, 0u);
}

// The case droced met on a busy host: a loop off its CPU for a while takes what the wire brought
// meanwhile in one burst. 314-byte frames at 1 Gbit/s take 2512 ns each; eight of them 5 us
// apart is a load the queue drains as it comes.
TEST_F(FaultStageTest, FramesStampedAsTheyCameBuildNoQueueThatOneBurstWithoutStampsWould) {
  const char* kQueue = "rate=1gbit,ecn-min=300,ecn-max=600,ecn-pmax=0";
  const uint32_t id = add(kQueue);
  auto eight = [&](bool with_stamps) {
    std::vector<rte_mbuf*> v;
    for (uint8_t i = 0; i < 8; ++i) {
      rte_mbuf* m = frame(17, 0, 256, i, net::kEcnEct0);
      v.push_back(with_stamps ? stamped(m, 10'000 + 5'000 * uint64_t{i}) : m);
    }
    return v;
  };
  {
    FaultStage s(&rules_, 0, pool_, true);
    const std::vector<rte_mbuf*> in = eight(true);
    // Step: the loop reads them all at 50 us, after the last came at 45 us.
    run(s, FaultDirection::rx, in, 50'000);
    // Expect: each found the queue empty and had left by 50 us: all go on now, in order,
    // unmarked; the deepest the queue was is one frame.
    EXPECT_EQ(out_, in);
    EXPECT_EQ(s.next_release_ns(), UINT64_MAX);
    const FaultCounters c = counters_of(s, id);
    EXPECT_EQ(c.wire_timed, 8u);
    EXPECT_EQ(c.queue_marked, 0u);
    EXPECT_EQ(c.queue_depth_max, 314u);
  }
  for (rte_mbuf* m : out_) rte_pktmbuf_free(m);
  out_.clear();
  {
    FaultStage s(&rules_, 0, pool_, true);
    // Step: the same frames without stamps, read at 50 us: the queue takes them all at 50 us.
    run(s, FaultDirection::rx, eight(false), 50'000);
    // Expect: 2512 bytes queued at once; each frame finding over 600 (the third on) marked;
    // none leaves before the first's last bit, 2512 ns later.
    EXPECT_TRUE(out_.empty());
    EXPECT_EQ(s.next_release_ns(), 52'512u);
    const FaultCounters c = counters_of(s, id);
    EXPECT_EQ(c.wire_timed, 0u);
    EXPECT_EQ(c.queue_marked, 6u);
    EXPECT_EQ(c.queue_depth_max, 8u * 314);
    s.release(FaultDirection::rx, 50'000 + 8 * 2'512, &out_);
    EXPECT_EQ(out_.size(), 8u);
  }
}

TEST_F(FaultStageTest, ArrivalLoopTimesStampedFramesByTheLoop) {
  const uint32_t id = add("rate=1gbit,ecn-min=300,ecn-max=600,ecn-pmax=0,arrival=loop");
  FaultStage s(&rules_, 0, pool_, true);
  std::vector<rte_mbuf*> in;
  for (uint8_t i = 0; i < 8; ++i) in.push_back(stamped(frame(17, 0, 256, i, net::kEcnEct0), 10'000 + 5'000 * i));
  run(s, FaultDirection::rx, in, 50'000);
  // Expect: as frames without stamps (the test above): one instant, a queue of eight.
  EXPECT_TRUE(out_.empty());
  const FaultCounters c = counters_of(s, id);
  EXPECT_EQ(c.wire_timed, 0u);
  EXPECT_EQ(c.queue_marked, 6u);
  EXPECT_EQ(c.queue_depth_max, 8u * 314);
  s.release(FaultDirection::rx, UINT64_MAX, &out_);
  EXPECT_EQ(out_, in);
}

TEST_F(FaultStageTest, AStampPastTheLoopsTimeOrOnASentFrameIsNotItsArrival) {
  const uint32_t rx = add("rate=1gbit", 17);
  const uint32_t tx = add("rate=1gbit", kAllQps, FaultDirection::tx);
  FaultStage s(&rules_, 0, pool_, true);
  // Step: a frame stamped 10 us after the loop's 100 us (it came after the loop read the clock).
  // Expect: queued at 100 us, so it leaves 2512 ns later, not at 112.512 us.
  run(s, FaultDirection::rx, {stamped(frame(17, 0, 256, 1, net::kEcnEct0), 110'000)}, 100'000);
  EXPECT_EQ(s.next_release_ns(), 102'512u);
  EXPECT_EQ(counters_of(s, rx).wire_timed, 0u);
  s.release(FaultDirection::rx, 102'512, &out_);
  ASSERT_EQ(out_.size(), 1u);
  // Step: a frame an engine sends in an mbuf stamped at 50 us (a received frame's, reused).
  // Expect: queued at the loop's 200 us; the old stamp would have let it leave at once.
  run(s, FaultDirection::tx, {stamped(frame(18, 5, 256, 2, net::kEcnEct0), 50'000)}, 200'000);
  EXPECT_EQ(out_.size(), 1u);
  EXPECT_EQ(s.next_release_ns(), 202'512u);
  EXPECT_EQ(counters_of(s, tx).wire_timed, 0u);
  s.release(FaultDirection::tx, 202'512, &out_);
  EXPECT_EQ(out_.size(), 2u);
}

TEST_F(FaultStageTest, ADelayRunsFromTheStampAndAFrameWhoseDelayHasPassedGoesOnAtOnce) {
  const uint32_t id = add("delay=10us");
  FaultStage s(&rules_, 0, pool_, true);
  rte_mbuf* early = stamped(frame(17, 0, 8, 1), 80'000);
  rte_mbuf* late = stamped(frame(17, 0, 8, 2), 95'000);
  run(s, FaultDirection::rx, {early, late}, 100'000);
  // Expect: the first came 20 us ago and waited out its 10 us in the ring; the second is due
  // 10 us after it came.
  EXPECT_EQ(out_, (std::vector<rte_mbuf*>{early}));
  EXPECT_EQ(s.next_release_ns(), 105'000u);
  EXPECT_EQ(counters_of(s, id).delayed, 2u);
  EXPECT_EQ(counters_of(s, id).wire_timed, 2u);
  s.release(FaultDirection::rx, 105'000, &out_);
  EXPECT_EQ(out_, (std::vector<rte_mbuf*>{early, late}));
}

TEST_F(FaultStageTest, HeldFramesComeOutWhenDueAndInTheirOrder) {
  add("delay=10us");
  FaultStage s(&rules_, 0, pool_, true);
  std::vector<rte_mbuf*> in = {frame(17, 0, 8, 1), frame(17, 0, 8, 2), frame(17, 0, 8, 3)};
  run(s, FaultDirection::rx, in, 100'000);
  EXPECT_TRUE(out_.empty());
  EXPECT_EQ(s.next_release_ns(), 110'000u);
  s.release(FaultDirection::rx, 109'999, &out_);
  EXPECT_TRUE(out_.empty());
  s.release(FaultDirection::rx, 110'000, &out_);
  EXPECT_EQ(out_, in);  // equal delays keep their order
  EXPECT_EQ(s.next_release_ns(), UINT64_MAX);
}

TEST_F(FaultStageTest, TheReorderWindowLetsLaterFramesOvertake) {
  add("reorder=100%,window=50us");
  FaultStage s(&rules_, 0, pool_, true);
  rte_mbuf* first = frame(17, 0, 8, 1);
  run(s, FaultDirection::rx, {first}, 0);
  rules_.clear(0);  // the next frame goes straight on
  rte_mbuf* second = frame(17, 0, 8, 2);
  run(s, FaultDirection::rx, {second}, 10'000);
  s.release(FaultDirection::rx, 60'000, &out_);
  EXPECT_EQ(out_, (std::vector<rte_mbuf*>{second, first}));
  EXPECT_FALSE(s.active(FaultDirection::rx));  // no rule and nothing held
}

TEST_F(FaultStageTest, AHeldFrameInALentBufferIsCopiedAndTheLoanReturned) {
  add("delay=5us");
  FaultStage s(&rules_, 0, pool_, true);
  // A frame in a buffer lent to its mbuf, as a droce_shm slot is: an external buffer whose
  // free callback says when the loan ends.
  rte_mbuf* model = frame(17, 0, 64, 0x5a);
  alignas(64) static uint8_t slot[2048];
  static bool returned;
  returned = false;
  uint16_t len = sizeof slot;
  rte_mbuf_ext_shared_info* shinfo = rte_pktmbuf_ext_shinfo_init_helper(
      slot, &len, [](void*, void*) { returned = true; }, nullptr);
  ASSERT_NE(shinfo, nullptr);
  rte_mbuf* lent = rte_pktmbuf_alloc(pool_);
  rte_pktmbuf_attach_extbuf(lent, slot, RTE_BAD_IOVA, len, shinfo);
  std::memcpy(rte_pktmbuf_append(lent, uint16_t(model->pkt_len)), rte_pktmbuf_mtod(model, void*), model->pkt_len);
  run(s, FaultDirection::rx, {lent}, 0);
  EXPECT_TRUE(returned);  // held as a copy: the slot is free at once
  s.release(FaultDirection::rx, 5'000, &out_);
  ASSERT_EQ(out_.size(), 1u);
  EXPECT_FALSE(RTE_MBUF_HAS_EXTBUF(out_[0]));
  ASSERT_EQ(out_[0]->pkt_len, model->pkt_len);
  EXPECT_EQ(std::memcmp(rte_pktmbuf_mtod(out_[0], void*), rte_pktmbuf_mtod(model, void*), model->pkt_len), 0);
  rte_pktmbuf_free(model);
}

TEST_F(FaultStageTest, CorruptionFlipsOnePayloadBitOrIsDiscardedWhereNoIcrcWouldCatchIt) {
  const uint32_t id = add("corrupt=100%,corrupt-at=payload");
  {
    FaultStage s(&rules_, 0, pool_, /*icrc_on_link=*/true);
    rte_mbuf* m = frame(17, 0, 256, 0);
    run(s, FaultDirection::rx, {m}, 0);
    ASSERT_EQ(out_.size(), 1u);
    // Exactly one bit differs, and inside the 256 payload bytes (those before the ICRC).
    const auto* p = rte_pktmbuf_mtod(out_[0], const uint8_t*);
    const uint32_t payload_off = out_[0]->pkt_len - 256 - 4;
    int bits = 0;
    for (uint32_t i = payload_off; i < payload_off + 256; ++i) bits += __builtin_popcount(p[i]);
    EXPECT_EQ(bits, 1);
    EXPECT_EQ(counters_of(s, id).corrupted, 1u);
    EXPECT_EQ(counters_of(s, id).corrupt_discarded, 0u);
  }
  FaultStage s(&rules_, 0, pool_, /*icrc_on_link=*/false);
  const size_t before = out_.size();
  run(s, FaultDirection::rx, {frame(17)}, 0);
  EXPECT_EQ(out_.size(), before);
  EXPECT_EQ(counters_of(s, id).corrupt_discarded, 1u);
}

TEST_F(FaultStageTest, TruncationShortensAndDuplicationCopies) {
  const uint32_t t = add("truncate=100%", 17);
  const uint32_t d = add("duplicate=100%", 18);
  FaultStage s(&rules_, 0, pool_, true);
  rte_mbuf* long_frame = frame(17, 0, 1000);
  const uint32_t full = long_frame->pkt_len;
  rte_mbuf* dup = frame(18, 0, 100, 0x33);
  run(s, FaultDirection::rx, {long_frame, dup}, 0);
  ASSERT_EQ(out_.size(), 3u);
  EXPECT_LT(out_[0]->pkt_len, full);
  EXPECT_GE(out_[0]->pkt_len, net::kMinTruncatedLen);
  EXPECT_EQ(out_[1], dup);
  EXPECT_NE(out_[2], dup);
  EXPECT_EQ(out_[2]->pkt_len, dup->pkt_len);
  EXPECT_EQ(std::memcmp(rte_pktmbuf_mtod(out_[2], void*), rte_pktmbuf_mtod(dup, void*), dup->pkt_len), 0);
  EXPECT_EQ(counters_of(s, t).truncated, 1u);
  EXPECT_EQ(counters_of(s, d).duplicated, 1u);
}

TEST_F(FaultStageTest, ARuleChangedKeepsItsCountersAndAClearedOneStops) {
  const uint32_t id = add("drop=100%", 17);
  FaultStage s(&rules_, 0, pool_, true);
  run(s, FaultDirection::rx, {frame(17)}, 0);
  add("delay=1us", 17, FaultDirection::rx, id);  // the same rule, another fault
  run(s, FaultDirection::rx, {frame(17)}, 0);
  const FaultCounters c = counters_of(s, id);
  EXPECT_EQ(c.matched, 2u);
  EXPECT_EQ(c.dropped, 1u);
  EXPECT_EQ(c.delayed, 1u);
  EXPECT_EQ(rules_.clear(id), 0);
  EXPECT_EQ(rules_.clear(id), -ENOENT);
  rte_mbuf* m = frame(17);
  run(s, FaultDirection::rx, {m}, 0);
  EXPECT_EQ(out_.back(), m);
  EXPECT_TRUE(s.rule_counters().empty());
  EXPECT_EQ(s.totals().matched, 2u);  // the device's totals keep what removed rules did
  s.release(FaultDirection::rx, 1'000'000, &out_);
}

TEST_F(FaultStageTest, TheSameSeedDropsTheSameFrames) {
  add("drop=30%");
  auto survivors = [&](unsigned core) {
    FaultStage s(&rules_, core, pool_, true);
    std::vector<int> kept;
    for (int i = 0; i < 200; ++i) {
      std::vector<rte_mbuf*> got;
      rte_mbuf* m = frame(17, 0, 8);
      rte_mbuf* one[] = {m};
      s.process(FaultDirection::rx, one, 1, 0, &got);
      if (!got.empty()) kept.push_back(i);
      for (rte_mbuf* g : got) rte_pktmbuf_free(g);
    }
    return kept;
  };
  EXPECT_EQ(survivors(0), survivors(0));
  EXPECT_NE(survivors(0), survivors(1));  // each core has dice of its own
}

TEST_F(FaultStageTest, RulesAreBoundedAndDirectionsChecked) {
  FaultRule r;
  r.direction = static_cast<FaultDirection>(0);
  uint32_t id;
  EXPECT_EQ(rules_.set(r, &id), -EINVAL);
  r.direction = FaultDirection::rx;
  for (size_t i = 0; i < FaultRules::kMaxRules; ++i) ASSERT_EQ(rules_.set(r, &id), 0);
  EXPECT_EQ(rules_.set(r, &id), -ENOSPC);
}

// FaultPort: the engine's port with the tx rules in front.
class Sink : public rocev2::PacketPort {
 public:
  uint16_t tx_burst(rte_mbuf** frames, uint16_t n) override {
    const uint16_t k = std::min<uint16_t>(n, room);
    sent.insert(sent.end(), frames, frames + k);
    room -= k;
    return k;
  }
  ~Sink() override {
    for (rte_mbuf* m : sent) rte_pktmbuf_free(m);
  }
  uint16_t room = UINT16_MAX;
  std::vector<rte_mbuf*> sent;
};

TEST_F(FaultStageTest, AFaultPortPassesStraightThroughWithoutRulesAndQueuesInOrderWithThem) {
  FaultStage s(&rules_, 0, pool_, true);
  Sink sink;
  FaultPort port(&sink, &s);
  std::vector<rte_mbuf*> a = {frame(1, 1), frame(1, 1)};
  EXPECT_EQ(port.tx_burst(a.data(), 2), 2);
  EXPECT_EQ(sink.sent, a);

  add("duplicate=0%", 1, FaultDirection::tx);  // a rule that does nothing: not active
  add("delay=1ms", 2, FaultDirection::tx);
  s.refresh();
  sink.room = 1;  // the port takes one frame, then is full
  std::vector<rte_mbuf*> b = {frame(9, 1), frame(9, 1), frame(9, 2)};
  EXPECT_EQ(port.tx_burst(b.data(), 3), 3);  // all taken: one sent, one queued, one held
  EXPECT_EQ(sink.sent.size(), 3u);
  EXPECT_TRUE(port.has_queued());
  sink.room = UINT16_MAX;
  port.poll(0);  // the queued one goes; the held one is not due
  EXPECT_EQ(sink.sent, (std::vector<rte_mbuf*>{a[0], a[1], b[0], b[1]}));
  port.poll(UINT64_MAX);
  EXPECT_EQ(sink.sent.back(), b[2]);
  EXPECT_FALSE(port.has_queued());
}

// A frame as `mac` sent it.
rte_mbuf* from(const net::MacAddr& mac, rte_mbuf* m) {
  std::memcpy(rte_pktmbuf_mtod_offset(m, uint8_t*, 6), mac.data(), 6);
  return m;
}

TEST_F(FaultStageTest, ALosslessQueuePausesItsSendersAtXoffAndResumesThemAtXon) {
  // 314-byte frames through 1 Gbit/s: 2512 ns each. Two from A at DSCP 26 (priority 3), one
  // from B at DSCP 0, all at 0: 942 bytes queued, past xoff.
  const net::MacAddr a{2, 0, 0, 0, 0, 0xa}, b{2, 0, 0, 0, 0, 0xb};
  const uint32_t id = add("rate=1gbit,buffer=4000,pfc-xoff=900,pfc-xon=300");
  FaultStage s(&rules_, 0, pool_, true, 10'000'000'000ull);
  s.refresh();
  run(s, FaultDirection::rx, {from(a, frame(17, 0, 256, 1, 0x68)), from(a, frame(17, 0, 256, 2, 0x68)),
                              from(b, frame(17, 0, 256, 3, 0))}, 0);
  std::vector<net::PauseOut> p;
  s.take_pauses(&p);
  // Expect: an XOFF to each, for its own frames' priorities, for the longest pause.
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].dst, a);
  EXPECT_EQ(p[0].enable, 0x08);
  EXPECT_EQ(p[0].quanta, 0xffff);
  EXPECT_EQ(p[1].dst, b);
  EXPECT_EQ(p[1].enable, 0x01);
  p.clear();
  s.take_pauses(&p);
  EXPECT_TRUE(p.empty());  // taken once
  // Draining: 628 and then 314 bytes are still above xon: nothing.
  s.release(FaultDirection::rx, 2512, &out_);
  s.release(FaultDirection::rx, 5024, &out_);
  s.take_pauses(&p);
  EXPECT_TRUE(p.empty());
  // Empty: XON (quanta 0) to both.
  s.release(FaultDirection::rx, 7536, &out_);
  EXPECT_EQ(out_.size(), 3u);
  s.take_pauses(&p);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].quanta, 0);
  EXPECT_EQ(p[1].enable, 0x01);
  const FaultCounters c = counters_of(s, id);
  EXPECT_EQ(c.pfc_xoff_sent, 2u);
  EXPECT_EQ(c.pfc_xon_sent, 2u);
  EXPECT_EQ(c.pfc_paused_us, 7u);
  EXPECT_EQ(c.queue_dropped, 0u);
  EXPECT_EQ(s.totals().pfc_xoff_sent, 2u);
}

TEST_F(FaultStageTest, ASenderThatMissedItsPauseIsPausedAgainEvenWhenTheFullQueueDropsItsFrame) {
  // 1 Mbit/s: 314 bytes take 2.5 ms to leave. Three frames fill the queue past xoff: XOFF.
  const net::MacAddr a{2, 0, 0, 0, 0, 0xa};
  const uint32_t id = add("rate=1mbit,buffer=1000,pfc-xoff=600,pfc-xon=300");
  FaultStage s(&rules_, 0, pool_, true, 10'000'000'000ull);
  run(s, FaultDirection::rx, {from(a, frame(17)), from(a, frame(17)), from(a, frame(17))}, 0);
  std::vector<net::PauseOut> p;
  s.take_pauses(&p);
  ASSERT_EQ(p.size(), 1u);
  p.clear();
  // Step: 250 us later, long after the pause should have stopped it, A's next frame: the queue
  // (still ~911 bytes) has no room. Expect: dropped, and A paused again at once.
  run(s, FaultDirection::rx, {from(a, frame(17))}, 250'000);
  FaultCounters c = counters_of(s, id);
  EXPECT_EQ(c.queue_dropped, 1u);
  s.take_pauses(&p);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].dst, a);
  EXPECT_NE(p[0].quanta, 0);
  EXPECT_EQ(c.pfc_repaused, 1u);
  EXPECT_EQ(c.pfc_xoff_sent, 2u);
}

TEST_F(FaultStageTest, AClearedLosslessRuleReleasesItsSendersAndATxRuleNeverPauses) {
  const net::MacAddr a{2, 0, 0, 0, 0, 0xa};
  add("rate=1gbit,pfc-xoff=300", kAllQps, FaultDirection::tx);
  const uint32_t rx = add("rate=1gbit,pfc-xoff=300", kAllQps, FaultDirection::rx, 9);
  FaultStage s(&rules_, 0, pool_, true);
  std::vector<rte_mbuf*> sent = {from(a, frame(17, 17)), from(a, frame(17, 17))};
  s.process(FaultDirection::tx, sent.data(), sent.size(), 0, &out_);
  std::vector<net::PauseOut> p;
  s.take_pauses(&p);
  EXPECT_TRUE(p.empty());  // the tx queue is deep, but its senders are this host's QPs
  run(s, FaultDirection::rx, {from(a, frame(17)), from(a, frame(17))}, 0);
  s.take_pauses(&p);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].quanta, 0);
  p.clear();
  // Step: the rule goes while its queue is still above xon. Expect: XON at once.
  ASSERT_EQ(rules_.clear(rx), 0);
  s.refresh();
  s.take_pauses(&p);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].dst, a);
  EXPECT_EQ(p[0].quanta, 0);
  EXPECT_EQ(s.totals().pfc_xon_sent, 1u);
}

TEST_F(FaultStageTest, AFaultPortHoldsAPausedPriorityAndSendsTheRest) {
  FaultStage s(&rules_, 0, pool_, true);
  Sink sink;
  net::PauseGate gate;
  FaultPort port(&sink, &s, {}, &gate);
  net::PauseFrame pause;
  pause.enable = 0x08;  // priority 3 (DSCP 26) for 0xffff quanta at 1 Mbit/s: half a minute
  pause.quanta[3] = 0xffff;
  gate.apply(pause, core::monotonic_ns(), 1'000'000);
  // Expect: the burst stops before the first frame of the paused priority; the engine keeps it.
  std::vector<rte_mbuf*> f = {frame(1, 1, 64, 0, 0), frame(1, 1, 64, 0, 0x68), frame(1, 1, 64, 0, 0)};
  EXPECT_EQ(port.tx_burst(f.data(), 3), 1);
  EXPECT_EQ(port.tx_burst(f.data() + 1, 2), 0);
  EXPECT_EQ(port.pause_waits(), 2u);
  EXPECT_EQ(sink.sent, (std::vector<rte_mbuf*>{f[0]}));
  // XON: both go.
  pause.quanta[3] = 0;
  gate.apply(pause, core::monotonic_ns(), 1'000'000);
  EXPECT_EQ(port.tx_burst(f.data() + 1, 2), 2);
  EXPECT_EQ(sink.sent.size(), 3u);
  EXPECT_FALSE(gate.engaged());
}

}  // namespace
}  // namespace droce::droced
