#include "cm/agent.h"

#include <algorithm>
#include <cerrno>

namespace droce::cm {

namespace {

MadHeader header(uint64_t tid) {
  MadHeader h;
  h.tid = tid;
  return h;
}

// The comm IDs a message names: the sender's (local) and ours (remote). A REJ of a REQ that was
// never answered carries no local ID (0).
struct Ids {
  uint32_t sender = 0;
  uint32_t ours = 0;
};

std::optional<Ids> ids_of(const Message& m) {
  return std::visit(
      [](const auto& x) -> std::optional<Ids> {
        using M = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<M, Rep> || std::is_same_v<M, Rtu> || std::is_same_v<M, Rej> ||
                      std::is_same_v<M, Mra> || std::is_same_v<M, Dreq> || std::is_same_v<M, Drep>)
          return Ids{x.local_comm_id, x.remote_comm_id};
        else
          return std::nullopt;
      },
      m);
}

}  // namespace

Agent::Agent(uint64_t ca_guid, uint32_t id_seed) : ca_guid_(ca_guid), id_seed_(id_seed) {}

int64_t Agent::listen(uint64_t service_id, uint32_t backlog, uint64_t now_ms) {
  for (const auto& [id, l] : listeners_)
    if (l.service_id == service_id) return -EADDRINUSE;
  const uint32_t id = next_listener_++;
  listeners_[id] = Listener{service_id, std::max<uint32_t>(backlog, 1), 0};
  closed_.erase(service_id);
  // The requests held for this service come in now, in the order they came.
  std::vector<Held> mine;
  auto keep = std::stable_partition(held_.begin(), held_.end(), [&](const Held& h) { return h.service_id != service_id; });
  mine.assign(std::make_move_iterator(keep), std::make_move_iterator(held_.end()));
  held_.erase(keep, held_.end());
  for (const Held& h : mine) {
    if (const auto* req = std::get_if<Req>(&h.msg)) on_req(h.hdr, *req, h.peer, now_ms);
    else if (const auto* sreq = std::get_if<SidrReq>(&h.msg)) on_sidr_req(h.hdr, *sreq, h.peer, now_ms);
  }
  return id;
}

void Agent::stop_listening(uint32_t listener, uint64_t now_ms) {
  auto it = listeners_.find(listener);
  if (it == listeners_.end()) return;
  if (closed_.size() >= kMaxHeld) closed_.clear();  // bounded: at worst a request is refused at once
  closed_[it->second.service_id] = now_ms;
  listeners_.erase(it);
}

bool Agent::hold(uint64_t service_id, const MadHeader& hdr, const Message& msg, const Peer& from, uint64_t now_ms) {
  // A listener on this service, or on its port in another IP port space (perftest -c UD -R makes
  // its parameter exchange over TCP and the test's SIDR over UDP, on one port), went moments ago.
  PortSpace ps;
  uint16_t port = 0;
  const bool ip = parse_ip_service_id(service_id, &ps, &port);
  const bool recent = std::any_of(closed_.begin(), closed_.end(), [&](const auto& c) {
    PortSpace cps;
    uint16_t cport = 0;
    const bool same = c.first == service_id || (ip && parse_ip_service_id(c.first, &cps, &cport) && cport == port);
    return same && now_ms <= c.second + kListenGapMs;
  });
  if (!recent || held_.size() >= kMaxHeld) return false;
  // A retransmission of a request already held is the same request.
  for (const Held& h : held_)
    if (h.hdr.tid == hdr.tid && h.peer == from) return true;
  held_.push_back(Held{service_id, hdr, msg, from, now_ms + kHoldMs});
  ++counters_.held;
  return true;
}

void Agent::refuse_sidr(const Peer& to, const MadHeader& hdr, const SidrReq& req) {
  ++counters_.sidr_no_listener;
  SidrRep rep;
  rep.request_id = req.request_id;
  rep.status = uint8_t(SidrStatus::unsupported);
  rep.service_id = req.service_id;
  send(to, header(hdr.tid), Message{rep});
}

