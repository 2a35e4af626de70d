// DCQCN in the engine (rocev2/dcqcn.h hosted by rocev2/engine.cc), with the protocol harness:
// the test plays the peer, marks its frames CE as a congested switch would, sends CNPs, and
// reads what the engine sent. Virtual time; no timing decides a verdict.

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "tests/rocev2/protocol_harness.h"

namespace droce::test {
namespace {

class DcqcnEngineTest : public ProtocolTest {
 protected:
  void SetUp() override {
    ProtocolTest::SetUp();
    engine().set_cc_params(CcParams{});  // mlx5's defaults, both points on
  }

  /// An RDMA WRITE ONLY from the peer into `buf`, marked CE (or not) by the network.
  PacketHeaders write_only(uint32_t psn, const Buf& buf, bool ce) const {
    PacketHeaders h = peer(op::kWriteOnly, psn, true);
    h.ext.reth = {buf.va(), buf.rkey(), 64};
    h.l3.tos = ce ? (0x68 | net::kEcnCe) : (0x68 | net::kEcnEct0);
    return h;
  }
  /// A CNP from the peer to local QP `qpn`, as an mlx5 NIC sends one.
  PacketHeaders cnp_to(uint32_t qpn) const {
    PacketHeaders h = peer(0, 0);
    h.bth.opcode = kOpcodeCnp;
    h.bth.becn = true;
    h.bth.dest_qp = qpn;
    h.l3.tos = 48 << 2;
    return h;
  }
  static std::vector<Sent> cnps(const std::vector<Sent>& all) {
    std::vector<Sent> out;
    for (const Sent& s : all)
      if (s.opcode() == kOpcodeCnp) out.push_back(s);
    return out;
  }
  static size_t data_frames(const std::vector<Sent>& all) {
    size_t n = 0;
    for (const Sent& s : all) n += s.pkt.info != nullptr && s.pkt.info->kind == OpKind::write;
    return n;
  }
};

TEST_F(DcqcnEngineTest, CeMarkedRequestsGetOneCnpPerMinTimeBetweenCnps) {
  const uint32_t qpn = make_qp();
  auto buf = reg(4096);
  const uint64_t t0 = now_;
  // Step: three CE-marked WRITEs in one burst.
  deliver({{write_only(0x5000, *buf, true), pattern(64, 1)},
           {write_only(0x5001, *buf, true), pattern(64, 2)},
           {write_only(0x5002, *buf, true), pattern(64, 3)}});
  // Expect: one CNP to the peer's QP, PSN 0, BECN, P_Key, DSCP 48 and not ECN-capable; the
  // WRITEs executed and acknowledged as ever.
  auto out = sent();
  auto c = cnps(out);
  ASSERT_EQ(c.size(), 1u);
  expect_to_peer(c[0]);
  EXPECT_EQ(c[0].psn(), 0u);
  EXPECT_TRUE(c[0].bth().becn);
  EXPECT_FALSE(c[0].bth().fecn);
  EXPECT_EQ(c[0].pkt.hdr.l3.tos, 48 << 2);
  EXPECT_EQ(c[0].pkt.hdr.ext.cnp, Cnp{});
  EXPECT_EQ(c[0].frame.size(), 14u + 20 + 8 + 12 + 16 + 4) << "BTH, 16 reserved bytes, ICRC";
  EXPECT_EQ(c[0].pkt.layout.payload_len, 0u);
  EXPECT_EQ(epsn(qpn), 0x5003u);
  EXPECT_EQ(engine().counters().np_ecn_marked_roce_packets, 3u);
  EXPECT_EQ(engine().counters().np_cnp_sent, 1u);
  EXPECT_EQ(engine().counters().np_cnp_suppressed, 2u);

  // Step: another CE mark 3.999 us after the CNP: inside min_time_between_cnps (4 us).
  now_ = t0 + 3999;
  deliver(write_only(0x5003, *buf, true), pattern(64, 4));
  EXPECT_EQ(cnps(sent()).size(), 0u);
  // Step: an unmarked one at 4 us: no CNP either.
  now_ = t0 + 4000;
  deliver(write_only(0x5004, *buf, false), pattern(64, 5));
  EXPECT_EQ(cnps(sent()).size(), 0u);
  // Step: a marked one at 4 us: the next CNP.
  deliver(write_only(0x5005, *buf, true), pattern(64, 6));
  EXPECT_EQ(cnps(sent()).size(), 1u);
  EXPECT_EQ(engine().counters().np_cnp_sent, 2u);
  EXPECT_EQ(engine().counters().np_ecn_marked_roce_packets, 5u);
}

TEST_F(DcqcnEngineTest, CnpIntervalIsPerQp) {
  QpOptions a;
  a.peer_qpn = 0x100;
  const uint32_t qa = make_qp(a);
  auto buf = reg(4096);
  QpOptions b = a;
  b.peer_qpn = 0x200;
  const uint32_t qb = make_qp(b);
  PacketHeaders to_b = write_only(0x5000, *buf, true);
  opts_ = a;
  qpn_ = qa;
  PacketHeaders to_a = write_only(0x5000, *buf, true);
  deliver({{to_a, pattern(64, 1)}, {to_b, pattern(64, 2)}});
  auto c = cnps(sent());
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].bth().dest_qp, 0x100u);
  EXPECT_EQ(c[1].bth().dest_qp, 0x200u);
  EXPECT_NE(qa, qb);
}

