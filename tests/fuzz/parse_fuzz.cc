// libFuzzer target for the RoCEv2 parser.
//
// Beyond "no crash, no sanitizer report", every frame the parser accepts must
// rebuild from its parsed fields to the identical bytes (up to the end of the
// IP packet): the parser may not accept what it cannot account for. The one
// exception is pad bytes: a sender may fill them with anything (receivers
// ignore them), droce's builder writes zeros, so when the input's pad is not
// zero the rebuilt pad is zero and its ICRC differs accordingly.

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "rocev2/builder.h"
#include "rocev2/format.h"
#include "rocev2/parser.h"

using namespace droce::rocev2;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> frame(data, size);
  ParsedPacket p;
  const ParseStatus status = parse_frame(frame, &p);
  (void)format_text(p, status, status == ParseStatus::ok);
  (void)format_json(1, p, status, status == ParseStatus::ok);
  if (status != ParseStatus::ok) return 0;

  const size_t end = p.layout.icrc_off + kIcrcLen;
  if (end > size || p.layout.payload_off + p.layout.payload_len > end) abort();
  std::vector<uint8_t> rebuilt(end + 64);
  const size_t len =
      build_frame(p.hdr, frame.subspan(p.layout.payload_off, p.layout.payload_len), rebuilt);
  if (len != end) abort();
  const size_t pad_off = p.layout.payload_off + p.layout.payload_len;
  bool pad_zero = true;
  for (size_t i = pad_off; i < p.layout.icrc_off; ++i) pad_zero = pad_zero && data[i] == 0;
  const size_t same_until = pad_zero ? end : pad_off;
  if (std::memcmp(rebuilt.data(), data, same_until) != 0) abort();
  for (size_t i = pad_off; i < p.layout.icrc_off; ++i)
    if (rebuilt[i] != 0) abort();
  ParsedPacket again;
  if (parse_frame(std::span<const uint8_t>(rebuilt.data(), len), &again) != ParseStatus::ok) abort();
  if (!(again.hdr == p.hdr)) abort();
  return 0;
}
