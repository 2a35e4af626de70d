#pragma once
// One poll-mode core's share of droced: a port queue, the transport engine
// on it, and (shared with the other cores, CoreGroup) the port's neighbour
// table (ARP / IPv6 ND). run_once() is the lcore loop's body
// (docs/droced.md):
//   RX burst -> ARP/ND frames to the neighbour table, RoCE frames to the
//   engine of the core that owns their destination QP (here, or handed to
//   another core's inbound ring);
//   frames handed here by other cores, and frames the engine sent to our own
//   MAC (rocev2/port_link.h) -> the engine (or their owner);
//   neighbour replies and requests out; engine timers, requester and TX.
//
// Several cores. Core k's engine numbers its QPs (k << kQpnCoreShift) | n,
// so any core finds a frame's owner from the BTH's destination QP alone;
// frames for QPNs no core owns stay where they arrived (the engine counts
// them as unknown). UD multicast (QPN 0xFFFFFF) is copied to every core. A
// core whose inbound ring is full drops the frame and counts it: the
// transport retransmits, as after any loss. A core that sleeps is woken by
// whoever hands it a frame (its flag, then its eventfd).
//
// Next hops are resolved where the kernel resolves them for RoCE devices: when
// a QP's address vector is set (modify to RTR) or an AH is created. The route
// comes from the group's RouteTable (own addresses: --address A/LEN and --route)
// or, on a netdev shared with the kernel, from the kernel's FIB (KernelNet); the
// next hop's MAC from droce's neighbour table or from the kernel's. The route's
// hop limit replaces the address vector's, as the kernel does for RoCE. A
// destination without a route fails the verb with ENETUNREACH; a next hop that
// never answers with EHOSTUNREACH after the retries, instead of leaving sends to
// hang.
//
// Threading: a DeviceCore belongs to the lcore that calls run_once(); what it
// shares (CoreGroup) is locked (the neighbour table: rare, uncontended) or
// lock-free (the inbound rings, multi-producer / single-consumer). When
// cores share a TX queue (a port with fewer queues than cores), its
// tx_burst is taken under that queue's spinlock.

#include <rte_ring.h>
#include <rte_spinlock.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "core/counter_table.h"
#include "droced/cc_settings.h"
#include "droced/fault_stage.h"
#include "net/gid_table.h"
#include "net/membership.h"
#include "net/kernel_net.h"
#include "net/neighbor.h"
#include "net/pfc.h"
#include "net/port.h"
#include "net/route_table.h"
#include "rocev2/engine.h"
#include "rocev2/port_link.h"

namespace droce::droced {

/// QPN bits above this name the core that owns the QP (24-bit QPNs: up to 16 cores).
inline constexpr unsigned kQpnCoreShift = 20;
inline constexpr unsigned kMaxCores = 16;
inline constexpr uint32_t kMulticastQpn = rocev2::Engine::kMulticastQpn;

/// The cores of one droced and what they share.
class CoreGroup {
 public:
  /// `cores` (1..kMaxCores) cores on `port` (frames of its own tagged with `vlan`); -errno
  /// through *rc.
  CoreGroup(net::Port* port, unsigned cores, const net::NeighborConfig& neighbor, uint16_t vlan, int* rc);
  ~CoreGroup();
  CoreGroup(const CoreGroup&) = delete;
  CoreGroup& operator=(const CoreGroup&) = delete;

  unsigned size() const { return cores_; }
  /// The core that owns `qpn`, or -1 when none does (or it is multicast).
  int owner_of(uint32_t qpn) const {
    const uint32_t k = qpn >> kQpnCoreShift;
    return qpn != kMulticastQpn && k < cores_ ? int(k) : -1;
  }
  /// The port's RX queue core k polls (cores past the port's queues have
  /// none: -1), and the TX queue it sends on (shared round-robin when the
  /// port has fewer) with the lock that guards it, or nullptr when it is the
  /// core's own.
  int rx_queue_of(unsigned core) const { return core < port_->rx_queues() ? int(core) : -1; }
  uint16_t tx_queue_of(unsigned core) const { return uint16_t(core % port_->tx_queues()); }
  rte_spinlock_t* tx_lock_of(unsigned core) {
    return cores_ > port_->tx_queues() ? &tx_locks_[tx_queue_of(core)] : nullptr;
  }

