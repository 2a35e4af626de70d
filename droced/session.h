#pragma once
// One client of droced (an application's verbs context, or the droce CLI):
// its control socket, its shared regions and every object it created.
//
// A client is untrusted. Every message is checked (abi/ctl_protocol), every
// id it names is looked up in this session's own tables (another client's
// objects are simply not there), and every ring entry is copied out of
// shared memory and checked before the engine sees it (abi/wqe).
// A client that breaks the protocol or corrupts a ring is disconnected;
// nothing it does reaches another client. When a session ends (EOF, SIGKILL
// of the client, a fault, droced stopping), its QPs go to the error state
// and everything it owned is freed and unmapped.
//
// The data path: the client writes WQEs into a QP's shared ring and rings
// the doorbell (abi/queues.h). droced drains each queue named by a
// doorbell into the engine, and gives ring slots back only as the engine
// retires the WQEs, so a client never has more than max_send_wr outstanding,
// as on a hardware HCA. Completions go straight from the engine into the
// shared CQ ring (a CqSink); a CQ's eventfd is written when an armed
// notification fires.
//
// Threading: the worker (droced/worker.h) that serves this client; its
// Device, engine and owner maps are that worker's alone.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "droced/cc_settings.h"
#include "droced/control_jobs.h"
#include "droced/fault_stage.h"
#include "droced/device_core.h"
#include "droced/peer_memory.h"
#include "droced/process_memory.h"
#include "abi/ctl_protocol.h"
#include "abi/queues.h"
#include "abi/shm_ring.h"
#include "abi/wqe.h"
#include "core/clock.h"
#include "core/counter_table.h"
#include "core/shm_region.h"
#include "core/unix_socket.h"
#include "net/gid_table.h"

namespace droce::droced {

class Session;

/// Per-client ceilings: a client cannot exhaust droced for the others.
struct SessionLimits {
  uint32_t max_qps = 8192;
  uint32_t max_cqs = 8192;
  uint32_t max_srqs = 1024;
  uint32_t max_mrs = 65536;
  uint32_t max_pds = 1024;
  uint32_t max_ahs = 65536;
  uint32_t event_entries = 1024;
  /// Device memory (alloc_dm) a client may hold at once, all allocations together; also the
  /// largest one (QueryDeviceReply::max_dm_size, which ibv_alloc_dm(3) calls the most that
  /// can be allocated). Host memory droced owns, so a modest share, as a NIC's on-chip memory.
  uint64_t max_dm_bytes = uint64_t{1} << 20;
  uint32_t max_dms = 1024;
};

/// XRC domains and receive QPs (IBA A14), shared by the clients of one worker: a domain opened
/// through a file is found again by that file's device and inode (ibv_open_xrcd(3)); a receive
/// QP may be held by several clients (ibv_open_qp). droced/session_xrc.cc keeps them.
struct XrcRegistry {
  struct Domain {
    bool file = false;  ///< named by a file (else private to the client that opened it)
    uint64_t st_dev = 0, st_ino = 0;
    uint32_t opens = 0;  ///< open_xrcd calls not yet closed, over every client
  };
  struct TargetQp {
    uint32_t xrcd = 0;
    std::vector<Session*> holders;  ///< who created or opened it, in that order
  };
  std::unordered_map<uint32_t, Domain> domains;
  std::unordered_map<uint32_t, TargetQp> targets;  ///< by QPN
  uint32_t next_domain = 1;
  static constexpr uint32_t kMaxDomains = 1u << 16;
};

/// The device as one worker's sessions see it: the shared facts (name, port,
/// GIDs, limits) and that worker's core, wake eventfd and owner maps.
struct Device {
  std::string name = "droce0";
  uint64_t node_guid = 0;
  DeviceCore* core = nullptr;
  net::Port* port = nullptr;
  net::GidTable* gids = nullptr;
  uint16_t vlan = net::kNoVlan;
  rocev2::DeviceLimits limits;
  uint32_t max_qps = 0;
  SessionLimits session_limits;
  int wake_fd = -1;  ///< eventfd clients write when droced sleeps
  /// Long control work off the worker (droced/control_jobs.h); nullptr: all inline.
  ControlJobs* jobs = nullptr;
  /// Which session owns each engine object (async events are routed by it).
  std::unordered_map<uint32_t, Session*> qp_owner, cq_owner, srq_owner;
  /// XRC domains and receive QPs (droced/session_xrc.cc).
  XrcRegistry xrc;
  /// The device's fault rules (`droce fault`); nullptr: none can be set.
  FaultRules* faults = nullptr;
  /// The device's capture (`droce capture`); nullptr: none can run.
  Capture* capture = nullptr;
  /// The device's DCQCN parameters (`droce cc`); nullptr: none can be set.
  CcSettings* cc = nullptr;
  /// A JSON rendering of droced's state for the `stats` message.
  std::string (*render_stats)(void* arg) = nullptr;
  void* render_arg = nullptr;
};

/// What each counts is in kSessionCounters.
struct SessionCounters {
  uint64_t messages = 0;
  uint64_t errors = 0;
  uint64_t doorbells = 0;
  uint64_t bad_doorbells = 0;
  uint64_t wqes_posted = 0;
  uint64_t wqes_refused = 0;
  uint64_t events_dropped = 0;
};

/// SessionCounters described once (core/counter_table.h): a client's row of `droce clients`.
inline constexpr core::Counter<SessionCounters> kSessionCounters[] = {
    {"messages", &SessionCounters::messages, "control requests"},
    {"errors", &SessionCounters::errors, "requests answered with an error"},
    {"doorbells", &SessionCounters::doorbells, "doorbells rung"},
    {"bad_doorbells", &SessionCounters::bad_doorbells, "doorbells of unknown kind or id (ignored)"},
    {"wqes_posted", &SessionCounters::wqes_posted, "work requests taken from the client's queues"},
    {"wqes_refused", &SessionCounters::wqes_refused, "entries that failed their checks (QP to error)"},
    {"events_dropped", &SessionCounters::events_dropped, "async events lost: the client's event ring was full"},
};
static_assert(core::covers(kSessionCounters));

class Session {
 public:
  Session(Device* dev, core::Fd socket, uint32_t id);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  int fd() const { return sock_.get(); }
  uint32_t id() const { return id_; }
  pid_t pid() const { return pid_; }
  const std::string& program() const { return program_; }
  /// Set when the session must end (EOF, protocol violation, corrupt ring).
  bool closed() const { return closed_; }
  /// Closed for breaking the protocol (not a plain disconnect).
  bool faulted() const { return faulted_; }
  const char* close_reason() const { return close_reason_; }

