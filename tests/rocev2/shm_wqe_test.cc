// Shared-queue entries: round trips, and every field an untrusted client
// writes checked before the engine sees it, never read past the entry.

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "rocev2/shm_wqe.h"
#include "tests/test_support.h"

namespace droce::rocev2 {
namespace {

using core::abi::send_wqe_size;
using core::abi::SendWqeHeader;

TEST(ShmWqe, SendWqeRoundTrips) {
  SendWr w;
  w.wr_id = 0x1122334455667788;
  w.opcode = WrOpcode::rdma_write_with_imm;
  w.send_flags = kSendSignaled | kSendSolicited;
  w.imm_data = 0xdeadbeef;
  w.remote_addr = 0x7f0000001000;
  w.rkey = 0xabcd01;
  w.num_sge = 3;
  for (uint32_t i = 0; i < 3; ++i) w.sg_list[i] = {0x1000 * (i + 1), 100 + i, 0x500 + i};
  std::vector<uint8_t> entry(send_wqe_size(4, 64));
  EXPECT_EQ(entry.size() % 64, 0u);
  ASSERT_EQ(encode_send_wqe(w, {}, entry), sizeof(SendWqeHeader) + 3 * 16);
  SendWr got;
  ASSERT_EQ(decode_send_wqe(entry, {4, 64}, &got), WqeError::ok);
  EXPECT_EQ(got.wr_id, w.wr_id);
  EXPECT_EQ(got.opcode, w.opcode);
  EXPECT_EQ(got.send_flags, w.send_flags);
  EXPECT_EQ(got.imm_data, w.imm_data);
  EXPECT_EQ(got.remote_addr, w.remote_addr);
  EXPECT_EQ(got.rkey, w.rkey);
  ASSERT_EQ(got.num_sge, 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(got.sg_list[i].addr, w.sg_list[i].addr);
    EXPECT_EQ(got.sg_list[i].length, w.sg_list[i].length);
    EXPECT_EQ(got.sg_list[i].lkey, w.sg_list[i].lkey);
  }
}

TEST(ShmWqe, InlineDataStaysInTheEntryAndIsBounded) {
  SendWr w;
  w.opcode = WrOpcode::send;
  w.send_flags = kSendInline;
  std::vector<uint8_t> data(40, 0x7e);
  std::vector<uint8_t> entry(send_wqe_size(1, 64));
  ASSERT_NE(encode_send_wqe(w, data, entry), 0u);
  SendWr got;
  ASSERT_EQ(decode_send_wqe(entry, {1, 64}, &got), WqeError::ok);
  ASSERT_EQ(got.num_sge, 1u);
  EXPECT_EQ(got.sg_list[0].length, 40u);
  EXPECT_EQ(reinterpret_cast<const uint8_t*>(got.sg_list[0].addr), entry.data() + sizeof(SendWqeHeader));
  // Expect: more inline than the QP was granted is refused, even if the entry holds it.
  EXPECT_EQ(decode_send_wqe(entry, {1, 32}, &got), WqeError::inline_too_long);
}

TEST(ShmWqe, HostileFieldsAreRefusedWithTheirReason) {
  std::vector<uint8_t> entry(send_wqe_size(2, 0));
  SendWr w;
  w.num_sge = 2;
  ASSERT_NE(encode_send_wqe(w, {}, entry), 0u);
  SendWr got;
  auto with = [&](auto edit) {
    std::vector<uint8_t> e = entry;
    SendWqeHeader h;
    std::memcpy(&h, e.data(), sizeof h);
    edit(h);
    std::memcpy(e.data(), &h, sizeof h);
    return e;
  };
  EXPECT_EQ(decode_send_wqe(with([](SendWqeHeader& h) { h.opcode = 8; }), {2, 0}, &got), WqeError::bad_opcode);
  EXPECT_EQ(decode_send_wqe(with([](SendWqeHeader& h) { h.opcode = 0xff; }), {2, 0}, &got), WqeError::bad_opcode);
  EXPECT_EQ(decode_send_wqe(with([](SendWqeHeader& h) { h.num_sge = 3; }), {2, 0}, &got), WqeError::too_many_sge);
  EXPECT_EQ(decode_send_wqe(with([](SendWqeHeader& h) { h.num_sge = 0xffff; }), {0xffff, 0}, &got),
            WqeError::too_many_sge);
  EXPECT_EQ(decode_send_wqe(with([](SendWqeHeader& h) { h.send_flags = 1u << 20; }), {2, 0}, &got),
            WqeError::bad_flags);
  EXPECT_EQ(decode_send_wqe(with([](SendWqeHeader& h) { h.send_flags = kSendInline; h.inline_len = 1u << 30; }),
                            {2, 1u << 31}, &got),
            WqeError::short_entry);
  EXPECT_EQ(decode_send_wqe(std::span<const uint8_t>(entry.data(), 63), {2, 0}, &got), WqeError::short_entry);
  // A QP granted 2 SGEs whose entry is cut to hold 1: refused, not read past.
  std::vector<uint8_t> cut(entry.begin(), entry.begin() + sizeof(SendWqeHeader) + 16);
  EXPECT_EQ(decode_send_wqe(cut, {2, 0}, &got), WqeError::short_entry);
}

TEST(ShmWqe, RandomGarbageNeverReadsPastTheEntry) {
  const uint64_t seed = test::test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    // Exact-size heap buffers: AddressSanitizer sees any read past them.
    std::vector<uint8_t> e(rng() % 200);
    for (auto& b : e) b = uint8_t(rng());
    if (e.size() >= 64 && rng() % 2) {
      // A plausible header, sometimes: known flags, a small SGE count and inline length.
      e[56] = uint8_t(rng() % 10);
      e[52] &= 0x0f;
      e[53] = e[54] = e[55] = 0;
      e[58] = uint8_t(rng() % 4);
      e[59] = 0;
      e[60] = uint8_t(rng() % 64);
      e[61] = e[62] = e[63] = 0;
    }
    SendWr s;
    RecvWr r;
    accepted += decode_send_wqe(e, {uint32_t(rng() % 8), uint32_t(rng() % 128)}, &s) == WqeError::ok;
    (void)decode_recv_wqe(e, {uint32_t(rng() % 8), 0}, &r);
  }
  EXPECT_GT(accepted, 0) << "the generator never produced a valid entry: the test tests nothing";
}

TEST(ShmWqe, RecvWqeAndCqeRoundTrip) {
  RecvWr w;
  w.wr_id = 9;
  w.num_sge = 2;
  w.sg_list[0] = {1, 2, 3};
  w.sg_list[1] = {4, 5, 6};
  std::vector<uint8_t> entry(core::abi::recv_wqe_size(2));
  ASSERT_EQ(encode_recv_wqe(w, entry), entry.size());
  RecvWr got;
  ASSERT_EQ(decode_recv_wqe(entry, {2, 0}, &got), WqeError::ok);
  EXPECT_EQ(got.wr_id, 9u);
  EXPECT_EQ(got.sg_list[1].lkey, 6u);
  EXPECT_EQ(decode_recv_wqe(entry, {1, 0}, &got), WqeError::too_many_sge);

  Completion c;
  c.wr_id = 77;
  c.status = WcStatus::rem_access_err;
  c.opcode = WcOpcode::recv_rdma_with_imm;
  c.byte_len = 1234;
  c.imm_data = 0xfeed;
  c.qp_num = 0x11;
  c.src_qp = 0x22;
  c.wc_flags = kWcWithImm | kWcGrh;
  core::abi::Cqe e;
  encode_cqe(c, &e);
  const Completion d = decode_cqe(e);
  EXPECT_EQ(d.wr_id, c.wr_id);
  EXPECT_EQ(d.status, c.status);
  EXPECT_EQ(d.opcode, c.opcode);
  EXPECT_EQ(d.byte_len, c.byte_len);
  EXPECT_EQ(d.imm_data, c.imm_data);
  EXPECT_EQ(d.qp_num, c.qp_num);
  EXPECT_EQ(d.src_qp, c.src_qp);
  EXPECT_EQ(d.wc_flags, c.wc_flags);
}

}  // namespace
}  // namespace droce::rocev2
