// The device context, its async events, queries, PDs, MRs and AHs.
#include <fcntl.h>
#include <rdma/ib_user_verbs.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <vector>

#include "core/clock.h"
#include "provider/verbs/convert.h"
#include "provider/verbs/objects.h"

namespace droce::verbs {

namespace {

constexpr uint32_t kEventDeviceFatal = IBV_EVENT_DEVICE_FATAL;

// <ibdev_path>/droce_control_socket (written by droced with the tree), else
// the conventional place.
std::string find_socket(const droce_glue_device& dev) {
  if (dev.ibdev_path != nullptr) {
    const std::string file = std::string(dev.ibdev_path) + "/droce_control_socket";
    if (FILE* f = std::fopen(file.c_str(), "re")) {
      char buf[4096];
      const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
      std::fclose(f);
      std::string path(buf, n);
      while (!path.empty() && (path.back() == '\n' || path.back() == ' ')) path.pop_back();
      if (!path.empty()) return path;
    }
  }
  return client::Context::socket_path(dev.ibdev_name != nullptr ? dev.ibdev_name : "droce0");
}

}  // namespace

void wait_acked(pthread_mutex_t* m, pthread_cond_t* c, const uint32_t* completed, uint32_t reported) {
  pthread_mutex_lock(m);
  while (*completed != reported) pthread_cond_wait(c, m);
  pthread_mutex_unlock(m);
}

// ---- The context and its event thread ------------------------------------------

int VerbsContext::open(ibv_context* context, const std::string& socket_path, int* async_fd) {
  ibv = context;
  if (int rc = client::Context::open(socket_path, &client); rc != 0)
    return rc == -ENOENT || rc == -ECONNREFUSED ? ENODEV : positive(rc);
  if (int rc = client->query_device(&device); rc != 0) return positive(rc);

  // async_fd: one record per read, as from the kernel's event file; our end
  // never raises SIGPIPE (MSG_NOSIGNAL) and never blocks the thread.
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return errno;
  core::Fd read_end(sv[0]);
  event_write_ = core::Fd(sv[1]);
  ::shutdown(read_end.get(), SHUT_WR);
  event_read_ = core::Fd(::fcntl(read_end.get(), F_DUPFD_CLOEXEC, 0));
  if (!event_read_.valid()) return errno;
  stop_fd_ = core::Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!stop_fd_.valid()) return errno;
  try {
    thread_ = std::thread([this] { event_loop(); });
  } catch (...) {
    return EAGAIN;
  }
  *async_fd = read_end.release();
  return 0;
}

VerbsContext::~VerbsContext() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(stop_fd_.get(), &one, sizeof one);
    thread_.join();
  }
}

