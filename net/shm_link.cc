#include "net/shm_link.h"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "core/clock.h"
#include "core/log.h"

namespace droce::net {

namespace {

constexpr uint32_t kMagic = 0x4b4c5344;  // "DSLK"
constexpr uint32_t kSlotBytes = 9088;     // header line + kMaxFrame, a multiple of 64
constexpr uint32_t kSlotHeader = 64;
static_assert(kSlotHeader + ShmLink::kMaxFrame <= kSlotBytes && kSlotBytes % 64 == 0);
constexpr int kConnectRetryMs = 20;

// One direction's indices, each written by one side only, in lines of their own.
struct alignas(64) RingHeader {
  std::atomic<uint32_t> head;  // frames published (producer)
  uint8_t pad0[60];
  std::atomic<uint32_t> tail;  // frames consumed (consumer)
  uint8_t pad1[60];
  std::atomic<uint32_t> consumer_sleeping;  // set by the consumer; cleared by whoever wakes it
  std::atomic<int32_t> consumer_cpu;        // the CPU the consumer went to sleep on (a hint)
  std::atomic<uint64_t> woken_ns;           // the waker: when it last woke the consumer (a hint)
  std::atomic<int32_t> waker_cpu;           // the waker: from which CPU (a hint)
  uint8_t pad2[44];
  // Where the consumer runs and for how long it has been awake, written each loop by an end
  // that yields its CPU (publish_running): a line of its own, so that the producer's look at
  // the flag above after each publish does not fetch it. cpu -1: not published.
  std::atomic<uint64_t> consumer_awake_ns;
  std::atomic<int32_t> consumer_run_cpu;
  uint8_t pad3[52];
};
static_assert(sizeof(RingHeader) == 256);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

// The region: this header, ring 0 (client to server), ring 1 (server to client),
// then ring 0's slots and ring 1's.
struct alignas(64) RegionHeader {
  uint32_t magic;
  uint32_t version;
  uint32_t slots;
  uint32_t slot_bytes;
  uint8_t pad[48];
  RingHeader ring[2];
};
static_assert(sizeof(RegionHeader) == 64 + 2 * 256);

// The handshake's messages (both ways, fixed size).
struct Hello {
  uint32_t magic;
  uint32_t version;
  uint32_t slots;
  uint32_t slot_bytes;
  uint64_t region_bytes;
  uint32_t flags;  // kHelloIcrc: frames carry a real ICRC
  uint32_t reserved;
};
static_assert(sizeof(Hello) == 32);
constexpr uint32_t kHelloIcrc = 1;

size_t region_bytes(uint32_t slots) { return sizeof(RegionHeader) + size_t{2} * slots * kSlotBytes; }

bool valid_slots(uint32_t s) { return s >= 16 && s <= 65536 && (s & (s - 1)) == 0; }

}  // namespace

// See the header. One reference for the link while it lives, one per lent frame.
struct ShmLink::LoanHome {
  std::atomic<int64_t> refs{1};
  std::atomic<bool> asleep{false};           // the receiving thread is about to block
  std::atomic<std::thread::id> rx_thread{};  // the thread that calls rx_burst
  int wake_fd = -1;                          // the link's wake_, or `wake` once the link is gone
  // Handed over by a link closed with frames out: its regions, and its wake-up descriptor.
  std::vector<std::unique_ptr<Conn>> conns;
  core::Fd wake;
};

void ShmLink::release(LoanHome* home) {
  if (home->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete home;
}

// A received frame's slot lent to an mbuf (zero copy): the mbuf's external-buffer info, and
// whether the slot is still out. The free callback (any thread: frames are handed between
// cores) clears `out`; the receiving thread moves the tail over returned slots, in order.
struct ShmLink::RxLoan {
  rte_mbuf_ext_shared_info shinfo{};
  std::atomic<uint8_t> out{0};
  LoanHome* home = nullptr;
};

// A frame built in a slot of the peer's ring (tx_alloc): the mbuf's external-buffer info, and
// where the slot stands. Slots are reserved in order and published in order: the head moves over
// a slot once its frame went through tx_burst (ready) or was freed unsent (void, sent empty).
struct ShmLink::TxLoan {
  enum : uint8_t { kFree, kReserved, kReady, kVoid };
  rte_mbuf_ext_shared_info shinfo{};
  std::atomic<uint8_t> state{kFree};
  uint32_t len = 0;
  ShmLink* link = nullptr;   // identity only: the callback may outlive the link
  LoanHome* home = nullptr;  // what the callback touches
  Conn* conn = nullptr;
};

// One connection's region, and this end's view of it.
struct ShmLink::Conn {
  core::ShmRegion region;
  core::Fd peer_wake;
  uint32_t slots = 0;
  uint32_t mask = 0;
  RingHeader* rx = nullptr;
  RingHeader* tx = nullptr;
  std::byte* rx_slots = nullptr;
  std::byte* tx_slots = nullptr;
  // Our own copies of the indices we write: the peer cannot move them.
  uint32_t rx_tail = 0;  ///< slots given back to the peer (their frames freed)
  uint32_t rx_next = 0;  ///< the next slot to read; [rx_tail, rx_next) are lent to mbufs
  uint32_t tx_head = 0;
  uint32_t tx_reserved = 0;  ///< [tx_head, tx_reserved): slots tx_alloc or tx_burst took, unpublished
  /// Per receive slot: the mbuf's view of it while lent (rx_burst, the free callback).
  std::unique_ptr<RxLoan[]> loans;
  /// Per transmit slot: its state, and the mbuf's view of it while built in place.
  std::unique_ptr<TxLoan[]> tx_loans;

  std::byte* tx_slot(uint32_t i) const { return tx_slots + size_t{i & mask} * kSlotBytes; }
  /// Room for one more frame: the peer's tail read once by the caller. A tail the peer
  /// moved past our head (impossible) counts as no room.
  bool tx_room(uint32_t tail) const { return tx_reserved - tail < slots; }

  void attach(bool server) {
    auto* h = reinterpret_cast<RegionHeader*>(region.data());
    std::byte* slots0 = region.data() + sizeof(RegionHeader);
    std::byte* slots1 = slots0 + size_t{slots} * kSlotBytes;
    mask = slots - 1;
    rx = &h->ring[server ? 0 : 1];
    tx = &h->ring[server ? 1 : 0];
    rx_slots = server ? slots0 : slots1;
    tx_slots = server ? slots1 : slots0;
    rx_tail = rx->tail.load(std::memory_order_relaxed);
    rx_next = rx_tail;
    tx_head = tx->head.load(std::memory_order_relaxed);
    tx_reserved = tx_head;
    loans = std::make_unique<RxLoan[]>(slots);
    tx_loans = std::make_unique<TxLoan[]>(slots);
  }
};

ShmLink::ShmLink(const ShmLinkConfig& cfg) : cfg_(cfg), home_(new LoanHome) {}

int ShmLink::open(const ShmLinkConfig& cfg, std::unique_ptr<ShmLink>* out) {
  if (cfg.socket.empty() || !valid_slots(cfg.slots)) return -EINVAL;
  std::unique_ptr<ShmLink> l(new ShmLink(cfg));
  l->wake_ = core::Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  l->stop_ = core::Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!l->wake_.valid() || !l->stop_.valid()) return -errno;
  l->home_->wake_fd = l->wake_.get();
  if (cfg.server) {
    if (int rc = core::seqpacket_listen(cfg.socket, &l->listen_, 4); rc != 0) {
      DROCE_LOG(ERR, net, "shm link: cannot listen on %s: %s", cfg.socket.c_str(), std::strerror(-rc));
      return rc;
    }
  }
  l->control_ = std::thread([p = l.get()] { p->control_loop(); });
  *out = std::move(l);
  return 0;
}

ShmLink::~ShmLink() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(stop_.get(), &one, sizeof one);
  if (control_.joinable()) control_.join();
  conn_.store(nullptr, std::memory_order_release);
  if (cfg_.server && listen_.valid()) ::unlink(cfg_.socket.c_str());
  const int64_t lent = home_->refs.load(std::memory_order_acquire) - 1;
  if (lent != 0) {
    // Frames still point into the regions (their owner frees them later): the loans' home
    // keeps the regions mapped, and the descriptor a late free may write open, until the
    // last of them is freed.
    DROCE_LOG(NOTICE, net, "shm link %s: %lld frames still held at close; their region stays mapped until freed",
              cfg_.socket.c_str(), static_cast<long long>(lent));
    std::lock_guard l(conns_mutex_);
    home_->conns = std::move(conns_);
    home_->wake = std::move(wake_);
  }
  release(home_);
}

