// Memory regions: ibv_reg_mr (the client's pages arrive as memfds, one per segment; an ODP
// region's do not arrive at all: its client's /proc/self/mem does), ibv_dereg_mr, ibv_rereg_mr.

#include <algorithm>
#include <cstring>

#include "droced/session_objects.h"

namespace droce::droced {

using namespace abi::ctl;

namespace {

// The MrSegment tail after a reg_mr / rereg_mr body (`body` bytes), with one
// descriptor per segment, mapped contiguously: -EINVAL when the count, the
// descriptors, the message length or page_va's alignment do not agree.
int map_segments(const std::vector<uint8_t>& msg, size_t body, uint32_t count, uint64_t page_va,
                 const std::vector<core::Fd>& fds, PeerMemory* out) {
  const size_t tail = sizeof(CtlHeader) + body;
  if (count == 0 || count > kMaxMrSegments || fds.size() != count ||
      msg.size() != tail + count * sizeof(MrSegment) || page_va % core::page_size() != 0)
    return -EINVAL;
  MrSegment segs[kMaxMrSegments];
  std::memcpy(segs, msg.data() + tail, count * sizeof(MrSegment));
  int raw[kMaxMrSegments];
  for (uint32_t i = 0; i < count; ++i) raw[i] = fds[i].get();
  return PeerMemory::map({segs, count}, {raw, count}, out);
}

// [va, va + length) lies inside the mapping of `size` bytes that starts at page_va.
bool inside(uint64_t va, uint64_t length, uint64_t page_va, size_t size) {
  return length != 0 && va >= page_va && va - page_va <= size && length <= size - (va - page_va);
}

}  // namespace

// The checks and the mapping of a registration: everything but populating and the engine.
int Session::prepare_reg_mr(const RegMrRequest& q, const Control& c, MrEntry* m) {
  if (std::find(pds_.begin(), pds_.end(), q.pd) == pds_.end()) return -EINVAL;
  if (mrs_.size() >= dev_->session_limits.max_mrs) return -ENOMEM;
  if (q.va < q.page_va || q.length == 0) return -EINVAL;
  if (int rc = map_segments(c.msg, sizeof q, q.segment_count, q.page_va, c.fds, &m->memory); rc != 0) return rc;
  // The registered range must lie inside the pages the client sent.
  if (!inside(q.va, q.length, q.page_va, m->memory.size())) return -EINVAL;
  m->page_va = q.page_va;
  return 0;
}

// The engine's half, once the mapping is populated (or left to fault in).
int Session::finish_reg_mr(const RegMrRequest& q, std::unique_ptr<MrEntry> m, RegMrReply* out) {
  // A limit or PD checked at prepare may have changed while a job ran.
  if (std::find(pds_.begin(), pds_.end(), q.pd) == pds_.end()) return release_mr(std::move(m)), -EINVAL;
  if (mrs_.size() >= dev_->session_limits.max_mrs) return release_mr(std::move(m)), -ENOMEM;
  rocev2::Mr* mr = nullptr;
  int rc = dev_->core->engine().reg_mr(q.pd, q.va, q.length, m->memory.data() + (q.va - q.page_va), q.access, &mr);
  if (rc != 0) return release_mr(std::move(m)), rc;
  m->lkey = mr->lkey;
  m->rkey = mr->rkey;
  out->lkey = mr->lkey;
  out->rkey = mr->rkey;
  mrs_[mr->lkey] = std::move(m);
  return 0;
}

// A region's mapping goes: a large one on ControlJobs (its munmap would stall this worker).
void Session::release_mr(std::unique_ptr<MrEntry> m) {
  if (m != nullptr && dev_->jobs != nullptr && m->memory.size() >= ControlJobs::kInlineBytes)
    dev_->jobs->release(std::move(m));
}

// Nothing is mapped or populated: the engine reaches the range through the client's own
// /proc/self/mem, faulting pages in the client when they are first touched.
int Session::on_reg_odp_mr(const RegOdpMrRequest& q, const Control& c, RegMrReply* out) {
  if (std::find(pds_.begin(), pds_.end(), q.pd) == pds_.end()) return -EINVAL;
  if (mrs_.size() >= dev_->session_limits.max_mrs) return -ENOMEM;
  if (q.length == 0 || !(q.access & abi::kAccessOnDemand) || c.fds.size() > 2) return -EINVAL;
  if (!odp_memory_.valid()) {
    if (c.fds.empty()) return -EINVAL;  // the first one must bring the address space
    // Its pagemap (minor 15) comes beside it: page faults are then taken off this worker.
    core::Fd pagemap = c.fds.size() == 2 ? std::move(c.fds[1]) : core::Fd();
    if (int rc = ProcessMemory::adopt(std::move(c.fds[0]), &odp_memory_, std::move(pagemap)); rc != 0) return rc;
  }
  rocev2::Mr* mr = nullptr;
  if (int rc = dev_->core->engine().reg_odp_mr(q.pd, q.va, q.length, &odp_memory_, q.access, &mr); rc != 0)
    return rc;
  auto m = std::make_unique<MrEntry>();
  m->lkey = out->lkey = mr->lkey;
  m->rkey = out->rkey = mr->rkey;
  m->page_va = q.va;
  m->odp = true;
  mrs_[mr->lkey] = std::move(m);
  return 0;
}

int Session::on_rereg_mr(const ReregMrRequest& q, const Control& c, RegMrReply* out) {
  auto it = mrs_.find(q.lkey);
  if (it == mrs_.end()) return -EINVAL;
  if (std::find(pds_.begin(), pds_.end(), q.pd) == pds_.end()) return -EINVAL;
  MrEntry& m = *it->second;
  if (m.dm != 0) return -EINVAL;  // an MR on device memory stays where it is (as uverbs' rereg)
  if (m.odp) {
    // An ODP region takes any new range of the same address space: nothing to map.
    if (q.segment_count != 0 || !c.fds.empty() || !(q.access & abi::kAccessOnDemand) || q.length == 0) return -EINVAL;
    if (int rc = dev_->core->engine().rereg_mr(q.lkey, q.pd, q.va, q.length, nullptr, q.access); rc != 0) return rc;
    m.page_va = q.va;
    out->lkey = m.lkey;
    out->rkey = m.rkey;
    return 0;
  }
  // A pinned region does not become an ODP one in place (the client registers anew).
  if (q.access & abi::kAccessOnDemand) return -EINVAL;
  const bool translation = (q.flags & kReregTranslation) != 0;
  PeerMemory fresh;
  const PeerMemory* mem = &m.memory;
  uint64_t page_va = m.page_va;
  if (translation) {
    if (int rc = map_segments(c.msg, sizeof q, q.segment_count, q.page_va, c.fds, &fresh); rc != 0) return rc;
    mem = &fresh;
    page_va = q.page_va;
  } else if (q.segment_count != 0 || !c.fds.empty() || c.msg.size() != sizeof(CtlHeader) + sizeof q) {
    return -EINVAL;
  }
  // The range must lie inside the pages the region maps.
  if (!inside(q.va, q.length, page_va, mem->size())) return -EINVAL;
  const int rc = dev_->core->engine().rereg_mr(q.lkey, q.pd, q.va, q.length, mem->data() + (q.va - page_va), q.access);
  if (rc != 0) return rc;
  if (translation) {
    m.memory = std::move(fresh);  // the engine reads the new mapping from now on; the old one goes
    m.page_va = q.page_va;
  }
  out->lkey = m.lkey;
  out->rkey = m.rkey;
  return 0;
}


// Small regions are populated here; a large one on ControlJobs, the request pending meanwhile
// (poll_pending replies) while this worker serves its other clients and QPs.
template <>
void Session::serve<MsgType::reg_mr>(const Control& c, const RegMrRequest& q) {
  RegMrReply r{};
  auto m = std::make_unique<MrEntry>();
  if (int rc = prepare_reg_mr(q, c, m.get()); rc != 0) return reply(c.h, rc);
  if (dev_->jobs == nullptr || m->memory.size() < ControlJobs::kInlineBytes) {
    (void)m->memory.populate();
    const int rc = finish_reg_mr(q, std::move(m), &r);
    return reply(c.h, rc, &r, sizeof r);
  }
  std::shared_ptr<MrEntry> held(std::move(m));
  pending_.active = true;
  pending_.header = c.h;
  pending_.reg_mr = q;
  pending_.mr = held;
  pending_.job = dev_->jobs->submit(
      [held](const ControlJobs::Job& job) {
        const int64_t n = held->memory.populate(&job.cancelled);
        return n < 0 ? int(n) : 0;
      },
      dev_->wake_fd);
}

// The job ended: the registration goes to the engine, whatever populating found (pages it did
// not reach fault in when first touched, as before).
void Session::finish_pending_reg_mr() {
  RegMrReply r{};
  auto m = std::make_unique<MrEntry>(std::move(*pending_.mr));
  pending_.mr.reset();
  pending_.job.reset();
  const int rc = finish_reg_mr(pending_.reg_mr, std::move(m), &r);
  reply(pending_.header, rc, &r, sizeof r);
}

template <>
void Session::serve<MsgType::reg_odp_mr>(const Control& c, const RegOdpMrRequest& q) {
  RegMrReply r{};
  const int rc = on_reg_odp_mr(q, c, &r);
  reply(c.h, rc, &r, sizeof r);
}

template <>
void Session::serve<MsgType::dereg_mr>(const Control& c, const IdRequest& q) {
  auto it = mrs_.find(q.id);
  if (it == mrs_.end()) return reply(c.h, -EINVAL);
  const int rc = dev_->core->engine().dereg_mr(q.id);
  if (rc == 0) {
    if (it->second->dm != 0) dm_mr_gone(it->second->dm);
    release_mr(std::move(it->second));
    mrs_.erase(it);
  }
  reply(c.h, rc);
}

template <>
void Session::serve<MsgType::rereg_mr>(const Control& c, const ReregMrRequest& q) {
  RegMrReply r{};
  const int rc = on_rereg_mr(q, c, &r);
  reply(c.h, rc, &r, sizeof r);
}

std::span<const Session::ControlEntry> Session::mr_controls() {
  static constexpr ControlEntry kEntries[] = {
      control<MsgType::reg_mr, RegMrRequest>(),
      control<MsgType::dereg_mr, IdRequest>(),
      control<MsgType::rereg_mr, ReregMrRequest>(),
      control<MsgType::reg_odp_mr, RegOdpMrRequest>(),
  };
  return kEntries;
}

}  // namespace droce::droced
