/*
 * ud_zcopy core, zero-copy send (the owner's side of a get). A ZREQ names a region, its rkey,
 * the chunk size and window and the requester's data channel; the owner checks the rkey and
 * streams the region as ZDATA datagrams straight from its memory (iovecs, no staging copy) in
 * batches the wire may send as one, up to the window above the acked chunks.
 * ZACKs move the window and name holes, which are resent at most once per repair gate; a
 * STUCK ZACK (taken no faster than an honest requester sends them), or no ZACK for an RTO (a
 * probe), brings back what the requester lacks. A refused ZREQ is answered with ZERR (again
 * on every ZACK); ZDONE or ZFIN ends a transfer.
 * A transfer holds its registration (mem_hold): deregistering the region revokes it, and the
 * owner stops before its next send (ztx_send) and answers ZERR from then on.
 */
#include "udz_core_int.h"

static int ztx_blocked(udz_core_t *core, udz_ztx_t *t);

/* The transfer lets go of its registration (the md unlinks its hold, if not done already by
 * a deregistration). */
static void ztx_unhold(udz_core_t *core, udz_ztx_t *t)
{
    if (t->held) {
        t->held = 0;
        core->uops->mem_unhold(core->user, &t->hold);
    }
}

/* Unlinks t from the served list and from its peer's, and keeps it for the next ZREQ. */
static void ztx_free(udz_core_t *core, udz_ztx_t *t)
{
    udz_ztx_t **pp;

    ztx_unhold(core, t);
    *t->pprev = t->next;
    if (t->next != NULL) {
        t->next->pprev = t->pprev;
    } else {
        core->ztx_tailp = t->pprev;
    }
    for (pp = &t->peer->ztx; *pp != NULL; pp = &(*pp)->pnext) {
        if (*pp == t) {     /* at most UDZ_ZTX_PER_PEER */
            *pp = t->pnext;
            t->peer->ztx_n--;
            break;
        }
    }
    if (core->ztx_free_n >= UDZ_ZTX_FREE_MAX) {
        /* a burst of ZREQs (refused ones make records too, kept for the ZERR's repeats)
         * must not stay allocated for the iface's life: keep a peer's worth only */
        free(t);
        return;
    }
    t->next = core->ztx_free;
    core->ztx_free = t;
    core->ztx_free_n++;
}

/* The transfer xfer_id that p asked for: among p's own, at most UDZ_ZTX_PER_PEER. */
static udz_ztx_t *ztx_find(udz_peer_t *p, uint32_t xfer_id)
{
    udz_ztx_t *t;

    for (t = p->ztx; t != NULL; t = t->pnext) {
        if (t->xfer_id == xfer_id) {
            return t;
        }
    }
    return NULL;
}

/* The region of t was deregistered while being served: t stops for good (its source is
 * forgotten) and is refused as a bad key at the ZREQ would have been; the ZERR is resent on
 * every ZACK until the requester ends the transfer. */
static void ztx_revoke(udz_core_t *core, udz_ztx_t *t)
{
    udz_zerr_t e = {t->xfer_id, -EACCES};

    t->status = -EACCES;
    t->src    = NULL;
    core->cnt->ztx_revoked++;
    udz_stream_send_zctl(core, t->peer, UDZ_T_ZERR, 0, t->xfer_id, &e, sizeof(e));
}

