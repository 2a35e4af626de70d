#pragma once
// Helpers shared by droce's tests: where the rxe captures live, hex dumps for
// failure messages, and the one EAL a test binary may start.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace droce::test {

/// ../shared/pcaps beside the checkout (DROCE_PCAP_DIR, set by meson).
inline std::filesystem::path pcap_dir() {
  const char* dir = std::getenv("DROCE_PCAP_DIR");
  return dir ? std::filesystem::path(dir) : std::filesystem::path("../shared/pcaps");
}

inline std::string hex(std::span<const uint8_t> b) {
  static const char* kDigits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < b.size(); ++i) {
    if (i && i % 16 == 0) s += '\n';
    s += kDigits[b[i] >> 4];
    s += kDigits[b[i] & 15];
    s += ' ';
  }
  return s;
}

/// A seed for a randomized test: DROCE_TEST_SEED when set (to reproduce a
/// failure), else a fresh one. Tests print it with SCOPED_TRACE.
inline uint64_t test_seed() {
  if (const char* s = std::getenv("DROCE_TEST_SEED")) return std::strtoull(s, nullptr, 0);
  return (uint64_t(std::random_device{}()) << 32) | std::random_device{}();
}

/// Starts EAL (no hugepages needed) once for a test binary; see eal_main.cc.
void require_eal();

}  // namespace droce::test
