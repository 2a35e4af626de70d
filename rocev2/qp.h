#pragma once
// A queue pair's context: its attributes, its queues, and the state of each
// of its three roles (requester, completer, responder; IBA 9.7 and rxe's
// split). The engine owns QPs; the role files (requester.cc, completer.cc,
// responder.cc) act on them.
//
// Queue indexes are free-running 32-bit counters; slot = index % depth.
// Threading: a QP belongs to one lcore; nothing here is synchronized.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <memory>
#include <vector>

#include <rte_mbuf.h>

#include "core/counter_table.h"
#include "rocev2/cq.h"
#include "rocev2/dcqcn.h"
#include "rocev2/mr.h"
#include "rocev2/opcode.h"
#include "rocev2/raw_flow.h"
#include "rocev2/verbs.h"

namespace droce::rocev2 {

class Srq;

/// The BTH transport of a QP type's packets (both XRC types speak XRC, Annex A14).
inline Transport transport_of(QpType t) {
  switch (t) {
    case QpType::uc: return Transport::uc;
    case QpType::ud: return Transport::ud;
    case QpType::xrc_send:
    case QpType::xrc_recv: return Transport::xrc;
    default: return Transport::rc;
  }
}

struct SendWqe {
  SendWr wr;
  /// UD: the AH's address, copied at post (as a NIC copies it into the WQE),
  /// so destroying the AH, or its slot's reuse, cannot redirect the WQE.
  AddressVector ud_av;
  uint32_t length = 0;      ///< sum of the scatter list (or inline bytes)
  uint32_t npackets = 0;    ///< packets (PSNs) the operation uses
  uint32_t first_psn = 0;
  uint32_t last_psn = 0;
  bool psn_assigned = false;
  bool resp_complete = false;  ///< READ data or atomic result fully received
  uint32_t resp_next_psn = 0;  ///< READ: the response PSN expected next
  uint32_t resp_bytes = 0;     ///< READ: bytes placed so far
  uint32_t inline_off = 0;     ///< offset of the inline copy in Qp::inline_buf
  bool resp_gap_seen = false;  ///< READ: a response gap already caused a resend
  bool has_local_error = false;  ///< a local error found while sending; completes in order
  WcStatus local_error = WcStatus::success;

