#include "provider/client/client.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "abi/ctl_attr.h"
#include "abi/wqe.h"
#include "core/clock.h"

namespace droce::client {

using namespace abi::ctl;

namespace {

constexpr int kEventDeviceFatal = 8;

uint32_t atomic_load(const uint32_t* p) {
  return std::atomic_ref<uint32_t>(*const_cast<uint32_t*>(p)).load(std::memory_order_acquire);
}

int map_region(core::Fd& fd, uint64_t bytes, core::ShmRegion* out) {
  core::ShmMapOptions o;
  o.dont_fork = true;  // a forked child must not become a second producer
  return core::ShmRegion::map_peer(fd.get(), bytes, o, out);
}

std::span<std::byte> sub(core::ShmRegion& r, size_t off, size_t len) {
  if (off > r.size() || len > r.size() - off) return {};
  return {r.data() + off, len};
}

}  // namespace

std::string Context::socket_path(const std::string& device) {
  const char* d = std::getenv("DROCE_RUN_DIR");
  return std::string(d != nullptr && *d != '\0' ? d : "/run/droce") + "/" + device + ".sock";
}

int Context::open(const std::string& path, std::unique_ptr<Context>* out) {
  std::unique_ptr<Context> c(new Context());
  if (int rc = core::seqpacket_connect(path, &c->sock_); rc != 0) return rc;
  HelloRequest h{};
  h.pid = static_cast<uint32_t>(::getpid());
  // The program's name, for `droce clients`.
  if (FILE* f = std::fopen("/proc/self/comm", "r")) {
    if (std::fgets(h.program, sizeof h.program, f) != nullptr) h.program[std::strcspn(h.program, "\n")] = '\0';
    std::fclose(f);
  }
  std::vector<core::Fd> fds;
  if (int rc = c->call(MsgType::hello, &h, sizeof h, &c->hello_, sizeof c->hello_, &fds); rc != 0) return rc;
  if (fds.size() != 3) return -EPROTO;
  HelloReply& r = c->hello_;
  if (int rc = map_region(fds[kHelloFdContext], r.context_bytes, &c->context_); rc != 0) return rc;
  const abi::ShmRingGeometry db{r.doorbell_entries, sizeof(abi::Doorbell)};
  const abi::ShmRingGeometry ev{r.event_entries, sizeof(abi::EventEntry)};
  if (int rc = abi::ShmRingProducer::attach(sub(c->context_, r.doorbell_offset, abi::shm_ring_bytes(db)), db,
                                             &c->doorbells_);
      rc != 0)
    return rc;
  if (int rc = abi::ShmRingConsumer::attach(sub(c->context_, r.event_offset, abi::shm_ring_bytes(ev)), ev,
                                             &c->events_);
      rc != 0)
    return rc;
  c->page_ = reinterpret_cast<abi::ContextPage*>(c->context_.data());
  if (c->page_->magic != abi::kContextMagic) return -EPROTO;
  c->async_fd_ = std::move(fds[kHelloFdAsync]);
  c->wake_fd_ = std::move(fds[kHelloFdWake]);
  // One descriptor for "something happened": an event, or droced gone.
  c->async_epoll_ = core::Fd(::epoll_create1(EPOLL_CLOEXEC));
  if (!c->async_epoll_.valid()) return -errno;
  for (int fd : {c->async_fd_.get(), c->sock_.get()}) {
    epoll_event e{};
    e.events = fd == c->sock_.get() ? (EPOLLRDHUP | EPOLLHUP) : EPOLLIN;
    e.data.fd = fd;
    if (::epoll_ctl(c->async_epoll_.get(), EPOLL_CTL_ADD, fd, &e) != 0) return -errno;
  }
  *out = std::move(c);
  return 0;
}

Context::~Context() {
  // Closing the socket is enough: droced frees what is left. The shared
  // memory of MRs stays mapped here (it is the application's memory).
  cqs_.clear();
  qps_.clear();
  srqs_.clear();
  dms_.clear();
}

bool Context::fatal() const {
  return dead_.load(std::memory_order_relaxed) ||
         (page_ != nullptr && atomic_load(&page_->device_state) == abi::kDeviceFatal);
}

void Context::set_dead() { dead_.store(true); }

int Context::call(MsgType type, const void* body, size_t len, void* reply, size_t reply_len,
                  std::vector<core::Fd>* fds, std::span<const int> send_fds, std::span<const uint8_t> tail) {
  std::lock_guard<std::mutex> g(ctl_mutex_);
  if (dead_) return -EIO;
  // A forked child may go on using its parent's context, as with the kernel's uverbs (pyverbs
  // allocates device memory from five children at once): the socket is then shared, so each
  // process numbers its requests apart from the others' and takes only its own replies.
  if (const pid_t me = ::getpid(); me != pid_) {
    pid_ = me;
    seq_ = static_cast<uint32_t>(me) * 2654435761u;
  }
  const uint32_t seq = ++seq_;
  const auto msg = encode_raw(type, seq, {static_cast<const uint8_t*>(body), len}, tail);
  if (core::send_message(sock_.get(), msg, send_fds) != 0) {
    set_dead();
    return -EIO;
  }
  std::vector<uint8_t> in;
  std::vector<core::Fd> in_fds;
  for (;;) {
    if (!own_reply_next(seq)) {
      set_dead();
      return -EIO;
    }
    const ssize_t n = core::receive_message(sock_.get(), &in, kMaxMessage, &in_fds);
    if (n <= 0) {
      set_dead();
      return -EIO;
    }
    CtlHeader rh;
    const HeaderCheck hc = check_header(in, &rh);
    if (hc == HeaderCheck::major_mismatch) return -EPROTO;
    if (hc != HeaderCheck::ok || !(rh.flags & kFlagReply)) {
      set_dead();
      return -EPROTO;
    }
    if (rh.seq != seq) continue;  // a stale reply (not expected with one call at a time)
    if (type == MsgType::hello) daemon_minor_ = rh.abi_minor;
    if (rh.status != 0) return rh.status;
    // Append-only: a shorter (older) body reads as zeros past its end.
    if (reply_len != 0) (void)decode_body_bytes(in, reply, reply_len, 0);
    if (fds != nullptr) *fds = std::move(in_fds);
    return 0;
  }
}

bool Context::own_reply_next(uint32_t seq) {
  // Peeked without a control buffer: the descriptors stay with the message for its owner.
  // Another process's reply is left to it; one left 5 s at the head is taken as its owner's
  // death (a killed child) and dropped, so that the others are not stuck behind it.
  const uint64_t since = core::monotonic_ns();
  for (;;) {
    CtlHeader h{};
    const ssize_t n = ::recv(sock_.get(), &h, sizeof h, MSG_PEEK);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    if (size_t(n) < sizeof h || h.seq == seq || h.magic != kMagic) return true;  // the receive judges it
    if (core::monotonic_ns() - since > 5'000'000'000ull) {
      std::vector<uint8_t> stale;
      std::vector<core::Fd> fds;
      if (core::receive_message(sock_.get(), &stale, kMaxMessage, &fds) <= 0) return false;
      continue;
    }
    ::usleep(100);
  }
}

// ---- Queries, PDs, MRs ------------------------------------------------------

int Context::query_device(QueryDeviceReply* out) { return call(MsgType::query_device, nullptr, 0, out, sizeof *out); }

int Context::query_port(uint8_t port, QueryPortReply* out) {
  IdRequest q{port, 0};
  return call(MsgType::query_port, &q, sizeof q, out, sizeof *out);
}

int Context::query_gid(uint8_t port, uint32_t index, QueryGidReply* out) {
  QueryGidRequest q{port, index};
  return call(MsgType::query_gid, &q, sizeof q, out, sizeof *out);
}

int Context::alloc_pd(uint32_t* pd) {
  IdReply r{};
  int rc = call(MsgType::alloc_pd, nullptr, 0, &r, sizeof r);
  if (rc == 0) *pd = r.id;
  return rc;
}

int Context::dealloc_pd(uint32_t pd) {
  IdRequest q{pd, 0};
  return call(MsgType::dealloc_pd, &q, sizeof q, nullptr, 0);
}

int Context::alloc_mw(uint32_t pd, uint32_t type, uint32_t* rkey) {
  if (daemon_minor_ < 10) return -EOPNOTSUPP;  // a droced from before memory windows
  AllocMwRequest q{pd, type};
  IdReply r{};
  int rc = call(MsgType::alloc_mw, &q, sizeof q, &r, sizeof r);
  if (rc == 0) *rkey = r.id;
  return rc;
}

int Context::dealloc_mw(uint32_t rkey) {
  IdRequest q{rkey, 0};
  return call(MsgType::dealloc_mw, &q, sizeof q, nullptr, 0);
}

int Context::reg_mr(uint32_t pd, void* addr, size_t length, uint32_t access, uint32_t* lkey, uint32_t* rkey) {
  if (addr == nullptr || length == 0) return -EINVAL;
  // Remote write or atomic access needs local write (ibv_reg_mr(3)).
  if ((access & (abi::kAccessRemoteWrite | abi::kAccessRemoteAtomic)) && !(access & abi::kAccessLocalWrite))
    return -EINVAL;
  std::unique_lock<std::mutex> g(ctl_mutex_);  // the registry shares the control lock
  uintptr_t page_start = 0;
  std::vector<SharedMemory::Piece> pieces;
  // A failed share takes no reference: nothing to give back.
  if (int rc = memory_.share(addr, length, &page_start, &pieces); rc != 0) return rc == -E2BIG ? -ENOMEM : rc;
  std::vector<MrSegment> segs;
  std::vector<int> fds;
  for (const auto& p : pieces) {
    segs.push_back(p.segment);
    fds.push_back(p.fd);
  }
  RegMrRequest q{};
  q.pd = pd;
  q.access = access;
  q.va = reinterpret_cast<uint64_t>(addr);
  q.length = length;
  q.page_va = page_start;
  q.segment_count = static_cast<uint32_t>(segs.size());
  RegMrReply r{};
  g.unlock();
  const int rc = call(MsgType::reg_mr, &q, sizeof q, &r, sizeof r, nullptr, fds,
                      {reinterpret_cast<const uint8_t*>(segs.data()), segs.size() * sizeof(MrSegment)});
  g.lock();
  if (rc != 0) {
    memory_.release(addr, length);
    return rc;
  }
  mrs_[r.lkey] = {addr, length};
  *lkey = r.lkey;
  *rkey = r.rkey;
  return 0;
}

int Context::reg_odp_mr(uint32_t pd, void* addr, size_t length, uint32_t access, uint32_t* lkey,
                        uint32_t* rkey) {
  if (daemon_minor_ < 13) return -EOPNOTSUPP;  // a droced from before on-demand paging
  const bool implicit = addr == nullptr && length == SIZE_MAX;
  if ((!implicit && (addr == nullptr || length == 0)) || !(access & abi::kAccessOnDemand)) return -EINVAL;
  if ((access & (abi::kAccessRemoteWrite | abi::kAccessRemoteAtomic)) && !(access & abi::kAccessLocalWrite))
    return -EINVAL;
  // Opened for every registration rather than kept: a forked child that registers through an
  // inherited context must not hand over its parent's address space. The process opens its
  // own, so the kernel's ptrace check (PTRACE_MODE_ATTACH of itself) always passes.
  core::Fd mem(::open("/proc/self/mem", O_RDWR | O_CLOEXEC));
  if (!mem.valid()) return -errno;
  // Its pagemap (minor 15): droced sees which pages are in and faults the others in off its
  // worker. Without it (or from an older droced) the faults are taken on droced's worker.
  core::Fd pagemap;
  if (daemon_minor_ >= 15) pagemap = core::Fd(::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC));
  RegOdpMrRequest q{};
  q.pd = pd;
  q.access = access;
  q.va = reinterpret_cast<uint64_t>(addr);
  q.length = implicit ? UINT64_MAX : length;
  RegMrReply r{};
  const int fds[2] = {mem.get(), pagemap.get()};
  const std::span<const int> fd(fds, pagemap.valid() ? 2 : 1);
  if (int rc = call(MsgType::reg_odp_mr, &q, sizeof q, &r, sizeof r, nullptr, fd); rc != 0) return rc;
  std::lock_guard<std::mutex> g(ctl_mutex_);
  mrs_[r.lkey] = {addr, length, true};
  *lkey = r.lkey;
  *rkey = r.rkey;
  return 0;
}

