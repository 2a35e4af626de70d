#pragma once
// A lossy link on demand: decides, frame by frame, which received frames a
// droced discards as if the wire had lost them (droced --drop-rate). Lab and
// CI use: UCX's ud_verbs, RC retransmission and MPI over a link that loses
// 1 % of its frames, on hosts whose kernel has no netem.
//
// The choice is a Bernoulli draw per frame from a xorshift64* generator, so a
// run is reproducible from its seed (--drop-seed) and the draw costs a few
// instructions. No I/O; one instance per poll core (not thread-safe).

#include <cstdint>

namespace droce::net {

class FrameLoss {
 public:
  /// Rates are in parts per million (10000 = 1 %); 0 never drops,
  /// kMillion or more drops every frame. A zero seed is replaced (xorshift
  /// would stay at zero).
  static constexpr uint32_t kMillion = 1'000'000;
  FrameLoss(uint32_t rate_ppm = 0, uint64_t seed = 1)
      : rate_ppm_(rate_ppm), state_(seed != 0 ? seed : 0x9e3779b97f4a7c15ULL) {}

  bool enabled() const { return rate_ppm_ != 0; }
  uint32_t rate_ppm() const { return rate_ppm_; }

  /// True when this frame is to be lost.
  bool drop() {
    if (rate_ppm_ == 0) return false;
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    const uint64_t r = state_ * 0x2545f4914f6cdd1dULL;
    // The top 32 bits, scaled to [0, kMillion).
    return ((r >> 32) * kMillion >> 32) < rate_ppm_;
  }

 private:
  uint32_t rate_ppm_;
  uint64_t state_;
};

}  // namespace droce::net
