#include "net/port.h"

#include "net/eal.h"
#include "net/kernel_socket_discovery.h"
#include "net/netns.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <rte_bus.h>
#include <rte_byteorder.h>
#include <rte_dev.h>
#include <rte_devargs.h>
#include <rte_errno.h>
#include <rte_eth_ring.h>
#include <rte_flow.h>
#include <rte_lcore.h>
#include <rte_ring.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/log.h"

namespace droce::net {

namespace {

// The RoCEv2 UDP port (IANA); rocev2/headers.h owns the constant, but net/
// sits below rocev2/ and only needs it for the steering probe.
constexpr uint16_t kProbeUdpPort = 4791;

// Largest VLAN-tagged frame of a given MTU, FCS included.
constexpr uint32_t frame_size(uint16_t mtu) {
  return uint32_t{mtu} + RTE_ETHER_HDR_LEN + RTE_ETHER_CRC_LEN + RTE_VLAN_HLEN;
}

bool is_kernel_netdev_driver(std::string_view driver) {
  return driver == "net_af_packet" || driver == "net_af_xdp" || driver == "net_tap";
}

// Drivers whose link_update ignores the netdev: their link is "up" from
// start to stop whatever the kernel interface does (DPDK 22.11).
bool link_ignores_netdev(std::string_view driver) {
  return driver == "net_af_packet" || driver == "net_af_xdp";
}

// The largest frame (Ethernet header on, FCS off) a vdev carries whatever
// its ethdev MTU says; 0 when the ethdev MTU tells the truth.
//   - af_packet: one TPACKET_V2 ring frame of `framesz` (devarg, default
//     2048) per packet; the kernel puts the MAC header at TPACKET_ALIGN(
//     TPACKET2_HDRLEN + 16) = 80 less the 14-byte header, offset 66, and
//     truncates what does not fit.
//   - af_xdp: the ethdev's max_mtu (one page per frame).
//   - memif: one buffer (`bsize`, default 2048); longer frames would be
//     chained, which DPDK 22.11's memif gets wrong (Port::plan_device).
uint32_t device_frame_limit(std::string_view driver, std::string_view args, uint16_t max_mtu) {
  if (driver == "net_af_packet") {
    const std::string v = devarg_value(args, "framesz");
    const unsigned long framesz = v.empty() ? 2048 : std::strtoul(v.c_str(), nullptr, 0);
    return framesz > 66 ? static_cast<uint32_t>(framesz - 66) : 0;
  }
  if (driver == "net_af_xdp") return uint32_t{max_mtu} + RTE_ETHER_HDR_LEN;
  if (driver == "net_memif") {
    const std::string v = devarg_value(args, "bsize");
    return v.empty() ? 2048 : static_cast<uint32_t>(std::strtoul(v.c_str(), nullptr, 0));
  }
  return 0;
}

// Whether a device string names a device of `driver` (vdev names are the
// driver's name and anything after it: net_memif0, net_memif_a).
bool names_driver(std::string_view devargs, std::string_view driver) {
  return devargs.substr(0, devargs.find(',')).starts_with(driver);
}

// rte_eth_from_rings lives in the net_ring driver. A shared DPDK build loads
// that driver as an EAL plugin (dlopen, not global), so look the function up
// at run time: in the program when it links -lrte_net_ring (dpdk_drivers_dep),
// else in the plugin EAL loaded. net_lib then needs no driver at link time.
using FromRingsFn = decltype(&rte_eth_from_rings);

FromRingsFn from_rings_fn() {
  static const FromRingsFn fn = [] {
    void* sym = dlsym(RTLD_DEFAULT, "rte_eth_from_rings");
    for (const char* so : {"librte_net_ring.so.23", "librte_net_ring.so"}) {
      if (sym != nullptr) break;
      if (void* h = dlopen(so, RTLD_NOW | RTLD_NOLOAD)) sym = dlsym(h, "rte_eth_from_rings");
    }
    return reinterpret_cast<FromRingsFn>(sym);
  }();
  return fn;
}

unsigned next_pool_serial() {
  static std::atomic<unsigned> serial{0};
  return serial.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

const char* to_string(MulticastMode m) {
  switch (m) {
    case MulticastMode::none: return "none";
    case MulticastMode::exact_list: return "exact_list";
    case MulticastMode::allmulticast: return "allmulticast";
    case MulticastMode::unfiltered: return "unfiltered";
  }
  return "?";
}

// The rings of a net_ring pair: freed, with any frames still in them, when
// the last port of the pair lets go.
struct Port::Shared {
  std::vector<rte_ring*> rings;
  ~Shared() {
    for (rte_ring* r : rings) {
      void* m = nullptr;
      while (rte_ring_dequeue(r, &m) == 0) rte_pktmbuf_free(static_cast<rte_mbuf*>(m));
      rte_ring_free(r);
    }
  }
};

// ---------------------------------------------------------------- opening

int Port::open_port_id(uint16_t port_id, const PortConfig& cfg, std::unique_ptr<Port>* out) {
  if (!rte_eth_dev_is_valid_port(port_id)) {
    DROCE_LOG(ERR, net, "port %u: no such ethdev", port_id);
    return -ENODEV;
  }
  return open_impl(port_id, cfg, false, out);
}

DevicePlan Port::plan_device(std::string_view devargs, const PortConfig& cfg) {
  DevicePlan p{std::string(devargs), cfg.mbuf_data_room};
  if (names_driver(devargs, "net_memif")) {
    const uint32_t frame = uint32_t{cfg.mtu} + RTE_ETHER_HDR_LEN + RTE_VLAN_HLEN;
    if (devarg_value(devargs, "bsize").empty() && frame > 2048 && frame <= UINT16_MAX)
      p.devargs += ",bsize=" + std::to_string(RTE_ALIGN_CEIL(frame, 64u));
    p.max_queues = 1;
  } else if (names_driver(devargs, "net_af_packet")) {
    unsigned long framesz = 4608;
    if (const std::string given = devarg_value(devargs, "framesz"); !given.empty()) {
      framesz = std::strtoul(given.c_str(), nullptr, 0);
    } else {
      p.devargs += ",framesz=4608";
      if (devarg_value(devargs, "blocksz").empty()) p.devargs += ",blocksz=36864";
    }
    p.mbuf_data_room = static_cast<uint16_t>(
        std::clamp<unsigned long>(framesz - 32 + RTE_PKTMBUF_HEADROOM, p.mbuf_data_room, 16384));
  } else if (names_driver(devargs, "net_af_xdp")) {
    p.mbuf_data_room = std::min<uint16_t>(p.mbuf_data_room, 3712);
  }
  return p;
}

int Port::open_device(std::string_view devargs, const PortConfig& asked,
                      std::unique_ptr<Port>* out) {
  if (names_driver(devargs, "droce_shm")) return open_shm(devargs, asked, out);
  const DevicePlan plan = plan_device(devargs, asked);
  PortConfig cfg = asked;
  cfg.mbuf_data_room = plan.mbuf_data_room;
  if (plan.max_queues != 0) {
    cfg.rx_queues = std::min(cfg.rx_queues, plan.max_queues);
    cfg.tx_queues = std::min(cfg.tx_queues, plan.max_queues);
  }
  const std::string& args = plan.devargs;
  const std::string name(devargs.substr(0, devargs.find(',')));
  uint16_t port_id = 0;
  if (name.empty()) return -EINVAL;
  if (rte_eth_dev_get_port_by_name(name.c_str(), &port_id) == 0) {
    DROCE_LOG(ERR, net, "%s: already an ethdev (port %u)", name.c_str(), port_id);
    return -EEXIST;
  }
  int rc = rte_dev_probe(args.c_str());
  if (rc < 0) {
    DROCE_LOG(ERR, net, "rte_dev_probe(%s) failed: %s", args.c_str(), rte_strerror(-rc));
    return rc;
  }
  rc = rte_eth_dev_get_port_by_name(name.c_str(), &port_id);
  if (rc != 0) {
    // A bus device whose ethdev has another name: find it by device name.
    rc = -ENODEV;
    uint16_t p = 0;
    RTE_ETH_FOREACH_DEV(p) {
      rte_eth_dev_info info{};
      if (rte_eth_dev_info_get(p, &info) == 0 && info.device != nullptr &&
          name == rte_dev_name(info.device)) {
        port_id = p;
        rc = 0;
        break;
      }
    }
  }
  if (rc != 0) {
    DROCE_LOG(ERR, net, "%s: probed, but no ethdev appeared", name.c_str());
    rte_eal_hotplug_remove("vdev", name.c_str());
    return rc;
  }
  return open_impl(port_id, cfg, true, out);
}

int Port::open_ring_pair(std::string_view name, const PortConfig& cfg, std::unique_ptr<Port>* a,
                         std::unique_ptr<Port>* b, unsigned ring_size) {
  if (!rte_is_power_of_2(ring_size) || cfg.rx_queues != cfg.tx_queues || cfg.rx_queues == 0 ||
      cfg.rx_queues > RTE_PMD_RING_MAX_RX_RINGS)
    return -EINVAL;
  const FromRingsFn from_rings = from_rings_fn();
  if (from_rings == nullptr) {
    DROCE_LOG(ERR, net, "the net_ring driver is not loaded (rte_eth_from_rings not found)");
    return -ENOTSUP;
  }
  const uint16_t nq = cfg.rx_queues;
  auto shared = std::make_shared<Shared>();
  std::vector<rte_ring*> a_to_b;
  std::vector<rte_ring*> b_to_a;
  for (uint16_t q = 0; q < nq; ++q) {
    for (auto* dir : {&a_to_b, &b_to_a}) {
      char rname[RTE_RING_NAMESIZE];
      std::snprintf(rname, sizeof(rname), "dr_%.*s_%c%u", 16, name.data(),
                    dir == &a_to_b ? 'a' : 'b', q);
      rte_ring* r = rte_ring_create(rname, ring_size, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
      if (r == nullptr) {
        const int err = rte_errno;
        DROCE_LOG(ERR, net, "cannot create ring %s: %s", rname, rte_strerror(err));
        return -err;  // shared frees the rings made so far
      }
      shared->rings.push_back(r);
      dir->push_back(r);
    }
  }
  const std::string base(name);
  const std::string name_a = base + "_a";
  const std::string name_b = base + "_b";
  const int pa = from_rings(name_a.c_str(), b_to_a.data(), nq, a_to_b.data(), nq,
                                    SOCKET_ID_ANY);
  if (pa < 0) {
    const int err = rte_errno;
    DROCE_LOG(ERR, net, "rte_eth_from_rings(%s) failed: %s", name_a.c_str(), rte_strerror(err));
    return -err;
  }
  std::unique_ptr<Port> port_a;
  int rc = open_impl(static_cast<uint16_t>(pa), cfg, true, &port_a);
  if (rc != 0) return rc;  // open_impl detached A
  port_a->shared_ = shared;
  const int pb = from_rings(name_b.c_str(), a_to_b.data(), nq, b_to_a.data(), nq,
                                    SOCKET_ID_ANY);
  if (pb < 0) {
    const int err = rte_errno;
    DROCE_LOG(ERR, net, "rte_eth_from_rings(%s) failed: %s", name_b.c_str(), rte_strerror(err));
    return -err;  // port_a closes itself
  }
  std::unique_ptr<Port> port_b;
  rc = open_impl(static_cast<uint16_t>(pb), cfg, true, &port_b);
  if (rc != 0) return rc;
  port_b->shared_ = std::move(shared);
  *a = std::move(port_a);
  *b = std::move(port_b);
  return 0;
}

int Port::open_shm(std::string_view devargs, const PortConfig& cfg, std::unique_ptr<Port>* out) {
  const std::string name(devargs.substr(0, devargs.find(',')));
  const std::string role = devarg_value(devargs, "role");
  ShmLinkConfig lc;
  lc.socket = devarg_value(devargs, "socket");
  lc.server = role != "client";
  if (const std::string slots = devarg_value(devargs, "slots"); !slots.empty())
    lc.slots = static_cast<uint32_t>(std::strtoul(slots.c_str(), nullptr, 0));
  const std::string icrc = devarg_value(devargs, "icrc");
  lc.icrc = icrc == "compute";
  if (!icrc.empty() && icrc != "compute" && icrc != "skip") {
    DROCE_LOG(ERR, net, "%s: icrc=skip (the default: frames on this link carry none) or icrc=compute, not %s",
              name.c_str(), icrc.c_str());
    return -EINVAL;
  }
  if (lc.socket.empty() || (role != "server" && role != "client" && !role.empty()) ||
      (cfg.mtu != 0 && uint32_t{cfg.mtu} + RTE_ETHER_HDR_LEN + RTE_VLAN_HLEN > ShmLink::kMaxFrame)) {
    DROCE_LOG(ERR, net, "%s: needs socket=PATH, role=server|client, and an MTU of at most %u", name.c_str(),
              ShmLink::kMaxFrame - RTE_ETHER_HDR_LEN - RTE_VLAN_HLEN);
    return -EINVAL;
  }
  std::unique_ptr<Port> p(new Port());
  p->driver_name_ = "droce_shm";
  p->device_name_ = name;
  p->open_ = true;
  p->netns_fd_ = open_thread_netns();
  if (const std::string mac = devarg_value(devargs, "mac"); !mac.empty()) {
    if (rte_ether_unformat_addr(mac.c_str(), reinterpret_cast<rte_ether_addr*>(p->mac_.data())) != 0) {
      DROCE_LOG(ERR, net, "%s: bad mac=%s", name.c_str(), mac.c_str());
      return -EINVAL;
    }
  } else {
    // Locally administered, unicast, and different at the two ends of one link.
    uint64_t h = 1469598103934665603ull;
    for (const char ch : lc.socket + (lc.server ? "/s" : "/c")) h = (h ^ uint8_t(ch)) * 1099511628211ull;
    p->mac_ = {0x02, uint8_t(h >> 32), uint8_t(h >> 24), uint8_t(h >> 16), uint8_t(h >> 8), uint8_t(h)};
  }
  p->rx_queues_ = p->tx_queues_ = 1;
  p->rx_ring_size_ = p->tx_ring_size_ = static_cast<uint16_t>(std::min<uint32_t>(lc.slots, UINT16_MAX));
  p->caps_.max_rx_queues = p->caps_.max_tx_queues = 1;
  p->caps_.tx_multi_segs = true;  // a chain is copied into one slot
  p->caps_.min_mtu = 68;
  p->caps_.max_mtu = static_cast<uint16_t>(ShmLink::kMaxFrame - RTE_ETHER_HDR_LEN - RTE_VLAN_HLEN);
  p->caps_.max_rx_pktlen = ShmLink::kMaxFrame;
  p->caps_.no_icrc = !lc.icrc;
  p->tx_offloads_ = RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
  p->asked_mtu_ = cfg.mtu != 0 ? cfg.mtu : uint16_t{RTE_ETHER_MTU};
  p->multicast_mode_ = MulticastMode::unfiltered;  // a wire: what the peer sends arrives
  p->rx_intr_enabled_ = cfg.rx_interrupts;
  p->rx_intr_is_eventfd_ = true;
  p->counters_ = std::make_unique<PortQueueCounters[]>(1);
  if (cfg.pool != nullptr) {
    p->pool_ = cfg.pool;
  } else {
    const uint32_t room = std::max<uint32_t>(cfg.mbuf_data_room, frame_size(p->asked_mtu_));
    const unsigned count = cfg.pool_size != 0 ? cfg.pool_size : 2 * (2 * lc.slots) + rte_lcore_count() * 256;
    char pname[RTE_MEMPOOL_NAMESIZE];
    std::snprintf(pname, sizeof(pname), "droce_shm_%u", next_pool_serial());
    p->pool_ = rte_pktmbuf_pool_create(pname, count, std::min(256u, count * 2 / 3), 0,
                                       static_cast<uint16_t>(room + RTE_PKTMBUF_HEADROOM), int(rte_socket_id()));
    if (p->pool_ == nullptr) {
      const int err = rte_errno;
      DROCE_LOG(ERR, net, "%s: cannot create mbuf pool (%u x %u bytes): %s", name.c_str(), count, room,
                rte_strerror(err));
      return -err;
    }
    p->owns_pool_ = true;
  }
  if (int rc = ShmLink::open(lc, &p->shm_); rc != 0) {
    p->close();
    return rc;
  }
  p->configured_ = p->started_ = true;
  DROCE_LOG(INFO, net, "%s", p->describe().c_str());
  *out = std::move(p);
  return 0;
}

int Port::open_impl(uint16_t port_id, const PortConfig& cfg, bool hot_plugged,
                    std::unique_ptr<Port>* out) {
  std::unique_ptr<Port> p(new Port());
  p->port_id_ = port_id;
  p->hot_plugged_ = hot_plugged;
  p->open_ = true;
  p->netns_fd_ = open_thread_netns();
  const int rc = p->setup(cfg);
  if (rc != 0) {
    if (!hot_plugged) {
      // Not ours to close: leave it stopped, as a failed open found it.
      if (p->started_) rte_eth_dev_stop(port_id);
      p->started_ = false;
      p->configured_ = false;
    }
    p->close();
    return rc;
  }
  DROCE_LOG(INFO, net, "%s", p->describe().c_str());
  *out = std::move(p);
  return 0;
}

int Port::setup(const PortConfig& cfg) {
  rte_eth_dev_info info{};
  int rc = rte_eth_dev_info_get(port_id_, &info);
  if (rc != 0) {
    DROCE_LOG(ERR, net, "port %u: rte_eth_dev_info_get: %s", port_id_, rte_strerror(-rc));
    return rc;
  }
  driver_name_ = info.driver_name ? info.driver_name : "";
  if (info.device != nullptr) {
    device_name_ = rte_dev_name(info.device);
    if (const rte_bus* bus = rte_dev_bus(info.device)) bus_name_ = rte_bus_name(bus);
  }

  // Identity of a kernel netdev underneath, looked up in this namespace.
  kernel_netdev_ = is_kernel_netdev_driver(driver_name_);
  if (kernel_netdev_) {
    link_follows_netdev_ = link_ignores_netdev(driver_name_);
    ctl_fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (ctl_fd_ >= 0 && info.if_index != 0) {
      ifreq ifr{};
      ifr.ifr_ifindex = static_cast<int>(info.if_index);
      if (ioctl(ctl_fd_, SIOCGIFNAME, &ifr) == 0) ifname_ = ifr.ifr_name;
    }
    if (ifname_.empty() && info.device != nullptr) {
      const rte_devargs* da = rte_dev_devargs(info.device);
      if (da != nullptr && da->args != nullptr) ifname_ = devarg_value(da->args, "iface");
    }
  }

  caps_.rx_offload_capa = info.rx_offload_capa;
  caps_.tx_offload_capa = info.tx_offload_capa;
  caps_.rx_ipv4_checksum = info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_IPV4_CKSUM;
  caps_.rx_udp_checksum = info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_UDP_CKSUM;
  caps_.tx_ipv4_checksum = info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_IPV4_CKSUM;
  caps_.tx_udp_checksum = info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_UDP_CKSUM;
  caps_.tx_multi_segs = info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
  caps_.rx_scatter = info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_SCATTER;
  caps_.rss_hash_types = info.flow_type_rss_offloads;
  caps_.lsc_interrupt = info.dev_flags != nullptr && (*info.dev_flags & RTE_ETH_DEV_INTR_LSC);
  caps_.max_rx_queues = info.max_rx_queues;
  caps_.max_tx_queues = info.max_tx_queues;
  caps_.min_mtu = info.min_mtu;
  caps_.max_mtu = info.max_mtu;
  if (info.device != nullptr) {
    const rte_devargs* da = rte_dev_devargs(info.device);
    frame_limit_ = device_frame_limit(driver_name_, da != nullptr && da->args != nullptr ? da->args : "", info.max_mtu);
  }
  caps_.max_rx_pktlen = info.max_rx_pktlen;
  if (info.max_rx_queues == 0 || info.max_tx_queues == 0) {
    DROCE_LOG(ERR, net, "port %u (%s): reports no RX or TX queue", port_id_, driver_name_.c_str());
    return -EINVAL;
  }

  rx_queues_ = std::clamp<uint16_t>(cfg.rx_queues, 1, info.max_rx_queues);
  tx_queues_ = std::clamp<uint16_t>(cfg.tx_queues, 1, info.max_tx_queues);
  if (rx_queues_ != cfg.rx_queues || tx_queues_ != cfg.tx_queues)
    DROCE_LOG(NOTICE, net, "port %u (%s): queues %u/%u clamped to %u/%u (device maximum)",
              port_id_, driver_name_.c_str(), cfg.rx_queues, cfg.tx_queues, rx_queues_,
              tx_queues_);

  // Offloads: what was asked for and exists.
  if (cfg.enable_rx_checksum)
    rx_offloads_ |=
        info.rx_offload_capa & (RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_UDP_CKSUM);
  if (cfg.enable_tx_checksum)
    tx_offloads_ |=
        info.tx_offload_capa & (RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_UDP_CKSUM);
  tx_offloads_ |= info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS;

  // Buffers: a whole frame per mbuf unless the device can scatter.
  const uint16_t want_mtu = cfg.mtu != 0 ? cfg.mtu : uint16_t{RTE_ETHER_MTU};
  uint32_t data_room = cfg.pool != nullptr
                           ? rte_pktmbuf_data_room_size(cfg.pool) - RTE_PKTMBUF_HEADROOM
                           : cfg.mbuf_data_room;
  if (frame_size(want_mtu) > data_room) {
    if (caps_.rx_scatter) {
      rx_offloads_ |= RTE_ETH_RX_OFFLOAD_SCATTER;
    } else if (cfg.pool == nullptr) {
      data_room = std::min<uint32_t>(frame_size(want_mtu), UINT16_MAX - RTE_PKTMBUF_HEADROOM);
    } else {
      DROCE_LOG(WARNING, net,
                "port %u (%s): MTU %u frames do not fit the given pool's %u-byte mbufs and the "
                "device cannot scatter; long frames will be dropped",
                port_id_, driver_name_.c_str(), want_mtu, data_room);
    }
  }

  rte_eth_conf conf{};
  conf.rxmode.offloads = rx_offloads_;
  conf.txmode.offloads = tx_offloads_;
  if (cfg.enable_rss && rx_queues_ > 1 && info.flow_type_rss_offloads != 0) {
    conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
    conf.rx_adv_conf.rss_conf.rss_hf =
        info.flow_type_rss_offloads & (RTE_ETH_RSS_IP | RTE_ETH_RSS_UDP);
    rss_enabled_ = conf.rx_adv_conf.rss_conf.rss_hf != 0;
    if (!rss_enabled_) conf.rxmode.mq_mode = RTE_ETH_MQ_RX_NONE;
  }
  lsc_enabled_ = cfg.lsc_interrupt && caps_.lsc_interrupt;
  conf.intr_conf.lsc = lsc_enabled_ ? 1 : 0;
  conf.rxmode.mtu = cfg.mtu;
  conf.intr_conf.rxq = cfg.rx_interrupts ? 1 : 0;

  NetnsGuard ns(netns_fd_);
  rc = rte_eth_dev_configure(port_id_, rx_queues_, tx_queues_, &conf);
  if (rc != 0 && conf.intr_conf.rxq != 0) {
    DROCE_LOG(INFO, net, "port %u (%s): no RX interrupts (%s); polled only", port_id_, driver_name_.c_str(),
              rte_strerror(-rc));
    conf.intr_conf.rxq = 0;
    rc = rte_eth_dev_configure(port_id_, rx_queues_, tx_queues_, &conf);
  }
  rx_intr_enabled_ = conf.intr_conf.rxq != 0;
  if (rc == -EINVAL && cfg.mtu != 0) {
    // The MTU may be what the device refused; configure with its default and
    // let set_mtu below report the refusal.
    conf.rxmode.mtu = 0;
    rc = rte_eth_dev_configure(port_id_, rx_queues_, tx_queues_, &conf);
  }
  if (rc != 0) {
    DROCE_LOG(ERR, net, "port %u (%s): rte_eth_dev_configure: %s", port_id_,
              driver_name_.c_str(), rte_strerror(-rc));
    return rc;
  }
  configured_ = true;

  uint16_t rxd = cfg.rx_ring_size;
  uint16_t txd = cfg.tx_ring_size;
  rc = rte_eth_dev_adjust_nb_rx_tx_desc(port_id_, &rxd, &txd);
  if (rc != 0) {
    DROCE_LOG(ERR, net, "port %u: ring sizes %u/%u refused: %s", port_id_, rxd, txd,
              rte_strerror(-rc));
    return rc;
  }
  rx_ring_size_ = rxd;
  tx_ring_size_ = txd;

  const int socket = rte_eth_dev_socket_id(port_id_) >= 0 ? rte_eth_dev_socket_id(port_id_)
                                                          : int(rte_socket_id());
  if (cfg.pool != nullptr) {
    pool_ = cfg.pool;
  } else {
    unsigned cache = std::min<unsigned>(cfg.pool_cache, RTE_MEMPOOL_CACHE_MAX_SIZE);
    unsigned count = cfg.pool_size;
    if (count == 0)
      count = 2 * (unsigned{rx_queues_} * rxd + unsigned{tx_queues_} * txd) +
              rte_lcore_count() * cache;
    cache = std::min(cache, count * 2 / 3);  // rte_mempool: cache * 1.5 <= count
    char pname[RTE_MEMPOOL_NAMESIZE];
    std::snprintf(pname, sizeof(pname), "droce_p%u_%u", port_id_, next_pool_serial());
    pool_ = rte_pktmbuf_pool_create(pname, count, cache, 0,
                                    static_cast<uint16_t>(data_room + RTE_PKTMBUF_HEADROOM),
                                    socket);
    if (pool_ == nullptr) {
      const int err = rte_errno;
      DROCE_LOG(ERR, net, "port %u: cannot create mbuf pool %s (%u x %u bytes): %s", port_id_,
                pname, count, data_room, rte_strerror(err));
      return -err;
    }
    owns_pool_ = true;
  }

  // net_af_xdp makes each queue's XSK socket in that queue's setup (DPDK
  // 22.11: eth_rx_queue_setup -> xsk_configure -> xsk_socket__create; probe,
  // configure and start make none): the one new AF_XDP socket a setup leaves
  // is that queue's (net/kernel_socket_discovery.h).
  const bool af_xdp = driver_name_ == "net_af_xdp";
  std::vector<int> xsks;  // per RX queue; -1 where not exactly one appeared
  for (uint16_t q = 0; q < rx_queues_; ++q) {
    const auto before = af_xdp ? process_sockets() : std::vector<std::pair<int, ino_t>>{};
    rc = rte_eth_rx_queue_setup(port_id_, q, rxd, static_cast<unsigned>(socket), nullptr, pool_);
    if (rc != 0) {
      DROCE_LOG(ERR, net, "port %u: RX queue %u setup: %s", port_id_, q, rte_strerror(-rc));
      return rc;
    }
    if (af_xdp) {
      const std::vector<int> made = new_xdp_sockets(before, process_sockets());
      if (made.size() != 1)
        DROCE_LOG(NOTICE, net, "port %u (net_af_xdp): RX queue %u's setup left %zu new AF_XDP sockets, not 1",
                  port_id_, q, made.size());
      xsks.push_back(made.size() == 1 ? made[0] : -1);
    }
  }
  for (uint16_t q = 0; q < tx_queues_; ++q) {
    rc = rte_eth_tx_queue_setup(port_id_, q, txd, static_cast<unsigned>(socket), nullptr);
    if (rc != 0) {
      DROCE_LOG(ERR, net, "port %u: TX queue %u setup: %s", port_id_, q, rte_strerror(-rc));
      return rc;
    }
  }
  counters_ = std::make_unique<PortQueueCounters[]>(std::max(rx_queues_, tx_queues_));

  if (lsc_enabled_) {
    rc = rte_eth_dev_callback_register(port_id_, RTE_ETH_EVENT_INTR_LSC, &Port::lsc_callback, this);
    if (rc != 0) {
      DROCE_LOG(ERR, net, "port %u: cannot register the LSC callback: %s", port_id_,
                rte_strerror(-rc));
      return rc;
    }
    lsc_registered_ = true;
  }

  if (cfg.mtu != 0) {
    mtu_result_ = rte_eth_dev_set_mtu(port_id_, cfg.mtu);
    asked_mtu_ = cfg.mtu;
    if (mtu_result_ != 0)
      DROCE_LOG(NOTICE, net, "port %u (%s): set MTU %u: %s (MTU is %u)", port_id_,
                driver_name_.c_str(), cfg.mtu, rte_strerror(-mtu_result_), mtu());
  }

  rc = rte_eth_dev_start(port_id_);
  if (rc != 0) {
    DROCE_LOG(ERR, net, "port %u (%s): rte_eth_dev_start: %s", port_id_, driver_name_.c_str(),
              rte_strerror(-rc));
    return rc;
  }
  started_ = true;
  if (af_xdp) {
    // Every af_xdp port, wake-up or not: its rx_burst must not be able to block.
    rc = check_af_xdp_sockets(port_id_, xsks, rx_queues_, &rx_intr_enabled_);
    if (rc != 0) return rc;
    if (rx_intr_enabled_) {
      rx_intr_fds_ = xsks;
      rx_intr_is_eventfd_ = false;  // the queue's own socket: readable while frames wait
    }
  } else if (rx_intr_enabled_ && driver_name_ == "net_af_packet") {
    rx_intr_enabled_ = af_packet_queue_sockets(port_id_, rx_queues_, ifname_, ctl_fd_, &rx_intr_fds_);
    rx_intr_is_eventfd_ = false;  // the queue's own socket: readable while frames wait
  } else if (rx_intr_enabled_) {
    // Drivers that accept intr_conf.rxq without giving a descriptor (memif in
    // 22.11 keeps its eventfds to itself) are polled only.
    for (uint16_t q = 0; q < rx_queues_; ++q) {
      const int fd = rte_eth_dev_rx_intr_ctl_q_get_fd(port_id_, q);
      if (fd < 0) {
        DROCE_LOG(INFO, net, "port %u (%s): RX queue %u has no interrupt descriptor; polled only", port_id_,
                  driver_name_.c_str(), q);
        rx_intr_enabled_ = false;
        rx_intr_fds_.clear();
        break;
      }
      rx_intr_fds_.push_back(fd);
    }
    // An eventfd (VFIO NICs) counts interrupts: it is armed through the
    // driver and read to acknowledge. Anything else (net_tap gives its queue's
    // own descriptor) is readable exactly while frames wait: no arming, and
    // it must never be read, which would take a frame.
    char link[64] = {};
    const std::string path = rx_intr_fds_.empty() ? "" : "/proc/self/fd/" + std::to_string(rx_intr_fds_[0]);
    rx_intr_is_eventfd_ = !path.empty() && ::readlink(path.c_str(), link, sizeof link - 1) > 0 &&
                          std::string_view(link) == "anon_inode:[eventfd]";
  }

  rc = apply_rx_mode(cfg);
  if (rc != 0) return rc;

  rte_ether_addr mac{};
  if (rte_eth_macaddr_get(port_id_, &mac) == 0) std::memcpy(mac_.data(), mac.addr_bytes, 6);
  probe_flow();
  last_link_ = link();
  return 0;
}

int Port::apply_rx_mode(const PortConfig& cfg) {
  int rc = cfg.promiscuous ? rte_eth_promiscuous_enable(port_id_)
                           : rte_eth_promiscuous_disable(port_id_);
  if (rc != 0) {
    if (cfg.promiscuous) {
      DROCE_LOG(ERR, net, "port %u (%s): cannot enable promiscuous mode: %s", port_id_,
                driver_name_.c_str(), rte_strerror(-rc));
      return rc;
    }
    DROCE_LOG(INFO, net, "port %u (%s): promiscuous mode cannot be turned off (%s); it is %s",
              port_id_, driver_name_.c_str(), rte_strerror(-rc), promiscuous() ? "on" : "off");
  }

  auto enable_allmulti = [&]() {
    const int r = rte_eth_allmulticast_enable(port_id_);
    multicast_mode_ = r == 0 ? MulticastMode::allmulticast : MulticastMode::unfiltered;
    if (r != 0)
      DROCE_LOG(INFO, net, "port %u (%s): no multicast control (%s); delivering what it delivers",
                port_id_, driver_name_.c_str(), rte_strerror(-r));
  };
  if (cfg.allmulticast) {
    enable_allmulti();
  } else if (!cfg.multicast.empty()) {
    std::vector<rte_ether_addr> list(cfg.multicast.size());
    for (size_t i = 0; i < list.size(); ++i)
      std::memcpy(list[i].addr_bytes, cfg.multicast[i].data(), 6);
    rc = rte_eth_dev_set_mc_addr_list(port_id_, list.data(), static_cast<uint32_t>(list.size()));
    if (rc == 0) {
      multicast_mode_ = MulticastMode::exact_list;
    } else {
      DROCE_LOG(INFO, net, "port %u (%s): no multicast list (%s); trying allmulticast", port_id_,
                driver_name_.c_str(), rte_strerror(-rc));
      enable_allmulti();
    }
  }
  return 0;
}

void Port::probe_flow() {
  rte_flow_attr attr{};
  attr.ingress = 1;
  rte_flow_item_udp udp_spec{};
  rte_flow_item_udp udp_mask{};
  udp_spec.hdr.dst_port = rte_cpu_to_be_16(kProbeUdpPort);
  udp_mask.hdr.dst_port = 0xffff;
  rte_flow_item pattern[4] = {};
  pattern[0].type = RTE_FLOW_ITEM_TYPE_ETH;
  pattern[1].type = RTE_FLOW_ITEM_TYPE_IPV4;
  pattern[2].type = RTE_FLOW_ITEM_TYPE_UDP;
  pattern[2].spec = &udp_spec;
  pattern[2].mask = &udp_mask;
  pattern[3].type = RTE_FLOW_ITEM_TYPE_END;
  rte_flow_action_queue queue{};
  queue.index = 0;
  rte_flow_action actions[2] = {};
  actions[0].type = RTE_FLOW_ACTION_TYPE_QUEUE;
  actions[0].conf = &queue;
  actions[1].type = RTE_FLOW_ACTION_TYPE_END;
  rte_flow_error err{};
  const int rc = rte_flow_validate(port_id_, &attr, pattern, actions, &err);
  caps_.flow_udp_4791_to_queue = rc;
  DROCE_LOG(DEBUG, net, "port %u (%s): rte_flow UDP 4791 -> queue: %s%s%s", port_id_,
            driver_name_.c_str(), rc == 0 ? "accepted" : rte_strerror(-rc),
            err.message ? ": " : "", err.message ? err.message : "");
}

Port::~Port() { close(); }

// ---------------------------------------------------------------- link

int Port::lsc_callback(uint16_t, rte_eth_event_type, void* arg, void*) {
  static_cast<Port*>(arg)->link_changed_.store(true, std::memory_order_release);
  return 0;
}

LinkState Port::link() const {
  LinkState s;
  if (shm_ != nullptr) {
    s.up = started_ && shm_->connected();
    s.full_duplex = s.up;
    return s;
  }
  rte_eth_link l{};
  if (!open_ || rte_eth_link_get_nowait(port_id_, &l) != 0) return s;
  s.up = l.link_status == RTE_ETH_LINK_UP;
  s.speed_mbps = (s.up && l.link_speed != RTE_ETH_SPEED_NUM_UNKNOWN) ? l.link_speed : 0;
  s.full_duplex = s.up && l.link_duplex == RTE_ETH_LINK_FULL_DUPLEX;
  s.autoneg = l.link_autoneg == RTE_ETH_LINK_AUTONEG;
  if (link_follows_netdev_ && s.up) return kernel_link(s);
  return s;
}

LinkState Port::kernel_link(const LinkState& pmd) const {
  ifreq ifr{};
  std::snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname_.c_str());
  if (ctl_fd_ < 0 || ifname_.empty() || ioctl(ctl_fd_, SIOCGIFFLAGS, &ifr) != 0) return pmd;
  if ((ifr.ifr_flags & IFF_UP) && (ifr.ifr_flags & IFF_RUNNING)) return pmd;
  return LinkState{};
}

bool Port::take_link_change() {
  // The LSC flag alone is not enough: net_tap (22.11) sets RTE_ETH_DEV_INTR_LSC
  // and updates the link from its netlink socket but never raises the event.
  // With LSC configured, link() is an atomic read of the driver's copy.
  const bool flagged = lsc_enabled_ && link_changed_.exchange(false, std::memory_order_acq_rel);
  const LinkState now = link();
  if (now == last_link_ && !flagged) return false;
  last_link_ = now;
  return true;
}

// ---------------------------------------------------------------- identity and control

uint16_t Port::mtu() const {
  if (shm_ != nullptr) return open_ ? asked_mtu_ : 0;
  uint16_t m = 0;
  if (open_) rte_eth_dev_get_mtu(port_id_, &m);
  return m;
}

int Port::netdev_mtu() const {
  if (ctl_fd_ < 0 || ifname_.empty()) return -ENODEV;
  ifreq ifr{};
  std::snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname_.c_str());
  if (ioctl(ctl_fd_, SIOCGIFMTU, &ifr) != 0) return -errno;
  return ifr.ifr_mtu;
}

uint16_t Port::wire_mtu() const {
  if (!open_) return 0;
  uint32_t m = mtu();
  // Links between processes have no MTU of their own (no MTU op; they carry
  // what is sent): the one asked for is the truth.
  if (mtu_result_ == -ENOTSUP && asked_mtu_ != 0 && (driver_name_ == "net_memif" || driver_name_ == "net_ring"))
    m = asked_mtu_;
  if (kernel_netdev_)
    if (const int n = netdev_mtu(); n > 0) m = static_cast<uint32_t>(n);
  if (frame_limit_ > RTE_ETHER_HDR_LEN + RTE_VLAN_HLEN)
    m = std::min(m, frame_limit_ - RTE_ETHER_HDR_LEN - RTE_VLAN_HLEN);
  if (!caps_.rx_scatter && pool_ != nullptr) {
    const uint32_t room = rte_pktmbuf_data_room_size(pool_) - RTE_PKTMBUF_HEADROOM;
    m = std::min(m, room - RTE_ETHER_HDR_LEN - RTE_VLAN_HLEN);
  }
  return static_cast<uint16_t>(m);
}

int Port::rx_interrupt_fd(uint16_t queue) const {
  if (shm_ != nullptr && open_ && rx_intr_enabled_ && queue == 0) return shm_->wake_fd();
  if (!open_ || !rx_intr_enabled_ || queue >= rx_intr_fds_.size()) return -ENOTSUP;
  return rx_intr_fds_[queue];
}

int Port::rx_interrupt_arm(uint16_t queue, bool on) {
  if (!open_ || !rx_intr_enabled_ || queue >= rx_queues_) return -ENOTSUP;
  if (shm_ != nullptr) {
    shm_->set_sleeping(on);
    return 0;
  }
  if (!rx_intr_is_eventfd_) return 0;  // readable while frames wait: nothing to arm
  return on ? rte_eth_dev_rx_intr_enable(port_id_, queue) : rte_eth_dev_rx_intr_disable(port_id_, queue);
}

bool Port::rx_interrupt_edge(uint16_t queue) const { return rx_interrupt_fd(queue) >= 0 && shm_ != nullptr; }

void Port::rx_interrupt_ack(uint16_t queue) {
  if (shm_ != nullptr) {
    shm_->ack_wake();  // its own eventfd, non-blocking: one read
    return;
  }
  const int fd = rx_interrupt_fd(queue);
  if (fd < 0 || !rx_intr_is_eventfd_) return;
  uint64_t count;
  // The descriptor may be blocking: read only what poll says is there.
  pollfd p{fd, POLLIN, 0};
  while (::poll(&p, 1, 0) == 1 && (p.revents & POLLIN) && ::read(fd, &count, sizeof count) == sizeof count) {
  }
}

bool Port::promiscuous() const {
  if (shm_ != nullptr) return true;  // a wire to one peer: everything it sends arrives
  return open_ && rte_eth_promiscuous_get(port_id_) == 1;
}

int Port::set_mtu(uint16_t mtu) {
  if (!open_) return -ENODEV;
  if (shm_ != nullptr) {
    mtu_result_ = mtu < caps_.min_mtu || mtu > caps_.max_mtu ? -EINVAL : 0;
    if (mtu_result_ == 0) asked_mtu_ = mtu;
    return mtu_result_;
  }
  NetnsGuard ns(netns_fd_);
  mtu_result_ = rte_eth_dev_set_mtu(port_id_, mtu);
  asked_mtu_ = mtu;
  if (mtu_result_ != 0)
    DROCE_LOG(NOTICE, net, "port %u (%s): set MTU %u: %s (MTU stays %u)", port_id_,
              driver_name_.c_str(), mtu, rte_strerror(-mtu_result_), this->mtu());
  return mtu_result_;
}

int Port::set_promiscuous(bool on) {
  if (!open_) return -ENODEV;
  if (shm_ != nullptr) return on ? 0 : -ENOTSUP;
  NetnsGuard ns(netns_fd_);
  const int rc = on ? rte_eth_promiscuous_enable(port_id_) : rte_eth_promiscuous_disable(port_id_);
  if (rc != 0)
    DROCE_LOG(NOTICE, net, "port %u (%s): promiscuous %s: %s", port_id_, driver_name_.c_str(),
              on ? "on" : "off", rte_strerror(-rc));
  return rc;
}

int Port::stop() {
  if (!open_) return -ENODEV;
  if (!started_) return 0;
  if (shm_ != nullptr) {
    shm_->set_enabled(false);
    started_ = false;
    return 0;
  }
  NetnsGuard ns(netns_fd_);
  const int rc = rte_eth_dev_stop(port_id_);
  if (rc != 0) {
    DROCE_LOG(ERR, net, "port %u (%s): stop: %s", port_id_, driver_name_.c_str(),
              rte_strerror(-rc));
    return rc;
  }
  started_ = false;
  return 0;
}

int Port::start() {
  if (!open_ || !configured_) return -ENODEV;
  if (started_) return 0;
  if (shm_ != nullptr) {
    shm_->set_enabled(true);
    started_ = true;
    return 0;
  }
  NetnsGuard ns(netns_fd_);
  const int rc = rte_eth_dev_start(port_id_);
  if (rc != 0) {
    DROCE_LOG(ERR, net, "port %u (%s): start: %s", port_id_, driver_name_.c_str(),
              rte_strerror(-rc));
    return rc;
  }
  started_ = true;
  return 0;
}

void Port::drain_rx() {
  rte_mbuf* burst[32];
  for (uint16_t q = 0; q < rx_queues_; ++q) {
    // Bounded: a peer that keeps sending cannot hold close() forever.
    for (int i = 0; i < 4096; ++i) {
      const uint16_t n = rx_burst(q, burst, 32);
      if (n == 0) break;
      rte_pktmbuf_free_bulk(burst, n);
    }
  }
}

int Port::close() {
  if (!open_) return 0;
  int rc;
  {
    NetnsGuard ns(netns_fd_);
    rc = close_in_namespace();
  }
  if (netns_fd_ >= 0) ::close(netns_fd_);
  netns_fd_ = -1;
  return rc;
}

int Port::close_in_namespace() {
  int first = 0;
  auto note = [&first](int rc) {
    if (rc < 0 && first == 0) first = rc;
  };
  // memif's control channel runs on EAL's interrupt thread, and in DPDK 22.11 a
  // callback there can still be at work on a device (its own disconnect, or
  // the peer's answer to ours, when both ends are in this process) while the
  // device is stopped and freed here: seen as a SIGSEGV inside memif's
  // callback, about one run in ten of droce-engine-demo under load. Let each
  // step's callbacks finish before the next.
  const bool settle = driver_name_ == "net_memif";
  if (settle) (void)eal_interrupt_barrier();
  if (shm_ != nullptr) {
    drain_rx();
    shm_.reset();  // the peer sees the link go down
    started_ = configured_ = hot_plugged_ = false;
  }
  if (started_) {
    drain_rx();
    const int rc = rte_eth_dev_stop(port_id_);
    if (rc != 0)
      DROCE_LOG(ERR, net, "port %u (%s): stop: %s", port_id_, driver_name_.c_str(),
                rte_strerror(-rc));
    note(rc);
    started_ = false;
    if (settle) (void)eal_interrupt_barrier();
  }
  if (lsc_registered_) {
    int rc = 0;
    // -EAGAIN while the callback runs on EAL's interrupt thread.
    for (int i = 0; i < 1000; ++i) {
      rc = rte_eth_dev_callback_unregister(port_id_, RTE_ETH_EVENT_INTR_LSC, &Port::lsc_callback,
                                           this);
      if (rc != -EAGAIN) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (rc != 0)
      DROCE_LOG(ERR, net, "port %u: LSC callback unregister: %s", port_id_, rte_strerror(-rc));
    note(rc);
    lsc_registered_ = false;
  }
  if (configured_ || hot_plugged_) {
    const int rc = rte_eth_dev_close(port_id_);
    if (rc != 0)
      DROCE_LOG(ERR, net, "port %u (%s): close: %s", port_id_, driver_name_.c_str(),
                rte_strerror(-rc));
    note(rc);
    configured_ = false;
  }
  if (hot_plugged_ && !device_name_.empty()) {
    const int rc = rte_eal_hotplug_remove(bus_name_.empty() ? "vdev" : bus_name_.c_str(),
                                          device_name_.c_str());
    if (rc != 0)
      DROCE_LOG(ERR, net, "%s: detach: %s", device_name_.c_str(), rte_strerror(-rc));
    note(rc);
    if (settle) (void)eal_interrupt_barrier();
  }
  shared_.reset();  // the last of a ring pair frees the rings and what is in them
  if (owns_pool_ && pool_ != nullptr) {
    const unsigned in_use = rte_mempool_in_use_count(pool_);
    if (in_use == 0) {
      rte_mempool_free(pool_);
    } else {
      DROCE_LOG(ERR, net, "port %u: %u mbufs of pool %s still held; the pool is leaked", port_id_,
                in_use, pool_->name);
      note(-EBUSY);
    }
  }
  pool_ = nullptr;
  owns_pool_ = false;
  if (ctl_fd_ >= 0) ::close(ctl_fd_);
  ctl_fd_ = -1;
  open_ = false;
  return first;
}

// ---------------------------------------------------------------- counters

int Port::stats(rte_eth_stats* out) const {
  if (!open_) return -ENODEV;
  if (shm_ != nullptr) {
    const ShmLinkCounters& c = shm_->counters();
    *out = rte_eth_stats{};
    out->ipackets = out->q_ipackets[0] = c.rx_frames.load(std::memory_order_relaxed);
    out->ibytes = out->q_ibytes[0] = c.rx_bytes.load(std::memory_order_relaxed);
    out->opackets = out->q_opackets[0] = c.tx_frames.load(std::memory_order_relaxed);
    out->obytes = out->q_obytes[0] = c.tx_bytes.load(std::memory_order_relaxed);
    out->rx_nombuf = c.rx_no_mbuf.load(std::memory_order_relaxed);
    out->ierrors = out->q_errors[0] =
        c.rx_bad_slot.load(std::memory_order_relaxed) + c.rx_bad_ring.load(std::memory_order_relaxed);
    out->oerrors = c.tx_too_long.load(std::memory_order_relaxed);
    return 0;
  }
  return rte_eth_stats_get(port_id_, out);
}

int Port::queue_stats(uint16_t queue, PortQueueStats* out) const {
  if (!open_) return -ENODEV;
  if (queue >= std::max(rx_queues_, tx_queues_)) return -EINVAL;
  rte_eth_stats s{};
  const int rc = stats(&s);
  if (rc != 0) return rc;
  PortQueueStats q;
  if (queue < RTE_ETHDEV_QUEUE_STAT_CNTRS) {
    q.rx_packets = s.q_ipackets[queue];
    q.rx_bytes = s.q_ibytes[queue];
    q.tx_packets = s.q_opackets[queue];
    q.tx_bytes = s.q_obytes[queue];
    q.rx_errors = s.q_errors[queue];
  }
  q.tx_not_taken = counters_[queue].tx_not_taken.load(std::memory_order_relaxed);
  q.tx_short_bursts = counters_[queue].tx_short_bursts.load(std::memory_order_relaxed);
  *out = q;
  return 0;
}

int Port::xstat(const char* name, uint64_t* value) const {
  if (!open_) return -ENODEV;
  if (shm_ != nullptr) {
    std::vector<std::pair<std::string, uint64_t>> all;
    xstats(&all);
    for (const auto& [n, v] : all) {
      if (n == name) {
        *value = v;
        return 0;
      }
    }
    return -EINVAL;
  }
  uint64_t id = 0;
  int rc = rte_eth_xstats_get_id_by_name(port_id_, name, &id);
  if (rc != 0) return rc;
  uint64_t v = 0;
  rc = rte_eth_xstats_get_by_id(port_id_, &id, &v, 1);
  if (rc < 0) return rc;
  if (rc != 1) return -EIO;
  *value = v;
  return 0;
}

int Port::xstats(std::vector<std::pair<std::string, uint64_t>>* out) const {
  if (!open_) return -ENODEV;
  if (shm_ != nullptr) {
    const ShmLinkCounters& c = shm_->counters();
    auto v = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
    *out = {{"rx_good_packets", v(c.rx_frames)},  {"rx_good_bytes", v(c.rx_bytes)},
            {"tx_good_packets", v(c.tx_frames)},  {"tx_good_bytes", v(c.tx_bytes)},
            {"tx_ring_full", v(c.tx_ring_full)},  {"tx_too_long", v(c.tx_too_long)},
            {"rx_mbuf_allocation_errors", v(c.rx_no_mbuf)}, {"rx_bad_slot", v(c.rx_bad_slot)},
            {"rx_bad_ring", v(c.rx_bad_ring)},    {"wakeups_sent", v(c.wakeups_sent)},
            {"wakeups_deferred", v(c.wakeups_deferred)}, {"wakeups_late", v(c.wakeups_late)},
            {"connects", v(c.connects)},          {"disconnects", v(c.disconnects)},
            {"refused_peers", v(c.refused_peers)},  {"tx_in_place", v(c.tx_in_place)},
            {"tx_void_slots", v(c.tx_void_slots)},  {"tx_stale", v(c.tx_stale)},
            {"tx_ring_used", shm_->tx_ring_used()},
            {"rx_ring_used", shm_->rx_ring_used()},
            {"rx_ring_lent", shm_->rx_ring_lent()},
            {"tx_ring_unpublished", shm_->tx_ring_unpublished()}};
    return 0;
  }
  const int n = rte_eth_xstats_get_names(port_id_, nullptr, 0);
  if (n < 0) return n;
  std::vector<rte_eth_xstat_name> names(static_cast<size_t>(n));
  std::vector<rte_eth_xstat> values(static_cast<size_t>(n));
  if (rte_eth_xstats_get_names(port_id_, names.data(), static_cast<unsigned>(n)) != n) return -EIO;
  if (rte_eth_xstats_get(port_id_, values.data(), static_cast<unsigned>(n)) != n) return -EIO;
  out->clear();
  out->reserve(static_cast<size_t>(n));
  for (const auto& v : values)
    if (v.id < names.size()) out->emplace_back(names[v.id].name, v.value);
  return 0;
}

int Port::reset_stats() {
  if (!open_) return -ENODEV;
  for (uint16_t q = 0; q < std::max(rx_queues_, tx_queues_); ++q) {
    counters_[q].tx_not_taken.store(0, std::memory_order_relaxed);
    counters_[q].tx_short_bursts.store(0, std::memory_order_relaxed);
  }
  if (shm_ != nullptr) {
    shm_->reset_counters();
    return 0;
  }
  return rte_eth_stats_reset(port_id_);
}

std::string Port::describe() const {
  char buf[768];
  const LinkState l = link();
  std::snprintf(
      buf, sizeof(buf),
      "port %u %s (%s%s%s%s) mac %02x:%02x:%02x:%02x:%02x:%02x mtu %u; queues rx %u x %u, tx %u "
      "x %u; link %s %u Mb/s (%s); offloads rx-cksum ip %d udp %d, tx-cksum ip %d udp %d, "
      "multi-seg %d, scatter %d, rss 0x%llx%s, rte_flow udp 4791->queue %s; multicast %s; "
      "promiscuous %d",
      port_id_, device_name_.c_str(), driver_name_.c_str(), kernel_netdev_ ? ", netdev " : "",
      ifname_.c_str(), hot_plugged_ ? ", hot-plugged" : "", mac_[0], mac_[1], mac_[2], mac_[3],
      mac_[4], mac_[5], mtu(), rx_queues_, rx_ring_size_, tx_queues_, tx_ring_size_,
      l.up ? "up" : "down", l.speed_mbps, lsc_enabled_ ? "LSC interrupt" : "polled",
      caps_.rx_ipv4_checksum, caps_.rx_udp_checksum, caps_.tx_ipv4_checksum, caps_.tx_udp_checksum,
      caps_.tx_multi_segs, caps_.rx_scatter, static_cast<unsigned long long>(caps_.rss_hash_types),
      rss_enabled_ ? " (on)" : "",
      caps_.flow_udp_4791_to_queue == 0 ? "accepted" : rte_strerror(-caps_.flow_udp_4791_to_queue),
      to_string(multicast_mode_), promiscuous());
  return buf;
}

std::string devarg_value(std::string_view devargs, std::string_view key) {
  size_t at = 0;
  while (at <= devargs.size()) {
    size_t end = devargs.find(',', at);
    if (end == std::string_view::npos) end = devargs.size();
    std::string_view kv = devargs.substr(at, end - at);
    if (kv.size() > key.size() && kv.substr(0, key.size()) == key && kv[key.size()] == '=')
      return std::string(kv.substr(key.size() + 1));
    at = end + 1;
  }
  return {};
}

}  // namespace droce::net