  /// Makes this slot a new WQE for `from`: every field as a fresh SendWqe's, but of the
  /// scatter list only the entries in use written (`*this = SendWqe{}` wrote all 32, most
  /// of its ~700 bytes, for every post).
  void reset(const SendWr& from);
};

inline void SendWqe::reset(const SendWr& from) {
  static_assert(std::is_trivially_copyable_v<SendWqe> && std::is_standard_layout_v<SendWqe>);
  static_assert(offsetof(SendWr, sg_list) + sizeof(SendWr::sg_list) == sizeof(SendWr), "sg_list ends SendWr");
  std::memcpy(static_cast<void*>(&wr), &from, offsetof(SendWr, sg_list));  // trivially copyable
  std::copy_n(from.sg_list, std::min(from.num_sge, kMaxSge), wr.sg_list);
  static const SendWqe blank{};
  constexpr size_t rest = offsetof(SendWqe, ud_av);
  std::memcpy(reinterpret_cast<char*>(this) + rest, reinterpret_cast<const char*>(&blank) + rest,
              sizeof(SendWqe) - rest);
}

struct RecvWqe {
  uint64_t wr_id = 0;
  uint32_t num_sge = 0;
  Sge sg_list[kMaxSge];
};

/// A READ or atomic the responder has executed, kept for replay (IBA 9.7.5.1.4).
/// The operations a response of their own answers (READ data, an atomic ACK; for IBA 1.5's
/// ATOMIC WRITE and FLUSH an RDMA READ response only of no payload, as rxe sends it): an ACK of
/// a later PSN does not cover them (implied NAK, IBA 9.7.5.1.3), and go-back-N sends them whole.
inline bool awaits_response(WrOpcode op) {
  return op == WrOpcode::rdma_read || op == WrOpcode::atomic_cmp_and_swp || op == WrOpcode::atomic_fetch_and_add ||
         op == WrOpcode::atomic_write || op == WrOpcode::flush;
}
/// Those of them that take one of the max_rd_atomic outstanding slots and need responder
/// resources at the peer: READs, atomics and ATOMIC WRITE (rxe's check_init_depth and
/// check_resource); FLUSH takes neither.
inline bool uses_rd_atomic(WrOpcode op) { return awaits_response(op) && op != WrOpcode::flush; }

struct RdAtomicResource {
  /// What a duplicate replays: READ data, an atomic's original value, or (ATOMIC WRITE and
  /// FLUSH, never executed again) their READ response only of no payload.
  enum Kind : uint8_t { none, read, atomic, ack_only } kind = none;
  uint32_t first_psn = 0;
  uint32_t last_psn = 0;
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint32_t length = 0;
  uint64_t orig = 0;  ///< atomic: the value before the operation
  uint32_t msn = 0;   ///< MSN after this operation
};

/// A QP's counters; what each counts is in kQpCounters.
struct QpCounters {
  uint64_t tx_packets = 0, rx_packets = 0, tx_bytes = 0, rx_bytes = 0;
  uint64_t retransmits = 0;
  uint64_t timeouts = 0;
  uint64_t seq_naks_sent = 0, seq_naks_received = 0;
  uint64_t rnr_naks_sent = 0, rnr_naks_received = 0;
  uint64_t duplicate_requests = 0, out_of_sequence = 0;
  uint64_t implied_naks = 0;
  uint64_t window_cuts = 0;
  uint64_t retry_exceeded = 0, rnr_retry_exceeded = 0;
  uint64_t acks_coalesced = 0;
  uint64_t rdma_sends = 0, rdma_recvs = 0;
  uint64_t send_errors = 0;
  uint64_t read_replays = 0, atomic_replays = 0;
  uint64_t dropped = 0;
  uint64_t held_requests = 0;
  uint64_t odp_page_waits = 0;

