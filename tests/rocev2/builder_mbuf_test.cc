// Building and parsing on DPDK mbufs: one segment, the payload chained as it
// will be with zero-copy TX, and frames split across segments at every offset
// (headers included), as scattered RX delivers them.

#include <gtest/gtest.h>
#include <rte_mbuf.h>

#include <random>

#include "net/eal.h"
#include "net/frame_bytes.h"
#include "rocev2/builder.h"
#include "rocev2/parser.h"
#include "rocev2/random_packet.h"
#include "tests/test_support.h"

namespace droce::rocev2 {
namespace {

class MbufTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    pool_ = net::create_mbuf_pool("test_pool", 8192, 9216);
    small_ = net::create_mbuf_pool("test_small", 8192, 128);
  }
  void SetUp() override {
    ASSERT_NE(pool_, nullptr);
    ASSERT_NE(small_, nullptr);
    in_use_ = rte_mempool_in_use_count(pool_) + rte_mempool_in_use_count(small_);
  }
  void TearDown() override {
    // Expect: every test returns every mbuf it took.
    EXPECT_EQ(rte_mempool_in_use_count(pool_) + rte_mempool_in_use_count(small_), in_use_);
  }
  static std::vector<uint8_t> flatten(const rte_mbuf* m) {
    std::vector<uint8_t> out;
    net::FrameBytes(m).for_each_piece(0, m->pkt_len, [&](const uint8_t* p, size_t n) { out.insert(out.end(), p, p + n); });
    return out;
  }
  // The frame in segments of `seg_len` bytes (the last one shorter). With
  // `full_last`, the last segment's data ends at the end of its buffer.
  static rte_mbuf* scatter(std::span<const uint8_t> frame, size_t seg_len, bool full_last = false) {
    rte_mbuf* head = nullptr;
    for (size_t off = 0; off < frame.size(); off += seg_len) {
      rte_mbuf* s = rte_pktmbuf_alloc(pool_);
      const size_t n = std::min(seg_len, frame.size() - off);
      if (full_last && off + n == frame.size()) s->data_off = uint16_t(s->buf_len - n);
      std::memcpy(rte_pktmbuf_append(s, uint16_t(n)), frame.data() + off, n);
      if (head == nullptr) head = s;
      else if (rte_pktmbuf_chain(head, s) != 0) {
        rte_pktmbuf_free(s);
        rte_pktmbuf_free(head);
        return nullptr;
      }
    }
    return head;
  }

  // -1 when equal, else the first offset where they differ (or the shorter length).
  static long first_difference(const std::vector<uint8_t>& a, std::span<const uint8_t> b) {
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
      if (a[i] != b[i]) return long(i);
    return a.size() == b.size() ? -1 : long(std::min(a.size(), b.size()));
  }

  static rte_mempool* pool_;
  static rte_mempool* small_;
  unsigned in_use_ = 0;
};

rte_mempool* MbufTest::pool_ = nullptr;
rte_mempool* MbufTest::small_ = nullptr;

TEST_F(MbufTest, SingleSegmentBuildEqualsTheContiguousBuild) {
  std::mt19937_64 rng(1);
  std::vector<uint8_t> flat(kMaxHeaderLen + 4096 + 8);
  for (int i = 0; i < 500; ++i) {
    const RandomPacket r = random_packet(rng);
    const size_t len = build_frame(r.hdr, r.payload, flat);
    rte_mbuf* m = rte_pktmbuf_alloc(pool_);
    ASSERT_EQ(build_mbuf(r.hdr, r.payload, m), 0);
    EXPECT_EQ(first_difference(flatten(m), std::span<const uint8_t>(flat.data(), len)), -1);
    ParsedPacket p;
    EXPECT_EQ(parse_frame(m, &p), ParseStatus::ok);
    rte_pktmbuf_free(m);
  }
}

TEST_F(MbufTest, BuildRefusesWhatDoesNotFitAndLeavesTheMbufEmpty) {
  PacketHeaders h;
  h.bth.opcode = 0x04;
  std::vector<uint8_t> big(9000);
  rte_mbuf* m = rte_pktmbuf_alloc(small_);
  EXPECT_EQ(build_mbuf(h, big, m), -ENOSPC);
  EXPECT_EQ(m->pkt_len, 0u);
  h.bth.opcode = 0x11;  // an ACK carries no payload
  EXPECT_EQ(build_mbuf(h, std::vector<uint8_t>(4), m), -EINVAL);
  EXPECT_EQ(m->pkt_len, 0u);
  h.bth.opcode = 0x15;  // not an opcode
  EXPECT_EQ(build_mbuf(h, {}, m), -EINVAL);
  rte_pktmbuf_free(m);
}

