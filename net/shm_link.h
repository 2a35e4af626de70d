#pragma once
// ShmLink: droce's own same-host Ethernet link between two processes, a wire
// that wakes its receiver (docs/droced.md, "Waking up").
//
// Why: two droce hosts on one machine (the demo, tests, labs, CI) need a link
// between two droced. DPDK 22.11's net_memif is one, but a DPDK receiver masks
// the peer's interrupts at connect (MEMIF_RING_FLAG_MASK_INT), so a droced
// that sleeps only sees a frame when its sleep timer ends. Both ends of this
// link are droce's, so the receiver's "I sleep" flag is honoured.
//
// Shape. One shared memory region (a sealed memfd, core/shm_region.h) per
// connection holds two rings of fixed slots, one per direction, each slot a
// whole frame (no chains: at most kMaxFrame bytes, a 9000-byte MTU with a VLAN
// tag). Per ring: the producer's head, the consumer's tail, each in its own
// cache line, and the consumer's sleeping flag. Each end owns an eventfd, its
// wake-up descriptor (wake_fd(), stable for the link's life), and hands it to
// the peer at connect.
//
// The wake-up (the siw / TAS / memif pattern, with the flag honoured):
//   receiver: set_sleeping(true) (a store and a full fence), look at the ring
//             once more (rx_burst), then block on wake_fd();
//   sender:   publish the head, full fence, and only if the receiver's flag is
//             set, clear it and write the receiver's eventfd (one write per
//             sleep). A busy receiver costs the sender no syscall. With
//             set_defer_wakes, a receiver asleep on the sender's own CPU is
//             woken when the sender blocks instead (see there).
//
// Connection. The server end listens on a unix SOCK_SEQPACKET socket (a path);
// the client connects, retrying every 20 ms until the server is there. At
// accept the server makes the region and sends it with its eventfd and its
// ICRC setting; the client checks both (a different setting is turned away,
// with a log line) and maps the region, and answers with its own eventfd; then
// the link is up both ways. A peer that goes away (process exit, close) is seen as end of
// file on that socket: the link goes down, frames sent meanwhile are refused
// (tx_burst takes none), and the server accepts the next client into a fresh
// region. One peer at a time: a second client is turned away. This runs on a
// small control thread of the link's own; the data path never blocks on it.
// Regions of earlier connections stay mapped until the link is closed, so a
// data-path call that raced a disconnect never touches unmapped memory (each
// region is about 19 MB; reconnects are rare); a link closed while frames of
// its own are still held elsewhere keeps them until the last is freed.
//
// The peer is another process, maybe another user's, never trusted: every
// index and length read from shared memory is checked (a ring claiming more
// frames than it has slots, or a slot longer than kMaxFrame, is counted and
// skipped), the region is sealed against shrinking, and its size is checked
// before it is mapped.
//
// Zero copy both ways. A received frame stays in its slot, lent to an mbuf as
// an external buffer until freed (rx_burst). A frame to send can be built in
// its slot too (tx_alloc): slots are taken in order and published in order,
// each once its frame has been through tx_burst or freed unsent (then it goes
// empty: a length of 0, which the receiver skips). Frames from elsewhere are
// copied into the next free slot as before, behind any still being built.
// Short frames (kCopyMax: 64 B messages, acknowledgements) are copied both
// ways: a copy of a few cache lines costs less than lending a slot.
//
// Threading: rx_burst from one thread; tx_alloc and tx_burst from one thread
// at a time (the caller's TX queue lock; frames built in place need the
// queue's own thread: PortQueueLink asks only when no other lcore shares it);
// set_sleeping and publish_running from the rx thread; counters from any thread.

#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "core/shm_region.h"
#include "core/unix_socket.h"

