#include "rocev2/icrc.h"

#include <isa-l/crc.h>

#include "core/endian.h"
#include "net/headers.h"
#include "rocev2/headers.h"

namespace droce::rocev2 {

namespace {

// crc32 of eight 0xFF bytes: the masked LRH that RoCEv2 replaces (IBA 7.8.1).
constexpr uint32_t kLrhSeed = 0x2144df1c;

constexpr size_t kMaskedMax = net::kIpv6HdrLen + net::kUdpHdrLen + sizeof(BthWire);

// Packets this short (ACKs, atomics, READ requests, small SENDs) are copied
// whole into the scratch buffer and take one CRC call: ISA-L's path for the
// few bytes left after the masked headers costs more than the copy.
constexpr size_t kOneCallMax = 192;
// The masked headers of a longer packet go through the same scratch buffer.
static_assert(kMaskedMax <= kOneCallMax);

}  // namespace

uint32_t crc32(uint32_t crc, const void* data, size_t len) {
  return crc32_gzip_refl(crc, static_cast<const unsigned char*>(data), len);
}

uint32_t compute_icrc(const net::FrameBytes& frame, size_t l3_off, size_t icrc_off,
                      uint8_t ip_version, bool* ok) {
  const size_t ip_len = ip_version == 6 ? net::kIpv6HdrLen : net::kIpv4HdrLen;
  const size_t masked_len = ip_len + net::kUdpHdrLen + sizeof(BthWire);
  if (icrc_off < l3_off + masked_len || icrc_off > frame.size()) {
    if (ok) *ok = false;
    return 0;
  }
  const size_t total = icrc_off - l3_off;
  const size_t copied = total <= kOneCallMax ? total : masked_len;
  uint8_t scratch[kOneCallMax];
  const uint8_t* src = frame.read(l3_off, copied, scratch);
  if (src == nullptr) {
    if (ok) *ok = false;
    return 0;
  }
  uint8_t h[kOneCallMax];
  std::memcpy(h, src, copied);
  if (ip_version == 6) {
    h[0] |= 0x0f;  // traffic class (high nibble) ...
    h[1] = h[2] = h[3] = 0xff;  // ... rest of traffic class and the flow label
    h[7] = 0xff;   // hop limit
  } else {
    h[1] = 0xff;   // TOS
    h[8] = 0xff;   // TTL
    h[10] = h[11] = 0xff;  // header checksum
  }
  h[ip_len + 6] = h[ip_len + 7] = 0xff;                 // UDP checksum
  h[ip_len + net::kUdpHdrLen + 4] = 0xff;               // BTH: FECN, BECN, resv6
  uint32_t crc = crc32(kLrhSeed, h, copied);
  frame.for_each_piece(l3_off + copied, total - copied, [&](const uint8_t* p, size_t n) { crc = crc32(crc, p, n); });
  if (ok) *ok = true;
  return crc;
}

bool refresh_icrc(std::span<uint8_t> frame, size_t l3_off, size_t icrc_off, uint8_t ip_version) {
  if (icrc_off + kIcrcLen > frame.size()) return false;
  bool ok = false;
  uint32_t icrc = compute_icrc(net::FrameBytes(frame), l3_off, icrc_off, ip_version, &ok);
  if (!ok) return false;
  core::store_le32(frame.data() + icrc_off, icrc);
  return true;
}

}  // namespace droce::rocev2
