/*
 * rdmach InfiniBand RC verbs wire: QPs and connections. A connection's QP (created, moved to
 * INIT, connected RTR then RTS; the XRC mode's QPs take the same transitions), its registered
 * block and ep address, connect, close (the fence, then the QP to error) and reap (rings taken
 * back once the fence completed).
 */
#include "rdmach_rc_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- a connection's QP, and its end ---- */

struct ibv_qp *rdmach_rc_create_qp(rdmach_rc_wire_t *w, uint32_t *max_inline)
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

void rdmach_rc_conn_free(rdmach_rc_conn_t *c)
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

/* ---- connections ---- */

int rdmach_rc_ep_open(rdmach_wire_t *wire, void *ep_ctx, rdmach_wire_peer_t **peer_p)
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

void rdmach_rc_ep_pack_addr(const rdmach_wire_peer_t *peer, void *buf)
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
    attr.timeout       = rdmach_rc_timeout_exp(w->config.timeout);
    attr.retry_cnt     = RC_MIN(w->config.retry_count, 7u);
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

int rdmach_rc_ep_connect(rdmach_wire_t *wire, rdmach_wire_peer_t *peer,
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

/* The connection has a QP of its own (RC, not an XRC host connection). */
static inline int rdmach_rc_owns_qp(const rdmach_rc_conn_t *c)
{
    return (c->w->xrcd == NULL) && (c->qp != NULL);
}

void rdmach_rc_ep_close(rdmach_wire_t *wire, rdmach_wire_peer_t *peer)
{
    rdmach_rc_conn_t *c = (rdmach_rc_conn_t*)peer;

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
        (void)ucx_ext_verbs_qp_teardown(c->qp, 0);   /* destroyed by reap (conn_free) */
    }
    /* XRC: the INI QP serves other connections and stays; the fence still completes after
     * every WR of this connection (one QP completes in order) */
    c->failed = 1;
    rdmach_rc_deliver(c);
}

int rdmach_rc_activate(rdmach_wire_t *wire, uint32_t id, rdmach_rx_t *rx)
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

/* Takes back the rings of closed connections whose QP is quiet (the fence completed). */
unsigned rdmach_rc_reap(rdmach_wire_t *wire, int procs,
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
