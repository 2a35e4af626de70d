#pragma once
// UDP segmentation offload for a link over a kernel packet socket (net/packet_link.h), I/O-free.
//
// A kernel hands a packet socket's frames to its stack one skb at a time, and an skb costs the
// same few microseconds whether it holds 64 bytes or 64 KiB. The kernel's answer for its own
// traffic is segmentation offload: one skb carries many segments of one flow, described by a
// virtio_net_hdr (gso_type, gso_size), and is cut into wire packets only where a device cannot
// carry it whole: a veth, a bridge and a router namespace all pass it on uncut, and a packet
// socket on the far end (PACKET_VNET_HDR) receives it as it was sent.
//
// TX: frames the engine built back to back for one flow (one QP's packets of a message) become
// one GSO frame: the first frame's headers with the lengths of the whole, then each frame's UDP
// payload (BTH to ICRC) in order. Where the kernel segments it, each segment gets the first
// frame's headers with its own lengths and checksums and the IPv4 identification of the first plus
// its index (Linux's inet_gso_segment for SKB_GSO_UDP_L4). The ICRC covers that identification,
// so a run is only formed of frames whose identifications already count up that way (the engine
// numbers each QP's packets, rocev2/engine.cc), and whose headers are otherwise equal byte for
// byte: then every segment the kernel or the receiver cuts is the frame the engine built, ICRC
// and all. Segments are the first's size except the last, which may be shorter (the kernel's
// rule); an IPv4 GSO frame's total length must fit in 16 bits.
//
// RX: a GSO frame received with its virtio_net_hdr is cut the same way, segment by segment, each
// written out as the frame its sender built (IPv4 checksum recomputed, UDP checksum 0 on IPv4
// and computed on IPv6, where 0 is not allowed; the ICRC masks both).
//
// Frames are Ethernet with at most one 802.1Q tag, IPv4 without options or IPv6 without extension
// headers, then UDP; anything else is never coalesced and a GSO frame of another kind is refused.

#include <cstddef>
#include <cstdint>

namespace droce::net {

/// virtio_net_hdr (linux/virtio_net.h), the 10 bytes before each frame on a PACKET_VNET_HDR
/// socket; fields in host byte order (a little-endian virtio header on every host droce runs on).
struct VnetHdr {
  uint8_t flags = 0;        ///< kVnetNeedsCsum, kVnetDataValid
  uint8_t gso_type = 0;     ///< kVnetGsoNone, kVnetGsoUdpL4, ...
  uint16_t hdr_len = 0;     ///< bytes of headers before the first segment's payload
  uint16_t gso_size = 0;    ///< payload bytes per segment
  uint16_t csum_start = 0;  ///< where the checksum starts (the UDP header)
  uint16_t csum_offset = 0; ///< where it goes, from csum_start
};
inline constexpr size_t kVnetHdrLen = 10;
inline constexpr uint8_t kVnetNeedsCsum = 1;
inline constexpr uint8_t kVnetDataValid = 2;
inline constexpr uint8_t kVnetGsoNone = 0;
inline constexpr uint8_t kVnetGsoTcpV4 = 1;
inline constexpr uint8_t kVnetGsoUdp = 3;
inline constexpr uint8_t kVnetGsoTcpV6 = 4;
inline constexpr uint8_t kVnetGsoUdpL4 = 5;
inline constexpr uint8_t kVnetGsoEcn = 0x80;

void store_vnet_hdr(const VnetHdr& h, uint8_t* out);
VnetHdr load_vnet_hdr(const uint8_t* in);

/// Where a UDP frame's headers are.
struct UdpFrameLayout {
  uint16_t l3_off = 0;       ///< the IP header
  uint16_t l4_off = 0;       ///< the UDP header
  uint16_t payload_off = 0;  ///< l4_off + 8
  bool ipv4 = false;
};

/// Finds the layout of a frame of the kinds above. With `exact_length`, the IP and UDP lengths
/// must say the frame's `len` (less Ethernet padding); without, they are not looked at (a GSO
/// frame's say the whole). false for anything else.
bool udp_frame_layout(const uint8_t* f, uint32_t len, bool exact_length, UdpFrameLayout* out);

struct FrameView {
  const uint8_t* data = nullptr;
  uint32_t len = 0;
};

inline constexpr uint32_t kGsoMaxSegments = 64;    ///< as the kernel's UDP_MAX_SEGMENTS
inline constexpr uint32_t kGsoMaxIpv4Total = 65535;

/// How many of frames[0, n) (at least 1) one GSO frame can carry, at most `max_segments` and
/// `max_bytes` of UDP payload, by the rules above. 1 when frames[0] cannot lead a run.
size_t gso_run_length(const FrameView* frames, size_t n, uint32_t max_segments, uint32_t max_bytes);

/// The virtio_net_hdr and headers of the GSO frame that carries frames[0, k) (k >= 2, a run that
/// gso_run_length allowed): kVnetHdrLen + the first frame's header bytes, written to `out`
/// (room for kVnetHdrLen + 18 + 40 + 8 bytes); the payloads follow it, in order, from each frame's
/// payload offset. Returns the bytes written.
uint32_t gso_build_header(const FrameView* frames, size_t k, uint8_t* out);

/// A received GSO frame, checked: its layout, payload and segment size. -EINVAL for a frame
/// its header does not describe (not UDP_L4, bad lengths, a zero segment size).
struct GsoFrame {
  UdpFrameLayout at;
  uint32_t payload_len = 0;  ///< UDP payload of the whole
  uint16_t seg_size = 0;
  uint32_t segments = 0;
};
int gso_parse(const VnetHdr& vh, const uint8_t* f, uint32_t len, GsoFrame* out);

/// Writes segment i of a parsed GSO frame as the frame its sender built; `out` has room for
/// g.at.payload_off + g.seg_size bytes. Returns its length.
uint32_t gso_write_segment(const uint8_t* f, const GsoFrame& g, uint32_t i, uint8_t* out);

/// Completes a checksum the sender left partial (kVnetNeedsCsum: the field at csum_start +
/// csum_offset holds the pseudo-header sum): the one's complement sum from csum_start to the end.
/// false when the offsets fall outside the frame.
bool complete_partial_csum(const VnetHdr& vh, uint8_t* f, uint32_t len);

}  // namespace droce::net
