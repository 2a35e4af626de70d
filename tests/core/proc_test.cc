// /proc text about a thread, as `droce cores` reads it of each worker, and about each CPU's idle
// time, as an event-mode worker reads it before it leaves its CPU (core/proc.h).

#include "core/proc.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <time.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

namespace droce::core {
namespace {

// A stat line whose comm holds blanks and a ')', as a program may name itself; CPU 3, at
// SCHED_RR (2) priority 1.
const std::string kStat =
    "4242 (dro ce) x) S 1 4242 4242 0 -1 4194560 110 0 0 0 12 5 0 0 20 0 3 0 1000 1000000 200 "
    "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 1 2 0 0 0 0 0 0 0 0 0 0 0\n";
const std::string kStatus =
    "Name:\tdroced\nState:\tS (sleeping)\nvoluntary_ctxt_switches:\t105\nnonvoluntary_ctxt_switches:\t16\n";

TEST(Proc, StatusValueFindsTheKeyedLineOnly) {
  EXPECT_EQ(status_value(kStatus, "Name"), "droced");
  EXPECT_EQ(status_value(kStatus, "voluntary_ctxt_switches"), "105");  // not nonvoluntary's line
  EXPECT_EQ(status_value(kStatus, "nonvoluntary_ctxt_switches"), "16");
  EXPECT_EQ(status_value(kStatus, "Nam"), "");  // a prefix of a key is not the key
  EXPECT_EQ(status_value(kStatus, "Missing"), "");
  EXPECT_EQ(status_value("", "Name"), "");
  EXPECT_EQ(status_value("Last:  7", "Last"), "7");  // last line, no newline, blanks
}

TEST(Proc, AThreadFromItsThreeFiles) {
  ThreadSched t;
  ASSERT_TRUE(parse_thread_sched("123456789 4000 77\n", kStat, kStatus, &t));
  EXPECT_EQ(t.run_ns, 123456789u);
  EXPECT_EQ(t.wait_ns, 4000u);
  EXPECT_EQ(t.cpu, 3);  // field 39, counted after the last ')'
  EXPECT_EQ(t.rt_priority, 1);
  EXPECT_EQ(t.policy, SCHED_RR);
  EXPECT_EQ(t.voluntary, 105u);
  EXPECT_EQ(t.involuntary, 16u);
}

TEST(Proc, MalformedTextIsRefused) {
  ThreadSched t;
  EXPECT_FALSE(parse_thread_sched("", kStat, kStatus, &t));
  EXPECT_FALSE(parse_thread_sched("123", kStat, kStatus, &t));  // no wait time
  EXPECT_FALSE(parse_thread_sched("x 1 2", kStat, kStatus, &t));
  EXPECT_FALSE(parse_thread_sched("1 2 3", "4242 (droced S 1 2", kStatus, &t));  // no ')'
  EXPECT_FALSE(parse_thread_sched("1 2 3", "4242 (droced) S 1 2 3\n", kStatus, &t));  // too few fields
  std::string bad_cpu = kStat;
  bad_cpu.replace(bad_cpu.find(" 17 3 ") + 4, 1, "z");
  EXPECT_FALSE(parse_thread_sched("1 2 3", bad_cpu, kStatus, &t));
  std::string bad_policy = kStat;
  bad_policy.replace(bad_policy.find(" 17 3 1 2 ") + 9, 1, "9");  // no such policy
  EXPECT_FALSE(parse_thread_sched("1 2 3", bad_policy, kStatus, &t));
  const std::string no_policy = kStat.substr(0, kStat.find(" 17 3 1 ") + 8) + "\n";  // ends at field 40
  EXPECT_FALSE(parse_thread_sched("1 2 3", no_policy, kStatus, &t));
  EXPECT_FALSE(parse_thread_sched("1 2 3", kStat, "voluntary_ctxt_switches:\t1\n", &t));  // no nonvoluntary
  EXPECT_FALSE(parse_thread_sched("1 2 3", kStat, "voluntary_ctxt_switches:\t1x\nnonvoluntary_ctxt_switches:\t1\n", &t));
}

// /proc/stat as a 6.x kernel writes it: the all-CPU line, CPUs 0, 1 and 3 (2 offline), then keys
// that begin like "cpu" but are not CPUs.
constexpr char kProcStat[] =
    "cpu  1000 5 300 9000 100 0 7 0 0 0\n"
    "cpu0 500 2 150 4000 40 0 3 0 0 0\n"
    "cpu1 400 3 100 3000 60 0 2 0 0 0\n"
    "cpu3 100 0 50 2000 0 0 2 0 0 0\n"
    "intr 123456 1 2 3\n"
    "ctxt 987654\n"
    "cpus_allowed 1\n";

TEST(Proc, CpuIdleIsIdlePlusIowaitPerCpu) {
  std::vector<uint64_t> t;
  ASSERT_TRUE(parse_cpu_idle(kProcStat, &t));
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(t[0], 4040u);
  EXPECT_EQ(t[1], 3060u);
  EXPECT_EQ(t[2], kNoCpu);  // offline: no line
  EXPECT_EQ(t[3], 2000u);
  // Older kernels stop after steal (8 fields): idle and iowait are still the 4th and 5th.
  ASSERT_TRUE(parse_cpu_idle("cpu0 1 2 3 4 5 6 7 8\n", &t));
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0], 9u);
}

