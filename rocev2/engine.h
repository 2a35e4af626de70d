#pragma once
// The RoCEv2 transport engine: RC, UC and UD queue pairs, I/O-free.
//
// The engine consumes received frames (rx_burst) and emits frames through a
// PacketPort, one burst per poll; it reads time only from the `now_ns` its
// caller passes, and has no threads of its own. Two engines joined by a
// simulated link and driven in virtual time are therefore deterministic,
// which is how its tests run; droced drives it from a poll-mode lcore.
//
// One engine belongs to one lcore. Control calls (create/modify/destroy,
// register) and data calls (post_send, post_recv, poll_cq, rx_burst, poll)
// must all come from that lcore; droced forwards control requests to it.
//
// Errors: control and post calls return 0 or -errno as the corresponding
// verbs document (EINVAL, ENOMEM, ...). Protocol errors become NAKs,
// completion statuses or counted drops, never return codes.

#include <rte_mbuf.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "core/counter_table.h"
#include "core/timer_heap.h"
#include "rocev2/cq.h"
#include "rocev2/dcqcn.h"
#include "rocev2/mr.h"
#include "rocev2/offload.h"
#include "rocev2/packet.h"
#include "rocev2/parser.h"
#include "rocev2/qp.h"
#include "rocev2/raw_flow.h"
#include "rocev2/responder.h"
#include "rocev2/srq.h"
#include "rocev2/verbs.h"

