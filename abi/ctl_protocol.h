#pragma once
// The control protocol between clients (droce's rdma-core provider, the
// droce CLI) and droced: versioned, size-prefixed messages over a
// SOCK_SEQPACKET socket (core/unix_socket.h), descriptors beside them.
//
// Evolution is append-only. Every message starts with a CtlHeader whose
// `length` covers the whole message; a body struct may only ever grow at its
// end. A receiver decodes min(length, sizeof body) bytes and zero-fills the
// rest, so a newer daemon serves an older client (missing fields read as 0)
// and an older daemon ignores fields it does not know. A message shorter than
// its type's first version is malformed. A different major version is
// refused with a clear error (kAbiMajor); minors interoperate.
//
// Every struct is packed into fixed-width fields with static_asserts on its
// size and offsets: it crosses process (and possibly compiler) boundaries.
//
// Control path only.

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

#include "abi/flow.h"

namespace droce::abi::ctl {

inline constexpr uint32_t kMagic = 0x45435244;  // "DRCE" little-endian
inline constexpr uint16_t kAbiMajor = 1;
/// 1: register_channel, and CreateCqRequest's channel and user_handle.
/// 2: rereg_mr.
/// 3: resize_cq.
/// 4: attach_mcast, detach_mcast; QueryDeviceReply's multicast limits.
/// 5: CreateQpRequest's flags (kQpBlockSelfMcastLoopback).
/// 6: destroy_cq's reply (DestroyCqReply).
/// 7: fault (FaultRequest), `droce fault`.
/// 8: capture (CaptureRequest), `droce capture`.
/// 9: cc (CcRequest), `droce cc`.
/// 10: alloc_mw, dealloc_mw (memory windows); QueryDeviceReply's max_mw.
/// 11: completion timestamps (CreateCqRequest's kCqCreateTimestamp, Cqe::timestamp); device
///     memory (alloc_dm, free_dm, reg_dm_mr); QueryDeviceReply's device_caps and max_dm_size.
/// 12: XRC: open_xrcd, close_xrcd, create_xrc_srq, create_xrc_qp, open_qp; create_qp of XRC send
///     QPs (qp_type 9); QueryDeviceReply's max_xrcds.
/// 13: on-demand paging: reg_odp_mr (RegOdpMrRequest and the client's /proc/self/mem);
///     DeviceCaps' kDeviceCapOnDemandPaging.
/// 14: raw packet QPs (create_qp of qp_type 8, for a client with CAP_NET_RAW) and their flow
///     rules: create_flow, destroy_flow; set_rss (receive-side scaling over WQs).
/// 15: reg_odp_mr's second descriptor, the client's /proc/self/pagemap (page faults off the
///     worker: droced/process_memory.h).
inline constexpr uint16_t kAbiMinor = 15;
/// Largest message either side sends or accepts.
inline constexpr size_t kMaxMessage = 4096;

enum class MsgType : uint16_t {
  hello = 1,
  query_device = 2,
  query_port = 3,
  alloc_pd = 4,
  dealloc_pd = 5,
  reg_mr = 6,
  dereg_mr = 7,
  create_cq = 8,
  destroy_cq = 9,
  create_srq = 10,
  modify_srq = 11,
  destroy_srq = 12,
  create_qp = 13,
  modify_qp = 14,
  query_qp = 15,
  destroy_qp = 16,
  create_ah = 17,
  destroy_ah = 18,
  query_srq = 19,
  query_gid = 20,
  stats = 21,  ///< read-only: droced's state as JSON in a memfd (the droce CLI)
  register_channel = 22,  ///< minor 1: a completion channel's write end (RegisterChannelRequest)
  rereg_mr = 23,          ///< minor 2: ibv_rereg_mr in place (ReregMrRequest)
  resize_cq = 24,         ///< minor 3: ibv_resize_cq, the ring moved to a new region (ResizeCqRequest)
  attach_mcast = 25,      ///< minor 4: ibv_attach_mcast (McastRequest)
  detach_mcast = 26,      ///< minor 4: ibv_detach_mcast (McastRequest)
  fault = 27,             ///< minor 7: `droce fault`: set or clear a fault rule (FaultRequest)
  capture = 28,           ///< minor 8: `droce capture`: stream frames as pcapng (CaptureRequest)
  cc = 29,                ///< minor 9: `droce cc`: set DCQCN parameters (CcRequest)
  alloc_mw = 30,          ///< minor 10: ibv_alloc_mw (AllocMwRequest; reply IdReply, the R_Key)
  dealloc_mw = 31,        ///< minor 10: ibv_dealloc_mw (IdRequest: the window's current R_Key)
  alloc_dm = 32,          ///< minor 11: ibv_alloc_dm (AllocDmRequest; AllocDmReply and the region)
  free_dm = 33,           ///< minor 11: ibv_free_dm (IdRequest: the DM's id)
  reg_dm_mr = 34,         ///< minor 11: ibv_reg_dm_mr (RegDmMrRequest; reply RegMrReply)
  reg_odp_mr = 35,        ///< minor 13: ibv_reg_mr with IBV_ACCESS_ON_DEMAND (RegOdpMrRequest; reply RegMrReply)
  create_flow = 36,       ///< minor 14: ibv_create_flow on a raw packet QP (CreateFlowRequest; reply IdReply)
  destroy_flow = 37,      ///< minor 14: ibv_destroy_flow (IdRequest: the rule's id)
  set_rss = 38,           ///< minor 14: a raw QP spreads over receive queues (RssRequest)
  // 39: unused.
  open_xrcd = 40,         ///< minor 12: ibv_open_xrcd (OpenXrcdRequest, a file's fd beside; reply IdReply)
  close_xrcd = 41,        ///< minor 12: ibv_close_xrcd (IdRequest)
  create_xrc_srq = 42,    ///< minor 12: ibv_create_srq_ex of IBV_SRQT_XRC (CreateXrcSrqRequest; as create_srq's reply)
  create_xrc_qp = 43,     ///< minor 12: ibv_create_qp_ex of IBV_QPT_XRC_RECV (XrcQpRequest; reply XrcQpReply)
  open_qp = 44,           ///< minor 12: ibv_open_qp (XrcQpRequest; reply XrcQpReply)
};
inline constexpr uint16_t kLastMsgType = static_cast<uint16_t>(MsgType::open_qp);

enum CtlFlags : uint16_t {
  kFlagReply = 1u << 0,
};

struct CtlHeader {
  uint32_t magic;
  uint16_t abi_major;
  uint16_t abi_minor;
  uint16_t type;    ///< MsgType
  uint16_t flags;   ///< CtlFlags
  uint32_t length;  ///< whole message, this header included
  uint32_t seq;     ///< the request's number; a reply echoes it
  int32_t status;   ///< replies: 0 or -errno
};
static_assert(sizeof(CtlHeader) == 24);
static_assert(offsetof(CtlHeader, type) == 8 && offsetof(CtlHeader, length) == 12);
static_assert(offsetof(CtlHeader, seq) == 16 && offsetof(CtlHeader, status) == 20);

/// Why a message was refused before its body was read.
enum class HeaderCheck : uint8_t { ok, too_short, bad_magic, major_mismatch, bad_length, unknown_type };
const char* to_string(HeaderCheck c);

/// Checks the header of `msg` as received (its real size). `*hdr` gets a copy.
HeaderCheck check_header(std::span<const uint8_t> msg, CtlHeader* hdr);

// ---- Bodies (version 1.0). Append only; never reorder or resize a field. ----

struct HelloRequest {
  uint32_t pid;
  uint32_t flags;
  char program[32];  ///< the client's comm name, for `droce clients`
};
static_assert(sizeof(HelloRequest) == 40);

/// Three descriptors come beside it: the context region (abi/queues.h
/// ContextPage, then the doorbell ring, then the async event ring), the
/// async eventfd droced writes when it queues an event, and the wake eventfd
/// the client writes after a doorbell when droced says it sleeps.
struct HelloReply {
  uint64_t node_guid;
  uint32_t context_id;
  uint32_t phys_port_cnt;
  char device_name[64];  ///< "droce0"
  char daemon_version[32];
  uint64_t context_bytes;
  uint32_t doorbell_offset;
  uint32_t doorbell_entries;
  uint32_t event_offset;
  uint32_t event_entries;
};
static_assert(sizeof(HelloReply) == 136);
static_assert(offsetof(HelloReply, context_bytes) == 112);

/// Hello's descriptors, in order.
inline constexpr int kHelloFdContext = 0, kHelloFdAsync = 1, kHelloFdWake = 2;

struct IdRequest {  ///< dealloc_pd, dereg_mr (lkey), destroy_* (id), query_port (port), query_qp (qpn)
  uint32_t id;
  uint32_t reserved;
};
static_assert(sizeof(IdRequest) == 8);

struct IdReply {  ///< alloc_pd (pd), create_ah (ah)
  uint32_t id;
  uint32_t reserved;
};
static_assert(sizeof(IdReply) == 8);

/// destroy_cq's reply (minor 6; an older droced's has no body: zeros). How many
/// completion-event records droced wrote to the CQ's channel over the CQ's life,
/// all of them before this reply: the client takes back those still unread and
/// waits for the application to acknowledge the rest, which have left the
/// channel (the kernel's comp_events_reported, counted where the record is
/// written, not after a reader's read).
struct DestroyCqReply {
  uint64_t comp_events_written;
};
static_assert(sizeof(DestroyCqReply) == 8);

/// The registered range [va, va + length) lies in whole pages
/// [page_va, page_va + sum of segment lengths); each segment is a run of
/// those pages backed by one memfd, whose descriptor comes beside the message
/// in segment order. `segment_count` MrSegment entries follow the body.
struct RegMrRequest {
  uint32_t pd;
  uint32_t access;
  uint64_t va;
  uint64_t length;
  uint64_t page_va;
  uint32_t segment_count;
  uint32_t reserved;
};
static_assert(sizeof(RegMrRequest) == 40);
static_assert(offsetof(RegMrRequest, va) == 8 && offsetof(RegMrRequest, page_va) == 24);

/// ibv_reg_mr with IBV_ACCESS_ON_DEMAND: no pages are sent. One descriptor comes beside it,
/// the client's /proc/self/mem opened read-write (the client may open its own; droced needs no
/// right over the client): droced reads and writes [va, va + length) through it, so pages
/// fault in the client's address space when first touched. A session keeps the first such
/// descriptor it receives; later ones are closed. From minor 15 a second descriptor may follow
/// the first: the client's /proc/self/pagemap opened read-only, by which droced sees which pages
/// are present and brings the others in off its worker (an older droced refuses two: EINVAL).
/// va 0 with length UINT64_MAX is implicit ODP (the whole address space). `access` includes
/// kAccessOnDemand.
struct RegOdpMrRequest {
  uint32_t pd;
  uint32_t access;
  uint64_t va;
  uint64_t length;
};
static_assert(sizeof(RegOdpMrRequest) == 24);
static_assert(offsetof(RegOdpMrRequest, va) == 8 && offsetof(RegOdpMrRequest, length) == 16);

struct MrSegment {
  uint64_t length;     ///< bytes, a page multiple
  uint64_t fd_offset;  ///< where the segment starts in its memfd, a page multiple
};
static_assert(sizeof(MrSegment) == 16);
/// Most segments one registration may have (one descriptor each).
inline constexpr uint32_t kMaxMrSegments = 8;

struct RegMrReply {
  uint32_t lkey;
  uint32_t rkey;
};
static_assert(sizeof(RegMrReply) == 8);

/// An address vector as a client gives it (ibv_ah_attr with a GRH). droced
/// fills in the MACs and the VLAN from its own port and neighbour table;
/// query_qp reports them back.
struct WireAv {
  uint8_t dgid[16];
  uint32_t flow_label;
  uint8_t sgid_index;
  uint8_t hop_limit;
  uint8_t traffic_class;
  uint8_t sl;
  uint8_t is_global;
  uint8_t port_num;
  uint16_t reserved0;
  uint8_t dmac[6];   ///< query_qp only
  uint16_t vlan_id;  ///< query_qp only; 0xffff untagged
  uint32_t reserved1[3];
};
static_assert(sizeof(WireAv) == 48);
static_assert(offsetof(WireAv, sgid_index) == 20 && offsetof(WireAv, dmac) == 28);

/// ibv_qp_attr's fields, fixed width (values as in abi/verbs.h).
struct WireQpAttr {
  uint32_t qp_state;
  uint32_t cur_qp_state;
  uint32_t path_mtu;
  uint32_t path_mig_state;
  uint32_t qkey;
  uint32_t rq_psn;
  uint32_t sq_psn;
  uint32_t dest_qp_num;
  uint32_t qp_access_flags;
  uint32_t max_send_wr;
  uint32_t max_recv_wr;
  uint32_t max_send_sge;
  uint32_t max_recv_sge;
  uint32_t max_inline_data;
  uint16_t pkey_index;
  uint16_t alt_pkey_index;
  uint8_t en_sqd_async_notify;
  uint8_t sq_draining;
  uint8_t max_rd_atomic;
  uint8_t max_dest_rd_atomic;
  uint8_t min_rnr_timer;
  uint8_t port_num;
  uint8_t timeout;
  uint8_t retry_cnt;
  uint8_t rnr_retry;
  uint8_t alt_port_num;
  uint8_t alt_timeout;
  uint8_t reserved0;
  uint32_t rate_limit;
  uint32_t reserved1;
  WireAv ah_attr;
  WireAv alt_ah_attr;
};
static_assert(sizeof(WireQpAttr) == 176);
static_assert(offsetof(WireQpAttr, pkey_index) == 56 && offsetof(WireQpAttr, ah_attr) == 80);

struct QueryDeviceReply {
  uint64_t node_guid;
  uint64_t sys_image_guid;
  uint64_t max_mr_size;
  uint64_t page_size_cap;
  uint32_t vendor_id;
  uint32_t vendor_part_id;
  uint32_t hw_ver;
  uint32_t max_qp;
  uint32_t max_qp_wr;
  uint32_t max_sge;
  uint32_t max_cq;
  uint32_t max_cqe;
  uint32_t max_mr;
  uint32_t max_pd;
  uint32_t max_qp_rd_atom;
  uint32_t max_qp_init_rd_atom;
  uint32_t max_srq;
  uint32_t max_srq_wr;
  uint32_t max_srq_sge;
  uint32_t max_ah;
  uint32_t max_inline_data;
  uint32_t atomic_cap;  ///< ibv_atomic_cap
  uint32_t phys_port_cnt;
  uint32_t max_pkeys;
  char fw_ver[64];
  // minor 4 (an older droced's reply ends before: zeros, no multicast)
  uint32_t max_mcast_grp;
  uint32_t max_mcast_qp_attach;
  uint32_t max_total_mcast_qp_attach;
  // minor 10 (zero from an older droced: no memory windows)
  uint32_t max_mw;
  // minor 11 (zero from an older droced: no timestamps, no device memory)
  uint32_t device_caps;  ///< DeviceCaps
  uint32_t reserved0;
  uint64_t max_dm_size;  ///< bytes one alloc_dm may ask for; 0: no device memory
  // minor 12 (zero from an older droced: no XRC)
  uint32_t max_xrcds;
  uint32_t reserved_minor12;
};
static_assert(sizeof(QueryDeviceReply) == 216);
static_assert(offsetof(QueryDeviceReply, device_caps) == 192 && offsetof(QueryDeviceReply, max_dm_size) == 200);
/// QueryDeviceReply::device_caps.
enum DeviceCaps : uint32_t {
  /// CQs created with kCqCreateTimestamp carry Cqe::timestamp: CLOCK_MONOTONIC ns, so the
  /// device clock runs at 1 GHz (hca_core_clock 1,000,000 kHz) and is the host's.
  kDeviceCapCompletionTimestamp = 1u << 0,
  /// reg_odp_mr works: explicit and implicit on-demand paging (minor 13).
  kDeviceCapOnDemandPaging = 1u << 1,
};

/// ibv_attach_mcast / ibv_detach_mcast: QP `qpn` and group `gid` (16 bytes, network order).
struct McastRequest {
  uint32_t qpn;
  uint16_t lid;  ///< as the verb takes it; RoCE has no LIDs (0)
  uint16_t reserved;
  uint8_t gid[16];
};
static_assert(sizeof(McastRequest) == 24);

/// ibv_create_flow (minor 14): a rule steering received frames to raw packet QP `qpn`.
struct CreateFlowRequest {
  uint32_t qpn;
  uint16_t priority;  ///< lower first: of the normal rules a frame matches, only the best priority's take it
  uint8_t type;       ///< FlowType
  uint8_t flags;      ///< none defined: nonzero is EINVAL
  FlowMatch match;
};
static_assert(sizeof(CreateFlowRequest) == 8 + sizeof(FlowMatch));

/// set_rss (minor 14): raw packet QP `qpn` spreads the frames its rules pick over the raw QPs
/// `wqs[0 .. 1 << log_table)` (the provider's WQs) by the Toeplitz hash of `fields`
/// (IBV_RX_HASH_* bits) under `key`.
struct RssRequest {
  uint32_t qpn;
  uint32_t fields;
  uint8_t key_len;    ///< at most 40
  uint8_t log_table;  ///< at most 7
  uint16_t reserved;
  uint8_t key[40];
  uint32_t wqs[128];
};
static_assert(sizeof(RssRequest) == 12 + 40 + 512);

struct QueryPortReply {
  uint32_t state;       ///< ibv_port_state
  uint32_t max_mtu;     ///< ibv_mtu
  uint32_t active_mtu;  ///< ibv_mtu
  uint32_t gid_tbl_len;
  uint32_t port_cap_flags;
  uint32_t max_msg_sz;
  uint32_t pkey_tbl_len;
  uint8_t link_layer;  ///< IBV_LINK_LAYER_ETHERNET = 2
  uint8_t phys_state;  ///< 5 link up, 3 disabled
  uint8_t active_width;
  uint8_t active_speed;
  uint32_t netdev_mtu;  ///< the port's Ethernet MTU
  uint32_t link_speed_mbps;
  uint32_t reserved;
};
static_assert(sizeof(QueryPortReply) == 44);

struct QueryGidRequest {
  uint32_t port;
  uint32_t index;
};
struct QueryGidReply {
  uint8_t gid[16];
  uint32_t type;  ///< 1: RoCE v2
  uint32_t reserved;
};
static_assert(sizeof(QueryGidReply) == 24);

/// One descriptor comes beside the reply: the CQ's region (one ring of Cqe)
/// and then the CQ's eventfd.
struct CreateCqRequest {
  uint32_t cqe;
  uint32_t flags;
  // ---- minor 1 ----
  /// 0: none. Else register_channel's id: when an armed notification fires,
  /// droced writes `user_handle` (8 bytes, an ib_uverbs_comp_event_desc) to
  /// that channel instead of the CQ's eventfd.
  uint32_t channel;
  uint32_t reserved;
  uint64_t user_handle;
};
static_assert(sizeof(CreateCqRequest) == 24 && offsetof(CreateCqRequest, user_handle) == 16);
/// CreateCqRequest::flags (an older droced ignores them: the client asks only a droced of
/// minor 11 or later).
enum CqCreateFlags : uint32_t {
  /// minor 11: stamp every completion pushed into the ring (Cqe::timestamp). Asked for, not
  /// done for every CQ: it costs a clock read per completion.
  kCqCreateTimestamp = 1u << 0,
};
/// CreateCqRequest's first version (minor 0).
inline constexpr size_t kCreateCqRequestV0 = 8;
struct CreateCqReply {
  uint32_t cq_id;
  uint32_t cqe;  ///< entries the CQ holds (>= asked)
  uint64_t region_bytes;
};
static_assert(sizeof(CreateCqReply) == 16);

/// The SRQ's region comes beside the reply: a QueueDoorbellBlock, then the
/// receive ring at ring_offset.
struct CreateSrqRequest {
  uint32_t pd;
  uint32_t max_wr;
  uint32_t max_sge;
  uint32_t srq_limit;
};
struct CreateSrqReply {
  uint32_t srq_id;
  uint32_t max_wr;
  uint32_t max_sge;
  uint32_t ring_entries;
  uint32_t entry_size;
  uint32_t ring_offset;
  uint64_t region_bytes;
};
static_assert(sizeof(CreateSrqReply) == 32);

struct ModifySrqRequest {  ///< also query_srq's reply (srq_id then unused)
  uint32_t srq_id;
  uint32_t mask;  ///< IBV_SRQ_MAX_WR 1, IBV_SRQ_LIMIT 2
  uint32_t max_wr;
  uint32_t srq_limit;
  uint32_t max_sge;
  uint32_t reserved;
};
static_assert(sizeof(ModifySrqRequest) == 24);

struct CreateQpRequest {
  uint32_t pd;
  uint32_t send_cq;
  uint32_t recv_cq;
  uint32_t srq;  ///< 0: none
  uint8_t qp_type;
  uint8_t sq_sig_all;
  uint16_t flags;  ///< minor 5: QpCreateFlags (an older droced ignores them: the client asks first)
  uint32_t max_send_wr;
  uint32_t max_recv_wr;
  uint32_t max_send_sge;
  uint32_t max_recv_sge;
  uint32_t max_inline_data;
};
static_assert(sizeof(CreateQpRequest) == 40);
enum QpCreateFlags : uint16_t {
  /// IBV_QP_CREATE_BLOCK_SELF_MCAST_LB: the QP does not receive the multicast it sent itself.
  kQpBlockSelfMcastLoopback = 1u << 0,
};

/// The QP's region comes beside the reply: a QueueDoorbellBlock, the send
/// ring at sq_offset and the receive ring at rq_offset (none with an SRQ).
struct CreateQpReply {
  uint32_t qpn;
  uint32_t max_send_wr;
  uint32_t max_recv_wr;
  uint32_t max_send_sge;
  uint32_t max_recv_sge;
  uint32_t max_inline_data;
  uint32_t sq_entries;
  uint32_t sq_entry_size;
  uint32_t rq_entries;
  uint32_t rq_entry_size;
  uint32_t sq_offset;
  uint32_t rq_offset;
  uint64_t region_bytes;
};
static_assert(sizeof(CreateQpReply) == 56);

struct ModifyQpRequest {
  uint32_t qpn;
  uint32_t mask;  ///< ibv_qp_attr_mask
  WireQpAttr attr;
};
static_assert(sizeof(ModifyQpRequest) == 184);

struct CreateAhRequest {
  uint32_t pd;
  uint32_t reserved;
  WireAv av;
};
static_assert(sizeof(CreateAhRequest) == 56);

/// A memfd with the text comes beside the reply.
struct StatsReply {
  uint64_t length;
};

/// fault (minor 7): a fault rule of the device (droced/fault_stage.h) set or cleared. Only
/// root or droced's own user may (-EPERM): a rule changes every client's traffic. Reply:
/// FaultReply, the rule's id. set: -EINVAL for a spec that does not parse or a bad direction,
/// -ENOSPC past droced's rule limit; clear: -ENOENT for an unknown id. The rules and what they
/// did are in the stats JSON ("faults").
enum class FaultOp : uint32_t { set = 1, clear = 2 };
struct FaultRequest {
  uint32_t op;         ///< FaultOp
  uint32_t id;         ///< set: 0 for a new rule, else the rule it replaces; clear: 0 for all
  uint32_t qpn;        ///< the local QP whose frames it takes; 0xffffffff: every RoCE frame
  uint32_t direction;  ///< 1 received, 2 sent, 3 both
  uint64_t seed;
  char spec[192];      ///< net/fault_model.h's text form, NUL-terminated
};
static_assert(sizeof(FaultRequest) == 216);
struct FaultReply {
  uint32_t id;
  uint32_t reserved;
};

/// capture (minor 8): the frames this device receives and sends, written as pcapng
/// (net/pcapng.h) to the one fd beside the request (a pipe or a stream socket whose other end
/// the client reads). Only root or droced's own user may (-EPERM): it shows every client's
/// traffic. One capture at a time per device (-EBUSY). It ends when `count` frames were
/// written, when the fd's reader goes away, or when the session that asked closes; droced then
/// writes an Interface Statistics Block (frames seen, frames the capture lost) and closes the
/// fd, so the reader sees EOF. Reply: CaptureReply. -EBADF: no fd; -EINVAL: a bad snaplen.
struct CaptureRequest {
  uint32_t qpn;      ///< only frames to or from this local QP; 0xffffffff: every frame
  uint32_t snaplen;  ///< bytes kept of each frame; 0: droced's largest (CaptureReply says)
  uint64_t count;    ///< frames to write, then end; 0: no limit
};
static_assert(sizeof(CaptureRequest) == 16);
struct CaptureReply {
  uint32_t snaplen;  ///< the snap length in force (droced's record size caps it)
  uint32_t reserved;
};

/// cc (minor 9): the device's DCQCN parameters (rocev2/dcqcn.h) set, as text: NAME=VALUE
/// pairs separated by commas, mlx5's names (or the kernel's debugfs aliases), all or none.
/// Only root or droced's own user may (-EPERM): they change every client's traffic. Every
/// core's engine takes them at its next loop. Reply: no body. -EINVAL: a name, value or range
/// the parser refuses (the CLI checks first, with the reason), or text not NUL-terminated.
/// The parameters in force are in the stats JSON ("cc").
struct CcRequest {
  uint32_t op;          ///< 1: set (the only one; reading is the stats message)
  uint32_t reserved;
  char assignments[248];
};
static_assert(sizeof(CcRequest) == 256);
inline constexpr uint32_t kCcSet = 1;

/// alloc_mw (minor 10): a memory window of `type` (1 or 2, ibv_mw_type) on PD `pd`, unbound.
/// Binding it is a send WR (abi/queues.h, BIND_MW) on a QP of the same PD; droced checks there
/// that the region is the client's, of that PD, and holds the range. Reply: IdReply, the
/// window's R_Key. -EINVAL: an unknown PD or type; -ENOMEM: past max_mw.
struct AllocMwRequest {
  uint32_t pd;
  uint32_t type;
};
static_assert(sizeof(AllocMwRequest) == 8);

/// alloc_dm (minor 11): device memory of `length` bytes (1 .. QueryDeviceReply::max_dm_size),
/// a region droced owns: a sealed memfd, zero-filled, which droced maps and whose descriptor
/// comes beside the reply, so the client maps the same bytes (ibv_memcpy_to_dm and
/// ibv_memcpy_from_dm are plain copies there) while the engine reads and writes them through
/// MRs registered on it (reg_dm_mr). `log_align` (ibv_alloc_dm_attr's log_align_req) up to the
/// page shift: the region starts on a page. -EINVAL: length 0, log_align past the page shift;
/// -ENOMEM: past max_dm_size, which is also the session's total.
struct AllocDmRequest {
  uint64_t length;
  uint32_t log_align;
  uint32_t reserved;
};
static_assert(sizeof(AllocDmRequest) == 16);
struct AllocDmReply {
  uint32_t dm_id;
  uint32_t reserved;
  uint64_t region_bytes;  ///< what to map of the descriptor (length rounded up to a page)
};
static_assert(sizeof(AllocDmReply) == 16);

/// reg_dm_mr (minor 11): an MR on PD `pd` over [offset, offset + length) of device memory
/// `dm`, zero-based (addresses in SGEs and RETHs are offsets from the MR's start, ibv_alloc_dm(3)).
/// `access` as reg_mr's plus kAccessZeroBased, which it must carry. The DM cannot be freed while
/// MRs are on it (free_dm: -EBUSY); such an MR cannot be reregistered (rereg_mr: -EINVAL, as
/// the kernel's uverbs). Reply: RegMrReply; dereg_mr frees it. -EINVAL: an unknown PD or DM,
/// a range outside the DM, access without kAccessZeroBased or with flags reg_mr refuses.
struct RegDmMrRequest {
  uint32_t pd;
  uint32_t dm_id;
  uint32_t access;
  uint32_t reserved;
  uint64_t offset;
  uint64_t length;
};
static_assert(sizeof(RegDmMrRequest) == 32);

/// open_xrcd (minor 12): an XRC domain (IBA A14; ibv_open_xrcd(3)). With kXrcdFile a
/// descriptor comes beside the request: the domain is the one the same file (device and inode)
/// names for every client of this droced, made when `oflags` has O_CREAT and none exists;
/// without, a new domain only this client sees. Reply: IdReply, the domain's id (the same for
/// every client that opened the same file). -EINVAL: O_EXCL and the domain exists, an
/// oflags bit other than O_CREAT and O_EXCL, kXrcdFile without one descriptor; -EAGAIN: no
/// domain for the file and no O_CREAT (the kernel's answers); -ENOMEM: past max_xrcds.
/// A domain lives while a client holds it open or an XRC SRQ or receive QP of it exists.
struct OpenXrcdRequest {
  uint32_t oflags;  ///< O_CREAT, O_EXCL (Linux's values)
  uint32_t flags;   ///< kXrcd*
};
static_assert(sizeof(OpenXrcdRequest) == 8);
inline constexpr uint32_t kXrcdFile = 1u << 0;

/// create_xrc_srq (minor 12): an XRC SRQ of domain `xrcd` (opened by this client) whose receives
/// complete into CQ `cq`; otherwise as create_srq (its reply and region). Its number for
/// ibv_get_srq_num and the XRCETH is the reply's srq_id. -EINVAL: an unknown PD, domain or CQ.
struct CreateXrcSrqRequest {
  CreateSrqRequest srq;
  uint32_t xrcd;
  uint32_t cq;
};
static_assert(sizeof(CreateXrcSrqRequest) == 24);

/// create_xrc_qp (minor 12): an XRC receive QP of domain `xrcd`; it has no queues, so no
/// region comes back. open_qp: the XRC receive QP `qpn` of domain `xrcd` made by any client
/// (ibv_open_qp): this client may then modify, query and destroy it (destroy drops this
/// client's hold; the QP goes with the last). `qp_type` is IBV_QPT_XRC_RECV (10).
/// -EINVAL: a domain this client has not opened, no such QP in it, another type.
struct XrcQpRequest {
  uint32_t xrcd;
  uint32_t qpn;      ///< open_qp only
  uint32_t qp_type;
  uint32_t reserved;
};
static_assert(sizeof(XrcQpRequest) == 16);
struct XrcQpReply {
  uint32_t qpn;
  uint32_t reserved;
};
static_assert(sizeof(XrcQpReply) == 8);

/// rereg_mr (minor 2): the region `lkey` takes the PD, access and range
/// given, keeping its keys (reply: RegMrReply with them). Every field is the
/// region's new value, changed or not. With kReregTranslation the range is a
/// new one, sent as reg_mr sends it (segment_count MrSegment entries after
/// the body, one descriptor each); without, segment_count is 0 and va/length
/// must lie in the pages already registered. -EINVAL for an unknown lkey or
/// PD, or what reg_mr refuses; on failure the region is as it was.
struct ReregMrRequest {
  uint32_t lkey;
  uint32_t flags;  ///< kRereg*
  uint32_t pd;
  uint32_t access;
  uint64_t va;
  uint64_t length;
  uint64_t page_va;
  uint32_t segment_count;
  uint32_t reserved;
};
static_assert(sizeof(ReregMrRequest) == 48);
static_assert(offsetof(ReregMrRequest, va) == 16 && offsetof(ReregMrRequest, segment_count) == 40);
/// ReregMrRequest::flags (ibv_rereg_mr_flags' values).
inline constexpr uint32_t kReregTranslation = 1, kReregPd = 2, kReregAccess = 4;

/// resize_cq (minor 3): CQ `cq_id` gets a ring of at least `cqe` entries in
/// a new region (a QueueDoorbellBlock, then the ring, as create_cq's), whose
/// descriptor comes beside the reply. The completions the client has not
/// consumed yet (the old ring's consumer index up to its producer index) are
/// in the new ring, in order, at the same free-running indexes: the new
/// ring's consumer index is the old one's, so a client's ring positions (its
/// arm index, its discards) stay valid. The block's arm state (a pending arm
/// doorbell, its CqArm bits, cq_arm_index) is carried over, as are the CQ's
/// eventfd, its channel and the arm the engine holds. From the reply on,
/// droced writes only the new ring; the client maps it and drops the old one
/// before it polls or arms again.
/// -EINVAL for an unknown CQ, `cqe` 0 or past max_cqe, or a `cqe` smaller
/// than the number of completions not yet consumed (as rxe); -EIO when the
/// client left an impossible consumer index; on failure nothing changed.
struct ResizeCqRequest {
  uint32_t cq_id;
  uint32_t cqe;
};
static_assert(sizeof(ResizeCqRequest) == 8);
struct ResizeCqReply {
  uint32_t cqe;  ///< entries the new ring holds (>= asked)
  uint32_t reserved;
  uint64_t region_bytes;
};
static_assert(sizeof(ResizeCqReply) == 16 && offsetof(ResizeCqReply, region_bytes) == 8);

/// register_channel (minor 1): the write end of a completion channel's pipe
/// comes beside an empty request; the reply is an IdReply with the channel's
/// id for CreateCqRequest::channel. droced keeps the descriptor until the
/// session ends, writes it non-blocking (a full pipe loses the record, as the
/// reader has that many events pending already) and ignores a closed reader.
/// -EINVAL without exactly one descriptor or when it is not a pipe's write
/// end; -ENOMEM past the session's channel limit.
inline constexpr uint32_t kMaxChannelsPerSession = 1024;

// ---- Encoding and decoding --------------------------------------------------

/// A whole message from its parts: the header, `body`, then `tail` (reg_mr's
/// segments). Every encoder below, and droced's replies, are built on it.
std::vector<uint8_t> encode_raw(MsgType type, uint32_t seq, std::span<const uint8_t> body,
                                std::span<const uint8_t> tail = {}, bool reply = false, int32_t status = 0);

/// A whole message: header then body, ready to send.
template <class Body>
std::vector<uint8_t> encode(MsgType type, uint32_t seq, const Body& body, bool reply = false, int32_t status = 0) {
  static_assert(std::is_trivially_copyable_v<Body>);
  return encode_raw(type, seq, {reinterpret_cast<const uint8_t*>(&body), sizeof body}, {}, reply, status);
}

/// A message without a body (requests such as alloc_pd, replies with only a status).
std::vector<uint8_t> encode_empty(MsgType type, uint32_t seq, bool reply = false, int32_t status = 0);

/// The body of a checked message into `size` bytes at `out`: min(present,
/// size) bytes, the rest zero (a field an older peer did not send).
/// -EBADMSG when shorter than `min_size` (the body's first version).
int decode_body_bytes(std::span<const uint8_t> msg, void* out, size_t size, size_t min_size);

template <class Body>
int decode_body(std::span<const uint8_t> msg, Body* out, size_t min_size = sizeof(Body)) {
  static_assert(std::is_trivially_copyable_v<Body>);
  return decode_body_bytes(msg, out, sizeof *out, min_size);
}

}  // namespace droce::abi::ctl
