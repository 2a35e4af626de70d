#include "apps/droced/daemon.h"

#include <fcntl.h>
#include <net/if.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/clock.h"
#include "core/log.h"
#include "net/kernel_sink.h"
#include "rocev2/format.h"
#include "rocev2/headers.h"

namespace droce::droced {

namespace {

constexpr uint64_t kListenKey = 1, kSignalKey = 2, kWakeKey = 3, kRxInterruptKey = 4;
constexpr uint64_t kLinkCheckNs = 50'000'000;  // 50 ms
constexpr uint64_t kFirstSleepUs = 16;

// A minimal JSON writer: objects, arrays, numbers, strings.
class Json {
 public:
  Json& open(const char* key, char bracket) {
    sep(key);
    s_ += bracket;
    first_ = true;
    return *this;
  }
  Json& close(char bracket) {
    s_ += bracket;
    first_ = false;
    return *this;
  }
  Json& num(const char* key, uint64_t v) {
    sep(key);
    s_ += std::to_string(v);
    return *this;
  }
  Json& boolean(const char* key, bool v) {
    sep(key);
    s_ += v ? "true" : "false";
    return *this;
  }
  Json& str(const char* key, const std::string& v) {
    sep(key);
    s_ += '"';
    for (char c : v) {
      if (c == '"' || c == '\\') {
        s_ += '\\';
        s_ += c;
      } else if (static_cast<unsigned char>(c) < 0x20) {
        char b[8];
        std::snprintf(b, sizeof b, "\\u%04x", c);
        s_ += b;
      } else {
        s_ += c;
      }
    }
    s_ += '"';
    return *this;
  }
  std::string take() { return std::move(s_); }

