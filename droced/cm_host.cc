#include "droced/cm_host.h"

#include <sys/epoll.h>
#include <fcntl.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "abi/rdmacm_channel.h"
#include "core/clock.h"
#include "rocev2/engine.h"

namespace droce::droced {

namespace {

// An address vector from local GID `idx` (its source MAC, VLAN and GID: set_av_source; none
// when idx < 0) to `dst`, for the neighbour table to resolve.
rocev2::AddressVector av_toward(const net::GidTable& gids, int idx, const net::IpAddr& src, const net::IpAddr& dst) {
  rocev2::AddressVector av;
  av.dgid = dst;
  av.sgid = src;
  if (idx >= 0) {
    av.sgid_index = uint8_t(idx);
    set_av_source(*gids.at(uint32_t(idx)), &av);
  }
  return av;
}

cm::UcmaConfig ucma_config(uint64_t node_guid, uint32_t seed, uint8_t path_mtu) {
  cm::UcmaConfig c;
  c.node_guid = node_guid;
  c.seed = seed;
  c.path_mtu = path_mtu;
  return c;
}

}  // namespace

CmHost::CmHost(DeviceCore* core, const net::GidTable* gids, uint64_t node_guid, uint32_t seed, uint8_t path_mtu)
    : core_(core),
      gids_(gids),
      agent_(node_guid, seed),
      net_(core, gids),
      ucma_(&agent_, &net_, ucma_config(node_guid, seed, path_mtu)) {}

int CmHost::create(DeviceCore* core, const net::GidTable* gids, uint64_t node_guid, uint32_t seed,
                   uint8_t path_mtu, int listen_fd, std::unique_ptr<CmHost>* out) {
  std::unique_ptr<CmHost> h(new CmHost(core, gids, node_guid, seed, path_mtu));
  if (int rc = h->start(listen_fd); rc != 0) return rc;
  *out = std::move(h);
  return 0;
}

int CmHost::start(int listen_fd) {
  epoll_ = core::Fd(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_.valid()) return -errno;
  if (listen_fd >= 0) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kListenKey;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, listen_fd, &ev) != 0) return -errno;
    listen_fd_ = listen_fd;
  }
  rocev2::Engine& e = core_->engine();
  if (int rc = e.alloc_pd(&pd_); rc != 0) return rc;
  if (int rc = e.create_cq(kRecvSlots, &recv_cq_); rc != 0) return rc;
  if (int rc = e.create_cq(kSendSlots, &send_cq_); rc != 0) return rc;
  buffers_.assign(size_t{kRecvSlots} * kRecvBytes + size_t{kSendSlots} * cm::kMadSize, 0);
  // The buffers' own address as their virtual address: droced is the only user.
  const auto va = reinterpret_cast<uint64_t>(buffers_.data());
  if (int rc = e.reg_mr(pd_, va, buffers_.size(), buffers_.data(), rocev2::kAccessLocalWrite, &mr_); rc != 0)
    return rc;
  rocev2::QpInit init;
  init.type = rocev2::QpType::ud;
  init.pd = pd_;
  init.send_cq = send_cq_;
  init.recv_cq = recv_cq_;
  init.cap = {kSendSlots, kRecvSlots, 1, 1, 0};
  if (int rc = e.create_gsi_qp(init); rc != 0) return rc;
  qp_made_ = true;
  rocev2::QpAttr a;
  a.qp_state = rocev2::QpState::init;
  a.port_num = 1;
  a.qkey = rocev2::Engine::kGsiQkey;
  if (int rc = e.modify_qp(rocev2::Engine::kGsiQpn, a,
                           rocev2::kAttrState | rocev2::kAttrPkeyIndex | rocev2::kAttrPort | rocev2::kAttrQkey);
      rc != 0)
    return rc;
  a = rocev2::QpAttr{};
  a.qp_state = rocev2::QpState::rtr;
  if (int rc = e.modify_qp(rocev2::Engine::kGsiQpn, a, rocev2::kAttrState); rc != 0) return rc;
  a.qp_state = rocev2::QpState::rts;
  if (int rc = e.modify_qp(rocev2::Engine::kGsiQpn, a, rocev2::kAttrState | rocev2::kAttrSqPsn); rc != 0)
    return rc;
  for (uint32_t i = 0; i < kRecvSlots; ++i) post_recv(i);
  for (uint32_t i = 0; i < kSendSlots; ++i) free_send_.push_back(i);
  return 0;
}

