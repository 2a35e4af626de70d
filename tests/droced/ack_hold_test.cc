// AckHold (droced/ack_hold.h): crafted blocks in, how long a wake-up may wait out.
#include "droced/ack_hold.h"

#include <gtest/gtest.h>

namespace droce::droced {
namespace {

constexpr int kHere = 0;
constexpr int kElsewhere = 1;
constexpr uint64_t kT0 = 1'000'000'000;

// A block at kT0 + 3 us, owing since kT0 a wake-up for ACKs alone, a client having woken the
// worker from its CPU 30 us before.
AckHold::Block ack_only() {
  AckHold::Block b;
  b.now_ns = kT0 + 3'000;
  b.owed_since_ns = kT0;
  b.acks_only = true;
  b.client = {kT0 - 30'000, kHere};
  b.cpu = kHere;
  return b;
}

TEST(AckHold, HoldsAnAckOnlyWakeUpWhileAClientHereWaitsUpToTheBound) {
  AckHold h;
  EXPECT_EQ(h.hold_ns(ack_only()), AckHold::kMaxHoldNs - 3'000) << "the sleep ends when the ACK has waited 20 us";
  EXPECT_EQ(h.counters().held, 1u);
  h.after_hold(AckHold::End::client, kT0 + 8'000);
  EXPECT_EQ(h.counters().paid, 1u);
  EXPECT_EQ(h.counters().missed, 0u);
  EXPECT_NE(h.hold_ns(ack_only()), 0u) << "a paid hold leaves the next one allowed";
}

TEST(AckHold, WakesThePeerAtOnceForAnythingElse) {
  AckHold h;
  AckHold::Block b = ack_only();
  b.owed_since_ns = 0;
  EXPECT_EQ(h.hold_ns(b), 0u) << "no wake-up owed";
  b = ack_only();
  b.acks_only = false;
  EXPECT_EQ(h.hold_ns(b), 0u) << "data, a request or a response: the peer's critical path";
  b = ack_only();
  b.client = {};
  EXPECT_EQ(h.hold_ns(b), 0u) << "no client ever woke us";
  b = ack_only();
  b.client.cpu = kElsewhere;
  EXPECT_EQ(h.hold_ns(b), 0u) << "the client runs on another CPU: the peer takes nothing from it";
  b = ack_only();
  b.cpu = -1;
  EXPECT_EQ(h.hold_ns(b), 0u) << "our CPU unknown";
  b = ack_only();
  b.client.ns = b.now_ns - AckHold::kClientRecentNs - 1;
  EXPECT_EQ(h.hold_ns(b), 0u) << "a stale stamp says nothing about where the client is now";
  b = ack_only();
  b.now_ns = b.owed_since_ns + AckHold::kMaxHoldNs - AckHold::kMinHoldNs + 1;
  EXPECT_EQ(h.hold_ns(b), 0u) << "owed almost 20 us already: too little left to hold";
  b = ack_only();
  b.now_ns = b.owed_since_ns + AckHold::kMaxHoldNs + 5'000;
  EXPECT_EQ(h.hold_ns(b), 0u) << "past the bound: never held longer";
  EXPECT_EQ(h.counters().held, 0u);
}

TEST(AckHold, AStampFromJustNowCounts) {
  AckHold h;
  AckHold::Block b = ack_only();
  b.client.ns = b.now_ns + 500;  // written after the worker read its clock
  EXPECT_NE(h.hold_ns(b), 0u);
}

TEST(AckHold, AHoldItsBoundEndedPausesHolds) {
  AckHold h;
  ASSERT_NE(h.hold_ns(ack_only()), 0u);
  const uint64_t back = kT0 + AckHold::kMaxHoldNs - 400;  // whole microseconds: a little early
  h.after_hold(AckHold::End::timer, back);
  EXPECT_EQ(h.counters().missed, 1u);
  AckHold::Block b = ack_only();
  b.owed_since_ns = back + 1'000;
  b.now_ns = b.owed_since_ns + 1'000;
  b.client.ns = back - 1'000;
  EXPECT_EQ(h.hold_ns(b), 0u) << "no client came: the next ACKs go at once";
  b.owed_since_ns = back + AckHold::kQuietNs;
  b.now_ns = b.owed_since_ns + 1'000;
  b.client.ns = b.now_ns - 10'000;
  EXPECT_NE(h.hold_ns(b), 0u) << "tried again after the quiet time";
}

TEST(AckHold, TellsAWakeUpForAcksAloneFromOneForData) {
  AckHold h;
  // Loops with nothing owed: each sets the mark (10 frames other than ACKs so far).
  h.loop_start(false, 7);
  h.loop_start(false, 10);
  // An ACK goes out: the count of other frames stays 10, and the wake-up it owes is for it alone.
  EXPECT_TRUE(h.acks_only(10));
  // Still owed at the next loop: the mark stays where the wake-up became owed.
  h.loop_start(true, 10);
  EXPECT_TRUE(h.acks_only(10));
  // A WRITE goes out behind the ACK: the owed wake-up now carries data.
  EXPECT_FALSE(h.acks_only(11));
  h.loop_start(true, 11);
  EXPECT_FALSE(h.acks_only(11)) << "owed throughout: the WRITE still waits behind the same wake-up";
  // Flushed: the next loop owes nothing and takes the new mark.
  h.loop_start(false, 11);
  EXPECT_TRUE(h.acks_only(11));
}

TEST(AckHold, AHoldTheIdleCpuEndedIsNoMiss) {
  AckHold h;
  ASSERT_NE(h.hold_ns(ack_only()), 0u);
  h.after_hold(AckHold::End::idle, kT0 + 30'000);  // the client blocked: the idle waker woke the peer
  EXPECT_EQ(h.counters().idle, 1u);
  EXPECT_EQ(h.counters().missed, 0u);
  EXPECT_NE(h.hold_ns(ack_only()), 0u) << "it cost the peer only the switch to idle: holds go on";
}

TEST(AckHold, AnEarlierTimerOrAnotherEventIsNoMiss) {
  AckHold h;
  ASSERT_NE(h.hold_ns(ack_only()), 0u);
  h.after_hold(AckHold::End::timer, kT0 + 900'000);  // an engine timer due before the bound
  ASSERT_NE(h.hold_ns(ack_only()), 0u);
  h.after_hold(AckHold::End::other, kT0 + 21'000);  // the peer's frames, a socket
  EXPECT_EQ(h.counters().missed, 0u);
  EXPECT_EQ(h.counters().paid, 0u);
  EXPECT_NE(h.hold_ns(ack_only()), 0u);
  EXPECT_EQ(h.counters().held, 3u);
}

}  // namespace
}  // namespace droce::droced
