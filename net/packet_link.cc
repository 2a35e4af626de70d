#include "net/packet_link.h"

#include <linux/ethtool.h>
#include <linux/filter.h>
#include <linux/if_packet.h>
#include <linux/sockios.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <rte_errno.h>
#include <rte_lcore.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/clock.h"
#include "core/endian.h"
#include "core/log.h"
#include "net/headers.h"
#include "net/udp_gso.h"

namespace droce::net {

namespace {

constexpr uint32_t kL2Overhead = RTE_ETHER_HDR_LEN + RTE_VLAN_HLEN;
// A slot holds the tpacket2_hdr, the sockaddr_ll, the virtio_net_hdr and a GSO frame of 64 KiB.
constexpr uint32_t kGsoSlot = 17 * 4096;
constexpr uint16_t kMaxBurst = 64;
// sendmmsg per call: messages, and iovecs of each (the header, then one payload per segment).
constexpr unsigned kMaxIov = kGsoMaxSegments + 1;

// The socket filter while no raw QP wants everything: TCP over IPv4 or IPv6 (the kernel's own,
// up to 64 KiB per frame on a veth or with GRO) stays out of the ring; all else comes in (RoCE,
// ARP, ND, IGMP/MLD, frames with the 802.1Q tag in the data). Offsets from the MAC header.
constexpr sock_filter kNoTcp[] = {
    BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 12),             // 0: EtherType
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x0800, 0, 2),  // 1: IPv4 -> 2, else -> 4
    BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 23),             // 2: protocol
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 6, 3, 4),       // 3: TCP -> 7 (drop), else -> 8
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x86dd, 0, 3),  // 4: IPv6 -> 5, else -> 8
    BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 20),             // 5: next header
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 6, 0, 1),       // 6: TCP -> 7, else -> 8
    BPF_STMT(BPF_RET | BPF_K, 0),                       // 7: drop
    BPF_STMT(BPF_RET | BPF_K, 0xffffffffu),             // 8: the whole frame
};

}  // namespace

bool PacketLink::claims(std::string_view devargs) { return names_driver(devargs, "droce_packet"); }

