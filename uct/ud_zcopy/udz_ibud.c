/*
 * ud_zcopy InfiniBand UD wire: the wire Koop, Sur and Panda's zero-copy protocol was designed
 * for, over libibverbs (Soft-RoCE, mlx4/mlx5, any HCA with UD QPs). Behind the ud_zcopy wire
 * table (udz_wire.h); the reliability and zero-copy core is the one the UDP wire runs.
 *
 *  - Control: one UD QP per iface, with pre-posted receive buffers (GRH + path MTU each). A
 *    datagram is sent from a registered send buffer it is copied into (inline when it fits
 *    the QP's inline size); the core keeps it for retransmission anyway.
 *  - Data channels (the paper's pool of UD QPs, the CHANNELS knob): one UD QP and CQ each,
 *    receiving through udz_postq: one receive per chunk, two scatter entries, the GRH and the
 *    core's header into a buffer of ours and the payload straight into the destination,
 *    posted before the requester's ZREQ goes. The owner sends every chunk from its control QP
 *    with SEND_WITH_IMM, the chunk's tag in the immediate data. A loss is repaired by the
 *    core's selective repair, as on UDP; what lands in another chunk's place is moved out,
 *    and the rest of that transfer goes through bounce buffers. No QP changes state while
 *    traffic may come (rdma_rxe on Linux 6.1 dereferences NULL in rxe_responder when a UD
 *    QP goes to error and reset under arriving packets): a channel that ends a transfer
 *    with receives posted gets a new QP and CQ instead.
 *  - Destinations and sources are registered through UCX's registration cache (ucs_rcache,
 *    as UCX's ib md): the core names the whole destination in its slots (held per transfer
 *    and channel) and the whole source in its sends (held by the last WR of a send call
 *    until it completes).
 *  - Peers: an address is the GID, LID and QP number (24 bytes); address handles are made
 *    on first contact and cached per remote port (GID, LID), not per peer. A peer costs the
 *    core's peer record and nothing here.
 *  - Limits: a datagram is at most the port's active path MTU; queue depths are capped by the
 *    device's max_qp_wr and max_cqe.
 */
#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "udz_postq.h"
#include "udz_proto.h"
#include "ucx_ext_compat.h"
#include "ucx_ext_verbs.h"

#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <ucm/api/ucm.h>
#include <ucs/memory/rcache.h>
#include <ucs/sys/sys.h>

#define IBUD_GRH          40u
#define IBUD_QKEY         0x757a6b31u      /* "uzk1": ud_zcopy's datagrams, nobody else's */
#define IBUD_MAX_MTU      4096u
#define IBUD_HDR_STRIDE   80u              /* GRH + the core's header, 8-byte aligned */
#define IBUD_SQ_DEPTH     256u
#define IBUD_SIGNAL_EVERY 16u
#define IBUD_BATCH        64
#define IBUD_CHAN_REGS    4                /* destinations a channel holds registered */
#define IBUD_AH_BUCKETS   64

typedef struct ibud_ah {
    struct ibv_ah  *ah;
    uint8_t         gid[16];
    uint16_t        lid;
    struct ibud_ah *next;
} ibud_ah_t;

/* A destination held registered for a channel's transfer. */
typedef struct ibud_reg {
    uintptr_t            start, end;
    uint32_t             lkey;
    ucs_rcache_region_t *region;    /* from the cache, or NULL: mr is ours */
    struct ibv_mr       *mr;
} ibud_reg_t;

typedef struct ibud_chan {
    struct ibv_cq  *cq;
    struct ibv_qp  *qp;
    uint32_t        posted;                         /* receives not polled yet */
    ibud_reg_t      reg[IBUD_CHAN_REGS];
    unsigned        nreg;
} ibud_chan_t;

typedef struct ibud_rcache_region {
    ucs_rcache_region_t super;
    struct ibv_mr      *mr;
} ibud_rcache_region_t;

typedef struct udz_ibud {
    struct ibv_context  *ctx;
    struct ibv_pd       *pd;
    struct ibv_cq       *scq, *rcq;         /* the control QP's */
    struct ibv_qp       *qp;
    struct ibv_mr       *mr;                /* all our buffers */
    uint8_t             *mem;
    size_t               mem_len;
    uint8_t              port;
    int                  gid_index;
    int                  roce, ipv4;        /* RoCE; its GRH area holds an IPv4 header */
    uint8_t              gid[16];
    uint16_t             lid;
    uint32_t             mtu;               /* datagram bytes: the active path MTU */
    uint32_t             max_inline;
    /* control receive buffers, send buffers (one per send queue position) */
    uint8_t             *rxbuf, *txbuf;
    uint32_t             nrx, rx_stride;
    uint32_t             sq_depth;
    uint64_t             sq_head, sq_done;  /* WRs posted; WRs known complete */
    ucs_rcache_region_t **sq_reg;           /* per send queue position: the registration a
                                             * zero-copy chunk's WR holds until it completes */
    /* data channels */
    unsigned             nchan, depth;
    uint8_t             *chdr, *cbounce;
    size_t               bounce_len;
    ibud_chan_t          chan[UDZ_MAX_CHANNELS];
    udz_postq_t          pq;
    ucs_rcache_t        *rcache;
    ibud_ah_t           *ah[IBUD_AH_BUCKETS];
    udz_wire_counters_t *counters;
    char                 name[64];
    struct ibv_wc        wc[IBUD_BATCH];
} udz_ibud_t;

static const udz_postq_ops_t ibud_pq_ops;

/* ---- devices ---- */

static uint32_t ibud_mtu_bytes(enum ibv_mtu mtu)
{
    return 128u << (unsigned)mtu;   /* IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5 */
}

