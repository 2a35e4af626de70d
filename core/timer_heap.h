#pragma once
// Deadlines for many objects (QPs), earliest first, cancelled lazily: the
// owner keeps its true deadline and decides, when an entry surfaces, whether
// it is stale (another incarnation: `gen`), early (the deadline moved later:
// queue it again) or due. O(log n) per entry, O(1) to read the earliest
// deadline, which a virtual-time driver needs to jump the clock. With one
// queued entry per object and timer at a time, the heap stays small.
//
// Why a heap and not a timing wheel: the engine's tests drive it in virtual
// time and must know the next deadline exactly; a wheel would need a scan.
// Arms happen per ACK that makes progress, not per packet.
//
// Threading: owned by one lcore.

#include <cstdint>
#include <queue>
#include <vector>

namespace droce::core {

class TimerHeap {
 public:
  struct Expired {
    uint32_t id;
    uint32_t kind;
  };

  /// (Re)arms timer `kind` of object `id` at `deadline_ns`; `gen` must be the
  /// object's current generation for that timer (the caller keeps it).
  void arm(uint32_t id, uint32_t kind, uint64_t deadline_ns, uint32_t gen) {
    heap_.push(Entry{deadline_ns, id, kind, gen});
  }

  /// Earliest deadline still queued (possibly stale); UINT64_MAX if none.
  uint64_t next_deadline() const { return heap_.empty() ? UINT64_MAX : heap_.top().deadline; }

  /// Pops entries due by now_ns, calling fire(id, kind, gen, deadline) for
  /// each; the callback decides what a surfacing entry means.
  template <class Fn>
  void expire(uint64_t now_ns, Fn&& fire) {
    while (!heap_.empty() && heap_.top().deadline <= now_ns) {
      const Entry e = heap_.top();
      heap_.pop();
      fire(e.id, e.kind, e.gen, e.deadline);
    }
  }

  size_t size() const { return heap_.size(); }

 private:
  struct Entry {
    uint64_t deadline;
    uint32_t id;
    uint32_t kind;
    uint32_t gen;
    bool operator>(const Entry& o) const { return deadline > o.deadline; }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap_;
};

}  // namespace droce::core
