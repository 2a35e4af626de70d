#pragma once
// Port: droced's view of one Ethernet link, whatever device is under it.
//
// The device is a Link (net/link.h), one implementation per kind:
//   - a DPDK ethdev: a PCI NIC, or a vdev such as net_af_xdp / net_af_packet /
//     net_tap on a kernel netdev, net_memif between processes, net_ring in one
//     process (EthdevLink, net/ethdev_link.h, which has the drivers' facts);
//   - droce_shm, droce's own same-host link between two processes, whose
//     receiver can sleep and still be woken by a frame (DroceShmLink,
//     net/droce_shm_link.h).
// The Port owns the link, keeps the counters every kind shares (frames
// tx_burst handed back), and forwards everything else; it never asks which
// kind it holds. What only one kind can do is an optional capability:
// peer_scheduling() (net/peer_scheduling.h) is nullptr for an ethdev.
//
// Opening: open_device takes a device string and gives it to the kind that
// claims it ("droce_shm0,role=server,socket=/run/x.sock"; anything else is
// an ethdev's, "net_af_xdp0,iface=veth0", probed by DPDK); open_port_id takes
// an ethdev EAL already knows; open_ring_pair makes two net_ring ports wired
// back to back, for tests in one process. Each kind's header says what it
// does with PortConfig.
//
// Data path: rx_burst / tx_burst / tx_alloc are inline wrappers over one
// virtual call per burst to the link (bench/port_bench.cc measures it), none
// per frame. Each queue belongs to one lcore at a time. tx_burst returns how
// many frames the device took; the caller still owns the rest (back-pressure:
// retry later or free them), and the untaken frames are counted per queue
// (tx_not_taken).
//
// Link: link() says whether frames can pass. take_link_change() reports a
// change of link() (or a raised LSC event) since its last call; it may cost
// a device query (an ethdev without LSC): call it from a timer (every
// 10-100 ms), not every loop iteration.
//
// Closing: close() (and the destructor) drops the frames waiting in the RX
// queues, stops and releases the device, and frees a pool it created, unless
// mbufs of that pool are still held somewhere (then the pool is leaked with
// an error log rather than freed under its users).
//
// Errors: control calls return 0 or -errno with a DROCE_LOG line; no
// exceptions. A failed open leaves *out untouched and nothing behind.
//
// Threading: open, configure-time calls, stats, stop/start and close from one
// control thread; rx_burst/tx_burst on a queue from that queue's lcore only;
// link() from any thread while the port is open; take_link_change() from one
// thread.

#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "net/addr.h"
#include "net/ethdev_link.h"
#include "net/link.h"
#include "net/peer_scheduling.h"

namespace droce::net {

/// Per-queue counters kept by the Port itself (the device's are in stats()).
/// One cache line per queue; written only by the queue's lcore.
struct alignas(64) PortQueueCounters {
  std::atomic<uint64_t> tx_not_taken{0};  // frames tx_burst handed back
  std::atomic<uint64_t> tx_short_bursts{0};  // bursts not taken whole
};

struct PortQueueStats {
  uint64_t rx_packets = 0;
  uint64_t rx_bytes = 0;
  uint64_t tx_packets = 0;
  uint64_t tx_bytes = 0;
  uint64_t rx_errors = 0;  // q_errors (RX drops per queue, where reported)
  uint64_t tx_not_taken = 0;
  uint64_t tx_short_bursts = 0;
};

class Port {
 public:
  /// An ethdev EAL already knows (EthdevLink::open_port_id).
  static int open_port_id(uint16_t port_id, const PortConfig& cfg, std::unique_ptr<Port>* out);
  /// A device string, opened by the kind of link that claims it: droce_shm
  /// (DroceShmLink::open), else an ethdev plugged in as planned by
  /// plan_device (EthdevLink::open_device).
  static int open_device(std::string_view devargs, const PortConfig& cfg,
                         std::unique_ptr<Port>* out);
  /// What open_device does to an ethdev's device string (EthdevLink::plan_device).
  static DevicePlan plan_device(std::string_view devargs, const PortConfig& cfg);
  /// Two net_ring ports named net_ring_<name>_a / _b (EthdevLink::open_ring_pair).
  static int open_ring_pair(std::string_view name, const PortConfig& cfg, std::unique_ptr<Port>* a,
                            std::unique_ptr<Port>* b, unsigned ring_size = 1024);

