// CQs, SRQs and QPs: create, modify, query, destroy (the control path).
#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "provider/preload/comp_channel.h"
#include "provider/verbs/convert.h"
#include "provider/verbs/objects.h"

namespace droce::verbs {

namespace {

// The droced id of a completion channel for a CQ of `ctx`, registering it
// with droced the first time (which hands droced the pipe's only write end).
int channel_id(VerbsContext* ctx, ibv_comp_channel* channel, uint32_t* id) {
  *id = 0;
  if (channel == nullptr) return 0;
  // A channel of another context (or one libibverbs made, which cannot exist
  // on a droce context: its kernel command fails) is not ours to use.
  if (channel->context != ctx->ibv) return EINVAL;
  auto* ch = reinterpret_cast<droce_comp_channel*>(channel);
  if (ch->magic != DROCE_COMP_CHANNEL_MAGIC) return EINVAL;
  pthread_mutex_lock(&ctx->ibv->mutex);
  int rc = 0;
  if (ch->droced_id == 0) {
    if (ch->write_fd < 0) {
      rc = EINVAL;
    } else {
      uint32_t got = 0;
      rc = positive(ctx->client->register_channel(ch->write_fd, &got));
      if (rc == 0) {
        ::close(ch->write_fd);
        ch->write_fd = -1;
        ch->droced_id = got;
      }
    }
  }
  *id = ch->droced_id;
  pthread_mutex_unlock(&ctx->ibv->mutex);
  return rc;
}

// Takes the unread completion events of `cq` (gone from droced: no more come) out of its
// channel, as the kernel takes them out of the event file: ibv_get_cq_event would hand out the
// freed CQ. Records are 8-byte CQ pointers in a pipe whose only lasting write end is droced's
// (so that the reader sees end-of-file when droced dies); the other CQs' records go back, in
// their order, through a write end opened for the moment. Both ends are opened anew through
// /proc (non-blocking, whatever the application set on channel->fd); without /proc the records
// stay. They fit back unless droced wrote more meanwhile (it writes at most one record per
// arming of a CQ); those that do not are counted lost for their CQ's destroy_cq. Both ends are
// opened before anything is read, so that a write end that cannot be opened leaves every record
// where it was instead of losing the other CQs'.
// Returns how many of `cq`'s records it took (with those an earlier take-back could not put
// back), or -1 when some may still be in the channel.
int64_t take_back_comp_events(VerbsContext* ctx, ibv_cq* cq) {
  if (cq->channel == nullptr) return 0;
  // Locked before the channel is looked at: another destroy_cq may hold this CQ's records
  // out of the pipe, to be put back.
  std::lock_guard<std::mutex> g(ctx->channel_mutex);
  int64_t taken = 0;
  if (auto lost = ctx->comp_records_lost.find(reinterpret_cast<uintptr_t>(cq)); lost != ctx->comp_records_lost.end()) {
    taken = int64_t(lost->second);
    ctx->comp_records_lost.erase(lost);
  }
  int queued = 0;
  if (::ioctl(cq->channel->fd, FIONREAD, &queued) != 0) return -1;
  if (queued == 0) return taken;
  const std::string path = "/proc/self/fd/" + std::to_string(cq->channel->fd);
  core::Fd r(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  core::Fd w(::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC));
  if (!r.valid() || !w.valid()) return -1;
  std::vector<uint64_t> keep;
  uint64_t record;
  while (::read(r.get(), &record, sizeof record) == sizeof record) {
    if (record == reinterpret_cast<uintptr_t>(cq)) ++taken;
    else keep.push_back(record);
  }
  if (keep.empty()) return taken;
  // droced may have filled the pipe meanwhile: what does not fit is lost, and counted for its
  // CQ's destroy. Records stay whole: every write to the pipe is a multiple of 8 bytes.
  const ssize_t n = ::write(w.get(), keep.data(), keep.size() * sizeof keep[0]);
  for (size_t i = n > 0 ? size_t(n) / sizeof keep[0] : 0; i < keep.size(); ++i) ++ctx->comp_records_lost[keep[i]];
  return taken;
}

constexpr uint64_t kCqExWcFlags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |
                                  IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |
                                  IBV_WC_EX_WITH_DLID_PATH_BITS;
constexpr uint64_t kCqExTimestampFlags =
    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;

// A CQ's provider state goes with its parent domain's memory, if made on one.
void free_cq_state(VerbsCq* v) {
  VerbsPd* d = v->parent_domain;
  domain_delete(v, v->memory);
  if (d != nullptr) --d->users;
}

CqUnion* create_cq_common(ibv_context* context, int cqe, ibv_comp_channel* channel, int comp_vector,
                          bool extended, bool timestamp = false, ibv_pd* parent_domain = nullptr) {
  VerbsContext* ctx = context_of(context);
  if (cqe < 1 || static_cast<uint32_t>(cqe) > ctx->device.max_cqe) return fail<CqUnion>(EINVAL);
  if (comp_vector < 0 || comp_vector >= context->num_comp_vectors) return fail<CqUnion>(EINVAL);
  uint32_t ch = 0;
  if (int rc = channel_id(ctx, channel, &ch); rc != 0) return fail<CqUnion>(rc);
  auto* o = new (std::nothrow) Object<CqUnion>();
  DomainMemory mem;
  VerbsCq* v = domain_new<VerbsCq>(parent_domain, kResourceCq, &mem);
  if (o == nullptr || v == nullptr) {
    delete o;
    domain_delete(v, mem);
    return fail<CqUnion>(ENOMEM);
  }
  v->memory = mem;
  v->parent_domain = parent_domain_of(parent_domain);
  if (v->parent_domain != nullptr) ++v->parent_domain->users;
  std::memset(&o->obj, 0, sizeof o->obj);
  client::Cq* cq = nullptr;
  if (int rc = ctx->client->create_cq(static_cast<uint32_t>(cqe), &cq, ch, reinterpret_cast<uintptr_t>(&o->obj.cq),
                                      timestamp);
      rc != 0) {
    delete o;
    free_cq_state(v);
    return fail<CqUnion>(rc);
  }
  v->ctx = ctx;
  v->cq = cq;
  v->ibv = &o->obj.cq;
  v->extended = extended;
  o->droce = v;
  o->obj.cq.context = context;
  o->obj.cq.handle = cq->id();
  o->obj.cq.cqe = static_cast<int>(cq->cqe());
  {
    std::lock_guard<std::mutex> g(ctx->objects_mutex);
    ctx->cqs[cq->id()] = v;
  }
  return &o->obj;
}

// The provider's side of an SRQ on `pd` (a parent domain's allocators serve its state): checks
// `a` against the device, lets `create` make droced's SRQ (given the SGE count granted), and
// fills in the ibv_srq and `a` as granted. Basic and XRC SRQs differ only in `create`.
template <class Create>
ibv_srq* new_srq(ibv_pd* pd, ibv_srq_attr& a, bool xrc, Create create) {
  VerbsContext* ctx = context_of(pd->context);
  if (a.max_wr == 0 || a.max_wr > ctx->device.max_srq_wr || a.max_sge > ctx->device.max_srq_sge ||
      a.srq_limit > a.max_wr)
    return fail<ibv_srq>(EINVAL);
  const uint32_t max_sge = a.max_sge == 0 ? 1 : a.max_sge;
  auto* o = new (std::nothrow) Object<ibv_srq>();
  DomainMemory mem;
  VerbsSrq* v = domain_new<VerbsSrq>(pd, kResourceSrq, &mem);
  if (o == nullptr || v == nullptr) {
    delete o;
    domain_delete(v, mem);
    return fail<ibv_srq>(ENOMEM);
  }
  client::Srq* srq = nullptr;
  if (int rc = create(max_sge, &srq); rc != 0) {
    delete o;
    domain_delete(v, mem);
    return fail<ibv_srq>(rc);
  }
  v->memory = mem;
  v->parent_domain = parent_domain_of(pd);
  if (v->parent_domain != nullptr) ++v->parent_domain->users;
  v->ctx = ctx;
  v->srq = srq;
  v->ibv = &o->obj;
  v->max_sge = max_sge;
  v->xrc = xrc;
  o->droce = v;
  o->obj.context = pd->context;
  o->obj.pd = pd;
  o->obj.handle = srq->id();
  a.max_wr = srq->max_wr();
  a.max_sge = max_sge;
  {
    std::lock_guard<std::mutex> g(ctx->objects_mutex);
    ctx->srqs[srq->id()] = v;
  }
  return &o->obj;
}

ibv_srq* new_basic_srq(ibv_pd* pd, ibv_srq_attr& a) {
  return new_srq(pd, a, false, [&](uint32_t max_sge, client::Srq** out) {
    return context_of(pd->context)->client->create_srq(pd->handle, a.max_wr, max_sge, a.srq_limit, out);
  });
}

}  // namespace

}  // namespace droce::verbs

