#include "droced/device_core.h"

#include <rte_errno.h>
#include <rte_mbuf.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>

#include "core/clock.h"
#include "core/endian.h"
#include "hw_offload/select.h"
#include "net/headers.h"
#include "rocev2/parser.h"

namespace droce::droced {

namespace {

// Frames for the neighbour table: ARP, and ICMPv6 (neighbour discovery) right
// after a plain IPv6 header. Cheap: two or three loads of the first segment.
// What a received frame is for: the neighbour table (ARP, ICMPv6), the membership reporter
// (IGMP; IPv6 with a Hop-by-Hop header, as MLD comes), or the engine (everything else).
// And MAC Control (PFC and PAUSE: the group's gate).
enum class FrameKind { roce, neighbor, membership, pause };

FrameKind classify(const rte_mbuf* m) {
  const auto* p = rte_pktmbuf_mtod(m, const uint8_t*);
  size_t off = 12;
  if (m->data_len < off + 2) return FrameKind::roce;
  uint16_t type = core::load_be16(p + off);
  if (type == net::kEtherTypeMacControl) return FrameKind::pause;
  if (type == net::kEtherTypeVlan) {
    off += 4;
    if (m->data_len < off + 2) return FrameKind::roce;
    type = core::load_be16(p + off);
  }
  if (type == net::kEtherTypeArp) return FrameKind::neighbor;
  if (type == net::kEtherTypeIpv6 && m->data_len >= off + 2 + 7) {
    if (p[off + 2 + 6] == net::kIpProtoIcmpv6) return FrameKind::neighbor;
    if (p[off + 2 + 6] == 0) return FrameKind::membership;  // Hop-by-Hop
  }
  if (type == net::kEtherTypeIpv4 && m->data_len >= off + 2 + 10 && p[off + 2 + 9] == 2) return FrameKind::membership;
  return FrameKind::roce;
}

}  // namespace

CoreGroup::CoreGroup(net::Port* port, unsigned cores, const net::NeighborConfig& neighbor, uint16_t vlan, int* rc)
    : port_(port), cores_(cores), neighbors_(neighbor),
      membership_(net::MembershipConfig{port != nullptr ? port->mac() : net::MacAddr{}, vlan}) {
  *rc = 0;
  if (port == nullptr || cores == 0 || cores > kMaxCores) {
    *rc = -EINVAL;
    return;
  }
  // Read once (the packet link asks ethtool each time): pause quanta and DCQCN's line rate.
  if (const uint32_t mbps = port->link().speed_mbps; mbps != 0) speed_bps_ = uint64_t{mbps} * 1'000'000;
  sleeping_ = std::make_unique<std::atomic<bool>[]>(cores);
  wake_fd_.assign(cores, -1);
  tx_locks_.resize(port->tx_queues());
  for (auto& l : tx_locks_) rte_spinlock_init(&l);
  static std::atomic<unsigned> serial{0};
  const unsigned group = serial.fetch_add(1);
  for (unsigned k = 0; k < cores; ++k) {
    sleeping_[k] = false;
    char name[RTE_RING_NAMESIZE];
    std::snprintf(name, sizeof name, "droce_in_%u_%u", group, k);
    // Room for a few full RX bursts of every other core; a power of two.
    rte_ring* r = rte_ring_create(name, 4096, SOCKET_ID_ANY, RING_F_SC_DEQ);
    if (r == nullptr) {
      *rc = -rte_errno;
      return;
    }
    inbound_.push_back(r);
  }
}

CoreGroup::~CoreGroup() {
  for (rte_ring* r : inbound_) {
    rte_mbuf* m;
    while (rte_ring_dequeue(r, reinterpret_cast<void**>(&m)) == 0) rte_pktmbuf_free(m);
    rte_ring_free(r);
  }
}

void CoreGroup::set_sleeping(unsigned core, bool sleeping) {
  sleeping_[core].store(sleeping, std::memory_order_seq_cst);
}

void CoreGroup::wake(unsigned core) {
  if (!sleeping_[core].load(std::memory_order_seq_cst) || wake_fd_[core] < 0) return;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_[core], &one, sizeof one);
}

