// Two engines over the simulated link, every opcode and transport, data
// compared byte for byte; then the same under loss, and the error paths.

#include <gtest/gtest.h>

#include <random>

#include "tests/rocev2/engine_pair.h"
#include "tests/test_support.h"

namespace droce::test {
namespace {

class EnginePairTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { pool_ = net::create_mbuf_pool("pair_pool", 32768, 4096 + 256); }
  void SetUp() override {
    ASSERT_NE(pool_, nullptr);
    in_use_ = rte_mempool_in_use_count(pool_);
  }
  void TearDown() override {
    pair_.reset();
    // Expect: every frame built was freed by someone.
    EXPECT_EQ(rte_mempool_in_use_count(pool_), in_use_);
  }
  EnginePair& make(const net::LinkFaults& f = {}, uint64_t seed = 1, bool ipv6 = false) {
    pair_ = std::make_unique<EnginePair>(seed, f, pool_, ipv6);
    return *pair_;
  }
  static void fill(std::vector<uint8_t>& v, uint32_t seed) {
    std::mt19937 rng(seed);
    for (auto& b : v) b = uint8_t(rng());
  }
  static SendWr wr(WrOpcode op, uint64_t id, Sge sge) {
    SendWr w;
    w.wr_id = id;
    w.opcode = op;
    w.num_sge = sge.length || op == WrOpcode::send ? 1 : 0;
    w.sg_list[0] = sge;
    w.send_flags = kSendSignaled;
    return w;
  }
  static RecvWr rwr(uint64_t id, Sge sge) {
    RecvWr w;
    w.wr_id = id;
    w.num_sge = 1;
    w.sg_list[0] = sge;
    return w;
  }

