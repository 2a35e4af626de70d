// The device as a client sees it: hello (the context region), ibv_query_device, ibv_query_port,
// ibv_query_gid, and droced's state for the droce CLI (stats).

#include <sys/eventfd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "droced/session_objects.h"
#include "core/log.h"

namespace droce::droced {

using namespace abi::ctl;

int Session::on_hello(const HelloRequest& hello, const CtlHeader& h) {
  HelloRequest q = hello;
  q.program[sizeof q.program - 1] = '\0';
  program_ = q.program;

  // The context region: the page, the doorbell ring, the event ring.
  const SessionLimits& lim = dev_->session_limits;
  const uint32_t db_entries = pow2_at_least(2 * lim.max_qps + lim.max_srqs + lim.max_cqs);
  const uint32_t ev_entries = pow2_at_least(lim.event_entries);
  const abi::ShmRingGeometry db{db_entries, sizeof(abi::Doorbell)};
  const abi::ShmRingGeometry ev{ev_entries, sizeof(abi::EventEntry)};
  const size_t db_off = 4096;
  const size_t ev_off = align64(db_off + abi::shm_ring_bytes(db));
  const size_t total = ev_off + abi::shm_ring_bytes(ev);
  if (int rc = make_region("droce-context", total, &context_); rc != 0) return rc;
  auto* base = context_.data();
  if (int rc = abi::shm_ring_format({base + db_off, abi::shm_ring_bytes(db)}, db); rc != 0) return rc;
  if (int rc = abi::shm_ring_format({base + ev_off, abi::shm_ring_bytes(ev)}, ev); rc != 0) return rc;
  if (int rc = abi::ShmRingConsumer::attach({base + db_off, abi::shm_ring_bytes(db)}, db, &doorbells_); rc != 0)
    return rc;
  if (int rc = abi::ShmRingProducer::attach({base + ev_off, abi::shm_ring_bytes(ev)}, ev, &events_); rc != 0)
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

template <>
void Session::serve<MsgType::hello>(const Control& c, const HelloRequest& q) {
  if (int rc = on_hello(q, c.h); rc != 0) reply(c.h, rc);
}

template <>
void Session::serve<MsgType::query_device>(const Control& c, const NoBody&) {
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
  r.max_mw = dev_->session_limits.max_mrs;  // windows share the engine's key table with regions
  r.device_caps = kDeviceCapCompletionTimestamp | kDeviceCapOnDemandPaging;
  r.max_dm_size = dev_->session_limits.max_dm_bytes;
  r.max_xrcds = XrcRegistry::kMaxDomains;
  std::snprintf(r.fw_ver, sizeof r.fw_ver, "%s", kDaemonVersion);
  reply(c.h, 0, &r, sizeof r);
}

template <>
void Session::serve<MsgType::query_port>(const Control& c, const IdRequest& q) {
  if (q.id != 1) return reply(c.h, -EINVAL);
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
  reply(c.h, 0, &r, sizeof r);
}

template <>
void Session::serve<MsgType::query_gid>(const Control& c, const QueryGidRequest& q) {
  if (q.port != 1) return reply(c.h, -EINVAL);
  const net::GidEntry* g = dev_->gids->at(q.index);
  if (g == nullptr) return reply(c.h, q.index < dev_->gids->capacity() ? -ENODATA : -EINVAL);
  QueryGidReply r{};
  std::memcpy(r.gid, g->gid.data(), 16);
  r.type = g->type == net::GidType::roce_v2 ? 1 : 0;
  reply(c.h, 0, &r, sizeof r);
}

template <>
void Session::serve<MsgType::stats>(const Control& c, const NoBody&) {
  // The text goes in a sealed memfd: it may be far larger than a message.
  const std::string text = dev_->render_stats ? dev_->render_stats(dev_->render_arg) : std::string("{}");
  core::ShmRegion r;
  if (int rc = core::ShmRegion::create("droce-stats", text.size() + 1, {}, &r); rc != 0) return reply(c.h, rc);
  std::memcpy(r.data(), text.data(), text.size());
  StatsReply s{text.size()};
  const int fd = r.fd();
  reply(c.h, 0, &s, sizeof s, std::span<const int>(&fd, 1));
}

std::span<const Session::ControlEntry> Session::device_controls() {
  static constexpr ControlEntry kEntries[] = {
      control<MsgType::hello, HelloRequest>(When::before_hello),
      control<MsgType::query_device, NoBody>(),
      control<MsgType::query_port, IdRequest>(),
      control<MsgType::query_gid, QueryGidRequest>(),
      control<MsgType::stats, NoBody>(When::any_time),
  };
  return kEntries;
}

}  // namespace droce::droced
