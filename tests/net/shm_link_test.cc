// droce_shm, droce's same-host link (net/shm_link.h), through net::Port as
// droced uses it: both ends in this process, each with its own control thread.
// What is checked: frames both ways byte for byte (jumbo and chained ones
// too), back-pressure when the peer's ring is full, the wake-up (a sleeping
// end's descriptor turns readable for a frame, and a busy end's is never
// written; one asleep on the sender's CPU woken when the sender blocks),
// frames built in place in the peer's ring (order, a dropped one, a
// full ring, a stale one), the link following the peer (gone, back), one peer
// at a time, ends that disagree on the ICRC or the link version kept apart,
// frames freed after their link closed, and a hostile peer that writes
// impossible indices and lengths into the region.

#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <rte_mbuf.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "core/unix_socket.h"
#include "net/eal.h"
#include "net/port.h"
#include "net/shm_link.h"

namespace droce::net {
namespace {

using namespace std::chrono_literals;

std::string socket_path() {
  static std::atomic<int> n{0};
  return "/tmp/droce-shm-link-" + std::to_string(getpid()) + "-" + std::to_string(n++) + ".sock";
}

bool wait_for(const std::function<bool()>& done, std::chrono::milliseconds limit = 5000ms) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(1ms);
  }
  return done();
}

struct Pair {
  std::unique_ptr<Port> a, b;
  std::string sock;
};

void open_pair(Pair* p, uint16_t mtu = 1500, const std::string& extra = "") {
  p->sock = socket_path();
  PortConfig cfg;
  cfg.mtu = mtu;
  cfg.rx_interrupts = true;
  ASSERT_EQ(Port::open_device("droce_shm0,role=server,socket=" + p->sock + extra, cfg, &p->a), 0);
  ASSERT_EQ(Port::open_device("droce_shm1,role=client,socket=" + p->sock + extra, cfg, &p->b), 0);
  ASSERT_TRUE(wait_for([&] { return p->a->link().up && p->b->link().up; })) << "the link never came up";
}

// A frame long enough to be lent, not copied (ShmLink::kCopyMax): it holds its slot while held.
constexpr uint32_t kLent = ShmLink::kCopyMax + 44;

// A frame of `len` bytes whose payload encodes `seq`, from `pool`.
rte_mbuf* frame(rte_mempool* pool, uint32_t len, uint32_t seq) {
  rte_mbuf* m = rte_pktmbuf_alloc(pool);
  if (m == nullptr) return nullptr;
  auto* d = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, uint16_t(len)));
  if (d == nullptr) {
    rte_pktmbuf_free(m);
    return nullptr;
  }
  for (uint32_t i = 0; i < len; ++i) d[i] = uint8_t(seq * 31 + i);
  return m;
}

bool frame_is(const rte_mbuf* m, uint32_t len, uint32_t seq) {
  if (m->pkt_len != len || m->nb_segs != 1) return false;
  const auto* d = rte_pktmbuf_mtod(m, const uint8_t*);
  for (uint32_t i = 0; i < len; ++i)
    if (d[i] != uint8_t(seq * 31 + i)) return false;
  return true;
}

std::vector<rte_mbuf*> receive(Port& p, size_t want) {
  std::vector<rte_mbuf*> got;
  wait_for([&] {
    rte_mbuf* burst[32];
    const uint16_t n = p.rx_burst(0, burst, 32);
    got.insert(got.end(), burst, burst + n);
    return got.size() >= want;
  });
  return got;
}

// Sends `m` (a frame of len bytes encoding seq) and checks that `to` receives exactly it.
void expect_passes(Port& from, Port& to, rte_mbuf* m, uint32_t len, uint32_t seq) {
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(from.tx_burst(0, &m, 1), 1);
  std::vector<rte_mbuf*> got = receive(to, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(frame_is(got[0], len, seq));
  rte_pktmbuf_free(got[0]);
}

uint64_t xstat_of(const Port& p, const char* name) {
  uint64_t v = ~0ull;
  EXPECT_EQ(p.xstat(name, &v), 0) << name;
  return v;
}

bool readable(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, ms) == 1;
}

TEST(PortShm, IdentityAndCapabilities) {
  Pair p;
  open_pair(&p, 9000);
  EXPECT_EQ(p.a->driver_name(), "droce_shm");
  EXPECT_EQ(p.a->device_name(), "droce_shm0");
  EXPECT_NE(p.a->mac(), p.b->mac()) << "the two ends of one link need different MACs";
  EXPECT_EQ(p.a->mac()[0] & 0x03, 0x02) << "locally administered unicast";
  EXPECT_EQ(p.a->wire_mtu(), 9000);
  EXPECT_EQ(p.a->rx_queues(), 1);
  EXPECT_TRUE(p.a->rx_interrupts_enabled());
  EXPECT_GE(p.a->rx_interrupt_fd(0), 0);
  EXPECT_EQ(p.a->set_mtu(9001), -EINVAL);
  EXPECT_EQ(p.a->set_mtu(4200), 0);
  EXPECT_EQ(p.a->wire_mtu(), 4200);
  std::unique_ptr<Port> bad;
  PortConfig cfg;
  EXPECT_EQ(Port::open_device("droce_shm9,role=server", cfg, &bad), -EINVAL) << "no socket";
  EXPECT_EQ(Port::open_device("droce_shm9,role=peer,socket=/tmp/x", cfg, &bad), -EINVAL);
  cfg.mtu = 9100;
  EXPECT_EQ(Port::open_device("droce_shm9,role=server,socket=" + socket_path(), cfg, &bad), -EINVAL);
}

