// Registered memory turned into memfd mappings in place: contents kept,
// the same pages shared by overlapping registrations, unreadable memory
// refused without a crash.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

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

// A child forked after a registration has its own copy of the converted pages: its reads see
// what was there (the objects next to the buffer too), its writes stay its own, and the parent's
// (and droced's) view of the memory is unchanged.
TEST(SharedMemory, AForkedChildGetsAPrivateCopyOfConvertedPages) {
  const size_t page = core::page_size();
  auto* mem = static_cast<uint8_t*>(mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(mem, MAP_FAILED);
  std::memset(mem, 0x11, 2 * page);
  SharedMemory sm;
  uintptr_t start = 0;
  std::vector<SharedMemory::Piece> pieces;
  ASSERT_EQ(sm.share(mem + 64, 128, &start, &pieces), 0);  // page 0 only; byte 0 is a "neighbour"
  int status = 0;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Readable (not MADV_DONTFORK), with the parent's contents; then written.
    if (mem[0] != 0x11 || mem[100] != 0x11) _exit(1);
    std::memset(mem, 0x22, page);
    _exit(mem[100] == 0x22 ? 0 : 2);
  }
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(mem[0], 0x11);    // the child's writes did not reach us
  EXPECT_EQ(mem[100], 0x11);
  void* view = mmap(nullptr, page, PROT_READ, MAP_SHARED, pieces[0].fd, 0);  // droced's view
  ASSERT_NE(view, MAP_FAILED);
  EXPECT_EQ(static_cast<uint8_t*>(view)[100], 0x11);
  munmap(view, page);
  sm.release(mem + 64, 128);
  munmap(mem, 2 * page);
}

