// ibv_probe: what a verbs program sees of the droce device through the distro's libibverbs.
// Prints one line per device ("device NAME guid HEX node_type N transport N uverbs NAME"),
// then opens the device named on the command line and prints "open NAME: ok" or
// "open NAME: errno N (TEXT)". Exit 0 when the device was listed (whatever open did), 1 when
// it was not, 2 when the list could not be read.
#include <endian.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  const char* want = argc > 1 ? argv[1] : "droce0";
  int n = 0;
  errno = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) {
    std::printf("list: errno %d (%s)\n", errno, std::strerror(errno));
    return 2;
  }
  ibv_device* found = nullptr;
  for (int i = 0; i < n; ++i) {
    std::printf("device %s guid %016" PRIx64 " node_type %d transport %d uverbs %s\n",
                ibv_get_device_name(list[i]), be64toh(ibv_get_device_guid(list[i])),
                static_cast<int>(list[i]->node_type), static_cast<int>(list[i]->transport_type),
                list[i]->dev_name);
    if (std::strcmp(ibv_get_device_name(list[i]), want) == 0) found = list[i];
  }
  int rc = 1;
  if (found != nullptr) {
    rc = 0;
    errno = 0;
    ibv_context* ctx = ibv_open_device(found);
    if (ctx != nullptr) {
      std::printf("open %s: ok\n", want);
      ibv_close_device(ctx);
    } else {
      std::printf("open %s: errno %d (%s)\n", want, errno, std::strerror(errno));
    }
  }
  std::fflush(stdout);
  ibv_free_device_list(list);
  return rc;
}
