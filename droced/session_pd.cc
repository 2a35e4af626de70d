// Protection domains: ibv_alloc_pd, ibv_dealloc_pd.

#include <algorithm>

#include "droced/session_objects.h"

namespace droce::droced {

using namespace abi::ctl;

template <>
void Session::serve<MsgType::alloc_pd>(const Control& c, const NoBody&) {
  if (pds_.size() >= dev_->session_limits.max_pds) return reply(c.h, -ENOMEM);
  IdReply r{};
  const int rc = dev_->core->engine().alloc_pd(&r.id);
  if (rc == 0) pds_.push_back(r.id);
  reply(c.h, rc, &r, sizeof r);
}

template <>
void Session::serve<MsgType::dealloc_pd>(const Control& c, const IdRequest& q) {
  auto it = std::find(pds_.begin(), pds_.end(), q.id);
  if (it == pds_.end()) return reply(c.h, -EINVAL);
  const int rc = dev_->core->engine().dealloc_pd(q.id);
  if (rc == 0) pds_.erase(it);
  reply(c.h, rc);
}

std::span<const Session::ControlEntry> Session::pd_controls() {
  static constexpr ControlEntry kEntries[] = {
      control<MsgType::alloc_pd, NoBody>(),
      control<MsgType::dealloc_pd, IdRequest>(),
  };
  return kEntries;
}

}  // namespace droce::droced
