// droced: the droce software HCA. See daemon.h and docs/droced.md.
//
//   droced --port net_memif0,role=server,socket=/tmp/m.sock --address 10.0.0.1

#include <rte_eal.h>
#include <sys/resource.h>

#include <csignal>
#include <cstdio>
#include <string>

#include "droced/config.h"
#include "droced/daemon.h"
#include "droced/worker.h"
#include "net/eal.h"

int main(int argc, char** argv) {
  using namespace droce;
  droced::DaemonConfig cfg;
  std::string err;
  const int prc = droced::parse_config(argc, argv, &cfg, &err);
  if (prc == 1) {
    std::fputs(droced::usage(), stdout);
    return 0;
  }
  if (prc != 0) {
    std::fprintf(stderr, "droced: %s\n%s", err.c_str(), droced::usage());
    return 2;
  }
  // Before EAL starts its threads, so that only the signalfd sees these.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  // Every client, completion channel and rdma_cm channel is a descriptor or two here; the
  // soft limit (often 1024) would cap them for everyone. Up to the hard one (droced uses epoll
  // and poll, never select).
  if (rlimit rl{}; getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
  }

  // Before EAL pins this thread to the main lcore's CPU.
  droced::Worker::remember_startup_affinity();
  net::EalOptions eal;
  eal.program = "droced";
  eal.lcores.clear();
  for (unsigned l : cfg.lcores) eal.lcores += (eal.lcores.empty() ? "" : ",") + std::to_string(l);
  eal.memory_mb = cfg.memory_mb;
  eal.extra = {"--file-prefix=droced-" + cfg.name + "-" + std::to_string(getpid()), "--log-level=lib.eal:error",
               "--log-level=pmd.*:error"};
  eal.extra.push_back("--main-lcore=" + std::to_string(cfg.lcores.front()));  // worker 0's
  if (!cfg.log_level.empty()) eal.extra.push_back("--log-level=droce.*:" + cfg.log_level);
  eal.extra.insert(eal.extra.end(), cfg.eal_args.begin(), cfg.eal_args.end());
  if (net::eal_start(eal) != 0) {
    std::fprintf(stderr, "droced: EAL did not start\n");
    return 1;
  }
  net::eal_sweep_runtime_dirs("droced-" + cfg.name + "-");  // those of killed droceds of this name
  int status;
  {
    droced::Daemon d;
    if (int rc = d.start(cfg); rc != 0) {
      std::fprintf(stderr, "droced: cannot start %s (%s)\n", cfg.name.c_str(), std::strerror(-rc));
      status = 1;
    } else {
      std::fprintf(stdout, "droced: %s ready\n", cfg.name.c_str());
      std::fflush(stdout);
      status = d.run();
    }
  }
  net::eal_stop();
  net::eal_remove_runtime_dir();  // its prefix names this process
  return status;
}
