/*
 * ud_zcopy core, the reliable stream per peer: packet sequence numbers, send buffers kept until
 * acked (one pool per core), cumulative acks piggybacked on every control datagram and sent
 * standalone after ack_every packets or ack_delay, out-of-order packets kept until the hole
 * before them is filled, a NAK when a gap is seen (naming the hole: the sender resends that
 * packet, or goes back and resends all after it when the receiver could not keep them), a
 * retransmission timer that follows the measured round trip (Jacobson/Karels, Karn's rule,
 * exponential backoff), a send window, and the peer failed when it acks nothing for
 * peer_timeout of live time (core_clock). Delivery is in order and exactly once.
 */
#include "udz_core_int.h"

size_t udz_core_max_payload(const udz_core_t *core) { return core->cfg.seg_size - UDZ_HDR_LEN; }

/* Jacobson/Karels on one round-trip sample (never from a retransmitted packet: Karn). */
static void rtt_sample(udz_peer_t *p, uint64_t ns)
{
    uint32_t us = (ns / 1000 > 0xffffffffull) ? 0xffffffffu : (uint32_t)(ns / 1000);
    uint32_t diff;

    if (p->srtt_us == 0) {
        p->srtt_us   = us ? us : 1;
        p->rttvar_us = us / 2;
        return;
    }
    diff = (us > p->srtt_us) ? us - p->srtt_us : p->srtt_us - us;
    p->rttvar_us = (3 * p->rttvar_us + diff) / 4;
    p->srtt_us   = (7 * p->srtt_us + us) / 8;
    if (p->srtt_us == 0) {
        p->srtt_us = 1;
    }
}

/* ---- sending ---- */

/* An ACK datagram; a NAK with UDZ_F_SACK carries the end of the hole in psn (udz_stream_rx_nak). */
static void stream_send_ack(udz_core_t *core, udz_peer_t *p, uint8_t flags, uint32_t hole_end)
{
    udz_hdr_t h;

    memset(&h, 0, sizeof(h));
    hdr_fill(core, &h, p, UDZ_T_ACK);
    h.flags = flags;
    h.psn   = hole_end;
    h.ack   = p->rx_expected;
    if (wire_send1(core, &p->addr, &h, sizeof(h), NULL, 0) == 0) {
        p->ack_owed = 0;
        p->ack_now  = 0;
        if (flags & UDZ_F_NAK) {
            core->cnt->tx_naks++;
        } else {
            core->cnt->tx_acks++;
        }
    }
}

void udz_stream_send_ack(udz_core_t *core, udz_peer_t *p, uint8_t flags)
{
    stream_send_ack(core, p, flags, 0);
}

void udz_stream_send_nak(udz_core_t *core, udz_peer_t *p, int sack, uint32_t hole_end)
{
    stream_send_ack(core, p, UDZ_F_NAK | (sack ? UDZ_F_SACK : 0), hole_end);
}

void udz_stream_send_zctl(udz_core_t *core, udz_peer_t *p, uint8_t type, uint8_t flags,
                          uint32_t xfer_id, const void *body, size_t body_len)
{
    struct {
        udz_hdr_t h;
        uint64_t  body[2];
    } m;
    struct iovec iov = {(void*)body, body_len};

    memset(&m.h, 0, sizeof(m.h));
    hdr_fill(core, &m.h, p, type);
    m.h.flags = flags;
    m.h.len   = (uint16_t)body_len;
    m.h.psn   = xfer_id;
    m.h.ack   = p->rx_expected;     /* every control datagram carries the ack */
    if (wire_send1(core, &p->addr, &m.h, sizeof(m.h), &iov, body_len ? 1 : 0) == 0) {
        p->ack_owed = 0;
        p->ack_now  = 0;
    }
}

