// droce: the command line. Subcommands:
//   decode [--json] [--quiet] FILE.pcap   print each RoCEv2 packet, check its ICRC
//   gen --seed S --count N [--ipv4|--ipv6] [--no-vlan] [--max-payload B] OUT.pcap
//                                         write random valid RoCEv2 packets
//   devices|ports|gids|qps|clients|counters|status [--json]   droced's state
//   events [--count N] [--timeout S]      print the async events droced delivers
//   exec -- COMMAND...                    run a verbs program on droce

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "net/pcap_file.h"
#include "cm/mad.h"
#include "rocev2/builder.h"
#include "rocev2/format.h"
#include "rocev2/parser.h"
#include "rocev2/random_packet.h"

namespace {

using namespace droce;

constexpr int kExitOk = 0;
constexpr int kExitRejected = 1;
constexpr int kExitUsage = 2;

void usage(FILE* out) {
  std::fputs(
      "usage: droce <command> [options]\n"
      "\n"
      "commands:\n"
      "  decode [--json] [--quiet] FILE.pcap\n"
      "      Print every RoCEv2 packet in an Ethernet capture with its headers and\n"
      "      whether its ICRC holds. Frames that are not RoCEv2 are listed as foreign.\n"
      "      Exit status: 0 all RoCEv2 frames valid, 1 some rejected, 2 usage or file error.\n"
      "      --json   one JSON object per frame\n"
      "      --quiet  only rejected frames and the summary\n"
      "  gen --seed S --count N [--ipv4|--ipv6] [--no-vlan] [--max-payload B] OUT.pcap\n"
      "      Write N random valid RoCEv2 frames (every opcode, IPv4/IPv6, VLAN or not)\n"
      "      to OUT.pcap, and their fields, one JSON object per line, to OUT.pcap.jsonl.\n"
      "  devices | ports | gids | qps | clients | cores | cm | multicast | counters | status\n"
      "      [--json] [--device NAME] [--run-dir DIR | --socket PATH]\n"
      "      droced's state: devices, ports and link, the GID table, QPs with their\n"
      "      per-QP counters, connected clients, the poll cores (queues, clients,\n"
      "      frames handed between them), rdma_cm ids (port space, state, addresses,\n"
      "      comm ID and CM state, QPs, groups), multicast groups with their attached\n"
      "      QPs and the IGMP/MLD memberships reported, global counters (RX parse failures by\n"
      "      reason, neighbour discovery, sleeps, CM); status shows all tables.\n"
      "  fault [list | set SPEC [--qp N] [--dir rx|tx|both] [--seed N] [--id N] | clear ID|all]\n"
      "      [--json] [--device NAME] [--run-dir DIR | --socket PATH]\n"
      "      A running droced's fault rules: drop, burst loss, delay and jitter, reorder,\n"
      "      duplicate, corrupt (payload or ICRC), truncate, per QP or for every RoCE frame,\n"
      "      received or sent, changed while traffic runs (`droce fault --help`).\n"
      "  capture -w FILE|- [--qp N] [-s SNAPLEN] [-c COUNT] [--device NAME] [--run-dir DIR | --socket PATH]\n"
      "      A running droced's frames, received and sent, as pcapng to FILE or stdout\n"
      "      (`droce capture -w - | tshark -i -`), only QP N's with --qp, until COUNT frames\n"
      "      or SIGINT; the ICRC filled in on links that carry none (`droce capture --help`).\n"
      "  cc [show | set NAME=VALUE...] [--json] [--device NAME] [--run-dir DIR | --socket PATH]\n"
      "      A running droced's DCQCN congestion control: its parameters by mlx5's names,\n"
      "      units and defaults, the CNP counters; set changes them live (`droce cc --help`).\n"
      "  events [--count N] [--timeout SECONDS] [--device NAME | --socket PATH]\n"
      "      Open a verbs context and print the async events droced delivers to it\n"
      "      (port active/down, device fatal). Exit 1 if fewer than N came in time.\n"
      "  exec [--run-dir DIR | --sysfs-root DIR] -- COMMAND [ARGS...]\n"
      "      Run an unmodified verbs program on droce: SYSFS_PATH, the provider and the\n"
      "      completion-channel library, /dev/infiniband (see docs/discovery.md).\n"
      "  help\n",
      out);
}

int cmd_decode(const std::vector<std::string_view>& args) {
  bool json = false;
  bool quiet = false;
  std::string path;
  for (auto a : args) {
    if (a == "--json") json = true;
    else if (a == "--quiet") quiet = true;
    else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "droce decode: unknown option %.*s\n", int(a.size()), a.data());
      return kExitUsage;
    } else if (path.empty()) path = a;
    else {
      std::fprintf(stderr, "droce decode: one capture at a time\n");
      return kExitUsage;
    }
  }
  if (path.empty()) {
    std::fprintf(stderr, "droce decode: which capture? (droce decode FILE.pcap)\n");
    return kExitUsage;
  }
  net::PcapReader reader(path);
  if (!reader.ok()) {
    std::fprintf(stderr, "droce decode: %s\n", reader.error().c_str());
    return kExitUsage;
  }
  if (!reader.is_ethernet()) {
    std::fprintf(stderr, "droce decode: %s is not an Ethernet capture\n", path.c_str());
    return kExitUsage;
  }
  net::CapturedFrame frame;
  rocev2::ParseCounters counters;
  size_t n = 0;
  size_t truncated_captures = 0;
  while (reader.next(&frame)) {
    ++n;
    rocev2::ParsedPacket pkt;
    const auto status = rocev2::parse_frame(std::span<const uint8_t>(frame.bytes), &pkt);
    counters.count(status);
    if (frame.bytes.size() < frame.wire_len) ++truncated_captures;
    bool icrc_ok = status == rocev2::ParseStatus::ok;
    const bool shown = !quiet || (status != rocev2::ParseStatus::ok && !rocev2::is_foreign(status));
    if (!shown) continue;
    // A MAD on QP1 (the CM, issue #15): named and its identifiers shown.
    std::string mad;
    if (status == rocev2::ParseStatus::ok && pkt.hdr.bth.dest_qp == cm::kGsiQpn &&
        pkt.layout.payload_len == cm::kMadSize && pkt.hdr.bth.opcode == 0x64)
      mad = cm::describe_mad(std::span<const uint8_t>(frame.bytes).subspan(pkt.layout.payload_off, cm::kMadSize));
    if (json) {
      std::printf("%s\n", rocev2::format_json(n, pkt, status, icrc_ok, mad).c_str());
    } else {
      std::printf("frame %zu: %zu bytes%s\n%s", n, frame.bytes.size(),
                  frame.bytes.size() < frame.wire_len ? " (capture cut short)" : "",
                  rocev2::format_text(pkt, status, icrc_ok).c_str());
      if (!mad.empty()) std::printf("  MAD    %s\n", mad.c_str());
    }
  }
  if (!reader.error().empty()) {
    std::fprintf(stderr, "droce decode: %s: %s\n", path.c_str(), reader.error().c_str());
    return kExitUsage;
  }
  size_t foreign = 0;
  size_t rejected = 0;
  for (size_t i = 0; i < rocev2::kParseStatusCount; ++i) {
    const auto s = static_cast<rocev2::ParseStatus>(i);
    if (rocev2::is_foreign(s)) foreign += counters.by_status[i];
    else if (s != rocev2::ParseStatus::ok) rejected += counters.by_status[i];
  }
  FILE* summary = json ? stderr : stdout;
  std::fprintf(summary, "%zu frames: %lu RoCEv2 ok, %zu rejected, %zu foreign\n", n,
               static_cast<unsigned long>(counters[rocev2::ParseStatus::ok]), rejected, foreign);
  for (size_t i = 0; i < rocev2::kParseStatusCount; ++i) {
    const auto s = static_cast<rocev2::ParseStatus>(i);
    if (s != rocev2::ParseStatus::ok && counters.by_status[i] != 0)
      std::fprintf(summary, "  %-30s %lu  (%s)\n", rocev2::to_string(s),
                   static_cast<unsigned long>(counters.by_status[i]), rocev2::describe(s));
  }
  if (truncated_captures)
    std::fprintf(summary, "  %zu frames were cut short by the capture's snap length\n", truncated_captures);
  return rejected == 0 ? kExitOk : kExitRejected;
}

