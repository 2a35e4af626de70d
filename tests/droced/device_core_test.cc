// droced's device core on real PMDs (net_memif, one process): QPs connected
// knowing only the peer's IP address get its MAC from real ARP / neighbour
// discovery frames, then carry traffic; a peer that never answers fails the
// resolution after the configured retries instead of hanging.

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <mutex>

#include "droced/device_core.h"
#include "core/clock.h"
#include "tests/test_support.h"

namespace droce::droced {
namespace {

using namespace droce::rocev2;

// One memif pair for the whole suite: DPDK 22.11's memif occasionally crashes
// its interrupt thread when devices are torn down and set up again in one
// process (seen 2 in 20 runs with a pair per test). Each test gets fresh
// device cores (engine and neighbour table) on the same ports.
class DeviceCoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    sock_ = "/tmp/droce-devcore-" + std::to_string(getpid()) + ".sock";
    const std::string common = ",socket=" + sock_ + ",socket-abstract=no,id=0";
    net::PortConfig pc;
    pc.mbuf_data_room = 4096 + 256;
    if (net::Port::open_device("net_memif_ds,role=server" + common, pc, &port_[0]) != 0 ||
        net::Port::open_device("net_memif_dc,role=client" + common, pc, &port_[1]) != 0) {
      port_[0].reset();
      port_[1].reset();
    }
  }
  static void TearDownTestSuite() {
    port_[1].reset();  // the client first, then let the server see it go
    const uint64_t end = core::monotonic_ns() + 50'000'000;
    while (core::monotonic_ns() < end) {
      rte_mbuf* rx[8];
      if (port_[0]) rte_pktmbuf_free_bulk(rx, port_[0]->rx_burst(0, rx, 8));
    }
    port_[0].reset();
    std::filesystem::remove(sock_);
  }
  void SetUp() override {
    ASSERT_TRUE(port_[0] && port_[1]) << "cannot open the memif pair";
    for (int i = 0; i < 2; ++i) {
      DeviceCoreConfig c;
      c.port = port_[i].get();
      c.addresses = {ipv4_mapped(0xc0a86401 + uint32_t(i)),  // 192.168.100.1/2: never leave the process
                     {0xfd, 0xd0, 0xce, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, uint8_t(i + 1)}};
      c.neighbor.max_requests = 3;
      c.neighbor.request_interval_ns = 20'000'000;  // 20 ms
      int rc = 0;
      core_[i] = std::make_unique<DeviceCore>(c, &rc);
      ASSERT_EQ(rc, 0);
    }
    ASSERT_TRUE(run_until([&] { return port_[0]->link().up && port_[1]->link().up; })) << "memif link";
    // memif's server can send only once the client has polled: let both settle.
    const uint64_t settle = core::monotonic_ns() + 20'000'000;
    run_until([&] { return core::monotonic_ns() > settle; });
  }
  void TearDown() override {
    // Drain what is in flight so the next test starts clean, then drop the cores.
    const uint64_t end = core::monotonic_ns() + 10'000'000;
    run_until([&] { return core::monotonic_ns() > end; });
    for (auto& c : core_) c.reset();
    rte_mbuf* rx[32];
    for (auto& p : port_) rte_pktmbuf_free_bulk(rx, p->rx_burst(0, rx, 32));
  }
  template <class Pred>
  bool run_until(Pred done, uint64_t limit_ns = 5'000'000'000ull) {
    const uint64_t end = core::monotonic_ns() + limit_ns;
    while (!done()) {
      if (core::monotonic_ns() > end) return false;
      for (auto& c : core_)
        if (c) c->run_once(core::monotonic_ns());
    }
    return true;
  }
  net::ResolveStatus resolve(int from, AddressVector* av) {
    net::ResolveStatus st = net::ResolveStatus::pending;
    run_until([&] { return (st = core_[from]->resolve(av, core::monotonic_ns())) != net::ResolveStatus::pending; });
    return st;
  }

  static inline std::unique_ptr<net::Port> port_[2];
  static inline std::string sock_;
  std::unique_ptr<DeviceCore> core_[2];
};

