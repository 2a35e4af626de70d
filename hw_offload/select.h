#pragma once
// Picking the offloads a port's NIC really performs (rocev2/offload.h), once,
// when the port starts: what the device offers and what Port enabled.
// Control path.

#include "net/port.h"
#include "rocev2/offload.h"

namespace droce::hw_offload {

/// The offload table for `port`: software defaults, overridden where the
/// port enabled the matching hardware offload.
rocev2::OffloadOps select_offloads(const net::Port& port);

}  // namespace droce::hw_offload
