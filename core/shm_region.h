#pragma once
// A memfd-backed shared-memory region: the memory under the rings, doorbells
// and control blocks that the provider (an application) and droced share.
//
// Why sealed memfds: the two processes do not trust each other. A region one
// side has mapped must not change size under it, or touching a page past a
// shrunken end raises SIGBUS in the process that trusted it. `create` seals
// the file against shrinking and growing and then seals the seals
// (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), so no holder of the descriptor,
// not even the creator, can truncate it later. `map_peer`, for a descriptor
// received from the other side (core/unix_socket), refuses one that lacks
// those seals or is smaller than needed: what it checks then stays true.
//
// Optional guard pages (PROT_NONE, one before and one after the mapping) turn
// an access just outside the region into SIGSEGV instead of silent damage to
// whatever the allocator put next to it.
//
// Errors: every function returns 0 or -errno and leaves `*out` as it found it
// on failure. Threading: none inside; a region is an owned value. Control path
// only (syscalls).

#include <fcntl.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/unix_socket.h"

namespace droce::core {

/// How a region is mapped.
struct ShmMapOptions {
  /// Map at exactly this page-aligned address (MAP_FIXED_NOREPLACE: fails with
  /// -EEXIST rather than replacing anything already there). nullptr: the
  /// kernel picks.
  void* fixed_address = nullptr;
  /// One PROT_NONE page before and one after the mapping. With
  /// fixed_address, the guards sit at fixed_address - page and after the end,
  /// and those addresses must be free too.
  bool guard_pages = false;
  /// Fault every page in now (MAP_POPULATE), so the data path takes no page
  /// faults later.
  bool populate = false;
  /// Leave the mapping out of fork()ed children (MADV_DONTFORK), as rdma-core
  /// does for queues: a child must not become a second producer on the
  /// parent's rings. The child sees no mapping at all there.
  bool dont_fork = false;
};

class ShmRegion {
 public:
  /// Seals a region handed to a peer must carry (F_GET_SEALS): it can neither
  /// shrink (SIGBUS in the peer) nor grow, and no seal can be added or
  /// removed afterwards. Extra seals are allowed (F_SEAL_EXEC from
  /// MFD_NOEXEC_SEAL); F_SEAL_WRITE / F_SEAL_FUTURE_WRITE make the writable
  /// mapping fail.
  static constexpr int kRequiredSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

  ShmRegion() = default;
  ~ShmRegion() { reset(); }
  ShmRegion(ShmRegion&& o) noexcept;
  ShmRegion& operator=(ShmRegion&& o) noexcept;
  ShmRegion(const ShmRegion&) = delete;
  ShmRegion& operator=(const ShmRegion&) = delete;

  /// Creates a memfd named `name` (seen in /proc/<pid>/maps as memfd:<name>)
  /// of `size` bytes rounded up to the page size, zero-filled, close-on-exec,
  /// not executable where the kernel supports MFD_NOEXEC_SEAL, sealed with
  /// kRequiredSeals, and maps it read-write and shared. The region keeps the
  /// descriptor (fd()) to pass to a peer.
  /// Errors: -EINVAL (size 0 or too large, fixed_address not page-aligned),
  /// -EEXIST (fixed_address in use), or what memfd_create, ftruncate, fcntl
  /// and mmap return.
  static int create(const char* name, size_t size, const ShmMapOptions& options, ShmRegion* out);

  /// Maps the first `size` bytes (rounded up to the page size) of `fd`, a
  /// descriptor received from a peer, after checking it with fstat and
  /// F_GET_SEALS. `fd` is borrowed: the mapping outlives it, and the region's
  /// fd() is -1.
  /// Errors: -EBADF (not an open descriptor), -ENODEV (not a regular file that
  /// supports sealing, i.e. not a memfd), -EPERM (kRequiredSeals missing, or
  /// the file is write-sealed), -EINVAL (size 0, or the file is smaller than
  /// `size`), -EEXIST (fixed_address in use), or what mmap returns (-EACCES
  /// for a read-only descriptor).
  static int map_peer(int fd, size_t size, const ShmMapOptions& options, ShmRegion* out);

  /// The mapping: page-aligned, size() a page multiple (the size asked for,
  /// rounded up).
  std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<std::byte> bytes() const { return {data_, size_}; }
  /// The memfd, for a created region; -1 for a peer's.
  int fd() const { return fd_.get(); }
  bool mapped() const { return data_ != nullptr; }

  /// Unmaps (guard pages included) and closes the descriptor, if any.
  void reset();

 private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  void* reservation_ = nullptr;  // start of everything mapped (the front guard)
  size_t reservation_size_ = 0;
  Fd fd_;
};

/// The system page size.
size_t page_size();

/// The checks map_peer makes of a peer's descriptor, for callers that map it
/// themselves (droced maps registered memory in segments): a memfd carrying
/// ShmRegion::kRequiredSeals, not write-sealed, at least `min_size` bytes.
/// 0, or -EBADF, -ENODEV, -EPERM, -EINVAL as map_peer documents.
int check_peer_memfd(int fd, uint64_t min_size);

/// For registered memory that is already shared: whether `fd` is a System V
/// shared memory segment (the file behind a shmat() mapping, which a client
/// opens through /proc/self/map_files) of at least `min_size` bytes. A
/// segment's size is fixed at shmget(), and only a process with
/// CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE can get a descriptor to truncate
/// it by, so mapping it cannot raise SIGBUS in droced the way an unsealed
/// file could. Recognized by the kernel's internal shm mount (its device,
/// learned from a segment of droced's own) and the name the kernel gives
/// segments there ("/SYSV<key> (deleted)"); memfds share the mount but are
/// named "/memfd:...", and a user's tmpfs has another device.
/// 0, -ENODEV (not a SysV segment), -EINVAL (smaller than min_size), or -errno.
int check_peer_sysv_shm(int fd, uint64_t min_size);

/// check_peer_memfd, or else check_peer_sysv_shm: what droced maps of a
/// client's registered memory. A SysV segment's -ENODEV becomes the memfd
/// check's own error.
int check_peer_memory(int fd, uint64_t min_size);

}  // namespace droce::core
