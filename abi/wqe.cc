#include "abi/wqe.h"

#include <algorithm>
#include <cstring>

namespace droce::abi {


const char* to_string(WqeError e) {
  switch (e) {
    case WqeError::ok: return "ok";
    case WqeError::short_entry: return "entry too short for what it declares";
    case WqeError::bad_opcode: return "unknown opcode";
    case WqeError::too_many_sge: return "more SGEs than the QP allows";
    case WqeError::inline_too_long: return "more inline data than the QP allows";
    case WqeError::bad_flags: return "unknown send flags";
  }
  return "?";
}

namespace {

bool known_opcode(uint8_t op) {
  switch (static_cast<WrOpcode>(op)) {
    case WrOpcode::rdma_write:
    case WrOpcode::rdma_write_with_imm:
    case WrOpcode::send:
    case WrOpcode::send_with_imm:
    case WrOpcode::rdma_read:
    case WrOpcode::atomic_cmp_and_swp:
    case WrOpcode::atomic_fetch_and_add:
    case WrOpcode::local_inv:
    case WrOpcode::bind_mw:
    case WrOpcode::send_with_inv:
    case WrOpcode::flush:
    case WrOpcode::atomic_write:
      return true;
  }
  return false;
}

constexpr uint32_t kKnownSendFlags = kSendFence | kSendSignaled | kSendSolicited | kSendInline;

}  // namespace

WqeError decode_send_wqe(std::span<const uint8_t> entry, const WqeLimits& lim, SendWr* out) {
  if (entry.size() < sizeof(SendWqeHeader)) return WqeError::short_entry;
  SendWqeHeader h;
  std::memcpy(&h, entry.data(), sizeof h);
  if (!known_opcode(h.opcode)) return WqeError::bad_opcode;
  if (h.send_flags & ~kKnownSendFlags) return WqeError::bad_flags;
  const std::span<const uint8_t> body = entry.subspan(sizeof h);
  send_wr_fields(h, out);
  if (h.send_flags & kSendInline) {
    if (h.inline_len > lim.max_inline) return WqeError::inline_too_long;
    if (h.inline_len > body.size()) return WqeError::short_entry;
    out->num_sge = h.inline_len ? 1 : 0;
    out->sg_list[0] = {reinterpret_cast<uint64_t>(body.data()), h.inline_len, 0};
    return WqeError::ok;
  }
  if (h.num_sge > lim.max_sge || h.num_sge > kMaxSge) return WqeError::too_many_sge;
  if (size_t{h.num_sge} * sizeof(WqeSge) > body.size()) return WqeError::short_entry;
  out->num_sge = h.num_sge;
  for (uint32_t i = 0; i < h.num_sge; ++i) {
    WqeSge s;
    std::memcpy(&s, body.data() + i * sizeof s, sizeof s);
    out->sg_list[i] = {s.addr, s.length, s.lkey};
  }
  return WqeError::ok;
}

void send_wr_fields(const SendWqeHeader& h, SendWr* out) {
  out->wr_id = h.wr_id;
  out->opcode = static_cast<WrOpcode>(h.opcode);
  out->send_flags = h.send_flags;
  out->imm_data = h.imm_or_inv;
  out->invalidate_rkey = h.imm_or_inv;
  out->remote_addr = h.remote_addr;
  out->rkey = h.rkey;
  out->compare_add = h.compare_add;
  out->swap = h.swap;
  out->ah = h.ah;
  out->remote_qpn = h.remote_qpn & 0xffffff;
  out->remote_qkey = h.remote_qkey;
  if (out->opcode == WrOpcode::bind_mw) {  // SendWqeHeader's comment: the bind's fields
    out->bind_length = h.compare_add;
    out->bind_mr_lkey = uint32_t(h.swap);
    out->bind_access = uint32_t(h.swap >> 32);
  }
  if (out->opcode == WrOpcode::flush) {  // SendWqeHeader's comment: type and level in swap
    out->flush_type = uint8_t(h.swap);
    out->flush_level = uint8_t(h.swap >> 8);
  }
}

uint32_t send_wqe_used(std::span<const uint8_t> header) {
  SendWqeHeader h;
  if (header.size() < sizeof h) return UINT32_MAX;
  std::memcpy(&h, header.data(), sizeof h);
  const uint64_t body = h.send_flags & kSendInline ? uint64_t{h.inline_len} : uint64_t{h.num_sge} * sizeof(WqeSge);
  return uint32_t(std::min<uint64_t>(sizeof h + body, UINT32_MAX));
}

uint32_t recv_wqe_used(std::span<const uint8_t> header) {
  RecvWqeHeader h;
  if (header.size() < sizeof h) return UINT32_MAX;
  std::memcpy(&h, header.data(), sizeof h);
  return uint32_t(sizeof h + uint64_t{h.num_sge} * sizeof(WqeSge));
}

WqeError decode_recv_wqe(std::span<const uint8_t> entry, const WqeLimits& lim, RecvWr* out) {
  if (entry.size() < sizeof(RecvWqeHeader)) return WqeError::short_entry;
  RecvWqeHeader h;
  std::memcpy(&h, entry.data(), sizeof h);
  if (h.num_sge > lim.max_sge || h.num_sge > kMaxSge) return WqeError::too_many_sge;
  if (sizeof h + size_t{h.num_sge} * sizeof(WqeSge) > entry.size()) return WqeError::short_entry;
  out->wr_id = h.wr_id;
  out->num_sge = h.num_sge;
  for (uint32_t i = 0; i < h.num_sge; ++i) {
    WqeSge s;
    std::memcpy(&s, entry.data() + sizeof h + i * sizeof s, sizeof s);
    out->sg_list[i] = {s.addr, s.length, s.lkey};
  }
  return WqeError::ok;
}

SendWqeHeader send_wqe_header(const SendWr& wr) {
  SendWqeHeader h{};
  h.wr_id = wr.wr_id;
  h.remote_addr = wr.remote_addr;
  h.compare_add = wr.compare_add;
  h.swap = wr.swap;
  h.rkey = wr.rkey;
  h.imm_or_inv = wr.opcode == WrOpcode::send_with_inv || wr.opcode == WrOpcode::local_inv ||
                         wr.opcode == WrOpcode::bind_mw
                     ? wr.invalidate_rkey
                     : wr.imm_data;
  if (wr.opcode == WrOpcode::bind_mw) {
    h.compare_add = wr.bind_length;
    h.swap = uint64_t{wr.bind_mr_lkey} | uint64_t{wr.bind_access} << 32;
  }
  if (wr.opcode == WrOpcode::flush) h.swap = uint64_t{wr.flush_type} | uint64_t{wr.flush_level} << 8;
  h.ah = wr.ah;
  h.remote_qpn = wr.remote_qpn;
  h.remote_qkey = wr.remote_qkey;
  h.send_flags = wr.send_flags;
  h.opcode = static_cast<uint8_t>(wr.opcode);
  return h;
}

size_t encode_send_wqe(SendWqeHeader h, SgeList sges, std::span<uint8_t> entry) {
  if (sges.size() > kMaxSge) return 0;
  const bool inl = (h.send_flags & kSendInline) != 0;
  size_t body = 0;
  if (inl) {
    for (uint32_t i = 0; i < sges.size(); ++i) body += sges[i].length;
  } else {
    body = size_t{sges.size()} * sizeof(WqeSge);
  }
  if (sizeof h + body > entry.size()) return 0;
  h.num_sge = static_cast<uint16_t>(inl ? 0 : sges.size());
  h.inline_len = static_cast<uint32_t>(inl ? body : 0);
  uint8_t* p = entry.data();
  std::memcpy(p, &h, sizeof h);
  p += sizeof h;
  if (!inl) {
    if (body != 0) std::memcpy(p, sges.data(), body);
    return sizeof h + body;
  }
  for (uint32_t i = 0; i < sges.size(); ++i) {
    const WqeSge s = sges[i];
    if (s.length != 0) std::memcpy(p, reinterpret_cast<const void*>(s.addr), s.length);
    p += s.length;
  }
  return sizeof h + body;
}

size_t encode_send_wqe(const SendWr& wr, std::span<const uint8_t> inline_data, std::span<uint8_t> entry) {
  if ((wr.send_flags & kSendInline) == 0) return encode_send_wqe(send_wqe_header(wr), {wr.sg_list, wr.num_sge}, entry);
  if (inline_data.size() > entry.size()) return 0;
  const Sge data{reinterpret_cast<uint64_t>(inline_data.data()), static_cast<uint32_t>(inline_data.size()), 0};
  return encode_send_wqe(send_wqe_header(wr), {&data, inline_data.empty() ? 0u : 1u}, entry);
}

size_t encode_recv_wqe(const RecvWr& wr, std::span<uint8_t> entry) {
  const size_t len = sizeof(RecvWqeHeader) + size_t{wr.num_sge} * sizeof(WqeSge);
  if (len > entry.size() || wr.num_sge > kMaxSge) return 0;
  RecvWqeHeader h{wr.wr_id, static_cast<uint16_t>(wr.num_sge), 0, 0};
  std::memcpy(entry.data(), &h, sizeof h);
  for (uint32_t i = 0; i < wr.num_sge; ++i) {
    const WqeSge s{wr.sg_list[i].addr, wr.sg_list[i].length, wr.sg_list[i].lkey};
    std::memcpy(entry.data() + sizeof h + i * sizeof s, &s, sizeof s);
  }
  return len;
}

void encode_cqe(const Completion& c, Cqe* out) {
  *out = Cqe{};
  out->wr_id = c.wr_id;
  out->byte_len = c.byte_len;
  out->imm_or_inv = c.imm_data;
  out->qp_num = c.qp_num;
  out->src_qp = c.src_qp;
  out->vendor_err = c.vendor_err;
  out->wc_flags = c.wc_flags;
  out->pkey_index = c.pkey_index;
  out->slid = c.slid;
  out->status = static_cast<uint8_t>(c.status);
  out->opcode = static_cast<uint8_t>(c.opcode);
  out->sl = c.sl;
  out->dlid_path_bits = c.dlid_path_bits;
  out->timestamp = c.timestamp_ns;
}

Completion decode_cqe(const Cqe& e) {
  Completion c;
  c.wr_id = e.wr_id;
  c.byte_len = e.byte_len;
  c.imm_data = e.imm_or_inv;
  c.qp_num = e.qp_num;
  c.src_qp = e.src_qp;
  c.vendor_err = e.vendor_err;
  c.wc_flags = e.wc_flags;
  c.pkey_index = e.pkey_index;
  c.slid = e.slid;
  c.status = static_cast<WcStatus>(e.status);
  c.opcode = static_cast<WcOpcode>(e.opcode);
  c.sl = e.sl;
  c.dlid_path_bits = e.dlid_path_bits;
  c.timestamp_ns = e.timestamp;
  return c;
}

}  // namespace droce::abi
