// `droce exec [--run-dir DIR | --sysfs-root DIR] -- COMMAND [ARGS...]`: runs an unmodified verbs
// program so that the distro's libibverbs finds the droce devices (docs/discovery.md):
//
//   - SYSFS_PATH: the sysfs-shaped tree droced writes (<run-dir>/sys; run-dir is $DROCE_RUN_DIR
//     or /run/droce). When the kernel has RDMA devices of its own (RDMA netlink answers), a
//     private tree is made that holds droce's devices and links to the kernel's, and a seccomp
//     filter makes socket(AF_NETLINK, *, NETLINK_RDMA) fail for the program, since libibverbs
//     reads the tree only when that socket cannot be opened: both kinds stay visible.
//   - RDMAV_DRIVERS: droce's provider module, unless it is installed (/etc/libibverbs.d/
//     droce.driver); found next to this program in a build tree.
//   - LD_PRELOAD: droce's completion-channel library, when one is found (stock
//     ibv_create_comp_channel issues a kernel command; see provider/preload), and its rdma_cm
//     library (librdmacm's /dev/infiniband/rdma_cm, served by droced; see provider/rdmacm).
//   - /dev/infiniband/<uverbs>: libibverbs opens this compiled-in path. droced makes it when it
//     runs as root; otherwise, as root, this command makes it (and leaves it: an alias of
//     /dev/full that other programs may be using); as a user, the program runs in a user and mount namespace whose /dev is a copy of the real one
//     (every entry bind-mounted) plus the node, bound to /dev/full.
//
// Exit: the command's status (128 + signal when it was killed), 125 when droce exec itself
// fails, 127 when the command cannot be run.

#include <dirent.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/netlink.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace droce::cli {

namespace {

namespace fs = std::filesystem;

constexpr int kExitFailed = 125;
constexpr int kExitCannotRun = 127;
#ifndef NETLINK_RDMA
constexpr int NETLINK_RDMA = 20;
#endif

std::string read_line(const fs::path& p) {
  std::ifstream in(p);
  std::string s;
  std::getline(in, s);
  return s;
}

// One uverbs entry of a tree: its name and the char node numbers it wants.
struct Node {
  std::string uverbs;
  unsigned major = 0, minor = 0;
};

std::vector<Node> tree_nodes(const fs::path& root) {
  std::vector<Node> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root / "class/infiniband_verbs", ec)) {
    if (!e.is_directory() || e.path().filename().string().front() == '.') continue;
    Node n;
    n.uverbs = e.path().filename();
    if (std::sscanf(read_line(e.path() / "dev").c_str(), "%u:%u", &n.major, &n.minor) != 2) continue;
    out.push_back(n);
  }
  return out;
}

bool node_ok(const Node& n) {
  struct stat st {};
  const std::string path = "/dev/infiniband/" + n.uverbs;
  if (::stat(path.c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) return false;
  return (n.major == 0 && n.minor == 0) || st.st_rdev == makedev(n.major, n.minor);
}

// The directory this program lives in, for the build tree's provider files.
fs::path self_dir() {
  std::error_code ec;
  return fs::read_symlink("/proc/self/exe", ec).parent_path();
}

// The first file in `dir` whose name starts with `prefix` and ends with ".so".
std::string find_so(const fs::path& dir, std::string_view prefix) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename();
    if (name.rfind(prefix, 0) == 0 && name.size() > 3 && name.compare(name.size() - 3, 3, ".so") == 0)
      return fs::absolute(e.path());
  }
  return {};
}

void prepend_env(const char* name, const std::string& value, char sep) {
  const char* old = std::getenv(name);
  const std::string v = old && *old ? value + sep + old : value;
  ::setenv(name, v.c_str(), 1);
}

// Test hooks for the path this machine cannot take by itself (a kernel with ib_core):
// DROCE_EXEC_TEST_RDMA_NETLINK=1 acts as if RDMA netlink answered, and
// DROCE_EXEC_TEST_KERNEL_SYSFS=DIR stands for /sys (its class/infiniband* hold the "kernel's"
// devices). Both are for droce's own tests; nothing else should set them.
fs::path kernel_sysfs() {
  const char* t = std::getenv("DROCE_EXEC_TEST_KERNEL_SYSFS");
  return t && *t ? fs::path(t) : fs::path("/sys");
}

// Does this kernel answer RDMA netlink (then libibverbs never reads SYSFS_PATH)?
bool kernel_has_rdma_netlink() {
  if (const char* t = std::getenv("DROCE_EXEC_TEST_RDMA_NETLINK"); t && std::string(t) == "1") return true;
  const int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_RDMA);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

