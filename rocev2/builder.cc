#include "rocev2/builder.h"

#include <rte_ip.h>
#include <rte_mbuf.h>

#include <cerrno>

#include "core/endian.h"
#include "net/frame_bytes.h"
#include "rocev2/icrc.h"

namespace droce::rocev2 {

namespace {

using core::store_be16;
using core::store_be32;

uint8_t pad_for(uint32_t payload_len) { return static_cast<uint8_t>((4 - (payload_len & 3)) & 3); }

uint8_t* encode_ext_headers(const OpcodeInfo& info, const ExtHeaders& ext, uint8_t* p) {
  if (info.has(kHdrXrceth)) { ext.xrceth.encode(p); p += sizeof(XrcethWire); }
  if (info.has(kHdrFeth)) { ext.feth.encode(p); p += sizeof(FethWire); }
  if (info.has(kHdrDeth)) { ext.deth.encode(p); p += sizeof(DethWire); }
  if (info.has(kHdrReth)) { ext.reth.encode(p); p += sizeof(RethWire); }
  if (info.has(kHdrAtomicEth)) { ext.atomic_eth.encode(p); p += sizeof(AtomicEthWire); }
  if (info.has(kHdrAeth)) { ext.aeth.encode(p); p += sizeof(AethWire); }
  if (info.has(kHdrAtomicAckEth)) { ext.atomic_ack_eth.encode(p); p += sizeof(AtomicAckEthWire); }
  if (info.has(kHdrImmDt)) { ext.imm.encode(p); p += sizeof(ImmDtWire); }
  if (info.has(kHdrIeth)) { ext.ieth.encode(p); p += sizeof(IethWire); }
  if (info.has(kHdrCnp)) { ext.cnp.encode(p); p += sizeof(CnpWire); }
  return p;
}

size_t l2_len(const PacketHeaders& h) { return net::kEthHdrLen + (h.l2.vlan ? net::kVlanHdrLen : 0); }
size_t l3_len(const PacketHeaders& h) { return h.l3.version == 6 ? net::kIpv6HdrLen : net::kIpv4HdrLen; }

}  // namespace

size_t header_len(const PacketHeaders& h) {
  return l2_len(h) + l3_len(h) + net::kUdpHdrLen + sizeof(BthWire) + opcode_info(h.bth.opcode).ext_len;
}

size_t frame_len(const PacketHeaders& h, uint32_t payload_len) {
  return header_len(h) + payload_len + pad_for(payload_len) + kIcrcLen;
}

size_t write_headers(const PacketHeaders& h, uint32_t payload_len, uint8_t* out, PacketLayout* layout) {
  const OpcodeInfo& info = opcode_info(h.bth.opcode);
  if (!info.valid() || (!info.payload && payload_len != 0)) return 0;
  if (h.l3.version != 4 && h.l3.version != 6) return 0;
  const uint8_t pad = pad_for(payload_len);
  const size_t hlen = header_len(h);
  const size_t udp_len = hlen - l2_len(h) - l3_len(h) + payload_len + pad + kIcrcLen;
  if (udp_len > 0xffff - net::kIpv6HdrLen) return 0;

  uint8_t* p = out;
  std::memcpy(p, h.l2.dst.data(), 6);
  std::memcpy(p + 6, h.l2.src.data(), 6);
  p += 12;
  if (h.l2.vlan) {
    store_be16(p, net::kEtherTypeVlan);
    store_be16(p + 2, h.l2.vlan_tci);
    p += 4;
  }
  store_be16(p, h.l3.version == 6 ? net::kEtherTypeIpv6 : net::kEtherTypeIpv4);
  p += 2;

  PacketLayout at;
  at.l3_off = static_cast<uint16_t>(p - out);
  if (h.l3.version == 4) {
    p[0] = 0x45;
    p[1] = h.l3.tos;
    store_be16(p + 2, static_cast<uint16_t>(net::kIpv4HdrLen + udp_len));
    store_be16(p + 4, h.l3.ipv4_id);
    store_be16(p + 6, h.l3.ipv4_frag);
    p[8] = h.l3.ttl;
    p[9] = net::kIpProtoUdp;
    store_be16(p + 10, 0);
    store_be32(p + 12, ipv4_of(h.l3.src));
    store_be32(p + 16, ipv4_of(h.l3.dst));
    const uint16_t sum = rte_ipv4_cksum(reinterpret_cast<const rte_ipv4_hdr*>(p));
    std::memcpy(p + 10, &sum, 2);  // rte_ipv4_cksum returns it in network order
    p += net::kIpv4HdrLen;
  } else {
    store_be32(p, (6u << 28) | (uint32_t{h.l3.tos} << 20) | (h.l3.flow_label & 0xfffff));
    store_be16(p + 4, static_cast<uint16_t>(udp_len));
    p[6] = net::kIpProtoUdp;
    p[7] = h.l3.ttl;
    std::memcpy(p + 8, h.l3.src.data(), 16);
    std::memcpy(p + 24, h.l3.dst.data(), 16);
    p += net::kIpv6HdrLen;
  }

  at.l4_off = static_cast<uint16_t>(p - out);
  store_be16(p, h.l4.src_port);
  store_be16(p + 2, kRoceV2UdpPort);
  store_be16(p + 4, static_cast<uint16_t>(udp_len));
  store_be16(p + 6, h.l4.checksum);
  p += net::kUdpHdrLen;

  at.bth_off = static_cast<uint16_t>(p - out);
  Bth bth = h.bth;
  bth.pad = pad;
  bth.encode(p);
  p += sizeof(BthWire);
  p = encode_ext_headers(info, h.ext, p);

  at.payload_off = static_cast<uint16_t>(p - out);
  at.payload_len = payload_len;
  at.icrc_off = static_cast<uint32_t>(hlen + payload_len + pad);
  if (layout) *layout = at;
  return hlen;
}

size_t build_frame(const PacketHeaders& h, std::span<const uint8_t> payload, std::span<uint8_t> out) {
  if (out.size() < frame_len(h, static_cast<uint32_t>(payload.size()))) return 0;
  PacketLayout at;
  const size_t hlen = write_headers(h, static_cast<uint32_t>(payload.size()), out.data(), &at);
  if (hlen == 0) return 0;
  if (!payload.empty()) std::memcpy(out.data() + hlen, payload.data(), payload.size());
  std::memset(out.data() + hlen + payload.size(), 0, at.icrc_off - hlen - payload.size());
  refresh_icrc(out, at.l3_off, at.icrc_off, h.l3.version);
  return at.icrc_off + kIcrcLen;
}

int build_mbuf(const PacketHeaders& h, std::span<const uint8_t> payload, rte_mbuf* m) {
  const auto payload_len = static_cast<uint32_t>(payload.size());
  const size_t len = frame_len(h, payload_len);
  if (m->pkt_len != 0) return -EINVAL;
  if (len > rte_pktmbuf_tailroom(m)) return -ENOSPC;
  auto* out = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, static_cast<uint16_t>(len)));
  PacketLayout at;
  const size_t hlen = write_headers(h, payload_len, out, &at);
  if (hlen == 0) {
    rte_pktmbuf_reset(m);
    return -EINVAL;
  }
  if (payload_len != 0) std::memcpy(out + hlen, payload.data(), payload_len);
  std::memset(out + hlen + payload_len, 0, at.icrc_off - hlen - payload_len);
  const uint32_t icrc = compute_icrc(net::FrameBytes(m), at.l3_off, at.icrc_off, h.l3.version);
  core::store_le32(out + at.icrc_off, icrc);
  return 0;
}

