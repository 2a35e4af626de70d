// /proc text about a thread, as `droce cores` reads it of each worker (core/proc.h).

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

// A stat line whose comm holds blanks and a ')', as a program may name itself; CPU 3.
const std::string kStat =
    "4242 (dro ce) x) S 1 4242 4242 0 -1 4194560 110 0 0 0 12 5 0 0 20 0 3 0 1000 1000000 200 "
    "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0 0 0 0 0 0 0 0 0\n";
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
  EXPECT_FALSE(parse_thread_sched("1 2 3", kStat, "voluntary_ctxt_switches:\t1\n", &t));  // no nonvoluntary
  EXPECT_FALSE(parse_thread_sched("1 2 3", kStat, "voluntary_ctxt_switches:\t1x\nnonvoluntary_ctxt_switches:\t1\n", &t));
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
  EXPECT_FALSE(read_thread_sched(0, &after));  // no such thread
}

}  // namespace
}  // namespace droce::core
