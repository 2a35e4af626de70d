// On-demand paging in the engine (rocev2/mr.h OdpMemory), one role at a time as
// protocol_test.cc: the test plays the peer and the application's address space. An
// ODP region has no host mapping; the engine reaches its bytes only through the
// OdpMemory, and a page the application does not map ends the access as an HCA's
// failed page fault does: NAK remote access error for the peer's WRITE, READ or
// atomic, LOC_PROT_ERR for a local scatter/gather entry. Never a crash.
//
// A page that is mapped but not yet in (OdpMemory::ready says no) is an HCA's page
// fault that will be resolved: whatever needed it waits, nothing goes to the peer (no
// NAK, no retry spent), and the ODP timer (16 us, then backing off) tries again.

#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "tests/rocev2/protocol_harness.h"

namespace droce::test {
namespace {

constexpr uint32_t kS = 0x1000;  // QpOptions::sq_psn
constexpr uint32_t kE = 0x5000;  // QpOptions::rq_psn
constexpr uint8_t kAckSyndrome = 0x1f;
constexpr uint8_t kNakRemoteAccess = 0x62;
constexpr uint8_t kNakRemoteOperational = 0x63;
constexpr uint64_t kPage = 4096;

constexpr uint8_t rc(uint8_t operation) { return make_opcode(Transport::rc, operation); }
uint32_t psn(uint32_t base, uint32_t k) { return psn_add(base, k); }

std::vector<uint8_t> slice(const std::vector<uint8_t>& v, size_t off, size_t len) {
  return {v.begin() + static_cast<ptrdiff_t>(off), v.begin() + static_cast<ptrdiff_t>(off + len)};
}

// The application's address space as the engine sees it through OdpMemory: `bytes` at
// `base` (an address far from anything the test process maps, so nothing but this object
// could serve it), with pages the test unmaps. Counts the calls, as droced's
// /proc/<pid>/mem accessor would make system calls.
class FakeAddressSpace final : public OdpMemory {
 public:
  static constexpr uint64_t kBase = 0x7e5500000000;

  explicit FakeAddressSpace(size_t pages) : bytes(pages * kPage) {}

  // Pages the application maps but that are not in (swapped out, never touched): not ready
  // until the test brings them in, as droced's fault-in thread would. The first answer for a
  // page begins its fault, later ones find it on its way.
  OdpReady ready(uint64_t addr, size_t n, bool write, uint64_t ahead) override {
    ++asked;
    last_ahead = ahead;
    if (n == 0 || addr < kBase || addr - kBase + n > bytes.size()) return OdpReady::now;
    for (uint64_t p = (addr - kBase) / kPage; p <= (addr - kBase + n - 1) / kPage; ++p) {
      if (absent.count(p) != 0) {
        ++not_ready;
        wanted_for_write |= write;
        return faulting.insert(p).second ? OdpReady::faulting : OdpReady::waiting;
      }
    }
    return OdpReady::now;
  }
  bool read(uint64_t addr, void* dst, size_t n) override {
    ++reads;
    if (!mapped(addr, n)) return false;
    std::memcpy(dst, bytes.data() + (addr - kBase), n);
    return true;
  }
  bool write(uint64_t addr, const void* src, size_t n) override {
    ++writes;
    if (!mapped(addr, n)) return false;
    std::memcpy(bytes.data() + (addr - kBase), src, n);
    return true;
  }

  void unmap(size_t page) { holes.insert(page); }
  void page_out(size_t page) { absent.insert(page); }
  void bring_in() {
    absent.clear();
    faulting.clear();
  }
  uint64_t addr(size_t off) const { return kBase + off; }
  uint64_t u64(size_t off) const {
    uint64_t v;
    std::memcpy(&v, bytes.data() + off, 8);
    return v;
  }
  void set_u64(size_t off, uint64_t v) { std::memcpy(bytes.data() + off, &v, 8); }

