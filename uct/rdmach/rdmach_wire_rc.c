/*
 * rdmach InfiniBand RC verbs wire: the wire table (rdmach_wire.h) over libibverbs, the medium
 * the MPICH2 RDMA channel paper was designed for.
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

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STATS(_w, _f) RDMACH_WIRE_STATS(&(_w)->super)->_f


static const rdmach_ring_ops_t rdmach_rc_ring_ops;

#define RDMACH_RC_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
                          IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

/* ---- sizing: what the allocations below take, and the resource model's figures ---- */

static size_t rdmach_rc_ring_bytes(const rdmach_geom_t *geom)
{
    return sizeof(rdmach_ring_ctl_t) + rdmach_geom_ring_bytes(geom);
}

/* A connection's block: rx ring | shadow ctl (the credit line in its padding) + slots. */
static size_t rdmach_rc_block_bytes(const rdmach_geom_t *geom)
{
    return 2 * rdmach_rc_ring_bytes(geom);
}

/* A sender waiting for ring credit must not also wait for send queue room (a dead peer would
 * hold it in the send call until its QP fails): 3 WRs per slot, and RMA. */
static uint32_t rdmach_rc_sq_depth(const rdmach_geom_t *geom, uint32_t max_qp_wr)
{
    return RC_MIN(3u * geom->nslots + RC_SQ_EXTRA, max_qp_wr);
}

static size_t rdmach_rc_doorbell_bytes(uint32_t max_rings)
{
    return (max_rings + 63) & ~(size_t)63;
}

/* RC_BOUNCES buffers of a record's span, then RC_AMO_SLOTS atomic results. */
static size_t rdmach_rc_bounce_bytes(const rdmach_geom_t *geom)
{
    return geom->slot_size * (size_t)geom->max_span * RC_BOUNCES +
           RC_AMO_SLOTS * sizeof(uint64_t);
}

void rdmach_wire_rc_sizing(const rdmach_geom_t *geom, uint32_t max_rings, uint32_t max_qp_wr,
                           rdmach_wire_rc_sizing_t *sizing)
{
    sizing->iface_reg_bytes  = rdmach_rc_doorbell_bytes(max_rings) +
                               rdmach_rc_bounce_bytes(geom);
    sizing->conn_reg_bytes   = rdmach_rc_block_bytes(geom);
    sizing->conn_state_bytes = sizeof(rdmach_rc_conn_t);
    sizing->conn_sq_depth    = rdmach_rc_sq_depth(geom, max_qp_wr);
    sizing->xrc_sq_depth     = rdmach_rc_xrc_sq_depth(sizing->conn_sq_depth, max_qp_wr);
}

/* Registered bytes of the wire's own memory, process-wide (the counters are), and their
 * peak: the live figure the sizing functions are checked against. */
static uint64_t rdmach_rc_reg_now;

static struct ibv_mr *rdmach_rc_reg(rdmach_rc_wire_t *w, void *addr, size_t len)
{
    struct ibv_mr *mr = ibv_reg_mr(w->dom->pd, addr, len, RDMACH_RC_ACCESS);
    uint64_t now;

    if (mr != NULL) {
        now = __atomic_add_fetch(&rdmach_rc_reg_now, len, __ATOMIC_RELAXED);
        if (now > STATS(w, reg_peak)) {
            STATS(w, reg_peak) = now;
        }
    }
    return mr;
}

static void rdmach_rc_dereg(struct ibv_mr *mr)
{
    if (mr != NULL) {
        __atomic_sub_fetch(&rdmach_rc_reg_now, mr->length, __ATOMIC_RELAXED);
        ibv_dereg_mr(mr);
    }
}

/* ---- domains and devices ---- */

typedef struct {
    char     (*names)[RDMACH_WIRE_DEV_NAME_MAX];
    unsigned n, max;
} rdmach_rc_names_t;

/* A domain is an HCA with a usable port: its ports come in a row, the name is added once. */
static int rdmach_rc_add_name(void *arg, const char *name, uint8_t port, struct ibv_context *ctx)
{
    rdmach_rc_names_t *names = arg;

    (void)port;
    (void)ctx;
    if ((names->n > 0) && (strcmp(names->names[names->n - 1], name) == 0)) {
        return 0;
    }
    if (names->n < names->max) {
        snprintf(names->names[names->n++], RDMACH_WIRE_DEV_NAME_MAX, "%s", name);
    }
    return 0;
}

static unsigned rdmach_rc_query_domains(char (*names)[RDMACH_WIRE_DEV_NAME_MAX], unsigned max)
{
    rdmach_rc_names_t found = {names, 0, max};

    (void)ucx_ext_verbs_each_port(rdmach_rc_add_name, &found);
    return found.n;
}

static int rdmach_rc_domain_open(const char *name, rdmach_wire_domain_t **domain_p)
{
    rdmach_wire_domain_t *dom;
    int ret = -ENODEV;

    dom = calloc(1, sizeof(*dom));
    if (dom == NULL) {
        return -ENOMEM;
    }
    dom->ctx = ucx_ext_verbs_open(name);
    if (dom->ctx == NULL) {
        goto err;
    }
    if (ibv_query_device(dom->ctx, &dom->attr) != 0) {
        ret = -errno;
        goto err_close;
    }
    dom->pd = ibv_alloc_pd(dom->ctx);
    if (dom->pd == NULL) {
        ret = -errno;
        goto err_close;
    }
    snprintf(dom->name, sizeof(dom->name), "%s", name);
    *domain_p = dom;
    return 0;

err_close:
    ibv_close_device(dom->ctx);
err:
    free(dom);
    return ret;
}

static void rdmach_rc_domain_close(rdmach_wire_domain_t *dom)
{
    ibv_dealloc_pd(dom->pd);
    ibv_close_device(dom->ctx);
    free(dom);
}

static int rdmach_rc_mem_reg(rdmach_wire_domain_t *dom, void *addr, size_t len, void **reg_p,
                             uint32_t *rkey_p)
{
    struct ibv_mr *mr = ibv_reg_mr(dom->pd, addr, len ? len : 1, RDMACH_RC_ACCESS);

    if (mr == NULL) {
        return (errno != 0) ? -errno : -ENOMEM;
    }
    *reg_p  = mr;
    *rkey_p = mr->rkey;
    return 0;
}

static void rdmach_rc_mem_dereg(void *reg)
{
    ibv_dereg_mr(reg);
}

static unsigned rdmach_rc_query_devices(rdmach_wire_domain_t *dom, rdmach_wire_dev_t *devs,
                                        unsigned max)
{
    unsigned n = 0;
    uint8_t p;

    for (p = 1; (dom != NULL) && (p <= dom->attr.phys_port_cnt) && (n < max); ++p) {
        if (ucx_ext_verbs_port_usable(dom->ctx, p, NULL)) {
            snprintf(devs[n].name, sizeof(devs[n].name), "%.24s:%u", dom->name, p);
            devs[n].type = RDMACH_WIRE_DEV_NET;
            ++n;
        }
    }
    return n;
}

