#pragma once
// DCQCN congestion control (Zhu et al., "Congestion Control for Large-Scale RDMA Deployments",
// SIGCOMM 2015), I/O-free: the reaction point (RP) that keeps a QP's sending rate, the
// notification point (NP) that answers CE-marked packets with CNPs at most once per interval,
// and the pacer the requester consults. Time comes in as `now_ns`; nothing here sends or reads
// a clock. The engine (rocev2/engine.cc) hosts it: a QP owns one ReactionPoint and one
// NotificationPoint, the engine one CcParams for all its QPs.
//
// Parameters carry the names, units and defaults of NVIDIA's mlx5 NICs (MLNX_OFED's
// /sys/class/net/<if>/ecn/roce_rp/* and roce_np/*; the kernel's mlx5 debugfs cc_params spells
// them rp_* / np_*, accepted as aliases). Sources: NVIDIA DOCA "DCQCN CC Parameters" and
// Mellanox community "DCQCN Parameters" (DOC-2790) for names, units, ranges and the alpha and
// rate formulas; ../shared/REFERENCES.md ("Congestion") for ConnectX-5 defaults seen in the
// field; the kernel's drivers/infiniband/hw/mlx5/cong.c for the debugfs names.
//
// The RP state machine (per QP, after the paper and mlx5's parameters):
//   inactive (no limit) --first CNP--> limited: RC = rate_to_set_on_first_cnp, or the line rate
//     cut as below; alpha = initial_alpha_value / 1024.
//   CNP (at most one cut per rate_reduce_monitor_period): RT = RC (on the first cut, with
//     clamp_tgt_rate, or after a rate increase since the last cut: by the byte counter, or by
//     the timer when clamp_tgt_rate_after_time_inc), RC *= 1 - alpha * 1024 / 2^rpg_gd (with
//     rpg_gd 11: RC *= 1 - alpha / 2), never below RC * rpg_min_dec_fac % nor rpg_min_rate;
//     the timer and byte stages restart.
//   alpha: every dce_tcp_rtt us, alpha = g * alpha + (1 - g) if a CNP came in that period,
//     else g * alpha (g = dce_tcp_g / 1024).
//   increase events, each every rpg_time_reset us (timer stage T) and every rpg_byte_reset x 64
//     bytes sent (byte stage B), with F = rpg_threshold:
//       max(T, B) <= F: fast recovery   RC = (RT + RC) / 2
//       min(T, B) >  F: hyper increase  RT += (min(T, B) - F) * rpg_hai_rate; RC = (RT + RC) / 2
//       otherwise:      additive        RT += rpg_ai_rate;                     RC = (RT + RC) / 2
//     RT and RC never above the maximum (rpg_max_rate, 0: the line); within 1 Mbit/s of it the
//     limiter is released (inactive again).
// Timers are evaluated lazily when the QP next sends or gets a CNP (advance()): an idle limited
// QP costs nothing, and no timer entry exists per QP.
//
// Threading: a QP's RP and NP belong to its engine's lcore. CcParams is copied into each engine.

#include <cstdint>
#include <string>
#include <string_view>