static void skb_xmit(udz_core_t *core, udz_peer_t *p, udz_skb_t *skb, uint8_t flags)
{
    udz_hdr_t *h = (udz_hdr_t*)skb->data;

    h->ack   = p->rx_expected;      /* piggybacked ack, current at every (re)transmission */
    h->flags = flags;
    if (wire_send1(core, &p->addr, h, skb->len, skb->iov, skb->iovcnt) == 0) {
        p->ack_owed = 0;
        p->ack_now  = 0;
    }
    core->cnt->tx_packets++;
}

/* ---- send coalescing ----
 *
 * On a small MTU (1500: 1,440 bytes of payload) UCP cuts an eager message into many am_bcopy
 * fragments, and each was its own sendmsg through the whole IP stack (across a veth the
 * sender's call also runs the receiver's side: ~5 us a datagram). A fragment of the largest
 * payload is probably followed by more of the same message, so it is held back here, and the
 * held packets go as one send call of the wire (UDP: one GSO run, equal datagrams with the last
 * one shorter) when
 *  - a shorter packet to the same peer follows (it goes in the same call),
 *  - the run is full (the wire's tx_run_dgrams / tx_run_bytes),
 *  - anything else is to be sent: a packet to another peer, an ack or zero-copy control
 *    datagram to any peer (wire_send1), zero-copy data (ztx_send), a go-back resend;
 *  - at every progress call (its start and its end), at flush (ep and iface), before the glue
 *    lets the worker sleep, when an ep is destroyed and when the core is;
 *  - before an ack from the held packets' peer is looked at (a corrupt ack could otherwise
 *    name a packet that never went, and free it under the hold).
 * A held packet is in the stream from its commit: it has its psn, counts against the send
 * window and the pool, and is on the peer's unacked list (so flush and idle wait for it, and a
 * peer failure or go-back takes it with the rest). Its timers start when it goes: its send time
 * (round-trip sample) and, if it is the oldest unacked, the retransmission timer are set at the
 * flush, as is its piggybacked ack. The hot path stays as it was for a packet that is not
 * full (one compare); a held packet costs no system call and no allocation. */

/* Sends n packets of p from skb on, in list order, in as few calls of the wire as hold_max
 * allows (the wire cuts them into runs). fresh: first transmissions (their send time is now). */
static void stream_send_list(udz_core_t *core, udz_peer_t *p, udz_skb_t *skb, unsigned n,
                             int fresh)
{
    udz_txmsg_t *m;
    udz_hdr_t *h;
    unsigned k, i, sent;
    int j, rc;

    while (n > 0) {
        k = (n < core->hold_max) ? n : core->hold_max;
        for (i = 0; i < k; ++i, skb = skb->next) {
            h      = (udz_hdr_t*)skb->data;
            h->ack = p->rx_expected;    /* piggybacked ack, current when it goes */
            if (fresh) {
                skb->sent_ns = core->now;
            }
            m = &core->stxmsgs[i];
            m->iov[0].iov_base = h;
            m->iov[0].iov_len  = skb->len;
            for (j = 0; j < skb->iovcnt; ++j) {
                m->iov[1 + j] = skb->iov[j];
            }
            m->iovcnt = 1 + skb->iovcnt;
        }
        for (sent = 0; sent < k; sent += (unsigned)rc) {
            rc = core->wops->send(core->wire, &p->addr, core->stxmsgs + sent, (int)(k - sent));
            if (rc <= 0) {
                break;
            }
        }
        if (sent < k) {
            core->cnt->tx_eagain++;     /* what did not go is lost: the timer resends it */
        }
        if (sent > 0) {
            p->ack_owed = 0;
            p->ack_now  = 0;
        }
        if (k > 1) {
            core->cnt->tx_runs++;
            core->cnt->tx_coalesced += k;
        }
        core->cnt->tx_packets += k;
        n -= k;
    }
}

static void hold_clear(udz_core_t *core)
{
    core->hold       = NULL;
    core->hold_peer  = NULL;
    core->hold_n     = 0;
    core->hold_bytes = 0;
}

void udz_stream_hold_flush(udz_core_t *core)
{
    udz_skb_t *skb = core->hold;
    udz_peer_t *p  = core->hold_peer;
    unsigned n     = core->hold_n;

    hold_clear(core);
    if (p->unacked == skb) {
        p->last_tx_ns = core->now;  /* the retransmission timer runs from the real send */
    }
    stream_send_list(core, p, skb, n, 1);
}

