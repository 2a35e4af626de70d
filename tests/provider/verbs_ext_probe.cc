// verbs_ext_probe: the extended verbs of issue #38 through the distro's libibverbs and droce's
// provider, between two droce devices seen by one process (as verbs_api_probe, whose setup it
// shares through probe_common.h): completion timestamps (ibv_create_cq_ex with IBV_WC_EX_WITH_COMPLETION_TIMESTAMP
// and _WALLCLOCK, ibv_query_rt_values_ex, the device's clock), thread domains and parent
// domains (their allocators, objects made on them, traffic through them), and device memory
// (ibv_alloc_dm, the copies, ibv_reg_dm_mr, RDMA WRITE, READ and SEND to and from it), and
// on-demand paging (the ODP caps, explicit and implicit ODP regions, ibv_advise_mr, pages
// unmapped under a region, droced's resident memory), and raw packet QPs with a flow rule (as
// root). Each with the errnos of bad arguments.
//
//   verbs_ext_probe DEV_A DEV_B [DROCED_A_PID]
//
// With DROCED_A_PID (the droced serving DEV_A), a 1 GiB ODP region of which B WRITEs 1 % must
// cost that droced at most a few MiB of resident memory. With ODP_STALL_FILE and ODP_STALL_GATE
// (tests/provider/odp_fuse_gate.py), a page whose fault does not end must not stall droced A's
// worker (odp_stall below).
//
// Run as verbs_api_probe (SYSFS_PATH naming a tree that holds both devices, RDMAV_DRIVERS the
// provider). Prints "ok: ..." / "FAIL: ..." lines; exits 1 on any failure, 2 when the devices
// cannot be set up.
#include <endian.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <string>

#include "probe_common.h"

namespace {

using probe::check;
using probe::clock_ns;
using probe::die;
using probe::failures;
using probe::now_ms;

struct Dev {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_device_attr_ex attr{};
  ibv_gid gid{};
  uint8_t* buf = nullptr;
  ibv_mr* mr = nullptr;
  static constexpr size_t kBuf = 1 << 16;
};

Dev open_dev(const char* name) {
  Dev d;
  d.ctx = probe::open_device(name);
  if (ibv_query_device_ex(d.ctx, nullptr, &d.attr) != 0) die("ibv_query_device_ex");
  if (ibv_query_gid(d.ctx, 1, 1, &d.gid) != 0) die("ibv_query_gid");
  d.pd = ibv_alloc_pd(d.ctx);
  if (d.pd == nullptr) die("ibv_alloc_pd");
  void* mem = nullptr;
  if (posix_memalign(&mem, 4096, Dev::kBuf) != 0) die("posix_memalign");
  d.buf = static_cast<uint8_t*>(mem);
  std::memset(d.buf, 0, Dev::kBuf);
  d.mr = ibv_reg_mr(d.pd, d.buf, Dev::kBuf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  if (d.mr == nullptr) die("ibv_reg_mr");
  return d;
}

ibv_qp* make_qp(ibv_pd* pd, ibv_cq* scq, ibv_cq* rcq, ibv_srq* srq = nullptr, bool ex = false) {
  ibv_qp_init_attr_ex a{};
  a.send_cq = scq;
  a.recv_cq = rcq;
  a.srq = srq;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = 16;
  a.cap.max_recv_wr = srq != nullptr ? 0 : 16;
  a.cap.max_send_sge = 2;
  a.cap.max_recv_sge = srq != nullptr ? 0 : 2;
  a.comp_mask = IBV_QP_INIT_ATTR_PD;
  a.pd = pd;
  if (ex) {
    a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    a.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
  }
  return ibv_create_qp_ex(pd->context, &a);
}

// RESET -> INIT -> RTR -> RTS toward `remote` at `gid` (`timeout`: the local ACK timeout's code).
void connect_rc(ibv_qp* qp, uint32_t remote_qpn, const ibv_gid& gid, uint8_t timeout = 14) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0)
    die("modify to INIT");
  probe::rc_to_rts(qp, remote_qpn, gid, true, true, timeout);
}

int post_recv(ibv_qp* qp, ibv_srq* srq, uint64_t id, uint64_t addr, uint32_t len, uint32_t lkey) {
  ibv_sge s{addr, len, lkey};
  ibv_recv_wr wr{};
  wr.wr_id = id;
  wr.sg_list = &s;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return srq != nullptr ? ibv_post_srq_recv(srq, &wr, &bad) : ibv_post_recv(qp, &wr, &bad);
}

int post_send(ibv_qp* qp, ibv_wr_opcode op, uint64_t id, uint64_t addr, uint32_t len, uint32_t lkey,
              uint64_t remote = 0, uint32_t rkey = 0) {
  ibv_sge s{addr, len, lkey};
  ibv_send_wr wr{};
  wr.wr_id = id;
  wr.opcode = op;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = remote;
  wr.wr.rdma.rkey = rkey;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}

// One completion of a plain CQ (5 s at most): its status, or -1.
int poll_one(ibv_cq* cq, ibv_wc* wc) {
  const uint64_t end = now_ms() + 5000;
  while (now_ms() < end) {
    const int n = ibv_poll_cq(cq, 1, wc);
    if (n < 0) return -1;
    if (n == 1) return wc->status;
  }
  return -1;
}

// One completion of an extended CQ (5 s at most), its timestamps read; false when none came.
struct Stamped {
  uint64_t wr_id = 0;
  ibv_wc_status status = IBV_WC_GENERAL_ERR;
  uint64_t ts = 0, wall = 0;
};
bool poll_ex(ibv_cq_ex* cq, Stamped* out) {
  ibv_poll_cq_attr pa{};
  const uint64_t end = now_ms() + 5000;
  int rc = ENOENT;
  while (rc == ENOENT && now_ms() < end) rc = ibv_start_poll(cq, &pa);
  if (rc != 0) return false;
  out->wr_id = cq->wr_id;
  out->status = cq->status;
  out->ts = ibv_wc_read_completion_ts(cq);
  out->wall = ibv_wc_read_completion_wallclock_ns(cq);
  ibv_end_poll(cq);
  return true;
}

// ---- Completion timestamps ---------------------------------------------------------------