namespace droce::net {

struct ShmLinkConfig {
  std::string socket;  ///< the unix socket's path
  bool server = true;
  uint32_t slots = 1024;  ///< per direction, a power of two (16..65536)
  /// Frames carry a real ICRC (devarg icrc=compute). Off (icrc=skip, the
  /// default): the link is memory two processes share, nothing between them
  /// corrupts a frame, so neither end computes or checks the ICRC (its field
  /// is zero), as a NIC that offloads it costs its host nothing. Both ends must
  /// agree: a peer configured the other way is turned away at connect.
  bool icrc = false;
};

/// Written by the data path (rx: the rx thread; tx: under the caller's lock),
/// read by anyone.
struct ShmLinkCounters {
  std::atomic<uint64_t> rx_frames{0};
  std::atomic<uint64_t> rx_bytes{0};
  std::atomic<uint64_t> tx_frames{0};
  std::atomic<uint64_t> tx_bytes{0};
  std::atomic<uint64_t> tx_ring_full{0};   ///< frames not taken: the peer's ring was full (or the link down)
  std::atomic<uint64_t> tx_too_long{0};    ///< frames longer than kMaxFrame, dropped
  std::atomic<uint64_t> rx_no_mbuf{0};     ///< bursts left in the ring for want of mbufs
  std::atomic<uint64_t> rx_bad_slot{0};    ///< slots whose length the peer wrote out of range (dropped)
  std::atomic<uint64_t> rx_bad_ring{0};    ///< times the peer's head claimed more than a ring holds
  std::atomic<uint64_t> wakeups_sent{0};   ///< eventfd writes to a sleeping peer
  std::atomic<uint64_t> wakeups_deferred{0};  ///< wake-ups of a peer asleep on our CPU left for later
  std::atomic<uint64_t> wakeups_late{0};      ///< of those, sent because kMaxWakeDeferNs passed
                                              ///< (the rest: when we blocked)
  std::atomic<uint64_t> tx_in_place{0};    ///< frames built in their slot (tx_alloc), not copied
  std::atomic<uint64_t> tx_void_slots{0};  ///< slots of tx_alloc frames freed unsent, sent empty
  std::atomic<uint64_t> tx_stale{0};       ///< tx_alloc frames of an earlier connection, dropped
  std::atomic<uint64_t> connects{0};
  std::atomic<uint64_t> disconnects{0};
  std::atomic<uint64_t> refused_peers{0};  ///< connections turned away (busy, or a bad handshake)
};

class ShmLink {
 public:
  /// Largest frame a slot holds (Ethernet header, VLAN tag, 9000-byte payload).
  static constexpr uint32_t kMaxFrame = 9000 + 14 + 4;
  /// 2: the handshake carries the ICRC setting (ShmLinkConfig::icrc), a slot of length 0
  /// is empty (a frame built in place and dropped), and the ring header says which CPU a
  /// sleeping consumer is on. 3: each ring header has a fourth line, where the consumer runs
  /// and how long it has been awake (publish_running).
  static constexpr uint32_t kVersion = 3;
  /// Frames up to this long are copied, not lent: tx_alloc leaves them to a pool mbuf that
  /// tx_burst copies into a slot, and rx_burst copies them out. Lending a slot costs an
  /// mbuf attached to it, a loan and its free callback, more than copying a few cache
  /// lines: ib_write_bw 64 B (138-byte frames) 1 QP went 1.45 to 1.53-1.63 M msg/s with
  /// every frame copied (three interleaved pairs on the 2-vCPU VM); at 1024 B, copying
  /// lost (1.05-1.25 against 1.29-1.39).
  static constexpr uint32_t kCopyMax = 256;

  /// Listens (server) or starts connecting (client). -errno: EINVAL (bad
  /// config), or what socket, bind, eventfd return.
  static int open(const ShmLinkConfig& cfg, std::unique_ptr<ShmLink>* out);
  ~ShmLink();
  ShmLink(const ShmLink&) = delete;
  ShmLink& operator=(const ShmLink&) = delete;

