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
#include "rdmach_wire.h"

#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RC_SQ_EXTRA      320u   /* WRs beyond 3 per ring slot (a record takes at most 3) */
#define RC_SIGNAL_EVERY  32u    /* unsignalled WRs between two signalled ones */
#define RC_OPS_MAX       256u   /* signalled operations (RMA, flush) in flight per QP */
#define RC_CQ_SIZE       4096   /* shared by the QPs of an iface */
#define RC_SRQ_DEPTH     2048   /* receive WQEs that records with immediate consume */
#define RC_POLL_BATCH    16
#define RC_RNR_RETRY     7
#define RC_SEQ_BITS      40
#define RC_SEQ_MASK      ((1ull << RC_SEQ_BITS) - 1)
#define RC_MAX_RD_ATOMIC 16
#define RC_BOUNCES       16     /* bcopy reads and writes in flight per iface */
#define RC_AMO_SLOTS     64     /* device atomics in flight per iface (their old values) */

/* the glue's counters, or a sink when it keeps none */
static rdmach_wire_stats_t rdmach_rc_stats_sink;
#define STATS(_w, _f) \
    (((_w)->super.params.wire_stats != NULL) ? (_w)->super.params.wire_stats : \
                                               &rdmach_rc_stats_sink)->_f

#define RC_MIN(_a, _b) (((_a) < (_b)) ? (_a) : (_b))

#define RC_LOG(_w, _error, ...) RDMACH_WIRE_LOG(&(_w)->super, _error, __VA_ARGS__)

struct rdmach_wire_domain {
    struct ibv_context    *ctx;
    struct ibv_pd         *pd;
    struct ibv_device_attr attr;
    char                  name[RDMACH_WIRE_DEV_NAME_MAX];
};

/* Device address: the port's GID (RoCE, and IB global routes) and LID (IB). */
typedef struct rdmach_rc_dev_addr {
    uint8_t  gid[16];
    uint16_t lid;
    uint8_t  link_layer;   /* IBV_LINK_LAYER_* */
    uint8_t  pad;
} __attribute__((packed)) rdmach_rc_dev_addr_t;

/* Ep address: the QP, and where its peer writes (all in our block but the doorbell). */
typedef struct rdmach_rc_ep_addr {
    uint32_t qpn;
    uint32_t ring_id;       /* our rx ring: the immediate of the records written into it */
    uint32_t rkey;          /* of the block */
    uint64_t ring;          /* our rx ctl; the slots follow it */
    uint64_t shadow_ctl;    /* our shadow ctl: the peer's receiver writes rx_hot there */
    uint64_t credit;        /* our credit line: the peer's receiver writes its tail there */
    uint64_t doorbell;      /* our rx ring's doorbell byte */
    uint32_t db_rkey;
    uint32_t slot_size;
    uint32_t nslots;
    uint8_t  flags;         /* RDMACH_RC_ADDR_* */
} __attribute__((packed)) rdmach_rc_ep_addr_t;

/* We receive records through a shared receive queue: write them with immediate (one WRITE),
 * not as fields and payload then the mark. The sender follows the receiver's choice, so
 * ends with and without SRQ (UCX_RDMACH_RC_SRQ, or devices without one) talk. */
#define RDMACH_RC_ADDR_IMM 0x1

typedef struct rdmach_rc_op {
    uint64_t seq;           /* done when the QP completed this WR */
    void     *comp;         /* complete(comp) then */
    void     (*unpack)(void *arg, const void *data, size_t len);   /* a read through a bounce */
    void     *arg;
    size_t   len;
    int      bounce;        /* the bounce buffer it holds until done, or -1 */
    int      amo;           /* the atomic result slot it holds until done, or -1 */
    uint64_t *result;       /* where that slot's value goes */
} rdmach_rc_op_t;

typedef struct rdmach_rc_wire rdmach_rc_wire_t;

