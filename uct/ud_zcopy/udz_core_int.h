/*
 * ud_zcopy protocol core, internal: the state every part of the core shares and the calls they
 * make into each other. Not for the glue or the wires (they see udz_core.h and udz_wire.h).
 *
 * The core is split by mechanism, each part owning its state, its datagrams and its timers:
 *  - udz_peer.c    the peer table: hash, create/lookup, incarnations, peer failure;
 *  - udz_stream.c  the reliable stream per peer, sending: send buffers, coalescing, window,
 *                  acks and NAKs out and in, repairs (a hole by its range, go-back), RTO/RTT;
 *  - udz_stream_rx.c  its receive side: delivery in order, packets kept after a hole, the NAK
 *                  that names the hole (sent through udz_stream.c, which never calls in);
 *  - udz_stream_timers.c  both sides' timers and a failed peer's packets;
 *  - udz_zrx.c     zero-copy receive (the requester): data channels, ZREQ, ZACKs, repair gate,
 *                  stuck timer;
 *  - udz_ztx.c     zero-copy send (the owner): ZREQ handling, streaming, repair, ZDONE/ZERR;
 *  - udz_core.c    the dispatch: progress, decoding and validating control datagrams, the
 *                  timer dispatch, flush, life cycle.
 * Who calls whom (tests/docs/layout: no two files use each other's symbols): udz_core.c calls
 * every part; udz_zrx.c and udz_ztx.c call the peer table and the stream; the peer table calls
 * the stream (its challenges and probes are stream datagrams); the stream calls none of them.
 * What goes the other way is a peer's failure: the stream fails a peer (its timeout, its last
 * probe unanswered) and runs its probe timer, and a failure reaches every part. Those calls go
 * through the hooks udz_core.c sets (udz_core_hooks_t): a slow path, one indirect call each;
 * nothing a datagram passes through calls one.
 * Single-threaded: the UCT glue calls the core under the worker's progress, so no locks.
 * Small helpers that the per-datagram paths call across parts are static inline here, so that
 * the split costs those paths no calls.
 */
#ifndef UDZ_CORE_INT_H
#define UDZ_CORE_INT_H

#include "udz_core.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ---- small helpers ---- */

typedef struct udz_dlist {
    struct udz_dlist *prev, *next;
} udz_dlist_t;

static inline void dl_init(udz_dlist_t *l) { l->prev = l->next = l; }
static inline int dl_linked(const udz_dlist_t *e) { return e->next != NULL && e->next != e; }
static inline void dl_add(udz_dlist_t *head, udz_dlist_t *e)
{
    e->next = head;
    e->prev = head->prev;
    head->prev->next = e;
    head->prev = e;
}
static inline void dl_del(udz_dlist_t *e)
{
    e->prev->next = e->next;
    e->next->prev = e->prev;
    e->prev = e->next = e;
}

#define container_of_(_p, _t, _m) ((_t*)((char*)(_p) - offsetof(_t, _m)))

static inline int seq_lt(uint32_t a, uint32_t b) { return (int32_t)(a - b) < 0; }
static inline int seq_le(uint32_t a, uint32_t b) { return (int32_t)(a - b) <= 0; }

#define UDZ_BACKOFF_MAX 16
#define UDZ_RTO_INIT_NS (20ull * 1000 * 1000)   /* before the first round-trip sample */
#define UDZ_REPAIR_GATE_MIN_NS (50ull * 1000)     /* a resent chunk gets at least 50 us */
/* Datagrams one receive or send call of the core handles at most: rx_batch's bound, the
 * zero-copy receive slots per poll and a transfer's send batch (arrays of this size). */
#define UDZ_BATCH_MAX   64
/* Zero-copy chunks one send call may take (ztx_batch): two UDP GSO runs of 1,472-byte
 * datagrams (88 = 2 x 44) fit, within the UDP wire's sendmmsg (UDZ_UDP_BATCH messages, 5
 * iovecs each). */
