#include "rocev2/opcode.h"

namespace droce::rocev2 {

namespace {

struct OpDef {
  const char* name;  // without the transport prefix
  OpKind kind;
  Position position;
  uint16_t headers;
  bool payload;
  bool requester;
  bool responder;
};

// IBA Vol. 1 table 38, operations 0x00-0x17 as RC defines them, and IBA 1.5's FLUSH and ATOMIC
// WRITE (Annex A19; RC only, as rxe has them): FLUSH carries a FETH then a RETH and no payload,
// ATOMIC WRITE a RETH and 8 bytes of payload. Both are answered by an RDMA READ response only of
// no payload.
constexpr std::array<OpDef, 32> kOps = [] {
  std::array<OpDef, 32> t{};
  for (auto& d : t) d = {nullptr, OpKind::none, Position::none, 0, false, false, false};
  using P = Position;
  using K = OpKind;
  t[op::kSendFirst] = {"SEND_FIRST", K::send, P::first, 0, true, true, false};
  t[op::kSendMiddle] = {"SEND_MIDDLE", K::send, P::middle, 0, true, true, false};
  t[op::kSendLast] = {"SEND_LAST", K::send, P::last, 0, true, true, false};
  t[op::kSendLastImm] = {"SEND_LAST_WITH_IMMEDIATE", K::send, P::last, kHdrImmDt, true, true, false};
  t[op::kSendOnly] = {"SEND_ONLY", K::send, P::only, 0, true, true, false};
  t[op::kSendOnlyImm] = {"SEND_ONLY_WITH_IMMEDIATE", K::send, P::only, kHdrImmDt, true, true, false};
  t[op::kWriteFirst] = {"RDMA_WRITE_FIRST", K::write, P::first, kHdrReth, true, true, false};
  t[op::kWriteMiddle] = {"RDMA_WRITE_MIDDLE", K::write, P::middle, 0, true, true, false};
  t[op::kWriteLast] = {"RDMA_WRITE_LAST", K::write, P::last, 0, true, true, false};
  t[op::kWriteLastImm] = {"RDMA_WRITE_LAST_WITH_IMMEDIATE", K::write, P::last, kHdrImmDt, true, true, false};
  t[op::kWriteOnly] = {"RDMA_WRITE_ONLY", K::write, P::only, kHdrReth, true, true, false};
  t[op::kWriteOnlyImm] = {"RDMA_WRITE_ONLY_WITH_IMMEDIATE", K::write, P::only, kHdrReth | kHdrImmDt,
                          true, true, false};
  t[op::kReadRequest] = {"RDMA_READ_REQUEST", K::read_request, P::only, kHdrReth, false, true, false};
  t[op::kReadResponseFirst] = {"RDMA_READ_RESPONSE_FIRST", K::read_response, P::first, kHdrAeth,
                               true, false, true};
  t[op::kReadResponseMiddle] = {"RDMA_READ_RESPONSE_MIDDLE", K::read_response, P::middle, 0, true,
                                false, true};
  t[op::kReadResponseLast] = {"RDMA_READ_RESPONSE_LAST", K::read_response, P::last, kHdrAeth, true,
                              false, true};
  t[op::kReadResponseOnly] = {"RDMA_READ_RESPONSE_ONLY", K::read_response, P::only, kHdrAeth, true,
                              false, true};
  t[op::kAcknowledge] = {"ACKNOWLEDGE", K::ack, P::none, kHdrAeth, false, false, true};
  t[op::kAtomicAcknowledge] = {"ATOMIC_ACKNOWLEDGE", K::atomic_ack, P::only,
                               kHdrAeth | kHdrAtomicAckEth, false, false, true};
  t[op::kCompareSwap] = {"COMPARE_SWAP", K::compare_swap, P::only, kHdrAtomicEth, false, true, false};
  t[op::kFetchAdd] = {"FETCH_ADD", K::fetch_add, P::only, kHdrAtomicEth, false, true, false};
  t[op::kSendLastInv] = {"SEND_LAST_WITH_INVALIDATE", K::send, P::last, kHdrIeth, true, true, false};
  t[op::kSendOnlyInv] = {"SEND_ONLY_WITH_INVALIDATE", K::send, P::only, kHdrIeth, true, true, false};
  t[op::kFlush] = {"FLUSH", K::flush, P::only, kHdrFeth | kHdrReth, false, true, false};
  t[op::kAtomicWrite] = {"ATOMIC_WRITE", K::atomic_write, P::only, kHdrReth, true, true, false};
  return t;
}();

constexpr bool uc_allows(uint8_t operation) { return operation <= op::kWriteOnlyImm; }
// XRC (Annex A14.4): RC's operations 0x00-0x17, not IBA 1.5's FLUSH and ATOMIC WRITE (rxe and
// mlx5 offer those on RC only).
constexpr bool xrc_allows(uint8_t operation) { return operation <= op::kSendOnlyInv; }
constexpr bool ud_allows(uint8_t operation) {
  return operation == op::kSendOnly || operation == op::kSendOnlyImm;
}

constexpr uint8_t ext_len_of(uint16_t headers) {
  uint8_t n = 0;
  for (uint16_t bit = 1; bit <= kHdrCnp; bit <<= 1) {
    if (headers & bit) n = static_cast<uint8_t>(n + header_len(static_cast<HeaderBit>(bit)));
  }
  return n;
}

// Names for every defined opcode, "RC_SEND_FIRST" and so on: built once.
struct Names {
  char buf[256][40] = {};
};

constexpr void put_name(char* out, const char* prefix, const char* name) {
  std::size_t i = 0;
  for (const char* p = prefix; *p; ++p) out[i++] = *p;
  for (const char* p = name; *p && i < 39; ++p) out[i++] = *p;
  out[i] = 0;
}

constexpr Names kNames = [] {
  Names n{};
  constexpr const char* kPrefix[] = {"RC_", "UC_", "RD_", "UD_", nullptr, "XRC_"};
  for (unsigned t = 0; t < 6; ++t)
    for (unsigned o = 0; o < 32; ++o)
      if (kPrefix[t] && kOps[o].name) put_name(n.buf[t * 32 + o], kPrefix[t], kOps[o].name);
  put_name(n.buf[kOpcodeCnp], "", "CNP");
  return n;
}();

constexpr std::array<OpcodeInfo, 256> build_table() {
  std::array<OpcodeInfo, 256> table{};
  for (unsigned code = 0; code < 256; ++code) {
    OpcodeInfo& e = table[code];
    const auto transport = static_cast<Transport>(code >> 5);
    const uint8_t operation = code & 0x1f;
    e.transport = transport;
    if (transport > Transport::xrc || transport == Transport::cnp) continue;  // the CNP is set below
    const OpDef& d = kOps[operation];
    if (d.name == nullptr) continue;  // unknown
    e.name = kNames.buf[code];
    e.kind = d.kind;
    e.position = d.position;
    e.headers = d.headers;
    e.payload = d.payload;
    e.requester = d.requester;
    e.responder = d.responder;
    switch (transport) {
      case Transport::rc:
        e.cls = OpcodeClass::valid;
        break;
      case Transport::uc:
        e.cls = uc_allows(operation) ? OpcodeClass::valid : OpcodeClass::invalid_for_transport;
        break;
      case Transport::rd:
        e.cls = OpcodeClass::unsupported_transport;
        break;
      case Transport::ud:
        e.cls = ud_allows(operation) ? OpcodeClass::valid : OpcodeClass::invalid_for_transport;
        e.headers = static_cast<uint16_t>(e.headers | kHdrDeth);
        break;
      case Transport::xrc:
        // Requests name the XRC SRQ in an XRCETH, first after the BTH; responses (ACK, READ
        // responses, atomic ACK) carry none (A14.4.1).
        e.cls = xrc_allows(operation) ? OpcodeClass::valid : OpcodeClass::invalid_for_transport;
        if (d.requester) e.headers = static_cast<uint16_t>(e.headers | kHdrXrceth);
        break;
      default:
        break;
    }
    e.ext_len = ext_len_of(e.headers);
  }
  OpcodeInfo& cnp = table[kOpcodeCnp];
  cnp.name = kNames.buf[kOpcodeCnp];
  cnp.cls = OpcodeClass::valid;
  cnp.transport = Transport::cnp;
  cnp.kind = OpKind::cnp;
  cnp.headers = kHdrCnp;
  cnp.ext_len = ext_len_of(kHdrCnp);
  return table;
}

}  // namespace

namespace detail {
constinit const std::array<OpcodeInfo, 256> kOpcodeTable = build_table();
}

const char* to_string(Transport t) {
  static constexpr const char* kNamesT[] = {"RC", "UC", "RD", "UD", "CNP", "XRC", "reserved6", "reserved7"};
  return kNamesT[static_cast<uint8_t>(t) & 7];
}

const char* to_string(OpKind k) {
  switch (k) {
    case OpKind::none: return "none";
    case OpKind::send: return "send";
    case OpKind::write: return "write";
    case OpKind::read_request: return "read_request";
    case OpKind::read_response: return "read_response";
    case OpKind::ack: return "ack";
    case OpKind::atomic_ack: return "atomic_ack";
    case OpKind::compare_swap: return "compare_swap";
    case OpKind::fetch_add: return "fetch_add";
    case OpKind::flush: return "flush";
    case OpKind::atomic_write: return "atomic_write";
    case OpKind::cnp: return "cnp";
  }
  return "?";
}

const char* to_string(Position p) {
  switch (p) {
    case Position::none: return "none";
    case Position::first: return "first";
    case Position::middle: return "middle";
    case Position::last: return "last";
    case Position::only: return "only";
  }
  return "?";
}

}  // namespace droce::rocev2
