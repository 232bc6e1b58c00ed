/*
 * ud_zcopy protocol core, the dispatch (see udz_core.h for the design, udz_core_int.h for how
 * the core is split): progress receives on the control endpoint and the busy data channels,
 * decodes and validates every control datagram and hands it to its part, lets the owner stream,
 * and runs each part's timers. Flush, idle and the life cycle are here too.
 */
#include "udz_core_int.h"

void udz_core_set_time(udz_core_t *core, uint64_t now_ns) { core->now = now_ns; }
void udz_core_rx_hold(udz_core_t *core, int hold) { core->rx_hold = hold; }

/* ---- receiving on the control endpoint ---- */

static int len_ok(uint8_t type, size_t len)
{
    switch (type) {
    case UDZ_T_AM:    return 1;
    case UDZ_T_PUT:   return len >= sizeof(udz_put_t);
    case UDZ_T_ZREQ:  return len == sizeof(udz_zreq_t);
    case UDZ_T_ZFIN:  return len == sizeof(udz_zfin_t);
    case UDZ_T_ACK:   return len == 0;
    case UDZ_T_ZACK:  return (len >= UDZ_ZACK_LEN(1)) && (len <= UDZ_ZACK_LEN(UDZ_ZACK_WORDS)) &&
                             ((len - UDZ_ZACK_LEN(0)) % 8 == 0);
    case UDZ_T_ZDONE: return len == 0;
    case UDZ_T_ZERR:  return len == sizeof(udz_zerr_t);
    case UDZ_T_CHAL:  return len == sizeof(udz_chal_t);
    default:          return 0;
    }
}

/* A reliable datagram, in order: its payload to the user, the memory or the owner. */
static void deliver(udz_core_t *core, udz_peer_t *p, udz_hdr_t *h)
{
    void *payload = h + 1;
    const udz_put_t *put;
    void *dst;

    switch (h->type) {
    case UDZ_T_AM:
        core->cnt->rx_am++;
        core->cnt->rx_bytes += h->len;
        core->cnt->rx_copy_bytes += h->len;
        core->uops->am(core->user, p, h->am_id, payload, h->len);
        break;
    case UDZ_T_PUT:
        put = payload;
        if (h->len == sizeof(*put)) {
            break;      /* an empty put: nothing to write, its key is not looked up */
        }
        dst = core->uops->mem(core->user, put->addr, h->len - sizeof(*put), put->rkey, 1);
        if (dst == NULL) {
            core->cnt->zreq_refused++;
        } else {
            memcpy(dst, put + 1, h->len - sizeof(*put));
            core->cnt->rx_bytes += h->len - sizeof(*put);
            core->cnt->rx_copy_bytes += h->len - sizeof(*put);
        }
        break;
    case UDZ_T_ZREQ:
        udz_ztx_on_zreq(core, p, payload);
        break;
    case UDZ_T_ZFIN:
        udz_ztx_end(core, p, ((const udz_zfin_t*)payload)->xfer_id);
        break;
    }
}