TEST(SharedMemory, ARefusedShareTakesNoReference) {
  const size_t page = core::page_size();
  const size_t pages = 2 * abi::ctl::kMaxMrSegments + 1;
  auto* mem = static_cast<uint8_t*>(mmap(nullptr, pages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(mem, MAP_FAILED);
  SharedMemory sm;
  uintptr_t start = 0;
  std::vector<SharedMemory::Piece> p;
  // kMaxMrSegments + 1 runs on every other page, one reference each.
  for (size_t i = 0; i < pages; i += 2) ASSERT_EQ(sm.share(mem + i * page, 1, &start, &p), 0);
  const size_t singles = sm.runs();
  EXPECT_EQ(singles, abi::ctl::kMaxMrSegments + 1);
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

// A region over 2 GiB converts whole: one process_vm_readv moves at most 2 GiB less a page
// (MAX_RW_COUNT) and says so with a short count, which once failed every such ibv_reg_mr with
// EFAULT. Marks on both sides of the 2 GiB line keep their contents.
TEST(SharedMemory, ARegionLargerThanOneCopyCallKeepsItsContents) {
  const size_t page = core::page_size();
  const size_t len = (size_t{2} << 30) + 4 * page;
  auto* mem = static_cast<uint8_t*>(mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(mem, MAP_FAILED);
  const size_t marks[] = {0, (size_t{1} << 30) + 17, (size_t{2} << 30) - 1, (size_t{2} << 30), len - 1};
  for (size_t at : marks) mem[at] = static_cast<uint8_t>(at * 13 + 1);
  SharedMemory sm;
  uintptr_t start = 0;
  std::vector<SharedMemory::Piece> p;
  ASSERT_EQ(sm.share(mem, len, &start, &p), 0);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].segment.length, len);
  void* view = mmap(nullptr, len, PROT_READ, MAP_SHARED, p[0].fd, 0);
  ASSERT_NE(view, MAP_FAILED);
  for (size_t at : marks) {
    EXPECT_EQ(mem[at], static_cast<uint8_t>(at * 13 + 1)) << at;
    EXPECT_EQ(static_cast<uint8_t*>(view)[at], static_cast<uint8_t>(at * 13 + 1)) << at;
  }
  munmap(view, len);
  sm.release(mem, len);
  munmap(mem, len);
}

// A SysV segment (what UCX's and MPI's intra-node memory is) stays shared when registered:
// the piece is the segment itself, droced's check accepts it, and writes through droced's
// mapping reach every attachment, where a converted copy would have cut this process off
// from them (MPI_Win_allocate over UCX failed so: the peer's shmat found the segment gone).
TEST(SharedMemory, ASysvSegmentStaysSharedAndDrocedAcceptsIt) {
  const size_t page = core::page_size();
  const int id = shmget(IPC_PRIVATE, 4 * page, IPC_CREAT | 0600);
  ASSERT_GE(id, 0) << std::strerror(errno);
  auto* mine = static_cast<uint8_t*>(shmat(id, nullptr, 0));
  auto* other = static_cast<uint8_t*>(shmat(id, nullptr, 0));  // as another process would see it
  shmctl(id, IPC_RMID, nullptr);  // as UCX does: gone when the last one detaches
  ASSERT_NE(mine, reinterpret_cast<uint8_t*>(-1));
  ASSERT_NE(other, reinterpret_cast<uint8_t*>(-1));
  for (size_t i = 0; i < 4 * page; ++i) mine[i] = static_cast<uint8_t>(i * 3);
  SharedMemory sm;
  uintptr_t start = 0;
  std::vector<SharedMemory::Piece> p;
  // Pages 1 and 2 of the segment.
  ASSERT_EQ(sm.share(mine + page + 10, page + 100, &start, &p), 0);
  char path[80];
  std::snprintf(path, sizeof path, "/proc/self/map_files/%lx-%lx", reinterpret_cast<unsigned long>(mine),
                reinterpret_cast<unsigned long>(mine) + 4 * page);
  const int probe = open(path, O_RDONLY);
  if (probe < 0) GTEST_SKIP() << "cannot open " << path << " (" << std::strerror(errno)
                              << "): needs CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE; the segment is copied then";
  close(probe);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].start, reinterpret_cast<uintptr_t>(mine) + page);
  EXPECT_EQ(p[0].segment.length, 2 * page);
  EXPECT_EQ(p[0].segment.fd_offset, page);  // where in the segment
  EXPECT_EQ(core::check_peer_memory(p[0].fd, p[0].segment.fd_offset + p[0].segment.length), 0);
  EXPECT_EQ(core::check_peer_sysv_shm(p[0].fd, 4 * page), 0);
  EXPECT_EQ(core::check_peer_sysv_shm(p[0].fd, 5 * page), -EINVAL);  // more than the segment holds
  // droced's view: a write through it reaches both attachments, and theirs reach it.
  auto* view = static_cast<uint8_t*>(mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_SHARED, p[0].fd,
                                          static_cast<off_t>(p[0].segment.fd_offset)));
  ASSERT_NE(view, MAP_FAILED);
  EXPECT_EQ(view[5], static_cast<uint8_t>((page + 5) * 3));
  view[7] = 0xab;
  EXPECT_EQ(mine[page + 7], 0xab);
  EXPECT_EQ(other[page + 7], 0xab);
  other[page + 9] = 0xcd;
  EXPECT_EQ(view[9], 0xcd);
  EXPECT_EQ(mine[page + 9], 0xcd);
  munmap(view, 2 * page);
  sm.release(mine + page + 10, page + 100);
  EXPECT_EQ(sm.runs(), 0u);
  shmdt(mine);
  shmdt(other);
}

// What droced maps must not shrink under it: a memfd without the seals and a tmpfs file, even
// one named like a SysV segment, are refused; only the kernel's own segments pass unsealed.
TEST(SharedMemory, DrocedRefusesUnsealedFilesThatMerelyLookShared) {
  const size_t page = core::page_size();
  const int mfd = memfd_create("SYSV00000000", MFD_CLOEXEC);
  ASSERT_GE(mfd, 0);
  ASSERT_EQ(ftruncate(mfd, static_cast<off_t>(page)), 0);
  EXPECT_EQ(core::check_peer_memory(mfd, page), -EPERM);
  EXPECT_EQ(core::check_peer_sysv_shm(mfd, page), -ENODEV);
  close(mfd);
  const std::string name = "/dev/shm/SYSV-droce-test-" + std::to_string(getpid());
  const int tfd = open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (tfd >= 0) {
    unlink(name.c_str());
    ASSERT_EQ(ftruncate(tfd, static_cast<off_t>(page)), 0);
    EXPECT_NE(core::check_peer_memory(tfd, page), 0);
    EXPECT_EQ(core::check_peer_sysv_shm(tfd, page), -ENODEV);
    close(tfd);
  }
}

}  // namespace
}  // namespace droce::client
