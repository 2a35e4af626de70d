#include "droced/worker.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include <rte_lcore.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/proc.h"

namespace droce::droced {

namespace {

constexpr uint64_t kFirstSleepUs = 16;
constexpr int kArmedSleepUs = 50'000;  // the link check's period: RX interrupts bound nothing else

thread_local Worker* tls_current = nullptr;
cpu_set_t startup_cpus;
bool startup_cpus_known = false;

// CPU numbers in a kernel CPU list ("0-2,5").
bool cpu_in_list(const std::string& list, unsigned cpu) {
  std::stringstream in(list);
  std::string part;
  while (std::getline(in, part, ',')) {
    if (part.empty() || part == "\n") continue;
    unsigned lo = 0, hi = 0;
    const int n = std::sscanf(part.c_str(), "%u-%u", &lo, &hi);
    if (n == 1) hi = lo;
    if (n >= 1 && cpu >= lo && cpu <= hi) return true;
  }
  return false;
}

}  // namespace

Worker* Worker::current() { return tls_current; }

Worker::Worker(WorkerContext context, unsigned index, unsigned lcore, std::unique_ptr<DeviceCore> core,
               const Device& shared, int* rc)
    : context_(std::move(context)), index_(index), lcore_(lcore), core_(std::move(core)), device_(shared) {
  *rc = 0;
  wake_ = core::Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  epoll_ = core::Fd(::epoll_create1(EPOLL_CLOEXEC));
  if (!wake_.valid() || !epoll_.valid()) {
    *rc = -errno;
    return;
  }
  // Edge-triggered and never read: each write (a client's doorbell while we sleep, a frame
  // handed over, a session adopted) is an edge of its own whatever the count, so a wake-up
  // costs no read (a system call, 300-350 ns on the 2-vCPU VM) and no stale count can keep
  // the descriptor readable. The count would overflow after 2^64 - 2 writes.
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLET;
  ev.data.u64 = kWakeKey;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &ev) != 0) {
    *rc = -errno;
    return;
  }
  device_.core = core_.get();
  device_.wake_fd = wake_.get();
  // A copy of its own: the daemon's changes while this worker reads it (push_port_events).
  gids_ = std::make_unique<net::GidTable>(*shared.gids);
  device_.gids = gids_.get();
  core_->group().set_wake_fd(index, wake_.get());
  core_->engine().set_recv_refill(
      [](void* ctx, uint32_t qpn) {
        const Device& d = static_cast<Worker*>(ctx)->device_;
        if (auto it = d.qp_owner.find(qpn); it != d.qp_owner.end()) it->second->refill_recv(qpn);
      },
      this);
  rx_queue_ = core_->group().rx_queue_of(index);
}

Worker::~Worker() { shutdown(); }

std::string Worker::describe_affinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (pthread_getaffinity_np(pthread_self(), sizeof set, &set) != 0) return "?";
  // "0", "0-3", "0,2,5-7".
  std::string out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &set)) continue;
    int end = c;
    while (end + 1 < CPU_SETSIZE && CPU_ISSET(end + 1, &set)) ++end;
    if (!out.empty()) out += ',';
    out += std::to_string(c);
    if (end > c) {
      out += '-';
      out += std::to_string(end);
    }
    c = end;
  }
  return out;
}

void Worker::adapt_affinity(uint64_t now) {
  const uint64_t window = now - window_start_ns_;
  const uint64_t away = away_ns_ - away_at_window_start_;
  const uint64_t busy = window > away ? window - away : 0;
  window_start_ns_ = now;
  away_at_window_start_ = away_ns_;
  // Busy (not blocked) 70 % of the window: this worker needs a CPU of its own more than it needs
  // to stay out of its programs' way; back on its lcore's CPU below 40 % (hysteresis: a load
  // near one edge does not flap). Tried and dropped: leaving when the kernel kept the pinned
  // thread waiting for its CPU a fifth of the time (/proc/thread-self/schedstat): the two
  // droced of one machine then left CPU 0 even for 1 QP, and lost what pinning gains.
  bool want_pinned = pinned_;
  const bool busy_window = busy * 10 > window * 7;
  if (!busy_window) idle_sampled_ns_ = 0;  // room elsewhere is judged over busy windows in a row
  if (pinned_ && busy_window) want_pinned = !room_elsewhere(now);
  if (!pinned_ && busy * 10 < window * 4) want_pinned = true;
  if (want_pinned == pinned_) return;
  cpu_set_t set;
  if (want_pinned) {
    CPU_ZERO(&set);
    const int cpu = int(rte_lcore_to_cpu_id(int(lcore_)));
    if (cpu < 0) return;
    CPU_SET(cpu, &set);
  } else {
    set = startup_cpus;
  }
  if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) return;
  pinned_ = want_pinned;
  ++counters_.affinity_changes;
  cpus_ = describe_affinity();
}