int Context::prefetch_odp(uint32_t lkey, uint64_t addr, uint32_t length, bool write) {
  {
    std::lock_guard<std::mutex> g(ctl_mutex_);
    auto it = mrs_.find(lkey);
    if (it == mrs_.end() || !it->second.odp) return -EINVAL;
    const uint64_t start = reinterpret_cast<uint64_t>(it->second.addr);
    if (addr < start || length > it->second.length || addr - start > it->second.length - length) return -EINVAL;
  }
  if (length == 0) return 0;
  // madvise wants page-aligned ranges; the pages around the SGE's bytes are the ones to fault.
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t first = addr & ~(page - 1);
  const uint64_t end = (addr + length + page - 1) & ~(page - 1);
  if (::madvise(reinterpret_cast<void*>(first), end - first, write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ) != 0)
    return errno == ENOMEM ? -EFAULT : -errno;  // ENOMEM: a page in the range is not mapped
  return 0;
}

int Context::rereg_mr(uint32_t lkey, uint32_t flags, uint32_t pd, void* addr, size_t length, uint32_t access) {
  if (daemon_minor_ < 2) return -EOPNOTSUPP;  // a droced from before rereg_mr
  if (addr == nullptr || length == 0) return -EINVAL;
  if ((access & (abi::kAccessRemoteWrite | abi::kAccessRemoteAtomic)) && !(access & abi::kAccessLocalWrite))
    return -EINVAL;
  const bool translation = (flags & kReregTranslation) != 0;
  std::unique_lock<std::mutex> g(ctl_mutex_);
  auto it = mrs_.find(lkey);
  if (it == mrs_.end()) return -EINVAL;
  // A region stays what it was registered as: ODP or pinned (droced refuses the change too).
  if (it->second.odp != ((access & abi::kAccessOnDemand) != 0)) return -EINVAL;
  ReregMrRequest q{};
  q.lkey = lkey;
  q.flags = flags & (kReregTranslation | kReregPd | kReregAccess);
  q.pd = pd;
  q.access = access;
  q.va = reinterpret_cast<uint64_t>(addr);
  q.length = length;
  if (it->second.odp) {  // no pages to send: droced reaches the new range through the same descriptor
    RegMrReply r{};
    g.unlock();
    const int rc = call(MsgType::rereg_mr, &q, sizeof q, &r, sizeof r);
    g.lock();
    if (rc == 0 && translation && (it = mrs_.find(lkey)) != mrs_.end()) it->second = {addr, length, true};
    return rc;
  }
  std::vector<MrSegment> segs;
  std::vector<int> fds;
  if (translation) {
    uintptr_t page_start = 0;
    std::vector<SharedMemory::Piece> pieces;
    if (int rc = memory_.share(addr, length, &page_start, &pieces); rc != 0) return rc == -E2BIG ? -ENOMEM : rc;
    for (const auto& p : pieces) {
      segs.push_back(p.segment);
      fds.push_back(p.fd);
    }
    q.page_va = page_start;
    q.segment_count = static_cast<uint32_t>(segs.size());
  }
  RegMrReply r{};
  g.unlock();
  const int rc = call(MsgType::rereg_mr, &q, sizeof q, &r, sizeof r, nullptr, fds,
                      {reinterpret_cast<const uint8_t*>(segs.data()), segs.size() * sizeof(MrSegment)});
  g.lock();
  if (!translation) return rc;
  // The references go with the range droced now maps: the new one on
  // success, the old one otherwise.
  it = mrs_.find(lkey);
  if (rc != 0 || it == mrs_.end()) {
    memory_.release(addr, length);
    return rc != 0 ? rc : -EINVAL;
  }
  memory_.release(it->second.addr, it->second.length);
  it->second = {addr, length};
  return 0;
}

