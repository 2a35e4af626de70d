#include "net/link.h"

#include <net/if.h>
#include <sys/ioctl.h>

#include <rte_errno.h>
#include <rte_lcore.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/log.h"

namespace droce::net {

const char* to_string(MulticastMode m) {
  switch (m) {
    case MulticastMode::none: return "none";
    case MulticastMode::exact_list: return "exact_list";
    case MulticastMode::allmulticast: return "allmulticast";
    case MulticastMode::unfiltered: return "unfiltered";
  }
  return "?";
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

bool names_driver(std::string_view devargs, std::string_view driver) {
  return devargs.substr(0, devargs.find(',')).starts_with(driver);
}

bool Link::take_link_change() {
  // A raised event alone is not enough: net_tap (22.11) sets RTE_ETH_DEV_INTR_LSC
  // and updates the link from its netlink socket but never raises the event.
  const bool flagged = take_link_event();
  const LinkState now = link();
  if (now == last_link_ && !flagged) return false;
  last_link_ = now;
  return true;
}

int netdev_ioctl(int fd, unsigned long req, const std::string& ifname, ifreq* ifr) {
  std::memset(ifr, 0, sizeof *ifr);
  std::snprintf(ifr->ifr_name, sizeof ifr->ifr_name, "%s", ifname.c_str());
  if (fd < 0 || ifname.empty()) return -ENODEV;
  return ::ioctl(fd, req, ifr) == 0 ? 0 : -errno;
}

int netdev_mtu_of(int fd, const std::string& ifname) {
  ifreq ifr;
  if (int rc = netdev_ioctl(fd, SIOCGIFMTU, ifname, &ifr); rc != 0) return rc;
  return ifr.ifr_mtu;
}

int netdev_running(int fd, const std::string& ifname) {
  ifreq ifr;
  if (int rc = netdev_ioctl(fd, SIOCGIFFLAGS, ifname, &ifr); rc != 0) return rc;
  return (ifr.ifr_flags & IFF_UP) != 0 && (ifr.ifr_flags & IFF_RUNNING) != 0;
}

int Link::xstat(const char* name, uint64_t* value) const {
  std::vector<std::pair<std::string, uint64_t>> all;
  if (const int rc = xstats(&all); rc != 0) return rc;
  for (const auto& [n, v] : all) {
    if (n == name) {
      *value = v;
      return 0;
    }
  }
  return -EINVAL;
}

void Link::drain_rx() {
  rte_mbuf* burst[32];
  for (uint16_t q = 0; q < info_.rx_queues; ++q) {
    // Bounded: a peer that keeps sending cannot hold close() forever.
    for (int i = 0; i < 4096; ++i) {
      const uint16_t n = rx_burst(q, burst, 32);
      if (n == 0) break;
      rte_pktmbuf_free_bulk(burst, n);
    }
  }
}

int Link::adopt_pool(const PortConfig& cfg, const char* prefix, unsigned default_count, uint32_t frame) {
  if (cfg.pool != nullptr) {
    info_.pool = cfg.pool;
    return 0;
  }
  static std::atomic<unsigned> serial{0};
  const uint32_t room = std::max<uint32_t>(cfg.mbuf_data_room, frame);
  const unsigned count = cfg.pool_size != 0 ? cfg.pool_size : default_count;
  char name[RTE_MEMPOOL_NAMESIZE];
  std::snprintf(name, sizeof name, "%s_%u", prefix, serial.fetch_add(1, std::memory_order_relaxed));
  info_.pool = rte_pktmbuf_pool_create(name, count, std::min(256u, count * 2 / 3), 0,
                                       static_cast<uint16_t>(room + RTE_PKTMBUF_HEADROOM), int(rte_socket_id()));
  if (info_.pool == nullptr) {
    const int err = rte_errno;
    DROCE_LOG(ERR, net, "%s: cannot create mbuf pool (%u x %u bytes): %s", info_.device_name.c_str(), count, room,
              rte_strerror(err));
    return -err;
  }
  info_.owns_pool = true;
  return 0;
}

int Link::release_pool() {
  int rc = 0;
  if (info_.owns_pool && info_.pool != nullptr) {
    const unsigned in_use = rte_mempool_in_use_count(info_.pool);
    if (in_use == 0) {
      rte_mempool_free(info_.pool);
    } else {
      DROCE_LOG(ERR, net, "port %u: %u mbufs of pool %s still held; the pool is leaked", info_.port_id, in_use,
                info_.pool->name);
      rc = -EBUSY;
    }
  }
  info_.pool = nullptr;
  info_.owns_pool = false;
  return rc;
}

}  // namespace droce::net
