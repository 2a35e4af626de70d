// Address handles: ibv_create_ah (deferred while a neighbour is resolved), ibv_destroy_ah, and
// the address vectors they and modify_qp build from the client's.

#include <algorithm>

#include "droced/session_objects.h"

namespace droce::droced {

using namespace abi::ctl;

int Session::build_av(const WireAv& w, rocev2::AddressVector* av) const {
  abi::from_wire(w, av);
  const net::GidEntry* g = dev_->gids->at(w.sgid_index);
  if (g == nullptr) return -EINVAL;
  set_av_source(*g, av);
  return 0;
}


int Session::on_create_ah(const CreateAhRequest& r, uint64_t now_ns, uint32_t* ah) {
  if (std::find(pds_.begin(), pds_.end(), r.pd) == pds_.end()) return -EINVAL;
  if (ahs_.size() >= dev_->session_limits.max_ahs) return -ENOMEM;
  rocev2::AddressVector av;
  if (int rc = build_av(r.av, &av); rc != 0) return rc;
  int err = 0;
  switch (dev_->core->resolve(&av, now_ns, &err)) {
    case net::ResolveStatus::pending: return 1;
    case net::ResolveStatus::failed: return err;
    case net::ResolveStatus::resolved: break;
  }
  int rc = dev_->core->engine().create_ah(r.pd, av, ah);
  if (rc == 0) ahs_.push_back(*ah);
  return rc;
}


template <>
void Session::serve<MsgType::create_ah>(const Control& c, const CreateAhRequest& q) {
  IdReply r{};
  const int rc = on_create_ah(q, c.now_ns, &r.id);
  if (rc == 1) {  // waiting for a neighbour: poll_pending() replies
    pending_.active = true;
    pending_.header = c.h;
    pending_.create_ah = q;
    return;
  }
  reply(c.h, rc, &r, sizeof r);
}

template <>
void Session::serve<MsgType::destroy_ah>(const Control& c, const IdRequest& q) {
  auto it = std::find(ahs_.begin(), ahs_.end(), q.id);
  if (it == ahs_.end()) return reply(c.h, -EINVAL);
  const int rc = dev_->core->engine().destroy_ah(q.id);
  if (rc == 0) ahs_.erase(it);
  reply(c.h, rc);
}

std::span<const Session::ControlEntry> Session::ah_controls() {
  static constexpr ControlEntry kEntries[] = {
      control<MsgType::create_ah, CreateAhRequest>(),
      control<MsgType::destroy_ah, IdRequest>(),
  };
  return kEntries;
}

}  // namespace droce::droced