int PacketLink::open(std::string_view devargs, const PortConfig& cfg, std::unique_ptr<Link>* out) {
  const std::string name(devargs.substr(0, devargs.find(',')));
  const std::string ifname = devarg_value(devargs, "iface");
  const std::string gso = devarg_value(devargs, "gso");
  const std::string frames = devarg_value(devargs, "frames");
  if (ifname.empty() || ifname.size() >= IFNAMSIZ || (!gso.empty() && gso != "on" && gso != "off")) {
    DROCE_LOG(ERR, net, "%s: needs iface=NETDEV, and gso=on|off if given", name.c_str());
    return -EINVAL;
  }
  std::unique_ptr<PacketLink> p(new PacketLink());
  p->gso_ = gso != "off";
  p->slots_ = frames.empty() ? 256 : static_cast<uint32_t>(std::strtoul(frames.c_str(), nullptr, 0));
  if (p->slots_ < 16 || p->slots_ > 65536) {
    DROCE_LOG(ERR, net, "%s: frames=%s: 16 to 65536 ring slots", name.c_str(), frames.c_str());
    return -EINVAL;
  }
  LinkInfo& info = p->info_;
  info.driver_name = "droce_packet";
  info.device_name = name;
  info.ifname = ifname;
  info.kernel_netdev = true;
  info.kernel_sees_rx = true;

  p->ctl_.reset(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!p->ctl_.valid()) return -errno;
  ifreq ifr;
  if (int rc = netdev_ioctl(p->ctl_.get(), SIOCGIFINDEX, ifname, &ifr); rc != 0) {
    DROCE_LOG(ERR, net, "%s: no netdev %s here: %s", name.c_str(), ifname.c_str(), std::strerror(-rc));
    return rc;
  }
  p->ifindex_ = ifr.ifr_ifindex;
  if (int rc = netdev_ioctl(p->ctl_.get(), SIOCGIFHWADDR, ifname, &ifr); rc != 0) return rc;
  std::memcpy(info.mac.data(), ifr.ifr_hwaddr.sa_data, 6);
  if (cfg.mtu != 0) {
    if (int rc = p->set_mtu(cfg.mtu); rc != 0) info.mtu_result = rc;
  }
  const int mtu = p->netdev_mtu();
  if (mtu < 0) return mtu;

  p->fd_.reset(::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, htons(ETH_P_ALL)));
  if (!p->fd_.valid()) {
    const int err = errno;
    DROCE_LOG(ERR, net, "%s: packet socket: %s (droced needs CAP_NET_RAW)", name.c_str(), std::strerror(err));
    return -err;
  }
  const int fd = p->fd_.get();
  auto setopt = [&](int level, int opt, const void* v, socklen_t n, const char* what) {
    if (::setsockopt(fd, level, opt, v, n) == 0) return 0;
    const int err = errno;
    DROCE_LOG(ERR, net, "%s: %s on %s: %s", name.c_str(), what, ifname.c_str(), std::strerror(err));
    return -err;
  };
  const int one = 1, v2 = TPACKET_V2;
  if (int rc = setopt(SOL_PACKET, PACKET_VERSION, &v2, sizeof v2, "PACKET_VERSION"); rc != 0) return rc;
  if (int rc = setopt(SOL_PACKET, PACKET_VNET_HDR, &one, sizeof one, "PACKET_VNET_HDR"); rc != 0) return rc;
  if (int rc = setopt(SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof one, "PACKET_QDISC_BYPASS"); rc != 0)
    return rc;
  // Not fatal where the kernel predates it (4.20): the socket's own frames are skipped anyway.
  ::setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one);
  // Room for bursts of GSO frames in flight through the kernel.
  const int sndbuf = 8 << 20;
  if (::setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof sndbuf) != 0)
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);

  // The ring: one frame per block, each block a slot of whole pages.
  const uint32_t frame_room = uint32_t(mtu) + kL2Overhead;
  const uint32_t one_frame =
      RTE_ALIGN_CEIL(frame_room + uint32_t{TPACKET2_HDRLEN} + uint32_t{kVnetHdrLen} + 64u, 4096u);
  p->slot_size_ = p->gso_ ? std::max(kGsoSlot, one_frame) : one_frame;
  tpacket_req req{};
  req.tp_block_size = p->slot_size_;
  req.tp_block_nr = p->slots_;
  req.tp_frame_size = p->slot_size_;
  req.tp_frame_nr = p->slots_;
  if (int rc = setopt(SOL_PACKET, PACKET_RX_RING, &req, sizeof req, "PACKET_RX_RING"); rc != 0) return rc;
  p->ring_bytes_ = size_t{p->slot_size_} * p->slots_;
  void* ring = ::mmap(nullptr, p->ring_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_LOCKED, fd, 0);
  if (ring == MAP_FAILED) ring = ::mmap(nullptr, p->ring_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (ring == MAP_FAILED) {
    const int err = errno;
    DROCE_LOG(ERR, net, "%s: mmap of the RX ring (%zu bytes): %s", name.c_str(), p->ring_bytes_, std::strerror(err));
    return -err;
  }
  p->ring_ = static_cast<uint8_t*>(ring);
  sockaddr_ll sll{};
  sll.sll_family = AF_PACKET;
  sll.sll_protocol = htons(ETH_P_ALL);
  sll.sll_ifindex = p->ifindex_;
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&sll), sizeof sll) != 0) {
    const int err = errno;
    DROCE_LOG(ERR, net, "%s: bind to %s: %s", name.c_str(), ifname.c_str(), std::strerror(err));
    return -err;
  }
  if (int rc = p->set_rx_all(false); rc != 0) return rc;
  if (int rc = p->rx_ts_.setup(); rc != 0)
    DROCE_LOG(WARNING, net, "%s: no mbuf field for RX timestamps (%s): frames carry no receive time", name.c_str(),
              std::strerror(-rc));
  if (cfg.promiscuous) p->set_promiscuous(true);
  if (cfg.allmulticast) {
    p->membership(PACKET_MR_ALLMULTI, true);
    info.multicast_mode = MulticastMode::allmulticast;
  } else if (!cfg.multicast.empty()) {
    for (const MacAddr& m : cfg.multicast) {
      packet_mreq mr{};
      mr.mr_ifindex = p->ifindex_;
      mr.mr_type = PACKET_MR_MULTICAST;
      mr.mr_alen = 6;
      std::memcpy(mr.mr_address, m.data(), 6);
      ::setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof mr);
    }
    info.multicast_mode = MulticastMode::exact_list;
  }

  info.rx_queues = info.tx_queues = 1;
  info.rx_ring_size = static_cast<uint16_t>(std::min<uint32_t>(p->slots_, UINT16_MAX));
  info.tx_ring_size = 1024;
  info.caps.max_rx_queues = info.caps.max_tx_queues = 1;
  info.caps.min_mtu = 68;
  info.caps.max_mtu = 9702;
  info.caps.max_rx_pktlen = 9702 + kL2Overhead;
  info.rx_intr_enabled = cfg.rx_interrupts;
  if (int rc = p->adopt_pool(cfg, "droce_pkt", 4 * 1024 + rte_lcore_count() * 256, frame_room + RTE_ETHER_CRC_LEN);
      rc != 0)
    return rc;
  p->open_ = true;
  p->started_ = true;
  DROCE_LOG(INFO, net, "%s: packet socket on %s (ifindex %d), ring %u x %u bytes, gso %s", name.c_str(),
            ifname.c_str(), p->ifindex_, p->slots_, p->slot_size_, p->gso_ ? "on" : "off");
  *out = std::move(p);
  return 0;
}