int build_mbuf_chained(const PacketHeaders& h, rte_mbuf* head, rte_mbuf* payload, rte_mempool* tail_pool) {
  if (head->pkt_len != 0 || payload == nullptr) return -EINVAL;
  const uint32_t payload_len = payload->pkt_len;
  const size_t hlen = header_len(h);
  if (hlen > rte_pktmbuf_tailroom(head)) return -ENOSPC;
  auto* out = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(head, static_cast<uint16_t>(hlen)));
  PacketLayout at;
  if (write_headers(h, payload_len, out, &at) == 0) {
    rte_pktmbuf_reset(head);
    return -EINVAL;
  }
  const uint16_t tail_len = static_cast<uint16_t>(at.icrc_off - hlen - payload_len + kIcrcLen);
  rte_mbuf* last = rte_pktmbuf_lastseg(payload);
  rte_mbuf* extra = nullptr;
  uint8_t* tail = nullptr;
  // An indirect or external segment shares its buffer: never write into it.
  if (RTE_MBUF_DIRECT(last) && rte_mbuf_refcnt_read(last) == 1 &&
      rte_pktmbuf_tailroom(last) >= tail_len) {
    tail = rte_pktmbuf_mtod_offset(last, uint8_t*, last->data_len);
    last->data_len = static_cast<uint16_t>(last->data_len + tail_len);
    payload->pkt_len += tail_len;
  } else {
    extra = tail_pool ? rte_pktmbuf_alloc(tail_pool) : nullptr;
    if (extra == nullptr) {
      rte_pktmbuf_reset(head);
      return -ENOMEM;
    }
    tail = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(extra, tail_len));
    if (rte_pktmbuf_chain(payload, extra) != 0) {
      rte_pktmbuf_free(extra);
      rte_pktmbuf_reset(head);
      return -ENOSPC;
    }
  }
  std::memset(tail, 0, tail_len);  // pad, and the ICRC's place while it is computed
  if (rte_pktmbuf_chain(head, payload) != 0) {
    rte_pktmbuf_reset(head);  // too many segments; undo the tail
    if (extra) {
      rte_mbuf* s = payload;
      while (s->next != extra) s = s->next;
      s->next = nullptr;
      payload->nb_segs--;
      payload->pkt_len -= tail_len;
      rte_pktmbuf_free(extra);
    } else {
      last->data_len = static_cast<uint16_t>(last->data_len - tail_len);
      payload->pkt_len -= tail_len;
    }
    return -ENOSPC;
  }
  const uint32_t icrc = compute_icrc(net::FrameBytes(head), at.l3_off, at.icrc_off, h.l3.version);
  core::store_le32(tail + tail_len - kIcrcLen, icrc);
  return 0;
}

}  // namespace droce::rocev2
