// droce-engine-demo: two droce hosts in one process, each a device core
// (port, transport engine, ARP/ND) on one end of droce's same-host link (droce_shm). Host A
// finds host B by ARP, connects an RC queue pair knowing only B's IP address,
// and runs SEND, RDMA WRITE, RDMA READ and the two atomics; every byte and
// value is checked, and both engines' counters are shown.
//
// usage: droce-engine-demo [--mtu 1024|4096] [--size BYTES]

#include <rte_eal.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <string_view>

#include "droced/device_core.h"
#include "core/clock.h"
#include "net/eal.h"
#include "rocev2/format.h"

namespace {

using namespace droce;
using namespace droce::rocev2;

struct Host {
  std::unique_ptr<net::Port> port;
  std::unique_ptr<droced::DeviceCore> core;
  uint32_t pd = 0, qpn = 0;
  Cq* cq = nullptr;
  std::vector<uint8_t> mem;
  Mr* mr = nullptr;
  const char* name = "";
};

Host g_host[2];

template <class Pred>
bool run_until(Pred done, uint64_t limit_ns = 10'000'000'000ull) {
  const uint64_t end = core::monotonic_ns() + limit_ns;
  while (!done()) {
    if (core::monotonic_ns() > end) return false;
    for (auto& h : g_host) h.core->run_once(core::monotonic_ns());
  }
  return true;
}

bool complete(int host, const char* what) {
  Completion c;
  const bool ok = run_until([&] { return g_host[host].cq->poll(&c, 1) == 1; });
  if (!ok) {
    std::printf("  %-34s TIMED OUT\n", what);
    return false;
  }
  std::printf("  %-34s %s", what, to_string(c.status));
  if (c.byte_len) std::printf(", %u bytes", c.byte_len);
  std::printf("\n");
  return c.status == WcStatus::success;
}

}  // namespace

