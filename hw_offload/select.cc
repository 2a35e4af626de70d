#include "hw_offload/select.h"

#include <rte_ethdev.h>

namespace droce::hw_offload {

rocev2::OffloadOps select_offloads(const net::Port& port) {
  rocev2::OffloadOps ops;  // software everywhere
  const bool rx_ip = port.enabled_rx_offloads() & RTE_ETH_RX_OFFLOAD_IPV4_CKSUM;
  const bool tx_ip = port.enabled_tx_offloads() & RTE_ETH_TX_OFFLOAD_IPV4_CKSUM;
  ops.rx_ipv4_checksum = rx_ip;
  ops.tx_ipv4_checksum = tx_ip;
  if (rx_ip || tx_ip) ops.name = "ipv4-checksum";
  if (port.capabilities().no_icrc) {
    // The link carries none (droce_shm with icrc=skip: both ends agreed at connect).
    ops.rx_icrc = ops.tx_icrc = true;
    ops.name = "icrc (droce_shm carries none)";
  }
  // QPN steering needs a flow rule that matches the BTH's destination QP (a
  // raw pattern past UDP); port.capabilities().flow_udp_4791_to_queue says
  // whether rte_flow can even steer UDP 4791. Not built: one lcore per port
  // needs none, and software hand-off covers several.
  return ops;
}

}  // namespace droce::hw_offload
