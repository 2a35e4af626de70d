// droce-interop-peer: the droce side of an interop run against rxe-peer.py
// (../shared/tools/rxe-rig), the scriptable verbs peer that runs on the Linux
// kernel's soft-RoCE (rdma_rxe) in a rig guest. The two exchange QP details
// through files in the guest's share folder, as rxe-peer.py expects:
//
//   1. create PD, CQ, MRs and the QP on droced; post --recv receives;
//   2. write SHARE/T.remote.json (qpn, psn, gid, rkey, addr, size, qkey) for
//      the guest, wait for the guest's SHARE/T.local.json;
//   3. INIT -> RTR -> RTS; wait for SHARE/T.rts (the guest is in RTS);
//   4. RC: seed the guest's memory with one RDMA WRITE (see "The model");
//   5. touch SHARE/T.go (the guest starts its --ops), run our own --ops, wait
//      for the receives the guest's ops produce, touch SHARE/T.end (the guest
//      stops lingering), wait for SHARE/T.done.json (the guest is done);
//   6. check everything on droce's side, write what the guest must have
//      printed (--expect-out, for tests/interop/check_guest.py), print the
//      QP's counters (--stats-out).
//
// The op language is rxe-peer.py's, with its meaning: send:LEN, sendimm:LEN:IMM,
// write:LEN, writeimm:LEN:IMM, read:LEN, fadd:ADD, cswap:CMP:SWAP, sleep:SEC,
// each with @OFF; OFF is both the local offset (source of a SEND/WRITE, where a
// READ's data or an atomic's original value lands) and the remote one.
//
// The model: the peer keeps a copy of both memories. droce's region D starts
// as a pattern (--seed, --u64); the guest's region G starts as its fill byte,
// and for RC the peer writes a second pattern over G's lower half (--peer-u64
// values included) before the guest starts. Each op, ours (--ops) or the
// guest's (--peer-ops, the string the guest was given), is applied to the
// model in order; at the end D must equal the model byte for byte, every
// receive must hold the bytes the model says were sent, and every READ or
// atomic result is the model's. Our own ops and the guest's must not touch
// the same bytes concurrently (the test's op lists keep them apart).
//
// Output: one JSON object per line on stdout (events, completions, checks).
// Exit status: 0 all checks passed; 1 a check failed; 2 usage or droced
// error; 3 the guest did not answer in time (files or completions), which
// the test tells apart from a droce failure by asking the guest.

#include <endian.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "provider/client/client.h"
#include "rocev2/format.h"
#include "rocev2/verbs.h"

namespace {

using namespace droce;
using namespace droce::rocev2;
using client::Context;

constexpr uint32_t kGrhBytes = 40;
constexpr uint32_t kGuestRecvCap = 8192;  // rxe-peer.py: a receive holds min(size / 2, 8192) (+40 for UD)
constexpr int kExitPass = 0, kExitFail = 1, kExitSetup = 2, kExitNoAnswer = 3;

// ---- Options ------------------------------------------------------------------

struct Options {
  std::string socket, share, tag;
  QpType qpt = QpType::rc;
  uint32_t gid_index = 1;
  std::optional<PathMtu> mtu;  // unset: the port's active MTU
  uint32_t size = 65536;
  uint32_t seed = 1;
  uint32_t psn = 0x2000;
  uint32_t qkey = 0x22222222;
  uint32_t recv = 0;
  bool late_recv = false;
  std::string ops, peer_ops;
  uint32_t peer_size = 65536;
  uint8_t peer_fill = 0x5a;
  bool seed_peer = true;
  std::map<uint32_t, uint64_t> u64, peer_u64;
  bool bad_rkey = false;
  std::string expect_fail, peer_expect_fail;
  uint8_t rnr_retry = 7, retry_cnt = 7, min_rnr_timer = 12, timeout = 14, max_rd_atomic = 4;
  double wait_s = 90;
  std::string expect_out, stats_out;
};

Options g_opt;
int g_failures = 0;

// ---- JSON lines -----------------------------------------------------------------

std::string hex(const uint8_t* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = d[p[i] >> 4];
    s[2 * i + 1] = d[p[i] & 15];
  }
  return s;
}

// Objects keep their keys in the order they were set.
using Json = nlohmann::ordered_json;

std::string dump(const Json& j, int indent = -1) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

// One line of output: an event.
void print(const Json& event) {
  std::printf("%s\n", dump(event).c_str());
  std::fflush(stdout);
}

Json event(const char* name) {
  Json j;
  j["event"] = name;
  return j;
}

void check(bool ok, const std::string& what, const std::string& detail = {}) {
  if (!ok) ++g_failures;
  Json o = event("check");
  o["ok"] = ok;
  o["what"] = what;
  if (!detail.empty()) o["detail"] = detail;
  print(o);
}

[[noreturn]] void die(int code, const std::string& why) {
  Json o = event("error");
  o["exit"] = code;
  o["why"] = why;
  print(o);
  std::exit(code);
}

// ---- Ops --------------------------------------------------------------------------

enum class OpKind { send, sendimm, write, writeimm, read, fadd, cswap, sleep };

struct Op {
  OpKind kind;
  std::string text;
  uint32_t len = 0;
  uint32_t imm = 0;
  uint64_t a = 0, b = 0;  // fadd: a = add; cswap: a = compare, b = swap
  uint32_t off = 0;
  double seconds = 0;
};

bool parse_u64(const std::string& s, uint64_t* v) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  *v = std::strtoull(s.c_str(), &end, 0);
  return errno == 0 && end && *end == '\0';
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep))
    if (!cur.empty()) out.push_back(cur);
  return out;
}

