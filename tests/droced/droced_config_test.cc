// droced's flags and configuration file: values, the file under the flags,
// and a clear message for each mistake.

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "droced/config.h"

namespace droce::droced {
namespace {

int parse(std::vector<std::string> args, DaemonConfig* c, std::string* err) {
  args.insert(args.begin(), "droced");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return parse_config(static_cast<int>(argv.size()), argv.data(), c, err);
}

TEST(DrocedConfig, FlagsAndTheFileWithFlagsWinning) {
  const std::string path = ::testing::TempDir() + "droced-config-test.conf";
  {
    std::ofstream f(path);
    f << "# droced\nport = net_memif0,role=server\naddress = 10.0.0.1\nvlan = 7  # tagged\nmtu=9000\n";
  }
  DaemonConfig c;
  std::string err;
  ASSERT_EQ(parse({"--config", path, "--vlan", "100", "--address=fd00::1", "--eal", "--no-pci"}, &c, &err), 0) << err;
  EXPECT_EQ(c.port, "net_memif0,role=server");
  EXPECT_EQ(c.vlan, 100);  // the flag over the file
  EXPECT_EQ(c.mtu, 9000);
  EXPECT_EQ(c.addresses, (std::vector<std::string>{"10.0.0.1", "fd00::1"}));  // repeatable ones add up
  EXPECT_EQ(c.eal_args, (std::vector<std::string>{"--no-pci"}));
  std::remove(path.c_str());
}

TEST(DrocedConfig, EachMistakeSaysWhat) {
  DaemonConfig c;
  std::string err;
  EXPECT_EQ(parse({"--address", "10.0.0.1"}, &c, &err), -EINVAL);
  EXPECT_NE(err.find("--port"), std::string::npos) << err;
  err.clear();
  EXPECT_EQ(parse({"--port", "x"}, &c, &err), -EINVAL);
  EXPECT_NE(err.find("--address"), std::string::npos) << err;
  err.clear();
  EXPECT_EQ(parse({"--port", "x", "--address", "1.2.3.4", "--vlan", "5000"}, &c, &err), -EINVAL);
  EXPECT_NE(err.find("vlan"), std::string::npos) << err;
  err.clear();
  EXPECT_EQ(parse({"--port", "x", "--address", "1.2.3.4", "--bogus", "1"}, &c, &err), -EINVAL);
  EXPECT_NE(err.find("unknown option --bogus"), std::string::npos) << err;
  err.clear();
  EXPECT_EQ(parse({"--config", "/nonexistent/droced.conf"}, &c, &err), -ENOENT);
  EXPECT_NE(err.find("/nonexistent/droced.conf"), std::string::npos) << err;
  EXPECT_EQ(parse({"--help"}, &c, &err), 1);
}

// DCQCN starts with mlx5's defaults, both points on; --cc and the file's `cc` change them by
// mlx5's names (or the debugfs aliases), key by key, and a bad one says which and why.
TEST(DrocedConfig, CcSetsDcqcnParametersByMlx5Names) {
  const std::string path = ::testing::TempDir() + "droced-cc-test.conf";
  {
    std::ofstream f(path);
    f << "port = x\naddress = 10.0.0.1\ncc = rpg_ai_rate=7, cnp_dscp=26\n";
  }
  DaemonConfig c;
  std::string err;
  EXPECT_EQ(c.cc, "");
  ASSERT_EQ(parse({"--config", path, "--cc", "np_cnp_dscp=40", "--cc", "rpg_threshold=5"}, &c, &err), 0) << err;
  // Expect: applied over a device's defaults, in order: the file, then the flags over it.
  for (const bool kernel : {false, true}) {
    rocev2::CcParams p = cc_defaults_for(kernel);
    EXPECT_EQ(p.rp_enable, 1u);
    EXPECT_EQ(p.np_enable, 1u);
    EXPECT_EQ(rocev2::set_cc_params(&p, c.cc), "");
    EXPECT_EQ(p.rpg_ai_rate, 7u);
    EXPECT_EQ(p.cnp_dscp, 40u);  // the flag over the file
    EXPECT_EQ(p.rpg_threshold, 5u);
    EXPECT_EQ(p.rpg_hai_rate, 50u);
    // Expect: mlx5's timers off a kernel netdev; a kernel path's on one; the rest mlx5's.
    EXPECT_EQ(p.dce_tcp_rtt, kernel ? 50u : 1u);
    EXPECT_EQ(p.rpg_time_reset, kernel ? 3000u : 300u);
    EXPECT_EQ(p.rpg_byte_reset, 32767u);
  }
  DaemonConfig d;
  EXPECT_EQ(parse({"--port", "x", "--address", "1.2.3.4", "--cc", "rpg_gd=99"}, &d, &err), -EINVAL);
  EXPECT_NE(err.find("rpg_gd"), std::string::npos) << err;
  std::remove(path.c_str());
}

TEST(DrocedConfig, NetdevTakesPortAddressesAndRoutesFromTheKernel) {
  DaemonConfig c;
  std::string err;
  ASSERT_EQ(parse({"--netdev", "eth0"}, &c, &err), 0) << err;
  EXPECT_EQ(c.netdev, "eth0");
  EXPECT_EQ(c.link, "af_xdp");
  ASSERT_EQ(parse({"--netdev", "eth0", "--link", "af_packet", "--name", "droce1"}, &c, &err), 0) << err;
  EXPECT_EQ(c.link, "af_packet");
  for (const auto& extra : std::vector<std::vector<std::string>>{
           {"--port", "net_af_packet0,iface=eth0"}, {"--address", "10.0.0.1"}, {"--route", "default via 10.0.0.1"},
           {"--vlan", "5"}}) {
    std::vector<std::string> args{"--netdev", "eth0"};
    args.insert(args.end(), extra.begin(), extra.end());
    err.clear();
    EXPECT_EQ(parse(args, &c, &err), -EINVAL) << extra[0];
    EXPECT_NE(err.find("from the kernel"), std::string::npos) << err;
  }
  err.clear();
  EXPECT_EQ(parse({"--netdev", "eth0", "--link", "tap"}, &c, &err), -EINVAL);
  EXPECT_NE(err.find("af_xdp, af_packet or packet"), std::string::npos) << err;
  EXPECT_EQ(parse({"--netdev", "eth0", "--link", "packet"}, &c, &err), 0) << err;
  EXPECT_EQ(c.link, "packet");
  EXPECT_TRUE(c.link_args.empty());
  ASSERT_EQ(parse({"--netdev", "eth0", "--link", "packet", "--link-args", "frames=1024,gso=off"}, &c, &err), 0) << err;
  EXPECT_EQ(c.link_args, "frames=1024,gso=off");
  // Options only: not another netdev, not words; and only with --netdev.
  for (const char* bad : {"iface=eth1", "frames", "frames=1 gso=off", ""}) {
    err.clear();
    EXPECT_EQ(parse({"--netdev", "eth0", "--link-args", bad}, &c, &err), -EINVAL) << bad;
    EXPECT_NE(err.find("--link-args"), std::string::npos) << err;
  }
  err.clear();
  EXPECT_EQ(parse({"--port", "x", "--address", "10.0.0.1", "--link-args", "frames=64"}, &c, &err), -EINVAL);
  EXPECT_NE(err.find("goes with --netdev"), std::string::npos) << err;
}

TEST(DrocedConfig, RoutesAndPrefixedAddressesAreKeptAsWritten) {
  DaemonConfig c;
  std::string err;
  ASSERT_EQ(parse({"--port", "x", "--address", "10.61.1.2/24", "--route", "default via 10.61.1.1", "--route",
                   "fd00:62::/64 via fd00:61::1"},
                  &c, &err),
            0)
      << err;
  EXPECT_EQ(c.addresses, (std::vector<std::string>{"10.61.1.2/24"}));
  EXPECT_EQ(c.routes, (std::vector<std::string>{"default via 10.61.1.1", "fd00:62::/64 via fd00:61::1"}));
}

TEST(DrocedConfig, LcoresAreAListOfDistinctCoresInTheOrderGiven) {
  DaemonConfig c;
  std::string err;
  EXPECT_EQ(c.lcores, std::vector<unsigned>{0});
  ASSERT_EQ(parse({"--port", "x", "--address", "1.2.3.4", "--lcores", "2,0-1,5"}, &c, &err), 0) << err;
  EXPECT_EQ(c.lcores, (std::vector<unsigned>{2, 0, 1, 5}));  // the first is the main lcore
  ASSERT_EQ(parse({"--port", "x", "--address", "1.2.3.4", "--lcore", "3"}, &c, &err), 0) << err;
  EXPECT_EQ(c.lcores, std::vector<unsigned>{3});
  for (const char* bad : {"", "0,0", "1-0", "0-16", "a", "0,,1", "2000"}) {
    err.clear();
    EXPECT_EQ(parse({"--port", "x", "--address", "1.2.3.4", "--lcores", bad}, &c, &err), -EINVAL) << bad;
    EXPECT_NE(err.find("--lcores"), std::string::npos) << bad << ": " << err;
  }
}

TEST(DrocedConfig, EventAffinityIsLcoreAnyOrAuto) {
  DaemonConfig c;
  std::string err;
  EXPECT_EQ(c.event_affinity, "auto");
  for (const char* ok : {"lcore", "any", "auto"}) {
    ASSERT_EQ(parse({"--port", "x", "--address", "1.2.3.4", "--event-affinity", ok}, &c, &err), 0) << err;
    EXPECT_EQ(c.event_affinity, ok);
  }
  EXPECT_EQ(parse({"--port", "x", "--address", "1.2.3.4", "--event-affinity", "0"}, &c, &err), -EINVAL);
  EXPECT_NE(err.find("--event-affinity"), std::string::npos) << err;
}

TEST(DrocedConfig, EventPolicyIsAutoOtherOrRr) {
  DaemonConfig c;
  std::string err;
  EXPECT_EQ(c.event_policy, "auto");
  for (const char* ok : {"rr", "other", "auto"}) {
    ASSERT_EQ(parse({"--port", "x", "--address", "1.2.3.4", "--event-policy", ok}, &c, &err), 0) << err;
    EXPECT_EQ(c.event_policy, ok);
  }
  for (const char* bad : {"fifo", "RR", ""}) {
    EXPECT_EQ(parse({"--port", "x", "--address", "1.2.3.4", "--event-policy", bad}, &c, &err), -EINVAL) << bad;
    EXPECT_NE(err.find("--event-policy"), std::string::npos) << err;
  }
}

TEST(DrocedConfig, DropRateIsAPercentage) {
  DaemonConfig c;
  std::string err;
  EXPECT_EQ(c.drop_ppm, 0u);  // no loss unless asked
  ASSERT_EQ(parse({"--port", "x", "--address", "1.2.3.4", "--drop-rate", "1", "--drop-seed", "9"}, &c, &err), 0)
      << err;
  EXPECT_EQ(c.drop_ppm, 10000u);
  EXPECT_EQ(c.drop_seed, 9u);
  ASSERT_EQ(parse({"--port", "x", "--address", "1.2.3.4", "--drop-rate", "0.5%"}, &c, &err), 0) << err;
  EXPECT_EQ(c.drop_ppm, 5000u);
  ASSERT_EQ(parse({"--port", "x", "--address", "1.2.3.4", "--drop-rate", "100"}, &c, &err), 0) << err;
  EXPECT_EQ(c.drop_ppm, 1000000u);
  for (const char* bad : {"", "-1", "101", "1%%", "one", "1 %"}) {
    err.clear();
    EXPECT_EQ(parse({"--port", "x", "--address", "1.2.3.4", "--drop-rate", bad}, &c, &err), -EINVAL) << bad;
    EXPECT_NE(err.find("--drop-rate"), std::string::npos) << bad << ": " << err;
  }
}

TEST(DrocedConfig, MetricsListenOnLoopbackUnlessAnAddressIsNamed) {
  DaemonConfig c;
  std::string err;
  EXPECT_EQ(c.metrics, "");  // no endpoint unless asked
  ASSERT_EQ(parse({"--port", "x", "--address", "1.2.3.4", "--metrics", "9464"}, &c, &err), 0) << err;
  EXPECT_EQ(c.metrics, "127.0.0.1:9464");
  ASSERT_EQ(parse({"--port", "x", "--address", "1.2.3.4", "--metrics", "0.0.0.0:80"}, &c, &err), 0) << err;
  EXPECT_EQ(c.metrics, "0.0.0.0:80");
  ASSERT_EQ(parse({"--port", "x", "--address", "1.2.3.4", "--metrics=[::1]:9464"}, &c, &err), 0) << err;
  EXPECT_EQ(c.metrics, "[::1]:9464");
  const std::string path = ::testing::TempDir() + "droced-metrics-test.conf";
  {
    std::ofstream f(path);
    f << "port = x\naddress = 1.2.3.4\nmetrics = 9100\n";
  }
  ASSERT_EQ(parse({"--config", path}, &c, &err), 0) << err;
  EXPECT_EQ(c.metrics, "127.0.0.1:9100");
  std::remove(path.c_str());
  for (const char* bad : {"", "port", "70000", "1.2.3.4:", "localhost:9464", "::1:9464", "[::1]9464", "1.2.3:9"}) {
    err.clear();
    EXPECT_EQ(parse({"--port", "x", "--address", "1.2.3.4", "--metrics", bad}, &c, &err), -EINVAL) << bad;
    EXPECT_NE(err.find("--metrics"), std::string::npos) << bad << ": " << err;
  }
}

}  // namespace
}  // namespace droce::droced