TEST(PortShm, FramesBothWaysWholeAndInOrder) {
  Pair p;
  open_pair(&p, 9000);
  const uint32_t sizes[] = {60, 1514, 9018, 64, 4096};
  for (int dir = 0; dir < 2; ++dir) {
    Port& tx = dir == 0 ? *p.a : *p.b;
    Port& rx = dir == 0 ? *p.b : *p.a;
    constexpr uint32_t kFrames = 3000;  // several times round the ring
    uint32_t sent = 0;
    uint32_t checked = 0;
    while (checked < kFrames) {
      if (sent < kFrames) {
        rte_mbuf* m = frame(tx.pool(), sizes[sent % 5], sent);
        ASSERT_NE(m, nullptr);
        if (tx.tx_burst(0, &m, 1) == 1) ++sent;
        else rte_pktmbuf_free(m);
      }
      rte_mbuf* burst[32];
      const uint16_t n = rx.rx_burst(0, burst, 32);
      for (uint16_t i = 0; i < n; ++i, ++checked) {
        EXPECT_TRUE(frame_is(burst[i], sizes[checked % 5], checked)) << "frame " << checked;
        rte_pktmbuf_free(burst[i]);
      }
    }
    rte_eth_stats st{};
    ASSERT_EQ(rx.stats(&st), 0);
    EXPECT_EQ(st.ipackets, kFrames);
    ASSERT_EQ(tx.stats(&st), 0);
    EXPECT_EQ(st.opackets, kFrames);
  }
}

TEST(PortShm, ChainedFrameArrivesAsOne) {
  Pair p;
  open_pair(&p);
  rte_mbuf* head = frame(p.a->pool(), 100, 0);
  rte_mbuf* tail = rte_pktmbuf_alloc(p.a->pool());
  ASSERT_NE(head, nullptr);
  ASSERT_NE(tail, nullptr);
  std::memset(rte_pktmbuf_append(tail, 50), 0xab, 50);
  ASSERT_EQ(rte_pktmbuf_chain(head, tail), 0);
  ASSERT_EQ(p.a->tx_burst(0, &head, 1), 1);
  auto got = receive(*p.b, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0]->pkt_len, 150u);
  EXPECT_EQ(rte_pktmbuf_mtod_offset(got[0], const uint8_t*, 120)[0], 0xab);
  rte_pktmbuf_free(got[0]);
}

TEST(PortShm, FullRingTakesNoMoreAndTooLongIsDropped) {
  Pair p;
  open_pair(&p, 1500, ",slots=16");
  uint32_t taken = 0;
  for (uint32_t i = 0; i < 20; ++i) {
    rte_mbuf* m = frame(p.a->pool(), kLent, i);
    if (p.a->tx_burst(0, &m, 1) == 1) ++taken;
    else rte_pktmbuf_free(m);
  }
  EXPECT_EQ(taken, 16u) << "a 16-slot ring takes 16 frames and hands back the rest";
  uint64_t full = 0;
  ASSERT_EQ(p.a->xstat("tx_ring_full", &full), 0);
  EXPECT_EQ(full, 4u);
  uint64_t used = 0;
  ASSERT_EQ(p.a->xstat("tx_ring_used", &used), 0);
  EXPECT_EQ(used, 16u);
  ASSERT_EQ(p.b->xstat("rx_ring_used", &used), 0);
  EXPECT_EQ(used, 16u);
  auto got = receive(*p.b, 16);
  EXPECT_EQ(got.size(), 16u);
  // Zero copy: the received frames live in the slots, which stay taken while they are held.
  ASSERT_EQ(p.a->xstat("tx_ring_used", &used), 0);
  EXPECT_EQ(used, 16u);
  ASSERT_EQ(p.b->xstat("rx_ring_used", &used), 0);
  EXPECT_EQ(used, 0u) << "nothing left to read";
  EXPECT_EQ(xstat_of(*p.b, "rx_ring_lent"), 16u) << "read and held: lent, not given back";
  // Freed out of order: the first slot is still held, so none goes back yet.
  for (size_t i = 1; i < got.size(); ++i) {
    EXPECT_TRUE(frame_is(got[i], kLent, uint32_t(i)));
    rte_pktmbuf_free(got[i]);
  }
  rte_mbuf* none[1];
  EXPECT_EQ(p.b->rx_burst(0, none, 1), 0);
  ASSERT_EQ(p.a->xstat("tx_ring_used", &used), 0);
  EXPECT_EQ(used, 16u);
  EXPECT_EQ(xstat_of(*p.b, "rx_ring_lent"), 16u) << "freed behind a held one: still lent";
  EXPECT_TRUE(frame_is(got[0], kLent, 0));
  rte_pktmbuf_free(got[0]);
  // The first one freed: at the receiver's next look, all sixteen go back.
  EXPECT_EQ(p.b->rx_burst(0, none, 1), 0);
  ASSERT_EQ(p.a->xstat("tx_ring_used", &used), 0);
  EXPECT_EQ(used, 0u);
  EXPECT_EQ(xstat_of(*p.b, "rx_ring_lent"), 0u);
  // Room again; a frame longer than a slot is taken (and counted), never delivered.
  rte_mbuf* big = rte_pktmbuf_alloc(p.a->pool());
  ASSERT_NE(big, nullptr);
  std::memset(rte_pktmbuf_append(big, 1500), 1, 1500);
  while (big->pkt_len <= ShmLink::kMaxFrame) {
    rte_mbuf* seg = rte_pktmbuf_alloc(p.a->pool());
    ASSERT_NE(seg, nullptr);
    std::memset(rte_pktmbuf_append(seg, 1500), 2, 1500);
    ASSERT_EQ(rte_pktmbuf_chain(big, seg), 0);
  }
  ASSERT_GT(big->pkt_len, ShmLink::kMaxFrame);
  EXPECT_EQ(p.a->tx_burst(0, &big, 1), 1);
  uint64_t too_long = 0;
  ASSERT_EQ(p.a->xstat("tx_too_long", &too_long), 0);
  EXPECT_EQ(too_long, 1u);
  rte_mbuf* burst[4];
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(p.b->rx_burst(0, burst, 4), 0);
}