#define UDZ_ZTX_BATCH_MAX 128
/* Transfers one peer may have served at once: a requester has a transfer per data channel in
 * use and at most UDZ_MAX_CHANNELS channels (its ZFIN, reliable, ends one before the ZREQ that
 * reuses the channel), so an honest peer never has more; a ZREQ beyond is refused (ZERR) and
 * counted (zreq_capped), and memory per peer stays bounded whatever it sends. */
#define UDZ_ZTX_PER_PEER UDZ_MAX_CHANNELS
/* Freed transfer records kept for the next ZREQs (one peer's worth); more are freed, so that
 * what a burst of requests from many peers made does not stay allocated (udz_ztx.c ztx_free). */
#define UDZ_ZTX_FREE_MAX UDZ_ZTX_PER_PEER

/* ---- objects ---- */

/* A reliable packet kept until acked: header + inline payload, plus by-reference pieces. */
typedef struct udz_skb {
    struct udz_skb *next;
    uint32_t        psn;
    uint32_t        len;            /* header + inline payload */
    uint64_t        sent_ns;        /* first transmission, or its last repair */
    int             retx;           /* retransmitted: no round-trip sample from its ack */
    int             iovcnt;
    int             has_ctx;        /* a by-reference send: send_done(ctx) when acked */
    struct iovec    iov[UDZ_MAX_IOV];
    void           *ctx;
    uint64_t        data[];         /* udz_hdr_t + payload, 8-byte aligned */
} udz_skb_t;

struct udz_peer {
    udz_addr_t   addr;
    uint64_t     cookie;            /* the peer iface's cookie (dst_cookie of our datagrams) */
    uint64_t     prev_cookie;       /* the incarnation this one replaced (0: none) */
    udz_peer_t  *hnext;             /* hash chain; core->dead once reaped */
    udz_dlist_t  all;               /* core->all: every record not freed yet, for destroy */
    void        *user;
    udz_dlist_t  active;            /* on core->active while it has timers to run */
    udz_skb_t   *unacked, *unacked_tail;
    uint64_t     last_progress_live; /* live clock when it last acked something new */
    uint64_t     last_tx_ns;        /* last (re)transmission of the oldest unacked packet */
    uint64_t     ack_due_ns;        /* when the owed ack must go at the latest */
    uint32_t     nak_us;            /* when we last NAKed / went back on a NAK (microseconds,
                                     * wrapping: only differences up to an RTO matter) */
    uint32_t     window8;           /* adaptive send window in eighths of a packet (0: the
                                     * largest; peer_window in udz_stream.c) */
    uint32_t     next_psn;          /* next psn to send */
    uint32_t     rx_expected;       /* next psn to deliver */
    uint32_t     get_seq;           /* gets issued, for flush */
    uint32_t     srtt_us;           /* smoothed round trip (0: no sample yet) */
    uint32_t     rttvar_us;
    uint16_t     unacked_count;
    uint16_t     ack_owed;          /* delivered packets not yet acked */
    uint8_t      backoff : 7;
    uint8_t      sacked  : 1;       /* it named a hole (UDZ_F_SACK): it keeps what comes after
                                     * one, so a timer probes instead of going back */
    uint8_t      failed  : 1;
    uint8_t      ack_now : 1;
    uint8_t      hashed  : 1;
    uint8_t      probes  : 2;       /* probes left while an unreachable report is checked
                                     * (0: none running; udz_peer_probe_start in udz_peer.c) */
    uint8_t      valid   : 1;       /* it echoed chal: it receives at addr (udz_peer.c) */
    uint8_t      reaped  : 1;       /* failed and held by nobody: on core->dead, freed at the
                                     * end of progress (peer_reap) */
    uint8_t      busy    : 1;       /* we held back a packet of it (rx_hold): the ack says so */
    uint16_t     probe_ms;          /* live clock of the last probe, milliseconds, wrapping
                                     * (only differences up to a few gaps matter): flags and
                                     * stamp take the 3 bytes the flags had, so the record
                                     * keeps its size */
    uint32_t     zchunk;            /* payload bytes of our gets' chunks from this peer, as
                                     * the path allows (0: not asked yet; zrx_peer_chunk) */
    uint64_t     chal;              /* the random value it must echo before we serve its ZREQs
                                     * (udz_peer_chal_send) */
    struct udz_ztx *ztx;            /* transfers we serve it (udz_ztx.c), at most
                                     * UDZ_ZTX_PER_PEER: a ZACK finds its own among these */
    uint32_t     ztx_n;
    uint32_t     nak_psn;           /* the hole our last NAK named: a new hole is NAKed at
                                     * once, the same one again every rto/4 */
    uint64_t     heard_live;        /* live clock when a datagram of it last came (or it was
                                     * made, or last probed as idle): udz_peer_idle_sweep */
    udz_chans_t  chans;             /* the data channels its address announced (an ep's
                                     * udz_peer_get): where we send what it asks for */
    uint32_t     refs;              /* holds of the glue (udz_peer_get, udz_peer_hold): a
                                     * failed record is freed once there are none */
    udz_skb_t   *kept;              /* out-of-order packets kept (udz_stream_rx.c): the last of a
                                     * ring ordered by psn, whose next is the first */
};