TEST_F(DeviceCoreTest, ArpResolvesThePeerThenRcTrafficFlows) {
  // Expect: the AV's destination MAC comes from the peer's ARP reply.
  AddressVector av[2];
  for (int i = 0; i < 2; ++i) {
    av[i].dgid = ipv4_mapped(0xc0a86401 + uint32_t(1 - i));
    ASSERT_EQ(resolve(i, &av[i]), net::ResolveStatus::resolved);
    EXPECT_EQ(av[i].dmac, port_[1 - i]->mac());
    EXPECT_EQ(av[i].smac, port_[i]->mac());
  }
  EXPECT_GE(core_[0]->neighbors().counters().arp.replies_received, 1u);
  EXPECT_GE(core_[1]->neighbors().counters().arp.replies_sent, 1u);

  // A connected RC pair over the resolved path, and a SEND across it.
  uint32_t qpn[2];
  uint32_t pd[2];
  Cq* cq[2];
  std::vector<uint8_t> buf[2];
  Mr* mr[2];
  for (int i = 0; i < 2; ++i) {
    Engine& e = core_[i]->engine();
    ASSERT_EQ(e.alloc_pd(&pd[i]), 0);
    ASSERT_EQ(e.create_cq(64, &cq[i]), 0);
    QpInit init;
    init.pd = pd[i];
    init.send_cq = init.recv_cq = cq[i];
    init.cap = {16, 16, 1, 1, 0};
    init.sq_sig_all = true;
    ASSERT_EQ(e.create_qp(init, &qpn[i]), 0);
    buf[i].assign(20000, uint8_t(i + 1));
    ASSERT_EQ(e.reg_mr(pd[i], reinterpret_cast<uint64_t>(buf[i].data()), buf[i].size(), buf[i].data(),
                       kAccessLocalWrite, &mr[i]),
              0);
  }
  for (int i = 0; i < 2; ++i) {
    Engine& e = core_[i]->engine();
    QpAttr a;
    a.qp_state = QpState::init;
    a.port_num = 1;
    a.qp_access_flags = kAccessLocalWrite;
    ASSERT_EQ(e.modify_qp(qpn[i], a, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags), 0);
    a = QpAttr{};
    a.qp_state = QpState::rtr;
    a.path_mtu = PathMtu::mtu1024;  // memif reports a 1500-byte MTU
    a.dest_qp_num = qpn[1 - i];
    a.ah_attr = av[i];
    ASSERT_EQ(e.modify_qp(qpn[i], a, kAttrState | kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn |
                                         kAttrMaxDestRdAtomic | kAttrMinRnrTimer),
              0);
    a = QpAttr{};
    a.qp_state = QpState::rts;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    ASSERT_EQ(e.modify_qp(qpn[i], a, kAttrState | kAttrSqPsn | kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry |
                                         kAttrMaxQpRdAtomic),
              0);
  }
  RecvWr r;
  r.num_sge = 1;
  r.sg_list[0] = {reinterpret_cast<uint64_t>(buf[1].data()), 20000, mr[1]->lkey};
  ASSERT_EQ(core_[1]->engine().post_recv(qpn[1], r), 0);
  SendWr w;
  w.num_sge = 1;
  w.sg_list[0] = {reinterpret_cast<uint64_t>(buf[0].data()), 20000, mr[0]->lkey};
  ASSERT_EQ(core_[0]->engine().post_send(qpn[0], w), 0);
  std::vector<Completion> got;
  ASSERT_TRUE(run_until([&] {
    Completion c[4];
    for (int i = 0; i < 2; ++i) {
      const uint32_t k = cq[i]->poll(c, 4);
      got.insert(got.end(), c, c + k);
    }
    return got.size() >= 2;
  }));
  for (const auto& c : got) EXPECT_EQ(c.status, WcStatus::success);
  EXPECT_EQ(buf[1], buf[0]);
}

