#include "net/rx_timestamp.h"

#include <rte_errno.h>

namespace droce::net {

int RxTimestamp::setup() {
  int offset = -1;
  uint64_t flag = 0;
  if (rte_mbuf_dyn_rx_timestamp_register(&offset, &flag) != 0) return -(rte_errno != 0 ? rte_errno : ENOSPC);
  offset_ = offset;
  flag_ = flag;
  return 0;
}

}  // namespace droce::net
