#pragma once
// Big-endian loads and stores for wire headers.
//
// Wire structs in droce are byte arrays or packed structs of big-endian
// fields; these helpers read and write them without alignment assumptions
// (memcpy compiles to a single load/store plus bswap on x86).

#include <cstdint>
#include <cstring>

namespace droce::core {

inline uint16_t load_be16(const void* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return __builtin_bswap16(v);
}

inline uint32_t load_be32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return __builtin_bswap32(v);
}

inline uint64_t load_be64(const void* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return __builtin_bswap64(v);
}

/// The low 24 bits of a 32-bit big-endian word whose top byte holds flags.
inline uint32_t load_be24(const void* p) {
  const auto* b = static_cast<const uint8_t*>(p);
  return (uint32_t{b[0]} << 16) | (uint32_t{b[1]} << 8) | b[2];
}

inline uint32_t load_le32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;  // x86-64 and aarch64 (the only targets DPDK 22.11 packages for) are little-endian
}

inline void store_be16(void* p, uint16_t v) {
  v = __builtin_bswap16(v);
  std::memcpy(p, &v, sizeof v);
}

inline void store_be32(void* p, uint32_t v) {
  v = __builtin_bswap32(v);
  std::memcpy(p, &v, sizeof v);
}

inline void store_be64(void* p, uint64_t v) {
  v = __builtin_bswap64(v);
  std::memcpy(p, &v, sizeof v);
}

inline void store_be24(void* p, uint32_t v) {
  auto* b = static_cast<uint8_t*>(p);
  b[0] = static_cast<uint8_t>(v >> 16);
  b[1] = static_cast<uint8_t>(v >> 8);
  b[2] = static_cast<uint8_t>(v);
}

inline void store_le32(void* p, uint32_t v) { std::memcpy(p, &v, sizeof v); }

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "load_le32/store_le32 assume a little-endian host");

}  // namespace droce::core
