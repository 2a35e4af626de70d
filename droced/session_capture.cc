// `droce capture`: the device's frames streamed as pcapng to the fd the client passed
// (droced/capture.h). Like `droce fault`, not a verb: only root or droced's own user may, since
// a capture shows every client's traffic.

#include <unistd.h>

#include "core/log.h"
#include "droced/session_objects.h"

namespace droce::droced {

using namespace abi::ctl;

template <>
void Session::serve<MsgType::capture>(const Control& c, const CaptureRequest& q) {
  if (dev_->capture == nullptr) return reply(c.h, -EOPNOTSUPP);
  if (!operator_client()) return reply(c.h, -EPERM);
  if (c.fds.size() != 1) return reply(c.h, -EBADF);
  CaptureParams p;
  p.qpn = q.qpn;
  p.snaplen = q.snaplen == 0 ? kCaptureMaxSnap : std::min(q.snaplen, kCaptureMaxSnap);
  p.count = q.count;
  p.fill_icrc = !dev_->core->link_has_icrc();
  p.interface_name = dev_->name;
  const int rc = dev_->capture->start(p, std::move(c.fds[0]), id_);
  if (rc == 0)
    DROCE_LOG(INFO, app, "client %u (%s): capture of %s, snaplen %u%s", id_, program_.c_str(),
              p.qpn == UINT32_MAX ? "every frame" : ("QP " + std::to_string(p.qpn)).c_str(), p.snaplen,
              p.fill_icrc ? ", ICRC filled in" : "");
  CaptureReply r{};
  r.snaplen = p.snaplen;
  reply(c.h, rc, &r, sizeof r);
}

std::span<const Session::ControlEntry> Session::capture_controls() {
  static constexpr ControlEntry kEntries[] = {
      control<MsgType::capture, CaptureRequest>(When::any_time),
  };
  return kEntries;
}

}  // namespace droce::droced
