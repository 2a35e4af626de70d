// The data path: post send/receive, poll and arm CQs, the extended CQ and QP
// APIs. No allocation, no locks beyond the client library's per-queue
// spinlocks, no syscalls (the client library's doorbell writes droced's wake
// eventfd only when droced said it sleeps) but a sched_yield when a thread's
// polls keep finding nothing (provider/verbs/poll_yield.h).
#include <endian.h>
#include <sched.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/clock.h"
#include "provider/verbs/convert.h"
#include "provider/verbs/objects.h"
#include "provider/verbs/poll_yield.h"

namespace droce::verbs {

namespace {

constexpr int kPollBurst = 16;

// Per polling thread (a program may poll its CQs from several), counted over all its CQs.
void after_poll(bool found) {
  static const uint32_t every = provider::EmptyPollYield::every_from(std::getenv("DROCE_POLL_YIELD"));
  thread_local provider::EmptyPollYield policy(every);
  if (!policy.after_poll(found)) return;
  const uint64_t from = core::monotonic_ns();
  sched_yield();
  policy.after_yield(core::monotonic_ns() - from);
}

// One ibv_send_wr, converted once: its header, then the client library
// writes the header and the WR's own scatter list (or the inline bytes it
// points at) straight into the ring's slot.
int post_one(VerbsQp* q, const ibv_send_wr& wr) {
  uint32_t ah = 0;
  if (q->type == IBV_QPT_UD) {
    const ibv_ah* a = wr.wr.ud.ah;
    if (a == nullptr || a->context != q->ibv->context) return EINVAL;
    ah = a->handle;
  }
  abi::SendWqeHeader h;
  if (int rc = to_send_wqe_header(wr, q->type, ah, &h); rc != 0) return rc;
  const int rc = positive(q->qp->post_send(h, {wr.sg_list, static_cast<uint32_t>(wr.num_sge)}));
  // A bound window's key is the one the bind asked for, so that the next bind, local
  // invalidate or dealloc through this ibv_mw names it (ibv_bind_mw does the same).
  if (rc == 0 && wr.opcode == IBV_WR_BIND_MW) wr.bind_mw.mw->rkey = wr.bind_mw.rkey;
  return rc;
}

// ---- Extended CQ (ibv_create_cq_ex): one completion at a time ----

VerbsCq* cq_ex_of(ibv_cq_ex* cq) { return cq_of(ibv_cq_ex_to_cq(cq)); }

int cq_ex_next(ibv_cq_ex* cq) {
  VerbsCq* v = cq_ex_of(cq);
  const int n = v->cq->poll(&v->current, 1);
  if (n < 0) return EIO;
  if (n == 0) return ENOENT;
  cq->wr_id = v->current.wr_id;
  cq->status = static_cast<ibv_wc_status>(v->current.status);
  return 0;
}

int cq_ex_start_poll(ibv_cq_ex* cq, ibv_poll_cq_attr* attr) {
  if (attr != nullptr && attr->comp_mask != 0) return EINVAL;
  const int rc = cq_ex_next(cq);
  after_poll(rc != ENOENT);
  return rc;
}
void cq_ex_end_poll(ibv_cq_ex*) {}
ibv_wc_opcode cq_ex_read_opcode(ibv_cq_ex* cq) { return static_cast<ibv_wc_opcode>(cq_ex_of(cq)->current.opcode); }
uint32_t cq_ex_read_vendor_err(ibv_cq_ex* cq) { return cq_ex_of(cq)->current.vendor_err; }
uint32_t cq_ex_read_byte_len(ibv_cq_ex* cq) { return cq_ex_of(cq)->current.byte_len; }
__be32 cq_ex_read_imm_data(ibv_cq_ex* cq) {
  const abi::Completion& c = cq_ex_of(cq)->current;
  return (c.wc_flags & abi::kWcWithInv) ? c.imm_data : htobe32(c.imm_data);
}
uint32_t cq_ex_read_qp_num(ibv_cq_ex* cq) { return cq_ex_of(cq)->current.qp_num; }
uint32_t cq_ex_read_src_qp(ibv_cq_ex* cq) { return cq_ex_of(cq)->current.src_qp; }
unsigned int cq_ex_read_wc_flags(ibv_cq_ex* cq) { return cq_ex_of(cq)->current.wc_flags; }
uint32_t cq_ex_read_slid(ibv_cq_ex* cq) { return cq_ex_of(cq)->current.slid; }
uint8_t cq_ex_read_sl(ibv_cq_ex* cq) { return cq_ex_of(cq)->current.sl; }
uint8_t cq_ex_read_dlid_path_bits(ibv_cq_ex* cq) { return cq_ex_of(cq)->current.dlid_path_bits; }
// The device clock is CLOCK_MONOTONIC in ns (hca_core_clock 1 GHz), read by droced as it
// pushed the completion. The wall clock adds CLOCK_REALTIME's offset from it as it is now
// (two vDSO reads, no syscall): exact unless the clock was stepped since the completion.
uint64_t cq_ex_read_completion_ts(ibv_cq_ex* cq) { return cq_ex_of(cq)->current.timestamp_ns; }
uint64_t cq_ex_read_completion_wallclock_ns(ibv_cq_ex* cq) {
  timespec rt{};
  clock_gettime(CLOCK_REALTIME, &rt);
  const uint64_t mono = core::monotonic_ns();
  const uint64_t real = uint64_t(rt.tv_sec) * 1'000'000'000u + uint64_t(rt.tv_nsec);
  return cq_ex_of(cq)->current.timestamp_ns + (real - mono);
}

// ---- Extended QP (ibv_wr_*): WRs gathered between wr_start and wr_complete ----

VerbsQp* qp_ex_of(ibv_qp_ex* qpx) { return qp_of(&qpx->qp_base); }

// A new WR of the batch with the QP's current wr_id and flags, or nullptr
// (the batch remembers the error for wr_complete).
abi::SendWr* begin_wr(ibv_qp_ex* qpx, abi::WrOpcode op) {
  WrBatch& b = *qp_ex_of(qpx)->batch;
  if (b.count == WrBatch::kMax) {
    if (b.error == 0) b.error = ENOMEM;
    return nullptr;
  }
  abi::SendWr& w = b.wrs[b.count++];
  w.wr_id = qpx->wr_id;
  w.opcode = op;
  w.send_flags = qpx->wr_flags & (IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE);
  w.imm_data = w.invalidate_rkey = 0;
  w.remote_addr = 0;
  w.rkey = 0;
  w.compare_add = w.swap = 0;
  w.ah = w.remote_qpn = w.remote_qkey = 0;
  w.bind_mr_lkey = w.bind_access = 0;
  w.bind_length = 0;
  w.num_sge = 0;
  return &w;
}

// The batch's current WR, for the setters; nullptr after a failed begin.
abi::SendWr* current_wr(ibv_qp_ex* qpx) {
  WrBatch& b = *qp_ex_of(qpx)->batch;
  if (b.count == 0 || b.error != 0) {
    if (b.error == 0) b.error = EINVAL;  // a setter before any WR
    return nullptr;
  }
  return &b.wrs[b.count - 1];
}

void wr_start(ibv_qp_ex* qpx) {
  WrBatch& b = *qp_ex_of(qpx)->batch;
  b.count = 0;
  b.error = 0;
}

int wr_complete(ibv_qp_ex* qpx) {
  VerbsQp* q = qp_ex_of(qpx);
  WrBatch& b = *q->batch;
  int rc = b.error;
  for (uint32_t i = 0; rc == 0 && i < b.count; ++i) rc = positive(q->qp->post_send(b.wrs[i]));
  b.count = 0;
  b.error = 0;
  return rc;
}

void wr_abort(ibv_qp_ex* qpx) {
  WrBatch& b = *qp_ex_of(qpx)->batch;
  b.count = 0;
  b.error = 0;
}

void wr_send(ibv_qp_ex* qpx) { (void)begin_wr(qpx, abi::WrOpcode::send); }
void wr_send_imm(ibv_qp_ex* qpx, __be32 imm) {
  if (auto* w = begin_wr(qpx, abi::WrOpcode::send_with_imm)) w->imm_data = be32toh(imm);
}
void wr_send_inv(ibv_qp_ex* qpx, uint32_t rkey) {
  if (auto* w = begin_wr(qpx, abi::WrOpcode::send_with_inv)) w->invalidate_rkey = rkey;
}
void wr_local_inv(ibv_qp_ex* qpx, uint32_t rkey) {
  if (auto* w = begin_wr(qpx, abi::WrOpcode::local_inv)) w->invalidate_rkey = rkey;
}
void wr_bind_mw(ibv_qp_ex* qpx, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* info) {
  if (mw == nullptr || info == nullptr || (info->mr == nullptr && info->length != 0)) {
    WrBatch& b = *qp_ex_of(qpx)->batch;
    if (b.error == 0) b.error = EINVAL;
    return;
  }
  if (auto* w = begin_wr(qpx, abi::WrOpcode::bind_mw)) {
    w->invalidate_rkey = mw->rkey;
    w->rkey = rkey;
    w->remote_addr = info->addr;
    w->bind_length = info->length;
    w->bind_mr_lkey = info->mr != nullptr ? info->mr->lkey : 0;
    w->bind_access = uint32_t(info->mw_access_flags);
    mw->rkey = rkey;  // as post_one does for a posted bind
  }
}
void wr_rdma_write(ibv_qp_ex* qpx, uint32_t rkey, uint64_t addr) {
  if (auto* w = begin_wr(qpx, abi::WrOpcode::rdma_write)) {
    w->rkey = rkey;
    w->remote_addr = addr;
  }
}
void wr_rdma_write_imm(ibv_qp_ex* qpx, uint32_t rkey, uint64_t addr, __be32 imm) {
  if (auto* w = begin_wr(qpx, abi::WrOpcode::rdma_write_with_imm)) {
    w->rkey = rkey;
    w->remote_addr = addr;
    w->imm_data = be32toh(imm);
  }
}
void wr_rdma_read(ibv_qp_ex* qpx, uint32_t rkey, uint64_t addr) {
  if (auto* w = begin_wr(qpx, abi::WrOpcode::rdma_read)) {
    w->rkey = rkey;
    w->remote_addr = addr;
  }
}
void wr_atomic_cmp_swp(ibv_qp_ex* qpx, uint32_t rkey, uint64_t addr, uint64_t compare, uint64_t swap) {
  if (auto* w = begin_wr(qpx, abi::WrOpcode::atomic_cmp_and_swp)) {
    w->rkey = rkey;
    w->remote_addr = addr;
    w->compare_add = compare;
    w->swap = swap;
  }
}
void wr_atomic_fetch_add(ibv_qp_ex* qpx, uint32_t rkey, uint64_t addr, uint64_t add) {
  if (auto* w = begin_wr(qpx, abi::WrOpcode::atomic_fetch_and_add)) {
    w->rkey = rkey;
    w->remote_addr = addr;
    w->compare_add = add;
  }
}
// IBA 1.5 ATOMIC WRITE: the 8 bytes at `atomic_wr` go in the WR, copied now (the caller may
// reuse its buffer); no scatter list.
void wr_atomic_write(ibv_qp_ex* qpx, uint32_t rkey, uint64_t addr, const void* atomic_wr) {
  if (auto* w = begin_wr(qpx, abi::WrOpcode::atomic_write)) {
    w->rkey = rkey;
    w->remote_addr = addr;
    std::memcpy(&w->compare_add, atomic_wr, 8);
  }
}

void wr_set_ud_addr(ibv_qp_ex* qpx, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
  abi::SendWr* w = current_wr(qpx);
  if (w == nullptr) return;
  if (ah == nullptr || ah->context != qpx->qp_base.context) {
    qp_ex_of(qpx)->batch->error = EINVAL;
    return;
  }
  w->ah = ah->handle;
  w->remote_qpn = remote_qpn;
  w->remote_qkey = remote_qkey;
}

// XRC send QPs: the destination XRC SRQ of the WR being built (the XRCETH's), where
// ibv_post_send has wr.qp_type.xrc.remote_srqn.
void wr_set_xrc_srqn(ibv_qp_ex* qpx, uint32_t remote_srqn) {
  if (abi::SendWr* w = current_wr(qpx)) w->remote_qpn = remote_srqn & 0xffffff;
}

void wr_set_sge(ibv_qp_ex* qpx, uint32_t lkey, uint64_t addr, uint32_t length) {
  abi::SendWr* w = current_wr(qpx);
  if (w == nullptr) return;
  w->sg_list[0] = {addr, length, lkey};
  w->num_sge = 1;
}

void wr_set_sge_list(ibv_qp_ex* qpx, size_t num_sge, const ibv_sge* sg_list) {
  abi::SendWr* w = current_wr(qpx);
  if (w == nullptr) return;
  if (num_sge > abi::kMaxSge || (num_sge > 0 && sg_list == nullptr)) {
    qp_ex_of(qpx)->batch->error = EINVAL;
    return;
  }
  if (num_sge > 0) std::memcpy(static_cast<void*>(w->sg_list), sg_list, num_sge * sizeof(ibv_sge));
  w->num_sge = static_cast<uint32_t>(num_sge);
}

void wr_set_inline_data_list(ibv_qp_ex* qpx, size_t num_buf, const ibv_data_buf* bufs) {
  abi::SendWr* w = current_wr(qpx);
  if (w == nullptr) return;
  VerbsQp* q = qp_ex_of(qpx);
  WrBatch& b = *q->batch;
  uint8_t* dst = b.inline_data[b.count - 1];
  size_t len = 0;
  for (size_t i = 0; i < num_buf; ++i) {
    if (bufs[i].length > q->cap.max_inline_data - len) {
      b.error = EINVAL;  // more than the QP's max_inline_data (ibv_wr_post(3))
      return;
    }
    std::memcpy(dst + len, bufs[i].addr, bufs[i].length);
    len += bufs[i].length;
  }
  w->send_flags |= abi::kSendInline;
  w->sg_list[0] = {reinterpret_cast<uintptr_t>(dst), static_cast<uint32_t>(len), 0};
  w->num_sge = len != 0 ? 1 : 0;
}

void wr_set_inline_data(ibv_qp_ex* qpx, void* addr, size_t length) {
  const ibv_data_buf b{addr, length};
  wr_set_inline_data_list(qpx, 1, &b);
}

// A list of receives into a QP's RQ or an SRQ: the first that fails stops it and is *bad_wr.
template <class Queue>
int post_recv_list(Queue* queue, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  abi::RecvWr r;
  for (; wr != nullptr; wr = wr->next) {
    int rc = to_recv_wr(*wr, &r);
    if (rc == 0) rc = positive(queue->post_recv(r));
    if (rc != 0) {
      if (bad_wr != nullptr) *bad_wr = wr;
      return rc;
    }
  }
  return 0;
}

}  // namespace

void fill_cq_ex_ops(ibv_cq_ex* cq, uint64_t wc_flags) {
  cq->start_poll = cq_ex_start_poll;
  cq->next_poll = cq_ex_next;
  cq->end_poll = cq_ex_end_poll;
  cq->read_opcode = cq_ex_read_opcode;
  cq->read_vendor_err = cq_ex_read_vendor_err;
  cq->read_byte_len = cq_ex_read_byte_len;
  cq->read_imm_data = cq_ex_read_imm_data;
  cq->read_qp_num = cq_ex_read_qp_num;
  cq->read_src_qp = cq_ex_read_src_qp;
  cq->read_wc_flags = cq_ex_read_wc_flags;
  cq->read_slid = cq_ex_read_slid;
  cq->read_sl = cq_ex_read_sl;
  cq->read_dlid_path_bits = cq_ex_read_dlid_path_bits;
  if (wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) cq->read_completion_ts = cq_ex_read_completion_ts;
  if (wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)
    cq->read_completion_wallclock_ns = cq_ex_read_completion_wallclock_ns;
}

void fill_qp_ex_ops(ibv_qp_ex* qpx, uint64_t ops) {
  qpx->wr_start = wr_start;
  qpx->wr_complete = wr_complete;
  qpx->wr_abort = wr_abort;
  if (ops & IBV_QP_EX_WITH_SEND) qpx->wr_send = wr_send;
  if (ops & IBV_QP_EX_WITH_SEND_WITH_IMM) qpx->wr_send_imm = wr_send_imm;
  if (ops & IBV_QP_EX_WITH_SEND_WITH_INV) qpx->wr_send_inv = wr_send_inv;
  if (ops & IBV_QP_EX_WITH_LOCAL_INV) qpx->wr_local_inv = wr_local_inv;
  if (ops & IBV_QP_EX_WITH_BIND_MW) qpx->wr_bind_mw = wr_bind_mw;
  if (ops & IBV_QP_EX_WITH_RDMA_WRITE) qpx->wr_rdma_write = wr_rdma_write;
  if (ops & IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM) qpx->wr_rdma_write_imm = wr_rdma_write_imm;
  if (ops & IBV_QP_EX_WITH_RDMA_READ) qpx->wr_rdma_read = wr_rdma_read;
  if (ops & IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP) qpx->wr_atomic_cmp_swp = wr_atomic_cmp_swp;
  if (ops & IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD) qpx->wr_atomic_fetch_add = wr_atomic_fetch_add;
  if (ops & IBV_QP_EX_WITH_ATOMIC_WRITE) qpx->wr_atomic_write = wr_atomic_write;
  qpx->wr_set_ud_addr = wr_set_ud_addr;
  qpx->wr_set_xrc_srqn = wr_set_xrc_srqn;
  qpx->wr_set_sge = wr_set_sge;
  qpx->wr_set_sge_list = wr_set_sge_list;
  qpx->wr_set_inline_data = wr_set_inline_data;
  qpx->wr_set_inline_data_list = wr_set_inline_data_list;
}

}  // namespace droce::verbs