bool Worker::room_elsewhere(uint64_t now) {
  // Leaving the lcore's CPU pays only if another CPU has time to give. Where every other CPU
  // is taken (perftest's client spins on one of the two vCPUs here), the scheduler would put
  // this worker beside a spinner, or pull the spinner onto the CPU the two droced share, and
  // hand-offs wait for slices: on the 2-vCPU VM, ib_write_bw 64 B 1 QP in interleaved full
  // runs of bench/vs_kernel.sh went 1.65-2.86 M msg/s (mean 2.29) with both droced pinned
  // (`lcore`), 1.52-2.53 (2.00) with `auto` before this look, 2.24-2.55 (2.37) with it. So it
  // leaves only when some other CPU it may use sat idle a quarter of the time between two busy
  // windows in a row (/proc/stat, read only while busy).
  std::vector<uint64_t> idle;
  if (!core::read_cpu_idle(&idle)) return true;  // no /proc/stat: as before this look
  const bool have_before = idle_sampled_ns_ != 0;
  const uint64_t elapsed_ns = now - idle_sampled_ns_;
  std::swap(idle, idle_ticks_);
  idle_sampled_ns_ = now;
  if (!have_before) return false;
  static const uint64_t tick_ns = 1'000'000'000u / uint64_t(std::max(1L, sysconf(_SC_CLK_TCK)));
  const uint64_t idle_ns =
      core::most_idle_elsewhere(idle, idle_ticks_, startup_cpus, int(rte_lcore_to_cpu_id(int(lcore_)))) * tick_ns;
  const bool room = idle_ns * 4 >= elapsed_ns;
  if (!room) ++counters_.affinity_stays;
  return room;
}

void Worker::remember_startup_affinity() {
  CPU_ZERO(&startup_cpus);
  startup_cpus_known = sched_getaffinity(0, sizeof startup_cpus, &startup_cpus) == 0;
}

void Worker::choose_mode() {
  const DaemonConfig& cfg = config();
  const int cpu = int(rte_lcore_to_cpu_id(int(lcore_)));
  std::string isolated;
  if (std::ifstream f("/sys/devices/system/cpu/isolated"); f) std::getline(f, isolated);
  const bool owned = cpu >= 0 && cpu_in_list(isolated, unsigned(cpu));
  if (cfg.poll_mode == "poll") {
    polling_ = true;
    mode_reason_ = "--poll-mode poll: this core is droced's";
  } else if (cfg.poll_mode == "event") {
    polling_ = false;
    mode_reason_ = "--poll-mode event";
  } else if (owned) {
    polling_ = true;
    mode_reason_ = "auto: CPU " + std::to_string(cpu) + " is isolated (isolcpus), so droced owns it";
  } else {
    polling_ = false;
    mode_reason_ = "auto: CPU " + (cpu < 0 ? std::string("?") : std::to_string(cpu)) +
                   " is shared with other programs (not isolated); --poll-mode poll to own it";
  }
  if (cfg.idle_spin_us != DaemonConfig::kAutoSpin) spin_ = SpinPolicy(cfg.idle_spin_us * 1000);
}

core::WakeStamp Worker::first_wake_since(uint64_t since_ns) const {
  // Stamps are hints from shared memory: one older than the sleep is an earlier sleep's.
  core::WakeStamp first;
  auto take = [&](const core::WakeStamp& w) {
    if (w.ns >= since_ns && (first.ns == 0 || w.ns < first.ns)) first = w;
  };
  if (peer_ != nullptr) take(peer_->wake_stamp());
  for (const auto& [k, s] : sessions_) take(s->wake_stamp());
  return first;
}

core::WakeStamp Worker::last_client_wake() const {
  core::WakeStamp last;
  for (const auto& [k, s] : sessions_) {
    const core::WakeStamp w = s->wake_stamp();
    if (w.ns > last.ns) last = w;
  }
  return last;
}

