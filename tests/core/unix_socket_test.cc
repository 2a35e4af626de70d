// The control transport: whole messages, descriptors passed and owned,
// oversize refused without leaking descriptors, peer death seen, stale
// socket files replaced, live ones not.

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "core/unix_socket.h"

namespace droce::core {
namespace {

int open_fds() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) (void)e, ++n;
  return n;
}

TEST(UnixSocket, MessagesArriveWholeAndInOrder) {
  Fd a, b;
  ASSERT_EQ(seqpacket_pair(&a, &b), 0);
  std::vector<uint8_t> m1(100, 1), m2(3000, 2);
  ASSERT_EQ(send_message(a.get(), m1), 0);
  ASSERT_EQ(send_message(a.get(), m2), 0);
  std::vector<uint8_t> buf;
  std::vector<Fd> fds;
  EXPECT_EQ(receive_message(b.get(), &buf, 4096, &fds), 100);
  EXPECT_EQ(buf, m1);
  EXPECT_EQ(receive_message(b.get(), &buf, 4096, &fds), 3000);
  EXPECT_EQ(buf, m2);
  EXPECT_TRUE(fds.empty());
}

TEST(UnixSocket, DescriptorsPassAndReferToTheSameObject) {
  Fd a, b;
  ASSERT_EQ(seqpacket_pair(&a, &b), 0);
  Fd mem(memfd_create("droce-test", MFD_CLOEXEC));
  ASSERT_TRUE(mem.valid());
  ASSERT_EQ(ftruncate(mem.get(), 4096), 0);
  auto* p = static_cast<uint8_t*>(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, mem.get(), 0));
  ASSERT_NE(p, MAP_FAILED);
  const uint8_t msg[] = {9};
  const int fds_out[] = {mem.get(), mem.get()};
  ASSERT_EQ(send_message(a.get(), msg, fds_out), 0);
  std::vector<uint8_t> buf;
  std::vector<Fd> fds;
  ASSERT_EQ(receive_message(b.get(), &buf, 16, &fds), 1);
  ASSERT_EQ(fds.size(), 2u);
  // Expect: a mapping of the received descriptor sees the sender's writes.
  auto* q = static_cast<uint8_t*>(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0].get(), 0));
  ASSERT_NE(q, MAP_FAILED);
  p[100] = 0x5a;
  EXPECT_EQ(q[100], 0x5a);
  munmap(p, 4096);
  munmap(q, 4096);
}

TEST(UnixSocket, OversizeMessageIsRefusedAndItsDescriptorsClosed) {
  Fd a, b;
  ASSERT_EQ(seqpacket_pair(&a, &b), 0);
  Fd mem(memfd_create("droce-test", MFD_CLOEXEC));
  const int before = open_fds();
  std::vector<uint8_t> big(1000, 7);
  const int f[] = {mem.get()};
  ASSERT_EQ(send_message(a.get(), big, f), 0);
  std::vector<uint8_t> buf;
  std::vector<Fd> fds;
  EXPECT_EQ(receive_message(b.get(), &buf, 100, &fds), -EMSGSIZE);
  EXPECT_TRUE(fds.empty());
  EXPECT_EQ(open_fds(), before) << "a refused message leaked its descriptor";
  const int too_many[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(send_message(a.get(), big, too_many), -EINVAL);
}

TEST(UnixSocket, PeerDeathIsEndOfFileAndSendingIsEpipe) {
  Fd a, b;
  ASSERT_EQ(seqpacket_pair(&a, &b), 0);
  a.reset();
  std::vector<uint8_t> buf;
  std::vector<Fd> fds;
  EXPECT_EQ(receive_message(b.get(), &buf, 16, &fds), 0);
  const uint8_t m[] = {1};
  EXPECT_EQ(send_message(b.get(), m), -EPIPE);
}

TEST(UnixSocket, ListenReplacesAStaleSocketButNotALiveOne) {
  const std::string path = "/tmp/droce-test-" + std::to_string(getpid()) + ".sock";
  {
    Fd l;
    ASSERT_EQ(seqpacket_listen(path, &l), 0);
    // Expect: a second daemon cannot steal a live socket.
    Fd l2;
    EXPECT_EQ(seqpacket_listen(path, &l2), -EADDRINUSE);
    Fd c, s;
    ASSERT_EQ(seqpacket_connect(path, &c), 0);
    ASSERT_EQ(seqpacket_accept(l.get(), &s), 0);
    PeerCredentials cred;
    ASSERT_EQ(peer_credentials(s.get(), &cred), 0);
    EXPECT_EQ(cred.pid, getpid());
    EXPECT_EQ(cred.uid, getuid());
  }
  // The listener is gone but its file remains: a new daemon takes over.
  ASSERT_TRUE(std::filesystem::exists(path));
  Fd l3;
  EXPECT_EQ(seqpacket_listen(path, &l3), 0);
  std::filesystem::remove(path);
  Fd none;
  EXPECT_EQ(seqpacket_connect(path, &none), -ENOENT);
  EXPECT_EQ(seqpacket_connect(std::string(200, 'x'), &none), -ENAMETOOLONG);
}

}  // namespace
}  // namespace droce::core
