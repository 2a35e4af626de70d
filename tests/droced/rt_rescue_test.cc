// RtRescue (droced/rt_rescue.h): a real watching thread at SCHED_FIFO and a stand-in worker
// thread at the normal policy. Needs CAP_SYS_NICE (CI runs as root); skipped without it.
#include "droced/rt_rescue.h"

#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "core/clock.h"

namespace droce::droced {
namespace {

using std::chrono::milliseconds;
constexpr uint64_t kStarved = 5'000'000;

// A thread at the normal policy, as a demoted worker is, that loops (tells the rescue it
// runs) while `looping` is set and otherwise waits, as a worker kept off its CPU would.
struct StandIn {
  std::atomic<bool> looping{false};
  std::atomic<bool> done{false};
  std::atomic<pid_t> tid{0};
  RtRescue* rescue = nullptr;
  std::thread thread;

  void run() {
    tid.store(pid_t(::syscall(SYS_gettid)));
    while (!done.load()) {
      if (looping.load()) rescue->loop_started(core::monotonic_ns());
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  void start(RtRescue* r) {
    rescue = r;
    thread = std::thread([this] { run(); });
    while (tid.load() == 0) std::this_thread::yield();
  }
  ~StandIn() {
    done.store(true);
    if (thread.joinable()) thread.join();
  }
};

// Waits up to 2 s (the machine may be busy with other tests) for the rescue.
bool wait_rescues(const RtRescue& r, uint64_t n) {
  for (int i = 0; i < 2000 && r.rescues() < n; ++i) std::this_thread::sleep_for(milliseconds(1));
  return r.rescues() >= n;
}

// Starts `r` for `s`, or says why the test cannot run here.
::testing::AssertionResult started(RtRescue& r, StandIn& s) {
  s.start(&r);
  const int rc = r.start(s.thread.native_handle(), 1, 2, kStarved);
  if (rc == -EPERM) return ::testing::AssertionFailure() << "EPERM";
  if (rc != 0) return ::testing::AssertionFailure() << "start: " << rc;
  return ::testing::AssertionSuccess();
}

#define START_OR_SKIP(r, s)                                                  \
  do {                                                                       \
    auto ok = started(r, s);                                                 \
    if (!ok && std::string(ok.message()) == "EPERM")                         \
      GTEST_SKIP() << "SCHED_FIFO refused: RtRescue needs CAP_SYS_NICE";      \
    ASSERT_TRUE(ok);                                                         \
  } while (0)

TEST(RtRescue, AWorkerDemotedThatDoesNotRunGetsSchedRrBack) {
  RtRescue r;
  StandIn s;
  START_OR_SKIP(r, s);
  ASSERT_EQ(sched_getscheduler(s.tid.load()), SCHED_OTHER);
  const uint64_t t0 = core::monotonic_ns();
  r.demoted(t0);  // and then no loop: starved
  ASSERT_TRUE(wait_rescues(r, 1));
  const uint64_t waited = core::monotonic_ns() - t0;
  EXPECT_GE(waited, kStarved) << "not before it has gone kStarvedNs without a loop";
  EXPECT_EQ(sched_getscheduler(s.tid.load()), SCHED_RR);
  sched_param p{};
  ASSERT_EQ(sched_getparam(s.tid.load(), &p), 0);
  EXPECT_EQ(p.sched_priority, 1);
  EXPECT_GE(r.longest_starved_ns(), kStarved);
  EXPECT_TRUE(r.take_rescued()) << "the worker is told, so its budget starts again";
  EXPECT_FALSE(r.take_rescued()) << "once";
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_EQ(r.rescues(), 1u) << "one rescue per demotion";
}

TEST(RtRescue, AWorkerDemotedThatRunsIsLeftAloneUntilItStops) {
  RtRescue r;
  StandIn s;
  START_OR_SKIP(r, s);
  s.looping.store(true);
  r.demoted(core::monotonic_ns());
  // Looping at the normal policy, beside normal programs: what demotion is for.
  std::this_thread::sleep_for(milliseconds(40));
  EXPECT_EQ(r.rescues(), 0u);
  EXPECT_EQ(sched_getscheduler(s.tid.load()), SCHED_OTHER);
  EXPECT_FALSE(r.take_rescued());
  // Then kept off: rescued, by the same timer, looked at again.
  s.looping.store(false);
  ASSERT_TRUE(wait_rescues(r, 1));
  EXPECT_EQ(sched_getscheduler(s.tid.load()), SCHED_RR);
  EXPECT_TRUE(r.take_rescued());
}

TEST(RtRescue, AWorkerThatTookSchedRrBackItselfIsNotRescued) {
  RtRescue r;
  StandIn s;
  START_OR_SKIP(r, s);
  r.demoted(core::monotonic_ns());
  r.promoted();  // it blocked: before_block gave it SCHED_RR back
  std::this_thread::sleep_for(milliseconds(30));
  EXPECT_EQ(r.rescues(), 0u);
  EXPECT_EQ(sched_getscheduler(s.tid.load()), SCHED_OTHER) << "left as it was: the worker sets its own policy";
  EXPECT_FALSE(r.take_rescued());
  // A later demotion is watched again.
  r.demoted(core::monotonic_ns());
  ASSERT_TRUE(wait_rescues(r, 1));
}

// The policy refused (here: priority 0 is no SCHED_RR priority): no rescue counted, the worker
// left as it was, the refusal logged, and the demotion not looked at again.
TEST(RtRescue, APolicyTheKernelRefusesIsNoRescue) {
  RtRescue r;
  StandIn s;
  s.start(&r);
  const int rc = r.start(s.thread.native_handle(), /*worker_priority=*/0, 2, kStarved);
  if (rc == -EPERM) GTEST_SKIP() << "SCHED_FIFO refused: RtRescue needs CAP_SYS_NICE";
  ASSERT_EQ(rc, 0);
  r.demoted(core::monotonic_ns());
  std::this_thread::sleep_for(milliseconds(40));
  EXPECT_EQ(r.rescues(), 0u);
  EXPECT_EQ(sched_getscheduler(s.tid.load()), SCHED_OTHER);
  EXPECT_FALSE(r.take_rescued());
}

TEST(RtRescue, StopsAndRefusesBadArguments) {
  RtRescue r;
  EXPECT_EQ(r.start(pthread_self(), 1, 2, 0), -EINVAL);
  EXPECT_FALSE(r.running());
  r.demoted(core::monotonic_ns());  // not started: nothing happens
  EXPECT_FALSE(r.take_rescued());
  StandIn s;
  START_OR_SKIP(r, s);
  EXPECT_TRUE(r.running());
  EXPECT_EQ(r.start(s.thread.native_handle()), -EINVAL) << "already running";
  r.stop();
  EXPECT_FALSE(r.running());
  r.stop();  // twice is fine
}

}  // namespace
}  // namespace droce::droced
