#pragma once
// Port: droced's view of one DPDK Ethernet port (a PCI NIC, or a vdev such as
// net_af_xdp / net_af_packet / net_tap on a kernel netdev, net_memif between
// processes, net_ring in one process).
//
// Opening. Three ways, all of which configure, set up every queue, start the
// device and detect what it can offload:
//   - open_port_id: a port EAL already knows (a PCI NIC allowed with -a, a
//     --vdev given to EAL). Close stops and closes it but does not detach the
//     device: droce did not plug it in.
//   - open_device: a device string hot-plugged now with rte_dev_probe, e.g.
//     "net_memif0,role=server,socket=/tmp/x.sock,id=0",
//     "net_af_packet0,iface=veth0", "net_af_xdp0,iface=veth0",
//     "net_tap0,iface=dtap0". The ethdev is found by the name before the first
//     comma. Close detaches it again (rte_eal_hotplug_remove).
//   - droce_shm: droce's own same-host link (net/shm_link.h), not an ethdev:
//     "droce_shm0,role=server,socket=/run/x.sock[,mac=02:..][,slots=1024]"
//     and "droce_shm1,role=client,socket=..." in the other process. Unlike
//     net_memif's, its receiver can sleep and still be woken by a frame,
//     without root or a netdev: rx_interrupt_fd() is its eventfd (PortConfig::
//     rx_interrupts), written by the sender only while this end sleeps. One
//     queue pair, no offloads, MTU up to 9000, link up while the peer is
//     connected, statistics and xstats of its own. Without mac= the MAC is
//     a locally administered one derived from the socket path and the role.
//   - open_ring_pair: two net_ring ports wired back to back (A's TX is B's RX
//     and the other way round), for tests in one process.
// With a shared DPDK build (Debian's), EAL loads every driver in its plugin
// directory (/usr/lib/x86_64-linux-gnu/dpdk/pmds-23.0, compiled into
// librte_eal) at rte_eal_init, so no -d argument is needed for these vdevs;
// a static build must link the drivers instead (-Wl,--whole-archive). The
// plugins are not loaded RTLD_GLOBAL, so a driver's own API cannot be linked
// against by name: open_ring_pair finds rte_eth_from_rings with dlsym (in the
// program if it links -lrte_net_ring, else in the loaded plugin).
//
// Network namespaces: a Port remembers the namespace it was opened in and
// re-enters it around every control call (net/netns.h). Open the port from
// inside the namespace the interface lives in.
//
// Configuration (PortConfig): queue counts are clamped to what the device
// reports; ring sizes to its descriptor limits. The mbuf pool is either given
// (not owned; it must outlive the Port) or created, sized
//   2 x (rx_queues x rx_ring + tx_queues x tx_ring) + lcores x cache
// and freed on close. MTU is applied with rte_eth_dev_set_mtu and the result
// reported, not fatal (mtu_result()). Promiscuous mode is off unless asked.
// Multicast: an explicit MAC list (rte_eth_dev_set_mc_addr_list), falling back
// to allmulticast when the device has no list; see multicast_mode().
//
// Offloads: capabilities() reports what the device can do (IPv4/UDP
// checksum both ways, multi-segment TX, RX scatter, RSS, and whether
// rte_flow_validate accepts ETH / IPV4 / UDP dst 4791 -> QUEUE 0, the rule a
// QPN steering backend would build). PortConfig's enable_* switches turn on
// the ones the device has; enabled_rx_offloads()/enabled_tx_offloads() say
// which were turned on. Multi-segment TX is enabled whenever it is available.
//
// Data path: rx_burst / tx_burst are inline wrappers over rte_eth_rx_burst /
// rte_eth_tx_burst, no virtual call. Each queue belongs to one lcore at a
// time. tx_burst returns how many frames the device took; the caller still
// owns the rest (back-pressure: retry later or free them), and the untaken
// frames are counted per queue (tx_not_taken).
//
// Link: link() reads rte_eth_link_get_nowait. Drivers that do not follow the
// kernel netdev's carrier (af_packet and af_xdp report "up" whenever started)
// are completed with the netdev's IFF_UP and IFF_RUNNING flags, read with an
// ioctl on a socket opened in the port's namespace. A device with
// RTE_ETH_DEV_INTR_LSC is configured for LSC interrupts and gets a callback
// (EAL's interrupt thread) that sets a flag; its link() is then an atomic read
// of what the driver last stored. take_link_change() reports a change of
// link() (or a raised flag) since its last call: with LSC it costs an atomic
// exchange and that read; without, one rte_eth_link_get_nowait (plus an ioctl
// for af_packet / af_xdp): call it from a timer (every 10-100 ms), not every
// loop iteration. Polled, a flap shorter than the polling interval goes
// unseen; a raised LSC event is never lost.
//
// Closing: close() (and the destructor) stops the device, unregisters the
// callback, closes it, detaches a hot-plugged device, and frees a pool it
// created, unless mbufs of that pool are still held somewhere (then the pool
// is leaked with an error log rather than freed under its users). Frames
// waiting in the port's RX queues are dropped first.
//
// Errors: control calls return 0 or -errno with a DROCE_LOG line; no
// exceptions. A failed open leaves *out untouched and nothing behind: a
// hot-plugged device is detached again, a created pool freed; a port given by
// id is left stopped, to be set up again before any use.
//
// Drivers (DPDK 22.11.11 on Debian 12, as tests/net/port_test.cc finds them):
//   - net_ring: multi-seg TX, RX scatter; no MTU op (the MTU is taken at
//     configure, set_mtu is -ENOTSUP); no rte_flow; link up from start to stop.
//   - net_memif: multi-seg TX, receives chains; no MTU op; promiscuous cannot
//     be turned off; link follows the peer's connection. The server side's TX
//     takes nothing until the client has polled RX once (the client hands out
//     the S2C buffers), so poll RX and TX in the same loop. The socket is
//     abstract (per network namespace) unless socket-abstract=no.
//   - net_af_packet: queues = its qpairs devarg (default 1); multi-seg TX;
//     ethdev MTU at most 1500 (max frame 1518): for jumbo frames set the
//     netdev's MTU outside DPDK, give framesz/blocksz of 16384 and mbufs that
//     hold a whole frame (netdev_mtu() then tells the truth). No RX
//     interrupt through ethdev; the Port's wake-up is each queue's own
//     TPACKET_V2 socket (see RX interrupts below).
//   - net_af_xdp: no multi-seg TX; MTU at most 3542 (a frame is one page);
//     close leaks its umem and the mbufs in its fill ring, so the Port leaks
//     the pool (close returns -EBUSY). Without bpffs at /sys/fs/bpf libxdp
//     loads its program without the dispatcher (works, logs a warning). No
//     RX interrupt through ethdev; the Port's wake-up is each queue's XSK
//     socket (see RX interrupts below). Leave its busy_budget devarg at the
//     default (64): with busy polling off, 22.11's rx_burst on an empty ring
//     poll()s the socket for up to 1 s when the fill ring asks for a wake-up,
//     which only zero-copy drivers ever do; a port whose queues are
//     zero-copy with busy polling off (busy_budget=0, or no CAP_NET_ADMIN)
//     is refused with -ENOTSUP. A veth's XSK sockets are in copy mode.
//   - net_tap: IPv4/UDP/TCP checksum offloads, multi-seg TX, scatter, RSS;
//     rte_flow_validate accepts the UDP 4791 rule, but flow support is off
//     when the kernel lacks the multiq qdisc; advertises LSC and tracks the
//     link over netlink but never raises the LSC event (take_link_change()
//     still sees the change).
//   - af_packet and af_xdp have neither a multicast list nor allmulticast
//     (multicast_mode() unfiltered), and net_tap accepts a list without
//     filtering: what reaches the netdev reaches the port (on a veth,
//     everything; on a real NIC the kernel's filter applies, so join the
//     groups on the netdev, e.g. `ip maddr add`, or set it allmulticast).
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
#include "net/shm_link.h"

