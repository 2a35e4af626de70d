#pragma once
// DroceShmLink: a Port's link on droce_shm, droce's own same-host link
// (the wire itself is ShmLink, net/shm_link.h), not an ethdev.
//
// Device string: "droce_shm0,role=server,socket=/run/x.sock[,mac=02:..]
// [,slots=1024][,icrc=skip|compute]" and "droce_shm1,role=client,socket=..."
// in the other process. Unlike net_memif's, its receiver can sleep and still
// be woken by a frame, without root or a netdev: rx_interrupt_fd(0) is its
// eventfd (PortConfig::rx_interrupts), written by the sender only while this
// end sleeps, once per sleep, so it may be watched edge-triggered and never
// read (rx_interrupt_edge true); rx_interrupt_arm says "I sleep" / "I am
// back" (ShmLink::set_sleeping), rx_interrupt_ack reads the count.
//
// One queue pair, no offloads (multi-segment TX: a chain is copied into one
// slot), MTU up to 9000 (set_mtu only checks the range; frames carry what is
// sent), promiscuous (a wire to one peer: everything it sends arrives; it
// cannot be turned off), multicast unfiltered, link up while started and the
// peer is connected, statistics and xstats of its own (ShmLinkCounters and
// the rings' fill). Without mac= the MAC is a locally administered one
// derived from the socket path and the role. A created pool holds
// 2 x (2 x slots) + lcores x 256 mbufs of a whole frame each. tx_alloc
// builds long frames in the peer's ring slot (zero copy; see ShmLink).
//
// It offers PeerScheduling (net/peer_scheduling.h), forwarded to ShmLink.
//
// Threading as Link's; the ShmLink's connection runs on a control thread of
// its own.

#include <memory>
#include <string_view>

#include "net/link.h"
#include "net/peer_scheduling.h"
#include "net/shm_link.h"

namespace droce::net {

class DroceShmLink final : public Link, public PeerScheduling {
 public:
  /// Whether `devargs` names a droce_shm device.
  static bool claims(std::string_view devargs);
  /// Opens (listens or starts connecting); the link comes up when the peer is
  /// there. -EINVAL for a bad device string or an MTU past ShmLink::kMaxFrame.
  static int open(std::string_view devargs, const PortConfig& cfg, std::unique_ptr<Link>* out);
  ~DroceShmLink() override;

  uint16_t rx_burst(uint16_t /*queue*/, rte_mbuf** out, uint16_t n) override {
    return shm_->rx_burst(info_.pool, out, n);
  }
  uint16_t tx_burst(uint16_t /*queue*/, rte_mbuf** pkts, uint16_t n) override { return shm_->tx_burst(pkts, n); }
  rte_mbuf* tx_alloc(uint16_t /*queue*/, uint32_t len, bool* none_now) override {
    *none_now = false;
    return shm_->tx_alloc(info_.pool, len, none_now);
  }

  int rx_interrupt_fd(uint16_t queue) const override;
  int rx_interrupt_arm(uint16_t queue, bool on) override;
  void rx_interrupt_ack(uint16_t queue) override;
  bool rx_interrupt_edge(uint16_t queue) const override { return rx_interrupt_fd(queue) >= 0; }

  LinkState link() const override;
  uint16_t mtu() const override { return open_ ? asked_mtu_ : 0; }
  int set_mtu(uint16_t mtu) override;
  uint16_t wire_mtu() const override;
  bool promiscuous() const override { return open_; }
  int set_promiscuous(bool on) override;

  int stop() override;
  int start() override;
  int close() override;

  int stats(rte_eth_stats* out) const override;
  int xstats(std::vector<std::pair<std::string, uint64_t>>* out) const override;
  int reset_stats() override;

  PeerScheduling* peer_scheduling() override { return this; }

  // ---- PeerScheduling, ShmLink's ----
  void set_defer_wakes(bool on) override;
  void flush_wake() override;
  void flush_wake_if_late(uint64_t now_ns) override;
  bool wake_owed() const override { return shm_ != nullptr && shm_->wake_owed(); }
  uint64_t wake_owed_since_ns() const override { return shm_ != nullptr ? shm_->owed_since_ns() : 0; }
  bool peer_busy_with_ours(int cpu) const override { return shm_ != nullptr && shm_->peer_busy_with_ours(cpu); }
  bool peer_awake_on(int cpu) const override { return shm_ != nullptr && shm_->peer_awake_on(cpu); }
  void publish_running(int cpu, uint64_t awake_ns) override;
  uint64_t peer_awake_ns() const override { return shm_ != nullptr ? shm_->peer_awake_ns() : 0; }
  core::WakeStamp wake_stamp() const override { return shm_ != nullptr ? shm_->wake_stamp() : core::WakeStamp{}; }

 private:
  DroceShmLink() = default;

  std::unique_ptr<ShmLink> shm_;  ///< nullptr once closed
  uint16_t asked_mtu_ = 0;        ///< PortConfig::mtu, or the last set_mtu that passed
};

}  // namespace droce::net