int Context::dereg_mr(uint32_t lkey) {
  IdRequest q{lkey, 0};
  int rc = call(MsgType::dereg_mr, &q, sizeof q, nullptr, 0);
  std::lock_guard<std::mutex> g(ctl_mutex_);
  auto it = mrs_.find(lkey);
  if ((rc == 0 || rc == -EIO) && it != mrs_.end()) {
    if (!it->second.odp) memory_.release(it->second.addr, it->second.length);
    mrs_.erase(it);
  }
  return rc == -EIO ? 0 : rc;  // a dead device has nothing left to deregister
}

// ---- Device memory -------------------------------------------------------------

int Context::alloc_dm(uint64_t length, uint32_t log_align, Dm** out) {
  if (daemon_minor_ < 11) return -EOPNOTSUPP;  // a droced from before device memory
  AllocDmRequest q{length, log_align, 0};
  AllocDmReply r{};
  std::vector<core::Fd> fds;
  if (int rc = call(MsgType::alloc_dm, &q, sizeof q, &r, sizeof r, &fds); rc != 0) return rc;
  auto dm = std::make_unique<Dm>();
  dm->id_ = r.dm_id;
  dm->length_ = length;
  int rc = fds.size() == 1 && r.region_bytes >= length ? map_region(fds[0], r.region_bytes, &dm->region_) : -EPROTO;
  if (rc != 0) {
    IdRequest d{r.dm_id, 0};
    (void)call(MsgType::free_dm, &d, sizeof d, nullptr, 0);
    return rc;
  }
  *out = dm.get();
  std::lock_guard<std::mutex> l(ctl_mutex_);
  dms_[dm.get()] = std::move(dm);
  return 0;
}

int Context::free_dm(Dm* dm) {
  IdRequest q{dm->id_, 0};
  const int rc = call(MsgType::free_dm, &q, sizeof q, nullptr, 0);
  if (rc != 0 && rc != -EIO) return rc;  // a dead device has nothing left to free
  std::lock_guard<std::mutex> l(ctl_mutex_);
  dms_.erase(dm);
  return 0;
}

int Context::reg_dm_mr(uint32_t pd, Dm* dm, uint64_t offset, uint64_t length, uint32_t access, uint32_t* lkey,
                       uint32_t* rkey) {
  RegDmMrRequest q{};
  q.pd = pd;
  q.dm_id = dm->id_;
  q.access = access;
  q.offset = offset;
  q.length = length;
  RegMrReply r{};
  if (int rc = call(MsgType::reg_dm_mr, &q, sizeof q, &r, sizeof r); rc != 0) return rc;
  *lkey = r.lkey;
  *rkey = r.rkey;
  return 0;
}

// ---- CQs ---------------------------------------------------------------------

