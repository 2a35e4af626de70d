#pragma once
// EmptyPollYield: a thread that polls a CQ and keeps finding it empty gives
// its CPU away now and then (sched_yield), as a program on a software RDMA
// device should on a machine it shares (README, "Waking up").
//
// Why: with a hardware RNIC nothing a polling program keeps off its CPU does
// the RDMA work. With droce, the work is done by droced and by the peer
// program, and on a machine with fewer CPUs than spinners (a 2-vCPU VM: two
// perftests that both spin, two droced) a program that spins on an empty CQ
// keeps a runnable one off its CPU until the scheduler's slice ends, several
// milliseconds. ib_send_bw 64 B between two droce hosts on such a VM ran at
// 0.05-0.07 M msg/s: the receiving perftest, sharing a CPU with the spinning
// sender, fell 512 receives behind, RNR NAKs and go-back-N followed. A yield
// after 64 empty polls in a row (about 2-3 us of spinning there) took it to
// 0.4-0.9 M msg/s and ib_send_lat 64 B from 21-24 to 11-13 us typical.
// With nothing else runnable on the CPU a yield returns at once, having cost
// a system call; so a yield back within kAloneNs doubles the count to the
// next one (up to 64 times the base), and one that gave the CPU away sets it
// back: a thread alone on its CPU (a core of its own) soon yields once per
// 4096 empty polls. DROCE_POLL_YIELD=N sets the base count, 0 never yields.
//
// I/O-free: the caller says what each poll found and yields when told to;
// tests/provider/poll_yield_test.cc drives it.

#include <cstdint>
#include <cstdlib>

namespace droce::provider {

class EmptyPollYield {
 public:
  static constexpr uint32_t kDefaultEvery = 64;

  /// A yield back sooner than this found nothing else to run (a system call is 0.2-0.5 us; a
  /// yield that ran another task took two switches and that task's run).
  static constexpr uint64_t kAloneNs = 2'000;
  /// The count grows at most to this many times the base.
  static constexpr uint32_t kMaxGrowth = 64;

  explicit EmptyPollYield(uint32_t every = kDefaultEvery) : every_(every), now_every_(every) {}

  /// After each poll: true when the caller should yield its CPU now (the current count of
  /// polls in a row found nothing; a poll that found something starts the count again).
  bool after_poll(bool found) {
    if (found || every_ == 0) {
      empty_ = 0;
      return false;
    }
    if (++empty_ < now_every_) return false;
    empty_ = 0;
    return true;
  }
  /// After a yield after_poll asked for: how long it took.
  void after_yield(uint64_t yield_ns) {
    if (yield_ns >= kAloneNs) now_every_ = every_;
    else if (now_every_ < every_ * kMaxGrowth) now_every_ *= 2;
  }
  /// Empty polls in a row before the next yield.
  uint32_t every() const { return now_every_; }

  /// The count from DROCE_POLL_YIELD's text: a number 0 to 1 000 000 (0: never yield); nullptr
  /// or anything else: kDefaultEvery.
  static uint32_t every_from(const char* text) {
    if (text == nullptr || *text == '\0') return kDefaultEvery;
    char* end = nullptr;
    const unsigned long v = std::strtoul(text, &end, 10);
    if (*end != '\0' || text[0] == '-' || v > 1'000'000) return kDefaultEvery;
    return static_cast<uint32_t>(v);
  }

 private:
  uint32_t every_;      ///< the base count (0: never)
  uint32_t now_every_;  ///< the count now: every_ up to every_ * kMaxGrowth
  uint32_t empty_ = 0;
};

}  // namespace droce::provider
