#include "net/port.h"

#include <algorithm>
#include <cstdio>

#include <rte_errno.h>

#include "core/log.h"
#include "net/droce_shm_link.h"
#include "net/packet_link.h"

namespace droce::net {

namespace {

// The kinds of link a device string can name, asked in order: droce's own by
// their name, then DPDK's ethdevs, which take whatever is left.
struct LinkKind {
  bool (*claims)(std::string_view devargs);
  int (*open)(std::string_view devargs, const PortConfig& cfg, std::unique_ptr<Link>* out);
};

constexpr LinkKind kLinkKinds[] = {
    {&DroceShmLink::claims, &DroceShmLink::open},
    {&PacketLink::claims, &PacketLink::open},
    {&EthdevLink::claims, &EthdevLink::open_device},
};

}  // namespace

Port::Port(std::unique_ptr<Link> link)
    : link_(std::move(link)),
      counters_(std::make_unique<PortQueueCounters[]>(std::max(info().rx_queues, info().tx_queues))) {}

Port::~Port() { close(); }

int Port::adopt(int rc, std::unique_ptr<Link> link, std::unique_ptr<Port>* out) {
  if (rc != 0) return rc;
  std::unique_ptr<Port> p(new Port(std::move(link)));
  DROCE_LOG(INFO, net, "%s", p->describe().c_str());
  *out = std::move(p);
  return 0;
}

int Port::open_port_id(uint16_t port_id, const PortConfig& cfg, std::unique_ptr<Port>* out) {
  std::unique_ptr<Link> link;
  const int rc = EthdevLink::open_port_id(port_id, cfg, &link);
  return adopt(rc, std::move(link), out);
}

int Port::open_device(std::string_view devargs, const PortConfig& cfg, std::unique_ptr<Port>* out) {
  for (const LinkKind& kind : kLinkKinds) {
    if (!kind.claims(devargs)) continue;
    std::unique_ptr<Link> link;
    const int rc = kind.open(devargs, cfg, &link);
    return adopt(rc, std::move(link), out);
  }
  return -EINVAL;
}

DevicePlan Port::plan_device(std::string_view devargs, const PortConfig& cfg) {
  return EthdevLink::plan_device(devargs, cfg);
}

int Port::open_ring_pair(std::string_view name, const PortConfig& cfg, std::unique_ptr<Port>* a,
                         std::unique_ptr<Port>* b, unsigned ring_size) {
  std::unique_ptr<Link> la;
  std::unique_ptr<Link> lb;
  const int rc = EthdevLink::open_ring_pair(name, cfg, &la, &lb, ring_size);
  if (rc != 0) return rc;
  std::unique_ptr<Port> pa;
  std::unique_ptr<Port> pb;
  (void)adopt(0, std::move(la), &pa);
  (void)adopt(0, std::move(lb), &pb);
  *a = std::move(pa);
  *b = std::move(pb);
  return 0;
}

int Port::queue_stats(uint16_t queue, PortQueueStats* out) const {
  if (!link_->is_open()) return -ENODEV;
  if (queue >= std::max(rx_queues(), tx_queues())) return -EINVAL;
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

int Port::reset_stats() {
  if (!link_->is_open()) return -ENODEV;
  for (uint16_t q = 0; q < std::max(rx_queues(), tx_queues()); ++q) {
    counters_[q].tx_not_taken.store(0, std::memory_order_relaxed);
    counters_[q].tx_short_bursts.store(0, std::memory_order_relaxed);
  }
  return link_->reset_stats();
}

std::string Port::describe() const {
  char buf[768];
  const LinkState l = link();
  const LinkInfo& i = info();
  const PortCapabilities& caps = i.caps;
  std::snprintf(
      buf, sizeof(buf),
      "port %u %s (%s%s%s%s) mac %02x:%02x:%02x:%02x:%02x:%02x mtu %u; queues rx %u x %u, tx %u "
      "x %u; link %s %u Mb/s (%s); offloads rx-cksum ip %d udp %d, tx-cksum ip %d udp %d, "
      "multi-seg %d, scatter %d, rss 0x%llx%s, rte_flow udp 4791->queue %s; multicast %s; "
      "promiscuous %d",
      i.port_id, i.device_name.c_str(), i.driver_name.c_str(), i.kernel_netdev ? ", netdev " : "",
      i.ifname.c_str(), i.hot_plugged ? ", hot-plugged" : "", i.mac[0], i.mac[1], i.mac[2], i.mac[3],
      i.mac[4], i.mac[5], mtu(), i.rx_queues, i.rx_ring_size, i.tx_queues, i.tx_ring_size,
      l.up ? "up" : "down", l.speed_mbps, i.lsc_enabled ? "LSC interrupt" : "polled",
      caps.rx_ipv4_checksum, caps.rx_udp_checksum, caps.tx_ipv4_checksum, caps.tx_udp_checksum,
      caps.tx_multi_segs, caps.rx_scatter, static_cast<unsigned long long>(caps.rss_hash_types),
      i.rss_enabled ? " (on)" : "",
      caps.flow_udp_4791_to_queue == 0 ? "accepted" : rte_strerror(-caps.flow_udp_4791_to_queue),
      to_string(i.multicast_mode), promiscuous());
  return buf;
}

}  // namespace droce::net