int Context::register_channel(int write_fd, uint32_t* id) {
  if (daemon_minor_ < 1) return -EOPNOTSUPP;  // a droced from before completion channels
  IdReply r{};
  const int fds[1] = {write_fd};
  int rc = call(MsgType::register_channel, nullptr, 0, &r, sizeof r, nullptr, fds);
  if (rc == 0) *id = r.id;
  return rc;
}

int Context::create_cq(uint32_t cqe, Cq** out, uint32_t channel, uint64_t user_handle, bool timestamp) {
  if (channel != 0 && daemon_minor_ < 1) return -EOPNOTSUPP;
  if (timestamp && daemon_minor_ < 11) return -EOPNOTSUPP;  // an older droced ignores the flag
  CreateCqRequest q{};
  q.cqe = cqe;
  q.flags = timestamp ? uint32_t{kCqCreateTimestamp} : 0u;
  q.channel = channel;
  q.user_handle = user_handle;
  CreateCqReply r{};
  std::vector<core::Fd> fds;
  if (int rc = call(MsgType::create_cq, &q, sizeof q, &r, sizeof r, &fds); rc != 0) return rc;
  auto cq = std::make_unique<Cq>();
  cq->ctx_ = this;
  cq->id_ = r.cq_id;
  cq->cqe_ = r.cqe;
  const abi::ShmRingGeometry g{r.cqe, sizeof(abi::Cqe)};
  const size_t ring_off = sizeof(abi::QueueDoorbellBlock);
  int rc = fds.size() == 2 ? map_region(fds[0], r.region_bytes, &cq->region_) : -EPROTO;
  if (rc == 0) rc = abi::ShmRingConsumer::attach(sub(cq->region_, ring_off, abi::shm_ring_bytes(g)), g, &cq->ring_);
  if (rc != 0) {
    IdRequest d{r.cq_id, 0};
    (void)call(MsgType::destroy_cq, &d, sizeof d, nullptr, 0);
    return rc;
  }
  cq->block_ = reinterpret_cast<abi::QueueDoorbellBlock*>(cq->region_.data());
  cq->event_fd_ = std::move(fds[1]);
  *out = cq.get();
  std::lock_guard<std::mutex> l(ctl_mutex_);
  cqs_[cq.get()] = std::move(cq);
  return 0;
}

int Context::resize_cq(Cq* cq, uint32_t cqe) {
  if (daemon_minor_ < 3) return -EOPNOTSUPP;  // a droced from before resize_cq
  wait_doorbells_taken();
  // Held across the call, as HCA providers hold their CQ lock across the
  // kernel's resize: droced counts the completions not yet polled against
  // the consumer index as it stands, so no poll may move it until this side
  // reads from the new ring; no arm may write the old block either.
  std::lock_guard<SpinLock> g(cq->lock_);
  ResizeCqRequest q{cq->id_, cqe};
  ResizeCqReply r{};
  std::vector<core::Fd> fds;
  if (int rc = call(MsgType::resize_cq, &q, sizeof q, &r, sizeof r, &fds); rc != 0) return rc;
  // droced writes only the new ring from now on.
  core::ShmRegion region;
  abi::ShmRingConsumer ring;
  const abi::ShmRingGeometry geometry{r.cqe, sizeof(abi::Cqe)};
  const size_t ring_off = sizeof(abi::QueueDoorbellBlock);
  int rc = fds.size() == 1 ? map_region(fds[0], r.region_bytes, &region) : -EPROTO;
  if (rc == 0) rc = abi::ShmRingConsumer::attach(sub(region, ring_off, abi::shm_ring_bytes(geometry)), geometry, &ring);
  // It must go on where this side stopped reading, or completions were lost
  // or would come twice.
  if (rc == 0 && ring.index() != cq->ring_.index()) rc = -EPROTO;
  if (rc != 0) {
    // The old ring is dead: poll answers -EIO (a detached view is a corrupt
    // one). The old block stays mapped for req_notify, which droced no
    // longer reads.
    cq->ring_ = abi::ShmRingConsumer();
    return rc;
  }
  cq->ring_ = std::move(ring);
  cq->block_ = reinterpret_cast<abi::QueueDoorbellBlock*>(region.data());
  cq->region_ = std::move(region);  // unmaps the old ring
  cq->cqe_ = r.cqe;
  return 0;
}

int Context::destroy_cq(Cq* cq, uint64_t* comp_events_written) {
  {
    // A QP still on it keeps it (droced says so too, but not once it is gone).
    std::lock_guard<std::mutex> l(ctl_mutex_);
    for (const auto& [p, qp] : qps_)
      if (qp->send_cq_ == cq || qp->recv_cq_ == cq) return -EBUSY;
  }
  IdRequest q{cq->id_, 0};
  DestroyCqReply r{};
  int rc = call(MsgType::destroy_cq, &q, sizeof q, &r, sizeof r);
  if (rc != 0 && rc != -EIO) return rc;
  if (comp_events_written != nullptr)
    *comp_events_written = rc == 0 && daemon_minor_ >= 6 ? r.comp_events_written : kEventsUnknown;
  std::lock_guard<std::mutex> l(ctl_mutex_);
  cqs_.erase(cq);
  return 0;
}

int Cq::poll(abi::Completion* out, int n) {
  if (n <= 0) return 0;
  abi::Cqe buf[16];
  int done = 0;
  std::lock_guard<SpinLock> g(lock_);
  while (done < n) {
    uint32_t got = 0;
    const uint32_t want = static_cast<uint32_t>(n - done < 16 ? n - done : 16);
    const uint32_t first = ring_.index();
    if (ring_.pop_burst(buf, want, &got) == abi::ShmRingStatus::corrupt) return -EIO;
    if (discards_.empty()) {
      for (uint32_t i = 0; i < got; ++i) out[done++] = abi::decode_cqe(buf[i]);
    } else {
      for (uint32_t i = 0; i < got; ++i) {
        bool drop = false;
        for (const Discard& d : discards_)
          drop = drop || (buf[i].qp_num == d.qpn && static_cast<int32_t>(first + i - d.until) < 0);
        if (!drop) out[done++] = abi::decode_cqe(buf[i]);
      }
      std::erase_if(discards_, [&](const Discard& d) { return static_cast<int32_t>(ring_.index() - d.until) >= 0; });
    }
    if (got < want) break;
  }
  return done;
}

