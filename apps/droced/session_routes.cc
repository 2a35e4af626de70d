// The requests Session::handle() serves through a table instead of its switch (session.h,
// Session::Route): a feature adds its message types here and its handler in its own file.

#include <array>

#include "apps/droced/session.h"

namespace droce::droced {

using core::ctl::MsgType;

const Session::Route* Session::route_for(MsgType type) {
  static constexpr std::array<Route, 2> kRoutes{{
      {MsgType::attach_mcast, &Session::serve_mcast},
      {MsgType::detach_mcast, &Session::serve_mcast},
  }};
  for (const Route& r : kRoutes)
    if (r.type == type) return &r;
  return nullptr;
}

}  // namespace droce::droced
