#include "droced/process_memory.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace droce::droced {

namespace {

// The descriptor names /proc/<pid>/mem or /proc/<pid>/task/<tid>/mem. It must be that file and
// no other of procfs: some procfs files check the writer's credentials when written, not the
// opener's, and droced writing one a client opened would lend the client droced's rights.
// /proc/<pid>/mem checks at open only (the mm it reaches is fixed then), so it lends nothing.
bool names_proc_mem(int fd) {
  char link[64], path[4096];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = ::readlink(link, path, sizeof path - 1);
  if (n <= 0) return false;
  path[n] = '\0';
  const char* slash = std::strrchr(path, '/');
  if (slash == nullptr || std::strcmp(slash, "/mem") != 0 || slash == path) return false;
  const char* dir = slash;  // the parent's name: a pid or a tid, digits only
  while (dir > path && dir[-1] != '/') --dir;
  if (dir == slash) return false;
  for (const char* c = dir; c < slash; ++c)
    if (*c < '0' || *c > '9') return false;
  return true;
}

}  // namespace

int ProcessMemory::adopt(core::Fd fd, ProcessMemory* out) {
  struct statfs fs;
  struct stat st;
  const int mode = ::fcntl(fd.get(), F_GETFL);
  if (mode < 0 || (mode & O_ACCMODE) != O_RDWR) return -EINVAL;
  if (::fstatfs(fd.get(), &fs) != 0 || fs.f_type != PROC_SUPER_MAGIC) return -EINVAL;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || !names_proc_mem(fd.get())) return -EINVAL;
  out->fd_ = std::move(fd);
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

}  // namespace droce::droced