/* A committed packet of total payload bytes goes now, or is held to go with what follows. */
static void stream_xmit_new(udz_core_t *core, udz_peer_t *p, udz_skb_t *skb, uint8_t flags,
                            size_t total)
{
    size_t len = UDZ_HDR_LEN + total;
    int full   = (total == udz_core_max_payload(core));

    if (core->hold_n != 0) {
        if ((core->hold_peer != p) || (core->hold_bytes + len > core->hold_max_bytes)) {
            udz_stream_hold_flush(core);
        }
    }
    if ((core->hold_n == 0) && (!full || (core->hold_max <= 1))) {
        skb_xmit(core, p, skb, flags);  /* nothing held, nothing to hold: as before */
        return;
    }
    ((udz_hdr_t*)skb->data)->flags = flags;
    if (core->hold_n == 0) {
        core->hold      = skb;
        core->hold_peer = p;
    }
    core->hold_n++;
    core->hold_bytes += len;
    if (!full || (core->hold_n >= core->hold_max) ||
        (core->hold_bytes + core->cfg.seg_size > core->hold_max_bytes)) {
        udz_stream_hold_flush(core);
    }
}

void udz_core_tx_flush(udz_core_t *core)
{
    if (core->hold_n != 0) {
        if (core->uops->now != NULL) {
            core_clock(core, core->uops->now(core->user));
        }
        udz_stream_hold_flush(core);
    }
}

int udz_core_tx_held(const udz_core_t *core)
{
    return core->hold_n != 0;
}

/* ---- the send window ----
 *
 * A go-back resends every unacked packet, so what one loss costs grows with the window. A
 * window sized for a loss-free path (tx_window; 512 across a 1500-byte MTU) is therefore
 * adaptive when tx_window_min is below it: each loss (a go-back, or the first repair of a
 * hole a NAK named: peer_resend_hole, or a timer probe) halves the peer's window down to
 * tx_window_min, and every eight packets acked without one give a packet back. Under steady
 * loss the window stays at the floor, the fixed window of before; a clean path soon has the
 * whole window again. */
static inline unsigned peer_window(const udz_core_t *core, const udz_peer_t *p)
{
    return (p->window8 == 0) ? core->cfg.tx_window : (p->window8 >> 3);
}

static void peer_window_cut(udz_core_t *core, udz_peer_t *p)
{
    unsigned w;

    if ((core->cfg.tx_window_min == 0) || (core->cfg.tx_window_min >= core->cfg.tx_window)) {
        return;     /* fixed */
    }
    w          = peer_window(core, p) / 2;
    p->window8 = ((w > core->cfg.tx_window_min) ? w : core->cfg.tx_window_min) << 3;
    core->cnt->window_cuts++;
}

static inline void peer_window_grow(udz_core_t *core, udz_peer_t *p, unsigned acked)
{
    if (__builtin_expect(p->window8 != 0, 0)) {
        p->window8 += acked;
        if (p->window8 >= (core->cfg.tx_window << 3)) {
            p->window8 = 0;     /* whole again */
        }
    }
}

/* Marks skb as a repair about to go again: no round-trip sample from it (Karn), its send time
 * that of this repair (what a NAK crossing it is judged by), flags as its header will carry. */
static inline void skb_mark_repair(udz_core_t *core, udz_skb_t *skb, uint8_t flags)
{
    skb->retx    = 1;
    skb->sent_ns = core->now;
    ((udz_hdr_t*)skb->data)->flags = flags;
    core->cnt->retransmit++;
}

/* Sends n packets of p's unacked list from skb again, with the flags their headers carry: as
 * runs on a wire with coalesced sends, else one by one. */
