// `droce cc`: a running droced's DCQCN parameters (rocev2/dcqcn.h): show them, with mlx5's
// names and units, the device's defaults (mlx5's, with a kernel path's timers on a link over a
// kernel netdev) and the congestion counters, or set some. Assignments are checked
// here with the parser droced uses, so a typo gets its reason instead of droced's bare EINVAL.

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/cli_args.h"
#include "apps/status_text.h"
#include "provider/client/client.h"
#include "rocev2/dcqcn.h"

namespace droce::cli {

namespace {

using nlohmann::ordered_json;

constexpr const char* kUsage =
    "usage: droce cc [show] [--json]              DCQCN's parameters and congestion counters\n"
    "       droce cc set NAME=VALUE [NAME=VALUE...]  change them (root or droced's user)\n"
    "  (each also takes --device NAME and --run-dir DIR | --socket PATH)\n"
    "  NAMEs are mlx5's (ecn/roce_rp, ecn/roce_np; the kernel's debugfs rp_*/np_* names too):\n"
    "  `droce cc` lists each with its unit and default. Several may be given as A=1,B=2.\n";

int usage_error(const std::string& why) {
  if (!why.empty()) std::fprintf(stderr, "droce cc: %s\n", why.c_str());
  std::fputs(kUsage, stderr);
  return 2;
}

constexpr const char* kCcCounters[] = {"np_ecn_marked_roce_packets", "np_cnp_sent", "np_cnp_suppressed",
                                       "rp_cnp_handled", "rp_cnp_ignored", "rp_rate_cuts", "rp_rate_increases",
                                       "cnp_received"};

int show(const std::string& socket, bool json) {
  ordered_json all;
  if (!read_stats(socket, &all)) return 1;
  const auto it = all.find("cc");
  if (it == all.end() || !it->is_object()) {
    std::fprintf(stderr, "droce: this droced has no DCQCN parameters (an older version?)\n");
    return 1;
  }
  ordered_json counters = ordered_json::object();
  if (const auto c = all.find("counters"); c != all.end() && c->is_object())
    for (const char* name : kCcCounters)
      if (const auto v = c->find(name); v != c->end()) counters[name] = *v;
  // The device's defaults (its link's); a droced without them had mlx5's.
  const auto def = all.find("cc_defaults");
  const bool have_defaults = def != all.end() && def->is_object() && !def->empty();
  if (json) {
    ordered_json out;
    out["params"] = *it;
    if (have_defaults) out["defaults"] = *def;
    out["counters"] = counters;
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  const rocev2::CcParams defaults;
  ordered_json rows = ordered_json::array();
  for (const auto& [name, value] : it->items()) {
    const rocev2::CcParamInfo* info = rocev2::find_cc_param(name);
    ordered_json row;
    row["name"] = name;
    row["value"] = value;
    row["unit"] = info ? info->unit : "";
    if (have_defaults && def->contains(name)) row["default"] = (*def)[name];
    else row["default"] = info ? defaults.*(info->member) : 0;
    row["what"] = info ? info->help : "";
    rows.push_back(std::move(row));
  }
  std::fputs(table_text(rows, {"name", "value", "unit", "default", "what"}).c_str(), stdout);
  for (const auto& [name, value] : counters.items()) std::printf("%s %s\n", name.c_str(), value.dump().c_str());
  return 0;
}

}  // namespace

int cc_command(const std::vector<std::string_view>& all_args) {
  std::string device = "droce0", socket, run_dir;
  bool json = false;
  std::vector<std::string_view> args;
  for (size_t k = 0; k < all_args.size(); ++k) {
    const std::string_view a = all_args[k];
    const bool has_value = k + 1 < all_args.size();
    if (a == "--json") json = true;
    else if (a == "--device" && has_value) device = all_args[++k];
    else if (a == "--socket" && has_value) socket = all_args[++k];
    else if (a == "--run-dir" && has_value) run_dir = all_args[++k];
    else if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a.size() > 1 && a[0] == '-') {
      return usage_error("unknown option " + std::string(a));
    } else {
      args.push_back(a);
    }
  }
  socket = droced_socket(device, run_dir, socket);
  const std::string_view op = args.empty() ? "show" : args[0];
  if (op == "show" && args.size() <= 1) return show(socket, json);
  if (op != "set" || args.size() < 2) return usage_error("");

  // Checked here first, on a copy of the defaults: droced applies the same text to its own.
  std::string text;
  for (size_t k = 1; k < args.size(); ++k) text += (k > 1 ? "," : "") + std::string(args[k]);
  rocev2::CcParams check;
  if (std::string why = rocev2::set_cc_params(&check, text); !why.empty()) return usage_error(why);
  abi::ctl::CcRequest q{};
  if (text.size() >= sizeof q.assignments) return usage_error("too many assignments at once");
  q.op = abi::ctl::kCcSet;
  std::memcpy(q.assignments, text.data(), text.size());
  if (int rc = client::control_cc(socket, q); rc != 0) {
    const char* hint = rc == -EPERM        ? " (only root or droced's own user may change them)"
                       : rc == -EOPNOTSUPP ? " (this droced has no DCQCN parameters)"
                       : rc == -EINVAL     ? " (an older droced without one of these parameters?)"
                                           : "";
    std::fprintf(stderr, "droce cc: set at %s: %s%s\n", socket.c_str(), std::strerror(-rc), hint);
    return 1;
  }
  if (json) std::printf("{\"set\":\"%s\"}\n", text.c_str());
  else std::printf("DCQCN: %s\n", text.c_str());
  return 0;
}

}  // namespace droce::cli