using namespace droce;
using namespace droce::verbs;

extern "C" {

// ---- CQs ---------------------------------------------------------------------------

ibv_cq* droce_create_cq(ibv_context* context, int cqe, ibv_comp_channel* channel, int comp_vector) {
  CqUnion* u = create_cq_common(context, cqe, channel, comp_vector, false);
  return u != nullptr ? &u->cq : nullptr;  // libibverbs runs verbs_init_cq()
}

ibv_cq_ex* droce_create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* attr) {
  if (attr == nullptr) return fail<ibv_cq_ex>(EINVAL);
  if (attr->comp_mask & ~uint32_t{IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD})
    return fail<ibv_cq_ex>(EOPNOTSUPP);
  if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) && (attr->flags & ~uint32_t{IBV_CREATE_CQ_ATTR_SINGLE_THREADED}))
    return fail<ibv_cq_ex>(EOPNOTSUPP);
  // A CQ on a parent domain (its allocators serve the CQ's provider state): a parent domain
  // of this context, not a plain PD (as mlx5).
  ibv_pd* parent = nullptr;
  if (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) {
    parent = attr->parent_domain;
    if (parent == nullptr || parent->context != context || parent_domain_of(parent) == nullptr)
      return fail<ibv_cq_ex>(EINVAL);
  }
  const bool timestamps = (context_of(context)->device.device_caps & abi::ctl::kDeviceCapCompletionTimestamp) != 0;
  if (attr->wc_flags & ~(kCqExWcFlags | (timestamps ? kCqExTimestampFlags : 0))) return fail<ibv_cq_ex>(EOPNOTSUPP);
  if (attr->cqe > static_cast<uint32_t>(INT32_MAX)) return fail<ibv_cq_ex>(EINVAL);
  CqUnion* u = create_cq_common(context, static_cast<int>(attr->cqe), attr->channel,
                                static_cast<int>(attr->comp_vector), true, (attr->wc_flags & kCqExTimestampFlags) != 0,
                                parent);
  if (u == nullptr) return nullptr;
  // libibverbs' ibv_create_cq_ex() wrapper (__lib_ibv_create_cq_ex) runs
  // verbs_init_cq() on what this returns, as ibv_create_cq() does: it sets
  // the context, channel and cq_context and takes the channel's reference.
  // Taking it here too counted the channel twice, and ibv_destroy_comp_channel()
  // failed with EBUSY after every CQ was gone (UCX warned at each teardown).
  fill_cq_ex_ops(&u->cq_ex, attr->wc_flags);
  return &u->cq_ex;
}

