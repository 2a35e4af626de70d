#pragma once
// A received frame's arrival time, on its mbuf: DPDK's standard dynamic field and flag for RX
// timestamps (rte_mbuf_dyn_rx_timestamp_register: RTE_MBUF_DYNFIELD_TIMESTAMP_NAME and
// RTE_MBUF_DYNFLAG_RX_TIMESTAMP_NAME).
//
// Why: the loop reads the clock once per iteration, so every frame of a burst gets the same
// `now`, however long the frames waited in the ring while droced was not running. A link that
// knows when the kernel or the wire delivered each frame puts that time here, and what models
// the wire (the congestion point of droced's fault rules, droced/fault_stage.h) uses it.
//
// The clock: in droce the field holds CLOCK_MONOTONIC ns, the clock of core::monotonic_ns() and
// of droced's loop, whatever clock the link's source uses (DPDK leaves the unit to the driver,
// rte_eth_read_clock's); a link converts before it stamps. Links that stamp: PacketLink (the
// kernel's receive time from its TPACKET_V2 ring). droce enables no PMD's
// RTE_ETH_RX_OFFLOAD_TIMESTAMP, so no ethdev sets the flag with a device clock of its own.
//
// Frames a link does not stamp carry no flag (rte_pktmbuf_alloc clears ol_flags); copies
// (rte_pktmbuf_copy) keep the field and the flag.
//
// Threading: setup() from a control thread (it registers once per process; later calls find the
// same field); the rest is plain reads and writes of the mbuf, on the thread that holds it.

#include <rte_mbuf.h>
#include <rte_mbuf_dyn.h>

#include <cstdint>

namespace droce::net {

class RxTimestamp {
 public:
  /// Registers DPDK's RX timestamp field and flag, or finds them registered. 0 or -errno (the
  /// mbufs' dynamic area is full: frames then go unstamped and valid() stays false).
  int setup();
  bool valid() const { return flag_ != 0; }

  /// Stamps a received frame with `ns` (CLOCK_MONOTONIC). Needs valid().
  void stamp(rte_mbuf* m, uint64_t ns) const {
    *RTE_MBUF_DYNFIELD(m, offset_, rte_mbuf_timestamp_t*) = ns;
    m->ol_flags |= flag_;
  }
  /// Whether the frame carries a stamp; *ns gets it.
  bool read(const rte_mbuf* m, uint64_t* ns) const {
    if ((m->ol_flags & flag_) == 0 || flag_ == 0) return false;
    *ns = *RTE_MBUF_DYNFIELD(m, offset_, const rte_mbuf_timestamp_t*);
    return true;
  }
 private:
  int offset_ = -1;
  uint64_t flag_ = 0;
};

}  // namespace droce::net