static void peer_send_again(udz_core_t *core, udz_peer_t *p, udz_skb_t *skb, unsigned n)
{
    if ((core->hold_max > 1) && (n > 1)) {
        stream_send_list(core, p, skb, n, 0);
    } else {
        for (; n > 0; --n, skb = skb->next) {
            skb_xmit(core, p, skb, ((udz_hdr_t*)skb->data)->flags);
        }
    }
    p->last_tx_ns = core->now;
}

/* Go back: resend every unacked packet, asking for an ack on the last one. Packets held for
 * coalescing go with them, for the first time; on a wire with coalesced sends the whole
 * resend goes as runs. */
static void peer_retransmit(udz_core_t *core, udz_peer_t *p)
{
    udz_skb_t *skb, *fresh = NULL;
    int first = 1;
    uint8_t flags;

    peer_window_cut(core, p);
    if (core->hold_n != 0) {
        if (core->hold_peer == p) {
            fresh = core->hold;
            hold_clear(core);
        } else {
            udz_stream_hold_flush(core);
        }
    }
    for (skb = p->unacked; skb != NULL; skb = skb->next) {
        flags = (skb->next == NULL) ? UDZ_F_ACK_REQ : 0;
        if (skb == fresh) {
            first = 0;
        }
        if (first) {
            skb_mark_repair(core, skb, flags);
        } else {
            ((udz_hdr_t*)skb->data)->flags = flags;
        }
    }
    if (core->hold_max > 1) {
        stream_send_list(core, p, p->unacked, p->unacked_count, 0);
        for (skb = fresh; skb != NULL; skb = skb->next) {
            skb->sent_ns = core->now;
        }
    } else {
        for (skb = p->unacked; skb != NULL; skb = skb->next) {
            skb_xmit(core, p, skb, ((udz_hdr_t*)skb->data)->flags);
        }
    }
    p->last_tx_ns = core->now;
}

/* A NAK that names a hole (UDZ_F_SACK): the receiver keeps what came after it, so only the
 * packets of the hole go again, from the oldest unacked up to end, the first packet the receiver
 * keeps (the NAK's psn), the last one asking for an ack. end is the peer's word: anything but a
 * psn after the oldest and no later than what was sent names the oldest alone (a receiver of
 * before, whose NAK's psn is 0, too), so at most our own unacked packets go, once each. A
 * repair sent less than a round trip ago may still be on its way: the NAK that crossed it is
 * not answered (the receiver NAKs a hole it still has every rto/4, and the timer probes if
 * every repair is lost). The first repair of a packet cuts the window as a go-back does: a loss
 * is a loss. */
static void peer_resend_hole(udz_core_t *core, udz_peer_t *p, uint32_t end)
{
    udz_skb_t *first = p->unacked, *skb;
    unsigned n = 0;

    if (first->retx && (core->now - first->sent_ns < (uint64_t)p->srtt_us * 1000)) {
        return;
    }
    if (!first->retx) {
        peer_window_cut(core, p);
    }
    if (!seq_lt(first->psn, end) || seq_lt(p->next_psn, end)) {
        end = first->psn + 1;
    }
    for (skb = first; (skb != NULL) && seq_lt(skb->psn, end); skb = skb->next) {
        skb_mark_repair(core, skb,
                        ((skb->next == NULL) || !seq_lt(skb->next->psn, end)) ?
                        UDZ_F_ACK_REQ : 0);
        ++n;
    }
    peer_send_again(core, p, first, n);
}

/* The retransmission timer ran out: the oldest unacked packet goes again, and the newest as a
 * probe of the tail, both asking for an ack. A receiver that keeps packets after a hole (the
 * stream's rule since rx_reorder) then either acks everything or NAKs the first hole by its
 * range, which peer_resend_hole repairs; one that could not keep them NAKs without SACK, which
 * goes back (udz_nak_due). So a timeout costs two packets where it cost the window (20% loss in
 * the unit tests: 87% of the retransmissions were timer go-backs). Only towards a peer that
 * has named a hole so (p->sacked; one with rx_reorder 0 keeps nothing, and a probe would only
 * delay its go-back by a round trip). A timer that runs out again without progress goes back
 * over everything: the probe or its answer was lost too. */