int droce_destroy_cq(ibv_cq* ibcq) {
  VerbsCq* v = cq_of(ibcq);
  VerbsContext* ctx = v->ctx;
  // EBUSY while a QP uses it (droced counts the users).
  uint64_t written = client::Context::kEventsUnknown;
  if (int rc = ctx->client->destroy_cq(v->cq, &written); rc != 0) return positive(rc);
  const uint32_t async_reported = ctx->forget(ibcq, &v->async_events_reported);
  const int64_t taken = take_back_comp_events(ctx, ibcq);
  // The completion events the application must acknowledge, as the kernel's
  // comp_events_reported: every record droced wrote that has left the channel,
  // including one a thread has read but not yet passed to the cq_event op. Only
  // without droced's count (an older droced, or gone) or with records maybe left
  // behind, those counted by the op.
  const bool counted = written != client::Context::kEventsUnknown && taken >= 0 && uint64_t(taken) <= written;
  const uint32_t comp_reported = counted ? uint32_t(written - uint64_t(taken)) : 0;
  pthread_mutex_lock(&ibcq->mutex);
  while (ibcq->comp_events_completed != (counted ? comp_reported : v->comp_events_reported) ||
         ibcq->async_events_completed != async_reported)
    pthread_cond_wait(&ibcq->cond, &ibcq->mutex);
  pthread_mutex_unlock(&ibcq->mutex);
  free_cq_state(v);
  delete object_of(reinterpret_cast<CqUnion*>(ibcq));
  return 0;
}

