// Two engines on one core over an in-memory link (no faults, no delay):
// messages per second for 64 B SEND, WRITE and READ, bandwidth for 4 KiB and
// 64 KiB WRITE, and the CPU cost per packet (both engines' work: build,
// ICRC, parse, verify, place, acknowledge); WRITE once more with the ICRC
// left out, as on droce_shm by default. Run from the release build:
//   build/release/bench/droce_engine_bench

#include <benchmark/benchmark.h>
#include <rte_eal.h>

#include <memory>
#include <vector>

#include "core/clock.h"
#include "net/eal.h"
#include "rocev2/engine.h"

namespace {

using namespace droce;
using namespace droce::rocev2;

rte_mempool* g_pool = nullptr;

class DirectPort : public PacketPort {
 public:
  std::vector<rte_mbuf*> out;
  uint16_t tx_burst(rte_mbuf** frames, uint16_t n) override {
    out.insert(out.end(), frames, frames + n);
    return n;
  }
};

struct Side {
  DirectPort port;
  std::unique_ptr<Engine> engine;
  uint32_t pd = 0, qpn = 0;
  Cq* scq = nullptr;
  Cq* rcq = nullptr;
  std::vector<uint8_t> buf;
  Mr* mr = nullptr;
};

struct Rig {
  Side s[2];
  uint64_t packets = 0;

  /// no_icrc: both engines as on a link that carries no ICRC (droce_shm's icrc=skip).
  Rig(uint32_t buf_len, bool no_icrc) {
    for (int i = 0; i < 2; ++i) {
      EngineConfig cfg;
      cfg.pool = g_pool;
      cfg.offloads.tx_icrc = cfg.offloads.rx_icrc = no_icrc;
      cfg.port = &s[i].port;
      cfg.local_mac = {2, 0, 0, 0, 0, uint8_t(i + 1)};
      cfg.local_ip = ipv4_mapped(0x0a000001 + uint32_t(i));
      s[i].engine = std::make_unique<Engine>(cfg);
      Engine& e = *s[i].engine;
      e.alloc_pd(&s[i].pd);
      e.create_cq(4096, &s[i].scq);
      e.create_cq(4096, &s[i].rcq);
      QpInit init;
      init.pd = s[i].pd;
      init.send_cq = s[i].scq;
      init.recv_cq = s[i].rcq;
      init.cap = {1024, 1024, 1, 1, 64};
      e.create_qp(init, &s[i].qpn);
      s[i].buf.resize(buf_len);
      e.reg_mr(s[i].pd, reinterpret_cast<uint64_t>(s[i].buf.data()), buf_len, s[i].buf.data(),
               kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead, &s[i].mr);
    }
    for (int i = 0; i < 2; ++i) {
      Engine& e = *s[i].engine;
      QpAttr a;
      a.qp_state = QpState::init;
      a.port_num = 1;
      a.qp_access_flags = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
      e.modify_qp(s[i].qpn, a, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags);
      a = QpAttr{};
      a.qp_state = QpState::rtr;
      a.path_mtu = PathMtu::mtu4096;
      a.dest_qp_num = s[1 - i].qpn;
      a.max_dest_rd_atomic = 16;
      a.ah_attr.dgid = ipv4_mapped(0x0a000001 + uint32_t(1 - i));
      a.ah_attr.dmac = {2, 0, 0, 0, 0, uint8_t(2 - i)};
      e.modify_qp(s[i].qpn, a, kAttrState | kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn |
                                   kAttrMaxDestRdAtomic | kAttrMinRnrTimer);
      a = QpAttr{};
      a.qp_state = QpState::rts;
      a.timeout = 14;
      a.retry_cnt = 7;
      a.rnr_retry = 7;
      a.max_rd_atomic = 16;
      e.modify_qp(s[i].qpn, a, kAttrState | kAttrSqPsn | kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry |
                                   kAttrMaxQpRdAtomic);
    }
  }