/* Receive side of one zero-copy transfer on one data channel. */
typedef struct udz_zrx {
    udz_peer_t *peer;               /* NULL: channel free */
    void       *ctx;
    struct udz_skb *fin;            /* reserved at issue: the ZFIN always has a buffer */
    uint8_t    *buf;
    size_t      len;
    uint64_t   *bitmap;             /* chunk received */
    uint64_t    last_rx_ns;
    uint64_t    last_rx_live;       /* live clock of the last datagram (peer timeout) */
    uint64_t    zack_ns;
    uint32_t    xfer_id;
    uint32_t    chunk;              /* payload bytes per chunk (the peer's zchunk) */
    uint32_t    batch;              /* receive slots one poll offers (zrx_batch_for) */
    uint32_t    nchunks;
    uint32_t    received;
    uint32_t    cum;                /* lowest chunk missing */
    uint32_t    top;                /* one past the highest chunk received */
    uint32_t    zack_cum;           /* cum when the last ZACK went */
    uint32_t    pred;               /* where the next datagram is expected */
    uint32_t    seq;                /* peer's get_seq at issue */
    uint32_t    since_ack;
    uint32_t    backoff;
    int         gap;                /* an out-of-order chunk since the last ZACK */
    int         hole;               /* a new hole opened since the last ZACK (a chunk came
                                     * from beyond the highest one so far) */
    int         issued;             /* its ZREQ was committed: only then can its data exist */
} udz_zrx_t;

/* Send side of one zero-copy transfer (the owner streams the region). */
typedef struct udz_ztx {
    struct udz_ztx *next;           /* core->ztx_active, arrival order (udz_ztx_pump) */
    struct udz_ztx **pprev;         /* the field that points here: O(1) unlink */
    struct udz_ztx *pnext;          /* peer->ztx */
    udz_peer_t     *peer;
    udz_addr_t      dst;            /* the requester's data channel */
    const uint8_t  *src;
    size_t          len;
    uint64_t        sack[UDZ_ZACK_WORDS];   /* the last ZACK's, for chunks above cum */
    uint32_t        sack_words;
    uint64_t        last_progress_ns;
    uint64_t        last_progress_live; /* the same on the live clock (requester timeout) */
    uint64_t        last_send_ns;
    uint64_t        rexmit_ns;
    uint32_t        xfer_id;
    uint32_t        chan_id;        /* the ZREQ's name for the requester's channel (chan_addr) */
    uint32_t        chunk;
    uint32_t        batch;          /* chunks per send call (ztx_batch) */
    uint32_t        nchunks;
    uint32_t        window;
    uint32_t        sent;           /* first chunk never sent */
    uint32_t        cum;            /* every chunk below is acked */
    uint32_t        rexmit_mark;    /* holes below were resent at rexmit_ns */
    uint32_t        backoff;
    uint32_t        stuck_n;        /* STUCK repairs since cum last moved (ztx_stuck_due) */
    int32_t         status;         /* <0: refused, answer ZERR */
    int             held;           /* hold is linked to the registration (mem_hold) */
    int             chan_wait;      /* dst unknown: the peer announced no channels yet (no ep
                                     * here brought its address); served once one does */
    udz_mem_hold_t  hold;           /* revoked when the region is deregistered */
} udz_ztx_t;

