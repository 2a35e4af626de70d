// The port seam: the offload table is picked from what the port enabled, and
// the engine trusts the NIC's per-packet IPv4 verdict only when the table
// says the NIC checks it.

#include <gtest/gtest.h>
#include <rte_mbuf.h>
#include <unistd.h>

#include <string>

#include "core/endian.h"
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

EngineConfig engine_config(rte_mempool* pool, PacketPort* port, const OffloadOps& ops) {
  EngineConfig cfg;
  cfg.pool = pool;
  cfg.port = port;
  cfg.offloads = ops;
  return cfg;
}

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

// A valid frame for a QP no engine here has: what the parser decides shows in
// the engine's counters (unknown QP = accepted by the parser).
rte_mbuf* unknown_qp_frame(rte_mempool* pool) {
  PacketHeaders h;
  h.l3.src = ipv4_mapped(0x0a000001);
  h.l3.dst = ipv4_mapped(0x0a000002);
  h.bth.opcode = 0x04;
  h.bth.dest_qp = 0x999;
  rte_mbuf* m = rte_pktmbuf_alloc(pool);
  EXPECT_EQ(build_mbuf(h, std::vector<uint8_t>(8, 1), m), 0);
  return m;
}

// The same with a wrong IPv4 header checksum, and the NIC's verdict in rx_flags.
rte_mbuf* bad_checksum_frame(rte_mempool* pool, uint64_t rx_flags) {
  rte_mbuf* m = unknown_qp_frame(pool);
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
    OffloadOps ops;
    ops.rx_ipv4_checksum = nic_checks;
    Engine e(engine_config(pool, &port, ops));
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

// The one frame an engine with `ops` sends for a 16-byte inline SEND on an RC QP in RTS.
rte_mbuf* send_one_frame(rte_mempool* pool, const OffloadOps& ops) {
  CapturePort port;
  Engine e(engine_config(pool, &port, ops));
  uint32_t pd = 0, qpn = 0;
  Cq* cq = nullptr;
  EXPECT_EQ(e.alloc_pd(&pd), 0);
  EXPECT_EQ(e.create_cq(16, &cq), 0);
  QpInit init;
  init.pd = pd;
  init.send_cq = init.recv_cq = cq;
  init.cap = {4, 4, 1, 1, 64};
  EXPECT_EQ(e.create_qp(init, &qpn), 0);
  QpAttr a;
  a.qp_state = QpState::init;
  a.port_num = 1;
  EXPECT_EQ(e.modify_qp(qpn, a, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags), 0);
  a = QpAttr{};
  a.qp_state = QpState::rtr;
  a.dest_qp_num = 0x99;
  a.ah_attr.dgid = ipv4_mapped(0x0a000002);
  EXPECT_EQ(e.modify_qp(qpn, a, kAttrState | kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn |
                                    kAttrMaxDestRdAtomic | kAttrMinRnrTimer),
            0);
  a = QpAttr{};
  a.qp_state = QpState::rts;
  a.timeout = 14;
  EXPECT_EQ(e.modify_qp(qpn, a, kAttrState | kAttrSqPsn | kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry |
                                    kAttrMaxQpRdAtomic),
            0);
  std::vector<uint8_t> data(16, 7);
  SendWr w;
  w.opcode = WrOpcode::send;
  w.send_flags = kSendInline;
  w.num_sge = 1;
  w.sg_list[0] = {reinterpret_cast<uint64_t>(data.data()), 16, 0};
  EXPECT_EQ(e.post_send(qpn, w), 0);
  e.poll(0);
  EXPECT_EQ(port.frames.size(), 1u);
  if (port.frames.empty()) return nullptr;
  for (size_t i = 1; i < port.frames.size(); ++i) rte_pktmbuf_free(port.frames[i]);
  return port.frames[0];
}

TEST(EngineOffloads, TxIpv4ChecksumOffloadMarksFramesOnlyWhenTheNicDoesIt) {
  rte_mempool* pool = net::create_mbuf_pool("offl_tx_pool", 256, 2048);
  ASSERT_NE(pool, nullptr);
  for (bool nic_fills : {false, true}) {
    SCOPED_TRACE(nic_fills ? "NIC fills IPv4 checksums" : "software");
    OffloadOps ops;
    ops.tx_ipv4_checksum = nic_fills;
    rte_mbuf* m = send_one_frame(pool, ops);
    ASSERT_NE(m, nullptr);
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
    rte_pktmbuf_free(m);
  }
  EXPECT_EQ(rte_mempool_in_use_count(pool), 0u);
  rte_mempool_free(pool);
}

// droce_shm's icrc=skip: the table says the link carries no ICRC, so the engine leaves the field
// zero on the frames it sends and takes received frames without checking it; the software table
// computes and checks it.
TEST(EngineOffloads, IcrcIsLeftOutAndUncheckedOnlyWhenTheTableSaysSo) {
  rte_mempool* pool = net::create_mbuf_pool("offl_icrc_pool", 256, 2048);
  ASSERT_NE(pool, nullptr);
  for (bool link_carries_none : {false, true}) {
    SCOPED_TRACE(link_carries_none ? "no ICRC on the link" : "software ICRC");
    OffloadOps ops;
    ops.tx_icrc = ops.rx_icrc = link_carries_none;
    rte_mbuf* m = send_one_frame(pool, ops);
    ASSERT_NE(m, nullptr);
    const uint32_t icrc = core::load_le32(rte_pktmbuf_mtod_offset(m, uint8_t*, m->pkt_len - kIcrcLen));
    ParsedPacket p;
    if (link_carries_none) {
      // Expect: the field is zero, which a checking receiver rejects.
      EXPECT_EQ(icrc, 0u);
      EXPECT_EQ(parse_frame(m, &p), ParseStatus::bad_icrc);
    } else {
      EXPECT_EQ(parse_frame(m, &p), ParseStatus::ok);
    }
    rte_pktmbuf_free(m);

    // RX: a frame whose ICRC is wrong, for a QP this engine does not have.
    NullPort sink;
    Engine e(engine_config(pool, &sink, ops));
    rte_mbuf* in = unknown_qp_frame(pool);
    rte_pktmbuf_mtod_offset(in, uint8_t*, in->pkt_len - 1)[0] ^= 0xff;  // the ICRC
    e.rx_burst(&in, 1, 0);
    // Expect: taken past the parser (then refused as an unknown QP) only when nothing checks it.
    EXPECT_EQ(e.counters().parse[ParseStatus::bad_icrc], link_carries_none ? 0u : 1u);
    EXPECT_EQ(e.counters().rx_unknown_qp, link_carries_none ? 1u : 0u);
  }
  EXPECT_EQ(rte_mempool_in_use_count(pool), 0u);
  rte_mempool_free(pool);
}

TEST(SelectOffloads, DroceShmCarriesNoIcrcUnlessToldTo) {
  net::PortConfig cfg;
  for (const char* icrc : {"", ",icrc=skip", ",icrc=compute"}) {
    SCOPED_TRACE(icrc);
    const std::string sock = "/tmp/droce-offload-test-" + std::to_string(getpid()) + ".sock";
    std::unique_ptr<net::Port> p;
    ASSERT_EQ(net::Port::open_device("droce_shm7,role=server,socket=" + sock + icrc, cfg, &p), 0);
    const OffloadOps ops = select_offloads(*p);
    const bool none = std::string(icrc) != ",icrc=compute";
    EXPECT_EQ(ops.tx_icrc, none);
    EXPECT_EQ(ops.rx_icrc, none);
    EXPECT_EQ(std::string(ops.name).find("icrc") != std::string::npos, none) << ops.name;
  }
  std::unique_ptr<net::Port> bad;
  EXPECT_EQ(net::Port::open_device("droce_shm7,role=server,socket=/tmp/droce-offload-x.sock,icrc=maybe", cfg, &bad),
            -EINVAL);
}

}  // namespace
}  // namespace droce::hw_offload
