#include "droced/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/clock.h"

namespace droce::droced {

namespace {

constexpr std::string_view kOpenMetricsType = "application/openmetrics-text; version=1.0.0; charset=utf-8";

std::string response(int status, std::string_view reason, std::string_view type, const std::string& body,
                     bool with_body, std::string_view extra_headers = {}) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason) + "\r\n";
  out += "Content-Type: " + std::string(type) + "\r\n";
  out += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  out += extra_headers;
  out += "Connection: close\r\n\r\n";
  if (with_body) out += body;
  return out;
}

std::string error(int status, std::string_view reason, std::string_view extra_headers = {}) {
  return response(status, reason, "text/plain; charset=utf-8", std::string(reason) + "\n", true, extra_headers);
}

bool all_upper(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < 'A' || c > 'Z') return false;
  return true;
}

// Where the request head ends (past its empty line), or npos. A bare LF ends lines too, as
// RFC 9112 2.2 lets a server accept.
size_t head_end(std::string_view in) {
  for (size_t i = in.find('\n'); i != std::string_view::npos; i = in.find('\n', i + 1)) {
    if (i + 1 < in.size() && in[i + 1] == '\n') return i + 2;
    if (i + 2 < in.size() && in[i + 1] == '\r' && in[i + 2] == '\n') return i + 3;
  }
  return std::string_view::npos;
}

bool parse_port(std::string_view text, uint16_t* out) {
  if (text.empty() || text.size() > 5) return false;
  uint32_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + uint32_t(c - '0');
  }
  if (v > 65535) return false;
  *out = uint16_t(v);
  return true;
}

}  // namespace

int parse_listen_address(std::string_view text, ListenAddress* out) {
  ListenAddress a;
  std::string host = "127.0.0.1";
  std::string_view port = text;
  bool v6 = false;
  if (!text.empty() && text[0] == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') return -EINVAL;
    host = std::string(text.substr(1, close - 1));
    port = text.substr(close + 2);
    v6 = true;
  } else if (const size_t colon = text.rfind(':'); colon != std::string_view::npos) {
    host = std::string(text.substr(0, colon));
    port = text.substr(colon + 1);
  }
  uint16_t p = 0;
  if (!parse_port(port, &p)) return -EINVAL;
  if (v6) {
    auto* s6 = reinterpret_cast<sockaddr_in6*>(&a.addr);
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons(p);
    if (::inet_pton(AF_INET6, host.c_str(), &s6->sin6_addr) != 1) return -EINVAL;
    a.len = sizeof(sockaddr_in6);
  } else {
    auto* s4 = reinterpret_cast<sockaddr_in*>(&a.addr);
    s4->sin_family = AF_INET;
    s4->sin_port = htons(p);
    if (::inet_pton(AF_INET, host.c_str(), &s4->sin_addr) != 1) return -EINVAL;
    a.len = sizeof(sockaddr_in);
  }
  *out = a;
  return 0;
}

std::string format_listen_address(const ListenAddress& a) {
  char ip[INET6_ADDRSTRLEN] = "?";
  if (a.addr.ss_family == AF_INET6) {
    const auto* s6 = reinterpret_cast<const sockaddr_in6*>(&a.addr);
    ::inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof ip);
    return "[" + std::string(ip) + "]:" + std::to_string(ntohs(s6->sin6_port));
  }
  const auto* s4 = reinterpret_cast<const sockaddr_in*>(&a.addr);
  ::inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof ip);
  return std::string(ip) + ":" + std::to_string(ntohs(s4->sin_port));
}

bool is_loopback(const ListenAddress& a) {
  if (a.addr.ss_family == AF_INET6)
    return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(&a.addr)->sin6_addr);
  return (ntohl(reinterpret_cast<const sockaddr_in*>(&a.addr)->sin_addr.s_addr) >> 24) == 127;
}

std::string http_response(std::string_view head, const std::function<std::string()>& render) {
  std::string_view line = head.substr(0, head.find('\n'));
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  // request-line = method SP request-target SP HTTP-version (RFC 9112 3)
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
    return error(400, "Bad Request");
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (!all_upper(method) || target.empty() || target[0] != '/' || (version != "HTTP/1.1" && version != "HTTP/1.0"))
    return error(400, "Bad Request");
  // Every header line must at least be a field: name ":" value (RFC 9112 5).
  for (size_t at = head.find('\n') + 1; at < head.size();) {
    size_t eol = head.find('\n', at);
    if (eol == std::string_view::npos) eol = head.size();
    std::string_view field = head.substr(at, eol - at);
    if (!field.empty() && field.back() == '\r') field.remove_suffix(1);
    const size_t colon = field.find(':');
    if (!field.empty() && (colon == 0 || colon == std::string_view::npos || field[0] == ' ' || field[0] == '\t'))
      return error(400, "Bad Request");
    at = eol + 1;
  }
  if (target.substr(0, target.find('?')) != "/metrics") return error(404, "Not Found");
  if (method != "GET" && method != "HEAD") return error(405, "Method Not Allowed", "Allow: GET, HEAD\r\n");
  return response(200, "OK", kOpenMetricsType, render(), method == "GET");
}

