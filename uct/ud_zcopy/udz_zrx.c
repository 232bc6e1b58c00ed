/*
 * ud_zcopy core, zero-copy receive (the requester's side of a get; Koop, Sur, Panda: zero-copy
 * MPI over InfiniBand UD). The requester takes a data channel from its pool and sends a ZREQ on
 * the reliable stream; the owner streams the region to that channel (udz_ztx.c). Each datagram
 * is received with its header in a header buffer and its payload straight in the destination,
 * at the chunk it is predicted to carry; one that arrives for another chunk is moved (a copy).
 * Completion is by counting chunks. ZACKs carry the cumulative chunk and a selective ack; holes
 * that stay open are named again after the repair gate, a lost tail after the stuck timer.
 * A reliable ZFIN ends the transfer before the completion lets the user send anything else.
 */
#include "udz_core_int.h"

static void zrx_send_zack(udz_core_t *core, udz_zrx_t *z, uint8_t flags)
{
    udz_zack_t a;
    uint32_t i, span, words;

    /* the selective ack reaches the highest chunk received, at most 64 * UDZ_ZACK_WORDS */
    span  = (z->top > z->cum + 1) ? z->top - z->cum - 1 : 0;
    if (span > 64 * UDZ_ZACK_WORDS) {
        span = 64 * UDZ_ZACK_WORDS;
    }
    words = (span + 63) / 64;
    if (words == 0) {
        words = 1;
    }
    a.xfer_id = z->xfer_id;
    a.cum     = z->cum;
    memset(a.sack, 0, sizeof(a.sack));
    for (i = 0; i < span; ++i) {
        if (bit_get(z->bitmap, z->cum + 1 + i)) {
            a.sack[i / 64] |= 1ull << (i % 64);
        }
    }
    udz_stream_send_zctl(core, z->peer, UDZ_T_ZACK, flags, z->xfer_id, &a, UDZ_ZACK_LEN(words));
    if (flags & UDZ_F_STUCK) {
        core->cnt->zack_stuck++;
    }
    z->zack_cum  = z->cum;
    z->since_ack = 0;
    z->gap       = 0;
    z->hole      = 0;
    z->zack_ns   = core->now;
}

static void zrx_finish(udz_core_t *core, udz_zrx_t *z, int status)
{
    void *ctx = z->ctx;
    udz_peer_t *p = z->peer;
    udz_skb_t *skb = z->fin;
    udz_zfin_t *fin;

    /* ZFIN on the reliable stream, beyond the window if need be (its buffer was reserved),
     * before the completion lets the user send anything else */
    z->fin = NULL;
    if (p->failed) {
        skb_release(core, skb, 0);
    } else {
        fin = (udz_zfin_t*)((udz_hdr_t*)skb->data + 1);
        fin->xfer_id   = z->xfer_id;
        core->cur      = skb;
        core->cur_peer = p;
        udz_send_commit(core, UDZ_T_ZFIN, 0, sizeof(*fin));
    }
    z->peer = NULL;
    z->ctx  = NULL;
    core->zrx_busy--;
    if (core->wops->chan_end != NULL) {
        /* before the user has the buffer back: no receive posted into it stays */
        core->wops->chan_end(core->wire, (unsigned)(z - core->zrx));
    }
    core->uops->get_done(core->user, ctx, status);
    if (core->starved) {
        core->starved = 0;
        core->uops->resources(core->user);
    }
}

/* Receive slots one poll of a transfer with this chunk offers: rx_batch, or more so that one
 * coalesced run of the wire (its run_dgrams and run_bytes) always fits whole; a wire that
 * posts receives only into slots offered gets twice a window. */