// The wake-up: the sender writes the receiver's descriptor only while the
// receiver says it sleeps, once per sleep.
TEST(PortShm, SleepingReceiverIsWokenOnceBusyOneNever) {
  Pair p;
  open_pair(&p);
  const int fd = p.b->rx_interrupt_fd(0);
  ASSERT_GE(fd, 0);
  // The connect's own kick (publish() may still be on its way when link().up turns true).
  ASSERT_TRUE(wait_for([&] { return readable(fd, 0); }));
  p.b->rx_interrupt_ack(0);
  uint64_t wakes = 0;
  // Busy (not armed): frames pass, the descriptor stays quiet.
  for (uint32_t i = 0; i < 10; ++i) {
    rte_mbuf* m = frame(p.a->pool(), 64, i);
    ASSERT_EQ(p.a->tx_burst(0, &m, 1), 1);
  }
  EXPECT_FALSE(readable(fd, 50)) << "a busy receiver was woken";
  ASSERT_EQ(p.a->xstat("wakeups_sent", &wakes), 0);
  EXPECT_EQ(wakes, 0u);
  auto got = receive(*p.b, 10);
  EXPECT_EQ(got.size(), 10u);
  for (auto* m : got) rte_pktmbuf_free(m);
  // Asleep: armed, the last look finds nothing, then one frame wakes it.
  ASSERT_EQ(p.b->rx_interrupt_arm(0, true), 0);
  rte_mbuf* burst[32];
  EXPECT_EQ(p.b->rx_burst(0, burst, 32), 0);
  EXPECT_FALSE(readable(fd, 50)) << "readable with nothing sent";
  EXPECT_EQ(p.b->peer_scheduling()->wake_stamp().ns, 0u) << "stamped with no wake-up sent";
  const uint64_t before = core::monotonic_ns();
  for (uint32_t i = 0; i < 3; ++i) {
    rte_mbuf* m = frame(p.a->pool(), 64, 100 + i);
    ASSERT_EQ(p.a->tx_burst(0, &m, 1), 1);
  }
  const int sender_cpu = sched_getcpu();
  const uint64_t after = core::monotonic_ns();
  EXPECT_TRUE(readable(fd, 5000)) << "a frame did not wake the sleeping receiver";
  // The waker's stamp (SpinPolicy times the wake-up from it): when, and from which CPU.
  const core::WakeStamp w = p.b->peer_scheduling()->wake_stamp();
  EXPECT_GE(w.ns, before);
  EXPECT_LE(w.ns, after);
  EXPECT_GE(w.cpu, 0);
  if (sched_getcpu() == sender_cpu) {
    EXPECT_EQ(w.cpu, sender_cpu);  // not moved meanwhile: the CPU it sent from
  }
  EXPECT_EQ(p.a->peer_scheduling()->wake_stamp().ns, 0u) << "the sender's end was stamped";
  ASSERT_EQ(p.a->xstat("wakeups_sent", &wakes), 0);
  EXPECT_EQ(wakes, 1u) << "three frames in one sleep: one wake-up";
  p.b->rx_interrupt_ack(0);
  EXPECT_FALSE(readable(fd, 0)) << "the acknowledgement left the descriptor readable";
  EXPECT_EQ(p.b->rx_interrupt_arm(0, false), 0);
  got = receive(*p.b, 3);
  ASSERT_EQ(got.size(), 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(frame_is(got[i], 64, 100 + i));
    rte_pktmbuf_free(got[i]);
  }
}

// droced watches droce_shm's descriptor edge-triggered and never reads it (a read per sleep
// saved): each sleep's wake-up must be an event of its own though the count was never read,
// and nothing must be reported while no frame was sent.
TEST(PortShm, TheWakeUpIsAnEdgePerSleepWithoutReads) {
  Pair p;
  open_pair(&p);
  EXPECT_TRUE(p.b->rx_interrupt_edge(0));
  EXPECT_FALSE(p.b->rx_interrupt_edge(1)) << "a queue the port does not have";
  const int fd = p.b->rx_interrupt_fd(0);
  ASSERT_GE(fd, 0);
  const core::Fd ep(::epoll_create1(EPOLL_CLOEXEC));
  ASSERT_TRUE(ep.valid());
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLET;
  ASSERT_EQ(::epoll_ctl(ep.get(), EPOLL_CTL_ADD, fd, &ev), 0);
  auto events = [&](int ms) {
    epoll_event out[4];
    return ::epoll_wait(ep.get(), out, 4, ms);
  };
  // The connect's kick may have come already (then it is reported once, at the add).
  (void)events(50);
  EXPECT_EQ(events(0), 0) << "an edge reported twice";
  for (uint32_t sleep = 0; sleep < 3; ++sleep) {
    ASSERT_EQ(p.b->rx_interrupt_arm(0, true), 0);
    rte_mbuf* burst[32];
    ASSERT_EQ(p.b->rx_burst(0, burst, 32), 0);
    EXPECT_EQ(events(20), 0) << "sleep " << sleep << ": an event with nothing sent";
    for (uint32_t i = 0; i < 2; ++i) {
      rte_mbuf* m = frame(p.a->pool(), 64, sleep * 10 + i);
      ASSERT_EQ(p.a->tx_burst(0, &m, 1), 1);
    }
    EXPECT_EQ(events(5000), 1) << "sleep " << sleep << ": the frames did not wake the receiver";
    EXPECT_EQ(events(0), 0) << "sleep " << sleep << ": one wake-up reported twice";
    ASSERT_EQ(p.b->rx_interrupt_arm(0, false), 0);
    auto got = receive(*p.b, 2);
    ASSERT_EQ(got.size(), 2u);
    for (rte_mbuf* m : got) rte_pktmbuf_free(m);
  }
  EXPECT_TRUE(readable(fd, 0)) << "never read, the count stays (an edge each write regardless)";
}

