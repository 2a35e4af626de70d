#pragma once
// The engine's PacketPort on a real DPDK port queue: what droced's lcore
// loop and the one-process port tests use. TX frames the port does not take
// are kept by the engine (it flushes again next loop) and counted there.
//
// Loopback: a NIC delivers a frame addressed to its own MAC back to its own
// receive path (two QPs of one device, or two programs on one droced, talk
// that way); a DPDK port sends it to the wire, where nobody returns it. With
// set_loopback_mac(), frames whose destination MAC is that address are kept
// here instead of sent, in order, and take_loopback() hands them to the
// caller, which feeds them to the engine's RX (DeviceCore does, each loop).
// A full loopback queue takes no more frames: the engine keeps them, as for
// a full port. Multicast is not looped back (a UD multicast sender's own
// other QPs do not see it).
//
// Threading: the lcore that owns the queue; with set_tx_lock(), several
// lcores may share the port queue (each its own PortQueueLink).

#include <rte_ip.h>
#include <rte_spinlock.h>

#include <cstring>
#include <vector>

#include "net/addr.h"
#include "net/port.h"
#include "rocev2/engine.h"

namespace droce::rocev2 {

class PortQueueLink : public PacketPort {
 public:
  static constexpr size_t kLoopbackCapacity = 1024;

  PortQueueLink(net::Port* port, uint16_t queue) : port_(port), queue_(queue) {}
  ~PortQueueLink() override {
    for (rte_mbuf* m : loop_) rte_pktmbuf_free(m);
  }

  void set_loopback_mac(const net::MacAddr& mac) {
    loop_mac_ = mac;
    loopback_ = true;
  }

  /// Takes `lock` around every tx_burst on the queue (other lcores send on it too).
  void set_tx_lock(rte_spinlock_t* lock) { tx_lock_ = lock; }

  uint16_t tx_burst(rte_mbuf** frames, uint16_t n) override {
    if (!loopback_) return port_tx(frames, n);
    uint16_t done = 0;
    while (done < n) {
      // A run of frames for the wire, then a run for ourselves.
      uint16_t run = 0;
      while (done + run < n && !to_self(frames[done + run])) ++run;
      if (run != 0) {
        const uint16_t k = port_tx(frames + done, run);
        done += k;
        if (k < run) return done;
      }
      while (done < n && to_self(frames[done])) {
        if (loop_.size() >= kLoopbackCapacity) return done;
        rte_mbuf* m = frames[done++];
        // The IPv4 checksum the engine left to the NIC is written here, as the
        // NIC would have (the receiving side may check it in software).
        if (m->ol_flags & RTE_MBUF_F_TX_IP_CKSUM) {
          auto* ip = rte_pktmbuf_mtod_offset(m, rte_ipv4_hdr*, m->l2_len);
          ip->hdr_checksum = 0;
          ip->hdr_checksum = rte_ipv4_cksum(ip);
        }
        m->ol_flags = 0;
        loop_.push_back(m);
      }
    }
    return done;
  }

  /// Moves the looped-back frames, oldest first, to *out (cleared first).
  void take_loopback(std::vector<rte_mbuf*>* out) {
    out->clear();
    out->swap(loop_);
  }
  bool has_loopback() const { return !loop_.empty(); }

 private:
  uint16_t port_tx(rte_mbuf** frames, uint16_t n) {
    if (tx_lock_ == nullptr) return port_->tx_burst(queue_, frames, n);
    rte_spinlock_lock(tx_lock_);
    const uint16_t k = port_->tx_burst(queue_, frames, n);
    rte_spinlock_unlock(tx_lock_);
    return k;
  }

  bool to_self(const rte_mbuf* m) const {
    return m->data_len >= 6 && std::memcmp(rte_pktmbuf_mtod(m, const uint8_t*), loop_mac_.data(), 6) == 0;
  }

  net::Port* port_;
  uint16_t queue_;
  rte_spinlock_t* tx_lock_ = nullptr;
  bool loopback_ = false;
  net::MacAddr loop_mac_{};
  std::vector<rte_mbuf*> loop_;
};

}  // namespace droce::rocev2