/* A peer's failure across the parts (udz_core.c fills it; the top of this file says why). */
typedef struct udz_core_hooks {
    /* the peer table's, for the stream below it: fails p (udz_peer_fail), and runs p's probe
     * timer (udz_peer_probe_timer: 1 when p failed) */
    void (*peer_fail)(udz_core_t *core, udz_peer_t *p);
    int  (*peer_probe_timer)(udz_core_t *core, udz_peer_t *p);
    /* what udz_peer_fail ends, in this order before it tells the user: the stream's packets
     * of p, the gets from p, the transfers served to p (udz_*_peer_failed) */
    void (*peer_failed[3])(udz_core_t *core, udz_peer_t *p);
} udz_core_hooks_t;

struct udz_core {
    udz_config_t          cfg;
    const udz_wire_ops_t *wops;
    void                 *wire;
    const udz_user_ops_t *uops;
    void                 *user;
    udz_counters_t       *cnt;
    uint64_t              cookie;
    uint64_t              rnd[16];      /* random values for challenges, refilled by one
                                         * getrandom call per 16 new peers (udz_peer_create) */
    unsigned              rnd_left;
    uint64_t              now;
    uint64_t              live;         /* core_clock(): now less the time this process was away */

    /* peer table (udz_peer.c) */
    udz_peer_t          **htab;
    unsigned              hmask;
    unsigned              npeers;       /* records not reaped: max_peers bounds these */
    udz_dlist_t           all;
    udz_peer_t           *dead;         /* reaped, freed at the end of progress */
    udz_dlist_t           active;       /* peers with stream timers to run */
    unsigned              probing;      /* peers whose unreachable report is being probed */
    uint64_t              idle_scan_live; /* live clock of the last udz_peer_idle_sweep */

    /* reliable stream: send buffers (udz_stream.c) */
    udz_skb_t            *skb_free;
    unsigned              skb_count;
    size_t                skb_size;
    udz_skb_t            *cur;
    udz_peer_t           *cur_peer;
    int                   starved;      /* someone got -EAGAIN: call resources() on release */

    /* reliable stream: out-of-order packets kept (udz_stream_rx.c), at most cfg.rx_reorder
     * buffers of skb_size, allocated as losses need them and kept for the next */
    udz_skb_t            *kept_free;
    unsigned              kept_count;

    /* send coalescing (udz_stream.c): full-size packets held back, to go as one run. The held
     * packets are the last hold_n of hold_peer's unacked list, from hold on: committed (psn,
     * window, pool), not yet sent. */
    udz_skb_t            *hold;
    udz_peer_t           *hold_peer;
    unsigned              hold_n;
    size_t                hold_bytes;
    unsigned              hold_max;     /* datagrams per run (the wire's tx_run_dgrams, at most
                                         * UDZ_BATCH_MAX); 1: never hold */
    size_t                hold_max_bytes;
    udz_txmsg_t          *stxmsgs;      /* hold_max datagrams: one send call of the stream */

    /* control receive (udz_core.c) */
    int                   rx_hold;      /* reliable packets are not taken (udz_core_rx_hold) */
    uint8_t              *rxbuf;
    udz_rxmsg_t          *rxmsgs;
    udz_peer_t          **acklist;
    unsigned              nack;

    /* zero-copy receive (udz_zrx.c) */
    udz_zrx_t             zrx[UDZ_MAX_CHANNELS];
    uint32_t              next_xfer;
    unsigned              zrx_busy;
    unsigned              zbatch;       /* receive slots per data-channel poll at most (a
                                         * transfer's own: zrx_batch_for its chunk) */
    uint8_t              *zscratch;     /* a poll's slots' worth of chunks, for the largest
                                         * chunk: misplaced datagrams */
    udz_hdr_t            *zhdr;         /* zbatch headers (rx) */
    udz_rxmsg_t          *zmsgs;        /* zbatch receive slots of the data channels (the
                                         * control endpoint's own stay set up for good) */
    int                  *zplace;
    uint32_t              bitmap_words;

