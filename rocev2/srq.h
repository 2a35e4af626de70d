#pragma once
// A shared receive queue (IBA 10.2.9): receive WQEs any attached QP consumes,
// with a limit that raises an async event once when the queue falls below it.
// An XRC SRQ (IBA Annex A14) belongs to an XRC domain and has a CQ of its own:
// no QP names it at create; each XRC request names it by number (its id) in
// the XRCETH, and its receives complete into its CQ.
// Threading: owned by one lcore.

#include <cerrno>
#include <cstdint>
#include <vector>

#include "rocev2/qp.h"

namespace droce::rocev2 {

class Srq {
 public:
  Srq(uint32_t id, uint32_t pd, uint32_t depth, uint32_t max_sge, uint32_t xrcd = 0, Cq* cq = nullptr)
      : id_(id), pd_(pd), max_sge_(max_sge), xrcd_(xrcd), cq_(cq), ring_(depth) {}

  uint32_t id() const { return id_; }
  uint32_t pd() const { return pd_; }
  /// XRC: its domain (nonzero) and CQ; a basic SRQ has neither.
  bool is_xrc() const { return xrcd_ != 0; }
  uint32_t xrcd() const { return xrcd_; }
  Cq* cq() const { return cq_; }
  uint32_t depth() const { return static_cast<uint32_t>(ring_.size()); }
  uint32_t max_sge() const { return max_sge_; }
  uint32_t size() const { return head_ - tail_; }
  uint32_t limit() const { return limit_; }
  /// WQEs taken so far (free-running): droced releases shared ring slots by it.
  uint32_t consumed() const { return tail_; }

  /// -ENOMEM when full, -EINVAL for too many SGEs.
  int post(const RecvWr& wr) {
    if (wr.num_sge > max_sge_) return -EINVAL;
    if (size() == depth()) return -ENOMEM;
    RecvWqe& w = ring_[head_ % depth()];
    w.wr_id = wr.wr_id;
    w.num_sge = wr.num_sge;
    for (uint32_t i = 0; i < wr.num_sge; ++i) w.sg_list[i] = wr.sg_list[i];
    ++head_;
    return 0;
  }

  /// Takes the oldest WQE. False when empty. Sets *limit_reached when this
  /// take crossed an armed limit (the event fires once; the limit disarms).
  bool take(RecvWqe* out, bool* limit_reached) {
    *limit_reached = false;
    if (size() == 0) return false;
    *out = ring_[tail_ % depth()];
    ++tail_;
    if (limit_ != 0 && size() < limit_) {
      *limit_reached = true;
      limit_ = 0;  // IBA 10.2.9.4: the limit disarms when it fires
    }
    return true;
  }

  /// Arms the limit (0 disarms). -EINVAL when larger than the depth.
  int set_limit(uint32_t limit) {
    if (limit > depth()) return -EINVAL;
    limit_ = limit;
    return 0;
  }

 private:
  uint32_t id_;
  uint32_t pd_;
  uint32_t max_sge_;
  uint32_t xrcd_;
  Cq* cq_;
  std::vector<RecvWqe> ring_;
  uint32_t head_ = 0;
  uint32_t tail_ = 0;
  uint32_t limit_ = 0;
};

}  // namespace droce::rocev2
