#pragma once
// EthdevLink: a Port's link on a DPDK Ethernet device (a PCI NIC, or a vdev
// such as net_af_xdp / net_af_packet / net_tap on a kernel netdev, net_memif
// between processes, net_ring in one process).
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
// Network namespaces: the link remembers the namespace it was opened in and
// re-enters it around every control call (net/netns.h). Open the device from
// inside the namespace its interface lives in.
//
// Configuration (PortConfig): queue counts are clamped to what the device
// reports; ring sizes to its descriptor limits. The mbuf pool is either given
// (not owned; it must outlive the link) or created, sized
//   2 x (rx_queues x rx_ring + tx_queues x tx_ring) + lcores x cache
// and freed on close. MTU is applied with rte_eth_dev_set_mtu and the result
// reported, not fatal (mtu_result). Promiscuous mode is off unless asked.
// Multicast: an explicit MAC list (rte_eth_dev_set_mc_addr_list), falling back
// to allmulticast when the device has no list; see Port::multicast_mode().
//
// Offloads: the capabilities report what the device can do (IPv4/UDP
// checksum both ways, multi-segment TX, RX scatter, RSS, and whether
// rte_flow_validate accepts ETH / IPV4 / UDP dst 4791 -> QUEUE 0, the rule a
// QPN steering backend would build). PortConfig's enable_* switches turn on
// the ones the device has. Multi-segment TX is enabled whenever it is
// available.
//
// Data path: rx_burst / tx_burst are rte_eth_rx_burst / rte_eth_tx_burst.
//
// Link: link() reads rte_eth_link_get_nowait. Drivers that do not follow the
// kernel netdev's carrier (af_packet and af_xdp report "up" whenever started)
// are completed with the netdev's IFF_UP and IFF_RUNNING flags, read with an
// ioctl on a socket opened in the link's namespace. A device with
// RTE_ETH_DEV_INTR_LSC is configured for LSC interrupts and gets a callback
// (EAL's interrupt thread) that sets a flag; its link() is then an atomic read
// of what the driver last stored. take_link_change() with LSC costs an atomic
// exchange and that read; without, one rte_eth_link_get_nowait (plus an ioctl
// for af_packet / af_xdp): call it from a timer (every 10-100 ms), not every
// loop iteration. Polled, a flap shorter than the polling interval goes
// unseen; a raised LSC event is never lost.
//
// RX wake-ups (PortConfig::rx_interrupts): PCI NICs under VFIO give eventfds
// (armed through the driver, read to acknowledge); net_tap gives its queues'
// own descriptors, readable while frames wait (arm and ack do nothing, and
// nothing reads them); net_memif in DPDK 22.11 accepts the configuration but
// gives none (its eventfds are internal), so it stays polled. net_af_packet
// and net_af_xdp give none through ethdev, so the link finds each queue's own
// kernel socket (net/kernel_socket_discovery.h), used like tap's. None is
// edge-triggered (rx_interrupt_edge false).
//
// Closing: close() (and the destructor) stops the device, unregisters the
// callback, closes it, detaches a hot-plugged device, and frees a pool it
// created, unless mbufs of that pool are still held somewhere (then the pool
// is leaked with an error log rather than freed under its users). Frames
// waiting in the RX queues are dropped first.
//
// Errors: a failed open leaves *out untouched and nothing behind: a
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
//     interrupt through ethdev; the wake-up is each queue's own TPACKET_V2
//     socket.
//   - net_af_xdp: no multi-seg TX; MTU at most 3542 (a frame is one page);
//     close leaks its umem and the mbufs in its fill ring, so the link leaks
//     the pool (close returns -EBUSY). Without bpffs at /sys/fs/bpf libxdp
//     loads its program without the dispatcher (works, logs a warning). No
//     RX interrupt through ethdev; the wake-up is each queue's XSK socket.
//     Leave its busy_budget devarg at the default (64): a port whose queues
//     are zero-copy with busy polling off (busy_budget=0, or no
//     CAP_NET_ADMIN) is refused with -ENOTSUP (check_af_xdp_sockets says
//     why). A veth's XSK sockets are in copy mode.
//   - net_tap: IPv4/UDP/TCP checksum offloads, multi-seg TX, scatter, RSS;
//     rte_flow_validate accepts the UDP 4791 rule, but flow support is off
//     when the kernel lacks the multiq qdisc; advertises LSC and tracks the
//     link over netlink but never raises the LSC event (take_link_change()
//     still sees the change).
//   - af_packet and af_xdp have neither a multicast list nor allmulticast
//     (multicast mode unfiltered), and net_tap accepts a list without
//     filtering: what reaches the netdev reaches the port (on a veth,
//     everything; on a real NIC the kernel's filter applies, so join the
//     groups on the netdev, e.g. `ip maddr add`, or set it allmulticast).
//
// Threading as Link's.

