#include "provider/verbs/convert.h"

#include <endian.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>

#include "abi/wqe.h"

namespace droce::verbs {

using namespace abi;

// abi/verbs.h promises rdma-core's numbering; the casts below rely on it.
constexpr bool eq(auto a, auto b) { return static_cast<long long>(a) == static_cast<long long>(b); }
static_assert(eq(int(QpType::rc), IBV_QPT_RC) &&
              eq(int(QpType::uc), IBV_QPT_UC) &&
              eq(int(QpType::ud), IBV_QPT_UD) &&
              eq(int(QpType::raw_packet), IBV_QPT_RAW_PACKET) &&
              eq(int(QpType::xrc_send), IBV_QPT_XRC_SEND) &&
              eq(int(QpType::xrc_recv), IBV_QPT_XRC_RECV));
static_assert(eq(int(QpState::reset), IBV_QPS_RESET) &&
              eq(int(QpState::init), IBV_QPS_INIT) &&
              eq(int(QpState::rtr), IBV_QPS_RTR) &&
              eq(int(QpState::rts), IBV_QPS_RTS) &&
              eq(int(QpState::sqd), IBV_QPS_SQD) &&
              eq(int(QpState::sqe), IBV_QPS_SQE) &&
              eq(int(QpState::err), IBV_QPS_ERR));
static_assert(eq(kAttrState, IBV_QP_STATE) &&
              eq(kAttrCurState, IBV_QP_CUR_STATE) &&
              eq(kAttrEnSqdAsyncNotify, IBV_QP_EN_SQD_ASYNC_NOTIFY) &&
              eq(kAttrAccessFlags, IBV_QP_ACCESS_FLAGS) &&
              eq(kAttrPkeyIndex, IBV_QP_PKEY_INDEX) &&
              eq(kAttrPort, IBV_QP_PORT) &&
              eq(kAttrQkey, IBV_QP_QKEY) &&
              eq(kAttrAv, IBV_QP_AV) &&
              eq(kAttrPathMtu, IBV_QP_PATH_MTU) &&
              eq(kAttrTimeout, IBV_QP_TIMEOUT) &&
              eq(kAttrRetryCnt, IBV_QP_RETRY_CNT) &&
              eq(kAttrRnrRetry, IBV_QP_RNR_RETRY) &&
              eq(kAttrRqPsn, IBV_QP_RQ_PSN) &&
              eq(kAttrMaxQpRdAtomic, IBV_QP_MAX_QP_RD_ATOMIC) &&
              eq(kAttrAltPath, IBV_QP_ALT_PATH) &&
              eq(kAttrMinRnrTimer, IBV_QP_MIN_RNR_TIMER) &&
              eq(kAttrSqPsn, IBV_QP_SQ_PSN) &&
              eq(kAttrMaxDestRdAtomic, IBV_QP_MAX_DEST_RD_ATOMIC) &&
              eq(kAttrPathMigState, IBV_QP_PATH_MIG_STATE) &&
              eq(kAttrCap, IBV_QP_CAP) &&
              eq(kAttrDestQpn, IBV_QP_DEST_QPN) &&
              eq(kAttrRateLimit, IBV_QP_RATE_LIMIT));
static_assert(eq(kAccessLocalWrite, IBV_ACCESS_LOCAL_WRITE) &&
              eq(kAccessRemoteWrite, IBV_ACCESS_REMOTE_WRITE) &&
              eq(kAccessRemoteRead, IBV_ACCESS_REMOTE_READ) &&
              eq(kAccessRemoteAtomic, IBV_ACCESS_REMOTE_ATOMIC) &&
              eq(kAccessMwBind, IBV_ACCESS_MW_BIND) &&
              eq(kAccessZeroBased, IBV_ACCESS_ZERO_BASED) &&
              eq(kAccessOnDemand, IBV_ACCESS_ON_DEMAND) &&
              eq(kAccessHugetlb, IBV_ACCESS_HUGETLB));
static_assert(eq(int(PathMtu::mtu256), IBV_MTU_256) &&
              eq(int(PathMtu::mtu4096), IBV_MTU_4096));
static_assert(eq(int(MigState::migrated), IBV_MIG_MIGRATED) &&
              eq(int(MigState::armed), IBV_MIG_ARMED));
static_assert(eq(int(WrOpcode::rdma_write), IBV_WR_RDMA_WRITE) &&
              eq(int(WrOpcode::rdma_write_with_imm), IBV_WR_RDMA_WRITE_WITH_IMM) &&
              eq(int(WrOpcode::send), IBV_WR_SEND) &&
              eq(int(WrOpcode::send_with_imm), IBV_WR_SEND_WITH_IMM) &&
              eq(int(WrOpcode::rdma_read), IBV_WR_RDMA_READ) &&
              eq(int(WrOpcode::atomic_cmp_and_swp), IBV_WR_ATOMIC_CMP_AND_SWP) &&
              eq(int(WrOpcode::atomic_fetch_and_add), IBV_WR_ATOMIC_FETCH_AND_ADD) &&
              eq(int(WrOpcode::local_inv), IBV_WR_LOCAL_INV) &&
              eq(int(WrOpcode::bind_mw), IBV_WR_BIND_MW) &&
              eq(int(WrOpcode::send_with_inv), IBV_WR_SEND_WITH_INV) &&
              eq(int(WrOpcode::atomic_write), IBV_WR_ATOMIC_WRITE));
static_assert(eq(kSendFence, IBV_SEND_FENCE) &&
              eq(kSendSignaled, IBV_SEND_SIGNALED) &&
              eq(kSendSolicited, IBV_SEND_SOLICITED) &&
              eq(kSendInline, IBV_SEND_INLINE));
static_assert(eq(int(WcStatus::success), IBV_WC_SUCCESS) &&
              eq(int(WcStatus::loc_len_err), IBV_WC_LOC_LEN_ERR) &&
              eq(int(WcStatus::loc_qp_op_err), IBV_WC_LOC_QP_OP_ERR) &&
              eq(int(WcStatus::loc_prot_err), IBV_WC_LOC_PROT_ERR) &&
              eq(int(WcStatus::wr_flush_err), IBV_WC_WR_FLUSH_ERR) &&
              eq(int(WcStatus::bad_resp_err), IBV_WC_BAD_RESP_ERR) &&
              eq(int(WcStatus::loc_access_err), IBV_WC_LOC_ACCESS_ERR) &&
              eq(int(WcStatus::rem_inv_req_err), IBV_WC_REM_INV_REQ_ERR) &&
              eq(int(WcStatus::mw_bind_err), IBV_WC_MW_BIND_ERR) &&
              eq(int(abi::MwType::type1), IBV_MW_TYPE_1) && eq(int(abi::MwType::type2), IBV_MW_TYPE_2) &&
              eq(int(WcStatus::rem_access_err), IBV_WC_REM_ACCESS_ERR) &&
              eq(int(WcStatus::rem_op_err), IBV_WC_REM_OP_ERR) &&
              eq(int(WcStatus::retry_exc_err), IBV_WC_RETRY_EXC_ERR) &&
              eq(int(WcStatus::rnr_retry_exc_err), IBV_WC_RNR_RETRY_EXC_ERR) &&
              eq(int(WcStatus::fatal_err), IBV_WC_FATAL_ERR) &&
              eq(int(WcStatus::resp_timeout_err), IBV_WC_RESP_TIMEOUT_ERR) &&
              eq(int(WcStatus::general_err), IBV_WC_GENERAL_ERR));
static_assert(eq(int(WcOpcode::send), IBV_WC_SEND) &&
              eq(int(WcOpcode::rdma_write), IBV_WC_RDMA_WRITE) &&
              eq(int(WcOpcode::rdma_read), IBV_WC_RDMA_READ) &&
              eq(int(WcOpcode::comp_swap), IBV_WC_COMP_SWAP) &&
              eq(int(WcOpcode::fetch_add), IBV_WC_FETCH_ADD) &&
              eq(int(WcOpcode::local_inv), IBV_WC_LOCAL_INV) &&
              eq(int(WcOpcode::bind_mw), IBV_WC_BIND_MW) &&
              eq(int(WcOpcode::atomic_write), IBV_WC_ATOMIC_WRITE) &&
              eq(int(WcOpcode::recv), IBV_WC_RECV) &&
              eq(int(WcOpcode::recv_rdma_with_imm), IBV_WC_RECV_RDMA_WITH_IMM));
static_assert(eq(kWcGrh, IBV_WC_GRH) &&
              eq(kWcWithImm, IBV_WC_WITH_IMM) &&
              eq(kWcWithInv, IBV_WC_WITH_INV));
static_assert(sizeof(ibv_sge) == sizeof(Sge) &&
              offsetof(ibv_sge, length) == offsetof(Sge, length) &&
              offsetof(ibv_sge, lkey) == offsetof(Sge, lkey));

// An enum field as the caller stored it: it may hold any value, which C++ may
// not load as the enum type (UBSan: "not a valid value").
template <class E>
int raw(const E& e) {
  static_assert(sizeof(E) == sizeof(int));
  int v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

int to_access(int ibv_access, uint32_t* out) {
  const uint32_t a = static_cast<uint32_t>(ibv_access) & ~uint32_t{IBV_ACCESS_OPTIONAL_RANGE};
  if (a & IBV_ACCESS_ZERO_BASED) return EOPNOTSUPP;
  // IBA 1.5 FLUSH (rdma-core 45's IBV_ACCESS_FLUSH_*; 44's headers have no names for them): global
  // visibility is offered; persistence is not (no persistent memory: the kernel's core answers
  // EOPNOTSUPP for a device without IB_DEVICE_FLUSH_PERSISTENT).
  if (a & kAccessFlushPersistent) return EOPNOTSUPP;
  constexpr uint32_t kKnown = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                              IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_HUGETLB |
                              IBV_ACCESS_ON_DEMAND | kAccessFlushGlobal;
  if (a & ~kKnown) return EINVAL;
  // ibv_reg_mr(3): remote write or atomic access needs local write.
  if ((a & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(a & IBV_ACCESS_LOCAL_WRITE)) return EINVAL;
  // HUGETLB is a hint.
  *out = a & ~uint32_t{IBV_ACCESS_HUGETLB};
  return 0;
}

namespace {

bool opcode_allowed(int op, ibv_qp_type type) {
  // An XRC send QP has RC's operations (IBA A14); an XRC receive QP no send queue.
  const bool rc = type == IBV_QPT_RC || type == IBV_QPT_XRC_SEND;
  if (type == IBV_QPT_XRC_RECV) return false;
  switch (op) {
    case IBV_WR_SEND:
      return true;
    case IBV_WR_SEND_WITH_IMM:
      return type != IBV_QPT_RAW_PACKET;  // a raw QP's SEND is the frame: nothing to carry it in
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return rc || type == IBV_QPT_UC;
    case IBV_WR_RDMA_READ:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
    case IBV_WR_SEND_WITH_INV:
    case IBV_WR_LOCAL_INV:
      return rc;
    case IBV_WR_BIND_MW:
      return rc || type == IBV_QPT_UC;  // as rxe
    default:
      return false;
  }
}

}  // namespace

int to_send_wqe_header(const ibv_send_wr& wr, ibv_qp_type type, uint32_t ud_ah_id, SendWqeHeader* out) {
  const int op = raw(wr.opcode);
  switch (op) {
    case IBV_WR_TSO:
    case IBV_WR_DRIVER1:
    case IBV_WR_ATOMIC_WRITE:  // ibv_wr_atomic_write only: ibv_send_wr has no field for its 8 bytes
      return EOPNOTSUPP;
    default:
      break;
  }
  if (!opcode_allowed(op, type)) return EINVAL;
  if (wr.num_sge < 0 || static_cast<uint32_t>(wr.num_sge) > kMaxSge) return EINVAL;
  if (wr.num_sge > 0 && wr.sg_list == nullptr) return EINVAL;
  if (type == IBV_QPT_RAW_PACKET) {
    // A raw SEND is a frame: at least an Ethernet header (droced refuses one past the port's
    // frame size as it takes the WQE: LOC_QP_OP_ERR).
    uint64_t len = 0;
    for (int i = 0; i < wr.num_sge; ++i) len += wr.sg_list[i].length;
    if (len < 14) return EINVAL;
  }
  *out = SendWqeHeader{};
  out->wr_id = wr.wr_id;
  out->opcode = static_cast<uint8_t>(op);
  out->send_flags = wr.send_flags & (IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE);
  switch (op) {
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      out->imm_or_inv = be32toh(wr.imm_data);
      break;
    case IBV_WR_SEND_WITH_INV:
    case IBV_WR_LOCAL_INV:
      out->imm_or_inv = wr.invalidate_rkey;
      break;
    case IBV_WR_BIND_MW: {
      // abi/queues.h: the window by its current R_Key, the new one, the range, the region.
      const ibv_mw_bind_info& b = wr.bind_mw.bind_info;
      if (wr.bind_mw.mw == nullptr || (b.mr == nullptr && b.length != 0)) return EINVAL;
      out->imm_or_inv = wr.bind_mw.mw->rkey;
      out->rkey = wr.bind_mw.rkey;
      out->remote_addr = b.addr;
      out->compare_add = b.length;
      out->swap = uint64_t{b.mr != nullptr ? b.mr->lkey : 0} | uint64_t{uint32_t(b.mw_access_flags)} << 32;
      break;
    }
    default:
      break;
  }
  switch (op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_RDMA_READ:
      out->remote_addr = wr.wr.rdma.remote_addr;
      out->rkey = wr.wr.rdma.rkey;
      break;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      out->remote_addr = wr.wr.atomic.remote_addr;
      out->rkey = wr.wr.atomic.rkey;
      out->compare_add = wr.wr.atomic.compare_add;
      out->swap = wr.wr.atomic.swap;
      break;
    default:
      break;
  }
  if (type == IBV_QPT_UD) {
    out->ah = ud_ah_id;
    out->remote_qpn = wr.wr.ud.remote_qpn;
    out->remote_qkey = wr.wr.ud.remote_qkey;
  }
  if (type == IBV_QPT_XRC_SEND) out->remote_qpn = wr.qp_type.xrc.remote_srqn & 0xffffff;  // the XRCETH's
  return 0;
}

int to_send_wr(const ibv_send_wr& wr, ibv_qp_type type, uint32_t ud_ah_id, SendWr* out) {
  SendWqeHeader h;
  if (int rc = to_send_wqe_header(wr, type, ud_ah_id, &h); rc != 0) return rc;
  send_wr_fields(h, out);
  out->num_sge = static_cast<uint32_t>(wr.num_sge);
  if (wr.num_sge > 0) std::memcpy(static_cast<void*>(out->sg_list), wr.sg_list, sizeof(Sge) * static_cast<size_t>(wr.num_sge));
  return 0;
}

int to_recv_wr(const ibv_recv_wr& wr, RecvWr* out) {
  if (wr.num_sge < 0 || static_cast<uint32_t>(wr.num_sge) > kMaxSge) return EINVAL;
  if (wr.num_sge > 0 && wr.sg_list == nullptr) return EINVAL;
  out->wr_id = wr.wr_id;
  out->num_sge = static_cast<uint32_t>(wr.num_sge);
  if (wr.num_sge > 0) std::memcpy(static_cast<void*>(out->sg_list), wr.sg_list, sizeof(Sge) * static_cast<size_t>(wr.num_sge));
  return 0;
}

void to_wc(const Completion& c, ibv_wc* out) {
  out->wr_id = c.wr_id;
  out->status = static_cast<ibv_wc_status>(c.status);
  out->opcode = static_cast<ibv_wc_opcode>(c.opcode);
  out->vendor_err = c.vendor_err;
  out->byte_len = c.byte_len;
  if (c.wc_flags & kWcWithInv) out->invalidated_rkey = c.imm_data;
  else out->imm_data = htobe32(c.imm_data);
  out->qp_num = c.qp_num;
  out->src_qp = c.src_qp;
  out->wc_flags = c.wc_flags;
  out->pkey_index = c.pkey_index;
  out->slid = c.slid;
  out->sl = c.sl;
  out->dlid_path_bits = c.dlid_path_bits;
}

int to_av(const ibv_ah_attr& ah, AddressVector* out) {
  if (!ah.is_global || ah.port_num != 1) return EINVAL;
  *out = AddressVector{};
  std::memcpy(out->dgid.data(), ah.grh.dgid.raw, 16);
  out->sgid_index = ah.grh.sgid_index;
  out->hop_limit = ah.grh.hop_limit;
  out->traffic_class = ah.grh.traffic_class;
  // The GRH carries 20 bits. The kernel's RoCE path and the hardware providers take the low 20
  // of the 32-bit field and ignore the rest; UCX sets bits above them on RoCE (and a DLID, which
  // Ethernet ignores too), so refusing them failed its ibv_create_ah and modify to RTR (#14).
  out->flow_label = ah.grh.flow_label & 0xfffff;
  out->sl = ah.sl;
  out->is_global = true;
  return 0;
}

void from_av(const AddressVector& av, ibv_ah_attr* out) {
  *out = ibv_ah_attr{};
  std::memcpy(out->grh.dgid.raw, av.dgid.data(), 16);
  out->grh.sgid_index = av.sgid_index;
  out->grh.hop_limit = av.hop_limit;
  out->grh.traffic_class = av.traffic_class;
  out->grh.flow_label = av.flow_label;
  out->sl = av.sl;
  out->is_global = 1;
  out->port_num = 1;
}

int to_qp_attr(const ibv_qp_attr& attr, int mask, QpAttr* out) {
  *out = QpAttr{};
  const int state = raw(attr.qp_state), cur = raw(attr.cur_qp_state), mtu = raw(attr.path_mtu),
            mig = raw(attr.path_mig_state);
  if ((mask & IBV_QP_STATE) && (state < IBV_QPS_RESET || state > IBV_QPS_ERR)) return EINVAL;
  if ((mask & IBV_QP_CUR_STATE) && (cur < IBV_QPS_RESET || cur > IBV_QPS_ERR)) return EINVAL;
  if ((mask & IBV_QP_PATH_MTU) && (mtu < IBV_MTU_256 || mtu > IBV_MTU_4096)) return EINVAL;
  if ((mask & IBV_QP_PATH_MIG_STATE) && (mig < IBV_MIG_MIGRATED || mig > IBV_MIG_ARMED)) return EINVAL;
  if (mask & IBV_QP_STATE) out->qp_state = static_cast<QpState>(state);
  if (mask & IBV_QP_CUR_STATE) out->cur_qp_state = static_cast<QpState>(cur);
  if (mask & IBV_QP_PATH_MTU) out->path_mtu = static_cast<PathMtu>(mtu);
  if (mask & IBV_QP_PATH_MIG_STATE) out->path_mig_state = static_cast<MigState>(mig);
  out->qkey = attr.qkey;
  out->rq_psn = attr.rq_psn;
  out->sq_psn = attr.sq_psn;
  out->dest_qp_num = attr.dest_qp_num;
  out->qp_access_flags = static_cast<uint32_t>(attr.qp_access_flags);
  out->cap = {attr.cap.max_send_wr, attr.cap.max_recv_wr, attr.cap.max_send_sge, attr.cap.max_recv_sge,
              attr.cap.max_inline_data};
  if (mask & IBV_QP_AV) {
    if (int rc = to_av(attr.ah_attr, &out->ah_attr); rc != 0) return rc;
  }
  if (mask & IBV_QP_ALT_PATH) {
    // Refused by droced's rules (no alternate paths); converted only so the refusal is theirs.
    (void)to_av(attr.alt_ah_attr, &out->alt_ah_attr);
  }
  out->pkey_index = attr.pkey_index;
  out->alt_pkey_index = attr.alt_pkey_index;
  out->en_sqd_async_notify = attr.en_sqd_async_notify;
  out->sq_draining = attr.sq_draining;
  out->max_rd_atomic = attr.max_rd_atomic;
  out->max_dest_rd_atomic = attr.max_dest_rd_atomic;
  out->min_rnr_timer = attr.min_rnr_timer;
  out->port_num = attr.port_num;
  out->timeout = attr.timeout;
  out->retry_cnt = attr.retry_cnt;
  out->rnr_retry = attr.rnr_retry;
  out->alt_port_num = attr.alt_port_num;
  out->alt_timeout = attr.alt_timeout;
  out->rate_limit = attr.rate_limit;
  return 0;
}

void from_qp_attr(const QpAttr& a, ibv_qp_attr* out) {
  *out = ibv_qp_attr{};
  out->qp_state = static_cast<ibv_qp_state>(a.qp_state);
  out->cur_qp_state = static_cast<ibv_qp_state>(a.cur_qp_state);
  out->path_mtu = static_cast<ibv_mtu>(a.path_mtu);
  out->path_mig_state = static_cast<ibv_mig_state>(a.path_mig_state);
  out->qkey = a.qkey;
  out->rq_psn = a.rq_psn;
  out->sq_psn = a.sq_psn;
  out->dest_qp_num = a.dest_qp_num;
  out->qp_access_flags = static_cast<int>(a.qp_access_flags);
  out->cap = {a.cap.max_send_wr, a.cap.max_recv_wr, a.cap.max_send_sge, a.cap.max_recv_sge, a.cap.max_inline_data};
  from_av(a.ah_attr, &out->ah_attr);
  // No alternate path exists; report an empty one.
  out->alt_ah_attr = ibv_ah_attr{};
  out->pkey_index = a.pkey_index;
  out->alt_pkey_index = 0;
  out->en_sqd_async_notify = a.en_sqd_async_notify;
  out->sq_draining = a.sq_draining;
  out->max_rd_atomic = a.max_rd_atomic;
  out->max_dest_rd_atomic = a.max_dest_rd_atomic;
  out->min_rnr_timer = a.min_rnr_timer;
  out->port_num = a.port_num != 0 ? a.port_num : 1;
  out->timeout = a.timeout;
  out->retry_cnt = a.retry_cnt;
  out->rnr_retry = a.rnr_retry;
  out->alt_port_num = 0;
  out->alt_timeout = 0;
  out->rate_limit = a.rate_limit;
}

void to_device_attr(const abi::ctl::QueryDeviceReply& r, ibv_device_attr_ex* out) {
  *out = ibv_device_attr_ex{};
  ibv_device_attr& d = out->orig_attr;
  std::snprintf(d.fw_ver, sizeof d.fw_ver, "%s", r.fw_ver);
  d.node_guid = htobe64(r.node_guid);
  d.sys_image_guid = htobe64(r.sys_image_guid);
  d.max_mr_size = r.max_mr_size;
  d.page_size_cap = r.page_size_cap;
  d.vendor_id = r.vendor_id;
  d.vendor_part_id = r.vendor_part_id;
  d.hw_ver = r.hw_ver;
  d.max_qp = static_cast<int>(r.max_qp);
  d.max_qp_wr = static_cast<int>(r.max_qp_wr);
  d.device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_SYS_IMAGE_GUID;
  d.max_sge = static_cast<int>(r.max_sge);
  d.max_sge_rd = static_cast<int>(r.max_sge);
  d.max_cq = static_cast<int>(r.max_cq);
  d.max_cqe = static_cast<int>(r.max_cqe);
  d.max_mr = static_cast<int>(r.max_mr);
  d.max_pd = static_cast<int>(r.max_pd);
  d.max_qp_rd_atom = static_cast<int>(r.max_qp_rd_atom);
  d.max_ee_rd_atom = 0;
  d.max_res_rd_atom = static_cast<int>(r.max_qp_rd_atom * r.max_qp);
  d.max_qp_init_rd_atom = static_cast<int>(r.max_qp_init_rd_atom);
  d.max_ee_init_rd_atom = 0;
  d.atomic_cap = static_cast<ibv_atomic_cap>(r.atomic_cap);
  d.max_ee = 0;
  d.max_rdd = 0;
  d.max_mw = static_cast<int>(r.max_mw);  // 0 from a droced before minor 10
  if (r.max_mw != 0) d.device_cap_flags |= IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B;  // as rxe
  if (r.max_xrcds != 0) d.device_cap_flags |= IBV_DEVICE_XRC;  // droced of minor 12 on
  d.max_raw_ipv6_qp = 0;
  d.max_raw_ethy_qp = 0;
  d.max_mcast_grp = static_cast<int>(r.max_mcast_grp);
  d.max_mcast_qp_attach = static_cast<int>(r.max_mcast_qp_attach);
  d.max_total_mcast_qp_attach = static_cast<int>(r.max_total_mcast_qp_attach);
  d.max_ah = static_cast<int>(r.max_ah);
  d.max_fmr = 0;
  d.max_map_per_fmr = 0;
  d.max_srq = static_cast<int>(r.max_srq);
  d.max_srq_wr = static_cast<int>(r.max_srq_wr);
  d.max_srq_sge = static_cast<int>(r.max_srq_sge);
  d.max_pkeys = static_cast<uint16_t>(r.max_pkeys);
  d.local_ca_ack_delay = 15;  // 4.096 us * 2^15, as rxe reports
  d.phys_port_cnt = static_cast<uint8_t>(r.phys_port_cnt);
  // The kernel's uverbs ABI (Linux 6.2's IB_UVERBS_DEVICE_FLUSH_GLOBAL and _ATOMIC_WRITE, which
  // libibverbs copies into device_cap_flags_ex; neither rdma-core 44 nor 56 names them): what rxe
  // reports, less FLUSH_PERSISTENT (bit 39: no persistent memory here).
  constexpr uint64_t kDeviceFlushGlobal = 1ull << 38;
  constexpr uint64_t kDeviceAtomicWrite = 1ull << 40;
  out->device_cap_flags_ex = uint64_t(unsigned(d.device_cap_flags)) | kDeviceFlushGlobal | kDeviceAtomicWrite;
  out->phys_port_cnt_ex = r.phys_port_cnt;
  if (r.device_caps & abi::ctl::kDeviceCapCompletionTimestamp) {
    // droced stamps completions with CLOCK_MONOTONIC in ns: a 64-bit clock at 1 GHz.
    out->completion_timestamp_mask = UINT64_MAX;
    out->hca_core_clock = 1'000'000;  // kHz
  }
  out->max_dm_size = r.max_dm_size;  // 0 from a droced before minor 11
  // RSS over WQs (provider/verbs/flow.cc, rocev2/raw_flow.h): raw packet QPs, Toeplitz over the
  // IPv4/IPv6 addresses and TCP/UDP ports the mask names, tables of up to 2^7 WQs (the
  // provider's lists, as many as memory holds). Each WQ is a QP of droced's.
  out->rss_caps.supported_qpts = 1u << IBV_QPT_RAW_PACKET;
  out->rss_caps.max_rwq_indirection_tables = 1u << 16;
  out->rss_caps.max_rwq_indirection_table_size = 1u << 7;
  out->rss_caps.rx_hash_fields_mask = IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4 | IBV_RX_HASH_SRC_IPV6 |
                                      IBV_RX_HASH_DST_IPV6 | IBV_RX_HASH_SRC_PORT_TCP | IBV_RX_HASH_DST_PORT_TCP |
                                      IBV_RX_HASH_SRC_PORT_UDP | IBV_RX_HASH_DST_PORT_UDP;
  out->rss_caps.rx_hash_function = IBV_RX_HASH_FUNC_TOEPLITZ;
  out->max_wq_type_rq = static_cast<uint32_t>(d.max_qp);
  if (r.device_caps & abi::ctl::kDeviceCapOnDemandPaging) {
    // What the engine serves through an ODP region (rocev2/mr.h OdpMemory): every local
    // gather and scatter, and every remote access, so each transport's own operations. UC has
    // no READ or atomics, UD no RDMA; an XRC receive goes to its SRQ.
    out->odp_caps.general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
    out->odp_caps.per_transport_caps.rc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV |
                                                   IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
                                                   IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
    out->odp_caps.per_transport_caps.uc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV |
                                                   IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_SRQ_RECV;
    out->odp_caps.per_transport_caps.ud_odp_caps =
        IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV;
    out->xrc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
                        IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
  }
}

void eth_speed(uint32_t mbps, uint8_t* width, uint8_t* speed) {
  // IB_WIDTH_1X 1, 2X 16, 4X 2; IB_SPEED_SDR 1, DDR 2, FDR10 8, EDR 32, HDR 64, NDR 128.
  struct Step {
    uint32_t up_to;
    uint8_t width, speed;
  };
  static constexpr Step kSteps[] = {
      {1000, 1, 1},   {10000, 1, 8},  {20000, 2, 2},   {25000, 1, 32},
      {40000, 2, 8},  {50000, 16, 32}, {100000, 2, 32}, {200000, 2, 64},
  };
  for (const Step& s : kSteps) {
    if (mbps <= s.up_to) {
      *width = s.width;
      *speed = s.speed;
      return;
    }
  }
  *width = 2;
  *speed = 128;
}

void to_port_attr(const abi::ctl::QueryPortReply& r, ibv_port_attr* out) {
  *out = ibv_port_attr{};
  out->state = static_cast<ibv_port_state>(r.state);
  out->max_mtu = static_cast<ibv_mtu>(r.max_mtu);
  out->active_mtu = static_cast<ibv_mtu>(r.active_mtu);
  out->gid_tbl_len = static_cast<int>(r.gid_tbl_len);
  out->port_cap_flags = r.port_cap_flags;
  out->max_msg_sz = r.max_msg_sz;
  out->pkey_tbl_len = static_cast<uint16_t>(r.pkey_tbl_len);
  out->lid = 0;
  out->sm_lid = 0;
  out->lmc = 0;
  out->max_vl_num = 1;
  out->phys_state = r.phys_state;
  out->link_layer = r.link_layer;
  if (r.link_speed_mbps != 0) {
    eth_speed(r.link_speed_mbps, &out->active_width, &out->active_speed);
  } else {
    out->active_width = r.active_width;
    out->active_speed = r.active_speed;
  }
}

}  // namespace droce::verbs
