#include "net/fault_model.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace droce::net {
namespace {

// r scaled to [0, n) (multiply-shift; bias below 2^-64 * n).
uint64_t below(uint64_t r, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(r) * n) >> 64);
}

bool to_double(std::string_view s, double* out) {
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size() && std::isfinite(*out);
}

// "1%", "0.5", "100%": a probability.
bool probability(std::string_view s, double* p) {
  if (!s.empty() && s.back() == '%') s.remove_suffix(1);
  double v;
  if (!to_double(s, &v) || v < 0 || v > 100) return false;
  *p = v / 100;
  return true;
}

// "100us", "2ms", "500ns", "1s", "20" (us): a time in ns.
bool duration(std::string_view s, uint64_t* ns) {
  double scale = 1000;
  auto suffix = [&](std::string_view u, double k) {
    if (s.size() > u.size() && s.substr(s.size() - u.size()) == u) {
      s.remove_suffix(u.size());
      scale = k;
      return true;
    }
    return false;
  };
  (void)(suffix("ns", 1) || suffix("us", 1e3) || suffix("ms", 1e6) || suffix("s", 1e9));
  double v;
  if (!to_double(s, &v) || v < 0 || v * scale > 3.6e12) return false;  // an hour at most
  *ns = static_cast<uint64_t>(std::llround(v * scale));
  return true;
}

std::string percent(double p) {
  char b[32];
  std::snprintf(b, sizeof b, "%.6g%%", p * 100);
  return b;
}

std::string time_text(uint64_t ns) {
  char b[32];
  if (ns % 1000 == 0) std::snprintf(b, sizeof b, "%lluus", static_cast<unsigned long long>(ns / 1000));
  else std::snprintf(b, sizeof b, "%lluns", static_cast<unsigned long long>(ns));
  return b;
}

const char* target_name(CorruptTarget t) {
  switch (t) {
    case CorruptTarget::payload: return "payload";
    case CorruptTarget::icrc: return "icrc";
    case CorruptTarget::any: break;
  }
  return "any";
}

}  // namespace

uint64_t mix_seed(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

bool FaultSpec::any() const {
  return loss > 0 || (burst_enter > 0 && burst_loss > 0) || reorder > 0 || duplicate > 0 || corrupt > 0 ||
         truncate > 0 || delay_ns != 0 || jitter_ns != 0 || queue.any();
}

std::string FaultSpec::parse(std::string_view text) {
  FaultSpec s = *this;
  bool xoff_given = false, xon_given = false, quanta_given = false;
  if (text == "none") text = {};
  while (!text.empty()) {
    const size_t comma = text.find_first_of(", ");
    std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) return "'" + std::string(item) + "' is not key=value";
    const std::string_view k = item.substr(0, eq), v = item.substr(eq + 1);
    bool ok = true;
    if (k == "drop" || k == "loss") ok = probability(v, &s.loss);
    else if (k == "duplicate") ok = probability(v, &s.duplicate);
    else if (k == "reorder") ok = probability(v, &s.reorder);
    else if (k == "window") ok = duration(v, &s.reorder_window_ns);
    else if (k == "delay") ok = duration(v, &s.delay_ns);
    else if (k == "jitter") ok = duration(v, &s.jitter_ns);
    else if (k == "corrupt") ok = probability(v, &s.corrupt);
    else if (k == "truncate") ok = probability(v, &s.truncate);
    else if (k == "corrupt-at") {
      if (v == "any") s.corrupt_target = CorruptTarget::any;
      else if (v == "payload") s.corrupt_target = CorruptTarget::payload;
      else if (v == "icrc") s.corrupt_target = CorruptTarget::icrc;
      else ok = false;
    } else if (k == "burst") {
      // enter[/exit[/loss]]
      std::string_view rest = v;
      double* parts[] = {&s.burst_enter, &s.burst_exit, &s.burst_loss};
      for (double* p : parts) {
        if (rest.empty()) break;
        const size_t slash = rest.find('/');
        ok = ok && probability(rest.substr(0, slash), p);
        rest = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);
      }
      ok = ok && rest.empty() && (s.burst_enter == 0 || s.burst_exit > 0);
    } else if (k == "rate") {
      ok = parse_rate(v, &s.queue.rate_bps);
    } else if (k == "buffer") {
      ok = parse_bytes(v, &s.queue.buffer_bytes);
    } else if (k == "ecn-min") {
      ok = parse_bytes(v, &s.queue.ecn_min);
    } else if (k == "ecn-max") {
      ok = parse_bytes(v, &s.queue.ecn_max);
    } else if (k == "ecn-pmax") {
      ok = probability(v, &s.queue.ecn_pmax);
    } else if (k == "mark") {
      ok = v == "enqueue" || v == "dequeue";
      s.queue.mark_dequeue = v == "dequeue";
    } else if (k == "arrival") {
      ok = v == "wire" || v == "loop";
      s.loop_arrival = v == "loop";
    } else if (k == "pfc-xoff") {
      ok = parse_bytes(v, &s.queue.pfc.xoff);
      xoff_given = true;
    } else if (k == "pfc-xon") {
      ok = parse_bytes(v, &s.queue.pfc.xon);
      xon_given = true;
    } else if (k == "pfc-quanta") {
      uint64_t q = 0;
      ok = parse_bytes(v, &q) && q >= 1 && q <= kMaxPauseQuanta && v.find_first_not_of("0123456789") == v.npos;
      s.queue.pfc.quanta = static_cast<uint16_t>(q);
      quanta_given = true;
    } else {
      return "unknown fault '" + std::string(k) +
             "' (drop, burst, delay, jitter, reorder, window, duplicate, corrupt, corrupt-at, truncate, rate, buffer, "
             "ecn-min, ecn-max, ecn-pmax, mark, arrival, pfc-xoff, pfc-xon, pfc-quanta)";
    }
    if (!ok) return "bad value for " + std::string(k) + ": '" + std::string(v) + "'";
  }
  if (s.queue.ecn_max != 0 && s.queue.ecn_max < s.queue.ecn_min) return "ecn-max is below ecn-min";
  if (!s.queue.any() && (s.queue.buffer_bytes != 0 || s.queue.ecn_max != 0 || s.queue.mark_dequeue || s.queue.pfc.any()))
    return "buffer, ecn-*, mark and pfc-* need a rate";
  if (!s.queue.pfc.any() && (xon_given || quanta_given)) return "pfc-xon and pfc-quanta need pfc-xoff";
  if (s.queue.pfc.any()) {
    if (xoff_given && !xon_given) s.queue.pfc.xon = s.queue.pfc.xoff / 2;
    if (s.queue.pfc.xon >= s.queue.pfc.xoff) return "pfc-xon must be below pfc-xoff";
    if (s.queue.buffer_bytes != 0 && s.queue.pfc.xoff >= s.queue.buffer_bytes)
      return "pfc-xoff must be below buffer (what arrives after a pause needs room: the headroom)";
  } else {
    s.queue.pfc = {};
  }
  *this = s;
  return {};
}

