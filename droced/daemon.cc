#include "droced/daemon.h"

#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
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
#include "core/proc.h"
#include <rte_launch.h>
#include <rte_lcore.h>
#include "hw_offload/select.h"
#include "net/kernel_sink.h"
#include "net/route_table.h"
#include "net/xdp_filter.h"
#include "rocev2/format.h"
#include "rocev2/headers.h"

namespace droce::droced {

namespace {

constexpr uint64_t kLinkCheckNs = 50'000'000;  // 50 ms

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
  Json& snum(const char* key, int64_t v) {
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
  const unsigned cores = static_cast<unsigned>(cfg.lcores.size());
  if (cores == 0 || cores > kMaxCores) {
    DROCE_LOG(ERR, app, "%u lcores: droced runs 1 to %u", cores, kMaxCores);
    return -EINVAL;
  }
  for (size_t i = 1; i < cfg.lcores.size(); ++i) {
    if (!rte_lcore_is_enabled(cfg.lcores[i]) || cfg.lcores[i] == rte_get_main_lcore()) {
      DROCE_LOG(ERR, app, "lcore %u is not one of EAL's worker lcores", cfg.lcores[i]);
      return -EINVAL;
    }
  }
  net::PortConfig pc;
  pc.rx_ring_size = pc.tx_ring_size = static_cast<uint16_t>(cfg.queue_depth);
  pc.pool_size = cfg.mbufs;
  // A queue pair per core where the port has them (the rest share, CoreGroup).
  pc.rx_queues = pc.tx_queues = static_cast<uint16_t>(cores);
  // A whole 4096 path MTU frame per mbuf where the driver allows it
  // (Port::plan_device says what each driver needs for jumbo frames).
  pc.mbuf_data_room = 4096 + 256;
  pc.mtu = cfg.mtu;
  pc.allmulticast = true;  // IPv6 neighbour discovery's solicited-node groups
  pc.rx_interrupts = true;  // sleep until a frame comes, where the port can say so
  if (!cfg.netdev.empty()) {
    // The rxe model: a kernel netdev droce shares. On af_xdp droce's XDP program passes the
    // kernel everything but RoCEv2 for droce's addresses (net/xdp/droce_xdp.bpf.c).
    cfg_.port = "net_" + cfg.link + "_" + cfg.name + ",iface=" + cfg.netdev;
    if (cfg.link == "af_xdp") {
      cfg_.port += ",xdp_prog=" + net::XdpFilter::object_path();
      // Never let the PMD try beside another program: its failed open detaches whatever
      // program the netdev has, another live droced's included.
      if (const std::string prog = net::XdpFilter::attached_program(cfg.netdev); !prog.empty()) {
        DROCE_LOG(ERR, app, "%s: %s already has an XDP program (%s)%s", cfg.name.c_str(), cfg.netdev.c_str(),
                  prog.c_str(),
                  prog == "droce_xdp" ? ": another droced serves it, or one crashed and left it (then `ip link set dev "
                                        "IFACE xdp off` takes it off)"
                                      : "; use --link af_packet, or take that program off");
        return -EBUSY;
      }
    }
    if (int rc = net::KernelNet::open(cfg.netdev, &kernel_); rc != 0) {
      DROCE_LOG(ERR, app, "%s: cannot watch netdev %s over rtnetlink: %s%s", cfg.name.c_str(), cfg.netdev.c_str(),
                std::strerror(-rc), rc == -ENODEV ? " (not in this network namespace?)" : "");
      return rc;
    }
  }
  if (int rc = net::Port::open_device(cfg_.port, pc, &port_); rc != 0) {
    DROCE_LOG(ERR, app, "cannot open port %s: %s", cfg_.port.c_str(), std::strerror(-rc));
    explain_open_failure(cfg_.port);
    return rc;
  }
  if (port_->kernel_sees_rx()) {
    // The kernel sees these frames too: keep it from answering them (net/kernel_sink.h).
    if (int r = net::open_udp_sink(port_->ifname(), rocev2::kRoceV2UdpPort, &udp_sink_); r != 0)
      DROCE_LOG(WARNING, app, "%s: cannot bind UDP %u on %s to keep the kernel from answering RoCE packets: %s%s",
                cfg.name.c_str(), unsigned(rocev2::kRoceV2UdpPort), port_->ifname().c_str(), std::strerror(-r),
                r == -EADDRINUSE ? " (rdma_rxe, or another program, has it; then the kernel is quiet anyway)" : "");
  }
  gids_ = std::make_unique<net::GidTable>(port_->mac(), port_->kernel_netdev() ? port_->ifname() : std::string());
  if (cfg.drop_ppm != 0)
    DROCE_LOG(WARNING, app, "%s: --drop-rate: discarding %.4g %% of received frames on purpose (seed %llu)",
              cfg.name.c_str(), cfg.drop_ppm / 10000.0, static_cast<unsigned long long>(cfg.drop_seed));
  DeviceCoreConfig dc;
  dc.port = port_.get();
  dc.vlan = cfg.vlan;
  net::RouteTable routes;
  for (const auto& text : cfg.addresses) {
    net::IpAddr ip;
    int len = -1;
    if (net::parse_address_prefix(text, &ip, &len) != 0) {
      DROCE_LOG(ERR, app, "not an IP address (ADDRESS or ADDRESS/LEN): %s", text.c_str());
      return -EINVAL;
    }
    if (int rc = gids_->add(ip, cfg.vlan); rc < 0) return rc;
    if (len >= 0) (void)routes.add_on_link(ip, uint8_t(len));
  }
  for (const auto& text : cfg.routes) {
    net::Route r;
    std::string err;
    if (net::parse_route(text, &r, &err) != 0) {
      DROCE_LOG(ERR, app, "--route %s: %s", text.c_str(), err.c_str());
      return -EINVAL;
    }
    if (int rc = routes.add(r); rc != 0) {
      DROCE_LOG(ERR, app, "--route %s: %s", text.c_str(), std::strerror(-rc));
      return rc;
    }
  }
  if (kernel_ != nullptr) {
    std::vector<net::KernelAddress> addrs;
    if (int rc = kernel_->addresses(&addrs); rc != 0) {
      DROCE_LOG(ERR, app, "%s: cannot read %s's addresses: %s", cfg.name.c_str(), cfg.netdev.c_str(), std::strerror(-rc));
      return rc;
    }
    for (const auto& a : addrs)
      if (a.usable()) (void)gids_->add(a.ip, net::kNoVlan, cfg.netdev);  // the link-local one is GID 0 already
  }
  dc.addresses = addresses_of(*gids_);
  dc.engine.max_qps = cfg.max_qps;
  const uint16_t mtu = port_->wire_mtu();
  dc.engine.active_mtu = rocev2::path_mtu_for(mtu);
  // As the kernel's RoCE devices do: the port's largest path MTU is what its
  // link carries, and a QP asking for more is refused (EINVAL) rather than
  // left to send frames the link drops.
  dc.engine.limits.max_mtu = dc.engine.active_mtu;
  int rc = 0;
  group_ = std::make_unique<CoreGroup>(port_.get(), cores, dc.neighbor, cfg.vlan, &rc);
  if (rc != 0) return rc;
  dc.group = group_.get();
  group_->routes() = std::move(routes);
  if (!cfg.netdev.empty() && cfg.link == "af_xdp") {
    if (int r = net::XdpFilter::open(port_->ifname(), &xdp_); r != 0) {
      DROCE_LOG(ERR, app, "%s: droce's XDP program is not on %s (%s): the kernel would lose the netdev",
                cfg.name.c_str(), port_->ifname().c_str(), std::strerror(-r));
      return r;
    }
    if (int r = xdp_->set_addresses(dc.addresses); r != 0) return r;
  }

  shared_.name = cfg.name;
  shared_.node_guid = net::node_guid_from_mac(port_->mac());
  shared_.port = port_.get();
  shared_.gids = gids_.get();
  shared_.vlan = cfg.vlan;
  shared_.limits = dc.engine.limits;
  shared_.max_qps = cfg.max_qps;
  shared_.render_stats = stats_trampoline;
  shared_.render_arg = this;
  for (unsigned k = 0; k < cores; ++k) {
    dc.index = k;
    dc.loss = net::FrameLoss(cfg.drop_ppm, cfg.drop_seed + k);
    auto core = std::make_unique<DeviceCore>(dc, &rc);
    if (rc != 0) return rc;
    workers_.push_back(std::make_unique<Worker>(this, k, cfg.lcores[k], std::move(core), shared_, &rc));
    if (rc != 0) return rc;
  }

  std::error_code ec;
  std::filesystem::create_directories(cfg.run_dir, ec);
  socket_path_ = cfg.run_dir + "/" + cfg.name + ".sock";
  // The tree first: whoever sees the socket may look for the device at once.
  link_up_ = port_->link().up;
  publish_device();
  // The rdma_cm channels' socket before the control socket: a program that found droced finds
  // its CM too. Without it droced still serves verbs.
  cm_socket_path_ = cfg.run_dir + "/" + cfg.name + ".cm.sock";
  if (int r = core::seqpacket_listen(cm_socket_path_, &cm_listen_); r != 0) {
    DROCE_LOG(WARNING, app, "no rdma_cm: cannot listen on %s: %s", cm_socket_path_.c_str(), std::strerror(-r));
    cm_socket_path_.clear();
  } else {
    ::chmod(cm_socket_path_.c_str(), 0666);
    ::fcntl(cm_listen_.get(), F_SETFL, ::fcntl(cm_listen_.get(), F_GETFL) | O_NONBLOCK);
  }
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
  if (!signal_.valid()) return -errno;
  for (auto [fd, key] : {std::pair{listen_.get(), kListenKey}, {signal_.get(), kSignalKey}}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = key;
    if (::epoll_ctl(workers_[0]->epoll_fd(), EPOLL_CTL_ADD, fd, &ev) != 0) return -errno;
  }
  if (kernel_ != nullptr) {
    // The netdev's address changes (worker 0, on_daemon_key). The KernelNet itself moves to
    // the cores' group, which resolves through it; its event socket stays usable from here.
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kKernelNetKey;
    if (::epoll_ctl(workers_[0]->epoll_fd(), EPOLL_CTL_ADD, kernel_->event_fd(), &ev) != 0) return -errno;
    kernel_events_ = kernel_.get();
    group_->set_kernel(std::move(kernel_));
  }
  std::string lcores;
  for (unsigned l : cfg.lcores) lcores += (lcores.empty() ? "" : ",") + std::to_string(l);
  DROCE_LOG(INFO, app, "%s: port %s (%s, %s, MTU %u), node GUID %s, socket %s, lcores %s (queues rx %u tx %u)",
            cfg.name.c_str(), cfg_.port.c_str(), port_->driver_name().c_str(),
            rocev2::format_mac(port_->mac()).c_str(), unsigned(mtu), net::format_guid(shared_.node_guid).c_str(),
            socket_path_.c_str(), lcores.c_str(), unsigned(port_->rx_queues()), unsigned(port_->tx_queues()));
  return 0;
}

void Daemon::publish_device() {
  if (cfg_.sysfs_root == "none") return;
  const std::string root = cfg_.sysfs_root.empty() ? cfg_.run_dir + "/sys" : cfg_.sysfs_root;
  provider::DeviceDescription d;
  d.name = cfg_.name;
  // Not "uverbsN": `droce exec` may mirror the kernel's own devices into the same tree.
  d.uverbs_name = "uverbs_" + cfg_.name;
  d.node_guid = shared_.node_guid;
  d.control_socket = socket_path_;
  provider::PortDescription p;
  p.state = link_up_ ? provider::PortState::active : provider::PortState::down;
  p.active_mtu = rocev2::mtu_bytes(shared_.limits.max_mtu);  // the port's active MTU (start())
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
    // The worker with the fewest clients serves this one, with all it creates.
    Worker* w = workers_[0].get();
    for (const auto& x : workers_)
      if (x->load() < w->load()) w = x.get();
    w->adopt(key, std::make_unique<Session>(&w->device(), std::move(fd), static_cast<uint32_t>(key)));
    ++clients_accepted_;
  }
}

void Daemon::on_daemon_key(uint64_t key) {
  if (key == kKernelNetKey) {
    on_address_events();
  } else if (key == kListenKey) {
    accept_clients();
  } else if (key == kSignalKey) {
    signalfd_siginfo si;
    while (::read(signal_.get(), &si, sizeof si) == sizeof si) {
      DROCE_LOG(INFO, app, "%s: signal %u, stopping", cfg_.name.c_str(), si.ssi_signo);
      stopping_ = true;
    }
  }
}

std::vector<net::IpAddr> Daemon::addresses_of(const net::GidTable& gids) {
  // The engine's default source first (the first address added), GID 0 last, as before.
  std::vector<net::IpAddr> out;
  for (uint32_t i = 1; i < gids.capacity(); ++i)
    if (const net::GidEntry* g = gids.at(i)) out.push_back(g->gid);
  out.push_back(gids.at(0)->gid);
  return out;
}

void Daemon::on_address_events() {
  std::vector<net::KernelAddress> events;
  std::unique_lock nl(group_->neighbor_mutex());  // the KernelNet is the group's
  int rc = kernel_events_->read_events(&events);
  if (rc == -ENOBUFS) {
    // Events were lost: read the whole table again and make the GIDs match it.
    DROCE_LOG(NOTICE, app, "%s: address events overflowed; reading %s's addresses again", cfg_.name.c_str(),
              cfg_.netdev.c_str());
    events.clear();
    rc = kernel_events_->addresses(&events);
    if (rc == 0) {
      std::lock_guard g(gid_mutex_);
      for (uint32_t i = 1; i < gids_->capacity(); ++i) {
        const net::GidEntry* e = gids_->at(i);
        if (e == nullptr) continue;
        bool present = false;
        for (const auto& a : events) present = present || (a.usable() && net::same_ip(a.ip, e->gid));
        if (!present) events.push_back(net::KernelAddress{kernel_events_->ifindex(), e->gid, 0, 0, false});
      }
    }
  }
  if (rc != 0) {
    DROCE_LOG(WARNING, app, "%s: reading address changes of %s: %s", cfg_.name.c_str(), cfg_.netdev.c_str(),
              std::strerror(-rc));
    return;
  }
  bool changed = false;
  std::vector<net::IpAddr> now;
  {
    std::lock_guard g(gid_mutex_);
    for (const auto& a : events) {
      const int r = a.usable() ? gids_->add(a.ip, net::kNoVlan, cfg_.netdev) : gids_->remove(a.ip, net::kNoVlan);
      if (r >= 0) {
        changed = true;
        DROCE_LOG(INFO, app, "%s: GID %s %s", cfg_.name.c_str(), rocev2::format_ip(a.ip).c_str(),
                  a.usable() ? "added" : "removed");
      }
    }
    if (!changed) return;
    now = addresses_of(*gids_);
    // The neighbour table answers (af_packet) and loops back for exactly these.
    net::NeighborTable& nt = group_->neighbors();
    for (const net::IpAddr& ip : now) (void)nt.add_local(ip, port_->mac(), net::kNoVlan);
    for (const auto& a : events)
      if (!a.usable()) (void)nt.remove_local(a.ip, net::kNoVlan);
    gid_generation_.fetch_add(1, std::memory_order_release);  // each worker takes the new table
  }
  nl.unlock();
  if (xdp_ != nullptr) {
    if (int r = xdp_->set_addresses(now); r != 0)
      DROCE_LOG(WARNING, app, "%s: cannot update the XDP program's addresses: %s", cfg_.name.c_str(), std::strerror(-r));
  }
  if (sysfs_) {
    std::lock_guard g(gid_mutex_);
    sysfs_->set_gids(1, provider::SysfsTree::gids_from_table(*gids_));
  }
}

void Daemon::copy_gids(net::GidTable* out, std::vector<net::IpAddr>* addresses) const {
  std::lock_guard g(gid_mutex_);
  *out = *gids_;
  *addresses = addresses_of(*gids_);
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
  link_generation_.fetch_add(1, std::memory_order_release);  // each worker tells its clients
}

int Daemon::run() {
  bool launch_failed = false;
  for (size_t k = 1; k < workers_.size(); ++k) {
    if (int rc = rte_eal_remote_launch(Worker::launch, workers_[k].get(), workers_[k]->lcore()); rc != 0) {
      DROCE_LOG(ERR, app, "cannot start worker %zu on lcore %u: %s", k, workers_[k]->lcore(), std::strerror(-rc));
      stopping_ = true;
      launch_failed = true;
    }
  }
  workers_[0]->run();
  stopping_ = true;
  for (size_t k = 1; k < workers_.size(); ++k) rte_eal_wait_lcore(workers_[k]->lcore());
  shutdown();
  return launch_failed ? 1 : 0;  // a daemon that could not run every worker it was asked for failed
}

void Daemon::shutdown() {
  workers_.clear();  // each told its clients already (Worker::run), or never ran
  if (!socket_path_.empty()) {
    ::unlink(socket_path_.c_str());
    socket_path_.clear();
  }
  if (!cm_socket_path_.empty()) {
    ::unlink(cm_socket_path_.c_str());
    cm_socket_path_.clear();
  }
  sysfs_.reset();  // the device leaves libibverbs' view before the socket is gone for good
  // The node stays: it is an alias of /dev/full, other droced (of the same name, another run
  // dir) or programs may be using it, and devtmpfs forgets it at the next boot.
  listen_.reset();
  cm_listen_.reset();
  group_.reset();
  port_.reset();
}

namespace {

// The scheduling policy the kernel applies to a worker's thread (ThreadSched::policy), as chrt
// names it ("?" before the thread runs): what --event-policy asked for, or what was refused, or
// what chrt changed.
const char* policy_name(int policy) {
  switch (policy) {
    case SCHED_OTHER: return "other";
    case SCHED_RR: return "rr";
    case SCHED_FIFO: return "fifo";
    case SCHED_BATCH: return "batch";
    case SCHED_IDLE: return "idle";
    default: return "?";
  }
}

// Every QP counter as a JSON number.
void put_qp_counters(Json& j, const rocev2::QpCounters& c) {
  for (const auto& k : rocev2::kQpCounters) j.num(k.name, c.*k.member);
}

// "239.1.2.3,ff0e::42" or "-".
std::string groups_text(const std::vector<net::IpAddr>& groups) {
  std::string out;
  for (const net::IpAddr& g : groups) out += (out.empty() ? "" : ",") + rocev2::format_ip(g);
  return out.empty() ? "-" : out;
}

}  // namespace

std::string Daemon::render_stats() const {
  // Every worker's state, read while none moves: the caller's own lock goes
  // first, then all are taken in index order (Worker, "the state lock").
  Worker* self = Worker::current();
  if (self != nullptr) self->unlock_state();
  for (const auto& w : workers_) w->lock_state();
  std::string out = render_locked();
  for (const auto& w : workers_) w->unlock_state();
  if (self != nullptr) self->lock_state();
  return out;
}

std::string Daemon::render_locked() const {
  size_t clients = 0;
  for (const auto& w : workers_) clients += w->sessions().size();
  Json j;
  j.open(nullptr, '{');
  j.open("device", '{')
      .str("name", cfg_.name)
      .str("node_guid", net::format_guid(shared_.node_guid))
      .str("socket", socket_path_)
      .num("clients", clients)
      .num("lcores", workers_.size())
      .close('}');
  const net::LinkState link = port_->link();
  j.open("ports", '[').open(nullptr, '{');
  j.num("port", 1)
      .str("devargs", cfg_.port)
      .str("driver", port_->driver_name())
      .str("mac", rocev2::format_mac(port_->mac()))
      .num("mtu", port_->wire_mtu())
      .str("offloads", hw_offload::select_offloads(*port_).name)  // what the engines were given at start
      .str("state", link.up ? "ACTIVE" : "DOWN")
      .num("speed_mbps", link.speed_mbps)
      .num("rx_queues", port_->rx_queues())
      .num("tx_queues", port_->tx_queues());
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
  // The driver's own counters (droce_shm: ring full, wake-ups sent, bad slots from the peer...).
  std::vector<std::pair<std::string, uint64_t>> xs;
  if (port_->xstats(&xs) == 0) {
    j.open("xstats", '{');
    for (const auto& [name, value] : xs) j.num(name.c_str(), value);
    j.close('}');
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

  rocev2::EngineCounters ec;
  DeviceCoreCounters dc;
  WorkerCounters wc;
  rocev2::QpCounters qc;
  for (const auto& w : workers_) {
    qc += w->core().engine().qp_totals();
    const rocev2::EngineCounters& e = w->core().engine().counters();
    ec.parse += e.parse;
    core::add_counters(rocev2::kEngineCounters, e, &ec);
    core::add_counters(kDeviceCoreCounters, w->core().counters(), &dc);
    core::add_counters(kWorkerCounters, w->counters(), &wc);
  }
  j.open("counters", '{')
      .num("rx_frames", ec.rx_frames)
      .num("tx_frames", ec.tx_frames)
      .num("tx_acks", ec.tx_acks)
      .num("rx_unknown_qp", ec.rx_unknown_qp)
      .num("rx_wrong_state", ec.rx_wrong_state)
      .num("rx_bad_pkey", ec.rx_bad_pkey)
      .num("rx_bad_qkey", ec.rx_bad_qkey)
      .num("rx_mcast_unattached", ec.rx_mcast_unattached)
      .num("rx_bad_dest", ec.rx_bad_dest)
      .num("rx_unexpected", ec.rx_unexpected)
      .num("tx_no_mbuf", ec.tx_no_mbuf)
      .num("tx_port_full", ec.tx_port_full)
      .num("cq_overflows", ec.cq_overflows)
      .num("cnp_received", ec.cnp_received)
      .num("neighbor_frames_in", dc.neighbor_frames_in)
      .num("neighbor_frames_out", dc.neighbor_frames_out)
      .num("neighbor_tx_dropped", dc.neighbor_tx_dropped)
      .num("oversize_control", dc.oversize_control)
      .num("loopback_frames", dc.loopback_frames)
      .num("handed_out", dc.handed_out)
      .num("handed_in", dc.handed_in)
      .num("hand_off_dropped", dc.hand_off_dropped)
      .num("loss_dropped", dc.loss_dropped)
      .num("rx_own_frames", dc.rx_own_frames)
      .num("loops", wc.loops)
      .num("sleeps", wc.sleeps)
      .num("wakeups_by_client", wc.wakeups_by_client)
      .num("wakeups_by_port", wc.wakeups_by_port)
      .num("wakeups_by_timer", wc.wakeups_by_timer)
      .num("stuck_blocks", wc.stuck_blocks)
      .num("clients_accepted", clients_accepted_)
      .num("clients_closed", wc.clients_closed)
      .num("clients_faulted", wc.clients_faulted)
      .num("events_unrouted", wc.events_unrouted);
  if (const CmHost* cm = workers_.empty() ? nullptr : workers_[0]->cm()) {
    // The connection manager on QP1 (worker 0): MADs in and out, and what it refused.
    const cm::AgentCounters& ac = cm->agent_counters();
    uint64_t dropped = 0;
    for (uint64_t d : ac.dropped) dropped += d;
    j.num("cm_mads_in", cm->counters().rx_mads)
        .num("cm_mads_out", cm->counters().tx_mads)
        .num("cm_mads_malformed", dropped)
        .num("cm_mads_unmatched", ac.unmatched)
        .num("cm_rej_no_listener", ac.rej_no_listener)
        .num("cm_rej_stale", ac.rej_stale)
        .num("cm_sidr_no_listener", ac.sidr_no_listener)
        .num("cm_requests_held", ac.held)
        .num("cm_tx_unresolved", cm->counters().tx_unresolved)
        .num("cm_tx_no_slot", cm->counters().tx_no_slot)
        .num("cm_rx_errors", cm->counters().rx_errors)
        .num("cm_channels_opened", cm->counters().channels_opened)
        .num("cm_channels_faulted", cm->counters().channels_faulted)
        .num("cm_channels_refused", cm->counters().channels_refused)
        .num("cm_commands", cm->ucma().counters().commands)
        .num("cm_command_errors", cm->ucma().counters().errors)
        .num("cm_events", cm->ucma().counters().events)
        .num("cm_events_dropped", cm->ucma().counters().events_dropped)
        .num("cm_events_orphaned", cm->ucma().counters().events_orphaned)
        .num("cm_addr_errors", cm->ucma().counters().addr_errors);
  }
  // The transport: every QP's counters added up since droced started, destroyed QPs' too.
  j.open("transport", '{');
  put_qp_counters(j, qc);
  j.close('}');
  j.open("parse", '{');
  for (size_t i = 0; i < rocev2::kParseStatusCount; ++i)
    if (ec.parse.by_status[i] != 0) j.num(rocev2::to_string(static_cast<rocev2::ParseStatus>(i)), ec.parse.by_status[i]);
  j.close('}');
  {
    std::lock_guard l(group_->neighbor_mutex());
    const net::NeighborCounters& nc = group_->neighbors().counters();
    j.open("neighbor", '{')
        .num("arp_requests_sent", nc.arp.requests_sent)
        .num("arp_replies_sent", nc.arp.replies_sent)
        .num("nd_requests_sent", nc.nd.requests_sent)
        .num("nd_replies_sent", nc.nd.replies_sent)
        .num("resolutions_failed", nc.resolutions_failed)
        .close('}');
    if (const net::KernelNet* k = group_->kernel()) {
      // The kernel's view (--netdev): what droced asked it and what it answered.
      const net::KernelNetCounters& kc = k->counters();
      j.open("kernel", '{')
          .num("route_queries", kc.route_queries)
          .num("route_failures", kc.route_failures)
          .num("neigh_queries", kc.neigh_queries)
          .num("neigh_triggers", kc.neigh_triggers)
          .num("neigh_failures", kc.neigh_failures)
          .num("address_events", kc.address_events)
          .num("malformed", kc.malformed)
          .close('}');
    }
  }
  if (net::XdpFilterCounters xc; xdp_ != nullptr && xdp_->counters(&xc) == 0) {
    // droce's XDP program: RoCE taken, RoCE for addresses not droce's (left to the kernel), passed.
    j.open("xdp", '{')
        .num("redirected", xc.redirected)
        .num("roce_not_ours", xc.not_ours)
        .num("passed_to_kernel", xc.passed)
        .close('}');
  }
  j.close('}');

  j.open("cores", '[');
  for (const auto& w : workers_) {
    const rocev2::EngineCounters& c = w->core().engine().counters();
    const DeviceCoreCounters& d = w->core().counters();
    size_t qps = 0;
    for (const auto& [k, s] : w->sessions()) qps += s->qp_count();
    const int rxq = group_->rx_queue_of(w->index());
    // How the scheduler has treated the worker's thread: time waiting for a CPU and
    // preemptions say that it shares its CPU with busy programs.
    core::ThreadSched ts;
    const bool have_ts = w->tid() != 0 && core::read_thread_sched(w->tid(), &ts);
    j.open(nullptr, '{')
        .num("core", w->index())
        .num("lcore", w->lcore())
        .str("rx_queue", rxq < 0 ? std::string("-") : std::to_string(rxq))
        .num("tx_queue", group_->tx_queue_of(w->index()))
        .num("clients", w->sessions().size())
        .num("qps", qps)
        .str("mode", w->polling() ? "poll" : "event")
        .str("mode_reason", w->mode_reason())
        .str("cpus", w->cpus())
        .str("policy", policy_name(have_ts ? ts.policy : -1))
        .num("affinity_changes", w->counters().affinity_changes)
        .num("affinity_stays", w->counters().affinity_stays)
        .str("on_cpu", have_ts ? std::to_string(ts.cpu) : std::string("?"))
        .num("cpu_ms", ts.run_ns / 1'000'000)
        .num("wait_ms", ts.wait_ns / 1'000'000)
        .num("blocked", ts.voluntary)
        .num("preempted", ts.involuntary)
        .num("spin_us", w->polling() ? 0 : w->spin_us())
        .num("wake_us", w->polling() ? 0 : w->wake_us())
        .num("spin_grown", w->spin_counters().grown)
        .num("spin_shrunk", w->spin_counters().shrunk)
        .num("spin_woken_here", w->spin_counters().woken_here)
        .num("spin_unjudged", w->spin_counters().unjudged)
        .num("yields", w->yield_counters().yields)
        .num("yields_crowded", w->yield_counters().crowded)
        .num("loops", w->counters().loops)
        .num("sleeps", w->counters().sleeps)
        .num("wakeups_by_port", w->counters().wakeups_by_port)
        .num("wakeups_by_client", w->counters().wakeups_by_client)
        .num("wakeups_by_timer", w->counters().wakeups_by_timer)
        .num("stuck_blocks", w->counters().stuck_blocks)
        .num("ack_holds", w->ack_hold_counters().held)
        .num("ack_holds_paid", w->ack_hold_counters().paid)
        .num("ack_holds_missed", w->ack_hold_counters().missed)
        .num("ack_holds_idle", w->ack_hold_counters().idle)
        .num("rt_demotions", w->realtime_counters().demotions)
        .num("rx_frames", c.rx_frames)
        .num("tx_frames", c.tx_frames)
        .num("handed_in", d.handed_in)
        .num("handed_out", d.handed_out)
        .num("hand_off_dropped", d.hand_off_dropped)
        .close('}');
  }
  j.close(']');

  j.open("clients", '[');
  for (const auto& w : workers_) {
    for (const auto& [k, s] : w->sessions()) {
      const SessionCounters& c = s->counters();
      j.open(nullptr, '{')
          .num("id", s->id())
          .num("pid", static_cast<uint64_t>(s->pid() < 0 ? 0 : s->pid()))
          .str("program", s->program())
          .num("core", w->index())
          .num("qps", s->qp_count())
          .num("cqs", s->cq_count())
          .num("mrs", s->mr_count())
          .num("messages", c.messages)
          .num("errors", c.errors)
          .num("doorbells", c.doorbells)
          .num("doorbells_queued", s->doorbells_queued())
          .num("sq_entries_unread", s->sq_entries_unread())
          .num("bad_doorbells", c.bad_doorbells)
          .num("wqes_posted", c.wqes_posted)
          .num("wqes_refused", c.wqes_refused)
          .num("events_dropped", c.events_dropped)
          .close('}');
    }
  }
  j.close(']');

  j.open("qps", '[');
  for (const auto& w : workers_) {
    rocev2::Engine& e = w->core().engine();
    for (const auto& [k, s] : w->sessions()) {
      for (uint32_t qpn : s->qpns()) {
        const rocev2::Qp* q = e.qp(qpn);
        if (q == nullptr) continue;
        j.open(nullptr, '{')
            .num("qpn", qpn)
            .num("client", s->id())
            .num("core", w->index())
            .str("type", rocev2::to_string(q->type))
            .str("state", rocev2::to_string(q->state))
            .num("dest_qpn", q->attr.dest_qp_num)
            .str("dest", rocev2::format_ip(q->attr.ah_attr.dgid));
        put_qp_counters(j, q->counters);
        // Where the QP's transport stands (a stalled QP shows it here): WQEs posted and
        // completed, the requester's next and oldest unacknowledged PSN and how long until
        // its ACK timeout (-1: not armed), the responder's expected PSN and a pending ACK.
        j.num("sq_posted", q->sq_head)
            .num("sq_completed", q->sq_tail)
            .num("next_psn", q->req.next_psn)
            .num("unacked_psn", q->req.unacked_psn)
            .snum("ack_timeout_in_us", q->req.retry_deadline == 0 ? -1
                                        : (int64_t(q->req.retry_deadline) - int64_t(core::monotonic_ns())) / 1000)
            .num("expected_psn", q->resp.epsn)
            .boolean("ack_pending", q->resp.ack_pending)
            .close('}');
      }
    }
  }
  j.close(']');
  // Multicast: the groups QPs are attached to (per core's engine), and the memberships droced
  // reports on the wire (IGMP/MLD) for rdma_cm's joins.
  j.open("multicast", '[');
  for (const auto& w : workers_) {
    for (const auto& [gid, qpns] : w->core().engine().mcast_table()) {
      std::string list;
      for (uint32_t q : qpns) list += (list.empty() ? "" : ",") + std::to_string(q);
      j.open(nullptr, '{').str("group", rocev2::format_ip(gid)).num("core", w->index()).str("qpns", list).close('}');
    }
  }
  j.close(']');
  j.open("membership", '[');
  if (!workers_.empty()) {
    CoreGroup& g = workers_[0]->core().group();
    std::lock_guard l(g.neighbor_mutex());
    for (const auto& [group, src] : g.membership().groups())
      j.open(nullptr, '{').str("group", rocev2::format_ip(group)).str("source", rocev2::format_ip(src)).close('}');
    const net::MembershipCounters& mc = g.membership().counters();
    j.open(nullptr, '{')
        .str("group", "counters")
        .num("reports_sent", mc.reports_sent)
        .num("leaves_sent", mc.leaves_sent)
        .num("queries_seen", mc.queries_seen)
        .num("frames_ignored", mc.frames_ignored)
        .close('}');
  }
  j.close(']');
  // rdma_cm ids (worker 0's CM): what librdmacm programs bound, listen on and are connected to.
  j.open("cm", '[');
  if (const CmHost* cm = workers_.empty() ? nullptr : workers_[0]->cm()) {
    for (const cm::UcmaIdInfo& i : cm->ucma().ids()) {
      const auto endpoint = [](const net::IpAddr& ip, uint16_t port) {
        return (net::is_ipv4_mapped(ip) ? rocev2::format_ip(ip) : "[" + rocev2::format_ip(ip) + "]") + ":" +
               std::to_string(port);
      };
      const auto agent = i.conn != 0 ? cm->agent_state(i.conn) : std::nullopt;
      j.open(nullptr, '{')
          .num("id", i.handle)
          .num("channel", i.channel)
          .str("port_space", i.ps == 0x0106 ? "tcp" : i.ps == 0x0111 ? "udp" : i.ps == 0x013F ? "ib" : "ipoib")
          .str("state", i.state)
          .str("local", endpoint(i.src, i.sport))
          .str("remote", i.dport != 0 ? endpoint(i.dst, i.dport) : "-")
          .num("comm_id", i.conn)
          .str("cm_state", agent ? cm::to_string(*agent) : "-")
          .num("qpn", i.qp_num)
          .num("remote_qpn", i.remote_qpn)
          .num("events_reported", i.events_reported)
          .str("groups", groups_text(i.groups))
          .close('}');
    }
  }
  j.close(']');
  j.close('}');
  return j.take();
}

}  // namespace droce::droced
