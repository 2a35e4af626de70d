#pragma once
// Faults on a running droced (`droce fault`): rules, each a fault spec (net/fault_model.h) for
// the frames of one QP or of the whole port, received (rx), sent (tx) or both, changed and
// cleared while traffic runs. `--drop-rate` is the rule "drop P% of every frame received".
//
// Where they act: on RoCE frames only (ARP, ND, IGMP and the kernel's traffic pass untouched,
// so a lab's loss never breaks neighbour resolution), per core:
//   rx: frames from the port and frames looped back from this droced's own QPs, before they
//       are routed to their core's engine; a rule for QP N takes frames whose BTH destination
//       QP is N (requests to it, and acknowledgements and responses to it);
//   tx: frames an engine sends, before the port (FaultPort wraps the engine's PacketPort); a
//       rule for QP N takes the frames QP N sends (its requests or its acknowledgements).
// The first rule that matches a frame decides its fate (a QP's rules come before the port's:
// they are kept sorted so), and counts it.
//
// A held frame (delay, jitter, reorder) never pins a link's buffer: one in a droce_shm slot
// (an external buffer) is copied to a pool mbuf first. Corruption on a link that carries no
// ICRC (droce_shm with icrc=skip: nobody would check it) discards the frame as the receiver's
// ICRC check would have, and counts it (corrupt_discarded).
//
// A rule with rate= is a congestion point (net/congestion_point.h): one queue per rule,
// direction and core, drained at the rate, drop-tail at buffer=, RED/ECN marking between
// ecn-min and ecn-max (CE set in the IP header, its checksum fixed); its frames are held until
// they leave the queue. With mark=dequeue RED decides as a frame leaves (when it is released,
// on the depth it leaves behind), and a duplicate is copied after that decision. As an rx rule
// for every QP it is the switch's egress port toward this host: every sender's frames share it
// (per core: a droced of one core has one queue).
//
// With pfc-xoff= the congestion point is lossless as a RoCE fabric's is (net/pfc.h): an rx rule's
// queue past xoff bytes pauses the senders it queued frames from (802.1Qbb PFC frames, unicast to
// their MACs, for their frames' priorities), refreshes the pause while it stays above xon and
// resumes them at xon. The stage only decides: take_pauses() hands the pauses to send to the
// core, which sends them and whose peers' droced hold their transmit for the time (FaultPort's
// PauseGate). A tx rule's queue does not pause (the senders are this host's own QPs).
//
// A frame's time at a rule is when it arrived: for a received frame that a link stamped (DPDK's
// RX timestamp, net/rx_timestamp.h: droce's packet link gives the kernel's receive time) that
// stamp, never later than the loop's time; for any other frame, and under a rule with
// arrival=loop, the loop's time. So a queue sees frames spaced as the wire delivered them, not
// all at the instant a late loop took a millisecond of them from the ring at once. A frame whose
// time of leaving (its queue's departure plus any delay) has passed by the loop's time goes on
// at once; the counter wire_timed says how many a rule timed by their stamp.
//
// Threading: FaultRules is shared by the cores of a device; set()/clear() from any thread, the
// cores pick a new version up at their next loop (one relaxed load per loop when nothing
// changed). A FaultStage belongs to one core.

#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/counter_table.h"
#include "droced/capture.h"
#include "net/congestion_point.h"
#include "net/fault_model.h"
#include "net/rx_timestamp.h"
#include "rocev2/engine.h"

namespace droce::droced {

enum class FaultDirection : uint8_t { rx = 1, tx = 2, both = 3 };
const char* to_string(FaultDirection d);

inline constexpr uint32_t kAllQps = UINT32_MAX;

struct FaultRule {
  uint32_t id = 0;          ///< 1, 2, ...; set() with 0 picks the next
  uint32_t qpn = kAllQps;   ///< the local QP whose frames it takes, or every RoCE frame
  FaultDirection direction = FaultDirection::rx;
  net::FaultSpec spec;
  uint64_t seed = 1;        ///< each core and direction derives its own dice from it
};

/// What one rule did (on one core; the stats add the cores up).
struct FaultCounters {
  uint64_t matched = 0;
  uint64_t dropped = 0;
  uint64_t burst_dropped = 0;
  uint64_t delayed = 0;
  uint64_t reordered = 0;
  uint64_t duplicated = 0;
  uint64_t corrupted = 0;
  uint64_t corrupt_discarded = 0;
  uint64_t truncated = 0;
  uint64_t copy_failed = 0;
  uint64_t queue_bytes = 0;
  uint64_t queue_marked = 0;
  uint64_t queue_dropped = 0;
  uint64_t queue_red_dropped = 0;
  uint64_t queue_depth = 0;
  uint64_t queue_depth_max = 0;
  uint64_t wire_timed = 0;
  uint64_t pfc_xoff_sent = 0;
  uint64_t pfc_xon_sent = 0;
  uint64_t pfc_paused_us = 0;
  uint64_t pfc_untracked = 0;
  uint64_t pfc_repaused = 0;