namespace droce::net {

/// The value of "key=VALUE" in a device string ("net_af_packet0,iface=eth1,qpairs=2"), or ""
/// when the key is absent.
std::string devarg_value(std::string_view devargs, std::string_view key);

struct PortConfig {
  /// Queue counts; clamped to the device's maxima (at least 1 each).
  uint16_t rx_queues = 1;
  uint16_t tx_queues = 1;
  /// Descriptors per queue; adjusted to the device's limits.
  uint16_t rx_ring_size = 1024;
  uint16_t tx_ring_size = 1024;
  /// An mbuf pool to use (not owned). nullptr: the Port creates one.
  rte_mempool* pool = nullptr;
  /// For a created pool: mbufs (0: derived as the header says), per-lcore
  /// cache, and data room per mbuf (grown to hold a whole frame of `mtu` when
  /// the device cannot scatter received frames over several mbufs).
  unsigned pool_size = 0;
  unsigned pool_cache = 256;
  uint16_t mbuf_data_room = RTE_MBUF_DEFAULT_DATAROOM;
  /// MTU to apply (0: leave the device's default).
  uint16_t mtu = 0;
  bool promiscuous = false;
  /// Receive all multicast (allmulticast).
  bool allmulticast = false;
  /// Multicast MACs to receive (e.g. 33:33:00:00:00:01 and the solicited-node
  /// groups 33:33:ff:xx:xx:xx for ND). Ignored when allmulticast is set.
  std::vector<MacAddr> multicast;
  /// Turn on the device's checksum offloads when it has them.
  bool enable_rx_checksum = true;
  bool enable_tx_checksum = true;
  /// Spread received frames over rx_queues with RSS (IP/UDP) when the device
  /// has it and rx_queues > 1.
  bool enable_rss = true;
  /// Use the LSC interrupt when the device has one (else link is polled).
  bool lsc_interrupt = true;
  /// Ask for an RX wake-up descriptor per queue, so a poller may sleep until
  /// a frame arrives: see rx_interrupt_fd() for the drivers that give one. A
  /// device that refuses or gives none is configured without them
  /// (rx_interrupts_enabled() false).
  bool rx_interrupts = false;
};

struct LinkState {
  bool up = false;
  uint32_t speed_mbps = 0;  // 0 when unknown or down
  bool full_duplex = false;
  bool autoneg = false;
  bool operator==(const LinkState&) const = default;
};

/// What the device reports it can do (rte_eth_dev_info), and what probing
/// found.
struct PortCapabilities {
  uint64_t rx_offload_capa = 0;
  uint64_t tx_offload_capa = 0;
  bool rx_ipv4_checksum = false;
  bool rx_udp_checksum = false;
  bool tx_ipv4_checksum = false;
  bool tx_udp_checksum = false;
  bool tx_multi_segs = false;
  bool rx_scatter = false;
  /// RSS: the hash types the device can use (0: none).
  uint64_t rss_hash_types = 0;
  /// rte_flow_validate of ETH / IPV4 / UDP dst 4791 -> QUEUE 0: 0 accepted,
  /// else the -errno it returned (-ENOSYS: the driver has no rte_flow).
  int flow_udp_4791_to_queue = -ENOSYS;
  /// The driver raises LSC interrupts (RTE_ETH_DEV_INTR_LSC).
  bool lsc_interrupt = false;
  uint16_t max_rx_queues = 0;
  uint16_t max_tx_queues = 0;
  uint16_t min_mtu = 0;
  uint16_t max_mtu = 0;
  uint32_t max_rx_pktlen = 0;
  /// The link carries no ICRC: both ends agreed at connect that neither computes nor
  /// checks it (droce_shm with icrc=skip: memory between two processes).
  bool no_icrc = false;
};

enum class MulticastMode {
  none,          // nothing asked
  exact_list,    // the device filters on the configured list
  allmulticast,  // all multicast received (asked, or the list's fallback)
  unfiltered,    // the device has neither control; it delivers what it delivers
};

const char* to_string(MulticastMode m);

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

/// What open_device adds to a vdev's device string, and the mbuf data room it
/// uses, so that frames of PortConfig::mtu travel whole (see plan_device).
struct DevicePlan {
  std::string devargs;
  uint16_t mbuf_data_room = 0;
  /// Most RX/TX queues to set up (0: what the device reports).
  uint16_t max_queues = 0;
};

class Port {
 public:
  static int open_port_id(uint16_t port_id, const PortConfig& cfg, std::unique_ptr<Port>* out);
  /// Plugs in `devargs` as planned by plan_device(devargs, cfg) and opens it.
  static int open_device(std::string_view devargs, const PortConfig& cfg,
                         std::unique_ptr<Port>* out);
  /// The driver facts open_device applies before the probe; devargs the
  /// caller gave are kept as they are:
  ///   - net_memif: buffers (bsize) that hold a whole frame of cfg.mtu, VLAN
  ///     tag included, so that no frame is ever chained over two: DPDK
  ///     22.11's memif TX leaves MEMIF_DESC_FLAG_NEXT on a slot that once
  ///     began a chain, and its RX then joins frames and reads past the
  ///     ring's head, returning frames never sent. wire_mtu() is capped at
  ///     one buffer for the same reason. One queue pair: memif runs with the
  ///     fewer of the two peers' ring counts, and a 22.11 queue past that
  ///     count is left pointing at ring 0 (two queues then share it, unlocked).
  ///   - net_af_packet: without a framesz devarg its ring frames are 2048
  ///     bytes (no jumbo frames at all); framesz=4608 (a 4096 path MTU frame
  ///     with IPv6, VLAN and every header, plus the ring's 66-byte header)
  ///     in blocks of 8 frames (36864 bytes: a whole number of pages and of
  ///     frames, for the PMD addresses frame i at i x framesz). The PMD
  ///     copies a frame into one mbuf and refuses a queue whose mbufs hold
  ///     less than framesz - 32, so the data room grows to that.
  ///   - net_af_xdp: its umem chunks are the pool's objects and must fit in
  ///     one page; 3712 is the largest data room whose object (mempool
  ///     header, mbuf, data room, padding) still does on DPDK 22.11 (3776
  ///     fails "Failed to create umem"). Frames then carry at most its
  ///     max_mtu, 3542: a 2048 path MTU.
  static DevicePlan plan_device(std::string_view devargs, const PortConfig& cfg);
  /// Two net_ring ports named net_ring_<name>_a / _b, one ring per queue and
  /// direction of `ring_size` slots (a power of two). The rings are freed when
  /// both ports are closed; frames still in them are freed then.
  static int open_ring_pair(std::string_view name, const PortConfig& cfg, std::unique_ptr<Port>* a,
                            std::unique_ptr<Port>* b, unsigned ring_size = 1024);

