#pragma once
// Logging: two tiers, as in DPDK.
//
// Control-path logs go through DPDK log types named "droce.<layer>", whose
// levels can be changed at run time (EAL's --log-level=droce.*:debug).
// Data-path logs (DROCE_DP_LOG) compile to nothing unless the build defines
// DROCE_DATAPATH_LOG; anything a packet can trigger must also be rate-limited
// by the caller, and counted before it is logged.
//
// Threading: safe from any thread (rte_log is).

#include <rte_log.h>

namespace droce::core {

enum class LogLayer { core, net, rocev2, offload, provider, app };

/// The DPDK log type for a layer. Registered on first use; thread-safe.
int log_type(LogLayer layer);

}  // namespace droce::core

#define DROCE_LOG(level, layer, fmt, ...)                                     \
  rte_log(RTE_LOG_##level, ::droce::core::log_type(::droce::core::LogLayer::layer), \
          "droce." #layer ": " fmt "\n" __VA_OPT__(, ) __VA_ARGS__)

#ifdef DROCE_DATAPATH_LOG
#define DROCE_DP_LOG(level, layer, fmt, ...) DROCE_LOG(level, layer, fmt __VA_OPT__(, ) __VA_ARGS__)
#else
#define DROCE_DP_LOG(level, layer, fmt, ...) \
  do {                                       \
  } while (0)
#endif
