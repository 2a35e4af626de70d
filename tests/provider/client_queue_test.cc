// provider/client: a send queue's data path without droced (ClientQueue::push_send, which
// Qp::post_send and so ibv_post_send reach): the errno each bad WR gets and what lands in the
// ring's slot.
#include "provider/client/client.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "abi/queues.h"
#include "abi/shm_ring.h"
#include "abi/wqe.h"

namespace droce::client {
namespace {

// A send ring in private memory, with a consumer standing for droced.
class SendQueueTest : public ::testing::Test {
 protected:
  // A queue granted these limits, its entries entry_size bytes (0: what droced makes for them).
  void make(uint32_t max_wr, uint32_t max_sge, uint32_t max_inline, uint32_t entry_size = 0) {
    g_ = {8, entry_size != 0 ? entry_size : abi::send_wqe_size(max_sge, max_inline)};
    mem_.resize(abi::shm_ring_bytes(g_) + abi::kShmRingAlignment);
    void* p = mem_.data();
    size_t space = mem_.size();
    ring_ = {static_cast<std::byte*>(std::align(abi::kShmRingAlignment, abi::shm_ring_bytes(g_), p, space)),
             abi::shm_ring_bytes(g_)};
    ASSERT_EQ(abi::shm_ring_format(ring_, g_), 0);
    ASSERT_EQ(abi::ShmRingProducer::attach(ring_, g_, &q_.ring), 0);
    ASSERT_EQ(abi::ShmRingConsumer::attach(ring_, g_, &consumer_), 0);
    q_.pending = &pending_;
    q_.max_wr = max_wr;
    q_.max_sge = max_sge;
    q_.max_inline = max_inline;
  }
  // The next WQE droced would read, decoded as droced decodes it.
  abi::WqeError take(abi::SendWr* out) {
    entry_.assign(g_.entry_size, 0);
    if (consumer_.try_pop(entry_.data()) != abi::ShmRingStatus::ok) return abi::WqeError::short_entry;
    return abi::decode_send_wqe(entry_, {q_.max_sge, q_.max_inline}, out);
  }

