// DCQCN's reaction point and the parameters' text form (rocev2/dcqcn.h has the state machine).

#include "rocev2/dcqcn.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace droce::rocev2 {

namespace {

// Within this of the maximum (Mbit/s) the limiter lets go: fast recovery only halves the gap.
constexpr double kReleaseGapMbps = 1.0;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

const CcParamInfo* find_cc_param(std::string_view name) {
  for (const CcParamInfo& i : kCcParams)
    if (name == i.name || (i.alias[0] != '\0' && name == i.alias)) return &i;
  return nullptr;
}

std::string set_cc_param(CcParams* p, std::string_view assignment) {
  const size_t eq = assignment.find('=');
  if (eq == std::string_view::npos) return "'" + std::string(assignment) + "' is not NAME=VALUE";
  const std::string_view name = trim(assignment.substr(0, eq));
  const std::string_view value = trim(assignment.substr(eq + 1));
  const CcParamInfo* info = find_cc_param(name);
  if (info == nullptr) return "no DCQCN parameter '" + std::string(name) + "'";
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || end != value.data() + value.size() || value.empty())
    return std::string(info->name) + ": '" + std::string(value) + "' is not a number";
  if (v < info->min || v > info->max)
    return std::string(info->name) + ": " + std::to_string(v) + " is outside " + std::to_string(info->min) + ".." +
           std::to_string(info->max) + " (" + info->unit + ")";
  p->*(info->member) = static_cast<uint32_t>(v);
  return "";
}

std::string set_cc_params(CcParams* p, std::string_view assignments) {
  CcParams next = *p;
  size_t at = 0;
  while (at < assignments.size()) {
    size_t end = assignments.find_first_of(", ", at);
    if (end == std::string_view::npos) end = assignments.size();
    const std::string_view one = assignments.substr(at, end - at);
    at = end + 1;
    if (one.empty()) continue;
    if (std::string why = set_cc_param(&next, one); !why.empty()) return why;
  }
  *p = next;
  return "";
}

// ---- The reaction point --------------------------------------------------------------------

void ReactionPoint::update_alpha(const CcParams& p, uint64_t now_ns) {
  const uint64_t period = uint64_t{std::max<uint32_t>(1, p.dce_tcp_rtt)} * 1000;
  if (now_ns < alpha_epoch_ns_ + period) return;
  const uint64_t n = (now_ns - alpha_epoch_ns_) / period;
  const double g = p.dce_tcp_g / 1024.0;
  // The first period ended is the one the last CNPs fell in; the rest saw none.
  alpha_ = cnp_in_period_ ? g * alpha_ + (1 - g) : g * alpha_;
  if (n > 1) alpha_ *= std::pow(g, static_cast<double>(n - 1));
  alpha_epoch_ns_ += n * period;
  cnp_in_period_ = false;
}

ReactionPoint::Cnp ReactionPoint::on_cnp(const CcParams& p, uint32_t line_mbps, uint64_t now_ns) {
  const double top = max_rate(p, line_mbps);
  if (!limited_) {
    limited_ = true;
    alpha_ = p.initial_alpha_value / 1024.0;
    alpha_epoch_ns_ = now_ns;
    cnp_in_period_ = false;
    rc_ = rt_ = top;
    next_send_ns_ = now_ns;
    increased_by_bytes_ = increased_by_timer_ = false;
    if (p.rate_to_set_on_first_cnp != 0) {
      rc_ = rt_ = std::min<double>(p.rate_to_set_on_first_cnp, top);
      cnp_in_period_ = true;
      last_cut_ns_ = now_ns;
      timer_epoch_ns_ = now_ns;
      t_stage_ = b_stage_ = 0;
      bytes_ = 0;
      return Cnp::cut;
    }
  } else {
    advance(p, line_mbps, now_ns);
    update_alpha(p, now_ns);
    // The timer may have released the limiter: a CNP now starts it again as the first did.
    if (!limited_) return on_cnp(p, line_mbps, now_ns);
    if (now_ns - last_cut_ns_ < uint64_t{p.rate_reduce_monitor_period} * 1000) {
      cnp_in_period_ = true;
      return Cnp::held;
    }
    if (p.clamp_tgt_rate || increased_by_bytes_ || (p.clamp_tgt_rate_after_time_inc && increased_by_timer_))
      rt_ = rc_;
  }
  cnp_in_period_ = true;
  const double cut = std::min(1.0, alpha_ * 1024.0 / std::ldexp(1.0, static_cast<int>(p.rpg_gd)));
  const double floor = std::max<double>(rc_ * p.rpg_min_dec_fac / 100.0, p.rpg_min_rate);
  rc_ = std::min(std::max(rc_ * (1 - cut), floor), top);
  last_cut_ns_ = now_ns;
  timer_epoch_ns_ = now_ns;
  t_stage_ = b_stage_ = 0;
  bytes_ = 0;
  increased_by_bytes_ = increased_by_timer_ = false;
  return Cnp::cut;
}

