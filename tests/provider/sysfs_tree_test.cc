// SysfsTree: the files libibverbs reads, their exact spelling, atomic updates that keep the
// device's identity, and removal. The parsers at the top do what rdma-core 44 does with each
// file (libibverbs/init.c, device.c, cmd_device.c, verbs.c), so a spelling libibverbs would
// misread fails here.
#include "provider/discovery/sysfs_tree.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "net/gid_table.h"
#include "provider/verbs/glue.h"
#include "tests/test_support.h"

namespace droce::provider {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  if (!in) return "<missing " + p.string() + ">";
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// ibv_get_device_guid(): "%hx:%hx:%hx:%hx", most significant group first.
uint64_t parse_guid_like_libibverbs(const std::string& s) {
  unsigned short parts[4];
  if (std::sscanf(s.c_str(), "%hx:%hx:%hx:%hx", &parts[0], &parts[1], &parts[2], &parts[3]) != 4)
    return 0;
  uint64_t guid = 0;
  for (unsigned short p : parts) guid = (guid << 16) | p;
  return guid;
}

// query_sysfs_gid(): "%hx" at offsets 0, 5, 10, ... into a 41-byte buffer.
net::Gid parse_gid_like_libibverbs(std::string s) {
  if (!s.empty() && s.back() == '\n') s.pop_back();
  EXPECT_LT(s.size(), 41u) << "libibverbs reads gids/<i> into char[41]";
  net::Gid gid{};
  for (int i = 0; i < 8; ++i) {
    unsigned short v = 0;
    EXPECT_EQ(std::sscanf(s.c_str() + i * 5, "%hx", &v), 1) << s;
    gid[2 * i] = static_cast<uint8_t>(v >> 8);
    gid[2 * i + 1] = static_cast<uint8_t>(v);
  }
  return gid;
}

bool path_exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

// Every file or directory name left under `root` that is not part of the published tree.
std::vector<std::string> leftovers(const fs::path& root) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.find(".tmp.") != std::string::npos || name.find(".new.") != std::string::npos)
      out.push_back(it->path().string());
  }
  return out;
}

net::GidEntry gid_entry(const net::Gid& gid, net::GidType type, std::string netdev = {}) {
  net::GidEntry e;
  e.gid = gid;
  e.type = type;
  e.netdev = std::move(netdev);
  return e;
}

class SysfsTreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "droce-sysfs-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    desc_.name = "droce0";
    desc_.uverbs_name = "uverbs0";
    desc_.node_guid = 0x0002c9fffe123456ull;
    PortDescription p1;
    p1.state = PortState::active;
    p1.active_mtu = 4096;
    p1.gids = {gid_entry(test::ip6("fe80::5054:ff:fe12:3456"), net::GidType::roce_v2, "eth7"),
               gid_entry({}, net::GidType::roce_v2),  // an emptied slot
               gid_entry(test::ip4("192.0.2.1"), net::GidType::roce_v2),
               gid_entry(test::ip6("2001:db8::1"), net::GidType::roce_v1)};
    p1.gid_table_len = 8;
    p1.pkeys = {0xffff, 0x8001};
    PortDescription p2;
    p2.state = PortState::down;
    p2.gids = {gid_entry(test::ip6("fe80::1"), net::GidType::roce_v2)};
    p2.gid_table_len = 2;
    desc_.ports = {p1, p2};
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  fs::path root_;
  DeviceDescription desc_;
};