/* Sends the n listed chunks of t as one batch (none once t is revoked). */
static unsigned ztx_send(udz_core_t *core, udz_ztx_t *t, const uint32_t *list, unsigned n)
{
    udz_txmsg_t *msg = core->ztxmsgs;
    unsigned i;
    uint32_t c;
    int rc;

    if (t->src == NULL) {
        return 0;       /* revoked */
    }
    if (t->held) {
        /* Dekker with the md's deregistration (udz_mem_hold_t): busy first, then revoked; the
         * md sets revoked, then waits for busy to clear. One exchange per batch of chunks. */
        __atomic_store_n(&t->hold.busy, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&t->hold.revoked, __ATOMIC_SEQ_CST)) {
            __atomic_store_n(&t->hold.busy, 0, __ATOMIC_RELEASE);
            ztx_revoke(core, t);
            return 0;
        }
    }
    hold_flush(core);   /* the stream's held packets go first */
    for (i = 0; i < n; ++i) {
        c = list[i];
        memset(&core->ztxhdr[i], 0, sizeof(udz_hdr_t));
        hdr_fill(core, &core->ztxhdr[i], t->peer, UDZ_T_ZDATA);
        core->ztxhdr[i].psn = t->xfer_id;
        core->ztxhdr[i].ack = c;
        core->ztxhdr[i].len = (uint16_t)chunk_len(t->len, t->chunk, c);
        msg[i].iov[0].iov_base = &core->ztxhdr[i];
        msg[i].iov[0].iov_len  = UDZ_HDR_LEN;
        msg[i].iov[1].iov_base = (void*)(t->src + (size_t)c * t->chunk);
        msg[i].iov[1].iov_len  = core->ztxhdr[i].len;
        msg[i].iovcnt          = 2;
        msg[i].tag             = zdata_tag(t->xfer_id, c);
        msg[i].region.iov_base = (void*)t->src;
        msg[i].region.iov_len  = t->len;
    }
    rc = core->wops->chan_send(core->wire, &t->dst, msg, (int)n);
    if (t->held) {
        __atomic_store_n(&t->hold.busy, 0, __ATOMIC_RELEASE);   /* the wire is done reading */
    }
    if (rc < (int)n) {
        core->cnt->tx_eagain++;
    }
    if (rc > 0) {
        t->last_send_ns = core->now;
    }
    return rc > 0 ? (unsigned)rc : 0;
}

/* Chunks of t per send call. A wire that coalesces (UDP GSO: 44 datagrams of 1,472 bytes in
 * 65,000) gets whole runs, two or more, up to UDZ_ZTX_BATCH_MAX: 64 were a run of 44 and one
 * of 20, a run's kernel work for a third of the bytes (across a veth, 256 KiB latency -3%, and
 * one run per call cost bandwidth at 64-256 KiB: more calls). Others get UDZ_BATCH_MAX. */
static unsigned ztx_batch(const udz_core_t *core, uint32_t chunk)
{
    size_t run = core->wops->tx_run_bytes / ((size_t)chunk + UDZ_HDR_LEN);

    if (run > core->wops->tx_run_dgrams) {
        run = core->wops->tx_run_dgrams;
    }
    return (run > 1) ? (unsigned)(UDZ_ZTX_BATCH_MAX / run * run) : UDZ_BATCH_MAX;
}

unsigned udz_ztx_pump(udz_core_t *core)
{
    uint32_t list[UDZ_ZTX_BATCH_MAX];
    unsigned n, sent, total = 0;    /* the wire may send a batch as one */
    udz_ztx_t *t;

    for (t = core->ztx_active; t != NULL; t = t->next) {
        if (__builtin_expect(!t->peer->valid || t->chan_wait, 0) && ztx_blocked(core, t)) {
            continue;   /* address not proven or channels not known yet: nothing goes */
        }
        while ((t->status == 0) && (t->sent < t->nchunks) && (t->sent < t->cum + t->window)) {
            for (n = 0; (n < t->batch) && (t->sent + n < t->nchunks) &&
                        (t->sent + n < t->cum + t->window); ++n) {
                list[n] = t->sent + n;
            }
            sent = ztx_send(core, t, list, n);
            t->sent += sent;
            total += sent;
            if (t->status != 0) {
                break;          /* revoked: the others go on */
            }
            if (sent < n) {
                return total;   /* the wire is full: next progress */
            }
        }
    }
    return total;
}

/* Whether the requester's last ZACK says chunk c (above cum) has arrived. */
static int ztx_sacked(const udz_ztx_t *t, uint32_t c)
{
    uint32_t i = c - t->cum - 1;    /* c > cum */

    return (i < 64 * t->sack_words) && ((t->sack[i / 64] >> (i % 64)) & 1);
}

/* Resend the holes the requester reports (each at most once per repair gate), or the first
 * missing chunks when it is stuck. */