    /* zero-copy send (udz_ztx.c) */
    udz_txmsg_t          *ztxmsgs;      /* UDZ_ZTX_BATCH_MAX datagrams */
    udz_hdr_t            *ztxhdr;
    udz_ztx_t            *ztx_active;
    udz_ztx_t           **ztx_tailp;    /* the last transfer's next (or &ztx_active): O(1)
                                         * append, whatever a peer queues */
    udz_ztx_t            *ztx_free;
    unsigned              ztx_free_n;   /* at most UDZ_ZTX_FREE_MAX */

    /* a peer's failure (udz_core.c's table, read-only; last: no path a datagram takes reads
     * it, and the fields above keep their places) */
    const udz_core_hooks_t *hooks;
};

/* ---- clocks ---- */

/* Peer timeouts run on a "live" clock that stands still while this process is away from the
 * core: descheduled on a loaded host, computing, or blocked in another library (MPICH waits in
 * PMI for seconds without calling progress). A peer cannot answer a process that does not
 * listen, so that time is no evidence against it: when both ranks of a job sat in such a call
 * for a minute, the first one back found its unacked packets a minute old and failed its live
 * peer. Retransmission timers keep real time (they pace the wire, not judge the peer). A gap
 * between two calls into the core counts up to UDZ_AWAY_NS; beyond that the process was away. */
#define UDZ_AWAY_NS (100ull * 1000 * 1000)

static inline void core_clock(udz_core_t *core, uint64_t now_ns)
{
    uint64_t gap = now_ns - core->now;

    core->live += (gap < UDZ_AWAY_NS) ? gap : UDZ_AWAY_NS;
    core->now   = now_ns;
}

/* Live time since a timestamp of the live clock. */
static inline uint64_t live_since(const udz_core_t *core, uint64_t live_ts)
{
    return core->live - live_ts;
}

/* ---- round trip (owned by the stream, read by the zero-copy timers) ---- */

/* srtt + 4 rttvar: a round trip and its variation (0 before the first sample). */
static inline uint64_t rtt_span_ns(const udz_peer_t *p)
{
    return (uint64_t)p->srtt_us * 1000 + 4000ull * p->rttvar_us;
}

/* Retransmission timeout towards a peer: the configured minimum, or srtt + 4 rttvar when the
 * measured round trips are longer (a loaded host delays acks by whole scheduler slices), doubled
 * per retransmission up to the cap. */
static inline uint64_t rto(const udz_core_t *core, const udz_peer_t *p, unsigned backoff)
{
    uint64_t t = rtt_span_ns(p);

    if (p->srtt_us == 0) {
        t = UDZ_RTO_INIT_NS;    /* no sample yet: do not guess short */
    }
    if (t < core->cfg.rto_ns) {
        t = core->cfg.rto_ns;
    }
    t <<= (backoff < UDZ_BACKOFF_MAX ? backoff : UDZ_BACKOFF_MAX);
    return t < core->cfg.rto_max_ns ? t : core->cfg.rto_max_ns;
}

/* At most one NAK of the same hole, and one go-back on a NAK, per peer every rto/4 (a new
 * hole is NAKed at once: udz_stream_rx_nak); 1 (and the time taken) if one is due now. The
 * stamp is 32 bits of microseconds, so that the peer record keeps its size: it wraps after 71
 * minutes, where at worst one NAK waits rto/4 more. */
static inline int udz_nak_due(udz_core_t *core, udz_peer_t *p)
{
    uint32_t now_us = (uint32_t)(core->now / 1000);

    if ((uint64_t)(uint32_t)(now_us - p->nak_us) * 1000 < core->cfg.rto_ns / 4) {
        return 0;
    }
    p->nak_us = now_us;
    return 1;
}

/* A buffer of skb_size from a free list, or a new one while fewer than cap were made (the
 * send pool and the kept packets' buffers: both grow as traffic needs them, up to a bound). */
static inline udz_skb_t *udz_skb_pool_get(udz_core_t *core, udz_skb_t **free_list,
                                          unsigned *count, unsigned cap)
{
    udz_skb_t *skb = *free_list;

    if (skb != NULL) {
        *free_list = skb->next;
        return skb;
    }
    if (*count >= cap) {
        return NULL;
    }
    skb = malloc(core->skb_size);
    if (skb != NULL) {
        (*count)++;
        skb->iovcnt  = 0;
        skb->has_ctx = 0;
    }
    return skb;
}