  static rte_mempool* pool_;
  unsigned in_use_ = 0;
  std::unique_ptr<EnginePair> pair_;
};

rte_mempool* EnginePairTest::pool_ = nullptr;

TEST_F(EnginePairTest, RcSendOfEverySizeArrivesIntact) {
  EnginePair& p = make();
  QpPair q = p.connect({});
  for (uint32_t len : {0u, 1u, 63u, 1024u, 1025u, 3000u, 65536u}) {
    SCOPED_TRACE("len " + std::to_string(len));
    auto src = p.buffer(0, std::max(len, 1u));
    auto dst = p.buffer(1, len + 16);
    fill(src->bytes, len);
    ASSERT_EQ(p.b().post_recv(q.b, rwr(7, dst->sge(0, len + 16))), 0);
    ASSERT_EQ(p.a().post_send(q.a, wr(WrOpcode::send, 9, src->sge(0, len))), 0);
    std::vector<Completion> sc, rc;
    ASSERT_TRUE(p.wait_completions(p.host(0).scq, &sc, 1));
    ASSERT_TRUE(p.wait_completions(p.host(1).rcq, &rc, 1));
    // Expect: the send completes successfully, the receive with the byte count.
    EXPECT_EQ(sc[0].status, WcStatus::success);
    EXPECT_EQ(sc[0].wr_id, 9u);
    EXPECT_EQ(sc[0].opcode, WcOpcode::send);
    EXPECT_EQ(rc[0].status, WcStatus::success);
    EXPECT_EQ(rc[0].wr_id, 7u);
    EXPECT_EQ(rc[0].opcode, WcOpcode::recv);
    EXPECT_EQ(rc[0].byte_len, len);
    EXPECT_EQ(rc[0].qp_num, q.b);
    EXPECT_EQ(rc[0].src_qp, q.a);
    EXPECT_EQ(std::memcmp(dst->bytes.data(), src->bytes.data(), len), 0);
  }
}

TEST_F(EnginePairTest, RcSendWithImmediateAndInvalidate) {
  EnginePair& p = make();
  QpPair q = p.connect({});
  auto src = p.buffer(0, 100);
  auto dst = p.buffer(1, 100);
  const uint32_t all = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
  auto victim = p.buffer(1, 64, all, true);  // a fast-registration region: its R_Key gets invalidated
  ASSERT_EQ(p.b().post_recv(q.b, rwr(1, dst->sge(0, 100))), 0);
  ASSERT_EQ(p.b().post_recv(q.b, rwr(2, dst->sge(0, 100))), 0);
  SendWr w = wr(WrOpcode::send_with_imm, 1, src->sge(0, 100));
  w.imm_data = 0xdeadbeef;
  ASSERT_EQ(p.a().post_send(q.a, w), 0);
  w = wr(WrOpcode::send_with_inv, 2, src->sge(0, 10));
  w.invalidate_rkey = victim->mr->rkey;
  ASSERT_EQ(p.a().post_send(q.a, w), 0);
  std::vector<Completion> rc;
  ASSERT_TRUE(p.wait_completions(p.host(1).rcq, &rc, 2));
  EXPECT_EQ(rc[0].wc_flags, uint32_t(kWcWithImm));
  EXPECT_EQ(rc[0].imm_data, 0xdeadbeefu);
  EXPECT_EQ(rc[1].wc_flags, uint32_t(kWcWithInv));
  EXPECT_EQ(rc[1].imm_data, victim->mr->rkey);
  EXPECT_FALSE(victim->mr->remote_key_valid);
}

TEST_F(EnginePairTest, RcWriteAndWriteWithImmediate) {
  EnginePair& p = make();
  QpPair q = p.connect({});
  auto src = p.buffer(0, 10000);
  auto dst = p.buffer(1, 10000);
  auto rbuf = p.buffer(1, 16);
  fill(src->bytes, 3);
  SendWr w = wr(WrOpcode::rdma_write, 1, src->sge(0, 10000));
  w.remote_addr = dst->va();
  w.rkey = dst->mr->rkey;
  ASSERT_EQ(p.a().post_send(q.a, w), 0);
  ASSERT_EQ(p.b().post_recv(q.b, rwr(5, rbuf->sge(0, 16))), 0);
  w = wr(WrOpcode::rdma_write_with_imm, 2, src->sge(0, 2000));
  w.remote_addr = dst->va() + 100;
  w.rkey = dst->mr->rkey;
  w.imm_data = 0x1234;
  ASSERT_EQ(p.a().post_send(q.a, w), 0);
  std::vector<Completion> sc, rc;
  ASSERT_TRUE(p.wait_completions(p.host(0).scq, &sc, 2));
  ASSERT_TRUE(p.wait_completions(p.host(1).rcq, &rc, 1));
  EXPECT_EQ(sc[0].opcode, WcOpcode::rdma_write);
  EXPECT_EQ(sc[1].status, WcStatus::success);
  EXPECT_EQ(rc[0].opcode, WcOpcode::recv_rdma_with_imm);
  EXPECT_EQ(rc[0].byte_len, 2000u);
  EXPECT_EQ(rc[0].imm_data, 0x1234u);
  EXPECT_EQ(std::memcmp(dst->bytes.data() + 100, src->bytes.data(), 2000), 0);
  EXPECT_EQ(std::memcmp(dst->bytes.data(), src->bytes.data(), 100), 0);
  EXPECT_EQ(std::memcmp(dst->bytes.data() + 2100, src->bytes.data() + 2100, 7900), 0);
}

TEST_F(EnginePairTest, RcReadSingleAndMultiPacket) {
  EnginePair& p = make();
  QpPair q = p.connect({});
  auto remote = p.buffer(1, 70000);
  auto local = p.buffer(0, 70000);
  fill(remote->bytes, 4);
  for (uint32_t len : {8u, 1024u, 70000u}) {
    SendWr w = wr(WrOpcode::rdma_read, len, local->sge(0, len));
    w.remote_addr = remote->va();
    w.rkey = remote->mr->rkey;
    ASSERT_EQ(p.a().post_send(q.a, w), 0);
    std::vector<Completion> sc;
    ASSERT_TRUE(p.wait_completions(p.host(0).scq, &sc, 1, 100'000'000)) << p.dump();
    EXPECT_EQ(sc[0].status, WcStatus::success);
    EXPECT_EQ(sc[0].opcode, WcOpcode::rdma_read);
    EXPECT_EQ(sc[0].byte_len, len);
    EXPECT_EQ(std::memcmp(local->bytes.data(), remote->bytes.data(), len), 0);
  }
}

TEST_F(EnginePairTest, RcAtomicsReturnTheOriginalValue) {
  EnginePair& p = make();
  QpPair q = p.connect({});
  auto remote = p.buffer(1, 64);
  auto local = p.buffer(0, 64);
  uint64_t v = 41;
  std::memcpy(remote->bytes.data() + 8, &v, 8);
  SendWr w = wr(WrOpcode::atomic_fetch_and_add, 1, local->sge(0, 8));
  w.remote_addr = remote->va() + 8;
  w.rkey = remote->mr->rkey;
  w.compare_add = 1;
  ASSERT_EQ(p.a().post_send(q.a, w), 0);
  w = wr(WrOpcode::atomic_cmp_and_swp, 2, local->sge(8, 8));
  w.remote_addr = remote->va() + 8;
  w.rkey = remote->mr->rkey;
  w.compare_add = 42;  // matches: swaps
  w.swap = 1000;
  ASSERT_EQ(p.a().post_send(q.a, w), 0);
  w.wr_id = 3;
  w.sg_list[0] = local->sge(16, 8);
  w.compare_add = 42;  // no longer matches
  w.swap = 5;
  ASSERT_EQ(p.a().post_send(q.a, w), 0);
  std::vector<Completion> sc;
  ASSERT_TRUE(p.wait_completions(p.host(0).scq, &sc, 3));
  uint64_t r[3];
  std::memcpy(r, local->bytes.data(), 24);
  EXPECT_EQ(r[0], 41u);
  EXPECT_EQ(r[1], 42u);
  EXPECT_EQ(r[2], 1000u);
  std::memcpy(&v, remote->bytes.data() + 8, 8);
  EXPECT_EQ(v, 1000u);
  EXPECT_EQ(sc[0].opcode, WcOpcode::fetch_add);
  EXPECT_EQ(sc[1].opcode, WcOpcode::comp_swap);
  EXPECT_EQ(sc[2].byte_len, 8u);
}

TEST_F(EnginePairTest, UcSendAndWrite) {
  EnginePair& p = make();
  EnginePair::RcOptions o;
  o.type = QpType::uc;
  QpPair q = p.connect(o);
  auto src = p.buffer(0, 5000);
  auto dst = p.buffer(1, 5000);
  auto wdst = p.buffer(1, 5000);
  fill(src->bytes, 5);
  ASSERT_EQ(p.b().post_recv(q.b, rwr(1, dst->sge(0, 5000))), 0);
  ASSERT_EQ(p.a().post_send(q.a, wr(WrOpcode::send, 1, src->sge(0, 5000))), 0);
  SendWr w = wr(WrOpcode::rdma_write, 2, src->sge(0, 5000));
  w.remote_addr = wdst->va();
  w.rkey = wdst->mr->rkey;
  ASSERT_EQ(p.a().post_send(q.a, w), 0);
  std::vector<Completion> sc, rc;
  ASSERT_TRUE(p.wait_completions(p.host(0).scq, &sc, 2));
  ASSERT_TRUE(p.wait_completions(p.host(1).rcq, &rc, 1));
  EXPECT_EQ(rc[0].byte_len, 5000u);
  EXPECT_EQ(dst->bytes, src->bytes);
  ASSERT_TRUE(p.run_until([&] { return wdst->bytes == src->bytes; }, 1'000'000));
  // With immediate: SEND and WRITE each consume a receive and carry the value.
  ASSERT_EQ(p.b().post_recv(q.b, rwr(2, dst->sge(0, 5000))), 0);
  ASSERT_EQ(p.b().post_recv(q.b, rwr(3, dst->sge(0, 5000))), 0);
  w = wr(WrOpcode::send_with_imm, 3, src->sge(0, 100));
  w.imm_data = 0xabc;
  ASSERT_EQ(p.a().post_send(q.a, w), 0);
  w = wr(WrOpcode::rdma_write_with_imm, 4, src->sge(0, 3000));
  w.remote_addr = wdst->va();
  w.rkey = wdst->mr->rkey;
  w.imm_data = 0xdef;
  ASSERT_EQ(p.a().post_send(q.a, w), 0);
  ASSERT_TRUE(p.wait_completions(p.host(1).rcq, &rc, 3));
  EXPECT_EQ(rc[1].opcode, WcOpcode::recv);
  EXPECT_EQ(rc[1].imm_data, 0xabcu);
  EXPECT_EQ(rc[2].opcode, WcOpcode::recv_rdma_with_imm);
  EXPECT_EQ(rc[2].imm_data, 0xdefu);
  EXPECT_EQ(rc[2].byte_len, 3000u);
  // Expect: UC is never acknowledged: no ACK frame crossed the link.
  EXPECT_EQ(p.link().stats(1).sent, 0u);
}

TEST_F(EnginePairTest, UcSendErrorIsSqeReceivesGoOnAndRtsResumes) {
  EnginePair& p = make();
  EnginePair::RcOptions o;
  o.type = QpType::uc;
  QpPair q = p.connect(o);
  auto src = p.buffer(0, 64);
  auto dst = p.buffer(1, 64);
  auto back = p.buffer(0, 64);
  // A SEND through a key that does not exist: a local protection error.
  Sge bad = src->sge(0, 64);
  bad.lkey ^= 0x40;
  ASSERT_EQ(p.a().post_send(q.a, wr(WrOpcode::send, 1, bad)), 0);
  ASSERT_EQ(p.a().post_send(q.a, wr(WrOpcode::send, 2, src->sge(0, 64))), 0);
  std::vector<Completion> sc;
  ASSERT_TRUE(p.wait_completions(p.host(0).scq, &sc, 2));
  // Expect: LOC_PROT_ERR, the next WR flushed, the QP in SQE (not ERR).
  EXPECT_EQ(sc[0].status, WcStatus::loc_prot_err);
  EXPECT_EQ(sc[1].status, WcStatus::wr_flush_err);
  QpAttr at;
  QpState st;
  ASSERT_EQ(p.a().query_qp(q.a, &at, &st), 0);
  EXPECT_EQ(st, QpState::sqe);
  EXPECT_EQ(p.a().qp(q.a)->counters.send_errors, 1u);
  // Expect: A still receives in SQE.
  ASSERT_EQ(p.a().post_recv(q.a, rwr(5, back->sge(0, 64))), 0);
  ASSERT_EQ(p.b().post_send(q.b, wr(WrOpcode::send, 6, dst->sge(0, 64))), 0);
  std::vector<Completion> rc;
  ASSERT_TRUE(p.wait_completions(p.host(0).rcq, &rc, 1));
  EXPECT_EQ(rc[0].status, WcStatus::success);
  // Expect: SQE -> RTS resumes sending.
  at = QpAttr{};
  at.qp_state = QpState::rts;
  ASSERT_EQ(p.a().modify_qp(q.a, at, kAttrState), 0);
  ASSERT_EQ(p.b().post_recv(q.b, rwr(7, dst->sge(0, 64))), 0);
  ASSERT_EQ(p.a().post_send(q.a, wr(WrOpcode::send, 3, src->sge(0, 64))), 0);
  sc.clear();
  ASSERT_TRUE(p.wait_completions(p.host(0).scq, &sc, 1));
  EXPECT_EQ(sc[0].status, WcStatus::success);
  std::vector<Completion> brc;
  ASSERT_TRUE(p.wait_completions(p.host(1).rcq, &brc, 1));
  EXPECT_EQ(brc[0].wr_id, 7u);
}

TEST_F(EnginePairTest, UdSendCarriesGrhAndSourceQp) {
  for (bool ipv6 : {false, true}) {
    SCOPED_TRACE(ipv6 ? "IPv6" : "IPv4");
    EnginePair& p = make({}, 1, ipv6);
    EnginePair::RcOptions o;
    o.type = QpType::ud;
    QpPair q = p.connect(o);
    auto src = p.buffer(0, 1024);
    auto dst = p.buffer(1, 1024 + 40);
    fill(src->bytes, 6);
    uint32_t ah = 0;
    ASSERT_EQ(p.a().create_ah(p.host(0).pd, p.av_to(1), &ah), 0);
    ASSERT_EQ(p.b().post_recv(q.b, rwr(1, dst->sge(0, 1064))), 0);
    SendWr w = wr(WrOpcode::send_with_imm, 1, src->sge(0, 1024));
    w.ah = ah;
    w.remote_qpn = q.b;
    w.remote_qkey = 0x11111111;
    w.imm_data = 77;
    ASSERT_EQ(p.a().post_send(q.a, w), 0);
    // Expect: larger than the path MTU is refused at post (UD is one packet).
    SendWr big = wr(WrOpcode::send, 2, src->sge(0, 1024));
    big.sg_list[0].length = 1025;
    big.ah = ah;
    EXPECT_EQ(p.a().post_send(q.a, big), -EINVAL);
    std::vector<Completion> rc;
    ASSERT_TRUE(p.wait_completions(p.host(1).rcq, &rc, 1));
    EXPECT_EQ(rc[0].status, WcStatus::success);
    EXPECT_EQ(rc[0].byte_len, 1024u + 40);
    EXPECT_EQ(rc[0].src_qp, q.a);
    EXPECT_EQ(rc[0].wc_flags, uint32_t(kWcGrh | kWcWithImm));
    EXPECT_EQ(rc[0].imm_data, 77u);
    EXPECT_EQ(std::memcmp(dst->bytes.data() + 40, src->bytes.data(), 1024), 0);
    // The GRH area holds the IP header: IPv6 whole, IPv4 in its last 20 bytes.
    if (ipv6) {
      EXPECT_EQ(dst->bytes[0] >> 4, 6);
      EXPECT_EQ(std::memcmp(dst->bytes.data() + 8, p.host(0).ip.data(), 16), 0);
    } else {
      EXPECT_EQ(dst->bytes[20], 0x45);
      EXPECT_EQ(std::memcmp(dst->bytes.data() + 32, p.host(0).ip.data() + 12, 4), 0);
    }
    pair_.reset();
  }
}

// droced's clients each have their own PDs: an AH of another PD must be as
// unusable as an AH that does not exist.
TEST_F(EnginePairTest, UdSendWithAnAhOfAnotherPdIsRefused) {
  EnginePair& p = make({}, 1);
  EnginePair::RcOptions o;
  o.type = QpType::ud;
  QpPair q = p.connect(o);
  auto src = p.buffer(0, 64);
  uint32_t other_pd = 0, ah = 0;
  ASSERT_EQ(p.a().alloc_pd(&other_pd), 0);
  ASSERT_EQ(p.a().create_ah(other_pd, p.av_to(1), &ah), 0);
  SendWr w = wr(WrOpcode::send, 1, src->sge(0, 64));
  w.ah = ah;
  w.remote_qpn = q.b;
  w.remote_qkey = 0x11111111;
  EXPECT_EQ(p.a().post_send(q.a, w), -EINVAL);
  uint32_t own = 0;
  ASSERT_EQ(p.a().create_ah(p.host(0).pd, p.av_to(1), &own), 0);
  w.ah = own;
  EXPECT_EQ(p.a().post_send(q.a, w), 0);
}

// A UD WQE keeps the address its AH had at post: destroying the AH and
// reusing its slot (another client's AH, in droced) before the WQE is sent
// must not send it elsewhere.
TEST_F(EnginePairTest, AUdWqeKeepsItsAddressWhenItsAhIsDestroyedAndTheSlotReused) {
  EnginePair& p = make({}, 1);
  EnginePair::RcOptions o;
  o.type = QpType::ud;
  QpPair q = p.connect(o);
  auto src = p.buffer(0, 64);
  auto dst = p.buffer(1, 128);
  fill(src->bytes, 9);
  uint32_t ah = 0;
  ASSERT_EQ(p.a().create_ah(p.host(0).pd, p.av_to(1), &ah), 0);
  ASSERT_EQ(p.b().post_recv(q.b, rwr(1, dst->sge(0, 128))), 0);
  SendWr w = wr(WrOpcode::send, 1, src->sge(0, 64));
  w.ah = ah;
  w.remote_qpn = q.b;
  w.remote_qkey = 0x11111111;
  ASSERT_EQ(p.a().post_send(q.a, w), 0);
  // Before the engine runs: the AH goes, and its slot now leads nowhere.
  ASSERT_EQ(p.a().destroy_ah(ah), 0);
  AddressVector nowhere = p.av_to(1);
  nowhere.dgid[15] ^= 0x5a;
  nowhere.dmac = {0x02, 0, 0, 0, 0, 0x99};
  uint32_t reused = 0;
  ASSERT_EQ(p.a().create_ah(p.host(0).pd, nowhere, &reused), 0);
  EXPECT_EQ(reused, ah);
  std::vector<Completion> rc;
  ASSERT_TRUE(p.wait_completions(p.host(1).rcq, &rc, 1));
  EXPECT_EQ(rc[0].status, WcStatus::success);
  EXPECT_EQ(std::memcmp(dst->bytes.data() + 40, src->bytes.data(), 64), 0);
}

// Clients come and go: a destroyed CQ's or SRQ's slot is used again, so the
// tables stay as large as the most objects alive at once.
TEST_F(EnginePairTest, DestroyedCqAndSrqSlotsAreReused) {
  EnginePair& p = make({}, 1);
  Engine& e = p.a();
  Cq* c1 = nullptr;
  Cq* c2 = nullptr;
  ASSERT_EQ(e.create_cq(16, &c1), 0);
  const uint32_t id = c1->id();
  ASSERT_EQ(e.destroy_cq(c1), 0);
  ASSERT_EQ(e.create_cq(16, &c2), 0);
  EXPECT_EQ(c2->id(), id);
  Srq* s1 = nullptr;
  Srq* s2 = nullptr;
  ASSERT_EQ(e.create_srq(p.host(0).pd, 8, 1, &s1), 0);
  const uint32_t sid = s1->id();
  ASSERT_EQ(e.destroy_srq(s1), 0);
  ASSERT_EQ(e.create_srq(p.host(0).pd, 8, 1, &s2), 0);
  EXPECT_EQ(s2->id(), sid);
  EXPECT_EQ(e.destroy_srq(s2), 0);
  EXPECT_EQ(e.destroy_cq(c2), 0);
}

TEST_F(EnginePairTest, RcUnderLossReorderDuplicationAndCorruption) {
  net::LinkFaults f;
  f.loss = 0.05;
  f.reorder = 0.05;
  f.duplicate = 0.02;
  f.corrupt = 0.01;
  const uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (DROCE_TEST_SEED reproduces)");
  EnginePair& p = make(f, seed);
  EnginePair::RcOptions o;
  o.timeout = 10;  // 4 ms
  QpPair q = p.connect(o);
  auto src = p.buffer(0, 1 << 20);
  auto dst = p.buffer(1, 1 << 20);
  auto wdst = p.buffer(1, 1 << 20);
  auto rdst = p.buffer(0, 1 << 20);
  fill(src->bytes, 7);
  fill(wdst->bytes, 8);
  for (int i = 0; i < 20; ++i) ASSERT_EQ(p.b().post_recv(q.b, rwr(i, dst->sge(0, 1 << 20))), 0);
  uint32_t posted = 0;
  for (int i = 0; i < 20; ++i) {
    const uint32_t len = 1u << (i % 18);
    ASSERT_EQ(p.a().post_send(q.a, wr(WrOpcode::send, posted++, src->sge(0, len))), 0);
    SendWr w = wr(WrOpcode::rdma_write, posted++, src->sge(0, len));
    w.remote_addr = wdst->va();
    w.rkey = wdst->mr->rkey;
    ASSERT_EQ(p.a().post_send(q.a, w), 0);
    w = wr(WrOpcode::rdma_read, posted++, rdst->sge(0, len));
    w.remote_addr = wdst->va();
    w.rkey = wdst->mr->rkey;
    ASSERT_EQ(p.a().post_send(q.a, w), 0);
  }
  std::vector<Completion> sc, rc;
  ASSERT_TRUE(p.wait_completions(p.host(0).scq, &sc, posted)) << "got " << sc.size() << " of " << posted << "\n"
                                                                 << p.dump();
  ASSERT_TRUE(p.wait_completions(p.host(1).rcq, &rc, 20)) << "got " << rc.size() << " receives\n" << p.dump();
  for (uint32_t i = 0; i < posted; ++i) {
    EXPECT_EQ(sc[i].wr_id, i) << "completions out of order";
    ASSERT_EQ(sc[i].status, WcStatus::success) << "wr " << i << ": " << to_string(sc[i].status) << "\n" << p.dump();
  }
  EXPECT_EQ(std::memcmp(wdst->bytes.data(), src->bytes.data(), 1 << 17), 0);
  EXPECT_EQ(std::memcmp(rdst->bytes.data(), src->bytes.data(), 1 << 17), 0);
  const auto& qa = p.a().qp(q.a)->counters;
  EXPECT_GT(qa.retransmits, 0u);
  EXPECT_GT(p.b().counters().parse[ParseStatus::bad_icrc] + p.a().counters().parse[ParseStatus::bad_icrc], 0u);
}

TEST_F(EnginePairTest, TheEnginesQpTotalsKeepTheCountsOfDestroyedQps) {
  EnginePair& p = make();
  auto src = p.buffer(0, 4096);
  auto dst = p.buffer(1, 4096);
  uint64_t tx = 0, rx = 0;
  for (int round = 0; round < 2; ++round) {
    QpPair q = p.connect(EnginePair::RcOptions{});
    SendWr w = wr(WrOpcode::rdma_write, 1, src->sge(0, 4096));
    w.remote_addr = dst->va();
    w.rkey = dst->mr->rkey;
    ASSERT_EQ(p.a().post_send(q.a, w), 0);
    std::vector<Completion> sc;
    ASSERT_TRUE(p.wait_completions(p.host(0).scq, &sc, 1)) << p.dump();
    const QpCounters c = p.a().qp(q.a)->counters;
    ASSERT_GT(c.tx_packets, 0u);
    tx += c.tx_packets;
    rx += p.b().qp(q.b)->counters.rx_packets;
    EXPECT_EQ(p.a().qp_totals().tx_packets, tx);
    EXPECT_EQ(p.a().qp_totals().rdma_sends, uint64_t(round + 1));
    // Expect: destroying the QP moves its counts into the totals, nothing lost or doubled.
    ASSERT_EQ(p.a().destroy_qp(q.a), 0);
    ASSERT_EQ(p.b().destroy_qp(q.b), 0);
    EXPECT_EQ(p.a().qp_totals().tx_packets, tx);
    EXPECT_EQ(p.a().qp_totals().rdma_sends, uint64_t(round + 1));
    EXPECT_EQ(p.b().qp_totals().rx_packets, rx);
  }
}

TEST_F(EnginePairTest, SrqFeedsReceivesAndRaisesItsLimitEventOnce) {
  EnginePair& p = make();
  Srq* srq = nullptr;
  ASSERT_EQ(p.b().create_srq(p.host(1).pd, 16, 1, &srq), 0);
  EnginePair::RcOptions o;
  o.srq_b = srq;
  QpPair q = p.connect(o);
  auto src = p.buffer(0, 64);
  auto dst = p.buffer(1, 64 * 16);
  for (uint64_t i = 0; i < 8; ++i) ASSERT_EQ(p.b().post_srq_recv(srq, rwr(i, dst->sge(uint32_t(i) * 64, 64))), 0);
  // Expect: posting to the QP's own RQ is refused while it has an SRQ.
  EXPECT_EQ(p.b().post_recv(q.b, rwr(99, dst->sge(0, 64))), -EINVAL);
  ASSERT_EQ(srq->set_limit(5), 0);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(p.a().post_send(q.a, wr(WrOpcode::send, i, src->sge(0, 64))), 0);
  std::vector<Completion> rc;
  ASSERT_TRUE(p.wait_completions(p.host(1).rcq, &rc, 4));
  for (uint64_t i = 0; i < 4; ++i) EXPECT_EQ(rc[i].wr_id, i);
  // Expect: one SRQ limit event when the queue fell below 5, and the limit disarmed.
  int limit_events = 0;
  for (const auto& e : p.b().events()) limit_events += e.type == AsyncEventType::srq_limit_reached;
  EXPECT_EQ(limit_events, 1);
  EXPECT_EQ(srq->limit(), 0u);
}

TEST_F(EnginePairTest, CqOverflowIsAnErrorEventAndEndsTheQp) {
  EnginePair& p = make();
  Cq* tiny = nullptr;
  ASSERT_EQ(p.b().create_cq(2, &tiny), 0);
  EnginePair::RcOptions o;
  o.rcq_b = tiny;
  QpPair q = p.connect(o);
  QpAttr at;
  QpState st;
  auto src = p.buffer(0, 64);
  auto dst = p.buffer(1, 64);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(p.b().post_recv(q.b, rwr(i, dst->sge(0, 64))), 0);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(p.a().post_send(q.a, wr(WrOpcode::send, i, src->sge(0, 64))), 0);
  p.run_until([] { return false; }, 1'000'000'000);
  // Expect: the third completion overflows the 2-deep CQ: CQ error event, QP fatal, QP in ERR.
  EXPECT_TRUE(tiny->in_error());
  bool cq_err = false, qp_fatal = false;
  for (const auto& e : p.b().events()) {
    cq_err |= e.type == AsyncEventType::cq_err && e.id == tiny->id();
    qp_fatal |= e.type == AsyncEventType::qp_fatal && e.id == q.b;
  }
  EXPECT_TRUE(cq_err);
  EXPECT_TRUE(qp_fatal);
  ASSERT_EQ(p.b().query_qp(q.b, &at, &st), 0);
  EXPECT_EQ(st, QpState::err);
}

TEST_F(EnginePairTest, LocalInvalidateStopsARemoteKey) {
  EnginePair& p = make();
  QpPair q = p.connect({});
  auto src = p.buffer(0, 64);
  const uint32_t all = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
  auto exposed = p.buffer(0, 64, all, true);  // fast-registration: invalidatable
  // LOCAL_INV on A invalidates A's own region's R_Key, in order with the other WRs.
  SendWr w = wr(WrOpcode::local_inv, 1, src->sge(0, 0));
  w.num_sge = 0;
  w.invalidate_rkey = exposed->mr->rkey;
  ASSERT_EQ(p.a().post_send(q.a, w), 0);
  std::vector<Completion> sc;
  ASSERT_TRUE(p.wait_completions(p.host(0).scq, &sc, 1));
  EXPECT_EQ(sc[0].status, WcStatus::success);
  EXPECT_EQ(sc[0].opcode, WcOpcode::local_inv);
  EXPECT_FALSE(exposed->mr->remote_key_valid);
  // Expect: B writing through the invalidated key now gets a remote access error.
  auto bsrc = p.buffer(1, 64);
  SendWr bw = wr(WrOpcode::rdma_write, 2, bsrc->sge(0, 8));
  bw.remote_addr = exposed->va();
  bw.rkey = exposed->mr->rkey;
  ASSERT_EQ(p.b().post_send(q.b, bw), 0);
  std::vector<Completion> bc;
  ASSERT_TRUE(p.wait_completions(p.host(1).scq, &bc, 1));
  EXPECT_EQ(bc[0].status, WcStatus::rem_access_err);
}

TEST_F(EnginePairTest, LocalInvalidateOfAnOrdinaryRegionFailsAndKeepsItsKey) {
  EnginePair& p = make();
  QpPair q = p.connect({});
  auto src = p.buffer(0, 64);
  auto plain = p.buffer(0, 64);  // an ordinary reg_mr region: not invalidatable
  SendWr w = wr(WrOpcode::local_inv, 1, src->sge(0, 0));
  w.num_sge = 0;
  w.invalidate_rkey = plain->mr->rkey;
  ASSERT_EQ(p.a().post_send(q.a, w), 0);
  std::vector<Completion> sc;
  ASSERT_TRUE(p.wait_completions(p.host(0).scq, &sc, 1));
  EXPECT_EQ(sc[0].status, WcStatus::loc_qp_op_err);
  EXPECT_TRUE(plain->mr->remote_key_valid);
}

TEST_F(EnginePairTest, RemoteInvalidateOfAnOrdinaryRegionIsAnInvalidRequest) {
  EnginePair& p = make();
  QpPair q = p.connect({});
  auto src = p.buffer(0, 64);
  auto dst = p.buffer(1, 64);
  auto plain = p.buffer(1, 64);  // ordinary reg_mr: a peer may not revoke its key
  ASSERT_EQ(p.b().post_recv(q.b, rwr(1, dst->sge(0, 64))), 0);
  SendWr w = wr(WrOpcode::send_with_inv, 1, src->sge(0, 8));
  w.invalidate_rkey = plain->mr->rkey;
  ASSERT_EQ(p.a().post_send(q.a, w), 0);
  std::vector<Completion> sc;
  ASSERT_TRUE(p.wait_completions(p.host(0).scq, &sc, 1));
  EXPECT_EQ(sc[0].status, WcStatus::rem_inv_req_err);
  EXPECT_TRUE(plain->mr->remote_key_valid);
}

TEST_F(EnginePairTest, RemoteAccessErrorFailsTheWrAndFlushesTheRestInOrder) {
  EnginePair& p = make();
  QpPair q = p.connect({});
  auto src = p.buffer(0, 64);
  auto dst = p.buffer(1, 64);
  SendWr w = wr(WrOpcode::rdma_write, 1, src->sge(0, 64));
  w.remote_addr = dst->va() + 1;  // out of bounds by one byte
  w.rkey = dst->mr->rkey;
  ASSERT_EQ(p.a().post_send(q.a, w), 0);
  for (uint64_t i = 2; i <= 4; ++i) ASSERT_EQ(p.a().post_send(q.a, wr(WrOpcode::send, i, src->sge(0, 8))), 0);
  ASSERT_EQ(p.b().post_recv(q.b, rwr(50, dst->sge(0, 64))), 0);
  std::vector<Completion> sc, rc;
  ASSERT_TRUE(p.wait_completions(p.host(0).scq, &sc, 4));
  EXPECT_EQ(sc[0].status, WcStatus::rem_access_err);
  for (int i = 1; i < 4; ++i) {
    EXPECT_EQ(sc[i].wr_id, uint64_t(i + 1));
    EXPECT_EQ(sc[i].status, WcStatus::wr_flush_err);
  }
  // Expect: the responder went to error too, and flushed its receive.
  ASSERT_TRUE(p.wait_completions(p.host(1).rcq, &rc, 1));
  EXPECT_EQ(rc[0].status, WcStatus::wr_flush_err);
  QpAttr at;
  QpState st;
  ASSERT_EQ(p.b().query_qp(q.b, &at, &st), 0);
  EXPECT_EQ(st, QpState::err);
  // Expect: a WR posted in ERR completes at once with a flush error.
  ASSERT_EQ(p.a().post_send(q.a, wr(WrOpcode::send, 9, src->sge(0, 8))), 0);
  Completion c;
  ASSERT_EQ(p.host(0).scq->poll(&c, 1), 1u);
  EXPECT_EQ(c.wr_id, 9u);
  EXPECT_EQ(c.status, WcStatus::wr_flush_err);
}

TEST_F(EnginePairTest, RetryExhaustionOnADeadLink) {
  net::LinkFaults dead;
  dead.loss = 1.0;
  EnginePair& p = make(dead);
  EnginePair::RcOptions o;
  o.timeout = 12;  // 16.8 ms
  o.retry_cnt = 3;
  QpPair q = p.connect(o);
  auto src = p.buffer(0, 64);
  ASSERT_EQ(p.a().post_send(q.a, wr(WrOpcode::send, 1, src->sge(0, 64))), 0);
  ASSERT_EQ(p.a().post_send(q.a, wr(WrOpcode::send, 2, src->sge(0, 64))), 0);
  const uint64_t t0 = p.now();
  std::vector<Completion> sc;
  ASSERT_TRUE(p.wait_completions(p.host(0).scq, &sc, 2));
  // Expect: 1 try + 3 retries, each after the local ACK timeout, then RETRY_EXC_ERR; the next WR flushed.
  EXPECT_EQ(sc[0].status, WcStatus::retry_exc_err);
  EXPECT_EQ(sc[1].status, WcStatus::wr_flush_err);
  const uint64_t timeout = ack_timeout_ns(12);
  EXPECT_GE(p.now() - t0, 4 * timeout);
  EXPECT_LT(p.now() - t0, 5 * timeout);
  EXPECT_EQ(p.a().qp(q.a)->counters.timeouts, 4u);
  EXPECT_EQ(p.a().qp(q.a)->counters.retry_exceeded, 1u);
}

TEST_F(EnginePairTest, RnrWaitsForAReceiveThenDelivers) {
  EnginePair& p = make();
  EnginePair::RcOptions o;
  o.min_rnr_timer = 14;  // 1.28 ms
  QpPair q = p.connect(o);
  auto src = p.buffer(0, 64);
  auto dst = p.buffer(1, 64);
  ASSERT_EQ(p.a().post_send(q.a, wr(WrOpcode::send, 1, src->sge(0, 64))), 0);
  // Expect: RNR NAKs while B has no receive, nothing completes.
  p.run_until([] { return false; }, 5'000'000);
  EXPECT_GE(p.a().qp(q.a)->counters.rnr_naks_received, 2u);
  EXPECT_EQ(p.host(0).scq->size(), 0u);
  ASSERT_EQ(p.b().post_recv(q.b, rwr(7, dst->sge(0, 64))), 0);
  std::vector<Completion> sc, rc;
  ASSERT_TRUE(p.wait_completions(p.host(0).scq, &sc, 1));
  ASSERT_TRUE(p.wait_completions(p.host(1).rcq, &rc, 1));
  EXPECT_EQ(sc[0].status, WcStatus::success);
  EXPECT_EQ(rc[0].byte_len, 64u);
}

// A receive the client posted just before the message came, but which its host has not yet
// handed to the engine (droced reads the client's ring at its next loop): the engine asks the
// host for it (set_recv_refill) before it answers RNR (RC) or drops (UD), as a NIC reads the
// receive queue when a message arrives. Without the hook, RC gets an RNR NAK and UD is lost.
TEST_F(EnginePairTest, AReceiveTheHostHasNotHandedOverYetIsFetchedWhenTheMessageComes) {
  for (const QpType type : {QpType::rc, QpType::ud}) {
    SCOPED_TRACE(type == QpType::rc ? "RC" : "UD");
    EnginePair& p = make();
    EnginePair::RcOptions o;
    o.type = type;
    QpPair q = p.connect(o);
    auto src = p.buffer(0, 256);
    auto dst = p.buffer(1, 256 + 40);
    fill(src->bytes, 9);
    // The host's view: one receive waiting in "the client's ring", not in the engine.
    struct Pending {
      Engine* engine;
      uint32_t qpn;
      RecvWr wr;
      int asked = 0;
    } pending{&p.b(), q.b, rwr(5, dst->sge(0, 256 + 40)), 0};
    p.b().set_recv_refill(
        [](void* ctx, uint32_t qpn) {
          auto* h = static_cast<Pending*>(ctx);
          ++h->asked;
          if (qpn == h->qpn && h->asked == 1) {
            EXPECT_EQ(h->engine->post_recv(qpn, h->wr), 0);
          }
        },
        &pending);
    SendWr w = wr(WrOpcode::send, 1, src->sge(0, 256));
    uint32_t ah = 0;
    if (type == QpType::ud) {
      ASSERT_EQ(p.a().create_ah(p.host(0).pd, p.av_to(1), &ah), 0);
      w.ah = ah;
      w.remote_qpn = q.b;
      w.remote_qkey = 0x11111111;
    }
    ASSERT_EQ(p.a().post_send(q.a, w), 0);
    std::vector<Completion> rc;
    ASSERT_TRUE(p.wait_completions(p.host(1).rcq, &rc, 1));
    EXPECT_EQ(rc[0].status, WcStatus::success);
    EXPECT_EQ(rc[0].wr_id, 5u);
    EXPECT_EQ(pending.asked, 1) << "asked once, when the message found no receive";
    const size_t at = type == QpType::ud ? 40 : 0;
    EXPECT_EQ(std::memcmp(dst->bytes.data() + at, src->bytes.data(), 256), 0);
    if (type == QpType::rc) {
      EXPECT_EQ(p.b().qp(q.b)->counters.rnr_naks_sent, 0u);
    }
    // A host with nothing more to give: RC falls back to RNR NAKs, the hook asked each time.
    if (type == QpType::rc) {
      ASSERT_EQ(p.a().post_send(q.a, wr(WrOpcode::send, 2, src->sge(0, 64))), 0);
      p.run_until([] { return false; }, 2'000'000);
      EXPECT_GE(p.b().qp(q.b)->counters.rnr_naks_sent, 1u);
      EXPECT_GE(pending.asked, 2);
    }
    p.b().set_recv_refill(nullptr, nullptr);
    pair_.reset();
  }
}

TEST_F(EnginePairTest, InlineDataIsCopiedAtPostAndNeedsNoKey) {
  EnginePair& p = make();
  QpPair q = p.connect({});
  auto dst = p.buffer(1, 128);
  ASSERT_EQ(p.b().post_recv(q.b, rwr(1, dst->sge(0, 128))), 0);
  std::vector<uint8_t> scratch(100, 0x42);
  SendWr w = wr(WrOpcode::send, 1, Sge{reinterpret_cast<uint64_t>(scratch.data()), 100, 0});  // no MR, no key
  w.send_flags |= kSendInline;
  ASSERT_EQ(p.a().post_send(q.a, w), 0);
  // Expect: the buffer may change as soon as post returns; what was posted is sent.
  std::fill(scratch.begin(), scratch.end(), 0x99);
  std::vector<Completion> rc;
  ASSERT_TRUE(p.wait_completions(p.host(1).rcq, &rc, 1));
  EXPECT_EQ(rc[0].byte_len, 100u);
  EXPECT_EQ(std::count(dst->bytes.begin(), dst->bytes.begin() + 100, 0x42), 100);
  // Expect: more than max_inline_data (128 here) is refused at post.
  std::vector<uint8_t> big(129);
  SendWr b = wr(WrOpcode::send, 2, Sge{reinterpret_cast<uint64_t>(big.data()), 129, 0});
  b.send_flags |= kSendInline;
  EXPECT_EQ(p.a().post_send(q.a, b), -EINVAL);
}

TEST_F(EnginePairTest, SqdFinishesTheMessageInProgressStartsNoOtherAndResumes) {
  EnginePair& p = make();
  QpPair q = p.connect({});
  auto src = p.buffer(0, 8192);
  auto dst = p.buffer(1, 8192);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_EQ(p.b().post_recv(q.b, rwr(i, dst->sge(0, 8192))), 0);
  ASSERT_EQ(p.a().post_send(q.a, wr(WrOpcode::send, 1, src->sge(0, 8192))), 0);
  p.step();  // the first message starts
  QpAttr at;
  at.qp_state = QpState::sqd;
  at.en_sqd_async_notify = 1;
  ASSERT_EQ(p.a().modify_qp(q.a, at, kAttrState | kAttrEnSqdAsyncNotify), 0);
  ASSERT_EQ(p.a().post_send(q.a, wr(WrOpcode::send, 2, src->sge(0, 64))), 0);
  std::vector<Completion> sc;
  ASSERT_TRUE(p.wait_completions(p.host(0).scq, &sc, 1));
  p.run_until([] { return false; }, 10'000'000);
  // Expect: the message in progress completed; the one posted in SQD did not start; drained reported once.
  EXPECT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].wr_id, 1u);
  int drained = 0;
  for (const auto& e : p.a().events()) drained += e.type == AsyncEventType::sq_drained && e.id == q.a;
  EXPECT_EQ(drained, 1);
  // Expect: SQD -> RTS sends it.
  at = QpAttr{};
  at.qp_state = QpState::rts;
  ASSERT_EQ(p.a().modify_qp(q.a, at, kAttrState), 0);
  ASSERT_TRUE(p.wait_completions(p.host(0).scq, &sc, 2));
  EXPECT_EQ(sc[1].wr_id, 2u);
}

