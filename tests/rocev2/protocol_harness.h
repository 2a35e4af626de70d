#pragma once
// The harness for protocol tests (eRPC's style): one Engine whose port is a
// capture, and a remote peer that the test plays by hand. A test builds one
// crafted frame as the peer would send it, feeds it to the engine, polls, and
// then checks the frames the engine sent and what its CQs hold, step by step.
//
// Time is virtual: the engine sees only the now_ns the test passes, so a timer
// fires exactly when the test moves the clock past it.
//
// Memory regions are plain heap buffers whose virtual address is their pointer.
// Every frame the engine sends is parsed into a Sent and freed at once, so a
// test never holds mbufs; TearDown checks that the pool is back where it began.

#include <gtest/gtest.h>
#include <rte_mbuf.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "net/eal.h"
#include "net/frame_bytes.h"
#include "rocev2/builder.h"
#include "rocev2/engine.h"
#include "rocev2/parser.h"

namespace droce::rocev2 {
// Readable failure messages (GoogleTest finds these by argument-dependent lookup).
inline void PrintTo(QpState s, std::ostream* os) { *os << to_string(s); }
inline void PrintTo(WcStatus s, std::ostream* os) { *os << to_string(s); }
inline void PrintTo(WcOpcode o, std::ostream* os) { *os << static_cast<int>(o); }
}  // namespace droce::rocev2

namespace droce::test {

using namespace droce::rocev2;

/// A PacketPort that keeps every frame it is given (all of them: it never
/// refuses), for the test to take.
class CapturePort : public PacketPort {
 public:
  ~CapturePort() override { clear(); }
  uint16_t tx_burst(rte_mbuf** frames, uint16_t n) override {
    frames_.insert(frames_.end(), frames, frames + n);
    return n;
  }
  std::vector<rte_mbuf*> take() {
    std::vector<rte_mbuf*> out;
    out.swap(frames_);
    return out;
  }
  void clear() {
    for (rte_mbuf* m : frames_) rte_pktmbuf_free(m);
    frames_.clear();
  }

 private:
  std::vector<rte_mbuf*> frames_;
};

/// One frame the engine sent: its bytes, how it parsed, its payload.
struct Sent {
  std::vector<uint8_t> frame;
  ParseStatus status = ParseStatus::ok;
  ParsedPacket pkt;

  const Bth& bth() const { return pkt.hdr.bth; }
  const ExtHeaders& ext() const { return pkt.hdr.ext; }
  uint8_t opcode() const { return pkt.hdr.bth.opcode; }
  uint32_t psn() const { return pkt.hdr.bth.psn; }
  bool has(HeaderBit h) const { return pkt.info != nullptr && pkt.info->has(h); }
  std::vector<uint8_t> payload() const {
    const auto* p = frame.data() + pkt.layout.payload_off;
    return {p, p + pkt.layout.payload_len};
  }
};

/// How far and with what attributes a test QP is brought up.
struct QpOptions {
  QpType type = QpType::rc;
  QpState state = QpState::rts;  ///< stop at RESET, INIT, RTR or RTS
  uint32_t depth = 16;
  uint32_t max_sge = 4;
  PathMtu mtu = PathMtu::mtu1024;
  uint8_t timeout = 14;         ///< 67 ms
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;
  uint8_t min_rnr_timer = 12;   ///< 0.64 ms
  uint8_t max_rd_atomic = 4;
  uint8_t max_dest_rd_atomic = 4;
  uint32_t access = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
  uint32_t sq_psn = 0x1000;     ///< our requester's first PSN
  uint32_t rq_psn = 0x5000;     ///< the first PSN we expect from the peer
  uint32_t peer_qpn = 0x0abcde;
  uint32_t qkey = 0x11111111;
  bool sq_sig_all = true;
  uint32_t xrcd = 0;            ///< XRC receive QPs: their domain
};

class ProtocolTest : public ::testing::Test {
 protected:
  static constexpr MacAddr kLocalMac{0x02, 0xd0, 0xce, 0x00, 0x00, 0x01};
  static constexpr MacAddr kPeerMac{0x02, 0xd0, 0xce, 0x00, 0x00, 0x02};
  static IpAddr local_ip() { return ipv4_mapped(0xc0a86401); }  // 192.168.100.1
  static IpAddr peer_ip() { return ipv4_mapped(0xc0a86402); }
  static IpAddr local_ip6() { return {0xfd, 0xd0, 0xce, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}; }
  static IpAddr peer_ip6() { return {0xfd, 0xd0, 0xce, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}; }
  static constexpr uint16_t kPeerSport = 0xc123;