  ~Port();
  Port(const Port&) = delete;
  Port& operator=(const Port&) = delete;

  // ---- data path (the queue's lcore) ----
  uint16_t rx_burst(uint16_t queue, rte_mbuf** out, uint16_t n) { return link_->rx_burst(queue, out, n); }
  /// A frame of `len` bytes to build where the port sends it from (droce_shm: a slot of the
  /// peer's ring, zero copy, for a frame long enough that a copy would cost more), then to
  /// pass to tx_burst on `queue` in the order of these calls; nullptr on ports that copy and
  /// for short frames (build in a pool mbuf), or with *none_now when such a port has no room
  /// now. One thread per queue, the one that sends on it.
  rte_mbuf* tx_alloc(uint16_t queue, uint32_t len, bool* none_now) { return link_->tx_alloc(queue, len, none_now); }
  uint16_t tx_burst(uint16_t queue, rte_mbuf** pkts, uint16_t n) {
    const uint16_t sent = link_->tx_burst(queue, pkts, n);
    if (sent != n) [[unlikely]] {
      PortQueueCounters& c = counters_[queue];
      c.tx_not_taken.store(c.tx_not_taken.load(std::memory_order_relaxed) + (n - sent),
                           std::memory_order_relaxed);
      c.tx_short_bursts.store(c.tx_short_bursts.load(std::memory_order_relaxed) + 1,
                              std::memory_order_relaxed);
    }
    return sent;
  }

  // ---- optional capabilities ----
  /// Scheduling hints between two ends on one host (droce_shm), or nullptr
  /// (every ethdev). Ask once and keep the pointer: it lives as the Port does.
  PeerScheduling* peer_scheduling() const { return link_->peer_scheduling(); }

  // ---- link ----
  LinkState link() const { return link_->link(); }
  /// True once per change of link() since the last call (see the header).
  bool take_link_change() { return link_->take_link_change(); }

  // ---- identity ----
  /// The ethdev's port id; RTE_MAX_ETHPORTS for droce_shm.
  uint16_t port_id() const { return info().port_id; }
  const std::string& driver_name() const { return info().driver_name; }
  /// The rte_device name ("net_memif0", "0000:01:00.0"), or droce_shm's device name.
  const std::string& device_name() const { return info().device_name; }
  MacAddr mac() const { return info().mac; }
  /// The device's MTU (rte_eth_dev_get_mtu; droce_shm: the one asked for).
  uint16_t mtu() const { return link_->mtu(); }
  /// Result of applying PortConfig::mtu (or the last set_mtu): 0 or -errno.
  int mtu_result() const { return info().mtu_result; }
  /// A kernel netdev under the port (af_packet, af_xdp, tap), and its name.
  bool kernel_netdev() const { return info().kernel_netdev; }
  /// The kernel's stack gets a copy of what this port receives (LinkInfo::kernel_sees_rx).
  bool kernel_sees_rx() const { return info().kernel_sees_rx; }
  const std::string& ifname() const { return info().ifname; }
  /// The kernel netdev's own MTU (SIOCGIFMTU in the port's namespace), or
  /// -errno (-ENODEV without a netdev). For af_packet this, not mtu(), is what
  /// the wire carries: DPDK 22.11 caps its ethdev MTU at 1500 (max frame
  /// 1518) while jumbo frames pass when the netdev's MTU and the devargs'
  /// framesz allow them.
  int netdev_mtu() const { return link_->netdev_mtu(); }
  /// The IP MTU frames can have both ways through this port, VLAN tag
  /// allowed for: the netdev's MTU for a kernel-netdev PMD, the MTU asked
  /// for on net_memif / net_ring / droce_shm (no MTU op, they carry what is
  /// sent; the ethdev keeps saying 1500), else mtu();
  /// capped by what the PMD carries (af_packet: its framesz devarg less the
  /// ring header, default 2048; af_xdp: its max_mtu, one page per frame) and,
  /// without RX scatter, by what one mbuf of the pool holds. This, not
  /// mtu(), decides the RoCE path MTU.
  uint16_t wire_mtu() const { return link_->wire_mtu(); }
  bool hot_plugged() const { return info().hot_plugged; }