uint64_t Worker::non_ack_frames() const {
  const rocev2::EngineCounters& ec = core_->engine().counters();
  return ec.tx_frames - ec.tx_acks;
}

uint64_t Worker::ack_hold_ns() {
  // Only where the idle waker watches: a CPU that goes idle wakes the peer at once.
  if (!idle_waker_.running()) return 0;
  AckHold::Block b;
  b.owed_since_ns = peer_ != nullptr ? peer_->wake_owed_since_ns() : 0;
  if (b.owed_since_ns == 0) return 0;
  b.cpu = sched_getcpu();
  if (b.cpu != idle_waker_.cpu()) return 0;
  b.acks_only = ack_hold_.acks_only(non_ack_frames());
  b.client = last_client_wake();
  b.now_ns = core::monotonic_ns();  // the loop's is older than the wake-up it owes
  return ack_hold_.hold_ns(b);
}

int Worker::launch(void* worker) {
  static_cast<Worker*>(worker)->run();
  return 0;
}

void Worker::adopt(uint64_t key, std::unique_ptr<Session> s) {
  load_.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard l(inbox_mutex_);
    inbox_.emplace_back(key, std::move(s));
    inbox_filled_.store(true, std::memory_order_release);
  }
  // Past the sleeping flag's check, a plain write: the loop reads the inbox each iteration.
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_.get(), &one, sizeof one);
}

void Worker::lock_state() {
  state_waiters_.fetch_add(1, std::memory_order_acq_rel);
  state_.lock();
  state_waiters_.fetch_sub(1, std::memory_order_acq_rel);
}

void Worker::take_inbox() {
  std::vector<std::pair<uint64_t, std::unique_ptr<Session>>> joining;
  // Every loop looks; the lock only when a client came (no locked instruction per loop).
  if (!inbox_filled_.load(std::memory_order_acquire)) return;
  {
    std::lock_guard l(inbox_mutex_);
    joining.swap(inbox_);
    inbox_filled_.store(false, std::memory_order_relaxed);
  }
  for (auto& [key, s] : joining) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = key;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, s->fd(), &ev) != 0) {
      DROCE_LOG(WARNING, app, "worker %u: cannot watch client %u: %s", index_, s->id(), std::strerror(errno));
      load_.fetch_sub(1, std::memory_order_relaxed);
      continue;
    }
    sessions_[key] = std::move(s);
  }
}

void Worker::close_session(uint64_t key) {
  auto it = sessions_.find(key);
  if (it == sessions_.end()) return;
  Session& s = *it->second;
  DROCE_LOG(INFO, app, "client %u (pid %d, %s) %s: freeing its %zu QPs, %zu CQs, %zu MRs", s.id(), int(s.pid()),
            s.program().c_str(), s.close_reason(), s.qp_count(), s.cq_count(), s.mr_count());
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, s.fd(), nullptr);
  ++counters_.clients_closed;
  sessions_.erase(it);  // the destructor moves its QPs to error and frees everything
  load_.fetch_sub(1, std::memory_order_relaxed);
}

int Worker::control(int timeout_us) {
  epoll_event evs[32];
  int n;
  if (timeout_us > 0) {
    // Asleep: `stats` on another worker may read this one meanwhile.
    state_.unlock();
    timespec ts{timeout_us / 1'000'000, (timeout_us % 1'000'000) * 1000L};
    n = ::epoll_pwait2(epoll_.get(), evs, 32, &ts, nullptr);
    if (n < 0 && errno == ENOSYS) n = ::epoll_wait(epoll_.get(), evs, 32, (timeout_us + 999) / 1000);
    state_.lock();
  } else {
    n = ::epoll_wait(epoll_.get(), evs, 32, 0);
  }
  const uint64_t now = core::monotonic_ns();
  for (int i = 0; i < n; ++i) {
    const uint64_t key = evs[i].data.u64;
    if (key == kRxInterruptKey) {
      ++counters_.wakeups_by_port;
      // Consumed now, not only when a sleep ends: a peer that saw our sleeping flag just
      // before we cleared it writes after that sleep's read, and the event, level-triggered,
      // would stay readable. Every later wait returned at once: a worker at SCHED_RR stuck on
      // a full ring "blocked" 270 000 times in half a second without leaving its CPU, and a
      // peer on that CPU never emptied the ring (ib_write_bw 64 KiB at rr: retry-exceeded).
      consume_rx_interrupt();
    } else if (key == kWakeKey) {
      ++counters_.wakeups_by_client;
    } else if (key == kCmKey) {
      if (cm_ != nullptr) cm_->on_control(now);
    } else if (key < kFirstSessionKey) {
      context_.on_daemon_key(key);
    } else {
      auto it = sessions_.find(key);
      if (it == sessions_.end()) continue;
      it->second->on_readable(now);
      if (it->second->closed()) {
        if (it->second->faulted()) ++counters_.clients_faulted;
        close_session(key);
      }
    }
  }
  take_inbox();
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    auto next = std::next(it);
    if (it->second->has_pending()) it->second->poll_pending(now);
    if (it->second->closed()) close_session(it->first);
    it = next;
  }
  return n;
}