typedef struct {
    int (*found)(void *arg, const char *dev);
    void *arg;
} ibud_found_t;

static int ibud_found_port(void *arg, const char *name, uint8_t port, struct ibv_context *ctx)
{
    ibud_found_t *f = arg;
    char dev[80];

    (void)ctx;
    snprintf(dev, sizeof(dev), "%s:%u", name, port);
    return f->found(f->arg, dev);
}

/* Every active port of every HCA, as "device:port" (rdmach's and UCX's ib names). */
static int ibud_query_devices(int (*found)(void *arg, const char *dev), void *arg)
{
    ibud_found_t f = {found, arg};

    return ucx_ext_verbs_each_port(ibud_found_port, &f);
}

static size_t ibud_dev_mtu(const char *dev)
{
    struct ibv_port_attr attr;
    struct ibv_context *ctx;
    char name[64];
    uint8_t port;
    size_t mtu = 0;

    if ((ucx_ext_verbs_parse(dev, name, sizeof(name), &port) != 0) ||
        ((ctx = ucx_ext_verbs_open(name)) == NULL)) {
        return 0;
    }
    if (ucx_ext_verbs_port_usable(ctx, port, &attr)) {
        mtu = ibud_mtu_bytes(attr.active_mtu);
    }
    ibv_close_device(ctx);
    return mtu;
}

/* ---- addresses: [GID 16][LID 2][0 0][QPN 4]; UCP gets the GID as the device address and
 * the QPN and LID as the iface address ---- */

static void ibud_addr_make(const uint8_t *gid, uint16_t lid, uint32_t qpn, udz_addr_t *out)
{
    memset(out, 0, sizeof(*out));
    memcpy(out->b, gid, 16);
    memcpy(out->b + 16, &lid, 2);
    memcpy(out->b + 20, &qpn, 4);
}

static uint32_t ibud_addr_qpn(const udz_addr_t *a)
{
    uint32_t qpn;

    memcpy(&qpn, a->b + 20, 4);
    return qpn;
}

/* The sender of a received datagram, from its GRH (RoCE v2 over IPv4: rdma_rxe and the HCAs
 * put the IPv4 header in the GRH area's last 20 bytes) and the completion. */
static void ibud_src(const udz_ibud_t *w, const uint8_t *grh, const struct ibv_wc *wc,
                     udz_addr_t *out)
{
    uint8_t gid[16] = {0};
    uint16_t lid = w->roce ? 0 : wc->slid;

    if (wc->wc_flags & IBV_WC_GRH) {
        if (w->ipv4) {
            gid[10] = gid[11] = 0xff;
            memcpy(gid + 12, grh + 20 + 12, 4);
        } else {
            memcpy(gid, grh + 8, 16);
        }
    }
    ibud_addr_make(gid, lid, wc->src_qp, out);
}

static ibud_ah_t *ibud_ah(udz_ibud_t *w, const udz_addr_t *dst)
{
    struct ibv_ah_attr attr;
    ibud_ah_t *a;
    uint16_t lid;
    unsigned b;

    memcpy(&lid, dst->b + 16, 2);
    b = (unsigned)(dst->b[15] ^ dst->b[14] * 7u ^ lid) % IBUD_AH_BUCKETS;
    for (a = w->ah[b]; a != NULL; a = a->next) {
        if ((a->lid == lid) && !memcmp(a->gid, dst->b, 16)) {
            return a;
        }
    }
    memset(&attr, 0, sizeof(attr));
    attr.is_global      = 1;
    memcpy(attr.grh.dgid.raw, dst->b, 16);
    attr.grh.sgid_index = (uint8_t)w->gid_index;
    attr.grh.hop_limit  = 64;
    attr.dlid           = lid;
    attr.port_num       = w->port;
    a = calloc(1, sizeof(*a));
    if (a == NULL) {
        return NULL;
    }
    a->ah = ibv_create_ah(w->pd, &attr);
    if (a->ah == NULL) {
        free(a);
        return NULL;
    }
    memcpy(a->gid, dst->b, 16);
    a->lid   = lid;
    a->next  = w->ah[b];
    w->ah[b] = a;
    return a;
}

/* ---- QPs ---- */

static int ibud_qp_ready(udz_ibud_t *w, struct ibv_qp *qp)
{
    struct ibv_qp_attr attr;

    memset(&attr, 0, sizeof(attr));
    attr.qp_state   = IBV_QPS_INIT;
    attr.pkey_index = 0;
    attr.port_num   = w->port;
    attr.qkey       = IBUD_QKEY;
    if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)) {
        return -errno;
    }
    attr.qp_state = IBV_QPS_RTR;
    if (ibv_modify_qp(qp, &attr, IBV_QP_STATE)) {
        return -errno;
    }
    attr.qp_state = IBV_QPS_RTS;
    attr.sq_psn   = 0;
    if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN)) {
        return -errno;
    }
    return 0;
}

static struct ibv_qp *ibud_qp_create(udz_ibud_t *w, struct ibv_cq *scq, struct ibv_cq *rcq,
                                     uint32_t sq, uint32_t rq, uint32_t *max_inline)
{
    static const uint32_t inline_try[] = {512, 256, 128, 64, 0};
    struct ibv_qp_init_attr init;
    struct ibv_qp *qp = NULL;
    unsigned i;

    for (i = 0; (qp == NULL) && (i < sizeof(inline_try) / sizeof(inline_try[0])); ++i) {
        memset(&init, 0, sizeof(init));
        init.send_cq             = scq;
        init.recv_cq             = rcq;
        init.qp_type             = IBV_QPT_UD;
        init.cap.max_send_wr     = sq;
        init.cap.max_recv_wr     = rq;
        init.cap.max_send_sge    = 1 + UDZ_MAX_IOV;
        init.cap.max_recv_sge    = 2;
        init.cap.max_inline_data = (max_inline != NULL) ? inline_try[i] : 0;
        qp = ibv_create_qp(w->pd, &init);
    }
    if ((qp != NULL) && (max_inline != NULL)) {
        *max_inline = init.cap.max_inline_data;
    }
    return qp;
}