  abi::ShmRingGeometry g_;
  std::vector<std::byte> mem_;
  std::span<std::byte> ring_;
  uint32_t pending_ = 0;
  ClientQueue q_;
  abi::ShmRingConsumer consumer_;
  std::vector<uint8_t> entry_;
};

TEST_F(SendQueueTest, AWrLandsInTheSlotAsDrocedReadsIt) {
  make(4, 2, 64);
  abi::SendWr w;
  w.wr_id = 5;
  w.opcode = abi::WrOpcode::rdma_write;
  w.send_flags = abi::kSendSignaled;
  w.remote_addr = 0x9000;
  w.rkey = 3;
  w.num_sge = 2;
  w.sg_list[0] = {0x1000, 8, 1};
  w.sg_list[1] = {0x2000, 16, 2};
  ASSERT_EQ(q_.push_send(w), 0);
  abi::SendWr got;
  ASSERT_EQ(take(&got), abi::WqeError::ok);
  EXPECT_EQ(got.wr_id, 5u);
  EXPECT_EQ(got.opcode, abi::WrOpcode::rdma_write);
  EXPECT_EQ(got.remote_addr, 0x9000u);
  ASSERT_EQ(got.num_sge, 2u);
  EXPECT_EQ(got.sg_list[1].addr, 0x2000u);
  EXPECT_EQ(got.sg_list[1].length, 16u);

  // Inline: the bytes of every SGE, in order.
  const uint8_t a[3] = {1, 2, 3}, b[2] = {4, 5};
  w.send_flags = abi::kSendInline;
  w.sg_list[0] = {reinterpret_cast<uint64_t>(a), 3, 0};
  w.sg_list[1] = {reinterpret_cast<uint64_t>(b), 2, 0};
  ASSERT_EQ(q_.push_send(w), 0);
  ASSERT_EQ(take(&got), abi::WqeError::ok);
  ASSERT_EQ(got.num_sge, 1u);
  ASSERT_EQ(got.sg_list[0].length, 5u);
  const uint8_t* in = reinterpret_cast<const uint8_t*>(got.sg_list[0].addr);
  EXPECT_EQ(std::vector<uint8_t>(in, in + 5), (std::vector<uint8_t>{1, 2, 3, 4, 5}));
}

TEST_F(SendQueueTest, BadWrsGetTheErrnoOfIbvPostSend) {
  make(2, 2, 64);
  std::vector<uint8_t> data(2048, 7);
  abi::SendWr w;
  w.opcode = abi::WrOpcode::send;
  // More SGEs than the QP has (not inline), or than any WR may have (inline too).
  w.num_sge = 3;
  EXPECT_EQ(q_.push_send(w), -EINVAL);
  w.send_flags = abi::kSendInline;
  w.num_sge = abi::kMaxSge + 1;
  EXPECT_EQ(q_.push_send(w), -EINVAL);
  // Inline: more bytes than max_inline, in one SGE or in several.
  w.num_sge = 1;
  w.sg_list[0] = {reinterpret_cast<uint64_t>(data.data()), 65, 0};
  EXPECT_EQ(q_.push_send(w), -EINVAL);
  w.num_sge = 3;
  for (int i = 0; i < 3; ++i) w.sg_list[i] = {reinterpret_cast<uint64_t>(data.data()), 22, 0};
  EXPECT_EQ(q_.push_send(w), -EINVAL);
  // Expect: a refused WR takes no slot.
  abi::SendWr got;
  EXPECT_EQ(take(&got), abi::WqeError::short_entry);
  // Exactly max_inline in several SGEs goes.
  w.sg_list[2].length = 20;
  EXPECT_EQ(q_.push_send(w), 0);
  ASSERT_EQ(take(&got), abi::WqeError::ok);
  EXPECT_EQ(got.sg_list[0].length, 64u);
  // max_send_wr outstanding: ENOMEM (the ring has 8 slots; the QP was granted 2).
  w.send_flags = 0;
  w.num_sge = 1;
  EXPECT_EQ(q_.push_send(w), 0);
  EXPECT_EQ(q_.push_send(w), 0);
  EXPECT_EQ(q_.push_send(w), -ENOMEM);
}

TEST_F(SendQueueTest, NoWrCarriesMoreThan1024InlineBytes) {
  // Whatever droced grants: a QP granted 2048 inline bytes still posts at most 1024 in a WR.
  make(2, 1, 2048);
  std::vector<uint8_t> data(2048, 9);
  abi::SendWr w;
  w.opcode = abi::WrOpcode::send;
  w.send_flags = abi::kSendInline;
  w.num_sge = 1;
  w.sg_list[0] = {reinterpret_cast<uint64_t>(data.data()), 1025, 0};
  EXPECT_EQ(q_.push_send(w), -EINVAL);
  w.sg_list[0].length = 1024;
  EXPECT_EQ(q_.push_send(w), 0);
}

TEST_F(SendQueueTest, AWqeTheEntryCannotHoldIsRefused) {
  // A QP granted 64 inline bytes whose entries hold 32 (droced sized them): EINVAL, no slot.
  make(2, 1, 64, sizeof(abi::SendWqeHeader) + 32);
  std::vector<uint8_t> data(64, 1);
  abi::SendWr w;
  w.opcode = abi::WrOpcode::send;
  w.send_flags = abi::kSendInline;
  w.num_sge = 1;
  w.sg_list[0] = {reinterpret_cast<uint64_t>(data.data()), 64, 0};
  EXPECT_EQ(q_.push_send(w), -EINVAL);
  abi::SendWr got;
  EXPECT_EQ(take(&got), abi::WqeError::short_entry);
}

}  // namespace
}  // namespace droce::client
