#pragma once
// Two engines joined by a simulated link, driven in virtual time: the
// harness for engine-pair tests and the soak. Host A is engine 0 on link end
// 0, host B engine 1 on end 1. Memory regions are plain heap buffers whose
// virtual address is their pointer.

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/clock.h"
#include "net/eal.h"
#include "net/sim_link.h"
#include "rocev2/engine.h"

namespace droce::test {

using namespace droce::rocev2;

/// The engine's port for one end of the link.
class LinkPort : public PacketPort {
 public:
  LinkPort(net::SimLink** link, int end, core::VirtualClock* clock) : link_(link), end_(end), clock_(clock) {}
  uint16_t tx_burst(rte_mbuf** frames, uint16_t n) override {
    if (capture != nullptr) {
      for (uint16_t i = 0; i < n; ++i) {
        std::vector<uint8_t> bytes;
        net::FrameBytes(frames[i]).for_each_piece(0, frames[i]->pkt_len, [&](const uint8_t* p, size_t k) {
          bytes.insert(bytes.end(), p, p + k);
        });
        capture->push_back(std::move(bytes));
      }
    }
    (*link_)->send(end_, frames, n, clock_->now_ns());
    sent_ += n;
    return n;
  }
  uint64_t sent() const { return sent_; }
  /// When set, a copy of every frame sent is appended here.
  std::vector<std::vector<uint8_t>>* capture = nullptr;

 private:
  net::SimLink** link_;
  int end_;
  core::VirtualClock* clock_;
  uint64_t sent_ = 0;
};

struct Host {
  std::unique_ptr<LinkPort> port;
  std::unique_ptr<Engine> engine;
  MacAddr mac{};
  IpAddr ip{};
  uint32_t pd = 0;
  Cq* scq = nullptr;
  Cq* rcq = nullptr;
};

/// A connected pair of QPs, one on each host.
struct QpPair {
  uint32_t a = 0;
  uint32_t b = 0;
};

class EnginePair {
 public:
  /// `seed` drives the link's faults. `pool` must outlive the pair.
  EnginePair(uint64_t seed, const net::LinkFaults& faults, rte_mempool* pool, bool ipv6 = false,
             EngineConfig base = {}) {
    link_ = std::make_unique<net::SimLink>(seed, faults, faults, pool);
    raw_link_ = link_.get();
    for (int i = 0; i < 2; ++i) {
      Host& h = host_[i];
      h.mac = {0x02, 0xd0, 0xce, 0, 0, uint8_t(i + 1)};
      if (ipv6) {
        h.ip = {0xfd, 0xd0, 0xce, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, uint8_t(i + 1)};
      } else {
        h.ip = ipv4_mapped(0xc0a86401 + uint32_t(i));  // never leaves the process
      }
      h.port = std::make_unique<LinkPort>(&raw_link_, i, &clock_);
      EngineConfig cfg = base;
      cfg.pool = pool;
      cfg.port = h.port.get();
      cfg.local_mac = h.mac;
      cfg.local_ip = h.ip;
      h.engine = std::make_unique<Engine>(cfg);
      EXPECT_EQ(h.engine->alloc_pd(&h.pd), 0);
      EXPECT_EQ(h.engine->create_cq(65536, &h.scq), 0);
      EXPECT_EQ(h.engine->create_cq(65536, &h.rcq), 0);
    }
  }
  ~EnginePair() {
    // Engines first (they may hold frames), then the link (frees frames in flight).
    for (auto& h : host_) h.engine.reset();
    link_.reset();
  }

  /// Copies every frame either engine sends into `frames`, in order sent.
  void capture_to(std::vector<std::vector<uint8_t>>* frames) {
    for (auto& h : host_) h.port->capture = frames;
  }

  Engine& a() { return *host_[0].engine; }
  Engine& b() { return *host_[1].engine; }
  Host& host(int i) { return host_[i]; }
  net::SimLink& link() { return *link_; }
  uint64_t now() const { return clock_.now_ns(); }

  AddressVector av_to(int to) const {
    AddressVector av;
    av.dgid = host_[to].ip;
    av.sgid = host_[1 - to].ip;
    av.dmac = host_[to].mac;
    av.smac = host_[1 - to].mac;
    return av;
  }