CmHost::~CmHost() {
  // Programs still connected see their channels end (EOF); their peers get REJ/DREQ first.
  const uint64_t now = core::monotonic_ns();
  while (!channels_.empty()) close_channel(channels_.begin()->first, now);
  rocev2::Engine& e = core_->engine();
  for (const auto& [peer, ah] : ahs_) e.destroy_ah(ah);
  if (qp_made_) e.destroy_qp(rocev2::Engine::kGsiQpn);
  if (mr_ != nullptr) e.dereg_mr(mr_->lkey);
  if (send_cq_ != nullptr) e.destroy_cq(send_cq_);
  if (recv_cq_ != nullptr) e.destroy_cq(recv_cq_);
  if (pd_ != 0) e.dealloc_pd(pd_);
}

void CmHost::post_recv(uint32_t slot) {
  rocev2::RecvWr r;
  r.wr_id = slot;
  r.num_sge = 1;
  r.sg_list[0] = {reinterpret_cast<uint64_t>(buffers_.data()) + uint64_t{slot} * kRecvBytes, kRecvBytes, mr_->lkey};
  (void)core_->engine().post_recv(rocev2::Engine::kGsiQpn, r);
}

uint32_t CmHost::poll(uint64_t now_ns) {
  const uint64_t now_ms = now_ns / 1'000'000;
  uint32_t did = 0;
  rocev2::Completion wc[16];
  while (uint32_t n = recv_cq_->poll(wc, 16)) {
    for (uint32_t i = 0; i < n; ++i) {
      const auto slot = static_cast<uint32_t>(wc[i].wr_id);
      if (slot >= kRecvSlots) continue;
      const uint8_t* at = buffers_.data() + size_t{slot} * kRecvBytes;
      if (wc[i].status != rocev2::WcStatus::success || wc[i].byte_len < kRecvBytes) {
        ++counters_.rx_errors;
      } else {
        net::IpAddr from, to;
        rocev2::grh_area_addresses(at, &from, &to);
        if (local_.size() >= kMaxPeers && local_.find(from) == local_.end()) local_.clear();  // bounded
        local_[from] = to;
        ++counters_.rx_mads;
        agent_.on_mad(std::span<const uint8_t>(at + 40, cm::kMadSize), cm::Peer{from}, now_ms);
      }
      post_recv(slot);
      ++did;
    }
  }
  while (uint32_t n = send_cq_->poll(wc, 16))
    for (uint32_t i = 0; i < n; ++i) free_send_.push_back(static_cast<uint32_t>(wc[i].wr_id));
  agent_.on_timer(now_ms);
  ucma_.on_timer(now_ms);
  pump(now_ns);
  // MADs waiting for a MAC first, in order, then the new ones.
  std::deque<Waiting> waiting = std::move(waiting_);
  waiting_.clear();
  for (Waiting& w : waiting) {
    if (now_ns - w.since_ns > kResolveWaitNs) {
      ++counters_.tx_unresolved;
      continue;
    }
    waiting_.push_back(w);
  }
  for (const cm::AgentOutgoing& o : agent_.take_outgoing()) waiting_.push_back(Waiting{o, now_ns});
  std::deque<Waiting> still;
  for (Waiting& w : waiting_) {
    const auto local = local_.find(w.mad.peer.gid);
    const net::IpAddr src = local != local_.end() ? local->second : net::IpAddr{};
    const int64_t ah = ah_for(w.mad.peer.gid, src, now_ns);
    if (ah == 0) {
      still.push_back(w);
      continue;
    }
    if (ah < 0) {
      ++counters_.tx_unresolved;
      continue;
    }
    if (free_send_.empty()) {
      ++counters_.tx_no_slot;
      continue;
    }
    const uint32_t slot = free_send_.back();
    free_send_.pop_back();
    uint8_t* buf = buffers_.data() + size_t{kRecvSlots} * kRecvBytes + size_t{slot} * cm::kMadSize;
    std::memcpy(buf, w.mad.mad.data(), cm::kMadSize);
    rocev2::SendWr s;
    s.wr_id = slot;
    s.opcode = rocev2::WrOpcode::send;
    s.send_flags = rocev2::kSendSignaled;
    s.num_sge = 1;
    s.sg_list[0] = {reinterpret_cast<uint64_t>(buf), cm::kMadSize, mr_->lkey};
    s.ah = static_cast<uint32_t>(ah);
    s.remote_qpn = cm::kGsiQpn;
    s.remote_qkey = cm::kGsiQkey;
    if (core_->engine().post_send(rocev2::Engine::kGsiQpn, s) == 0) {
      ++counters_.tx_mads;
      ++did;
    } else {
      free_send_.push_back(slot);
      ++counters_.tx_no_slot;
    }
  }
  waiting_ = std::move(still);
  update_deadline(now_ns);
  return did;
}

