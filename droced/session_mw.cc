// Memory windows: ibv_alloc_mw, ibv_dealloc_mw. Binding is a send WR the engine executes
// (rocev2/mr.h, MrTable::bind_mw): the window, the region and the QP must share a PD, and a
// client's PDs are its own, so no bind reaches another client's memory.

#include <algorithm>

#include "droced/session_objects.h"

namespace droce::droced {

using namespace abi::ctl;

template <>
void Session::serve<MsgType::alloc_mw>(const Control& c, const AllocMwRequest& q) {
  if (std::find(pds_.begin(), pds_.end(), q.pd) == pds_.end()) return reply(c.h, -EINVAL);
  if (q.type != uint32_t(abi::MwType::type1) && q.type != uint32_t(abi::MwType::type2)) return reply(c.h, -EINVAL);
  if (mws_.size() >= dev_->session_limits.max_mrs) return reply(c.h, -ENOMEM);
  IdReply r{};
  const int rc = dev_->core->engine().alloc_mw(q.pd, abi::MwType(q.type), &r.id);
  if (rc == 0) mws_.insert(r.id >> 8);
  reply(c.h, rc, &r, sizeof r);
}

// By the window's R_Key's index: the tag is not checked, since a bind posted as a WR changed
// it where the application's ibv_mw may not have followed (as rxe's dealloc, by handle).
template <>
void Session::serve<MsgType::dealloc_mw>(const Control& c, const IdRequest& q) {
  auto it = mws_.find(q.id >> 8);
  if (it == mws_.end()) return reply(c.h, -EINVAL);
  rocev2::Engine& e = dev_->core->engine();
  const int rc = e.dealloc_mw(e.mrs().key_at(*it));
  if (rc == 0) mws_.erase(it);
  reply(c.h, rc);
}

void Session::release_mws() {
  rocev2::Engine& e = dev_->core->engine();
  for (uint32_t index : mws_) (void)e.dealloc_mw(e.mrs().key_at(index));
  mws_.clear();
}

std::span<const Session::ControlEntry> Session::mw_controls() {
  static constexpr ControlEntry kEntries[] = {
      control<MsgType::alloc_mw, AllocMwRequest>(),
      control<MsgType::dealloc_mw, IdRequest>(),
  };
  return kEntries;
}

}  // namespace droce::droced