/* ---- iface ---- */

static struct ibv_qp *rdmach_rc_create_qp(rdmach_rc_wire_t *w, uint32_t *max_inline)
{
    static const uint32_t inline_try[] = {512, 256, 64, 0};
    struct ibv_qp_init_attr init;
    struct ibv_qp *qp = NULL;
    unsigned i;

    for (i = 0; (qp == NULL) && (i < sizeof(inline_try) / sizeof(inline_try[0])); ++i) {
        memset(&init, 0, sizeof(init));
        init.send_cq             = w->cq;
        init.recv_cq             = (w->srq != NULL) ? w->rcq : w->cq;
        init.srq                 = (w->xrcd == NULL) ? w->srq : NULL;   /* XRC's is no RC's */
        init.qp_type             = IBV_QPT_RC;
        init.sq_sig_all          = 0;
        init.cap.max_send_wr     = w->sq_depth;
        init.cap.max_recv_wr     = (w->srq != NULL) ? 0 : 1;
        init.cap.max_send_sge    = 1;
        init.cap.max_recv_sge    = 1;
        init.cap.max_inline_data = inline_try[i];
        qp = ibv_create_qp(w->dom->pd, &init);
    }
    if ((qp != NULL) && (max_inline != NULL)) {
        *max_inline = init.cap.max_inline_data;
    }
    return qp;
}

/* Receive WQEs without buffers into the SRQ: a WRITE with immediate consumes one. */
int rdmach_rc_srq_post(rdmach_rc_wire_t *w, uint32_t n)
{
    struct ibv_recv_wr wr[32], *bad;
    uint32_t i, k;

    while (n > 0) {
        k = RC_MIN(n, 32u);
        memset(wr, 0, sizeof(wr[0]) * k);
        for (i = 0; i < k; ++i) {
            wr[i].next = (i + 1 < k) ? &wr[i + 1] : NULL;
        }
        if (ibv_post_srq_recv(w->srq, wr, &bad) != 0) {
            return -1;
        }
        n -= k;
    }
    return 0;
}

