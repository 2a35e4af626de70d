// Two droced processes joined by a same-host link (droce_shm by default, the
// first case over net_memif; no root needed), driven
// through the client library and droce-selftest: data verified end to end,
// then the hard cases: a client killed mid-traffic, a client that scribbles
// over its shared memory, droced stopped under a client, the stats message,
// and protocol garbage on the control socket.
//
// DROCED_BIN and SELFTEST_BIN name the binaries (meson sets them).

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "abi/ctl_protocol.h"
#include "cm/mad.h"
#include "core/clock.h"
#include "core/unix_socket.h"
#include "provider/client/client.h"
#include "rocev2/format.h"
#include "rocev2/verbs.h"

extern char** environ;

namespace droce {
namespace {

using namespace rocev2;
using client::Context;
namespace fs = std::filesystem;

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

pid_t spawn(const std::vector<std::string>& args, const std::string& log) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  return rc == 0 ? pid : -1;
}

// Waits for a child up to `seconds`; its wait status, or -1 on timeout.
int wait_for(pid_t pid, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    int st = 0;
    if (waitpid(pid, &st, WNOHANG) == pid) return st;
    if (std::chrono::steady_clock::now() > end) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string tail(const std::string& text, size_t n) { return text.size() <= n ? text : text.substr(text.size() - n); }

// Every thread's stack of a running process (gdb, when installed: scripts/install-deps.sh).
std::string stacks_of(pid_t pid) {
  const std::string cmd = "gdb -p " + std::to_string(pid) +
                          " -batch -nx -ex 'set pagination off' -ex 'thread apply all bt' 2>&1 | grep -E '^(Thread|#)'";
  std::string out;
  if (FILE* f = ::popen(cmd.c_str(), "r"); f != nullptr) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    ::pclose(f);
  }
  return out.empty() ? "(no stacks: gdb missing or not allowed)\n" : out;
}

struct DaemonProc {
  pid_t pid = -1;
  std::string run_dir, log, sock;
};

class TwoDaemons : public ::testing::Test {
 protected:
  void SetUp() override {
    static int n = 0;
    dir_ = "/tmp/droced-test-" + std::to_string(getpid()) + "-" + std::to_string(n++);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }

  void TearDown() override {
    for (auto& d : d_) {
      const pid_t pid = d.pid;
      stop(d, SIGKILL);
      // Killed, it could not remove its EAL runtime directory (the next droced's sweep would).
      if (pid > 0 && geteuid() == 0) fs::remove_all("/run/dpdk/droced-droce0-" + std::to_string(pid));
    }
    fs::remove_all(dir_);
  }

  // Starts daemon A (the link's server) and B (its client) with `extra` flags (and B with
  // `extra_b` after them), on droce_shm or (memif) net_memif.
  void start(const std::vector<std::string>& extra = {}, bool ipv6 = false, bool memif_link = false,
             const std::vector<std::string>& extra_b = {}) {
    const std::string memif = dir_ + "/memif.sock";
    const std::string shm = dir_ + "/link.sock";
    for (int i = 0; i < 2; ++i) {
      DaemonProc& d = d_[i];
      d.run_dir = dir_ + (i == 0 ? "/a" : "/b");
      d.log = dir_ + (i == 0 ? "/a.log" : "/b.log");
      d.sock = d.run_dir + "/droce0.sock";
      std::vector<std::string> args = {env_or("DROCED_BIN", "apps/droced"),
                                       "--run-dir", d.run_dir,
                                       "--port",
                                       memif_link ? std::string("net_memif") + char('0' + i) + ",role=" +
                                                        (i == 0 ? "server" : "client") + ",socket=" + memif +
                                                        ",socket-abstract=no"
                                                  : std::string("droce_shm") + char('0' + i) + ",role=" +
                                                        (i == 0 ? "server" : "client") + ",socket=" + shm,
                                       "--address", i == 0 ? "10.77.0.1" : "10.77.0.2",
                                       "--memory", "256", "--mbufs", "8192"};
      if (ipv6) args.insert(args.end(), {"--address", i == 0 ? "fd00:77::1" : "fd00:77::2"});
      args.insert(args.end(), extra.begin(), extra.end());
      if (i == 1) args.insert(args.end(), extra_b.begin(), extra_b.end());
      d.pid = spawn(args, d.log);
      ASSERT_GT(d.pid, 0);
      // The server's control socket (and its link's) must exist before the client starts.
      const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (!fs::exists(d.sock) && std::chrono::steady_clock::now() < end) {
        ASSERT_EQ(waitpid(d.pid, nullptr, WNOHANG), 0) << "droced exited:\n" << slurp(d.log);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      ASSERT_TRUE(fs::exists(d.sock)) << slurp(d.log);
    }
  }

  // Stops a daemon; returns its wait status (-1: it had to be killed).
  int stop(DaemonProc& d, int sig = SIGTERM) {
    if (d.pid <= 0) return 0;
    kill(d.pid, sig);
    int st = wait_for(d.pid, 30);
    if (st == -1) {
      // Stuck: what each of its threads was doing, and what it last said, before it goes.
      ADD_FAILURE() << "droced (pid " << d.pid << ") still running 30 s after signal " << sig << "\n"
                    << stacks_of(d.pid) << "--- its log's end:\n"
                    << tail(slurp(d.log), 4000);
      kill(d.pid, SIGKILL);
      waitpid(d.pid, nullptr, 0);
    }
    d.pid = -1;
    return st;
  }

  bool alive(const DaemonProc& d) { return d.pid > 0 && waitpid(d.pid, nullptr, WNOHANG) == 0; }

  // Runs droce-selftest between the two daemons; its exit status and output.
  int selftest(const std::vector<std::string>& extra, std::string* out) {
    return selftest_between(d_[0].sock, d_[1].sock, extra, out);
  }
  int selftest_between(const std::string& a, const std::string& b, const std::vector<std::string>& extra,
                       std::string* out) {
    const std::string log = dir_ + "/selftest.log";
    fs::remove(log);
    std::vector<std::string> args = {env_or("SELFTEST_BIN", "apps/droce-selftest"), "--a", a, "--b", b, "--quiet"};
    args.insert(args.end(), extra.begin(), extra.end());
    const pid_t pid = spawn(args, log);
    int st = wait_for(pid, 600);
    if (st == -1) kill(pid, SIGKILL);
    *out = slurp(log);
    return st == -1 ? -1 : (WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
  }

  std::string dir_;
  DaemonProc d_[2];
};

TEST_F(TwoDaemons, EveryOpcodeAndAThousandQpsOverIpv4OnMemif) {
  start({}, /*ipv6=*/false, /*memif_link=*/true);
  std::string out;
  EXPECT_EQ(selftest({"--qps", "1000", "--size", "1048576"}, &out), 0) << out;
  EXPECT_NE(out.find("ok: 0 failures"), std::string::npos) << out;
  // The link carries 1500-byte packets: a QP asking for a 4096 path MTU is refused, as on the
  // kernel's RoCE devices, instead of sending frames the link drops.
  EXPECT_NE(selftest({"--qps", "1", "--mtu", "4096"}, &out), 0) << out;
  EXPECT_NE(out.find("modify_qp to RTS: Invalid argument"), std::string::npos) << out;
  EXPECT_TRUE(alive(d_[0]) && alive(d_[1]));
  EXPECT_EQ(stop(d_[0]), 0);
  EXPECT_EQ(stop(d_[1]), 0);
}

TEST_F(TwoDaemons, Ipv6OnAVlanWithPathMtu4096) {
  // The link has no MTU of its own: droced takes what it is told (1500 by default, a 1024 path MTU).
  start({"--vlan", "100", "--mtu", "9000"}, /*ipv6=*/true);
  std::string out;
  // GID 0 is the link-local one, 1 the IPv4 address, 2 the IPv6 one.
  EXPECT_EQ(selftest({"--qps", "16", "--gid-index", "2", "--mtu", "4096"}, &out), 0) << out;
  EXPECT_EQ(selftest({"--qps", "16", "--gid-index", "1"}, &out), 0) << out;
}

// Whether this machine lets us (and so droced) run a thread at SCHED_RR: tried on a thread of
// our own that then ends.
bool may_run_rr() {
  bool may = false;
  std::thread([&may] {
    sched_param p{};
    p.sched_priority = 1;
    may = pthread_setschedparam(pthread_self(), SCHED_RR, &p) == 0;
  }).join();
  return may;
}

// Every key of a JSON document with its value, in the order they are written (an object's key
// before what its value holds).
using KeysInOrder = std::vector<std::pair<std::string, const nlohmann::ordered_json*>>;
void keys_in_order(const nlohmann::ordered_json& j, KeysInOrder* out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      out->emplace_back(k, &v);
      keys_in_order(v, out);
    }
  } else if (j.is_array()) {
    for (const auto& v : j) keys_in_order(v, out);
  }
}

// A counter from a stats reply (the first "name" in it), or -1; with `object`, the first one
// from that object on (e.g. "transport": every QP's counters added up, destroyed QPs' too).
long long number_in(const std::string& json, const std::string& name, const std::string& object = {}) {
  const auto all = nlohmann::ordered_json::parse(json, nullptr, /*allow_exceptions=*/false);
  KeysInOrder keys;
  keys_in_order(all, &keys);
  size_t i = 0;
  if (!object.empty()) {
    while (i < keys.size() && !(keys[i].first == object && keys[i].second->is_object())) ++i;
    if (i == keys.size()) return -1;
  }
  for (; i < keys.size(); ++i)
    if (keys[i].first == name && keys[i].second->is_number()) return keys[i].second->get<long long>();
  return -1;
}

// A counter from droced's stats JSON, or -1; with `object`, the first one from that object on.
long long stat_of(const std::string& sock, const std::string& name, const std::string& object = {}) {
  std::string json;
  if (client::query_stats(sock, &json) != 0) return -1;
  return number_in(json, name, object);
}

TEST_F(TwoDaemons, TwoClientsOfOneDaemonTalkThroughItsLoopback) {
  start({"--mtu", "9000"}, /*ipv6=*/true);
  std::string out;
  // Both sides on daemon A: every frame goes to A's own MAC.
  EXPECT_EQ(selftest_between(d_[0].sock, d_[0].sock, {"--qps", "32"}, &out), 0) << out;
  EXPECT_EQ(selftest_between(d_[0].sock, d_[0].sock, {"--qps", "4", "--gid-index", "2", "--mtu", "4096"}, &out), 0)
      << out;
  EXPECT_GT(stat_of(d_[0].sock, "loopback_frames"), 100);
  // Nothing of it crossed the link.
  EXPECT_EQ(stat_of(d_[1].sock, "rx_frames"), 0);
  EXPECT_EQ(stat_of(d_[0].sock, "rx_frames"), stat_of(d_[0].sock, "loopback_frames"));
}

// --drop-rate makes the link lossy on purpose: received frames are discarded and counted, and
// RC's retransmission carries 64 QP pairs' SENDs and WRITEs through it, data intact. (The
// selftest's UD cases may lose their datagram, as UD does; they are not asserted.)
TEST_F(TwoDaemons, DropRateLosesFramesAndRcRetransmitsThroughIt) {
  start({"--drop-rate", "5", "--drop-seed", "3"});
  std::string out;
  const int rc = selftest({"--qps", "64", "--size", "65536"}, &out);
  EXPECT_TRUE(rc == 0 || rc == 1) << out;
  // --quiet prints the failed cases only. Those a lossy link may fail: a UD datagram lost, and
  // a bad-R_Key WRITE whose NAK was lost (the responder's QP is in error by then, so the
  // requester's retries go unanswered: RETRY_EXC_ERR, as on any lossy fabric).
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("FAIL  ", 0) != 0) continue;
    EXPECT_TRUE(line.find("UD SEND") != std::string::npos || line.find("bad R_Key") != std::string::npos)
        << line;
  }
  const long long lost = stat_of(d_[0].sock, "dropped", "faults") + stat_of(d_[1].sock, "dropped", "faults");
  const long long rx = stat_of(d_[0].sock, "rx_frames") + stat_of(d_[1].sock, "rx_frames");
  EXPECT_GT(lost, 0);
  // About 5 % of what arrived (rx_frames counts the survivors).
  EXPECT_GT(lost * 100, (rx + lost) * 2) << lost << " of " << rx + lost;
  EXPECT_LT(lost * 100, (rx + lost) * 10) << lost << " of " << rx + lost;
  // The selftest has exited and its QPs are gone; the device's transport totals keep what they
  // did: the retransmissions that carried the data through the loss.
  EXPECT_GT(stat_of(d_[0].sock, "retransmits", "transport") + stat_of(d_[1].sock, "retransmits", "transport"), 0);
  EXPECT_GT(stat_of(d_[0].sock, "tx_packets", "transport"), 0);
  EXPECT_TRUE(alive(d_[0]) && alive(d_[1]));
}

