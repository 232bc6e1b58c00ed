/*
 * rdmach protocol core: the MPICH2 "RDMA channel" FIFO (Liu, Panda et al.), without UCX and
 * without a wire.
 *
 * One ring per connection lives in the RECEIVER's memory and is written only by its one sender.
 *  - The ring is nslots fixed-size slots. A record (header + payload) spans 1..max_span
 *    consecutive slots and never wraps: when it would cross the end, the sender first writes a
 *    PAD record covering the rest of the ring.
 *  - Piggybacked head: the receiver never reads a head pointer. Each record header carries a mark
 *    (its absolute slot position + 1), stored last with release semantics; the receiver sees a new
 *    record when the mark at its expected position equals position + 1. Old laps and fresh
 *    zeroed memory can never match.
 *  - Local and remote copies of head/tail: the sender keeps head and a cached tail; the receiver
 *    keeps its position (local tail) and writes it into the sender's tail copy lazily, only after
 *    lazy_slots slots were consumed since the last update (the paper's lazy tail).
 *  - Bad input: a record whose header is inconsistent (length beyond its slots, span beyond the
 *    ring end or max_span, unknown type) is dropped and counted, its payload never read.
 *
 * A wire decides where the bytes go: on shared memory the sender stores straight into the mapped
 * remote ring (post_record == NULL); an RDMA wire builds the record in a local shadow and posts an
 * RDMA write of the span (post_record != NULL), the tail update likewise (post_tail). A wire
 * whose device may place a write's bytes in any order can gate the receiver (rx->avail): a
 * record is read only once the wire has counted it in, e.g. from the completion of an RDMA
 * write with immediate, which the device reports after the whole write is placed. These
 * hooks are the only wire calls on the message path; the rest of a wire (set-up, addresses,
 * RMA, progress) is its table in rdmach_wire.h.
 *
 * Many connections: rdmach_poller keeps the receiver's polling cost bounded. Rings with recent
 * traffic are "hot" and polled every progress call; a sender writing into a cold ring also sets
 * its doorbell byte (plain store, no atomic), and cold rings are swept every sweep_interval calls
 * as a safety net for the demotion race. The hot list is capped (hot_max): when more rings
 * are active, the rest stay cold and are found through their doorbells, eight rings per
 * 64-bit load. Cost per call: min(active, hot_max) + nrings/8 loads + nrings/sweep.
 */
#ifndef RDMACH_RING_H
#define RDMACH_RING_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ucx_ext_sys.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RDMACH_CACHE_LINE  64
#define RDMACH_REC_AM      1   /* active message: am_id + payload */
#define RDMACH_REC_PAD     2   /* filler up to the end of the ring */

#define RDMACH_LIKELY(x)   __builtin_expect(!!(x), 1)
#define RDMACH_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* Record header at the start of the first slot of a record. */
typedef struct rdmach_rec_hdr {
    uint64_t mark;    /* absolute position + 1; written last (release) */
    uint32_t length;  /* payload bytes after the header */
    uint16_t nslots;  /* slots this record spans */
    uint8_t  type;    /* RDMACH_REC_* */
    uint8_t  am_id;
} rdmach_rec_hdr_t;

#define RDMACH_REC_HDR_SIZE sizeof(rdmach_rec_hdr_t)

/* A short active message's record, header included, spans up to this many bytes whatever the
 * slot size (two 128-byte slots on shared memory): UCP's eager short stays at the size it had
 * with 256-byte slots. */
#define RDMACH_SHORT_REC_MAX 256

/* Per-ring control block in the receiver's memory, ahead of the slots. */
typedef struct rdmach_ring_ctl {
    /* written once by the sender that claims the ring, then read by the receiver */
    volatile uint64_t owner;           /* 0: free; else the sender's wire token */
    uint64_t          peer_info[3];    /* wire-specific: how to reach the sender's tail copy */
    char              pad0[RDMACH_CACHE_LINE - 4 * sizeof(uint64_t)];
    /* written by the receiver, read by the sender after each record */
    volatile uint32_t rx_hot;          /* receiver polls this ring on every progress call */
    char              pad1[RDMACH_CACHE_LINE - sizeof(uint32_t)];
} rdmach_ring_ctl_t;

