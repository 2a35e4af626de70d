// `droce cc`: the device's DCQCN parameters (rocev2/dcqcn.h, droced/cc_settings.h) set on a
// running droced. Not a verb: any client may read them (stats, "cc"), only root or droced's own
// user may change them, since they change every client's traffic.

#include <cstring>
#include <string_view>

#include "core/log.h"
#include "droced/session_objects.h"

namespace droce::droced {

using namespace abi::ctl;

template <>
void Session::serve<MsgType::cc>(const Control& c, const CcRequest& q) {
  if (dev_->cc == nullptr) return reply(c.h, -EOPNOTSUPP);
  if (!operator_client()) return reply(c.h, -EPERM);
  if (q.op != kCcSet) return reply(c.h, -EINVAL);
  const size_t len = strnlen(q.assignments, sizeof q.assignments);
  if (len == sizeof q.assignments) return reply(c.h, -EINVAL);  // not NUL-terminated
  rocev2::CcParams p = dev_->cc->get();
  const std::string_view text(q.assignments, len);
  if (!rocev2::set_cc_params(&p, text).empty()) return reply(c.h, -EINVAL);
  dev_->cc->set(p);
  DROCE_LOG(INFO, app, "client %u (%s): DCQCN %.*s", id_, program_.c_str(), int(len), q.assignments);
  reply(c.h, 0);
}

std::span<const Session::ControlEntry> Session::cc_controls() {
  static constexpr ControlEntry kEntries[] = {
      control<MsgType::cc, CcRequest>(When::any_time),
  };
  return kEntries;
}

}  // namespace droce::droced
