// The control protocol's framing: header checks, append-only evolution in
// both directions, refusal of a different major version.

#include <gtest/gtest.h>

#include "abi/ctl_protocol.h"

namespace droce::abi::ctl {
namespace {

TEST(CtlProtocol, RoundTripsABody) {
  RegMrRequest r{3, 7, 0x1000, 4096, 64};
  const auto msg = encode(MsgType::reg_mr, 42, r);
  CtlHeader h;
  ASSERT_EQ(check_header(msg, &h), HeaderCheck::ok);
  EXPECT_EQ(h.type, uint16_t(MsgType::reg_mr));
  EXPECT_EQ(h.seq, 42u);
  EXPECT_EQ(h.flags, 0);
  RegMrRequest got;
  ASSERT_EQ(decode_body(msg, &got), 0);
  EXPECT_EQ(std::memcmp(&got, &r, sizeof r), 0);
  const auto reply = encode_empty(MsgType::reg_mr, 42, true, -EINVAL);
  ASSERT_EQ(check_header(reply, &h), HeaderCheck::ok);
  EXPECT_EQ(h.flags, kFlagReply);
  EXPECT_EQ(h.status, -EINVAL);
}

TEST(CtlProtocol, EachBrokenHeaderIsRefusedWithItsReason) {
  const auto good = encode(MsgType::alloc_pd, 1, IdRequest{});
  CtlHeader h;
  EXPECT_EQ(check_header(std::span<const uint8_t>(good.data(), 23), &h), HeaderCheck::too_short);
  auto bad = good;
  bad[0] ^= 1;
  EXPECT_EQ(check_header(bad, &h), HeaderCheck::bad_magic);
  bad = good;
  bad[4] = kAbiMajor + 1;  // abi_major's low byte
  EXPECT_EQ(check_header(bad, &h), HeaderCheck::major_mismatch);
  EXPECT_NE(std::string(to_string(HeaderCheck::major_mismatch)).find("upgraded together"), std::string::npos);
  bad = good;
  bad.push_back(0);  // length field no longer matches
  EXPECT_EQ(check_header(bad, &h), HeaderCheck::bad_length);
  bad = good;
  bad[8] = 0xee;  // type
  EXPECT_EQ(check_header(bad, &h), HeaderCheck::unknown_type);
  bad = good;
  bad[6] = kAbiMinor + 5;  // a newer minor is fine
  EXPECT_EQ(check_header(bad, &h), HeaderCheck::ok);
}

// A later version of HelloRequest, as a future droce might append a field.
struct HelloRequestV2 {
  HelloRequest v1;
  uint64_t appended;
};

TEST(CtlProtocol, OlderAndNewerPeersInteroperate) {
  // A newer client sends more than this daemon knows: the extra is ignored.
  HelloRequestV2 v2{};
  v2.v1.pid = 77;
  v2.appended = 0xdead;
  auto msg = encode(MsgType::hello, 1, v2);
  HelloRequest as_v1;
  ASSERT_EQ(decode_body(msg, &as_v1), 0);
  EXPECT_EQ(as_v1.pid, 77u);
  // An older client sends less than a newer daemon knows: the missing field reads as 0.
  HelloRequest v1{};
  v1.pid = 5;
  msg = encode(MsgType::hello, 2, v1);
  HelloRequestV2 as_v2;
  std::memset(&as_v2, 0xff, sizeof as_v2);
  ASSERT_EQ(decode_body(msg, &as_v2, sizeof(HelloRequest)), 0);
  EXPECT_EQ(as_v2.v1.pid, 5u);
  EXPECT_EQ(as_v2.appended, 0u);
  // Shorter than the first version of the body: malformed.
  msg.resize(sizeof(CtlHeader) + 10);
  EXPECT_EQ(decode_body(msg, &as_v1), -EBADMSG);
}

}  // namespace
}  // namespace droce::abi::ctl