// `droce cc` on a running droced: DCQCN's parameters as --cc set them, changed live by name,
// a bad value refused with its reason before droced sees it; traffic runs with DCQCN on (the
// default), and with nothing marking CE on this link no CNP is sent or received.
TEST_F(TwoDaemons, DroceCcShowsAndSetsDcqcnParametersLive) {
  start({"--cc", "rpg_ai_rate=7,np_cnp_dscp=40"});
  const std::string droce = env_or("DROCE_BIN", "apps/droce");
  auto cli = [&](const std::vector<std::string>& args, std::string* out) {
    const std::string log = dir_ + "/cc.log";
    fs::remove(log);
    std::vector<std::string> argv = {droce, "cc"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--socket", d_[0].sock});
    const int st = wait_for(spawn(argv, log), 30);
    *out = slurp(log);
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  };
  std::string out;
  ASSERT_EQ(cli({"--json"}, &out), 0) << out;
  auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["params"]["rpg_ai_rate"], 7);
  EXPECT_EQ(j["params"]["cnp_dscp"], 40);
  EXPECT_EQ(j["params"]["rp_enable"], 1);
  EXPECT_EQ(j["params"]["rpg_hai_rate"], 50);
  EXPECT_EQ(j["counters"]["np_cnp_sent"], 0);

  ASSERT_EQ(cli({"set", "rpg_hai_rate=99", "rp_min_rate=3"}, &out), 0) << out;
  ASSERT_EQ(cli({"--json"}, &out), 0) << out;
  j = nlohmann::json::parse(out);
  EXPECT_EQ(j["params"]["rpg_hai_rate"], 99);
  EXPECT_EQ(j["params"]["rpg_min_rate"], 3);

  EXPECT_EQ(cli({"set", "cnp_dscp=64"}, &out), 2) << out;
  EXPECT_NE(out.find("cnp_dscp"), std::string::npos) << out;
  ASSERT_EQ(cli({}, &out), 0) << out;
  EXPECT_NE(out.find("rpg_time_reset"), std::string::npos) << out;
  EXPECT_NE(out.find("cnp_dscp"), std::string::npos) << out;

  // The raw message with a bad value: droced refuses it too, and keeps what it had.
  abi::ctl::CcRequest q{};
  q.op = abi::ctl::kCcSet;
  std::snprintf(q.assignments, sizeof q.assignments, "cnp_dscp=99");
  EXPECT_EQ(client::control_cc(d_[0].sock, q), -EINVAL);
  ASSERT_EQ(cli({"--json"}, &out), 0) << out;
  EXPECT_EQ(nlohmann::json::parse(out)["params"]["cnp_dscp"], 40);

  EXPECT_EQ(selftest({"--qps", "4"}, &out), 0) << out;
  for (const DaemonProc& d : d_) {
    EXPECT_EQ(stat_of(d.sock, "np_cnp_sent"), 0);
    EXPECT_EQ(stat_of(d.sock, "cnp_received"), 0);
    EXPECT_EQ(stat_of(d.sock, "np_ecn_marked_roce_packets"), 0);
  }
  EXPECT_TRUE(alive(d_[0]) && alive(d_[1]));
}

// The events mask of every eventfd `pid`'s epoll instances watch under `key` (the epoll data
// droced gives it, droced/daemon.h), read from /proc/PID/fdinfo (DPDK's own epoll uses
// small keys too, for a pipe).
std::vector<uint32_t> epoll_events_of(pid_t pid, uint64_t key) {
  std::vector<uint32_t> out;
  std::error_code ec;
  const std::string proc = "/proc/" + std::to_string(pid);
  for (const auto& e : fs::directory_iterator(proc + "/fdinfo", ec)) {
    std::ifstream in(e.path());
    std::string line;
    while (std::getline(in, line)) {
      // "tfd:        7 events:       19 data:                3  pos:0 ino:..." (hex but tfd)
      int tfd = -1;
      unsigned events = 0;
      unsigned long long data = 0;
      if (std::sscanf(line.c_str(), "tfd: %d events: %x data: %llx", &tfd, &events, &data) != 3 || data != key)
        continue;
      if (fs::read_symlink(proc + "/fd/" + std::to_string(tfd), ec).string() == "anon_inode:[eventfd]")
        out.push_back(events);
    }
  }
  return out;
}

