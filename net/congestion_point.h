#pragma once
// A congestion point: the egress queue of a switch port, modelled without I/O, so a lab needs no
// switch and no `tc` (droced's rx fault rules host one: `droce fault set rate=...`,
// droced/fault_stage.h).
//
// One FIFO drained at a fixed rate (bit/s) with a buffer of so many bytes: a frame that does not
// fit is dropped (drop-tail). Before it is queued, RED with ECN as DCQCN deployments configure
// their switches (kmin, kmax in bytes, pmax): on the queue's instantaneous depth q (bytes waiting,
// the arriving frame not counted), a frame is marked with probability 0 for q <= kmin, rising
// linearly to pmax at kmax, and always for q > kmax. Marking an ECN-capable frame (ECT(0), ECT(1)
// or already CE) means it leaves with CE; a frame that is not ECN-capable is dropped instead
// (RFC 3168, 7.). ecn_max == 0 turns RED off (drop-tail only).
//
// Where RED looks (mark_dequeue): at enqueue, on the depth the arriving frame meets (the
// default, and what most switch ASICs do); or at dequeue, on the depth a leaving frame leaves
// behind it (the bytes that arrived while it waited), as CoDel and the "mark on dequeue" option
// of DCTCP deployments do. A mark set on arrival rides the queue: the notification point sees it
// one queueing delay later, and the sender reacts to a depth that old. A mark set on leaving
// carries the depth of now, so a deep queue's feedback is not itself delayed by that queue;
// with a queue of milliseconds (a software path's round trip, a slow congestion point) that is
// most of the control loop. With mark_dequeue enqueue() only drops at a full buffer and the
// caller asks dequeue() when the frame's time to leave comes.
//
// The queue holds no frames: a FIFO at a constant rate is wholly described by the time its last
// byte will have left (busy_until), so the depth at `now` is what remains of that time at the
// rate. enqueue() answers when the frame's last bit leaves; the caller holds the frame until then.
// Times are the caller's clock in ns; they must not go backwards (a smaller `now` is taken as the
// last one seen).
//
// Decisions are a pure function of the seed and the sequence of (bytes, ecn, now): the RED dice
// (splitmix64) are drawn once per frame that finds the queue between kmin and kmax.
//
// PFC (QueueSpec::pfc, net/pfc.h) is not the queue's: it only reads depth(), and its owner
// (droced/fault_stage.h) sends the pauses.
//
// Threading: one thread. No allocation.

#include <cstdint>
#include <string>
#include <string_view>

#include "net/pfc.h"

namespace droce::net {

struct QueueSpec {
  uint64_t rate_bps = 0;      ///< drain rate in bit/s; 0: no queue
  uint64_t buffer_bytes = 0;  ///< what the queue holds; 0: unbounded
  uint64_t ecn_min = 0;       ///< kmin, bytes
  uint64_t ecn_max = 0;       ///< kmax, bytes; 0: no RED/ECN marking
  double ecn_pmax = 0;        ///< marking probability at kmax (0..1)
  bool mark_dequeue = false;  ///< RED on the depth at departure (dequeue()), not on arrival
  /// Lossless: pause the senders past xoff bytes (net/pfc.h; the queue's owner sends the frames).
  PfcSpec pfc;

  bool any() const { return rate_bps != 0; }
  bool operator==(const QueueSpec&) const = default;
};

enum class QueueVerdict : uint8_t {
  queued,        ///< goes on unchanged at depart_ns
  marked,        ///< goes on at depart_ns with CE set
  dropped_full,  ///< the buffer had no room (drop-tail)
  dropped_red,   ///< not ECN-capable where an ECN-capable frame would have been marked
};

struct QueueDecision {
  QueueVerdict verdict = QueueVerdict::queued;
  uint64_t depart_ns = 0;  ///< when its last bit leaves (queued or marked)
};

struct QueueCounters {
  uint64_t enqueued = 0;      ///< frames queued (marked ones too)
  uint64_t bytes = 0;         ///< bytes of them
  uint64_t marked = 0;        ///< of enqueued: CE set
  uint64_t dropped_full = 0;  ///< frames dropped at a full buffer
  uint64_t dropped_red = 0;   ///< not-ECT frames RED dropped
  uint64_t depth_max = 0;     ///< the deepest queue a frame met, bytes (it included)
};

class CongestionPoint {
 public:
  explicit CongestionPoint(uint64_t seed = 1);

  /// A frame of `bytes` bytes with IP ECN bits `ecn` (net/headers.h kEcn*) arriving at now_ns.
  QueueDecision enqueue(const QueueSpec& s, uint32_t bytes, uint8_t ecn, uint64_t now_ns);
  /// With s.mark_dequeue: RED for a queued frame as it leaves at depart_ns (its enqueue()'s
  /// depart_ns), on the bytes queued behind it by the time this is asked: queued, marked or
  /// dropped_red. Ask in departure order, at or soon after depart_ns (a later ask also counts
  /// frames that arrived after it left).
  QueueVerdict dequeue(const QueueSpec& s, uint8_t ecn, uint64_t depart_ns);
  /// Bytes waiting at now_ns (0 when the rate is 0).
  uint64_t depth(const QueueSpec& s, uint64_t now_ns) const;
  const QueueCounters& counters() const { return counters_; }

 private:
  uint64_t next();
  /// RED on depth q: queued, marked or dropped_red (counted).
  QueueVerdict red(const QueueSpec& s, uint64_t q, uint8_t ecn);
  uint64_t busy_until_ns_ = 0;
  uint64_t busy_frac_ = 0;  ///< what busy_until_ns_ lacks, in 1/rate_bps of a ns (exact sums)
  uint64_t last_now_ = 0;
  uint64_t state_;
  QueueCounters counters_;
};

/// "10gbit", "1.5Gbit", "800mbit", "100kbit", "1000000" (bit/s) -> bit/s; false when malformed.
bool parse_rate(std::string_view s, uint64_t* bps);
/// "256k", "1m", "9000", "64KiB" (K=1024) -> bytes; false when malformed.
bool parse_bytes(std::string_view s, uint64_t* bytes);
std::string rate_text(uint64_t bps);
std::string bytes_text(uint64_t bytes);

}  // namespace droce::net