TEST_F(DcqcnEngineTest, UdCnpGoesToTheDatagramsSourceQp) {
  QpOptions o;
  o.type = QpType::ud;
  const uint32_t qpn = make_qp(o);
  auto rbuf = reg(4096);
  ASSERT_EQ(engine().post_recv(qpn, recv_wr(1, rbuf->sge(0, 4096))), 0);
  PacketHeaders h = peer(op::kSendOnly, 7);
  h.ext.deth = {o.qkey, 0, 0x4242};
  h.l3.tos = net::kEcnCe;
  deliver(h, pattern(32, 1));
  auto c = cnps(sent());
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].bth().dest_qp, 0x4242u);
  EXPECT_EQ(c[0].pkt.hdr.l3.dst, peer_ip());
  EXPECT_EQ(drain(rcq_).size(), 1u) << "the datagram is delivered as ever";
}

TEST_F(DcqcnEngineTest, NpOffCountsMarksAndSendsNoCnp) {
  CcParams p;
  p.np_enable = 0;
  engine().set_cc_params(p);
  make_qp();
  auto buf = reg(4096);
  deliver(write_only(0x5000, *buf, true), pattern(64, 1));
  EXPECT_EQ(cnps(sent()).size(), 0u);
  EXPECT_EQ(engine().counters().np_ecn_marked_roce_packets, 1u);
  EXPECT_EQ(engine().counters().np_cnp_sent, 0u);
}

TEST_F(DcqcnEngineTest, DataFramesAreEct0OnlyWithTheReactionPointOn) {
  const uint32_t qpn = make_qp();
  auto src = reg(4096);
  SendWr w = send_wr(WrOpcode::rdma_write, 1, src->sge(0, 64));
  w.remote_addr = 0x10000;
  w.rkey = 9;
  ASSERT_EQ(engine().post_send(qpn, w), 0);
  at(now_);
  auto out = sent();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].pkt.hdr.l3.tos & net::kEcnMask, net::kEcnEct0);

  engine().set_cc_params(CcParams::off());
  w.wr_id = 2;
  ASSERT_EQ(engine().post_send(qpn, w), 0);
  at(now_);
  out = sent();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].pkt.hdr.l3.tos, peer_av().traffic_class) << "the address handle's, untouched";
}

TEST_F(DcqcnEngineTest, CnpForAnUnknownQpIsCountedAndDropped) {
  make_qp();
  const uint64_t unknown = engine().counters().rx_unknown_qp;
  deliver(cnp_to(0x7777));
  EXPECT_EQ(sent().size(), 0u);
  EXPECT_EQ(engine().counters().cnp_received, 1u);
  EXPECT_EQ(engine().counters().rx_unknown_qp, unknown + 1);
  EXPECT_EQ(engine().counters().rp_cnp_handled, 0u);
}

TEST_F(DcqcnEngineTest, CnpWithTheReactionPointOffIsIgnoredAndChangesNothing) {
  CcParams p;
  p.rp_enable = 0;
  engine().set_cc_params(p);
  const uint32_t qpn = make_qp();
  deliver(cnp_to(qpn));
  EXPECT_EQ(engine().counters().rp_cnp_ignored, 1u);
  EXPECT_FALSE(engine().qp(qpn)->rp.limited());
}