namespace droce::rocev2 {

/// One device's DCQCN parameters, mlx5's names and units (see the table kCcParams).
struct CcParams {
  // ---- enable (mlx5: ecn/roce_rp/enable/<prio>, ecn/roce_np/enable/<prio>; droce has one priority)
  uint32_t rp_enable = 1;  ///< react to CNPs and send ECT(0)
  uint32_t np_enable = 1;  ///< answer CE-marked packets with CNPs
  // ---- reaction point (ecn/roce_rp)
  uint32_t rpg_time_reset = 300;          ///< us between timer increase events; 0: no timer
  uint32_t rpg_byte_reset = 32767;        ///< 64-byte units sent between byte events; 0: none
  uint32_t rpg_threshold = 1;             ///< F: stages of fast recovery
  uint32_t rpg_max_rate = 0;              ///< Mbit/s; 0: the line rate
  uint32_t rpg_ai_rate = 5;               ///< Mbit/s, additive increase of RT
  uint32_t rpg_hai_rate = 50;             ///< Mbit/s, hyper increase step of RT
  uint32_t rpg_gd = 11;                   ///< cut = alpha(1/1024) / 2^rpg_gd
  uint32_t rpg_min_dec_fac = 50;          ///< %: one cut leaves at least this share of RC
  uint32_t rpg_min_rate = 1;              ///< Mbit/s, the floor
  uint32_t rate_to_set_on_first_cnp = 0;  ///< Mbit/s, RC and RT on the first CNP; 0: cut the line rate
  uint32_t dce_tcp_g = 1019;              ///< 1/1024: alpha's gain
  uint32_t dce_tcp_rtt = 1;               ///< us between alpha updates
  uint32_t rate_reduce_monitor_period = 4;     ///< us: at most one cut per period
  uint32_t initial_alpha_value = 1023;         ///< 1/1024: alpha at the first CNP
  uint32_t clamp_tgt_rate = 0;                 ///< 1: every cut sets RT = RC
  uint32_t clamp_tgt_rate_after_time_inc = 1;  ///< 1: a timer increase since the last cut also does
  // ---- notification point (ecn/roce_np)
  uint32_t min_time_between_cnps = 4;  ///< us: at most one CNP per QP per interval
  uint32_t cnp_dscp = 48;              ///< the CNP's IP DSCP
  uint32_t cnp_802p_prio = 6;          ///< the CNP's 802.1p priority (on a VLAN)