namespace droce::rocev2 {

/// Where the engine's frames go: a DPDK port queue, a simulated link, a
/// capture. One call per burst, never per packet.
/// The local QP that sent a frame the engine built: send_frame() tags it in the mbuf's
/// user hash, which no transmit path reads (droced's tx fault rules match on it).
inline uint32_t frame_source_qpn(const rte_mbuf* m) { return m->hash.usr; }

class PacketPort {
 public:
  virtual ~PacketPort() = default;
  /// Takes ownership of the frames it accepts; returns how many (a prefix).
  virtual uint16_t tx_burst(rte_mbuf** frames, uint16_t n) = 0;
  /// A frame of `len` bytes for `dst` to build in place where the port sends it from (no
  /// copy at tx_burst), or nullptr: build it in a pool mbuf, unless *none_now (the port has
  /// no room now: try later, as for an empty pool). Frames come back through tx_burst in
  /// the order they were asked for, or are freed.
  virtual rte_mbuf* alloc_frame(const net::MacAddr& /*dst*/, uint32_t /*len*/, bool* none_now) {
    *none_now = false;
    return nullptr;
  }
};

struct EngineConfig {
  rte_mempool* pool = nullptr;  ///< TX frames; data room >= 4096 + kMaxHeaderLen
  PacketPort* port = nullptr;
  DeviceLimits limits;
  uint32_t max_qps = 4096;
  uint32_t first_qpn = 0x11;        ///< QPNs start here, as rxe's do
  uint32_t max_mrs = 1u << 16;
  /// Request an ACK at least every this many packets of a long message.
  uint32_t ack_req_every = 64;
  /// Most PSNs a QP may have unacknowledged: the ceiling of its adaptive
  /// send window (and where the window starts).
  uint32_t max_unacked_psns = 1024;
  /// The floor the window never shrinks below.
  uint32_t min_unacked_psns = 16;
  /// Most frames built per poll (bounded work per loop iteration).
  uint32_t tx_budget = 256;
  /// The port's active MTU: UD QPs (which have no path MTU attribute) use it.
  PathMtu active_mtu = PathMtu::mtu1024;
  /// What the port's NIC does for us (hw_offload::select_offloads fills it).
  OffloadOps offloads;
  /// The local address every QP sends from (tests and single-port droced).
  MacAddr local_mac{};
  IpAddr local_ip{};
  /// More addresses of this host (a GID table's): frames are taken only
  /// when sent to local_ip, one of these, or (UD only) a multicast group,
  /// as a NIC takes only its own; others count as rx_bad_dest.
  std::vector<IpAddr> local_ips;
  /// DCQCN (rocev2/dcqcn.h): off in a bare engine; droced passes its device's parameters
  /// (on by default, as mlx5 ships). set_cc_params() changes them later.
  CcParams cc = CcParams::off();
  /// The port's rate in Mbit/s: the reaction point's maximum when rpg_max_rate is 0.
  uint32_t line_rate_mbps = 100000;
  /// The largest frame a raw packet QP may send, Ethernet header included (the port's MTU
  /// plus its Ethernet and 802.1Q headers, at most what one pool mbuf holds).
  uint32_t max_raw_frame = 1518;
};

/// Async events (ibv_event_type values).
enum class AsyncEventType : uint8_t {
  cq_err = 0,
  qp_fatal = 1,
  qp_req_err = 2,
  qp_access_err = 3,
  comm_est = 4,
  sq_drained = 5,
  srq_limit_reached = 15,
  qp_last_wqe_reached = 16,
};

struct AsyncEvent {
  AsyncEventType type;
  uint32_t id;  ///< QPN, CQ id or SRQ id
};

/// The engine's counters; what each counts is in kEngineCounters.
struct EngineCounters {
  ParseCounters parse;  ///< every RX frame by parse status
  uint64_t rx_frames = 0, tx_frames = 0;
  uint64_t tx_acks = 0;
  uint64_t rx_unknown_qp = 0;
  uint64_t rx_wrong_state = 0;
  uint64_t rx_bad_pkey = 0;
  uint64_t rx_bad_qkey = 0;
  uint64_t rx_bad_dest = 0;
  uint64_t rx_unexpected = 0;
  uint64_t tx_no_mbuf = 0;
  uint64_t tx_port_full = 0;
  uint64_t cq_overflows = 0;
  uint64_t cnp_received = 0;
  uint64_t rx_mcast_unattached = 0;
  uint64_t np_ecn_marked_roce_packets = 0;
  uint64_t np_cnp_sent = 0;
  uint64_t np_cnp_suppressed = 0;
  uint64_t rp_cnp_handled = 0;
  uint64_t rp_cnp_ignored = 0;
  uint64_t rp_rate_cuts = 0;
  uint64_t rp_rate_increases = 0;
};

/// EngineCounters described once (core/counter_table.h), in the order droced shows them.
inline constexpr core::Counter<EngineCounters> kEngineCounters[] = {
    {"rx_frames", &EngineCounters::rx_frames, "frames received, parsed or not"},
    {"tx_frames", &EngineCounters::tx_frames, "frames the port took"},
    {"tx_acks", &EngineCounters::tx_acks, "of the frames built, acknowledgements (ACK, NAK) a responder sent"},
    {"rx_unknown_qp", &EngineCounters::rx_unknown_qp, "valid RoCEv2 for a QPN we do not have"},
    {"rx_wrong_state", &EngineCounters::rx_wrong_state, "for a QP not in a state that receives"},
    {"rx_bad_pkey", &EngineCounters::rx_bad_pkey, "P_Key not the default partition's (dropped)"},
    {"rx_bad_qkey", &EngineCounters::rx_bad_qkey, "UD datagrams whose Q_Key does not match the QP's (dropped)"},
    {"rx_mcast_unattached", &EngineCounters::rx_mcast_unattached,
     "multicast datagrams for a group no QP here is attached to"},
    {"rx_bad_dest", &EngineCounters::rx_bad_dest, "wrong transport for the QP, or not our address"},
    {"rx_unexpected", &EngineCounters::rx_unexpected, "responses nobody asked for, stale PSNs"},
    {"tx_no_mbuf", &EngineCounters::tx_no_mbuf, "back-pressure: pool empty, or the port's own buffers full"},
    {"tx_port_full", &EngineCounters::tx_port_full, "back-pressure: frames the port refused (sent again later)"},
    {"cq_overflows", &EngineCounters::cq_overflows, "CQs that overflowed (each reported once, as CQ_ERR)"},
    {"cnp_received", &EngineCounters::cnp_received, "congestion notification packets received"},
    {"np_ecn_marked_roce_packets", &EngineCounters::np_ecn_marked_roce_packets,
     "RoCEv2 packets for a QP here that arrived marked CE (mlx5's name)"},
    {"np_cnp_sent", &EngineCounters::np_cnp_sent, "CNPs sent for CE-marked packets (mlx5's name)"},
    {"np_cnp_suppressed", &EngineCounters::np_cnp_suppressed,
     "CE-marked packets not answered: a CNP went less than min_time_between_cnps before, or the NP is off"},
    {"rp_cnp_handled", &EngineCounters::rp_cnp_handled, "CNPs the reaction point acted on (mlx5's name)"},
    {"rp_cnp_ignored", &EngineCounters::rp_cnp_ignored, "CNPs received with the reaction point off (mlx5's name)"},
    {"rp_rate_cuts", &EngineCounters::rp_rate_cuts,
     "rate cuts (a CNP within rate_reduce_monitor_period of the last cut is handled, not cut)"},
    {"rp_rate_increases", &EngineCounters::rp_rate_increases,
     "rate increase events (timer or byte counter; the last one of a limited QP releases it)"},
};
static_assert(core::covers(kEngineCounters, sizeof(ParseCounters)));

struct QpInit {
  QpType type = QpType::rc;
  /// XRC receive QPs take no PD, CQ, SRQ or caps (they have no queues): `xrcd` instead, the
  /// nonzero id of their XRC domain. XRC send QPs need no receive CQ and take no SRQ.
  uint32_t pd = 0;
  uint32_t xrcd = 0;
  Cq* send_cq = nullptr;
  Cq* recv_cq = nullptr;
  Srq* srq = nullptr;
  QpCap cap;
  bool sq_sig_all = false;
  /// IBV_QP_CREATE_BLOCK_SELF_MCAST_LB: multicast this QP sent is not delivered back to it.
  bool block_self_mcast_loopback = false;
};

class Engine {
 public:
  /// Called when a message arrives for a QP (or its SRQ) that has no receive
  /// WQE in the engine, before the engine answers with an RNR NAK (RC) or
  /// drops it (UD, UC): the host moves what its client posted meanwhile into
  /// the engine (post_recv / post_srq_recv), as a NIC reads the receive queue
  /// when the message comes. Without it, a receive posted just before the
  /// message, but not yet taken from the client's ring, would be missed. The
  /// callback may post receives only (no modify, destroy or completion).
  using RecvRefill = void (*)(void* ctx, uint32_t qpn);
  void set_recv_refill(RecvRefill fn, void* ctx) {
    recv_refill_ = fn;
    recv_refill_ctx_ = ctx;
  }