/* ---- control receive ---- */

static int ibud_rx_post(udz_ibud_t *w, const uint32_t *idx, int n)
{
    struct ibv_recv_wr wr[IBUD_BATCH], *bad;
    struct ibv_sge sge[IBUD_BATCH];
    int i;

    for (i = 0; i < n; ++i) {
        sge[i].addr   = (uintptr_t)(w->rxbuf + (size_t)idx[i] * w->rx_stride);
        sge[i].length = IBUD_GRH + w->mtu;
        sge[i].lkey   = w->mr->lkey;
        wr[i].wr_id   = idx[i];
        wr[i].sg_list = &sge[i];
        wr[i].num_sge = 1;
        wr[i].next    = (i + 1 < n) ? &wr[i + 1] : NULL;
    }
    return (n > 0) ? ibv_post_recv(w->qp, wr, &bad) : 0;
}

/* Copies a received datagram into the core's areas as recvmsg scatters. */
static void ibud_scatter(udz_rxmsg_t *m, const uint8_t *data, size_t len)
{
    size_t off = 0, take;
    int k;

    for (k = 0; k < 2; ++k) {
        take = len - off;
        if (take > m->iov[k].iov_len) {
            take = m->iov[k].iov_len;
        }
        if (take > 0) {
            memcpy(m->iov[k].iov_base, data + off, take);
        }
        off += take;
    }
    m->len     = len;
    m->trunc   = off < len;
    m->unreach = 0;
}

static int ibud_recv(void *wire, udz_rxmsg_t *msgs, int n)
{
    udz_ibud_t *w = wire;
    uint32_t repost[IBUD_BATCH];
    const uint8_t *buf;
    int i, k, j = 0;

    if (w->counters != NULL) {
        w->counters->ctl_recv_calls++;
    }
    k = ibv_poll_cq(w->rcq, (n < IBUD_BATCH) ? n : IBUD_BATCH, w->wc);
    if (k <= 0) {
        return (k < 0) ? -EIO : 0;
    }
    for (i = 0; i < k; ++i) {
        repost[i] = (uint32_t)w->wc[i].wr_id;
        if ((w->wc[i].status != IBV_WC_SUCCESS) || (w->wc[i].byte_len < IBUD_GRH)) {
            if (w->counters != NULL) {
                w->counters->ud_rx_errors++;    /* a failed receive carries nothing */
            }
            continue;
        }
        buf = w->rxbuf + (size_t)repost[i] * w->rx_stride;
        ibud_scatter(&msgs[j], buf + IBUD_GRH, w->wc[i].byte_len - IBUD_GRH);
        ibud_src(w, buf, &w->wc[i], &msgs[j].src);
        ++j;
    }
    (void)ibud_rx_post(w, repost, k);
    return j;
}

/* ---- send: the control QP sends everything (a ZDATA's sender is the owner's control
 * address, which the requester checks) ---- */

static void ibud_reap(udz_ibud_t *w)
{
    uint64_t done = w->sq_done;
    int i, k;

    while ((k = ibv_poll_cq(w->scq, IBUD_BATCH, w->wc)) > 0) {
        for (i = 0; i < k; ++i) {
            /* UD completes in order: everything up to a signalled WR is done */
            if (w->wc[i].wr_id + 1 > done) {
                done = w->wc[i].wr_id + 1;
            }
        }
    }
    for (; w->sq_done < done; ++w->sq_done) {
        ucs_rcache_region_t **r = &w->sq_reg[w->sq_done % w->sq_depth];
        if (*r != NULL) {
            ucs_rcache_region_put(w->rcache, *r);   /* its chunks left the source */
            *r = NULL;
        }
    }
}

/* The registration of a chunk's source, held by the WR at position seq until it completes
 * (NULL: not registered, the chunk is copied). One lookup per send call: its chunks share a
 * source, and the last WR of the call holds it. */
static ucs_rcache_region_t *ibud_src_reg(udz_ibud_t *w, const struct iovec *region)
{
    ucs_rcache_region_t *r;

    if ((w->rcache == NULL) || (region->iov_len == 0) ||
        (ucx_ext_rcache_get(w->rcache, region->iov_base, region->iov_len, UCS_PGT_ADDR_ALIGN,
                            PROT_READ, NULL, &r) != UCS_OK)) {
        return NULL;
    }
    return r;
}

