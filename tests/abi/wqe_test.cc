// Shared-queue entries: round trips, and every field an untrusted client
// writes checked before the engine sees it, never read past the entry.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "abi/wqe.h"
#include "tests/test_support.h"

namespace droce::abi {
namespace {

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

// The provider's form: a header, and a scatter list read where it lies.
TEST(ShmWqe, AHeaderAndAScatterListAreWrittenAsTheyAre) {
  SendWr w;
  w.wr_id = 9;
  w.opcode = WrOpcode::rdma_write;
  w.send_flags = kSendSignaled;
  w.remote_addr = 0x5000;
  w.rkey = 0x77;
  const Sge list[3] = {{0x1000, 10, 1}, {0x2000, 20, 2}, {0x3000, 30, 3}};
  std::vector<uint8_t> entry(send_wqe_size(4, 0));
  ASSERT_EQ(encode_send_wqe(send_wqe_header(w), {list, 3}, entry), sizeof(SendWqeHeader) + 3 * 16);
  SendWr got;
  ASSERT_EQ(decode_send_wqe(entry, {4, 0}, &got), WqeError::ok);
  EXPECT_EQ(got.wr_id, 9u);
  EXPECT_EQ(got.opcode, WrOpcode::rdma_write);
  EXPECT_EQ(got.remote_addr, 0x5000u);
  EXPECT_EQ(got.rkey, 0x77u);
  ASSERT_EQ(got.num_sge, 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(got.sg_list[i].addr, list[i].addr);
    EXPECT_EQ(got.sg_list[i].length, list[i].length);
    EXPECT_EQ(got.sg_list[i].lkey, list[i].lkey);
  }
  // Expect: a list longer than the entry holds, or than kMaxSge, writes nothing.
  std::vector<uint8_t> small(sizeof(SendWqeHeader) + 2 * 16, 0xee);
  EXPECT_EQ(encode_send_wqe(send_wqe_header(w), {list, 3}, small), 0u);
  EXPECT_TRUE(std::all_of(small.begin(), small.end(), [](uint8_t b) { return b == 0xee; }));
  std::vector<Sge> many(kMaxSge + 1);
  std::vector<uint8_t> huge(send_wqe_size(kMaxSge + 1, 0));
  EXPECT_EQ(encode_send_wqe(send_wqe_header(w), {many.data(), kMaxSge + 1}, huge), 0u);
}

// Inline: the bytes the list points at are gathered straight into the entry.
TEST(ShmWqe, InlineBytesAreGatheredFromTheScatterList) {
  const std::vector<uint8_t> a(10, 0x11), c(30, 0x33);
  const Sge list[3] = {{reinterpret_cast<uint64_t>(a.data()), 10, 1}, {0, 0, 2},
                       {reinterpret_cast<uint64_t>(c.data()), 30, 3}};
  SendWr w;
  w.wr_id = 7;
  w.opcode = WrOpcode::send_with_imm;
  w.send_flags = kSendInline | kSendSignaled;
  w.imm_data = 0x01020304;
  std::vector<uint8_t> entry(send_wqe_size(1, 64));
  ASSERT_EQ(encode_send_wqe(send_wqe_header(w), {list, 3}, entry), sizeof(SendWqeHeader) + 40);
  SendWr got;
  ASSERT_EQ(decode_send_wqe(entry, {1, 64}, &got), WqeError::ok);
  EXPECT_EQ(got.wr_id, 7u);
  EXPECT_EQ(got.opcode, WrOpcode::send_with_imm);
  EXPECT_EQ(got.send_flags, kSendInline | kSendSignaled);
  EXPECT_EQ(got.imm_data, 0x01020304u);
  ASSERT_EQ(got.num_sge, 1u);
  ASSERT_EQ(got.sg_list[0].length, 40u);
  const uint8_t* in = reinterpret_cast<const uint8_t*>(got.sg_list[0].addr);
  EXPECT_TRUE(std::equal(a.begin(), a.end(), in));
  EXPECT_TRUE(std::equal(c.begin(), c.end(), in + 10));
  // Expect: 72 inline bytes do not fit an entry made for 64; nothing is written.
  const std::vector<uint8_t> big(72, 0x44);
  const Sge one{reinterpret_cast<uint64_t>(big.data()), 72, 0};
  std::vector<uint8_t> clean(entry.size(), 0xee);
  EXPECT_EQ(encode_send_wqe(send_wqe_header(w), {&one, 1}, clean), 0u);
  EXPECT_TRUE(std::all_of(clean.begin(), clean.end(), [](uint8_t b) { return b == 0xee; }));
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
  EXPECT_EQ(decode_send_wqe(with([](SendWqeHeader& h) { h.opcode = 10; }), {2, 0}, &got), WqeError::bad_opcode);  // TSO
  // BIND_MW (8) is known since memory windows: its fields come back from the header.
  const auto bind = with([](SendWqeHeader& h) {
    h.opcode = 8;
    h.num_sge = 0;
    h.imm_or_inv = 0x1207;
    h.rkey = 0x1208;
    h.remote_addr = 0x9000;
    h.compare_add = 512;
    h.swap = uint64_t{0x3401} | uint64_t{kAccessRemoteRead} << 32;
  });
  ASSERT_EQ(decode_send_wqe(bind, {2, 0}, &got), WqeError::ok);
  EXPECT_EQ(got.opcode, WrOpcode::bind_mw);
  EXPECT_EQ(got.invalidate_rkey, 0x1207u);
  EXPECT_EQ(got.rkey, 0x1208u);
  EXPECT_EQ(got.remote_addr, 0x9000u);
  EXPECT_EQ(got.bind_length, 512u);
  EXPECT_EQ(got.bind_mr_lkey, 0x3401u);
  EXPECT_EQ(got.bind_access, uint32_t(kAccessRemoteRead));
  // IBA 1.5: FLUSH (14) carries its length in compare_add, type | level << 8 in swap; ATOMIC
  // WRITE (15) its 8 bytes in compare_add. Both round-trip through the encoder.
  SendWr fl;
  fl.wr_id = 5;
  fl.opcode = WrOpcode::flush;
  fl.remote_addr = 0x7000;
  fl.rkey = 0x99;
  fl.compare_add = 4096;
  fl.flush_type = 1;
  fl.flush_level = 1;
  std::vector<uint8_t> fe(128);
  ASSERT_NE(encode_send_wqe(fl, {}, fe), 0u);
  ASSERT_EQ(decode_send_wqe(fe, {2, 0}, &got), WqeError::ok);
  EXPECT_EQ(got.opcode, WrOpcode::flush);
  EXPECT_EQ(got.compare_add, 4096u);
  EXPECT_EQ(got.flush_type, 1);
  EXPECT_EQ(got.flush_level, 1);
  EXPECT_EQ(got.num_sge, 0u);
  SendWr aw;
  aw.opcode = WrOpcode::atomic_write;
  aw.compare_add = 0x0807060504030201ull;
  ASSERT_NE(encode_send_wqe(aw, {}, fe), 0u);
  ASSERT_EQ(decode_send_wqe(fe, {2, 0}, &got), WqeError::ok);
  EXPECT_EQ(got.opcode, WrOpcode::atomic_write);
  EXPECT_EQ(got.compare_add, 0x0807060504030201ull);
  EXPECT_EQ(decode_send_wqe(with([](SendWqeHeader& h) { h.opcode = 13; }), {2, 0}, &got), WqeError::bad_opcode);
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

// What droced copies out of a ring: the header, then the bytes its copy says are used.
std::vector<uint8_t> used_part(const std::vector<uint8_t>& entry, uint32_t header, bool send) {
  std::vector<uint8_t> out(entry.size(), 0xa5);  // what the scratch held before
  const size_t h = std::min<size_t>(header, entry.size());
  std::copy_n(entry.begin(), h, out.begin());
  const uint32_t used = send ? send_wqe_used(std::span(out.data(), h)) : recv_wqe_used(std::span(out.data(), h));
  std::copy(entry.begin() + long(h), entry.begin() + long(std::max<size_t>(h, std::min<size_t>(used, entry.size()))),
            out.begin() + long(h));
  return out;
}

TEST(ShmWqe, TheUsedBytesAreTheHeaderAndWhatItNames) {
  SendWr w;
  w.num_sge = 3;
  std::vector<uint8_t> entry(send_wqe_size(4, 220));
  ASSERT_NE(encode_send_wqe(w, {}, entry), 0u);
  EXPECT_EQ(send_wqe_used(entry), sizeof(SendWqeHeader) + 3 * 16);
  w.send_flags = kSendInline;
  const std::vector<uint8_t> data(40, 1);
  ASSERT_NE(encode_send_wqe(w, data, entry), 0u);
  EXPECT_EQ(send_wqe_used(entry), sizeof(SendWqeHeader) + 40);
  // Expect: a header that claims more than any entry holds says so (the decoder refuses it).
  SendWqeHeader h;
  std::memcpy(&h, entry.data(), sizeof h);
  h.inline_len = 0xffffffff;
  std::memcpy(entry.data(), &h, sizeof h);
  EXPECT_EQ(send_wqe_used(entry), UINT32_MAX);
  EXPECT_EQ(send_wqe_used(std::span(entry.data(), 63)), UINT32_MAX);

  RecvWr r;
  r.num_sge = 2;
  std::vector<uint8_t> rentry(abi::recv_wqe_size(4));
  ASSERT_NE(encode_recv_wqe(r, rentry), 0u);
  EXPECT_EQ(recv_wqe_used(rentry), sizeof(abi::RecvWqeHeader) + 2 * 16);
  EXPECT_EQ(recv_wqe_used(std::span(rentry.data(), 15)), UINT32_MAX);
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
    const WqeLimits sl{uint32_t(rng() % 8), uint32_t(rng() % 128)}, rl{uint32_t(rng() % 8), 0};
    const WqeError se = decode_send_wqe(e, sl, &s), re = decode_recv_wqe(e, rl, &r);
    accepted += se == WqeError::ok;
    // Expect: decoding only the bytes droced copies (the rest of its scratch holds older
    // bytes) gives the same answer as the whole entry.
    const std::vector<uint8_t> sp = used_part(e, sizeof(SendWqeHeader), true);
    SendWr s2;
    ASSERT_EQ(decode_send_wqe(sp, sl, &s2), se) << i;
    if (se == WqeError::ok) {
      ASSERT_EQ(s2.num_sge, s.num_sge) << i;
      const bool inl = (s.send_flags & kSendInline) != 0;
      for (uint32_t k = 0; k < s.num_sge; ++k) {
        EXPECT_EQ(s2.sg_list[k].length, s.sg_list[k].length) << i;
        if (inl) {
          const auto* a = reinterpret_cast<const uint8_t*>(s.sg_list[k].addr);
          const auto* b = reinterpret_cast<const uint8_t*>(s2.sg_list[k].addr);
          EXPECT_TRUE(std::equal(a, a + s.sg_list[k].length, b)) << i;
        } else {
          EXPECT_EQ(s2.sg_list[k].addr, s.sg_list[k].addr) << i;
          EXPECT_EQ(s2.sg_list[k].lkey, s.sg_list[k].lkey) << i;
        }
      }
    }
    const std::vector<uint8_t> rp = used_part(e, sizeof(abi::RecvWqeHeader), false);
    RecvWr r2;
    ASSERT_EQ(decode_recv_wqe(rp, rl, &r2), re) << i;
    if (re == WqeError::ok) {
      ASSERT_EQ(r2.num_sge, r.num_sge) << i;
      for (uint32_t k = 0; k < r.num_sge; ++k) EXPECT_EQ(r2.sg_list[k].addr, r.sg_list[k].addr) << i;
    }
  }
  EXPECT_GT(accepted, 0) << "the generator never produced a valid entry: the test tests nothing";
}

TEST(ShmWqe, RecvWqeAndCqeRoundTrip) {
  RecvWr w;
  w.wr_id = 9;
  w.num_sge = 2;
  w.sg_list[0] = {1, 2, 3};
  w.sg_list[1] = {4, 5, 6};
  std::vector<uint8_t> entry(abi::recv_wqe_size(2));
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
  c.timestamp_ns = 0x0123456789abcdefull;
  abi::Cqe e;
  encode_cqe(c, &e);
  EXPECT_EQ(e.timestamp, c.timestamp_ns);
  const Completion d = decode_cqe(e);
  EXPECT_EQ(d.timestamp_ns, c.timestamp_ns);
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
}  // namespace droce::abi
