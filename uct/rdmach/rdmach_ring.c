/*
 * rdmach protocol core: the parts off the per-message path (set-up, pad, credit return, corrupt
 * records, and the many-connection poller). See rdmach_ring.h for the protocol.
 */
#include "rdmach_ring.h"

/* Messages start with the knob's name; the UCT glue adds its UCX_RDMACH_ prefix. */
const char *rdmach_geom_init(rdmach_geom_t *geom, uint32_t slot_size, uint32_t nslots,
                             size_t max_payload, double lazy_fraction)
{
    uint64_t span, lazy;

    if ((slot_size < RDMACH_CACHE_LINE) || (slot_size % RDMACH_CACHE_LINE) ||
        (slot_size > (1u << 20))) {
        return "SLOT_SIZE must be a multiple of 64 between 64 and 1m";
    }
    if ((nslots < 2) || (nslots & (nslots - 1)) || (nslots > (1u << 24))) {
        return "RING_SIZE must be a power of two between 2 and 16777216";
    }
    if ((max_payload < 64) || (max_payload > (64u << 20))) {
        return "CHUNK_SIZE must be between 64 and 64m";
    }
    if (!(lazy_fraction > 0.0) || (lazy_fraction > 1.0)) {
        return "LAZY_TAIL must be a fraction in (0, 1]";
    }

    span = (RDMACH_REC_HDR_SIZE + max_payload + slot_size - 1) / slot_size;
    lazy = (uint64_t)(lazy_fraction * nslots);
    if (lazy == 0) {
        lazy = 1;
    }
    if (span > UINT16_MAX) {
        return "CHUNK_SIZE spans more than 65535 slots: raise SLOT_SIZE";
    }
    /* A sender waiting for room for the largest record plus a pad in front of it must be
     * released by the receiver's lazy credit return: room must remain once the receiver has
     * consumed everything but not yet returned up to lazy-1 slots. */
    if ((uint64_t)nslots < lazy + 2 * span) {
        return "RING_SIZE too small for CHUNK_SIZE and LAZY_TAIL: need "
               "RING_SIZE >= LAZY_TAIL*RING_SIZE + 2*ceil((16+CHUNK_SIZE)/SLOT_SIZE)";
    }

    geom->slot_size  = slot_size;
    geom->nslots     = nslots;
    geom->max_span   = (uint32_t)span;
    geom->lazy_slots = (uint32_t)lazy;
    return NULL;
}

void rdmach_tx_init(rdmach_tx_t *tx, const rdmach_geom_t *geom, uint8_t *slots,
                    rdmach_ring_ctl_t *ctl, volatile uint8_t *doorbell,
                    volatile uint64_t *tail_copy, const rdmach_ring_ops_t *ops, void *wire_ctx)
{
    tx->slots       = slots;
    tx->ctl         = ctl;
    tx->doorbell    = doorbell;
    tx->tail_copy   = tail_copy;
    tx->head        = 0;
    tx->cached_tail = 0;
    tx->geom        = *geom;
    tx->ops         = ops;
    tx->wire_ctx    = wire_ctx;
    tx->asleep      = NULL;
    tx->fence       = 0;
}

void rdmach_tx_wake(rdmach_tx_t *tx)
{
    if ((tx->ops->wake != NULL) && __atomic_exchange_n(tx->asleep, 0, __ATOMIC_SEQ_CST)) {
        tx->ops->wake(tx->wire_ctx);
    }
}

void rdmach_tx_write_pad(rdmach_tx_t *tx, uint32_t index, uint32_t nslots)
{
    rdmach_rec_hdr_t *hdr = (rdmach_rec_hdr_t*)rdmach_tx_slot(tx, index);

    hdr->length = 0;
    hdr->nslots = (uint16_t)nslots;
    hdr->type   = RDMACH_REC_PAD;
    hdr->am_id  = 0;
    __atomic_store_n(&hdr->mark, tx->head + 1, __ATOMIC_RELEASE);
    if (tx->ops->post_record != NULL) {
        tx->ops->post_record(tx->wire_ctx, index, hdr, RDMACH_REC_HDR_SIZE, 0);
    }
    tx->head += nslots;
}