// Waking up (docs/droced.md): on droce_shm a blocked droced is woken by the frame itself.
// Each daemon sleeps between the selftest's exchanges (event mode, the default on a shared
// CPU); the sleeps its port's descriptor ended are counted apart from those a client's
// doorbell or a timer ended. Over net_memif, which cannot wake a DPDK receiver, none are.
TEST_F(TwoDaemons, AFrameWakesABlockedDaemonOnTheSameHostLinkButNotOnMemif) {
  for (const bool memif : {false, true}) {
    SCOPED_TRACE(memif ? "net_memif" : "droce_shm");
    start({}, /*ipv6=*/false, memif);
    std::string out;
    EXPECT_EQ(selftest({"--qps", "4"}, &out), 0) << out;
    // Whichever side sleeps when a request or its answer comes is woken by it: B by A's
    // requests, A by B's responses.
    const long long a = stat_of(d_[0].sock, "wakeups_by_port");
    const long long b = stat_of(d_[1].sock, "wakeups_by_port");
    if (memif) {
      EXPECT_EQ(a, 0);
      EXPECT_EQ(b, 0);
      EXPECT_GT(stat_of(d_[0].sock, "wakeups_by_timer"), 0) << "a memif daemon that never slept?";
    } else {
      EXPECT_GT(a + b, 0) << "no frame woke a sleeping daemon";
      EXPECT_GT(a, 0);
      EXPECT_GT(b, 0);
      // Each sleep after a whole spin was judged (SpinPolicy), and the wake-up it measures is shown.
      for (const DaemonProc* d : {&d_[0], &d_[1]}) {
        EXPECT_GT(stat_of(d->sock, "spin_grown") + stat_of(d->sock, "spin_shrunk"), 0);
        EXPECT_GE(stat_of(d->sock, "wake_us"), 0);
        // The worker's wake eventfd and droce_shm's wake descriptor are never read: watched
        // level-triggered, one write would keep epoll_wait returning at once for ever.
        for (const uint64_t key : {3 /* kWakeKey */, 4 /* kRxInterruptKey */}) {
          SCOPED_TRACE("epoll key " + std::to_string(key));
          const std::vector<uint32_t> events = epoll_events_of(d->pid, key);
          ASSERT_EQ(events.size(), 1u) << "one worker, one such descriptor";
          EXPECT_EQ(events[0] & (EPOLLIN | EPOLLET), uint32_t{EPOLLIN | EPOLLET}) << std::hex << events[0];
        }
      }
    }
    EXPECT_EQ(stop(d_[0]), 0);
    EXPECT_EQ(stop(d_[1]), 0);
  }
}

// droce_shm between two daemons (docs/droced.md): the port says its link carries no ICRC, and
// the engines build frames in their ring slots (short ones, ShmLink::kCopyMax, are copied);
// over net_memif, software ICRCs and no frame built in place.
TEST_F(TwoDaemons, OnTheSameHostLinkFramesCarryNoIcrcAndAreBuiltInPlace) {
  for (const bool memif : {false, true}) {
    SCOPED_TRACE(memif ? "net_memif" : "droce_shm");
    start({}, /*ipv6=*/false, memif);
    std::string out;
    EXPECT_EQ(selftest({"--qps", "4"}, &out), 0) << out;
    std::string json;
    ASSERT_EQ(client::query_stats(d_[0].sock, &json), 0);
    const std::string offloads = memif ? "\"offloads\":\"software\"" : "\"offloads\":\"icrc (droce_shm carries none)\"";
    EXPECT_NE(json.find(offloads), std::string::npos) << json;
    const long long in_place = stat_of(d_[0].sock, "tx_in_place");
    if (memif) {
      EXPECT_EQ(in_place, -1) << "net_memif has no such counter";
    } else {
      const long long sent = stat_of(d_[0].sock, "tx_good_packets");
      EXPECT_GT(in_place, 0);
      EXPECT_LT(in_place, sent) << "short frames (acknowledgements) are copied (ShmLink::kCopyMax)";
    }
    EXPECT_EQ(stop(d_[0]), 0);
    EXPECT_EQ(stop(d_[1]), 0);
  }
}

// A controlled Q_Key (IBA 10.2.5; QP1's 0x80010000) is refused to a client without CAP_NET_RAW,
// as Linux refuses it, and taken from one that holds it: the selftest checks whichever it is,
// run here as root and again as nobody (setpriv), and says which.
TEST_F(TwoDaemons, AControlledQkeyIsForPrivilegedClientsOnly) {
  if (geteuid() != 0 || !fs::exists("/usr/bin/setpriv")) GTEST_SKIP() << "needs root and setpriv (util-linux)";
  start();
  // nobody may not reach the build tree (scripts/test.sh --fresh builds in a 0700 folder): a copy
  // in this test's own folder (0755, like the daemons' run directories).
  const std::string selftest_bin = dir_ + "/droce-selftest";
  fs::copy_file(env_or("SELFTEST_BIN", "apps/droce-selftest"), selftest_bin);
  fs::permissions(selftest_bin, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                    fs::perms::others_read | fs::perms::others_exec);
  fs::permissions(dir_, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                            fs::perms::others_read | fs::perms::others_exec);
  for (const bool privileged : {true, false}) {
    SCOPED_TRACE(privileged ? "root" : "nobody");
    const std::string log = dir_ + "/qkey.log";
    std::vector<std::string> args;
    if (!privileged)
      args = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--"};
    args.insert(args.end(), {selftest_bin, "--a", d_[0].sock, "--b", d_[1].sock, "--qps", "1"});
    const pid_t pid = spawn(args, log);
    ASSERT_GT(pid, 0);
    const int st = wait_for(pid, 120);
    const std::string out = slurp(log);
    EXPECT_TRUE(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0) << out;
    EXPECT_NE(out.find(privileged ? "PASS  UD QP with a controlled Q_Key, as a privileged program: taken"
                                  : "PASS  UD QP with a controlled Q_Key, as an unprivileged program: EPERM"),
              std::string::npos)
        << out;
  }
}

// The mode each worker waits in, and why, as `droce cores` shows it. Polling daemons never
// sleep, and (both on one CPU here, as --poll-mode poll asks) still carry every selftest case:
// a UD receive posted just before the datagram arrives is found (Session::refill_recv), where
// it once was dropped whenever the receiver's droced was preempted between reading its
// client's doorbells and its port.
TEST_F(TwoDaemons, EachWorkerSaysWhetherItPollsOrWaitsForEvents) {
  start({"--poll-mode", "poll"});
  std::string out;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(selftest({"--qps", "2"}, &out), 0) << out;
  std::string json;
  ASSERT_EQ(client::query_stats(d_[0].sock, &json), 0);
  EXPECT_NE(json.find("\"mode\":\"poll\""), std::string::npos) << json;
  EXPECT_NE(json.find("--poll-mode poll"), std::string::npos) << json;
  EXPECT_EQ(stat_of(d_[0].sock, "sleeps"), 0) << "a polling worker slept";
  EXPECT_EQ(stop(d_[0]), 0);
  EXPECT_EQ(stop(d_[1]), 0);
  // Left to choose, a worker on a CPU the kernel does not keep for it (none is, here) is shared.
  start();
  std::string isolated;
  if (std::ifstream f("/sys/devices/system/cpu/isolated"); f) std::getline(f, isolated);
  ASSERT_EQ(client::query_stats(d_[1].sock, &json), 0);
  if (isolated.empty()) {
    EXPECT_NE(json.find("\"mode\":\"event\""), std::string::npos) << json;
  }
  EXPECT_NE(json.find("\"mode_reason\":\"auto: CPU"), std::string::npos) << json;
  // An event-mode worker stays on its lcore's CPU (lcore 0: CPU 0) unless told to go anywhere.
  EXPECT_NE(json.find("\"cpus\":\"0\""), std::string::npos) << json;
  EXPECT_EQ(stop(d_[0]), 0);
  EXPECT_EQ(stop(d_[1]), 0);
  start({"--event-affinity", "any"});
  ASSERT_EQ(client::query_stats(d_[0].sock, &json), 0);
  // Then it may run wherever droced may (as this test, which started it): more than CPU 0 here.
  cpu_set_t mine;
  CPU_ZERO(&mine);
  ASSERT_EQ(sched_getaffinity(0, sizeof mine, &mine), 0);
  if (isolated.empty() && CPU_COUNT(&mine) > 1) {
    EXPECT_EQ(json.find("\"cpus\":\"0\""), std::string::npos) << json;
    EXPECT_NE(json.find("\"cpus\":\""), std::string::npos) << json;
  }
  // SCHED_RR unless told "other", where the machine allows it (CAP_SYS_NICE; "auto", the
  // default); refused, the worker says it stayed normal. Traffic flows either way.
  const bool may = may_run_rr();
  EXPECT_NE(json.find(may ? "\"policy\":\"rr\"" : "\"policy\":\"other\""), std::string::npos) << json;
  EXPECT_EQ(stop(d_[0]), 0);
  EXPECT_EQ(stop(d_[1]), 0);
  start({"--event-policy", "other"});
  EXPECT_EQ(selftest({"--qps", "2"}, &out), 0) << out;
  for (auto& d : d_) {
    ASSERT_EQ(client::query_stats(d.sock, &json), 0);
    EXPECT_NE(json.find("\"policy\":\"other\""), std::string::npos) << json;
    EXPECT_EQ(stop(d), 0);
  }
  for (const char* policy : {"rr", "auto"}) {
    SCOPED_TRACE(policy);
    start({"--event-policy", policy});
    for (int i = 0; i < 2; ++i) EXPECT_EQ(selftest({"--qps", "2"}, &out), 0) << out;
    for (auto& d : d_) {
      ASSERT_EQ(client::query_stats(d.sock, &json), 0);
      EXPECT_NE(json.find(may ? "\"policy\":\"rr\"" : "\"policy\":\"other\""), std::string::npos) << json;
      EXPECT_EQ(stop(d), 0);
    }
  }
}

