#pragma once
// Registered memory, shared rather than copied (docs/droced.md): before
// droced can read and write an application's buffer, the pages under it are
// turned into memfd mappings at the same address with the same contents:
// copy the pages out, map a sealed memfd over them (MAP_FIXED), copy back.
// droced maps the same memfds, so its cores see the application's memory
// and its atomics act on it.
//
// Pages converted once stay converted; a registry remembers which memfd backs
// which run of pages, so a second registration over the same pages (two
// buffers in one page, or the same buffer twice) sends the same memfd and
// both MRs see one memory. A registration may therefore span several runs
// (segments), up to abi::ctl::kMaxMrSegments.
//
// Caveats (README): a write to the pages by another thread while they are
// converted can be lost; a fork()ed child gets private copies of converted
// pages (a pthread_atfork handler, as the kernel copies pinned pages for a
// child since Linux 5.13; a raw clone() without glibc's handlers would share
// them); a file mapping
// that is registered becomes a private copy (its writes stop reaching the
// file), except a System V shared memory segment, which droced maps itself
// when the process may open /proc/self/map_files (CAP_SYS_ADMIN or
// CAP_CHECKPOINT_RESTORE; else it too becomes a private copy, with a warning
// on stderr); memory that is unmapped and mapped again while registered is
// not the registered memory any more (as with any HCA's pinned pages).
//
// Threading: callers serialize (the client Context's control lock).

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "abi/ctl_protocol.h"
#include "core/unix_socket.h"

namespace droce::client {

class SharedMemory {
 public:
  /// One run of pages an MR uses: [start, start + length) backed by `fd` at `fd_offset`.
  struct Piece {
    uintptr_t start = 0;
    abi::ctl::MrSegment segment{};
    int fd = -1;
  };

  /// Makes [addr, addr + length) shared, converting the pages not yet
  /// converted, and lists its pieces in address order. *page_start gets the
  /// first page's address. Each call takes a reference on the runs it uses
  /// (release() gives them back).
  /// Errors: -EINVAL (length 0), -EFAULT (a page not mapped or not readable),
  /// -E2BIG (more than kMaxMrSegments runs), or what memfd_create, ftruncate
  /// and mmap return. A failed call takes no reference (pages it converted
  /// before failing stay converted, unreferenced).
  int share(const void* addr, size_t length, uintptr_t* page_start, std::vector<Piece>* pieces);
  /// Gives back the references share() took for the same range.
  void release(const void* addr, size_t length);

  size_t runs() const { return runs_.size(); }

 private:
  struct Run {
    uintptr_t end = 0;
    std::shared_ptr<core::Fd> fd;
    uint64_t fd_offset = 0;
    uint32_t refs = 0;
  };
  int convert(uintptr_t start, uintptr_t end);
  /// Records [start, end) of the SysV mapping [map_start, map_end) (its
  /// segment from map_offset) as a run backed by the segment itself.
  int adopt_sysv(uintptr_t start, uintptr_t end, uintptr_t map_start, uintptr_t map_end, uint64_t map_offset);

  bool warned_private_sysv_ = false;

  std::map<uintptr_t, Run> runs_;  ///< by start; never overlapping
};

}  // namespace droce::client
