#pragma once
// A client's address space reached through its /proc/<pid>/mem (on-demand
// paging, docs/droced.md "On-demand paging"): the engine's OdpMemory for the
// client's ODP regions.
//
// The client opens its own /proc/self/mem (the kernel checks the right to
// open it against the opener, which is the process itself) and passes the
// descriptor with reg_odp_mr. A read or write at an address is a pread or
// pwrite at that offset: the kernel faults the page in the client's address
// space (FOLL_FORCE, as a debugger's access) and copies through a bounce page,
// so nothing is mapped, pinned or kept here and droced's resident memory does
// not grow with the regions. An address the client does not map fails (EIO)
// and the access becomes the engine's access error.
//
// Page faults off the worker (ready(), as an HCA resolves its page faults off
// the wire): with the client's /proc/<pid>/pagemap too (ABI minor 15), the
// engine asks before each access whether its pages are present. Present ones
// are copied at once; for the others a fault-in thread of this session reads
// one byte of each page (the kernel brings it in: from swap, from a file, or a
// zero page for one never touched), and the engine retries on its ODP timer.
// The pages of the operation's rest that the engine offers (`ahead`, up to
// 4 MiB, as mlx5 prefetches an RDMA operation's range) follow as a second
// range, so a stream into untouched memory waits once per window, not per page.
// So a major fault stalls only this session's fault-in thread, not the worker
// and its other clients. A range the thread could not bring in (unmapped) is
// answered ready once, so that the access fails and becomes the access error.
//
// Costs and limits: a system call per contiguous piece on the data path of ODP
// regions only, and a pread of the pagemap for 64 pages at a time, its answer
// kept for a millisecond. What stays on the
// worker: a page evicted between the pagemap's answer and the copy (a race of
// microseconds) and a write fault on a present page (copy-on-write: no I/O;
// a shared file mapping's first write calls the filesystem's page_mkwrite).
// Without a pagemap (a client of ABI minor 13/14) every fault is taken on the
// worker, as before. A fault-in thread stuck in a filesystem that never
// answers (a client's own FUSE mount) stays stuck; the session's end leaves
// it (detached) to end with that read. A write reaches even a page the
// client mapped read-only (FOLL_FORCE; a private mapping gets its own copy):
// the region's access flags, not the page's protection, decide what a peer may
// write, as with pinned regions.
//
// Threading: the worker that owns the session (the engine's lcore); the
// fault-in thread shares only the queue below (a mutex, never held across a
// system call).

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/unix_socket.h"
#include "rocev2/mr.h"

namespace droce::droced {

class ProcessMemory final : public rocev2::OdpMemory {
 public:
  ProcessMemory() = default;
  ~ProcessMemory();
  ProcessMemory(const ProcessMemory&) = delete;
  ProcessMemory& operator=(const ProcessMemory&) = delete;

  /// Takes `fd` if it is a /proc/<pid>/mem (or a task's) opened for reading
  /// and writing, and `pagemap` (may be none) if it is a /proc/<pid>/pagemap
  /// opened for reading (with it ready() can say "not yet"): 0, or -EINVAL
  /// (another file, procfs's others included, or the wrong mode) with both
  /// closed and *out unchanged.
  static int adopt(core::Fd fd, ProcessMemory* out, core::Fd pagemap = {});

  rocev2::OdpReady ready(uint64_t addr, size_t n, bool write, uint64_t ahead) override;
  bool read(uint64_t addr, void* dst, size_t n) override;
  bool write(uint64_t addr, const void* src, size_t n) override;

  bool valid() const { return fd_.valid(); }
  bool has_pagemap() const { return pagemap_.valid(); }

  /// Pages brought in by the fault-in thread, and ranges it found unmapped (a gauge of work
  /// done, for tests and counters).
  struct FaultStats {
    uint64_t ranges_done = 0;
    uint64_t ranges_failed = 0;
  };
  FaultStats fault_stats() const;

 private:
  struct FaultIn;  // the thread's queue and results, shared with the (detached) thread

  core::Fd fd_;
  core::Fd pagemap_;
  std::shared_ptr<FaultIn> faults_;
  // The pagemap's answer for a window of 64 pages, kept for a millisecond: the packets of a
  // stream through the same pages cost one read of it, not one each. A page evicted within that
  // millisecond is faulted on the worker, as one evicted between the read and the copy.
  uint64_t window_first_ = 0;    ///< its first page
  uint64_t window_present_ = 0;  ///< bit i: page window_first_ + i was present
  uint64_t window_ns_ = 0;       ///< when it was read (0: never)
};

}  // namespace droce::droced