void rdmach_rx_init(rdmach_rx_t *rx, const rdmach_geom_t *geom, uint8_t *slots,
                    rdmach_ring_ctl_t *ctl, volatile uint64_t *tail_out,
                    const rdmach_ring_ops_t *ops, void *wire_ctx)
{
    memset(rx, 0, sizeof(*rx));
    rx->geom     = *geom;
    rx->slots    = slots;
    rx->ctl      = ctl;
    rx->tail_out = tail_out;
    rx->ops      = ops;
    rx->wire_ctx = wire_ctx;
    rx->active   = 1;
}

void rdmach_rx_set_hot(rdmach_rx_t *rx, uint32_t hot)
{
    rx->ctl->rx_hot = hot;
    if (rx->ops->post_hot != NULL) {
        rx->ops->post_hot(rx->wire_ctx, hot);
    }
}

void rdmach_rx_return_credit(rdmach_rx_t *rx, rdmach_rx_stats_t *stats)
{
    if (rx->ops->post_tail != NULL) {
        rx->ops->post_tail(rx->wire_ctx, rx->pos);
    } else {
        __atomic_store_n(rx->tail_out, rx->pos, __ATOMIC_RELEASE);
    }
    rx->tail_sent = rx->pos;
    stats->tail_updates++;
}

uint32_t rdmach_rx_skip_corrupt(rdmach_rx_t *rx, const rdmach_rec_hdr_t *hdr,
                                rdmach_rx_stats_t *stats)
{
    const rdmach_geom_t *geom = &rx->geom;
    uint32_t index = (uint32_t)rx->pos & (geom->nslots - 1);
    uint32_t span  = hdr->nslots;

    stats->corrupt++;
    /* skip the declared span when it stays inside the ring, else one slot: the payload of a
     * corrupt record is never read */
    return ((span >= 1) && (index + span <= geom->nslots)) ? span : 1;
}

/* ---- poller ---- */

static void rdmach_poller_promote(rdmach_poller_t *p, uint32_t id)
{
    rdmach_rx_t *rx = &p->rx[id];

    rx->idle_polls    = 0;
    rx->hot           = 1;
    rdmach_rx_set_hot(rx, 1);
    p->hot[p->nhot++] = id;
}

static int rdmach_poller_ready(rdmach_poller_t *p, uint32_t id,
                               rdmach_activate_cb_t activate, void *arg)
{
    if (RDMACH_LIKELY(p->rx[id].active)) {
        return 1;
    }
    if (!activate(arg, id)) {
        return 0;
    }
    if (p->poll_all) {
        rdmach_rx_set_hot(&p->rx[id], 1);   /* always polled: senders need no doorbell */
    }
    return 1;
}