/* The SRQ and its CQ; a device without SRQs keeps records as two WRITEs. */
static void rdmach_rc_srq_open(rdmach_rc_wire_t *w)
{
    struct ibv_srq_init_attr attr;

    w->srq_depth = RC_MIN(RC_SRQ_DEPTH, (uint32_t)w->dom->attr.max_srq_wr);
    if (!w->super.params.net_srq || (w->srq_depth < 64)) {
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

static void rdmach_rc_conn_free(rdmach_rc_conn_t *c)
{
    if (c->w->xrcd != NULL) {
        rdmach_xrc_conn_close(&c->w->xrc, &c->xrc);   /* the host connection is shared */
    } else if (c->qp != NULL) {
        ibv_destroy_qp(c->qp);
    }
    if (c->mr != NULL) {
        rdmach_rc_dereg(c->mr);
    }
    free(c->block);
    free(c);
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

/* ---- send queue ---- */

static inline uint64_t rdmach_rc_wr_id(const rdmach_rc_conn_t *c, uint64_t seq)
{
    return ((uint64_t)c->ring_id << RC_SEQ_BITS) | (seq & RC_SEQ_MASK);
}

static inline uint32_t rdmach_rc_sq_free(const rdmach_rc_conn_t *c)
{
    /* an owed XRC notice goes ahead of the next WR: its room is kept */
    return c->sq->depth - (uint32_t)(c->sq->posted - c->sq->completed) - (uint32_t)c->notice_due;
}

static void rdmach_rc_fail(rdmach_rc_conn_t *c, int err);

static inline void *rdmach_rc_bounce(rdmach_rc_wire_t *w, int idx)
{
    return (uint8_t*)w->bounce + (size_t)idx * w->bounce_size;
}

/* Delivers the operations done up to c->completed, in order. */
static void rdmach_rc_deliver(rdmach_rc_conn_t *c)
{
    rdmach_rc_wire_t *w = c->w;
    rdmach_rc_op_t *op;

    while (c->op_head != c->op_tail) {
        op = &c->ops[c->op_head % RC_OPS_MAX];
        if (!c->failed && (op->seq > c->completed)) {
            break;
        }
        ++c->op_head;
        if (op->bounce >= 0) {
            if ((op->unpack != NULL) && !c->failed) {
                op->unpack(op->arg, rdmach_rc_bounce(w, op->bounce), op->len);
            }
            w->bounce_free[w->nbounce_free++] = op->bounce;
        }
        if (op->amo >= 0) {
            if (!c->failed) {
                *op->result = w->amo[op->amo];
            }
            w->amo_free[w->namo_free++] = op->amo;
        }
        if (op->comp != NULL) {
            w->super.params.complete(op->comp, c->failed ? -ECONNRESET : 0);
        }
    }
}

/* The connection of ring id (from a completion or a peer's immediate: checked), or NULL. */
static inline rdmach_rc_conn_t *rdmach_rc_conn(const rdmach_rc_wire_t *w, uint32_t id)
{
    return (id < w->next_ring) ? w->conns[id] : NULL;
}

/* A signalled WR of c completed: its QP's WRs up to it are done. A QP of its own: c's
 * sequence is the QP's. Shared (XRC): the next signalled position of the QP (they complete
 * in order). */
static inline void rdmach_rc_sq_done(rdmach_rc_conn_t *c)
{
    rdmach_rc_sq_t *sq = c->sq;

    if (sq->sig == NULL) {
        sq->completed = c->completed;
    } else if (sq->sig_head != sq->sig_tail) {
        sq->completed = sq->sig[sq->sig_head++ % sq->depth];
    }
}

/* Polls the CQ; deliver == 0 (inside an operation): only advances the completed sequences,
 * and the operations they finish are delivered by the next progress. */
static unsigned rdmach_rc_poll(rdmach_rc_wire_t *w, int deliver)
{
    struct ibv_wc wc[RC_POLL_BATCH];
    rdmach_rc_conn_t *c;
    int i, n;

    n = ibv_poll_cq(w->cq, RC_POLL_BATCH, wc);
    for (i = 0; i < n; ++i) {
        if (w->cq_free < w->cq_size) {
            ++w->cq_free;   /* a QP in error completes unsignalled WRs too */
        }
        c = rdmach_rc_conn(w, (uint32_t)(wc[i].wr_id >> RC_SEQ_BITS));
        if (c == NULL) {
            continue;
        }
        if (c->closed && (c->fence_seq != 0) && ((wc[i].wr_id & RC_SEQ_MASK) == c->fence_seq)) {
            c->fence_done = 1;   /* flushed or done: nothing of this QP comes after it */
            ++w->super.reap_ready;
        }
        if (wc[i].status != IBV_WC_SUCCESS) {
            if (!c->failed) {
                RC_LOG(w, 0, "rdmach: RC connection of ring %u failed: %s (vendor error 0x%x)",
                       c->ring_id, ibv_wc_status_str(wc[i].status), wc[i].vendor_err);
            }
            if ((w->xrcd != NULL) && (c->xrc.host >= 0)) {
                /* the host connection's INI QP is in error: every connection through it
                 * fails with its own WRs' flushed completions; new ones make a new one */
                rdmach_xrc_host_failed(&w->xrc, c->xrc.host);
            }
            rdmach_rc_fail(c, -ECONNRESET);
            continue;
        }
        STATS(w, completions)++;
        /* 2^40 WRs per connection: the sequence does not wrap in practice; a nested poll
         * (from a send inside a completion callback) may have seen a later one */
        if ((wc[i].wr_id & RC_SEQ_MASK) > c->completed) {
            c->completed = wc[i].wr_id & RC_SEQ_MASK;
        }
        rdmach_rc_sq_done(c);
        if ((w->xrcd != NULL) && (c->xrc.host >= 0)) {
            rdmach_xrc_confirm(&w->xrc, c->xrc.host);   /* its TGT answers: shareable */
        }
        if (c->op_head != c->op_tail) {
            if (deliver) {
                rdmach_rc_deliver(c);
            } else if (!c->dirty) {
                c->dirty             = 1;
                w->dirty[w->ndirty++] = c->ring_id;
            }
        }
    }
    if (deliver && (w->ndirty != 0)) {
        while (w->ndirty != 0) {
            c        = w->conns[w->dirty[--w->ndirty]];
            c->dirty = 0;
            rdmach_rc_deliver(c);
        }
    }
    return (n > 0) ? (unsigned)n : 0;
}

/* Posts a chain of n WRs; the last is signalled when 'signal' or when RC_SIGNAL_EVERY WRs
 * went unsignalled. Returns the last WR's sequence, or 0 (errno set). */
static void rdmach_rc_write_wr(struct ibv_send_wr *wr, struct ibv_sge *sge, void *addr,
                               uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey,
                               int inl);

/* XRC: the notice the peer awaits (the TGT on its host our INI reaches), one inline WRITE
 * into its rx ctl ahead of our first WR to it: RC places a QP's WRITEs in order, so the peer
 * has it before any record of ours completes there (rdmach_rc_poll_recv reads it then). */
static int rdmach_rc_post_notice(rdmach_rc_conn_t *c)
{
    uint64_t word = rdmach_rc_notice_pack(c->xrc.tgt_used);
    struct ibv_send_wr wr, *bad;
    struct ibv_sge sge;
    int ret;

    memset(&wr, 0, sizeof(wr));
    rdmach_rc_write_wr(&wr, &sge, &word, sizeof(word), 0,
                       c->r_slots - sizeof(rdmach_ring_ctl_t) +
                       offsetof(rdmach_ring_ctl_t, peer_info[RDMACH_RC_NOTICE_WORD]),
                       c->r_rkey, 1);
    wr.qp_type.xrc.remote_srqn = c->r_srqn;
    wr.wr_id                   = rdmach_rc_wr_id(c, c->posted);   /* names c if flushed */
    ret = ibv_post_send(c->qp, &wr, &bad);
    if (ret == 0) {
        c->notice_due = 0;
        ++c->sq->posted;   /* unsignalled: retired by the next signalled WR of the QP */
        STATS(c->w, posts)++;
    }
    return ret;
}

static uint64_t rdmach_rc_post(rdmach_rc_conn_t *c, struct ibv_send_wr *wr, unsigned n,
                               int signal)
{
    rdmach_rc_wire_t *w = c->w;
    rdmach_rc_sq_t *sq  = c->sq;
    struct ibv_send_wr *bad;
    uint64_t seq        = c->posted + n;
    unsigned i;
    int ret;

    if (c->notice_due && ((ret = rdmach_rc_post_notice(c)) != 0)) {
        errno = ret;
        return 0;
    }
    /* signalling is counted per QP: a QP shared by connections (XRC) retires its WRs only
     * through its own signalled ones */
    if (sq->posted + n - sq->signalled >= RC_SIGNAL_EVERY) {
        signal = 1;
    }
    for (i = 0; i < n; ++i) {
        wr[i].next       = (i + 1 < n) ? &wr[i + 1] : NULL;
        wr[i].wr_id      = rdmach_rc_wr_id(c, c->posted + i + 1);
        wr[i].send_flags = (wr[i].send_flags & IBV_SEND_INLINE) |
                           ((signal && (i + 1 == n)) ? IBV_SEND_SIGNALED : 0);
        wr[i].qp_type.xrc.remote_srqn = c->r_srqn;   /* XRC: the peer's SRQ; RC ignores it */
    }
    ret = ibv_post_send(c->qp, wr, &bad);
    if (ret != 0) {
        errno = ret;
        return 0;
    }
    c->posted   = seq;
    sq->posted += n;
    STATS(w, posts) += n;
    if (signal) {
        c->signalled  = seq;
        sq->signalled = sq->posted;
        if (sq->sig != NULL) {
            sq->sig[sq->sig_tail++ % sq->depth] = sq->posted;
        }
        --w->cq_free;
    }
    return seq;
}

/* Waits until the send queue has room for n WRs (a record cannot be refused: the ring core
 * has committed it). Completions free the room; the peer's ACKs bring them. */
static int rdmach_rc_wait_room(rdmach_rc_conn_t *c, unsigned n)
{
    while ((rdmach_rc_sq_free(c) < n) || (c->w->cq_free < 2)) {
        if (c->failed) {
            return -ECONNRESET;
        }
        rdmach_rc_poll(c->w, 0);
    }
    return c->failed ? -ECONNRESET : 0;
}

static void rdmach_rc_write_wr(struct ibv_send_wr *wr, struct ibv_sge *sge, void *addr,
                               uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey,
                               int inl)
{
    sge->addr            = (uintptr_t)addr;
    sge->length          = len;
    sge->lkey            = lkey;
    wr->sg_list          = sge;
    wr->num_sge          = (len == 0) ? 0 : 1;
    wr->opcode           = IBV_WR_RDMA_WRITE;
    wr->send_flags       = inl ? IBV_SEND_INLINE : 0;
    wr->wr.rdma.remote_addr = raddr;
    wr->wr.rdma.rkey     = rkey;
}

/* ---- ring hooks ---- */

static const uint8_t rdmach_rc_one = 1;

/*
 * A record is two WRITEs on the QP: everything but the mark (header fields and payload), then
 * the 8-byte mark, inline. The responder places the first completely before the second, and
 * however the device stores the mark's bytes, it can only equal the expected position once all
 * its differing bytes landed: a receiver that sees the mark sees the whole record. (One WRITE
 * of header and payload would not do: the device may store its bytes in any order.)
 */
static void rdmach_rc_post_record(void *ctx, uint32_t index, const void *rec, size_t bytes,
                                  int doorbell)
{
    rdmach_rc_conn_t *c  = ctx;
    size_t inl           = c->w->super.max_inline;
    uint64_t raddr       = c->r_slots + (uint64_t)index * c->super.geom.slot_size;
    const size_t mark    = sizeof(((rdmach_rec_hdr_t*)0)->mark);
    struct ibv_send_wr wr[3];
    struct ibv_sge sge[3];
    unsigned n = 0;

    if (c->failed || (rdmach_rc_wait_room(c, c->imm ? 1 : 3) != 0)) {
        return;   /* the connection failed: its ep reports it */
    }
    if (c->imm) {
        /* one WRITE with immediate: the receiver reads the record once its completion
         * arrives (which also rings the ring's doorbell there): one packet, no doorbell */
        memset(&wr[0], 0, sizeof(wr[0]));
        rdmach_rc_write_wr(&wr[0], &sge[0], (void*)rec, (uint32_t)bytes, c->mr->lkey, raddr,
                           c->r_rkey, bytes <= inl);
        wr[0].opcode   = IBV_WR_RDMA_WRITE_WITH_IMM;
        wr[0].imm_data = htonl(c->r_ring);
        if (rdmach_rc_post(c, wr, 1, 0) == 0) {
            rdmach_rc_fail(c, -errno);
        }
        return;
    }
    memset(wr, 0, sizeof(wr));
    rdmach_rc_write_wr(&wr[n], &sge[n], (uint8_t*)rec + mark, (uint32_t)(bytes - mark),
                       c->mr->lkey, raddr + mark, c->r_rkey, bytes - mark <= inl);
    ++n;
    rdmach_rc_write_wr(&wr[n], &sge[n], (void*)rec, (uint32_t)mark, c->mr->lkey, raddr,
                       c->r_rkey, mark <= inl);
    ++n;
    if (doorbell) {
        rdmach_rc_write_wr(&wr[n], &sge[n], (void*)&rdmach_rc_one, 1, 0, c->r_doorbell,
                           c->r_db_rkey, 1);
        ++n;
    }
    if (rdmach_rc_post(c, wr, n, 0) == 0) {
        rdmach_rc_fail(c, -errno);
    }
}

/* A small value WRITE (inline: the value is copied at post time). */
static void rdmach_rc_post_value(rdmach_rc_conn_t *c, const void *value, uint32_t len,
                                 uint64_t raddr)
{
    struct ibv_send_wr wr;
    struct ibv_sge sge;

    if (c->failed || !c->connected || (rdmach_rc_wait_room(c, 1) != 0)) {
        return;
    }
    memset(&wr, 0, sizeof(wr));
    rdmach_rc_write_wr(&wr, &sge, (void*)value, len, 0, raddr, c->r_rkey, 1);
    if (rdmach_rc_post(c, &wr, 1, 0) == 0) {
        rdmach_rc_fail(c, -errno);
    }
}

static void rdmach_rc_post_tail(void *ctx, uint64_t tail)
{
    rdmach_rc_conn_t *c = ctx;

    rdmach_rc_post_value(c, &tail, sizeof(tail), c->r_credit);
}

static void rdmach_rc_post_hot(void *ctx, uint32_t hot)
{
    rdmach_rc_conn_t *c = ctx;

    if (c->w->srq != NULL) {
        return;   /* records ring the doorbell through their completion: no sender asks */
    }
    rdmach_rc_post_value(c, &hot, sizeof(hot),
                         c->r_shadow_ctl + offsetof(rdmach_ring_ctl_t, rx_hot));
}

static const rdmach_ring_ops_t rdmach_rc_ring_ops = {
    rdmach_rc_post_record, rdmach_rc_post_tail, rdmach_rc_post_hot, NULL
};

/* ---- connections ---- */

static int rdmach_rc_ep_open(rdmach_wire_t *wire, void *ep_ctx, rdmach_wire_peer_t **peer_p)
{
    rdmach_rc_wire_t *w = (rdmach_rc_wire_t*)wire;
    size_t ring         = rdmach_rc_ring_bytes(&wire->geom);
    rdmach_rc_conn_t *c;
    uint32_t id;
    int ret;

    if (w->nfree > 0) {
        id = w->free_ids[w->nfree - 1];   /* taken back from a closed connection */
    } else if (w->next_ring < wire->max_rings) {
        id = w->next_ring;
    } else {
        return -ENOSPC;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return -ENOMEM;
    }
    c->w                = w;
    c->ep_ctx           = ep_ctx;
    c->xrc.host         = c->xrc.tgt = -1;
    c->ring_id          = id;
    c->super.geom       = wire->geom;
    c->super.max_rings  = wire->max_rings;
    /* rx ring | shadow ctl + credit line (one ctl: the credit line is in its padding) |
     * shadow slots */
    c->block_size = rdmach_rc_block_bytes(&wire->geom);
    if (posix_memalign((void**)&c->block, 4096, c->block_size) != 0) {
        c->block = NULL;
        ret      = -ENOMEM;
        goto err;
    }
    memset(c->block, 0, c->block_size);
    c->rx_ctl   = (rdmach_ring_ctl_t*)c->block;
    c->sh_ctl   = (rdmach_ring_ctl_t*)(c->block + ring);
    c->credit   = &c->sh_ctl->peer_info[0];
    c->sh_slots = (uint8_t*)(c->sh_ctl + 1);
    c->mr       = rdmach_rc_reg(w, c->block, c->block_size);
    if (c->mr == NULL) {
        ret = -errno;
        RC_LOG(w, 1, "rdmach: cannot register %zu bytes for a connection: %s (check ulimit -l)",
               c->block_size, strerror(errno));
        goto err;
    }

    if (w->xrcd != NULL) {
        /* XRC: the QPs come from the host connection at connect; offer candidates */
        ret = rdmach_xrc_conn_open(&w->xrc, &c->xrc);
        if (ret != 0) {
            RC_LOG(w, 1, "rdmach: cannot create XRC QPs: %s", strerror(-ret));
            goto err;
        }
        c->sq = &c->own_sq;   /* no QP, no room until connect */
    } else {
        c->qp = rdmach_rc_create_qp(w, NULL);
        if (c->qp == NULL) {
            ret = -errno;
            RC_LOG(w, 1, "rdmach: cannot create an RC QP: %s", strerror(errno));
            goto err;
        }
        ret = rdmach_rc_qp_init(w, c->qp, 1);
        if (ret != 0) {
            RC_LOG(w, 1, "rdmach: cannot move an RC QP to INIT: %s", strerror(ret));
            ret = -ret;
            goto err;
        }
        c->own_sq.qp    = c->qp;
        c->own_sq.depth = w->sq_depth;
        c->sq           = &c->own_sq;
    }

    w->conns[c->ring_id] = c;
    /* the poller sees the ring from now on; it activates once connected */
    if (c->ring_id == w->next_ring) {
        __atomic_store_n(&w->next_ring, c->ring_id + 1, __ATOMIC_RELEASE);
    } else {
        --w->nfree;
    }
    *peer_p = &c->super;
    return 0;

err:
    rdmach_rc_conn_free(c);
    return ret;
}

static void rdmach_rc_ep_pack_addr(const rdmach_wire_peer_t *peer, void *buf)
{
    const rdmach_rc_conn_t *c = (const rdmach_rc_conn_t*)peer;
    const rdmach_rc_wire_t *w = c->w;
    rdmach_rc_ep_addr_t addr;

    memset(&addr, 0, sizeof(addr));
    addr.qpn        = (c->qp != NULL) ? c->qp->qp_num : 0;
    addr.ring_id    = c->ring_id;
    addr.rkey       = c->mr->rkey;
    addr.ring       = (uintptr_t)c->rx_ctl;
    addr.shadow_ctl = (uintptr_t)c->sh_ctl;
    addr.credit     = (uintptr_t)c->credit;
    addr.doorbell   = (uintptr_t)(w->doorbells + c->ring_id);
    addr.db_rkey    = w->db_mr->rkey;
    addr.slot_size  = c->super.geom.slot_size;
    addr.nslots     = c->super.geom.nslots;
    addr.flags      = (w->srq != NULL) ? RDMACH_RC_ADDR_IMM : 0;
    if (w->xrcd != NULL) {
        addr.flags |= RDMACH_RC_ADDR_XRC;
        addr.srqn   = w->srqn;
        rdmach_xrc_conn_pack(&w->xrc, &c->xrc, &addr.xrc);
    }
    memcpy(buf, &addr, sizeof(addr));
}

/* InfiniBand's local ACK timeout is 4.096 us << exp (exp 0: wait forever, which we never
 * ask for): the smallest exp that waits at least t seconds (t <= 0: 268 ms). */
static uint8_t rdmach_rc_timeout_exp(double t)
{
    uint8_t exp = 1;

    if (t <= 0) {
        return 16;
    }
    while ((exp < 31) && ((4.096e-6 * (double)(1ull << exp)) < t)) {
        ++exp;
    }
    return exp;
}

int rdmach_rc_qp_init(const rdmach_rc_wire_t *w, struct ibv_qp *qp, int remote_access)
{
    struct ibv_qp_attr attr;

    memset(&attr, 0, sizeof(attr));
    attr.qp_state        = IBV_QPS_INIT;
    attr.pkey_index      = 0;
    attr.port_num        = w->port;
    attr.qp_access_flags = remote_access ? (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                            IBV_ACCESS_REMOTE_ATOMIC) : 0;
    return ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                         IBV_QP_ACCESS_FLAGS);
}

/* The attributes each QP type requires for RTR and RTS (the kernel refuses any other): an
 * RC QP both sends and responds; an XRC INI only sends, an XRC TGT only responds. */
int rdmach_rc_qp_connect(const rdmach_rc_wire_t *w, struct ibv_qp *qp,
                         const rdmach_rc_dev_addr_t *dev, uint32_t dest_qpn)
{
    int responds = (qp->qp_type != IBV_QPT_XRC_SEND);
    int sends    = (qp->qp_type != IBV_QPT_XRC_RECV);
    struct ibv_qp_attr attr;
    int mask, ret;

    memset(&attr, 0, sizeof(attr));
    attr.qp_state              = IBV_QPS_RTR;
    attr.path_mtu              = w->port_attr.active_mtu;
    attr.dest_qp_num           = dest_qpn;
    attr.rq_psn                = 0;
    attr.max_dest_rd_atomic    = RC_MIN(RC_MAX_RD_ATOMIC, w->dom->attr.max_qp_rd_atom);
    attr.min_rnr_timer         = 12;
    attr.ah_attr.port_num      = w->port;
    attr.ah_attr.sl            = 0;
    if ((dev->link_layer == IBV_LINK_LAYER_ETHERNET) || (dev->lid == 0)) {
        attr.ah_attr.is_global      = 1;
        attr.ah_attr.grh.hop_limit  = 64;
        attr.ah_attr.grh.sgid_index = (uint8_t)w->gid_index;
        memcpy(attr.ah_attr.grh.dgid.raw, dev->gid, sizeof(dev->gid));
    } else {
        attr.ah_attr.dlid = dev->lid;
    }
    mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    if (responds) {
        mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    }
    ret = ibv_modify_qp(qp, &attr, mask);
    if (ret != 0) {
        RC_LOG(w, 1, "rdmach: cannot move a QP to RTR: %s", strerror(ret));
        return ret;
    }
    memset(&attr, 0, sizeof(attr));
    attr.qp_state      = IBV_QPS_RTS;
    attr.timeout       = rdmach_rc_timeout_exp(w->super.params.net_timeout);
    attr.retry_cnt     = RC_MIN(w->super.params.net_retry_count, 7u);
    attr.rnr_retry     = RC_RNR_RETRY;
    attr.sq_psn        = 0;
    attr.max_rd_atomic = RC_MIN(RC_MAX_RD_ATOMIC, w->dom->attr.max_qp_rd_atom);
    mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN;
    if (sends) {
        mask |= IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    }
    ret = ibv_modify_qp(qp, &attr, mask);
    if (ret != 0) {
        RC_LOG(w, 1, "rdmach: cannot move a QP to RTS: %s", strerror(ret));
    }
    return ret;
}

/* XRC: the host connection the core picks (or makes) for this peer, and the peer's SRQ. */
static int rdmach_rc_xrc_connect(rdmach_rc_wire_t *w, rdmach_rc_conn_t *c,
                                 const rdmach_rc_dev_addr_t *dev, const rdmach_rc_ep_addr_t *addr)
{
    uint8_t host[RDMACH_XRC_HOST_MAX];
    int ret;

    memset(host, 0, sizeof(host));
    memcpy(host, dev, sizeof(*dev));   /* a host is a port: its XRC domain is per device */
    ret = rdmach_xrc_conn_connect(&w->xrc, &c->xrc, host, &addr->xrc);
    if (ret != 0) {
        RC_LOG(w, 1, "rdmach: cannot connect through XRC: %s", strerror(-ret));
        return ret;
    }
    c->sq         = rdmach_rc_xrc_sq(w, c->xrc.host);
    c->qp         = c->sq->qp;
    c->r_srqn     = addr->srqn;
    c->notice_due = 1;
    return 0;
}

static int rdmach_rc_ep_connect(rdmach_wire_t *wire, rdmach_wire_peer_t *peer,
                                const void *dev_addr, const void *ep_addr, rdmach_tx_t *tx)
{
    rdmach_rc_wire_t *w = (rdmach_rc_wire_t*)wire;
    rdmach_rc_conn_t *c = (rdmach_rc_conn_t*)peer;
    rdmach_rc_dev_addr_t dev;
    rdmach_rc_ep_addr_t addr;
    int ret;

    memcpy(&dev, dev_addr, sizeof(dev));
    memcpy(&addr, ep_addr, sizeof(addr));
    if ((addr.slot_size != wire->geom.slot_size) || (addr.nslots != wire->geom.nslots)) {
        RC_LOG(w, 1, "rdmach: peer rings are %u x %u bytes, ours %u x %u: use the same "
               "UCX_RDMACH_RING_SIZE and UCX_RDMACH_SLOT_SIZE", addr.nslots, addr.slot_size,
               wire->geom.nslots, wire->geom.slot_size);
        return -EINVAL;
    }
    if (!(addr.flags & RDMACH_RC_ADDR_XRC) != (w->xrcd == NULL)) {
        RC_LOG(w, 1, "rdmach: the peer connects through %s, we through %s: every process must "
               "use the same UCX_RDMACH_XRC (and devices that have XRC)",
               (addr.flags & RDMACH_RC_ADDR_XRC) ? "XRC" : "RC", w->xrcd ? "XRC" : "RC");
        return -EPROTO;
    }
    if (c->connected) {
        return -EISCONN;
    }
    ret = (w->xrcd != NULL) ? rdmach_rc_xrc_connect(w, c, &dev, &addr) :
                              -rdmach_rc_qp_connect(w, c->qp, &dev, addr.qpn);
    if (ret != 0) {
        return (ret > 0) ? -ret : ret;
    }

    c->r_slots      = addr.ring + sizeof(rdmach_ring_ctl_t);
    c->r_shadow_ctl = addr.shadow_ctl;
    c->r_credit     = addr.credit;
    c->r_doorbell   = addr.doorbell;
    c->r_rkey       = addr.rkey;
    c->r_db_rkey    = addr.db_rkey;
    c->imm          = !!(addr.flags & RDMACH_RC_ADDR_IMM);
    c->r_ring       = addr.ring_id;
    c->connected    = 1;

    /* our sender: records built in the shadow; rx_hot arrives in the shadow ctl */
    rdmach_tx_init(tx, &wire->geom, c->sh_slots, c->sh_ctl, &c->sh_doorbell, c->credit,
                   &rdmach_rc_ring_ops, c);
    /* our receiver: the poller activates the ring once it sees the owner */
    __atomic_store_n(&c->rx_ctl->owner, 1, __ATOMIC_RELEASE);
    return 0;
}

static uint64_t rdmach_rc_post_empty(rdmach_rc_conn_t *c);

/* The connection has a QP of its own (RC, not an XRC host connection). */
static inline int rdmach_rc_owns_qp(const rdmach_rc_conn_t *c)
{
    return (c->w->xrcd == NULL) && (c->qp != NULL);
}

static void rdmach_rc_ep_close(rdmach_wire_t *wire, rdmach_wire_peer_t *peer)
{
    rdmach_rc_conn_t *c = (rdmach_rc_conn_t*)peer;
    struct ibv_qp_attr attr;

    /* the QP goes to error, its WRs flush; the block stays registered: the poller may still
     * hold the ring, until reap takes it back. The fence goes first: its completion, the last
     * of this QP, says when that may be (a QP never connected has posted nothing; one whose
     * send queue is full keeps its ring) */
    c->closed = 1;
    if (!c->connected) {
        c->fence_done = 1;
        ++wire->reap_ready;
    } else {
        c->fence_seq = rdmach_rc_post_empty(c);
    }
    if (rdmach_rc_owns_qp(c)) {
        memset(&attr, 0, sizeof(attr));
        attr.qp_state = IBV_QPS_ERR;
        ibv_modify_qp(c->qp, &attr, IBV_QP_STATE);
    }
    /* XRC: the INI QP serves other connections and stays; the fence still completes after
     * every WR of this connection (one QP completes in order) */
    c->failed = 1;
    rdmach_rc_deliver(c);
}

static int rdmach_rc_activate(rdmach_wire_t *wire, uint32_t id, rdmach_rx_t *rx)
{
    rdmach_rc_wire_t *w = (rdmach_rc_wire_t*)wire;
    rdmach_rc_conn_t *c = rdmach_rc_conn(w, id);

    if ((c == NULL) || (__atomic_load_n(&c->rx_ctl->owner, __ATOMIC_ACQUIRE) == 0)) {
        return 0;
    }
    rdmach_rx_init(rx, &wire->geom, (uint8_t*)(c->rx_ctl + 1), c->rx_ctl, NULL,
                   &rdmach_rc_ring_ops, c);
    if (w->srq != NULL) {
        rx->avail = &c->rx_avail;   /* a record is read once its completion counted it in */
    }
    return 1;
}

static void rdmach_rc_fail(rdmach_rc_conn_t *c, int err)
{
    int was_failed = c->failed;

    c->failed = 1;
    if (!was_failed) {
        STATS(c->w, failures)++;
    }
    rdmach_rc_deliver(c);
    if (!was_failed && !c->closed && (c->w->super.params.failed != NULL)) {
        c->w->super.params.failed(c->ep_ctx, err);
    }
}

/* ---- RMA, progress, flush ---- */

/* Queues a completion for the WR of sequence seq. */
static rdmach_rc_op_t *rdmach_rc_push_op(rdmach_rc_conn_t *c, uint64_t seq, void *comp,
                                         int bounce,
                                         void (*unpack)(void*, const void*, size_t),
                                         void *arg, size_t len)
{
    rdmach_rc_op_t *op = &c->ops[c->op_tail++ % RC_OPS_MAX];

    op->seq    = seq;
    op->comp   = comp;
    op->bounce = bounce;
    op->unpack = unpack;
    op->arg    = arg;
    op->len    = len;
    op->amo    = -1;
    return op;
}

/* A read into an unregistered buffer goes through a bounce buffer: copied out at the end. */
static void rdmach_rc_copy_out(void *arg, const void *data, size_t len)
{
    memcpy(arg, data, len);
}

/* RMA of len bytes; unregistered local buffers (bcopy: cnt == 1) go through a bounce buffer,
 * a read's data then handed to unpack(arg) (NULL: copied into local[0]). comp == NULL: done at
 * return. */
static int rdmach_rc_post_rma(rdmach_rc_wire_t *w, rdmach_rc_conn_t *c,
                              const rdmach_wire_iov_t *local, size_t cnt, uint64_t raddr,
                              uint32_t rkey, size_t len, int write,
                              void (*unpack)(void*, const void*, size_t), void *arg,
                              void *comp)
{
    struct ibv_send_wr wr[RDMACH_WIRE_MAX_IOV];
    struct ibv_sge sge[RDMACH_WIRE_MAX_IOV];
    int bounce = -1, unregistered = 0, inl;
    unsigned nwr = (unsigned)cnt;
    uint64_t seq;
    size_t i, off;

    if (c->failed) {
        return -ECONNRESET;
    }
    if ((cnt > RDMACH_WIRE_MAX_IOV) || (cnt == 0)) {
        return -EINVAL;
    }
    for (i = 0; i < cnt; ++i) {
        unregistered |= (local[i].reg == NULL);
    }
    inl = write && (len <= w->super.max_inline);
    if (unregistered && !inl && ((cnt != 1) || (len > w->bounce_size))) {
        return -EINVAL;   /* the glue bounds bcopy by the chunk size */
    }
    if ((rdmach_rc_sq_free(c) < cnt) || (w->cq_free < 2) ||
        (c->op_tail - c->op_head >= RC_OPS_MAX) ||
        (unregistered && !inl && (w->nbounce_free == 0))) {
        rdmach_rc_poll(w, 1);
        if ((rdmach_rc_sq_free(c) < cnt) || (w->cq_free < 2) ||
            (c->op_tail - c->op_head >= RC_OPS_MAX) ||
            (unregistered && !inl && (w->nbounce_free == 0))) {
            return -EAGAIN;
        }
    }

    memset(wr, 0, sizeof(wr[0]) * cnt);
    if (unregistered && !inl) {
        bounce = w->bounce_free[--w->nbounce_free];
        if (write) {
            memcpy(rdmach_rc_bounce(w, bounce), local[0].base, len);
        } else if (unpack == NULL) {
            unpack = rdmach_rc_copy_out;
            arg    = local[0].base;
        }
        rdmach_rc_write_wr(&wr[0], &sge[0], rdmach_rc_bounce(w, bounce), (uint32_t)len,
                           w->bounce_mr->lkey, raddr, rkey, 0);
        nwr = 1;
    } else {
        for (i = 0, off = 0; i < cnt; ++i) {
            rdmach_rc_write_wr(&wr[i], &sge[i], local[i].base, (uint32_t)local[i].len,
                               inl ? 0 : ((struct ibv_mr*)local[i].reg)->lkey,
                               raddr + off, rkey, inl);
            off += local[i].len;
        }
    }
    if (!write) {
        for (i = 0; i < nwr; ++i) {
            wr[i].opcode = IBV_WR_RDMA_READ;
        }
        STATS(w, rdma_reads) += nwr;
    }
    seq = rdmach_rc_post(c, wr, nwr, 1);
    if (seq == 0) {
        if (bounce >= 0) {
            w->bounce_free[w->nbounce_free++] = bounce;
        }
        return (errno == ENOMEM) ? -EAGAIN : -errno;
    }
    if (comp != NULL) {
        rdmach_rc_push_op(c, seq, comp, bounce, write ? NULL : unpack, arg, len);
        return RDMACH_WIRE_INPROGRESS;
    }
    /* done at return: wait for this WR only (the completions of earlier ones are called by
     * progress, never from inside an operation) */
    while ((c->completed < seq) && !c->failed) {
        rdmach_rc_poll(w, 0);
    }
    if ((bounce >= 0) && !write && !c->failed) {
        unpack(arg, rdmach_rc_bounce(w, bounce), len);
    }
    if (bounce >= 0) {
        w->bounce_free[w->nbounce_free++] = bounce;
    }
    return c->failed ? -ECONNRESET : 0;
}

static int rdmach_rc_rma(rdmach_wire_t *wire, rdmach_wire_peer_t *peer,
                         const rdmach_wire_iov_t *local, size_t cnt, uint64_t remote_addr,
                         uint32_t rkey, size_t len, int write, void *mapped, void *comp)
{
    (void)mapped;   /* never passed: rma_async_min is SIZE_MAX */
    return rdmach_rc_post_rma((rdmach_rc_wire_t*)wire, (rdmach_rc_conn_t*)peer, local, cnt,
                              remote_addr, rkey, len, write, NULL, NULL, comp);
}

static int rdmach_rc_get_unpack(rdmach_wire_t *wire, rdmach_wire_peer_t *peer,
                                uint64_t remote_addr, uint32_t rkey, size_t len,
                                void (*unpack)(void*, const void*, size_t), void *arg,
                                void *comp)
{
    rdmach_wire_iov_t none = {NULL, len, NULL};

    return rdmach_rc_post_rma((rdmach_rc_wire_t*)wire, (rdmach_rc_conn_t*)peer, &none, 1,
                              remote_addr, rkey, len, 0, unpack, arg, comp);
}

/* A device atomic on the peer's word, its old value into one of our registered result
 * slots, copied to *result when the WR completes. Polls nothing: resources short = -EAGAIN. */
static int rdmach_rc_atomic64(rdmach_wire_t *wire, rdmach_wire_peer_t *peer,
                              uint64_t remote_addr, uint32_t rkey, int cswap,
                              uint64_t compare_add, uint64_t swap, uint64_t *result, void *comp)
{
    rdmach_rc_wire_t *w   = (rdmach_rc_wire_t*)wire;
    rdmach_rc_conn_t *c   = (rdmach_rc_conn_t*)peer;
    struct ibv_send_wr wr;
    struct ibv_sge sge;
    rdmach_rc_op_t *op;
    uint64_t seq;
    int slot;

    if (c->failed) {
        return -ECONNRESET;
    }
    if (!w->super.atomics || (remote_addr & 7) || (comp == NULL)) {
        return -EINVAL;
    }
    if ((rdmach_rc_sq_free(c) < 1) || (w->cq_free < 2) || (w->namo_free == 0) ||
        (c->op_tail - c->op_head >= RC_OPS_MAX)) {
        return -EAGAIN;
    }
    slot = w->amo_free[--w->namo_free];
    memset(&wr, 0, sizeof(wr));
    rdmach_rc_write_wr(&wr, &sge, &w->amo[slot], sizeof(uint64_t), w->bounce_mr->lkey, 0, 0, 0);
    wr.opcode                = cswap ? IBV_WR_ATOMIC_CMP_AND_SWP : IBV_WR_ATOMIC_FETCH_AND_ADD;
    wr.wr.atomic.remote_addr = remote_addr;
    wr.wr.atomic.rkey        = rkey;
    wr.wr.atomic.compare_add = compare_add;
    wr.wr.atomic.swap        = swap;
    seq = rdmach_rc_post(c, &wr, 1, 1);
    if (seq == 0) {
        w->amo_free[w->namo_free++] = slot;
        return (errno == ENOMEM) ? -EAGAIN : -errno;
    }
    STATS(w, atomics)++;
    op         = rdmach_rc_push_op(c, seq, comp, -1, NULL, NULL, 0);
    op->amo    = slot;
    op->result = result;
    return RDMACH_WIRE_INPROGRESS;
}

/* Did a record for c arrive on the QP it should (a peer's ring id is checked against the
 * connection's QP)? XRC: through the TGT c receives on. A pending one (rdmach_xrc.h) may have
 * changed: the peer's notice, written before its first record, says which. */
static int rdmach_rc_came_on(rdmach_rc_wire_t *w, rdmach_rc_conn_t *c, uint32_t qpn)
{
    uint32_t notice;

    if (w->xrcd == NULL) {
        return (c->qp != NULL) && (c->qp->qp_num == qpn);
    }
    if (c->xrc.pending) {
        notice = rdmach_rc_notice_unpack(
                __atomic_load_n(&c->rx_ctl->peer_info[RDMACH_RC_NOTICE_WORD], __ATOMIC_ACQUIRE));
        if ((notice != 0) && (rdmach_xrc_notice(&w->xrc, &c->xrc, notice) != 0)) {
            RC_LOG(w, 0, "rdmach: XRC notice of ring %u names TGT 0x%x: refused", c->ring_id,
                   notice);
        }
    }
    return rdmach_rc_xrc_tgt_qpn(w, c) == qpn;
}

/* Completions of records written into our rings: count each in for its ring (the immediate
 * names it; a peer's claim is checked against the QP it came on) and ring its doorbell. A
 * record is at least its header: a shorter write with immediate (a broken peer's) is counted
 * as corrupt, not in, or it would let a later record be read before all of it landed. */
static unsigned rdmach_rc_poll_recv(rdmach_rc_wire_t *w)
{
    struct ibv_wc wc[RC_POLL_BATCH];
    rdmach_rc_conn_t *c;
    uint32_t id;
    int i, n;

    n = ibv_poll_cq(w->rcq, RC_POLL_BATCH, wc);
    for (i = 0; i < n; ++i) {
        ++w->srq_repost;
        if (wc[i].status != IBV_WC_SUCCESS) {
            continue;   /* its QP broke: the send side reports the connection */
        }
        id = ntohl(wc[i].imm_data);
        c  = rdmach_rc_conn(w, id);
        if ((wc[i].opcode != IBV_WC_RECV_RDMA_WITH_IMM) || (c == NULL) ||
            !rdmach_rc_came_on(w, c, wc[i].qp_num) ||
            (wc[i].byte_len < sizeof(rdmach_rec_hdr_t))) {
            if (w->super.params.stats != NULL) {
                w->super.params.stats->corrupt++;
            }
            continue;
        }
        ++c->rx_avail;
        w->doorbells[id] = 1;
    }
    if ((w->srq_repost >= 32) || ((n == 0) && (w->srq_repost != 0))) {
        if (rdmach_rc_srq_post(w, w->srq_repost) == 0) {
            w->srq_repost = 0;
        }
    }
    return (n > 0) ? (unsigned)n : 0;
}

static unsigned rdmach_rc_progress(rdmach_wire_t *wire)
{
    rdmach_rc_wire_t *w = (rdmach_rc_wire_t*)wire;
    unsigned count      = (w->srq != NULL) ? rdmach_rc_poll_recv(w) : 0;

    return count + rdmach_rc_poll(w, 1);
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

/* A signalled zero-byte WRITE (to the credit line: it writes nothing). */
static uint64_t rdmach_rc_post_empty(rdmach_rc_conn_t *c)
{
    struct ibv_send_wr wr;
    struct ibv_sge sge;

    if ((rdmach_rc_sq_free(c) < 1) || (c->w->cq_free < 2)) {
        errno = EAGAIN;
        return 0;
    }
    memset(&wr, 0, sizeof(wr));
    rdmach_rc_write_wr(&wr, &sge, NULL, 0, 0, c->r_credit, c->r_rkey, 0);
    return rdmach_rc_post(c, &wr, 1, 1);
}

static int rdmach_rc_check(rdmach_wire_t *wire, rdmach_wire_peer_t *peer)
{
    rdmach_rc_conn_t *c = (rdmach_rc_conn_t*)peer;

    (void)wire;
    if (c->failed || !c->connected ||
        ((c->signalled == c->posted) && (c->completed != c->posted))) {
        return 0;   /* failed: reported; a signalled WR in flight probes the peer already */
    }
    return (rdmach_rc_post_empty(c) != 0) ? 0 : -errno;
}

/* A signalled zero-byte WRITE behind everything posted: done when it completes. */
static int rdmach_rc_flush_conn(rdmach_rc_conn_t *c, void *comp)
{
    uint64_t seq;

    if (c->failed) {
        return -ECONNRESET;
    }
    if (!c->connected || (c->completed == c->posted)) {
        return 0;
    }
    if (c->signalled == c->posted) {
        seq = c->posted;   /* the last WR is signalled already */
    } else {
        if (c->op_tail - c->op_head >= RC_OPS_MAX) {
            return -EAGAIN;
        }
        seq = rdmach_rc_post_empty(c);
        if (seq == 0) {
            return -errno;
        }
    }
    if (comp != NULL) {
        if (c->op_tail - c->op_head >= RC_OPS_MAX) {
            return -EAGAIN;
        }
        rdmach_rc_push_op(c, seq, comp, -1, NULL, NULL, 0);
    }
    return RDMACH_WIRE_INPROGRESS;
}

static int rdmach_rc_flush(rdmach_wire_t *wire, rdmach_wire_peer_t *peer, void *comp)
{
    rdmach_rc_wire_t *w = (rdmach_rc_wire_t*)wire;
    int ret, busy = 0;
    uint32_t i;

    if (peer != NULL) {
        return rdmach_rc_flush_conn((rdmach_rc_conn_t*)peer, comp);
    }
    /* the iface: without a completion (UCT's iface flush on RC takes none) */
    for (i = 0; i < w->next_ring; ++i) {
        if ((w->conns[i] == NULL) || w->conns[i]->closed) {
            continue;
        }
        ret = rdmach_rc_flush_conn(w->conns[i], NULL);
        if (ret == RDMACH_WIRE_INPROGRESS || ret == -EAGAIN) {
            busy = 1;
        }
    }
    return busy ? RDMACH_WIRE_INPROGRESS : 0;
}

/* Takes back the rings of closed connections whose QP is quiet (the fence completed). */
static unsigned rdmach_rc_reap(rdmach_wire_t *wire, int procs,
                               void (*drain)(void *arg, uint32_t ring_id), void *arg)
{
    rdmach_rc_wire_t *w = (rdmach_rc_wire_t*)wire;
    rdmach_rc_conn_t *c;
    unsigned n = 0;
    uint32_t i, k;

    (void)procs;   /* a connection's end is our own ep_close, or its QP's failure */
    rdmach_rc_poll(w, 0);   /* the fences' completions; delivered by the next progress */
    w->super.reap_ready = 0;
    for (i = 0; i < w->next_ring; ++i) {
        c = w->conns[i];
        if ((c == NULL) || !c->closed || !c->fence_done) {
            continue;
        }
        if (w->srq != NULL) {
            /* records of its QP whose completions are still queued are counted in while the
             * ring id names it (the QP number is checked), then drained with the ring */
            while (rdmach_rc_poll_recv(w) == RC_POLL_BATCH) {
            }
        }
        drain(arg, i);
        if (c->dirty) {
            for (k = 0; k < w->ndirty; ++k) {
                if (w->dirty[k] == i) {
                    w->dirty[k] = w->dirty[--w->ndirty];
                    break;
                }
            }
        }
        w->conns[i]     = NULL;
        w->doorbells[i] = 0;
        rdmach_rc_conn_free(c);
        w->free_ids[w->nfree++] = i;
        ++n;
    }
    return n;
}

const rdmach_wire_ops_t rdmach_wire_rc_ops = {
    .name           = "rc",
    .caps           = {
        .this_host    = 0,
        .to_ep        = 1,
        .copy_cores   = 1,
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