  struct RcOptions {
    QpType type = QpType::rc;
    uint32_t depth = 256;
    PathMtu mtu = PathMtu::mtu1024;
    uint8_t timeout = 14;     // 67 ms
    uint8_t retry_cnt = 7;
    uint8_t rnr_retry = 7;
    uint8_t min_rnr_timer = 1;  // 10 us
    uint8_t rd_atomic = 16;
    uint32_t access = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
    uint32_t psn_a = 0x100;
    uint32_t psn_b = 0x200;
    Srq* srq_b = nullptr;
    Cq* rcq_b = nullptr;  ///< B's receive CQ, when not the host's
    bool sq_sig_all = true;
  };

  /// Creates a QP on each host and brings both to RTS, connected.
  QpPair connect(const RcOptions& o) {
    QpPair p;
    uint32_t* qpn[2] = {&p.a, &p.b};
    for (int i = 0; i < 2; ++i) {
      Host& h = host_[i];
      QpInit init;
      init.type = o.type;
      init.pd = h.pd;
      init.send_cq = h.scq;
      init.recv_cq = (i == 1 && o.rcq_b) ? o.rcq_b : h.rcq;
      init.srq = i == 1 ? o.srq_b : nullptr;
      init.cap = {o.depth, o.depth, 4, 4, 128};
      init.sq_sig_all = o.sq_sig_all;
      EXPECT_EQ(h.engine->create_qp(init, qpn[i]), 0);
    }
    for (int i = 0; i < 2; ++i) {
      Engine& e = *host_[i].engine;
      const uint32_t me = *qpn[i];
      const uint32_t peer = *qpn[1 - i];
      QpAttr at;
      at.qp_state = QpState::init;
      at.pkey_index = 0;
      at.port_num = 1;
      at.qp_access_flags = o.access;
      at.qkey = 0x11111111;
      const uint32_t init_mask = kAttrState | kAttrPkeyIndex | kAttrPort |
                                 (o.type == QpType::ud ? kAttrQkey : kAttrAccessFlags);
      EXPECT_EQ(e.modify_qp(me, at, init_mask), 0);
      at = QpAttr{};
      at.qp_state = QpState::rtr;
      at.path_mtu = o.mtu;
      at.dest_qp_num = peer;
      at.rq_psn = i == 0 ? o.psn_b : o.psn_a;
      at.max_dest_rd_atomic = o.rd_atomic;
      at.min_rnr_timer = o.min_rnr_timer;
      at.ah_attr = av_to(1 - i);
      uint32_t rtr_mask = kAttrState;
      if (o.type == QpType::rc)
        rtr_mask |= kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn | kAttrMaxDestRdAtomic | kAttrMinRnrTimer;
      if (o.type == QpType::uc) rtr_mask |= kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn;
      EXPECT_EQ(e.modify_qp(me, at, rtr_mask), 0);
      at = QpAttr{};
      at.qp_state = QpState::rts;
      at.sq_psn = i == 0 ? o.psn_a : o.psn_b;
      at.timeout = o.timeout;
      at.retry_cnt = o.retry_cnt;
      at.rnr_retry = o.rnr_retry;
      at.max_rd_atomic = o.rd_atomic;
      uint32_t rts_mask = kAttrState | kAttrSqPsn;
      if (o.type == QpType::rc) rts_mask |= kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry | kAttrMaxQpRdAtomic;
      EXPECT_EQ(e.modify_qp(me, at, rts_mask), 0);
    }
    return p;
  }

  /// A registered buffer of `len` bytes on host i.
  struct Buf {
    std::vector<uint8_t> bytes;
    Mr* mr = nullptr;
    uint64_t va() const { return reinterpret_cast<uint64_t>(bytes.data()); }
    Sge sge(uint32_t off, uint32_t len) const { return {va() + off, len, mr->lkey}; }
  };
  std::shared_ptr<Buf> buffer(int i, size_t len, uint32_t access = kAccessLocalWrite | kAccessRemoteWrite |
                                                                     kAccessRemoteRead | kAccessRemoteAtomic,
                              bool invalidatable = false) {
    auto b = std::make_shared<Buf>();
    b->bytes.resize(len);
    EXPECT_EQ(host_[i].engine->reg_mr(host_[i].pd, b->va(), len, b->bytes.data(), access, &b->mr, invalidatable), 0);
    return b;
  }