void CmHost::update_deadline(uint64_t now_ns) {
  // The agent's earliest timer (a walk over its connections: once per poll, not on every loop
  // pass), soon while MADs wait for a MAC, every 10 ms while an address is being resolved.
  deadline_ns_ = UINT64_MAX;
  if (auto a = agent_.deadline_ms()) deadline_ns_ = *a * 1'000'000;
  if (!waiting_.empty()) deadline_ns_ = std::min(deadline_ns_, now_ns + 1'000'000);
  if (ucma_.resolving()) deadline_ns_ = std::min(deadline_ns_, now_ns + kResolvePollNs);
}

// ---- the rdma_cm channels -------------------------------------------------------------------

void CmHost::on_control(uint64_t now_ns) {
  epoll_event evs[16];
  const int n = ::epoll_wait(epoll_.get(), evs, 16, 0);
  for (int i = 0; i < n; ++i) {
    if (evs[i].data.u64 == kListenKey) {
      accept_channels();
      continue;
    }
    const auto ch = static_cast<uint32_t>(evs[i].data.u64);
    auto it = channels_.find(ch);
    if (it != channels_.end() && !serve(ch, it->second, now_ns)) close_channel(ch, now_ns);
  }
  pump(now_ns);
  // What the commands sent goes out, and the timers they set (address resolution, the CM's
  // retransmissions) are counted, on the next pass of the loop.
  if (n > 0) deadline_ns_ = now_ns;
}

void CmHost::accept_channels() {
  for (;;) {
    core::Fd fd;
    if (core::seqpacket_accept(listen_fd_, &fd) != 0) return;
    ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) | O_NONBLOCK);
    Channel c;
    core::PeerCredentials cred{};
    if (core::peer_credentials(fd.get(), &cred) == 0) c.pid = cred.pid;
    c.sock = std::move(fd);
    c.refused = per_process_[c.pid] >= channels_per_process_;
    if (!c.refused) {
      c.eventfd = core::Fd(::eventfd(0, EFD_SEMAPHORE | EFD_NONBLOCK | EFD_CLOEXEC));
      if (!c.eventfd.valid()) return;
      ++per_process_[c.pid];
    }
    const uint32_t ch = ucma_.open_channel();
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = ch;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, c.sock.get(), &ev) != 0) {
      ucma_.close_channel(ch, 0);
      continue;
    }
    channels_.emplace(ch, std::move(c));
    ++counters_.channels_opened;
  }
}

bool CmHost::serve(uint32_t ch, Channel& c, uint64_t now_ns) {
  std::vector<uint8_t> msg;
  std::vector<core::Fd> fds;
  for (;;) {
    const ssize_t n = core::receive_message(c.sock.get(), &msg,
                                            sizeof(droce_cm_request) + DROCE_CM_MAX_CMD + DROCE_CM_MAX_OPTVAL, &fds);
    if (n == -EAGAIN) return true;
    if (n <= 0) return false;  // EOF: the program closed the channel or died
    droce_cm_request req{};
    bool ok = msg.size() >= sizeof req && fds.empty();
    if (ok) std::memcpy(&req, msg.data(), sizeof req);
    ok = ok && req.magic == DROCE_CM_MAGIC && req.cmd_len <= DROCE_CM_MAX_CMD &&
         req.optval_len <= DROCE_CM_MAX_OPTVAL && sizeof req + req.cmd_len + req.optval_len == msg.size();
    if (!ok || (req.op != DROCE_CM_HELLO && req.op != DROCE_CM_COMMAND)) {
      ++counters_.channels_faulted;
      return false;
    }
    droce_cm_reply reply{};
    reply.channel = ch;
    std::vector<uint8_t> resp;
    int fd_out = -1;
    if (req.op == DROCE_CM_HELLO && c.refused) {
      ++counters_.channels_refused;
      reply.status = -EMFILE;  // rdma_create_event_channel fails with it
      const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(&reply), sizeof reply);
      (void)core::send_message(c.sock.get(), bytes);
      return false;
    }
    if (c.refused) return false;
    if (req.op == DROCE_CM_HELLO) {
      fd_out = c.eventfd.get();
    } else {
      const std::span<const uint8_t> body(msg.data() + sizeof req, req.cmd_len);
      const std::span<const uint8_t> optval(msg.data() + sizeof req + req.cmd_len, req.optval_len);
      reply.status = ucma_.command(ch, body, optval, &resp, now_ns / 1'000'000);
      resp.resize(std::min<size_t>(resp.size(), DROCE_CM_MAX_RESPONSE));
      reply.len = static_cast<uint32_t>(resp.size());
    }
    std::vector<uint8_t> out(sizeof reply + resp.size());
    std::memcpy(out.data(), &reply, sizeof reply);
    if (!resp.empty()) std::memcpy(out.data() + sizeof reply, resp.data(), resp.size());
    const int fdv[1] = {fd_out};
    if (core::send_message(c.sock.get(), out, fd_out >= 0 ? std::span<const int>(fdv) : std::span<const int>{}) != 0)
      return false;
    pump(now_ns);
  }
}