// Deferred wake-ups (droced's single event-mode worker): a receiver that went to sleep on the
// sender's own CPU is woken when the sender flushes (it is about to block), when half a ring
// waits, or when the wake-up is late; one asleep on another CPU at once.
TEST(PortShm, AReceiverAsleepOnTheSendersCpuIsWokenWhenTheSenderBlocks) {
  cpu_set_t before;
  ASSERT_EQ(sched_getaffinity(0, sizeof before, &before), 0);
  const int cpu = sched_getcpu();
  cpu_set_t here;
  CPU_ZERO(&here);
  CPU_SET(cpu, &here);
  ASSERT_EQ(sched_setaffinity(0, sizeof here, &here), 0);  // both ends' data path on one CPU
  Pair p;
  open_pair(&p, 1500, ",slots=16");
  p.a->peer_scheduling()->set_defer_wakes(true);
  const int fd = p.b->rx_interrupt_fd(0);
  ASSERT_GE(fd, 0);
  // The connect's own kick (publish() may still be on its way when link().up turns true).
  ASSERT_TRUE(wait_for([&] { return readable(fd, 0); }));
  p.b->rx_interrupt_ack(0);
  auto go_to_sleep = [&] {
    ASSERT_EQ(p.b->rx_interrupt_arm(0, true), 0);
    rte_mbuf* burst[32];
    ASSERT_EQ(p.b->rx_burst(0, burst, 32), 0);
  };
  auto send = [&](uint32_t n, uint32_t seq) {
    for (uint32_t i = 0; i < n; ++i) {
      rte_mbuf* m = frame(p.a->pool(), 64, seq + i);
      ASSERT_EQ(p.a->tx_burst(0, &m, 1), 1);
    }
  };
  auto wake_and_drain = [&](size_t n) {
    p.b->rx_interrupt_ack(0);
    ASSERT_EQ(p.b->rx_interrupt_arm(0, false), 0);
    auto got = receive(*p.b, n);
    EXPECT_EQ(got.size(), n);
    for (rte_mbuf* m : got) rte_pktmbuf_free(m);
  };
  // The sender flushes (it would block): woken then, not before.
  go_to_sleep();
  send(3, 0);
  EXPECT_FALSE(readable(fd, 50)) << "woken before the sender gave up the CPU";
  EXPECT_TRUE(p.a->peer_scheduling()->wake_owed());
  EXPECT_EQ(xstat_of(*p.a, "wakeups_deferred"), 1u) << "one deferral per sleep";
  EXPECT_EQ(xstat_of(*p.a, "wakeups_sent"), 0u);
  p.a->peer_scheduling()->flush_wake();
  EXPECT_TRUE(readable(fd, 5000));
  EXPECT_FALSE(p.a->peer_scheduling()->wake_owed());
  EXPECT_EQ(xstat_of(*p.a, "wakeups_sent"), 1u);
  EXPECT_EQ(xstat_of(*p.a, "wakeups_late"), 0u) << "sent when the sender blocked, not late";
  wake_and_drain(3);
  // Half a ring (8 of 16 slots) waiting: woken at once.
  go_to_sleep();
  send(7, 10);
  EXPECT_FALSE(readable(fd, 50));
  send(1, 17);
  EXPECT_TRUE(readable(fd, 5000)) << "half a ring waited for a sender that never blocks";
  wake_and_drain(8);
  // Late: a sender that stays busy wakes it after kMaxWakeDeferNs.
  const uint64_t loop_start = core::monotonic_ns();  // droced's loop reads its clock first
  go_to_sleep();
  send(1, 20);
  p.a->peer_scheduling()->flush_wake_if_late(core::monotonic_ns());  // just deferred: not late
  p.a->peer_scheduling()->flush_wake_if_late(loop_start);  // a clock read before the deferral: not late either
  EXPECT_FALSE(readable(fd, 50));
  EXPECT_TRUE(p.a->peer_scheduling()->wake_owed());
  p.a->peer_scheduling()->flush_wake_if_late(core::monotonic_ns() + ShmLink::kMaxWakeDeferNs);
  EXPECT_TRUE(readable(fd, 5000));
  EXPECT_EQ(xstat_of(*p.a, "wakeups_late"), 1u);
  wake_and_drain(1);
  // Asleep on another CPU: woken at once, as without deferral.
  int other = -1;
  for (int c = 0; c < CPU_SETSIZE && other < 0; ++c)
    if (c != cpu && CPU_ISSET(c, &before)) other = c;
  if (other >= 0) {
    std::thread t([&] {
      cpu_set_t there;
      CPU_ZERO(&there);
      CPU_SET(other, &there);
      ASSERT_EQ(sched_setaffinity(0, sizeof there, &there), 0);
      go_to_sleep();
    });
    t.join();
    send(1, 30);
    EXPECT_TRUE(readable(fd, 5000)) << "a receiver asleep on CPU " << other << " waited for a flush";
    wake_and_drain(1);
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof before, &before), 0);
}

