/*
 * ud_zcopy core, the reliable stream per peer: packet sequence numbers, send buffers kept until
 * acked (one pool per core), cumulative acks piggybacked on every control datagram and sent
 * standalone after ack_every packets or ack_delay, a NAK when a gap is seen (the sender goes
 * back to the first unacked packet), a retransmission timer that follows the measured round
 * trip (Jacobson/Karels, Karn's rule, exponential backoff), a send window, and the peer failed
 * when it acks nothing for peer_timeout of live time (core_clock). Delivery is in order and
 * exactly once.
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

void send_ack(udz_core_t *core, udz_peer_t *p, uint8_t flags)
{
    udz_hdr_t h;

    memset(&h, 0, sizeof(h));
    hdr_fill(core, &h, p, UDZ_T_ACK);
    h.flags = flags;
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

void send_zctl(udz_core_t *core, udz_peer_t *p, uint8_t type, uint8_t flags, uint32_t xfer_id,
               const void *body, size_t body_len)
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

/* Go back: resend every unacked packet, asking for an ack on the last one. */
static void peer_retransmit(udz_core_t *core, udz_peer_t *p)
{
    udz_skb_t *skb;

    for (skb = p->unacked; skb != NULL; skb = skb->next) {
        skb->retx = 1;
        skb_xmit(core, p, skb, skb->next == NULL ? UDZ_F_ACK_REQ : 0);
        core->cnt->retransmit++;
    }
    p->last_tx_ns = core->now;
}

udz_skb_t *skb_get(udz_core_t *core)
{
    udz_skb_t *skb = core->skb_free;

    if (skb != NULL) {
        core->skb_free = skb->next;
        return skb;
    }
    if (core->skb_count >= core->cfg.tx_pool) {
        return NULL;
    }
    skb = malloc(core->skb_size);
    if (skb != NULL) {
        core->skb_count++;
        skb->iovcnt  = 0;
        skb->has_ctx = 0;
    }
    return skb;
}

void *udz_send_begin(udz_core_t *core, udz_peer_t *peer, int *err)
{
    udz_skb_t *skb;

    if (peer->failed) {
        *err = -EPIPE;
        return NULL;
    }
    if ((peer->unacked_count >= core->cfg.tx_window) || ((skb = skb_get(core)) == NULL)) {
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
    skb_xmit(core, p, skb, ((unsigned)p->unacked_count + 1 >= core->cfg.tx_window) ? UDZ_F_ACK_REQ : 0);
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

void stream_acked(udz_core_t *core, udz_peer_t *p, uint32_t ack, uint8_t flags)
{
    udz_skb_t *skb;
    int freed = 0;

    if (seq_lt(p->next_psn, ack)) {
        return;     /* acks something never sent: corrupt or stale, ignore */
    }
    while (((skb = p->unacked) != NULL) && seq_lt(skb->psn, ack)) {
        p->unacked = skb->next;
        p->unacked_count--;
        if ((p->unacked == NULL || !seq_lt(p->unacked->psn, ack)) && !skb->retx) {
            rtt_sample(p, core->now - skb->sent_ns);   /* the newest packet this ack covers */
        }
        skb_release(core, skb, 0);
        freed = 1;
    }
    if (p->unacked == NULL) {
        p->unacked_tail = NULL;
    }
    if (freed) {
        p->last_progress_live = core->live;
        p->last_tx_ns = core->now;
        p->backoff = 0;     /* forward progress: the path works (Karn only guards samples) */
    }
    if ((flags & UDZ_F_NAK) && (p->unacked != NULL) && (p->unacked->psn == ack) &&
        (core->now - p->nak_ns >= core->cfg.rto_ns / 4)) {
        p->nak_ns = core->now;
        peer_retransmit(core, p);
    }
    if (freed && core->starved) {
        core->starved = 0;
        core->uops->resources(core->user);
    }
}

int stream_rx(udz_core_t *core, udz_peer_t *p, const udz_hdr_t *h)
{
    if (h->psn == p->rx_expected) {
        p->rx_expected++;
        if ((++p->ack_owed == 1) || !dl_linked(&p->active)) {
            p->ack_due_ns = core->now + core->cfg.ack_delay_ns;
            peer_activate(core, p);
        }
        if ((p->ack_owed >= core->cfg.ack_every) || (h->flags & UDZ_F_ACK_REQ)) {
            p->ack_now = 1;
        }
        return 1;
    }
    if (seq_lt(h->psn, p->rx_expected)) {
        core->cnt->rx_dup++;
        p->ack_now = 1;         /* our ack was lost: repeat it */
    } else {
        core->cnt->rx_ooo++;    /* a gap: ask for a go-back, at most every rto/4 */
        if (core->now - p->nak_ns >= core->cfg.rto_ns / 4) {
            p->nak_ns = core->now;
            send_ack(core, p, UDZ_F_NAK);
        }
    }
    return 0;
}

/* ---- failure and timers ---- */

void stream_peer_failed(udz_core_t *core, udz_peer_t *p)
{
    udz_skb_t *skb;

    while ((skb = p->unacked) != NULL) {
        p->unacked = skb->next;
        skb_release(core, skb, -ECONNRESET);
    }
    p->unacked_tail  = NULL;
    p->unacked_count = 0;
    p->ack_owed      = 0;
}

void udz_peer_absorb(udz_core_t *core, udz_peer_t *p)
{
    udz_skb_t *skb;
    uint8_t *dst;
    int i;

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

/* A peer stays on the active list while it has reliable packets in flight or owes an ack.
 * Its zero-copy transfers need no list entry: their timers run while any channel is busy or
 * any transfer is being served (udz_core_progress), so this check is O(1) per peer. */
static int peer_busy(const udz_peer_t *p)
{
    return (p->unacked != NULL) || (p->ack_owed != 0);
}

/* Peer timeout, retransmission and delayed acks of the peers on the active list. */
void stream_timers(udz_core_t *core)
{
    udz_dlist_t *e, *n;
    udz_peer_t *p;
    uint64_t now = core->now;

    for (e = core->active.next; e != &core->active; e = n) {
        n = e->next;
        p = container_of_(e, udz_peer_t, active);
        if (p->unacked != NULL) {
            if (live_since(core, p->last_progress_live) >= core->cfg.peer_timeout_ns) {
                peer_fail(core, p);
                continue;
            }
            if (now - p->last_tx_ns >= rto(core, p, p->backoff)) {
                /* go back: resend everything unacked. Resending only the oldest would leave a
                 * lost tail waiting one RTO per packet (the receiver sees no gap to NAK); the
                 * adaptive RTO keeps spurious go-backs rare */
                if (p->backoff < UDZ_BACKOFF_MAX) {
                    p->backoff++;
                }
                peer_retransmit(core, p);
            }
        }
        if ((p->ack_owed != 0) && ((int64_t)(now - p->ack_due_ns) >= 0)) {
            send_ack(core, p, 0);
        }
        if (!peer_busy(p)) {
            dl_del(&p->active);
        }
    }
}

int stream_init(udz_core_t *core)
{
    core->skb_size = sizeof(udz_skb_t) + ((core->cfg.seg_size + 7) & ~(size_t)7);
    return 0;
}

void stream_cleanup(udz_core_t *core)
{
    udz_skb_t *skb, *sn;

    for (skb = core->skb_free; skb != NULL; skb = sn) {
        sn = skb->next;
        free(skb);
    }
}
