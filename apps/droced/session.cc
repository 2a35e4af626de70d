#include "apps/droced/session.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "apps/droced/session_objects.h"
#include "core/capabilities.h"
#include "core/log.h"

namespace droce::droced {

using namespace core::ctl;
namespace abi = core::abi;

namespace {

constexpr uint32_t kDrainBurst = 64;

uint32_t take_flag(uint32_t* p) { return std::atomic_ref<uint32_t>(*p).exchange(0); }

// Clears a doorbell flag, then a full fence, so what is read next (a producer
// index) is read after the clear: the client publishes, fences, then tests the
// flag (Context::ring_doorbell), and one of the two sides sees the other. The
// fence orders the store; a seq_cst store would add a second locked
// instruction on x86 (an xchg) to every drain.
void clear_flag_fenced(uint32_t* p) {
  std::atomic_ref<uint32_t>(*p).store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

}  // namespace

// ---- Life ---------------------------------------------------------------------

Session::Session(Device* dev, core::Fd socket, uint32_t id) : dev_(dev), sock_(std::move(socket)), id_(id) {
  core::PeerCredentials cred;
  if (core::peer_credentials(sock_.get(), &cred) == 0) {
    pid_ = cred.pid;
    // As Linux (6.4 on) asks of ibv_modify_qp: CAP_NET_RAW for a controlled Q_Key.
    privileged_ = core::process_has_capability(cred.pid, core::kCapNetRaw);
  }
}

Session::~Session() { teardown(); }

void Session::teardown() {
  rocev2::Engine& e = dev_->core->engine();
  // QPs to error first: the peers see what they would see of a dead host,
  // and nothing of this client is touched by the engine afterwards.
  for (auto& [qpn, q] : qps_) {
    rocev2::QpAttr a;
    a.qp_state = rocev2::QpState::err;
    (void)e.modify_qp(qpn, a, rocev2::kAttrState);
    (void)e.destroy_qp(qpn);
    dev_->qp_owner.erase(qpn);
  }
  qps_.clear();
  active_qps_.clear();
  for (auto& [id, s] : srqs_) {
    (void)e.destroy_srq(s->srq);
    dev_->srq_owner.erase(id);
  }
  srqs_.clear();
  active_srqs_.clear();
  for (uint32_t ah : ahs_) (void)e.destroy_ah(ah);
  ahs_.clear();
  for (auto& [lkey, m] : mrs_) (void)e.dereg_mr(lkey);
  mrs_.clear();  // unmaps the client's memory
  for (auto& [id, c] : cqs_) {
    // The engine's CQ points at its sink: never free one the engine keeps.
    if (e.destroy_cq(c->cq) != 0) (void)c.release();
    dev_->cq_owner.erase(id);
  }
  cqs_.clear();
  for (uint32_t pd : pds_) (void)e.dealloc_pd(pd);
  pds_.clear();
}

void Session::fault(const char* why) {
  if (!closed_) {
    DROCE_LOG(WARNING, app, "client %u (pid %d, %s): %s; disconnecting it", id_, int(pid_), program_.c_str(), why);
    closed_ = true;
    faulted_ = true;
    close_reason_ = why;
  }
}

void Session::mark_fatal() {
  rocev2::Engine& e = dev_->core->engine();
  for (auto& [qpn, q] : qps_) {
    rocev2::QpAttr a;
    a.qp_state = rocev2::QpState::err;
    (void)e.modify_qp(qpn, a, rocev2::kAttrState);
  }
  if (page_ != nullptr) std::atomic_ref<uint32_t>(page_->device_state).store(abi::kDeviceFatal);
  push_event(8 /* IBV_EVENT_DEVICE_FATAL */, 0);
}

std::vector<uint32_t> Session::qpns() const {
  std::vector<uint32_t> v;
  for (const auto& [qpn, q] : qps_) v.push_back(qpn);
  std::sort(v.begin(), v.end());
  return v;
}

// ---- Control ------------------------------------------------------------------

void Session::on_readable(uint64_t now_ns) {
  for (int i = 0; i < 16 && !closed_; ++i) {
    std::vector<uint8_t> msg;
    std::vector<core::Fd> fds;
    const ssize_t n = core::receive_message(sock_.get(), &msg, kMaxMessage, &fds);
    if (n == -EAGAIN || n == -EWOULDBLOCK) return;
    if (n == 0) {
      closed_ = true;
      close_reason_ = "closed its socket";
      return;
    }
    if (n < 0) {
      fault("socket error or oversized message");
      return;
    }
    handle(msg, fds, now_ns);
  }
}

void Session::reply(const CtlHeader& h, int status, const void* body, size_t len, std::span<const int> fds) {
  // A failed request's reply carries only its status.
  const std::span<const uint8_t> bytes(static_cast<const uint8_t*>(body), status == 0 ? len : 0);
  const auto out = encode_raw(static_cast<MsgType>(h.type), h.seq, bytes, {}, true, status);
  if (status != 0) ++counters_.errors;
  if (core::send_message(sock_.get(), out, status == 0 ? fds : std::span<const int>{}) != 0)
    fault("cannot send a reply");
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
  const auto type = static_cast<MsgType>(h.type);
  if (!hello_done_ && type != MsgType::hello && type != MsgType::stats) {
    fault("a request before hello");
    return;
  }
  if (pending_.active) {  // one request at a time; the client library waits for each reply
    reply(h, -EBUSY);
    return;
  }
  rocev2::Engine& e = dev_->core->engine();
  switch (type) {
    case MsgType::hello:
      if (int rc = on_hello(msg, h); rc != 0) reply(h, rc);
      return;
    case MsgType::query_device: {
      QueryDeviceReply r{};
      r.node_guid = r.sys_image_guid = dev_->node_guid;
      r.max_mr_size = PeerMemory::kMaxBytes;
      r.page_size_cap = 0xfffff000;
      r.vendor_id = 0xffffff;  // no IEEE OUI: a software device, as rxe
      r.vendor_part_id = 0;
      r.hw_ver = 0;
      r.max_qp = std::min(dev_->max_qps, dev_->session_limits.max_qps);
      r.max_qp_wr = dev_->limits.max_qp_wr;
      r.max_sge = dev_->limits.max_sge;
      r.max_cq = dev_->session_limits.max_cqs;
      r.max_cqe = dev_->limits.max_cqe;
      r.max_mr = dev_->session_limits.max_mrs;
      r.max_pd = dev_->session_limits.max_pds;
      r.max_qp_rd_atom = dev_->limits.max_qp_rd_atom;
      r.max_qp_init_rd_atom = dev_->limits.max_qp_init_rd_atom;
      r.max_srq = dev_->session_limits.max_srqs;
      r.max_srq_wr = dev_->limits.max_qp_wr;
      r.max_srq_sge = dev_->limits.max_sge;
      r.max_ah = dev_->session_limits.max_ahs;
      r.max_inline_data = dev_->limits.max_inline_data;
      r.atomic_cap = 1;  // IBV_ATOMIC_HCA: atomic with respect to this device's own operations
      r.phys_port_cnt = 1;
      r.max_pkeys = dev_->limits.max_pkeys;
      r.max_mcast_grp = dev_->limits.max_mcast_grp;
      r.max_mcast_qp_attach = dev_->limits.max_mcast_qp_attach;
      r.max_total_mcast_qp_attach = dev_->limits.max_total_mcast_qp_attach;
      std::snprintf(r.fw_ver, sizeof r.fw_ver, "%s", kDaemonVersion);
      reply(h, 0, &r, sizeof r);
      return;
    }
    case MsgType::query_port: {
      IdRequest q;
      if (decode_body(msg, &q) != 0 || q.id != 1) {
        reply(h, -EINVAL);
        return;
      }
      QueryPortReply r{};
      const net::LinkState link = dev_->port->link();
      r.state = link.up ? 4 /* IBV_PORT_ACTIVE */ : 1 /* IBV_PORT_DOWN */;
      r.phys_state = link.up ? 5 : 3;
      r.max_mtu = static_cast<uint32_t>(dev_->limits.max_mtu);
      const uint16_t mtu = dev_->port->wire_mtu();
      r.netdev_mtu = mtu;
      r.active_mtu = static_cast<uint32_t>(rocev2::path_mtu_for(mtu));
      r.gid_tbl_len = dev_->gids->capacity();
      r.port_cap_flags = (1u << 16) | (1u << 26);  // IBV_PORT_CM_SUP, IBV_PORT_IP_BASED_GIDS
      r.max_msg_sz = 1u << 31;
      r.pkey_tbl_len = dev_->limits.max_pkeys;
      r.link_layer = 2;  // IBV_LINK_LAYER_ETHERNET
      r.active_width = 1;
      r.active_speed = 1;
      r.link_speed_mbps = link.speed_mbps;
      reply(h, 0, &r, sizeof r);
      return;
    }
    case MsgType::query_gid: {
      QueryGidRequest q;
      if (decode_body(msg, &q) != 0 || q.port != 1) {
        reply(h, -EINVAL);
        return;
      }
      const net::GidEntry* g = dev_->gids->at(q.index);
      if (g == nullptr) {
        reply(h, q.index < dev_->gids->capacity() ? -ENODATA : -EINVAL);
        return;
      }
      QueryGidReply r{};
      std::memcpy(r.gid, g->gid.data(), 16);
      r.type = g->type == net::GidType::roce_v2 ? 1 : 0;
      reply(h, 0, &r, sizeof r);
      return;
    }
    case MsgType::alloc_pd: {
      if (pds_.size() >= dev_->session_limits.max_pds) {
        reply(h, -ENOMEM);
        return;
      }
      IdReply r{};
      int rc = e.alloc_pd(&r.id);
      if (rc == 0) pds_.push_back(r.id);
      reply(h, rc, &r, sizeof r);
      return;
    }
    case MsgType::dealloc_pd: {
      IdRequest q;
      auto it = decode_body(msg, &q) == 0 ? std::find(pds_.begin(), pds_.end(), q.id) : pds_.end();
      if (it == pds_.end()) {
        reply(h, -EINVAL);
        return;
      }
      int rc = e.dealloc_pd(q.id);
      if (rc == 0) pds_.erase(it);
      reply(h, rc);
      return;
    }
    case MsgType::reg_mr: {
      RegMrReply r{};
      int rc = on_reg_mr(msg, fds, &r);
      reply(h, rc, &r, sizeof r);
      return;
    }
    case MsgType::dereg_mr: {
      IdRequest q;
      auto it = decode_body(msg, &q) == 0 ? mrs_.find(q.id) : mrs_.end();
      if (it == mrs_.end()) {
        reply(h, -EINVAL);
        return;
      }
      int rc = e.dereg_mr(q.id);
      if (rc == 0) mrs_.erase(it);
      reply(h, rc);
      return;
    }
    case MsgType::create_cq: {
      CreateCqRequest q;
      CreateCqReply r{};
      std::unique_ptr<SharedCq> made;
      int rc = decode_body(msg, &q, kCreateCqRequestV0) == 0 ? on_create_cq(q, &r, &made) : -EINVAL;
      if (rc != 0) {
        reply(h, rc);
        return;
      }
      const int out_fds[2] = {made->region.fd(), made->event_fd.get()};
      const uint32_t id = r.cq_id;
      dev_->cq_owner[id] = this;
      cqs_[id] = std::move(made);
      reply(h, 0, &r, sizeof r, out_fds);
      return;
    }
    case MsgType::destroy_cq: {
      IdRequest q;
      DestroyCqReply r{};
      const int rc = decode_body(msg, &q) == 0 ? destroy_cq(q.id, &r.comp_events_written) : -EINVAL;
      reply(h, rc, &r, sizeof r);
      return;
    }
    case MsgType::create_srq: {
      CreateSrqRequest q;
      CreateSrqReply r{};
      int rc = decode_body(msg, &q) == 0 ? on_create_srq(q, &r) : -EINVAL;
      int fd = rc == 0 ? srqs_.at(r.srq_id)->region.fd() : -1;
      reply(h, rc, &r, sizeof r, std::span<const int>(&fd, rc == 0 ? 1 : 0));
      return;
    }
    case MsgType::modify_srq: {
      ModifySrqRequest q;
      auto it = decode_body(msg, &q, 16) == 0 ? srqs_.find(q.srq_id) : srqs_.end();
      if (it == srqs_.end() || (q.mask & ~3u) != 0) {
        reply(h, -EINVAL);
        return;
      }
      // Resizing is not supported (as on many HCAs: IBV_DEVICE_SRQ_RESIZE unset).
      if (q.mask & 1u) {
        reply(h, -EINVAL);
        return;
      }
      int rc = (q.mask & 2u) ? it->second->srq->set_limit(q.srq_limit) : 0;
      reply(h, rc);
      return;
    }
    case MsgType::query_srq: {
      IdRequest q;
      auto it = decode_body(msg, &q) == 0 ? srqs_.find(q.id) : srqs_.end();
      if (it == srqs_.end()) {
        reply(h, -EINVAL);
        return;
      }
      ModifySrqRequest r{};
      r.srq_id = q.id;
      r.max_wr = it->second->srq->depth();
      r.max_sge = it->second->srq->max_sge();
      r.srq_limit = it->second->srq->limit();
      reply(h, 0, &r, sizeof r);
      return;
    }
    case MsgType::destroy_srq: {
      IdRequest q;
      reply(h, decode_body(msg, &q) == 0 ? destroy_srq(q.id) : -EINVAL);
      return;
    }
    case MsgType::create_qp: {
      CreateQpRequest q;
      CreateQpReply r{};
      int rc = decode_body(msg, &q) == 0 ? on_create_qp(q, &r) : -EINVAL;
      int fd = rc == 0 ? qps_.at(r.qpn)->region.fd() : -1;
      reply(h, rc, &r, sizeof r, std::span<const int>(&fd, rc == 0 ? 1 : 0));
      return;
    }
    case MsgType::modify_qp: {
      ModifyQpRequest q;
      if (decode_body(msg, &q) != 0) {
        reply(h, -EINVAL);
        return;
      }
      const int rc = on_modify_qp(q, now_ns);
      if (rc < 0)
        DROCE_LOG(DEBUG, app, "client %u: modify_qp %u (mask 0x%x): %s", id_, q.qpn, unsigned(q.mask),
                  std::strerror(-rc));
      if (rc == 1) {
        pending_.active = true;
        pending_.header = h;
        pending_.modify = q;
        return;
      }
      reply(h, rc);
      return;
    }
    case MsgType::query_qp: {
      IdRequest q;
      WireQpAttr r{};
      int rc = decode_body(msg, &q) == 0 ? on_query_qp(q.id, &r) : -EINVAL;
      reply(h, rc, &r, sizeof r);
      return;
    }
    case MsgType::destroy_qp: {
      IdRequest q;
      reply(h, decode_body(msg, &q) == 0 ? destroy_qp(q.id) : -EINVAL);
      return;
    }
    case MsgType::create_ah: {
      CreateAhRequest q;
      IdReply r{};
      const int rc = decode_body(msg, &q) == 0 ? on_create_ah(q, now_ns, &r.id) : -EINVAL;
      if (rc == 1) {
        pending_.active = true;
        pending_.header = h;
        pending_.create_ah = q;
        return;
      }
      reply(h, rc, &r, sizeof r);
      return;
    }
    case MsgType::destroy_ah: {
      IdRequest q;
      auto it = decode_body(msg, &q) == 0 ? std::find(ahs_.begin(), ahs_.end(), q.id) : ahs_.end();
      if (it == ahs_.end()) {
        reply(h, -EINVAL);
        return;
      }
      int rc = e.destroy_ah(q.id);
      if (rc == 0) ahs_.erase(it);
      reply(h, rc);
      return;
    }
    case MsgType::rereg_mr: {
      RegMrReply r{};
      int rc = on_rereg_mr(msg, fds, &r);
      reply(h, rc, &r, sizeof r);
      return;
    }
    case MsgType::resize_cq: {
      ResizeCqRequest q;
      ResizeCqReply r{};
      const int rc = decode_body(msg, &q) == 0 ? on_resize_cq(q, &r) : -EINVAL;
      const int fd = rc == 0 ? cqs_.at(q.cq_id)->region.fd() : -1;
      reply(h, rc, &r, sizeof r, std::span<const int>(&fd, rc == 0 ? 1 : 0));
      return;
    }
    case MsgType::register_channel: {
      IdReply r{};
      const int rc = on_register_channel(fds, &r.id);
      reply(h, rc, &r, sizeof r);
      return;
    }
    case MsgType::stats: {
      // The text goes in a sealed memfd: it may be far larger than a message.
      const std::string text = dev_->render_stats ? dev_->render_stats(dev_->render_arg) : std::string("{}");
      core::ShmRegion r;
      if (int rc = core::ShmRegion::create("droce-stats", text.size() + 1, {}, &r); rc != 0) {
        reply(h, rc);
        return;
      }
      std::memcpy(r.data(), text.data(), text.size());
      StatsReply s{text.size()};
      const int fd = r.fd();
      reply(h, 0, &s, sizeof s, std::span<const int>(&fd, 1));
      return;
    }
    default:
      break;
  }
  if (const Route* r = route_for(type)) {
    r->serve(*this, h, msg);
    return;
  }
  reply(h, -EOPNOTSUPP);
}

void Session::poll_pending(uint64_t now_ns) {
  if (!pending_.active) return;
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

int Session::on_hello(const std::vector<uint8_t>& msg, const CtlHeader& h) {
  if (hello_done_) return -EALREADY;
  HelloRequest q;
  if (decode_body(msg, &q) != 0) return -EINVAL;
  q.program[sizeof q.program - 1] = '\0';
  program_ = q.program;

  // The context region: the page, the doorbell ring, the event ring.
  const SessionLimits& lim = dev_->session_limits;
  const uint32_t db_entries = pow2_at_least(2 * lim.max_qps + lim.max_srqs + lim.max_cqs);
  const uint32_t ev_entries = pow2_at_least(lim.event_entries);
  const core::ShmRingGeometry db{db_entries, sizeof(abi::Doorbell)};
  const core::ShmRingGeometry ev{ev_entries, sizeof(abi::EventEntry)};
  const size_t db_off = 4096;
  const size_t ev_off = align64(db_off + core::shm_ring_bytes(db));
  const size_t total = ev_off + core::shm_ring_bytes(ev);
  if (int rc = make_region("droce-context", total, &context_); rc != 0) return rc;
  auto* base = context_.data();
  if (int rc = core::shm_ring_format({base + db_off, core::shm_ring_bytes(db)}, db); rc != 0) return rc;
  if (int rc = core::shm_ring_format({base + ev_off, core::shm_ring_bytes(ev)}, ev); rc != 0) return rc;
  if (int rc = core::ShmRingConsumer::attach({base + db_off, core::shm_ring_bytes(db)}, db, &doorbells_); rc != 0)
    return rc;
  if (int rc = core::ShmRingProducer::attach({base + ev_off, core::shm_ring_bytes(ev)}, ev, &events_); rc != 0)
    return rc;
  page_ = reinterpret_cast<abi::ContextPage*>(base);
  page_->magic = abi::kContextMagic;
  page_->version = abi::kContextVersion;
  page_->device_state = abi::kDeviceRunning;
  async_fd_ = core::Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!async_fd_.valid()) return -errno;

  HelloReply r{};
  r.node_guid = dev_->node_guid;
  r.context_id = id_;
  r.phys_port_cnt = 1;
  std::snprintf(r.device_name, sizeof r.device_name, "%s", dev_->name.c_str());
  std::snprintf(r.daemon_version, sizeof r.daemon_version, "%s", kDaemonVersion);
  r.context_bytes = context_.size();
  r.doorbell_offset = db_off;
  r.doorbell_entries = db_entries;
  r.event_offset = static_cast<uint32_t>(ev_off);
  r.event_entries = ev_entries;
  hello_done_ = true;
  const int out[3] = {context_.fd(), async_fd_.get(), dev_->wake_fd};
  reply(h, 0, &r, sizeof r, out);
  DROCE_LOG(INFO, app, "client %u: pid %d (%s) connected", id_, int(pid_), program_.c_str());
  return 0;
}

namespace {

// The MrSegment tail after a reg_mr / rereg_mr body (`body` bytes), with one
// descriptor per segment, mapped contiguously: -EINVAL when the count, the
// descriptors, the message length or page_va's alignment do not agree.
int map_segments(const std::vector<uint8_t>& msg, size_t body, uint32_t count, uint64_t page_va,
                 const std::vector<core::Fd>& fds, PeerMemory* out) {
  const size_t tail = sizeof(CtlHeader) + body;
  if (count == 0 || count > kMaxMrSegments || fds.size() != count ||
      msg.size() != tail + count * sizeof(MrSegment) || page_va % core::page_size() != 0)
    return -EINVAL;
  MrSegment segs[kMaxMrSegments];
  std::memcpy(segs, msg.data() + tail, count * sizeof(MrSegment));
  int raw[kMaxMrSegments];
  for (uint32_t i = 0; i < count; ++i) raw[i] = fds[i].get();
  return PeerMemory::map({segs, count}, {raw, count}, out);
}

// [va, va + length) lies inside the mapping of `size` bytes that starts at page_va.
bool inside(uint64_t va, uint64_t length, uint64_t page_va, size_t size) {
  return length != 0 && va >= page_va && va - page_va <= size && length <= size - (va - page_va);
}

}  // namespace

int Session::on_reg_mr(const std::vector<uint8_t>& msg, std::vector<core::Fd>& fds, RegMrReply* out) {
  RegMrRequest q;
  if (decode_body(msg, &q) != 0) return -EINVAL;
  if (std::find(pds_.begin(), pds_.end(), q.pd) == pds_.end()) return -EINVAL;
  if (mrs_.size() >= dev_->session_limits.max_mrs) return -ENOMEM;
  if (q.va < q.page_va || q.length == 0) return -EINVAL;
  auto m = std::make_unique<MrEntry>();
  if (int rc = map_segments(msg, sizeof q, q.segment_count, q.page_va, fds, &m->memory); rc != 0) return rc;
  // The registered range must lie inside the pages the client sent.
  if (!inside(q.va, q.length, q.page_va, m->memory.size())) return -EINVAL;
  rocev2::Mr* mr = nullptr;
  int rc = dev_->core->engine().reg_mr(q.pd, q.va, q.length, m->memory.data() + (q.va - q.page_va), q.access, &mr);
  if (rc != 0) return rc;
  m->lkey = mr->lkey;
  m->rkey = mr->rkey;
  m->page_va = q.page_va;
  out->lkey = mr->lkey;
  out->rkey = mr->rkey;
  mrs_[mr->lkey] = std::move(m);
  return 0;
}

int Session::on_rereg_mr(const std::vector<uint8_t>& msg, std::vector<core::Fd>& fds, RegMrReply* out) {
  ReregMrRequest q;
  if (decode_body(msg, &q) != 0) return -EINVAL;
  auto it = mrs_.find(q.lkey);
  if (it == mrs_.end()) return -EINVAL;
  if (std::find(pds_.begin(), pds_.end(), q.pd) == pds_.end()) return -EINVAL;
  MrEntry& m = *it->second;
  const bool translation = (q.flags & kReregTranslation) != 0;
  PeerMemory fresh;
  const PeerMemory* mem = &m.memory;
  uint64_t page_va = m.page_va;
  if (translation) {
    if (int rc = map_segments(msg, sizeof q, q.segment_count, q.page_va, fds, &fresh); rc != 0) return rc;
    mem = &fresh;
    page_va = q.page_va;
  } else if (q.segment_count != 0 || !fds.empty() || msg.size() != sizeof(CtlHeader) + sizeof q) {
    return -EINVAL;
  }
  // The range must lie inside the pages the region maps.
  if (!inside(q.va, q.length, page_va, mem->size())) return -EINVAL;
  const int rc = dev_->core->engine().rereg_mr(q.lkey, q.pd, q.va, q.length, mem->data() + (q.va - page_va), q.access);
  if (rc != 0) return rc;
  if (translation) {
    m.memory = std::move(fresh);  // the engine reads the new mapping from now on; the old one goes
    m.page_va = q.page_va;
  }
  out->lkey = m.lkey;
  out->rkey = m.rkey;
  return 0;
}

int Session::on_create_cq(const CreateCqRequest& q, CreateCqReply* out, std::unique_ptr<SharedCq>* made) {
  if (cqs_.size() >= dev_->session_limits.max_cqs) return -ENOMEM;
  if (q.cqe == 0 || q.cqe > dev_->limits.max_cqe) return -EINVAL;
  auto c = std::make_unique<SharedCq>();
  const uint32_t entries = pow2_at_least(q.cqe);
  const core::ShmRingGeometry g{entries, sizeof(abi::Cqe)};
  const size_t ring_off = sizeof(abi::QueueDoorbellBlock);
  if (int rc = make_region("droce-cq", ring_off + core::shm_ring_bytes(g), &c->region); rc != 0) return rc;
  std::span<std::byte> ring{c->region.data() + ring_off, core::shm_ring_bytes(g)};
  if (int rc = core::shm_ring_format(ring, g); rc != 0) return rc;
  if (int rc = core::ShmRingProducer::attach(ring, g, &c->ring); rc != 0) return rc;
  c->block = reinterpret_cast<abi::QueueDoorbellBlock*>(c->region.data());
  c->event_fd = core::Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!c->event_fd.valid()) return -errno;
  if (q.channel != 0) {
    auto ch = channels_.find(q.channel);
    if (ch == channels_.end()) return -EINVAL;
    c->channel = ch->second;
    c->user_handle = q.user_handle;
  }
  // The engine's Cq keeps no ring of its own with a sink: it checks the size asked for (a
  // max_cqe CQ rounds past max_cqe here, as on mlx5).
  if (int rc = dev_->core->engine().create_cq(q.cqe, &c->cq, c.get()); rc != 0) return rc;
  c->session = this;
  out->cq_id = c->cq->id();
  out->cqe = entries;
  out->region_bytes = c->region.size();
  *made = std::move(c);
  return 0;
}

int Session::on_register_channel(std::vector<core::Fd>& fds, uint32_t* id) {
  if (fds.size() != 1) return -EINVAL;
  if (channels_.size() >= kMaxChannelsPerSession) return -ENOMEM;
  struct stat st;
  const int fl = ::fcntl(fds[0].get(), F_GETFL);
  if (::fstat(fds[0].get(), &st) != 0 || !S_ISFIFO(st.st_mode) || fl < 0 || (fl & O_ACCMODE) != O_WRONLY)
    return -EINVAL;
  // The client gave its own copy up (it closes it): this description is ours.
  if (!(fl & O_NONBLOCK) && ::fcntl(fds[0].get(), F_SETFL, fl | O_NONBLOCK) != 0) return -errno;
  const uint32_t cid = next_channel_id_++;
  channels_[cid] = std::make_shared<core::Fd>(std::move(fds[0]));
  *id = cid;
  return 0;
}

int Session::on_resize_cq(const ResizeCqRequest& q, ResizeCqReply* out) {
  auto it = cqs_.find(q.cq_id);
  if (it == cqs_.end()) return -EINVAL;
  if (q.cqe == 0 || q.cqe > dev_->limits.max_cqe) return -EINVAL;
  SharedCq& c = *it->second;
  // What the client has not polled: size() reads its consumer index and
  // accepts it only between the last one seen and the producer index.
  const uint32_t unpolled = c.ring.size();
  if (c.ring.corrupted()) return -EIO;
  // Against the size asked for, not the rounded one (rxe's rule): whether
  // it fails does not depend on droced's rounding.
  if (q.cqe < unpolled) return -EINVAL;
  const uint32_t first = c.ring.index() - unpolled;

  // The new ring continues the old one's indexes (formatted at `first`), so
  // cq_arm_index, solicited_end and the client's discards keep their meaning.
  const core::ShmRingGeometry g{pow2_at_least(q.cqe), sizeof(abi::Cqe)};
  const size_t ring_off = sizeof(abi::QueueDoorbellBlock);
  core::ShmRegion region;
  if (int rc = make_region("droce-cq", ring_off + core::shm_ring_bytes(g), &region); rc != 0) return rc;
  std::span<std::byte> mem{region.data() + ring_off, core::shm_ring_bytes(g)};
  core::ShmRingProducer ring;
  if (int rc = core::shm_ring_format(mem, g, first); rc != 0) return rc;
  if (int rc = core::ShmRingProducer::attach(mem, g, &ring); rc != 0) return rc;
  uint32_t got = 0;
  if (ring.reserve(unpolled, &got) != core::ShmRingStatus::ok) return -EINVAL;  // not with cqe >= unpolled
  // Old entries by droced's own geometry: no index leads outside the old
  // ring. What the client wrote over them is its loss.
  const std::byte* old_entries = c.region.data() + ring_off + core::kShmRingHeaderSize;
  const uint32_t old_mask = c.ring.capacity() - 1;
  for (uint32_t i = 0; i < unpolled; ++i)
    std::memcpy(ring.slot(i), old_entries + size_t((first + i) & old_mask) * sizeof(abi::Cqe), sizeof(abi::Cqe));
  ring.publish(unpolled);

  // An arm whose doorbell is still queued is read from the new block when
  // that doorbell is served; an arm already served stays in the engine's Cq.
  auto* block = reinterpret_cast<abi::QueueDoorbellBlock*>(region.data());
  auto carry = [](uint32_t* to, uint32_t* from) { store_flag(to, std::atomic_ref<uint32_t>(*from).load()); };
  carry(&block->cq_arm_index, &c.block->cq_arm_index);
  carry(&block->rq_pending, &c.block->rq_pending);
  carry(&block->sq_pending, &c.block->sq_pending);

  // The engine's Cq and its sink (this SharedCq) stay: QPs and SRQs on the CQ
  // complete into the new ring from the next push on. (The engine's Cq keeps
  // no ring of its own when it has a sink, so it has no capacity to change.)
  c.ring = std::move(ring);
  c.block = block;
  c.region = std::move(region);  // droced's mapping of the old ring goes here
  out->cqe = g.entry_count;
  out->region_bytes = c.region.size();
  DROCE_LOG(DEBUG, app, "client %u: CQ %u resized to %u entries, %u completions moved", id_, q.cq_id,
            g.entry_count, unpolled);
  return 0;
}

int Session::destroy_cq(uint32_t id, uint64_t* events_written) {
  auto it = cqs_.find(id);
  if (it == cqs_.end()) return -EINVAL;
  if (it->second->users != 0) return -EBUSY;
  int rc = dev_->core->engine().destroy_cq(it->second->cq);
  if (rc != 0) return rc;
  *events_written = it->second->events_written;
  cqs_.erase(it);
  dev_->cq_owner.erase(id);
  return 0;
}

int Session::on_create_srq(const CreateSrqRequest& q, CreateSrqReply* out) {
  if (srqs_.size() >= dev_->session_limits.max_srqs) return -ENOMEM;
  if (std::find(pds_.begin(), pds_.end(), q.pd) == pds_.end()) return -EINVAL;
  if (q.max_wr == 0 || q.max_wr > dev_->limits.max_qp_wr || q.max_sge == 0 || q.max_sge > dev_->limits.max_sge)
    return -EINVAL;
  auto s = std::make_unique<SharedSrq>();
  const core::ShmRingGeometry g{pow2_at_least(q.max_wr), abi::recv_wqe_size(q.max_sge)};
  const size_t ring_off = sizeof(abi::QueueDoorbellBlock);
  if (int rc = make_region("droce-srq", ring_off + core::shm_ring_bytes(g), &s->region); rc != 0) return rc;
  std::span<std::byte> ring{s->region.data() + ring_off, core::shm_ring_bytes(g)};
  if (int rc = core::shm_ring_format(ring, g); rc != 0) return rc;
  if (int rc = core::ShmRingConsumer::attach(ring, g, &s->rq.ring); rc != 0) return rc;
  s->rq.pending = &reinterpret_cast<abi::QueueDoorbellBlock*>(s->region.data())->rq_pending;
  s->rq.limits = {q.max_sge, 0};
  if (int rc = dev_->core->engine().create_srq(q.pd, q.max_wr, q.max_sge, &s->srq); rc != 0) return rc;
  if (q.srq_limit != 0 && s->srq->set_limit(q.srq_limit) != 0) {
    (void)dev_->core->engine().destroy_srq(s->srq);
    return -EINVAL;
  }
  out->srq_id = s->srq->id();
  out->max_wr = q.max_wr;
  out->max_sge = q.max_sge;
  out->ring_entries = g.entry_count;
  out->entry_size = g.entry_size;
  out->ring_offset = ring_off;
  out->region_bytes = s->region.size();
  dev_->srq_owner[out->srq_id] = this;
  srqs_[out->srq_id] = std::move(s);
  return 0;
}

int Session::destroy_srq(uint32_t id) {
  auto it = srqs_.find(id);
  if (it == srqs_.end()) return -EINVAL;
  if (it->second->users != 0) return -EBUSY;
  int rc = dev_->core->engine().destroy_srq(it->second->srq);
  if (rc != 0) return rc;
  if (it->second->active) std::erase(active_srqs_, it->second.get());
  srqs_.erase(it);
  dev_->srq_owner.erase(id);
  return 0;
}

int Session::on_create_qp(const CreateQpRequest& q, CreateQpReply* out) {
  if (qps_.size() >= dev_->session_limits.max_qps) return -ENOMEM;
  if (std::find(pds_.begin(), pds_.end(), q.pd) == pds_.end()) return -EINVAL;
  auto scq = cqs_.find(q.send_cq);
  auto rcq = cqs_.find(q.recv_cq);
  if (scq == cqs_.end() || rcq == cqs_.end()) return -EINVAL;
  SharedSrq* srq = nullptr;
  if (q.srq != 0) {
    auto it = srqs_.find(q.srq - 1);  // the wire's SRQ field is id + 1 (0: none)
    if (it == srqs_.end()) return -EINVAL;
    srq = it->second.get();
  }
  if (q.qp_type != uint8_t(rocev2::QpType::rc) && q.qp_type != uint8_t(rocev2::QpType::uc) &&
      q.qp_type != uint8_t(rocev2::QpType::ud))
    return -EINVAL;
  const rocev2::DeviceLimits& L = dev_->limits;
  if (q.max_send_wr == 0 || q.max_send_wr > L.max_qp_wr || q.max_send_sge > L.max_sge ||
      q.max_inline_data > L.max_inline_data || (srq == nullptr && (q.max_recv_wr == 0 || q.max_recv_wr > L.max_qp_wr)) ||
      q.max_recv_sge > L.max_sge)
    return -EINVAL;

  rocev2::QpInit init;
  init.type = static_cast<rocev2::QpType>(q.qp_type);
  init.pd = q.pd;
  init.send_cq = scq->second->cq;
  init.recv_cq = rcq->second->cq;
  init.srq = srq ? srq->srq : nullptr;
  init.cap = {q.max_send_wr, srq ? 0 : q.max_recv_wr, std::max(q.max_send_sge, 1u), std::max(q.max_recv_sge, 1u),
              q.max_inline_data};
  init.sq_sig_all = q.sq_sig_all != 0;
  if (q.flags & ~uint16_t{kQpBlockSelfMcastLoopback}) return -EINVAL;
  init.block_self_mcast_loopback = (q.flags & kQpBlockSelfMcastLoopback) != 0;

  auto s = std::make_unique<SharedQp>();
  const core::ShmRingGeometry sq{pow2_at_least(init.cap.max_send_wr),
                                 abi::send_wqe_size(init.cap.max_send_sge, init.cap.max_inline_data)};
  const core::ShmRingGeometry rq{pow2_at_least(std::max(init.cap.max_recv_wr, 1u)),
                                 abi::recv_wqe_size(init.cap.max_recv_sge)};
  const size_t sq_off = sizeof(abi::QueueDoorbellBlock);
  const size_t rq_off = align64(sq_off + core::shm_ring_bytes(sq));
  s->has_rq = srq == nullptr;
  const size_t total = s->has_rq ? rq_off + core::shm_ring_bytes(rq) : rq_off;
  if (int rc = make_region("droce-qp", total, &s->region); rc != 0) return rc;
  auto* base = s->region.data();
  auto* block = reinterpret_cast<abi::QueueDoorbellBlock*>(base);
  std::span<std::byte> sq_mem{base + sq_off, core::shm_ring_bytes(sq)};
  if (int rc = core::shm_ring_format(sq_mem, sq); rc != 0) return rc;
  if (int rc = core::ShmRingConsumer::attach(sq_mem, sq, &s->sq.ring); rc != 0) return rc;
  s->sq.pending = &block->sq_pending;
  s->sq.limits = {init.cap.max_send_sge, init.cap.max_inline_data};
  if (s->has_rq) {
    std::span<std::byte> rq_mem{base + rq_off, core::shm_ring_bytes(rq)};
    if (int rc = core::shm_ring_format(rq_mem, rq); rc != 0) return rc;
    if (int rc = core::ShmRingConsumer::attach(rq_mem, rq, &s->rq.ring); rc != 0) return rc;
    s->rq.pending = &block->rq_pending;
    s->rq.limits = {init.cap.max_recv_sge, 0};
  }
  uint32_t qpn = 0;
  if (int rc = dev_->core->engine().create_qp(init, &qpn); rc != 0) return rc;
  s->qpn = qpn;
  s->type = init.type;
  s->send_cq = scq->second.get();
  s->recv_cq = rcq->second.get();
  ++s->send_cq->users;
  ++s->recv_cq->users;
  if (srq) {
    s->srq = srq;
    ++srq->users;
  }
  out->qpn = qpn;
  out->max_send_wr = init.cap.max_send_wr;
  out->max_recv_wr = init.cap.max_recv_wr;
  out->max_send_sge = init.cap.max_send_sge;
  out->max_recv_sge = init.cap.max_recv_sge;
  out->max_inline_data = init.cap.max_inline_data;
  out->sq_entries = sq.entry_count;
  out->sq_entry_size = sq.entry_size;
  out->rq_entries = s->has_rq ? rq.entry_count : 0;
  out->rq_entry_size = s->has_rq ? rq.entry_size : 0;
  out->sq_offset = sq_off;
  out->rq_offset = s->has_rq ? static_cast<uint32_t>(rq_off) : 0;
  out->region_bytes = s->region.size();
  dev_->qp_owner[qpn] = this;
  qps_[qpn] = std::move(s);
  return 0;
}

int Session::destroy_qp(uint32_t qpn) {
  auto it = qps_.find(qpn);
  if (it == qps_.end()) return -EINVAL;
  int rc = dev_->core->engine().destroy_qp(qpn);
  if (rc != 0) return rc;
  SharedQp* q = it->second.get();
  --q->send_cq->users;
  --q->recv_cq->users;
  if (q->srq != nullptr) --q->srq->users;
  if (q->active) std::erase(active_qps_, q);
  qps_.erase(it);
  dev_->qp_owner.erase(qpn);
  return 0;
}

int Session::build_av(const WireAv& w, rocev2::AddressVector* av) const {
  rocev2::from_wire(w, av);
  const net::GidEntry* g = dev_->gids->at(w.sgid_index);
  if (g == nullptr) return -EINVAL;
  set_av_source(*g, av);
  return 0;
}

int Session::on_modify_qp(const ModifyQpRequest& r, uint64_t now_ns) {
  auto it = qps_.find(r.qpn);
  if (it == qps_.end()) return -EINVAL;
  rocev2::QpAttr a;
  if (!rocev2::from_wire(r.attr, &a)) return -EINVAL;
  // A Q_Key with its top bit set is controlled (IBA 10.2.5): QP1's 0x80010000 is one. With it an
  // unprivileged program could send MADs to every host's connection manager.
  if ((r.mask & rocev2::kAttrQkey) && (a.qkey & 0x80000000u) && !privileged_) return -EPERM;
  if (r.mask & rocev2::kAttrAv) {
    if (int rc = build_av(r.attr.ah_attr, &a.ah_attr); rc != 0) return rc;
    int err = 0;
    switch (dev_->core->resolve(&a.ah_attr, now_ns, &err)) {
      case net::ResolveStatus::pending: return 1;
      case net::ResolveStatus::failed: return err;  // EHOSTUNREACH, or ENETUNREACH: no route
      case net::ResolveStatus::resolved: break;
    }
  }
  rocev2::Engine& e = dev_->core->engine();
  const int rc = e.modify_qp(r.qpn, a, r.mask);
  if (rc == 0 && (r.mask & rocev2::kAttrState) && a.qp_state == rocev2::QpState::reset) {
    // RESET empties the queues without completions: give back every slot
    // read so far; the engine's retire counts restart at zero.
    SharedQp& q = *it->second;
    for (SharedQueue* sq : {&q.sq, &q.rq}) {
      if (sq->pending == nullptr) continue;
      uint32_t got;
      (void)sq->ring.peek(sq->ahead, &got);
      sq->ring.release(std::min(got, sq->ahead));
      sq->ahead = sq->mark = sq->refused = 0;
      sq->backlog = false;
    }
  }
  return rc;
}

int Session::on_query_qp(uint32_t qpn, WireQpAttr* out) {
  if (qps_.find(qpn) == qps_.end()) return -EINVAL;
  rocev2::QpAttr a;
  rocev2::QpState st;
  if (int rc = dev_->core->engine().query_qp(qpn, &a, &st); rc != 0) return rc;
  a.qp_state = a.cur_qp_state = st;
  rocev2::to_wire(a, out);
  return 0;
}

int Session::on_create_ah(const CreateAhRequest& r, uint64_t now_ns, uint32_t* ah) {
  if (std::find(pds_.begin(), pds_.end(), r.pd) == pds_.end()) return -EINVAL;
  if (ahs_.size() >= dev_->session_limits.max_ahs) return -ENOMEM;
  rocev2::AddressVector av;
  if (int rc = build_av(r.av, &av); rc != 0) return rc;
  int err = 0;
  switch (dev_->core->resolve(&av, now_ns, &err)) {
    case net::ResolveStatus::pending: return 1;
    case net::ResolveStatus::failed: return err;
    case net::ResolveStatus::resolved: break;
  }
  int rc = dev_->core->engine().create_ah(r.pd, av, ah);
  if (rc == 0) ahs_.push_back(*ah);
  return rc;
}

// ---- Data path ------------------------------------------------------------------

uint32_t Session::poll(uint64_t now_ns) {
  (void)now_ns;
  if (!hello_done_ || closed_) return 0;
  uint32_t work = 0;
  abi::Doorbell db[32];
  uint32_t n = 0;
  if (doorbells_.pop_burst(db, 32, &n) == core::ShmRingStatus::corrupt) {
    fault("corrupt doorbell ring");
    return 0;
  }
  counters_.doorbells += n;
  work += n;
  for (uint32_t i = 0; i < n; ++i) {
    switch (db[i].kind) {
      case abi::kDoorbellSq:
      case abi::kDoorbellRq: {
        auto it = qps_.find(db[i].id);
        if (it == qps_.end() || (db[i].kind == abi::kDoorbellRq && !it->second->has_rq)) {
          ++counters_.bad_doorbells;
          break;
        }
        if (db[i].kind == abi::kDoorbellSq) drain_sq(*it->second);
        else drain_rq(*it->second);
        break;
      }
      case abi::kDoorbellSrq: {
        auto it = srqs_.find(db[i].id);
        if (it == srqs_.end()) ++counters_.bad_doorbells;
        else drain_srq(*it->second);
        break;
      }
      case abi::kDoorbellArmCq: {
        auto it = cqs_.find(db[i].id);
        if (it == cqs_.end()) ++counters_.bad_doorbells;
        else arm_cq(*it->second);
        break;
      }
      default:
        ++counters_.bad_doorbells;
    }
    if (closed_) return work;
  }
  // Queues the engine had no room for, and slots of retired WQEs.
  for (size_t i = 0; i < active_qps_.size(); ++i) {
    SharedQp* q = active_qps_[i];
    if (q->sq.backlog) drain_sq(*q);
    if (q->rq.backlog) drain_rq(*q);
  }
  for (size_t i = 0; i < active_srqs_.size(); ++i)
    if (active_srqs_[i]->rq.backlog) drain_srq(*active_srqs_[i]);
  release_retired();
  return work;
}

namespace {

// Drains one shared queue into the engine: clears its doorbell flag (then a
// fence, so the producer index is read after it), reads what the client
// published past what was already read, hands each entry to `post` (0:
// taken, -ENOMEM: no room, stop and retry next loop; else refused and
// counted), and records how far it got. False when the ring is corrupt.
// Of each entry it copies the header (`header` bytes), then what `used` says
// of the copy; the rest of the scratch holds older bytes, never shared ones.
template <class Queue, class Used, class Post, class Refuse>
bool drain_queue(Queue& q, std::vector<uint8_t>& scratch, uint32_t header, Used used, Post post, Refuse refuse,
                 uint64_t* posted) {
  clear_flag_fenced(q.pending);
  scratch.resize(q.ring.entry_size());
  q.backlog = false;
  for (;;) {
    uint32_t got = 0;
    if (q.ring.peek(q.ahead + kDrainBurst, &got) == core::ShmRingStatus::corrupt) return false;
    if (got <= q.ahead) return true;
    const uint32_t burst_end = q.ahead + kDrainBurst;
    for (uint32_t i = q.ahead; i < got; ++i) {
      q.ring.copy_entry(i, scratch.data(), 0, header);
      q.ring.copy_entry(i, scratch.data(), header, used(std::span<const uint8_t>(scratch.data(), header)));
      const int rc = post(scratch);
      if (rc == -ENOMEM) {
        q.backlog = true;
        return true;
      }
      ++q.ahead;
      if (rc == 0) {
        ++*posted;
      } else {
        ++q.refused;
        refuse(scratch);
      }
    }
    if (got < burst_end) return true;  // a short burst: nothing more was published
  }
}

}  // namespace

void Session::refuse_wqe(SharedQp& q, const uint8_t* entry, uint32_t size, bool send) {
  // A WQE that fails its checks is the client's error: like a hardware HCA,
  // complete it with a local QP operation error and move the QP to error
  // (everything after it is flushed).
  ++counters_.wqes_refused;
  rocev2::Completion c;
  if (size >= 8) std::memcpy(&c.wr_id, entry, 8);
  c.status = rocev2::WcStatus::loc_qp_op_err;
  c.opcode = send ? rocev2::WcOpcode::send : rocev2::WcOpcode::recv;
  c.qp_num = q.qpn;
  (send ? q.send_cq : q.recv_cq)->cq->push(c, false);
  rocev2::QpAttr a;
  a.qp_state = rocev2::QpState::err;
  (void)dev_->core->engine().modify_qp(q.qpn, a, rocev2::kAttrState);
}

void Session::drain_sq(SharedQp& q) {
  draining_ = true;
  rocev2::Engine& e = dev_->core->engine();
  rocev2::SendWr& wr = send_wr_;
  const bool ok = drain_queue(
      q.sq, scratch_, sizeof(core::abi::SendWqeHeader), rocev2::send_wqe_used,
      [&](std::vector<uint8_t>& entry) {
        if (rocev2::decode_send_wqe(entry, q.sq.limits, &wr) != rocev2::WqeError::ok) return -EINVAL;
        return e.post_send(q.qpn, wr);
      },
      [&](std::vector<uint8_t>& entry) { refuse_wqe(q, entry.data(), uint32_t(entry.size()), true); },
      &counters_.wqes_posted);
  draining_ = false;
  if (!ok) return fault("corrupt send ring");
  track(q, q.sq.ahead != 0 || q.sq.backlog);
}

void Session::drain_rq(SharedQp& q) {
  draining_ = true;
  rocev2::Engine& e = dev_->core->engine();
  const bool ok = drain_queue(
      q.rq, scratch_, sizeof(core::abi::RecvWqeHeader), rocev2::recv_wqe_used,
      [&](std::vector<uint8_t>& entry) {
        rocev2::RecvWr& wr = recv_wr_;
        if (rocev2::decode_recv_wqe(entry, q.rq.limits, &wr) != rocev2::WqeError::ok)
          return refilling_ ? -ENOMEM : -EINVAL;
        const int rc = e.post_recv(q.qpn, wr);
        return refilling_ && rc != 0 ? -ENOMEM : rc;  // refusals happen outside the engine
      },
      [&](std::vector<uint8_t>& entry) { refuse_wqe(q, entry.data(), uint32_t(entry.size()), false); },
      &counters_.wqes_posted);
  draining_ = false;
  if (!ok) return fault("corrupt receive ring");
  track(q, q.rq.ahead != 0 || q.rq.backlog);
}

void Session::drain_srq(SharedSrq& s) {
  draining_ = true;
  rocev2::Engine& e = dev_->core->engine();
  const bool ok = drain_queue(
      s.rq, scratch_, sizeof(core::abi::RecvWqeHeader), rocev2::recv_wqe_used,
      [&](std::vector<uint8_t>& entry) {
        rocev2::RecvWr& wr = recv_wr_;
        if (rocev2::decode_recv_wqe(entry, s.rq.limits, &wr) != rocev2::WqeError::ok)
          return refilling_ ? -ENOMEM : -EINVAL;
        const int rc = e.post_srq_recv(s.srq, wr);
        return refilling_ && rc != 0 ? -ENOMEM : rc;
      },
      [&](std::vector<uint8_t>&) { ++counters_.wqes_refused; },
      &counters_.wqes_posted);
  draining_ = false;
  if (!ok) return fault("corrupt SRQ ring");
  track(s, s.rq.ahead != 0 || s.rq.backlog);
}

uint32_t Session::sq_entries_unread() {
  uint32_t total = 0;
  for (auto& [qpn, q] : qps_) {
    uint32_t got = 0;
    if (q->sq.ring.peek(q->sq.ahead + 1024, &got) != core::ShmRingStatus::corrupt && got > q->sq.ahead)
      total += got - q->sq.ahead;
  }
  return total;
}

void Session::refill_recv(uint32_t qpn) {
  if (!hello_done_ || closed_ || draining_) return;
  auto it = qps_.find(qpn);
  if (it == qps_.end()) return;
  SharedQp& q = *it->second;
  refilling_ = true;
  if (q.srq != nullptr) drain_srq(*q.srq);
  else if (q.has_rq) drain_rq(q);
  refilling_ = false;
}

void Session::track(SharedQp& q, bool busy) {
  if (busy && !q.active) {
    q.active = true;
    active_qps_.push_back(&q);
  }
}

void Session::track(SharedSrq& s, bool busy) {
  if (busy && !s.active) {
    s.active = true;
    active_srqs_.push_back(&s);
  }
}

void Session::arm_cq(SharedCq& c) {
  clear_flag_fenced(&c.block->sq_pending);
  const uint32_t mode = take_flag(&c.block->rq_pending);
  if ((mode & (abi::kCqArmNext | abi::kCqArmSolicited)) == 0) return;
  const bool solicited_only = (mode & abi::kCqArmNext) == 0;
  // Completions pushed since the client armed (it saw the ring's producer at
  // cq_arm_index) came after ibv_req_notify_cq() returned: if one of them
  // would have ended this arm (any, or for a solicited-only arm a solicited
  // or failed one), the event is due now.
  if (mode & abi::kCqArmIndex) {
    const uint32_t armed_at = std::atomic_ref<uint32_t>(c.block->cq_arm_index).load(std::memory_order_acquire);
    const uint32_t since = c.ring.index() - armed_at;
    const bool due = solicited_only ? c.solicited_end - armed_at - 1 < since : since != 0;
    if (due) {
      c.notify();
      return;
    }
  }
  c.cq->arm(solicited_only);
}

namespace {
// Gives back the ring slots of WQEs the engine retired since the last call.
void release_queue(core::ShmRingConsumer& ring, uint32_t* ahead, uint32_t* mark, uint32_t* refused,
                   uint32_t retire_index) {
  const uint32_t done = std::min(retire_index - *mark + *refused, *ahead);
  *mark = retire_index;
  *refused = 0;
  if (done == 0) return;
  uint32_t got;
  (void)ring.peek(*ahead, &got);
  ring.release(std::min(done, got));
  *ahead -= std::min(done, got);
}
}  // namespace

void Session::release_retired() {
  rocev2::Engine& e = dev_->core->engine();
  for (size_t i = 0; i < active_qps_.size();) {
    SharedQp* q = active_qps_[i];
    const rocev2::Qp* p = e.qp(q->qpn);
    if (p != nullptr) {
      release_queue(q->sq.ring, &q->sq.ahead, &q->sq.mark, &q->sq.refused, p->sq_tail);
      if (q->has_rq) release_queue(q->rq.ring, &q->rq.ahead, &q->rq.mark, &q->rq.refused, p->rq_tail);
    }
    if (q->sq.ahead == 0 && q->rq.ahead == 0 && !q->sq.backlog && !q->rq.backlog) {
      q->active = false;
      active_qps_[i] = active_qps_.back();
      active_qps_.pop_back();
    } else {
      ++i;
    }
  }
  for (size_t i = 0; i < active_srqs_.size();) {
    SharedSrq* s = active_srqs_[i];
    release_queue(s->rq.ring, &s->rq.ahead, &s->rq.mark, &s->rq.refused, s->srq->consumed());
    if (s->rq.ahead == 0 && !s->rq.backlog) {
      s->active = false;
      active_srqs_[i] = active_srqs_.back();
      active_srqs_.pop_back();
    } else {
      ++i;
    }
  }
}

void Session::release_for_completion(uint32_t qpn) {
  // An application may reuse a queue slot as soon as it polls the slot's
  // completion (with max_send_wr 1 it must), so the slots the engine retired
  // (it retires before it pushes the completion) go back first. Not while a
  // drain reads entries by position: the next release_retired() does it.
  if (draining_) return;
  auto it = qps_.find(qpn);
  if (it == qps_.end()) return;
  const rocev2::Qp* p = dev_->core->engine().qp(qpn);
  if (p == nullptr) return;
  SharedQp& q = *it->second;
  release_queue(q.sq.ring, &q.sq.ahead, &q.sq.mark, &q.sq.refused, p->sq_tail);
  if (q.has_rq) release_queue(q.rq.ring, &q.rq.ahead, &q.rq.mark, &q.rq.refused, p->rq_tail);
  if (q.srq != nullptr)
    release_queue(q.srq->rq.ring, &q.srq->rq.ahead, &q.srq->rq.mark, &q.srq->rq.refused, q.srq->srq->consumed());
}

void Session::push_event(uint32_t type, uint32_t id) {
  if (!hello_done_) return;
  const abi::EventEntry ev{type, id};
  if (events_.try_push(&ev) != core::ShmRingStatus::ok) {
    ++counters_.events_dropped;
    return;
  }
  write_eventfd(async_fd_.get());
}

void Session::set_daemon_sleeping(bool sleeping) {
  if (page_ != nullptr) store_flag(&page_->daemon_sleeping, sleeping ? 1 : 0);
}

bool Session::doorbells_waiting() { return hello_done_ && !closed_ && doorbells_.size() != 0; }

core::WakeStamp Session::wake_stamp() const {
  if (page_ == nullptr) return {};
  return {std::atomic_ref<uint64_t>(page_->waker_ns).load(std::memory_order_relaxed),
          std::atomic_ref<int32_t>(page_->waker_cpu).load(std::memory_order_relaxed)};
}

}  // namespace droce::droced

