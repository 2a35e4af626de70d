#include "rocev2/qp_modify.h"

#include <array>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <initializer_list>

namespace droce::rocev2 {

namespace {

constexpr size_t kStates = 7;
constexpr size_t kTypes = 6;
constexpr size_t kMaskBits = 32;

constexpr std::array<const char*, kMaskBits> kAttrNames = [] {
  std::array<const char*, kMaskBits> n{};
  const char* known[] = {"STATE",          "CUR_STATE",          "EN_SQD_ASYNC_NOTIFY",
                         "ACCESS_FLAGS",   "PKEY_INDEX",         "PORT",
                         "QKEY",           "AV",                 "PATH_MTU",
                         "TIMEOUT",        "RETRY_CNT",          "RNR_RETRY",
                         "RQ_PSN",         "MAX_QP_RD_ATOMIC",   "ALT_PATH",
                         "MIN_RNR_TIMER",  "SQ_PSN",             "MAX_DEST_RD_ATOMIC",
                         "PATH_MIG_STATE", "CAP",                "DEST_QPN"};
  for (size_t i = 0; i < std::size(known); ++i) n[i] = known[i];
  n[25] = "RATE_LIMIT";
  return n;
}();

constexpr uint32_t kKnownBits = [] {
  uint32_t m = 0;
  for (size_t i = 0; i < kMaskBits; ++i)
    if (kAttrNames[i]) m |= 1u << i;
  return m;
}();

constexpr size_t type_index(QpType t) {
  switch (t) {
    case QpType::rc: return 0;
    case QpType::uc: return 1;
    case QpType::ud: return 2;
    case QpType::xrc_send: return 3;
    case QpType::xrc_recv: return 4;
    case QpType::raw_packet: return 5;
  }
  return kTypes;
}

constexpr size_t state_index(QpState s) { return static_cast<size_t>(s); }

struct Rule {
  bool valid = false;
  uint32_t required = 0;
  uint32_t optional = 0;
};

using RuleTable = std::array<std::array<std::array<Rule, kStates>, kStates>, kTypes>;

constexpr void set(RuleTable& t, QpType type, QpState from, QpState to, uint32_t required,
                   uint32_t optional) {
  t[type_index(type)][state_index(from)][state_index(to)] = {true, required, optional};
}

// IBA Vol. 1 11.2.4.2, the QP state transition table, for RC, UC and UD, and Annex A14's XRC
// rows (as the kernel's ib_modify_qp_is_ok has them), with the alternate-path attributes left
// out (see qp_modify.h). An XRC initiator has a send queue only: it takes RC's requester
// attributes and none of the responder's; a target has no send queue: RC's responder attributes
// and, of the requester's, the timeout and the starting PSN of its responses.
constexpr RuleTable kRules = [] {
  RuleTable t{};
  constexpr QpType kAll[] = {QpType::rc, QpType::uc, QpType::ud, QpType::xrc_send, QpType::xrc_recv,
                             QpType::raw_packet};
  constexpr QpType kXrc[] = {QpType::xrc_send, QpType::xrc_recv};
  using S = QpState;

  // Any state -> RESET, any state -> ERR (IBA 10.3.1): no attributes.
  for (QpType type : kAll)
    for (size_t from = 0; from < kStates; ++from) {
      set(t, type, static_cast<S>(from), S::reset, 0, 0);
      set(t, type, static_cast<S>(from), S::err, 0, 0);
    }

  constexpr uint32_t kConnInit = kAttrPkeyIndex | kAttrPort | kAttrAccessFlags;
  constexpr uint32_t kUdInit = kAttrPkeyIndex | kAttrPort | kAttrQkey;
  set(t, QpType::rc, S::reset, S::init, kConnInit, 0);
  set(t, QpType::uc, S::reset, S::init, kConnInit, 0);
  set(t, QpType::ud, S::reset, S::init, kUdInit, 0);
  set(t, QpType::rc, S::init, S::init, 0, kConnInit);
  set(t, QpType::uc, S::init, S::init, 0, kConnInit);
  set(t, QpType::ud, S::init, S::init, 0, kUdInit);
  for (QpType x : kXrc) {
    set(t, x, S::reset, S::init, kConnInit, 0);
    set(t, x, S::init, S::init, 0, kConnInit);
  }

  constexpr uint32_t kUcRtr = kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn;
  constexpr uint32_t kRcRtr = kUcRtr | kAttrMaxDestRdAtomic | kAttrMinRnrTimer;
  set(t, QpType::rc, S::init, S::rtr, kRcRtr, kAttrAccessFlags | kAttrPkeyIndex);
  set(t, QpType::uc, S::init, S::rtr, kUcRtr, kAttrAccessFlags | kAttrPkeyIndex);
  set(t, QpType::ud, S::init, S::rtr, 0, kAttrPkeyIndex | kAttrQkey);
  set(t, QpType::xrc_send, S::init, S::rtr, kUcRtr, kAttrAccessFlags | kAttrPkeyIndex);
  set(t, QpType::xrc_recv, S::init, S::rtr, kRcRtr, kAttrAccessFlags | kAttrPkeyIndex);

  // RTR->RTS, RTS->RTS and SQD->RTS allow the same optional attributes.
  constexpr uint32_t kRcToRts =
      kAttrCurState | kAttrAccessFlags | kAttrMinRnrTimer | kAttrPathMigState;
  constexpr uint32_t kUcToRts = kAttrCurState | kAttrAccessFlags | kAttrPathMigState;
  constexpr uint32_t kUdToRts = kAttrCurState | kAttrQkey;
  constexpr uint32_t kRcRts =
      kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry | kAttrSqPsn | kAttrMaxQpRdAtomic;
  set(t, QpType::rc, S::rtr, S::rts, kRcRts, kRcToRts);
  set(t, QpType::uc, S::rtr, S::rts, kAttrSqPsn, kUcToRts);
  set(t, QpType::ud, S::rtr, S::rts, kAttrSqPsn, kUdToRts);
  set(t, QpType::xrc_send, S::rtr, S::rts, kRcRts, kUcToRts);
  set(t, QpType::xrc_recv, S::rtr, S::rts, kAttrTimeout | kAttrSqPsn, kRcToRts);
  for (S from : {S::rts, S::sqd}) {
    set(t, QpType::rc, from, S::rts, 0, kRcToRts);
    set(t, QpType::uc, from, S::rts, 0, kUcToRts);
    set(t, QpType::ud, from, S::rts, 0, kUdToRts);
    set(t, QpType::xrc_send, from, S::rts, 0, kUcToRts);
    set(t, QpType::xrc_recv, from, S::rts, 0, kRcToRts);
  }

  for (QpType type : kAll) set(t, type, S::rts, S::sqd, 0, kAttrEnSqdAsyncNotify);

  // SQD->SQD: path and protocol changes while the send queue is drained.
  set(t, QpType::rc, S::sqd, S::sqd, 0,
      kAttrPort | kAttrAv | kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry | kAttrMaxQpRdAtomic |
          kAttrMaxDestRdAtomic | kAttrAccessFlags | kAttrPkeyIndex | kAttrMinRnrTimer |
          kAttrPathMigState);
  set(t, QpType::uc, S::sqd, S::sqd, 0,
      kAttrAv | kAttrAccessFlags | kAttrPkeyIndex | kAttrPathMigState);
  set(t, QpType::ud, S::sqd, S::sqd, 0, kAttrPkeyIndex | kAttrQkey);
  set(t, QpType::xrc_send, S::sqd, S::sqd, 0,
      kAttrPort | kAttrAv | kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry | kAttrMaxQpRdAtomic |
          kAttrAccessFlags | kAttrPkeyIndex | kAttrPathMigState);
  set(t, QpType::xrc_recv, S::sqd, S::sqd, 0,
      kAttrPort | kAttrAv | kAttrTimeout | kAttrMaxDestRdAtomic | kAttrAccessFlags | kAttrPkeyIndex |
          kAttrMinRnrTimer | kAttrPathMigState);

  // Raw packet QPs (the kernel's qp_state_table): a port to reach INIT, nothing after.
  set(t, QpType::raw_packet, S::reset, S::init, kAttrPort, 0);
  set(t, QpType::raw_packet, S::init, S::init, 0, kAttrPort);
  set(t, QpType::raw_packet, S::init, S::rtr, 0, 0);
  set(t, QpType::raw_packet, S::rtr, S::rts, 0, kAttrCurState);
  for (S from : {S::rts, S::sqd, S::sqe}) set(t, QpType::raw_packet, from, S::rts, 0, kAttrCurState);

  // SQE->RTS: UC and UD only; RC and XRC have no SQE state.
  set(t, QpType::uc, S::sqe, S::rts, 0, kAttrCurState | kAttrAccessFlags);
  set(t, QpType::ud, S::sqe, S::rts, 0, kAttrCurState | kAttrQkey);
  return t;
}();

// The `why` strings that name a state or an attribute are built here, at
// compile time, from the same names and masks the checks use.
constexpr size_t kTextLen = 112;
struct Text {
  char s[kTextLen]{};
  size_t n = 0;
  constexpr void append(std::initializer_list<const char*> parts) {
    for (const char* p : parts)
      while (*p) s[n++] = *p++;  // overflowing is a compile error: the tables are constexpr
  }
};

constexpr std::array<Text, kMaskBits> kNotAllowedText = [] {
  std::array<Text, kMaskBits> t{};
  for (size_t i = 0; i < kMaskBits; ++i)
    if (kAttrNames[i]) t[i].append({kAttrNames[i], " is not allowed in this transition"});
  return t;
}();

constexpr const char* kStateNames[kStates] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
constexpr const char* kTypeNames[kTypes] = {"RC", "UC", "UD", "XRC_SEND", "XRC_RECV", "RAW_PACKET"};

constexpr std::array<std::array<Text, kStates>, kStates> kBadTransitionText = [] {
  std::array<std::array<Text, kStates>, kStates> t{};
  for (size_t f = 0; f < kStates; ++f)
    for (size_t s = 0; s < kStates; ++s)
      t[f][s].append({kStateNames[f], "->", kStateNames[s], " is not a valid transition"});
  return t;
}();

// Required attributes are named in the order a verbs program brings a QP up
// (ibv_rc_pingpong's order), not in mask-bit order.
constexpr uint32_t kRequiredOrder[] = {
    kAttrPkeyIndex, kAttrPort,    kAttrAccessFlags,     kAttrQkey,        kAttrAv,
    kAttrPathMtu,   kAttrDestQpn, kAttrRqPsn,           kAttrMaxDestRdAtomic, kAttrMinRnrTimer,
    kAttrTimeout,   kAttrRetryCnt, kAttrRnrRetry,       kAttrSqPsn,       kAttrMaxQpRdAtomic};

static_assert([] {
  uint32_t listed = 0;
  for (uint32_t b : kRequiredOrder) listed |= b;
  for (const auto& by_type : kRules)
    for (const auto& by_from : by_type)
      for (const Rule& r : by_from)
        if (r.required & ~listed) return false;
  return true;
}(), "kRequiredOrder must name every attribute some transition requires");

// "INIT->RTR on RC requires AV, PATH_MTU, ..." for each transition that requires something.
constexpr std::array<std::array<std::array<Text, kStates>, kStates>, kTypes> kRequiredText = [] {
  std::array<std::array<std::array<Text, kStates>, kStates>, kTypes> t{};
  for (size_t ty = 0; ty < kTypes; ++ty)
    for (size_t f = 0; f < kStates; ++f)
      for (size_t s = 0; s < kStates; ++s) {
        const uint32_t req = kRules[ty][f][s].required;
        if (!req) continue;
        Text& x = t[ty][f][s];
        x.append({kStateNames[f], "->", kStateNames[s], " on ", kTypeNames[ty], " requires "});
        const char* sep = "";
        for (uint32_t bit : kRequiredOrder)
          if (req & bit) {
            x.append({sep, kAttrNames[std::countr_zero(bit)]});
            sep = ", ";
          }
      }
  return t;
}();

// ON_DEMAND is a registration flag, and means nothing for a QP; it is taken (and ignored), as
// mlx5's and rxe's kernel drivers take it: rdma-core's test_odp gives its QPs its MRs' flags.
constexpr uint32_t kQpAccessFlags = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead |
                                    kAccessRemoteAtomic | kAccessMwBind | kAccessRelaxedOrdering |
                                    kAccessFlushGlobal | kAccessFlushPersistent | kAccessOnDemand;
constexpr uint32_t kPsnMax = 0xffffff;    // 24-bit PSN (IBA 9.7.1)
constexpr uint32_t kQpnMax = 0xffffff;    // 24-bit QPN (IBA 9.2)
constexpr uint32_t kFlowLabelMax = 0xfffff;
constexpr uint8_t kTimer5BitMax = 31;     // local ACK timeout and RNR NAK timer are 5-bit codes
constexpr uint8_t kRetry3BitMax = 7;      // retry and RNR retry counts are 3 bits

bool valid_state(QpState s) { return state_index(s) < kStates; }

const Rule* rule(QpType type, QpState from, QpState to) {
  const size_t ty = type_index(type);
  if (ty >= kTypes || !valid_state(from) || !valid_state(to)) return nullptr;
  const Rule& r = kRules[ty][state_index(from)][state_index(to)];
  return r.valid ? &r : nullptr;
}

bool zero_gid(const std::array<uint8_t, 16>& gid) {
  for (uint8_t b : gid)
    if (b) return false;
  return true;
}

// The range of each attribute present in `mask`, in mask-bit order; nullptr when all are fine.
const char* check_values(QpType type, const QpAttr& a, uint32_t mask, const DeviceLimits& lim) {
  const bool connected = type != QpType::ud;
  if ((mask & kAttrAccessFlags) && (a.qp_access_flags & ~kQpAccessFlags))
    return "qp_access_flags has flags a QP does not take";
  if ((mask & kAttrPkeyIndex) && a.pkey_index >= lim.max_pkeys)
    return "pkey_index is beyond the device's P_Key table";
  if ((mask & kAttrPort) && (a.port_num < 1 || a.port_num > lim.phys_port_cnt))
    return "port_num is not a port of the device";
  if (mask & kAttrAv) {
    if (!a.ah_attr.is_global) return "the address vector must be global: RoCE routes by GID";
    if (a.ah_attr.flow_label > kFlowLabelMax) return "flow_label does not fit in 20 bits";
    if (connected && zero_gid(a.ah_attr.dgid)) return "the address vector's DGID is zero";
  }
  if (mask & kAttrPathMtu) {
    const auto m = static_cast<uint8_t>(a.path_mtu);
    if (m < static_cast<uint8_t>(PathMtu::mtu256) || m > static_cast<uint8_t>(PathMtu::mtu4096))
      return "path_mtu is not an IBV_MTU value";
    if (m > static_cast<uint8_t>(lim.max_mtu)) return "path_mtu is above the device's max_mtu";
  }
  if ((mask & kAttrTimeout) && a.timeout > kTimer5BitMax) return "timeout is above 31";
  if ((mask & kAttrRetryCnt) && a.retry_cnt > kRetry3BitMax) return "retry_cnt is above 7";
  if ((mask & kAttrRnrRetry) && a.rnr_retry > kRetry3BitMax) return "rnr_retry is above 7";
  if ((mask & kAttrRqPsn) && a.rq_psn > kPsnMax) return "rq_psn does not fit in 24 bits";
  if ((mask & kAttrMaxQpRdAtomic) && a.max_rd_atomic > lim.max_qp_init_rd_atom)
    return "max_rd_atomic is above the device's max_qp_init_rd_atom";
  if ((mask & kAttrMinRnrTimer) && a.min_rnr_timer > kTimer5BitMax)
    return "min_rnr_timer is above 31";
  if ((mask & kAttrSqPsn) && a.sq_psn > kPsnMax) return "sq_psn does not fit in 24 bits";
  if ((mask & kAttrMaxDestRdAtomic) && a.max_dest_rd_atomic > lim.max_qp_rd_atom)
    return "max_dest_rd_atomic is above the device's max_qp_rd_atom";
  if ((mask & kAttrPathMigState) && a.path_mig_state != MigState::migrated)
    return "path_mig_state must be MIGRATED: alternate paths are not supported";
  if (mask & kAttrDestQpn) {
    if (a.dest_qp_num > kQpnMax) return "dest_qp_num does not fit in 24 bits";
    if (connected && a.dest_qp_num == 0) return "dest_qp_num 0: QP0 does not exist on RoCE";
  }
  return nullptr;
}

int fail(const char** why, const char* text) {
  if (why) *why = text;
  return -EINVAL;
}

}  // namespace

const char* attr_name(uint32_t bit) {
  return std::has_single_bit(bit) ? kAttrNames[std::countr_zero(bit)] : nullptr;
}

uint32_t required_attrs(QpType type, QpState from, QpState to) {
  const Rule* r = rule(type, from, to);
  return r ? r->required : 0;
}

uint32_t optional_attrs(QpType type, QpState from, QpState to) {
  const Rule* r = rule(type, from, to);
  return r ? r->optional : 0;
}

bool transition_allowed(QpType type, QpState from, QpState to) {
  return rule(type, from, to) != nullptr;
}

int check_modify_qp(const QpModifyCheck& qp, const QpAttr& attr, uint32_t mask,
                    const DeviceLimits& limits, const char** why) {
  if (type_index(qp.type) >= kTypes) return fail(why, "unsupported QP type: droce has RC, UC, UD, XRC and raw packet");
  if (!valid_state(qp.current)) return fail(why, "the QP's current state is not a QP state");
  if (mask & ~kKnownBits) return fail(why, "attribute mask has bits droce does not know");
  if ((mask & kAttrState) && !valid_state(attr.qp_state))
    return fail(why, "qp_state is not a QP state");
  if (mask & kAttrCurState) {
    if (!valid_state(attr.cur_qp_state)) return fail(why, "cur_qp_state is not a QP state");
    if (attr.cur_qp_state != qp.current)
      return fail(why, "cur_qp_state does not match the QP's current state");
  }

  const QpState to = (mask & kAttrState) ? attr.qp_state : qp.current;
  const Rule* r = rule(qp.type, qp.current, to);
  if (!r) {
    if (is_reliable(qp.type) && qp.current == QpState::sqe)
      return fail(why, "RC and XRC have no SQE state: a send error takes the QP to ERR");
    return fail(why, kBadTransitionText[state_index(qp.current)][state_index(to)].s);
  }

  if (mask & kAttrCap) return fail(why, "resizing queues (IBV_QP_CAP) is not supported");
  if (mask & kAttrAltPath) return fail(why, "alternate paths are not supported");
  if (const uint32_t extra = mask & ~(r->required | r->optional | kAttrState))
    return fail(why, kNotAllowedText[std::countr_zero(extra)].s);
  if ((mask & r->required) != r->required)
    return fail(why,
                kRequiredText[type_index(qp.type)][state_index(qp.current)][state_index(to)].s);

  if (const char* bad = check_values(qp.type, attr, mask, limits)) return fail(why, bad);
  if (why) *why = nullptr;
  return 0;
}

}  // namespace droce::rocev2
