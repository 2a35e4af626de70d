#include "apps/droced/device_core.h"

#include <rte_mbuf.h>

#include "core/endian.h"
#include "hw_offload/select.h"
#include "net/headers.h"

namespace droce::droced {

namespace {

// Frames for the neighbour table: ARP, and ICMPv6 (neighbour discovery) right
// after a plain IPv6 header. Cheap: two or three loads of the first segment.
bool is_neighbor_frame(const rte_mbuf* m) {
  const auto* p = rte_pktmbuf_mtod(m, const uint8_t*);
  size_t off = 12;
  if (m->data_len < off + 2) return false;
  uint16_t type = core::load_be16(p + off);
  if (type == net::kEtherTypeVlan) {
    off += 4;
    if (m->data_len < off + 2) return false;
    type = core::load_be16(p + off);
  }
  if (type == net::kEtherTypeArp) return true;
  return type == net::kEtherTypeIpv6 && m->data_len >= off + 2 + 7 && p[off + 2 + 6] == net::kIpProtoIcmpv6;
}

}  // namespace

DeviceCore::DeviceCore(const DeviceCoreConfig& cfg, int* rc) : cfg_(cfg), neighbors_(cfg.neighbor) {
  *rc = 0;
  if (cfg.port == nullptr || cfg.addresses.empty()) {
    *rc = -EINVAL;
    return;
  }
  link_ = std::make_unique<rocev2::PortQueueLink>(cfg.port, cfg.queue);
  link_->set_loopback_mac(cfg.port->mac());  // two clients of this droced talk through it
  rocev2::EngineConfig ec = cfg.engine;
  ec.pool = cfg.port->pool();
  ec.port = link_.get();
  ec.local_mac = cfg.port->mac();
  ec.local_ip = cfg.addresses.front();
  ec.local_ips = cfg.addresses;
  ec.offloads = hw_offload::select_offloads(*cfg.port);  // once, at start
  engine_ = std::make_unique<rocev2::Engine>(ec);
  for (const auto& ip : cfg.addresses) {
    if (int r = neighbors_.add_local(ip, cfg.port->mac(), cfg.vlan); r != 0) {
      *rc = r;
      return;
    }
  }
}

uint64_t DeviceCore::next_deadline() const {
  return std::min(engine_->next_deadline(), neighbors_.next_deadline_ns());
}

void DeviceCore::send_neighbor_frames() {
  neighbor_tx_.clear();
  neighbors_.drain_tx(&neighbor_tx_);
  for (const auto& f : neighbor_tx_) {
    rte_mbuf* m = rte_pktmbuf_alloc(cfg_.port->pool());
    // Short frames are padded to the Ethernet minimum.
    const size_t len = std::max<size_t>(f.size(), 60);
    char* d = m ? rte_pktmbuf_append(m, static_cast<uint16_t>(len)) : nullptr;
    if (d == nullptr) {
      if (m) rte_pktmbuf_free(m);
      ++counters_.neighbor_tx_dropped;
      continue;
    }
    std::memcpy(d, f.data(), f.size());
    std::memset(d + f.size(), 0, len - f.size());
    if (cfg_.port->tx_burst(cfg_.queue, &m, 1) != 1) {
      rte_pktmbuf_free(m);
      ++counters_.neighbor_tx_dropped;
      continue;
    }
    ++counters_.neighbor_frames_out;
  }
}

void DeviceCore::run_once(uint64_t now_ns) {
  rte_mbuf* rx[32];
  rte_mbuf* roce[32];
  const uint16_t n = cfg_.port->rx_burst(cfg_.queue, rx, 32);
  uint16_t k = 0;
  for (uint16_t i = 0; i < n; ++i) {
    if (!is_neighbor_frame(rx[i])) {
      roce[k++] = rx[i];
      continue;
    }
    uint8_t buf[512];
    const uint32_t len = rx[i]->pkt_len;
    if (len > sizeof buf) {
      ++counters_.oversize_control;
    } else {
      const auto* p = static_cast<const uint8_t*>(rte_pktmbuf_read(rx[i], 0, len, buf));
      ++counters_.neighbor_frames_in;
      neighbors_.handle_frame(std::span<const uint8_t>(p, len), now_ns);
    }
    rte_pktmbuf_free(rx[i]);
  }
  if (k != 0) engine_->rx_burst(roce, k, now_ns);
  if (link_->has_loopback()) {
    link_->take_loopback(&loopback_rx_);
    counters_.loopback_frames += loopback_rx_.size();
    for (size_t i = 0; i < loopback_rx_.size(); i += 32)
      engine_->rx_burst(loopback_rx_.data() + i, static_cast<uint16_t>(std::min<size_t>(32, loopback_rx_.size() - i)),
                        now_ns);
  }
  neighbors_.poll(now_ns);
  send_neighbor_frames();
  engine_->poll(now_ns);
}

net::ResolveStatus DeviceCore::resolve(rocev2::AddressVector* av, uint64_t now_ns) {
  if (av->sgid == net::IpAddr{}) av->sgid = cfg_.addresses.front();
  av->smac = cfg_.port->mac();
  const uint16_t vlan = av->vlan_id == 0xffff ? cfg_.vlan : av->vlan_id;
  net::MacAddr mac{};
  const net::ResolveStatus st = neighbors_.resolve_from(av->sgid, av->dgid, now_ns, &mac, vlan);
  if (st == net::ResolveStatus::resolved) av->dmac = mac;
  send_neighbor_frames();
  return st;
}

}  // namespace droce::droced
