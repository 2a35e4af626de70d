#include "cm/mad.h"

#include <algorithm>
#include <cstring>

#include "core/endian.h"

namespace droce::cm {

namespace {

using core::load_be16;
using core::load_be24;
using core::load_be32;
using core::load_be64;
using core::store_be16;
using core::store_be32;
using core::store_be64;

// A message's bytes: the 232 after the MAD header, numbered as the IBTA
// tables number them (byte 0 = the first after the header).
class Reader {
 public:
  explicit Reader(const uint8_t* mad) : p_(mad + kMadHeaderSize) {}
  uint8_t u8(size_t at) const { return p_[at]; }
  uint16_t u16(size_t at) const { return load_be16(p_ + at); }
  uint32_t u24(size_t at) const { return load_be24(p_ + at); }
  uint32_t u32(size_t at) const { return load_be32(p_ + at); }
  uint64_t u64(size_t at) const { return load_be64(p_ + at); }
  /// `width` bits of byte `at` starting at IBTA bit `bit` (0 = the most significant).
  uint8_t bits(size_t at, unsigned bit, unsigned width) const {
    return static_cast<uint8_t>((p_[at] >> (8 - bit - width)) & ((1u << width) - 1));
  }
  net::IpAddr gid(size_t at) const {
    net::IpAddr g;
    std::memcpy(g.data(), p_ + at, 16);
    return g;
  }
  template <size_t N>
  void bytes(size_t at, std::array<uint8_t, N>* out) const {
    std::memcpy(out->data(), p_ + at, N);
  }

 private:
  const uint8_t* p_;
};

class Writer {
 public:
  explicit Writer(uint8_t* mad) : p_(mad + kMadHeaderSize) {}
  void u8(size_t at, uint32_t v) { p_[at] = static_cast<uint8_t>(v); }
  void u16(size_t at, uint32_t v) { store_be16(p_ + at, static_cast<uint16_t>(v)); }
  void u24(size_t at, uint32_t v) {
    p_[at] = static_cast<uint8_t>(v >> 16);
    p_[at + 1] = static_cast<uint8_t>(v >> 8);
    p_[at + 2] = static_cast<uint8_t>(v);
  }
  void u32(size_t at, uint32_t v) { store_be32(p_ + at, v); }
  void u64(size_t at, uint64_t v) { store_be64(p_ + at, v); }
  /// ORs `width` bits of v into byte `at` at IBTA bit `bit` (the byte starts zero).
  void bits(size_t at, unsigned bit, unsigned width, uint32_t v) {
    p_[at] = static_cast<uint8_t>(p_[at] | ((v & ((1u << width) - 1)) << (8 - bit - width)));
  }
  void gid(size_t at, const net::IpAddr& g) { std::memcpy(p_ + at, g.data(), 16); }
  template <size_t N>
  void bytes(size_t at, const std::array<uint8_t, N>& in) {
    std::memcpy(p_ + at, in.data(), N);
  }