DeviceCore::DeviceCore(const DeviceCoreConfig& cfg, int* rc) : cfg_(cfg), group_(cfg.group) {
  *rc = 0;
  if (cfg.port == nullptr || cfg.addresses.empty()) {
    *rc = -EINVAL;
    return;
  }
  if (group_ == nullptr) {
    own_group_ = std::make_unique<CoreGroup>(cfg.port, 1, cfg.neighbor, cfg.vlan, rc);
    if (*rc != 0) return;
    group_ = own_group_.get();
    cfg_.index = 0;
  }
  if (cfg_.index >= group_->size()) {
    *rc = -EINVAL;
    return;
  }
  rx_queue_ = group_->rx_queue_of(cfg_.index);
  tx_queue_ = group_->tx_queue_of(cfg_.index);
  tx_lock_ = group_->tx_lock_of(cfg_.index);
  link_ = std::make_unique<rocev2::PortQueueLink>(cfg.port, tx_queue_);
  link_->set_tx_lock(tx_lock_);
  link_->set_loopback_mac(cfg.port->mac());  // two clients of this droced talk through it
  link_->set_multicast_loopback(group_->multicast_cores());
  rocev2::EngineConfig ec = cfg.engine;
  ec.pool = cfg.port->pool();
  ec.port = link_.get();
  ec.local_mac = cfg.port->mac();
  ec.local_ip = cfg.addresses.front();
  ec.local_ips = cfg.addresses;
  ec.offloads = hw_offload::select_offloads(*cfg.port);  // once, at start
  if (cfg.cc != nullptr) {
    cc_version_ = cfg.cc->version();
    ec.cc = cfg.cc->get();
  }
  // DCQCN's line rate (where a QP's rate starts, and rpg_max_rate 0) is the port's speed, as
  // on mlx5, read once by the group; a port that told none (or was down at start): 100 Gbit/s.
  ec.line_rate_mbps = static_cast<uint32_t>(group_->speed_bps() / 1'000'000);
  icrc_on_link_ = !ec.offloads.rx_icrc && !ec.offloads.tx_icrc;
  faults_ = std::make_unique<FaultStage>(cfg.faults, cfg_.index, cfg.port->pool(), icrc_on_link_,
                                         group_->speed_bps());
  capture_ = CaptureTap{cfg.capture, cfg_.index};
  fault_port_ = std::make_unique<FaultPort>(link_.get(), faults_.get(), capture_, &group_->pause_gate());
  ec.port = fault_port_.get();
  // This core's QPNs: (index << kQpnCoreShift) | n, never past the next core's.
  ec.first_qpn = (cfg_.index << kQpnCoreShift) | (cfg.engine.first_qpn & ((1u << kQpnCoreShift) - 1));
  ec.max_qps = std::min(ec.max_qps, (1u << kQpnCoreShift) - (ec.first_qpn & ((1u << kQpnCoreShift) - 1)));
  engine_ = std::make_unique<rocev2::Engine>(ec);
  if (cfg_.index == 0) {
    std::lock_guard l(group_->neighbor_mutex());
    for (const auto& ip : cfg.addresses) {
      if (int r = group_->neighbors().add_local(ip, cfg.port->mac(), cfg.vlan); r != 0) {
        *rc = r;
        return;
      }
    }
  }
}

uint64_t DeviceCore::next_deadline() const {
  // Held frames are due at their time; frames the port refused go again at once, or when a
  // pause that holds them ends.
  uint64_t d = std::min(engine_->next_deadline(), faults_->next_release_ns());
  if (const net::PauseGate& gate = group_->pause_gate(); gate.engaged())
    d = std::min(d, gate.next_resume_ns(core::monotonic_ns()));
  else if (fault_port_->has_queued())
    d = 0;
  if (cfg_.index == 0) {
    std::lock_guard l(group_->neighbor_mutex());
    d = std::min({d, group_->neighbors().next_deadline_ns(), group_->membership().next_deadline_ns()});
  }
  if (net::KernelNet* k = group_->kernel(); k != nullptr) {
    // A verb waiting for the kernel's neighbour is asked about again (nothing wakes us
    // when the kernel learns it). Any core: the waiting client may be any core's.
    std::lock_guard l(group_->neighbor_mutex());
    d = std::min(d, k->next_deadline_ns(core::monotonic_ns()));
  }
  return d;
}

uint16_t DeviceCore::tx(rte_mbuf** frames, uint16_t n) {
  if (tx_lock_ == nullptr) return cfg_.port->tx_burst(tx_queue_, frames, n);
  rte_spinlock_lock(tx_lock_);
  const uint16_t k = cfg_.port->tx_burst(tx_queue_, frames, n);
  rte_spinlock_unlock(tx_lock_);
  return k;
}

