#pragma once
// A device's DCQCN parameters (`droce cc`, --cc, the config file's `cc` key): one copy shared
// by the device's cores, each of which hands a changed set to its engine at its next loop, as
// FaultRules does for fault rules. The parameters themselves, their names, units and the state
// machine they drive are in rocev2/dcqcn.h.
//
// Threading: set() and get() from any thread (a mutex: control path only); version() is one
// acquire load, read by every core once per loop.

#include <atomic>
#include <cstdint>
#include <mutex>

#include "rocev2/dcqcn.h"

namespace droce::droced {

class CcSettings {
 public:
  explicit CcSettings(const rocev2::CcParams& p = {}) : params_(p), defaults_(p) {}
  /// The device's defaults (its link's: droced/config.h cc_defaults_for()), what `droce cc`
  /// shows beside each value; set once at start, before any core runs.
  void set_defaults(const rocev2::CcParams& d) { defaults_ = d; }
  const rocev2::CcParams& defaults() const { return defaults_; }
  rocev2::CcParams get() const {
    std::lock_guard lock(mutex_);
    return params_;
  }
  void set(const rocev2::CcParams& p) {
    std::lock_guard lock(mutex_);
    params_ = p;
    version_.fetch_add(1, std::memory_order_release);
  }
  uint64_t version() const { return version_.load(std::memory_order_acquire); }

 private:
  mutable std::mutex mutex_;
  rocev2::CcParams params_;
  rocev2::CcParams defaults_;
  std::atomic<uint64_t> version_{1};
};

}  // namespace droce::droced
