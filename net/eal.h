#pragma once
// Starting DPDK's EAL, and the mbuf pools every port and test needs.
//
// rte_eal_init works once per process, so every program (droced, each test
// binary, each benchmark) calls eal_start() exactly once, early, from its
// main thread. Control path only.

#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <string>
#include <vector>

namespace droce::net {

struct EalOptions {
  std::string program = "droce";
  /// Memory for EAL when there are no hugepages (MiB).
  unsigned memory_mb = 256;
  /// Use hugepages when the machine has free ones; --no-huge otherwise.
  bool prefer_hugepages = true;
  /// Lcore list (EAL -l).
  std::string lcores = "0";
  /// Extra arguments, passed through to EAL after droce's own.
  std::vector<std::string> extra;
};

/// The EAL argument vector droce uses for `opts`: --no-pci unless the extra
/// arguments allow devices; --in-memory with hugepages, or --no-huge -m N
/// --no-shconf without, so several processes can run side by side.
std::vector<std::string> eal_arguments(const EalOptions& opts);

/// Starts EAL with eal_arguments(opts). Returns 0, or -errno (as rte_errno)
/// with a log line saying why. A second call returns -EALREADY.
int eal_start(const EalOptions& opts);

/// Waits (up to 1 s) until EAL's interrupt thread has finished every
/// callback it had started, by having it run one of ours. Drivers (memif's
/// control channel) run callbacks there that may outlive their device's
/// removal; true when the barrier ran.
bool eal_interrupt_barrier();

/// Ends EAL for a process about to exit: the interrupt barrier, then every
/// port still open is stopped and closed (af_xdp takes its XDP program off
/// the netdev there). It does not call rte_eal_cleanup: in DPDK 22.11 that
/// unmaps EAL's memory while the interrupt thread, which it never stops, keeps
/// serving the drivers' sources; an event arriving afterwards (the far end of
/// a memif control channel closing late) made that thread read unmapped memory
/// (an ASan SEGV at exit of rocev2_engine_port, once in ~15 runs under load,
/// after the barrier of 5a1c887 made it rarer). droce's EAL is private
/// (--no-shconf, --in-memory or --no-huge), so the kernel reclaims everything
/// cleanup would have released when the process exits.
void eal_stop();

/// After eal_stop(), for a process whose --file-prefix is its own (droced's names its pid): removes
/// the EAL runtime directory (/run/dpdk/<prefix>). Without rte_eal_cleanup, DPDK 22.11 leaves its
/// telemetry socket there, so every start of a service left a directory behind in /run. Files
/// other than the telemetry sockets (none with --no-shconf or --in-memory) keep it.
void eal_remove_runtime_dir();

/// After eal_start(): removes the runtime directories beside this process's whose name is
/// `stem` followed by the pid of a process that no longer exists (a droced killed, or one that
/// crashed, could not remove its own), as eal_remove_runtime_dir() would have.
void eal_sweep_runtime_dirs(const std::string& stem);

/// Free 2 MiB or 1 GiB hugepages on this machine, from /proc/meminfo.
unsigned long free_hugepages();

/// A packet mbuf pool of `count` mbufs, each with `data_room` bytes of
/// buffer after the headroom. nullptr (and a log line) on failure.
rte_mempool* create_mbuf_pool(const char* name, unsigned count,
                              uint16_t data_room = RTE_MBUF_DEFAULT_DATAROOM);

}  // namespace droce::net