  /// Up to n frames, each in an mbuf of `pool` that borrows the frame's ring slot as an
  /// external buffer (no copy). The slot goes back to the peer when the mbuf is freed, in
  /// order: a frame held long holds the slots after it (the peer's ring fills, and it waits).
  /// A frame of at most kCopyMax bytes is copied into the mbuf, and its slot is free at once.
  uint16_t rx_burst(rte_mempool* pool, rte_mbuf** out, uint16_t n);
  /// A frame of `len` bytes to build in place: an mbuf of `pool` whose buffer is the next
  /// free slot of the peer's ring (zero copy). Sent through tx_burst like any frame, in the
  /// order of these calls; freed unsent, its slot goes to the peer empty (a "void" slot it
  /// skips). nullptr with *none_now: the ring has no free slot now (try again later), for
  /// short frames too; nullptr without it: a frame of at most kCopyMax bytes, or the link is
  /// down (build it in a pool mbuf; tx_burst copies it, or refuses it while the link is down).
  /// One thread at a time, the one that calls tx_burst.
  rte_mbuf* tx_alloc(rte_mempool* pool, uint32_t len, bool* none_now);
  /// Takes up to n frames and frees them: tx_alloc's are published where they were built,
  /// others copied into the next free slots. Returns how many it took (fewer when the ring
  /// is full, none when the link is down).
  uint16_t tx_burst(rte_mbuf** pkts, uint16_t n);
  /// True while frames wait in the receive ring.
  bool rx_pending() const;

  /// Longest a deferred wake-up waits (flush_wake_if_late). 20 us; 10, 20 and 40 us gave
  /// 64 B 1 QP rates alike within this VM's noise (measured after 7e111e7: before it, every
  /// deferred wake-up was sent at the end of the loop that deferred it, and no bound mattered).
  /// Much longer and a 1-QP sender that never blocks would run out of its window before the
  /// receiver ACKs.
  static constexpr uint64_t kMaxWakeDeferNs = 20'000;
  /// Defer waking a peer that went to sleep on the CPU the sender runs on (the ring header
  /// says which), until the sender blocks (flush_wake), half a ring is waiting, or the
  /// wake-up is kMaxWakeDeferNs late (flush_wake_if_late). Woken at once, the peer would
  /// preempt the sender and take a few frames per wake-up, two context switches each; the
  /// sender is about to give it the CPU anyway. Only for a sender that blocks when idle and
  /// calls both flushes (droced's single event-mode worker).
  void set_defer_wakes(bool on) { defer_wakes_.store(on, std::memory_order_relaxed); }
  /// Writes a wake-up deferred since; call before blocking. Also safe from another thread
  /// while the sender is blocked (droced's IdleWaker): the peer's flag is exchanged, so one
  /// wake-up is written however the two calls meet.
  void flush_wake();
  void flush_wake_if_late(uint64_t now_ns);
  bool wake_owed() const { return wake_owed_.load(std::memory_order_relaxed); }
  /// When the wake-up owed now became owed (0: none is).
  uint64_t owed_since_ns() const {
    return wake_owed() ? owed_since_ns_.load(std::memory_order_relaxed) : 0;
  }

  /// For two ends that share a CPU and hand it over by yielding (droced's YieldPolicy): true
  /// while the peer is awake, last ran on `cpu` (by its publish_running) and holds frames of
  /// ours (published, slots not yet given back), so that it needs the CPU and no wake-up.
  /// Never for a peer that does not publish (one that polls, or has several workers).
  bool peer_busy_with_ours(int cpu) const;
  /// True while the peer is awake and last ran on `cpu`, whatever it holds: it waits for that
  /// CPU while this end runs there (both at SCHED_RR: it never preempts us). Same publishing.
  bool peer_awake_on(int cpu) const;
  /// An end that yields writes, each loop, the CPU it runs on and its awake time (a monotonic
  /// clock less the time it spent yielding or blocked; time it was preempted counts as
  /// awake). The peer's awake time as it last wrote it (0: none, or the link is down): from
  /// the two readings around a yield, the yielder tells how much of it the peer had.
  void publish_running(int cpu, uint64_t awake_ns);
  uint64_t peer_awake_ns() const;

  /// The descriptor the peer writes when this end sleeps (an eventfd).
  int wake_fd() const { return wake_.get(); }
  /// See the header: true before sleeping (then look at the ring once more),
  /// false after.
  void set_sleeping(bool on);
  /// Reads the eventfd's count (what woke us).
  void ack_wake();
  /// When and from which CPU the peer last woke this end (it stamps before its eventfd write).
  core::WakeStamp wake_stamp() const;

