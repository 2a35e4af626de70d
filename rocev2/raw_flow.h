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

#include <cstdint>
#include <span>
#include <vector>

#include "abi/flow.h"

namespace droce::rocev2 {

/// True when `frame` (from its Ethernet header) has every layer `m` names with every field as
/// `m` masks it. A frame too short for a layer it must have does not match.
bool flow_matches(const abi::FlowMatch& m, std::span<const uint8_t> frame);

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
