#pragma once
// The control protocol between clients (droce's rdma-core provider, the
// droce CLI) and droced: versioned, size-prefixed messages over a
// SOCK_SEQPACKET socket (core/unix_socket.h), descriptors beside them.
//
// Evolution is append-only. Every message starts with a CtlHeader whose
// `length` covers the whole message; a body struct may only ever grow at its
// end. A receiver decodes min(length, sizeof body) bytes and zero-fills the
// rest, so a newer daemon serves an older client (missing fields read as 0)
// and an older daemon ignores fields it does not know. A message shorter than
// its type's first version is malformed. A different major version is
// refused with a clear error (kAbiMajor); minors interoperate.
//
// Every struct is packed into fixed-width fields with static_asserts on its
// size and offsets: it crosses process (and possibly compiler) boundaries.
//
// Control path only.

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

namespace droce::core::ctl {

inline constexpr uint32_t kMagic = 0x45435244;  // "DRCE" little-endian
inline constexpr uint16_t kAbiMajor = 1;
inline constexpr uint16_t kAbiMinor = 0;
/// Largest message either side sends or accepts.
inline constexpr size_t kMaxMessage = 4096;

enum class MsgType : uint16_t {
  hello = 1,
  query_device = 2,
  query_port = 3,
  alloc_pd = 4,
  dealloc_pd = 5,
  reg_mr = 6,
  dereg_mr = 7,
  create_cq = 8,
  destroy_cq = 9,
  create_srq = 10,
  modify_srq = 11,
  destroy_srq = 12,
  create_qp = 13,
  modify_qp = 14,
  query_qp = 15,
  destroy_qp = 16,
  create_ah = 17,
  destroy_ah = 18,
};

enum CtlFlags : uint16_t {
  kFlagReply = 1u << 0,
};

struct CtlHeader {
  uint32_t magic;
  uint16_t abi_major;
  uint16_t abi_minor;
  uint16_t type;    ///< MsgType
  uint16_t flags;   ///< CtlFlags
  uint32_t length;  ///< whole message, this header included
  uint32_t seq;     ///< the request's number; a reply echoes it
  int32_t status;   ///< replies: 0 or -errno
};
static_assert(sizeof(CtlHeader) == 24);
static_assert(offsetof(CtlHeader, type) == 8 && offsetof(CtlHeader, length) == 12);
static_assert(offsetof(CtlHeader, seq) == 16 && offsetof(CtlHeader, status) == 20);

/// Why a message was refused before its body was read.
enum class HeaderCheck : uint8_t { ok, too_short, bad_magic, major_mismatch, bad_length, unknown_type };
const char* to_string(HeaderCheck c);

/// Checks the header of `msg` as received (its real size). `*hdr` gets a copy.
HeaderCheck check_header(std::span<const uint8_t> msg, CtlHeader* hdr);

// ---- Bodies (version 1.0). Append only; never reorder or resize a field. ----

struct HelloRequest {
  uint32_t pid;
  uint32_t flags;
  char program[32];  ///< the client's comm name, for `droce clients`
};
static_assert(sizeof(HelloRequest) == 40);

struct HelloReply {
  uint64_t node_guid;
  uint32_t context_id;
  uint32_t phys_port_cnt;
  char device_name[64];  ///< "droce0"
  char daemon_version[32];
};
static_assert(sizeof(HelloReply) == 112);

struct IdRequest {  ///< dealloc_pd, dereg_mr (lkey), destroy_* (id), query_port (port), query_qp (qpn)
  uint32_t id;
  uint32_t reserved;
};
static_assert(sizeof(IdRequest) == 8);

struct IdReply {  ///< alloc_pd (pd), create_ah (ah)
  uint32_t id;
  uint32_t reserved;
};
static_assert(sizeof(IdReply) == 8);

struct RegMrRequest {  ///< the memfd comes beside it
  uint32_t pd;
  uint32_t access;
  uint64_t va;
  uint64_t length;
  uint64_t fd_offset;  ///< where va sits in the memfd
};
static_assert(sizeof(RegMrRequest) == 32);
static_assert(offsetof(RegMrRequest, va) == 8 && offsetof(RegMrRequest, fd_offset) == 24);

struct RegMrReply {
  uint32_t lkey;
  uint32_t rkey;
};
static_assert(sizeof(RegMrReply) == 8);

// ---- Encoding and decoding --------------------------------------------------

/// A whole message: header then body, ready to send.
template <class Body>
std::vector<uint8_t> encode(MsgType type, uint32_t seq, const Body& body, bool reply = false, int32_t status = 0) {
  static_assert(std::is_trivially_copyable_v<Body>);
  std::vector<uint8_t> out(sizeof(CtlHeader) + sizeof(Body));
  CtlHeader h{kMagic, kAbiMajor, kAbiMinor, static_cast<uint16_t>(type),
              static_cast<uint16_t>(reply ? kFlagReply : 0), static_cast<uint32_t>(out.size()), seq, status};
  std::memcpy(out.data(), &h, sizeof h);
  std::memcpy(out.data() + sizeof h, &body, sizeof body);
  return out;
}

/// A message without a body (requests such as alloc_pd, replies with only a status).
std::vector<uint8_t> encode_empty(MsgType type, uint32_t seq, bool reply = false, int32_t status = 0);

/// The body of a checked message: min(present, sizeof Body) bytes, the rest
/// zero (a field an older peer did not send). -EBADMSG when shorter than
/// `min_size` (the body's first version).
template <class Body>
int decode_body(std::span<const uint8_t> msg, Body* out, size_t min_size = sizeof(Body)) {
  static_assert(std::is_trivially_copyable_v<Body>);
  if (msg.size() < sizeof(CtlHeader)) return -EBADMSG;
  const size_t present = msg.size() - sizeof(CtlHeader);
  if (present < min_size) return -EBADMSG;
  std::memset(out, 0, sizeof *out);
  std::memcpy(out, msg.data() + sizeof(CtlHeader), present < sizeof *out ? present : sizeof *out);
  return 0;
}

}  // namespace droce::core::ctl
