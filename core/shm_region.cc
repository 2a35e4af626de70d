#include "core/shm_region.h"

#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <utility>

namespace droce::core {

namespace {

// Newer than Debian 12's headers (Linux 6.3): a memfd that can never be made
// executable. Without it a kernel with vm.memfd_noexec=2 refuses memfd_create.
constexpr unsigned kMfdNoexecSeal = 0x0008U;

struct Mapping {
  std::byte* data = nullptr;
  size_t size = 0;
  void* reservation = nullptr;
  size_t reservation_size = 0;
};

// Maps `len` (a page multiple) bytes of `fd`, as `options` say.
int map_fd(int fd, size_t len, const ShmMapOptions& options, Mapping* out) {
  const size_t page = page_size();
  auto* want = static_cast<std::byte*>(options.fixed_address);
  if (want != nullptr && reinterpret_cast<uintptr_t>(want) % page != 0) return -EINVAL;
  const int prot = PROT_READ | PROT_WRITE;
  const int populate = options.populate ? MAP_POPULATE : 0;

  if (!options.guard_pages) {
    const int flags = MAP_SHARED | populate | (want != nullptr ? MAP_FIXED_NOREPLACE : 0);
    void* p = ::mmap(want, len, prot, flags, fd, 0);
    if (p == MAP_FAILED) return -errno;
    // Kernels before 4.17 take an unknown flag as a mere hint.
    if (want != nullptr && p != want) {
      ::munmap(p, len);
      return -EEXIST;
    }
    *out = Mapping{static_cast<std::byte*>(p), len, p, len};
    return 0;
  }

  // Reserve guard + region + guard as inaccessible anonymous memory, then map
  // the file over the middle: the guards are whatever is left PROT_NONE.
  if (want != nullptr && reinterpret_cast<uintptr_t>(want) < page) return -EINVAL;
  const size_t total = len + 2 * page;
  void* hint = want != nullptr ? static_cast<void*>(want - page) : nullptr;
  const int rflags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | (want != nullptr ? MAP_FIXED_NOREPLACE : 0);
  void* r = ::mmap(hint, total, PROT_NONE, rflags, -1, 0);
  if (r == MAP_FAILED) return -errno;
  if (want != nullptr && r != hint) {
    ::munmap(r, total);
    return -EEXIST;
  }
  auto* middle = static_cast<std::byte*>(r) + page;
  void* p = ::mmap(middle, len, prot, MAP_SHARED | MAP_FIXED | populate, fd, 0);
  if (p == MAP_FAILED) {
    const int e = errno;
    ::munmap(r, total);
    return -e;
  }
  *out = Mapping{middle, len, r, total};
  return 0;
}

// Maps as map_fd does, then applies what madvise() sets.
int map_and_advise(int fd, size_t len, const ShmMapOptions& options, Mapping* out) {
  Mapping m;
  if (int rc = map_fd(fd, len, options, &m); rc != 0) return rc;
  // The guard pages go too, so the child's address space has no trace of it.
  if (options.dont_fork && ::madvise(m.reservation, m.reservation_size, MADV_DONTFORK) != 0) {
    const int e = errno;
    ::munmap(m.reservation, m.reservation_size);
    return -e;
  }
  *out = m;
  return 0;
}

// `size` rounded up to whole pages; 0 if that (plus two guard pages)
// would not fit a size_t.
size_t page_round(size_t size) {
  const size_t page = page_size();
  if (size == 0 || size > SIZE_MAX - 3 * page) return 0;
  return (size + page - 1) / page * page;
}

}  // namespace

size_t page_size() {
  static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

ShmRegion::ShmRegion(ShmRegion&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      reservation_(std::exchange(o.reservation_, nullptr)),
      reservation_size_(std::exchange(o.reservation_size_, 0)),
      fd_(std::move(o.fd_)) {}

ShmRegion& ShmRegion::operator=(ShmRegion&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    reservation_ = std::exchange(o.reservation_, nullptr);
    reservation_size_ = std::exchange(o.reservation_size_, 0);
    fd_ = std::move(o.fd_);
  }
  return *this;
}

void ShmRegion::reset() {
  if (reservation_ != nullptr) ::munmap(reservation_, reservation_size_);
  data_ = nullptr;
  size_ = 0;
  reservation_ = nullptr;
  reservation_size_ = 0;
  fd_.reset();
}

int ShmRegion::create(const char* name, size_t size, const ShmMapOptions& options, ShmRegion* out) {
  const size_t len = page_round(size);
  if (len == 0) return -EINVAL;
  int raw = ::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING | kMfdNoexecSeal);
  if (raw < 0 && errno == EINVAL) raw = ::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (raw < 0) return -errno;
  Fd fd(raw);
  if (::ftruncate(fd.get(), static_cast<off_t>(len)) != 0) return -errno;
  // Sealed before anyone else can hold the descriptor: from here on its size
  // is fixed for every process that maps it, the creator included.
  if (::fcntl(fd.get(), F_ADD_SEALS, kRequiredSeals) != 0) return -errno;
  Mapping m;
  if (int rc = map_and_advise(fd.get(), len, options, &m); rc != 0) return rc;
  out->reset();
  out->data_ = m.data;
  out->size_ = m.size;
  out->reservation_ = m.reservation;
  out->reservation_size_ = m.reservation_size;
  out->fd_ = std::move(fd);
  return 0;
}

int check_peer_memfd(int fd, uint64_t min_size) {
  if (fd < 0) return -EBADF;
  struct stat st;
  if (::fstat(fd, &st) != 0) return -errno;
  if (!S_ISREG(st.st_mode)) return -ENODEV;
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0) return errno == EINVAL ? -ENODEV : -errno;
  // F_SEAL_SEAL among the required seals means what is checked here cannot
  // change once checked: the peer can no longer add or drop a seal.
  if ((seals & ShmRegion::kRequiredSeals) != ShmRegion::kRequiredSeals) return -EPERM;
  if ((seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)) != 0) return -EPERM;
  if (st.st_size < 0 || static_cast<uint64_t>(st.st_size) < min_size) return -EINVAL;
  return 0;
}