  bool connected() const { return conn_.load(std::memory_order_acquire) != nullptr; }
  /// Frames pass (true) or are refused both ways (false): Port::stop/start.
  void set_enabled(bool on) { enabled_.store(on, std::memory_order_release); }
  const ShmLinkCounters& counters() const { return counters_; }
  /// Frames waiting in the peer's receive ring (sent, not yet taken) and in ours; 0 when down.
  uint32_t tx_ring_used() const;
  uint32_t rx_ring_used() const;
  /// Receive slots read and not yet given back (lent to mbufs, or freed since the last
  /// give-back), and transmit slots taken and not yet published (built in place, or waiting
  /// behind one that is): the peer's ring is full when either reaches the ring's size.
  /// Read from another thread than the data path's: a moment's view, for `droce ports`.
  uint32_t rx_ring_lent() const;
  uint32_t tx_ring_unpublished() const;
  void reset_counters();
  const ShmLinkConfig& config() const { return cfg_; }

 private:
  struct Conn;
  /// peer_awake_on for the connection `c` (null: no peer).
  static bool awake_on(const Conn* c, int cpu);
  struct RxLoan;
  struct TxLoan;
  /// What a lent frame's free callback touches (net/shm_link.cc): it may run after the link
  /// is gone, so it lives apart, counted, and a link closed with frames out hands it its
  /// regions; the last frame freed then frees all.
  struct LoanHome;
  /// Drops one reference to `home` (a lent frame's, or the link's own), freeing it at the last.
  static void release(LoanHome* home);
  explicit ShmLink(const ShmLinkConfig& cfg);
  /// The free callback of a lent slot's mbuf (any thread).
  static void return_slot(void* addr, void* opaque);
  /// Moves the receive tail over the slots whose frames were freed (the rx thread).
  void give_back(Conn* c);
  /// The free callback of a tx_alloc frame's mbuf: a slot still reserved becomes void.
  static void tx_slot_freed(void* addr, void* opaque);
  /// The loan behind a tx_alloc frame of this link, or nullptr for any other mbuf.
  TxLoan* tx_loan_of(const rte_mbuf* m) const;
  /// Moves the head over the slots whose frames are ready (or void), in order.
  void publish_tx(Conn* c);
  void wake_peer(Conn* c, bool late = false);
  void flush_wake(bool late);
  void control_loop();
  void serve_accept();
  void try_connect();
  void finish_server_handshake();
  void drop_connection(const char* why);
  void publish(std::unique_ptr<Conn> c);
  void kick_self();
  /// The handshake's flags for this end's configuration.
  uint32_t hello_flags() const;
  /// A client turned away by the server logs why once, not every retry.
  void refused(const char* fmt, ...) __attribute__((format(printf, 2, 3)));

  ShmLinkConfig cfg_;
  core::Fd wake_;    ///< ours: the peer writes it
  core::Fd stop_;    ///< an eventfd that ends the control thread
  core::Fd listen_;  ///< server only
  core::Fd sock_;    ///< the current peer's connection (control thread only)
  std::unique_ptr<Conn> pending_;  ///< server: a region sent, the client's answer awaited
  std::string last_refusal_;       ///< client: why the server's offer was last turned away
  std::atomic<Conn*> conn_{nullptr};
  std::atomic<bool> enabled_{true};
  std::atomic<bool> defer_wakes_{false};
  std::atomic<bool> wake_owed_{false};
  std::atomic<uint64_t> owed_since_ns_{0};

  std::mutex conns_mutex_;
  std::vector<std::unique_ptr<Conn>> conns_;  ///< every connection's region, mapped until close
  std::thread control_;
  ShmLinkCounters counters_;
  /// Frames whose slots are lent to mbufs (received ones, and tx_alloc's), and what their free
  /// callbacks need (see LoanHome).
  LoanHome* home_;
};

}  // namespace droce::net
