// The soak: many RC QPs, mixed opcodes and sizes (0 B to 1 MiB), over a link
// with loss, reordering, duplication and corruption. Every WR must complete
// exactly once, in order, successfully; every byte must arrive intact; every
// atomic must return the value the sequence implies; nothing may leak.
//
// Default: DROCE_SOAK_MESSAGES (20,000) messages across 16 QPs. The full soak
// (scripts/test.sh --soak) runs 1,000,000 in the release build.

#include <gtest/gtest.h>

#include <deque>
#include <random>

#include "tests/rocev2/engine_pair.h"
#include "tests/test_support.h"

namespace droce::test {
namespace {

constexpr uint32_t kWindow = 8;         // WRs outstanding per QP
constexpr uint32_t kMaxLen = 1u << 20;  // 1 MiB

uint64_t env_u64(const char* name, uint64_t dflt) {
  const char* s = std::getenv(name);
  return s ? std::strtoull(s, nullptr, 0) : dflt;
}

enum class Op { send, send_imm, write, write_imm, read, fetch_add, cmp_swap };

struct Expect {
  uint64_t wr_id;
  Op op;
  uint32_t len;
  uint32_t src_off;  ///< slice of the QP's source pattern
  uint32_t slot;
  uint64_t atomic_orig;  ///< the value the atomic must return
};

struct QpState {
  QpPair q;
  std::shared_ptr<EnginePair::Buf> src;      // A: random pattern (send/write source)
  std::shared_ptr<EnginePair::Buf> local;    // A: READ targets and atomic results, kWindow slots
  std::shared_ptr<EnginePair::Buf> recv;     // B: receive slots
  std::shared_ptr<EnginePair::Buf> target;   // B: WRITE targets, kWindow slots
  std::shared_ptr<EnginePair::Buf> readsrc;  // B: what READs fetch
  std::shared_ptr<EnginePair::Buf> cells;    // B: [0] fetch-add counter, [1] compare-swap cell
  std::deque<Expect> sends;                  // A's completions, in order
  std::deque<Expect> recvs;                  // B's receive completions, in order
  uint64_t next_id = 0;
  uint64_t fadd_sum = 0;   // what the counter holds once every posted FADD ran
  uint64_t cswap_val = 0;  // what the cell holds once every posted CSWAP ran
  uint64_t posted = 0;
};

uint32_t pick_len(std::mt19937_64& rng) {
  const uint64_t r = rng() % 1000;
  auto in = [&](uint32_t lo, uint32_t hi) { return lo + uint32_t(rng() % (hi - lo + 1)); };
  if (r < 600) return in(0, 128);
  if (r < 900) return in(129, 8192);
  if (r < 990) return in(8193, 128 << 10);
  return in((128 << 10) + 1, kMaxLen);
}

class EngineSoak : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { pool_ = net::create_mbuf_pool("soak_pool", 65536, 4096 + 256); }
  static rte_mempool* pool_;
};
rte_mempool* EngineSoak::pool_ = nullptr;

TEST_F(EngineSoak, EveryWrCompletesExactlyOnceInOrderWithItsDataUnderFaults) {
  ASSERT_NE(pool_, nullptr);
  const unsigned pool_in_use = rte_mempool_in_use_count(pool_);
  const uint64_t messages = env_u64("DROCE_SOAK_MESSAGES", 20000);
  const uint32_t nqps = uint32_t(env_u64("DROCE_SOAK_QPS", 16));
  const uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (DROCE_TEST_SEED reproduces)");
  std::mt19937_64 rng(seed);

  net::LinkFaults f;
  f.loss = 0.05;
  f.reorder = 0.02;
  f.duplicate = 0.01;
  f.corrupt = 0.001;
  auto pair = std::make_unique<EnginePair>(seed, f, pool_);
  EnginePair& p = *pair;

  std::vector<QpState> qs(nqps);
  EnginePair::RcOptions o;
  o.timeout = 8;  // ~1 ms
  o.depth = kWindow * 2;
  o.psn_a = 0xfff000;  // every QP crosses the 24-bit PSN wrap early
  o.psn_b = 0xffff00;
  for (auto& s : qs) {
    s.q = p.connect(o);
    s.src = p.buffer(0, kMaxLen);
    s.local = p.buffer(0, size_t{kWindow} * kMaxLen);
    s.recv = p.buffer(1, size_t{kWindow} * kMaxLen);
    s.target = p.buffer(1, size_t{kWindow} * kMaxLen);
    s.readsrc = p.buffer(1, kMaxLen);
    s.cells = p.buffer(1, 16);
    for (auto& b : s.src->bytes) b = uint8_t(rng());
    for (auto& b : s.readsrc->bytes) b = uint8_t(rng());
  }

  uint64_t posted = 0, completed = 0, received = 0, failures = 0;
  auto fail = [&](const std::string& what) {
    if (failures++ < 10) ADD_FAILURE() << what;
  };

  auto post_one = [&](QpState& s) {
    Expect e{};
    e.wr_id = s.next_id++;
    e.slot = uint32_t(e.wr_id % kWindow);
    const uint64_t r = rng() % 100;
    e.op = r < 30 ? Op::send : r < 40 ? Op::send_imm : r < 60 ? Op::write : r < 65 ? Op::write_imm
         : r < 85 ? Op::read : r < 93 ? Op::fetch_add : Op::cmp_swap;
    e.len = (e.op == Op::fetch_add || e.op == Op::cmp_swap) ? 8 : pick_len(rng);
    e.src_off = uint32_t(rng() % (kMaxLen - e.len + 1));
    SendWr w;
    w.wr_id = e.wr_id;
    w.send_flags = kSendSignaled;
    w.num_sge = 1;
    const uint64_t slot_off = uint64_t{e.slot} * kMaxLen;
    switch (e.op) {
      case Op::send:
      case Op::send_imm:
        w.opcode = e.op == Op::send ? WrOpcode::send : WrOpcode::send_with_imm;
        w.imm_data = uint32_t(e.wr_id);
        w.sg_list[0] = s.src->sge(e.src_off, e.len);
        break;
      case Op::write:
      case Op::write_imm:
        w.opcode = e.op == Op::write ? WrOpcode::rdma_write : WrOpcode::rdma_write_with_imm;
        w.imm_data = uint32_t(e.wr_id);
        w.sg_list[0] = s.src->sge(e.src_off, e.len);
        w.remote_addr = s.target->va() + slot_off;
        w.rkey = s.target->mr->rkey;
        break;
      case Op::read:
        w.opcode = WrOpcode::rdma_read;
        w.sg_list[0] = s.local->sge(uint32_t(slot_off), e.len);
        w.remote_addr = s.readsrc->va() + e.src_off;
        w.rkey = s.readsrc->mr->rkey;
        break;
      case Op::fetch_add:
        w.opcode = WrOpcode::atomic_fetch_and_add;
        w.sg_list[0] = s.local->sge(uint32_t(slot_off), 8);
        w.remote_addr = s.cells->va();
        w.rkey = s.cells->mr->rkey;
        w.compare_add = 1 + rng() % 1000;
        e.atomic_orig = s.fadd_sum;
        s.fadd_sum += w.compare_add;
        break;
      case Op::cmp_swap:
        w.opcode = WrOpcode::atomic_cmp_and_swp;
        w.sg_list[0] = s.local->sge(uint32_t(slot_off), 8);
        w.remote_addr = s.cells->va() + 8;
        w.rkey = s.cells->mr->rkey;
        w.compare_add = s.cswap_val;  // always matches: the chain is known
        w.swap = rng();
        e.atomic_orig = s.cswap_val;
        s.cswap_val = w.swap;
        break;
    }
    if (e.op == Op::send || e.op == Op::send_imm || e.op == Op::write_imm) {
      RecvWr rw;
      rw.wr_id = e.wr_id;
      rw.num_sge = 1;
      rw.sg_list[0] = s.recv->sge(uint32_t(slot_off), kMaxLen);
      ASSERT_EQ(p.b().post_recv(s.q.b, rw), 0);
      s.recvs.push_back(e);
    }
    ASSERT_EQ(p.a().post_send(s.q.a, w), 0);
    s.sends.push_back(e);
    ++s.posted;
    ++posted;
  };

  auto check_recv = [&](QpState& s, const Completion& c) {
    ++received;
    if (s.recvs.empty()) return fail("a receive completion nobody expected");
    const Expect e = s.recvs.front();
    s.recvs.pop_front();
    if (c.wr_id != e.wr_id) return fail("receive out of order: got " + std::to_string(c.wr_id) + " want " + std::to_string(e.wr_id));
    if (c.status != WcStatus::success) return fail(std::string("receive status ") + to_string(c.status));
    if (e.op == Op::write_imm) {
      if (c.opcode != WcOpcode::recv_rdma_with_imm || c.imm_data != uint32_t(e.wr_id)) fail("write-imm receive wrong");
      return;
    }
    if (c.byte_len != e.len) return fail("receive length " + std::to_string(c.byte_len) + " want " + std::to_string(e.len));
    if ((e.op == Op::send_imm) != ((c.wc_flags & kWcWithImm) != 0)) fail("immediate flag wrong");
    if (std::memcmp(s.recv->bytes.data() + uint64_t{e.slot} * kMaxLen, s.src->bytes.data() + e.src_off, e.len) != 0)
      fail("received bytes differ, wr " + std::to_string(e.wr_id));
  };

  auto check_send = [&](QpState& s, const Completion& c) {
    ++completed;
    if (s.sends.empty()) return fail("a send completion nobody expected");
    const Expect e = s.sends.front();
    s.sends.pop_front();
    if (c.wr_id != e.wr_id) return fail("send completion out of order: got " + std::to_string(c.wr_id) + " want " + std::to_string(e.wr_id));
    if (c.status != WcStatus::success) return fail(std::string("send status ") + to_string(c.status) + "\n" + p.dump());
    const uint8_t* slot = s.local->bytes.data() + uint64_t{e.slot} * kMaxLen;
    switch (e.op) {
      case Op::write:
      case Op::write_imm:
        if (std::memcmp(s.target->bytes.data() + uint64_t{e.slot} * kMaxLen, s.src->bytes.data() + e.src_off, e.len) != 0)
          fail("written bytes differ, wr " + std::to_string(e.wr_id));
        break;
      case Op::read:
        if (std::memcmp(slot, s.readsrc->bytes.data() + e.src_off, e.len) != 0)
          fail("read bytes differ, wr " + std::to_string(e.wr_id));
        break;
      case Op::fetch_add:
      case Op::cmp_swap: {
        uint64_t orig;
        std::memcpy(&orig, slot, 8);
        if (orig != e.atomic_orig)
          fail("atomic returned " + std::to_string(orig) + " want " + std::to_string(e.atomic_orig));
        break;
      }
      default:
        break;
    }
  };

  const bool ok = p.run_until(
      [&] {
        Completion c[64];
        uint32_t n;
        // B's receives first: a receive always completes before its send is acknowledged.
        while ((n = p.host(1).rcq->poll(c, 64)) != 0)
          for (uint32_t i = 0; i < n; ++i) check_recv(qs[c[i].qp_num - p.host(1).engine->qp(qs[0].q.b)->qpn], c[i]);
        while ((n = p.host(0).scq->poll(c, 64)) != 0)
          for (uint32_t i = 0; i < n; ++i) check_send(qs[c[i].qp_num - qs[0].q.a], c[i]);
        for (auto& s : qs)
          while (posted < messages && s.sends.size() < kWindow) post_one(s);
        return (completed == messages && posted == messages) || failures > 0;
      },
      3600'000'000'000ull, 2'000'000'000ull);
  ASSERT_TRUE(ok) << "completed " << completed << " of " << posted << "\n" << p.dump();
  EXPECT_EQ(failures, 0u);
  EXPECT_EQ(completed, messages);
  // Let stray frames drain, then check the final atomic values and that nothing leaked.
  p.run_until([] { return false; }, 2'000'000'000ull);
  for (auto& s : qs) {
    EXPECT_TRUE(s.sends.empty());
    EXPECT_TRUE(s.recvs.empty());
    uint64_t v[2];
    std::memcpy(v, s.cells->bytes.data(), 16);
    EXPECT_EQ(v[0], s.fadd_sum) << "fetch-add executed a different number of times";
    EXPECT_EQ(v[1], s.cswap_val);
  }
  uint64_t retx = 0;
  for (auto& s : qs) retx += p.a().qp(s.q.a)->counters.retransmits;
  std::printf("soak: %lu messages on %u QPs, %lu receives, %lu retransmitted packets, link a->b %lu frames "
              "(%lu lost, %lu corrupted, %lu duplicated), %.3f s of protocol time\n",
              (unsigned long)messages, nqps, (unsigned long)received, (unsigned long)retx,
              (unsigned long)p.link().stats(0).sent, (unsigned long)p.link().stats(0).lost,
              (unsigned long)p.link().stats(0).corrupted, (unsigned long)p.link().stats(0).duplicated,
              double(p.now()) / 1e9);
  pair.reset();
  EXPECT_EQ(rte_mempool_in_use_count(pool_), pool_in_use) << "mbufs leaked";
}

}  // namespace
}  // namespace droce::test