TEST_F(EnginePairTest, SolicitedOnlyArmingFiresForSolicitedOrFailedCompletions) {
  EnginePair& p = make();
  QpPair q = p.connect({});
  auto src = p.buffer(0, 64);
  auto dst = p.buffer(1, 64);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_EQ(p.b().post_recv(q.b, rwr(i, dst->sge(0, 64))), 0);
  Cq* cq = p.host(1).rcq;
  cq->arm(true);
  const uint64_t events0 = cq->events();
  ASSERT_EQ(p.a().post_send(q.a, wr(WrOpcode::send, 1, src->sge(0, 64))), 0);
  std::vector<Completion> rc;
  ASSERT_TRUE(p.wait_completions(cq, &rc, 1));
  // Expect: an unsolicited SEND completes without an event.
  EXPECT_EQ(cq->events(), events0);
  SendWr w = wr(WrOpcode::send, 2, src->sge(0, 64));
  w.send_flags |= kSendSolicited;
  ASSERT_EQ(p.a().post_send(q.a, w), 0);
  ASSERT_TRUE(p.wait_completions(cq, &rc, 2));
  // Expect: the solicited one raises exactly one event (the arm is used up).
  EXPECT_EQ(cq->events(), events0 + 1);
  w.wr_id = 3;
  ASSERT_EQ(p.a().post_send(q.a, w), 0);
  ASSERT_TRUE(p.wait_completions(cq, &rc, 3));
  EXPECT_EQ(cq->events(), events0 + 1) << "an event without a new arm";
  // Expect: arming for any completion fires on the next one.
  cq->arm(false);
  ASSERT_EQ(p.b().post_recv(q.b, rwr(4, dst->sge(0, 64))), 0);
  ASSERT_EQ(p.a().post_send(q.a, wr(WrOpcode::send, 4, src->sge(0, 64))), 0);
  ASSERT_TRUE(p.wait_completions(cq, &rc, 4));
  EXPECT_EQ(cq->events(), events0 + 2);
}