  explicit Engine(const EngineConfig& cfg);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // ---- Resources (control path) --------------------------------------------
  int alloc_pd(uint32_t* pd);
  int dealloc_pd(uint32_t pd);  ///< -EBUSY while anything uses it
  /// `invalidatable`: a fast-registration region that SEND_WITH_INV and
  /// LOCAL_INV may invalidate (ordinary ibv_reg_mr regions are not).
  int reg_mr(uint32_t pd, uint64_t va, uint64_t length, uint8_t* host, uint32_t access, Mr** out,
             bool invalidatable = false);
  /// An on-demand-paged region (MrTable::reg_odp): reached through `odp`, which
  /// must outlive the registration. A page `odp` cannot reach ends the access
  /// as an unmapped page on an HCA does: a remote access error NAK for a
  /// peer's WRITE, READ or atomic; LOC_PROT_ERR for a local SGE.
  int reg_odp_mr(uint32_t pd, uint64_t va, uint64_t length, OdpMemory* odp, uint32_t access, Mr** out);
  int dereg_mr(uint32_t lkey);
  /// ibv_alloc_mw / ibv_dealloc_mw (MrTable::alloc_mw, dealloc_mw); a window
  /// holds its PD. Binding is a send WR (WrOpcode::bind_mw) on a QP.
  int alloc_mw(uint32_t pd, MwType type, uint32_t* rkey);
  int dealloc_mw(uint32_t rkey);
  /// ibv_rereg_mr in place (keys unchanged): -EINVAL for an unknown key or
  /// PD, or what MrTable::rereg refuses.
  int rereg_mr(uint32_t lkey, uint32_t pd, uint64_t va, uint64_t length, uint8_t* host, uint32_t access);
  /// With a sink, completions go there (droced's shared ring) and the CQ
  /// overflows when the sink is full.
  int create_cq(uint32_t depth, Cq** out, CqSink* sink = nullptr);
  int destroy_cq(Cq* cq);  ///< -EBUSY while a QP or an XRC SRQ uses it
  /// An XRC SRQ when `xrcd` is nonzero (its domain, an id the host gives out), which then
  /// needs `cq`: its receives complete there. -EINVAL for a bad PD, size, or XRC without a CQ.
  int create_srq(uint32_t pd, uint32_t max_wr, uint32_t max_sge, Srq** out, uint32_t xrcd = 0,
                 Cq* cq = nullptr);
  /// -EBUSY while a QP uses a basic SRQ. An XRC SRQ has no QPs of its own: the XRC receive QPs
  /// that served requests for it let it go (a later request naming it is an invalid request).
  int destroy_srq(Srq* srq);
  /// The SRQ whose number (ibv_get_srq_num, an XRCETH's XRC SRQ) is `num`, or nullptr.
  Srq* srq_by_num(uint32_t num) { return num < srqs_.size() ? srqs_[num].get() : nullptr; }
  int create_ah(uint32_t pd, const AddressVector& av, uint32_t* ah);
  int destroy_ah(uint32_t ah);
  int create_qp(const QpInit& init, uint32_t* qpn);
  /// The GSI QP (QP1): a UD QP with QPN 1 and the fixed Q_Key 0x80010000, on
  /// which connection management's MADs come and go (issue #15). Only the host
  /// makes it (droced for its CM, never a client); one per engine. Then as any
  /// UD QP: modify to RTS, post, destroy_qp(1). -EINVAL when not UD or made.
  int create_gsi_qp(const QpInit& init);
  static constexpr uint32_t kGsiQpn = 1;
  static constexpr uint32_t kGsiQkey = 0x80010000;
  int modify_qp(uint32_t qpn, const QpAttr& attr, uint32_t mask);
  int query_qp(uint32_t qpn, QpAttr* attr, QpState* state) const;
  int destroy_qp(uint32_t qpn);
  Qp* qp(uint32_t qpn);
  MrTable& mrs() { return mrs_; }