  std::vector<uint8_t> bytes;
  std::set<size_t> holes;   ///< page indexes the application unmapped
  std::set<size_t> absent;  ///< page indexes mapped but not in
  std::set<size_t> faulting;  ///< absent pages whose fault began
  uint64_t last_ahead = 0;    ///< the last ready() call's `ahead`
  unsigned reads = 0;
  unsigned writes = 0;
  unsigned asked = 0;       ///< ready() calls
  unsigned not_ready = 0;   ///< ready() answered no
  bool wanted_for_write = false;

 private:
  bool mapped(uint64_t addr, size_t n) const {
    if (addr < kBase || addr - kBase + n > bytes.size()) return false;
    for (uint64_t p = (addr - kBase) / kPage; p <= (addr - kBase + n - 1) / kPage; ++p)
      if (holes.count(p) != 0) return false;
    return true;
  }
};

class OdpTest : public ProtocolTest {
 protected:
  static constexpr uint32_t kAllAccess =
      kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic | kAccessOnDemand;

  // An explicit ODP region over the whole fake space.
  Mr* reg_odp(uint32_t access = kAllAccess) {
    Mr* mr = nullptr;
    EXPECT_EQ(engine().reg_odp_mr(pd_, app_.kBase, app_.bytes.size(), &app_, access, &mr), 0);
    return mr;
  }
  // The ODP timer's first wait is 16 us: past it, whatever waited tries again.
  void after_odp_wait(uint64_t ns = 20'000) { at(now_ + ns); }

  // The same NAK rules as protocol_test's: exactly one NAK for at_psn, the QP in ERR.
  void expect_fatal_nak(uint32_t qpn, uint32_t at_psn, uint8_t syndrome, uint32_t msn) {
    auto out = sent();
    ASSERT_EQ(out.size(), 1u);
    expect_ack(out[0], at_psn, syndrome, msn);
    EXPECT_EQ(state(qpn), QpState::err);
  }

  FakeAddressSpace app_{8};
};

TEST_F(OdpTest, RegistrationRefusesNoAccessorAndKeepsNoHostPointer) {
  Mr* mr = nullptr;
  // Expect: an ODP registration needs its OdpMemory; the access rules are reg()'s.
  EXPECT_EQ(engine().reg_odp_mr(pd_, app_.kBase, 4096, nullptr, kAllAccess, &mr), -EINVAL);
  EXPECT_EQ(engine().reg_odp_mr(pd_, app_.kBase, 4096, &app_, kAccessRemoteWrite | kAccessOnDemand, &mr), -EINVAL);
  EXPECT_EQ(engine().reg_odp_mr(pd_ + 7, app_.kBase, 4096, &app_, kAllAccess, &mr), -EINVAL);
  mr = reg_odp();
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(mr->host, nullptr);
  EXPECT_EQ(mr->odp, &app_);
  // Expect: registering touched nothing of the application's memory (nothing pinned, nothing copied).
  EXPECT_EQ(app_.reads + app_.writes, 0u);
  // Expect: rereg keeps it an ODP region; a host mapping for it is refused.
  uint8_t host[64];
  EXPECT_EQ(engine().rereg_mr(mr->lkey, pd_, app_.kBase, 64, host, kAllAccess), -EINVAL);
  EXPECT_EQ(engine().rereg_mr(mr->lkey, pd_, app_.addr(kPage), kPage, nullptr, kAllAccess), 0);
  EXPECT_EQ(mr->odp_addr, app_.addr(kPage));
  EXPECT_EQ(engine().dereg_mr(mr->lkey), 0);
}

TEST_F(OdpTest, PeerWriteAndReadReachTheApplicationsPages) {
  make_qp();
  Mr* mr = reg_odp();

  // Step: a two-packet WRITE across a page boundary, then a READ of the same bytes.
  const auto data = pattern(1500, 3);
  const uint64_t va = app_.addr(kPage - 700);
  PacketHeaders first = peer(op::kWriteFirst, kE);
  first.ext.reth = {va, mr->rkey, 1500};
  deliver({{first, slice(data, 0, 1024)}, {peer(op::kWriteLast, psn(kE, 1), true), slice(data, 1024, 476)}});
  // Expect: ACK for kE+1, MSN 1; the bytes in the application's pages, through OdpMemory.
  auto out = sent();
  ASSERT_GE(out.size(), 1u);
  expect_ack(out.back(), psn(kE, 1), kAckSyndrome, 1);
  EXPECT_EQ(slice(app_.bytes, kPage - 700, 1500), data);
  EXPECT_GE(app_.writes, 2u);

  PacketHeaders rd = peer(op::kReadRequest, psn(kE, 2), true);
  rd.ext.reth = {va, mr->rkey, 1500};
  deliver(rd);
  // Expect: READ RESPONSE FIRST and LAST carrying the same bytes.
  out = sent();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].opcode(), rc(op::kReadResponseFirst));
  EXPECT_EQ(out[1].opcode(), rc(op::kReadResponseLast));
  EXPECT_EQ(out[0].payload(), slice(data, 0, 1024));
  EXPECT_EQ(out[1].payload(), slice(data, 1024, 476));
}

TEST_F(OdpTest, PeerWriteIntoAnUnmappedPageIsARemoteAccessError) {
  const uint32_t qpn = make_qp();
  Mr* mr = reg_odp();
  app_.unmap(2);

  // Step: a WRITE ONLY whose range is inside the region (the R_Key check passes) but lies on
  // a page the application unmapped.
  PacketHeaders h = peer(op::kWriteOnly, kE, true);
  h.ext.reth = {app_.addr(2 * kPage + 16), mr->rkey, 64};
  deliver(h, pattern(64, 4));
  // Expect: NAK remote access error for kE, MSN 0; the QP in ERR; an access error event.
  expect_fatal_nak(qpn, kE, kNakRemoteAccess, 0);
  bool event = false;
  for (const AsyncEvent& e : engine().events()) event |= e.type == AsyncEventType::qp_access_err && e.id == qpn;
  EXPECT_TRUE(event);
}

TEST_F(OdpTest, PeerReadOfAPageUnmappedMidTransferIsARemoteAccessError) {
  const uint32_t qpn = make_qp();
  Mr* mr = reg_odp();
  // The third response packet's bytes lie on page 1, which the application unmapped:
  // the first two responses go out, then the NAK.
  app_.unmap(1);

  PacketHeaders rd = peer(op::kReadRequest, kE, true);
  rd.ext.reth = {app_.addr(kPage - 2048), mr->rkey, 3000};
  deliver(rd);
  // Expect: READ RESPONSE FIRST (kE) and MIDDLE (kE+1) from page 0, then NAK remote access
  // error at kE+2 (the packet the page would have filled); the QP in ERR.
  auto out = sent();
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].opcode(), rc(op::kReadResponseFirst));
  EXPECT_EQ(out[1].opcode(), rc(op::kReadResponseMiddle));
  EXPECT_EQ(out[0].payload(), slice(app_.bytes, kPage - 2048, 1024));
  expect_ack(out[2], psn(kE, 2), kNakRemoteAccess, 1);
  EXPECT_EQ(state(qpn), QpState::err);
}