uint32_t Agent::new_comm_id() {
  // A counter scrambled by the seed: unique until 2^32 connections later, and not the IDs an
  // earlier run of this host (another seed) used.
  for (;;) {
    const uint32_t id = next_id_++ ^ id_seed_;
    if (id != 0 && conns_.find(id) == conns_.end() && sidr_.find(id) == sidr_.end()) return id;
  }
}

Agent::Entry* Agent::find(uint32_t id) {
  auto it = conns_.find(id);
  return it == conns_.end() ? nullptr : &it->second;
}

std::optional<ConnState> Agent::state(uint32_t conn) const {
  auto it = conns_.find(conn);
  if (it == conns_.end()) return std::nullopt;
  return it->second.conn.state();
}

uint32_t Agent::connect(ConnectParams p, const Peer& peer, uint64_t now_ms) {
  const uint32_t id = new_comm_id();
  p.req.local_comm_id = id;
  p.req.local_ca_guid = ca_guid_;
  if (p.tid == 0) p.tid = (uint64_t{id_seed_} << 32) | id;  // as ib_cm's cm_form_tid
  conns_.emplace(id, Entry{Connection::connect(p, now_ms), peer, 0, 0, 0});
  collect(id);
  return id;
}

int Agent::accept(uint32_t conn, AcceptParams p, uint64_t now_ms) {
  Entry* e = find(conn);
  if (e == nullptr) return -ENOENT;
  p.rep.local_ca_guid = ca_guid_;
  const int rc = e->conn.accept(p, now_ms);
  collect(conn);
  return rc;
}

int Agent::ready_to_use(uint32_t conn, uint64_t now_ms) {
  Entry* e = find(conn);
  if (e == nullptr) return -ENOENT;
  const int rc = e->conn.ready_to_use(now_ms);
  collect(conn);
  return rc;
}

int Agent::reject(uint32_t conn, uint16_t reason, const std::array<uint8_t, kRejPrivate>& private_data,
                  uint64_t now_ms) {
  Entry* e = find(conn);
  if (e == nullptr) return -ENOENT;
  const int rc = e->conn.reject(reason, private_data, now_ms);
  collect(conn);
  return rc;
}

int Agent::disconnect(uint32_t conn, uint64_t now_ms) {
  Entry* e = find(conn);
  if (e == nullptr) return -ENOENT;
  const int rc = e->conn.disconnect(now_ms);
  collect(conn);
  return rc;
}

void Agent::sidr_reply(const Peer& peer, uint64_t tid, const SidrRep& rep) { send(peer, header(tid), Message{rep}); }

uint32_t Agent::sidr_request(SidrReq req, const Peer& peer, uint64_t now_ms, uint64_t timeout_ms, uint32_t retries) {
  const uint32_t id = new_comm_id();
  req.request_id = id;
  SidrPending p;
  p.peer = peer;
  p.hdr = header((uint64_t{id_seed_} << 32) | id);
  p.hdr.attr_id = AttrId::sidr_req;
  p.req = req;
  p.timeout_ms = timeout_ms;
  p.deadline_ms = now_ms + timeout_ms;
  p.retries_left = retries;
  send(peer, p.hdr, Message{req});
  sidr_.emplace(id, p);
  return id;
}

void Agent::send(const Peer& peer, const MadHeader& hdr, const Message& msg) {
  AgentOutgoing o;
  o.peer = peer;
  encode(hdr, msg, &o.mad);
  out_.push_back(o);
  ++counters_.mads_out;
}