void Cq::discard(uint32_t qpn) {
  std::lock_guard<SpinLock> g(lock_);
  const uint32_t until = ring_.index() + ring_.size();
  if (until != ring_.index()) discards_.push_back({qpn, until});
}

int Cq::req_notify(bool solicited_only) {
  if (ctx_->fatal()) return -EIO;
  // Under the lock as a whole: resize_cq replaces the block.
  std::lock_guard<SpinLock> g(lock_);
  // What this CQ's ring holds now: droced fires at once for anything
  // pushed after it (abi/queues.h, CqArm).
  const uint32_t produced = ring_.index() + ring_.size();
  std::atomic_ref<uint32_t>(block_->cq_arm_index).store(produced, std::memory_order_relaxed);
  std::atomic_ref<uint32_t>(block_->rq_pending)
      .fetch_or((solicited_only ? abi::kCqArmSolicited : abi::kCqArmNext) | abi::kCqArmIndex);
  ctx_->ring_doorbell(abi::kDoorbellArmCq, id_, &block_->sq_pending);
  return 0;
}

int Cq::wait_event(int timeout_ms) {
  pollfd p[2] = {{event_fd_.get(), POLLIN, 0}, {ctx_->sock_.get(), POLLRDHUP, 0}};
  const int n = ::poll(p, 2, timeout_ms);
  if (n < 0) return -errno;
  if (p[0].revents & POLLIN) {
    uint64_t v;
    if (::read(event_fd_.get(), &v, sizeof v) == sizeof v) return 1;
  }
  if (p[1].revents & (POLLRDHUP | POLLHUP)) {
    ctx_->set_dead();
    return -EIO;
  }
  return 0;
}

// ---- SRQs --------------------------------------------------------------------

int Context::create_srq(uint32_t pd, uint32_t max_wr, uint32_t max_sge, uint32_t limit, Srq** out) {
  CreateSrqRequest q{pd, max_wr, max_sge, limit};
  return make_srq(MsgType::create_srq, &q, sizeof q, out);
}

int Context::create_xrc_srq(uint32_t pd, uint32_t max_wr, uint32_t max_sge, uint32_t limit, uint32_t xrcd, Cq* cq,
                            Srq** out) {
  if (daemon_minor_ < 12) return -EOPNOTSUPP;
  if (cq == nullptr) return -EINVAL;
  CreateXrcSrqRequest q{{pd, max_wr, max_sge, limit}, xrcd, cq->id_};
  return make_srq(MsgType::create_xrc_srq, &q, sizeof q, out);
}

int Context::make_srq(MsgType type, const void* body, size_t len, Srq** out) {
  CreateSrqReply r{};
  std::vector<core::Fd> fds;
  if (int rc = call(type, body, len, &r, sizeof r, &fds); rc != 0) return rc;
  auto s = std::make_unique<Srq>();
  s->ctx_ = this;
  s->id_ = r.srq_id;
  const abi::ShmRingGeometry g{r.ring_entries, r.entry_size};
  int rc = fds.size() == 1 ? map_region(fds[0], r.region_bytes, &s->region_) : -EPROTO;
  if (rc == 0) rc = abi::ShmRingProducer::attach(sub(s->region_, r.ring_offset, abi::shm_ring_bytes(g)), g, &s->rq_.ring);
  if (rc != 0) {
    IdRequest d{r.srq_id, 0};
    (void)call(MsgType::destroy_srq, &d, sizeof d, nullptr, 0);
    return rc;
  }
  s->rq_.pending = &reinterpret_cast<abi::QueueDoorbellBlock*>(s->region_.data())->rq_pending;
  s->rq_.max_wr = r.max_wr;
  s->rq_.max_sge = r.max_sge;
  *out = s.get();
  std::lock_guard<std::mutex> l(ctl_mutex_);
  srqs_[s.get()] = std::move(s);
  return 0;
}

int Context::modify_srq(Srq* srq, uint32_t mask, uint32_t max_wr, uint32_t limit) {
  ModifySrqRequest q{srq->id_, mask, max_wr, limit, 0, 0};
  return call(MsgType::modify_srq, &q, sizeof q, nullptr, 0);
}

int Context::query_srq(Srq* srq, uint32_t* max_wr, uint32_t* max_sge, uint32_t* limit) {
  IdRequest q{srq->id_, 0};
  ModifySrqRequest r{};
  int rc = call(MsgType::query_srq, &q, sizeof q, &r, sizeof r);
  if (rc == 0) {
    *max_wr = r.max_wr;
    *max_sge = r.max_sge;
    *limit = r.srq_limit;
  }
  return rc;
}

int Context::destroy_srq(Srq* srq) {
  IdRequest q{srq->id_, 0};
  int rc = call(MsgType::destroy_srq, &q, sizeof q, nullptr, 0);
  if (rc != 0 && rc != -EIO) return rc;
  std::lock_guard<std::mutex> l(ctl_mutex_);
  srqs_.erase(srq);
  return 0;
}

// ---- QPs ---------------------------------------------------------------------

