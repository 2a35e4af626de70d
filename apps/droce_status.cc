// `droce devices|ports|gids|qps|clients|cores|cm|counters|status [--json]`: droced's
// state, read with the control protocol's read-only `stats` message (no
// verbs context is opened). droced renders JSON (droced/stats.h); the tables
// here are read from it (apps/status_text.h).

#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/cli_args.h"
#include "apps/status_text.h"
#include "provider/client/client.h"

namespace droce::cli {

namespace {

using nlohmann::ordered_json;

// The table's cells, printed.
void table(const ordered_json& all, const char* rows, const std::vector<std::string>& cols) {
  if (const auto it = all.find(rows); it != all.end()) std::fputs(table_text(*it, cols).c_str(), stdout);
}

// A field of an object as text, "" when it has none.
std::string field(const ordered_json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() ? std::string() : cell_text(*it);
}

}  // namespace

int status_command(std::string_view cmd, const std::vector<std::string_view>& args) {
  bool json = false;
  std::string device = "droce0", socket, run_dir;
  for (size_t k = 0; k < args.size(); ++k) {
    if (args[k] == "--json") json = true;
    else if (args[k] == "--device" && k + 1 < args.size()) device = args[++k];
    else if (args[k] == "--socket" && k + 1 < args.size()) socket = args[++k];
    else if (args[k] == "--run-dir" && k + 1 < args.size()) run_dir = args[++k];  // as droce exec's
    else {
      std::fprintf(stderr, "usage: droce %.*s [--json] [--device NAME] [--run-dir DIR | --socket PATH]\n",
                   int(cmd.size()), cmd.data());
      return 2;
    }
  }
  socket = droced_socket(device, run_dir, socket);
  ordered_json all;
  if (!read_stats(socket, &all)) return 1;
  const std::map<std::string_view, const char*> section = {
      {"devices", "device"}, {"ports", "ports"}, {"gids", "gids"}, {"qps", "qps"},
      {"clients", "clients"}, {"counters", "counters"}, {"cores", "cores"}, {"cm", "cm"},
      {"multicast", "multicast"}};
  const ordered_json* v = &all;
  if (cmd != "status") {
    const auto s = section.find(cmd);
    const auto it = s == section.end() ? all.end() : all.find(s->second);
    if (it == all.end()) return 1;
    v = &*it;
  }
  if (json) {
    const ordered_json& out = cmd == "devices" ? ordered_json::array({*v}) : *v;
    std::printf("%s\n", out.dump(-1, ' ', false, ordered_json::error_handler_t::replace).c_str());
    return 0;
  }
  if (cmd == "devices" || cmd == "status") {
    const auto d = all.find("device");
    if (d != all.end())
      std::printf("%s  node GUID %s  socket %s  clients %s\n", field(*d, "name").c_str(),
                  field(*d, "node_guid").c_str(), field(*d, "socket").c_str(), field(*d, "clients").c_str());
  }
  if (cmd == "ports" || cmd == "status")
    table(all, "ports",
          {"port", "state", "driver", "mac", "mtu", "speed_mbps", "offloads", "devargs", "kernel_filter"});
  if (cmd == "gids" || cmd == "status") table(all, "gids", {"index", "gid", "address", "type", "vlan"});
  if (cmd == "cores" || cmd == "status")
    table(all, "cores", {"core", "lcore", "mode", "policy", "cpus", "rx_queue", "tx_queue", "clients", "qps",
                         "rx_frames", "tx_frames", "handed_in", "handed_out", "hand_off_dropped", "sleeps",
                         "wakeups_by_port", "wakeups_by_client", "wakeups_by_timer", "yields", "stuck_blocks",
                         "rt_demotions", "rt_rescues", "on_cpu", "cpu_ms", "wait_ms", "preempted", "mode_reason"});
  if (cmd == "clients" || cmd == "status")
    table(all, "clients", {"id", "pid", "program", "core", "qps", "cqs", "mrs", "wqes_posted", "wqes_refused"});
  if (cmd == "qps" || cmd == "status")
    table(all, "qps", {"qpn", "client", "type", "state", "dest_qpn", "dest", "tx_packets", "rx_packets",
                       "retransmits", "timeouts", "rnr_naks_received"});
  if (cmd == "cm" || cmd == "status")
    table(all, "cm", {"id", "channel", "port_space", "state", "local", "remote", "comm_id", "cm_state", "qpn",
                      "remote_qpn", "events_reported", "groups"});
  if ((cmd == "multicast" || cmd == "status") && all.contains("multicast")) {
    table(all, "multicast", {"group", "core", "qpns"});
    table(all, "membership", {"group", "source", "reports_sent", "leaves_sent", "queries_seen"});
  }
  if (cmd == "counters") std::fputs(flat_text(*v).c_str(), stdout);
  return 0;
}

}  // namespace droce::cli