PacketLink::~PacketLink() { PacketLink::close(); }

int PacketLink::membership(int type, bool on) {
  packet_mreq mr{};
  mr.mr_ifindex = ifindex_;
  mr.mr_type = static_cast<unsigned short>(type);
  if (::setsockopt(fd_.get(), SOL_PACKET, on ? PACKET_ADD_MEMBERSHIP : PACKET_DROP_MEMBERSHIP, &mr, sizeof mr) != 0)
    return -errno;
  return 0;
}

int PacketLink::set_promiscuous(bool on) {
  if (!fd_.valid()) return -ENODEV;
  if (on == promisc_) return 0;
  if (int rc = membership(PACKET_MR_PROMISC, on); rc != 0) return rc;
  promisc_ = on;
  return 0;
}

int PacketLink::set_rx_all(bool all) {
  if (!fd_.valid()) return -ENODEV;
  int rc = 0;
  if (all) {
    // An int for the option's value, though it reads none: a SOL_SOCKET option shorter than an int
    // is EINVAL before the kernel looks at which it is.
    const int unused = 0;
    if (::setsockopt(fd_.get(), SOL_SOCKET, SO_DETACH_FILTER, &unused, sizeof unused) != 0 && errno != ENOENT)
      rc = -errno;
  } else {
    sock_fprog prog{static_cast<unsigned short>(std::size(kNoTcp)), const_cast<sock_filter*>(kNoTcp)};
    if (::setsockopt(fd_.get(), SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) != 0) rc = -errno;
  }
  if (rc != 0)
    DROCE_LOG(ERR, net, "%s: socket filter %s: %s", info_.device_name.c_str(), all ? "off" : "on", std::strerror(-rc));
  else
    DROCE_LOG(INFO, net, "%s: %s", info_.device_name.c_str(),
              all ? "every frame (raw packet QPs have rules)" : "the kernel's TCP left out of the ring");
  return rc;
}

int PacketLink::rx_interrupt_fd(uint16_t queue) const {
  if (!open_ || !info_.rx_intr_enabled || queue != 0) return -ENOTSUP;
  return fd_.get();
}

uint64_t PacketLink::receive_time(const tpacket2_hdr* h, int64_t* realtime_ahead) const {
  if (!rx_ts_.valid()) return 0;
  if (*realtime_ahead == INT64_MIN) *realtime_ahead = core::realtime_ahead_of_monotonic_ns();
  const int64_t t = int64_t{h->tp_sec} * 1'000'000'000 + int64_t{h->tp_nsec} - *realtime_ahead;
  return t > 0 ? static_cast<uint64_t>(t) : 0;
}

bool PacketLink::deliver(const uint8_t* f, uint32_t len, uint16_t vlan_tci, bool vlan, rte_mbuf** out) {
  rte_mbuf* m = rte_pktmbuf_alloc(info_.pool);
  if (m == nullptr) {
    ++c_.rx_no_mbuf;
    return false;
  }
  const uint32_t total = len + (vlan ? kVlanHdrLen : 0);
  if (total > rte_pktmbuf_tailroom(m)) {
    rte_pktmbuf_free(m);
    ++c_.rx_truncated;
    return false;
  }
  auto* d = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, static_cast<uint16_t>(total)));
  if (vlan && len >= 12) {
    // The kernel took the tag out (tp_vlan_tci): put it back where it was.
    std::memcpy(d, f, 12);
    core::store_be16(d + 12, kEtherTypeVlan);
    core::store_be16(d + 14, vlan_tci);
    std::memcpy(d + 16, f + 12, len - 12);
  } else {
    std::memcpy(d, f, len);
  }
  *out = m;
  c_.rx_bytes += total;
  ++c_.rx_frames;
  return true;
}