  static rte_mempool* pool() {
    static rte_mempool* const p = net::create_mbuf_pool("proto_pool", 4096, 4096 + 256);
    return p;
  }

  void SetUp() override {
    ASSERT_NE(pool(), nullptr);
    in_use_ = rte_mempool_in_use_count(pool());
    EngineConfig cfg;
    cfg.pool = pool();
    cfg.port = &port_;
    cfg.local_mac = kLocalMac;
    cfg.local_ip = local_ip();
    cfg.local_ips = {local_ip6()};
    engine_ = std::make_unique<Engine>(cfg);
    ASSERT_EQ(engine_->alloc_pd(&pd_), 0);
    ASSERT_EQ(engine_->create_cq(256, &scq_), 0);
    ASSERT_EQ(engine_->create_cq(256, &rcq_), 0);
  }

  void TearDown() override {
    engine_.reset();  // frees what it still holds
    port_.clear();
    // Expect: every mbuf built (by the test or by the engine) was freed.
    EXPECT_EQ(rte_mempool_in_use_count(pool()), in_use_);
  }

  Engine& engine() { return *engine_; }

  // ---- QPs ---------------------------------------------------------------------

  /// Creates a QP and brings it to o.state with the attribute sets EnginePair::connect uses.
  uint32_t make_qp(const QpOptions& o = {}) {
    opts_ = o;
    QpInit init;
    init.type = o.type;
    init.pd = o.type == QpType::xrc_recv ? 0 : pd_;
    init.xrcd = o.xrcd;
    init.send_cq = o.type == QpType::xrc_recv ? nullptr : scq_;
    init.recv_cq = is_xrc(o.type) ? nullptr : rcq_;
    init.cap = {o.depth, o.depth, o.max_sge, o.max_sge, 64};
    init.sq_sig_all = o.sq_sig_all;
    uint32_t qpn = 0;
    EXPECT_EQ(engine_->create_qp(init, &qpn), 0);
    qpn_ = qpn;
    if (o.state == QpState::reset) return qpn;
    QpAttr at;
    at.qp_state = QpState::init;
    at.pkey_index = 0;
    at.port_num = 1;
    at.qp_access_flags = o.access;
    at.qkey = o.qkey;
    EXPECT_EQ(engine_->modify_qp(qpn, at, kAttrState | kAttrPkeyIndex | kAttrPort |
                                              (o.type == QpType::ud ? kAttrQkey : kAttrAccessFlags)),
              0);
    if (o.state == QpState::init) return qpn;
    at = QpAttr{};
    at.qp_state = QpState::rtr;
    at.path_mtu = o.mtu;
    at.dest_qp_num = o.peer_qpn;
    at.rq_psn = o.rq_psn;
    at.max_dest_rd_atomic = o.max_dest_rd_atomic;
    at.min_rnr_timer = o.min_rnr_timer;
    at.ah_attr = peer_av();
    uint32_t mask = kAttrState;
    if (o.type == QpType::rc || o.type == QpType::xrc_recv)
      mask |= kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn | kAttrMaxDestRdAtomic | kAttrMinRnrTimer;
    if (o.type == QpType::uc || o.type == QpType::xrc_send) mask |= kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn;
    EXPECT_EQ(engine_->modify_qp(qpn, at, mask), 0);
    if (o.state == QpState::rtr) return qpn;
    at = QpAttr{};
    at.qp_state = QpState::rts;
    at.sq_psn = o.sq_psn;
    at.timeout = o.timeout;
    at.retry_cnt = o.retry_cnt;
    at.rnr_retry = o.rnr_retry;
    at.max_rd_atomic = o.max_rd_atomic;
    mask = kAttrState | kAttrSqPsn;
    if (o.type == QpType::rc || o.type == QpType::xrc_send)
      mask |= kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry | kAttrMaxQpRdAtomic;
    if (o.type == QpType::xrc_recv) mask |= kAttrTimeout;
    EXPECT_EQ(engine_->modify_qp(qpn, at, mask), 0);
    return qpn;
  }