  ~Port();
  Port(const Port&) = delete;
  Port& operator=(const Port&) = delete;

  // ---- data path (the queue's lcore) ----
  uint16_t rx_burst(uint16_t queue, rte_mbuf** out, uint16_t n) {
    if (shm_ != nullptr) return shm_->rx_burst(pool_, out, n);
    return rte_eth_rx_burst(port_id_, queue, out, n);
  }
  /// A frame of `len` bytes to build where the port sends it from (droce_shm: a slot of the
  /// peer's ring, zero copy, for a frame long enough that a copy would cost more), then to
  /// pass to tx_burst on `queue` in the order of these calls; nullptr on ports that copy and
  /// for short frames (build in a pool mbuf), or with *none_now when such a port has no room
  /// now. One thread per queue, the one that sends on it.
  rte_mbuf* tx_alloc(uint16_t /*queue*/, uint32_t len, bool* none_now) {
    *none_now = false;
    return shm_ != nullptr ? shm_->tx_alloc(pool_, len, none_now) : nullptr;
  }
  /// droce_shm: ShmLink::set_defer_wakes and its flushes (no-ops on other ports).
  void set_defer_wakes(bool on) {
    if (shm_ != nullptr) shm_->set_defer_wakes(on);
  }
  void flush_wake() {
    if (shm_ != nullptr) shm_->flush_wake();
  }
  void flush_wake_if_late(uint64_t now_ns) {
    if (shm_ != nullptr) shm_->flush_wake_if_late(now_ns);
  }
  bool wake_owed() const { return shm_ != nullptr && shm_->wake_owed(); }
  uint64_t wake_owed_since_ns() const { return shm_ != nullptr ? shm_->owed_since_ns() : 0; }
  /// droce_shm: ShmLink::peer_busy_with_ours, peer_awake_on, publish_running, peer_awake_ns (false, nothing,
  /// 0 on other ports).
  bool peer_busy_with_ours(int cpu) const { return shm_ != nullptr && shm_->peer_busy_with_ours(cpu); }
  bool peer_awake_on(int cpu) const { return shm_ != nullptr && shm_->peer_awake_on(cpu); }
  void publish_running(int cpu, uint64_t awake_ns) {
    if (shm_ != nullptr) shm_->publish_running(cpu, awake_ns);
  }
  uint64_t peer_awake_ns() const { return shm_ != nullptr ? shm_->peer_awake_ns() : 0; }
  /// droce_shm: when and from where the peer last woke us (ShmLink::wake_stamp); none elsewhere.
  core::WakeStamp wake_stamp() const { return shm_ != nullptr ? shm_->wake_stamp() : core::WakeStamp{}; }
  uint16_t tx_burst(uint16_t queue, rte_mbuf** pkts, uint16_t n) {
    const uint16_t sent = shm_ != nullptr ? shm_->tx_burst(pkts, n) : rte_eth_tx_burst(port_id_, queue, pkts, n);
    if (sent != n) [[unlikely]] {
      PortQueueCounters& c = counters_[queue];
      c.tx_not_taken.store(c.tx_not_taken.load(std::memory_order_relaxed) + (n - sent),
                           std::memory_order_relaxed);
      c.tx_short_bursts.store(c.tx_short_bursts.load(std::memory_order_relaxed) + 1,
                              std::memory_order_relaxed);
    }
    return sent;
  }