static unsigned zrx_batch_for(const udz_core_t *core, size_t chunk)
{
    const udz_config_t *cfg = &core->cfg;
    size_t b = (core->wops->run_bytes + chunk + UDZ_HDR_LEN - 1) / (chunk + UDZ_HDR_LEN);

    if (b > core->wops->run_dgrams) {
        b = core->wops->run_dgrams;
    }
    if (b > UDZ_BATCH_MAX) {
        b = UDZ_BATCH_MAX;
    }
    if (b < cfg->rx_batch) {
        b = cfg->rx_batch;
    }
    if (core->wops->posts_ahead) {
        /* what one call's reports consume is offered again beyond them before its ZACK lets
         * the owner send on */
        size_t w2 = 2 * ((cfg->zc_window + chunk - 1) / chunk);
        if (b < w2) {
            b = (w2 < UDZ_BATCH_MAX) ? w2 : UDZ_BATCH_MAX;
        }
    }
    return (unsigned)b;
}

/* The chunk of our gets from this peer: chunk_size, or more where the route to the peer
 * carries larger datagrams than the device (a peer on this host, through loopback). Asked of
 * the wire once per peer. */
static uint32_t zrx_peer_chunk(udz_core_t *core, udz_peer_t *peer)
{
    size_t mtu, chunk = core->cfg.chunk_size;

    if (peer->zchunk != 0) {
        return peer->zchunk;
    }
    if (core->cfg.chunk_max > chunk) {
        mtu = core->wops->path_mtu(core->wire, &peer->addr);
        if (mtu > UDZ_HDR_LEN + chunk) {
            chunk = mtu - UDZ_HDR_LEN;
            if (chunk > core->cfg.chunk_max) {
                chunk = core->cfg.chunk_max;
            }
        }
    }
    peer->zchunk = (uint32_t)chunk;
    return peer->zchunk;
}

int udz_get(udz_core_t *core, udz_peer_t *peer, void *buf, size_t len, uint64_t raddr,
            const uint8_t *rkey, void *ctx)
{
    uint32_t chunk;
    udz_zreq_t *req;
    udz_zrx_t *z = NULL;
    udz_skb_t *fin;
    unsigned i;
    int err;

    if (peer->failed) {
        return -EPIPE;
    }
    if ((len == 0) || (len > core->cfg.zc_max)) {
        return -EMSGSIZE;
    }
    for (i = 0; i < core->cfg.channels; ++i) {
        if (core->zrx[i].peer == NULL) {
            z = &core->zrx[i];
            break;
        }
    }
    if (z == NULL) {
        core->cnt->chan_busy++;
        core->starved = 1;
        return -EAGAIN;
    }
    chunk = zrx_peer_chunk(core, peer);
    fin = udz_skb_get(core);
    if (fin == NULL) {
        core->starved = 1;
        return -EAGAIN;
    }
    req = udz_send_begin(core, peer, &err);
    if (req == NULL) {
        fin->next = core->skb_free;
        core->skb_free = fin;
        return err;
    }
    fin->iovcnt  = 0;
    fin->has_ctx = 0;
    z->fin       = fin;
    if (++core->next_xfer == 0) {
        core->next_xfer = 1;
    }
    z->peer       = peer;
    z->ctx        = ctx;
    z->buf        = buf;
    z->len        = len;
    z->xfer_id    = core->next_xfer;
    z->chunk      = chunk;
    z->batch      = zrx_batch_for(core, chunk);
    z->nchunks    = (uint32_t)((len + chunk - 1) / chunk);
    z->received   = 0;
    z->cum        = 0;
    z->top        = 0;
    z->zack_cum   = 0;
    z->pred       = 0;
    z->seq        = ++peer->get_seq;
    z->since_ack  = 0;
    z->backoff    = 0;
    z->gap        = 0;
    z->hole       = 0;
    z->issued     = 0;
    z->last_rx_ns   = core->now;
    z->last_rx_live = core->live;
    z->zack_ns      = core->now;
    memset(z->bitmap, 0, ((z->nchunks + 63) / 64) * sizeof(uint64_t));
    core->zrx_busy++;

    req->xfer_id = z->xfer_id;
    req->chan_id = core->wops->chan_id(core->wire, (unsigned)(z - core->zrx));
    req->addr    = raddr;
    req->len     = len;
    req->chunk   = chunk;
    req->window  = (uint32_t)(core->cfg.zc_window / chunk);
    if (req->window == 0) {
        req->window = 1;
    }
    memcpy(req->rkey, rkey, UDZ_RKEY_LEN);
    if (core->wops->posts_ahead) {
        /* the first chunks' receives are posted before the owner is asked to send them
         * (Koop, Sur, Panda: the receiver posts, then sends its clear-to-send); not issued
         * yet, so this poll only posts: what it finds waiting is dropped as stale */
        (void)udz_zrx_poll(core, z);
    }
    err = udz_send_commit(core, UDZ_T_ZREQ, 0, sizeof(*req));
    if (err == 0) {
        z->issued = 1;
    } else {
        skb_release(core, z->fin, 0);
        z->fin  = NULL;
        z->peer = NULL;
        core->zrx_busy--;
        return err;
    }
    if (chunk > core->cfg.chunk_size) {
        core->cnt->zpath_gets++;
    }
    peer_activate(core, peer);
    return 0;
}

