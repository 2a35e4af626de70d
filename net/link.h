#pragma once
// Link: one kind of device under a net::Port, behind one interface.
//
// A Port (net/port.h) is droced's view of one Ethernet link; the device under
// it is one of several kinds, each an implementation of Link:
//   - EthdevLink (net/ethdev_link.h): a DPDK ethdev, a PCI NIC or a vdev
//     (net_af_xdp, net_af_packet, net_tap, net_memif, net_ring);
//   - DroceShmLink (net/droce_shm_link.h): droce's own same-host link
//     between two processes (droce_shm, net/shm_link.h).
// Shared code (Port, the engine's PortQueueLink, droced) talks to the
// interface only, never asks which kind it holds: what only one kind can do
// is an optional capability it offers (peer_scheduling(), nullptr elsewhere),
// the way DPDK puts memif behind the same burst functions as every NIC.
//
// Data path: rx_burst / tx_burst / tx_alloc are one virtual call per burst
// (bench/port_bench.cc measures it), never one per frame. Each queue belongs
// to one lcore at a time. tx_burst returns how many frames the device took;
// the caller still owns the rest (back-pressure: retry later or free them).
//
// RX wake-ups: rx_interrupt_fd / arm / ack / edge, for a poller that sleeps
// (the pattern is in net/port.h). Each kind says what its descriptor is.
//
// Opening is each kind's own (a static open that fills a
// std::unique_ptr<Link>); once open, info() holds what was applied. Closing:
// close() (and the destructor) drops the frames waiting in the RX queues,
// stops and releases the device, and frees a pool the link created unless
// mbufs of it are still held (then it is leaked with an error log, -EBUSY).
//
// Errors: control calls return 0 or -errno with a DROCE_LOG line; no
// exceptions. A failed open leaves *out untouched and nothing behind.
//
// Threading: open, configure-time calls, stats, stop/start and close from one
// control thread; the data path on a queue from that queue's lcore only;
// link() from any thread while the link is open; take_link_change() from one
// thread.

#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "net/addr.h"

struct ifreq;

namespace droce::net {

class PeerScheduling;

/// The value of "key=VALUE" in a device string ("net_af_packet0,iface=eth1,qpairs=2"), or ""
/// when the key is absent.
std::string devarg_value(std::string_view devargs, std::string_view key);

/// Whether a device string names a device of `driver` (vdev names are the
/// driver's name and anything after it: net_memif0, net_memif_a).
bool names_driver(std::string_view devargs, std::string_view driver);

/// An ioctl on the kernel netdev `ifname` through `fd` (a datagram socket in the netdev's
/// namespace): `ifr` is cleared and named first. 0 or -errno (-ENODEV without fd or name).
int netdev_ioctl(int fd, unsigned long req, const std::string& ifname, ifreq* ifr);
/// A kernel netdev's MTU, read through `fd` (a datagram socket in the netdev's namespace), or
/// -errno.
int netdev_mtu_of(int fd, const std::string& ifname);
/// Whether a kernel netdev is up and running (IFF_UP and IFF_RUNNING: carrier): 1 or 0, or
/// -errno when its flags cannot be read.
int netdev_running(int fd, const std::string& ifname);

struct PortConfig {
  /// Queue counts; clamped to the device's maxima (at least 1 each).
  uint16_t rx_queues = 1;
  uint16_t tx_queues = 1;
  /// Descriptors per queue; adjusted to the device's limits.
  uint16_t rx_ring_size = 1024;
  uint16_t tx_ring_size = 1024;
  /// An mbuf pool to use (not owned). nullptr: the link creates one.
  rte_mempool* pool = nullptr;
  /// For a created pool: mbufs (0: derived by the link, see its header),
  /// per-lcore cache, and data room per mbuf (grown to hold a whole frame of
  /// `mtu` when the device cannot scatter received frames over several mbufs).
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
  /// a frame arrives: see Port::rx_interrupt_fd() for the kinds that give one.
  /// A device that refuses or gives none is configured without them
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

/// What the device reports it can do (rte_eth_dev_info for an ethdev), and
/// what probing found.
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

/// A link's identity and its configuration as applied: filled by the kind's
/// open, read through Port's accessors (which say what each means).
struct LinkInfo {
  uint16_t port_id = RTE_MAX_ETHPORTS;  ///< the ethdev's; RTE_MAX_ETHPORTS for droce's own links
  std::string driver_name;
  std::string device_name;
  MacAddr mac{};
  int mtu_result = 0;
  bool kernel_netdev = false;
  /// The kernel's own stack receives a copy of every frame the link receives (af_packet, tap:
  /// the link taps the netdev rather than taking frames from it), so RoCE to an address the
  /// kernel shares would be answered with ICMP unless something keeps it quiet
  /// (net/kernel_sink.h). False for af_xdp (its program takes the frames) and droce's own links.
  bool kernel_sees_rx = false;
  std::string ifname;
  bool hot_plugged = false;
  uint16_t rx_queues = 0;
  uint16_t tx_queues = 0;
  uint16_t rx_ring_size = 0;
  uint16_t tx_ring_size = 0;
  rte_mempool* pool = nullptr;
  bool owns_pool = false;
  PortCapabilities caps;
  uint64_t rx_offloads = 0;
  uint64_t tx_offloads = 0;
  bool rss_enabled = false;
  bool lsc_enabled = false;
  bool rx_intr_enabled = false;
  MulticastMode multicast_mode = MulticastMode::none;
};

class Link {
 public:
  virtual ~Link() = default;
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  // ---- data path (the queue's lcore; one call per burst) ----
  virtual uint16_t rx_burst(uint16_t queue, rte_mbuf** out, uint16_t n) = 0;
  virtual uint16_t tx_burst(uint16_t queue, rte_mbuf** pkts, uint16_t n) = 0;
  /// A frame to build where the link sends it from (Port::tx_alloc); nullptr
  /// on kinds that copy, which is the default.
  virtual rte_mbuf* tx_alloc(uint16_t /*queue*/, uint32_t /*len*/, bool* none_now) {
    *none_now = false;
    return nullptr;
  }

