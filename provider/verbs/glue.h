/*
 * The seam between the rdma-core provider glue (provider/verbs/glue.c, C, the only file that
 * includes rdma-core's infiniband/driver.h) and droce's C++ side (the .cc files beside it, over
 * the client library).
 *
 * libibverbs loads libdroce-rdmav<PABI>.so, whose constructor registers the verbs driver
 * "droce". For every device the driver matches (see glue.c), ibv_open_device() ends in the
 * glue's alloc_context, which allocates and initializes libibverbs' part of the context and then
 * calls droce_glue_alloc_context() for droce's part. Everything here is plain C over the public
 * <infiniband/verbs.h> (which C++ can include); driver.h stays in glue.c (typeof, statement
 * expressions, ccan).
 *
 * Objects. Every object droce hands to libibverbs (PD, MR, CQ, SRQ, QP, AH) is laid out as
 * { void *droce; <libibverbs' struct> }: one pointer-sized slot for droce's own state right
 * before what libibverbs and the application see. droce_object() gets the slot from a pointer
 * to the object. Objects whose libibverbs type is public (PD, CQ, SRQ, AH) are allocated by the
 * C++ side; those whose type is driver.h's (verbs_mr, verbs_qp) by glue.c, which then calls the
 * C++ side to fill them. glue.c checks the layout with static assertions. The context is the
 * exception (ibv_context is the last member of driver.h's verbs_context): droce_glue_context()
 * finds its droce part.
 *
 * Ops. The functions below whose names match a verbs_context_ops member have exactly its
 * signature and go into glue.c's ops table as they are. They follow libibverbs' conventions:
 * int ops return 0 or a positive errno (post_* also set *bad_wr); pointer ops return NULL with
 * errno set; poll_cq returns the number of completions or a negative value.
 *
 * Threading: as libibverbs promises nothing more, any op may run on any thread, concurrently
 * with others on other objects; the data path (post_*, poll_cq, req_notify_cq) concurrently on
 * the same object too. alloc/free_context are never concurrent for one context.
 * Errors: no exception crosses this boundary.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The uverbs ABI number droce's provider accepts. droced writes it to
 * class/infiniband_verbs/uverbsN/abi_version; libibverbs refuses the device (with a warning) when
 * it lies outside the driver's [match_min_abi_version, match_max_abi_version], so a provider and
 * a droced that speak different client protocols do not meet. Bump it with the client protocol.
 */
#define DROCE_GLUE_ABI_VERSION 1

/* droce's slot, just before a libibverbs object droce allocated (see above). */
static inline void *droce_object(const void *ibv_object)
{
  return ((void *const *)ibv_object)[-1];
}

/* droce's part of a context droce_glue_alloc_context() made (glue.c keeps it beside verbs_context). */
void *droce_glue_context(struct ibv_context *context);

/* What the glue knows about the device being opened, from libibverbs' sysfs view. */
struct droce_glue_device {
  const char *ibdev_name;  /* "droce0" */
  const char *ibdev_path;  /* $SYSFS_PATH/class/infiniband/droce0 */
  const char *uverbs_name; /* "uverbs0": the node /dev/infiniband/uverbs0 */
};

/*
 * droce's per-context state. `context` is already initialized by libibverbs (device, cmd_fd, the
 * context mutex; async_fd is -1). On success this sets context->async_fd (libibverbs reads
 * ib_uverbs_async_event_desc records from it) and num_comp_vectors, and returns what goes in the
 * context's droce slot. Finds droced's control socket in <ibdev_path>/droce_control_socket,
 * else $DROCE_RUN_DIR/<ibdev>.sock, else /run/droce/<ibdev>.sock. `private_data` is
 * ibv_open_device's (NULL for plain ibv_open_device).
 *
 * Returns NULL with errno set (ENODEV: no droced there; EPROTO: a droced of another protocol
 * version; ENOMEM); the glue then releases the context (closing cmd_fd) and ibv_open_device()
 * fails with that errno. Without DROCE_GLUE_EXTERNAL_CONTEXT, glue.c's stand-in fails with ENOSYS.
 */
void *droce_glue_alloc_context(struct ibv_context *context, const struct droce_glue_device *device,
                               void *private_data);

