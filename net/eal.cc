#include "net/eal.h"

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>

#include <algorithm>
#include <cerrno>
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