TEST_F(DcqcnEngineTest, CnpSlowsTheRequesterWhileOtherQpsGoOn) {
  CcParams p;
  p.rate_to_set_on_first_cnp = 100;  // Mbit/s: 80 ns a byte
  p.rpg_time_reset = 0;              // the rate stays put for the test
  p.rpg_byte_reset = 0;
  engine().set_cc_params(p);
  QpOptions o;
  o.peer_qpn = 0x100;
  const uint32_t paced = make_qp(o);
  o.peer_qpn = 0x200;
  const uint32_t free_qp = make_qp(o);
  auto src = reg(16384);

  // Step: the peer's CNP for `paced`.
  deliver(cnp_to(paced));
  EXPECT_EQ(engine().counters().rp_cnp_handled, 1u);
  EXPECT_EQ(engine().counters().rp_rate_cuts, 1u);
  EXPECT_DOUBLE_EQ(engine().qp(paced)->rp.rc(), 100);

  // Step: 16 KiB WRITEs (16 packets each) on both QPs.
  for (uint32_t q : {paced, free_qp}) {
    SendWr w = send_wr(WrOpcode::rdma_write, q, src->sge(0, 16384));
    w.remote_addr = 0x10000;
    w.rkey = 9;
    ASSERT_EQ(engine().post_send(q, w), 0);
  }
  at(now_);
  // Expect: the free QP sent its whole message; the paced one one frame, then it waits.
  auto out = sent();
  size_t from_paced = 0, from_free = 0;
  uint64_t first_len = 0;
  for (const Sent& s : out) {
    if (s.bth().dest_qp == 0x100) {
      ++from_paced;
      first_len = s.frame.size();
    }
    if (s.bth().dest_qp == 0x200) ++from_free;
  }
  EXPECT_EQ(from_free, 16u);
  ASSERT_EQ(from_paced, 1u);
  EXPECT_EQ(engine().qp(free_qp)->rp.limited(), false);

  // Expect: the next frame exactly one frame time (its bytes at 100 Mbit/s) later.
  const uint64_t t0 = now_;
  const uint64_t gap = first_len * 80;
  at(t0 + gap - 1);
  EXPECT_EQ(data_frames(sent()), 0u);
  EXPECT_GE(engine().next_deadline(), t0 + gap) << "a timer, not a spin, brings it back";
  at(t0 + gap);
  out = sent();
  ASSERT_EQ(data_frames(out), 1u);
  // Expect: at that pace the rest of the message takes 14 more frame times; all of it arrives.
  uint64_t t = t0 + gap;
  size_t total = 2;
  while (total < 16 && t < t0 + 40 * gap) {
    t += out.empty() ? gap : out.back().frame.size() * 80;
    at(t);
    out = sent();
    total += data_frames(out);
  }
  EXPECT_EQ(total, 16u);
}

TEST_F(DcqcnEngineTest, RateIncreasesAreCountedWhenThePacedQpNextSends) {
  CcParams p;                 // the first CNP cuts the line rate: RT stays the line, RC below it
  p.rpg_time_reset = 300;     // us: one timer increase event per 300 us
  p.rpg_byte_reset = 0;
  engine().set_cc_params(p);
  QpOptions o;
  o.peer_qpn = 0x100;
  const uint32_t qpn = make_qp(o);
  auto src = reg(4096);
  deliver(cnp_to(qpn));
  ASSERT_EQ(engine().counters().rp_rate_cuts, 1u);
  const uint64_t cut_at = now_;
  const double rc_cut = engine().qp(qpn)->rp.rc();
  ASSERT_LT(rc_cut, engine().qp(qpn)->rp.rt());

  // Step: 400 us idle, then a WRITE. Expect: the one due timer event runs as the QP sends, and
  // is counted; the rate rose (fast recovery: RC halfway to RT, here RT is the line).
  at(cut_at + 299 * 1000);
  EXPECT_EQ(engine().counters().rp_rate_increases, 0u) << "nothing runs for an idle QP";
  at(cut_at + 400 * 1000);
  SendWr w = send_wr(WrOpcode::rdma_write, qpn, src->sge(0, 64));
  w.remote_addr = 0x10000;
  w.rkey = 9;
  ASSERT_EQ(engine().post_send(qpn, w), 0);
  at(now_);
  EXPECT_EQ(data_frames(sent()), 1u);
  EXPECT_EQ(engine().counters().rp_rate_increases, 1u);
  EXPECT_GT(engine().qp(qpn)->rp.rc(), rc_cut);
  EXPECT_EQ(engine().qp(qpn)->rp.increases(), 1u);
}