/* Validates one control datagram and acts on it. */
static void rx_ctrl(udz_core_t *core, udz_rxmsg_t *m)
{
    udz_hdr_t *h = m->iov[0].iov_base;
    udz_skb_t *kept;
    udz_peer_t *p;

    if (m->unreach) {
        /* nothing listens at that address any more, says the wire: a hint, not proof (it
         * carries no cookie, anybody can forge it), so the peer is probed (udz_peer.c) */
        core->cnt->icmp_hints++;
        p = peer_lookup(core, &m->src);
        if (p != NULL) {
            udz_peer_probe_start(core, p);
        }
        return;
    }
    if (m->trunc || (m->len < UDZ_HDR_LEN) || (h->magic != UDZ_MAGIC) ||
        (h->version != UDZ_VERSION) || (m->len != UDZ_HDR_LEN + (size_t)h->len) ||
        !len_ok(h->type, h->len)) {
        core->cnt->rx_corrupt++;
        return;
    }
    if (h->dst_cookie != core->cookie) {
        core->cnt->rx_foreign++;
        return;
    }
    p = peer_lookup(core, &m->src);
    if ((p != NULL) && (p->cookie != h->src_cookie) && (h->src_cookie == p->prev_cookie)) {
        /* a late datagram of the incarnation p replaced (still in the network, reordered):
         * without this check it would be taken for yet another restart and fail the live
         * incarnation (unit test UdzFail.OldIncarnationLateDatagramsDoNotKillNewOne) */
        core->cnt->rx_foreign++;
        return;
    }
    if ((p != NULL) && (p->cookie != h->src_cookie)) {
        /* the sender restarted at this address: the old incarnation is gone */
        p = udz_peer_get_nochal(core, &m->src, h->src_cookie);
    } else if (p == NULL) {
        if ((h->type != UDZ_T_CHAL) && ((h->type > UDZ_T_RELIABLE_MAX) || (h->psn != 1))) {
            /* a stranger's first word is a CHAL (its udz_peer_get) or its first packet: any
             * other is late (a freed record's) or forged, and must not cost us a record */
            core->cnt->rx_stranger++;
            return;
        }
        p = udz_peer_create(core, &m->src, h->src_cookie);
    }
    if ((p == NULL) || p->failed) {
        core->cnt->rx_foreign++;
        return;
    }
    peer_heard(core, p);    /* our cookie and the peer's: it is alive (answers a probe) */
    udz_stream_acked(core, p, h->ack, (h->type == UDZ_T_ACK) ? h->flags : 0,
                     (h->type == UDZ_T_ACK) ? h->psn : 0);
    if (p->failed) {
        return;
    }

    if (h->type <= UDZ_T_RELIABLE_MAX) {
        if (__builtin_expect(core->rx_hold, 0)) {
            /* not taken: it stays in the sender's window; one BUSY ack per batch says why */
            core->cnt->rx_held++;
            if (!p->ack_now && (core->nack < core->cfg.rx_batch)) {
                p->ack_now = 1;
                p->busy    = 1;
                core->acklist[core->nack++] = p;
            }
            return;
        }
        if (udz_stream_rx(core, p, h)) {
            deliver(core, p, h);
            /* kept packets only after a loss: a clean stream tests one pointer here */
            while ((p->kept != NULL) && !p->failed &&
                   ((kept = udz_stream_rx_next(core, p)) != NULL)) {
                deliver(core, p, (udz_hdr_t*)kept->data);   /* came after a hole, now in order */
                udz_stream_rx_put(core, kept);
            }
        }
        if (p->ack_now && (core->nack < core->cfg.rx_batch)) {
            core->acklist[core->nack++] = p;    /* acked once after the batch */
        }
        return;
    }

    if ((h->flags & UDZ_F_ACK_REQ) && (h->type == UDZ_T_ACK) && (core->nack < core->cfg.rx_batch)) {
        p->ack_now = 1;     /* a flushing sender asks where we are */
        core->acklist[core->nack++] = p;
    }
    switch (h->type) {
    case UDZ_T_ZACK:
        udz_ztx_on_zack(core, p, (udz_zack_t*)(h + 1), (h->len - UDZ_ZACK_LEN(0)) / 8, h->flags);
        break;
    case UDZ_T_ZDONE:
        udz_ztx_end(core, p, h->psn);
        break;
    case UDZ_T_ZERR:
        udz_zrx_on_zerr(core, p, (const udz_zerr_t*)(h + 1));
        break;
    case UDZ_T_CHAL:
        udz_peer_on_chal(core, p, (const udz_chal_t*)(h + 1));
        break;
    }
}

/* ---- progress ---- */

/* Points the first n control slots at the core's own areas again. */
static void rx_slots_reset(udz_core_t *core, int n)
{
    int j;

    for (j = 0; j < n; ++j) {
        core->rxmsgs[j].iov[0].iov_base = core->rxbuf + (size_t)j * core->cfg.seg_size;
        core->rxmsgs[j].iov[0].iov_len  = core->cfg.seg_size;
    }
}

