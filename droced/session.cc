#include "droced/session.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "droced/session_objects.h"
#include "core/capabilities.h"
#include "core/log.h"

namespace droce::droced {

using namespace abi::ctl;

namespace {

constexpr uint32_t kDrainBurst = 64;

uint32_t take_flag(uint32_t* p) { return std::atomic_ref<uint32_t>(*p).exchange(0); }

// Clears a doorbell flag, then a full fence, so what is read next (a producer
// index) is read after the clear: the client publishes, fences, then tests the
// flag (Context::ring_doorbell), and one of the two sides sees the other. The
// fence orders the store; a seq_cst store would add a second locked
// instruction on x86 (an xchg) to every drain.
void clear_flag_fenced(uint32_t* p) {
  std::atomic_ref<uint32_t>(*p).store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

}  // namespace

// ---- Life ---------------------------------------------------------------------

Session::Session(Device* dev, core::Fd socket, uint32_t id) : dev_(dev), sock_(std::move(socket)), id_(id) {
  core::PeerCredentials cred;
  if (core::peer_credentials(sock_.get(), &cred) == 0) {
    pid_ = cred.pid;
    uid_ = cred.uid;
    // As Linux (6.4 on) asks of ibv_modify_qp: CAP_NET_RAW for a controlled Q_Key.
    privileged_ = core::process_has_capability(cred.pid, core::kCapNetRaw);
  }
}

Session::~Session() { teardown(); }

bool Session::operator_client() const { return uid_ == 0 || uid_ == ::geteuid(); }

void Session::teardown() {
  if (dev_->capture != nullptr) dev_->capture->stop(id_);  // its capture ends with it
  rocev2::Engine& e = dev_->core->engine();
  // QPs to error first: the peers see what they would see of a dead host,
  // and nothing of this client is touched by the engine afterwards.
  for (auto& [qpn, q] : qps_) {
    rocev2::QpAttr a;
    a.qp_state = rocev2::QpState::err;
    (void)e.modify_qp(qpn, a, rocev2::kAttrState);
    (void)e.destroy_qp(qpn);
    dev_->qp_owner.erase(qpn);
  }
  qps_.clear();
  active_qps_.clear();
  release_xrc();
  for (auto& [id, s] : srqs_) {
    (void)e.destroy_srq(s->srq);
    dev_->srq_owner.erase(id);
  }
  srqs_.clear();
  active_srqs_.clear();
  for (uint32_t ah : ahs_) (void)e.destroy_ah(ah);
  ahs_.clear();
  release_mws();
  for (auto& [lkey, m] : mrs_) {
    (void)e.dereg_mr(lkey);
    release_mr(std::move(m));  // a large mapping goes on ControlJobs, the others here
  }
  mrs_.clear();  // unmaps the client's memory
  dms_.clear();  // after the MRs on it
  // A registration still being populated: the job owns the memory now, and stops early.
  if (pending_.job != nullptr) pending_.job->cancelled.store(true, std::memory_order_relaxed);
  pending_.mr.reset();
  pending_.job.reset();
  for (auto& [id, c] : cqs_) {
    // The engine's CQ points at its sink: never free one the engine keeps.
    if (e.destroy_cq(c->cq) != 0) (void)c.release();
    dev_->cq_owner.erase(id);
  }
  cqs_.clear();
  for (uint32_t pd : pds_) (void)e.dealloc_pd(pd);
  pds_.clear();
}

void Session::fault(const char* why) {
  if (!closed_) {
    DROCE_LOG(WARNING, app, "client %u (pid %d, %s): %s; disconnecting it", id_, int(pid_), program_.c_str(), why);
    closed_ = true;
    faulted_ = true;
    close_reason_ = why;
  }
}

void Session::mark_fatal() {
  rocev2::Engine& e = dev_->core->engine();
  for (auto& [qpn, q] : qps_) {
    rocev2::QpAttr a;
    a.qp_state = rocev2::QpState::err;
    (void)e.modify_qp(qpn, a, rocev2::kAttrState);
  }
  if (page_ != nullptr) std::atomic_ref<uint32_t>(page_->device_state).store(abi::kDeviceFatal);
  push_event(8 /* IBV_EVENT_DEVICE_FATAL */, 0);
}

std::vector<uint32_t> Session::qpns() const {
  std::vector<uint32_t> v;
  for (const auto& [qpn, q] : qps_) v.push_back(qpn);
  std::sort(v.begin(), v.end());
  return v;
}

// ---- Control ------------------------------------------------------------------

void Session::on_readable(uint64_t now_ns) {
  for (int i = 0; i < 16 && !closed_; ++i) {
    std::vector<uint8_t> msg;
    std::vector<core::Fd> fds;
    const ssize_t n = core::receive_message(sock_.get(), &msg, kMaxMessage, &fds);
    if (n == -EAGAIN || n == -EWOULDBLOCK) return;
    if (n == 0) {
      closed_ = true;
      close_reason_ = "closed its socket";
      return;
    }
    if (n < 0) {
      fault("socket error or oversized message");
      return;
    }
    handle(msg, fds, now_ns);
  }
}

void Session::reply(const CtlHeader& h, int status, const void* body, size_t len, std::span<const int> fds) {
  // A failed request's reply carries only its status.
  const std::span<const uint8_t> bytes(static_cast<const uint8_t*>(body), status == 0 ? len : 0);
  const auto out = encode_raw(static_cast<MsgType>(h.type), h.seq, bytes, {}, true, status);
  if (status != 0) ++counters_.errors;
  if (core::send_message(sock_.get(), out, status == 0 ? fds : std::span<const int>{}) != 0)
    fault("cannot send a reply");
}


// ---- Data path ------------------------------------------------------------------

uint32_t Session::poll(uint64_t now_ns) {
  (void)now_ns;
  if (!hello_done_ || closed_) return 0;
  uint32_t work = 0;
  abi::Doorbell db[32];
  uint32_t n = 0;
  if (doorbells_.pop_burst(db, 32, &n) == abi::ShmRingStatus::corrupt) {
    fault("corrupt doorbell ring");
    return 0;
  }
  counters_.doorbells += n;
  work += n;
  for (uint32_t i = 0; i < n; ++i) {
    switch (db[i].kind) {
      case abi::kDoorbellSq:
      case abi::kDoorbellRq: {
        auto it = qps_.find(db[i].id);
        if (it == qps_.end() || (db[i].kind == abi::kDoorbellRq && !it->second->has_rq)) {
          ++counters_.bad_doorbells;
          break;
        }
        if (db[i].kind == abi::kDoorbellSq) drain_sq(*it->second);
        else drain_rq(*it->second);
        break;
      }
      case abi::kDoorbellSrq: {
        auto it = srqs_.find(db[i].id);
        if (it == srqs_.end()) ++counters_.bad_doorbells;
        else drain_srq(*it->second);
        break;
      }
      case abi::kDoorbellArmCq: {
        auto it = cqs_.find(db[i].id);
        if (it == cqs_.end()) ++counters_.bad_doorbells;
        else arm_cq(*it->second);
        break;
      }
      default:
        ++counters_.bad_doorbells;
    }
    if (closed_) return work;
  }
  // Queues the engine had no room for, and slots of retired WQEs.
  for (size_t i = 0; i < active_qps_.size(); ++i) {
    SharedQp* q = active_qps_[i];
    if (q->sq.backlog) drain_sq(*q);
    if (q->rq.backlog) drain_rq(*q);
  }
  for (size_t i = 0; i < active_srqs_.size(); ++i)
    if (active_srqs_[i]->rq.backlog) drain_srq(*active_srqs_[i]);
  release_retired();
  return work;
}

namespace {

// Drains one shared queue into the engine: clears its doorbell flag (then a
// fence, so the producer index is read after it), reads what the client
// published past what was already read, hands each entry to `post` (0:
// taken, -ENOMEM: no room, stop and retry next loop; else refused and
// counted), and records how far it got. False when the ring is corrupt.
// Of each entry it copies the header (`header` bytes), then what `used` says
// of the copy; the rest of the scratch holds older bytes, never shared ones.
template <class Queue, class Used, class Post, class Refuse>
bool drain_queue(Queue& q, std::vector<uint8_t>& scratch, uint32_t header, Used used, Post post, Refuse refuse,
                 uint64_t* posted) {
  clear_flag_fenced(q.pending);
  scratch.resize(q.ring.entry_size());
  q.backlog = false;
  for (;;) {
    uint32_t got = 0;
    if (q.ring.peek(q.ahead + kDrainBurst, &got) == abi::ShmRingStatus::corrupt) return false;
    if (got <= q.ahead) return true;
    const uint32_t burst_end = q.ahead + kDrainBurst;
    for (uint32_t i = q.ahead; i < got; ++i) {
      q.ring.copy_entry(i, scratch.data(), 0, header);
      q.ring.copy_entry(i, scratch.data(), header, used(std::span<const uint8_t>(scratch.data(), header)));
      const int rc = post(scratch);
      if (rc == -ENOMEM) {
        q.backlog = true;
        return true;
      }
      ++q.ahead;
      if (rc == 0) {
        ++*posted;
      } else {
        ++q.refused;
        refuse(scratch);
      }
    }
    if (got < burst_end) return true;  // a short burst: nothing more was published
  }
}

}  // namespace

void Session::refuse_wqe(SharedQp& q, const uint8_t* entry, uint32_t size, bool send) {
  // A WQE that fails its checks is the client's error: like a hardware HCA,
  // complete it with a local QP operation error and move the QP to error
  // (everything after it is flushed).
  ++counters_.wqes_refused;
  rocev2::Completion c;
  if (size >= 8) std::memcpy(&c.wr_id, entry, 8);
  c.status = rocev2::WcStatus::loc_qp_op_err;
  c.opcode = send ? rocev2::WcOpcode::send : rocev2::WcOpcode::recv;
  c.qp_num = q.qpn;
  (send ? q.send_cq : q.recv_cq)->cq->push(c, false);
  rocev2::QpAttr a;
  a.qp_state = rocev2::QpState::err;
  (void)dev_->core->engine().modify_qp(q.qpn, a, rocev2::kAttrState);
}

void Session::drain_sq(SharedQp& q) {
  draining_ = true;
  rocev2::Engine& e = dev_->core->engine();
  rocev2::SendWr& wr = send_wr_;
  const bool ok = drain_queue(
      q.sq, scratch_, sizeof(abi::SendWqeHeader), abi::send_wqe_used,
      [&](std::vector<uint8_t>& entry) {
        if (abi::decode_send_wqe(entry, q.sq.limits, &wr) != abi::WqeError::ok) return -EINVAL;
        return e.post_send(q.qpn, wr);
      },
      [&](std::vector<uint8_t>& entry) { refuse_wqe(q, entry.data(), uint32_t(entry.size()), true); },
      &counters_.wqes_posted);
  draining_ = false;
  if (!ok) return fault("corrupt send ring");
  track(q, q.sq.ahead != 0 || q.sq.backlog);
}

void Session::drain_rq(SharedQp& q) {
  draining_ = true;
  rocev2::Engine& e = dev_->core->engine();
  const bool ok = drain_queue(
      q.rq, scratch_, sizeof(abi::RecvWqeHeader), abi::recv_wqe_used,
      [&](std::vector<uint8_t>& entry) {
        rocev2::RecvWr& wr = recv_wr_;
        if (abi::decode_recv_wqe(entry, q.rq.limits, &wr) != abi::WqeError::ok)
          return refilling_ ? -ENOMEM : -EINVAL;
        const int rc = e.post_recv(q.qpn, wr);
        return refilling_ && rc != 0 ? -ENOMEM : rc;  // refusals happen outside the engine
      },
      [&](std::vector<uint8_t>& entry) { refuse_wqe(q, entry.data(), uint32_t(entry.size()), false); },
      &counters_.wqes_posted);
  draining_ = false;
  if (!ok) return fault("corrupt receive ring");
  track(q, q.rq.ahead != 0 || q.rq.backlog);
}

void Session::drain_srq(SharedSrq& s) {
  draining_ = true;
  rocev2::Engine& e = dev_->core->engine();
  const bool ok = drain_queue(
      s.rq, scratch_, sizeof(abi::RecvWqeHeader), abi::recv_wqe_used,
      [&](std::vector<uint8_t>& entry) {
        rocev2::RecvWr& wr = recv_wr_;
        if (abi::decode_recv_wqe(entry, s.rq.limits, &wr) != abi::WqeError::ok)
          return refilling_ ? -ENOMEM : -EINVAL;
        const int rc = e.post_srq_recv(s.srq, wr);
        return refilling_ && rc != 0 ? -ENOMEM : rc;
      },
      [&](std::vector<uint8_t>&) { ++counters_.wqes_refused; },
      &counters_.wqes_posted);
  draining_ = false;
  if (!ok) return fault("corrupt SRQ ring");
  track(s, s.rq.ahead != 0 || s.rq.backlog);
}

uint32_t Session::sq_entries_unread() {
  uint32_t total = 0;
  for (auto& [qpn, q] : qps_) {
    uint32_t got = 0;
    if (q->sq.ring.peek(q->sq.ahead + 1024, &got) != abi::ShmRingStatus::corrupt && got > q->sq.ahead)
      total += got - q->sq.ahead;
  }
  return total;
}

void Session::refill_recv(uint32_t qpn) {
  if (!hello_done_ || closed_ || draining_) return;
  auto it = qps_.find(qpn);
  if (it == qps_.end()) return refill_xrc_recv(qpn);
  SharedQp& q = *it->second;
  refilling_ = true;
  if (q.srq != nullptr) drain_srq(*q.srq);
  else if (q.has_rq) drain_rq(q);
  refilling_ = false;
}

void Session::track(SharedQp& q, bool busy) {
  if (busy && !q.active) {
    q.active = true;
    active_qps_.push_back(&q);
  }
}

void Session::track(SharedSrq& s, bool busy) {
  if (busy && !s.active) {
    s.active = true;
    active_srqs_.push_back(&s);
  }
}

void Session::arm_cq(SharedCq& c) {
  clear_flag_fenced(&c.block->sq_pending);
  const uint32_t mode = take_flag(&c.block->rq_pending);
  if ((mode & (abi::kCqArmNext | abi::kCqArmSolicited)) == 0) return;
  const bool solicited_only = (mode & abi::kCqArmNext) == 0;
  // Completions pushed since the client armed (it saw the ring's producer at
  // cq_arm_index) came after ibv_req_notify_cq() returned: if one of them
  // would have ended this arm (any, or for a solicited-only arm a solicited
  // or failed one), the event is due now.
  if (mode & abi::kCqArmIndex) {
    const uint32_t armed_at = std::atomic_ref<uint32_t>(c.block->cq_arm_index).load(std::memory_order_acquire);
    const uint32_t since = c.ring.index() - armed_at;
    const bool due = solicited_only ? c.solicited_end - armed_at - 1 < since : since != 0;
    if (due) {
      c.notify();
      return;
    }
  }
  c.cq->arm(solicited_only);
}

void Session::release_retired() {
  rocev2::Engine& e = dev_->core->engine();
  for (size_t i = 0; i < active_qps_.size();) {
    SharedQp* q = active_qps_[i];
    const rocev2::Qp* p = e.qp(q->qpn);
    if (p != nullptr) {
      release_queue(q->sq.ring, &q->sq.ahead, &q->sq.mark, &q->sq.refused, p->sq_tail);
      if (q->has_rq) release_queue(q->rq.ring, &q->rq.ahead, &q->rq.mark, &q->rq.refused, p->rq_tail);
    }
    if (q->sq.ahead == 0 && q->rq.ahead == 0 && !q->sq.backlog && !q->rq.backlog) {
      q->active = false;
      active_qps_[i] = active_qps_.back();
      active_qps_.pop_back();
    } else {
      ++i;
    }
  }
  for (size_t i = 0; i < active_srqs_.size();) {
    SharedSrq* s = active_srqs_[i];
    release_queue(s->rq.ring, &s->rq.ahead, &s->rq.mark, &s->rq.refused, s->srq->consumed());
    if (s->rq.ahead == 0 && !s->rq.backlog) {
      s->active = false;
      active_srqs_[i] = active_srqs_.back();
      active_srqs_.pop_back();
    } else {
      ++i;
    }
  }
}

void Session::release_for_completion(uint32_t qpn) {
  // An application may reuse a queue slot as soon as it polls the slot's
  // completion (with max_send_wr 1 it must), so the slots the engine retired
  // (it retires before it pushes the completion) go back first. Not while a
  // drain reads entries by position: the next release_retired() does it.
  if (draining_) return;
  auto it = qps_.find(qpn);
  if (it == qps_.end()) return release_xrc_for_completion(qpn);
  const rocev2::Qp* p = dev_->core->engine().qp(qpn);
  if (p == nullptr) return;
  SharedQp& q = *it->second;
  release_queue(q.sq.ring, &q.sq.ahead, &q.sq.mark, &q.sq.refused, p->sq_tail);
  if (q.has_rq) release_queue(q.rq.ring, &q.rq.ahead, &q.rq.mark, &q.rq.refused, p->rq_tail);
  if (q.srq != nullptr)
    release_queue(q.srq->rq.ring, &q.srq->rq.ahead, &q.srq->rq.mark, &q.srq->rq.refused, q.srq->srq->consumed());
}

void Session::push_event(uint32_t type, uint32_t id) {
  if (!hello_done_) return;
  const abi::EventEntry ev{type, id};
  if (events_.try_push(&ev) != abi::ShmRingStatus::ok) {
    ++counters_.events_dropped;
    return;
  }
  write_eventfd(async_fd_.get());
}

void Session::set_daemon_sleeping(bool sleeping) {
  if (page_ != nullptr) store_flag(&page_->daemon_sleeping, sleeping ? 1 : 0);
}

bool Session::doorbells_waiting() { return hello_done_ && !closed_ && doorbells_.size() != 0; }

core::WakeStamp Session::wake_stamp() const {
  if (page_ == nullptr) return {};
  return {std::atomic_ref<uint64_t>(page_->waker_ns).load(std::memory_order_relaxed),
          std::atomic_ref<int32_t>(page_->waker_cpu).load(std::memory_order_relaxed)};
}

}  // namespace droce::droced

