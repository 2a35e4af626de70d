#pragma once
// The objects a session shares with its client (regions, rings, the CQ sink) and the small
// helpers the session's files share. Private to droced/session*.cc.

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <memory>

#include "droced/session.h"
#include "abi/ctl_attr.h"
#include "abi/queues.h"
#include "abi/shm_ring.h"
#include "core/shm_region.h"

namespace droce::droced {

inline constexpr const char* kDaemonVersion = "droce 0.1.0";

inline uint32_t pow2_at_least(uint32_t n) { return n <= 1 ? 1 : std::bit_ceil(n); }

inline void store_flag(uint32_t* p, uint32_t v) { std::atomic_ref<uint32_t>(*p).store(v); }

inline void write_eventfd(int fd) {
  const uint64_t one = 1;
  // A full counter (2^64 - 2 unread events) or a closed reader loses nothing
  // that matters: the reader wakes either way.
  [[maybe_unused]] ssize_t n = ::write(fd, &one, sizeof one);
}

// The region of a queue (QP, SRQ or CQ): the doorbell block, then rings. Populated up front (no
// page faults on the data path) unless it is large: a CQ of millions of entries (max_cqe is
// mlx5's) gets its pages as it is written.
inline constexpr size_t kPopulateMax = size_t{16} << 20;

inline int make_region(const char* name, size_t bytes, core::ShmRegion* out) {
  core::ShmMapOptions o;
  o.populate = bytes <= kPopulateMax;
  return core::ShmRegion::create(name, bytes, o, out);
}

inline size_t align64(size_t n) { return (n + 63) & ~size_t{63}; }

// Gives back the ring slots of WQEs the engine retired since the last call.
inline void release_queue(abi::ShmRingConsumer& ring, uint32_t* ahead, uint32_t* mark, uint32_t* refused,
                          uint32_t retire_index) {
  const uint32_t done = std::min(retire_index - *mark + *refused, *ahead);
  *mark = retire_index;
  *refused = 0;
  if (done == 0) return;
  uint32_t got;
  (void)ring.peek(*ahead, &got);
  ring.release(std::min(done, got));
  *ahead -= std::min(done, got);
}

struct Session::SharedCq final : rocev2::CqSink {
  rocev2::Cq* cq = nullptr;
  core::ShmRegion region;
  abi::QueueDoorbellBlock* block = nullptr;  // sq_pending: arm doorbell in flight; rq_pending: mode bits
  abi::ShmRingProducer ring;
  core::Fd event_fd;
  uint32_t users = 0;
  // A completion channel (register_channel): notifications go there as one
  // 8-byte record, the client's handle for the CQ, instead of to event_fd.
  std::shared_ptr<core::Fd> channel;
  uint64_t user_handle = 0;
  uint64_t events_written = 0;  ///< records written to `channel` (DestroyCqReply)
  /// Stamp each completion (kCqCreateTimestamp): read here, as it is pushed, rather than the
  /// loop's clock, which is a whole burst (or, for a completion a post makes at once, a sleep)
  /// old. One vDSO clock read per completion, only for the CQs that asked.
  bool timestamp = false;

  Session* session = nullptr;
  /// The ring's producer index just after the last completion that would end
  /// a solicited-only arm (arm_cq's catch-up for arms that came late).
  uint32_t solicited_end = 0;

  bool push(const rocev2::Completion& c, bool solicited) override {
    if (session != nullptr) session->release_for_completion(c.qp_num);
    abi::Cqe e;
    abi::encode_cqe(c, &e);
    if (timestamp) e.timestamp = core::monotonic_ns();
    if (ring.try_push(&e) != abi::ShmRingStatus::ok) return false;
    if (solicited) solicited_end = ring.index();
    return true;
  }
  void notify() override {
    if (!channel) return write_eventfd(event_fd.get());
    // Non-blocking; a full pipe (thousands of unread events) or a reader
    // that is gone loses the record, and SIGPIPE is ignored by droced.
    if (::write(channel->get(), &user_handle, sizeof user_handle) == sizeof user_handle) ++events_written;
  }
};

struct Session::SharedQueue {
  abi::ShmRingConsumer ring;
  uint32_t* pending = nullptr;  // the doorbell flag in the region's block
  abi::WqeLimits limits;
  uint32_t ahead = 0;    // entries read into the engine, slots not yet released
  uint32_t mark = 0;     // the engine's retire index at the last release
  uint32_t refused = 0;  // entries refused since the last release
  bool backlog = false;  // the engine had no room: drain again next loop
};

struct Session::SharedQp {
  uint32_t qpn = 0;
  rocev2::QpType type = rocev2::QpType::rc;
  core::ShmRegion region;
  SharedQueue sq, rq;
  bool has_rq = false;
  SharedCq* send_cq = nullptr;
  SharedCq* recv_cq = nullptr;
  SharedSrq* srq = nullptr;
  bool active = false;  // on active_qps_
};

struct Session::SharedSrq {
  rocev2::Srq* srq = nullptr;
  core::ShmRegion region;
  SharedQueue rq;
  uint32_t users = 0;
  bool active = false;
  uint32_t xrcd = 0;          ///< XRC: its domain
  SharedCq* cq = nullptr;     ///< XRC: the CQ its receives complete into
};

struct Session::MrEntry {
  uint32_t lkey = 0;
  uint32_t rkey = 0;
  uint64_t page_va = 0;  ///< the client address of memory.data()
  PeerMemory memory;     ///< empty for an MR on device memory and an ODP one
  bool odp = false;      ///< reg_odp_mr: reached through the session's odp_memory_
  uint32_t dm = 0;       ///< reg_dm_mr: the device memory it lies in (its `mrs` counts it)
};

/// Device memory (alloc_dm): a region droced made and owns, mapped by the client too.
struct Session::DmEntry {
  core::ShmRegion region;
  uint64_t length = 0;  ///< as asked (the region is rounded up to a page)
  uint32_t mrs = 0;     ///< MRs registered on it (free_dm: -EBUSY while any)
};

}  // namespace droce::droced
