// The port seam: the offload table is picked from what the port enabled, and
// the engine trusts the NIC's per-packet IPv4 verdict only when the table
// says the NIC checks it.

#include <gtest/gtest.h>
#include <rte_mbuf.h>

#include "hw_offload/select.h"
#include "net/eal.h"
#include "rocev2/builder.h"
#include "rocev2/engine.h"
#include "tests/test_support.h"

namespace droce::hw_offload {
namespace {

using namespace droce::rocev2;

class NullPort : public PacketPort {
 public:
  uint16_t tx_burst(rte_mbuf** f, uint16_t n) override {
    rte_pktmbuf_free_bulk(f, n);
    return n;
  }
};

TEST(SelectOffloads, APortWithoutOffloadsGetsTheSoftwareTable) {
  net::PortConfig cfg;
  std::unique_ptr<net::Port> a, b;
  ASSERT_EQ(net::Port::open_ring_pair("offl", cfg, &a, &b), 0);
  const OffloadOps ops = select_offloads(*a);
  EXPECT_STREQ(ops.name, "software");
  EXPECT_FALSE(ops.rx_ipv4_checksum);
  EXPECT_FALSE(ops.tx_ipv4_checksum);
  EXPECT_FALSE(ops.rx_icrc);
  EXPECT_EQ(ops.steer_qpn, nullptr);
}

// A frame for an unknown QP with a wrong IPv4 header checksum: what the
// parser decides shows in the engine's counters (unknown QP = accepted).
rte_mbuf* bad_checksum_frame(rte_mempool* pool, uint64_t rx_flags) {
  PacketHeaders h;
  h.l3.src = ipv4_mapped(0x0a000001);
  h.l3.dst = ipv4_mapped(0x0a000002);
  h.bth.opcode = 0x04;
  h.bth.dest_qp = 0x999;
  rte_mbuf* m = rte_pktmbuf_alloc(pool);
  EXPECT_EQ(build_mbuf(h, std::vector<uint8_t>(8, 1), m), 0);
  rte_pktmbuf_mtod(m, uint8_t*)[14 + 10] ^= 0xff;  // the IPv4 header checksum
  m->ol_flags = rx_flags;
  return m;
}

TEST(EngineOffloads, NicIpv4VerdictIsTrustedOnlyWhenTheTableSaysSo) {
  rte_mempool* pool = net::create_mbuf_pool("offl_pool", 256, 2048);
  ASSERT_NE(pool, nullptr);
  NullPort port;
  for (bool nic_checks : {false, true}) {
    SCOPED_TRACE(nic_checks ? "NIC checks IPv4" : "software checks IPv4");
    EngineConfig cfg;
    cfg.pool = pool;
    cfg.port = &port;
    cfg.offloads.rx_ipv4_checksum = nic_checks;
    Engine e(cfg);
    rte_mbuf* frames[3] = {bad_checksum_frame(pool, RTE_MBUF_F_RX_IP_CKSUM_GOOD),
                           bad_checksum_frame(pool, RTE_MBUF_F_RX_IP_CKSUM_BAD),
                           bad_checksum_frame(pool, RTE_MBUF_F_RX_IP_CKSUM_UNKNOWN)};
    e.rx_burst(frames, 3, 0);
    const auto& c = e.counters();
    if (nic_checks) {
      // Expect: GOOD is believed (the frame reaches QP lookup), BAD dropped,
      // UNKNOWN checked in software (and dropped: the checksum is wrong).
      EXPECT_EQ(c.rx_unknown_qp, 1u);
      EXPECT_EQ(c.parse[ParseStatus::bad_ipv4_checksum], 2u);
    } else {
      // Expect: the NIC's flags mean nothing; software finds all three wrong.
      EXPECT_EQ(c.rx_unknown_qp, 0u);
      EXPECT_EQ(c.parse[ParseStatus::bad_ipv4_checksum], 3u);
    }
  }
  EXPECT_EQ(rte_mempool_in_use_count(pool), 0u);
  rte_mempool_free(pool);
}

// Keeps the frames it is given, to inspect their TX flags.
class CapturePort : public PacketPort {
 public:
  std::vector<rte_mbuf*> frames;
  uint16_t tx_burst(rte_mbuf** f, uint16_t n) override {
    frames.insert(frames.end(), f, f + n);
    return n;
  }
};

TEST(EngineOffloads, TxIpv4ChecksumOffloadMarksFramesOnlyWhenTheNicDoesIt) {
  rte_mempool* pool = net::create_mbuf_pool("offl_tx_pool", 256, 2048);
  ASSERT_NE(pool, nullptr);
  for (bool nic_fills : {false, true}) {
    SCOPED_TRACE(nic_fills ? "NIC fills IPv4 checksums" : "software");
    CapturePort port;
    EngineConfig cfg;
    cfg.pool = pool;
    cfg.port = &port;
    cfg.offloads.tx_ipv4_checksum = nic_fills;
    {
      Engine e(cfg);
      uint32_t pd = 0, qpn = 0;
      Cq* cq = nullptr;
      ASSERT_EQ(e.alloc_pd(&pd), 0);
      ASSERT_EQ(e.create_cq(16, &cq), 0);
      QpInit init;
      init.pd = pd;
      init.send_cq = init.recv_cq = cq;
      init.cap = {4, 4, 1, 1, 64};
      ASSERT_EQ(e.create_qp(init, &qpn), 0);
      QpAttr a;
      a.qp_state = QpState::init;
      a.port_num = 1;
      ASSERT_EQ(e.modify_qp(qpn, a, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags), 0);
      a = QpAttr{};
      a.qp_state = QpState::rtr;
      a.dest_qp_num = 0x99;
      a.ah_attr.dgid = ipv4_mapped(0x0a000002);
      ASSERT_EQ(e.modify_qp(qpn, a, kAttrState | kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn |
                                        kAttrMaxDestRdAtomic | kAttrMinRnrTimer),
                0);
      a = QpAttr{};
      a.qp_state = QpState::rts;
      a.timeout = 14;
      ASSERT_EQ(e.modify_qp(qpn, a, kAttrState | kAttrSqPsn | kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry |
                                        kAttrMaxQpRdAtomic),
                0);
      std::vector<uint8_t> data(16, 7);
      SendWr w;
      w.opcode = WrOpcode::send;
      w.send_flags = kSendInline;
      w.num_sge = 1;
      w.sg_list[0] = {reinterpret_cast<uint64_t>(data.data()), 16, 0};
      ASSERT_EQ(e.post_send(qpn, w), 0);
      e.poll(0);
      ASSERT_EQ(port.frames.size(), 1u);
      rte_mbuf* m = port.frames[0];
      const uint64_t want = RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM;
      // Expect: flags (and the header lengths a NIC needs) only when the NIC fills it.
      EXPECT_EQ((m->ol_flags & want) == want, nic_fills);
      if (nic_fills) {
        EXPECT_EQ(m->l2_len, 14u);
        EXPECT_EQ(m->l3_len, 20u);
      }
      // The engine still wrote a correct checksum (the frame parses with the check on).
      ParsedPacket p;
      EXPECT_EQ(parse_frame(m, &p), ParseStatus::ok);
      rte_pktmbuf_free_bulk(port.frames.data(), unsigned(port.frames.size()));
    }
  }
  EXPECT_EQ(rte_mempool_in_use_count(pool), 0u);
  rte_mempool_free(pool);
}

}  // namespace
}  // namespace droce::hw_offload