  /// This host's addresses changed (a netdev whose addresses the kernel changes): frames
  /// are taken for `ips` from now on (EngineConfig::local_ips); the first is the default
  /// source. QPs keep the source they were given. Owning lcore only.
  void set_local_ips(const std::vector<IpAddr>& ips);

  // ---- Multicast (UD) --------------------------------------------------------
  /// The destination QPN of a multicast datagram (IBA 10.5.2.5).
  static constexpr uint32_t kMulticastQpn = 0xffffff;
  /// ibv_attach_mcast: UD QP `qpn` receives what is sent to group `gid` (an
  /// IPv6 multicast address, or an IPv4-mapped one: RoCEv2's MGID for
  /// 224.0.0.0/4). Attaching twice is not an error (as rxe). -EINVAL for a QP
  /// that is not UD or a GID that is not multicast; -ENOMEM past the limits.
  int attach_mcast(uint32_t qpn, const IpAddr& gid);
  /// ibv_detach_mcast: -EINVAL when the QP is not attached to `gid`.
  int detach_mcast(uint32_t qpn, const IpAddr& gid);
  /// Attachments in all groups (a destroyed QP's are gone with it).
  size_t mcast_attachments() const;
  size_t mcast_groups() const { return mcast_.size(); }
  /// Each group and the QPs attached to it (for `droce multicast`).
  std::vector<std::pair<IpAddr, std::vector<uint32_t>>> mcast_table() const {
    std::vector<std::pair<IpAddr, std::vector<uint32_t>>> out;
    for (const McastGroup& g : mcast_) out.emplace_back(g.gid, g.qpns);
    return out;
  }