using namespace droce;
using namespace droce::verbs;

extern "C" {

int droce_post_send(ibv_qp* ibqp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  VerbsQp* q = qp_of(ibqp);
  for (; wr != nullptr; wr = wr->next) {
    if (int rc = post_one(q, *wr); rc != 0) {
      if (bad_wr != nullptr) *bad_wr = wr;
      return rc;
    }
  }
  return 0;
}

int droce_post_recv(ibv_qp* ibqp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  return post_recv_list(qp_of(ibqp)->qp, wr, bad_wr);
}

int droce_post_srq_recv(ibv_srq* ibsrq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  return post_recv_list(srq_of(ibsrq)->srq, wr, bad_wr);
}

int droce_poll_cq(ibv_cq* ibcq, int num_entries, ibv_wc* wc) {
  if (num_entries < 0 || (num_entries > 0 && wc == nullptr)) return -EINVAL;
  VerbsCq* v = cq_of(ibcq);
  abi::Completion buf[kPollBurst];
  int done = 0;
  while (done < num_entries) {
    const int want = num_entries - done < kPollBurst ? num_entries - done : kPollBurst;
    const int got = v->cq->poll(buf, want);
    if (got < 0) return done > 0 ? done : -EIO;
    for (int i = 0; i < got; ++i) to_wc(buf[i], &wc[done + i]);
    done += got;
    if (got < want) break;
  }
  if (num_entries > 0) after_poll(done != 0);
  return done;
}

int droce_req_notify_cq(ibv_cq* ibcq, int solicited_only) {
  return positive(cq_of(ibcq)->cq->req_notify(solicited_only != 0));
}

}  // extern "C"
