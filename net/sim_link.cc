#include "net/sim_link.h"

#include <algorithm>
#include <cassert>

namespace droce::net {
namespace {

// One generator per direction, seeded through splitmix64 so that seeds 0, 1,
// 2... and the two directions of one seed start far apart.
uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The standard library's distributions are implementation-defined; these are
// not, so a seed replays the same on any compiler and library.
double unit(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// r scaled to [0, n) (multiply-shift; bias below 2^-64 * n).
uint64_t below(uint64_t r, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(r) * n) >> 64);
}

uint64_t add_sat(uint64_t a, uint64_t b) { return b > UINT64_MAX - a ? UINT64_MAX : a + b; }

// The same draws for every frame, whatever happens to it.
struct Draws {
  double loss, channel, burst, reorder, corrupt, duplicate;
  uint64_t bit, jitter;
};

Draws draw(std::mt19937_64& rng) {
  Draws d{};
  d.loss = unit(rng);
  d.channel = unit(rng);
  d.burst = unit(rng);
  d.reorder = unit(rng);
  d.corrupt = unit(rng);
  d.duplicate = unit(rng);
  d.bit = rng();
  d.jitter = rng();
  return d;
}

uint64_t serialization_ns(uint32_t pkt_len, uint64_t rate_bps) {
  const unsigned __int128 bits_ns = static_cast<unsigned __int128>(pkt_len) * 8u * 1'000'000'000u;
  return static_cast<uint64_t>((bits_ns + rate_bps - 1) / rate_bps);
}

// The heap's comparator: true when a arrives after b, so the front is the
// earliest (arrival, seq).
bool later(const auto& a, const auto& b) {
  return a.arrival_ns != b.arrival_ns ? a.arrival_ns > b.arrival_ns : a.seq > b.seq;
}

bool shared(const rte_mbuf* seg) {
  return !RTE_MBUF_DIRECT(seg) || rte_mbuf_refcnt_read(seg) > 1;
}

}  // namespace

SimLink::SimLink(uint64_t seed, const LinkFaults& a_to_b, const LinkFaults& b_to_a,
                 rte_mempool* pool)
    : seed_(seed), pool_(pool) {
  dir_[0].faults = a_to_b;
  dir_[1].faults = b_to_a;
  for (int i = 0; i < 2; ++i) dir_[i].rng.seed(splitmix64(seed ^ (0xA5A5A5A5A5A5A5A5ull * (i + 1))));
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
  if (f.burst_enter <= 0) dir_[from].bad = false;
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

rte_mbuf* SimLink::deep_copy(const rte_mbuf* m) const {
  if (pool_ == nullptr) return nullptr;
  return rte_pktmbuf_copy(m, pool_, 0, UINT32_MAX);
}

bool SimLink::flip_bit(rte_mbuf** frame, uint64_t bit) {
  rte_mbuf* m = *frame;
  uint64_t off = bit / 8;
  rte_mbuf* seg = m;
  while (seg != nullptr && off >= seg->data_len) {
    off -= seg->data_len;
    seg = seg->next;
  }
  if (seg == nullptr) return false;  // pkt_len longer than the chain: a broken mbuf
  if (shared(seg)) {
    // Someone else sees these bytes (a clone, a zero-copy payload): corrupt a
    // private copy instead, and let go of our reference to the original.
    rte_mbuf* copy = deep_copy(m);
    if (copy == nullptr) return false;
    rte_pktmbuf_free(m);
    m = copy;
    off = bit / 8;
    seg = m;
    while (off >= seg->data_len) {
      off -= seg->data_len;
      seg = seg->next;
    }
  }
  *rte_pktmbuf_mtod_offset(seg, uint8_t*, off) ^= static_cast<uint8_t>(1u << (bit % 8));
  *frame = m;
  return true;
}

void SimLink::send(int from, rte_mbuf* const* frames, uint16_t n, uint64_t now_ns) {
  assert(from == 0 || from == 1);
  Direction& d = dir_[from];
  const LinkFaults& f = d.faults;
  for (uint16_t i = 0; i < n; ++i) {
    rte_mbuf* m = frames[i];
    assert(m != nullptr);
    const Draws r = draw(d.rng);
    ++d.stats.sent;

    if (f.queue_limit != 0 && d.heap.size() >= f.queue_limit) {
      ++d.stats.queue_dropped;
      rte_pktmbuf_free(m);
      continue;
    }

    uint64_t t = now_ns;
    if (f.rate_bps != 0) {
      t = add_sat(std::max(now_ns, d.serializer_free_ns), serialization_ns(m->pkt_len, f.rate_bps));
      d.serializer_free_ns = t;
    }

    if (f.burst_enter > 0) {
      d.bad = d.bad ? !(r.channel < f.burst_exit) : r.channel < f.burst_enter;
    } else {
      d.bad = false;
    }
    if (d.bad && r.burst < f.burst_loss) {
      ++d.stats.lost;
      ++d.stats.burst_lost;
      rte_pktmbuf_free(m);
      continue;
    }
    if (r.loss < f.loss) {
      ++d.stats.lost;
      rte_pktmbuf_free(m);
      continue;
    }

    uint64_t arrival = add_sat(t, f.delay_ns);
    if (f.jitter_ns != 0) {
      arrival = add_sat(arrival, f.jitter_ns == UINT64_MAX ? r.jitter : below(r.jitter, f.jitter_ns + 1));
    }
    if (r.reorder < f.reorder) {
      arrival = add_sat(arrival, f.reorder_delay_ns);
      ++d.stats.reordered;
    }

    if (r.corrupt < f.corrupt && m->pkt_len != 0) {
      if (flip_bit(&m, below(r.bit, uint64_t{m->pkt_len} * 8)))
        ++d.stats.corrupted;
      else
        ++d.stats.copy_failed;
    }

    enqueue(d, m, arrival);

    if (r.duplicate < f.duplicate) {
      rte_mbuf* copy = deep_copy(m);
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
