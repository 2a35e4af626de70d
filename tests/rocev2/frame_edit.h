#pragma once
// FrameEdit: a valid RoCEv2 frame to edit byte by byte in tests, with the
// fixes a well-formed sender would make (IPv4 checksum, ICRC) on request.

#include <gtest/gtest.h>
#include <rte_ip.h>

#include <cstring>
#include <vector>

#include "core/endian.h"
#include "rocev2/builder.h"
#include "rocev2/icrc.h"
#include "rocev2/parser.h"

namespace droce::test {

using namespace droce::rocev2;

// A frame under construction: build a valid one, edit bytes, then fix what a
// well-formed sender would have fixed (IPv4 checksum, ICRC) unless the test is
// about exactly that.
struct FrameEdit {
  std::vector<uint8_t> b;
  PacketLayout at;
  uint8_t ipv = 4;

  static FrameEdit of(uint8_t opcode, uint32_t payload_len, uint8_t ipv = 4, bool vlan = false) {
    PacketHeaders h;
    h.l2.vlan = vlan;
    h.l3.version = ipv;
    if (ipv == 4) {
      h.l3.src = ipv4_mapped(0x0a000001);
      h.l3.dst = ipv4_mapped(0x0a000002);
    } else {
      h.l3.src[0] = h.l3.dst[0] = 0xfd;
      h.l3.ipv4_frag = 0;
    }
    h.bth.opcode = opcode;
    h.bth.psn = 100;
    h.bth.dest_qp = 0x11;
    FrameEdit f;
    f.ipv = ipv;
    std::vector<uint8_t> pl(payload_len, 0x3c);
    f.b.resize(frame_len(h, payload_len));
    EXPECT_NE(build_frame(h, pl, f.b), 0u);
    write_headers(h, payload_len, f.b.data(), &f.at);
    return f;
  }
  uint8_t* ip() { return b.data() + at.l3_off; }
  uint8_t* udp() { return b.data() + at.l4_off; }
  uint8_t* bth() { return b.data() + at.bth_off; }

  void fix_ipv4_checksum() {
    if (ipv != 4) return;
    core::store_be16(ip() + 10, 0);
    const uint16_t sum = rte_ipv4_cksum(reinterpret_cast<const rte_ipv4_hdr*>(ip()));
    std::memcpy(ip() + 10, &sum, 2);
  }
  void fix_icrc() { refresh_icrc(b, at.l3_off, at.icrc_off, ipv); }
  void fix_all() {
    fix_ipv4_checksum();
    fix_icrc();
  }
  // Declares `udp_payload` bytes after the UDP header in IP and UDP lengths
  // and cuts the frame to match.
  void set_udp_payload_len(size_t udp_payload) {
    const size_t udp_len = net::kUdpHdrLen + udp_payload;
    if (ipv == 4) core::store_be16(ip() + 2, uint16_t(net::kIpv4HdrLen + udp_len));
    else core::store_be16(ip() + 4, uint16_t(udp_len));
    core::store_be16(udp() + 4, uint16_t(udp_len));
    b.resize(at.l4_off + udp_len);
    fix_ipv4_checksum();
  }
  ParseStatus parse() const {
    ParsedPacket p;
    return parse_frame(std::span<const uint8_t>(b), &p);
  }
};

}  // namespace droce::test
