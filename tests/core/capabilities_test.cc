// The CapEff line of /proc/<pid>/status, as droced reads it of a client.

#include "core/capabilities.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace droce::core {
namespace {

TEST(Capabilities, TheEffectiveMaskDecides) {
  const char* root = "Name:\tx\nCapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\n"
                     "CapEff:\t000001ffffffffff\nCapBnd:\t000001ffffffffff\n";
  const char* user = "Name:\tx\nCapPrm:\t0000000000002000\nCapEff:\t0000000000000000\n";
  const char* raw_only = "CapEff:\t0000000000002000\n";
  EXPECT_TRUE(status_has_capability(root, kCapNetRaw));
  EXPECT_FALSE(status_has_capability(user, kCapNetRaw));  // permitted but not effective
  EXPECT_TRUE(status_has_capability(raw_only, kCapNetRaw));
  EXPECT_FALSE(status_has_capability(raw_only, 12));
  EXPECT_FALSE(status_has_capability("CapEff:\tzz\n", kCapNetRaw));
  EXPECT_FALSE(status_has_capability("Name:\tx\n", kCapNetRaw));
  EXPECT_FALSE(status_has_capability("", kCapNetRaw));
  EXPECT_FALSE(status_has_capability(root, 64));
  EXPECT_TRUE(status_has_capability("CapEff: 2000", kCapNetRaw));  // last line, no newline
}

TEST(Capabilities, ALiveProcessAsItsStatusSays) {
  // This process, read by pid, answers as its own status text does; root (CI) holds CAP_NET_RAW;
  // a pid that cannot exist holds nothing.
  std::ifstream in("/proc/self/status");
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(process_has_capability(getpid(), kCapNetRaw), status_has_capability(text.str(), kCapNetRaw));
  if (geteuid() == 0) {
    EXPECT_TRUE(process_has_capability(getpid(), kCapNetRaw));
  }
  EXPECT_FALSE(process_has_capability(-1, kCapNetRaw));
}

}  // namespace
}  // namespace droce::core
