#include "droced/ack_hold.h"

namespace droce::droced {

uint64_t AckHold::hold_ns(const Block& b) {
  if (b.owed_since_ns == 0 || !b.acks_only || b.cpu < 0 || b.now_ns < quiet_until_ns_) return 0;
  // Stamps are hints from the client's memory: one from the future is from just now.
  const uint64_t age = b.now_ns > b.client.ns ? b.now_ns - b.client.ns : 0;
  if (b.client.ns == 0 || b.client.cpu != b.cpu || age > kClientRecentNs) return 0;
  const uint64_t due = b.owed_since_ns + kMaxHoldNs;
  if (due < b.now_ns + kMinHoldNs) return 0;
  ++counters_.held;
  due_ns_ = due;
  return due - b.now_ns;
}

void AckHold::after_hold(End how, uint64_t back_ns) {
  if (how == End::client) {
    ++counters_.paid;
  } else if (how == End::idle) {
    ++counters_.idle;
  } else if (how == End::timer && back_ns + kTimerSlackNs >= due_ns_) {
    ++counters_.missed;
    quiet_until_ns_ = back_ns + kQuietNs;
  }
}

}  // namespace droce::droced