TEST_F(DcqcnEngineTest, APacedQpAsksForAnAckOnceAnEighthOfTheAckTimeoutHasPassed) {
  CcParams p;
  p.rate_to_set_on_first_cnp = 1;  // Mbit/s: 8 us a byte, a 1 KiB frame every ~9 ms
  p.rpg_time_reset = 0;
  p.rpg_byte_reset = 0;
  engine().set_cc_params(p);
  QpOptions o;
  o.peer_qpn = 0x100;
  const uint32_t paced = make_qp(o);  // ACK timeout 14: 67 ms, an eighth 8.4 ms
  o.peer_qpn = 0x200;
  const uint32_t free_qp = make_qp(o);
  auto src = reg(16384);
  deliver(cnp_to(paced));
  ASSERT_TRUE(engine().qp(paced)->rp.limited());
  for (uint32_t q : {paced, free_qp}) {
    SendWr w = send_wr(WrOpcode::rdma_write, q, src->sge(0, 16384));
    w.remote_addr = 0x10000;
    w.rkey = 9;
    ASSERT_EQ(engine().post_send(q, w), 0);
  }
  // Step: time on, frame by frame (nobody ACKs).
  size_t paced_frames = 0, paced_asks = 0, free_frames = 0, free_asks = 0;
  uint64_t t = now_;
  // Six frames (~54 ms), inside the 67 ms timeout: nothing is sent again meanwhile.
  for (int i = 0; i < 4000 && paced_frames < 6; ++i, t += 100'000) {
    at(t);
    for (const Sent& s : sent()) {
      if (s.pkt.info == nullptr || s.pkt.info->kind != OpKind::write) continue;
      const bool ask = s.bth().ackreq;
      if (s.bth().dest_qp == 0x100) ++paced_frames, paced_asks += ask && paced_frames > 1;
      if (s.bth().dest_qp == 0x200) ++free_frames, free_asks += ask;
    }
  }
  // Expect: the paced QP's frames, ~9 ms apart, each ask for an ACK after the first (each comes
  // more than 8.4 ms after the last ask; the first goes at once, at the CNP's moment); the
  // unpaced QP's 16 asked only at ack_req_every and the end.
  EXPECT_EQ(paced_frames, 6u);
  EXPECT_EQ(paced_asks, 5u);
  EXPECT_EQ(engine().qp(paced)->counters.retransmits, 0u);
  EXPECT_EQ(free_frames, 16u);
  EXPECT_GE(free_asks, 1u);
  EXPECT_LT(free_asks, 16u);
}

// The oracle: a CNP droce builds dissects in scapy's RoCE layer as a CNP (BTH 0x81, BECN,
// CNPPadding), with the ICRC scapy computes, and equals scapy's own cnp() byte for byte
// (tests/oracle/cnp_scapy_check.py).
TEST_F(DcqcnEngineTest, CnpBytesAreScapysCnp) {
  const char* dir = std::getenv("DROCE_ORACLE_DIR");
  if (dir == nullptr) GTEST_SKIP() << "DROCE_ORACLE_DIR unset (meson test sets it)";
  CcParams p;
  p.cnp_dscp = 26;
  engine().set_cc_params(p);
  QpOptions o;
  o.peer_qpn = 0x0abcde;
  make_qp(o);
  auto buf = reg(4096);
  deliver(write_only(0x5000, *buf, true), pattern(64, 1));
  const auto c = cnps(sent());
  ASSERT_EQ(c.size(), 1u);
  const std::string path = ::testing::TempDir() + "droce-cnp-" + std::to_string(getpid()) + ".hex";
  {
    std::ofstream f(path);
    for (uint8_t b : c[0].frame) f << "0123456789abcdef"[b >> 4] << "0123456789abcdef"[b & 15];
    f << "\n";
  }
  const std::string cmd = std::string("/usr/bin/python3 ") + dir + "/cnp_scapy_check.py " + path + " 0x0abcde 26 2>&1";
  std::string out;
  FILE* f = ::popen(cmd.c_str(), "r");
  ASSERT_NE(f, nullptr);
  char chunk[4096];
  size_t n;
  while ((n = std::fread(chunk, 1, sizeof chunk, f)) > 0) out.append(chunk, n);
  const int st = ::pclose(f);
  std::remove(path.c_str());
  if (WIFEXITED(st) && WEXITSTATUS(st) == 77) GTEST_SKIP() << out;
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << out;
  EXPECT_NE(out.find("1 CNPs checked, 0 problems"), std::string::npos) << out;
}

TEST_F(DcqcnEngineTest, ResetForgetsTheRate) {
  const uint32_t qpn = make_qp();
  deliver(cnp_to(qpn));
  ASSERT_TRUE(engine().qp(qpn)->rp.limited());
  QpAttr a;
  a.qp_state = QpState::reset;
  ASSERT_EQ(engine().modify_qp(qpn, a, kAttrState), 0);
  EXPECT_FALSE(engine().qp(qpn)->rp.limited());
}

}  // namespace
}  // namespace droce::test