void Worker::route_events() {
  auto& events = core_->engine().events();
  for (const auto& ev : events) {
    const auto& owners = ev.type == rocev2::AsyncEventType::cq_err                ? device_.cq_owner
                         : ev.type == rocev2::AsyncEventType::srq_limit_reached ? device_.srq_owner
                                                                                : device_.qp_owner;
    auto it = owners.find(ev.id);
    if (it == owners.end()) ++counters_.events_unrouted;
    else it->second->push_event(static_cast<uint32_t>(ev.type), ev.id);
  }
  events.clear();
}

void Worker::push_port_events() {
  if (const uint64_t g = context_.gid_generation->load(std::memory_order_acquire); g != gid_generation_) [[unlikely]] {
    gid_generation_ = g;
    std::vector<net::IpAddr> addresses;
    context_.copy_gids(gids_.get(), &addresses);
    core_->set_addresses(addresses);
    for (auto& [k, s] : sessions_) s->push_event(18 /* IBV_EVENT_GID_CHANGE */, 1);
  }
  const uint64_t gen = context_.link_generation->load(std::memory_order_acquire);
  if (gen == link_generation_) return;
  link_generation_ = gen;
  const bool up = context_.link_up->load(std::memory_order_relaxed);
  // A down since the last look (one this worker missed, or a flap the daemon saw as one change)
  // is told before the state now, so a client always hears PORT_ERR before PORT_ACTIVE.
  const uint64_t downs = context_.link_downs != nullptr ? context_.link_downs->load(std::memory_order_relaxed) : 0;
  const bool went_down = downs != link_downs_;
  link_downs_ = downs;
  for (auto& [k, s] : sessions_) {
    if (went_down) s->push_event(10 /* IBV_EVENT_PORT_ERR */, 1);
    if (up) s->push_event(9 /* IBV_EVENT_PORT_ACTIVE */, 1);
  }
}

void Worker::consume_rx_interrupt() {
  // Watched edge-triggered (droce_shm), there is nothing to consume.
  if (!rx_intr_edge_) core_->group().port()->rx_interrupt_ack(uint16_t(rx_queue_));
}

bool Worker::arm_rx_interrupt() {
  if (rx_queue_ < 0) return false;
  net::Port& port = *core_->group().port();
  const int fd = port.rx_interrupt_fd(uint16_t(rx_queue_));
  if (fd < 0) return false;
  if (fd != rx_intr_fd_) {
    // A new descriptor (memif makes one per connection): watch it instead.
    if (rx_intr_fd_ >= 0) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, rx_intr_fd_, nullptr);
    rx_intr_fd_ = -1;
    const bool edge = port.rx_interrupt_edge(uint16_t(rx_queue_));
    epoll_event ev{};
    ev.events = EPOLLIN | (edge ? EPOLLET : 0u);
    ev.data.u64 = kRxInterruptKey;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) return false;
    rx_intr_fd_ = fd;
    rx_intr_edge_ = edge;
  }
  return port.rx_interrupt_arm(uint16_t(rx_queue_), true) == 0;
}