static int ibud_post_sends(udz_ibud_t *w, const udz_addr_t *dst, const udz_txmsg_t *msgs,
                           int n, int imm)
{
    struct ibv_send_wr wr[IBUD_BATCH], *bad;
    struct ibv_sge sge[IBUD_BATCH][1 + UDZ_MAX_IOV];
    ucs_rcache_region_t *src;
    ibud_ah_t *ah;
    size_t len, off;
    uint8_t *buf;
    uint64_t seq;
    int i, k, m = 0, zc = 0;

    ah = ibud_ah(w, dst);
    if (ah == NULL) {
        return -EHOSTUNREACH;
    }
    if (w->sq_head - w->sq_done + (uint64_t)n > w->sq_depth) {
        ibud_reap(w);
    }
    if (n > IBUD_BATCH) {
        n = IBUD_BATCH;
    }
    /* a data channel's chunks go from where they lie (the owner's registered region) */
    src = (imm && (n > 0) && (msgs[0].iovcnt == 2) && (msgs[0].iov[1].iov_len > w->max_inline)) ?
          ibud_src_reg(w, &msgs[0].region) : NULL;
    for (i = 0; (i < n) && (w->sq_head + (uint64_t)m - w->sq_done < w->sq_depth); ++i) {
        seq = w->sq_head + (uint64_t)m;
        for (len = 0, k = 0; k < msgs[i].iovcnt; ++k) {
            len += msgs[i].iov[k].iov_len;
        }
        if (len > w->mtu) {
            continue;   /* the core never makes one: lost, like an oversized UDP datagram */
        }
        memset(&wr[m], 0, sizeof(wr[m]));
        wr[m].wr_id             = seq;
        wr[m].sg_list           = sge[m];
        wr[m].wr.ud.ah          = ah->ah;
        wr[m].wr.ud.remote_qpn  = ibud_addr_qpn(dst);
        wr[m].wr.ud.remote_qkey = IBUD_QKEY;
        if (imm) {
            wr[m].opcode   = IBV_WR_SEND_WITH_IMM;
            wr[m].imm_data = msgs[i].tag;   /* passed through as it is: peers are alike */
        } else {
            wr[m].opcode = IBV_WR_SEND;
        }
        if (len <= w->max_inline) {
            for (k = 0; k < msgs[i].iovcnt; ++k) {
                sge[m][k].addr   = (uintptr_t)msgs[i].iov[k].iov_base;
                sge[m][k].length = (uint32_t)msgs[i].iov[k].iov_len;
                sge[m][k].lkey   = 0;
            }
            wr[m].num_sge     = msgs[i].iovcnt;
            wr[m].send_flags |= IBV_SEND_INLINE;
        } else if ((src != NULL) && (msgs[i].iovcnt == 2) &&
                   ((uintptr_t)msgs[i].iov[1].iov_base >= src->super.start) &&
                   ((uintptr_t)msgs[i].iov[1].iov_base + msgs[i].iov[1].iov_len <=
                    src->super.end)) {
            /* zero copy: the header from our buffer, the chunk from the owner's memory */
            buf = w->txbuf + (seq % w->sq_depth) * w->mtu;
            memcpy(buf, msgs[i].iov[0].iov_base, msgs[i].iov[0].iov_len);
            sge[m][0].addr   = (uintptr_t)buf;
            sge[m][0].length = (uint32_t)msgs[i].iov[0].iov_len;
            sge[m][0].lkey   = w->mr->lkey;
            sge[m][1].addr   = (uintptr_t)msgs[i].iov[1].iov_base;
            sge[m][1].length = (uint32_t)msgs[i].iov[1].iov_len;
            sge[m][1].lkey   = ((ibud_rcache_region_t*)src)->mr->lkey;
            wr[m].num_sge    = 2;
            zc++;
        } else {
            buf = w->txbuf + (seq % w->sq_depth) * w->mtu;
            for (off = 0, k = 0; k < msgs[i].iovcnt; ++k) {
                memcpy(buf + off, msgs[i].iov[k].iov_base, msgs[i].iov[k].iov_len);
                off += msgs[i].iov[k].iov_len;
            }
            sge[m][0].addr   = (uintptr_t)buf;
            sge[m][0].length = (uint32_t)len;
            sge[m][0].lkey   = w->mr->lkey;
            wr[m].num_sge    = 1;
        }
        if ((seq % IBUD_SIGNAL_EVERY == IBUD_SIGNAL_EVERY - 1) ||
            (seq + 1 - w->sq_done >= w->sq_depth)) {
            wr[m].send_flags |= IBV_SEND_SIGNALED;
        }
        if (m > 0) {
            wr[m - 1].next = &wr[m];
        }
        ++m;
    }
    if ((m == 0) || (ibv_post_send(w->qp, wr, &bad) != 0)) {
        if (src != NULL) {
            ucs_rcache_region_put(w->rcache, src);
        }
        return (m == 0) ? i : 0;    /* none fitted the send queue: 0 (retried), or all
                                     * oversized (lost) */
    }
    if (src != NULL) {
        if (zc > 0) {
            w->sq_reg[(w->sq_head + (uint64_t)m - 1) % w->sq_depth] = src;
        } else {
            ucs_rcache_region_put(w->rcache, src);
        }
    }
    w->sq_head += (uint64_t)m;
    if (w->counters != NULL) {
        w->counters->ud_sends    += (uint64_t)m;
        w->counters->ud_zc_sends += (uint64_t)zc;
    }
    return i;
}

static int ibud_send(void *wire, const udz_addr_t *dst, const udz_txmsg_t *msgs, int n)
{
    return ibud_post_sends(wire, dst, msgs, n, 0);
}

static int ibud_chan_send(void *wire, const udz_addr_t *dst, const udz_txmsg_t *msgs, int n)
{
    return ibud_post_sends(wire, dst, msgs, n, 1);
}

/* ---- data channels: udz_postq's calls ---- */

static inline uint8_t *ibud_chdr(const udz_ibud_t *w, unsigned chan, uint32_t pos)
{
    return w->chdr + ((size_t)chan * w->depth + pos) * IBUD_HDR_STRIDE;
}

static void *ibud_pq_hdr(void *wire, unsigned chan, uint32_t pos)
{
    return ibud_chdr(wire, chan, pos) + IBUD_GRH;
}

static void *ibud_pq_bounce(void *wire, unsigned chan, uint32_t pos)
{
    udz_ibud_t *w = wire;

    return w->cbounce + ((size_t)chan * w->depth + pos) * w->bounce_len;
}

