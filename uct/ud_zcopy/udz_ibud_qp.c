/*
 * ud_zcopy InfiniBand UD wire: UD QPs, and the control QP's receive and send (the control QP
 * sends everything, a data channel's chunks too).
 */

#include "udz_ibud_int.h"

/* ---- QPs ---- */

int udz_ibud_qp_ready(udz_ibud_t *w, struct ibv_qp *qp)
{
    struct ibv_qp_attr attr;

    memset(&attr, 0, sizeof(attr));
    attr.qp_state   = IBV_QPS_INIT;
    attr.pkey_index = 0;
    attr.port_num   = w->port;
    attr.qkey       = UDZ_IBUD_QKEY;
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

struct ibv_qp *udz_ibud_qp_create(udz_ibud_t *w, struct ibv_cq *scq, struct ibv_cq *rcq,
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

int udz_ibud_rx_post(udz_ibud_t *w, const uint32_t *idx, int n)
{
    struct ibv_recv_wr wr[UDZ_IBUD_BATCH], *bad;
    struct ibv_sge sge[UDZ_IBUD_BATCH];
    int i;

    for (i = 0; i < n; ++i) {
        sge[i].addr   = (uintptr_t)(w->rxbuf + (size_t)idx[i] * w->rx_stride);
        sge[i].length = UDZ_IBUD_GRH + w->mtu;
        sge[i].lkey   = w->mr->lkey;
        wr[i].wr_id   = idx[i];
        wr[i].sg_list = &sge[i];
        wr[i].num_sge = 1;
        wr[i].next    = (i + 1 < n) ? &wr[i + 1] : NULL;
    }
    return (n > 0) ? ibv_post_recv(w->qp, wr, &bad) : 0;
}

/* Copies a received datagram into the core's areas as recvmsg scatters. */
static void udz_ibud_scatter(udz_rxmsg_t *m, const uint8_t *data, size_t len)
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

int udz_ibud_recv(void *wire, udz_rxmsg_t *msgs, int n)
{
    udz_ibud_t *w = wire;
    uint32_t repost[UDZ_IBUD_BATCH];
    const uint8_t *buf;
    int i, k, j = 0;

    if (w->counters != NULL) {
        w->counters->ctl_recv_calls++;
    }
    k = ibv_poll_cq(w->rcq, (n < UDZ_IBUD_BATCH) ? n : UDZ_IBUD_BATCH, w->wc);
    if (k <= 0) {
        return (k < 0) ? -EIO : 0;
    }
    for (i = 0; i < k; ++i) {
        repost[i] = (uint32_t)w->wc[i].wr_id;
        if ((w->wc[i].status != IBV_WC_SUCCESS) || (w->wc[i].byte_len < UDZ_IBUD_GRH)) {
            if (w->counters != NULL) {
                w->counters->ud_rx_errors++;    /* a failed receive carries nothing */
            }
            continue;
        }
        buf = w->rxbuf + (size_t)repost[i] * w->rx_stride;
        udz_ibud_scatter(&msgs[j], buf + UDZ_IBUD_GRH, w->wc[i].byte_len - UDZ_IBUD_GRH);
        udz_ibud_src(w, buf, &w->wc[i], &msgs[j].src);
        ++j;
    }
    (void)udz_ibud_rx_post(w, repost, k);
    return j;
}

/* ---- send: the control QP sends everything (a ZDATA's sender is the owner's control
 * address, which the requester checks) ---- */

static void udz_ibud_reap(udz_ibud_t *w)
{
    uint64_t done = w->sq_done;
    int i, k;

    while ((k = ibv_poll_cq(w->scq, UDZ_IBUD_BATCH, w->wc)) > 0) {
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
static ucs_rcache_region_t *udz_ibud_src_reg(udz_ibud_t *w, const struct iovec *region)
{
    ucs_rcache_region_t *r;

    if ((w->rcache == NULL) || (region->iov_len == 0) ||
        (ucx_ext_rcache_get(w->rcache, region->iov_base, region->iov_len, UCS_PGT_ADDR_ALIGN,
                            PROT_READ, NULL, &r) != UCS_OK)) {
        return NULL;
    }
    return r;
}

static int udz_ibud_post_sends(udz_ibud_t *w, const udz_addr_t *dst, const udz_txmsg_t *msgs,
                               int n, int imm)
{
    struct ibv_send_wr wr[UDZ_IBUD_BATCH], *bad;
    struct ibv_sge sge[UDZ_IBUD_BATCH][1 + UDZ_MAX_IOV];
    ucs_rcache_region_t *src;
    udz_ibud_ah_t *ah;
    size_t len, off;
    uint8_t *buf;
    uint64_t seq;
    int i, k, m = 0, zc = 0;

    ah = udz_ibud_ah(w, dst);
    if (ah == NULL) {
        return -EHOSTUNREACH;
    }
    if (w->sq_head - w->sq_done + (uint64_t)n > w->sq_depth) {
        udz_ibud_reap(w);
    }
    if (n > UDZ_IBUD_BATCH) {
        n = UDZ_IBUD_BATCH;
    }
    /* a data channel's chunks go from where they lie (the owner's registered region) */
    src = (imm && (n > 0) && (msgs[0].iovcnt == 2) && (msgs[0].iov[1].iov_len > w->max_inline)) ?
          udz_ibud_src_reg(w, &msgs[0].region) : NULL;
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
        wr[m].wr.ud.remote_qpn  = udz_ibud_addr_qpn(dst);
        wr[m].wr.ud.remote_qkey = UDZ_IBUD_QKEY;
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
            sge[m][1].lkey   = ((udz_ibud_rcache_region_t*)src)->mr->lkey;
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
        if ((seq % UDZ_IBUD_SIGNAL_EVERY == UDZ_IBUD_SIGNAL_EVERY - 1) ||
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

int udz_ibud_send(void *wire, const udz_addr_t *dst, const udz_txmsg_t *msgs, int n)
{
    return udz_ibud_post_sends(wire, dst, msgs, n, 0);
}

int udz_ibud_chan_send(void *wire, const udz_addr_t *dst, const udz_txmsg_t *msgs, int n)
{
    return udz_ibud_post_sends(wire, dst, msgs, n, 1);
}
