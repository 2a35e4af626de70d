#include "cm/mad.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
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
// tables number them (byte 0 = the first after the header). Reader and Writer
// offer the same calls, so each message's layout is written once (fields()
// below) and serves both directions: what is read is what is written.
class Reader {
 public:
  explicit Reader(const uint8_t* mad) : p_(mad + kMadHeaderSize) {}
  void u8(size_t at, uint8_t& v) const { v = p_[at]; }
  void u16(size_t at, uint16_t& v) const { v = load_be16(p_ + at); }
  void u24(size_t at, uint32_t& v) const { v = load_be24(p_ + at); }
  void u32(size_t at, uint32_t& v) const { v = load_be32(p_ + at); }
  void u64(size_t at, uint64_t& v) const { v = load_be64(p_ + at); }
  /// `width` bits of byte `at` from IBTA bit `bit` (0 = the most significant), into an
  /// integer, bool or enum.
  template <typename T>
  void bits(size_t at, unsigned bit, unsigned width, T& v) const {
    v = static_cast<T>((p_[at] >> (8 - bit - width)) & ((1u << width) - 1));
  }
  void gid(size_t at, net::IpAddr& g) const { std::memcpy(g.data(), p_ + at, 16); }
  template <size_t N>
  void bytes(size_t at, std::array<uint8_t, N>& out) const {
    std::memcpy(out.data(), p_ + at, N);
  }

 private:
  const uint8_t* p_;
};

class Writer {
 public:
  explicit Writer(uint8_t* mad) : p_(mad + kMadHeaderSize) {}
  void u8(size_t at, uint8_t v) { p_[at] = v; }
  void u16(size_t at, uint16_t v) { store_be16(p_ + at, v); }
  void u24(size_t at, uint32_t v) {
    p_[at] = static_cast<uint8_t>(v >> 16);
    p_[at + 1] = static_cast<uint8_t>(v >> 8);
    p_[at + 2] = static_cast<uint8_t>(v);
  }
  void u32(size_t at, uint32_t v) { store_be32(p_ + at, v); }
  void u64(size_t at, uint64_t v) { store_be64(p_ + at, v); }
  /// ORs the low `width` bits of v into byte `at` at IBTA bit `bit` (the byte starts zero).
  template <typename T>
  void bits(size_t at, unsigned bit, unsigned width, T v) {
    const auto x = static_cast<uint32_t>(v) & ((1u << width) - 1);
    p_[at] = static_cast<uint8_t>(p_[at] | (x << (8 - bit - width)));
  }
  void gid(size_t at, const net::IpAddr& g) { std::memcpy(p_ + at, g.data(), 16); }
  template <size_t N>
  void bytes(size_t at, const std::array<uint8_t, N>& in) {
    std::memcpy(p_ + at, in.data(), N);
  }

 private:
  uint8_t* p_;
};

// Each layout, for Reader (M non-const) and Writer (M const). Offsets and bit
// positions: IBTA Vol. 1 tables 106-120 (../shared/notes/rdma-cm.md 3.4).

// A REQ path: the LIDs at `lids` (52 primary, 96 alternate), then GIDs, flow
// label (20 bits) and packet rate (6) in one word, traffic class, hop limit,
// SL and subnet-local, local ACK timeout.
template <typename IO, typename P>
void path_fields(IO& io, size_t lids, P& p) {
  io.u16(lids, p.local_lid);
  io.u16(lids + 2, p.remote_lid);
  io.gid(lids + 4, p.local_gid);
  io.gid(lids + 20, p.remote_gid);
  io.u8(lids + 40, p.traffic_class);
  io.u8(lids + 41, p.hop_limit);
  io.bits(lids + 42, 0, 4, p.sl);
  io.bits(lids + 42, 4, 1, p.subnet_local);
  io.bits(lids + 43, 0, 5, p.local_ack_timeout);
}

