#pragma once
// ControlJobs: control work that takes long and needs no engine state runs on
// a TBB task arena beside the workers, so that one client's request does not
// hold up a worker: its data path, every other client's requests on it, and
// (worker 0) the CM.
//
// What goes there (docs/droced.md, "Control work off the worker"):
//   - populating droced's page tables for a new memory registration
//     (PeerMemory::populate), as a NIC pins at ibv_reg_mr: otherwise the
//     engine's first write to each page faults on the data path, and a fault
//     stalls every QP of the worker (3-4 us each on the development VM: 7 s
//     for the 2 M pages of 8 GiB, spread over the transfer);
//   - unmapping a large registration after dereg_mr or a client's exit
//     (munmap of 8 GiB droced had written: 470 ms).
// Small ones (under kInlineBytes) stay on the worker: a task costs more.
//
// A job is a function of its own state (no reference to the session, which
// may close meanwhile: what the job needs it owns, by shared_ptr). When it
// ends, the job marks itself done and writes the submitting worker's wake
// eventfd, so a sleeping worker finishes the request at once. The session
// keeps the request pending (Session::poll_pending) until then; the client
// waits for its reply as for any other.
//
// The destructor cancels nothing by itself: jobs check Job::cancelled between
// chunks (set by cancel_all, at stop) and the destructor waits for them. The
// daemon destroys ControlJobs before its workers, whose eventfds jobs write.
//
// Thread safety: submit/release from any worker thread; counters are atomic.

#include <tbb/global_control.h>
#include <tbb/task_arena.h>
#include <tbb/task_group.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "core/counter_table.h"

namespace droce::droced {

/// A snapshot of ControlJobs' counters (`droce counters`, prefixed control_jobs_).
struct ControlJobCounters {
  uint64_t submitted = 0;
  uint64_t completed = 0;
  uint64_t running = 0;
  uint64_t failed = 0;
  uint64_t released = 0;
};

/// ControlJobCounters described once (core/counter_table.h).
inline constexpr core::Counter<ControlJobCounters> kControlJobCounters[] = {
    {"submitted", &ControlJobCounters::submitted, "control jobs started (registrations populated off the worker)"},
    {"completed", &ControlJobCounters::completed, "control jobs ended"},
    {"running", &ControlJobCounters::running, "control jobs under way now"},
    {"failed", &ControlJobCounters::failed,
     "control jobs that ended with an error (a registration left to fault in on first touch)"},
    {"released", &ControlJobCounters::released, "large mappings unmapped off the worker (dereg, a client's exit)"},
};
static_assert(core::covers(kControlJobCounters));

class ControlJobs {
 public:
  /// Registrations at least this large are populated and unmapped here.
  static constexpr uint64_t kInlineBytes = uint64_t{16} << 20;

  struct Job {
    std::atomic<bool> done{false};
    std::atomic<bool> cancelled{false};
    int rc = 0;  ///< what the function returned; read after done
  };

  struct Counters {
    std::atomic<uint64_t> submitted{0};
    std::atomic<uint64_t> completed{0};
    std::atomic<uint64_t> failed{0};  ///< ended with rc != 0
    std::atomic<uint64_t> released{0};  ///< objects destroyed here
  };

  /// An arena of `threads` (at least 1) threads of TBB's pool.
  explicit ControlJobs(int threads = 1);
  ~ControlJobs();
  ControlJobs(const ControlJobs&) = delete;
  ControlJobs& operator=(const ControlJobs&) = delete;

  /// Runs fn(job) on the arena; then job->rc = its result, job->done, and an
  /// eventfd write to wake_fd (when >= 0).
  std::shared_ptr<Job> submit(std::function<int(const Job&)> fn, int wake_fd);

  /// Destroys `object` on the arena (its destructor's munmap off the worker).
  template <class T>
  void release(std::unique_ptr<T> object) {
    auto held = std::make_shared<std::unique_ptr<T>>(std::move(object));
    run([this, held] {
      held->reset();
      counters_.released.fetch_add(1, std::memory_order_relaxed);
    });
  }

  /// Sets cancelled on every job not yet done (droced stops).
  void cancel_all();
  /// Waits until every job and release submitted so far has ended.
  void wait();

  const Counters& counters() const { return counters_; }
  ControlJobCounters snapshot() const {
    return {counters_.submitted.load(std::memory_order_relaxed), counters_.completed.load(std::memory_order_relaxed),
            running(), counters_.failed.load(std::memory_order_relaxed),
            counters_.released.load(std::memory_order_relaxed)};
  }
  /// Jobs submitted and not yet done.
  uint64_t running() const {
    return counters_.submitted.load(std::memory_order_relaxed) - counters_.completed.load(std::memory_order_relaxed);
  }

 private:
  void run(std::function<void()> fn);

  // TBB sizes its pool from the CPUs the process may use, and EAL pins droced to its lcores:
  // with one lcore that pool has no worker thread, and a task enqueued from a worker never ran.
  // The limit makes room for the arena's threads beside the calling thread.
  tbb::global_control pool_limit_;
  tbb::task_arena arena_;
  tbb::task_group group_;
  Counters counters_;
  std::mutex jobs_mutex_;
  std::vector<std::weak_ptr<Job>> jobs_;  ///< for cancel_all
};

}  // namespace droce::droced