/* Frees a list of buffers (the pools' free lists and, at destroy, the peers' unacked ones). */
static inline void udz_skb_list_free(udz_skb_t *skb)
{
    udz_skb_t *sn;

    for (; skb != NULL; skb = sn) {
        sn = skb->next;
        free(skb);
    }
}

/* How long a resent chunk is given before it is resent again when a ZACK still names it: a
 * round trip and its variation, without the RTO's floor (a lost repair would otherwise cost
 * the floor, 2 ms by default, where the round trip is tens of microseconds). */
static inline uint64_t repair_gate(const udz_core_t *core, const udz_peer_t *p)
{
    uint64_t t = rtt_span_ns(p);

    if (p->srtt_us == 0) {
        return rto(core, p, 0);
    }
    return (t < UDZ_REPAIR_GATE_MIN_NS) ? UDZ_REPAIR_GATE_MIN_NS : t;
}

/* ---- peer table (udz_peer.c) ---- */

static inline unsigned addr_hash(const udz_addr_t *a)
{
    uint64_t w0, w1, w2;

    memcpy(&w0, a->b, 8);
    memcpy(&w1, a->b + 8, 8);
    memcpy(&w2, a->b + 16, 8);
    w0 ^= (w1 ^ (w2 * 0xc2b2ae3d27d4eb4full)) * 0x9e3779b97f4a7c15ull;
    w0 ^= w0 >> 29;
    w0 *= 0xbf58476d1ce4e5b9ull;
    return (unsigned)(w0 ^ (w0 >> 32));
}

/* Every received datagram looks its sender up. */
static inline udz_peer_t *peer_lookup(udz_core_t *core, const udz_addr_t *addr)
{
    udz_peer_t *p;

    for (p = core->htab[addr_hash(addr) & core->hmask]; p != NULL; p = p->hnext) {
        if (!memcmp(&p->addr, addr, sizeof(*addr))) {
            return p;
        }
    }
    return NULL;
}

/* Puts the peer on the list whose stream timers run. */
static inline void peer_activate(udz_core_t *core, udz_peer_t *p)
{
    if (!dl_linked(&p->active)) {
        dl_add(&core->active, &p->active);
    }
}

udz_peer_t *udz_peer_create(udz_core_t *core, const udz_addr_t *addr, uint64_t cookie);
/* udz_peer_get without the challenge: for a datagram's sender (a new incarnation). */
udz_peer_t *udz_peer_get_nochal(udz_core_t *core, const udz_addr_t *addr, uint64_t cookie);
int udz_peer_table_init(udz_core_t *core);
/* Frees the reaped records (end of progress: nothing of the core points to them any more). */
void udz_peer_reclaim(udz_core_t *core);
void udz_peer_table_cleanup(udz_core_t *core);
/* The peer is gone: every part drops what it holds for it (core->hooks->peer_failed), the
 * user is told once. The stream calls it through core->hooks. */
void udz_peer_fail(udz_core_t *core, udz_peer_t *p);
/* The wire says p's address is unreachable (UDP: ICMP port unreachable). A hint, not proof:
 * p is probed, and fails only if no datagram with its cookie answers (udz_peer.c). */
void udz_peer_probe_start(udz_core_t *core, udz_peer_t *p);
/* A datagram with p's cookie came: p is alive, its probe (if any) is answered. */
static inline void peer_heard(udz_core_t *core, udz_peer_t *p)
{
    p->heard_live = core->live;     /* not idle (udz_peer_idle_sweep) */
    if (__builtin_expect(p->probes != 0, 0)) {
        p->probes = 0;
        core->probing--;
    }
}
/* Probes the records no ep holds that were silent for peer_idle_ns (udz_peer.c). */
void udz_peer_idle_sweep(udz_core_t *core);
/* How often udz_peer_idle_sweep walks the records: a quarter of peer_idle_ns, at most a second. */
static inline uint64_t peer_idle_scan_ns(const udz_core_t *core)
{
    uint64_t t = core->cfg.peer_idle_ns / 4;

    return (t < 1000000000ull) ? t : 1000000000ull;
}
/* Address validation (udz_peer.c): sends p {echo, our challenge unless p is valid}; and
 * handles a CHAL from p. */