void timestamps(Dev& a, Dev& b) {
  check(a.attr.completion_timestamp_mask == UINT64_MAX && a.attr.hca_core_clock == 1'000'000,
        "query_device_ex: completion_timestamp_mask all ones, hca_core_clock 1,000,000 kHz (%llx, %llu)",
        (unsigned long long)a.attr.completion_timestamp_mask, (unsigned long long)a.attr.hca_core_clock);
  ibv_values_ex v{};
  v.comp_mask = 2;
  check(ibv_query_rt_values_ex(a.ctx, &v) == EINVAL, "query_rt_values_ex(an unknown mask bit): EINVAL");
  v.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
  const uint64_t before = clock_ns(CLOCK_MONOTONIC);
  const int rc = ibv_query_rt_values_ex(a.ctx, &v);
  const uint64_t after = clock_ns(CLOCK_MONOTONIC);
  const uint64_t raw = uint64_t(v.raw_clock.tv_sec) * 1'000'000'000u + uint64_t(v.raw_clock.tv_nsec);
  check(rc == 0 && v.comp_mask == IBV_VALUES_MASK_RAW_CLOCK && raw >= before && raw <= after,
        "query_rt_values_ex(RAW_CLOCK): the device clock is between two CLOCK_MONOTONIC reads (%d)", rc);

  ibv_cq_init_attr_ex ca{};
  ca.cqe = 16;
  ca.wc_flags = uint64_t{IBV_WC_STANDARD_FLAGS} | IBV_WC_EX_WITH_CVLAN;
  errno = 0;
  check(ibv_create_cq_ex(a.ctx, &ca) == nullptr && errno == EOPNOTSUPP, "create_cq_ex(CVLAN): EOPNOTSUPP");
  ca.wc_flags = uint64_t{IBV_WC_STANDARD_FLAGS} | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
                IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
  ibv_cq_ex* acq = ibv_create_cq_ex(a.ctx, &ca);
  ibv_cq_ex* bcq = ibv_create_cq_ex(b.ctx, &ca);
  check(acq != nullptr && bcq != nullptr, "create_cq_ex(COMPLETION_TIMESTAMP | _WALLCLOCK) (errno %d)",
        acq != nullptr && bcq != nullptr ? 0 : errno);
  if (acq == nullptr || bcq == nullptr) return;
  ibv_qp* aq = make_qp(a.pd, ibv_cq_ex_to_cq(acq), ibv_cq_ex_to_cq(acq));
  ibv_qp* bq = make_qp(b.pd, ibv_cq_ex_to_cq(bcq), ibv_cq_ex_to_cq(bcq));
  if (aq == nullptr || bq == nullptr) die("create_qp");
  connect_rc(aq, bq->qp_num, b.gid);
  connect_rc(bq, aq->qp_num, a.gid);

  uint64_t last_send = 0, last_recv = 0;
  bool ordered = true, inside = true, wall_inside = true;
  for (int i = 0; i < 8; ++i) {
    post_recv(bq, nullptr, 100 + i, uintptr_t(b.buf), 64, b.mr->lkey);
    const uint64_t t0 = clock_ns(CLOCK_MONOTONIC), w0 = clock_ns(CLOCK_REALTIME);
    post_send(aq, IBV_WR_SEND, i, uintptr_t(a.buf), 64, a.mr->lkey);
    Stamped s, r;
    const bool got = poll_ex(acq, &s) && poll_ex(bcq, &r);
    const uint64_t t1 = clock_ns(CLOCK_MONOTONIC), w1 = clock_ns(CLOCK_REALTIME);
    if (!got || s.status != IBV_WC_SUCCESS || r.status != IBV_WC_SUCCESS) {
      check(false, "timestamped SEND %d completes on both sides", i);
      break;
    }
    inside = inside && s.ts >= t0 && s.ts <= t1 && r.ts >= t0 && r.ts <= t1;
    // The wall clock is the device clock plus CLOCK_REALTIME's offset as read at the poll:
    // 1 ms of slack for an offset that moved between the reads.
    wall_inside = wall_inside && s.wall + 1'000'000 >= w0 && s.wall <= w1 + 1'000'000 && r.wall + 1'000'000 >= w0 &&
                  r.wall <= w1 + 1'000'000;
    ordered = ordered && s.ts >= last_send && r.ts >= last_recv && r.ts <= s.ts;
    last_send = s.ts;
    last_recv = r.ts;
  }
  check(inside, "completion_ts of the send and the receive lie between the post and the poll");
  check(wall_inside, "completion_wallclock_ns lies between CLOCK_REALTIME at the post and at the poll");
  check(ordered, "timestamps grow from one completion to the next; the receive's is before the sender's ACK");
  check(ibv_destroy_qp(aq) == 0 && ibv_destroy_qp(bq) == 0 && ibv_destroy_cq(ibv_cq_ex_to_cq(acq)) == 0 &&
            ibv_destroy_cq(ibv_cq_ex_to_cq(bcq)) == 0,
        "destroy the timestamped QPs and CQs");
}

// A timestamped extended CQ on a completion channel, as ibv_rc_pingpong -t -e uses it: every
// event has a completion to poll (that program polls once per event and fails on ENOENT).
void timestamps_with_events(Dev& a, Dev& b) {
  ibv_comp_channel* ch = ibv_create_comp_channel(a.ctx);
  if (ch == nullptr) die("create_comp_channel (is the preload there?)");
  ibv_cq_init_attr_ex ca{};
  ca.cqe = 16;
  ca.channel = ch;
  ca.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
  ibv_cq_ex* acq = ibv_create_cq_ex(a.ctx, &ca);
  ibv_cq* bcq = ibv_create_cq(b.ctx, 16, nullptr, nullptr, 0);
  if (acq == nullptr || bcq == nullptr) die("CQs");
  ibv_cq* acq1 = ibv_cq_ex_to_cq(acq);
  ibv_qp* aq = make_qp(a.pd, acq1, acq1);
  ibv_qp* bq = make_qp(b.pd, bcq, bcq);
  if (aq == nullptr || bq == nullptr) die("create_qp");
  check(ibv_req_notify_cq(acq1, 0) == 0, "req_notify_cq before the QPs connect");
  connect_rc(aq, bq->qp_num, b.gid);
  connect_rc(bq, aq->qp_num, a.gid);
  pollfd p{ch->fd, POLLIN, 0};
  check(::poll(&p, 1, 200) == 0, "no event before any completion");
  int bad = 0, events = 0;
  for (int i = 0; i < 20; ++i) {
    post_send(aq, IBV_WR_RDMA_WRITE, i, uintptr_t(a.buf), 64, a.mr->lkey, uintptr_t(b.buf), b.mr->rkey);
    ibv_cq* ev_cq = nullptr;
    void* ev_ctx = nullptr;
    if (::poll(&p, 1, 5000) != 1 || ibv_get_cq_event(ch, &ev_cq, &ev_ctx) != 0) {
      ++bad;
      break;
    }
    ++events;
    ibv_req_notify_cq(acq1, 0);
    ibv_poll_cq_attr pa{};
    const int rc = ibv_start_poll(acq, &pa);
    if (rc != 0) {
      std::printf("  event %d: start_poll %d\n", i, rc);
      ++bad;
      continue;
    }
    while (ibv_next_poll(acq) == 0) {
    }
    ibv_end_poll(acq);
  }
  check(bad == 0, "20 WRITEs: each event finds its completion (%d events, %d without)", events, bad);
  ibv_ack_cq_events(acq1, unsigned(events));
  ibv_destroy_qp(aq);
  ibv_destroy_qp(bq);
  ibv_destroy_cq(acq1);
  ibv_destroy_cq(bcq);
  ibv_destroy_comp_channel(ch);
}

// ---- Thread domains and parent domains ------------------------------------------------------

struct AllocLog {
  int allocs = 0, frees = 0, defaults = 0;
  bool use_default = false;  ///< answer IBV_ALLOCATOR_USE_DEFAULT
  std::map<void*, size_t> live;
  std::map<uint64_t, int> types;
};

void* log_alloc(ibv_pd*, void* pd_context, size_t size, size_t alignment, uint64_t type) {
  auto* log = static_cast<AllocLog*>(pd_context);
  if (log->use_default) {
    ++log->defaults;
    return IBV_ALLOCATOR_USE_DEFAULT;
  }
  void* p = nullptr;
  if (posix_memalign(&p, alignment, size) != 0) return nullptr;
  std::memset(p, 0, size);
  ++log->allocs;
  ++log->types[type];
  log->live[p] = size;
  return p;
}

void log_free(ibv_pd*, void* pd_context, void* ptr, uint64_t) {
  auto* log = static_cast<AllocLog*>(pd_context);
  ++log->frees;
  log->live.erase(ptr);
  std::free(ptr);
}

