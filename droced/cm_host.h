#pragma once
// droced's connection manager on the wire (issue #15, docs/cm.md): the GSI QP (QP1) on worker 0's
// engine, with droced's own PD, CQs and buffers, carrying the MADs of a cm::Agent. Every datagram
// for QP1 is handed to the agent with the address it came from; what the agent sends goes out as
// a UD SEND to the peer's QP1 once the peer's MAC is known (MADs to a peer still being resolved
// wait, a second at most: the CM retransmits anyway). The agent's timers run from the worker
// loop (poll(), next_deadline_ns()).
//
// The agent's consumer is a cm::Ucma: the rdma_cm device librdmacm programs reach through
// libdroce-rdmacm.so (provider/rdmacm). Each event channel is a SOCK_SEQPACKET connection to
// <run_dir>/<name>.cm.sock (the listening socket is the daemon's, made before the control
// socket), carrying one ucma command per message (abi/rdmacm_channel.h). droced makes
// each channel's eventfd (non-blocking, so no program can block droced on it) and counts the
// channel's queued events in it. The channels' sockets are watched by an epoll of their own,
// which worker 0's epoll watches (control_fd()).
//
// Threading: worker 0's thread only (its state lock held), like the engine it uses.

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "droced/device_core.h"
#include "cm/agent.h"
#include "cm/ucma.h"
#include "core/counter_table.h"
#include "core/unix_socket.h"
#include "net/gid_table.h"

namespace droce::droced {

/// What each counts is in kCmHostCounters.
struct CmHostCounters {
  uint64_t rx_mads = 0;
  uint64_t rx_errors = 0;
  uint64_t tx_mads = 0;
  uint64_t tx_unresolved = 0;
  uint64_t tx_no_slot = 0;
  uint64_t channels_opened = 0;
  uint64_t channels_faulted = 0;
  uint64_t channels_refused = 0;
};

/// CmHostCounters described once (core/counter_table.h); droced shows them prefixed cm_.
inline constexpr core::Counter<CmHostCounters> kCmHostCounters[] = {
    {"mads_in", &CmHostCounters::rx_mads, "datagrams QP1 received (handed to the agent)"},
    {"mads_out", &CmHostCounters::tx_mads, "MADs posted"},
    {"tx_unresolved", &CmHostCounters::tx_unresolved, "MADs dropped: the peer's MAC was not found in time"},
    {"tx_no_slot", &CmHostCounters::tx_no_slot, "MADs dropped: every send buffer in use"},
    {"rx_errors", &CmHostCounters::rx_errors, "receive completions in error, or shorter than a MAD"},
    {"channels_opened", &CmHostCounters::channels_opened, "rdma_cm event channels (librdmacm programs)"},
    {"channels_faulted", &CmHostCounters::channels_faulted, "channels closed for breaking the channel protocol"},
    {"channels_refused", &CmHostCounters::channels_refused,
     "channels of a process past its limit (answered EMFILE)"},
};
static_assert(core::covers(kCmHostCounters));

class CmHost {
 public:
  /// Event channels one process may hold (each is a socket and an eventfd in droced), so that
  /// a program cannot take droced's descriptors from the others (droced --cm-channels).
  /// rsockets makes one per socket: the default is generous.
  static constexpr uint32_t kDefaultChannelsPerProcess = 4096;
  void set_channels_per_process(uint32_t n) { channels_per_process_ = n; }

  /// Makes QP1 on `core`'s engine and posts its receives. `node_guid`: the device's (REQ/REP
  /// Local CA GUID); `seed` scrambles comm IDs and PSNs; `path_mtu` the port's (IB enum);
  /// `listen_fd` (borrowed, non-blocking; -1: none) the rdma_cm channels' listening socket.
  /// -errno from the engine.
  static int create(DeviceCore* core, const net::GidTable* gids, uint64_t node_guid, uint32_t seed,
                    uint8_t path_mtu, int listen_fd, std::unique_ptr<CmHost>* out);
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
  const cm::Ucma& ucma() const { return ucma_; }
  std::optional<cm::ConnState> agent_state(uint32_t conn) const { return agent_.state(conn); }

  /// The epoll of the channels' sockets (and their listening socket): worker 0 calls
  /// on_control() when it is readable.
  int control_fd() const { return epoll_.get(); }
  /// Accepts channels and serves their commands (non-blocking).
  void on_control(uint64_t now_ns);
  /// Completions waiting on QP1's CQs (the loop calls poll() when there are, or a deadline passed).
  bool has_completions() const { return recv_cq_->size() != 0 || send_cq_->size() != 0; }

 private:
  static constexpr uint32_t kRecvSlots = 64;
  static constexpr uint32_t kSendSlots = 64;
  static constexpr uint32_t kRecvBytes = 40 + cm::kMadSize;  // the GRH area, then the MAD
  static constexpr uint64_t kResolveWaitNs = 1'000'000'000;
  static constexpr size_t kMaxPeers = 1024;  ///< AHs and local addresses remembered

  /// The ucma layer's view of droced's addresses: the GID table and the neighbour table.
  class Network : public cm::UcmaNetwork {
   public:
    Network(DeviceCore* core, const net::GidTable* gids) : core_(core), gids_(gids) {}
    std::optional<std::pair<net::IpAddr, uint32_t>> source_for(const net::IpAddr& dst) const override;
    int gid_index(const net::IpAddr& ip) const override;
    Resolve resolve(const net::IpAddr& src, const net::IpAddr& dst, uint64_t now_ms) override;
    /// IGMP/MLD reports through the port's membership reporter (CoreGroup::membership()).
    void multicast_membership(const net::IpAddr& src, const net::IpAddr& group, bool joined) override;

   private:
    DeviceCore* core_;
    const net::GidTable* gids_;
  };
  struct Channel {
    core::Fd sock;
    core::Fd eventfd;
    pid_t pid = 0;         ///< the program's (SO_PEERCRED), for the per-process limit
    bool refused = false;  ///< over the limit: its HELLO is answered EMFILE, then it closes
  };

  static constexpr uint64_t kListenKey = 0;
  static constexpr uint64_t kResolvePollNs = 10'000'000;

  CmHost(DeviceCore* core, const net::GidTable* gids, uint64_t node_guid, uint32_t seed, uint8_t path_mtu);
  int start(int listen_fd);
  void accept_channels();
  /// Serves what channel `ch` sent; false when it must close (EOF or a protocol violation).
  bool serve(uint32_t ch, Channel& c, uint64_t now_ns);
  void close_channel(uint32_t ch, uint64_t now_ns);
  /// The agent's events to the ucma layer, the channels' eventfds to their queues' lengths.
  void pump(uint64_t now_ns);
  void update_deadline(uint64_t now_ns);
  void post_recv(uint32_t slot);
  void send(const cm::AgentOutgoing& o, uint64_t now_ns);
  /// The AH to `peer` from `local`, made once the MAC is known; 0 while resolving, -1 failed.
  int64_t ah_for(const net::IpAddr& peer, const net::IpAddr& local, uint64_t now_ns);

  DeviceCore* core_;
  const net::GidTable* gids_;
  cm::Agent agent_;
  Network net_;
  cm::Ucma ucma_;
  core::Fd epoll_;
  int listen_fd_ = -1;
  std::map<uint32_t, Channel> channels_;  ///< by the ucma's channel number (their epoll key)
  std::map<pid_t, uint32_t> per_process_;  ///< channels held, by process
  uint32_t channels_per_process_ = kDefaultChannelsPerProcess;
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