static uint32_t zrx_next_missing(const udz_zrx_t *z, uint32_t from)
{
    uint32_t i;

    for (i = from; i < z->nchunks; ++i) {
        if (!bit_get(z->bitmap, i)) {
            return i;
        }
    }
    for (i = z->cum; i < from && i < z->nchunks; ++i) {
        if (!bit_get(z->bitmap, i)) {
            return i;
        }
    }
    return z->nchunks;
}

/* The next missing chunk at or after from, without wrapping (nchunks: none). */
static uint32_t zrx_next_missing_from(const udz_zrx_t *z, uint32_t from)
{
    uint32_t i;

    for (i = from; i < z->nchunks; ++i) {
        if (!bit_get(z->bitmap, i)) {
            return i;
        }
    }
    return z->nchunks;
}

static void zrx_mark(udz_core_t *core, udz_zrx_t *z, uint32_t idx)
{
    bit_set(z->bitmap, idx);
    z->received++;
    z->since_ack++;
    if (idx != z->cum) {
        z->gap = 1;     /* something below is missing (or arrived late) */
    }
    if (idx >= z->top) {
        if (idx > z->top) {
            z->hole = 1;    /* chunks top..idx-1 were skipped: lost, on an ordered path */
        }
        z->top = idx + 1;
    }
    while ((z->cum < z->nchunks) && bit_get(z->bitmap, z->cum)) {
        z->cum++;
    }
    core->cnt->rx_zchunks++;
}

/* Receive slot k: header k, then a full chunk at dst (chunk tag's destination, which the
 * wire may keep a receive posted in), or in scratch slot k when dst is NULL. */
/* A data datagram for this iface: whole header, our cookie; else counted as corrupt. */
static inline int zdata_ok(udz_core_t *core, const udz_rxmsg_t *m, const udz_hdr_t *h)
{
    if ((m->len < UDZ_HDR_LEN) || (h->magic != UDZ_MAGIC) || (h->version != UDZ_VERSION) ||
        (h->type != UDZ_T_ZDATA) || (h->dst_cookie != core->cookie)) {
        core->cnt->rx_corrupt++;
        return 0;
    }
    return 1;
}

/* A late datagram of a finished transfer (or of none): counted, its sender told to stop. */
static void zdata_stale(udz_core_t *core, const udz_rxmsg_t *m, const udz_hdr_t *h)
{
    udz_peer_t *o = peer_lookup(core, &m->src);

    core->cnt->rx_zstale++;
    if ((o != NULL) && (o->cookie == h->src_cookie)) {
        udz_stream_send_zctl(core, o, UDZ_T_ZDONE, 0, h->psn, NULL, 0);
    }
}

