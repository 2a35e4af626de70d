#pragma once
// The client library: a verbs context on droced, in C++. The rdma-core
// provider wraps it; droce-selftest and the tests use it directly.
//
// Control calls (create, modify, destroy, register) are messages on the
// control socket (abi/ctl_protocol.h), one at a time per context. The data
// path makes no syscall: post_send / post_recv write WQEs into the QP's
// shared ring and ring the context's doorbell; poll reads CQEs from the CQ's
// shared ring (abi/queues.h for the layouts and the doorbell rules).
//
// Errors: 0 or -errno as the verbs document them (EINVAL for bad
// arguments, ENOMEM for a full queue or too many objects, EBUSY for an
// object still in use). When droced stops or dies, the context turns fatal:
// control calls answer -EIO, posts answer -EIO, and get_async_event reports
// a device-fatal event (IBV_EVENT_DEVICE_FATAL, 8) once.
//
// Threading: any thread may call anything; control calls serialize on the
// context, each queue's data path on its own lock.

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "abi/ctl_protocol.h"
#include "abi/queues.h"
#include "abi/shm_ring.h"
#include "abi/verbs.h"
#include "abi/wqe.h"
#include "core/shm_region.h"
#include "core/unix_socket.h"
#include "provider/client/shared_memory.h"

namespace droce::client {

class Context;

/// A small spinlock for the data path (a post holds it for a copy).
class SpinLock {
 public:
  void lock() {
    while (flag_.test_and_set(std::memory_order_acquire)) {
    }
  }
  void unlock() { flag_.clear(std::memory_order_release); }

 private:
  std::atomic_flag flag_ = ATOMIC_FLAG_INIT;
};

class Cq {
 public:
  uint32_t id() const { return id_; }
  /// Entries the CQ holds (>= what was asked), as created or last resized.
  uint32_t cqe() const { return cqe_.load(std::memory_order_relaxed); }
  /// Up to n completions, oldest first; 0 when none; -EIO on a corrupt ring.
  int poll(abi::Completion* out, int n);
  /// Asks for one event on the next completion (or solicited one).
  int req_notify(bool solicited_only);
  /// The eventfd droced writes when an armed notification fires.
  int event_fd() const { return event_fd_.get(); }
  /// Waits up to timeout_ms (-1: forever) for an event and consumes it.
  /// 1: an event; 0: none in time; -EIO: the device is gone.
  int wait_event(int timeout_ms);
  /// Drops the completions of `qpn` this CQ holds now (a QP moved to RESET
  /// or destroyed leaves none behind, as an HCA's provider cleans its CQs);
  /// poll() skips them. Control path.
  void discard(uint32_t qpn);

 private:
  friend class Context;
  struct Discard {
    uint32_t qpn;
    uint32_t until;  ///< ring index: entries before it are dropped
  };
  Context* ctx_ = nullptr;
  uint32_t id_ = 0;
  std::atomic<uint32_t> cqe_{0};
  // The region, its block and ring are replaced by resize_cq: read and
  // written under lock_ only.
  core::ShmRegion region_;
  abi::QueueDoorbellBlock* block_ = nullptr;
  abi::ShmRingConsumer ring_;
  core::Fd event_fd_;
  SpinLock lock_;
  std::vector<Discard> discards_;  ///< under lock_; empty on the common path
};

/// A send or receive queue as the client sees it.
struct ClientQueue {
  /// Writes one send WR, given as its WQE header and scatter list, straight
  /// into the ring's next slot and publishes it: what Qp::post_send does
  /// between its checks of the QP and the doorbell (which the caller rings).
  /// With kSendInline the bytes the SGEs point at are gathered into the slot
  /// now (at most max_inline, and kMaxInlineData). -EINVAL (SGE count, inline
  /// length, a WQE the entry cannot hold), -ENOMEM (max_wr outstanding), -EIO
  /// (a corrupt ring).
  int push_send(const abi::SendWqeHeader& h, abi::SgeList sges);
  /// The same for a SendWr and its scatter list.
  int push_send(const abi::SendWr& wr);
  /// The most inline bytes one WR may carry, whatever droced grants.
  static constexpr uint32_t kMaxInlineData = 1024;

  abi::ShmRingProducer ring;
  uint32_t* pending = nullptr;  ///< the doorbell flag
  uint32_t max_wr = 0;
  uint32_t max_sge = 0;
  uint32_t max_inline = 0;
  SpinLock lock;
};

class Srq {
 public:
  uint32_t id() const { return id_; }
  uint32_t max_wr() const { return rq_.max_wr; }
  int post_recv(const abi::RecvWr& wr);

