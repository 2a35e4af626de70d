#pragma once
// The provider's C++ side: droce's state behind each libibverbs object (the
// "droce slot" of glue.h), and the helpers the op files share.
//
// Every libibverbs object droce creates but the context is an Object<T>:
// { void* droce; T obj }. The application and libibverbs hold &obj;
// droce_object(&obj) gives back the slot, which points at a VerbsCq, VerbsQp
// or VerbsSrq (PDs, MRs and AHs keep their droce id in the object's public
// `handle` field and need no slot). The VerbsContext comes from
// droce_glue_context().
//
// Threading: VerbsContext's tables are guarded by its objects_mutex (the
// async event thread reads them); a queue's data path is the client library's
// (its own spinlock per queue). Errors: positive errno values, as libibverbs'
// ops return them.

#include <infiniband/verbs.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <unordered_map>

#include "core/unix_socket.h"
#include "provider/client/client.h"
#include "provider/verbs/glue.h"

namespace droce::verbs {

/// { droce's slot, libibverbs' object }: see glue.h.
template <class T>
struct Object {
  void* droce = nullptr;
  T obj;
};

/// The Object<T> whose `obj` is *p.
template <class T>
Object<T>* object_of(T* p) {
  static_assert(offsetof(Object<T>, obj) == sizeof(void*));
  return reinterpret_cast<Object<T>*>(reinterpret_cast<char*>(p) - offsetof(Object<T>, obj));
}

/// libibverbs' verbs_cq: a CQ seen as plain or extended (driver.h's union,
/// restated with public types; glue.c checks the two agree).
union CqUnion {
  ibv_cq cq;
  ibv_cq_ex cq_ex;
};

class VerbsContext;

/// Every ibv_pd's droce slot: a protection domain (droced's id in the ibv_pd's handle), or a
/// parent domain (ibv_alloc_parent_domain(3)) over one, with the same handle, an optional
/// thread domain and the application's allocators. `users` counts what stops a dealloc
/// (EBUSY): a PD's parent domains; a parent domain's CQs, QPs and SRQs.
struct VerbsPd {
  VerbsContext* ctx = nullptr;
  ibv_pd* ibv = nullptr;
  ibv_pd* protection_domain = nullptr;  ///< a parent domain's PD; nullptr for a PD
  ibv_td* td = nullptr;
  void* (*alloc)(ibv_pd* pd, void* pd_context, size_t size, size_t alignment, uint64_t resource_type) = nullptr;
  void (*free)(ibv_pd* pd, void* pd_context, void* ptr, uint64_t resource_type) = nullptr;
  void* pd_context = nullptr;
  std::atomic<uint32_t> users{0};
  bool parent() const { return protection_domain != nullptr; }
};

/// A thread domain (ibv_alloc_td(3)). droce's queues take an uncontended spinlock per post
/// and poll, so a thread domain changes nothing; `users` counts its parent domains (EBUSY).
struct VerbsTd {
  std::atomic<uint32_t> users{0};
};

/// The resource types droce passes to a parent domain's alloc() and free() (upper 32 bits:
/// rdma_driver_id, RDMA_DRIVER_UNKNOWN for droce; lower: which object the memory is for).
enum DomainResource : uint64_t {
  kResourceCq = 1,   ///< a CQ's provider state
  kResourceQp = 2,   ///< a QP's provider state
  kResourceSrq = 3,  ///< an SRQ's provider state
  kResourceWrBatch = 4,  ///< an extended QP's ibv_wr_* staging (32 WRs and their inline data)
};

/// Where a block of provider memory came from: a parent domain's alloc() (given back to its
/// free()), or droce's own allocator.
struct DomainMemory {
  VerbsPd* domain = nullptr;  ///< set when the parent domain's alloc() gave it
  uint64_t type = 0;
};

/// `size` bytes aligned to 64 for an object made on `pd`: from the parent domain's alloc()
/// when `pd` is a parent domain with allocators (ibv_alloc_parent_domain(3); one that answers
/// IBV_ALLOCATOR_USE_DEFAULT leaves it to droce), else droce's own. nullptr when the allocator
/// gave none (ENOMEM). Control path.
void* domain_alloc(ibv_pd* pd, size_t size, uint64_t type, DomainMemory* how);
void domain_free(void* p, const DomainMemory& how);

/// ibv_dealloc_pd of a parent domain: EBUSY while CQs, QPs or SRQs made on it remain.
int dealloc_parent_domain(ibv_pd* pd);

/// A T constructed in domain_alloc()'s memory, and its end.
template <class T>
T* domain_new(ibv_pd* pd, uint64_t type, DomainMemory* how) {
  static_assert(alignof(T) <= 64);
  void* p = domain_alloc(pd, sizeof(T), type, how);
  return p != nullptr ? new (p) T() : nullptr;
}
template <class T>
void domain_delete(T* p, DomainMemory how) {  // a copy: `how` may live in *p
  if (p == nullptr) return;
  p->~T();
  domain_free(p, how);
}

struct VerbsCq {
  VerbsContext* ctx = nullptr;
  client::Cq* cq = nullptr;
  ibv_cq* ibv = nullptr;
  /// Completion and async events the application has read (completion events
  /// counted by the cq_event op, async events by VerbsContext as it hands them
  /// out and takes back unread ones); destroy waits until it has acknowledged
  /// as many (ibv_ack_cq_events, ibv_ack_async_event), as the kernel's uverbs does.
  uint32_t comp_events_reported = 0;
  uint32_t async_events_reported = 0;
  /// The extended CQ's current completion (start_poll/next_poll).
  abi::Completion current;
  bool extended = false;
  /// The parent domain it was made on (IBV_CQ_INIT_ATTR_MASK_PD), or nullptr; `memory`:
  /// where this struct's memory came from.
  VerbsPd* parent_domain = nullptr;
  DomainMemory memory;
};

struct VerbsSrq {
  VerbsContext* ctx = nullptr;
  client::Srq* srq = nullptr;
  ibv_srq* ibv = nullptr;
  uint32_t max_sge = 0;
  uint32_t events_reported = 0;
  VerbsPd* parent_domain = nullptr;  ///< made on a parent domain
  DomainMemory memory;
  bool xrc = false;  ///< an XRC SRQ (ibv_get_srq_num answers)
};

/// The ibv_wr_* API's WRs of one wr_start..wr_complete batch, built here and
/// posted by wr_complete (inline data copied at once, as the API allows the
/// caller to reuse its buffer when the call returns).
struct WrBatch {
  static constexpr uint32_t kMax = 32;
  static constexpr uint32_t kInlineMax = 1024;  ///< bytes per WR (>= any max_inline_data)
  abi::SendWr wrs[kMax];
  uint8_t inline_data[kMax][kInlineMax];
  uint32_t count = 0;
  int error = 0;  ///< the first error while building; wr_complete returns it
};

struct VerbsQp {
  VerbsContext* ctx = nullptr;
  client::Qp* qp = nullptr;
  ibv_qp* ibv = nullptr;
  ibv_qp_type type = IBV_QPT_RC;
  bool sq_sig_all = false;
  ibv_qp_cap cap{};
  uint32_t events_reported = 0;
  WrBatch* batch = nullptr;  ///< the ibv_wr_* API, when asked for (domain memory, batch_memory)
  VerbsPd* parent_domain = nullptr;  ///< made on a parent domain
  DomainMemory memory, batch_memory;
  ~VerbsQp() { domain_delete(batch, batch_memory); }
};

/// The droce side of one ibv_context: the client library's Context, the
/// objects by droced id (for async events), and the thread that turns
/// droced's events into the records libibverbs reads from async_fd.
class VerbsContext {
 public:
  VerbsContext() = default;
  ~VerbsContext();
  VerbsContext(const VerbsContext&) = delete;
  VerbsContext& operator=(const VerbsContext&) = delete;

