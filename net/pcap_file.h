#pragma once
// Reading and writing Ethernet captures (libpcap format), for the decoder,
// the demo, the tests and, later, droce's capture command.
//
// Control path only: these call libpcap and stdio and allocate.

#include <rte_mbuf.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

typedef struct pcap pcap_t;
typedef struct pcap_dumper pcap_dumper_t;

namespace droce::net {

struct CapturedFrame {
  uint64_t time_ns = 0;
  uint32_t wire_len = 0;  ///< original length; bytes.size() is what was captured
  std::vector<uint8_t> bytes;
};

class PcapReader {
 public:
  /// Opens `path`. On failure ok() is false and error() says why.
  explicit PcapReader(const std::string& path);
  ~PcapReader();
  PcapReader(const PcapReader&) = delete;
  PcapReader& operator=(const PcapReader&) = delete;

  bool ok() const { return handle_ != nullptr; }
  const std::string& error() const { return error_; }
  /// True when the capture's link type is Ethernet (DLT_EN10MB).
  bool is_ethernet() const;

  /// The next frame, or false at the end (or on a read error: see error()).
  bool next(CapturedFrame* out);

 private:
  pcap_t* handle_ = nullptr;
  std::string error_;
};

class PcapWriter {
 public:
  /// Creates or truncates `path` as an Ethernet capture.
  explicit PcapWriter(const std::string& path);
  ~PcapWriter();
  PcapWriter(const PcapWriter&) = delete;
  PcapWriter& operator=(const PcapWriter&) = delete;

  bool ok() const { return dumper_ != nullptr; }
  const std::string& error() const { return error_; }

  void write(std::span<const uint8_t> frame, uint64_t time_ns);
  /// Writes an mbuf chain as one frame (its segments joined).
  void write(const rte_mbuf* m, uint64_t time_ns);

 private:
  pcap_t* dead_ = nullptr;
  pcap_dumper_t* dumper_ = nullptr;
  std::string error_;
  std::vector<uint8_t> scratch_;
};

/// Every frame of a capture, or an empty vector and `*error` set.
std::vector<CapturedFrame> read_pcap(const std::string& path, std::string* error);

}  // namespace droce::net