unsigned udz_core_progress(udz_core_t *core, uint64_t now_ns)
{
    unsigned count = 0, i;
    int n, j;

    core_clock(core, now_ns);
    hold_flush(core);   /* what was held since the last call goes before anything else */
    n = core->wops->recv(core->wire, core->rxmsgs, (int)core->cfg.rx_batch);
    if (n > 0) {
        core->nack = 0;
        for (j = 0; j < n; ++j) {
            rx_ctrl(core, &core->rxmsgs[j]);
        }
        for (i = 0; i < core->nack; ++i) {
            if (core->acklist[i]->ack_now && !core->acklist[i]->failed) {
                udz_stream_send_ack(core, core->acklist[i],
                                    core->acklist[i]->busy ? UDZ_F_BUSY : 0);
            }
            core->acklist[i]->busy = 0;
        }
        core->nack = 0;
        count += (unsigned)n;
        rx_slots_reset(core, n);    /* the wire may have lent its own buffers to them */
    }
    if (core->zrx_busy > 0) {
        for (i = 0; i < core->cfg.channels; ++i) {
            if (core->zrx[i].peer != NULL) {
                count += udz_zrx_poll(core, &core->zrx[i]);
            }
        }
    }
    if (core->ztx_active != NULL) {
        count += udz_ztx_pump(core);
    }
    /* each part's timers, in this order: a peer the stream fails fails its transfers first */
    if (core->active.next != &core->active) {
        udz_stream_timers(core);
    }
    if (core->zrx_busy > 0) {
        udz_zrx_timers(core);
    }
    if (core->ztx_active != NULL) {
        udz_ztx_timers(core);
    }
    if (__builtin_expect(core->cfg.peer_idle_ns != 0, 1) &&
        (live_since(core, core->idle_scan_live) >= peer_idle_scan_ns(core))) {
        udz_peer_idle_sweep(core);      /* records of peers gone while no ep held them */
    }
    hold_flush(core);   /* and what the user's callbacks sent meanwhile */
    if (core->dead != NULL) {
        udz_peer_reclaim(core);
    }
    return count;
}

/* ---- flush ---- */

int udz_flush_done(udz_core_t *core, udz_peer_t *peer, uint64_t *token, int start)
{
    uint32_t psn, gseq;

    if (start) {
        udz_core_tx_flush(core);    /* a flush waits for acks: what is held must go */
        *token = ((uint64_t)(peer->next_psn - 1) << 32) | peer->get_seq;
        if ((peer->unacked != NULL) && !peer->failed) {
            udz_stream_send_ack(core, peer, UDZ_F_ACK_REQ);   /* do not wait for the delayed ack */
        }
    }
    if (peer->failed) {
        return 1;
    }
    psn  = (uint32_t)(*token >> 32);
    gseq = (uint32_t)*token;
    if ((peer->unacked != NULL) && seq_le(peer->unacked->psn, psn)) {
        return 0;
    }
    return udz_zrx_flushed(core, peer, gseq);
}

unsigned udz_core_gets_in_flight(const udz_core_t *core)
{
    return core->zrx_busy;
}

int udz_core_idle(const udz_core_t *core)
{
    const udz_dlist_t *e;
    const udz_peer_t *p;

    if (core->zrx_busy > 0) {
        return 0;
    }
    for (e = core->active.next; e != &core->active; e = e->next) {
        p = container_of_(e, udz_peer_t, active);
        if (p->unacked != NULL) {
            return 0;
        }
    }
    return 1;
}

int udz_core_sends_acked(udz_core_t *core, int ask)
{
    const udz_dlist_t *e;
    udz_peer_t *p;
    int acked = 1;

    if (ask) {
        udz_core_tx_flush(core);    /* what is held for coalescing must go to be acked */
    }
    for (e = core->active.next; e != &core->active; e = e->next) {
        p = container_of_(e, udz_peer_t, active);
        if ((p->unacked == NULL) || p->failed) {
            continue;               /* a failed peer's sends end with an error, not an ack */
        }
        acked = 0;
        if (!ask) {
            break;
        }
        udz_stream_send_ack(core, p, UDZ_F_ACK_REQ);
    }
    return acked;
}

int udz_core_probing(const udz_core_t *core)
{
    return core->probing != 0;
}

int udz_core_quiet(const udz_core_t *core)
{
    return (core->zrx_busy == 0) && (core->ztx_active == NULL) && (core->hold_n == 0) &&
           (core->active.next == &core->active) && (core->wops->rx_idle != NULL) &&
           core->wops->rx_idle(core->wire);
}

unsigned udz_core_npeers(const udz_core_t *core)
{
    return core->npeers;
}

unsigned udz_core_drain_idle(udz_core_t *core)
{
    unsigned n = udz_zrx_drain_idle(core);

    hold_flush(core);   /* the ZDONEs it sent */
    return n;
}

/* ---- life cycle ---- */

/* The parts' calls into each other's failure (udz_core_int.h says why they are hooks): this
 * file calls every part anyway, so naming them here ties no two files both ways. */