// A worker at SCHED_RR may not keep its CPU from normal programs for long: one told to spin
// 10 ms after work before it blocks (--idle-spin-us) goes to the normal policy 2 ms into each
// such spin (RealtimeBudget) and takes SCHED_RR back when it blocks.
TEST_F(TwoDaemons, AWorkerAtRrThatDoesNotBlockFor2MsGoesNormalUntilItDoes) {
  if (!may_run_rr()) GTEST_SKIP() << "this machine refuses SCHED_RR (needs CAP_SYS_NICE)";
  start({"--event-policy", "rr", "--idle-spin-us", "10000"});
  std::string out;
  EXPECT_EQ(selftest({"--qps", "2"}, &out), 0) << out;
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // past the spin: blocked again
  for (auto& d : d_) {
    // One reading: the query wakes the worker, which then spins again.
    std::string json;
    ASSERT_EQ(client::query_stats(d.sock, &json), 0);
    EXPECT_NE(json.find("\"policy\":\"rr\""), std::string::npos) << json;
    EXPECT_GT(number_in(json, "rt_demotions"), 0) << json;
    EXPECT_EQ(stop(d), 0);
  }
}

// A worker at SCHED_RR whose frames wait for room in its peer's ring, the peer a normal task on
// the same CPU (both daemons on lcore 0: CPU 0): a yield hands the CPU only to a task at the
// same policy, so spinning left the peer only what RT throttling leaves, and RC transfers
// failed with retry-exceeded and flushed. Such a worker blocks instead (Worker::block_stuck),
// and `droce cores` counts it. The selftest's benchmark at 8 QPs keeps 8 x 32 WRITEs and SENDs
// of 64 KiB in flight, 2048 frames of 9000 bytes against a ring of 1024 (half a second a line:
// the ring is full within the first milliseconds of each 64 KiB line).
TEST_F(TwoDaemons, AWorkerAtRrStuckOnAFullRingBlocksForItsPeerAtTheNormalPolicy) {
  if (!may_run_rr()) GTEST_SKIP() << "this machine refuses SCHED_RR (needs CAP_SYS_NICE)";
  start({"--mtu", "9000", "--event-affinity", "lcore", "--event-policy", "rr"}, false, false,
        {"--event-policy", "other"});
  std::string out;
  EXPECT_EQ(selftest({"--qps", "8", "--bench", "--bench-ms", "500"}, &out), 0) << out;
  EXPECT_EQ(out.find("errors"), std::string::npos) << out;
  std::string json;
  ASSERT_EQ(client::query_stats(d_[0].sock, &json), 0);
  EXPECT_NE(json.find("\"policy\":\"rr\""), std::string::npos) << json;
  EXPECT_GT(stat_of(d_[0].sock, "stuck_blocks"), 0) << json;
  ASSERT_EQ(client::query_stats(d_[1].sock, &json), 0);
  EXPECT_NE(json.find("\"policy\":\"other\""), std::string::npos) << json;
  EXPECT_EQ(stat_of(d_[1].sock, "stuck_blocks"), 0) << "a worker at the normal policy yields, it never blocks so";
  EXPECT_EQ(stop(d_[0]), 0);
  EXPECT_EQ(stop(d_[1]), 0);
}

