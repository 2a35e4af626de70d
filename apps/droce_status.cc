// `droce devices|ports|gids|qps|clients|cores|cm|counters|status [--json]`: droced's
// state, read with the control protocol's read-only `stats` message (no
// verbs context is opened). droced renders JSON; the tables here are read
// from it with a small JSON reader.

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "provider/client/client.h"

namespace droce::cli {

namespace {

// A JSON value: enough for droced's output.
struct Value {
  enum Kind { null, boolean, number, string, array, object } kind = null;
  double num = 0;
  bool b = false;
  std::string str;
  std::vector<Value> items;
  std::vector<std::string> keys;  ///< an object's keys; its values are in items
  const Value* get(std::string_view k) const {
    for (size_t i = 0; i < keys.size(); ++i)
      if (keys[i] == k) return &items[i];
    return nullptr;
  }
  std::string text() const {
    if (kind == string) return str;
    if (kind == boolean) return b ? "true" : "false";
    if (kind == number) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.0f", num);
      return buf;
    }
    return "";
  }
};

struct Reader {
  std::string_view s;
  size_t i = 0;
  bool ok = true;
  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r')) ++i;
  }
  std::string read_string() {
    std::string out;
    ++i;  // "
    while (i < s.size() && s[i] != '"') {
      if (s[i] == '\\' && i + 1 < s.size()) {
        ++i;
        if (s[i] == 'u' && i + 4 < s.size()) {
          out += static_cast<char>(std::strtol(std::string(s.substr(i + 1, 4)).c_str(), nullptr, 16));
          i += 4;
        } else {
          out += s[i] == 'n' ? '\n' : s[i];
        }
      } else {
        out += s[i];
      }
      ++i;
    }
    ++i;
    return out;
  }
  Value parse() {
    Value v;
    ws();
    if (i >= s.size()) {
      ok = false;
      return v;
    }
    const char c = s[i];
    if (c == '{' || c == '[') {
      v.kind = c == '{' ? Value::object : Value::array;
      ++i;
      ws();
      while (ok && i < s.size() && s[i] != (c == '{' ? '}' : ']')) {
        if (c == '{') {
          ws();
          v.keys.push_back(read_string());
          ws();
          ++i;  // :
          v.items.push_back(parse());
        } else {
          v.items.push_back(parse());
        }
        ws();
        if (i < s.size() && s[i] == ',') ++i;
        ws();
      }
      ++i;
    } else if (c == '"') {
      v.kind = Value::string;
      v.str = read_string();
    } else if (s.substr(i, 4) == "true" || s.substr(i, 5) == "false") {
      v.kind = Value::boolean;
      v.b = s[i] == 't';
      i += v.b ? 4 : 5;
    } else {
      v.kind = Value::number;
      char* end = nullptr;
      const std::string digits(s.substr(i, 32));
      v.num = std::strtod(digits.c_str(), &end);
      const size_t used = static_cast<size_t>(end - digits.c_str());
      if (used == 0) ok = false;
      i += used;
    }
    return v;
  }
};

void print_json(const Value& v, std::string* out) {
  switch (v.kind) {
    case Value::object:
      *out += '{';
      for (size_t k = 0; k < v.keys.size(); ++k) {
        if (k) *out += ',';
        *out += '"' + v.keys[k] + "\":";
        print_json(v.items[k], out);
      }
      *out += '}';
      return;
    case Value::array:
      *out += '[';
      for (size_t k = 0; k < v.items.size(); ++k) {
        if (k) *out += ',';
        print_json(v.items[k], out);
      }
      *out += ']';
      return;
    case Value::string: {
      *out += '"';
      for (char c : v.str) {
        if (c == '"' || c == '\\') *out += '\\';
        *out += c;
      }
      *out += '"';
      return;
    }
    default:
      *out += v.text();
  }
}

// A table: one row per array item, the given columns.
void table(const Value* rows, const std::vector<std::string>& cols) {
  if (rows == nullptr || rows->kind != Value::array) return;
  std::vector<size_t> w(cols.size());
  for (size_t c = 0; c < cols.size(); ++c) w[c] = cols[c].size();
  for (const auto& r : rows->items)
    for (size_t c = 0; c < cols.size(); ++c)
      if (const Value* v = r.get(cols[c])) w[c] = std::max(w[c], v->text().size());
  for (size_t c = 0; c < cols.size(); ++c) std::printf("%-*s  ", int(w[c]), cols[c].c_str());
  std::printf("\n");
  for (const auto& r : rows->items) {
    for (size_t c = 0; c < cols.size(); ++c) {
      const Value* v = r.get(cols[c]);
      std::printf("%-*s  ", int(w[c]), v ? v->text().c_str() : "-");
    }
    std::printf("\n");
  }
}

