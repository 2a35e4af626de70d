#include "rocev2/format.h"

#include <arpa/inet.h>

#include <cinttypes>
#include <cstdarg>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace droce::rocev2 {

namespace {

std::string sprintf_str(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

std::string sprintf_str(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

// Which layers a status proves were parsed.
bool reached_l4(ParseStatus s) {
  switch (s) {
    case ParseStatus::not_ip:
    case ParseStatus::truncated_eth:
    case ParseStatus::truncated_vlan:
    case ParseStatus::truncated_ip:
    case ParseStatus::bad_ip_version:
      return false;
    default:
      return true;
  }
}

bool reached_bth(const ParsedPacket& p, ParseStatus s) {
  if (!reached_l4(s)) return false;
  switch (s) {
    case ParseStatus::not_udp:
    case ParseStatus::not_roce_port:
    case ParseStatus::ipv4_options:
    case ParseStatus::bad_ipv4_checksum:
    case ParseStatus::ip_fragment:
    case ParseStatus::ipv6_ext_headers:
    case ParseStatus::bad_ip_length:
    case ParseStatus::truncated_udp:
    case ParseStatus::bad_udp_length:
    case ParseStatus::truncated_bth:
      return false;
    default:
      return p.layout.bth_off != 0;
  }
}

std::string ext_text(const ParsedPacket& p) {
  const OpcodeInfo& info = *p.info;
  const ExtHeaders& e = p.hdr.ext;
  std::string s;
  if (info.has(kHdrXrceth)) s += sprintf_str("  XRCETH xrc_srq=0x%06x\n", e.xrceth.xrc_srq);
  if (info.has(kHdrFeth))
    s += sprintf_str("  FETH   placement_type=0x%x selectivity=%u\n", e.feth.placement_type, e.feth.selectivity);
  if (info.has(kHdrDeth))
    s += sprintf_str("  DETH   qkey=0x%08x src_qp=0x%06x\n", e.deth.qkey, e.deth.src_qp);
  if (info.has(kHdrReth))
    s += sprintf_str("  RETH   va=0x%016" PRIx64 " rkey=0x%08x dma_len=%u\n", e.reth.va, e.reth.rkey,
                     e.reth.dma_len);
  if (info.has(kHdrAtomicEth))
    s += sprintf_str("  AtomicETH va=0x%016" PRIx64 " rkey=0x%08x swap_add=0x%016" PRIx64
                     " compare=0x%016" PRIx64 "\n",
                     e.atomic_eth.va, e.atomic_eth.rkey, e.atomic_eth.swap_add, e.atomic_eth.compare);
  if (info.has(kHdrAeth)) {
    static constexpr const char* kKinds[] = {"ACK", "RNR_NAK", "reserved", "NAK"};
    s += sprintf_str("  AETH   syndrome=0x%02x (%s %u) msn=%u\n", e.aeth.syndrome,
                     kKinds[static_cast<int>(e.aeth.kind())], e.aeth.value(), e.aeth.msn);
  }
  if (info.has(kHdrAtomicAckEth))
    s += sprintf_str("  AtomicAckETH orig=0x%016" PRIx64 "\n", e.atomic_ack_eth.orig);
  if (info.has(kHdrImmDt)) s += sprintf_str("  ImmDt  imm=0x%08x\n", e.imm.imm);
  if (info.has(kHdrIeth)) s += sprintf_str("  IETH   rkey=0x%08x\n", e.ieth.rkey);
  return s;
}

}  // namespace


std::string format_mac(const MacAddr& m) {
  return sprintf_str("%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
}

std::string format_text(const ParsedPacket& p, ParseStatus status, bool icrc_ok) {
  const PacketHeaders& h = p.hdr;
  std::string s;
  if (status == ParseStatus::truncated_eth) return "  (frame too short for Ethernet)\n  verdict: truncated_eth\n";
  s += sprintf_str("  Ether  %s -> %s", format_mac(h.l2.src).c_str(), format_mac(h.l2.dst).c_str());
  if (h.l2.vlan) s += sprintf_str(" vlan=%u pcp=%u", h.l2.vlan_tci & 0xfff, h.l2.vlan_tci >> 13);
  s += "\n";
  if (reached_l4(status)) {
    s += sprintf_str("  IPv%u   %s -> %s tos=0x%02x ttl=%u", h.l3.version, format_ip(h.l3.src).c_str(),
                     format_ip(h.l3.dst).c_str(), h.l3.tos, h.l3.ttl);
    if (h.l3.version == 6) s += sprintf_str(" flow=0x%05x", h.l3.flow_label);
    else s += sprintf_str(" id=0x%04x%s", h.l3.ipv4_id, (h.l3.ipv4_frag & net::kIpv4FlagDf) ? " DF" : "");
    s += sprintf_str("\n  UDP    sport=%u csum=0x%04x\n", h.l4.src_port, h.l4.checksum);
  }
  if (reached_bth(p, status)) {
    const OpcodeInfo& info = opcode_info(h.bth.opcode);
    s += sprintf_str("  BTH    %s (0x%02x) se=%u m=%u pad=%u tver=%u pkey=0x%04x fecn=%u becn=%u "
                     "dqpn=0x%06x ackreq=%u psn=%u\n",
                     info.name, h.bth.opcode, h.bth.se, h.bth.migreq, h.bth.pad, h.bth.tver, h.bth.pkey,
                     h.bth.fecn, h.bth.becn, h.bth.dest_qp, h.bth.ackreq, h.bth.psn);
    if (p.info != nullptr && p.layout.payload_off != 0) {
      s += ext_text(p);
      if (status == ParseStatus::ok || status == ParseStatus::bad_icrc) {
        s += sprintf_str("  payload %u bytes\n", p.layout.payload_len);
        s += sprintf_str("  ICRC   0x%08x %s\n", p.icrc, icrc_ok ? "ok" : "BAD");
      }
    }
  }
  s += sprintf_str("  verdict: %s%s%s\n", to_string(status), status == ParseStatus::ok ? "" : ": ",
                   status == ParseStatus::ok ? "" : describe(status));
  return s;
}

std::string format_json(size_t frame_no, const ParsedPacket& p, ParseStatus status, bool icrc_ok,
                        std::string_view mad) {
  const PacketHeaders& h = p.hdr;
  nlohmann::ordered_json j;
  j["frame"] = frame_no;
  j["status"] = status == ParseStatus::ok ? "ok" : is_foreign(status) ? "foreign" : "rejected";
  if (status != ParseStatus::ok) j["reason"] = to_string(status);
  if (reached_bth(p, status) && status != ParseStatus::not_roce_port) {
    j["ip_version"] = unsigned{h.l3.version};
    j["src"] = format_ip(h.l3.src);
    j["dst"] = format_ip(h.l3.dst);
    if (h.l2.vlan) j["vlan"] = unsigned(h.l2.vlan_tci & 0xfff);
    else j["vlan"] = nullptr;
    j["opcode"] = unsigned{h.bth.opcode};
    j["opcode_name"] = opcode_info(h.bth.opcode).name;
    j["se"] = unsigned{h.bth.se};
    j["ackreq"] = unsigned{h.bth.ackreq};
    j["pad"] = unsigned{h.bth.pad};
    j["pkey"] = unsigned{h.bth.pkey};
    j["dqpn"] = unsigned{h.bth.dest_qp};
    j["psn"] = unsigned{h.bth.psn};
    if (status == ParseStatus::ok || status == ParseStatus::bad_icrc) {
      j["payload_len"] = unsigned{p.layout.payload_len};
      j["icrc"] = unsigned{p.icrc};
      j["icrc_ok"] = icrc_ok;
    }
  }
  if (!mad.empty()) j["mad"] = mad;
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace droce::rocev2
