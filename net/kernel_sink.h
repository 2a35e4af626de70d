#pragma once
// Keeping the kernel quiet on a netdev droce shares with it.
//
// A kernel-netdev port (net_af_packet) gives droce a copy of every frame
// while the kernel's own stack still receives the original. When the kernel
// owns the destination address of a RoCEv2 packet (the netdev carries the
// same IP as droce, or the IPv6 link-local address both derive from the one
// MAC), it looks for a UDP socket on port 4791, finds none and answers every
// packet with an ICMP port unreachable (rate-limited; UdpNoPorts counts them).
// open_udp_sink() binds that port on the netdev, in the calling thread's
// network namespace, with a socket filter that drops everything: the kernel
// then delivers each packet to a socket that discards it at once (no
// buffering, no wake-up) and stays silent. The kernel's rdma_rxe binds the
// same port for itself; with it loaded on the netdev the sink is -EADDRINUSE
// and not needed. net_af_xdp does not need it: its XDP program takes the
// frames away from the kernel altogether. docs/droced.md ("Sharing a netdev
// with the kernel") says what else to set.
//
// Threading: none. Errors: -errno (EADDRINUSE, EPERM, ENODEV for a netdev the
// namespace does not have).

#include <cstdint>
#include <string>

#include "core/unix_socket.h"

namespace droce::net {

/// An IPv6 socket (IPv4-mapped addresses too) bound to [::]:udp_port on
/// `ifname`, or IPv4 only where IPv6 is off.
int open_udp_sink(const std::string& ifname, uint16_t udp_port, core::Fd* out);

}  // namespace droce::net
