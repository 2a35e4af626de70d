// Google Benchmark for the wire format's hot primitives: the ICRC from 64 B
// to 64 KiB (contiguous and over a chain as zero-copy TX builds it), and
// building and parsing one packet. Report with:
//   build/release/bench/droce_wire_bench --benchmark_counters_tabular=true

#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "rocev2/builder.h"
#include "rocev2/icrc.h"
#include "rocev2/parser.h"
#include "rocev2/random_packet.h"

namespace {

using namespace droce::rocev2;

PacketHeaders bench_headers(uint8_t opcode) {
  PacketHeaders h;
  h.l3.src = ipv4_mapped(0x0a000001);
  h.l3.dst = ipv4_mapped(0x0a000002);
  h.bth.opcode = opcode;
  h.bth.dest_qp = 0x11;
  h.bth.psn = 1;
  return h;
}

// Raw CRC-32 throughput of the library under the ICRC.
void BM_Crc32(benchmark::State& state) {
  std::vector<uint8_t> buf(size_t(state.range(0)), 0x5a);
  uint32_t crc = 0;
  for (auto _ : state) {
    crc = crc32(crc, buf.data(), buf.size());
    benchmark::DoNotOptimize(crc);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * state.range(0));
}
BENCHMARK(BM_Crc32)->RangeMultiplier(4)->Range(64, 64 << 10);

// The ICRC of a whole RoCEv2 packet with `range(0)` bytes of payload
// (masked header copy included), as RX verification pays it.
void BM_Icrc(benchmark::State& state) {
  const auto payload_len = uint32_t(state.range(0));
  const PacketHeaders h = bench_headers(0x0a);  // RDMA WRITE only
  std::vector<uint8_t> payload(payload_len, 0xa5), frame(frame_len(h, payload_len));
  build_frame(h, payload, frame);
  PacketLayout at;
  write_headers(h, payload_len, frame.data(), &at);
  const droce::net::FrameBytes bytes{std::span<const uint8_t>(frame)};
  for (auto _ : state) benchmark::DoNotOptimize(compute_icrc(bytes, at.l3_off, at.icrc_off, 4));
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(frame.size()));
}
BENCHMARK(BM_Icrc)->Arg(64)->Arg(256)->Arg(1024)->Arg(4096)->Arg(16384)->Arg(65536 - 128);

// Building one packet into a contiguous buffer: headers, payload copy, ICRC.
void BM_BuildFrame(benchmark::State& state) {
  const auto payload_len = uint32_t(state.range(0));
  const PacketHeaders h = bench_headers(payload_len ? 0x04 : 0x11);
  std::vector<uint8_t> payload(payload_len, 1), frame(frame_len(h, payload_len));
  for (auto _ : state) benchmark::DoNotOptimize(build_frame(h, payload, frame));
  state.SetItemsProcessed(int64_t(state.iterations()));
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(frame.size()));
}
BENCHMARK(BM_BuildFrame)->Arg(0)->Arg(64)->Arg(1024)->Arg(4096);

// Headers only (what the TX path writes before the payload's own segment).
void BM_WriteHeaders(benchmark::State& state) {
  const PacketHeaders h = bench_headers(0x0a);
  uint8_t out[kMaxHeaderLen];
  for (auto _ : state) {
    benchmark::DoNotOptimize(write_headers(h, 1024, out));
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(int64_t(state.iterations()));
}
BENCHMARK(BM_WriteHeaders);

// Parsing one packet with full validation, ICRC included (or not, as when
// a NIC has checked it).
void BM_ParseFrame(benchmark::State& state) {
  const auto payload_len = uint32_t(state.range(0));
  const auto verify = state.range(1);  // bit 0: ICRC, bit 1: IPv4 header checksum
  const PacketHeaders h = bench_headers(payload_len ? 0x04 : 0x11);
  std::vector<uint8_t> payload(payload_len, 1), frame(frame_len(h, payload_len));
  build_frame(h, payload, frame);
  ParsedPacket p;
  const ParseOptions opts{.verify_icrc = (verify & 1) != 0, .verify_ipv4_checksum = (verify & 2) != 0};
  for (auto _ : state) {
    auto s = parse_frame(std::span<const uint8_t>(frame), &p, opts);
    benchmark::DoNotOptimize(s);
  }
  state.SetItemsProcessed(int64_t(state.iterations()));
}
BENCHMARK(BM_ParseFrame)->ArgsProduct({{0, 64, 1024, 4096}, {3, 2, 1, 0}})->ArgNames({"payload", "verify"});

// A mix of every opcode and size (what a busy port sees).
void BM_ParseMixed(benchmark::State& state) {
  std::mt19937_64 rng(7);
  std::vector<std::vector<uint8_t>> frames;
  for (int i = 0; i < 256; ++i) {
    RandomPacket r = random_packet(rng, {.max_payload = 1024});
    std::vector<uint8_t> f(frame_len(r.hdr, uint32_t(r.payload.size())));
    build_frame(r.hdr, r.payload, f);
    frames.push_back(std::move(f));
  }
  ParsedPacket p;
  size_t i = 0;
  for (auto _ : state) {
    auto s = parse_frame(std::span<const uint8_t>(frames[i++ & 255]), &p);
    benchmark::DoNotOptimize(s);
  }
  state.SetItemsProcessed(int64_t(state.iterations()));
}
BENCHMARK(BM_ParseMixed);

}  // namespace

BENCHMARK_MAIN();