unsigned rdmach_poller_progress(rdmach_poller_t *p, uint32_t claimed, rdmach_activate_cb_t activate,
                                rdmach_am_cb_t cb, void *arg)
{
    unsigned count = 0, n;
    uint32_t i, id, w, nwords;
    uint32_t calls = 1 + p->skipped;    /* this one, and the quiet ones before it */

    p->skipped = 0;
    if (claimed > p->max_rings) {
        claimed = p->max_rings;
    }

    if (p->poll_all) {
        for (id = 0; id < claimed; ++id) {
            if (rdmach_poller_ready(p, id, activate, arg)) {
                count += rdmach_rx_poll(&p->rx[id], p->budget, cb, arg, p->stats);
            }
        }
        return count;
    }

    /* 1. hot rings, every call; demote the ones idle for idle_limit calls */
    for (i = 0; i < p->nhot;) {
        rdmach_rx_t *rx = &p->rx[p->hot[i]];

        n = rdmach_rx_poll(rx, p->budget, cb, arg, p->stats);
        count += n;
        if (n != 0) {
            rx->idle_polls = 0;
        } else if ((rx->idle_polls += calls) >= p->idle_limit) {
            rdmach_rx_set_hot(rx, 0);
            rx->hot         = 0;
            __atomic_thread_fence(__ATOMIC_SEQ_CST);
            /* one last look narrows the race with a sender that saw rx_hot == 1; the sweep
             * covers what is left of it */
            if (rdmach_rx_poll(rx, p->budget, cb, arg, p->stats) != 0) {
                rdmach_rx_set_hot(rx, 1);
                rx->hot         = 1;
                rx->idle_polls  = 0;
            } else {
                p->hot[i] = p->hot[--p->nhot];
                continue;
            }
        }
        ++i;
    }

    /* 2. doorbells of cold rings, eight at a time */
    nwords = (claimed + 7) / 8;
    for (w = 0; w < nwords; ++w) {
        uint64_t bits = __atomic_load_n((volatile uint64_t*)p->doorbells + w, __ATOMIC_RELAXED);
        if (RDMACH_LIKELY(bits == 0)) {
            continue;
        }
        for (i = 0; i < 8; ++i) {
            id = w * 8 + i;
            if (!((bits >> (8 * i)) & 0xff) || (id >= claimed)) {
                continue;
            }
            p->doorbells[id] = 0;
            p->stats->doorbells++;
            if (!rdmach_poller_ready(p, id, activate, arg) || p->rx[id].hot) {
                continue;
            }
            if (p->nhot < p->hot_max) {
                rdmach_poller_promote(p, id);
            }
            count += rdmach_rx_poll(&p->rx[id], p->budget, cb, arg, p->stats);
        }
    }

    /* 3. sweep of cold rings: catches records that raced with a demotion */
    if ((p->sweep_count += calls) >= p->sweep_interval) {
        p->sweep_count = 0;
        for (id = 0; id < claimed; ++id) {
            if (!rdmach_poller_ready(p, id, activate, arg) || p->rx[id].hot) {
                continue;
            }
            n = rdmach_rx_poll(&p->rx[id], p->budget, cb, arg, p->stats);
            if ((n != 0) && (p->nhot < p->hot_max)) {
                rdmach_poller_promote(p, id);
            }
            count += n;
        }
    }
    return count;
}

void rdmach_poller_forget(rdmach_poller_t *p, uint32_t id)
{
    uint32_t i;

    if (p->rx[id].hot) {
        for (i = 0; i < p->nhot; ++i) {
            if (p->hot[i] == id) {
                p->hot[i] = p->hot[--p->nhot];
                break;
            }
        }
    }
    memset(&p->rx[id], 0, sizeof(p->rx[id]));
}

void rdmach_poller_sleep(rdmach_poller_t *p, uint32_t claimed)
{
    uint32_t id;

    if (claimed > p->max_rings) {
        claimed = p->max_rings;
    }
    for (id = 0; id < claimed; ++id) {
        if (p->rx[id].active) {
            rdmach_rx_set_hot(&p->rx[id], 0);
            p->rx[id].hot = 0;
        }
    }
    p->nhot = 0;
}

void rdmach_poller_wake(rdmach_poller_t *p, uint32_t claimed)
{
    uint32_t id;

    if (!p->poll_all) {
        return;
    }
    if (claimed > p->max_rings) {
        claimed = p->max_rings;
    }
    for (id = 0; id < claimed; ++id) {
        if (p->rx[id].active) {
            rdmach_rx_set_hot(&p->rx[id], 1);
        }
    }
}

int rdmach_poller_pending(const rdmach_poller_t *p, uint32_t claimed)
{
    const rdmach_rx_t *rx;
    const rdmach_rec_hdr_t *hdr;
    uint32_t id;

    if (claimed > p->max_rings) {
        claimed = p->max_rings;
    }
    for (id = 0; id < claimed; ++id) {
        rx = &p->rx[id];
        if (!rx->active) {
            if (p->doorbells[id]) {
                return 1;   /* a new sender's first record: progress sets the ring up */
            }
            continue;       /* free, or claimed with nothing sent yet */
        }
        /* an active ring: its read position is the truth (a doorbell may be stale, and
         * poll_all never clears them) */
        hdr = (const rdmach_rec_hdr_t*)(rx->slots +
                                        (size_t)(rx->pos & (rx->geom.nslots - 1)) *
                                        rx->geom.slot_size);
        if (((rx->avail != NULL) && (*rx->avail != 0)) ||
            (__atomic_load_n(&hdr->mark, __ATOMIC_ACQUIRE) == rx->pos + 1)) {
            return 1;
        }
    }
    return 0;
}
