#pragma once
// Finding the kernel sockets behind af_packet and af_xdp queues, to use as
// their RX wake-up descriptors.
//
// DPDK 22.11's net_af_packet and net_af_xdp give no RX interrupt through
// ethdev, but each RX queue is a kernel socket that epoll reports readable
// while frames wait in the queue's ring and wakes when the kernel adds one.
// Used as a wake-up, such a descriptor is like net_tap's: arming and
// acknowledging do nothing, and nothing may read it (a read would take a
// frame). The PMDs keep these sockets in private structures, so:
//   - af_packet: the TPACKET_V2 socket is the first member of the PMD's
//     queue behind the queue's data pointer (rte_eth_fp_ops). Private layout,
//     so it is used only if it is an AF_PACKET socket bound to the port's
//     interface, one per queue, all different (af_packet_queue_sockets);
//   - af_xdp: the XSK socket is the one new AF_XDP socket the queue's setup
//     left among the process's descriptors: list them (process_sockets)
//     before and after each rte_eth_rx_queue_setup, which is where 22.11
//     makes it, and take what appeared (new_xdp_sockets); then
//     check_af_xdp_sockets decides whether they may be used.
// Anything else (not exactly one per queue, not that kind of socket): a
// NOTICE log line and no wake-up; the port stays polled.
//
// Control path only (they read /proc and call getsockopt), at the port's
// start, from the thread that opens it.

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace droce::net {

/// This process's sockets as (descriptor, inode), sorted: the inode tells a
/// socket made meanwhile from one closed meanwhile whose number was reused.
std::vector<std::pair<int, ino_t>> process_sockets();

/// The AF_XDP sockets in `after` that were not in `before`, ascending.
std::vector<int> new_xdp_sockets(const std::vector<std::pair<int, ino_t>>& before,
                                 const std::vector<std::pair<int, ino_t>>& after);

/// net_af_packet port `port_id`: each of its `rx_queues` RX queues' TPACKET_V2
/// socket, checked as the header says (`ifname`'s index is looked up with an
/// ioctl on `ctl_fd`, a socket in the port's namespace). True with *out one
/// descriptor per queue; false with *out empty (and a NOTICE) otherwise.
bool af_packet_queue_sockets(uint16_t port_id, uint16_t rx_queues, const std::string& ifname, int ctl_fd,
                             std::vector<int>* out);

/// net_af_xdp port `port_id`: whether `xsks` (per RX queue, the AF_XDP socket
/// its setup made, or -1) may be the queues' wake-up descriptors, and whether
/// the port may run at all. Every af_xdp port goes through this, wake-ups
/// asked (*wakeups true on entry) or not: DPDK 22.11's rx_burst on an empty
/// ring poll()s a zero-copy socket with busy polling off for up to 1 s, and
/// such a port is refused with -ENOTSUP (leave the PMD's busy_budget devarg
/// at its default). Otherwise 0, with *wakeups left true only when every
/// queue's socket was found and is still an AF_XDP socket.
int check_af_xdp_sockets(uint16_t port_id, const std::vector<int>& xsks, uint16_t rx_queues, bool* wakeups);

}  // namespace droce::net