  // ---- RX wake-up (Port::rx_interrupt_*) ----
  virtual int rx_interrupt_fd(uint16_t queue) const = 0;
  virtual int rx_interrupt_arm(uint16_t queue, bool on) = 0;
  virtual void rx_interrupt_ack(uint16_t queue) = 0;
  virtual bool rx_interrupt_edge(uint16_t queue) const = 0;

  // ---- link state ----
  virtual LinkState link() const = 0;
  /// True once per change of link() since the last call, or when the device
  /// raised a link event meanwhile (take_link_event).
  bool take_link_change();

  // ---- MTU and receive mode ----
  virtual uint16_t mtu() const = 0;
  virtual int set_mtu(uint16_t mtu) = 0;
  virtual uint16_t wire_mtu() const = 0;
  /// The kernel netdev's own MTU, or -errno (-ENODEV: no netdev under the link).
  virtual int netdev_mtu() const { return -ENODEV; }
  virtual bool promiscuous() const = 0;
  virtual int set_promiscuous(bool on) = 0;

  /// Whether every frame the device sees must reach rx_burst. Off (the default) lets a link
  /// on a netdev shared with the kernel leave out what nothing in droce wants (the kernel's own
  /// TCP, which a tap would otherwise copy whole); on while raw packet QPs have flow rules,
  /// which may want anything. 0 or -errno; kinds that deliver everything anyway ignore it.
  virtual int set_rx_all(bool /*all*/) { return 0; }

  // ---- control ----
  virtual int stop() = 0;
  virtual int start() = 0;
  /// Idempotent; returns the first error met, having done every step it could.
  virtual int close() = 0;
  bool is_open() const { return open_; }
  bool started() const { return started_; }

  // ---- counters ----
  virtual int stats(rte_eth_stats* out) const = 0;
  virtual int xstats(std::vector<std::pair<std::string, uint64_t>>* out) const = 0;
  /// One extended statistic by name; by default looked up in xstats().
  virtual int xstat(const char* name, uint64_t* value) const;
  virtual int reset_stats() = 0;

  // ---- optional capabilities (nullptr: this kind has none) ----
  virtual PeerScheduling* peer_scheduling() { return nullptr; }

  const LinkInfo& info() const { return info_; }

 protected:
  Link() = default;
  /// A raised link event (LSC interrupt) since the last call; kinds without one say false.
  virtual bool take_link_event() { return false; }
  /// Frees the frames waiting in the RX queues (bounded, for a peer that keeps sending).
  void drain_rx();
  /// cfg.pool if given; else a pool of the link's own ("PREFIX_N"), of cfg.pool_size mbufs
  /// (`default_count` when 0) that each hold cfg.mbuf_data_room or `frame` bytes, whichever is
  /// more. 0 or -errno (logged).
  int adopt_pool(const PortConfig& cfg, const char* prefix, unsigned default_count, uint32_t frame);
  /// Frees the pool the link created, unless mbufs of it are still held (-EBUSY, logged).
  int release_pool();

  LinkInfo info_;
  bool open_ = false;
  bool started_ = false;
  LinkState last_link_;  ///< take_link_change's last report
};

}  // namespace droce::net
