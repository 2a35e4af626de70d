// IB CM MADs (cm/mad.h): a REQ laid out byte by byte as a Linux 6.1 rdma_cm puts it on RoCEv2
// (../shared/notes/rdma-cm.md 3.4-3.6) decodes to its fields and encodes back to the same bytes;
// every field of every message survives a round trip alone at its widest value (so no two
// fields share a bit); malformed MADs are refused with their reason; the IP CM header and
// service IDs as rdma_cm writes them.

#include "cm/mad.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <vector>

#include "net/addr.h"

namespace droce::cm {
namespace {

net::IpAddr v4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  return net::ipv4_mapped((uint32_t{a} << 24) | (uint32_t{b} << 16) | (uint32_t{c} << 8) | d);
}

// The REQ a 6.1 kernel's rdma_cm sends from 10.77.0.1:40000 to 10.77.0.2:7174 (rping's port),
// written by hand at the IBTA offsets, independent of the encoder.
Mad kernel_req() {
  Mad m{};
  m[0] = 1;     // base version
  m[1] = 0x07;  // class CM
  m[2] = 2;     // class version
  m[3] = 0x03;  // Send
  const uint8_t tid[8] = {0x00, 0x00, 0x00, 0x02, 0x1c, 0x2d, 0x3e, 0x4f};
  std::memcpy(&m[8], tid, 8);
  m[16] = 0x00;
  m[17] = 0x10;  // ConnectRequest
  uint8_t* r = m.data() + 24;
  const uint8_t comm_id[4] = {0x1c, 0x2d, 0x3e, 0x4f};
  std::memcpy(r + 0, comm_id, 4);
  const uint8_t sid[8] = {0, 0, 0, 0, 0x01, 0x06, 0x1c, 0x06};  // PS_TCP, port 7174
  std::memcpy(r + 8, sid, 8);
  const uint8_t guid[8] = {0x02, 0xdb, 0x02, 0xff, 0xfe, 0x7b, 0x39, 0xf6};
  std::memcpy(r + 16, guid, 8);
  r[32] = 0x00; r[33] = 0x00; r[34] = 0x11;  // local QPN 17
  r[35] = 1;                                 // responder resources
  r[39] = 1;                                 // initiator depth
  r[43] = (20 << 3) | (0 << 1) | 1;          // remote CM response timeout 20, RC, flow control
  r[44] = 0xab; r[45] = 0xcd; r[46] = 0xef;  // starting PSN
  r[47] = (20 << 3) | 7;                     // local CM response timeout 20, retry count 7
  r[48] = 0xff; r[49] = 0xff;                // P_Key
  r[50] = (3 << 4) | (0 << 3) | 7;           // MTU 1024, no RDC, RNR retry 7
  r[51] = (15 << 4);                         // max CM retries 15, no SRQ
  r[52] = 0xff; r[53] = 0xff; r[54] = 0xff; r[55] = 0xff;  // permissive LIDs
  const net::IpAddr a = v4(10, 77, 0, 1), b = v4(10, 77, 0, 2);
  std::memcpy(r + 56, a.data(), 16);
  std::memcpy(r + 72, b.data(), 16);
  // Flow label (40000 * 31 + 7174) & 0xFFFFF = 0x2FEA6 (20 bits), 6 reserved bits, rate 0.
  const uint32_t flow = (40000u * 31 + 7174) & 0xFFFFF;
  r[88] = static_cast<uint8_t>(flow >> 12);
  r[89] = static_cast<uint8_t>(flow >> 4);
  r[90] = static_cast<uint8_t>(flow << 4);
  r[91] = 0;
  r[92] = 0;         // traffic class
  r[93] = 64;        // hop limit
  r[94] = 0;         // SL 0, not subnet local
  r[95] = (17 << 3); // local ACK timeout 17
  // Private data: the IP CM header, then the consumer's bytes.
  uint8_t* pd = r + 140;
  pd[0] = 0;
  pd[1] = 0x40;
  pd[2] = 0x9c; pd[3] = 0x40;  // source port 40000
  pd[4 + 12] = 10; pd[4 + 13] = 77; pd[4 + 14] = 0; pd[4 + 15] = 1;
  pd[20 + 12] = 10; pd[20 + 13] = 77; pd[20 + 14] = 0; pd[20 + 15] = 2;
  for (int i = 0; i < 56; ++i) pd[36 + i] = static_cast<uint8_t>(0xa0 + i);
  return m;
}

TEST(CmMad, AKernelReqDecodesToItsFieldsAndEncodesBackToTheSameBytes) {
  const Mad bytes = kernel_req();
  MadHeader h;
  Message msg;
  ASSERT_EQ(decode(bytes, &h, &msg), MadError::ok);
  EXPECT_EQ(h.tid, 0x000000021c2d3e4fULL);
  EXPECT_EQ(h.attr_id, AttrId::req);
  ASSERT_TRUE(std::holds_alternative<Req>(msg));
  const Req& q = std::get<Req>(msg);
  EXPECT_EQ(q.local_comm_id, 0x1c2d3e4fu);
  EXPECT_EQ(q.service_id, ip_service_id(PortSpace::tcp, 7174));
  EXPECT_EQ(q.local_ca_guid, 0x02db02fffe7b39f6ULL);
  EXPECT_EQ(q.local_qpn, 17u);
  EXPECT_EQ(q.responder_resources, 1);
  EXPECT_EQ(q.initiator_depth, 1);
  EXPECT_EQ(q.remote_cm_response_timeout, 20);
  EXPECT_EQ(q.transport, TransportType::rc);
  EXPECT_TRUE(q.end_to_end_flow_control);
  EXPECT_EQ(q.starting_psn, 0xabcdefu);
  EXPECT_EQ(q.local_cm_response_timeout, 20);
  EXPECT_EQ(q.retry_count, 7);
  EXPECT_EQ(q.pkey, 0xFFFF);
  EXPECT_EQ(q.path_mtu, 3);
  EXPECT_EQ(q.rnr_retry_count, 7);
  EXPECT_EQ(q.max_cm_retries, 15);
  EXPECT_FALSE(q.srq);
  EXPECT_EQ(q.primary.local_lid, 0xFFFF);
  EXPECT_EQ(q.primary.remote_lid, 0xFFFF);
  EXPECT_EQ(q.primary.local_gid, v4(10, 77, 0, 1));
  EXPECT_EQ(q.primary.remote_gid, v4(10, 77, 0, 2));
  EXPECT_EQ(q.primary.flow_label, (40000u * 31 + 7174) & 0xFFFFF);
  EXPECT_EQ(q.primary.hop_limit, 64);
  EXPECT_FALSE(q.primary.subnet_local);
  EXPECT_EQ(q.primary.local_ack_timeout, 17);
  EXPECT_EQ(q.alternate, (ReqPath{0, 0}));
  IpCmHeader ip;
  ASSERT_TRUE(decode_ip_cm_header(q.private_data, &ip));
  EXPECT_EQ(ip.ip_version, 4);
  EXPECT_EQ(ip.src_port, 40000);
  EXPECT_EQ(ip.src, v4(10, 77, 0, 1));
  EXPECT_EQ(ip.dst, v4(10, 77, 0, 2));
  EXPECT_EQ(q.private_data[36], 0xa0);
  EXPECT_EQ(q.private_data[91], 0xa0 + 55);

  Mad again{};
  encode(h, msg, &again);
  EXPECT_EQ(again, bytes);
}

// One message with one field at its widest value, the rest zero: it must come back equal, which
// fails when two fields overlap or a field is cut short.
template <typename M>
void expect_round_trip(const M& m, const char* what) {
  MadHeader h;
  h.tid = 0x0123456789abcdefULL;
  h.attr_mod = 0xdeadbeef;
  Mad bytes{};
  encode(h, Message{m}, &bytes);
  MadHeader h2;
  Message back;
  ASSERT_EQ(decode(bytes, &h2, &back), MadError::ok) << what;
  EXPECT_EQ(h2.tid, h.tid) << what;
  EXPECT_EQ(h2.attr_mod, h.attr_mod) << what;
  EXPECT_EQ(h2.attr_id, attr_of(Message{m})) << what;
  ASSERT_TRUE(std::holds_alternative<M>(back)) << what;
  EXPECT_TRUE(std::get<M>(back) == m) << what;
}

template <typename M>
void each_field_alone(const std::vector<std::pair<const char*, std::function<void(M&)>>>& fields) {
  for (const auto& [name, set] : fields) {
    M m{};
    if constexpr (requires { m.primary; }) {
      m.primary = ReqPath{0, 0};
      m.pkey = 0;
    }
    if constexpr (requires { m.pkey; }) m.pkey = 0;
    set(m);
    expect_round_trip(m, name);
  }
}

void fill(uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(0xff - i);
}

TEST(CmMad, EveryReqFieldRoundTripsAloneAtItsWidestValue) {
  auto path = [](ReqPath& p) {
    p.local_lid = 0xffff;
    p.remote_lid = 0xfffe;
    fill(p.local_gid.data(), 16);
    fill(p.remote_gid.data(), 16);
  };
  each_field_alone<Req>({
      {"local_comm_id", [](Req& m) { m.local_comm_id = 0xffffffff; }},
      {"vendor_id", [](Req& m) { m.vendor_id = 0xffffff; }},
      {"service_id", [](Req& m) { m.service_id = ~0ULL; }},
      {"local_ca_guid", [](Req& m) { m.local_ca_guid = ~0ULL; }},
      {"local_qkey", [](Req& m) { m.local_qkey = 0xffffffff; }},
      {"local_qpn", [](Req& m) { m.local_qpn = 0xffffff; }},
      {"responder_resources", [](Req& m) { m.responder_resources = 0xff; }},
      {"local_eecn", [](Req& m) { m.local_eecn = 0xffffff; }},
      {"initiator_depth", [](Req& m) { m.initiator_depth = 0xff; }},
      {"remote_eecn", [](Req& m) { m.remote_eecn = 0xffffff; }},
      {"remote_cm_response_timeout", [](Req& m) { m.remote_cm_response_timeout = 31; }},
      {"transport", [](Req& m) { m.transport = TransportType::xrc; }},
      {"end_to_end_flow_control", [](Req& m) { m.end_to_end_flow_control = true; }},
      {"starting_psn", [](Req& m) { m.starting_psn = 0xffffff; }},
      {"local_cm_response_timeout", [](Req& m) { m.local_cm_response_timeout = 31; }},
      {"retry_count", [](Req& m) { m.retry_count = 7; }},
      {"pkey", [](Req& m) { m.pkey = 0xffff; }},
      {"path_mtu", [](Req& m) { m.path_mtu = 15; }},
      {"rdc_exists", [](Req& m) { m.rdc_exists = true; }},
      {"rnr_retry_count", [](Req& m) { m.rnr_retry_count = 7; }},
      {"max_cm_retries", [](Req& m) { m.max_cm_retries = 15; }},
      {"srq", [](Req& m) { m.srq = true; }},
      {"extended_transport", [](Req& m) { m.extended_transport = 7; }},
      {"primary lids and gids", [&](Req& m) { path(m.primary); }},
      {"primary flow_label", [](Req& m) { m.primary.flow_label = 0xfffff; }},
      {"primary packet_rate", [](Req& m) { m.primary.packet_rate = 63; }},
      {"primary traffic_class", [](Req& m) { m.primary.traffic_class = 0xff; }},
      {"primary hop_limit", [](Req& m) { m.primary.hop_limit = 0xff; }},
      {"primary sl", [](Req& m) { m.primary.sl = 15; }},
      {"primary subnet_local", [](Req& m) { m.primary.subnet_local = true; }},
      {"primary local_ack_timeout", [](Req& m) { m.primary.local_ack_timeout = 31; }},
      {"alternate lids and gids", [&](Req& m) { path(m.alternate); }},
      {"alternate flow_label", [](Req& m) { m.alternate.flow_label = 0xfffff; }},
      {"alternate packet_rate", [](Req& m) { m.alternate.packet_rate = 63; }},
      {"alternate sl and subnet_local", [](Req& m) { m.alternate.sl = 15; m.alternate.subnet_local = true; }},
      {"alternate local_ack_timeout", [](Req& m) { m.alternate.local_ack_timeout = 31; }},
      {"sap_supported", [](Req& m) { m.sap_supported = true; }},
      {"private_data", [](Req& m) { fill(m.private_data.data(), m.private_data.size()); }},
  });
}

TEST(CmMad, EveryFieldOfTheOtherMessagesRoundTripsAlone) {
  each_field_alone<Rep>({
      {"ids", [](Rep& m) { m.local_comm_id = 0xffffffff; m.remote_comm_id = 0xfffffffe; }},
      {"local_qkey", [](Rep& m) { m.local_qkey = 0xffffffff; }},
      {"local_qpn", [](Rep& m) { m.local_qpn = 0xffffff; }},
      {"vendor_id", [](Rep& m) { m.vendor_id = 0xffffff; }},
      {"local_eecn", [](Rep& m) { m.local_eecn = 0xffffff; }},
      {"starting_psn", [](Rep& m) { m.starting_psn = 0xffffff; }},
      {"resources", [](Rep& m) { m.responder_resources = 0xff; m.initiator_depth = 0xfe; }},
      {"target_ack_delay", [](Rep& m) { m.target_ack_delay = 31; }},
      {"failover_accepted", [](Rep& m) { m.failover_accepted = 3; }},
      {"end_to_end_flow_control", [](Rep& m) { m.end_to_end_flow_control = true; }},
      {"rnr_retry_count", [](Rep& m) { m.rnr_retry_count = 7; }},
      {"srq", [](Rep& m) { m.srq = true; }},
      {"local_ca_guid", [](Rep& m) { m.local_ca_guid = ~0ULL; }},
      {"private_data", [](Rep& m) { fill(m.private_data.data(), m.private_data.size()); }},
  });
  each_field_alone<Rej>({
      {"ids", [](Rej& m) { m.local_comm_id = 0xffffffff; m.remote_comm_id = 0xfffffffe; }},
      {"message_rejected", [](Rej& m) { m.message_rejected = MsgRef::other; }},
      {"ari_length", [](Rej& m) { m.ari_length = kRejAriMax; }},
      {"reason", [](Rej& m) { m.reason = 0xffff; }},
      {"ari", [](Rej& m) { fill(m.ari.data(), m.ari.size()); }},
      {"private_data", [](Rej& m) { fill(m.private_data.data(), m.private_data.size()); }},
  });
  each_field_alone<Mra>({
      {"ids", [](Mra& m) { m.local_comm_id = 0xffffffff; m.remote_comm_id = 0xfffffffe; }},
      {"message_mraed", [](Mra& m) { m.message_mraed = MsgRef::other; }},
      {"service_timeout", [](Mra& m) { m.service_timeout = 31; }},
      {"private_data", [](Mra& m) { fill(m.private_data.data(), m.private_data.size()); }},
  });
  each_field_alone<Rtu>({
      {"ids", [](Rtu& m) { m.local_comm_id = 0xffffffff; m.remote_comm_id = 0xfffffffe; }},
      {"private_data", [](Rtu& m) { fill(m.private_data.data(), m.private_data.size()); }},
  });
  each_field_alone<Dreq>({
      {"ids", [](Dreq& m) { m.local_comm_id = 0xffffffff; m.remote_comm_id = 0xfffffffe; }},
      {"remote_qpn", [](Dreq& m) { m.remote_qpn = 0xffffff; }},
      {"private_data", [](Dreq& m) { fill(m.private_data.data(), m.private_data.size()); }},
  });
  each_field_alone<Drep>({
      {"ids", [](Drep& m) { m.local_comm_id = 0xffffffff; m.remote_comm_id = 0xfffffffe; }},
      {"private_data", [](Drep& m) { fill(m.private_data.data(), m.private_data.size()); }},
  });
  each_field_alone<SidrReq>({
      {"request_id", [](SidrReq& m) { m.request_id = 0xffffffff; }},
      {"pkey", [](SidrReq& m) { m.pkey = 0xffff; }},
      {"service_id", [](SidrReq& m) { m.service_id = ~0ULL; }},
      {"private_data", [](SidrReq& m) { fill(m.private_data.data(), m.private_data.size()); }},
  });
  each_field_alone<SidrRep>({
      {"request_id", [](SidrRep& m) { m.request_id = 0xffffffff; }},
      {"status", [](SidrRep& m) { m.status = 0xff; }},
      {"info_length", [](SidrRep& m) { m.info_length = kSidrRepInfoMax; }},
      {"qpn", [](SidrRep& m) { m.qpn = 0xffffff; }},
      {"service_id", [](SidrRep& m) { m.service_id = ~0ULL; }},
      {"qkey", [](SidrRep& m) { m.qkey = 0xffffffff; }},
      {"info", [](SidrRep& m) { fill(m.info.data(), m.info.size()); }},
      {"private_data", [](SidrRep& m) { fill(m.private_data.data(), m.private_data.size()); }},
  });
}

// Where each field lands, written out from the IBTA tables (12-106 to 12-120) apart from the
// codec's own field lists: one field at its widest value, and exactly these bits set in the 232
// bytes after the header. (The round trips above cannot see a field described at the wrong place
// in both directions; this can.)
using Bytes = std::vector<std::pair<size_t, std::vector<uint8_t>>>;
template <typename M>
void expect_layout(const char* what, const M& m, const Bytes& where) {
  std::array<uint8_t, kMadSize - kMadHeaderSize> want{};
  for (const auto& [at, bytes] : where)
    for (size_t i = 0; i < bytes.size(); ++i) want[at + i] = bytes[i];
  Mad b{};
  encode(MadHeader{}, Message{m}, &b);
  std::array<uint8_t, kMadSize - kMadHeaderSize> got{};
  std::memcpy(got.data(), b.data() + kMadHeaderSize, got.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_EQ(got[i], want[i]) << what << ": byte " << i;
}

template <typename M>
M zeroed() {
  M m{};
  if constexpr (requires { m.pkey; }) m.pkey = 0;
  if constexpr (requires { m.primary; }) m.primary = ReqPath{0, 0};
  return m;
}

TEST(CmMad, EachFieldSitsWhereTheIbtaTablesPutIt) {
  const std::vector<uint8_t> ff4 = {0xff, 0xff, 0xff, 0xff}, ff3 = {0xff, 0xff, 0xff}, ff2 = {0xff, 0xff};
  const std::vector<uint8_t> ff8(8, 0xff), ff16(16, 0xff);
  auto req = [&](const char* what, auto set, const Bytes& where) {
    Req m = zeroed<Req>();
    set(m);
    expect_layout(what, m, where);
  };
  req("REQ local comm ID", [](Req& m) { m.local_comm_id = ~0u; }, {{0, ff4}});
  req("REQ vendor ID", [](Req& m) { m.vendor_id = 0xffffff; }, {{5, ff3}});
  req("REQ service ID", [](Req& m) { m.service_id = ~0ull; }, {{8, ff8}});
  req("REQ local CA GUID", [](Req& m) { m.local_ca_guid = ~0ull; }, {{16, ff8}});
  req("REQ local Q_Key", [](Req& m) { m.local_qkey = ~0u; }, {{28, ff4}});
  req("REQ local QPN", [](Req& m) { m.local_qpn = 0xffffff; }, {{32, ff3}});
  req("REQ responder resources", [](Req& m) { m.responder_resources = 0xff; }, {{35, {0xff}}});
  req("REQ local EECN", [](Req& m) { m.local_eecn = 0xffffff; }, {{36, ff3}});
  req("REQ initiator depth", [](Req& m) { m.initiator_depth = 0xff; }, {{39, {0xff}}});
  req("REQ remote EECN", [](Req& m) { m.remote_eecn = 0xffffff; }, {{40, ff3}});
  req("REQ remote CM response timeout", [](Req& m) { m.remote_cm_response_timeout = 31; }, {{43, {0xf8}}});
  req("REQ transport type", [](Req& m) { m.transport = TransportType::xrc; }, {{43, {0x06}}});
  req("REQ end-to-end flow control", [](Req& m) { m.end_to_end_flow_control = true; }, {{43, {0x01}}});
  req("REQ starting PSN", [](Req& m) { m.starting_psn = 0xffffff; }, {{44, ff3}});
  req("REQ local CM response timeout", [](Req& m) { m.local_cm_response_timeout = 31; }, {{47, {0xf8}}});
  req("REQ retry count", [](Req& m) { m.retry_count = 7; }, {{47, {0x07}}});
  req("REQ P_Key", [](Req& m) { m.pkey = 0xffff; }, {{48, ff2}});
  req("REQ path MTU", [](Req& m) { m.path_mtu = 15; }, {{50, {0xf0}}});
  req("REQ RDC exists", [](Req& m) { m.rdc_exists = true; }, {{50, {0x08}}});
  req("REQ RNR retry count", [](Req& m) { m.rnr_retry_count = 7; }, {{50, {0x07}}});
  req("REQ max CM retries", [](Req& m) { m.max_cm_retries = 15; }, {{51, {0xf0}}});
  req("REQ SRQ", [](Req& m) { m.srq = true; }, {{51, {0x08}}});
  req("REQ extended transport", [](Req& m) { m.extended_transport = 7; }, {{51, {0x07}}});
  for (const size_t base : {size_t{52}, size_t{96}}) {
    auto path = [&](Req& m) -> ReqPath& { return base == 52 ? m.primary : m.alternate; };
    req("path LIDs", [&](Req& m) { path(m).local_lid = 0xffff; path(m).remote_lid = 0xffff; }, {{base, ff4}});
    req("path GIDs", [&](Req& m) { path(m).local_gid.fill(0xff); path(m).remote_gid.fill(0xff); },
        {{base + 4, ff16}, {base + 20, ff16}});
    req("path flow label", [&](Req& m) { path(m).flow_label = 0xfffff; }, {{base + 36, {0xff, 0xff, 0xf0}}});
    req("path packet rate", [&](Req& m) { path(m).packet_rate = 63; }, {{base + 39, {0x3f}}});
    req("path traffic class", [&](Req& m) { path(m).traffic_class = 0xff; }, {{base + 40, {0xff}}});
    req("path hop limit", [&](Req& m) { path(m).hop_limit = 0xff; }, {{base + 41, {0xff}}});
    req("path SL", [&](Req& m) { path(m).sl = 15; }, {{base + 42, {0xf0}}});
    req("path subnet local", [&](Req& m) { path(m).subnet_local = true; }, {{base + 42, {0x08}}});
    req("path local ACK timeout", [&](Req& m) { path(m).local_ack_timeout = 31; }, {{base + 43, {0xf8}}});
  }
  req("REQ SAP supported", [](Req& m) { m.sap_supported = true; }, {{139, {0x04}}});

  auto rep = [&](const char* what, auto set, const Bytes& where) {
    Rep m{};
    set(m);
    expect_layout(what, m, where);
  };
  rep("REP comm IDs", [](Rep& m) { m.local_comm_id = ~0u; m.remote_comm_id = ~0u; }, {{0, ff4}, {4, ff4}});
  rep("REP local Q_Key", [](Rep& m) { m.local_qkey = ~0u; }, {{8, ff4}});
  rep("REP local QPN", [](Rep& m) { m.local_qpn = 0xffffff; }, {{12, ff3}});
  rep("REP vendor ID", [](Rep& m) { m.vendor_id = 0xffffff; }, {{15, {0xff}}, {19, {0xff}}, {23, {0xff}}});
  rep("REP local EECN", [](Rep& m) { m.local_eecn = 0xffffff; }, {{16, ff3}});
  rep("REP starting PSN", [](Rep& m) { m.starting_psn = 0xffffff; }, {{20, ff3}});
  rep("REP resources", [](Rep& m) { m.responder_resources = 0xff; m.initiator_depth = 0xff; }, {{24, ff2}});
  rep("REP target ACK delay", [](Rep& m) { m.target_ack_delay = 31; }, {{26, {0xf8}}});
  rep("REP failover accepted", [](Rep& m) { m.failover_accepted = 3; }, {{26, {0x06}}});
  rep("REP end-to-end flow control", [](Rep& m) { m.end_to_end_flow_control = true; }, {{26, {0x01}}});
  rep("REP RNR retry count", [](Rep& m) { m.rnr_retry_count = 7; }, {{27, {0xe0}}});
  rep("REP SRQ", [](Rep& m) { m.srq = true; }, {{27, {0x10}}});
  rep("REP local CA GUID", [](Rep& m) { m.local_ca_guid = ~0ull; }, {{28, ff8}});

  expect_layout("REJ", Rej{~0u, ~0u, MsgRef::other, kRejAriMax, 0xffff, {}, {}},
                {{0, ff4}, {4, ff4}, {8, {0x80}}, {9, {0x90}}, {10, ff2}});
  expect_layout("MRA", Mra{~0u, ~0u, MsgRef::other, 31, {}}, {{0, ff4}, {4, ff4}, {8, {0x80}}, {9, {0xf8}}});
  expect_layout("RTU", Rtu{~0u, ~0u, {}}, {{0, ff4}, {4, ff4}});
  expect_layout("DREQ", Dreq{~0u, ~0u, 0xffffff, {}}, {{0, ff4}, {4, ff4}, {8, ff3}});
  expect_layout("DREP", Drep{~0u, ~0u, {}}, {{0, ff4}, {4, ff4}});
  expect_layout("SIDR_REQ", SidrReq{~0u, 0xffff, ~0ull, {}}, {{0, ff4}, {4, ff2}, {8, ff8}});
  expect_layout("SIDR_REP", SidrRep{~0u, 0xff, kSidrRepInfoMax, 0xffffff, ~0ull, ~0u, {}, {}},
                {{0, ff4}, {4, {0xff, 0x48}}, {8, ff3}, {12, ff8}, {20, ff4}});
  // Private data and ARI/additional info start where the tables say.
  Rej rej{};
  rej.ari[0] = 0xa1;
  rej.private_data[0] = 0xd1;
  expect_layout("REJ ARI and private data", rej, {{12, {0xa1}}, {84, {0xd1}}});
  SidrRep sr{};
  sr.info[0] = 0xa1;
  sr.private_data[0] = 0xd1;
  expect_layout("SIDR_REP info and private data", sr, {{24, {0xa1}}, {96, {0xd1}}});
  Req q = zeroed<Req>();
  q.private_data[0] = 0xd1;
  expect_layout("REQ private data", q, {{140, {0xd1}}});
  Mra mra{};
  mra.private_data[0] = 0xd1;
  expect_layout("MRA private data", mra, {{10, {0xd1}}});
  Dreq dreq{};
  dreq.private_data[0] = 0xd1;
  expect_layout("DREQ private data", dreq, {{12, {0xd1}}});
  Rep rp{};
  rp.private_data[0] = 0xd1;
  expect_layout("REP private data", rp, {{36, {0xd1}}});
  SidrReq sq{};
  sq.pkey = 0;
  sq.private_data[0] = 0xd1;
  expect_layout("SIDR_REQ private data", sq, {{16, {0xd1}}});
  expect_layout("RTU private data", Rtu{0, 0, {0xd1}}, {{8, {0xd1}}});
}

TEST(CmMad, FieldsLandAtTheIbtaOffsets) {
  // A few fields whose place is easy to get wrong, checked in the bytes.
  Rep rep;
  rep.vendor_id = 0x112233;  // split over bytes 15, 19 and 23
  rep.local_qpn = 0xaabbcc;
  rep.starting_psn = 0x445566;
  rep.target_ack_delay = 0x1f;
  rep.srq = true;
  Mad b{};
  encode(MadHeader{}, Message{rep}, &b);
  const uint8_t* r = b.data() + 24;
  EXPECT_EQ(r[12], 0xaa);
  EXPECT_EQ(r[14], 0xcc);
  EXPECT_EQ(r[15], 0x11);
  EXPECT_EQ(r[19], 0x22);
  EXPECT_EQ(r[20], 0x44);
  EXPECT_EQ(r[23], 0x33);
  EXPECT_EQ(r[26], 0xf8);  // target ACK delay: the top 5 bits
  EXPECT_EQ(r[27], 0x10);  // SRQ: bit 3
  Rej rej;
  rej.message_rejected = MsgRef::rep;
  rej.ari_length = 16;
  rej.reason = uint16_t(RejReason::consumer_defined);
  encode(MadHeader{}, Message{rej}, &b);
  EXPECT_EQ(b[16], 0x00);
  EXPECT_EQ(b[17], 0x12);        // ConnectReject
  EXPECT_EQ(b[24 + 8], 0x40);    // message rejected 1: the top 2 bits
  EXPECT_EQ(b[24 + 9], 16 << 1); // ARI length: the top 7 bits
  EXPECT_EQ(b[24 + 11], 28);
  Dreq dreq;
  dreq.remote_qpn = 0x123456;
  encode(MadHeader{}, Message{dreq}, &b);
  EXPECT_EQ(b[24 + 8], 0x12);
  EXPECT_EQ(b[24 + 10], 0x56);
  EXPECT_EQ(b[24 + 11], 0x00);
  EXPECT_EQ(b[0], 1);
  EXPECT_EQ(b[1], 7);
  EXPECT_EQ(b[2], 2);
  EXPECT_EQ(b[3], 3);
}

TEST(CmMad, MalformedMadsAreRefusedWithTheirReason) {
  const Mad good = kernel_req();
  MadHeader h;
  Message m;
  EXPECT_EQ(decode(std::span<const uint8_t>(good.data(), 255), &h, &m), MadError::short_mad);
  EXPECT_EQ(decode(std::span<const uint8_t>(good.data(), 0), &h, &m), MadError::short_mad);
  auto with = [&](size_t at, uint8_t v) {
    Mad b = good;
    b[at] = v;
    return decode(b, &h, &m);
  };
  EXPECT_EQ(with(0, 2), MadError::bad_base_version);
  EXPECT_EQ(with(1, 0x04), MadError::not_cm);      // SA
  EXPECT_EQ(with(2, 1), MadError::bad_class_version);
  EXPECT_EQ(with(3, 0x81), MadError::bad_method);  // GetResp
  EXPECT_EQ(with(17, 0x19), MadError::unknown_attribute);  // LAP: not on RoCE
  EXPECT_EQ(with(17, 0x1A), MadError::unknown_attribute);  // APR
  EXPECT_EQ(with(17, 0x01), MadError::unknown_attribute);  // ClassPortInfo
  {
    Mad b = good;
    b[16] = 0x99;
    EXPECT_EQ(decode(b, &h, &m), MadError::unknown_attribute);
  }
  // Lengths past their fields.
  Rej rej;
  Mad b{};
  encode(MadHeader{}, Message{rej}, &b);
  b[24 + 9] = static_cast<uint8_t>(73 << 1);
  EXPECT_EQ(decode(b, &h, &m), MadError::bad_field);
  b[24 + 9] = 0;
  b[24 + 8] = 0xc0;  // message rejected 3: reserved
  EXPECT_EQ(decode(b, &h, &m), MadError::bad_field);
  Mra mra;
  encode(MadHeader{}, Message{mra}, &b);
  b[24 + 8] = 0xc0;
  EXPECT_EQ(decode(b, &h, &m), MadError::bad_field);
  SidrRep sr;
  encode(MadHeader{}, Message{sr}, &b);
  b[24 + 5] = 73;
  EXPECT_EQ(decode(b, &h, &m), MadError::bad_field);
  // A longer buffer (a receive with room to spare) is read as its first 256 bytes.
  std::vector<uint8_t> longer(good.begin(), good.end());
  longer.resize(300, 0xee);
  EXPECT_EQ(decode(longer, &h, &m), MadError::ok);
  EXPECT_STREQ(to_string(MadError::bad_method), "bad_method");
  EXPECT_STREQ(attr_name(0x13), "ConnectReply");
}

TEST(CmMad, IpCmHeaderAndServiceIdsAsRdmaCmWritesThem) {
  EXPECT_EQ(ip_service_id(PortSpace::tcp, 7174), 0x0000000001061c06ULL);
  EXPECT_EQ(ip_service_id(PortSpace::udp, 1), 0x0000000001110001ULL);
  PortSpace ps{};
  uint16_t port = 0;
  ASSERT_TRUE(parse_ip_service_id(0x0000000001110050ULL, &ps, &port));
  EXPECT_EQ(ps, PortSpace::udp);
  EXPECT_EQ(port, 0x50);
  EXPECT_FALSE(parse_ip_service_id(0x0000000002061c06ULL, &ps, &port));  // not the IP CM prefix
  EXPECT_FALSE(parse_ip_service_id(0x1000000001061c06ULL, &ps, &port));

  // IPv4: 12 zero bytes, then the address (not ::ffff:-mapped on the wire).
  IpCmHeader h;
  h.ip_version = 4;
  h.src_port = 0x1234;
  h.src = v4(192, 168, 1, 2);
  h.dst = v4(192, 168, 1, 3);
  std::array<uint8_t, kIpCmHeaderSize> b{};
  encode_ip_cm_header(h, b);
  EXPECT_EQ(b[0], 0);
  EXPECT_EQ(b[1], 0x40);
  EXPECT_EQ(b[2], 0x12);
  EXPECT_EQ(b[3], 0x34);
  for (int i = 4; i < 16; ++i) EXPECT_EQ(b[i], 0) << i;
  EXPECT_EQ(b[16], 192);
  EXPECT_EQ(b[19], 2);
  for (int i = 20; i < 32; ++i) EXPECT_EQ(b[i], 0) << i;
  EXPECT_EQ(b[35], 3);
  IpCmHeader back;
  ASSERT_TRUE(decode_ip_cm_header(b, &back));
  EXPECT_EQ(back, h);
  // IPv6 as is.
  h.ip_version = 6;
  h.src = {0xfd, 0, 0, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  h.dst = {0xfd, 0, 0, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
  encode_ip_cm_header(h, b);
  EXPECT_EQ(b[1], 0x60);
  EXPECT_EQ(b[4], 0xfd);
  ASSERT_TRUE(decode_ip_cm_header(b, &back));
  EXPECT_EQ(back, h);
  // Refused: another header version, an IP version that is neither, too short.
  b[0] = 1;
  EXPECT_FALSE(decode_ip_cm_header(b, &back));
  b[0] = 0;
  b[1] = 0x50;
  EXPECT_FALSE(decode_ip_cm_header(b, &back));
  b[1] = 0x60;
  EXPECT_FALSE(decode_ip_cm_header(std::span<const uint8_t>(b.data(), 35), &back));
}

TEST(CmMad, TimeoutsAsTheKernelComputesThem) {
  EXPECT_EQ(cm_timeout_ms(20), 4096u);  // rdma_cm's CM response timeout
  EXPECT_EQ(cm_timeout_ms(16), 256u);   // the RoCE packet life time
  EXPECT_EQ(2 * cm_timeout_ms(16) + cm_timeout_ms(20), 4608u);  // a REQ's retransmission period
  EXPECT_EQ(cm_timeout_ms(24), 65536u);  // the MRA a 6.1 passive side sends
  EXPECT_EQ(cm_timeout_ms(0), 1u);
}

}  // namespace
}  // namespace droce::cm

namespace droce::cm {
namespace {

TEST(CmMad, DescribeNamesTheMessageAndWhatIdentifiesIt) {
  const Mad req = kernel_req();
  EXPECT_EQ(describe_mad(req),
            "ConnectRequest tid=0x21c2d3e4f local_comm_id=0x1c2d3e4f service_id=0x1061c06 (TCP port 7174) "
            "qpn=0x11 psn=0xabcdef mtu=1024");
  Rej rej;
  rej.local_comm_id = 0;
  rej.remote_comm_id = 0x1c2d3e4f;
  rej.reason = 8;
  MadHeader h;
  h.tid = 0x21c2d3e4f;
  Mad m;
  encode(h, Message{rej}, &m);
  EXPECT_EQ(describe_mad(m), "ConnectReject tid=0x21c2d3e4f local_comm_id=0x0 remote_comm_id=0x1c2d3e4f reason=8");
  m[2] = 9;  // class version
  EXPECT_EQ(describe_mad(m).rfind("malformed CM MAD: ", 0), 0u);
}

}  // namespace
}  // namespace droce::cm