bool DeviceCore::send_control(std::span<const uint8_t> f) {
  rte_mbuf* m = rte_pktmbuf_alloc(cfg_.port->pool());
  // Short frames are padded to the Ethernet minimum.
  const size_t len = std::max<size_t>(f.size(), 60);
  char* d = m ? rte_pktmbuf_append(m, static_cast<uint16_t>(len)) : nullptr;
  if (d == nullptr) {
    if (m) rte_pktmbuf_free(m);
    return false;
  }
  std::memcpy(d, f.data(), f.size());
  std::memset(d + f.size(), 0, len - f.size());
  m->hash.usr = UINT32_MAX;  // no QP sent it (a capture's QP filter reads it)
  uint32_t staged = 0;
  const uint32_t cap = capture_.generation();
  if (cap != 0)
    staged = capture_.capture->stage(cfg_.index, cap, net::pcapng::Direction::outbound, &m, 1, core::monotonic_ns());
  const uint16_t sent = tx(&m, 1);
  if (cap != 0) capture_.capture->publish(cfg_.index, staged, sent);
  if (sent != 1) rte_pktmbuf_free(m);
  return sent == 1;
}

void DeviceCore::send_neighbor_frames() {
  neighbor_tx_.clear();
  {
    std::lock_guard l(group_->neighbor_mutex());
    group_->neighbors().drain_tx(&neighbor_tx_);
    group_->membership().drain_tx(&neighbor_tx_);
  }
  for (const auto& f : neighbor_tx_) {
    if (send_control(f)) ++counters_.neighbor_frames_out;
    else ++counters_.neighbor_tx_dropped;  // the table retries on its own
  }
}

void DeviceCore::send_pauses() {
  pauses_.clear();
  faults_->take_pauses(&pauses_);
  for (const net::PauseOut& p : pauses_) {
    uint8_t f[net::kPauseFrameLen];
    net::build_pfc(f, p.dst, cfg_.port->mac(), p.enable, p.quanta);
    // A lost XOFF goes again at the refresh; a lost XON leaves the sender the rest of its
    // pause (the quanta), as on a fabric.
    if (send_control(f)) ++counters_.pause_frames_out;
    else ++counters_.pause_tx_dropped;
  }
}

void DeviceCore::handle_pause(std::span<const uint8_t> frame, uint64_t now_ns) {
  net::PauseFrame f;
  if (net::parse_pause(frame, &f) != net::PauseParse::ok ||
      !(net::same_mac(f.dst, cfg_.port->mac()) || net::same_mac(f.dst, net::kPauseGroupMac))) {
    ++counters_.pause_frames_bad;
    return;
  }
  ++counters_.pause_frames_in;
  group_->pause_gate().apply(f, now_ns, group_->speed_bps());
}

void DeviceCore::hand_off(unsigned core, rte_mbuf* m) {
  if (rte_ring_mp_enqueue(group_->inbound(core), m) != 0) {
    rte_pktmbuf_free(m);
    ++counters_.hand_off_dropped;
    return;
  }
  ++counters_.handed_out;
  woken_ |= 1u << core;
}

void DeviceCore::route(rte_mbuf** frames, uint16_t n, std::vector<rte_mbuf*>* local) {
  const unsigned cores = group_->size();
  for (uint16_t i = 0; i < n; ++i) {
    rte_mbuf* m = frames[i];
    uint32_t qpn;
    if (cores == 1) {
      local->push_back(m);
      continue;
    }
    if (!rocev2::peek_dest_qpn(rte_pktmbuf_mtod(m, const uint8_t*), m->data_len, &qpn)) {
      // Not for a QP: the engine counts what it is; and a copy to each other core whose raw
      // packet QPs have flow rules (they may want it).
      for (uint32_t others = group_->raw_flow_cores() & ~(1u << cfg_.index); others != 0; others &= others - 1) {
        rte_mbuf* copy = rte_pktmbuf_copy(m, cfg_.port->pool(), 0, UINT32_MAX);
        if (copy == nullptr) ++counters_.hand_off_dropped;
        else hand_off(unsigned(std::countr_zero(others)), copy);
      }
      local->push_back(m);
      continue;
    }
    const int owner = group_->owner_of(qpn);
    if (owner == int(cfg_.index) || (owner < 0 && qpn != kMulticastQpn)) {
      local->push_back(m);
    } else if (owner >= 0) {
      hand_off(unsigned(owner), m);
    } else {
      // Multicast: every core may have QPs attached to the group.
      for (unsigned k = 0; k < cores; ++k) {
        if (k == cfg_.index) continue;
        rte_mbuf* copy = rte_pktmbuf_copy(m, cfg_.port->pool(), 0, UINT32_MAX);
        if (copy == nullptr) ++counters_.hand_off_dropped;
        else hand_off(k, copy);
      }
      local->push_back(m);
    }
  }
}

