// ibv_attach_mcast / ibv_detach_mcast for a client (issue #15's multicast): the QP must be one
// of this client's; the group goes to the engine of the core that serves the client, whose
// DeviceCore also tells the other cores to loop multicast back while it has groups.

#include <cerrno>
#include <cstring>

#include "droced/device_core.h"
#include "droced/session_objects.h"

namespace droce::droced {

using abi::ctl::McastRequest;
using abi::ctl::MsgType;

template <>
void Session::serve<MsgType::attach_mcast>(const Control& c, const McastRequest& q) {
  if (qps_.find(q.qpn) == qps_.end()) return reply(c.h, -EINVAL);  // another client's QP is not there either
  net::IpAddr gid;
  std::memcpy(gid.data(), q.gid, gid.size());
  reply(c.h, dev_->core->attach_mcast(q.qpn, gid));
}

template <>
void Session::serve<MsgType::detach_mcast>(const Control& c, const McastRequest& q) {
  if (qps_.find(q.qpn) == qps_.end()) return reply(c.h, -EINVAL);
  net::IpAddr gid;
  std::memcpy(gid.data(), q.gid, gid.size());
  reply(c.h, dev_->core->detach_mcast(q.qpn, gid));
}

std::span<const Session::ControlEntry> Session::mcast_controls() {
  static constexpr ControlEntry kEntries[] = {
      control<MsgType::attach_mcast, McastRequest>(),
      control<MsgType::detach_mcast, McastRequest>(),
  };
  return kEntries;
}

}  // namespace droce::droced
