#include "droced/config.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "droced/metrics_server.h"

namespace droce::droced {

const char* usage() {
  return "usage: droced --port DEVARGS --address IP[/LEN] [options]\n"
         "       droced --netdev IFACE [options]       (share a kernel netdev, as rxe does)\n"
         "  --name NAME          device name (droce0)\n"
         "  --run-dir DIR        control socket directory (/run/droce, or $DROCE_RUN_DIR)\n"
         "  --port DEVARGS       the DPDK port, e.g. net_af_packet0,iface=eth1 or\n"
         "                       net_memif0,role=server,socket=/tmp/m.sock\n"
         "  --address IP[/LEN]   an IPv4 or IPv6 address of this host (repeatable); with /LEN\n"
         "                       its subnet is on link and other destinations need a --route\n"
         "  --route ROUTE        own addresses: \"PREFIX|default via GATEWAY [metric N]\n"
         "                       [hoplimit N]\" (repeatable), as `ip route` takes it\n"
         "  --netdev IFACE       share the kernel netdev IFACE: droce takes only RoCEv2 for\n"
         "                       the netdev's addresses, which its GIDs follow; routes and\n"
         "                       neighbours come from the kernel (no --port, --address)\n"
         "  --link KIND          with --netdev: af_xdp (an XDP program of droce's own passes\n"
         "                       everything else to the kernel), af_packet (DPDK's), or\n"
         "                       packet (droce's packet socket, with UDP segmentation\n"
         "                       offload: one kernel buffer per message) (af_xdp)\n"
         "  --link-args K=V[,..]  with --netdev: the link's own options, added to its device\n"
         "                       string: packet's frames=N (receive ring slots, 256) and\n"
         "                       gso=on|off; the DPDK PMD's devargs for af_xdp and af_packet\n"
         "  --vlan ID            802.1Q VLAN of the addresses\n"
         "  --mtu BYTES          Ethernet MTU to set on the port\n"
         "  --lcores LIST        the poll cores, one worker each: 0-3 or 0,2 (0); clients\n"
         "                       are spread over them, each with all its objects on one\n"
         "  --lcore N            one poll core (--lcores N)\n"
         "  --memory MB          EAL memory without hugepages (512)\n"
         "  --mbufs N            mbufs in the port's pool (16384)\n"
         "  --max-qps N          QPs the device offers (16384)\n"
         "  --queue-depth N      port RX/TX descriptors (1024)\n"
         "  --poll-mode MODE     poll (own the core, never sleep), event (spin briefly, then\n"
         "                       block until a frame, doorbell or timer), auto (poll on an\n"
         "                       isolated CPU, else event) (auto)\n"
         "  --cm-channels N      rdma_cm event channels one process may hold (4096); past it\n"
         "                       rdma_create_event_channel fails with EMFILE\n"
         "  --idle-spin-us N     event mode: busy-poll this long after work before blocking\n"
         "                       (adaptive)\n"
         "  --max-sleep-us N     longest sleep on a port that cannot wake droced (1000)\n"
         "  --event-nice N       event mode: the workers' nice value, -20..19 (-10): a woken\n"
         "                       worker preempts a program spinning on its CPU at once\n"
         "  --event-policy P     event mode: rr (SCHED_RR priority 1, needs CAP_SYS_NICE: no\n"
         "                       wait behind a spinning program's slice; normal after 2 ms\n"
         "                       without a break), other (normal, at --event-nice), auto (rr\n"
         "                       where allowed, else other) (auto)\n"
         "  --event-affinity A   event mode: lcore (run on the lcore's CPU), any (where the\n"
         "                       scheduler puts it), auto (lcore while mostly idle, any while\n"
         "                       busy) (auto)\n"
         "  --eal ARG            pass ARG to DPDK's EAL (repeatable)\n"
         "  --log-level LEVEL    droce log level (error, warning, info, debug)\n"
         "  --sysfs-root DIR     the device tree for libibverbs (<run-dir>/sys; none: no tree)\n"
         "  --dev-node yes|no    as root, make /dev/infiniband/uverbs_<name> if missing (yes)\n"
         "  --drop-rate PERCENT  discard this share of received RoCE frames, as a lossy link\n"
         "                       would (tests, labs): 1 or 1% is one frame in a hundred (0);\n"
         "                       fault rule 1 (`droce fault` changes or adds rules live)\n"
         "  --drop-seed N        seed of the --drop-rate draw, for a repeatable run (1)\n"
         "  --metrics [ADDR:]PORT  serve the counters as OpenMetrics (GET /metrics, for\n"
         "                       Prometheus) on ADDR:PORT; 127.0.0.1 unless ADDR is given\n"
         "  --cc NAME=VALUE[,...]  DCQCN parameters, mlx5's names (rpg_ai_rate=10,\n"
         "                       np_enable=0, ...; `droce cc` lists them); repeatable\n"
         "  --config FILE        read the same keys from FILE (key = value)\n";
}

namespace {

// "1", "0.5", "1%": a percentage 0..100 as parts per million.
bool parse_percent_ppm(const std::string& v, uint32_t* out) {
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(v.c_str(), &end);
  if (errno != 0 || end == v.c_str() || !(x >= 0.0 && x <= 100.0)) return false;
  if (*end == '%') ++end;
  if (*end != '\0') return false;
  *out = static_cast<uint32_t>(x * 10000.0 + 0.5);
  return true;
}

bool to_uint(const std::string& v, uint64_t max, uint64_t* out) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long x = std::strtoull(v.c_str(), &end, 0);
  if (errno != 0 || end == v.c_str() || *end != '\0' || x > max) return false;
  *out = x;
  return true;
}

// "0-3", "0,2", "1,3-5": distinct lcores below 1024, at most 16, in the order given.
bool parse_lcores(const std::string& text, std::vector<unsigned>* out) {
  std::vector<unsigned> got;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    const auto dash = part.find('-');
    uint64_t lo = 0, hi = 0;
    if (!to_uint(part.substr(0, dash), 1023, &lo)) return false;
    hi = lo;
    if (dash != std::string::npos && (!to_uint(part.substr(dash + 1), 1023, &hi) || hi < lo)) return false;
    for (uint64_t l = lo; l <= hi; ++l) {
      if (std::find(got.begin(), got.end(), unsigned(l)) != got.end() || got.size() == 16) return false;
      got.push_back(unsigned(l));
    }
  }
  if (got.empty()) return false;
  *out = std::move(got);
  return true;
}

