#include "net/pcapng.h"

#include "core/endian.h"

namespace droce::net::pcapng {
namespace {

constexpr uint16_t kOptEnd = 0;
constexpr uint16_t kIfName = 2;
constexpr uint16_t kIfTsresol = 9;
constexpr uint16_t kEpbFlags = 2;
constexpr uint16_t kIsbIfrecv = 4;
constexpr uint16_t kIsbIfdrop = 5;

size_t pad4(size_t n) { return (n + 3) & ~size_t{3}; }

void put16(std::vector<uint8_t>* out, uint16_t v) {
  out->push_back(uint8_t(v));
  out->push_back(uint8_t(v >> 8));
}
void put32(std::vector<uint8_t>* out, uint32_t v) {
  put16(out, uint16_t(v));
  put16(out, uint16_t(v >> 16));
}
void put_bytes(std::vector<uint8_t>* out, std::span<const uint8_t> b) {
  out->insert(out->end(), b.begin(), b.end());
  out->resize(out->size() + pad4(b.size()) - b.size(), 0);
}
void put_option(std::vector<uint8_t>* out, uint16_t code, std::span<const uint8_t> value) {
  put16(out, code);
  put16(out, uint16_t(value.size()));
  put_bytes(out, value);
}
void put_u64_option(std::vector<uint8_t>* out, uint16_t code, uint64_t v) {
  uint8_t b[8];
  core::store_le32(b, uint32_t(v));
  core::store_le32(b + 4, uint32_t(v >> 32));
  put_option(out, code, b);
}

// Opens a block (type, a length patched by close_block); returns where it starts.
size_t open_block(std::vector<uint8_t>* out, uint32_t type) {
  const size_t at = out->size();
  put32(out, type);
  put32(out, 0);
  return at;
}
// The length goes at both ends, so readers can walk the stream backwards too.
void close_block(std::vector<uint8_t>* out, size_t at) {
  const uint32_t len = uint32_t(out->size() - at + 4);
  put32(out, len);
  core::store_le32(out->data() + at + 4, len);
}

// Timestamps are two 32-bit halves, high first, in if_tsresol units (ns here).
void put_time(std::vector<uint8_t>* out, uint64_t time_ns) {
  put32(out, uint32_t(time_ns >> 32));
  put32(out, uint32_t(time_ns));
}

}  // namespace

void append_section_header(std::vector<uint8_t>* out) {
  const size_t at = open_block(out, kSectionHeaderType);
  put32(out, 0x1A2B3C4D);  // byte-order magic
  put16(out, 1);           // version 1.0
  put16(out, 0);
  put32(out, 0xFFFFFFFF);  // section length: not known (-1)
  put32(out, 0xFFFFFFFF);
  close_block(out, at);
}

void append_interface(std::vector<uint8_t>* out, uint32_t snaplen, std::string_view name) {
  const size_t at = open_block(out, kInterfaceType);
  put16(out, kLinkTypeEthernet);
  put16(out, 0);
  put32(out, snaplen);
  if (!name.empty())
    put_option(out, kIfName, std::span(reinterpret_cast<const uint8_t*>(name.data()), name.size()));
  const uint8_t ns = 9;  // 10^-9 s
  put_option(out, kIfTsresol, std::span(&ns, 1));
  put_option(out, kOptEnd, {});
  close_block(out, at);
}

void append_packet(std::vector<uint8_t>* out, uint64_t time_ns, uint32_t wire_len, std::span<const uint8_t> bytes,
                   Direction dir) {
  const size_t at = open_block(out, kEnhancedPacketType);
  put32(out, 0);  // interface 0
  put_time(out, time_ns);
  put32(out, uint32_t(bytes.size()));
  put32(out, wire_len);
  put_bytes(out, bytes);
  if (dir != Direction::unknown) {
    uint8_t flags[4];
    core::store_le32(flags, uint32_t(dir));
    put_option(out, kEpbFlags, flags);
    put_option(out, kOptEnd, {});
  }
  close_block(out, at);
}

void append_interface_stats(std::vector<uint8_t>* out, uint64_t time_ns, uint64_t received, uint64_t dropped) {
  const size_t at = open_block(out, kInterfaceStatsType);
  put32(out, 0);
  put_time(out, time_ns);
  put_u64_option(out, kIsbIfrecv, received);
  put_u64_option(out, kIsbIfdrop, dropped);
  put_option(out, kOptEnd, {});
  close_block(out, at);
}

}  // namespace droce::net::pcapng
