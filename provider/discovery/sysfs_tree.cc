#include "provider/discovery/sysfs_tree.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string_view>
#include <system_error>
#include <utility>

#include "provider/verbs/glue.h"

namespace droce::provider {

namespace {

namespace fs = std::filesystem;

// libibverbs copies names into fixed arrays (IBV_SYSFS_NAME_MAX = 64, ibv_device's dev_name and
// name are 64 too, with the terminator) and reads `ibdev` with a 64-byte buffer.
constexpr size_t kMaxNameLen = 63;
// ibv_query_pkey walks pkeys/<i> until a read fails; the IBA table holds at most this many.
constexpr size_t kMaxPkeys = 128;

int errno_of(const std::error_code& ec) { return ec ? -ec.value() : 0; }

bool valid_name(const std::string& name) {
  return !name.empty() && name.size() <= kMaxNameLen && name[0] != '.' &&
         name.find('/') == std::string::npos && name.find('\n') == std::string::npos;
}

// Writes `content` + '\n' to path via a temporary in the same directory and rename(2), so
// readers see the old file or the new one. Read-only like sysfs attributes.
int write_file_atomic(const std::string& path, const std::string& content) {
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = mkstemp(tmp.data());
  if (fd < 0) return -errno;
  const std::string data = content + "\n";
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = write(fd, data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      close(fd);
      unlink(tmp.c_str());
      return -err;
    }
    off += static_cast<size_t>(n);
  }
  if (fchmod(fd, 0444) != 0 || close(fd) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return -err;
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return -err;
  }
  return 0;
}

int make_dir(const std::string& path) {
  if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return -errno;
  return 0;
}

const char* state_string(PortState s) { return s == PortState::active ? "4: ACTIVE" : "1: DOWN"; }
// What the kernel shows for a RoCE port whose netdev is up / administratively down.
const char* phys_state_string(PortState s) {
  return s == PortState::active ? "5: LinkUp" : "3: Disabled";
}
const char* link_layer_string(LinkLayer l) {
  return l == LinkLayer::ethernet ? "Ethernet" : "InfiniBand";
}
// The kernel writes "IB/RoCE v1" for IB GIDs too; libibverbs accepts only these two spellings.
const char* gid_type_string(net::GidType t) {
  return t == net::GidType::roce_v2 ? "RoCE v2" : "IB/RoCE v1";
}

// An all-zero GID is an empty slot. The kernel answers EINVAL for an empty slot's type, which
// libibverbs reads as "IB/RoCE v1"; a file cannot fail that way, so it says that directly.
const char* slot_type_string(const net::GidEntry& e) {
  return e.gid == net::Gid{} ? "IB/RoCE v1" : gid_type_string(e.type);
}

bool valid_mtu(uint32_t mtu) {
  return mtu == 256 || mtu == 512 || mtu == 1024 || mtu == 2048 || mtu == 4096;
}

std::string pkey_string(uint16_t pkey) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%04x", pkey);
  return buf;
}

bool same_entry(const net::GidEntry& a, const net::GidEntry& b) {
  return a.gid == b.gid && std::string_view(slot_type_string(a)) == slot_type_string(b) &&
         a.netdev == b.netdev;
}

const net::GidEntry& empty_entry() {
  static const net::GidEntry kEmpty{};
  return kEmpty;
}

uint32_t gid_slots(const PortDescription& p) {
  return std::max<uint32_t>(p.gid_table_len, static_cast<uint32_t>(p.gids.size()));
}

int validate(const DeviceDescription& d) {
  if (!valid_name(d.name) || !valid_name(d.uverbs_name)) return -EINVAL;
  if (d.ports.empty() || d.ports.size() > 255) return -EINVAL;
  for (const PortDescription& p : d.ports) {
    if (p.pkeys.empty() || p.pkeys.size() > kMaxPkeys) return -EINVAL;
    if (!valid_mtu(p.active_mtu)) return -EINVAL;
    for (const net::GidEntry& g : p.gids)
      if (g.netdev.find('/') != std::string::npos || g.netdev.size() > 15) return -EINVAL;
  }
  return 0;
}