TEST_F(SysfsTreeTest, WritesWhatLibibverbsReadsForEnumeration) {
  std::unique_ptr<SysfsTree> tree;
  ASSERT_EQ(SysfsTree::create(root_.string(), desc_, &tree), 0);
  ASSERT_NE(tree, nullptr);
  const fs::path verbs = root_ / "class/infiniband_verbs";
  // check_abi_version(): 3..6.
  EXPECT_EQ(read_file(verbs / "abi_version"), "6\n");
  // librdmacm's check_abi_version_sysfs(): 3..4, and 4 for INIT_QP_ATTR.
  EXPECT_EQ(read_file(root_ / "class/misc/rdma_cm/abi_version"), "4\n");
  // setup_sysfs_dev() / setup_sysfs_uverbs().
  EXPECT_EQ(read_file(verbs / "uverbs0/ibdev"), "droce0\n");
  EXPECT_EQ(read_file(verbs / "uverbs0/dev"), "1:7\n");
  EXPECT_EQ(read_file(verbs / "uverbs0/abi_version"),
            std::to_string(DROCE_GLUE_ABI_VERSION) + "\n");
  const fs::path dev = root_ / "class/infiniband/droce0";
  EXPECT_TRUE(fs::is_directory(dev));
  EXPECT_EQ(tree->device_dir(), dev.string());
  EXPECT_EQ(tree->uverbs_dir(), (verbs / "uverbs0").string());
  // decode_knode_type(strtoul("1: CA")) = IBV_NODE_CA.
  EXPECT_EQ(read_file(dev / "node_type"), "1: CA\n");
  EXPECT_EQ(std::strtoul(read_file(dev / "node_type").c_str(), nullptr, 10), 1u);
  EXPECT_EQ(read_file(dev / "node_guid"), "0002:c9ff:fe12:3456\n");
  EXPECT_EQ(parse_guid_like_libibverbs(read_file(dev / "node_guid")), desc_.node_guid);
  EXPECT_EQ(read_file(dev / "sys_image_guid"), "0002:c9ff:fe12:3456\n");
  EXPECT_EQ(read_file(dev / "node_desc"), "droce0\n");
  EXPECT_FALSE(path_exists(dev / "droce_control_socket"));
  EXPECT_TRUE(leftovers(root_).empty());
}

TEST_F(SysfsTreeTest, WritesPortsGidsAndPkeys) {
  std::unique_ptr<SysfsTree> tree;
  ASSERT_EQ(SysfsTree::create(root_.string(), desc_, &tree), 0);
  const fs::path p1 = root_ / "class/infiniband/droce0/ports/1";
  const fs::path p2 = root_ / "class/infiniband/droce0/ports/2";
  EXPECT_EQ(read_file(p1 / "state"), "4: ACTIVE\n");
  EXPECT_EQ(read_file(p1 / "phys_state"), "5: LinkUp\n");
  EXPECT_EQ(read_file(p1 / "link_layer"), "Ethernet\n");
  EXPECT_EQ(read_file(p1 / "droce_active_mtu"), "4096\n");
  EXPECT_EQ(read_file(p2 / "state"), "1: DOWN\n");
  EXPECT_EQ(read_file(p2 / "phys_state"), "3: Disabled\n");
  EXPECT_FALSE(path_exists(root_ / "class/infiniband/droce0/ports/3"));

  EXPECT_EQ(read_file(p1 / "gids/0"), "fe80:0000:0000:0000:5054:00ff:fe12:3456\n");
  EXPECT_EQ(parse_gid_like_libibverbs(read_file(p1 / "gids/0")),
            test::ip6("fe80::5054:ff:fe12:3456"));
  EXPECT_EQ(read_file(p1 / "gid_attrs/types/0"), "RoCE v2\n");
  EXPECT_EQ(read_file(p1 / "gid_attrs/ndevs/0"), "eth7\n");
  EXPECT_EQ(read_file(p1 / "gids/1"), "0000:0000:0000:0000:0000:0000:0000:0000\n");
  EXPECT_EQ(read_file(p1 / "gid_attrs/types/1"), "IB/RoCE v1\n") << "an empty slot's type";
  EXPECT_EQ(read_file(p1 / "gids/2"), "0000:0000:0000:0000:0000:ffff:c000:0201\n");
  EXPECT_EQ(parse_gid_like_libibverbs(read_file(p1 / "gids/2")), test::ip4("192.0.2.1"));
  EXPECT_FALSE(path_exists(p1 / "gid_attrs/ndevs/2")) << "no netdev: no ndevs file";
  EXPECT_EQ(read_file(p1 / "gid_attrs/types/3"), "IB/RoCE v1\n");
  // Slots 4..7 exist (gid_table_len 8) and are empty, with a type libibverbs accepts.
  for (int i = 4; i < 8; ++i) {
    EXPECT_EQ(parse_gid_like_libibverbs(read_file(p1 / ("gids/" + std::to_string(i)))), net::Gid{});
    EXPECT_EQ(read_file(p1 / ("gid_attrs/types/" + std::to_string(i))), "IB/RoCE v1\n");
  }
  EXPECT_FALSE(path_exists(p1 / "gids/8"));
  EXPECT_EQ(read_file(p1 / "pkeys/0"), "0xffff\n");
  EXPECT_EQ(read_file(p1 / "pkeys/1"), "0x8001\n");
  EXPECT_FALSE(path_exists(p1 / "pkeys/2")) << "ibv_get_pkey_index stops at the first missing file";
  EXPECT_EQ(read_file(p2 / "pkeys/0"), "0xffff\n");
  EXPECT_TRUE(path_exists(p2 / "gids/1"));
  EXPECT_FALSE(path_exists(p2 / "gids/2"));
}

