#include "core/capabilities.h"

#include <cstdint>
#include <string>

#include "core/proc.h"

namespace droce::core {

bool status_has_capability(std::string_view status, int cap) {
  if (cap < 0 || cap > 63) return false;
  const std::string_view hex = status_value(status, "CapEff");
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

bool process_has_capability(pid_t pid, int cap) {
  std::string text;
  return read_text("/proc/" + std::to_string(pid) + "/status", &text) && status_has_capability(text, cap);
}

}  // namespace droce::core