static void zrx_slot(udz_core_t *core, const udz_zrx_t *z, unsigned k, uint8_t *dst,
                     uint32_t tag)
{
    size_t chunk = z->chunk;
    udz_rxmsg_t *m = &core->zmsgs[k];

    m->iov[0].iov_base = &core->zhdr[k];
    m->iov[0].iov_len  = UDZ_HDR_LEN;
    m->iov[1].iov_base = (dst != NULL) ? dst : core->zscratch + (size_t)k * chunk;
    m->iov[1].iov_len  = chunk;
    m->tag             = tag;
    m->kind            = (dst != NULL) ? UDZ_SLOT_DEST : UDZ_SLOT_SCRATCH;
    m->dest.iov_base   = z->buf;
    m->dest.iov_len    = z->len;
}

unsigned udz_zrx_poll(udz_core_t *core, udz_zrx_t *z)
{
    uint32_t chunk = z->chunk;
    unsigned batch = z->batch, k = 0, j, handled = 0;
    uint32_t slot[UDZ_BATCH_MAX], idx, clen, p, next_pred = z->pred;
    udz_rxmsg_t *m = core->zmsgs;
    udz_hdr_t *h;
    int n, misplaced = 0, dup_old = 0;

    if ((core->wops->chan_quiet != NULL) &&
        core->wops->chan_quiet(core->wire, (unsigned)(z - core->zrx))) {
        return 0;   /* nothing came: no prediction needed */
    }
    /* Predict where the next datagrams go: the next missing chunks from pred on, in order.
     * Every slot takes a full chunk: the short last chunk is received into scratch and copied,
     * so that a full datagram arriving there (after a loss) is never cut. */
    for (p = zrx_next_missing(z, z->pred); (k < batch) && (p < z->nchunks);
         p = zrx_next_missing_from(z, p + 1)) {
        slot[k] = p;
        zrx_slot(core, z, k, (chunk_len(z->len, chunk, p) == chunk) ?
                          z->buf + (size_t)p * chunk : NULL, zdata_tag(z->xfer_id, p));
        ++k;
    }
    if (k == 0) {
        return 0;
    }
    /* Fewer chunks missing than slots: the rest go to scratch (predicting nothing), so the
     * receive area never shrinks below one coalesced run. Otherwise duplicates at the head of
     * a run could push the chunks still missing out of a coalesced receive (truncated, lost). */
    for (; k < batch; ++k) {
        slot[k] = UINT32_MAX;
        zrx_slot(core, z, k, NULL, 0);
        core->zmsgs[k].kind = UDZ_SLOT_NONE;
    }
    n = core->wops->chan_recv(core->wire, (unsigned)(z - core->zrx), m, (int)k);
    if (n <= 0) {
        return 0;
    }
    if (__builtin_expect(!z->issued, 0)) {
        /* udz_get posting the first receives before its ZREQ goes: no datagram of this
         * transfer can exist yet, so what waited in the channel (in a bounce receive an
         * earlier transfer left posted) is stale or forged. Taking it could finish the
         * transfer inside udz_get, whose ZREQ holds core->cur (the ZFIN would take it and
         * the ZREQ's commit find NULL), so nothing is marked, finished or acked. No ZDONE
         * with the id the ZREQ is about to carry: it could overtake and end that transfer. */
        for (j = 0; j < (unsigned)n; ++j) {
            h = &core->zhdr[j];
            if (!zdata_ok(core, &m[j], h)) {
                continue;
            }
            if (h->psn == z->xfer_id) {
                core->cnt->rx_zstale++;
            } else {
                zdata_stale(core, &m[j], h);
            }
        }
        return (unsigned)n;
    }
    /* pass 1: datagrams that landed where predicted are done; misplaced ones are saved */
    for (j = 0; j < (unsigned)n; ++j) {
        h = &core->zhdr[j];
        core->zplace[j] = -1;
        if (!zdata_ok(core, &m[j], h)) {
            continue;
        }
        if ((h->psn != z->xfer_id) || memcmp(&m[j].src, &z->peer->addr, sizeof(udz_addr_t)) ||
            (h->src_cookie != z->peer->cookie)) {
            zdata_stale(core, &m[j], h);
            continue;
        }
        idx = h->ack;
        if (idx >= z->nchunks) {
            core->cnt->rx_corrupt++;
            continue;
        }
        if (m[j].trunc) {
            /* cut by our receive, not by the peer: copies of the short last chunk that came
             * coalesced into one run (a repair beside the original) do not fit one slot pair
             * each, and the wire reports the rest of such a run as one cut piece whose header
             * is the next copy's. Not corrupt: counted apart (rx_zcut); a chunk we still lack
             * comes again by repair. */
            core->cnt->rx_zcut++;
            continue;
        }
        clen = chunk_len(z->len, chunk, idx);
        if ((h->len != clen) || (m[j].len != UDZ_HDR_LEN + clen)) {
            core->cnt->rx_corrupt++;
            continue;
        }
        z->last_rx_ns   = core->now;
        z->last_rx_live = core->live;
        z->backoff      = 0;
        next_pred     = idx + 1;
        if (bit_get(z->bitmap, idx)) {
            core->cnt->rx_dup++;
            /* a chunk below cum again: the owner's probe or repair, so it has not heard our
             * last ZACK. Its probes keep this channel from looking silent, so our stuck timer
             * never fires: only a ZACK now stops the two waiting on each other until the
             * owner drops the transfer (peer_timeout) */
            dup_old |= (idx < z->cum);
            continue;
        }
        if (idx != slot[j]) {
            /* saved before pass 2 writes anything (its slot may be another one's place) */
            memmove(core->zscratch + (size_t)j * chunk, m[j].iov[1].iov_base, clen);
            core->zplace[j] = (int)idx;
            misplaced = 1;
            continue;
        }
        if (m[j].iov[1].iov_base != z->buf + (size_t)idx * chunk) {
            memcpy(z->buf + (size_t)idx * chunk, m[j].iov[1].iov_base, clen);   /* last chunk */
            core->cnt->rx_copy_bytes += clen;
        } else {
            core->cnt->rx_zcopy_bytes += clen;
        }
        zrx_mark(core, z, idx);
        handled++;
    }
    /* pass 2: move the misplaced ones (a copy; rare: loss or reordering) */
    for (j = 0; misplaced && (j < (unsigned)n); ++j) {
        if (core->zplace[j] < 0) {
            continue;
        }
        idx = (uint32_t)core->zplace[j];
        if (bit_get(z->bitmap, idx)) {
            core->cnt->rx_dup++;
            continue;
        }
        clen = chunk_len(z->len, chunk, idx);
        memcpy(z->buf + (size_t)idx * chunk, core->zscratch + (size_t)j * chunk, clen);
        zrx_mark(core, z, idx);
        core->cnt->rx_copy_bytes += clen;
        handled++;
    }
    /* the next datagram most likely follows the last one that came */
    z->pred = (next_pred < z->nchunks) ? next_pred : 0;
    if (z->received == z->nchunks) {
        zrx_finish(core, z, 0);
    } else if ((z->since_ack * 4 >= core->cfg.zc_window / chunk) || z->hole ||
               (z->gap && (core->now - z->zack_ns >= core->cfg.rto_ns / 8)) ||
               ((z->cum != z->zack_cum) && (z->cum < z->top)) ||
               (dup_old && (core->now - z->zack_ns >= repair_gate(core, z->peer)))) {
        /* At most one ZACK per receive batch, and none while nothing is missing:
         * - a new hole opened in this batch: the owner repairs it a round trip later
         *   instead of a stuck timer (an RTO) later;
         * - a repair filled the lowest hole and others lie above: cum moved, and holes
         *   more than 1024 chunks up become visible;
         * - otherwise flow control (a quarter of the window) and late arrivals. */
        zrx_send_zack(core, z, 0);
    }
    return handled + (unsigned)n;
}

