#pragma once
// Priority flow control (IEEE 802.1Qbb PFC, and the 802.3x PAUSE it extends), without I/O: the
// frames, and both ends of it, so a lab's congestion point can be lossless as a RoCE fabric is.
//
// The frame is a MAC Control frame (EtherType 0x8808, never VLAN-tagged), 60 bytes before the FCS:
//   dst(6) src(6) 0x8808 opcode(2), then
//   PAUSE (opcode 0x0001): quanta(2): every priority;
//   PFC   (opcode 0x0101): class-enable vector(2; bit p of the low byte names priority p), then
//                          eight quanta(2), priority 0 first (a disabled one's is ignored);
//   zero padding to 60 bytes.
// A quantum is 512 bit times at the speed of the port that receives the frame (51.2 ns at
// 10 Gbit/s; 0xffff quanta, 3.36 ms). Quanta 0 on an enabled priority resumes it at once (XON).
// Switches send pauses to the reserved group address 01:80:C2:00:00:01, which bridges never
// forward. droce's congestion point models a switch inside the receiving droced, so it sends them
// unicast to the MACs it queued frames from (a Linux bridge between the hosts forwards those);
// a droced takes pauses to either address.
//
// A frame's priority: its VLAN tag's PCP when tagged, else its DSCP >> 3 (mlx5's default
// dscp2prio under "trust dscp", how untagged RoCE deployments run PFC). droce's CNPs go at DSCP
// 48 (priority 6), so a pause of the data's priority does not hold them.
//
// PauseGate is the sender's side (a NIC's paused transmit queues): per priority, paused until
// when; shared by a port's cores. PfcPoint is the queue's side: XOFF to each upstream MAC, for the
// priorities its queued frames had, when the queue reaches xoff bytes; the same again before the
// pause runs out while the queue stays above xon (and at once to a sender first seen while
// paused); XON (quanta 0) once it falls to xon. One thing no switch needs: a NIC never loses a
// pause, but a droced whose ring of received frames overflowed (a busy host, a storm of CNPs)
// has lost it. So a sender whose frames still arrive kRepauseAfterNs after its XOFF went out (by
// their arrival time: the link's receive stamp where there is one) is paused again at once.
// Frames that still arrive after an XOFF (the round trip of the pause: a switch's "headroom") are
// the buffer's to hold: the congestion point's buffer= is xoff plus that headroom, past which it
// drops and counts as any queue does.
//
// Threading: PauseGate: apply() from any core (serialised inside), the readers lock-free.
// PfcPoint: one thread. No allocation but PfcPoint's output vector.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "net/addr.h"

namespace droce::net {

inline constexpr uint16_t kEtherTypeMacControl = 0x8808;
inline constexpr uint16_t kMacControlPause = 0x0001;
inline constexpr uint16_t kMacControlPfc = 0x0101;
inline constexpr size_t kPauseFrameLen = 60;
inline constexpr uint16_t kMaxPauseQuanta = 0xffff;
inline constexpr MacAddr kPauseGroupMac{0x01, 0x80, 0xc2, 0x00, 0x00, 0x01};

struct PauseFrame {
  MacAddr dst{};
  MacAddr src{};
  uint8_t enable = 0;                   ///< priorities it names (PAUSE: all eight)
  std::array<uint16_t, 8> quanta{};     ///< per priority; 0: resume
};

enum class PauseParse : uint8_t {
  ok,
  not_mac_control,  ///< another EtherType: not for this parser
  malformed,        ///< MAC Control, but too short
  unknown_opcode,   ///< MAC Control of another kind (GATE, REPORT, ...): not a pause
};

/// Reads a received frame's pause (PAUSE or PFC).
PauseParse parse_pause(std::span<const uint8_t> frame, PauseFrame* out);
/// A PFC frame from src to dst: the priorities in `enable` for `quanta` each. Writes
/// kPauseFrameLen bytes.
void build_pfc(uint8_t* out, const MacAddr& dst, const MacAddr& src, uint8_t enable, uint16_t quanta);
/// How long `quanta` pause a port of speed_bps (bit/s, > 0).
uint64_t pause_ns(uint16_t quanta, uint64_t speed_bps);
/// A frame's priority (0..7): VLAN PCP, else IPv4/IPv6 DSCP >> 3; 0 for anything else.
uint8_t frame_priority(std::span<const uint8_t> frame);

/// The sender's paused priorities.
class PauseGate {
 public:
  /// A pause received at now_ns on a port of speed_bps: each priority it enables is paused for
  /// its quanta from now (0: resumed now).
  void apply(const PauseFrame& f, uint64_t now_ns, uint64_t speed_bps);
  /// Some priority may be paused (one load, an acquire that pairs with apply()'s release: a
  /// core that sees it engaged sees the pauses behind it; false again once settle() saw every
  /// pause run out).
  bool engaged() const { return latest_.load(std::memory_order_acquire) != 0; }
  bool paused(uint8_t prio, uint64_t now_ns) const {
    return now_ns < until_[prio & 7].load(std::memory_order_relaxed);
  }
  /// The end of the pause that ends first after now_ns among those still running; UINT64_MAX
  /// when none runs.
  uint64_t next_resume_ns(uint64_t now_ns) const;
  /// Every pause has ended by now_ns: engaged() turns false.
  void settle(uint64_t now_ns);