  QpCounters& operator+=(const QpCounters& o);
};

/// QpCounters described once (core/counter_table.h), in output order: what sums them
/// (operator+=) and droced's JSON (`droce qps`, the device's totals) use it. The rxe names
/// are the kernel's soft-RoCE counters that count the same.
inline constexpr core::Counter<QpCounters> kQpCounters[] = {
    {"tx_packets", &QpCounters::tx_packets, "packets sent"},
    {"rx_packets", &QpCounters::rx_packets, "packets received"},
    {"tx_bytes", &QpCounters::tx_bytes, "bytes sent"},
    {"rx_bytes", &QpCounters::rx_bytes, "bytes received"},
    {"retransmits", &QpCounters::retransmits, "packets sent again"},
    {"timeouts", &QpCounters::timeouts, "local ACK timeouts"},
    {"seq_naks_sent", &QpCounters::seq_naks_sent, "PSN sequence error NAKs sent"},
    {"seq_naks_received", &QpCounters::seq_naks_received, "PSN sequence error NAKs received"},
    {"rnr_naks_sent", &QpCounters::rnr_naks_sent, "RNR NAKs sent (no receive posted)"},
    {"rnr_naks_received", &QpCounters::rnr_naks_received, "RNR NAKs received"},
    {"duplicate_requests", &QpCounters::duplicate_requests, "requests received again (already executed)"},
    {"out_of_sequence", &QpCounters::out_of_sequence,
     "requests with another PSN than the expected one (RC: ahead of it)"},
    {"implied_naks", &QpCounters::implied_naks,
     "READ or atomic responses found lost, asked for again (implied NAK, IBA 9.7.5.1.3)"},
    {"window_cuts", &QpCounters::window_cuts, "times the send window was halved"},
    {"retry_exceeded", &QpCounters::retry_exceeded, "retries exhausted (rxe: retry_exceeded_err)"},
    {"rnr_retry_exceeded", &QpCounters::rnr_retry_exceeded, "RNR retries exhausted (rxe: retry_rnr_exceeded_err)"},
    {"acks_coalesced", &QpCounters::acks_coalesced, "ACKs left out for a later one (not rxe's ack_deferred, a queued response)"},
    {"rdma_sends", &QpCounters::rdma_sends, "RDMA WRITE and READ requests sent (rxe's rdma_sends counts SENDs)"},
    {"rdma_recvs", &QpCounters::rdma_recvs, "RDMA WRITE and READ requests served (rxe's rdma_recvs counts receives)"},
    {"send_errors", &QpCounters::send_errors, "WRs completed with an error other than flush (not rxe's send_err, a frame IP refused)"},
    {"read_replays", &QpCounters::read_replays, "READ responses sent again for a duplicate request"},
    {"atomic_replays", &QpCounters::atomic_replays, "atomic responses sent again for a duplicate request"},
    {"dropped", &QpCounters::dropped, "packets the QP dropped (UC gap, bad Q_Key, ...)"},
    {"held_requests", &QpCounters::held_requests, "requests held behind a streaming READ"},
    {"odp_page_waits", &QpCounters::odp_page_waits,
     "accesses that waited for on-demand-paged memory to come in (mlx5: page faults)"},
};
static_assert(core::covers(kQpCounters));

inline QpCounters& QpCounters::operator+=(const QpCounters& o) {
  core::add_counters(kQpCounters, o, this);
  return *this;
}

struct Qp {
  // Identity and attributes.
  uint32_t qpn = 0;
  uint32_t incarnation = 0;  ///< unique per created QP: timer entries of a destroyed one never match
  QpType type = QpType::rc;
  QpState state = QpState::reset;
  /// XRC receive (target) QPs have no PD, receive CQ or SRQ of their own: these three are
  /// those of the XRC SRQ the request being served names (Engine's check_xrc_srq binds them
  /// for each request; the memory checks of its READ responses and replays use them later).
  uint32_t pd = 0;
  Cq* send_cq = nullptr;
  Cq* recv_cq = nullptr;
  Srq* srq = nullptr;
  uint32_t xrcd = 0;  ///< XRC receive QPs: the XRC domain whose SRQs it may deliver to
  bool sq_sig_all = false;
  bool block_self_mcast_loopback = false;
  QpAttr attr;       ///< as last modified (path, timers, PSNs at modify time)
  uint32_t mtu = 1024;
  uint16_t udp_sport = 0xc000;
  /// The IPv4 identification of the QP's next packet: one more per packet, so the packets a
  /// requester builds back to back may travel as one UDP GSO frame (net/udp_gso.h), the kernel
  /// giving each segment this same count. Zero-based, as the kernel numbers a DF socket's.
  uint16_t ip_id = 0;

  // Send queue.
  uint32_t sq_depth = 0;
  uint32_t max_send_sge = 0;
  uint32_t max_inline = 0;
  std::vector<SendWqe> sq;
  std::vector<uint8_t> inline_buf;  ///< max_inline bytes per slot
  uint32_t sq_head = 0;   ///< next index the application posts
  uint32_t sq_tail = 0;   ///< oldest index not yet completed

  // Receive queue (unused with an SRQ).
  uint32_t rq_depth = 0;
  uint32_t max_recv_sge = 0;
  std::vector<RecvWqe> rq;
  uint32_t rq_head = 0;
  uint32_t rq_tail = 0;

