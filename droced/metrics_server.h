#pragma once
// The HTTP side of `droced --metrics ADDR:PORT`: answers `GET /metrics` (and HEAD) with the
// OpenMetrics text a callback renders (droced/metrics.h), over HTTP/1.1, on a thread of its own
// so that a scrape costs the workers only the moment their state locks are held
// (Daemon::metrics_snapshot), never a socket.
//
// Small on purpose: one connection at a time (others wait in the listen backlog), one request
// per connection (`Connection: close`), a request head of at most Limits::max_request bytes,
// and a connection that has not sent its whole request within Limits::deadline_ms is closed
// without an answer. Bad requests are answered, never fatal: 400 (malformed, too large,
// not HTTP/1.x), 404 (another path), 405 (another method).
//
// Threading: start() starts the thread; everything else it does runs there, including the
// render callback. The destructor stops and joins it (at most one poll() away).
// Errors: start() returns 0 or -errno (EINVAL: not an address; EADDRINUSE...); the thread
// reports nothing: a connection that fails is closed and the next one served.

#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "core/unix_socket.h"

namespace droce::droced {

/// Where to listen: an IPv4 or IPv6 address and a TCP port.
struct ListenAddress {
  sockaddr_storage addr{};
  socklen_t len = 0;
};

/// "PORT" (on 127.0.0.1: loopback unless the operator names another address),
/// "IPV4:PORT" or "[IPV6]:PORT"; PORT 0 to 65535 (0: any free one, see MetricsServer::address).
/// Numeric addresses only. 0, or -EINVAL with *out unchanged.
int parse_listen_address(std::string_view text, ListenAddress* out);

/// "127.0.0.1:9464", "[::1]:9464".
std::string format_listen_address(const ListenAddress& a);

/// Whether the address is the host's own loopback (127.0.0.0/8, ::1), which other hosts
/// cannot reach.
bool is_loopback(const ListenAddress& a);

/// The whole response (status line, headers, body) to one request whose head (request line
/// and headers, up to the empty line) is `head`; `render` is called only for a request it
/// answers with 200. I/O-free, for the tests.
std::string http_response(std::string_view head, const std::function<std::string()>& render);

/// What one connection may take of the server.
struct HttpLimits {
  size_t max_request = 8192;  ///< bytes of request head; past it: 400
  int deadline_ms = 5000;     ///< from accept to the whole request read and the answer sent
};

class MetricsServer {
 public:
  using Limits = HttpLimits;
  using Render = std::function<std::string()>;

  /// Listens on `at` and starts the thread. 0 or -errno.
  static int start(const ListenAddress& at, Render render, std::unique_ptr<MetricsServer>* out,
                   Limits limits = Limits{});
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  /// The address it listens on (the port the kernel chose when asked for 0).
  const ListenAddress& address() const { return bound_; }
  /// Requests answered so far, whatever the status.
  uint64_t answered() const { return answered_.load(std::memory_order_relaxed); }

 private:
  MetricsServer(core::Fd listen, core::Fd stop, ListenAddress bound, Render render, Limits limits);
  void run();
  /// One connection: read its request, answer it, close. False when asked to stop meanwhile.
  bool serve(int fd);
  /// Waits until fd is ready for `events` or the deadline (monotonic ns) passes: 1, 0 on
  /// timeout, -1 when asked to stop.
  int wait(int fd, short events, uint64_t deadline_ns) const;

  core::Fd listen_;
  core::Fd stop_;  ///< an eventfd the destructor writes
  ListenAddress bound_;
  Render render_;
  Limits limits_;
  std::atomic<uint64_t> answered_{0};
  std::thread thread_;
};

}  // namespace droce::droced