  // ---- configuration as applied ----
  uint16_t rx_queues() const { return info().rx_queues; }
  uint16_t tx_queues() const { return info().tx_queues; }
  uint16_t rx_ring_size() const { return info().rx_ring_size; }
  uint16_t tx_ring_size() const { return info().tx_ring_size; }
  rte_mempool* pool() const { return info().pool; }
  bool owns_pool() const { return info().owns_pool; }
  const PortCapabilities& capabilities() const { return info().caps; }
  uint64_t enabled_rx_offloads() const { return info().rx_offloads; }
  uint64_t enabled_tx_offloads() const { return info().tx_offloads; }
  bool rss_enabled() const { return info().rss_enabled; }
  bool lsc_enabled() const { return info().lsc_enabled; }
  bool rx_interrupts_enabled() const { return info().rx_intr_enabled; }

  // ---- RX interrupts (PortConfig::rx_interrupts) ----
  // The pattern of a poller that sleeps: rx_interrupt_arm(q, true), one more
  // rx_burst (a frame that came before arming raises nothing), then wait for
  // rx_interrupt_fd(q) to turn readable (epoll), rx_interrupt_ack(q), and
  // rx_interrupt_arm(q, false) before polling again. Owning lcore only. What
  // the descriptor is, per kind: net/ethdev_link.h, net/droce_shm_link.h. A
  // kind or driver that gives none: rx_interrupts_enabled() false,
  // rx_interrupt_fd() -ENOTSUP, and the port stays polled.
  /// The queue's interrupt descriptor, or -ENOTSUP (not enabled, or the
  /// device gave none at start).
  int rx_interrupt_fd(uint16_t queue) const { return link_->rx_interrupt_fd(queue); }
  int rx_interrupt_arm(uint16_t queue, bool on) { return link_->rx_interrupt_arm(queue, on); }
  /// Consumes what made the fd readable (an eventfd count).
  void rx_interrupt_ack(uint16_t queue) { link_->rx_interrupt_ack(queue); }
  /// True when the queue's descriptor is an eventfd written once per wake-up
  /// that a waiter may watch edge-triggered (EPOLLET) and never read: every
  /// write is a new edge, whatever the count (droce_shm). An ack then costs a
  /// read per sleep for nothing. False for descriptors that stay readable
  /// while frames wait (tap, af_packet, af_xdp) and for VFIO's eventfds.
  bool rx_interrupt_edge(uint16_t queue) const { return link_->rx_interrupt_edge(queue); }
  bool promiscuous() const { return link_->promiscuous(); }
  MulticastMode multicast_mode() const { return info().multicast_mode; }

  // ---- control ----
  /// Sets the MTU (rte_eth_dev_set_mtu on an ethdev); the result is also kept in mtu_result().
  int set_mtu(uint16_t mtu) { return link_->set_mtu(mtu); }
  int set_promiscuous(bool on) { return link_->set_promiscuous(on); }
  /// Link::set_rx_all: every frame, or only what droce's transport and control frames need.
  int set_rx_all(bool all) { return link_->set_rx_all(all); }
  /// Stop / start the device (queues keep their setup; the link goes down
  /// and comes back; frames queued in the device may be dropped).
  int stop() { return link_->stop(); }
  int start() { return link_->start(); }
  bool started() const { return link_->started(); }
  /// Stops, closes, detaches, frees (see the header). Idempotent; returns the
  /// first error met, having done every step it could.
  int close() { return link_->close(); }

  // ---- counters ----
  int stats(rte_eth_stats* out) const { return link_->stats(out); }
  /// Per queue: the device's q_* counters (queues < RTE_ETHDEV_QUEUE_STAT_CNTRS
  /// and where the driver fills them) plus the Port's own.
  int queue_stats(uint16_t queue, PortQueueStats* out) const;
  /// One extended statistic by its name (e.g. "rx_good_packets").
  int xstat(const char* name, uint64_t* value) const { return link_->xstat(name, value); }
  /// All extended statistics, name and value.
  int xstats(std::vector<std::pair<std::string, uint64_t>>* out) const { return link_->xstats(out); }
  int reset_stats();

  /// Everything above in a few lines, for logs and the CLI.
  std::string describe() const;

 private:
  explicit Port(std::unique_ptr<Link> link);
  /// Wraps a link just opened (rc 0) into *out, logging what it is.
  static int adopt(int rc, std::unique_ptr<Link> link, std::unique_ptr<Port>* out);
  const LinkInfo& info() const { return link_->info(); }

  std::unique_ptr<Link> link_;
  std::unique_ptr<PortQueueCounters[]> counters_;
};

}  // namespace droce::net