TEST_F(OdpTest, AtomicsReadModifyWriteThroughTheAccessorAndFailOnAHole) {
  const uint32_t qpn = make_qp();
  Mr* mr = reg_odp();
  app_.set_u64(8, 100);

  // Step: FETCH_ADD +5, then a COMPARE_SWAP that matches and one that does not.
  PacketHeaders fa = peer(op::kFetchAdd, kE, true);
  fa.ext.atomic_eth = {app_.addr(8), mr->rkey, 5, 0};
  deliver(fa);
  PacketHeaders cs = peer(op::kCompareSwap, psn(kE, 1), true);
  cs.ext.atomic_eth = {app_.addr(8), mr->rkey, 7, 105};
  deliver(cs);
  const unsigned writes = app_.writes;
  cs = peer(op::kCompareSwap, psn(kE, 2), true);
  cs.ext.atomic_eth = {app_.addr(8), mr->rkey, 9, 1};
  deliver(cs);
  // Expect: ATOMIC ACKs with originals 100, 105, 7; the memory holds 7; a failed compare
  // writes nothing.
  auto out = sent();
  ASSERT_EQ(out.size(), 3u);
  const uint64_t origs[] = {100, 105, 7};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(out[i].opcode(), rc(op::kAtomicAcknowledge));
    EXPECT_EQ(out[i].ext().atomic_ack_eth.orig, origs[i]);
  }
  EXPECT_EQ(app_.u64(8), 7u);
  EXPECT_EQ(app_.writes, writes);

  // Step: a FETCH_ADD on an unmapped page.
  app_.unmap(3);
  fa = peer(op::kFetchAdd, psn(kE, 3), true);
  fa.ext.atomic_eth = {app_.addr(3 * kPage), mr->rkey, 1, 0};
  deliver(fa);
  // Expect: NAK remote access error at kE+3, MSN 3; the QP in ERR.
  expect_fatal_nak(qpn, psn(kE, 3), kNakRemoteAccess, 3);
}

