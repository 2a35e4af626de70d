// QP attributes through their control-protocol form and back (what the
// client library sends and droced reads, and query_qp's way back).

#include <gtest/gtest.h>

#include "abi/ctl_attr.h"

namespace droce::abi {
namespace {

TEST(CtlAttr, EveryFieldRoundTrips) {
  QpAttr a;
  a.qp_state = QpState::rts;
  a.cur_qp_state = QpState::rtr;
  a.path_mtu = PathMtu::mtu4096;
  a.path_mig_state = MigState::armed;
  a.qkey = 0x11111111;
  a.rq_psn = 0xabcdef;
  a.sq_psn = 0x123456;
  a.dest_qp_num = 0x77;
  a.qp_access_flags = kAccessRemoteWrite | kAccessLocalWrite;
  a.cap = {1, 2, 3, 4, 5};
  a.pkey_index = 6;
  a.en_sqd_async_notify = 1;
  a.max_rd_atomic = 7;
  a.max_dest_rd_atomic = 8;
  a.min_rnr_timer = 9;
  a.port_num = 1;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 6;
  a.rate_limit = 1000;
  a.ah_attr.dgid[15] = 9;
  a.ah_attr.sgid_index = 2;
  a.ah_attr.hop_limit = 3;
  a.ah_attr.traffic_class = 4;
  a.ah_attr.flow_label = 0x12345;
  a.ah_attr.sl = 5;
  abi::ctl::WireQpAttr w;
  to_wire(a, &w);
  QpAttr b;
  ASSERT_TRUE(from_wire(w, &b));
  EXPECT_EQ(b.qp_state, a.qp_state);
  EXPECT_EQ(b.cur_qp_state, a.cur_qp_state);
  EXPECT_EQ(b.path_mtu, a.path_mtu);
  EXPECT_EQ(b.path_mig_state, a.path_mig_state);
  EXPECT_EQ(b.qkey, a.qkey);
  EXPECT_EQ(b.rq_psn, a.rq_psn);
  EXPECT_EQ(b.sq_psn, a.sq_psn);
  EXPECT_EQ(b.dest_qp_num, a.dest_qp_num);
  EXPECT_EQ(b.qp_access_flags, a.qp_access_flags);
  EXPECT_EQ(b.cap.max_send_wr, 1u);
  EXPECT_EQ(b.cap.max_inline_data, 5u);
  EXPECT_EQ(b.pkey_index, 6);
  EXPECT_EQ(b.max_rd_atomic, 7);
  EXPECT_EQ(b.max_dest_rd_atomic, 8);
  EXPECT_EQ(b.min_rnr_timer, 9);
  EXPECT_EQ(b.timeout, 14);
  EXPECT_EQ(b.retry_cnt, 7);
  EXPECT_EQ(b.rnr_retry, 6);
  EXPECT_EQ(b.rate_limit, 1000u);
  EXPECT_EQ(b.ah_attr.dgid, a.ah_attr.dgid);
  EXPECT_EQ(b.ah_attr.sgid_index, 2);
  EXPECT_EQ(b.ah_attr.hop_limit, 3);
  EXPECT_EQ(b.ah_attr.traffic_class, 4);
  EXPECT_EQ(b.ah_attr.flow_label, 0x12345u);
  EXPECT_EQ(b.ah_attr.sl, 5);
}

TEST(CtlAttr, OutOfRangeEnumsAreRefused) {
  abi::ctl::WireQpAttr w{};
  QpAttr b;
  ASSERT_TRUE(from_wire(w, &b));
  w.qp_state = 7;
  EXPECT_FALSE(from_wire(w, &b));
  w.qp_state = 0;
  w.path_mtu = 6;
  EXPECT_FALSE(from_wire(w, &b));
  w.path_mtu = 5;
  w.path_mig_state = 3;
  EXPECT_FALSE(from_wire(w, &b));
}

}  // namespace
}  // namespace droce::abi