void ShmLink::return_slot(void*, void* opaque) {
  auto* loan = static_cast<RxLoan*>(opaque);
  loan->out.store(0, std::memory_order_release);
  LoanHome* home = loan->home;
  // The receiving thread gives slots back when it looks at the ring, and before it sleeps
  // (set_sleeping). A frame another thread frees meanwhile (a core it was handed to) wakes it:
  // otherwise a peer whose ring is full of slots we hold would wait for a wake-up nobody sends.
  // Its own frees need no wake-up: at most one burst's slots are out when it blocks.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (home->asleep.load(std::memory_order_relaxed) &&
      home->rx_thread.load(std::memory_order_relaxed) != std::this_thread::get_id()) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(home->wake_fd, &one, sizeof one);
  }
  release(home);  // last: it may free the slot's region
}

void ShmLink::give_back(Conn* c) {
  uint32_t t = c->rx_tail;
  while (t != c->rx_next && c->loans[t & c->mask].out.load(std::memory_order_acquire) == 0) ++t;
  if (t != c->rx_tail) {
    c->rx_tail = t;
    c->rx->tail.store(t, std::memory_order_release);
  }
}

void ShmLink::kick_self() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_.get(), &one, sizeof one);
}

void ShmLink::publish(std::unique_ptr<Conn> c) {
  Conn* p = c.get();
  {
    std::lock_guard l(conns_mutex_);
    conns_.push_back(std::move(c));
  }
  conn_.store(p, std::memory_order_release);
  counters_.connects.fetch_add(1, std::memory_order_relaxed);
  DROCE_LOG(INFO, net, "shm link %s: connected (%u slots each way, icrc=%s)", cfg_.socket.c_str(), p->slots,
            cfg_.icrc ? "compute" : "skip");
  kick_self();  // a sleeping owner looks at the link again
}