void Agent::collect(uint32_t id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Entry& e = it->second;
  for (Outgoing& o : e.conn.take_outgoing()) send(e.peer, o.hdr, o.msg);
  for (CmEvent& ev : e.conn.take_events()) events_.push_back(AgentEvent{id, e.listener, std::move(ev), e.peer, 0});
  // A request leaves its listener's backlog once it is answered or gone.
  if (e.listener != 0 && e.conn.state() != ConnState::req_rcvd) {
    if (auto l = listeners_.find(e.listener); l != listeners_.end() && l->second.waiting > 0) --l->second.waiting;
    e.listener = 0;
  }
  if (e.conn.state() == ConnState::closed) {
    by_remote_.erase({e.remote_guid, e.conn.remote_comm_id()});
    conns_.erase(it);
  }
}

void Agent::reject_req(const Peer& to, const MadHeader& hdr, const Req& req, RejReason reason) {
  Rej rej;
  rej.local_comm_id = 0;
  rej.remote_comm_id = req.local_comm_id;
  rej.message_rejected = MsgRef::req;
  rej.reason = uint16_t(reason);
  send(to, header(hdr.tid), Message{rej});
}

void Agent::on_req(const MadHeader& hdr, const Req& req, const Peer& from, uint64_t now_ms) {
  // The same REQ again (a retransmission): its connection answers it.
  if (auto d = by_remote_.find({req.local_ca_guid, req.local_comm_id}); d != by_remote_.end()) {
    Entry* e = find(d->second);
    if (e != nullptr && e->peer == from) {
      if (!e->conn.on_mad(hdr, Message{req}, now_ms)) ++counters_.unmatched;
      collect(d->second);
      return;
    }
  }
  // A new REQ from a QP we are still connected to (or waiting out): stale (ib_cm: REJ 10).
  for (const auto& [id, e] : conns_) {
    if (e.remote_guid == req.local_ca_guid && e.remote_qpn == req.local_qpn && e.remote_guid != 0) {
      ++counters_.rej_stale;
      reject_req(from, hdr, req, RejReason::stale_conn);
      return;
    }
  }
  auto l = std::find_if(listeners_.begin(), listeners_.end(),
                        [&](const auto& kv) { return kv.second.service_id == req.service_id; });
  if (l == listeners_.end()) {
    if (hold(req.service_id, hdr, Message{req}, from, now_ms)) return;
    ++counters_.rej_no_listener;
    reject_req(from, hdr, req, RejReason::invalid_service_id);
    return;
  }
  if (l->second.waiting >= l->second.backlog) {
    ++counters_.rej_backlog;
    reject_req(from, hdr, req, RejReason::no_resources);
    return;
  }
  const uint32_t id = new_comm_id();
  ++l->second.waiting;
  conns_.emplace(id, Entry{Connection::from_req(hdr, req, id, now_ms), from, l->first, req.local_ca_guid,
                           req.local_qpn});
  by_remote_[{req.local_ca_guid, req.local_comm_id}] = id;
  collect(id);
}

void Agent::on_sidr_req(const MadHeader& hdr, const SidrReq& sreq, const Peer& from, uint64_t now_ms) {
  auto l = std::find_if(listeners_.begin(), listeners_.end(),
                        [&](const auto& kv) { return kv.second.service_id == sreq.service_id; });
  if (l == listeners_.end()) {
    if (!hold(sreq.service_id, hdr, Message{sreq}, from, now_ms)) refuse_sidr(from, hdr, sreq);
    return;
  }
  events_.push_back(AgentEvent{0, l->first, CmEvent{CmEventType::connect_request, 0, Message{sreq}}, from, hdr.tid});
}

