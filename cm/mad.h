#pragma once
// IB CM messages on the wire (IBTA Vol. 1 chapter 12, Annex A11 for the IP CM
// parts): the 256-byte MADs that connection management sends on QP1, as the
// Linux kernel's ib_cm and rdma_cm put them on RoCEv2. I/O-free: bytes in,
// fields out, and back. The state machines (issue #15) build on this.
//
// Every CM MAD is a 24-byte MAD header (base version 1, class 0x07, class
// version 2, method Send) and 232 bytes of message; fields are big-endian and
// bit positions follow the IBTA tables (bit 0 = the most significant bit of
// a byte). ../shared/notes/rdma-cm.md section 3 has the layouts and sources.
//
// decode() checks what a receiver must before acting on a MAD and names what
// was wrong (MadError) so droced can drop and count it; encode() writes all
// 256 bytes, reserved ones zero, so the same message always gives the same
// bytes.

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <variant>

#include "net/addr.h"

namespace droce::cm {

inline constexpr size_t kMadSize = 256;
inline constexpr size_t kMadHeaderSize = 24;
inline constexpr uint8_t kBaseVersion = 1;
inline constexpr uint8_t kClassCm = 0x07;
inline constexpr uint8_t kCmClassVersion = 2;
inline constexpr uint8_t kMethodSend = 0x03;
/// QP1's Q_Key, which CM MADs carry in their DETH.
inline constexpr uint32_t kGsiQkey = 0x80010000;
inline constexpr uint32_t kGsiQpn = 1;

using Mad = std::array<uint8_t, kMadSize>;

enum class AttrId : uint16_t {
  req = 0x0010,
  mra = 0x0011,
  rej = 0x0012,
  rep = 0x0013,
  rtu = 0x0014,
  dreq = 0x0015,
  drep = 0x0016,
  sidr_req = 0x0017,
  sidr_rep = 0x0018,
  lap = 0x0019,
  apr = 0x001A,
};

/// The private data each message carries (its fixed size: IB CM has no length field).
inline constexpr size_t kReqPrivate = 92;
inline constexpr size_t kMraPrivate = 222;
inline constexpr size_t kRejPrivate = 148;
inline constexpr size_t kRejAriMax = 72;
inline constexpr size_t kRepPrivate = 196;
inline constexpr size_t kRtuPrivate = 224;
inline constexpr size_t kDreqPrivate = 220;
inline constexpr size_t kDrepPrivate = 224;
inline constexpr size_t kSidrReqPrivate = 216;
inline constexpr size_t kSidrRepPrivate = 136;
inline constexpr size_t kSidrRepInfoMax = 72;

/// IBTA table 107: transport service types in a REQ.
enum class TransportType : uint8_t { rc = 0, uc = 1, rd = 2, xrc = 3 };

/// REJ reasons (IBTA table 112), those droce sends or must understand.
enum class RejReason : uint16_t {
  no_qp = 1,
  no_eec = 2,
  no_resources = 3,
  timeout = 4,
  unsupported = 5,
  invalid_comm_id = 6,
  invalid_comm_instance = 7,
  invalid_service_id = 8,
  invalid_transport_type = 9,
  stale_conn = 10,
  rdc_not_exist = 11,
  invalid_gid = 12,
  invalid_lid = 13,
  invalid_sl = 14,
  invalid_traffic_class = 15,
  invalid_hop_limit = 16,
  invalid_packet_rate = 17,
  invalid_mtu = 26,
  insufficient_resp_resources = 27,
  consumer_defined = 28,
  invalid_rnr_retry = 29,
  duplicate_local_comm_id = 30,
  invalid_class_version = 31,
  invalid_flow_label = 32,
  vendor_option_not_supported = 35,
};

/// What the REJ, MRA refer to (IBTA tables 110, 111).
enum class MsgRef : uint8_t { req = 0, rep = 1, other = 2 };

/// SIDR_REP status (IBTA table 119).
enum class SidrStatus : uint8_t {
  success = 0,
  unsupported = 1,  ///< no one listens on the service ID
  reject = 2,
  no_qp = 3,
  redirect = 4,
  unsupported_version = 5,
};

struct MadHeader {
  uint8_t base_version = kBaseVersion;
  uint8_t mgmt_class = kClassCm;
  uint8_t class_version = kCmClassVersion;
  uint8_t method = kMethodSend;
  uint16_t status = 0;
  uint16_t class_specific = 0;
  uint64_t tid = 0;  ///< transaction ID: an answer carries its request's
  AttrId attr_id = AttrId::req;
  uint32_t attr_mod = 0;  ///< ECE options in REQ/REP since Linux 5.9; else 0
  friend bool operator==(const MadHeader&, const MadHeader&) = default;
};

/// One path of a REQ (primary or alternate).
struct ReqPath {
  uint16_t local_lid = 0xFFFF;   ///< permissive on RoCE: no LIDs
  uint16_t remote_lid = 0xFFFF;
  net::IpAddr local_gid{};       ///< IPv4 as ::ffff:a.b.c.d
  net::IpAddr remote_gid{};
  uint32_t flow_label = 0;       ///< 20 bits
  uint8_t packet_rate = 0;       ///< 6 bits
  uint8_t traffic_class = 0;
  uint8_t hop_limit = 0;
  uint8_t sl = 0;                ///< 4 bits
  bool subnet_local = false;
  uint8_t local_ack_timeout = 0; ///< 5 bits
  friend bool operator==(const ReqPath&, const ReqPath&) = default;
};

struct Req {
  uint32_t local_comm_id = 0;
  uint32_t vendor_id = 0;        ///< 24 bits (ECE)
  uint64_t service_id = 0;
  uint64_t local_ca_guid = 0;
  uint32_t local_qkey = 0;
  uint32_t local_qpn = 0;        ///< 24 bits
  uint8_t responder_resources = 0;
  uint32_t local_eecn = 0;       ///< 24 bits
  uint8_t initiator_depth = 0;
  uint32_t remote_eecn = 0;      ///< 24 bits
  uint8_t remote_cm_response_timeout = 0;  ///< 5 bits
  TransportType transport = TransportType::rc;  ///< 2 bits
  bool end_to_end_flow_control = false;
  uint32_t starting_psn = 0;     ///< 24 bits
  uint8_t local_cm_response_timeout = 0;   ///< 5 bits
  uint8_t retry_count = 0;       ///< 3 bits
  uint16_t pkey = 0xFFFF;
  uint8_t path_mtu = 0;          ///< 4 bits, IB enum (1 = 256 ... 5 = 4096)
  bool rdc_exists = false;
  uint8_t rnr_retry_count = 0;   ///< 3 bits
  uint8_t max_cm_retries = 0;    ///< 4 bits
  bool srq = false;
  uint8_t extended_transport = 0;  ///< 3 bits
  ReqPath primary;
  ReqPath alternate{0, 0};       ///< all zero from rdma_cm on RoCE
  bool sap_supported = false;
  std::array<uint8_t, kReqPrivate> private_data{};
  friend bool operator==(const Req&, const Req&) = default;
};

struct Mra {
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  MsgRef message_mraed = MsgRef::req;  ///< 2 bits
  uint8_t service_timeout = 0;         ///< 5 bits
  std::array<uint8_t, kMraPrivate> private_data{};
  friend bool operator==(const Mra&, const Mra&) = default;
};

struct Rej {
  uint32_t local_comm_id = 0;    ///< 0 when rejecting a REQ before any MRA
  uint32_t remote_comm_id = 0;
  MsgRef message_rejected = MsgRef::req;  ///< 2 bits
  uint8_t ari_length = 0;        ///< 7 bits, at most kRejAriMax
  uint16_t reason = 0;           ///< RejReason, or another value a peer sent
  std::array<uint8_t, kRejAriMax> ari{};
  std::array<uint8_t, kRejPrivate> private_data{};
  friend bool operator==(const Rej&, const Rej&) = default;
};

struct Rep {
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  uint32_t local_qkey = 0;
  uint32_t local_qpn = 0;        ///< 24 bits
  uint32_t vendor_id = 0;        ///< 24 bits (ECE), split over three bytes on the wire
  uint32_t local_eecn = 0;       ///< 24 bits
  uint32_t starting_psn = 0;     ///< 24 bits
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t target_ack_delay = 0;  ///< 5 bits
  uint8_t failover_accepted = 0; ///< 2 bits
  bool end_to_end_flow_control = false;
  uint8_t rnr_retry_count = 0;   ///< 3 bits
  bool srq = false;
  uint64_t local_ca_guid = 0;
  std::array<uint8_t, kRepPrivate> private_data{};
  friend bool operator==(const Rep&, const Rep&) = default;
};

struct Rtu {
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  std::array<uint8_t, kRtuPrivate> private_data{};
  friend bool operator==(const Rtu&, const Rtu&) = default;
};

struct Dreq {
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  uint32_t remote_qpn = 0;       ///< 24 bits (QPN or EECN)
  std::array<uint8_t, kDreqPrivate> private_data{};
  friend bool operator==(const Dreq&, const Dreq&) = default;
};

struct Drep {
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  std::array<uint8_t, kDrepPrivate> private_data{};
  friend bool operator==(const Drep&, const Drep&) = default;
};

struct SidrReq {
  uint32_t request_id = 0;
  uint16_t pkey = 0xFFFF;
  uint64_t service_id = 0;
  std::array<uint8_t, kSidrReqPrivate> private_data{};
  friend bool operator==(const SidrReq&, const SidrReq&) = default;
};

struct SidrRep {
  uint32_t request_id = 0;
  uint8_t status = 0;            ///< SidrStatus, or another value a peer sent
  uint8_t info_length = 0;       ///< at most kSidrRepInfoMax
  uint32_t qpn = 0;              ///< 24 bits
  uint64_t service_id = 0;
  uint32_t qkey = 0;
  std::array<uint8_t, kSidrRepInfoMax> info{};
  std::array<uint8_t, kSidrRepPrivate> private_data{};
  friend bool operator==(const SidrRep&, const SidrRep&) = default;
};

using Message = std::variant<Req, Mra, Rej, Rep, Rtu, Dreq, Drep, SidrReq, SidrRep>;

/// Why a MAD was refused. A receiver drops such a MAD and counts it by reason.
enum class MadError {
  ok,
  short_mad,         ///< fewer than 256 bytes
  bad_base_version,  ///< not 1
  not_cm,            ///< management class is not CM (0x07)
  bad_class_version, ///< not 2 (the kernel answers 1 with REJ 31; droce only counts it)
  bad_method,        ///< not Send
  unknown_attribute, ///< LAP and APR (ignored on RoCE, as the kernel does) or no CM attribute
  bad_field,         ///< a length or enumerated field out of its range
};
const char* to_string(MadError e);

/// The MAD header alone (valid or not), for counting and tracing.
MadHeader decode_header(std::span<const uint8_t> mad);

/// Decodes a CM MAD. On success *out holds the message and *hdr the header.
MadError decode(std::span<const uint8_t> mad, MadHeader* hdr, Message* out);

/// Writes the 256 bytes of `msg` with header `hdr` (its attr_id is taken
/// from the message). Fields wider than their wire width are truncated to it.
void encode(const MadHeader& hdr, const Message& msg, Mad* out);

AttrId attr_of(const Message& msg);
const char* attr_name(uint16_t attr_id);  ///< "ConnectRequest", ... ("unknown")

/// One line naming a MAD and what identifies it, for `droce decode`: "ConnectRequest
/// tid=0x... local_comm_id=0x... service_id=0x... (TCP port 7174) qpn=0x11 psn=0x...", or why
/// it is refused ("malformed CM MAD: bad_field ...").
std::string describe_mad(std::span<const uint8_t> mad);

// ---- IP CM (IBTA Annex A11, what rdma_cm puts in the service ID and private data) ----

/// rdma_cm port spaces: the protocol byte of an IP CM service ID.
enum class PortSpace : uint8_t { tcp = 0x06, udp = 0x11, ib = 0x3F, ipoib = 0x02 };

/// 0x0000000001 | ps | port.
constexpr uint64_t ip_service_id(PortSpace ps, uint16_t port) {
  return 0x0000000001000000ULL | (uint64_t(ps) << 16) | port;
}
/// Whether `sid` is an IP CM service ID; its port space and port if so.
bool parse_ip_service_id(uint64_t sid, PortSpace* ps, uint16_t* port);

inline constexpr size_t kIpCmHeaderSize = 36;

/// The header rdma_cm puts first in a REQ's or SIDR_REQ's private data.
struct IpCmHeader {
  uint8_t cma_version = 0;       ///< 0
  uint8_t ip_version = 4;        ///< 4 or 6 (the high nibble of byte 1)
  uint16_t src_port = 0;         ///< the active side's port
  net::IpAddr src{};             ///< IPv4 as ::ffff:a.b.c.d here (12 zero bytes on the wire)
  net::IpAddr dst{};
  friend bool operator==(const IpCmHeader&, const IpCmHeader&) = default;
};

/// Writes the 36 bytes at the start of `out` (at least kIpCmHeaderSize long).
void encode_ip_cm_header(const IpCmHeader& h, std::span<uint8_t> out);
/// Reads them; false when the version is not 0, the IP version neither 4 nor
/// 6, or `in` is shorter than the header.
bool decode_ip_cm_header(std::span<const uint8_t> in, IpCmHeader* out);

/// 4.096 us x 2^t, in milliseconds as the kernel rounds it (1 << max(t - 8, 0)).
constexpr uint64_t cm_timeout_ms(uint8_t t) { return uint64_t{1} << (t > 8 ? t - 8 : 0); }

}  // namespace droce::cm