  /// Core k's inbound frames (any core enqueues, k dequeues).
  rte_ring* inbound(unsigned core) const { return inbound_[core]; }
  /// Sleep handshake: core k sets its flag, looks at its inbound ring once
  /// more, then waits on its eventfd; whoever hands it a frame writes the
  /// eventfd when the flag is set.
  void set_sleeping(unsigned core, bool sleeping);
  void wake(unsigned core);
  /// The eventfd core k sleeps on (set by its owner; -1: never sleeps).
  void set_wake_fd(unsigned core, int fd) { wake_fd_[core] = fd; }

  /// The neighbour table every core resolves through, and its lock (which also guards the
  /// multicast membership reporter: both are the port's own control frames).
  net::NeighborTable& neighbors() { return neighbors_; }
  net::MembershipReporter& membership() { return membership_; }
  std::mutex& neighbor_mutex() { return neighbor_mutex_; }
  /// Own addresses: the routes (under neighbor_mutex, like the table).
  net::RouteTable& routes() { return routes_; }
  /// A netdev shared with the kernel: the kernel's routes and neighbours (under
  /// neighbor_mutex); nullptr in own-address mode.
  net::KernelNet* kernel() { return kernel_.get(); }
  void set_kernel(std::unique_ptr<net::KernelNet> k) { kernel_ = std::move(k); }
  net::Port* port() const { return port_; }
  /// The priorities peers paused (PFC frames any core received); every core's transmit obeys.
  net::PauseGate& pause_gate() { return pause_gate_; }
  /// The port's speed in bit/s at start (100 Gbit/s when it told none, as the engine's DCQCN
  /// assumes): how long a pause quantum lasts.
  uint64_t speed_bps() const { return speed_bps_; }

  /// Bit k: core k's engine has multicast groups (then what any core sends to a multicast
  /// address is looped back too, as a NIC delivers to its own attached QPs).
  void set_has_multicast(unsigned core, bool has) {
    if (has) mcast_cores_.fetch_or(1u << core, std::memory_order_relaxed);
    else mcast_cores_.fetch_and(~(1u << core), std::memory_order_relaxed);
  }
  const std::atomic<uint32_t>* multicast_cores() const { return &mcast_cores_; }
  /// Bit k: core k's engine has raw packet QPs' flow rules (then frames that name no QP are
  /// copied to it from whichever core received them).
  /// The first rules on any core ask the port for every frame, the last gone let it filter
  /// again (Port::set_rx_all).
  void set_has_raw_flows(unsigned core, bool has) {
    std::lock_guard<std::mutex> lock(raw_mutex_);
    const uint32_t before = has ? raw_cores_.fetch_or(1u << core, std::memory_order_relaxed)
                                : raw_cores_.fetch_and(~(1u << core), std::memory_order_relaxed);
    const uint32_t after = has ? before | (1u << core) : before & ~(1u << core);
    if ((before == 0) != (after == 0)) port_->set_rx_all(after != 0);
  }
  uint32_t raw_flow_cores() const { return raw_cores_.load(std::memory_order_relaxed); }