/* Ring geometry; the receiver's geometry rules (a sender adopts it at connect). */
typedef struct rdmach_geom {
    uint32_t slot_size;   /* bytes per slot, multiple of 64 */
    uint32_t nslots;      /* power of two */
    uint32_t max_span;    /* slots of the largest record */
    uint32_t lazy_slots;  /* receiver returns credit after this many consumed slots */
} rdmach_geom_t;

/* A wire's per-connection hooks (ctx: the connection's wire_ctx). Tested against NULL on every
 * record, so a mapped wire pays no indirect call per message. */
typedef struct rdmach_ring_ops {
    /* NULL when the ring is mapped (stores are the write); else post the record to the peer,
     * its mark last, then the ring's doorbell byte when 'doorbell' (the ring is cold) */
    void (*post_record)(void *ctx, uint32_t index, const void *rec, size_t bytes, int doorbell);
    /* NULL when the tail copy is mapped; else post the new tail to the sender */
    void (*post_tail)(void *ctx, uint64_t tail);
    /* NULL when ctl is mapped by the sender; else post rx_hot to the sender's copy of ctl */
    void (*post_hot)(void *ctx, uint32_t hot);
    /* Wakes the receiver, which is asleep (tx->asleep set): off the message path, called
     * only after a record into a cold ring found the receiver's asleep word set */
    void (*wake)(void *ctx);
} rdmach_ring_ops_t;

/* Sender side of one connection. */
typedef struct rdmach_tx {
    uint8_t                 *slots;       /* where records are built (remote ring or shadow) */
    rdmach_ring_ctl_t       *ctl;         /* remote ring control (mapped) */
    volatile uint8_t        *doorbell;    /* this ring's doorbell byte at the receiver */
    volatile uint64_t       *tail_copy;   /* written by the receiver, in the sender's memory */
    uint64_t                head;         /* local head: next absolute slot position */
    uint64_t                cached_tail;  /* last tail read from tail_copy */
    rdmach_geom_t           geom;
    const rdmach_ring_ops_t *ops;
    void                    *wire_ctx;
    /* Wakeup (mapped rings): the receiver's asleep word, NULL when it cannot sleep; fence:
     * a full fence before looking at rx_hot, when the receiver cannot make our stores
     * visible by itself (rdmach_poller_sleep, ucx_ext_wake.h) */
    volatile uint32_t       *asleep;
    uint32_t                fence;
} rdmach_tx_t;

/* Receiver side of one connection. */
typedef struct rdmach_rx {
    uint8_t                 *slots;       /* local ring */
    rdmach_ring_ctl_t       *ctl;
    volatile uint64_t       *tail_out;    /* sender's tail copy, when mapped */
    uint64_t                pos;          /* local tail: next absolute position to read */
    uint64_t                tail_sent;    /* last tail made visible to the sender */
    uint32_t                idle_polls;   /* consecutive empty polls while hot */
    uint16_t                active;       /* claimed and set up */
    uint16_t                hot;          /* in the poller's hot list (private copy of rx_hot) */
    uint32_t                *avail;       /* records the wire counted in as fully placed;
                                           * NULL: the mark alone tells (mapped memory) */
    const rdmach_ring_ops_t *ops;
    void                    *wire_ctx;
    rdmach_geom_t           geom;         /* this ring's: rings of one receiver may differ
                                           * in length (large rings, rdmach_shm.h) */
} rdmach_rx_t;

typedef struct rdmach_rx_stats {
    uint64_t msgs, bytes, corrupt, tail_updates, doorbells;
} rdmach_rx_stats_t;

/* Their names in the transport's counters file, in field order. */
/* Empty polls after which a ring leaves the hot list (polled on every progress call); its
 * sender's doorbell brings it back. Long enough that a ping-pong peer's ring stays hot. */
#define RDMACH_IDLE_LIMIT 256

#define RDMACH_RX_COUNTERS(_) _(rx_am) _(rx_bytes) _(rx_corrupt) _(tail_updates) _(doorbells)

/* Called for each valid AM record of ring rx; data is valid only during the call. rx tells
 * the glue which ring, and so which sender as its wire knows it, wrote the record. */
typedef void (*rdmach_am_cb_t)(void *arg, const rdmach_rx_t *rx, uint8_t am_id, void *data,
                               uint32_t length);

/* ---- geometry ---- */