void ShmLink::drop_connection(const char* why) {
  if (conn_.exchange(nullptr, std::memory_order_acq_rel) != nullptr) {
    counters_.disconnects.fetch_add(1, std::memory_order_relaxed);
    DROCE_LOG(INFO, net, "shm link %s: disconnected (%s)", cfg_.socket.c_str(), why);
    kick_self();
  }
  pending_.reset();
  sock_.reset();
}

// ---------------------------------------------------------------- control thread

void ShmLink::control_loop() {
  while (true) {
    pollfd p[3];
    nfds_t n = 0;
    p[n++] = {stop_.get(), POLLIN, 0};
    const int sock_at = sock_.valid() ? int(n) : -1;
    if (sock_.valid()) p[n++] = {sock_.get(), POLLIN, 0};
    const int listen_at = listen_.valid() ? int(n) : -1;
    if (listen_.valid()) p[n++] = {listen_.get(), POLLIN, 0};
    // A client without a server retries; otherwise only events matter.
    const int timeout = (!cfg_.server && !sock_.valid()) ? kConnectRetryMs : -1;
    const int r = ::poll(p, n, timeout);
    if (r < 0 && errno != EINTR) {
      DROCE_LOG(ERR, net, "shm link %s: poll: %s", cfg_.socket.c_str(), std::strerror(errno));
      return;
    }
    if (p[0].revents != 0) return;
    if (sock_at >= 0 && p[sock_at].revents != 0) {
      if (pending_ != nullptr) {
        finish_server_handshake();
      } else {
        // A connected peer sends nothing after the handshake: anything is its end.
        std::vector<uint8_t> buf;
        std::vector<core::Fd> fds;
        const ssize_t got = core::receive_message(sock_.get(), &buf, 64, &fds);
        if (got != -EAGAIN) drop_connection(got == 0 ? "the peer closed" : "the peer broke the protocol");
      }
    }
    if (listen_at >= 0 && p[listen_at].revents != 0) serve_accept();
    if (!cfg_.server && !sock_.valid()) try_connect();
  }
}

