#pragma once
// A completion queue: a fixed ring of completions, written by the engine,
// read by the application (in droced, the ring lives in shared memory and the
// provider polls it; here it is the engine's own).
//
// Overflow (IBA 11.4.2.1, C11-?) is an error on the CQ: the completion is
// lost, the CQ goes to error and raises the CQ error async event; QPs that
// complete into it are moved to error by the engine.
//
// Notification: arm(solicited_only) requests one event for the next
// completion (or the next solicited one); the event fires once per arm.
//
// Threading: owned by one lcore (the engine's); not synchronized.

#include <cstdint>
#include <vector>

#include "rocev2/verbs.h"

namespace droce::rocev2 {

/// Where a CQ's completions go instead of its own ring: droced's shared CQ
/// ring, which the application polls. One sink per CQ, same lcore.
class CqSink {
 public:
  virtual ~CqSink() = default;
  /// Stores one completion; false when there is no room (overflow).
  /// `solicited`: it would end a solicited-only arm (SE set, or an error).
  virtual bool push(const Completion& c, bool solicited) = 0;
  /// An armed notification fired (write the CQ's eventfd).
  virtual void notify() = 0;
};

class Cq {
 public:
  /// With a sink, completions go there and poll() finds nothing.
  Cq(uint32_t id, uint32_t depth, CqSink* sink = nullptr)
      : id_(id), depth_(depth), ring_(sink != nullptr ? 0 : depth), sink_(sink) {}

  uint32_t id() const { return id_; }
  uint32_t depth() const { return depth_; }
  uint32_t size() const { return count_; }
  bool in_error() const { return error_; }

  /// Appends a completion. False on overflow (and the CQ is then in error).
  /// `solicited`: the completion is for a message with SE set.
  bool push(const Completion& c, bool solicited) {
    if (error_) return false;
    const bool wakes_solicited = solicited || c.status != WcStatus::success;
    if (sink_ != nullptr ? !sink_->push(c, wakes_solicited) : count_ == ring_.size()) {
      error_ = true;
      ++overflows_;
      return false;
    }
    if (sink_ == nullptr) {
      ring_[(head_ + count_) % ring_.size()] = c;
      ++count_;
    }
    if (armed_ && (!solicited_only_ || wakes_solicited)) {
      armed_ = false;
      ++events_;
      if (sink_ != nullptr) sink_->notify();
    }
    return true;
  }

  /// Takes up to n completions, oldest first.
  uint32_t poll(Completion* out, uint32_t n) {
    uint32_t k = 0;
    for (; k < n && count_ != 0; ++k) {
      out[k] = ring_[head_];
      head_ = (head_ + 1) % ring_.size();
      --count_;
    }
    return k;
  }

  /// Requests one event for the next completion (or the next solicited or
  /// unsuccessful one when solicited_only).
  void arm(bool solicited_only) {
    // Re-arming for "any" widens an armed "solicited" request (IBA 11.4.2.2).
    solicited_only_ = armed_ ? (solicited_only_ && solicited_only) : solicited_only;
    armed_ = true;
  }

  /// Events raised so far; the driver of the engine delivers them.
  uint64_t events() const { return events_; }
  uint64_t overflows() const { return overflows_; }

 private:
  uint32_t id_;
  uint32_t depth_;
  std::vector<Completion> ring_;
  CqSink* sink_;
  uint32_t head_ = 0;
  uint32_t count_ = 0;
  bool error_ = false;
  bool armed_ = false;
  bool solicited_only_ = false;
  uint64_t events_ = 0;
  uint64_t overflows_ = 0;
};

}  // namespace droce::rocev2