  /// One loop: frames that have arrived go in, both engines poll.
  void step() {
    for (int i = 0; i < 2; ++i) {
      rte_mbuf* rx[64];
      uint16_t n;
      while ((n = link_->receive(i, rx, 64, clock_.now_ns())) != 0)
        host_[i].engine->rx_burst(rx, n, clock_.now_ns());
    }
    for (auto& h : host_) h.engine->poll(clock_.now_ns());
  }

  /// Runs until done() or `limit_ns` of virtual time pass. When nothing is
  /// due now, the clock jumps to the next arrival or timer. Returns done().
  /// A livelock (work at one instant forever) ends after max_steps loops.
  bool run_until(const std::function<bool()>& done, uint64_t limit_ns = 60'000'000'000ull,
                 uint64_t max_steps = 2'000'000) {
    const uint64_t end = clock_.now_ns() + limit_ns;
    while (!done()) {
      if (max_steps-- == 0) {
        ADD_FAILURE() << "livelock: still busy at t=" << clock_.now_ns() << "ns\n" << dump();
        return false;
      }
      step();
      if (done()) return true;
      if (host_[0].engine->has_tx_work() || host_[1].engine->has_tx_work()) continue;
      uint64_t next = link_->next_arrival_ns();
      for (auto& h : host_) next = std::min(next, h.engine->next_deadline());
      if (next == UINT64_MAX || next > end) return done();
      clock_.advance_to(std::max(next, clock_.now_ns() + 1));
    }
    return true;
  }

  /// Both engines' counters and QP states, for failure messages.
  std::string dump() {
    std::string s = "t=" + std::to_string(clock_.now_ns()) + "ns link a->b sent " +
                    std::to_string(link_->stats(0).sent) + " b->a sent " + std::to_string(link_->stats(1).sent) + "\n";
    for (int i = 0; i < 2; ++i) {
      const EngineCounters& c = host_[i].engine->counters();
      s += std::string(i ? "B" : "A") + ": rx " + std::to_string(c.rx_frames) + " tx " + std::to_string(c.tx_frames) +
           " unexpected " + std::to_string(c.rx_unexpected) + " bad_icrc " +
           std::to_string(c.parse[ParseStatus::bad_icrc]) + "\n";
      for (uint32_t qpn = 0x11; qpn < 0x11 + 64; ++qpn) {
        Qp* q = host_[i].engine->qp(qpn);
        if (q == nullptr) continue;
        const QpCounters& k = q->counters;
        s += "  qp " + std::to_string(qpn) + " " + to_string(q->state) + " sq " + std::to_string(q->sq_tail) + "/" +
             std::to_string(q->req.next_wqe) + "/" + std::to_string(q->sq_head) + " npsn " +
             std::to_string(q->req.next_psn) + " unacked " + std::to_string(q->req.unacked_psn) + " epsn " +
             std::to_string(q->resp.epsn) + " tx " + std::to_string(k.tx_packets) + " rx " +
             std::to_string(k.rx_packets) + " retx " + std::to_string(k.retransmits) + " dup " +
             std::to_string(k.duplicate_requests) + " oos " + std::to_string(k.out_of_sequence) + " implied " +
             std::to_string(k.implied_naks) + " replays " + std::to_string(k.read_replays) + " seqnak " +
             std::to_string(k.seq_naks_sent) + "/" + std::to_string(k.seq_naks_received) + " rnr " +
             std::to_string(k.rnr_naks_sent) + "/" + std::to_string(k.rnr_naks_received) + " dropped " +
             std::to_string(k.dropped) + "\n";
      }
    }
    return s;
  }

  /// Polls a CQ into `out` until it holds `n` completions or time runs out.
  bool wait_completions(Cq* cq, std::vector<Completion>* out, size_t n, uint64_t limit_ns = 60'000'000'000ull) {
    return run_until(
        [&] {
          Completion c[64];
          uint32_t k;
          while ((k = cq->poll(c, 64)) != 0) out->insert(out->end(), c, c + k);
          return out->size() >= n;
        },
        limit_ns);
  }

 private:
  core::VirtualClock clock_;
  std::unique_ptr<net::SimLink> link_;
  net::SimLink* raw_link_ = nullptr;
  Host host_[2];
};

}  // namespace droce::test