int droce_resize_cq(ibv_cq* ibcq, int cqe) {
  VerbsCq* v = cq_of(ibcq);
  if (cqe < 1 || static_cast<uint32_t>(cqe) > v->ctx->device.max_cqe) return EINVAL;
  // droced moves the ring; fewer entries than the CQ holds unpolled is EINVAL.
  if (int rc = v->ctx->client->resize_cq(v->cq, static_cast<uint32_t>(cqe)); rc != 0) return positive(rc);
  ibcq->cqe = static_cast<int>(v->cq->cqe());  // the actual size, rounded up as at create (ibv_resize_cq(3))
  return 0;
}

void droce_cq_event(ibv_cq* ibcq) {
  VerbsCq* v = cq_of(ibcq);
  pthread_mutex_lock(&ibcq->mutex);
  ++v->comp_events_reported;
  pthread_mutex_unlock(&ibcq->mutex);
}

// ---- SRQs ----------------------------------------------------------------------------

ibv_srq* droce_create_srq(ibv_pd* pd, ibv_srq_init_attr* attr) {
  if (pd == nullptr || attr == nullptr) return fail<ibv_srq>(EINVAL);
  return new_basic_srq(pd, attr->attr);  // libibverbs fills srq_context, mutex and cond
}

ibv_srq* droce_create_srq_ex(ibv_context* context, ibv_srq_init_attr_ex* attr) {
  if (attr == nullptr) return fail<ibv_srq>(EINVAL);
  constexpr uint32_t kKnown = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD |
                              IBV_SRQ_INIT_ATTR_CQ;
  if (attr->comp_mask & ~kKnown) return fail<ibv_srq>(EOPNOTSUPP);  // tag matching
  const ibv_srq_type type = (attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) ? attr->srq_type : IBV_SRQT_BASIC;
  if (type != IBV_SRQT_BASIC && type != IBV_SRQT_XRC) return fail<ibv_srq>(EOPNOTSUPP);  // IBV_SRQT_TM
  if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || attr->pd == nullptr || attr->pd->context != context)
    return fail<ibv_srq>(EINVAL);
  ibv_srq* s = nullptr;
  if (type == IBV_SRQT_BASIC) {
    s = new_basic_srq(attr->pd, attr->attr);
  } else {
    // XRC (IBA A14): its domain and the CQ its receives complete into.
    constexpr uint32_t kXrc = IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
    if ((attr->comp_mask & kXrc) != kXrc || attr->xrcd == nullptr || attr->cq == nullptr ||
        attr->xrcd->context != context || attr->cq->context != context)
      return fail<ibv_srq>(EINVAL);
    ibv_srq_attr& a = attr->attr;
    s = new_srq(attr->pd, a, true, [&](uint32_t max_sge, client::Srq** out) {
      return context_of(context)->client->create_xrc_srq(attr->pd->handle, a.max_wr, max_sge, a.srq_limit,
                                                         xrcd_num(attr->xrcd), cq_of(attr->cq)->cq, out);
    });
  }
  if (s == nullptr) return nullptr;
  // What libibverbs' ibv_create_srq does after the op, and ibv_create_srq_ex leaves to us.
  s->srq_context = attr->srq_context;
  s->events_completed = 0;
  pthread_mutex_init(&s->mutex, nullptr);
  pthread_cond_init(&s->cond, nullptr);
  return s;
}

int droce_get_srq_num(ibv_srq* ibsrq, uint32_t* srq_num) {
  if (srq_num == nullptr) return EINVAL;
  VerbsSrq* v = srq_of(ibsrq);
  if (!v->xrc) return EINVAL;  // only an XRC SRQ has a number the wire names
  *srq_num = v->srq->id();
  return 0;
}