static int ibud_chan_lkey(udz_ibud_t *w, unsigned chan, const void *p, size_t len,
                          uint32_t *lkey)
{
    const ibud_chan_t *c = &w->chan[chan];
    uintptr_t a = (uintptr_t)p;
    unsigned i;

    for (i = 0; i < c->nreg; ++i) {
        if ((a >= c->reg[i].start) && (a + len <= c->reg[i].end)) {
            *lkey = c->reg[i].lkey;
            return 0;
        }
    }
    return -ENOENT;
}

static int ibud_pq_post(void *wire, unsigned chan, uint32_t pos, void *payload, size_t len)
{
    udz_ibud_t *w = wire;
    struct ibv_recv_wr wr, *bad;
    struct ibv_sge sge[2];

    sge[0].addr   = (uintptr_t)ibud_chdr(w, chan, pos);
    sge[0].length = IBUD_GRH + UDZ_HDR_LEN;
    sge[0].lkey   = w->mr->lkey;
    if (payload == NULL) {
        sge[1].addr   = (uintptr_t)ibud_pq_bounce(w, chan, pos);
        sge[1].length = (uint32_t)w->bounce_len;
        sge[1].lkey   = w->mr->lkey;
    } else {
        if (ibud_chan_lkey(w, chan, payload, len, &sge[1].lkey) != 0) {
            return -ENOENT;
        }
        sge[1].addr   = (uintptr_t)payload;
        sge[1].length = (uint32_t)len;
    }
    memset(&wr, 0, sizeof(wr));
    wr.wr_id   = pos;
    wr.sg_list = sge;
    wr.num_sge = 2;
    if (ibv_post_recv(w->chan[chan].qp, &wr, &bad) != 0) {
        return -EIO;
    }
    w->chan[chan].posted++;
    return 0;
}

static void ibud_pq_wc(udz_ibud_t *w, unsigned chan, const struct ibv_wc *wc,
                       udz_postq_wc_t *out)
{
    out->pos = (uint32_t)wc->wr_id;
    out->ok  = (wc->status == IBV_WC_SUCCESS) && (wc->byte_len >= IBUD_GRH);
    if (!out->ok && (w->counters != NULL)) {
        w->counters->ud_rx_errors++;    /* e.g. longer than the receive: dropped */
    }
    out->len = out->ok ? wc->byte_len - IBUD_GRH : 0;
    out->imm = (wc->wc_flags & IBV_WC_WITH_IMM) ? wc->imm_data : 0;
    if (out->ok) {
        ibud_src(w, ibud_chdr(w, chan, out->pos), wc, &out->src);
    } else {
        memset(&out->src, 0, sizeof(out->src));
    }
}

static int ibud_pq_poll(void *wire, unsigned chan, udz_postq_wc_t *wc, int n)
{
    udz_ibud_t *w = wire;
    ibud_chan_t *c = &w->chan[chan];
    int j, k;

    k = ibv_poll_cq(c->cq, (n < IBUD_BATCH) ? n : IBUD_BATCH, w->wc);
    for (j = 0; j < k; ++j) {
        ibud_pq_wc(w, chan, &w->wc[j], &wc[j]);
        c->posted--;
    }
    return (k < 0) ? -EIO : k;
}

/* A channel QP (and its CQ), ready to receive. */
static int ibud_chan_open(udz_ibud_t *w, unsigned chan)
{
    ibud_chan_t *c = &w->chan[chan];

    c->posted = 0;
    c->cq     = ibv_create_cq(w->ctx, (int)w->depth, NULL, NULL, 0);
    c->qp     = (c->cq != NULL) ? ibud_qp_create(w, w->scq, c->cq, 1, w->depth, NULL) : NULL;
    if (c->qp == NULL) {
        return (errno != 0) ? -errno : -ENOMEM;
    }
    return ibud_qp_ready(w, c->qp);
}

static void ibud_chan_close(udz_ibud_t *w, unsigned chan)
{
    ibud_chan_t *c = &w->chan[chan];

    if (c->qp != NULL) {
        ibv_destroy_qp(c->qp);
        c->qp = NULL;
    }
    if (c->cq != NULL) {
        ibv_destroy_cq(c->cq);
        c->cq = NULL;
    }
}

/* Every posted receive gone: a new QP (its own number: the old one's stale datagrams find no
 * QP) and a new CQ (none of the old QP's completions can be polled as the new one's). */
static int ibud_pq_renew(void *wire, unsigned chan)
{
    udz_ibud_t *w = wire;

    ibud_chan_close(w, chan);
    return ibud_chan_open(w, chan);
}

static const udz_postq_ops_t ibud_pq_ops = {
    .post   = ibud_pq_post,
    .poll   = ibud_pq_poll,
    .renew  = ibud_pq_renew,
    .hdr    = ibud_pq_hdr,
    .bounce = ibud_pq_bounce,
};

/* ---- registration of destinations (UCX's cache, as its ib md) ---- */

static ucs_status_t ibud_rcache_reg(void *context, ucs_rcache_t *rcache, void *arg,
                                    ucs_rcache_region_t *rregion, uint16_t flags)
{
    udz_ibud_t *w = context;
    ibud_rcache_region_t *r = (ibud_rcache_region_t*)rregion;

    r->mr = ibv_reg_mr(w->pd, (void*)rregion->super.start,
                       rregion->super.end - rregion->super.start, IBV_ACCESS_LOCAL_WRITE);
    return (r->mr != NULL) ? UCS_OK : UCS_ERR_IO_ERROR;
}

static void ibud_rcache_dereg(void *context, ucs_rcache_t *rcache, ucs_rcache_region_t *rregion)
{
    ibv_dereg_mr(((ibud_rcache_region_t*)rregion)->mr);
}

