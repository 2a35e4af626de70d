#pragma once
// What several `droce` commands read the same way: numbers (decimal or 0x hex) and which droced
// to talk to (--device, --run-dir as droce exec takes it, or --socket).

#include <nlohmann/json.hpp>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "provider/client/client.h"

namespace droce::cli {

/// The whole of `s` as a number, decimal or 0x-prefixed hex; false if anything else is there.
template <class T>
bool number(std::string_view s, T* out) {
  int base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    s.remove_prefix(2);
    base = 16;
  }
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, base);
  return !s.empty() && ec == std::errc() && end == s.data() + s.size();
}

/// droced's control socket: --socket if given, else <run_dir>/<device>.sock, else the default
/// run directory's ($DROCE_RUN_DIR or /run/droce).
inline std::string droced_socket(const std::string& device, const std::string& run_dir, const std::string& socket) {
  if (!socket.empty()) return socket;
  return run_dir.empty() ? client::Context::socket_path(device) : run_dir + "/" + device + ".sock";
}

/// droced's stats JSON (the `stats` message) as an object in *out; false, with the reason on
/// stderr, when droced cannot be reached or answers something else.
inline bool read_stats(const std::string& socket, nlohmann::ordered_json* out) {
  std::string text;
  if (int rc = client::query_stats(socket, &text); rc != 0) {
    std::fprintf(stderr, "droce: cannot reach droced at %s: %s\n", socket.c_str(), std::strerror(-rc));
    return false;
  }
  *out = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded() || !out->is_object()) {
    std::fprintf(stderr, "droce: droced sent something that is not JSON\n");
    return false;
  }
  return true;
}

}  // namespace droce::cli
