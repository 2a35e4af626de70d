// Completion queues: ibv_create_cq (a shared ring the engine completes into), ibv_destroy_cq,
// ibv_resize_cq, and the completion channels CQs report to (register_channel).

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/stat.h>

#include <cstring>

#include "droced/session_objects.h"
#include "core/log.h"

namespace droce::droced {

using namespace abi::ctl;

int Session::on_create_cq(const CreateCqRequest& q, CreateCqReply* out, std::unique_ptr<SharedCq>* made) {
  if (cqs_.size() >= dev_->session_limits.max_cqs) return -ENOMEM;
  if (q.cqe == 0 || q.cqe > dev_->limits.max_cqe) return -EINVAL;
  if (q.flags & ~uint32_t{kCqCreateTimestamp}) return -EINVAL;
  auto c = std::make_unique<SharedCq>();
  c->timestamp = (q.flags & kCqCreateTimestamp) != 0;
  const uint32_t entries = pow2_at_least(q.cqe);
  const abi::ShmRingGeometry g{entries, sizeof(abi::Cqe)};
  const size_t ring_off = sizeof(abi::QueueDoorbellBlock);
  if (int rc = make_region("droce-cq", ring_off + abi::shm_ring_bytes(g), &c->region); rc != 0) return rc;
  std::span<std::byte> ring{c->region.data() + ring_off, abi::shm_ring_bytes(g)};
  if (int rc = abi::shm_ring_format(ring, g); rc != 0) return rc;
  if (int rc = abi::ShmRingProducer::attach(ring, g, &c->ring); rc != 0) return rc;
  c->block = reinterpret_cast<abi::QueueDoorbellBlock*>(c->region.data());
  c->event_fd = core::Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!c->event_fd.valid()) return -errno;
  if (q.channel != 0) {
    auto ch = channels_.find(q.channel);
    if (ch == channels_.end()) return -EINVAL;
    c->channel = ch->second;
    c->user_handle = q.user_handle;
  }
  // The engine's Cq keeps no ring of its own with a sink: it checks the size asked for (a
  // max_cqe CQ rounds past max_cqe here, as on mlx5).
  if (int rc = dev_->core->engine().create_cq(q.cqe, &c->cq, c.get()); rc != 0) return rc;
  c->session = this;
  out->cq_id = c->cq->id();
  out->cqe = entries;
  out->region_bytes = c->region.size();
  *made = std::move(c);
  return 0;
}

int Session::on_register_channel(std::vector<core::Fd>& fds, uint32_t* id) {
  if (fds.size() != 1) return -EINVAL;
  if (channels_.size() >= kMaxChannelsPerSession) return -ENOMEM;
  struct stat st;
  const int fl = ::fcntl(fds[0].get(), F_GETFL);
  if (::fstat(fds[0].get(), &st) != 0 || !S_ISFIFO(st.st_mode) || fl < 0 || (fl & O_ACCMODE) != O_WRONLY)
    return -EINVAL;
  // The client gave its own copy up (it closes it): this description is ours.
  if (!(fl & O_NONBLOCK) && ::fcntl(fds[0].get(), F_SETFL, fl | O_NONBLOCK) != 0) return -errno;
  const uint32_t cid = next_channel_id_++;
  channels_[cid] = std::make_shared<core::Fd>(std::move(fds[0]));
  *id = cid;
  return 0;
}