  /// Reads and answers what the socket has (non-blocking).
  void on_readable(uint64_t now_ns);
  /// Retries a request waiting for a neighbour (modify to RTR, create_ah), or
  /// finishes one whose job on ControlJobs ended (reg_mr).
  void poll_pending(uint64_t now_ns);
  bool has_pending() const { return pending_.active; }

  /// Data path, once per loop: doorbells, queues the engine refused for
  /// lack of room, ring slots of retired WQEs. Returns the work done.
  uint32_t poll(uint64_t now_ns);

  /// An async event for this client (ibv_event_type, id).
  void push_event(uint32_t type, uint32_t id);
  /// Sleep handshake: droced sets the flag, then checks doorbells_waiting().
  void set_daemon_sleeping(bool sleeping);
  bool doorbells_waiting();
  /// When and from which CPU the client last woke droced (its own stamp: a hint).
  core::WakeStamp wake_stamp() const;
  /// Doorbells the client rang that this loop has not taken yet.
  uint32_t doorbells_queued() { return hello_done_ && !closed_ ? doorbells_.size() : 0; }
  /// Send-queue entries the client published that the engine has not taken (all QPs).
  uint32_t sq_entries_unread();
  /// droced is stopping: QPs to error (flushed into the CQ rings) and the
  /// context marked fatal. The socket is closed by the destructor.
  void mark_fatal();

  const SessionCounters& counters() const { return counters_; }
  size_t qp_count() const { return qps_.size(); }
  size_t cq_count() const { return cqs_.size(); }
  size_t mr_count() const { return mrs_.size(); }
  /// The QPNs this session owns (for `droce qps`).
  std::vector<uint32_t> qpns() const;

 private:
  struct SharedCq;
  struct SharedQueue;
  struct SharedQp;
  struct SharedSrq;
  struct MrEntry;
  struct DmEntry;