/* The owner refused the ZREQ. */
void udz_zrx_on_zerr(udz_core_t *core, udz_peer_t *p, const udz_zerr_t *e)
{
    udz_zrx_t *z;
    unsigned i;

    for (i = 0; i < core->cfg.channels; ++i) {
        z = &core->zrx[i];
        if ((z->peer == p) && (z->xfer_id == e->xfer_id)) {
            zrx_finish(core, z, e->status < 0 ? e->status : -EACCES);
            break;
        }
    }
}

int udz_zrx_flushed(const udz_core_t *core, const udz_peer_t *peer, uint32_t gseq)
{
    unsigned i;

    for (i = 0; i < core->cfg.channels; ++i) {
        if ((core->zrx[i].peer == peer) && seq_le(core->zrx[i].seq, gseq)) {
            return 0;
        }
    }
    return 1;
}

void udz_peer_cancel(udz_core_t *core, udz_peer_t *peer, int status)
{
    unsigned i;

    for (i = 0; i < core->cfg.channels; ++i) {
        if (core->zrx[i].peer == peer) {
            zrx_finish(core, &core->zrx[i], status);
        }
    }
}

void udz_zrx_peer_failed(udz_core_t *core, udz_peer_t *p)
{
    udz_peer_cancel(core, p, -ECONNRESET);
}