void Agent::on_mad(std::span<const uint8_t> bytes, const Peer& from, uint64_t now_ms) {
  ++counters_.mads_in;
  MadHeader hdr;
  Message msg;
  if (const MadError err = decode(bytes, &hdr, &msg); err != MadError::ok) {
    ++counters_.dropped[static_cast<size_t>(err)];
    return;
  }
  if (const auto* req = std::get_if<Req>(&msg)) {
    on_req(hdr, *req, from, now_ms);
    return;
  }
  if (const auto* sreq = std::get_if<SidrReq>(&msg)) {
    on_sidr_req(hdr, *sreq, from, now_ms);
    return;
  }
  if (const auto* srep = std::get_if<SidrRep>(&msg)) {
    // The answer to our SIDR_REQ, from the host we asked only.
    auto it = sidr_.find(srep->request_id);
    if (it == sidr_.end() || !(it->second.peer == from)) {
      ++counters_.unmatched;
      return;
    }
    events_.push_back(AgentEvent{srep->request_id, 0, CmEvent{CmEventType::connect_response, 0, msg}, from, hdr.tid});
    sidr_.erase(it);
    return;
  }
  const auto ids = ids_of(msg);
  Entry* e = ids ? find(ids->ours) : nullptr;
  // Only the connection's own peer may speak for it, under the comm ID it gave (a REJ of an
  // unanswered REQ and the first REP carry one we do not know yet).
  const bool from_peer = e != nullptr && e->peer == from;
  const uint32_t known = e != nullptr ? e->conn.remote_comm_id() : 0;
  const bool id_ok = known == 0 || ids->sender == known || (std::holds_alternative<Rej>(msg) && ids->sender == 0);
  if (!from_peer || !id_ok || !e->conn.on_mad(hdr, msg, now_ms)) {
    ++counters_.unmatched;
    return;
  }
  if (const auto* rep = std::get_if<Rep>(&msg); rep != nullptr && e->remote_guid == 0) {
    e->remote_guid = rep->local_ca_guid;
    e->remote_qpn = rep->local_qpn;
    by_remote_[{e->remote_guid, rep->local_comm_id}] = ids->ours;
  }
  collect(ids->ours);
}

void Agent::on_timer(uint64_t now_ms) {
  // Held requests whose listener did not come back: refused as with no listener at all.
  for (auto it = held_.begin(); it != held_.end();) {
    if (it->deadline_ms > now_ms) {
      ++it;
      continue;
    }
    const Held h = *it;
    it = held_.erase(it);
    if (const auto* req = std::get_if<Req>(&h.msg)) {
      ++counters_.rej_no_listener;
      reject_req(h.peer, h.hdr, *req, RejReason::invalid_service_id);
    } else if (const auto* sreq = std::get_if<SidrReq>(&h.msg)) {
      refuse_sidr(h.peer, h.hdr, *sreq);
    }
  }
  for (auto it = sidr_.begin(); it != sidr_.end();) {
    SidrPending& p = it->second;
    if (p.deadline_ms > now_ms) {
      ++it;
    } else if (p.retries_left == 0) {
      events_.push_back(AgentEvent{it->first, 0, CmEvent{CmEventType::unreachable, 0, Message{}}, p.peer, 0});
      it = sidr_.erase(it);
    } else {
      --p.retries_left;
      p.deadline_ms = now_ms + p.timeout_ms;
      send(p.peer, p.hdr, Message{p.req});  // the same TID: a retransmission
      ++it;
    }
  }
  std::vector<uint32_t> due;
  for (const auto& [id, e] : conns_)
    if (auto d = e.conn.deadline_ms(); d && *d <= now_ms) due.push_back(id);
  for (uint32_t id : due) {
    if (Entry* e = find(id)) {
      e->conn.on_timer(now_ms);
      collect(id);
    }
  }
}

std::optional<uint64_t> Agent::deadline_ms() const {
  std::optional<uint64_t> best;
  for (const Held& h : held_)
    if (!best || h.deadline_ms < *best) best = h.deadline_ms;
  for (const auto& [id, p] : sidr_)
    if (!best || p.deadline_ms < *best) best = p.deadline_ms;
  for (const auto& [id, e] : conns_)
    if (auto d = e.conn.deadline_ms(); d && (!best || *d < *best)) best = d;
  return best;
}

}  // namespace droce::cm
