#pragma once
// Random valid RoCEv2 packets, for lab traffic (`droce gen`), property tests
// and benchmarks. Deterministic for a given seed. Control path.

#include <cstdint>
#include <random>
#include <vector>

#include "rocev2/packet.h"

namespace droce::rocev2 {

/// Every opcode droce sends or accepts (OpcodeClass::valid), CNP included.
const std::vector<uint8_t>& valid_opcodes();

struct RandomPacket {
  PacketHeaders hdr;
  std::vector<uint8_t> payload;
};

struct RandomPacketOptions {
  uint32_t max_payload = 4096;
  bool allow_ipv6 = true;
  bool allow_ipv4 = true;
  bool allow_vlan = true;
};

/// A random packet: any valid opcode, IPv4 or IPv6, VLAN or not, random
/// header fields (reserved bits that the ICRC masks too), and a payload of
/// 0..max_payload bytes where the opcode carries one (a non-zero multiple of
/// 4 for first and middle packets, as a path MTU would give).
RandomPacket random_packet(std::mt19937_64& rng, const RandomPacketOptions& opts = {});

}  // namespace droce::rocev2
