// droce-selftest: verbs traffic between two droce devices through the client
// library (provider/client), with every byte and value checked. Each device
// is a droced (two hosts), or both names one droced (two clients of one host).
//
//   droce-selftest --a /run/droceA/droce0.sock --b /run/droceB/droce0.sock
//       [--qps N] [--size BYTES] [--iters N] [--gid-index I] [--mtu 256..4096|port]
//       [--bench [--bench-ms MS]] [--hold-seconds S] [--quiet]
//
// Default: RC SEND, SEND with immediate, inline SEND, WRITE, WRITE with
// immediate, READ, compare-and-swap and fetch-and-add (on the very memory the
// application registered), an SRQ receive, then UD SEND both ways, then
// --qps RC pairs with traffic on all of them at once.
// --bench: 64 B and 64 KiB WRITE and SEND, one QP and --qps QPs, message rate
// and bandwidth (bench/droced_pair.sh prints them); --bench-ms: each line's length (2000), so
// a test that wants the traffic and not the figure spends less.
// --hold-seconds: after the checks, keep sending on every QP for S seconds
// (the kill tests SIGKILL it then).

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/capabilities.h"
#include "core/clock.h"
#include "provider/client/client.h"
#include "rocev2/format.h"
#include "rocev2/verbs.h"

namespace {

using namespace droce;
using namespace droce::rocev2;
using client::Context;

struct Options {
  std::string sock[2];
  uint32_t qps = 16;
  uint32_t size = 64 * 1024;
  uint32_t iters = 4;
  uint32_t gid_index = 1;
  PathMtu mtu = PathMtu::mtu1024;
  bool mtu_port = false;  ///< --mtu port: the smaller of the two ports' active MTUs
  bool bench = false;
  uint32_t bench_ms = 2000;
  bool quiet = false;
  uint32_t hold_seconds = 0;
};

Options g_opt;
int g_failures = 0;

void report(bool ok, const char* what, const std::string& detail = {}) {
  if (!ok) ++g_failures;
  if (!ok || !g_opt.quiet) std::printf("%s  %s%s%s\n", ok ? "PASS" : "FAIL", what, detail.empty() ? "" : ": ", detail.c_str());
  std::fflush(stdout);
}

struct Side {
  std::unique_ptr<Context> ctx;
  uint32_t pd = 0;
  client::Cq* cq = nullptr;
  uint8_t* mem = nullptr;
  size_t mem_len = 0;
  uint32_t lkey = 0, rkey = 0;
  net::IpAddr gid{};
};

Side g_side[2];

// Polls until a completion arrives or 10 s pass.
bool wait_one(client::Cq* cq, Completion* c, uint64_t limit_ns = 10'000'000'000ull) {
  const uint64_t end = core::monotonic_ns() + limit_ns;
  for (;;) {
    const int n = cq->poll(c, 1);
    if (n == 1) return true;
    if (n < 0 || core::monotonic_ns() > end) return false;
  }
}

std::string status_text(const Completion& c) {
  char b[96];
  std::snprintf(b, sizeof b, "status %s, opcode %u, %u bytes", to_string(c.status), unsigned(c.opcode), c.byte_len);
  return b;
}

bool expect_completion(int side, WcStatus want_status, const char* what, Completion* out = nullptr) {
  Completion c;
  if (!wait_one(g_side[side].cq, &c)) {
    report(false, what, "no completion within 10 s");
    return false;
  }
  if (out) *out = c;
  if (c.status != want_status) {
    report(false, what, status_text(c));
    return false;
  }
  return true;
}

int open_side(int i) {
  Side& s = g_side[i];
  if (int rc = Context::open(g_opt.sock[i], &s.ctx); rc != 0) {
    std::fprintf(stderr, "droce-selftest: cannot open %s: %s\n", g_opt.sock[i].c_str(), std::strerror(-rc));
    return rc;
  }
  abi::ctl::QueryGidReply g{};
  if (int rc = s.ctx->query_gid(1, g_opt.gid_index, &g); rc != 0) {
    std::fprintf(stderr, "droce-selftest: %s has no GID %u\n", g_opt.sock[i].c_str(), g_opt.gid_index);
    return rc;
  }
  std::memcpy(s.gid.data(), g.gid, 16);
  if (g_opt.mtu_port) {
    abi::ctl::QueryPortReply p{};
    if (int rc = s.ctx->query_port(1, &p); rc != 0) return rc;
    const auto active = static_cast<PathMtu>(p.active_mtu);
    if (i == 0 || active < g_opt.mtu) g_opt.mtu = active;
  }
  if (int rc = s.ctx->alloc_pd(&s.pd); rc != 0) return rc;
  if (int rc = s.ctx->create_cq(4096, &s.cq); rc != 0) return rc;
  s.mem_len = size_t{g_opt.size} * 4 + 4096;
  // Plain heap memory, as applications register it.
  s.mem = static_cast<uint8_t*>(std::aligned_alloc(64, (s.mem_len + 63) & ~size_t{63}));
  std::memset(s.mem, 0, s.mem_len);
  return s.ctx->reg_mr(s.pd, s.mem, s.mem_len,
                       kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic, &s.lkey,
                       &s.rkey);
}

client::Qp* make_qp(int side, QpType type, client::Srq* srq = nullptr, uint32_t depth = 256) {
  client::QpCreate c;
  c.type = type;
  c.pd = g_side[side].pd;
  c.send_cq = c.recv_cq = g_side[side].cq;
  c.srq = srq;
  c.cap = {depth, depth, 4, 4, 128};
  c.sq_sig_all = true;
  client::Qp* qp = nullptr;
  if (int rc = g_side[side].ctx->create_qp(c, &qp); rc != 0) {
    report(false, "create_qp", std::strerror(-rc));
    return nullptr;
  }
  return qp;
}

// RESET -> INIT -> RTR -> RTS against a peer QP (RC/UC), or to RTS (UD).
bool connect(int side, client::Qp* qp, uint32_t peer_qpn) {
  Context& ctx = *g_side[side].ctx;
  QpAttr a;
  a.qp_state = QpState::init;
  a.port_num = 1;
  a.qkey = 0x11111111;
  a.qp_access_flags = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
  const bool ud = qp->type() == QpType::ud;
  int rc = ctx.modify_qp(qp, a, kAttrState | kAttrPkeyIndex | kAttrPort | (ud ? kAttrQkey : kAttrAccessFlags));
  a = QpAttr{};
  a.qp_state = QpState::rtr;
  uint32_t mask = kAttrState;
  if (!ud) {
    a.path_mtu = g_opt.mtu;
    a.dest_qp_num = peer_qpn;
    a.rq_psn = 100;
    a.max_dest_rd_atomic = 8;
    a.min_rnr_timer = 12;
    a.ah_attr.dgid = g_side[1 - side].gid;
    a.ah_attr.sgid_index = static_cast<uint8_t>(g_opt.gid_index);
    mask |= kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn;
    if (qp->type() == QpType::rc) mask |= kAttrMaxDestRdAtomic | kAttrMinRnrTimer;
  }
  if (rc == 0) rc = ctx.modify_qp(qp, a, mask);
  a = QpAttr{};
  a.qp_state = QpState::rts;
  a.sq_psn = 100;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 8;
  mask = kAttrState | kAttrSqPsn;
  if (qp->type() == QpType::rc) mask |= kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry | kAttrMaxQpRdAtomic;
  if (rc == 0) rc = ctx.modify_qp(qp, a, mask);
  if (rc != 0) report(false, "modify_qp to RTS", std::strerror(-rc));
  return rc == 0;
}

Sge sge(int side, size_t off, uint32_t len) {
  return Sge{reinterpret_cast<uint64_t>(g_side[side].mem + off), len, g_side[side].lkey};
}
uint64_t raddr(int side, size_t off) { return reinterpret_cast<uint64_t>(g_side[side].mem + off); }

void fill(int side, size_t off, size_t len, uint32_t seed) {
  std::mt19937 rng(seed);
  for (size_t k = 0; k < len; ++k) g_side[side].mem[off + k] = static_cast<uint8_t>(rng());
}

bool same(int a, size_t aoff, int b, size_t boff, size_t len) {
  return std::memcmp(g_side[a].mem + aoff, g_side[b].mem + boff, len) == 0;
}

void rc_checks() {
  client::Qp* qa = make_qp(0, QpType::rc);
  client::Qp* qb = make_qp(1, QpType::rc);
  if (!qa || !qb || !connect(0, qa, qb->qpn()) || !connect(1, qb, qa->qpn())) return;
  const uint32_t n = g_opt.size;
  char what[96];

  // SEND (and with immediate), A -> B.
  for (int imm = 0; imm < 2; ++imm) {
    fill(0, 0, n, 1 + imm);
    RecvWr r;
    r.wr_id = 7;
    r.num_sge = 1;
    r.sg_list[0] = sge(1, n, n);
    SendWr w;
    w.wr_id = 8;
    w.opcode = imm ? WrOpcode::send_with_imm : WrOpcode::send;
    w.imm_data = 0xdeadbeef;
    w.num_sge = 1;
    w.sg_list[0] = sge(0, 0, n);
    std::snprintf(what, sizeof what, "RC SEND%s %u bytes", imm ? " with immediate" : "", n);
    if (qb->post_recv(r) != 0 || qa->post_send(w) != 0) {
      report(false, what, "post failed");
      continue;
    }
    Completion rc;
    if (!expect_completion(1, WcStatus::success, what, &rc) || !expect_completion(0, WcStatus::success, what)) continue;
    const bool ok = rc.byte_len == n && rc.wr_id == 7 && same(0, 0, 1, n, n) &&
                    (!imm || ((rc.wc_flags & kWcWithImm) && rc.imm_data == 0xdeadbeef));
    report(ok, what, ok ? "" : status_text(rc));
  }

  // Inline SEND: the bytes travel in the WQE.
  {
    fill(0, 0, 100, 9);
    RecvWr r;
    r.num_sge = 1;
    r.sg_list[0] = sge(1, n, 128);
    SendWr w;
    w.opcode = WrOpcode::send;
    w.send_flags = kSendInline;
    w.num_sge = 1;
    w.sg_list[0] = sge(0, 0, 100);
    const bool posted = qb->post_recv(r) == 0 && qa->post_send(w) == 0;
    std::memset(g_side[0].mem, 0, 100);  // the WQE has its own copy now
    fill(0, 4 * size_t{n}, 100, 9);
    if (posted && expect_completion(1, WcStatus::success, "RC inline SEND") &&
        expect_completion(0, WcStatus::success, "RC inline SEND"))
      report(same(0, 4 * size_t{n}, 1, n, 100), "RC inline SEND 100 bytes");
    else if (!posted)
      report(false, "RC inline SEND", "post failed");
  }

  // WRITE, A writes B's memory; then WRITE with immediate.
  for (int imm = 0; imm < 2; ++imm) {
    fill(0, 0, n, 20 + imm);
    SendWr w;
    w.opcode = imm ? WrOpcode::rdma_write_with_imm : WrOpcode::rdma_write;
    w.imm_data = 0x1234;
    w.num_sge = 1;
    w.sg_list[0] = sge(0, 0, n);
    w.remote_addr = raddr(1, 2 * size_t{n});
    w.rkey = g_side[1].rkey;
    RecvWr r;
    std::snprintf(what, sizeof what, "RC WRITE%s %u bytes", imm ? " with immediate" : "", n);
    if ((imm && qb->post_recv(r) != 0) || qa->post_send(w) != 0) {
      report(false, what, "post failed");
      continue;
    }
    if (!expect_completion(0, WcStatus::success, what)) continue;
    Completion rc;
    if (imm && !expect_completion(1, WcStatus::success, what, &rc)) continue;
    report(same(0, 0, 1, 2 * size_t{n}, n) && (!imm || rc.imm_data == 0x1234), what);
  }

  // READ: A reads B's memory.
  {
    fill(1, 3 * size_t{n}, n, 30);
    SendWr w;
    w.opcode = WrOpcode::rdma_read;
    w.num_sge = 1;
    w.sg_list[0] = sge(0, n, n);
    w.remote_addr = raddr(1, 3 * size_t{n});
    w.rkey = g_side[1].rkey;
    std::snprintf(what, sizeof what, "RC READ %u bytes", n);
    if (qa->post_send(w) == 0 && expect_completion(0, WcStatus::success, what))
      report(same(0, n, 1, 3 * size_t{n}, n), what);
  }

  // Atomics on B's registered heap memory: B's program sees the result in
  // its own variable, because droced acted on the same pages.
  {
    auto* target = reinterpret_cast<uint64_t*>(g_side[1].mem + 4 * size_t{n});
    *target = 1000;
    SendWr w;
    w.opcode = WrOpcode::atomic_fetch_and_add;
    w.compare_add = 234;
    w.num_sge = 1;
    w.sg_list[0] = sge(0, 8, 8);
    w.remote_addr = raddr(1, 4 * size_t{n});
    w.rkey = g_side[1].rkey;
    auto* old = reinterpret_cast<uint64_t*>(g_side[0].mem + 8);
    *old = 0;
    if (qa->post_send(w) == 0 && expect_completion(0, WcStatus::success, "RC FETCH_ADD"))
      report(*old == 1000 && *target == 1234, "RC FETCH_ADD: B's variable went 1000 -> 1234, A got 1000");
    w.opcode = WrOpcode::atomic_cmp_and_swp;
    w.compare_add = 1234;
    w.swap = 0xabcdef;
    if (qa->post_send(w) == 0 && expect_completion(0, WcStatus::success, "RC CMP_SWAP"))
      report(*old == 1234 && *target == 0xabcdef, "RC CMP_SWAP: B's variable swapped to 0xabcdef");
  }

  // An access error: a WRITE with a wrong R_Key fails with the status the
  // specification gives, and the QP goes to error.
  {
    SendWr w;
    w.opcode = WrOpcode::rdma_write;
    w.num_sge = 1;
    w.sg_list[0] = sge(0, 0, 64);
    w.remote_addr = raddr(1, 0);
    w.rkey = g_side[1].rkey ^ 0x5500;
    Completion c;
    if (qa->post_send(w) == 0 && expect_completion(0, WcStatus::rem_access_err, "RC WRITE with a bad R_Key", &c))
      report(true, "RC WRITE with a bad R_Key: remote access error");
  }
  g_side[0].ctx->destroy_qp(qa);
  g_side[1].ctx->destroy_qp(qb);
  Completion drain[64];
  for (auto& s : g_side)
    while (s.cq->poll(drain, 64) > 0) {
    }
}

void srq_check() {
  client::Srq* srq = nullptr;
  if (int rc = g_side[1].ctx->create_srq(g_side[1].pd, 64, 2, 0, &srq); rc != 0) {
    report(false, "create_srq", std::strerror(-rc));
    return;
  }
  client::Qp* qa = make_qp(0, QpType::rc);
  client::Qp* qb = make_qp(1, QpType::rc, srq);
  if (!qa || !qb || !connect(0, qa, qb->qpn()) || !connect(1, qb, qa->qpn())) return;
  fill(0, 0, 3000, 77);
  RecvWr r;
  r.wr_id = 55;
  r.num_sge = 2;
  r.sg_list[0] = sge(1, 0, 1000);
  r.sg_list[1] = sge(1, 1000, 3000);
  SendWr w;
  w.opcode = WrOpcode::send;
  w.num_sge = 1;
  w.sg_list[0] = sge(0, 0, 3000);
  Completion c;
  if (srq->post_recv(r) == 0 && qa->post_send(w) == 0 && expect_completion(1, WcStatus::success, "SRQ", &c) &&
      expect_completion(0, WcStatus::success, "SRQ"))
    report(c.wr_id == 55 && c.byte_len == 3000 && same(0, 0, 1, 0, 3000), "RC SEND into an SRQ (two SGEs)");
  g_side[0].ctx->destroy_qp(qa);
  g_side[1].ctx->destroy_qp(qb);
  g_side[1].ctx->destroy_srq(srq);
}

void ud_checks() {
  client::Qp* q[2] = {make_qp(0, QpType::ud), make_qp(1, QpType::ud)};
  if (!q[0] || !q[1] || !connect(0, q[0], 0) || !connect(1, q[1], 0)) return;
  for (int from = 0; from < 2; ++from) {
    const int to = 1 - from;
    AddressVector av;
    av.dgid = g_side[to].gid;
    av.sgid_index = static_cast<uint8_t>(g_opt.gid_index);
    uint32_t ah = 0;
    if (int rc = g_side[from].ctx->create_ah(g_side[from].pd, av, &ah); rc != 0) {
      report(false, "create_ah", std::strerror(-rc));
      return;
    }
    const uint32_t len = 512;
    fill(from, 0, len, 40 + from);
    RecvWr r;
    r.num_sge = 1;
    r.sg_list[0] = sge(to, 0, 40 + len);  // the GRH comes first
    SendWr w;
    w.opcode = WrOpcode::send;
    w.num_sge = 1;
    w.sg_list[0] = sge(from, 0, len);
    w.ah = ah;
    w.remote_qpn = q[to]->qpn();
    w.remote_qkey = 0x11111111;
    Completion c;
    char what[64];
    std::snprintf(what, sizeof what, "UD SEND %u bytes %c -> %c", len, "AB"[from], "AB"[to]);
    if (q[to]->post_recv(r) == 0 && q[from]->post_send(w) == 0 && expect_completion(to, WcStatus::success, what, &c) &&
        expect_completion(from, WcStatus::success, what))
      report(c.byte_len == 40 + len && c.src_qp == q[from]->qpn() && same(from, 0, to, 40, len), what);
    g_side[from].ctx->destroy_ah(ah);
  }
  g_side[0].ctx->destroy_qp(q[0]);
  g_side[1].ctx->destroy_qp(q[1]);

  // A controlled Q_Key (top bit set; QP1's 0x80010000 is one) is for privileged programs only
  // (IBA 10.2.5; Linux asks CAP_NET_RAW): refused with EPERM otherwise, taken when privileged.
  client::Qp* u = make_qp(0, QpType::ud);
  if (u == nullptr) return;
  QpAttr a;
  a.qp_state = QpState::init;
  a.port_num = 1;
  a.qkey = 0x80010000;
  const int rc = g_side[0].ctx->modify_qp(u, a, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrQkey);
  const bool privileged = core::process_has_capability(::getpid(), core::kCapNetRaw);
  report(privileged ? rc == 0 : rc == -EPERM,
         privileged ? "UD QP with a controlled Q_Key, as a privileged program: taken"
                    : "UD QP with a controlled Q_Key, as an unprivileged program: EPERM",
         rc == 0 ? "taken" : std::strerror(-rc));
  g_side[0].ctx->destroy_qp(u);
}

// Many RC pairs at once: every QP sends one message to its peer and writes
// a distinct pattern, all posted before any completion is reaped.
struct Pair {
  client::Qp* a = nullptr;
  client::Qp* b = nullptr;
};

bool make_pairs(uint32_t count, std::vector<Pair>* pairs) {
  pairs->resize(count);
  for (auto& p : *pairs) {
    p.a = make_qp(0, QpType::rc, nullptr, 64);
    p.b = make_qp(1, QpType::rc, nullptr, 64);
    if (!p.a || !p.b || !connect(0, p.a, p.b->qpn()) || !connect(1, p.b, p.a->qpn())) return false;
  }
  return true;
}

void many_qps() {
  std::vector<Pair> pairs;
  const uint32_t count = g_opt.qps;
  if (!make_pairs(count, &pairs)) return;
  const uint32_t len = 256;
  // Slots: A's send buffer per pair at [0, count*len); B's receive buffers at
  // the same offsets; WRITE targets in B at 2*size + i*len.
  if (size_t{count} * len * 2 > g_side[0].mem_len / 2) {
    report(false, "many QPs", "--size too small for --qps");
    return;
  }
  for (uint32_t i = 0; i < count; ++i) fill(0, size_t{i} * len, len, 1000 + i);
  uint32_t posted = 0;
  for (uint32_t i = 0; i < count; ++i) {
    RecvWr r;
    r.wr_id = i;
    r.num_sge = 1;
    r.sg_list[0] = sge(1, size_t{i} * len, len);
    SendWr s;
    s.wr_id = i;
    s.opcode = WrOpcode::send;
    s.num_sge = 1;
    s.sg_list[0] = sge(0, size_t{i} * len, len);
    SendWr w = s;
    w.opcode = WrOpcode::rdma_write;
    w.remote_addr = raddr(1, size_t{count} * len + size_t{i} * len);
    w.rkey = g_side[1].rkey;
    if (pairs[i].b->post_recv(r) == 0 && pairs[i].a->post_send(s) == 0 && pairs[i].a->post_send(w) == 0) ++posted;
  }
  // Reap: 2 send completions per pair on A, 1 receive per pair on B.
  uint32_t got[2] = {0, 0}, bad = 0;
  const uint64_t end = core::monotonic_ns() + 60'000'000'000ull;
  Completion c[64];
  while ((got[0] < 2 * posted || got[1] < posted) && core::monotonic_ns() < end) {
    for (int s = 0; s < 2; ++s) {
      const int n = g_side[s].cq->poll(c, 64);
      for (int k = 0; k < n; ++k) {
        ++got[s];
        if (c[k].status != WcStatus::success) ++bad;
      }
    }
  }
  bool data_ok = true;
  for (uint32_t i = 0; i < count && data_ok; ++i)
    data_ok = same(0, size_t{i} * len, 1, size_t{i} * len, len) &&
              same(0, size_t{i} * len, 1, size_t{count} * len + size_t{i} * len, len);
  char what[128];
  std::snprintf(what, sizeof what, "%u RC QP pairs: a SEND and a WRITE on each, all in flight together", count);
  char detail[128];
  std::snprintf(detail, sizeof detail, "posted %u, completions %u/%u and %u/%u, %u errors, data %s", posted, got[0],
                2 * posted, got[1], posted, bad, data_ok ? "ok" : "WRONG");
  report(posted == count && got[0] == 2 * count && got[1] == count && bad == 0 && data_ok, what,
         g_opt.quiet ? detail : std::string(detail));
  if (g_opt.hold_seconds != 0) {
    // Keep traffic going on every QP (WRITEs) until the end, or a kill.
    const uint64_t stop = core::monotonic_ns() + uint64_t{g_opt.hold_seconds} * 1'000'000'000ull;
    std::printf("holding traffic for %u s\n", g_opt.hold_seconds);
    std::fflush(stdout);
    while (core::monotonic_ns() < stop) {
      for (uint32_t i = 0; i < count; ++i) {
        SendWr w;
        w.opcode = WrOpcode::rdma_write;
        w.num_sge = 1;
        w.sg_list[0] = sge(0, size_t{i} * len, len);
        w.remote_addr = raddr(1, size_t{count} * len + size_t{i} * len);
        w.rkey = g_side[1].rkey;
        (void)pairs[i].a->post_send(w);
      }
      for (auto& s : g_side)
        while (s.cq->poll(c, 64) > 0) {
        }
    }
  }
  for (auto& p : pairs) {
    g_side[0].ctx->destroy_qp(p.a);
    g_side[1].ctx->destroy_qp(p.b);
  }
  for (auto& s : g_side)
    while (s.cq->poll(c, 64) > 0) {
    }
}

// ---- Benchmarks --------------------------------------------------------------

void bench_one(WrOpcode op, uint32_t len, std::vector<Pair>& pairs, uint32_t nqps) {
  const uint32_t depth = 64;
  const uint64_t duration = uint64_t{g_opt.bench_ms} * 1'000'000;
  std::vector<uint32_t> inflight(nqps, 0);
  uint64_t done = 0, errors = 0;
  Completion c[64];
  const bool send = op == WrOpcode::send;
  // Receives for SENDs: keep each B QP stocked. They take the largest
  // message, since the ones left over from one line serve the next.
  auto post_recvs = [&](uint32_t i, uint32_t k) {
    for (uint32_t j = 0; j < k; ++j) {
      RecvWr r;
      r.num_sge = 1;
      r.sg_list[0] = sge(1, 0, g_opt.size);
      (void)pairs[i].b->post_recv(r);
    }
  };
  if (send)
    for (uint32_t i = 0; i < nqps; ++i) post_recvs(i, depth);
  const uint64_t start = core::monotonic_ns();
  uint64_t now = start;
  while (now - start < duration) {
    for (uint32_t i = 0; i < nqps; ++i) {
      while (inflight[i] < depth / 2) {
        SendWr w;
        w.wr_id = i;
        w.opcode = op;
        w.num_sge = 1;
        w.sg_list[0] = sge(0, 0, len);
        w.remote_addr = raddr(1, 0);
        w.rkey = g_side[1].rkey;
        if (pairs[i].a->post_send(w) != 0) break;
        ++inflight[i];
      }
    }
    const int n = g_side[0].cq->poll(c, 64);
    for (int k = 0; k < n; ++k) {
      --inflight[c[k].wr_id];
      if (c[k].status == WcStatus::success) ++done;
      else if (errors++ == 0) std::printf("  first error: %s\n", to_string(c[k].status));
    }
    if (send) {
      const int m = g_side[1].cq->poll(c, 64);
      for (int k = 0; k < m; ++k) post_recvs(static_cast<uint32_t>(c[k].qp_num - pairs[0].b->qpn()) < nqps
                                                 ? static_cast<uint32_t>(c[k].qp_num - pairs[0].b->qpn())
                                                 : 0,
                                             1);
    }
    now = core::monotonic_ns();
  }
  // Drain what is in flight.
  const uint64_t end = core::monotonic_ns() + 5'000'000'000ull;
  uint64_t left = 0;
  for (uint32_t v : inflight) left += v;
  while (left > 0 && core::monotonic_ns() < end) {
    const int n = g_side[0].cq->poll(c, 64);
    left -= static_cast<uint64_t>(n > 0 ? n : 0);
    if (send)
      while (g_side[1].cq->poll(c, 64) > 0) {
      }
  }
  while (g_side[1].cq->poll(c, 64) > 0) {
  }
  const double secs = static_cast<double>(now - start) / 1e9;
  if (errors != 0) {
    std::printf("%-6s %6u B  %4u QP  %" PRIu64 " completions with errors: no figure\n",
                op == WrOpcode::send ? "SEND" : "WRITE", len, nqps, errors);
    ++g_failures;
    return;
  }
  std::printf("%-6s %6u B  %4u QP  %10.0f msg/s  %9.1f MB/s  %10.2f Gbit/s\n", op == WrOpcode::send ? "SEND" : "WRITE",
              len, nqps, static_cast<double>(done) / secs, static_cast<double>(done) * len / secs / 1e6,
              static_cast<double>(done) * len * 8 / secs / 1e9);
  std::fflush(stdout);
}

// The cost of waking droced: one 64-byte RDMA WRITE at a time, from post to
// its completion, back to back (the daemons busy-poll) and after 5 ms of
// quiet (both have gone to sleep: A is woken by the doorbell's eventfd, B by
// the frame's arrival, seen when its sleep ends unless the port interrupts).
void bench_wakeup(std::vector<Pair>& pairs) {
  auto one = [&]() -> uint64_t {
    SendWr w;
    w.opcode = WrOpcode::rdma_write;
    w.num_sge = 1;
    w.sg_list[0] = sge(0, 0, 64);
    w.remote_addr = raddr(1, 0);
    w.rkey = g_side[1].rkey;
    const uint64_t t0 = core::monotonic_ns();
    if (pairs[0].a->post_send(w) != 0) return UINT64_MAX;
    Completion c;
    if (!wait_one(g_side[0].cq, &c) || c.status != WcStatus::success) return UINT64_MAX;
    return core::monotonic_ns() - t0;
  };
  for (int idle = 0; idle < 2; ++idle) {
    std::vector<uint64_t> t;
    const int n = idle ? 200 : 2000;
    for (int i = 0; i < n; ++i) {
      if (idle) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      const uint64_t ns = one();
      if (ns == UINT64_MAX) {
        std::printf("  wake-up bench: a WRITE failed\n");
        return;
      }
      t.push_back(ns);
    }
    std::sort(t.begin(), t.end());
    std::printf("  WRITE 64 B post->completion, %-22s median %7.1f us  p90 %7.1f us  p99 %7.1f us\n",
                idle ? "after 5 ms idle (asleep):" : "back to back (busy):", t[t.size() / 2] / 1e3,
                t[t.size() * 9 / 10] / 1e3, t[t.size() * 99 / 100] / 1e3);
  }
}

void bench() {
  std::vector<Pair> pairs;
  if (!make_pairs(g_opt.qps, &pairs)) return;
  std::printf("droce-selftest --bench: client library over two droced, %.1f s per line\n", g_opt.bench_ms / 1e3);
  bench_wakeup(pairs);
  for (WrOpcode op : {WrOpcode::rdma_write, WrOpcode::send})
    for (uint32_t len : {64u, 65536u})
      for (uint32_t n : {1u, g_opt.qps}) {
        if (len > g_opt.size) continue;
        bench_one(op, len, pairs, n);
      }
}

}  // namespace