template <typename IO, typename M>
void req_fields(IO& io, M& m) {
  io.u32(0, m.local_comm_id);
  io.u24(5, m.vendor_id);
  io.u64(8, m.service_id);
  io.u64(16, m.local_ca_guid);
  io.u32(28, m.local_qkey);
  io.u24(32, m.local_qpn);
  io.u8(35, m.responder_resources);
  io.u24(36, m.local_eecn);
  io.u8(39, m.initiator_depth);
  io.u24(40, m.remote_eecn);
  io.bits(43, 0, 5, m.remote_cm_response_timeout);
  io.bits(43, 5, 2, m.transport);
  io.bits(43, 7, 1, m.end_to_end_flow_control);
  io.u24(44, m.starting_psn);
  io.bits(47, 0, 5, m.local_cm_response_timeout);
  io.bits(47, 5, 3, m.retry_count);
  io.u16(48, m.pkey);
  io.bits(50, 0, 4, m.path_mtu);
  io.bits(50, 4, 1, m.rdc_exists);
  io.bits(50, 5, 3, m.rnr_retry_count);
  io.bits(51, 0, 4, m.max_cm_retries);
  io.bits(51, 4, 1, m.srq);
  io.bits(51, 5, 3, m.extended_transport);
  path_fields(io, 52, m.primary);
  path_fields(io, 96, m.alternate);
  io.bits(139, 5, 1, m.sap_supported);
  io.bytes(140, m.private_data);
}

template <typename IO, typename M>
void mra_fields(IO& io, M& m) {
  io.u32(0, m.local_comm_id);
  io.u32(4, m.remote_comm_id);
  io.bits(8, 0, 2, m.message_mraed);
  io.bits(9, 0, 5, m.service_timeout);
  io.bytes(10, m.private_data);
}

template <typename IO, typename M>
void rej_fields(IO& io, M& m) {
  io.u32(0, m.local_comm_id);
  io.u32(4, m.remote_comm_id);
  io.bits(8, 0, 2, m.message_rejected);
  io.bits(9, 0, 7, m.ari_length);
  io.u16(10, m.reason);
  io.bytes(12, m.ari);
  io.bytes(84, m.private_data);
}

template <typename IO, typename M>
void rep_fields(IO& io, M& m) {
  io.u32(0, m.local_comm_id);
  io.u32(4, m.remote_comm_id);
  io.u32(8, m.local_qkey);
  io.u24(12, m.local_qpn);
  io.u24(16, m.local_eecn);
  io.u24(20, m.starting_psn);
  io.u8(24, m.responder_resources);
  io.u8(25, m.initiator_depth);
  io.bits(26, 0, 5, m.target_ack_delay);
  io.bits(26, 5, 2, m.failover_accepted);
  io.bits(26, 7, 1, m.end_to_end_flow_control);
  io.bits(27, 0, 3, m.rnr_retry_count);
  io.bits(27, 3, 1, m.srq);
  io.u64(28, m.local_ca_guid);
  io.bytes(36, m.private_data);
}

template <typename IO, typename M>
void dreq_fields(IO& io, M& m) {
  io.u32(0, m.local_comm_id);
  io.u32(4, m.remote_comm_id);
  io.u24(8, m.remote_qpn);
  io.bytes(12, m.private_data);
}

// RTU and DREP: the two comm IDs and 224 bytes of private data.
template <typename IO, typename M>
void ids_and_data_fields(IO& io, M& m) {
  io.u32(0, m.local_comm_id);
  io.u32(4, m.remote_comm_id);
  io.bytes(8, m.private_data);
}

template <typename IO, typename M>
void sidr_req_fields(IO& io, M& m) {
  io.u32(0, m.request_id);
  io.u16(4, m.pkey);
  io.u64(8, m.service_id);
  io.bytes(16, m.private_data);
}