  // ---- link ----
  LinkState link() const;
  /// True once per change of link() since the last call (see the header).
  bool take_link_change();

  // ---- identity ----
  uint16_t port_id() const { return port_id_; }
  const std::string& driver_name() const { return driver_name_; }
  /// The rte_device name ("net_memif0", "0000:01:00.0").
  const std::string& device_name() const { return device_name_; }
  MacAddr mac() const { return mac_; }
  /// rte_eth_dev_get_mtu.
  uint16_t mtu() const;
  /// Result of applying PortConfig::mtu (or the last set_mtu): 0 or -errno.
  int mtu_result() const { return mtu_result_; }
  /// A kernel netdev under the port (af_packet, af_xdp, tap), and its name.
  bool kernel_netdev() const { return kernel_netdev_; }
  const std::string& ifname() const { return ifname_; }
  /// The kernel netdev's own MTU (SIOCGIFMTU in the port's namespace), or
  /// -errno (-ENODEV without a netdev). For af_packet this, not mtu(), is what
  /// the wire carries: DPDK 22.11 caps its ethdev MTU at 1500 (max frame
  /// 1518) while jumbo frames pass when the netdev's MTU and the devargs'
  /// framesz allow them.
  int netdev_mtu() const;
  /// The IP MTU frames can have both ways through this port, VLAN tag
  /// allowed for: the netdev's MTU for a kernel-netdev PMD, the MTU asked
  /// for on net_memif / net_ring (no MTU op, they carry what is sent; the
  /// ethdev keeps saying 1500), else mtu();
  /// capped by what the PMD carries (af_packet: its framesz devarg less the
  /// ring header, default 2048; af_xdp: its max_mtu, one page per frame) and,
  /// without RX scatter, by what one mbuf of the pool holds. This, not
  /// mtu(), decides the RoCE path MTU.
  uint16_t wire_mtu() const;
  bool hot_plugged() const { return hot_plugged_; }
  /// droce's same-host link under this port (droce_shm), or nullptr for an ethdev.
  const ShmLink* shm_link() const { return shm_.get(); }

