#include "abi/verbs.h"

namespace droce::abi {

const char* to_string(QpState s) {
  switch (s) {
    case QpState::reset: return "RESET";
    case QpState::init: return "INIT";
    case QpState::rtr: return "RTR";
    case QpState::rts: return "RTS";
    case QpState::sqd: return "SQD";
    case QpState::sqe: return "SQE";
    case QpState::err: return "ERR";
  }
  return "?";
}

const char* to_string(QpType t) {
  switch (t) {
    case QpType::rc: return "RC";
    case QpType::uc: return "UC";
    case QpType::ud: return "UD";
    case QpType::raw_packet: return "RAW_PACKET";
    case QpType::xrc_send: return "XRC_SEND";
    case QpType::xrc_recv: return "XRC_RECV";
  }
  return "?";
}

const char* to_string(WcStatus s) {
  switch (s) {
    case WcStatus::success: return "SUCCESS";
    case WcStatus::loc_len_err: return "LOC_LEN_ERR";
    case WcStatus::loc_qp_op_err: return "LOC_QP_OP_ERR";
    case WcStatus::loc_prot_err: return "LOC_PROT_ERR";
    case WcStatus::wr_flush_err: return "WR_FLUSH_ERR";
    case WcStatus::bad_resp_err: return "BAD_RESP_ERR";
    case WcStatus::loc_access_err: return "LOC_ACCESS_ERR";
    case WcStatus::rem_inv_req_err: return "REM_INV_REQ_ERR";
    case WcStatus::mw_bind_err: return "MW_BIND_ERR";
    case WcStatus::rem_access_err: return "REM_ACCESS_ERR";
    case WcStatus::rem_op_err: return "REM_OP_ERR";
    case WcStatus::retry_exc_err: return "RETRY_EXC_ERR";
    case WcStatus::rnr_retry_exc_err: return "RNR_RETRY_EXC_ERR";
    case WcStatus::fatal_err: return "FATAL_ERR";
    case WcStatus::resp_timeout_err: return "RESP_TIMEOUT_ERR";
    case WcStatus::general_err: return "GENERAL_ERR";
  }
  return "?";
}

}  // namespace droce::abi