 private:
  void sep(const char* key) {
    if (!first_) s_ += ',';
    first_ = false;
    if (key != nullptr) {
      s_ += '"';
      s_ += key;
      s_ += "\":";
    }
  }
  std::string s_;
  bool first_ = true;
};

// The likeliest reason a kernel-netdev port did not open, when there is one
// to tell.
void explain_open_failure(const std::string& devargs) {
  if (devargs.rfind("net_af_xdp", 0) != 0) return;
  const std::string ifname = net::devarg_value(devargs, "iface");
  if (ifname.empty()) return;
  core::Fd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  ifreq ifr{};
  std::snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", ifname.c_str());
  if (!s.valid() || ::ioctl(s.get(), SIOCGIFMTU, &ifr) != 0) return;
  if (ifr.ifr_mtu > 3500)
    DROCE_LOG(ERR, app,
              "%s has MTU %d: an XDP program carries frames of one page (MTU 3542 at most in DPDK's af_xdp, "
              "about 3500 on a veth); lower the netdev's MTU, or use net_af_packet for jumbo frames",
              ifname.c_str(), ifr.ifr_mtu);
}

std::string stats_trampoline(void* arg) { return static_cast<const Daemon*>(arg)->render_stats(); }

}  // namespace

Daemon::~Daemon() { shutdown(); }

int Daemon::start(const DaemonConfig& cfg) {
  cfg_ = cfg;
  net::PortConfig pc;
  pc.rx_ring_size = pc.tx_ring_size = static_cast<uint16_t>(cfg.queue_depth);
  pc.pool_size = cfg.mbufs;
  // A whole 4096 path MTU frame per mbuf where the driver allows it
  // (Port::plan_device says what each driver needs for jumbo frames).
  pc.mbuf_data_room = 4096 + 256;
  pc.mtu = cfg.mtu;
  pc.allmulticast = true;  // IPv6 neighbour discovery's solicited-node groups
  pc.rx_interrupts = true;  // sleep until a frame comes, where the port can say so
  if (int rc = net::Port::open_device(cfg.port, pc, &port_); rc != 0) {
    DROCE_LOG(ERR, app, "cannot open port %s: %s", cfg.port.c_str(), std::strerror(-rc));
    explain_open_failure(cfg.port);
    return rc;
  }
  if (port_->kernel_netdev() && port_->driver_name() != "net_af_xdp") {
    // The kernel sees these frames too: keep it from answering them (net/kernel_sink.h).
    if (int r = net::open_udp_sink(port_->ifname(), rocev2::kRoceV2UdpPort, &udp_sink_); r != 0)
      DROCE_LOG(WARNING, app, "%s: cannot bind UDP %u on %s to keep the kernel from answering RoCE packets: %s%s",
                cfg.name.c_str(), unsigned(rocev2::kRoceV2UdpPort), port_->ifname().c_str(), std::strerror(-r),
                r == -EADDRINUSE ? " (rdma_rxe, or another program, has it; then the kernel is quiet anyway)" : "");
  }
  gids_ = std::make_unique<net::GidTable>(port_->mac(), port_->kernel_netdev() ? port_->ifname() : std::string());
  DeviceCoreConfig dc;
  dc.port = port_.get();
  dc.vlan = cfg.vlan;
  for (const auto& text : cfg.addresses) {
    net::IpAddr ip;
    if (!rocev2::parse_ip(text, &ip)) {
      DROCE_LOG(ERR, app, "not an IP address: %s", text.c_str());
      return -EINVAL;
    }
    dc.addresses.push_back(ip);
    if (int rc = gids_->add(ip, cfg.vlan); rc < 0) return rc;
  }
  // GID 0, the link-local one, is a source too.
  dc.addresses.push_back(gids_->at(0)->gid);
  dc.engine.max_qps = cfg.max_qps;
  const uint16_t mtu = port_->wire_mtu();
  dc.engine.active_mtu = rocev2::path_mtu_for(mtu);
  // As the kernel's RoCE devices do: the port's largest path MTU is what its
  // link carries, and a QP asking for more is refused (EINVAL) rather than
  // left to send frames the link drops.
  dc.engine.limits.max_mtu = dc.engine.active_mtu;
  int rc = 0;
  core_ = std::make_unique<DeviceCore>(dc, &rc);
  if (rc != 0) return rc;

  wake_ = core::Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  device_.name = cfg.name;
  device_.node_guid = net::node_guid_from_mac(port_->mac());
  device_.core = core_.get();
  device_.port = port_.get();
  device_.gids = gids_.get();
  device_.vlan = cfg.vlan;
  device_.limits = dc.engine.limits;
  device_.max_qps = cfg.max_qps;
  device_.wake_fd = wake_.get();
  device_.render_stats = stats_trampoline;
  device_.render_arg = this;

  std::error_code ec;
  std::filesystem::create_directories(cfg.run_dir, ec);
  socket_path_ = cfg.run_dir + "/" + cfg.name + ".sock";
  // The tree first: whoever sees the socket may look for the device at once.
  link_up_ = port_->link().up;
  publish_device();
  if (int r = core::seqpacket_listen(socket_path_, &listen_); r != 0) {
    DROCE_LOG(ERR, app, "cannot listen on %s: %s", socket_path_.c_str(), std::strerror(-r));
    return r;
  }
  // Applications need no privileges: what a client can reach is its own.
  ::chmod(socket_path_.c_str(), 0666);
  ::fcntl(listen_.get(), F_SETFL, ::fcntl(listen_.get(), F_GETFL) | O_NONBLOCK);

  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  signal_ = core::Fd(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
  epoll_ = core::Fd(::epoll_create1(EPOLL_CLOEXEC));
  if (!signal_.valid() || !epoll_.valid() || !wake_.valid()) return -errno;
  for (auto [fd, key] : {std::pair{listen_.get(), kListenKey}, {signal_.get(), kSignalKey}, {wake_.get(), kWakeKey}}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = key;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) return -errno;
  }
  DROCE_LOG(INFO, app, "%s: port %s (%s, %s, MTU %u), node GUID %s, socket %s", cfg.name.c_str(), cfg.port.c_str(),
            port_->driver_name().c_str(), rocev2::format_mac(port_->mac()).c_str(), unsigned(mtu),
            net::format_guid(device_.node_guid).c_str(), socket_path_.c_str());
  return 0;
}

void Daemon::publish_device() {
  if (cfg_.sysfs_root == "none") return;
  const std::string root = cfg_.sysfs_root.empty() ? cfg_.run_dir + "/sys" : cfg_.sysfs_root;
  provider::DeviceDescription d;
  d.name = cfg_.name;
  // Not "uverbsN": `droce exec` may mirror the kernel's own devices into the same tree.
  d.uverbs_name = "uverbs_" + cfg_.name;
  d.node_guid = device_.node_guid;
  d.control_socket = socket_path_;
  provider::PortDescription p;
  p.state = link_up_ ? provider::PortState::active : provider::PortState::down;
  p.active_mtu = rocev2::mtu_bytes(device_.limits.max_mtu);  // the port's active MTU (start())
  p.gids = provider::SysfsTree::gids_from_table(*gids_);
  p.gid_table_len = gids_->capacity();
  d.ports.push_back(std::move(p));
  if (int rc = provider::SysfsTree::create(root, d, &sysfs_, provider::SysfsTree::IfExists::replace); rc != 0) {
    DROCE_LOG(WARNING, app, "%s: cannot write the device tree under %s: %s (verbs programs will not find it)",
              cfg_.name.c_str(), root.c_str(), std::strerror(-rc));
    return;
  }
  if (!cfg_.dev_node || ::geteuid() != 0) return;
  // libibverbs opens /dev/infiniband/<uverbs> (a compiled-in path) and wants a char device with
  // the tree's numbers; /dev/full's fails any stray kernel command loudly (docs/discovery.md).
  const std::string node = "/dev/infiniband/" + d.uverbs_name;
  struct stat st {};
  if (::stat(node.c_str(), &st) == 0) return;
  ::mkdir("/dev/infiniband", 0755);
  if (::mknod(node.c_str(), S_IFCHR | 0666, makedev(d.cdev_major, d.cdev_minor)) != 0) {
    DROCE_LOG(WARNING, app, "%s: cannot make %s: %s (`droce exec` provides one in a private /dev)",
              cfg_.name.c_str(), node.c_str(), std::strerror(errno));
    return;
  }
  ::chmod(node.c_str(), 0666);  // past the umask: any program may open it; it grants nothing
}

void Daemon::accept_clients() {
  for (;;) {
    core::Fd fd;
    if (core::seqpacket_accept(listen_.get(), &fd) != 0) return;
    // The loop never blocks on a client.
    ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) | O_NONBLOCK);
    const uint64_t key = next_key_++;
    auto s = std::make_unique<Session>(&device_, std::move(fd), static_cast<uint32_t>(key));
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = key;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, s->fd(), &ev) != 0) continue;
    ++counters_.clients_accepted;
    sessions_[key] = std::move(s);
  }
}

