#pragma once
// Between the shared queues' entries (abi/queues.h) and the work requests
// and completions of the verbs vocabulary (abi/verbs.h). The decoders are
// droced's side: they read a private copy of an entry that an untrusted
// client wrote, check every field against the QP's own limits, and never
// read past the entry. The encoders are the provider's side (and the
// tests').
//
// Hot path: allocation-free, no syscalls.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>

#include "abi/queues.h"
#include "abi/verbs.h"

namespace droce::abi {

/// What a QP allows, as droced granted it at create time (never read from
/// shared memory).
struct WqeLimits {
  uint32_t max_sge = 0;
  uint32_t max_inline = 0;
};

/// Why an entry was refused (each a counted reason; the client is at fault).
enum class WqeError : uint8_t { ok, short_entry, bad_opcode, too_many_sge, inline_too_long, bad_flags };
const char* to_string(WqeError e);

/// A scatter list as the send encoder reads it: size() entries laid out as
/// WqeSge, which is the layout of Sge and of libibverbs' ibv_sge too (the
/// constructor checks it), so a list of any of them is read where it lies,
/// an entry at a time by copy, without being converted first.
class SgeList {
 public:
  SgeList() = default;
  template <class T>
  SgeList(const T* list, uint32_t count) : list_(list), count_(count) {
    static_assert(std::is_standard_layout_v<T> && sizeof(T) == sizeof(WqeSge));
    static_assert(offsetof(T, addr) == offsetof(WqeSge, addr) && sizeof(T::addr) == sizeof(WqeSge::addr));
    static_assert(offsetof(T, length) == offsetof(WqeSge, length) && sizeof(T::length) == sizeof(WqeSge::length));
    static_assert(offsetof(T, lkey) == offsetof(WqeSge, lkey) && sizeof(T::lkey) == sizeof(WqeSge::lkey));
  }
  uint32_t size() const { return count_; }
  WqeSge operator[](uint32_t i) const {
    WqeSge s;
    std::memcpy(&s, static_cast<const std::byte*>(list_) + size_t{i} * sizeof s, sizeof s);
    return s;
  }
  /// The entries' bytes: size() * sizeof(WqeSge) of them.
  const void* data() const { return list_; }

 private:
  const void* list_ = nullptr;
  uint32_t count_ = 0;
};

/// Decodes a send WQE. Inline data, when present, is left in the entry:
/// *out's single SGE then points at it (addr = its address in `entry`), which
/// Engine::post_send copies at once. So `entry` must stay alive until then.
WqeError decode_send_wqe(std::span<const uint8_t> entry, const WqeLimits& lim, SendWr* out);
/// Decodes a receive WQE.
WqeError decode_recv_wqe(std::span<const uint8_t> entry, const WqeLimits& lim, RecvWr* out);

/// The bytes at the start of an entry that a WQE uses, read from its header
/// (`header` holds at least the header: a private copy): the header and its
/// scatter list or inline bytes. droced copies those out of the ring, not
/// the whole entry (an entry made for 220 inline bytes is 320 bytes long; a
/// 64-byte message uses 128 of them). A header that claims more than the
/// entry holds gets the whole entry, and the decoder refuses it.
uint32_t send_wqe_used(std::span<const uint8_t> header);
uint32_t recv_wqe_used(std::span<const uint8_t> header);

/// A send WQE's header for `wr` (num_sge and inline_len are the encoder's).
SendWqeHeader send_wqe_header(const SendWr& wr);
/// The fields of the work request a header describes, as decode_send_wqe
/// reads them (the scatter list and num_sge are left alone).
void send_wr_fields(const SendWqeHeader& h, SendWr* out);

/// Writes a send WQE straight into `entry` (a ring slot): the header `h`,
/// whose num_sge and inline_len are set here, then the scatter list `sges`;
/// or, with kSendInline in h.send_flags, the bytes the list points at,
/// gathered from this process's memory. Returns the bytes written, or 0 when
/// they do not fit `entry` or the list has more than kMaxSge entries; nothing
/// is written then.
size_t encode_send_wqe(SendWqeHeader h, SgeList sges, std::span<uint8_t> entry);
/// The same for a SendWr, with the inline bytes given in `inline_data` when
/// the WR is inline (its scatter list is not read then).
size_t encode_send_wqe(const SendWr& wr, std::span<const uint8_t> inline_data, std::span<uint8_t> entry);
size_t encode_recv_wqe(const RecvWr& wr, std::span<uint8_t> entry);

void encode_cqe(const Completion& c, Cqe* out);
Completion decode_cqe(const Cqe& c);

}  // namespace droce::abi