void parent_domains(Dev& a, Dev& b) {
  ibv_td_init_attr ta{};
  ta.comp_mask = 1;
  errno = 0;
  check(ibv_alloc_td(a.ctx, &ta) == nullptr && errno == EINVAL, "alloc_td(comp_mask 1): EINVAL");
  ta.comp_mask = 0;
  ibv_td* td = ibv_alloc_td(a.ctx, &ta);
  check(td != nullptr && td->context == a.ctx, "alloc_td (errno %d)", td ? 0 : errno);

  ibv_parent_domain_init_attr pa{};
  errno = 0;
  check(ibv_alloc_parent_domain(a.ctx, &pa) == nullptr && errno == EINVAL, "alloc_parent_domain(no PD): EINVAL");
  pa.pd = a.pd;
  pa.comp_mask = 4;
  errno = 0;
  check(ibv_alloc_parent_domain(a.ctx, &pa) == nullptr && errno == EINVAL,
        "alloc_parent_domain(an unknown comp_mask bit): EINVAL");
  pa.pd = b.pd;
  pa.comp_mask = 0;
  errno = 0;
  check(ibv_alloc_parent_domain(a.ctx, &pa) == nullptr && errno == EINVAL,
        "alloc_parent_domain(a PD of another device): EINVAL");

  AllocLog log;
  pa.pd = a.pd;
  pa.td = td;
  pa.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
  pa.alloc = log_alloc;
  pa.free = log_free;
  pa.pd_context = &log;
  ibv_pd* pad = ibv_alloc_parent_domain(a.ctx, &pa);
  check(pad != nullptr && pad->context == a.ctx && pad->handle == a.pd->handle,
        "alloc_parent_domain(allocators, pd_context, a thread domain) (errno %d)", pad ? 0 : errno);
  if (pad == nullptr) return;
  ibv_parent_domain_init_attr nested{};
  nested.pd = pad;
  errno = 0;
  check(ibv_alloc_parent_domain(a.ctx, &nested) == nullptr && errno == EINVAL,
        "alloc_parent_domain over a parent domain: EINVAL");
  check(ibv_dealloc_td(td) == EBUSY, "dealloc_td while a parent domain uses it: EBUSY");

  ibv_cq_init_attr_ex ca{};
  ca.cqe = 32;
  ca.wc_flags = IBV_WC_STANDARD_FLAGS;
  ca.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
  ca.parent_domain = a.pd;
  errno = 0;
  check(ibv_create_cq_ex(a.ctx, &ca) == nullptr && errno == EINVAL, "create_cq_ex(MASK_PD, a plain PD): EINVAL");
  ca.parent_domain = pad;
  ibv_cq_ex* acqx = ibv_create_cq_ex(a.ctx, &ca);
  check(acqx != nullptr, "create_cq_ex on the parent domain (errno %d)", acqx ? 0 : errno);
  if (acqx == nullptr) return;
  ibv_cq* acq = ibv_cq_ex_to_cq(acqx);
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 16;
  sa.attr.max_sge = 1;
  ibv_srq* srq = ibv_create_srq(pad, &sa);
  check(srq != nullptr && srq->pd == pad, "create_srq on the parent domain (errno %d)", srq ? 0 : errno);
  ibv_qp* aq = make_qp(pad, acq, acq, srq, /*ex=*/true);
  check(aq != nullptr && aq->pd == pad, "create_qp_ex on the parent domain, with an SRQ and ibv_wr_* (errno %d)",
        aq ? 0 : errno);
  ibv_mr* pmr = ibv_reg_mr(pad, a.buf + 8192, 4096, IBV_ACCESS_LOCAL_WRITE);
  check(pmr != nullptr && pmr->pd == pad, "reg_mr on the parent domain (errno %d)", pmr ? 0 : errno);
  if (srq == nullptr || aq == nullptr || pmr == nullptr) return;
  check(log.types.count(1) == 1 && log.types.count(2) == 1 && log.types.count(3) == 1 && log.types.count(4) == 1,
        "the parent domain's alloc() served the CQ, the QP, the SRQ and the WR staging (%d calls)", log.allocs);
  check(ibv_dealloc_pd(a.pd) == EBUSY, "dealloc_pd of a PD under a parent domain: EBUSY");
  check(ibv_dealloc_pd(pad) == EBUSY, "dealloc_pd of a parent domain with objects on it: EBUSY");

  // Traffic both ways: B sends into the SRQ of A's QP, A answers with ibv_wr_* from the MR
  // registered on the parent domain.
  ibv_cq* bcq = ibv_create_cq(b.ctx, 16, nullptr, nullptr, 0);
  ibv_qp* bq = make_qp(b.pd, bcq, bcq);
  if (bcq == nullptr || bq == nullptr) die("B's CQ and QP");
  connect_rc(aq, bq->qp_num, b.gid);
  connect_rc(bq, aq->qp_num, a.gid);
  std::memcpy(b.buf, "from B", 7);
  ibv_wc wc{};
  bool ok = post_recv(nullptr, srq, 1, uintptr_t(pmr->addr), 64, pmr->lkey) == 0 &&
            post_send(bq, IBV_WR_SEND, 2, uintptr_t(b.buf), 7, b.mr->lkey) == 0 && poll_one(acq, &wc) == IBV_WC_SUCCESS &&
            wc.wr_id == 1 && std::memcmp(pmr->addr, "from B", 7) == 0 && poll_one(bcq, &wc) == IBV_WC_SUCCESS;
  check(ok, "a SEND from B lands in the SRQ on the parent domain, in its MR");
  std::memcpy(pmr->addr, "from A", 7);
  ibv_qp_ex* qx = ibv_qp_to_qp_ex(aq);
  ibv_wr_start(qx);
  qx->wr_id = 3;
  qx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(qx, b.mr->rkey, uintptr_t(b.buf) + 256);
  ibv_wr_set_sge(qx, pmr->lkey, uintptr_t(pmr->addr), 7);
  ok = ibv_wr_complete(qx) == 0 && poll_one(acq, &wc) == IBV_WC_SUCCESS && wc.wr_id == 3 &&
       std::memcmp(b.buf + 256, "from A", 7) == 0;
  check(ok, "an RDMA WRITE through ibv_wr_* on the parent domain's QP reaches B");

  check(ibv_destroy_qp(aq) == 0 && ibv_destroy_srq(srq) == 0 && ibv_dereg_mr(pmr) == 0 &&
            ibv_destroy_cq(acq) == 0,
        "destroy the QP, SRQ, MR and CQ of the parent domain");
  check(log.frees == log.allocs && log.live.empty(), "every alloc() given back to free() (%d allocs, %d frees)",
        log.allocs, log.frees);
  check(ibv_dealloc_pd(pad) == 0, "dealloc_pd of the parent domain once it is empty");
  check(ibv_dealloc_td(td) == 0, "dealloc_td once no parent domain uses it");
  ibv_destroy_qp(bq);
  ibv_destroy_cq(bcq);

  // An allocator that answers IBV_ALLOCATOR_USE_DEFAULT; and a parent domain with none.
  AllocLog dflt;
  dflt.use_default = true;
  pa = ibv_parent_domain_init_attr{};
  pa.pd = a.pd;
  pa.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
  pa.alloc = log_alloc;
  pa.free = log_free;
  pa.pd_context = &dflt;
  ibv_pd* pd2 = ibv_alloc_parent_domain(a.ctx, &pa);
  ca.parent_domain = pd2;
  ibv_cq_ex* c2 = pd2 != nullptr ? ibv_create_cq_ex(a.ctx, &ca) : nullptr;
  ibv_qp* q2 = c2 != nullptr ? make_qp(pd2, ibv_cq_ex_to_cq(c2), ibv_cq_ex_to_cq(c2)) : nullptr;
  check(q2 != nullptr && dflt.defaults >= 2 && dflt.frees == 0,
        "an allocator answering IBV_ALLOCATOR_USE_DEFAULT: droce allocates, free() is not called");
  if (q2 != nullptr) ibv_destroy_qp(q2);
  if (c2 != nullptr) ibv_destroy_cq(ibv_cq_ex_to_cq(c2));
  check(pd2 != nullptr && ibv_dealloc_pd(pd2) == 0 && dflt.frees == 0, "dealloc_pd of that parent domain");
  pa = ibv_parent_domain_init_attr{};
  pa.pd = a.pd;
  ibv_pd* pd3 = ibv_alloc_parent_domain(a.ctx, &pa);
  check(pd3 != nullptr && ibv_dealloc_pd(pd3) == 0, "a parent domain without allocators, allocated and freed");
}

