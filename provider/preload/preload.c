/*
 * libdroce-preload.so: completion channels for droce contexts, in unmodified verbs programs.
 *
 * libibverbs' ibv_create_comp_channel() is not a provider op: it writes a kernel command to the
 * context's cmd_fd, which for droce is a stand-in character device (/dev/full), so it fails with
 * ENOSPC. This library, preloaded into the program (LD_PRELOAD; `droce exec` does it), defines
 * ibv_create_comp_channel and ibv_destroy_comp_channel at libibverbs' own symbol version
 * (IBVERBS_1.0, see preload.map), so programs bound to that version reach these first. For a
 * context of the droce provider they make and free a droce_comp_channel (comp_channel.h): a
 * pipe whose read end is channel->fd, from which the unchanged ibv_get_cq_event() reads
 * ib_uverbs_comp_event_desc records that droced writes. For every other context they call
 * libibverbs' own functions (dlvsym(RTLD_NEXT, ..., "IBVERBS_1.0")), so a real HCA in the same
 * program is untouched.
 *
 * The library links nothing but libc; libibverbs need not be loaded when it is (a Python program
 * loads it later), only when a channel is made.
 *
 * Threading: as libibverbs' functions (the context mutex guards a channel's refcnt).
 * Errors: as libibverbs' functions: NULL with errno set; destroy returns 0 or an errno (EBUSY
 * while a CQ uses the channel).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/driver.h>

#include "comp_channel.h"

#define DROCE_EXPORT __attribute__((visibility("default")))

typedef struct ibv_comp_channel *(*create_fn)(struct ibv_context *);
typedef int (*destroy_fn)(struct ibv_comp_channel *);

/* libibverbs' definitions, found on first use (the program may load libibverbs after us). */
static void *next_symbol(const char *name)
{
  void *f = dlvsym(RTLD_NEXT, name, "IBVERBS_1.0");

  return f ? f : dlsym(RTLD_NEXT, name);
}

/* A context of the droce provider: its device's driver is the one glue.c registers. */
static bool is_droce(struct ibv_context *context)
{
  const struct verbs_device *vdev = verbs_get_device(context->device);

  return vdev->ops && vdev->ops->name && strcmp(vdev->ops->name, "droce") == 0;
}

DROCE_EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
  struct droce_comp_channel *ch;
  create_fn next;
  int p[2];

  if (!context || !context->device) {
    errno = EINVAL;
    return NULL;
  }
  if (!is_droce(context)) {
    next = (create_fn)next_symbol("ibv_create_comp_channel");
    if (!next) {
      errno = ENOSYS;
      return NULL;
    }
    return next(context);
  }

  ch = calloc(1, sizeof(*ch));
  if (!ch) {
    errno = ENOMEM;
    return NULL;
  }
  /* The read end blocks, as the kernel's event file does (programs set O_NONBLOCK themselves);
   * the write end never blocks droced. */
  if (pipe2(p, O_CLOEXEC) != 0) {
    free(ch);
    return NULL;
  }
  (void)fcntl(p[1], F_SETFL, O_NONBLOCK);
  ch->channel.context = context;
  ch->channel.fd = p[0];
  ch->channel.refcnt = 0;
  ch->magic = DROCE_COMP_CHANNEL_MAGIC;
  ch->write_fd = p[1];
  ch->droced_id = 0;
  return &ch->channel;
}

DROCE_EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
  struct droce_comp_channel *ch = (struct droce_comp_channel *)channel;
  struct ibv_context *context;
  destroy_fn next;

  if (!channel || !channel->context)
    return EINVAL;
  context = channel->context;
  if (!is_droce(context)) {
    next = (destroy_fn)next_symbol("ibv_destroy_comp_channel");
    return next ? next(channel) : ENOSYS;
  }
  if (ch->magic != DROCE_COMP_CHANNEL_MAGIC)
    return EINVAL;

  pthread_mutex_lock(&context->mutex);
  if (channel->refcnt) {
    pthread_mutex_unlock(&context->mutex);
    return EBUSY;
  }
  ch->magic = 0;
  close(channel->fd);
  /* Once a CQ used the channel droced holds the only write end (until the context closes);
   * its records then go nowhere, which droced ignores. */
  if (ch->write_fd >= 0)
    close(ch->write_fd);
  pthread_mutex_unlock(&context->mutex);
  free(ch);
  return 0;
}
