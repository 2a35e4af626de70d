#pragma once
// Between libibverbs' structs (infiniband/verbs.h) and droce's verbs
// vocabulary (abi/verbs.h, whose enumerators carry rdma-core's values,
// checked here by static_assert) and droced's replies (abi/ctl_protocol.h).
//
// Pure functions: no allocation, no syscalls, any thread. The WR and WC
// conversions are on the data path. Errors are positive errno values, as the
// verbs report them (ibv_post_send(3), ibv_modify_qp(3), ...).

#include <infiniband/verbs.h>

#include <cstdint>

#include "abi/ctl_protocol.h"
#include "abi/queues.h"
#include "abi/verbs.h"

namespace droce::verbs {

/// The access flags droce registers memory with: EINVAL for flags it does
/// not know, EOPNOTSUPP for on-demand paging and zero-based MRs. Optional
/// flags (IBV_ACCESS_OPTIONAL_RANGE, e.g. relaxed ordering) and HUGETLB (a
/// hint) are dropped, as the verbs allow.
int to_access(int ibv_access, uint32_t* out);

/// One send WR of a QP of `type`, as the header of its send WQE
/// (abi/queues.h): the one conversion droce_post_send makes, before the
/// client library writes the header and wr.sg_list straight into the ring's
/// slot (num_sge and inline_len are left to it). `ud_ah_id` is the AH's
/// droce id for UD (the caller reads it from wr.wr.ud.ah). EINVAL for an
/// opcode the QP type does not have, more SGEs than kMaxSge, a negative SGE
/// count or no list for a positive one; EOPNOTSUPP for bind MW, TSO and
/// driver opcodes.
int to_send_wqe_header(const ibv_send_wr& wr, ibv_qp_type type, uint32_t ud_ah_id, abi::SendWqeHeader* out);
/// The same WR as a SendWr, its scatter list copied (the fields read as
/// droced reads the header: abi::send_wr_fields).
int to_send_wr(const ibv_send_wr& wr, ibv_qp_type type, uint32_t ud_ah_id, abi::SendWr* out);
/// One receive WR. EINVAL for a bad SGE count.
int to_recv_wr(const ibv_recv_wr& wr, abi::RecvWr* out);
/// A completion as ibv_poll_cq(3) reports it.
void to_wc(const abi::Completion& c, ibv_wc* out);

/// An address vector: RoCE routes by GID, so is_global must be set and the
/// port must be 1 (EINVAL otherwise).
int to_av(const ibv_ah_attr& ah, abi::AddressVector* out);
void from_av(const abi::AddressVector& av, ibv_ah_attr* out);

/// The attributes `mask` names. EINVAL for a value out of range (state,
/// MTU, migration state) or an address vector to_av() refuses; the rules of
/// which attributes a transition needs are droced's (rocev2/qp_modify.h).
int to_qp_attr(const ibv_qp_attr& attr, int mask, abi::QpAttr* out);
void from_qp_attr(const abi::QpAttr& a, ibv_qp_attr* out);

/// ibv_device_attr_ex from droced's reply. Capability flags are the
/// provider's: what droce does (RC RNR NAK generation, port active events,
/// the system image GUID, memory windows); completion timestamps (a 1 GHz
/// clock, the mask all ones) and max_dm_size when droced offers them.
void to_device_attr(const abi::ctl::QueryDeviceReply& r, ibv_device_attr_ex* out);
/// ibv_port_attr from droced's reply; the IB width and speed stand for the
/// Ethernet link speed as the kernel's ib_get_eth_speed() renders it.
void to_port_attr(const abi::ctl::QueryPortReply& r, ibv_port_attr* out);
/// IB width and speed codes for an Ethernet link of `mbps`.
void eth_speed(uint32_t mbps, uint8_t* width, uint8_t* speed);

}  // namespace droce::verbs