  /// mlx5's defaults with its two timers at the time scale of a path through a kernel netdev
  /// (droced's packet, af_packet, af_xdp and tap links), droced's defaults there. mlx5's are
  /// made for a fabric whose round trip is a few microseconds; through the kernel a CNP comes
  /// back 0.1-1 ms after the mark and a congested flow sees one every ~70 us (a 1500-byte frame
  /// at its share of the bottleneck). With dce_tcp_rtt 1 us alpha decays 70 times between two
  /// CNPs (0.995^70 = 0.7) and settles near 0.016: each CNP cuts under 1 % and the queue stays
  /// full (bench/incast.sh, docs/benchmarks.md: 1 % of samples under ecn-min, 657 KiB deep, with
  /// 38 000 CNPs a second). dce_tcp_rtt 50 puts a CNP about every period, as 4 us CNPs against
  /// 1 us periods do on a NIC, and rpg_time_reset 3000 keeps a rate increase ~10 round trips
  /// apart, as 300 us is ~100 of a fabric's.
  static CcParams kernel_netdev() {
    CcParams p;
    p.dce_tcp_rtt = 50;
    p.rpg_time_reset = 3000;
    return p;
  }
  /// mlx5's defaults with both points off: the engine's default, so that a bare engine (tests,
  /// demos) sends exactly what it sent before DCQCN; droced turns them on, as mlx5 ships.
  static CcParams off() {
    CcParams p;
    p.rp_enable = p.np_enable = 0;
    return p;
  }
  friend bool operator==(const CcParams&, const CcParams&) = default;
};

/// One parameter described once: `droce cc`, droced's JSON, --cc and the checks use it.
struct CcParamInfo {
  const char* name;   ///< mlx5's sysfs name
  const char* alias;  ///< the kernel's mlx5 debugfs cc_params name, or ""
  uint32_t CcParams::*member;
  const char* unit;
  uint32_t min, max;
  const char* help;
};

inline constexpr CcParamInfo kCcParams[] = {
    {"rp_enable", "", &CcParams::rp_enable, "bool", 0, 1, "reaction point: react to CNPs, send ECT(0)"},
    {"np_enable", "", &CcParams::np_enable, "bool", 0, 1, "notification point: answer CE with CNPs"},
    {"rpg_time_reset", "rp_time_reset", &CcParams::rpg_time_reset, "us", 0, 131071,
     "time between rate increase events (0: none)"},
    {"rpg_byte_reset", "rp_byte_reset", &CcParams::rpg_byte_reset, "64B", 0, 32767,
     "bytes sent between rate increase events, in 64-byte units (0: none)"},
    {"rpg_threshold", "rp_threshold", &CcParams::rpg_threshold, "count", 1, 31, "F: fast recovery stages"},
    {"rpg_max_rate", "rp_max_rate", &CcParams::rpg_max_rate, "Mbit/s", 0, 400000, "the highest rate (0: line)"},
    {"rpg_ai_rate", "rp_ai_rate", &CcParams::rpg_ai_rate, "Mbit/s", 1, 100000, "additive increase step"},
    {"rpg_hai_rate", "rp_hai_rate", &CcParams::rpg_hai_rate, "Mbit/s", 1, 100000, "hyper increase step"},
    {"rpg_gd", "rp_gd", &CcParams::rpg_gd, "log2", 1, 15, "a cut is alpha/2^rpg_gd (11: alpha/2)"},
    {"rpg_min_dec_fac", "rp_min_dec_fac", &CcParams::rpg_min_dec_fac, "%", 0, 100,
     "one cut keeps at least this share of the rate"},
    {"rpg_min_rate", "rp_min_rate", &CcParams::rpg_min_rate, "Mbit/s", 1, 400000, "the lowest rate"},
    {"rate_to_set_on_first_cnp", "rp_rate_to_set_on_first_cnp", &CcParams::rate_to_set_on_first_cnp, "Mbit/s", 0,
     400000, "rate on the first CNP (0: cut the line rate)"},
    {"dce_tcp_g", "rp_dce_tcp_g", &CcParams::dce_tcp_g, "1/1024", 0, 1023, "alpha gain g"},
    {"dce_tcp_rtt", "rp_dce_tcp_rtt", &CcParams::dce_tcp_rtt, "us", 1, 131071, "alpha update period"},
    {"rate_reduce_monitor_period", "rp_rate_reduce_monitor_period", &CcParams::rate_reduce_monitor_period, "us", 0,
     1000000, "at most one rate cut per period"},
    {"initial_alpha_value", "rp_initial_alpha_value", &CcParams::initial_alpha_value, "1/1024", 0, 1023,
     "alpha at the first CNP"},
    {"clamp_tgt_rate", "rp_clamp_tgt_rate", &CcParams::clamp_tgt_rate, "bool", 0, 1, "every cut sets RT = RC"},
    {"clamp_tgt_rate_after_time_inc", "rp_clamp_tgt_rate_ati", &CcParams::clamp_tgt_rate_after_time_inc, "bool", 0,
     1, "a cut after a timer increase sets RT = RC"},
    {"min_time_between_cnps", "np_min_time_between_cnps", &CcParams::min_time_between_cnps, "us", 0, 1000000,
     "at most one CNP per QP per interval"},
    {"cnp_dscp", "np_cnp_dscp", &CcParams::cnp_dscp, "dscp", 0, 63, "the CNP's IP DSCP"},
    {"cnp_802p_prio", "np_cnp_prio", &CcParams::cnp_802p_prio, "prio", 0, 7, "the CNP's 802.1p priority"},
};
static_assert(sizeof(kCcParams) / sizeof(kCcParams[0]) == sizeof(CcParams) / sizeof(uint32_t),
              "every CcParams field has a line in kCcParams");

/// The line of `name` (mlx5's sysfs name or its debugfs alias); nullptr for none.
const CcParamInfo* find_cc_param(std::string_view name);
/// Sets NAME=VALUE on *p; "" or why not (unknown name, not a number, out of range). *p is
/// unchanged on failure.
std::string set_cc_param(CcParams* p, std::string_view assignment);
/// Several NAME=VALUE separated by commas or spaces, all or none.
std::string set_cc_params(CcParams* p, std::string_view assignments);

/// The reaction point of one QP: its rate and the pacer in front of its requester.
class ReactionPoint {
 public:
  /// What a CNP did.
  enum class Cnp : uint8_t { cut, held };  ///< the rate cut, or within the monitor period

