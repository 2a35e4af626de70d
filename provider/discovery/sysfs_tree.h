#pragma once
// SysfsTree: the sysfs-shaped files through which the distro's libibverbs finds a droce device.
//
// libibverbs lists devices from RDMA netlink, and when that socket cannot be opened (no RDMA
// kernel module, or a launcher's seccomp filter) from $SYSFS_PATH (default /sys). droced
// therefore writes, under a root it owns (the program runs with SYSFS_PATH=<root>), what
// rdma-core 44 reads there (docs/discovery.md has the function-by-function account):
//
//   class/infiniband_verbs/abi_version            "6": the uverbs ABI (libibverbs accepts 3..6)
//   class/infiniband_verbs/<uverbs>/ibdev         "droce0"
//   class/infiniband_verbs/<uverbs>/dev           "1:7": the numbers of the char node
//                                                 /dev/infiniband/<uverbs> (see below)
//   class/infiniband_verbs/<uverbs>/abi_version   DROCE_GLUE_ABI_VERSION: the provider's
//                                                 match_{min,max}_abi_version must bracket it
//   class/infiniband/<name>/node_type             "1: CA"
//   class/infiniband/<name>/node_guid             "0002:c9ff:fe12:3456" (ibv_get_device_guid)
//   class/infiniband/<name>/sys_image_guid, node_desc, fw_ver
//   class/infiniband/<name>/ports/<p>/state       "4: ACTIVE" | "1: DOWN"
//   class/infiniband/<name>/ports/<p>/phys_state  "5: LinkUp" | "3: Disabled"
//   class/infiniband/<name>/ports/<p>/link_layer  "Ethernet" | "InfiniBand"
//   class/infiniband/<name>/ports/<p>/{rate,lid,sm_lid,sm_sl,lid_mask_count,cap_mask}
//   class/infiniband/<name>/ports/<p>/gids/<i>    "fe80:0000:0000:0000:5054:00ff:fe12:3456"
//   class/infiniband/<name>/ports/<p>/gid_attrs/types/<i>  "RoCE v2" | "IB/RoCE v1"
//   class/infiniband/<name>/ports/<p>/gid_attrs/ndevs/<i>  netdev name, only when known
//   class/infiniband/<name>/ports/<p>/pkeys/<i>   "0xffff"
//   class/infiniband/<name>/ports/<p>/droce_active_mtu     droce's own: bytes (no sysfs file
//                                                 carries the MTU; ibv_query_port does)
//   class/infiniband/<name>/droce_control_socket  droce's own: droced's socket, when given
//
// Every file is written to a temporary name and renamed, so a reader sees the old or the new
// content, never a part. A device appears whole: its class/infiniband/<name> directory is built
// under a dot-name and renamed into place first, then its class/infiniband_verbs/<uverbs>
// directory (what enumeration starts from) the same way; destruction removes them in the
// opposite order. Updates (port state, GIDs, P_Keys) touch only files below ports/, so the
// device directory's mtime, which libibverbs uses as the device's identity between two
// ibv_get_device_list() calls (same_sysfs_dev), does not change and open contexts stay valid.
//
// The char node is not written here: libibverbs looks for it at the compile-time path
// /dev/infiniband/<uverbs> (RDMA_CDEV_DIR), which only root (or a private mount namespace) can
// create; see docs/discovery.md.
//
// Threading: none; one owner (droced's control thread). One writer per root.
// Errors: 0 or -errno; a failed create() leaves nothing behind; a failed update leaves each
// file either old or new.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "net/gid_table.h"

