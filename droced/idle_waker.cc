#include "droced/idle_waker.h"

#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace droce::droced {

int IdleWaker::start(int cpu, Fn fn, void* ctx) {
  if (running() || cpu < 0 || cpu >= CPU_SETSIZE || fn == nullptr) return -EINVAL;
  wake_ = core::Fd(::eventfd(0, EFD_CLOEXEC));
  if (!wake_.valid()) return -errno;
  fn_ = fn;
  ctx_ = ctx;
  cpu_ = cpu;
  stopping_.store(false, std::memory_order_relaxed);
  // The thread pins itself and takes its policy first: a thread that could not would run
  // the callback whenever any CPU had room, which is no sign of this one going idle.
  const int rc = thread_.start([this] { return setup(); }, [this] { loop(); });
  if (rc != 0) wake_ = core::Fd();
  return rc;
}

int IdleWaker::setup() {
  pthread_setname_np(pthread_self(), "droced-idle");
  tid_.store(pid_t(::syscall(SYS_gettid)), std::memory_order_release);
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu_, &set);
  int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  if (rc == 0) {
    sched_param p{};
    rc = pthread_setschedparam(pthread_self(), SCHED_IDLE, &p);
  }
  return -rc;
}

void IdleWaker::loop() {
  for (;;) {
    uint64_t v;
    const ssize_t n = ::read(wake_.get(), &v, sizeof v);
    if (stopping_.load(std::memory_order_acquire)) return;
    if (n != sizeof v) continue;  // EINTR
    fn_(ctx_);
    runs_.fetch_add(1, std::memory_order_relaxed);
  }
}

void IdleWaker::arm() {
  if (!wake_.valid()) return;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_.get(), &one, sizeof one);
}

void IdleWaker::stop() {
  if (!running()) return;
  stopping_.store(true, std::memory_order_release);
  arm();
  thread_.join();
  wake_ = core::Fd();
}

}  // namespace droce::droced
