#include "net/link.h"

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
