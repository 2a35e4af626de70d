// Memory windows between two engines (IBA 10.6.7): binds through the send
// queue, WRITE and READ through a window's R_Key, its range and access, tags,
// type 2's QP, zero-based windows, and the two ways to invalidate one.

#include <gtest/gtest.h>

#include <numeric>

#include "tests/rocev2/engine_pair.h"
#include "tests/test_support.h"

namespace droce::test {
namespace {

constexpr uint32_t kRemoteRw = kAccessRemoteWrite | kAccessRemoteRead;

class MemoryWindowTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { pool_ = net::create_mbuf_pool("mw_pool", 8192, 4096 + 256); }
  void SetUp() override {
    ASSERT_NE(pool_, nullptr);
    in_use_ = rte_mempool_in_use_count(pool_);
  }
  void TearDown() override {
    pair_.reset();
    EXPECT_EQ(rte_mempool_in_use_count(pool_), in_use_);  // Expect: every frame freed
  }
  EnginePair& make() {
    pair_ = std::make_unique<EnginePair>(1, net::LinkFaults{}, pool_, false);
    return *pair_;
  }
  static SendWr wr(WrOpcode op, uint64_t id) {
    SendWr w;
    w.wr_id = id;
    w.opcode = op;
    w.send_flags = kSendSignaled;
    return w;
  }
  /// A bind of window `mw_rkey` to [off, off + len) of `b`, asking for the next tag.
  static SendWr bind(uint64_t id, uint32_t mw_rkey, const EnginePair::Buf& b, uint64_t off, uint64_t len,
                     uint32_t access) {
    SendWr w = wr(WrOpcode::bind_mw, id);
    w.invalidate_rkey = mw_rkey;
    w.rkey = (mw_rkey & ~0xffu) | ((mw_rkey + 1) & 0xffu);  // ibv_inc_rkey
    w.bind_mr_lkey = b.mr->lkey;
    w.remote_addr = b.va() + off;
    w.bind_length = len;
    w.bind_access = access;
    return w;
  }
  static SendWr rdma(WrOpcode op, uint64_t id, const EnginePair::Buf& local, uint32_t len, uint64_t raddr,
                     uint32_t rkey) {
    SendWr w = wr(op, id);
    w.num_sge = 1;
    w.sg_list[0] = local.sge(0, len);
    w.remote_addr = raddr;
    w.rkey = rkey;
    return w;
  }
  /// Posts `w` on host i's QP and returns its completion.
  Completion run(int i, uint32_t qpn, const SendWr& w) {
    EnginePair& p = *pair_;
    EXPECT_EQ(p.host(i).engine->post_send(qpn, w), 0);
    std::vector<Completion> c;
    EXPECT_TRUE(p.wait_completions(p.host(i).scq, &c, 1));
    return c.empty() ? Completion{} : c[0];
  }
  /// Binds a new window of `type` on B to [off, off + len) of `target` through B's QP `qpn`;
  /// returns the window's new R_Key.
  uint32_t bound_window(MwType type, uint32_t qpn, const EnginePair::Buf& target, uint64_t off, uint64_t len,
                        uint32_t access) {
    uint32_t rkey = 0;
    EXPECT_EQ(pair_->b().alloc_mw(pair_->host(1).pd, type, &rkey), 0);
    const SendWr w = bind(7, rkey, target, off, len, access);
    const Completion c = run(1, qpn, w);
    EXPECT_EQ(c.status, WcStatus::success);
    EXPECT_EQ(c.opcode, WcOpcode::bind_mw);
    return w.rkey;
  }