int Context::create_qp(const QpCreate& c, Qp** out) {
  if (c.type == abi::QpType::xrc_recv) return make_xrc_qp(MsgType::create_xrc_qp, c.xrcd, 0, out);
  const bool xrc_send = c.type == abi::QpType::xrc_send;
  if (xrc_send && daemon_minor_ < 12) return -EOPNOTSUPP;
  if (c.send_cq == nullptr || (c.recv_cq == nullptr && !xrc_send)) return -EINVAL;
  if (c.block_self_mcast_loopback && daemon_minor_ < 5) return -EOPNOTSUPP;
  CreateQpRequest q{};
  q.flags = c.block_self_mcast_loopback ? kQpBlockSelfMcastLoopback : 0;
  q.pd = c.pd;
  q.send_cq = c.send_cq->id_;
  q.recv_cq = xrc_send ? c.send_cq->id_ : c.recv_cq->id_;  // XRC send QPs have no receive side
  q.srq = c.srq != nullptr ? c.srq->id_ + 1 : 0;
  q.qp_type = static_cast<uint8_t>(c.type);
  q.sq_sig_all = c.sq_sig_all ? 1 : 0;
  q.max_send_wr = c.cap.max_send_wr;
  q.max_recv_wr = c.cap.max_recv_wr;
  q.max_send_sge = c.cap.max_send_sge;
  q.max_recv_sge = c.cap.max_recv_sge;
  q.max_inline_data = c.cap.max_inline_data;
  CreateQpReply r{};
  std::vector<core::Fd> fds;
  if (int rc = call(MsgType::create_qp, &q, sizeof q, &r, sizeof r, &fds); rc != 0) return rc;
  auto qp = std::make_unique<Qp>();
  qp->ctx_ = this;
  qp->qpn_ = r.qpn;
  qp->send_cq_ = c.send_cq;
  qp->recv_cq_ = xrc_send ? c.send_cq : c.recv_cq;
  qp->type_ = c.type;
  qp->cap_ = {r.max_send_wr, r.max_recv_wr, r.max_send_sge, r.max_recv_sge, r.max_inline_data};
  qp->has_rq_ = c.srq == nullptr && !xrc_send;
  int rc = fds.size() == 1 ? map_region(fds[0], r.region_bytes, &qp->region_) : -EPROTO;
  const abi::ShmRingGeometry sq{r.sq_entries, r.sq_entry_size};
  const abi::ShmRingGeometry rq{r.rq_entries, r.rq_entry_size};
  if (rc == 0)
    rc = abi::ShmRingProducer::attach(sub(qp->region_, r.sq_offset, abi::shm_ring_bytes(sq)), sq, &qp->sq_.ring);
  if (rc == 0 && qp->has_rq_)
    rc = abi::ShmRingProducer::attach(sub(qp->region_, r.rq_offset, abi::shm_ring_bytes(rq)), rq, &qp->rq_.ring);
  if (rc != 0) {
    IdRequest d{r.qpn, 0};
    (void)call(MsgType::destroy_qp, &d, sizeof d, nullptr, 0);
    return rc;
  }
  auto* block = reinterpret_cast<abi::QueueDoorbellBlock*>(qp->region_.data());
  qp->sq_.pending = &block->sq_pending;
  qp->sq_.max_wr = r.max_send_wr;
  qp->sq_.max_sge = r.max_send_sge;
  qp->sq_.max_inline = r.max_inline_data;
  qp->rq_.pending = &block->rq_pending;
  qp->rq_.max_wr = r.max_recv_wr;
  qp->rq_.max_sge = r.max_recv_sge;
  *out = qp.get();
  std::lock_guard<std::mutex> l(ctl_mutex_);
  qps_[qp.get()] = std::move(qp);
  return 0;
}

int Context::open_qp(uint32_t xrcd, uint32_t qpn, abi::QpType type, Qp** out) {
  if (type != abi::QpType::xrc_recv) return -EINVAL;  // the only type ibv_open_qp opens
  return make_xrc_qp(MsgType::open_qp, xrcd, qpn, out);
}

int Context::make_xrc_qp(MsgType type, uint32_t xrcd, uint32_t qpn, Qp** out) {
  if (daemon_minor_ < 12) return -EOPNOTSUPP;
  XrcQpRequest q{xrcd, qpn, uint32_t(abi::QpType::xrc_recv), 0};
  XrcQpReply r{};
  if (int rc = call(type, &q, sizeof q, &r, sizeof r); rc != 0) return rc;
  // No queues, no region: droced answers the QPN only.
  auto qp = std::make_unique<Qp>();
  qp->ctx_ = this;
  qp->qpn_ = r.qpn;
  qp->type_ = abi::QpType::xrc_recv;
  qp->has_rq_ = false;
  *out = qp.get();
  std::lock_guard<std::mutex> l(ctl_mutex_);
  qps_[qp.get()] = std::move(qp);
  return 0;
}

int Context::open_xrcd(int fd, uint32_t oflags, uint32_t* id) {
  if (daemon_minor_ < 12) return -EOPNOTSUPP;
  OpenXrcdRequest q{oflags, fd >= 0 ? kXrcdFile : 0u};
  IdReply r{};
  const int send_fd[1] = {fd};
  int rc = call(MsgType::open_xrcd, &q, sizeof q, &r, sizeof r, nullptr,
                std::span<const int>(send_fd, fd >= 0 ? 1 : 0));
  if (rc == 0) *id = r.id;
  return rc;
}

int Context::close_xrcd(uint32_t id) {
  IdRequest q{id, 0};
  return call(MsgType::close_xrcd, &q, sizeof q, nullptr, 0);
}

int Context::modify_qp(Qp* qp, const abi::QpAttr& attr, uint32_t mask) {
  ModifyQpRequest q{};
  q.qpn = qp->qpn_;
  q.mask = mask;
  abi::to_wire(attr, &q.attr);
  int rc = call(MsgType::modify_qp, &q, sizeof q, nullptr, 0);
  if (rc == 0 && (mask & abi::kAttrState)) qp->state_.store(static_cast<uint8_t>(attr.qp_state));
  if (rc == 0 && (mask & abi::kAttrState) && attr.qp_state == abi::QpState::reset) {
    // droced pushes nothing more for the QP; what it pushed (flushed WRs of
    // the error state) belongs to the QP's previous life.
    if (qp->send_cq_ != nullptr) qp->send_cq_->discard(qp->qpn_);
    if (qp->recv_cq_ != nullptr && qp->recv_cq_ != qp->send_cq_) qp->recv_cq_->discard(qp->qpn_);
  }
  return rc;
}

int Context::query_qp(Qp* qp, abi::QpAttr* attr) {
  IdRequest q{qp->qpn_, 0};
  WireQpAttr r{};
  int rc = call(MsgType::query_qp, &q, sizeof q, &r, sizeof r);
  if (rc != 0) return rc;
  if (!abi::from_wire(r, attr)) return -EPROTO;
  std::memcpy(attr->ah_attr.dmac.data(), r.ah_attr.dmac, 6);
  attr->ah_attr.vlan_id = r.ah_attr.vlan_id;
  qp->state_.store(static_cast<uint8_t>(attr->qp_state));
  return 0;
}

int Context::attach_mcast(Qp* qp, const uint8_t* gid, uint16_t lid, bool attach) {
  if (daemon_minor_ < 4) return -EOPNOTSUPP;  // a droced from before multicast
  McastRequest q{};
  q.qpn = qp->qpn_;
  q.lid = lid;
  std::memcpy(q.gid, gid, sizeof q.gid);
  return call(attach ? MsgType::attach_mcast : MsgType::detach_mcast, &q, sizeof q, nullptr, 0);
}