void Worker::sleep(uint64_t now_ns, bool for_peer) {
  CoreGroup& group = core_->group();
  for (auto& [k, s] : sessions_) s->set_daemon_sleeping(true);
  group.set_sleeping(index_, true);
  std::atomic_thread_fence(std::memory_order_seq_cst);  // the flags before the last look at the rings
  bool work = core_->has_inbound();
  for (auto& [k, s] : sessions_) work = work || s->doorbells_waiting();
  const bool armed = !work && arm_rx_interrupt();
  bool port_acked = false;
  if (armed) {
    // A frame that arrived before the interrupt was armed raises nothing: look once more.
    const rocev2::EngineCounters& ec = core_->engine().counters();
    const uint64_t before = ec.rx_frames + core_->counters().neighbor_frames_in + core_->counters().handed_out;
    core_->run_once(now_ns);
    work = ec.rx_frames + core_->counters().neighbor_frames_in + core_->counters().handed_out != before ||
           core_->engine().has_tx_work();
    if (!core_->engine().events().empty()) route_events();
  }
  if (!work) {
    uint64_t deadline = core_->next_deadline();
    if (cm_ != nullptr) deadline = std::min(deadline, cm_->next_deadline_ns());
    // Armed, the port wakes us; only timers and the link check bound the sleep.
    // Unarmed, frames are seen when the sleep ends: sleeps grow from 16 us to
    // --max-sleep-us, doubling while nothing happens, so a short pause costs
    // a short delay and a long one still sleeps long.
    const uint64_t max_sleep_us = config().max_sleep_us;
    uint64_t us = armed ? kArmedSleepUs : std::min<uint64_t>(sleep_us_, max_sleep_us);
    if (!armed) sleep_us_ = std::min<uint64_t>(sleep_us_ * 2, max_sleep_us);
    if (deadline != UINT64_MAX) us = deadline <= now_ns ? 0 : std::min<uint64_t>(us, (deadline - now_ns) / 1000);
    // Last, after the last look (which may have sent): a peer asleep on our CPU runs now,
    // unless all it would get is acknowledgements and a client of ours waits for the CPU.
    const uint64_t hold_ns = us > 0 ? ack_hold_ns() : 0;
    if (hold_ns != 0) us = std::min<uint64_t>(us, hold_ns / 1000);
    const uint64_t idle_wakes = idle_wakes_.load(std::memory_order_relaxed);
    if (us > 0) {
      if (hold_ns != 0) idle_waker_.arm();
      else if (peer_ != nullptr) peer_->flush_wake();
      ++counters_.sleeps;
      SpinPolicy::Sleep slept;
      slept.spin_end_ns = now_ns;
      slept.for_peer = for_peer;
      slept.cpu = sched_getcpu();
      const uint64_t port_wakes = counters_.wakeups_by_port;
      const uint64_t client_wakes = counters_.wakeups_by_client;
      const int events = block(static_cast<int>(us), &slept.back_ns);
      port_acked = counters_.wakeups_by_port != port_wakes;  // control() read the event
      if (hold_ns != 0) {
        AckHold::End end = AckHold::End::other;
        if (counters_.wakeups_by_client != client_wakes) end = AckHold::End::client;
        else if (idle_wakes_.load(std::memory_order_relaxed) != idle_wakes) end = AckHold::End::idle;
        else if (events <= 0) end = AckHold::End::timer;
        ack_hold_.after_hold(end, slept.back_ns);
      }
      if (events <= 0) ++counters_.wakeups_by_timer;
      slept.by_event = events > 0;
      if (slept.by_event) slept.waker = first_wake_since(now_ns);
      spin_.after_sleep(slept);
    }
  }
  if (armed) {
    net::Port& port = *group.port();
    port.rx_interrupt_arm(uint16_t(rx_queue_), false);
    // One that came after control() returned (or while it did not wait): a read that finds
    // nothing costs a syscall (350 ns), each sleep a port ended.
    if (!port_acked) consume_rx_interrupt();
  }
  group.set_sleeping(index_, false);
  for (auto& [k, s] : sessions_) s->set_daemon_sleeping(false);
}

