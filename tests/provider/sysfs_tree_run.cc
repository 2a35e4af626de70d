// sysfs_tree_run: writes a droce device's sysfs-shaped tree with SysfsTree, runs a command with
// SYSFS_PATH pointing at it, removes the tree and exits with the command's status. What
// `droce exec` will do with droced's tree, reduced to what the provider tests need.
//
//   sysfs_tree_run --root DIR [--name droce0] [--uverbs uverbs0] [--guid HEX] [--dev MAJ:MIN]
//                  [--ports N] -- COMMAND [ARGS...]
//
// Exit: the command's status; 125 for a usage or tree error; 124 when the tree was not
// removed afterwards.
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "provider/discovery/sysfs_tree.h"

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: sysfs_tree_run --root DIR [--name droce0] [--uverbs uverbs0] [--guid HEX] "
               "[--dev MAJ:MIN] [--ports N] -- COMMAND [ARGS...]\n");
  return 125;
}

droce::net::Gid gid(std::initializer_list<uint8_t> bytes) {
  droce::net::Gid g{};
  size_t i = 0;
  for (uint8_t b : bytes) g[i++] = b;
  return g;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace droce;
  provider::DeviceDescription desc;
  desc.node_guid = 0x0002c9fffe123456ull;
  std::string root;
  int ports = 1;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (i + 1 >= argc) return usage();
    const char* v = argv[++i];
    if (a == "--root") {
      root = v;
    } else if (a == "--name") {
      desc.name = v;
    } else if (a == "--uverbs") {
      desc.uverbs_name = v;
    } else if (a == "--guid") {
      desc.node_guid = std::strtoull(v, nullptr, 16);
    } else if (a == "--dev") {
      if (std::sscanf(v, "%u:%u", &desc.cdev_major, &desc.cdev_minor) != 2) return usage();
    } else if (a == "--ports") {
      ports = std::atoi(v);
    } else {
      return usage();
    }
  }
  if (root.empty() || i >= argc || ports < 1) return usage();

  for (int p = 0; p < ports; ++p) {
    provider::PortDescription port;
    port.state = p == 0 ? provider::PortState::active : provider::PortState::down;
    // fe80::5054:ff:fe12:34<p> and ::ffff:192.0.2.<p+1>, both RoCE v2.
    net::GidEntry ll;
    ll.gid = gid({0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34,
                  static_cast<uint8_t>(p)});
    net::GidEntry v4;
    v4.gid = gid({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, static_cast<uint8_t>(p + 1)});
    port.gids = {ll, v4};
    desc.ports.push_back(port);
  }

  std::unique_ptr<provider::SysfsTree> tree;
  if (int rc = provider::SysfsTree::create(root, desc, &tree)) {
    std::fprintf(stderr, "sysfs_tree_run: create under %s: %s\n", root.c_str(), std::strerror(-rc));
    return 125;
  }
  const pid_t pid = fork();
  if (pid < 0) return 125;
  if (pid == 0) {
    setenv("SYSFS_PATH", tree->root().c_str(), 1);
    execvp(argv[i], argv + i);
    std::fprintf(stderr, "sysfs_tree_run: exec %s: %s\n", argv[i], std::strerror(errno));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const std::string class_dir = tree->root() + "/class";
  tree.reset();
  std::error_code ec;
  if (std::filesystem::exists(class_dir, ec)) {
    std::fprintf(stderr, "sysfs_tree_run: %s left behind\n", class_dir.c_str());
    return 124;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}
