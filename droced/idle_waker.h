#pragma once
// IdleWaker: a thread at SCHED_IDLE on one CPU that runs a callback once that CPU has
// nothing else to run, each time it is armed (docs/droced.md, "Waking up").
//
// Why: an event-mode worker that holds back a wake-up for a peer on its CPU (AckHold) does
// so for a client of its own that needs the CPU first. If that client blocks instead, the CPU
// goes idle with the wake-up still held; nothing in the kernel tells a thread that its CPU
// went idle, but a SCHED_IDLE thread runs exactly then (the scheduler picks it only when no
// normal or realtime task wants the CPU). arm() is one eventfd write; waking a SCHED_IDLE
// thread preempts nobody.

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <thread>

#include "core/unix_socket.h"
#include "droced/setup_thread.h"

namespace droce::droced {

class IdleWaker {
 public:
  using Fn = void (*)(void* ctx);
  IdleWaker() = default;
  ~IdleWaker() { stop(); }
  IdleWaker(const IdleWaker&) = delete;
  IdleWaker& operator=(const IdleWaker&) = delete;

  /// Starts the thread, pinned to `cpu`, at SCHED_IDLE; each arm() then runs fn(ctx) once
  /// there, when the CPU would otherwise idle (from that thread: fn must be thread-safe).
  /// -errno: no eventfd or thread, or the CPU or the policy refused (no thread then).
  int start(int cpu, Fn fn, void* ctx);
  /// Ends and joins the thread (a callback running finishes first).
  void stop();
  bool running() const { return thread_.running(); }
  int cpu() const { return cpu_; }
  /// The thread's kernel id once started (0 before).
  pid_t tid() const { return tid_.load(std::memory_order_acquire); }
  /// Asks for one run of the callback (runs asked for before it ran merge into one).
  void arm();
  /// Times the callback ran.
  uint64_t runs() const { return runs_.load(std::memory_order_relaxed); }

 private:
  int setup();
  void loop();

  core::Fd wake_;
  SetupThread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<pid_t> tid_{0};
  std::atomic<uint64_t> runs_{0};
  Fn fn_ = nullptr;
  void* ctx_ = nullptr;
  int cpu_ = -1;
};

}  // namespace droce::droced