/* Returns NULL when valid, else a description of the first violated constraint. */
const char *rdmach_geom_init(rdmach_geom_t *geom, uint32_t slot_size, uint32_t nslots,
                             size_t max_payload, double lazy_fraction);

/* Slots a record of payload bytes takes. Most take one, and find it out without the division
 * (tens of cycles on a send's way, and the slot size need not be a power of two). */
static inline uint32_t rdmach_geom_span(const rdmach_geom_t *geom, size_t payload)
{
    if (RDMACH_LIKELY(RDMACH_REC_HDR_SIZE + payload <= geom->slot_size)) {
        return 1;
    }
    return (uint32_t)((RDMACH_REC_HDR_SIZE + payload + geom->slot_size - 1) / geom->slot_size);
}

static inline size_t rdmach_geom_ring_bytes(const rdmach_geom_t *geom)
{
    return (size_t)geom->slot_size * geom->nslots;
}

/* ---- sender ---- */

void rdmach_tx_init(rdmach_tx_t *tx, const rdmach_geom_t *geom, uint8_t *slots,
                    rdmach_ring_ctl_t *ctl, volatile uint8_t *doorbell,
                    volatile uint64_t *tail_copy, const rdmach_ring_ops_t *ops, void *wire_ctx);

static inline uint64_t rdmach_tx_free(const rdmach_tx_t *tx)
{
    return tx->geom.nslots - (tx->head - tx->cached_tail);
}

/* The receiver's tail only moves forward and never past what we sent: any other value (a
 * corrupt or hostile peer's credit write) is ignored, so such a peer stalls its own connection
 * but never makes us overwrite records it has not read. Off the fast path: only when short of
 * room. */
static inline void rdmach_tx_refresh_tail(rdmach_tx_t *tx)
{
    uint64_t tail = __atomic_load_n(tx->tail_copy, __ATOMIC_ACQUIRE);

    if ((tail - tx->cached_tail) <= (tx->head - tx->cached_tail)) {
        tx->cached_tail = tail;
    }
}

/* Slots from head to the ring end. */
static inline uint32_t rdmach_tx_to_end(const rdmach_tx_t *tx)
{
    return tx->geom.nslots - ((uint32_t)tx->head & (tx->geom.nslots - 1));
}

/* Ensures 'slots' free slots, refreshing the cached tail once if needed. */
static inline int rdmach_tx_ensure(rdmach_tx_t *tx, uint64_t slots)
{
    if (RDMACH_LIKELY(rdmach_tx_free(tx) >= slots)) {
        return 1;
    }
    rdmach_tx_refresh_tail(tx);
    return rdmach_tx_free(tx) >= slots;
}

/* Room for any record, including a pad in front of it: the condition pending_add tests. */
static inline int rdmach_tx_has_room(rdmach_tx_t *tx)
{
    return rdmach_tx_ensure(tx, 2u * tx->geom.max_span - 1);
}

static inline uint8_t *rdmach_tx_slot(const rdmach_tx_t *tx, uint32_t index)
{
    return tx->slots + (size_t)index * tx->geom.slot_size;
}

void rdmach_tx_write_pad(rdmach_tx_t *tx, uint32_t index, uint32_t nslots);

/* The receiver is asleep: the sender that takes its asleep word back to 0 wakes it. */
void rdmach_tx_wake(rdmach_tx_t *tx);

/*
 * Reserves a record of 'payload' bytes, writing a pad first if it would cross the ring end.
 * Returns the header where the caller writes the payload (at hdr + 1), or NULL when the ring
 * lacks room (the caller reports NO_RESOURCE; nothing was written).
 */
static inline rdmach_rec_hdr_t *rdmach_tx_reserve(rdmach_tx_t *tx, size_t payload)
{
    uint32_t span  = rdmach_geom_span(&tx->geom, payload);
    uint32_t index = (uint32_t)tx->head & (tx->geom.nslots - 1);
    uint32_t pad   = (index + span > tx->geom.nslots) ? tx->geom.nslots - index : 0;

    if (RDMACH_UNLIKELY(!rdmach_tx_ensure(tx, (uint64_t)span + pad))) {
        return NULL;
    }
    if (RDMACH_UNLIKELY(pad != 0)) {
        rdmach_tx_write_pad(tx, index, pad);
        index = 0;
    }
    return (rdmach_rec_hdr_t*)rdmach_tx_slot(tx, index);
}


