#pragma once
// What verbs_api_probe and verbs_ext_probe share: their "ok:"/"FAIL:" lines and failure count,
// the setup failure that ends a probe (status 2), a monotonic clock, opening a device by name,
// and bringing an RC QP to RTS toward a peer over RoCE (GID index 1, port 1, path MTU 1024).
// Header-only: each probe is one translation unit.
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace probe {

inline int failures = 0;

inline void check(bool ok, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::printf("%s: ", ok ? "ok" : "FAIL");
  std::vprintf(fmt, ap);
  std::printf("\n");
  std::fflush(stdout);
  va_end(ap);
  if (!ok) ++failures;
}

[[noreturn]] inline void die(const char* what) {
  std::printf("FAIL: setup: %s (errno %d, %s)\n", what, errno, std::strerror(errno));
  std::exit(2);
}

inline uint64_t clock_ns(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000u + uint64_t(ts.tv_nsec);
}
inline uint64_t now_ms() { return clock_ns(CLOCK_MONOTONIC) / 1'000'000; }

/// The device named `name`, opened; dies when there is none.
inline ibv_context* open_device(const char* name) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) die("ibv_get_device_list");
  ibv_context* ctx = nullptr;
  for (int i = 0; i < n; ++i)
    if (std::strcmp(ibv_get_device_name(list[i]), name) == 0) ctx = ibv_open_device(list[i]);
  ibv_free_device_list(list);
  if (ctx == nullptr) die("ibv_open_device");
  return ctx;
}

/// RTR -> RTS of an RC QP in INIT toward `remote_qpn` at `gid`; dies when a step is refused.
/// An XRC QP takes one side's attributes only (the kernel's rules): a receive QP the
/// responder's (`requester` false), a send QP the requester's (`responder` false).
inline void rc_to_rts(ibv_qp* qp, uint32_t remote_qpn, const ibv_gid& gid, bool responder = true,
                      bool requester = true, uint8_t timeout = 14) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = remote_qpn;
  a.rq_psn = 0;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = gid;
  a.ah_attr.grh.sgid_index = 1;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
  if (responder) mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  if (ibv_modify_qp(qp, &a, mask) != 0) die("modify to RTR");
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = timeout;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = 0;
  a.max_rd_atomic = 4;
  mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN;
  if (requester) mask |= IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  if (ibv_modify_qp(qp, &a, mask) != 0) die("modify to RTS");
}

}  // namespace probe