// socket(AF_NETLINK, any, NETLINK_RDMA) fails with EPROTONOSUPPORT, as on a kernel without
// ib_core; everything else is allowed. Needs no_new_privs (set here).
int forbid_rdma_netlink() {
  sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_socket, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0])),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_NETLINK, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[2])),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NETLINK_RDMA, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPROTONOSUPPORT & SECCOMP_RET_DATA)),
  };
  sock_fprog prog{static_cast<unsigned short>(std::size(f)), f};
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -errno;
  if (::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) return -errno;
  return 0;
}

// A private tree: droce's devices and the kernel's, side by side (links).
int merge_trees(const fs::path& droce_root, const fs::path& out) {
  std::error_code ec;
  for (const char* cls : {"class/infiniband", "class/infiniband_verbs"}) {
    fs::create_directories(out / cls, ec);
    if (ec) return -ec.value();
    for (const fs::path& from : {droce_root / cls, kernel_sysfs() / cls}) {
      for (const auto& e : fs::directory_iterator(from, ec)) {
        const std::string name = e.path().filename();
        if (name.front() == '.' || !e.is_directory()) continue;
        fs::create_directory_symlink(fs::canonical(e.path()), out / cls / name, ec);  // first one wins
      }
    }
  }
  std::string abi = read_line(kernel_sysfs() / "class/infiniband_verbs/abi_version");
  if (abi.empty()) abi = read_line(droce_root / "class/infiniband_verbs/abi_version");
  std::ofstream(out / "class/infiniband_verbs/abi_version") << abi << "\n";
  return 0;
}

bool write_file(const char* path, const std::string& s) {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, s.data(), s.size()) == static_cast<ssize_t>(s.size());
  ::close(fd);
  return ok;
}

// In a new user + mount namespace (unprivileged): /dev becomes a tmpfs holding a bind mount of
// every entry of the real /dev, plus infiniband/<uverbs> bound to /dev/full. Child only.
int private_dev(const std::vector<Node>& nodes) {
  const uid_t uid = ::getuid();
  const gid_t gid = ::getgid();
  if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return -errno;
  // Keep the caller's own ids inside, so files it makes are its own.
  write_file("/proc/self/setgroups", "deny");
  if (!write_file("/proc/self/uid_map", std::to_string(uid) + " " + std::to_string(uid) + " 1\n") ||
      !write_file("/proc/self/gid_map", std::to_string(gid) + " " + std::to_string(gid) + " 1\n"))
    return -EPERM;
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return -errno;
  char tmpl[] = "/tmp/droce-dev.XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return -errno;
  const fs::path nd = tmpl;
  if (::mount("tmpfs", tmpl, "tmpfs", MS_NOSUID, "mode=0755") != 0) return -errno;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/dev", ec)) {
    const fs::path to = nd / e.path().filename();
    if (e.is_symlink()) {
      fs::create_symlink(fs::read_symlink(e.path()), to, ec);
      continue;
    }
    if (e.is_directory()) fs::create_directory(to, ec);
    else std::ofstream(to).close();
    ::mount(e.path().c_str(), to.c_str(), nullptr, MS_BIND | MS_REC, nullptr);  // best effort
  }
  fs::create_directory(nd / "infiniband", ec);
  for (const Node& n : nodes) {
    const fs::path to = nd / "infiniband" / n.uverbs;
    std::ofstream(to).close();
    if (::mount("/dev/full", to.c_str(), nullptr, MS_BIND, nullptr) != 0) return -errno;
  }
  if (::mount(tmpl, "/dev", nullptr, MS_MOVE, nullptr) != 0) return -errno;
  return 0;
}

pid_t g_child = 0;
void forward_signal(int sig) {
  if (g_child > 0) ::kill(g_child, sig);
}

int usage() {
  std::fprintf(stderr, "usage: droce exec [--run-dir DIR | --sysfs-root DIR] -- COMMAND [ARGS...]\n");
  return 2;
}

}  // namespace