static void ibud_rcache_dump(void *context, ucs_rcache_t *rcache, ucs_rcache_region_t *rregion,
                             char *buf, size_t max)
{
    snprintf(buf, max, "lkey 0x%x", ((ibud_rcache_region_t*)rregion)->mr->lkey);
}

static const ucs_rcache_ops_t ibud_rcache_ops = {
    UCX_EXT_RCACHE_VERSION_OPS
    .mem_reg     = ibud_rcache_reg,
    .mem_dereg   = ibud_rcache_dereg,
    .dump_region = ibud_rcache_dump,
};

static void ibud_rcache_open(udz_ibud_t *w)
{
    ucs_rcache_params_t p;

    memset(&p, 0, sizeof(p));
    p.region_struct_size = sizeof(ibud_rcache_region_t);
    ucx_ext_rcache_set_alignment(&p, ucs_get_page_size());
    p.ucm_events         = UCM_EVENT_VM_UNMAPPED;
    p.ucm_event_priority = 1000;
    p.ops                = &ibud_rcache_ops;
    p.context            = w;
    p.flags              = 0;
    p.max_regions        = ULONG_MAX;
    p.max_size           = SIZE_MAX;
    p.max_unreleased     = SIZE_MAX;
    if (ucs_rcache_create(&p, "ud_zcopy", NULL, &w->rcache) != UCS_OK) {
        w->rcache = NULL;   /* every transfer registers its destination itself */
    }
}

/* The destination of a transfer's DEST slots, registered until the transfer ends. */
static void ibud_chan_hold(udz_ibud_t *w, unsigned chan, const struct iovec *dest)
{
    ibud_chan_t *c = &w->chan[chan];
    ibud_reg_t *r;
    ucs_rcache_region_t *region;
    uint32_t lkey;

    if ((dest->iov_len == 0) || (c->nreg == IBUD_CHAN_REGS) ||
        (ibud_chan_lkey(w, chan, dest->iov_base, dest->iov_len, &lkey) == 0)) {
        return;
    }
    r = &c->reg[c->nreg];
    memset(r, 0, sizeof(*r));
    if (w->rcache != NULL) {
        if (ucx_ext_rcache_get(w->rcache, dest->iov_base, dest->iov_len, UCS_PGT_ADDR_ALIGN,
                               PROT_READ | PROT_WRITE, NULL, &region) != UCS_OK) {
            return;     /* its chunks go through bounce buffers */
        }
        r->region = region;
        r->lkey   = ((ibud_rcache_region_t*)region)->mr->lkey;
        r->start  = region->super.start;
        r->end    = region->super.end;
    } else {
        r->mr = ibv_reg_mr(w->pd, dest->iov_base, dest->iov_len, IBV_ACCESS_LOCAL_WRITE);
        if (r->mr == NULL) {
            return;
        }
        r->lkey  = r->mr->lkey;
        r->start = (uintptr_t)dest->iov_base;
        r->end   = r->start + dest->iov_len;
    }
    c->nreg++;
}

static void ibud_chan_release(udz_ibud_t *w, unsigned chan)
{
    ibud_chan_t *c = &w->chan[chan];
    unsigned i;

    for (i = 0; i < c->nreg; ++i) {
        if (c->reg[i].region != NULL) {
            ucs_rcache_region_put(w->rcache, c->reg[i].region);
        } else if (c->reg[i].mr != NULL) {
            ibv_dereg_mr(c->reg[i].mr);
        }
    }
    c->nreg = 0;
}

static int ibud_chan_recv(void *wire, unsigned chan, udz_rxmsg_t *msgs, int n)
{
    udz_ibud_t *w = wire;
    int i;

    for (i = 0; i < n; ++i) {
        if (msgs[i].kind == UDZ_SLOT_DEST) {
            ibud_chan_hold(w, chan, &msgs[i].dest);
            break;
        }
    }
    return udz_postq_recv(&w->pq, chan, msgs, n);
}

static void ibud_chan_end(void *wire, unsigned chan)
{
    udz_ibud_t *w = wire;

    udz_postq_end(&w->pq, chan);    /* nothing posted into the destination any more */
    ibud_chan_release(w, chan);
}

static int ibud_chan_quiet(void *wire, unsigned chan)
{
    return udz_postq_quiet(&((udz_ibud_t*)wire)->pq, chan);
}

static uint32_t ibud_chan_id(void *wire, unsigned chan)
{
    return ((udz_ibud_t*)wire)->chan[chan].qp->qp_num;
}

/* A channel is a QP, named by its number, which changes when the channel is renewed
 * (udz_postq.h), so the address cannot announce them (chans stay empty): a ZREQ's QP number
 * is taken at the requester's GID and LID, where the Q_Key lets only ud_zcopy's own QPs take
 * the data, and they drop what does not carry their cookie. */
static int ibud_chan_addr(void *wire, const udz_addr_t *ctrl, const udz_chans_t *chans,
                          uint32_t chan_id, udz_addr_t *out)
{
    (void)wire;
    (void)chans;
    if (chan_id > 0xffffffu) {
        return -EINVAL;     /* QP numbers are 24 bits */
    }
    *out = *ctrl;
    memcpy(out->b + 20, &chan_id, 4);
    return 0;
}

/* ---- life cycle ---- */

