#include "droced/process_memory.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "core/shm_region.h"

namespace droce::droced {

namespace {

// The descriptor names /proc/<pid>/<name> or /proc/<pid>/task/<tid>/<name>. It must be that file
// and no other of procfs: some procfs files check the writer's credentials when written, not the
// opener's, and droced writing one a client opened would lend the client droced's rights.
// /proc/<pid>/mem checks at open only (the mm it reaches is fixed then), so it lends nothing;
// /proc/<pid>/pagemap likewise, and droced only reads it.
bool names_proc_file(int fd, const char* name) {
  char link[64], path[4096];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = ::readlink(link, path, sizeof path - 1);
  if (n <= 0) return false;
  path[n] = '\0';
  const char* slash = std::strrchr(path, '/');
  if (slash == nullptr || std::strcmp(slash + 1, name) != 0 || slash == path) return false;
  const char* dir = slash;  // the parent's name: a pid or a tid, digits only
  while (dir > path && dir[-1] != '/') --dir;
  if (dir == slash) return false;
  for (const char* c = dir; c < slash; ++c)
    if (*c < '0' || *c > '9') return false;
  return true;
}

}  // namespace

namespace {
// A procfs regular file named /proc/<pid>/<name> (or a task's), opened with `access`.
bool is_proc_file(const core::Fd& fd, const char* name, int access) {
  struct statfs fs;
  struct stat st;
  const int mode = ::fcntl(fd.get(), F_GETFL);
  if (mode < 0 || (mode & O_ACCMODE) != access) return false;
  if (::fstatfs(fd.get(), &fs) != 0 || fs.f_type != PROC_SUPER_MAGIC) return false;
  return ::fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode) && names_proc_file(fd.get(), name);
}
}  // namespace

int ProcessMemory::adopt(core::Fd fd, ProcessMemory* out, core::Fd pagemap) {
  if (!is_proc_file(fd, "mem", O_RDWR)) return -EINVAL;
  if (pagemap.valid() && !is_proc_file(pagemap, "pagemap", O_RDONLY)) return -EINVAL;
  out->fd_ = std::move(fd);
  out->pagemap_ = std::move(pagemap);
  return 0;
}

// The kernel copies a page at a time and returns a short count when a later page is not
// mapped, EIO when the first is not: either way the access fails as a whole. `io(done, offset)`
// is one pread or pwrite of the bytes from `done` on; the offset is the address
// (/proc/<pid>/mem takes offsets above 2^63: FMODE_UNSIGNED_OFFSET).
namespace {
template <typename Io>
bool move_all(uint64_t addr, size_t n, Io io) {
  size_t done = 0;
  while (done < n) {
    const ssize_t k = io(done, static_cast<off_t>(addr + done));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    done += static_cast<size_t>(k);
  }
  return true;
}
}  // namespace

bool ProcessMemory::read(uint64_t addr, void* dst, size_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  return move_all(addr, n, [&](size_t done, off_t off) { return ::pread(fd_.get(), p + done, n - done, off); });
}

bool ProcessMemory::write(uint64_t addr, const void* src, size_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  return move_all(addr, n, [&](size_t done, off_t off) { return ::pwrite(fd_.get(), p + done, n - done, off); });
}

// ---- Page faults off the worker -----------------------------------------------------------------

namespace {

const uint64_t kPageSize = core::page_size();
constexpr uint64_t kPresent = uint64_t{1} << 63;  // pagemap: the page is in memory (proc(5))
constexpr size_t kMaxRanges = 64;                 // waiting, and results not yet asked for
constexpr uint64_t kMaxAhead = 4u << 20;          // an operation's rest brought in with a fault
constexpr uint64_t kWindowPages = 64;             // pagemap entries read at once
constexpr uint64_t kWindowNs = 1'000'000;         // how long their answer serves

}  // namespace

// The fault-in thread's work: ranges of pages, in the order the engine asked for them, then
// their results until the engine asks again. Shared with the thread (detached), which may
// outlive the session while a read of a page never ends.
struct ProcessMemory::FaultIn {
  struct Range {
    uint64_t first = 0, last = 0;  // page numbers
    bool started = false;
    bool ok = true;
    bool covers(uint64_t f, uint64_t l) const { return first <= f && l <= last; }
    bool overlaps(uint64_t f, uint64_t l) const { return first <= l && f <= last; }
  };
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Range> pending;  // waiting or being read
  std::vector<Range> results;  // done, not yet asked for again
  bool stop = false;
  core::Fd mem;
  std::atomic<size_t> outstanding{0};  // pending + results: the worker's way past the mutex
  std::atomic<uint64_t> done{0}, failed{0};

