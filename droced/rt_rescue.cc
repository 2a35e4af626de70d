#include "droced/rt_rescue.h"

#include <sched.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "core/clock.h"
#include "core/log.h"

namespace droce::droced {

int RtRescue::start(pthread_t worker, int worker_priority, int priority, uint64_t starved_ns) {
  if (running() || starved_ns == 0) return -EINVAL;
  timer_ = core::Fd(::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC));
  if (!timer_.valid()) return -errno;
  worker_ = worker;
  worker_priority_ = worker_priority;
  priority_ = priority;
  starved_ns_ = starved_ns;
  stopping_.store(false, std::memory_order_relaxed);
  // The thread takes its policy first: at the normal policy it would be starved as the worker is.
  const int rc = thread_.start([this] { return setup(); }, [this] { loop(); });
  if (rc != 0) timer_ = core::Fd();
  return rc;
}

int RtRescue::setup() {
  pthread_setname_np(pthread_self(), "droced-rescue");
  sched_param p{};
  p.sched_priority = priority_;
  return -pthread_setschedparam(pthread_self(), SCHED_FIFO, &p);
}

void RtRescue::loop() {
  for (;;) {
    uint64_t expirations;
    const ssize_t n = ::read(timer_.get(), &expirations, sizeof expirations);
    if (stopping_.load(std::memory_order_acquire)) return;
    if (n != sizeof expirations) continue;  // EINTR
    check(core::monotonic_ns());
  }
}

void RtRescue::arm(uint64_t at_ns) {
  itimerspec its{};
  its.it_value.tv_sec = static_cast<time_t>(at_ns / 1'000'000'000u);
  its.it_value.tv_nsec = static_cast<long>(at_ns % 1'000'000'000u);
  if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0) its.it_value.tv_nsec = 1;  // 0 disarms
  ::timerfd_settime(timer_.get(), TFD_TIMER_ABSTIME, &its, nullptr);
}

void RtRescue::demoted(uint64_t now_ns) {
  if (!timer_.valid()) return;
  // The demotion is a loop: it counts as the worker's last sign of life.
  loop_ns_.store(now_ns, std::memory_order_relaxed);
  demoted_.store(true, std::memory_order_release);
  arm(now_ns + starved_ns_);
}

void RtRescue::check(uint64_t now_ns) {
  if (!demoted_.load(std::memory_order_acquire)) return;  // it took SCHED_RR back itself
  const uint64_t last = loop_ns_.load(std::memory_order_relaxed);
  if (now_ns < last + starved_ns_) {
    arm(last + starved_ns_);  // it ran meanwhile, at the normal policy: look again later
    return;
  }
  // Starved: SCHED_RR again (the worker's budget starts again when it reads take_rescued).
  sched_param p{};
  p.sched_priority = worker_priority_;
  if (const int rc = pthread_setschedparam(worker_, SCHED_RR, &p); rc != 0) {
    // Not looked at again: the worker stays at the normal policy until it next blocks.
    DROCE_LOG(WARNING, app, "rescue: a worker %.1f ms without running could not be given SCHED_RR back (%s)",
              double(now_ns - last) / 1e6, std::strerror(rc));
    demoted_.store(false, std::memory_order_relaxed);
    return;
  }
  demoted_.store(false, std::memory_order_relaxed);
  rescued_.store(true, std::memory_order_release);
  rescues_.fetch_add(1, std::memory_order_relaxed);
  const uint64_t starved = now_ns - last;
  if (starved > longest_ns_.load(std::memory_order_relaxed)) longest_ns_.store(starved, std::memory_order_relaxed);
}

void RtRescue::stop() {
  if (!running()) return;
  stopping_.store(true, std::memory_order_release);
  arm(core::monotonic_ns());
  thread_.join();
  timer_ = core::Fd();
}

}  // namespace droce::droced
