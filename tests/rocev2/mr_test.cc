// Memory regions: keys, stale keys, bounds and access checks (IBA 10.6).

#include <gtest/gtest.h>

#include <set>

#include "rocev2/mr.h"

namespace droce::rocev2 {
namespace {

TEST(MrTable, EveryRegistrationOfAnIndexGetsANewKeyByte) {
  MrTable t(8);
  std::vector<uint8_t> buf(4096);
  Mr* mr = nullptr;
  std::set<uint32_t> keys;
  for (int i = 0; i < 300; ++i) {
    ASSERT_EQ(t.reg(1, 0x1000, 4096, buf.data(), kAccessLocalWrite, &mr), 0);
    const uint32_t key = mr->lkey;
    EXPECT_EQ(mr->rkey, key);
    EXPECT_NE(key >> 8, 0u) << "index 0 is never handed out";
    ASSERT_EQ(t.dereg(key), 0);
    // Expect: a freed key is refused, and the same key never comes back soon.
    EXPECT_EQ(t.find(key), nullptr);
    if (i < 255) {
      EXPECT_TRUE(keys.insert(key).second) << "key 0x" << std::hex << key << " reused";
    }
  }
  EXPECT_EQ(t.dereg(0x12345), -EINVAL);
}

TEST(MrTable, FullTableIsENOMEMAndBadFlagsAreEINVAL) {
  MrTable t(3);  // indexes 1 and 2 usable
  std::vector<uint8_t> buf(64);
  Mr* mr = nullptr;
  ASSERT_EQ(t.reg(1, 0, 64, buf.data(), 0, &mr), 0);
  ASSERT_EQ(t.reg(1, 0, 64, buf.data(), 0, &mr), 0);
  EXPECT_EQ(t.reg(1, 0, 64, buf.data(), 0, &mr), -ENOMEM);
  MrTable u(8);
  // IBA 10.6.3.1: remote write or atomic need local write.
  EXPECT_EQ(u.reg(1, 0, 64, buf.data(), kAccessRemoteWrite, &mr), -EINVAL);
  EXPECT_EQ(u.reg(1, 0, 64, buf.data(), kAccessRemoteAtomic, &mr), -EINVAL);
  EXPECT_EQ(u.reg(1, 0, 64, buf.data(), kAccessRemoteRead, &mr), 0);
  EXPECT_EQ(u.reg(1, 0, 64, buf.data(), 1u << 30, &mr), -EINVAL);
  EXPECT_EQ(u.reg(1, ~uint64_t{0} - 10, 64, buf.data(), 0, &mr), -EINVAL) << "range wraps";
  EXPECT_EQ(u.reg(1, 0, 64, nullptr, 0, &mr), -EINVAL);
}

TEST(MrTable, BoundsChecksAtBothEndsWithoutOverflow) {
  MrTable t(8);
  std::vector<uint8_t> buf(100);
  Mr* mr = nullptr;
  ASSERT_EQ(t.reg(1, 1000, 100, buf.data(), kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead, &mr), 0);
  const uint32_t k = mr->lkey;
  Mr* out = nullptr;
  EXPECT_EQ(t.check_local(k, 1, 1000, 100, 0, &out), MrCheck::ok);
  EXPECT_EQ(t.check_local(k, 1, 1099, 1, 0, &out), MrCheck::ok);
  EXPECT_EQ(t.check_local(k, 1, 1100, 0, 0, &out), MrCheck::ok);
  EXPECT_EQ(t.check_local(k, 1, 1100, 1, 0, &out), MrCheck::out_of_bounds);
  EXPECT_EQ(t.check_local(k, 1, 999, 1, 0, &out), MrCheck::out_of_bounds);
  EXPECT_EQ(t.check_local(k, 1, 1000, 101, 0, &out), MrCheck::out_of_bounds);
  EXPECT_EQ(t.check_local(k, 1, 1050, ~uint64_t{0}, 0, &out), MrCheck::out_of_bounds) << "length overflow";
  EXPECT_EQ(t.check_local(k, 1, ~uint64_t{0}, 2, 0, &out), MrCheck::out_of_bounds) << "address overflow";
  EXPECT_EQ(t.check_local(k, 2, 1000, 1, 0, &out), MrCheck::wrong_pd);
  EXPECT_EQ(t.check_local(k ^ 1, 1, 1000, 1, 0, &out), MrCheck::bad_key);
  EXPECT_EQ(t.check_remote(k, 1, 1000, 8, kAccessRemoteAtomic, &out), MrCheck::no_access);
  EXPECT_EQ(t.check_remote(k, 1, 1000, 8, kAccessRemoteWrite, &out), MrCheck::ok);
  EXPECT_EQ(mr_host(*out, 1010), buf.data() + 10);
}

TEST(MrTable, InvalidateStopsRemoteUseOnly) {
  MrTable t(8);
  std::vector<uint8_t> buf(64);
  Mr* mr = nullptr;
  Mr* ordinary = nullptr;
  ASSERT_EQ(t.reg(1, 0, 64, buf.data(), kAccessLocalWrite | kAccessRemoteRead, &ordinary), 0);
  EXPECT_EQ(t.invalidate(ordinary->rkey, 1), -EINVAL) << "an ordinary region is not invalidatable";
  ASSERT_EQ(t.reg(1, 0, 64, buf.data(), kAccessLocalWrite | kAccessRemoteRead, &mr, true), 0);
  Mr* out = nullptr;
  EXPECT_EQ(t.invalidate(mr->rkey, 2), -EINVAL) << "another PD may not invalidate it";
  ASSERT_EQ(t.invalidate(mr->rkey, 1), 0);
  EXPECT_EQ(t.check_remote(mr->rkey, 1, 0, 8, kAccessRemoteRead, &out), MrCheck::bad_key);
  EXPECT_EQ(t.check_local(mr->lkey, 1, 0, 8, 0, &out), MrCheck::ok);
}

TEST(MrTable, ReregKeepsTheKeysAndTakesTheNewRangePdAndAccess) {
  MrTable t(8);
  std::vector<uint8_t> a(4096), b(8192);
  Mr* mr = nullptr;
  ASSERT_EQ(t.reg(1, 0x1000, 4096, a.data(), kAccessLocalWrite | kAccessRemoteWrite, &mr), 0);
  const uint32_t key = mr->lkey;
  Mr* out = nullptr;
  ASSERT_EQ(t.rereg(key, 2, 0x8000, 8192, b.data(), kAccessLocalWrite | kAccessRemoteRead), 0);
  // Expect: the same keys; the old range, PD and access no longer pass; the new ones do.
  EXPECT_EQ(t.find(key), mr);
  EXPECT_EQ(mr->rkey, key);
  EXPECT_EQ(t.check_remote(key, 1, 0x1000, 8, kAccessRemoteWrite, &out), MrCheck::wrong_pd);
  EXPECT_EQ(t.check_remote(key, 2, 0x8000, 8, kAccessRemoteWrite, &out), MrCheck::no_access);
  EXPECT_EQ(t.check_remote(key, 2, 0x1000, 8, kAccessRemoteRead, &out), MrCheck::out_of_bounds);
  EXPECT_EQ(t.check_remote(key, 2, 0x8000 + 8184, 8, kAccessRemoteRead, &out), MrCheck::ok);
  EXPECT_EQ(mr->host, b.data());
  // Refusals leave it as it was: remote write without local write, an unknown key.
  EXPECT_EQ(t.rereg(key, 2, 0x8000, 8192, b.data(), kAccessRemoteWrite), -EINVAL);
  EXPECT_EQ(t.rereg(key + 1, 2, 0x8000, 8192, b.data(), kAccessLocalWrite), -EINVAL);
  EXPECT_EQ(mr->access, kAccessLocalWrite | kAccessRemoteRead);
  ASSERT_EQ(t.dereg(key), 0);
  EXPECT_EQ(t.rereg(key, 2, 0x8000, 8192, b.data(), kAccessLocalWrite), -EINVAL);
}

TEST(MrTable, WindowBindRules) {
  MrTable t(16);
  std::vector<uint8_t> buf(256);
  Mr* mr = nullptr;
  ASSERT_EQ(t.reg(1, 0x1000, 256, buf.data(), kAccessLocalWrite | kAccessMwBind, &mr), 0);
  Mr* other = nullptr;
  ASSERT_EQ(t.reg(2, 0x1000, 256, buf.data(), kAccessLocalWrite | kAccessMwBind, &other), 0);
  uint32_t w1 = 0, w2 = 0;
  ASSERT_EQ(t.alloc_mw(1, MwType::type1, &w1), 0);
  ASSERT_EQ(t.alloc_mw(1, MwType::type2, &w2), 0);
  EXPECT_EQ(t.alloc_mw(1, static_cast<MwType>(3), &w2), -EINVAL);
  const uint32_t rw = kAccessRemoteWrite | kAccessRemoteRead;
  Mr* out = nullptr;
  // Expect: an unbound window lets nothing through, and a window key is never an L_Key.
  EXPECT_EQ(t.check_remote(w1, 1, 0x1000, 1, kAccessRemoteRead, &out), MrCheck::bad_key);
  EXPECT_EQ(t.check_local(w1, 1, 0x1000, 1, 0, &out), MrCheck::bad_key);
  EXPECT_EQ(t.dereg(w1), -EINVAL) << "a window is not deregistered as a region";
  EXPECT_EQ(t.bind_mw({w1, w1 + 1, mr->lkey, 0x1000, 16, rw | kAccessZeroBased}, 1, 5), -EINVAL) << "o10-36.2.2";
  EXPECT_EQ(t.bind_mw({w2, w2 + 1, mr->lkey, 0x1000, 0, rw}, 1, 5), -EINVAL) << "o10-37.2.40";
  EXPECT_EQ(t.bind_mw({w2, w2 + 1, mr->lkey, 0x10f0, 17, rw}, 1, 5), -EINVAL) << "C10-75: past the MR";
  EXPECT_EQ(t.bind_mw({w2, w2 + 1, mr->lkey, 0xff0, 17, rw}, 1, 5), -EINVAL) << "C10-75: before the MR";
  EXPECT_EQ(t.bind_mw({w2, w2 + 1, other->lkey, 0x1000, 16, rw}, 1, 5), -EINVAL) << "another PD's MR";
  EXPECT_EQ(t.bind_mw({w2, w2 + 1, mr->lkey, 0x1000, 16, rw}, 2, 5), -EINVAL) << "C10-72: a QP of another PD";
  EXPECT_EQ(t.bind_mw({w2 + 1, w2 + 2, mr->lkey, 0x1000, 16, rw}, 1, 5), -EINVAL) << "a stale window key";
  EXPECT_EQ(t.bind_mw({w2, w2 + 1, mr->lkey, 0x1000, 16, rw | kAccessRelaxedOrdering}, 1, 5), -EINVAL);
  // A good bind: the new tag, the range, type 2's QP.
  ASSERT_EQ(t.bind_mw({w2, (w2 & ~0xffu) | 0x42, mr->lkey, 0x1010, 16, rw}, 1, 5), 0);
  const uint32_t k = (w2 & ~0xffu) | 0x42;
  EXPECT_EQ(t.check_remote(w2, 1, 0x1010, 16, kAccessRemoteRead, &out, 5), MrCheck::bad_key);
  EXPECT_EQ(t.check_remote(k, 1, 0x1010, 16, kAccessRemoteRead, &out, 5), MrCheck::ok);
  EXPECT_EQ(mr_host(*out, 0x1010), buf.data() + 0x10);
  EXPECT_EQ(t.check_remote(k, 1, 0x1010, 17, kAccessRemoteRead, &out, 5), MrCheck::out_of_bounds);
  EXPECT_EQ(t.check_remote(k, 1, 0x1010, 16, kAccessRemoteAtomic, &out, 5), MrCheck::no_access);
  EXPECT_NE(t.check_remote(k, 1, 0x1010, 16, kAccessRemoteRead, &out, 6), MrCheck::ok) << "another QP";
  EXPECT_EQ(t.dereg(mr->lkey), -EINVAL) << "IBA 10.6.7.2.6: a window is bound to it";
  EXPECT_EQ(t.invalidate(k, 1, 6), -EINVAL) << "a SEND with invalidate on another QP";
  EXPECT_EQ(t.invalidate(w1, 1), -EINVAL) << "o10-37.2.26: type 1 is never invalidated";
  ASSERT_EQ(t.invalidate(k, 1, 5), 0);
  EXPECT_EQ(t.invalidate(k, 1), -EINVAL) << "not bound any more";
  EXPECT_EQ(t.check_remote(k, 1, 0x1010, 16, kAccessRemoteRead, &out, 5), MrCheck::bad_key);
  EXPECT_EQ(t.dereg(mr->lkey), 0);
  EXPECT_EQ(t.dealloc_mw(k), 0);
  EXPECT_EQ(t.dealloc_mw(w1), 0);
  EXPECT_EQ(t.find(k), nullptr);
}

TEST(MrTable, AGoneQpUnbindsItsType2WindowsOnly) {
  MrTable t(16);
  std::vector<uint8_t> buf(64);
  Mr* mr = nullptr;
  ASSERT_EQ(t.reg(1, 0x1000, 64, buf.data(), kAccessLocalWrite | kAccessMwBind, &mr), 0);
  uint32_t mine = 0, other = 0;
  ASSERT_EQ(t.alloc_mw(1, MwType::type2, &mine), 0);
  ASSERT_EQ(t.alloc_mw(1, MwType::type2, &other), 0);
  ASSERT_EQ(t.bind_mw({mine, mine + 1, mr->lkey, 0x1000, 64, kAccessRemoteRead}, 1, 7), 0);
  ASSERT_EQ(t.bind_mw({other, other + 1, mr->lkey, 0x1000, 64, kAccessRemoteRead}, 1, 8), 0);
  t.unbind_qp(7);
  Mr* out = nullptr;
  // Expect: QP 7's window is free (a new QP 7 may not use it); QP 8's still answers.
  EXPECT_EQ(t.check_remote(mine + 1, 1, 0x1000, 8, kAccessRemoteRead, &out, 7), MrCheck::bad_key);
  EXPECT_EQ(t.check_remote(other + 1, 1, 0x1000, 8, kAccessRemoteRead, &out, 8), MrCheck::ok);
  EXPECT_EQ(mr->bound_mws, 1u);
}

}  // namespace
}  // namespace droce::rocev2
