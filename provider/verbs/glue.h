/*
 * The seam between the rdma-core provider glue (provider/verbs/glue.c, C, the only file that
 * includes rdma-core's infiniband/driver.h) and droce's C++ client side.
 *
 * libibverbs loads libdroce-rdmav<PABI>.so, whose constructor registers the verbs driver
 * "droce". For every device the driver matches (see glue.c), ibv_open_device() ends in the
 * glue's alloc_context, which allocates and initializes libibverbs' part of the context and then
 * calls droce_glue_alloc_context() for droce's part. Everything here is plain C so the C++ side
 * can implement it without driver.h (which is C only: typeof, statement expressions, ccan).
 *
 * Threading: libibverbs calls alloc_context and free_context from the application's thread, any
 * thread, never concurrently for the same context.
 * Errors: no exception may cross this boundary; failures return NULL with errno set.
 */
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

struct ibv_context;

/*
 * The uverbs ABI number droce's provider accepts. droced writes it to
 * class/infiniband_verbs/uverbsN/abi_version; libibverbs refuses the device (with a warning) when
 * it lies outside the driver's [match_min_abi_version, match_max_abi_version], so a provider and
 * a droced that speak different client protocols do not meet. Bump it with the client protocol.
 */
#define DROCE_GLUE_ABI_VERSION 1

/* What the glue knows about the device being opened, from libibverbs' sysfs view. */
struct droce_glue_device {
  const char *ibdev_name;  /* "droce0" */
  const char *ibdev_path;  /* $SYSFS_PATH/class/infiniband/droce0 */
  const char *uverbs_name; /* "uverbs0": the node /dev/infiniband/uverbs0 */
};

/*
 * droce's per-context state. `context` is already initialized by libibverbs (device, cmd_fd, the
 * context mutex; async_fd is -1 and must be set to a pollable fd by the implementation, or
 * libibverbs issues a kernel command for one after alloc_context returns). `private_data` is
 * ibv_open_device's (NULL for plain ibv_open_device).
 *
 * Returns an opaque handle the glue keeps in its context and passes back to
 * droce_glue_free_context(), or NULL with errno set; the glue then releases the context
 * (closing cmd_fd) and ibv_open_device() fails with that errno.
 *
 * Until the client library exists, glue.c's built-in definition fails with ENOSYS; a build that
 * links the C++ implementation into the module defines DROCE_GLUE_EXTERNAL_CONTEXT.
 */
void *droce_glue_alloc_context(struct ibv_context *context, const struct droce_glue_device *device,
                               void *private_data);

/* Releases what droce_glue_alloc_context() returned; called once, from ibv_close_device(). */
void droce_glue_free_context(void *impl);

#ifdef __cplusplus
}
#endif