  // Moves frames across and lets both engines work once.
  void step() {
    const uint64_t now = core::monotonic_ns();
    for (int i = 0; i < 2; ++i) {
      auto& out = s[i].port.out;
      packets += out.size();
      for (size_t k = 0; k < out.size(); k += 64)
        s[1 - i].engine->rx_burst(out.data() + k, uint16_t(std::min<size_t>(64, out.size() - k)), now);
      out.clear();
    }
    s[0].engine->poll(now);
    s[1].engine->poll(now);
  }
};

// Keeps `window` WRs of `op` and `len` bytes outstanding from A to B.
void run_ops(benchmark::State& state, WrOpcode op, bool no_icrc = false) {
  const auto len = uint32_t(state.range(0));
  constexpr uint32_t kWindow = 128;
  Rig rig(std::max(len, 64u), no_icrc);
  Side& a = rig.s[0];
  Side& b = rig.s[1];
  SendWr w;
  w.opcode = op;
  w.num_sge = 1;
  w.sg_list[0] = {reinterpret_cast<uint64_t>(a.buf.data()), len, a.mr->lkey};
  w.remote_addr = reinterpret_cast<uint64_t>(b.buf.data());
  w.rkey = b.mr->rkey;
  RecvWr r;
  r.num_sge = 1;
  r.sg_list[0] = {reinterpret_cast<uint64_t>(b.buf.data()), std::max(len, 64u), b.mr->lkey};
  const bool needs_recv = op == WrOpcode::send;
  uint64_t outstanding = 0, done = 0, n = 0;
  Completion c[64];
  for (auto _ : state) {
    while (outstanding < kWindow) {
      // Every 16th WR signaled: completions are the requester's batch, as perftest does.
      w.send_flags = (n % 16 == 15) ? uint32_t{kSendSignaled} : 0u;
      w.wr_id = n++;
      if (needs_recv) b.engine->post_recv(b.qpn, r);
      if (a.engine->post_send(a.qpn, w) != 0) break;
      ++outstanding;
    }
    rig.step();
    uint32_t k;
    while ((k = a.scq->poll(c, 64)) != 0) {
      outstanding -= 16 * k;
      done += 16 * k;
    }
    while (b.rcq->poll(c, 64) != 0) {
    }
  }
  state.SetItemsProcessed(int64_t(done));
  state.SetBytesProcessed(int64_t(done) * len);
  state.counters["ns_per_packet"] = benchmark::Counter(
      double(rig.packets), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["packets_per_msg"] = done ? double(rig.packets) / double(done) : 0;
}

void BM_EngineSend(benchmark::State& state) { run_ops(state, WrOpcode::send); }
void BM_EngineWrite(benchmark::State& state) { run_ops(state, WrOpcode::rdma_write); }
void BM_EngineRead(benchmark::State& state) { run_ops(state, WrOpcode::rdma_read); }
// The engines' share when the link carries no ICRC (droce_shm's default): what droce over that
// link is compared with, like for like.
void BM_EngineWriteNoIcrc(benchmark::State& state) { run_ops(state, WrOpcode::rdma_write, true); }

BENCHMARK(BM_EngineSend)->Arg(64)->Arg(4096)->UseRealTime();
BENCHMARK(BM_EngineWrite)->Arg(64)->Arg(4096)->Arg(65536)->UseRealTime();
BENCHMARK(BM_EngineRead)->Arg(64)->Arg(4096)->Arg(65536)->UseRealTime();
BENCHMARK(BM_EngineWriteNoIcrc)->Arg(64)->Arg(65536)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  net::EalOptions eal;
  eal.program = "droce-engine-bench";
  eal.memory_mb = 1024;
  eal.extra = {"--log-level=lib.eal:error"};
  if (net::eal_start(eal) != 0) return 1;
  g_pool = net::create_mbuf_pool("bench_pool", 65535, 4096 + 256);
  if (g_pool == nullptr) return 1;
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  net::eal_stop();
  return 0;
}
