#pragma once
// `droce capture`: the frames a device receives and sends, streamed as pcapng (net/pcapng.h) to
// an fd a client passed (abi/ctl_protocol.h, MsgType::capture).
//
// Where frames are taken: what the wire carries. Received: right after the port's rx_burst
// and when looped back from this droced's own QPs, before the rx fault rules (DeviceCore).
// Sent: as they go to the port, after the tx fault rules (FaultPort), and the neighbour
// table's frames. Looped-back frames are thus seen twice, sent and received, as on a wire.
// A QP filter keeps received frames whose BTH destination QP is N and sent frames QP N sent
// (rocev2::frame_source_qpn): the fault rules' test (droced/fault_stage.h).
//
// Cost: with no capture running, each tap point is one relaxed load and a branch
// (CaptureTap::generation()). With one running, each frame is copied (up to the snap length)
// into its core's single-producer ring of fixed records; a full ring drops the frame and
// counts it, so the data path never waits. A thread of its own drains the rings, fills in the
// ICRC on a link that carries none (droce_shm with icrc=skip: the field is zero there, and
// tshark would call every frame bad), and writes pcapng.
//
// Threading: a core produces into its own ring only. start()/stop() from any thread (a
// session's worker); the drain thread is the rings' only consumer. A capture has a generation
// (never 0); records of an older one still in flight are skipped.

#include <rte_mbuf.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/unix_socket.h"
#include "net/pcapng.h"

namespace droce::droced {

/// Bytes a record holds: a RoCE frame at the largest MTU (4096) with its headers, VLAN tag and
/// ICRC. Larger frames (jumbo, non-RoCE) are cut here, as by a snap length.
inline constexpr uint32_t kCaptureMaxSnap = 4096 + 128;
/// Records per core: a few milliseconds of 4 KiB frames at line rate on a fast link.
inline constexpr uint32_t kCaptureRingRecords = 1024;

struct CaptureParams {
  uint32_t qpn = UINT32_MAX;  ///< UINT32_MAX: every frame
  uint32_t snaplen = kCaptureMaxSnap;
  uint64_t count = 0;         ///< 0: no limit
  bool fill_icrc = false;     ///< the link carries no ICRC: compute it into the copy
  std::string interface_name;
};

class Capture {
 public:
  explicit Capture(unsigned cores);
  ~Capture();
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;

  /// The running capture's generation, 0 when none: the data path's only cost when off.
  uint32_t generation() const { return generation_.load(std::memory_order_acquire); }

  /// Core `core` copies frames [0, n) of direction `dir` that pass the filter into its ring,
  /// unpublished; returns how many it staged, for publish(). Frames that find no room are
  /// counted lost (a frame the port refuses and is offered again counts twice).
  uint32_t stage(unsigned core, uint32_t generation, net::pcapng::Direction dir, rte_mbuf* const* frames,
                 uint16_t n, uint64_t now_ns);
  /// Publishes the staged records of the first `sent` frames (the rest were refused by the
  /// port and will be staged again when retried). `staged` is stage()'s result.
  void publish(unsigned core, uint32_t staged, uint16_t sent);
  /// stage() and publish() for frames already received.
  void tap(unsigned core, uint32_t generation, net::pcapng::Direction dir, rte_mbuf* const* frames, uint16_t n,
           uint64_t now_ns) {
    publish(core, stage(core, generation, dir, frames, n, now_ns), n);
  }

  /// Starts a capture to `out` for session `owner`. -EBUSY: one runs; -EINVAL: bad params.
  int start(const CaptureParams& p, core::Fd out, uint32_t owner);
  /// Ends `owner`'s capture, if it runs (its session closed). Does not wait for the thread.
  void stop(uint32_t owner);

 private:
  struct Record {
    uint64_t time_ns;
    uint32_t generation;
    uint32_t wire_len;
    uint16_t cap_len;
    uint16_t burst_index;  ///< which frame of stage()'s burst: publish() keeps the sent ones
    uint8_t dir;
    uint8_t pad[7];
    uint8_t bytes[kCaptureMaxSnap];
  };
  struct alignas(64) Ring {
    std::atomic<uint64_t> head{0};  ///< written by the core
    alignas(64) std::atomic<uint64_t> tail{0};  ///< written by the drain thread
    alignas(64) std::atomic<uint64_t> seen{0};     ///< frames that passed the filter (the core's)
    std::atomic<uint64_t> dropped{0};  ///< of those: no room (the core's)
    std::unique_ptr<Record[]> records;
  };
  static bool wanted(net::pcapng::Direction dir, const rte_mbuf* m, uint32_t qpn);
  void drain_loop(CaptureParams p, core::Fd out, uint32_t generation, uint64_t seen0, uint64_t dropped0);
  void join_finished();

  unsigned cores_;
  std::unique_ptr<Ring[]> rings_;
  std::atomic<uint32_t> generation_{0};
  std::atomic<uint32_t> qpn_{UINT32_MAX};
  std::atomic<uint32_t> snaplen_{kCaptureMaxSnap};
  std::mutex mutex_;  ///< start/stop
  uint32_t owner_ = 0;
  uint32_t last_generation_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> running_{false};  ///< the drain thread has not finished
  std::thread thread_;
};

/// One core's view: where its tap points find the capture.
struct CaptureTap {
  Capture* capture = nullptr;
  unsigned core = 0;
  /// 0 when no capture runs (or none is configured): one load and a predictable branch.
  uint32_t generation() const { return capture != nullptr ? capture->generation() : 0; }
};

}  // namespace droce::droced
