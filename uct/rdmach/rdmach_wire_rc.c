/*
 * rdmach InfiniBand RC verbs wire: the wire table (rdmach_wire.h) over libibverbs, the medium
 * the MPICH2 RDMA channel paper was designed for.
 *
 * This file: the wire table and the iface (open, close, SRQ, addresses, wakeup). The rest of
 * the wire, by object, each file using only those listed before it (what they share is in
 * rdmach_rc_int.h):
 *   rdmach_rc_dev.c   domains, devices, memory registration, sizing
 *   rdmach_rc_post.c  posting and completions: the ring hooks, selective signalling, CQ
 *                     polling, receive completions, progress, check, flush
 *   rdmach_rc_rma.c   RMA (bounce buffers for bcopy) and device atomics
 *   rdmach_rc_qp.c    QPs and connections: ep open, connect, close, QP states, reap
 *   rdmach_rc_xrc.c   the XRC mode's domain, SRQ and QPs (over rdmach_xrc.c's core)
 *
 * A connection is one RC QP between two eps (UCT connect-to-ep; UCP exchanges the ep addresses
 * through an auxiliary transport) and one registered block of ours:
 *
 *   [ rx ctl | rx slots ][ shadow ctl | credit line ][ shadow slots ]
 *
 *  - rx: the ring the peer RDMA-writes records into; we poll its marks like shared memory.
 *  - shadow: where we build the records of the ring we send into (the peer's rx). Where the
 *    peer receives through a shared receive queue (its ep address says so: RC_SRQ, and a
 *    device with SRQs), one RDMA WRITE with immediate (the ring id) carries a record, and
 *    the peer reads it once its receive completion counted it in: rdma_rxe places a WRITE's
 *    bytes in no defined order, so the mark alone cannot tell. Else two WRITEs carry it:
 *    header fields and payload, then the 8-byte mark, inline; RC places the WRITEs of a QP
 *    in order, so the mark is the last to land, and a doorbell byte WRITE follows when the
 *    peer's receiver told us (through our shadow ctl) that the ring is cold.
 *  - credit line: the peer's receiver writes its tail here (lazy, one inline WRITE per
 *    LAZY_TAIL of the ring); it is our sender's tail copy.
 *
 * Send queue: as deep as a full ring's records need (3 WRs a slot), so a sender short of room
 * is short of ring credit and gets NO_RESOURCE instead of waiting. Every WR carries a sequence
 * number; one in RC_SIGNAL_EVERY is signalled, and RC
 * completes in order, so a completion frees everything up to it. RMA and flush are signalled
 * and queued in a FIFO of operations per connection, completed in sequence order. A WR that
 * fails (retries exhausted, peer gone, QP in error) fails the connection once: its operations
 * complete with -ECONNRESET and the glue's failed() fails the ep.
 *
 * Rings come back (reap): a closed connection posts one last signalled WR, its fence, before
 * its QP goes to error. Error flushes a QP's WRs in order, so the fence's completion is the
 * last this QP will cause; once it came (and the receive completions queued before it were
 * counted in while the ring id still named it), the glue delivers what is left in the ring,
 * the QP, registration and block go, and the ring id serves a new connection. A late write of
 * the old peer cannot land in it: its QP is destroyed and its rkey deregistered, the new
 * connection has a new QP, block and rkey.
 */
#include "rdmach_rc_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- iface ---- */

/* The SRQ and its CQ; a device without SRQs keeps records as two WRITEs. */
static void rdmach_rc_srq_open(rdmach_rc_wire_t *w)
{
    struct ibv_srq_init_attr attr;

    w->srq_depth = RC_MIN(RC_SRQ_DEPTH, (uint32_t)w->dom->attr.max_srq_wr);
    if (!w->config.srq || (w->srq_depth < 64)) {
        return;
    }
    memset(&attr, 0, sizeof(attr));
    attr.attr.max_wr  = w->srq_depth;
    attr.attr.max_sge = 1;
    w->rcq = ibv_create_cq(w->dom->ctx, (int)w->srq_depth, NULL, w->chan, 0);
    w->srq = (w->rcq != NULL) ? ibv_create_srq(w->dom->pd, &attr) : NULL;
    if ((w->srq == NULL) || (rdmach_rc_srq_post(w, w->srq_depth) != 0)) {
        RC_LOG(w, 0, "rdmach: no shared receive queue on this device (%s): records go as "
               "two RDMA WRITEs", strerror(errno));
        if (w->srq != NULL) {
            ibv_destroy_srq(w->srq);
            w->srq = NULL;
        }
        if (w->rcq != NULL) {
            ibv_destroy_cq(w->rcq);
            w->rcq = NULL;
        }
    }
}

