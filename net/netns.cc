#include "net/netns.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/log.h"

namespace droce::net {

namespace {

constexpr const char* kThreadNetns = "/proc/thread-self/ns/net";

// 1 when `fd` and `path` are the same file, 0 when not, -errno when either cannot be read.
int same_file(int fd, const char* path) {
  struct stat a {};
  struct stat b {};
  if (fstat(fd, &a) != 0 || stat(path, &b) != 0) return -errno;
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino ? 1 : 0;
}

}  // namespace

int open_thread_netns() { return ::open(kThreadNetns, O_RDONLY | O_CLOEXEC); }

NetnsGuard::NetnsGuard(int target) {
  if (target < 0 || same_file(target, kThreadNetns) != 0) return;
  saved_ = open_thread_netns();
  if (saved_ < 0) return;
  if (setns(target, CLONE_NEWNET) != 0) {
    DROCE_LOG(WARNING, net, "cannot enter the port's network namespace: %s", strerror(errno));
    ::close(saved_);
    saved_ = -1;
  }
}

NetnsGuard::~NetnsGuard() {
  if (saved_ < 0) return;
  if (setns(saved_, CLONE_NEWNET) != 0)
    DROCE_LOG(ERR, net, "cannot return to the thread's network namespace: %s", strerror(errno));
  ::close(saved_);
}

}  // namespace droce::net
