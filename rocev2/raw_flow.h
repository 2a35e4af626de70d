#pragma once
// Flow steering for raw packet QPs, I/O-free: which rules a received frame matches
// (ibv_create_flow(3)), and to which QPs it goes.
//
// Who gets a frame, as an HCA's steering decides it:
//   - of the normal rules that match, those of the best (lowest) priority: each one's QP gets a
//     copy (two QPs with the same rule both receive, as with multicast on mlx5);
//   - when no normal rule matched: the all-default rules, and for a multicast destination MAC the
//     multicast-default rules;
//   - always: the sniffer rules (a copy of every frame).
// A QP named by several rules that apply gets the frame once.
//
// The engine offers this table only what its transport did not take (a frame that is not
// RoCEv2 for this host), and every received frame to sniffers.
//
// Control path: add, remove. Data path: select, which does not allocate (the caller's vector
// keeps its capacity). One engine owns a table; not thread-safe.

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "abi/flow.h"

namespace droce::rocev2 {

/// True when `frame` (from its Ethernet header) has every layer `m` names with every field as
/// `m` masks it. A frame too short for a layer it must have does not match.
bool flow_matches(const abi::FlowMatch& m, std::span<const uint8_t> frame);

/// Receive-side scaling for a raw packet QP that spreads (ibv_create_qp_ex with
/// IBV_QP_INIT_ATTR_RX_HASH and an indirection table): a frame its rules pick goes to the
/// receive queue (a WQ: a raw packet QP of its own) at table[hash & (size - 1)], the hash a
/// Toeplitz hash of the fields `fields` names (IBV_RX_HASH_* bits) under `key`.
struct RawRss {
  static constexpr size_t kMaxKey = 40;
  static constexpr size_t kMaxTable = 128;
  std::vector<uint32_t> table;  ///< QPNs; a power of two long
  /// Each QP's incarnation when the table was set (Engine::set_rss fills it): a queue destroyed
  /// and its QPN given to another QP later does not receive for this table.
  std::vector<uint32_t> incarnations;
  std::array<uint8_t, kMaxKey> key{};
  uint8_t key_len = 0;
  uint32_t fields = 0;
};
inline constexpr uint32_t kRxHashSrcIpv4 = 1u << 0, kRxHashDstIpv4 = 1u << 1, kRxHashSrcIpv6 = 1u << 2,
                          kRxHashDstIpv6 = 1u << 3, kRxHashSrcPortTcp = 1u << 4, kRxHashDstPortTcp = 1u << 5,
                          kRxHashSrcPortUdp = 1u << 6, kRxHashDstPortUdp = 1u << 7;
inline constexpr uint32_t kRxHashKnown = 0xff;

/// The Toeplitz hash (Microsoft's RSS definition) of `in` under `key`; `key` must be at least
/// in.size() + 4 bytes long (inputs past that hash as if the key went on with zeros).
uint32_t toeplitz_hash(std::span<const uint8_t> key, std::span<const uint8_t> in);
/// The hash of `frame` as `rss` asks: the addresses, then the ports, of the fields it names that
/// the frame has (a frame with none of them hashes to 0).
uint32_t rss_hash(const RawRss& rss, std::span<const uint8_t> frame);

class RawFlowTable {
 public:
  struct Rule {
    uint32_t id;
    uint32_t qpn;
    uint16_t priority;
    abi::FlowType type;
    abi::FlowMatch match;
  };

  /// A new rule; its id (nonzero, never reused while the table lives).
  uint32_t add(uint32_t qpn, abi::FlowType type, uint16_t priority, const abi::FlowMatch& match);
  /// False when no rule has that id.
  bool remove(uint32_t id);
  /// Drops every rule of `qpn` (its QP is destroyed); how many.
  size_t remove_qp(uint32_t qpn);
  /// The QPN a rule steers to, or 0 when there is no such rule.
  uint32_t qpn_of(uint32_t id) const;

  bool empty() const { return rules_.empty(); }
  bool has_sniffers() const { return sniffers_ != 0; }
  size_t size() const { return rules_.size(); }

  /// The QPs that receive `frame` (rules above), each once, in rule order, into *qpns (cleared
  /// first). `sniffers_only`: only the sniffer rules (a frame the transport took).
  void select(std::span<const uint8_t> frame, bool sniffers_only, std::vector<uint32_t>* qpns) const;

 private:
  std::vector<Rule> rules_;
  uint32_t next_id_ = 1;
  size_t sniffers_ = 0;
};

}  // namespace droce::rocev2