void udz_peer_chal_send(udz_core_t *core, udz_peer_t *p, uint64_t echo);
void udz_peer_on_chal(udz_core_t *core, udz_peer_t *p, const udz_chal_t *c);
/* The probe timer of p (probes != 0): the next probe, or p's failure when the last one went
 * unanswered. Returns 1 when p failed. The stream's timers call it through core->hooks. */
int udz_peer_probe_timer(udz_core_t *core, udz_peer_t *p);

/* ---- sending (every part sends through these) ---- */

static inline void hdr_fill(const udz_core_t *core, udz_hdr_t *h, const udz_peer_t *p,
                            uint8_t type)
{
    h->magic      = UDZ_MAGIC;
    h->version    = UDZ_VERSION;
    h->type       = type;
    h->dst_cookie = p->cookie;
    h->src_cookie = core->cookie;
}

/* Sends the stream packets held back for coalescing (udz_stream.c). */
void udz_stream_hold_flush(udz_core_t *core);

/* Whatever the core sends next goes after the held packets: to their peer, the receiver
 * would see a gap (and NAK); to another, they would wait behind it. */
static inline void hold_flush(udz_core_t *core)
{
    if (core->hold_n != 0) {
        udz_stream_hold_flush(core);
    }
}

/* One datagram to a control endpoint: the header, then iovcnt payload pieces. */
static inline int wire_send1(udz_core_t *core, const udz_addr_t *dst, const void *hdr,
                             size_t len, const struct iovec *iov, int iovcnt)
{
    udz_txmsg_t m;
    int i, rc;

    hold_flush(core);
    m.iov[0].iov_base = (void*)hdr;
    m.iov[0].iov_len  = len;
    for (i = 0; i < iovcnt; ++i) {
        m.iov[1 + i] = iov[i];
    }
    m.iovcnt = 1 + iovcnt;
    m.tag    = 0;
    m.region.iov_base = NULL;
    m.region.iov_len  = 0;
    rc = core->wops->send(core->wire, dst, &m, 1);
    if (rc != 1) {
        core->cnt->tx_eagain++;
        return -EAGAIN;
    }
    return 0;
}

/* ---- reliable stream (udz_stream.c, udz_stream_rx.c, udz_stream_timers.c) ---- */

static inline void skb_release(udz_core_t *core, udz_skb_t *skb, int status)
{
    if (skb->has_ctx) {
        skb->has_ctx = 0;
        core->uops->send_done(core->user, skb->ctx, status);
    }
    skb->iovcnt = 0;
    skb->next = core->skb_free;
    core->skb_free = skb;
}

udz_skb_t *udz_skb_get(udz_core_t *core);
/* A standalone ack (with UDZ_F_NAK: "resend from header.ack"). */
void udz_stream_send_ack(udz_core_t *core, udz_peer_t *p, uint8_t flags);
/* A NAK of the hole at p->rx_expected; sack: UDZ_F_SACK, hole_end the first packet kept after
 * it (the sender resends the hole up to it); without sack, hole_end is 0 (the oldest alone,
 * as a receiver of before sends). */
void udz_stream_send_nak(udz_core_t *core, udz_peer_t *p, int sack, uint32_t hole_end);
/* The send side of a failed peer (udz_stream_peer_failed does both sides). */
void udz_stream_tx_failed(udz_core_t *core, udz_peer_t *p);
/* p's retransmission timer ran out (udz_stream_timers.c). */
void udz_stream_rto_expired(udz_core_t *core, udz_peer_t *p);
/* A NAK for the hole at p->rx_expected (udz_stream_rx.c); sack: what came after it is kept. */
void udz_stream_rx_nak(udz_core_t *core, udz_peer_t *p, int sack);
/* An unreliable control datagram (ZACK, ZDONE, ZERR) with the piggybacked ack. */
void udz_stream_send_zctl(udz_core_t *core, udz_peer_t *p, uint8_t type, uint8_t flags,
                          uint32_t xfer_id, const void *body, size_t body_len);
