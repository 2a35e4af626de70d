#include "rocev2/packet.h"

namespace droce::rocev2 {

PacketHeaders canonical(const PacketHeaders& h, uint32_t payload_len) {
  PacketHeaders c = h;
  const OpcodeInfo& info = opcode_info(h.bth.opcode);
  const ExtHeaders none{};
  if (!info.has(kHdrXrceth)) c.ext.xrceth = none.xrceth;
  if (!info.has(kHdrFeth)) c.ext.feth = none.feth;
  if (!info.has(kHdrDeth)) c.ext.deth = none.deth;
  if (!info.has(kHdrReth)) c.ext.reth = none.reth;
  if (!info.has(kHdrAtomicEth)) c.ext.atomic_eth = none.atomic_eth;
  if (!info.has(kHdrAeth)) c.ext.aeth = none.aeth;
  if (!info.has(kHdrAtomicAckEth)) c.ext.atomic_ack_eth = none.atomic_ack_eth;
  if (!info.has(kHdrImmDt)) c.ext.imm = none.imm;
  if (!info.has(kHdrIeth)) c.ext.ieth = none.ieth;
  if (!info.has(kHdrCnp)) c.ext.cnp = none.cnp;
  c.bth.pad = static_cast<uint8_t>((4 - (payload_len & 3)) & 3);
  if (!c.l2.vlan) c.l2.vlan_tci = 0;
  if (c.l3.version == 6) {
    c.l3.ipv4_id = 0;
    c.l3.ipv4_frag = 0;
  } else {
    c.l3.flow_label = 0;
  }
  return c;
}

}  // namespace droce::rocev2
