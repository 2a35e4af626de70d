#pragma once
// SimLink: a simulated two-ended Ethernet link for deterministic tests.
//
// Two engines exchange rte_mbuf frames through a SimLink while a driver loop
// advances a virtual clock (core::VirtualClock), jumping straight to the next
// arrival. Each direction has its own faults (loss, Gilbert-Elliott burst
// loss, reordering, duplication, bit corruption, delay, jitter, a
// serialization rate and a tail-drop queue) and its own random generator,
// derived from one seed, so a run is a pure function of the seed and of the
// sequence of calls: a failing test fails the same way every time it runs
// with the same seed (print it).
//
// The fate of one frame: first the link's own two, then the fault model's (net/fault_model.h,
// which droced's live fault rules use too):
//   1. queue_limit: if the direction already holds queue_limit frames, the
//      frame is tail-dropped (queue_dropped) and never reaches the wire.
//   2. rate_bps: the frame waits for the serializer (frames sent earlier in
//      this direction) and takes ceil(pkt_len * 8 / rate) to serialize, FCS,
//      preamble and inter-frame gap not counted. 0: instantaneous. A frame the
//      model then loses still used the serializer.
//   3. FaultDice::roll: burst and independent loss (lost, burst_lost), then
//      arrival = serialization end + delay_ns + jitter + the reorder window
//      (reordered), a bit flip (corrupted; the frame's bytes are all "any",
//      the link knows no RoCE layout), truncation (truncated) and a duplicate
//      (duplicated) that arrives right after it.
// Corrupting or truncating a frame whose data is shared (refcnt > 1, indirect
// or external) first replaces it by a deep copy (rte_pktmbuf_copy from `pool`),
// so no other frame or holder ever sees the change; a duplicate is a deep copy
// of the frame as it will arrive. The copy is not subject to queue_limit.
// "In flight" means accepted by send() and not yet handed out by receive():
// frames that have arrived but wait for the receiver count, like a full RX
// ring. in_flight() and queue_limit use this one definition.
//
// Errors: a copy that cannot be made (pool exhausted, or no pool) skips that
// duplicate or that corruption and counts copy_failed; nothing else fails.
// Invariant per direction:
//   sent + duplicated == delivered + lost + queue_dropped + (frames in flight)
//
// Cost: test infrastructure, not the hot path. Each frame costs O(log n) in a
// heap whose storage grows amortized; duplicates and copy-on-corrupt allocate
// mbufs from `pool`. No per-frame heap allocation otherwise.
//
// Threading: none. One thread drives a SimLink (both ends); the now_ns given
// to send() must not decrease from call to call (the serializer's state and
// arrival order assume time moves forward).

#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "net/fault_model.h"

namespace droce::net {

/// The fault model's faults (a propagation delay of 1 us by default) and the link's own.
struct LinkFaults : FaultSpec {
  LinkFaults() { delay_ns = 1000; }
  uint64_t rate_bps = 0;     ///< serialization rate; 0 = infinitely fast
  uint32_t queue_limit = 0;  ///< frames in flight per direction before tail drop; 0 = unlimited
};

/// Counters of one direction (the sending end's view; delivered counts what
/// the far end received, duplicates included).
struct LinkStats {
  uint64_t sent = 0;           ///< frames passed to send()
  uint64_t delivered = 0;      ///< frames handed out by receive() at the far end
  uint64_t lost = 0;           ///< dropped on the wire, any cause (burst_lost included)
  uint64_t burst_lost = 0;     ///< of lost: dropped while the Gilbert-Elliott channel was bad
  uint64_t duplicated = 0;     ///< extra copies made
  uint64_t corrupted = 0;      ///< frames with one bit flipped
  uint64_t reordered = 0;      ///< frames held back by the reorder window
  uint64_t truncated = 0;      ///< frames that lost their tail
  uint64_t queue_dropped = 0;  ///< tail drops at queue_limit
  uint64_t copy_failed = 0;    ///< duplicates, corruptions or truncations skipped: no mbuf for the copy

  bool operator==(const LinkStats&) const = default;
};

class SimLink {
 public:
  /// Deterministic for a given seed and a given sequence of calls. `pool`
  /// supplies duplicates and copy-on-corrupt (rte_pktmbuf_copy); it may be
  /// nullptr when neither fault is used. Faults per direction: a_to_b for
  /// frames sent from end 0, b_to_a for frames sent from end 1.
  SimLink(uint64_t seed, const LinkFaults& a_to_b, const LinkFaults& b_to_a, rte_mempool* pool);
  /// Frees the frames still in flight.
  ~SimLink();
  SimLink(const SimLink&) = delete;
  SimLink& operator=(const SimLink&) = delete;

  /// Takes ownership of n frames sent from end `from` (0 or 1) at time now_ns;
  /// the link frees the ones it drops.
  void send(int from, rte_mbuf* const* frames, uint16_t n, uint64_t now_ns);

  /// Frames that have arrived at end `at` by now_ns (arrival <= now_ns), in
  /// arrival order (ties: send order), up to max. The caller owns them.
  uint16_t receive(int at, rte_mbuf** out, uint16_t max, uint64_t now_ns);

  /// Earliest arrival time of any frame in flight (either direction);
  /// UINT64_MAX if none. A driver advances its clock to it.
  uint64_t next_arrival_ns() const;

  /// Frames in flight, both directions.
  size_t in_flight() const;

  /// Counters of the direction sent from end `from`.
  const LinkStats& stats(int from) const;

  uint64_t seed() const { return seed_; }

  /// Replaces the faults of the direction sent from end `from`, from the next
  /// send() on (e.g. heal the link to let a test drain). Frames in flight keep
  /// their fate; the serializer keeps its backlog; a Gilbert-Elliott channel
  /// keeps its state unless burst_enter becomes 0 (then it is good).
  void set_faults(int from, const LinkFaults& f);

 private:
  struct InFlight {
    uint64_t arrival_ns;
    uint64_t seq;  ///< send order within the direction: breaks arrival ties
    rte_mbuf* m;
  };
  struct Direction {
    LinkFaults faults;
    FaultDice dice;
    LinkStats stats;
    std::vector<InFlight> heap;  ///< min-heap on (arrival_ns, seq)
    uint64_t next_seq = 0;
    uint64_t serializer_free_ns = 0;
  };

  void enqueue(Direction& d, rte_mbuf* m, uint64_t arrival_ns);

  uint64_t seed_;
  rte_mempool* pool_;
  Direction dir_[2];
};

}  // namespace droce::net
