#pragma once
// The fate of a frame on a faulty link: one I/O-free model for every place droce injects faults,
// the simulated link of the protocol tests (net/sim_link.h) and a running droced's fault rules
// (`droce fault`, droced/fault_stage.h; `--drop-rate` is one such rule).
//
// A FaultSpec says what a link does, each fault with its own probability; FaultDice rolls one
// frame's FrameFate from it. The kinds, in the order they are decided:
//   1. Gilbert-Elliott burst loss: with burst_enter > 0 the channel steps good->bad with
//      P(burst_enter), bad->good with P(burst_exit), then a frame on a bad channel is lost with
//      P(burst_loss). Runs of bad frames are geometric with mean 1/burst_exit.
//   2. loss: lost with P(loss). A lost frame has no other fate.
//   3. delay: held delay_ns plus a uniform 0..jitter_ns (jitter alone may reorder frames: each
//      frame's is independent, as netem's).
//   4. reorder: with P(reorder) held reorder_window_ns more, so the frames sent in that window
//      overtake it.
//   5. corrupt: with P(corrupt) one bit flips, anywhere in the frame, in the payload, or in the
//      ICRC (corrupt_target). A payload-only fault leaves frames without payload alone.
//   6. truncate: with P(truncate) the frame loses its tail: it keeps a uniform length from
//      kMinTruncatedLen (an Ethernet header) to one byte short of its own.
//   7. duplicate: with P(duplicate) a copy (of the frame as it will arrive) arrives right after.
// Every frame takes the same number of draws whatever happens to it, so turning one fault on or
// off does not change the dice another fault sees for the same frame, and a run is a pure
// function of the seed and the sequence of frames.
//
// Text form (`droce fault set`, FaultSpec::parse): comma-separated key=value,
//   drop=1%  burst=0.5%[/25%[/100%]]  delay=100us  jitter=20us  reorder=5%  window=50us
//   duplicate=1%  corrupt=0.1%  corrupt-at=payload|icrc|any  truncate=1%
//   rate=1gbit  buffer=256k  ecn-min=40k  ecn-max=160k  ecn-pmax=20%   (a congestion point)
//   mark=enqueue|dequeue   (where its RED looks at the depth: as a frame arrives, the default,
//                           or as it leaves; net/congestion_point.h)
//   pfc-xoff=512k  pfc-xon=256k  pfc-quanta=65535   (the congestion point pauses its senders past
//                           pfc-xoff and lets them go at pfc-xon, xoff/2 unless given: 802.1Qbb,
//                           net/pfc.h; buffer= above pfc-xoff is the headroom)
//   arrival=wire|loop   (what times a received frame: its link's receive stamp where it has one,
//                        else the loop's clock (wire, the default); always the loop's (loop))
// probabilities as percentages (a bare number too) and times with ns/us/ms/s (bare: us); items
// may be separated by spaces too. rate= puts a congestion point (net/congestion_point.h) in
// front of the other faults: a frame it drops meets no other, the rest leave it at their
// departure time, then delay/jitter/reorder hold them further (delay= is the link's fixed delay).
//
// Threading: a FaultSpec is a value; one FaultDice per thread. No allocation when rolling.

#include <cstdint>
#include <string>
#include <string_view>

#include "net/congestion_point.h"

namespace droce::net {

enum class CorruptTarget : uint8_t {
  any,      ///< any bit of the frame (a link flipping bits; the FCS would usually catch it)
  payload,  ///< the RoCE payload (bytes a switch or a buggy DMA changed; the ICRC catches it)
  icrc,     ///< the ICRC itself
};

struct FaultSpec {
  double loss = 0;          ///< independent drop probability per frame
  double burst_enter = 0;   ///< Gilbert-Elliott: P(good->bad) per frame; 0 disables
  double burst_exit = 0.25; ///< P(bad->good) per frame
  double burst_loss = 1.0;  ///< drop probability while bad
  double reorder = 0;       ///< P(frame is held back reorder_window_ns more)
  uint64_t reorder_window_ns = 20000;
  double duplicate = 0;     ///< P(frame is delivered twice)
  double corrupt = 0;       ///< P(one bit of the frame flips)
  CorruptTarget corrupt_target = CorruptTarget::any;
  double truncate = 0;      ///< P(the frame loses its tail)
  uint64_t delay_ns = 0;    ///< one-way extra delay
  uint64_t jitter_ns = 0;   ///< uniform extra 0..jitter_ns inclusive (may reorder)
  QueueSpec queue;          ///< a congestion point the frames go through first (rate 0: none)
  /// Received frames are timed by the loop's clock even where the link stamped their arrival
  /// (droced/fault_stage.h); not a fault of its own: any() does not look at it.
  bool loop_arrival = false;

  /// True when some fault can happen (a spec of all zeros changes nothing).
  bool any() const;
  /// True when a frame may be held (delay, jitter or reorder).
  bool holds() const { return delay_ns != 0 || jitter_ns != 0 || reorder > 0 || queue.any(); }

  /// The text form above, over the defaults; "" on success, else what is wrong (the spec is
  /// then unchanged). "none" or "" is a spec that does nothing.
  std::string parse(std::string_view text);
  /// The text form of the faults set (parse(to_string()) gives this spec back); "none" if none.
  std::string to_string() const;
  bool operator==(const FaultSpec&) const = default;
};

/// Where in a frame its bytes are, for the corruption targets (a frame that is not RoCE has no
/// payload: payload_len 0, icrc_len 0).
struct FrameRegions {
  uint32_t len = 0;          ///< the whole frame
  uint32_t payload_off = 0;
  uint32_t payload_len = 0;  ///< without pad
  uint32_t icrc_len = 0;     ///< 4 when the last four bytes are an ICRC
};

struct FrameFate {
  bool lost = false;
  bool burst_lost = false;   ///< of lost: while the Gilbert-Elliott channel was bad
  uint64_t hold_ns = 0;      ///< delay + jitter + the reorder window
  bool reordered = false;
  bool corrupt = false;
  uint64_t corrupt_bit = 0;  ///< bit index in the frame (byte bit / 8, bit bit % 8)
  bool truncate = false;
  uint32_t keep_len = 0;     ///< when truncated
  bool duplicate = false;
};

inline constexpr uint32_t kMinTruncatedLen = 14;

class FaultDice {
 public:
  explicit FaultDice(uint64_t seed = 1);
  /// The fate of the next frame.
  FrameFate roll(const FaultSpec& f, const FrameRegions& r);
  /// The channel back to good (a spec without burst loss in force).
  void heal() { bad_ = false; }

 private:
  uint64_t next();
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  uint64_t state_;
  bool bad_ = false;
};

/// a + b, or UINT64_MAX where it would wrap (times far in the future stay far in the future).
inline uint64_t add_saturating(uint64_t a, uint64_t b) { return b > UINT64_MAX - a ? UINT64_MAX : a + b; }

/// One seed into a well-spread one (splitmix64's finalizer): seeds 0, 1, 2... of the several
/// dice a run derives from one seed start far apart.
uint64_t mix_seed(uint64_t x);

}  // namespace droce::net