TEST_F(OdpTest, SendIntoAnOdpReceiveAndIntoAnUnmappedOne) {
  const uint32_t qpn = make_qp();
  Mr* mr = reg_odp();
  app_.unmap(4);
  ASSERT_EQ(engine().post_recv(qpn, recv_wr(1, {app_.addr(100), 512, mr->lkey})), 0);
  ASSERT_EQ(engine().post_recv(qpn, recv_wr(2, {app_.addr(4 * kPage), 512, mr->lkey})), 0);

  // Step: two SENDs.
  const auto one = pattern(300, 5);
  deliver(peer(op::kSendOnly, kE, true), one);
  deliver(peer(op::kSendOnly, psn(kE, 1), true), pattern(300, 6));
  // Expect: the first placed and acknowledged; the second NAKed remote operational error
  // (the receive's scatter failed), its receive completed LOC_PROT_ERR.
  auto out = sent();
  ASSERT_EQ(out.size(), 2u);
  expect_ack(out[0], kE, kAckSyndrome, 1);
  expect_ack(out[1], psn(kE, 1), kNakRemoteOperational, 1);
  EXPECT_EQ(slice(app_.bytes, 100, 300), one);
  auto wc = drain(rcq_);
  ASSERT_EQ(wc.size(), 2u);
  EXPECT_EQ(wc[0].status, WcStatus::success);
  EXPECT_EQ(wc[1].wr_id, 2u);
  EXPECT_EQ(wc[1].status, WcStatus::loc_prot_err) << to_string(wc[1].status);
}

TEST_F(OdpTest, RequesterGathersFromOdpAndAnUnmappedSgeCompletesLocProtErr) {
  const uint32_t qpn = make_qp();
  Mr* mr = reg_odp();
  const auto data = pattern(600, 7);
  std::memcpy(app_.bytes.data() + 50, data.data(), data.size());

  // Step: a SEND from the ODP region.
  ASSERT_EQ(engine().post_send(qpn, send_wr(WrOpcode::send, 1, {app_.addr(50), 600, mr->lkey})), 0);
  at(now_);
  // Expect: SEND ONLY at kS with the application's bytes.
  auto out = sent();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), rc(op::kSendOnly));
  EXPECT_EQ(out[0].payload(), data);
  deliver(ack(kS, kAckSyndrome, 1));
  auto wc = drain(scq_);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WcStatus::success);

  // Step: a SEND whose bytes lie on a page the application unmapped.
  app_.unmap(5);
  ASSERT_EQ(engine().post_send(qpn, send_wr(WrOpcode::send, 2, {app_.addr(5 * kPage), 64, mr->lkey})), 0);
  at(now_);
  // Expect: nothing sent; the WR completes LOC_PROT_ERR, as a bad L_Key would.
  EXPECT_TRUE(sent().empty());
  wc = drain(scq_);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 2u);
  EXPECT_EQ(wc[0].status, WcStatus::loc_prot_err) << to_string(wc[0].status);
}

