// verbs_api_probe: the verbs API through the distro's libibverbs and droce's provider, between
// two droce devices (two droced hosts) seen by one process: what the stock programs do not
// reach. Bad arguments and the errno each gets; every RC opcode with its completion fields and
// data; a list of WRs with a bad one in the middle; the ibv_wr_* API; UD with its GRH and an AH
// made from the completion; completion channels (with the preload) including solicited-only
// arming; async events (SRQ limit, CQ overrun with the QP's fatal error, and the device fatal
// when droced dies); rereg_mr; resize_cq with completions pending, during traffic and across arming; memory windows; IBA 1.5
// ATOMIC WRITE.
//
//   verbs_api_probe DEV_A DEV_B [DROCED_B_PID]
//
// Run with SYSFS_PATH naming a tree that holds both devices, RDMAV_DRIVERS naming the provider
// and LD_PRELOAD the completion-channel library. With DROCED_B_PID it kills that droced last and
// expects IBV_EVENT_DEVICE_FATAL on B. Prints "ok: ..." / "FAIL: ..." lines; exits 1 on any
// failure, 2 when the devices cannot be set up.
#include <endian.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <rdma/ib_user_verbs.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <cstring>
#include <ctime>
#include <thread>

#include "probe_common.h"

namespace {

using probe::check;
using probe::die;
using probe::failures;
using probe::now_ms;

// `destroy` runs in a thread of its own while an event of the object it destroys has been read
// and not acknowledged: it must still be waiting 300 ms later (checked as `waits`), and return 0
// once `ack` acknowledges the event (`returns`). Acknowledged only while it waits: not an
// object already freed. A destroy that never returns ends the probe (nothing further can run).
template <class Destroy, class Ack>
void destroy_waits_for_ack(Destroy destroy, Ack ack, const char* waits, const char* returns) {
  std::atomic<bool> destroyed{false};
  int destroy_rc = -1;
  std::thread destroyer([&] {
    destroy_rc = destroy();
    destroyed = true;
  });
  ::usleep(300 * 1000);
  const bool waited = !destroyed;
  check(waited, "%s", waits);
  if (waited) ack();
  const uint64_t end = now_ms() + 10000;
  while (!destroyed && now_ms() < end) ::usleep(1000);
  check(destroyed && destroy_rc == 0, "%s", returns);
  if (!destroyed) {
    std::printf("%d failures\n", failures);
    std::fflush(stdout);
    std::_Exit(1);
  }
  destroyer.join();
}

// Polls until n completions arrived (5 s at most); returns how many did.
int poll_n(ibv_cq* cq, ibv_wc* wc, int n) {
  int got = 0;
  const uint64_t end = now_ms() + 5000;
  while (got < n && now_ms() < end) {
    const int k = ibv_poll_cq(cq, n - got, wc + got);
    if (k < 0) return got;
    got += k;
  }
  return got;
}

struct Dev {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_device_attr attr{};
  ibv_gid gid{};
  uint8_t* buf = nullptr;
  ibv_mr* mr = nullptr;
  static constexpr size_t kBuf = 1 << 16;
};

Dev open_dev(const char* name) {
  Dev d;
  d.ctx = probe::open_device(name);
  if (ibv_query_device(d.ctx, &d.attr) != 0) die("ibv_query_device");
  if (ibv_query_gid(d.ctx, 1, 1, &d.gid) != 0) die("ibv_query_gid");
  d.pd = ibv_alloc_pd(d.ctx);
  if (d.pd == nullptr) die("ibv_alloc_pd");
  void* mem = nullptr;
  if (posix_memalign(&mem, 4096, Dev::kBuf) != 0) die("posix_memalign");
  d.buf = static_cast<uint8_t*>(mem);
  std::memset(d.buf, 0, Dev::kBuf);
  d.mr = ibv_reg_mr(d.pd, d.buf, Dev::kBuf,
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                        IBV_ACCESS_REMOTE_ATOMIC);
  if (d.mr == nullptr) die("ibv_reg_mr");
  return d;
}

ibv_qp* make_qp(Dev& d, ibv_qp_type type, ibv_cq* scq, ibv_cq* rcq, ibv_srq* srq = nullptr, uint32_t inline_len = 0) {
  ibv_qp_init_attr a{};
  a.send_cq = scq;
  a.recv_cq = rcq;
  a.srq = srq;
  a.qp_type = type;
  a.cap.max_send_wr = 64;
  a.cap.max_recv_wr = srq != nullptr ? 0 : 64;
  a.cap.max_send_sge = 4;
  a.cap.max_recv_sge = srq != nullptr ? 0 : 4;
  a.cap.max_inline_data = inline_len;
  ibv_qp* qp = ibv_create_qp(d.pd, &a);
  if (qp == nullptr) die("ibv_create_qp");
  return qp;
}

int to_init(ibv_qp* qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = 1;
  if (qp->qp_type == IBV_QPT_UD) {
    a.qkey = 0x11111111;
    return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
  }
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

// RESET -> INIT -> RTR -> RTS toward `remote` at `gid`.
void connect_rc(ibv_qp* qp, uint32_t remote_qpn, const ibv_gid& gid) {
  if (to_init(qp) != 0) die("modify to INIT");
  probe::rc_to_rts(qp, remote_qpn, gid);
}

void ud_ready(ibv_qp* qp) {
  if (to_init(qp) != 0) die("UD to INIT");
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE) != 0) die("UD to RTR");
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 0;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) != 0) die("UD to RTS");
}

int post_recv(ibv_qp* qp, ibv_srq* srq, uint64_t id, void* addr, uint32_t len, uint32_t lkey) {
  ibv_sge s{reinterpret_cast<uintptr_t>(addr), len, lkey};
  ibv_recv_wr wr{};
  wr.wr_id = id;
  wr.sg_list = &s;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return srq != nullptr ? ibv_post_srq_recv(srq, &wr, &bad) : ibv_post_recv(qp, &wr, &bad);
}

// One async event within `ms`, or event_type -1.
ibv_async_event next_event(ibv_context* ctx, int ms) {
  ibv_async_event ev{};
  ev.event_type = static_cast<ibv_event_type>(-1);
  pollfd p{ctx->async_fd, POLLIN, 0};
  if (::poll(&p, 1, ms) == 1 && ibv_get_async_event(ctx, &ev) != 0) ev.event_type = static_cast<ibv_event_type>(-1);
  return ev;
}