void ShmLink::serve_accept() {
  core::Fd c;
  if (core::seqpacket_accept(listen_.get(), &c) != 0) return;
  if (sock_.valid()) {
    counters_.refused_peers.fetch_add(1, std::memory_order_relaxed);
    DROCE_LOG(NOTICE, net, "shm link %s: a second peer turned away (one at a time)", cfg_.socket.c_str());
    return;  // closing it tells the peer
  }
  auto conn = std::make_unique<Conn>();
  conn->slots = cfg_.slots;
  core::ShmMapOptions opts;
  if (int rc = core::ShmRegion::create("droce-shm-link", region_bytes(cfg_.slots), opts, &conn->region); rc != 0) {
    DROCE_LOG(ERR, net, "shm link %s: cannot make a region: %s", cfg_.socket.c_str(), std::strerror(-rc));
    return;
  }
  auto* h = reinterpret_cast<RegionHeader*>(conn->region.data());
  h->magic = kMagic;
  h->version = kVersion;
  h->slots = cfg_.slots;
  h->slot_bytes = kSlotBytes;
  for (RingHeader& r : h->ring) r.consumer_run_cpu.store(-1, std::memory_order_relaxed);  // none published
  const Hello hello{kMagic, kVersion, cfg_.slots, kSlotBytes, conn->region.size(), hello_flags(), 0};
  const int fds[2] = {conn->region.fd(), wake_.get()};
  if (core::send_message(c.get(), {reinterpret_cast<const uint8_t*>(&hello), sizeof hello}, fds) != 0) return;
  sock_ = std::move(c);
  pending_ = std::move(conn);
}

void ShmLink::finish_server_handshake() {
  std::vector<uint8_t> buf;
  std::vector<core::Fd> fds;
  const ssize_t got = core::receive_message(sock_.get(), &buf, sizeof(Hello), &fds);
  if (got == -EAGAIN) return;
  Hello h{};
  if (got == ssize_t{sizeof h}) std::memcpy(&h, buf.data(), sizeof h);
  if (got != ssize_t{sizeof h} || h.magic != kMagic || h.version != kVersion || h.flags != hello_flags() ||
      fds.size() != 1) {
    counters_.refused_peers.fetch_add(1, std::memory_order_relaxed);
    drop_connection(got <= 0 ? "the peer left during the handshake" : "a bad handshake answer");
    return;
  }
  std::unique_ptr<Conn> c = std::move(pending_);
  c->peer_wake = std::move(fds[0]);
  c->attach(true);
  publish(std::move(c));
}

uint32_t ShmLink::hello_flags() const { return cfg_.icrc ? kHelloIcrc : 0; }

void ShmLink::refused(const char* fmt, ...) {
  counters_.refused_peers.fetch_add(1, std::memory_order_relaxed);
  char why[256];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  if (last_refusal_ == why) return;  // the client retries every kConnectRetryMs
  last_refusal_ = why;
  DROCE_LOG(ERR, net, "shm link %s: %s", cfg_.socket.c_str(), why);
}

void ShmLink::try_connect() {
  core::Fd c;
  if (core::seqpacket_connect(cfg_.socket, &c) != 0) return;  // the server is not there yet
  // The server answers at once; a server that does not is not one of ours.
  pollfd p{c.get(), POLLIN, 0};
  if (::poll(&p, 1, 2000) != 1) return;
  std::vector<uint8_t> buf;
  std::vector<core::Fd> fds;
  const ssize_t got = core::receive_message(c.get(), &buf, sizeof(Hello), &fds);
  // Version 1's hello is shorter: what it has is read, to say why it is turned away.
  Hello h{};
  if (got > 0) std::memcpy(&h, buf.data(), std::min<size_t>(size_t(got), sizeof h));
  if (got < 8 || h.magic != kMagic || (got != ssize_t{sizeof h} && h.version == kVersion) || fds.size() != 2)
    return;  // turned away, or not a link
  if (h.version != kVersion || h.slot_bytes != kSlotBytes || !valid_slots(h.slots) ||
      h.region_bytes < region_bytes(h.slots)) {
    refused("the server speaks version %u (%u slots of %u bytes); this end version %u", h.version, h.slots,
            h.slot_bytes, kVersion);
    return;
  }
  if (h.flags != hello_flags()) {
    // Both ends compute the ICRC or neither does: one that skips it would see every frame of
    // the other dropped as a bad ICRC, or send frames the other drops.
    refused("the server has icrc=%s, this end icrc=%s; give both ends the same",
            (h.flags & kHelloIcrc) ? "compute" : "skip", cfg_.icrc ? "compute" : "skip");
    return;
  }
  auto conn = std::make_unique<Conn>();
  conn->slots = h.slots;
  core::ShmMapOptions opts;
  if (int rc = core::ShmRegion::map_peer(fds[0].get(), region_bytes(h.slots), opts, &conn->region); rc != 0) {
    refused("the server's region is unusable: %s", std::strerror(-rc));
    return;
  }
  conn->peer_wake = std::move(fds[1]);
  const Hello answer{kMagic, kVersion, h.slots, kSlotBytes, h.region_bytes, hello_flags(), 0};
  const int mine[1] = {wake_.get()};
  if (core::send_message(c.get(), {reinterpret_cast<const uint8_t*>(&answer), sizeof answer}, mine) != 0) return;
  conn->attach(false);
  last_refusal_.clear();
  sock_ = std::move(c);
  publish(std::move(conn));
}