static void ibud_close(void *wire)
{
    udz_ibud_t *w = wire;
    ibud_ah_t *a, *next;
    unsigned i;

    for (i = 0; i < UDZ_MAX_CHANNELS; ++i) {
        ibud_chan_release(w, i);
        ibud_chan_close(w, i);
    }
    for (i = 0; i < IBUD_AH_BUCKETS; ++i) {
        for (a = w->ah[i]; a != NULL; a = next) {
            next = a->next;
            ibv_destroy_ah(a->ah);
            free(a);
        }
    }
    if (w->qp != NULL) {
        ibv_destroy_qp(w->qp);
    }
    for (i = 0; (w->sq_reg != NULL) && (i < w->sq_depth); ++i) {
        if (w->sq_reg[i] != NULL) {
            ucs_rcache_region_put(w->rcache, w->sq_reg[i]);
        }
    }
    free(w->sq_reg);
    if (w->rcache != NULL) {
        ucs_rcache_destroy(w->rcache);
    }
    if (w->scq != NULL) {
        ibv_destroy_cq(w->scq);
    }
    if (w->rcq != NULL) {
        ibv_destroy_cq(w->rcq);
    }
    if (w->mr != NULL) {
        ibv_dereg_mr(w->mr);
    }
    free(w->mem);
    if (w->pd != NULL) {
        ibv_dealloc_pd(w->pd);
    }
    if (w->ctx != NULL) {
        ibv_close_device(w->ctx);
    }
    free(w);
}

#define IBUD_MIN(_a, _b) (((_a) < (_b)) ? (_a) : (_b))

static int ibud_open(const char *dev, const udz_wire_params_t *params, void **wire_p, char *err,
                     size_t errlen)
{
    struct ibv_device_attr dattr;
    struct ibv_port_attr pattr;
    union ibv_gid gid;
    udz_ibud_t *w;
    uint32_t i, *idx = NULL, cap_wr, cap_cqe;
    size_t off;
    int rc;

    w = calloc(1, sizeof(*w));
    if (w == NULL) {
        snprintf(err, errlen, "no memory for the UD wire");
        return -ENOMEM;
    }
    if ((ucx_ext_verbs_parse(dev, w->name, sizeof(w->name), &w->port) != 0) ||
        ((w->ctx = ucx_ext_verbs_open(w->name)) == NULL) ||
        (ibv_query_device(w->ctx, &dattr) != 0) ||
        !ucx_ext_verbs_port_usable(w->ctx, w->port, &pattr)) {
        snprintf(err, errlen, "%s is no active InfiniBand/RoCE port", dev);
        rc = -ENODEV;
        goto err;
    }
    if (params->channels > UDZ_MAX_CHANNELS) {
        snprintf(err, errlen, "at most %d data channels", UDZ_MAX_CHANNELS);
        rc = -EINVAL;
        goto err;
    }
    w->roce      = (pattr.link_layer == IBV_LINK_LAYER_ETHERNET);
    w->lid       = w->roce ? 0 : pattr.lid;
    w->mtu       = IBUD_MIN(ibud_mtu_bytes(pattr.active_mtu), IBUD_MAX_MTU);
    w->gid_index = ucx_ext_verbs_pick_gid(w->ctx, w->port, &pattr, &gid);
    if (w->gid_index < 0) {
        snprintf(err, errlen, "%s has no usable GID", dev);
        rc = -ENODEV;
        goto err;
    }
    memcpy(w->gid, gid.raw, 16);
    w->ipv4 = w->roce && !memcmp(w->gid, "\0\0\0\0\0\0\0\0\0\0\xff\xff", 12);
    w->counters = params->counters;

    /* sizes: what was asked, within the device's caps */
    cap_wr      = (uint32_t)dattr.max_qp_wr;
    cap_cqe     = (uint32_t)dattr.max_cqe;
    w->nchan    = params->channels;
    w->depth    = IBUD_MIN(UDZ_POSTQ_MAX_DEPTH, cap_wr);
    w->sq_depth = IBUD_MIN(IBUD_SQ_DEPTH, IBUD_MIN(cap_wr, cap_cqe));
    w->nrx      = (uint32_t)IBUD_MIN(params->rx_buffer / w->mtu, 4096);
    w->nrx      = IBUD_MIN(IBUD_MIN(w->nrx < 64 ? 64 : w->nrx, cap_wr), cap_cqe);
    w->rx_stride  = (IBUD_GRH + w->mtu + 63) & ~63u;
    w->bounce_len = w->mtu - UDZ_HDR_LEN;
    w->mem_len    = (size_t)w->nrx * w->rx_stride + (size_t)w->sq_depth * w->mtu +
                    (size_t)w->nchan * w->depth * (IBUD_HDR_STRIDE + w->bounce_len);
    if (posix_memalign((void**)&w->mem, 4096, w->mem_len) != 0) {
        w->mem = NULL;
        snprintf(err, errlen, "no memory for %zu bytes of UD buffers", w->mem_len);
        rc = -ENOMEM;
        goto err;
    }
    memset(w->mem, 0, w->mem_len);
    off        = 0;
    w->rxbuf   = w->mem + off;
    off       += (size_t)w->nrx * w->rx_stride;
    w->txbuf   = w->mem + off;
    off       += (size_t)w->sq_depth * w->mtu;
    w->chdr    = w->mem + off;
    off       += (size_t)w->nchan * w->depth * IBUD_HDR_STRIDE;
    w->cbounce = w->mem + off;

    w->pd = ibv_alloc_pd(w->ctx);
    w->mr = (w->pd != NULL) ? ibv_reg_mr(w->pd, w->mem, w->mem_len, IBV_ACCESS_LOCAL_WRITE) :
                              NULL;
    w->scq = ibv_create_cq(w->ctx, (int)w->sq_depth, NULL, NULL, 0);
    w->rcq = ibv_create_cq(w->ctx, (int)w->nrx, NULL, NULL, 0);
    if ((w->pd == NULL) || (w->mr == NULL) || (w->scq == NULL) || (w->rcq == NULL)) {
        rc = -errno;
        snprintf(err, errlen, "%s: protection domain, %zu bytes of buffers or CQs: %s%s", dev,
                 w->mem_len, strerror(errno), (errno == ENOMEM) ? " (check ulimit -l)" : "");
        goto err;
    }
    w->qp = ibud_qp_create(w, w->scq, w->rcq, w->sq_depth, w->nrx, &w->max_inline);
    if ((w->qp == NULL) || ((rc = ibud_qp_ready(w, w->qp)) != 0)) {
        rc = (w->qp == NULL) ? -errno : rc;
        snprintf(err, errlen, "%s: the control UD QP: %s", dev, strerror(-rc));
        goto err;
    }
    for (i = 0; i < w->nchan; ++i) {
        rc = ibud_chan_open(w, i);
        if (rc != 0) {
            snprintf(err, errlen, "%s: data channel %u's UD QP: %s", dev, i, strerror(-rc));
            goto err;
        }
    }
    w->sq_reg = calloc(w->sq_depth, sizeof(*w->sq_reg));
    idx = malloc(w->nrx * sizeof(*idx));
    if ((idx == NULL) || (w->sq_reg == NULL)) {
        rc = -ENOMEM;
        snprintf(err, errlen, "no memory");
        goto err;
    }
    for (i = 0; i < w->nrx; i += IBUD_BATCH) {
        uint32_t j, m = IBUD_MIN(IBUD_BATCH, w->nrx - i);
        for (j = 0; j < m; ++j) {
            idx[j] = i + j;
        }
        if (ibud_rx_post(w, idx, (int)m) != 0) {
            rc = -EIO;
            snprintf(err, errlen, "%s: posting %u receives", dev, w->nrx);
            goto err;
        }
    }
    free(idx);
    idx = NULL;
    udz_postq_init(&w->pq, &ibud_pq_ops, w, w->depth, UDZ_HDR_LEN, w->bounce_len, w->counters);
    ibud_rcache_open(w);
    *wire_p = w;
    return 0;

err:
    free(idx);
    ibud_close(w);
    return rc;
}