/* Releases what droce_glue_alloc_context() returned (its event thread, droced's session and with
 * it every object droced still holds for this context); called once, from ibv_close_device(),
 * before libibverbs closes async_fd. */
void droce_glue_free_context(void *impl);

/* ---- Ops with libibverbs' signatures (glue.c's table takes them as they are) ---- */

int droce_query_device_ex(struct ibv_context *context, const struct ibv_query_device_ex_input *input,
                          struct ibv_device_attr_ex *attr, size_t attr_size);
int droce_query_port(struct ibv_context *context, uint8_t port_num, struct ibv_port_attr *port_attr);

struct ibv_pd *droce_alloc_pd(struct ibv_context *context);
int droce_dealloc_pd(struct ibv_pd *pd);

/* Memory windows: allocated by droced; a type 1 bind is a BIND_MW WR on the QP, as rxe's. */
struct ibv_mw *droce_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int droce_dealloc_mw(struct ibv_mw *mw);
int droce_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *mw_bind);

/* Thread domains and parent domains (domains.cc). ibv_dealloc_pd of a parent domain is
 * droce_dealloc_pd's. A parent domain's allocators serve the provider's state of the CQs, QPs
 * and SRQs made on it, never their rings (droced's regions). */
struct ibv_td *droce_alloc_td(struct ibv_context *context, struct ibv_td_init_attr *init_attr);
int droce_dealloc_td(struct ibv_td *td);
struct ibv_pd *droce_alloc_parent_domain(struct ibv_context *context, struct ibv_parent_domain_init_attr *attr);

/* Device memory (device_memory.cc): a region droced owns, mapped here and in droced. */
struct ibv_dm *droce_alloc_dm(struct ibv_context *context, struct ibv_alloc_dm_attr *attr);
int droce_free_dm(struct ibv_dm *dm);

/* ibv_query_rt_values_ex: IBV_VALUES_MASK_RAW_CLOCK, the completion timestamps' clock. */
int droce_query_rt_values(struct ibv_context *context, struct ibv_values_ex *values);

struct ibv_cq *droce_create_cq(struct ibv_context *context, int cqe, struct ibv_comp_channel *channel,
                               int comp_vector);
struct ibv_cq_ex *droce_create_cq_ex(struct ibv_context *context, struct ibv_cq_init_attr_ex *attr);
int droce_destroy_cq(struct ibv_cq *cq);
int droce_resize_cq(struct ibv_cq *cq, int cqe);
int droce_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
int droce_req_notify_cq(struct ibv_cq *cq, int solicited_only);
void droce_cq_event(struct ibv_cq *cq);

struct ibv_srq *droce_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr);
int droce_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int attr_mask);
int droce_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr);
int droce_destroy_srq(struct ibv_srq *srq);
int droce_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);

/* XRC (IBA A14): domains, XRC SRQs (and basic ones through the extended call), their numbers. */
struct ibv_xrcd *droce_open_xrcd(struct ibv_context *context, struct ibv_xrcd_init_attr *attr);
int droce_close_xrcd(struct ibv_xrcd *xrcd);
struct ibv_srq *droce_create_srq_ex(struct ibv_context *context, struct ibv_srq_init_attr_ex *attr);
int droce_get_srq_num(struct ibv_srq *srq, uint32_t *srq_num);

int droce_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask);
int droce_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
                   struct ibv_qp_init_attr *init_attr);
int droce_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
int droce_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
int droce_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid);
struct ibv_flow *droce_create_flow(struct ibv_qp *qp, struct ibv_flow_attr *attr);
int droce_destroy_flow(struct ibv_flow *flow);
struct ibv_wq *droce_create_wq(struct ibv_context *context, struct ibv_wq_init_attr *attr);
int droce_modify_wq(struct ibv_wq *wq, struct ibv_wq_attr *attr);
int droce_destroy_wq(struct ibv_wq *wq);
struct ibv_rwq_ind_table *droce_create_rwq_ind_table(struct ibv_context *context,
                                                     struct ibv_rwq_ind_table_init_attr *attr);
int droce_destroy_rwq_ind_table(struct ibv_rwq_ind_table *table);
int droce_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid);

struct ibv_ah *droce_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr);
int droce_destroy_ah(struct ibv_ah *ah);

/* ---- The C++ side of objects glue.c allocates ---- */