void Daemon::close_session(uint64_t key) {
  auto it = sessions_.find(key);
  if (it == sessions_.end()) return;
  Session& s = *it->second;
  DROCE_LOG(INFO, app, "client %u (pid %d, %s) %s: freeing its %zu QPs, %zu CQs, %zu MRs", s.id(), int(s.pid()),
            s.program().c_str(), s.close_reason(), s.qp_count(), s.cq_count(), s.mr_count());
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, s.fd(), nullptr);
  ++counters_.clients_closed;
  sessions_.erase(it);  // the destructor moves its QPs to error and frees everything
}

void Daemon::control(int timeout_us) {
  epoll_event evs[32];
  int n;
  if (timeout_us > 0) {
    timespec ts{timeout_us / 1'000'000, (timeout_us % 1'000'000) * 1000L};
    n = ::epoll_pwait2(epoll_.get(), evs, 32, &ts, nullptr);
    if (n < 0 && errno == ENOSYS) n = ::epoll_wait(epoll_.get(), evs, 32, (timeout_us + 999) / 1000);
  } else {
    n = ::epoll_wait(epoll_.get(), evs, 32, 0);
  }
  const uint64_t now = core::monotonic_ns();
  for (int i = 0; i < n; ++i) {
    const uint64_t key = evs[i].data.u64;
    if (key == kListenKey) {
      accept_clients();
    } else if (key == kSignalKey) {
      signalfd_siginfo si;
      while (::read(signal_.get(), &si, sizeof si) == sizeof si) {
        DROCE_LOG(INFO, app, "%s: signal %u, stopping", cfg_.name.c_str(), si.ssi_signo);
        stopping_ = true;
      }
    } else if (key == kRxInterruptKey) {
      ++counters_.wakeups_by_port;  // acknowledged when the sleep ends
    } else if (key == kWakeKey) {
      uint64_t v;
      [[maybe_unused]] ssize_t r = ::read(wake_.get(), &v, sizeof v);
      ++counters_.wakeups_by_client;
    } else {
      auto it = sessions_.find(key);
      if (it == sessions_.end()) continue;
      it->second->on_readable(now);
      if (it->second->closed()) {
        if (it->second->faulted()) ++counters_.clients_faulted;
        close_session(key);
      }
    }
  }
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    auto next = std::next(it);
    if (it->second->has_pending()) it->second->poll_pending(now);
    if (it->second->closed()) close_session(it->first);
    it = next;
  }
}

