#include "net/sim_link.h"

#include "net/frame_faults.h"

#include <algorithm>
#include <cassert>

namespace droce::net {
namespace {

uint64_t serialization_ns(uint32_t pkt_len, uint64_t rate_bps) {
  const unsigned __int128 bits_ns = static_cast<unsigned __int128>(pkt_len) * 8u * 1'000'000'000u;
  return static_cast<uint64_t>((bits_ns + rate_bps - 1) / rate_bps);
}

// The heap's comparator: true when a arrives after b, so the front is the
// earliest (arrival, seq).
bool later(const auto& a, const auto& b) {
  return a.arrival_ns != b.arrival_ns ? a.arrival_ns > b.arrival_ns : a.seq > b.seq;
}

}  // namespace

SimLink::SimLink(uint64_t seed, const LinkFaults& a_to_b, const LinkFaults& b_to_a,
                 rte_mempool* pool)
    : seed_(seed), pool_(pool) {
  dir_[0].faults = a_to_b;
  dir_[1].faults = b_to_a;
  // One generator per direction, far apart for seeds 0, 1, 2... and for the two directions.
  for (int i = 0; i < 2; ++i) dir_[i].dice = FaultDice(mix_seed(seed ^ (0xA5A5A5A5A5A5A5A5ull * (i + 1))));
}

SimLink::~SimLink() {
  for (Direction& d : dir_) {
    for (InFlight& f : d.heap) rte_pktmbuf_free(f.m);
    d.heap.clear();
  }
}

void SimLink::set_faults(int from, const LinkFaults& f) {
  assert(from == 0 || from == 1);
  dir_[from].faults = f;
  if (f.burst_enter <= 0) dir_[from].dice.heal();
}

const LinkStats& SimLink::stats(int from) const {
  assert(from == 0 || from == 1);
  return dir_[from].stats;
}

size_t SimLink::in_flight() const { return dir_[0].heap.size() + dir_[1].heap.size(); }

uint64_t SimLink::next_arrival_ns() const {
  uint64_t t = UINT64_MAX;
  for (const Direction& d : dir_)
    if (!d.heap.empty()) t = std::min(t, d.heap.front().arrival_ns);
  return t;
}

void SimLink::enqueue(Direction& d, rte_mbuf* m, uint64_t arrival_ns) {
  d.heap.push_back(InFlight{arrival_ns, d.next_seq++, m});
  std::push_heap(d.heap.begin(), d.heap.end(), [](const InFlight& a, const InFlight& b) { return later(a, b); });
}

void SimLink::send(int from, rte_mbuf* const* frames, uint16_t n, uint64_t now_ns) {
  assert(from == 0 || from == 1);
  Direction& d = dir_[from];
  const LinkFaults& f = d.faults;
  for (uint16_t i = 0; i < n; ++i) {
    rte_mbuf* m = frames[i];
    assert(m != nullptr);
    ++d.stats.sent;

    if (f.queue_limit != 0 && d.heap.size() >= f.queue_limit) {
      ++d.stats.queue_dropped;
      rte_pktmbuf_free(m);
      continue;
    }

    uint64_t t = now_ns;
    if (f.rate_bps != 0) {
      t = add_saturating(std::max(now_ns, d.serializer_free_ns), serialization_ns(m->pkt_len, f.rate_bps));
      d.serializer_free_ns = t;
    }

    const FrameFate fate = d.dice.roll(f, FrameRegions{m->pkt_len, 0, 0, 0});
    if (fate.lost) {
      ++d.stats.lost;
      d.stats.burst_lost += fate.burst_lost;
      rte_pktmbuf_free(m);
      continue;
    }
    const uint64_t arrival = add_saturating(t, fate.hold_ns);
    d.stats.reordered += fate.reordered;
    if (fate.corrupt) {
      if (flip_frame_bit(&m, fate.corrupt_bit, pool_)) ++d.stats.corrupted;
      else ++d.stats.copy_failed;
    }
    if (fate.truncate) {
      if (truncate_frame(&m, fate.keep_len, pool_)) ++d.stats.truncated;
      else ++d.stats.copy_failed;
    }

    enqueue(d, m, arrival);

    if (fate.duplicate) {
      rte_mbuf* copy = copy_frame(m, pool_);
      if (copy != nullptr) {
        enqueue(d, copy, arrival);
        ++d.stats.duplicated;
      } else {
        ++d.stats.copy_failed;
      }
    }
  }
}

uint16_t SimLink::receive(int at, rte_mbuf** out, uint16_t max, uint64_t now_ns) {
  assert(at == 0 || at == 1);
  Direction& d = dir_[1 - at];
  uint16_t got = 0;
  while (got < max && !d.heap.empty() && d.heap.front().arrival_ns <= now_ns) {
    std::pop_heap(d.heap.begin(), d.heap.end(), [](const InFlight& a, const InFlight& b) { return later(a, b); });
    out[got++] = d.heap.back().m;
    d.heap.pop_back();
  }
  d.stats.delivered += got;
  return got;
}

}  // namespace droce::net