TEST_F(OdpTest, ReadResponseAndAtomicAckLandInOdpPages) {
  const uint32_t qpn = make_qp();
  Mr* mr = reg_odp();

  // Step: an RDMA READ of 100 bytes into the ODP region, then a FETCH_ADD whose original
  // value lands there.
  SendWr w = send_wr(WrOpcode::rdma_read, 1, {app_.addr(200), 100, mr->lkey});
  w.remote_addr = 0x9000;
  w.rkey = 0x4242;
  ASSERT_EQ(engine().post_send(qpn, w), 0);
  SendWr fa = send_wr(WrOpcode::atomic_fetch_and_add, 2, {app_.addr(512), 8, mr->lkey});
  fa.remote_addr = 0xa000;
  fa.rkey = 0x4242;
  fa.compare_add = 1;
  ASSERT_EQ(engine().post_send(qpn, fa), 0);
  at(now_);
  ASSERT_EQ(sent().size(), 2u);
  const auto data = pattern(100, 8);
  deliver(read_response(op::kReadResponseOnly, kS, 1), data);
  PacketHeaders ack_h = peer(op::kAtomicAcknowledge, psn(kS, 1));
  ack_h.ext.aeth = {kAckSyndrome, 2};
  ack_h.ext.atomic_ack_eth = {0x1122334455667788};
  deliver(ack_h);
  // Expect: both complete; the READ's bytes and the original value in the application's pages.
  auto wc = drain(scq_);
  ASSERT_EQ(wc.size(), 2u);
  EXPECT_EQ(wc[0].status, WcStatus::success);
  EXPECT_EQ(wc[1].status, WcStatus::success);
  EXPECT_EQ(slice(app_.bytes, 200, 100), data);
  EXPECT_EQ(app_.u64(512), 0x1122334455667788u);
  (void)qpn;
}

TEST_F(OdpTest, ImplicitOdpCoversTheWholeAddressSpace) {
  const uint32_t qpn = make_qp();
  // ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND | ...): va 0, every address.
  Mr* mr = nullptr;
  ASSERT_EQ(engine().reg_odp_mr(pd_, 0, UINT64_MAX, &app_, kAllAccess, &mr), 0);

  // Step: a WRITE anywhere the application maps, and one where it maps nothing.
  PacketHeaders h = peer(op::kWriteOnly, kE, true);
  h.ext.reth = {app_.addr(3 * kPage + 8), mr->rkey, 32};
  const auto data = pattern(32, 9);
  deliver(h, data);
  auto out = sent();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kE, kAckSyndrome, 1);
  EXPECT_EQ(slice(app_.bytes, 3 * kPage + 8, 32), data);

  h = peer(op::kWriteOnly, psn(kE, 1), true);
  h.ext.reth = {0x1000, mr->rkey, 32};  // inside the region, outside the application's mappings
  deliver(h, data);
  // Expect: NAK remote access error, the QP in ERR.
  expect_fatal_nak(qpn, psn(kE, 1), kNakRemoteAccess, 1);
}

TEST_F(OdpTest, AWindowBoundToAnOdpRegionReachesItsPages) {
  make_qp();
  Mr* mr = reg_odp(kAllAccess | kAccessMwBind);
  uint32_t rkey = 0;
  ASSERT_EQ(engine().alloc_mw(pd_, MwType::type1, &rkey), 0);
  MwBind b;
  b.mw_rkey = rkey;
  b.new_rkey = (rkey & ~0xffu) | 0x33;
  b.mr_lkey = mr->lkey;
  b.addr = app_.addr(2 * kPage);
  b.length = kPage;
  b.access = kAccessRemoteWrite;
  ASSERT_EQ(engine().mrs().bind_mw(b, pd_, 0), 0);

  // Step: a WRITE through the window's R_Key.
  PacketHeaders h = peer(op::kWriteOnly, kE, true);
  h.ext.reth = {app_.addr(2 * kPage + 40), b.new_rkey, 16};
  const auto data = pattern(16, 10);
  deliver(h, data);
  // Expect: ACK; the bytes in the region's page through the region's OdpMemory.
  auto out = sent();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kE, kAckSyndrome, 1);
  EXPECT_EQ(slice(app_.bytes, 2 * kPage + 40, 16), data);
}

}  // namespace
}  // namespace droce::test

