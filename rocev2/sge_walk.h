#pragma once
// The pieces of a scatter/gather list that [offset, offset + len) of a message covers: one walk
// for the copies into a list (Engine::scatter), out of one (Engine::gather) and the on-demand
// paging check before them (Engine::odp_sges_ready).

#include <algorithm>
#include <cstdint>

#include "rocev2/verbs.h"

namespace droce::rocev2 {

/// Calls fn(sge, addr, n, last) for each entry's part of [offset, offset + len), in order (addr:
/// the part's address, n its bytes, last: no part follows), until fn returns false. Returns the
/// bytes not visited: 0 when the list held them all and fn never stopped.
template <class Fn>
inline uint32_t for_each_sge_piece(const Sge* sges, uint32_t num_sge, uint32_t offset, uint32_t len, Fn&& fn) {
  uint32_t skip = offset;
  for (uint32_t i = 0; i < num_sge && len > 0; ++i) {
    const Sge& sge = sges[i];
    if (skip >= sge.length) {
      skip -= sge.length;
      continue;
    }
    const uint32_t n = std::min(sge.length - skip, len);
    if (!fn(sge, sge.addr + skip, n, n == len)) return len;
    len -= n;
    skip = 0;
  }
  return len;
}

}  // namespace droce::rocev2