static void rdmach_rc_srq_close(rdmach_rc_wire_t *w)
{
    if (w->srq != NULL) {
        ibv_destroy_srq(w->srq);
    }
    if (w->rcq != NULL) {
        ibv_destroy_cq(w->rcq);
    }
}

/* What a WRITE carries inline on this device: known from a QP, so one is made and dropped. */
static size_t rdmach_rc_probe_inline(rdmach_rc_wire_t *w)
{
    uint32_t max_inline = 0;
    struct ibv_qp *qp   = rdmach_rc_create_qp(w, &max_inline);

    if (qp != NULL) {
        ibv_destroy_qp(qp);
    }
    /* a record header always goes inline */
    return (max_inline >= RDMACH_REC_HDR_SIZE) ? max_inline : 0;
}

static int rdmach_rc_open(const rdmach_wire_params_t *params, rdmach_wire_t **wire_p)
{
    rdmach_rc_wire_t *w;
    const char *colon;
    union ibv_gid gid;
    int ret = -ENOMEM;
    size_t db_size;

    if ((params->domain == NULL) || ((colon = strrchr(params->dev_name, ':')) == NULL)) {
        return -ENODEV;
    }
    w = calloc(1, sizeof(*w));
    if (w == NULL) {
        return -ENOMEM;
    }
    w->super.params = *params;
    w->super.params.config = NULL;   /* copied: the caller's may go */
    if (params->config != NULL) {
        w->config = *(const rdmach_rc_config_t*)params->config;
    } else {
        w->config = (rdmach_rc_config_t)RDMACH_RC_CONFIG_DEFAULT;
    }
    w->dom          = params->domain;
    w->port         = (uint8_t)atoi(colon + 1);
    if (ibv_query_port(w->dom->ctx, w->port, &w->port_attr) != 0) {
        RC_LOG(w, 1, "rdmach: cannot query port %s: %s", params->dev_name, strerror(errno));
        ret = -ENODEV;
        goto err;
    }
    w->gid_index = ucx_ext_verbs_pick_gid(w->dom->ctx, w->port, &w->port_attr, &gid);
    if (w->gid_index < 0) {
        RC_LOG(w, 1, "rdmach: port %s has no usable GID", params->dev_name);
        ret = -ENODEV;
        goto err;
    }
    memcpy(w->dev_addr.gid, gid.raw, sizeof(gid.raw));
    w->dev_addr.lid        = w->port_attr.lid;
    w->dev_addr.link_layer = w->port_attr.link_layer;

    w->sq_depth = rdmach_rc_sq_depth(&params->geom, (uint32_t)w->dom->attr.max_qp_wr);
    w->cq_size  = RC_MIN(RC_CQ_SIZE, w->dom->attr.max_cqe);
    w->cq_free = w->cq_size;
    w->chan    = ibv_create_comp_channel(w->dom->ctx);
    if ((w->chan != NULL) &&
        (fcntl(w->chan->fd, F_SETFL, fcntl(w->chan->fd, F_GETFL) | O_NONBLOCK) != 0)) {
        ibv_destroy_comp_channel(w->chan);
        w->chan = NULL;
    }
    w->cq      = ibv_create_cq(w->dom->ctx, w->cq_free, NULL, w->chan, 0);
    w->conns   = calloc(params->max_rings, sizeof(*w->conns));
    w->dirty   = calloc(params->max_rings, sizeof(*w->dirty));
    w->free_ids = calloc(params->max_rings, sizeof(*w->free_ids));
    db_size    = rdmach_rc_doorbell_bytes(params->max_rings);
    if ((w->cq == NULL) || (w->conns == NULL) || (w->dirty == NULL) || (w->free_ids == NULL) ||
        (posix_memalign((void**)&w->doorbells, 64, db_size) != 0)) {
        RC_LOG(w, 1, "rdmach: cannot create the completion queue of %s: %s", params->dev_name,
               strerror(errno));
        goto err_free;
    }
    memset(w->doorbells, 0, db_size);
    rdmach_rc_srq_open(w);
    ret = rdmach_rc_xrc_open(w);   /* XRC replaces the SRQ with an XRC SRQ */
    if (ret != 0) {
        goto err_free;
    }
    ret = -ENOMEM;
    w->bounce_size = params->geom.slot_size * (size_t)params->geom.max_span;
    if (posix_memalign(&w->bounce, 4096, rdmach_rc_bounce_bytes(&params->geom)) != 0) {
        w->bounce = NULL;
        goto err_free;
    }
    for (w->nbounce_free = 0; w->nbounce_free < RC_BOUNCES; ++w->nbounce_free) {
        w->bounce_free[w->nbounce_free] = RC_BOUNCES - 1 - w->nbounce_free;
    }
    w->amo = (uint64_t*)((uint8_t*)w->bounce + w->bounce_size * RC_BOUNCES);
    for (w->namo_free = 0; w->namo_free < RC_AMO_SLOTS; ++w->namo_free) {
        w->amo_free[w->namo_free] = RC_AMO_SLOTS - 1 - w->namo_free;
    }
    w->db_mr     = rdmach_rc_reg(w, w->doorbells, db_size);
    w->bounce_mr = rdmach_rc_reg(w, w->bounce, rdmach_rc_bounce_bytes(&params->geom));
    if ((w->db_mr == NULL) || (w->bounce_mr == NULL)) {
        RC_LOG(w, 1, "rdmach: cannot register memory on %s: %s (check ulimit -l)",
               params->dev_name, strerror(errno));
        goto err_free;
    }

    w->super.ops         = &rdmach_wire_rc_ops;
    w->super.geom        = params->geom;
    w->super.max_rings   = params->max_rings;
    w->super.next_credit = 0;
    w->super.doorbells   = w->doorbells;
    w->super.next_ring   = &w->next_ring;
    w->super.size        = db_size;
    /* what the port moves and takes, as rc_verbs reports it (RDMA WRITE and READ are the
     * HCA's, so are their costs): UCP's eager/rendezvous threshold then follows rc_verbs'. A
     * fixed 1e9 B/s and 2 us (before) kept UCP 1.13 eager up to 553,309 B where rc_verbs
     * goes to rendezvous from 208,781 B (many-to-many 16-256 KiB at 0.45-0.65x rc_verbs). */
    ucx_ext_verbs_port_perf(&w->port_attr, RDMACH_RC_RETH_LEN, &w->super.latency,
                            &w->super.bandwidth);
    w->super.max_inline  = rdmach_rc_probe_inline(w);
    w->super.rma_async_min = SIZE_MAX;   /* the glue copies to mapped memory itself */
    /* 64-bit fetch-and-add and compare-and-swap: every HCA that has atomics, rxe included */
    w->super.atomics     = (w->dom->attr.atomic_cap != IBV_ATOMIC_NONE) &&
                           (w->dom->attr.max_qp_rd_atom > 0);
    *wire_p              = &w->super;
    return 0;

err_free:
    rdmach_rc_xrc_close(w);
    rdmach_rc_srq_close(w);
    if (w->db_mr != NULL) {
        rdmach_rc_dereg(w->db_mr);
    }
    if (w->bounce_mr != NULL) {
        rdmach_rc_dereg(w->bounce_mr);
    }
    if (w->cq != NULL) {
        ibv_destroy_cq(w->cq);
    }
    if (w->chan != NULL) {
        ibv_destroy_comp_channel(w->chan);
    }
    free(w->bounce);
    free(w->doorbells);
    free(w->conns);
    free(w->dirty);
    free(w->free_ids);
err:
    free(w);
    return ret;
}