 private:
  friend class Context;
  Context* ctx_ = nullptr;
  uint32_t id_ = 0;
  core::ShmRegion region_;
  ClientQueue rq_;
};

struct QpCreate {
  abi::QpType type = abi::QpType::rc;
  uint32_t pd = 0;
  Cq* send_cq = nullptr;
  Cq* recv_cq = nullptr;
  Srq* srq = nullptr;
  abi::QpCap cap;
  bool sq_sig_all = false;
  bool block_self_mcast_loopback = false;  ///< needs a droced of ABI minor 5 (else -EOPNOTSUPP)
  /// XRC receive QPs: their domain (open_xrcd's id); they take nothing else here. XRC send QPs
  /// take pd, send_cq and cap's send half. Both need a droced of ABI minor 12 (else -EOPNOTSUPP).
  uint32_t xrcd = 0;
};

class Qp {
 public:
  uint32_t qpn() const { return qpn_; }
  abi::QpType type() const { return type_; }
  /// What droced granted.
  const abi::QpCap& cap() const { return cap_; }
  /// One WR. With kSendInline the SGEs' bytes are copied into the WQE now.
  /// -EINVAL (state, SGE count, inline length), -ENOMEM (max_send_wr
  /// outstanding), -EIO (device gone).
  int post_send(const abi::SendWr& wr);
  /// The same, the WR given as its WQE header (abi/queues.h; num_sge and
  /// inline_len are ignored) and its scatter list, which may be libibverbs'
  /// ibv_sge array as it is: the provider's post_send, which converts an
  /// ibv_send_wr once, into the header, and has both written straight into
  /// the ring's slot.
  int post_send(const abi::SendWqeHeader& h, abi::SgeList sges);
  int post_recv(const abi::RecvWr& wr);

 private:
  friend class Context;
  Context* ctx_ = nullptr;
  uint32_t qpn_ = 0;
  Cq* send_cq_ = nullptr;
  Cq* recv_cq_ = nullptr;
  abi::QpType type_ = abi::QpType::rc;
  abi::QpCap cap_;
  bool has_rq_ = true;
  std::atomic<uint8_t> state_{0};  ///< as last modified (abi::QpState)
  core::ShmRegion region_;
  ClientQueue sq_, rq_;
};

/// Device memory (ibv_alloc_dm): a region droced made and owns, mapped here as well, so the
/// bytes the client copies in are the ones the engine sends from and writes into (through MRs
/// on it, Context::reg_dm_mr).
class Dm {
 public:
  uint32_t id() const { return id_; }
  /// The bytes asked for (the mapping is rounded up to a page).
  uint64_t length() const { return length_; }
  uint8_t* data() const { return reinterpret_cast<uint8_t*>(region_.data()); }

 private:
  friend class Context;
  uint32_t id_ = 0;
  uint64_t length_ = 0;
  core::ShmRegion region_;
};

struct AsyncEvent {
  uint32_t type;  ///< ibv_event_type
  uint32_t id;    ///< QPN, CQ id, SRQ id or port
};

/// What an async event's id names, by its type (ibv_event_type): a CQ, a QP,
/// an SRQ, or else a port (0 for the device, IBV_EVENT_DEVICE_FATAL).
enum class EventElement : uint8_t { cq, qp, srq, port };
EventElement event_element(uint32_t type);

/// droced's state as JSON, without opening a verbs context (the droce CLI).
int query_stats(const std::string& socket_path, std::string* json);
/// A fault rule set or cleared (`droce fault`, abi::ctl::FaultRequest); *id the rule's.
int control_fault(const std::string& socket_path, const abi::ctl::FaultRequest& q, uint32_t* id);
/// `droce cc set`: the device's DCQCN parameters (abi::ctl::CcRequest). 0 or -errno.
int control_cc(const std::string& socket_path, const abi::ctl::CcRequest& q);
/// `droce capture`: droced writes pcapng to `fd` (a copy goes over the socket) until q.count
/// frames, the fd's reader goes away, or *session (the control connection, kept open by the
/// caller) closes. *snaplen: the snap length droced applies. 0 or -errno (-EPERM: not root or
/// droced's user; -EBUSY: a capture runs).
int start_capture(const std::string& socket_path, const abi::ctl::CaptureRequest& q, int fd, core::Fd* session,
                  uint32_t* snaplen);

class Context {
 public:
  /// $DROCE_RUN_DIR (default /run/droce) / <device>.sock
  static std::string socket_path(const std::string& device = "droce0");
  /// Connects and says hello. -ENOENT / -ECONNREFUSED (no droced), -EPROTO
  /// (a droced of another major ABI version), -errno.
  static int open(const std::string& socket_path, std::unique_ptr<Context>* out);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const abi::ctl::HelloReply& info() const { return hello_; }
  /// droced's control-protocol minor version (from its hello reply).
  uint16_t daemon_minor() const { return daemon_minor_; }
  int query_device(abi::ctl::QueryDeviceReply* out);
  int query_port(uint8_t port, abi::ctl::QueryPortReply* out);
  int query_gid(uint8_t port, uint32_t index, abi::ctl::QueryGidReply* out);

