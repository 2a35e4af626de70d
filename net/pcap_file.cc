#include "net/pcap_file.h"

#include <pcap/pcap.h>

#include "net/frame_bytes.h"

namespace droce::net {

PcapReader::PcapReader(const std::string& path) {
  char errbuf[PCAP_ERRBUF_SIZE] = {};
  handle_ = pcap_open_offline_with_tstamp_precision(path.c_str(), PCAP_TSTAMP_PRECISION_NANO,
                                                    errbuf);
  if (handle_ == nullptr) error_ = errbuf;
}

PcapReader::~PcapReader() {
  if (handle_ != nullptr) pcap_close(handle_);
}

bool PcapReader::is_ethernet() const { return handle_ != nullptr && pcap_datalink(handle_) == DLT_EN10MB; }

bool PcapReader::next(CapturedFrame* out) {
  if (handle_ == nullptr) return false;
  pcap_pkthdr* hdr = nullptr;
  const u_char* data = nullptr;
  int rc = pcap_next_ex(handle_, &hdr, &data);
  if (rc == 1) {
    out->time_ns = uint64_t(hdr->ts.tv_sec) * 1000000000u + uint64_t(hdr->ts.tv_usec);
    out->wire_len = hdr->len;
    out->bytes.assign(data, data + hdr->caplen);
    return true;
  }
  if (rc == PCAP_ERROR) error_ = pcap_geterr(handle_);
  return false;
}

PcapWriter::PcapWriter(const std::string& path) {
  dead_ = pcap_open_dead_with_tstamp_precision(DLT_EN10MB, 65535, PCAP_TSTAMP_PRECISION_NANO);
  if (dead_ == nullptr) {
    error_ = "pcap_open_dead failed";
    return;
  }
  dumper_ = pcap_dump_open(dead_, path.c_str());
  if (dumper_ == nullptr) error_ = pcap_geterr(dead_);
}

PcapWriter::~PcapWriter() {
  if (dumper_ != nullptr) pcap_dump_close(dumper_);
  if (dead_ != nullptr) pcap_close(dead_);
}

void PcapWriter::write(std::span<const uint8_t> frame, uint64_t time_ns) {
  if (dumper_ == nullptr) return;
  pcap_pkthdr hdr{};
  hdr.ts.tv_sec = static_cast<time_t>(time_ns / 1000000000u);
  // With nanosecond precision the tv_usec field carries nanoseconds.
  hdr.ts.tv_usec = static_cast<suseconds_t>(time_ns % 1000000000u);
  hdr.caplen = hdr.len = static_cast<bpf_u_int32>(frame.size());
  pcap_dump(reinterpret_cast<u_char*>(dumper_), &hdr, frame.data());
}

void PcapWriter::write(const rte_mbuf* m, uint64_t time_ns) {
  FrameBytes bytes(m);
  scratch_.resize(bytes.size());
  size_t at = 0;
  bytes.for_each_piece(0, bytes.size(), [&](const uint8_t* p, size_t n) {
    std::copy(p, p + n, scratch_.begin() + static_cast<ptrdiff_t>(at));
    at += n;
  });
  write(std::span<const uint8_t>(scratch_.data(), at), time_ns);
}

std::vector<CapturedFrame> read_pcap(const std::string& path, std::string* error) {
  PcapReader reader(path);
  std::vector<CapturedFrame> frames;
  if (!reader.ok()) {
    *error = reader.error();
    return frames;
  }
  if (!reader.is_ethernet()) {
    *error = path + ": not an Ethernet capture";
    return frames;
  }
  CapturedFrame f;
  while (reader.next(&f)) frames.push_back(std::move(f));
  if (!reader.error().empty()) {
    *error = reader.error();
    frames.clear();
  }
  return frames;
}

}  // namespace droce::net
