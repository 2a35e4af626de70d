// rte_intr_instance_alloc and its setters (eal_interrupt_barrier) are still
// experimental in DPDK 22.11.
#define ALLOW_EXPERIMENTAL_API

#include "net/eal.h"

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_interrupts.h>
#include <dirent.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <cerrno>
#include <cstring>
#include <string>
#include <fstream>
#include <sstream>

#include "core/log.h"

namespace droce::net {

unsigned long free_hugepages() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("HugePages_Free:", 0) == 0) {
      std::istringstream fields(line.substr(15));
      unsigned long n = 0;
      fields >> n;
      return n;
    }
  }
  return 0;
}

std::vector<std::string> eal_arguments(const EalOptions& opts) {
  std::vector<std::string> args{opts.program, "-l", opts.lcores};
  const bool wants_devices =
      std::any_of(opts.extra.begin(), opts.extra.end(), [](const std::string& a) {
        return a == "-a" || a == "--allow" || a.rfind("--allow=", 0) == 0 ||
               a.rfind("-a", 0) == 0;
      });
  if (!wants_devices) args.push_back("--no-pci");
  if (!opts.prefer_hugepages || free_hugepages() == 0) {
    // --no-huge implies legacy memory, which --in-memory refuses; --no-shconf
    // gives the same independence between processes.
    args.insert(args.end(), {"--no-huge", "-m", std::to_string(opts.memory_mb), "--no-shconf"});
  } else {
    args.push_back("--in-memory");
  }
  args.insert(args.end(), opts.extra.begin(), opts.extra.end());
  return args;
}

bool eal_interrupt_barrier() {
  const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) return false;
  rte_intr_handle* h = rte_intr_instance_alloc(RTE_INTR_INSTANCE_F_PRIVATE);
  std::atomic<bool> ran{false};
  auto cb = [](void* arg) { static_cast<std::atomic<bool>*>(arg)->store(true, std::memory_order_release); };
  bool ok = h != nullptr && rte_intr_fd_set(h, fd) == 0 && rte_intr_type_set(h, RTE_INTR_HANDLE_EXT) == 0 &&
            rte_intr_callback_register(h, cb, &ran) == 0;
  if (ok) {
    const uint64_t one = 1;
    ok = ::write(fd, &one, sizeof one) == sizeof one;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (ok && !ran.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    ok = ok && ran.load(std::memory_order_acquire);
    // Ours has run, so the thread is not inside it: this cannot find it busy (-EAGAIN).
    while (rte_intr_callback_unregister(h, cb, &ran) == -EAGAIN) std::this_thread::yield();
  }
  rte_intr_instance_free(h);
  ::close(fd);
  return ok;
}

void eal_stop() {
  if (!eal_interrupt_barrier()) DROCE_LOG(WARNING, net, "EAL's interrupt thread did not answer; closing anyway");
  uint16_t port;
  RTE_ETH_FOREACH_DEV(port) {
    if (rte_eth_dev_stop(port) != 0) DROCE_LOG(WARNING, net, "port %u did not stop at exit", port);
    rte_eth_dev_close(port);
  }
  eal_interrupt_barrier();
}

namespace {
void remove_runtime_dir(const std::string& dir) {
  for (const char* f : {"dpdk_telemetry.v2", "dpdk_telemetry"}) (void)::unlink((dir + "/" + f).c_str());
  if (::rmdir(dir.c_str()) != 0 && errno != ENOENT)
    DROCE_LOG(INFO, net, "EAL runtime directory %s stays: %s", dir.c_str(), std::strerror(errno));
}
}  // namespace

void eal_remove_runtime_dir() {
  const std::string dir = rte_eal_get_runtime_dir();
  if (!dir.empty()) remove_runtime_dir(dir);
}

void eal_sweep_runtime_dirs(const std::string& stem) {
  const std::string own = rte_eal_get_runtime_dir();
  const size_t slash = own.rfind('/');
  if (stem.empty() || slash == std::string::npos) return;
  const std::string base = own.substr(0, slash);
  DIR* d = ::opendir(base.c_str());
  if (d == nullptr) return;
  unsigned swept = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() <= stem.size() || name.compare(0, stem.size(), stem) != 0) continue;
    const std::string digits = name.substr(stem.size());
    if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(digits));
    if (base + "/" + name == own || pid <= 0 || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    remove_runtime_dir(base + "/" + name);
    ++swept;
  }
  ::closedir(d);
  if (swept != 0) DROCE_LOG(INFO, net, "removed %u runtime directories of %s* left by processes gone", swept, stem.c_str());
}

int eal_start(const EalOptions& opts) {
  static bool started = false;
  if (started) return -EALREADY;
  std::vector<std::string> args = eal_arguments(opts);
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int rc = rte_eal_init(static_cast<int>(args.size()), argv.data());
  if (rc < 0) {
    int err = rte_errno;
    DROCE_LOG(ERR, net, "rte_eal_init failed: %s", rte_strerror(err));
    return -err;
  }
  started = true;
  return 0;
}

rte_mempool* create_mbuf_pool(const char* name, unsigned count, uint16_t data_room) {
  rte_mempool* mp = rte_pktmbuf_pool_create(name, count, std::min(count / 8, 256u), 0,
                                            static_cast<uint16_t>(data_room + RTE_PKTMBUF_HEADROOM),
                                            static_cast<int>(rte_socket_id()));
  if (mp == nullptr) {
    DROCE_LOG(ERR, net, "cannot create mbuf pool %s (%u mbufs): %s", name, count,
              rte_strerror(rte_errno));
  }
  return mp;
}

}  // namespace droce::net
