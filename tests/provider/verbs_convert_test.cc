// provider/verbs/convert: libibverbs' structs to droce's and back, and the errno each bad input
// gets (the values ibv_reg_mr(3), ibv_post_send(3), ibv_modify_qp(3) and ibv_create_ah(3)
// document).
#include "provider/verbs/convert.h"
#include "provider/client/client.h"

#include <endian.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "abi/wqe.h"

namespace droce::verbs {
namespace {

TEST(VerbsConvert, AccessFlags) {
  uint32_t a = 0;
  EXPECT_EQ(to_access(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, &a), 0);
  EXPECT_EQ(a, uint32_t(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ));
  // Remote write or atomic without local write is refused (ibv_reg_mr(3)).
  EXPECT_EQ(to_access(IBV_ACCESS_REMOTE_WRITE, &a), EINVAL);
  EXPECT_EQ(to_access(IBV_ACCESS_REMOTE_ATOMIC, &a), EINVAL);
  // Optional flags and HUGETLB are dropped, MW_BIND and ON_DEMAND kept (memory windows check the
  // one, the client's reg_odp_mr and droced the other); zero-based regions are not offered.
  EXPECT_EQ(to_access(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING | IBV_ACCESS_HUGETLB | IBV_ACCESS_MW_BIND, &a),
            0);
  EXPECT_EQ(a, uint32_t(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND));
  EXPECT_EQ(to_access(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND, &a), 0);
  EXPECT_EQ(a, uint32_t(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND));
  EXPECT_EQ(to_access(IBV_ACCESS_ON_DEMAND | IBV_ACCESS_REMOTE_WRITE, &a), EINVAL);
  EXPECT_EQ(to_access(IBV_ACCESS_ZERO_BASED, &a), EOPNOTSUPP);
  EXPECT_EQ(to_access(1 << 12, &a), EINVAL);
  // IBA 1.5 FLUSH (rdma-core 45's IBV_ACCESS_FLUSH_GLOBAL 1 << 8, _PERSISTENT 1 << 9): global
  // visibility is taken, persistence is not offered.
  EXPECT_EQ(to_access(IBV_ACCESS_REMOTE_READ | (1 << 8), &a), 0);
  EXPECT_EQ(a, uint32_t{IBV_ACCESS_REMOTE_READ | (1 << 8)});
  EXPECT_EQ(to_access(1 << 9, &a), EOPNOTSUPP);
}

TEST(VerbsConvert, SendWrRcRead) {
  ibv_sge sge[2] = {{0x1000, 64, 7}, {0x2000, 32, 8}};
  ibv_send_wr wr{};
  wr.wr_id = 42;
  wr.sg_list = sge;
  wr.num_sge = 2;
  wr.opcode = IBV_WR_RDMA_READ;
  wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_FENCE;
  wr.wr.rdma.remote_addr = 0xdead0000;
  wr.wr.rdma.rkey = 0x1234;
  abi::SendWr s;
  ASSERT_EQ(to_send_wr(wr, IBV_QPT_RC, 0, &s), 0);
  EXPECT_EQ(s.wr_id, 42u);
  EXPECT_EQ(s.opcode, abi::WrOpcode::rdma_read);
  EXPECT_EQ(s.send_flags, uint32_t(IBV_SEND_SIGNALED | IBV_SEND_FENCE));
  EXPECT_EQ(s.remote_addr, 0xdead0000u);
  EXPECT_EQ(s.rkey, 0x1234u);
  ASSERT_EQ(s.num_sge, 2u);
  EXPECT_EQ(s.sg_list[1].addr, 0x2000u);
  EXPECT_EQ(s.sg_list[1].length, 32u);
  EXPECT_EQ(s.sg_list[1].lkey, 8u);
}

TEST(VerbsConvert, SendWrImmediateIsNetworkOrderOnTheVerbsSide) {
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  wr.imm_data = htobe32(0x01020304);
  abi::SendWr s;
  ASSERT_EQ(to_send_wr(wr, IBV_QPT_UC, 0, &s), 0);
  EXPECT_EQ(s.imm_data, 0x01020304u);
}

TEST(VerbsConvert, SendWrAtomicsAndUd) {
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
  wr.wr.atomic.remote_addr = 0x8000;
  wr.wr.atomic.rkey = 5;
  wr.wr.atomic.compare_add = 11;
  wr.wr.atomic.swap = 22;
  abi::SendWr s;
  ASSERT_EQ(to_send_wr(wr, IBV_QPT_RC, 0, &s), 0);
  EXPECT_EQ(s.compare_add, 11u);
  EXPECT_EQ(s.swap, 22u);
  EXPECT_EQ(s.rkey, 5u);

  ibv_send_wr ud{};
  ud.opcode = IBV_WR_SEND;
  ud.wr.ud.remote_qpn = 0x77;
  ud.wr.ud.remote_qkey = 0x11111111;
  ASSERT_EQ(to_send_wr(ud, IBV_QPT_UD, 9, &s), 0);
  EXPECT_EQ(s.ah, 9u);
  EXPECT_EQ(s.remote_qpn, 0x77u);
  EXPECT_EQ(s.remote_qkey, 0x11111111u);
}

// XRC: the destination XRC SRQ comes from wr.qp_type.xrc.remote_srqn into the WQE's remote_qpn
// (what droced's engine puts in the XRCETH); an XRC send QP has RC's operations but ATOMIC WRITE,
// an XRC receive QP none.
TEST(VerbsConvert, SendWrXrc) {
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.wr.rdma.remote_addr = 0x9000;
  wr.wr.rdma.rkey = 6;
  wr.qp_type.xrc.remote_srqn = 0x000042;
  abi::SendWr s;
  ASSERT_EQ(to_send_wr(wr, IBV_QPT_XRC_SEND, 0, &s), 0);
  EXPECT_EQ(s.remote_qpn, 0x42u);
  EXPECT_EQ(s.remote_addr, 0x9000u);
  EXPECT_EQ(s.rkey, 6u);
  wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  EXPECT_EQ(to_send_wr(wr, IBV_QPT_XRC_SEND, 0, &s), 0);
  wr.opcode = IBV_WR_SEND;
  EXPECT_EQ(to_send_wr(wr, IBV_QPT_XRC_RECV, 0, &s), EINVAL);  // no send queue
  EXPECT_EQ(to_send_wr(wr, IBV_QPT_RC, 0, &s), 0);
  EXPECT_EQ(s.remote_qpn, 0u);  // RC: not read
}

TEST(VerbsConvert, SendWrRefusals) {
  abi::SendWr s;
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_RDMA_WRITE;
  EXPECT_EQ(to_send_wr(wr, IBV_QPT_UD, 0, &s), EINVAL);  // UD has SENDs only
  wr.opcode = IBV_WR_RDMA_READ;
  EXPECT_EQ(to_send_wr(wr, IBV_QPT_UC, 0, &s), EINVAL);  // UC has no READ
  wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  EXPECT_EQ(to_send_wr(wr, IBV_QPT_UC, 0, &s), EINVAL);
  wr.opcode = IBV_WR_BIND_MW;
  EXPECT_EQ(to_send_wr(wr, IBV_QPT_RC, 0, &s), EINVAL);  // no window
  EXPECT_EQ(to_send_wr(wr, IBV_QPT_UD, 0, &s), EINVAL);  // RC and UC only
  wr.opcode = IBV_WR_TSO;
  EXPECT_EQ(to_send_wr(wr, IBV_QPT_RC, 0, &s), EOPNOTSUPP);
  wr.opcode = static_cast<ibv_wr_opcode>(77);
  EXPECT_EQ(to_send_wr(wr, IBV_QPT_RC, 0, &s), EINVAL);
  wr.opcode = IBV_WR_SEND;
  wr.num_sge = -1;
  EXPECT_EQ(to_send_wr(wr, IBV_QPT_RC, 0, &s), EINVAL);
  wr.num_sge = 33;
  EXPECT_EQ(to_send_wr(wr, IBV_QPT_RC, 0, &s), EINVAL);
  wr.num_sge = 1;
  wr.sg_list = nullptr;
  EXPECT_EQ(to_send_wr(wr, IBV_QPT_RC, 0, &s), EINVAL);
}

// droce_post_send's form: the header from to_send_wqe_header and the ibv_sge list as it is,
// written into a slot; droced's decoder reads the WR to_send_wr makes of it.
TEST(VerbsConvert, SendWqeHeaderAndTheIbvListAsDrocedReadsThem) {
  ibv_sge sge[2] = {{0x1000, 64, 7}, {0x2000, 32, 8}};
  ibv_send_wr wr{};
  wr.wr_id = 42;
  wr.sg_list = sge;
  wr.num_sge = 2;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_IP_CSUM;  // a flag droce does not carry
  wr.imm_data = htobe32(0x01020304);
  wr.wr.rdma.remote_addr = 0xdead0000;
  wr.wr.rdma.rkey = 0x1234;
  abi::SendWqeHeader h;
  ASSERT_EQ(to_send_wqe_header(wr, IBV_QPT_RC, 0, &h), 0);
  std::vector<uint8_t> slot(abi::send_wqe_size(2, 0));
  ASSERT_EQ(abi::encode_send_wqe(h, {wr.sg_list, 2u}, slot), sizeof(abi::SendWqeHeader) + 2 * 16);
  abi::SendWr got, want;
  ASSERT_EQ(abi::decode_send_wqe(slot, {2, 0}, &got), abi::WqeError::ok);
  ASSERT_EQ(to_send_wr(wr, IBV_QPT_RC, 0, &want), 0);
  EXPECT_EQ(got.wr_id, 42u);
  EXPECT_EQ(got.opcode, abi::WrOpcode::rdma_write_with_imm);
  EXPECT_EQ(got.send_flags, uint32_t(IBV_SEND_SIGNALED));
  EXPECT_EQ(got.imm_data, 0x01020304u);
  EXPECT_EQ(got.remote_addr, 0xdead0000u);
  EXPECT_EQ(got.rkey, 0x1234u);
  ASSERT_EQ(got.num_sge, 2u);
  EXPECT_EQ(got.sg_list[1].addr, 0x2000u);
  EXPECT_EQ(got.sg_list[1].length, 32u);
  EXPECT_EQ(got.sg_list[1].lkey, 8u);
  EXPECT_EQ(want.opcode, got.opcode);
  EXPECT_EQ(want.send_flags, got.send_flags);
  EXPECT_EQ(want.imm_data, got.imm_data);
  EXPECT_EQ(want.remote_addr, got.remote_addr);
  EXPECT_EQ(want.num_sge, got.num_sge);

  // Inline: the bytes of both SGEs, in order, in the slot.
  uint8_t a[5] = {1, 2, 3, 4, 5}, b[3] = {6, 7, 8};
  ibv_sge in[2] = {{reinterpret_cast<uintptr_t>(a), 5, 0}, {reinterpret_cast<uintptr_t>(b), 3, 0}};
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_INLINE;
  wr.sg_list = in;
  ASSERT_EQ(to_send_wqe_header(wr, IBV_QPT_RC, 0, &h), 0);
  std::vector<uint8_t> islot(abi::send_wqe_size(1, 64));
  ASSERT_EQ(abi::encode_send_wqe(h, {wr.sg_list, 2u}, islot), sizeof(abi::SendWqeHeader) + 8);
  ASSERT_EQ(abi::decode_send_wqe(islot, {1, 64}, &got), abi::WqeError::ok);
  ASSERT_EQ(got.num_sge, 1u);
  ASSERT_EQ(got.sg_list[0].length, 8u);
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(got.sg_list[0].addr);
  EXPECT_EQ(std::vector<uint8_t>(bytes, bytes + 8), (std::vector<uint8_t>{1, 2, 3, 4, 5, 6, 7, 8}));

  // Expect: the refusals to_send_wr makes.
  wr.num_sge = 33;
  EXPECT_EQ(to_send_wqe_header(wr, IBV_QPT_RC, 0, &h), EINVAL);
  wr.num_sge = 1;
  wr.opcode = IBV_WR_TSO;
  EXPECT_EQ(to_send_wqe_header(wr, IBV_QPT_RC, 0, &h), EOPNOTSUPP);
  wr.opcode = IBV_WR_RDMA_READ;
  EXPECT_EQ(to_send_wqe_header(wr, IBV_QPT_UD, 0, &h), EINVAL);
}

TEST(VerbsConvert, BindMwCarriesTheWindowTheRangeAndTheRegion) {
  ibv_mw mw{};
  mw.rkey = 0x1234'07;
  ibv_mr mr{};
  mr.lkey = 0x5600'01;
  ibv_send_wr wr{};
  wr.wr_id = 3;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.bind_mw.mw = &mw;
  wr.bind_mw.rkey = ibv_inc_rkey(mw.rkey);
  wr.bind_mw.bind_info = {&mr, 0x7000, 4096, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_ZERO_BASED};
  abi::SendWr s;
  ASSERT_EQ(to_send_wr(wr, IBV_QPT_UC, 0, &s), 0);
  // Expect: through the WQE header and back, every field of the bind the engine reads.
  EXPECT_EQ(s.opcode, abi::WrOpcode::bind_mw);
  EXPECT_EQ(s.invalidate_rkey, 0x1234'07u);
  EXPECT_EQ(s.rkey, 0x1234'08u);
  EXPECT_EQ(s.bind_mr_lkey, 0x5600'01u);
  EXPECT_EQ(s.remote_addr, 0x7000u);
  EXPECT_EQ(s.bind_length, 4096u);
  EXPECT_EQ(s.bind_access, uint32_t(IBV_ACCESS_REMOTE_READ | IBV_ACCESS_ZERO_BASED));
  EXPECT_EQ(s.num_sge, 0u);
  abi::SendWqeHeader h = abi::send_wqe_header(s);
  abi::SendWr back;
  abi::send_wr_fields(h, &back);
  EXPECT_EQ(back.bind_mr_lkey, s.bind_mr_lkey);
  EXPECT_EQ(back.bind_access, s.bind_access);
  EXPECT_EQ(back.bind_length, s.bind_length);
  EXPECT_EQ(back.invalidate_rkey, s.invalidate_rkey);
  // Expect: a length without a region is refused; a zero-length bind (type 1 unbind) is not.
  wr.bind_mw.bind_info.mr = nullptr;
  EXPECT_EQ(to_send_wr(wr, IBV_QPT_RC, 0, &s), EINVAL);
  wr.bind_mw.bind_info.length = 0;
  EXPECT_EQ(to_send_wr(wr, IBV_QPT_RC, 0, &s), 0);
}

TEST(VerbsConvert, RecvWr) {
  ibv_sge sge{0x3000, 100, 3};
  ibv_recv_wr wr{};
  wr.wr_id = 9;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  abi::RecvWr r;
  ASSERT_EQ(to_recv_wr(wr, &r), 0);
  EXPECT_EQ(r.wr_id, 9u);
  EXPECT_EQ(r.sg_list[0].length, 100u);
  wr.num_sge = -2;
  EXPECT_EQ(to_recv_wr(wr, &r), EINVAL);
}

TEST(VerbsConvert, WorkCompletion) {
  abi::Completion c;
  c.wr_id = 5;
  c.status = abi::WcStatus::rem_access_err;
  c.opcode = abi::WcOpcode::recv;
  c.byte_len = 77;
  c.imm_data = 0x0a0b0c0d;
  c.wc_flags = abi::kWcWithImm | abi::kWcGrh;
  c.qp_num = 12;
  c.src_qp = 13;
  ibv_wc wc{};
  to_wc(c, &wc);
  EXPECT_EQ(wc.wr_id, 5u);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_EQ(wc.byte_len, 77u);
  EXPECT_EQ(be32toh(wc.imm_data), 0x0a0b0c0du);
  EXPECT_EQ(wc.wc_flags, unsigned(IBV_WC_WITH_IMM | IBV_WC_GRH));
  EXPECT_EQ(wc.src_qp, 13u);
  c.wc_flags = abi::kWcWithInv;
  c.imm_data = 0x4242;
  to_wc(c, &wc);
  EXPECT_EQ(wc.invalidated_rkey, 0x4242u);  // host order, unlike immediate data
}

TEST(VerbsConvert, AddressVector) {
  ibv_ah_attr ah{};
  ah.is_global = 1;
  ah.port_num = 1;
  ah.grh.dgid.raw[10] = 0xff;
  ah.grh.dgid.raw[11] = 0xff;
  ah.grh.dgid.raw[15] = 2;
  ah.grh.sgid_index = 1;
  ah.grh.hop_limit = 9;
  ah.grh.traffic_class = 3;
  ah.grh.flow_label = 0xabcde;
  ah.sl = 4;
  abi::AddressVector av;
  ASSERT_EQ(to_av(ah, &av), 0);
  EXPECT_EQ(av.dgid[15], 2);
  EXPECT_EQ(av.sgid_index, 1);
  EXPECT_EQ(av.hop_limit, 9);
  EXPECT_EQ(av.flow_label, 0xabcdeu);
  ibv_ah_attr back{};
  from_av(av, &back);
  EXPECT_EQ(std::memcmp(back.grh.dgid.raw, ah.grh.dgid.raw, 16), 0);
  EXPECT_EQ(back.is_global, 1);
  EXPECT_EQ(back.port_num, 1);
  EXPECT_EQ(back.sl, 4);

  ah.is_global = 0;  // RoCE routes by GID
  EXPECT_EQ(to_av(ah, &av), EINVAL);
  ah.is_global = 1;
  ah.port_num = 2;
  EXPECT_EQ(to_av(ah, &av), EINVAL);
  ah.port_num = 1;
  // Only the GRH's 20 bits are kept, as the kernel and hardware providers do (UCX sets more), and
  // a DLID is ignored on Ethernet.
  ah.grh.flow_label = 0xabc12345;
  ah.dlid = 49152;
  ASSERT_EQ(to_av(ah, &av), 0);
  EXPECT_EQ(av.flow_label, 0x12345u);
}

TEST(VerbsConvert, QpAttrOnlyWhatTheMaskNames) {
  ibv_qp_attr a{};
  a.qp_state = static_cast<ibv_qp_state>(99);  // not in the mask: not read
  a.path_mtu = IBV_MTU_2048;
  a.dest_qp_num = 0x55;
  a.rq_psn = 0x123;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  abi::QpAttr q;
  const int mask = IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                   IBV_QP_MIN_RNR_TIMER | IBV_QP_AV;
  ASSERT_EQ(to_qp_attr(a, mask, &q), 0);
  EXPECT_EQ(q.path_mtu, abi::PathMtu::mtu2048);
  EXPECT_EQ(q.dest_qp_num, 0x55u);
  EXPECT_EQ(q.rq_psn, 0x123u);
  EXPECT_EQ(q.max_dest_rd_atomic, 4);
  EXPECT_EQ(to_qp_attr(a, mask | IBV_QP_STATE, &q), EINVAL);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = static_cast<ibv_mtu>(6);
  EXPECT_EQ(to_qp_attr(a, mask | IBV_QP_STATE, &q), EINVAL);
  a.path_mtu = IBV_MTU_1024;
  a.ah_attr.is_global = 0;
  EXPECT_EQ(to_qp_attr(a, mask | IBV_QP_STATE, &q), EINVAL);
  EXPECT_EQ(to_qp_attr(a, IBV_QP_STATE, &q), 0);  // the AV is not named: not read
}

TEST(VerbsConvert, DeviceAndPortAttributes) {
  abi::ctl::QueryDeviceReply r{};
  r.node_guid = 0x0002c9fffe123456ull;
  r.max_qp = 100;
  r.max_qp_rd_atom = 16;
  r.atomic_cap = IBV_ATOMIC_HCA;
  r.phys_port_cnt = 1;
  std::snprintf(r.fw_ver, sizeof r.fw_ver, "droce 0.1.0");
  ibv_device_attr_ex d;
  to_device_attr(r, &d);
  EXPECT_EQ(be64toh(d.orig_attr.node_guid), 0x0002c9fffe123456ull);  // __be64, as ibv_devinfo prints it
  EXPECT_STREQ(d.orig_attr.fw_ver, "droce 0.1.0");
  EXPECT_EQ(d.orig_attr.max_res_rd_atom, 1600);
  EXPECT_EQ(d.orig_attr.atomic_cap, IBV_ATOMIC_HCA);
  EXPECT_EQ(d.phys_port_cnt_ex, 1u);
  // Expect: no memory windows from a droced that reports none (before ABI minor 10), rxe's
  // capability bits from one that does.
  EXPECT_EQ(d.orig_attr.max_mw, 0);
  EXPECT_EQ(d.orig_attr.device_cap_flags & IBV_DEVICE_XRC, 0u);  // no XRC before ABI minor 12
  EXPECT_EQ(d.orig_attr.device_cap_flags & (IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B), 0u);
  r.max_mw = 65536;
  to_device_attr(r, &d);
  EXPECT_EQ(d.orig_attr.max_mw, 65536);
  EXPECT_EQ(d.orig_attr.device_cap_flags & (IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B),
            unsigned(IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B));
  // Expect: no timestamps and no device memory from a droced before ABI minor 11 (programs test
  // completion_timestamp_mask and max_dm_size); from one that has them, a 64-bit clock at 1 GHz
  // (hca_core_clock in kHz) and droced's max_dm_size.
  EXPECT_EQ(d.completion_timestamp_mask, 0u);
  EXPECT_EQ(d.hca_core_clock, 0u);
  EXPECT_EQ(d.max_dm_size, 0u);
  r.device_caps = abi::ctl::kDeviceCapCompletionTimestamp;
  r.max_dm_size = 1 << 20;
  to_device_attr(r, &d);
  EXPECT_EQ(d.completion_timestamp_mask, UINT64_MAX);
  EXPECT_EQ(d.hca_core_clock, 1'000'000u);
  EXPECT_EQ(d.max_dm_size, uint64_t{1} << 20);
  r.max_xrcds = 1u << 16;
  to_device_attr(r, &d);
  EXPECT_NE(d.orig_attr.device_cap_flags & IBV_DEVICE_XRC, 0u);
  // Expect: no ODP caps from a droced without reg_odp_mr (before ABI minor 13; ibv_rc_pingpong -o
  // tests general_caps); from one that has it, explicit and implicit ODP, and per transport the
  // operations that transport has.
  EXPECT_EQ(d.odp_caps.general_caps, 0u);
  EXPECT_EQ(d.odp_caps.per_transport_caps.rc_odp_caps, 0u);
  r.device_caps |= abi::ctl::kDeviceCapOnDemandPaging;
  to_device_attr(r, &d);
  EXPECT_EQ(d.odp_caps.general_caps, uint64_t(IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT));
  EXPECT_EQ(d.odp_caps.per_transport_caps.rc_odp_caps, 0x3fu);
  EXPECT_EQ(d.odp_caps.per_transport_caps.uc_odp_caps,
            uint32_t(IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_SRQ_RECV));
  EXPECT_EQ(d.odp_caps.per_transport_caps.ud_odp_caps,
            uint32_t(IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV));
  EXPECT_EQ(d.xrc_odp_caps, 0x3fu & ~uint32_t{IBV_ODP_SUPPORT_RECV});

  abi::ctl::QueryPortReply p{};
  p.state = IBV_PORT_ACTIVE;
  p.active_mtu = IBV_MTU_1024;
  p.link_layer = IBV_LINK_LAYER_ETHERNET;
  p.link_speed_mbps = 100000;
  ibv_port_attr pa;
  to_port_attr(p, &pa);
  EXPECT_EQ(pa.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(pa.active_mtu, IBV_MTU_1024);
  EXPECT_EQ(pa.link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_EQ(pa.active_width, 2);   // 4X
  EXPECT_EQ(pa.active_speed, 32);  // EDR: 4 x 25 Gb/s
  uint8_t w = 0, s = 0;
  eth_speed(10000, &w, &s);
  EXPECT_EQ(w, 1);
  EXPECT_EQ(s, 8);  // 1X FDR10
  eth_speed(400000, &w, &s);
  EXPECT_EQ(w, 2);
  EXPECT_EQ(s, 128);  // 4X NDR
}

}  // namespace
}  // namespace droce::verbs

// The one classification of async events (provider/client) names what libibverbs expects each
// ibv_event_type's element to be.
TEST(VerbsConvert, AsyncEventElements) {
  using droce::client::EventElement;
  using droce::client::event_element;
  EXPECT_EQ(event_element(IBV_EVENT_CQ_ERR), EventElement::cq);
  for (auto t : {IBV_EVENT_QP_FATAL, IBV_EVENT_QP_REQ_ERR, IBV_EVENT_QP_ACCESS_ERR, IBV_EVENT_COMM_EST,
                 IBV_EVENT_SQ_DRAINED, IBV_EVENT_PATH_MIG, IBV_EVENT_PATH_MIG_ERR, IBV_EVENT_QP_LAST_WQE_REACHED})
    EXPECT_EQ(event_element(t), EventElement::qp) << t;
  EXPECT_EQ(event_element(IBV_EVENT_SRQ_ERR), EventElement::srq);
  EXPECT_EQ(event_element(IBV_EVENT_SRQ_LIMIT_REACHED), EventElement::srq);
  for (auto t : {IBV_EVENT_DEVICE_FATAL, IBV_EVENT_PORT_ACTIVE, IBV_EVENT_PORT_ERR, IBV_EVENT_LID_CHANGE,
                 IBV_EVENT_PKEY_CHANGE, IBV_EVENT_GID_CHANGE, IBV_EVENT_CLIENT_REREGISTER})
    EXPECT_EQ(event_element(t), EventElement::port) << t;
}