  // ---- Raw packet QPs (rocev2/raw_qp.cc) -------------------------------------
  // A raw packet QP sends each SEND's bytes as one whole frame, as the application built it (no
  // RoCE headers, no ICRC; 14 bytes to max_raw_frame, else post_send's -EINVAL), completing it
  // once the port has it, as UD does. It receives whole frames that its flow rules steer to it
  // (rocev2/raw_flow.h): the frames the transport does not take, and every frame for a
  // sniffer rule. byte_len is the frame's length; no GRH area.
  /// ibv_create_flow: -EINVAL when `qpn` is not a raw packet QP of this engine, or the type is
  /// not one of abi::FlowType's; *id names the rule for destroy_flow.
  int create_flow(uint32_t qpn, abi::FlowType type, uint16_t priority, const abi::FlowMatch& match, uint32_t* id);
  /// ibv_destroy_flow: -EINVAL for an unknown rule. Destroying the QP removes its rules.
  int destroy_flow(uint32_t id);
  /// Receive-side scaling (rocev2/raw_flow.h RawRss): frames `qpn`'s rules pick go to the raw
  /// packet QPs of `rss.table` (this engine's, in a receiving state when a frame comes), picked
  /// by hash; `qpn` itself then needs no state or receive queue (an HCA's RSS QP has none).
  /// -EINVAL: not raw QPs, a table not a power of two (1..128), a key over 40 bytes or unknown
  /// fields.
  int set_rss(uint32_t qpn, const RawRss& rss);
  /// Rules in force (droced loops multicast frames back while some exist, as for groups).
  size_t raw_flows() const { return raw_flows_.size(); }

  // ---- Data path -------------------------------------------------------------
  /// ibv_post_send for one WR: -EINVAL (state, opcode, SGE count, inline
  /// size, opcode for the QP type, a message over 2^22 packets), -ENOMEM
  /// (queue full). With kSendInline the SGEs' addresses are pointers in this
  /// process (droced: into its copy of the WQE) and are copied before return;
  /// otherwise they are application virtual addresses checked against MRs
  /// when sent. In ERR or SQE the WR is accepted and flushed at once.
  int post_send(uint32_t qpn, const SendWr& wr);
  /// ibv_post_recv: -EINVAL (RESET state, SGE count, QP with SRQ), -ENOMEM.
  int post_recv(uint32_t qpn, const RecvWr& wr);
  int post_srq_recv(Srq* srq, const RecvWr& wr) { return srq->post(wr); }

  /// Processes received frames and frees them.
  void rx_burst(rte_mbuf** frames, uint16_t n, uint64_t now_ns);
  /// One loop iteration: expire timers, send what the window allows, flush.
  void poll(uint64_t now_ns);
  /// Earliest time poll() has timer work; UINT64_MAX if none.
  uint64_t next_deadline() const { return timers_.next_deadline(); }
  /// Entries in the timer heap (at most a few per QP; for tests and `droce`).
  size_t timer_entries() const { return timers_.size(); }
  /// True when some QP has packets it could send now.
  bool has_tx_work() const { return !ready_.empty() || !tx_.empty(); }

