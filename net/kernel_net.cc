#include "net/kernel_net.h"

#include <linux/if_addr.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "net/frame_build.h"

namespace droce::net {

namespace {

constexpr size_t kNlAlign = 4;
constexpr size_t align_nl(size_t n) { return (n + kNlAlign - 1) & ~(kNlAlign - 1); }

int family_of(const IpAddr& a) { return is_ipv4_mapped(a) ? AF_INET : AF_INET6; }

// Appends one attribute (type, payload) at `off` in buf; returns the new offset.
size_t put_attr(uint8_t* buf, size_t off, uint16_t type, const void* data, uint16_t len) {
  rtattr a{};
  a.rta_len = uint16_t(RTA_LENGTH(len));
  a.rta_type = type;
  std::memcpy(buf + off, &a, sizeof a);
  std::memcpy(buf + off + RTA_LENGTH(0), data, len);
  return off + RTA_ALIGN(a.rta_len);
}

size_t put_ip(uint8_t* buf, size_t off, uint16_t type, const IpAddr& ip) {
  if (is_ipv4_mapped(ip)) return put_attr(buf, off, type, ip.data() + 12, 4);
  return put_attr(buf, off, type, ip.data(), 16);
}

void finish(uint8_t* buf, size_t len) {
  nlmsghdr h;
  std::memcpy(&h, buf, sizeof h);
  h.nlmsg_len = uint32_t(len);
  std::memcpy(buf, &h, sizeof h);
}

size_t start(uint8_t* buf, uint16_t type, uint16_t flags, uint32_t seq, const void* body, size_t body_len) {
  std::memset(buf, 0, kRequestBufferSize);
  nlmsghdr h{};
  h.nlmsg_type = type;
  h.nlmsg_flags = uint16_t(NLM_F_REQUEST | flags);
  h.nlmsg_seq = seq;
  std::memcpy(buf, &h, sizeof h);
  std::memcpy(buf + NLMSG_HDRLEN, body, body_len);
  return NLMSG_HDRLEN + align_nl(body_len);
}

bool read_ip(const uint8_t* data, size_t len, int family, IpAddr* out) {
  if (family == AF_INET && len == 4) {
    uint32_t v = (uint32_t{data[0]} << 24) | (uint32_t{data[1]} << 16) | (uint32_t{data[2]} << 8) | data[3];
    *out = ipv4_mapped(v);
    return true;
  }
  if (family == AF_INET6 && len == 16) {
    std::memcpy(out->data(), data, 16);
    return true;
  }
  return false;
}

// Walks the attributes after a fixed body of `body_len` bytes; false on bad lengths.
template <typename F>
bool for_each_attr(std::span<const uint8_t> msg, size_t body_len, F&& f) {
  size_t off = NLMSG_HDRLEN + align_nl(body_len);
  if (off > msg.size()) return false;
  while (off + sizeof(rtattr) <= msg.size()) {
    rtattr a;
    std::memcpy(&a, msg.data() + off, sizeof a);
    if (a.rta_len < sizeof(rtattr) || off + a.rta_len > msg.size()) return false;
    f(a.rta_type, msg.data() + off + RTA_LENGTH(0), size_t(a.rta_len - RTA_LENGTH(0)));
    off += RTA_ALIGN(a.rta_len);
  }
  return true;
}

// The common head of every parse_*: the header, errors, and the fixed body.
NlParse head(std::span<const uint8_t> msg, uint16_t want_a, uint16_t want_b, size_t body_len, int* err) {
  if (msg.size() < NLMSG_HDRLEN) return NlParse::malformed;
  nlmsghdr h;
  std::memcpy(&h, msg.data(), sizeof h);
  if (h.nlmsg_len > msg.size() || h.nlmsg_len < NLMSG_HDRLEN) return NlParse::malformed;
  if (h.nlmsg_type == NLMSG_DONE) return NlParse::done;
  if (h.nlmsg_type == NLMSG_ERROR) {
    if (h.nlmsg_len < NLMSG_HDRLEN + sizeof(nlmsgerr)) return NlParse::malformed;
    nlmsgerr e;
    std::memcpy(&e, msg.data() + NLMSG_HDRLEN, sizeof e);
    if (e.error == 0) return NlParse::ack;
    *err = e.error;  // already negative
    return NlParse::error;
  }
  if (h.nlmsg_type != want_a && h.nlmsg_type != want_b) return NlParse::other;
  if (h.nlmsg_len < NLMSG_HDRLEN + body_len) return NlParse::malformed;
  return NlParse::ok;
}

}  // namespace

bool KernelAddress::usable() const { return added && (flags & (IFA_F_TENTATIVE | IFA_F_DADFAILED)) == 0; }

size_t build_route_get(uint8_t* buf, uint32_t seq, const IpAddr& dst, const IpAddr& src, int oif) {
  rtmsg rt{};
  rt.rtm_family = uint8_t(family_of(dst));
  rt.rtm_dst_len = rt.rtm_family == AF_INET ? 32 : 128;
  size_t off = start(buf, RTM_GETROUTE, 0, seq, &rt, sizeof rt);
  off = put_ip(buf, off, RTA_DST, dst);
  if (!same_ip(src, IpAddr{}) && family_of(src) == rt.rtm_family) {
    // As a socket bound to the QP's source would ask: policy routing may pick by it.
    off = put_ip(buf, off, RTA_SRC, src);
  }
  if (oif > 0) off = put_attr(buf, off, RTA_OIF, &oif, sizeof oif);
  finish(buf, off);
  return off;
}

namespace {
// One neighbour request for `ip` on `ifindex`: a GET, or a NEWNEIGH with NTF_USE.
size_t neigh_request(uint8_t* buf, uint16_t type, uint16_t flags, uint8_t ndm_flags, uint32_t seq, int ifindex,
                     const IpAddr& ip) {
  ndmsg nd{};
  nd.ndm_family = uint8_t(family_of(ip));
  nd.ndm_ifindex = ifindex;
  nd.ndm_state = NUD_NONE;
  nd.ndm_flags = ndm_flags;
  size_t off = start(buf, type, flags, seq, &nd, sizeof nd);
  off = put_ip(buf, off, NDA_DST, ip);
  finish(buf, off);
  return off;
}
}  // namespace

size_t build_neigh_get(uint8_t* buf, uint32_t seq, int ifindex, const IpAddr& ip) {
  return neigh_request(buf, RTM_GETNEIGH, 0, 0, seq, ifindex, ip);
}

size_t build_neigh_use(uint8_t* buf, uint32_t seq, int ifindex, const IpAddr& ip) {
  return neigh_request(buf, RTM_NEWNEIGH, NLM_F_CREATE | NLM_F_ACK, NTF_USE, seq, ifindex, ip);
}

size_t build_addr_dump(uint8_t* buf, uint32_t seq) {
  ifaddrmsg ifa{};
  ifa.ifa_family = AF_UNSPEC;
  const size_t off = start(buf, RTM_GETADDR, NLM_F_DUMP, seq, &ifa, sizeof ifa);
  finish(buf, off);
  return off;
}

bool for_each_message(std::span<const uint8_t> buf,
                      const std::function<void(uint16_t type, std::span<const uint8_t> msg)>& f) {
  size_t off = 0;
  while (off + NLMSG_HDRLEN <= buf.size()) {
    nlmsghdr h;
    std::memcpy(&h, buf.data() + off, sizeof h);
    if (h.nlmsg_len < NLMSG_HDRLEN || off + h.nlmsg_len > buf.size()) return false;
    f(h.nlmsg_type, buf.subspan(off, h.nlmsg_len));
    off += align_nl(h.nlmsg_len);
  }
  return off >= buf.size();
}

NlParse parse_route(std::span<const uint8_t> msg, KernelRoute* out, int* err) {
  const NlParse p = head(msg, RTM_NEWROUTE, RTM_NEWROUTE, sizeof(rtmsg), err);
  if (p != NlParse::ok) return p;
  rtmsg rt;
  std::memcpy(&rt, msg.data() + NLMSG_HDRLEN, sizeof rt);
  KernelRoute r;
  r.type = rt.rtm_type;
  bool good = true;
  const bool ok = for_each_attr(msg, sizeof rt, [&](uint16_t type, const uint8_t* d, size_t len) {
    switch (type) {
      case RTA_OIF:
        if (len == 4) std::memcpy(&r.oif, d, 4);
        else good = false;
        break;
      case RTA_GATEWAY:
        good = good && read_ip(d, len, rt.rtm_family, &r.gateway);
        break;
      case RTA_VIA: {
        // An IPv4 route through an IPv6 next hop (RFC 5549): family, then address.
        if (len < 2) { good = false; break; }
        uint16_t fam;
        std::memcpy(&fam, d, 2);
        good = good && read_ip(d + 2, len - 2, fam, &r.gateway);
        break;
      }
      case RTA_PREFSRC:
        good = good && read_ip(d, len, rt.rtm_family, &r.prefsrc);
        break;
      case RTA_METRICS:
        // Nested: RTAX_* attributes of u32.
        for (size_t o = 0; o + sizeof(rtattr) <= len;) {
          rtattr a;
          std::memcpy(&a, d + o, sizeof a);
          if (a.rta_len < sizeof(rtattr) || o + a.rta_len > len) { good = false; break; }
          if (a.rta_type == RTAX_HOPLIMIT && a.rta_len == RTA_LENGTH(4)) {
            uint32_t v;
            std::memcpy(&v, d + o + RTA_LENGTH(0), 4);
            r.hop_limit = uint8_t(v > 255 ? 255 : v);
          }
          o += RTA_ALIGN(a.rta_len);
        }
        break;
      default:
        break;
    }
  });
  if (!ok || !good) return NlParse::malformed;
  *out = r;
  return NlParse::ok;
}

NlParse parse_neigh(std::span<const uint8_t> msg, KernelNeighbor* out, int* err) {
  const NlParse p = head(msg, RTM_NEWNEIGH, RTM_NEWNEIGH, sizeof(ndmsg), err);
  if (p != NlParse::ok) return p;
  ndmsg nd;
  std::memcpy(&nd, msg.data() + NLMSG_HDRLEN, sizeof nd);
  KernelNeighbor n;
  n.ifindex = nd.ndm_ifindex;
  n.state = nd.ndm_state;
  bool good = true, has_dst = false;
  const bool ok = for_each_attr(msg, sizeof nd, [&](uint16_t type, const uint8_t* d, size_t len) {
    if (type == NDA_DST) {
      has_dst = read_ip(d, len, nd.ndm_family, &n.ip);
      good = good && has_dst;
    } else if (type == NDA_LLADDR) {
      if (len == 6) {
        std::memcpy(n.lladdr.data(), d, 6);
        n.has_lladdr = true;
      } else if (len != 0) {
        good = false;  // not Ethernet
      }
    }
  });
  if (!ok || !good || !has_dst) return NlParse::malformed;
  *out = n;
  return NlParse::ok;
}

NlParse parse_addr(std::span<const uint8_t> msg, KernelAddress* out, int* err) {
  const NlParse p = head(msg, RTM_NEWADDR, RTM_DELADDR, sizeof(ifaddrmsg), err);
  if (p != NlParse::ok) return p;
  nlmsghdr h;
  std::memcpy(&h, msg.data(), sizeof h);
  ifaddrmsg ifa;
  std::memcpy(&ifa, msg.data() + NLMSG_HDRLEN, sizeof ifa);
  if (ifa.ifa_family != AF_INET && ifa.ifa_family != AF_INET6) return NlParse::other;
  KernelAddress a;
  a.ifindex = int(ifa.ifa_index);
  a.prefix_len = ifa.ifa_prefixlen;
  a.flags = ifa.ifa_flags;
  a.added = h.nlmsg_type == RTM_NEWADDR;
  bool good = true, has_local = false, has_address = false;
  IpAddr address{}, local{};
  const bool ok = for_each_attr(msg, sizeof ifa, [&](uint16_t type, const uint8_t* d, size_t len) {
    if (type == IFA_LOCAL) {
      has_local = read_ip(d, len, ifa.ifa_family, &local);
      good = good && has_local;
    } else if (type == IFA_ADDRESS) {
      has_address = read_ip(d, len, ifa.ifa_family, &address);
      good = good && has_address;
    } else if (type == IFA_FLAGS && len == 4) {
      std::memcpy(&a.flags, d, 4);
    }
  });
  if (!ok || !good || (!has_local && !has_address)) return NlParse::malformed;
  // IPv4: IFA_LOCAL is the interface's own address (IFA_ADDRESS the peer's on a
  // point-to-point link); IPv6 sends IFA_ADDRESS alone unless point-to-point.
  a.ip = has_local ? local : address;
  *out = a;
  return NlParse::ok;
}

NlParse parse_link(std::span<const uint8_t> msg, KernelLink* out, int* err) {
  const NlParse p = head(msg, RTM_NEWLINK, RTM_DELLINK, sizeof(ifinfomsg), err);
  if (p != NlParse::ok) return p;
  nlmsghdr h;
  std::memcpy(&h, msg.data(), sizeof h);
  ifinfomsg ifi;
  std::memcpy(&ifi, msg.data() + NLMSG_HDRLEN, sizeof ifi);
  // The attributes are not needed, but their lengths must add up as in every other message.
  if (!for_each_attr(msg, sizeof ifi, [](uint16_t, const uint8_t*, size_t) {})) return NlParse::malformed;
  out->ifindex = ifi.ifi_index;
  out->up = h.nlmsg_type == RTM_NEWLINK && (ifi.ifi_flags & IFF_UP) != 0 && (ifi.ifi_flags & IFF_RUNNING) != 0;
  return NlParse::ok;
}

// ---- KernelNet ----

size_t KernelNet::IpHash::operator()(const IpAddr& a) const {
  uint64_t x, y;
  std::memcpy(&x, a.data(), 8);
  std::memcpy(&y, a.data() + 8, 8);
  return std::hash<uint64_t>()(x * 0x9e3779b97f4a7c15ull ^ y);
}

int KernelNet::open(const std::string& ifname, std::unique_ptr<KernelNet>* out) {
  std::unique_ptr<KernelNet> k(new KernelNet());
  k->ifname_ = ifname;
  k->ifindex_ = int(::if_nametoindex(ifname.c_str()));
  if (k->ifindex_ == 0) return -ENODEV;
  k->requests_ = core::Fd(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (!k->requests_.valid()) return -errno;
  sockaddr_nl sa{};
  sa.nl_family = AF_NETLINK;
  if (::bind(k->requests_.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) return -errno;
  // Not NETLINK_GET_STRICT_CHK: Linux 6.x refuses (EINVAL) a strict RTM_GETROUTE of this shape;
  // what the kernel answers is checked here instead (the route's netdev and type).
  k->events_ = core::Fd(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE));
  if (!k->events_.valid()) return -errno;
  sockaddr_nl ev{};
  ev.nl_family = AF_NETLINK;
  ev.nl_groups = RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR | RTMGRP_LINK;
  if (::bind(k->events_.get(), reinterpret_cast<sockaddr*>(&ev), sizeof ev) != 0) return -errno;
  *out = std::move(k);
  return 0;
}

int KernelNet::request(const uint8_t* req, size_t len,
                       const std::function<void(uint16_t type, std::span<const uint8_t> msg)>& f) {
  nlmsghdr h;
  std::memcpy(&h, req, sizeof h);
  const uint32_t seq = h.nlmsg_seq;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(requests_.get(), req, len, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) != ssize_t(len))
    return -errno;
  const bool dump = (h.nlmsg_flags & NLM_F_DUMP) == NLM_F_DUMP;
  const bool wants_ack = (h.nlmsg_flags & NLM_F_ACK) != 0;
  alignas(nlmsghdr) static thread_local uint8_t buf[32768];
  for (;;) {
    pollfd p{requests_.get(), POLLIN, 0};
    const int pr = ::poll(&p, 1, kRequestTimeoutMs);
    if (pr == 0) return -ETIMEDOUT;
    if (pr < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    const ssize_t n = ::recv(requests_.get(), buf, sizeof buf, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    int rc = 1;  // 1: more to read
    const bool ok = for_each_message(std::span<const uint8_t>(buf, size_t(n)), [&](uint16_t type, std::span<const uint8_t> m) {
      nlmsghdr mh;
      std::memcpy(&mh, m.data(), sizeof mh);
      if (mh.nlmsg_seq != seq || rc != 1) return;  // a late answer to an earlier request
      if (type == NLMSG_ERROR) {
        nlmsgerr e{};
        if (m.size() >= NLMSG_HDRLEN + sizeof e) std::memcpy(&e, m.data() + NLMSG_HDRLEN, sizeof e);
        rc = e.error;  // 0: the ack
        return;
      }
      if (type == NLMSG_DONE) {
        rc = 0;
        return;
      }
      f(type, m);
      if (!dump && !wants_ack) rc = 0;  // a GET answers with one message
    });
    if (!ok) {
      ++counters_.malformed;
      return -EPROTO;
    }
    if (rc != 1) return rc;
  }
}

int KernelNet::route(const IpAddr& dst, const IpAddr& src, NextHop* out) {
  ++counters_.route_queries;
  uint8_t req[kRequestBufferSize];
  const size_t len = build_route_get(req, seq_++, dst, src, ifindex_);
  KernelRoute r;
  bool got = false;
  int perr = 0;
  int rc = request(req, len, [&](uint16_t, std::span<const uint8_t> m) {
    if (parse_route(m, &r, &perr) == NlParse::ok) got = true;
    else ++counters_.malformed;
  });
  if (rc == 0 && !got) rc = -EPROTO;
  if (rc == 0 && (r.oif != ifindex_ || (r.type != RTN_UNICAST && r.type != RTN_LOCAL && r.type != RTN_MULTICAST &&
                                        r.type != RTN_BROADCAST)))
    rc = -ENETUNREACH;
  if (rc != 0) {
    ++counters_.route_failures;
    // The kernel's words for "no route" differ by family and by rule; droce's is one.
    return rc == -EHOSTUNREACH || rc == -ENETUNREACH || rc == -EINVAL || rc == -ESRCH || rc == -EACCES ||
                   rc == -EPERM
               ? -ENETUNREACH
               : rc;
  }
  out->via_gateway = !same_ip(r.gateway, IpAddr{});
  out->ip = out->via_gateway ? r.gateway : dst;
  out->hop_limit = r.hop_limit != 0 ? r.hop_limit : kDefaultHopLimit;
  return 0;
}

ResolveStatus KernelNet::neighbor(const IpAddr& ip, uint64_t now_ns, MacAddr* mac) {
  if (is_multicast(ip)) {
    *mac = multicast_mac(ip);
    return ResolveStatus::resolved;
  }
  auto it = pending_.find(ip);
  if (it != pending_.end() && now_ns - it->second.asked_ns < kRequeryNs) return ResolveStatus::pending;
  ++counters_.neigh_queries;
  uint8_t req[kRequestBufferSize];
  size_t len = build_neigh_get(req, seq_++, ifindex_, ip);
  KernelNeighbor n;
  bool got = false;
  int perr = 0;
  const int rc = request(req, len, [&](uint16_t, std::span<const uint8_t> m) {
    if (parse_neigh(m, &n, &perr) == NlParse::ok) got = true;
    else ++counters_.malformed;
  });
  constexpr uint16_t kUsable = NUD_REACHABLE | NUD_STALE | NUD_DELAY | NUD_PROBE | NUD_PERMANENT | NUD_NOARP;
  if (rc == 0 && got && (n.state & kUsable) && n.has_lladdr) {
    *mac = n.lladdr;
    if (n.state & NUD_STALE) {
      // Used as the kernel uses a stale entry, and confirmed the kernel's way: it probes.
      len = build_neigh_use(req, seq_++, ifindex_, ip);
      (void)request(req, len, [](uint16_t, std::span<const uint8_t>) {});
    }
    pending_.erase(ip);
    return ResolveStatus::resolved;
  }
  const bool fresh = pending_.find(ip) == pending_.end();
  Pending& p = pending_[ip];
  if (fresh) p.first_ns = now_ns;
  p.asked_ns = now_ns;
  const bool failed_entry = rc == 0 && got && (n.state & NUD_FAILED);
  // A FAILED entry left from earlier gets one fresh try; failing again, or silence for
  // kResolveTimeoutNs, is the answer.
  if ((failed_entry && !fresh) || now_ns - p.first_ns >= kResolveTimeoutNs) {
    ++counters_.neigh_failures;
    pending_.erase(ip);
    return ResolveStatus::failed;
  }
  if (!(rc == 0 && got && (n.state & NUD_INCOMPLETE))) {
    // No entry (ENOENT), or one the kernel is not working on: ask it to resolve.
    ++counters_.neigh_triggers;
    len = build_neigh_use(req, seq_++, ifindex_, ip);
    if (const int r = request(req, len, [](uint16_t, std::span<const uint8_t>) {}); r != 0 && r != -EEXIST) {
      ++counters_.neigh_failures;
      pending_.erase(ip);
      return ResolveStatus::failed;
    }
  }
  return ResolveStatus::pending;
}

uint64_t KernelNet::next_deadline_ns(uint64_t now_ns) {
  uint64_t d = UINT64_MAX;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (now_ns - it->second.asked_ns >= kAbandonedNs) {
      it = pending_.erase(it);
      continue;
    }
    d = std::min(d, it->second.asked_ns + kRequeryNs);
    ++it;
  }
  return d;
}

int KernelNet::addresses(std::vector<KernelAddress>* out) {
  uint8_t req[kRequestBufferSize];
  const size_t len = build_addr_dump(req, seq_++);
  return request(req, len, [&](uint16_t, std::span<const uint8_t> m) {
    KernelAddress a;
    int perr = 0;
    const NlParse p = parse_addr(m, &a, &perr);
    if (p == NlParse::malformed) ++counters_.malformed;
    if (p == NlParse::ok && a.ifindex == ifindex_) out->push_back(a);
  });
}

int KernelNet::read_events(KernelEvents* out) {
  alignas(nlmsghdr) uint8_t buf[16384];
  for (;;) {
    const ssize_t n = ::recv(events_.get(), buf, sizeof buf, 0);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
      if (errno == EINTR) continue;
      // ENOBUFS: events were lost; the caller re-reads the whole table.
      return -errno;
    }
    const bool ok = for_each_message(std::span<const uint8_t>(buf, size_t(n)), [&](uint16_t type, std::span<const uint8_t> m) {
      int perr = 0;
      if (type == RTM_NEWLINK || type == RTM_DELLINK) {
        KernelLink l;
        const NlParse p = parse_link(m, &l, &perr);
        if (p == NlParse::malformed) ++counters_.malformed;
        if (p != NlParse::ok || l.ifindex != ifindex_) return;
        ++counters_.link_events;
        out->links.push_back(l);
        return;
      }
      KernelAddress a;
      const NlParse p = parse_addr(m, &a, &perr);
      if (p == NlParse::malformed) ++counters_.malformed;
      if (p != NlParse::ok || a.ifindex != ifindex_) return;
      ++counters_.address_events;
      out->addresses.push_back(a);
    });
    if (!ok) ++counters_.malformed;
  }
}

}  // namespace droce::net