// rxe-peer.py's grammar: NAME[:ARG[:ARG]][@OFF].
bool parse_ops(const std::string& list, std::vector<Op>* out, std::string* err) {
  for (const std::string& text : split(list, ',')) {
    Op op;
    op.text = text;
    const size_t colon = text.find(':');
    const std::string name = text.substr(0, colon);
    std::string rest = colon == std::string::npos ? "" : text.substr(colon + 1);
    const size_t at = rest.find('@');
    uint64_t off = 0;
    if (at != std::string::npos) {
      if (!parse_u64(rest.substr(at + 1), &off) || off > UINT32_MAX) return *err = "bad offset in " + text, false;
      rest.resize(at);
    }
    op.off = static_cast<uint32_t>(off);
    std::vector<uint64_t> p;
    for (const std::string& x : split(rest, ':')) {
      uint64_t v;
      if (!parse_u64(x, &v)) return *err = "bad number in " + text, false;
      p.push_back(v);
    }
    auto need = [&](size_t n) { return p.size() >= n; };
    if (name == "send" && need(1)) op.kind = OpKind::send, op.len = static_cast<uint32_t>(p[0]);
    else if (name == "sendimm" && need(2)) op.kind = OpKind::sendimm, op.len = static_cast<uint32_t>(p[0]), op.imm = static_cast<uint32_t>(p[1]);
    else if (name == "write" && need(1)) op.kind = OpKind::write, op.len = static_cast<uint32_t>(p[0]);
    else if (name == "writeimm" && need(2)) op.kind = OpKind::writeimm, op.len = static_cast<uint32_t>(p[0]), op.imm = static_cast<uint32_t>(p[1]);
    else if (name == "read" && need(1)) op.kind = OpKind::read, op.len = static_cast<uint32_t>(p[0]);
    else if (name == "fadd") op.kind = OpKind::fadd, op.len = 8, op.a = p.empty() ? 1 : p[0];
    else if (name == "cswap" && need(2)) op.kind = OpKind::cswap, op.len = 8, op.a = p[0], op.b = p[1];
    else if (name == "sleep") op.kind = OpKind::sleep, op.seconds = p.empty() ? 1.0 : static_cast<double>(p[0]);
    else return *err = "unknown or incomplete op " + text, false;
    out->push_back(op);
  }
  return true;
}

bool is_send(OpKind k) { return k == OpKind::send || k == OpKind::sendimm; }
bool is_atomic(OpKind k) { return k == OpKind::fadd || k == OpKind::cswap; }

// ibv_wc_opcode of a requester's completion, as rxe reports it.
WcOpcode wc_opcode_of(OpKind k) {
  switch (k) {
    case OpKind::send:
    case OpKind::sendimm: return WcOpcode::send;
    case OpKind::write:
    case OpKind::writeimm: return WcOpcode::rdma_write;
    case OpKind::read: return WcOpcode::rdma_read;
    case OpKind::fadd: return WcOpcode::fetch_add;
    case OpKind::cswap: return WcOpcode::comp_swap;
    case OpKind::sleep: break;
  }
  return WcOpcode::send;
}

bool parse_status(const std::string& s, WcStatus* out) {
  static const std::pair<const char*, WcStatus> kNames[] = {
      {"rem_access_err", WcStatus::rem_access_err},       {"rnr_retry_exc_err", WcStatus::rnr_retry_exc_err},
      {"retry_exc_err", WcStatus::retry_exc_err},         {"rem_inv_req_err", WcStatus::rem_inv_req_err},
      {"rem_op_err", WcStatus::rem_op_err},               {"wr_flush_err", WcStatus::wr_flush_err},
  };
  for (const auto& [name, st] : kNames)
    if (s == name) return *out = st, true;
  return false;
}

// ---- Patterns and the model ---------------------------------------------------------

// A byte stream that does not repeat within a region, so misplaced or shifted data shows.
uint8_t pattern_byte(uint32_t seed, uint32_t k) {
  uint32_t x = seed * 0x9E3779B1u + k * 0x85EBCA6Bu;
  x ^= x >> 15;
  x *= 0x2C1B3C6Du;
  x ^= x >> 12;
  return static_cast<uint8_t>(x >> 24);
}

void put_u64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }  // host order: x86 is little-endian, as rxe's guest
uint64_t get_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// What one side received: a receive completion and the bytes it carried.
struct ModelRecv {
  WcOpcode opcode;
  uint32_t len;               // payload bytes (UD: without the GRH)
  std::optional<uint32_t> imm;
  std::vector<uint8_t> data;  // SEND payload (empty for WRITE with immediate)
  std::vector<uint8_t> after;  // guest receives only: the first 64 bytes of its receive buffer once this landed
};

// The guest's view of what it must print for one of its own ops.
struct ModelLocalData {
  uint32_t off;
  std::vector<uint8_t> head;  // rxe-peer.py prints min(len, 64) bytes at OFF after the op
};

struct Model {
  std::vector<uint8_t> d, g;       // droce's exposed region, the guest's MR
  size_t g_recv_at = 0;            // where every receive's payload lands in G (rxe-peer.py: one buffer)
  std::vector<ModelRecv> d_recvs;  // receives on droce, in order
  std::vector<ModelRecv> g_recvs;  // receives on the guest, in order
  std::vector<ModelLocalData> g_local;
  std::vector<std::pair<Op, WcStatus>> g_wcs;  // the guest's own completions