  // ---- configuration as applied ----
  uint16_t rx_queues() const { return rx_queues_; }
  uint16_t tx_queues() const { return tx_queues_; }
  uint16_t rx_ring_size() const { return rx_ring_size_; }
  uint16_t tx_ring_size() const { return tx_ring_size_; }
  rte_mempool* pool() const { return pool_; }
  bool owns_pool() const { return owns_pool_; }
  const PortCapabilities& capabilities() const { return caps_; }
  uint64_t enabled_rx_offloads() const { return rx_offloads_; }
  uint64_t enabled_tx_offloads() const { return tx_offloads_; }
  bool rss_enabled() const { return rss_enabled_; }
  bool lsc_enabled() const { return lsc_enabled_; }
  bool rx_interrupts_enabled() const { return rx_intr_enabled_; }

  // ---- RX interrupts (PortConfig::rx_interrupts) ----
  // The pattern of a poller that sleeps: rx_interrupt_arm(q, true), one more
  // rx_burst (a frame that came before arming raises nothing), then wait for
  // rx_interrupt_fd(q) to turn readable (epoll), rx_interrupt_ack(q), and
  // rx_interrupt_arm(q, false) before polling again. Owning lcore only.
  // Drivers: PCI NICs under VFIO give eventfds (armed through the driver,
  // read to acknowledge); net_tap gives its queues' own descriptors, readable
  // while frames wait (arm and ack do nothing, and nothing reads them);
  // net_memif in DPDK 22.11 accepts the configuration but gives none (its
  // eventfds are internal), so it stays polled. net_af_packet and
  // net_af_xdp give none through ethdev, so the Port finds each queue's own
  // kernel socket (net/kernel_socket_discovery.h), which epoll reports
  // readable while frames wait in the queue's ring (like tap's: arm and ack do
  // nothing, nothing reads it). Anything else (not exactly one per queue, not that kind of socket): a
  // NOTICE log line, rx_interrupts_enabled() false, rx_interrupt_fd()
  // -ENOTSUP, and the port stays polled.
  /// The queue's interrupt descriptor, or -ENOTSUP (not enabled, or the
  /// driver gave none at start).
  int rx_interrupt_fd(uint16_t queue) const;
  int rx_interrupt_arm(uint16_t queue, bool on);
  /// Consumes what made the fd readable (an eventfd count).
  void rx_interrupt_ack(uint16_t queue);
  /// True when the queue's descriptor is an eventfd written once per wake-up
  /// that a waiter may watch edge-triggered (EPOLLET) and never read: every
  /// write is a new edge, whatever the count (droce_shm). An ack then costs a
  /// read per sleep for nothing. False for descriptors that stay readable
  /// while frames wait (tap, af_packet, af_xdp) and for VFIO's eventfds.
  bool rx_interrupt_edge(uint16_t queue) const;
  bool promiscuous() const;
  MulticastMode multicast_mode() const { return multicast_mode_; }

