#include "net/pfc.h"

#include <algorithm>
#include <cstring>

#include "core/endian.h"
#include "net/headers.h"

namespace droce::net {

PauseParse parse_pause(std::span<const uint8_t> frame, PauseFrame* out) {
  if (frame.size() < 14 || core::load_be16(frame.data() + 12) != kEtherTypeMacControl)
    return PauseParse::not_mac_control;
  if (frame.size() < 16) return PauseParse::malformed;
  const uint16_t op = core::load_be16(frame.data() + 14);
  PauseFrame f;
  std::memcpy(f.dst.data(), frame.data(), 6);
  std::memcpy(f.src.data(), frame.data() + 6, 6);
  if (op == kMacControlPause) {
    if (frame.size() < 18) return PauseParse::malformed;
    f.enable = 0xff;
    f.quanta.fill(core::load_be16(frame.data() + 16));
  } else if (op == kMacControlPfc) {
    if (frame.size() < 18 + 16) return PauseParse::malformed;
    f.enable = frame[17];  // the vector's high byte is reserved
    for (size_t p = 0; p < 8; ++p) f.quanta[p] = core::load_be16(frame.data() + 18 + 2 * p);
  } else {
    return PauseParse::unknown_opcode;
  }
  *out = f;
  return PauseParse::ok;
}

void build_pfc(uint8_t* out, const MacAddr& dst, const MacAddr& src, uint8_t enable, uint16_t quanta) {
  std::memset(out, 0, kPauseFrameLen);
  std::memcpy(out, dst.data(), 6);
  std::memcpy(out + 6, src.data(), 6);
  core::store_be16(out + 12, kEtherTypeMacControl);
  core::store_be16(out + 14, kMacControlPfc);
  core::store_be16(out + 16, enable);
  for (size_t p = 0; p < 8; ++p)
    if (enable & (1u << p)) core::store_be16(out + 18 + 2 * p, quanta);
}

uint64_t pause_ns(uint16_t quanta, uint64_t speed_bps) {
  // 512 bit times each; rounded up, so a pause never ends before the sender's would.
  const unsigned __int128 bits_ns = static_cast<unsigned __int128>(quanta) * 512 * 1'000'000'000ull;
  return static_cast<uint64_t>((bits_ns + speed_bps - 1) / speed_bps);
}

uint8_t frame_priority(std::span<const uint8_t> frame) {
  if (frame.size() < 14) return 0;
  uint16_t type = core::load_be16(frame.data() + 12);
  if (type == kEtherTypeVlan) return frame.size() >= 16 ? uint8_t(frame[14] >> 5) : 0;
  if (type == kEtherTypeIpv4 && frame.size() >= 16) return uint8_t(frame[15] >> 5);  // TOS >> 2 >> 3
  if (type == kEtherTypeIpv6 && frame.size() >= 16)
    return uint8_t(((frame[14] & 0x0f) << 4 | frame[15] >> 4) >> 5);  // traffic class >> 2 >> 3
  return 0;
}

// ---- PauseGate --------------------------------------------------------------------------

void PauseGate::apply(const PauseFrame& f, uint64_t now_ns, uint64_t speed_bps) {
  std::lock_guard l(apply_mutex_);
  uint64_t latest = 0;
  for (size_t p = 0; p < 8; ++p) {
    if (f.enable & (1u << p)) {
      // XON ends the pause now; 1 ns back, so paused() (now < until) is false at once.
      const uint64_t until =
          f.quanta[p] == 0 ? now_ns : now_ns + std::max<uint64_t>(1, pause_ns(f.quanta[p], speed_bps));
      until_[p].store(until, std::memory_order_relaxed);
    }
    latest = std::max(latest, until_[p].load(std::memory_order_relaxed));
  }
  // Published last: a reader that sees engaged() sees the pauses it covers.
  latest_.store(latest > now_ns ? latest : 0, std::memory_order_release);
}

uint64_t PauseGate::next_resume_ns(uint64_t now_ns) const {
  uint64_t t = UINT64_MAX;
  for (const auto& u : until_) {
    const uint64_t v = u.load(std::memory_order_relaxed);
    if (v > now_ns) t = std::min(t, v);
  }
  return t;
}

void PauseGate::settle(uint64_t now_ns) {
  uint64_t seen = latest_.load(std::memory_order_relaxed);
  // A pause applied meanwhile raised latest_: the exchange fails and it stays engaged.
  if (seen != 0 && seen <= now_ns) latest_.compare_exchange_strong(seen, 0, std::memory_order_relaxed);
}

// ---- PfcPoint ---------------------------------------------------------------------------

void PfcPoint::on_enqueue(const MacAddr& src, uint8_t prio, uint64_t arrival_ns) {
  const uint8_t bit = uint8_t(1u << (prio & 7));
  for (size_t i = 0; i < n_up_; ++i) {
    Upstream& u = up_[i];
    if (same_mac(u.mac, src)) {
      u.prios |= bit;
      if ((u.paused & bit) != 0 && arrival_ns > u.sent_ns + kRepauseAfterNs) u.deaf = true;
      return;
    }
  }
  if (n_up_ == kMaxUpstream) {
    ++counters_.untracked;
    return;
  }
  up_[n_up_++] = Upstream{src, bit, 0, false, 0};
}

void PfcPoint::send(Upstream& u, const PfcSpec& s, uint64_t now_ns, std::vector<PauseOut>* out) {
  out->push_back(PauseOut{u.mac, u.prios, s.quanta});
  u.paused = u.prios;
  u.sent_ns = now_ns;
  u.deaf = false;
  ++counters_.xoff_sent;
}

void PfcPoint::on_depth(const PfcSpec& s, uint64_t depth, uint64_t now_ns, std::vector<PauseOut>* out) {
  if (!s.any()) {
    if (!paused_) return;
    // PFC switched off while it held its senders: let them go now.
  } else if (!paused_) {
    if (depth < s.xoff) return;
    paused_ = true;
    paused_since_ = now_ns;
    for (size_t i = 0; i < n_up_; ++i) send(up_[i], s, now_ns, out);
    refresh_ns_ = now_ns + pause_ns(s.quanta, speed_bps_) / 2;
    return;
  } else if (depth > s.xon) {
    // Still above xon: a sender first seen (or a new priority) is paused now, and one that did
    // not hear the last pause; everyone again before half of the last pause has run out.
    const bool refresh = now_ns >= refresh_ns_;
    for (size_t i = 0; i < n_up_; ++i) {
      Upstream& u = up_[i];
      if (refresh || (u.prios & ~u.paused) != 0 || u.deaf) {
        counters_.repaused += !refresh && u.deaf;
        send(u, s, now_ns, out);
      }
    }
    if (refresh) refresh_ns_ = now_ns + pause_ns(s.quanta, speed_bps_) / 2;
    return;
  }
  paused_ = false;
  counters_.paused_ns += now_ns - paused_since_;
  for (size_t i = 0; i < n_up_; ++i) {
    Upstream& u = up_[i];
    if (u.paused == 0) continue;
    out->push_back(PauseOut{u.mac, u.paused, 0});
    u.paused = 0;
    u.deaf = false;
    ++counters_.xon_sent;
  }
}

}  // namespace droce::net