/* Publishes a reserved record: header fields, then the mark (piggybacked head) last. */
static inline void rdmach_tx_commit(rdmach_tx_t *tx, rdmach_rec_hdr_t *hdr, uint8_t am_id,
                                    uint32_t length)
{
    uint32_t span = rdmach_geom_span(&tx->geom, length);

    hdr->length = length;
    hdr->nslots = (uint16_t)span;
    hdr->type   = RDMACH_REC_AM;
    hdr->am_id  = am_id;
    __atomic_store_n(&hdr->mark, tx->head + 1, __ATOMIC_RELEASE);
    /* a cold ring is not polled every time: ring its doorbell (plain store, the data is the
     * truth and the doorbell only a hint, so no atomic is needed) */
    if (tx->ops->post_record != NULL) {
        tx->ops->post_record(tx->wire_ctx, (uint32_t)tx->head & (tx->geom.nslots - 1), hdr,
                             RDMACH_REC_HDR_SIZE + length, !tx->ctl->rx_hot);
    } else {
        if (RDMACH_UNLIKELY(tx->fence)) {
            __atomic_thread_fence(__ATOMIC_SEQ_CST);
        }
        if (length <= RDMACH_CACHE_LINE - RDMACH_REC_HDR_SIZE) {
            ucx_ext_cpu_demote(hdr);   /* the receiver's next read: one line */
        }
        if (RDMACH_UNLIKELY(!tx->ctl->rx_hot)) {
            *tx->doorbell = 1;
            /* a receiver asleep demoted all its rings first: only a cold ring looks */
            if ((tx->asleep != NULL) && RDMACH_UNLIKELY(*tx->asleep != 0)) {
                rdmach_tx_wake(tx);
            }
        }
    }
    tx->head += span;
}

/* ---- receiver ---- */

void rdmach_rx_init(rdmach_rx_t *rx, const rdmach_geom_t *geom, uint8_t *slots,
                    rdmach_ring_ctl_t *ctl, volatile uint64_t *tail_out,
                    const rdmach_ring_ops_t *ops, void *wire_ctx);

/* Marks the ring polled on every progress call (hot) or not, where its sender looks. */
void rdmach_rx_set_hot(rdmach_rx_t *rx, uint32_t hot);

/* Makes the consumed position visible to the sender. */
void rdmach_rx_return_credit(rdmach_rx_t *rx, rdmach_rx_stats_t *stats);

/* Handles a record whose mark matched but whose header is not valid: count, skip, never read. */
uint32_t rdmach_rx_skip_corrupt(rdmach_rx_t *rx, const rdmach_rec_hdr_t *hdr,
                                rdmach_rx_stats_t *stats);

/* The record at ring position index (pos & (nslots - 1)). */
static inline rdmach_rec_hdr_t *rdmach_rx_rec(const rdmach_rx_t *rx, uint32_t index)
{
    return (rdmach_rec_hdr_t*)(rx->slots + (size_t)index * rx->geom.slot_size);
}

/* 1 if hdr, the record at rx's position, has been written and may be taken (the RC wire's
 * avail count says the data behind the mark has landed). */
static inline int rdmach_rx_has(const rdmach_rx_t *rx, const rdmach_rec_hdr_t *hdr)
{
    return ((rx->avail == NULL) || (*rx->avail != 0)) &&
           (__atomic_load_n(&hdr->mark, __ATOMIC_ACQUIRE) == rx->pos + 1);
}

/* 1 if ring rx's next record is there (what rdmach_rx_poll would take first). */
static inline int rdmach_rx_ready(const rdmach_rx_t *rx)
{
    return rdmach_rx_has(rx, rdmach_rx_rec(rx, (uint32_t)rx->pos & (rx->geom.nslots - 1)));
}

/* Takes hdr, the record at rx's position (index), which rdmach_rx_has said is there: delivers
 * a valid AM record through cb, skips a pad, counts and skips a corrupt one (never read), and
 * returns the tail credit every lazy_slots slots. The one decoder of a record, inlined into
 * both ways of taking one (rdmach_rx_poll, rdmach_poller_one). */