// Several lcores (docs/droced.md): each context goes to the worker with the fewest, and frames
// for a QP that arrive on another worker's queue are handed to its owner. Three pairs of contexts
// at once spread over both workers of each daemon, plus two contexts on daemon A talking through
// its loopback from one worker to the other; `stats` is read all the while (it takes every
// worker's state lock in turn: it must neither deadlock nor stall the traffic).
TEST_F(TwoDaemons, SeveralLcoresShareTheClientsAndHandFramesToTheOwningCore) {
  start({"--lcores", "0,1", "--mtu", "9000"});
  const std::string selftest_bin = env_or("SELFTEST_BIN", "apps/droce-selftest");
  std::vector<pid_t> runs(4);
  // The loopback pair first, alone until both its contexts are placed: then they are on the two
  // workers (each context goes to the one with the fewest), so daemon A hands frames between
  // workers whatever order the others connect in. Started all at once, the pair could land on
  // one worker and the A<->B contexts on the other, and A handed nothing (a fresh run saw it).
  for (int i : {3, 0, 1, 2}) {
    std::vector<std::string> args = {selftest_bin, "--a", d_[0].sock, "--b", d_[i == 3 ? 0 : 1].sock, "--quiet",
                                     "--qps", "24", "--size", "262144", "--mtu", i == 3 ? "1024" : "4096"};
    runs[i] = spawn(args, dir_ + "/selftest" + std::to_string(i) + ".log");
    ASSERT_GT(runs[i], 0);
    if (i == 3)  // its two contexts, and the stats query's own
      for (int t = 0; t < 500 && stat_of(d_[0].sock, "clients") < 3; ++t)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  int stats_read = 0;
  for (bool running = true; running;) {
    running = false;
    for (pid_t p : runs) running = running || waitpid(p, nullptr, WNOHANG | WNOWAIT) == 0;
    std::string json;
    if (client::query_stats(d_[0].sock, &json) == 0 && json.find("\"cores\":[") != std::string::npos) ++stats_read;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int i = 0; i < 4; ++i) {
    const int st = wait_for(runs[i], 60);
    const std::string out = slurp(dir_ + "/selftest" + std::to_string(i) + ".log");
    EXPECT_TRUE(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0) << "selftest " << i << ":\n" << out;
    EXPECT_NE(out.find("ok: 0 failures"), std::string::npos) << out;
  }
  EXPECT_GT(stats_read, 0) << "stats never answered while traffic ran";
  for (auto& d : d_) {
    std::string json;
    ASSERT_EQ(client::query_stats(d.sock, &json), 0);
    EXPECT_NE(json.find("\"lcores\":2"), std::string::npos) << json;
    // The link is one queue pair (as memif, Port::plan_device): worker 0 receives every frame and hands
    // worker 1 those for its QPs; both send on queue 0, under its lock. None dropped.
    EXPECT_NE(json.find("{\"core\":0,\"lcore\":0,\"rx_queue\":\"0\",\"tx_queue\":0"), std::string::npos) << json;
    EXPECT_NE(json.find("{\"core\":1,\"lcore\":1,\"rx_queue\":\"-\",\"tx_queue\":0"), std::string::npos) << json;
    EXPECT_GT(stat_of(d.sock, "handed_in"), 0) << json;
    EXPECT_EQ(stat_of(d.sock, "hand_off_dropped"), 0) << json;
    EXPECT_EQ(stat_of(d.sock, "rx_unknown_qp"), 0) << json;
    // Each worker's thread as the scheduler saw it: the CPU it last ran on, its CPU time,
    // its wait for a CPU, and its switches (an event-mode worker has blocked).
    const std::regex sched_row(R"("on_cpu":"[0-9]+","cpu_ms":[0-9]+,"wait_ms":[0-9]+,"blocked":[1-9][0-9]*,"preempted":[0-9]+)");
    EXPECT_EQ(std::distance(std::sregex_iterator(json.begin(), json.end(), sched_row), std::sregex_iterator()), 2)
        << json;
  }
  EXPECT_GT(stat_of(d_[0].sock, "loopback_frames"), 0);
  // `droce cores`: one row per core, with its queues and hand-offs.
  const std::string cli_log = dir_ + "/cores.log";
  const int st = wait_for(spawn({env_or("DROCE_BIN", "apps/droce"), "cores", "--socket", d_[0].sock}, cli_log), 30);
  EXPECT_TRUE(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
  const std::string text = slurp(cli_log);
  EXPECT_EQ(text.rfind("core  lcore  mode   policy  cpus  rx_queue  tx_queue  clients", 0), 0u) << text;
  EXPECT_NE(text.find("handed_in"), std::string::npos) << text;
  // How a worker at SCHED_RR fared: blocks for a peer to empty a full ring, budget demotions,
  // rescues from other real-time threads.
  EXPECT_NE(text.find("stuck_blocks  rt_demotions  rt_rescues"), std::string::npos) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 3) << text;  // the header and two cores
  EXPECT_EQ(stop(d_[0]), 0);
  EXPECT_EQ(stop(d_[1]), 0);
}

TEST_F(TwoDaemons, EachDaemonPublishesItsDeviceForLibibverbsAndRemovesItAtExit) {
  start();
  const std::string root = d_[0].run_dir + "/sys";
  const std::string dev = root + "/class/infiniband/droce0";
  EXPECT_EQ(slurp(dev + "/droce_control_socket").find(d_[0].sock), 0u) << slurp(dev + "/droce_control_socket");
  // The port turns ACTIVE when the memif peer connects, and the tree follows.
  for (int i = 0; i < 200 && slurp(dev + "/ports/1/state").rfind("4: ACTIVE", 0) != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  EXPECT_EQ(slurp(dev + "/ports/1/state").rfind("4: ACTIVE", 0), 0u) << slurp(dev + "/ports/1/state");
  // GID 1 is the configured IPv4 address, IPv4-mapped, RoCE v2.
  EXPECT_EQ(slurp(dev + "/ports/1/gids/1").rfind("0000:0000:0000:0000:0000:ffff:0a4d:0001", 0), 0u);
  EXPECT_EQ(slurp(dev + "/ports/1/gid_attrs/types/1").rfind("RoCE v2", 0), 0u);
  EXPECT_EQ(slurp(root + "/class/infiniband_verbs/uverbs_droce0/ibdev").rfind("droce0", 0), 0u);
  const std::string droce = env_or("DROCE_BIN", "apps/droce");
  const std::string exec = droce + " exec --run-dir " + d_[0].run_dir + " -- ";
  // droce exec passes the program's exit status on, and refuses a run dir without a device.
  EXPECT_EQ(WEXITSTATUS(std::system((exec + "sh -c 'exit 3'").c_str())), 3);
  EXPECT_EQ(WEXITSTATUS(std::system((droce + " exec --run-dir " + dir_ + " -- true 2>/dev/null").c_str())), 125);
  if (!env_or("DROCE_VERBS_MODULE", "").empty() && std::system("command -v ibv_devices >/dev/null 2>&1") == 0) {
    // The distro's own ibv_devices lists droce0 through droce exec (tree, provider, node).
    const std::string out = dir_ + "/ibv_devices.txt";
    ASSERT_EQ(std::system((exec + "ibv_devices >" + out + " 2>&1").c_str()), 0) << slurp(out);
    std::string guid = slurp(dev + "/node_guid");
    guid.erase(std::remove(guid.begin(), guid.end(), ':'), guid.end());
    guid.erase(guid.find_last_not_of("\n") + 1);
    EXPECT_NE(slurp(out).find("droce0"), std::string::npos) << slurp(out);
    EXPECT_NE(slurp(out).find(guid), std::string::npos) << slurp(out) << " guid " << guid;
  }
  EXPECT_EQ(stop(d_[0]), 0);
  EXPECT_FALSE(fs::exists(dev));
  EXPECT_FALSE(fs::exists(root + "/class/infiniband_verbs/uverbs_droce0"));
}

// On a kernel with RDMA netlink (ib_core loaded; not this machine's), libibverbs would ask the
// kernel for devices and never read SYSFS_PATH. droce exec then runs the program under a seccomp
// filter that fails socket(AF_NETLINK, NETLINK_RDMA) and gives it a private tree holding droce's
// devices and links to the kernel's, so both stay visible. The test hooks stand in for that
// kernel: a fake /sys with one kernel device, "mlx5_0".
TEST_F(TwoDaemons, ExecOnAKernelWithRdmaNetlinkMergesTheTreesAndFiltersTheSocket) {
  start();
  const std::string ksys = dir_ + "/kernel-sys";
  fs::create_directories(ksys + "/class/infiniband/mlx5_0");
  fs::create_directories(ksys + "/class/infiniband_verbs/uverbs0");
  std::ofstream(ksys + "/class/infiniband/mlx5_0/node_type") << "1: CA\n";
  std::ofstream(ksys + "/class/infiniband_verbs/abi_version") << "6\n";
  const std::string out = dir_ + "/exec.txt";
  // The program reports its seccomp mode and no_new_privs, lists its tree, and tries the sockets.
  std::ofstream(dir_ + "/probe.py") << "import socket\n"
                                       "try:\n"
                                       "    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 20)\n"
                                       "    print('rdma netlink: opened')\n"
                                       "except OSError as e:\n"
                                       "    print('rdma netlink:', e.errno)\n"
                                       "socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)\n"
                                       "print('route netlink: opened')\n";
  std::ofstream(dir_ + "/probe.sh") << "grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status\n"
                                       "ls \"$SYSFS_PATH/class/infiniband\"\n"
                                       "cat \"$SYSFS_PATH/class/infiniband_verbs/abi_version\"\n"
                                       "echo tree=$SYSFS_PATH\n"
                                       "exec /usr/bin/python3 " + dir_ + "/probe.py\n";
  const std::string cmd = "DROCE_EXEC_TEST_RDMA_NETLINK=1 DROCE_EXEC_TEST_KERNEL_SYSFS=" + ksys + " " +
                          env_or("DROCE_BIN", "apps/droce") + " exec --run-dir " + d_[0].run_dir + " -- sh " + dir_ +
                          "/probe.sh >" + out + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << slurp(out);
  const std::string text = slurp(out);
  EXPECT_NE(text.find("Seccomp:\t2"), std::string::npos) << "no seccomp filter:\n" << text;
  EXPECT_NE(text.find("NoNewPrivs:\t1"), std::string::npos) << text;
  EXPECT_NE(text.find("droce0\nmlx5_0\n"), std::string::npos) << "both devices in the tree:\n" << text;
  EXPECT_NE(text.find("\n6\n"), std::string::npos) << "the kernel's ABI version:\n" << text;
  EXPECT_NE(text.find("rdma netlink: " + std::to_string(EPROTONOSUPPORT)), std::string::npos) << text;
  EXPECT_NE(text.find("route netlink: opened"), std::string::npos) << "the filter took more than NETLINK_RDMA\n"
                                                                    << text;
  // The private tree is gone when the program is.
  const size_t at = text.find("tree=");
  ASSERT_NE(at, std::string::npos);
  const std::string tree = text.substr(at + 5, text.find('\n', at) - at - 5);
  EXPECT_NE(tree, d_[0].run_dir + "/sys") << "not a private tree";
  EXPECT_FALSE(fs::exists(tree)) << tree;
}

// Makes a connected RC QP pair between `a` and `b` (contexts of the two daemons).
struct RcPair {
  client::Cq* cq[2] = {};
  client::Qp* qp[2] = {};
  uint32_t pd[2] = {};
};

void bring_up(Context* ctx, client::Qp* qp, uint32_t peer, const net::IpAddr& dgid, uint8_t timeout, uint8_t retry) {
  QpAttr a;
  a.qp_state = QpState::init;
  a.port_num = 1;
  a.qp_access_flags = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
  ASSERT_EQ(ctx->modify_qp(qp, a, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags), 0);
  a = QpAttr{};
  a.qp_state = QpState::rtr;
  a.path_mtu = PathMtu::mtu1024;
  a.dest_qp_num = peer;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 1;
  a.ah_attr.dgid = dgid;
  a.ah_attr.sgid_index = 1;
  ASSERT_EQ(ctx->modify_qp(qp, a, kAttrState | kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn |
                                      kAttrMaxDestRdAtomic | kAttrMinRnrTimer),
            0);
  a = QpAttr{};
  a.qp_state = QpState::rts;
  a.timeout = timeout;
  a.retry_cnt = retry;
  a.rnr_retry = retry;
  a.max_rd_atomic = 1;
  ASSERT_EQ(ctx->modify_qp(qp, a, kAttrState | kAttrSqPsn | kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry |
                                      kAttrMaxQpRdAtomic),
            0);
}

net::IpAddr v4(uint32_t a) { return net::ipv4_mapped(a); }

client::QpCreate rc_create(uint32_t pd, client::Cq* cq) {
  client::QpCreate c;
  c.pd = pd;
  c.send_cq = c.recv_cq = cq;
  c.cap = {64, 64, 1, 1, 0};
  c.sq_sig_all = true;
  return c;
}

// A PD, a CQ and an RC QP (signaling every WR) on `ctx`.
void make_rc(Context* ctx, uint32_t* pd, client::Cq** cq, client::Qp** qp) {
  ASSERT_EQ(ctx->alloc_pd(pd), 0);
  ASSERT_EQ(ctx->create_cq(256, cq), 0);
  ASSERT_EQ(ctx->create_qp(rc_create(*pd, *cq), qp), 0);
}

// QP1, droced's connection manager (docs/cm.md). A privileged client of daemon A sends CM MADs
// from its own UD QP (the GSI Q_Key is controlled) to daemon B's QP1: a REQ for a service nobody
// listens on is answered with REJ 8, which goes to daemon A's QP1 (the address the REQ came from),
// where no connection knows it; a MAD of another class is dropped and counted.
TEST_F(TwoDaemons, Qp1AnswersAReqNobodyListensForWithReject8) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (CAP_NET_RAW): the GSI Q_Key 0x80010000 is controlled";
  start();
  std::unique_ptr<Context> a;
  ASSERT_EQ(Context::open(d_[0].sock, &a), 0);
  uint32_t pd = 0;
  client::Cq* cq = nullptr;
  ASSERT_EQ(a->alloc_pd(&pd), 0);
  ASSERT_EQ(a->create_cq(64, &cq), 0);
  client::QpCreate c = rc_create(pd, cq);
  c.type = QpType::ud;
  client::Qp* qp = nullptr;
  ASSERT_EQ(a->create_qp(c, &qp), 0);
  QpAttr at;
  at.qp_state = QpState::init;
  at.port_num = 1;
  at.qkey = cm::kGsiQkey;
  ASSERT_EQ(a->modify_qp(qp, at, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrQkey), 0);
  at = QpAttr{};
  at.qp_state = QpState::rtr;
  ASSERT_EQ(a->modify_qp(qp, at, kAttrState), 0);
  at.qp_state = QpState::rts;
  ASSERT_EQ(a->modify_qp(qp, at, kAttrState | kAttrSqPsn), 0);
  auto* mem = static_cast<uint8_t*>(std::aligned_alloc(4096, 4096));
  std::memset(mem, 0, 4096);
  uint32_t lkey = 0, rkey = 0;
  ASSERT_EQ(a->reg_mr(pd, mem, 4096, kAccessLocalWrite, &lkey, &rkey), 0);
  AddressVector av;
  av.dgid = v4(0x0a4d0002);
  av.sgid_index = 1;
  uint32_t ah = 0;
  ASSERT_EQ(a->create_ah(pd, av, &ah), 0);
  auto send_mad = [&](const cm::Mad& mad) {
    std::memcpy(mem, mad.data(), mad.size());
    SendWr w;
    w.opcode = WrOpcode::send;
    w.send_flags = kSendSignaled;
    w.num_sge = 1;
    w.sg_list[0] = {reinterpret_cast<uint64_t>(mem), uint32_t(mad.size()), lkey};
    w.ah = ah;
    w.remote_qpn = cm::kGsiQpn;
    w.remote_qkey = cm::kGsiQkey;
    ASSERT_EQ(qp->post_send(w), 0);
    Completion done;
    const uint64_t end = core::monotonic_ns() + 10'000'000'000ull;
    int n = 0;
    while ((n = cq->poll(&done, 1)) == 0 && core::monotonic_ns() < end) {
    }
    ASSERT_EQ(n, 1);
    EXPECT_EQ(done.status, WcStatus::success);
  };
  cm::Req req;
  req.local_comm_id = 0x1234;
  req.service_id = cm::ip_service_id(cm::PortSpace::tcp, 7174);
  req.local_qpn = qp->qpn();
  req.max_cm_retries = 15;
  req.primary.local_gid = v4(0x0a4d0001);
  req.primary.remote_gid = v4(0x0a4d0002);
  cm::MadHeader h;
  h.tid = 0x77;
  cm::Mad mad{};
  cm::encode(h, cm::Message{req}, &mad);
  send_mad(mad);
  cm::Mad junk = mad;
  junk[1] = 0x04;  // the SA's class, not CM's
  send_mad(junk);
  auto wait_stat = [&](const std::string& sock, const std::string& name, long long at_least) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (stat_of(sock, name) < at_least && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return stat_of(sock, name);
  };
  EXPECT_EQ(wait_stat(d_[1].sock, "cm_mads_malformed", 1), 1);
  EXPECT_EQ(wait_stat(d_[1].sock, "cm_rej_no_listener", 1), 1);
  EXPECT_EQ(stat_of(d_[1].sock, "cm_mads_in"), 2);
  EXPECT_GE(wait_stat(d_[1].sock, "cm_mads_out", 1), 1);
  // The REJ reached daemon A's QP1, which has no connection with comm ID 0x1234.
  EXPECT_GE(wait_stat(d_[0].sock, "cm_mads_in", 1), 1);
  EXPECT_GE(wait_stat(d_[0].sock, "cm_mads_unmatched", 1), 1);
  EXPECT_TRUE(alive(d_[0]) && alive(d_[1]));
  a.reset();
  std::free(mem);
}

TEST_F(TwoDaemons, AKilledClientsPeerSeesRetryExceededAndDaemonsServeOn) {
  start();
  // The peer: this process, a client of daemon B.
  std::unique_ptr<Context> b;
  ASSERT_EQ(Context::open(d_[1].sock, &b), 0);
  uint32_t pd = 0;
  client::Cq* cq = nullptr;
  client::Qp* qp = nullptr;
  ASSERT_NO_FATAL_FAILURE(make_rc(b.get(), &pd, &cq, &qp));
  std::vector<uint8_t> buf(1 << 16, 0x5a);
  uint32_t lkey = 0, rkey = 0;
  ASSERT_EQ(b->reg_mr(pd, buf.data(), buf.size(), kAccessLocalWrite | kAccessRemoteWrite, &lkey, &rkey), 0);

  // The victim: a child, a client of daemon A, writing into our buffer.
  int to_child[2], from_child[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(from_child), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::unique_ptr<Context> a;
    if (Context::open(d_[0].sock, &a) != 0) _exit(10);
    uint32_t cpd = 0, ck = 0, crk = 0;
    client::Cq* ccq = nullptr;
    client::Qp* cqp = nullptr;
    std::vector<uint8_t> mine(4096, 0x33);
    if (a->alloc_pd(&cpd) || a->create_cq(256, &ccq) || a->reg_mr(cpd, mine.data(), mine.size(), kAccessLocalWrite, &ck, &crk))
      _exit(11);
    if (a->create_qp(rc_create(cpd, ccq), &cqp) != 0) _exit(12);
    uint32_t qpn = cqp->qpn(), peer = 0;
    if (write(from_child[1], &qpn, 4) != 4 || read(to_child[0], &peer, 4) != 4) _exit(13);
    bring_up(a.get(), cqp, peer, v4(0x0a4d0002), 14, 7);
    if (::testing::Test::HasFatalFailure()) _exit(14);
    uint64_t raddr = 0;
    uint32_t r = 0;
    if (read(to_child[0], &raddr, 8) != 8 || read(to_child[0], &r, 4) != 4) _exit(15);
    uint8_t ready = 1;
    if (write(from_child[1], &ready, 1) != 1) _exit(16);
    for (;;) {  // WRITEs until killed
      SendWr w;
      w.opcode = WrOpcode::rdma_write;
      w.num_sge = 1;
      w.sg_list[0] = {reinterpret_cast<uint64_t>(mine.data()), 4096, ck};
      w.remote_addr = raddr;
      w.rkey = r;
      (void)cqp->post_send(w);
      Completion x[16];
      (void)ccq->poll(x, 16);
    }
  }
  // Our copies of the child's ends: a child that dies early is an end of file here, not a hang.
  close(from_child[1]);
  close(to_child[0]);
  uint32_t child_qpn = 0;
  ASSERT_EQ(read(from_child[0], &child_qpn, 4), 4);
  const uint32_t my_qpn = qp->qpn();
  ASSERT_EQ(write(to_child[1], &my_qpn, 4), 4);
  // Short timers: 4.096 us << 10 = 4 ms, 3 retries.
  bring_up(b.get(), qp, child_qpn, v4(0x0a4d0001), 10, 3);
  const uint64_t raddr = reinterpret_cast<uint64_t>(buf.data());
  ASSERT_EQ(write(to_child[1], &raddr, 8), 8);
  ASSERT_EQ(write(to_child[1], &rkey, 4), 4);
  uint8_t ready = 0;
  ASSERT_EQ(read(from_child[0], &ready, 1), 1);
  // The child's WRITEs land in our buffer.
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (buf[100] != 0x33 && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(buf[100], 0x33);

  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  // Daemon A frees the child's QP; our SENDs to it now go unanswered, and
  // the requester gives up with the transport retry error (IBA C9-141).
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  SendWr s;
  s.opcode = WrOpcode::send;
  s.num_sge = 1;
  s.sg_list[0] = {raddr, 64, lkey};
  ASSERT_EQ(qp->post_send(s), 0);
  Completion got;
  bool have = false;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!have && std::chrono::steady_clock::now() < until) have = cq->poll(&got, 1) == 1;
  ASSERT_TRUE(have);
  EXPECT_EQ(got.status, WcStatus::retry_exc_err) << to_string(got.status);

  // Daemon A is healthy and its stats show the child gone.
  ASSERT_TRUE(alive(d_[0]) && alive(d_[1]));
  std::unique_ptr<Context> a;
  ASSERT_EQ(Context::open(d_[0].sock, &a), 0);
  std::string json;
  ASSERT_EQ(a->stats(&json), 0);
  EXPECT_NE(json.find("\"clients_closed\":1"), std::string::npos) << json;
  EXPECT_NE(json.find("\"qps\":[]"), std::string::npos) << json;
  a.reset();
  b.reset();
  std::string out;
  EXPECT_EQ(selftest({"--qps", "8"}, &out), 0) << out;
}

TEST_F(TwoDaemons, AClientScribblingOverItsSharedMemoryHurtsOnlyItself) {
  start();
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      std::unique_ptr<Context> a;
      if (Context::open(d_[0].sock, &a) != 0) _exit(10);
      uint32_t pd = 0;
      client::Cq* cq = nullptr;
      client::Qp* qp = nullptr;
      client::Srq* srq = nullptr;
      if (a->alloc_pd(&pd) || a->create_cq(64, &cq) || a->create_srq(pd, 16, 1, 0, &srq)) _exit(11);
      client::QpCreate c;
      c.pd = pd;
      c.send_cq = c.recv_cq = cq;
      c.cap = {16, 16, 1, 1, 0};
      if (a->create_qp(c, &qp) != 0) _exit(12);
      // Garbage over every droce region this process maps: rings, indexes,
      // doorbell flags, the context page.
      std::mt19937 rng(seed);
      std::ifstream maps("/proc/self/maps");
      std::string line;
      while (std::getline(maps, line)) {
        if (line.find("memfd:droce-") == std::string::npos || line.find("droce-mr") != std::string::npos) continue;
        uintptr_t lo = 0, hi = 0;
        if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) != 2) continue;
        for (uintptr_t p = lo; p + 4 <= hi; p += 4) *reinterpret_cast<uint32_t*>(p) = rng();
      }
      // And ring every doorbell there is, so droced reads the garbage.
      RecvWr r;
      (void)qp->post_recv(r);
      (void)srq->post_recv(r);
      (void)cq->req_notify(false);
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      _exit(0);
    }
    const int st = wait_for(child, 30);
    EXPECT_NE(st, -1);
  }
  ASSERT_TRUE(alive(d_[0])) << slurp(d_[0].log);
  std::string out;
  EXPECT_EQ(selftest({"--qps", "8"}, &out), 0) << out;
}

