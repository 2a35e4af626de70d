#pragma once
// The engine's PacketPort on a real DPDK port queue: what droced's lcore
// loop and the one-process port tests use. TX frames the port does not take
// are kept by the engine (it flushes again next loop) and counted there.
//
// Threading: the lcore that owns the queue.

#include "net/port.h"
#include "rocev2/engine.h"

namespace droce::rocev2 {

class PortQueueLink : public PacketPort {
 public:
  PortQueueLink(net::Port* port, uint16_t queue) : port_(port), queue_(queue) {}
  uint16_t tx_burst(rte_mbuf** frames, uint16_t n) override { return port_->tx_burst(queue_, frames, n); }

 private:
  net::Port* port_;
  uint16_t queue_;
};

}  // namespace droce::rocev2