#include <rte_ethdev.h>

#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "net/link.h"

namespace droce::net {

/// What open_device adds to a vdev's device string, and the mbuf data room it
/// uses, so that frames of PortConfig::mtu travel whole (see plan_device).
struct DevicePlan {
  std::string devargs;
  uint16_t mbuf_data_room = 0;
  /// Most RX/TX queues to set up (0: what the device reports).
  uint16_t max_queues = 0;
};

class EthdevLink final : public Link {
 public:
  static int open_port_id(uint16_t port_id, const PortConfig& cfg, std::unique_ptr<Link>* out);
  /// Whether `devargs` is for DPDK to probe: any device string droce's own
  /// links did not claim.
  static bool claims(std::string_view devargs);
  /// Plugs in `devargs` as planned by plan_device(devargs, cfg) and opens it.
  static int open_device(std::string_view devargs, const PortConfig& cfg, std::unique_ptr<Link>* out);
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
  /// both links are closed; frames still in them are freed then.
  static int open_ring_pair(std::string_view name, const PortConfig& cfg, std::unique_ptr<Link>* a,
                            std::unique_ptr<Link>* b, unsigned ring_size);
  ~EthdevLink() override;

  uint16_t rx_burst(uint16_t queue, rte_mbuf** out, uint16_t n) override {
    return rte_eth_rx_burst(info_.port_id, queue, out, n);
  }
  uint16_t tx_burst(uint16_t queue, rte_mbuf** pkts, uint16_t n) override {
    return rte_eth_tx_burst(info_.port_id, queue, pkts, n);
  }

  int rx_interrupt_fd(uint16_t queue) const override;
  int rx_interrupt_arm(uint16_t queue, bool on) override;
  void rx_interrupt_ack(uint16_t queue) override;
  bool rx_interrupt_edge(uint16_t /*queue*/) const override { return false; }

  LinkState link() const override;
  uint16_t mtu() const override;
  int set_mtu(uint16_t mtu) override;
  uint16_t wire_mtu() const override;
  int netdev_mtu() const override;
  bool promiscuous() const override;
  int set_promiscuous(bool on) override;

  int stop() override;
  int start() override;
  int close() override;

  int stats(rte_eth_stats* out) const override;
  int xstats(std::vector<std::pair<std::string, uint64_t>>* out) const override;
  int xstat(const char* name, uint64_t* value) const override;
  int reset_stats() override;

 private:
  struct Rings;  // the rings of a ring pair, shared by its two links

  EthdevLink() = default;
  static int open_as_link(uint16_t port_id, const PortConfig& cfg, bool hot_plugged, std::unique_ptr<Link>* out);
  static int open_impl(uint16_t port_id, const PortConfig& cfg, bool hot_plugged,
                       std::unique_ptr<EthdevLink>* out);
  int setup(const PortConfig& cfg);
  int apply_rx_mode(const PortConfig& cfg);
  void probe_flow();
  bool take_link_event() override;
  LinkState kernel_link(const LinkState& pmd) const;
  int close_in_namespace();
  static int lsc_callback(uint16_t port_id, rte_eth_event_type type, void* arg, void* ret);

  std::string bus_name_;
  uint32_t frame_limit_ = 0;  ///< device_frame_limit(): 0 when the ethdev MTU holds
  uint16_t asked_mtu_ = 0;    ///< the MTU last asked for (PortConfig::mtu, set_mtu)
  std::vector<int> rx_intr_fds_;      ///< per RX queue, found once at start
  bool rx_intr_is_eventfd_ = false;   ///< else a queue descriptor: readable while frames wait
  bool link_follows_netdev_ = false;  ///< the PMD's link ignores the netdev's carrier
  int ctl_fd_ = -1;    ///< AF_INET socket in the link's namespace (ioctls)
  int netns_fd_ = -1;  ///< the namespace the link was opened in
  bool configured_ = false;
  bool lsc_registered_ = false;
  std::atomic<bool> link_changed_{false};
  std::shared_ptr<Rings> rings_;
};

}  // namespace droce::net
