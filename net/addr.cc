#include "net/addr.h"

#include <arpa/inet.h>

namespace droce::net {

std::string format_ip(const IpAddr& a) {
  char buf[INET6_ADDRSTRLEN];
  if (is_ipv4_mapped(a)) {
    inet_ntop(AF_INET, a.data() + 12, buf, sizeof buf);
  } else {
    inet_ntop(AF_INET6, a.data(), buf, sizeof buf);
  }
  return buf;
}

bool parse_ip(const std::string& text, IpAddr* out) {
  uint8_t v4[4];
  if (inet_pton(AF_INET, text.c_str(), v4) == 1) {
    *out = ipv4_mapped((uint32_t{v4[0]} << 24) | (uint32_t{v4[1]} << 16) | (uint32_t{v4[2]} << 8) | v4[3]);
    return true;
  }
  return inet_pton(AF_INET6, text.c_str(), out->data()) == 1;
}

}  // namespace droce::net
