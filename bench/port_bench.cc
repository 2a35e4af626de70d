// net::Port's data path per burst, over the two links one process can open on its own:
// a net_ring pair (an ethdev) and a droce_shm pair (both ends here). What it shows is the
// cost the Port adds around the device's burst functions: an empty poll (what an idle
// lcore pays each loop) and a burst of 32 short frames sent and received.
// Numbers only; run a release build for figures worth quoting.

#include <benchmark/benchmark.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "net/eal.h"
#include "net/port.h"

namespace {

using droce::net::Port;
using droce::net::PortConfig;

struct Pair {
  std::unique_ptr<Port> a;
  std::unique_ptr<Port> b;
};

Pair& ring_pair() {
  static Pair p = [] {
    Pair r;
    PortConfig cfg;
    if (Port::open_ring_pair("bench", cfg, &r.a, &r.b) != 0) std::abort();
    return r;
  }();
  return p;
}

Pair& shm_pair() {
  static Pair p = [] {
    Pair r;
    PortConfig cfg;
    const std::string sock = "/tmp/droce_port_bench." + std::to_string(::getpid()) + ".sock";
    if (Port::open_device("droce_shm0,role=server,socket=" + sock, cfg, &r.a) != 0 ||
        Port::open_device("droce_shm1,role=client,socket=" + sock, cfg, &r.b) != 0)
      std::abort();
    for (int i = 0; i < 500 && !(r.a->link().up && r.b->link().up); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!r.a->link().up || !r.b->link().up) std::abort();
    return r;
  }();
  return p;
}

Pair& pair_of(int kind) { return kind == 0 ? ring_pair() : shm_pair(); }
const char* name_of(int kind) { return kind == 0 ? "net_ring" : "droce_shm"; }

// rx_burst on an empty queue: the Port's dispatch plus the device's own empty check.
void BM_PortRxEmpty(benchmark::State& state) {
  Pair& p = pair_of(static_cast<int>(state.range(0)));
  state.SetLabel(name_of(static_cast<int>(state.range(0))));
  rte_mbuf* burst[32];
  for (auto _ : state) benchmark::DoNotOptimize(p.b->rx_burst(0, burst, 32));
}
BENCHMARK(BM_PortRxEmpty)->Arg(0)->Arg(1);

// 32 frames of 64 bytes: allocated, sent on A, received on B, freed. One burst each way.
void BM_PortBurst32(benchmark::State& state) {
  Pair& p = pair_of(static_cast<int>(state.range(0)));
  state.SetLabel(name_of(static_cast<int>(state.range(0))));
  constexpr uint16_t kBurst = 32;
  rte_mbuf* tx[kBurst];
  rte_mbuf* rx[kBurst];
  for (auto _ : state) {
    if (rte_pktmbuf_alloc_bulk(p.a->pool(), tx, kBurst) != 0) {
      state.SkipWithError("pool empty");
      break;
    }
    for (rte_mbuf* m : tx) {
      char* d = rte_pktmbuf_append(m, 64);
      std::memset(d, 0, 64);
    }
    uint16_t sent = p.a->tx_burst(0, tx, kBurst);
    if (sent < kBurst) rte_pktmbuf_free_bulk(tx + sent, kBurst - sent);
    uint16_t got = 0;
    while (got < sent) got += p.b->rx_burst(0, rx + got, static_cast<uint16_t>(kBurst - got));
    rte_pktmbuf_free_bulk(rx, got);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * kBurst);
}
BENCHMARK(BM_PortBurst32)->Arg(0)->Arg(1);

}  // namespace

int main(int argc, char** argv) {
  droce::net::EalOptions opts;
  opts.program = "droce-port-bench";
  opts.memory_mb = 512;
  opts.extra = {"--log-level=lib.eal:error", "--log-level=droce.*:warning"};
  if (droce::net::eal_start(opts) != 0) return 1;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  ring_pair().a.reset();
  ring_pair().b.reset();
  shm_pair().a.reset();
  shm_pair().b.reset();
  benchmark::Shutdown();
  droce::net::eal_stop();
  return 0;
}
