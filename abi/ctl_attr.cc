#include "abi/ctl_attr.h"

#include <cstring>

namespace droce::abi {

void to_wire(const AddressVector& av, ctl::WireAv* out) {
  *out = ctl::WireAv{};
  std::memcpy(out->dgid, av.dgid.data(), 16);
  out->flow_label = av.flow_label;
  out->sgid_index = av.sgid_index;
  out->hop_limit = av.hop_limit;
  out->traffic_class = av.traffic_class;
  out->sl = av.sl;
  out->is_global = av.is_global ? 1 : 0;
  out->port_num = 1;
  std::memcpy(out->dmac, av.dmac.data(), 6);
  out->vlan_id = av.vlan_id;
}

void from_wire(const ctl::WireAv& w, AddressVector* out) {
  *out = AddressVector{};
  std::memcpy(out->dgid.data(), w.dgid, 16);
  out->flow_label = w.flow_label & 0xfffff;
  out->sgid_index = w.sgid_index;
  out->hop_limit = w.hop_limit;
  out->traffic_class = w.traffic_class;
  out->sl = w.sl & 0x7;
  out->is_global = w.is_global != 0;
}

void to_wire(const QpAttr& a, ctl::WireQpAttr* out) {
  *out = ctl::WireQpAttr{};
  out->qp_state = static_cast<uint32_t>(a.qp_state);
  out->cur_qp_state = static_cast<uint32_t>(a.cur_qp_state);
  out->path_mtu = static_cast<uint32_t>(a.path_mtu);
  out->path_mig_state = static_cast<uint32_t>(a.path_mig_state);
  out->qkey = a.qkey;
  out->rq_psn = a.rq_psn;
  out->sq_psn = a.sq_psn;
  out->dest_qp_num = a.dest_qp_num;
  out->qp_access_flags = a.qp_access_flags;
  out->max_send_wr = a.cap.max_send_wr;
  out->max_recv_wr = a.cap.max_recv_wr;
  out->max_send_sge = a.cap.max_send_sge;
  out->max_recv_sge = a.cap.max_recv_sge;
  out->max_inline_data = a.cap.max_inline_data;
  out->pkey_index = a.pkey_index;
  out->alt_pkey_index = a.alt_pkey_index;
  out->en_sqd_async_notify = a.en_sqd_async_notify;
  out->sq_draining = a.sq_draining;
  out->max_rd_atomic = a.max_rd_atomic;
  out->max_dest_rd_atomic = a.max_dest_rd_atomic;
  out->min_rnr_timer = a.min_rnr_timer;
  out->port_num = a.port_num;
  out->timeout = a.timeout;
  out->retry_cnt = a.retry_cnt;
  out->rnr_retry = a.rnr_retry;
  out->alt_port_num = a.alt_port_num;
  out->alt_timeout = a.alt_timeout;
  out->rate_limit = a.rate_limit;
  to_wire(a.ah_attr, &out->ah_attr);
  to_wire(a.alt_ah_attr, &out->alt_ah_attr);
}

bool from_wire(const ctl::WireQpAttr& w, QpAttr* out) {
  *out = QpAttr{};
  if (w.qp_state > static_cast<uint32_t>(QpState::err) || w.cur_qp_state > static_cast<uint32_t>(QpState::err))
    return false;
  if (w.path_mtu > static_cast<uint32_t>(PathMtu::mtu4096) || w.path_mig_state > 2) return false;
  out->qp_state = static_cast<QpState>(w.qp_state);
  out->cur_qp_state = static_cast<QpState>(w.cur_qp_state);
  // 0 is no MTU at all; the engine's checker refuses it when the mask names it.
  out->path_mtu = static_cast<PathMtu>(w.path_mtu);
  out->path_mig_state = static_cast<MigState>(w.path_mig_state);
  out->qkey = w.qkey;
  out->rq_psn = w.rq_psn;
  out->sq_psn = w.sq_psn;
  out->dest_qp_num = w.dest_qp_num;
  out->qp_access_flags = w.qp_access_flags;
  out->cap = {w.max_send_wr, w.max_recv_wr, w.max_send_sge, w.max_recv_sge, w.max_inline_data};
  out->pkey_index = w.pkey_index;
  out->alt_pkey_index = w.alt_pkey_index;
  out->en_sqd_async_notify = w.en_sqd_async_notify;
  out->max_rd_atomic = w.max_rd_atomic;
  out->max_dest_rd_atomic = w.max_dest_rd_atomic;
  out->min_rnr_timer = w.min_rnr_timer;
  out->port_num = w.port_num;
  out->timeout = w.timeout;
  out->retry_cnt = w.retry_cnt;
  out->rnr_retry = w.rnr_retry;
  out->alt_port_num = w.alt_port_num;
  out->alt_timeout = w.alt_timeout;
  out->rate_limit = w.rate_limit;
  from_wire(w.ah_attr, &out->ah_attr);
  from_wire(w.alt_ah_attr, &out->alt_ah_attr);
  return true;
}

}  // namespace droce::abi
