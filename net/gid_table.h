#pragma once
// GidTable: the port's RoCEv2 GID table, built from its configured addresses
// the way Linux builds it for a RoCE device.
//
// Contents:
//   - index 0: the IPv6 link-local GID fe80::/64 with the modified EUI-64 of
//     the port MAC (RFC 4291 2.5.1 / appendix A: the MAC's universal/local
//     bit flipped, ff:fe in the middle), untagged, as rxe puts it there. It is
//     always present, whether or not the netdev has IPv6 enabled (rxe users
//     find GID 0 gone when IPv6 is off, and programs that hard-code
//     `-g 0` break; droce keeps it), and cannot be removed;
//   - for each IPv6 address added, a GID equal to the address;
//   - for each IPv4 address added, the IPv4-mapped GID ::ffff:a.b.c.d.
// Every entry droce produces is RoCE v2 (UDP/IP encapsulation); GidType keeps
// the other values of ibv_gid_type for completeness.
//
// Stable indexes: an address takes the lowest free index, and adding or
// removing an address never moves another one; a freed index stays empty
// (all-zero GID, as an empty sysfs gids/<n> reads) until the next add reuses
// it. libibverbs users cache GID indexes (a QP's sgid_index, `-x 3` on the
// perftest command line), so an index must keep meaning the same address for
// as long as the address exists.
//
// Threading: none. droced's control thread owns the table; the transport
// copies what it needs (source GID, MAC, VLAN) into a QP when the QP moves
// to RTR, so nothing on the data path reads it.
//
// Errors: 0 / an index, or -errno (EINVAL, EEXIST, ENOENT, ENOSPC, EBUSY).

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "net/addr.h"

namespace droce::net {

using Gid = std::array<uint8_t, 16>;

/// ibv_gid_type's values. droce produces roce_v2 only.
enum class GidType : uint8_t { ib = 0, roce_v1 = 1, roce_v2 = 2 };

/// As sysfs gid_attrs/types/<n> spells it: "IB/RoCE v1" or "RoCE v2" ("IB" for ib).
const char* to_string(GidType t);

struct GidEntry {
  Gid gid{};
  GidType type = GidType::roce_v2;
  uint16_t vlan = kNoVlan;  ///< 1..4094, or kNoVlan
  MacAddr mac{};            ///< the source MAC for frames from this GID
  std::string netdev;       ///< what sysfs gid_attrs/ndevs/<n> shows ("eth0", "eth0.100")
};

/// fe80::/64 with the modified EUI-64 of `mac` (52:54:00:12:34:56 ->
/// fe80::5054:ff:fe12:3456).
Gid ipv6_link_local_from_mac(const MacAddr& mac);

/// The node GUID of a port with this MAC: the EUI-64 of its link-local GID
/// (the last eight bytes of ipv6_link_local_from_mac), as rxe derives it.
uint64_t node_guid_from_mac(const MacAddr& mac);

/// "%04x:%04x:%04x:%04x" of a GUID, most significant group first, as sysfs
/// shows node_guid and ibv_devinfo prints it.
std::string format_guid(uint64_t guid);
/// Eight colon-separated groups of four hex digits, as sysfs shows gids/<i>.
std::string format_gid(const Gid& gid);

class GidTable {
 public:
  /// Linux's and rxe's default table length is larger; 256 covers any
  /// realistic number of addresses on one port.
  static constexpr uint32_t kDefaultCapacity = 256;

  /// A table holding index 0 (the link-local GID of `port_mac`, on `netdev`).
  /// capacity is clamped to at least 1.
  explicit GidTable(const MacAddr& port_mac, std::string netdev = {},
                    uint32_t capacity = kDefaultCapacity);

  /// Adds the GID of `ip` (IPv6, or IPv4-mapped) on `vlan` at the lowest free
  /// index and returns the index. netdev defaults to the port's ("eth0", or
  /// "eth0.<vlan>" on a VLAN); mac defaults to the port's. -EINVAL for an
  /// unspecified, multicast or loopback address (and IPv4 240/4, broadcast
  /// included), a VLAN outside 1..4094 / kNoVlan, or a multicast or zero MAC; -EEXIST when that GID is already there on that VLAN (index 0's
  /// link-local included); -ENOSPC when the table is full.
  int add(const IpAddr& ip, uint16_t vlan = kNoVlan, std::string_view netdev = {},
          std::optional<MacAddr> mac = std::nullopt);
  /// Empties the entry of `ip` on `vlan`; the index stays free. -ENOENT when
  /// absent; -EBUSY for index 0, which is permanent.
  int remove(const IpAddr& ip, uint16_t vlan = kNoVlan);

  /// The entry at `index`, or nullptr when out of range or empty.
  const GidEntry* at(uint32_t index) const;
  /// The lowest index holding `gid` (on any VLAN / on `vlan`), or -ENOENT.
  int find(const Gid& gid) const;
  int find(const Gid& gid, uint16_t vlan) const;

  /// The source GID for sending to `dst` (on any VLAN / on `vlan`): an entry
  /// of the same IP version (IPv4-mapped for an IPv4 dst); for IPv6, a global
  /// (or unique-local) GID before a link-local one, unless dst is link-local,
  /// which takes a link-local GID only. Among those, the longest prefix in
  /// common with dst, then the lowest index. -EINVAL for an unspecified dst;
  /// -ENOENT when nothing fits.
  int find_for_destination(const IpAddr& dst) const;
  int find_for_destination(const IpAddr& dst, uint16_t vlan) const;

  uint32_t capacity() const { return static_cast<uint32_t>(slots_.size()); }
  uint32_t size() const;  ///< entries in use
  const MacAddr& port_mac() const { return port_mac_; }

 private:
  int find_impl(const Gid& gid, std::optional<uint16_t> vlan) const;
  int find_for_destination_impl(const IpAddr& dst, std::optional<uint16_t> vlan) const;

  MacAddr port_mac_;
  std::string netdev_;
  std::vector<std::optional<GidEntry>> slots_;
};

}  // namespace droce::net