static void ztx_repair(udz_core_t *core, udz_ztx_t *t, int stuck)
{
    uint32_t list[UDZ_BATCH_MAX], top = t->cum, c, w;
    unsigned n = 0, total = 0;

    for (w = t->sack_words; w > 0; --w) {
        if (t->sack[w - 1] != 0) {
            top = t->cum + 1 + 64 * (w - 1) + (63 - (uint32_t)__builtin_clzll(t->sack[w - 1]));
            break;
        }
    }
    if (stuck && (top == t->cum)) {
        /* nothing arrives and no hole is known: the tail was lost (a wire may send a whole
         * batch as one packet, and lose it as one). Resend a batch's worth from the first
         * missing chunk on; the requester's next ZACKs name the rest. */
        top = t->cum + UDZ_BATCH_MAX - 1;
    }
    for (c = t->cum; (c <= top) && (c < t->sent); ++c) {
        if ((c > t->cum) && ztx_sacked(t, c)) {
            continue;
        }
        if ((c < t->rexmit_mark) && !stuck &&
            (core->now - t->rexmit_ns < repair_gate(core, t->peer))) {
            continue;   /* resent recently: give it time */
        }
        list[n++] = c;
        if (n == UDZ_BATCH_MAX) {
            total += ztx_send(core, t, list, n);
            n = 0;
        }
    }
    if (n > 0) {
        total += ztx_send(core, t, list, n);
    }
    if (total == 0) {
        return;
    }
    core->cnt->retransmit_chunks += total;
    if (c > t->rexmit_mark) {
        t->rexmit_mark = c;
    }
    t->rexmit_ns = core->now;
}

/* Whether a STUCK ZACK of t may have its repair now, without the repair gate. An honest
 * requester sends one after its repair gate (at least UDZ_REPAIR_GATE_MIN_NS), doubled per
 * STUCK while nothing comes (udz_zrx_timers). The owner, which may have no round-trip sample
 * of it (hence STUCK), allows half of that since its last repair of t, doubled per STUCK
 * repair until cum moves, at most half the largest RTO: sooner is a duplicate or forged, and
 * honouring each would make every 136-byte ZACK resend up to a window, at will. */
static int ztx_stuck_due(const udz_core_t *core, const udz_ztx_t *t)
{
    uint64_t gate = (t->peer->srtt_us != 0) ? repair_gate(core, t->peer) :
                                              UDZ_REPAIR_GATE_MIN_NS;

    gate = (gate / 2) << (t->stuck_n < UDZ_BACKOFF_MAX ? t->stuck_n : UDZ_BACKOFF_MAX);
    if (gate > core->cfg.rto_max_ns / 2) {
        gate = core->cfg.rto_max_ns / 2;
    }
    return core->now - t->rexmit_ns >= gate;
}

/* The window the owner serves a transfer of this chunk with: its own configured window (as
 * its own gets ask, udz_zrx.c), whatever the request says. A ZREQ's window is the requester's
 * receive buffer; an owner that believed it would stream a whole region before the first
 * ZACK, at whatever the request named (an amplifier for a forged request). */
static uint32_t ztx_window(const udz_core_t *core, uint32_t chunk, uint32_t asked)
{
    size_t own = core->cfg.zc_window / chunk;

    if (own == 0) {
        own = 1;
    }
    return (asked < own) ? asked : (uint32_t)own;
}

/* Where t's data goes: the requester's channel t->chan_id among those its address announced
 * (the wire's chan_addr). Not one of them: t is refused (-EINVAL, counted zreq_bad_chan); none
 * announced yet: t waits (chan_wait) until an ep here brings the peer's address
 * (udz_peer_get), or is dropped after peer_timeout like any transfer whose requester is
 * silent. Returns 1 when t may send. */
static int ztx_chan_resolve(udz_core_t *core, udz_ztx_t *t)
{
    int rc = core->wops->chan_addr(core->wire, &t->peer->addr, &t->peer->chans, t->chan_id,
                                   &t->dst);

    t->chan_wait = (rc == -ENOENT);
    if ((rc != 0) && (rc != -ENOENT)) {
        t->status = -EINVAL;
        core->cnt->zreq_bad_chan++;
    }
    return rc == 0;
}

/* A transfer that may not send yet: its peer's address is not proven (udz_peer.c), or its
 * channels are not known (chan_wait; resolved again here, refused with ZERR if the announced
 * channels do not include it). Returns 1 when it still may not. */
