#include "cm/connection.h"

#include <cerrno>
#include <utility>

namespace droce::cm {

const char* to_string(ConnState s) {
  switch (s) {
    case ConnState::idle: return "idle";
    case ConnState::req_sent: return "req_sent";
    case ConnState::req_rcvd: return "req_rcvd";
    case ConnState::rep_sent: return "rep_sent";
    case ConnState::rep_rcvd: return "rep_rcvd";
    case ConnState::established: return "established";
    case ConnState::dreq_sent: return "dreq_sent";
    case ConnState::dreq_rcvd: return "dreq_rcvd";
    case ConnState::timewait: return "timewait";
    case ConnState::closed: return "closed";
  }
  return "?";
}

Connection Connection::connect(const ConnectParams& p, uint64_t now_ms) {
  Connection c;
  c.active_ = true;
  c.state_ = ConnState::req_sent;
  c.local_id_ = p.req.local_comm_id;
  c.req_tid_ = p.tid;
  c.packet_life_ = p.packet_life_time;
  c.max_cm_retries_ = p.req.max_cm_retries;
  c.remote_response_timeout_ = p.req.remote_cm_response_timeout;
  c.local_ack_timeout_ = p.req.primary.local_ack_timeout;
  const uint64_t timeout = 2 * cm_timeout_ms(c.packet_life_) + cm_timeout_ms(c.remote_response_timeout_);
  c.send_with_retry(c.header(p.tid), Message{p.req}, timeout, c.max_cm_retries_, now_ms);
  return c;
}

Connection Connection::from_req(const MadHeader& hdr, const Req& req, uint32_t local_comm_id, uint64_t) {
  Connection c;
  c.state_ = ConnState::req_rcvd;
  c.local_id_ = local_comm_id;
  c.remote_id_ = req.local_comm_id;
  c.remote_qpn_ = req.local_qpn;
  c.req_tid_ = hdr.tid;
  c.max_cm_retries_ = req.max_cm_retries;
  // Our REP waits for the active side's response time (its Local CM Response Timeout); the
  // path's packet life is one below its ACK timeout (ib_cm: cm_format_paths_from_req).
  c.remote_response_timeout_ = req.local_cm_response_timeout;
  c.local_ack_timeout_ = req.primary.local_ack_timeout;
  c.packet_life_ = req.primary.local_ack_timeout > 0 ? req.primary.local_ack_timeout - 1 : 0;
  c.raise(CmEventType::connect_request, 0, Message{req});
  return c;
}

int Connection::accept(const AcceptParams& p, uint64_t now_ms) {
  if (active_ || state_ != ConnState::req_rcvd) return -EINVAL;
  Rep rep = p.rep;
  rep.local_comm_id = local_id_;
  rep.remote_comm_id = remote_id_;
  state_ = ConnState::rep_sent;
  send_with_retry(header(req_tid_), Message{rep}, cm_timeout_ms(remote_response_timeout_), max_cm_retries_,
                  now_ms);
  return 0;
}

int Connection::ready_to_use(uint64_t) {
  if (!active_ || state_ != ConnState::rep_rcvd) return -EINVAL;
  const Outgoing rtu{header(req_tid_), Message{Rtu{local_id_, remote_id_, {}}}};
  send(rtu.hdr, rtu.msg);
  last_answer_ = rtu;
  state_ = ConnState::established;
  raise(CmEventType::established);
  return 0;
}

int Connection::reject(uint16_t reason, const std::array<uint8_t, kRejPrivate>& private_data, uint64_t) {
  Rej rej;
  switch (state_) {
    case ConnState::req_rcvd:
      // A REQ not yet answered: no local comm ID is known to the peer yet.
      rej.local_comm_id = mra_sent_ ? local_id_ : 0;
      rej.message_rejected = MsgRef::req;
      break;
    case ConnState::rep_sent:
      rej.local_comm_id = local_id_;
      rej.message_rejected = MsgRef::req;
      break;
    case ConnState::rep_rcvd:
      rej.local_comm_id = local_id_;
      rej.message_rejected = MsgRef::rep;
      break;
    case ConnState::req_sent:
      rej.local_comm_id = local_id_;
      rej.message_rejected = MsgRef::other;
      break;
    default:
      return -EINVAL;
  }
  rej.remote_comm_id = remote_id_;
  rej.reason = reason;
  rej.private_data = private_data;
  send(header(req_tid_), Message{rej});
  close();
  return 0;
}

int Connection::disconnect(uint64_t now_ms) {
  if (state_ == ConnState::established) {
    dreq_tid_ = req_tid_ ^ (uint64_t{1} << 63);  // a transaction of its own
    Dreq d;
    d.local_comm_id = local_id_;
    d.remote_comm_id = remote_id_;
    d.remote_qpn = remote_qpn_;
    state_ = ConnState::dreq_sent;
    last_answer_.reset();
    send_with_retry(header(dreq_tid_), Message{d},
                    2 * cm_timeout_ms(packet_life_) + cm_timeout_ms(remote_response_timeout_), max_cm_retries_,
                    now_ms);
    return 0;
  }
  if (state_ == ConnState::dreq_rcvd) {
    const Outgoing drep{header(dreq_tid_), Message{Drep{local_id_, remote_id_, {}}}};
    send(drep.hdr, drep.msg);
    last_answer_ = drep;
    enter_timewait(now_ms);
    return 0;
  }
  return -EINVAL;
}

bool Connection::on_mad(const MadHeader& hdr, const Message& msg, uint64_t now_ms) {
  if (const auto* rep = std::get_if<Rep>(&msg)) {
    if (!active_) return false;
    if (state_ == ConnState::req_sent) {
      remote_id_ = rep->local_comm_id;
      remote_qpn_ = rep->local_qpn;
      stop_retry();
      state_ = ConnState::rep_rcvd;
      raise(CmEventType::connect_response, 0, msg);
      return true;
    }
    if (rep->local_comm_id != remote_id_) return false;
    if (state_ == ConnState::rep_rcvd) {  // the consumer is still deciding: ask for patience
      send(header(hdr.tid), Message{Mra{local_id_, remote_id_, MsgRef::rep, kMraServiceTimeout, {}}});
      return true;
    }
    if (state_ == ConnState::established && last_answer_) {  // our RTU was lost
      send(last_answer_->hdr, last_answer_->msg);
      return true;
    }
    return false;
  }
  if (std::holds_alternative<Rtu>(msg)) {
    if (active_ || state_ != ConnState::rep_sent) return false;
    stop_retry();
    state_ = ConnState::established;
    raise(CmEventType::established);
    return true;
  }
  if (const auto* rej = std::get_if<Rej>(&msg)) {
    switch (state_) {
      case ConnState::req_sent:
      case ConnState::req_rcvd:
      case ConnState::rep_sent:
      case ConnState::rep_rcvd:
        raise(CmEventType::rejected, rej->reason, msg);
        close();
        return true;
      default:
        return false;
    }
  }
  if (const auto* mra = std::get_if<Mra>(&msg)) {
    const bool ours = (state_ == ConnState::req_sent && mra->message_mraed == MsgRef::req) ||
                      (state_ == ConnState::rep_sent && mra->message_mraed == MsgRef::rep);
    if (!ours || !pending_) return false;
    // The peer needs longer: wait its service time on top of the path's, then go on retrying.
    deadline_ = now_ms + cm_timeout_ms(mra->service_timeout) + cm_timeout_ms(packet_life_);
    return true;
  }
  if (std::holds_alternative<Dreq>(msg)) {
    switch (state_) {
      case ConnState::established:
      case ConnState::rep_sent:  // the RTU was lost, the peer is established and now leaves
        stop_retry();
        dreq_tid_ = hdr.tid;
        state_ = ConnState::dreq_rcvd;
        raise(CmEventType::disconnected);
        return true;
      case ConnState::dreq_sent: {  // both sides disconnect at once: answer, and it is over
        dreq_tid_ = hdr.tid;
        const Outgoing drep{header(hdr.tid), Message{Drep{local_id_, remote_id_, {}}}};
        send(drep.hdr, drep.msg);
        last_answer_ = drep;
        raise(CmEventType::disconnected);
        enter_timewait(now_ms);
        return true;
      }
      case ConnState::timewait:  // our DREP was lost
        if (!last_answer_) return false;
        send(last_answer_->hdr, last_answer_->msg);
        return true;
      default:
        return false;
    }
  }
  if (std::holds_alternative<Drep>(msg)) {
    if (state_ != ConnState::dreq_sent) return false;
    raise(CmEventType::disconnected);
    enter_timewait(now_ms);
    return true;
  }
  if (std::holds_alternative<Req>(msg)) {
    if (active_) return false;
    if (state_ == ConnState::req_rcvd) {  // the REQ again while the consumer decides
      send(header(hdr.tid), Message{Mra{local_id_, remote_id_, MsgRef::req, kMraServiceTimeout, {}}});
      mra_sent_ = true;
      return true;
    }
    return state_ == ConnState::rep_sent;  // the REP's own timer answers it
  }
  return false;
}

void Connection::on_timer(uint64_t now_ms) {
  if (!deadline_ || now_ms < *deadline_) return;
  if (state_ == ConnState::timewait) {
    close();
    raise(CmEventType::timewait_exit);
    return;
  }
  if (!pending_) {
    deadline_.reset();
    return;
  }
  if (retries_left_ > 0) {
    --retries_left_;
    send(pending_->hdr, pending_->msg);
    deadline_ = now_ms + retry_timeout_ms_;
    return;
  }
  // Every retry went unanswered.
  if (state_ == ConnState::dreq_sent) {
    raise(CmEventType::disconnected);
    enter_timewait(now_ms);
  } else {
    raise(CmEventType::unreachable);
    close();
  }
}

void Connection::send(const MadHeader& hdr, const Message& msg) { out_.push_back(Outgoing{hdr, msg}); }

void Connection::send_with_retry(const MadHeader& hdr, const Message& msg, uint64_t timeout_ms, uint32_t retries,
                                 uint64_t now_ms) {
  send(hdr, msg);
  pending_ = Outgoing{hdr, msg};
  retry_timeout_ms_ = timeout_ms;
  retries_left_ = retries;
  deadline_ = now_ms + timeout_ms;
}

void Connection::stop_retry() {
  pending_.reset();
  retries_left_ = 0;
  deadline_.reset();
}

void Connection::enter_timewait(uint64_t now_ms) {
  stop_retry();
  state_ = ConnState::timewait;
  deadline_ = now_ms + cm_timeout_ms(local_ack_timeout_);
}

void Connection::close() {
  stop_retry();
  state_ = ConnState::closed;
}

void Connection::raise(CmEventType t, uint16_t reason, Message msg) {
  events_.push_back(CmEvent{t, reason, std::move(msg)});
}

MadHeader Connection::header(uint64_t tid) const {
  MadHeader h;
  h.tid = tid;
  return h;
}

}  // namespace droce::cm
