#include "net/frame_faults.h"

#include "net/frame_build.h"
#include "net/headers.h"

namespace droce::net {
namespace {

bool segment_shared(const rte_mbuf* seg) { return !RTE_MBUF_DIRECT(seg) || rte_mbuf_refcnt_read(seg) > 1; }

// *m as a frame of our own: itself, or a deep copy replacing it.
bool make_private(rte_mbuf** m, rte_mempool* pool) {
  if (!frame_is_shared(*m)) return true;
  rte_mbuf* copy = copy_frame(*m, pool);
  if (copy == nullptr) return false;
  rte_pktmbuf_free(*m);
  *m = copy;
  return true;
}

// Where the IP header starts in the first segment, and whether it is IPv4; -1 if not IP.
int ip_offset(const rte_mbuf* m, bool* v4) {
  const auto* p = rte_pktmbuf_mtod(m, const uint8_t*);
  size_t off = kEthHdrLen;
  if (m->data_len < kEthHdrLen) return -1;
  uint16_t type = static_cast<uint16_t>(p[12] << 8 | p[13]);
  if (type == kEtherTypeVlan) {
    if (m->data_len < kEthHdrLen + kVlanHdrLen) return -1;
    type = static_cast<uint16_t>(p[16] << 8 | p[17]);
    off += kVlanHdrLen;
  }
  *v4 = type == kEtherTypeIpv4;
  if (!*v4 && type != kEtherTypeIpv6) return -1;
  if (m->data_len < off + (*v4 ? kIpv4HdrLen : kIpv6HdrLen)) return -1;
  if (*v4 && (p[off] >> 4 != 4 || m->data_len < off + (p[off] & 0x0f) * 4u)) return -1;
  return static_cast<int>(off);
}

}  // namespace

int frame_ecn(const rte_mbuf* m) {
  bool v4;
  const int off = ip_offset(m, &v4);
  if (off < 0) return -1;
  const auto* ip = rte_pktmbuf_mtod_offset(m, const uint8_t*, off);
  return v4 ? ip[1] & kEcnMask : (ip[1] >> 4) & kEcnMask;  // IPv6: the traffic class's low bits
}

bool set_frame_ce(rte_mbuf** frame, rte_mempool* pool) {
  bool v4;
  const int off = ip_offset(*frame, &v4);
  if (off < 0) return false;
  if (frame_ecn(*frame) == kEcnCe) return true;
  if (!make_private(frame, pool)) return false;
  auto* ip = rte_pktmbuf_mtod_offset(*frame, uint8_t*, off);
  if (v4) {
    ip[1] |= kEcnCe;
    const size_t ihl = (ip[0] & 0x0f) * 4u;
    ip[10] = ip[11] = 0;
    const uint16_t sum = inet_checksum(ip, ihl);
    ip[10] = static_cast<uint8_t>(sum >> 8);
    ip[11] = static_cast<uint8_t>(sum);
  } else {
    ip[1] |= kEcnCe << 4;
  }
  return true;
}

rte_mbuf* copy_frame(const rte_mbuf* m, rte_mempool* pool) {
  return pool == nullptr ? nullptr : rte_pktmbuf_copy(m, pool, 0, UINT32_MAX);
}

bool frame_is_shared(const rte_mbuf* m) {
  for (const rte_mbuf* seg = m; seg != nullptr; seg = seg->next)
    if (segment_shared(seg)) return true;
  return false;
}

bool flip_frame_bit(rte_mbuf** frame, uint64_t bit, rte_mempool* pool) {
  if (bit / 8 >= (*frame)->pkt_len) return false;
  if (!make_private(frame, pool)) return false;
  uint64_t off = bit / 8;
  rte_mbuf* seg = *frame;
  while (seg != nullptr && off >= seg->data_len) {
    off -= seg->data_len;
    seg = seg->next;
  }
  if (seg == nullptr) return false;  // pkt_len longer than the chain: a broken mbuf
  *rte_pktmbuf_mtod_offset(seg, uint8_t*, off) ^= static_cast<uint8_t>(1u << (bit % 8));
  return true;
}

bool truncate_frame(rte_mbuf** frame, uint32_t keep_len, rte_mempool* pool) {
  if (keep_len >= (*frame)->pkt_len) return false;
  if (!make_private(frame, pool)) return false;
  rte_mbuf* m = *frame;
  // Walk to the segment where the frame now ends; free the ones after it.
  uint32_t left = keep_len;
  rte_mbuf* seg = m;
  uint16_t nb = 1;
  while (left > seg->data_len) {
    left -= seg->data_len;
    seg = seg->next;
    ++nb;
  }
  if (seg->next != nullptr) {
    rte_pktmbuf_free(seg->next);
    seg->next = nullptr;
  }
  seg->data_len = static_cast<uint16_t>(left);
  m->nb_segs = nb;
  m->pkt_len = keep_len;
  return true;
}

}  // namespace droce::net