  AddressVector peer_av() const {
    AddressVector av;
    av.dgid = peer_ip();
    av.sgid = local_ip();
    av.dmac = kPeerMac;
    av.smac = kLocalMac;
    return av;
  }

  QpState state(uint32_t qpn) {
    QpAttr a;
    QpState s = QpState::reset;
    EXPECT_EQ(engine_->query_qp(qpn, &a, &s), 0);
    return s;
  }
  /// The responder's expected PSN, as query_qp reports it.
  uint32_t epsn(uint32_t qpn) {
    QpAttr a;
    EXPECT_EQ(engine_->query_qp(qpn, &a, nullptr), 0);
    return a.rq_psn;
  }
  const QpCounters& qp_counters(uint32_t qpn) { return engine_->qp(qpn)->counters; }

  // ---- Memory ------------------------------------------------------------------

  struct Buf {
    std::vector<uint8_t> bytes;
    Mr* mr = nullptr;
    uint64_t va() const { return reinterpret_cast<uint64_t>(bytes.data()); }
    Sge sge(uint32_t off, uint32_t len) const { return {va() + off, len, mr->lkey}; }
    uint32_t rkey() const { return mr->rkey; }
    uint64_t u64(size_t off) const {
      uint64_t v;
      std::memcpy(&v, bytes.data() + off, 8);
      return v;
    }
    void set_u64(size_t off, uint64_t v) { std::memcpy(bytes.data() + off, &v, 8); }
    /// Copies `v` in place (assigning to `bytes` would move the registered memory).
    void fill(const std::vector<uint8_t>& v) { std::memcpy(bytes.data(), v.data(), std::min(v.size(), bytes.size())); }
  };
  std::shared_ptr<Buf> reg(size_t len, uint32_t access = kAccessLocalWrite | kAccessRemoteWrite |
                                                         kAccessRemoteRead | kAccessRemoteAtomic) {
    auto b = std::make_shared<Buf>();
    b->bytes.resize(len);
    EXPECT_EQ(engine_->reg_mr(pd_, b->va(), len, b->bytes.data(), access, &b->mr), 0);
    return b;
  }

  static std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
    std::vector<uint8_t> v(n);
    uint32_t x = seed * 2654435761u + 1;
    for (auto& b : v) {
      x = x * 1664525u + 1013904223u;
      b = static_cast<uint8_t>(x >> 24);
    }
    return v;
  }

  // ---- Verbs -------------------------------------------------------------------

  static SendWr send_wr(WrOpcode op, uint64_t wr_id, Sge sge, uint32_t flags = kSendSignaled) {
    SendWr w;
    w.wr_id = wr_id;
    w.opcode = op;
    w.send_flags = flags;
    w.num_sge = 1;
    w.sg_list[0] = sge;
    return w;
  }
  static RecvWr recv_wr(uint64_t wr_id, Sge sge) {
    RecvWr w;
    w.wr_id = wr_id;
    w.num_sge = 1;
    w.sg_list[0] = sge;
    return w;
  }
  std::vector<Completion> drain(Cq* cq) {
    std::vector<Completion> out;
    Completion c[64];
    uint32_t k;
    while ((k = cq->poll(c, 64)) != 0) out.insert(out.end(), c, c + k);
    return out;
  }

  // ---- The peer's frames ---------------------------------------------------------

  /// Headers of a frame from the peer to our QP: `operation` on the QP's transport.
  PacketHeaders peer(uint8_t operation, uint32_t psn, bool ackreq = false) const {
    PacketHeaders h;
    h.l2.dst = kLocalMac;
    h.l2.src = kPeerMac;
    h.l3.version = ipv6_ ? 6 : 4;
    h.l3.src = ipv6_ ? peer_ip6() : peer_ip();
    h.l3.dst = ipv6_ ? local_ip6() : local_ip();
    h.l3.ipv4_frag = ipv6_ ? 0 : net::kIpv4FlagDf;
    h.l4.src_port = kPeerSport;
    h.bth.opcode = make_opcode(transport_of(opts_.type), operation);
    h.bth.pkey = 0xffff;
    h.bth.dest_qp = qpn_;
    h.bth.ackreq = ackreq;
    h.bth.psn = psn & kPsnMask;
    return h;
  }
  PacketHeaders ack(uint32_t psn, uint8_t syndrome, uint32_t msn) const {
    PacketHeaders h = peer(op::kAcknowledge, psn);
    h.ext.aeth = {syndrome, msn};
    return h;
  }
  PacketHeaders read_response(uint8_t operation, uint32_t psn, uint32_t msn) const {
    PacketHeaders h = peer(operation, psn);
    h.ext.aeth = {0x1f, msn};
    return h;
  }

