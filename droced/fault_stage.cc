#include "droced/fault_stage.h"

#include <algorithm>
#include <cerrno>
#include <optional>

#include "core/clock.h"
#include "rocev2/probes.h"
#include "net/frame_faults.h"
#include "net/headers.h"
#include "rocev2/parser.h"

namespace droce::droced {
namespace {

bool later(const auto& a, const auto& b) { return a.due_ns != b.due_ns ? a.due_ns > b.due_ns : a.seq > b.seq; }

// Where the payload and the ICRC of a RoCE frame are (only asked for when a rule corrupts one).
net::FrameRegions regions_of(const rte_mbuf* m, net::CorruptTarget target) {
  net::FrameRegions r{m->pkt_len, 0, 0, 0};
  if (target == net::CorruptTarget::any) return r;
  rocev2::ParsedPacket p;
  rocev2::ParseOptions o;
  o.verify_icrc = false;
  o.verify_ipv4_checksum = false;
  if (rocev2::parse_frame(m, &p, o) != rocev2::ParseStatus::ok) return r;
  r.payload_off = p.layout.payload_off;
  r.payload_len = p.layout.payload_len;
  r.icrc_len = rocev2::kIcrcLen;
  return r;
}

}  // namespace

const char* to_string(FaultDirection d) {
  switch (d) {
    case FaultDirection::rx: return "rx";
    case FaultDirection::tx: return "tx";
    case FaultDirection::both: break;
  }
  return "both";
}

FaultCounters& FaultCounters::operator+=(const FaultCounters& o) {
  for (const auto& c : kFaultCounters) this->*c.member += o.*c.member;
  return *this;
}

// ---- FaultRules ---------------------------------------------------------------------

int FaultRules::set(FaultRule r, uint32_t* id) {
  if (r.direction != FaultDirection::rx && r.direction != FaultDirection::tx && r.direction != FaultDirection::both)
    return -EINVAL;
  std::lock_guard l(mutex_);
  auto it = std::find_if(rules_.begin(), rules_.end(), [&](const FaultRule& x) { return x.id == r.id; });
  if (r.id != 0 && it != rules_.end()) {
    *it = r;
  } else {
    if (rules_.size() >= kMaxRules) return -ENOSPC;
    if (r.id == 0) r.id = next_id_;
    next_id_ = std::max(next_id_, r.id + 1);
    rules_.push_back(r);
  }
  // A QP's rules before the port's, so the most specific matches first.
  std::stable_sort(rules_.begin(), rules_.end(), [](const FaultRule& a, const FaultRule& b) {
    return (a.qpn == kAllQps) != (b.qpn == kAllQps) ? a.qpn != kAllQps : a.id < b.id;
  });
  *id = r.id;
  version_.fetch_add(1, std::memory_order_release);
  return 0;
}

int FaultRules::clear(uint32_t id) {
  std::lock_guard l(mutex_);
  if (id == 0) {
    rules_.clear();
  } else {
    auto it = std::find_if(rules_.begin(), rules_.end(), [&](const FaultRule& x) { return x.id == id; });
    if (it == rules_.end()) return -ENOENT;
    rules_.erase(it);
  }
  version_.fetch_add(1, std::memory_order_release);
  return 0;
}

std::vector<FaultRule> FaultRules::rules() const {
  std::lock_guard l(mutex_);
  return rules_;
}

// ---- FaultStage ---------------------------------------------------------------------

FaultStage::FaultStage(const FaultRules* rules, unsigned core, rte_mempool* pool, bool icrc_on_link,
                       uint64_t speed_bps)
    : rules_(rules), core_(core), pool_(pool), icrc_on_link_(icrc_on_link), speed_bps_(speed_bps) {
  (void)rx_ts_.setup();  // without the field no frame carries a stamp: the loop's time for all
  refresh();
}

FaultStage::~FaultStage() {
  for (auto& h : heap_)
    for (Held& x : h) rte_pktmbuf_free(x.m);
}

void FaultStage::reload() {
  version_ = rules_->version();
  std::vector<Active> next;
  active_ = 0;
  pfc_ = false;
  for (const FaultRule& r : rules_->rules()) {
    auto old = std::find_if(active_rules_.begin(), active_rules_.end(), [&](const Active& a) { return a.rule.id == r.id; });
    if (old != active_rules_.end() && old->rule.seed == r.seed) {
      // Changed while traffic runs: the rule keeps its dice and counters.
      next.push_back(std::move(*old));
      next.back().rule = r;
      if (r.spec.burst_enter <= 0)
        for (auto& d : next.back().dice) d.heal();
    } else {
      Active a{r, {net::FaultDice(1), net::FaultDice(1)}, {net::CongestionPoint(1), net::CongestionPoint(1)}, {},
               net::PfcPoint(speed_bps_)};
      for (int d = 0; d < 2; ++d) {
        const uint64_t seed = net::mix_seed(r.seed ^ (uint64_t{core_} << 32) ^ (0xA5A5A5A5A5A5A5A5ull * (d + 1)));
        a.dice[d] = net::FaultDice(seed);
        a.queue[d] = net::CongestionPoint(~seed);
      }
      next.push_back(std::move(a));
    }
    if (r.spec.any()) active_ |= uint8_t(r.direction);
    pfc_ = pfc_ || next.back().pfc.paused() ||
           (r.spec.queue.pfc.any() && (uint8_t(r.direction) & uint8_t(FaultDirection::rx)) != 0);
  }
  // A removed rule's queue is gone: its depth leaves the totals' gauge (its other counts stay),
  // and the senders it held paused go now rather than when their pause runs out.
  for (Active& a : active_rules_) {
    if (std::any_of(next.begin(), next.end(),
                    [&](const Active& n) { return n.rule.id == a.rule.id && n.rule.seed == a.rule.seed; }))
      continue;
    totals_.queue_depth -= a.counters.queue_depth;
    pfc_check(a, net::PfcSpec{}, 0, core::monotonic_ns());
  }
  active_rules_ = std::move(next);
}

FaultStage::Active* FaultStage::match(FaultDirection d, const rte_mbuf* m) {
  uint32_t qpn = kAllQps;
  if (d == FaultDirection::tx) {
    qpn = rocev2::frame_source_qpn(m);  // an engine's frame: RoCE, tagged with its QP
  } else if (!rocev2::peek_dest_qpn(rte_pktmbuf_mtod(m, const uint8_t*), m->data_len, &qpn)) {
    // Not RoCEv2: on a netdev shared with the kernel (af_packet) the kernel's own traffic
    // (perftest's TCP exchange, SSH) comes here as a copy the kernel also takes. No rule is
    // droce's to apply to it: a queue would count and "drop" frames that lose nothing, and
    // take a RoCE frame's place in the queue. The engine counts and drops them as before.
    return nullptr;
  }
  for (Active& a : active_rules_) {
    if ((uint8_t(a.rule.direction) & uint8_t(d)) == 0 || !a.rule.spec.any()) continue;
    if (a.rule.qpn == kAllQps || a.rule.qpn == qpn) return &a;
  }
  return nullptr;
}

void FaultStage::hold(FaultDirection d, Held x) {
  if (RTE_MBUF_HAS_EXTBUF(x.m)) {
    // A droce_shm slot lent to this frame: holding it would hold the ring behind it.
    rte_mbuf* copy = net::copy_frame(x.m, pool_);
    rte_pktmbuf_free(x.m);
    if (copy == nullptr) {
      ++totals_.copy_failed;
      return;  // no mbuf to hold it in: lost, as a full queue would lose it
    }
    x.m = copy;
  }
  x.seq = next_seq_++;
  auto& h = heap_[index(d)];
  h.push_back(x);
  std::push_heap(h.begin(), h.end(), [](const Held& a, const Held& b) { return later(a, b); });
  held_[index(d)] = h.size();
}

bool FaultStage::enqueue(Active& a, FaultDirection d, rte_mbuf** m, uint64_t now_ns, uint64_t* depart_ns,
                         uint8_t* ecn) {
  FaultCounters& c = a.counters;
  net::CongestionPoint& q = a.queue[index(d)];
  const net::QueueSpec& s = a.rule.spec.queue;
  const int bits = net::frame_ecn(*m);
  *ecn = bits < 0 ? net::kEcnNotEct : uint8_t(bits);
  const uint32_t len = (*m)->pkt_len;
  const net::QueueDecision v = q.enqueue(s, len, *ecn, now_ns);
  if (!take_verdict(a, d, m, v.verdict, now_ns)) return false;
  c.queue_bytes += len;
  c.queue_depth = q.depth(s, now_ns);
  c.queue_depth_max = std::max(c.queue_depth_max, q.counters().depth_max);
  *depart_ns = v.depart_ns;
  return true;
}

bool FaultStage::take_verdict(Active& a, FaultDirection d, rte_mbuf** m, net::QueueVerdict v, uint64_t at_ns) {
  FaultCounters& c = a.counters;
  const net::CongestionPoint& q = a.queue[index(d)];
  const net::QueueSpec& s = a.rule.spec.queue;
  const uint32_t len = (*m)->pkt_len;
  switch (v) {
    case net::QueueVerdict::dropped_full:
    case net::QueueVerdict::dropped_red:
      if (v == net::QueueVerdict::dropped_full) ++c.queue_dropped;
      else ++c.queue_red_dropped;
      DROCE_PROBE(queue_drop, a.rule.id, len, q.depth(s, at_ns));
      rte_pktmbuf_free(*m);
      return false;
    case net::QueueVerdict::marked:
      if (net::set_frame_ce(m, pool_)) {
        ++c.queue_marked;
        DROCE_PROBE(queue_mark, a.rule.id, len, q.depth(s, at_ns));
      } else {
        ++c.copy_failed;
      }
      return true;
    case net::QueueVerdict::queued: return true;
  }
  return true;
}

void FaultStage::leave(FaultDirection d, Held& h, uint64_t now_ns, std::vector<rte_mbuf*>* out) {
  Active* a = nullptr;
  if (h.dequeue_rule != 0) {
    for (Active& r : active_rules_)
      if (r.rule.id == h.dequeue_rule) a = &r;
  }
  if (a == nullptr) {  // no decision to make, or its rule is gone: the frame goes on as it is
    out->push_back(h.m);
    return;
  }
  FaultCounters before = a->counters;
  const net::QueueVerdict v = a->queue[index(d)].dequeue(a->rule.spec.queue, h.ecn, h.due_ns);
  if (take_verdict(*a, d, &h.m, v, h.due_ns)) {
    rte_mbuf* dup = nullptr;
    if (h.duplicate) {
      dup = net::copy_frame(h.m, pool_);
      if (dup != nullptr) ++a->counters.duplicated;
      else ++a->counters.copy_failed;
    }
    if (h.then_due_ns > now_ns) {  // the link's delay after the queue
      hold(d, Held{h.then_due_ns, 0, h.m});
      if (dup != nullptr) hold(d, Held{h.then_due_ns, 0, dup});
    } else {
      out->push_back(h.m);
      if (dup != nullptr) out->push_back(dup);
    }
  }
  add_to_totals(before, a->counters);
}

void FaultStage::update_depths(FaultDirection d, uint64_t now_ns) {
  for (Active& a : active_rules_) {
    const net::QueueSpec& s = a.rule.spec.queue;
    uint64_t depth = 0;
    if (s.any()) {
      depth = a.queue[index(d)].depth(s, now_ns);
      totals_.queue_depth += depth - a.counters.queue_depth;  // the totals carry the sum of the gauges
      a.counters.queue_depth = depth;
    }
    if (d == FaultDirection::rx)
      pfc_check(a, (uint8_t(a.rule.direction) & uint8_t(FaultDirection::rx)) != 0 ? s.pfc : net::PfcSpec{}, depth,
                now_ns);
  }
}

void FaultStage::pfc_check(Active& a, const net::PfcSpec& spec, uint64_t depth, uint64_t now_ns) {
  if (!spec.any() && !a.pfc.paused()) return;
  const FaultCounters before = a.counters;
  a.pfc.on_depth(spec, depth, now_ns, &pauses_);
  const net::PfcCounters& p = a.pfc.counters();
  a.counters.pfc_xoff_sent = p.xoff_sent;
  a.counters.pfc_xon_sent = p.xon_sent;
  a.counters.pfc_paused_us = p.paused_ns / 1000;
  a.counters.pfc_untracked = p.untracked;
  a.counters.pfc_repaused = p.repaused;
  add_to_totals(before, a.counters);
}

void FaultStage::apply(Active& a, FaultDirection d, rte_mbuf* m, uint64_t arrival_ns, uint64_t now_ns,
                       std::vector<rte_mbuf*>* out) {
  FaultCounters& c = a.counters;
  FaultCounters before = c;
  ++c.matched;
  const net::FaultSpec& f = a.rule.spec;
  if (arrival_ns < now_ns) ++c.wire_timed;  // timed by its stamp
  uint64_t depart_ns = arrival_ns;
  // What RED at departure takes the frame for: as it arrived, before corruption or truncation.
  uint8_t ecn_at_arrival = net::kEcnNotEct;
  if (f.queue.pfc.any() && d == FaultDirection::rx) {
    // Who to pause, and which of its priorities, when the queue reaches xoff; a frame the full
    // queue then drops counts too (its sender, above all, should have been paused).
    const auto* p = rte_pktmbuf_mtod(m, const uint8_t*);
    net::MacAddr src;
    std::copy(p + 6, p + 12, src.begin());
    a.pfc.on_enqueue(src, net::frame_priority({p, m->data_len}), arrival_ns);
  }
  if (f.queue.any() && !enqueue(a, d, &m, arrival_ns, &depart_ns, &ecn_at_arrival)) return add_to_totals(before, c);
  std::optional<Held> leave_now;
  const net::FrameFate fate =
      a.dice[index(d)].roll(f, f.corrupt > 0 ? regions_of(m, f.corrupt_target) : net::FrameRegions{m->pkt_len, 0, 0, 0});
  if (fate.lost) {
    ++c.dropped;
    c.burst_dropped += fate.burst_lost;
    rte_pktmbuf_free(m);
  } else {
    bool gone = false;
    if (fate.corrupt) {
      if (!net::flip_frame_bit(&m, fate.corrupt_bit, pool_)) {
        ++c.copy_failed;
      } else {
        ++c.corrupted;
        if (!icrc_on_link_) {
          ++c.corrupt_discarded;
          rte_pktmbuf_free(m);
          gone = true;
        }
      }
    }
    if (!gone && fate.truncate) {
      if (net::truncate_frame(&m, fate.keep_len, pool_)) ++c.truncated;
      else ++c.copy_failed;
    }
    if (!gone) {
      c.delayed += fate.hold_ns != 0;
      c.reordered += fate.reordered;
      const uint64_t due = net::add_saturating(depart_ns, fate.hold_ns);
      if (f.queue.mark_dequeue) {
        // RED decides as the frame leaves its queue, and a duplicate copies what left.
        const Held x{depart_ns, 0, m, a.rule.id, ecn_at_arrival, fate.duplicate, due};
        if (depart_ns > now_ns) hold(d, x);
        else leave_now = x;
      } else {
        rte_mbuf* dup = nullptr;
        if (fate.duplicate) {
          dup = net::copy_frame(m, pool_);
          if (dup != nullptr) ++c.duplicated;
          else ++c.copy_failed;
        }
        if (due > now_ns) {
          hold(d, Held{due, 0, m});
          if (dup != nullptr) hold(d, Held{due, 0, dup});
        } else {
          // Due already: it arrived (by its stamp) longer ago than it had to wait.
          out->push_back(m);
          if (dup != nullptr) out->push_back(dup);
        }
      }
    }
  }
  add_to_totals(before, c);
  if (leave_now) leave(d, *leave_now, now_ns, out);  // it has left its queue by now
}

void FaultStage::add_to_totals(const FaultCounters& before, const FaultCounters& after) {
  // Differences wrap for a gauge that went down; adding them back wraps the same way.
  for (const auto& k : kFaultCounters) totals_.*k.member += after.*k.member - before.*k.member;
}

void FaultStage::release(FaultDirection d, uint64_t now_ns, std::vector<rte_mbuf*>* out) {
  auto& h = heap_[index(d)];
  while (!h.empty() && h.front().due_ns <= now_ns) {
    std::pop_heap(h.begin(), h.end(), [](const Held& a, const Held& b) { return later(a, b); });
    Held x = h.back();
    h.pop_back();
    leave(d, x, now_ns, out);  // may hold it again, due later
  }
  held_[index(d)] = h.size();
  if ((active_ & uint8_t(d)) != 0) update_depths(d, now_ns);
}

void FaultStage::process(FaultDirection d, rte_mbuf* const* frames, size_t n, uint64_t now_ns,
                         std::vector<rte_mbuf*>* out) {
  release(d, now_ns, out);
  // Only received frames: a sent frame's mbuf may carry the stamp of a frame received long ago.
  const bool stamps = d == FaultDirection::rx && rx_ts_.valid();
  for (size_t i = 0; i < n; ++i) {
    rte_mbuf* m = frames[i];
    Active* a = (active_ & uint8_t(d)) != 0 ? match(d, m) : nullptr;
    if (a == nullptr) {
      out->push_back(m);
      continue;
    }
    uint64_t arrival_ns = now_ns;
    // A stamp past the loop's time is a frame that came after the loop read its clock.
    if (uint64_t t; stamps && !a->rule.spec.loop_arrival && rx_ts_.read(m, &t) && t < now_ns) arrival_ns = t;
    apply(*a, d, m, arrival_ns, now_ns, out);
  }
  if (pfc_ && d == FaultDirection::rx) update_depths(d, now_ns);  // XOFF as soon as a burst fills it
}

uint64_t FaultStage::next_release_ns() const {
  uint64_t t = UINT64_MAX;
  for (const auto& h : heap_)
    if (!h.empty()) t = std::min(t, h.front().due_ns);
  return t;
}

std::vector<std::pair<uint32_t, FaultCounters>> FaultStage::rule_counters() const {
  std::vector<std::pair<uint32_t, FaultCounters>> v;
  v.reserve(active_rules_.size());
  for (const Active& a : active_rules_) v.emplace_back(a.rule.id, a.counters);
  return v;
}

// ---- FaultPort ----------------------------------------------------------------------

FaultPort::~FaultPort() {
  for (rte_mbuf* m : queued_) rte_pktmbuf_free(m);
}

void FaultPort::flush() {
  size_t sent = 0;
  while (sent < queued_.size()) {
    const uint16_t n = static_cast<uint16_t>(std::min<size_t>(queued_.size() - sent, 64));
    const uint16_t k = send(queued_.data() + sent, n);
    sent += k;
    if (k < n) break;
  }
  queued_.erase(queued_.begin(), queued_.begin() + static_cast<ptrdiff_t>(sent));
}

uint16_t FaultPort::tx_burst(rte_mbuf** frames, uint16_t n) {
  if (queued_.empty() && !stage_->active(FaultDirection::tx)) return send(frames, n);
  if (queued_.size() >= kMaxQueued) {
    flush();
    if (queued_.size() >= kMaxQueued) return 0;
  }
  const uint16_t take = static_cast<uint16_t>(std::min<size_t>(n, kMaxQueued - queued_.size()));
  stage_->process(FaultDirection::tx, frames, take, core::monotonic_ns(), &queued_);
  flush();
  return take;
}

uint16_t FaultPort::send_captured(uint32_t generation, rte_mbuf** frames, uint16_t n) {
  // Copied before the port takes them (it may free them at once); kept only for those it took.
  const uint32_t staged =
      tap_.capture->stage(tap_.core, generation, net::pcapng::Direction::outbound, frames, n, core::monotonic_ns());
  const uint16_t k = inner_->tx_burst(frames, n);
  tap_.capture->publish(tap_.core, staged, k);
  return k;
}

uint16_t FaultPort::admit(rte_mbuf** frames, uint16_t n) {
  const uint64_t now = core::monotonic_ns();
  uint16_t k = 0;
  while (k < n &&
         !gate_->paused(net::frame_priority({rte_pktmbuf_mtod(frames[k], const uint8_t*), frames[k]->data_len}), now))
    ++k;
  if (k < n) ++pause_waits_;
  else if (gate_->next_resume_ns(now) == UINT64_MAX) gate_->settle(now);  // every pause is over
  return k;
}

void FaultPort::poll(uint64_t now_ns) {
  if (!stage_->active(FaultDirection::tx) && queued_.empty()) return;
  stage_->release(FaultDirection::tx, now_ns, &queued_);
  flush();
}

}  // namespace droce::droced