namespace {

// The device of the kernel's internal shm mount, found from a SysV segment
// of our own (its line in /proc/self/maps); 0 when SysV IPC is unavailable.
dev_t sysv_shm_dev() {
  static const dev_t dev = [] {
    const int id = ::shmget(IPC_PRIVATE, page_size(), IPC_CREAT | 0600);
    if (id < 0) return dev_t{0};
    void* at = ::shmat(id, nullptr, SHM_RDONLY);
    ::shmctl(id, IPC_RMID, nullptr);
    if (at == reinterpret_cast<void*>(-1)) return dev_t{0};
    dev_t found = 0;
    char path[64];
    std::snprintf(path, sizeof path, "/proc/self/map_files/%lx-%lx", reinterpret_cast<unsigned long>(at),
                  reinterpret_cast<unsigned long>(at) + page_size());
    struct stat st;
    // The mapping's own file, where map_files may be read (stat follows the
    // link only with CAP_SYS_ADMIN); else the maps line's major:minor.
    if (::stat(path, &st) == 0) {
      found = st.st_dev;
    } else if (FILE* maps = std::fopen("/proc/self/maps", "r")) {
      unsigned long lo = 0, hi = 0, off = 0, ino = 0;
      unsigned maj = 0, min = 0;
      char perms[8];
      char line[512];
      while (std::fgets(line, sizeof line, maps) != nullptr) {
        if (std::sscanf(line, "%lx-%lx %7s %lx %x:%x %lu", &lo, &hi, perms, &off, &maj, &min, &ino) == 7 &&
            lo == reinterpret_cast<unsigned long>(at)) {
          found = makedev(maj, min);
          break;
        }
      }
      std::fclose(maps);
    }
    ::shmdt(at);
    return found;
  }();
  return dev;
}

}  // namespace

int check_peer_sysv_shm(int fd, uint64_t min_size) {
  if (fd < 0) return -EBADF;
  struct stat st;
  if (::fstat(fd, &st) != 0) return -errno;
  if (!S_ISREG(st.st_mode)) return -ENODEV;
  const dev_t shm_dev = sysv_shm_dev();
  if (shm_dev == 0 || st.st_dev != shm_dev) return -ENODEV;
  char link[64];
  char name[256];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = ::readlink(link, name, sizeof name - 1);
  if (n < 0) return -errno;
  name[n] = '\0';
  if (std::strncmp(name, "/SYSV", 5) != 0) return -ENODEV;
  if (st.st_size < 0 || static_cast<uint64_t>(st.st_size) < min_size) return -EINVAL;
  return 0;
}

int check_peer_memory(int fd, uint64_t min_size) {
  const int rc = check_peer_memfd(fd, min_size);
  if (rc != -EPERM && rc != -ENODEV) return rc;
  const int sysv = check_peer_sysv_shm(fd, min_size);
  return sysv == -ENODEV ? rc : sysv;
}

int ShmRegion::map_peer(int fd, size_t size, const ShmMapOptions& options, ShmRegion* out) {
  if (int rc = check_peer_memfd(fd, size); rc != 0) return rc;
  const size_t len = page_round(size);
  if (len == 0) return -EINVAL;
  // The last page may reach past the end of the file when `size` is not a
  // page multiple; it still starts inside the file, so it cannot SIGBUS.
  Mapping m;
  if (int rc = map_and_advise(fd, len, options, &m); rc != 0) return rc;
  out->reset();
  out->data_ = m.data;
  out->size_ = m.size;
  out->reservation_ = m.reservation;
  out->reservation_size_ = m.reservation_size;
  return 0;
}

}  // namespace droce::core
