// `droce fault`: a lab's fault rules (droced/fault_stage.h) set and cleared on a running droced.
// Not a verb: any client may read the rules (stats), only root or droced's own user may change
// them, since a rule changes every client's traffic.

#include <unistd.h>

#include <cstring>

#include "core/log.h"
#include "droced/session_objects.h"

namespace droce::droced {

using namespace abi::ctl;

template <>
void Session::serve<MsgType::fault>(const Control& c, const FaultRequest& q) {
  if (dev_->faults == nullptr) return reply(c.h, -EOPNOTSUPP);
  if (!operator_client()) return reply(c.h, -EPERM);
  FaultReply r{};
  int rc = -EINVAL;
  if (q.op == uint32_t(FaultOp::clear)) {
    rc = dev_->faults->clear(q.id);
    r.id = q.id;
    if (rc == 0) DROCE_LOG(INFO, app, "client %u (%s): fault rule %s cleared", id_, program_.c_str(),
                           q.id == 0 ? "all" : std::to_string(q.id).c_str());
  } else if (q.op == uint32_t(FaultOp::set)) {
    FaultRule rule;
    rule.id = q.id;
    rule.qpn = q.qpn;
    rule.direction = static_cast<FaultDirection>(q.direction);
    rule.seed = q.seed;
    const size_t len = strnlen(q.spec, sizeof q.spec);
    if (len == sizeof q.spec) return reply(c.h, -EINVAL);  // not NUL-terminated
    if (!rule.spec.parse(std::string_view(q.spec, len)).empty()) return reply(c.h, -EINVAL);
    rc = dev_->faults->set(rule, &r.id);
    if (rc == 0)
      DROCE_LOG(INFO, app, "client %u (%s): fault rule %u: %s on %s frames of %s", id_, program_.c_str(), r.id,
                rule.spec.to_string().c_str(), to_string(rule.direction),
                rule.qpn == kAllQps ? "every QP" : ("QP " + std::to_string(rule.qpn)).c_str());
  }
  reply(c.h, rc, &r, sizeof r);
}

std::span<const Session::ControlEntry> Session::fault_controls() {
  static constexpr ControlEntry kEntries[] = {
      control<MsgType::fault, FaultRequest>(When::any_time),
  };
  return kEntries;
}

}  // namespace droce::droced
