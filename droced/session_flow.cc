// ibv_create_flow / ibv_destroy_flow for a client's raw packet QPs (minor 14): the rule goes to
// the engine of the core that serves the client (rocev2/raw_flow.h decides who gets a frame).
// A client names only its own QPs and rules; its QPs' rules go with them, and with it.

#include <cerrno>
#include <cstring>

#include "droced/device_core.h"
#include "droced/session_objects.h"

namespace droce::droced {

using abi::ctl::CreateFlowRequest;
using abi::ctl::IdReply;
using abi::ctl::IdRequest;
using abi::ctl::MsgType;

template <>
void Session::serve<MsgType::create_flow>(const Control& c, const CreateFlowRequest& q) {
  auto qp = qps_.find(q.qpn);
  if (qp == qps_.end() || qp->second->type != rocev2::QpType::raw_packet || q.flags != 0)
    return reply(c.h, -EINVAL);
  IdReply r{};
  const int rc = dev_->core->create_flow(q.qpn, static_cast<abi::FlowType>(q.type), q.priority, q.match, &r.id);
  if (rc == 0) flows_[r.id] = q.qpn;
  reply(c.h, rc, &r, sizeof r);
}

template <>
void Session::serve<MsgType::set_rss>(const Control& c, const abi::ctl::RssRequest& q) {
  // The RSS QP and every receive queue must be this client's own.
  if (qps_.find(q.qpn) == qps_.end() || q.log_table > 7 || q.key_len > sizeof q.key) return reply(c.h, -EINVAL);
  rocev2::RawRss rss;
  rss.table.assign(q.wqs, q.wqs + (size_t{1} << q.log_table));
  for (uint32_t wq : rss.table)
    if (qps_.find(wq) == qps_.end()) return reply(c.h, -EINVAL);
  std::memcpy(rss.key.data(), q.key, q.key_len);
  rss.key_len = q.key_len;
  rss.fields = q.fields;
  reply(c.h, dev_->core->engine().set_rss(q.qpn, rss));
}

template <>
void Session::serve<MsgType::destroy_flow>(const Control& c, const IdRequest& q) {
  auto it = flows_.find(q.id);
  if (it == flows_.end()) return reply(c.h, -EINVAL);
  flows_.erase(it);
  reply(c.h, dev_->core->destroy_flow(q.id));
}

std::span<const Session::ControlEntry> Session::flow_controls() {
  static constexpr ControlEntry kEntries[] = {
      control<MsgType::create_flow, CreateFlowRequest>(),
      control<MsgType::destroy_flow, IdRequest>(),
      control<MsgType::set_rss, abi::ctl::RssRequest>(),
  };
  return kEntries;
}

}  // namespace droce::droced