TEST_F(SysfsTreeTest, UpdatesKeepTheDeviceIdentity) {
  std::unique_ptr<SysfsTree> tree;
  ASSERT_EQ(SysfsTree::create(root_.string(), desc_, &tree), 0);
  const fs::path dev = root_ / "class/infiniband/droce0";
  const fs::path p1 = dev / "ports/1";
  struct stat before {};
  ASSERT_EQ(stat(dev.c_str(), &before), 0);

  ASSERT_EQ(tree->set_port_state(1, PortState::down), 0);
  EXPECT_EQ(read_file(p1 / "state"), "1: DOWN\n");
  EXPECT_EQ(read_file(p1 / "phys_state"), "3: Disabled\n");
  ASSERT_EQ(tree->set_port_state(1, PortState::active), 0);
  EXPECT_EQ(read_file(p1 / "state"), "4: ACTIVE\n");
  ASSERT_EQ(tree->set_active_mtu(1, 1024), 0);
  EXPECT_EQ(read_file(p1 / "droce_active_mtu"), "1024\n");

  // Slot 0 keeps its GID; slot 1 gains one; slot 2 changes GID and type; slot 3 is emptied;
  // the table grows past gid_table_len to 10 slots.
  std::vector<net::GidEntry> gids = desc_.ports[0].gids;
  gids[1] = gid_entry(test::ip6("2001:db8::77"), net::GidType::roce_v2, "eth7.5");
  gids[2] = gid_entry(test::ip4("198.51.100.9"), net::GidType::roce_v1);
  gids[3] = gid_entry({}, net::GidType::roce_v2);
  gids.resize(10);
  gids[9] = gid_entry(test::ip4("203.0.113.4"), net::GidType::roce_v2);
  ASSERT_EQ(tree->set_gids(1, gids), 0);
  EXPECT_EQ(parse_gid_like_libibverbs(read_file(p1 / "gids/0")),
            test::ip6("fe80::5054:ff:fe12:3456"));
  EXPECT_EQ(parse_gid_like_libibverbs(read_file(p1 / "gids/1")), test::ip6("2001:db8::77"));
  EXPECT_EQ(read_file(p1 / "gid_attrs/ndevs/1"), "eth7.5\n");
  EXPECT_EQ(parse_gid_like_libibverbs(read_file(p1 / "gids/2")), test::ip4("198.51.100.9"));
  EXPECT_EQ(read_file(p1 / "gid_attrs/types/2"), "IB/RoCE v1\n");
  EXPECT_EQ(parse_gid_like_libibverbs(read_file(p1 / "gids/3")), net::Gid{});
  EXPECT_EQ(parse_gid_like_libibverbs(read_file(p1 / "gids/9")), test::ip4("203.0.113.4"));
  EXPECT_FALSE(path_exists(p1 / "gids/10"));

  // Shrinking back drops slots 8 and 9 (the table's floor is gid_table_len = 8).
  gids.resize(2);
  gids[0].netdev.clear();
  ASSERT_EQ(tree->set_gids(1, gids), 0);
  EXPECT_FALSE(path_exists(p1 / "gid_attrs/ndevs/0"));
  EXPECT_TRUE(path_exists(p1 / "gids/7"));
  EXPECT_FALSE(path_exists(p1 / "gids/8"));
  EXPECT_FALSE(path_exists(p1 / "gid_attrs/types/9"));
  EXPECT_EQ(parse_gid_like_libibverbs(read_file(p1 / "gids/2")), net::Gid{});

  const uint16_t pkeys[] = {0x7fff};
  ASSERT_EQ(tree->set_pkeys(1, pkeys), 0);
  EXPECT_EQ(read_file(p1 / "pkeys/0"), "0x7fff\n");
  EXPECT_FALSE(path_exists(p1 / "pkeys/1"));

  // libibverbs' same_sysfs_dev() compares the device directory's mtime: updates must not move it.
  struct stat after {};
  ASSERT_EQ(stat(dev.c_str(), &after), 0);
  EXPECT_EQ(before.st_mtim.tv_sec, after.st_mtim.tv_sec);
  EXPECT_EQ(before.st_mtim.tv_nsec, after.st_mtim.tv_nsec);
  EXPECT_TRUE(leftovers(root_).empty());

  EXPECT_EQ(tree->set_port_state(3, PortState::down), -EINVAL);
  EXPECT_EQ(tree->set_port_state(0, PortState::down), -EINVAL);
  EXPECT_EQ(tree->set_active_mtu(1, 1500), -EINVAL);
  EXPECT_EQ(tree->set_pkeys(1, {}), -EINVAL);
}