void Daemon::route_events() {
  auto& events = core_->engine().events();
  for (const auto& ev : events) {
    const auto& owners = ev.type == rocev2::AsyncEventType::cq_err                ? device_.cq_owner
                         : ev.type == rocev2::AsyncEventType::srq_limit_reached ? device_.srq_owner
                                                                                : device_.qp_owner;
    auto it = owners.find(ev.id);
    if (it == owners.end()) ++counters_.events_unrouted;
    else it->second->push_event(static_cast<uint32_t>(ev.type), ev.id);
  }
  events.clear();
}

void Daemon::check_link(uint64_t now_ns) {
  if (now_ns < next_link_check_ns_) return;
  next_link_check_ns_ = now_ns + kLinkCheckNs;
  if (!port_->take_link_change()) return;
  const bool up = port_->link().up;
  if (up == link_up_) return;
  link_up_ = up;
  DROCE_LOG(INFO, app, "%s: port link %s", cfg_.name.c_str(), up ? "up" : "down");
  if (sysfs_) sysfs_->set_port_state(1, up ? provider::PortState::active : provider::PortState::down);
  for (auto& [k, s] : sessions_) s->push_event(up ? 9 /* IBV_EVENT_PORT_ACTIVE */ : 10 /* IBV_EVENT_PORT_ERR */, 1);
}

bool Daemon::arm_rx_interrupt() {
  const int fd = port_->rx_interrupt_fd(0);
  if (fd < 0) return false;
  if (fd != rx_intr_fd_) {
    // A new descriptor (memif makes one per connection): watch it instead.
    if (rx_intr_fd_ >= 0) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, rx_intr_fd_, nullptr);
    rx_intr_fd_ = -1;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kRxInterruptKey;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) return false;
    rx_intr_fd_ = fd;
  }
  return port_->rx_interrupt_arm(0, true) == 0;
}

void Daemon::sleep(uint64_t now_ns) {
  for (auto& [k, s] : sessions_) s->set_daemon_sleeping(true);
  std::atomic_thread_fence(std::memory_order_seq_cst);  // the flags before the last look at the rings
  bool work = false;
  for (auto& [k, s] : sessions_) work = work || s->doorbells_waiting();
  const bool armed = !work && arm_rx_interrupt();
  if (armed) {
    // A frame that arrived before the interrupt was armed raises nothing: look once more.
    const rocev2::EngineCounters& ec = core_->engine().counters();
    const uint64_t before = ec.rx_frames + core_->counters().neighbor_frames_in;
    core_->run_once(now_ns);
    work = ec.rx_frames + core_->counters().neighbor_frames_in != before || core_->engine().has_tx_work();
    if (!core_->engine().events().empty()) route_events();
  }
  if (!work) {
    const uint64_t deadline = core_->next_deadline();
    // Armed, the port wakes us; only timers and the link check bound the sleep.
    // Unarmed, frames are seen when the sleep ends: sleeps grow from 16 us to
    // --max-sleep-us, doubling while nothing happens, so a short pause costs
    // a short delay and a long one still sleeps long.
    uint64_t us = armed ? kLinkCheckNs / 1000 : std::min<uint64_t>(sleep_us_, cfg_.max_sleep_us);
    if (!armed) sleep_us_ = std::min<uint64_t>(sleep_us_ * 2, cfg_.max_sleep_us);
    if (deadline != UINT64_MAX) us = deadline <= now_ns ? 0 : std::min<uint64_t>(us, (deadline - now_ns) / 1000);
    if (us > 0) {
      ++counters_.sleeps;
      control(static_cast<int>(us));
    }
  }
  if (armed) {
    port_->rx_interrupt_arm(0, false);
    port_->rx_interrupt_ack(0);
  }
  for (auto& [k, s] : sessions_) s->set_daemon_sleeping(false);
}

