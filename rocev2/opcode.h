#pragma once
// The BTH opcode table (IBA Vol. 1 9.2, table 38; Annex A17 for the CNP).
//
// For each of the 256 opcodes: whether droce accepts it, its transport and
// operation, which extension headers follow the BTH (in wire order), whether
// it carries payload, its position in a message, and which side sends it.
// The table is constexpr; opcode_info() is one indexed load.

#include <array>
#include <cstddef>
#include <cstdint>

namespace droce::rocev2 {

/// BTH opcode bits 7:5 (XRC: IBA Annex A14).
enum class Transport : uint8_t { rc = 0, uc = 1, rd = 2, ud = 3, cnp = 4, xrc = 5, reserved6, reserved7 };

/// How the table classifies an opcode.
enum class OpcodeClass : uint8_t {
  valid,                  ///< defined for its transport, and droce speaks it
  invalid_for_transport,  ///< an RC operation that this transport lacks (e.g. READ on UC)
  unsupported_transport,  ///< RD (reliable datagram): defined, not implemented by RoCE stacks
  unknown,                ///< not defined by the specification
};

enum class OpKind : uint8_t {
  none,
  send,
  write,
  read_request,
  read_response,
  ack,
  atomic_ack,
  compare_swap,
  fetch_add,
  flush,         ///< RDMA FLUSH (IBA 1.5, Annex A19)
  atomic_write,  ///< RDMA ATOMIC WRITE (IBA 1.5, Annex A19)
  cnp,
};

enum class Position : uint8_t { none, first, middle, last, only };

/// Extension headers, each one bit; they appear on the wire in this order (XRC's XRCETH comes
/// right after the BTH, A14.4.1; FLUSH's FETH before its RETH, A19.4.1; no two of XRCETH, FETH
/// and DETH meet).
enum HeaderBit : uint16_t {
  kHdrXrceth = 1u << 0,
  kHdrFeth = 1u << 1,
  kHdrDeth = 1u << 2,
  kHdrReth = 1u << 3,
  kHdrAtomicEth = 1u << 4,
  kHdrAeth = 1u << 5,
  kHdrAtomicAckEth = 1u << 6,
  kHdrImmDt = 1u << 7,
  kHdrIeth = 1u << 8,
  kHdrCnp = 1u << 9,
};

/// Operation codes (BTH opcode bits 4:0), IBA names.
namespace op {
inline constexpr uint8_t kSendFirst = 0x00;
inline constexpr uint8_t kSendMiddle = 0x01;
inline constexpr uint8_t kSendLast = 0x02;
inline constexpr uint8_t kSendLastImm = 0x03;
inline constexpr uint8_t kSendOnly = 0x04;
inline constexpr uint8_t kSendOnlyImm = 0x05;
inline constexpr uint8_t kWriteFirst = 0x06;
inline constexpr uint8_t kWriteMiddle = 0x07;
inline constexpr uint8_t kWriteLast = 0x08;
inline constexpr uint8_t kWriteLastImm = 0x09;
inline constexpr uint8_t kWriteOnly = 0x0a;
inline constexpr uint8_t kWriteOnlyImm = 0x0b;
inline constexpr uint8_t kReadRequest = 0x0c;
inline constexpr uint8_t kReadResponseFirst = 0x0d;
inline constexpr uint8_t kReadResponseMiddle = 0x0e;
inline constexpr uint8_t kReadResponseLast = 0x0f;
inline constexpr uint8_t kReadResponseOnly = 0x10;
inline constexpr uint8_t kAcknowledge = 0x11;
inline constexpr uint8_t kAtomicAcknowledge = 0x12;
inline constexpr uint8_t kCompareSwap = 0x13;
inline constexpr uint8_t kFetchAdd = 0x14;
inline constexpr uint8_t kSendLastInv = 0x16;
inline constexpr uint8_t kSendOnlyInv = 0x17;
inline constexpr uint8_t kFlush = 0x1c;        ///< IBA 1.5 (rxe's IB_OPCODE_FLUSH), RC only
inline constexpr uint8_t kAtomicWrite = 0x1d;  ///< IBA 1.5 (rxe's IB_OPCODE_ATOMIC_WRITE), RC only
}  // namespace op

/// The full 8-bit opcode of an operation on a transport.
constexpr uint8_t make_opcode(Transport t, uint8_t operation) {
  return static_cast<uint8_t>((static_cast<uint8_t>(t) << 5) | (operation & 0x1f));
}
inline constexpr uint8_t kOpcodeCnp = 0x81;

struct OpcodeInfo {
  const char* name = "UNKNOWN";  ///< rdma-core's IB_OPCODE_* name without the prefix
  OpcodeClass cls = OpcodeClass::unknown;
  Transport transport = Transport::rc;
  OpKind kind = OpKind::none;
  Position position = Position::none;
  uint16_t headers = 0;    ///< HeaderBit set
  uint8_t ext_len = 0;     ///< bytes of extension headers after the BTH
  bool payload = false;    ///< may carry payload
  bool requester = false;  ///< sent by a requester (a request packet)
  bool responder = false;  ///< sent by a responder (ACK, READ response, atomic ACK)

  bool valid() const { return cls == OpcodeClass::valid; }
  bool has(HeaderBit h) const { return (headers & h) != 0; }
  bool immediate() const { return has(kHdrImmDt); }
  bool invalidate() const { return has(kHdrIeth); }
  /// First or only packet of a message: starts one.
  bool starts_message() const { return position == Position::first || position == Position::only; }
  /// Last or only packet of a message: ends one.
  bool ends_message() const { return position == Position::last || position == Position::only; }
};

/// Byte length of each extension header.
constexpr uint8_t header_len(HeaderBit h) {
  switch (h) {
    case kHdrXrceth: return 4;
    case kHdrFeth: return 4;
    case kHdrDeth: return 8;
    case kHdrReth: return 16;
    case kHdrAtomicEth: return 28;
    case kHdrAeth: return 4;
    case kHdrAtomicAckEth: return 8;
    case kHdrImmDt: return 4;
    case kHdrIeth: return 4;
    case kHdrCnp: return 16;
  }
  return 0;
}

namespace detail {
extern const std::array<OpcodeInfo, 256> kOpcodeTable;
}

/// The table entry for an opcode. Every opcode has one (unknown ones too).
inline const OpcodeInfo& opcode_info(uint8_t opcode) { return detail::kOpcodeTable[opcode]; }

const char* to_string(Transport t);
const char* to_string(OpKind k);
const char* to_string(Position p);

}  // namespace droce::rocev2
