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
#include <span>

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

/// Writes a send WQE (inline bytes from `inline_data` when the WR is inline).
/// Returns the bytes written, or 0 when it does not fit `entry`.
size_t encode_send_wqe(const SendWr& wr, std::span<const uint8_t> inline_data, std::span<uint8_t> entry);
size_t encode_recv_wqe(const RecvWr& wr, std::span<uint8_t> entry);

void encode_cqe(const Completion& c, Cqe* out);
Completion decode_cqe(const Cqe& c);

}  // namespace droce::abi