  FaultCounters& operator+=(const FaultCounters& o);
};

inline constexpr core::Counter<FaultCounters> kFaultCounters[] = {
    {"matched", &FaultCounters::matched, "frames the rule took (a frame goes to the first rule that matches)"},
    {"dropped", &FaultCounters::dropped, "frames lost, burst losses included"},
    {"burst_dropped", &FaultCounters::burst_dropped, "of dropped: lost while the burst channel was bad"},
    {"delayed", &FaultCounters::delayed, "frames held (delay, jitter or reorder) before going on"},
    {"reordered", &FaultCounters::reordered, "of delayed: held back the reorder window"},
    {"duplicated", &FaultCounters::duplicated, "extra copies sent on"},
    {"corrupted", &FaultCounters::corrupted, "frames with one bit flipped"},
    {"corrupt_discarded", &FaultCounters::corrupt_discarded,
     "of corrupted: discarded on a link without ICRC, as the receiver's check would"},
    {"truncated", &FaultCounters::truncated, "frames that lost their tail"},
    {"copy_failed", &FaultCounters::copy_failed, "a copy (duplicate, private copy) found no mbuf: that fault skipped"},
    {"queue_bytes", &FaultCounters::queue_bytes, "congestion point (rate=): bytes through the queue"},
    {"queue_marked", &FaultCounters::queue_marked, "congestion point: frames RED marked CE"},
    {"queue_dropped", &FaultCounters::queue_dropped, "congestion point: frames dropped at a full buffer"},
    {"queue_red_dropped", &FaultCounters::queue_red_dropped,
     "congestion point: frames not ECN-capable RED dropped where they would be marked"},
    {"queue_depth", &FaultCounters::queue_depth, "congestion point: bytes queued now (a gauge)"},
    {"queue_depth_max", &FaultCounters::queue_depth_max, "congestion point: the deepest the queue was, bytes (a gauge)"},
    {"wire_timed", &FaultCounters::wire_timed,
     "of matched: timed by the link's receive stamp, not the loop's clock (the packet link stamps)"},
    {"pfc_xoff_sent", &FaultCounters::pfc_xoff_sent,
     "congestion point (pfc-xoff=): PFC pause frames sent, refreshes too"},
    {"pfc_xon_sent", &FaultCounters::pfc_xon_sent, "congestion point: PFC frames resuming the senders (quanta 0)"},
    {"pfc_paused_us", &FaultCounters::pfc_paused_us,
     "congestion point: time its senders were held paused, us (ended pauses)"},
    {"pfc_untracked", &FaultCounters::pfc_untracked,
     "congestion point: frames from senders past the 32 it can pause (never paused)"},
    {"pfc_repaused", &FaultCounters::pfc_repaused,
     "of pfc_xoff_sent: to a sender whose frames still came 200 us after its pause (it lost it)"},
};
static_assert(core::covers(kFaultCounters));

/// A device's rules (droced has one; the cores read it).
class FaultRules {
 public:
  /// Adds the rule, or replaces the one with its id (keeping that rule's dice and counters on
  /// each core). *id gets the rule's id. -EINVAL: a bad direction; -ENOSPC: kMaxRules rules.
  int set(FaultRule r, uint32_t* id);
  /// Removes rule `id` (0: every rule). -ENOENT: no such rule.
  int clear(uint32_t id);
  std::vector<FaultRule> rules() const;
  uint64_t version() const { return version_.load(std::memory_order_acquire); }

  static constexpr size_t kMaxRules = 64;