uint16_t PacketLink::rx_burst(uint16_t /*queue*/, rte_mbuf** out, uint16_t n) {
  uint16_t got = 0;
  while (pending_at_ < pending_n_ && got < n) out[got++] = pending_[pending_at_++];
  if (pending_at_ == pending_n_) pending_at_ = pending_n_ = 0;
  if (!started_ || ring_ == nullptr) return got;
  int64_t realtime_ahead = INT64_MIN;
  while (got < n && pending_n_ == 0) {
    auto* h = reinterpret_cast<tpacket2_hdr*>(ring_ + size_t{next_} * slot_size_);
    const uint32_t status = __atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE);
    if ((status & TP_STATUS_USER) == 0) break;
    const uint64_t t = receive_time(h, &realtime_ahead);
    const uint8_t* f = reinterpret_cast<const uint8_t*>(h) + h->tp_mac;
    const uint32_t len = h->tp_snaplen;
    const bool vlan = (status & TP_STATUS_VLAN_VALID) != 0 || h->tp_vlan_tci != 0;
    const VnetHdr vh = load_vnet_hdr(f - kVnetHdrLen);
    if (len < h->tp_len) {
      ++c_.rx_truncated;
    } else if (vh.gso_type == kVnetGsoNone) {
      // A partial checksum (a sender on this host) is completed for whoever reads it; the ICRC
      // masks RoCE's, but a raw QP sees the frame as sent.
      if ((vh.flags & kVnetNeedsCsum) != 0 && !vlan)
        complete_partial_csum(vh, const_cast<uint8_t*>(f), len);
      if (deliver(f, len, h->tp_vlan_tci, vlan, &out[got])) {
        if (t != 0) rx_ts_.stamp(out[got], t);
        ++got;
      }
    } else {
      GsoFrame g;
      if ((vh.gso_type & ~kVnetGsoEcn) != kVnetGsoUdpL4) {
        ++c_.rx_gso_other;  // the kernel's TCP, seen on the tap: nothing of droce's
      } else if (vlan || gso_parse(vh, f, len, &g) != 0 || g.segments > kPendingMax) {
        ++c_.rx_gso_refused;
      } else {
        ++c_.rx_gso_frames;
        for (uint32_t i = 0; i < g.segments; ++i) {
          rte_mbuf* m = rte_pktmbuf_alloc(info_.pool);
          if (m == nullptr) {
            ++c_.rx_no_mbuf;
            continue;
          }
          const uint32_t room = g.at.payload_off + g.seg_size;
          if (room > rte_pktmbuf_tailroom(m)) {
            rte_pktmbuf_free(m);
            ++c_.rx_truncated;
            continue;
          }
          auto* d = reinterpret_cast<uint8_t*>(rte_pktmbuf_mtod(m, uint8_t*));
          const uint32_t seg_len = gso_write_segment(f, g, i, d);
          m->data_len = static_cast<uint16_t>(seg_len);
          m->pkt_len = seg_len;
          if (t != 0) rx_ts_.stamp(m, t);
          ++c_.rx_gso_segments;
          ++c_.rx_frames;
          c_.rx_bytes += seg_len;
          if (got < n) out[got++] = m;
          else pending_[pending_n_++] = m;
        }
      }
    }
    __atomic_store_n(&h->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
    next_ = next_ + 1 == slots_ ? 0 : next_ + 1;
  }
  return got;
}