static void peer_timer_probe(udz_core_t *core, udz_peer_t *p)
{
    udz_skb_t *first, *tail;

    if ((core->hold_n != 0) && (core->hold_peer == p)) {
        udz_stream_hold_flush(core);    /* held packets go now, first time: they probe too */
    }
    first = p->unacked;
    tail  = p->unacked_tail;
    peer_window_cut(core, p);
    skb_mark_repair(core, first, UDZ_F_ACK_REQ);
    peer_send_again(core, p, first, 1);
    if ((tail != first) && (tail->sent_ns != core->now)) {  /* not just flushed from the hold */
        skb_mark_repair(core, tail, UDZ_F_ACK_REQ);
        peer_send_again(core, p, tail, 1);
    }
}

udz_skb_t *udz_skb_get(udz_core_t *core)
{
    return udz_skb_pool_get(core, &core->skb_free, &core->skb_count, core->cfg.tx_pool);
}

void *udz_send_begin(udz_core_t *core, udz_peer_t *peer, int *err)
{
    udz_skb_t *skb;

    if (peer->failed) {
        *err = -EPIPE;
        return NULL;
    }
    if ((peer->unacked_count >= peer_window(core, peer)) || ((skb = udz_skb_get(core)) == NULL)) {
        core->starved = 1;
        *err = -EAGAIN;
        return NULL;
    }
    skb->iovcnt    = 0;
    skb->has_ctx   = 0;
    core->cur      = skb;
    core->cur_peer = peer;
    return (udz_hdr_t*)skb->data + 1;
}

void udz_send_abort(udz_core_t *core)
{
    if (core->cur != NULL) {
        core->cur->has_ctx = 0;     /* a refused send does not complete */
        skb_release(core, core->cur, 0);
        core->cur = NULL;
    }
}

int udz_send_commit(udz_core_t *core, uint8_t type, uint8_t am_id, size_t len)
{
    udz_skb_t *skb = core->cur;
    udz_peer_t *p = core->cur_peer;
    udz_hdr_t *h = (udz_hdr_t*)skb->data;
    size_t total = len;
    int i;

    for (i = 0; i < skb->iovcnt; ++i) {
        total += skb->iov[i].iov_len;
    }
    if (total > udz_core_max_payload(core)) {
        udz_send_abort(core);
        return -EMSGSIZE;
    }
    core->cur = NULL;
    if (core->uops->now != NULL) {
        core_clock(core, core->uops->now(core->user));  /* sends come between progress calls */
    }
    memset(h, 0, sizeof(*h));
    hdr_fill(core, h, p, type);
    h->am_id = am_id;
    h->len   = (uint16_t)total;
    h->psn   = p->next_psn++;
    skb->psn = h->psn;
    skb->len = UDZ_HDR_LEN + len;
    skb->next = NULL;
    skb->sent_ns = core->now;
    skb->retx = 0;
    if (p->unacked == NULL) {
        p->unacked = skb;
        p->last_progress_live = core->live;
        p->last_tx_ns = core->now;
        p->backoff = 0;
    } else {
        p->unacked_tail->next = skb;
    }
    p->unacked_tail = skb;
    p->unacked_count++;
    peer_activate(core, p);
    stream_xmit_new(core, p, skb,
                    ((unsigned)p->unacked_count + 1 >= peer_window(core, p)) ? UDZ_F_ACK_REQ : 0,
                    total);
    return 0;
}

int udz_send_iov(udz_core_t *core, udz_peer_t *peer, uint8_t am_id, const void *hdr,
                 size_t hdr_len, const struct iovec *iov, int iovcnt, void *ctx)
{
    void *payload;
    int err, i;

    if ((iovcnt > UDZ_MAX_IOV) || (hdr_len > udz_core_max_payload(core))) {
        /* hdr is copied into the send buffer before commit checks the total: a header larger
         * than a datagram overflowed the buffer (ASan, unit test UdzAm.SendIovByReference) */
        return -EMSGSIZE;
    }
    payload = udz_send_begin(core, peer, &err);
    if (payload == NULL) {
        return err;
    }
    memcpy(payload, hdr, hdr_len);
    for (i = 0; i < iovcnt; ++i) {
        core->cur->iov[i] = iov[i];
    }
    core->cur->iovcnt  = iovcnt;
    core->cur->ctx     = ctx;
    core->cur->has_ctx = 1;
    return udz_send_commit(core, UDZ_T_AM, am_id, hdr_len);
}

