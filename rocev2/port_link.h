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
// a full port. A frame to a multicast MAC goes to the wire and, while some
// core of this device has multicast groups (set_multicast_loopback), a copy
// is looped back too: QPs attached here receive what this host sends to
// their group, as a NIC loops multicast back to its own attached QPs (rxe
// through the kernel's IP multicast loop).
//
// Threading: the lcore that owns the queue; with set_tx_lock(), several
// lcores may share the port queue (each its own PortQueueLink).

#include <rte_ip.h>
#include <rte_spinlock.h>

#include <atomic>
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

  /// While *cores != 0, frames to a multicast MAC are also looped back (a copy).
  void set_multicast_loopback(const std::atomic<uint32_t>* cores) { mcast_cores_ = cores; }

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
        const size_t copies = loop_.size();
        if (mcast_cores_ != nullptr && mcast_cores_->load(std::memory_order_relaxed) != 0)
          copy_multicast(frames + done, run);
        const uint16_t k = port_tx(frames + done, run);
        // Copies of frames the port did not take are dropped: they come again.
        drop_copies_past(copies, k);
        done += k;
        if (k < run) return done;
      }
      while (done < n && to_self(frames[done])) {
        if (loop_.size() >= kLoopbackCapacity) return done;
        rte_mbuf* m = frames[done++];
        loop_.push_back(as_received(m));
      }
    }
    return done;
  }

  /// Built in place on a port that offers it (droce_shm), when this queue is ours alone (the
  /// slots are taken in order; lcores sharing the queue would interleave them) and the frame
  /// goes to the wire (a frame to our own MAC stays here, and would hold its slot meanwhile).
  rte_mbuf* alloc_frame(const net::MacAddr& dst, uint32_t len, bool* none_now) override {
    *none_now = false;
    if (tx_lock_ != nullptr || (loopback_ && net::same_mac(dst, loop_mac_))) return nullptr;
    return port_->tx_alloc(queue_, len, none_now);
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

  /// The IPv4 checksum the engine left to the NIC is written here, as the
  /// NIC would have (the receiving side may check it in software).
  static rte_mbuf* as_received(rte_mbuf* m) {
    if (m->ol_flags & RTE_MBUF_F_TX_IP_CKSUM) {
      auto* ip = rte_pktmbuf_mtod_offset(m, rte_ipv4_hdr*, m->l2_len);
      ip->hdr_checksum = 0;
      ip->hdr_checksum = rte_ipv4_cksum(ip);
    }
    m->ol_flags = 0;
    return m;
  }

  /// Appends a copy of each multicast frame of `frames` to the loopback queue,
  /// remembering which frame each copy is of.
  void copy_multicast(rte_mbuf** frames, uint16_t n) {
    copy_of_.clear();
    for (uint16_t i = 0; i < n && loop_.size() < kLoopbackCapacity; ++i) {
      const rte_mbuf* m = frames[i];
      if (m->data_len < 6 || (rte_pktmbuf_mtod(m, const uint8_t*)[0] & 1) == 0) continue;
      rte_mbuf* c = rte_pktmbuf_copy(m, m->pool, 0, UINT32_MAX);
      if (c == nullptr) continue;  // no mbuf: the local copy is lost, as a drop
      loop_.push_back(as_received(c));
      copy_of_.push_back(i);
    }
  }
  /// Frees the copies (made since loop_ had `first` entries) of frames at or past `sent`.
  void drop_copies_past(size_t first, uint16_t sent) {
    size_t keep = first;
    for (size_t j = 0; j < copy_of_.size(); ++j) {
      rte_mbuf* c = loop_[first + j];
      if (copy_of_[j] < sent) loop_[keep++] = c;
      else rte_pktmbuf_free(c);
    }
    if (!copy_of_.empty()) loop_.resize(keep);
    copy_of_.clear();
  }

  bool to_self(const rte_mbuf* m) const {
    return m->data_len >= 6 && net::same_mac(rte_pktmbuf_mtod(m, const uint8_t*), loop_mac_.data());
  }

  net::Port* port_;
  uint16_t queue_;
  rte_spinlock_t* tx_lock_ = nullptr;
  bool loopback_ = false;
  net::MacAddr loop_mac_{};
  std::vector<rte_mbuf*> loop_;
  const std::atomic<uint32_t>* mcast_cores_ = nullptr;
  std::vector<uint16_t> copy_of_;  ///< per copy made this run: its frame's index in the run
};

}  // namespace droce::rocev2