/* Whether no data came for span from the owner of z's transfer, on any of its channels. An
 * owner serves its transfers in turn from one send queue: a channel's pause while the owner's
 * other transfers arrive is its pace, not a loss (resending then brings duplicates, which
 * cost a receiver with posted receives a run of copies). A tail lost while others flow is
 * found by the owner's probe (udz_ztx_timers). The other channels are looked at only once this
 * one is silent that long. */
static int zrx_owner_silent(const udz_core_t *core, const udz_zrx_t *z, uint64_t span)
{
    unsigned i;

    if (core->now - z->last_rx_ns < span) {
        return 0;
    }
    for (i = 0; (core->zrx_busy > 1) && (i < core->cfg.channels); ++i) {
        if ((core->zrx[i].peer == z->peer) && (core->now - core->zrx[i].last_rx_ns < span)) {
            return 0;
        }
    }
    return 1;
}

/* Per busy channel: the requester gives up after peer_timeout without data, names known holes
 * again after the repair gate, and asks for a lost tail after an RTO (the stuck timer), both
 * while nothing comes from the owner at all. */
void udz_zrx_timers(udz_core_t *core)
{
    udz_peer_t *p;
    udz_zrx_t *z;
    uint64_t now = core->now, gate;
    unsigned i;

    for (i = 0; i < core->cfg.channels; ++i) {
        z = &core->zrx[i];
        if (z->peer == NULL) {
            continue;
        }
        if (live_since(core, z->last_rx_live) >= core->cfg.peer_timeout_ns) {
            p = z->peer;
            zrx_finish(core, z, -ETIMEDOUT);
            udz_peer_fail(core, p);
        } else if ((z->cum < z->top) &&
                   (now - z->zack_ns >= ((gate = repair_gate(core, z->peer)) <<
                                         (z->backoff < 8 ? z->backoff : 8))) &&
                   zrx_owner_silent(core, z, gate)) {
            /* holes are known and their repairs did not come (lost too): name them again
             * after the repair gate (srtt + 4 rttvar), not an RTO, backing off while nothing
             * comes. (With no hole known, a pause in arrivals is more often the owner's pace
             * than a lost tail: that case waits for the stuck timer below, measured to cost
             * less than resending on every pause.)
             * STUCK: the owner resends them without its own gate (it may have no round-trip
             * sample of us); this pacing is the gate (the owner takes none faster:
             * udz_ztx.c ztx_stuck_due). */
            if (z->backoff < UDZ_BACKOFF_MAX) {
                z->backoff++;
            }
            zrx_send_zack(core, z, UDZ_F_STUCK);
        } else if ((now - z->zack_ns >= rto(core, z->peer, z->backoff)) &&
                   zrx_owner_silent(core, z, rto(core, z->peer, z->backoff))) {
            if (z->backoff < UDZ_BACKOFF_MAX) {
                z->backoff++;
            }
            zrx_send_zack(core, z, UDZ_F_STUCK);
        }
    }
}

