// What raw packet QPs receive with: flow steering, work queues and receive-side scaling.
//
// Flow steering (ibv_create_flow(3)): the verbs specs of one rule folded into one
// abi::FlowMatch (abi/flow.h), which droced's engine matches received frames against
// (rocev2/raw_flow.h). Specs: Ethernet, IPv4 and IPv4 extended, IPv6, TCP, UDP, at most one per
// layer. Tunnels, inner headers, MPLS, ESP and flow actions are not offered (EOPNOTSUPP), nor
// the attribute flags (DONT_TRAP, EGRESS).
//
// Work queues (ibv_create_wq(3), receive WQs only): each is a raw packet QP of its own in
// droced whose receive queue the WQ posts to and whose CQ is the WQ's; ready is RTR. An
// indirection table (ibv_create_rwq_ind_table) is the provider's list of them, and a QP created
// with IBV_QP_INIT_ATTR_RX_HASH and a table is a raw QP with no queues of its own that droced's
// engine spreads over the table by Toeplitz hash (set_rss).
#include <endian.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <new>
#include <vector>

#include "provider/verbs/objects.h"

namespace droce::verbs {

namespace {

// One field's value and mask, bytes as the spec has them (addresses, MACs).
template <size_t N>
void take(uint8_t (&value)[N], uint8_t (&mask)[N], const void* spec_value, const void* spec_mask) {
  std::memcpy(value, spec_value, N);
  std::memcpy(mask, spec_mask, N);
}

int add_spec(const ibv_flow_spec& spec, abi::FlowMatch* m) {
  const uint32_t type = spec.hdr.type;
  auto need = [&](size_t size, uint8_t layer) {
    if (spec.hdr.size < size) return EINVAL;
    if (m->layers & layer) return EINVAL;  // one spec per layer
    m->layers |= layer;
    return 0;
  };
  switch (type) {
    case IBV_FLOW_SPEC_ETH: {
      if (int rc = need(sizeof(ibv_flow_spec_eth), abi::kFlowEth); rc != 0) return rc;
      const ibv_flow_spec_eth& e = spec.eth;
      take(m->eth_dst, m->eth_dst_mask, e.val.dst_mac, e.mask.dst_mac);
      take(m->eth_src, m->eth_src_mask, e.val.src_mac, e.mask.src_mac);
      m->ether_type = be16toh(e.val.ether_type);
      m->ether_type_mask = be16toh(e.mask.ether_type);
      m->vlan_tag = be16toh(e.val.vlan_tag);
      m->vlan_tag_mask = be16toh(e.mask.vlan_tag);
      return 0;
    }
    case IBV_FLOW_SPEC_IPV4:
    case IBV_FLOW_SPEC_IPV4_EXT: {
      const bool ext = type == IBV_FLOW_SPEC_IPV4_EXT;
      if (m->layers & abi::kFlowIpv6) return EINVAL;
      if (int rc = need(ext ? sizeof(ibv_flow_spec_ipv4_ext) : sizeof(ibv_flow_spec_ipv4), abi::kFlowIpv4); rc != 0)
        return rc;
      // The two share their first fields (addresses in network order, as on the wire).
      take(m->ip4_src, m->ip4_src_mask, &spec.ipv4.val.src_ip, &spec.ipv4.mask.src_ip);
      take(m->ip4_dst, m->ip4_dst_mask, &spec.ipv4.val.dst_ip, &spec.ipv4.mask.dst_ip);
      if (ext) {
        const ibv_flow_spec_ipv4_ext& x = spec.ipv4_ext;
        m->ip4_proto = x.val.proto;
        m->ip4_proto_mask = x.mask.proto;
        m->ip4_tos = x.val.tos;
        m->ip4_tos_mask = x.mask.tos;
        m->ip4_ttl = x.val.ttl;
        m->ip4_ttl_mask = x.mask.ttl;
        m->ip4_flags = x.val.flags;
        m->ip4_flags_mask = x.mask.flags;
      }
      return 0;
    }
    case IBV_FLOW_SPEC_IPV6: {
      if (m->layers & abi::kFlowIpv4) return EINVAL;
      if (int rc = need(sizeof(ibv_flow_spec_ipv6), abi::kFlowIpv6); rc != 0) return rc;
      const ibv_flow_spec_ipv6& x = spec.ipv6;
      take(m->ip6_src, m->ip6_src_mask, x.val.src_ip, x.mask.src_ip);
      take(m->ip6_dst, m->ip6_dst_mask, x.val.dst_ip, x.mask.dst_ip);
      m->ip6_flow_label = be32toh(x.val.flow_label);
      m->ip6_flow_label_mask = be32toh(x.mask.flow_label);
      m->ip6_next_hdr = x.val.next_hdr;
      m->ip6_next_hdr_mask = x.mask.next_hdr;
      m->ip6_tclass = x.val.traffic_class;
      m->ip6_tclass_mask = x.mask.traffic_class;
      m->ip6_hop_limit = x.val.hop_limit;
      m->ip6_hop_limit_mask = x.mask.hop_limit;
      return 0;
    }
    case IBV_FLOW_SPEC_TCP:
    case IBV_FLOW_SPEC_UDP: {
      if (m->layers & (abi::kFlowTcp | abi::kFlowUdp)) return EINVAL;
      const uint8_t layer = type == IBV_FLOW_SPEC_TCP ? abi::kFlowTcp : abi::kFlowUdp;
      if (int rc = need(sizeof(ibv_flow_spec_tcp_udp), layer); rc != 0) return rc;
      const ibv_flow_spec_tcp_udp& x = spec.tcp_udp;
      m->l4_src = be16toh(x.val.src_port);
      m->l4_src_mask = be16toh(x.mask.src_port);
      m->l4_dst = be16toh(x.val.dst_port);
      m->l4_dst_mask = be16toh(x.mask.dst_port);
      return 0;
    }
    default:
      return EOPNOTSUPP;  // tunnels, inner headers, MPLS, ESP, actions
  }
}

struct DroceFlow {
  ibv_flow ibv;
  VerbsQp* qp;
};

// A receive WQ: libibverbs' object, and the raw QP in droced behind it (Object<ibv_qp>: the
// droce slot right before the ibv_qp, as the glue's QPs have it).
struct DroceWq {
  ibv_wq ibv;
  Object<ibv_qp> qp;
};

DroceWq* wq_of(ibv_wq* wq) { return reinterpret_cast<DroceWq*>(wq); }

struct DroceIndTable {
  ibv_rwq_ind_table ibv;
  std::vector<uint32_t> wqs;  ///< their QPNs in droced
  ibv_cq* first_cq = nullptr;
};

std::atomic<int> g_ind_tables{0};

int modify_raw(ibv_qp* qp, ibv_qp_state state) {
  ibv_qp_attr a{};
  a.qp_state = state;
  a.port_num = 1;
  return droce_modify_qp(qp, &a, state == IBV_QPS_INIT ? (IBV_QP_STATE | IBV_QP_PORT) : IBV_QP_STATE);
}

}  // namespace

// An RSS QP (queues.cc hands it here): a raw packet QP with no queues of its own (the CQs of
// its table's first WQ stand in: it never completes anything), then the table and hash given
// to droced.
int create_rss_qp(ibv_context* context, ibv_qp_init_attr_ex* attr, ibv_qp* qp, void** slot) {
  constexpr uint32_t kRss = IBV_QP_INIT_ATTR_RX_HASH | IBV_QP_INIT_ATTR_IND_TABLE;
  if ((attr->comp_mask & kRss) != kRss || attr->qp_type != IBV_QPT_RAW_PACKET || attr->rwq_ind_tbl == nullptr ||
      attr->rwq_ind_tbl->context != context)
    return EINVAL;
  const ibv_rx_hash_conf& h = attr->rx_hash_conf;
  if (h.rx_hash_function != IBV_RX_HASH_FUNC_TOEPLITZ) return EOPNOTSUPP;
  if (h.rx_hash_key_len > 40 || (h.rx_hash_key_len != 0 && h.rx_hash_key == nullptr)) return EINVAL;
  if (h.rx_hash_fields_mask & ~uint64_t{0xff}) return EOPNOTSUPP;  // IPsec SPI, inner headers
  auto* t = reinterpret_cast<DroceIndTable*>(attr->rwq_ind_tbl);
  ibv_qp_init_attr_ex own = *attr;
  own.comp_mask &= ~kRss;
  own.send_cq = own.recv_cq = t->first_cq;
  own.srq = nullptr;
  own.cap = ibv_qp_cap{1, 1, 1, 1, 0};
  if (int rc = droce_glue_create_qp(context, &own, qp, nullptr, slot); rc != 0) return rc;
  abi::ctl::RssRequest req{};
  req.fields = static_cast<uint32_t>(h.rx_hash_fields_mask);
  req.key_len = h.rx_hash_key_len;
  if (h.rx_hash_key_len != 0) std::memcpy(req.key, h.rx_hash_key, h.rx_hash_key_len);
  req.log_table = static_cast<uint8_t>(std::countr_zero(t->wqs.size()));
  std::copy(t->wqs.begin(), t->wqs.end(), req.wqs);
  VerbsQp* v = static_cast<VerbsQp*>(*slot);
  if (int rc = v->ctx->client->set_rss(v->qp, req); rc != 0) {
    (void)droce_glue_destroy_qp(qp);
    return positive(rc);
  }
  attr->cap = ibv_qp_cap{};  // no queues of its own
  return 0;
}

extern "C" {

ibv_flow* droce_create_flow(ibv_qp* qp, ibv_flow_attr* attr) {
  if (qp == nullptr || attr == nullptr) return fail<ibv_flow>(EINVAL);
  if (attr->comp_mask != 0 || attr->port != 1) return fail<ibv_flow>(EINVAL);
  if (attr->flags != 0) return fail<ibv_flow>(EOPNOTSUPP);
  abi::ctl::CreateFlowRequest req{};
  switch (attr->type) {
    case IBV_FLOW_ATTR_NORMAL: req.type = uint8_t(abi::FlowType::normal); break;
    case IBV_FLOW_ATTR_ALL_DEFAULT: req.type = uint8_t(abi::FlowType::all_default); break;
    case IBV_FLOW_ATTR_MC_DEFAULT: req.type = uint8_t(abi::FlowType::mc_default); break;
    case IBV_FLOW_ATTR_SNIFFER: req.type = uint8_t(abi::FlowType::sniffer); break;
    default: return fail<ibv_flow>(EINVAL);
  }
  req.priority = attr->priority;
  // The specs follow the attribute, each its own size long.
  const auto* at = reinterpret_cast<const uint8_t*>(attr + 1);
  for (uint8_t i = 0; i < attr->num_of_specs; ++i) {
    const auto* spec = reinterpret_cast<const ibv_flow_spec*>(at);
    if (spec->hdr.size < sizeof(spec->hdr)) return fail<ibv_flow>(EINVAL);
    if (int rc = add_spec(*spec, &req.match); rc != 0) return fail<ibv_flow>(rc);
    at += spec->hdr.size;
  }
  VerbsQp* v = qp_of(qp);
  auto* f = new (std::nothrow) DroceFlow{};
  if (f == nullptr) return fail<ibv_flow>(ENOMEM);
  uint32_t id = 0;
  if (int rc = v->ctx->client->create_flow(v->qp, req, &id); rc != 0) {
    delete f;
    return fail<ibv_flow>(rc);
  }
  f->ibv.context = qp->context;
  f->ibv.handle = id;
  f->qp = v;
  return &f->ibv;
}

int droce_destroy_flow(ibv_flow* flow) {
  auto* f = reinterpret_cast<DroceFlow*>(flow);
  if (int rc = f->qp->ctx->client->destroy_flow(flow->handle); rc != 0 && rc != -EIO) return positive(rc);
  delete f;
  return 0;
}

static int droce_wq_post_recv(ibv_wq* wq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  return droce_post_recv(&wq_of(wq)->qp.obj, wr, bad_wr);
}

ibv_wq* droce_create_wq(ibv_context* context, ibv_wq_init_attr* attr) {
  if (attr == nullptr || attr->pd == nullptr || attr->cq == nullptr || attr->pd->context != context ||
      attr->cq->context != context)
    return fail<ibv_wq>(EINVAL);
  if (attr->wq_type != IBV_WQT_RQ) return fail<ibv_wq>(EINVAL);
  if (attr->comp_mask != 0 || attr->create_flags != 0) return fail<ibv_wq>(EOPNOTSUPP);
  auto* w = new (std::nothrow) DroceWq{};
  if (w == nullptr) return fail<ibv_wq>(ENOMEM);
  ibv_qp_init_attr_ex qa{};
  qa.qp_type = IBV_QPT_RAW_PACKET;
  qa.comp_mask = IBV_QP_INIT_ATTR_PD;
  qa.pd = attr->pd;
  qa.send_cq = qa.recv_cq = attr->cq;
  qa.cap = ibv_qp_cap{1, attr->max_wr, 1, attr->max_sge, 0};
  if (int rc = droce_glue_create_qp(context, &qa, &w->qp.obj, nullptr, &w->qp.droce); rc != 0) {
    delete w;
    return fail<ibv_wq>(rc);
  }
  w->ibv.context = context;
  w->ibv.pd = attr->pd;
  w->ibv.cq = attr->cq;
  w->ibv.wq_num = w->qp.obj.qp_num;
  w->ibv.handle = w->qp.obj.qp_num;
  w->ibv.state = IBV_WQS_RESET;
  w->ibv.wq_type = IBV_WQT_RQ;
  w->ibv.post_recv = droce_wq_post_recv;
  attr->max_wr = qa.cap.max_recv_wr;
  attr->max_sge = qa.cap.max_recv_sge;
  return &w->ibv;
}

// RESET -> RDY brings the QP to RTR (receiving); RDY -> RESET and anything -> ERR follow.
int droce_modify_wq(ibv_wq* wq, ibv_wq_attr* attr) {
  if (attr == nullptr) return EINVAL;
  if (attr->attr_mask & ~uint32_t{IBV_WQ_ATTR_STATE | IBV_WQ_ATTR_CURR_STATE}) return EOPNOTSUPP;
  if (!(attr->attr_mask & IBV_WQ_ATTR_STATE)) return 0;
  if ((attr->attr_mask & IBV_WQ_ATTR_CURR_STATE) && attr->curr_wq_state != wq->state) return EINVAL;
  ibv_qp* qp = &wq_of(wq)->qp.obj;
  const ibv_wq_state to = attr->wq_state;
  int rc = 0;
  switch (to) {
    case IBV_WQS_RDY:
      if (wq->state == IBV_WQS_RDY) return 0;
      if (wq->state != IBV_WQS_RESET) return EINVAL;
      if ((rc = modify_raw(qp, IBV_QPS_INIT)) == 0) rc = modify_raw(qp, IBV_QPS_RTR);
      break;
    case IBV_WQS_RESET: rc = modify_raw(qp, IBV_QPS_RESET); break;
    case IBV_WQS_ERR: rc = modify_raw(qp, IBV_QPS_ERR); break;
    default: return EINVAL;
  }
  if (rc == 0) wq->state = to;
  return rc;
}

int droce_destroy_wq(ibv_wq* wq) {
  DroceWq* w = wq_of(wq);
  if (int rc = droce_glue_destroy_qp(&w->qp.obj); rc != 0) return rc;
  delete w;
  return 0;
}

ibv_rwq_ind_table* droce_create_rwq_ind_table(ibv_context* context, ibv_rwq_ind_table_init_attr* attr) {
  if (attr == nullptr || attr->ind_tbl == nullptr || attr->log_ind_tbl_size > 7) return fail<ibv_rwq_ind_table>(EINVAL);
  if (attr->comp_mask != 0) return fail<ibv_rwq_ind_table>(EOPNOTSUPP);
  auto* t = new (std::nothrow) DroceIndTable{};
  if (t == nullptr) return fail<ibv_rwq_ind_table>(ENOMEM);
  const size_t n = size_t{1} << attr->log_ind_tbl_size;
  for (size_t i = 0; i < n; ++i) {
    ibv_wq* wq = attr->ind_tbl[i];
    if (wq == nullptr || wq->context != context) {
      delete t;
      return fail<ibv_rwq_ind_table>(EINVAL);
    }
    t->wqs.push_back(wq->wq_num);
  }
  t->first_cq = attr->ind_tbl[0]->cq;
  t->ibv.context = context;
  t->ibv.ind_tbl_handle = t->ibv.ind_tbl_num = ++g_ind_tables;
  return &t->ibv;
}

int droce_destroy_rwq_ind_table(ibv_rwq_ind_table* table) {
  delete reinterpret_cast<DroceIndTable*>(table);
  return 0;
}

}  // extern "C"

}  // namespace droce::verbs