TEST_F(SysfsTreeTest, DestroyRemovesEverythingItWrote) {
  std::unique_ptr<SysfsTree> tree;
  ASSERT_EQ(SysfsTree::create(root_.string(), desc_, &tree), 0);
  ASSERT_TRUE(path_exists(root_ / "class"));
  tree.reset();
  EXPECT_FALSE(path_exists(root_ / "class"));
  EXPECT_TRUE(path_exists(root_)) << "the root is the caller's";
}

TEST_F(SysfsTreeTest, TwoDevicesShareTheClassDirectories) {
  DeviceDescription second = desc_;
  second.name = "droce1";
  second.uverbs_name = "uverbs1";
  second.node_guid = 0x1122334455667788ull;
  second.control_socket = "/run/droce/droced.sock";
  std::unique_ptr<SysfsTree> a, b;
  ASSERT_EQ(SysfsTree::create(root_.string(), desc_, &a), 0);
  ASSERT_EQ(SysfsTree::create(root_.string(), second, &b), 0);
  EXPECT_EQ(read_file(root_ / "class/infiniband_verbs/uverbs1/ibdev"), "droce1\n");
  EXPECT_EQ(read_file(root_ / "class/infiniband/droce1/droce_control_socket"),
            "/run/droce/droced.sock\n");
  a.reset();
  EXPECT_FALSE(path_exists(root_ / "class/infiniband/droce0"));
  EXPECT_FALSE(path_exists(root_ / "class/infiniband_verbs/uverbs0"));
  EXPECT_EQ(read_file(root_ / "class/infiniband_verbs/abi_version"), "6\n")
      << "still needed by droce1";
  EXPECT_EQ(read_file(root_ / "class/infiniband/droce1/node_guid"), "1122:3344:5566:7788\n");
  b.reset();
  EXPECT_FALSE(path_exists(root_ / "class"));
}