  // Applies one successful op issued by `from` (true: droce) to the model.
  // Returns false (and says why) when the op does not fit the regions.
  bool apply(const Op& op, bool from_droce, std::string* err) {
    std::vector<uint8_t>& local = from_droce ? d : g;
    std::vector<uint8_t>& remote = from_droce ? g : d;
    const size_t end = size_t{op.off} + op.len;
    const bool remote_side = !is_send(op.kind) && op.kind != OpKind::sleep;
    if (op.kind == OpKind::sleep) return true;
    if (end > local.size() || (remote_side && end > remote.size())) {
      *err = op.text + " runs past a region";
      return false;
    }
    std::vector<ModelRecv>& recvs = from_droce ? g_recvs : d_recvs;
    switch (op.kind) {
      case OpKind::send:
      case OpKind::sendimm: {
        ModelRecv r{WcOpcode::recv, op.len, std::nullopt, {local.begin() + op.off, local.begin() + end}, {}};
        if (op.kind == OpKind::sendimm) r.imm = op.imm;
        if (from_droce) {
          if (g_recv_at + op.len > g.size()) {
            *err = op.text + " does not fit the guest's receive buffer";
            return false;
          }
          std::copy(r.data.begin(), r.data.end(), g.begin() + g_recv_at);
        }
        recvs.push_back(std::move(r));
        break;
      }
      case OpKind::write:
      case OpKind::writeimm:
        std::copy(local.begin() + op.off, local.begin() + end, remote.begin() + op.off);
        if (op.kind == OpKind::writeimm) recvs.push_back({WcOpcode::recv_rdma_with_imm, op.len, op.imm, {}, {}});
        break;
      case OpKind::read:
        std::copy(remote.begin() + op.off, remote.begin() + end, local.begin() + op.off);
        break;
      case OpKind::fadd:
      case OpKind::cswap: {
        const uint64_t old = get_u64(&remote[op.off]);
        if (op.kind == OpKind::fadd) put_u64(&remote[op.off], old + op.a);
        else if (old == op.a) put_u64(&remote[op.off], op.b);
        put_u64(&local[op.off], old);
        break;
      }
      case OpKind::sleep: break;
    }
    if (from_droce && (is_send(op.kind) || op.kind == OpKind::writeimm)) {
      const size_t n = std::min<size_t>(64, g.size() - g_recv_at);
      g_recvs.back().after.assign(g.begin() + g_recv_at, g.begin() + g_recv_at + n);
    }
    if (!from_droce && (op.kind == OpKind::read || is_atomic(op.kind))) {
      const size_t n = std::min<size_t>(op.len, 64);
      g_local.push_back({op.off, {g.begin() + op.off, g.begin() + op.off + n}});
    }
    return true;
  }
};

// ---- The guest's files -------------------------------------------------------------

std::string share_path(const std::string& suffix) { return g_opt.share + "/" + g_opt.tag + suffix; }

void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << text;
    if (!f) die(kExitSetup, "cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) die(kExitSetup, "cannot rename " + tmp);
}

void touch(const std::string& path) { write_file_atomic(path, ""); }

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

uint64_t deadline_after(double seconds) { return core::monotonic_ns() + static_cast<uint64_t>(seconds * 1e9); }

