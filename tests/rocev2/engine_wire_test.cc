// Wire check: what the engine puts on the wire for SEND, WRITE, READ,
// atomics, ACK and every NAK kind has the field layout of what the kernel's
// rxe put on the wire (../shared/pcaps), and droce's decoder accepts it.

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>

#include "net/pcap_file.h"
#include "rocev2/builder.h"
#include "rocev2/parser.h"
#include "tests/rocev2/engine_pair.h"
#include "tests/test_support.h"

namespace droce::test {
namespace {

/// The layout facts a packet must share with rxe's packet of the same kind.
struct Shape {
  uint8_t opcode = 0;
  size_t header_len = 0;  // Ethernet through the extension headers
  bool ackreq = false;
  uint16_t pkey = 0;
  uint8_t tver = 0;
  uint8_t pad_ok = 1;     // pad == (-payload) % 4
  uint16_t udp_csum = 0;
  bool df = false;
  uint8_t ttl = 0;
  uint8_t tos = 0;
  bool sport_roce_range = false;
  int aeth_syndrome = -1;  // -1: no AETH
  bool operator==(const Shape&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Shape& s) {
  return os << "{" << opcode_info(s.opcode).name << " hdr " << s.header_len << " ackreq " << s.ackreq
            << " pkey 0x" << std::hex << s.pkey << std::dec << " tver " << int(s.tver) << " pad_ok "
            << int(s.pad_ok) << " udp_csum " << s.udp_csum << " df " << s.df << " ttl " << int(s.ttl) << " tos "
            << int(s.tos) << " sport_c000 " << s.sport_roce_range << " aeth 0x" << std::hex << s.aeth_syndrome
            << std::dec << "}";
}

/// Kind: the opcode, and for ACKs the syndrome (an RNR NAK is not an ACK).
using Kind = std::pair<uint8_t, int>;

Shape shape_of(const std::vector<uint8_t>& frame) {
  ParsedPacket p;
  EXPECT_EQ(parse_frame(std::span<const uint8_t>(frame), &p), ParseStatus::ok);
  Shape s;
  if (p.info == nullptr) return s;
  s.opcode = p.hdr.bth.opcode;
  s.header_len = p.layout.payload_off;
  s.ackreq = p.hdr.bth.ackreq;
  s.pkey = p.hdr.bth.pkey;
  s.tver = p.hdr.bth.tver;
  s.pad_ok = p.hdr.bth.pad == ((4 - (p.layout.payload_len & 3)) & 3);
  s.udp_csum = p.hdr.l4.checksum;
  s.df = (p.hdr.l3.ipv4_frag & net::kIpv4FlagDf) != 0;
  s.ttl = p.hdr.l3.ttl;
  s.tos = p.hdr.l3.tos;
  s.sport_roce_range = (p.hdr.l4.src_port & 0xc000) == 0xc000;
  if (p.info->has(kHdrAeth)) s.aeth_syndrome = p.hdr.ext.aeth.syndrome;
  return s;
}

Kind kind_of(const Shape& s) { return {s.opcode, s.opcode == 0x11 ? s.aeth_syndrome : -1}; }

class EngineWire : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { pool_ = net::create_mbuf_pool("wire_pool", 8192, 4096 + 256); }
  void SetUp() override {
    if (!std::filesystem::exists(pcap_dir())) GTEST_SKIP() << "no " << pcap_dir();
  }
  static rte_mempool* pool_;
};
rte_mempool* EngineWire::pool_ = nullptr;

TEST_F(EngineWire, EnginePacketsHaveRxesFieldLayoutAndDecode) {
  // rxe's captures: IPv4, path MTU 1024, P_Key 0xFFFF, min_rnr_timer 1, rnr_retry 2.
  std::map<Kind, Shape> rxe;
  for (const char* name : {"rc_send_verbs", "rc_write_verbs", "rc_read_verbs", "rc_atomic_verbs", "nak_rnr",
                           "nak_remote_access", "nak_psn_seq_loss"}) {
    std::string error;
    for (const auto& f : net::read_pcap((pcap_dir() / (std::string(name) + ".pcap")).string(), &error)) {
      const Shape s = shape_of(f.bytes);
      rxe.emplace(kind_of(s), s);
    }
    ASSERT_TRUE(error.empty()) << error;
  }

  auto pair = std::make_unique<EnginePair>(1, net::LinkFaults{}, pool_);
  EnginePair& p = *pair;
  std::vector<std::vector<uint8_t>> frames;
  p.capture_to(&frames);
  EnginePair::RcOptions o;
  o.min_rnr_timer = 1;
  o.rnr_retry = 2;
  QpPair q = p.connect(o);
  auto src = p.buffer(0, 4096);
  auto dst = p.buffer(1, 4096);
  auto remote = p.buffer(1, 4096);
  auto local = p.buffer(0, 4096);
  auto run = [&] { p.run_until([] { return false; }, 2'000'000'000); };
  auto post = [&](QpPair qp, WrOpcode op, uint32_t len, uint32_t rkey) {
    const bool into_local = op == WrOpcode::rdma_read || op == WrOpcode::atomic_fetch_and_add ||
                            op == WrOpcode::atomic_cmp_and_swp;
    SendWr w;
    w.opcode = op;
    w.send_flags = kSendSignaled;
    w.num_sge = 1;
    w.sg_list[0] = into_local ? local->sge(0, len) : src->sge(0, len);
    w.remote_addr = remote->va();
    w.rkey = rkey;
    w.imm_data = 0xdeadbeef;
    w.compare_add = 1;
    ASSERT_EQ(p.a().post_send(qp.a, w), 0);
  };
  RecvWr r;
  r.num_sge = 1;
  r.sg_list[0] = dst->sge(0, 4096);

  // The operations rxe's captures hold.
  for (int i = 0; i < 3; ++i) ASSERT_EQ(p.b().post_recv(q.b, r), 0);
  post(q, WrOpcode::send, 64, 0);
  post(q, WrOpcode::send_with_imm, 32, 0);
  post(q, WrOpcode::send, 2500, 0);
  post(q, WrOpcode::rdma_write, 64, remote->mr->rkey);
  post(q, WrOpcode::rdma_write, 2500, remote->mr->rkey);
  post(q, WrOpcode::rdma_write_with_imm, 64, remote->mr->rkey);
  ASSERT_EQ(p.b().post_recv(q.b, r), 0);
  post(q, WrOpcode::rdma_read, 64, remote->mr->rkey);
  post(q, WrOpcode::rdma_read, 2500, remote->mr->rkey);
  post(q, WrOpcode::atomic_fetch_and_add, 8, remote->mr->rkey);
  post(q, WrOpcode::atomic_cmp_and_swp, 8, remote->mr->rkey);
  run();
  // A PSN sequence NAK: B is handed a request from ahead of what it expects.
  {
    PacketHeaders h;
    h.l2.dst = p.host(1).mac;
    h.l2.src = p.host(0).mac;
    h.l3.src = p.host(0).ip;
    h.l3.dst = p.host(1).ip;
    h.l4.src_port = 0xc123;
    h.bth.opcode = 0x0a;
    h.bth.pkey = 0xffff;
    h.bth.dest_qp = q.b;
    h.bth.psn = psn_add(p.b().qp(q.b)->resp.epsn, 5);
    h.bth.ackreq = true;
    h.ext.reth = {remote->va(), remote->mr->rkey, 4};
    rte_mbuf* m = rte_pktmbuf_alloc(pool_);
    ASSERT_EQ(build_mbuf(h, std::vector<uint8_t>(4, 1), m), 0);
    p.b().rx_burst(&m, 1, p.now());
    run();
  }
  // RNR NAKs: a SEND with no receive posted, until rnr_retry runs out.
  post(q, WrOpcode::send, 64, 0);
  run();
  // A remote access NAK (on a fresh pair: the RNR ended the first).
  QpPair q2 = p.connect(o);
  post(q2, WrOpcode::rdma_write, 64, remote->mr->rkey ^ 0x80);  // a stale key byte
  run();

  // Expect: every kind rxe's captures show, droce sent too, with the same layout.
  std::set<Kind> seen;
  for (const auto& f : frames) {
    const Shape s = shape_of(f);
    const Kind k = kind_of(s);
    seen.insert(k);
    auto it = rxe.find(k);
    if (it == rxe.end()) continue;  // a kind rxe's captures lack (e.g. WRITE with immediate)
    EXPECT_EQ(s, it->second) << "droce vs rxe for " << opcode_info(k.first).name;
  }
  for (const auto& [k, s] : rxe)
    EXPECT_TRUE(seen.count(k)) << "droce never sent " << opcode_info(k.first).name << " syndrome 0x" << std::hex
                               << k.second;

  // Expect: droce's decoder accepts every frame of the capture.
  const auto path = std::filesystem::temp_directory_path() / ("droce_engine_wire_" + std::to_string(getpid()) + ".pcap");
  {
    net::PcapWriter w(path.string());
    ASSERT_TRUE(w.ok()) << w.error();
    uint64_t t = 0;
    for (const auto& f : frames) w.write(f, t += 1000);
  }
  const char* droce = std::getenv("DROCE_BIN");
  if (droce != nullptr) {
    const std::string cmd = std::string(droce) + " decode --quiet " + path.string() + " > /dev/null";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  std::filesystem::remove(path);
  std::printf("wire check: %zu frames of %zu kinds compared with rxe's %zu kinds\n", frames.size(), seen.size(),
              rxe.size());
}

}  // namespace
}  // namespace droce::test
