/*
 * ud_zcopy core, the reliable stream's failure and timers: a failed peer's packets on both
 * sides, and per peer on the active list its timeout, retransmission timer (udz_stream.c), the
 * delayed ack, and the NAK of a hole before kept packets (udz_stream_rx.c), again every rto/4.
 * The one file of the stream that calls both sides.
 */
#include "udz_core_int.h"

void udz_stream_peer_failed(udz_core_t *core, udz_peer_t *p)
{
    udz_stream_tx_failed(core, p);
    p->ack_owed = 0;
    udz_stream_kept_drop(core, p);
}

/* A hole before kept packets is NAKed again while its sender was heard within a peer timeout:
 * a sender that died with a hole open is not NAKed for ever (its packets stay kept until the
 * record fails or goes, udz_stream_peer_failed). */
static int peer_hole_open(const udz_core_t *core, const udz_peer_t *p)
{
    return (p->kept != NULL) && (live_since(core, p->heard_live) < core->cfg.peer_timeout_ns);
}

/* A peer stays on the active list while it has reliable packets in flight, owes an ack, or
 * has a hole open. Its zero-copy transfers need no list entry: their timers run while any
 * channel is busy or any transfer is being served (udz_core_progress), so this check is O(1)
 * per peer. */
static int peer_busy(const udz_core_t *core, const udz_peer_t *p)
{
    return (p->unacked != NULL) || (p->ack_owed != 0) || (p->probes != 0) ||
           peer_hole_open(core, p);
}

/* Peer timeout, retransmission, delayed acks and probes of the peers on the active list. The
 * probes and a failure are the peer table's, which sends through the stream: reached through
 * core->hooks (udz_core_int.h). */
void udz_stream_timers(udz_core_t *core)
{
    udz_dlist_t *e, *n;
    udz_peer_t *p;
    uint64_t now = core->now;

    for (e = core->active.next; e != &core->active; e = n) {
        n = e->next;
        p = container_of_(e, udz_peer_t, active);
        if ((p->probes != 0) && core->hooks->peer_probe_timer(core, p)) {
            continue;   /* failed: off the list */
        }
        if (p->unacked != NULL) {
            if (live_since(core, p->last_progress_live) >= core->cfg.peer_timeout_ns) {
                core->hooks->peer_fail(core, p);
                continue;
            }
            if (now - p->last_tx_ns >= rto(core, p, p->backoff)) {
                udz_stream_rto_expired(core, p);
            }
        }
        if ((p->ack_owed != 0) && ((int64_t)(now - p->ack_due_ns) >= 0)) {
            udz_stream_send_ack(core, p, 0);
        }
        if (peer_hole_open(core, p)) {
            /* a hole before kept packets: NAKed again every rto/4 (udz_nak_due) even when
             * nothing more comes, as with a full send window whose repair was lost, which
             * would otherwise wait for the sender's timer */
            udz_stream_rx_nak(core, p, 1);
        }
        if (!peer_busy(core, p)) {
            dl_del(&p->active);
        }
    }
}