// ---------------------------------------------------------------- data path

void ShmLink::set_sleeping(bool on) {
  Conn* c = conn_.load(std::memory_order_acquire);
  if (c == nullptr) return;
  if (on) c->rx->consumer_cpu.store(sched_getcpu(), std::memory_order_relaxed);
  c->rx->consumer_sleeping.store(on ? 1 : 0, std::memory_order_seq_cst);
  home_->asleep.store(on, std::memory_order_seq_cst);
  // The flag before the caller's last look at the ring (Dekker with tx_burst), and before
  // the slots freed so far go back: one freed after this wakes us (return_slot), or the
  // peer, its ring full of slots we hold, would wait for a wake-up nobody sends.
  if (on) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    give_back(c);
  }
}

// One load of the connection for both questions: it may come or go between two.
bool ShmLink::awake_on(const Conn* c, int cpu) {
  return c != nullptr && cpu >= 0 && c->tx->consumer_sleeping.load(std::memory_order_relaxed) == 0 &&
         c->tx->consumer_run_cpu.load(std::memory_order_relaxed) == cpu;
}

bool ShmLink::peer_busy_with_ours(int cpu) const {
  const Conn* c = conn_.load(std::memory_order_acquire);
  return awake_on(c, cpu) && c->tx_head != c->tx->tail.load(std::memory_order_relaxed);
}

bool ShmLink::peer_awake_on(int cpu) const { return awake_on(conn_.load(std::memory_order_acquire), cpu); }

void ShmLink::publish_running(int cpu, uint64_t awake_ns) {
  Conn* c = conn_.load(std::memory_order_acquire);
  if (c == nullptr) return;
  c->rx->consumer_awake_ns.store(awake_ns, std::memory_order_relaxed);
  c->rx->consumer_run_cpu.store(cpu, std::memory_order_relaxed);
}

uint64_t ShmLink::peer_awake_ns() const {
  const Conn* c = conn_.load(std::memory_order_acquire);
  return c == nullptr ? 0 : c->tx->consumer_awake_ns.load(std::memory_order_relaxed);
}

core::WakeStamp ShmLink::wake_stamp() const {
  Conn* c = conn_.load(std::memory_order_acquire);
  if (c == nullptr) return {};
  return {c->rx->woken_ns.load(std::memory_order_relaxed), c->rx->waker_cpu.load(std::memory_order_relaxed)};
}

void ShmLink::ack_wake() {
  uint64_t v;
  [[maybe_unused]] ssize_t n = ::read(wake_.get(), &v, sizeof v);
}

bool ShmLink::rx_pending() const {
  const Conn* c = conn_.load(std::memory_order_acquire);
  return c != nullptr && c->rx->head.load(std::memory_order_acquire) != c->rx_next;
}