  static rte_mempool* pool_;
  unsigned in_use_ = 0;
  std::unique_ptr<EnginePair> pair_;
};

rte_mempool* MemoryWindowTest::pool_ = nullptr;

// B's region allows no remote access at all: only the window opens part of it.
constexpr uint32_t kBindable = kAccessLocalWrite | kAccessMwBind;

TEST_F(MemoryWindowTest, Type2WindowCarriesWriteAndReadWithinItsRange) {
  EnginePair& p = make();
  QpPair q = p.connect({});
  auto target = p.buffer(1, 4096, kBindable);
  auto src = p.buffer(0, 2000);
  auto back = p.buffer(0, 2000);
  std::iota(src->bytes.begin(), src->bytes.end(), uint8_t{1});
  const uint32_t rkey = bound_window(MwType::type2, q.b, *target, 1000, 2000, kRemoteRw);
  // Expect: a WRITE of the whole window (two packets at MTU 1024) lands at its address.
  Completion c = run(0, q.a, rdma(WrOpcode::rdma_write, 1, *src, 2000, target->va() + 1000, rkey));
  ASSERT_EQ(c.status, WcStatus::success);
  EXPECT_EQ(std::memcmp(target->bytes.data() + 1000, src->bytes.data(), 2000), 0);
  EXPECT_EQ(target->bytes[999], 0);
  // Expect: a READ through it returns the same bytes.
  c = run(0, q.a, rdma(WrOpcode::rdma_read, 2, *back, 2000, target->va() + 1000, rkey));
  ASSERT_EQ(c.status, WcStatus::success);
  EXPECT_EQ(back->bytes, src->bytes);
  // Expect: one byte past the window is a remote access error, though the MR goes on.
  c = run(0, q.a, rdma(WrOpcode::rdma_write, 3, *src, 8, target->va() + 2996, rkey));
  EXPECT_EQ(c.status, WcStatus::rem_access_err);
}

TEST_F(MemoryWindowTest, WindowAccessFlagsAreItsOwnNotTheRegions) {
  EnginePair& p = make();
  QpPair q = p.connect({});
  auto target = p.buffer(1, 256, kBindable | kAccessRemoteWrite);  // the MR would allow WRITE
  auto src = p.buffer(0, 64);
  const uint32_t rkey = bound_window(MwType::type2, q.b, *target, 0, 256, kAccessRemoteRead);
  EXPECT_EQ(run(0, q.a, rdma(WrOpcode::rdma_read, 1, *src, 64, target->va(), rkey)).status, WcStatus::success);
  // Expect: the read-only window refuses a WRITE.
  EXPECT_EQ(run(0, q.a, rdma(WrOpcode::rdma_write, 2, *src, 64, target->va(), rkey)).status,
            WcStatus::rem_access_err);
}

TEST_F(MemoryWindowTest, SendWithInvalidateRevokesAType2Window) {
  EnginePair& p = make();
  QpPair q = p.connect({});
  auto target = p.buffer(1, 256, kBindable);
  auto src = p.buffer(0, 64);
  auto rbuf = p.buffer(1, 64);
  const uint32_t rkey = bound_window(MwType::type2, q.b, *target, 0, 256, kRemoteRw);
  ASSERT_EQ(run(0, q.a, rdma(WrOpcode::rdma_write, 1, *src, 64, target->va(), rkey)).status, WcStatus::success);
  ASSERT_EQ(p.b().post_recv(q.b, {9, 1, {rbuf->sge(0, 64)}}), 0);
  SendWr inv = rdma(WrOpcode::send_with_inv, 2, *src, 16, 0, 0);
  inv.invalidate_rkey = rkey;
  ASSERT_EQ(run(0, q.a, inv).status, WcStatus::success);
  std::vector<Completion> rc;
  ASSERT_TRUE(p.wait_completions(p.host(1).rcq, &rc, 1));
  // Expect: B's receive says which key went (IBV_WC_WITH_INV, invalidated_rkey).
  EXPECT_EQ(rc[0].status, WcStatus::success);
  EXPECT_EQ(rc[0].wc_flags, uint32_t(kWcWithInv));
  EXPECT_EQ(rc[0].imm_data, rkey);
  // Expect: the next access through the window is NAKed with a remote access error.
  EXPECT_EQ(run(0, q.a, rdma(WrOpcode::rdma_write, 3, *src, 64, target->va(), rkey)).status,
            WcStatus::rem_access_err);
}

TEST_F(MemoryWindowTest, LocalInvalidateRevokesAType2WindowAndFreesItForABind) {
  EnginePair& p = make();
  QpPair q = p.connect({});
  auto target = p.buffer(1, 256, kBindable);
  auto src = p.buffer(0, 64);
  const uint32_t rkey = bound_window(MwType::type2, q.b, *target, 0, 256, kRemoteRw);
  // Expect: binding a bound type 2 window again fails (o10-37.2.30).
  EXPECT_EQ(run(1, q.b, bind(8, rkey, *target, 0, 64, kRemoteRw)).status, WcStatus::mw_bind_err);
  // That error put B's QP in the error state: start again on a fresh pair of QPs.
  QpPair q2 = p.connect({});
  uint32_t key2 = 0;
  ASSERT_EQ(p.b().alloc_mw(p.host(1).pd, MwType::type2, &key2), 0);
  SendWr b2 = bind(10, key2, *target, 0, 256, kRemoteRw);
  ASSERT_EQ(run(1, q2.b, b2).status, WcStatus::success);
  SendWr inv = wr(WrOpcode::local_inv, 11);
  inv.invalidate_rkey = b2.rkey;
  const Completion c = run(1, q2.b, inv);
  EXPECT_EQ(c.status, WcStatus::success);
  EXPECT_EQ(c.opcode, WcOpcode::local_inv);
  // Expect: a free window binds again, with the next tag.
  SendWr b3 = bind(12, b2.rkey, *target, 0, 128, kRemoteRw);
  ASSERT_EQ(run(1, q2.b, b3).status, WcStatus::success);
  EXPECT_EQ(b3.rkey & 0xff, (b2.rkey + 1) & 0xff);
  EXPECT_EQ(run(0, q2.a, rdma(WrOpcode::rdma_write, 13, *src, 64, target->va(), b3.rkey)).status,
            WcStatus::success);
  // Expect: the key of the invalidated binding stays dead.
  EXPECT_EQ(run(0, q2.a, rdma(WrOpcode::rdma_write, 14, *src, 64, target->va(), b2.rkey)).status,
            WcStatus::rem_access_err);
}

TEST_F(MemoryWindowTest, EachBindOfAType1WindowMovesItsTagAndKillsTheOldKey) {
  EnginePair& p = make();
  QpPair q = p.connect({});
  auto target = p.buffer(1, 256, kBindable);
  auto src = p.buffer(0, 64);
  const uint32_t k1 = bound_window(MwType::type1, q.b, *target, 0, 256, kRemoteRw);
  ASSERT_EQ(run(0, q.a, rdma(WrOpcode::rdma_write, 1, *src, 64, target->va(), k1)).status, WcStatus::success);
  // A type 1 window rebinds while bound (ibv_bind_mw); the key keeps its index.
  SendWr again = bind(2, k1, *target, 64, 64, kRemoteRw);
  ASSERT_EQ(run(1, q.b, again).status, WcStatus::success);
  const uint32_t k2 = again.rkey;
  EXPECT_EQ(k2 >> 8, k1 >> 8);
  EXPECT_NE(k2, k1);
  EXPECT_EQ(run(0, q.a, rdma(WrOpcode::rdma_write, 3, *src, 64, target->va() + 64, k2)).status,
            WcStatus::success);
  // Expect: the first binding's key is refused now.
  EXPECT_EQ(run(0, q.a, rdma(WrOpcode::rdma_write, 4, *src, 64, target->va() + 64, k1)).status,
            WcStatus::rem_access_err);
}

TEST_F(MemoryWindowTest, AType2WindowAnswersOnlyTheQpItIsBoundTo) {
  EnginePair& p = make();
  QpPair mine = p.connect({});
  QpPair other = p.connect({});
  auto target = p.buffer(1, 256, kBindable);
  auto src = p.buffer(0, 64);
  const uint32_t rkey = bound_window(MwType::type2, mine.b, *target, 0, 256, kRemoteRw);
  EXPECT_EQ(run(0, mine.a, rdma(WrOpcode::rdma_write, 1, *src, 64, target->va(), rkey)).status,
            WcStatus::success);
  // Expect: the same key through another QP of the same PD is a remote access error.
  EXPECT_EQ(run(0, other.a, rdma(WrOpcode::rdma_write, 2, *src, 64, target->va(), rkey)).status,
            WcStatus::rem_access_err);
}

TEST_F(MemoryWindowTest, ZeroBasedWindowIsAddressedFromZero) {
  EnginePair& p = make();
  QpPair q = p.connect({});
  auto target = p.buffer(1, 512, kBindable);
  auto src = p.buffer(0, 64);
  std::iota(src->bytes.begin(), src->bytes.end(), uint8_t{100});
  const uint32_t rkey = bound_window(MwType::type2, q.b, *target, 200, 100, kRemoteRw | kAccessZeroBased);
  // Expect: remote address 10 is byte 210 of the region.
  ASSERT_EQ(run(0, q.a, rdma(WrOpcode::rdma_write, 1, *src, 64, 10, rkey)).status, WcStatus::success);
  EXPECT_EQ(std::memcmp(target->bytes.data() + 210, src->bytes.data(), 64), 0);
  // Expect: the region's own address is outside a zero-based window of 100 bytes.
  EXPECT_EQ(run(0, q.a, rdma(WrOpcode::rdma_write, 2, *src, 64, target->va() + 210, rkey)).status,
            WcStatus::rem_access_err);
}

TEST_F(MemoryWindowTest, BindToARegionWithoutMwBindIsABindError) {
  EnginePair& p = make();
  QpPair q = p.connect({});
  auto plain = p.buffer(1, 256, kAccessLocalWrite);
  uint32_t rkey = 0;
  ASSERT_EQ(p.b().alloc_mw(p.host(1).pd, MwType::type2, &rkey), 0);
  // Expect: IBV_WC_MW_BIND_ERR (C10-73), and the QP goes to the error state.
  EXPECT_EQ(run(1, q.b, bind(1, rkey, *plain, 0, 256, kRemoteRw)).status, WcStatus::mw_bind_err);
  QpAttr at;
  QpState st;
  ASSERT_EQ(p.b().query_qp(q.b, &at, &st), 0);
  EXPECT_EQ(st, QpState::err);
  // Expect: a region with windows bound cannot be deregistered; a freed window releases it.
  auto bindable = p.buffer(1, 256, kBindable);
  QpPair q2 = p.connect({});
  uint32_t k2 = 0;
  ASSERT_EQ(p.b().alloc_mw(p.host(1).pd, MwType::type1, &k2), 0);
  SendWr b = bind(2, k2, *bindable, 0, 16, kAccessRemoteRead);
  ASSERT_EQ(run(1, q2.b, b).status, WcStatus::success);
  EXPECT_EQ(p.b().dereg_mr(bindable->mr->lkey), -EINVAL);
  ASSERT_EQ(p.b().dealloc_mw(b.rkey), 0);
  EXPECT_EQ(p.b().dealloc_mw(b.rkey), -EINVAL);
  EXPECT_EQ(p.b().dereg_mr(bindable->mr->lkey), 0);
}

}  // namespace
}  // namespace droce::test
