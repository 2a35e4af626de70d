#include "droced/daemon.h"

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
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include "net/kernel_sink.h"
#include "net/route_table.h"
#include "net/xdp_filter.h"
#include "rocev2/format.h"
#include "rocev2/headers.h"

namespace droce::droced {

namespace {

constexpr uint64_t kLinkCheckNs = 50'000'000;  // 50 ms

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

// Runs f with every worker's state lock held, so that it reads engines and sessions that are
// not moving: a worker's own lock goes first, then all are taken in index order (Worker, "the
// state lock"); from another thread (the metrics thread) there is none of its own.
template <class F>
void with_every_state_lock(const std::vector<std::unique_ptr<Worker>>& workers, F&& f) {
  Worker* self = Worker::current();
  if (self != nullptr) self->unlock_state();
  for (const auto& w : workers) w->lock_state();
  f();
  for (const auto& w : workers) w->unlock_state();
  if (self != nullptr) self->lock_state();
}

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
    cfg_.port = (cfg.link == "packet" ? "droce_packet_" : "net_" + cfg.link + "_") + cfg.name + ",iface=" + cfg.netdev;
    if (!cfg.link_args.empty()) cfg_.port += "," + cfg.link_args;
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
  if (cfg.drop_ppm != 0) {
    // --drop-rate is fault rule 1: drop that share of the RoCE frames received.
    FaultRule r;
    r.direction = FaultDirection::rx;
    r.spec.loss = cfg.drop_ppm / 1e6;
    r.seed = cfg.drop_seed;
    uint32_t id;
    (void)faults_.set(r, &id);
    DROCE_LOG(WARNING, app, "%s: --drop-rate: discarding %.4g %% of received RoCE frames on purpose (seed %llu)",
              cfg.name.c_str(), cfg.drop_ppm / 10000.0, static_cast<unsigned long long>(cfg.drop_seed));
  }
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
  // A raw packet QP's frame: the link's MTU and its Ethernet and 802.1Q headers, within one mbuf.
  dc.engine.max_raw_frame = std::min<uint32_t>(uint32_t{mtu} + 18, rte_pktmbuf_data_room_size(port_->pool()) -
                                                                         RTE_PKTMBUF_HEADROOM);
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
  } else if (!cfg.netdev.empty() && (cfg.link == "af_packet" || cfg.link == "packet")) {
    // The kernel need not receive what droce's tap already has (net/xdp_filter.h attach_tc).
    // Without it all still works: the kernel sink swallows RoCEv2 for droce's addresses.
    if (int r = net::XdpFilter::attach_tc(port_->ifname(), &xdp_); r != 0) {
      DROCE_LOG(WARNING, app, "%s: no TC filter on %s (%s): the kernel receives droce's frames too",
                cfg.name.c_str(), port_->ifname().c_str(), std::strerror(-r));
    } else if (int r2 = xdp_->set_addresses(dc.addresses); r2 != 0) {
      xdp_.reset();
      return r2;
    }
  }

  shared_.name = cfg.name;
  shared_.node_guid = net::node_guid_from_mac(port_->mac());
  shared_.port = port_.get();
  shared_.gids = gids_.get();
  shared_.vlan = cfg.vlan;
  shared_.limits = dc.engine.limits;
  shared_.max_qps = cfg.max_qps;
  jobs_ = std::make_unique<ControlJobs>(1);
  shared_.jobs = jobs_.get();
  shared_.faults = &faults_;
  // DCQCN: the link's defaults (mlx5's, with timers for a kernel path on a kernel netdev), then
  // --cc over them (checked when it was parsed).
  rocev2::CcParams cc = cc_defaults_for(port_->kernel_netdev());
  cc_.set_defaults(cc);
  (void)rocev2::set_cc_params(&cc, cfg.cc);
  cc_.set(cc);
  shared_.cc = &cc_;
  dc.cc = &cc_;
  capture_ = std::make_unique<Capture>(cores);
  shared_.capture = capture_.get();
  shared_.render_stats = stats_trampoline;
  shared_.render_arg = this;
  for (unsigned k = 0; k < cores; ++k) {
    dc.index = k;
    dc.faults = &faults_;
    dc.capture = capture_.get();
    auto core = std::make_unique<DeviceCore>(dc, &rc);
    if (rc != 0) return rc;
    workers_.push_back(std::make_unique<Worker>(worker_context(), k, cfg.lcores[k], std::move(core), shared_, &rc));
    if (rc != 0) return rc;
  }

  // Before the control socket: whoever sees droced ready finds its metrics too.
  if (!cfg.metrics.empty())
    if (int r = start_metrics(); r != 0) return r;

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
    ++counters_.clients_accepted;
  }
}

