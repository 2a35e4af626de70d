// The control dispatch: every request a client sends goes through one table indexed by its
// message type (eRPC's req_func_arr), filled from the entries each object family declares beside
// its handlers. Checks common to all requests (the header, hello first, one request at a time,
// the body decoding) are here and in Session::decode_and_serve, once.

#include <array>
#include <cassert>

#include "droced/session_objects.h"

namespace droce::droced {

using namespace abi::ctl;

const Session::ControlEntry* Session::control_for(uint16_t type) {
  static const std::array<ControlEntry, kLastMsgType + 1> kTable = [] {
    std::array<ControlEntry, kLastMsgType + 1> t{};
    for (std::span<const ControlEntry> family : {device_controls(), pd_controls(), mr_controls(), mw_controls(), dm_controls(),
                                                 cq_controls(),
                                                 srq_controls(), qp_controls(), ah_controls(), mcast_controls(), flow_controls(),
                                                 fault_controls(), capture_controls(), cc_controls(),
                                                 xrc_controls()}) {
      for (const ControlEntry& e : family) {
        const auto i = static_cast<uint16_t>(e.type);
        assert(i < t.size() && t[i].serve == nullptr && "a message type served twice");
        t[i] = e;
      }
    }
    return t;
  }();
  return type < kTable.size() && kTable[type].serve != nullptr ? &kTable[type] : nullptr;
}

void Session::handle(const std::vector<uint8_t>& msg, std::vector<core::Fd>& fds, uint64_t now_ns) {
  CtlHeader h;
  const HeaderCheck hc = check_header(msg, &h);
  if (hc != HeaderCheck::ok) {
    // A different major version gets its answer before the door closes.
    if (hc == HeaderCheck::major_mismatch) {
      auto r = encode_empty(static_cast<MsgType>(h.type), h.seq, true, -EPROTO);
      (void)core::send_message(sock_.get(), r);
    }
    fault(to_string(hc));
    return;
  }
  ++counters_.messages;
  const ControlEntry* entry = control_for(h.type);
  const When when = entry != nullptr ? entry->when : When::after_hello;
  if (!hello_done_ && when == When::after_hello) {
    fault("a request before hello");
    return;
  }
  if (pending_.active) {  // one request at a time; the client library waits for each reply
    reply(h, -EBUSY);
    return;
  }
  if (entry == nullptr) {
    reply(h, -EOPNOTSUPP);
    return;
  }
  if (when == When::before_hello && hello_done_) {
    reply(h, -EALREADY);
    return;
  }
  entry->serve(*this, Control{h, msg, fds, now_ns});
}

void Session::poll_pending(uint64_t now_ns) {
  if (!pending_.active) return;
  if (pending_.header.type == uint16_t(MsgType::reg_mr)) {
    if (pending_.job->done.load(std::memory_order_acquire)) {
      pending_.active = false;
      finish_pending_reg_mr();
    }
    return;
  }
  int rc;
  IdReply r{};
  if (pending_.header.type == uint16_t(MsgType::modify_qp)) {
    rc = on_modify_qp(pending_.modify, now_ns);
  } else {
    rc = on_create_ah(pending_.create_ah, now_ns, &r.id);
  }
  if (rc == 1) return;
  pending_.active = false;
  if (pending_.header.type == uint16_t(MsgType::create_ah)) reply(pending_.header, rc, &r, sizeof r);
  else reply(pending_.header, rc);
}

}  // namespace droce::droced