void DeviceCore::route_faulted(uint64_t now_ns) {
  faulted_.clear();
  faults_->process(FaultDirection::rx, rx_batch_.data(), rx_batch_.size(), now_ns, &faulted_);
  rx_batch_.clear();
  for (size_t i = 0; i < faulted_.size(); i += 32)
    route(faulted_.data() + i, static_cast<uint16_t>(std::min<size_t>(32, faulted_.size() - i)), &local_);
}

void DeviceCore::run_once(uint64_t now_ns) {
  rte_mbuf* rx[32];
  rte_mbuf* roce[32];
  local_.clear();
  woken_ = 0;
  faults_->refresh();
  if (cfg_.cc != nullptr && cfg_.cc->version() != cc_version_) [[unlikely]] {
    cc_version_ = cfg_.cc->version();  // `droce cc set`: from this loop on
    engine_->set_cc_params(cfg_.cc->get());
  }
  const bool rx_faults = faults_->active(FaultDirection::rx);
  const uint32_t cap = capture_.generation();  // 0 (no capture): each tap below is one branch
  const uint16_t n = rx_queue_ < 0 ? 0 : cfg_.port->rx_burst(uint16_t(rx_queue_), rx, 32);
  uint16_t k = 0;
  bool neighbor_work = false;
  const net::MacAddr own = cfg_.port->mac();
  for (uint16_t i = 0; i < n; ++i) {
    if (rx[i]->data_len >= 12 && net::same_mac(rte_pktmbuf_mtod(rx[i], const uint8_t*) + 6, own.data())) {
      // A NIC never receives what it sent; af_packet shows a socket its own outgoing frames
      // (a multicast datagram would reach our attached QPs twice: here and looped back).
      ++counters_.rx_own_frames;
      rte_pktmbuf_free(rx[i]);
      continue;
    }
    const FrameKind kind = classify(rx[i]);
    if (kind == FrameKind::roce) {
      roce[k++] = rx[i];
      continue;
    }
    if (cap != 0) capture_.capture->tap(cfg_.index, cap, net::pcapng::Direction::inbound, &rx[i], 1, now_ns);
    uint8_t buf[512];
    const uint32_t len = rx[i]->pkt_len;
    if (len > sizeof buf) {
      ++counters_.oversize_control;
    } else if (kind == FrameKind::pause) {
      handle_pause({static_cast<const uint8_t*>(rte_pktmbuf_read(rx[i], 0, len, buf)), len}, now_ns);
    } else {
      const auto* p = static_cast<const uint8_t*>(rte_pktmbuf_read(rx[i], 0, len, buf));
      std::lock_guard l(group_->neighbor_mutex());
      if (kind == FrameKind::neighbor) {
        ++counters_.neighbor_frames_in;
        group_->neighbors().handle_frame(std::span<const uint8_t>(p, len), now_ns);
      } else {
        ++counters_.membership_frames_in;
        (void)group_->membership().handle_frame(std::span<const uint8_t>(p, len), now_ns);
      }
      neighbor_work = true;
    }
    rte_pktmbuf_free(rx[i]);
  }
  // What the wire brought, before the rx fault rules act on it.
  if (cap != 0) capture_.capture->tap(cfg_.index, cap, net::pcapng::Direction::inbound, roce, k, now_ns);
  if (rx_faults) {
    rx_batch_.assign(roce, roce + k);
    route_faulted(now_ns);
  } else {
    route(roce, k, &local_);
  }
  // What other cores handed here.
  rte_mbuf* in[64];
  const unsigned got = rte_ring_sc_dequeue_burst(group_->inbound(cfg_.index), reinterpret_cast<void**>(in), 64,
                                                 nullptr);
  counters_.handed_in += got;
  local_.insert(local_.end(), in, in + got);
  if (link_->has_loopback()) {
    link_->take_loopback(&loopback_rx_);
    counters_.loopback_frames += loopback_rx_.size();
    if (cap != 0)
      for (size_t i = 0; i < loopback_rx_.size(); i += 32)
        capture_.capture->tap(cfg_.index, cap, net::pcapng::Direction::inbound, loopback_rx_.data() + i,
                              static_cast<uint16_t>(std::min<size_t>(32, loopback_rx_.size() - i)), now_ns);
    if (rx_faults) {
      rx_batch_.swap(loopback_rx_);
      route_faulted(now_ns);
    } else {
      for (size_t i = 0; i < loopback_rx_.size(); i += 32)
        route(loopback_rx_.data() + i, static_cast<uint16_t>(std::min<size_t>(32, loopback_rx_.size() - i)),
              &local_);
    }
  }
  // XOFF as a burst filled a lossless queue, XON as releasing its frames drained it.
  if (rx_faults) send_pauses();
  for (size_t i = 0; i < local_.size(); i += 32)
    engine_->rx_burst(local_.data() + i, static_cast<uint16_t>(std::min<size_t>(32, local_.size() - i)), now_ns);
  for (unsigned c = 0; woken_ != 0; ++c, woken_ >>= 1)
    if (woken_ & 1) group_->wake(c);
  if (cfg_.index == 0) {
    // The table's timers (retries, expiry) run on core 0; the others only
    // resolve through it. Never wait for a core that holds it.
    std::unique_lock l(group_->neighbor_mutex(), std::try_to_lock);
    if (l.owns_lock()) {
      group_->neighbors().poll(now_ns);
      group_->membership().poll(now_ns);
      neighbor_work = neighbor_work || group_->neighbors().tx_queued() != 0 || group_->membership().tx_queued() != 0;
    }
  }
  if (neighbor_work) send_neighbor_frames();
  if (net::PauseGate& gate = group_->pause_gate(); gate.engaged() && gate.next_resume_ns(now_ns) == UINT64_MAX)
    [[unlikely]] gate.settle(now_ns);  // every pause is over
  engine_->poll(now_ns);
  fault_port_->poll(now_ns);
  counters_.tx_pause_waits = fault_port_->pause_waits();
  sync_multicast();
}