ibv_xrcd* droce_open_xrcd(ibv_context* context, ibv_xrcd_init_attr* attr) {
  if (attr == nullptr) return fail<ibv_xrcd>(EINVAL);
  if (attr->comp_mask >= IBV_XRCD_INIT_ATTR_RESERVED) return fail<ibv_xrcd>(EOPNOTSUPP);
  // Both are required, as libibverbs' ibv_cmd_open_xrcd has it (ibv_open_xrcd(3)).
  if (!(attr->comp_mask & IBV_XRCD_INIT_ATTR_FD) || !(attr->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS))
    return fail<ibv_xrcd>(EINVAL);
  VerbsContext* ctx = context_of(context);
  auto* o = new (std::nothrow) Object<ibv_xrcd>();
  if (o == nullptr) return fail<ibv_xrcd>(ENOMEM);
  uint32_t id = 0;
  if (int rc = ctx->client->open_xrcd(attr->fd, static_cast<uint32_t>(attr->oflags), &id); rc != 0) {
    delete o;
    return fail<ibv_xrcd>(rc);
  }
  o->droce = reinterpret_cast<void*>(static_cast<uintptr_t>(id));
  o->obj.context = context;
  return &o->obj;
}

int droce_close_xrcd(ibv_xrcd* xrcd) {
  VerbsContext* ctx = context_of(xrcd->context);
  if (int rc = ctx->client->close_xrcd(xrcd_num(xrcd)); rc != 0 && rc != -EIO) return positive(rc);
  delete object_of(xrcd);
  return 0;
}

int droce_modify_srq(ibv_srq* ibsrq, ibv_srq_attr* attr, int mask) {
  if (attr == nullptr) return EINVAL;
  if (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) return EINVAL;
  VerbsSrq* v = srq_of(ibsrq);
  return positive(v->ctx->client->modify_srq(v->srq, static_cast<uint32_t>(mask), attr->max_wr, attr->srq_limit));
}

int droce_query_srq(ibv_srq* ibsrq, ibv_srq_attr* attr) {
  if (attr == nullptr) return EINVAL;
  VerbsSrq* v = srq_of(ibsrq);
  uint32_t max_wr = 0, max_sge = 0, limit = 0;
  if (int rc = v->ctx->client->query_srq(v->srq, &max_wr, &max_sge, &limit); rc != 0) return positive(rc);
  attr->max_wr = max_wr;
  attr->max_sge = max_sge;
  attr->srq_limit = limit;
  return 0;
}

int droce_destroy_srq(ibv_srq* ibsrq) {
  VerbsSrq* v = srq_of(ibsrq);
  VerbsContext* ctx = v->ctx;
  if (int rc = ctx->client->destroy_srq(v->srq); rc != 0) return positive(rc);
  const uint32_t reported = ctx->forget(ibsrq, &v->events_reported);
  wait_acked(&ibsrq->mutex, &ibsrq->cond, &ibsrq->events_completed, reported);
  VerbsPd* d = v->parent_domain;
  domain_delete(v, v->memory);
  if (d != nullptr) --d->users;
  delete object_of(ibsrq);
  return 0;
}

// ---- QPs -------------------------------------------------------------------------------