static inline void rdmach_rx_take(rdmach_rx_t *rx, rdmach_rec_hdr_t *hdr, uint32_t index,
                                  rdmach_am_cb_t cb, void *arg, rdmach_rx_stats_t *stats)
{
    const rdmach_geom_t *geom = &rx->geom;
    uint32_t span, length;

    if (rx->avail != NULL) {
        --*rx->avail;
    }
    span   = hdr->nslots;
    length = hdr->length;
    if (RDMACH_UNLIKELY((span == 0) || (span > geom->max_span) ||
                        (index + span > geom->nslots) ||
                        (RDMACH_REC_HDR_SIZE + (uint64_t)length >
                         (uint64_t)span * geom->slot_size) ||
                        (hdr->type != RDMACH_REC_AM))) {
        if ((hdr->type == RDMACH_REC_PAD) && (index + span == geom->nslots) && (span != 0)) {
            rx->pos += span;   /* a valid pad: skip to the ring start */
        } else {
            rx->pos += rdmach_rx_skip_corrupt(rx, hdr, stats);
        }
    } else {
        cb(arg, rx, hdr->am_id, hdr + 1, length);
        rx->pos += span;
        stats->msgs++;
        stats->bytes += length;
    }
    if (rx->pos - rx->tail_sent >= geom->lazy_slots) {
        rdmach_rx_return_credit(rx, stats);
    }
}

/* Delivers at most 'budget' records. Returns the number of records consumed. */
static inline unsigned rdmach_rx_poll(rdmach_rx_t *rx, unsigned budget, rdmach_am_cb_t cb,
                                      void *arg, rdmach_rx_stats_t *stats)
{
    unsigned count = 0;

    while (count < budget) {
        uint32_t index        = (uint32_t)rx->pos & (rx->geom.nslots - 1);
        rdmach_rec_hdr_t *hdr = rdmach_rx_rec(rx, index);

        if (!rdmach_rx_has(rx, hdr)) {
            break;
        }
        rdmach_rx_take(rx, hdr, index, cb, arg, stats);
        ++count;
    }
    return count;
}

/* Delivers what the sender of ring rx wrote before it went, at most one lap of records (each
 * takes a slot): "gone" includes the sender's own word that it closed, and one that says so
 * and writes on must not hold the receiver here. Returns the number of records consumed. */
static inline unsigned rdmach_rx_drain(rdmach_rx_t *rx, rdmach_am_cb_t cb, void *arg,
                                       rdmach_rx_stats_t *stats)
{
    return rdmach_rx_poll(rx, rx->geom.nslots, cb, arg, stats);
}

/* ---- many connections: bounded polling ---- */

typedef struct rdmach_poller {
    rdmach_rx_t      *rx;            /* [max_rings] receiver state, by ring id */
    uint32_t         *hot;           /* ring ids polled every call */
    uint32_t         nhot;
    uint32_t         hot_max;        /* cap: more active rings are served by doorbells */
    uint32_t         nknown;         /* rings 0..nknown-1 were seen claimed */
    uint32_t         max_rings;
    volatile uint8_t *doorbells;     /* [max_rings], in the receiver's shared memory */
    uint32_t         sweep_interval; /* progress calls between sweeps of cold rings */
    uint32_t         sweep_count;
    uint32_t         idle_limit;     /* empty polls before a hot ring is demoted */
    uint32_t         budget;         /* records per ring per call */
    int              poll_all;       /* the paper's way: every ring on every call */
    rdmach_rx_stats_t *stats;
    uint32_t         skipped;        /* calls rdmach_poller_look answered without the walk
                                      * since the last: the walk counts them in */
    uint32_t         took;           /* the last call that looked took a record */
} rdmach_poller_t;

/* rdmach_poller_look lets at most this many calls in a row go by without the walk
 * (rdmach_poller_progress), so that sweeps, demotions and the glue's periodic work still come
 * (late by at most this many calls). */
#define RDMACH_POLL_QUIET_MAX 16

typedef enum {
    RDMACH_POLL_QUIET,  /* nothing to do: the walk would find nothing */
    RDMACH_POLL_ONE,    /* the only hot ring has a record, and nothing else waits */
    RDMACH_POLL_WALK    /* run rdmach_poller_progress */
} rdmach_poll_look_t;

