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
 *
 * Files (each uses only those listed before it; udz_ibud_int.h holds what they share):
 * udz_ibud_dev.c (devices, addresses, address handles), udz_ibud_qp.c (UD QPs, the control
 * QP's receive and send), udz_ibud_reg.c (registration of destinations), udz_ibud_chan.c (the
 * data channels, through udz_postq), and this file (life cycle, and the wire table).
 */

#include "udz_ibud_int.h"

#include <arpa/inet.h>

/* ---- life cycle ---- */

static void udz_ibud_close(void *wire)
{
    udz_ibud_t *w = wire;
    udz_ibud_ah_t *a, *next;
    unsigned i;

    for (i = 0; i < UDZ_MAX_CHANNELS; ++i) {
        udz_ibud_chan_release(w, i);
        udz_ibud_chan_close(w, i);
    }
    for (i = 0; i < UDZ_IBUD_AH_BUCKETS; ++i) {
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

#define UDZ_IBUD_MIN(_a, _b) (((_a) < (_b)) ? (_a) : (_b))

static int udz_ibud_open(const char *dev, const udz_wire_params_t *params, void **wire_p, char *err,
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
    w->mtu       = UDZ_IBUD_MIN(udz_ibud_mtu_bytes(pattr.active_mtu), UDZ_IBUD_MAX_MTU);
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
    w->depth    = UDZ_IBUD_MIN(UDZ_POSTQ_MAX_DEPTH, cap_wr);
    w->sq_depth = UDZ_IBUD_MIN(UDZ_IBUD_SQ_DEPTH, UDZ_IBUD_MIN(cap_wr, cap_cqe));
    w->nrx      = (uint32_t)UDZ_IBUD_MIN(params->rx_buffer / w->mtu, 4096);
    w->nrx      = UDZ_IBUD_MIN(UDZ_IBUD_MIN(w->nrx < 64 ? 64 : w->nrx, cap_wr), cap_cqe);
    w->rx_stride  = (UDZ_IBUD_GRH + w->mtu + 63) & ~63u;
    w->bounce_len = w->mtu - UDZ_HDR_LEN;
    w->mem_len    = (size_t)w->nrx * w->rx_stride + (size_t)w->sq_depth * w->mtu +
                    (size_t)w->nchan * w->depth * (UDZ_IBUD_HDR_STRIDE + w->bounce_len);
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
    off       += (size_t)w->nchan * w->depth * UDZ_IBUD_HDR_STRIDE;
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
    w->qp = udz_ibud_qp_create(w, w->scq, w->rcq, w->sq_depth, w->nrx, &w->max_inline);
    if ((w->qp == NULL) || ((rc = udz_ibud_qp_ready(w, w->qp)) != 0)) {
        rc = (w->qp == NULL) ? -errno : rc;
        snprintf(err, errlen, "%s: the control UD QP: %s", dev, strerror(-rc));
        goto err;
    }
    for (i = 0; i < w->nchan; ++i) {
        rc = udz_ibud_chan_open(w, i);
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
    for (i = 0; i < w->nrx; i += UDZ_IBUD_BATCH) {
        uint32_t j, m = UDZ_IBUD_MIN(UDZ_IBUD_BATCH, w->nrx - i);
        for (j = 0; j < m; ++j) {
            idx[j] = i + j;
        }
        if (udz_ibud_rx_post(w, idx, (int)m) != 0) {
            rc = -EIO;
            snprintf(err, errlen, "%s: posting %u receives", dev, w->nrx);
            goto err;
        }
    }
    free(idx);
    idx = NULL;
    udz_postq_init(&w->pq, &udz_ibud_pq_ops, w, w->depth, UDZ_HDR_LEN, w->bounce_len, w->counters);
    udz_ibud_rcache_open(w, params->reg_cache);
    *wire_p = w;
    return 0;

err:
    free(idx);
    udz_ibud_close(w);
    return rc;
}

static void udz_ibud_query(void *wire, udz_wire_attr_t *attr)
{
    udz_ibud_t *w = wire;
    char gid[INET6_ADDRSTRLEN];

    /* the glue gives a transfer half of this as its window: half the posted receives of a
     * channel, as the core offers twice a window of slots (udz_zrx.c) */
    attr->rx_buffer = (size_t)w->depth * w->bounce_len;
    attr->loopback  = 0;
    snprintf(attr->desc, sizeof(attr->desc), "%s:%u gid %s qpn 0x%x, mtu %u, %u rx, inline %u%s",
             w->name, w->port, inet_ntop(AF_INET6, w->gid, gid, sizeof(gid)), w->qp->qp_num,
             w->mtu, w->nrx, w->max_inline, (w->rcache != NULL) ? "" : ", no rcache");
}

const udz_wire_ops_t udz_ibud_wire = {
    .name            = "ib_ud",
    .max_dgram       = UDZ_IBUD_MAX_MTU,
    .run_bytes       = UDZ_IBUD_MAX_MTU,
    .run_dgrams      = 1,
    .dev_mtu         = udz_ibud_dev_mtu,
    .query_devices   = udz_ibud_query_devices,
    .open            = udz_ibud_open,
    .close           = udz_ibud_close,
    .query           = udz_ibud_query,
    .dev_addr_len    = 16,
    .iface_addr_len  = 6,
    .dev_addr_pack   = udz_ibud_dev_addr_pack,
    .iface_addr_pack = udz_ibud_iface_addr_pack,
    .addr_unpack     = udz_ibud_addr_unpack,
    .is_reachable    = udz_ibud_is_reachable,
    .send            = udz_ibud_send,
    .recv            = udz_ibud_recv,
    .rx_idle         = NULL,
    .chan_id         = udz_ibud_chan_id,
    .chan_addr       = udz_ibud_chan_addr,
    .chan_recv       = udz_ibud_chan_recv,
    .chan_send       = udz_ibud_chan_send,
    .event_fd        = NULL,
    .posts_ahead     = 1,
    .chan_end        = udz_ibud_chan_end,
    .chan_quiet      = udz_ibud_chan_quiet,
};
