// Shared memory between processes that do not trust each other: sealed memfd
// regions (a peer cannot shrink one under us; unsealed or short descriptors
// are refused; a descriptor passed over the control socket maps the same
// pages) and SPSC rings in them (order, wrap-around of the free-running
// indexes, full and empty, bulk and burst, zero-copy; millions of entries
// between two processes in both directions; and a hostile peer that rewrites
// the header and the indexes, which the trusted view reports as corruption
// without ever reaching outside the ring).
//
// The hostile tests put the ring flush against guard pages (PROT_NONE) on
// both sides, so an access outside it crashes the test. Forked children never
// use gtest macros: they report through their exit code. Every loop that
// waits on the other process has a hang guard, which fails the test instead
// of hanging it; no timing decides a pass.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "abi/shm_ring.h"
#include "core/shm_region.h"
#include "core/unix_socket.h"
#include "tests/test_support.h"

namespace droce::abi {

// gtest prints the status by name.
void PrintTo(ShmRingStatus s, std::ostream* os) { *os << to_string(s); }

namespace {

using core::Fd;
using core::page_size;
using core::receive_message;
using core::send_message;
using core::seqpacket_pair;
using core::ShmMapOptions;
using core::ShmRegion;
using Clock = std::chrono::steady_clock;

// How long a loop may wait on the other process before the test calls it a
// hang. Generous: the machine may be busy building.
constexpr auto kHangGuard = std::chrono::seconds(90);

// Exit codes of forked children (and results of produce/consume).
enum Outcome : int {
  kOk = 0,
  kAttachFailed = 2,
  kCorrupt = 3,
  kTimedOut = 4,
  kBadEntry = 5,
  kBadSize = 6,
  kSocketError = 7,
  kUnexpected = 8,
  kReadSucceeded = 42,  // touch(): the access did not fault
  kFaulted = 77,        // touch(): SIGSEGV
};

// ---- helpers ---------------------------------------------------------------

// A forked child running `fn`; killed and reaped if still alive when this goes.
class Child {
 public:
  template <class Fn>
  explicit Child(Fn&& fn) {
    std::fflush(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) ::_exit(fn());  // _exit: no gtest, no atexit, no leak check
  }
  ~Child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  bool started() const { return pid_ > 0; }

  // The child's exit code, 128 + signal if killed, -1 if it had not ended by
  // the hang guard (it is killed then).
  int wait() {
    const auto deadline = Clock::now() + kHangGuard;
    for (;;) {
      int status = 0;
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        pid_ = -1;
        if (WIFEXITED(status)) return WEXITSTATUS(status);
        if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
        return -1;
      }
      if (r < 0 || Clock::now() > deadline) return -1;
      ::usleep(1000);
    }
  }