/*
 * The first look of a progress call. The walk (rdmach_poller_progress) goes over the hot
 * rings, the doorbells and the counts of demotion and sweeping, about 100 instructions when it
 * finds nothing and as many before it hands a record over; UCX's posix answers an empty poll
 * in about 40. A spinning receiver finds a record half a poll late on average, and a process
 * that polls several transports (rdmach,ud_zcopy) pays for an idle one on every call (the
 * latency on this machine did not move: perf/RESULTS.md). This reads the doorbells and the hot
 * rings' next records and nothing else. QUIET and ONE count the call as skipped (the next walk
 * counts skipped calls into demotion and sweep), and every RDMACH_POLL_QUIET_MAX-th call walks.
 */
static inline rdmach_poll_look_t rdmach_poller_look(rdmach_poller_t *p, uint32_t claimed)
{
    uint32_t i, w, nwords;

    if (p->poll_all || (p->skipped >= RDMACH_POLL_QUIET_MAX - 1)) {
        return RDMACH_POLL_WALK;
    }
    nwords = ((claimed < p->max_rings ? claimed : p->max_rings) + 7) / 8;
    for (w = 0; w < nwords; ++w) {
        if (__atomic_load_n((volatile uint64_t*)p->doorbells + w, __ATOMIC_RELAXED) != 0) {
            return RDMACH_POLL_WALK;
        }
    }
    for (i = 0; i < p->nhot; ++i) {
        if (rdmach_rx_ready(&p->rx[p->hot[i]])) {
            /* with more hot rings the walk takes them in turn */
            return (p->nhot == 1) ? RDMACH_POLL_ONE : RDMACH_POLL_WALK;
        }
    }
    ++p->skipped;
    p->took = 0;
    return RDMACH_POLL_QUIET;
}

/* After RDMACH_POLL_ONE: the only hot ring's records, as the walk would take them. The record
 * the look found is taken without a second look, and the ring is polled on for more only when
 * the call before took records too: an answer in a ping-pong comes alone, and looking at the
 * next slot before returning to the caller, who is to answer it, only delays the answer (as
 * UCX's mm polls its FIFO on only while it keeps finding elements). */
static inline unsigned rdmach_poller_one(rdmach_poller_t *p, rdmach_am_cb_t cb, void *arg)
{
    rdmach_rx_t *rx = &p->rx[p->hot[0]];
    uint32_t index  = (uint32_t)rx->pos & (rx->geom.nslots - 1);
    unsigned more   = p->took && (p->budget > 1);

    ++p->skipped;
    rx->idle_polls = 0;
    p->took        = 1;
    rdmach_rx_take(rx, rdmach_rx_rec(rx, index), index, cb, arg, p->stats);
    return more ? 1 + rdmach_rx_poll(rx, p->budget - 1, cb, arg, p->stats) : 1;
}

/* Sets up a newly claimed ring; returns 0 if it is not ready yet. Provided by the glue. */
typedef int (*rdmach_activate_cb_t)(void *arg, uint32_t ring_id);

unsigned rdmach_poller_progress(rdmach_poller_t *p, uint32_t claimed, rdmach_activate_cb_t activate,
                                rdmach_am_cb_t cb, void *arg);

/* Forgets ring id (its sender has gone and it is drained): out of the hot list, inactive, so
 * that a new sender's claim of it is set up afresh. */
void rdmach_poller_forget(rdmach_poller_t *p, uint32_t id);

/*
 * Wakeup. Before the receiver sleeps, every ring goes cold (rx_hot = 0), so that a sender's
 * next record looks at the receiver's asleep word (rdmach_tx_commit); the wire then sets that
 * word and makes the senders' stores visible, and the receiver looks once more
 * (rdmach_poller_pending): a record that went in before is seen there, one that comes after
 * wakes it. rdmach_poller_wake puts poll_all's rings back to always-polled; others come
 * back hot through their doorbells, as after an idle spell.
 */
void rdmach_poller_sleep(rdmach_poller_t *p, uint32_t claimed);
void rdmach_poller_wake(rdmach_poller_t *p, uint32_t claimed);

/* 1 if anything waits: a record at an active ring's read position, or the doorbell of a ring
 * not set up yet (a new sender's first record). */
int rdmach_poller_pending(const rdmach_poller_t *p, uint32_t claimed);

#ifdef __cplusplus
}
#endif

#endif
