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
// Costs and limits: a system call per contiguous piece on the data path of ODP
// regions only, and a page fault in the client (a major one, reading from swap
// or a file, stalls the worker as long). A write reaches even a page the
// client mapped read-only (FOLL_FORCE; a private mapping gets its own copy):
// the region's access flags, not the page's protection, decide what a peer may
// write, as with pinned regions.
//
// Threading: the worker that owns the session (the engine's lcore).

#include <cstddef>
#include <cstdint>

#include "core/unix_socket.h"
#include "rocev2/mr.h"

namespace droce::droced {

class ProcessMemory final : public rocev2::OdpMemory {
 public:
  /// Takes `fd` if it is a /proc/<pid>/mem (or a task's) opened for reading
  /// and writing: 0, or -EINVAL (another file, procfs's others included, or
  /// the wrong mode) with fd closed.
  static int adopt(core::Fd fd, ProcessMemory* out);

  bool read(uint64_t addr, void* dst, size_t n) override;
  bool write(uint64_t addr, const void* src, size_t n) override;

  bool valid() const { return fd_.valid(); }

 private:
  core::Fd fd_;
};

}  // namespace droce::droced
