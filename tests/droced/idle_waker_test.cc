// IdleWaker (droced/idle_waker.h): a real thread, at SCHED_IDLE, on the CPU asked for.
#include "droced/idle_waker.h"

#include <sched.h>

#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

namespace droce::droced {
namespace {

struct Seen {
  std::atomic<int> calls{0};
  std::atomic<int> cpu{-1};
};

void note(void* ctx) {
  auto* s = static_cast<Seen*>(ctx);
  s->cpu.store(sched_getcpu());
  s->calls.fetch_add(1);
}

// Waits up to 10 s for `calls` to reach n (the CPU may be busy with other tests: the
// thread runs only when it is idle).
bool wait_calls(const Seen& s, int n) {
  for (int i = 0; i < 10'000 && s.calls.load() < n; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return s.calls.load() >= n;
}

int some_cpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
  for (int c = CPU_SETSIZE - 1; c >= 0; --c)
    if (CPU_ISSET(c, &set)) return c;  // the last allowed: not always CPU 0
  return 0;
}

TEST(IdleWaker, RunsTheCallbackOncePerArmOnItsCpuAtSchedIdle) {
  Seen seen;
  IdleWaker w;
  const int cpu = some_cpu();
  ASSERT_EQ(w.start(cpu, &note, &seen), 0);
  EXPECT_TRUE(w.running());
  EXPECT_EQ(w.cpu(), cpu);
  ASSERT_NE(w.tid(), 0);
  EXPECT_EQ(sched_getscheduler(w.tid()), SCHED_IDLE) << "it must run only when its CPU has nothing else";
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(seen.calls.load(), 0) << "not armed: no call";
  w.arm();
  ASSERT_TRUE(wait_calls(seen, 1));
  EXPECT_EQ(seen.cpu.load(), cpu);
  w.arm();
  ASSERT_TRUE(wait_calls(seen, 2));
  EXPECT_EQ(w.runs(), 2u);
  w.stop();
  EXPECT_FALSE(w.running());
  EXPECT_EQ(seen.calls.load(), 2) << "stopping is no call";
  w.arm();  // after stop: nothing, no crash
}

TEST(IdleWaker, RefusesWhatItCannotDo) {
  Seen seen;
  IdleWaker w;
  EXPECT_EQ(w.start(-1, &note, &seen), -EINVAL);
  EXPECT_EQ(w.start(0, nullptr, &seen), -EINVAL);
  EXPECT_EQ(w.start(CPU_SETSIZE, &note, &seen), -EINVAL);
  // A CPU this process may not use (beyond the machine's): the thread cannot pin itself.
  const long n = sysconf(_SC_NPROCESSORS_CONF);
  if (n > 0 && n < CPU_SETSIZE) {
    EXPECT_LT(w.start(int(n), &note, &seen), 0);
  }
  EXPECT_FALSE(w.running());
  w.arm();
  w.stop();
  EXPECT_EQ(seen.calls.load(), 0);
}

}  // namespace
}  // namespace droce::droced
