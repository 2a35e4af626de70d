// Memory regions: ibv_reg_mr (the client's pages arrive as memfds, one per segment),
// ibv_dereg_mr, ibv_rereg_mr.

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

int Session::on_reg_mr(const RegMrRequest& q, const Control& c, RegMrReply* out) {
  if (std::find(pds_.begin(), pds_.end(), q.pd) == pds_.end()) return -EINVAL;
  if (mrs_.size() >= dev_->session_limits.max_mrs) return -ENOMEM;
  if (q.va < q.page_va || q.length == 0) return -EINVAL;
  auto m = std::make_unique<MrEntry>();
  if (int rc = map_segments(c.msg, sizeof q, q.segment_count, q.page_va, c.fds, &m->memory); rc != 0) return rc;
  // The registered range must lie inside the pages the client sent.
  if (!inside(q.va, q.length, q.page_va, m->memory.size())) return -EINVAL;
  rocev2::Mr* mr = nullptr;
  int rc = dev_->core->engine().reg_mr(q.pd, q.va, q.length, m->memory.data() + (q.va - q.page_va), q.access, &mr);
  if (rc != 0) return rc;
  m->lkey = mr->lkey;
  m->rkey = mr->rkey;
  m->page_va = q.page_va;
  out->lkey = mr->lkey;
  out->rkey = mr->rkey;
  mrs_[mr->lkey] = std::move(m);
  return 0;
}

int Session::on_rereg_mr(const ReregMrRequest& q, const Control& c, RegMrReply* out) {
  auto it = mrs_.find(q.lkey);
  if (it == mrs_.end()) return -EINVAL;
  if (std::find(pds_.begin(), pds_.end(), q.pd) == pds_.end()) return -EINVAL;
  MrEntry& m = *it->second;
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


template <>
void Session::serve<MsgType::reg_mr>(const Control& c, const RegMrRequest& q) {
  RegMrReply r{};
  const int rc = on_reg_mr(q, c, &r);
  reply(c.h, rc, &r, sizeof r);
}

template <>
void Session::serve<MsgType::dereg_mr>(const Control& c, const IdRequest& q) {
  auto it = mrs_.find(q.id);
  if (it == mrs_.end()) return reply(c.h, -EINVAL);
  const int rc = dev_->core->engine().dereg_mr(q.id);
  if (rc == 0) mrs_.erase(it);
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
  };
  return kEntries;
}

}  // namespace droce::droced