namespace droce::test {
namespace {

TEST_F(OdpTest, PeerWriteWaitsForPagesThatAreNotInAndLandsWithoutANak) {
  const uint32_t qpn = make_qp();
  Mr* mr = reg_odp();
  app_.page_out(1);

  // Step: a three-packet WRITE from page 0 into page 1 (not in), then a WRITE ONLY behind it.
  const auto data = pattern(3000, 11);
  const uint64_t va = app_.addr(kPage - 1500);
  PacketHeaders first = peer(op::kWriteFirst, kE);
  first.ext.reth = {va, mr->rkey, 3000};
  PacketHeaders next = peer(op::kWriteOnly, psn(kE, 3), true);
  next.ext.reth = {app_.addr(100), mr->rkey, 16};
  deliver({{first, slice(data, 0, 1024)},
           {peer(op::kWriteMiddle, psn(kE, 1)), slice(data, 1024, 1024)},
           {peer(op::kWriteLast, psn(kE, 2), true), slice(data, 2048, 952)},
           {next, pattern(16, 12)}});
  // Expect: nothing to the peer (no NAK, no ACK); the first packet placed, the second waits
  // for page 1 (asked for writing), the rest behind it; the expected PSN stays at kE+1.
  EXPECT_TRUE(sent().empty());
  EXPECT_EQ(slice(app_.bytes, kPage - 1500, 1024), slice(data, 0, 1024));
  EXPECT_TRUE(app_.wanted_for_write);
  EXPECT_EQ(app_.last_ahead, 952u) << "the WRITE's rest is offered to the fault";
  EXPECT_EQ(epsn(qpn), psn(kE, 1));
  EXPECT_EQ(qp_counters(qpn).odp_page_waits, 1u);

  // Step: the timer comes while the page is still out.
  after_odp_wait();
  // Expect: still nothing sent; it waits again.
  EXPECT_TRUE(sent().empty());
  EXPECT_EQ(qp_counters(qpn).odp_page_waits, 2u);

  // Step: the page comes in; the timer (backed off to 32 us) comes again.
  app_.bring_in();
  after_odp_wait(40'000);
  // Expect: both WRITEs land and one coalesced ACK for kE+3 (MSN 2) answers them; the QP
  // is in RTS, no NAK was sent and no request was dropped.
  auto out = sent();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], psn(kE, 3), kAckSyndrome, 2);
  EXPECT_EQ(slice(app_.bytes, kPage - 1500, 3000), data);
  EXPECT_EQ(slice(app_.bytes, 100, 16), pattern(16, 12));
  EXPECT_EQ(state(qpn), QpState::rts);
  EXPECT_EQ(qp_counters(qpn).rnr_naks_sent, 0u);
  EXPECT_EQ(qp_counters(qpn).seq_naks_sent, 0u);
  EXPECT_EQ(qp_counters(qpn).dropped, 0u);
}

TEST_F(OdpTest, SendIntoAReceiveWhosePageIsNotInCompletesOnceItIs) {
  const uint32_t qpn = make_qp();
  Mr* mr = reg_odp();
  app_.page_out(2);
  ASSERT_EQ(engine().post_recv(qpn, recv_wr(1, {app_.addr(2 * kPage), 512, mr->lkey})), 0);
  ASSERT_EQ(engine().post_recv(qpn, recv_wr(2, {app_.addr(100), 512, mr->lkey})), 0);

  // Step: two SENDs; the first one's receive lies on page 2.
  deliver(peer(op::kSendOnly, kE, true), pattern(300, 13));
  deliver(peer(op::kSendOnly, psn(kE, 1), true), pattern(200, 14));
  // Expect: no answer (no RNR NAK: a receive is there), no completion yet.
  EXPECT_TRUE(sent().empty());
  EXPECT_TRUE(drain(rcq_).empty());

  // Step: the page comes in; the timer.
  app_.bring_in();
  after_odp_wait();
  // Expect: both SENDs completed in order into their receives, one ACK for kE+1.
  auto out = sent();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], psn(kE, 1), kAckSyndrome, 2);
  auto wc = drain(rcq_);
  ASSERT_EQ(wc.size(), 2u);
  EXPECT_EQ(wc[0].wr_id, 1u);
  EXPECT_EQ(wc[0].byte_len, 300u);
  EXPECT_EQ(wc[1].wr_id, 2u);
  EXPECT_EQ(wc[1].status, WcStatus::success);
  EXPECT_EQ(slice(app_.bytes, 2 * kPage, 300), pattern(300, 13));
  EXPECT_EQ(qp_counters(qpn).rnr_naks_sent, 0u);
}

