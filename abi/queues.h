#pragma once
// The entries of the shared queues between the provider and droced: send
// WQEs, receive WQEs and CQEs as they sit in abi/shm_ring entries.
//
// These layouts are ABI (see docs/droced.md): fixed-width fields, explicit
// offsets checked by static_assert, append-only evolution through the
// reserved fields. Values use rdma-core's numbering (ibv_wr_opcode,
// ibv_send_flags, ibv_wc_status, ibv_wc_opcode, ibv_wc_flags).

#include <cstddef>
#include <cstdint>

namespace droce::abi {

/// One scatter/gather entry (ibv_sge).
struct WqeSge {
  uint64_t addr;
  uint32_t length;
  uint32_t lkey;
};
static_assert(sizeof(WqeSge) == 16);

/// A send WQE's header; num_sge WqeSge entries or inline_len bytes follow.
/// A BIND_MW WQE (no SGEs) carries the window's current R_Key in imm_or_inv,
/// its new R_Key in rkey, the address in remote_addr, the length in
/// compare_add and the MR's L_Key | access flags << 32 in swap. An ATOMIC
/// WRITE (no SGEs) carries its 8 bytes in compare_add; a FLUSH (no SGEs) its
/// length in compare_add and placement type | selectivity level << 8 in swap.
struct SendWqeHeader {
  uint64_t wr_id;
  uint64_t remote_addr;
  uint64_t compare_add;
  uint64_t swap;
  uint32_t rkey;
  uint32_t imm_or_inv;   ///< immediate data (as the wire's bytes read big-endian) or the R_Key to invalidate
  uint32_t ah;           ///< UD
  uint32_t remote_qpn;   ///< UD; XRC send: the destination XRC SRQ number
  uint32_t remote_qkey;  ///< UD
  uint32_t send_flags;
  uint8_t opcode;
  uint8_t reserved0;
  uint16_t num_sge;
  uint32_t inline_len;
};
static_assert(sizeof(SendWqeHeader) == 64);
static_assert(offsetof(SendWqeHeader, rkey) == 32 && offsetof(SendWqeHeader, send_flags) == 52);
static_assert(offsetof(SendWqeHeader, opcode) == 56 && offsetof(SendWqeHeader, num_sge) == 58);
static_assert(offsetof(SendWqeHeader, inline_len) == 60);

/// A receive WQE's header; num_sge WqeSge entries follow.
struct RecvWqeHeader {
  uint64_t wr_id;
  uint16_t num_sge;
  uint16_t reserved0;
  uint32_t reserved1;
};
static_assert(sizeof(RecvWqeHeader) == 16);

/// A completion (ibv_wc).
struct Cqe {
  uint64_t wr_id;
  uint32_t byte_len;
  uint32_t imm_or_inv;
  uint32_t qp_num;
  uint32_t src_qp;
  uint32_t vendor_err;
  uint32_t wc_flags;
  uint16_t pkey_index;
  uint16_t slid;
  uint8_t status;
  uint8_t opcode;
  uint8_t sl;
  uint8_t dlid_path_bits;
  /// CLOCK_MONOTONIC in ns when droced pushed the completion into the ring, for a CQ created
  /// with kCqCreateTimestamp (ibv_wc_read_completion_ts: the device clock runs at 1 GHz); 0
  /// otherwise, and from a droced before ABI minor 11 (was reserved).
  uint64_t timestamp;
  uint8_t reserved[16];
};
static_assert(sizeof(Cqe) == 64);
static_assert(offsetof(Cqe, qp_num) == 16 && offsetof(Cqe, wc_flags) == 28);
static_assert(offsetof(Cqe, status) == 36 && offsetof(Cqe, opcode) == 37);
static_assert(offsetof(Cqe, timestamp) == 40);

// ---- The per-client context region (docs/droced.md) ------------------------

inline constexpr uint32_t kContextMagic = 0x78746364;  // "dctx"
inline constexpr uint32_t kContextVersion = 1;

enum DeviceState : uint32_t { kDeviceRunning = 1, kDeviceFatal = 2 };

/// The first page of a client's context region. droced writes the first line;
/// the client reads it. `daemon_sleeping` sits on its own cache line: the
/// client reads it after each doorbell and, when set, stamps waker_cpu and
/// waker_ns (droced's spin uses them, droced/spin_policy.h; a hint, 0
/// from older clients) and writes the wake eventfd.
struct ContextPage {
  uint32_t magic;
  uint32_t version;
  uint32_t device_state;  ///< DeviceState
  uint32_t reserved0;
  uint64_t heartbeat;     ///< droced's loop count, now and then
  uint8_t reserved1[40];
  uint32_t daemon_sleeping;
  int32_t waker_cpu;  ///< client: the CPU it last woke droced from
  uint64_t waker_ns;  ///< client: when (CLOCK_MONOTONIC)
  uint8_t reserved2[48];
};
static_assert(sizeof(ContextPage) == 128);
static_assert(offsetof(ContextPage, daemon_sleeping) == 64);
static_assert(offsetof(ContextPage, waker_ns) == 72);

enum DoorbellKind : uint16_t {
  kDoorbellSq = 1,     ///< id: QPN; the send ring has new WQEs
  kDoorbellRq = 2,     ///< id: QPN; the receive ring has new WQEs
  kDoorbellSrq = 3,    ///< id: SRQ id
  kDoorbellArmCq = 4,  ///< id: CQ id (solicited-only is in the CQ block's CqArm bits)
};

/// An entry of the context's doorbell ring (client -> droced).
struct Doorbell {
  uint16_t kind;  ///< DoorbellKind
  uint16_t arg;
  uint32_t id;
};
static_assert(sizeof(Doorbell) == 8);

/// An entry of the context's async event ring (droced -> client):
/// ibv_event_type and the QPN, CQ id, SRQ id or port.
struct EventEntry {
  uint32_t type;
  uint32_t id;
};
static_assert(sizeof(EventEntry) == 8);

/// The start of a QP's or SRQ's region. A queue's flag is 1 while a doorbell
/// for it is in the doorbell ring: the client sets it (exchange) before
/// pushing a doorbell and skips the push when it was already set; droced
/// clears it before it drains the queue. So each queue has at most one
/// doorbell in flight and the doorbell ring cannot overflow.
///
/// A CQ's region starts with one too: sq_pending is its arm doorbell's flag,
/// rq_pending the arm request (CqArm bits, or'ed in by the client), and
/// cq_arm_index the CQ ring's producer index the client had seen when it
/// armed (valid with kCqArmIndex): droced fires at once when completions
/// were pushed after that, since an arm is meant to take effect when
/// ibv_req_notify_cq() returns, not when droced reads the doorbell.
struct QueueDoorbellBlock {
  uint32_t sq_pending;
  uint32_t cq_arm_index;  ///< a CQ's only (was reserved: 0 from older clients)
  uint8_t reserved0[56];
  uint32_t rq_pending;  ///< also the SRQ's; a CQ's CqArm bits
  uint8_t reserved1[60];
};
static_assert(sizeof(QueueDoorbellBlock) == 128);
static_assert(offsetof(QueueDoorbellBlock, cq_arm_index) == 4 && offsetof(QueueDoorbellBlock, rq_pending) == 64);

/// A CQ's arm request bits (QueueDoorbellBlock::rq_pending of its region).
enum CqArm : uint32_t {
  kCqArmSolicited = 1u << 0,  ///< the next solicited (or unsuccessful) completion
  kCqArmNext = 1u << 1,       ///< the next completion
  kCqArmIndex = 1u << 2,      ///< cq_arm_index is set
};

/// Bytes of a send WQE entry for a QP's limits (a multiple of 64).
constexpr uint32_t send_wqe_size(uint32_t max_sge, uint32_t max_inline) {
  const uint32_t body = max_sge * uint32_t{sizeof(WqeSge)} > max_inline ? max_sge * uint32_t{sizeof(WqeSge)} : max_inline;
  return (uint32_t{sizeof(SendWqeHeader)} + body + 63) & ~63u;
}
/// Bytes of a receive WQE entry (a multiple of 16).
constexpr uint32_t recv_wqe_size(uint32_t max_sge) {
  return uint32_t{sizeof(RecvWqeHeader)} + max_sge * uint32_t{sizeof(WqeSge)};
}

}  // namespace droce::abi
