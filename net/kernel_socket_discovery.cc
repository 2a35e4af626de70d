#include "net/kernel_socket_discovery.h"

#include <dirent.h>
#include <linux/if_packet.h>
#include <linux/if_xdp.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <rte_ethdev.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "core/log.h"

#ifndef AF_XDP
#define AF_XDP 44
#endif
#ifndef SOL_XDP
#define SOL_XDP 283
#endif
#ifndef SO_PREFER_BUSY_POLL
#define SO_PREFER_BUSY_POLL 69
#endif

namespace droce::net {

std::vector<std::pair<int, ino_t>> process_sockets() {
  std::vector<std::pair<int, ino_t>> out;
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return out;
  const int own = ::dirfd(d);
  while (const dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == own) continue;
    struct stat st {};
    if (::fstat(static_cast<int>(fd), &st) == 0 && S_ISSOCK(st.st_mode))
      out.emplace_back(static_cast<int>(fd), st.st_ino);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<int> new_xdp_sockets(const std::vector<std::pair<int, ino_t>>& before,
                                 const std::vector<std::pair<int, ino_t>>& after) {
  std::vector<int> out;
  for (const auto& s : after) {
    if (std::binary_search(before.begin(), before.end(), s)) continue;
    int domain = 0;
    socklen_t len = sizeof domain;
    if (getsockopt(s.first, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 && domain == AF_XDP) out.push_back(s.first);
  }
  return out;
}

bool af_packet_queue_sockets(uint16_t port_id, uint16_t rx_queues, const std::string& ifname, int ctl_fd,
                             std::vector<int>* out) {
  // Each queue is a TPACKET_V2 socket that poll/epoll reports readable while a
  // frame in its ring belongs to user space, and wakes when the kernel puts
  // one there. The queue's data pointer, public for the inline rx_burst
  // (rte_eth_fp_ops), is the PMD's struct pkt_rx_queue, whose first member
  // is that socket: checked before it is trusted.
  out->clear();
  ifreq ifr{};
  std::snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname.c_str());
  if (ctl_fd < 0 || ifname.empty() || ioctl(ctl_fd, SIOCGIFINDEX, &ifr) != 0) return false;
  for (uint16_t q = 0; q < rx_queues; ++q) {
    void* rxq = rte_eth_fp_ops[port_id].rxq.data != nullptr ? rte_eth_fp_ops[port_id].rxq.data[q] : nullptr;
    const int fd = rxq != nullptr ? *static_cast<const int*>(rxq) : -1;
    int domain = 0;
    socklen_t len = sizeof domain;
    sockaddr_ll sll{};
    socklen_t slen = sizeof sll;
    const bool ok = fd >= 0 && getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 && domain == AF_PACKET &&
                    getsockname(fd, reinterpret_cast<sockaddr*>(&sll), &slen) == 0 &&
                    sll.sll_ifindex == ifr.ifr_ifindex &&
                    std::find(out->begin(), out->end(), fd) == out->end();
    if (!ok) {
      DROCE_LOG(NOTICE, net, "port %u (net_af_packet): RX queue %u's socket not found; polled only", port_id, q);
      out->clear();
      return false;
    }
    out->push_back(fd);
  }
  return true;
}

int check_af_xdp_sockets(uint16_t port_id, const std::vector<int>& xsks, uint16_t rx_queues, bool* wakeups) {
  // Each RX queue is an AF_XDP (XSK) socket that poll/epoll reports readable
  // while its RX ring holds a frame rx_burst has not taken (Linux xsk_poll:
  // EPOLLIN unless the ring is empty), and whose waiters are woken when the
  // kernel adds one (xsk_flush -> sock_def_readable).
  //
  // rx_burst must never block, and in 22.11 it can. Read in
  // drivers/net/af_xdp/rte_eth_af_xdp.c at v22.11 (same at v22.11.11): on an
  // empty RX ring af_xdp_rx_zc (the path built when the kernel headers have
  // XDP_UMEM_UNALIGNED_CHUNK_FLAG, as Debian's have; it logs "Zero copy
  // between umem and mbuf enabled") does
  //     if (rxq->busy_budget) recvfrom(fd, NULL, 0, MSG_DONTWAIT, NULL, NULL);
  //     else if (xsk_ring_prod__needs_wakeup(fq)) poll(&rxq->fds[0], 1, 1000);
  // (af_xdp_rx_cp, built otherwise, always takes the poll branch). That poll
  // waits up to 1 s for a frame. It needs busy polling off: busy_budget=0
  // given, or the kernel refused SO_PREFER_BUSY_POLL, SO_BUSY_POLL or
  // SO_BUSY_POLL_BUDGET (configure_preferred_busy_poll then unsets them and
  // zeroes busy_budget; they need CAP_NET_ADMIN to raise, Linux >= 5.11). And
  // it needs the fill ring flagged XDP_RING_NEED_WAKEUP (the PMD binds with
  // XDP_USE_NEED_WAKEUP): in Linux only zero-copy drivers set that flag
  // (xsk_set_rx_need_wakeup is a driver call; the copy path __xsk_rcv never
  // sets it), so a copy-mode socket (a veth, any driver without XSK
  // zero-copy) cannot block there. busy_budget defaults to 64, and then the
  // empty path is recvfrom(MSG_DONTWAIT): xsk_recvmsg busy-polls the NAPI
  // context once at most (sk_busy_loop(sk, 1)) and returns. So leave
  // busy_budget at its default: a port whose sockets are zero-copy with
  // busy polling off is refused here (SO_PREFER_BUSY_POLL reads 1 exactly
  // when the PMD's busy_budget is > 0). Busy polling does not starve a
  // sleeper with the kernel's defaults: the socket's SO_BUSY_POLL applies to
  // its own recv/poll, not to epoll (net.core.busy_poll 0), and
  // SO_PREFER_BUSY_POLL defers the device's interrupts only when its NAPI
  // has napi_defer_hard_irqs with gro_flush_timeout (or, Linux >= 6.13,
  // irq_suspend_timeout) set, all 0 by default, and then for that timeout.
  // A side effect worth knowing: in copy mode xsk_poll (so also epoll) sends
  // what the queue's TX ring holds.
  const bool all_found = xsks.size() == rx_queues && std::find(xsks.begin(), xsks.end(), -1) == xsks.end();
  if (!all_found) {
    if (*wakeups)
      DROCE_LOG(NOTICE, net, "port %u (net_af_xdp): RX queues' XSK sockets not found; no wake-up, polled only",
                port_id);
    *wakeups = false;
    return 0;
  }
  for (uint16_t q = 0; q < rx_queues; ++q) {
    const int fd = xsks[q];
    int domain = 0;
    socklen_t len = sizeof domain;
    if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 || domain != AF_XDP) {
      DROCE_LOG(NOTICE, net, "port %u (net_af_xdp): RX queue %u's XSK socket %d is gone%s", port_id, q, fd,
                *wakeups ? "; no wake-up, polled only" : "");
      *wakeups = false;
      return 0;
    }
    int prefer = 0;
    len = sizeof prefer;
    const bool busy_poll = getsockopt(fd, SOL_SOCKET, SO_PREFER_BUSY_POLL, &prefer, &len) == 0 && prefer != 0;
    xdp_options opts{};
    len = sizeof opts;
    const bool zero_copy = getsockopt(fd, SOL_XDP, XDP_OPTIONS, &opts, &len) == 0 && (opts.flags & XDP_OPTIONS_ZEROCOPY);
    DROCE_LOG(DEBUG, net, "port %u (net_af_xdp): RX queue %u: XSK socket %d, %s, busy polling %s", port_id, q, fd,
              zero_copy ? "zero-copy" : "copy mode", busy_poll ? "on" : "off");
    if (zero_copy && !busy_poll) {
      DROCE_LOG(ERR, net,
                "port %u (net_af_xdp): RX queue %u is zero-copy with busy polling off (busy_budget=0, or no "
                "CAP_NET_ADMIN): DPDK 22.11's rx_burst would then wait up to 1 s in poll() whenever the fill ring "
                "asks for a wake-up; leave busy_budget at its default",
                port_id, q);
      return -ENOTSUP;
    }
  }
  return 0;
}

}  // namespace droce::net