// Files of one GID slot; gids/<i> last, so a new GID never shows with its predecessor's type.
int write_slot_files(const std::string& port_dir, uint32_t i, const net::GidEntry& e) {
  const std::string idx = std::to_string(i);
  if (int rc = write_file_atomic(port_dir + "/gid_attrs/types/" + idx, slot_type_string(e)))
    return rc;
  const std::string ndev = port_dir + "/gid_attrs/ndevs/" + idx;
  if (e.netdev.empty()) {
    if (unlink(ndev.c_str()) != 0 && errno != ENOENT) return -errno;
  } else if (int rc = write_file_atomic(ndev, e.netdev)) {
    return rc;
  }
  return write_file_atomic(port_dir + "/gids/" + idx, format_gid(e.gid));
}

int write_pkeys(const std::string& port_dir, std::span<const uint16_t> pkeys, size_t old_count) {
  for (size_t i = 0; i < pkeys.size(); ++i)
    if (int rc = write_file_atomic(port_dir + "/pkeys/" + std::to_string(i), pkey_string(pkeys[i])))
      return rc;
  for (size_t i = pkeys.size(); i < old_count; ++i) {
    const std::string path = port_dir + "/pkeys/" + std::to_string(i);
    if (unlink(path.c_str()) != 0 && errno != ENOENT) return -errno;
  }
  return 0;
}

int write_port(const std::string& dir, const PortDescription& p) {
  for (const char* sub : {"", "/gids", "/gid_attrs", "/gid_attrs/types", "/gid_attrs/ndevs",
                          "/pkeys"})
    if (int rc = make_dir(dir + sub)) return rc;
  const std::pair<const char*, std::string> files[] = {
      {"state", state_string(p.state)},
      {"phys_state", phys_state_string(p.state)},
      {"link_layer", link_layer_string(p.link_layer)},
      {"rate", p.rate},
      // RoCE ports have no LID and no subnet manager.
      {"lid", "0x0"},
      {"sm_lid", "0x0"},
      {"sm_sl", "0"},
      {"lid_mask_count", "0"},
      {"cap_mask", "0x00010000"},  // IB_PORT_CM_SUP, as rxe reports
      {"droce_active_mtu", std::to_string(p.active_mtu)},
  };
  for (const auto& [name, value] : files)
    if (int rc = write_file_atomic(dir + "/" + name, value)) return rc;
  const uint32_t slots = gid_slots(p);
  for (uint32_t i = 0; i < slots; ++i)
    if (int rc = write_slot_files(dir, i, i < p.gids.size() ? p.gids[i] : empty_entry())) return rc;
  return write_pkeys(dir, p.pkeys, 0);
}

int write_device_dir(const std::string& dir, const DeviceDescription& d) {
  if (int rc = make_dir(dir)) return rc;
  const uint64_t image = d.sys_image_guid ? d.sys_image_guid : d.node_guid;
  const std::pair<const char*, std::string> files[] = {
      {"node_type", "1: CA"},
      {"node_guid", format_guid(d.node_guid)},
      {"sys_image_guid", format_guid(image)},
      {"node_desc", d.node_desc.empty() ? d.name : d.node_desc},
      {"fw_ver", d.fw_ver},
  };
  for (const auto& [name, value] : files)
    if (int rc = write_file_atomic(dir + "/" + name, value)) return rc;
  if (!d.control_socket.empty())
    if (int rc = write_file_atomic(dir + "/droce_control_socket", d.control_socket)) return rc;
  if (int rc = make_dir(dir + "/ports")) return rc;
  for (size_t i = 0; i < d.ports.size(); ++i)
    if (int rc = write_port(dir + "/ports/" + std::to_string(i + 1), d.ports[i])) return rc;
  return 0;
}

int write_uverbs_dir(const std::string& dir, const DeviceDescription& d) {
  if (int rc = make_dir(dir)) return rc;
  const std::pair<const char*, std::string> files[] = {
      {"ibdev", d.name},
      {"dev", std::to_string(d.cdev_major) + ":" + std::to_string(d.cdev_minor)},
      {"abi_version", std::to_string(DROCE_GLUE_ABI_VERSION)},
  };
  for (const auto& [name, value] : files)
    if (int rc = write_file_atomic(dir + "/" + name, value)) return rc;
  return 0;
}

