// Testing ladder, level 4: two engines on real DPDK ports in one process
// (net_ring wired back to back, net_memif server and client, and droce_shm), real
// time, real mbufs through the PMDs: RC SEND, WRITE, READ and atomics, and
// UD, with data compared byte for byte.

#include <gtest/gtest.h>

#include <rte_ip.h>

#include <cstring>
#include <random>

#include "core/clock.h"
#include "net/port.h"
#include "net/shm_link.h"
#include "rocev2/port_link.h"
#include "tests/test_support.h"

namespace droce::test {
namespace {

using namespace droce::rocev2;

struct Side {
  std::unique_ptr<net::Port> port;
  std::unique_ptr<PortQueueLink> link;
  std::unique_ptr<Engine> engine;
  IpAddr ip{};
  uint32_t pd = 0, qpn = 0, ud_qpn = 0;
  Cq* scq = nullptr;
  Cq* rcq = nullptr;
  std::vector<uint8_t> buf;
  Mr* mr = nullptr;
};

class EnginePort : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const std::string kind = GetParam();
    net::PortConfig cfg;
    cfg.mbuf_data_room = 4096 + 256;
    cfg.mtu = 4200;
    if (kind == "ring") {
      ASSERT_EQ(net::Port::open_ring_pair("eng" + std::to_string(counter_++), cfg, &s_[0].port, &s_[1].port), 0);
    } else if (kind == "shm") {
      sock_ = "/tmp/droce-engine-port-" + std::to_string(getpid()) + "-" + std::to_string(counter_++) + ".sock";
      const std::string n = std::to_string(counter_);
      ASSERT_EQ(net::Port::open_device("droce_shm_es" + n + ",role=server,socket=" + sock_, cfg, &s_[0].port), 0);
      ASSERT_EQ(net::Port::open_device("droce_shm_ec" + n + ",role=client,socket=" + sock_, cfg, &s_[1].port), 0);
    } else {
      sock_ = "/tmp/droce-engine-port-" + std::to_string(getpid()) + "-" + std::to_string(counter_++) + ".sock";
      const std::string common = ",socket=" + sock_ + ",socket-abstract=no,id=0";
      const std::string n = std::to_string(counter_);
      ASSERT_EQ(net::Port::open_device("net_memif_es" + n + ",role=server" + common, cfg, &s_[0].port), 0);
      ASSERT_EQ(net::Port::open_device("net_memif_ec" + n + ",role=client" + common, cfg, &s_[1].port), 0);
    }
    for (int i = 0; i < 2; ++i) {
      Side& s = s_[i];
      s.ip = ipv4_mapped(0xc0a86401 + uint32_t(i));  // never leaves the process
      s.link = std::make_unique<PortQueueLink>(s.port.get(), 0);
      EngineConfig ec;
      ec.pool = s.port->pool();
      ec.port = s.link.get();
      ec.local_mac = s.port->mac();
      ec.local_ip = s.ip;
      s.engine = std::make_unique<Engine>(ec);
      ASSERT_EQ(s.engine->alloc_pd(&s.pd), 0);
      ASSERT_EQ(s.engine->create_cq(1024, &s.scq), 0);
      ASSERT_EQ(s.engine->create_cq(1024, &s.rcq), 0);
      s.buf.resize(1 << 20);
      ASSERT_EQ(s.engine->reg_mr(s.pd, reinterpret_cast<uint64_t>(s.buf.data()), s.buf.size(), s.buf.data(),
                                 kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic,
                                 &s.mr),
                0);
    }
    // memif links come up once both sides have polled.
    const uint64_t deadline = core::monotonic_ns() + 5'000'000'000ull;
    while (!(s_[0].port->link().up && s_[1].port->link().up) && core::monotonic_ns() < deadline) step();
    ASSERT_TRUE(s_[0].port->link().up && s_[1].port->link().up) << "link did not come up";
  }
  void TearDown() override {
    for (auto& s : s_) s.engine.reset();
    for (auto& s : s_) s.port.reset();
    if (!sock_.empty()) std::filesystem::remove(sock_);
  }

  AddressVector av_to(int to) {
    AddressVector av;
    av.dgid = s_[to].ip;
    av.sgid = s_[1 - to].ip;
    av.dmac = s_[to].port->mac();
    av.smac = s_[1 - to].port->mac();
    return av;
  }

