// rocev2/qp.h: the engine's send queue slots.

#include <gtest/gtest.h>

#include "rocev2/qp.h"

namespace droce::rocev2 {
namespace {

// Engine::post_send reuses SQ slots with SendWqe::reset, which writes only the SGEs in use.
TEST(ShmWqe, AReusedSendSlotKeepsNothingOfTheLastWqe) {
  SendWqe slot;
  slot.wr.opcode = WrOpcode::rdma_read;
  slot.wr.num_sge = 2;
  slot.wr.sg_list[0] = {1, 2, 3};
  slot.wr.sg_list[1] = {4, 5, 6};
  slot.ud_av.hop_limit = 1;
  slot.ud_av.vlan_id = 3;
  slot.length = slot.npackets = slot.first_psn = slot.last_psn = 9;
  slot.psn_assigned = slot.resp_complete = slot.resp_gap_seen = slot.has_local_error = true;
  slot.resp_next_psn = slot.resp_bytes = slot.inline_off = 9;
  slot.local_error = WcStatus::rem_access_err;

  SendWr wr;
  wr.wr_id = 42;
  wr.opcode = WrOpcode::send_with_imm;
  wr.send_flags = kSendSignaled;
  wr.imm_data = 7;
  wr.remote_addr = 0x1000;
  wr.rkey = 5;
  wr.num_sge = 1;
  wr.sg_list[0] = {0x2000, 64, 8};
  slot.reset(wr);

  // Expect: the WR's fields, its one SGE, and every other field as a new SendWqe's.
  EXPECT_EQ(slot.wr.wr_id, 42u);
  EXPECT_EQ(slot.wr.opcode, WrOpcode::send_with_imm);
  EXPECT_EQ(slot.wr.send_flags, kSendSignaled);
  EXPECT_EQ(slot.wr.imm_data, 7u);
  EXPECT_EQ(slot.wr.remote_addr, 0x1000u);
  EXPECT_EQ(slot.wr.rkey, 5u);
  EXPECT_EQ(slot.wr.num_sge, 1u);
  EXPECT_EQ(slot.wr.sg_list[0].addr, 0x2000u);
  EXPECT_EQ(slot.wr.sg_list[0].length, 64u);
  EXPECT_EQ(slot.wr.sg_list[0].lkey, 8u);
  const SendWqe fresh;
  EXPECT_EQ(slot.ud_av.hop_limit, fresh.ud_av.hop_limit);
  EXPECT_EQ(slot.ud_av.vlan_id, fresh.ud_av.vlan_id);
  EXPECT_EQ(slot.length, 0u);
  EXPECT_EQ(slot.npackets, 0u);
  EXPECT_EQ(slot.first_psn, 0u);
  EXPECT_EQ(slot.last_psn, 0u);
  EXPECT_FALSE(slot.psn_assigned);
  EXPECT_FALSE(slot.resp_complete);
  EXPECT_EQ(slot.resp_next_psn, 0u);
  EXPECT_EQ(slot.resp_bytes, 0u);
  EXPECT_EQ(slot.inline_off, 0u);
  EXPECT_FALSE(slot.resp_gap_seen);
  EXPECT_FALSE(slot.has_local_error);
  EXPECT_EQ(slot.local_error, WcStatus::success);
}

}  // namespace
}  // namespace droce::rocev2
