// droced_tree: writes the sysfs-shaped tree (provider/discovery) that describes a running
// droced, as droced itself will (its name, node GUID, port state and MTU, GID table, and
// droce_control_socket), so stock verbs programs run with SYSFS_PATH=<root> find it. Until droced
// writes its own tree, this is how the provider tests and the demo point a program at a droced.
//
//   droced_tree --socket SOCK --root DIR [--name NAME] [--uverbs uverbs0] [--dev MAJ:MIN]
//               [-- COMMAND [ARGS...]]
//
// --name gives the device another name than droced's own (two droced that both call themselves
// droce0 can then sit in one tree, as droce0 and droce1: the provider finds each one's droced
// through droce_control_socket, not by name).
// Without COMMAND the tree is written (replacing one left there) and stays; with COMMAND, the
// command runs with SYSFS_PATH=DIR and the tree is removed after it. Exit: 0 (tree written), the
// command's status, or 125 for a usage, droced or tree error.
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "provider/client/client.h"
#include "provider/discovery/sysfs_tree.h"

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: droced_tree --socket SOCK --root DIR [--name NAME] [--uverbs uverbs0] "
               "[--dev MAJ:MIN] [-- COMMAND [ARGS...]]\n");
  return 125;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace droce;
  std::string socket, root, name;
  provider::DeviceDescription desc;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (i + 1 >= argc) return usage();
    const char* v = argv[++i];
    if (a == "--socket") {
      socket = v;
    } else if (a == "--root") {
      root = v;
    } else if (a == "--name") {
      name = v;
    } else if (a == "--uverbs") {
      desc.uverbs_name = v;
    } else if (a == "--dev") {
      if (std::sscanf(v, "%u:%u", &desc.cdev_major, &desc.cdev_minor) != 2) return usage();
    } else {
      return usage();
    }
  }
  if (socket.empty() || root.empty()) return usage();

  std::unique_ptr<client::Context> ctx;
  if (int rc = client::Context::open(socket, &ctx); rc != 0) {
    std::fprintf(stderr, "droced_tree: %s: %s\n", socket.c_str(), std::strerror(-rc));
    return 125;
  }
  abi::ctl::QueryDeviceReply dev{};
  if (int rc = ctx->query_device(&dev); rc != 0) {
    std::fprintf(stderr, "droced_tree: query_device: %s\n", std::strerror(-rc));
    return 125;
  }
  desc.name = name.empty() ? std::string(ctx->info().device_name) : name;
  desc.node_guid = dev.node_guid;
  desc.sys_image_guid = dev.sys_image_guid;
  desc.fw_ver = dev.fw_ver;
  char* abs = realpath(socket.c_str(), nullptr);
  desc.control_socket = abs != nullptr ? abs : socket;
  std::free(abs);
  for (uint32_t p = 1; p <= dev.phys_port_cnt; ++p) {
    abi::ctl::QueryPortReply pr{};
    if (int rc = ctx->query_port(static_cast<uint8_t>(p), &pr); rc != 0) {
      std::fprintf(stderr, "droced_tree: query_port %u: %s\n", p, std::strerror(-rc));
      return 125;
    }
    provider::PortDescription port;
    port.state = pr.state == 4 ? provider::PortState::active : provider::PortState::down;
    port.active_mtu = 128u << pr.active_mtu;
    port.gid_table_len = pr.gid_tbl_len;
    for (uint32_t g = 0; g < pr.gid_tbl_len; ++g) {
      abi::ctl::QueryGidReply gr{};
      net::GidEntry e;
      if (ctx->query_gid(static_cast<uint8_t>(p), g, &gr) == 0) {
        std::memcpy(e.gid.data(), gr.gid, 16);
        e.type = gr.type == 1 ? net::GidType::roce_v2 : net::GidType::roce_v1;
      }  // else an empty slot (ENODATA)
      port.gids.push_back(e);
    }
    desc.ports.push_back(port);
  }
  ctx.reset();

  std::unique_ptr<provider::SysfsTree> tree;
  if (int rc = provider::SysfsTree::create(root, desc, &tree, provider::SysfsTree::IfExists::replace)) {
    std::fprintf(stderr, "droced_tree: create under %s: %s\n", root.c_str(), std::strerror(-rc));
    return 125;
  }
  if (i >= argc) {
    // Leave the tree in place (the destructor would remove it): the caller removes DIR.
    std::fflush(nullptr);
    _exit(0);
  }
  const pid_t pid = fork();
  if (pid < 0) return 125;
  if (pid == 0) {
    setenv("SYSFS_PATH", tree->root().c_str(), 1);
    execvp(argv[i], argv + i);
    std::fprintf(stderr, "droced_tree: exec %s: %s\n", argv[i], std::strerror(errno));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  tree.reset();
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}