  /// Debug builds (kResponderTrace): every responder check's verdict on the latest requests,
  /// oldest first (rocev2/responder.h), so a test or a debugger can see which rule a request
  /// met and why it was NAKed or dropped. Always empty in release builds. Owning lcore only.
  const ResponderTrace& responder_trace() const { return responder_trace_; }
  void clear_responder_trace() { responder_trace_.clear(); }

  /// DCQCN's parameters (rocev2/dcqcn.h) for every QP of this engine, from the next packet on.
  /// Turning the reaction point off releases no QP's limiter at once: it stops acting on
  /// CNPs and marking ECT; a limited QP recovers by its timers. Owning lcore only.
  void set_cc_params(const CcParams& p) { cfg_.cc = p; }
  const CcParams& cc_params() const { return cfg_.cc; }

  std::vector<AsyncEvent>& events() { return events_; }
  const EngineCounters& counters() const { return counters_; }
  /// Every QP's counters added up, the destroyed ones' included (as rxe's device-wide
  /// hw_counters): a run's retransmissions and timeouts outlive its QPs.
  QpCounters qp_totals() const;

 private:
  friend class EngineRoles;
  enum TimerKind : uint32_t { kRetryTimer = 0, kRnrTimer = 1, kPaceTimer = 2, kOdpTimer = 3 };

  // engine.cc
  Qp* lookup(uint32_t qpn);
  int check_qp_init(const QpInit& init) const;
  std::unique_ptr<Qp> make_qp(const QpInit& init, uint32_t qpn);
  void mark_ready(Qp* qp);
  void enter_error(Qp* qp);
  void flush_qp(Qp* qp);
  void complete_send(Qp* qp, SendWqe& w, WcStatus status);
  void complete_recv(Qp* qp, const RecvWqe& w, const Completion& c, bool solicited);
  bool push_cq(Qp* qp, Cq* cq, const Completion& c, bool solicited);
  bool take_recv(Qp* qp, RecvWqe* out);
  bool take_recv_now(Qp* qp, RecvWqe* out);
  /// A frame buffer: the port's own (PacketPort::alloc_frame) or the pool's.
  rte_mbuf* new_frame(const net::MacAddr& dst, uint32_t len);
  rte_mbuf* build(Qp* qp, const AddressVector& av, const Bth& bth, const ExtHeaders& ext,
                  uint32_t payload_len);
  /// A frame with headers `h` and room for `payload_len` bytes (zero pad), or nullptr (counted).
  rte_mbuf* emit(const PacketHeaders& h, uint32_t payload_len);
  void send_frame(rte_mbuf* m, Qp* qp);
  /// A finished frame onto this poll's burst (counted against `qp`); send_frame seals first.
  void queue_tx(rte_mbuf* m, Qp* qp);
  void flush_tx();
  bool is_local_dest(const IpAddr& dst, bool ud) const;
  bool is_local_ip(const IpAddr& a) const;
  /// A datagram to QPN 0xFFFFFF: a copy to each QP attached to its group.
  void rx_multicast(const ParsedPacket& p, const rte_mbuf* m);
  void detach_all(uint32_t qpn);
  void arm_retry_timer(Qp* qp, uint64_t now_ns);
  void arm_rnr_timer(Qp* qp, uint64_t deadline_ns);
  void cancel_retry_timer(Qp* qp);
  /// The pacer holds `qp` until deadline_ns: a timer entry puts it back on the ready list.
  void arm_pace_timer(Qp* qp, uint64_t deadline_ns);
  /// After the RP ran increase events (its increases() moved past `before`): counted in
  /// rp_rate_increases and traced as rate_change, as cuts are.
  void note_rate_rises(Qp* qp, uint64_t before);
  // Congestion control (engine.cc): the notification point's answer to a CE-marked packet
  // for `qp`, and the reaction point's CNP.
  void np_rx_ce(Qp* qp, const ParsedPacket& p);
  void rp_rx_cnp(const ParsedPacket& p);
  void on_timer(uint32_t qpn, uint32_t kind, uint32_t gen, uint64_t deadline, uint64_t now_ns);

