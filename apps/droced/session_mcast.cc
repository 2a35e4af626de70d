// ibv_attach_mcast / ibv_detach_mcast for a client (issue #15's multicast): the QP must be one
// of this client's; the group goes to the engine of the core that serves the client, whose
// DeviceCore also tells the other cores to loop multicast back while it has groups.

#include <cerrno>
#include <cstring>

#include "apps/droced/device_core.h"
#include "apps/droced/session.h"

namespace droce::droced {

using core::ctl::CtlHeader;
using core::ctl::McastRequest;
using core::ctl::MsgType;

void Session::serve_mcast(Session& s, const CtlHeader& h, const std::vector<uint8_t>& msg) {
  McastRequest q;
  if (core::ctl::decode_body(msg, &q) != 0 || s.qps_.find(q.qpn) == s.qps_.end()) {
    s.reply(h, -EINVAL);  // another client's QP is not there either
    return;
  }
  net::IpAddr gid;
  std::memcpy(gid.data(), q.gid, gid.size());
  const bool attach = h.type == uint16_t(MsgType::attach_mcast);
  s.reply(h, attach ? s.dev_->core->attach_mcast(q.qpn, gid) : s.dev_->core->detach_mcast(q.qpn, gid));
}

}  // namespace droce::droced