TEST_F(OdpTest, ReadResponsesPauseAtAPageNotInAndResume) {
  const uint32_t qpn = make_qp();
  Mr* mr = reg_odp();
  for (size_t i = 0; i < app_.bytes.size(); ++i) app_.bytes[i] = static_cast<uint8_t>(i * 7);
  app_.page_out(1);

  // Step: a READ of 3000 bytes from page 0 into page 1, then a WRITE ONLY behind it.
  PacketHeaders rd = peer(op::kReadRequest, kE, true);
  rd.ext.reth = {app_.addr(kPage - 2048), mr->rkey, 3000};
  deliver(rd);
  PacketHeaders w = peer(op::kWriteOnly, psn(kE, 3), true);
  w.ext.reth = {app_.addr(5 * kPage), mr->rkey, 8};
  deliver(w, pattern(8, 15));
  // Expect: FIRST and MIDDLE (page 0) go out; the LAST waits for page 1 (asked for reading);
  // the WRITE waits behind the READ; no NAK.
  auto out = sent();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].opcode(), rc(op::kReadResponseFirst));
  EXPECT_EQ(out[1].opcode(), rc(op::kReadResponseMiddle));
  EXPECT_FALSE(app_.wanted_for_write);

  // Step: the page comes in; the timer.
  app_.bring_in();
  after_odp_wait();
  // Expect: READ RESPONSE LAST at kE+2 with the page's bytes, then the WRITE's ACK at kE+3.
  out = sent();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].opcode(), rc(op::kReadResponseLast));
  EXPECT_EQ(out[0].psn(), psn(kE, 2));
  EXPECT_EQ(out[0].payload(), slice(app_.bytes, kPage, 952));
  expect_ack(out[1], psn(kE, 3), kAckSyndrome, 2);
  EXPECT_EQ(state(qpn), QpState::rts);
}

TEST_F(OdpTest, AnAtomicOnAPageNotInIsDoneOnceWhenItIsIn) {
  const uint32_t qpn = make_qp();
  Mr* mr = reg_odp();
  app_.set_u64(3 * kPage, 40);
  app_.page_out(3);

  // Step: a FETCH_ADD +2 on page 3 (not in); the timer once while it is still out.
  PacketHeaders fa = peer(op::kFetchAdd, kE, true);
  fa.ext.atomic_eth = {app_.addr(3 * kPage), mr->rkey, 2, 0};
  deliver(fa);
  after_odp_wait();
  // Expect: no answer, nothing read or written.
  EXPECT_TRUE(sent().empty());
  EXPECT_EQ(app_.reads + app_.writes, 0u);

  // Step: the page comes in; the (backed-off) timer.
  app_.bring_in();
  after_odp_wait(40'000);
  // Expect: one ATOMIC ACK with the original 40; the memory holds 42.
  auto out = sent();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), rc(op::kAtomicAcknowledge));
  EXPECT_EQ(out[0].ext().atomic_ack_eth.orig, 40u);
  EXPECT_EQ(app_.u64(3 * kPage), 42u);
  EXPECT_EQ(state(qpn), QpState::rts);
}