 private:
  uint8_t* p_;
};

// A REQ path: 44 bytes at `at` (56 for the primary, 100 for the alternate
// with its LIDs 4 bytes before: 52 and 96).
void read_path(const Reader& r, size_t lids, ReqPath* p) {
  p->local_lid = r.u16(lids);
  p->remote_lid = r.u16(lids + 2);
  p->local_gid = r.gid(lids + 4);
  p->remote_gid = r.gid(lids + 20);
  const uint32_t w = r.u32(lids + 36);
  p->flow_label = w >> 12;
  p->packet_rate = static_cast<uint8_t>(w & 0x3F);
  p->traffic_class = r.u8(lids + 40);
  p->hop_limit = r.u8(lids + 41);
  p->sl = r.bits(lids + 42, 0, 4);
  p->subnet_local = r.bits(lids + 42, 4, 1) != 0;
  p->local_ack_timeout = r.bits(lids + 43, 0, 5);
}

void write_path(Writer& w, size_t lids, const ReqPath& p) {
  w.u16(lids, p.local_lid);
  w.u16(lids + 2, p.remote_lid);
  w.gid(lids + 4, p.local_gid);
  w.gid(lids + 20, p.remote_gid);
  w.u32(lids + 36, ((p.flow_label & 0xFFFFF) << 12) | (p.packet_rate & 0x3F));
  w.u8(lids + 40, p.traffic_class);
  w.u8(lids + 41, p.hop_limit);
  w.bits(lids + 42, 0, 4, p.sl);
  w.bits(lids + 42, 4, 1, p.subnet_local);
  w.bits(lids + 43, 0, 5, p.local_ack_timeout);
}

MadError read_req(const Reader& r, Req* m) {
  m->local_comm_id = r.u32(0);
  m->vendor_id = r.u24(5);
  m->service_id = r.u64(8);
  m->local_ca_guid = r.u64(16);
  m->local_qkey = r.u32(28);
  m->local_qpn = r.u24(32);
  m->responder_resources = r.u8(35);
  m->local_eecn = r.u24(36);
  m->initiator_depth = r.u8(39);
  m->remote_eecn = r.u24(40);
  m->remote_cm_response_timeout = r.bits(43, 0, 5);
  m->transport = static_cast<TransportType>(r.bits(43, 5, 2));
  m->end_to_end_flow_control = r.bits(43, 7, 1) != 0;
  m->starting_psn = r.u24(44);
  m->local_cm_response_timeout = r.bits(47, 0, 5);
  m->retry_count = r.bits(47, 5, 3);
  m->pkey = r.u16(48);
  m->path_mtu = r.bits(50, 0, 4);
  m->rdc_exists = r.bits(50, 4, 1) != 0;
  m->rnr_retry_count = r.bits(50, 5, 3);
  m->max_cm_retries = r.bits(51, 0, 4);
  m->srq = r.bits(51, 4, 1) != 0;
  m->extended_transport = r.bits(51, 5, 3);
  read_path(r, 52, &m->primary);
  read_path(r, 96, &m->alternate);
  m->sap_supported = r.bits(139, 5, 1) != 0;
  r.bytes(140, &m->private_data);
  return MadError::ok;
}

void write_req(Writer& w, const Req& m) {
  w.u32(0, m.local_comm_id);
  w.u24(5, m.vendor_id);
  w.u64(8, m.service_id);
  w.u64(16, m.local_ca_guid);
  w.u32(28, m.local_qkey);
  w.u24(32, m.local_qpn);
  w.u8(35, m.responder_resources);
  w.u24(36, m.local_eecn);
  w.u8(39, m.initiator_depth);
  w.u24(40, m.remote_eecn);
  w.bits(43, 0, 5, m.remote_cm_response_timeout);
  w.bits(43, 5, 2, static_cast<uint8_t>(m.transport));
  w.bits(43, 7, 1, m.end_to_end_flow_control);
  w.u24(44, m.starting_psn);
  w.bits(47, 0, 5, m.local_cm_response_timeout);
  w.bits(47, 5, 3, m.retry_count);
  w.u16(48, m.pkey);
  w.bits(50, 0, 4, m.path_mtu);
  w.bits(50, 4, 1, m.rdc_exists);
  w.bits(50, 5, 3, m.rnr_retry_count);
  w.bits(51, 0, 4, m.max_cm_retries);
  w.bits(51, 4, 1, m.srq);
  w.bits(51, 5, 3, m.extended_transport);
  write_path(w, 52, m.primary);
  write_path(w, 96, m.alternate);
  w.bits(139, 5, 1, m.sap_supported);
  w.bytes(140, m.private_data);
}

MadError read_mra(const Reader& r, Mra* m) {
  m->local_comm_id = r.u32(0);
  m->remote_comm_id = r.u32(4);
  const uint8_t which = r.bits(8, 0, 2);
  if (which > uint8_t(MsgRef::other)) return MadError::bad_field;
  m->message_mraed = static_cast<MsgRef>(which);
  m->service_timeout = r.bits(9, 0, 5);
  r.bytes(10, &m->private_data);
  return MadError::ok;
}

void write_mra(Writer& w, const Mra& m) {
  w.u32(0, m.local_comm_id);
  w.u32(4, m.remote_comm_id);
  w.bits(8, 0, 2, static_cast<uint8_t>(m.message_mraed));
  w.bits(9, 0, 5, m.service_timeout);
  w.bytes(10, m.private_data);
}

MadError read_rej(const Reader& r, Rej* m) {
  m->local_comm_id = r.u32(0);
  m->remote_comm_id = r.u32(4);
  const uint8_t which = r.bits(8, 0, 2);
  m->ari_length = r.bits(9, 0, 7);
  if (which > uint8_t(MsgRef::other) || m->ari_length > kRejAriMax) return MadError::bad_field;
  m->message_rejected = static_cast<MsgRef>(which);
  m->reason = r.u16(10);
  r.bytes(12, &m->ari);
  r.bytes(84, &m->private_data);
  return MadError::ok;
}

void write_rej(Writer& w, const Rej& m) {
  w.u32(0, m.local_comm_id);
  w.u32(4, m.remote_comm_id);
  w.bits(8, 0, 2, static_cast<uint8_t>(m.message_rejected));
  w.bits(9, 0, 7, std::min<uint8_t>(m.ari_length, kRejAriMax));
  w.u16(10, m.reason);
  w.bytes(12, m.ari);
  w.bytes(84, m.private_data);
}

MadError read_rep(const Reader& r, Rep* m) {
  m->local_comm_id = r.u32(0);
  m->remote_comm_id = r.u32(4);
  m->local_qkey = r.u32(8);
  m->local_qpn = r.u24(12);
  m->vendor_id = (uint32_t{r.u8(15)} << 16) | (uint32_t{r.u8(19)} << 8) | r.u8(23);
  m->local_eecn = r.u24(16);
  m->starting_psn = r.u24(20);
  m->responder_resources = r.u8(24);
  m->initiator_depth = r.u8(25);
  m->target_ack_delay = r.bits(26, 0, 5);
  m->failover_accepted = r.bits(26, 5, 2);
  m->end_to_end_flow_control = r.bits(26, 7, 1) != 0;
  m->rnr_retry_count = r.bits(27, 0, 3);
  m->srq = r.bits(27, 3, 1) != 0;
  m->local_ca_guid = r.u64(28);
  r.bytes(36, &m->private_data);
  return MadError::ok;
}

void write_rep(Writer& w, const Rep& m) {
  w.u32(0, m.local_comm_id);
  w.u32(4, m.remote_comm_id);
  w.u32(8, m.local_qkey);
  w.u24(12, m.local_qpn);
  w.u8(15, m.vendor_id >> 16);
  w.u24(16, m.local_eecn);
  w.u8(19, m.vendor_id >> 8);
  w.u24(20, m.starting_psn);
  w.u8(23, m.vendor_id);
  w.u8(24, m.responder_resources);
  w.u8(25, m.initiator_depth);
  w.bits(26, 0, 5, m.target_ack_delay);
  w.bits(26, 5, 2, m.failover_accepted);
  w.bits(26, 7, 1, m.end_to_end_flow_control);
  w.bits(27, 0, 3, m.rnr_retry_count);
  w.bits(27, 3, 1, m.srq);
  w.u64(28, m.local_ca_guid);
  w.bytes(36, m.private_data);
}

MadError read_dreq(const Reader& r, Dreq* m) {
  m->local_comm_id = r.u32(0);
  m->remote_comm_id = r.u32(4);
  m->remote_qpn = r.u24(8);
  r.bytes(12, &m->private_data);
  return MadError::ok;
}

void write_dreq(Writer& w, const Dreq& m) {
  w.u32(0, m.local_comm_id);
  w.u32(4, m.remote_comm_id);
  w.u24(8, m.remote_qpn);
  w.bytes(12, m.private_data);
}

// RTU and DREP: the two comm IDs and 224 bytes of private data.
template <typename M>
MadError read_ids_and_data(const Reader& r, M* m) {
  m->local_comm_id = r.u32(0);
  m->remote_comm_id = r.u32(4);
  r.bytes(8, &m->private_data);
  return MadError::ok;
}

template <typename M>
void write_ids_and_data(Writer& w, const M& m) {
  w.u32(0, m.local_comm_id);
  w.u32(4, m.remote_comm_id);
  w.bytes(8, m.private_data);
}

MadError read_sidr_req(const Reader& r, SidrReq* m) {
  m->request_id = r.u32(0);
  m->pkey = r.u16(4);
  m->service_id = r.u64(8);
  r.bytes(16, &m->private_data);
  return MadError::ok;
}

void write_sidr_req(Writer& w, const SidrReq& m) {
  w.u32(0, m.request_id);
  w.u16(4, m.pkey);
  w.u64(8, m.service_id);
  w.bytes(16, m.private_data);
}

MadError read_sidr_rep(const Reader& r, SidrRep* m) {
  m->request_id = r.u32(0);
  m->status = r.u8(4);
  m->info_length = r.u8(5);
  if (m->info_length > kSidrRepInfoMax) return MadError::bad_field;
  m->qpn = r.u24(8);
  m->service_id = r.u64(12);
  m->qkey = r.u32(20);
  r.bytes(24, &m->info);
  r.bytes(96, &m->private_data);
  return MadError::ok;
}

void write_sidr_rep(Writer& w, const SidrRep& m) {
  w.u32(0, m.request_id);
  w.u8(4, m.status);
  w.u8(5, std::min<uint8_t>(m.info_length, kSidrRepInfoMax));
  w.u24(8, m.qpn);
  w.u64(12, m.service_id);
  w.u32(20, m.qkey);
  w.bytes(24, m.info);
  w.bytes(96, m.private_data);
}

template <typename M, MadError (*Read)(const Reader&, M*)>
MadError read_into(const Reader& r, Message* out) {
  M m;
  const MadError e = Read(r, &m);
  if (e == MadError::ok) *out = std::move(m);
  return e;
}

}  // namespace

const char* to_string(MadError e) {
  switch (e) {
    case MadError::ok: return "ok";
    case MadError::short_mad: return "short_mad";
    case MadError::bad_base_version: return "bad_base_version";
    case MadError::not_cm: return "not_cm";
    case MadError::bad_class_version: return "bad_class_version";
    case MadError::bad_method: return "bad_method";
    case MadError::unknown_attribute: return "unknown_attribute";
    case MadError::bad_field: return "bad_field";
  }
  return "?";
}

const char* attr_name(uint16_t attr_id) {
  switch (static_cast<AttrId>(attr_id)) {
    case AttrId::req: return "ConnectRequest";
    case AttrId::mra: return "MsgRcptAck";
    case AttrId::rej: return "ConnectReject";
    case AttrId::rep: return "ConnectReply";
    case AttrId::rtu: return "ReadyToUse";
    case AttrId::dreq: return "DisconnectRequest";
    case AttrId::drep: return "DisconnectReply";
    case AttrId::sidr_req: return "ServiceIDResReq";
    case AttrId::sidr_rep: return "ServiceIDResReqResp";
    case AttrId::lap: return "LoadAlternatePath";
    case AttrId::apr: return "AlternatePathResponse";
  }
  return "unknown";
}

AttrId attr_of(const Message& msg) {
  static constexpr AttrId kByIndex[] = {AttrId::req,  AttrId::mra,  AttrId::rej,      AttrId::rep,     AttrId::rtu,
                                        AttrId::dreq, AttrId::drep, AttrId::sidr_req, AttrId::sidr_rep};
  static_assert(std::size(kByIndex) == std::variant_size_v<Message>);
  return kByIndex[msg.index()];
}

MadHeader decode_header(std::span<const uint8_t> mad) {
  MadHeader h;
  if (mad.size() < kMadHeaderSize) return h;
  const uint8_t* p = mad.data();
  h.base_version = p[0];
  h.mgmt_class = p[1];
  h.class_version = p[2];
  h.method = p[3];
  h.status = load_be16(p + 4);
  h.class_specific = load_be16(p + 6);
  h.tid = load_be64(p + 8);
  h.attr_id = static_cast<AttrId>(load_be16(p + 16));
  h.attr_mod = load_be32(p + 20);
  return h;
}

MadError decode(std::span<const uint8_t> mad, MadHeader* hdr, Message* out) {
  if (mad.size() < kMadSize) return MadError::short_mad;
  *hdr = decode_header(mad);
  if (hdr->base_version != kBaseVersion) return MadError::bad_base_version;
  if (hdr->mgmt_class != kClassCm) return MadError::not_cm;
  if (hdr->class_version != kCmClassVersion) return MadError::bad_class_version;
  if (hdr->method != kMethodSend) return MadError::bad_method;
  const Reader r(mad.data());
  switch (hdr->attr_id) {
    case AttrId::req: return read_into<Req, read_req>(r, out);
    case AttrId::mra: return read_into<Mra, read_mra>(r, out);
    case AttrId::rej: return read_into<Rej, read_rej>(r, out);
    case AttrId::rep: return read_into<Rep, read_rep>(r, out);
    case AttrId::rtu: return read_into<Rtu, read_ids_and_data<Rtu>>(r, out);
    case AttrId::dreq: return read_into<Dreq, read_dreq>(r, out);
    case AttrId::drep: return read_into<Drep, read_ids_and_data<Drep>>(r, out);
    case AttrId::sidr_req: return read_into<SidrReq, read_sidr_req>(r, out);
    case AttrId::sidr_rep: return read_into<SidrRep, read_sidr_rep>(r, out);
    case AttrId::lap:
    case AttrId::apr: break;  // alternate paths: not on RoCE
  }
  return MadError::unknown_attribute;
}

void encode(const MadHeader& hdr, const Message& msg, Mad* out) {
  out->fill(0);
  uint8_t* p = out->data();
  p[0] = hdr.base_version;
  p[1] = hdr.mgmt_class;
  p[2] = hdr.class_version;
  p[3] = hdr.method;
  store_be16(p + 4, hdr.status);
  store_be16(p + 6, hdr.class_specific);
  store_be64(p + 8, hdr.tid);
  store_be16(p + 16, static_cast<uint16_t>(attr_of(msg)));
  store_be32(p + 20, hdr.attr_mod);
  Writer w(p);
  std::visit(
      [&w](const auto& m) {
        using M = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<M, Req>) write_req(w, m);
        else if constexpr (std::is_same_v<M, Mra>) write_mra(w, m);
        else if constexpr (std::is_same_v<M, Rej>) write_rej(w, m);
        else if constexpr (std::is_same_v<M, Rep>) write_rep(w, m);
        else if constexpr (std::is_same_v<M, Dreq>) write_dreq(w, m);
        else if constexpr (std::is_same_v<M, SidrReq>) write_sidr_req(w, m);
        else if constexpr (std::is_same_v<M, SidrRep>) write_sidr_rep(w, m);
        else write_ids_and_data(w, m);  // Rtu, Drep
      },
      msg);
}

