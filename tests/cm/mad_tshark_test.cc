// tshark as an independent oracle for droce's CM MADs: each message encoded by cm/mad.h, carried
// as the kernel carries it (RoCEv2 UD SEND-only to QP 1, DETH Q_Key 0x80010000, source QP 1), is
// read by Wireshark's InfiniBand dissector as IB CM with the fields droce meant, and without a
// malformed-packet or error note. Skipped when tshark is missing.

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <string>
#include <vector>

#include "cm/mad.h"
#include "net/pcap_file.h"
#include "rocev2/builder.h"
#include "rocev2/opcode.h"
#include "rocev2/packet.h"

namespace droce::cm {
namespace {

std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ::pclose(p);
  return out;
}

std::vector<uint8_t> frame_for(const Mad& mad, uint32_t psn) {
  rocev2::PacketHeaders h;
  h.l2.dst = {0x02, 0, 0, 0, 0, 2};
  h.l2.src = {0x02, 0, 0, 0, 0, 1};
  h.l3.version = 4;
  h.l3.src = net::ipv4_mapped(0x0a4d0001);
  h.l3.dst = net::ipv4_mapped(0x0a4d0002);
  h.l4.src_port = 0xd872;
  h.bth.opcode = rocev2::make_opcode(rocev2::Transport::ud, rocev2::op::kSendOnly);
  h.bth.pkey = 0xffff;
  h.bth.dest_qp = kGsiQpn;
  h.bth.psn = psn;
  h.ext.deth = {kGsiQkey, 0, kGsiQpn};
  std::vector<uint8_t> f(rocev2::frame_len(h, kMadSize));
  rocev2::build_frame(h, mad, f);
  return f;
}

TEST(CmMadTshark, WiresharkReadsEachMessageAsIbCmWithItsFields) {
  if (run("command -v tshark").empty()) GTEST_SKIP() << "tshark not installed (Debian package tshark)";
  const std::string pcap = ::testing::TempDir() + "droce-cm-" + std::to_string(::getpid()) + ".pcap";
  std::vector<Mad> mads;
  MadHeader h;
  h.tid = 0x0000000212345678ULL;
  {
    Req q;
    q.local_comm_id = 0x12345678;
    q.service_id = ip_service_id(PortSpace::tcp, 7174);
    q.local_ca_guid = 0x02db02fffe7b39f6ULL;
    q.local_qpn = 0x11;
    q.starting_psn = 0xabcdef;
    q.remote_cm_response_timeout = 20;
    q.local_cm_response_timeout = 20;
    q.retry_count = 7;
    q.rnr_retry_count = 7;
    q.max_cm_retries = 15;
    q.path_mtu = 3;
    q.primary.local_gid = net::ipv4_mapped(0x0a4d0001);
    q.primary.remote_gid = net::ipv4_mapped(0x0a4d0002);
    q.primary.flow_label = 0x2fea6;
    q.primary.hop_limit = 64;
    q.primary.local_ack_timeout = 17;
    IpCmHeader ip;
    ip.src_port = 40000;
    ip.src = q.primary.local_gid;
    ip.dst = q.primary.remote_gid;
    encode_ip_cm_header(ip, q.private_data);
    encode(h, Message{q}, &mads.emplace_back());
  }
  {
    Rep r;
    r.local_comm_id = 0x9abcdef0;
    r.remote_comm_id = 0x12345678;
    r.local_qpn = 0x22;
    r.starting_psn = 0x123456;
    r.target_ack_delay = 15;
    r.rnr_retry_count = 7;
    r.local_ca_guid = 0x02db02fffe7b39f7ULL;
    encode(h, Message{r}, &mads.emplace_back());
  }
  encode(h, Message{Rtu{0x12345678, 0x9abcdef0, {}}}, &mads.emplace_back());
  {
    Rej j;
    j.remote_comm_id = 0x12345678;
    j.message_rejected = MsgRef::req;
    j.reason = uint16_t(RejReason::invalid_service_id);
    encode(h, Message{j}, &mads.emplace_back());
  }
  {
    Dreq d;
    d.local_comm_id = 0x12345678;
    d.remote_comm_id = 0x9abcdef0;
    d.remote_qpn = 0x22;
    encode(h, Message{d}, &mads.emplace_back());
  }
  encode(h, Message{Drep{0x9abcdef0, 0x12345678, {}}}, &mads.emplace_back());
  encode(h, Message{Mra{0x9abcdef0, 0x12345678, MsgRef::req, 24, {}}}, &mads.emplace_back());
  {
    SidrReq s;
    s.request_id = 0x55;
    s.service_id = ip_service_id(PortSpace::udp, 7174);
    encode(h, Message{s}, &mads.emplace_back());
  }
  {
    SidrRep s;
    s.request_id = 0x55;
    s.qpn = 0x33;
    s.qkey = 0x01234567;
    s.service_id = ip_service_id(PortSpace::udp, 7174);
    encode(h, Message{s}, &mads.emplace_back());
  }
  {
    net::PcapWriter w(pcap);
    ASSERT_TRUE(w.ok()) << w.error();
    uint32_t psn = 1;
    for (const Mad& m : mads) {
      w.write(frame_for(m, psn), psn * 1000);  // one PSN and one timestamp per frame
      ++psn;
    }
  }

  // The MAD header of every frame: class CM, method Send, the attribute, the TID.
  const std::string hdr = run("tshark -r " + pcap +
                              " -T fields -E separator=, -e infiniband.mad.mgmtclass -e infiniband.mad.method "
                              "-e infiniband.mad.attributeid -e infiniband.mad.transactionid 2>/dev/null");
  const std::vector<std::string> attrs = {"0x0010", "0x0013", "0x0014", "0x0012", "0x0015",
                                          "0x0016", "0x0011", "0x0017", "0x0018"};
  size_t at = 0;
  for (const std::string& a : attrs) {
    const std::string want = "0x07,0x03," + a + ",0x0000000212345678";
    const size_t got = hdr.find(want, at);
    EXPECT_NE(got, std::string::npos) << "attribute " << a << " in:\n" << hdr;
    if (got != std::string::npos) at = got;
  }

  // The fields Wireshark dissects, per message. (Not the REQ's flow label: Wireshark 3.6 reads
  // its 20 bits at byte 88 with a 12-bit mask and shows 0x2fe for 0x2fea6; the layout here is the
  // IBTA table's and Linux's CM_REQ_PRIMARY_FLOW_LABEL, checked by cm_mad_test.)
  auto field = [&](const std::string& filter, const std::string& fields) {
    return run("tshark -r " + pcap + " -Y '" + filter + "' -T fields -E separator=, " + fields + " 2>/dev/null");
  };
  EXPECT_EQ(field("infiniband.mad.attributeid == 0x0010",
                  "-e infiniband.cm.req.serviceid.protocol -e infiniband.cm.req.serviceid.dport "
                  "-e infiniband.cm.req.localqpn -e infiniband.cm.req.startpsn -e infiniband.cm.req.maxcmretr "
                  "-e infiniband.cm.req.prim_hoplim "
                  "-e infiniband.cm.req.prim_localacktout -e infiniband.cm.req.ip_cm.sport "
                  "-e infiniband.cm.req.ip_cm.sip4 -e infiniband.cm.req.ip_cm.dip4"),
            "0x06,0x1c06,0x000011,0xabcdef,0x0f,0x40,0x11,0x9c40,10.77.0.1,10.77.0.2\n");
  EXPECT_EQ(field("infiniband.mad.attributeid == 0x0013",
                  "-e infiniband.cm.rep.remotecommid -e infiniband.cm.rep.localqpn -e infiniband.cm.rep.startpsn "
                  "-e infiniband.cm.rep.tgtackdelay -e infiniband.cm.rep.rnrretrcount"),
            "0x12345678,0x000022,0x123456,0x0f,0x07\n");
  EXPECT_EQ(field("infiniband.mad.attributeid == 0x0014", "-e infiniband.cm.rtu.localcommid -e infiniband.cm.rtu.remotecommid"),
            "0x12345678,0x9abcdef0\n");
  EXPECT_EQ(field("infiniband.mad.attributeid == 0x0012", "-e infiniband.cm.rej.remotecommid -e infiniband.cm.rej.reason"),
            "0x12345678,0x0008\n");
  EXPECT_EQ(field("infiniband.mad.attributeid == 0x0015", "-e infiniband.cm.dreq.localcommid -e infiniband.cm.dreq.remotecommid"),
            "0x12345678,0x9abcdef0\n");

  // Nothing malformed, no error notes.
  const std::string expert = run("tshark -r " + pcap + " -q -z expert,error 2>/dev/null");
  EXPECT_EQ(expert.find("Malformed"), std::string::npos) << expert;
  EXPECT_EQ(run("tshark -r " + pcap + " -Y '_ws.malformed || _ws.expert.severity >= error' 2>/dev/null"), "");
  std::remove(pcap.c_str());
}

}  // namespace
}  // namespace droce::cm
