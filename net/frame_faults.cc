#include "net/frame_faults.h"

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

}  // namespace

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
