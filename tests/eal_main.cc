// main() for test binaries that need DPDK: EAL starts once per process
// (rte_eal_init cannot run twice), before any test.

#include <rte_eal.h>

#include "net/eal.h"
#include "tests/test_support.h"

namespace droce::test {

void require_eal() {
  static const int rc = [] {
    net::EalOptions opts;
    opts.program = "droce-test";
    opts.memory_mb = 512;
    opts.extra = {"--log-level=lib.eal:error"};
    return net::eal_start(opts);
  }();
  ASSERT_EQ(rc, 0) << "EAL did not start";
}

}  // namespace droce::test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  droce::test::require_eal();
  const int rc = RUN_ALL_TESTS();
  droce::net::eal_stop();
  return rc;
}