int exec_command(int argc, char** argv) {
  // argv[0] is "exec".
  std::string run_dir, sysfs_root;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (i + 1 >= argc) return usage();
    if (a == "--run-dir") run_dir = argv[++i];
    else if (a == "--sysfs-root") sysfs_root = argv[++i];
    else return usage();
  }
  if (i >= argc) return usage();
  if (run_dir.empty()) {
    const char* d = std::getenv("DROCE_RUN_DIR");
    run_dir = d && *d ? d : "/run/droce";
  }
  if (sysfs_root.empty()) sysfs_root = run_dir + "/sys";
  std::error_code ec;
  const fs::path root = fs::absolute(sysfs_root, ec);
  const std::vector<Node> nodes = tree_nodes(root);
  if (nodes.empty()) {
    std::fprintf(stderr, "droce exec: no droce device under %s (is droced running with this run dir?)\n",
                 root.c_str());
    return kExitFailed;
  }

  // The provider module and the preload library: installed, or next to this program.
  const fs::path build = self_dir().parent_path();
  if (!fs::exists("/etc/libibverbs.d/droce.driver")) {
    const std::string module = find_so(build / "provider/verbs", "libdroce-rdmav");
    if (module.empty()) {
      std::fprintf(stderr, "droce exec: the provider is neither installed (/etc/libibverbs.d/droce.driver) nor "
                           "built next to this program (%s)\n", (build / "provider/verbs").c_str());
      return kExitFailed;
    }
    prepend_env("RDMAV_DRIVERS", module.substr(0, module.find("-rdmav")), ':');
  }
  std::string preload = find_so(build / "provider/preload", "libdroce-preload");
  if (preload.empty()) preload = find_so("/usr/lib/x86_64-linux-gnu/droce", "libdroce-preload");
  if (!preload.empty()) prepend_env("LD_PRELOAD", preload, ':');
  // librdmacm's /dev/infiniband/rdma_cm, served by droced's CM.
  std::string rdmacm = find_so(build / "provider/rdmacm", "libdroce-rdmacm");
  if (rdmacm.empty()) rdmacm = find_so("/usr/lib/x86_64-linux-gnu/droce", "libdroce-rdmacm");
  if (!rdmacm.empty()) prepend_env("LD_PRELOAD", rdmacm, ':');

  // The tree: droced's own, or a private merge with the kernel's devices.
  fs::path tree = root;
  fs::path merged;
  const bool netlink = kernel_has_rdma_netlink();
  if (netlink) {
    char tmpl[] = "/tmp/droce-sys.XXXXXX";
    if (::mkdtemp(tmpl) == nullptr || merge_trees(root, tmpl) != 0) {
      std::fprintf(stderr, "droce exec: cannot build a device tree in /tmp: %s\n", std::strerror(errno));
      return kExitFailed;
    }
    tree = merged = tmpl;
  }
  ::setenv("SYSFS_PATH", tree.c_str(), 1);

  // The char nodes.
  bool need_private_dev = false;
  for (const Node& n : nodes) {
    if (node_ok(n)) continue;
    if (::geteuid() == 0) {
      const std::string path = "/dev/infiniband/" + n.uverbs;
      ::mkdir("/dev/infiniband", 0755);
      if (::mknod(path.c_str(), S_IFCHR | 0666, makedev(n.major, n.minor)) == 0) ::chmod(path.c_str(), 0666);
      else std::fprintf(stderr, "droce exec: cannot make %s: %s\n", path.c_str(), std::strerror(errno));
    } else {
      need_private_dev = true;
    }
  }

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return kExitFailed;
  if (pid == 0) {
    // droce exec killed outright (SIGKILL: a test's cleanup, an OOM kill) cannot pass a signal
    // on; the program must not run on as an orphan holding its port and QPs.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(kExitFailed);  // it died before the line above
    if (need_private_dev) {
      if (int rc = private_dev(nodes); rc != 0) {
        std::fprintf(stderr, "droce exec: cannot give the program /dev/infiniband (%s); run droced as root, or "
                             "enable unprivileged user namespaces\n", std::strerror(-rc));
        ::_exit(kExitFailed);
      }
    }
    if (netlink) {
      if (int rc = forbid_rdma_netlink(); rc != 0) {
        std::fprintf(stderr, "droce exec: cannot install the seccomp filter: %s\n", std::strerror(-rc));
        ::_exit(kExitFailed);
      }
    }
    ::execvp(argv[i], argv + i);
    std::fprintf(stderr, "droce exec: %s: %s\n", argv[i], std::strerror(errno));
    ::_exit(kExitCannotRun);
  }
  // The program gets the terminal's signals itself; droce exec waits it out, and passes on a
  // SIGTERM or SIGHUP sent to it alone.
  g_child = pid;
  ::signal(SIGINT, SIG_IGN);
  ::signal(SIGQUIT, SIG_IGN);
  ::signal(SIGTERM, forward_signal);
  ::signal(SIGHUP, forward_signal);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (!merged.empty()) fs::remove_all(merged, ec);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

}  // namespace droce::cli