/* Datagrams on a channel no transfer uses: a late duplicate of a finished transfer, or one
 * anyone sent there. Nothing reads such a channel otherwise, and what waits in it keeps the
 * wire's event fd readable: UCX's async thread and a worker that waits on the fd would spin
 * (SECURITY.md). Taken into scratch and dropped, counted as zrx_poll counts them, the sender
 * of a stale one told to stop; at most 4 batches per channel and call. A wire that posts its
 * receives ahead keeps nothing on an idle channel. Returns the datagrams dropped. */
unsigned udz_zrx_drain_idle(udz_core_t *core)
{
    size_t chunk = core->cfg.chunk_max;
    unsigned k   = zrx_batch_for(core, chunk), i, j, round, dropped = 0;
    udz_rxmsg_t *m = core->zmsgs;
    int n;

    if (core->wops->posts_ahead) {
        return 0;
    }
    for (i = 0; i < core->cfg.channels; ++i) {
        if (core->zrx[i].peer != NULL) {
            continue;   /* its transfer reads it */
        }
        for (round = 0; round < 4; ++round) {
            for (j = 0; j < k; ++j) {
                m[j].iov[0].iov_base = &core->zhdr[j];
                m[j].iov[0].iov_len  = UDZ_HDR_LEN;
                m[j].iov[1].iov_base = core->zscratch + (size_t)j * chunk;
                m[j].iov[1].iov_len  = chunk;
                m[j].tag             = 0;
                m[j].kind            = UDZ_SLOT_SCRATCH;
                m[j].dest.iov_base   = NULL;
                m[j].dest.iov_len    = 0;
            }
            n = core->wops->chan_recv(core->wire, i, m, (int)k);
            if (n <= 0) {
                break;
            }
            for (j = 0; j < (unsigned)n; ++j) {
                if (zdata_ok(core, &m[j], &core->zhdr[j])) {
                    zdata_stale(core, &m[j], &core->zhdr[j]);
                }
            }
            dropped += (unsigned)n;
        }
    }
    return dropped;
}

int udz_zrx_init(udz_core_t *core)
{
    const udz_config_t *cfg = &core->cfg;
    size_t nwords, scratch;
    unsigned i;

    /* the smallest chunk takes the most slots; the scratch fits a poll's worth of either */
    core->zbatch       = zrx_batch_for(core, cfg->chunk_size);
    scratch            = (size_t)zrx_batch_for(core, cfg->chunk_max) * cfg->chunk_max;
    if (scratch < (size_t)core->zbatch * cfg->chunk_size) {
        scratch = (size_t)core->zbatch * cfg->chunk_size;
    }
    nwords             = (cfg->zc_max / cfg->chunk_size + 1 + 63) / 64;
    core->bitmap_words = (uint32_t)nwords;
    core->zscratch     = malloc(scratch);
    core->zhdr         = calloc(core->zbatch, sizeof(*core->zhdr));
    core->zmsgs        = calloc(core->zbatch, sizeof(*core->zmsgs));
    core->zplace       = calloc(core->zbatch, sizeof(*core->zplace));
    if ((core->zscratch == NULL) || (core->zhdr == NULL) || (core->zmsgs == NULL) ||
        (core->zplace == NULL)) {
        return -ENOMEM;
    }
    for (i = 0; i < cfg->channels; ++i) {
        core->zrx[i].bitmap = calloc(nwords, sizeof(uint64_t));
        if (core->zrx[i].bitmap == NULL) {
            return -ENOMEM;
        }
    }
    return 0;
}

void udz_zrx_cleanup(udz_core_t *core)
{
    unsigned i;

    for (i = 0; i < UDZ_MAX_CHANNELS; ++i) {
        free(core->zrx[i].bitmap);
    }
    free(core->zscratch);
    free(core->zhdr);
    free(core->zmsgs);
    free(core->zplace);
}
