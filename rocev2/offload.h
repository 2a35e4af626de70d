#pragma once
// The port seam (DESIGN.md, hw_offload): what the NIC does for the
// transport. The engine asks only this table; hw_offload/ fills it from the
// port's capabilities when the port starts, and the software defaults below
// are what runs on a port that offers nothing (every PMD on this project's
// machines but net_tap). Decided once at start: the engine reads plain
// fields on the fast path, no per-packet indirect call.

#include <cstdint>

namespace droce::rocev2 {

struct OffloadOps {
  const char* name = "software";
  /// RX: the NIC checked IPv4 header checksums and says so per mbuf
  /// (RTE_MBUF_F_RX_IP_CKSUM_GOOD / _BAD): trust it, skip the software check
  /// when GOOD, drop when BAD.
  bool rx_ipv4_checksum = false;
  /// TX: the NIC fills IPv4 header checksums (the engine still writes a correct
  /// one; the ICRC masks the field either way).
  bool tx_ipv4_checksum = false;
  /// RX: the ICRC needs no check: the NIC checked it (no DPDK PMD reports
  /// this today; a backend for a NIC that does would set it), or the link
  /// carries none (droce_shm with icrc=skip: memory between two processes).
  bool rx_icrc = false;
  /// TX: the engine leaves the ICRC field zero: the NIC fills it, or the link
  /// carries none (droce_shm with icrc=skip; both ends agree at connect).
  bool tx_icrc = false;
  /// Control: steer a destination QPN to an RX queue (rte_flow). Absent: packets
  /// for another lcore's QP are handed over in software.
  int (*steer_qpn)(uint16_t port_id, uint32_t qpn, uint16_t queue) = nullptr;
};

}  // namespace droce::rocev2
