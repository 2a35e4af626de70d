// droced/metrics_server: the HTTP side of --metrics. The answer to each kind of request, decided
// without a socket (http_response); the listen address as --metrics takes it; and a real server
// on 127.0.0.1: it answers, answers a request too large with 400, closes a connection that
// sends nothing, and serves the next client after each of them.

#include "droced/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

namespace droce::droced {
namespace {

constexpr const char* kBody = "# TYPE droce_x counter\ndroce_x_total 1\n# EOF\n";

struct Rendered {
  int calls = 0;
  std::function<std::string()> fn() {
    return [this] {
      ++calls;
      return std::string(kBody);
    };
  }
};

std::string status_line(const std::string& r) { return r.substr(0, r.find("\r\n")); }
std::string body_of(const std::string& r) {
  const size_t e = r.find("\r\n\r\n");
  return e == std::string::npos ? std::string() : r.substr(e + 4);
}

TEST(MetricsHttp, GetMetricsIsOpenMetricsWithItsLength) {
  Rendered r;
  const std::string a = http_response("GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n", r.fn());
  EXPECT_EQ(status_line(a), "HTTP/1.1 200 OK");
  EXPECT_NE(a.find("\r\nContent-Type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\n"),
            std::string::npos) << a;
  EXPECT_NE(a.find("\r\nContent-Length: " + std::to_string(std::string(kBody).size()) + "\r\n"), std::string::npos);
  EXPECT_NE(a.find("\r\nConnection: close\r\n"), std::string::npos);
  EXPECT_EQ(body_of(a), kBody);
  EXPECT_EQ(r.calls, 1);
  // A query string, HTTP/1.0 and bare LF line ends are fine too.
  EXPECT_EQ(status_line(http_response("GET /metrics?name[]=x HTTP/1.0\n\n", r.fn())), "HTTP/1.1 200 OK");
  // HEAD: the same headers, no body.
  const std::string h = http_response("HEAD /metrics HTTP/1.1\r\n\r\n", r.fn());
  EXPECT_EQ(status_line(h), "HTTP/1.1 200 OK");
  EXPECT_NE(h.find("Content-Length: " + std::to_string(std::string(kBody).size())), std::string::npos);
  EXPECT_EQ(body_of(h), "");
}

TEST(MetricsHttp, OtherPathsMethodsAndMalformedRequestsAreRefusedWithoutRendering) {
  Rendered r;
  EXPECT_EQ(status_line(http_response("GET / HTTP/1.1\r\n\r\n", r.fn())), "HTTP/1.1 404 Not Found");
  EXPECT_EQ(status_line(http_response("GET /metricsx HTTP/1.1\r\n\r\n", r.fn())), "HTTP/1.1 404 Not Found");
  const std::string post = http_response("POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", r.fn());
  EXPECT_EQ(status_line(post), "HTTP/1.1 405 Method Not Allowed");
  EXPECT_NE(post.find("\r\nAllow: GET, HEAD\r\n"), std::string::npos);
  for (const char* bad : {"hello\r\n\r\n", "\r\n\r\n", "GET /metrics\r\n\r\n", "GET  /metrics HTTP/1.1\r\n\r\n",
                          "GET metrics HTTP/1.1\r\n\r\n", "GET /metrics HTTP/2.0\r\n\r\n",
                          "get /metrics HTTP/1.1\r\n\r\n", "GET /metrics HTTP/1.1 x\r\n\r\n",
                          "GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n",
                          "GET /metrics HTTP/1.1\r\n: no name\r\n\r\n",
                          "GET /metrics HTTP/1.1\r\n folded: line\r\n\r\n"}) {
    EXPECT_EQ(status_line(http_response(bad, r.fn())), "HTTP/1.1 400 Bad Request") << bad;
  }
  EXPECT_EQ(r.calls, 0);
}

TEST(MetricsHttp, ListenAddressesAreLoopbackUnlessNamed) {
  ListenAddress a;
  ASSERT_EQ(parse_listen_address("9464", &a), 0);
  EXPECT_EQ(format_listen_address(a), "127.0.0.1:9464");
  EXPECT_TRUE(is_loopback(a));
  ASSERT_EQ(parse_listen_address("127.1.2.3:1", &a), 0);
  EXPECT_TRUE(is_loopback(a));
  ASSERT_EQ(parse_listen_address("[::1]:0", &a), 0);
  EXPECT_EQ(format_listen_address(a), "[::1]:0");
  EXPECT_TRUE(is_loopback(a));
  ASSERT_EQ(parse_listen_address("0.0.0.0:9464", &a), 0);
  EXPECT_FALSE(is_loopback(a));
  ASSERT_EQ(parse_listen_address("[::]:9464", &a), 0);
  EXPECT_FALSE(is_loopback(a));
  for (const char* bad : {"", ":", "x", "65536", "-1", "1.2.3.4:", ":80", "localhost:80", "::1:80", "[::1]", "[::1]80",
                          "[1.2.3.4]:80", "1.2.3.4:80:", "1.2.3.4:+80"}) {
    ListenAddress keep = a;
    EXPECT_EQ(parse_listen_address(bad, &keep), -EINVAL) << bad;
    EXPECT_EQ(format_listen_address(keep), format_listen_address(a)) << bad;  // left as it was
  }
}

// A TCP client of the server under test.
class Client {
 public:
  explicit Client(const ListenAddress& at) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    connected_ = ::connect(fd_, reinterpret_cast<const sockaddr*>(&at.addr), at.len) == 0;
  }
  ~Client() { ::close(fd_); }
  bool connected() const { return connected_; }
  void send(const std::string& s) { ASSERT_EQ(::send(fd_, s.data(), s.size(), MSG_NOSIGNAL), ssize_t(s.size())); }
  // Everything until the server closes (or 30 s pass, which fails the test that waited).
  std::string read_all() {
    std::string out;
    char buf[4096];
    for (;;) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 30'000) != 1) {
        ADD_FAILURE() << "the server neither answered nor closed";
        return out;
      }
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return out;
      out.append(buf, size_t(n));
    }
  }

 private:
  int fd_;
  bool connected_ = false;
};