void Worker::iterate(uint64_t now, uint64_t* idle_since) {
  if (realtime_.enabled()) {
    rescue_.loop_started(now);
    if (rescue_.take_rescued()) realtime_.rescued(now);
  }
  const rocev2::EngineCounters& ec = core_->engine().counters();
  const DeviceCoreCounters& cc = core_->counters();
  const bool owed_at_start = peer_ != nullptr && peer_->wake_owed();
  ack_hold_.loop_start(owed_at_start, non_ack_frames());
  uint64_t work = 0;
  for (auto& [k, s] : sessions_) work += s->poll(now);
  const uint64_t before = ec.rx_frames + ec.tx_frames + cc.neighbor_frames_in + cc.handed_out;
  core_->run_once(now);
  work += ec.rx_frames + ec.tx_frames + cc.neighbor_frames_in + cc.handed_out - before;
  if (!core_->engine().events().empty()) route_events();
  push_port_events();
  if (index_ == 0) context_.check_link(now);
  if (cm_ != nullptr && (cm_->has_completions() || now >= cm_->next_deadline_ns())) work += cm_->poll(now);
  if ((++counters_.loops & 63) == 0) control(0);
  if (adaptive_affinity_ && now - window_start_ns_ >= kAffinityWindowNs) adapt_affinity(now);
  apply(realtime_.on_loop(now));
  if (yield_.enabled() && peer_ != nullptr) peer_->publish_running(sched_getcpu(), now - away_ns_);
  if (work != 0 || core_->engine().has_tx_work()) {
    *idle_since = now;
    sleep_us_ = kFirstSleepUs;
    if (peer_ != nullptr) peer_->flush_wake_if_late(now);
    // Frames to send and none went: the link's ring is full. A peer awake on this CPU that
    // holds our frames must run to empty it, and spinning would wait for the scheduler's tick
    // (64 KiB WRITEs over a 9000-byte MTU: 19-31 against 72 Gbit/s before this yield).
    if (work == 0 && !polling_) {
      uint64_t peer_ran_ns = 0;
      const bool owed = peer_ != nullptr && peer_->wake_owed();
      const bool yielded = yield_to_peer(now, now, /*stuck=*/true, owed, &peer_ran_ns);
      // At SCHED_RR a yield hands the CPU only to a task at the same policy and priority: a
      // peer at the normal policy on this CPU never runs while we spin (till RealtimeBudget
      // sends us normal). Measured: ib_write_bw 64 KiB from a droced at rr to one at other on
      // the same CPU failed with retry-exceeded (status 12) before this block. A peer on
      // another CPU empties the ring meanwhile: spin on (blocking there cost 11 % at 64 KiB).
      if (realtime_.realtime() && (owed || (yielded && peer_ran_ns == 0))) block_stuck();
    }
  } else if (!polling_) {
    // A peer on this CPU we owe a wake-up: spinning would only keep it from running, so sleep
    // at once (a sleep that says nothing about the spin's length). At the normal policy a peer
    // awake on this CPU with frames of ours gets it by a yield. At SCHED_RR no idle yield (a
    // yield there hands the CPU over a few frames at a time: 64 KiB 3.6 against 4.8 GB/s
    // without), and a peer awake on this CPU runs only once we block: sleep at once for it
    // too (spinning first halved the spin to 1 us, which then missed the client's next post:
    // ~5 000 cross-CPU wake-ups per 3 M messages at 1 QP, docs/droced.md).
    bool for_peer = peer_ != nullptr && peer_->wake_owed();
    if (realtime_.realtime()) {
      for_peer = for_peer || (yield_.enabled() && peer_ != nullptr && peer_->peer_awake_on(sched_getcpu()));
    } else if (yield_to_peer(now, *idle_since, /*stuck=*/false, for_peer)) {
      return;
    }
    if (for_peer || now - *idle_since > spin_.spin_ns()) sleep(now, for_peer);
  }
}

void Worker::block_stuck() {
  if (peer_ != nullptr) peer_->flush_wake();  // a peer asleep on this CPU holds the frames that would make room
  ++counters_.stuck_blocks;
  uint64_t back_ns = 0;
  (void)block(kStuckBlockUs, &back_ns);
}

int Worker::block(int timeout_us, uint64_t* back_ns) {
  apply(realtime_.before_block());
  const uint64_t from = core::monotonic_ns();
  const int events = control(timeout_us);
  *back_ns = core::monotonic_ns();
  away_ns_ += *back_ns - from;
  // At SCHED_RR, whether the thread left its CPU decides whether the wait was a rest
  // (RealtimeBudget::after_block); a wait whose event is already there does not (SleepJudge).
  // A yield is an involuntary switch to the kernel.
  if (realtime_.enabled())
    apply(realtime_.after_block(*back_ns, sleep_judge_.slept(*back_ns - from, &voluntary_switches)));
  return events;
}

