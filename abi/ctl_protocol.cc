#include "abi/ctl_protocol.h"

namespace droce::abi::ctl {

const char* to_string(HeaderCheck c) {
  switch (c) {
    case HeaderCheck::ok: return "ok";
    case HeaderCheck::too_short: return "message shorter than its header";
    case HeaderCheck::bad_magic: return "not a droce control message (bad magic)";
    case HeaderCheck::major_mismatch: return "droce ABI major version mismatch: client and droced must be upgraded together";
    case HeaderCheck::bad_length: return "header length disagrees with the message";
    case HeaderCheck::unknown_type: return "unknown message type";
  }
  return "?";
}

HeaderCheck check_header(std::span<const uint8_t> msg, CtlHeader* hdr) {
  if (msg.size() < sizeof(CtlHeader)) return HeaderCheck::too_short;
  std::memcpy(hdr, msg.data(), sizeof *hdr);
  if (hdr->magic != kMagic) return HeaderCheck::bad_magic;
  if (hdr->abi_major != kAbiMajor) return HeaderCheck::major_mismatch;
  if (hdr->length != msg.size() || hdr->length > kMaxMessage) return HeaderCheck::bad_length;
  if (hdr->type < static_cast<uint16_t>(MsgType::hello) || hdr->type > kLastMsgType)
    return HeaderCheck::unknown_type;
  return HeaderCheck::ok;
}

std::vector<uint8_t> encode_raw(MsgType type, uint32_t seq, std::span<const uint8_t> body,
                                std::span<const uint8_t> tail, bool reply, int32_t status) {
  std::vector<uint8_t> out(sizeof(CtlHeader) + body.size() + tail.size());
  CtlHeader h{kMagic, kAbiMajor, kAbiMinor, static_cast<uint16_t>(type),
              static_cast<uint16_t>(reply ? kFlagReply : 0), static_cast<uint32_t>(out.size()), seq, status};
  std::memcpy(out.data(), &h, sizeof h);
  if (!body.empty()) std::memcpy(out.data() + sizeof h, body.data(), body.size());
  if (!tail.empty()) std::memcpy(out.data() + sizeof h + body.size(), tail.data(), tail.size());
  return out;
}

std::vector<uint8_t> encode_empty(MsgType type, uint32_t seq, bool reply, int32_t status) {
  return encode_raw(type, seq, {}, {}, reply, status);
}

int decode_body_bytes(std::span<const uint8_t> msg, void* out, size_t size, size_t min_size) {
  if (msg.size() < sizeof(CtlHeader)) return -EBADMSG;
  const size_t present = msg.size() - sizeof(CtlHeader);
  if (present < min_size) return -EBADMSG;
  std::memset(out, 0, size);
  std::memcpy(out, msg.data() + sizeof(CtlHeader), present < size ? present : size);
  return 0;
}

}  // namespace droce::abi::ctl
