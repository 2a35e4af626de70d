// net/pcapng.h: each block's exact bytes (the format's layout, little-endian), so a reader
// (tshark in tests/real_clients/capture_test.sh) and these agree on every field.

#include "net/pcapng.h"

#include <gtest/gtest.h>

#include <vector>

namespace droce::net::pcapng {
namespace {

using Bytes = std::vector<uint8_t>;

TEST(Pcapng, SectionHeaderIsAStreamOfUnknownLength) {
  Bytes b;
  append_section_header(&b);
  EXPECT_EQ(b, (Bytes{0x0A, 0x0D, 0x0D, 0x0A, 28, 0, 0, 0,        // type, length
                      0x4D, 0x3C, 0x2B, 0x1A, 1, 0, 0, 0,         // byte-order magic, version 1.0
                      0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,  // section length -1
                      28, 0, 0, 0}));
}

TEST(Pcapng, InterfaceIsEthernetWithNanosecondTimes) {
  Bytes b;
  append_interface(&b, 128, "d0");
  EXPECT_EQ(b, (Bytes{1, 0, 0, 0, 40, 0, 0, 0,  //
                      1, 0, 0, 0,               // linktype Ethernet, reserved
                      128, 0, 0, 0,             // snaplen
                      2, 0, 2, 0, 'd', '0', 0, 0,  // if_name, padded to 4
                      9, 0, 1, 0, 9, 0, 0, 0,      // if_tsresol 9: ns
                      0, 0, 0, 0,                  // opt_endofopt
                      40, 0, 0, 0}));
}

TEST(Pcapng, InterfaceWithoutNameHasOnlyTheResolution) {
  Bytes b;
  append_interface(&b, 65535, "");
  ASSERT_EQ(b.size(), 32u);
  EXPECT_EQ(b[4], 32);
  EXPECT_EQ(b[16], 9);  // the first option is if_tsresol
}

TEST(Pcapng, PacketCarriesTimeLengthsPaddedBytesAndDirection) {
  Bytes b;
  append_packet(&b, 0x0000000100000002ull, 60, Bytes{1, 2, 3}, Direction::outbound);
  EXPECT_EQ(b, (Bytes{6, 0, 0, 0, 48, 0, 0, 0,  //
                      0, 0, 0, 0,               // interface 0
                      1, 0, 0, 0, 2, 0, 0, 0,   // time: high half, low half
                      3, 0, 0, 0, 60, 0, 0, 0,  // captured, on the wire
                      1, 2, 3, 0,               // the bytes, padded to 4
                      2, 0, 4, 0, 2, 0, 0, 0,   // epb_flags: outbound
                      0, 0, 0, 0,               //
                      48, 0, 0, 0}));
}

TEST(Pcapng, PacketInboundAndUnknownDirection) {
  Bytes in, unknown;
  append_packet(&in, 0, 4, Bytes{9, 9, 9, 9}, Direction::inbound);
  EXPECT_EQ(in.size(), 48u);
  EXPECT_EQ(in[32], 2);  // epb_flags
  EXPECT_EQ(in[36], 1);  // inbound
  append_packet(&unknown, 0, 4, Bytes{9, 9, 9, 9}, Direction::unknown);
  EXPECT_EQ(unknown.size(), 36u);  // no options at all
  EXPECT_EQ(unknown[4], 36);
}

TEST(Pcapng, InterfaceStatsCountReceivedAndDropped) {
  Bytes b;
  append_interface_stats(&b, 5, 0x0102, 7);
  EXPECT_EQ(b, (Bytes{5, 0, 0, 0, 52, 0, 0, 0,  //
                      0, 0, 0, 0,               // interface 0
                      0, 0, 0, 0, 5, 0, 0, 0,   // time
                      4, 0, 8, 0, 2, 1, 0, 0, 0, 0, 0, 0,  // isb_ifrecv
                      5, 0, 8, 0, 7, 0, 0, 0, 0, 0, 0, 0,  // isb_ifdrop
                      0, 0, 0, 0,                          //
                      52, 0, 0, 0}));
}

TEST(Pcapng, BlocksAppendAfterWhatIsThere) {
  Bytes b{0xAA};
  append_section_header(&b);
  EXPECT_EQ(b.size(), 29u);
  EXPECT_EQ(b[0], 0xAA);
  EXPECT_EQ(b[5], 28);
}

}  // namespace
}  // namespace droce::net::pcapng
