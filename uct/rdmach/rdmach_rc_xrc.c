/*
 * rdmach RC wire, XRC mode (MVAPICH with XRC, UCX_RDMACH_XRC): the host's XRC domain, our XRC
 * SRQ, and the INI and TGT QPs that the connection sharing core (rdmach_xrc.h) decides on,
 * over libibverbs. The rings and their protocol are the RC wire's, unchanged: a record is an
 * RDMA WRITE with immediate into the receiver's ring, sent on the host connection's INI QP
 * and naming the receiver's SRQ, which counts it in.
 *
 * Devices: XRC needs an HCA that has it (mlx4, mlx5, hns, qedr). rdma_rxe (Soft-RoCE) has no
 * open_xrcd: the domain open is where it refuses, and that refusal is what this project's
 * tests can exercise (tests/verbs/cases: xrc).
 */
#include "rdmach_rc_int.h"
#include "ucx_ext_sys.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the core's ops: every handle is a send queue record, sig set for an INI ---- */

static void *rdmach_rc_xrc_handle(struct ibv_qp *qp, uint32_t depth, uint32_t *qpn)
{
    rdmach_rc_sq_t *sq = calloc(1, sizeof(*sq));

    if ((sq != NULL) && (depth != 0)) {
        sq->sig = calloc(depth, sizeof(*sq->sig));
        if (sq->sig == NULL) {
            free(sq);
            sq = NULL;
        }
    }
    if (sq == NULL) {
        ibv_destroy_qp(qp);
        return NULL;
    }
    sq->qp    = qp;
    sq->depth = depth;
    *qpn      = qp->qp_num;
    return sq;
}

/* Creates the QP init describes and moves it to INIT (an INI sends only: no remote access);
 * its handle, or NULL (logged). depth: the send queue (0: a TGT, which has none). */
static void *rdmach_rc_xrc_qp(rdmach_rc_wire_t *w, struct ibv_qp_init_attr_ex *init,
                              uint32_t depth, uint32_t *qpn)
{
    const char *kind = (init->qp_type == IBV_QPT_XRC_SEND) ? "INI" : "TGT";
    struct ibv_qp *qp = ibv_create_qp_ex(w->dom->ctx, init);
    int ret;

    if (qp == NULL) {
        RC_LOG(w, 1, "rdmach: cannot create an XRC %s QP: %s", kind, strerror(errno));
        return NULL;
    }
    ret = rdmach_rc_qp_init(w, qp, init->qp_type == IBV_QPT_XRC_RECV);
    if (ret != 0) {
        RC_LOG(w, 1, "rdmach: cannot move an XRC %s QP to INIT: %s", kind, strerror(ret));
        ibv_destroy_qp(qp);
        return NULL;
    }
    return rdmach_rc_xrc_handle(qp, depth, qpn);
}

/* An INI QP: sends only, on our send CQ, deep enough for several connections' rings. */
static void *rdmach_rc_xrc_ini_create(void *arg, uint32_t *qpn)
{
    rdmach_rc_wire_t *w = arg;
    uint32_t depth = rdmach_rc_xrc_sq_depth(w->sq_depth, (uint32_t)w->dom->attr.max_qp_wr);
    struct ibv_qp_init_attr_ex init;

    memset(&init, 0, sizeof(init));
    init.qp_type             = IBV_QPT_XRC_SEND;
    init.send_cq             = w->cq;
    init.comp_mask           = IBV_QP_INIT_ATTR_PD;
    init.pd                  = w->dom->pd;
    init.cap.max_send_wr     = depth;
    init.cap.max_send_sge    = 1;
    init.cap.max_inline_data = (uint32_t)w->super.max_inline;
    return rdmach_rc_xrc_qp(w, &init, depth, qpn);
}