namespace {

// The libibverbs side of a QP droced made or opened without queues (an XRC receive QP).
int finish_xrc_recv_qp(VerbsContext* ctx, ibv_context* context, client::Qp* cqp, void* qp_context, ibv_qp* qp,
                       void** slot, ibv_qp_state state) {
  // destroy_qp ends every QP with domain_delete(): droce's own memory here (no PD, so no parent
  // domain's allocators).
  DomainMemory mem;
  auto v = std::unique_ptr<VerbsQp, void (*)(VerbsQp*)>(domain_new<VerbsQp>(nullptr, kResourceQp, &mem),
                                                        [](VerbsQp* p) { domain_delete(p, p->memory); });
  if (!v) {
    (void)ctx->client->destroy_qp(cqp);
    return ENOMEM;
  }
  v->memory = mem;
  v->ctx = ctx;
  v->qp = cqp;
  v->ibv = qp;
  v->type = IBV_QPT_XRC_RECV;
  qp->context = context;
  qp->qp_context = qp_context;
  qp->pd = nullptr;
  qp->send_cq = qp->recv_cq = nullptr;
  qp->srq = nullptr;
  qp->handle = cqp->qpn();
  qp->qp_num = cqp->qpn();
  qp->state = state;
  qp->qp_type = IBV_QPT_XRC_RECV;
  pthread_mutex_init(&qp->mutex, nullptr);
  pthread_cond_init(&qp->cond, nullptr);
  qp->events_completed = 0;
  {
    std::lock_guard<std::mutex> l(ctx->objects_mutex);
    ctx->qps[cqp->qpn()] = v.get();
  }
  *slot = v.release();
  return 0;
}

// IBV_QPT_XRC_RECV: no PD, CQs, SRQ or queues, only its XRC domain (ibv_create_qp_ex(3)).
int create_xrc_recv_qp(VerbsContext* ctx, ibv_context* context, ibv_qp_init_attr_ex* attr, ibv_qp* qp,
                       void** slot) {
  if (!(attr->comp_mask & IBV_QP_INIT_ATTR_XRCD) || attr->xrcd == nullptr || attr->xrcd->context != context)
    return EINVAL;
  if (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) return EINVAL;  // no send queue
  client::QpCreate c;
  c.type = abi::QpType::xrc_recv;
  c.xrcd = xrcd_num(attr->xrcd);
  client::Qp* cqp = nullptr;
  if (int rc = ctx->client->create_qp(c, &cqp); rc != 0) return positive(rc);
  attr->cap = ibv_qp_cap{};
  return finish_xrc_recv_qp(ctx, context, cqp, attr->qp_context, qp, slot, IBV_QPS_RESET);
}

}  // namespace

int droce_glue_open_qp(ibv_context* context, ibv_qp_open_attr* attr, ibv_qp* qp, void** slot) {
  if (attr == nullptr) return EINVAL;
  if (attr->comp_mask >= IBV_QP_OPEN_ATTR_RESERVED) return EOPNOTSUPP;
  constexpr uint32_t kNeeded = IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_TYPE;
  if ((attr->comp_mask & kNeeded) != kNeeded || attr->xrcd == nullptr || attr->xrcd->context != context)
    return EINVAL;
  if (attr->qp_type != IBV_QPT_XRC_RECV) return EINVAL;
  VerbsContext* ctx = context_of(context);
  client::Qp* cqp = nullptr;
  if (int rc = ctx->client->open_qp(xrcd_num(attr->xrcd), attr->qp_num, abi::QpType::xrc_recv, &cqp); rc != 0)
    return positive(rc);
  const void* qp_context = (attr->comp_mask & IBV_QP_OPEN_ATTR_CONTEXT) ? attr->qp_context : nullptr;
  return finish_xrc_recv_qp(ctx, context, cqp, const_cast<void*>(qp_context), qp, slot, IBV_QPS_UNKNOWN);
}

