/*
 * droce's rdma-core provider: the verbs driver "droce" that libibverbs loads as
 * libdroce-rdmav<PABI>.so. The one C file over rdma-core's infiniband/driver.h (C only); droce's
 * C++ side is reached through glue.h. See docs/discovery.md for how libibverbs finds this module
 * and the device.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
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

/* The context: ibv_context is the last member of verbs_context, so droce's part is found by
 * droce_glue_context() rather than by a slot before it. */
struct droce_context {
  struct verbs_context ibv_ctx; /* libibverbs' part; verbs_init_and_alloc_context fills it */
  void *droce;                  /* droce_glue_alloc_context()'s */
};

/* Objects: droce's slot, then libibverbs' struct (glue.h). */

struct droce_mr {
  void *droce; /* unused: the MR's keys are its droce identity */
  struct verbs_mr vmr;
};

struct droce_qp {
  void *droce;
  struct verbs_qp vqp;
};

_Static_assert(offsetof(struct droce_mr, vmr) == sizeof(void *), "droce slot right before the object");
_Static_assert(offsetof(struct droce_qp, vqp) == sizeof(void *), "droce slot right before the object");
_Static_assert(offsetof(struct verbs_mr, ibv_mr) == 0 && offsetof(struct verbs_qp, qp) == 0,
               "libibverbs' public struct first");
/* The C++ side restates verbs_cq as a union of the two public CQ structs. */
union droce_cq_union {
  struct ibv_cq cq;
  struct ibv_cq_ex cq_ex;
};
_Static_assert(sizeof(struct verbs_cq) == sizeof(union droce_cq_union), "verbs_cq is the union of the CQ views");

static struct droce_context *to_droce_context(struct ibv_context *context)
{
  return container_of(context, struct droce_context, ibv_ctx.context);
}

void *droce_glue_context(struct ibv_context *context)
{
  return to_droce_context(context)->droce;
}

#ifndef DROCE_GLUE_EXTERNAL_CONTEXT
/* Without the C++ side: devices are listed, opening one fails cleanly. */
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

  droce_glue_free_context(ctx->droce);
  verbs_uninit_context(&ctx->ibv_ctx);
  free(ctx);
}

#ifdef DROCE_GLUE_EXTERNAL_CONTEXT
/* ---- MRs: verbs_mr carries the type and access libibverbs reads back ---- */

static struct ibv_mr *droce_reg_mr(struct ibv_pd *pd, void *addr, size_t length, uint64_t hca_va,
                                   int access)
{
  struct droce_mr *mr = calloc(1, sizeof(*mr));
  int rc;

  if (!mr) {
    errno = ENOMEM;
    return NULL;
  }
  rc = droce_glue_reg_mr(pd, addr, length, hca_va, access, &mr->vmr.ibv_mr);
  if (rc) {
    free(mr);
    errno = rc;
    return NULL;
  }
  mr->vmr.mr_type = IBV_MR_TYPE_MR;
  mr->vmr.access = access;
  return &mr->vmr.ibv_mr; /* libibverbs sets context, pd, addr, length */
}

static int droce_dereg_mr(struct verbs_mr *vmr)
{
  int rc = droce_glue_dereg_mr(&vmr->ibv_mr);

  if (rc)
    return rc;
  free(container_of(vmr, struct droce_mr, vmr));
  return 0;
}

static int droce_rereg_mr(struct verbs_mr *vmr, int flags, struct ibv_pd *pd, void *addr,
                          size_t length, int access)
{
  int new_access = (flags & IBV_REREG_MR_CHANGE_ACCESS) ? access : vmr->access;
  int rc = droce_glue_rereg_mr(&vmr->ibv_mr, flags, pd, addr, length, new_access);

  if (!rc)
    vmr->access = new_access;
  return rc;
}

static struct ibv_mr *droce_reg_dm_mr(struct ibv_pd *pd, struct ibv_dm *dm, uint64_t dm_offset,
                                      size_t length, unsigned int access)
{
  struct droce_mr *mr = calloc(1, sizeof(*mr));
  int rc;

  if (!mr) {
    errno = ENOMEM;
    return NULL;
  }
  rc = droce_glue_reg_dm_mr(pd, dm, dm_offset, length, access, &mr->vmr.ibv_mr);
  if (rc) {
    free(mr);
    errno = rc;
    return NULL;
  }
  mr->vmr.mr_type = IBV_MR_TYPE_MR; /* as ibv_cmd_reg_dm_mr */
  mr->vmr.access = (int)access;
  return &mr->vmr.ibv_mr;
}

/* ---- QPs: verbs_qp carries the extended (ibv_wr_*) view ---- */

static struct ibv_qp *droce_create_qp_ex(struct ibv_context *context,
                                         struct ibv_qp_init_attr_ex *attr)
{
  struct droce_qp *qp = calloc(1, sizeof(*qp));
  bool ex;
  int rc;

