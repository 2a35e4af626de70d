#pragma once
// Reading the kernel's /proc text about processes and threads: the keyed lines
// of a status file, and how the scheduler has treated one thread (its
// schedstat, stat and status), for `droce cores`: where a worker runs, how much
// CPU it used, how long it waited for a CPU that others held, and how often it
// was preempted. Parsers take the text (tests feed them crafted files); the
// readers open the files.

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

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

}  // namespace droce::core