uint16_t PacketLink::tx_burst(uint16_t /*queue*/, rte_mbuf** pkts, uint16_t n) {
  if (!started_ || n == 0) return 0;
  n = std::min(n, kMaxBurst);
  FrameView views[kMaxBurst];
  for (uint16_t i = 0; i < n; ++i) {
    views[i].data = rte_pktmbuf_mtod(pkts[i], const uint8_t*);
    views[i].len = rte_pktmbuf_data_len(pkts[i]);
  }
  // Every message's header (the virtio_net_hdr, and for a GSO frame the headers of the whole).
  static constexpr uint32_t kHdrRoom = kVnetHdrLen + kEthHdrLen + kVlanHdrLen + kIpv6HdrLen + kUdpHdrLen;
  uint8_t hdrs[kMaxBurst][kHdrRoom];
  // One per header and one per payload, or per segment of a chained frame.
  static constexpr unsigned kIovRoom = kMaxBurst * 2 + 256;
  iovec iov[kIovRoom];
  mmsghdr msgs[kMaxBurst];
  uint16_t first_of[kMaxBurst + 1];  // the first frame of each message
  unsigned nmsg = 0, niov = 0;
  uint16_t i = 0;
  while (i < n) {
    size_t k = gso_ ? gso_run_length(&views[i], n - i, kGsoMaxSegments, 0xffff) : 1;
    msghdr& mh = msgs[nmsg].msg_hdr;
    mh = msghdr{};
    mh.msg_iov = &iov[niov];
    for (size_t j = 0; j < k; ++j)
      if (pkts[i + j]->nb_segs != 1) k = std::min(k, j == 0 ? size_t{1} : j);
    if (k >= 2) {
      const uint32_t hl = gso_build_header(&views[i], k, hdrs[nmsg]);
      iov[niov++] = {hdrs[nmsg], hl};
      const uint16_t payload_off = static_cast<uint16_t>(hl - kVnetHdrLen);
      for (size_t j = 0; j < k; ++j) {
        const uint32_t udp_len = core::load_be16(views[i + j].data + payload_off - 4);
        iov[niov++] = {const_cast<uint8_t*>(views[i + j].data) + payload_off, udp_len - kUdpHdrLen};
      }
      mh.msg_iovlen = k + 1;
    } else {
      if (niov + 1 + pkts[i]->nb_segs > kIovRoom) break;  // the rest next time
      store_vnet_hdr(VnetHdr{}, hdrs[nmsg]);
      iov[niov++] = {hdrs[nmsg], kVnetHdrLen};
      for (rte_mbuf* s = pkts[i]; s != nullptr; s = s->next)
        iov[niov++] = {rte_pktmbuf_mtod(s, uint8_t*), rte_pktmbuf_data_len(s)};
      mh.msg_iovlen = 1 + pkts[i]->nb_segs;
    }
    first_of[nmsg++] = i;
    i = static_cast<uint16_t>(i + k);
  }
  first_of[nmsg] = i;
  static_assert(kMaxIov <= 1024, "iovecs per message within UIO_MAXIOV");
  ++c_.tx_calls;
  const int sent = ::sendmmsg(fd_.get(), msgs, nmsg, MSG_DONTWAIT);
  unsigned done = sent > 0 ? unsigned(sent) : 0;
  if (done < nmsg) {
    ++c_.tx_busy;
    // The first message not taken: busy (the caller keeps the frames and retries) or refused
    // (dropped here, as a NIC drops what it cannot send, and counted).
    const int err = sent < 0 ? errno : 0;
    const uint16_t frames = static_cast<uint16_t>(first_of[done + 1] - first_of[done]);
    if (sent < 0 && err == EINVAL && frames > 1 && gso_) {
      // A kernel before 6.2 has no GSO_UDP_L4 in virtio_net_hdr: packet by packet from here on,
      // these frames too (the caller still holds them).
      gso_ = false;
      DROCE_LOG(WARNING, net, "%s: the kernel refuses UDP GSO frames on a packet socket (%s); sending packet by packet",
                info_.device_name.c_str(), std::strerror(err));
    } else if (sent < 0 && err != EAGAIN && err != EWOULDBLOCK && err != ENOBUFS && err != EINTR) {
      c_.tx_errors += frames;
      ++done;
    }
  }
  for (unsigned m = 0; m < done; ++m) {
    const uint16_t k = static_cast<uint16_t>(first_of[m + 1] - first_of[m]);
    if (k > 1 && m < unsigned(sent > 0 ? sent : 0)) {
      ++c_.tx_gso_frames;
      c_.tx_gso_segments += k;
    }
  }
  const uint16_t taken = first_of[done];
  for (uint16_t j = 0; j < taken; ++j) c_.tx_bytes += rte_pktmbuf_pkt_len(pkts[j]);
  c_.tx_frames += taken;
  rte_pktmbuf_free_bulk(pkts, taken);
  return taken;
}