  int alloc_pd(uint32_t* pd);
  int dealloc_pd(uint32_t pd);
  int reg_mr(uint32_t pd, void* addr, size_t length, uint32_t access, uint32_t* lkey, uint32_t* rkey);
  /// ibv_reg_mr with IBV_ACCESS_ON_DEMAND (`access` has abi::kAccessOnDemand): nothing is
  /// converted, copied or pinned; droced reaches [addr, addr + length) through this process's
  /// /proc/self/mem, opened here and sent with the request. addr nullptr with length SIZE_MAX
  /// is implicit ODP. -EINVAL (PD, range, access), -ENOMEM, -EOPNOTSUPP (droced before ABI
  /// minor 13), or what opening /proc/self/mem returns.
  int reg_odp_mr(uint32_t pd, void* addr, size_t length, uint32_t access, uint32_t* lkey, uint32_t* rkey);
  /// ibv_advise_mr's prefetch of [addr, addr + length) under `lkey`: the pages are faulted in
  /// this process (MADV_POPULATE_WRITE with `write`, else MADV_POPULATE_READ), where droced's
  /// accesses find them. -EINVAL: `lkey` is not one of this context's ODP regions or the range
  /// is outside it; -EFAULT: a page in the range is not mapped; what madvise returns.
  int prefetch_odp(uint32_t lkey, uint64_t addr, uint32_t length, bool write);
  int dereg_mr(uint32_t lkey);
  /// ibv_alloc_mw: *rkey is the new window's R_Key. -EINVAL (PD, type), -ENOMEM,
  /// -EOPNOTSUPP when droced predates memory windows (ABI minor < 10).
  int alloc_mw(uint32_t pd, uint32_t type, uint32_t* rkey);
  /// ibv_dealloc_mw by the window's R_Key (its index; the tag may be older): -EINVAL if it
  /// names none of this client's windows.
  int dealloc_mw(uint32_t rkey);
  /// ibv_rereg_mr in place: the region keeps its keys and takes `pd`,
  /// `access` and, with abi::ctl::kReregTranslation in `flags`, the range
  /// [addr, addr + length) (else addr/length must be its current range).
  /// -EINVAL, -EFAULT and -ENOMEM as reg_mr; -EOPNOTSUPP when droced predates
  /// rereg_mr (ABI minor < 2). On failure the region is as it was.
  int rereg_mr(uint32_t lkey, uint32_t flags, uint32_t pd, void* addr, size_t length, uint32_t access);

