// Modify QP against IBA Vol. 1 11.2.4.2 (the QP state transition table) and
// the state diagram of 10.3.1, as droce narrows them (rocev2/qp_modify.h).
//
// kIbaTable below is this test's own transcription of the specification's
// table, row by row and transport by transport; the loops drive
// check_modify_qp() from it, so the test is a second reading of the table,
// not a copy of qp_modify.cc's.

#include <gtest/gtest.h>

#include <bit>
#include <cerrno>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "rocev2/qp_modify.h"

namespace droce::rocev2 {
namespace {

using S = QpState;
using T = QpType;

constexpr QpType kTypes[] = {T::rc, T::uc, T::ud, T::xrc_send, T::xrc_recv};
constexpr QpState kStates[] = {S::reset, S::init, S::rtr, S::rts, S::sqd, S::sqe, S::err};

// Every ibv_qp_attr_mask bit droce knows, other than IBV_QP_STATE.
constexpr uint32_t kEveryAttr[] = {
    kAttrCurState,   kAttrEnSqdAsyncNotify, kAttrAccessFlags,  kAttrPkeyIndex, kAttrPort,
    kAttrQkey,       kAttrAv,               kAttrPathMtu,      kAttrTimeout,   kAttrRetryCnt,
    kAttrRnrRetry,   kAttrRqPsn,            kAttrMaxQpRdAtomic, kAttrAltPath,  kAttrMinRnrTimer,
    kAttrSqPsn,      kAttrMaxDestRdAtomic,  kAttrPathMigState, kAttrCap,       kAttrDestQpn,
    kAttrRateLimit,
};

// IBA's table, one row per transition other than "any state -> RESET" and
// "any state -> ERR" (those take no attributes). `alt`: IBA lists the
// alternate path as optional here, which droce refuses.
struct Row {
  QpType type;
  QpState from, to;
  uint32_t required, optional;
  bool alt;
};

const Row kIbaTable[] = {
    // RESET -> INIT: P_Key index, port; access flags on connected QPs, Q_Key on UD.
    {T::rc, S::reset, S::init, kAttrPkeyIndex | kAttrPort | kAttrAccessFlags, 0, false},
    {T::uc, S::reset, S::init, kAttrPkeyIndex | kAttrPort | kAttrAccessFlags, 0, false},
    {T::ud, S::reset, S::init, kAttrPkeyIndex | kAttrPort | kAttrQkey, 0, false},
    // INIT -> INIT: the same, each optional.
    {T::rc, S::init, S::init, 0, kAttrPkeyIndex | kAttrPort | kAttrAccessFlags, false},
    {T::uc, S::init, S::init, 0, kAttrPkeyIndex | kAttrPort | kAttrAccessFlags, false},
    {T::ud, S::init, S::init, 0, kAttrPkeyIndex | kAttrPort | kAttrQkey, false},
    // INIT -> RTR: the remote end and the receive PSN; RC adds responder resources and the
    // RNR timer.
    {T::rc, S::init, S::rtr,
     kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn | kAttrMaxDestRdAtomic | kAttrMinRnrTimer,
     kAttrAccessFlags | kAttrPkeyIndex, true},
    {T::uc, S::init, S::rtr, kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn,
     kAttrAccessFlags | kAttrPkeyIndex, true},
    {T::ud, S::init, S::rtr, 0, kAttrPkeyIndex | kAttrQkey, false},
    // RTR -> RTS: the send PSN; RC adds the ACK timeout, retries and initiator depth.
    {T::rc, S::rtr, S::rts,
     kAttrSqPsn | kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry | kAttrMaxQpRdAtomic,
     kAttrCurState | kAttrAccessFlags | kAttrMinRnrTimer | kAttrPathMigState, true},
    {T::uc, S::rtr, S::rts, kAttrSqPsn, kAttrCurState | kAttrAccessFlags | kAttrPathMigState, true},
    {T::ud, S::rtr, S::rts, kAttrSqPsn, kAttrCurState | kAttrQkey, false},
    // RTS -> RTS.
    {T::rc, S::rts, S::rts, 0,
     kAttrCurState | kAttrAccessFlags | kAttrMinRnrTimer | kAttrPathMigState, true},
    {T::uc, S::rts, S::rts, 0, kAttrCurState | kAttrAccessFlags | kAttrPathMigState, true},
    {T::ud, S::rts, S::rts, 0, kAttrCurState | kAttrQkey, false},
    // RTS -> SQD: only whether to report "drained".
    {T::rc, S::rts, S::sqd, 0, kAttrEnSqdAsyncNotify, false},
    {T::uc, S::rts, S::sqd, 0, kAttrEnSqdAsyncNotify, false},
    {T::ud, S::rts, S::sqd, 0, kAttrEnSqdAsyncNotify, false},
    // SQD -> RTS: as RTS -> RTS.
    {T::rc, S::sqd, S::rts, 0,
     kAttrCurState | kAttrAccessFlags | kAttrMinRnrTimer | kAttrPathMigState, true},
    {T::uc, S::sqd, S::rts, 0, kAttrCurState | kAttrAccessFlags | kAttrPathMigState, true},
    {T::ud, S::sqd, S::rts, 0, kAttrCurState | kAttrQkey, false},
    // SQD -> SQD: what may change while the send queue is drained.
    {T::rc, S::sqd, S::sqd, 0,
     kAttrPort | kAttrAv | kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry | kAttrMaxQpRdAtomic |
         kAttrMaxDestRdAtomic | kAttrAccessFlags | kAttrPkeyIndex | kAttrMinRnrTimer |
         kAttrPathMigState,
     true},
    {T::uc, S::sqd, S::sqd, 0, kAttrAv | kAttrAccessFlags | kAttrPkeyIndex | kAttrPathMigState,
     true},
    {T::ud, S::sqd, S::sqd, 0, kAttrPkeyIndex | kAttrQkey, false},
    // SQE -> RTS: UC and UD only (RC goes to ERR, never SQE).
    {T::uc, S::sqe, S::rts, 0, kAttrCurState | kAttrAccessFlags, false},
    {T::ud, S::sqe, S::rts, 0, kAttrCurState | kAttrQkey, false},
    // XRC (Annex A14; the kernel's ib_modify_qp_is_ok has the same rows): an initiator takes
    // RC's requester attributes only, a target RC's responder attributes, the ACK timeout and
    // the PSN its responses start at.
    {T::xrc_send, S::reset, S::init, kAttrPkeyIndex | kAttrPort | kAttrAccessFlags, 0, false},
    {T::xrc_recv, S::reset, S::init, kAttrPkeyIndex | kAttrPort | kAttrAccessFlags, 0, false},
    {T::xrc_send, S::init, S::init, 0, kAttrPkeyIndex | kAttrPort | kAttrAccessFlags, false},
    {T::xrc_recv, S::init, S::init, 0, kAttrPkeyIndex | kAttrPort | kAttrAccessFlags, false},
    {T::xrc_send, S::init, S::rtr, kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn,
     kAttrAccessFlags | kAttrPkeyIndex, true},
    {T::xrc_recv, S::init, S::rtr,
     kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn | kAttrMaxDestRdAtomic | kAttrMinRnrTimer,
     kAttrAccessFlags | kAttrPkeyIndex, true},
    {T::xrc_send, S::rtr, S::rts,
     kAttrSqPsn | kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry | kAttrMaxQpRdAtomic,
     kAttrCurState | kAttrAccessFlags | kAttrPathMigState, true},
    {T::xrc_recv, S::rtr, S::rts, kAttrSqPsn | kAttrTimeout,
     kAttrCurState | kAttrAccessFlags | kAttrMinRnrTimer | kAttrPathMigState, true},
    {T::xrc_send, S::rts, S::rts, 0, kAttrCurState | kAttrAccessFlags | kAttrPathMigState, true},
    {T::xrc_recv, S::rts, S::rts, 0,
     kAttrCurState | kAttrAccessFlags | kAttrMinRnrTimer | kAttrPathMigState, true},
    {T::xrc_send, S::rts, S::sqd, 0, kAttrEnSqdAsyncNotify, false},
    {T::xrc_recv, S::rts, S::sqd, 0, kAttrEnSqdAsyncNotify, false},
    {T::xrc_send, S::sqd, S::rts, 0, kAttrCurState | kAttrAccessFlags | kAttrPathMigState, true},
    {T::xrc_recv, S::sqd, S::rts, 0,
     kAttrCurState | kAttrAccessFlags | kAttrMinRnrTimer | kAttrPathMigState, true},
    {T::xrc_send, S::sqd, S::sqd, 0,
     kAttrPort | kAttrAv | kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry | kAttrMaxQpRdAtomic |
         kAttrAccessFlags | kAttrPkeyIndex | kAttrPathMigState,
     true},
    {T::xrc_recv, S::sqd, S::sqd, 0,
     kAttrPort | kAttrAv | kAttrTimeout | kAttrMaxDestRdAtomic | kAttrAccessFlags | kAttrPkeyIndex |
         kAttrMinRnrTimer | kAttrPathMigState,
     true},
};

const Row* find_row(QpType type, QpState from, QpState to) {
  for (const Row& r : kIbaTable)
    if (r.type == type && r.from == from && r.to == to) return &r;
  return nullptr;
}

bool expect_allowed(QpType type, QpState from, QpState to) {
  return to == S::reset || to == S::err || find_row(type, from, to) != nullptr;
}

// For failure messages: `why` may be null.
const char* text(const char* why) { return why ? why : "(no reason)"; }

std::string describe(QpType type, QpState from, QpState to) {
  return std::string(to_string(type)) + " " + to_string(from) + "->" + to_string(to);
}

std::string name(uint32_t bit) {
  const char* n = attr_name(bit);
  return n ? n : "bit " + std::to_string(std::countr_zero(bit));
}

// Valid values for every field, so that any mask the table allows passes.
QpAttr valid_attr(QpState from, QpState to) {
  QpAttr a;
  a.qp_state = to;
  a.cur_qp_state = from;
  a.path_mtu = PathMtu::mtu1024;
  a.path_mig_state = MigState::migrated;
  a.qkey = 0x11111111;
  a.rq_psn = 0x123456;
  a.sq_psn = 0x654321;
  a.dest_qp_num = 0x11;
  a.qp_access_flags = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
  a.ah_attr.dgid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2};  // ::ffff:10.0.0.2
  a.ah_attr.is_global = true;
  a.pkey_index = 0;
  a.en_sqd_async_notify = 1;
  a.max_rd_atomic = 1;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.port_num = 1;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  return a;
}

int check(QpType type, QpState current, const QpAttr& a, uint32_t mask,
          const char** why = nullptr, const DeviceLimits& limits = DeviceLimits{}) {
  return check_modify_qp(QpModifyCheck{type, current}, a, mask, limits, why);
}

// Runs `body(type, from, to, row)` for every transition IBA allows, including
// any -> RESET and any -> ERR (row == nullptr for those).
template <typename F>
void for_each_allowed(F body) {
  for (QpType type : kTypes)
    for (QpState from : kStates)
      for (QpState to : kStates)
        if (expect_allowed(type, from, to)) {
          SCOPED_TRACE(describe(type, from, to));
          body(type, from, to, find_row(type, from, to));
        }
}

uint32_t required_of(const Row* r) { return r ? r->required : 0; }
uint32_t optional_of(const Row* r) { return r ? r->optional : 0; }

// --- The table ---------------------------------------------------------------

TEST(QpModifyTable, AllowsExactlyIbasTransitions) {
  int allowed = 0;
  for (QpType type : kTypes)
    for (QpState from : kStates)
      for (QpState to : kStates) {
        SCOPED_TRACE(describe(type, from, to));
        const bool expected = expect_allowed(type, from, to);
        EXPECT_EQ(transition_allowed(type, from, to), expected);
        allowed += expected;
        const Row* r = find_row(type, from, to);
        EXPECT_EQ(required_attrs(type, from, to), required_of(r));
        EXPECT_EQ(optional_attrs(type, from, to), optional_of(r));
      }
  // 7 states x (->RESET, ->ERR) = 14 per type, plus the table's rows: RC 8, UC 9, UD 9, and
  // 8 for each XRC type.
  EXPECT_EQ(allowed, 5 * 14 + 26 + 16);
}

TEST(QpModifyTable, MinimalModifyPasses) {
  for_each_allowed([](QpType type, QpState from, QpState to, const Row* r) {
    const char* why = "untouched";
    EXPECT_EQ(check(type, from, valid_attr(from, to), kAttrState | required_of(r), &why), 0)
        << text(why);
    EXPECT_EQ(why, nullptr);
  });
}

TEST(QpModifyTable, EachRequiredAttributeIsRequired) {
  int checked = 0;
  for_each_allowed([&](QpType type, QpState from, QpState to, const Row* r) {
    const uint32_t req = required_of(r);
    for (uint32_t bit : kEveryAttr) {
      if (!(req & bit)) continue;
      SCOPED_TRACE("without " + name(bit));
      const char* why = nullptr;
      EXPECT_EQ(check(type, from, valid_attr(from, to), (kAttrState | req) & ~bit, &why), -EINVAL);
      ASSERT_NE(why, nullptr);
      const std::string w = why;
      EXPECT_NE(w.find(" requires "), std::string::npos) << w;
      EXPECT_NE(w.find(name(bit)), std::string::npos) << w;
      EXPECT_EQ(w.find(std::string(to_string(from)) + "->" + to_string(to) + " on " +
                       to_string(type)),
                0u)
          << w;
      ++checked;
    }
  });
  // RESET->INIT, INIT->RTR, RTR->RTS: RC, UC, UD, then XRC send (3 + 4 + 5) and receive (3 + 6 + 2).
  EXPECT_EQ(checked, 3 + 3 + 3 + 6 + 4 + 5 + 1 + 1 + 12 + 11);
}

TEST(QpModifyTable, RequiredMessageNamesTheRule) {
  const char* why = nullptr;
  EXPECT_EQ(check(T::rc, S::init, valid_attr(S::init, S::rtr), kAttrState | kAttrAv, &why),
            -EINVAL);
  EXPECT_STREQ(why,
               "INIT->RTR on RC requires AV, PATH_MTU, DEST_QPN, RQ_PSN, MAX_DEST_RD_ATOMIC, "
               "MIN_RNR_TIMER");
  EXPECT_EQ(check(T::ud, S::reset, valid_attr(S::reset, S::init), kAttrState, &why), -EINVAL);
  EXPECT_STREQ(why, "RESET->INIT on UD requires PKEY_INDEX, PORT, QKEY");
}

TEST(QpModifyTable, EachOptionalAttributeIsAllowed) {
  int checked = 0;
  for_each_allowed([&](QpType type, QpState from, QpState to, const Row* r) {
    const uint32_t base = kAttrState | required_of(r);
    const uint32_t opt = optional_of(r);
    for (uint32_t bit : kEveryAttr) {
      if (!(opt & bit)) continue;
      SCOPED_TRACE("with " + name(bit));
      const char* why = nullptr;
      EXPECT_EQ(check(type, from, valid_attr(from, to), base | bit, &why), 0) << text(why);
      ++checked;
    }
    const char* why = nullptr;
    EXPECT_EQ(check(type, from, valid_attr(from, to), base | opt, &why), 0) << text(why);
  });
  EXPECT_GT(checked, 50);
}

TEST(QpModifyTable, EveryOtherAttributeFails) {
  for_each_allowed([](QpType type, QpState from, QpState to, const Row* r) {
    const uint32_t base = kAttrState | required_of(r);
    for (uint32_t bit : kEveryAttr) {
      if ((required_of(r) | optional_of(r)) & bit) continue;
      SCOPED_TRACE("with " + name(bit));
      const char* why = nullptr;
      EXPECT_EQ(check(type, from, valid_attr(from, to), base | bit, &why), -EINVAL);
      ASSERT_NE(why, nullptr);
      if (bit == kAttrAltPath) {
        EXPECT_STREQ(why, "alternate paths are not supported");
      } else if (bit == kAttrCap) {
        EXPECT_STREQ(why, "resizing queues (IBV_QP_CAP) is not supported");
      } else {
        EXPECT_EQ(std::string(why), name(bit) + " is not allowed in this transition");
      }
    }
  });
}

TEST(QpModifyTable, AlternatePathIsRefusedWhereIbaAllowsIt) {
  int rows = 0;
  for (const Row& r : kIbaTable) {
    if (!r.alt) continue;
    SCOPED_TRACE(describe(r.type, r.from, r.to));
    ++rows;
    EXPECT_FALSE(optional_attrs(r.type, r.from, r.to) & kAttrAltPath);
    const char* why = nullptr;
    EXPECT_EQ(check(r.type, r.from, valid_attr(r.from, r.to),
                    kAttrState | r.required | kAttrAltPath, &why),
              -EINVAL);
    EXPECT_STREQ(why, "alternate paths are not supported");
  }
  EXPECT_EQ(rows, 4 + 4 + 4 + 4 + 4);  // INIT->RTR, RTR->RTS, RTS->RTS, SQD->RTS, SQD->SQD; RC, UC, XRC
}

TEST(QpModifyTable, DisallowedTransitionsFail) {
  int refused = 0;
  for (QpType type : kTypes)
    for (QpState from : kStates)
      for (QpState to : kStates) {
        if (expect_allowed(type, from, to)) continue;
        SCOPED_TRACE(describe(type, from, to));
        ++refused;
        const char* why = nullptr;
        EXPECT_EQ(check(type, from, valid_attr(from, to), kAttrState, &why), -EINVAL);
        EXPECT_NE(why, nullptr);
        // Whatever attributes come along: every bit the target might want.
        uint32_t all = kAttrState;
        for (const Row& r : kIbaTable)
          if (r.type == type) all |= r.required;
        EXPECT_EQ(check(type, from, valid_attr(from, to), all), -EINVAL);
      }
  EXPECT_EQ(refused, 5 * 49 - (5 * 14 + 26 + 16));
}

TEST(QpModifyTable, NamedIllegalTransitions) {
  const char* why = nullptr;
  auto fails = [&](QpType type, QpState from, QpState to) {
    SCOPED_TRACE(describe(type, from, to));
    QpAttr a = valid_attr(from, to);
    EXPECT_FALSE(transition_allowed(type, from, to));
    return check(type, from, a, kAttrState, &why) == -EINVAL;
  };
  EXPECT_TRUE(fails(T::rc, S::reset, S::rtr));
  EXPECT_STREQ(why, "RESET->RTR is not a valid transition");
  EXPECT_TRUE(fails(T::ud, S::init, S::rts));
  EXPECT_STREQ(why, "INIT->RTS is not a valid transition");
  EXPECT_TRUE(fails(T::uc, S::rtr, S::sqd));
  EXPECT_STREQ(why, "RTR->SQD is not a valid transition");
  EXPECT_TRUE(fails(T::rc, S::sqe, S::rts));
  EXPECT_STREQ(why, "RC and XRC have no SQE state: a send error takes the QP to ERR");
  EXPECT_TRUE(fails(T::rc, S::rts, S::sqe));  // SQE is entered by the QP, never by Modify QP
  EXPECT_TRUE(fails(T::ud, S::rts, S::sqe));
  EXPECT_TRUE(fails(T::rc, S::rtr, S::rtr));
  EXPECT_TRUE(fails(T::rc, S::rts, S::rtr));
  EXPECT_TRUE(fails(T::rc, S::err, S::rts));
  EXPECT_TRUE(fails(T::uc, S::err, S::init));
  EXPECT_TRUE(fails(T::ud, S::reset, S::rts));
  EXPECT_TRUE(fails(T::uc, S::sqd, S::init));
}

TEST(QpModifyTable, AnyStateToResetOrErrTakesNoAttributes) {
  for (QpType type : kTypes)
    for (QpState from : kStates)
      for (QpState to : {S::reset, S::err}) {
        SCOPED_TRACE(describe(type, from, to));
        EXPECT_TRUE(transition_allowed(type, from, to));
        EXPECT_EQ(check(type, from, valid_attr(from, to), kAttrState), 0);
        EXPECT_EQ(check(type, from, valid_attr(from, to), kAttrState | kAttrPort), -EINVAL);
        EXPECT_EQ(check(type, from, valid_attr(from, to), kAttrState | kAttrQkey), -EINVAL);
      }
}

TEST(QpModifyTable, WithoutTheStateBitTheQpStaysWhereItIs) {
  QpAttr a = valid_attr(S::rts, S::reset);  // qp_state is ignored without kAttrState
  EXPECT_EQ(check(T::rc, S::rts, a, kAttrAccessFlags), 0);         // RTS->RTS
  EXPECT_EQ(check(T::ud, S::init, a, kAttrQkey | kAttrPort), 0);   // INIT->INIT
  EXPECT_EQ(check(T::rc, S::sqd, a, kAttrTimeout | kAttrAv), 0);   // SQD->SQD
  EXPECT_EQ(check(T::rc, S::reset, a, 0), 0);                      // RESET->RESET
  EXPECT_EQ(check(T::rc, S::err, a, 0), 0);                        // ERR->ERR
  const char* why = nullptr;
  EXPECT_EQ(check(T::rc, S::rtr, a, kAttrAccessFlags, &why), -EINVAL);  // no RTR->RTR
  EXPECT_STREQ(why, "RTR->RTR is not a valid transition");
  // TIMEOUT is taken only at RTR->RTS and SQD->SQD.
  EXPECT_EQ(check(T::rc, S::rts, a, kAttrTimeout, &why), -EINVAL);
  EXPECT_STREQ(why, "TIMEOUT is not allowed in this transition");
}

// --- CUR_STATE, states, mask bits --------------------------------------------

TEST(QpModifyCurState, MustMatchTheQpsState) {
  for (const Row& r : kIbaTable) {
    if (!(r.optional & kAttrCurState)) continue;
    SCOPED_TRACE(describe(r.type, r.from, r.to));
    QpAttr a = valid_attr(r.from, r.to);
    const uint32_t mask = kAttrState | kAttrCurState | r.required;
    EXPECT_EQ(check(r.type, r.from, a, mask), 0);
    for (QpState other : kStates) {
      if (other == r.from) continue;
      a.cur_qp_state = other;
      const char* why = nullptr;
      EXPECT_EQ(check(r.type, r.from, a, mask, &why), -EINVAL) << to_string(other);
      EXPECT_STREQ(why, "cur_qp_state does not match the QP's current state");
    }
  }
}

TEST(QpModifyCurState, OnlyWhereTheTableListsIt) {
  // Matching, but INIT->RTR, RTS->SQD, RESET->INIT and ->ERR do not take CUR_STATE.
  const char* why = nullptr;
  QpAttr a = valid_attr(S::init, S::rtr);
  EXPECT_EQ(check(T::ud, S::init, a, kAttrState | kAttrCurState, &why), -EINVAL);
  EXPECT_STREQ(why, "CUR_STATE is not allowed in this transition");
  a = valid_attr(S::rts, S::sqd);
  EXPECT_EQ(check(T::rc, S::rts, a, kAttrState | kAttrCurState), -EINVAL);
  a = valid_attr(S::rts, S::err);
  EXPECT_EQ(check(T::rc, S::rts, a, kAttrState | kAttrCurState), -EINVAL);
}

TEST(QpModifyCurState, StateValuesBeyondErrFail) {
  const char* why = nullptr;
  QpAttr a = valid_attr(S::rtr, S::rts);
  a.qp_state = static_cast<QpState>(7);
  EXPECT_EQ(check(T::ud, S::rtr, a, kAttrState | kAttrSqPsn, &why), -EINVAL);
  EXPECT_STREQ(why, "qp_state is not a QP state");
  a.qp_state = S::err;  // the largest state is fine
  EXPECT_EQ(check(T::ud, S::rtr, a, kAttrState), 0);
  a = valid_attr(S::rtr, S::rts);
  a.cur_qp_state = static_cast<QpState>(7);
  EXPECT_EQ(check(T::ud, S::rtr, a, kAttrState | kAttrSqPsn | kAttrCurState, &why), -EINVAL);
  EXPECT_STREQ(why, "cur_qp_state is not a QP state");
  // A QP whose own state or type is out of range.
  a = valid_attr(S::rtr, S::err);
  EXPECT_EQ(check(T::rc, static_cast<QpState>(7), a, kAttrState, &why), -EINVAL);
  EXPECT_EQ(check(static_cast<QpType>(1), S::rtr, a, kAttrState, &why), -EINVAL);  // RD
  EXPECT_STREQ(why, "unsupported QP type: droce has RC, UC, UD, XRC and raw packet");
  EXPECT_EQ(check(static_cast<QpType>(7), S::rtr, a, kAttrState), -EINVAL);  // RAW_IPV6 (gone from verbs)
  EXPECT_FALSE(transition_allowed(static_cast<QpType>(7), S::rtr, S::err));
  EXPECT_EQ(check(T::raw_packet, S::rtr, a, kAttrState), 0);  // raw packet: any state -> ERR
  EXPECT_FALSE(transition_allowed(T::rc, static_cast<QpState>(7), S::err));
  EXPECT_EQ(required_attrs(T::rc, S::init, static_cast<QpState>(9)), 0u);
  EXPECT_EQ(optional_attrs(static_cast<QpType>(0), S::init, S::init), 0u);
}

TEST(QpModifyMask, UnknownBitsFail) {
  for (unsigned i : {21u, 22u, 23u, 24u, 26u, 27u, 28u, 29u, 30u, 31u}) {
    SCOPED_TRACE(i);
    const char* why = nullptr;
    EXPECT_EQ(check(T::rc, S::rts, valid_attr(S::rts, S::err), kAttrState | (1u << i), &why),
              -EINVAL);
    EXPECT_STREQ(why, "attribute mask has bits droce does not know");
    EXPECT_EQ(attr_name(1u << i), nullptr);
  }
  EXPECT_STREQ(attr_name(kAttrRateLimit), "RATE_LIMIT");
  EXPECT_STREQ(attr_name(kAttrDestQpn), "DEST_QPN");
  EXPECT_EQ(attr_name(0), nullptr);
  EXPECT_EQ(attr_name(kAttrAv | kAttrPort), nullptr);
}

TEST(QpModifyMask, CapIsNeverAllowed) {
  for_each_allowed([](QpType type, QpState from, QpState to, const Row* r) {
    const char* why = nullptr;
    EXPECT_EQ(check(type, from, valid_attr(from, to), kAttrState | required_of(r) | kAttrCap, &why),
              -EINVAL);
    EXPECT_STREQ(why, "resizing queues (IBV_QP_CAP) is not supported");
  });
}

TEST(QpModifyMask, WhyIsOptionalAndClearedOnSuccess) {
  const QpAttr a = valid_attr(S::reset, S::init);
  EXPECT_EQ(check(T::rc, S::reset, a, kAttrState), -EINVAL);  // no why pointer
  const char* why = "stale";
  EXPECT_EQ(check(T::rc, S::reset, a, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags,
                  &why),
            0);
  EXPECT_EQ(why, nullptr);
}

// --- Values ------------------------------------------------------------------

// A device with small limits, so that each limit has a boundary to test.
DeviceLimits small_device() {
  DeviceLimits d;
  d.max_qp_rd_atom = 8;
  d.max_qp_init_rd_atom = 4;
  d.max_pkeys = 4;
  d.phys_port_cnt = 2;
  d.max_mtu = PathMtu::mtu2048;
  return d;
}

struct Boundary {
  const char* field;
  uint32_t bit;
  void (*set)(QpAttr&, uint32_t);
  uint32_t max_valid;  // max + 1 is invalid
};

const Boundary kBoundaries[] = {
    {"path_mtu", kAttrPathMtu, [](QpAttr& a, uint32_t v) { a.path_mtu = static_cast<PathMtu>(v); },
     4},  // device max_mtu 2048
    {"timeout", kAttrTimeout, [](QpAttr& a, uint32_t v) { a.timeout = uint8_t(v); }, 31},
    {"retry_cnt", kAttrRetryCnt, [](QpAttr& a, uint32_t v) { a.retry_cnt = uint8_t(v); }, 7},
    {"rnr_retry", kAttrRnrRetry, [](QpAttr& a, uint32_t v) { a.rnr_retry = uint8_t(v); }, 7},
    {"min_rnr_timer", kAttrMinRnrTimer, [](QpAttr& a, uint32_t v) { a.min_rnr_timer = uint8_t(v); },
     31},
    {"rq_psn", kAttrRqPsn, [](QpAttr& a, uint32_t v) { a.rq_psn = v; }, 0xffffff},
    {"sq_psn", kAttrSqPsn, [](QpAttr& a, uint32_t v) { a.sq_psn = v; }, 0xffffff},
    {"dest_qp_num", kAttrDestQpn, [](QpAttr& a, uint32_t v) { a.dest_qp_num = v; }, 0xffffff},
    {"port_num", kAttrPort, [](QpAttr& a, uint32_t v) { a.port_num = uint8_t(v); }, 2},
    {"pkey_index", kAttrPkeyIndex, [](QpAttr& a, uint32_t v) { a.pkey_index = uint16_t(v); }, 3},
    {"max_rd_atomic", kAttrMaxQpRdAtomic,
     [](QpAttr& a, uint32_t v) { a.max_rd_atomic = uint8_t(v); }, 4},
    {"max_dest_rd_atomic", kAttrMaxDestRdAtomic,
     [](QpAttr& a, uint32_t v) { a.max_dest_rd_atomic = uint8_t(v); }, 8},
    {"flow_label", kAttrAv, [](QpAttr& a, uint32_t v) { a.ah_attr.flow_label = v; }, 0xfffff},
};

TEST(QpModifyValues, EachBoundaryInEveryTransitionThatTakesTheField) {
  const DeviceLimits dev = small_device();
  for (const Boundary& b : kBoundaries) {
    SCOPED_TRACE(b.field);
    int rows = 0;
    for (const Row& r : kIbaTable) {
      if (!((r.required | r.optional) & b.bit)) continue;
      SCOPED_TRACE(describe(r.type, r.from, r.to));
      ++rows;
      const uint32_t mask = kAttrState | r.required | b.bit;
      QpAttr a = valid_attr(r.from, r.to);
      b.set(a, b.max_valid);
      const char* why = nullptr;
      EXPECT_EQ(check(r.type, r.from, a, mask, &why, dev), 0) << text(why);
      b.set(a, b.max_valid + 1);
      EXPECT_EQ(check(r.type, r.from, a, mask, &why, dev), -EINVAL);
      EXPECT_NE(why, nullptr);
      // The same bad value is not looked at when its bit is not in the mask.
      if (!(r.required & b.bit)) {
        EXPECT_EQ(check(r.type, r.from, a, mask & ~b.bit, &why, dev), 0) << text(why);
      }
    }
    EXPECT_GT(rows, 0);
  }
}

TEST(QpModifyValues, LowerBounds) {
  const char* why = nullptr;
  QpAttr a = valid_attr(S::reset, S::init);
  const uint32_t init = kAttrState | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags;
  a.port_num = 0;
  EXPECT_EQ(check(T::rc, S::reset, a, init, &why), -EINVAL);
  EXPECT_STREQ(why, "port_num is not a port of the device");
  a.port_num = 1;
  EXPECT_EQ(check(T::rc, S::reset, a, init), 0);

  const uint32_t rtr = kAttrState | kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn;
  a = valid_attr(S::init, S::rtr);
  a.path_mtu = static_cast<PathMtu>(0);
  EXPECT_EQ(check(T::uc, S::init, a, rtr, &why), -EINVAL);
  EXPECT_STREQ(why, "path_mtu is not an IBV_MTU value");
  a.path_mtu = static_cast<PathMtu>(6);
  EXPECT_EQ(check(T::uc, S::init, a, rtr, &why), -EINVAL);  // beyond any MTU, default device
  EXPECT_STREQ(why, "path_mtu is not an IBV_MTU value");
  a.path_mtu = PathMtu::mtu4096;  // the default device takes 4096
  EXPECT_EQ(check(T::uc, S::init, a, rtr), 0);
  a.path_mtu = PathMtu::mtu256;
  EXPECT_EQ(check(T::uc, S::init, a, rtr), 0);

  for (QpType type : {T::rc, T::uc}) {
    SCOPED_TRACE(to_string(type));
    const uint32_t mask = kAttrState | required_attrs(type, S::init, S::rtr);
    a = valid_attr(S::init, S::rtr);
    a.dest_qp_num = 0;
    EXPECT_EQ(check(type, S::init, a, mask, &why), -EINVAL);
    EXPECT_STREQ(why, "dest_qp_num 0: QP0 does not exist on RoCE");
    a.dest_qp_num = 1;
    EXPECT_EQ(check(type, S::init, a, mask), 0);
  }
}

TEST(QpModifyValues, AccessFlags) {
  const uint32_t mask = kAttrState | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags;
  QpAttr a = valid_attr(S::reset, S::init);
  uint32_t all = 0;
  for (uint32_t f : {kAccessLocalWrite, kAccessRemoteWrite, kAccessRemoteRead, kAccessRemoteAtomic,
                     kAccessMwBind, kAccessRelaxedOrdering}) {
    a.qp_access_flags = f;
    all |= f;
    EXPECT_EQ(check(T::uc, S::reset, a, mask), 0) << f;
  }
  a.qp_access_flags = all;
  EXPECT_EQ(check(T::rc, S::reset, a, mask), 0);
  a.qp_access_flags = 0;
  EXPECT_EQ(check(T::rc, S::reset, a, mask), 0);
  // IBA 1.5's FLUSH access bits are QP access flags too (a QP without them refuses FLUSH).
  a.qp_access_flags = kAccessRemoteWrite | kAccessFlushGlobal | kAccessFlushPersistent;
  EXPECT_EQ(check(T::rc, S::reset, a, mask), 0);
  // ON_DEMAND is taken and means nothing, as the kernel's drivers take it (rdma-core's test_odp
  // sets its MRs' flags on its QPs).
  a.qp_access_flags = kAccessRemoteWrite | kAccessOnDemand;
  EXPECT_EQ(check(T::rc, S::reset, a, mask), 0);
  // Other memory-registration flags and unknown bits are not QP access flags.
  for (uint32_t f : {uint32_t(kAccessZeroBased), uint32_t(kAccessHugetlb), 1u << 10, 1u << 19, 1u << 31}) {
    a.qp_access_flags = kAccessRemoteWrite | f;
    const char* why = nullptr;
    EXPECT_EQ(check(T::rc, S::reset, a, mask, &why), -EINVAL) << f;
    EXPECT_STREQ(why, "qp_access_flags has flags a QP does not take");
  }
}

TEST(QpModifyValues, AddressVectorIsGlobalWithADgid) {
  for (const Row& r : kIbaTable) {
    if (!((r.required | r.optional) & kAttrAv)) continue;
    SCOPED_TRACE(describe(r.type, r.from, r.to));
    const uint32_t mask = kAttrState | r.required | kAttrAv;
    QpAttr a = valid_attr(r.from, r.to);
    a.ah_attr.is_global = false;
    const char* why = nullptr;
    EXPECT_EQ(check(r.type, r.from, a, mask, &why), -EINVAL);
    EXPECT_STREQ(why, "the address vector must be global: RoCE routes by GID");
    a = valid_attr(r.from, r.to);
    a.ah_attr.dgid = {};
    EXPECT_EQ(check(r.type, r.from, a, mask, &why), -EINVAL);
    EXPECT_STREQ(why, "the address vector's DGID is zero");
    a.ah_attr.dgid[15] = 1;  // ::1 is a GID
    EXPECT_EQ(check(r.type, r.from, a, mask), 0);
  }
}

TEST(QpModifyValues, PathMigStateIsMigratedOnly) {
  const uint32_t mask = kAttrState | required_attrs(T::rc, S::rtr, S::rts) | kAttrPathMigState;
  QpAttr a = valid_attr(S::rtr, S::rts);
  EXPECT_EQ(check(T::rc, S::rtr, a, mask), 0);
  for (MigState m : {MigState::rearm, MigState::armed}) {
    a.path_mig_state = m;
    const char* why = nullptr;
    EXPECT_EQ(check(T::rc, S::rtr, a, mask, &why), -EINVAL);
    EXPECT_STREQ(why, "path_mig_state must be MIGRATED: alternate paths are not supported");
  }
}

TEST(QpModifyValues, EnSqdAsyncNotifyOnlyOnRtsToSqd) {
  QpAttr a = valid_attr(S::rts, S::sqd);
  EXPECT_EQ(check(T::rc, S::rts, a, kAttrState | kAttrEnSqdAsyncNotify), 0);
  a.en_sqd_async_notify = 0;
  EXPECT_EQ(check(T::ud, S::rts, a, kAttrState | kAttrEnSqdAsyncNotify), 0);
  a = valid_attr(S::sqd, S::sqd);
  EXPECT_EQ(check(T::rc, S::sqd, a, kAttrState | kAttrEnSqdAsyncNotify), -EINVAL);
  a = valid_attr(S::sqd, S::rts);
  EXPECT_EQ(check(T::uc, S::sqd, a, kAttrState | kAttrEnSqdAsyncNotify), -EINVAL);
}

// --- What verbs programs do --------------------------------------------------

// Runs `steps` in order against one QP, moving it along as each passes.
struct Step {
  QpState to;
  uint32_t mask;
};

void run(QpType type, std::initializer_list<Step> steps) {
  QpAttr a = valid_attr(S::reset, S::reset);
  QpState current = S::reset;
  for (const Step& s : steps) {
    SCOPED_TRACE(describe(type, current, s.to));
    a.qp_state = s.to;
    a.cur_qp_state = current;
    const char* why = nullptr;
    ASSERT_EQ(check(type, current, a, s.mask, &why), 0) << text(why);
    if (s.mask & kAttrState) current = s.to;
  }
}

TEST(QpModifySequence, RcPingpong) {
  // ibv_rc_pingpong.
  run(T::rc, {
                 {S::init, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags},
                 {S::rtr, kAttrState | kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn |
                              kAttrMaxDestRdAtomic | kAttrMinRnrTimer},
                 {S::rts, kAttrState | kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry | kAttrSqPsn |
                              kAttrMaxQpRdAtomic},
             });
}

TEST(QpModifySequence, UcPingpong) {
  // ibv_uc_pingpong.
  run(T::uc, {
                 {S::init, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags},
                 {S::rtr, kAttrState | kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn},
                 {S::rts, kAttrState | kAttrSqPsn},
             });
}

TEST(QpModifySequence, UdPingpong) {
  // ibv_ud_pingpong.
  run(T::ud, {
                 {S::init, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrQkey},
                 {S::rtr, kAttrState},
                 {S::rts, kAttrState | kAttrSqPsn},
             });
}

TEST(QpModifySequence, XsrqPingpong) {
  // ibv_xsrq_pingpong: its target (receive) QP, then its initiator (send) QP.
  run(T::xrc_recv, {
                       {S::init, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags},
                       {S::rtr, kAttrState | kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn |
                                    kAttrMaxDestRdAtomic | kAttrMinRnrTimer},
                       {S::rts, kAttrState | kAttrTimeout | kAttrSqPsn},
                   });
  run(T::xrc_send, {
                       {S::init, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags},
                       {S::rtr, kAttrState | kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn},
                       {S::rts, kAttrState | kAttrTimeout | kAttrSqPsn | kAttrRetryCnt | kAttrRnrRetry |
                                    kAttrMaxQpRdAtomic},
                   });
  const char* why = nullptr;
  QpAttr a = valid_attr(S::init, S::rtr);
  EXPECT_EQ(check(T::xrc_send, S::init, a, kAttrState | kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn |
                                                kAttrMaxDestRdAtomic, &why),
            -EINVAL);  // an initiator has no responder resources
  EXPECT_STREQ(why, "MAX_DEST_RD_ATOMIC is not allowed in this transition");
  EXPECT_EQ(check(T::xrc_recv, S::sqe, valid_attr(S::sqe, S::rts), kAttrState), -EINVAL);
}

TEST(QpModifySequence, DrainChangeResume) {
  run(T::rc, {
                 {S::init, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags},
                 {S::rtr, kAttrState | kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn |
                              kAttrMaxDestRdAtomic | kAttrMinRnrTimer},
                 {S::rts, kAttrState | kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry | kAttrSqPsn |
                              kAttrMaxQpRdAtomic},
                 {S::rts, kAttrAccessFlags | kAttrMinRnrTimer},
                 {S::sqd, kAttrState | kAttrEnSqdAsyncNotify},
                 {S::sqd, kAttrState | kAttrAv | kAttrTimeout | kAttrRetryCnt | kAttrPort},
                 {S::rts, kAttrState | kAttrCurState},
                 {S::err, kAttrState},
                 {S::reset, kAttrState},
                 {S::init, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags},
             });
}

TEST(QpModifySequence, UdRecoversFromSqe) {
  // A UD QP the provider moved to SQE after a send error: the consumer resumes it.
  QpAttr a = valid_attr(S::sqe, S::rts);
  EXPECT_EQ(check(T::ud, S::sqe, a, kAttrState | kAttrCurState | kAttrQkey), 0);
  EXPECT_EQ(check(T::uc, S::sqe, a, kAttrState | kAttrAccessFlags), 0);
  EXPECT_EQ(check(T::rc, S::sqe, a, kAttrState), -EINVAL);
}

TEST(QpModifyNames, StatesAndTypes) {
  EXPECT_STREQ(to_string(S::reset), "RESET");
  EXPECT_STREQ(to_string(S::init), "INIT");
  EXPECT_STREQ(to_string(S::rtr), "RTR");
  EXPECT_STREQ(to_string(S::rts), "RTS");
  EXPECT_STREQ(to_string(S::sqd), "SQD");
  EXPECT_STREQ(to_string(S::sqe), "SQE");
  EXPECT_STREQ(to_string(S::err), "ERR");
  EXPECT_STREQ(to_string(T::rc), "RC");
  EXPECT_STREQ(to_string(T::uc), "UC");
  EXPECT_STREQ(to_string(T::ud), "UD");
  EXPECT_STREQ(to_string(T::xrc_send), "XRC_SEND");
  EXPECT_STREQ(to_string(T::xrc_recv), "XRC_RECV");
}

}  // namespace
}  // namespace droce::rocev2
