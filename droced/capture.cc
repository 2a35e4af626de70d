#include "droced/capture.h"

#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/clock.h"
#include "core/endian.h"
#include "core/log.h"
#include "net/headers.h"
#include "rocev2/engine.h"
#include "rocev2/icrc.h"
#include "rocev2/parser.h"

namespace droce::droced {
namespace {

using net::pcapng::Direction;

// The ICRC of a whole RoCEv2 frame in `b`, written into its last four bytes: the link carried
// none, and a reader checks it. Anything that is not RoCEv2 over UDP 4791 is left alone.
void fill_icrc(std::span<uint8_t> b) {
  size_t off = 12;
  if (b.size() < off + 2) return;
  uint16_t type = core::load_be16(b.data() + off);
  if (type == net::kEtherTypeVlan) {
    off += 4;
    if (b.size() < off + 2) return;
    type = core::load_be16(b.data() + off);
  }
  const size_t l3 = off + 2;
  size_t l4;
  uint8_t version;
  if (type == net::kEtherTypeIpv4 && b.size() >= l3 + 20 && b[l3] == 0x45 && b[l3 + 9] == 17) {
    l4 = l3 + 20;
    version = 4;
  } else if (type == net::kEtherTypeIpv6 && b.size() >= l3 + 40 && b[l3 + 6] == 17) {
    l4 = l3 + 40;
    version = 6;
  } else {
    return;
  }
  if (b.size() < l4 + 8 + rocev2::kIcrcLen || core::load_be16(b.data() + l4 + 2) != rocev2::kRoceV2UdpPort) return;
  (void)rocev2::refresh_icrc(b, l3, b.size() - rocev2::kIcrcLen, version);
}

// Writes all of `buf` to `fd`, waiting while the reader is slow (but never past a stop).
// False when the reader went away or the fd fails.
bool write_all(int fd, const std::vector<uint8_t>& buf, const std::atomic<bool>& stop) {
  size_t done = 0;
  while (done < buf.size()) {
    // send() on a socket, so a reader gone is EPIPE and no signal; write() on a pipe or file
    // (droced ignores SIGPIPE).
    ssize_t n = ::send(fd, buf.data() + done, buf.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == ENOTSOCK) n = ::write(fd, buf.data() + done, buf.size() - done);
    if (n > 0) {
      done += size_t(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (stop.load(std::memory_order_relaxed)) return false;
      pollfd p{fd, POLLOUT, 0};
      (void)::poll(&p, 1, 100);
      continue;
    }
    return false;
  }
  return true;
}

// The reader closed its end (a pipe's write end reports POLLERR, a socket POLLHUP).
bool reader_gone(int fd) {
  pollfd p{fd, 0, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0;
}

}  // namespace

Capture::Capture(unsigned cores) : cores_(cores), rings_(std::make_unique<Ring[]>(cores)) {}

Capture::~Capture() {
  stop_.store(true);
  generation_.store(0);
  if (thread_.joinable()) thread_.join();
}

bool Capture::wanted(Direction dir, const rte_mbuf* m, uint32_t qpn) {
  if (qpn == UINT32_MAX) return true;
  uint32_t q;
  if (dir == Direction::outbound) return rocev2::frame_source_qpn(m) == qpn;
  return rocev2::peek_dest_qpn(rte_pktmbuf_mtod(m, const uint8_t*), m->data_len, &q) && q == qpn;
}

uint32_t Capture::stage(unsigned core, uint32_t generation, Direction dir, rte_mbuf* const* frames, uint16_t n,
                        uint64_t now_ns) {
  Ring& r = rings_[core];
  const uint32_t qpn = qpn_.load(std::memory_order_relaxed);
  const uint32_t snaplen = snaplen_.load(std::memory_order_relaxed);
  const uint64_t head = r.head.load(std::memory_order_relaxed);
  const uint64_t room = kCaptureRingRecords - (head - r.tail.load(std::memory_order_acquire));
  uint32_t staged = 0;
  uint64_t seen = 0;
  for (uint16_t i = 0; i < n; ++i) {
    const rte_mbuf* m = frames[i];
    if (!wanted(dir, m, qpn)) continue;
    ++seen;
    if (staged == room) continue;
    Record& rec = r.records[(head + staged) % kCaptureRingRecords];
    const uint32_t len = std::min(m->pkt_len, snaplen);
    const void* p = rte_pktmbuf_read(m, 0, len, rec.bytes);
    if (p == nullptr) continue;  // a broken chain: nothing to show
    if (p != rec.bytes) std::memcpy(rec.bytes, p, len);
    rec.time_ns = now_ns;
    rec.generation = generation;
    rec.wire_len = m->pkt_len;
    rec.cap_len = uint16_t(len);
    rec.burst_index = i;
    rec.dir = uint8_t(dir);
    ++staged;
  }
  // Single writer: plain read-modify-write, atomic only so the drain thread may read them.
  r.seen.store(r.seen.load(std::memory_order_relaxed) + seen, std::memory_order_relaxed);
  r.dropped.store(r.dropped.load(std::memory_order_relaxed) + (seen - staged), std::memory_order_relaxed);
  return staged;
}

void Capture::publish(unsigned core, uint32_t staged, uint16_t sent) {
  if (staged == 0) return;
  Ring& r = rings_[core];
  const uint64_t head = r.head.load(std::memory_order_relaxed);
  uint32_t k = 0;
  while (k < staged && r.records[(head + k) % kCaptureRingRecords].burst_index < sent) ++k;
  r.head.store(head + k, std::memory_order_release);
}

int Capture::start(const CaptureParams& p, core::Fd out, uint32_t owner) {
  if (!out.valid()) return -EBADF;
  if (p.snaplen == 0 || p.snaplen > kCaptureMaxSnap) return -EINVAL;
  std::lock_guard l(mutex_);
  if (running_.load()) return -EBUSY;
  if (thread_.joinable()) thread_.join();  // the last capture's thread, finished
  for (unsigned k = 0; k < cores_; ++k) {
    // Allocated at the first capture and kept: a core may still be writing an old record
    // when a capture ends, so the records are never freed under it.
    if (!rings_[k].records) rings_[k].records = std::make_unique<Record[]>(kCaptureRingRecords);
  }
  uint64_t seen0 = 0, dropped0 = 0;
  for (unsigned k = 0; k < cores_; ++k) {
    seen0 += rings_[k].seen.load();
    dropped0 += rings_[k].dropped.load();
  }
  qpn_.store(p.qpn, std::memory_order_relaxed);
  snaplen_.store(p.snaplen, std::memory_order_relaxed);
  owner_ = owner;
  const uint32_t generation = ++last_generation_ == 0 ? ++last_generation_ : last_generation_;
  stop_.store(false);
  running_.store(true);
  thread_ = std::thread([this, p, fd = std::move(out), generation, seen0, dropped0]() mutable {
    drain_loop(p, std::move(fd), generation, seen0, dropped0);
  });
  generation_.store(generation, std::memory_order_release);
  return 0;
}

void Capture::stop(uint32_t owner) {
  std::lock_guard l(mutex_);
  if (running_.load() && owner_ == owner) stop_.store(true);
}

void Capture::drain_loop(CaptureParams p, core::Fd out, uint32_t generation, uint64_t seen0, uint64_t dropped0) {
  pthread_setname_np(pthread_self(), "droce-capture");
  // Records carry CLOCK_MONOTONIC (what the cores read anyway); pcapng wants the epoch.
  const int64_t to_epoch = core::realtime_ahead_of_monotonic_ns();
  std::vector<uint8_t> buf;
  net::pcapng::append_section_header(&buf);
  net::pcapng::append_interface(&buf, p.snaplen, p.interface_name);
  uint64_t written = 0;
  bool ok = write_all(out.get(), buf, stop_);
  while (ok && !stop_.load(std::memory_order_relaxed) && (p.count == 0 || written < p.count)) {
    buf.clear();
    for (unsigned k = 0; k < cores_ && (p.count == 0 || written < p.count); ++k) {
      Ring& r = rings_[k];
      uint64_t tail = r.tail.load(std::memory_order_relaxed);
      const uint64_t head = r.head.load(std::memory_order_acquire);
      for (; tail != head && (p.count == 0 || written < p.count); ++tail) {
        Record& rec = r.records[tail % kCaptureRingRecords];
        if (rec.generation != generation) continue;  // an older capture's, in flight when it ended
        const std::span<uint8_t> bytes(rec.bytes, rec.cap_len);
        if (p.fill_icrc && rec.cap_len == rec.wire_len) fill_icrc(bytes);
        net::pcapng::append_packet(&buf, rec.time_ns + uint64_t(to_epoch), rec.wire_len, bytes,
                                   Direction(rec.dir));
        ++written;
      }
      r.tail.store(tail, std::memory_order_release);
    }
    if (!buf.empty()) {
      ok = write_all(out.get(), buf, stop_);
    } else {
      ok = !reader_gone(out.get());
      if (ok) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  generation_.store(0, std::memory_order_release);  // the cores stop copying
  uint64_t seen = 0, dropped = 0;
  for (unsigned k = 0; k < cores_; ++k) {
    seen += rings_[k].seen.load();
    dropped += rings_[k].dropped.load();
    // What is left belongs to no capture: the next one starts empty.
    rings_[k].tail.store(rings_[k].head.load(std::memory_order_acquire), std::memory_order_release);
  }
  if (ok) {
    buf.clear();
    net::pcapng::append_interface_stats(&buf, core::realtime_ns(), seen - seen0, dropped - dropped0);
    (void)write_all(out.get(), buf, stop_);
  }
  DROCE_LOG(INFO, app, "capture %u ended: %lu frames written, %lu lost (ring full)%s", generation,
            (unsigned long)written, (unsigned long)(dropped - dropped0), ok ? "" : ", the reader went away");
  out.reset();
  running_.store(false);
}

}  // namespace droce::droced