int Context::create_flow(Qp* qp, CreateFlowRequest req, uint32_t* id) {
  if (daemon_minor_ < 14) return -EOPNOTSUPP;  // a droced from before raw packet QPs
  req.qpn = qp->qpn_;
  IdReply r{};
  const int rc = call(MsgType::create_flow, &req, sizeof req, &r, sizeof r);
  if (rc == 0) *id = r.id;
  return rc;
}

int Context::set_rss(Qp* qp, RssRequest req) {
  if (daemon_minor_ < 14) return -EOPNOTSUPP;
  req.qpn = qp->qpn_;
  return call(MsgType::set_rss, &req, sizeof req, nullptr, 0);
}

int Context::destroy_flow(uint32_t id) {
  IdRequest q{id, 0};
  return call(MsgType::destroy_flow, &q, sizeof q, nullptr, 0);
}

int Context::destroy_qp(Qp* qp) {
  IdRequest q{qp->qpn_, 0};
  int rc = call(MsgType::destroy_qp, &q, sizeof q, nullptr, 0);
  if (rc != 0 && rc != -EIO) return rc;
  // Its completions go with it (as an HCA's provider cleans its CQs). An XRC receive QP has
  // no CQs of its own: what it completed into its SRQs' CQs stays there.
  if (qp->send_cq_ != nullptr) qp->send_cq_->discard(qp->qpn_);
  if (qp->recv_cq_ != nullptr && qp->recv_cq_ != qp->send_cq_) qp->recv_cq_->discard(qp->qpn_);
  std::lock_guard<std::mutex> l(ctl_mutex_);
  qps_.erase(qp);
  return 0;
}

int Context::create_ah(uint32_t pd, const abi::AddressVector& av, uint32_t* ah) {
  CreateAhRequest q{};
  q.pd = pd;
  abi::to_wire(av, &q.av);
  IdReply r{};
  int rc = call(MsgType::create_ah, &q, sizeof q, &r, sizeof r);
  if (rc == 0) *ah = r.id;
  return rc;
}

int Context::destroy_ah(uint32_t ah) {
  IdRequest q{ah, 0};
  int rc = call(MsgType::destroy_ah, &q, sizeof q, nullptr, 0);
  return rc == -EIO ? 0 : rc;
}

int Context::stats(std::string* json) {
  StatsReply r{};
  std::vector<core::Fd> fds;
  if (int rc = call(MsgType::stats, nullptr, 0, &r, sizeof r, &fds); rc != 0) return rc;
  if (fds.size() != 1) return -EPROTO;
  core::ShmRegion m;
  if (int rc = core::ShmRegion::map_peer(fds[0].get(), r.length + 1, {}, &m); rc != 0) return rc;
  json->assign(reinterpret_cast<const char*>(m.data()), r.length);
  return 0;
}

int query_stats(const std::string& socket_path, std::string* json) {
  std::unique_ptr<Context> c(new Context());
  if (int rc = core::seqpacket_connect(socket_path, &c->sock_); rc != 0) return rc;
  return c->stats(json);  // allowed before hello
}

int control_fault(const std::string& socket_path, const FaultRequest& q, uint32_t* id) {
  std::unique_ptr<Context> c(new Context());
  if (int rc = core::seqpacket_connect(socket_path, &c->sock_); rc != 0) return rc;
  FaultReply r{};
  const int rc = c->call(MsgType::fault, &q, sizeof q, &r, sizeof r);  // allowed before hello
  *id = r.id;
  return rc;
}

int control_cc(const std::string& socket_path, const CcRequest& q) {
  std::unique_ptr<Context> c(new Context());
  if (int rc = core::seqpacket_connect(socket_path, &c->sock_); rc != 0) return rc;
  return c->call(MsgType::cc, &q, sizeof q, nullptr, 0);  // allowed before hello
}

int start_capture(const std::string& socket_path, const CaptureRequest& q, int fd, core::Fd* session,
                  uint32_t* snaplen) {
  std::unique_ptr<Context> c(new Context());
  if (int rc = core::seqpacket_connect(socket_path, &c->sock_); rc != 0) return rc;
  CaptureReply r{};
  const int fds[] = {fd};
  const int rc = c->call(MsgType::capture, &q, sizeof q, &r, sizeof r, nullptr, fds);  // allowed before hello
  if (rc != 0) return rc;
  *snaplen = r.snaplen;
  *session = std::move(c->sock_);  // the capture lives as long as this connection
  return 0;
}

// ---- Data path -----------------------------------------------------------------

void Context::ring_doorbell(uint16_t kind, uint32_t id, uint32_t* pending) {
  // The queue's producer index was published before this fence; droced
  // clears the flag, fences, then reads the index: one of the two sides
  // sees the other (docs/droced.md).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // A doorbell in flight: droced clears the flag before it reads the index.
  // Looked at first, so a busy queue's posts leave the flag's cache line
  // shared instead of taking it from droced's CPU with a locked exchange each.
  std::atomic_ref<uint32_t> flag(*pending);
  if (flag.load(std::memory_order_relaxed) != 0 || flag.exchange(1) != 0) return;
  {
    std::lock_guard<SpinLock> g(doorbell_lock_);
    const abi::Doorbell d{kind, 0, id};
    // The ring holds one doorbell per queue and CQ: it is full only if corrupt.
    if (doorbells_.try_push(&d) != abi::ShmRingStatus::ok) return set_dead();
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (atomic_load(&page_->daemon_sleeping) != 0) {
    // When and where from: droced's spin learns whether spinning longer would have caught this.
    std::atomic_ref<int32_t>(page_->waker_cpu).store(sched_getcpu(), std::memory_order_relaxed);
    std::atomic_ref<uint64_t>(page_->waker_ns).store(core::monotonic_ns(), std::memory_order_relaxed);
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_fd_.get(), &one, sizeof one);
  }
}

void Context::wait_doorbells_taken() {
  // droced's worker takes doorbells at the top of its loop, hands the WRs to
  // the engine, runs it, and reads control requests after that (droced/
  // worker.h): once the ring is empty, a request sent now is read after the
  // engine saw every WR posted before it. droced takes doorbells every loop
  // and wakes for them, so this is short; the bound is for a droced stuck or
  // gone (then the request goes anyway, or fails with -EIO).
  const uint64_t end = core::monotonic_ns() + 1'000'000'000;
  for (;;) {
    {
      std::lock_guard<SpinLock> g(doorbell_lock_);
      if (doorbells_.size() == 0) return;  // 0 for a corrupt ring too
    }
    if (fatal() || core::monotonic_ns() > end) return;
    ::usleep(10);
  }
}