uint16_t ShmLink::rx_burst(rte_mempool* pool, rte_mbuf** out, uint16_t n) {
  Conn* c = conn_.load(std::memory_order_acquire);
  if (c == nullptr || n == 0) return 0;
  if (home_->rx_thread.load(std::memory_order_relaxed) != std::this_thread::get_id())
    home_->rx_thread.store(std::this_thread::get_id(), std::memory_order_relaxed);
  give_back(c);
  const uint32_t head = c->rx->head.load(std::memory_order_acquire);
  if (head - c->rx_tail > c->slots) {
    // The peer wrote an impossible head: skip to it rather than read garbage forever, once
    // no slot is lent (give_back walks from the tail to rx_next, which must stay within one
    // ring: a hostile head must not make that walk billions of steps long).
    counters_.rx_bad_ring.fetch_add(1, std::memory_order_relaxed);
    if (c->rx_tail == c->rx_next) {
      c->rx_tail = c->rx_next = head;
      c->rx->tail.store(head, std::memory_order_release);
    }
    return 0;
  }
  const uint32_t avail = head - c->rx_next;
  if (avail == 0) return 0;
  const uint16_t want = static_cast<uint16_t>(std::min<uint32_t>(avail, n));
  if (rte_pktmbuf_alloc_bulk(pool, out, want) != 0) {
    counters_.rx_no_mbuf.fetch_add(1, std::memory_order_relaxed);
    return 0;  // the frames wait in the ring
  }
  // Zero copy: each frame stays in its slot, which the mbuf borrows as an external buffer
  // until it is freed (return_slot); a short one is copied out (kCopyMax). The peer cannot
  // write a lent slot (the tail has not passed it); should it write anyway, it only changes
  // the bytes of its own frame: every length droce uses is the mbuf's, read here once.
  uint16_t got = 0, lent = 0;
  uint64_t bytes = 0;
  uint64_t bad = 0;
  for (uint16_t i = 0; i < want; ++i) {
    const uint32_t index = (c->rx_next + i) & c->mask;
    std::byte* slot = c->rx_slots + size_t{index} * kSlotBytes;
    uint32_t len;
    std::memcpy(&len, slot, sizeof len);  // read once: the peer may change it under us
    if (len == 0) continue;  // void: a frame the peer built here and dropped
    if (len < 14 || len > kMaxFrame) {
      ++bad;
      continue;  // the slot is not lent; the mbuf is used for the next one
    }
    rte_mbuf* m = out[got];
    bytes += len;
    ++got;
    if (len <= kCopyMax) {
      // Short: copied out, and the slot is free again at once (kCopyMax).
      std::memcpy(rte_pktmbuf_mtod(m, void*), slot + kSlotHeader, len);
      m->data_len = static_cast<uint16_t>(len);
      m->pkt_len = len;
      continue;
    }
    ++lent;
    RxLoan& loan = c->loans[index];
    loan.home = home_;
    loan.out.store(1, std::memory_order_relaxed);
    loan.shinfo.free_cb = &ShmLink::return_slot;
    loan.shinfo.fcb_opaque = &loan;
    rte_mbuf_ext_refcnt_set(&loan.shinfo, 1);
    rte_pktmbuf_attach_extbuf(m, slot + kSlotHeader, RTE_BAD_IOVA, static_cast<uint16_t>(len), &loan.shinfo);
    m->data_len = static_cast<uint16_t>(len);
    m->pkt_len = len;
  }
  for (uint16_t i = got; i < want; ++i) rte_pktmbuf_free(out[i]);
  if (lent != 0) home_->refs.fetch_add(lent, std::memory_order_relaxed);
  c->rx_next += want;
  give_back(c);  // bad slots at the tail go back at once
  counters_.rx_frames.store(counters_.rx_frames.load(std::memory_order_relaxed) + got, std::memory_order_relaxed);
  counters_.rx_bytes.store(counters_.rx_bytes.load(std::memory_order_relaxed) + bytes, std::memory_order_relaxed);
  if (bad != 0) counters_.rx_bad_slot.fetch_add(bad, std::memory_order_relaxed);
  return got;
}

void ShmLink::tx_slot_freed(void*, void* opaque) {
  auto* loan = static_cast<TxLoan*>(opaque);
  uint8_t reserved = TxLoan::kReserved;
  // Ready ones were published by tx_burst before it freed them; a reserved one was dropped.
  loan->state.compare_exchange_strong(reserved, TxLoan::kVoid, std::memory_order_acq_rel);
  release(loan->home);  // last: it may free the slot's region
}

ShmLink::TxLoan* ShmLink::tx_loan_of(const rte_mbuf* m) const {
  if (!RTE_MBUF_HAS_EXTBUF(m) || m->shinfo == nullptr || m->shinfo->free_cb != &ShmLink::tx_slot_freed) return nullptr;
  auto* loan = static_cast<TxLoan*>(m->shinfo->fcb_opaque);
  return loan->link == this ? loan : nullptr;
}

