/*
 * ud_zcopy core, the reliable stream's receive side: in-order delivery and the acks it owes,
 * packets that come after a hole kept until it is filled, and the NAK that names the hole by its
 * range (or asks for a go-back when they could not be kept). It sends its acks and NAKs through
 * udz_stream.c, the send side, which never calls in here; udz_stream_timers.c runs both.
 */
#include "udz_core_int.h"

/* The next packet in order from p is taken: the ack it is owed is scheduled. */
static inline void rx_in_order(udz_core_t *core, udz_peer_t *p, uint8_t flags)
{
    p->rx_expected++;
    if ((++p->ack_owed == 1) || !dl_linked(&p->active)) {
        p->ack_due_ns = core->now + core->cfg.ack_delay_ns;
        peer_activate(core, p);
    }
    if ((p->ack_owed >= core->cfg.ack_every) || (flags & UDZ_F_ACK_REQ)) {
        p->ack_now = 1;
    }
}

/* ---- out-of-order packets kept ----
 *
 * Without them every loss was a go-back: the packets after the hole, already here, were dropped
 * and sent again, a whole window per loss (20% loss: 8 retransmissions per message in the unit
 * test; 1% on rxe's 1 KiB MTU: one retransmission for every two packets of Open MPI's RMA
 * test). A packet that comes after a hole is copied into a buffer of the core's (cfg.rx_reorder
 * of them at most, for all peers: memory follows the losses in flight, not the peers) and put
 * in its peer's ring, ordered by psn; the NAK says so (UDZ_F_SACK, with the first kept psn)
 * and the sender resends the hole alone. Each delivery in order takes the kept packets that follow it. A packet beyond
 * rx_reorder of the next expected one, or with every buffer taken, is dropped as before, and
 * the NAK then asks for a go-back. Only a packet that passed rx_ctrl's checks is kept, and a
 * psn is kept once. */

void udz_stream_rx_put(udz_core_t *core, udz_skb_t *skb)
{
    skb->next       = core->kept_free;
    core->kept_free = skb;
}

/* Keeps h (psn beyond rx_expected) in p's ring: 1 kept, 2 kept already (a duplicate), 0 no
 * room or too far ahead. */
static int rx_keep(udz_core_t *core, udz_peer_t *p, const udz_hdr_t *h)
{
    udz_skb_t *last = p->kept, *prev = last, *cur, *skb;
    int append = (last == NULL) || seq_lt(last->psn, h->psn);

    if (((uint32_t)(h->psn - p->rx_expected) >= core->cfg.rx_reorder) ||
        (UDZ_HDR_LEN + (size_t)h->len > core->cfg.seg_size)) {
        /* too far ahead, or larger than a kept buffer: a wire that lends its own receive
         * buffers (udz_wire.h) may hand over a datagram longer than our segment */
        return 0;
    }
    if (!append) {
        /* not after the last one (rare: a resent or reordered packet): find its place */
        for (cur = last->next; !seq_lt(h->psn, cur->psn); prev = cur, cur = cur->next) {
            if (cur->psn == h->psn) {
                return 2;
            }
        }
    }
    skb = udz_skb_pool_get(core, &core->kept_free, &core->kept_count, core->cfg.rx_reorder);
    if (skb == NULL) {
        return 0;
    }
    skb->psn = h->psn;
    memcpy(skb->data, h, UDZ_HDR_LEN + (size_t)h->len);
    peer_activate(core, p);     /* its timers NAK the hole while it lasts */
    if (last == NULL) {
        skb->next = skb;
        p->kept   = skb;
    } else {
        skb->next  = prev->next;    /* after prev: the last one, or its place */
        prev->next = skb;
        if (append) {
            p->kept = skb;
        }
    }
    return 1;
}

void udz_stream_kept_drop(udz_core_t *core, udz_peer_t *p)
{
    udz_skb_t *first, *skb;

    if (p->kept == NULL) {
        return;
    }
    first         = p->kept->next;
    p->kept->next = NULL;
    p->kept       = NULL;
    while ((skb = first) != NULL) {
        first = skb->next;
        udz_stream_rx_put(core, skb);
    }
}

/* A NAK for the hole at rx_expected: at once for a new hole, every rto/4 for the same one.
 * SACK: what came after it is kept; the NAK's psn is the first kept packet, so the sender
 * resends the hole, from rx_expected up to it, and nothing else. Kept packets from rx_expected
 * on (the user holds receives back: udz_core_rx_hold) leave no hole to name. */
void udz_stream_rx_nak(udz_core_t *core, udz_peer_t *p, int sack)
{
    if ((sack && (p->kept->next->psn == p->rx_expected)) ||
        ((p->nak_psn == p->rx_expected) && !udz_nak_due(core, p))) {
        return;
    }
    p->nak_psn = p->rx_expected;
    p->nak_us  = (uint32_t)(core->now / 1000);
    if (sack) {
        core->cnt->tx_sacks++;
    }
    udz_stream_send_nak(core, p, sack, sack ? p->kept->next->psn : 0);
}

udz_skb_t *udz_stream_rx_next(udz_core_t *core, udz_peer_t *p)
{
    udz_skb_t *last, *first;

    /* kept packets lie beyond rx_expected and are taken as it reaches them, so none is ever
     * behind it; one that were would be given back, not delivered twice */
    while (((last = p->kept) != NULL) && seq_lt((first = last->next)->psn, p->rx_expected)) {
        p->kept = (first == last) ? NULL : last;
        last->next = first->next;
        udz_stream_rx_put(core, first);
    }
    if (last == NULL) {
        return NULL;
    }
    if (first->psn != p->rx_expected) {
        /* a hole before packets we keep: the timers at the end of this progress call name it
         * (udz_stream_timers), once the datagrams that came with this one were taken: a
         * repair's later packets often are among them */
        return NULL;
    }
    if (first == last) {
        p->kept = NULL;
    } else {
        last->next = first->next;
    }
    rx_in_order(core, p, ((const udz_hdr_t*)first->data)->flags);
    core->cnt->rx_reordered++;
    return first;
}

int udz_stream_rx(udz_core_t *core, udz_peer_t *p, const udz_hdr_t *h)
{
    int kept;

    if (h->psn == p->rx_expected) {
        rx_in_order(core, p, h->flags);
        return 1;
    }
    if (seq_lt(h->psn, p->rx_expected)) {
        core->cnt->rx_dup++;
        p->ack_now = 1;         /* our ack was lost: repeat it */
        return 0;
    }
    kept = rx_keep(core, p, h);
    if (kept == 2) {
        core->cnt->rx_dup++;    /* kept already: a go-back resent it, or a timer probe asks
                                 * (UDZ_F_ACK_REQ) what we still miss: the hole, by its range */
        if (h->flags & UDZ_F_ACK_REQ) {
            udz_stream_rx_nak(core, p, 1);
        }
        return 0;
    }
    core->cnt->rx_ooo++;        /* a gap: NAK it, naming the hole if this one is kept */
    udz_stream_rx_nak(core, p, kept);
    return 0;
}

