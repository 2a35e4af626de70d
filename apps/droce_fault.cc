// `droce fault`: a running droced's fault rules (droced/fault_stage.h): list them with what
// each did, set one (a new rule or a change to one, taking effect at the cores' next loop) and
// clear one or all. The spec is checked here with the same parser droced uses, so a typo gets
// its reason instead of droced's bare EINVAL.

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/status_text.h"
#include "net/fault_model.h"
#include "apps/cli_args.h"
#include "provider/client/client.h"

namespace droce::cli {

namespace {

using nlohmann::ordered_json;

constexpr const char* kUsage =
    "usage: droce fault [list] [--json]                       the rules and what each did\n"
    "       droce fault set SPEC [--qp N] [--dir rx|tx|both] [--seed N] [--id N] [--json]\n"
    "       droce fault clear ID|all\n"
    "  (each also takes --device NAME and --run-dir DIR | --socket PATH)\n"
    "  SPEC: comma-separated drop=P burst=ENTER[/EXIT[/LOSS]] delay=T jitter=T reorder=P window=T\n"
    "        duplicate=P corrupt=P corrupt-at=payload|icrc|any truncate=P, or none;\n"
    "        a congestion point: rate=R buffer=B ecn-min=B ecn-max=B ecn-pmax=P (RED/ECN marking),\n"
    "        mark=enqueue|dequeue (RED on the depth a frame meets, the default, or leaves behind);\n"
    "        lossless (rx): pfc-xoff=B [pfc-xon=B] [pfc-quanta=N] pause the senders with PFC past\n"
    "        xoff until the queue is down to xon (xoff/2 unless given; buffer above xoff: headroom);\n"
    "        arrival=wire|loop: a received frame's time is its link's receive stamp where it has\n"
    "        one (wire, the default; the packet link stamps) or always droced's loop's (loop)\n"
    "        P a percentage (1%, 0.5), T a time (100us, 2ms; bare: us), R a rate (1gbit, 800mbit),\n"
    "        B bytes (256k, 9000)\n"
    "  --qp N: the frames QP N of this droced receives (rx) or sends (tx); default every RoCE frame\n"
    "  --dir: rx (default), tx or both; --id N: change rule N instead of adding one\n";

int usage_error(const std::string& why) {
  if (!why.empty()) std::fprintf(stderr, "droce fault: %s\n", why.c_str());
  std::fputs(kUsage, stderr);
  return 2;
}

int list(const std::string& socket, bool json) {
  ordered_json all;
  if (!read_stats(socket, &all)) return 1;
  const auto it = all.find("faults");
  if (it == all.end()) {
    std::fprintf(stderr, "droce: this droced has no fault rules (an older version?)\n");
    return 1;
  }
  if (json) {
    std::printf("%s\n", it->dump().c_str());
    return 0;
  }
  if (it->empty()) {
    std::printf("no fault rules\n");
    return 0;
  }
  // The rules' counters, flattened into their rows for the table.
  ordered_json rows = ordered_json::array();
  for (const ordered_json& r : *it) {
    ordered_json row = r;
    row.erase("counters");
    for (const auto& [k, v] : r["counters"].items()) row[k] = v;
    rows.push_back(std::move(row));
  }
  std::fputs(table_text(rows, {"id", "qpn", "direction", "spec", "seed", "matched", "dropped", "delayed",
                               "reordered", "duplicated", "corrupted", "corrupt_discarded", "truncated",
                               "copy_failed", "queue_marked", "queue_dropped", "queue_depth", "queue_depth_max",
                               "wire_timed", "pfc_xoff_sent", "pfc_xon_sent"})
                 .c_str(),
             stdout);
  return 0;
}

}  // namespace

int fault_command(const std::vector<std::string_view>& all_args) {
  std::string device = "droce0", socket, run_dir;
  bool json = false;
  std::vector<std::string_view> args;
  abi::ctl::FaultRequest q{};
  q.qpn = UINT32_MAX;
  q.direction = 1;
  q.seed = 1;
  for (size_t k = 0; k < all_args.size(); ++k) {
    const std::string_view a = all_args[k];
    const bool has_value = k + 1 < all_args.size();
    if (a == "--json") json = true;
    else if (a == "--device" && has_value) device = all_args[++k];
    else if (a == "--socket" && has_value) socket = all_args[++k];
    else if (a == "--run-dir" && has_value) run_dir = all_args[++k];
    else if (a == "--qp" && has_value) {
      if (!number(all_args[++k], &q.qpn) || q.qpn > 0xffffff) return usage_error("--qp is a QP number (0..0xffffff)");
    } else if (a == "--dir" && has_value) {
      const std::string_view d = all_args[++k];
      q.direction = d == "rx" ? 1 : d == "tx" ? 2 : d == "both" ? 3 : 0;
      if (q.direction == 0) return usage_error("--dir is rx, tx or both");
    } else if (a == "--seed" && has_value) {
      if (!number(all_args[++k], &q.seed)) return usage_error("--seed is a number");
    } else if (a == "--id" && has_value) {
      if (!number(all_args[++k], &q.id) || q.id == 0) return usage_error("--id is a rule's number (1...)");
    } else if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a.size() > 1 && a[0] == '-' && a != "-") {
      return usage_error("unknown option " + std::string(a));
    } else {
      args.push_back(a);
    }
  }
  socket = droced_socket(device, run_dir, socket);
  const std::string_view op = args.empty() ? "list" : args[0];
  if (op == "list" && args.size() <= 1) return list(socket, json);

  std::string what;
  if (op == "set" && args.size() == 2) {
    net::FaultSpec spec;
    if (std::string why = spec.parse(args[1]); !why.empty()) return usage_error(why);
    const std::string canonical = spec.to_string();
    if (canonical.size() >= sizeof q.spec) return usage_error("the spec is too long");
    std::memcpy(q.spec, canonical.data(), canonical.size());
    q.op = uint32_t(abi::ctl::FaultOp::set);
    what = canonical;
  } else if (op == "clear" && args.size() == 2) {
    q.op = uint32_t(abi::ctl::FaultOp::clear);
    if (args[1] != "all" && (!number(args[1], &q.id) || q.id == 0))
      return usage_error("clear takes a rule's number or all");
  } else {
    return usage_error("");
  }
  uint32_t id = 0;
  if (int rc = client::control_fault(socket, q, &id); rc != 0) {
    const char* hint = rc == -EPERM       ? " (only root or droced's own user may set faults)"
                       : rc == -ENOENT    ? " (no such rule, or no droced there)"
                       : rc == -EOPNOTSUPP ? " (this droced has no fault rules)"
                                           : "";
    std::fprintf(stderr, "droce fault: %s at %s: %s%s\n", std::string(op).c_str(), socket.c_str(),
                 std::strerror(-rc), hint);
    return 1;
  }
  if (json) {
    std::printf("{\"id\":%u}\n", id);
  } else if (q.op == uint32_t(abi::ctl::FaultOp::set)) {
    std::printf("fault rule %u: %s on %s frames of %s\n", id, what.c_str(),
                q.direction == 1 ? "received" : q.direction == 2 ? "sent" : "received and sent",
                q.qpn == UINT32_MAX ? "every QP" : ("QP " + std::to_string(q.qpn)).c_str());
  } else {
    std::printf("fault rule %s cleared\n", q.id == 0 ? "every" : std::to_string(q.id).c_str());
  }
  return 0;
}

}  // namespace droce::cli