/*
 * Registers [addr, addr + length) for `mr` (glue.c's verbs_mr, zeroed, its droce slot NULL):
 * sets mr->lkey, rkey and handle. 0 or a positive errno (EINVAL: bad PD, length 0, access
 * flags droce does not know or that break ibv_reg_mr(3)'s rules, iova != addr; EOPNOTSUPP: ODP
 * from a droced without it (ABI minor < 13), IBV_ACCESS_ZERO_BASED; addr NULL with length SIZE_MAX
 * and IBV_ACCESS_ON_DEMAND registers the whole address space (implicit ODP);
 * ENOMEM; EFAULT: memory not mapped; EIO: droced gone).
 */
int droce_glue_reg_mr(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access,
                      struct ibv_mr *mr);
/*
 * ibv_reg_dm_mr: a zero-based MR on [dm_offset, dm_offset + length) of `dm` into `mr` (glue.c's
 * verbs_mr, zeroed): sets lkey, rkey, handle, context, pd, length and addr (NULL: a DM MR is
 * addressed by offsets, as ibv_cmd_reg_dm_mr leaves it). 0 or a positive errno (EINVAL: access
 * without IBV_ACCESS_ZERO_BASED or with flags other than local/remote access, a range outside
 * the DM, a PD or DM of another context; ENOMEM; EIO).
 */
int droce_glue_reg_dm_mr(struct ibv_pd *pd, struct ibv_dm *dm, uint64_t dm_offset, size_t length,
                         unsigned int access, struct ibv_mr *mr);
/* ibv_advise_mr: prefetches ODP regions' pages by faulting them in this process. 0 or a positive
 * errno (EINVAL: flags other than IBV_ADVISE_MR_FLAG_FLUSH, no SGE, an lkey that is not one of this
 * context's ODP regions, a range outside it; EOPNOTSUPP: an unknown advice; EFAULT: a page not
 * mapped). */
int droce_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags,
                    struct ibv_sge *sg_list, uint32_t num_sge);
/* Deregisters; 0 or a positive errno. */
int droce_glue_dereg_mr(struct ibv_mr *mr);
/* ibv_rereg_mr: a new registration replaces the old one (keys may change); on failure the old
 * one stands. `flags` are IBV_REREG_MR_CHANGE_*; `pd` and `addr`/`length` count only with their
 * flag; `access` is the new registration's (glue.c passes the MR's own without
 * IBV_REREG_MR_CHANGE_ACCESS). 0 or a positive errno. */
int droce_glue_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length,
                        int access);

/*
 * Creates a QP described by `attr` into `qp` (glue.c's verbs_qp, zeroed): fills every ibv_qp
 * field (context, pd, CQs, SRQ, qp_context, qp_num, state, qp_type, its mutex and cond) and
 * writes the granted capacities to attr->cap. `qpx` is the extended view of the same object when
 * attr asks for send_ops_flags (the ibv_wr_* API): its wr_* functions are filled in then. On
 * success *slot is what goes in the QP's droce slot.
 * Returns 0 or a positive errno: EINVAL (a bad attribute, CQ or SRQ of another context, an XRC
 * receive QP without its domain, create flags), EOPNOTSUPP for a QP type other than RC, UC, UD and
 * XRC, EOPNOTSUPP (send ops droce lacks: bind MW, TSO, atomic
 * write), ENOMEM (too many QPs or a queue too large), EIO (droced gone).
 */
int droce_glue_create_qp(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr, struct ibv_qp *qp,
                         struct ibv_qp_ex *qpx, void **slot);
/* ibv_open_qp: the XRC receive QP attr->qp_num of attr->xrcd, made by this or another process,
 * into `qp` (glue.c's verbs_qp, zeroed); as droce_glue_create_qp otherwise. 0 or a positive errno
 * (EINVAL: a missing attribute, another type, no such QP in the domain; EOPNOTSUPP: unknown
 * comp_mask bits or a droced before XRC). */
int droce_glue_open_qp(struct ibv_context *context, struct ibv_qp_open_attr *attr, struct ibv_qp *qp, void **slot);
/* Destroys the QP's droce side once every async event reported on it is acknowledged; glue.c
 * then frees the object. 0 or a positive errno (EBUSY never: a QP is not referenced). */
int droce_glue_destroy_qp(struct ibv_qp *qp);

#ifdef __cplusplus
}
#endif