TEST(Proc, MalformedCpuIdleIsRefused) {
  std::vector<uint64_t> t;
  EXPECT_FALSE(parse_cpu_idle("", &t));
  EXPECT_FALSE(parse_cpu_idle("cpu  1 2 3 4 5\nintr 1\n", &t));  // no CPU of its own
  EXPECT_FALSE(parse_cpu_idle("cpu0 1 2 3 4\n", &t));              // no iowait
  EXPECT_FALSE(parse_cpu_idle("cpu0 1 2 x 4 5\n", &t));
  EXPECT_FALSE(parse_cpu_idle("cpu99999999 1 2 3 4 5\n", &t));     // beyond any cpu_set_t
}

TEST(Proc, MostIdleElsewhereSkipsTheOwnCpuAndCpusNotAllowed) {
  std::vector<uint64_t> before, after;
  ASSERT_TRUE(parse_cpu_idle("cpu0 0 0 0 100 0\ncpu1 0 0 0 100 0\ncpu2 0 0 0 100 0\ncpu3 0 0 0 100 0\n", &before));
  ASSERT_TRUE(parse_cpu_idle("cpu0 0 0 0 190 0\ncpu1 0 0 0 105 1\ncpu2 0 0 0 150 0\ncpu3 0 0 0 170 0\n", &after));
  cpu_set_t all;
  CPU_ZERO(&all);
  for (int c = 0; c < 4; ++c) CPU_SET(c, &all);
  EXPECT_EQ(most_idle_elsewhere(before, after, all, 0), 70u);  // CPU 3; CPU 0 (90) is our own
  EXPECT_EQ(most_idle_elsewhere(before, after, all, 3), 90u);
  cpu_set_t some;
  CPU_ZERO(&some);
  CPU_SET(0, &some);
  CPU_SET(1, &some);
  EXPECT_EQ(most_idle_elsewhere(before, after, some, 0), 6u);  // CPU 1 only
  CPU_CLR(1, &some);
  EXPECT_EQ(most_idle_elsewhere(before, after, some, 0), 0u);  // nowhere else to go
  // A CPU that went offline or came online between the samples counts for nothing.
  ASSERT_TRUE(parse_cpu_idle("cpu0 0 0 0 190 0\ncpu1 0 0 0 105 1\ncpu3 0 0 0 170 0\n", &after));
  before[3] = kNoCpu;
  EXPECT_EQ(most_idle_elsewhere(before, after, all, 0), 6u);
}

TEST(Proc, EveryCpuThisProcessMayUseHasIdleTime) {
  // Every CPU this process may use has a line, and idle time never runs backwards.
  std::vector<uint64_t> before, after;
  ASSERT_TRUE(read_cpu_idle(&before));
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  ASSERT_TRUE(read_cpu_idle(&after));
  cpu_set_t mine;
  ASSERT_EQ(sched_getaffinity(0, sizeof mine, &mine), 0);
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &mine)) continue;
    ASSERT_LT(size_t(c), after.size()) << "cpu" << c;
    EXPECT_NE(after[size_t(c)], kNoCpu) << "cpu" << c;
    EXPECT_GE(after[size_t(c)], before[size_t(c)]) << "cpu" << c;
  }
}

TEST(Proc, ThisThreadAsTheKernelSeesIt) {
  const pid_t tid = pid_t(syscall(SYS_gettid));
  ThreadSched before;
  ASSERT_TRUE(read_thread_sched(tid, &before));
  // Burn 20 ms of this thread's CPU (its own clock: on a busy machine wall time says little),
  // then block twice: the run time grows by that much, and the voluntary switches by two.
  const auto cpu_ns = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return uint64_t(ts.tv_sec) * 1'000'000'000u + uint64_t(ts.tv_nsec);
  };
  const uint64_t until = cpu_ns() + 20'000'000u;
  while (cpu_ns() < until) {
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ThreadSched after;
  ASSERT_TRUE(read_thread_sched(tid, &after));
  EXPECT_GE(after.run_ns - before.run_ns, 19'000'000u);
  EXPECT_GE(after.voluntary, before.voluntary + 2);
  EXPECT_GE(after.cpu, 0);
  EXPECT_LT(after.cpu, CPU_SETSIZE);
  EXPECT_EQ(after.policy, sched_getscheduler(0));  // the stat field and the system call agree
  EXPECT_FALSE(read_thread_sched(0, &after));  // no such thread
}

}  // namespace
}  // namespace droce::core