void CmHost::close_channel(uint32_t ch, uint64_t now_ns) {
  auto it = channels_.find(ch);
  if (it == channels_.end()) return;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, it->second.sock.get(), nullptr);
  if (!it->second.refused) {
    auto p = per_process_.find(it->second.pid);
    if (p != per_process_.end() && --p->second == 0) per_process_.erase(p);
  }
  channels_.erase(it);
  ucma_.close_channel(ch, now_ns / 1'000'000);
  pump(now_ns);
}

void CmHost::pump(uint64_t now_ns) {
  const uint64_t now_ms = now_ns / 1'000'000;
  for (;;) {
    auto events = agent_.take_events();
    if (events.empty()) break;
    for (const cm::AgentEvent& e : events) ucma_.on_agent_event(e, now_ms);
  }
  for (auto [ch, delta] : ucma_.take_signals()) {
    auto it = channels_.find(ch);
    if (it == channels_.end()) continue;
    const int fd = it->second.eventfd.get();
    if (delta > 0) {
      const uint64_t v = static_cast<uint64_t>(delta);
      [[maybe_unused]] ssize_t w = ::write(fd, &v, sizeof v);  // non-blocking: never stalls droced
    } else {
      // Withdrawn events: take their counts back (the program may have taken some already).
      for (int i = 0; i < -delta; ++i) {
        uint64_t v;
        if (::read(fd, &v, sizeof v) != sizeof v) break;
      }
    }
  }
}

// ---- the ucma layer's network -----------------------------------------------------------------

std::optional<std::pair<net::IpAddr, uint32_t>> CmHost::Network::source_for(const net::IpAddr& dst) const {
  const int idx = gids_->find_for_destination(dst);
  if (idx < 0) return std::nullopt;
  return std::make_pair(gids_->at(uint32_t(idx))->gid, uint32_t(idx));
}

int CmHost::Network::gid_index(const net::IpAddr& ip) const {
  const int idx = gids_->find(ip);
  return idx < 0 ? -1 : idx;
}

void CmHost::Network::multicast_membership(const net::IpAddr& src, const net::IpAddr& group, bool joined) {
  const uint64_t now = core::monotonic_ns();
  std::lock_guard l(core_->group().neighbor_mutex());
  if (joined) core_->group().membership().join(src, group, now);
  else core_->group().membership().leave(src, group, now);
}

cm::UcmaNetwork::Resolve CmHost::Network::resolve(const net::IpAddr& src, const net::IpAddr& dst, uint64_t now_ms) {
  const int idx = gids_->find(src);
  if (idx < 0) return Resolve::failed;
  rocev2::AddressVector av = av_toward(*gids_, idx, src, dst);
  switch (core_->resolve(&av, now_ms * 1'000'000)) {
    case net::ResolveStatus::pending: return Resolve::pending;
    case net::ResolveStatus::failed: return Resolve::failed;
    case net::ResolveStatus::resolved: break;
  }
  return Resolve::resolved;
}

int64_t CmHost::ah_for(const net::IpAddr& peer, const net::IpAddr& local, uint64_t now_ns) {
  if (auto it = ahs_.find(peer); it != ahs_.end()) return it->second;
  // The GID the peer's MADs came to, or (none yet) the one a UD QP would send to it from.
  const bool known = local != net::IpAddr{};
  const int idx = known ? gids_->find(local) : gids_->find_for_destination(peer);
  if (!known && idx < 0) return -1;
  rocev2::AddressVector av = av_toward(*gids_, idx, local, peer);
  switch (core_->resolve(&av, now_ns)) {
    case net::ResolveStatus::pending: return 0;
    case net::ResolveStatus::failed: return -1;
    case net::ResolveStatus::resolved: break;
  }
  if (ahs_.size() >= kMaxPeers) {  // bounded: start over rather than grow without end
    for (const auto& [p, a] : ahs_) core_->engine().destroy_ah(a);
    ahs_.clear();
  }
  uint32_t ah = 0;
  if (core_->engine().create_ah(pd_, av, &ah) != 0) return -1;
  ahs_[peer] = ah;
  return ah;
}

}  // namespace droce::droced
