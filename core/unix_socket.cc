#include "core/unix_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace droce::core {

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

namespace {

int make_address(const std::string& path, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr->sun_path) return -ENAMETOOLONG;
  std::memcpy(addr->sun_path, path.data(), path.size());
  return 0;
}

}  // namespace

int seqpacket_listen(const std::string& path, Fd* out, int backlog) {
  sockaddr_un addr, tmp_addr;
  if (int rc = make_address(path, &addr); rc != 0) return rc;
  // Bound and listening under a temporary name, then linked into place: whoever sees the path can
  // connect (no ECONNREFUSED in the moment between bind and listen, which a client polling for
  // the file met under load), and link() fails on a taken path as bind() does, so two daemons
  // still cannot both have it.
  const std::string tmp = path + "." + std::to_string(::getpid()) + ".new";
  if (make_address(tmp, &tmp_addr) != 0) return -ENAMETOOLONG;
  Fd s(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!s.valid()) return -errno;
  ::unlink(tmp.c_str());
  if (::bind(s.get(), reinterpret_cast<sockaddr*>(&tmp_addr), sizeof tmp_addr) != 0) return -errno;
  int rc = ::listen(s.get(), backlog) == 0 ? 0 : -errno;
  if (rc == 0 && ::link(tmp.c_str(), path.c_str()) != 0) {
    rc = errno == EEXIST ? -EADDRINUSE : -errno;
    // A stale socket file from a daemon that died: replace it, unless live.
    Fd probe;
    struct stat st;
    if (rc == -EADDRINUSE && seqpacket_connect(path, &probe) != 0 && ::lstat(path.c_str(), &st) == 0 &&
        S_ISSOCK(st.st_mode)) {
      ::unlink(path.c_str());
      rc = ::link(tmp.c_str(), path.c_str()) == 0 ? 0 : (errno == EEXIST ? -EADDRINUSE : -errno);
    }
  }
  ::unlink(tmp.c_str());
  if (rc != 0) return rc;
  *out = std::move(s);
  return 0;
}

int seqpacket_connect(const std::string& path, Fd* out) {
  sockaddr_un addr;
  if (int rc = make_address(path, &addr); rc != 0) return rc;
  Fd s(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!s.valid()) return -errno;
  if (::connect(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return -errno;
  *out = std::move(s);
  return 0;
}

int seqpacket_pair(Fd* a, Fd* b) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return -errno;
  a->reset(sv[0]);
  b->reset(sv[1]);
  return 0;
}

int seqpacket_accept(int listen_fd, Fd* out) {
  int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return -errno;
  out->reset(fd);
  return 0;
}

int send_message(int fd, std::span<const uint8_t> bytes, std::span<const int> fds) {
  if (fds.size() > kMaxFdsPerMessage) return -EINVAL;
  iovec iov{const_cast<uint8_t*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)] = {};
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  for (;;) {
    const ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n >= 0) return static_cast<size_t>(n) == bytes.size() ? 0 : -EMSGSIZE;
    if (errno != EINTR) return -errno;
  }
}

ssize_t receive_message(int fd, std::vector<uint8_t>* buf, size_t max_bytes, std::vector<Fd>* fds) {
  buf->resize(max_bytes);
  fds->clear();
  iovec iov{buf->data(), max_bytes};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    buf->clear();
    return -errno;
  }
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int f;
      std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof f);
      fds->emplace_back(f);  // owned now: closed if we refuse the message
    }
  }
  if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
    fds->clear();
    buf->clear();
    return -EMSGSIZE;
  }
  buf->resize(static_cast<size_t>(n));
  return n;
}

int peer_credentials(int fd, PeerCredentials* out) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return -errno;
  out->pid = cred.pid;
  out->uid = cred.uid;
  out->gid = cred.gid;
  return 0;
}

}  // namespace droce::core
