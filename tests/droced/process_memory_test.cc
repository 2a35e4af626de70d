// droced's ProcessMemory alone, over this test's own /proc/self/mem (a client's is the same file
// of another process): what it adopts, that reads and writes reach the pages at their virtual
// addresses, that untouched pages come in only when touched, and that an unmapped page is a
// false return, never a signal. With the pagemap: ready() answers at once for present pages,
// says "not yet" for the others while its fault-in thread brings them in, and lets an
// unmapped range through once so that the access fails.

#include "droced/process_memory.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

namespace droce::droced {
namespace {

core::Fd open_self(int flags) { return core::Fd(::open("/proc/self/mem", flags | O_CLOEXEC)); }

TEST(ProcessMemory, AdoptsOnlyAProcMemFileOpenedReadWrite) {
  ProcessMemory m;
  EXPECT_EQ(ProcessMemory::adopt(open_self(O_RDONLY), &m), -EINVAL);
  EXPECT_FALSE(m.valid());
  char path[] = "/tmp/droce-pm-XXXXXX";
  core::Fd file(::mkstemp(path));
  ::unlink(path);
  ASSERT_TRUE(file.valid());
  EXPECT_EQ(ProcessMemory::adopt(std::move(file), &m), -EINVAL) << "a regular file is not an address space";
  // Another procfs file opened read-write: some check the writer's rights when written, which
  // would be droced's.
  core::Fd other(::open("/proc/self/attr/current", O_RDWR | O_CLOEXEC));
  if (!other.valid()) other = core::Fd(::open("/proc/self/comm", O_RDWR | O_CLOEXEC));
  ASSERT_TRUE(other.valid());
  EXPECT_EQ(ProcessMemory::adopt(std::move(other), &m), -EINVAL) << "a procfs file that is not mem";
  EXPECT_EQ(ProcessMemory::adopt(core::Fd(::open("/proc/self/task/self/mem", O_RDWR | O_CLOEXEC)), &m), -EINVAL)
      << "(no such file: an invalid descriptor)";
  const std::string task = "/proc/self/task/" + std::to_string(::gettid()) + "/mem";
  EXPECT_EQ(ProcessMemory::adopt(core::Fd(::open(task.c_str(), O_RDWR | O_CLOEXEC)), &m), 0) << "a task's mem";
  EXPECT_EQ(ProcessMemory::adopt(open_self(O_RDWR), &m), 0);
  EXPECT_TRUE(m.valid());
}

TEST(ProcessMemory, ReadsAndWritesByVirtualAddressAndFaultsPagesInOnlyWhenTouched) {
  ProcessMemory m;
  ASSERT_EQ(ProcessMemory::adopt(open_self(O_RDWR), &m), 0);
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  auto* p = static_cast<uint8_t*>(::mmap(nullptr, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(p, MAP_FAILED);
  unsigned char vec[4];
  ASSERT_EQ(::mincore(p, 4 * page, vec), 0);
  EXPECT_EQ((vec[0] | vec[1] | vec[2] | vec[3]) & 1, 0) << "nothing resident before the first access";

  // Step: a write across the boundary of pages 1 and 2.
  const char text[] = "across a page boundary";
  ASSERT_TRUE(m.write(uintptr_t(p + 2 * page - 8), text, sizeof text));
  // Expect: the bytes where the process sees them; exactly those two pages came in.
  EXPECT_EQ(std::memcmp(p + 2 * page - 8, text, sizeof text), 0);
  ASSERT_EQ(::mincore(p, 4 * page, vec), 0);
  EXPECT_EQ(vec[0] & 1, 0);
  EXPECT_EQ(vec[1] & 1, 1);
  EXPECT_EQ(vec[2] & 1, 1);
  EXPECT_EQ(vec[3] & 1, 0);
  char back[sizeof text] = {};
  ASSERT_TRUE(m.read(uintptr_t(p + 2 * page - 8), back, sizeof back));
  EXPECT_STREQ(back, text);

  // Step: page 3 unmapped; an access that ends on it, and one inside it.
  ASSERT_EQ(::munmap(p + 3 * page, page), 0);
  // Expect: false both ways (a short count past page 2 is a failure too), and no signal.
  EXPECT_FALSE(m.read(uintptr_t(p + 3 * page - 4), back, 8));
  EXPECT_FALSE(m.write(uintptr_t(p + 3 * page - 4), text, 8));
  EXPECT_FALSE(m.read(uintptr_t(p + 3 * page + 16), back, 8));
  EXPECT_FALSE(m.write(uintptr_t(p + 3 * page + 16), text, 8));
  // Expect: the bytes before the hole were written by the failed write (as an HCA's DMA up to a
  // failed page): the caller reports an error, not a rollback.
  EXPECT_EQ(std::memcmp(p + 3 * page - 4, text, 4), 0);
  // Expect: an address no process maps (the top of the 64-bit space) fails the same way.
  EXPECT_FALSE(m.read(UINT64_MAX - 4096, back, 8));
  ::munmap(p, 3 * page);
}

core::Fd open_pagemap(int flags = O_RDONLY) { return core::Fd(::open("/proc/self/pagemap", flags | O_CLOEXEC)); }

// Asks until ready() says yes, as the engine's ODP timer would; false if it never does (a bound
// for a broken fault-in thread, not a timing requirement).
using rocev2::OdpReady;

bool ready_eventually(ProcessMemory& m, uint64_t addr, size_t n, bool write, unsigned* noes, uint64_t ahead = 0) {
  for (int i = 0; i < 10000; ++i) {
    if (m.ready(addr, n, write, ahead) == OdpReady::now) return true;
    ++*noes;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

TEST(ProcessMemory, AdoptsOnlyAPagemapOpenedForReading) {
  ProcessMemory m;
  EXPECT_EQ(ProcessMemory::adopt(open_self(O_RDWR), &m, core::Fd(::open("/proc/self/maps", O_RDONLY | O_CLOEXEC))),
            -EINVAL);
  EXPECT_EQ(ProcessMemory::adopt(open_self(O_RDWR), &m, open_self(O_RDONLY)), -EINVAL) << "mem is not a pagemap";
  EXPECT_FALSE(m.valid());
  ASSERT_EQ(ProcessMemory::adopt(open_self(O_RDWR), &m, open_pagemap()), 0);
  EXPECT_TRUE(m.valid());
  EXPECT_TRUE(m.has_pagemap());
}

TEST(ProcessMemory, WithoutAPagemapEveryRangeIsReady) {
  ProcessMemory m;
  ASSERT_EQ(ProcessMemory::adopt(open_self(O_RDWR), &m), 0);
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  auto* p = static_cast<uint8_t*>(::mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(p, MAP_FAILED);
  // Expect: ready at once, though the page is not in (the fault is taken by the copy).
  EXPECT_EQ(m.ready(uintptr_t(p), 8, true, 0), OdpReady::now);
  unsigned char vec = 0;
  ASSERT_EQ(::mincore(p, page, &vec), 0);
  EXPECT_EQ(vec & 1, 0) << "ready() brought nothing in";
  ::munmap(p, page);
}

TEST(ProcessMemory, PagesNotInAreBroughtInOffTheCallersThread) {
  ProcessMemory m;
  ASSERT_EQ(ProcessMemory::adopt(open_self(O_RDWR), &m, open_pagemap()), 0);
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  auto* p = static_cast<uint8_t*>(::mmap(nullptr, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(p, MAP_FAILED);
  p[0] = 1;  // page 0 in; pages 1-3 never touched

  // Step: ask for page 0.
  // Expect: ready at once; no fault-in work.
  EXPECT_EQ(m.ready(uintptr_t(p) + 16, 64, true, 0), OdpReady::now);
  EXPECT_EQ(m.fault_stats().ranges_done, 0u);

  // Step: ask for a range across pages 1 and 2 (for writing).
  unsigned noes = 0;
  ASSERT_TRUE(ready_eventually(m, uintptr_t(p + 2 * page - 100), 200, true, &noes));
  // Expect: "not yet" at first; the thread brought both pages in, page 3 untouched; then the
  // write reaches them.
  EXPECT_GE(noes, 1u);
  EXPECT_EQ(m.fault_stats().ranges_done, 1u);
  unsigned char vec[4];
  ASSERT_EQ(::mincore(p, 4 * page, vec), 0);
  EXPECT_EQ(vec[1] & 1, 1);
  EXPECT_EQ(vec[2] & 1, 1);
  EXPECT_EQ(vec[3] & 1, 0);
  const char text[] = "written after the fault";
  ASSERT_TRUE(m.write(uintptr_t(p + 2 * page - 100), text, sizeof text));
  EXPECT_STREQ(reinterpret_cast<char*>(p + 2 * page - 100), text);
  // Expect: from now on the pagemap says present: ready at once, nothing queued.
  EXPECT_EQ(m.ready(uintptr_t(p + page), 8, false, 0), OdpReady::now);
  EXPECT_EQ(m.fault_stats().ranges_done, 1u);
  ::munmap(p, 4 * page);
}

TEST(ProcessMemory, TheOperationsRestComesInWithTheFault) {
  ProcessMemory m;
  ASSERT_EQ(ProcessMemory::adopt(open_self(O_RDWR), &m, open_pagemap()), 0);
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  auto* p = static_cast<uint8_t*>(::mmap(nullptr, 8 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(p, MAP_FAILED);

  // Step: the first 100 bytes of page 1, with three pages of the operation after them.
  // Expect: the first answer begins the fault, the next finds it on its way.
  EXPECT_EQ(m.ready(uintptr_t(p + page), 100, true, 3 * page), OdpReady::faulting);
  const OdpReady second = m.ready(uintptr_t(p + page), 100, true, 3 * page);
  EXPECT_TRUE(second == OdpReady::waiting || second == OdpReady::now);
  unsigned noes = 0;
  ASSERT_TRUE(ready_eventually(m, uintptr_t(p + page), 100, true, &noes, 3 * page));
  for (int i = 0; i < 10000 && m.fault_stats().ranges_done < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // Expect: two ranges brought in (the asked page, then the rest): pages 1-4, not 0 nor 5-7;
  // the rest's pages are now ready at once.
  EXPECT_EQ(m.fault_stats().ranges_done, 2u);
  unsigned char vec[8];
  ASSERT_EQ(::mincore(p, 8 * page, vec), 0);
  EXPECT_EQ(vec[0] & 1, 0);
  for (int i = 1; i <= 4; ++i) EXPECT_EQ(vec[i] & 1, 1) << "page " << i;
  for (int i = 5; i < 8; ++i) EXPECT_EQ(vec[i] & 1, 0) << "page " << i;
  EXPECT_EQ(m.ready(uintptr_t(p + 3 * page), 4096, true, 0), OdpReady::now);
  ::munmap(p, 8 * page);
}

TEST(ProcessMemory, AFilePageDroppedFromTheMappingComesBackThroughTheThread) {
  char path[] = "/var/tmp/droce-pm-XXXXXX";
  core::Fd file(::mkstemp(path));
  ASSERT_TRUE(file.valid());
  ::unlink(path);
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  std::string content(page, 'x');
  content.replace(0, 5, "hello");
  ASSERT_EQ(::pwrite(file.get(), content.data(), page, 0), ssize_t(page));
  auto* p = static_cast<char*>(::mmap(nullptr, page, PROT_READ, MAP_PRIVATE, file.get(), 0));
  ASSERT_NE(p, MAP_FAILED);
  ASSERT_EQ(p[0], 'h');
  ASSERT_EQ(::madvise(p, page, MADV_DONTNEED), 0);  // out of the mapping (the page cache keeps it)

  ProcessMemory m;
  ASSERT_EQ(ProcessMemory::adopt(open_self(O_RDWR), &m, open_pagemap()), 0);
  unsigned noes = 0;
  ASSERT_TRUE(ready_eventually(m, uintptr_t(p), 5, false, &noes));
  EXPECT_GE(noes, 1u);
  char back[6] = {};
  ASSERT_TRUE(m.read(uintptr_t(p), back, 5));
  EXPECT_STREQ(back, "hello");
  ::munmap(p, page);
}

TEST(ProcessMemory, AnUnmappedRangeIsLetThroughOnceSoThatTheAccessFails) {
  ProcessMemory m;
  ASSERT_EQ(ProcessMemory::adopt(open_self(O_RDWR), &m, open_pagemap()), 0);
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  auto* p = static_cast<uint8_t*>(::mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(p, MAP_FAILED);
  ASSERT_EQ(::munmap(p + page, page), 0);

  // Step: ask for the unmapped page until ready() lets it through.
  unsigned noes = 0;
  ASSERT_TRUE(ready_eventually(m, uintptr_t(p + page), 8, true, &noes));
  // Expect: the thread found it unmapped; the copy that follows fails (the access error).
  EXPECT_EQ(m.fault_stats().ranges_failed, 1u);
  uint8_t back[8];
  EXPECT_FALSE(m.read(uintptr_t(p + page), back, 8));
  ::munmap(p, page);
}

}  // namespace
}  // namespace droce::droced