int Daemon::run() {
  uint64_t idle_since = core::monotonic_ns();
  const uint64_t spin_ns = cfg_.idle_spin_us * 1000;
  const rocev2::EngineCounters& ec = core_->engine().counters();
  while (!stopping_) {
    const uint64_t now = core::monotonic_ns();
    uint64_t work = 0;
    for (auto& [k, s] : sessions_) work += s->poll(now);
    const uint64_t before = ec.rx_frames + ec.tx_frames + core_->counters().neighbor_frames_in;
    core_->run_once(now);
    work += ec.rx_frames + ec.tx_frames + core_->counters().neighbor_frames_in - before;
    if (!core_->engine().events().empty()) route_events();
    check_link(now);
    if ((++counters_.loops & 63) == 0) control(0);
    if (work != 0 || core_->engine().has_tx_work()) {
      idle_since = now;
      sleep_us_ = kFirstSleepUs;
    } else if (now - idle_since > spin_ns) {
      sleep(now);
    }
  }
  shutdown();
  return 0;
}

void Daemon::shutdown() {
  if (!sessions_.empty()) {
    DROCE_LOG(INFO, app, "%s: stopping; %zu clients told the device is gone", cfg_.name.c_str(), sessions_.size());
    // Take in what the clients posted last, so it is flushed with the rest.
    const uint64_t now = core::monotonic_ns();
    for (auto& [k, s] : sessions_) (void)s->poll(now);
    for (auto& [k, s] : sessions_) s->mark_fatal();
    sessions_.clear();
  }
  if (!socket_path_.empty()) {
    ::unlink(socket_path_.c_str());
    socket_path_.clear();
  }
  sysfs_.reset();  // the device leaves libibverbs' view before the socket is gone for good
  // The node stays: it is an alias of /dev/full, other droced (of the same name, another run
  // dir) or programs may be using it, and devtmpfs forgets it at the next boot.
  listen_.reset();
  core_.reset();
  port_.reset();
}