// ---- Device memory ---------------------------------------------------------------------------

void device_memory(Dev& a, Dev& b) {
  const uint64_t max = a.attr.max_dm_size;
  check(max >= 65536, "query_device_ex: max_dm_size %llu", (unsigned long long)max);
  ibv_alloc_dm_attr da{};
  da.length = 4096;
  da.comp_mask = 1;
  errno = 0;
  check(ibv_alloc_dm(a.ctx, &da) == nullptr && errno == EINVAL, "alloc_dm(comp_mask 1): EINVAL");
  da.comp_mask = 0;
  da.length = max + 1;
  errno = 0;
  check(ibv_alloc_dm(a.ctx, &da) == nullptr && errno == ENOMEM, "alloc_dm(max_dm_size + 1): ENOMEM");
  da.length = 0;
  errno = 0;
  check(ibv_alloc_dm(a.ctx, &da) == nullptr && errno == EINVAL, "alloc_dm(length 0): EINVAL");
  da.length = max / 2;
  ibv_dm* half = ibv_alloc_dm(a.ctx, &da);
  ibv_dm* other = ibv_alloc_dm(a.ctx, &da);
  errno = 0;
  ibv_dm* third = ibv_alloc_dm(a.ctx, &da);
  check(half != nullptr && other != nullptr && third == nullptr && errno == ENOMEM,
        "alloc_dm: two halves of max_dm_size, then ENOMEM (errno %d)", errno);
  if (half != nullptr) ibv_free_dm(half);
  if (other != nullptr) ibv_free_dm(other);

  da.length = 8192;
  da.log_align_req = 6;
  ibv_dm* adm = ibv_alloc_dm(a.ctx, &da);
  ibv_dm* bdm = ibv_alloc_dm(b.ctx, &da);
  check(adm != nullptr && bdm != nullptr, "alloc_dm(8192, 64-byte alignment) on both devices (errno %d)",
        adm != nullptr && bdm != nullptr ? 0 : errno);
  if (adm == nullptr || bdm == nullptr) return;
  uint8_t zeros[64] = {}, got[64];
  check(ibv_memcpy_from_dm(got, adm, 0, 64) == 0 && std::memcmp(got, zeros, 64) == 0, "a new DM reads as zeros");
  const char text[] = "device memory, 32 bytes long...";
  check(ibv_memcpy_to_dm(adm, 1, text, 4) == EINVAL, "memcpy_to_dm(offset 1): EINVAL");
  check(ibv_memcpy_to_dm(adm, 0, text, 3) == EINVAL, "memcpy_to_dm(length 3): EINVAL");
  check(ibv_memcpy_to_dm(adm, 8192 - 4, text, 8) == EFAULT, "memcpy_to_dm past the end: EFAULT");
  check(ibv_memcpy_from_dm(got, adm, 8192, 4) == EFAULT, "memcpy_from_dm past the end: EFAULT");
  check(ibv_memcpy_to_dm(adm, 128, text, 32) == 0 && ibv_memcpy_from_dm(got, adm, 128, 32) == 0 &&
            std::memcmp(got, text, 32) == 0,
        "memcpy_to_dm then memcpy_from_dm: the bytes");

  errno = 0;
  check(ibv_reg_dm_mr(a.pd, adm, 0, 4096, IBV_ACCESS_LOCAL_WRITE) == nullptr && errno == EINVAL,
        "reg_dm_mr without ZERO_BASED: EINVAL");
  errno = 0;
  check(ibv_reg_dm_mr(a.pd, adm, 4096, 4100, IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE) == nullptr &&
            errno == EINVAL,
        "reg_dm_mr past the DM's end: EINVAL");
  errno = 0;
  check(ibv_reg_dm_mr(a.pd, adm, 0, 64, IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND) ==
                nullptr &&
            errno == EINVAL,
        "reg_dm_mr(MW_BIND): EINVAL");
  errno = 0;
  check(ibv_reg_dm_mr(a.pd, bdm, 0, 64, IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE) == nullptr && errno == EINVAL,
        "reg_dm_mr of another device's DM: EINVAL");
  ibv_mr* zero = ibv_reg_dm_mr(a.pd, adm, 0, 0, IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE);
  check(zero != nullptr && ibv_dereg_mr(zero) == 0, "reg_dm_mr of length 0, dereg_mr");
  const unsigned acc = IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  ibv_mr* amr = ibv_reg_dm_mr(a.pd, adm, 0, 8192, acc);
  ibv_mr* bmr = ibv_reg_dm_mr(b.pd, bdm, 4096, 4096, acc);  // the second half of B's DM
  check(amr != nullptr && bmr != nullptr && amr->addr == nullptr && amr->length == 8192,
        "reg_dm_mr(ZERO_BASED | local and remote access) (errno %d)", amr != nullptr && bmr != nullptr ? 0 : errno);
  if (amr == nullptr || bmr == nullptr) return;
  check(ibv_free_dm(adm) == EBUSY, "free_dm with an MR on it: EBUSY");
  check(ibv_rereg_mr(amr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, IBV_ACCESS_LOCAL_WRITE) != 0,
        "rereg_mr of a DM MR fails");

  ibv_cq* acq = ibv_create_cq(a.ctx, 16, nullptr, nullptr, 0);
  ibv_cq* bcq = ibv_create_cq(b.ctx, 16, nullptr, nullptr, 0);
  ibv_qp* aq = make_qp(a.pd, acq, acq);
  ibv_qp* bq = make_qp(b.pd, bcq, bcq);
  if (acq == nullptr || bcq == nullptr || aq == nullptr || bq == nullptr) die("DM QPs");
  connect_rc(aq, bq->qp_num, b.gid);
  connect_rc(bq, aq->qp_num, a.gid);
  ibv_wc wc{};
  // A WRITE from A's DM (offset 128: the text) into B's DM MR at offset 64 (B's DM byte 4160).
  bool ok = post_send(aq, IBV_WR_RDMA_WRITE, 1, 128, 32, amr->lkey, 64, bmr->rkey) == 0 &&
            poll_one(acq, &wc) == IBV_WC_SUCCESS;
  ok = ok && ibv_memcpy_from_dm(got, bdm, 4096 + 64, 32) == 0 && std::memcmp(got, text, 32) == 0;
  check(ok, "RDMA WRITE from A's DM MR into B's DM MR (zero-based addresses): the bytes");
  // A READ of it back into A's host MR.
  ok = post_send(aq, IBV_WR_RDMA_READ, 2, uintptr_t(a.buf), 32, a.mr->lkey, 64, bmr->rkey) == 0 &&
       poll_one(acq, &wc) == IBV_WC_SUCCESS && std::memcmp(a.buf, text, 32) == 0;
  check(ok, "RDMA READ from B's DM MR");
  // A SEND from A's DM into a receive posted on B's DM MR.
  ok = post_recv(bq, nullptr, 3, 512, 64, bmr->lkey) == 0 && post_send(aq, IBV_WR_SEND, 4, 128, 32, amr->lkey) == 0 &&
       poll_one(acq, &wc) == IBV_WC_SUCCESS && poll_one(bcq, &wc) == IBV_WC_SUCCESS && wc.byte_len == 32 &&
       ibv_memcpy_from_dm(got, bdm, 4096 + 512, 32) == 0 && std::memcmp(got, text, 32) == 0;
  check(ok, "SEND from A's DM MR into a receive on B's DM MR");
  // Out of the MR's range: B's MR is 4096 bytes from offset 0.
  ok = post_send(aq, IBV_WR_RDMA_WRITE, 5, 128, 32, amr->lkey, 4096 - 16, bmr->rkey) == 0 &&
       poll_one(acq, &wc) == IBV_WC_REM_ACCESS_ERR;
  check(ok, "RDMA WRITE past the end of a DM MR: remote access error");

  ibv_destroy_qp(aq);
  ibv_destroy_qp(bq);
  ibv_destroy_cq(acq);
  ibv_destroy_cq(bcq);
  check(ibv_dereg_mr(amr) == 0 && ibv_dereg_mr(bmr) == 0, "dereg_mr of the DM MRs");
  check(ibv_free_dm(adm) == 0 && ibv_free_dm(bdm) == 0, "free_dm once no MR is on it");
}


