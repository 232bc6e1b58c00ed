/*
 * ud_zcopy InfiniBand UD wire: the data channels (a UD QP and CQ each), receiving through
 * udz_postq (udz_postq.h), and their wire calls.
 */

#include "udz_ibud_int.h"

/* ---- data channels: udz_postq's calls ---- */

static inline uint8_t *udz_ibud_chdr(const udz_ibud_t *w, unsigned chan, uint32_t pos)
{
    return w->chdr + ((size_t)chan * w->depth + pos) * UDZ_IBUD_HDR_STRIDE;
}

static void *udz_ibud_pq_hdr(void *wire, unsigned chan, uint32_t pos)
{
    return udz_ibud_chdr(wire, chan, pos) + UDZ_IBUD_GRH;
}

static void *udz_ibud_pq_bounce(void *wire, unsigned chan, uint32_t pos)
{
    udz_ibud_t *w = wire;

    return w->cbounce + ((size_t)chan * w->depth + pos) * w->bounce_len;
}

static int udz_ibud_pq_post(void *wire, unsigned chan, uint32_t pos, void *payload, size_t len)
{
    udz_ibud_t *w = wire;
    struct ibv_recv_wr wr, *bad;
    struct ibv_sge sge[2];

    sge[0].addr   = (uintptr_t)udz_ibud_chdr(w, chan, pos);
    sge[0].length = UDZ_IBUD_GRH + UDZ_HDR_LEN;
    sge[0].lkey   = w->mr->lkey;
    if (payload == NULL) {
        sge[1].addr   = (uintptr_t)udz_ibud_pq_bounce(w, chan, pos);
        sge[1].length = (uint32_t)w->bounce_len;
        sge[1].lkey   = w->mr->lkey;
    } else {
        if (udz_ibud_chan_lkey(w, chan, payload, len, &sge[1].lkey) != 0) {
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

static void udz_ibud_pq_wc(udz_ibud_t *w, unsigned chan, const struct ibv_wc *wc,
                           udz_postq_wc_t *out)
{
    out->pos = (uint32_t)wc->wr_id;
    out->ok  = (wc->status == IBV_WC_SUCCESS) && (wc->byte_len >= UDZ_IBUD_GRH);
    if (!out->ok && (w->counters != NULL)) {
        w->counters->ud_rx_errors++;    /* e.g. longer than the receive: dropped */
    }
    out->len = out->ok ? wc->byte_len - UDZ_IBUD_GRH : 0;
    out->imm = (wc->wc_flags & IBV_WC_WITH_IMM) ? wc->imm_data : 0;
    if (out->ok) {
        udz_ibud_src(w, udz_ibud_chdr(w, chan, out->pos), wc, &out->src);
    } else {
        memset(&out->src, 0, sizeof(out->src));
    }
}

static int udz_ibud_pq_poll(void *wire, unsigned chan, udz_postq_wc_t *wc, int n)
{
    udz_ibud_t *w = wire;
    udz_ibud_chan_t *c = &w->chan[chan];
    int j, k;

    k = ibv_poll_cq(c->cq, (n < UDZ_IBUD_BATCH) ? n : UDZ_IBUD_BATCH, w->wc);
    for (j = 0; j < k; ++j) {
        udz_ibud_pq_wc(w, chan, &w->wc[j], &wc[j]);
        c->posted--;
    }
    return (k < 0) ? -EIO : k;
}

/* A channel QP (and its CQ), ready to receive. */
int udz_ibud_chan_open(udz_ibud_t *w, unsigned chan)
{
    udz_ibud_chan_t *c = &w->chan[chan];

    c->posted = 0;
    c->cq     = ibv_create_cq(w->ctx, (int)w->depth, NULL, NULL, 0);
    c->qp     = (c->cq != NULL) ? udz_ibud_qp_create(w, w->scq, c->cq, 1, w->depth, NULL) : NULL;
    if (c->qp == NULL) {
        return (errno != 0) ? -errno : -ENOMEM;
    }
    return udz_ibud_qp_ready(w, c->qp);
}

void udz_ibud_chan_close(udz_ibud_t *w, unsigned chan)
{
    udz_ibud_chan_t *c = &w->chan[chan];

    if (c->qp != NULL) {
        /* destroyed at once, not through ucx_ext_verbs_qp_teardown's error state: that would
         * flush the QP's sends into the send CQ the other QPs share (w->scq), where the next
         * poll would take them for live ones; a destroyed QP's WRs leave no completions */
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
static int udz_ibud_pq_renew(void *wire, unsigned chan)
{
    udz_ibud_t *w = wire;

    udz_ibud_chan_close(w, chan);
    return udz_ibud_chan_open(w, chan);
}

const udz_postq_ops_t udz_ibud_pq_ops = {
    .post   = udz_ibud_pq_post,
    .poll   = udz_ibud_pq_poll,
    .renew  = udz_ibud_pq_renew,
    .hdr    = udz_ibud_pq_hdr,
    .bounce = udz_ibud_pq_bounce,
};

int udz_ibud_chan_recv(void *wire, unsigned chan, udz_rxmsg_t *msgs, int n)
{
    udz_ibud_t *w = wire;
    int i;

    for (i = 0; i < n; ++i) {
        if (msgs[i].kind == UDZ_SLOT_DEST) {
            udz_ibud_chan_hold(w, chan, &msgs[i].dest);
            break;
        }
    }
    return udz_postq_recv(&w->pq, chan, msgs, n);
}

void udz_ibud_chan_end(void *wire, unsigned chan)
{
    udz_ibud_t *w = wire;

    udz_postq_end(&w->pq, chan);    /* nothing posted into the destination any more */
    udz_ibud_chan_release(w, chan);
}

int udz_ibud_chan_quiet(void *wire, unsigned chan)
{
    return udz_postq_quiet(&((udz_ibud_t*)wire)->pq, chan);
}

uint32_t udz_ibud_chan_id(void *wire, unsigned chan)
{
    return ((udz_ibud_t*)wire)->chan[chan].qp->qp_num;
}

/* A channel is a QP, named by its number, which changes when the channel is renewed
 * (udz_postq.h), so the address cannot announce them (chans stay empty): a ZREQ's QP number
 * is taken at the requester's GID and LID, where the Q_Key lets only ud_zcopy's own QPs take
 * the data, and they drop what does not carry their cookie. */
int udz_ibud_chan_addr(void *wire, const udz_addr_t *ctrl, const udz_chans_t *chans,
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
