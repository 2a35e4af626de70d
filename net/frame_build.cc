#include "net/frame_build.h"

#include <algorithm>

#include "core/endian.h"
#include "net/headers.h"

namespace droce::net {

uint64_t sum_be16(const uint8_t* p, size_t n, uint64_t acc) {
  size_t i = 0;
  for (; i + 1 < n; i += 2) acc += (uint32_t{p[i]} << 8) | p[i + 1];
  if (i < n) acc += uint32_t{p[i]} << 8;
  return acc;
}

uint16_t fold_sum(uint64_t acc) {
  while (acc >> 16) acc = (acc & 0xffff) + (acc >> 16);
  return static_cast<uint16_t>(acc);
}

uint16_t icmpv6_sum(const uint8_t* src, const uint8_t* dst, const uint8_t* msg, size_t len) {
  uint64_t acc = sum_be16(src, 16, 0);
  acc = sum_be16(dst, 16, acc);
  acc += (len >> 16) + (len & 0xffff);
  acc += kIpProtoIcmpv6;
  return fold_sum(sum_be16(msg, len, acc));
}

size_t start_frame(std::vector<uint8_t>& f, const MacAddr& dst, const MacAddr& src, bool tagged, uint16_t tci,
                   uint16_t ethertype, size_t payload) {
  const size_t hdr = kEthHdrLen + (tagged ? kVlanHdrLen : 0);
  f.assign(hdr + payload, 0);
  std::copy(dst.begin(), dst.end(), f.begin());
  std::copy(src.begin(), src.end(), f.begin() + 6);
  if (tagged) {
    core::store_be16(&f[12], kEtherTypeVlan);
    core::store_be16(&f[14], tci);
  }
  core::store_be16(&f[hdr - 2], ethertype);
  return hdr;
}

MacAddr multicast_mac(const IpAddr& group) {
  if (is_ipv4_mapped(group)) return {0x01, 0x00, 0x5e, static_cast<uint8_t>(group[13] & 0x7f), group[14], group[15]};
  return {0x33, 0x33, group[12], group[13], group[14], group[15]};
}

}  // namespace droce::net