int MetricsServer::start(const ListenAddress& at, Render render, std::unique_ptr<MetricsServer>* out, Limits limits) {
  core::Fd s(::socket(at.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!s.valid()) return -errno;
  // A droced started again at once finds its port in TIME_WAIT otherwise.
  const int one = 1;
  ::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(s.get(), reinterpret_cast<const sockaddr*>(&at.addr), at.len) != 0) return -errno;
  if (::listen(s.get(), 16) != 0) return -errno;
  ListenAddress bound;
  bound.len = sizeof bound.addr;
  if (::getsockname(s.get(), reinterpret_cast<sockaddr*>(&bound.addr), &bound.len) != 0) return -errno;
  core::Fd stop(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!stop.valid()) return -errno;
  out->reset(new MetricsServer(std::move(s), std::move(stop), bound, std::move(render), limits));
  return 0;
}

MetricsServer::MetricsServer(core::Fd listen, core::Fd stop, ListenAddress bound, Render render, Limits limits)
    : listen_(std::move(listen)), stop_(std::move(stop)), bound_(bound), render_(std::move(render)), limits_(limits) {
  thread_ = std::thread([this] { run(); });
}

MetricsServer::~MetricsServer() {
  const uint64_t one = 1;
  (void)!::write(stop_.get(), &one, sizeof one);
  if (thread_.joinable()) thread_.join();
}

int MetricsServer::wait(int fd, short events, uint64_t deadline_ns) const {
  for (;;) {
    const uint64_t now = core::monotonic_ns();
    if (now >= deadline_ns) return 0;
    pollfd p[2] = {{fd, events, 0}, {stop_.get(), POLLIN, 0}};
    const int ms = int((deadline_ns - now + 999'999) / 1'000'000);
    const int n = ::poll(p, 2, ms);
    if (n < 0 && errno != EINTR) return -1;
    if (n <= 0) continue;
    if (p[1].revents != 0) return -1;
    if (p[0].revents != 0) return 1;  // ready, or an error the next call reports
  }
}

void MetricsServer::run() {
  for (;;) {
    pollfd p[2] = {{listen_.get(), POLLIN, 0}, {stop_.get(), POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[1].revents != 0) return;
    core::Fd c(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!c.valid()) continue;  // gone already, or out of descriptors: the next poll tries again
    if (!serve(c.get())) return;
  }
}

bool MetricsServer::serve(int fd) {
  const uint64_t deadline = core::monotonic_ns() + uint64_t(limits_.deadline_ms) * 1'000'000;
  std::string in;
  size_t end = std::string::npos;
  char buf[2048];
  while ((end = head_end(in)) == std::string::npos && in.size() <= limits_.max_request) {
    if (const int w = wait(fd, POLLIN, deadline); w <= 0) return w == 0;  // idle past the deadline: closed
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0) return true;  // the client gave up
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return true;
    }
    in.append(buf, size_t(n));
  }
  const std::string out =
      end == std::string::npos || end > limits_.max_request ? error(400, "Bad Request") : http_response(std::string_view(in).substr(0, end), render_);
  answered_.fetch_add(1, std::memory_order_relaxed);
  for (size_t sent = 0; sent < out.size();) {
    const ssize_t n = ::send(fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += size_t(n);
    } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
      return true;
    } else if (const int w = wait(fd, POLLOUT, deadline); w <= 0) {
      return w == 0;
    }
  }
  // Closing with unread bytes (a body, the rest of a request too large) would reset the
  // connection and could lose the answer at the client: end ours, read theirs until they end
  // or the deadline.
  ::shutdown(fd, SHUT_WR);
  const uint64_t linger = std::min(deadline, core::monotonic_ns() + 200'000'000);
  for (size_t drained = 0; drained < (1u << 20);) {
    if (const int w = wait(fd, POLLIN, linger); w <= 0) return w == 0;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) break;
    if (n > 0) drained += size_t(n);
  }
  return true;
}

}  // namespace droce::droced