  // raw_qp.cc
  /// The next SEND of a raw packet QP, as one frame; false when it could not go now.
  bool raw_send_one(Qp* qp, uint64_t now_ns);
  /// A received frame to the raw QPs its rules pick (`sniffers_only`: the transport took it).
  void raw_rx(const rte_mbuf* m, bool sniffers_only);
  void raw_deliver(Qp* qp, const rte_mbuf* m);

  // requester.cc
  void requester_run(Qp* qp, uint64_t now_ns, uint32_t* budget);
  bool requester_send_one(Qp* qp, uint64_t now_ns);
  /// Moves the send point to `psn`, back (go-back-N) or forward (past what
  /// an ACK covered), at the right WQE and offset.
  void requester_rewind(Qp* qp, uint32_t psn);
  /// The earliest PSN that must go out again: the first unacknowledged one,
  /// or earlier where a READ or atomic is still owed its response.
  uint32_t resend_point(Qp* qp) const;
  void retire_sent(Qp* qp, uint64_t now_ns);
  void window_cut(Qp* qp);
  void window_grow(Qp* qp, uint32_t acked);
  bool gather(Qp* qp, SendWqe& w, uint32_t offset, uint32_t len, uint8_t* dst, WcStatus* err);
  /// Whether the on-demand pages under [offset, offset + len) of a scatter/gather list can be
  /// copied now (mr_ready; the first answer that is not `now`); entries that fail their key
  /// check count as ready (the copy reports them). `write`: to be written. `ahead`: bytes of
  /// the operation after these, in the list (each entry's own rest of them is offered).
  OdpReady sges_ready(Qp* qp, const Sge* sges, uint32_t num_sge, uint32_t offset, uint32_t len, bool write,
                      uint64_t ahead = 0) {
    if (!mrs_.has_odp()) [[likely]] return OdpReady::now;  // the pinned data path: one branch
    return odp_sges_ready(qp, sges, num_sge, offset, len, write, ahead);
  }
  OdpReady odp_sges_ready(Qp* qp, const Sge* sges, uint32_t num_sge, uint32_t offset, uint32_t len, bool write,
                          uint64_t ahead);
  /// The QP waits for on-demand pages (OdpMemory::ready said `why`) and counts it: the ODP
  /// timer comes back 16 us after a fault began, twice as long each time one is still on its
  /// way (to 1 ms).
  void odp_wait(Qp* qp, OdpReady why);

  // completer.cc
  void completer_rx(Qp* qp, const ParsedPacket& p, const rte_mbuf* m, uint64_t now_ns);
  void completer_retire(Qp* qp, uint32_t ack_psn, uint64_t now_ns);
  /// Why retire_acknowledged() stopped: every WQE retired, one never sent, one the send point
  /// is inside of (held until the send point moves), one not yet acknowledged, a READ or
  /// atomic still owed its response (resent), or the QP is in error.
  enum class RetireStop { all, unsent, held, unacknowledged, response_owed, error };
  /// Completes the acknowledged WQEs at the send queue's tail, oldest first.
  RetireStop retire_acknowledged(Qp* qp);
  void completer_fail(Qp* qp, WcStatus status);
  /// The ODP timer after a response could not be placed (Qp::Requester::paging): the READ or
  /// atomic it answered is sent again (a READ from what already arrived; an atomic is answered
  /// from the responder's resources, not done twice).
  void completer_ask_again(Qp* qp);

