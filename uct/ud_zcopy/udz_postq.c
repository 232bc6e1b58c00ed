/*
 * ud_zcopy: zero-copy receive into receives posted ahead (see udz_postq.h for the design and
 * the invariant every path below keeps).
 */
#include "udz_postq.h"

#include <errno.h>
#include <string.h>

#define PQ_MIN(_a, _b) (((_a) < (_b)) ? (_a) : (_b))

#define PQ_COUNT(_q, _f) \
    do { \
        if ((_q)->counters != NULL) { \
            (_q)->counters->_f++; \
        } \
    } while (0)

static inline udz_postq_ent_t *pq_ent(const udz_postq_t *q, udz_postq_chan_t *c, uint32_t seq)
{
    return &c->ent[seq % q->depth];
}

void udz_postq_init(udz_postq_t *q, const udz_postq_ops_t *ops, void *wire, unsigned depth,
                    size_t hdr_len, size_t bounce_len, udz_wire_counters_t *counters)
{
    memset(q, 0, sizeof(*q));
    q->ops        = ops;
    q->wire       = wire;
    q->depth      = (depth == 0) ? 1 : PQ_MIN(depth, UDZ_POSTQ_MAX_DEPTH);
    q->hdr_len    = hdr_len;
    q->bounce_len = bounce_len;
    q->counters   = counters;
}

unsigned udz_postq_posted(const udz_postq_t *q, unsigned chan)
{
    return q->chan[chan].head - q->chan[chan].polled;
}

/* Completions into the FIFO (they come in posting order; a position is marked by what the
 * wire says, and the FIFO advances over every completed one). */
static void pq_poll(udz_postq_t *q, unsigned chan, udz_postq_chan_t *c)
{
    udz_postq_ent_t *e;
    int i, k;

    while (c->polled != c->head) {
        k = q->ops->poll(q->wire, chan, q->wc, (int)PQ_MIN(c->head - c->polled, q->depth));
        if (k <= 0) {
            break;
        }
        for (i = 0; i < k; ++i) {
            e = &c->ent[q->wc[i].pos % q->depth];
            e->done = 1;
            e->ok   = (uint8_t)!!q->wc[i].ok;
            e->len  = q->wc[i].len;
            e->imm  = q->wc[i].imm;
            e->src  = q->wc[i].src;
        }
        while ((c->polled != c->head) && pq_ent(q, c, c->polled)->done) {
            c->polled++;
        }
    }
}

/* Every posted receive of the channel completes; what landed in destinations moves to the
 * bounce buffers, and the channel receives through them until the transfer ends. */
static void pq_recall(udz_postq_t *q, unsigned chan, udz_postq_chan_t *c)
{
    udz_postq_ent_t *e;
    uint32_t s;

    PQ_COUNT(q, chan_recalls);
    if (q->ops->recall(q->wire, chan) != 0) {
        c->error = 1;   /* it cannot take receives again: nothing more is posted */
    }
    pq_poll(q, chan, c);
    for (s = c->polled; s != c->head; ++s) {
        e = pq_ent(q, c, s);    /* never returned: nothing landed (a wire in error) */
        e->done = 1;
        e->ok   = 0;
    }
    c->polled = c->head;
    for (s = c->tail; s != c->head; ++s) {
        e = pq_ent(q, c, s);
        if (e->ok && (e->dst != NULL)) {
            memcpy(q->ops->bounce(q->wire, chan, s % q->depth), e->dst,
                   PQ_MIN((e->len > q->hdr_len) ? e->len - q->hdr_len : 0, q->bounce_len));
        }
        e->dst = NULL;
    }
    c->bounce = 1;
}

/* Whether a zero-copy receive not reported yet (posted, or landed) has this destination. */
static int pq_zc_at(const udz_postq_t *q, udz_postq_chan_t *c, const void *dst)
{
    uint32_t s;

    for (s = c->tail; s != c->head; ++s) {
        if (pq_ent(q, c, s)->dst == dst) {
            return 1;
        }
    }
    return 0;
}

/* The completed receive e reported in slot m: header copied, payload copied from src or
 * already in place (src NULL). */