static void rdmach_rc_close(rdmach_wire_t *wire)
{
    rdmach_rc_wire_t *w = (rdmach_rc_wire_t*)wire;
    uint32_t i;

    for (i = 0; i < w->next_ring; ++i) {
        if (w->conns[i] != NULL) {
            rdmach_rc_conn_free(w->conns[i]);
        }
    }
    rdmach_rc_dereg(w->db_mr);
    rdmach_rc_dereg(w->bounce_mr);
    rdmach_rc_xrc_close(w);
    rdmach_rc_srq_close(w);
    ibv_destroy_cq(w->cq);
    if (w->chan != NULL) {
        ibv_destroy_comp_channel(w->chan);   /* its events were acked as they came */
    }
    free(w->bounce);
    free(w->doorbells);
    free(w->conns);
    free(w->dirty);
    free(w->free_ids);
    free(w);
}

static void rdmach_rc_pack_dev_addr(const rdmach_wire_t *wire, void *buf)
{
    memcpy(buf, &((const rdmach_rc_wire_t*)wire)->dev_addr, sizeof(rdmach_rc_dev_addr_t));
}

static void rdmach_rc_pack_addr(const rdmach_wire_t *wire, void *buf)
{
    (void)wire;
    (void)buf;
}

static int rdmach_rc_unpack_addr(const rdmach_wire_t *wire, const void *dev_addr,
                                 const void *iface_addr, rdmach_wire_addr_t *info)
{
    const rdmach_rc_wire_t *w = (const rdmach_rc_wire_t*)wire;
    rdmach_rc_dev_addr_t addr;

    (void)iface_addr;
    memcpy(&addr, dev_addr, sizeof(addr));
    if (addr.link_layer != w->dev_addr.link_layer) {
        return -EHOSTUNREACH;
    }
    info->pid = 0;
    snprintf(info->name, sizeof(info->name), "lid %u gid %02x%02x:%02x%02x", addr.lid,
             addr.gid[12], addr.gid[13], addr.gid[14], addr.gid[15]);
    return 0;
}