  void connect(QpType type, uint32_t* qpn0, uint32_t* qpn1, PathMtu mtu) {
    uint32_t* q[2] = {qpn0, qpn1};
    for (int i = 0; i < 2; ++i) {
      QpInit init;
      init.type = type;
      init.pd = s_[i].pd;
      init.send_cq = s_[i].scq;
      init.recv_cq = s_[i].rcq;
      init.cap = {256, 256, 2, 2, 64};
      init.sq_sig_all = true;
      ASSERT_EQ(s_[i].engine->create_qp(init, q[i]), 0);
    }
    for (int i = 0; i < 2; ++i) {
      Engine& e = *s_[i].engine;
      QpAttr a;
      a.qp_state = QpState::init;
      a.port_num = 1;
      a.qp_access_flags = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
      a.qkey = 0x11111111;
      ASSERT_EQ(e.modify_qp(*q[i], a,
                            kAttrState | kAttrPkeyIndex | kAttrPort | (type == QpType::ud ? kAttrQkey : kAttrAccessFlags)),
                0);
      a = QpAttr{};
      a.qp_state = QpState::rtr;
      a.path_mtu = mtu;
      a.dest_qp_num = *q[1 - i];
      a.max_dest_rd_atomic = 4;
      a.ah_attr = av_to(1 - i);
      ASSERT_EQ(e.modify_qp(*q[i], a,
                            type == QpType::ud ? kAttrState
                                               : kAttrState | kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn |
                                                     kAttrMaxDestRdAtomic | kAttrMinRnrTimer),
                0);
      a = QpAttr{};
      a.qp_state = QpState::rts;
      a.timeout = 14;
      a.retry_cnt = 7;
      a.rnr_retry = 7;
      a.max_rd_atomic = 4;
      ASSERT_EQ(e.modify_qp(*q[i], a,
                            type == QpType::ud ? kAttrState | kAttrSqPsn
                                               : kAttrState | kAttrSqPsn | kAttrTimeout | kAttrRetryCnt |
                                                     kAttrRnrRetry | kAttrMaxQpRdAtomic),
                0);
    }
  }

  // One loop of each side's lcore: RX burst in, engine poll (timers, TX).
  void step() {
    const uint64_t now = core::monotonic_ns();
    for (auto& s : s_) {
      rte_mbuf* rx[32];
      const uint16_t n = s.port->rx_burst(0, rx, 32);
      if (s.engine) {
        s.engine->rx_burst(rx, n, now);
        s.engine->poll(now);
      } else {
        rte_pktmbuf_free_bulk(rx, n);
      }
    }
  }

  bool wait(Cq* cq, std::vector<Completion>* out, size_t n) {
    const uint64_t deadline = core::monotonic_ns() + 10'000'000'000ull;
    while (out->size() < n && core::monotonic_ns() < deadline) {
      step();
      Completion c[16];
      const uint32_t k = cq->poll(c, 16);
      out->insert(out->end(), c, c + k);
    }
    return out->size() >= n;
  }

  Side s_[2];
  std::string sock_;
  static inline int counter_ = 0;
};

TEST_P(EnginePort, RcOperationsMoveRealFramesThroughThePmd) {
  uint32_t a = 0, b = 0;
  connect(QpType::rc, &a, &b, PathMtu::mtu4096);
  std::mt19937 rng(1);
  for (size_t i = 0; i < 300000; ++i) s_[0].buf[i] = uint8_t(rng());
  auto sge = [](Side& s, uint32_t off, uint32_t len) {
    return Sge{reinterpret_cast<uint64_t>(s.buf.data()) + off, len, s.mr->lkey};
  };
  RecvWr r;
  r.num_sge = 1;
  r.sg_list[0] = sge(s_[1], 0, 100000);
  ASSERT_EQ(s_[1].engine->post_recv(b, r), 0);
  SendWr w;
  w.num_sge = 1;
  w.opcode = WrOpcode::send;
  w.sg_list[0] = sge(s_[0], 0, 100000);
  ASSERT_EQ(s_[0].engine->post_send(a, w), 0);
  w.opcode = WrOpcode::rdma_write;
  w.sg_list[0] = sge(s_[0], 100000, 100000);
  w.remote_addr = reinterpret_cast<uint64_t>(s_[1].buf.data()) + 200000;
  w.rkey = s_[1].mr->rkey;
  ASSERT_EQ(s_[0].engine->post_send(a, w), 0);
  w.opcode = WrOpcode::rdma_read;
  w.sg_list[0] = sge(s_[0], 400000, 100000);
  w.remote_addr = reinterpret_cast<uint64_t>(s_[1].buf.data()) + 200000;  // what the WRITE put there
  ASSERT_EQ(s_[0].engine->post_send(a, w), 0);
  w.opcode = WrOpcode::atomic_fetch_and_add;
  w.sg_list[0] = sge(s_[0], 600000, 8);
  w.remote_addr = reinterpret_cast<uint64_t>(s_[1].buf.data()) + 800000;
  w.compare_add = 5;
  ASSERT_EQ(s_[0].engine->post_send(a, w), 0);
  std::vector<Completion> sc, rc;
  ASSERT_TRUE(wait(s_[0].scq, &sc, 4)) << sc.size() << " of 4";
  ASSERT_TRUE(wait(s_[1].rcq, &rc, 1));
  for (const auto& c : sc) EXPECT_EQ(c.status, WcStatus::success) << to_string(c.status);
  EXPECT_EQ(rc[0].byte_len, 100000u);
  EXPECT_EQ(std::memcmp(s_[1].buf.data(), s_[0].buf.data(), 100000), 0);
  EXPECT_EQ(std::memcmp(s_[1].buf.data() + 200000, s_[0].buf.data() + 100000, 100000), 0);
  EXPECT_EQ(std::memcmp(s_[0].buf.data() + 400000, s_[0].buf.data() + 100000, 100000), 0);
  uint64_t v;
  std::memcpy(&v, s_[1].buf.data() + 800000, 8);
  EXPECT_EQ(v, 5u);
  // Every frame crossed the PMD intact: no parse drops on either side.
  for (auto& s : s_) {
    EXPECT_EQ(s.engine->counters().parse[ParseStatus::ok], s.engine->counters().rx_frames);
    EXPECT_EQ(s.engine->counters().rx_unknown_qp, 0u);
  }
  if (std::string(GetParam()) == "shm") {
    // droce_shm: the engines built the long frames in their ring slots (PacketPort::alloc_frame)
    // and the short ones (acknowledgements, the READ request, the atomic) in pool mbufs, copied.
    uint64_t in_place[2] = {}, sent[2] = {};
    for (int i = 0; i < 2; ++i) {
      ASSERT_EQ(s_[i].port->xstat("tx_in_place", &in_place[i]), 0);
      ASSERT_EQ(s_[i].port->xstat("tx_good_packets", &sent[i]), 0);
      EXPECT_LT(in_place[i], sent[i]) << "side " << i << ": short frames are copied";
    }
    EXPECT_GT(in_place[0], 0u) << "the SEND's and WRITE's frames are built in place";
    EXPECT_GT(in_place[1], 0u) << "the READ's responses are built in place";
  }
}