void flat(const Value& v, const std::string& prefix) {
  for (size_t i = 0; i < v.keys.size(); ++i) {
    const Value& x = v.items[i];
    if (x.kind == Value::object) flat(x, prefix + v.keys[i] + ".");
    else std::printf("%-40s %s\n", (prefix + v.keys[i]).c_str(), x.text().c_str());
  }
}

}  // namespace

int status_command(std::string_view cmd, const std::vector<std::string_view>& args) {
  bool json = false;
  std::string device = "droce0", socket;
  for (size_t k = 0; k < args.size(); ++k) {
    if (args[k] == "--json") json = true;
    else if (args[k] == "--device" && k + 1 < args.size()) device = args[++k];
    else if (args[k] == "--socket" && k + 1 < args.size()) socket = args[++k];
    else {
      std::fprintf(stderr, "usage: droce %.*s [--json] [--device NAME | --socket PATH]\n", int(cmd.size()), cmd.data());
      return 2;
    }
  }
  if (socket.empty()) socket = client::Context::socket_path(device);
  std::string text;
  if (int rc = client::query_stats(socket, &text); rc != 0) {
    std::fprintf(stderr, "droce: cannot reach droced at %s: %s\n", socket.c_str(), std::strerror(-rc));
    return 1;
  }
  Reader r{text};
  const Value all = r.parse();
  if (!r.ok || all.kind != Value::object) {
    std::fprintf(stderr, "droce: droced sent something that is not JSON\n");
    return 1;
  }
  const std::map<std::string_view, std::string_view> section = {
      {"devices", "device"}, {"ports", "ports"}, {"gids", "gids"}, {"qps", "qps"},
      {"clients", "clients"}, {"counters", "counters"}, {"cores", "cores"}, {"cm", "cm"},
      {"multicast", "multicast"}};
  const Value* v = cmd == "status" ? &all : (section.count(cmd) ? all.get(section.at(cmd)) : nullptr);
  if (v == nullptr) return 1;
  if (json) {
    std::string out;
    Value list;
    list.kind = Value::array;
    list.items.push_back(*v);
    print_json(cmd == "devices" ? list : *v, &out);
    std::printf("%s\n", out.c_str());
    return 0;
  }
  if (cmd == "devices" || cmd == "status") {
    const Value* d = all.get("device");
    std::printf("%s  node GUID %s  socket %s  clients %s\n", d->get("name")->text().c_str(),
                d->get("node_guid")->text().c_str(), d->get("socket")->text().c_str(), d->get("clients")->text().c_str());
  }
  if (cmd == "ports" || cmd == "status")
    table(all.get("ports"), {"port", "state", "driver", "mac", "mtu", "speed_mbps", "offloads", "devargs"});
  if (cmd == "gids" || cmd == "status") table(all.get("gids"), {"index", "gid", "address", "type", "vlan"});
  if ((cmd == "cores" || cmd == "status") && all.get("cores") != nullptr)
    table(all.get("cores"), {"core", "lcore", "mode", "policy", "cpus", "rx_queue", "tx_queue", "clients", "qps", "rx_frames",
                             "tx_frames", "handed_in", "handed_out", "hand_off_dropped", "sleeps",
                             "wakeups_by_port", "wakeups_by_client", "wakeups_by_timer", "yields", "stuck_blocks",
                             "rt_demotions", "on_cpu", "cpu_ms",
                             "wait_ms", "preempted", "mode_reason"});
  if (cmd == "clients" || cmd == "status")
    table(all.get("clients"), {"id", "pid", "program", "core", "qps", "cqs", "mrs", "wqes_posted", "wqes_refused"});
  if (cmd == "qps" || cmd == "status")
    table(all.get("qps"), {"qpn", "client", "type", "state", "dest_qpn", "dest", "tx_packets", "rx_packets",
                           "retransmits", "timeouts", "rnr_naks_received"});
  if ((cmd == "cm" || cmd == "status") && all.get("cm") != nullptr)
    table(all.get("cm"), {"id", "channel", "port_space", "state", "local", "remote", "comm_id", "cm_state", "qpn",
                          "remote_qpn", "events_reported", "groups"});
  if ((cmd == "multicast" || cmd == "status") && all.get("multicast") != nullptr) {
    table(all.get("multicast"), {"group", "core", "qpns"});
    table(all.get("membership"), {"group", "source", "reports_sent", "leaves_sent", "queries_seen"});
  }
  if (cmd == "counters") flat(*v, "");
  return 0;
}

}  // namespace droce::cli
