// Registered memory turned into memfd mappings in place: contents kept,
// the same pages shared by overlapping registrations, unreadable memory
// refused without a crash.

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "core/shm_region.h"
#include "provider/client/shared_memory.h"

namespace droce::client {
namespace {

TEST(SharedMemory, ConvertsInPlaceKeepingContentsAndSharesOverlaps) {
  const size_t page = core::page_size();
  auto* mem = static_cast<uint8_t*>(mmap(nullptr, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(mem, MAP_FAILED);
  for (size_t i = 0; i < 4 * page; ++i) mem[i] = static_cast<uint8_t>(i * 7);
  SharedMemory sm;
  uintptr_t start = 0;
  std::vector<SharedMemory::Piece> a, b;
  // Two buffers in the same first page, the second reaching into page 2.
  ASSERT_EQ(sm.share(mem + 100, 200, &start, &a), 0);
  EXPECT_EQ(start, reinterpret_cast<uintptr_t>(mem));
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].segment.length, page);
  ASSERT_EQ(sm.share(mem + 1000, page + 10, &start, &b), 0);
  ASSERT_EQ(b.size(), 2u);          // page 0 (already converted) and page 1 (new)
  EXPECT_EQ(b[0].fd, a[0].fd);       // one memory for both registrations
  EXPECT_NE(b[1].fd, a[0].fd);
  EXPECT_EQ(sm.runs(), 2u);
  for (size_t i = 0; i < 4 * page; ++i) ASSERT_EQ(mem[i], static_cast<uint8_t>(i * 7)) << i;
  // Another mapping of the memfd sees the application's writes.
  mem[150] = 0xee;
  void* view = mmap(nullptr, page, PROT_READ, MAP_SHARED, a[0].fd, 0);
  ASSERT_NE(view, MAP_FAILED);
  EXPECT_EQ(static_cast<uint8_t*>(view)[150], 0xee);
  munmap(view, page);
  EXPECT_EQ(core::check_peer_memfd(a[0].fd, page), 0);  // sealed as droced requires
  sm.release(mem + 100, 200);
  EXPECT_EQ(sm.runs(), 2u);  // page 0 still used by the second registration
  sm.release(mem + 1000, page + 10);
  EXPECT_EQ(sm.runs(), 0u);
  EXPECT_EQ(mem[150], 0xee);  // the memory itself is untouched
  munmap(mem, 4 * page);
}

TEST(SharedMemory, ARefusedShareTakesNoReference) {
  const size_t page = core::page_size();
  const size_t pages = 2 * core::ctl::kMaxMrSegments + 1;
  auto* mem = static_cast<uint8_t*>(mmap(nullptr, pages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(mem, MAP_FAILED);
  SharedMemory sm;
  uintptr_t start = 0;
  std::vector<SharedMemory::Piece> p;
  // kMaxMrSegments + 1 runs on every other page, one reference each.
  for (size_t i = 0; i < pages; i += 2) ASSERT_EQ(sm.share(mem + i * page, 1, &start, &p), 0);
  const size_t singles = sm.runs();
  EXPECT_EQ(singles, core::ctl::kMaxMrSegments + 1);
  // The whole range needs more segments than a registration may have.
  EXPECT_EQ(sm.share(mem, pages * page, &start, &p), -E2BIG);
  // Each single run still has exactly its one reference: releasing them
  // forgets them (the gaps the refused call converted stay, unreferenced).
  const size_t after = sm.runs();
  for (size_t i = 0; i < pages; i += 2) sm.release(mem + i * page, 1);
  EXPECT_EQ(sm.runs(), after - singles);
  munmap(mem, pages * page);
}

TEST(SharedMemory, RefusesUnreadableMemoryWithEfault) {
  const size_t page = core::page_size();
  void* mem = mmap(nullptr, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  SharedMemory sm;
  uintptr_t start = 0;
  std::vector<SharedMemory::Piece> p;
  EXPECT_EQ(sm.share(mem, 64, &start, &p), -EFAULT);
  EXPECT_EQ(sm.share(mem, 0, &start, &p), -EINVAL);
  munmap(mem, page);
}

}  // namespace
}  // namespace droce::client