/* A TGT QP: in the host's domain, responds to one INI and delivers to any SRQ there. */
static void *rdmach_rc_xrc_tgt_create(void *arg, uint32_t *qpn)
{
    rdmach_rc_wire_t *w = arg;
    struct ibv_qp_init_attr_ex init;

    memset(&init, 0, sizeof(init));
    init.qp_type   = IBV_QPT_XRC_RECV;
    init.comp_mask = IBV_QP_INIT_ATTR_XRCD;
    init.xrcd      = w->xrcd;
    return rdmach_rc_xrc_qp(w, &init, 0, qpn);
}

static int rdmach_rc_xrc_qp_connect(void *arg, void *handle, const void *host, uint32_t dest)
{
    rdmach_rc_dev_addr_t dev;

    memcpy(&dev, host, sizeof(dev));   /* the host key is the port's device address */
    return -rdmach_rc_qp_connect(arg, ((rdmach_rc_sq_t*)handle)->qp, &dev, dest);
}

/* Our reference on a TGT another process of this host created: it lives while we hold it. */
static void *rdmach_rc_xrc_tgt_open(void *arg, uint32_t tgt_qpn)
{
    rdmach_rc_wire_t *w = arg;
    struct ibv_qp_open_attr attr;
    struct ibv_qp *qp;
    uint32_t qpn;

    memset(&attr, 0, sizeof(attr));
    attr.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
    attr.qp_num    = tgt_qpn;
    attr.xrcd      = w->xrcd;
    attr.qp_type   = IBV_QPT_XRC_RECV;
    qp = ibv_open_qp(w->dom->ctx, &attr);
    if (qp == NULL) {
        RC_LOG(w, 0, "rdmach: XRC TGT QP 0x%x is gone: %s", tgt_qpn, strerror(errno));
        return NULL;
    }
    return rdmach_rc_xrc_handle(qp, 0, &qpn);
}

static void rdmach_rc_xrc_release(void *arg, void *handle)
{
    rdmach_rc_sq_t *sq = handle;

    (void)arg;
    ibv_destroy_qp(sq->qp);   /* an opened TGT: our reference only */
    free(sq->sig);
    free(sq);
}

static const rdmach_xrc_ops_t rdmach_rc_xrc_ops = {
    rdmach_rc_xrc_ini_create, rdmach_rc_xrc_tgt_create, rdmach_rc_xrc_qp_connect,
    rdmach_rc_xrc_qp_connect, rdmach_rc_xrc_tgt_open, rdmach_rc_xrc_release
};

/* ---- the domain and the SRQ ---- */

/* The processes of a host that open the same file share one XRC domain (the kernel keys it by
 * the file). One per user and device, in /dev/shm: per host, and per container. Its name is
 * predictable and /dev/shm is everyone's, so the file must be ours alone
 * (ucx_ext_open_own_file): another user who made it first would share our domain or deny it
 * to us. */
static int rdmach_rc_xrcd_file(const rdmach_rc_wire_t *w, char *why, size_t why_len)
{
    char path[128];

    snprintf(path, sizeof(path), "/dev/shm/ucx-rdmach-xrcd.%u.%s", (unsigned)geteuid(),
             w->dom->name);
    return ucx_ext_open_own_file(path, why, why_len);
}

/* Our XRC SRQ on the receive CQ, its WQEs posted, replacing the plain SRQ. */
static int rdmach_rc_xrc_srq(rdmach_rc_wire_t *w)
{
    struct ibv_srq_init_attr_ex attr;

    if (w->rcq == NULL) {
        w->rcq = ibv_create_cq(w->dom->ctx, (int)w->srq_depth, NULL, w->chan, 0);
        if (w->rcq == NULL) {
            return -errno;
        }
    }
    if (w->srq != NULL) {
        ibv_destroy_srq(w->srq);
        w->srq = NULL;
    }
    memset(&attr, 0, sizeof(attr));
    attr.comp_mask    = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD |
                        IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD;
    attr.srq_type     = IBV_SRQT_XRC;
    attr.xrcd         = w->xrcd;
    attr.cq           = w->rcq;
    attr.pd           = w->dom->pd;
    attr.attr.max_wr  = w->srq_depth;
    attr.attr.max_sge = 1;
    w->srq = ibv_create_srq_ex(w->dom->ctx, &attr);
    if ((w->srq == NULL) || (ibv_get_srq_num(w->srq, &w->srqn) != 0) ||
        (rdmach_rc_srq_post(w, w->srq_depth) != 0)) {
        return -errno;
    }
    return 0;
}