void Daemon::on_daemon_key(uint64_t key) {
  if (key == kKernelNetKey) {
    on_kernel_events();
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

void Daemon::on_kernel_events() {
  net::KernelEvents kernel_events;
  std::unique_lock nl(group_->neighbor_mutex());  // the KernelNet is the group's
  int rc = kernel_events_->read_events(&kernel_events);
  std::vector<net::KernelAddress>& events = kernel_events.addresses;
  // Link messages: the kernel tells each change as it happens, so a down and up between two
  // 50 ms looks (a flap on a device without link-state interrupts: veth, af_xdp, af_packet)
  // is not missed. The look itself comes at once; the port's link stays the truth.
  for (const net::KernelLink& l : kernel_events.links) down_heard_ = down_heard_ || !l.up;
  if (!kernel_events.links.empty() || rc == -ENOBUFS) {
    next_link_check_ns_ = 0;
    check_link(core::monotonic_ns());
  }
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
  // Compared with what the clients were told at every look, not only when the device reports a
  // change: a state read at start before the device settled (af_xdp on a veth under load said
  // "down" once, then reported no change while up) would otherwise hide the next real down.
  (void)port_->take_link_change();  // consumes a raised LSC event; link() is the truth
  const bool up = port_->link().up;
  const bool flapped = down_heard_ && up && link_up_;  // down and up again since the last look
  down_heard_ = false;
  if (up == link_up_ && !flapped) return;
  link_up_ = up;
  if (!up || flapped) {
    ++counters_.link_downs;
    link_downs_.fetch_add(1, std::memory_order_relaxed);
  }
  DROCE_LOG(INFO, app, "%s: port link %s", cfg_.name.c_str(), flapped ? "went down and came up" : up ? "up" : "down");
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

WorkerContext Daemon::worker_context() {
  WorkerContext c;
  c.config = &cfg_;
  c.stopping = &stopping_;
  c.link_up = &link_up_;
  c.link_generation = &link_generation_;
  c.link_downs = &link_downs_;
  c.gid_generation = &gid_generation_;
  c.copy_gids = [this](net::GidTable* out, std::vector<net::IpAddr>* addresses) { copy_gids(out, addresses); };
  c.on_daemon_key = [this](uint64_t key) { on_daemon_key(key); };
  c.check_link = [this](uint64_t now_ns) { check_link(now_ns); };
  c.cm_listen = &cm_listen_;
  return c;
}

void Daemon::shutdown() {
  metrics_.reset();  // its thread reads the workers: it stops before they go
  // Jobs write their worker's eventfd when they end: all of them end before any worker goes.
  if (jobs_ != nullptr) {
    jobs_->cancel_all();
    jobs_->wait();
  }
  workers_.clear();  // each told its clients already (Worker::run), or never ran
  jobs_.reset();     // after the sessions handed it their last mappings to unmap
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

std::string Daemon::render_stats() const {
  std::string out;
  with_every_state_lock(workers_, [&] { out = render_locked(); });
  return out;
}

MetricsSnapshot Daemon::metrics_snapshot() const {
  MetricsSnapshot m;
  m.device = cfg_.name;
  with_every_state_lock(workers_, [&] {
    const StatsSources s = sources_locked();
    m.totals = counter_totals(s);
    m.qps = qp_counter_rows(s);
  });
  return m;
}

std::string Daemon::render_locked() const { return stats_json(sources_locked()); }

StatsSources Daemon::sources_locked() const {
  StatsSources s;
  s.cfg = &cfg_;
  s.node_guid = shared_.node_guid;
  s.socket_path = socket_path_;
  s.port = port_.get();
  s.gids = gids_.get();
  s.group = group_.get();
  s.workers = &workers_;
  s.xdp = xdp_.get();
  s.jobs = jobs_.get();
  s.faults = &faults_;
  s.cc = &cc_;
  s.counters = counters_;
  return s;
}

int Daemon::start_metrics() {
  ListenAddress at;
  if (parse_listen_address(cfg_.metrics, &at) != 0) {
    DROCE_LOG(ERR, app, "--metrics %s: not ADDRESS:PORT or PORT", cfg_.metrics.c_str());
    return -EINVAL;
  }
  const auto render = [this] { return render_openmetrics(metrics_snapshot()); };
  if (int rc = MetricsServer::start(at, render, &metrics_); rc != 0) {
    DROCE_LOG(ERR, app, "%s: --metrics: cannot listen on %s: %s", cfg_.name.c_str(), format_listen_address(at).c_str(),
              std::strerror(-rc));
    return rc;
  }
  const std::string where = format_listen_address(metrics_->address());
  if (is_loopback(metrics_->address()))
    DROCE_LOG(INFO, app, "%s: metrics on http://%s/metrics", cfg_.name.c_str(), where.c_str());
  else
    DROCE_LOG(WARNING, app, "%s: metrics on http://%s/metrics, which other hosts may reach (it has no authentication)",
              cfg_.name.c_str(), where.c_str());
  return 0;
}

}  // namespace droce::droced