static int ztx_blocked(udz_core_t *core, udz_ztx_t *t)
{
    if (!t->peer->valid) {
        return 1;
    }
    if (t->chan_wait && (t->status == 0) && !ztx_chan_resolve(core, t)) {
        if (t->status != 0) {
            udz_zerr_t e = {t->xfer_id, t->status};
            core->cnt->zreq_refused++;
            udz_stream_send_zctl(core, t->peer, UDZ_T_ZERR, 0, t->xfer_id, &e, sizeof(e));
        }
        return 1;
    }
    return 0;
}

void udz_ztx_on_zreq(udz_core_t *core, udz_peer_t *p, const udz_zreq_t *req)
{
    udz_ztx_t *t = core->ztx_free;
    const void *src;

    if (p->ztx_n >= UDZ_ZTX_PER_PEER) {
        /* more than a requester with every channel busy can ask: refused without a record */
        udz_zerr_t e = {req->xfer_id, -EBUSY};
        core->cnt->zreq_capped++;
        udz_stream_send_zctl(core, p, UDZ_T_ZERR, 0, req->xfer_id, &e, sizeof(e));
        return;
    }
    if (t != NULL) {
        core->ztx_free = t->next;
        core->ztx_free_n--;
    } else if ((t = malloc(sizeof(*t))) == NULL) {
        return;     /* the requester times out */
    }
    memset(t, 0, sizeof(*t));
    t->peer    = p;
    t->xfer_id = req->xfer_id;
    t->len     = req->len;
    t->chunk   = req->chunk;
    t->chan_id = req->chan_id;
    t->last_progress_ns   = core->now;
    t->last_progress_live = core->live;
    src = NULL;
    if ((req->chunk == 0) || (req->chunk > core->wops->max_dgram - UDZ_HDR_LEN) ||
        (req->len == 0) || (req->window == 0) ||
        ((req->len + req->chunk - 1) / req->chunk > 0xffffffffull)) {
        t->status = -EINVAL;
    } else if (core->uops->mem_hold != NULL) {
        /* the md links the transfer to the registration, to revoke it at deregistration */
        src = core->uops->mem_hold(core->user, req->addr, req->len, req->rkey, &t->hold);
        t->held = (src != NULL);
    } else {
        src = core->uops->mem(core->user, req->addr, req->len, req->rkey, 0);
    }
    if ((t->status == 0) && (src == NULL)) {
        t->status = -EACCES;
    }
    if (t->status == 0) {
        ztx_chan_resolve(core, t);  /* -EINVAL: refused below; unknown: waits */
    }
    if (t->status != 0) {
        core->cnt->zreq_refused++;
        udz_zerr_t e = {t->xfer_id, t->status};
        udz_stream_send_zctl(core, p, UDZ_T_ZERR, 0, t->xfer_id, &e, sizeof(e));
    } else {
        t->src     = src;
        t->nchunks = (uint32_t)((req->len + req->chunk - 1) / req->chunk);
        t->batch   = ztx_batch(core, req->chunk);
        t->window  = ztx_window(core, req->chunk, req->window);
    }
    /* append: transfers are served in arrival order */
    t->next         = NULL;
    t->pprev        = core->ztx_tailp;
    *core->ztx_tailp = t;
    core->ztx_tailp = &t->next;
    t->pnext        = p->ztx;
    p->ztx          = t;
    p->ztx_n++;
    peer_activate(core, p);
    if (!p->valid && (t->status == 0)) {
        udz_peer_chal_send(core, p, 0);     /* served once p echoes (udz_peer.c) */
    }
}