  /// Connects to droced at `socket_path`, caches the device's attributes,
  /// and starts the event thread writing to *async_fd (its read end).
  /// 0 or a positive errno.
  int open(ibv_context* ibv, const std::string& socket_path, int* async_fd);

  ibv_context* ibv = nullptr;
  std::unique_ptr<client::Context> client;
  abi::ctl::QueryDeviceReply device{};

  std::mutex objects_mutex;
  /// One destroy_cq at a time takes records out of a completion channel and puts the others
  /// back (two at once could put back a record the other took out).
  std::mutex channel_mutex;
  /// Under channel_mutex: records of other CQs a take-back could not put back (a pipe droced
  /// filled meanwhile), by CQ handle; their CQ's destroy_cq counts them as taken back (it
  /// would otherwise wait for the acknowledgement of events nobody can read).
  std::unordered_map<uint64_t, uint64_t> comp_records_lost;
  std::unordered_map<uint32_t, VerbsQp*> qps;    ///< by QPN
  std::unordered_map<uint32_t, VerbsCq*> cqs;    ///< by droced's CQ id
  std::unordered_map<uint32_t, VerbsSrq*> srqs;  ///< by droced's SRQ id

  /// Takes `ibv_object` (a QP, CQ or SRQ being destroyed) out of the tables
  /// and removes the events about it the application has not read yet (the
  /// kernel drops them too: their element would dangle), under
  /// objects_mutex. Returns the object's events_reported as it then stands:
  /// the events about it the application has read, as the kernel's uverbs
  /// counts them for a destroy to wait on.
  uint32_t forget(const void* ibv_object, uint32_t* reported);

