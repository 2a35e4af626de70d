// `droce events [--count N] [--timeout SECONDS] [--device NAME | --socket PATH]`:
// opens a verbs context on droced and prints each asynchronous event it
// delivers to that context (what ibv_asyncwatch shows for a kernel device):
// port active/down for everyone, and device-fatal when droced stops. QP, CQ
// and SRQ events go only to the context that owns the object, so this
// watcher sees none of another program's.
//
// Exit: 0 after N events (or, without --count, when the timeout passes), 1
// when droced cannot be reached or the timeout passes before N events, 2 for
// a usage error.

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "provider/client/client.h"

namespace droce::cli {

namespace {

// enum ibv_event_type, in order.
constexpr const char* kEventNames[] = {
    "IBV_EVENT_CQ_ERR",          "IBV_EVENT_QP_FATAL",         "IBV_EVENT_QP_REQ_ERR",
    "IBV_EVENT_QP_ACCESS_ERR",   "IBV_EVENT_COMM_EST",         "IBV_EVENT_SQ_DRAINED",
    "IBV_EVENT_PATH_MIG",        "IBV_EVENT_PATH_MIG_ERR",     "IBV_EVENT_DEVICE_FATAL",
    "IBV_EVENT_PORT_ACTIVE",     "IBV_EVENT_PORT_ERR",         "IBV_EVENT_LID_CHANGE",
    "IBV_EVENT_PKEY_CHANGE",     "IBV_EVENT_SM_CHANGE",        "IBV_EVENT_SRQ_ERR",
    "IBV_EVENT_SRQ_LIMIT_REACHED", "IBV_EVENT_QP_LAST_WQE_REACHED", "IBV_EVENT_CLIENT_REREGISTER",
    "IBV_EVENT_GID_CHANGE",      "IBV_EVENT_WQ_FATAL"};

const char* element_name(uint32_t type) {
  switch (client::event_element(type)) {
    case client::EventElement::cq: return "cq";
    case client::EventElement::qp: return "qp";
    case client::EventElement::srq: return "srq";
    case client::EventElement::port: return type == 8 /* IBV_EVENT_DEVICE_FATAL */ ? "device" : "port";
  }
  return "port";
}

}  // namespace

int events_command(const std::vector<std::string_view>& args) {
  std::string device = "droce0", socket;
  long count = 0;
  double timeout_s = 0;
  for (size_t k = 0; k < args.size(); ++k) {
    const bool has_value = k + 1 < args.size();
    if (args[k] == "--count" && has_value) count = std::strtol(std::string(args[++k]).c_str(), nullptr, 10);
    else if (args[k] == "--timeout" && has_value) timeout_s = std::strtod(std::string(args[++k]).c_str(), nullptr);
    else if (args[k] == "--device" && has_value) device = args[++k];
    else if (args[k] == "--socket" && has_value) socket = args[++k];
    else {
      std::fprintf(stderr, "usage: droce events [--count N] [--timeout SECONDS] [--device NAME | --socket PATH]\n");
      return 2;
    }
  }
  if (socket.empty()) socket = client::Context::socket_path(device);
  std::unique_ptr<client::Context> ctx;
  if (int rc = client::Context::open(socket, &ctx); rc != 0) {
    std::fprintf(stderr, "droce: cannot reach droced at %s: %s\n", socket.c_str(), std::strerror(-rc));
    return 1;
  }
  std::printf("watching %s for async events\n", socket.c_str());
  std::fflush(stdout);
  const uint64_t end = timeout_s > 0 ? core::monotonic_ns() + static_cast<uint64_t>(timeout_s * 1e9) : UINT64_MAX;
  long seen = 0;
  while (count == 0 || seen < count) {
    const uint64_t now = core::monotonic_ns();
    if (now >= end) break;
    const int wait_ms = end == UINT64_MAX ? -1 : static_cast<int>((end - now + 999'999) / 1'000'000);
    client::AsyncEvent ev{};
    const int rc = ctx->get_async_event(&ev, wait_ms);
    if (rc == -EAGAIN) continue;
    if (rc != 0) {
      std::fprintf(stderr, "droce: %s\n", std::strerror(-rc));
      return 1;
    }
    const char* name = ev.type < std::size(kEventNames) ? kEventNames[ev.type] : "unknown";
    std::printf("event_type %s (%u), %s %u\n", name, ev.type, element_name(ev.type), ev.id);
    std::fflush(stdout);
    ++seen;
    if (ev.type == 8) break;  // the device is gone: nothing more will come
  }
  if (count != 0 && seen < count) {
    std::fprintf(stderr, "droce: %ld of %ld events before the timeout\n", seen, count);
    return 1;
  }
  return 0;
}

}  // namespace droce::cli