int main(int argc, char** argv) {
  PathMtu mtu = PathMtu::mtu1024;
  uint32_t size = 256 * 1024;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--mtu" && i + 1 < argc) mtu = std::string_view(argv[++i]) == "4096" ? PathMtu::mtu4096 : PathMtu::mtu1024;
    else if (a == "--size" && i + 1 < argc) size = uint32_t(std::strtoul(argv[++i], nullptr, 0));
    else {
      std::fprintf(stderr, "usage: droce-engine-demo [--mtu 1024|4096] [--size BYTES]\n");
      return 2;
    }
  }
  size = std::min<uint32_t>(std::max<uint32_t>(size, 64), 64u << 20);

  net::EalOptions eal;
  eal.program = "droce-engine-demo";
  eal.extra = {"--log-level=lib.eal:error", "--log-level=droce.*:warning", "--log-level=pmd.*:error"};
  if (net::eal_start(eal) != 0) return 1;

  // droce's same-host link (net/shm_link.h): both ends here, each with a
  // control thread of its own. (net_memif in one process raced DPDK 22.11's
  // interrupt thread: an occasional crash inside memif's callbacks.)
  const std::string sock = "/tmp/droce-engine-demo-" + std::to_string(getpid()) + ".sock";
  const std::string common = ",socket=" + sock;
  net::PortConfig pc;
  pc.mtu = 4200;
  if (net::Port::open_device("droce_shm_demo_a,role=server" + common, pc, &g_host[0].port) != 0 ||
      net::Port::open_device("droce_shm_demo_b,role=client" + common, pc, &g_host[1].port) != 0) {
    std::fprintf(stderr, "droce-engine-demo: cannot open the link\n");
    return 1;
  }
  const net::IpAddr ip[2] = {ipv4_mapped(0xc0a86401), ipv4_mapped(0xc0a86402)};  // 192.168.100.1/2, in-process only
  for (int i = 0; i < 2; ++i) {
    droced::DeviceCoreConfig c;
    c.port = g_host[i].port.get();
    c.addresses = {ip[i]};
    c.neighbor.request_interval_ns = 100'000'000;
    int rc = 0;
    g_host[i].core = std::make_unique<droced::DeviceCore>(c, &rc);
    g_host[i].name = i == 0 ? "A" : "B";
    if (rc != 0) return 1;
  }
  std::printf("droce engine demo: two hosts on droce's same-host link, in one process\n");
  std::printf("  host A: %s  %s\n", format_ip(ip[0]).c_str(), format_mac(g_host[0].port->mac()).c_str());
  std::printf("  host B: %s  %s\n\n", format_ip(ip[1]).c_str(), format_mac(g_host[1].port->mac()).c_str());
  if (!run_until([] { return g_host[0].port->link().up && g_host[1].port->link().up; })) {
    std::fprintf(stderr, "droce-engine-demo: the link did not come up\n");
    return 1;
  }

  // Each host finds the other by ARP, as modify_qp(RTR) will in droced.
  AddressVector av[2];
  for (int i = 0; i < 2; ++i) {
    av[i].dgid = ip[1 - i];
    net::ResolveStatus st = net::ResolveStatus::pending;
    run_until([&] { return (st = g_host[i].core->resolve(&av[i], core::monotonic_ns())) != net::ResolveStatus::pending; });
    if (st != net::ResolveStatus::resolved) {
      std::fprintf(stderr, "droce-engine-demo: %s could not resolve its peer\n", g_host[i].name);
      return 1;
    }
    std::printf("ARP: host %s found %s at %s\n", g_host[i].name, format_ip(ip[1 - i]).c_str(),
                format_mac(av[i].dmac).c_str());
  }

  for (auto& h : g_host) {
    Engine& e = h.core->engine();
    h.mem.resize(size_t{size} * 3 + 64);
    e.alloc_pd(&h.pd);
    e.create_cq(256, &h.cq);
    QpInit init;
    init.pd = h.pd;
    init.send_cq = init.recv_cq = h.cq;
    init.cap = {64, 64, 1, 1, 64};
    init.sq_sig_all = true;
    e.create_qp(init, &h.qpn);
    e.reg_mr(h.pd, reinterpret_cast<uint64_t>(h.mem.data()), h.mem.size(), h.mem.data(),
             kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic, &h.mr);
  }
  for (int i = 0; i < 2; ++i) {
    Engine& e = g_host[i].core->engine();
    QpAttr a;
    a.qp_state = QpState::init;
    a.port_num = 1;
    a.qp_access_flags = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
    int rc = e.modify_qp(g_host[i].qpn, a, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags);
    a = QpAttr{};
    a.qp_state = QpState::rtr;
    a.path_mtu = mtu;
    a.dest_qp_num = g_host[1 - i].qpn;
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = 12;
    a.ah_attr = av[i];
    rc |= e.modify_qp(g_host[i].qpn, a, kAttrState | kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn |
                                              kAttrMaxDestRdAtomic | kAttrMinRnrTimer);
    a = QpAttr{};
    a.qp_state = QpState::rts;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 4;
    rc |= e.modify_qp(g_host[i].qpn, a, kAttrState | kAttrSqPsn | kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry |
                                              kAttrMaxQpRdAtomic);
    if (rc != 0) {
      std::fprintf(stderr, "droce-engine-demo: modify_qp failed\n");
      return 1;
    }
  }
  std::printf("RC QP %u on A <-> QP %u on B, path MTU %u\n\n", g_host[0].qpn, g_host[1].qpn, mtu_bytes(mtu));

  Host& A = g_host[0];
  Host& B = g_host[1];
  std::mt19937 rng(1);
  for (uint32_t k = 0; k < size; ++k) A.mem[k] = uint8_t(rng());
  for (uint32_t k = 0; k < size; ++k) B.mem[size + k] = uint8_t(rng());
  auto sge = [](Host& h, uint64_t off, uint32_t len) {
    return Sge{reinterpret_cast<uint64_t>(h.mem.data()) + off, len, h.mr->lkey};
  };
  auto raddr = [](Host& h, uint64_t off) { return reinterpret_cast<uint64_t>(h.mem.data()) + off; };
  bool ok = true;

  RecvWr r;
  r.num_sge = 1;
  r.sg_list[0] = sge(B, 0, size);
  B.core->engine().post_recv(B.qpn, r);
  SendWr w;
  w.num_sge = 1;
  w.opcode = WrOpcode::send;
  w.sg_list[0] = sge(A, 0, size);
  A.core->engine().post_send(A.qpn, w);
  ok &= complete(1, "B: RECV (A's SEND)");
  ok &= complete(0, "A: SEND");
  const bool send_same = std::memcmp(A.mem.data(), B.mem.data(), size) == 0;
  std::printf("  the %u bytes B received equal what A sent: %s\n\n", size, send_same ? "yes" : "NO");
  ok &= send_same;

  w.opcode = WrOpcode::rdma_write;
  w.sg_list[0] = sge(A, 0, size);
  w.remote_addr = raddr(B, size * 2ull);
  w.rkey = B.mr->rkey;
  A.core->engine().post_send(A.qpn, w);
  ok &= complete(0, "A: RDMA WRITE into B");
  const bool write_same = std::memcmp(A.mem.data(), B.mem.data() + size * 2ull, size) == 0;
  std::printf("  B's memory holds what A wrote: %s\n\n", write_same ? "yes" : "NO");
  ok &= write_same;

  w.opcode = WrOpcode::rdma_read;
  w.sg_list[0] = sge(A, size, size);
  w.remote_addr = raddr(B, size);
  A.core->engine().post_send(A.qpn, w);
  ok &= complete(0, "A: RDMA READ from B");
  const bool read_same = std::memcmp(A.mem.data() + size, B.mem.data() + size, size) == 0;
  std::printf("  A read what B holds: %s\n\n", read_same ? "yes" : "NO");
  ok &= read_same;

  const uint64_t counter_off = size * 3ull;
  uint64_t start = 1000;
  std::memcpy(B.mem.data() + counter_off, &start, 8);
  w.opcode = WrOpcode::atomic_fetch_and_add;
  w.sg_list[0] = sge(A, counter_off, 8);
  w.remote_addr = raddr(B, counter_off);
  w.compare_add = 5;
  A.core->engine().post_send(A.qpn, w);
  ok &= complete(0, "A: FETCH_ADD 5 on B's counter");
  w.opcode = WrOpcode::atomic_cmp_and_swp;
  w.sg_list[0] = sge(A, counter_off + 8, 8);
  w.compare_add = 1005;
  w.swap = 42;
  A.core->engine().post_send(A.qpn, w);
  ok &= complete(0, "A: COMPARE_SWAP 1005 -> 42");
  uint64_t fadd_orig, cas_orig, now;
  std::memcpy(&fadd_orig, A.mem.data() + counter_off, 8);
  std::memcpy(&cas_orig, A.mem.data() + counter_off + 8, 8);
  std::memcpy(&now, B.mem.data() + counter_off, 8);
  std::printf("  returned %" PRIu64 " and %" PRIu64 "; B's counter is now %" PRIu64 " (expected 1000, 1005, 42)\n\n",
              fadd_orig, cas_orig, now);
  ok &= fadd_orig == 1000 && cas_orig == 1005 && now == 42;

  run_until([] { return false; }, 20'000'000);  // let the last ACKs land
  std::printf("%-24s %10s %10s\n", "counter", "host A", "host B");
  auto row = [](const char* name, uint64_t a, uint64_t b) { std::printf("%-24s %10lu %10lu\n", name, (unsigned long)a, (unsigned long)b); };
  const QpCounters& ca = A.core->engine().qp(A.qpn)->counters;
  const QpCounters& cb = B.core->engine().qp(B.qpn)->counters;
  row("packets sent", ca.tx_packets, cb.tx_packets);
  row("packets received", ca.rx_packets, cb.rx_packets);
  row("bytes sent", ca.tx_bytes, cb.tx_bytes);
  row("RDMA ops sent / served", ca.rdma_sends, cb.rdma_recvs);
  row("ACKs coalesced", ca.acks_coalesced, cb.acks_coalesced);
  row("retransmits", ca.retransmits, cb.retransmits);
  row("ICRC drops", A.core->engine().counters().parse[ParseStatus::bad_icrc],
      B.core->engine().counters().parse[ParseStatus::bad_icrc]);
  row("ARP requests sent", A.core->neighbors().counters().arp.requests_sent,
      B.core->neighbors().counters().arp.requests_sent);
  row("ARP replies sent", A.core->neighbors().counters().arp.replies_sent,
      B.core->neighbors().counters().arp.replies_sent);

  for (auto& h : g_host) h.core.reset();
  g_host[1].port.reset();
  g_host[0].port.reset();
  std::filesystem::remove(sock);
  net::eal_stop();
  std::printf("\n%s\n", ok ? "all operations completed and checked" : "FAILED");
  return ok ? 0 : 1;
}
