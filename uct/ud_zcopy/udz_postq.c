/*
 * ud_zcopy: zero-copy receive into receives posted ahead (see udz_postq.h for the design and
 * the two rules every path below keeps).
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

/* A new transfer: the next recv posts, and its first surprise ends in a short run. */
static void pq_transfer_begins(const udz_postq_t *q, udz_postq_chan_t *c)
{
    c->bounce  = 0;
    c->in_step = 0;
    c->need    = UDZ_POSTQ_RESYNC;
    c->zc_run  = 2 * q->depth;
    c->want    = 1;
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
    for (unsigned i = 0; i < UDZ_MAX_CHANNELS; ++i) {
        pq_transfer_begins(q, &q->chan[i]);
    }
}

/* Completions into the FIFO, in posting order. A datagram that landed in another chunk's
 * destination moves to its position's bounce buffer at once (the first rule). */
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
            if (e->ok && (e->imm != e->tag)) {
                if (!c->bounce) {
                    c->bounce  = 1; /* the stream is not what was predicted */
                    c->in_step = 0;
                    c->need    = (c->zc_run >= 2 * q->depth) ? UDZ_POSTQ_RESYNC :
                                 PQ_MIN(2 * c->need, UDZ_POSTQ_RESYNC_MAX);
                }
                if (e->dst != NULL) {
                    memcpy(q->ops->bounce(q->wire, chan, q->wc[i].pos % q->depth), e->dst,
                           PQ_MIN((e->len > q->hdr_len) ? e->len - q->hdr_len : 0,
                                  q->bounce_len));
                    e->dst = NULL;
                    PQ_COUNT(q, chan_misplaced);
                }
            }
        }
        while ((c->polled != c->head) && pq_ent(q, c, c->polled)->done) {
            c->polled++;
        }
    }
}

/* Whether a zero-copy receive for the datagram with this tag is still posted (the second
 * rule: its chunk waits). */
static int pq_zc_posted(const udz_postq_t *q, udz_postq_chan_t *c, uint32_t tag)
{
    const udz_postq_ent_t *e;
    uint32_t s;

    for (s = c->polled; s != c->head; ++s) {
        e = pq_ent(q, c, s);
        if ((e->dst != NULL) && (e->tag == tag)) {
            return 1;
        }
    }
    return 0;
}

/* The completed receive e reported in slot m, where its payload lies: its destination (in
 * place: the core finds it there) or its bounce buffer. */
static void pq_report(udz_postq_t *q, unsigned chan, const udz_postq_ent_t *e, uint32_t pos,
                      udz_rxmsg_t *m)
{
    size_t hl = PQ_MIN(e->len, q->hdr_len);
    size_t pl = (e->len > q->hdr_len) ? e->len - q->hdr_len : 0;

    memcpy(m->iov[0].iov_base, q->ops->hdr(q->wire, chan, pos), PQ_MIN(hl, m->iov[0].iov_len));
    m->iov[1].iov_base = (e->dst != NULL) ? e->dst : q->ops->bounce(q->wire, chan, pos);
    m->iov[1].iov_len  = (e->dst != NULL) ? pl : q->bounce_len;
    m->len     = e->len;
    m->trunc   = (hl > m->iov[0].iov_len) || (pl > m->iov[1].iov_len);
    m->unreach = 0;
    m->src     = e->src;
}

/* Posts receives for the slots the core predicts beyond what is posted: only while what is
 * posted is the prefix of its predictions (else they moved, and a surprise follows). */