LinkState PacketLink::link() const {
  LinkState s;
  if (!open_) return s;
  s.up = started_ && netdev_running(ctl_.get(), info_.ifname) == 1;
  if (!s.up) return s;
  ethtool_cmd cmd{};
  cmd.cmd = ETHTOOL_GSET;
  ifreq e;
  std::memset(&e, 0, sizeof e);
  std::snprintf(e.ifr_name, sizeof e.ifr_name, "%s", info_.ifname.c_str());
  e.ifr_data = reinterpret_cast<char*>(&cmd);
  if (::ioctl(ctl_.get(), SIOCETHTOOL, &e) == 0) {
    const uint32_t speed = ethtool_cmd_speed(&cmd);
    if (speed != 0 && speed != uint32_t(SPEED_UNKNOWN)) s.speed_mbps = speed;
    s.full_duplex = cmd.duplex == DUPLEX_FULL;
    s.autoneg = cmd.autoneg == AUTONEG_ENABLE;
  }
  return s;
}

int PacketLink::netdev_mtu() const { return netdev_mtu_of(ctl_.get(), info_.ifname); }

uint16_t PacketLink::mtu() const {
  const int m = netdev_mtu();
  return m > 0 ? static_cast<uint16_t>(std::min(m, 65535)) : 0;
}

int PacketLink::set_mtu(uint16_t mtu) {
  if (!ctl_.valid()) return -ENODEV;
  if (netdev_mtu() == mtu) return 0;
  ifreq ifr;
  std::memset(&ifr, 0, sizeof ifr);
  std::snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", info_.ifname.c_str());
  ifr.ifr_mtu = mtu;
  if (::ioctl(ctl_.get(), SIOCSIFMTU, &ifr) != 0) {
    const int err = errno;
    DROCE_LOG(ERR, net, "%s: MTU %u on %s: %s", info_.device_name.c_str(), mtu, info_.ifname.c_str(),
              std::strerror(err));
    return -err;
  }
  return 0;
}

int PacketLink::stop() {
  started_ = false;
  return 0;
}

int PacketLink::start() {
  if (!open_) return -ENODEV;
  started_ = true;
  return 0;
}

int PacketLink::close() {
  if (!open_) return 0;
  drain_rx();
  started_ = false;
  open_ = false;
  while (pending_at_ < pending_n_) rte_pktmbuf_free(pending_[pending_at_++]);
  pending_at_ = pending_n_ = 0;
  if (ring_ != nullptr) ::munmap(ring_, ring_bytes_);
  ring_ = nullptr;
  fd_.reset();
  ctl_.reset();
  return release_pool();
}

void PacketLink::poll_ring_drops() const {
  if (!fd_.valid()) return;
  tpacket_stats st{};
  socklen_t n = sizeof st;
  // The kernel zeroes its counters at each read: they add up here.
  if (::getsockopt(fd_.get(), SOL_PACKET, PACKET_STATISTICS, &st, &n) == 0) c_.rx_ring_drops += st.tp_drops;
}

int PacketLink::stats(rte_eth_stats* out) const {
  poll_ring_drops();
  *out = rte_eth_stats{};
  out->ipackets = c_.rx_frames;
  out->ibytes = c_.rx_bytes;
  out->opackets = c_.tx_frames;
  out->obytes = c_.tx_bytes;
  out->imissed = c_.rx_ring_drops + c_.rx_no_mbuf;
  out->ierrors = c_.rx_truncated + c_.rx_gso_refused;
  out->oerrors = c_.tx_errors;
  out->rx_nombuf = c_.rx_no_mbuf;
  return 0;
}

int PacketLink::xstats(std::vector<std::pair<std::string, uint64_t>>* out) const {
  poll_ring_drops();
  out->clear();
  out->emplace_back("rx_gso_frames", c_.rx_gso_frames);
  out->emplace_back("rx_gso_segments", c_.rx_gso_segments);
  out->emplace_back("rx_gso_refused", c_.rx_gso_refused);
  out->emplace_back("rx_gso_other", c_.rx_gso_other);
  out->emplace_back("rx_truncated", c_.rx_truncated);
  out->emplace_back("rx_no_mbuf", c_.rx_no_mbuf);
  out->emplace_back("rx_ring_drops", c_.rx_ring_drops);
  out->emplace_back("tx_gso_frames", c_.tx_gso_frames);
  out->emplace_back("tx_gso_segments", c_.tx_gso_segments);
  out->emplace_back("tx_calls", c_.tx_calls);
  out->emplace_back("tx_busy", c_.tx_busy);
  out->emplace_back("tx_errors", c_.tx_errors);
  return 0;
}

int PacketLink::reset_stats() {
  poll_ring_drops();
  c_ = PacketLinkCounters{};
  return 0;
}

}  // namespace droce::net