// Two ends on one CPU hand it over by yielding (droced's YieldPolicy): the sender asks whether
// the peer, by what it publishes, runs on its CPU with frames of its own to take, and reads how
// long the peer has been awake. At SCHED_RR the sender blocks instead for a peer awake on its
// CPU, whatever that peer holds (peer_awake_on).
TEST(PortShm, APeerAwakeOnOurCpuWithOurFramesIsBusyWithOurs) {
  const int cpu = 3;  // any number: the ends compare what they publish
  Pair p;
  open_pair(&p, 1500, ",slots=16");
  for (uint32_t i = 0; i < 2; ++i) {
    rte_mbuf* m = frame(p.a->pool(), kLent, i);
    ASSERT_EQ(p.a->tx_burst(0, &m, 1), 1);
  }
  EXPECT_FALSE(p.a->peer_scheduling()->peer_busy_with_ours(cpu)) << "a peer that publishes nothing (polls, or several workers)";
  EXPECT_FALSE(p.a->peer_scheduling()->peer_busy_with_ours(0)) << "nothing published reads as no CPU, not CPU 0";
  EXPECT_FALSE(p.a->peer_scheduling()->peer_awake_on(cpu));
  EXPECT_FALSE(p.a->peer_scheduling()->peer_awake_on(0));
  EXPECT_EQ(p.a->peer_scheduling()->peer_awake_ns(), 0u);
  p.b->peer_scheduling()->publish_running(cpu, 1234);
  EXPECT_TRUE(p.a->peer_scheduling()->peer_busy_with_ours(cpu));
  EXPECT_EQ(p.a->peer_scheduling()->peer_awake_ns(), 1234u);
  EXPECT_FALSE(p.a->peer_scheduling()->peer_busy_with_ours(cpu + 1)) << "a peer on another CPU needs no yield";
  EXPECT_TRUE(p.a->peer_scheduling()->peer_awake_on(cpu));
  EXPECT_FALSE(p.a->peer_scheduling()->peer_awake_on(cpu + 1));
  p.a->peer_scheduling()->publish_running(cpu, 99);
  EXPECT_EQ(p.b->peer_scheduling()->peer_awake_ns(), 99u);
  EXPECT_FALSE(p.b->peer_scheduling()->peer_busy_with_ours(cpu)) << "the other way holds nothing";
  std::vector<rte_mbuf*> got = receive(*p.b, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(p.a->peer_scheduling()->peer_busy_with_ours(cpu)) << "taken, but their slots are still lent";
  for (rte_mbuf* m : got) rte_pktmbuf_free(m);
  rte_mbuf* burst[32];
  EXPECT_EQ(p.b->rx_burst(0, burst, 32), 0);  // gives the freed slots back
  EXPECT_FALSE(p.a->peer_scheduling()->peer_busy_with_ours(cpu)) << "all taken and given back";
  EXPECT_TRUE(p.a->peer_scheduling()->peer_awake_on(cpu)) << "awake without frames of ours: it still waits for the CPU";
  // Asleep, the peer needs a wake-up (the deferred one), not a yield.
  rte_mbuf* m = frame(p.a->pool(), kLent, 9);
  ASSERT_EQ(p.a->tx_burst(0, &m, 1), 1);
  EXPECT_TRUE(p.a->peer_scheduling()->peer_busy_with_ours(cpu));
  ASSERT_EQ(p.b->rx_interrupt_arm(0, true), 0);
  EXPECT_FALSE(p.a->peer_scheduling()->peer_busy_with_ours(cpu));
  EXPECT_FALSE(p.a->peer_scheduling()->peer_awake_on(cpu)) << "asleep";
  ASSERT_EQ(p.b->rx_interrupt_arm(0, false), 0);
  EXPECT_TRUE(p.a->peer_scheduling()->peer_busy_with_ours(cpu));
  // Moved to another CPU: says so in its next loop.
  p.b->peer_scheduling()->publish_running(cpu + 1, 2000);
  EXPECT_FALSE(p.a->peer_scheduling()->peer_busy_with_ours(cpu));
  EXPECT_FALSE(p.a->peer_scheduling()->peer_awake_on(cpu));
  EXPECT_TRUE(p.a->peer_scheduling()->peer_awake_on(cpu + 1));
  got = receive(*p.b, 1);
  ASSERT_EQ(got.size(), 1u);
  rte_pktmbuf_free(got[0]);
}

// Zero copy: a received frame holds its slot until it is freed. A frame another thread frees
// while the receiver sleeps wakes it, so that it gives the slot back: otherwise a sender whose
// ring is full of freed-but-held slots would wait for a wake-up nobody sends.
TEST(PortShm, AFrameFreedWhileTheReceiverSleepsWakesItToGiveTheSlotBack) {
  Pair p;
  open_pair(&p, 1500, ",slots=16");
  const int fd = p.b->rx_interrupt_fd(0);
  ASSERT_GE(fd, 0);
  // The connect's own kick (publish() may still be on its way when link().up turns true).
  ASSERT_TRUE(wait_for([&] { return readable(fd, 0); }));
  p.b->rx_interrupt_ack(0);
  for (uint32_t i = 0; i < 16; ++i) {
    rte_mbuf* m = frame(p.a->pool(), kLent, i);
    ASSERT_EQ(p.a->tx_burst(0, &m, 1), 1);
  }
  auto got = receive(*p.b, 16);
  ASSERT_EQ(got.size(), 16u);
  p.b->rx_interrupt_ack(0);
  // Step: the receiver arms (sleeps) while holding all sixteen; then it frees them (as another
  // core that was handed the frames would).
  ASSERT_EQ(p.b->rx_interrupt_arm(0, true), 0);
  rte_mbuf* more = frame(p.a->pool(), 64, 99);
  EXPECT_EQ(p.a->tx_burst(0, &more, 1), 0) << "the ring is full of held slots";
  rte_pktmbuf_free(more);
  EXPECT_FALSE(readable(fd, 50));
  // Its own thread frees half: no wake-up (it gives them back at its next look anyway).
  for (size_t i = 0; i < 8; ++i) rte_pktmbuf_free(got[i]);
  EXPECT_FALSE(readable(fd, 50)) << "the receiving thread's own frees woke it";
  // Another thread (a core the frames were handed to) frees the rest.
  std::thread other([&] {
    for (size_t i = 8; i < got.size(); ++i) rte_pktmbuf_free(got[i]);
  });
  other.join();
  // Expect: the receiver is woken; its next look gives the slots back and the sender has room.
  EXPECT_TRUE(readable(fd, 5000)) << "frames freed elsewhere did not wake the sleeping receiver";
  p.b->rx_interrupt_ack(0);
  EXPECT_EQ(p.b->rx_interrupt_arm(0, false), 0);
  rte_mbuf* none[1];
  EXPECT_EQ(p.b->rx_burst(0, none, 1), 0);
  uint64_t used = 1;
  ASSERT_EQ(p.a->xstat("tx_ring_used", &used), 0);
  EXPECT_EQ(used, 0u);
  expect_passes(*p.a, *p.b, frame(p.a->pool(), 64, 100), 64, 100);
}

TEST(PortShm, LinkFollowsThePeerAndOnePeerAtATime) {
  Pair p;
  open_pair(&p);
  // A second client is turned away; the first keeps its link.
  std::unique_ptr<Port> third;
  PortConfig cfg;
  ASSERT_EQ(Port::open_device("droce_shm2,role=client,socket=" + p.sock, cfg, &third), 0);
  uint64_t refused = 0;
  EXPECT_TRUE(wait_for([&] { return p.a->xstat("refused_peers", &refused) == 0 && refused >= 1; }));
  EXPECT_FALSE(third->link().up);
  EXPECT_TRUE(p.a->link().up);
  third.reset();
  // The client goes: the server's link goes down and it refuses frames.
  p.b.reset();
  EXPECT_TRUE(wait_for([&] { return !p.a->link().up; })) << "the server did not see its peer go";
  rte_mbuf* m = frame(p.a->pool(), 64, 0);
  EXPECT_EQ(p.a->tx_burst(0, &m, 1), 0);
  rte_pktmbuf_free(m);
  // A new client: up again, and frames pass.
  ASSERT_EQ(Port::open_device("droce_shm1,role=client,socket=" + p.sock, cfg, &p.b), 0);
  ASSERT_TRUE(wait_for([&] { return p.a->link().up && p.b->link().up; }));
  expect_passes(*p.a, *p.b, frame(p.a->pool(), 64, 7), 64, 7);
}

// A frame built in place (tx_alloc: the mbuf's buffer is the next slot of the peer's ring).
rte_mbuf* frame_in_place(Port& p, uint32_t len, uint32_t seq) {
  bool none_now = true;
  rte_mbuf* m = p.tx_alloc(0, ShmLink::kMaxFrame, &none_now);
  EXPECT_FALSE(none_now);
  if (m == nullptr) return nullptr;
  EXPECT_GE(rte_pktmbuf_tailroom(m), ShmLink::kMaxFrame);
  auto* d = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, uint16_t(len)));
  for (uint32_t i = 0; i < len; ++i) d[i] = uint8_t(seq * 31 + i);
  return m;
}