bool VerbsContext::deliver(const client::AsyncEvent& ev) {
  ib_uverbs_async_event_desc d{};
  d.event_type = ev.type;
  std::lock_guard<std::mutex> g(objects_mutex);
  // An object destroyed meanwhile is nobody to tell (find fails).
  uint32_t* reported = nullptr;
  switch (client::event_element(ev.type)) {
    case client::EventElement::cq: {
      auto it = cqs.find(ev.id);
      if (it == cqs.end()) return false;
      d.element = reinterpret_cast<uintptr_t>(it->second->ibv);
      reported = &it->second->async_events_reported;
      break;
    }
    case client::EventElement::qp: {
      auto it = qps.find(ev.id);
      if (it == qps.end()) return false;
      d.element = reinterpret_cast<uintptr_t>(it->second->ibv);
      reported = &it->second->events_reported;
      break;
    }
    case client::EventElement::srq: {
      auto it = srqs.find(ev.id);
      if (it == srqs.end()) return false;
      d.element = reinterpret_cast<uintptr_t>(it->second->ibv);
      reported = &it->second->events_reported;
      break;
    }
    case client::EventElement::port:
      d.element = ev.id;  // a port number (0 for the device)
      break;
  }
  if (::send(event_write_.get(), &d, sizeof d, MSG_DONTWAIT | MSG_NOSIGNAL) != sizeof d) {
    events_dropped.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  // Counted here, not in an async_event op after libibverbs' read: between
  // that read and the op a destroy waited for one acknowledgement too few, and
  // the acknowledgement then left the counts unequal for good (UCX's teardown
  // hung in ibv_destroy_qp when its async thread was preempted there).
  if (reported != nullptr) ++*reported;
  return true;
}

uint32_t VerbsContext::forget(const void* ibv_object, uint32_t* reported) {
  std::lock_guard<std::mutex> g(objects_mutex);
  std::erase_if(qps, [&](const auto& kv) { return kv.second->ibv == ibv_object; });
  std::erase_if(cqs, [&](const auto& kv) { return kv.second->ibv == ibv_object; });
  std::erase_if(srqs, [&](const auto& kv) { return kv.second->ibv == ibv_object; });
  // Unread records about the object come out; the others go back in order.
  // (The event thread writes under this mutex; an application reading at
  // this moment may take a record before it goes back, which only reorders.)
  std::vector<ib_uverbs_async_event_desc> keep;
  ib_uverbs_async_event_desc d;
  uint32_t removed = 0;
  while (::recv(event_read_.get(), &d, sizeof d, MSG_DONTWAIT) == sizeof d) {
    const bool about = client::event_element(d.event_type) != client::EventElement::port && d.element == reinterpret_cast<uintptr_t>(ibv_object);
    if (about)
      ++removed;
    else
      keep.push_back(d);
  }
  for (const auto& k : keep)
    if (::send(event_write_.get(), &k, sizeof k, MSG_DONTWAIT | MSG_NOSIGNAL) != sizeof k)
      events_dropped.fetch_add(1, std::memory_order_relaxed);
  // Every record handed out and not taken back here has left async_fd: the
  // application has read it (libibverbs' read, whether or not the async_event
  // op has run yet) and will acknowledge it.
  *reported -= removed;
  return *reported;
}

void VerbsContext::event_loop() {
  core::Fd ep(::epoll_create1(EPOLL_CLOEXEC));
  if (!ep.valid()) return;
  epoll_event e{};
  e.events = EPOLLIN;
  e.data.u32 = 0;
  if (::epoll_ctl(ep.get(), EPOLL_CTL_ADD, stop_fd_.get(), &e) != 0) return;
  e.data.u32 = 1;
  bool watching = ::epoll_ctl(ep.get(), EPOLL_CTL_ADD, client->async_fd(), &e) == 0;
  for (;;) {
    if (watching) {
      client::AsyncEvent ev;
      while (client->get_async_event(&ev, 0) == 0) {
        (void)deliver(ev);
        if (ev.type == kEventDeviceFatal) {
          // Nothing follows a fatal device; its descriptors stay readable.
          (void)::epoll_ctl(ep.get(), EPOLL_CTL_DEL, client->async_fd(), nullptr);
          watching = false;
          break;
        }
      }
    }
    epoll_event got[2];
    const int n = ::epoll_wait(ep.get(), got, 2, -1);
    if (n < 0 && errno != EINTR) return;
    for (int i = 0; i < n; ++i)
      if (got[i].data.u32 == 0) return;
  }
}

}  // namespace droce::verbs

using namespace droce;
using namespace droce::verbs;