int Session::on_resize_cq(const ResizeCqRequest& q, ResizeCqReply* out) {
  auto it = cqs_.find(q.cq_id);
  if (it == cqs_.end()) return -EINVAL;
  if (q.cqe == 0 || q.cqe > dev_->limits.max_cqe) return -EINVAL;
  SharedCq& c = *it->second;
  // What the client has not polled: size() reads its consumer index and
  // accepts it only between the last one seen and the producer index.
  const uint32_t unpolled = c.ring.size();
  if (c.ring.corrupted()) return -EIO;
  // Against the size asked for, not the rounded one (rxe's rule): whether
  // it fails does not depend on droced's rounding.
  if (q.cqe < unpolled) return -EINVAL;
  const uint32_t first = c.ring.index() - unpolled;

  // The new ring continues the old one's indexes (formatted at `first`), so
  // cq_arm_index, solicited_end and the client's discards keep their meaning.
  const abi::ShmRingGeometry g{pow2_at_least(q.cqe), sizeof(abi::Cqe)};
  const size_t ring_off = sizeof(abi::QueueDoorbellBlock);
  core::ShmRegion region;
  if (int rc = make_region("droce-cq", ring_off + abi::shm_ring_bytes(g), &region); rc != 0) return rc;
  std::span<std::byte> mem{region.data() + ring_off, abi::shm_ring_bytes(g)};
  abi::ShmRingProducer ring;
  if (int rc = abi::shm_ring_format(mem, g, first); rc != 0) return rc;
  if (int rc = abi::ShmRingProducer::attach(mem, g, &ring); rc != 0) return rc;
  uint32_t got = 0;
  if (ring.reserve(unpolled, &got) != abi::ShmRingStatus::ok) return -EINVAL;  // not with cqe >= unpolled
  // Old entries by droced's own geometry: no index leads outside the old
  // ring. What the client wrote over them is its loss.
  const std::byte* old_entries = c.region.data() + ring_off + abi::kShmRingHeaderSize;
  const uint32_t old_mask = c.ring.capacity() - 1;
  for (uint32_t i = 0; i < unpolled; ++i)
    std::memcpy(ring.slot(i), old_entries + size_t((first + i) & old_mask) * sizeof(abi::Cqe), sizeof(abi::Cqe));
  ring.publish(unpolled);

  // An arm whose doorbell is still queued is read from the new block when
  // that doorbell is served; an arm already served stays in the engine's Cq.
  auto* block = reinterpret_cast<abi::QueueDoorbellBlock*>(region.data());
  auto carry = [](uint32_t* to, uint32_t* from) { store_flag(to, std::atomic_ref<uint32_t>(*from).load()); };
  carry(&block->cq_arm_index, &c.block->cq_arm_index);
  carry(&block->rq_pending, &c.block->rq_pending);
  carry(&block->sq_pending, &c.block->sq_pending);

  // The engine's Cq and its sink (this SharedCq) stay: QPs and SRQs on the CQ
  // complete into the new ring from the next push on. (The engine's Cq keeps
  // no ring of its own when it has a sink, so it has no capacity to change.)
  c.ring = std::move(ring);
  c.block = block;
  c.region = std::move(region);  // droced's mapping of the old ring goes here
  out->cqe = g.entry_count;
  out->region_bytes = c.region.size();
  DROCE_LOG(DEBUG, app, "client %u: CQ %u resized to %u entries, %u completions moved", id_, q.cq_id,
            g.entry_count, unpolled);
  return 0;
}

int Session::destroy_cq(uint32_t id, uint64_t* events_written) {
  auto it = cqs_.find(id);
  if (it == cqs_.end()) return -EINVAL;
  if (it->second->users != 0) return -EBUSY;
  int rc = dev_->core->engine().destroy_cq(it->second->cq);
  if (rc != 0) return rc;
  *events_written = it->second->events_written;
  cqs_.erase(it);
  dev_->cq_owner.erase(id);
  return 0;
}


template <>
void Session::serve<MsgType::create_cq>(const Control& c, const CreateCqRequest& q) {
  CreateCqReply r{};
  std::unique_ptr<SharedCq> made;
  if (int rc = on_create_cq(q, &r, &made); rc != 0) return reply(c.h, rc);
  const int out_fds[2] = {made->region.fd(), made->event_fd.get()};
  const uint32_t id = r.cq_id;
  dev_->cq_owner[id] = this;
  cqs_[id] = std::move(made);
  reply(c.h, 0, &r, sizeof r, out_fds);
}

template <>
void Session::serve<MsgType::destroy_cq>(const Control& c, const IdRequest& q) {
  DestroyCqReply r{};
  const int rc = destroy_cq(q.id, &r.comp_events_written);
  reply(c.h, rc, &r, sizeof r);
}

template <>
void Session::serve<MsgType::resize_cq>(const Control& c, const ResizeCqRequest& q) {
  ResizeCqReply r{};
  const int rc = on_resize_cq(q, &r);
  const int fd = rc == 0 ? cqs_.at(q.cq_id)->region.fd() : -1;
  reply(c.h, rc, &r, sizeof r, std::span<const int>(&fd, rc == 0 ? 1 : 0));
}

template <>
void Session::serve<MsgType::register_channel>(const Control& c, const NoBody&) {
  IdReply r{};
  const int rc = on_register_channel(c.fds, &r.id);
  reply(c.h, rc, &r, sizeof r);
}

std::span<const Session::ControlEntry> Session::cq_controls() {
  static constexpr ControlEntry kEntries[] = {
      control<MsgType::create_cq, CreateCqRequest, kCreateCqRequestV0>(),
      control<MsgType::destroy_cq, IdRequest>(),
      control<MsgType::resize_cq, ResizeCqRequest>(),
      control<MsgType::register_channel, NoBody>(),
  };
  return kEntries;
}

}  // namespace droce::droced
