#pragma once
// SetupThread: a helper thread that first sets itself up (its CPU, its scheduling policy) and
// says whether it could before start() returns; one that could not is joined and never runs
// its body. IdleWaker (SCHED_IDLE, pinned) and RtRescue (SCHED_FIFO) are such threads: run at
// any other policy they would do the wrong thing, so a refused setup must stop them at once.

#include <atomic>
#include <cerrno>
#include <climits>
#include <thread>
#include <utility>

namespace droce::droced {

class SetupThread {
 public:
  SetupThread() = default;
  SetupThread(const SetupThread&) = delete;
  SetupThread& operator=(const SetupThread&) = delete;
  ~SetupThread() { join(); }

  /// Runs setup() on a new thread (0, or -errno) and then, if it returned 0, body(). Returns
  /// setup's result once it is known; on an error the thread has ended and been joined.
  template <class Setup, class Body>
  int start(Setup setup, Body body) {
    if (thread_.joinable()) return -EBUSY;
    constexpr int kPending = INT_MIN;
    std::atomic<int> started{kPending};
    thread_ = std::thread([&started, setup = std::move(setup), body = std::move(body)]() mutable {
      const int rc = setup();
      started.store(rc, std::memory_order_release);  // `started` is gone once start() returns
      if (rc == 0) body();
    });
    int rc;
    while ((rc = started.load(std::memory_order_acquire)) == kPending) std::this_thread::yield();
    if (rc != 0) thread_.join();
    return rc;
  }
  bool running() const { return thread_.joinable(); }
  /// Waits for the body to return (the owner has told it to first).
  void join() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::thread thread_;
};

}  // namespace droce::droced
