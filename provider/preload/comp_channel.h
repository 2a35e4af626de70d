/*
 * A completion channel on a droce context: what provider/preload's ibv_create_comp_channel makes
 * and the provider's create_cq recognizes (docs/provider.md, "Completion channels").
 *
 * The application holds &channel, as from libibverbs: channel.fd is the read end of a pipe from
 * which ibv_get_cq_event() reads 8-byte ib_uverbs_comp_event_desc records (cq_handle = the
 * ibv_cq pointer). The write end starts here; the first create_cq that names the channel hands
 * it to droced (a register_channel message) and closes it, so droced holds the only write end:
 * an armed CQ's notification is one record written by droced, with no thread in the program, and
 * when droced goes away the reader sees end-of-file (ibv_get_cq_event() fails) instead of
 * waiting forever.
 *
 * Threading: write_fd and droced_id change once, under the channel's context mutex
 * (ibv_context.mutex), in the provider's create_cq.
 */
#pragma once

#include <stdint.h>

#include <infiniband/verbs.h>

#define DROCE_COMP_CHANNEL_MAGIC 0x6c6e6863656f7264ULL /* "drochnl" */

struct droce_comp_channel {
  struct ibv_comp_channel channel; /* first: what the application and libibverbs see */
  uint64_t magic;                  /* DROCE_COMP_CHANNEL_MAGIC while alive */
  int write_fd;                    /* the pipe's write end until droced holds it, then -1 */
  uint32_t droced_id;              /* droced's id for the channel once registered, else 0 */
};
