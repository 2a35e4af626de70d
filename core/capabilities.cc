#include "core/capabilities.h"

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

namespace droce::core {

bool status_has_capability(std::string_view status, int cap) {
  if (cap < 0 || cap > 63) return false;
  constexpr std::string_view kKey = "CapEff:";
  size_t at = 0;
  while (at < status.size()) {
    const size_t end = status.find('\n', at);
    const std::string_view line = status.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at);
    if (line.substr(0, kKey.size()) == kKey) {
      std::string_view hex = line.substr(kKey.size());
      while (!hex.empty() && (hex.front() == ' ' || hex.front() == '\t')) hex.remove_prefix(1);
      if (hex.empty() || hex.size() > 16) return false;
      uint64_t mask = 0;
      for (char c : hex) {
        int v;
        if (c >= '0' && c <= '9') v = c - '0';
        else if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v = c - 'A' + 10;
        else return false;
        mask = (mask << 4) | uint64_t(v);
      }
      return (mask >> cap) & 1;
    }
    if (end == std::string_view::npos) break;
    at = end + 1;
  }
  return false;
}

bool process_has_capability(pid_t pid, int cap) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  if (!in) return false;
  std::stringstream text;
  text << in.rdbuf();
  return status_has_capability(text.str(), cap);
}

}  // namespace droce::core