  // responder.cc
  /// Sets *kept when it holds on to `m` (the caller must not free it).
  void responder_rx(Qp* qp, const ParsedPacket& p, rte_mbuf* m, uint64_t now_ns, bool* kept);
  /// Processes requests held behind a READ that has finished streaming.
  void responder_replay_held(Qp* qp, uint64_t now_ns);
  void drop_held(Qp* qp);
  /// `kept` nullptr: the frame is shared (multicast) and cannot be held, a datagram whose
  /// on-demand pages are not in is dropped; otherwise the caller owns `m`, and *kept is set
  /// as responder_rx's.
  void responder_ud_rx(Qp* qp, const ParsedPacket& p, const rte_mbuf* m, bool* kept);
  void responder_send_ack(Qp* qp);
  void responder_nak(Qp* qp, uint8_t syndrome, uint32_t psn);
  void responder_read_run(Qp* qp, uint32_t* budget);
  /// Copies frame bytes [src_off, src_off + len) into a scatter list at
  /// `offset`, checking each entry's L_Key for local write in the QP's PD.
  /// False with *err LOC_PROT_ERR (bad key/bounds) or LOC_LEN_ERR (no room).
  bool scatter(Qp* qp, const Sge* sges, uint32_t num_sge, uint32_t offset, const rte_mbuf* m, uint32_t src_off,
               uint32_t len, WcStatus* err);
  /// Copies frame bytes [src_off, src_off + n) to [va, va + n) of a checked
  /// region; false only for an ODP region's page the application does not map.
  static bool place(const Mr& mr, uint64_t va, const rte_mbuf* m, uint32_t src_off, uint32_t n);
  /// One request on its way through responder_rx's chain of checks (rocev2/responder.h); the
  /// checks are its member functions. Defined in responder.cc only.
  struct ResponderRequest;

  EngineConfig cfg_;
  MrTable mrs_;
  std::vector<std::unique_ptr<Qp>> qps_;   ///< index = qpn - first_qpn
  std::unique_ptr<Qp> gsi_;                ///< QP1, when the host made it
  std::deque<uint32_t> free_qp_slots_;  ///< control path only
  std::vector<std::unique_ptr<Cq>> cqs_;
  std::vector<std::unique_ptr<Srq>> srqs_;
  std::vector<AddressVector> ahs_;
  std::vector<bool> ah_used_;
  std::vector<uint32_t> ah_pd_;
  std::vector<uint32_t> pd_refs_;          ///< per PD: MRs, QPs, SRQs, AHs using it
  std::vector<bool> pd_used_;
  struct McastGroup {
    IpAddr gid;
    std::vector<uint32_t> qpns;  ///< attached, in attach order
  };
  std::vector<McastGroup> mcast_;  ///< control path changes it; few groups, scanned
  RawFlowTable raw_flows_;         ///< control path changes it; scanned per frame only when not empty
  std::vector<uint32_t> raw_picked_;  ///< raw_rx's scratch (keeps its capacity)
  /// QPNs with requester or responder TX work: a fixed ring of max_qps (a QP
  /// is on it at most once, see Qp::on_ready_list), so the loop never allocates.
  class ReadyRing {
   public:
    explicit ReadyRing(uint32_t capacity) : slots_(capacity) {}
    bool empty() const { return count_ == 0; }
    size_t size() const { return count_; }
    void push_back(uint32_t qpn) {
      slots_[(head_ + count_) % slots_.size()] = qpn;
      ++count_;
    }
    uint32_t pop_front() {
      const uint32_t v = slots_[head_];
      head_ = (head_ + 1) % slots_.size();
      --count_;
      return v;
    }

   private:
    std::vector<uint32_t> slots_;
    size_t head_ = 0;
    size_t count_ = 0;
  };
  ReadyRing ready_;
  std::vector<rte_mbuf*> tx_;              ///< frames built this poll, flushed once
  core::TimerHeap timers_;
  uint32_t incarnations_ = 0;
  std::vector<AsyncEvent> events_;
  EngineCounters counters_;
  QpCounters retired_qp_counters_;        ///< of the QPs destroyed so far
  ResponderTrace responder_trace_;        ///< written only when kResponderTrace (debug builds)
  RecvRefill recv_refill_ = nullptr;
  void* recv_refill_ctx_ = nullptr;
  uint64_t now_ns_ = 0;
};

}  // namespace droce::rocev2