void DeviceCore::sync_multicast() {
  const bool raw = engine_->raw_flows() != 0;
  if (raw != has_raw_flows_) {
    has_raw_flows_ = raw;
    group_->set_has_raw_flows(cfg_.index, raw);
  }
  const bool has = engine_->mcast_groups() != 0 || raw;
  if (has == has_multicast_) return;
  has_multicast_ = has;
  group_->set_has_multicast(cfg_.index, has);
}

int DeviceCore::attach_mcast(uint32_t qpn, const net::IpAddr& gid) {
  const int rc = engine_->attach_mcast(qpn, gid);
  sync_multicast();
  return rc;
}

int DeviceCore::create_flow(uint32_t qpn, abi::FlowType type, uint16_t priority, const abi::FlowMatch& match,
                            uint32_t* id) {
  const int rc = engine_->create_flow(qpn, type, priority, match, id);
  sync_multicast();
  return rc;
}

int DeviceCore::destroy_flow(uint32_t id) {
  const int rc = engine_->destroy_flow(id);
  sync_multicast();
  return rc;
}

int DeviceCore::detach_mcast(uint32_t qpn, const net::IpAddr& gid) {
  const int rc = engine_->detach_mcast(qpn, gid);
  sync_multicast();
  return rc;
}

net::ResolveStatus DeviceCore::resolve(rocev2::AddressVector* av, uint64_t now_ns, int* err) {
  if (av->sgid == net::IpAddr{}) av->sgid = cfg_.addresses.front();
  av->smac = cfg_.port->mac();
  const uint16_t vlan = av->vlan_id == 0xffff ? cfg_.vlan : av->vlan_id;
  net::MacAddr mac{};
  net::ResolveStatus st;
  net::NextHop nh;
  int rc = 0;
  {
    std::lock_guard l(group_->neighbor_mutex());
    net::KernelNet* k = group_->kernel();
    if (group_->neighbors().is_local(av->dgid, vlan)) {
      // Another client of this droced: looped back (rocev2/port_link.h).
      nh = net::NextHop{av->dgid, false, av->hop_limit};
      st = group_->neighbors().resolve_from(av->sgid, av->dgid, now_ns, &mac, vlan);
    } else if ((rc = k != nullptr ? k->route(av->dgid, av->sgid, &nh) : group_->routes().lookup(av->dgid, &nh)) != 0) {
      st = net::ResolveStatus::failed;
    } else if (k != nullptr) {
      st = k->neighbor(nh.ip, now_ns, &mac);
    } else {
      st = group_->neighbors().resolve_from(av->sgid, nh.ip, now_ns, &mac, vlan);
    }
  }
  if (st == net::ResolveStatus::resolved) {
    av->dmac = mac;
    if (!net::is_multicast(av->dgid)) av->hop_limit = nh.hop_limit;
  }
  if (err != nullptr) *err = st != net::ResolveStatus::failed ? 0 : rc == -ENETUNREACH ? -ENETUNREACH : -EHOSTUNREACH;
  send_neighbor_frames();
  return st;
}

void DeviceCore::set_addresses(const std::vector<net::IpAddr>& addresses) {
  if (addresses.empty()) return;  // GID 0 never leaves; an empty list is a caller's mistake
  cfg_.addresses = addresses;
  engine_->set_local_ips(addresses);
}

}  // namespace droce::droced
