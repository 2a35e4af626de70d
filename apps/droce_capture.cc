// `droce capture`: a running droced's frames, both directions, as pcapng (droced/capture.h),
// to a file or to stdout (`droce capture -w - | tshark -i -`).
//
// droced writes into one end of a socket pair and this command copies the other end to the
// output, rather than droced writing to the output itself: droced never blocks on (or learns
// the rights of) a user's file or terminal, and the end of the stream (COUNT frames, or droced
// closing after SIGINT here) reaches this command as EOF. SIGINT closes the control
// connection, which ends the capture; droced then writes its statistics block (frames lost)
// and closes, so the output is a complete pcapng file.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "core/unix_socket.h"
#include "apps/cli_args.h"
#include "provider/client/client.h"

namespace droce::cli {

namespace {

constexpr const char* kUsage =
    "usage: droce capture -w FILE|- [--qp N] [-s SNAPLEN] [-c COUNT] [--device NAME] [--run-dir DIR | --socket PATH]\n"
    "  the frames droced receives and sends, as pcapng (`-w -`: to stdout, e.g. | tshark -i -);\n"
    "  until COUNT frames or SIGINT\n"
    "  --qp N: only the frames to local QP N (received) and from it (sent)\n"
    "  -s SNAPLEN: bytes kept of each frame (default: whole RoCE frames)\n";

volatile sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

int usage_error(const std::string& why) {
  if (!why.empty()) std::fprintf(stderr, "droce capture: %s\n", why.c_str());
  std::fputs(kUsage, stderr);
  return 2;
}

bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t k = ::write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= size_t(k);
  }
  return true;
}

}  // namespace

int capture_command(const std::vector<std::string_view>& args) {
  std::string device = "droce0", socket, run_dir, out_path;
  abi::ctl::CaptureRequest q{};
  q.qpn = UINT32_MAX;
  for (size_t k = 0; k < args.size(); ++k) {
    const std::string_view a = args[k];
    const bool has_value = k + 1 < args.size();
    if (a == "--device" && has_value) device = args[++k];
    else if (a == "--socket" && has_value) socket = args[++k];
    else if (a == "--run-dir" && has_value) run_dir = args[++k];
    else if (a == "-w" && has_value) out_path = args[++k];
    else if (a == "--qp" && has_value) {
      if (!number(args[++k], &q.qpn) || q.qpn > 0xffffff) return usage_error("--qp is a QP number (0..0xffffff)");
    } else if (a == "-s" && has_value) {
      if (!number(args[++k], &q.snaplen) || q.snaplen == 0) return usage_error("-s is a byte count (1...)");
    } else if (a == "-c" && has_value) {
      if (!number(args[++k], &q.count) || q.count == 0) return usage_error("-c is a frame count (1...)");
    } else if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else {
      return usage_error("unexpected " + std::string(a));
    }
  }
  if (out_path.empty()) return usage_error("-w FILE or -w - (stdout) is needed");
  socket = droced_socket(device, run_dir, socket);

  core::Fd file;
  int out = STDOUT_FILENO;
  if (out_path != "-") {
    file = core::Fd(::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!file.valid()) {
      std::fprintf(stderr, "droce capture: %s: %s\n", out_path.c_str(), std::strerror(errno));
      return 1;
    }
    out = file.get();
  }
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    std::fprintf(stderr, "droce capture: socketpair: %s\n", std::strerror(errno));
    return 1;
  }
  core::Fd stream(sv[0]), theirs(sv[1]);
  // No SA_RESTART: a signal interrupts poll() at once. A reader of stdout that went away is
  // EPIPE on write, not a silent death, so droced is told by our socket closing.
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  core::Fd session;
  uint32_t snaplen = 0;
  if (int rc = client::start_capture(socket, q, theirs.get(), &session, &snaplen); rc != 0) {
    const char* hint = rc == -EPERM        ? " (only root or droced's own user may capture)"
                       : rc == -EBUSY      ? " (a capture already runs on this device)"
                       : rc == -EOPNOTSUPP ? " (this droced cannot capture: an older version?)"
                                           : "";
    std::fprintf(stderr, "droce capture: %s: %s%s\n", socket.c_str(), std::strerror(-rc), hint);
    return 1;
  }
  theirs.reset();  // droced holds the only writing end now: its close is our EOF
  if (q.snaplen > snaplen) std::fprintf(stderr, "droce capture: snap length %u (droced's largest)\n", snaplen);

  std::vector<char> buf(1 << 16);
  uint64_t stop_by = 0;
  for (;;) {
    if (g_stop && session.valid()) {
      session.reset();  // ends the capture; droced writes its last block and closes
      stop_by = core::monotonic_ns() + 3'000'000'000ull;
    }
    if (stop_by != 0 && core::monotonic_ns() > stop_by) break;  // droced never closed: stop anyway
    pollfd p{stream.get(), POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    const ssize_t n = ::read(stream.get(), buf.data(), buf.size());
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) break;  // EOF: the capture ended
    if (!write_all(out, buf.data(), size_t(n))) {
      if (errno != EPIPE) std::fprintf(stderr, "droce capture: %s: %s\n", out_path.c_str(), std::strerror(errno));
      return errno == EPIPE ? 0 : 1;
    }
  }
  return 0;
}

}  // namespace droce::cli