std::string Daemon::render_stats() const {
  Json j;
  j.open(nullptr, '{');
  j.open("device", '{')
      .str("name", cfg_.name)
      .str("node_guid", net::format_guid(device_.node_guid))
      .str("socket", socket_path_)
      .num("clients", sessions_.size())
      .close('}');
  const net::LinkState link = port_->link();
  j.open("ports", '[').open(nullptr, '{');
  j.num("port", 1)
      .str("devargs", cfg_.port)
      .str("driver", port_->driver_name())
      .str("mac", rocev2::format_mac(port_->mac()))
      .num("mtu", port_->wire_mtu())
      .str("state", link.up ? "ACTIVE" : "DOWN")
      .num("speed_mbps", link.speed_mbps);
  rte_eth_stats st{};
  if (port_->stats(&st) == 0) {
    j.open("stats", '{')
        .num("rx_packets", st.ipackets)
        .num("tx_packets", st.opackets)
        .num("rx_bytes", st.ibytes)
        .num("tx_bytes", st.obytes)
        .num("rx_missed", st.imissed)
        .num("rx_errors", st.ierrors)
        .num("tx_errors", st.oerrors)
        .close('}');
  }
  j.close('}').close(']');
  j.open("gids", '[');
  for (uint32_t i = 0; i < gids_->capacity(); ++i) {
    const net::GidEntry* g = gids_->at(i);
    if (g == nullptr) continue;
    j.open(nullptr, '{')
        .num("index", i)
        .str("gid", net::format_gid(g->gid))
        .str("address", rocev2::format_ip(g->gid))
        .str("type", g->type == net::GidType::roce_v2 ? "RoCE v2" : "RoCE v1")
        .num("vlan", g->vlan == net::kNoVlan ? 0 : g->vlan)
        .close('}');
  }
  j.close(']');

  const rocev2::EngineCounters& ec = core_->engine().counters();
  j.open("counters", '{')
      .num("rx_frames", ec.rx_frames)
      .num("tx_frames", ec.tx_frames)
      .num("rx_unknown_qp", ec.rx_unknown_qp)
      .num("rx_wrong_state", ec.rx_wrong_state)
      .num("rx_bad_pkey", ec.rx_bad_pkey)
      .num("rx_bad_qkey", ec.rx_bad_qkey)
      .num("rx_bad_dest", ec.rx_bad_dest)
      .num("rx_unexpected", ec.rx_unexpected)
      .num("tx_no_mbuf", ec.tx_no_mbuf)
      .num("tx_port_full", ec.tx_port_full)
      .num("cq_overflows", ec.cq_overflows)
      .num("cnp_received", ec.cnp_received)
      .num("neighbor_frames_in", core_->counters().neighbor_frames_in)
      .num("neighbor_frames_out", core_->counters().neighbor_frames_out)
      .num("neighbor_tx_dropped", core_->counters().neighbor_tx_dropped)
      .num("oversize_control", core_->counters().oversize_control)
      .num("loopback_frames", core_->counters().loopback_frames)
      .num("loops", counters_.loops)
      .num("sleeps", counters_.sleeps)
      .num("wakeups_by_client", counters_.wakeups_by_client)
      .num("wakeups_by_port", counters_.wakeups_by_port)
      .num("clients_accepted", counters_.clients_accepted)
      .num("clients_closed", counters_.clients_closed)
      .num("clients_faulted", counters_.clients_faulted)
      .num("events_unrouted", counters_.events_unrouted);
  j.open("parse", '{');
  for (size_t i = 0; i < rocev2::kParseStatusCount; ++i)
    if (ec.parse.by_status[i] != 0) j.num(rocev2::to_string(static_cast<rocev2::ParseStatus>(i)), ec.parse.by_status[i]);
  j.close('}');
  const net::NeighborCounters& nc = core_->neighbors().counters();
  j.open("neighbor", '{')
      .num("arp_requests_sent", nc.arp.requests_sent)
      .num("arp_replies_sent", nc.arp.replies_sent)
      .num("nd_requests_sent", nc.nd.requests_sent)
      .num("nd_replies_sent", nc.nd.replies_sent)
      .num("resolutions_failed", nc.resolutions_failed)
      .close('}');
  j.close('}');

  j.open("clients", '[');
  for (const auto& [k, s] : sessions_) {
    const SessionCounters& c = s->counters();
    j.open(nullptr, '{')
        .num("id", s->id())
        .num("pid", static_cast<uint64_t>(s->pid() < 0 ? 0 : s->pid()))
        .str("program", s->program())
        .num("qps", s->qp_count())
        .num("cqs", s->cq_count())
        .num("mrs", s->mr_count())
        .num("messages", c.messages)
        .num("errors", c.errors)
        .num("doorbells", c.doorbells)
        .num("bad_doorbells", c.bad_doorbells)
        .num("wqes_posted", c.wqes_posted)
        .num("wqes_refused", c.wqes_refused)
        .num("events_dropped", c.events_dropped)
        .close('}');
  }
  j.close(']');

  j.open("qps", '[');
  rocev2::Engine& e = core_->engine();
  for (const auto& [k, s] : sessions_) {
    for (uint32_t qpn : s->qpns()) {
      const rocev2::Qp* q = e.qp(qpn);
      if (q == nullptr) continue;
      const rocev2::QpCounters& c = q->counters;
      j.open(nullptr, '{')
          .num("qpn", qpn)
          .num("client", s->id())
          .str("type", rocev2::to_string(q->type))
          .str("state", rocev2::to_string(q->state))
          .num("dest_qpn", q->attr.dest_qp_num)
          .str("dest", rocev2::format_ip(q->attr.ah_attr.dgid))
          .num("tx_packets", c.tx_packets)
          .num("rx_packets", c.rx_packets)
          .num("tx_bytes", c.tx_bytes)
          .num("rx_bytes", c.rx_bytes)
          .num("retransmits", c.retransmits)
          .num("timeouts", c.timeouts)
          .num("seq_naks_sent", c.seq_naks_sent)
          .num("seq_naks_received", c.seq_naks_received)
          .num("rnr_naks_sent", c.rnr_naks_sent)
          .num("rnr_naks_received", c.rnr_naks_received)
          .num("duplicate_requests", c.duplicate_requests)
          .num("out_of_sequence", c.out_of_sequence)
          .num("retry_exceeded", c.retry_exceeded)
          .num("rnr_retry_exceeded", c.rnr_retry_exceeded)
          .num("send_errors", c.send_errors)
          .num("dropped", c.dropped)
          .close('}');
    }
  }
  j.close(']');
  j.close('}');
  return j.take();
}

}  // namespace droce::droced