static void pq_report(udz_postq_t *q, unsigned chan, const udz_postq_ent_t *e, uint32_t pos,
                      udz_rxmsg_t *m, const void *src)
{
    size_t hl = PQ_MIN(e->len, q->hdr_len);
    size_t pl = (e->len > q->hdr_len) ? e->len - q->hdr_len : 0;

    memcpy(m->iov[0].iov_base, q->ops->hdr(q->wire, chan, pos), PQ_MIN(hl, m->iov[0].iov_len));
    if ((src != NULL) && (pl > 0)) {
        memcpy(m->iov[1].iov_base, src, PQ_MIN(pl, m->iov[1].iov_len));
    }
    m->len     = e->len;
    m->trunc   = (hl > m->iov[0].iov_len) || (pl > m->iov[1].iov_len);
    m->unreach = 0;
    m->src     = e->src;
}

/* Posts receives for the slots the core predicts beyond what is posted: only while what is
 * posted is the prefix of its predictions (else they moved: a surprise will recall). */
static void pq_post(udz_postq_t *q, unsigned chan, udz_postq_chan_t *c, const udz_rxmsg_t *m,
                    int n)
{
    udz_postq_ent_t *e;
    uint32_t pending = c->head - c->tail;
    void *dst;
    int i;

    if (c->error) {
        return;
    }
    if (c->bounce) {
        while (c->head - c->tail < q->depth) {
            if (q->ops->post(q->wire, chan, c->head % q->depth, NULL, q->bounce_len) != 0) {
                c->error = 1;
                return;
            }
            e = pq_ent(q, c, c->head++);
            memset(e, 0, sizeof(*e));
        }
        return;
    }
    for (i = 0; i < (int)pending; ++i) {
        if ((i >= n) || (m[i].kind == UDZ_SLOT_NONE) ||
            (m[i].tag != pq_ent(q, c, c->tail + (uint32_t)i)->tag)) {
            return;
        }
    }
    for (i = (int)pending; (i < n) && (c->head - c->tail < q->depth) &&
                           (m[i].kind != UDZ_SLOT_NONE); ++i) {
        /* a SCRATCH slot's datagram (the short last chunk) goes to a bounce buffer, and so
         * does one whose destination the wire cannot post into (not registered) */
        dst = (m[i].kind == UDZ_SLOT_DEST) ? m[i].iov[1].iov_base : NULL;
        if ((dst != NULL) &&
            (q->ops->post(q->wire, chan, c->head % q->depth, dst, m[i].iov[1].iov_len) != 0)) {
            dst = NULL;
        }
        if ((dst == NULL) &&
            (q->ops->post(q->wire, chan, c->head % q->depth, NULL, q->bounce_len) != 0)) {
            c->error = 1;
            return;
        }
        e = pq_ent(q, c, c->head++);
        memset(e, 0, sizeof(*e));
        e->dst = dst;
        e->tag = m[i].tag;
    }
}

int udz_postq_recv(udz_postq_t *q, unsigned chan, udz_rxmsg_t *msgs, int n)
{
    udz_postq_chan_t *c = &q->chan[chan];
    udz_postq_ent_t *e;
    udz_rxmsg_t *m;
    uint32_t pos;
    int j = 0;

    pq_poll(q, chan, c);
    while ((j < n) && (c->tail != c->polled)) {
        pos = c->tail % q->depth;
        e   = &c->ent[pos];
        m   = &msgs[j];
        if (!e->ok) {
            c->tail++;      /* flushed by a recall */
            continue;
        }
        if (!c->bounce && ((e->imm != e->tag) ||
                           ((e->dst != NULL) &&
                            ((m->kind != UDZ_SLOT_DEST) || (m->tag != e->tag) ||
                             (m->iov[1].iov_base != e->dst))) ||
                           ((e->dst == NULL) && (m->kind == UDZ_SLOT_DEST) &&
                            pq_zc_at(q, c, m->iov[1].iov_base)))) {
            /* a surprise: not the datagram predicted, or a report that would write where
             * a receive may still land */
            pq_recall(q, chan, c);
            continue;
        }
        if (e->dst != NULL) {
            pq_report(q, chan, e, pos, m, NULL);
            PQ_COUNT(q, chan_zc_dgrams);
        } else {
            pq_report(q, chan, e, pos, m, q->ops->bounce(q->wire, chan, pos));
            PQ_COUNT(q, chan_copy_dgrams);
        }
        c->tail++;
        ++j;
    }
    pq_post(q, chan, c, msgs + j, n - j);
    return (j == 0) && c->error ? -EIO : j;
}

void udz_postq_end(udz_postq_t *q, unsigned chan)
{
    udz_postq_chan_t *c = &q->chan[chan];

    if (c->polled != c->head) {
        pq_recall(q, chan, c);  /* nothing may land in the user's buffer from now on */
    }
    c->tail   = c->head;
    c->polled = c->head;
    c->bounce = 0;
}