 private:
  mutable std::mutex mutex_;
  std::vector<FaultRule> rules_;  ///< QP rules first, then port rules; by id within each
  uint32_t next_id_ = 1;
  std::atomic<uint64_t> version_{0};
};

class FaultStage {
 public:
  /// `pool` gives copies; `icrc_on_link` false for a link that carries no ICRC; `speed_bps` the
  /// senders' port speed, for how long a pause holds them (net::PfcPoint).
  FaultStage(const FaultRules* rules, unsigned core, rte_mempool* pool, bool icrc_on_link,
             uint64_t speed_bps = 100'000'000'000ull);
  ~FaultStage();
  FaultStage(const FaultStage&) = delete;
  FaultStage& operator=(const FaultStage&) = delete;

  /// Picks up changed rules (cheap when none changed).
  void refresh() {
    if (rules_ != nullptr && rules_->version() != version_) reload();
  }
  /// Some rule acts on direction d, or frames of d are held.
  bool active(FaultDirection d) const { return (active_ & uint8_t(d)) != 0 || held_[index(d)] != 0; }

  /// Takes n frames of direction d; appends to *out, in order, the held frames due by now and
  /// then the frames that go on now; keeps the rest until due. now_ns is the loop's time; a
  /// received frame with an RX timestamp is timed by it (see the top).
  void process(FaultDirection d, rte_mbuf* const* frames, size_t n, uint64_t now_ns, std::vector<rte_mbuf*>* out);
  /// Appends the held frames of direction d due by now_ns to *out.
  void release(FaultDirection d, uint64_t now_ns, std::vector<rte_mbuf*>* out);
  /// When the next held frame is due; UINT64_MAX when none is held.
  uint64_t next_release_ns() const;
  /// Appends the PFC frames to send (pfc-xoff rules) to *out, and forgets them.
  void take_pauses(std::vector<net::PauseOut>* out) {
    if (pauses_.empty()) return;
    out->insert(out->end(), pauses_.begin(), pauses_.end());
    pauses_.clear();
  }

  /// Each live rule's counters on this core (by rule id), and the sum over every rule this core
  /// ever ran (removed ones too).
  std::vector<std::pair<uint32_t, FaultCounters>> rule_counters() const;
  const FaultCounters& totals() const { return totals_; }

 private:
  struct Active {
    FaultRule rule;
    net::FaultDice dice[2];  ///< rx, tx
    net::CongestionPoint queue[2];  ///< rx, tx (rate= rules only)
    FaultCounters counters;
    net::PfcPoint pfc;  ///< the rx queue's (pfc-xoff= rules only)
  };
  struct Held {
    uint64_t due_ns;
    uint64_t seq;  ///< arrival order: breaks ties, so equal delays keep order
    rte_mbuf* m;
    /// A mark=dequeue rule's frame, held until it leaves the queue (due_ns): RED decides then,
    /// on the depth it leaves behind; then the copy a duplicate fate asked for is made and a
    /// delay holds both until then_due_ns. 0: nothing to decide.
    uint32_t dequeue_rule = 0;
    uint8_t ecn = 0;  ///< its IP ECN bits as it arrived
    bool duplicate = false;
    uint64_t then_due_ns = 0;
  };
  static size_t index(FaultDirection d) { return d == FaultDirection::tx ? 1 : 0; }
  void reload();
  Active* match(FaultDirection d, const rte_mbuf* m);
  void hold(FaultDirection d, Held h);
  /// Through the rule's congestion point: false when it dropped the frame; *depart_ns when it
  /// leaves, *ecn its IP ECN bits as it arrived.
  bool enqueue(Active& a, FaultDirection d, rte_mbuf** m, uint64_t now_ns, uint64_t* depart_ns, uint8_t* ecn);
  /// Acts on a rule's queue's verdict for *m at at_ns (on arrival, or on leaving with
  /// mark=dequeue), counted: false when it dropped the frame; *m may be replaced by a copy with
  /// CE set.
  bool take_verdict(Active& a, FaultDirection d, rte_mbuf** m, net::QueueVerdict v, uint64_t at_ns);
  /// A held frame whose time has come: its dequeue decision, duplicate and delay; appends to
  /// *out what goes on by now_ns.
  void leave(FaultDirection d, Held& h, uint64_t now_ns, std::vector<rte_mbuf*>* out);
  /// What a rule's counters moved by since `before`, into the core's totals.
  void add_to_totals(const FaultCounters& before, const FaultCounters& after);
  /// The queues' depth gauges at now_ns, and their PFC decisions on them.
  void update_depths(FaultDirection d, uint64_t now_ns);
  /// A rule's PFC on its rx queue's depth at now_ns (spec: the rule's, or none when it is gone).
  void pfc_check(Active& a, const net::PfcSpec& spec, uint64_t depth, uint64_t now_ns);
  /// Applies one rolled fate to a frame that arrived at arrival_ns (<= now_ns); appends what goes
  /// on by now_ns to *out.
  void apply(Active& a, FaultDirection d, rte_mbuf* m, uint64_t arrival_ns, uint64_t now_ns,
             std::vector<rte_mbuf*>* out);

  const FaultRules* rules_;
  unsigned core_;
  rte_mempool* pool_;
  bool icrc_on_link_;
  net::RxTimestamp rx_ts_;  ///< not valid(): every frame is timed by the loop
  uint64_t version_ = 0;
  uint8_t active_ = 0;  ///< FaultDirection bits some rule covers
  bool pfc_ = false;    ///< some rule's queue is lossless (pfc-xoff=)
  uint64_t speed_bps_;
  std::vector<net::PauseOut> pauses_;
  std::vector<Active> active_rules_;
  std::vector<Held> heap_[2];  ///< min-heaps on (due, seq), rx and tx
  size_t held_[2] = {0, 0};
  uint64_t next_seq_ = 0;
  FaultCounters totals_;
};

/// The engine's PacketPort with the tx faults in front: frames a rule holds or drops are taken
/// here, the rest go on to `inner` in order. With no tx rule and nothing held, one branch.
/// Back-pressure: frames the inner port refused wait here (in order) up to kMaxQueued, past
/// which tx_burst takes no more (the engine keeps them, as for a full port). A running capture
/// (`tap`) sees the frames the inner port accepts: what goes on the wire, after the faults.
///
/// PFC (`gate`, shared by the port's cores): a frame whose priority a peer paused (net/pfc.h) is
/// not sent until the pause ends; the burst stops before it, as a NIC's paused transmit queue
/// holds its frames, and the engine or queued_ keeps it. No pause in force: one load (a plain mov on x86).
class FaultPort : public rocev2::PacketPort {
 public:
  static constexpr size_t kMaxQueued = 1024;
  FaultPort(rocev2::PacketPort* inner, FaultStage* stage, CaptureTap tap = {}, net::PauseGate* gate = nullptr)
      : inner_(inner), stage_(stage), tap_(tap), gate_(gate) {}
  ~FaultPort() override;