 private:
  net::Port* port_;
  unsigned cores_;
  std::atomic<uint32_t> mcast_cores_{0};
  std::atomic<uint32_t> raw_cores_{0};
  std::mutex raw_mutex_;  ///< orders set_has_raw_flows' changes of the port's filter
  std::vector<rte_ring*> inbound_;
  std::unique_ptr<std::atomic<bool>[]> sleeping_;
  std::vector<int> wake_fd_;
  std::vector<rte_spinlock_t> tx_locks_;
  std::mutex neighbor_mutex_;
  net::NeighborTable neighbors_;
  net::RouteTable routes_;
  std::unique_ptr<net::KernelNet> kernel_;
  net::MembershipReporter membership_;
  net::PauseGate pause_gate_;
  uint64_t speed_bps_ = 100'000'000'000ull;
};

/// An address vector's source from a GID table entry: its GID, VLAN and MAC (what a client's
/// sgid_index names, and what droced's own QP1 sends from).
inline void set_av_source(const net::GidEntry& g, rocev2::AddressVector* av) {
  av->sgid = g.gid;
  av->vlan_id = g.vlan;  // kNoVlan is the AV's "untagged" too
  av->smac = g.mac;
}

struct DeviceCoreConfig {
  net::Port* port = nullptr;
  /// The group this core belongs to, and its index in it. nullptr: a group
  /// of one, made for this core (tests, the engine demo).
  CoreGroup* group = nullptr;
  unsigned index = 0;
  /// This host's addresses on the port (GID form); the first is the engine's source.
  std::vector<net::IpAddr> addresses;
  uint16_t vlan = net::kNoVlan;
  net::NeighborConfig neighbor;
  rocev2::EngineConfig engine;  ///< pool, port, MAC, IP and offloads are filled in from the above
  /// The device's fault rules (`droce fault`, --drop-rate); nullptr: none.
  const FaultRules* faults = nullptr;
  /// The device's capture (`droce capture`); nullptr: none can run.
  Capture* capture = nullptr;
  /// The device's DCQCN parameters (`droce cc`); nullptr: the engine keeps engine.cc.
  const CcSettings* cc = nullptr;
};

/// What each counts is in kDeviceCoreCounters.
struct DeviceCoreCounters {
  uint64_t neighbor_frames_in = 0;
  uint64_t membership_frames_in = 0;
  uint64_t neighbor_frames_out = 0;
  uint64_t neighbor_tx_dropped = 0;
  uint64_t oversize_control = 0;
  uint64_t loopback_frames = 0;
  uint64_t handed_out = 0;
  uint64_t handed_in = 0;
  uint64_t hand_off_dropped = 0;
  uint64_t rx_own_frames = 0;
  uint64_t pause_frames_in = 0;
  uint64_t pause_frames_bad = 0;
  uint64_t pause_frames_out = 0;
  uint64_t pause_tx_dropped = 0;
  uint64_t tx_pause_waits = 0;
};

/// DeviceCoreCounters described once (core/counter_table.h).
inline constexpr core::Counter<DeviceCoreCounters> kDeviceCoreCounters[] = {
    {"neighbor_frames_in", &DeviceCoreCounters::neighbor_frames_in, "ARP/ND frames handed to the neighbour table"},
    {"membership_frames_in", &DeviceCoreCounters::membership_frames_in,
     "IGMP/MLD frames handed to the membership reporter"},
    {"neighbor_frames_out", &DeviceCoreCounters::neighbor_frames_out,
     "the neighbour table's replies and requests sent (and IGMP/MLD reports)"},
    {"neighbor_tx_dropped", &DeviceCoreCounters::neighbor_tx_dropped,
     "no mbuf or port full for those (the table retries on its own)"},
    {"oversize_control", &DeviceCoreCounters::oversize_control, "ARP/ND frames too large to read (dropped)"},
    {"loopback_frames", &DeviceCoreCounters::loopback_frames, "frames to our own MAC, handed from TX to RX"},
    {"handed_out", &DeviceCoreCounters::handed_out, "frames handed to the core owning their QP"},
    {"handed_in", &DeviceCoreCounters::handed_in, "frames other cores handed here"},
    {"hand_off_dropped", &DeviceCoreCounters::hand_off_dropped,
     "the owner's inbound ring was full (or no copy for multicast)"},
    {"rx_own_frames", &DeviceCoreCounters::rx_own_frames, "our own frames seen again (af_packet shows what we send)"},
    {"pause_frames_in", &DeviceCoreCounters::pause_frames_in,
     "PFC/PAUSE frames for this port received (their priorities' transmit held for the time)"},
    {"pause_frames_bad", &DeviceCoreCounters::pause_frames_bad,
     "MAC control frames dropped: malformed, not a pause, or to another MAC"},
    {"pause_frames_out", &DeviceCoreCounters::pause_frames_out,
     "PFC frames a lossless congestion point sent its senders (pfc-xoff=)"},
    {"pause_tx_dropped", &DeviceCoreCounters::pause_tx_dropped, "no mbuf or port full for one of those"},
    {"tx_pause_waits", &DeviceCoreCounters::tx_pause_waits, "transmit bursts a received pause cut short"},
};
static_assert(core::covers(kDeviceCoreCounters));

class DeviceCore {
 public:
  /// -errno through *rc (EINVAL: no port or no address).
  DeviceCore(const DeviceCoreConfig& cfg, int* rc);
  DeviceCore(const DeviceCore&) = delete;
  DeviceCore& operator=(const DeviceCore&) = delete;

  void run_once(uint64_t now_ns);

  /// Fills av->smac, av->sgid (if unset), av->dmac for av->dgid and, for a
  /// unicast destination, av->hop_limit from the route. resolved; pending (call
  /// again after more run_once); failed (no answer: *err EHOSTUNREACH; no route:
  /// ENETUNREACH).
  net::ResolveStatus resolve(rocev2::AddressVector* av, uint64_t now_ns, int* err = nullptr);
  /// This host's addresses changed (a netdev shared with the kernel): the engine takes
  /// frames for `addresses` (GID form, GID 0 included) from now on. This core's thread.
  void set_addresses(const std::vector<net::IpAddr>& addresses);

