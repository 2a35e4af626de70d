/*
 * droce's rdma-core provider: the verbs driver "droce" that libibverbs loads as
 * libdroce-rdmav<PABI>.so. The one C file over rdma-core's infiniband/driver.h (C only); droce's
 * C++ side is reached through glue.h. See docs/discovery.md for how libibverbs finds this module
 * and the device.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/driver.h>

#include "glue.h"

/* Only driver.h's PROVIDER_DRIVER and verbs_register_driver_<PABI> tie this file to a PABI. */
_Static_assert(IBVERBS_PABI_VERSION > 0, "config.h from fetch-rdma-core-headers.sh names the PABI");

struct droce_device {
  struct verbs_device ibv_dev; /* first: libibverbs hands back &ibv_dev.device */
};

struct droce_context {
  struct verbs_context ibv_ctx; /* libibverbs' part; verbs_init_and_alloc_context fills it */
  void *impl;                   /* droce_glue_alloc_context()'s */
};

static struct droce_context *to_droce_context(struct ibv_context *context)
{
  return container_of(context, struct droce_context, ibv_ctx.context);
}

#ifndef DROCE_GLUE_EXTERNAL_CONTEXT
/* Until the client library is linked in: devices are listed, opening one fails cleanly. */
void *droce_glue_alloc_context(struct ibv_context *context, const struct droce_glue_device *device,
                               void *private_data)
{
  (void)context;
  (void)device;
  (void)private_data;
  errno = ENOSYS;
  return NULL;
}

void droce_glue_free_context(void *impl)
{
  (void)impl;
}
#endif

static void droce_free_context(struct ibv_context *context)
{
  struct droce_context *ctx = to_droce_context(context);

  droce_glue_free_context(ctx->impl);
  verbs_uninit_context(&ctx->ibv_ctx);
  free(ctx);
}

/*
 * Every op not named here stays libibverbs' dummy, which fails with EOPNOTSUPP; the client
 * library fills this table as it grows.
 */
static const struct verbs_context_ops droce_ctx_ops = {
  .free_context = droce_free_context,
};

/* cmd_fd is ours from here on: it is closed on every failure (libibverbs' contract). */
static struct verbs_context *droce_alloc_context(struct ibv_device *ibdev, int cmd_fd,
                                                 void *private_data)
{
  struct verbs_device *vdev = verbs_get_device(ibdev);
  struct droce_context *ctx;
  struct droce_glue_device dev;
  int saved_errno;

  ctx = verbs_init_and_alloc_context(ibdev, cmd_fd, ctx, ibv_ctx, RDMA_DRIVER_UNKNOWN);
  if (!ctx)
    return NULL;

  dev.ibdev_name = ibdev->name;
  dev.ibdev_path = ibdev->ibdev_path;
  dev.uverbs_name = vdev->sysfs ? vdev->sysfs->sysfs_name : ibdev->dev_name;
  ctx->impl = droce_glue_alloc_context(&ctx->ibv_ctx.context, &dev, private_data);
  if (!ctx->impl) {
    saved_errno = errno ? errno : EIO;
    verbs_uninit_context(&ctx->ibv_ctx);
    free(ctx);
    errno = saved_errno;
    return NULL;
  }

  verbs_set_ops(&ctx->ibv_ctx, &droce_ctx_ops);
  return &ctx->ibv_ctx;
}

static struct verbs_device *droce_alloc_device(struct verbs_sysfs_dev *sysfs_dev)
{
  struct droce_device *dev;

  (void)sysfs_dev;
  dev = calloc(1, sizeof(*dev));
  if (!dev)
    return NULL;
  return &dev->ibv_dev;
}

static void droce_uninit_device(struct verbs_device *vdev)
{
  free(container_of(vdev, struct droce_device, ibv_dev));
}

/*
 * Matching. Without RDMA netlink (droce's case: the device exists only as droced's sysfs-shaped
 * tree) libibverbs knows no driver_id, so it tries, in order: the table's VERBS_DRIVER_ID entries
 * (never, driver_id is RDMA_DRIVER_UNKNOWN), the device name as "rdma_device:N<ibdev>" against
 * the table's fnmatch patterns, then class/infiniband/<ibdev>/device/modalias. VERBS_NAME_MATCH
 * gives the pattern "rdma_device:*Ndroce*", i.e. every device whose name starts with "droce".
 * droce_match_device then narrows that to "droce" followed by decimal digits only, so a real
 * device that happens to be called "droceX..." is left to its own driver.
 */
static const struct verbs_match_ent droce_match_table[] = {
  VERBS_NAME_MATCH("droce", NULL),
  {},
};

static bool droce_match_device(struct verbs_sysfs_dev *sysfs_dev)
{
  const char *digits;

  if (!sysfs_dev->match)
    return false;
  if (strncmp(sysfs_dev->ibdev_name, "droce", 5) != 0)
    return false;
  digits = sysfs_dev->ibdev_name + 5;
  if (*digits == '\0')
    return false;
  for (; *digits; digits++)
    if (*digits < '0' || *digits > '9')
      return false;
  return true;
}

static const struct verbs_device_ops droce_dev_ops = {
  .name = "droce",
  .match_min_abi_version = DROCE_GLUE_ABI_VERSION,
  .match_max_abi_version = DROCE_GLUE_ABI_VERSION,
  .match_table = droce_match_table,
  .match_device = droce_match_device,
  .alloc_device = droce_alloc_device,
  .uninit_device = droce_uninit_device,
  .alloc_context = droce_alloc_context,
};
PROVIDER_DRIVER(droce, droce_dev_ops);
