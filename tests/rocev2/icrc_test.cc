// ICRC: the CRC library's known answer, the seed, which fields are masked and
// which are covered.

#include <gtest/gtest.h>

#include <random>
#include <set>

#include "core/endian.h"
#include "rocev2/builder.h"
#include "rocev2/icrc.h"
#include "rocev2/parser.h"
#include "rocev2/random_packet.h"
#include "tests/rocev2/frame_edit.h"

namespace droce::rocev2 {
namespace {

TEST(Crc32, MatchesTheIeeeCheckValue) {
  const char* s = "123456789";
  EXPECT_EQ(crc32(0, s, 9), 0xcbf43926u);
  // Chaining continues the same CRC.
  EXPECT_EQ(crc32(crc32(0, s, 4), s + 4, 5), 0xcbf43926u);
}

using Frame = test::FrameEdit;

Frame make(uint8_t ipv, uint8_t opcode = 0x04, uint32_t payload = 37) { return Frame::of(opcode, payload, ipv); }

uint32_t icrc_of(const Frame& f) {
  return compute_icrc(net::FrameBytes(std::span<const uint8_t>(f.b)), f.at.l3_off, f.at.icrc_off, f.ipv);
}

uint32_t carried(const Frame& f) { return core::load_le32(f.b.data() + f.at.icrc_off); }

TEST(Icrc, BuilderStoresItLeastSignificantByteFirst) {
  for (uint8_t ipv : {4, 6}) {
    Frame f = make(ipv);
    EXPECT_EQ(carried(f), icrc_of(f));
  }
}

TEST(Icrc, MaskedFieldsDoNotChangeIt) {
  // IPv4: TOS (1), TTL (8), header checksum (10, 11). UDP checksum. BTH byte 4.
  Frame f = make(4);
  const uint32_t before = icrc_of(f);
  const size_t l3 = f.at.l3_off, l4 = f.at.l4_off, bth = f.at.bth_off;
  for (size_t off : {l3 + 1, l3 + 8, l3 + 10, l3 + 11, l4 + 6, l4 + 7, bth + 4}) {
    Frame g = f;
    g.b[off] ^= 0x5a;
    EXPECT_EQ(icrc_of(g), before) << "offset " << off;
  }
  // IPv6: traffic class and flow label (low nibble of byte 0, bytes 1-3), hop limit (7).
  Frame v6 = make(6);
  const uint32_t before6 = icrc_of(v6);
  const size_t l3v6 = v6.at.l3_off;
  for (size_t off : {l3v6 + 0, l3v6 + 1, l3v6 + 2, l3v6 + 3, l3v6 + 7}) {
    Frame g = v6;
    g.b[off] ^= (off == l3v6 ? 0x0f : 0x5a);  // the version nibble is covered
    EXPECT_EQ(icrc_of(g), before6) << "offset " << off;
  }
}

TEST(Icrc, EveryCoveredByteChangesIt) {
  for (uint8_t ipv : {4, 6}) {
    Frame f = make(ipv, make_opcode(Transport::rc, op::kWriteOnlyImm), 61);
    const uint32_t before = icrc_of(f);
    const size_t l3 = f.at.l3_off;
    const std::set<size_t> masked =
        ipv == 4 ? std::set<size_t>{l3 + 1, l3 + 8, l3 + 10, l3 + 11}
                 : std::set<size_t>{l3 + 1, l3 + 2, l3 + 3, l3 + 7};
    for (size_t off = l3; off < f.at.icrc_off; ++off) {
      if (masked.count(off) || off == size_t(f.at.l4_off) + 6 || off == size_t(f.at.l4_off) + 7 ||
          off == size_t(f.at.bth_off) + 4)
        continue;
      Frame g = f;
      g.b[off] ^= (off == l3 ? 0x10 : 0x01);  // IPv6 byte 0: flip a version bit (covered)
      EXPECT_NE(icrc_of(g), before) << "IPv" << int(ipv) << " offset " << off;
    }
  }
}

TEST(Icrc, EthernetAndVlanAreNotCovered) {
  Frame f = make(4);
  const uint32_t before = icrc_of(f);
  for (size_t off = 0; off < 12; ++off) {  // MAC addresses
    Frame g = f;
    g.b[off] ^= 0xff;
    EXPECT_EQ(icrc_of(g), before);
  }
}

TEST(Icrc, ComputeRefusesALayoutThatDoesNotFit) {
  Frame f = make(4);
  bool ok = true;
  compute_icrc(net::FrameBytes(std::span<const uint8_t>(f.b)), f.at.l3_off, f.b.size() + 1, 4, &ok);
  EXPECT_FALSE(ok);
  compute_icrc(net::FrameBytes(std::span<const uint8_t>(f.b)), f.at.l3_off, f.at.l3_off + 10, 4, &ok);
  EXPECT_FALSE(ok);
}

}  // namespace
}  // namespace droce::rocev2