typedef struct rdmach_rc_conn {
    rdmach_wire_peer_t super;
    rdmach_rc_wire_t   *w;
    void               *ep_ctx;
    struct ibv_qp      *qp;
    uint32_t           ring_id;
    uint32_t           r_ring;        /* the peer's ring id for us (the records' immediate) */
    uint32_t           rx_avail;      /* records into our ring counted in by their CQE */
    int                connected, failed, closed, dirty;
    uint64_t           fence_seq;     /* closed: the last WR's sequence (0: none posted) */
    int                fence_done;    /* closed: its completion came, the QP is quiet */
    int                imm;           /* the peer reads records by their completion */
    /* the block */
    uint8_t            *block;
    size_t             block_size;
    struct ibv_mr      *mr;
    rdmach_ring_ctl_t  *rx_ctl;
    rdmach_ring_ctl_t  *sh_ctl;
    volatile uint64_t  *credit;
    uint8_t            *sh_slots;
    uint8_t            sh_doorbell;   /* the core's doorbell store on a mapped wire: unused */
    /* the peer's */
    uint64_t           r_slots, r_shadow_ctl, r_credit, r_doorbell;
    uint32_t           r_rkey, r_db_rkey;
    /* send queue */
    uint64_t           posted, completed, signalled;
    rdmach_rc_op_t     ops[RC_OPS_MAX];
    uint32_t           op_head, op_tail;   /* FIFO: [head, tail) in flight */
} rdmach_rc_conn_t;

struct rdmach_rc_wire {
    rdmach_wire_t        super;
    rdmach_wire_domain_t *dom;
    uint8_t              port;
    int                  gid_index;
    struct ibv_port_attr port_attr;
    rdmach_rc_dev_addr_t dev_addr;
    struct ibv_cq        *cq;
    /* wakeup: both CQs report to it once armed (NULL: no wakeup on this device) */
    struct ibv_comp_channel *chan;
    /* records as one RDMA WRITE with immediate each: the receive completion (from a shared
     * receive queue) says the whole record is placed; without an SRQ two WRITEs, mark last */
    struct ibv_srq       *srq;
    struct ibv_cq        *rcq;
    uint32_t             srq_depth;
    uint32_t             srq_repost;     /* receive WQEs consumed, to post again */
    int                  cq_free;        /* CQEs we may still cause */
    int                  cq_size;
    uint32_t             sq_depth;       /* WRs per QP: a full ring's records fit */
    uint8_t              *doorbells;     /* [max_rings], registered */
    struct ibv_mr        *db_mr;
    uint32_t             next_ring;
    rdmach_rc_conn_t     **conns;        /* [max_rings], by ring id */
    uint32_t             *free_ids;      /* ring ids taken back (reap), to use first */
    uint32_t             nfree;
    uint32_t             *dirty;         /* conns with ops completed by a wait, to deliver */
    uint32_t             ndirty;
    void                 *bounce;        /* RC_BOUNCES registered buffers, for rma of */
    size_t               bounce_size;    /* unregistered ones (bcopy) */
    struct ibv_mr        *bounce_mr;
    int                  bounce_free[RC_BOUNCES];
    int                  nbounce_free;
    uint64_t             *amo;           /* RC_AMO_SLOTS registered result words, after the */
    int                  amo_free[RC_AMO_SLOTS];   /* bounce buffers, in bounce_mr */
    int                  namo_free;
};

static const rdmach_ring_ops_t rdmach_rc_ring_ops;

/* ---- domains and devices ---- */

static int rdmach_rc_port_usable(struct ibv_context *ctx, uint8_t port)
{
    struct ibv_port_attr attr;

    return (ibv_query_port(ctx, port, &attr) == 0) && (attr.state == IBV_PORT_ACTIVE) &&
           ((attr.link_layer == IBV_LINK_LAYER_ETHERNET) ||
            (attr.link_layer == IBV_LINK_LAYER_INFINIBAND));
}