bool parse_number(std::string_view s, uint64_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  std::string tmp(s);
  *out = std::strtoull(tmp.c_str(), &end, 0);
  return end != nullptr && *end == '\0';
}

int cmd_gen(const std::vector<std::string_view>& args) {
  uint64_t seed = 1;
  uint64_t count = 0;
  bool have_seed = false;
  bool have_count = false;
  rocev2::RandomPacketOptions opts;
  std::string path;
  for (size_t i = 0; i < args.size(); ++i) {
    const auto a = args[i];
    auto value = [&](uint64_t* out) {
      if (i + 1 >= args.size() || !parse_number(args[i + 1], out)) {
        std::fprintf(stderr, "droce gen: %.*s needs a number\n", int(a.size()), a.data());
        return false;
      }
      ++i;
      return true;
    };
    if (a == "--seed") {
      if (!value(&seed)) return kExitUsage;
      have_seed = true;
    } else if (a == "--count") {
      if (!value(&count)) return kExitUsage;
      have_count = true;
    } else if (a == "--max-payload") {
      uint64_t v = 0;
      if (!value(&v) || v > 8192) {
        std::fprintf(stderr, "droce gen: --max-payload takes 0..8192\n");
        return kExitUsage;
      }
      opts.max_payload = static_cast<uint32_t>(v);
    } else if (a == "--ipv4") {
      opts.allow_ipv6 = false;
    } else if (a == "--ipv6") {
      opts.allow_ipv4 = false;
    } else if (a == "--no-vlan") {
      opts.allow_vlan = false;
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "droce gen: unknown option %.*s\n", int(a.size()), a.data());
      return kExitUsage;
    } else {
      path = a;
    }
  }
  if (!have_seed || !have_count || path.empty() || (!opts.allow_ipv4 && !opts.allow_ipv6)) {
    std::fprintf(stderr, "usage: droce gen --seed S --count N [--ipv4|--ipv6] [--no-vlan] "
                         "[--max-payload B] OUT.pcap\n");
    return kExitUsage;
  }
  net::PcapWriter writer(path);
  if (!writer.ok()) {
    std::fprintf(stderr, "droce gen: %s: %s\n", path.c_str(), writer.error().c_str());
    return kExitUsage;
  }
  std::ofstream fields(path + ".jsonl");
  if (!fields) {
    std::fprintf(stderr, "droce gen: cannot write %s.jsonl\n", path.c_str());
    return kExitUsage;
  }
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> frame(rocev2::kMaxHeaderLen + 8192 + 8);
  for (uint64_t i = 0; i < count; ++i) {
    const rocev2::RandomPacket r = rocev2::random_packet(rng, opts);
    const size_t len = rocev2::build_frame(r.hdr, r.payload, frame);
    if (len == 0) {
      std::fprintf(stderr, "droce gen: builder refused packet %lu (opcode 0x%02x): a bug\n",
                   static_cast<unsigned long>(i), r.hdr.bth.opcode);
      return kExitRejected;
    }
    writer.write(std::span<const uint8_t>(frame.data(), len), i * 1000);
    const auto& b = r.hdr.bth;
    nlohmann::ordered_json line;
    line["opcode"] = unsigned{b.opcode};
    line["psn"] = unsigned{b.psn};
    line["dqpn"] = unsigned{b.dest_qp};
    line["pad"] = unsigned{b.pad};
    line["payload_len"] = r.payload.size();
    line["ip_version"] = unsigned{r.hdr.l3.version};
    if (r.hdr.l2.vlan) line["vlan"] = unsigned(r.hdr.l2.vlan_tci & 0xfff);
    else line["vlan"] = nullptr;
    line["se"] = unsigned{b.se};
    line["ackreq"] = unsigned{b.ackreq};
    line["pkey"] = unsigned{b.pkey};
    fields << line.dump() << '\n';
  }
  std::printf("wrote %lu frames to %s (seed %lu)\n", static_cast<unsigned long>(count), path.c_str(),
              static_cast<unsigned long>(seed));
  return kExitOk;
}

}  // namespace