TEST_F(TwoDaemons, StoppingDroceTurnsItsClientsFatal) {
  start();
  std::unique_ptr<Context> a;
  ASSERT_EQ(Context::open(d_[0].sock, &a), 0);
  uint32_t pd = 0;
  client::Cq* cq = nullptr;
  client::Qp* qp = nullptr;
  ASSERT_NO_FATAL_FAILURE(make_rc(a.get(), &pd, &cq, &qp));
  bring_up(a.get(), qp, 0x999, v4(0x0a4d0002), 14, 7);
  RecvWr r;
  ASSERT_EQ(qp->post_recv(r), 0);
  client::AsyncEvent ev{};
  // Only the port's coming up (the memif peer connects about now) may have been reported.
  int rc;
  while ((rc = a->get_async_event(&ev, 0)) == 0) EXPECT_EQ(ev.type, 9u);  // IBV_EVENT_PORT_ACTIVE
  EXPECT_EQ(rc, -EAGAIN);

  const pid_t pid = d_[0].pid;
  const int st = stop(d_[0], SIGTERM);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  // Its EAL runtime directory (root's: /run/dpdk/<file-prefix>, the prefix naming its pid) went
  // with it: a service restarted often left one behind per start.
  if (geteuid() == 0) {
    EXPECT_FALSE(std::filesystem::exists("/run/dpdk/droced-droce0-" + std::to_string(pid)));
  }
  ASSERT_EQ(a->get_async_event(&ev, 5000), 0);
  EXPECT_EQ(ev.type, 8u);  // IBV_EVENT_DEVICE_FATAL
  EXPECT_TRUE(a->fatal());
  // The posted receive was flushed into the CQ before droced went away.
  Completion got;
  ASSERT_EQ(cq->poll(&got, 1), 1);
  EXPECT_EQ(got.status, WcStatus::wr_flush_err);
  SendWr w;
  EXPECT_EQ(qp->post_send(w), -EIO);
  uint32_t pd2 = 0;
  EXPECT_EQ(a->alloc_pd(&pd2), -EIO);
}

