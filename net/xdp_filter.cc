#include "net/xdp_filter.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <net/if.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#ifndef DROCE_XDP_BUILD_OBJECT
#define DROCE_XDP_BUILD_OBJECT ""
#endif
#ifndef DROCE_XDP_INSTALLED_OBJECT
#define DROCE_XDP_INSTALLED_OBJECT "/usr/lib/x86_64-linux-gnu/droce/droce_xdp.o"
#endif

namespace droce::net {

std::string XdpFilter::object_path() {
  if (const char* e = std::getenv("DROCE_XDP_PROG"); e != nullptr && *e != '\0') return e;
  if (DROCE_XDP_BUILD_OBJECT[0] != '\0' && ::access(DROCE_XDP_BUILD_OBJECT, R_OK) == 0) return DROCE_XDP_BUILD_OBJECT;
  return DROCE_XDP_INSTALLED_OBJECT;
}

std::string XdpFilter::attached_program(const std::string& ifname) {
  const int ifindex = int(::if_nametoindex(ifname.c_str()));
  uint32_t id = 0;
  if (ifindex == 0 || bpf_xdp_query_id(ifindex, 0, &id) != 0 || id == 0) return {};
  core::Fd prog(bpf_prog_get_fd_by_id(id));
  bpf_prog_info info{};
  uint32_t len = sizeof info;
  if (!prog.valid() || bpf_obj_get_info_by_fd(prog.get(), &info, &len) != 0) return {};
  return info.name;
}

int XdpFilter::open(const std::string& ifname, std::unique_ptr<XdpFilter>* out) {
  const int ifindex = int(::if_nametoindex(ifname.c_str()));
  if (ifindex == 0) return -ENODEV;
  std::unique_ptr<XdpFilter> f(new XdpFilter());
  if (int rc = bpf_xdp_query_id(ifindex, 0, &f->prog_id_); rc != 0) return rc < 0 ? rc : -EIO;
  if (f->prog_id_ == 0) return -ENOENT;
  core::Fd prog(bpf_prog_get_fd_by_id(f->prog_id_));
  if (!prog.valid()) return -errno;
  uint32_t map_ids[16] = {};
  bpf_prog_info info{};
  info.nr_map_ids = 16;
  info.map_ids = reinterpret_cast<uint64_t>(map_ids);
  uint32_t len = sizeof info;
  if (bpf_obj_get_info_by_fd(prog.get(), &info, &len) != 0) return -errno;
  for (uint32_t i = 0; i < std::min<uint32_t>(info.nr_map_ids, 16); ++i) {
    core::Fd m(bpf_map_get_fd_by_id(map_ids[i]));
    if (!m.valid()) continue;
    bpf_map_info mi{};
    uint32_t mlen = sizeof mi;
    if (bpf_obj_get_info_by_fd(m.get(), &mi, &mlen) != 0) continue;
    if (std::strcmp(mi.name, "droce_addrs") == 0 && mi.key_size == 16) f->addrs_ = std::move(m);
    else if (std::strcmp(mi.name, "droce_stats") == 0 && mi.value_size == 8) f->stats_ = std::move(m);
  }
  if (!f->addrs_.valid() || !f->stats_.valid()) return -ENOENT;
  *out = std::move(f);
  return 0;
}

namespace {
// The TC filter's place: one droce filter per netdev, replaced by the next droced.
constexpr uint32_t kTcHandle = 0xd4c3;
constexpr uint32_t kTcPriority = 1;
}  // namespace

XdpFilter::~XdpFilter() {
  if (tc_ifindex_ != 0) {
    DECLARE_LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = tc_ifindex_, .attach_point = BPF_TC_INGRESS);
    DECLARE_LIBBPF_OPTS(bpf_tc_opts, opts, .handle = kTcHandle, .priority = kTcPriority);
    // Only droce's filter goes. The clsact qdisc stays, empty unless others use it:
    // bpf_tc_hook_destroy on the ingress side would flush every ingress filter, others' too.
    (void)bpf_tc_detach(&hook, &opts);
  }
  addrs_.reset();
  stats_.reset();
  if (object_ != nullptr) bpf_object__close(object_);
}