extern "C" {

void* droce_glue_alloc_context(ibv_context* context, const droce_glue_device* device, void* private_data) {
  (void)private_data;
  auto* ctx = new (std::nothrow) VerbsContext();
  if (ctx == nullptr) return fail(ENOMEM);
  int async_fd = -1;
  if (int rc = ctx->open(context, find_socket(*device), &async_fd); rc != 0) {
    delete ctx;
    return fail(rc);
  }
  context->async_fd = async_fd;
  context->num_comp_vectors = 1;
  return ctx;
}

void droce_glue_free_context(void* impl) { delete static_cast<VerbsContext*>(impl); }

int droce_query_device_ex(ibv_context* context, const ibv_query_device_ex_input* input, ibv_device_attr_ex* attr,
                          size_t attr_size) {
  if (attr == nullptr || attr_size < sizeof(ibv_device_attr)) return EINVAL;
  if (input != nullptr && input->comp_mask != 0) return EINVAL;
  VerbsContext* ctx = context_of(context);
  abi::ctl::QueryDeviceReply r{};
  // Fresh from droced: the limits are its to change.
  if (int rc = ctx->client->query_device(&r); rc != 0) return positive(rc);
  ibv_device_attr_ex full;
  to_device_attr(r, &full);
  std::memcpy(attr, &full, attr_size < sizeof full ? attr_size : sizeof full);
  if (attr_size > sizeof full) std::memset(reinterpret_cast<char*>(attr) + sizeof full, 0, attr_size - sizeof full);
  return 0;
}

// The raw clock of the completion timestamps: CLOCK_MONOTONIC in ns, which droced reads as it
// pushes a completion (the same clock on one host, unless the two are in different time
// namespaces). As mlx5, the cycles go in tv_nsec.
int droce_query_rt_values(ibv_context* context, ibv_values_ex* values) {
  if (values == nullptr || (values->comp_mask & ~uint32_t{IBV_VALUES_MASK_RAW_CLOCK})) return EINVAL;
  if (!(context_of(context)->device.device_caps & abi::ctl::kDeviceCapCompletionTimestamp)) return EOPNOTSUPP;
  uint32_t done = 0;
  if (values->comp_mask & IBV_VALUES_MASK_RAW_CLOCK) {
    values->raw_clock.tv_sec = 0;
    values->raw_clock.tv_nsec = static_cast<long>(core::monotonic_ns());
    done |= IBV_VALUES_MASK_RAW_CLOCK;
  }
  values->comp_mask = done;
  return 0;
}

int droce_query_port(ibv_context* context, uint8_t port_num, ibv_port_attr* port_attr) {
  if (port_attr == nullptr) return EINVAL;
  VerbsContext* ctx = context_of(context);
  if (port_num < 1 || port_num > ctx->device.phys_port_cnt) return EINVAL;
  abi::ctl::QueryPortReply r{};
  if (int rc = ctx->client->query_port(port_num, &r); rc != 0) return positive(rc);
  to_port_attr(r, port_attr);
  return 0;
}

// ---- PDs ---------------------------------------------------------------------------

ibv_pd* droce_alloc_pd(ibv_context* context) {
  auto* o = new (std::nothrow) Object<ibv_pd>();
  auto* v = new (std::nothrow) VerbsPd();
  if (o == nullptr || v == nullptr) {
    delete o;
    delete v;
    return fail<ibv_pd>(ENOMEM);
  }
  uint32_t id = 0;
  if (int rc = context_of(context)->client->alloc_pd(&id); rc != 0) {
    delete o;
    delete v;
    return fail<ibv_pd>(rc);
  }
  v->ctx = context_of(context);
  v->ibv = &o->obj;
  o->droce = v;
  o->obj.context = context;
  o->obj.handle = id;
  return &o->obj;
}

int droce_dealloc_pd(ibv_pd* pd) {
  VerbsPd* v = pd_of(pd);
  if (v->parent()) return dealloc_parent_domain(pd);
  if (v->users.load() != 0) return EBUSY;  // parent domains over it
  if (int rc = context_of(pd->context)->client->dealloc_pd(pd->handle); rc != 0 && rc != -EIO) return positive(rc);
  delete v;
  delete object_of(pd);
  return 0;
}

// ---- Memory windows ------------------------------------------------------------------

ibv_mw* droce_alloc_mw(ibv_pd* pd, ibv_mw_type type) {
  if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) return fail<ibv_mw>(EINVAL);
  auto* o = new (std::nothrow) Object<ibv_mw>();
  if (o == nullptr) return fail<ibv_mw>(ENOMEM);
  uint32_t rkey = 0;
  if (int rc = context_of(pd->context)->client->alloc_mw(pd->handle, type, &rkey); rc != 0) {
    delete o;
    return fail<ibv_mw>(rc);
  }
  o->obj.context = pd->context;
  o->obj.pd = pd;
  o->obj.rkey = rkey;
  o->obj.handle = rkey >> 8;
  o->obj.type = type;
  return &o->obj;
}

