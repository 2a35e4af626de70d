// XRC (IBA Annex A14): ibv_open_xrcd and ibv_close_xrcd, XRC SRQs (ibv_create_srq_ex), XRC
// receive QPs (ibv_create_qp_ex of IBV_QPT_XRC_RECV) and ibv_open_qp. XRC send QPs are ordinary
// create_qp requests of qp_type 9 (session_qp.cc).
//
// Domains and receive QPs are the worker's (Device::xrc), so two clients of this worker that open
// the same file share a domain, and one may open the other's receive QP, as ibv_open_xrcd(3) and
// ibv_open_qp(3) have it across processes. A client's XRC SRQs and receive QPs need its own open
// of their domain; closing its last open while it still has them is -EBUSY (the kernel's rule).

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>

#include "droced/session_objects.h"

namespace droce::droced {

using namespace abi::ctl;

int Session::on_open_xrcd(const OpenXrcdRequest& q, std::vector<core::Fd>& fds, uint32_t* id) {
  XrcRegistry& x = dev_->xrc;
  if ((q.oflags & ~uint32_t(O_CREAT | O_EXCL)) != 0 || (q.flags & ~kXrcdFile) != 0) return -EINVAL;
  const bool file = (q.flags & kXrcdFile) != 0;
  if (file != (fds.size() == 1)) return -EINVAL;
  struct stat st{};
  if (file && ::fstat(fds[0].get(), &st) != 0) return -errno;
  uint32_t found = 0;
  if (file) {
    for (const auto& [d, dom] : x.domains)
      if (dom.file && dom.st_dev == uint64_t(st.st_dev) && dom.st_ino == uint64_t(st.st_ino)) found = d;
    if (found != 0 && (q.oflags & O_EXCL)) return -EINVAL;
    if (found == 0 && !(q.oflags & O_CREAT)) return -EAGAIN;  // as the kernel: no domain, no O_CREAT
  }
  if (found == 0) {
    if (x.domains.size() >= XrcRegistry::kMaxDomains) return -ENOMEM;
    do {  // ids are nonzero (the engine's 0 is "no domain") and not in use
      found = x.next_domain++;
      if (x.next_domain == 0) x.next_domain = 1;
    } while (found == 0 || x.domains.count(found) != 0);
    XrcRegistry::Domain& d = x.domains[found];
    d.file = file;
    d.st_dev = file ? uint64_t(st.st_dev) : 0;
    d.st_ino = file ? uint64_t(st.st_ino) : 0;
  }
  ++x.domains[found].opens;
  ++xrcds_[found];
  *id = found;
  return 0;
}

int Session::close_xrcd(uint32_t id) {
  auto it = xrcds_.find(id);
  if (it == xrcds_.end()) return -EINVAL;
  if (it->second == 1) {
    // The last open of this client: none of its XRC SRQs or receive QPs may be left.
    for (const auto& [sid, s] : srqs_)
      if (s->xrcd == id) return -EBUSY;
    for (uint32_t qpn : xrc_qps_)
      if (dev_->xrc.targets.at(qpn).xrcd == id) return -EBUSY;
  }
  if (--it->second == 0) xrcds_.erase(it);
  auto d = dev_->xrc.domains.find(id);
  if (d != dev_->xrc.domains.end() && --d->second.opens == 0) dev_->xrc.domains.erase(d);
  return 0;
}

int Session::on_create_xrc_srq(const CreateXrcSrqRequest& q, CreateSrqReply* out) {
  if (xrcds_.count(q.xrcd) == 0) return -EINVAL;
  auto cq = cqs_.find(q.cq);
  if (cq == cqs_.end()) return -EINVAL;
  return on_create_srq(q.srq, out, q.xrcd, cq->second.get());
}

int Session::on_xrc_qp(const XrcQpRequest& q, bool open, uint32_t* qpn) {
  if (xrcds_.count(q.xrcd) == 0 || q.qp_type != uint32_t(rocev2::QpType::xrc_recv)) return -EINVAL;
  XrcRegistry& x = dev_->xrc;
  if (open) {
    auto t = x.targets.find(q.qpn);
    if (t == x.targets.end() || t->second.xrcd != q.xrcd) return -EINVAL;
    if (xrc_qps_.count(q.qpn) != 0) return -EINVAL;  // one hold per client (the provider's QP object)
    t->second.holders.push_back(this);
    xrc_qps_.insert(q.qpn);
    *qpn = q.qpn;
    return 0;
  }
  if (qps_.size() + xrc_qps_.size() >= dev_->session_limits.max_qps) return -ENOMEM;
  rocev2::QpInit init;
  init.type = rocev2::QpType::xrc_recv;
  init.xrcd = q.xrcd;
  if (int rc = dev_->core->engine().create_qp(init, qpn); rc != 0) return rc;
  x.targets[*qpn] = {q.xrcd, {this}};
  xrc_qps_.insert(*qpn);
  dev_->qp_owner[*qpn] = this;  // its async events; the next holder's when this one lets go
  return 0;
}

int Session::close_xrc_qp(uint32_t qpn) {
  XrcRegistry& x = dev_->xrc;
  auto t = x.targets.find(qpn);
  if (t == x.targets.end() || xrc_qps_.erase(qpn) == 0) return -EINVAL;
  std::erase(t->second.holders, this);
  if (!t->second.holders.empty()) {
    if (dev_->qp_owner[qpn] == this) dev_->qp_owner[qpn] = t->second.holders.front();
    return 0;
  }
  // The last hold: the QP goes (the kernel's __ib_destroy_shared_qp).
  rocev2::Engine& e = dev_->core->engine();
  rocev2::QpAttr a;
  a.qp_state = rocev2::QpState::err;
  (void)e.modify_qp(qpn, a, rocev2::kAttrState);
  (void)e.destroy_qp(qpn);
  x.targets.erase(t);
  dev_->qp_owner.erase(qpn);
  return 0;
}

void Session::refill_xrc_recv(uint32_t qpn) {
  if (!holds_xrc_qp(qpn)) return;
  const rocev2::Qp* q = dev_->core->engine().qp(qpn);
  if (q == nullptr || q->srq == nullptr) return;
  auto owner = dev_->srq_owner.find(q->srq->id());
  if (owner != dev_->srq_owner.end()) owner->second->refill_srq(q->srq->id());
}

void Session::release_xrc_for_completion(uint32_t qpn) {
  if (dev_->xrc.targets.count(qpn) == 0) return;
  const rocev2::Qp* q = dev_->core->engine().qp(qpn);
  if (q == nullptr || q->srq == nullptr) return;
  auto it = srqs_.find(q->srq->id());
  if (it == srqs_.end() || it->second->srq != q->srq) return;
  SharedQueue& rq = it->second->rq;
  release_queue(rq.ring, &rq.ahead, &rq.mark, &rq.refused, q->srq->consumed());
}

void Session::refill_srq(uint32_t id) {
  if (!hello_done_ || closed_ || draining_) return;
  auto it = srqs_.find(id);
  if (it == srqs_.end()) return;
  refilling_ = true;
  drain_srq(*it->second);
  refilling_ = false;
}

void Session::release_xrc() {
  for (uint32_t qpn : std::vector<uint32_t>(xrc_qps_.begin(), xrc_qps_.end())) (void)close_xrc_qp(qpn);
  for (const auto& [id, n] : xrcds_) {
    auto d = dev_->xrc.domains.find(id);
    if (d != dev_->xrc.domains.end() && (d->second.opens -= std::min(n, d->second.opens)) == 0)
      dev_->xrc.domains.erase(d);
  }
  xrcds_.clear();
}

template <>
void Session::serve<MsgType::open_xrcd>(const Control& c, const OpenXrcdRequest& q) {
  IdReply r{};
  const int rc = on_open_xrcd(q, c.fds, &r.id);
  reply(c.h, rc, &r, sizeof r);
}

template <>
void Session::serve<MsgType::close_xrcd>(const Control& c, const IdRequest& q) {
  reply(c.h, close_xrcd(q.id));
}

template <>
void Session::serve<MsgType::create_xrc_srq>(const Control& c, const CreateXrcSrqRequest& q) {
  CreateSrqReply r{};
  const int rc = on_create_xrc_srq(q, &r);
  const int fd = rc == 0 ? srqs_.at(r.srq_id)->region.fd() : -1;
  reply(c.h, rc, &r, sizeof r, std::span<const int>(&fd, rc == 0 ? 1 : 0));
}

template <>
void Session::serve<MsgType::create_xrc_qp>(const Control& c, const XrcQpRequest& q) {
  XrcQpReply r{};
  reply(c.h, on_xrc_qp(q, false, &r.qpn), &r, sizeof r);
}

template <>
void Session::serve<MsgType::open_qp>(const Control& c, const XrcQpRequest& q) {
  XrcQpReply r{};
  reply(c.h, on_xrc_qp(q, true, &r.qpn), &r, sizeof r);
}

std::span<const Session::ControlEntry> Session::xrc_controls() {
  static constexpr ControlEntry kEntries[] = {
      control<MsgType::open_xrcd, OpenXrcdRequest>(),
      control<MsgType::close_xrcd, IdRequest>(),
      control<MsgType::create_xrc_srq, CreateXrcSrqRequest>(),
      control<MsgType::create_xrc_qp, XrcQpRequest>(),
      control<MsgType::open_qp, XrcQpRequest>(),
  };
  return kEntries;
}

}  // namespace droce::droced