/* Calls found(name, ctx) for each HCA with an active port; the context is closed after. */
static unsigned rdmach_rc_each_hca(void (*found)(void *arg, const char *name,
                                                 struct ibv_context *ctx),
                                   void *arg)
{
    struct ibv_device **list;
    struct ibv_device_attr attr;
    struct ibv_context *ctx;
    unsigned n = 0;
    int i, num;
    uint8_t p;

    list = ibv_get_device_list(&num);
    if (list == NULL) {
        return 0;
    }
    for (i = 0; i < num; ++i) {
        ctx = ibv_open_device(list[i]);
        if (ctx == NULL) {
            continue;
        }
        if (ibv_query_device(ctx, &attr) == 0) {
            for (p = 1; p <= attr.phys_port_cnt; ++p) {
                if (rdmach_rc_port_usable(ctx, p)) {
                    found(arg, ibv_get_device_name(list[i]), ctx);
                    ++n;
                    break;
                }
            }
        }
        ibv_close_device(ctx);
    }
    ibv_free_device_list(list);
    return n;
}

typedef struct {
    char     (*names)[RDMACH_WIRE_DEV_NAME_MAX];
    unsigned n, max;
} rdmach_rc_names_t;

static void rdmach_rc_add_name(void *arg, const char *name, struct ibv_context *ctx)
{
    rdmach_rc_names_t *names = arg;

    (void)ctx;
    if (names->n < names->max) {
        snprintf(names->names[names->n++], RDMACH_WIRE_DEV_NAME_MAX, "%s", name);
    }
}

static unsigned rdmach_rc_query_domains(char (*names)[RDMACH_WIRE_DEV_NAME_MAX], unsigned max)
{
    rdmach_rc_names_t found = {names, 0, max};

    rdmach_rc_each_hca(rdmach_rc_add_name, &found);
    return found.n;
}

static int rdmach_rc_domain_open(const char *name, rdmach_wire_domain_t **domain_p)
{
    rdmach_wire_domain_t *dom;
    struct ibv_device **list;
    int i, num, ret = -ENODEV;

    dom = calloc(1, sizeof(*dom));
    if (dom == NULL) {
        return -ENOMEM;
    }
    list = ibv_get_device_list(&num);
    for (i = 0; (list != NULL) && (i < num); ++i) {
        if (strcmp(ibv_get_device_name(list[i]), name) == 0) {
            dom->ctx = ibv_open_device(list[i]);
            break;
        }
    }
    if (list != NULL) {
        ibv_free_device_list(list);
    }
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

#define RDMACH_RC_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
                          IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

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
        if (rdmach_rc_port_usable(dom->ctx, p)) {
            snprintf(devs[n].name, sizeof(devs[n].name), "%.24s:%u", dom->name, p);
            devs[n].type = RDMACH_WIRE_DEV_NET;
            ++n;
        }
    }
    return n;
}

/* ---- iface ---- */

/* RoCE: the first RoCE v2 GID (routable over UDP, what rdma_rxe offers), else RoCE v1; IB:
 * index 0. */