int droce_dealloc_mw(ibv_mw* mw) {
  if (int rc = context_of(mw->context)->client->dealloc_mw(mw->rkey); rc != 0 && rc != -EIO) return positive(rc);
  delete object_of(mw);
  return 0;
}

// ibv_bind_mw(3) (type 1): a BIND_MW WR on the QP asking for the next tag; the window
// takes its new R_Key at once (the application undoes it on an error completion, as with
// rxe). libibverbs has checked the type and that the MR is of the window's PD.
int droce_bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* mw_bind) {
  if (qp == nullptr || mw == nullptr || mw_bind == nullptr) return EINVAL;
  const ibv_mw_bind_info& b = mw_bind->bind_info;
  if (b.mr == nullptr && (b.addr != 0 || b.length != 0)) return EINVAL;
  if (b.mw_access_flags & IBV_ACCESS_ZERO_BASED) return EINVAL;  // o10-36.2.2: not for type 1
  if (b.mr != nullptr && b.mr->pd != mw->pd) return EPERM;
  ibv_send_wr wr{};
  wr.wr_id = mw_bind->wr_id;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = mw_bind->send_flags;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
  wr.bind_mw.bind_info = b;
  ibv_send_wr* bad = nullptr;
  if (int rc = droce_post_send(qp, &wr, &bad); rc != 0) return rc;
  return 0;
}

// ---- MRs -----------------------------------------------------------------------------

int droce_glue_reg_mr(ibv_pd* pd, void* addr, size_t length, uint64_t iova, int access, ibv_mr* mr) {
  if (pd == nullptr || mr == nullptr) return EINVAL;
  const bool odp = (access & IBV_ACCESS_ON_DEMAND) != 0;
  // Implicit ODP (ibv_reg_mr(3)): NULL and SIZE_MAX register the whole address space.
  const bool implicit = odp && addr == nullptr && length == SIZE_MAX;
  if (!implicit && (addr == nullptr || length == 0)) return EINVAL;
  // droce addresses remote memory by the registering process's virtual address.
  if (iova != reinterpret_cast<uintptr_t>(addr)) return EOPNOTSUPP;
  uint32_t acc = 0;
  if (int rc = to_access(access, &acc); rc != 0) return rc;
  VerbsContext* ctx = context_of(pd->context);
  if (odp && !(ctx->device.device_caps & abi::ctl::kDeviceCapOnDemandPaging)) return EOPNOTSUPP;
  uint32_t lkey = 0, rkey = 0;
  const int rc = odp ? ctx->client->reg_odp_mr(pd->handle, addr, length, acc, &lkey, &rkey)
                     : ctx->client->reg_mr(pd->handle, addr, length, acc, &lkey, &rkey);
  if (rc != 0) return positive(rc);
  mr->lkey = lkey;
  mr->rkey = rkey;
  mr->handle = lkey;
  return 0;
}

