#include "droced/control_jobs.h"

#include <unistd.h>

#include <algorithm>

namespace droce::droced {

ControlJobs::ControlJobs(int threads)
    : pool_limit_(tbb::global_control::max_allowed_parallelism, size_t(std::max(threads, 1)) + 1),
      arena_(std::max(threads, 1), /*reserved_for_masters=*/0) {}

ControlJobs::~ControlJobs() {
  cancel_all();
  wait();
}

void ControlJobs::run(std::function<void()> fn) {
  arena_.execute([this, &fn] { group_.run(std::move(fn)); });
}

std::shared_ptr<ControlJobs::Job> ControlJobs::submit(std::function<int(const Job&)> fn, int wake_fd) {
  auto job = std::make_shared<Job>();
  {
    std::lock_guard lock(jobs_mutex_);
    std::erase_if(jobs_, [](const std::weak_ptr<Job>& j) { return j.expired(); });
    jobs_.push_back(job);
  }
  counters_.submitted.fetch_add(1, std::memory_order_relaxed);
  run([this, job, fn = std::move(fn), wake_fd] {
    job->rc = fn(*job);
    if (job->rc != 0) counters_.failed.fetch_add(1, std::memory_order_relaxed);
    job->done.store(true, std::memory_order_release);
    counters_.completed.fetch_add(1, std::memory_order_relaxed);
    if (wake_fd >= 0) {
      const uint64_t one = 1;
      (void)!::write(wake_fd, &one, sizeof one);
    }
  });
  return job;
}

void ControlJobs::cancel_all() {
  std::lock_guard lock(jobs_mutex_);
  for (auto& w : jobs_)
    if (auto j = w.lock()) j->cancelled.store(true, std::memory_order_relaxed);
}

void ControlJobs::wait() {
  arena_.execute([this] { group_.wait(); });
}

}  // namespace droce::droced