rte_mbuf* ShmLink::tx_alloc(rte_mempool* pool, uint32_t len, bool* none_now) {
  *none_now = false;
  Conn* c = conn_.load(std::memory_order_acquire);
  if (c == nullptr || !enabled_.load(std::memory_order_relaxed)) return nullptr;
  *none_now = true;
  if (!c->tx_room(c->tx->tail.load(std::memory_order_acquire))) return nullptr;
  if (len <= kCopyMax) {
    // Cheaper copied at tx_burst: build it in a pool mbuf. A full ring still says "wait"
    // (above): building frames it cannot take would only fill the pool and the caches.
    *none_now = false;
    return nullptr;
  }
  rte_mbuf* m = rte_pktmbuf_alloc(pool);
  if (m == nullptr) return nullptr;
  const uint32_t at = c->tx_reserved++;
  TxLoan& loan = c->tx_loans[at & c->mask];
  loan.state.store(TxLoan::kReserved, std::memory_order_relaxed);
  loan.len = 0;
  loan.link = this;
  loan.home = home_;
  loan.conn = c;
  loan.shinfo.free_cb = &ShmLink::tx_slot_freed;
  loan.shinfo.fcb_opaque = &loan;
  rte_mbuf_ext_refcnt_set(&loan.shinfo, 1);
  rte_pktmbuf_attach_extbuf(m, c->tx_slot(at) + kSlotHeader, RTE_BAD_IOVA, uint16_t{kMaxFrame}, &loan.shinfo);
  home_->refs.fetch_add(1, std::memory_order_relaxed);
  *none_now = false;
  return m;
}

void ShmLink::publish_tx(Conn* c) {
  uint32_t head = c->tx_head;
  uint64_t voids = 0;
  while (head != c->tx_reserved) {
    TxLoan& loan = c->tx_loans[head & c->mask];
    const uint8_t st = loan.state.load(std::memory_order_acquire);
    if (st == TxLoan::kReserved) break;  // still being built: what follows waits for it
    const uint32_t len = st == TxLoan::kReady ? loan.len : 0;
    voids += st == TxLoan::kVoid;
    std::memcpy(c->tx_slot(head), &len, sizeof len);
    loan.state.store(TxLoan::kFree, std::memory_order_relaxed);
    ++head;
  }
  if (voids != 0) counters_.tx_void_slots.fetch_add(voids, std::memory_order_relaxed);
  if (head == c->tx_head) return;
  c->tx_head = head;
  c->tx->head.store(head, std::memory_order_release);
  // The head before the peer's flag (Dekker with set_sleeping): one write per sleep.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (c->tx->consumer_sleeping.load(std::memory_order_relaxed) == 0) return;
  if (defer_wakes_.load(std::memory_order_relaxed) &&
      c->tx->consumer_cpu.load(std::memory_order_relaxed) == sched_getcpu() &&
      head - c->tx->tail.load(std::memory_order_relaxed) < c->slots / 2) {
    // The peer sleeps on the CPU we run on: woken now, it would preempt us and take a few
    // frames at a time. It is woken when we block (flush_wake), at half a ring, or once the
    // wake-up is kMaxWakeDeferNs late (flush_wake_if_late).
    if (!wake_owed_.load(std::memory_order_relaxed)) {
      owed_since_ns_.store(core::monotonic_ns(), std::memory_order_relaxed);
      wake_owed_.store(true, std::memory_order_relaxed);
      counters_.wakeups_deferred.fetch_add(1, std::memory_order_relaxed);
    }
    return;
  }
  wake_peer(c);
}

void ShmLink::wake_peer(Conn* c, bool late) {
  wake_owed_.store(false, std::memory_order_relaxed);
  if (c->tx->consumer_sleeping.load(std::memory_order_relaxed) != 0 &&
      c->tx->consumer_sleeping.exchange(0, std::memory_order_acq_rel) != 0) {
    c->tx->waker_cpu.store(sched_getcpu(), std::memory_order_relaxed);
    c->tx->woken_ns.store(core::monotonic_ns(), std::memory_order_relaxed);
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t w = ::write(c->peer_wake.get(), &one, sizeof one);
    counters_.wakeups_sent.fetch_add(1, std::memory_order_relaxed);
    if (late) counters_.wakeups_late.fetch_add(1, std::memory_order_relaxed);
  }
}

void ShmLink::flush_wake_if_late(uint64_t now_ns) {
  if (!wake_owed_.load(std::memory_order_relaxed)) return;
  // now_ns may predate the deferral (droced's loop reads its clock before it sends): not late.
  const uint64_t since = owed_since_ns_.load(std::memory_order_relaxed);
  if (now_ns > since && now_ns - since >= kMaxWakeDeferNs) flush_wake(true);
}

void ShmLink::flush_wake() { flush_wake(false); }