  // ---- control ----
  /// rte_eth_dev_set_mtu; the result is also kept in mtu_result().
  int set_mtu(uint16_t mtu);
  int set_promiscuous(bool on);
  /// Stop / start the device (queues keep their setup; the link goes down
  /// and comes back; frames queued in the device may be dropped).
  int stop();
  int start();
  bool started() const { return started_; }
  /// Stops, closes, detaches, frees (see the header). Idempotent; returns the
  /// first error met, having done every step it could.
  int close();

  // ---- counters ----
  int stats(rte_eth_stats* out) const;
  /// Per queue: the device's q_* counters (queues < RTE_ETHDEV_QUEUE_STAT_CNTRS
  /// and where the driver fills them) plus the Port's own.
  int queue_stats(uint16_t queue, PortQueueStats* out) const;
  /// One extended statistic by its name (e.g. "rx_good_packets").
  int xstat(const char* name, uint64_t* value) const;
  /// All extended statistics, name and value.
  int xstats(std::vector<std::pair<std::string, uint64_t>>* out) const;
  int reset_stats();

  /// Everything above in a few lines, for logs and the CLI.
  std::string describe() const;

 private:
  struct Shared;  // resources shared by a ring pair

  Port() = default;
  static int open_impl(uint16_t port_id, const PortConfig& cfg, bool hot_plugged,
                       std::unique_ptr<Port>* out);
  static int open_shm(std::string_view devargs, const PortConfig& cfg, std::unique_ptr<Port>* out);
  int setup(const PortConfig& cfg);
  int apply_rx_mode(const PortConfig& cfg);
  void probe_flow();
  LinkState kernel_link(const LinkState& pmd) const;
  void drain_rx();
  int close_in_namespace();
  static int lsc_callback(uint16_t port_id, rte_eth_event_type type, void* arg, void* ret);