 private:
  std::mutex apply_mutex_;
  std::array<std::atomic<uint64_t>, 8> until_{};
  std::atomic<uint64_t> latest_{0};  ///< the latest until_; 0: none engaged
};

struct PfcSpec {
  uint64_t xoff = 0;                   ///< bytes queued that pause the senders; 0: no PFC
  uint64_t xon = 0;                    ///< bytes at or under which they resume (< xoff)
  uint16_t quanta = kMaxPauseQuanta;   ///< each XOFF's pause time
  bool any() const { return xoff != 0; }
  bool operator==(const PfcSpec&) const = default;
};

/// A pause to send: to dst, the priorities in enable, for quanta each (0: XON).
struct PauseOut {
  MacAddr dst{};
  uint8_t enable = 0;
  uint16_t quanta = 0;
};

struct PfcCounters {
  uint64_t xoff_sent = 0;     ///< pause frames with quanta (refreshes too)
  uint64_t xon_sent = 0;      ///< pause frames resuming
  uint64_t paused_ns = 0;     ///< the time the queue held its senders paused (whole pauses)
  uint64_t untracked = 0;     ///< frames from a sender past kMaxUpstream (never paused)
  uint64_t repaused = 0;      ///< of xoff_sent: to a sender that went on sending after one
};

class PfcPoint {
 public:
  static constexpr size_t kMaxUpstream = 32;
  /// speed_bps: the senders' port speed, for how long a pause lasts (when to refresh it).
  explicit PfcPoint(uint64_t speed_bps = 10'000'000'000ull) : speed_bps_(speed_bps ? speed_bps : 1) {}

  /// A pause reaches a sender and stops it well within this (its loop, the kernel's path).
  static constexpr uint64_t kRepauseAfterNs = 200'000;
  /// A frame from `src` with priority `prio`, arrived at arrival_ns, came to the queue (whether
  /// the queue then took it or dropped it).
  void on_enqueue(const MacAddr& src, uint8_t prio, uint64_t arrival_ns);
  /// The queue holds `depth` bytes at now_ns: appends the pauses to send now to *out.
  void on_depth(const PfcSpec& s, uint64_t depth, uint64_t now_ns, std::vector<PauseOut>* out);
  bool paused() const { return paused_; }
  const PfcCounters& counters() const { return counters_; }

 private:
  struct Upstream {
    MacAddr mac{};
    uint8_t prios = 0;   ///< the priorities of its frames
    uint8_t paused = 0;  ///< of those, the ones an XOFF of ours holds
    bool deaf = false;   ///< its frames came long after our XOFF: it did not get it
    uint64_t sent_ns = 0;  ///< when our last XOFF to it went out
  };
  void send(Upstream& u, const PfcSpec& s, uint64_t now_ns, std::vector<PauseOut>* out);
  std::array<Upstream, kMaxUpstream> up_{};
  size_t n_up_ = 0;
  uint64_t speed_bps_;
  bool paused_ = false;
  uint64_t paused_since_ = 0;
  uint64_t refresh_ns_ = 0;
  PfcCounters counters_;
};

}  // namespace droce::net