  // ---- Control: one table indexed by message type (session_control.cc) ----
  // Adding a control message touches its MsgType (abi/ctl_protocol.h), one entry in its
  // family's table and its handler: a specialization of serve<> beside that table
  // (session_device.cc, session_pd.cc, session_mr.cc, session_cq.cc, session_srq.cc,
  // session_qp.cc, session_ah.cc, session_mcast.cc).

  /// One control request as its handler sees it.
  struct Control {
    const abi::ctl::CtlHeader& h;
    const std::vector<uint8_t>& msg;  ///< the whole message (reg_mr reads the tail past its body)
    std::vector<core::Fd>& fds;       ///< the descriptors that came with it (a handler may take them)
    uint64_t now_ns;
  };
  /// The body of a message that has none (nothing is decoded; extra bytes are ignored).
  struct NoBody {};
  /// When a request may come, checked before its body is decoded.
  enum class When : uint8_t {
    after_hello,   ///< before hello: a protocol violation (the session is faulted)
    any_time,      ///< stats: the droce CLI asks without a context
    before_hello,  ///< hello itself: a second one is answered -EALREADY
  };
  struct ControlEntry {
    abi::ctl::MsgType type{};
    When when = When::after_hello;
    /// decode_and_serve<> for the message's handler and body; nullptr: no such request.
    void (*serve)(Session& s, const Control& c) = nullptr;
  };

  /// The handler of message T: replies (reply()) or, for a deferred request, records it in
  /// pending_ and leaves the reply to poll_pending(). Defined only as explicit
  /// specializations, each in its family's file before that file's table.
  template <abi::ctl::MsgType T, class Body>
  void serve(const Control& c, const Body& q);
  /// The one adapter: decodes Body (at least MinSize bytes, the rest zero) and calls
  /// serve<T>, or replies -EINVAL to a body that does not decode.
  template <abi::ctl::MsgType T, class Body, size_t MinSize = sizeof(Body)>
  static void decode_and_serve(Session& s, const Control& c) {
    Body q{};
    if constexpr (!std::is_empty_v<Body>) {
      if (abi::ctl::decode_body(c.msg, &q, MinSize) != 0) return s.reply(c.h, -EINVAL);
    }
    s.serve<T>(c, q);
  }
  /// A table entry for message T whose request body is Body (NoBody: none).
  template <abi::ctl::MsgType T, class Body, size_t MinSize = sizeof(Body)>
  static constexpr ControlEntry control(When when = When::after_hello) {
    return {T, when, &decode_and_serve<T, Body, MinSize>};
  }
  /// Each family's entries (beside its handlers), gathered into the table by control_for().
  static std::span<const ControlEntry> device_controls();
  static std::span<const ControlEntry> pd_controls();
  static std::span<const ControlEntry> mr_controls();
  static std::span<const ControlEntry> mw_controls();
  static std::span<const ControlEntry> dm_controls();
  static std::span<const ControlEntry> cq_controls();
  static std::span<const ControlEntry> srq_controls();
  static std::span<const ControlEntry> qp_controls();
  static std::span<const ControlEntry> ah_controls();
  static std::span<const ControlEntry> mcast_controls();
  static std::span<const ControlEntry> flow_controls();
  static std::span<const ControlEntry> fault_controls();
  static std::span<const ControlEntry> capture_controls();
  static std::span<const ControlEntry> cc_controls();
  static std::span<const ControlEntry> xrc_controls();
  /// The entry of message type `type`; nullptr when no family serves it.
  static const ControlEntry* control_for(uint16_t type);

  void handle(const std::vector<uint8_t>& msg, std::vector<core::Fd>& fds, uint64_t now_ns);
  void reply(const abi::ctl::CtlHeader& h, int status, const void* body = nullptr, size_t len = 0,
             std::span<const int> fds = {});
  void fault(const char* why);

