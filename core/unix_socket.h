#pragma once
// Unix SOCK_SEQPACKET sockets carrying whole messages and file descriptors
// (SCM_RIGHTS): the transport of droce's control protocol between the
// provider (clients) and droced.
//
// SEQPACKET keeps message boundaries and is connection-oriented: a message is
// delivered whole or not at all, and a peer that dies is seen as end of file.
// Received descriptors are close-on-exec. A message or descriptor list that
// does not fit the receiver's buffers is an error (EMSGSIZE), never silently
// cut, and any descriptors that did arrive with it are closed.
//
// Control path only: these make syscalls. Thread-safe per socket as the
// kernel's socket calls are; one reader per socket.

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace droce::core {

/// An owned file descriptor, closed on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

/// Most descriptors one message may carry.
inline constexpr size_t kMaxFdsPerMessage = 8;

/// Listens on `path` (an existing socket file is replaced only if nobody is
/// listening on it). Returns the socket or -errno.
int seqpacket_listen(const std::string& path, Fd* out, int backlog = 64);
/// Connects to `path`. Returns 0 or -errno.
int seqpacket_connect(const std::string& path, Fd* out);
/// A connected pair (tests, forked helpers).
int seqpacket_pair(Fd* a, Fd* b);
/// Accepts one connection (the listening socket may be non-blocking).
int seqpacket_accept(int listen_fd, Fd* out);

/// Sends one message with up to kMaxFdsPerMessage descriptors (not closed).
/// Returns 0, or -errno (-EPIPE when the peer has gone).
int send_message(int fd, std::span<const uint8_t> bytes, std::span<const int> fds = {});

/// Receives one message into `buf` (resized to what arrived) and its
/// descriptors into `fds`. Returns the byte count, 0 at end of file (peer
/// gone), or -errno (-EMSGSIZE if the message or its descriptors did not fit
/// `max_bytes` / kMaxFdsPerMessage; -EAGAIN on a non-blocking socket).
ssize_t receive_message(int fd, std::vector<uint8_t>* buf, size_t max_bytes, std::vector<Fd>* fds);

/// The connected peer's process and user (SO_PEERCRED).
struct PeerCredentials {
  pid_t pid = -1;
  uid_t uid = 0;
  gid_t gid = 0;
};
int peer_credentials(int fd, PeerCredentials* out);

}  // namespace droce::core