bool Worker::voluntary_switches(uint64_t* n) {
  rusage ru{};
  if (::getrusage(RUSAGE_THREAD, &ru) != 0) return false;
  *n = uint64_t(ru.ru_nvcsw);
  return true;
}

int Worker::set_realtime(bool on) {
  // Back to the normal policy keeps the nice value set at start (--event-nice).
  sched_param p{};
  p.sched_priority = on ? 1 : 0;
  return pthread_setschedparam(pthread_self(), on ? SCHED_RR : SCHED_OTHER, &p);
}

void Worker::apply(RealtimeBudget::Change change) {
  if (change == RealtimeBudget::Change::none) return;
  const bool rr = change == RealtimeBudget::Change::to_realtime;
  if (rr) rescue_.promoted();
  if (int rc = set_realtime(rr); rc != 0) {
    // Only taking SCHED_RR back can be refused (a capability dropped since): stay normal.
    DROCE_LOG(WARNING, app, "worker %u: SCHED_RR refused (%s); it stays a normal task", index_, std::strerror(rc));
    realtime_.disable();
  } else if (!rr) {
    rescue_.demoted(core::monotonic_ns());  // other real-time threads may now keep it off its CPU
  }
}

bool Worker::yield_to_peer(uint64_t now_ns, uint64_t idle_since_ns, bool stuck, bool owed, uint64_t* peer_ran_ns) {
  if (!yield_.enabled() || peer_ == nullptr) return false;
  if (!yield_.should_yield({now_ns, idle_since_ns, stuck, owed, peer_->peer_busy_with_ours(sched_getcpu())}))
    return false;
  // The peer publishes its running time each loop: what of the yield it did not run, a third
  // task on this CPU did (YieldPolicy).
  const uint64_t peer_before = peer_->peer_awake_ns();
  YieldPolicy::Yield y;
  y.start_ns = core::monotonic_ns();
  sched_yield();
  y.back_ns = core::monotonic_ns();
  const uint64_t peer_after = peer_->peer_awake_ns();
  y.peer_ran_ns = peer_after >= peer_before ? peer_after - peer_before : 0;  // gone back: a new peer
  if (peer_ran_ns != nullptr) *peer_ran_ns = y.peer_ran_ns;
  // Given away, as a sleep's is: for the peer's guard, and for adapt_affinity (a worker that
  // yields half its time does not need a CPU of its own, or both would leave the CPU they
  // hand over and stop yielding).
  away_ns_ += y.back_ns - y.start_ns;
  yield_.after_yield(y);
  return true;
}