void ShmLink::flush_wake(bool late) {
  if (!wake_owed_.load(std::memory_order_relaxed)) return;
  Conn* c = conn_.load(std::memory_order_acquire);
  if (c == nullptr) {
    wake_owed_.store(false, std::memory_order_relaxed);
    return;
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
  wake_peer(c, late);
}

uint16_t ShmLink::tx_burst(rte_mbuf** pkts, uint16_t n) {
  Conn* c = conn_.load(std::memory_order_acquire);
  if (c == nullptr || n == 0 || !enabled_.load(std::memory_order_relaxed)) {
    if (n != 0) counters_.tx_ring_full.fetch_add(n, std::memory_order_relaxed);
    return 0;
  }
  const uint32_t tail = c->tx->tail.load(std::memory_order_acquire);
  uint64_t bytes = 0, too_long = 0, stale = 0, in_place = 0;
  uint16_t take = 0;
  for (; take < n; ++take) {
    const rte_mbuf* m = pkts[take];
    if (TxLoan* loan = tx_loan_of(m); loan != nullptr) {
      if (loan->conn != c) {
        ++stale;  // built in a region since replaced: freed below (void there, harmless)
        continue;
      }
      loan->len = m->pkt_len;  // within the slot: tx_alloc gave the mbuf kMaxFrame bytes
      loan->state.store(TxLoan::kReady, std::memory_order_release);
      bytes += m->pkt_len;
      ++in_place;
      continue;
    }
    if (m->pkt_len > kMaxFrame) {
      ++too_long;
      continue;
    }
    if (!c->tx_room(tail)) break;
    const uint32_t at = c->tx_reserved++;
    std::byte* d = c->tx_slot(at) + kSlotHeader;
    for (const rte_mbuf* seg = m; seg != nullptr; seg = seg->next) {
      std::memcpy(d, rte_pktmbuf_mtod(seg, const void*), seg->data_len);
      d += seg->data_len;
    }
    TxLoan& loan = c->tx_loans[at & c->mask];
    loan.len = m->pkt_len;
    loan.state.store(TxLoan::kReady, std::memory_order_relaxed);
    bytes += m->pkt_len;
  }
  publish_tx(c);
  // After publishing: a ready frame's free callback leaves its slot alone.
  if (take != 0) rte_pktmbuf_free_bulk(pkts, take);
  const uint64_t sent = take - too_long - stale;
  counters_.tx_frames.store(counters_.tx_frames.load(std::memory_order_relaxed) + sent, std::memory_order_relaxed);
  counters_.tx_bytes.store(counters_.tx_bytes.load(std::memory_order_relaxed) + bytes, std::memory_order_relaxed);
  if (in_place != 0) counters_.tx_in_place.fetch_add(in_place, std::memory_order_relaxed);
  if (too_long != 0) counters_.tx_too_long.fetch_add(too_long, std::memory_order_relaxed);
  if (stale != 0) counters_.tx_stale.fetch_add(stale, std::memory_order_relaxed);
  if (take != n) counters_.tx_ring_full.fetch_add(n - take, std::memory_order_relaxed);
  return take;
}

uint32_t ShmLink::tx_ring_used() const {
  const Conn* c = conn_.load(std::memory_order_acquire);
  return c == nullptr ? 0 : c->tx_head - c->tx->tail.load(std::memory_order_acquire);
}

uint32_t ShmLink::rx_ring_used() const {
  const Conn* c = conn_.load(std::memory_order_acquire);
  return c == nullptr ? 0 : c->rx->head.load(std::memory_order_acquire) - c->rx_next;
}

uint32_t ShmLink::rx_ring_lent() const {
  const Conn* c = conn_.load(std::memory_order_acquire);
  return c == nullptr ? 0 : c->rx_next - c->rx_tail;
}

uint32_t ShmLink::tx_ring_unpublished() const {
  const Conn* c = conn_.load(std::memory_order_acquire);
  return c == nullptr ? 0 : c->tx_reserved - c->tx_head;
}

void ShmLink::reset_counters() {
  for (auto* a : {&counters_.rx_frames, &counters_.rx_bytes, &counters_.tx_frames, &counters_.tx_bytes,
                  &counters_.tx_ring_full, &counters_.tx_too_long, &counters_.rx_no_mbuf, &counters_.rx_bad_slot,
                  &counters_.rx_bad_ring, &counters_.wakeups_sent, &counters_.tx_in_place,
                  &counters_.tx_void_slots, &counters_.tx_stale, &counters_.wakeups_deferred,
                  &counters_.wakeups_late})
    a->store(0, std::memory_order_relaxed);
}

}  // namespace droce::net