template <typename IO, typename M>
void sidr_rep_fields(IO& io, M& m) {
  io.u32(0, m.request_id);
  io.u8(4, m.status);
  io.u8(5, m.info_length);
  io.u24(8, m.qpn);
  io.u64(12, m.service_id);
  io.u32(20, m.qkey);
  io.bytes(24, m.info);
  io.bytes(96, m.private_data);
}

template <typename IO, typename M>
void fields(IO& io, M& m) {
  using T = std::remove_const_t<M>;
  if constexpr (std::is_same_v<T, Req>) req_fields(io, m);
  else if constexpr (std::is_same_v<T, Mra>) mra_fields(io, m);
  else if constexpr (std::is_same_v<T, Rej>) rej_fields(io, m);
  else if constexpr (std::is_same_v<T, Rep>) rep_fields(io, m);
  else if constexpr (std::is_same_v<T, Dreq>) dreq_fields(io, m);
  else if constexpr (std::is_same_v<T, SidrReq>) sidr_req_fields(io, m);
  else if constexpr (std::is_same_v<T, SidrRep>) sidr_rep_fields(io, m);
  else ids_and_data_fields(io, m);  // Rtu, Drep
}

// What fields() cannot say: words split across fields (the REQ paths' flow
// label and packet rate; the REP's vendor ID over bytes 15, 19 and 23) and
// the ranges a receiver must check.
void read_extras(const uint8_t* mad, Req* m) {
  for (auto [lids, p] : {std::pair{size_t{52}, &m->primary}, std::pair{size_t{96}, &m->alternate}}) {
    const uint32_t w = load_be32(mad + kMadHeaderSize + lids + 36);
    p->flow_label = w >> 12;
    p->packet_rate = static_cast<uint8_t>(w & 0x3F);
  }
}
void write_extras(uint8_t* mad, const Req& m) {
  for (auto [lids, p] : {std::pair{size_t{52}, &m.primary}, std::pair{size_t{96}, &m.alternate}})
    store_be32(mad + kMadHeaderSize + lids + 36, ((p->flow_label & 0xFFFFF) << 12) | (p->packet_rate & 0x3F));
}
void read_extras(const uint8_t* mad, Rep* m) {
  const uint8_t* r = mad + kMadHeaderSize;
  m->vendor_id = (uint32_t{r[15]} << 16) | (uint32_t{r[19]} << 8) | r[23];
}
void write_extras(uint8_t* mad, const Rep& m) {
  uint8_t* r = mad + kMadHeaderSize;
  r[15] = static_cast<uint8_t>(m.vendor_id >> 16);
  r[19] = static_cast<uint8_t>(m.vendor_id >> 8);
  r[23] = static_cast<uint8_t>(m.vendor_id);
}
template <typename M>
void read_extras(const uint8_t*, M*) {}
template <typename M>
void write_extras(uint8_t*, const M&) {}

bool in_range(const Mra& m) { return m.message_mraed <= MsgRef::other; }
bool in_range(const Rej& m) { return m.message_rejected <= MsgRef::other && m.ari_length <= kRejAriMax; }
bool in_range(const SidrRep& m) { return m.info_length <= kSidrRepInfoMax; }
template <typename M>
bool in_range(const M&) {
  return true;
}

template <typename M>
MadError read_into(const uint8_t* mad, Message* out) {
  M m;
  Reader r(mad);
  fields(r, m);
  read_extras(mad, &m);
  if (!in_range(m)) return MadError::bad_field;
  *out = std::move(m);
  return MadError::ok;
}