  rocev2::Engine& engine() { return *engine_; }
  /// The group's table (shared: lock group().neighbor_mutex() from any
  /// thread but this core's, or when several cores run).
  net::NeighborTable& neighbors() { return group_->neighbors(); }
  CoreGroup& group() { return *group_; }
  unsigned index() const { return cfg_.index; }
  const DeviceCoreCounters& counters() const { return counters_; }
  /// This core's fault rules at work (their counters).
  const FaultStage& faults() const { return *faults_; }
  /// The link carries the ICRC (false: droce_shm with icrc=skip, where captures fill it in).
  bool link_has_icrc() const { return icrc_on_link_; }
  /// Frames handed here and not yet taken (the sleep handshake's last look).
  bool has_inbound() const { return rte_ring_count(group_->inbound(cfg_.index)) != 0; }
  uint64_t next_deadline() const;

  /// ibv_attach_mcast / ibv_detach_mcast on this core's engine (Engine's errors).
  int attach_mcast(uint32_t qpn, const net::IpAddr& gid);
  int detach_mcast(uint32_t qpn, const net::IpAddr& gid);
  /// ibv_create_flow / ibv_destroy_flow on this core's engine (Engine's errors). Like attach,
  /// they tell the group at once, before the reply: the client's next SEND (to a multicast MAC
  /// its own rule takes) must find the loopback on, not wait for the end of this loop.
  int create_flow(uint32_t qpn, abi::FlowType type, uint16_t priority, const abi::FlowMatch& match, uint32_t* id);
  int destroy_flow(uint32_t id);

 private:
  /// Tells the group whether this core's engine has multicast groups or raw flow rules (after
  /// attach, detach, and each loop: a destroyed QP leaves its groups and rules). Either way,
  /// multicast this host sends is looped back: a NIC delivers it to its own attached QPs and
  /// to its raw QPs' matching rules (pyverbs' raw traffic goes to a multicast MAC for that).
  void sync_multicast();
  void send_neighbor_frames();
  /// The PFC frames this core's lossless congestion points decided on, sent.
  void send_pauses();
  /// One control frame (ARP/ND, IGMP/MLD, PFC) out, padded to 60 bytes and captured: false
  /// when no mbuf or the port refused it.
  bool send_control(std::span<const uint8_t> frame);
  /// A received MAC Control frame: a pause for this port goes to the group's gate.
  void handle_pause(std::span<const uint8_t> frame, uint64_t now_ns);
  /// Sends `frames` to their owners; the ones that are this core's go to
  /// *local (multicast: a copy each, the original too).
  void route(rte_mbuf** frames, uint16_t n, std::vector<rte_mbuf*>* local);
  void hand_off(unsigned core, rte_mbuf* m);
  uint16_t tx(rte_mbuf** frames, uint16_t n);

  DeviceCoreConfig cfg_;
  std::unique_ptr<CoreGroup> own_group_;
  CoreGroup* group_;
  int rx_queue_;
  uint16_t tx_queue_;
  rte_spinlock_t* tx_lock_;
  std::unique_ptr<rocev2::PortQueueLink> link_;
  std::unique_ptr<rocev2::Engine> engine_;
  std::vector<std::vector<uint8_t>> neighbor_tx_;
  std::vector<net::PauseOut> pauses_;
  std::vector<rte_mbuf*> loopback_rx_;
  std::vector<rte_mbuf*> local_;
  /// Frames of rx_batch_ the rx fault rules let through now, and those due, routed.
  void route_faulted(uint64_t now_ns);
  std::unique_ptr<FaultStage> faults_;
  std::unique_ptr<FaultPort> fault_port_;  ///< the engine's port: the tx rules, then link_
  std::vector<rte_mbuf*> rx_batch_;
  std::vector<rte_mbuf*> faulted_;

  CaptureTap capture_;
  uint64_t cc_version_ = 0;  ///< of cfg_.cc, as the engine has it
  bool icrc_on_link_ = true;
  uint32_t woken_ = 0;  ///< cores handed frames this run_once (bit k), woken once each
  bool has_multicast_ = false;
  bool has_raw_flows_ = false;
  DeviceCoreCounters counters_;
};

}  // namespace droce::droced