/* The piggybacked ack of any control datagram from p (flags: an ACK's, for its NAK). */
void udz_stream_acked(udz_core_t *core, udz_peer_t *p, uint32_t ack, uint8_t flags,
                      uint32_t hole_end);
/* A reliable datagram from p: 1 when it is the next in order (deliver it), 0 when it was a
 * duplicate or came early (kept when there is room; acks and NAKs are scheduled either way). */
int udz_stream_rx(udz_core_t *core, udz_peer_t *p, const udz_hdr_t *h);
/* After an in-order delivery: the next kept packet of p if it is now in order (its datagram
 * in data[], header first; deliver it, then give it back with udz_stream_rx_put), else NULL,
 * and then a NAK if a hole is left before packets still kept. */
udz_skb_t *udz_stream_rx_next(udz_core_t *core, udz_peer_t *p);
void udz_stream_rx_put(udz_core_t *core, udz_skb_t *skb);
/* Gives every packet kept for p back to the core (p failed, or its record goes). */
void udz_stream_kept_drop(udz_core_t *core, udz_peer_t *p);
void udz_stream_peer_failed(udz_core_t *core, udz_peer_t *p);
void udz_stream_timers(udz_core_t *core);
int udz_stream_init(udz_core_t *core);
void udz_stream_cleanup(udz_core_t *core);

/* ---- zero-copy receive, the requester (udz_zrx.c) ---- */

/* Receives what is waiting on a busy channel's transfer; returns datagrams handled. */
unsigned udz_zrx_poll(udz_core_t *core, udz_zrx_t *z);
unsigned udz_zrx_drain_idle(udz_core_t *core);
void udz_zrx_on_zerr(udz_core_t *core, udz_peer_t *p, const udz_zerr_t *e);
/* Whether every get to the peer issued up to its get_seq gseq has completed (flush). */
int udz_zrx_flushed(const udz_core_t *core, const udz_peer_t *peer, uint32_t gseq);
void udz_zrx_peer_failed(udz_core_t *core, udz_peer_t *p);
void udz_zrx_timers(udz_core_t *core);
int udz_zrx_init(udz_core_t *core);
void udz_zrx_cleanup(udz_core_t *core);

/* ---- zero-copy send, the owner (udz_ztx.c) ---- */

void udz_ztx_on_zreq(udz_core_t *core, udz_peer_t *p, const udz_zreq_t *req);
void udz_ztx_on_zack(udz_core_t *core, udz_peer_t *p, const udz_zack_t *a, unsigned words,
                     uint8_t flags);
/* The requester ended the transfer (ZFIN) or does not know it (ZDONE): stop serving it. */
void udz_ztx_end(udz_core_t *core, udz_peer_t *p, uint32_t xfer_id);
/* Streams new chunks of every transfer, up to its window. */
unsigned udz_ztx_pump(udz_core_t *core);
void udz_ztx_peer_failed(udz_core_t *core, udz_peer_t *p);
void udz_ztx_timers(udz_core_t *core);
int udz_ztx_init(udz_core_t *core);
void udz_ztx_cleanup(udz_core_t *core);

/* ---- shared by the zero-copy parts ---- */

static inline uint32_t chunk_len(size_t len, uint32_t chunk, uint32_t i)
{
    size_t off = (size_t)i * chunk;

    return (uint32_t)((len - off) < chunk ? (len - off) : chunk);
}

/* The tag of chunk i of transfer xfer_id (a ZDATA's, and the slot that predicts it): distinct
 * for the chunks of one transfer, so a wire that posts receives ahead tells a datagram that
 * did not come where predicted without reading it. */
static inline uint32_t zdata_tag(uint32_t xfer_id, uint32_t i)
{
    return (xfer_id * 0x9e3779b1u) ^ i;
}

static inline int bit_get(const uint64_t *bm, uint32_t i) { return (bm[i >> 6] >> (i & 63)) & 1; }
static inline void bit_set(uint64_t *bm, uint32_t i) { bm[i >> 6] |= 1ull << (i & 63); }

#endif