/* ---- wakeup: the CQs' completion channel ----
 * With a shared receive queue every record is a receive completion, so the channel tells a
 * sleeping receiver of records as well as of its own operations' completions. Without one,
 * records land silently (two WRITEs): no wakeup then. */

static int rdmach_rc_event_fd(const rdmach_wire_t *wire)
{
    const rdmach_rc_wire_t *w = (const rdmach_rc_wire_t*)wire;

    return ((w->chan != NULL) && (w->srq != NULL)) ? w->chan->fd : -1;
}

/* Acks what the channel reported, asks both CQs for their next completion, then polls once
 * more: a completion that came before the request raises no event, so it is handled here and
 * the glue stays awake. Returns what that poll found. */
static int rdmach_rc_sleep(rdmach_wire_t *wire)
{
    rdmach_rc_wire_t *w = (rdmach_rc_wire_t*)wire;
    struct ibv_cq *cq;
    void *ctx;

    while (ibv_get_cq_event(w->chan, &cq, &ctx) == 0) {
        ibv_ack_cq_events(cq, 1);
    }
    if ((ibv_req_notify_cq(w->cq, 0) != 0) || (ibv_req_notify_cq(w->rcq, 0) != 0)) {
        return 1;   /* cannot arm: stay awake (polling) */
    }
    return (int)rdmach_rc_progress(wire);
}

static void rdmach_rc_awake(rdmach_wire_t *wire)
{
    (void)wire;   /* an armed CQ reports once; nothing to undo */
}

const rdmach_wire_ops_t rdmach_wire_rc_ops = {
    .name           = "rc",
    .caps           = {
        .this_host    = 0,
        .to_ep        = 1,
        .copy_cores   = 1,
        .slot_size    = 256,
        .eager_limit  = 256 * 1024,
        .zcopy_thresh = 0,
        .flush_comp   = 0,
        .arm_sends    = 1,
        .overhead     = 75e-9
    },
    .query_domains  = rdmach_rc_query_domains,
    .domain_open    = rdmach_rc_domain_open,
    .domain_close   = rdmach_rc_domain_close,
    .mem_reg        = rdmach_rc_mem_reg,
    .mem_dereg      = rdmach_rc_mem_dereg,
    .query_devices  = rdmach_rc_query_devices,
    .open           = rdmach_rc_open,
    .close          = rdmach_rc_close,
    .dev_addr_len   = sizeof(rdmach_rc_dev_addr_t),
    .pack_dev_addr  = rdmach_rc_pack_dev_addr,
    .iface_addr_len = 0,
    .pack_addr      = rdmach_rc_pack_addr,
    .unpack_addr    = rdmach_rc_unpack_addr,
    .attach         = NULL,   /* ep to ep */
    .claim          = NULL,
    .ep_addr_len    = sizeof(rdmach_rc_ep_addr_t),
    .ep_open        = rdmach_rc_ep_open,
    .ep_pack_addr   = rdmach_rc_ep_pack_addr,
    .ep_connect     = rdmach_rc_ep_connect,
    .ep_close       = rdmach_rc_ep_close,
    .activate       = rdmach_rc_activate,
    .ring_sender    = NULL,   /* serves no requests: its peers are on other hosts */
    .ring           = {rdmach_rc_post_record, rdmach_rc_post_tail, rdmach_rc_post_hot, NULL},
    .rma            = rdmach_rc_rma,
    .get_unpack     = rdmach_rc_get_unpack,
    .atomic64       = rdmach_rc_atomic64,
    .progress       = rdmach_rc_progress,
    .check          = rdmach_rc_check,
    .flush          = rdmach_rc_flush,
    .fence_query    = 0,              /* the glue fences as UCX's sm does */
    .event_fd       = rdmach_rc_event_fd,
    .sleep          = rdmach_rc_sleep,
    .awake          = rdmach_rc_awake,
    .reap           = rdmach_rc_reap,
    .unclaim        = NULL    /* a connection is both directions: reap takes it whole */
};