  // One byte of each page, read: the kernel faults it in the client (a present page's copy
  // costs nothing more). A write fault that may follow on the worker is a copy-on-write,
  // without I/O.
  static void run(const std::shared_ptr<FaultIn>& f) {
    std::unique_lock<std::mutex> lk(f->mu);
    for (;;) {
      auto next = f->pending.end();
      f->cv.wait(lk, [&] {
        next = std::find_if(f->pending.begin(), f->pending.end(), [](const Range& r) { return !r.started; });
        return f->stop || next != f->pending.end();
      });
      if (f->stop) return;
      next->started = true;
      const uint64_t first = next->first, last = next->last;
      lk.unlock();
      bool ok = true;
      for (uint64_t page = first; page <= last && ok; ++page) {
        uint8_t byte;
        ssize_t k;
        do k = ::pread(f->mem.get(), &byte, 1, static_cast<off_t>(page * kPageSize));
        while (k < 0 && errno == EINTR);
        ok = k == 1;
      }
      lk.lock();
      auto it = std::find_if(f->pending.begin(), f->pending.end(),
                             [&](const Range& r) { return r.started && r.first == first && r.last == last; });
      if (it != f->pending.end()) {
        Range r = *it;
        r.ok = ok;
        f->pending.erase(it);
        if (f->results.size() >= kMaxRanges) {  // never asked for again (its QP went): the oldest goes
          f->results.erase(f->results.begin());
          f->outstanding.fetch_sub(1, std::memory_order_relaxed);
        }
        f->results.push_back(r);
      }
      (ok ? f->done : f->failed).fetch_add(1, std::memory_order_relaxed);
    }
  }
};

ProcessMemory::~ProcessMemory() {
  if (faults_ == nullptr) return;
  std::lock_guard<std::mutex> g(faults_->mu);
  faults_->stop = true;
  faults_->cv.notify_all();
}

rocev2::OdpReady ProcessMemory::ready(uint64_t addr, size_t n, bool, uint64_t ahead) {
  using rocev2::OdpReady;
  if (!pagemap_.valid() || n == 0) return OdpReady::now;  // no pagemap: faults are taken where the copy is
  const uint64_t first = addr / kPageSize;
  const uint64_t last = (addr + (n - 1)) / kPageSize;
  if (faults_ != nullptr && faults_->outstanding.load(std::memory_order_relaxed) != 0) {
    std::lock_guard<std::mutex> g(faults_->mu);
    auto& res = faults_->results;
    // Brought in (or found unmapped) since the engine asked: copy now; a failure is the access's.
    if (auto it = std::find_if(res.begin(), res.end(), [&](const FaultIn::Range& r) { return r.covers(first, last); });
        it != res.end()) {
      res.erase(it);
      faults_->outstanding.fetch_sub(1, std::memory_order_relaxed);
      return OdpReady::now;
    }
    for (const FaultIn::Range& r : faults_->pending)
      if (r.overlaps(first, last)) return OdpReady::waiting;
  }
  // Present pages are copied at once (proc(5): pagemap, one 64-bit entry per page), by the
  // window's answer while it is fresh, else by a new read of the window that starts here.
  const uint64_t now_ns = core::monotonic_ns();
  auto present_in_window = [&] {
    if (first < window_first_ || last - window_first_ >= kWindowPages) return false;
    const uint64_t bits = last - first + 1;
    const uint64_t mask = (bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1) << (first - window_first_);
    return (window_present_ & mask) == mask;
  };
  if (window_ns_ != 0 && now_ns - window_ns_ < kWindowNs && present_in_window()) return OdpReady::now;
  bool present = true;
  for (uint64_t page = first; page <= last && present; page += kWindowPages) {
    uint64_t entries[kWindowPages];
    const ssize_t k = ::pread(pagemap_.get(), entries, sizeof entries, static_cast<off_t>(page * 8));
    if (k < static_cast<ssize_t>(std::min(kWindowPages, last - page + 1) * 8)) return OdpReady::now;  // the copy says
    window_first_ = page;
    window_present_ = 0;
    for (uint64_t i = 0; i < uint64_t(k) / 8; ++i) window_present_ |= uint64_t((entries[i] & kPresent) != 0) << i;
    window_ns_ = now_ns;
    const uint64_t upto = std::min(last, page + kWindowPages - 1);
    for (uint64_t p = page; p <= upto; ++p) present = present && ((window_present_ >> (p - page)) & 1) != 0;
  }
  if (present) return OdpReady::now;
  if (faults_ == nullptr) {
    faults_ = std::make_shared<FaultIn>();
    faults_->mem = core::Fd(::fcntl(fd_.get(), F_DUPFD_CLOEXEC, 0));
    if (!faults_->mem.valid()) {
      faults_.reset();
      return OdpReady::now;  // no thread to fault in: take the fault here, as without a pagemap
    }
    try {
      std::thread(FaultIn::run, faults_).detach();
    } catch (const std::system_error&) {
      faults_.reset();
      return OdpReady::now;
    }
  }
  std::lock_guard<std::mutex> g(faults_->mu);
  auto& pending = faults_->pending;
  if (pending.size() >= kMaxRanges) return OdpReady::waiting;  // asked again on the engine's timer
  pending.push_back({first, last});
  faults_->outstanding.fetch_add(1, std::memory_order_relaxed);
  // The operation's rest, after the asked pages (which come first): pages a range on its way
  // already holds are left to it.
  const uint64_t end = (addr + (n - 1) + std::min(ahead, kMaxAhead)) / kPageSize;
  uint64_t from = last + 1;
  for (const FaultIn::Range& r : pending)
    if (r.overlaps(from, from) && r.last >= from) from = r.last + 1;
  if (ahead != 0 && from <= end && pending.size() < kMaxRanges) {
    pending.push_back({from, end});
    faults_->outstanding.fetch_add(1, std::memory_order_relaxed);
  }
  faults_->cv.notify_one();
  return OdpReady::faulting;
}

ProcessMemory::FaultStats ProcessMemory::fault_stats() const {
  if (faults_ == nullptr) return {};
  return {faults_->done.load(std::memory_order_relaxed), faults_->failed.load(std::memory_order_relaxed)};
}

}  // namespace droce::droced
