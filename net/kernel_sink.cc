#include "net/kernel_sink.h"

#include <linux/filter.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>

namespace droce::net {

namespace {

int bind_sink(int family, const std::string& ifname, uint16_t udp_port, core::Fd* out) {
  core::Fd fd(::socket(family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return -errno;
  // Everything the socket would receive is dropped by the filter, before any
  // buffering. The filter goes on before bind, so nothing is ever queued.
  sock_filter drop_all[] = {{BPF_RET | BPF_K, 0, 0, 0}};
  sock_fprog prog{1, drop_all};
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) != 0) return -errno;
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_BINDTODEVICE, ifname.c_str(), static_cast<socklen_t>(ifname.size())) != 0)
    return -errno;
  int rc;
  if (family == AF_INET6) {
    const int off = 0;
    if (::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off) != 0) return -errno;
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(udp_port);
    rc = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a);
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(udp_port);
    rc = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  if (rc != 0) return -errno;
  *out = std::move(fd);
  return 0;
}

}  // namespace

int open_udp_sink(const std::string& ifname, uint16_t udp_port, core::Fd* out) {
  if (ifname.empty()) return -ENODEV;
  const int rc = bind_sink(AF_INET6, ifname, udp_port, out);
  if (rc != -EAFNOSUPPORT) return rc;
  return bind_sink(AF_INET, ifname, udp_port, out);
}

}  // namespace droce::net