// Builds `final_path` by `fill` under a hidden sibling name, then renames it into place.
// libibverbs skips dot-names when it lists class/infiniband_verbs.
template <typename Fill>
int publish_dir(const std::string& final_path, Fill&& fill) {
  const fs::path p(final_path);
  const std::string stage =
      (p.parent_path() / ("." + p.filename().string() + ".new." + std::to_string(getpid())))
          .string();
  std::error_code ec;
  fs::remove_all(stage, ec);
  int rc = fill(stage);
  if (rc == 0 && rename(stage.c_str(), final_path.c_str()) != 0)
    rc = errno == ENOTEMPTY ? -EEXIST : -errno;
  if (rc != 0) fs::remove_all(stage, ec);
  return rc;
}

}  // namespace

SysfsTree::SysfsTree(std::string root, DeviceDescription desc)
    : root_(std::move(root)), desc_(std::move(desc)), gids_stale_(desc_.ports.size(), false) {}

std::string SysfsTree::device_dir() const { return root_ + "/class/infiniband/" + desc_.name; }
std::string SysfsTree::uverbs_dir() const {
  return root_ + "/class/infiniband_verbs/" + desc_.uverbs_name;
}
std::string SysfsTree::port_dir(uint8_t port) const {
  return device_dir() + "/ports/" + std::to_string(port);
}

int SysfsTree::create(const std::string& root, const DeviceDescription& desc,
                      std::unique_ptr<SysfsTree>* out, IfExists if_exists) {
  if (root.empty() || out == nullptr) return -EINVAL;
  if (int rc = validate(desc)) return rc;
  std::string clean_root = root;
  while (clean_root.size() > 1 && clean_root.back() == '/') clean_root.pop_back();

  std::error_code ec;
  const std::string verbs_class = clean_root + "/class/infiniband_verbs";
  fs::create_directories(clean_root + "/class/infiniband", ec);
  if (!ec) fs::create_directories(verbs_class, ec);
  if (ec) return errno_of(ec);

  // The object (whose destructor removes the device) exists only once the device is ours.
  const std::string dev_dir = clean_root + "/class/infiniband/" + desc.name;
  const std::string uv_dir = verbs_class + "/" + desc.uverbs_name;
  const bool exists = fs::exists(dev_dir, ec) || fs::exists(uv_dir, ec);
  if (exists) {
    if (if_exists == IfExists::fail) return -EEXIST;
    // The uverbs directory first: enumeration starts there.
    fs::remove_all(uv_dir, ec);
    if (!ec) fs::remove_all(dev_dir, ec);
    if (ec) return errno_of(ec);
  }

  if (!fs::exists(verbs_class + "/abi_version", ec))
    if (int rc = write_file_atomic(verbs_class + "/abi_version", std::to_string(kUverbsAbiVersion)))
      return rc;
  // librdmacm reads this when RDMA netlink does not answer (droce exec makes sure it does not).
  const std::string ucma_class = clean_root + "/class/misc/rdma_cm";
  fs::create_directories(ucma_class, ec);
  if (ec) return errno_of(ec);
  if (!fs::exists(ucma_class + "/abi_version", ec))
    if (int rc = write_file_atomic(ucma_class + "/abi_version", std::to_string(kUcmaAbiVersion))) return rc;

  // The device directory before the uverbs directory that names it: a reader that finds
  // uverbsN finds its ibdev complete.
  int rc = publish_dir(dev_dir, [&](const std::string& d) { return write_device_dir(d, desc); });
  if (rc != 0) return rc;
  rc = publish_dir(uv_dir, [&](const std::string& d) { return write_uverbs_dir(d, desc); });
  if (rc != 0) {
    fs::remove_all(dev_dir, ec);
    return rc;
  }
  out->reset(new SysfsTree(std::move(clean_root), desc));
  return 0;
}