int apply(const std::string& key, const std::string& value, DaemonConfig* c, std::string* err) {
  uint64_t n = 0;
  auto num = [&](uint64_t max) {
    if (to_uint(value, max, &n)) return true;
    *err = "bad value for --" + key + ": " + value;
    return false;
  };
  if (key == "name") c->name = value;
  else if (key == "run-dir") c->run_dir = value;
  else if (key == "port") c->port = value;
  else if (key == "address") c->addresses.push_back(value);
  else if (key == "route") c->routes.push_back(value);
  else if (key == "netdev") c->netdev = value;
  else if (key == "link") {
    if (value != "af_xdp" && value != "af_packet" && value != "packet") {
      *err = "--link is af_xdp, af_packet or packet";
      return -EINVAL;
    }
    c->link = value;
  }
  else if (key == "link-args") {
    // Only devargs: another driver's name or a second iface= would not be the netdev's.
    if (value.empty() || value.find_first_of(" \t") != std::string::npos || value.find("iface=") != std::string::npos ||
        value.find('=') == std::string::npos) {
      *err = "--link-args is K=V[,K=V...] without iface= (--netdev names the netdev): " + value;
      return -EINVAL;
    }
    c->link_args = value;
  }
  else if (key == "vlan") { if (!num(4094) || n == 0) { *err = "--vlan is 1..4094"; return -EINVAL; } c->vlan = uint16_t(n); }
  else if (key == "mtu") { if (!num(9702)) return -EINVAL; c->mtu = uint16_t(n); }
  else if (key == "lcore") { if (!num(1023)) return -EINVAL; c->lcores = {unsigned(n)}; }
  else if (key == "lcores") {
    if (!parse_lcores(value, &c->lcores)) {
      *err = "--lcores is a list of 1 to 16 distinct lcores, e.g. 0-3 or 0,2: " + value;
      return -EINVAL;
    }
  }
  else if (key == "memory") { if (!num(1u << 20)) return -EINVAL; c->memory_mb = unsigned(n); }
  else if (key == "mbufs") { if (!num(1u << 24)) return -EINVAL; c->mbufs = unsigned(n); }
  else if (key == "max-qps") { if (!num(1u << 20) || n == 0) return -EINVAL; c->max_qps = uint32_t(n); }
  else if (key == "queue-depth") { if (!num(32768) || n == 0) return -EINVAL; c->queue_depth = uint32_t(n); }
  else if (key == "poll-mode") {
    if (value != "auto" && value != "poll" && value != "event") {
      *err = "--poll-mode is auto, poll or event";
      return -EINVAL;
    }
    c->poll_mode = value;
  }
  else if (key == "event-nice") {
    char* end = nullptr;
    const long v = std::strtol(value.c_str(), &end, 10);
    if (end == value.c_str() || *end != '\0' || v < -20 || v > 19) {
      *err = "--event-nice is -20..19: " + value;
      return -EINVAL;
    }
    c->event_nice = int(v);
  }
  else if (key == "event-policy") {
    if (value != "auto" && value != "other" && value != "rr") {
      *err = "--event-policy is auto, other or rr";
      return -EINVAL;
    }
    c->event_policy = value;
  }
  else if (key == "event-affinity") {
    if (value != "lcore" && value != "any" && value != "auto") {
      *err = "--event-affinity is lcore, any or auto";
      return -EINVAL;
    }
    c->event_affinity = value;
  }
  else if (key == "idle-spin-us") { if (!num(60'000'000)) return -EINVAL; c->idle_spin_us = n; }
  else if (key == "cm-channels") { if (!num(1'000'000) || n == 0) return -EINVAL; c->cm_channels_per_process = uint32_t(n); }
  else if (key == "max-sleep-us") { if (!num(1'000'000) || n == 0) return -EINVAL; c->max_sleep_us = n; }
  else if (key == "eal") c->eal_args.push_back(value);
  else if (key == "log-level") c->log_level = value;
  else if (key == "sysfs-root") c->sysfs_root = value;
  else if (key == "dev-node") {
    if (value != "yes" && value != "no") {
      *err = "--dev-node is yes or no";
      return -EINVAL;
    }
    c->dev_node = value == "yes";
  }
  else if (key == "drop-rate") {
    if (!parse_percent_ppm(value, &c->drop_ppm)) {
      *err = "--drop-rate is a percentage from 0 to 100 (e.g. 1 or 0.5%): " + value;
      return -EINVAL;
    }
  }
  else if (key == "drop-seed") { if (!num(UINT64_MAX)) return -EINVAL; c->drop_seed = n; }
  else if (key == "cc") {
    rocev2::CcParams check;
    if (std::string why = rocev2::set_cc_params(&check, value); !why.empty()) {
      *err = "--cc: " + why;
      return -EINVAL;
    }
    c->cc += (c->cc.empty() ? "" : ",") + value;
  }
  else if (key == "metrics") {
    ListenAddress a;
    if (parse_listen_address(value, &a) != 0) {
      *err = "--metrics is PORT, ADDRESS:PORT or [IPV6]:PORT (numeric, port 0-65535): " + value;
      return -EINVAL;
    }
    c->metrics = format_listen_address(a);
  }
  else {
    *err = "unknown option --" + key;
    return -EINVAL;
  }
  return 0;
}