int main(int argc, char** argv) {
  auto usage = [] {
    std::fprintf(stderr,
                 "usage: droce-selftest --a SOCKET --b SOCKET [--qps N] [--size BYTES] [--gid-index I]\n"
                 "                      [--mtu 256..4096|port] [--bench [--bench-ms MS]] [--hold-seconds S]\n"
                 "                      [--quiet]\n");
    return 2;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--a") g_opt.sock[0] = next();
    else if (a == "--b") g_opt.sock[1] = next();
    else if (a == "--qps") g_opt.qps = static_cast<uint32_t>(std::strtoul(next(), nullptr, 0));
    else if (a == "--size") g_opt.size = static_cast<uint32_t>(std::strtoul(next(), nullptr, 0));
    else if (a == "--iters") g_opt.iters = static_cast<uint32_t>(std::strtoul(next(), nullptr, 0));
    else if (a == "--gid-index") g_opt.gid_index = static_cast<uint32_t>(std::strtoul(next(), nullptr, 0));
    else if (a == "--mtu") {
      const std::string v = next();
      g_opt.mtu_port = v == "port";
      bool known = g_opt.mtu_port;
      for (auto m : {PathMtu::mtu256, PathMtu::mtu512, PathMtu::mtu1024, PathMtu::mtu2048, PathMtu::mtu4096})
        if (v == std::to_string(mtu_bytes(m))) g_opt.mtu = m, known = true;
      if (!known) return usage();
    }
    else if (a == "--bench") g_opt.bench = true;
    else if (a == "--bench-ms") g_opt.bench_ms = static_cast<uint32_t>(std::strtoul(next(), nullptr, 0));
    else if (a == "--quiet") g_opt.quiet = true;
    else if (a == "--hold-seconds") g_opt.hold_seconds = static_cast<uint32_t>(std::strtoul(next(), nullptr, 0));
    else return usage();
  }
  if (g_opt.sock[0].empty() || g_opt.sock[1].empty() || g_opt.qps == 0 || g_opt.size < 4096 || g_opt.bench_ms == 0) {
    std::fprintf(stderr, "droce-selftest: --a and --b are required; --qps >= 1; --size >= 4096; --bench-ms >= 1\n");
    return 2;
  }
  for (int i = 0; i < 2; ++i)
    if (open_side(i) != 0) return 1;
  if (!g_opt.quiet)
    std::printf("A: %s (%s)   B: %s (%s)   path MTU %u\n", g_side[0].ctx->info().device_name,
                format_ip(g_side[0].gid).c_str(), g_side[1].ctx->info().device_name, format_ip(g_side[1].gid).c_str(),
                mtu_bytes(g_opt.mtu));
  if (g_opt.bench) {
    bench();
  } else {
    rc_checks();
    srq_check();
    ud_checks();
    many_qps();
  }
  for (auto& s : g_side) {
    s.ctx->dereg_mr(s.lkey);
    s.ctx->destroy_cq(s.cq);
    s.ctx->dealloc_pd(s.pd);
  }
  if (!g_opt.bench) std::printf("%s: %d failure%s\n", g_failures ? "FAILED" : "ok", g_failures, g_failures == 1 ? "" : "s");
  return g_failures == 0 ? 0 : 1;
}