  /// Events dropped because the application did not read async_fd.
  std::atomic<uint64_t> events_dropped{0};

 private:
  void event_loop();
  /// Writes one ib_uverbs_async_event_desc record; false when it could not.
  bool deliver(const client::AsyncEvent& ev);

  core::Fd event_write_;  ///< our end of async_fd's socket pair
  core::Fd event_read_;   ///< a second descriptor of async_fd's end (forget() reads it)
  core::Fd stop_fd_;      ///< eventfd: the thread ends when it is written
  std::thread thread_;
};

inline VerbsContext* context_of(ibv_context* c) { return static_cast<VerbsContext*>(droce_glue_context(c)); }
inline VerbsCq* cq_of(ibv_cq* c) { return static_cast<VerbsCq*>(droce_object(c)); }
inline VerbsQp* qp_of(ibv_qp* q) { return static_cast<VerbsQp*>(droce_object(q)); }
inline VerbsSrq* srq_of(ibv_srq* s) { return static_cast<VerbsSrq*>(droce_object(s)); }
inline VerbsPd* pd_of(ibv_pd* p) { return static_cast<VerbsPd*>(droce_object(p)); }
/// The parent domain `pd` is, or nullptr for a plain PD.
inline VerbsPd* parent_domain_of(ibv_pd* p) {
  VerbsPd* v = p != nullptr ? pd_of(p) : nullptr;
  return v != nullptr && v->parent() ? v : nullptr;
}
/// An XRC domain is an Object<ibv_xrcd> whose droce slot holds droced's id of it.
inline uint32_t xrcd_num(const ibv_xrcd* x) {
  return static_cast<uint32_t>(reinterpret_cast<uintptr_t>(droce_object(x)));
}

/// A negative errno from the client library as libibverbs wants it.
inline int positive(int rc) { return rc < 0 ? -rc : rc; }

/// Sets errno and returns nullptr (pointer-returning ops).
template <class T = void>
T* fail(int err) {
  errno = positive(err);
  return nullptr;
}

/// ibv_create_qp_ex of an RSS QP (IBV_QP_INIT_ATTR_RX_HASH, IND_TABLE; flow.cc): 0 or a
/// positive errno, the QP filled as droce_glue_create_qp fills one.
int create_rss_qp(ibv_context* context, ibv_qp_init_attr_ex* attr, ibv_qp* qp, void** slot);

/// The extended CQ's polling functions (start_poll ... read_*); the timestamp readers when
/// `wc_flags` asks for them (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP(_WALLCLOCK)).
void fill_cq_ex_ops(ibv_cq_ex* cq, uint64_t wc_flags);
/// The ibv_wr_* functions of an extended QP; `send_ops` (IBV_QP_EX_WITH_*)
/// says which work-request builders the QP offers (the others stay NULL).
void fill_qp_ex_ops(ibv_qp_ex* qpx, uint64_t send_ops);

/// Waits on an object's cond until *completed reaches `reported` (async and
/// completion events must be acknowledged before an object goes away, as with
/// the kernel's uverbs).
void wait_acked(pthread_mutex_t* m, pthread_cond_t* c, const uint32_t* completed, uint32_t reported);

}  // namespace droce::verbs