bool ReactionPoint::increase(const CcParams& p, double top, bool by_timer) {
  const uint32_t f = p.rpg_threshold;
  const uint32_t hi = std::max(t_stage_, b_stage_), lo = std::min(t_stage_, b_stage_);
  if (hi <= f) {
    // fast recovery: RT stays, RC halves the gap
  } else if (lo > f) {
    rt_ += double(lo - f) * p.rpg_hai_rate;
  } else {
    rt_ += p.rpg_ai_rate;
  }
  rt_ = std::min(rt_, top);
  rc_ = std::min((rt_ + rc_) / 2, top);
  (by_timer ? increased_by_timer_ : increased_by_bytes_) = true;
  ++increases_;
  if (rt_ >= top && top - rc_ < kReleaseGapMbps) {
    limited_ = false;
    return false;
  }
  return true;
}

void ReactionPoint::run_timer(const CcParams& p, uint32_t line_mbps, uint64_t now_ns) {
  const double top = max_rate(p, line_mbps);
  const uint64_t period = uint64_t{p.rpg_time_reset} * 1000;
  uint64_t due = (now_ns - timer_epoch_ns_) / period;
  for (uint32_t k = 0; due > 0 && k < kMaxCatchUp; ++k, --due) {
    timer_epoch_ns_ += period;
    ++t_stage_;
    if (!increase(p, top, true)) return;
  }
  if (due == 0) return;
  // A long idle spell: the byte stage stands still, so each further event adds the same step
  // to RT (the stage counts only grow past it), and RC's gap to RT goes to that step:
  // gap_n = step + (gap_0 - step) / 2^n.
  const uint32_t f = p.rpg_threshold;
  t_stage_ += static_cast<uint32_t>(std::min<uint64_t>(due, UINT32_MAX - t_stage_));
  timer_epoch_ns_ += due * period;
  const uint32_t lo = std::min(t_stage_, b_stage_);
  const double step = lo > f ? double(lo - f) * p.rpg_hai_rate : p.rpg_ai_rate;
  const double gap0 = rt_ - rc_;
  rt_ = std::min(rt_ + step * static_cast<double>(due), top);
  const double gap = step + (gap0 - step) * std::ldexp(1.0, -static_cast<int>(std::min<uint64_t>(due, 1000)));
  rc_ = std::min(std::max(rt_ - gap, rc_), top);
  increased_by_timer_ = true;
  ++increases_;
  if (rt_ >= top && top - rc_ < kReleaseGapMbps) limited_ = false;
}

void ReactionPoint::on_sent(const CcParams& p, uint32_t line_mbps, uint64_t now_ns, uint32_t bytes) {
  if (!limited_) return;
  // The pacer first, at the rate this frame went out under: a bucket of kBurstBytes.
  const double ns_per_byte = 8000.0 / rc_;
  const uint64_t burst_ns = static_cast<uint64_t>(kBurstBytes * ns_per_byte);
  const uint64_t from = std::max(next_send_ns_, now_ns > burst_ns ? now_ns - burst_ns : 0);
  next_send_ns_ = from + static_cast<uint64_t>(bytes * ns_per_byte);
  if (p.rpg_byte_reset == 0) return;
  const uint64_t unit = uint64_t{p.rpg_byte_reset} * 64;
  bytes_ += bytes;
  const double top = max_rate(p, line_mbps);
  while (bytes_ >= unit) {
    bytes_ -= unit;
    ++b_stage_;
    if (!increase(p, top, false)) return;
  }
}

}  // namespace droce::rocev2