/* A put's header in a new send buffer: where it goes and the key the owner checks. rkey NULL:
 * an empty put, which carries a zero key (UCT callers pass no valid key with zero bytes). */
static udz_put_t *put_begin(udz_core_t *core, udz_peer_t *peer, uint64_t raddr,
                            const uint8_t *rkey, int *err)
{
    udz_put_t *put = udz_send_begin(core, peer, err);

    if (put != NULL) {
        put->addr = raddr;
        udz_put_key(put, rkey);
    }
    return put;
}

int udz_put_iov(udz_core_t *core, udz_peer_t *peer, uint64_t raddr, const uint8_t *rkey,
                const struct iovec *iov, int iovcnt, void *ctx)
{
    udz_put_t *put;
    int err, i;

    size_t total = 0;

    if (iovcnt > UDZ_MAX_IOV) {
        return -EMSGSIZE;
    }
    for (i = 0; i < iovcnt; ++i) {
        total += iov[i].iov_len;
    }
    put = put_begin(core, peer, raddr, (total > 0) ? rkey : NULL, &err);
    if (put == NULL) {
        return err;
    }
    for (i = 0; i < iovcnt; ++i) {
        core->cur->iov[i] = iov[i];
    }
    core->cur->iovcnt  = iovcnt;
    core->cur->ctx     = ctx;
    core->cur->has_ctx = 1;
    return udz_send_commit(core, UDZ_T_PUT, 0, sizeof(*put));
}

int udz_put(udz_core_t *core, udz_peer_t *peer, uint64_t raddr, const uint8_t *rkey,
            const void *buf, size_t len)
{
    udz_put_t *put;
    int err;

    if (len > udz_core_max_payload(core) - sizeof(*put)) {
        return -EMSGSIZE;
    }
    put = put_begin(core, peer, raddr, (len > 0) ? rkey : NULL, &err);
    if (put == NULL) {
        return err;
    }
    memcpy(put + 1, buf, len);
    return udz_send_commit(core, UDZ_T_PUT, 0, sizeof(*put) + len);
}

/* ---- receiving ---- */

void udz_stream_acked(udz_core_t *core, udz_peer_t *p, uint32_t ack, uint8_t flags,
                      uint32_t hole_end)
{
    udz_skb_t *skb;
    uint64_t repair_ns = 0;
    unsigned freed = 0;

    if ((core->hold_n != 0) && (core->hold_peer == p)) {
        udz_stream_hold_flush(core);    /* an ack can only name what went */
    }
    if (seq_lt(p->next_psn, ack)) {
        return;     /* acks something never sent: corrupt or stale, ignore */
    }
    while (((skb = p->unacked) != NULL) && seq_lt(skb->psn, ack)) {
        p->unacked = skb->next;
        p->unacked_count--;
        if (skb->retx && (skb->sent_ns > repair_ns)) {
            repair_ns = skb->sent_ns;   /* its last repair */
        }
        if ((p->unacked == NULL || !seq_lt(p->unacked->psn, ack)) && !skb->retx &&
            (skb->sent_ns >= repair_ns)) {
            /* the newest packet this ack covers, unless it went before a repair this ack
             * also covers: the receiver then kept it until the hole was filled, and its time
             * is the repair's (up to a timer probe's RTO), not the path's (Karn, for a
             * cumulative ack) */
            rtt_sample(p, core->now - skb->sent_ns);
        }
        skb_release(core, skb, 0);
        freed++;
    }
    if (p->unacked == NULL) {
        p->unacked_tail = NULL;
    }
    if (__builtin_expect(flags & UDZ_F_BUSY, 0)) {
        /* alive, its application away: the window waits, the peer is not failed for it */
        core->cnt->rx_busy_acks++;
        p->last_progress_live = core->live;
    }
    if (freed) {
        p->last_progress_live = core->live;
        p->last_tx_ns = core->now;
        p->backoff = 0;     /* forward progress: the path works (Karn only guards samples) */
        peer_window_grow(core, p, freed);
    }
    if ((flags & UDZ_F_NAK) && (p->unacked != NULL) && (p->unacked->psn == ack)) {
        if (flags & UDZ_F_SACK) {
            p->sacked = 1;
            peer_resend_hole(core, p, hole_end);
        } else if (udz_nak_due(core, p)) {
            peer_retransmit(core, p);
        }
    }
    if (freed && core->starved) {
        core->starved = 0;
        core->uops->resources(core->user);
    }
}