  int on_hello(const abi::ctl::HelloRequest& q, const abi::ctl::CtlHeader& h);
  int prepare_reg_mr(const abi::ctl::RegMrRequest& q, const Control& c, MrEntry* m);
  int finish_reg_mr(const abi::ctl::RegMrRequest& q, std::unique_ptr<MrEntry> m, abi::ctl::RegMrReply* out);
  void release_mr(std::unique_ptr<MrEntry> m);
  /// Deallocates every window of this client (before its regions: a bound one holds its region).
  void release_mws();
  /// An MR on device memory `dm` went (dereg_mr): the DM may be freed once none is left.
  void dm_mr_gone(uint32_t dm);
  void finish_pending_reg_mr();
  /// ibv_reg_mr with IBV_ACCESS_ON_DEMAND (reg_odp_mr).
  int on_reg_odp_mr(const abi::ctl::RegOdpMrRequest& q, const Control& c, abi::ctl::RegMrReply* out);
  /// ibv_rereg_mr in place (rereg_mr): the keys stay.
  int on_rereg_mr(const abi::ctl::ReregMrRequest& q, const Control& c, abi::ctl::RegMrReply* out);
  int on_create_cq(const abi::ctl::CreateCqRequest& r, abi::ctl::CreateCqReply* out, std::unique_ptr<SharedCq>* made);
  /// A completion channel's write end (register_channel).
  int on_register_channel(std::vector<core::Fd>& fds, uint32_t* id);
  /// ibv_resize_cq (resize_cq): the CQ's ring moves to a new region with
  /// the completions not yet polled; the reply carries the region.
  int on_resize_cq(const abi::ctl::ResizeCqRequest& r, abi::ctl::ResizeCqReply* out);
  /// With `xrcd`, an XRC SRQ of that domain completing into `cq` (create_xrc_srq).
  int on_create_srq(const abi::ctl::CreateSrqRequest& r, abi::ctl::CreateSrqReply* out, uint32_t xrcd = 0,
                    SharedCq* cq = nullptr);
  int on_create_qp(const abi::ctl::CreateQpRequest& r, abi::ctl::CreateQpReply* out);
  /// 1 when waiting for a neighbour (the reply comes later).
  int on_modify_qp(const abi::ctl::ModifyQpRequest& r, uint64_t now_ns);
  int on_query_qp(uint32_t qpn, abi::ctl::WireQpAttr* out);
  int on_create_ah(const abi::ctl::CreateAhRequest& r, uint64_t now_ns, uint32_t* ah);
  int destroy_qp(uint32_t qpn);
  /// *events_written: the records written to the CQ's completion channel (DestroyCqReply).
  int destroy_cq(uint32_t id, uint64_t* events_written);
  int destroy_srq(uint32_t id);
  /// Fills the address vector from the client's: source GID, VLAN, MACs.
  int build_av(const abi::ctl::WireAv& w, rocev2::AddressVector* av) const;

  // XRC (session_xrc.cc).
  int on_open_xrcd(const abi::ctl::OpenXrcdRequest& q, std::vector<core::Fd>& fds, uint32_t* id);
  int close_xrcd(uint32_t id);
  int on_create_xrc_srq(const abi::ctl::CreateXrcSrqRequest& q, abi::ctl::CreateSrqReply* out);
  int on_xrc_qp(const abi::ctl::XrcQpRequest& q, bool open, uint32_t* qpn);
  /// This client created or opened XRC receive QP `qpn` (and may modify, query, destroy it).
  bool holds_xrc_qp(uint32_t qpn) const { return xrc_qps_.count(qpn) != 0; }
  /// Drops this client's hold on an XRC receive QP; the last hold destroys it.
  int close_xrc_qp(uint32_t qpn);
  /// An XRC receive QP found no receive on the SRQ it names: that SRQ's client refills it.
  void refill_xrc_recv(uint32_t qpn);
  /// An XRC receive QP (of any client) completes a receive of one of this client's XRC SRQs
  /// into its CQ: the SRQ's taken slots go back first (release_for_completion).
  void release_xrc_for_completion(uint32_t qpn);
  /// The session ends: its holds on XRC receive QPs and domains go.
  void release_xrc();