  if (!qp) {
    errno = ENOMEM;
    return NULL;
  }
  ex = attr && (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS);
  rc = droce_glue_create_qp(context, attr, &qp->vqp.qp, ex ? &qp->vqp.qp_ex : NULL, &qp->droce);
  if (rc) {
    free(qp);
    errno = rc;
    return NULL;
  }
  if (ex)
    qp->vqp.comp_mask |= VERBS_QP_EX;
  return &qp->vqp.qp;
}

static struct ibv_qp *droce_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
  struct ibv_qp_init_attr_ex ex = {};
  struct ibv_qp *qp;

  if (!attr) {
    errno = EINVAL;
    return NULL;
  }
  ex.qp_context = attr->qp_context;
  ex.send_cq = attr->send_cq;
  ex.recv_cq = attr->recv_cq;
  ex.srq = attr->srq;
  ex.cap = attr->cap;
  ex.qp_type = attr->qp_type;
  ex.sq_sig_all = attr->sq_sig_all;
  ex.comp_mask = IBV_QP_INIT_ATTR_PD;
  ex.pd = pd;
  qp = droce_create_qp_ex(pd->context, &ex);
  if (qp)
    attr->cap = ex.cap; /* what was granted (ibv_create_qp(3)) */
  return qp;
}

static struct ibv_qp *droce_open_qp(struct ibv_context *context, struct ibv_qp_open_attr *attr)
{
  struct droce_qp *qp = calloc(1, sizeof(*qp));
  int rc;

  if (!qp) {
    errno = ENOMEM;
    return NULL;
  }
  rc = droce_glue_open_qp(context, attr, &qp->vqp.qp, &qp->droce);
  if (rc) {
    free(qp);
    errno = rc;
    return NULL;
  }
  return &qp->vqp.qp;
}

static int droce_destroy_qp(struct ibv_qp *ibqp)
{
  int rc = droce_glue_destroy_qp(ibqp);

  if (rc)
    return rc;
  free(container_of(ibqp, struct droce_qp, vqp.qp));
  return 0;
}

/*
 * Every op not named here stays libibverbs' dummy, which fails with EOPNOTSUPP (or ENOSYS):
 * counters, imports, ECE, tag matching.
 */
static const struct verbs_context_ops droce_ctx_ops = {
  .alloc_dm = droce_alloc_dm,
  .alloc_mw = droce_alloc_mw,
  .alloc_parent_domain = droce_alloc_parent_domain,
  .alloc_pd = droce_alloc_pd,
  .alloc_td = droce_alloc_td,
  .attach_mcast = droce_attach_mcast,
  .close_xrcd = droce_close_xrcd,
  .bind_mw = droce_bind_mw,
  .cq_event = droce_cq_event,
  .advise_mr = droce_advise_mr,
  .create_ah = droce_create_ah,
  .create_cq = droce_create_cq,
  .create_cq_ex = droce_create_cq_ex,
  .create_flow = droce_create_flow,
  .create_rwq_ind_table = droce_create_rwq_ind_table,
  .create_qp = droce_create_qp,
  .create_qp_ex = droce_create_qp_ex,
  .create_srq = droce_create_srq,
  .create_srq_ex = droce_create_srq_ex,
  .create_wq = droce_create_wq,
  .dealloc_mw = droce_dealloc_mw,
  .dealloc_pd = droce_dealloc_pd,
  .dealloc_td = droce_dealloc_td,
  .dereg_mr = droce_dereg_mr,
  .destroy_ah = droce_destroy_ah,
  .destroy_cq = droce_destroy_cq,
  .destroy_flow = droce_destroy_flow,
  .destroy_qp = droce_destroy_qp,
  .destroy_rwq_ind_table = droce_destroy_rwq_ind_table,
  .destroy_srq = droce_destroy_srq,
  .destroy_wq = droce_destroy_wq,
  .detach_mcast = droce_detach_mcast,
  .free_context = droce_free_context,
  .free_dm = droce_free_dm,
  .get_srq_num = droce_get_srq_num,
  .modify_qp = droce_modify_qp,
  .modify_srq = droce_modify_srq,
  .modify_wq = droce_modify_wq,
  .open_qp = droce_open_qp,
  .open_xrcd = droce_open_xrcd,
  .poll_cq = droce_poll_cq,
  .post_recv = droce_post_recv,
  .post_send = droce_post_send,
  .post_srq_recv = droce_post_srq_recv,
  .query_device_ex = droce_query_device_ex,
  .query_port = droce_query_port,
  .query_qp = droce_query_qp,
  .query_rt_values = droce_query_rt_values,
  .query_srq = droce_query_srq,
  .reg_dm_mr = droce_reg_dm_mr,
  .reg_mr = droce_reg_mr,
  .req_notify_cq = droce_req_notify_cq,
  .rereg_mr = droce_rereg_mr,
  .resize_cq = droce_resize_cq,
};
#else
static const struct verbs_context_ops droce_ctx_ops = {
  .free_context = droce_free_context,
};
#endif

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
  errno = 0;
  ctx->droce = droce_glue_alloc_context(&ctx->ibv_ctx.context, &dev, private_data);
  if (!ctx->droce) {
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
