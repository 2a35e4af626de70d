#include "rocev2/random_packet.h"

namespace droce::rocev2 {

const std::vector<uint8_t>& valid_opcodes() {
  static const std::vector<uint8_t> codes = [] {
    std::vector<uint8_t> v;
    for (unsigned c = 0; c < 256; ++c)
      if (opcode_info(static_cast<uint8_t>(c)).valid()) v.push_back(static_cast<uint8_t>(c));
    return v;
  }();
  return codes;
}

RandomPacket random_packet(std::mt19937_64& rng, const RandomPacketOptions& opts) {
  auto pick = [&](uint64_t n) { return n == 0 ? 0 : rng() % n; };
  auto bit = [&] { return (rng() & 1) != 0; };
  RandomPacket r;
  PacketHeaders& h = r.hdr;
  const auto& codes = valid_opcodes();
  h.bth.opcode = codes[pick(codes.size())];
  const OpcodeInfo& info = opcode_info(h.bth.opcode);

  for (auto& b : h.l2.dst) b = static_cast<uint8_t>(rng());
  for (auto& b : h.l2.src) b = static_cast<uint8_t>(rng());
  h.l2.dst[0] &= 0xfe;  // unicast
  h.l2.src[0] &= 0xfe;
  h.l2.vlan = opts.allow_vlan && bit();
  h.l2.vlan_tci = h.l2.vlan ? static_cast<uint16_t>(rng()) : 0;

  const bool v6 = opts.allow_ipv6 && (!opts.allow_ipv4 || bit());
  h.l3.version = v6 ? 6 : 4;
  h.l3.tos = static_cast<uint8_t>(rng());
  h.l3.ttl = static_cast<uint8_t>(rng());
  if (v6) {
    h.l3.flow_label = static_cast<uint32_t>(rng()) & 0xfffff;
    h.l3.ipv4_frag = 0;
    for (auto& b : h.l3.src) b = static_cast<uint8_t>(rng());
    for (auto& b : h.l3.dst) b = static_cast<uint8_t>(rng());
    h.l3.src[0] = h.l3.dst[0] = 0xfd;  // unique-local, never IPv4-mapped
  } else {
    h.l3.ipv4_id = static_cast<uint16_t>(rng());
    h.l3.ipv4_frag = bit() ? net::kIpv4FlagDf : 0;
    h.l3.src = ipv4_mapped(static_cast<uint32_t>(rng()));
    h.l3.dst = ipv4_mapped(static_cast<uint32_t>(rng()));
  }
  h.l4.src_port = static_cast<uint16_t>(0xc000 | (rng() & 0x3fff));
  h.l4.checksum = 0;  // what RoCEv2 senders put there (Annex A17.4.3.3)

  h.bth.se = bit();
  h.bth.migreq = bit();
  do {
    h.bth.pkey = static_cast<uint16_t>(rng());
  } while ((h.bth.pkey & 0x7fff) == 0);
  h.bth.fecn = bit();
  h.bth.becn = bit();
  h.bth.resv6 = static_cast<uint8_t>(pick(8) == 0 ? rng() & 0x3f : 0);
  h.bth.dest_qp = static_cast<uint32_t>(rng()) & kQpnMask;
  h.bth.ackreq = bit();
  h.bth.psn = static_cast<uint32_t>(rng()) & kPsnMask;

  ExtHeaders& e = h.ext;
  e.xrceth = {static_cast<uint8_t>(pick(8) == 0 ? rng() : 0), static_cast<uint32_t>(rng()) & kQpnMask};
  e.feth = {static_cast<uint8_t>(rng() & 0xf), static_cast<uint8_t>(rng() & 3),
            pick(8) == 0 ? static_cast<uint32_t>(rng()) & 0x3ffffff : 0};
  e.deth = {static_cast<uint32_t>(rng()), 0, static_cast<uint32_t>(rng()) & kQpnMask};
  e.reth = {rng(), static_cast<uint32_t>(rng()), static_cast<uint32_t>(rng())};
  e.atomic_eth = {rng() & ~uint64_t{7}, static_cast<uint32_t>(rng()), rng(), rng()};
  e.aeth = {static_cast<uint8_t>(rng()), static_cast<uint32_t>(rng()) & 0xffffff};
  e.atomic_ack_eth = {rng()};
  e.imm = {static_cast<uint32_t>(rng())};
  e.ieth = {static_cast<uint32_t>(rng())};
  e.cnp = {};

  if (info.payload) {
    uint32_t len = static_cast<uint32_t>(pick(uint64_t{opts.max_payload} + 1));
    if (info.position == Position::first || info.position == Position::middle)
      len = std::max<uint32_t>(4, len & ~3u);
    r.payload.resize(len);
    for (auto& b : r.payload) b = static_cast<uint8_t>(rng());
  }
  h.bth.pad = static_cast<uint8_t>((4 - (r.payload.size() & 3)) & 3);
  return r;
}

}  // namespace droce::rocev2