int read_file(const std::string& path, std::vector<std::pair<std::string, std::string>>* out, std::string* err) {
  std::ifstream in(path);
  if (!in) {
    *err = "cannot read " + path;
    return -ENOENT;
  }
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    auto trim = [](std::string s) {
      const auto b = s.find_first_not_of(" \t\r");
      const auto e = s.find_last_not_of(" \t\r");
      return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
    };
    line = trim(line);
    if (line.empty()) continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos) {
      *err = path + ":" + std::to_string(lineno) + ": expected key = value";
      return -EINVAL;
    }
    out->emplace_back(trim(line.substr(0, eq)), trim(line.substr(eq + 1)));
  }
  return 0;
}

}  // namespace

int parse_config(int argc, char** argv, DaemonConfig* out, std::string* err) {
  DaemonConfig c;
  if (const char* d = std::getenv("DROCE_RUN_DIR"); d != nullptr && *d != '\0') c.run_dir = d;
  std::vector<std::pair<std::string, std::string>> flags, file;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") return 1;
    if (a.rfind("--", 0) != 0) {
      *err = "unexpected argument " + a;
      return -EINVAL;
    }
    a = a.substr(2);
    std::string v;
    if (auto eq = a.find('='); eq != std::string::npos) {
      v = a.substr(eq + 1);
      a = a.substr(0, eq);
    } else if (i + 1 < argc) {
      v = argv[++i];
    } else {
      *err = "--" + a + " needs a value";
      return -EINVAL;
    }
    if (a == "config") {
      if (int rc = read_file(v, &file, err); rc != 0) return rc;
    } else {
      flags.emplace_back(a, v);
    }
  }
  // The file first, so flags override (and add to the repeatable ones).
  for (auto& [k, v] : file)
    if (int rc = apply(k, v, &c, err); rc != 0) return err->empty() ? (*err = "bad value for " + k, rc) : rc;
  for (auto& [k, v] : flags)
    if (int rc = apply(k, v, &c, err); rc != 0) return err->empty() ? (*err = "bad value for --" + k, rc) : rc;
  if (!c.netdev.empty()) {
    // The kernel's view is droce's: its addresses and routes, not ours.
    if (!c.port.empty() || !c.addresses.empty() || !c.routes.empty() || c.vlan != net::kNoVlan) {
      *err = "--netdev takes the port, addresses and routes from the kernel: drop --port, --address, --route "
             "and --vlan (use a VLAN netdev, eth0.100, for a VLAN)";
      return -EINVAL;
    }
    *out = c;
    return 0;
  }
  if (!c.link_args.empty()) {
    *err = "--link-args goes with --netdev (with --port, put the options in its device string)";
    return -EINVAL;
  }
  if (c.port.empty()) {
    *err = "--port (or --netdev) is required";
    return -EINVAL;
  }
  if (c.addresses.empty()) {
    *err = "at least one --address is required";
    return -EINVAL;
  }
  *out = c;
  return 0;
}

rocev2::CcParams cc_defaults_for(bool kernel_netdev) {
  return kernel_netdev ? rocev2::CcParams::kernel_netdev() : rocev2::CcParams{};
}

}  // namespace droce::droced
