#include "net/congestion_point.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "net/fault_model.h"

namespace droce::net {
namespace {

constexpr uint64_t kNsPerS = 1000000000;

bool number_with_suffix(std::string_view s, const std::pair<std::string_view, double>* units, size_t n_units,
                        double* out) {
  double scale = 1;
  for (size_t i = 0; i < n_units; ++i) {
    const auto& [u, k] = units[i];
    if (s.size() > u.size()) {
      std::string_view tail = s.substr(s.size() - u.size());
      bool same = true;
      for (size_t j = 0; j < u.size(); ++j) same = same && (tail[j] | 0x20) == (u[j] | 0x20);
      if (same) {
        s.remove_suffix(u.size());
        scale = k;
        break;
      }
    }
  }
  double v;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v) || v < 0) return false;
  *out = v * scale;
  return *out < 1.8e19;
}

}  // namespace

CongestionPoint::CongestionPoint(uint64_t seed) : state_(mix_seed(seed)) {}

uint64_t CongestionPoint::next() {
  state_ += 0x9E3779B97F4A7C15ull;
  return mix_seed(state_ - 0x9E3779B97F4A7C15ull);
}

uint64_t CongestionPoint::depth(const QueueSpec& s, uint64_t now_ns) const {
  if (s.rate_bps == 0 || busy_until_ns_ <= now_ns) return 0;
  const unsigned __int128 bits = static_cast<unsigned __int128>(busy_until_ns_ - now_ns) * s.rate_bps;
  return static_cast<uint64_t>(bits / (8 * kNsPerS));
}

QueueVerdict CongestionPoint::red(const QueueSpec& s, uint64_t q, uint8_t ecn) {
  if (s.ecn_max == 0 || q <= s.ecn_min) return QueueVerdict::queued;
  bool mark = q > s.ecn_max;
  if (!mark) {
    // Linear from 0 at kmin to pmax at kmax (kmax > q > kmin here, so the span is not 0).
    const double p = s.ecn_pmax * static_cast<double>(q - s.ecn_min) / static_cast<double>(s.ecn_max - s.ecn_min);
    mark = static_cast<double>(next() >> 11) * 0x1.0p-53 < p;
  }
  if (!mark) return QueueVerdict::queued;
  if ((ecn & 0x03) == 0) {  // Not-ECT: RFC 3168 drops where it would mark
    ++counters_.dropped_red;
    return QueueVerdict::dropped_red;
  }
  ++counters_.marked;
  return QueueVerdict::marked;
}

QueueVerdict CongestionPoint::dequeue(const QueueSpec& s, uint8_t ecn, uint64_t depart_ns) {
  if (s.rate_bps == 0 || !s.mark_dequeue) return QueueVerdict::queued;
  return red(s, depth(s, depart_ns), ecn);
}

QueueDecision CongestionPoint::enqueue(const QueueSpec& s, uint32_t bytes, uint8_t ecn, uint64_t now_ns) {
  if (now_ns < last_now_) now_ns = last_now_;
  last_now_ = now_ns;
  QueueDecision d{QueueVerdict::queued, now_ns};
  if (s.rate_bps == 0) return d;
  const uint64_t q = depth(s, now_ns);
  if (s.buffer_bytes != 0 && q + bytes > s.buffer_bytes) {
    ++counters_.dropped_full;
    return {QueueVerdict::dropped_full, 0};
  }
  if (!s.mark_dequeue) {
    d.verdict = red(s, q, ecn);
    if (d.verdict == QueueVerdict::dropped_red) return {QueueVerdict::dropped_red, 0};
  }
  if (busy_until_ns_ <= now_ns) {
    busy_until_ns_ = now_ns;
    busy_frac_ = 0;
  }
  // Serialization time in ns, carrying the remainder so a long run does not drift.
  const unsigned __int128 num = static_cast<unsigned __int128>(bytes) * 8 * kNsPerS + busy_frac_;
  busy_until_ns_ = add_saturating(busy_until_ns_, static_cast<uint64_t>(num / s.rate_bps));
  busy_frac_ = static_cast<uint64_t>(num % s.rate_bps);
  d.depart_ns = busy_until_ns_;
  ++counters_.enqueued;
  counters_.bytes += bytes;
  if (q + bytes > counters_.depth_max) counters_.depth_max = q + bytes;
  return d;
}

bool parse_rate(std::string_view s, uint64_t* bps) {
  static constexpr std::pair<std::string_view, double> kUnits[] = {
      {"tbit", 1e12}, {"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1},
  };
  double v;
  if (!number_with_suffix(s, kUnits, std::size(kUnits), &v) || v < 1) return false;
  *bps = static_cast<uint64_t>(std::llround(v));
  return true;
}

bool parse_bytes(std::string_view s, uint64_t* bytes) {
  static constexpr std::pair<std::string_view, double> kUnits[] = {
      {"kib", 1024.0}, {"mib", 1048576.0}, {"gib", 1073741824.0}, {"k", 1024.0},
      {"m", 1048576.0}, {"g", 1073741824.0}, {"b", 1},
  };
  double v;
  if (!number_with_suffix(s, kUnits, std::size(kUnits), &v) || v > 1e15) return false;
  *bytes = static_cast<uint64_t>(std::llround(v));
  return true;
}

std::string rate_text(uint64_t bps) {
  char b[40];
  if (bps % 1000000000 == 0) std::snprintf(b, sizeof b, "%llugbit", static_cast<unsigned long long>(bps / 1000000000));
  else if (bps % 1000000 == 0) std::snprintf(b, sizeof b, "%llumbit", static_cast<unsigned long long>(bps / 1000000));
  else if (bps % 1000 == 0) std::snprintf(b, sizeof b, "%llukbit", static_cast<unsigned long long>(bps / 1000));
  else std::snprintf(b, sizeof b, "%llubit", static_cast<unsigned long long>(bps));
  return b;
}

std::string bytes_text(uint64_t bytes) {
  char b[40];
  if (bytes != 0 && bytes % 1048576 == 0) std::snprintf(b, sizeof b, "%llum", static_cast<unsigned long long>(bytes / 1048576));
  else if (bytes != 0 && bytes % 1024 == 0) std::snprintf(b, sizeof b, "%lluk", static_cast<unsigned long long>(bytes / 1024));
  else std::snprintf(b, sizeof b, "%llu", static_cast<unsigned long long>(bytes));
  return b;
}

}  // namespace droce::net