TEST_F(MbufTest, ChainedPayloadGivesTheSameFrame) {
  std::mt19937_64 rng(2);
  std::vector<uint8_t> flat(kMaxHeaderLen + 4096 + 8);
  int chained = 0;
  for (int i = 0; i < 500; ++i) {
    const RandomPacket r = random_packet(rng);
    if (r.payload.empty()) continue;
    const size_t len = build_frame(r.hdr, r.payload, flat);
    rte_mbuf* head = rte_pktmbuf_alloc(small_);
    // The payload in two segments, the second one with or without tailroom.
    // Odd rounds leave no tailroom in the last segment: pad and ICRC need a new one.
    rte_mbuf* payload = scatter(r.payload, (r.payload.size() + 1) / 2, i % 2 == 1);
    ASSERT_NE(payload, nullptr);
    const uint16_t segs_before = payload->nb_segs;
    ASSERT_EQ(build_mbuf_chained(r.hdr, head, payload, small_), 0);
    EXPECT_EQ(head->nb_segs, 1 + segs_before + (i % 2 == 1 ? 1 : 0));
    EXPECT_EQ(first_difference(flatten(head), std::span<const uint8_t>(flat.data(), len)), -1);
    ParsedPacket p;
    EXPECT_EQ(parse_frame(head, &p), ParseStatus::ok);
    EXPECT_EQ(p.hdr, canonical(r.hdr, uint32_t(r.payload.size())));
    rte_pktmbuf_free(head);
    ++chained;
  }
  EXPECT_GT(chained, 100);
}

TEST_F(MbufTest, ChainedBuildFailsCleanlyWhenTheTailPoolIsEmpty) {
  PacketHeaders h;
  h.bth.opcode = 0x04;
  std::vector<uint8_t> data(33, 1);
  rte_mbuf* head = rte_pktmbuf_alloc(small_);
  rte_mbuf* payload = scatter(data, 64, true);  // no tailroom
  EXPECT_EQ(build_mbuf_chained(h, head, payload, nullptr), -ENOMEM);
  // Expect: nothing chained, both still the caller's and unchanged.
  EXPECT_EQ(head->pkt_len, 0u);
  EXPECT_EQ(payload->pkt_len, 33u);
  rte_pktmbuf_free(head);
  rte_pktmbuf_free(payload);
}

TEST_F(MbufTest, FramesSplitAtEveryOffsetParseTheSame) {
  std::mt19937_64 rng(3);
  for (int i = 0; i < 40; ++i) {
    const RandomPacket r = random_packet(rng, {.max_payload = 200});
    std::vector<uint8_t> flat(frame_len(r.hdr, uint32_t(r.payload.size())));
    ASSERT_NE(build_frame(r.hdr, r.payload, flat), 0u);
    ParsedPacket want;
    ASSERT_EQ(parse_frame(std::span<const uint8_t>(flat), &want), ParseStatus::ok);
    for (size_t seg = 1; seg < flat.size(); seg += (seg < 16 ? 1 : 7)) {
      rte_mbuf* m = scatter(flat, seg);
      if (m == nullptr) continue;  // more segments than an mbuf chain may hold
      ParsedPacket got;
      EXPECT_EQ(parse_frame(m, &got), ParseStatus::ok) << "segments of " << seg;
      EXPECT_EQ(got.hdr, want.hdr);
      EXPECT_EQ(got.icrc, want.icrc);
      // A flipped payload byte is still caught across segments.
      if (!r.payload.empty()) {
        rte_mbuf* s = m;
        size_t off = want.layout.payload_off;
        while (off >= s->data_len) { off -= s->data_len; s = s->next; }
        *rte_pktmbuf_mtod_offset(s, uint8_t*, off) ^= 1;
        EXPECT_EQ(parse_frame(m, &got), ParseStatus::bad_icrc);
      }
      rte_pktmbuf_free(m);
    }
  }
}

TEST_F(MbufTest, FrameBytesReadsAcrossSegmentsAndRefusesPastTheEnd) {
  std::vector<uint8_t> data(100);
  for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i);
  rte_mbuf* m = scatter(data, 30);
  net::FrameBytes fb(m);
  uint8_t scratch[64];
  const uint8_t* p = fb.read(25, 10, scratch);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p, scratch);  // crossed a segment boundary: copied
  for (int i = 0; i < 10; ++i) EXPECT_EQ(p[i], 25 + i);
  p = fb.read(31, 5, scratch);
  ASSERT_NE(p, nullptr);
  EXPECT_NE(p, scratch);  // inside one segment: no copy
  EXPECT_EQ(p[0], 31);
  EXPECT_EQ(fb.read(95, 6, scratch), nullptr);
  EXPECT_NE(fb.read(95, 5, scratch), nullptr);
  EXPECT_FALSE(fb.for_each_piece(90, 11, [](const uint8_t*, size_t) {}));
  size_t total = 0;
  EXPECT_TRUE(fb.for_each_piece(10, 90, [&](const uint8_t*, size_t n) { total += n; }));
  EXPECT_EQ(total, 90u);
  rte_pktmbuf_free(m);
}

}  // namespace
}  // namespace droce::rocev2