int rdmach_rc_xrc_open(rdmach_rc_wire_t *w)
{
    const rdmach_wire_params_t *params = &w->super.params;
    struct ibv_xrcd_init_attr attr;
    char why[256];
    int ret;

    w->xrcd_fd = -1;
    if (w->config.xrc == RDMACH_RC_XRC_NO) {
        return 0;
    }
    w->xrcd_fd = rdmach_rc_xrcd_file(w, why, sizeof(why));
    if (w->xrcd_fd < 0) {
        /* not the device's doing: said as an error whatever the mode, once */
        RC_LOG(w, 1, "rdmach: %s: the XRC domain file %s", params->dev_name, why);
        if (w->config.xrc == RDMACH_RC_XRC_YES) {
            return -EPERM;
        }
        RC_LOG(w, RDMACH_WIRE_LOG_INFO, "rdmach: %s: RC, one QP per remote process",
               params->dev_name);
        return 0;
    }
    /* the device answers here: rdma_rxe has no open_xrcd (EOPNOTSUPP) */
    memset(&attr, 0, sizeof(attr));
    attr.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    attr.fd        = w->xrcd_fd;
    attr.oflags    = O_CREAT;
    w->xrcd        = ibv_open_xrcd(w->dom->ctx, &attr);
    if (w->xrcd == NULL) {
        snprintf(why, sizeof(why), "ibv_open_xrcd: %s%s", strerror(errno),
                 (w->dom->attr.device_cap_flags & IBV_DEVICE_XRC) ? "" :
                 "; IBV_DEVICE_XRC is not in its capabilities");
        goto refused;
    }
    ret = rdmach_rc_xrc_srq(w);
    if (ret != 0) {
        snprintf(why, sizeof(why), "cannot create an XRC SRQ: %s", strerror(-ret));
        goto refused;
    }
    ret = rdmach_xrc_init(&w->xrc, &rdmach_rc_xrc_ops, w, params->max_rings,
                          sizeof(rdmach_rc_dev_addr_t));
    if (ret != 0) {
        snprintf(why, sizeof(why), "%s", strerror(-ret));
        goto refused;
    }
    RC_LOG(w, RDMACH_WIRE_LOG_INFO, "rdmach: %s: XRC, one QP per remote host (SRQ 0x%x)",
           params->dev_name, w->srqn);
    return 0;

refused:
    rdmach_rc_xrc_close(w);
    if (w->config.xrc == RDMACH_RC_XRC_YES) {
        RC_LOG(w, 1, "rdmach: UCX_RDMACH_XRC=y, but device %s cannot: %s", params->dev_name,
               why);
        return -EOPNOTSUPP;
    }
    RC_LOG(w, RDMACH_WIRE_LOG_INFO, "rdmach: device %s has no XRC (%s): RC, one QP per "
           "remote process (UCX_RDMACH_XRC=auto)", params->dev_name, why);
    return 0;
}

void rdmach_rc_xrc_close(rdmach_rc_wire_t *w)
{
    if (w->xrc.hosts != NULL) {
        rdmach_xrc_cleanup(&w->xrc);
    }
    if ((w->xrcd != NULL) && (w->srq != NULL)) {
        ibv_destroy_srq(w->srq);   /* the XRC SRQ; a plain one stays for srq_close */
        w->srq = NULL;
    }
    if (w->xrcd != NULL) {
        ibv_close_xrcd(w->xrcd);
        w->xrcd = NULL;
    }
    if (w->xrcd_fd >= 0) {
        close(w->xrcd_fd);
        w->xrcd_fd = -1;
    }
}