namespace droce::provider {

enum class PortState : uint8_t { down, active };
enum class LinkLayer : uint8_t { ethernet, infiniband };

struct PortDescription {
  PortState state = PortState::active;
  LinkLayer link_layer = LinkLayer::ethernet;
  uint32_t active_mtu = 1024;            ///< bytes: 256, 512, 1024, 2048 or 4096
  std::string rate = "10 Gb/sec (1X QDR)";  ///< as sysfs spells it; informational
  /// Index i of the GID table; an entry with an all-zero GID is an empty slot (as sysfs reads
  /// one). Type ib and roce_v1 are both written "IB/RoCE v1", as the kernel does. netdev, when
  /// not empty, goes to gid_attrs/ndevs/<i>: libibverbs then resolves it with if_nametoindex()
  /// and ibv_query_gid_ex() fails if the program's network namespace lacks it, so leave it
  /// empty for ports no kernel netdev stands for.
  std::vector<net::GidEntry> gids;
  /// Files gids/<i> exist for i < max(gid_table_len, gids.size()): libibverbs' fallback walks
  /// every index below the port's gid_tbl_len (from ibv_query_port) and fails on a missing one.
  uint32_t gid_table_len = 16;
  std::vector<uint16_t> pkeys = {0xffff};
};

struct DeviceDescription {
  std::string name = "droce0";         ///< class/infiniband/<name>; the provider matches droce<N>
  std::string uverbs_name = "uverbs0"; ///< class/infiniband_verbs/<uverbs>, /dev/infiniband/<uverbs>
  uint64_t node_guid = 0;              ///< as printed by ibv_devices (most significant first)
  uint64_t sys_image_guid = 0;         ///< 0: the node GUID
  std::string node_desc;               ///< empty: the device name
  std::string fw_ver = "0.1.0";
  /// The numbers written to `dev`: libibverbs' ibv_open_device() requires /dev/infiniband/
  /// <uverbs> to be a char device with exactly these numbers (0:0 would accept any char
  /// device). Default: /dev/full's, harmless to write to and fails writes loudly (ENOSPC), where
  /// /dev/null's would let a stray kernel command "succeed".
  uint32_t cdev_major = 1;
  uint32_t cdev_minor = 7;
  std::string control_socket;          ///< droce_control_socket; not written when empty
  std::vector<PortDescription> ports;  ///< port numbers are 1-based: ports[0] is port 1
};

/// The kernel's uverbs ABI number libibverbs checks in class/infiniband_verbs/abi_version.
inline constexpr int kUverbsAbiVersion = 6;
/// class/misc/rdma_cm/abi_version: the ucma ABI droced's CM serves (librdmacm accepts 3..4;
/// 3 would make it skip INIT_QP_ATTR).
inline constexpr int kUcmaAbiVersion = 4;

class SysfsTree {
 public:
  enum class IfExists : uint8_t { fail, replace };

  /// Writes `desc` under `root` (created if missing). -EINVAL for a description libibverbs could
  /// not read (names empty, with '/' or a leading '.', or too long; no ports or more than 255;
  /// a P_Key table empty or past 128 entries); -EEXIST when the device or uverbs directory is
  /// there already and if_exists is fail (replace removes them first: a stale tree from a
  /// droced that died); other -errno from the filesystem. On success *out owns the tree.
  static int create(const std::string& root, const DeviceDescription& desc,
                    std::unique_ptr<SysfsTree>* out, IfExists if_exists = IfExists::fail);

  /// Removes the device's directories, then class/infiniband_verbs/abi_version and the class
  /// directories if no other device is left in them.
  ~SysfsTree();
  SysfsTree(const SysfsTree&) = delete;
  SysfsTree& operator=(const SysfsTree&) = delete;

  /// port is 1-based. -EINVAL for a port the device does not have.
  int set_port_state(uint8_t port, PortState state);
  int set_active_mtu(uint8_t port, uint32_t mtu);
  /// Rewrites the GID table of `port`, only the slots that changed. A slot whose GID changes is
  /// emptied first and gets its new type before its new GID, so a reader between two files sees
  /// an empty slot, never a GID with another GID's type.
  int set_gids(uint8_t port, std::span<const net::GidEntry> gids);
  /// Replaces the P_Key table; indexes past the new length disappear.
  int set_pkeys(uint8_t port, std::span<const uint16_t> pkeys);

  const DeviceDescription& description() const { return desc_; }
  const std::string& root() const { return root_; }
  std::string device_dir() const;  ///< <root>/class/infiniband/<name>
  std::string uverbs_dir() const;  ///< <root>/class/infiniband_verbs/<uverbs>
  std::string port_dir(uint8_t port) const;

  /// The GID table as the tree takes it: slot i of `table` at index i, empty slots zero.
  static std::vector<net::GidEntry> gids_from_table(const net::GidTable& table);

 private:
  SysfsTree(std::string root, DeviceDescription desc);

  int write_gid_slot(uint8_t port, uint32_t index, const net::GidEntry* old_entry,
                     const net::GidEntry& entry);

  std::string root_;
  DeviceDescription desc_;
  std::vector<bool> gids_stale_;  ///< per port: a failed set_gids left slots unknown
};

// The sysfs renderings of GUIDs and GIDs live with the GID table.
using net::format_gid;
using net::format_guid;

}  // namespace droce::provider
