#include "net/ethdev_link.h"

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
//     chained, which DPDK 22.11's memif gets wrong (EthdevLink::plan_device).
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

// The rings of a net_ring pair: freed, with any frames still in them, when
// the last port of the pair lets go.
struct EthdevLink::Rings {
  std::vector<rte_ring*> rings;
  ~Rings() {
    for (rte_ring* r : rings) {
      void* m = nullptr;
      while (rte_ring_dequeue(r, &m) == 0) rte_pktmbuf_free(static_cast<rte_mbuf*>(m));
      rte_ring_free(r);
    }
  }
};

// ---------------------------------------------------------------- opening

int EthdevLink::open_port_id(uint16_t port_id, const PortConfig& cfg, std::unique_ptr<Link>* out) {
  if (!rte_eth_dev_is_valid_port(port_id)) {
    DROCE_LOG(ERR, net, "port %u: no such ethdev", port_id);
    return -ENODEV;
  }
  return open_as_link(port_id, cfg, false, out);
}

bool EthdevLink::claims(std::string_view /*devargs*/) { return true; }

DevicePlan EthdevLink::plan_device(std::string_view devargs, const PortConfig& cfg) {
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

int EthdevLink::open_device(std::string_view devargs, const PortConfig& asked, std::unique_ptr<Link>* out) {
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
  return open_as_link(port_id, cfg, true, out);
}

int EthdevLink::open_ring_pair(std::string_view name, const PortConfig& cfg, std::unique_ptr<Link>* a,
                               std::unique_ptr<Link>* b, unsigned ring_size) {
  if (!rte_is_power_of_2(ring_size) || cfg.rx_queues != cfg.tx_queues || cfg.rx_queues == 0 ||
      cfg.rx_queues > RTE_PMD_RING_MAX_RX_RINGS)
    return -EINVAL;
  const FromRingsFn from_rings = from_rings_fn();
  if (from_rings == nullptr) {
    DROCE_LOG(ERR, net, "the net_ring driver is not loaded (rte_eth_from_rings not found)");
    return -ENOTSUP;
  }
  const uint16_t nq = cfg.rx_queues;
  auto shared = std::make_shared<Rings>();
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
  std::unique_ptr<EthdevLink> port_a;
  int rc = open_impl(static_cast<uint16_t>(pa), cfg, true, &port_a);
  if (rc != 0) return rc;  // open_impl detached A
  port_a->rings_ = shared;
  const int pb = from_rings(name_b.c_str(), a_to_b.data(), nq, b_to_a.data(), nq,
                                    SOCKET_ID_ANY);
  if (pb < 0) {
    const int err = rte_errno;
    DROCE_LOG(ERR, net, "rte_eth_from_rings(%s) failed: %s", name_b.c_str(), rte_strerror(err));
    return -err;  // port_a closes itself
  }
  std::unique_ptr<EthdevLink> port_b;
  rc = open_impl(static_cast<uint16_t>(pb), cfg, true, &port_b);
  if (rc != 0) return rc;
  port_b->rings_ = std::move(shared);
  *a = std::move(port_a);
  *b = std::move(port_b);
  return 0;
}

int EthdevLink::open_as_link(uint16_t port_id, const PortConfig& cfg, bool hot_plugged,
                             std::unique_ptr<Link>* out) {
  std::unique_ptr<EthdevLink> link;
  const int rc = open_impl(port_id, cfg, hot_plugged, &link);
  if (rc == 0) *out = std::move(link);
  return rc;
}

int EthdevLink::open_impl(uint16_t port_id, const PortConfig& cfg, bool hot_plugged,
                          std::unique_ptr<EthdevLink>* out) {
  std::unique_ptr<EthdevLink> p(new EthdevLink());
  p->info_.port_id = port_id;
  p->info_.hot_plugged = hot_plugged;
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
  *out = std::move(p);
  return 0;
}

int EthdevLink::setup(const PortConfig& cfg) {
  rte_eth_dev_info info{};
  int rc = rte_eth_dev_info_get(info_.port_id, &info);
  if (rc != 0) {
    DROCE_LOG(ERR, net, "port %u: rte_eth_dev_info_get: %s", info_.port_id, rte_strerror(-rc));
    return rc;
  }
  info_.driver_name = info.driver_name ? info.driver_name : "";
  if (info.device != nullptr) {
    info_.device_name = rte_dev_name(info.device);
    if (const rte_bus* bus = rte_dev_bus(info.device)) bus_name_ = rte_bus_name(bus);
  }

  // Identity of a kernel netdev underneath, looked up in this namespace.
  info_.kernel_netdev = is_kernel_netdev_driver(info_.driver_name);
  info_.kernel_sees_rx = info_.kernel_netdev && info_.driver_name != "net_af_xdp";
  if (info_.kernel_netdev) {
    link_follows_netdev_ = link_ignores_netdev(info_.driver_name);
    ctl_fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (ctl_fd_ >= 0 && info.if_index != 0) {
      ifreq ifr{};
      ifr.ifr_ifindex = static_cast<int>(info.if_index);
      if (ioctl(ctl_fd_, SIOCGIFNAME, &ifr) == 0) info_.ifname = ifr.ifr_name;
    }
    if (info_.ifname.empty() && info.device != nullptr) {
      const rte_devargs* da = rte_dev_devargs(info.device);
      if (da != nullptr && da->args != nullptr) info_.ifname = devarg_value(da->args, "iface");
    }
  }

  info_.caps.rx_offload_capa = info.rx_offload_capa;
  info_.caps.tx_offload_capa = info.tx_offload_capa;
  info_.caps.rx_ipv4_checksum = info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_IPV4_CKSUM;
  info_.caps.rx_udp_checksum = info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_UDP_CKSUM;
  info_.caps.tx_ipv4_checksum = info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_IPV4_CKSUM;
  info_.caps.tx_udp_checksum = info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_UDP_CKSUM;
  info_.caps.tx_multi_segs = info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
  info_.caps.rx_scatter = info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_SCATTER;
  info_.caps.rss_hash_types = info.flow_type_rss_offloads;
  info_.caps.lsc_interrupt = info.dev_flags != nullptr && (*info.dev_flags & RTE_ETH_DEV_INTR_LSC);
  info_.caps.max_rx_queues = info.max_rx_queues;
  info_.caps.max_tx_queues = info.max_tx_queues;
  info_.caps.min_mtu = info.min_mtu;
  info_.caps.max_mtu = info.max_mtu;
  if (info.device != nullptr) {
    const rte_devargs* da = rte_dev_devargs(info.device);
    const char* args = da != nullptr && da->args != nullptr ? da->args : "";
    frame_limit_ = device_frame_limit(info_.driver_name, args, info.max_mtu);
  }
  info_.caps.max_rx_pktlen = info.max_rx_pktlen;
  if (info.max_rx_queues == 0 || info.max_tx_queues == 0) {
    DROCE_LOG(ERR, net, "port %u (%s): reports no RX or TX queue", info_.port_id, info_.driver_name.c_str());
    return -EINVAL;
  }

  info_.rx_queues = std::clamp<uint16_t>(cfg.rx_queues, 1, info.max_rx_queues);
  info_.tx_queues = std::clamp<uint16_t>(cfg.tx_queues, 1, info.max_tx_queues);
  if (info_.rx_queues != cfg.rx_queues || info_.tx_queues != cfg.tx_queues)
    DROCE_LOG(NOTICE, net, "port %u (%s): queues %u/%u clamped to %u/%u (device maximum)",
              info_.port_id, info_.driver_name.c_str(), cfg.rx_queues, cfg.tx_queues, info_.rx_queues,
              info_.tx_queues);

  // Offloads: what was asked for and exists.
  if (cfg.enable_rx_checksum)
    info_.rx_offloads |=
        info.rx_offload_capa & (RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_UDP_CKSUM);
  if (cfg.enable_tx_checksum)
    info_.tx_offloads |=
        info.tx_offload_capa & (RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_UDP_CKSUM);
  info_.tx_offloads |= info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS;

  // Buffers: a whole frame per mbuf unless the device can scatter.
  const uint16_t want_mtu = cfg.mtu != 0 ? cfg.mtu : uint16_t{RTE_ETHER_MTU};
  uint32_t data_room = cfg.pool != nullptr
                           ? rte_pktmbuf_data_room_size(cfg.pool) - RTE_PKTMBUF_HEADROOM
                           : cfg.mbuf_data_room;
  if (frame_size(want_mtu) > data_room) {
    if (info_.caps.rx_scatter) {
      info_.rx_offloads |= RTE_ETH_RX_OFFLOAD_SCATTER;
    } else if (cfg.pool == nullptr) {
      data_room = std::min<uint32_t>(frame_size(want_mtu), UINT16_MAX - RTE_PKTMBUF_HEADROOM);
    } else {
      DROCE_LOG(WARNING, net,
                "port %u (%s): MTU %u frames do not fit the given pool's %u-byte mbufs and the "
                "device cannot scatter; long frames will be dropped",
                info_.port_id, info_.driver_name.c_str(), want_mtu, data_room);
    }
  }

  rte_eth_conf conf{};
  conf.rxmode.offloads = info_.rx_offloads;
  conf.txmode.offloads = info_.tx_offloads;
  if (cfg.enable_rss && info_.rx_queues > 1 && info.flow_type_rss_offloads != 0) {
    conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
    conf.rx_adv_conf.rss_conf.rss_hf =
        info.flow_type_rss_offloads & (RTE_ETH_RSS_IP | RTE_ETH_RSS_UDP);
    info_.rss_enabled = conf.rx_adv_conf.rss_conf.rss_hf != 0;
    if (!info_.rss_enabled) conf.rxmode.mq_mode = RTE_ETH_MQ_RX_NONE;
  }
  info_.lsc_enabled = cfg.lsc_interrupt && info_.caps.lsc_interrupt;
  conf.intr_conf.lsc = info_.lsc_enabled ? 1 : 0;
  conf.rxmode.mtu = cfg.mtu;
  conf.intr_conf.rxq = cfg.rx_interrupts ? 1 : 0;

  NetnsGuard ns(netns_fd_);
  rc = rte_eth_dev_configure(info_.port_id, info_.rx_queues, info_.tx_queues, &conf);
  if (rc != 0 && conf.intr_conf.rxq != 0) {
    DROCE_LOG(INFO, net, "port %u (%s): no RX interrupts (%s); polled only", info_.port_id, info_.driver_name.c_str(),
              rte_strerror(-rc));
    conf.intr_conf.rxq = 0;
    rc = rte_eth_dev_configure(info_.port_id, info_.rx_queues, info_.tx_queues, &conf);
  }
  info_.rx_intr_enabled = conf.intr_conf.rxq != 0;
  if (rc == -EINVAL && cfg.mtu != 0) {
    // The MTU may be what the device refused; configure with its default and
    // let set_mtu below report the refusal.
    conf.rxmode.mtu = 0;
    rc = rte_eth_dev_configure(info_.port_id, info_.rx_queues, info_.tx_queues, &conf);
  }
  if (rc != 0) {
    DROCE_LOG(ERR, net, "port %u (%s): rte_eth_dev_configure: %s", info_.port_id,
              info_.driver_name.c_str(), rte_strerror(-rc));
    return rc;
  }
  configured_ = true;

  uint16_t rxd = cfg.rx_ring_size;
  uint16_t txd = cfg.tx_ring_size;
  rc = rte_eth_dev_adjust_nb_rx_tx_desc(info_.port_id, &rxd, &txd);
  if (rc != 0) {
    DROCE_LOG(ERR, net, "port %u: ring sizes %u/%u refused: %s", info_.port_id, rxd, txd,
              rte_strerror(-rc));
    return rc;
  }
  info_.rx_ring_size = rxd;
  info_.tx_ring_size = txd;

  const int socket = rte_eth_dev_socket_id(info_.port_id) >= 0 ? rte_eth_dev_socket_id(info_.port_id)
                                                          : int(rte_socket_id());
  if (cfg.pool != nullptr) {
    info_.pool = cfg.pool;
  } else {
    unsigned cache = std::min<unsigned>(cfg.pool_cache, RTE_MEMPOOL_CACHE_MAX_SIZE);
    unsigned count = cfg.pool_size;
    if (count == 0)
      count = 2 * (unsigned{info_.rx_queues} * rxd + unsigned{info_.tx_queues} * txd) +
              rte_lcore_count() * cache;
    cache = std::min(cache, count * 2 / 3);  // rte_mempool: cache * 1.5 <= count
    char pname[RTE_MEMPOOL_NAMESIZE];
    std::snprintf(pname, sizeof(pname), "droce_p%u_%u", info_.port_id, next_pool_serial());
    info_.pool = rte_pktmbuf_pool_create(pname, count, cache, 0,
                                    static_cast<uint16_t>(data_room + RTE_PKTMBUF_HEADROOM),
                                    socket);
    if (info_.pool == nullptr) {
      const int err = rte_errno;
      DROCE_LOG(ERR, net, "port %u: cannot create mbuf pool %s (%u x %u bytes): %s", info_.port_id,
                pname, count, data_room, rte_strerror(err));
      return -err;
    }
    info_.owns_pool = true;
  }

  // net_af_xdp makes each queue's XSK socket in that queue's setup (DPDK
  // 22.11: eth_rx_queue_setup -> xsk_configure -> xsk_socket__create; probe,
  // configure and start make none): the one new AF_XDP socket a setup leaves
  // is that queue's (net/kernel_socket_discovery.h).
  const bool af_xdp = info_.driver_name == "net_af_xdp";
  std::vector<int> xsks;  // per RX queue; -1 where not exactly one appeared
  for (uint16_t q = 0; q < info_.rx_queues; ++q) {
    const auto before = af_xdp ? process_sockets() : std::vector<std::pair<int, ino_t>>{};
    rc = rte_eth_rx_queue_setup(info_.port_id, q, rxd, static_cast<unsigned>(socket), nullptr, info_.pool);
    if (rc != 0) {
      DROCE_LOG(ERR, net, "port %u: RX queue %u setup: %s", info_.port_id, q, rte_strerror(-rc));
      return rc;
    }
    if (af_xdp) {
      const std::vector<int> made = new_xdp_sockets(before, process_sockets());
      if (made.size() != 1)
        DROCE_LOG(NOTICE, net, "port %u (net_af_xdp): RX queue %u's setup left %zu new AF_XDP sockets, not 1",
                  info_.port_id, q, made.size());
      xsks.push_back(made.size() == 1 ? made[0] : -1);
    }
  }
  for (uint16_t q = 0; q < info_.tx_queues; ++q) {
    rc = rte_eth_tx_queue_setup(info_.port_id, q, txd, static_cast<unsigned>(socket), nullptr);
    if (rc != 0) {
      DROCE_LOG(ERR, net, "port %u: TX queue %u setup: %s", info_.port_id, q, rte_strerror(-rc));
      return rc;
    }
  }

  if (info_.lsc_enabled) {
    rc = rte_eth_dev_callback_register(info_.port_id, RTE_ETH_EVENT_INTR_LSC, &EthdevLink::lsc_callback, this);
    if (rc != 0) {
      DROCE_LOG(ERR, net, "port %u: cannot register the LSC callback: %s", info_.port_id,
                rte_strerror(-rc));
      return rc;
    }
    lsc_registered_ = true;
  }

  if (cfg.mtu != 0) {
    info_.mtu_result = rte_eth_dev_set_mtu(info_.port_id, cfg.mtu);
    asked_mtu_ = cfg.mtu;
    if (info_.mtu_result != 0)
      DROCE_LOG(NOTICE, net, "port %u (%s): set MTU %u: %s (MTU is %u)", info_.port_id,
                info_.driver_name.c_str(), cfg.mtu, rte_strerror(-info_.mtu_result), mtu());
  }

  rc = rte_eth_dev_start(info_.port_id);
  if (rc != 0) {
    DROCE_LOG(ERR, net, "port %u (%s): rte_eth_dev_start: %s", info_.port_id, info_.driver_name.c_str(),
              rte_strerror(-rc));
    return rc;
  }
  started_ = true;
  if (af_xdp) {
    // Every af_xdp port, wake-up or not: its rx_burst must not be able to block.
    rc = check_af_xdp_sockets(info_.port_id, xsks, info_.rx_queues, &info_.rx_intr_enabled);
    if (rc != 0) return rc;
    if (info_.rx_intr_enabled) {
      rx_intr_fds_ = xsks;
      rx_intr_is_eventfd_ = false;  // the queue's own socket: readable while frames wait
    }
  } else if (info_.rx_intr_enabled && info_.driver_name == "net_af_packet") {
    info_.rx_intr_enabled =
        af_packet_queue_sockets(info_.port_id, info_.rx_queues, info_.ifname, ctl_fd_, &rx_intr_fds_);
    rx_intr_is_eventfd_ = false;  // the queue's own socket: readable while frames wait
  } else if (info_.rx_intr_enabled) {
    // Drivers that accept intr_conf.rxq without giving a descriptor (memif in
    // 22.11 keeps its eventfds to itself) are polled only.
    for (uint16_t q = 0; q < info_.rx_queues; ++q) {
      const int fd = rte_eth_dev_rx_intr_ctl_q_get_fd(info_.port_id, q);
      if (fd < 0) {
        DROCE_LOG(INFO, net, "port %u (%s): RX queue %u has no interrupt descriptor; polled only", info_.port_id,
                  info_.driver_name.c_str(), q);
        info_.rx_intr_enabled = false;
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
  if (rte_eth_macaddr_get(info_.port_id, &mac) == 0) std::memcpy(info_.mac.data(), mac.addr_bytes, 6);
  probe_flow();
  last_link_ = link();
  return 0;
}

int EthdevLink::apply_rx_mode(const PortConfig& cfg) {
  int rc = cfg.promiscuous ? rte_eth_promiscuous_enable(info_.port_id)
                           : rte_eth_promiscuous_disable(info_.port_id);
  if (rc != 0) {
    if (cfg.promiscuous) {
      DROCE_LOG(ERR, net, "port %u (%s): cannot enable promiscuous mode: %s", info_.port_id,
                info_.driver_name.c_str(), rte_strerror(-rc));
      return rc;
    }
    DROCE_LOG(INFO, net, "port %u (%s): promiscuous mode cannot be turned off (%s); it is %s",
              info_.port_id, info_.driver_name.c_str(), rte_strerror(-rc), promiscuous() ? "on" : "off");
  }

  auto enable_allmulti = [&]() {
    const int r = rte_eth_allmulticast_enable(info_.port_id);
    info_.multicast_mode = r == 0 ? MulticastMode::allmulticast : MulticastMode::unfiltered;
    if (r != 0)
      DROCE_LOG(INFO, net, "port %u (%s): no multicast control (%s); delivering what it delivers",
                info_.port_id, info_.driver_name.c_str(), rte_strerror(-r));
  };
  if (cfg.allmulticast) {
    enable_allmulti();
  } else if (!cfg.multicast.empty()) {
    std::vector<rte_ether_addr> list(cfg.multicast.size());
    for (size_t i = 0; i < list.size(); ++i)
      std::memcpy(list[i].addr_bytes, cfg.multicast[i].data(), 6);
    rc = rte_eth_dev_set_mc_addr_list(info_.port_id, list.data(), static_cast<uint32_t>(list.size()));
    if (rc == 0) {
      info_.multicast_mode = MulticastMode::exact_list;
    } else {
      DROCE_LOG(INFO, net, "port %u (%s): no multicast list (%s); trying allmulticast", info_.port_id,
                info_.driver_name.c_str(), rte_strerror(-rc));
      enable_allmulti();
    }
  }
  return 0;
}

void EthdevLink::probe_flow() {
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
  const int rc = rte_flow_validate(info_.port_id, &attr, pattern, actions, &err);
  info_.caps.flow_udp_4791_to_queue = rc;
  DROCE_LOG(DEBUG, net, "port %u (%s): rte_flow UDP 4791 -> queue: %s%s%s", info_.port_id,
            info_.driver_name.c_str(), rc == 0 ? "accepted" : rte_strerror(-rc),
            err.message ? ": " : "", err.message ? err.message : "");
}

EthdevLink::~EthdevLink() { EthdevLink::close(); }

// ---------------------------------------------------------------- link

int EthdevLink::lsc_callback(uint16_t, rte_eth_event_type, void* arg, void*) {
  static_cast<EthdevLink*>(arg)->link_changed_.store(true, std::memory_order_release);
  return 0;
}

LinkState EthdevLink::link() const {
  LinkState s;
  rte_eth_link l{};
  if (!open_ || rte_eth_link_get_nowait(info_.port_id, &l) != 0) return s;
  s.up = l.link_status == RTE_ETH_LINK_UP;
  s.speed_mbps = (s.up && l.link_speed != RTE_ETH_SPEED_NUM_UNKNOWN) ? l.link_speed : 0;
  s.full_duplex = s.up && l.link_duplex == RTE_ETH_LINK_FULL_DUPLEX;
  s.autoneg = l.link_autoneg == RTE_ETH_LINK_AUTONEG;
  if (link_follows_netdev_ && s.up) return kernel_link(s);
  return s;
}

LinkState EthdevLink::kernel_link(const LinkState& pmd) const {
  // A netdev that cannot be asked: the PMD's word stands.
  return netdev_running(ctl_fd_, info_.ifname) != 0 ? pmd : LinkState{};
}

bool EthdevLink::take_link_event() {
  // With LSC configured, link() is an atomic read of the driver's copy.
  return info_.lsc_enabled && link_changed_.exchange(false, std::memory_order_acq_rel);
}

// ---------------------------------------------------------------- identity and control

uint16_t EthdevLink::mtu() const {
  uint16_t m = 0;
  if (open_) rte_eth_dev_get_mtu(info_.port_id, &m);
  return m;
}

int EthdevLink::netdev_mtu() const { return netdev_mtu_of(ctl_fd_, info_.ifname); }

uint16_t EthdevLink::wire_mtu() const {
  if (!open_) return 0;
  uint32_t m = mtu();
  // Links between processes have no MTU of their own (no MTU op; they carry
  // what is sent): the one asked for is the truth.
  const std::string& driver = info_.driver_name;
  if (info_.mtu_result == -ENOTSUP && asked_mtu_ != 0 && (driver == "net_memif" || driver == "net_ring"))
    m = asked_mtu_;
  if (info_.kernel_netdev)
    if (const int n = netdev_mtu(); n > 0) m = static_cast<uint32_t>(n);
  if (frame_limit_ > RTE_ETHER_HDR_LEN + RTE_VLAN_HLEN)
    m = std::min(m, frame_limit_ - RTE_ETHER_HDR_LEN - RTE_VLAN_HLEN);
  if (!info_.caps.rx_scatter && info_.pool != nullptr) {
    const uint32_t room = rte_pktmbuf_data_room_size(info_.pool) - RTE_PKTMBUF_HEADROOM;
    m = std::min(m, room - RTE_ETHER_HDR_LEN - RTE_VLAN_HLEN);
  }
  return static_cast<uint16_t>(m);
}

int EthdevLink::rx_interrupt_fd(uint16_t queue) const {
  if (!open_ || !info_.rx_intr_enabled || queue >= rx_intr_fds_.size()) return -ENOTSUP;
  return rx_intr_fds_[queue];
}

int EthdevLink::rx_interrupt_arm(uint16_t queue, bool on) {
  if (!open_ || !info_.rx_intr_enabled || queue >= info_.rx_queues) return -ENOTSUP;
  if (!rx_intr_is_eventfd_) return 0;  // readable while frames wait: nothing to arm
  return on ? rte_eth_dev_rx_intr_enable(info_.port_id, queue) : rte_eth_dev_rx_intr_disable(info_.port_id, queue);
}

void EthdevLink::rx_interrupt_ack(uint16_t queue) {
  const int fd = rx_interrupt_fd(queue);
  if (fd < 0 || !rx_intr_is_eventfd_) return;
  uint64_t count;
  // The descriptor may be blocking: read only what poll says is there.
  pollfd p{fd, POLLIN, 0};
  while (::poll(&p, 1, 0) == 1 && (p.revents & POLLIN) && ::read(fd, &count, sizeof count) == sizeof count) {
  }
}

bool EthdevLink::promiscuous() const {
  return open_ && rte_eth_promiscuous_get(info_.port_id) == 1;
}

int EthdevLink::set_mtu(uint16_t mtu) {
  if (!open_) return -ENODEV;
  NetnsGuard ns(netns_fd_);
  info_.mtu_result = rte_eth_dev_set_mtu(info_.port_id, mtu);
  asked_mtu_ = mtu;
  if (info_.mtu_result != 0)
    DROCE_LOG(NOTICE, net, "port %u (%s): set MTU %u: %s (MTU stays %u)", info_.port_id,
              info_.driver_name.c_str(), mtu, rte_strerror(-info_.mtu_result), this->mtu());
  return info_.mtu_result;
}

int EthdevLink::set_promiscuous(bool on) {
  if (!open_) return -ENODEV;
  NetnsGuard ns(netns_fd_);
  const int rc = on ? rte_eth_promiscuous_enable(info_.port_id) : rte_eth_promiscuous_disable(info_.port_id);
  if (rc != 0)
    DROCE_LOG(NOTICE, net, "port %u (%s): promiscuous %s: %s", info_.port_id, info_.driver_name.c_str(),
              on ? "on" : "off", rte_strerror(-rc));
  return rc;
}

int EthdevLink::stop() {
  if (!open_) return -ENODEV;
  if (!started_) return 0;
  NetnsGuard ns(netns_fd_);
  const int rc = rte_eth_dev_stop(info_.port_id);
  if (rc != 0) {
    DROCE_LOG(ERR, net, "port %u (%s): stop: %s", info_.port_id, info_.driver_name.c_str(),
              rte_strerror(-rc));
    return rc;
  }
  started_ = false;
  return 0;
}

int EthdevLink::start() {
  if (!open_ || !configured_) return -ENODEV;
  if (started_) return 0;
  NetnsGuard ns(netns_fd_);
  const int rc = rte_eth_dev_start(info_.port_id);
  if (rc != 0) {
    DROCE_LOG(ERR, net, "port %u (%s): start: %s", info_.port_id, info_.driver_name.c_str(),
              rte_strerror(-rc));
    return rc;
  }
  started_ = true;
  return 0;
}

int EthdevLink::close() {
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

int EthdevLink::close_in_namespace() {
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
  const bool settle = info_.driver_name == "net_memif";
  if (settle) (void)eal_interrupt_barrier();
  if (started_) {
    drain_rx();
    const int rc = rte_eth_dev_stop(info_.port_id);
    if (rc != 0)
      DROCE_LOG(ERR, net, "port %u (%s): stop: %s", info_.port_id, info_.driver_name.c_str(),
                rte_strerror(-rc));
    note(rc);
    started_ = false;
    if (settle) (void)eal_interrupt_barrier();
  }
  if (lsc_registered_) {
    int rc = 0;
    // -EAGAIN while the callback runs on EAL's interrupt thread.
    for (int i = 0; i < 1000; ++i) {
      rc = rte_eth_dev_callback_unregister(info_.port_id, RTE_ETH_EVENT_INTR_LSC, &EthdevLink::lsc_callback,
                                           this);
      if (rc != -EAGAIN) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (rc != 0)
      DROCE_LOG(ERR, net, "port %u: LSC callback unregister: %s", info_.port_id, rte_strerror(-rc));
    note(rc);
    lsc_registered_ = false;
  }
  if (configured_ || info_.hot_plugged) {
    const int rc = rte_eth_dev_close(info_.port_id);
    if (rc != 0)
      DROCE_LOG(ERR, net, "port %u (%s): close: %s", info_.port_id, info_.driver_name.c_str(),
                rte_strerror(-rc));
    note(rc);
    configured_ = false;
  }
  if (info_.hot_plugged && !info_.device_name.empty()) {
    const int rc = rte_eal_hotplug_remove(bus_name_.empty() ? "vdev" : bus_name_.c_str(),
                                          info_.device_name.c_str());
    if (rc != 0)
      DROCE_LOG(ERR, net, "%s: detach: %s", info_.device_name.c_str(), rte_strerror(-rc));
    note(rc);
    if (settle) (void)eal_interrupt_barrier();
  }
  rings_.reset();  // the last of a ring pair frees the rings and what is in them
  note(release_pool());
  if (ctl_fd_ >= 0) ::close(ctl_fd_);
  ctl_fd_ = -1;
  open_ = false;
  return first;
}

// ---------------------------------------------------------------- counters

int EthdevLink::stats(rte_eth_stats* out) const {
  if (!open_) return -ENODEV;
  return rte_eth_stats_get(info_.port_id, out);
}

int EthdevLink::xstat(const char* name, uint64_t* value) const {
  if (!open_) return -ENODEV;
  uint64_t id = 0;
  int rc = rte_eth_xstats_get_id_by_name(info_.port_id, name, &id);
  if (rc != 0) return rc;
  uint64_t v = 0;
  rc = rte_eth_xstats_get_by_id(info_.port_id, &id, &v, 1);
  if (rc < 0) return rc;
  if (rc != 1) return -EIO;
  *value = v;
  return 0;
}

int EthdevLink::xstats(std::vector<std::pair<std::string, uint64_t>>* out) const {
  if (!open_) return -ENODEV;
  const int n = rte_eth_xstats_get_names(info_.port_id, nullptr, 0);
  if (n < 0) return n;
  std::vector<rte_eth_xstat_name> names(static_cast<size_t>(n));
  std::vector<rte_eth_xstat> values(static_cast<size_t>(n));
  if (rte_eth_xstats_get_names(info_.port_id, names.data(), static_cast<unsigned>(n)) != n) return -EIO;
  if (rte_eth_xstats_get(info_.port_id, values.data(), static_cast<unsigned>(n)) != n) return -EIO;
  out->clear();
  out->reserve(static_cast<size_t>(n));
  for (const auto& v : values)
    if (v.id < names.size()) out->emplace_back(names[v.id].name, v.value);
  return 0;
}

int EthdevLink::reset_stats() {
  if (!open_) return -ENODEV;
  return rte_eth_stats_reset(info_.port_id);
}

}  // namespace droce::net