static void pq_post(udz_postq_t *q, unsigned chan, udz_postq_chan_t *c, const udz_rxmsg_t *m,
                    int n)
{
    udz_postq_ent_t *e;
    uint32_t pending = c->head - c->tail, s;
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
            e->any = 1;
        }
        return;
    }
    /* the unreported receives, in order, must be the core's first predictions; a bounce
     * receive that predicts nothing (left from a transfer that had a surprise) takes any
     * datagram, so it stands for the prediction at its place */
    for (i = 0, s = c->tail; s != c->head; ++s, ++i) {
        e = pq_ent(q, c, s);
        if ((i >= n) || (m[i].kind == UDZ_SLOT_NONE)) {
            return;
        }
        if (e->any && !e->done) {
            e->any = 0;
            e->tag = m[i].tag;
        } else if (m[i].tag != e->tag) {
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
    uint32_t s;
    int j = 0;

    pq_poll(q, chan, c);
    for (s = c->tail; (j < n) && (s != c->polled); ++s) {
        e = pq_ent(q, c, s);
        if (e->reported) {
            continue;
        }
        if (!e->ok) {
            e->reported = 1;    /* a failed receive: nothing landed */
            continue;
        }
        if ((e->dst == NULL) && pq_zc_posted(q, c, e->imm)) {
            continue;           /* waits until its chunk's own receive completed */
        }
        if (c->bounce) {
            /* in step again when datagrams come as the core predicts them */
            c->in_step = ((msgs[j].kind != UDZ_SLOT_NONE) && (msgs[j].tag == e->imm)) ?
                         c->in_step + 1 : 0;
        } else {
            c->zc_run++;
        }
        pq_report(q, chan, e, s % q->depth, &msgs[j++]);
        e->reported = 1;
        if (e->dst != NULL) {
            PQ_COUNT(q, chan_zc_dgrams);
        } else {
            PQ_COUNT(q, chan_copy_dgrams);
        }
    }
    while ((c->tail != c->polled) && pq_ent(q, c, c->tail)->reported) {
        c->tail++;
    }
    if (c->bounce && (c->in_step >= c->need) && (c->tail == c->polled)) {
        /* The stream is back in step (a surprise is mostly a burst: late datagrams and their
         * resends, duplicates of one repair): zero-copy receives again, posted behind the
         * bounce receives still posted, which take the next predictions (pq_post). A
         * transfer that stays out of step falls back at its next surprise. */
        c->bounce  = 0;
        c->in_step = 0;
        c->zc_run  = 0;
        PQ_COUNT(q, chan_resyncs);
    }
    /* the tail stops at the oldest completion not reported (one that waits): while there
     * is one, this call's predictions were made without it, and only bounce receives go */
    if (c->bounce || (c->tail == c->polled)) {
        pq_post(q, chan, c, msgs + j, n - j);
    }
    c->seen = c->polled;
    /* what the next recv can do without a completion: report what did not fit this one's
     * slots, and post into the slots this one's reports took */
    c->want = (s != c->polled) || (j > 0);
    return ((j == 0) && c->error) ? -EIO : j;
}

/* Nothing completed since the last recv: it reported all it could (or knows it could not),
 * and posted all it could (what stops posting, a wait, a moved prediction, the end of the
 * chunks, changes only with a completion), so a recv now would do nothing. */
int udz_postq_quiet(udz_postq_t *q, unsigned chan)
{
    udz_postq_chan_t *c = &q->chan[chan];

    if (c->want || c->error) {
        return 0;
    }
    pq_poll(q, chan, c);
    return c->polled == c->seen;
}

void udz_postq_end(udz_postq_t *q, unsigned chan)
{
    udz_postq_chan_t *c = &q->chan[chan];
    udz_postq_ent_t *e;
    uint32_t s;
    int zc = 0;

    pq_poll(q, chan, c);
    for (s = c->polled; s != c->head; ++s) {
        e   = pq_ent(q, c, s);
        zc |= (e->dst != NULL);
        e->any = 1;     /* a bounce receive left posted serves the next transfer */
        e->tag = 0;
    }
    c->tail = c->polled;    /* what came and was not reported belonged to this transfer */
    pq_transfer_begins(q, c);
    if (zc) {
        /* a receive into the user's buffer is still posted (a cancelled transfer: a done
         * one has none, as no chunk is reported while its own receive is posted): nothing
         * may land there from now on, nor in the next transfer's receives */
        PQ_COUNT(q, chan_renews);
        if (q->ops->renew(q->wire, chan) != 0) {
            c->error = 1;
        }
        c->tail   = c->head;
        c->polled = c->head;
    }
}