TEST_F(SysfsTreeTest, AnExistingDeviceIsRefusedOrReplaced) {
  // A droced that died: a child writes the tree and exits without its destructors.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::unique_ptr<SysfsTree> orphan;
    _exit(SysfsTree::create(root_.string(), desc_, &orphan) == 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_EQ(read_file(root_ / "class/infiniband_verbs/uverbs0/ibdev"), "droce0\n");

  std::unique_ptr<SysfsTree> tree;
  EXPECT_EQ(SysfsTree::create(root_.string(), desc_, &tree), -EEXIST);
  EXPECT_EQ(tree, nullptr);
  EXPECT_EQ(read_file(root_ / "class/infiniband/droce0/node_guid"), "0002:c9ff:fe12:3456\n");
  desc_.node_guid = 0xaabbccddeeff0011ull;
  ASSERT_EQ(SysfsTree::create(root_.string(), desc_, &tree, SysfsTree::IfExists::replace), 0);
  EXPECT_EQ(read_file(root_ / "class/infiniband/droce0/node_guid"), "aabb:ccdd:eeff:0011\n");
  EXPECT_TRUE(leftovers(root_).empty());
}

TEST_F(SysfsTreeTest, RefusesDescriptionsLibibverbsCouldNotRead) {
  std::unique_ptr<SysfsTree> tree;
  auto refused = [&](DeviceDescription d) {
    return SysfsTree::create(root_.string(), d, &tree) == -EINVAL && tree == nullptr;
  };
  DeviceDescription d = desc_;
  d.name = "";
  EXPECT_TRUE(refused(d));
  d = desc_;
  d.name = "a/b";
  EXPECT_TRUE(refused(d));
  d = desc_;
  d.uverbs_name = ".uverbs0";
  EXPECT_TRUE(refused(d));
  d = desc_;
  d.name = std::string(64, 'x');
  EXPECT_TRUE(refused(d));
  d = desc_;
  d.ports.clear();
  EXPECT_TRUE(refused(d));
  d = desc_;
  d.ports[0].pkeys.clear();
  EXPECT_TRUE(refused(d));
  d = desc_;
  d.ports[0].active_mtu = 1500;
  EXPECT_TRUE(refused(d));
  EXPECT_FALSE(path_exists(root_ / "class/infiniband/droce0"));
}

TEST(SysfsTreeFormat, GuidAndGid) {
  EXPECT_EQ(format_guid(0), "0000:0000:0000:0000");
  EXPECT_EQ(format_guid(0xfedcba9876543210ull), "fedc:ba98:7654:3210");
  net::Gid g{};
  for (int i = 0; i < 16; ++i) g[i] = static_cast<uint8_t>(0x10 * (i % 16) + i);
  const std::string s = format_gid(g);
  EXPECT_EQ(s.size(), 39u);
  EXPECT_EQ(parse_gid_like_libibverbs(s), g);
}

TEST(SysfsTreeFormat, GidsFromTheGidTable) {
  const net::MacAddr mac = {0x52, 0x54, 0x00, 0x12, 0x34, 0x56};
  net::GidTable table(mac, "eth0", 8);
  ASSERT_EQ(table.add(test::ip4("192.0.2.1")), 1);
  ASSERT_EQ(table.add(test::ip6("2001:db8::5")), 2);
  ASSERT_EQ(table.remove(test::ip4("192.0.2.1")), 0);
  const std::vector<net::GidEntry> gids = SysfsTree::gids_from_table(table);
  ASSERT_EQ(gids.size(), 3u) << "trailing empty slots are dropped, the hole at 1 is kept";
  EXPECT_EQ(gids[0].gid, test::ip6("fe80::5054:ff:fe12:3456"));
  EXPECT_EQ(gids[0].netdev, "eth0");
  EXPECT_EQ(gids[1].gid, net::Gid{});
  EXPECT_EQ(gids[2].gid, test::ip6("2001:db8::5"));
}

}  // namespace
}  // namespace droce::provider
