// The provider's post_send without droced: one ibv_send_wr converted and written into a send
// ring's slot, as droce_post_send does (provider/verbs/data_path.cc, post_one) up to the
// doorbell, which is left out (it writes droced's eventfd only when droced sleeps). The ring is
// in private memory and its consumer index follows the producer's at once, as a droced that
// keeps up. Run from the release build:
//   build/release/bench/droce_post_send_bench

#include <benchmark/benchmark.h>
#include <infiniband/verbs.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <vector>

#include "abi/queues.h"
#include "abi/shm_ring.h"
#include "provider/client/client.h"
#include "provider/verbs/convert.h"

namespace {

using namespace droce;

// A QP's send queue as droced would size it: max_sge 4, max_inline 256 (the device's), 1024 WRs.
class SendQueue {
 public:
  SendQueue() {
    const abi::ShmRingGeometry g{1024, abi::send_wqe_size(4, 256)};
    bytes_ = abi::shm_ring_bytes(g);
    mem_ = static_cast<std::byte*>(std::aligned_alloc(abi::kShmRingAlignment, bytes_));
    if (abi::shm_ring_format({mem_, bytes_}, g) != 0 ||
        abi::ShmRingProducer::attach({mem_, bytes_}, g, &q_.ring) != 0)
      std::abort();
    q_.pending = &pending_;
    q_.max_wr = 1024;
    q_.max_sge = 4;
    q_.max_inline = 256;
  }
  ~SendQueue() { std::free(mem_); }
  client::ClientQueue& queue() { return q_; }
  // droced took everything published.
  void consume() {
    auto* h = reinterpret_cast<abi::ShmRingHeader*>(mem_);
    std::atomic_ref<uint32_t>(h->consumer_index).store(q_.ring.index(), std::memory_order_release);
  }

 private:
  std::byte* mem_ = nullptr;
  size_t bytes_ = 0;
  uint32_t pending_ = 0;
  client::ClientQueue q_;
};

// What post_one does with one WR of an RC QP.
int post(client::ClientQueue& q, const ibv_send_wr& wr) {
  abi::SendWqeHeader h;
  if (int rc = verbs::to_send_wqe_header(wr, IBV_QPT_RC, 0, &h); rc != 0) return rc;
  return q.push_send(h, {wr.sg_list, static_cast<uint32_t>(wr.num_sge)});
}

void run(benchmark::State& state, ibv_wr_opcode op, unsigned flags, int num_sge, uint32_t bytes_each) {
  SendQueue sq;
  std::vector<uint8_t> data(4 * 4096, 0x5a);
  ibv_sge sge[4];
  for (int i = 0; i < num_sge; ++i)
    sge[i] = {reinterpret_cast<uintptr_t>(data.data() + 4096 * i), bytes_each, 0x100u + i};
  ibv_send_wr wr{};
  wr.wr_id = 1;
  wr.sg_list = sge;
  wr.num_sge = num_sge;
  wr.opcode = op;
  wr.send_flags = IBV_SEND_SIGNALED | flags;
  wr.wr.rdma.remote_addr = 0x7f0000000000;
  wr.wr.rdma.rkey = 0x1234;
  for (auto _ : state) {
    if (post(sq.queue(), wr) != 0) {
      state.SkipWithError("post failed");
      break;
    }
    sq.consume();
    ++wr.wr_id;
  }
  state.SetItemsProcessed(state.iterations());
}

// ib_write_bw -s 64: one 64-byte SGE, not inline (perftest asks droce for no inline data).
void BM_PostSendWrite64(benchmark::State& state) { run(state, IBV_WR_RDMA_WRITE, 0, 1, 64); }
// Four SGEs of 1 KiB.
void BM_PostSendWrite4Sge(benchmark::State& state) { run(state, IBV_WR_RDMA_WRITE, 0, 4, 1024); }
// 64 bytes inline in one SGE, and 256 (the device's most) in four.
void BM_PostSendInline64(benchmark::State& state) { run(state, IBV_WR_SEND, IBV_SEND_INLINE, 1, 64); }
void BM_PostSendInline256(benchmark::State& state) { run(state, IBV_WR_SEND, IBV_SEND_INLINE, 4, 64); }

BENCHMARK(BM_PostSendWrite64);
BENCHMARK(BM_PostSendWrite4Sge);
BENCHMARK(BM_PostSendInline64);
BENCHMARK(BM_PostSendInline256);

}  // namespace

BENCHMARK_MAIN();