TEST_F(TwoDaemons, RuntimeDirectoriesOfKilledDaemonsAreSweptAtStart) {
  if (geteuid() != 0) GTEST_SKIP() << "root's EAL runtime directories are under /run/dpdk";
  // A droced of this name that was killed (no exit of its own to remove it): its pid is gone.
  const pid_t gone = fork();
  if (gone == 0) _exit(0);
  ASSERT_GT(gone, 0);
  waitpid(gone, nullptr, 0);
  const std::string stale = "/run/dpdk/droced-droce0-" + std::to_string(gone);
  fs::create_directories(stale);
  { std::ofstream(stale + "/dpdk_telemetry.v2") << ""; }
  // One whose process lives (this test's): not touched.
  const std::string live = "/run/dpdk/droced-droce0-" + std::to_string(getpid());
  fs::create_directories(live);
  start();
  // Expect: the dead one's directory removed by the droced that started; the live one kept.
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(live));
  fs::remove_all(live);
  fs::remove_all(stale);
}

TEST_F(TwoDaemons, ControlSocketGarbageIsRefusedAndTheDaemonServesOn) {
  start();
  using namespace abi::ctl;
  {  // A different major version: a clear -EPROTO, then the door closes.
    std::unique_ptr<Context> dummy;
    core::Fd s;
    ASSERT_EQ(core::seqpacket_connect(d_[0].sock, &s), 0);
    auto msg = encode(MsgType::hello, 1, HelloRequest{});
    msg[4] = kAbiMajor + 1;
    ASSERT_EQ(core::send_message(s.get(), msg), 0);
    std::vector<uint8_t> in;
    std::vector<core::Fd> fds;
    ASSERT_GT(core::receive_message(s.get(), &in, kMaxMessage, &fds), 0);
    CtlHeader h;
    std::memcpy(&h, in.data(), sizeof h);
    EXPECT_EQ(h.status, -EPROTO);
    EXPECT_EQ(core::receive_message(s.get(), &in, kMaxMessage, &fds), 0);  // closed
  }
  {  // Random bytes, and a request before hello.
    std::mt19937 rng(7);
    for (int i = 0; i < 50; ++i) {
      core::Fd s;
      ASSERT_EQ(core::seqpacket_connect(d_[0].sock, &s), 0);
      std::vector<uint8_t> junk(1 + rng() % 300);
      for (auto& b : junk) b = static_cast<uint8_t>(rng());
      if (i % 2 == 0 && junk.size() >= sizeof(CtlHeader)) {
        auto m = encode(MsgType::create_qp, 1, CreateQpRequest{});
        std::memcpy(junk.data(), m.data(), sizeof(CtlHeader));
        junk.resize(m.size());
      }
      (void)core::send_message(s.get(), junk);
    }
  }
  ASSERT_TRUE(alive(d_[0]));
  std::string out;
  EXPECT_EQ(selftest({"--qps", "4"}, &out), 0) << out;
  // The CLI reads the same daemon: its GIDs, as a table and as JSON.
  const std::string cli_log = dir_ + "/cli.log";
  for (const char* fmt : {"--json", ""}) {
    std::vector<std::string> args = {env_or("DROCE_BIN", "apps/droce"), "gids", "--socket", d_[0].sock};
    if (*fmt) args.push_back(fmt);
    fs::remove(cli_log);
    const int st = wait_for(spawn(args, cli_log), 30);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    const std::string text = slurp(cli_log);
    EXPECT_NE(text.find("10.77.0.1"), std::string::npos) << text;
    EXPECT_EQ(text.find("\"address\":\"10.77.0.1\"") != std::string::npos, *fmt != '\0') << text;
  }
}


