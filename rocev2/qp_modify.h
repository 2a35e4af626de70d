#pragma once
// The rules of Modify QP (IBA Vol. 1 11.2.4.2 and its state-transition table;
// the state diagram of 10.3.1): which state transitions a QP may make, which
// attributes each transition requires and which it allows, and the range of
// each attribute's value.
//
// A pure validator: no allocation, no state, no logging, safe from any thread.
// The provider calls check_modify_qp() before it changes anything, so a modify
// that fails here leaves the QP as it was.
//
// What droce decides beyond (or against) the specification and the Linux
// kernel's ib_modify_qp_is_ok(), which encodes the same table:
//  - Transports RC, UC, UD and XRC (send and receive) only (no RD, raw packet, SMI/GSI).
//  - Any state -> RESET and any state -> ERR, with no attributes, including
//    RESET -> ERR (IBA's "any state" rows; the kernel's table lacks RESET->ERR).
//  - RC and XRC have no SQE state (a send error takes the QP to ERR, IBA 10.3.1), so
//    SQE -> RTS is refused on them; SQE -> RESET/ERR stay allowed.
//  - IBV_QP_CUR_STATE is allowed only where the table lists it (RTR->RTS,
//    RTS->RTS, SQD->RTS, SQE->RTS), and cur_qp_state must equal the state the
//    QP is in. (The kernel's drivers instead take the caller's claim as the
//    starting state.)
//  - Alternate paths (automatic path migration) are not supported: IBV_QP_ALT_PATH
//    fails wherever it appears, and IBV_QP_PATH_MIG_STATE, where the table
//    allows it, accepts only MIGRATED (there is no alternate path to arm).
//  - IBV_QP_CAP fails: resizing the queues of a live QP is not supported.
//  - The SMAC/VID/ALT_SMAC/ALT_VID rows (kernel-internal, IB) do not exist here,
//    and IBV_QP_RATE_LIMIT (raw packet QPs only) is never allowed.
//  - The address vector must be global (RoCE routes by GID), its flow label must
//    fit in 20 bits, and on RC/UC its DGID must not be zero.
//
// Errors: check_modify_qp() returns 0 or -EINVAL; `*why` names the first rule
// broken, in this order: QP type and state, unknown mask bits, qp_state and
// cur_qp_state values, cur_qp_state == current, the transition itself, CAP and
// ALT_PATH, attributes the transition does not allow, attributes it requires,
// then each attribute's value in mask-bit order.

#include <cstdint>

#include "rocev2/verbs.h"

namespace droce::rocev2 {

/// What modify_qp is allowed to change, given the QP as it is.
struct QpModifyCheck {
  QpType type;
  QpState current;
};

/// 0 when `attr`/`mask` is a valid modify of a QP of `type` in state `current`, with the
/// target state attr.qp_state when kAttrState is in mask, else `current`; -EINVAL otherwise.
/// `*why` (if given) receives a short static string naming the first rule broken
/// (e.g. "INIT->RTR on RC requires AV, PATH_MTU, DEST_QPN, RQ_PSN, MAX_DEST_RD_ATOMIC,
/// MIN_RNR_TIMER"), or nullptr on success. Only the fields whose bits are in `mask` are read.
int check_modify_qp(const QpModifyCheck& qp, const QpAttr& attr, uint32_t mask,
                    const DeviceLimits& limits, const char** why = nullptr);

/// The attributes a transition requires / allows (for tests, `droce` diagnostics).
/// kAttrState is in neither (it is what names the transition). optional_attrs()
/// includes kAttrCurState where the table allows it, and never kAttrAltPath or
/// kAttrCap. Both are 0 for a transition that is not allowed, an unknown type or state.
uint32_t required_attrs(QpType type, QpState from, QpState to);
uint32_t optional_attrs(QpType type, QpState from, QpState to);

/// Whether Modify QP may take a QP of `type` from `from` to `to` (IBA 10.3.1).
bool transition_allowed(QpType type, QpState from, QpState to);

/// The ibv_qp_attr_mask name of one mask bit without the IBV_QP_ prefix ("AV",
/// "PATH_MTU"), or nullptr for a bit droce does not know.
const char* attr_name(uint32_t bit);

}  // namespace droce::rocev2