static void ibud_query(void *wire, udz_wire_attr_t *attr)
{
    udz_ibud_t *w = wire;
    char gid[INET6_ADDRSTRLEN];

    /* the glue gives a transfer half of this as its window: half the posted receives of a
     * channel, as the core offers twice a window of slots (udz_zrx.c) */
    attr->rx_buffer = (size_t)w->depth * w->bounce_len;
    snprintf(attr->desc, sizeof(attr->desc), "%s:%u gid %s qpn 0x%x, mtu %u, %u rx, inline %u%s",
             w->name, w->port, inet_ntop(AF_INET6, w->gid, gid, sizeof(gid)), w->qp->qp_num,
             w->mtu, w->nrx, w->max_inline, (w->rcache != NULL) ? "" : ", no rcache");
}

static void ibud_dev_addr_pack(void *wire, void *dev_addr)
{
    memcpy(dev_addr, ((udz_ibud_t*)wire)->gid, 16);
}

static void ibud_iface_addr_pack(void *wire, void *iface_addr)
{
    udz_ibud_t *w = wire;
    uint32_t qpn  = w->qp->qp_num;

    memcpy(iface_addr, &qpn, 4);
    memcpy((uint8_t*)iface_addr + 4, &w->lid, 2);
}

static void ibud_addr_unpack(const void *dev_addr, const void *iface_addr, udz_addr_t *out,
                             udz_chans_t *chans)
{
    uint16_t lid;
    uint32_t qpn;

    memset(chans, 0, sizeof(*chans));   /* channels are named by QP number (ibud_chan_addr) */

    memcpy(&qpn, iface_addr, 4);
    memcpy(&lid, (const uint8_t*)iface_addr + 4, 2);
    ibud_addr_make(dev_addr, lid, qpn, out);
}

/* RoCE: any peer with a GID of the same kind (an IPv4 one for an IPv4 one); IB: any in the
 * subnet (the GID's prefix). */
static int ibud_is_reachable(void *wire, const void *dev_addr, int same_host)
{
    udz_ibud_t *w = wire;
    const uint8_t *gid = dev_addr;
    int v4 = !memcmp(gid, "\0\0\0\0\0\0\0\0\0\0\xff\xff", 12);

    (void)same_host;
    if (w->roce) {
        return v4 == w->ipv4;
    }
    return !memcmp(gid, w->gid, 8);
}

const udz_wire_ops_t udz_ibud_wire = {
    .name            = "ib_ud",
    .max_dgram       = IBUD_MAX_MTU,
    .run_bytes       = IBUD_MAX_MTU,
    .run_dgrams      = 1,
    .dev_mtu         = ibud_dev_mtu,
    .query_devices   = ibud_query_devices,
    .open            = ibud_open,
    .close           = ibud_close,
    .query           = ibud_query,
    .dev_addr_len    = 16,
    .iface_addr_len  = 6,
    .dev_addr_pack   = ibud_dev_addr_pack,
    .iface_addr_pack = ibud_iface_addr_pack,
    .addr_unpack     = ibud_addr_unpack,
    .is_reachable    = ibud_is_reachable,
    .send            = ibud_send,
    .recv            = ibud_recv,
    .rx_idle         = NULL,
    .chan_id         = ibud_chan_id,
    .chan_addr       = ibud_chan_addr,
    .chan_recv       = ibud_chan_recv,
    .chan_send       = ibud_chan_send,
    .event_fd        = NULL,
    .posts_ahead     = 1,
    .chan_end        = ibud_chan_end,
    .chan_quiet      = ibud_chan_quiet,
};