  struct Frame {
    PacketHeaders h;
    std::vector<uint8_t> payload;
  };

  /// Feeds frames to the engine as one RX burst, then polls once.
  void deliver(const std::vector<Frame>& frames) {
    std::vector<rte_mbuf*> ms;
    for (const Frame& f : frames) {
      rte_mbuf* m = rte_pktmbuf_alloc(pool());
      const int rc = m == nullptr ? -ENOMEM : build_mbuf(f.h, f.payload, m);
      if (rc != 0) {
        rte_pktmbuf_free(m);  // null-safe
        for (rte_mbuf* x : ms) rte_pktmbuf_free(x);
        FAIL() << "cannot build the peer's frame: " << rc;
      }
      ms.push_back(m);
    }
    engine_->rx_burst(ms.data(), static_cast<uint16_t>(ms.size()), now_);
    engine_->poll(now_);
  }
  void deliver(const PacketHeaders& h, std::vector<uint8_t> payload = {}) { deliver({Frame{h, std::move(payload)}}); }

  /// Moves the clock to t and polls once (timers due by t fire).
  void at(uint64_t t) {
    now_ = t;
    engine_->poll(now_);
  }

  /// Takes and parses every frame the engine has sent so far (and frees them).
  std::vector<Sent> sent() {
    std::vector<Sent> out;
    for (rte_mbuf* m : port_.take()) {
      Sent s;
      s.frame.resize(m->pkt_len);
      net::FrameBytes(m).for_each_piece(0, m->pkt_len, [&, at = size_t{0}](const uint8_t* p, size_t n) mutable {
        std::memcpy(s.frame.data() + at, p, n);
        at += n;
      });
      rte_pktmbuf_free(m);
      s.status = parse_frame(std::span<const uint8_t>(s.frame), &s.pkt);
      EXPECT_EQ(s.status, ParseStatus::ok) << to_string(s.status);
      out.push_back(std::move(s));
    }
    return out;
  }

  /// A frame the engine sent to the peer: addressed to it, from us, on our QP's flow.
  void expect_to_peer(const Sent& s) {
    EXPECT_EQ(s.pkt.hdr.l2.dst, kPeerMac);
    EXPECT_EQ(s.pkt.hdr.l2.src, kLocalMac);
    EXPECT_EQ(s.pkt.hdr.l3.dst, peer_ip());
    EXPECT_EQ(s.pkt.hdr.l3.src, local_ip());
    EXPECT_EQ(s.pkt.hdr.l4.src_port & 0xc000, 0xc000);
    EXPECT_EQ(s.bth().dest_qp, opts_.peer_qpn);
    EXPECT_EQ(s.bth().pkey, 0xffff);
  }
  /// An RC (or, to an XRC QP, XRC) ACKNOWLEDGE (ACK or NAK) with this PSN, syndrome and MSN.
  void expect_ack(const Sent& s, uint32_t psn, uint8_t syndrome, uint32_t msn) {
    EXPECT_EQ(s.opcode(), make_opcode(is_xrc(opts_.type) ? Transport::xrc : Transport::rc, op::kAcknowledge));
    EXPECT_EQ(s.psn(), psn);
    EXPECT_EQ(s.ext().aeth.syndrome, syndrome);
    EXPECT_EQ(s.ext().aeth.msn, msn);
    expect_to_peer(s);
  }

  CapturePort port_;
  std::unique_ptr<Engine> engine_;
  uint32_t pd_ = 0;
  Cq* scq_ = nullptr;
  Cq* rcq_ = nullptr;
  uint32_t qpn_ = 0;     ///< the QP peer() addresses (the last made)
  QpOptions opts_;       ///< its options
  bool ipv6_ = false;    ///< the peer sends over IPv6
  uint64_t now_ = 1'000'000;
  unsigned in_use_ = 0;
};

}  // namespace droce::test