int ClientQueue::push_send(const abi::SendWqeHeader& h, abi::SgeList sges) {
  const bool inl = (h.send_flags & abi::kSendInline) != 0;
  if (sges.size() > abi::kMaxSge || (!inl && sges.size() > max_sge)) return -EINVAL;
  if (inl) {
    // Checked before the slot is claimed; the bytes are gathered into it below.
    uint64_t inline_len = 0;
    for (uint32_t i = 0; i < sges.size(); ++i) {
      inline_len += sges[i].length;
      if (inline_len > max_inline || inline_len > kMaxInlineData) return -EINVAL;
    }
  }
  std::lock_guard<SpinLock> g(lock);
  if (ring.size() >= max_wr) return ring.corrupted() ? -EIO : -ENOMEM;
  uint32_t got = 0;
  if (ring.reserve(1, &got) != abi::ShmRingStatus::ok) return -ENOMEM;
  std::span<uint8_t> slot(static_cast<uint8_t*>(ring.slot(0)), ring.entry_size());
  if (abi::encode_send_wqe(h, sges, slot) == 0) return -EINVAL;
  ring.publish(1);
  return 0;
}

int ClientQueue::push_send(const abi::SendWr& wr) {
  return push_send(abi::send_wqe_header(wr), {wr.sg_list, wr.num_sge});
}

int Qp::post_send(const abi::SendWr& wr) { return post_send(abi::send_wqe_header(wr), {wr.sg_list, wr.num_sge}); }

int Qp::post_send(const abi::SendWqeHeader& h, abi::SgeList sges) {
  if (ctx_->fatal()) return -EIO;
  if (type_ == abi::QpType::xrc_recv) return -EINVAL;  // no send queue
  const auto st = static_cast<abi::QpState>(state_.load(std::memory_order_relaxed));
  if (st == abi::QpState::reset || st == abi::QpState::init || st == abi::QpState::rtr) return -EINVAL;
  if (int rc = sq_.push_send(h, sges); rc != 0) return rc;
  ctx_->ring_doorbell(abi::kDoorbellSq, qpn_, sq_.pending);
  return 0;
}

namespace {
int post_recv_to(Context* ctx, ClientQueue& q, const abi::RecvWr& wr, uint16_t kind, uint32_t id,
                 void (Context::*ring)(uint16_t, uint32_t, uint32_t*)) {
  if (wr.num_sge > q.max_sge) return -EINVAL;
  {
    std::lock_guard<SpinLock> g(q.lock);
    if (q.ring.size() >= q.max_wr) return q.ring.corrupted() ? -EIO : -ENOMEM;
    uint32_t got = 0;
    if (q.ring.reserve(1, &got) != abi::ShmRingStatus::ok) return -ENOMEM;
    std::span<uint8_t> slot(static_cast<uint8_t*>(q.ring.slot(0)), q.ring.entry_size());
    if (abi::encode_recv_wqe(wr, slot) == 0) return -EINVAL;
    q.ring.publish(1);
  }
  (ctx->*ring)(kind, id, q.pending);
  return 0;
}
}  // namespace

int Qp::post_recv(const abi::RecvWr& wr) {
  if (ctx_->fatal()) return -EIO;
  if (!has_rq_ || static_cast<abi::QpState>(state_.load(std::memory_order_relaxed)) == abi::QpState::reset)
    return -EINVAL;
  return post_recv_to(ctx_, rq_, wr, abi::kDoorbellRq, qpn_, &Context::ring_doorbell);
}

int Srq::post_recv(const abi::RecvWr& wr) {
  if (ctx_->fatal()) return -EIO;
  return post_recv_to(ctx_, rq_, wr, abi::kDoorbellSrq, id_, &Context::ring_doorbell);
}

// ---- Async events ----------------------------------------------------------------

EventElement event_element(uint32_t type) {
  switch (type) {
    case 0:  // IBV_EVENT_CQ_ERR
      return EventElement::cq;
    case 1:   // IBV_EVENT_QP_FATAL
    case 2:   // IBV_EVENT_QP_REQ_ERR
    case 3:   // IBV_EVENT_QP_ACCESS_ERR
    case 4:   // IBV_EVENT_COMM_EST
    case 5:   // IBV_EVENT_SQ_DRAINED
    case 6:   // IBV_EVENT_PATH_MIG
    case 7:   // IBV_EVENT_PATH_MIG_ERR
    case 16:  // IBV_EVENT_QP_LAST_WQE_REACHED
      return EventElement::qp;
    case 14:  // IBV_EVENT_SRQ_ERR
    case 15:  // IBV_EVENT_SRQ_LIMIT_REACHED
      return EventElement::srq;
    default:
      return EventElement::port;
  }
}

int Context::get_async_event(AsyncEvent* out, int timeout_ms) {
  // Pop; when empty, consume the eventfd's wake-ups (without waiting when
  // timeout_ms is 0) and pop again: an event queued after that second pop
  // writes the eventfd again, so none is missed and none is waited for twice.
  for (int pass = 0;; ++pass) {
    {
      std::lock_guard<SpinLock> g(event_lock_);
      abi::EventEntry e;
      const abi::ShmRingStatus st = events_.try_pop(&e);
      if (st == abi::ShmRingStatus::ok) {
        if (e.type == kEventDeviceFatal) fatal_reported_ = true;
        *out = {e.type, e.id};
        return 0;
      }
      if (fatal() && !fatal_reported_) {
        fatal_reported_ = true;
        *out = {kEventDeviceFatal, 0};
        return 0;
      }
    }
    if (timeout_ms == 0 && pass > 0) return -EAGAIN;
    epoll_event ev[2];
    const int n = ::epoll_wait(async_epoll_.get(), ev, 2, timeout_ms);
    if (n == 0 && timeout_ms != 0) return -EAGAIN;
    if (n < 0 && errno != EINTR) return -errno;
    for (int i = 0; i < n; ++i) {
      if (ev[i].data.fd == async_fd_.get()) {
        uint64_t v;
        [[maybe_unused]] ssize_t r = ::read(async_fd_.get(), &v, sizeof v);
      } else {
        set_dead();
      }
    }
    if (fatal_reported_ && fatal()) return -EAGAIN;
  }
}

}  // namespace droce::client