  uint16_t port_id_ = RTE_MAX_ETHPORTS;
  std::unique_ptr<PortQueueCounters[]> counters_;
  std::string driver_name_;
  std::string device_name_;
  std::string bus_name_;
  MacAddr mac_{};
  int mtu_result_ = 0;
  uint32_t frame_limit_ = 0;  ///< device_frame_limit(): 0 when the ethdev MTU holds
  uint16_t asked_mtu_ = 0;  ///< the MTU last asked for (PortConfig::mtu, set_mtu)
  bool rx_intr_enabled_ = false;
  std::vector<int> rx_intr_fds_;  ///< per RX queue, found once at start
  bool rx_intr_is_eventfd_ = false;  ///< else a queue descriptor: readable while frames wait
  bool kernel_netdev_ = false;
  bool link_follows_netdev_ = false;  // PMD's link ignores the netdev's carrier
  std::string ifname_;
  int ctl_fd_ = -1;    // AF_INET socket in the port's namespace (ioctls)
  int netns_fd_ = -1;  // the namespace the port was opened in
  bool hot_plugged_ = false;
  bool open_ = false;
  bool configured_ = false;
  bool started_ = false;
  uint16_t rx_queues_ = 0;
  uint16_t tx_queues_ = 0;
  uint16_t rx_ring_size_ = 0;
  uint16_t tx_ring_size_ = 0;
  rte_mempool* pool_ = nullptr;
  bool owns_pool_ = false;
  PortCapabilities caps_;
  uint64_t rx_offloads_ = 0;
  uint64_t tx_offloads_ = 0;
  bool rss_enabled_ = false;
  bool lsc_enabled_ = false;
  bool lsc_registered_ = false;
  MulticastMode multicast_mode_ = MulticastMode::none;
  std::atomic<bool> link_changed_{false};
  LinkState last_link_;
  std::shared_ptr<Shared> shared_;
  std::unique_ptr<ShmLink> shm_;  ///< droce_shm: the link in place of an ethdev
};

}  // namespace droce::net
