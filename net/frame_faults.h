#pragma once
// What a fault does to an mbuf once net/fault_model.h decided it: flip a bit, cut the tail,
// copy. Shared by the simulated link (net/sim_link.h) and droced's live fault rules
// (droced/fault_stage.h), so both change frames the same way.
//
// A frame whose bytes are shared (refcnt > 1, indirect, or an external buffer such as a
// droce_shm slot lent to it) is first replaced by a private deep copy from `pool` (the original
// freed), so no other frame or holder ever sees the change. Errors: false when that copy cannot
// be made (no pool or an empty one); the frame is then untouched.

#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <cstdint>

namespace droce::net {

/// A deep copy of the whole frame in pool mbufs, or nullptr.
rte_mbuf* copy_frame(const rte_mbuf* m, rte_mempool* pool);
/// True when some segment of m is shared (see above).
bool frame_is_shared(const rte_mbuf* m);
/// Flips bit `bit` (byte bit / 8, bit bit % 8) of *m; bits past the frame are refused.
bool flip_frame_bit(rte_mbuf** m, uint64_t bit, rte_mempool* pool);
/// Cuts *m to its first keep_len bytes (keep_len < pkt_len).
bool truncate_frame(rte_mbuf** m, uint32_t keep_len, rte_mempool* pool);
/// The IP ECN bits (net/headers.h kEcn*) of an Ethernet frame (one VLAN tag allowed) carrying
/// IPv4 or IPv6, or -1 for any other frame.
int frame_ecn(const rte_mbuf* m);
/// Sets CE (ECN 11) in the frame's IPv4 TOS, with its header checksum, or IPv6 traffic class, as
/// a congestion point does; the RoCE ICRC masks these bits, so it stays valid. False for a frame
/// that is not IP or a copy that cannot be made.
bool set_frame_ce(rte_mbuf** m, rte_mempool* pool);

}  // namespace droce::net
