#pragma once
/*
 * The rdma_cm channel protocol between libdroce-rdmacm.so (the preload that gives librdmacm its
 * /dev/infiniband/rdma_cm) and droced (droced/cm_host.h), over a SOCK_SEQPACKET socket per
 * event channel: <control socket without ".sock">.cm.sock next to droced's control socket.
 *
 * Each request is one message: droce_cm_request, then `cmd_len` bytes of what librdmacm wrote
 * (the ucma command, header first: pointers in it mean nothing to droced), then `optval_len`
 * bytes (SET_OPTION's input, copied from the program). Each answer is one message:
 * droce_cm_reply, then `len` response bytes for the command's `response` pointer.
 *
 * HELLO carries the channel's eventfd (SCM_RIGHTS, EFD_SEMAPHORE): droced adds one per event it
 * queues and takes one per event it withdraws; the program reads one before each GET_EVENT. The
 * reply names droced's channel number (MIGRATE_ID's `fd` is rewritten to it).
 */
#include <stdint.h>

#define DROCE_CM_MAGIC 0x644d4331u /* "dMC1" */
#define DROCE_CM_MAX_CMD 1024u
#define DROCE_CM_MAX_OPTVAL 4096u
#define DROCE_CM_MAX_RESPONSE 1024u

enum droce_cm_op {
  DROCE_CM_HELLO = 1,
  DROCE_CM_COMMAND = 2,
};

struct droce_cm_request {
  uint32_t magic;
  uint32_t op;
  uint32_t cmd_len;
  uint32_t optval_len;
};

struct droce_cm_reply {
  int32_t status; /* 0 or -errno */
  uint32_t len;
  uint32_t channel;
  uint32_t reserved;
};