  uint16_t tx_burst(rte_mbuf** frames, uint16_t n) override;
  rte_mbuf* alloc_frame(const net::MacAddr& dst, uint32_t len, bool* none_now) override {
    return inner_->alloc_frame(dst, len, none_now);
  }
  /// Sends held frames that are due, and what the inner port refused before.
  void poll(uint64_t now_ns);
  bool has_queued() const { return !queued_.empty(); }
  /// Bursts a pause cut short (frames held back for it).
  uint64_t pause_waits() const { return pause_waits_; }

 private:
  void flush();
  /// inner_->tx_burst, with the capture's copy of what it accepted.
  uint16_t send(rte_mbuf** frames, uint16_t n) {
    if (gate_ != nullptr && gate_->engaged()) [[unlikely]] {
      n = admit(frames, n);
      if (n == 0) return 0;
    }
    const uint32_t g = tap_.generation();
    if (g == 0) [[likely]] return inner_->tx_burst(frames, n);
    return send_captured(g, frames, n);
  }
  uint16_t send_captured(uint32_t generation, rte_mbuf** frames, uint16_t n);
  /// How many of the frames lead up to the first one whose priority is paused.
  uint16_t admit(rte_mbuf** frames, uint16_t n);
  rocev2::PacketPort* inner_;
  FaultStage* stage_;
  CaptureTap tap_;
  net::PauseGate* gate_;
  uint64_t pause_waits_ = 0;
  std::vector<rte_mbuf*> queued_;
  std::vector<rte_mbuf*> scratch_;
};

}  // namespace droce::droced