// Frames built in their slot arrive whole and in the order their slots were taken, mixed with
// copied ones; a copied frame sent while an earlier in-place one is still being built waits for
// it; one freed unsent goes as an empty slot the peer skips without counting it bad.
TEST(PortShm, FramesBuiltInPlaceKeepTheirOrderAndADroppedOneLeavesNoTrace) {
  Pair p;
  open_pair(&p, 9000);
  rte_mbuf* first = frame_in_place(*p.a, 8000, 1);
  rte_mbuf* dropped = frame_in_place(*p.a, 100, 99);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(dropped, nullptr);
  rte_mbuf* copied = frame(p.a->pool(), 64, 2);  // takes the slot after `dropped`
  ASSERT_EQ(p.a->tx_burst(0, &copied, 1), 1);
  rte_mbuf* burst[32];
  EXPECT_EQ(p.b->rx_burst(0, burst, 32), 0) << "the copied frame must wait for the two before it";
  EXPECT_EQ(xstat_of(*p.a, "tx_ring_unpublished"), 3u) << "two slots being built, one waiting behind them";
  EXPECT_EQ(xstat_of(*p.a, "tx_ring_used"), 0u);
  rte_pktmbuf_free(dropped);
  ASSERT_EQ(p.a->tx_burst(0, &first, 1), 1);
  rte_mbuf* last = frame_in_place(*p.a, 1500, 3);
  ASSERT_EQ(p.a->tx_burst(0, &last, 1), 1);
  std::vector<rte_mbuf*> got = receive(*p.b, 3);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_TRUE(frame_is(got[0], 8000, 1));
  EXPECT_TRUE(frame_is(got[1], 64, 2));
  EXPECT_TRUE(frame_is(got[2], 1500, 3));
  for (rte_mbuf* m : got) rte_pktmbuf_free(m);
  EXPECT_EQ(p.b->rx_burst(0, burst, 32), 0);
  EXPECT_EQ(xstat_of(*p.a, "tx_in_place"), 2u);
  EXPECT_EQ(xstat_of(*p.a, "tx_void_slots"), 1u);
  EXPECT_EQ(xstat_of(*p.a, "tx_ring_unpublished"), 0u);
  EXPECT_EQ(xstat_of(*p.a, "tx_good_packets"), 3u);
  EXPECT_EQ(xstat_of(*p.b, "rx_good_packets"), 3u);
  EXPECT_EQ(xstat_of(*p.b, "rx_bad_slot"), 0u);
}

