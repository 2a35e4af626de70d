// droce-wire-demo: the foundation's demo. Two DPDK ports in one process,
// wired back to back with net_ring; every opcode droce speaks is built on
// port A (IPv4 and IPv6, with and without VLAN, single-segment and with the
// payload in a chained segment), sent, received on port B, parsed, and checked
// field by field and byte by byte. A few broken frames follow, to show the
// parser's drop counters. Everything sent is written to a pcap.
//
// usage: droce-wire-demo [--pcap OUT.pcap] [--verbose]

#include <rte_ethdev.h>
#include <rte_eth_ring.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#include <cstdio>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/endian.h"
#include "net/eal.h"
#include "net/pcap_file.h"
#include "rocev2/builder.h"
#include "rocev2/format.h"
#include "rocev2/parser.h"
#include "rocev2/random_packet.h"

namespace {

using namespace droce;

int start_port(uint16_t port, rte_mempool* pool) {
  rte_eth_conf conf{};
  if (int rc = rte_eth_dev_configure(port, 1, 1, &conf); rc != 0) return rc;
  if (int rc = rte_eth_rx_queue_setup(port, 0, 256, rte_eth_dev_socket_id(port), nullptr, pool); rc != 0)
    return rc;
  if (int rc = rte_eth_tx_queue_setup(port, 0, 256, rte_eth_dev_socket_id(port), nullptr); rc != 0)
    return rc;
  return rte_eth_dev_start(port);
}

rocev2::PacketHeaders demo_headers(uint8_t opcode, uint8_t ip_version, bool vlan, uint32_t psn) {
  rocev2::PacketHeaders h;
  h.l2.dst = {0x02, 0xd0, 0xce, 0x00, 0x00, 0x02};
  h.l2.src = {0x02, 0xd0, 0xce, 0x00, 0x00, 0x01};
  h.l2.vlan = vlan;
  h.l2.vlan_tci = vlan ? (3u << 13) | 100 : 0;  // PCP 3, VLAN 100
  h.l3.version = ip_version;
  if (ip_version == 4) {
    h.l3.src = rocev2::ipv4_mapped(0xc0a86401);  // 192.168.100.1 (never leaves the process)
    h.l3.dst = rocev2::ipv4_mapped(0xc0a86402);
    h.l3.ipv4_id = static_cast<uint16_t>(psn);
  } else {
    h.l3.src = {0xfd, 0xd0, 0xce, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    h.l3.dst = {0xfd, 0xd0, 0xce, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
    h.l3.ipv4_frag = 0;
    h.l3.flow_label = 0x12345;
  }
  h.l3.tos = 0x02;  // ECT(0), as a DCQCN sender marks
  h.l4.src_port = 0xc000 | 0x0123;
  h.bth.opcode = opcode;
  h.bth.pkey = 0xffff;
  h.bth.dest_qp = 0x11;
  h.bth.psn = psn;
  const auto& info = rocev2::opcode_info(opcode);
  h.bth.ackreq = info.transport == rocev2::Transport::rc && info.requester && info.ends_message();
  h.ext.deth = {0x11111111, 0, 0x12};
  h.ext.reth = {0x7f0000001000, 0x00abcd01, 3000};
  h.ext.atomic_eth = {0x7f0000002000, 0x00abcd02, 5, 0};
  h.ext.aeth = {rocev2::Aeth::make_syndrome(rocev2::AethKind::ack, rocev2::kAethCreditInvalid), psn};
  h.ext.atomic_ack_eth = {41};
  h.ext.imm = {0xdeadbeef};
  h.ext.ieth = {0x00abcd03};
  return h;
}

struct Tally {
  unsigned sent = 0;
  unsigned ok = 0;
  unsigned chained = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::string pcap_path = "droce-wire-demo.pcap";
  bool verbose = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--pcap" && i + 1 < argc) pcap_path = argv[++i];
    else if (a == "--verbose") verbose = true;
    else {
      std::fprintf(stderr, "usage: droce-wire-demo [--pcap OUT.pcap] [--verbose]\n");
      return 2;
    }
  }

  net::EalOptions eal;
  eal.program = "droce-wire-demo";
  eal.extra = {"--log-level=lib.eal:warning"};
  if (net::eal_start(eal) != 0) return 1;

  // One pool for whole frames (up to 4 KiB payload in one segment), one for
  // header-only head segments and chained payload segments.
  rte_mempool* big = net::create_mbuf_pool("demo_big", 1024, 9216);
  rte_mempool* small = net::create_mbuf_pool("demo_small", 4096, 2048);
  rte_ring* a_to_b = rte_ring_create("a_to_b", 1024, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
  rte_ring* b_to_a = rte_ring_create("b_to_a", 1024, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
  if (!big || !small || !a_to_b || !b_to_a) {
    std::fprintf(stderr, "droce-wire-demo: out of memory setting up\n");
    return 1;
  }
  const int port_a = rte_eth_from_rings("net_ring_a", &b_to_a, 1, &a_to_b, 1, SOCKET_ID_ANY);
  const int port_b = rte_eth_from_rings("net_ring_b", &a_to_b, 1, &b_to_a, 1, SOCKET_ID_ANY);
  if (port_a < 0 || port_b < 0 || start_port(uint16_t(port_a), big) != 0 ||
      start_port(uint16_t(port_b), big) != 0) {
    std::fprintf(stderr, "droce-wire-demo: cannot start the net_ring ports\n");
    return 1;
  }
  std::printf("droce wire demo: ports %d and %d (net_ring), wired back to back\n\n", port_a, port_b);

  net::PcapWriter pcap(pcap_path);
  if (!pcap.ok()) {
    std::fprintf(stderr, "droce-wire-demo: %s: %s\n", pcap_path.c_str(), pcap.error().c_str());
    return 1;
  }

  std::map<uint8_t, Tally> tally;
  rocev2::ParseCounters counters;
  unsigned failures = 0;
  uint32_t psn = 0xfffff0;  // crosses the 24-bit wrap along the way
  uint64_t t_ns = 0;
  std::vector<uint8_t> payload(3000);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 7 + 1);

  for (uint8_t opcode : rocev2::valid_opcodes()) {
    const auto& info = rocev2::opcode_info(opcode);
    for (uint8_t ipv : {4, 6}) {
      for (bool vlan : {false, true}) {
        psn = rocev2::psn_add(psn, 1);
        const rocev2::PacketHeaders h = demo_headers(opcode, ipv, vlan, psn);
        // First/middle packets carry a whole path MTU (1024 here); others
        // a size that needs pad; the IPv6 + VLAN case chains the payload.
        const uint32_t len = !info.payload ? 0
                             : (info.position == rocev2::Position::first ||
                                info.position == rocev2::Position::middle) ? 1024 : 1001 + psn % 3;
        const bool chain = info.payload && ipv == 6 && vlan;
        rte_mbuf* m = rte_pktmbuf_alloc(chain ? small : big);
        int rc = -ENOMEM;
        if (m != nullptr && chain) {
          rte_mbuf* seg = rte_pktmbuf_alloc(small);
          if (seg != nullptr) {
            std::memcpy(rte_pktmbuf_append(seg, uint16_t(len)), payload.data(), len);
            rc = rocev2::build_mbuf_chained(h, m, seg, small);
            if (rc != 0) rte_pktmbuf_free(seg);
          }
        } else if (m != nullptr) {
          rc = rocev2::build_mbuf(h, std::span<const uint8_t>(payload.data(), len), m);
        }
        if (rc != 0) {
          std::fprintf(stderr, "build %s failed: %s\n", info.name, strerror(-rc));
          rte_pktmbuf_free(m);
          ++failures;
          continue;
        }
        pcap.write(m, t_ns += 1000);
        if (rte_eth_tx_burst(uint16_t(port_a), 0, &m, 1) != 1) {
          rte_pktmbuf_free(m);
          ++failures;
          continue;
        }
        rte_mbuf* rx[4];
        const uint16_t n = rte_eth_rx_burst(uint16_t(port_b), 0, rx, 4);
        Tally& t = tally[opcode];
        ++t.sent;
        t.chained += chain;
        for (uint16_t k = 0; k < n; ++k) {
          rocev2::ParsedPacket p;
          const auto status = rocev2::parse_frame(rx[k], &p);
          counters.count(status);
          bool same = status == rocev2::ParseStatus::ok && p.hdr == rocev2::canonical(h, len) &&
                      p.layout.payload_len == len;
          if (same && len != 0) {
            size_t at = 0;
            net::FrameBytes(rx[k]).for_each_piece(p.layout.payload_off, len, [&](const uint8_t* q, size_t c) {
              same = same && std::memcmp(q, payload.data() + at, c) == 0;
              at += c;
            });
          }
          if (same) ++t.ok;
          else ++failures;
          if (verbose || !same) {
            std::printf("%s%s", same ? "" : "MISMATCH:\n",
                        rocev2::format_text(p, status, status == rocev2::ParseStatus::ok).c_str());
          }
          rte_pktmbuf_free(rx[k]);
        }
      }
    }
  }

  std::printf("%-44s %5s %8s %5s\n", "opcode", "sent", "chained", "ok");
  unsigned total_sent = 0;
  unsigned total_ok = 0;
  for (const auto& [opcode, t] : tally) {
    std::printf("0x%02x %-39s %5u %8u %5u\n", opcode, rocev2::opcode_info(opcode).name, t.sent,
                t.chained, t.ok);
    total_sent += t.sent;
    total_ok += t.ok;
  }
  std::printf("\n%u packets sent A -> B over net_ring, %u parsed and matched field by field\n\n",
              total_sent, total_ok);

  // Broken frames: each must be refused with its own reason.
  struct Broken {
    const char* what;
    rocev2::ParseStatus expect;
  };
  const Broken broken[] = {{"payload byte flipped", rocev2::ParseStatus::bad_icrc},
                           {"BTH TVer set to 1", rocev2::ParseStatus::bad_tver},
                           {"cut inside the BTH", rocev2::ParseStatus::bad_ip_length}};
  std::printf("broken frames sent A -> B:\n");
  for (const auto& b : broken) {
    rte_mbuf* m = rte_pktmbuf_alloc(big);
    const rocev2::PacketHeaders h = demo_headers(0x04, 4, false, 7);
    if (m == nullptr || rocev2::build_mbuf(h, std::span<const uint8_t>(payload.data(), 64), m) != 0) {
      ++failures;
      rte_pktmbuf_free(m);
      continue;
    }
    auto* d = rte_pktmbuf_mtod(m, uint8_t*);
    if (b.expect == rocev2::ParseStatus::bad_icrc) d[14 + 20 + 8 + 12 + 5] ^= 0x01;
    if (b.expect == rocev2::ParseStatus::bad_tver) d[14 + 20 + 8 + 1] |= 0x01;
    if (b.expect == rocev2::ParseStatus::bad_ip_length) rte_pktmbuf_trim(m, uint16_t(m->pkt_len - (14 + 20 + 8 + 6)));
    pcap.write(m, t_ns += 1000);
    rte_eth_tx_burst(uint16_t(port_a), 0, &m, 1);
    rte_mbuf* rx[4];
    const uint16_t n = rte_eth_rx_burst(uint16_t(port_b), 0, rx, 4);
    for (uint16_t k = 0; k < n; ++k) {
      rocev2::ParsedPacket p;
      const auto status = rocev2::parse_frame(rx[k], &p);
      counters.count(status);
      const bool as_expected = status == b.expect;
      failures += !as_expected;
      std::printf("  %-22s -> dropped: %-14s %s\n", b.what, rocev2::to_string(status),
                  as_expected ? "(as expected)" : "(WRONG)");
      rte_pktmbuf_free(rx[k]);
    }
  }
  std::printf("\nparser counters on port B:\n");
  for (size_t i = 0; i < rocev2::kParseStatusCount; ++i)
    if (counters.by_status[i] != 0)
      std::printf("  %-16s %lu\n", rocev2::to_string(static_cast<rocev2::ParseStatus>(i)),
                  static_cast<unsigned long>(counters.by_status[i]));
  std::printf("\ncapture of everything sent: %s\n", pcap_path.c_str());

  rte_eth_dev_stop(uint16_t(port_a));
  rte_eth_dev_stop(uint16_t(port_b));
  net::eal_stop();
  if (failures != 0) {
    std::printf("FAILED: %u packets did not come through as sent\n", failures);
    return 1;
  }
  return 0;
}
