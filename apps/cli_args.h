#pragma once
// What several `droce` commands read the same way: numbers (decimal or 0x hex) and which droced
// to talk to (--device, --run-dir as droce exec takes it, or --socket).

#include <charconv>
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

}  // namespace droce::cli