TEST_P(EnginePort, UdDatagramsAcrossThePmd) {
  uint32_t a = 0, b = 0;
  connect(QpType::ud, &a, &b, PathMtu::mtu1024);
  uint32_t ah = 0;
  ASSERT_EQ(s_[0].engine->create_ah(s_[0].pd, av_to(1), &ah), 0);
  for (int i = 0; i < 10; ++i) {
    RecvWr r;
    r.wr_id = uint64_t(i);
    r.num_sge = 1;
    r.sg_list[0] = {reinterpret_cast<uint64_t>(s_[1].buf.data()) + uint64_t(i) * 2048, 2048, s_[1].mr->lkey};
    ASSERT_EQ(s_[1].engine->post_recv(b, r), 0);
  }
  for (int i = 0; i < 10; ++i) {
    SendWr w;
    w.wr_id = uint64_t(i);
    w.opcode = WrOpcode::send_with_imm;
    w.imm_data = uint32_t(i);
    w.num_sge = 1;
    w.sg_list[0] = {reinterpret_cast<uint64_t>(s_[0].buf.data()), 1000, s_[0].mr->lkey};
    w.ah = ah;
    w.remote_qpn = b;
    w.remote_qkey = 0x11111111;
    ASSERT_EQ(s_[0].engine->post_send(a, w), 0);
  }
  std::vector<Completion> rc;
  ASSERT_TRUE(wait(s_[1].rcq, &rc, 10));
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(rc[size_t(i)].imm_data, uint32_t(i));
    EXPECT_EQ(rc[size_t(i)].byte_len, 1040u);
    EXPECT_EQ(rc[size_t(i)].src_qp, a);
  }
}

