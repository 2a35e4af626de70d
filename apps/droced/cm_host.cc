#include "apps/droced/cm_host.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "rocev2/engine.h"

namespace droce::droced {

CmHost::CmHost(DeviceCore* core, const net::GidTable* gids, uint64_t node_guid, uint32_t seed)
    : core_(core), gids_(gids), agent_(node_guid, seed) {}

int CmHost::create(DeviceCore* core, const net::GidTable* gids, uint64_t node_guid, uint32_t seed,
                   std::unique_ptr<CmHost>* out) {
  std::unique_ptr<CmHost> h(new CmHost(core, gids, node_guid, seed));
  if (int rc = h->start(); rc != 0) return rc;
  *out = std::move(h);
  return 0;
}

int CmHost::start() {
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
  counters_.events_unconsumed += agent_.take_events().size();
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
  // The agent's earliest timer (a walk over its connections: once here, not on every loop pass),
  // or soon while MADs wait for a MAC.
  deadline_ns_ = UINT64_MAX;
  if (auto a = agent_.deadline_ms()) deadline_ns_ = *a * 1'000'000;
  if (!waiting_.empty()) deadline_ns_ = std::min(deadline_ns_, now_ns + 1'000'000);
  return did;
}

int64_t CmHost::ah_for(const net::IpAddr& peer, const net::IpAddr& local, uint64_t now_ns) {
  if (auto it = ahs_.find(peer); it != ahs_.end()) return it->second;
  rocev2::AddressVector av;
  av.dgid = peer;
  av.sgid = local;
  // The GID the peer's MADs came to, or (none yet) the one a UD QP would send to it from.
  const bool known = local != net::IpAddr{};
  const int idx = known ? gids_->find(local) : gids_->find_for_destination(peer);
  if (!known && idx < 0) return -1;
  if (idx >= 0) {
    av.sgid_index = uint8_t(idx);
    set_av_source(*gids_->at(uint32_t(idx)), &av);
  }
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