static const udz_core_hooks_t udz_core_hooks = {
    .peer_fail        = udz_peer_fail,
    .peer_probe_timer = udz_peer_probe_timer,
    /* the order udz_peer_fail ends them in, and the user sees their completions in: the
     * stream's packets, then the gets, then the transfers served */
    .peer_failed      = {udz_stream_peer_failed, udz_zrx_peer_failed, udz_ztx_peer_failed},
};

udz_core_t *udz_core_create(const udz_config_t *cfg, const udz_wire_ops_t *wire_ops,
                            void *wire, const udz_user_ops_t *user_ops, void *user,
                            uint64_t cookie, udz_counters_t *counters, int *err)
{
    udz_core_t *core;
    unsigned batch;

    if ((cfg->seg_size < UDZ_HDR_LEN + 64) || (cfg->seg_size > wire_ops->max_dgram) ||
        (cfg->chunk_size == 0) || (cfg->chunk_size + UDZ_HDR_LEN > wire_ops->max_dgram) ||
        (cfg->tx_window == 0) || (cfg->tx_window > 32768) || (cfg->tx_pool < cfg->tx_window) ||
        (cfg->tx_window_min > cfg->tx_window) ||
        (cfg->channels == 0) || (cfg->channels > UDZ_MAX_CHANNELS) || (cfg->rx_batch == 0) ||
        (cfg->rx_batch > UDZ_BATCH_MAX) || (cfg->zc_max < cfg->chunk_size) ||
        (cfg->ack_every == 0) ||
        (cfg->rto_ns == 0) || (cfg->rto_max_ns < cfg->rto_ns) || (cfg->max_peers == 0) ||
        (cfg->zc_max / cfg->chunk_size > (64u << 20)) ||
        ((cfg->chunk_max != 0) && ((cfg->chunk_max < cfg->chunk_size) ||
                                   (cfg->chunk_max + UDZ_HDR_LEN > wire_ops->max_dgram)))) {
        *err = -EINVAL;
        return NULL;
    }
    core = calloc(1, sizeof(*core));
    if (core == NULL) {
        *err = -ENOMEM;
        return NULL;
    }
    core->hooks    = &udz_core_hooks;
    core->cfg      = *cfg;
    if ((cfg->chunk_max == 0) || (wire_ops->path_mtu == NULL) || wire_ops->posts_ahead) {
        /* no path beyond the device's, or receives posted ahead in chunk_size pieces */
        core->cfg.chunk_max = cfg->chunk_size;
    }
    core->wops     = wire_ops;
    core->wire     = wire;
    core->uops     = user_ops;
    core->user     = user;
    core->cnt      = counters;
    core->cookie   = cookie;
    batch          = cfg->rx_batch;
    core->rxbuf    = aligned_alloc(64, ((batch * cfg->seg_size) + 63) & ~(size_t)63);
    core->rxmsgs   = calloc(batch, sizeof(*core->rxmsgs));
    core->acklist  = calloc(batch, sizeof(*core->acklist));
    if ((udz_peer_table_init(core) != 0) || (udz_stream_init(core) != 0) ||
        (udz_zrx_init(core) != 0) || (udz_ztx_init(core) != 0) || (core->rxbuf == NULL) ||
        (core->rxmsgs == NULL) || (core->acklist == NULL)) {
        udz_core_destroy(core);
        *err = -ENOMEM;
        return NULL;
    }
    rx_slots_reset(core, (int)batch);
    counters->peer_state_bytes += (core->hmask + 1) * sizeof(udz_peer_t*);
    return core;
}

void udz_core_destroy(udz_core_t *core)
{
    udz_peer_t *p;
    udz_dlist_t *e;

    if (core == NULL) {
        return;
    }
    hold_flush(core);   /* held packets go: the peer may still take them */
    /* what we received and still owe an ack for (delayed acks) is acked now: a peer's flush
     * of its last message to us completes, rather than failing when it finds us gone */
    for (e = core->all.next; e != &core->all; e = e->next) {
        p = container_of_(e, udz_peer_t, all);
        if (!p->failed && (p->ack_owed != 0)) {
            udz_stream_send_ack(core, p, 0);
        }
    }
    udz_peer_table_cleanup(core);
    udz_stream_cleanup(core);
    udz_ztx_cleanup(core);
    udz_zrx_cleanup(core);
    free(core->rxbuf);
    free(core->rxmsgs);
    free(core->acklist);
    free(core);
}
