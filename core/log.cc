#include "core/log.h"

#include <array>

namespace droce::core {

namespace {

struct LogTypes {
  std::array<int, 6> ids{};
  LogTypes() {
    static constexpr const char* kNames[] = {"droce.core",    "droce.net",      "droce.rocev2",
                                             "droce.offload", "droce.provider", "droce.app"};
    for (size_t i = 0; i < ids.size(); ++i) {
      int id = rte_log_register_type_and_pick_level(kNames[i], RTE_LOG_INFO);
      ids[i] = id >= 0 ? id : RTE_LOGTYPE_USER1;
    }
  }
};

}  // namespace

int log_type(LogLayer layer) {
  static const LogTypes types;  // magic static: registered once, thread-safe
  return types.ids[static_cast<size_t>(layer)];
}

}  // namespace droce::core