// One client registering 8 GiB does not hold up another (issue #36): droced populates a large
// registration's page tables on its control arena (droced/control_jobs.h, TBB), the request
// pending meanwhile, while the worker serves its other clients. Client B creates a PD, a CQ and a
// QP, and the daemon answers a stats query, all while A's registration is still being populated;
// then A's completes, and its mapping is unmapped on the arena after dereg. The memory is a SysV
// segment (droce shares it as it is, no copy on the client's side), so what takes long is
// droced's part: populating 8 GiB of pages it did not have.
TEST_F(TwoDaemons, ARegistrationOfEightGibDoesNotHoldUpAnotherClient) {
  constexpr size_t kLen = size_t{8} << 30;
  const int shm = shmget(IPC_PRIVATE, kLen, IPC_CREAT | 0600);
  if (shm < 0) GTEST_SKIP() << "no 8 GiB SysV segment here: " << std::strerror(errno);
  void* mem = shmat(shm, nullptr, 0);
  shmctl(shm, IPC_RMID, nullptr);  // gone with its last attachment, whatever happens below
  ASSERT_NE(mem, reinterpret_cast<void*>(-1)) << std::strerror(errno);
  start();
  std::unique_ptr<Context> a, b;
  ASSERT_EQ(Context::open(d_[0].sock, &a), 0);
  ASSERT_EQ(Context::open(d_[0].sock, &b), 0);
  uint32_t pd_a = 0;
  ASSERT_EQ(a->alloc_pd(&pd_a), 0);
  std::atomic<bool> registered{false};
  int reg_rc = -1;
  uint32_t lkey = 0, rkey = 0;
  std::thread reg([&] {
    reg_rc = a->reg_mr(pd_a, mem, kLen, kAccessLocalWrite | kAccessRemoteWrite, &lkey, &rkey);
    registered = true;
  });
  // A's request reaches droced and becomes a job.
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (stat_of(d_[0].sock, "control_jobs_running") != 1 && !registered &&
         std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (stat_of(d_[0].sock, "control_jobs_running") != 1) {
    reg.join();
    FAIL() << "A's registration never ran as a job (registered: " << registered << ", rc " << reg_rc << ")";
  }
  uint32_t pd_b = 0;
  client::Cq* cq = nullptr;
  client::Qp* qp = nullptr;
  make_rc(b.get(), &pd_b, &cq, &qp);
  EXPECT_GE(stat_of(d_[0].sock, "clients_accepted"), 2);
  // All of that while A's registration was still in droced's hands.
  EXPECT_FALSE(registered.load());
  EXPECT_EQ(stat_of(d_[0].sock, "control_jobs_running"), 1);
  reg.join();
  ASSERT_EQ(reg_rc, 0);
  EXPECT_EQ(stat_of(d_[0].sock, "control_jobs_completed"), 1);
  EXPECT_EQ(stat_of(d_[0].sock, "control_jobs_failed"), 0);  // populated, not left to fault in
  ASSERT_EQ(a->dereg_mr(lkey), 0);
  while (stat_of(d_[0].sock, "control_jobs_released") != 1 && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(stat_of(d_[0].sock, "control_jobs_released"), 1);
  shmdt(mem);
}

// Device memory and completion timestamps (ABI minor 11). B's device memory is droced B's region,
// mapped by B as well: A's RDMA WRITE into a zero-based MR on it is what B reads in its mapping,
// and the bytes B puts there are what A's READ returns. A CQ created with timestamps carries the
// time droced pushed each completion (CLOCK_MONOTONIC, this host's), one without carries 0.
TEST_F(TwoDaemons, DeviceMemoryIsTheDaemonsAndTimestampedCompletionsCarryTheirTime) {
  start();
  std::unique_ptr<Context> a, b;
  ASSERT_EQ(Context::open(d_[0].sock, &a), 0);
  ASSERT_EQ(Context::open(d_[1].sock, &b), 0);
  abi::ctl::QueryDeviceReply dev{};
  ASSERT_EQ(b->query_device(&dev), 0);
  EXPECT_EQ(dev.device_caps & abi::ctl::kDeviceCapCompletionTimestamp, abi::ctl::kDeviceCapCompletionTimestamp);
  ASSERT_GE(dev.max_dm_size, 8192u);

  client::Dm* dm = nullptr;
  EXPECT_EQ(b->alloc_dm(0, 0, &dm), -EINVAL);
  EXPECT_EQ(b->alloc_dm(dev.max_dm_size + 1, 0, &dm), -ENOMEM);
  EXPECT_EQ(b->alloc_dm(4096, 13, &dm), -EINVAL);  // aligned past a page
  ASSERT_EQ(b->alloc_dm(8192, 6, &dm), 0);
  EXPECT_EQ(dm->length(), 8192u);
  EXPECT_EQ(dm->data()[100], 0);
  uint32_t pd_b = 0;
  client::Cq* cq_b = nullptr;
  client::Qp* qp_b = nullptr;
  ASSERT_NO_FATAL_FAILURE(make_rc(b.get(), &pd_b, &cq_b, &qp_b));
  uint32_t lkey = 0, rkey = 0;
  constexpr uint32_t kDmAccess = kAccessZeroBased | kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
  EXPECT_EQ(b->reg_dm_mr(pd_b, dm, 0, 64, kAccessLocalWrite, &lkey, &rkey), -EINVAL);  // not zero-based
  EXPECT_EQ(b->reg_dm_mr(pd_b, dm, 4096, 4097, kDmAccess, &lkey, &rkey), -EINVAL);     // past its end
  EXPECT_EQ(b->reg_dm_mr(pd_b + 1000, dm, 0, 64, kDmAccess, &lkey, &rkey), -EINVAL);   // an unknown PD
  ASSERT_EQ(b->reg_dm_mr(pd_b, dm, 4096, 4096, kDmAccess, &lkey, &rkey), 0);           // the second page
  EXPECT_EQ(b->free_dm(dm), -EBUSY);

  uint32_t pd_a = 0;
  ASSERT_EQ(a->alloc_pd(&pd_a), 0);
  client::Cq* cq_a = nullptr;
  client::Cq* plain = nullptr;
  ASSERT_EQ(a->create_cq(64, &cq_a, 0, 0, /*timestamp=*/true), 0);
  ASSERT_EQ(a->create_cq(64, &plain), 0);
  client::Qp* qp_a = nullptr;
  ASSERT_EQ(a->create_qp(rc_create(pd_a, cq_a), &qp_a), 0);
  std::vector<uint8_t> buf(4096);
  uint32_t la = 0, ra = 0;
  ASSERT_EQ(a->reg_mr(pd_a, buf.data(), buf.size(), kAccessLocalWrite, &la, &ra), 0);
  ASSERT_NO_FATAL_FAILURE(bring_up(a.get(), qp_a, qp_b->qpn(), v4(0x0a4d0002), 14, 7));
  ASSERT_NO_FATAL_FAILURE(bring_up(b.get(), qp_b, qp_a->qpn(), v4(0x0a4d0001), 14, 7));

  auto run = [&](WrOpcode op, uint64_t remote, uint32_t len, Completion* done) {
    SendWr w;
    w.opcode = op;
    w.num_sge = 1;
    w.sg_list[0] = {reinterpret_cast<uint64_t>(buf.data()), len, la};
    w.remote_addr = remote;
    w.rkey = rkey;
    ASSERT_EQ(qp_a->post_send(w), 0);
    const uint64_t end = core::monotonic_ns() + 10'000'000'000ull;
    int n = 0;
    while ((n = cq_a->poll(done, 1)) == 0 && core::monotonic_ns() < end) {
    }
    ASSERT_EQ(n, 1);
    EXPECT_EQ(done->status, WcStatus::success) << to_string(done->status);
  };
  std::memcpy(buf.data(), "into device memory", 19);
  const uint64_t before = core::monotonic_ns();
  Completion done;
  ASSERT_NO_FATAL_FAILURE(run(WrOpcode::rdma_write, 16, 19, &done));  // offset 16 of the MR
  const uint64_t after = core::monotonic_ns();
  EXPECT_EQ(std::memcmp(dm->data() + 4096 + 16, "into device memory", 19), 0);
  EXPECT_GE(done.timestamp_ns, before);
  EXPECT_LE(done.timestamp_ns, after);
  std::memcpy(dm->data() + 4096 + 512, "out of it", 10);
  ASSERT_NO_FATAL_FAILURE(run(WrOpcode::rdma_read, 512, 10, &done));
  EXPECT_EQ(std::memcmp(buf.data(), "out of it", 10), 0);
  EXPECT_GE(done.timestamp_ns, after);
  // Outside the MR (which is 4096 bytes from offset 0): a remote access error.
  SendWr w;
  w.opcode = WrOpcode::rdma_write;
  w.num_sge = 1;
  w.sg_list[0] = {reinterpret_cast<uint64_t>(buf.data()), 32, la};
  w.remote_addr = 4096 - 16;
  w.rkey = rkey;
  ASSERT_EQ(qp_a->post_send(w), 0);
  const uint64_t end = core::monotonic_ns() + 10'000'000'000ull;
  while (cq_a->poll(&done, 1) == 0 && core::monotonic_ns() < end) {
  }
  EXPECT_EQ(done.status, WcStatus::rem_access_err) << to_string(done.status);
  EXPECT_EQ(std::memcmp(dm->data() + 8192 - 16, std::vector<uint8_t>(16).data(), 16), 0);

  // A CQ without timestamps: 0 (a QP moved to error flushes nothing into it; a fresh one's
  // completions do).
  client::Qp* qp_p = nullptr;
  ASSERT_EQ(a->create_qp(rc_create(pd_a, plain), &qp_p), 0);
  QpAttr at;
  at.qp_state = QpState::init;
  at.port_num = 1;
  ASSERT_EQ(a->modify_qp(qp_p, at, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags), 0);
  RecvWr r;
  r.num_sge = 1;
  r.sg_list[0] = {reinterpret_cast<uint64_t>(buf.data()), 64, la};
  ASSERT_EQ(qp_p->post_recv(r), 0);
  at = QpAttr{};
  at.qp_state = QpState::err;
  ASSERT_EQ(a->modify_qp(qp_p, at, kAttrState), 0);
  const uint64_t until = core::monotonic_ns() + 10'000'000'000ull;
  int n = 0;
  while ((n = plain->poll(&done, 1)) == 0 && core::monotonic_ns() < until) {
  }
  ASSERT_EQ(n, 1);
  EXPECT_EQ(done.status, WcStatus::wr_flush_err);
  EXPECT_EQ(done.timestamp_ns, 0u);

  ASSERT_EQ(b->dereg_mr(lkey), 0);
  EXPECT_EQ(b->free_dm(dm), 0);
  EXPECT_TRUE(alive(d_[0]) && alive(d_[1]));
}

}  // namespace
}  // namespace droce