std::unique_ptr<MetricsServer> start_server(Rendered* r, MetricsServer::Limits limits = {}) {
  ListenAddress at;
  EXPECT_EQ(parse_listen_address("127.0.0.1:0", &at), 0);
  std::unique_ptr<MetricsServer> s;
  EXPECT_EQ(MetricsServer::start(at, r->fn(), &s, limits), 0);
  return s;
}

TEST(MetricsServer, AnswersAScrapeOnTheAddressItReports) {
  Rendered r;
  auto s = start_server(&r);
  ASSERT_NE(s, nullptr);
  EXPECT_NE(format_listen_address(s->address()), "127.0.0.1:0");  // the kernel's port
  for (int i = 0; i < 3; ++i) {
    Client c(s->address());
    ASSERT_TRUE(c.connected());
    c.send("GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
    const std::string a = c.read_all();
    EXPECT_EQ(status_line(a), "HTTP/1.1 200 OK");
    EXPECT_EQ(body_of(a), kBody);
  }
  EXPECT_EQ(r.calls, 3);
  EXPECT_EQ(s->answered(), 3u);
}

TEST(MetricsServer, ARequestTooLargeGets400AndTheNextIsServed) {
  Rendered r;
  MetricsServer::Limits l;
  l.max_request = 256;
  auto s = start_server(&r, l);
  ASSERT_NE(s, nullptr);
  {
    Client c(s->address());
    ASSERT_TRUE(c.connected());
    c.send("GET /metrics HTTP/1.1\r\nX-Long: " + std::string(4000, 'a') + "\r\n\r\n");
    EXPECT_EQ(status_line(c.read_all()), "HTTP/1.1 400 Bad Request");
  }
  {
    Client c(s->address());
    c.send("GET /metrics HTTP/1.1\r\n\r\n");
    EXPECT_EQ(status_line(c.read_all()), "HTTP/1.1 200 OK");
  }
  EXPECT_EQ(r.calls, 1);
}

TEST(MetricsServer, AConnectionThatSendsNothingIsClosedAndTheNextServed) {
  Rendered r;
  MetricsServer::Limits l;
  l.deadline_ms = 200;
  auto s = start_server(&r, l);
  ASSERT_NE(s, nullptr);
  Client idle(s->address());
  ASSERT_TRUE(idle.connected());
  Client half(s->address());  // waits in the backlog behind `idle`, then sends half a request
  half.send("GET /metrics HTTP/1.1\r\n");
  Client next(s->address());
  next.send("GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(idle.read_all(), "");  // closed, unanswered
  EXPECT_EQ(half.read_all(), "");
  EXPECT_EQ(status_line(next.read_all()), "HTTP/1.1 200 OK");
  EXPECT_EQ(s->answered(), 1u);
}

TEST(MetricsServer, StopsWithAConnectionOpen) {
  Rendered r;
  auto s = start_server(&r);
  ASSERT_NE(s, nullptr);
  Client idle(s->address());
  ASSERT_TRUE(idle.connected());
  s.reset();  // joins its thread though the client still waits
  EXPECT_EQ(idle.read_all(), "");
}

TEST(MetricsServer, APortInUseIsAnError) {
  Rendered r;
  auto s = start_server(&r);
  ASSERT_NE(s, nullptr);
  std::unique_ptr<MetricsServer> again;
  EXPECT_EQ(MetricsServer::start(s->address(), r.fn(), &again), -EADDRINUSE);
  EXPECT_EQ(again, nullptr);
}

}  // namespace
}  // namespace droce::droced