  /// A CNP for this QP arrived at now_ns (the caller checked that the RP is enabled).
  /// `line_mbps`: the port's rate, what rpg_max_rate 0 means.
  Cnp on_cnp(const CcParams& p, uint32_t line_mbps, uint64_t now_ns);
  /// Runs the rate increase timer up to now_ns. Cheap when nothing is due.
  void advance(const CcParams& p, uint32_t line_mbps, uint64_t now_ns) {
    if (limited_ && p.rpg_time_reset != 0 && now_ns >= timer_epoch_ns_ + uint64_t{p.rpg_time_reset} * 1000)
      run_timer(p, line_mbps, now_ns);
  }
  /// `bytes` of this QP's left at now_ns: the byte counter and the pacer.
  void on_sent(const CcParams& p, uint32_t line_mbps, uint64_t now_ns, uint32_t bytes);
  /// The pacer: may a frame go now? Always while not limited.
  bool may_send(uint64_t now_ns) const { return !limited_ || now_ns >= next_send_ns_; }
  uint64_t next_send_ns() const { return next_send_ns_; }

  bool limited() const { return limited_; }
  /// Current and target rate in Mbit/s (0 while not limited: the line).
  double rc() const { return limited_ ? rc_ : 0; }
  double rt() const { return limited_ ? rt_ : 0; }
  /// alpha in [0, 1], as of the last CNP.
  double alpha() const { return alpha_; }
  uint32_t timer_stage() const { return t_stage_; }
  /// Increase events run so far, by the timer or the byte counter (a long idle spell's summed-up
  /// events count as one): the engine compares it around advance() and on_sent() to count and
  /// trace rises of the rate as it does cuts.
  uint64_t increases() const { return increases_; }
  uint32_t byte_stage() const { return b_stage_; }

  /// Bytes the pacer lets go at once after an idle spell (two 4 KiB frames): a software
  /// loop wakes in microseconds, so a bucket of one frame would cost rate at high rates.
  static constexpr uint32_t kBurstBytes = 2 * (4096 + 96);
  /// Timer events run at once by advance() before the rest are summed up in closed form.
  static constexpr uint32_t kMaxCatchUp = 1024;

 private:
  void update_alpha(const CcParams& p, uint64_t now_ns);
  void run_timer(const CcParams& p, uint32_t line_mbps, uint64_t now_ns);
  /// One increase event; false when the limiter was released.
  bool increase(const CcParams& p, double max_mbps, bool by_timer);
  static double max_rate(const CcParams& p, uint32_t line_mbps) {
    return p.rpg_max_rate != 0 && p.rpg_max_rate < line_mbps ? p.rpg_max_rate : line_mbps;
  }

  bool limited_ = false;
  double rc_ = 0, rt_ = 0;  ///< Mbit/s
  double alpha_ = 0;
  uint64_t alpha_epoch_ns_ = 0;   ///< start of the alpha period in progress
  bool cnp_in_period_ = false;
  uint64_t last_cut_ns_ = 0;
  bool increased_by_bytes_ = false, increased_by_timer_ = false;  ///< since the last cut
  uint64_t timer_epoch_ns_ = 0;   ///< start of the timer period in progress
  uint32_t t_stage_ = 0, b_stage_ = 0;
  uint64_t bytes_ = 0;            ///< sent since the last byte event
  uint64_t next_send_ns_ = 0;
  uint64_t increases_ = 0;
};

/// The notification point of one QP: one CNP per min_time_between_cnps.
class NotificationPoint {
 public:
  /// A CE-marked packet for this QP arrived at now_ns: true when a CNP goes (and is counted
  /// as sent now), false when one went less than min_time_between_cnps ago.
  bool on_ce(const CcParams& p, uint64_t now_ns) {
    const uint64_t gap = uint64_t{p.min_time_between_cnps} * 1000;
    if (sent_any_ && now_ns - last_cnp_ns_ < gap) return false;
    sent_any_ = true;
    last_cnp_ns_ = now_ns;
    return true;
  }

 private:
  bool sent_any_ = false;
  uint64_t last_cnp_ns_ = 0;
};

}  // namespace droce::rocev2
