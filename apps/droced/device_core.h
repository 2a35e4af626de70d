#pragma once
// One poll-mode core's share of droced: a port queue, the transport engine
// on it, and the port's neighbour table (ARP / IPv6 ND). run_once() is the
// lcore loop's body (docs/droced.md):
//   RX burst -> ARP/ND frames to the neighbour table, the rest to the engine;
//   frames the engine sent to our own MAC (rocev2/port_link.h) -> the engine;
//   neighbour replies and requests out; engine timers, requester and TX.
//
// Next hops are resolved where the kernel resolves them for RoCE devices: when
// a QP's address vector is set (modify to RTR) or an AH is created. A peer
// that never answers fails that verb (EHOSTUNREACH) after the neighbour
// table's retries, instead of leaving sends to hang.
//
// Threading: everything here belongs to the lcore that calls run_once().

#include <memory>
#include <vector>

#include "net/neighbor.h"
#include "net/port.h"
#include "rocev2/engine.h"
#include "rocev2/port_link.h"

namespace droce::droced {

struct DeviceCoreConfig {
  net::Port* port = nullptr;
  uint16_t queue = 0;
  /// This host's addresses on the port (GID form); the first is the engine's source.
  std::vector<net::IpAddr> addresses;
  uint16_t vlan = net::kNoVlan;
  net::NeighborConfig neighbor;
  rocev2::EngineConfig engine;  ///< pool, port, MAC, IP and offloads are filled in from the above
};

struct DeviceCoreCounters {
  uint64_t neighbor_frames_in = 0;   ///< ARP/ND frames handed to the neighbour table
  uint64_t neighbor_frames_out = 0;  ///< its replies and requests sent
  uint64_t neighbor_tx_dropped = 0;  ///< no mbuf or port full (the table retries on its own)
  uint64_t oversize_control = 0;     ///< ARP/ND frames too large to read (dropped)
  uint64_t loopback_frames = 0;      ///< frames to our own MAC, handed from TX to RX
};

class DeviceCore {
 public:
  /// -errno through *rc (EINVAL: no port or no address).
  DeviceCore(const DeviceCoreConfig& cfg, int* rc);
  DeviceCore(const DeviceCore&) = delete;
  DeviceCore& operator=(const DeviceCore&) = delete;

  void run_once(uint64_t now_ns);

  /// Fills av->smac, av->sgid (if unset) and av->dmac for av->dgid. resolved;
  /// pending (call again after more run_once); failed (no answer).
  net::ResolveStatus resolve(rocev2::AddressVector* av, uint64_t now_ns);

  rocev2::Engine& engine() { return *engine_; }
  net::NeighborTable& neighbors() { return neighbors_; }
  const DeviceCoreCounters& counters() const { return counters_; }
  uint64_t next_deadline() const;

 private:
  void send_neighbor_frames();

  DeviceCoreConfig cfg_;
  std::unique_ptr<rocev2::PortQueueLink> link_;
  std::unique_ptr<rocev2::Engine> engine_;
  net::NeighborTable neighbors_;
  std::vector<std::vector<uint8_t>> neighbor_tx_;
  std::vector<rte_mbuf*> loopback_rx_;
  DeviceCoreCounters counters_;
};

}  // namespace droce::droced
