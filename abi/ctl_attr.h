#pragma once
// QP attributes and address vectors between the verbs vocabulary
// (abi/verbs.h) and their fixed-width control-protocol form
// (abi/ctl_protocol.h): droced decodes what the client library encodes,
// through these two functions each way.

#include "abi/ctl_protocol.h"
#include "abi/verbs.h"

namespace droce::abi {

void to_wire(const AddressVector& av, ctl::WireAv* out);
/// The client's part of an address vector (GID, index, hop limit, class,
/// flow label, SL); MACs, VLAN and source GID are droced's to fill in.
void from_wire(const ctl::WireAv& w, AddressVector* out);

void to_wire(const QpAttr& a, ctl::WireQpAttr* out);
/// False when a state, MTU or migration state is out of range (the caller
/// answers EINVAL); the engine checks the rest against the mask.
bool from_wire(const ctl::WireQpAttr& w, QpAttr* out);

}  // namespace droce::abi