// ---- On-demand paging --------------------------------------------------------------------

// How many of the pages of [p, p + len) are resident in this process.
size_t resident_pages(const void* p, size_t len) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  std::string vec((len + page - 1) / page, '\0');
  if (mincore(const_cast<void*>(p), len, reinterpret_cast<unsigned char*>(vec.data())) != 0) return SIZE_MAX;
  size_t n = 0;
  for (char c : vec) n += c & 1;
  return n;
}

// VmRSS of process `pid` in KiB (0 when unreadable).
uint64_t rss_kib(long pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10);
  return 0;
}

int post_atomic(ibv_qp* qp, uint64_t id, uint64_t addr, uint32_t lkey, uint64_t remote, uint32_t rkey, uint64_t add) {
  ibv_sge s{addr, 8, lkey};
  ibv_send_wr wr{};
  wr.wr_id = id;
  wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.wr.atomic.remote_addr = remote;
  wr.wr.atomic.rkey = rkey;
  wr.wr.atomic.compare_add = add;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}

// A connected RC pair between the two devices, for one part of the ODP checks (a QP that met
// an access error stays in ERR, so each failing case gets its own).
struct Pair {
  ibv_cq *acq = nullptr, *bcq = nullptr;
  ibv_qp *aq = nullptr, *bq = nullptr;
  explicit Pair(Dev& a, Dev& b, uint8_t timeout = 14) {
    acq = ibv_create_cq(a.ctx, 64, nullptr, nullptr, 0);
    bcq = ibv_create_cq(b.ctx, 64, nullptr, nullptr, 0);
    if (acq == nullptr || bcq == nullptr) die("ODP CQs");
    aq = make_qp(a.pd, acq, acq);
    bq = make_qp(b.pd, bcq, bcq);
    if (aq == nullptr || bq == nullptr) die("ODP QPs");
    connect_rc(aq, bq->qp_num, b.gid, timeout);
    connect_rc(bq, aq->qp_num, a.gid, timeout);
  }
  ~Pair() {
    ibv_destroy_qp(aq);
    ibv_destroy_qp(bq);
    ibv_destroy_cq(acq);
    ibv_destroy_cq(bcq);
  }
};

