#include "droced/process_memory.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>

namespace droce::droced {

int ProcessMemory::adopt(core::Fd fd, ProcessMemory* out) {
  // A procfs file opened read-write: anything else the client might send (a regular file it
  // can write anyway, a socket) would only make its own accesses fail, but is refused at once.
  struct statfs fs;
  struct stat st;
  const int mode = ::fcntl(fd.get(), F_GETFL);
  if (mode < 0 || (mode & O_ACCMODE) != O_RDWR) return -EINVAL;
  if (::fstatfs(fd.get(), &fs) != 0 || fs.f_type != PROC_SUPER_MAGIC) return -EINVAL;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return -EINVAL;
  out->fd_ = std::move(fd);
  return 0;
}

// The kernel copies a page at a time and returns a short count when a later page is not
// mapped, EIO when the first is not: either way the access fails as a whole.
bool ProcessMemory::read(uint64_t addr, void* dst, size_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  while (n > 0) {
    ++calls_;
    // The offset is the address; /proc/<pid>/mem takes offsets above 2^63 (FMODE_UNSIGNED_OFFSET).
    const ssize_t k = ::pread(fd_.get(), p, n, static_cast<off_t>(addr));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      ++faults_;
      return false;
    }
    p += k;
    addr += static_cast<uint64_t>(k);
    n -= static_cast<size_t>(k);
  }
  return true;
}

bool ProcessMemory::write(uint64_t addr, const void* src, size_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  while (n > 0) {
    ++calls_;
    const ssize_t k = ::pwrite(fd_.get(), p, n, static_cast<off_t>(addr));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      ++faults_;
      return false;
    }
    p += k;
    addr += static_cast<uint64_t>(k);
    n -= static_cast<size_t>(k);
  }
  return true;
}

}  // namespace droce::droced
