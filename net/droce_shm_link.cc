#include "net/droce_shm_link.h"

#include <rte_errno.h>
#include <rte_lcore.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "core/log.h"

namespace droce::net {

namespace {

constexpr uint32_t kL2Overhead = RTE_ETHER_HDR_LEN + RTE_VLAN_HLEN;

}  // namespace

bool DroceShmLink::claims(std::string_view devargs) { return names_driver(devargs, "droce_shm"); }

int DroceShmLink::open(std::string_view devargs, const PortConfig& cfg, std::unique_ptr<Link>* out) {
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
      (cfg.mtu != 0 && uint32_t{cfg.mtu} + kL2Overhead > ShmLink::kMaxFrame)) {
    DROCE_LOG(ERR, net, "%s: needs socket=PATH, role=server|client, and an MTU of at most %u", name.c_str(),
              ShmLink::kMaxFrame - kL2Overhead);
    return -EINVAL;
  }
  std::unique_ptr<DroceShmLink> p(new DroceShmLink());
  LinkInfo& info = p->info_;
  info.driver_name = "droce_shm";
  info.device_name = name;
  p->open_ = true;
  if (const std::string mac = devarg_value(devargs, "mac"); !mac.empty()) {
    if (rte_ether_unformat_addr(mac.c_str(), reinterpret_cast<rte_ether_addr*>(info.mac.data())) != 0) {
      DROCE_LOG(ERR, net, "%s: bad mac=%s", name.c_str(), mac.c_str());
      return -EINVAL;
    }
  } else {
    // Locally administered, unicast, and different at the two ends of one link.
    uint64_t h = 1469598103934665603ull;
    for (const char ch : lc.socket + (lc.server ? "/s" : "/c")) h = (h ^ uint8_t(ch)) * 1099511628211ull;
    info.mac = {0x02, uint8_t(h >> 32), uint8_t(h >> 24), uint8_t(h >> 16), uint8_t(h >> 8), uint8_t(h)};
  }
  info.rx_queues = info.tx_queues = 1;
  info.rx_ring_size = info.tx_ring_size = static_cast<uint16_t>(std::min<uint32_t>(lc.slots, UINT16_MAX));
  info.caps.max_rx_queues = info.caps.max_tx_queues = 1;
  info.caps.tx_multi_segs = true;  // a chain is copied into one slot
  info.caps.min_mtu = 68;
  info.caps.max_mtu = static_cast<uint16_t>(ShmLink::kMaxFrame - kL2Overhead);
  info.caps.max_rx_pktlen = ShmLink::kMaxFrame;
  info.caps.no_icrc = !lc.icrc;
  info.tx_offloads = RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
  p->asked_mtu_ = cfg.mtu != 0 ? cfg.mtu : uint16_t{RTE_ETHER_MTU};
  info.multicast_mode = MulticastMode::unfiltered;  // a wire: what the peer sends arrives
  info.rx_intr_enabled = cfg.rx_interrupts;
  // Mbufs of the largest VLAN-tagged frame of the MTU, FCS included.
  if (int rc = p->adopt_pool(cfg, "droce_shm", 2 * (2 * lc.slots) + rte_lcore_count() * 256,
                             uint32_t{p->asked_mtu_} + kL2Overhead + RTE_ETHER_CRC_LEN);
      rc != 0)
    return rc;
  if (int rc = ShmLink::open(lc, &p->shm_); rc != 0) {
    p->close();
    return rc;
  }
  p->started_ = true;
  *out = std::move(p);
  return 0;
}

DroceShmLink::~DroceShmLink() { DroceShmLink::close(); }

int DroceShmLink::rx_interrupt_fd(uint16_t queue) const {
  if (!open_ || !info_.rx_intr_enabled || queue != 0) return -ENOTSUP;
  return shm_->wake_fd();
}

int DroceShmLink::rx_interrupt_arm(uint16_t queue, bool on) {
  if (!open_ || !info_.rx_intr_enabled || queue >= info_.rx_queues) return -ENOTSUP;
  shm_->set_sleeping(on);
  return 0;
}

void DroceShmLink::rx_interrupt_ack(uint16_t /*queue*/) {
  if (shm_ != nullptr) shm_->ack_wake();  // its own eventfd, non-blocking: one read
}

LinkState DroceShmLink::link() const {
  LinkState s;
  s.up = shm_ != nullptr && started_ && shm_->connected();
  s.full_duplex = s.up;
  return s;
}

int DroceShmLink::set_mtu(uint16_t mtu) {
  if (!open_) return -ENODEV;
  info_.mtu_result = mtu < info_.caps.min_mtu || mtu > info_.caps.max_mtu ? -EINVAL : 0;
  if (info_.mtu_result == 0) asked_mtu_ = mtu;
  return info_.mtu_result;
}

uint16_t DroceShmLink::wire_mtu() const {
  if (!open_) return 0;
  // Frames carry what is sent: the MTU asked for, as far as one mbuf holds it.
  uint32_t m = mtu();
  if (info_.pool != nullptr) {
    const uint32_t room = rte_pktmbuf_data_room_size(info_.pool) - RTE_PKTMBUF_HEADROOM;
    m = std::min(m, room - kL2Overhead);
  }
  return static_cast<uint16_t>(m);
}

int DroceShmLink::set_promiscuous(bool on) {
  if (!open_) return -ENODEV;
  return on ? 0 : -ENOTSUP;
}

int DroceShmLink::stop() {
  if (!open_) return -ENODEV;
  if (!started_) return 0;
  shm_->set_enabled(false);
  started_ = false;
  return 0;
}

int DroceShmLink::start() {
  if (!open_) return -ENODEV;
  if (started_) return 0;
  shm_->set_enabled(true);
  started_ = true;
  return 0;
}

int DroceShmLink::close() {
  if (!open_) return 0;
  if (shm_ != nullptr) {
    drain_rx();
    shm_.reset();  // the peer sees the link go down
  }
  started_ = false;
  const int rc = release_pool();
  open_ = false;
  return rc;
}

int DroceShmLink::stats(rte_eth_stats* out) const {
  if (!open_) return -ENODEV;
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

int DroceShmLink::xstats(std::vector<std::pair<std::string, uint64_t>>* out) const {
  if (!open_) return -ENODEV;
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

int DroceShmLink::reset_stats() {
  if (!open_) return -ENODEV;
  shm_->reset_counters();
  return 0;
}

void DroceShmLink::set_defer_wakes(bool on) {
  if (shm_ != nullptr) shm_->set_defer_wakes(on);
}

void DroceShmLink::flush_wake() {
  if (shm_ != nullptr) shm_->flush_wake();
}

void DroceShmLink::flush_wake_if_late(uint64_t now_ns) {
  if (shm_ != nullptr) shm_->flush_wake_if_late(now_ns);
}

void DroceShmLink::publish_running(int cpu, uint64_t awake_ns) {
  if (shm_ != nullptr) shm_->publish_running(cpu, awake_ns);
}

}  // namespace droce::net