std::string FaultSpec::to_string() const {
  std::string out;
  auto add = [&](const std::string& item) { out += (out.empty() ? "" : ",") + item; };
  if (loss > 0) add("drop=" + percent(loss));
  if (burst_enter > 0) add("burst=" + percent(burst_enter) + "/" + percent(burst_exit) + "/" + percent(burst_loss));
  if (delay_ns != 0) add("delay=" + time_text(delay_ns));
  if (jitter_ns != 0) add("jitter=" + time_text(jitter_ns));
  if (reorder > 0) add("reorder=" + percent(reorder) + ",window=" + time_text(reorder_window_ns));
  if (duplicate > 0) add("duplicate=" + percent(duplicate));
  if (corrupt > 0) add("corrupt=" + percent(corrupt) + ",corrupt-at=" + target_name(corrupt_target));
  if (truncate > 0) add("truncate=" + percent(truncate));
  if (queue.any()) {
    add("rate=" + rate_text(queue.rate_bps));
    if (queue.buffer_bytes != 0) add("buffer=" + bytes_text(queue.buffer_bytes));
    if (queue.ecn_max != 0)
      add("ecn-min=" + bytes_text(queue.ecn_min) + ",ecn-max=" + bytes_text(queue.ecn_max) +
          ",ecn-pmax=" + percent(queue.ecn_pmax));
    if (queue.mark_dequeue) add("mark=dequeue");
    if (queue.pfc.any()) {
      add("pfc-xoff=" + bytes_text(queue.pfc.xoff) + ",pfc-xon=" + bytes_text(queue.pfc.xon));
      if (queue.pfc.quanta != kMaxPauseQuanta) add("pfc-quanta=" + std::to_string(queue.pfc.quanta));
    }
  }
  if (loop_arrival) add("arrival=loop");
  return out.empty() ? "none" : out;
}

FaultDice::FaultDice(uint64_t seed) : state_(mix_seed(seed)) {}

uint64_t FaultDice::next() {
  // splitmix64 as a generator: a counter through the finalizer; any state is a good one.
  state_ += 0x9E3779B97F4A7C15ull;
  uint64_t z = state_;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

FrameFate FaultDice::roll(const FaultSpec& f, const FrameRegions& r) {
  // The same draws for every frame, whatever happens to it.
  const double channel = unit(), burst = unit(), loss = unit(), reorder = unit(), corrupt = unit(),
               truncate = unit(), duplicate = unit();
  const uint64_t jitter = next(), bit = next(), keep = next();

  FrameFate fate;
  if (f.burst_enter > 0) bad_ = bad_ ? !(channel < f.burst_exit) : channel < f.burst_enter;
  else bad_ = false;
  if (bad_ && burst < f.burst_loss) {
    fate.lost = fate.burst_lost = true;
    return fate;
  }
  if (loss < f.loss) {
    fate.lost = true;
    return fate;
  }
  fate.hold_ns = f.delay_ns;
  if (f.jitter_ns != 0)
    fate.hold_ns = add_saturating(fate.hold_ns, f.jitter_ns == UINT64_MAX ? jitter : below(jitter, f.jitter_ns + 1));
  if (reorder < f.reorder) {
    fate.hold_ns = add_saturating(fate.hold_ns, f.reorder_window_ns);
    fate.reordered = true;
  }
  if (corrupt < f.corrupt) {
    uint64_t first = 0, bits = uint64_t{r.len} * 8;
    if (f.corrupt_target == CorruptTarget::payload) {
      first = uint64_t{r.payload_off} * 8;
      bits = uint64_t{r.payload_len} * 8;
    } else if (f.corrupt_target == CorruptTarget::icrc) {
      first = uint64_t{r.len - r.icrc_len} * 8;
      bits = uint64_t{r.icrc_len} * 8;
    }
    if (bits != 0) {
      fate.corrupt = true;
      fate.corrupt_bit = first + below(bit, bits);
    }
  }
  if (truncate < f.truncate && r.len > kMinTruncatedLen) {
    fate.truncate = true;
    fate.keep_len = kMinTruncatedLen + static_cast<uint32_t>(below(keep, r.len - kMinTruncatedLen));
  }
  fate.duplicate = duplicate < f.duplicate;
  return fate;
}

}  // namespace droce::net