// A page whose fault never ends, taken off droced's worker (droced/process_memory.h): an ODP
// region over ODP_STALL_FILE, a file of a filesystem that does not answer reads until
// ODP_STALL_GATE exists (tests/provider/odp_fuse_gate.py; its byte i is (i * 7) & 0xff). B READs
// from it: the READ waits for the page on droced A's fault-in thread, and meanwhile droced A's
// worker serves another QP of the same context (one worker, one engine) as if nothing waited.
// Then the filesystem answers and the READ completes with the file's bytes. Before faults were
// taken off the worker, its pread stalled in the filesystem and every QP of the worker with it.
void odp_stall(Dev& a, Dev& b, const char* file, const char* gate) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  const int fd = open(file, O_RDONLY | O_CLOEXEC);
  check(fd >= 0, "open the stalling filesystem's file (errno %d)", fd >= 0 ? 0 : errno);
  if (fd < 0) return;
  auto* map = static_cast<uint8_t*>(mmap(nullptr, 4 * page, PROT_READ, MAP_PRIVATE, fd, 0));
  close(fd);
  if (map == MAP_FAILED) die("mmap of the stalling file");
  ibv_mr* odp = ibv_reg_mr(a.pd, map, 4 * page, IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  check(odp != nullptr, "reg_mr(ON_DEMAND) over a file whose reads do not come back (errno %d)",
        odp != nullptr ? 0 : errno);
  if (odp == nullptr) return;
  {
    // The READ's QP waits long without an answer: timeout 20 (4.3 s) x 7 retries.
    Pair slow(a, b, 20), busy(a, b);
    std::memset(b.buf + 512, 0, 200);
    check(post_send(slow.bq, IBV_WR_RDMA_READ, 1, uintptr_t(b.buf + 512), 200, b.mr->lkey,
                    uintptr_t(map + page + 100), odp->rkey) == 0,
          "B posts a READ of the stalled page");
    // B WRITEs into A 100 times on another QP, each completion awaited; A's worker serves them.
    bool ok = true;
    int done = 0;
    for (; done < 100 && ok; ++done) {
      ibv_wc wc{};
      ok = post_send(busy.bq, IBV_WR_RDMA_WRITE, 100 + done, uintptr_t(b.buf), 64, b.mr->lkey,
                     uintptr_t(a.buf + 64 * (done % 8)), a.mr->rkey) == 0 &&
           poll_one(busy.bcq, &wc) == IBV_WC_SUCCESS;
    }
    check(ok, "while the READ waits for a page its filesystem does not give, 100 WRITEs on another QP "
              "of droced A's worker complete (%d)", done - (ok ? 0 : 1));
    ibv_wc wc{};
    check(ibv_poll_cq(slow.bcq, 1, &wc) == 0, "... and the READ has not completed");
    // The filesystem answers.
    const int g = open(gate, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    if (g >= 0) close(g);
    bool bytes = poll_one(slow.bcq, &wc) == IBV_WC_SUCCESS;
    for (size_t i = 0; bytes && i < 200; ++i) bytes = b.buf[512 + i] == uint8_t(((page + 100 + i) * 7) & 0xff);
    check(bytes, "then the filesystem answers: the READ completes with the file's bytes (status %d)", wc.status);
  }
  ibv_dereg_mr(odp);
  munmap(map, 4 * page);
}

void on_demand_paging(Dev& a, Dev& b, long droced_a_pid) {
  const ibv_odp_caps& caps = a.attr.odp_caps;
  const uint32_t all = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
                       IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
  check(caps.general_caps == (IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT), "odp_caps.general_caps: SUPPORT | IMPLICIT");
  check(caps.per_transport_caps.rc_odp_caps == all, "rc_odp_caps: SEND RECV WRITE READ ATOMIC SRQ_RECV (0x%x)",
        caps.per_transport_caps.rc_odp_caps);
  check(caps.per_transport_caps.ud_odp_caps == (IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV),
        "ud_odp_caps: SEND RECV SRQ_RECV (0x%x)", caps.per_transport_caps.ud_odp_caps);
  check(a.attr.xrc_odp_caps == (all & ~uint32_t{IBV_ODP_SUPPORT_RECV}), "xrc_odp_caps: all but RECV (0x%x)",
        a.attr.xrc_odp_caps);

  const unsigned acc = IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                       IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  const size_t len = 64 * page;
  auto* mem = static_cast<uint8_t*>(mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (mem == MAP_FAILED) die("mmap");
  ibv_mr* odp = ibv_reg_mr(a.pd, mem, len, acc);
  check(odp != nullptr, "reg_mr(ON_DEMAND) of 64 untouched pages (errno %d)", odp != nullptr ? 0 : errno);
  if (odp == nullptr) return;
  // Nothing pinned, nothing copied: the pages are still not there.
  check(resident_pages(mem, len) == 0, "an explicit ODP registration faults in no page (%zu resident)",
        resident_pages(mem, len));
  errno = 0;
  check(ibv_reg_mr(a.pd, mem, len, IBV_ACCESS_ON_DEMAND | IBV_ACCESS_REMOTE_WRITE) == nullptr && errno == EINVAL,
        "reg_mr(ON_DEMAND | REMOTE_WRITE without LOCAL_WRITE): EINVAL");

  {
    Pair p(a, b);
    ibv_wc wc{};
    const char text[] = "on demand, 24 bytes long";
    std::memcpy(b.buf, text, 24);
    // B WRITEs into page 10 of A's ODP region: the page comes in, in A's process.
    bool ok = post_send(p.bq, IBV_WR_RDMA_WRITE, 1, uintptr_t(b.buf), 24, b.mr->lkey, uintptr_t(mem + 10 * page + 8),
                        odp->rkey) == 0 &&
              poll_one(p.bcq, &wc) == IBV_WC_SUCCESS && std::memcmp(mem + 10 * page + 8, text, 24) == 0;
    check(ok, "RDMA WRITE into an untouched page of an ODP region: the bytes");
    check(resident_pages(mem, len) == 1, "... and that page alone became resident (%zu)", resident_pages(mem, len));
    // B READs it back.
    std::memset(b.buf + 64, 0, 24);
    ok = post_send(p.bq, IBV_WR_RDMA_READ, 2, uintptr_t(b.buf + 64), 24, b.mr->lkey, uintptr_t(mem + 10 * page + 8),
                   odp->rkey) == 0 &&
         poll_one(p.bcq, &wc) == IBV_WC_SUCCESS && std::memcmp(b.buf + 64, text, 24) == 0;
    check(ok, "RDMA READ from an ODP region");
    // B's FETCH_ADD on it.
    uint64_t v = 40;
    std::memcpy(mem + 20 * page, &v, 8);
    ok = post_atomic(p.bq, 3, uintptr_t(b.buf + 128), b.mr->lkey, uintptr_t(mem + 20 * page), odp->rkey, 2) == 0 &&
         poll_one(p.bcq, &wc) == IBV_WC_SUCCESS;
    uint64_t now = 0, orig = 0;
    std::memcpy(&now, mem + 20 * page, 8);
    std::memcpy(&orig, b.buf + 128, 8);
    check(ok && orig == 40 && now == 42, "FETCH_ADD on an ODP region: original 40, now 42 (%llu, %llu)",
          (unsigned long long)orig, (unsigned long long)now);
    // A SENDs from its ODP region into a receive B posted; B SENDs into a receive on A's.
    ok = post_recv(p.bq, nullptr, 4, uintptr_t(b.buf + 256), 64, b.mr->lkey) == 0 &&
         post_send(p.aq, IBV_WR_SEND, 5, uintptr_t(mem + 10 * page + 8), 24, odp->lkey) == 0 &&
         poll_one(p.acq, &wc) == IBV_WC_SUCCESS && poll_one(p.bcq, &wc) == IBV_WC_SUCCESS && wc.byte_len == 24 &&
         std::memcmp(b.buf + 256, text, 24) == 0;
    check(ok, "SEND gathered from an ODP region");
    ok = post_recv(p.aq, nullptr, 6, uintptr_t(mem + 30 * page), 64, odp->lkey) == 0 &&
         post_send(p.bq, IBV_WR_SEND, 7, uintptr_t(b.buf), 24, b.mr->lkey) == 0 &&
         poll_one(p.bcq, &wc) == IBV_WC_SUCCESS && poll_one(p.acq, &wc) == IBV_WC_SUCCESS &&
         std::memcmp(mem + 30 * page, text, 24) == 0;
    check(ok, "a receive scattered into an ODP region");
  }

  // ibv_advise_mr: the pages come in here, where droced finds them.
  ibv_sge sge{uintptr_t(mem + 40 * page), uint32_t(4 * page), odp->lkey};
  check(ibv_advise_mr(a.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1) == 0 &&
            resident_pages(mem + 40 * page, 4 * page) == 4,
        "advise_mr(PREFETCH_WRITE, FLUSH) of 4 pages: resident");
  sge.addr = uintptr_t(mem + 50 * page);
  check(ibv_advise_mr(a.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1) == 0, "advise_mr(PREFETCH)");
  sge.addr = uintptr_t(mem + 56 * page);
  check(ibv_advise_mr(a.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, 0, &sge, 1) == 0 &&
            resident_pages(mem + 56 * page, 4 * page) == 0,
        "advise_mr(PREFETCH_NO_FAULT): nothing faulted");
  ibv_sge pinned{uintptr_t(a.buf), 64, a.mr->lkey};
  check(ibv_advise_mr(a.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &pinned, 1) == EINVAL,
        "advise_mr of a region that is not ODP: EINVAL");
  sge.addr = uintptr_t(mem + 62 * page);
  check(ibv_advise_mr(a.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1) == EINVAL,
        "advise_mr past the region's end: EINVAL");
  check(ibv_advise_mr(a.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 1u << 5, &sge, 1) == EINVAL,
        "advise_mr with an unknown flag: EINVAL");

  // Pages the program unmaps under the region: an error completion, never a dead droced.
  // The three pairs come first: a QP's rings are mappings of the process, and one made after the
  // munmap can land in the hole; the page is then mapped again and ODP, which follows the address
  // space, rightly reaches it (1 run in 3 read a new QP's ring there).
  {
    Pair pw(a, b), pr(a, b), ps(a, b);
    munmap(mem + 32 * page, 2 * page);
    check(msync(mem + 32 * page, 2 * page, MS_ASYNC) == -1 && errno == ENOMEM, "the two pages are unmapped");
    ibv_wc wc{};
    bool ok = post_send(pw.bq, IBV_WR_RDMA_WRITE, 8, uintptr_t(b.buf), 64, b.mr->lkey, uintptr_t(mem + 32 * page),
                        odp->rkey) == 0 &&
              poll_one(pw.bcq, &wc) == IBV_WC_REM_ACCESS_ERR;
    check(ok, "RDMA WRITE into an unmapped page of an ODP region: REM_ACCESS_ERR (status %d)", wc.status);
    ok = post_send(pr.bq, IBV_WR_RDMA_READ, 9, uintptr_t(b.buf), 64, b.mr->lkey, uintptr_t(mem + 33 * page + 100),
                   odp->rkey) == 0 &&
         poll_one(pr.bcq, &wc) == IBV_WC_REM_ACCESS_ERR;
    check(ok, "RDMA READ of an unmapped page of an ODP region: REM_ACCESS_ERR (status %d)", wc.status);
    ok = post_send(ps.aq, IBV_WR_SEND, 10, uintptr_t(mem + 32 * page), 64, odp->lkey) == 0 &&
         poll_one(ps.acq, &wc) == IBV_WC_LOC_PROT_ERR;
    check(ok, "SEND from an unmapped page of an ODP region: LOC_PROT_ERR (status %d)", wc.status);
  }
  {
    Pair p(a, b);
    ibv_wc wc{};
    const bool ok = post_send(p.bq, IBV_WR_RDMA_WRITE, 11, uintptr_t(b.buf), 8, b.mr->lkey,
                              uintptr_t(mem + 11 * page), odp->rkey) == 0 &&
                    poll_one(p.bcq, &wc) == IBV_WC_SUCCESS;
    check(ok, "droced A serves the region's mapped pages after those errors");
  }
  check(ibv_dereg_mr(odp) == 0, "dereg_mr of an ODP region");
  munmap(mem, len);

  // Implicit ODP: the whole address space under one key.
  ibv_mr* whole = ibv_reg_mr(a.pd, nullptr, SIZE_MAX, acc);
  check(whole != nullptr && whole->addr == nullptr && whole->length == SIZE_MAX,
        "reg_mr(NULL, SIZE_MAX, ON_DEMAND): implicit ODP (errno %d)", whole != nullptr ? 0 : errno);
  if (whole != nullptr) {
    static uint8_t target[256];  // any memory of the process, never registered by itself
    Pair p(a, b);
    ibv_wc wc{};
    std::memcpy(b.buf, "implicit", 8);
    bool ok = post_send(p.bq, IBV_WR_RDMA_WRITE, 12, uintptr_t(b.buf), 8, b.mr->lkey, uintptr_t(target + 16),
                        whole->rkey) == 0 &&
              poll_one(p.bcq, &wc) == IBV_WC_SUCCESS && std::memcmp(target + 16, "implicit", 8) == 0;
    check(ok, "RDMA WRITE through an implicit ODP key into the process's static data");
    ok = post_recv(p.bq, nullptr, 13, uintptr_t(b.buf + 512), 64, b.mr->lkey) == 0 &&
         post_send(p.aq, IBV_WR_SEND, 14, uintptr_t(target + 16), 8, whole->lkey) == 0 &&
         poll_one(p.acq, &wc) == IBV_WC_SUCCESS && poll_one(p.bcq, &wc) == IBV_WC_SUCCESS &&
         std::memcmp(b.buf + 512, "implicit", 8) == 0;
    check(ok, "SEND gathered through an implicit ODP key");
    check(ibv_dereg_mr(whole) == 0, "dereg_mr of the implicit region");
  }

  if (droced_a_pid <= 0) return;
  // The acceptance: a 1 GiB explicit ODP region, B WRITEs 1 % of it (64 KiB every
  // 6.4 MiB); droced A's resident memory grows by at most a few MiB more than the touched
  // pages (it should not grow by them at all: the pages are this process's).
  const size_t big = size_t{1} << 30;
  auto* gib = static_cast<uint8_t*>(
      mmap(nullptr, big, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
  if (gib == MAP_FAILED) die("mmap 1 GiB");
  const uint64_t before = rss_kib(droced_a_pid);
  ibv_mr* gmr = ibv_reg_mr(a.pd, gib, big, acc);
  check(gmr != nullptr, "reg_mr(ON_DEMAND) of 1 GiB (errno %d)", gmr != nullptr ? 0 : errno);
  if (gmr == nullptr) return;
  const uint64_t after_reg = rss_kib(droced_a_pid);
  constexpr size_t kChunk = 64 << 10;
  const size_t chunks = big / 100 / kChunk;  // 163 chunks: 10.2 MiB
  const size_t stride = big / chunks & ~(page - 1);
  size_t done = 0;
  {
    Pair p(a, b);
    for (size_t i = 0; i < chunks; ++i) {
      ibv_wc wc{};
      if (post_send(p.bq, IBV_WR_RDMA_WRITE, 100 + i, uintptr_t(b.buf), kChunk, b.mr->lkey, uintptr_t(gib + i * stride),
                    gmr->rkey) != 0 ||
          poll_one(p.bcq, &wc) != IBV_WC_SUCCESS)
        break;
      ++done;
    }
  }
  const uint64_t after = rss_kib(droced_a_pid);
  const uint64_t touched_kib = done * kChunk / 1024;
  const uint64_t growth = after > before ? after - before : 0;
  check(done == chunks && resident_pages(gib, big) * page / 1024 == touched_kib,
        "B WROTE %zu x 64 KiB (1 %%) of a 1 GiB ODP region: %zu KiB resident here", done,
        resident_pages(gib, big) * page / 1024);
  check(after_reg <= before + 4096 && growth <= touched_kib + 4096,
        "droced A's VmRSS: %llu KiB before, %llu after registering, %llu after the WRITEs (grew %llu KiB; "
        "touched %llu KiB; at most touched + 4 MiB)",
        (unsigned long long)before, (unsigned long long)after_reg, (unsigned long long)after,
        (unsigned long long)growth, (unsigned long long)touched_kib);
  ibv_dereg_mr(gmr);
  munmap(gib, big);
}

}  // namespace

// ---- Raw packet QPs ---------------------------------------------------------------------------

// An Ethernet | IPv4 | UDP frame to a multicast MAC (as pyverbs' raw traffic), `len` bytes.
size_t raw_frame(uint8_t* f, size_t len, uint16_t dport, uint8_t fill) {
  const uint8_t eth[14] = {0x01, 0x00, 0x5e, 0x11, 0x22, 0x33, 0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0x08, 0x00};
  std::memset(f, fill, len);
  std::memcpy(f, eth, 14);
  const uint16_t total = static_cast<uint16_t>(len - 14);
  const uint8_t ip[20] = {0x45, 0, uint8_t(total >> 8), uint8_t(total), 0, 0, 0x40, 0, 64, 17, 0, 0,
                          10, 1, 2, 3, 239, 1, 2, 3};
  std::memcpy(f + 14, ip, 20);
  f[34] = 0x30;  // source port 12345
  f[35] = 0x39;
  f[36] = uint8_t(dport >> 8);
  f[37] = uint8_t(dport);
  return len;
}

ibv_qp* make_raw_qp(Dev& d, ibv_cq* cq) {
  ibv_qp_init_attr a{};
  a.send_cq = a.recv_cq = cq;
  a.qp_type = IBV_QPT_RAW_PACKET;
  a.cap = {8, 8, 1, 1, 0};
  ibv_qp* qp = ibv_create_qp(d.pd, &a);
  if (qp == nullptr) return nullptr;
  ibv_qp_attr m{};
  m.qp_state = IBV_QPS_INIT;
  m.port_num = 1;
  if (ibv_modify_qp(qp, &m, IBV_QP_STATE | IBV_QP_PORT) != 0) die("raw QP to INIT");
  m.qp_state = IBV_QPS_RTR;
  if (ibv_modify_qp(qp, &m, IBV_QP_STATE) != 0) die("raw QP to RTR");
  m.qp_state = IBV_QPS_RTS;
  if (ibv_modify_qp(qp, &m, IBV_QP_STATE) != 0) die("raw QP to RTS");
  return qp;
}

// A's raw QP puts frames on the link; B's receives the ones its flow rule (UDP port 5678 to that
// multicast MAC) picks, byte for byte. Needs CAP_NET_RAW (the test runs as root).
void raw_packet(Dev& a, Dev& b) {
  // What ibv_create_rwq_ind_table and an RX-hash QP accept, as query_device_ex says it.
  ibv_device_attr_ex dx{};
  const bool rss_ok = ibv_query_device_ex(a.ctx, nullptr, &dx) == 0 &&
                      dx.rss_caps.supported_qpts == (1u << IBV_QPT_RAW_PACKET) &&
                      dx.rss_caps.max_rwq_indirection_table_size == 128 &&
                      dx.rss_caps.rx_hash_function == IBV_RX_HASH_FUNC_TOEPLITZ &&
                      (dx.rss_caps.rx_hash_fields_mask & (IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_PORT_UDP)) ==
                          (IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_PORT_UDP) &&
                      dx.max_wq_type_rq > 0;
  check(rss_ok, "query_device_ex: rss_caps (raw packet QPs, Toeplitz, tables of 128, fields 0x%llx), max_wq_type_rq %u",
        (unsigned long long)dx.rss_caps.rx_hash_fields_mask, dx.max_wq_type_rq);
  ibv_cq* cqa = ibv_create_cq(a.ctx, 16, nullptr, nullptr, 0);
  ibv_cq* cqb = ibv_create_cq(b.ctx, 16, nullptr, nullptr, 0);
  if (cqa == nullptr || cqb == nullptr) die("ibv_create_cq");
  ibv_qp* qa = make_raw_qp(a, cqa);
  ibv_qp* qb = qa != nullptr ? make_raw_qp(b, cqb) : nullptr;
  check(qa != nullptr && qb != nullptr, "raw packet QPs created (errno %d)", errno);
  if (qa == nullptr || qb == nullptr) return;
  struct {
    ibv_flow_attr attr;
    ibv_flow_spec_eth eth;
    ibv_flow_spec_tcp_udp udp;
  } __attribute__((packed, aligned(8))) rule{};
  rule.attr.type = IBV_FLOW_ATTR_NORMAL;
  rule.attr.size = sizeof rule;
  rule.attr.num_of_specs = 2;
  rule.attr.port = 1;
  rule.eth.type = IBV_FLOW_SPEC_ETH;
  rule.eth.size = sizeof rule.eth;
  const uint8_t mc[6] = {0x01, 0x00, 0x5e, 0x11, 0x22, 0x33};
  std::memcpy(rule.eth.val.dst_mac, mc, 6);
  std::memset(rule.eth.mask.dst_mac, 0xff, 6);
  rule.udp.type = IBV_FLOW_SPEC_UDP;
  rule.udp.size = sizeof rule.udp;
  rule.udp.val.dst_port = htobe16(5678);
  rule.udp.mask.dst_port = 0xffff;
  ibv_flow* flow = ibv_create_flow(qb, &rule.attr);
  check(flow != nullptr, "ibv_create_flow: Ethernet + UDP rule on a raw QP (errno %d)", errno);
  if (flow == nullptr) return;
  // Bad input: a rule on a QP that is not raw, a tunnel spec, a frame too short to be one.
  ibv_cq* cq_rc = ibv_create_cq(b.ctx, 4, nullptr, nullptr, 0);
  ibv_qp* rc = make_qp(b.pd, cq_rc, cq_rc);
  errno = 0;
  check(rc != nullptr && ibv_create_flow(rc, &rule.attr) == nullptr && errno == EINVAL,
        "ibv_create_flow on an RC QP: EINVAL (errno %d)", errno);
  rule.udp.type = IBV_FLOW_SPEC_VXLAN_TUNNEL;
  errno = 0;
  check(ibv_create_flow(qb, &rule.attr) == nullptr && errno == EOPNOTSUPP, "a VXLAN spec: EOPNOTSUPP (errno %d)", errno);
  rule.udp.type = IBV_FLOW_SPEC_UDP;
  uint8_t* tx = a.buf;
  uint8_t* rx = b.buf + 8192;
  check(post_send(qa, IBV_WR_SEND, 1, uintptr_t(tx), 13, a.mr->lkey) == EINVAL, "a 13-byte raw SEND: EINVAL");
  check(post_send(qa, IBV_WR_SEND_WITH_IMM, 1, uintptr_t(tx), 100, a.mr->lkey) == EINVAL,
        "SEND_WITH_IMM on a raw QP: EINVAL");
  if (post_recv(qb, nullptr, 50, uintptr_t(rx), 2048, b.mr->lkey) != 0) die("post_recv (raw)");
  // Another port first, then the rule's: the first completion is the second frame.
  raw_frame(tx, 200, 5679, 'x');
  raw_frame(tx + 2048, 300, 5678, 'y');
  ibv_wc wc{};
  check(post_send(qa, IBV_WR_SEND, 2, uintptr_t(tx), 200, a.mr->lkey) == 0 && poll_one(cqa, &wc) == IBV_WC_SUCCESS,
        "raw SEND of a frame no rule wants completes");
  check(post_send(qa, IBV_WR_SEND, 3, uintptr_t(tx + 2048), 300, a.mr->lkey) == 0 &&
            poll_one(cqa, &wc) == IBV_WC_SUCCESS,
        "raw SEND of the rule's frame completes");
  const int st = poll_one(cqb, &wc);
  check(st == IBV_WC_SUCCESS && wc.wr_id == 50 && wc.byte_len == 300 && wc.opcode == IBV_WC_RECV &&
            std::memcmp(rx, tx + 2048, 300) == 0,
        "B's raw QP received the rule's frame whole (status %d, %u bytes), not the other", st, wc.byte_len);
  check(ibv_destroy_flow(flow) == 0, "ibv_destroy_flow");
  // Multicast a host sends reaches its own rules too (as a NIC loops it back), from the first
  // frame sent after the rule is made: droced turns the loopback on before it answers.
  if (post_recv(qb, nullptr, 51, uintptr_t(rx + 4096), 2048, b.mr->lkey) != 0) die("post_recv (raw)");
  flow = ibv_create_flow(qb, &rule.attr);
  check(flow != nullptr, "ibv_create_flow again (errno %d)", errno);
  raw_frame(b.buf, 120, 5678, 'z');
  check(post_send(qb, IBV_WR_SEND, 4, uintptr_t(b.buf), 120, b.mr->lkey) == 0, "B's raw SEND to the rule's group");
  int sent = -1, got = -1;
  for (int k = 0; k < 2; ++k) {  // B's CQ holds both: its send's completion and its receive's
    if (poll_one(cqb, &wc) != IBV_WC_SUCCESS) break;
    if (wc.wr_id == 4) sent = 0;
    if (wc.wr_id == 51) got = static_cast<int>(wc.byte_len);
  }
  check(sent == 0 && got == 120 && std::memcmp(rx + 4096, b.buf, 120) == 0,
        "B's own multicast frame, sent just after its rule, came back to it (%d bytes)", got);
  if (flow != nullptr) ibv_destroy_flow(flow);
  ibv_destroy_qp(rc);
  ibv_destroy_cq(cq_rc);
  ibv_destroy_qp(qa);
  ibv_destroy_qp(qb);
  ibv_destroy_cq(cqa);
  ibv_destroy_cq(cqb);
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: verbs_ext_probe DEV_A DEV_B [DROCED_A_PID]\n");
    return 2;
  }
  Dev a = open_dev(argv[1]);
  Dev b = open_dev(argv[2]);
  timestamps(a, b);
  timestamps_with_events(a, b);
  parent_domains(a, b);
  device_memory(a, b);
  on_demand_paging(a, b, argc > 3 ? std::atol(argv[3]) : 0);
  if (const char* file = std::getenv("ODP_STALL_FILE"); file != nullptr && std::getenv("ODP_STALL_GATE") != nullptr)
    odp_stall(a, b, file, std::getenv("ODP_STALL_GATE"));
  else
    std::printf("skip: the ODP stall check needs ODP_STALL_FILE and ODP_STALL_GATE\n");
  if (geteuid() == 0) raw_packet(a, b);
  else std::printf("skip: raw packet QPs need CAP_NET_RAW\n");
  ibv_dereg_mr(a.mr);
  ibv_dealloc_pd(a.pd);
  ibv_close_device(a.ctx);
  ibv_dereg_mr(b.mr);
  ibv_dealloc_pd(b.pd);
  ibv_close_device(b.ctx);
  std::free(a.buf);
  std::free(b.buf);
  std::printf("%d failures\n", failures);
  return failures == 0 ? 0 : 1;
}