// Short frames (at most ShmLink::kCopyMax bytes) are copied both ways: tx_alloc leaves them to a
// pool mbuf (tx_burst copies it), and the receiver copies them out, so their slots go back at once
// while the mbufs are held; longer ones are built and read in place, their slots lent. Order holds
// across the two kinds.
TEST(PortShm, ShortFramesAreCopiedAndLongOnesLent) {
  Pair p;
  open_pair(&p, 1500, ",slots=16");
  bool none_now = true;
  EXPECT_EQ(p.a->tx_alloc(0, ShmLink::kCopyMax, &none_now), nullptr);
  EXPECT_FALSE(none_now) << "a short frame is built in a pool mbuf, not told to wait";
  rte_mbuf* long_one = frame_in_place(*p.a, kLent, 1);
  ASSERT_NE(long_one, nullptr);
  EXPECT_TRUE(RTE_MBUF_HAS_EXTBUF(long_one));
  rte_mbuf* short_one = frame(p.a->pool(), ShmLink::kCopyMax, 2);
  rte_mbuf* pair[2] = {long_one, short_one};
  ASSERT_EQ(p.a->tx_burst(0, pair, 2), 2);
  EXPECT_EQ(xstat_of(*p.a, "tx_in_place"), 1u);
  std::vector<rte_mbuf*> got = receive(*p.b, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(frame_is(got[0], kLent, 1));
  EXPECT_TRUE(frame_is(got[1], ShmLink::kCopyMax, 2));
  EXPECT_TRUE(RTE_MBUF_HAS_EXTBUF(got[0])) << "a long frame is read in its slot";
  EXPECT_FALSE(RTE_MBUF_HAS_EXTBUF(got[1])) << "a short frame is copied out";
  // Held, the long one keeps its slot (and the short one's behind it); freed, both go back.
  EXPECT_EQ(xstat_of(*p.b, "rx_ring_lent"), 2u);
  rte_pktmbuf_free(got[0]);
  rte_mbuf* none[1];
  EXPECT_EQ(p.b->rx_burst(0, none, 1), 0);
  EXPECT_EQ(xstat_of(*p.b, "rx_ring_lent"), 0u) << "the copied frame's slot went back while its mbuf is held";
  EXPECT_TRUE(frame_is(got[1], ShmLink::kCopyMax, 2)) << "the copy is the mbuf's own, not the slot";
  rte_pktmbuf_free(got[1]);
  EXPECT_EQ(xstat_of(*p.a, "tx_ring_used"), 0u);
}

// No free slot: tx_alloc says "none now" (the caller waits); the link down: it gives nothing and
// says build elsewhere. A frame built in the region of a connection since replaced is dropped
// and counted, never written into the new one.
TEST(PortShm, BuildingInPlaceFollowsTheRingAndTheLink) {
  Pair p;
  open_pair(&p, 1500, ",slots=16");
  std::vector<rte_mbuf*> held;
  for (int i = 0; i < 16; ++i) held.push_back(frame_in_place(*p.a, 64, uint32_t(i)));
  bool none_now = false;
  EXPECT_EQ(p.a->tx_alloc(0, ShmLink::kMaxFrame, &none_now), nullptr);
  EXPECT_TRUE(none_now) << "a full ring means: try again later";
  none_now = false;
  EXPECT_EQ(p.a->tx_alloc(0, ShmLink::kCopyMax, &none_now), nullptr);
  EXPECT_TRUE(none_now) << "a short frame too: built now, it would only wait in a pool mbuf";
  ASSERT_EQ(p.a->tx_burst(0, held.data(), 16), 16);
  std::vector<rte_mbuf*> got = receive(*p.b, 16);
  ASSERT_EQ(got.size(), 16u);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(frame_is(got[i], 64, uint32_t(i)));
  for (rte_mbuf* m : got) rte_pktmbuf_free(m);
  rte_mbuf* old = nullptr;
  ASSERT_TRUE(wait_for([&] {  // the peer gives the slots back when it next looks
    rte_mbuf* b[1];
    (void)p.b->rx_burst(0, b, 1);
    old = p.a->tx_alloc(0, ShmLink::kMaxFrame, &none_now);
    return old != nullptr;
  }));
  // The client goes and comes back: `old` belongs to the first connection's region.
  p.b.reset();
  ASSERT_TRUE(wait_for([&] { return !p.a->link().up; }));
  EXPECT_EQ(p.a->tx_alloc(0, ShmLink::kMaxFrame, &none_now), nullptr);
  EXPECT_FALSE(none_now) << "link down: build in a pool mbuf (tx_burst refuses it)";
  PortConfig cfg;
  cfg.rx_interrupts = true;
  ASSERT_EQ(Port::open_device("droce_shm1,role=client,slots=16,socket=" + p.sock, cfg, &p.b), 0);
  ASSERT_TRUE(wait_for([&] { return p.a->link().up && p.b->link().up; }));
  rte_pktmbuf_append(old, 64);
  ASSERT_EQ(p.a->tx_burst(0, &old, 1), 1) << "taken, and dropped";
  EXPECT_EQ(xstat_of(*p.a, "tx_stale"), 1u);
  expect_passes(*p.a, *p.b, frame_in_place(*p.a, 64, 5), 64, 5);
}

// Frames still held when their link closes (their owner frees them later): freeing them then
// touches nothing of the link that is gone (the debug build's AddressSanitizer would say so),
// received ones and ones built in place alike. The pool is the test's, so it outlives the ports.
TEST(PortShm, FramesFreedAfterTheLinkClosedTouchNothingOfIt) {
  rte_mempool* pool = create_mbuf_pool("shm_late_free", 256, 9216);
  ASSERT_NE(pool, nullptr);
  const std::string sock = socket_path();
  PortConfig cfg;
  cfg.mtu = 1500;
  cfg.pool = pool;
  cfg.rx_interrupts = true;
  std::unique_ptr<Port> a, b;
  ASSERT_EQ(Port::open_device("droce_shm0,role=server,socket=" + sock, cfg, &a), 0);
  ASSERT_EQ(Port::open_device("droce_shm1,role=client,socket=" + sock, cfg, &b), 0);
  ASSERT_TRUE(wait_for([&] { return a->link().up && b->link().up; }));
  rte_mbuf* m = frame(pool, kLent, 1);  // lent to the mbuf that receives it
  ASSERT_EQ(a->tx_burst(0, &m, 1), 1);
  std::vector<rte_mbuf*> received = receive(*b, 1);
  ASSERT_EQ(received.size(), 1u);
  EXPECT_TRUE(RTE_MBUF_HAS_EXTBUF(received[0]));
  bool none_now = true;
  rte_mbuf* unsent = a->tx_alloc(0, ShmLink::kMaxFrame, &none_now);
  ASSERT_NE(unsent, nullptr);
  // b asleep, as droced is between loops: a late free would write its wake-up descriptor.
  ASSERT_EQ(b->rx_interrupt_arm(0, true), 0);
  b.reset();
  a.reset();
  std::thread([&] { rte_pktmbuf_free(received[0]); }).join();  // another thread, as a handed frame
  rte_pktmbuf_free(unsent);
  EXPECT_EQ(rte_mempool_in_use_count(pool), 0u);
}

// Both ends compute the ICRC or neither does: a client configured the other way from the server is
// turned away (counted, the link stays down), and one configured like it then connects.
TEST(PortShm, EndsThatDisagreeOnTheIcrcDoNotConnect) {
  const std::string sock = socket_path();
  PortConfig cfg;
  std::unique_ptr<Port> server, client;
  ASSERT_EQ(Port::open_device("droce_shm0,role=server,socket=" + sock, cfg, &server), 0);
  ASSERT_EQ(Port::open_device("droce_shm1,role=client,icrc=compute,socket=" + sock, cfg, &client), 0);
  uint64_t refused = 0;
  EXPECT_TRUE(wait_for([&] { return client->xstat("refused_peers", &refused) == 0 && refused >= 2; }))
      << "the client should keep trying, and keep being turned away";
  EXPECT_FALSE(client->link().up);
  EXPECT_FALSE(server->link().up);
  client.reset();
  ASSERT_EQ(Port::open_device("droce_shm1,role=client,icrc=skip,socket=" + sock, cfg, &client), 0);
  EXPECT_TRUE(wait_for([&] { return server->link().up && client->link().up; }));
}

// A server of link version 1 (a 24-byte hello, no ICRC setting): the client turns it away and
// counts it, rather than taking its hello for garbage, and its link stays down.
TEST(PortShm, AClientTurnsAwayAServerOfAnEarlierVersion) {
  const std::string sock = socket_path();
  core::Fd listener;
  ASSERT_EQ(core::seqpacket_listen(sock, &listener, 4), 0);
  std::atomic<bool> stop{false};
  std::thread server([&] {
    struct {
      uint32_t magic = 0x4b4c5344, version = 1, slots = 1024, slot_bytes = 9088;
      uint64_t region_bytes = 64 + 2 * 192 + uint64_t{2} * 1024 * 9088;  // version 1's layout
    } hello;
    static_assert(sizeof hello == 24);
    const core::Fd any(::eventfd(0, EFD_CLOEXEC));  // stands for its region and its eventfd
    const int fds[2] = {any.get(), any.get()};
    while (!stop.load()) {
      pollfd p{listener.get(), POLLIN, 0};
      if (::poll(&p, 1, 20) != 1) continue;
      core::Fd c;
      if (core::seqpacket_accept(listener.get(), &c) != 0) continue;
      (void)core::send_message(c.get(), {reinterpret_cast<const uint8_t*>(&hello), sizeof hello}, fds);
    }
  });
  PortConfig cfg;
  std::unique_ptr<Port> client;
  ASSERT_EQ(Port::open_device("droce_shm1,role=client,socket=" + sock, cfg, &client), 0);
  EXPECT_TRUE(wait_for([&] { return xstat_of(*client, "refused_peers") >= 2; }))
      << "a version 1 server was not counted as turned away";
  EXPECT_FALSE(client->link().up);
  client.reset();
  stop.store(true);
  server.join();
  ::unlink(sock.c_str());
}

// A peer that is not droced: it maps the server's region and writes an
// impossible head and out-of-range lengths. The server counts and drops,
// never reads past a slot, and keeps working.
TEST(PortShm, HostilePeerIndicesAndLengthsAreCountedAndDropped) {
  const std::string sock = socket_path();
  PortConfig cfg;
  std::unique_ptr<Port> server;
  ASSERT_EQ(Port::open_device("droce_shm0,role=server,socket=" + sock + ",slots=16", cfg, &server), 0);
  core::Fd c;
  ASSERT_TRUE(wait_for([&] { return core::seqpacket_connect(sock, &c) == 0; }));
  std::vector<uint8_t> hello;
  std::vector<core::Fd> fds;
  ASSERT_EQ(core::receive_message(c.get(), &hello, 64, &fds), 32);  // since version 2 (with flags)
  ASSERT_EQ(fds.size(), 2u);
  uint64_t region_bytes = 0;
  std::memcpy(&region_bytes, hello.data() + 16, 8);
  auto* region = static_cast<uint8_t*>(
      ::mmap(nullptr, region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0].get(), 0));
  ASSERT_NE(region, MAP_FAILED);
  core::Fd my_wake(::dup(fds[1].get()));  // any descriptor will do as "our eventfd"
  const int mine[1] = {my_wake.get()};
  ASSERT_EQ(core::send_message(c.get(), hello, mine), 0);
  ASSERT_TRUE(wait_for([&] { return server->link().up; }));
  // Layout (net/shm_link.cc): a 64-byte header, then ring 0 (client to server): head at +0.
  auto* head = reinterpret_cast<std::atomic<uint32_t>*>(region + 64);
  uint8_t* slots0 = region + 64 + 2 * 256;  // two ring headers of four lines
  constexpr size_t kSlot = 9088;
  // An impossible head: counted, skipped, nothing delivered.
  head->store(1000, std::memory_order_release);
  rte_mbuf* burst[32];
  EXPECT_EQ(server->rx_burst(0, burst, 32), 0);
  uint64_t bad_ring = 0, bad_slot = 0;
  ASSERT_EQ(server->xstat("rx_bad_ring", &bad_ring), 0);
  EXPECT_EQ(bad_ring, 1u);
  // Two slots: one claims 1 GB, one is a fine frame (long enough to be lent, not copied).
  const uint32_t huge = 1u << 30, fine = kLent;
  std::memcpy(slots0 + (1000 % 16) * kSlot, &huge, 4);
  std::memcpy(slots0 + (1001 % 16) * kSlot, &fine, 4);
  std::memset(slots0 + (1001 % 16) * kSlot + 64, 0x5a, fine);
  head->store(1002, std::memory_order_release);
  std::vector<rte_mbuf*> got = receive(*server, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0]->pkt_len, fine);
  EXPECT_EQ(rte_pktmbuf_mtod(got[0], const uint8_t*)[10], 0x5a);
  ASSERT_EQ(server->xstat("rx_bad_slot", &bad_slot), 0);
  EXPECT_EQ(bad_slot, 1u);
  // An impossible head while a received frame still holds its slot (zero copy): refused and
  // counted, the held slot not given back; once the frame is freed, the head is skipped to.
  auto* tail = reinterpret_cast<std::atomic<uint32_t>*>(region + 64 + 64);
  head->store(0x90000000u, std::memory_order_release);
  EXPECT_EQ(server->rx_burst(0, burst, 32), 0);
  ASSERT_EQ(server->xstat("rx_bad_ring", &bad_ring), 0);
  EXPECT_EQ(bad_ring, 2u);
  EXPECT_EQ(tail->load(), 1001u) << "the held frame's slot went back";
  rte_pktmbuf_free(got[0]);
  EXPECT_EQ(server->rx_burst(0, burst, 32), 0);
  EXPECT_EQ(tail->load(), 0x90000000u);
  ::munmap(region, region_bytes);
  c.reset();
  EXPECT_TRUE(wait_for([&] { return !server->link().up; }));
}

}  // namespace
}  // namespace droce::net