int droce_glue_create_qp(ibv_context* context, ibv_qp_init_attr_ex* attr, ibv_qp* qp, ibv_qp_ex* qpx, void** slot) {
  if (attr == nullptr) return EINVAL;
  VerbsContext* ctx = context_of(context);
  constexpr uint32_t kKnownMask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_CREATE_FLAGS |
                                   IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_IND_TABLE |
                                   IBV_QP_INIT_ATTR_RX_HASH;
  if (attr->comp_mask & ~kKnownMask) return EOPNOTSUPP;
  // Receive-side scaling over WQs (flow.cc): a raw QP of its own kind.
  if (attr->comp_mask & (IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH))
    return create_rss_qp(context, attr, qp, slot);
  // Of the create flags, the one mlx5 offers for multicast (mckey -l): droced honours it.
  const uint32_t create_flags = (attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) ? attr->create_flags : 0;
  if (create_flags & ~uint32_t{IBV_QP_CREATE_BLOCK_SELF_MCAST_LB}) return EOPNOTSUPP;
  switch (attr->qp_type) {
    case IBV_QPT_RC:
    case IBV_QPT_UC:
    case IBV_QPT_UD:
    case IBV_QPT_XRC_SEND:
    case IBV_QPT_RAW_PACKET:  // droced asks for CAP_NET_RAW (EPERM), as the kernel does
      break;
    case IBV_QPT_XRC_RECV:
      return create_xrc_recv_qp(ctx, context, attr, qp, slot);
    default:
      return EOPNOTSUPP;  // driver QPs
  }
  if (attr->qp_type == IBV_QPT_RAW_PACKET && ctx->client->daemon_minor() < 14) return EOPNOTSUPP;
  if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || attr->pd == nullptr || attr->pd->context != context) return EINVAL;
  // An XRC send QP has a send queue only: no receive CQ needed, no SRQ (IBA A14).
  const bool xrc_send = attr->qp_type == IBV_QPT_XRC_SEND;
  if (attr->send_cq == nullptr || attr->send_cq->context != context) return EINVAL;
  if (!xrc_send && (attr->recv_cq == nullptr || attr->recv_cq->context != context)) return EINVAL;
  if (xrc_send && attr->srq != nullptr) return EINVAL;
  if (attr->srq != nullptr && attr->srq->context != context) return EINVAL;
  uint64_t ops = 0;
  if (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
    ops = attr->send_ops_flags;
    uint64_t allowed = IBV_QP_EX_WITH_SEND;
    if (attr->qp_type != IBV_QPT_RAW_PACKET) allowed |= IBV_QP_EX_WITH_SEND_WITH_IMM;
    if (attr->qp_type != IBV_QPT_UD && attr->qp_type != IBV_QPT_RAW_PACKET)
      allowed |= IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_BIND_MW;
    if (attr->qp_type == IBV_QPT_RC || xrc_send)
      allowed |= IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
                 IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV;
    if (attr->qp_type == IBV_QPT_RC) allowed |= IBV_QP_EX_WITH_ATOMIC_WRITE;  // no XRC opcode for it
    if (ops & ~allowed) return EOPNOTSUPP;
  }

  client::QpCreate c;
  c.type = static_cast<abi::QpType>(attr->qp_type);
  c.pd = attr->pd->handle;
  c.send_cq = cq_of(attr->send_cq)->cq;
  c.recv_cq = xrc_send ? nullptr : cq_of(attr->recv_cq)->cq;
  c.srq = attr->srq != nullptr ? srq_of(attr->srq)->srq : nullptr;
  // droced wants room for at least one WR each way; more than asked is what
  // any HCA may grant (ibv_create_qp(3)).
  c.cap.max_send_wr = attr->cap.max_send_wr == 0 ? 1 : attr->cap.max_send_wr;
  const bool no_rq = c.srq != nullptr || xrc_send;
  c.cap.max_recv_wr = no_rq ? 0 : (attr->cap.max_recv_wr == 0 ? 1 : attr->cap.max_recv_wr);
  c.cap.max_send_sge = attr->cap.max_send_sge;
  c.cap.max_recv_sge = no_rq ? 0 : attr->cap.max_recv_sge;
  c.cap.max_inline_data = attr->cap.max_inline_data;
  c.sq_sig_all = attr->sq_sig_all != 0;
  c.block_self_mcast_loopback = (create_flags & IBV_QP_CREATE_BLOCK_SELF_MCAST_LB) != 0;

  // Provider memory from the parent domain's allocators, when made on one.
  DomainMemory mem;
  auto qp_state = [](VerbsQp* p) {
    if (p != nullptr) domain_delete(p, p->memory);
  };
  auto v = std::unique_ptr<VerbsQp, decltype(qp_state)>(domain_new<VerbsQp>(attr->pd, kResourceQp, &mem), qp_state);
  if (!v) return ENOMEM;
  v->memory = mem;
  if (qpx != nullptr) {
    v->batch = domain_new<WrBatch>(attr->pd, kResourceWrBatch, &v->batch_memory);
    if (v->batch == nullptr) return ENOMEM;
  }
  client::Qp* cqp = nullptr;
  if (int rc = ctx->client->create_qp(c, &cqp); rc != 0) return positive(rc);
  v->parent_domain = parent_domain_of(attr->pd);
  if (v->parent_domain != nullptr) ++v->parent_domain->users;
  const abi::QpCap& g = cqp->cap();
  v->ctx = ctx;
  v->qp = cqp;
  v->ibv = qp;
  v->type = attr->qp_type;
  v->sq_sig_all = c.sq_sig_all;
  v->cap = {g.max_send_wr, no_rq ? 0 : g.max_recv_wr, g.max_send_sge, no_rq ? 0 : g.max_recv_sge,
            g.max_inline_data};
  attr->cap = v->cap;

  qp->context = context;
  qp->qp_context = attr->qp_context;
  qp->pd = attr->pd;
  qp->send_cq = attr->send_cq;
  qp->recv_cq = xrc_send ? nullptr : attr->recv_cq;
  qp->srq = attr->srq;
  qp->handle = cqp->qpn();
  qp->qp_num = cqp->qpn();
  qp->state = IBV_QPS_RESET;
  qp->qp_type = attr->qp_type;
  pthread_mutex_init(&qp->mutex, nullptr);
  pthread_cond_init(&qp->cond, nullptr);
  qp->events_completed = 0;
  if (qpx != nullptr) {
    qpx->comp_mask = 0;
    fill_qp_ex_ops(qpx, ops);
  }
  {
    std::lock_guard<std::mutex> l(ctx->objects_mutex);
    ctx->qps[cqp->qpn()] = v.get();
  }
  *slot = v.release();
  return 0;
}

