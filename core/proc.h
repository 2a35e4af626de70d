#pragma once
// Reading the kernel's /proc text about processes and threads: the keyed lines
// of a status file, and how the scheduler has treated one thread (its
// schedstat, stat and status), for `droce cores`: where a worker runs, how much
// CPU it used, how long it waited for a CPU that others held, and how often it
// was preempted; and how long each CPU sat idle (/proc/stat), for a worker that
// would leave its CPU only for one that has room. Parsers take the text (tests
// feed them crafted files); the readers open the files.

#include <sched.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace droce::core {

/// The value of a "Key:\tvalue" line of a /proc status file, leading blanks
/// removed; empty when the key is missing.
std::string_view status_value(std::string_view status, std::string_view key);

/// The whole of a (small) file; false when it cannot be read.
bool read_text(const std::string& path, std::string* out);

/// A thread as the scheduler saw it (kernel docs: scheduler/sched-stats,
/// filesystems/proc).
struct ThreadSched {
  int cpu = -1;                   ///< the CPU it last ran on (stat, field 39)
  int rt_priority = 0;            ///< its real-time priority, 0 for a normal task (stat, field 40)
  int policy = -1;                ///< its scheduling policy, SCHED_OTHER, SCHED_RR, ... (stat, field 41)
  uint64_t run_ns = 0;            ///< time on a CPU (schedstat, first field)
  uint64_t wait_ns = 0;           ///< time runnable but waiting for a CPU (schedstat, second)
  uint64_t voluntary = 0;         ///< context switches it asked for: it blocked (status)
  uint64_t involuntary = 0;       ///< context switches forced on it: it was preempted (status)
};

/// Fill `out` from the three files' text. False when any is malformed (a
/// missing field, a non-number), leaving `out` unspecified.
bool parse_thread_sched(std::string_view schedstat, std::string_view stat, std::string_view status, ThreadSched* out);

/// The same for a live thread of this process (/proc/self/task/<tid>/...); false
/// when it is gone or the kernel keeps no schedstat (CONFIG_SCHED_INFO off).
bool read_thread_sched(pid_t tid, ThreadSched* out);

/// parse_cpu_idle's value for a CPU /proc/stat has no line for (offline).
inline constexpr uint64_t kNoCpu = UINT64_MAX;

/// Each CPU's idle time (idle + iowait, in USER_HZ ticks) from /proc/stat's
/// "cpuN" lines, indexed by CPU number; CPUs with no line read kNoCpu. False
/// when a line is malformed or there is no "cpuN" line at all.
bool parse_cpu_idle(std::string_view proc_stat, std::vector<uint64_t>* ticks);

/// The same from the live /proc/stat.
bool read_cpu_idle(std::vector<uint64_t>* ticks);

/// The most idle time, in ticks between two samples of parse_cpu_idle, of any
/// CPU in `among` other than `except` that both samples saw (0 when none has any).
uint64_t most_idle_elsewhere(const std::vector<uint64_t>& before, const std::vector<uint64_t>& after,
                             const cpu_set_t& among, int except);

}  // namespace droce::core