namespace droce::cli {
int status_command(std::string_view cmd, const std::vector<std::string_view>& args);
int events_command(const std::vector<std::string_view>& args);
int exec_command(int argc, char** argv);
int fault_command(const std::vector<std::string_view>& args);
int capture_command(const std::vector<std::string_view>& args);
int cc_command(const std::vector<std::string_view>& args);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return kExitUsage;
  }
  const std::string_view cmd = argv[1];
  std::vector<std::string_view> args(argv + 2, argv + argc);
  if (cmd == "decode") return cmd_decode(args);
  if (cmd == "gen") return cmd_gen(args);
  if (cmd == "events") return droce::cli::events_command(args);
  if (cmd == "exec") return droce::cli::exec_command(argc - 1, argv + 1);
  if (cmd == "fault") return droce::cli::fault_command(args);
  if (cmd == "capture") return droce::cli::capture_command(args);
  if (cmd == "cc") return droce::cli::cc_command(args);
  for (const char* c : {"devices", "ports", "gids", "qps", "clients", "cores", "cm", "multicast", "counters", "status"})
    if (cmd == c) return droce::cli::status_command(cmd, args);
  if (cmd == "help" || cmd == "--help" || cmd == "-h") {
    usage(stdout);
    return kExitOk;
  }
  std::fprintf(stderr, "droce: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return kExitUsage;
}
