#pragma once
// Helpers shared by droce's tests: where the rxe captures live, hex dumps for
// failure messages, and the one EAL a test binary may start.

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <array>

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

/// IP address literals in GID form ("192.0.2.1" -> ::ffff:192.0.2.1); a bad
/// literal fails the test.
inline std::array<uint8_t, 16> ip4(const char* s) {
  std::array<uint8_t, 16> a{};
  a[10] = a[11] = 0xff;
  if (inet_pton(AF_INET, s, &a[12]) != 1) ADD_FAILURE() << "bad IPv4 literal " << s;
  return a;
}
inline std::array<uint8_t, 16> ip6(const char* s) {
  std::array<uint8_t, 16> a{};
  if (inet_pton(AF_INET6, s, a.data()) != 1) ADD_FAILURE() << "bad IPv6 literal " << s;
  return a;
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