  /// A CQ of at least `cqe` entries. With `channel` (register_channel's
  /// id), an armed notification writes `user_handle` to that channel instead
  /// of the CQ's eventfd. -EINVAL (cqe 0 or past the device's max_cqe, an
  /// unknown channel), -ENOMEM, -EOPNOTSUPP (a channel, and droced predates them).
  /// With `timestamp`, droced stamps each completion as it pushes it (abi::Cqe::timestamp,
  /// abi::Completion::timestamp_ns): -EOPNOTSUPP from a droced before ABI minor 11.
  int create_cq(uint32_t cqe, Cq** out, uint32_t channel = 0, uint64_t user_handle = 0, bool timestamp = false);
  /// Hands droced the write end of a completion channel's pipe (the caller
  /// keeps its descriptor and may close it: droced has its own). *id names it
  /// in create_cq. -EINVAL (not a pipe's write end), -ENOMEM (too many),
  /// -EOPNOTSUPP (droced predates completion channels: ABI minor < 1).
  int register_channel(int write_fd, uint32_t* id);
  /// ibv_resize_cq: droced moves the CQ to a ring of at least `cqe` entries
  /// (cq->cqe() then says how many) with the completions not yet polled, in
  /// order; arming, the eventfd or channel, and the QPs and SRQs on the CQ
  /// carry on. Polls and arms of the CQ wait (its lock) until it is done.
  /// It first waits (up to a second) until droced has taken the doorbells
  /// rung before it, so the completions the engine makes as it takes WRs
  /// (UD and UC sends, local errors) are in the CQ and count, as on an HCA,
  /// which has made them long before a resize command reaches it.
  /// -EINVAL (cqe 0 or past max_cqe, or fewer than the completions the CQ
  /// holds now), -ENOMEM, -EOPNOTSUPP (droced predates resize_cq: ABI minor
  /// < 3), -EIO (droced gone); on those the CQ is as it was. When droced
  /// moved the ring but this process cannot map the new one (what
  /// ShmRegion::map_peer returns, or -EPROTO for a ring that does not go on
  /// where this side stopped), the CQ is lost: poll answers -EIO.
  int resize_cq(Cq* cq, uint32_t cqe);
  /// *comp_events_written: the completion-channel records droced wrote for the CQ
  /// (abi::ctl::DestroyCqReply), or kEventsUnknown from a droced before protocol minor 6
  /// or one gone (-EIO is taken as destroyed).
  int destroy_cq(Cq* cq, uint64_t* comp_events_written = nullptr);
  static constexpr uint64_t kEventsUnknown = UINT64_MAX;
  int create_srq(uint32_t pd, uint32_t max_wr, uint32_t max_sge, uint32_t limit, Srq** out);
  /// An XRC SRQ of domain `xrcd` whose receives complete into `cq`; its id() is its SRQ number
  /// (ibv_get_srq_num). -EINVAL (PD, domain, CQ, sizes), -EOPNOTSUPP (droced before minor 12).
  int create_xrc_srq(uint32_t pd, uint32_t max_wr, uint32_t max_sge, uint32_t limit, uint32_t xrcd, Cq* cq,
                     Srq** out);
  int modify_srq(Srq* srq, uint32_t mask, uint32_t max_wr, uint32_t limit);
  int query_srq(Srq* srq, uint32_t* max_wr, uint32_t* max_sge, uint32_t* limit);
  int destroy_srq(Srq* srq);
  int create_qp(const QpCreate& c, Qp** out);
  /// The AV's dgid, sgid_index, hop_limit, traffic_class, flow_label and sl
  /// count; droced resolves the MAC (which may take a neighbour exchange).
  int modify_qp(Qp* qp, const abi::QpAttr& attr, uint32_t mask);
  int query_qp(Qp* qp, abi::QpAttr* attr);
  int destroy_qp(Qp* qp);
  /// ibv_open_xrcd: with `fd` >= 0 the domain that file names for every client of this droced
  /// (made when `oflags` has O_CREAT), else a new private one. -EINVAL, -EAGAIN (no domain for
  /// the file and no O_CREAT), -ENOMEM, -EOPNOTSUPP (droced before minor 12).
  int open_xrcd(int fd, uint32_t oflags, uint32_t* id);
  /// -EBUSY while this client has XRC SRQs or receive QPs of it and this is its last open.
  int close_xrcd(uint32_t id);
  /// ibv_open_qp: XRC receive QP `qpn` of domain `xrcd`, which any client made; destroy_qp
  /// drops this hold. -EINVAL (type, domain, no such QP).
  int open_qp(uint32_t xrcd, uint32_t qpn, abi::QpType type, Qp** out);
  /// ibv_attach_mcast / ibv_detach_mcast: `gid` 16 bytes, network order. -EOPNOTSUPP from a
  /// droced before multicast (ABI minor 4).
  int attach_mcast(Qp* qp, const uint8_t* gid, uint16_t lid, bool attach);
  /// ibv_create_flow on a raw packet QP (`req.qpn` is filled from `qp`): *id names the rule.
  /// -EINVAL (not a raw QP, a bad type), -EOPNOTSUPP from a droced before minor 14.
  int create_flow(Qp* qp, abi::ctl::CreateFlowRequest req, uint32_t* id);
  int destroy_flow(uint32_t id);
  /// Receive-side scaling: `qp` spreads what its rules pick over `req.wqs` (raw QPs of this
  /// context); `req.qpn` is filled from `qp`.
  int set_rss(Qp* qp, abi::ctl::RssRequest req);
  int create_ah(uint32_t pd, const abi::AddressVector& av, uint32_t* ah);