  void drain_sq(SharedQp& q);
  void drain_rq(SharedQp& q);
  void drain_srq(SharedSrq& s);
 public:
  /// The engine found no receive WQE for a message to `qpn` (Engine::
  /// set_recv_refill): takes what the client posted to its receive queue or
  /// SRQ since the last doorbell was read. Entries that fail their checks are
  /// left for the next loop, which refuses them (not from inside the engine).
  void refill_recv(uint32_t qpn);
  /// The same for SRQ `id` of this client (an XRC receive QP of another client took from it).
  void refill_srq(uint32_t id);
 private:
  void arm_cq(SharedCq& c);
  /// Puts a queue with WQEs in the engine (or a backlog) on the active list.
  void track(SharedQp& q, bool busy);
  void track(SharedSrq& s, bool busy);
  void release_retired();
  /// Gives back the slots of `qpn`'s retired WQEs before its completion is
  /// pushed (SharedCq::push).
  void release_for_completion(uint32_t qpn);
  void refuse_wqe(SharedQp& q, const uint8_t* entry, uint32_t size, bool send);
  void teardown();

  Device* dev_;
  core::Fd sock_;
  uint32_t id_;
  pid_t pid_ = -1;
  uid_t uid_ = static_cast<uid_t>(-1);
  /// Root or droced's own user: who may change what every client's traffic sees (fault rules,
  /// capture), not only its own objects.
  bool operator_client() const;
  bool privileged_ = false;  ///< the client held CAP_NET_RAW when it connected
  std::string program_;
  bool hello_done_ = false;
  bool closed_ = false;
  bool faulted_ = false;
  const char* close_reason_ = "";

  core::ShmRegion context_;
  abi::ContextPage* page_ = nullptr;
  abi::ShmRingConsumer doorbells_;
  abi::ShmRingProducer events_;
  core::Fd async_fd_;

  std::vector<uint32_t> pds_;
  std::unordered_map<uint32_t, std::unique_ptr<SharedQp>> qps_;
  std::unordered_map<uint32_t, std::unique_ptr<SharedCq>> cqs_;
  std::unordered_map<uint32_t, std::unique_ptr<SharedSrq>> srqs_;
  std::unordered_map<uint32_t, std::unique_ptr<MrEntry>> mrs_;  ///< by lkey
  /// The client's address space, for its ODP regions (the first reg_odp_mr brings it); the
  /// engine's ODP regions point here, so it outlives them (teardown deregisters them first).
  ProcessMemory odp_memory_;
  std::unordered_map<uint32_t, uint32_t> flows_;  ///< raw packet QPs' flow rules: id -> QPN
  std::unordered_set<uint32_t> mws_;  ///< memory windows, by key index (a bind changes the tag)
  std::unordered_map<uint32_t, std::unique_ptr<DmEntry>> dms_;  ///< device memory, by id
  uint32_t next_dm_id_ = 1;
  uint64_t dm_bytes_ = 0;  ///< the regions' bytes in dms_ (SessionLimits::max_dm_bytes)
  std::unordered_map<uint32_t, uint32_t> xrcds_;  ///< XRC domains this client opened: id -> opens
  std::unordered_set<uint32_t> xrc_qps_;          ///< XRC receive QPs it created or opened
  std::vector<uint32_t> ahs_;
  /// Completion channels by id (register_channel); CQs share them.
  std::unordered_map<uint32_t, std::shared_ptr<core::Fd>> channels_;
  uint32_t next_channel_id_ = 1;

  /// Queues with WQEs read but not yet retired (their slots are given back
  /// as the engine retires them), and queues the engine had no room for.
  std::vector<SharedQp*> active_qps_;
  std::vector<SharedSrq*> active_srqs_;
  std::vector<uint8_t> scratch_;
  // The drains' decoded entries, kept: a fresh one per entry zeroed 32 SGEs each time.
  rocev2::SendWr send_wr_;
  rocev2::RecvWr recv_wr_;
  bool draining_ = false;   ///< a drain_* is reading ring entries by position
  bool refilling_ = false;  ///< refill_recv: a bad entry stops the drain instead of being refused

  struct Pending {
    bool active = false;
    abi::ctl::CtlHeader header{};
    abi::ctl::ModifyQpRequest modify{};
    abi::ctl::CreateAhRequest create_ah{};
    // reg_mr: the region being populated on ControlJobs (the job holds it too).
    abi::ctl::RegMrRequest reg_mr{};
    std::shared_ptr<MrEntry> mr;
    std::shared_ptr<ControlJobs::Job> job;
  } pending_;

  SessionCounters counters_;
};

}  // namespace droce::droced