 private:
  pid_t pid_ = -1;
};

// A connected control-socket pair whose reads give up after the hang guard.
void socket_pair(Fd* a, Fd* b) {
  ASSERT_EQ(seqpacket_pair(a, b), 0);
  timeval tv{};
  tv.tv_sec = std::chrono::duration_cast<std::chrono::seconds>(kHangGuard).count();
  for (const Fd* s : {a, b}) ASSERT_EQ(::setsockopt(s->get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
}

bool send_word(int sock, uint64_t v) {
  uint8_t b[sizeof v];
  std::memcpy(b, &v, sizeof v);
  return send_message(sock, b) == 0;
}

bool receive_word(int sock, uint64_t* v) {
  std::vector<uint8_t> buf;
  std::vector<Fd> fds;
  if (receive_message(sock, &buf, 64, &fds) != static_cast<ssize_t>(sizeof *v)) return false;
  std::memcpy(v, buf.data(), sizeof *v);
  return true;
}

void on_segv(int) { ::_exit(kFaulted); }

// Reads one byte at `p` in a child: kReadSucceeded, or kFaulted if it hit a
// PROT_NONE page.
int touch(const std::byte* p) {
  Child child([p] {
    ::prctl(PR_SET_DUMPABLE, 0);  // no core file for the expected fault
    struct sigaction sa {};
    sa.sa_handler = on_segv;
    ::sigaction(SIGSEGV, &sa, nullptr);
    const volatile std::byte* v = p;
    (void)*v;
    return static_cast<int>(kReadSucceeded);
  });
  return child.wait();
}

// 32 bytes whose every field depends on the sequence number and the seed, so
// a lost, repeated, reordered or torn entry is caught.
struct Entry {
  uint64_t seq;
  uint64_t value;
  uint64_t check;
  uint64_t inverse;
  bool operator==(const Entry&) const = default;
};
static_assert(sizeof(Entry) == 32);

uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

Entry make_entry(uint64_t seq, uint64_t seed) {
  const uint64_t v = mix(seed ^ seq);
  return Entry{seq, v, v ^ mix(seq), ~seq};
}

// A ring at the very end of a region mapped with guard pages: the byte after
// its last entry is PROT_NONE, and so is the byte before its header when the
// ring fills the region exactly (256 + count * size a page multiple).
struct GuardedRing {
  ShmRegion region;
  std::span<std::byte> mem;
  ShmRingGeometry g;
};

void make_ring(ShmRingGeometry g, uint32_t first_index, GuardedRing* out) {
  const size_t bytes = shm_ring_bytes(g);
  ASSERT_NE(bytes, 0u);
  ASSERT_EQ(ShmRegion::create("droce-ring-test", bytes, ShmMapOptions{.guard_pages = true}, &out->region), 0);
  out->mem = out->region.bytes().last(bytes);
  out->g = g;
  ASSERT_EQ(shm_ring_format(out->mem, g, first_index), 0);
}

// A ring that fills one page exactly: guards on both sides.
constexpr ShmRingGeometry kTightGeometry{32, 120};
static_assert(kShmRingHeaderSize + 32 * 120 == 4096);

uint32_t* header_word(std::span<std::byte> mem, size_t offset) {
  return reinterpret_cast<uint32_t*>(mem.data() + offset);
}

uint32_t load_word(std::span<std::byte> mem, size_t offset) {
  return std::atomic_ref<uint32_t>(*header_word(mem, offset)).load(std::memory_order_acquire);
}

void store_word(std::span<std::byte> mem, size_t offset, uint32_t v) {
  std::atomic_ref<uint32_t>(*header_word(mem, offset)).store(v, std::memory_order_release);
}

constexpr size_t kProducerIndex = offsetof(ShmRingHeader, producer_index);
constexpr size_t kConsumerIndex = offsetof(ShmRingHeader, consumer_index);

// Moves `n` entries into the ring, in random bursts, alternating copy-in
// (push_burst) and in-place (reserve/slot/publish). `hook` runs before each
// burst. Returns an Outcome.
template <class Hook>
int produce(ShmRingProducer& p, uint64_t n, uint64_t seed, Hook&& hook) {
  const auto deadline = Clock::now() + kHangGuard;
  std::mt19937_64 rng(seed);
  Entry batch[48];
  uint64_t seq = 0;
  uint32_t idle = 0;
  while (seq < n) {
    hook();
    const auto want = static_cast<uint32_t>(std::min<uint64_t>(1 + rng() % 48, n - seq));
    uint32_t done = 0;
    ShmRingStatus st;
    if (rng() & 1) {
      for (uint32_t i = 0; i < want; ++i) batch[i] = make_entry(seq + i, seed);
      st = p.push_burst(batch, want, &done);
    } else {
      st = p.reserve(want, &done);
      for (uint32_t i = 0; i < done; ++i) {
        const Entry e = make_entry(seq + i, seed);
        std::memcpy(p.slot(i), &e, sizeof e);
      }
      p.publish(done);
    }
    if (st == ShmRingStatus::corrupt) return kCorrupt;
    seq += done;
    if (done == 0) {
      if ((++idle & 255) == 0 && Clock::now() > deadline) return kTimedOut;
      ::sched_yield();
    }
  }
  return kOk;
}

int produce(std::span<std::byte> mem, ShmRingGeometry g, uint64_t n, uint64_t seed) {
  ShmRingProducer p;
  if (ShmRingProducer::attach(mem, g, &p) != 0) return kAttachFailed;
  return produce(p, n, seed, [] {});
}

// Takes `n` entries out and checks each one's sequence and contents,
// alternating copy-out (pop_burst) and in place (peek/copy_entry/release).
int consume(ShmRingConsumer& c, uint64_t n, uint64_t seed) {
  const auto deadline = Clock::now() + kHangGuard;
  std::mt19937_64 rng(mix(seed + 1));
  Entry batch[48];
  uint64_t seq = 0;
  uint32_t idle = 0;
  while (seq < n) {
    const auto want = static_cast<uint32_t>(1 + rng() % 48);
    uint32_t got = 0;
    ShmRingStatus st;
    if (rng() & 1) {
      st = c.pop_burst(batch, want, &got);
      for (uint32_t i = 0; i < got; ++i)
        if (!(batch[i] == make_entry(seq + i, seed))) return kBadEntry;
    } else {
      st = c.peek(want, &got);
      for (uint32_t i = 0; i < got; ++i) {
        Entry e;
        c.copy_entry(i, &e);
        if (!(e == make_entry(seq + i, seed))) return kBadEntry;
      }
      c.release(got);
    }
    if (st == ShmRingStatus::corrupt) return kCorrupt;
    seq += got;
    if (got == 0) {
      if ((++idle & 255) == 0 && Clock::now() > deadline) return kTimedOut;
      ::sched_yield();
    }
  }
  return c.size() == 0 && !c.corrupted() ? kOk : kBadSize;
}

int consume(std::span<std::byte> mem, ShmRingGeometry g, uint64_t n, uint64_t seed) {
  ShmRingConsumer c;
  if (ShmRingConsumer::attach(mem, g, &c) != 0) return kAttachFailed;
  return consume(c, n, seed);
}

// ---- ShmRegion -------------------------------------------------------------

TEST(ShmRegion, CreateSealsAgainstResizeAndRoundsToPages) {
  const size_t page = page_size();
  ShmRegion r;
  ASSERT_EQ(ShmRegion::create("droce-test", page + 1, {}, &r), 0);
  EXPECT_EQ(r.size(), 2 * page);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(r.data()) % page, 0u);
  ASSERT_TRUE(r.mapped());
  ASSERT_GE(r.fd(), 0);
  EXPECT_EQ(static_cast<int>(r.data()[page + 5]), 0) << "a new region is zero-filled";

  const int seals = ::fcntl(r.fd(), F_GET_SEALS);
  ASSERT_GE(seals, 0);
  EXPECT_EQ(seals & ShmRegion::kRequiredSeals, ShmRegion::kRequiredSeals);
  EXPECT_EQ(::fcntl(r.fd(), F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);

  // Expect: nobody holding the descriptor can resize it, the creator included,
  // nor change the seals.
  errno = 0;
  EXPECT_EQ(::ftruncate(r.fd(), static_cast<off_t>(page)), -1);
  EXPECT_EQ(errno, EPERM);
  errno = 0;
  EXPECT_EQ(::ftruncate(r.fd(), 0), -1);
  EXPECT_EQ(errno, EPERM);
  errno = 0;
  EXPECT_EQ(::ftruncate(r.fd(), static_cast<off_t>(4 * page)), -1);
  EXPECT_EQ(errno, EPERM);
  errno = 0;
  EXPECT_EQ(::fcntl(r.fd(), F_ADD_SEALS, F_SEAL_WRITE), -1);
  EXPECT_EQ(errno, EPERM);

  // Expect: the mapping is the file: a write through the descriptor shows.
  const uint8_t b = 0x5a;
  ASSERT_EQ(::pwrite(r.fd(), &b, 1, static_cast<off_t>(page + 7)), 1);
  EXPECT_EQ(static_cast<uint8_t>(r.data()[page + 7]), 0x5a);

  ShmRegion none;
  EXPECT_EQ(ShmRegion::create("droce-test", 0, {}, &none), -EINVAL);
  EXPECT_FALSE(none.mapped());

  // Expect: moving keeps the one mapping; reset unmaps.
  std::byte* p = r.data();
  ShmRegion moved(std::move(r));
  EXPECT_FALSE(r.mapped());
  EXPECT_EQ(moved.data(), p);
  moved.reset();
  EXPECT_FALSE(moved.mapped());
  EXPECT_EQ(moved.fd(), -1);
}

TEST(ShmRegion, MapPeerRefusesUnsealedUndersizedAndForeignDescriptors) {
  const size_t page = page_size();
  // `out` already holds a mapping: a refused descriptor must leave it as it was.
  ShmRegion out;
  ASSERT_EQ(ShmRegion::create("droce-test-out", page, {}, &out), 0);
  std::byte* const before = out.data();

  {  // No seals at all: the peer could truncate it under us later.
    Fd fd(::memfd_create("droce-unsealed", MFD_CLOEXEC));
    ASSERT_TRUE(fd.valid());
    ASSERT_EQ(::ftruncate(fd.get(), static_cast<off_t>(2 * page)), 0);
    EXPECT_EQ(ShmRegion::map_peer(fd.get(), 2 * page, {}, &out), -EPERM);
  }
  {  // Shrink-sealed, but the seals themselves are not sealed: not enough.
    Fd fd(::memfd_create("droce-half-sealed", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    ASSERT_TRUE(fd.valid());
    ASSERT_EQ(::ftruncate(fd.get(), static_cast<off_t>(2 * page)), 0);
    ASSERT_EQ(::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
    EXPECT_EQ(ShmRegion::map_peer(fd.get(), 2 * page, {}, &out), -EPERM);
  }
  {  // Write-sealed: we could not write our half of the protocol.
    Fd fd(::memfd_create("droce-write-sealed", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    ASSERT_TRUE(fd.valid());
    ASSERT_EQ(::ftruncate(fd.get(), static_cast<off_t>(page)), 0);
    ASSERT_EQ(::fcntl(fd.get(), F_ADD_SEALS, ShmRegion::kRequiredSeals | F_SEAL_WRITE), 0);
    EXPECT_EQ(ShmRegion::map_peer(fd.get(), page, {}, &out), -EPERM);
  }
  ShmRegion good;
  ASSERT_EQ(ShmRegion::create("droce-peer", 2 * page, {}, &good), 0);
  // Sealed, but smaller than the ring it is said to hold.
  EXPECT_EQ(ShmRegion::map_peer(good.fd(), 3 * page, {}, &out), -EINVAL);
  EXPECT_EQ(ShmRegion::map_peer(good.fd(), 0, {}, &out), -EINVAL);
  {  // Not a memfd at all.
    int p[2];
    ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
    Fd r(p[0]), w(p[1]);
    EXPECT_EQ(ShmRegion::map_peer(r.get(), page, {}, &out), -ENODEV);
  }
  EXPECT_EQ(ShmRegion::map_peer(-1, page, {}, &out), -EBADF);
  {  // The right memfd, reopened read-only: the shared writable mapping fails.
    const std::string path = "/proc/self/fd/" + std::to_string(good.fd());
    Fd ro(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(ro.valid());
    EXPECT_EQ(ShmRegion::map_peer(ro.get(), page, {}, &out), -EACCES);
  }
  EXPECT_EQ(out.data(), before) << "a refused descriptor changed the output region";

  // Expect: a properly sealed one of the right size maps, and is the same memory.
  ASSERT_EQ(ShmRegion::map_peer(good.fd(), 2 * page, {}, &out), 0);
  EXPECT_EQ(out.size(), 2 * page);
  EXPECT_EQ(out.fd(), -1) << "map_peer borrows the descriptor";
  good.data()[page + 3] = std::byte{0x77};
  EXPECT_EQ(out.data()[page + 3], std::byte{0x77});
  // A size that is not a page multiple maps its last partial page too.
  ShmRegion part;
  ASSERT_EQ(ShmRegion::map_peer(good.fd(), page + 100, {}, &part), 0);
  EXPECT_EQ(part.size(), 2 * page);
}

TEST(ShmRegion, GuardPagesFaultOnEitherSide) {
  const size_t page = page_size();
  ShmRegion r;
  ASSERT_EQ(ShmRegion::create("droce-guarded", 2 * page, ShmMapOptions{.guard_pages = true}, &r), 0);
  ASSERT_EQ(r.size(), 2 * page);
  // The control: the harness sees an access that works as working.
  EXPECT_EQ(touch(r.data()), kReadSucceeded);
  EXPECT_EQ(touch(r.data() + r.size() - 1), kReadSucceeded);
  // Expect: one byte past either end faults.
  EXPECT_EQ(touch(r.data() + r.size()), kFaulted);
  EXPECT_EQ(touch(r.data() - 1), kFaulted);
  // A peer's mapping can have guards too.
  ShmRegion peer;
  ASSERT_EQ(ShmRegion::map_peer(r.fd(), page, ShmMapOptions{.guard_pages = true}, &peer), 0);
  EXPECT_EQ(touch(peer.data() + page - 1), kReadSucceeded);
  EXPECT_EQ(touch(peer.data() + page), kFaulted);
}

TEST(ShmRegion, DontForkKeepsTheMappingOutOfChildren) {
  ShmRegion shared, kept;
  ASSERT_EQ(ShmRegion::create("droce-shared", page_size(), {}, &shared), 0);
  ASSERT_EQ(ShmRegion::create("droce-dontfork", page_size(), ShmMapOptions{.dont_fork = true}, &kept), 0);
  kept.data()[0] = std::byte{1};
  EXPECT_EQ(touch(shared.data()), kReadSucceeded);
  // Expect: a forked child has no mapping there, so it cannot post into the
  // parent's rings.
  EXPECT_EQ(touch(kept.data()), kFaulted);
  EXPECT_EQ(kept.data()[0], std::byte{1});
}

TEST(ShmRegion, FixedAddressNeverReplacesAMapping) {
  const size_t page = page_size();
  // Find a free stretch: map something, note where, let it go.
  void* probe = ::mmap(nullptr, 8 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(probe, MAP_FAILED);
  ASSERT_EQ(::munmap(probe, 8 * page), 0);
  auto* at = static_cast<std::byte*>(probe) + 2 * page;

  ShmRegion a;
  ASSERT_EQ(ShmRegion::create("droce-fixed", 2 * page, ShmMapOptions{.fixed_address = at, .guard_pages = true}, &a),
            0);
  EXPECT_EQ(a.data(), at);
  EXPECT_EQ(touch(at + 2 * page), kFaulted);
  // Expect: the same address again, or one overlapping a's guard, is refused,
  // and a's mapping is untouched.
  a.data()[0] = std::byte{1};
  ShmRegion b;
  EXPECT_EQ(ShmRegion::create("droce-fixed", page, ShmMapOptions{.fixed_address = at}, &b), -EEXIST);
  EXPECT_EQ(ShmRegion::map_peer(a.fd(), page, ShmMapOptions{.fixed_address = at + 3 * page, .guard_pages = true}, &b),
            -EEXIST);
  EXPECT_EQ(a.data()[0], std::byte{1});
  EXPECT_FALSE(b.mapped());
  EXPECT_EQ(ShmRegion::create("droce-fixed", page, ShmMapOptions{.fixed_address = at + 1}, &b), -EINVAL);
  // Once a is gone, the address is free for a peer's mapping of the same file.
  Fd keep(::dup(a.fd()));
  a.reset();
  ASSERT_EQ(ShmRegion::map_peer(keep.get(), 2 * page, ShmMapOptions{.fixed_address = at}, &b), 0);
  EXPECT_EQ(b.data(), at);
  EXPECT_EQ(b.data()[0], std::byte{1});
}

TEST(ShmRegion, DescriptorPassesOverTheControlSocketAndStaysSealed) {
  const size_t page = page_size();
  const size_t size = 4 * page;
  Fd parent_end, child_end;
  ASSERT_NO_FATAL_FAILURE(socket_pair(&parent_end, &child_end));

  // The child plays the provider: it creates the region, hands it over, and
  // then tries to pull it out from under the daemon.
  Child child([&]() -> int {
    parent_end.reset();
    const int s = child_end.get();
    ShmRegion r;
    if (ShmRegion::create("droce-provider", size, {}, &r) != 0) return kUnexpected;
    r.data()[10] = std::byte{0x11};
    const uint8_t hello[] = {1};
    const int fds[] = {r.fd()};
    if (send_message(s, hello, fds) != 0) return kSocketError;
    uint64_t w;
    if (!receive_word(s, &w) || w != 1) return kSocketError;  // the daemon has mapped it
    // Writes after the daemon mapped it; then a shrink, which must fail.
    std::memset(r.data() + page, 0xa5, page);
    errno = 0;
    const int rc = ::ftruncate(r.fd(), 0);
    if (!send_word(s, rc == 0 ? 0 : static_cast<uint64_t>(errno))) return kSocketError;
    if (!receive_word(s, &w) || w != 2) return kSocketError;  // the daemon has written
    return r.data()[3 * page + 1] == std::byte{0x3c} ? kOk : kBadEntry;
  });
  ASSERT_TRUE(child.started());
  child_end.reset();

  std::vector<uint8_t> buf;
  std::vector<Fd> fds;
  ASSERT_EQ(receive_message(parent_end.get(), &buf, 16, &fds), 1);
  ASSERT_EQ(fds.size(), 1u);
  ShmRegion r;
  ASSERT_EQ(ShmRegion::map_peer(fds[0].get(), size, {}, &r), 0);
  fds.clear();  // the mapping outlives the descriptor
  EXPECT_EQ(r.data()[10], std::byte{0x11});
  ASSERT_TRUE(send_word(parent_end.get(), 1));
  uint64_t err = 0;
  ASSERT_TRUE(receive_word(parent_end.get(), &err));
  // Expect: the peer's shrink was refused, and what it wrote since is here.
  EXPECT_EQ(err, static_cast<uint64_t>(EPERM));
  uint64_t sum = 0;
  for (size_t i = 0; i < size; ++i) sum += static_cast<uint8_t>(r.data()[i]);  // every page: no SIGBUS
  EXPECT_EQ(sum, 0x11u + 0xa5u * page);
  r.data()[3 * page + 1] = std::byte{0x3c};
  ASSERT_TRUE(send_word(parent_end.get(), 2));
  EXPECT_EQ(child.wait(), kOk) << "the child did not see the daemon's write";
}

// ---- ShmRing in one process ------------------------------------------------

TEST(ShmRing, PushPopInOrderFullAndEmpty) {
  GuardedRing ring;
  ASSERT_NO_FATAL_FAILURE(make_ring({8, 32}, 0, &ring));
  ShmRingProducer p;
  ShmRingConsumer c;
  ASSERT_EQ(ShmRingProducer::attach(ring.mem, ring.g, &p), 0);
  ASSERT_EQ(ShmRingConsumer::attach(ring.mem, ring.g, &c), 0);
  EXPECT_EQ(p.capacity(), 8u);
  EXPECT_EQ(c.entry_size(), 32u);
  EXPECT_EQ(p.free(), 8u);
  EXPECT_EQ(c.size(), 0u);

  Entry e;
  EXPECT_EQ(c.try_pop(&e), ShmRingStatus::empty);
  for (uint64_t i = 0; i < 8; ++i) {
    const Entry in = make_entry(i, 1);
    ASSERT_EQ(p.try_push(&in), ShmRingStatus::ok) << i;
  }
  // Expect: a ninth does not fit, and nothing was overwritten.
  const Entry extra = make_entry(99, 1);
  EXPECT_EQ(p.try_push(&extra), ShmRingStatus::full);
  EXPECT_EQ(p.free(), 0u);
  EXPECT_EQ(p.size(), 8u);
  EXPECT_EQ(c.size(), 8u);
  EXPECT_EQ(c.free(), 0u);
  for (uint64_t i = 0; i < 8; ++i) {
    ASSERT_EQ(c.try_pop(&e), ShmRingStatus::ok) << i;
    EXPECT_EQ(e, make_entry(i, 1)) << "out of order at " << i;
  }
  EXPECT_EQ(c.try_pop(&e), ShmRingStatus::empty);
  EXPECT_EQ(p.free(), 8u);
  EXPECT_EQ(load_word(ring.mem, kProducerIndex), 8u);
  EXPECT_EQ(load_word(ring.mem, kConsumerIndex), 8u);
  EXPECT_FALSE(p.corrupted());
  EXPECT_FALSE(c.corrupted());
}

TEST(ShmRing, FreeRunningIndexesWrapAtUint32Max) {
  const uint64_t seed = test::test_seed();
  SCOPED_TRACE("DROCE_TEST_SEED=" + std::to_string(seed));
  constexpr uint32_t kFirst = UINT32_MAX - 5;
  GuardedRing ring;
  ASSERT_NO_FATAL_FAILURE(make_ring({16, 32}, kFirst, &ring));
  ShmRingProducer p;
  ShmRingConsumer c;
  ASSERT_EQ(ShmRingProducer::attach(ring.mem, ring.g, &p), 0);
  ASSERT_EQ(ShmRingConsumer::attach(ring.mem, ring.g, &c), 0);
  EXPECT_EQ(p.index(), kFirst);

  // Expect: a fill level that straddles 2^32 counts right.
  uint64_t pushed = 0, popped = 0;
  for (; pushed < 10; ++pushed) {
    const Entry in = make_entry(pushed, seed);
    ASSERT_EQ(p.try_push(&in), ShmRingStatus::ok);
  }
  EXPECT_EQ(p.index(), 4u) << "the producer index wrapped";
  EXPECT_EQ(c.size(), 10u);
  EXPECT_EQ(p.free(), 6u);

  // Then random pushes and pops, many times around the ring and the index.
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 5000; ++round) {
    const uint32_t np = static_cast<uint32_t>(rng() % 17);
    for (uint32_t i = 0; i < np; ++i) {
      const Entry in = make_entry(pushed, seed);
      const ShmRingStatus st = p.try_push(&in);
      ASSERT_EQ(st, pushed - popped < 16 ? ShmRingStatus::ok : ShmRingStatus::full);
      if (st == ShmRingStatus::ok) ++pushed;
    }
    ASSERT_EQ(c.size(), pushed - popped);
    const uint32_t nc = static_cast<uint32_t>(rng() % 17);
    for (uint32_t i = 0; i < nc; ++i) {
      Entry e;
      const ShmRingStatus st = c.try_pop(&e);
      ASSERT_EQ(st, popped < pushed ? ShmRingStatus::ok : ShmRingStatus::empty);
      if (st == ShmRingStatus::ok) {
        ASSERT_EQ(e, make_entry(popped, seed));
        ++popped;
      }
    }
    ASSERT_EQ(p.free(), 16 - (pushed - popped));
  }
  EXPECT_EQ(static_cast<uint32_t>(kFirst + pushed), p.index());
  EXPECT_EQ(static_cast<uint32_t>(kFirst + popped), c.index());
}

TEST(ShmRing, BulkIsAllOrNothingAndBurstTakesWhatFits) {
  // Position 12 of 16: a bulk of 10 splits 4 + 6 across the end of the ring.
  GuardedRing ring;
  ASSERT_NO_FATAL_FAILURE(make_ring({16, 32}, UINT32_MAX - 3, &ring));
  ShmRingProducer p;
  ShmRingConsumer c;
  ASSERT_EQ(ShmRingProducer::attach(ring.mem, ring.g, &p), 0);
  ASSERT_EQ(ShmRingConsumer::attach(ring.mem, ring.g, &c), 0);
  std::vector<Entry> in(40), out(40);
  for (uint64_t i = 0; i < in.size(); ++i) in[i] = make_entry(i, 7);

  ASSERT_EQ(p.push_bulk(&in[0], 10), ShmRingStatus::ok);
  // Expect: a bulk that does not fit pushes nothing.
  EXPECT_EQ(p.push_bulk(&in[10], 7), ShmRingStatus::full);
  EXPECT_EQ(c.size(), 10u);
  EXPECT_EQ(p.push_bulk(&in[10], 17), ShmRingStatus::full) << "more than the ring holds";
  EXPECT_EQ(p.push_bulk(&in[10], 0), ShmRingStatus::ok);
  // Expect: a burst takes what fits and says it was cut short.
  uint32_t n = 99;
  EXPECT_EQ(p.push_burst(&in[10], 7, &n), ShmRingStatus::full);
  EXPECT_EQ(n, 6u);
  EXPECT_EQ(p.push_burst(&in[16], 3, &n), ShmRingStatus::full);
  EXPECT_EQ(n, 0u);
  EXPECT_EQ(c.size(), 16u);

  // Expect: a pop bulk of more than there is takes nothing.
  EXPECT_EQ(c.pop_bulk(out.data(), 17), ShmRingStatus::empty);
  EXPECT_EQ(c.size(), 16u);
  EXPECT_EQ(c.pop_burst(out.data(), 5, &n), ShmRingStatus::ok);
  EXPECT_EQ(n, 5u);
  EXPECT_EQ(c.pop_bulk(&out[5], 0), ShmRingStatus::ok);
  EXPECT_EQ(c.pop_bulk(&out[5], 11), ShmRingStatus::ok);
  EXPECT_EQ(c.pop_burst(&out[16], 4, &n), ShmRingStatus::empty);
  EXPECT_EQ(n, 0u);
  for (size_t i = 0; i < 16; ++i) EXPECT_EQ(out[i], in[i]) << i;

  // Around again: a burst across the end, then a partial pop burst.
  ASSERT_EQ(p.push_burst(&in[16], 12, &n), ShmRingStatus::ok);
  EXPECT_EQ(n, 12u);
  EXPECT_EQ(c.pop_burst(&out[16], 20, &n), ShmRingStatus::empty);
  EXPECT_EQ(n, 12u);
  for (size_t i = 16; i < 28; ++i) EXPECT_EQ(out[i], in[i]) << i;
}

TEST(ShmRing, ReserveAndPeekWorkInPlace) {
  GuardedRing ring;
  ASSERT_NO_FATAL_FAILURE(make_ring({8, 32}, UINT32_MAX - 1, &ring));
  ShmRingProducer p;
  ShmRingConsumer c;
  ASSERT_EQ(ShmRingProducer::attach(ring.mem, ring.g, &p), 0);
  ASSERT_EQ(ShmRingConsumer::attach(ring.mem, ring.g, &c), 0);

  uint32_t got = 0;
  ASSERT_EQ(p.reserve(5, &got), ShmRingStatus::ok);
  ASSERT_EQ(got, 5u);
  for (uint32_t i = 0; i < got; ++i) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p.slot(i)) % 8, 0u);
    const Entry e = make_entry(i, 3);
    std::memcpy(p.slot(i), &e, sizeof e);
  }
  // Expect: nothing is visible until published, and publishing part of a
  // reservation publishes its front.
  EXPECT_EQ(c.size(), 0u);
  p.publish(3);
  EXPECT_EQ(c.size(), 3u);
  p.publish(2);
  EXPECT_EQ(c.size(), 5u);

  ASSERT_EQ(c.peek(10, &got), ShmRingStatus::empty);
  ASSERT_EQ(got, 5u);
  for (uint32_t i = 0; i < got; ++i) {
    Entry e;
    c.copy_entry(i, &e);
    EXPECT_EQ(e, make_entry(i, 3));
    EXPECT_EQ(std::memcmp(c.entry(i), &e, sizeof e), 0);
  }
  // Expect: peeking releases nothing; release gives back the front.
  EXPECT_EQ(p.free(), 3u);
  c.release(2);
  EXPECT_EQ(p.free(), 5u);
  EXPECT_EQ(c.size(), 3u);

  // Expect: a reservation larger than the free space is cut to it.
  ASSERT_EQ(p.reserve(8, &got), ShmRingStatus::full);
  EXPECT_EQ(got, 5u);
  p.publish(0);
  EXPECT_EQ(c.size(), 3u);
  ASSERT_EQ(c.peek(3, &got), ShmRingStatus::ok);
  Entry e;
  c.copy_entry(0, &e);
  EXPECT_EQ(e, make_entry(2, 3));

  // Expect: a part of an entry lands at its own offsets and nothing else is written; a range
  // past the entry is cut at its end.
  const Entry want = make_entry(3, 3);
  uint8_t part[sizeof(Entry) + 8];
  std::memset(part, 0xee, sizeof part);
  c.copy_entry(1, part, 8, 20);
  for (size_t i = 0; i < sizeof part; ++i) {
    if (i >= 8 && i < 20) EXPECT_EQ(part[i], reinterpret_cast<const uint8_t*>(&want)[i]) << i;
    else EXPECT_EQ(part[i], 0xee) << i;
  }
  c.copy_entry(1, part, 0, 8);
  c.copy_entry(1, part, 20, 1000);
  EXPECT_EQ(std::memcmp(part, &want, sizeof want), 0);
  EXPECT_EQ(part[sizeof want], 0xee);
  c.release(3);
  EXPECT_EQ(c.size(), 0u);
}

TEST(ShmRing, AttachChecksTheHeaderAgainstWhatTheCallerExpects) {
  GuardedRing ring;
  ASSERT_NO_FATAL_FAILURE(make_ring({64, 64}, 1000, &ring));
  const ShmRingGeometry g = ring.g;
  ShmRingConsumer c;
  ShmRingProducer p;
  EXPECT_EQ(ShmRingConsumer::attach(ring.mem, g, &c), 0);

  // Geometry this ABI cannot describe.
  for (const ShmRingGeometry bad : {ShmRingGeometry{0, 64}, ShmRingGeometry{3, 64}, ShmRingGeometry{64, 0},
                                    ShmRingGeometry{64, 12}, ShmRingGeometry{1, kShmRingMaxEntrySize + 8}}) {
    EXPECT_FALSE(shm_ring_geometry_valid(bad));
    EXPECT_EQ(shm_ring_bytes(bad), 0u);
    EXPECT_EQ(ShmRingProducer::attach(ring.mem, bad, &p), -EINVAL) << bad.entry_count << "x" << bad.entry_size;
    EXPECT_EQ(shm_ring_format(ring.mem, bad), -EINVAL);
  }
  EXPECT_EQ(shm_ring_bytes(g), 256u + 64 * 64);
  EXPECT_EQ(ShmRingProducer::attach(ring.mem.first(ring.mem.size() - 8), g, &p), -EINVAL) << "too small";
  EXPECT_EQ(ShmRingProducer::attach(ring.region.bytes().subspan(8), g, &p), -EINVAL) << "misaligned";
  EXPECT_TRUE(p.corrupted()) << "a failed attach left the view attached";

  // A header that says something else than the caller knows.
  EXPECT_EQ(ShmRingProducer::attach(ring.mem, {32, 64}, &p), -EPROTO);
  EXPECT_EQ(ShmRingProducer::attach(ring.mem, {64, 56}, &p), -EPROTO);
  struct Poke {
    size_t offset;
    uint32_t value;
  };
  for (const Poke poke : {Poke{offsetof(ShmRingHeader, magic), 0}, Poke{offsetof(ShmRingHeader, abi_version), 2},
                          Poke{offsetof(ShmRingHeader, header_size), 512}, Poke{offsetof(ShmRingHeader, flags), 1},
                          Poke{offsetof(ShmRingHeader, entry_count), 128}}) {
    ASSERT_EQ(shm_ring_format(ring.mem, g, 1000), 0);
    store_word(ring.mem, poke.offset, poke.value);
    EXPECT_EQ(ShmRingProducer::attach(ring.mem, g, &p), -EPROTO) << "offset " << poke.offset;
  }

  // Indexes that cannot both be right, and the extremes that can.
  ASSERT_EQ(shm_ring_format(ring.mem, g, 1000), 0);
  store_word(ring.mem, kProducerIndex, 1000 + 65);
  EXPECT_EQ(ShmRingConsumer::attach(ring.mem, g, &c), -EBADMSG);
  store_word(ring.mem, kProducerIndex, 999);
  EXPECT_EQ(ShmRingConsumer::attach(ring.mem, g, &c), -EBADMSG);
  store_word(ring.mem, kProducerIndex, 1000 + 64);
  ASSERT_EQ(ShmRingConsumer::attach(ring.mem, g, &c), 0);
  EXPECT_EQ(c.size(), 64u);
  ASSERT_EQ(ShmRingProducer::attach(ring.mem, g, &p), 0);
  EXPECT_EQ(p.free(), 0u);
  EXPECT_EQ(p.index(), 1064u);

  // Expect: a view never attached, or moved from, touches nothing.
  ShmRingProducer detached;
  EXPECT_TRUE(detached.corrupted());
  EXPECT_EQ(detached.free(), 0u);
  const Entry e{};
  EXPECT_EQ(detached.try_push(&e), ShmRingStatus::corrupt);
  ShmRingConsumer taken(std::move(c));
  EXPECT_EQ(taken.size(), 64u);
  Entry out;
  EXPECT_EQ(c.try_pop(&out), ShmRingStatus::corrupt);
  EXPECT_STREQ(to_string(ShmRingStatus::corrupt), "corrupt");
}

// ---- ShmRing across processes ------------------------------------------------

constexpr uint64_t kCrossProcessEntries = 3'000'000;
// 1024 x 32 B, starting 700 short of 2^32: the indexes wrap while data is in flight.
constexpr ShmRingGeometry kBigGeometry{1024, 32};
constexpr uint32_t kBigFirst = UINT32_MAX - 700;

TEST(ShmRingAcrossProcesses, ChildProducesParentConsumes) {
  const uint64_t seed = test::test_seed();
  SCOPED_TRACE("DROCE_TEST_SEED=" + std::to_string(seed));
  GuardedRing ring;
  ASSERT_NO_FATAL_FAILURE(make_ring(kBigGeometry, kBigFirst, &ring));
  Child child([&] { return produce(ring.mem, ring.g, kCrossProcessEntries, seed); });
  ASSERT_TRUE(child.started());
  EXPECT_EQ(consume(ring.mem, ring.g, kCrossProcessEntries, seed), kOk);
  EXPECT_EQ(child.wait(), kOk);
  EXPECT_EQ(load_word(ring.mem, kConsumerIndex), static_cast<uint32_t>(kBigFirst + kCrossProcessEntries));
}

TEST(ShmRingAcrossProcesses, ParentProducesChildConsumes) {
  const uint64_t seed = test::test_seed();
  SCOPED_TRACE("DROCE_TEST_SEED=" + std::to_string(seed));
  GuardedRing ring;
  ASSERT_NO_FATAL_FAILURE(make_ring(kBigGeometry, kBigFirst, &ring));
  Child child([&] { return consume(ring.mem, ring.g, kCrossProcessEntries, seed); });
  ASSERT_TRUE(child.started());
  EXPECT_EQ(produce(ring.mem, ring.g, kCrossProcessEntries, seed), kOk);
  EXPECT_EQ(child.wait(), kOk);
  EXPECT_EQ(load_word(ring.mem, kProducerIndex), static_cast<uint32_t>(kBigFirst + kCrossProcessEntries));
}

// ---- ShmRing against a hostile peer ----------------------------------------

TEST(ShmRingHostilePeer, RewrittenHeaderMovesNoAccess) {
  // The child produces correctly through its own view while rewriting the
  // header's descriptor with garbage before every burst: a view never reads
  // the descriptor again, so every entry still arrives, in order.
  const uint64_t seed = test::test_seed();
  SCOPED_TRACE("DROCE_TEST_SEED=" + std::to_string(seed));
  constexpr uint64_t kEntries = 200'000;
  constexpr ShmRingGeometry g{16, 32};  // small: many trips around
  GuardedRing ring;
  ASSERT_NO_FATAL_FAILURE(make_ring(g, UINT32_MAX - 20, &ring));
  // Both views attach before the first scribble, as they would at create time.
  ShmRingConsumer c;
  ASSERT_EQ(ShmRingConsumer::attach(ring.mem, g, &c), 0);
  Child child([&] {
    ShmRingProducer p;
    if (ShmRingProducer::attach(ring.mem, g, &p) != 0) return static_cast<int>(kAttachFailed);
    std::mt19937_64 rng(seed);
    auto* h = reinterpret_cast<ShmRingHeader*>(ring.mem.data());
    return produce(p, kEntries, seed, [&] {
      h->magic = ~kShmRingMagic;
      h->abi_version = static_cast<uint32_t>(rng());
      h->header_size = 0xffffffff;
      h->entry_count = 0xffffffff;
      h->entry_size = 0xfffffff8;
      h->flags = static_cast<uint32_t>(rng());
      for (uint32_t& w : h->reserved0) w = static_cast<uint32_t>(rng());
      for (uint32_t& w : h->reserved3) w = static_cast<uint32_t>(rng());
    });
  });
  ASSERT_TRUE(child.started());
  EXPECT_EQ(consume(c, kEntries, seed), kOk);
  EXPECT_EQ(child.wait(), kOk);
  // Expect: the header really was garbage, and a new attach refuses it.
  EXPECT_NE(load_word(ring.mem, offsetof(ShmRingHeader, magic)), kShmRingMagic);
  ShmRingConsumer again;
  EXPECT_EQ(ShmRingConsumer::attach(ring.mem, g, &again), -EPROTO);
}

// The hostile child of the scripted tests: it stores the 32-bit value it is
// sent at the offset it is sent, into the ring's memory, and acknowledges.
struct PokeMsg {
  uint32_t offset;
  uint32_t value;
};

int poke_server(int sock, std::span<std::byte> mem) {
  for (;;) {
    std::vector<uint8_t> buf;
    std::vector<Fd> fds;
    const ssize_t n = receive_message(sock, &buf, 64, &fds);
    if (n == 0) return kOk;  // the parent is done
    if (n != static_cast<ssize_t>(sizeof(PokeMsg))) return kSocketError;
    PokeMsg m;
    std::memcpy(&m, buf.data(), sizeof m);
    if (m.offset % 4 != 0 || m.offset + 4 > mem.size()) return kUnexpected;
    store_word(mem, m.offset, m.value);
    if (!send_word(sock, m.offset)) return kSocketError;
  }
}

class ShmRingHostileIndex : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = test::test_seed();
    ASSERT_NO_FATAL_FAILURE(make_ring(kTightGeometry, 0, &ring_));
    ASSERT_NO_FATAL_FAILURE(socket_pair(&sock_, &child_sock_));
    child_ = std::make_unique<Child>([this] {
      sock_.reset();
      return poke_server(child_sock_.get(), ring_.mem);
    });
    ASSERT_TRUE(child_->started());
    child_sock_.reset();
  }

  void TearDown() override {
    sock_.reset();  // end of file: the child returns
    if (child_) {
      EXPECT_EQ(child_->wait(), kOk);
    }
  }

  // The child writes `value` at `offset` of the ring; returns once it has.
  void poke(size_t offset, uint32_t value) {
    const PokeMsg m{static_cast<uint32_t>(offset), value};
    uint8_t b[sizeof m];
    std::memcpy(b, &m, sizeof m);
    ASSERT_EQ(send_message(sock_.get(), b), 0);
    uint64_t ack = 0;
    ASSERT_TRUE(receive_word(sock_.get(), &ack));
    ASSERT_EQ(ack, offset);
  }

  uint64_t seed_ = 0;
  GuardedRing ring_;
  Fd sock_, child_sock_;
  std::unique_ptr<Child> child_;
};

constexpr uint32_t kCount = kTightGeometry.entry_count;

TEST_F(ShmRingHostileIndex, ImpossibleProducerIndexIsCorruption) {
  SCOPED_TRACE("DROCE_TEST_SEED=" + std::to_string(seed_));
  const ShmRingGeometry g = kTightGeometry;
  std::vector<std::byte> buf(kCount * g.entry_size);
  ShmRingConsumer c;
  auto fresh = [&](uint32_t first) {
    ASSERT_EQ(shm_ring_format(ring_.mem, g, first), 0);
    ASSERT_EQ(ShmRingConsumer::attach(ring_.mem, g, &c), 0);
  };
  uint32_t n = 0;
  const uint32_t f = UINT32_MAX - 9;

  // A full ring is possible: all of it is read, in bounds.
  ASSERT_NO_FATAL_FAILURE(fresh(f));
  ASSERT_NO_FATAL_FAILURE(poke(kProducerIndex, f + kCount));
  EXPECT_EQ(c.size(), kCount);
  EXPECT_EQ(c.pop_burst(buf.data(), kCount + 5, &n), ShmRingStatus::empty);
  EXPECT_EQ(n, kCount);
  EXPECT_FALSE(c.corrupted());

  // One further is not; and once caught, the view stays dead and writes nothing.
  ASSERT_NO_FATAL_FAILURE(fresh(f));
  ASSERT_NO_FATAL_FAILURE(poke(kProducerIndex, f + kCount + 1));
  EXPECT_EQ(c.peek(1, &n), ShmRingStatus::corrupt);
  EXPECT_EQ(n, 0u);
  EXPECT_TRUE(c.corrupted());
  ASSERT_NO_FATAL_FAILURE(poke(kProducerIndex, f + 1));  // even a good value now
  EXPECT_EQ(c.try_pop(buf.data()), ShmRingStatus::corrupt);
  EXPECT_EQ(c.pop_burst(buf.data(), 4, &n), ShmRingStatus::corrupt);
  EXPECT_EQ(c.size(), 0u);
  c.release(1);
  EXPECT_EQ(load_word(ring_.mem, kConsumerIndex), f) << "a corrupted view wrote its index";

  // Behind the consumer, and half the index space away.
  for (const uint32_t bad : {f - 1, f - kCount, f + 0x80000000u, f + 0x7fffffffu}) {
    ASSERT_NO_FATAL_FAILURE(fresh(f));
    ASSERT_NO_FATAL_FAILURE(poke(kProducerIndex, bad));
    EXPECT_EQ(c.try_pop(buf.data()), ShmRingStatus::corrupt) << bad;
  }

  // Moving backward, even while still ahead of the consumer.
  ASSERT_NO_FATAL_FAILURE(fresh(f));
  ASSERT_NO_FATAL_FAILURE(poke(kProducerIndex, f + 10));
  EXPECT_EQ(c.size(), 10u);
  ASSERT_NO_FATAL_FAILURE(poke(kProducerIndex, f + 4));
  EXPECT_EQ(c.size(), 0u);
  EXPECT_TRUE(c.corrupted());

  // The window moves with the consumer.
  ASSERT_NO_FATAL_FAILURE(fresh(f));
  ASSERT_NO_FATAL_FAILURE(poke(kProducerIndex, f + 10));
  ASSERT_EQ(c.pop_bulk(buf.data(), 6), ShmRingStatus::ok);
  ASSERT_NO_FATAL_FAILURE(poke(kProducerIndex, f + 6 + kCount));
  EXPECT_EQ(c.size(), kCount);
  ASSERT_NO_FATAL_FAILURE(poke(kProducerIndex, f + 6 + kCount + 1));
  EXPECT_EQ(c.size(), 0u);
  EXPECT_TRUE(c.corrupted());

  // Random values: corrupt exactly when outside [consumer, consumer + count].
  std::mt19937_64 rng(seed_);
  int corrupt = 0;
  for (int round = 0; round < 1500; ++round) {
    const auto first = static_cast<uint32_t>(rng());
    const uint32_t v = (round & 1) ? static_cast<uint32_t>(rng())
                                   : first + static_cast<uint32_t>(rng() % (3 * kCount)) - kCount;
    ASSERT_NO_FATAL_FAILURE(fresh(first));
    ASSERT_NO_FATAL_FAILURE(poke(kProducerIndex, v));
    const bool possible = v - first <= kCount;
    const ShmRingStatus st = c.pop_burst(buf.data(), kCount, &n);
    if (possible) {
      ASSERT_NE(st, ShmRingStatus::corrupt) << "first " << first << " producer " << v;
      ASSERT_EQ(n, v - first);
    } else {
      ASSERT_EQ(st, ShmRingStatus::corrupt) << "first " << first << " producer " << v;
      ++corrupt;
    }
  }
  EXPECT_GT(corrupt, 0);
}

TEST_F(ShmRingHostileIndex, ImpossibleConsumerIndexIsCorruption) {
  SCOPED_TRACE("DROCE_TEST_SEED=" + std::to_string(seed_));
  const ShmRingGeometry g = kTightGeometry;
  std::vector<std::byte> buf(kCount * g.entry_size, std::byte{0xee});
  ShmRingProducer p;
  const uint32_t f = UINT32_MAX - 2;
  // A fresh ring with 5 entries published.
  auto fresh = [&](uint32_t first) {
    ASSERT_EQ(shm_ring_format(ring_.mem, g, first), 0);
    ASSERT_EQ(ShmRingProducer::attach(ring_.mem, g, &p), 0);
    ASSERT_EQ(p.push_bulk(buf.data(), 5), ShmRingStatus::ok);
  };
  uint32_t n = 0;

  // Releasing everything published is possible.
  ASSERT_NO_FATAL_FAILURE(fresh(f));
  ASSERT_NO_FATAL_FAILURE(poke(kConsumerIndex, f + 5));
  EXPECT_EQ(p.free(), kCount);
  EXPECT_EQ(p.push_burst(buf.data(), kCount + 1, &n), ShmRingStatus::full);
  EXPECT_EQ(n, kCount) << "the whole ring, in bounds";

  // Releasing more than was published is not; the dead view publishes nothing.
  ASSERT_NO_FATAL_FAILURE(fresh(f));
  ASSERT_NO_FATAL_FAILURE(poke(kConsumerIndex, f + 6));
  // (a reservation the cached free space covers would not re-read the index)
  EXPECT_EQ(p.reserve(kCount, &n), ShmRingStatus::corrupt);
  EXPECT_EQ(n, 0u);
  ASSERT_NO_FATAL_FAILURE(poke(kConsumerIndex, f + 5));
  EXPECT_EQ(p.try_push(buf.data()), ShmRingStatus::corrupt);
  EXPECT_EQ(p.push_burst(buf.data(), 3, &n), ShmRingStatus::corrupt);
  EXPECT_EQ(p.free(), 0u);
  p.publish(1);
  EXPECT_EQ(load_word(ring_.mem, kProducerIndex), f + 5) << "a corrupted view wrote its index";

  // Backward, and behind by more than the ring.
  for (const uint32_t bad : {f - 1, f + 5 - kCount - 1, f + 0x80000000u}) {
    ASSERT_NO_FATAL_FAILURE(fresh(f));
    ASSERT_NO_FATAL_FAILURE(poke(kConsumerIndex, bad));
    EXPECT_EQ(p.size(), 0u) << bad;
    EXPECT_TRUE(p.corrupted()) << bad;
  }
  ASSERT_NO_FATAL_FAILURE(fresh(f));
  ASSERT_NO_FATAL_FAILURE(poke(kConsumerIndex, f + 3));
  EXPECT_EQ(p.size(), 2u);
  ASSERT_NO_FATAL_FAILURE(poke(kConsumerIndex, f + 2));
  EXPECT_EQ(p.free(), 0u) << "a consumer index moving backward";
  EXPECT_TRUE(p.corrupted());

  // Random values: corrupt exactly when outside [first, first + 5].
  std::mt19937_64 rng(seed_);
  int corrupt = 0;
  for (int round = 0; round < 1500; ++round) {
    const auto first = static_cast<uint32_t>(rng());
    const uint32_t v = (round & 1) ? static_cast<uint32_t>(rng()) : first + static_cast<uint32_t>(rng() % 12) - 3;
    ASSERT_NO_FATAL_FAILURE(fresh(first));
    ASSERT_NO_FATAL_FAILURE(poke(kConsumerIndex, v));
    const bool possible = v - first <= 5;
    const ShmRingStatus st = p.push_burst(buf.data(), kCount, &n);
    if (possible) {
      ASSERT_NE(st, ShmRingStatus::corrupt) << "first " << first << " consumer " << v;
      ASSERT_EQ(n, kCount - 5 + (v - first));
    } else {
      ASSERT_EQ(st, ShmRingStatus::corrupt) << "first " << first << " consumer " << v;
      ++corrupt;
    }
  }
  EXPECT_GT(corrupt, 0);
}

TEST(ShmRingHostilePeer, ScribblingEverythingConcurrentlyCrashesNothing) {
  // The child writes random and near-plausible values all over two rings
  // (both indexes, the descriptor, the entries) while the parent uses one as
  // consumer and one as producer, re-formatting and re-attaching whenever it
  // catches corruption. Both rings are flush against guard pages; the test
  // passes if the parent never faults and sees both outcomes on both rings.
  const uint64_t seed = test::test_seed();
  SCOPED_TRACE("DROCE_TEST_SEED=" + std::to_string(seed));
  const ShmRingGeometry g = kTightGeometry;
  GuardedRing in, out;  // the parent consumes `in` and produces into `out`
  ASSERT_NO_FATAL_FAILURE(make_ring(g, 0, &in));
  ASSERT_NO_FATAL_FAILURE(make_ring(g, 0, &out));
  ASSERT_EQ(in.mem.data(), in.region.data()) << "the ring should fill its page exactly";
  ShmRegion control;  // word 0: stop
  ASSERT_EQ(ShmRegion::create("droce-control", page_size(), {}, &control), 0);
  auto* stop = reinterpret_cast<uint32_t*>(control.data());

  Child child([&]() -> int {
    const auto deadline = Clock::now() + kHangGuard;
    std::mt19937_64 rng(seed);
    const std::span<std::byte> rings[] = {in.mem, out.mem};
    for (uint64_t i = 0; std::atomic_ref<uint32_t>(*stop).load(std::memory_order_acquire) == 0; ++i) {
      if ((i & 4095) == 0 && Clock::now() > deadline) return kTimedOut;
      if ((i & 63) == 0) ::sched_yield();  // on one CPU, let the parent look
      const std::span<std::byte> mem = rings[rng() & 1];
      const uint64_t r = rng();
      size_t offset;
      switch (r % 8) {
        case 0: case 1: case 2: offset = kProducerIndex; break;
        case 3: case 4: case 5: offset = kConsumerIndex; break;
        case 6: offset = (r >> 8) % 64 * 4; break;                // anywhere in the header
        default: offset = (r >> 8) % (mem.size() / 4) * 4; break;  // anywhere at all
      }
      const uint32_t now = load_word(mem, offset);
      const auto value = static_cast<uint32_t>((r >> 40) & 1 ? rng() : now + (r >> 41) % 40 - 4);
      store_word(mem, offset, value);
    }
    return kOk;
  });
  ASSERT_TRUE(child.started());

  struct Tally {
    uint64_t ok = 0, corrupt = 0, refused = 0;
  } tin, tout;
  std::mt19937_64 rng(mix(seed));
  std::vector<std::byte> buf(kCount * g.entry_size, std::byte{0x5c});
  ShmRingConsumer c;
  ShmRingProducer p;
  const auto deadline = Clock::now() + kHangGuard;
  auto done = [&] {
    return tin.ok >= 100'000 && tin.corrupt >= 5'000 && tout.ok >= 100'000 && tout.corrupt >= 5'000;
  };
  for (; !done(); ::sched_yield()) {
    ASSERT_LT(Clock::now(), deadline) << "in: " << tin.ok << " ok " << tin.corrupt << " corrupt; out: " << tout.ok
                                      << " ok " << tout.corrupt << " corrupt";
    for (int k = 0; k < 64; ++k) {
      if (c.corrupted()) {
        if (ShmRingConsumer::attach(in.mem, g, &c) != 0) {
          ++tin.refused;
          ASSERT_EQ(shm_ring_format(in.mem, g, static_cast<uint32_t>(rng())), 0);
        }
      } else {
        uint32_t n = 0;
        ShmRingStatus st;
        switch (rng() % 3) {
          case 0: st = c.pop_burst(buf.data(), 1 + rng() % kCount, &n); break;
          case 1:
            st = c.peek(1 + rng() % kCount, &n);
            for (uint32_t i = 0; i < n; ++i) c.copy_entry(i, buf.data() + i * g.entry_size);
            c.release(n);
            break;
          default:
            (void)c.size();
            st = c.corrupted() ? ShmRingStatus::corrupt : ShmRingStatus::ok;
            break;
        }
        ++(st == ShmRingStatus::corrupt ? tin.corrupt : tin.ok);
      }
      if (p.corrupted()) {
        if (ShmRingProducer::attach(out.mem, g, &p) != 0) {
          ++tout.refused;
          ASSERT_EQ(shm_ring_format(out.mem, g, static_cast<uint32_t>(rng())), 0);
        }
      } else {
        uint32_t n = 0;
        ShmRingStatus st;
        switch (rng() % 3) {
          case 0: st = p.push_burst(buf.data(), 1 + rng() % kCount, &n); break;
          case 1:
            st = p.reserve(1 + rng() % kCount, &n);
            for (uint32_t i = 0; i < n; ++i) std::memset(p.slot(i), 0x6b, g.entry_size);
            p.publish(n);
            break;
          default:
            (void)p.free();
            st = p.corrupted() ? ShmRingStatus::corrupt : ShmRingStatus::ok;
            break;
        }
        ++(st == ShmRingStatus::corrupt ? tout.corrupt : tout.ok);
      }
    }
  }
  std::atomic_ref<uint32_t>(*stop).store(1, std::memory_order_release);
  EXPECT_EQ(child.wait(), kOk);
  RecordProperty("in_ok", std::to_string(tin.ok));
  RecordProperty("in_corrupt", std::to_string(tin.corrupt));
  RecordProperty("out_ok", std::to_string(tout.ok));
  RecordProperty("out_corrupt", std::to_string(tout.corrupt));
}

}  // namespace
}  // namespace droce::abi