// Lengths past their field are cut to it on the way out.
template <typename M>
M clamped(M m) {
  if constexpr (std::is_same_v<M, Rej>) m.ari_length = std::min<uint8_t>(m.ari_length, kRejAriMax);
  if constexpr (std::is_same_v<M, SidrRep>) m.info_length = std::min<uint8_t>(m.info_length, kSidrRepInfoMax);
  return m;
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
  const uint8_t* p = mad.data();
  switch (hdr->attr_id) {
    case AttrId::req: return read_into<Req>(p, out);
    case AttrId::mra: return read_into<Mra>(p, out);
    case AttrId::rej: return read_into<Rej>(p, out);
    case AttrId::rep: return read_into<Rep>(p, out);
    case AttrId::rtu: return read_into<Rtu>(p, out);
    case AttrId::dreq: return read_into<Dreq>(p, out);
    case AttrId::drep: return read_into<Drep>(p, out);
    case AttrId::sidr_req: return read_into<SidrReq>(p, out);
    case AttrId::sidr_rep: return read_into<SidrRep>(p, out);
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
  std::visit(
      [p](const auto& m) {
        const auto c = clamped(m);
        Writer w(p);
        fields(w, c);
        write_extras(p, c);
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

namespace {

std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%" PRIx64, v);
  return b;
}

std::string service(uint64_t sid) {
  PortSpace ps;
  uint16_t port = 0;
  std::string s = " service_id=" + hex(sid);
  if (parse_ip_service_id(sid, &ps, &port)) {
    const char* name = ps == PortSpace::tcp ? "TCP" : ps == PortSpace::udp ? "UDP" : ps == PortSpace::ib ? "IB" : "IPoIB";
    s += " (" + std::string(name) + " port " + std::to_string(port) + ")";
  }
  return s;
}

std::string ids(uint32_t local, uint32_t remote) {
  return " local_comm_id=" + hex(local) + " remote_comm_id=" + hex(remote);
}

}  // namespace

std::string describe_mad(std::span<const uint8_t> mad) {
  MadHeader h;
  Message msg;
  const MadError err = decode(mad, &h, &msg);
  if (err != MadError::ok) {
    const MadHeader raw = decode_header(mad);
    return std::string("malformed CM MAD: ") + to_string(err) + " (attribute " + hex(uint16_t(raw.attr_id)) + " " +
           attr_name(uint16_t(raw.attr_id)) + ")";
  }
  std::string s = std::string(attr_name(uint16_t(h.attr_id))) + " tid=" + hex(h.tid);
  std::visit(
      [&](const auto& m) {
        using M = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<M, Req>) {
          s += " local_comm_id=" + hex(m.local_comm_id) + service(m.service_id) + " qpn=" + hex(m.local_qpn) +
               " psn=" + hex(m.starting_psn) + " mtu=" + std::to_string(128u << m.path_mtu);
        } else if constexpr (std::is_same_v<M, Rep>) {
          s += ids(m.local_comm_id, m.remote_comm_id) + " qpn=" + hex(m.local_qpn) + " psn=" + hex(m.starting_psn);
        } else if constexpr (std::is_same_v<M, Rej>) {
          s += ids(m.local_comm_id, m.remote_comm_id) + " reason=" + std::to_string(m.reason);
        } else if constexpr (std::is_same_v<M, Mra>) {
          s += ids(m.local_comm_id, m.remote_comm_id) + " service_timeout=" + std::to_string(m.service_timeout);
        } else if constexpr (std::is_same_v<M, Dreq>) {
          s += ids(m.local_comm_id, m.remote_comm_id) + " remote_qpn=" + hex(m.remote_qpn);
        } else if constexpr (std::is_same_v<M, Rtu> || std::is_same_v<M, Drep>) {
          s += ids(m.local_comm_id, m.remote_comm_id);
        } else if constexpr (std::is_same_v<M, SidrReq>) {
          s += " request_id=" + hex(m.request_id) + service(m.service_id);
        } else if constexpr (std::is_same_v<M, SidrRep>) {
          s += " request_id=" + hex(m.request_id) + " status=" + std::to_string(m.status) + " qpn=" + hex(m.qpn) +
               " qkey=" + hex(m.qkey);
        }
      },
      msg);
  return s;
}

}  // namespace droce::cm