// A frame to the port's own MAC is looped back, not sent; one that left its IPv4 checksum to the
// NIC (TX offload flags) comes back with the checksum written and no TX flags, as a NIC's receive
// path would hand it over. A frame to another MAC goes to the port.
TEST(PortQueueLinkLoopback, WritesTheChecksumTheNicWouldHaveAndSendsTheRest) {
  net::PortConfig cfg;
  std::unique_ptr<net::Port> a, b;
  ASSERT_EQ(net::Port::open_ring_pair("loopck", cfg, &a, &b), 0);
  PortQueueLink link(a.get(), 0);
  link.set_loopback_mac(a->mac());
  auto frame = [&](const net::MacAddr& dst) {
    rte_mbuf* m = rte_pktmbuf_alloc(a->pool());
    auto* p = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, 14 + 20 + 8));
    std::memset(p, 0, 14 + 20 + 8);
    std::memcpy(p, dst.data(), 6);
    std::memcpy(p + 6, a->mac().data(), 6);
    p[12] = 0x08;
    auto* ip = reinterpret_cast<rte_ipv4_hdr*>(p + 14);
    ip->version_ihl = 0x45;
    ip->total_length = rte_cpu_to_be_16(28);
    ip->time_to_live = 64;
    ip->next_proto_id = 17;
    ip->src_addr = rte_cpu_to_be_32(0xc0a86401);
    ip->dst_addr = rte_cpu_to_be_32(0xc0a86401);
    m->ol_flags = RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM;
    m->l2_len = 14;
    m->l3_len = 20;
    return m;
  };
  const net::MacAddr other = {0x02, 0xd0, 0xce, 0x00, 0x00, 0x99};
  ASSERT_NE(other, a->mac());
  rte_mbuf* frames[2] = {frame(a->mac()), frame(other)};
  ASSERT_EQ(link.tx_burst(frames, 2), 2);
  std::vector<rte_mbuf*> looped;
  link.take_loopback(&looped);
  ASSERT_EQ(looped.size(), 1u);
  EXPECT_EQ(looped[0], frames[0]);
  EXPECT_EQ(looped[0]->ol_flags, 0u);
  auto* ip = rte_pktmbuf_mtod_offset(looped[0], rte_ipv4_hdr*, 14);
  EXPECT_NE(ip->hdr_checksum, 0);
  // Summed with its checksum in, a valid header sums to all ones: 0 once complemented.
  EXPECT_EQ(rte_ipv4_cksum(ip), 0) << "the IPv4 checksum is wrong";
  rte_pktmbuf_free(looped[0]);
  rte_mbuf* got[4];
  ASSERT_EQ(b->rx_burst(0, got, 4), 1) << "the frame for another MAC went to the wire";
  rte_pktmbuf_free(got[0]);
}

// Which frames the engine builds in place on droce_shm: those for the wire when the queue is this
// link's alone. A frame to our own MAC stays in the loopback queue (it would hold its ring slot,
// and every frame after it, until the engine takes it back); lcores sharing the queue would take
// slots out of order. On a port that copies (net_ring), none.
TEST(PortQueueLinkInPlace, OnlyWireFramesOfAQueueOfItsOwn) {
  net::PortConfig cfg;
  const std::string sock = "/tmp/droce-engine-port-inplace-" + std::to_string(getpid()) + ".sock";
  std::unique_ptr<net::Port> a, b;
  ASSERT_EQ(net::Port::open_device("droce_shm_ia,role=server,socket=" + sock, cfg, &a), 0);
  ASSERT_EQ(net::Port::open_device("droce_shm_ib,role=client,socket=" + sock, cfg, &b), 0);
  const uint64_t deadline = core::monotonic_ns() + 5'000'000'000ull;
  while (!(a->link().up && b->link().up) && core::monotonic_ns() < deadline) usleep(1000);
  ASSERT_TRUE(a->link().up && b->link().up);
  PortQueueLink link(a.get(), 0);
  link.set_loopback_mac(a->mac());
  bool none_now = true;
  rte_mbuf* m = link.alloc_frame(b->mac(), net::ShmLink::kMaxFrame, &none_now);
  ASSERT_NE(m, nullptr) << "a frame for the wire is built in its slot";
  EXPECT_TRUE(RTE_MBUF_HAS_EXTBUF(m));
  rte_pktmbuf_free(m);
  EXPECT_EQ(link.alloc_frame(b->mac(), net::ShmLink::kCopyMax, &none_now), nullptr);
  EXPECT_FALSE(none_now) << "a short frame is built in a pool mbuf (copied when sent)";
  EXPECT_EQ(link.alloc_frame(a->mac(), net::ShmLink::kMaxFrame, &none_now), nullptr);
  EXPECT_FALSE(none_now) << "a frame to ourselves is built in a pool mbuf";
  rte_spinlock_t lock;
  rte_spinlock_init(&lock);
  link.set_tx_lock(&lock);
  EXPECT_EQ(link.alloc_frame(b->mac(), net::ShmLink::kMaxFrame, &none_now), nullptr);
  EXPECT_FALSE(none_now);
  std::unique_ptr<net::Port> ra, rb;
  ASSERT_EQ(net::Port::open_ring_pair("inplace", cfg, &ra, &rb), 0);
  PortQueueLink ring_link(ra.get(), 0);
  EXPECT_EQ(ring_link.alloc_frame(rb->mac(), net::ShmLink::kMaxFrame, &none_now), nullptr);
  EXPECT_FALSE(none_now);
}

INSTANTIATE_TEST_SUITE_P(Pmds, EnginePort, ::testing::Values("ring", "memif", "shm"),
                         [](const auto& param_info) { return std::string(param_info.param); });

}  // namespace
}  // namespace droce::test