// ---- IP CM ----------------------------------------------------------------------------------

bool parse_ip_service_id(uint64_t sid, PortSpace* ps, uint16_t* port) {
  if ((sid & 0xFFFFFFFFFF000000ULL) != 0x0000000001000000ULL) return false;
  *ps = static_cast<PortSpace>((sid >> 16) & 0xFF);
  *port = static_cast<uint16_t>(sid);
  return true;
}

namespace {

// IPv4 as 12 zero bytes and the address (cma.c's union cma_ip_addr), not ::ffff:-mapped.
void put_ip(uint8_t* at, const net::IpAddr& a, bool v4) {
  if (v4) {
    std::memset(at, 0, 12);
    std::memcpy(at + 12, a.data() + 12, 4);
  } else {
    std::memcpy(at, a.data(), 16);
  }
}

net::IpAddr get_ip(const uint8_t* at, bool v4) {
  net::IpAddr a{};
  if (v4) {
    a[10] = 0xFF;
    a[11] = 0xFF;
    std::memcpy(a.data() + 12, at + 12, 4);
  } else {
    std::memcpy(a.data(), at, 16);
  }
  return a;
}

}  // namespace

void encode_ip_cm_header(const IpCmHeader& h, std::span<uint8_t> out) {
  uint8_t* p = out.data();
  p[0] = h.cma_version;
  p[1] = static_cast<uint8_t>(h.ip_version << 4);
  store_be16(p + 2, h.src_port);
  put_ip(p + 4, h.src, h.ip_version == 4);
  put_ip(p + 20, h.dst, h.ip_version == 4);
}

bool decode_ip_cm_header(std::span<const uint8_t> in, IpCmHeader* out) {
  if (in.size() < kIpCmHeaderSize) return false;
  const uint8_t* p = in.data();
  const uint8_t ipv = p[1] >> 4;
  if (p[0] != 0 || (ipv != 4 && ipv != 6)) return false;
  out->cma_version = p[0];
  out->ip_version = ipv;
  out->src_port = load_be16(p + 2);
  out->src = get_ip(p + 4, ipv == 4);
  out->dst = get_ip(p + 20, ipv == 4);
  return true;
}

}  // namespace droce::cm