static int rdmach_rc_pick_gid(rdmach_rc_wire_t *w, union ibv_gid *gid)
{
    struct ibv_gid_entry entry;
    int i, v1 = -1;

    if (w->port_attr.link_layer == IBV_LINK_LAYER_INFINIBAND) {
        return ibv_query_gid(w->dom->ctx, w->port, 0, gid) == 0 ? 0 : -1;
    }
    for (i = 0; i < w->port_attr.gid_tbl_len; ++i) {
        if (ibv_query_gid_ex(w->dom->ctx, w->port, i, &entry, 0) != 0) {
            continue;
        }
        if (entry.gid_type == IBV_GID_TYPE_ROCE_V2) {
            memcpy(gid, &entry.gid, sizeof(*gid));
            return i;
        } else if (v1 < 0) {
            v1 = i;
        }
    }
    if ((v1 >= 0) && (ibv_query_gid(w->dom->ctx, w->port, v1, gid) == 0)) {
        return v1;
    }
    return -1;
}

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
        init.srq                 = w->srq;
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
static int rdmach_rc_srq_post(rdmach_rc_wire_t *w, uint32_t n)
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
    w->gid_index = rdmach_rc_pick_gid(w, &gid);
    if (w->gid_index < 0) {
        RC_LOG(w, 1, "rdmach: port %s has no usable GID", params->dev_name);
        ret = -ENODEV;
        goto err;
    }
    memcpy(w->dev_addr.gid, gid.raw, sizeof(gid.raw));
    w->dev_addr.lid        = w->port_attr.lid;
    w->dev_addr.link_layer = w->port_attr.link_layer;

    /* a sender waiting for ring credit must not also wait for send queue room (a dead peer
     * would hold it in the send call until its QP fails): 3 WRs per slot, and RMA */
    w->sq_depth = RC_MIN(3u * params->geom.nslots + RC_SQ_EXTRA,
                         (uint32_t)w->dom->attr.max_qp_wr);
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
    db_size    = (params->max_rings + 63) & ~(size_t)63;
    if ((w->cq == NULL) || (w->conns == NULL) || (w->dirty == NULL) || (w->free_ids == NULL) ||
        (posix_memalign((void**)&w->doorbells, 64, db_size) != 0)) {
        RC_LOG(w, 1, "rdmach: cannot create the completion queue of %s: %s", params->dev_name,
               strerror(errno));
        goto err_free;
    }
    memset(w->doorbells, 0, db_size);
    rdmach_rc_srq_open(w);
    w->bounce_size = params->geom.slot_size * (size_t)params->geom.max_span;
    if (posix_memalign(&w->bounce, 4096, w->bounce_size * RC_BOUNCES +
                                         RC_AMO_SLOTS * sizeof(uint64_t)) != 0) {
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
    w->db_mr     = ibv_reg_mr(w->dom->pd, w->doorbells, db_size, RDMACH_RC_ACCESS);
    w->bounce_mr = ibv_reg_mr(w->dom->pd, w->bounce, w->bounce_size * RC_BOUNCES +
                              RC_AMO_SLOTS * sizeof(uint64_t), RDMACH_RC_ACCESS);
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
    /* what rc_verbs reports for a port, roughly: rxe and real HCAs differ by 100x, and UCP
     * compares lanes of one device only */
    w->super.bandwidth   = 1e9;
    w->super.latency     = 2e-6;
    w->super.max_inline  = rdmach_rc_probe_inline(w);
    /* 64-bit fetch-and-add and compare-and-swap: every HCA that has atomics, rxe included */
    w->super.atomics     = (w->dom->attr.atomic_cap != IBV_ATOMIC_NONE) &&
                           (w->dom->attr.max_qp_rd_atom > 0);
    *wire_p              = &w->super;
    return 0;

err_free:
    rdmach_rc_srq_close(w);
    if (w->db_mr != NULL) {
        ibv_dereg_mr(w->db_mr);
    }
    if (w->bounce_mr != NULL) {
        ibv_dereg_mr(w->bounce_mr);
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
    if (c->qp != NULL) {
        ibv_destroy_qp(c->qp);
    }
    if (c->mr != NULL) {
        ibv_dereg_mr(c->mr);
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
    ibv_dereg_mr(w->db_mr);
    ibv_dereg_mr(w->bounce_mr);
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
    return c->w->sq_depth - (uint32_t)(c->posted - c->completed);
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
            rdmach_rc_fail(c, -ECONNRESET);
            continue;
        }
        STATS(w, completions)++;
        /* 2^40 WRs per connection: the sequence does not wrap in practice; a nested poll
         * (from a send inside a completion callback) may have seen a later one */
        if ((wc[i].wr_id & RC_SEQ_MASK) > c->completed) {
            c->completed = wc[i].wr_id & RC_SEQ_MASK;
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
static uint64_t rdmach_rc_post(rdmach_rc_conn_t *c, struct ibv_send_wr *wr, unsigned n,
                               int signal)
{
    rdmach_rc_wire_t *w = c->w;
    struct ibv_send_wr *bad;
    uint64_t seq        = c->posted + n;
    unsigned i;
    int ret;

    if (c->posted + n - c->signalled >= RC_SIGNAL_EVERY) {
        signal = 1;
    }
    for (i = 0; i < n; ++i) {
        wr[i].next       = (i + 1 < n) ? &wr[i + 1] : NULL;
        wr[i].wr_id      = rdmach_rc_wr_id(c, c->posted + i + 1);
        wr[i].send_flags = (wr[i].send_flags & IBV_SEND_INLINE) |
                           ((signal && (i + 1 == n)) ? IBV_SEND_SIGNALED : 0);
    }
    ret = ibv_post_send(c->qp, wr, &bad);
    if (ret != 0) {
        errno = ret;
        return 0;
    }
    c->posted = seq;
    STATS(w, posts) += n;
    if (signal) {
        c->signalled = seq;
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

static size_t rdmach_rc_ring_bytes(const rdmach_geom_t *geom)
{
    return sizeof(rdmach_ring_ctl_t) + rdmach_geom_ring_bytes(geom);
}

static int rdmach_rc_ep_open(rdmach_wire_t *wire, void *ep_ctx, rdmach_wire_peer_t **peer_p)
{
    rdmach_rc_wire_t *w = (rdmach_rc_wire_t*)wire;
    size_t ring         = rdmach_rc_ring_bytes(&wire->geom);
    struct ibv_qp_attr attr;
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
    c->ring_id          = id;
    c->super.geom       = wire->geom;
    c->super.max_rings  = wire->max_rings;
    /* rx ring | shadow ctl + credit line (one ctl: the credit line is in its padding) |
     * shadow slots */
    c->block_size = 2 * ring;
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
    c->mr       = ibv_reg_mr(w->dom->pd, c->block, c->block_size, RDMACH_RC_ACCESS);
    if (c->mr == NULL) {
        ret = -errno;
        RC_LOG(w, 1, "rdmach: cannot register %zu bytes for a connection: %s (check ulimit -l)",
               c->block_size, strerror(errno));
        goto err;
    }

    c->qp = rdmach_rc_create_qp(w, NULL);
    if (c->qp == NULL) {
        ret = -errno;
        RC_LOG(w, 1, "rdmach: cannot create an RC QP: %s", strerror(errno));
        goto err;
    }

    memset(&attr, 0, sizeof(attr));
    attr.qp_state        = IBV_QPS_INIT;
    attr.pkey_index      = 0;
    attr.port_num        = w->port;
    attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                           IBV_ACCESS_REMOTE_ATOMIC;
    ret = ibv_modify_qp(c->qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                        IBV_QP_ACCESS_FLAGS);
    if (ret != 0) {
        RC_LOG(w, 1, "rdmach: cannot move an RC QP to INIT: %s", strerror(ret));
        ret = -ret;
        goto err;
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
    addr.qpn        = c->qp->qp_num;
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

static int rdmach_rc_ep_connect(rdmach_wire_t *wire, rdmach_wire_peer_t *peer,
                                const void *dev_addr, const void *ep_addr, rdmach_tx_t *tx)
{
    rdmach_rc_wire_t *w = (rdmach_rc_wire_t*)wire;
    rdmach_rc_conn_t *c = (rdmach_rc_conn_t*)peer;
    rdmach_rc_dev_addr_t dev;
    rdmach_rc_ep_addr_t addr;
    struct ibv_qp_attr attr;
    int ret;

    memcpy(&dev, dev_addr, sizeof(dev));
    memcpy(&addr, ep_addr, sizeof(addr));
    if ((addr.slot_size != wire->geom.slot_size) || (addr.nslots != wire->geom.nslots)) {
        RC_LOG(w, 1, "rdmach: peer rings are %u x %u bytes, ours %u x %u: use the same "
               "UCX_RDMACH_RING_SIZE and UCX_RDMACH_SLOT_SIZE", addr.nslots, addr.slot_size,
               wire->geom.nslots, wire->geom.slot_size);
        return -EINVAL;
    }
    if (c->connected) {
        return -EISCONN;
    }

    memset(&attr, 0, sizeof(attr));
    attr.qp_state              = IBV_QPS_RTR;
    attr.path_mtu              = w->port_attr.active_mtu;
    attr.dest_qp_num           = addr.qpn;
    attr.rq_psn                = 0;
    attr.max_dest_rd_atomic    = RC_MIN(RC_MAX_RD_ATOMIC, w->dom->attr.max_qp_rd_atom);
    attr.min_rnr_timer         = 12;
    attr.ah_attr.port_num      = w->port;
    attr.ah_attr.sl            = 0;
    if ((dev.link_layer == IBV_LINK_LAYER_ETHERNET) || (dev.lid == 0)) {
        attr.ah_attr.is_global      = 1;
        attr.ah_attr.grh.hop_limit  = 64;
        attr.ah_attr.grh.sgid_index = (uint8_t)w->gid_index;
        memcpy(attr.ah_attr.grh.dgid.raw, dev.gid, sizeof(dev.gid));
    } else {
        attr.ah_attr.dlid = dev.lid;
    }
    ret = ibv_modify_qp(c->qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                        IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                        IBV_QP_MIN_RNR_TIMER);
    if (ret != 0) {
        RC_LOG(w, 1, "rdmach: cannot move an RC QP to RTR: %s", strerror(ret));
        return -ret;
    }
    memset(&attr, 0, sizeof(attr));
    attr.qp_state      = IBV_QPS_RTS;
    attr.timeout       = rdmach_rc_timeout_exp(w->super.params.net_timeout);
    attr.retry_cnt     = RC_MIN(w->super.params.net_retry_count, 7u);
    attr.rnr_retry     = RC_RNR_RETRY;
    attr.sq_psn        = 0;
    attr.max_rd_atomic = RC_MIN(RC_MAX_RD_ATOMIC, w->dom->attr.max_qp_rd_atom);
    ret = ibv_modify_qp(c->qp, &attr, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                        IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
    if (ret != 0) {
        RC_LOG(w, 1, "rdmach: cannot move an RC QP to RTS: %s", strerror(ret));
        return -ret;
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
    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_ERR;
    ibv_modify_qp(c->qp, &attr, IBV_QP_STATE);
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
    rdmach_rx_init(rx, (uint8_t*)(c->rx_ctl + 1), c->rx_ctl, NULL, &rdmach_rc_ring_ops, c);
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
                         uint32_t rkey, size_t len, int write, void *comp)
{
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
            (c->qp->qp_num != wc[i].qp_num) || (wc[i].byte_len < sizeof(rdmach_rec_hdr_t))) {
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
    .ring           = {rdmach_rc_post_record, rdmach_rc_post_tail, rdmach_rc_post_hot, NULL},
    .rma            = rdmach_rc_rma,
    .get_unpack     = rdmach_rc_get_unpack,
    .atomic64       = rdmach_rc_atomic64,
    .progress       = rdmach_rc_progress,
    .check          = rdmach_rc_check,
    .flush          = rdmach_rc_flush,
    .event_fd       = rdmach_rc_event_fd,
    .sleep          = rdmach_rc_sleep,
    .awake          = rdmach_rc_awake,
    .reap           = rdmach_rc_reap,
    .unclaim        = NULL    /* a connection is both directions: reap takes it whole */
};
