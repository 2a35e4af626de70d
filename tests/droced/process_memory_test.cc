// droced's ProcessMemory alone, over this test's own /proc/self/mem (a client's is the same file
// of another process): what it adopts, that reads and writes reach the pages at their virtual
// addresses, that untouched pages come in only when touched, and that an unmapped page is a
// false return, never a signal.

#include "droced/process_memory.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

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

}  // namespace
}  // namespace droce::droced