// Waits for the guest's JSON file (a flat object, what rxe-peer.py writes), until it parses;
// false at the deadline.
bool wait_json(const std::string& path, uint64_t deadline, Json* out) {
  while (core::monotonic_ns() < deadline) {
    std::ifstream f(path);
    if (f) {
      std::stringstream ss;
      ss << f.rdbuf();
      *out = Json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
      if (!out->is_discarded() && out->is_object()) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// A number of the guest's file: a JSON number, or a string parse_u64 takes ("0x1f").
bool u64_field(const Json& o, const char* key, uint64_t* v) {
  const auto it = o.find(key);
  if (it == o.end()) return false;
  if (it->is_number_unsigned()) return *v = it->get<uint64_t>(), true;
  return it->is_string() && parse_u64(it->get<std::string>(), v);
}

bool wait_exists(const std::string& path, uint64_t deadline) {
  while (core::monotonic_ns() < deadline) {
    if (exists(path)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// "0000:0000:0000:0000:0000:ffff:0a63:000b" (pyverbs' GID text) -> 16 bytes.
bool parse_gid(const std::string& text, net::IpAddr* out) {
  std::string h;
  for (char c : text)
    if (c != ':') h += c;
  if (h.size() != 32) return false;
  for (size_t i = 0; i < 16; ++i) {
    uint64_t v;
    if (!parse_u64("0x" + h.substr(2 * i, 2), &v)) return false;
    (*out)[i] = static_cast<uint8_t>(v);
  }
  return true;
}

std::string gid_text(const net::IpAddr& g) {
  std::string s;
  char b[8];
  for (size_t i = 0; i < 16; i += 2) {
    std::snprintf(b, sizeof b, "%s%02x%02x", i ? ":" : "", g[i], g[i + 1]);
    s += b;
  }
  return s;
}

// ---- droce's side ----------------------------------------------------------------------

struct Peer {
  std::unique_ptr<Context> ctx;
  uint32_t pd = 0;
  client::Cq* cq = nullptr;
  client::Qp* qp = nullptr;
  uint32_t ah = 0;
  net::IpAddr gid{};
  PathMtu mtu = PathMtu::mtu1024;
  // D (exposed, remote access) and a local-only area: the guest's seed, then the receive slots.
  uint8_t* d = nullptr;
  uint8_t* local = nullptr;
  size_t local_len = 0;
  uint32_t d_lkey = 0, d_rkey = 0, local_lkey = 0, local_rkey = 0;
  uint32_t slot_len = 0;
  std::vector<Completion> early_recvs;  // receive completions seen while waiting for a send
  // The guest, from its T.local.json.
  uint32_t g_qpn = 0, g_psn = 0, g_rkey = 0, g_qkey = 0;
  uint64_t g_addr = 0;
  net::IpAddr g_gid{};

  uint8_t* seed_area() { return local; }
  uint8_t* slot(uint32_t i) { return local + g_opt.peer_size / 2 + size_t{i} * slot_len; }
};

Peer g_peer;

void* alloc_pages(size_t n) {
  void* p = std::aligned_alloc(4096, (n + 4095) & ~size_t{4095});
  if (!p) die(kExitSetup, "out of memory");
  std::memset(p, 0, n);
  return p;
}

void setup() {
  Peer& p = g_peer;
  if (int rc = Context::open(g_opt.socket, &p.ctx); rc != 0)
    die(kExitSetup, "cannot open " + g_opt.socket + ": " + std::strerror(-rc));
  abi::ctl::QueryGidReply gr{};
  if (p.ctx->query_gid(1, g_opt.gid_index, &gr) != 0) die(kExitSetup, "no GID " + std::to_string(g_opt.gid_index));
  std::memcpy(p.gid.data(), gr.gid, 16);
  abi::ctl::QueryPortReply port{};
  if (p.ctx->query_port(1, &port) != 0) die(kExitSetup, "query_port failed");
  p.mtu = g_opt.mtu ? *g_opt.mtu : static_cast<PathMtu>(port.active_mtu);
  if (p.ctx->alloc_pd(&p.pd) != 0 || p.ctx->create_cq(1024, &p.cq) != 0) die(kExitSetup, "alloc_pd/create_cq failed");

  p.d = static_cast<uint8_t*>(alloc_pages(g_opt.size));
  p.slot_len = (std::max(g_opt.peer_size, kGuestRecvCap) + kGrhBytes + 63) & ~63u;
  p.local_len = g_opt.peer_size / 2 + size_t{std::max(g_opt.recv, 1u)} * p.slot_len;
  p.local = static_cast<uint8_t*>(alloc_pages(p.local_len));
  const uint32_t remote_access = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
  if (p.ctx->reg_mr(p.pd, p.d, g_opt.size, remote_access, &p.d_lkey, &p.d_rkey) != 0 ||
      p.ctx->reg_mr(p.pd, p.local, p.local_len, kAccessLocalWrite, &p.local_lkey, &p.local_rkey) != 0)
    die(kExitSetup, "reg_mr failed");

  client::QpCreate c;
  c.type = g_opt.qpt;
  c.pd = p.pd;
  c.send_cq = c.recv_cq = p.cq;
  c.cap = {64, std::max(g_opt.recv, 1u) + 1, 1, 1, 0};
  c.sq_sig_all = true;
  if (int rc = p.ctx->create_qp(c, &p.qp); rc != 0) die(kExitSetup, std::string("create_qp: ") + std::strerror(-rc));
  QpAttr a;
  a.qp_state = QpState::init;
  a.port_num = 1;
  a.qkey = g_opt.qkey;
  a.qp_access_flags = remote_access;
  const bool ud = g_opt.qpt == QpType::ud;
  if (int rc = p.ctx->modify_qp(p.qp, a, kAttrState | kAttrPkeyIndex | kAttrPort | (ud ? kAttrQkey : kAttrAccessFlags));
      rc != 0)
    die(kExitSetup, std::string("modify to INIT: ") + std::strerror(-rc));
}

void post_recvs() {
  Peer& p = g_peer;
  for (uint32_t i = 0; i < g_opt.recv; ++i) {
    RecvWr r;
    r.wr_id = 1000 + i;
    r.num_sge = 1;
    r.sg_list[0] = Sge{reinterpret_cast<uint64_t>(p.slot(i)), p.slot_len, p.local_lkey};
    if (int rc = p.qp->post_recv(r); rc != 0) die(kExitSetup, std::string("post_recv: ") + std::strerror(-rc));
  }
  Json o = event("recvs_posted");
  o["count"] = g_opt.recv;
  print(o);
}

void connect_to_guest() {
  Peer& p = g_peer;
  QpAttr a;
  a.qp_state = QpState::rtr;
  uint32_t mask = kAttrState;
  if (g_opt.qpt == QpType::rc) {
    a.path_mtu = p.mtu;
    a.dest_qp_num = p.g_qpn;
    a.rq_psn = p.g_psn;
    a.max_dest_rd_atomic = 16;
    a.min_rnr_timer = g_opt.min_rnr_timer;
    a.ah_attr.dgid = p.g_gid;
    a.ah_attr.sgid_index = static_cast<uint8_t>(g_opt.gid_index);
    mask |= kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn | kAttrMaxDestRdAtomic | kAttrMinRnrTimer;
  }
  if (int rc = p.ctx->modify_qp(p.qp, a, mask); rc != 0) die(kExitSetup, std::string("modify to RTR: ") + std::strerror(-rc));
  a = QpAttr{};
  a.qp_state = QpState::rts;
  a.sq_psn = g_opt.psn;
  a.timeout = g_opt.timeout;
  a.retry_cnt = g_opt.retry_cnt;
  a.rnr_retry = g_opt.rnr_retry;
  a.max_rd_atomic = g_opt.max_rd_atomic;
  mask = kAttrState | kAttrSqPsn;
  if (g_opt.qpt == QpType::rc) mask |= kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry | kAttrMaxQpRdAtomic;
  if (int rc = p.ctx->modify_qp(p.qp, a, mask); rc != 0) die(kExitSetup, std::string("modify to RTS: ") + std::strerror(-rc));
  if (g_opt.qpt == QpType::ud) {
    AddressVector av;
    av.dgid = p.g_gid;
    av.sgid_index = static_cast<uint8_t>(g_opt.gid_index);
    if (int rc = p.ctx->create_ah(p.pd, av, &p.ah); rc != 0) die(kExitSetup, std::string("create_ah: ") + std::strerror(-rc));
  }
  Json o = event("rts");
  o["qpn"] = p.qp->qpn();
  o["dest_qpn"] = p.g_qpn;
  o["path_mtu"] = mtu_bytes(p.mtu);
  print(o);
}

void print_wc(const Completion& c) {
  Json o = event("wc");
  o["wr_id"] = c.wr_id;
  o["status"] = static_cast<uint64_t>(c.status);
  o["status_str"] = to_string(c.status);
  o["opcode"] = static_cast<uint64_t>(c.opcode);
  o["byte_len"] = c.byte_len;
  o["qp_num"] = c.qp_num;
  o["src_qp"] = c.src_qp;
  o["wc_flags"] = c.wc_flags;
  if (c.wc_flags & kWcWithImm) o["imm_data"] = c.imm_data;
  print(o);
}

// The next completion (any queue); false at the deadline.
bool poll_one(Completion* c, uint64_t deadline) {
  while (core::monotonic_ns() < deadline) {
    const int n = g_peer.cq->poll(c, 1);
    if (n == 1) {
      print_wc(*c);
      return true;
    }
    if (n < 0) die(kExitSetup, "poll_cq failed: droced gone?");
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return false;
}

bool is_recv(const Completion& c) {
  return c.opcode == WcOpcode::recv || c.opcode == WcOpcode::recv_rdma_with_imm;
}

// Our own send-queue completion for the WR just posted (receives seen meanwhile are kept).
bool wait_send_completion(Completion* out) {
  const uint64_t deadline = deadline_after(g_opt.wait_s);
  Completion c;
  while (poll_one(&c, deadline)) {
    if (is_recv(c) && c.status == WcStatus::success) {
      g_peer.early_recvs.push_back(c);
      continue;
    }
    *out = c;
    return true;
  }
  return false;
}

// One WR of ours; `remote_addr` and `rkey` are the guest's (or a seed target).
int post(const Op& op, uint64_t local_addr, uint32_t lkey, uint64_t remote_addr, uint32_t rkey) {
  Peer& p = g_peer;
  SendWr w;
  w.wr_id = op.off;
  w.num_sge = 1;
  w.sg_list[0] = Sge{local_addr, op.len, lkey};
  switch (op.kind) {
    case OpKind::send: w.opcode = WrOpcode::send; break;
    case OpKind::sendimm: w.opcode = WrOpcode::send_with_imm, w.imm_data = op.imm; break;
    case OpKind::write: w.opcode = WrOpcode::rdma_write; break;
    case OpKind::writeimm: w.opcode = WrOpcode::rdma_write_with_imm, w.imm_data = op.imm; break;
    case OpKind::read: w.opcode = WrOpcode::rdma_read; break;
    case OpKind::fadd: w.opcode = WrOpcode::atomic_fetch_and_add, w.compare_add = op.a; break;
    case OpKind::cswap: w.opcode = WrOpcode::atomic_cmp_and_swp, w.compare_add = op.a, w.swap = op.b; break;
    case OpKind::sleep: return 0;
  }
  w.remote_addr = remote_addr;
  w.rkey = rkey;
  if (g_opt.qpt == QpType::ud) {
    w.ah = p.ah;
    w.remote_qpn = p.g_qpn;
    w.remote_qkey = p.g_qkey;
  }
  Json o = event("post");
  o["op"] = op.text;
  o["len"] = op.len;
  o["off"] = op.off;
  print(o);
  return p.qp->post_send(w);
}

// The QP's row of droced's state (as `droce qps --json` prints it): its state and counters;
// {} when droced has none.
Json qp_stats() {
  std::string text;
  if (g_peer.ctx->stats(&text) != 0) return Json::object();
  const Json all = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (all.is_discarded() || !all.is_object() || !all.contains("qps") || !all["qps"].is_array()) return Json::object();
  for (const Json& q : all["qps"])
    if (q.is_object() && q.value("qpn", uint64_t{0}) == g_peer.qp->qpn()) return q;
  return Json::object();
}

uint64_t qp_counter(const char* name) {
  uint64_t v = 0;
  return u64_field(qp_stats(), name, &v) ? v : 0;
}

// ---- The run ------------------------------------------------------------------------------

std::string describe_diff(const uint8_t* got, const uint8_t* want, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (got[i] != want[i]) {
      char b[96];
      std::snprintf(b, sizeof b, "first difference at byte %zu: 0x%02x, want 0x%02x", i, got[i], want[i]);
      return b;
    }
  return {};
}

int run() {
  Peer& p = g_peer;
  const bool rc = g_opt.qpt == QpType::rc;
  std::vector<Op> ops, peer_ops;
  std::string err;
  if (!parse_ops(g_opt.ops, &ops, &err) || !parse_ops(g_opt.peer_ops, &peer_ops, &err)) die(kExitSetup, err);
  WcStatus want_fail{}, peer_want_fail{};
  const bool expect_fail = !g_opt.expect_fail.empty(), peer_expect_fail = !g_opt.peer_expect_fail.empty();
  if ((expect_fail && !parse_status(g_opt.expect_fail, &want_fail)) ||
      (peer_expect_fail && !parse_status(g_opt.peer_expect_fail, &peer_want_fail)))
    die(kExitSetup, "unknown status name");

  // Memory and the model's starting point.
  Model m;
  m.d.resize(g_opt.size);
  for (uint32_t k = 0; k < g_opt.size; ++k) m.d[k] = pattern_byte(g_opt.seed, k);
  for (const auto& [off, v] : g_opt.u64)
    if (size_t{off} + 8 <= m.d.size()) put_u64(&m.d[off], v);
  m.g.assign(g_opt.peer_size, g_opt.peer_fill);
  m.g_recv_at = g_opt.peer_size / 2 + (rc ? 0 : kGrhBytes);

  setup();
  std::memcpy(p.d, m.d.data(), m.d.size());
  const uint32_t seed_len = g_opt.peer_size / 2;
  for (uint32_t k = 0; k < seed_len; ++k) p.seed_area()[k] = pattern_byte(g_opt.seed + 0x1000, k);
  for (const auto& [off, v] : g_opt.peer_u64)
    if (size_t{off} + 8 <= seed_len) put_u64(p.seed_area() + off, v);
  if (!g_opt.late_recv) post_recvs();

  // 2. Files: ours for the guest, then the guest's.
  std::remove(share_path(".local.json").c_str());
  for (const char* s : {".rts", ".go", ".end", ".done.json"}) std::remove(share_path(s).c_str());
  {
    Json o;
    o["qpn"] = p.qp->qpn();
    o["psn"] = g_opt.psn;
    o["gid"] = gid_text(p.gid);
    o["gid_index"] = g_opt.gid_index;
    o["lid"] = 0;
    o["rkey"] = p.d_rkey;
    o["addr"] = reinterpret_cast<uint64_t>(p.d);
    o["size"] = g_opt.size;
    o["qkey"] = g_opt.qkey;
    o["qpt"] = rc ? "rc" : "ud";
    o["host"] = "droce";
    write_file_atomic(share_path(".remote.json"), dump(o) + "\n");
    o["event"] = "local";
    print(o);
  }
  Json gl;
  if (!wait_json(share_path(".local.json"), deadline_after(g_opt.wait_s), &gl))
    die(kExitNoAnswer, "no " + share_path(".local.json"));
  uint64_t v = 0;
  auto field = [&](const char* k) -> uint64_t {
    if (!u64_field(gl, k, &v)) die(kExitSetup, std::string("guest's local.json: bad ") + k);
    return v;
  };
  p.g_qpn = static_cast<uint32_t>(field("qpn"));
  p.g_psn = static_cast<uint32_t>(field("psn"));
  p.g_rkey = static_cast<uint32_t>(field("rkey"));
  p.g_addr = field("addr");
  p.g_qkey = static_cast<uint32_t>(field("qkey"));
  if (field("size") != g_opt.peer_size) die(kExitSetup, "the guest's MR size is not --peer-size");
  if (!parse_gid(gl.value("gid", std::string()), &p.g_gid)) die(kExitSetup, "guest's local.json: bad gid");
  {
    Json o = event("remote");
    o["qpn"] = p.g_qpn;
    o["psn"] = p.g_psn;
    o["gid"] = gid_text(p.g_gid);
    o["rkey"] = p.g_rkey;
    o["addr"] = p.g_addr;
    o["qkey"] = p.g_qkey;
    print(o);
  }

  // 3. RTS on both sides.
  connect_to_guest();
  if (!wait_exists(share_path(".rts"), deadline_after(g_opt.wait_s))) die(kExitNoAnswer, "the guest never reached RTS");

  // 4. The seed: G's lower half becomes a pattern of ours, so that what the guest sends,
  //    writes or returns is known byte for byte.
  if (rc && g_opt.seed_peer) {
    Op seed{OpKind::write, "seed:write:" + std::to_string(seed_len) + "@0", seed_len};
    Completion c;
    if (post(seed, reinterpret_cast<uint64_t>(p.seed_area()), p.local_lkey, p.g_addr, p.g_rkey) != 0)
      die(kExitSetup, "post of the seed WRITE failed");
    if (!wait_send_completion(&c)) die(kExitNoAnswer, "the seed WRITE never completed");
    if (c.status != WcStatus::success) {
      check(false, "seed WRITE of the guest's lower half", to_string(c.status));
      return kExitFail;
    }
    std::copy(p.seed_area(), p.seed_area() + seed_len, m.g.begin());
  }
  touch(share_path(".go"));

  // 5a. Our ops.
  const uint32_t rkey = p.g_rkey ^ (g_opt.bad_rkey ? 0x5a5a00u : 0u);
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    if (op.kind == OpKind::sleep) {
      std::this_thread::sleep_for(std::chrono::duration<double>(op.seconds));
      continue;
    }
    if (size_t{op.off} + op.len > g_opt.size) die(kExitSetup, op.text + " runs past --size");
    if (int prc = post(op, reinterpret_cast<uint64_t>(p.d + op.off), p.d_lkey, p.g_addr + op.off, rkey); prc != 0) {
      check(false, "post " + op.text, std::strerror(-prc));
      break;
    }
    Completion c;
    if (!wait_send_completion(&c)) {
      Json o = event("timeout");
      o["op"] = op.text;
      print(o);
      return kExitNoAnswer;
    }
    const bool last = i + 1 == ops.size();
    if (expect_fail && last) {
      check(c.status == want_fail, op.text + " fails with " + g_opt.expect_fail, to_string(c.status));
      break;
    }
    check(c.status == WcStatus::success && c.opcode == wc_opcode_of(op.kind),
          op.text + " completes", std::string(to_string(c.status)) + ", opcode " + std::to_string(unsigned(c.opcode)));
    if (c.status != WcStatus::success) break;
    if (!m.apply(op, true, &err)) die(kExitSetup, err);
    if (op.kind == OpKind::read || is_atomic(op.kind)) {
      const std::string d = describe_diff(p.d + op.off, &m.d[op.off], op.len);
      char what[160];
      if (is_atomic(op.kind))
        std::snprintf(what, sizeof what, "%s returns the guest's old value 0x%" PRIx64, op.text.c_str(),
                      get_u64(&m.d[op.off]));
      else
        std::snprintf(what, sizeof what, "%s returns the guest's bytes", op.text.c_str());
      check(d.empty(), what, d);
    }
  }

  // 5b. The guest's ops, in the model; its completions as it must report them.
  for (size_t i = 0; i < peer_ops.size(); ++i) {
    const Op& op = peer_ops[i];
    if (op.kind == OpKind::sleep) continue;
    if (peer_expect_fail && i + 1 == peer_ops.size()) {
      m.g_wcs.push_back({op, peer_want_fail});
      break;
    }
    if (!m.apply(op, false, &err)) die(kExitSetup, err);
    m.g_wcs.push_back({op, WcStatus::success});
  }
  if (g_opt.late_recv) {
    // Post the receives only once we have refused the guest's SEND at least once (an RNR NAK).
    const uint64_t deadline = deadline_after(g_opt.wait_s);
    uint64_t sent = 0;
    while ((sent = qp_counter("rnr_naks_sent")) == 0 && core::monotonic_ns() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    Json o = event("rnr_naks_sent_before_recv");
    o["count"] = sent;
    print(o);
    if (sent == 0) return kExitNoAnswer;
    post_recvs();
  }

  // 5c. The receives the guest's ops produce, in order.
  std::vector<Completion> recvs = p.early_recvs;
  {
    const uint64_t deadline = deadline_after(g_opt.wait_s);
    Completion c;
    while (recvs.size() < m.d_recvs.size() && poll_one(&c, deadline)) recvs.push_back(c);
  }
  touch(share_path(".end"));
  Json done;
  const bool guest_done = wait_json(share_path(".done.json"), deadline_after(g_opt.wait_s), &done);
  {  // anything late (a receive we did not expect shows here)
    Completion c;
    while (g_peer.cq->poll(&c, 1) == 1) {
      print_wc(c);
      recvs.push_back(c);
    }
  }

  // 6. Checks on droce's side.
  check(recvs.size() == m.d_recvs.size(), "droce got the receives the guest's ops produce",
        std::to_string(recvs.size()) + " of " + std::to_string(m.d_recvs.size()));
  const bool ud = !rc;
  const uint32_t g_ipv4 = net::ipv4_of(p.g_gid);
  for (size_t i = 0; i < std::min(recvs.size(), m.d_recvs.size()); ++i) {
    const Completion& c = recvs[i];
    const ModelRecv& want = m.d_recvs[i];
    const uint32_t want_len = want.len + (ud ? kGrhBytes : 0);
    std::string what = "receive " + std::to_string(i) + " (" + std::to_string(want.len) + " B" +
                       (want.imm ? ", imm" : "") + ")";
    bool ok = c.status == WcStatus::success && c.opcode == want.opcode && c.byte_len == want_len &&
              c.wr_id == 1000 + i && c.qp_num == p.qp->qpn();
    char detail[200];
    std::snprintf(detail, sizeof detail, "status %s opcode %u byte_len %u (want %u) wr_id %" PRIu64 " imm 0x%x flags 0x%x",
                  to_string(c.status), unsigned(c.opcode), c.byte_len, want_len, c.wr_id, c.imm_data, c.wc_flags);
    if (want.imm) ok = ok && (c.wc_flags & kWcWithImm) && c.imm_data == *want.imm;
    else ok = ok && !(c.wc_flags & kWcWithImm);
    if (ud && ok) {  // ok: wr_id names slot i
      const uint8_t* grh = p.slot(static_cast<uint32_t>(i));
      uint32_t src = 0;
      std::memcpy(&src, grh + 20 + 12, 4);
      // Annex A17.4.5.1: for IPv4 the last 20 bytes of the GRH area are the IPv4 header.
      ok = ok && c.src_qp == p.g_qpn && (c.wc_flags & kWcGrh) && grh[20] == 0x45 && be32toh(src) == g_ipv4;
    }
    if (ok && !want.data.empty()) {
      const uint8_t* got = p.slot(static_cast<uint32_t>(i)) + (ud ? kGrhBytes : 0);
      const std::string d = describe_diff(got, want.data.data(), want.data.size());
      if (!d.empty()) {
        ok = false;
        std::snprintf(detail, sizeof detail, "payload: %s", d.c_str());
      }
    }
    check(ok, what + ": status, opcode, length, immediate" + (ud ? ", source QP, GRH" : "") + " and payload", detail);
  }
  check(guest_done, "the guest finished (T.done.json)");
  {
    const std::string d = describe_diff(p.d, m.d.data(), m.d.size());
    check(d.empty(), "droce's region holds what the guest's WRITEs and atomics left there (all " +
                         std::to_string(g_opt.size) + " bytes)", d);
  }

  // For the guest's checker: what it must have printed.
  if (!g_opt.expect_out.empty()) {
    Json j;
    Json& wcs = j["wcs"] = Json::array();
    for (const auto& [op, st] : m.g_wcs) {
      Json w;
      w["op"] = op.text;
      w["status"] = static_cast<uint64_t>(st);
      w["opcode"] = static_cast<uint64_t>(wc_opcode_of(op.kind));
      wcs.push_back(std::move(w));
    }
    // All receives land at one address in the guest, and rxe-peer.py prints the first
    // min(byte_len, 64) bytes there when it polls the completion: by then a later message may
    // have landed too. So each receive's allowed heads are the buffer as this or any later
    // receive left it (for a WRITE with immediate, whatever the SENDs left). The final dump
    // checks the buffer in full.
    Json& guest_recvs = j["recvs"] = Json::array();
    for (size_t i = 0; i < m.g_recvs.size(); ++i) {
      const ModelRecv& r = m.g_recvs[i];
      const uint32_t byte_len = r.len + (ud ? kGrhBytes : 0);
      Json o;
      o["opcode"] = static_cast<uint64_t>(r.opcode);
      o["byte_len"] = byte_len;
      if (r.imm) o["imm"] = *r.imm;
      Json& heads = o["heads"] = Json::array();
      for (size_t k = i; k < m.g_recvs.size(); ++k) {
        const size_t n = std::min<size_t>({byte_len, 64, m.g_recvs[k].after.size()});
        heads.push_back(hex(m.g_recvs[k].after.data(), n));
      }
      guest_recvs.push_back(std::move(o));
    }
    Json& local = j["local_data"] = Json::array();
    for (const auto& l : m.g_local) {
      Json o;
      o["off"] = l.off;
      o["head"] = hex(l.head.data(), l.head.size());
      local.push_back(std::move(o));
    }
    // The final contents of the guest's MR; for UD the GRH area before the last receive's
    // payload holds rxe's rendering of the IP header, which the checker skips.
    Json& ignore = j["ignore"] = Json::array();
    if (ud) ignore.push_back(Json::array({g_opt.peer_size / 2, g_opt.peer_size / 2 + kGrhBytes}));
    j["dump"] = hex(m.g.data(), m.g.size());
    write_file_atomic(g_opt.expect_out, dump(j, 1) + "\n");
  }
  const Json stats = qp_stats();
  Json counters = event("counters");
  counters["qp"] = stats;
  print(counters);
  if (!g_opt.stats_out.empty()) write_file_atomic(g_opt.stats_out, dump(stats) + "\n");
  Json end = event("done");
  end["failures"] = g_failures;
  print(end);
  if (!guest_done) return kExitNoAnswer;
  return g_failures == 0 ? kExitPass : kExitFail;
}

int usage() {
  std::fprintf(stderr,
               "usage: droce-interop-peer --socket SOCK --share DIR --tag T [options]\n"
               "  --qpt rc|ud  --gid-index I  --mtu 256..4096|port  --size BYTES  --seed N  --psn N  --qkey K\n"
               "  --recv N  --late-recv  --ops LIST  --peer-ops LIST  --peer-size BYTES  --peer-fill BYTE\n"
               "  --no-seed  --u64 OFF=VAL  --peer-u64 OFF=VAL  --bad-rkey  --expect-fail STATUS\n"
               "  --peer-expect-fail STATUS  --rnr-retry N  --retry-cnt N  --min-rnr-timer N  --timeout N\n"
               "  --max-rd-atomic N  --wait SECONDS  --expect-out FILE  --stats-out FILE\n");
  return kExitSetup;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc && a != "--late-recv" && a != "--no-seed" && a != "--bad-rkey") return usage();
    auto next = [&]() -> std::string { return argv[++i]; };
    auto num = [&](uint64_t max) -> uint64_t {
      uint64_t v;
      const std::string s = next();
      if (!parse_u64(s, &v) || v > max) {
        std::fprintf(stderr, "droce-interop-peer: bad value %s for %s\n", s.c_str(), a.c_str());
        std::exit(kExitSetup);
      }
      return v;
    };
    auto pair = [&](std::map<uint32_t, uint64_t>* into) {
      const std::string s = next();
      const size_t eq = s.find('=');
      uint64_t off, val;
      if (eq == std::string::npos || !parse_u64(s.substr(0, eq), &off) || !parse_u64(s.substr(eq + 1), &val))
        std::exit(usage());
      (*into)[static_cast<uint32_t>(off)] = val;
    };
    if (a == "--socket") g_opt.socket = next();
    else if (a == "--share") g_opt.share = next();
    else if (a == "--tag") g_opt.tag = next();
    else if (a == "--qpt") {
      const std::string t = next();
      if (t != "rc" && t != "ud") return usage();
      g_opt.qpt = t == "rc" ? QpType::rc : QpType::ud;
    } else if (a == "--gid-index") g_opt.gid_index = static_cast<uint32_t>(num(255));
    else if (a == "--mtu") {
      const std::string v = next();
      if (v != "port") {
        bool known = false;
        for (auto m : {PathMtu::mtu256, PathMtu::mtu512, PathMtu::mtu1024, PathMtu::mtu2048, PathMtu::mtu4096})
          if (v == std::to_string(mtu_bytes(m))) g_opt.mtu = m, known = true;
        if (!known) return usage();
      }
    } else if (a == "--size") g_opt.size = static_cast<uint32_t>(num(1u << 26));
    else if (a == "--seed") g_opt.seed = static_cast<uint32_t>(num(UINT32_MAX));
    else if (a == "--psn") g_opt.psn = static_cast<uint32_t>(num(0xffffff));
    else if (a == "--qkey") g_opt.qkey = static_cast<uint32_t>(num(0x7fffffff));
    else if (a == "--recv") g_opt.recv = static_cast<uint32_t>(num(60));
    else if (a == "--late-recv") g_opt.late_recv = true;
    else if (a == "--ops") g_opt.ops = next();
    else if (a == "--peer-ops") g_opt.peer_ops = next();
    else if (a == "--peer-size") g_opt.peer_size = static_cast<uint32_t>(num(1u << 26));
    else if (a == "--peer-fill") g_opt.peer_fill = static_cast<uint8_t>(num(255));
    else if (a == "--no-seed") g_opt.seed_peer = false;
    else if (a == "--u64") pair(&g_opt.u64);
    else if (a == "--peer-u64") pair(&g_opt.peer_u64);
    else if (a == "--bad-rkey") g_opt.bad_rkey = true;
    else if (a == "--expect-fail") g_opt.expect_fail = next();
    else if (a == "--peer-expect-fail") g_opt.peer_expect_fail = next();
    else if (a == "--rnr-retry") g_opt.rnr_retry = static_cast<uint8_t>(num(7));
    else if (a == "--retry-cnt") g_opt.retry_cnt = static_cast<uint8_t>(num(7));
    else if (a == "--min-rnr-timer") g_opt.min_rnr_timer = static_cast<uint8_t>(num(31));
    else if (a == "--timeout") g_opt.timeout = static_cast<uint8_t>(num(31));
    else if (a == "--max-rd-atomic") g_opt.max_rd_atomic = static_cast<uint8_t>(num(16));
    else if (a == "--wait") g_opt.wait_s = static_cast<double>(num(3600));
    else if (a == "--expect-out") g_opt.expect_out = next();
    else if (a == "--stats-out") g_opt.stats_out = next();
    else return usage();
  }
  if (g_opt.socket.empty() || g_opt.share.empty() || g_opt.tag.empty() || g_opt.size < 64 || g_opt.peer_size < 64)
    return usage();
  return run();
}