void Worker::run() {
  tls_current = this;
  tid_.store(pid_t(syscall(SYS_gettid)), std::memory_order_relaxed);
  peer_ = core_->group().port()->peer_scheduling();
  choose_mode();
  // Sleeps end when asked, not up to 50 us later (the default timer slack).
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  if (!polling_ && startup_cpus_known && config().event_affinity == "any") {
    // EAL pinned this thread to its lcore's CPU; let the scheduler place it.
    pthread_setaffinity_np(pthread_self(), sizeof startup_cpus, &startup_cpus);
  }
  adaptive_affinity_ = !polling_ && startup_cpus_known && config().event_affinity == "auto";
  // One event-mode worker blocks when idle and flushes what it defers (iterate, sleep): a
  // droce_shm peer asleep on its CPU is woken when it blocks, not each time it sends.
  if (!polling_ && core_->group().size() == 1) {
    if (peer_ != nullptr) peer_->set_defer_wakes(true);
    // And one that alone reads its droce_shm link may yield its CPU to the peer (YieldPolicy).
    yield_ = YieldPolicy(true);
    // And hold a wake-up for acknowledgements alone while a client of its own needs the CPU
    // (AckHold), never while the CPU would idle: a SCHED_IDLE thread on the lcore's CPU wakes
    // the peer then. Started before this thread takes SCHED_RR (a new thread inherits it).
    if (const int cpu = int(rte_lcore_to_cpu_id(int(lcore_))); peer_ != nullptr) {
      if (int rc = idle_waker_.start(cpu, &Worker::wake_peer_when_idle, this); rc != 0)
        DROCE_LOG(INFO, app, "worker %u: no idle waker on CPU %d (%s): acknowledgements never wait", index_, cpu,
                  std::strerror(-rc));
    }
  }
  std::string cpus = describe_affinity();
  if (!polling_ && setpriority(PRIO_PROCESS, tid(), config().event_nice) != 0)
    DROCE_LOG(INFO, app, "worker %u: nice %d refused (%s); wake-ups may wait for a scheduler slice", index_,
              config().event_nice, std::strerror(errno));
  if (const std::string& policy = config().event_policy; !polling_ && policy != "other") {
    // Above every normal program while it blocks often (DaemonConfig::event_policy,
    // RealtimeBudget); `droce cores` shows the policy.
    if (int rc = set_realtime(true); rc != 0) {
      if (policy == "rr")
        DROCE_LOG(WARNING, app, "worker %u: SCHED_RR refused (%s); it stays a normal task at nice %d", index_,
                  std::strerror(rc), config().event_nice);
      else
        DROCE_LOG(INFO, app, "worker %u: normal policy at nice %d (SCHED_RR needs CAP_SYS_NICE: %s)", index_,
                  config().event_nice, std::strerror(rc));
    } else {
      realtime_ = RealtimeBudget(true, core::monotonic_ns());
      if (int err = rescue_.start(pthread_self()); err != 0)
        DROCE_LOG(INFO, app,
                  "worker %u: no rescue thread (%s): past its budget, at the normal policy, other real-time "
                  "threads can keep it off its CPU",
                  index_, std::strerror(-err));
    }
  }
  DROCE_LOG(INFO, app, "worker %u (lcore %u): %s mode (%s)", index_, lcore_, polling_ ? "poll" : "event",
            mode_reason_.c_str());
  link_generation_ = context_.link_generation->load(std::memory_order_acquire);
  if (context_.link_downs != nullptr) link_downs_ = context_.link_downs->load(std::memory_order_relaxed);
  uint64_t idle_since = core::monotonic_ns();
  window_start_ns_ = idle_since;
  std::unique_lock lock(state_);
  cpus_ = std::move(cpus);  // under the state lock: `stats` reads it from other threads
  if (index_ == 0) {
    // QP1 and the connection manager live on worker 0 (frames for QPN 1 are routed here).
    const auto mtu = static_cast<uint8_t>(device_.limits.max_mtu);
    if (int rc = CmHost::create(core_.get(), device_.gids, device_.node_guid, uint32_t(core::monotonic_ns()), mtu,
                                (context_.cm_listen != nullptr ? context_.cm_listen->get() : -1), &cm_);
        rc != 0) {
      DROCE_LOG(WARNING, app, "worker 0: no connection manager (QP1): %s", std::strerror(-rc));
    } else {
      cm_->set_channels_per_process(config().cm_channels_per_process);
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = kCmKey;
      if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, cm_->control_fd(), &ev) != 0)
        DROCE_LOG(WARNING, app, "worker 0: rdma_cm channels not served: %s", std::strerror(errno));
    }
  }
  while (!context_.stopping->load(std::memory_order_relaxed)) {
    take_inbox();
    iterate(core::monotonic_ns(), &idle_since);
    if (state_waiters_.load(std::memory_order_relaxed) != 0) {
      // `stats` on another worker wants to read this one: let it in first.
      lock.unlock();
      while (state_waiters_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
      lock.lock();
    }
  }
  shutdown();
  tls_current = nullptr;
}

void Worker::wake_peer_when_idle(void* worker) {
  // The idle waker's thread, while this worker sleeps: a wake-up still owed is a held one.
  auto* w = static_cast<Worker*>(worker);
  if (w->peer_ == nullptr || !w->peer_->wake_owed()) return;
  w->peer_->flush_wake();
  w->idle_wakes_.fetch_add(1, std::memory_order_relaxed);
}

void Worker::shutdown() {
  rescue_.stop();
  idle_waker_.stop();
  take_inbox();
  if (sessions_.empty()) return;
  DROCE_LOG(INFO, app, "%s: stopping; %zu clients on worker %u told the device is gone", device_.name.c_str(),
            sessions_.size(), index_);
  // Take in what the clients posted last, so it is flushed with the rest.
  const uint64_t now = core::monotonic_ns();
  for (auto& [k, s] : sessions_) (void)s->poll(now);
  for (auto& [k, s] : sessions_) s->mark_fatal();
  sessions_.clear();
  load_.store(0, std::memory_order_relaxed);
}

}  // namespace droce::droced
