#pragma once
// FrameBytes: read-only access to a frame's bytes, whether they sit in one
// contiguous buffer (a pcap record, a fuzz input) or in a DPDK mbuf chain
// (RX with scatter, TX with the payload in a second segment).
//
// The parser and the ICRC walk frames only through this type, so one
// implementation serves every source. Nothing here allocates or copies more
// than the caller's scratch buffer holds.
//
// Threading: a FrameBytes is a view; it is as thread-safe as the bytes.

#include <rte_mbuf.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace droce::net {

class FrameBytes {
 public:
  explicit FrameBytes(std::span<const uint8_t> bytes) : flat_(bytes), size_(bytes.size()) {}
  explicit FrameBytes(const rte_mbuf* m) : mbuf_(m), size_(m->pkt_len) {}

  size_t size() const { return size_; }

  /// Bytes [off, off + len): a pointer into the frame when they are
  /// contiguous there, else a copy in `scratch` (at least `len` bytes).
  /// nullptr when the range passes the end of the frame.
  const uint8_t* read(size_t off, size_t len, uint8_t* scratch) const {
    if (off > size_ || len > size_ - off) return nullptr;
    if (mbuf_ == nullptr) return flat_.data() + off;
    const rte_mbuf* seg = mbuf_;
    while (seg != nullptr && off >= seg->data_len) {
      off -= seg->data_len;
      seg = seg->next;
    }
    if (seg == nullptr) return nullptr;  // pkt_len larger than the chain: a broken mbuf
    const auto* p = rte_pktmbuf_mtod_offset(seg, const uint8_t*, off);
    if (len <= seg->data_len - off) return p;
    size_t done = 0;
    while (seg != nullptr && done < len) {
      size_t n = std::min<size_t>(seg->data_len - off, len - done);
      std::memcpy(scratch + done, rte_pktmbuf_mtod_offset(seg, const uint8_t*, off), n);
      done += n;
      off = 0;
      seg = seg->next;
    }
    return done == len ? scratch : nullptr;
  }

  /// Calls fn(const uint8_t* p, size_t n) for each contiguous piece of
  /// [off, off + len), in order. Returns false when the range passes the end.
  template <class Fn>
  bool for_each_piece(size_t off, size_t len, Fn&& fn) const {
    if (off > size_ || len > size_ - off) return false;
    if (mbuf_ == nullptr) {
      if (len != 0) fn(flat_.data() + off, len);
      return true;
    }
    for (const rte_mbuf* seg = mbuf_; seg != nullptr && len != 0; seg = seg->next) {
      if (off >= seg->data_len) {
        off -= seg->data_len;
        continue;
      }
      size_t n = std::min<size_t>(seg->data_len - off, len);
      fn(rte_pktmbuf_mtod_offset(seg, const uint8_t*, off), n);
      len -= n;
      off = 0;
    }
    return len == 0;
  }

 private:
  std::span<const uint8_t> flat_{};
  const rte_mbuf* mbuf_ = nullptr;
  size_t size_ = 0;
};

}  // namespace droce::net