int droce_glue_destroy_qp(ibv_qp* ibqp) {
  VerbsQp* v = qp_of(ibqp);
  VerbsContext* ctx = v->ctx;
  if (int rc = ctx->client->destroy_qp(v->qp); rc != 0) return positive(rc);
  const uint32_t reported = ctx->forget(ibqp, &v->events_reported);
  wait_acked(&ibqp->mutex, &ibqp->cond, &ibqp->events_completed, reported);
  VerbsPd* d = v->parent_domain;
  domain_delete(v, v->memory);
  if (d != nullptr) --d->users;
  return 0;
}

int droce_modify_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int mask) {
  if (attr == nullptr) return EINVAL;
  VerbsQp* v = qp_of(ibqp);
  abi::QpAttr a;
  if (int rc = to_qp_attr(*attr, mask, &a); rc != 0) return rc;
  return positive(v->ctx->client->modify_qp(v->qp, a, static_cast<uint32_t>(mask)));
}

// Multicast: the verbs ask nothing of the QP's state (a QP in RESET may attach); droced checks
// that the QP is UD and the GID a multicast one (EINVAL), and its limits (ENOMEM).
int droce_attach_mcast(ibv_qp* ibqp, const ibv_gid* gid, uint16_t lid) {
  if (gid == nullptr) return EINVAL;
  VerbsQp* v = qp_of(ibqp);
  return positive(v->ctx->client->attach_mcast(v->qp, gid->raw, lid, true));
}

int droce_detach_mcast(ibv_qp* ibqp, const ibv_gid* gid, uint16_t lid) {
  if (gid == nullptr) return EINVAL;
  VerbsQp* v = qp_of(ibqp);
  return positive(v->ctx->client->attach_mcast(v->qp, gid->raw, lid, false));
}

int droce_query_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int mask, ibv_qp_init_attr* init_attr) {
  (void)mask;  // everything is reported; the mask only says what the caller reads
  if (attr == nullptr || init_attr == nullptr) return EINVAL;
  VerbsQp* v = qp_of(ibqp);
  abi::QpAttr a;
  if (int rc = v->ctx->client->query_qp(v->qp, &a); rc != 0) return positive(rc);
  from_qp_attr(a, attr);
  attr->cap = v->cap;
  *init_attr = ibv_qp_init_attr{};
  init_attr->qp_context = ibqp->qp_context;
  init_attr->send_cq = ibqp->send_cq;
  init_attr->recv_cq = ibqp->recv_cq;
  init_attr->srq = ibqp->srq;
  init_attr->cap = v->cap;
  init_attr->qp_type = v->type;
  init_attr->sq_sig_all = v->sq_sig_all ? 1 : 0;
  return 0;
}

}  // extern "C"