// Prefetching an ODP region is faulting its pages in this process: droced reaches them through
// the process's /proc/self/mem and finds them present. With no device page table to fill, the
// three advices differ only in how they fault: PREFETCH reads, PREFETCH_WRITE writes (breaking
// copy-on-write sharing as a writable fault does), PREFETCH_NO_FAULT does nothing (it maps only
// pages already present, and those droced reaches without a fault). Always synchronous, so
// IBV_ADVISE_MR_FLAG_FLUSH is what every call does.
int droce_advise_mr(ibv_pd* pd, enum ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list,
                    uint32_t num_sge) {
  if (pd == nullptr || (flags & ~uint32_t{IBV_ADVISE_MR_FLAG_FLUSH}) || num_sge == 0 || sg_list == nullptr)
    return EINVAL;
  if (advice != IBV_ADVISE_MR_ADVICE_PREFETCH && advice != IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
      advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
    return EOPNOTSUPP;
  VerbsContext* ctx = context_of(pd->context);
  for (uint32_t i = 0; i < num_sge; ++i) {
    const bool fault = advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT;
    // NO_FAULT still checks the key and range (length 0 prefetches nothing).
    const int rc = ctx->client->prefetch_odp(sg_list[i].lkey, sg_list[i].addr, fault ? sg_list[i].length : 0,
                                             advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE);
    if (rc != 0) return positive(rc);
  }
  return 0;
}

int droce_glue_dereg_mr(ibv_mr* mr) { return positive(context_of(mr->context)->client->dereg_mr(mr->lkey)); }

int droce_glue_rereg_mr(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t length, int access) {
  constexpr int kKnown = IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS;
  static_assert(IBV_REREG_MR_CHANGE_TRANSLATION == int(abi::ctl::kReregTranslation) &&
                IBV_REREG_MR_CHANGE_PD == int(abi::ctl::kReregPd) &&
                IBV_REREG_MR_CHANGE_ACCESS == int(abi::ctl::kReregAccess));
  if (flags == 0 || (flags & ~kKnown)) return EINVAL;
  ibv_pd* new_pd = (flags & IBV_REREG_MR_CHANGE_PD) ? pd : mr->pd;
  if (new_pd == nullptr || new_pd->context != mr->context) return EINVAL;
  void* new_addr = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? addr : mr->addr;
  const size_t new_len = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? length : mr->length;
  if (new_addr == nullptr || new_len == 0) return EINVAL;
  uint32_t acc = 0;
  if (int rc = to_access(access, &acc); rc != 0) return rc;
  VerbsContext* ctx = context_of(mr->context);
  // In place: the keys stay, as an HCA's do (a peer keeps the R_Key it has).
  int rc = ctx->client->rereg_mr(mr->lkey, static_cast<uint32_t>(flags), new_pd->handle, new_addr, new_len, acc);
  if (rc != -EOPNOTSUPP) return positive(rc);
  // A droced without rereg_mr: a new registration replaces the old one (new
  // keys, which ibv_rereg_mr(3) allows), made first so a failure leaves the
  // old one standing.
  ibv_mr fresh{};
  if (int r = droce_glue_reg_mr(new_pd, new_addr, new_len, reinterpret_cast<uintptr_t>(new_addr), access, &fresh); r != 0)
    return r;
  (void)droce_glue_dereg_mr(mr);
  mr->lkey = fresh.lkey;
  mr->rkey = fresh.rkey;
  mr->handle = fresh.handle;
  return 0;
}

// ---- AHs -----------------------------------------------------------------------------

ibv_ah* droce_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  if (pd == nullptr || attr == nullptr) return fail<ibv_ah>(EINVAL);
  abi::AddressVector av;
  if (int rc = to_av(*attr, &av); rc != 0) return fail<ibv_ah>(rc);
  auto* o = new (std::nothrow) Object<ibv_ah>();
  if (o == nullptr) return fail<ibv_ah>(ENOMEM);
  uint32_t id = 0;
  if (int rc = context_of(pd->context)->client->create_ah(pd->handle, av, &id); rc != 0) {
    delete o;
    return fail<ibv_ah>(rc);
  }
  o->obj.context = pd->context;
  o->obj.pd = pd;
  o->obj.handle = id;
  return &o->obj;
}

int droce_destroy_ah(ibv_ah* ah) {
  if (int rc = context_of(ah->context)->client->destroy_ah(ah->handle); rc != 0) return positive(rc);
  delete object_of(ah);
  return 0;
}

}  // extern "C"