  /// ibv_alloc_dm: `length` bytes (at most QueryDeviceReply::max_dm_size), zeroed, mapped here.
  /// -EINVAL (length 0 or too large, log_align past a page), -ENOMEM (the session's share is
  /// used), -EOPNOTSUPP (droced predates device memory: ABI minor < 11).
  int alloc_dm(uint64_t length, uint32_t log_align, Dm** out);
  /// ibv_free_dm: -EBUSY while an MR is registered on it (the DM stays).
  int free_dm(Dm* dm);
  /// ibv_reg_dm_mr: a zero-based MR over [offset, offset + length) of `dm` (access must hold
  /// abi::kAccessZeroBased). -EINVAL (PD, range, access), -ENOMEM. dereg_mr frees it.
  int reg_dm_mr(uint32_t pd, Dm* dm, uint64_t offset, uint64_t length, uint32_t access, uint32_t* lkey,
                uint32_t* rkey);
  int destroy_ah(uint32_t ah);

  /// droced's state as JSON (what `droce ... --json` prints).
  int stats(std::string* json);

  /// One async event; -EAGAIN when none (timeout_ms 0: without waiting; it
  /// then also consumes the wake-ups async_fd() signalled), or waits up to
  /// timeout_ms (-1 forever).
  int get_async_event(AsyncEvent* out, int timeout_ms = 0);
  /// The descriptor that becomes readable with an async event or droced's end.
  int async_fd() const { return async_epoll_.get(); }
  /// droced stopped, crashed or marked this context fatal.
  bool fatal() const;

 private:
  friend class Cq;
  friend class Qp;
  friend class Srq;
  friend int query_stats(const std::string&, std::string*);
  friend int control_fault(const std::string&, const abi::ctl::FaultRequest&, uint32_t*);
  friend int control_cc(const std::string&, const abi::ctl::CcRequest&);
  friend int start_capture(const std::string&, const abi::ctl::CaptureRequest&, int, core::Fd*, uint32_t*);
  Context() = default;

  int call(abi::ctl::MsgType type, const void* body, size_t len, void* reply, size_t reply_len,
           std::vector<core::Fd>* fds = nullptr, std::span<const int> send_fds = {},
           std::span<const uint8_t> tail = {});
  /// Waits until the message at the head of the socket is the reply to `seq` (or not a reply
  /// at all): the socket may be shared with forked processes using the same context. False
  /// when the socket closed.
  bool own_reply_next(uint32_t seq);
  /// Rings the doorbell for a queue whose `pending` flag guards it.
  void ring_doorbell(uint16_t kind, uint32_t id, uint32_t* pending);
  /// Waits (a bounded time) until droced has taken every doorbell rung so far.
  void wait_doorbells_taken();
  void set_dead();
  int make_srq(abi::ctl::MsgType type, const void* body, size_t len, Srq** out);
  int make_xrc_qp(abi::ctl::MsgType type, uint32_t xrcd, uint32_t qpn, Qp** out);

  core::Fd sock_;
  abi::ctl::HelloReply hello_{};
  core::ShmRegion context_;
  abi::ContextPage* page_ = nullptr;
  abi::ShmRingProducer doorbells_;
  abi::ShmRingConsumer events_;
  core::Fd async_fd_, wake_fd_, async_epoll_;
  std::atomic<bool> dead_{false};
  bool fatal_reported_ = false;
  uint32_t seq_ = 0;
  pid_t pid_ = 0;  ///< the process that numbered the last request (a forked child renumbers)
  uint16_t daemon_minor_ = 0;
  std::mutex ctl_mutex_;
  SpinLock doorbell_lock_;
  SpinLock event_lock_;
  SharedMemory memory_;
  struct MrRange {
    void* addr;
    size_t length;
    bool odp = false;  ///< reg_odp_mr: no SharedMemory references to give back
  };
  std::unordered_map<uint32_t, MrRange> mrs_;
  std::unordered_map<Cq*, std::unique_ptr<Cq>> cqs_;
  std::unordered_map<Qp*, std::unique_ptr<Qp>> qps_;
  std::unordered_map<Srq*, std::unique_ptr<Srq>> srqs_;
  std::unordered_map<Dm*, std::unique_ptr<Dm>> dms_;
};

}  // namespace droce::client
