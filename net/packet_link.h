#pragma once
// PacketLink: a Port's link on a kernel netdev through droce's own packet socket, with UDP
// segmentation offload both ways (net/udp_gso.h). Not an ethdev.
//
// Device string: "droce_packet0,iface=eth1[,gso=on|off][,frames=N]". droced --netdev IF
// --link packet opens it, as --link af_packet opens DPDK's net_af_packet; both share the netdev
// with the kernel the same way (the kernel keeps its addresses and traffic; droce gets a copy of
// every frame), and differ in the data path:
//   - TX: frames one QP built back to back (one message's packets) go to the kernel as one UDP GSO
//     frame, up to 64 segments or 64 KiB; the kernel passes it whole over veths, bridges and
//     routers and cuts it into packets only where a device must (a NIC without UDP segmentation
//     offload), each the frame the engine built. One sendmmsg per burst.
//   - RX: a PACKET_RX_RING (TPACKET_V2) with PACKET_VNET_HDR: a GSO frame arrives whole (from
//     another droce over a veth or bridge) and is cut here into the frames its sender built. Each
//     slot holds the largest GSO frame (frames=N slots of 68 KiB: 17 MiB at the default 256).
//   - Wake-ups: the socket itself (readable while the ring holds a frame), level-triggered, so a
//     sleeping poller wakes on a frame as on droce_shm; DPDK 22.11's af_packet gives none.
//   - RX timestamps: each frame carries the kernel's receive time (the ring's tp_sec/tp_nsec, a
//     software stamp the kernel takes as the frame reaches the socket, CLOCK_REALTIME) in DPDK's
//     RX timestamp field, converted to CLOCK_MONOTONIC (net/rx_timestamp.h) by the two clocks'
//     difference read once per burst that finds a frame (two vDSO reads, none per frame; a step
//     of the wall clock moves the stamps of that one burst at most). Frames cut from one GSO
//     frame all carry its time: the kernel delivered them at once.
//   - Own frames are not looped back (PACKET_IGNORE_OUTGOING); the qdisc is bypassed, as DPDK's
//     PMD does by default.
//   - The kernel's own TCP on the netdev stays out of the ring (a socket filter): a tap copies
//     each frame whole, 64 KiB for a veth's TCP, and droce needs none of it, unless raw packet
//     QPs have rules (set_rx_all(true) takes the filter off).
// With gso=off frames go one by one (the A/B for bench/vs_kernel.sh) and the ring's slots are
// MTU-sized.
//
// One queue pair. MTU, link state, speed and MAC are the netdev's (ioctl and ethtool); set_mtu
// sets the netdev's. Promiscuous and allmulticast through packet socket memberships, which the
// kernel drops when the socket closes. Counters: the ring's drops (PACKET_STATISTICS) are imissed;
// xstats say what GSO did.
//
// Threading as Link's. Errors: -errno, logged.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/unix_socket.h"
#include "net/link.h"
#include "net/rx_timestamp.h"

struct tpacket2_hdr;

namespace droce::net {

struct PacketLinkCounters {
  uint64_t rx_frames = 0, rx_bytes = 0, tx_frames = 0, tx_bytes = 0;
  uint64_t rx_gso_frames = 0;     ///< GSO frames received and cut
  uint64_t rx_gso_segments = 0;   ///< the frames cut from them
  uint64_t rx_gso_refused = 0;    ///< UDP GSO frames malformed, VLAN-tagged or of over 64 segments
  uint64_t rx_gso_other = 0;      ///< GSO frames of another kind (the kernel's TCP), not droce's
  uint64_t rx_truncated = 0;      ///< larger than a slot, dropped
  uint64_t rx_no_mbuf = 0;        ///< frames dropped for want of an mbuf
  uint64_t rx_ring_drops = 0;     ///< the kernel's: the ring was full (PACKET_STATISTICS)
  uint64_t tx_gso_frames = 0;     ///< GSO frames sent
  uint64_t tx_gso_segments = 0;   ///< the frames they carried
  uint64_t tx_calls = 0;          ///< sendmmsg calls
  uint64_t tx_busy = 0;           ///< calls that took fewer than offered (EAGAIN, ENOBUFS)
  uint64_t tx_errors = 0;         ///< frames the kernel refused (dropped, counted as oerrors)
};

class PacketLink final : public Link {
 public:
  static bool claims(std::string_view devargs);
  static int open(std::string_view devargs, const PortConfig& cfg, std::unique_ptr<Link>* out);
  ~PacketLink() override;

  uint16_t rx_burst(uint16_t queue, rte_mbuf** out, uint16_t n) override;
  uint16_t tx_burst(uint16_t queue, rte_mbuf** pkts, uint16_t n) override;

  int rx_interrupt_fd(uint16_t queue) const override;
  int rx_interrupt_arm(uint16_t /*queue*/, bool /*on*/) override { return open_ ? 0 : -ENOTSUP; }
  void rx_interrupt_ack(uint16_t /*queue*/) override {}
  bool rx_interrupt_edge(uint16_t /*queue*/) const override { return false; }

  LinkState link() const override;
  uint16_t mtu() const override;
  int set_mtu(uint16_t mtu) override;
  uint16_t wire_mtu() const override { return mtu(); }
  int netdev_mtu() const override;
  bool promiscuous() const override { return promisc_; }
  int set_promiscuous(bool on) override;
  /// Off: a socket filter keeps the kernel's TCP (IPv4 and IPv6) out of the ring.
  int set_rx_all(bool all) override;

  int stop() override;
  int start() override;
  int close() override;

  int stats(rte_eth_stats* out) const override;
  int xstats(std::vector<std::pair<std::string, uint64_t>>* out) const override;
  int reset_stats() override;

  const PacketLinkCounters& counters() const { return c_; }

 private:
  PacketLink() = default;
  int membership(int type, bool on);
  void poll_ring_drops() const;
  /// Copies a frame (with the VLAN tag the kernel took out put back) into an mbuf; false without one.
  bool deliver(const uint8_t* f, uint32_t len, uint16_t vlan_tci, bool vlan, rte_mbuf** out);
  /// A ring slot's receive time on droce's clock (CLOCK_MONOTONIC ns); 0: none. *realtime_ahead
  /// is CLOCK_REALTIME - CLOCK_MONOTONIC, read at the burst's first frame (INT64_MIN before).
  uint64_t receive_time(const tpacket2_hdr* h, int64_t* realtime_ahead) const;

  core::Fd fd_;
  RxTimestamp rx_ts_;  ///< not valid(): frames go unstamped
  core::Fd ctl_;  ///< an AF_INET datagram socket for the netdev's ioctls
  int ifindex_ = 0;
  bool gso_ = true;
  bool promisc_ = false;
  uint8_t* ring_ = nullptr;
  size_t ring_bytes_ = 0;
  uint32_t slot_size_ = 0;
  uint32_t slots_ = 0;
  uint32_t next_ = 0;  ///< the ring slot to look at next
  /// Frames cut from a GSO frame that did not fit the caller's burst, handed out first next time.
  static constexpr uint16_t kPendingMax = 64;
  rte_mbuf* pending_[kPendingMax] = {};
  uint16_t pending_n_ = 0, pending_at_ = 0;
  mutable PacketLinkCounters c_;
};

}  // namespace droce::net