  // Requester.
  struct Requester {
    uint32_t next_wqe = 0;     ///< index of the WQE to send from
    uint32_t next_offset = 0;  ///< bytes of it already sent
    uint32_t next_psn = 0;
    uint32_t max_psn = 0;      ///< one past the highest PSN ever sent (go-back-N rewinds next_psn, not this)
    uint32_t rd_atomic_inflight = 0;
    uint32_t unacked_psn = 0;  ///< oldest PSN not yet acknowledged
    uint32_t retry_left = 0;
    uint32_t rnr_retry_left = 0;
    uint64_t rnr_until = 0;       ///< sending paused until then (RNR wait); 0: not waiting
    uint64_t rnr_queued = 0;      ///< deadline of the RNR entry in the timer heap; 0: none
    uint64_t retry_deadline = 0;  ///< local ACK timeout; 0: not armed
    uint64_t retry_queued = 0;    ///< deadline of the retry entry in the timer heap; 0: none
    uint64_t pace_queued = 0;     ///< deadline of the pacer's entry in the timer heap; 0: none
    uint32_t packets_since_ackreq = 0;
    uint64_t last_ackreq_ns = 0;  ///< when a packet last asked for an ACK (a paced QP's clock)
    // The send window (PSNs unacknowledged), adaptive: halved on a loss
    // signal, regrown on acknowledgement (slow start to ssthresh, then one
    // PSN per window). Go-back-N throws away what is in flight past a loss,
    // so a smaller window under loss wastes less.
    uint32_t cwnd = 0;
    uint32_t ssthresh = 0;
    uint32_t acked_credit = 0;
    bool drained_notified = false;
    /// A READ response or atomic ACK could not be placed: its on-demand pages are coming in.
    /// Responses are dropped until the ODP timer asks for them again (requester_rewind).
    bool paging = false;
  } req;

  // Responder.
  struct Responder {
    uint32_t epsn = 0;          ///< expected PSN
    uint32_t msn = 0;
    bool seq_nak_sent = false;  ///< one PSN-sequence NAK per gap (go-back-N)
    enum Msg : uint8_t { none, send, write } msg = none;
    bool have_recv = false;     ///< a receive WQE is bound to the message in progress
    RecvWqe recv;
    uint32_t recv_offset = 0;
    uint64_t write_va = 0;
    uint32_t write_rkey = 0;
    uint32_t write_left = 0;
    uint32_t write_total = 0;
    std::vector<RdAtomicResource> resources;  ///< max_dest_rd_atomic, oldest overwritten
    uint32_t resource_next = 0;
    // READ response generation in progress.
    bool reading = false;
    RdAtomicResource read;      ///< the READ being answered
    uint32_t read_offset = 0;   ///< bytes answered so far
    uint32_t read_psn = 0;      ///< PSN of the next response packet
    /// Requests that arrived while a READ was still streaming, kept (with
    /// their mbufs) and processed in order once its responses are out.
    /// Capacity reserved at QP creation (kMaxHeldRequests).
    std::vector<rte_mbuf*> held;
    /// A request (or a READ's next response) waits for on-demand pages to come in: it is
    /// first in `held` (a READ's stream stays paused), and what arrives after it is held
    /// behind it, until the ODP timer tries again (Engine::on_timer, kOdpTimer).
    bool paging = false;
    bool replaying = false;  ///< responder_replay_held is running: what it replays is not held again
    // Coalesced acknowledgement.
    bool ack_pending = false;
    uint32_t ack_psn = 0;
    uint8_t ack_syndrome = 0;
    uint32_t ack_msn = 0;
  } resp;

  // Congestion control (rocev2/dcqcn.h): this QP's rate as a sender, its CNPs as a receiver.
  ReactionPoint rp;
  NotificationPoint np;

  QpCounters counters;
  /// A raw packet QP that spreads what its rules pick over receive queues (Engine::set_rss).
  std::unique_ptr<RawRss> rss;
  bool on_ready_list = false;
  bool error_flushed = false;
  // Waiting for on-demand pages (Engine::odp_wait): the ODP timer's entry and its back-off.
  uint64_t odp_queued = 0;       ///< deadline of the ODP entry in the timer heap; 0: none
  uint64_t odp_interval_ns = 0;  ///< the last wait's length (doubles while a fault is still on its way)
};

/// Requests a responder holds behind a streaming READ before it drops more
/// (the requester's window rarely lets more than this arrive meanwhile).
inline constexpr size_t kMaxHeldRequests = 64;

/// rxe's RNR timer table in nanoseconds, indexed by the 5-bit code (IBA table 45).
uint64_t rnr_timer_ns(uint8_t code);

/// The local ACK timeout in nanoseconds: 4.096 us << timeout; 0 means none.
inline uint64_t ack_timeout_ns(uint8_t timeout) {
  return timeout == 0 ? 0 : uint64_t{4096} << (timeout > 31 ? 31 : timeout);
}

}  // namespace droce::rocev2