TEST_F(DeviceCoreTest, NeighbourDiscoveryResolvesAnIpv6Peer) {
  AddressVector av;
  av.dgid = {0xfd, 0xd0, 0xce, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
  av.sgid = {0xfd, 0xd0, 0xce, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  ASSERT_EQ(resolve(0, &av), net::ResolveStatus::resolved);
  EXPECT_EQ(av.dmac, port_[1]->mac());
  EXPECT_GE(core_[1]->neighbors().counters().nd.replies_sent, 1u);
}

TEST_F(DeviceCoreTest, AnUnansweredPeerFailsAfterTheRetriesInsteadOfHanging) {
  AddressVector av;
  av.dgid = ipv4_mapped(0xc0a86463);  // 192.168.100.99: nobody
  const uint64_t t0 = core::monotonic_ns();
  EXPECT_EQ(resolve(0, &av), net::ResolveStatus::failed);
  // Expect: exactly max_requests ARP requests went out (and reached the other
  // host), and the failure came after the last interval (3 x 20 ms), not at once.
  EXPECT_EQ(core_[0]->neighbors().counters().arp.requests_sent, 3u);
  run_until([&] { return core_[1]->neighbors().counters().arp.requests_received >= 3; }, 1'000'000'000);
  EXPECT_EQ(core_[1]->neighbors().counters().arp.requests_received, 3u);
  EXPECT_GE(core::monotonic_ns() - t0, 60'000'000u);
  EXPECT_EQ(core_[0]->neighbors().counters().resolutions_failed, 1u);
}

// What a port shows of our own sending (af_packet hands a socket its outgoing frames) is not
// taken as received: counted and dropped before the neighbour table or the engine sees it. IGMP
// goes to the membership reporter, which answers a general query for a group it has joined.
TEST_F(DeviceCoreTest, OwnFramesAreDroppedAndIgmpGoesToTheMembershipReporter) {
  const auto send_from_1 = [&](const std::vector<uint8_t>& bytes) {
    rte_mbuf* m = rte_pktmbuf_alloc(port_[1]->pool());
    ASSERT_NE(m, nullptr);
    std::memcpy(rte_pktmbuf_append(m, uint16_t(bytes.size())), bytes.data(), bytes.size());
    ASSERT_EQ(port_[1]->tx_burst(0, &m, 1), 1);
  };
  // An ARP request whose source MAC is host 0's own.
  std::vector<uint8_t> arp(60, 0);
  std::memset(arp.data(), 0xff, 6);
  std::memcpy(arp.data() + 6, port_[0]->mac().data(), 6);
  arp[12] = 0x08;
  arp[13] = 0x06;
  const uint64_t arp_before = core_[0]->counters().neighbor_frames_in;
  send_from_1(arp);
  ASSERT_TRUE(run_until([&] { return core_[0]->counters().rx_own_frames == 1; }));
  EXPECT_EQ(core_[0]->counters().neighbor_frames_in, arp_before);

  // An IGMPv2 general query (max 1 s) from another host, after host 0 joined 239.1.2.3.
  {
    std::lock_guard l(core_[0]->group().neighbor_mutex());
    core_[0]->group().membership().join(ipv4_mapped(0xc0a86401), ipv4_mapped(0xef010203), core::monotonic_ns());
  }
  const std::vector<uint8_t> query = {
      0x01, 0x00, 0x5e, 0x00, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x99, 0x08, 0x00, 0x46, 0x00,
      0x00, 0x20, 0x00, 0x01, 0x00, 0x00, 0x01, 0x02, 0x39, 0x8b, 0x0a, 0x4d, 0x00, 0xfe, 0xe0, 0x00,
      0x00, 0x01, 0x94, 0x04, 0x00, 0x00, 0x11, 0x0a, 0xee, 0xf5, 0x00, 0x00, 0x00, 0x00};  // scapy's
  send_from_1(query);
  ASSERT_TRUE(run_until([&] { return core_[0]->counters().membership_frames_in == 1; }));
  std::lock_guard l(core_[0]->group().neighbor_mutex());
  EXPECT_EQ(core_[0]->group().membership().counters().queries_seen, 1u);
  EXPECT_EQ(core_[0]->engine().counters().rx_frames, 0u) << "control frames reached the engine";
}

// PFC frames (net/pfc.h) go to the group's gate, never to the engine: one to this port's MAC
// pauses its priority and an XON ends that; one to another MAC, or MAC Control of another kind,
// or one cut short, is counted as bad and changes nothing.
TEST_F(DeviceCoreTest, PauseFramesForThisPortHoldItsPriorityAndOthersAreCountedBad) {
  const auto send_from_1 = [&](const std::vector<uint8_t>& bytes) {
    rte_mbuf* m = rte_pktmbuf_alloc(port_[1]->pool());
    ASSERT_NE(m, nullptr);
    std::memcpy(rte_pktmbuf_append(m, uint16_t(bytes.size())), bytes.data(), bytes.size());
    ASSERT_EQ(port_[1]->tx_burst(0, &m, 1), 1);
  };
  const auto pfc = [&](const net::MacAddr& dst, uint16_t quanta) {
    std::vector<uint8_t> f(net::kPauseFrameLen);
    net::build_pfc(f.data(), dst, port_[1]->mac(), 0x08, quanta);  // priority 3
    return f;
  };
  net::PauseGate& gate = core_[0]->group().pause_gate();
  ASSERT_FALSE(gate.engaged());
  // Bad: to another MAC; MAC Control of another kind (opcode 2, EPON's GATE); a PFC frame cut
  // at 20 bytes, before its quanta (memif delivers it as sent).
  send_from_1(pfc(net::MacAddr{2, 0, 0, 0, 0, 0x77}, 0xffff));
  std::vector<uint8_t> gate_frame = pfc(port_[0]->mac(), 0xffff);
  gate_frame[15] = 0x02;
  send_from_1(gate_frame);
  std::vector<uint8_t> short_pfc = pfc(port_[0]->mac(), 0xffff);
  short_pfc.resize(20);
  send_from_1(short_pfc);
  ASSERT_TRUE(run_until([&] { return core_[0]->counters().pause_frames_bad == 3; }));
  EXPECT_EQ(core_[0]->counters().pause_frames_in, 0u);
  EXPECT_FALSE(gate.engaged());
  // For this port: priority 3 paused (0xffff quanta), others not; then XON.
  send_from_1(pfc(port_[0]->mac(), 0xffff));
  ASSERT_TRUE(run_until([&] { return core_[0]->counters().pause_frames_in == 1; }));
  EXPECT_TRUE(gate.engaged());
  EXPECT_TRUE(gate.paused(3, core::monotonic_ns()));
  EXPECT_FALSE(gate.paused(0, core::monotonic_ns()));
  send_from_1(pfc(port_[0]->mac(), 0));
  ASSERT_TRUE(run_until([&] { return core_[0]->counters().pause_frames_in == 2; }));
  EXPECT_FALSE(gate.paused(3, core::monotonic_ns()));
  EXPECT_EQ(core_[0]->engine().counters().rx_frames, 0u) << "pause frames reached the engine";
}

}  // namespace
}  // namespace droce::droced