TEST_F(OdpTest, RequesterWaitsToGatherFromAPageNotIn) {
  const uint32_t qpn = make_qp();
  Mr* mr = reg_odp();
  const auto data = pattern(600, 16);
  std::memcpy(app_.bytes.data() + 4 * kPage, data.data(), data.size());
  app_.page_out(4);

  // Step: a SEND from page 4 (not in).
  ASSERT_EQ(engine().post_send(qpn, send_wr(WrOpcode::send, 1, {app_.addr(4 * kPage), 600, mr->lkey})), 0);
  at(now_);
  // Expect: nothing sent yet; no PSN spent.
  EXPECT_TRUE(sent().empty());

  // Step: the page comes in; the timer.
  app_.bring_in();
  after_odp_wait();
  // Expect: SEND ONLY at kS with the bytes; acknowledged, it completes.
  auto out = sent();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), rc(op::kSendOnly));
  EXPECT_EQ(out[0].psn(), kS);
  EXPECT_EQ(out[0].payload(), data);
  deliver(ack(kS, kAckSyndrome, 1));
  auto wc = drain(scq_);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WcStatus::success);
  EXPECT_EQ(qp_counters(qpn).odp_page_waits, 1u);
}

TEST_F(OdpTest, AReadResponseForAPageNotInIsAskedForAgain) {
  const uint32_t qpn = make_qp();
  Mr* mr = reg_odp();
  app_.page_out(6);

  // Step: a READ of 100 bytes into page 6 (not in); its response arrives.
  SendWr w = send_wr(WrOpcode::rdma_read, 1, {app_.addr(6 * kPage), 100, mr->lkey});
  w.remote_addr = 0x9000;
  w.rkey = 0x4242;
  ASSERT_EQ(engine().post_send(qpn, w), 0);
  at(now_);
  ASSERT_EQ(sent().size(), 1u);
  const auto data = pattern(100, 17);
  deliver(read_response(op::kReadResponseOnly, kS, 1), data);
  // Expect: not placed, no completion.
  EXPECT_TRUE(drain(scq_).empty());
  EXPECT_TRUE(app_.wanted_for_write);

  // Step: the page comes in; the timer.
  app_.bring_in();
  after_odp_wait();
  // Expect: the READ asked for again, the same request (PSN kS, the whole range).
  auto out = sent();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), rc(op::kReadRequest));
  EXPECT_EQ(out[0].psn(), kS);
  EXPECT_EQ(out[0].ext().reth.dma_len, 100u);
  EXPECT_EQ(out[0].ext().reth.va, 0x9000u);

  // Step: its response again.
  deliver(read_response(op::kReadResponseOnly, kS, 1), data);
  // Expect: placed and completed; no retry was spent on the wait.
  auto wc = drain(scq_);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WcStatus::success);
  EXPECT_EQ(slice(app_.bytes, 6 * kPage, 100), data);
  EXPECT_EQ(qp_counters(qpn).timeouts, 0u);
}

TEST_F(OdpTest, PinnedRegionsAskNothing) {
  const uint32_t qpn = make_qp();
  auto buf = reg(4096);
  // Step: a WRITE into a pinned region while no ODP region exists, then while one does.
  PacketHeaders h = peer(op::kWriteOnly, kE, true);
  h.ext.reth = {buf->va(), buf->mr->rkey, 64};
  deliver(h, pattern(64, 18));
  reg_odp();
  h = peer(op::kWriteOnly, psn(kE, 1), true);
  h.ext.reth = {buf->va() + 64, buf->mr->rkey, 64};
  deliver(h, pattern(64, 19));
  // Expect: both acknowledged; the ODP accessor was never asked about pinned memory.
  EXPECT_EQ(sent().size(), 2u);
  EXPECT_EQ(app_.asked, 0u);
  (void)qpn;
}

}  // namespace
}  // namespace droce::test