// The following pin fixes from a spec review of the engine.

TEST_F(EnginePairTest, SendCqOverflowLeavesTheQueueConsistent) {
  EnginePair& p = make();
  Cq* tiny = nullptr;
  ASSERT_EQ(p.a().create_cq(1, &tiny), 0);
  uint32_t qa = 0;
  QpInit init;
  init.pd = p.host(0).pd;
  init.send_cq = tiny;
  init.recv_cq = p.host(0).rcq;
  init.cap = {8, 8, 1, 1, 0};
  init.sq_sig_all = true;
  ASSERT_EQ(p.a().create_qp(init, &qa), 0);
  // Bring it up against a peer QP on B.
  QpPair q = p.connect({});
  QpAttr at;
  at.qp_state = QpState::init;
  at.port_num = 1;
  at.qp_access_flags = kAccessLocalWrite;
  ASSERT_EQ(p.a().modify_qp(qa, at, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags), 0);
  at = QpAttr{};
  at.qp_state = QpState::rtr;
  at.dest_qp_num = q.b;
  at.ah_attr = p.av_to(1);
  ASSERT_EQ(p.a().modify_qp(qa, at, kAttrState | kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn |
                                        kAttrMaxDestRdAtomic | kAttrMinRnrTimer),
            0);
  at = QpAttr{};
  at.qp_state = QpState::rts;
  at.timeout = 14;
  at.retry_cnt = 7;
  at.rnr_retry = 7;
  ASSERT_EQ(p.a().modify_qp(qa, at, kAttrState | kAttrSqPsn | kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry |
                                        kAttrMaxQpRdAtomic),
            0);
  auto src = p.buffer(0, 64);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(p.a().post_send(qa, wr(WrOpcode::rdma_write, i, src->sge(0, 8))), 0);
  // B's QP q.b is connected to q.a, not qa: the writes are NAKed or time out; either
  // way completions arrive, overflow the 1-deep CQ, and the QP goes to ERR.
  p.run_until([&] { return p.a().qp(qa)->state == QpState::err; }, 10'000'000'000);
  Qp* qp = p.a().qp(qa);
  ASSERT_EQ(qp->state, QpState::err);
  // Expect: every WQE retired exactly once; posting still works (and flushes at once);
  // posting a receive does not loop.
  EXPECT_EQ(qp->sq_tail, qp->sq_head);
  EXPECT_EQ(p.a().post_send(qa, wr(WrOpcode::send, 9, src->sge(0, 8))), 0);
  EXPECT_EQ(qp->sq_tail, qp->sq_head);
  EXPECT_EQ(p.a().post_recv(qa, rwr(1, src->sge(0, 8))), 0);
  int cq_errs = 0;
  for (const auto& e : p.a().events()) cq_errs += e.type == AsyncEventType::cq_err;
  EXPECT_EQ(cq_errs, 1) << "the overflow is reported once";
}

TEST_F(EnginePairTest, TimersOfAResetQpDoNotFireEarlyAfterItComesBack) {
  net::LinkFaults dead;
  dead.loss = 1.0;
  EnginePair& p = make(dead);
  EnginePair::RcOptions o;
  o.timeout = 14;  // 67 ms
  QpPair q = p.connect(o);
  auto src = p.buffer(0, 64);
  ASSERT_EQ(p.a().post_send(q.a, wr(WrOpcode::send, 1, src->sge(0, 8))), 0);
  p.step();  // sent, timer armed for 67 ms
  QpAttr at;
  at.qp_state = QpState::reset;
  ASSERT_EQ(p.a().modify_qp(q.a, at, kAttrState), 0);
  // Back to RTS with a 4.3 s timeout, and a new send.
  at = QpAttr{};
  at.qp_state = QpState::init;
  at.port_num = 1;
  at.qp_access_flags = kAccessLocalWrite;
  ASSERT_EQ(p.a().modify_qp(q.a, at, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags), 0);
  at = QpAttr{};
  at.qp_state = QpState::rtr;
  at.dest_qp_num = q.b;
  at.ah_attr = p.av_to(1);
  ASSERT_EQ(p.a().modify_qp(q.a, at, kAttrState | kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn |
                                         kAttrMaxDestRdAtomic | kAttrMinRnrTimer),
            0);
  at = QpAttr{};
  at.qp_state = QpState::rts;
  at.timeout = 20;  // 4.3 s
  at.retry_cnt = 7;
  at.rnr_retry = 7;
  ASSERT_EQ(p.a().modify_qp(q.a, at, kAttrState | kAttrSqPsn | kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry |
                                         kAttrMaxQpRdAtomic),
            0);
  ASSERT_EQ(p.a().post_send(q.a, wr(WrOpcode::send, 2, src->sge(0, 8))), 0);
  p.run_until([] { return false; }, 1'000'000'000);  // 1 s
  // Expect: the old 67 ms entry did not count as a timeout of the new life.
  EXPECT_EQ(p.a().qp(q.a)->counters.timeouts, 0u);
  p.run_until([] { return false; }, 6'000'000'000);  // past 4.3 s from the post, not yet 8.6 s
  EXPECT_EQ(p.a().qp(q.a)->counters.timeouts, 1u);
}

TEST_F(EnginePairTest, TimerHeapStaysSmallUnderManyAcks) {
  EnginePair& p = make();
  EnginePair::RcOptions o;
  o.timeout = 20;  // 4.3 s: every ACK re-arms long before expiry
  o.depth = 64;
  QpPair q = p.connect(o);
  auto src = p.buffer(0, 64);
  auto dst = p.buffer(1, 64);
  for (int round = 0; round < 50; ++round) {
    for (int i = 0; i < 40; ++i) {
      ASSERT_EQ(p.b().post_recv(q.b, rwr(i, dst->sge(0, 64))), 0);
      ASSERT_EQ(p.a().post_send(q.a, wr(WrOpcode::send, i, src->sge(0, 8))), 0);
    }
    std::vector<Completion> sc, rc;
    ASSERT_TRUE(p.wait_completions(p.host(0).scq, &sc, 40));
    ASSERT_TRUE(p.wait_completions(p.host(1).rcq, &rc, 40));
  }
  // Expect: 2,000 acknowledged messages leave a handful of heap entries, not 2,000.
  EXPECT_LE(p.a().timer_entries(), 4u);
}

TEST_F(EnginePairTest, DestroyedQpnsAndAhsAreReusedCorrectly) {
  EnginePair& p = make();
  QpPair q = p.connect({});
  Engine& a = p.a();
  // AHs: destroying releases the PD; slots are reused.
  uint32_t ah1 = 0, ah2 = 0;
  uint32_t pd = 0;
  ASSERT_EQ(a.alloc_pd(&pd), 0);
  ASSERT_EQ(a.create_ah(pd, p.av_to(1), &ah1), 0);
  EXPECT_EQ(a.dealloc_pd(pd), -EBUSY);
  ASSERT_EQ(a.destroy_ah(ah1), 0);
  ASSERT_EQ(a.create_ah(pd, p.av_to(1), &ah2), 0);
  EXPECT_EQ(ah2, ah1) << "the freed slot is reused";
  ASSERT_EQ(a.destroy_ah(ah2), 0);
  EXPECT_EQ(a.dealloc_pd(pd), 0);
  // QPNs: a destroyed QP's number does not come straight back.
  ASSERT_EQ(a.destroy_qp(q.a), 0);
  uint32_t again = 0;
  QpInit init;
  init.pd = p.host(0).pd;
  init.send_cq = init.recv_cq = p.host(0).scq;
  init.cap = {4, 4, 1, 1, 0};
  ASSERT_EQ(a.create_qp(init, &again), 0);
  EXPECT_NE(again, q.a);
}

TEST_F(EnginePairTest, AMessageSpanningAQuarterOfThePsnSpaceIsRefused) {
  EnginePair& p = make();
  EnginePair::RcOptions o;
  o.mtu = PathMtu::mtu256;
  QpPair q = p.connect(o);
  auto local = p.buffer(0, 64);
  SendWr w = wr(WrOpcode::rdma_read, 1, local->sge(0, 0));
  w.num_sge = 1;
  w.sg_list[0].length = 0x80000000u;  // 2 GiB at MTU 256: 2^23 PSNs
  w.remote_addr = 0x1000;
  w.rkey = 1;
  EXPECT_EQ(p.a().post_send(q.a, w), -EINVAL);
  w.sg_list[0].length = 1u << 30;  // 1 GiB: 2^22 PSNs, allowed
  EXPECT_EQ(p.a().post_send(q.a, w), 0);
}

TEST_F(EnginePairTest, RequestsBehindALongReadWaitInsteadOfBeingDropped) {
  EnginePair& p = make();
  QpPair q = p.connect({});
  auto remote = p.buffer(1, 1 << 20);
  auto local = p.buffer(0, 1 << 20);
  auto src = p.buffer(0, 64);
  auto dst = p.buffer(1, 64);
  fill(remote->bytes, 9);
  ASSERT_EQ(p.b().post_recv(q.b, rwr(1, dst->sge(0, 64))), 0);
  // 512 response packets: more than one poll's budget (256), so the READ
  // streams over several loops, yet inside the send window, so the SEND right
  // behind it leaves at once and arrives while the READ still streams.
  SendWr w = wr(WrOpcode::rdma_read, 1, local->sge(0, 1 << 19));
  w.remote_addr = remote->va();
  w.rkey = remote->mr->rkey;
  ASSERT_EQ(p.a().post_send(q.a, w), 0);
  ASSERT_EQ(p.a().post_send(q.a, wr(WrOpcode::send, 2, src->sge(0, 64))), 0);
  std::vector<Completion> sc;
  ASSERT_TRUE(p.wait_completions(p.host(0).scq, &sc, 2));
  EXPECT_EQ(sc[0].status, WcStatus::success);
  EXPECT_EQ(sc[1].status, WcStatus::success);
  EXPECT_EQ(std::memcmp(local->bytes.data(), remote->bytes.data(), 1 << 19), 0);
  // Expect: the SEND waited behind the READ and was served: nothing dropped,
  // no timeout, nothing sent twice.
  EXPECT_GE(p.b().qp(q.b)->counters.held_requests, 1u);
  EXPECT_EQ(p.b().qp(q.b)->counters.dropped, 0u);
  EXPECT_EQ(p.a().qp(q.a)->counters.timeouts, 0u);
  EXPECT_EQ(p.a().qp(q.a)->counters.retransmits, 0u);
}

TEST_F(EnginePairTest, UdQpsUseThePortsActiveMtu) {
  EngineConfig base;
  base.active_mtu = PathMtu::mtu4096;
  pair_ = std::make_unique<EnginePair>(1, net::LinkFaults{}, pool_, false, base);
  EnginePair& p = *pair_;
  EnginePair::RcOptions o;
  o.type = QpType::ud;
  QpPair q = p.connect(o);
  auto src = p.buffer(0, 4096);
  auto dst = p.buffer(1, 4096 + 40);
  uint32_t ah = 0;
  ASSERT_EQ(p.a().create_ah(p.host(0).pd, p.av_to(1), &ah), 0);
  ASSERT_EQ(p.b().post_recv(q.b, rwr(1, dst->sge(0, 4096 + 40))), 0);
  SendWr w = wr(WrOpcode::send, 1, src->sge(0, 4096));
  w.ah = ah;
  w.remote_qpn = q.b;
  w.remote_qkey = 0x11111111;
  ASSERT_EQ(p.a().post_send(q.a, w), 0) << "4 KiB fits a 4096 active MTU";
  std::vector<Completion> rc;
  ASSERT_TRUE(p.wait_completions(p.host(1).rcq, &rc, 1));
  EXPECT_EQ(rc[0].byte_len, 4096u + 40);
}

}  // namespace
}  // namespace droce::test