void bad_arguments(Dev& a) {
  errno = 0;
  check(ibv_create_cq(a.ctx, 0, nullptr, nullptr, 0) == nullptr && errno == EINVAL, "create_cq(cqe 0): EINVAL");
  errno = 0;
  check(ibv_create_cq(a.ctx, a.attr.max_cqe + 1, nullptr, nullptr, 0) == nullptr && errno == EINVAL,
        "create_cq(max_cqe + 1): EINVAL");
  ibv_cq* biggest = ibv_create_cq(a.ctx, a.attr.max_cqe, nullptr, nullptr, 0);
  check(biggest != nullptr && biggest->cqe >= a.attr.max_cqe, "create_cq(max_cqe) (errno %d)", biggest ? 0 : errno);
  if (biggest != nullptr) ibv_destroy_cq(biggest);
  errno = 0;
  check(ibv_create_cq(a.ctx, 4, nullptr, nullptr, 1) == nullptr && errno == EINVAL,
        "create_cq(comp_vector 1 of 1): EINVAL");
  errno = 0;
  check(ibv_reg_mr(a.pd, a.buf, 0, IBV_ACCESS_LOCAL_WRITE) == nullptr && errno == EINVAL, "reg_mr(length 0): EINVAL");
  errno = 0;
  check(ibv_reg_mr(a.pd, a.buf, 64, IBV_ACCESS_REMOTE_WRITE) == nullptr && errno == EINVAL,
        "reg_mr(remote write without local write): EINVAL");
  errno = 0;
  // On-demand paging itself is verbs_ext_probe's; here only its one address rule.
  check(ibv_reg_mr(a.pd, nullptr, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND) == nullptr && errno == EINVAL,
        "reg_mr(ON_DEMAND) of NULL with a length other than SIZE_MAX (implicit ODP's): EINVAL");
  // Memory the process may not read (PROT_NONE): as an HCA's pinning, registration fails.
  void* none = mmap(nullptr, 8192, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  errno = 0;
  ibv_mr* nmr = ibv_reg_mr(a.pd, none, 8192, IBV_ACCESS_LOCAL_WRITE);
  check(nmr == nullptr && errno == EFAULT, "reg_mr(inaccessible memory): EFAULT (%d)", errno);
  if (nmr != nullptr) ibv_dereg_mr(nmr);
  munmap(none, 8192);

  ibv_cq* cq = ibv_create_cq(a.ctx, 16, nullptr, nullptr, 0);
  if (cq == nullptr) die("create_cq");
  check(cq->cqe >= 16, "create_cq(16) reports cqe %d >= 16", cq->cqe);
  check(ibv_resize_cq(cq, 0) == EINVAL && ibv_resize_cq(cq, -1) == EINVAL && cq->cqe == 16,
        "resize_cq(0), resize_cq(-1): EINVAL, cqe unchanged");
  check(ibv_resize_cq(cq, a.attr.max_cqe + 1) == EINVAL && cq->cqe == 16, "resize_cq(max_cqe + 1): EINVAL");
  int rc = ibv_resize_cq(cq, 100);
  check(rc == 0 && cq->cqe >= 100, "resize_cq(100) of an empty CQ: %d, cqe %d >= 100", rc, cq->cqe);
  rc = ibv_resize_cq(cq, 5);
  check(rc == 0 && cq->cqe >= 5 && cq->cqe < 100, "resize_cq(5): %d, shrinks, cqe %d", rc, cq->cqe);
  rc = ibv_resize_cq(cq, a.attr.max_cqe);
  check(rc == 0 && cq->cqe >= a.attr.max_cqe, "resize_cq(max_cqe): %d, cqe %d", rc, cq->cqe);
  rc = ibv_resize_cq(cq, 1);
  check(rc == 0 && cq->cqe >= 1, "resize_cq(1) of an empty CQ: %d, cqe %d", rc, cq->cqe);
  ibv_qp_init_attr qa{};
  qa.send_cq = cq;
  qa.recv_cq = cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap = {static_cast<uint32_t>(a.attr.max_qp_wr) + 1, 1, 1, 1, 0};
  errno = 0;
  check(ibv_create_qp(a.pd, &qa) == nullptr && errno == EINVAL, "create_qp(max_send_wr > max_qp_wr): EINVAL");
  qa.cap = {1, 1, 1, 1, 0};
  qa.qp_type = IBV_QPT_RAW_PACKET;
  errno = 0;
  if (ibv_qp* raw = ibv_create_qp(a.pd, &qa); geteuid() == 0) {
    check(raw != nullptr && raw->qp_type == IBV_QPT_RAW_PACKET, "create_qp(raw packet) with CAP_NET_RAW (errno %d)", errno);
    if (raw != nullptr) ibv_destroy_qp(raw);
  } else {
    check(raw == nullptr && errno == EPERM, "create_qp(raw packet) without CAP_NET_RAW: EPERM (errno %d)", errno);
  }
  qa.qp_type = IBV_QPT_RC;
  qa.send_cq = nullptr;
  errno = 0;
  check(ibv_create_qp(a.pd, &qa) == nullptr && errno == EINVAL, "create_qp(no send CQ): EINVAL");

  ibv_qp* qp = make_qp(a, IBV_QPT_RC, cq, cq);
  check(qp->state == IBV_QPS_RESET && qp->qp_num != 0, "create_qp: RESET, qp_num 0x%x", qp->qp_num);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  check(ibv_modify_qp(qp, &attr, IBV_QP_STATE) == EINVAL, "modify_qp(RESET -> RTR): EINVAL");
  ibv_sge sge{reinterpret_cast<uintptr_t>(a.buf), 64, a.mr->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  ibv_send_wr* bad = nullptr;
  check(ibv_post_send(qp, &wr, &bad) == EINVAL && bad == &wr, "post_send in RESET: EINVAL, bad_wr = the WR");
  ibv_qp_init_attr init{};
  check(ibv_query_qp(qp, &attr, IBV_QP_STATE | IBV_QP_CAP, &init) == 0 && attr.qp_state == IBV_QPS_RESET &&
            init.cap.max_send_wr >= 64 && init.send_cq == cq && init.qp_type == IBV_QPT_RC,
        "query_qp: RESET, caps and init attributes");

  ibv_ah_attr ah{};
  ah.port_num = 1;  // not global: RoCE routes by GID
  errno = 0;
  check(ibv_create_ah(a.pd, &ah) == nullptr && errno == EINVAL, "create_ah(no GRH): EINVAL");

  check(ibv_destroy_cq(cq) == EBUSY, "destroy_cq with a QP on it: EBUSY");
  check(ibv_dealloc_pd(a.pd) == EBUSY, "dealloc_pd with objects on it: EBUSY");
  check(ibv_destroy_qp(qp) == 0 && ibv_destroy_cq(cq) == 0, "destroy_qp, then destroy_cq: 0");
}

void rc_traffic(Dev& a, Dev& b) {
  ibv_cq* acq = ibv_create_cq(a.ctx, 64, nullptr, nullptr, 0);
  ibv_cq* bcq = ibv_create_cq(b.ctx, 64, nullptr, nullptr, 0);
  if (acq == nullptr || bcq == nullptr) die("create_cq");
  ibv_qp* aq = make_qp(a, IBV_QPT_RC, acq, acq, nullptr, 64);
  ibv_qp* bq = make_qp(b, IBV_QPT_RC, bcq, bcq);
  connect_rc(aq, bq->qp_num, b.gid);
  connect_rc(bq, aq->qp_num, a.gid);
  ibv_wc wc[8];

  // SEND with immediate data into a posted receive.
  for (int i = 0; i < 256; ++i) a.buf[i] = static_cast<uint8_t>(i);
  check(post_recv(bq, nullptr, 7, b.buf, 4096, b.mr->lkey) == 0, "post_recv");
  ibv_sge sge{reinterpret_cast<uintptr_t>(a.buf), 256, a.mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 1;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htobe32(0xcafe);
  ibv_send_wr* bad = nullptr;
  check(ibv_post_send(aq, &wr, &bad) == 0, "post_send SEND_WITH_IMM");
  bool data = poll_n(bcq, wc, 1) == 1 && wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_RECV &&
              wc[0].wr_id == 7 && wc[0].byte_len == 256 && (wc[0].wc_flags & IBV_WC_WITH_IMM) &&
              be32toh(wc[0].imm_data) == 0xcafe && wc[0].qp_num == bq->qp_num;
  for (int i = 0; i < 256 && data; ++i) data = b.buf[i] == static_cast<uint8_t>(i);
  check(data, "SEND_WITH_IMM arrives: RECV, byte_len 256, immediate 0xcafe, the bytes");
  check(poll_n(acq, wc, 1) == 1 && wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_SEND && wc[0].wr_id == 1,
        "the sender's SEND completion");

  // A list of three: a WRITE (unsignaled), a bad WR (too many SGEs), a SEND: the first is
  // posted, bad_wr is the second, the third is not posted.
  ibv_sge sges[8];
  for (auto& s : sges) s = sge;
  ibv_send_wr w3[3]{};
  w3[0].wr_id = 10;
  w3[0].sg_list = &sge;
  w3[0].num_sge = 1;
  w3[0].opcode = IBV_WR_RDMA_WRITE;
  w3[0].wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(b.buf) + 8192;
  w3[0].wr.rdma.rkey = b.mr->rkey;
  w3[0].next = &w3[1];
  w3[1] = w3[0];
  w3[1].wr_id = 11;
  w3[1].sg_list = sges;
  w3[1].num_sge = 8;  // the QP has max_send_sge 4
  w3[1].next = &w3[2];
  w3[2] = w3[0];
  w3[2].wr_id = 12;
  w3[2].send_flags = IBV_SEND_SIGNALED;
  w3[2].next = nullptr;
  bad = nullptr;
  check(ibv_post_send(aq, w3, &bad) == EINVAL && bad == &w3[1], "a list with a bad WR: EINVAL, bad_wr = that WR");
  std::memset(a.buf + 1024, 0x5a, 64);
  ibv_sge s2{reinterpret_cast<uintptr_t>(a.buf) + 1024, 64, a.mr->lkey};
  w3[2].sg_list = &s2;
  check(ibv_post_send(aq, &w3[2], &bad) == 0 && poll_n(acq, wc, 1) == 1 && wc[0].wr_id == 12 &&
            wc[0].opcode == IBV_WC_RDMA_WRITE && b.buf[8192] == 0x5a && b.buf[8192 + 63] == 0x5a,
        "RDMA_WRITE lands; only the signaled WR completes");

  // Inline SEND (the bytes are taken at post time).
  ibv_qp_attr qattr{};
  ibv_qp_init_attr init{};
  ibv_query_qp(aq, &qattr, IBV_QP_CAP, &init);
  check(init.cap.max_inline_data >= 64, "max_inline_data granted: %u", init.cap.max_inline_data);
  check(post_recv(bq, nullptr, 8, b.buf + 4096, 4096, b.mr->lkey) == 0, "post_recv");
  char msg[32] = "inline bytes";
  ibv_sge is{reinterpret_cast<uintptr_t>(msg), sizeof msg, 0};
  wr = ibv_send_wr{};
  wr.wr_id = 2;
  wr.sg_list = &is;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  check(ibv_post_send(aq, &wr, &bad) == 0, "post_send inline");
  std::memset(msg, 0, sizeof msg);
  check(poll_n(bcq, wc, 1) == 1 && wc[0].status == IBV_WC_SUCCESS && wc[0].byte_len == 32 &&
            std::strcmp(reinterpret_cast<char*>(b.buf) + 4096, "inline bytes") == 0,
        "inline SEND arrives with the bytes as they were at post time");
  poll_n(acq, wc, 1);

  // RDMA WRITE with immediate: consumes a receive, RECV_RDMA_WITH_IMM.
  check(post_recv(bq, nullptr, 9, b.buf, 16, b.mr->lkey) == 0, "post_recv");
  wr = ibv_send_wr{};
  wr.wr_id = 3;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htobe32(77);
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(b.buf) + 16384;
  wr.wr.rdma.rkey = b.mr->rkey;
  check(ibv_post_send(aq, &wr, &bad) == 0 && poll_n(bcq, wc, 1) == 1 && wc[0].opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
            be32toh(wc[0].imm_data) == 77 && b.buf[16384 + 200] == 200,
        "RDMA_WRITE_WITH_IMM: RECV_RDMA_WITH_IMM, immediate 77, data written");
  poll_n(acq, wc, 1);

  // READ, then the two atomics on an 8-byte word of B.
  for (int i = 0; i < 128; ++i) b.buf[20000 + i] = static_cast<uint8_t>(255 - i);
  ibv_sge rs{reinterpret_cast<uintptr_t>(a.buf) + 30000, 128, a.mr->lkey};
  wr = ibv_send_wr{};
  wr.wr_id = 4;
  wr.sg_list = &rs;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_READ;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(b.buf) + 20000;
  wr.wr.rdma.rkey = b.mr->rkey;
  check(ibv_post_send(aq, &wr, &bad) == 0 && poll_n(acq, wc, 1) == 1 && wc[0].opcode == IBV_WC_RDMA_READ &&
            wc[0].status == IBV_WC_SUCCESS && a.buf[30000] == 255 && a.buf[30127] == 128,
        "RDMA_READ: the bytes come back");
  uint64_t* word = reinterpret_cast<uint64_t*>(b.buf + 40000);
  *word = 1000;
  ibv_sge as{reinterpret_cast<uintptr_t>(a.buf) + 40000, 8, a.mr->lkey};
  wr = ibv_send_wr{};
  wr.wr_id = 5;
  wr.sg_list = &as;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.atomic.remote_addr = reinterpret_cast<uintptr_t>(word);
  wr.wr.atomic.rkey = b.mr->rkey;
  wr.wr.atomic.compare_add = 234;
  const uint64_t* old = reinterpret_cast<uint64_t*>(a.buf + 40000);
  check(ibv_post_send(aq, &wr, &bad) == 0 && poll_n(acq, wc, 1) == 1 && wc[0].opcode == IBV_WC_FETCH_ADD &&
            *old == 1000 && *word == 1234,
        "FETCH_AND_ADD: old value 1000 returned, 1234 stored");
  wr.wr_id = 6;
  wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
  wr.wr.atomic.compare_add = 1234;
  wr.wr.atomic.swap = 0xabcdef;
  check(ibv_post_send(aq, &wr, &bad) == 0 && poll_n(acq, wc, 1) == 1 && wc[0].opcode == IBV_WC_COMP_SWAP &&
            *old == 1234 && *word == 0xabcdef,
        "CMP_AND_SWP: swapped");

  // The ibv_wr_* API on a QP made with ibv_create_qp_ex.
  ibv_qp_init_attr_ex xa{};
  xa.send_cq = acq;
  xa.recv_cq = acq;
  xa.qp_type = IBV_QPT_RC;
  xa.cap = {16, 16, 2, 2, 64};
  xa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  xa.pd = a.pd;
  xa.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
  ibv_qp* xq = ibv_create_qp_ex(a.ctx, &xa);
  ibv_qp_ex* qx = xq != nullptr ? ibv_qp_to_qp_ex(xq) : nullptr;
  check(qx != nullptr && qx->wr_send != nullptr && qx->wr_rdma_read == nullptr,
        "create_qp_ex with send ops: ibv_qp_to_qp_ex gives the builders asked for, only those");
  if (qx != nullptr) {
    ibv_qp* yq = make_qp(b, IBV_QPT_RC, bcq, bcq);
    connect_rc(xq, yq->qp_num, b.gid);
    connect_rc(yq, xq->qp_num, a.gid);
    post_recv(yq, nullptr, 20, b.buf + 50000, 64, b.mr->lkey);
    std::memset(a.buf + 60000, 0x33, 64);
    ibv_wr_start(qx);
    qx->wr_id = 21;
    qx->wr_flags = 0;
    ibv_wr_rdma_write(qx, b.mr->rkey, reinterpret_cast<uintptr_t>(b.buf) + 51000);
    ibv_wr_set_sge(qx, a.mr->lkey, reinterpret_cast<uintptr_t>(a.buf) + 60000, 64);
    qx->wr_id = 22;
    qx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send(qx);
    ibv_wr_set_inline_data(qx, const_cast<char*>("wr api"), 7);
    check(ibv_wr_complete(qx) == 0, "ibv_wr_complete of a WRITE and an inline SEND");
    check(poll_n(bcq, wc, 1) == 1 && wc[0].wr_id == 20 && wc[0].byte_len == 7 &&
              std::strcmp(reinterpret_cast<char*>(b.buf) + 50000, "wr api") == 0 && b.buf[51000] == 0x33,
          "ibv_wr_*: both arrive, in order");
    check(poll_n(acq, wc, 1) == 1 && wc[0].wr_id == 22, "ibv_wr_*: the signaled one completes");
    ibv_wr_start(qx);
    ibv_wr_send(qx);
    ibv_wr_set_sge_list(qx, 3, sges);  // max_send_sge 2
    check(ibv_wr_complete(qx) == EINVAL, "ibv_wr_complete after too many SGEs: EINVAL");
    ibv_destroy_qp(xq);
    ibv_destroy_qp(yq);
  }

  // rereg_mr to another buffer: the new keys work.
  void* mem2 = nullptr;
  if (posix_memalign(&mem2, 4096, 8192) != 0) die("posix_memalign");
  std::memset(mem2, 0, 8192);
  const uint32_t old_rkey = b.mr->rkey;
  const int rr = ibv_rereg_mr(b.mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, mem2, 8192, 0);
  check(rr == 0 && b.mr->addr == mem2 && b.mr->length == 8192 && b.mr->rkey == old_rkey,
        "rereg_mr(CHANGE_TRANSLATION): 0, the keys stay");
  wr = ibv_send_wr{};
  wr.wr_id = 7;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(mem2) + 100;
  wr.wr.rdma.rkey = b.mr->rkey;
  check(ibv_post_send(aq, &wr, &bad) == 0 && poll_n(acq, wc, 1) == 1 && wc[0].status == IBV_WC_SUCCESS &&
            static_cast<uint8_t*>(mem2)[100 + 255] == 255,
        "a WRITE with the MR's (unchanged) rkey lands in the new buffer");
  if (ibv_rereg_mr(b.mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, b.buf, Dev::kBuf, 0) != 0) die("rereg_mr back");
  // Access taken away: a remote WRITE now fails with a remote access error (last on this QP:
  // the error takes it to ERR).
  check(ibv_rereg_mr(b.mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, IBV_ACCESS_LOCAL_WRITE) == 0,
        "rereg_mr(CHANGE_ACCESS to local write only): 0");
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(b.buf);
  check(ibv_post_send(aq, &wr, &bad) == 0 && poll_n(acq, wc, 1) == 1 && wc[0].status == IBV_WC_REM_ACCESS_ERR,
        "a remote WRITE after that: remote access error");
  if (ibv_rereg_mr(b.mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                       IBV_ACCESS_REMOTE_ATOMIC) != 0)
    die("rereg_mr access back");
  std::free(mem2);

  ibv_destroy_qp(aq);
  ibv_destroy_qp(bq);
  ibv_destroy_cq(acq);
  ibv_destroy_cq(bcq);
}

// An address handle on `from`'s PD toward `gid` (a host's or a group's), sent from GID 1
// (IPv4-mapped RoCE v2).
ibv_ah* ah_toward(Dev& from, const ibv_gid& gid) {
  ibv_ah_attr ah{};
  ah.is_global = 1;
  ah.grh.dgid = gid;
  ah.grh.sgid_index = 1;
  ah.grh.hop_limit = 64;
  ah.port_num = 1;
  return ibv_create_ah(from.pd, &ah);
}
ibv_ah* ah_to(Dev& from, const Dev& to) { return ah_toward(from, to.gid); }

// A signaled UD SEND of `s` through `ah` to `remote_qpn` with Q_Key 0x11111111 (to_init's).
ibv_send_wr ud_send_wr(ibv_sge* s, ibv_ah* ah, uint32_t remote_qpn) {
  ibv_send_wr wr{};
  wr.sg_list = s;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = remote_qpn;
  wr.wr.ud.remote_qkey = 0x11111111;
  return wr;
}

// Memory windows between the two hosts: the device's capability, alloc/dealloc errnos, a type 2
// window on B bound with a BIND_MW WR, A's WRITE and READ through it (and past it), A's SEND with
// invalidate of its R_Key (B's receive reports it), and A's next WRITE failing with a remote
// access error; a type 1 window bound with ibv_bind_mw and unbound with a zero-length bind.
void memory_windows(Dev& a, Dev& b) {
  check(b.attr.max_mw > 0 && (b.attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW) &&
            (b.attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B),
        "query_device: max_mw %d, MEM_WINDOW and MEM_WINDOW_TYPE_2B", b.attr.max_mw);
  check(ibv_alloc_mw(b.pd, static_cast<ibv_mw_type>(3)) == nullptr && errno == EINVAL, "alloc_mw(type 3): EINVAL");
  ibv_mw* mw1 = ibv_alloc_mw(b.pd, IBV_MW_TYPE_1);
  ibv_mw* mw2 = ibv_alloc_mw(b.pd, IBV_MW_TYPE_2);
  check(mw1 != nullptr && mw2 != nullptr && mw1->type == IBV_MW_TYPE_1 && mw2->type == IBV_MW_TYPE_2 &&
            mw1->rkey != mw2->rkey,
        "alloc_mw(type 1), alloc_mw(type 2) (errno %d)", mw1 != nullptr && mw2 != nullptr ? 0 : errno);
  if (mw1 == nullptr || mw2 == nullptr) return;
  uint8_t* mem = b.buf + 32768;
  ibv_mr* mr = ibv_reg_mr(b.pd, mem, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
  check(mr != nullptr, "reg_mr(LOCAL_WRITE | MW_BIND) (errno %d)", mr != nullptr ? 0 : errno);
  if (mr == nullptr) return;
  ibv_cq* acq = ibv_create_cq(a.ctx, 64, nullptr, nullptr, 0);
  ibv_cq* bcq = ibv_create_cq(b.ctx, 64, nullptr, nullptr, 0);
  if (acq == nullptr || bcq == nullptr) die("create_cq");
  ibv_qp* aq = make_qp(a, IBV_QPT_RC, acq, acq);
  ibv_qp* bq = make_qp(b, IBV_QPT_RC, bcq, bcq);
  connect_rc(aq, bq->qp_num, b.gid);
  connect_rc(bq, aq->qp_num, a.gid);
  ibv_wc wc[4];
  ibv_send_wr* bad = nullptr;
  // Posts one WR and waits for its completion (in wc[0]); the check reads wc[0] only after it,
  // so its message shows the completion's own status.
  auto done = [&](ibv_qp* qp, ibv_send_wr* w, ibv_cq* cq) {
    return ibv_post_send(qp, w, &bad) == 0 && poll_n(cq, wc, 1) == 1;
  };
  bool ok = false;

  // ibv_bind_mw refuses a type 2 window (libibverbs) and a zero-based type 1 bind (o10-36.2.2).
  ibv_mw_bind mb{};
  mb.wr_id = 40;
  mb.send_flags = IBV_SEND_SIGNALED;
  mb.bind_info = {mr, reinterpret_cast<uintptr_t>(mem), 4096, IBV_ACCESS_REMOTE_WRITE};
  check(ibv_bind_mw(bq, mw2, &mb) == EINVAL, "bind_mw(a type 2 window): EINVAL");
  mb.bind_info.mw_access_flags |= IBV_ACCESS_ZERO_BASED;
  check(ibv_bind_mw(bq, mw1, &mb) == EINVAL, "bind_mw(type 1, zero-based): EINVAL");
  mb.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
  ibv_mr* other_pd_mr = a.mr;  // A's region: another PD (another device)
  mb.bind_info.mr = other_pd_mr;
  check(ibv_bind_mw(bq, mw1, &mb) == EPERM, "bind_mw(an MR of another PD): EPERM");
  mb.bind_info.mr = mr;

  // Type 1: ibv_bind_mw moves the tag; A writes through the new key.
  const uint32_t old1 = mw1->rkey;
  check(ibv_bind_mw(bq, mw1, &mb) == 0 && mw1->rkey == ibv_inc_rkey(old1), "bind_mw(type 1): the next tag");
  ok = poll_n(bcq, wc, 1) == 1;
  check(ok && wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_BIND_MW &&
            wc[0].wr_id == 40,
        "bind_mw(type 1) completes: BIND_MW, status %d", wc[0].status);
  std::memset(a.buf, 0x5a, 64);
  ibv_sge sge{reinterpret_cast<uintptr_t>(a.buf), 64, a.mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 41;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(mem) + 100;
  wr.wr.rdma.rkey = mw1->rkey;
  ok = done(aq, &wr, acq);
  check(ok && wc[0].status == IBV_WC_SUCCESS &&
            mem[100] == 0x5a && mem[163] == 0x5a && mem[164] == 0,
        "WRITE through a type 1 window: status %d", wc[0].status);
  mb.bind_info = {mr, 0, 0, 0};  // unbind: a zero-length bind
  check(ibv_bind_mw(bq, mw1, &mb) == 0 && poll_n(bcq, wc, 1) == 1 && wc[0].status == IBV_WC_SUCCESS,
        "bind_mw(type 1, length 0) unbinds");
  check(ibv_dealloc_mw(mw1) == 0, "dealloc_mw(type 1)");

  // Type 2: a BIND_MW WR on B's QP, with the next tag; B's QP is the only one it answers.
  ibv_send_wr bw{};
  bw.wr_id = 50;
  bw.opcode = IBV_WR_BIND_MW;
  bw.send_flags = IBV_SEND_SIGNALED;
  bw.bind_mw.mw = mw2;
  bw.bind_mw.rkey = ibv_inc_rkey(mw2->rkey);
  bw.bind_mw.bind_info = {mr, reinterpret_cast<uintptr_t>(mem) + 4096, 1024,
                          IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ};
  const uint32_t key = bw.bind_mw.rkey;
  ok = done(bq, &bw, bcq);
  check(ok && wc[0].status == IBV_WC_SUCCESS &&
            wc[0].opcode == IBV_WC_BIND_MW,
        "post_send BIND_MW (type 2): status %d", wc[0].status);
  for (int i = 0; i < 1024; ++i) a.buf[i] = static_cast<uint8_t>(i * 7);
  sge = {reinterpret_cast<uintptr_t>(a.buf), 1024, a.mr->lkey};
  wr.wr_id = 51;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(mem) + 4096;
  wr.wr.rdma.rkey = key;
  ok = done(aq, &wr, acq);
  check(ok && wc[0].status == IBV_WC_SUCCESS &&
            std::memcmp(mem + 4096, a.buf, 1024) == 0,
        "WRITE through the type 2 window: status %d, the bytes", wc[0].status);
  sge = {reinterpret_cast<uintptr_t>(a.buf) + 2048, 1024, a.mr->lkey};
  wr.wr_id = 52;
  wr.opcode = IBV_WR_RDMA_READ;
  ok = done(aq, &wr, acq);
  check(ok && wc[0].status == IBV_WC_SUCCESS &&
            std::memcmp(a.buf + 2048, a.buf, 1024) == 0,
        "READ through the type 2 window: status %d, the bytes", wc[0].status);

  check(ibv_dereg_mr(mr) == EINVAL, "dereg_mr of a region a window is bound to: EINVAL (IBA 10.6.7.2.6)");

  // A's SEND with invalidate of the window's key: B's receive says so; the key is dead.
  check(post_recv(bq, nullptr, 53, b.buf, 64, b.mr->lkey) == 0, "post_recv");
  ibv_send_wr iw{};
  iw.wr_id = 54;
  iw.opcode = IBV_WR_SEND_WITH_INV;
  iw.send_flags = IBV_SEND_SIGNALED;
  iw.invalidate_rkey = key;
  ok = done(aq, &iw, acq);
  check(ok && wc[0].status == IBV_WC_SUCCESS,
        "post_send SEND_WITH_INV: status %d", wc[0].status);
  ok = poll_n(bcq, wc, 1) == 1;
  check(ok && wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_RECV &&
            (wc[0].wc_flags & IBV_WC_WITH_INV) && wc[0].invalidated_rkey == key,
        "the receive: WITH_INV, invalidated_rkey 0x%x", wc[0].invalidated_rkey);
  sge = {reinterpret_cast<uintptr_t>(a.buf), 64, a.mr->lkey};
  wr.wr_id = 55;
  wr.opcode = IBV_WR_RDMA_WRITE;
  ok = done(aq, &wr, acq);
  check(ok && wc[0].status == IBV_WC_REM_ACCESS_ERR,
        "WRITE through the invalidated window: REM_ACCESS_ERR (status %d)", wc[0].status);
  check(ibv_dereg_mr(mr) == 0, "dereg_mr once the window is invalidated");
  check(ibv_dealloc_mw(mw2) == 0, "dealloc_mw(type 2)");
  ibv_destroy_qp(aq);
  ibv_destroy_qp(bq);
  ibv_destroy_cq(acq);
  ibv_destroy_cq(bcq);
}

// IBA 1.5 ATOMIC WRITE between the hosts through ibv_wr_atomic_write: the device's capability
// (the kernel's IB_UVERBS_DEVICE_ATOMIC_WRITE, bit 40 of device_cap_flags_ex), the 8 bytes placed
// whole, ibv_post_send's refusal (ibv_send_wr has no field for them), a UD QP refusing the op,
// and the responder's answers: a misaligned address (REM_INV_REQ_ERR) and a region without
// remote write (REM_ACCESS_ERR), as the kernel's rxe answers them.
ibv_qp* make_qp_ex(Dev& d, ibv_qp_type type, ibv_cq* cq, uint64_t ops) {
  ibv_qp_init_attr_ex a{};
  a.send_cq = cq;
  a.recv_cq = cq;
  a.qp_type = type;
  a.cap.max_send_wr = 16;
  a.cap.max_recv_wr = 16;
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  a.pd = d.pd;
  a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  a.send_ops_flags = ops;
  return ibv_create_qp_ex(d.ctx, &a);
}

void atomic_write(Dev& a, Dev& b) {
  ibv_device_attr_ex ax{};
  const int qrc = ibv_query_device_ex(a.ctx, nullptr, &ax);
  check(qrc == 0 && (ax.device_cap_flags_ex & (1ull << 40)),
        "query_device_ex: ATOMIC_WRITE capability (0x%llx)",
        static_cast<unsigned long long>(ax.device_cap_flags_ex));
  ibv_cq* acq = ibv_create_cq(a.ctx, 16, nullptr, nullptr, 0);
  ibv_cq* bcq = ibv_create_cq(b.ctx, 16, nullptr, nullptr, 0);
  if (acq == nullptr || bcq == nullptr) die("create_cq");
  check(make_qp_ex(a, IBV_QPT_UD, acq, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_ATOMIC_WRITE) == nullptr &&
            errno == EOPNOTSUPP,
        "create_qp_ex(UD, WITH_ATOMIC_WRITE): EOPNOTSUPP");
  uint8_t* target = b.buf + 49152;
  ibv_mr* ro = ibv_reg_mr(b.pd, b.buf + 57344, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  if (ro == nullptr) die("reg_mr(read only)");
  ibv_wc wc{};
  // One connected pair per case: an error completion leaves the QP in the error state.
  auto run = [&](uint64_t addr, uint32_t rkey, uint64_t value) {
    ibv_qp* aq = make_qp_ex(a, IBV_QPT_RC, acq, IBV_QP_EX_WITH_ATOMIC_WRITE | IBV_QP_EX_WITH_RDMA_WRITE);
    if (aq == nullptr) die("create_qp_ex(RC, WITH_ATOMIC_WRITE)");
    ibv_qp* bq = make_qp(b, IBV_QPT_RC, bcq, bcq);
    connect_rc(aq, bq->qp_num, b.gid);
    connect_rc(bq, aq->qp_num, a.gid);
    ibv_send_wr w{};
    ibv_send_wr* bad = nullptr;
    w.opcode = IBV_WR_ATOMIC_WRITE;
    check(ibv_post_send(aq, &w, &bad) == EOPNOTSUPP, "post_send(ATOMIC_WRITE): EOPNOTSUPP");
    ibv_qp_ex* qx = ibv_qp_to_qp_ex(aq);
    ibv_wr_start(qx);
    qx->wr_id = 70;
    qx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_atomic_write(qx, rkey, addr, &value);
    value = 0;  // copied at the call: the caller may reuse its buffer at once
    const int rc = ibv_wr_complete(qx);
    wc = ibv_wc{};
    const bool got = rc == 0 && poll_n(acq, &wc, 1) == 1 && wc.wr_id == 70;
    ibv_destroy_qp(aq);
    ibv_destroy_qp(bq);
    return got;
  };
  const uint64_t v = 0x0123456789abcdefull;
  std::memset(target, 0xee, 24);
  bool ok = run(reinterpret_cast<uintptr_t>(target) + 8, b.mr->rkey, v);
  uint64_t placed = 0;
  std::memcpy(&placed, target + 8, 8);
  check(ok && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_ATOMIC_WRITE && placed == v &&
            target[7] == 0xee && target[16] == 0xee,
        "ATOMIC WRITE: status %d, opcode %d, the 8 bytes and nothing beside them", wc.status, wc.opcode);
  ok = run(reinterpret_cast<uintptr_t>(target) + 4, b.mr->rkey, v);
  check(ok && wc.status == IBV_WC_REM_INV_REQ_ERR, "ATOMIC WRITE to a misaligned address: REM_INV_REQ_ERR (status %d)",
        wc.status);
  ok = run(reinterpret_cast<uintptr_t>(b.buf) + 57344, ro->rkey, v);
  check(ok && wc.status == IBV_WC_REM_ACCESS_ERR && b.buf[57344] == 0,
        "ATOMIC WRITE to a region without remote write: REM_ACCESS_ERR (status %d), nothing written", wc.status);
  ibv_dereg_mr(ro);
  ibv_destroy_cq(acq);
  ibv_destroy_cq(bcq);
}

void ud_traffic(Dev& a, Dev& b) {
  ibv_cq* acq = ibv_create_cq(a.ctx, 16, nullptr, nullptr, 0);
  ibv_cq* bcq = ibv_create_cq(b.ctx, 16, nullptr, nullptr, 0);
  ibv_qp* aq = make_qp(a, IBV_QPT_UD, acq, acq);
  ibv_qp* bq = make_qp(b, IBV_QPT_UD, bcq, bcq);
  ud_ready(aq);
  ud_ready(bq);
  ibv_ah* to_b = ah_to(a, b);
  check(to_b != nullptr, "create_ah to B");
  post_recv(bq, nullptr, 1, b.buf, 40 + 512, b.mr->lkey);
  std::memset(a.buf, 0x77, 512);
  ibv_sge s{reinterpret_cast<uintptr_t>(a.buf), 512, a.mr->lkey};
  ibv_send_wr wr = ud_send_wr(&s, to_b, bq->qp_num);
  ibv_send_wr* bad = nullptr;
  ibv_wc wc;
  check(ibv_post_send(aq, &wr, &bad) == 0 && poll_n(bcq, &wc, 1) == 1 && wc.status == IBV_WC_SUCCESS &&
            wc.byte_len == 40 + 512 && (wc.wc_flags & IBV_WC_GRH) && wc.src_qp == aq->qp_num && b.buf[40] == 0x77,
        "UD SEND: GRH + 512 bytes, src_qp is the sender's");
  ibv_wc rwc = wc;
  poll_n(acq, &wc, 1);
  // The reply's AH from the completion and the GRH (as ibv_ud_pingpong does not, but servers do).
  post_recv(bq, nullptr, 2, b.buf, 40 + 512, b.mr->lkey);
  ibv_ah* back = ibv_create_ah_from_wc(b.pd, &rwc, reinterpret_cast<ibv_grh*>(b.buf), 1);
  check(back != nullptr, "create_ah_from_wc on B (errno %d)", back ? 0 : errno);
  if (back != nullptr) {
    post_recv(aq, nullptr, 3, a.buf + 8192, 40 + 64, a.mr->lkey);
    ibv_sge bs{reinterpret_cast<uintptr_t>(b.buf) + 2048, 64, b.mr->lkey};
    wr.sg_list = &bs;
    wr.wr.ud.ah = back;
    wr.wr.ud.remote_qpn = aq->qp_num;
    check(ibv_post_send(bq, &wr, &bad) == 0 && poll_n(acq, &wc, 1) == 1 && wc.status == IBV_WC_SUCCESS &&
              wc.src_qp == bq->qp_num,
          "UD reply through the AH made from the completion");
    poll_n(bcq, &wc, 1);
    ibv_destroy_ah(back);
  }
  ibv_destroy_ah(to_b);
  ibv_destroy_qp(aq);
  ibv_destroy_qp(bq);
  ibv_destroy_cq(acq);
  ibv_destroy_cq(bcq);
}

// Multicast (ibv_attach_mcast): two QPs on B and one on A attached to 239.9.9.9; A sends one
// datagram to the group (QPN 0xFFFFFF): B's two receive it over the wire, A's own attached QP
// through the device's loopback, as on a NIC. The verbs' errors are rdma-core's.
void ud_multicast(Dev& a, Dev& b) {
  check(a.attr.max_mcast_grp > 0 && a.attr.max_mcast_qp_attach > 0 && a.attr.max_total_mcast_qp_attach > 0,
        "query_device: multicast limits");
  ibv_gid group{};
  group.raw[10] = group.raw[11] = 0xff;
  group.raw[12] = 239;
  group.raw[13] = group.raw[14] = group.raw[15] = 9;
  ibv_cq* acq = ibv_create_cq(a.ctx, 16, nullptr, nullptr, 0);
  ibv_cq* bcq = ibv_create_cq(b.ctx, 16, nullptr, nullptr, 0);
  ibv_qp* sender = make_qp(a, IBV_QPT_UD, acq, acq);
  ibv_qp* aq = make_qp(a, IBV_QPT_UD, acq, acq);
  ibv_qp* bq1 = make_qp(b, IBV_QPT_UD, bcq, bcq);
  ibv_qp* bq2 = make_qp(b, IBV_QPT_UD, bcq, bcq);
  ibv_qp* rc = make_qp(b, IBV_QPT_RC, bcq, bcq);
  for (ibv_qp* q : {sender, aq, bq1, bq2}) ud_ready(q);
  check(ibv_attach_mcast(rc, &group, 0) == EINVAL, "attach_mcast(RC QP): EINVAL");
  check(ibv_attach_mcast(bq1, &b.gid, 0) == EINVAL, "attach_mcast(a unicast GID): EINVAL");
  check(ibv_detach_mcast(bq1, &group, 0) == EINVAL, "detach_mcast(not attached): EINVAL");
  check(ibv_attach_mcast(bq1, &group, 0) == 0 && ibv_attach_mcast(bq2, &group, 0) == 0 &&
            ibv_attach_mcast(bq2, &group, 0) == 0 && ibv_attach_mcast(aq, &group, 0) == 0,
        "attach_mcast: two QPs on B (one twice), one on A");
  post_recv(bq1, nullptr, 11, b.buf, 40 + 256, b.mr->lkey);
  post_recv(bq2, nullptr, 12, b.buf + 1024, 40 + 256, b.mr->lkey);
  post_recv(aq, nullptr, 13, a.buf + 4096, 40 + 256, a.mr->lkey);
  ibv_ah* to_group = ah_toward(a, group);
  check(to_group != nullptr, "create_ah toward the group (errno %d)", to_group ? 0 : errno);
  if (to_group == nullptr) return;
  const auto send = [&](uint8_t fill) {
    std::memset(a.buf, fill, 256);
    ibv_sge s{reinterpret_cast<uintptr_t>(a.buf), 256, a.mr->lkey};
    ibv_send_wr wr = ud_send_wr(&s, to_group, 0xFFFFFF);
    ibv_send_wr* bad = nullptr;
    ibv_wc wc;
    return ibv_post_send(sender, &wr, &bad) == 0 && poll_n(acq, &wc, 1) == 1 && wc.status == IBV_WC_SUCCESS;
  };
  check(send(0x5a), "UD SEND to the group");
  ibv_wc wc[2];
  const int got = poll_n(bcq, wc, 2);
  check(got == 2 && wc[0].status == IBV_WC_SUCCESS && wc[1].status == IBV_WC_SUCCESS &&
            wc[0].qp_num != wc[1].qp_num && wc[0].src_qp == sender->qp_num && wc[0].byte_len == 40 + 256 &&
            b.buf[40] == 0x5a && b.buf[1024 + 40] == 0x5a,
        "both of B's attached QPs receive it (got %d)", got);
  check(poll_n(acq, wc, 1) == 1 && wc[0].qp_num == aq->qp_num && wc[0].status == IBV_WC_SUCCESS &&
            a.buf[4096 + 40] == 0x5a,
        "A's attached QP receives it through the loopback");
  // Detached, bq2 receives no more; bq1 still does.
  check(ibv_detach_mcast(bq2, &group, 0) == 0, "detach_mcast");
  post_recv(bq1, nullptr, 21, b.buf, 40 + 256, b.mr->lkey);
  post_recv(bq2, nullptr, 22, b.buf + 1024, 40 + 256, b.mr->lkey);
  check(send(0x6b), "UD SEND to the group again");
  check(poll_n(bcq, wc, 2) == 1 && wc[0].qp_num == bq1->qp_num && wc[0].wr_id == 21, "only the attached QP receives");
  poll_n(acq, wc, 1);  // aq's copy, unposted: dropped

  // IBV_QP_CREATE_BLOCK_SELF_MCAST_LB (mckey -l): the QP does not receive what it sends to a group
  // it is attached to; the other attached QPs, here and on B, do. Other create flags: EOPNOTSUPP.
  ibv_qp_init_attr_ex x{};
  x.qp_type = IBV_QPT_UD;
  x.send_cq = x.recv_cq = ibv_create_cq(a.ctx, 16, nullptr, nullptr, 0);
  x.cap = {16, 16, 1, 1, 0};
  x.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
  x.pd = a.pd;
  x.create_flags = IBV_QP_CREATE_SCATTER_FCS;
  errno = 0;
  check(ibv_create_qp_ex(a.ctx, &x) == nullptr && errno == EOPNOTSUPP, "create_qp_ex(SCATTER_FCS): EOPNOTSUPP");
  x.create_flags = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB;
  ibv_qp* blocker = ibv_create_qp_ex(a.ctx, &x);
  check(blocker != nullptr, "create_qp_ex(BLOCK_SELF_MCAST_LB) (errno %d)", blocker ? 0 : errno);
  if (blocker != nullptr) {
    ud_ready(blocker);
    check(ibv_attach_mcast(blocker, &group, 0) == 0, "attach the blocking QP");
    post_recv(blocker, nullptr, 31, a.buf + 8192, 40 + 256, a.mr->lkey);
    post_recv(aq, nullptr, 32, a.buf + 4096, 40 + 256, a.mr->lkey);
    post_recv(bq1, nullptr, 33, b.buf, 40 + 256, b.mr->lkey);
    std::memset(a.buf, 0x7c, 256);
    ibv_sge s{reinterpret_cast<uintptr_t>(a.buf), 256, a.mr->lkey};
    ibv_send_wr wr = ud_send_wr(&s, to_group, 0xFFFFFF);
    ibv_send_wr* bad = nullptr;
    check(ibv_post_send(blocker, &wr, &bad) == 0 && poll_n(x.send_cq, wc, 1) == 1 && wc[0].wr_id == 0,
          "the blocking QP sends to the group");
    check(poll_n(bcq, wc, 1) == 1 && wc[0].wr_id == 33, "B's attached QP receives it");
    check(poll_n(acq, wc, 1) == 1 && wc[0].wr_id == 32 && wc[0].src_qp == blocker->qp_num,
          "A's other attached QP receives it (loopback)");
    check(ibv_poll_cq(x.send_cq, 1, wc) == 0, "the sender itself does not");
    ibv_destroy_qp(blocker);
  }
  ibv_destroy_cq(x.send_cq);
  ibv_destroy_ah(to_group);
  for (ibv_qp* q : {sender, aq, bq1, bq2, rc}) ibv_destroy_qp(q);
  ibv_destroy_cq(acq);
  ibv_destroy_cq(bcq);
}

void channels_and_events(Dev& a, Dev& b) {
  ibv_comp_channel* ch = ibv_create_comp_channel(b.ctx);
  check(ch != nullptr, "create_comp_channel on a droce context (errno %d)", ch ? 0 : errno);
  if (ch == nullptr) return;
  ibv_cq* acq = ibv_create_cq(a.ctx, 16, nullptr, nullptr, 0);
  int tag = 0;
  ibv_cq* bcq = ibv_create_cq(b.ctx, 16, &tag, ch, 0);
  check(bcq != nullptr && ch->refcnt == 1, "create_cq with the channel");
  check(ibv_destroy_comp_channel(ch) == EBUSY, "destroy_comp_channel while a CQ uses it: EBUSY");
  ibv_qp* aq = make_qp(a, IBV_QPT_RC, acq, acq, nullptr, 64);
  ibv_qp* bq = make_qp(b, IBV_QPT_RC, bcq, bcq);
  connect_rc(aq, bq->qp_num, b.gid);
  connect_rc(bq, aq->qp_num, a.gid);
  ibv_wc wc;
  ibv_send_wr* bad = nullptr;
  // A signaled SEND of 16 bytes from A's QP q, and its completion on acq.
  auto send_on = [&](ibv_qp* q, bool solicited) {
    ibv_sge s{reinterpret_cast<uintptr_t>(a.buf), 16, a.mr->lkey};
    ibv_send_wr wr{};
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED | (solicited ? IBV_SEND_SOLICITED : 0);
    return ibv_post_send(q, &wr, &bad) == 0 && poll_n(acq, &wc, 1) == 1;
  };
  auto send = [&](bool solicited) { return send_on(aq, solicited); };
  auto event_within = [&](int ms) {
    pollfd p{ch->fd, POLLIN, 0};
    return ::poll(&p, 1, ms) == 1;
  };
  for (int i = 0; i < 4; ++i) post_recv(bq, nullptr, 100 + i, b.buf + 256 * i, 256, b.mr->lkey);
  check(ibv_req_notify_cq(bcq, 0) == 0, "req_notify_cq");
  check(send(false), "SEND");
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  check(event_within(5000) && ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == bcq && ev_ctx == &tag,
        "a completion event on the channel: the CQ and its context");
  check(poll_n(bcq, &wc, 1) == 1 && wc.wr_id == 100, "the completion behind it");
  ibv_ack_cq_events(bcq, 1);
  // Solicited only: an unsolicited SEND raises no event, a solicited one does.
  check(ibv_req_notify_cq(bcq, 1) == 0, "req_notify_cq(solicited only)");
  check(send(false) && poll_n(bcq, &wc, 1) == 1, "an unsolicited SEND arrives");
  check(!event_within(300), "no event for it");
  check(send(true), "a solicited SEND");
  check(event_within(5000) && ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == bcq, "its event");
  poll_n(bcq, &wc, 1);
  ibv_ack_cq_events(bcq, 1);
  ibv_destroy_qp(aq);
  ibv_destroy_qp(bq);
  check(ibv_destroy_cq(bcq) == 0, "destroy_cq once its events are acknowledged");
  // An extended CQ holds the channel once, as ibv_create_cq's does (UCX makes
  // its CQs this way and destroys the channel after them).
  ibv_cq_init_attr_ex xa{};
  xa.cqe = 8;
  xa.channel = ch;
  xa.cq_context = &tag;
  ibv_cq_ex* xcq = ibv_create_cq_ex(b.ctx, &xa);
  check(xcq != nullptr && ch->refcnt == 1 && ibv_cq_ex_to_cq(xcq)->cq_context == &tag,
        "create_cq_ex with the channel: one reference, the CQ's context");
  check(xcq != nullptr && ibv_destroy_cq(ibv_cq_ex_to_cq(xcq)) == 0 && ch->refcnt == 0,
        "destroy_cq of the extended CQ gives the reference back");
  check(ibv_destroy_comp_channel(ch) == 0, "destroy_comp_channel: 0");
  ibv_destroy_cq(acq);

  // Unread completion events of a destroyed CQ leave its channel, as the kernel takes them out of
  // the event file (ibv_get_cq_event would hand out the freed CQ); another CQ's stay, in order.
  ch = ibv_create_comp_channel(b.ctx);
  ibv_cq* c1 = ibv_create_cq(b.ctx, 16, nullptr, ch, 0);
  ibv_cq* c2 = ibv_create_cq(b.ctx, 16, nullptr, ch, 0);
  acq = ibv_create_cq(a.ctx, 16, nullptr, nullptr, 0);
  ibv_qp* a1 = make_qp(a, IBV_QPT_RC, acq, acq);
  ibv_qp* a2 = make_qp(a, IBV_QPT_RC, acq, acq);
  ibv_qp* b1 = make_qp(b, IBV_QPT_RC, c1, c1);
  ibv_qp* b2 = make_qp(b, IBV_QPT_RC, c2, c2);
  connect_rc(a1, b1->qp_num, b.gid);
  connect_rc(b1, a1->qp_num, a.gid);
  connect_rc(a2, b2->qp_num, b.gid);
  connect_rc(b2, a2->qp_num, a.gid);
  post_recv(b1, nullptr, 1, b.buf, 256, b.mr->lkey);
  post_recv(b2, nullptr, 2, b.buf + 256, 256, b.mr->lkey);
  ibv_req_notify_cq(c1, 0);
  ibv_req_notify_cq(c2, 0);
  check(send_on(a1, false) && poll_n(c1, &wc, 1) == 1 && send_on(a2, false) && poll_n(c2, &wc, 1) == 1,
        "a SEND to each of two CQs on one channel");
  int queued = 0;  // bytes in the channel's pipe: two 8-byte records, unread
  for (const uint64_t end = now_ms() + 5000; now_ms() < end && queued < 16; ::usleep(1000))
    ::ioctl(ch->fd, FIONREAD, &queued);
  check(queued == 16, "both CQs' events wait in the channel (%d bytes)", queued);
  ibv_destroy_qp(b1);
  check(ibv_destroy_cq(c1) == 0, "destroy_cq of the first with its event unread");
  ::ioctl(ch->fd, FIONREAD, &queued);
  check(queued == 8, "its record left the channel, the other's stayed (%d bytes)", queued);
  ev_cq = nullptr;
  check(event_within(1000) && ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == c2,
        "the event read next is the second CQ's");
  if (ev_cq == c2) ibv_ack_cq_events(c2, 1);
  ibv_destroy_qp(b2);
  ibv_destroy_qp(a1);
  ibv_destroy_qp(a2);
  check(ibv_destroy_cq(c2) == 0, "destroy_cq of the second");

  // An event a thread has read but not yet handed to the provider (ibv_get_cq_event reads the
  // record, then calls the cq_event op): destroy_cq still waits for its acknowledgement, as the
  // kernel counts an event when it is read. Read here by hand, so the op never runs for it.
  ibv_cq* c3 = ibv_create_cq(b.ctx, 16, nullptr, ch, 0);
  ibv_qp* a3 = make_qp(a, IBV_QPT_RC, acq, acq);
  ibv_qp* b3 = make_qp(b, IBV_QPT_RC, c3, c3);
  connect_rc(a3, b3->qp_num, b.gid);
  connect_rc(b3, a3->qp_num, a.gid);
  post_recv(b3, nullptr, 3, b.buf, 256, b.mr->lkey);
  ibv_req_notify_cq(c3, 0);
  uint64_t record = 0;
  const bool read_by_hand = send_on(a3, false) && poll_n(c3, &wc, 1) == 1 && event_within(5000) &&
                            ::read(ch->fd, &record, sizeof record) == sizeof record &&
                            record == reinterpret_cast<uintptr_t>(c3);
  check(read_by_hand, "a third CQ's event, its record read from the channel by hand");
  ibv_destroy_qp(b3);
  if (read_by_hand)
    destroy_waits_for_ack([&] { return ibv_destroy_cq(c3); }, [&] { ibv_ack_cq_events(c3, 1); },
                          "destroy_cq waits for the acknowledgement of an event read but not yet reported",
                          "destroy_cq returns 0 once that event is acknowledged");
  else
    ibv_destroy_cq(c3);
  ibv_destroy_qp(a3);
  check(ibv_destroy_comp_channel(ch) == 0, "destroy_comp_channel");
  ibv_destroy_cq(acq);

  // The SRQ limit: armed at 6 with 8 posted; 3 SENDs take it to 5.
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 16;
  sa.attr.max_sge = 1;
  ibv_srq* srq = ibv_create_srq(b.pd, &sa);
  check(srq != nullptr, "create_srq");
  acq = ibv_create_cq(a.ctx, 16, nullptr, nullptr, 0);
  bcq = ibv_create_cq(b.ctx, 16, nullptr, nullptr, 0);
  aq = make_qp(a, IBV_QPT_RC, acq, acq);
  bq = make_qp(b, IBV_QPT_RC, bcq, bcq, srq);
  connect_rc(aq, bq->qp_num, b.gid);
  connect_rc(bq, aq->qp_num, a.gid);
  for (int i = 0; i < 8; ++i) post_recv(nullptr, srq, i, b.buf + 256 * i, 256, b.mr->lkey);
  ibv_srq_attr lim{};
  lim.srq_limit = 6;
  check(ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT) == 0, "modify_srq(limit 6)");
  check(ibv_destroy_srq(srq) == EBUSY, "destroy_srq with a QP on it: EBUSY");
  for (int i = 0; i < 3; ++i) send(false);
  ibv_wc three[3];
  check(poll_n(bcq, three, 3) == 3, "three SENDs into the SRQ");
  ibv_async_event ev = next_event(b.ctx, 5000);
  check(ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && ev.element.srq == srq, "async event SRQ_LIMIT_REACHED (%d)",
        ev.event_type);
  if (ev.event_type != static_cast<ibv_event_type>(-1)) ibv_ack_async_event(&ev);
  ibv_destroy_qp(aq);
  ibv_destroy_qp(bq);
  check(ibv_destroy_srq(srq) == 0, "destroy_srq");
  ibv_destroy_cq(acq);
  ibv_destroy_cq(bcq);

  // A CQ overrun: B's receive CQ holds 4, five SENDs arrive. B gets CQ_ERR on the CQ and QP_FATAL
  // on the QP; destroying them waits for the acknowledgements.
  acq = ibv_create_cq(a.ctx, 16, nullptr, nullptr, 0);
  bcq = ibv_create_cq(b.ctx, 4, nullptr, nullptr, 0);
  aq = make_qp(a, IBV_QPT_RC, acq, acq);
  bq = make_qp(b, IBV_QPT_RC, bcq, bcq);
  connect_rc(aq, bq->qp_num, b.gid);
  connect_rc(bq, aq->qp_num, a.gid);
  for (int i = 0; i < 8; ++i) post_recv(bq, nullptr, i, b.buf + 256 * i, 256, b.mr->lkey);
  for (int i = 0; i < bcq->cqe + 1; ++i) send(false);
  // The two records are read from async_fd as libibverbs reads them, without the provider's
  // async_event op that ibv_get_async_event calls next: a reader thread preempted between its
  // read and that op (UCX's async thread, at teardown) looks so to a destroy. The destroy must
  // still wait for the acknowledgement of an event already read, and return after it.
  ibv_async_event cq_err{}, qp_fatal{};
  for (int i = 0; i < 2; ++i) {
    pollfd p{b.ctx->async_fd, POLLIN, 0};
    ib_uverbs_async_event_desc d{};
    if (::poll(&p, 1, 5000) != 1 || ::read(b.ctx->async_fd, &d, sizeof d) != sizeof d) break;
    if (d.event_type == IBV_EVENT_CQ_ERR && d.element == reinterpret_cast<uintptr_t>(bcq)) {
      cq_err.event_type = IBV_EVENT_CQ_ERR;
      cq_err.element.cq = bcq;
    }
    if (d.event_type == IBV_EVENT_QP_FATAL && d.element == reinterpret_cast<uintptr_t>(bq)) {
      qp_fatal.event_type = IBV_EVENT_QP_FATAL;
      qp_fatal.element.qp = bq;
    }
  }
  check(cq_err.element.cq == bcq && qp_fatal.element.qp == bq,
        "CQ overrun: async events CQ_ERR on the CQ and QP_FATAL on the QP");
  if (cq_err.element.cq == bcq) ibv_ack_async_event(&cq_err);
  if (qp_fatal.element.qp == bq)
    destroy_waits_for_ack([&] { return ibv_destroy_qp(bq); }, [&] { ibv_ack_async_event(&qp_fatal); },
                          "destroy_qp waits for the acknowledgement of the QP's event read before it",
                          "destroy_qp returns 0 once that event is acknowledged");
  check(ibv_destroy_cq(bcq) == 0, "destroy_cq after its event was acknowledged");
  ibv_destroy_qp(aq);
  ibv_destroy_cq(acq);
}

// Polls n completions and checks they are successful receives with wr_ids first, first + 1, ...
bool polled_in_order(ibv_cq* cq, int n, uint64_t first) {
  ibv_wc wc[64];
  if (n > 64 || poll_n(cq, wc, n) != n) return false;
  for (int i = 0; i < n; ++i)
    if (wc[i].status != IBV_WC_SUCCESS || wc[i].opcode != IBV_WC_RECV || wc[i].wr_id != first + uint64_t(i))
      return false;
  return true;
}

// ibv_resize_cq with completions in the CQ. The CQ resized is B's receive CQ; A's SEND
// completion for a message comes after B's ACK, which B sends after it pushed the receive
// completion, so once A has polled n SEND completions, B's CQ holds n unpolled receives.
void resize_cq(Dev& a, Dev& b) {
  ibv_cq* acq = ibv_create_cq(a.ctx, 64, nullptr, nullptr, 0);
  ibv_cq* bscq = ibv_create_cq(b.ctx, 64, nullptr, nullptr, 0);
  ibv_cq* bcq = ibv_create_cq(b.ctx, 16, nullptr, nullptr, 0);
  if (acq == nullptr || bscq == nullptr || bcq == nullptr) die("create_cq");
  ibv_qp* aq = make_qp(a, IBV_QPT_RC, acq, acq);
  ibv_qp* bq = make_qp(b, IBV_QPT_RC, bscq, bcq);
  connect_rc(aq, bq->qp_num, b.gid);
  connect_rc(bq, aq->qp_num, a.gid);
  ibv_wc wc[64];
  ibv_send_wr* bad = nullptr;
  // n SENDs from A, all polled on A (so that B's CQ has their receives).
  auto sends = [&](ibv_qp* from, ibv_cq* from_cq, int n, bool solicited = false) {
    ibv_sge s{reinterpret_cast<uintptr_t>(a.buf), 32, a.mr->lkey};
    ibv_send_wr wr{};
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED | (solicited ? IBV_SEND_SOLICITED : 0);
    for (int i = 0; i < n; ++i)
      if (ibv_post_send(from, &wr, &bad) != 0) return false;
    if (poll_n(from_cq, wc, n) != n) return false;
    for (int i = 0; i < n; ++i)
      if (wc[i].status != IBV_WC_SUCCESS) return false;
    return true;
  };
  auto recvs = [&](ibv_qp* qp, ibv_srq* srq, uint64_t first, int n) {
    for (int i = 0; i < n; ++i)
      if (post_recv(qp, srq, first + i, b.buf + 256 * (i % 64), 256, b.mr->lkey) != 0) return false;
    return true;
  };

  // Twelve receives completed and not polled.
  check(recvs(bq, nullptr, 1000, 12) && sends(aq, acq, 12), "12 SENDs into B's CQ of %d", bcq->cqe);
  check(ibv_resize_cq(bcq, 11) == EINVAL && bcq->cqe == 16,
        "resize_cq(11) with 12 completions in the CQ: EINVAL, cqe unchanged");
  int rc = ibv_resize_cq(bcq, 100);
  check(rc == 0 && bcq->cqe >= 100, "grow with 12 pending: resize_cq(100): %d, cqe %d", rc, bcq->cqe);
  check(polled_in_order(bcq, 5, 1000), "after growing: the first 5 come out, in order");
  check(ibv_resize_cq(bcq, 6) == EINVAL && bcq->cqe >= 100, "resize_cq(6) with 7 pending: EINVAL");
  rc = ibv_resize_cq(bcq, 7);
  check(rc == 0 && bcq->cqe >= 7 && bcq->cqe < 100, "shrink to exactly the 7 pending: resize_cq(7): %d, cqe %d", rc,
        bcq->cqe);
  // Traffic into the shrunk CQ: it fills up to its size, nothing lost, nothing twice.
  const int room = bcq->cqe - 7;
  check(recvs(bq, nullptr, 1012, room) && sends(aq, acq, room), "%d more SENDs after the shrink", room);
  check(polled_in_order(bcq, 7 + room, 1005) && ibv_poll_cq(bcq, 1, wc) == 0,
        "after shrinking: all %d in order (the old 7, then the new), then none", 7 + room);
  rc = ibv_resize_cq(bcq, 1);
  check(rc == 0 && bcq->cqe >= 1, "resize_cq(1) once polled empty: %d, cqe %d", rc, bcq->cqe);
  check(recvs(bq, nullptr, 2000, 1) && sends(aq, acq, 1) && polled_in_order(bcq, 1, 2000),
        "a SEND into the CQ of %d after that", bcq->cqe);

  // Resizing while A sends: B posts 32 receives, A posts 32 SENDs without waiting, and B resizes
  // its CQ between 32 and 512 entries (always room for the 32) and polls while they arrive.
  // Every receive must come out once, in order, successful, and no CQ error may be raised.
  check(ibv_resize_cq(bcq, 32) == 0, "resize_cq(32)");
  bool all = true, resized = true;
  int resizes = 0;
  uint64_t next = 10000;
  for (int round = 0; round < 8 && all; ++round) {
    all = recvs(bq, nullptr, 10000 + 32 * round, 32);
    ibv_sge s{reinterpret_cast<uintptr_t>(a.buf), 64, a.mr->lkey};
    ibv_send_wr wr{};
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    for (int i = 0; i < 32 && all; ++i) all = ibv_post_send(aq, &wr, &bad) == 0;
    int got = 0;
    const uint64_t end = now_ms() + 5000;
    while (got < 32 && all && now_ms() < end) {
      resized = resized && ibv_resize_cq(bcq, (resizes++ % 2) != 0 ? 32 : 512) == 0;
      const int k = ibv_poll_cq(bcq, 3, wc);
      for (int i = 0; i < k; ++i) all = all && wc[i].status == IBV_WC_SUCCESS && wc[i].wr_id == next++;
      got += k > 0 ? k : 0;
    }
    all = all && got == 32 && poll_n(acq, wc, 32) == 32;
  }
  check(all && resized, "8 x 32 SENDs while B resizes its CQ %d times: every receive once, in order", resizes);
  bool overrun = false;
  for (pollfd p{b.ctx->async_fd, POLLIN, 0}; ::poll(&p, 1, 100) == 1;) {
    ibv_async_event ev{};
    if (ibv_get_async_event(b.ctx, &ev) != 0) break;
    overrun = overrun || (ev.event_type == IBV_EVENT_CQ_ERR && ev.element.cq == bcq) ||
              (ev.event_type == IBV_EVENT_QP_FATAL && ev.element.qp == bq);
    ibv_ack_async_event(&ev);
  }
  check(!overrun, "no CQ_ERR on the CQ nor QP_FATAL on the QP");
  ibv_destroy_qp(bq);

  // An SRQ's QP on the CQ delivers to it across a resize.
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 16;
  sa.attr.max_sge = 1;
  ibv_srq* srq = ibv_create_srq(b.pd, &sa);
  if (srq == nullptr) die("create_srq");
  bq = make_qp(b, IBV_QPT_RC, bscq, bcq, srq);
  ibv_qp* aq2 = make_qp(a, IBV_QPT_RC, acq, acq);
  connect_rc(aq2, bq->qp_num, b.gid);
  connect_rc(bq, aq2->qp_num, a.gid);
  check(recvs(nullptr, srq, 3000, 6) && sends(aq2, acq, 3) && ibv_resize_cq(bcq, 3) == 0 && bcq->cqe == 4 &&
            sends(aq2, acq, 1) && ibv_resize_cq(bcq, 8) == 0 && sends(aq2, acq, 2) && polled_in_order(bcq, 6, 3000),
        "SRQ receives into a CQ resized to 3 (3 pending), filled, grown to 8 (full ring moved): all 6 in order");
  ibv_destroy_qp(bq);
  ibv_destroy_srq(srq);
  ibv_destroy_qp(aq2);

  // Notification across a resize: armed before, the event comes after; a solicited-only arm
  // stays solicited-only.
  ibv_comp_channel* ch = ibv_create_comp_channel(b.ctx);
  if (ch == nullptr) die("create_comp_channel");
  int tag = 0;
  ibv_cq* ccq = ibv_create_cq(b.ctx, 8, &tag, ch, 0);
  if (ccq == nullptr) die("create_cq with a channel");
  bq = make_qp(b, IBV_QPT_RC, bscq, ccq);
  aq2 = make_qp(a, IBV_QPT_RC, acq, acq);
  connect_rc(aq2, bq->qp_num, b.gid);
  connect_rc(bq, aq2->qp_num, a.gid);
  auto event_within = [&](int ms) {
    pollfd p{ch->fd, POLLIN, 0};
    return ::poll(&p, 1, ms) == 1;
  };
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  recvs(bq, nullptr, 4000, 8);
  check(ibv_req_notify_cq(ccq, 0) == 0 && ibv_resize_cq(ccq, 64) == 0 && ccq->cqe >= 64,
        "req_notify_cq, then resize_cq(64)");
  check(!event_within(200), "no event before a completion");
  check(sends(aq2, acq, 1) && event_within(5000) && ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == ccq &&
            ev_ctx == &tag,
        "the arm made before the resize fires after it: the CQ and its context");
  check(polled_in_order(ccq, 1, 4000), "the completion behind it");
  ibv_ack_cq_events(ccq, 1);
  // Armed, with a completion pending; shrunk and grown again before the next one.
  check(sends(aq2, acq, 1) && ibv_req_notify_cq(ccq, 1) == 0 && ibv_resize_cq(ccq, 2) == 0 &&
            ibv_resize_cq(ccq, 16) == 0,
        "one pending, req_notify_cq(solicited only), resize_cq(2), resize_cq(16)");
  check(sends(aq2, acq, 1) && !event_within(300), "an unsolicited SEND: no event");
  check(sends(aq2, acq, 1, true) && event_within(5000) && ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == ccq,
        "a solicited SEND: the event");
  check(polled_in_order(ccq, 3, 4001), "the three completions, in order");
  ibv_ack_cq_events(ccq, 1);
  ibv_destroy_qp(bq);
  ibv_destroy_qp(aq2);
  check(ibv_destroy_cq(ccq) == 0 && ibv_destroy_comp_channel(ch) == 0, "destroy the resized CQ and its channel");

  // UD SENDs complete as droced puts them on the wire: posted, then resized at once, their
  // completions count (the client lets droced take the doorbells first, as an HCA would have
  // completed them before a resize reached it). pyverbs' test_resize_cq does this.
  ibv_cq* ucq = ibv_create_cq(a.ctx, 8, nullptr, nullptr, 0);
  ibv_qp* uq = make_qp(a, IBV_QPT_UD, ucq, ucq);
  ud_ready(uq);
  ibv_ah* ah = ah_to(a, b);
  if (ah == nullptr) die("create_ah");
  {
    ibv_sge s{reinterpret_cast<uintptr_t>(a.buf), 64, a.mr->lkey};
    ibv_send_wr wr{};
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = 0xffff00;  // nobody's: UD drops it at B
    wr.wr.ud.remote_qkey = 0x11111111;
    bool posted = true;
    for (int i = 0; i < 7; ++i) {
      wr.wr_id = 500 + i;
      posted = posted && ibv_post_send(uq, &wr, &bad) == 0;
    }
    rc = ibv_resize_cq(ucq, 6);
    check(posted && rc == EINVAL && ucq->cqe == 8, "7 UD SENDs posted, resize_cq(6) right after: EINVAL (%d)", rc);
    bool in_order = poll_n(ucq, wc, 7) == 7;
    for (int i = 0; i < 7 && in_order; ++i) in_order = wc[i].status == IBV_WC_SUCCESS && wc[i].wr_id == 500u + i;
    check(in_order, "their 7 completions");
  }
  ibv_destroy_ah(ah);
  ibv_destroy_qp(uq);
  ibv_destroy_cq(ucq);

  // The extended CQ resizes the same way.
  ibv_cq_init_attr_ex xa{};
  xa.cqe = 4;
  xa.wc_flags = IBV_WC_EX_WITH_BYTE_LEN;
  ibv_cq_ex* xcq = ibv_create_cq_ex(b.ctx, &xa);
  check(xcq != nullptr && ibv_resize_cq(ibv_cq_ex_to_cq(xcq), 40) == 0 && ibv_cq_ex_to_cq(xcq)->cqe >= 40,
        "resize_cq of an extended CQ");
  if (xcq != nullptr) ibv_destroy_cq(ibv_cq_ex_to_cq(xcq));

  ibv_destroy_qp(aq);
  ibv_destroy_cq(acq);
  ibv_destroy_cq(bscq);
  check(ibv_destroy_cq(bcq) == 0, "destroy_cq of the resized CQ");
}

void device_fatal(Dev& b, pid_t droced_b) {
  if (droced_b <= 1) {
    check(false, "DROCED_B_PID %d is not a process to kill", int(droced_b));
    return;
  }
  ibv_cq* cq = ibv_create_cq(b.ctx, 4, nullptr, nullptr, 0);
  ibv_qp* qp = make_qp(b, IBV_QPT_RC, cq, cq);
  kill(droced_b, SIGKILL);
  ibv_async_event ev = next_event(b.ctx, 10000);
  check(ev.event_type == IBV_EVENT_DEVICE_FATAL, "droced killed: async event DEVICE_FATAL (%d)", ev.event_type);
  if (ev.event_type != static_cast<ibv_event_type>(-1)) ibv_ack_async_event(&ev);
  check(post_recv(qp, nullptr, 1, b.buf, 16, b.mr->lkey) == EIO, "post_recv on a dead device: EIO");
  errno = 0;
  check(ibv_alloc_pd(b.ctx) == nullptr && errno == EIO, "alloc_pd on a dead device: EIO");
  check(ibv_destroy_qp(qp) == 0 && ibv_destroy_cq(cq) == 0, "destroying objects of a dead device: 0");
}

}  // namespace

// XRC between droce0's two contexts (two sessions of droced A, as two processes would be) and
// droce1: a domain opened through one file in both; a receive QP made by one and opened by the
// other; host B's XRC send QP delivers, through the receive QP of context 1, into an XRC SRQ of
// context 2, whose CQ reports the receive QP's number. Then the refusals.
void connect_xrc(ibv_qp* qp, uint32_t remote_qpn, const ibv_gid& gid) {
  const bool recv = qp->qp_type == IBV_QPT_XRC_RECV;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0)
    die("XRC to INIT");
  probe::rc_to_rts(qp, remote_qpn, gid, recv, !recv);
}

void xrc(const char* dev_a, Dev& b) {
  check((b.attr.device_cap_flags & IBV_DEVICE_XRC) != 0, "query_device: IBV_DEVICE_XRC");
  Dev a1 = open_dev(dev_a), a2 = open_dev(dev_a);
  char path[] = "/tmp/droce-xrc-probe.XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) die("mkstemp");
  unlink(path);  // the descriptor names the file (its inode) from here on; nothing left if we die
  ibv_xrcd_init_attr xa{};
  xa.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
  xa.fd = fd;
  xa.oflags = 0;
  check(ibv_open_xrcd(a1.ctx, &xa) == nullptr && errno == EAGAIN, "open_xrcd(a new file, no O_CREAT): EAGAIN");
  xa.oflags = O_CREAT;
  ibv_xrcd* x1 = ibv_open_xrcd(a1.ctx, &xa);
  xa.oflags = 0;
  ibv_xrcd* x2 = ibv_open_xrcd(a2.ctx, &xa);  // the same file in the "other process": its domain
  check(x1 != nullptr && x2 != nullptr, "open_xrcd(O_CREAT), then the same file from another context");
  xa.oflags = O_CREAT | O_EXCL;
  check(ibv_open_xrcd(a2.ctx, &xa) == nullptr && errno == EINVAL, "open_xrcd(O_EXCL, the domain exists): EINVAL");
  xa.fd = -1;
  xa.oflags = O_CREAT;
  ibv_xrcd* lone = ibv_open_xrcd(a2.ctx, &xa);  // no file: a private domain
  xa.comp_mask = IBV_XRCD_INIT_ATTR_FD;
  check(lone != nullptr && ibv_open_xrcd(a2.ctx, &xa) == nullptr && errno == EINVAL,
        "open_xrcd(fd -1): a private domain; without OFLAGS in comp_mask: EINVAL");
  if (x1 == nullptr || x2 == nullptr || lone == nullptr) return;

  // The receive QP in context 1; context 2 opens it by number, of the shared domain only.
  ibv_qp_init_attr_ex qa{};
  qa.qp_type = IBV_QPT_XRC_RECV;
  qa.comp_mask = IBV_QP_INIT_ATTR_XRCD;
  qa.xrcd = x1;
  ibv_qp* tgt = ibv_create_qp_ex(a1.ctx, &qa);
  check(tgt != nullptr, "create_qp_ex(XRC_RECV)");
  if (tgt == nullptr) return;
  ibv_qp_open_attr oa{};
  oa.comp_mask = IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_TYPE;
  oa.qp_num = tgt->qp_num;
  oa.qp_type = IBV_QPT_XRC_RECV;
  oa.xrcd = lone;
  check(ibv_open_qp(a2.ctx, &oa) == nullptr && errno == EINVAL, "open_qp through another domain: EINVAL");
  oa.xrcd = x2;
  ibv_qp* opened = ibv_open_qp(a2.ctx, &oa);
  check(opened != nullptr && opened->qp_num == tgt->qp_num, "open_qp(the other context's receive QP)");

  // The XRC SRQ in context 2, its CQ there.
  ibv_cq* cq2 = ibv_create_cq(a2.ctx, 16, nullptr, nullptr, 0);
  ibv_srq_init_attr_ex sa{};
  sa.attr.max_wr = 4;
  sa.attr.max_sge = 1;
  sa.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD;
  sa.srq_type = IBV_SRQT_XRC;
  sa.xrcd = x2;
  sa.cq = cq2;
  sa.pd = a2.pd;
  ibv_srq* srq = ibv_create_srq_ex(a2.ctx, &sa);
  uint32_t srqn = 0;
  check(srq != nullptr && ibv_get_srq_num(srq, &srqn) == 0, "create_srq_ex(XRC), get_srq_num %u", srqn);
  sa.xrcd = lone;  // an SRQ of the private domain, for the refusal below
  ibv_srq* foreign = ibv_create_srq_ex(a2.ctx, &sa);
  uint32_t foreign_n = 0;
  check(foreign != nullptr && ibv_get_srq_num(foreign, &foreign_n) == 0, "an XRC SRQ of the private domain");
  check(ibv_close_xrcd(lone) == EBUSY, "close_xrcd with an SRQ of it: EBUSY");
  ibv_recv_wr rw{};
  ibv_sge sge{reinterpret_cast<uintptr_t>(a2.buf), 256, a2.mr->lkey};
  rw.wr_id = 77;
  rw.sg_list = &sge;
  rw.num_sge = 1;
  ibv_recv_wr* bad_r = nullptr;
  check(srq != nullptr && ibv_post_srq_recv(srq, &rw, &bad_r) == 0, "post_srq_recv to the XRC SRQ");

  // Host B's XRC send QP toward the receive QP (brought up by context 2, through its open handle).
  ibv_cq* bcq = ibv_create_cq(b.ctx, 16, nullptr, nullptr, 0);
  qa = ibv_qp_init_attr_ex{};
  qa.qp_type = IBV_QPT_XRC_SEND;
  qa.comp_mask = IBV_QP_INIT_ATTR_PD;
  qa.pd = b.pd;
  qa.send_cq = bcq;
  qa.cap.max_send_wr = 4;
  qa.cap.max_send_sge = 1;
  ibv_qp* ini = ibv_create_qp_ex(b.ctx, &qa);
  check(ini != nullptr, "create_qp_ex(XRC_SEND) with no receive CQ");
  if (ini == nullptr || opened == nullptr || srq == nullptr || foreign == nullptr) return;
  connect_xrc(opened, ini->qp_num, b.gid);
  connect_xrc(ini, tgt->qp_num, a1.gid);
  std::memcpy(b.buf, "through XRC", 12);
  ibv_sge ss{reinterpret_cast<uintptr_t>(b.buf), 12, b.mr->lkey};
  ibv_send_wr sw{};
  sw.wr_id = 5;
  sw.sg_list = &ss;
  sw.num_sge = 1;
  sw.opcode = IBV_WR_SEND;
  sw.send_flags = IBV_SEND_SIGNALED;
  sw.qp_type.xrc.remote_srqn = srqn;
  ibv_send_wr* bad_s = nullptr;
  ibv_wc wc[2]{};
  check(ibv_post_send(ini, &sw, &bad_s) == 0 && poll_n(bcq, wc, 1) == 1 && wc[0].status == IBV_WC_SUCCESS,
        "XRC SEND from host B completes");
  check(poll_n(cq2, wc, 1) == 1 && wc[0].status == IBV_WC_SUCCESS && wc[0].wr_id == 77 &&
            wc[0].qp_num == tgt->qp_num && wc[0].byte_len == 12 && std::memcmp(a2.buf, "through XRC", 12) == 0,
        "it lands in context 2's XRC SRQ, its CQ naming the receive QP of context 1");

  // The creator lets go; the opener's handle keeps the QP. A request for the private domain's SRQ
  // is an invalid request.
  check(ibv_destroy_qp(tgt) == 0, "destroy_qp by the creator, the other context still holds it");
  ibv_qp_attr qattr{};
  ibv_qp_init_attr qinit{};
  check(ibv_query_qp(opened, &qattr, IBV_QP_STATE, &qinit) == 0 && qattr.qp_state == IBV_QPS_RTS,
        "query_qp through the opened handle: RTS");
  sw.qp_type.xrc.remote_srqn = foreign_n;
  check(ibv_post_send(ini, &sw, &bad_s) == 0 && poll_n(bcq, wc, 1) == 1 && wc[0].status == IBV_WC_REM_INV_REQ_ERR,
        "XRC SEND to an SRQ of another domain: REM_INV_REQ_ERR");

  check(ibv_destroy_qp(ini) == 0 && ibv_destroy_qp(opened) == 0 && ibv_destroy_srq(srq) == 0 &&
            ibv_destroy_srq(foreign) == 0,
        "destroy the QPs and SRQs");
  check(ibv_close_xrcd(lone) == 0 && ibv_close_xrcd(x2) == 0 && ibv_close_xrcd(x1) == 0, "close_xrcd x3");
  ibv_destroy_cq(cq2);
  ibv_destroy_cq(bcq);
  close(fd);
  for (Dev* d : {&a1, &a2}) {
    ibv_dereg_mr(d->mr);
    ibv_dealloc_pd(d->pd);
    ibv_close_device(d->ctx);
    std::free(d->buf);
  }
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: verbs_api_probe DEV_A DEV_B [DROCED_B_PID]\n");
    return 2;
  }
  Dev a = open_dev(argv[1]);
  Dev b = open_dev(argv[2]);
  check(a.attr.atomic_cap == IBV_ATOMIC_HCA && a.attr.max_qp > 0 && a.attr.phys_port_cnt == 1,
        "query_device: atomics, QPs, one port");
  ibv_port_attr pa{};
  check(ibv_query_port(a.ctx, 1, &pa) == 0 && pa.state == IBV_PORT_ACTIVE && pa.link_layer == IBV_LINK_LAYER_ETHERNET &&
            pa.gid_tbl_len > 1,
        "query_port: active, Ethernet, GIDs");
  check(ibv_query_port(a.ctx, 2, &pa) == EINVAL, "query_port(2): EINVAL");
  check(a.gid.raw[10] == 0xff && a.gid.raw[11] == 0xff, "GID 1 is IPv4-mapped");

  bad_arguments(a);
  rc_traffic(a, b);
  memory_windows(a, b);
  atomic_write(a, b);
  ud_traffic(a, b);
  ud_multicast(a, b);
  channels_and_events(a, b);
  resize_cq(a, b);
  xrc(argv[1], b);
  if (argc > 3) device_fatal(b, static_cast<pid_t>(std::atoi(argv[3])));

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