void udz_ztx_on_zack(udz_core_t *core, udz_peer_t *p, const udz_zack_t *a, unsigned words,
                     uint8_t flags)
{
    udz_ztx_t *t = ztx_find(p, a->xfer_id);
    unsigned w;
    int holes;

    if (t == NULL) {
        return;     /* finished (our ZDONE crossed it) or never known */
    }
    if (t->status != 0) {
        udz_zerr_t e = {t->xfer_id, t->status};
        udz_stream_send_zctl(core, p, UDZ_T_ZERR, 0, t->xfer_id, &e, sizeof(e));
        t->last_progress_ns   = core->now;
        t->last_progress_live = core->live;
        return;
    }
    if (!p->valid) {
        udz_peer_chal_send(core, p, 0);     /* our challenge was lost: again, one for one */
        return;
    }
    if (t->chan_wait) {
        return;     /* nothing sent yet: no progress to note (dropped after peer_timeout) */
    }
    if ((a->cum > t->nchunks) || (a->cum > t->sent)) {
        core->cnt->rx_corrupt++;
        return;
    }
    if (a->cum > t->cum) {
        t->cum = a->cum;
        t->backoff = 0;
        t->stuck_n = 0;
    }
    t->last_progress_ns   = core->now;
    t->last_progress_live = core->live;
    holes = 0;
    if (a->cum == t->cum) {
        memcpy(t->sack, a->sack, sizeof(uint64_t) * words);
        t->sack_words = words;
        for (w = 0; w < words; ++w) {
            holes |= (a->sack[w] != 0);     /* something arrived above cum: cum is a hole */
        }
    } else {
        t->sack_words = 0;      /* an old ZACK, overtaken */
    }
    if (t->cum >= t->nchunks) {
        ztx_free(core, t);      /* all there; the ZDONE will find nothing */
        return;
    }
    if (flags & UDZ_F_STUCK) {
        if (ztx_stuck_due(core, t)) {
            t->stuck_n++;
        } else {
            /* duplicated or forged: taken as a plain ZACK (its holes still gated) */
            core->cnt->zack_stuck_gated++;
            flags &= (uint8_t)~UDZ_F_STUCK;
        }
    }
    if (holes || (flags & UDZ_F_STUCK)) {
        ztx_repair(core, t, flags & UDZ_F_STUCK);
    }
}

void udz_ztx_end(udz_core_t *core, udz_peer_t *p, uint32_t xfer_id)
{
    udz_ztx_t *t = ztx_find(p, xfer_id);

    if (t != NULL) {
        ztx_free(core, t);
    }
}

void udz_ztx_peer_failed(udz_core_t *core, udz_peer_t *p)
{
    while (p->ztx != NULL) {
        ztx_free(core, p->ztx);
    }
}

/* Per transfer served: drop it when the requester is silent for peer_timeout; probe with the
 * first unacked chunk when nothing was acked or sent for an RTO. */
void udz_ztx_timers(udz_core_t *core)
{
    udz_ztx_t *t, *tn;
    uint64_t now = core->now;

    for (t = core->ztx_active; t != NULL; t = tn) {
        tn = t->next;
        if (live_since(core, t->last_progress_live) >= core->cfg.peer_timeout_ns) {
            ztx_free(core, t);      /* the requester gave up or died */
            continue;
        }
        if ((t->status == 0) && (t->cum < t->sent) &&
            (now - t->last_send_ns >= rto(core, t->peer, t->backoff)) &&
            (now - t->last_progress_ns >= rto(core, t->peer, t->backoff))) {
            uint32_t c = t->cum;
            if (t->backoff < UDZ_BACKOFF_MAX) {
                t->backoff++;
            }
            ztx_send(core, t, &c, 1);   /* probe: the requester's ZACK tells the rest */
            core->cnt->retransmit_chunks++;
        }
    }
}

int udz_ztx_init(udz_core_t *core)
{
    core->ztxhdr  = calloc(UDZ_ZTX_BATCH_MAX, sizeof(*core->ztxhdr));
    core->ztxmsgs = calloc(UDZ_ZTX_BATCH_MAX, sizeof(*core->ztxmsgs));
    core->ztx_tailp = &core->ztx_active;
    return ((core->ztxhdr == NULL) || (core->ztxmsgs == NULL)) ? -ENOMEM : 0;
}

void udz_ztx_cleanup(udz_core_t *core)
{
    udz_ztx_t *t, *tn;

    for (t = core->ztx_active; t != NULL; t = tn) {
        tn = t->next;
        ztx_unhold(core, t);    /* before its memory goes: the md may still point at it */
        free(t);
    }
    for (t = core->ztx_free; t != NULL; t = tn) {
        tn = t->next;
        free(t);
    }
    free(core->ztxhdr);
    free(core->ztxmsgs);
}
