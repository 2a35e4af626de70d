#include "rocev2/parser.h"

#include <rte_ip.h>

#include "core/endian.h"
#include "net/headers.h"
#include "rocev2/headers.h"
#include "rocev2/icrc.h"

namespace droce::rocev2 {

namespace {

using core::load_be16;
using core::load_be32;

bool is_ipv6_extension(uint8_t next_header) {
  switch (next_header) {
    case 0:    // hop-by-hop
    case 43:   // routing
    case 44:   // fragment
    case 50:   // ESP
    case 51:   // AH
    case 60:   // destination options
    case 135:  // mobility
    case 139:  // HIP
    case 140:  // shim6
      return true;
    default:
      return false;
  }
}

// Reads the extension headers the opcode calls for, in wire order.
void decode_ext_headers(const OpcodeInfo& info, const uint8_t* p, ExtHeaders* ext) {
  if (info.has(kHdrXrceth)) { ext->xrceth = Xrceth::decode(p); p += sizeof(XrcethWire); }
  if (info.has(kHdrFeth)) { ext->feth = Feth::decode(p); p += sizeof(FethWire); }
  if (info.has(kHdrDeth)) { ext->deth = Deth::decode(p); p += sizeof(DethWire); }
  if (info.has(kHdrReth)) { ext->reth = Reth::decode(p); p += sizeof(RethWire); }
  if (info.has(kHdrAtomicEth)) { ext->atomic_eth = AtomicEth::decode(p); p += sizeof(AtomicEthWire); }
  if (info.has(kHdrAeth)) { ext->aeth = Aeth::decode(p); p += sizeof(AethWire); }
  if (info.has(kHdrAtomicAckEth)) { ext->atomic_ack_eth = AtomicAckEth::decode(p); p += sizeof(AtomicAckEthWire); }
  if (info.has(kHdrImmDt)) { ext->imm = ImmDt::decode(p); p += sizeof(ImmDtWire); }
  if (info.has(kHdrIeth)) { ext->ieth = Ieth::decode(p); p += sizeof(IethWire); }
  if (info.has(kHdrCnp)) { ext->cnp = Cnp::decode(p); }
}

}  // namespace

bool peek_dest_qpn(const uint8_t* p, size_t len, uint32_t* qpn) {
  size_t off = 12;
  if (len < off + 2) return false;
  uint16_t type = core::load_be16(p + off);
  off += 2;
  if (type == net::kEtherTypeVlan) {
    if (len < off + 4) return false;
    type = core::load_be16(p + off + 2);
    off += 4;
  }
  if (type == net::kEtherTypeIpv4) {
    if (len < off + 20 || p[off + 9] != net::kIpProtoUdp) return false;
    off += size_t{p[off] & 0x0fu} * 4;
  } else if (type == net::kEtherTypeIpv6) {
    if (len < off + 40 || p[off + 6] != net::kIpProtoUdp) return false;
    off += 40;
  } else {
    return false;
  }
  if (len < off + 8 + 8 || core::load_be16(p + off + 2) != kRoceV2UdpPort) return false;
  const uint8_t* bth = p + off + 8;
  *qpn = (uint32_t{bth[5]} << 16) | (uint32_t{bth[6]} << 8) | bth[7];
  return true;
}

ParseStatus parse_frame(const net::FrameBytes& frame, ParsedPacket* out, const ParseOptions& opts) {
  uint8_t scratch[64];
  PacketHeaders& h = out->hdr;
  PacketLayout& at = out->layout;
  out->info = nullptr;

  // Ethernet and 802.1Q.
  const uint8_t* p = frame.read(0, net::kEthHdrLen, scratch);
  if (p == nullptr) return ParseStatus::truncated_eth;
  std::memcpy(h.l2.dst.data(), p, 6);
  std::memcpy(h.l2.src.data(), p + 6, 6);
  uint16_t ether_type = load_be16(p + 12);
  size_t off = net::kEthHdrLen;
  h.l2.vlan = false;
  h.l2.vlan_tci = 0;
  if (ether_type == net::kEtherTypeVlan) {
    p = frame.read(off, net::kVlanHdrLen, scratch);
    if (p == nullptr) return ParseStatus::truncated_vlan;
    h.l2.vlan = true;
    h.l2.vlan_tci = load_be16(p);
    ether_type = load_be16(p + 2);
    off += net::kVlanHdrLen;
  }
  if (ether_type != net::kEtherTypeIpv4 && ether_type != net::kEtherTypeIpv6) return ParseStatus::not_ip;

  // IP. The IP length bounds everything after it: Ethernet padding and any
  // trailing bytes (an FCS) beyond it are not part of the packet.
  at.l3_off = static_cast<uint16_t>(off);
  size_t ip_end = 0;
  if (ether_type == net::kEtherTypeIpv4) {
    p = frame.read(off, net::kIpv4HdrLen, scratch);
    if (p == nullptr) return ParseStatus::truncated_ip;
    if ((p[0] >> 4) != 4) return ParseStatus::bad_ip_version;
    h.l3.version = 4;
    h.l3.tos = p[1];
    h.l3.ipv4_id = load_be16(p + 4);
    h.l3.ipv4_frag = load_be16(p + 6);
    h.l3.ttl = p[8];
    h.l3.flow_label = 0;
    h.l3.src = ipv4_mapped(load_be32(p + 12));
    h.l3.dst = ipv4_mapped(load_be32(p + 16));
    if ((p[0] & 0x0f) != 5) return ParseStatus::ipv4_options;
    if (opts.verify_ipv4_checksum &&
        rte_raw_cksum(p, net::kIpv4HdrLen) != 0xffff)  // a valid header sums to all ones
      return ParseStatus::bad_ipv4_checksum;
    if ((h.l3.ipv4_frag & (net::kIpv4FlagMf | net::kIpv4FragOffsetMask)) != 0)
      return ParseStatus::ip_fragment;
    if (p[9] != net::kIpProtoUdp) return ParseStatus::not_udp;
    const size_t total = load_be16(p + 2);
    if (total < net::kIpv4HdrLen || off + total > frame.size()) return ParseStatus::bad_ip_length;
    ip_end = off + total;
    off += net::kIpv4HdrLen;
  } else {
    p = frame.read(off, net::kIpv6HdrLen, scratch);
    if (p == nullptr) return ParseStatus::truncated_ip;
    if ((p[0] >> 4) != 6) return ParseStatus::bad_ip_version;
    const uint32_t w0 = load_be32(p);
    h.l3.version = 6;
    h.l3.tos = static_cast<uint8_t>(w0 >> 20);
    h.l3.flow_label = w0 & 0xfffff;
    h.l3.ttl = p[7];
    h.l3.ipv4_id = 0;
    h.l3.ipv4_frag = 0;
    std::memcpy(h.l3.src.data(), p + 8, 16);
    std::memcpy(h.l3.dst.data(), p + 24, 16);
    if (p[6] != net::kIpProtoUdp)
      return is_ipv6_extension(p[6]) ? ParseStatus::ipv6_ext_headers : ParseStatus::not_udp;
    const size_t payload = load_be16(p + 4);
    if (off + net::kIpv6HdrLen + payload > frame.size()) return ParseStatus::bad_ip_length;
    off += net::kIpv6HdrLen;
    ip_end = off + payload;
  }

  // UDP.
  at.l4_off = static_cast<uint16_t>(off);
  if (ip_end - off < net::kUdpHdrLen) return ParseStatus::truncated_udp;
  p = frame.read(off, net::kUdpHdrLen, scratch);
  h.l4.src_port = load_be16(p);
  h.l4.checksum = load_be16(p + 6);
  const uint16_t dst_port = load_be16(p + 2);
  const size_t udp_len = load_be16(p + 4);
  if (dst_port != kRoceV2UdpPort) return ParseStatus::not_roce_port;
  if (udp_len != ip_end - off) return ParseStatus::bad_udp_length;
  off += net::kUdpHdrLen;

  // BTH (IBA 9.2).
  at.bth_off = static_cast<uint16_t>(off);
  if (ip_end - off < sizeof(BthWire)) return ParseStatus::truncated_bth;
  p = frame.read(off, sizeof(BthWire), scratch);
  h.bth.read(p);
  off += sizeof(BthWire);
  const OpcodeInfo& info = opcode_info(h.bth.opcode);
  if (h.bth.tver != 0) return ParseStatus::bad_tver;  // C9-23
  switch (info.cls) {
    case OpcodeClass::valid: break;
    case OpcodeClass::invalid_for_transport: return ParseStatus::opcode_invalid_for_transport;
    case OpcodeClass::unsupported_transport: return ParseStatus::unsupported_transport;
    case OpcodeClass::unknown: return ParseStatus::unknown_opcode;
  }
  out->info = &info;
  if ((h.bth.pkey & 0x7fff) == 0 && info.kind != OpKind::cnp) return ParseStatus::invalid_pkey;

  // Extension headers, then payload, pad and ICRC.
  if (ip_end - off < info.ext_len) return ParseStatus::truncated_ext_header;
  h.ext = ExtHeaders{};  // absent headers read as defaults, as canonical() has them
  if (info.ext_len != 0) {
    p = frame.read(off, info.ext_len, scratch);
    decode_ext_headers(info, p, &h.ext);
    off += info.ext_len;
  }
  at.payload_off = static_cast<uint16_t>(off);
  if (ip_end - off < kIcrcLen) return ParseStatus::truncated_icrc;
  const size_t body = ip_end - off - kIcrcLen;  // payload + pad
  if (!info.payload && body != 0) return ParseStatus::unexpected_payload;
  if (h.bth.pad > body) return ParseStatus::bad_pad_count;
  // First and middle packets carry whole MTUs, a multiple of 4 (C9-78).
  if (h.bth.pad != 0 && (info.position == Position::first || info.position == Position::middle))
    return ParseStatus::bad_pad_count;
  if (!info.payload && h.bth.pad != 0) return ParseStatus::bad_pad_count;
  at.payload_len = static_cast<uint32_t>(body - h.bth.pad);
  at.icrc_off = static_cast<uint32_t>(ip_end - kIcrcLen);
  p = frame.read(at.icrc_off, kIcrcLen, scratch);
  out->icrc = core::load_le32(p);
  if (opts.verify_icrc) {
    bool ok = false;
    const uint32_t icrc = compute_icrc(frame, at.l3_off, at.icrc_off, h.l3.version, &ok);
    if (!ok || icrc != out->icrc) return ParseStatus::bad_icrc;
  }
  return ParseStatus::ok;
}

const char* to_string(ParseStatus s) {
  static constexpr const char* kNames[] = {
#define DROCE_X(name, text) #name,
      DROCE_PARSE_STATUS_LIST(DROCE_X)
#undef DROCE_X
  };
  const auto i = static_cast<size_t>(s);
  return i < kParseStatusCount ? kNames[i] : "?";
}

const char* describe(ParseStatus s) {
  static constexpr const char* kTexts[] = {
#define DROCE_X(name, text) text,
      DROCE_PARSE_STATUS_LIST(DROCE_X)
#undef DROCE_X
  };
  const auto i = static_cast<size_t>(s);
  return i < kParseStatusCount ? kTexts[i] : "?";
}

}  // namespace droce::rocev2
