#pragma once
// The verbs vocabulary the provider, droced and the engine share: QP types
// and states, attributes and their mask, work requests and completions.
// What only the engine computes (a UD receive's GRH area) is in
// rocev2/verbs.h, which includes this.
//
// Every enumerator has the numeric value rdma-core gives its ibv_*
// counterpart (infiniband/verbs.h), so the provider converts by cast; the
// provider static_asserts that equality. The engine never includes
// libibverbs itself.

#include <array>
#include <cstdint>

namespace droce::abi {

/// XRC (IBA Annex A14): xrc_send is the initiator (IBV_QPT_XRC_SEND, a send queue only, each
/// message names the destination XRC SRQ), xrc_recv the target (IBV_QPT_XRC_RECV, no queues of
/// its own: each request goes to the XRC SRQ its XRCETH names).
/// raw_packet (IBV_QPT_RAW_PACKET): whole Ethernet frames out as the application built them, and in
/// what its flow rules (abi/flow.h) steer to it; privileged, as on an HCA (CAP_NET_RAW).
enum class QpType : uint8_t { rc = 2, uc = 3, ud = 4, raw_packet = 8, xrc_send = 9, xrc_recv = 10 };

/// The types whose requests are acknowledged (RC and both XRC types).
inline constexpr bool is_reliable(QpType t) { return t == QpType::rc || t == QpType::xrc_send || t == QpType::xrc_recv; }
inline constexpr bool is_xrc(QpType t) { return t == QpType::xrc_send || t == QpType::xrc_recv; }

enum class QpState : uint8_t { reset = 0, init = 1, rtr = 2, rts = 3, sqd = 4, sqe = 5, err = 6 };

const char* to_string(QpState s);
const char* to_string(QpType t);

/// ibv_qp_attr_mask bits.
enum QpAttrMask : uint32_t {
  kAttrState = 1u << 0,
  kAttrCurState = 1u << 1,
  kAttrEnSqdAsyncNotify = 1u << 2,
  kAttrAccessFlags = 1u << 3,
  kAttrPkeyIndex = 1u << 4,
  kAttrPort = 1u << 5,
  kAttrQkey = 1u << 6,
  kAttrAv = 1u << 7,
  kAttrPathMtu = 1u << 8,
  kAttrTimeout = 1u << 9,
  kAttrRetryCnt = 1u << 10,
  kAttrRnrRetry = 1u << 11,
  kAttrRqPsn = 1u << 12,
  kAttrMaxQpRdAtomic = 1u << 13,
  kAttrAltPath = 1u << 14,
  kAttrMinRnrTimer = 1u << 15,
  kAttrSqPsn = 1u << 16,
  kAttrMaxDestRdAtomic = 1u << 17,
  kAttrPathMigState = 1u << 18,
  kAttrCap = 1u << 19,
  kAttrDestQpn = 1u << 20,
  kAttrRateLimit = 1u << 25,
};

/// ibv_access_flags bits droce knows.
enum AccessFlags : uint32_t {
  kAccessLocalWrite = 1u << 0,
  kAccessRemoteWrite = 1u << 1,
  kAccessRemoteRead = 1u << 2,
  kAccessRemoteAtomic = 1u << 3,
  kAccessMwBind = 1u << 4,
  kAccessZeroBased = 1u << 5,
  kAccessOnDemand = 1u << 6,
  kAccessHugetlb = 1u << 7,
  /// IBA 1.5 FLUSH (rdma-core 45's IBV_ACCESS_FLUSH_GLOBAL and _PERSISTENT; Debian 12's
  /// rdma-core 44 has no name for them, the kernel's uverbs ABI has these values).
  kAccessFlushGlobal = 1u << 8,
  kAccessFlushPersistent = 1u << 9,
  kAccessRelaxedOrdering = 1u << 20,
};

/// ibv_mtu: 1 = 256 ... 5 = 4096.
enum class PathMtu : uint8_t { mtu256 = 1, mtu512 = 2, mtu1024 = 3, mtu2048 = 4, mtu4096 = 5 };
inline uint32_t mtu_bytes(PathMtu m) { return 128u << static_cast<uint8_t>(m); }
/// The largest path MTU whose packets fit a port's Ethernet MTU (the IP
/// packet size): the payload plus IPv6 (40), UDP (8), BTH (12), the largest
/// extension headers a packet with a payload has (RETH and ImmDt of an RDMA
/// WRITE Only with Immediate, 20) and the ICRC (4) must fit.
inline PathMtu path_mtu_for(uint32_t ethernet_mtu) {
  constexpr uint32_t kOverhead = 84;
  for (auto m : {PathMtu::mtu4096, PathMtu::mtu2048, PathMtu::mtu1024, PathMtu::mtu512})
    if (ethernet_mtu >= mtu_bytes(m) + kOverhead) return m;
  return PathMtu::mtu256;
}

/// ibv_mig_state.
enum class MigState : uint8_t { migrated = 0, rearm = 1, armed = 2 };

/// Where a QP's (or a UD AH's) packets go: the RoCEv2 rendering of an
/// address vector. The GIDs are IP addresses in GID form (IPv4-mapped or
/// IPv6); MACs are resolved by the net layer before the engine sees them.
struct AddressVector {
  std::array<uint8_t, 16> dgid{};
  std::array<uint8_t, 16> sgid{};
  uint8_t sgid_index = 0;
  std::array<uint8_t, 6> dmac{};
  std::array<uint8_t, 6> smac{};
  uint16_t vlan_id = 0xffff;  ///< 0xffff: untagged
  uint8_t sl = 0;             ///< 802.1p priority when tagged
  uint8_t traffic_class = 0;  ///< IP TOS / traffic class
  uint8_t hop_limit = 64;
  uint32_t flow_label = 0;
  bool is_global = true;      ///< RoCEv2 always routes by GID
};

/// ibv_qp_cap.
struct QpCap {
  uint32_t max_send_wr = 0;
  uint32_t max_recv_wr = 0;
  uint32_t max_send_sge = 0;
  uint32_t max_recv_sge = 0;
  uint32_t max_inline_data = 0;
};

/// ibv_qp_attr, the parts RoCE uses.
struct QpAttr {
  QpState qp_state = QpState::reset;
  QpState cur_qp_state = QpState::reset;
  PathMtu path_mtu = PathMtu::mtu1024;
  MigState path_mig_state = MigState::migrated;
  uint32_t qkey = 0;
  uint32_t rq_psn = 0;
  uint32_t sq_psn = 0;
  uint32_t dest_qp_num = 0;
  uint32_t qp_access_flags = 0;
  QpCap cap;
  AddressVector ah_attr;
  AddressVector alt_ah_attr;
  uint16_t pkey_index = 0;
  uint16_t alt_pkey_index = 0;
  uint8_t en_sqd_async_notify = 0;
  uint8_t sq_draining = 0;
  uint8_t max_rd_atomic = 0;       ///< outstanding READs/atomics this QP may issue
  uint8_t max_dest_rd_atomic = 0;  ///< READs/atomics it accepts (responder resources)
  uint8_t min_rnr_timer = 0;       ///< 5-bit code
  uint8_t port_num = 1;
  uint8_t timeout = 0;             ///< local ACK timeout 4.096 us << timeout; 0 = infinite
  uint8_t retry_cnt = 0;           ///< 3 bits
  uint8_t rnr_retry = 0;           ///< 3 bits; 7 = infinite
  uint8_t alt_port_num = 0;
  uint8_t alt_timeout = 0;
  uint32_t rate_limit = 0;
};

/// What the device allows (ibv_device_attr, the parts modify/create check).
struct DeviceLimits {
  uint32_t max_qp_wr = 16384;
  uint32_t max_sge = 32;
  uint32_t max_inline_data = 256;
  /// mlx5's: libfabric's rxm sizes its CQs by its universe (256 peers) and asks for more than
  /// 65536 by default; a CQ's ring is shared memory that grows as it is written (session.cc).
  uint32_t max_cqe = 4194303;
  uint8_t max_qp_rd_atom = 16;       ///< cap on max_dest_rd_atomic (as responder)
  uint8_t max_qp_init_rd_atom = 16;  ///< cap on max_rd_atomic (as initiator)
  uint16_t max_pkeys = 1;
  uint8_t phys_port_cnt = 1;
  PathMtu max_mtu = PathMtu::mtu4096;
  /// Multicast (UD): groups, QPs per group, attachments in all (rxe's figures).
  uint32_t max_mcast_grp = 8192;
  uint32_t max_mcast_qp_attach = 56;
  uint32_t max_total_mcast_qp_attach = 0x70000;
};

/// ibv_wr_opcode.
enum class WrOpcode : uint8_t {
  rdma_write = 0,
  rdma_write_with_imm = 1,
  send = 2,
  send_with_imm = 3,
  rdma_read = 4,
  atomic_cmp_and_swp = 5,
  atomic_fetch_and_add = 6,
  local_inv = 7,
  bind_mw = 8,
  send_with_inv = 9,
  flush = 14,         ///< IBV_WR_FLUSH (rdma-core 45 on; 44 lacks it)
  atomic_write = 15,  ///< IBV_WR_ATOMIC_WRITE
};

/// ibv_mw_type.
enum class MwType : uint8_t { type1 = 1, type2 = 2 };

/// ibv_send_flags.
enum SendFlags : uint32_t {
  kSendFence = 1u << 0,
  kSendSignaled = 1u << 1,
  kSendSolicited = 1u << 2,
  kSendInline = 1u << 3,
};

/// ibv_wc_status.
enum class WcStatus : uint8_t {
  success = 0,
  loc_len_err = 1,
  loc_qp_op_err = 2,
  loc_prot_err = 4,
  wr_flush_err = 5,
  bad_resp_err = 7,
  loc_access_err = 8,
  rem_inv_req_err = 9,
  mw_bind_err = 6,
  rem_access_err = 10,
  rem_op_err = 11,
  retry_exc_err = 12,
  rnr_retry_exc_err = 13,
  fatal_err = 19,
  resp_timeout_err = 20,
  general_err = 21,
};
const char* to_string(WcStatus s);

/// ibv_wc_opcode.
enum class WcOpcode : uint8_t {
  send = 0,
  rdma_write = 1,
  rdma_read = 2,
  comp_swap = 3,
  fetch_add = 4,
  bind_mw = 5,
  local_inv = 6,
  flush = 8,          ///< IBV_WC_FLUSH (rdma-core 45 on)
  atomic_write = 9,   ///< IBV_WC_ATOMIC_WRITE
  recv = 128,
  recv_rdma_with_imm = 129,
};

/// ibv_wc_flags.
enum WcFlags : uint32_t {
  kWcGrh = 1u << 0,
  kWcWithImm = 1u << 1,
  kWcWithInv = 1u << 3,
};

/// ibv_sge.
struct Sge {
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
};

inline constexpr uint32_t kMaxSge = 32;

/// ibv_send_wr, flattened; the scatter list lives beside it (see Qp).
struct SendWr {
  uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::send;
  uint32_t send_flags = 0;
  uint32_t imm_data = 0;          ///< host-order value of the wire's big-endian bytes
  uint32_t invalidate_rkey = 0;   ///< SEND_WITH_INV, LOCAL_INV
  uint64_t remote_addr = 0;       ///< RDMA, atomics, ATOMIC WRITE, FLUSH
  uint32_t rkey = 0;
  /// Atomics; ATOMIC WRITE: the 8 bytes to write, as they lie in memory (memcpy'd in and out);
  /// FLUSH: the length of the range to flush (at most 2^31).
  uint64_t compare_add = 0;
  uint64_t swap = 0;
  uint32_t ah = 0;                ///< UD: address handle id
  uint32_t remote_qpn = 0;        ///< UD; XRC send: the destination XRC SRQ number (its XRCETH)
  uint32_t remote_qkey = 0;       ///< UD; MSB set: use the QP's Q_Key (IBA 10.2.5)
  /// BIND_MW (ibv_send_wr's bind_mw): the window is named by its current
  /// R_Key in invalidate_rkey, its new R_Key (whose low 8 bits are the new
  /// tag) in rkey, the range in remote_addr and bind_length; an MR's L_Key of
  /// 0 with length 0 unbinds a type 1 window.
  uint32_t bind_mr_lkey = 0;
  uint32_t bind_access = 0;
  uint64_t bind_length = 0;
  /// FLUSH (ibv_wr_flush): placement type (kFlushGlobal/kFlushPersistent bits of
  /// rocev2/headers.h, ibv_placement_type) and selectivity level (0 range, 1 whole region).
  uint8_t flush_type = 0;
  uint8_t flush_level = 0;
  uint32_t num_sge = 0;
  Sge sg_list[kMaxSge];
};

/// ibv_recv_wr, flattened.
struct RecvWr {
  uint64_t wr_id = 0;
  uint32_t num_sge = 0;
  Sge sg_list[kMaxSge];
};

/// ibv_wc: every field verbs programs read.
struct Completion {
  uint64_t wr_id = 0;
  WcStatus status = WcStatus::success;
  WcOpcode opcode = WcOpcode::send;
  uint32_t vendor_err = 0;
  uint32_t byte_len = 0;
  uint32_t imm_data = 0;          ///< or the invalidated R_Key with kWcWithInv
  uint32_t qp_num = 0;
  uint32_t src_qp = 0;
  uint32_t wc_flags = 0;
  uint16_t pkey_index = 0;
  uint16_t slid = 0;
  uint8_t sl = 0;
  uint8_t dlid_path_bits = 0;
  /// When the completion was made, CLOCK_MONOTONIC ns (abi::Cqe::timestamp); 0 when the CQ
  /// was not asked for timestamps. The engine leaves it 0: droced stamps what it pushes.
  uint64_t timestamp_ns = 0;
};

}  // namespace droce::abi