int XdpFilter::attach_tc(const std::string& ifname, std::unique_ptr<XdpFilter>* out) {
  const int ifindex = int(::if_nametoindex(ifname.c_str()));
  if (ifindex == 0) return -ENODEV;
  std::unique_ptr<XdpFilter> f(new XdpFilter());
  f->object_ = bpf_object__open_file(object_path().c_str(), nullptr);
  if (f->object_ == nullptr) return -errno;
  bpf_program* tc = bpf_object__find_program_by_name(f->object_, "droce_tc");
  bpf_program* xdp = bpf_object__find_program_by_name(f->object_, "droce_xdp");
  if (tc == nullptr) return -ENOENT;
  if (xdp != nullptr) bpf_program__set_autoload(xdp, false);
  if (int rc = bpf_object__load(f->object_); rc != 0) return rc;
  bpf_map* addrs = bpf_object__find_map_by_name(f->object_, "droce_addrs");
  bpf_map* stats = bpf_object__find_map_by_name(f->object_, "droce_stats");
  if (addrs == nullptr || stats == nullptr) return -ENOENT;
  f->addrs_ = core::Fd(::dup(bpf_map__fd(addrs)));
  f->stats_ = core::Fd(::dup(bpf_map__fd(stats)));
  if (!f->addrs_.valid() || !f->stats_.valid()) return -errno;
  DECLARE_LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = BPF_TC_INGRESS);
  const int made = bpf_tc_hook_create(&hook);
  if (made != 0 && made != -EEXIST) return made;
  DECLARE_LIBBPF_OPTS(bpf_tc_opts, opts, .prog_fd = bpf_program__fd(tc), .flags = BPF_TC_F_REPLACE,
                      .handle = kTcHandle, .priority = kTcPriority);
  if (int rc = bpf_tc_attach(&hook, &opts); rc != 0) {
    if (made == 0) (void)bpf_tc_hook_destroy(&hook);
    return rc;
  }
  f->prog_id_ = opts.prog_id;
  f->tc_ifindex_ = ifindex;
  *out = std::move(f);
  return 0;
}

int XdpFilter::set_addresses(const std::vector<IpAddr>& gids) {
  // Add first, then remove what is gone: an address that stays is never missing.
  const uint32_t one = 1;
  for (const IpAddr& g : gids)
    if (bpf_map_update_elem(addrs_.get(), g.data(), &one, BPF_ANY) != 0) return -errno;
  std::vector<IpAddr> gone;
  IpAddr key{}, next{};
  const void* prev = nullptr;
  while (bpf_map_get_next_key(addrs_.get(), prev, next.data()) == 0) {
    bool keep = false;
    for (const IpAddr& g : gids) keep = keep || same_ip(g, next);
    if (!keep) gone.push_back(next);
    key = next;
    prev = key.data();
  }
  for (const IpAddr& g : gone) (void)bpf_map_delete_elem(addrs_.get(), g.data());
  return 0;
}

int XdpFilter::counters(XdpFilterCounters* out) const {
  const int cpus = libbpf_num_possible_cpus();
  if (cpus <= 0) return cpus < 0 ? cpus : -EIO;
  std::vector<uint64_t> v(static_cast<size_t>(cpus));
  uint64_t* fields[3] = {&out->redirected, &out->not_ours, &out->passed};
  for (uint32_t k = 0; k < 3; ++k) {
    if (bpf_map_lookup_elem(stats_.get(), &k, v.data()) != 0) return -errno;
    uint64_t sum = 0;
    for (uint64_t x : v) sum += x;
    *fields[k] = sum;
  }
  return 0;
}

}  // namespace droce::net