void udz_peer_absorb(udz_core_t *core, udz_peer_t *p)
{
    udz_skb_t *skb;
    uint8_t *dst;
    int i;

    if (core->hold_peer == p) {
        udz_core_tx_flush(core);    /* held packets go from the caller's buffers, still valid */
    }
    for (skb = p->unacked; skb != NULL; skb = skb->next) {
        dst = (uint8_t*)skb->data + skb->len;   /* header + payload fit one datagram */
        for (i = 0; i < skb->iovcnt; ++i) {
            memcpy(dst, skb->iov[i].iov_base, skb->iov[i].iov_len);
            dst      += skb->iov[i].iov_len;
            skb->len += (uint32_t)skb->iov[i].iov_len;
        }
        skb->iovcnt = 0;
        if (skb->has_ctx) {
            skb->has_ctx = 0;
            core->uops->send_done(core->user, skb->ctx, 0);
        }
    }
}

/* The send side of a failed peer: its unacked packets complete with an error, held ones too. */
void udz_stream_tx_failed(udz_core_t *core, udz_peer_t *p)
{
    udz_skb_t *skb;

    if (core->hold_peer == p) {
        hold_clear(core);           /* they go down with the rest */
    }

    while ((skb = p->unacked) != NULL) {
        p->unacked = skb->next;
        skb_release(core, skb, -ECONNRESET);
    }
    p->unacked_tail  = NULL;
    p->unacked_count = 0;
}

/* p's retransmission timer ran out: the oldest and the newest go again (peer_timer_probe), the
 * newest showing the receiver a lost tail, which it then NAKs with the rest of its holes; a
 * second expiry without progress goes back over everything. */
void udz_stream_rto_expired(udz_core_t *core, udz_peer_t *p)
{
    core->cnt->rto_expiries++;
    if ((p->backoff == 0) && p->sacked) {
        peer_timer_probe(core, p);
    } else {
        peer_retransmit(core, p);
    }
    if (p->backoff < UDZ_BACKOFF_MAX) {
        p->backoff++;
    }
}

int udz_stream_init(udz_core_t *core)
{
    unsigned run = core->wops->tx_run_dgrams;

    core->skb_size = sizeof(udz_skb_t) + ((core->cfg.seg_size + 7) & ~(size_t)7);
    /* coalesce when a run holds at least two full-size packets */
    core->hold_max       = (run < UDZ_BATCH_MAX) ? run : UDZ_BATCH_MAX;
    core->hold_max_bytes = core->wops->tx_run_bytes;
    if ((core->hold_max < 2) || (core->hold_max_bytes < 2 * core->cfg.seg_size)) {
        core->hold_max       = 1;
        core->hold_max_bytes = 0;
    }
    core->stxmsgs = calloc(core->hold_max, sizeof(*core->stxmsgs));
    return (core->stxmsgs == NULL) ? -ENOMEM : 0;
}

void udz_stream_cleanup(udz_core_t *core)
{
    udz_skb_list_free(core->kept_free);
    udz_skb_list_free(core->skb_free);
    free(core->stxmsgs);
}
