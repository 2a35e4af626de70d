#pragma once
// droced's connection manager on the wire (issue #15, docs/cm.md): the GSI QP (QP1) on worker 0's
// engine, with droced's own PD, CQs and buffers, carrying the MADs of a cm::Agent. Every datagram
// for QP1 is handed to the agent with the address it came from; what the agent sends goes out as
// a UD SEND to the peer's QP1 once the peer's MAC is known (MADs to a peer still being resolved
// wait, a second at most: the CM retransmits anyway). The agent's timers run from the worker
// loop (poll(), next_deadline_ns()).
//
// No consumer is attached yet (the ucma layer is next): the agent answers REQs with REJ 8 (no
// listener) and SIDR_REQs with status 1, which is already what a peer needs to hear instead of
// silence.
//
// Threading: worker 0's thread only (its state lock held), like the engine it uses.

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "apps/droced/device_core.h"
#include "cm/agent.h"
#include "net/gid_table.h"

namespace droce::droced {

struct CmHostCounters {
  uint64_t rx_mads = 0;            ///< datagrams QP1 received (handed to the agent)
  uint64_t rx_errors = 0;          ///< receive completions in error, or shorter than a MAD
  uint64_t tx_mads = 0;            ///< MADs posted
  uint64_t tx_unresolved = 0;      ///< MADs dropped: the peer's MAC was not found in time
  uint64_t tx_no_slot = 0;         ///< MADs dropped: every send buffer in use
  uint64_t events_unconsumed = 0;  ///< agent events with no consumer yet
};

class CmHost {
 public:
  /// Makes QP1 on `core`'s engine and posts its receives. `node_guid`: the device's (REQ/REP
  /// Local CA GUID); `seed` scrambles comm IDs. -errno from the engine.
  static int create(DeviceCore* core, const net::GidTable* gids, uint64_t node_guid, uint32_t seed,
                    std::unique_ptr<CmHost>* out);
  ~CmHost();
  CmHost(const CmHost&) = delete;
  CmHost& operator=(const CmHost&) = delete;

  /// Takes QP1's completions, runs the agent's timers, sends what it has. Returns how much it did.
  uint32_t poll(uint64_t now_ns);
  /// When poll() next has something to do (UINT64_MAX: nothing). Computed at the end of each
  /// poll() (only poll() changes the agent), so the worker loop may ask on every pass.
  uint64_t next_deadline_ns() const { return deadline_ns_; }

  const CmHostCounters& counters() const { return counters_; }
  const cm::AgentCounters& agent_counters() const { return agent_.counters(); }
  /// Completions waiting on QP1's CQs (the loop calls poll() when there are, or a deadline passed).
  bool has_completions() const { return recv_cq_->size() != 0 || send_cq_->size() != 0; }

 private:
  static constexpr uint32_t kRecvSlots = 64;
  static constexpr uint32_t kSendSlots = 64;
  static constexpr uint32_t kRecvBytes = 40 + cm::kMadSize;  // the GRH area, then the MAD
  static constexpr uint64_t kResolveWaitNs = 1'000'000'000;
  static constexpr size_t kMaxPeers = 1024;  ///< AHs and local addresses remembered

  CmHost(DeviceCore* core, const net::GidTable* gids, uint64_t node_guid, uint32_t seed);
  int start();
  void post_recv(uint32_t slot);
  void send(const cm::AgentOutgoing& o, uint64_t now_ns);
  /// The AH to `peer` from `local`, made once the MAC is known; 0 while resolving, -1 failed.
  int64_t ah_for(const net::IpAddr& peer, const net::IpAddr& local, uint64_t now_ns);

  DeviceCore* core_;
  const net::GidTable* gids_;
  cm::Agent agent_;
  uint32_t pd_ = 0;
  rocev2::Cq* send_cq_ = nullptr;
  rocev2::Cq* recv_cq_ = nullptr;
  rocev2::Mr* mr_ = nullptr;
  bool qp_made_ = false;
  std::vector<uint8_t> buffers_;     ///< receive slots, then send slots
  std::vector<uint32_t> free_send_;  ///< send slots not in flight
  std::map<net::IpAddr, uint32_t> ahs_;       ///< by peer GID
  std::map<net::IpAddr, net::IpAddr> local_;  ///< the local GID each peer's MADs came to
  struct Waiting {
    cm::AgentOutgoing mad;
    uint64_t since_ns;
  };
  std::deque<Waiting> waiting_;  ///< MADs for peers whose MAC is being resolved
  uint64_t deadline_ns_ = UINT64_MAX;
  CmHostCounters counters_;
};

}  // namespace droce::droced