SysfsTree::~SysfsTree() {
  std::error_code ec;
  fs::remove_all(uverbs_dir(), ec);
  fs::remove_all(device_dir(), ec);
  const std::string verbs_class = root_ + "/class/infiniband_verbs";
  bool others = false;
  // The non-throwing iteration: a destructor must not throw.
  for (fs::directory_iterator it(verbs_class, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().filename() != "abi_version") others = true;
  if (!others) {
    unlink((verbs_class + "/abi_version").c_str());
    rmdir(verbs_class.c_str());
    unlink((root_ + "/class/misc/rdma_cm/abi_version").c_str());
    rmdir((root_ + "/class/misc/rdma_cm").c_str());
    rmdir((root_ + "/class/misc").c_str());
  }
  rmdir((root_ + "/class/infiniband").c_str());
  rmdir((root_ + "/class").c_str());
}

int SysfsTree::set_port_state(uint8_t port, PortState state) {
  if (port == 0 || port > desc_.ports.size()) return -EINVAL;
  const std::string dir = port_dir(port);
  // state is what libibverbs and programs read; phys_state follows it.
  if (int rc = write_file_atomic(dir + "/phys_state", phys_state_string(state))) return rc;
  if (int rc = write_file_atomic(dir + "/state", state_string(state))) return rc;
  desc_.ports[port - 1].state = state;
  return 0;
}

int SysfsTree::set_active_mtu(uint8_t port, uint32_t mtu) {
  if (port == 0 || port > desc_.ports.size() || !valid_mtu(mtu)) return -EINVAL;
  if (int rc = write_file_atomic(port_dir(port) + "/droce_active_mtu", std::to_string(mtu)))
    return rc;
  desc_.ports[port - 1].active_mtu = mtu;
  return 0;
}

int SysfsTree::write_gid_slot(uint8_t port, uint32_t index, const net::GidEntry* old_entry,
                              const net::GidEntry& entry) {
  const std::string dir = port_dir(port);
  if (old_entry != nullptr && same_entry(*old_entry, entry)) return 0;
  if (old_entry != nullptr && old_entry->gid != entry.gid && old_entry->gid != net::Gid{}) {
    // Empty the slot first: libibverbs skips a zero GID whatever its type says.
    if (int rc = write_file_atomic(dir + "/gids/" + std::to_string(index), format_gid({})))
      return rc;
  }
  return write_slot_files(dir, index, entry);
}

int SysfsTree::set_gids(uint8_t port, std::span<const net::GidEntry> gids) {
  if (port == 0 || port > desc_.ports.size()) return -EINVAL;
  for (const net::GidEntry& g : gids)
    if (g.netdev.find('/') != std::string::npos || g.netdev.size() > 15) return -EINVAL;
  PortDescription& p = desc_.ports[port - 1];
  const uint32_t old_slots = gid_slots(p);
  const uint32_t new_slots = std::max<uint32_t>(p.gid_table_len, static_cast<uint32_t>(gids.size()));
  for (uint32_t i = 0; i < new_slots; ++i) {
    const net::GidEntry& now = i < gids.size() ? gids[i] : empty_entry();
    const net::GidEntry* before =
        i < p.gids.size() ? &p.gids[i] : (i < old_slots ? &empty_entry() : nullptr);
    if (gids_stale_[port - 1]) before = nullptr;
    if (int rc = write_gid_slot(port, i, before, now)) {
      // What is on disk is now part old, part new: the next call rewrites every slot.
      gids_stale_[port - 1] = true;
      return rc;
    }
  }
  // Slots past the new table (it only shrinks below gid_table_len's floor via gids.size()).
  for (uint32_t i = new_slots; i < old_slots; ++i) {
    const std::string idx = std::to_string(i);
    for (const char* f : {"/gids/", "/gid_attrs/types/", "/gid_attrs/ndevs/"}) {
      const std::string path = port_dir(port) + f + idx;
      if (unlink(path.c_str()) != 0 && errno != ENOENT) return -errno;
    }
  }
  p.gids.assign(gids.begin(), gids.end());
  gids_stale_[port - 1] = false;
  return 0;
}

int SysfsTree::set_pkeys(uint8_t port, std::span<const uint16_t> pkeys) {
  if (port == 0 || port > desc_.ports.size()) return -EINVAL;
  if (pkeys.empty() || pkeys.size() > kMaxPkeys) return -EINVAL;
  PortDescription& p = desc_.ports[port - 1];
  if (int rc = write_pkeys(port_dir(port), pkeys, p.pkeys.size())) return rc;
  p.pkeys.assign(pkeys.begin(), pkeys.end());
  return 0;
}

std::vector<net::GidEntry> SysfsTree::gids_from_table(const net::GidTable& table) {
  std::vector<net::GidEntry> out(table.capacity());
  for (uint32_t i = 0; i < table.capacity(); ++i)
    if (const net::GidEntry* e = table.at(i)) out[i] = *e;
  // Trailing empty slots add nothing the table length does not already say.
  while (!out.empty() && out.back().gid == net::Gid{}) out.pop_back();
  return out;
}

}  // namespace droce::provider
