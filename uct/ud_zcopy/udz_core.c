/*
 * ud_zcopy protocol core (see udz_core.h for the design). Single-threaded: the UCT glue calls
 * it under the worker's progress, so no locks.
 */
#include "udz_core.h"

#include <errno.h>
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

/* ---- objects ---- */

/* A reliable packet kept until acked: header + inline payload, plus by-reference pieces. */
typedef struct udz_skb {
    struct udz_skb *next;
    uint32_t        psn;
    uint32_t        len;            /* header + inline payload */
    uint64_t        sent_ns;        /* first transmission */
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
    udz_peer_t  *hnext;             /* hash chain */
    udz_peer_t  *all_next;          /* every peer ever made, for destroy */
    void        *user;
    udz_dlist_t  active;            /* on core->active while it has timers to run */
    udz_skb_t   *unacked, *unacked_tail;
    uint64_t     last_progress_live; /* live clock when it last acked something new */
    uint64_t     last_tx_ns;        /* last (re)transmission of the oldest unacked packet */
    uint64_t     ack_due_ns;        /* when the owed ack must go at the latest */
    uint64_t     nak_ns;            /* when we last NAKed / went back on a NAK */
    uint32_t     next_psn;          /* next psn to send */
    uint32_t     rx_expected;       /* next psn to deliver */
    uint32_t     get_seq;           /* gets issued, for flush */
    uint32_t     srtt_us;           /* smoothed round trip (0: no sample yet) */
    uint32_t     rttvar_us;
    uint16_t     unacked_count;
    uint16_t     ack_owed;          /* delivered packets not yet acked */
    uint8_t      backoff;
    uint8_t      failed;
    uint8_t      ack_now;
    uint8_t      hashed;
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
} udz_zrx_t;

/* Send side of one zero-copy transfer (the owner streams the region). */
typedef struct udz_ztx {
    struct udz_ztx *next;
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
    uint32_t        chunk;
    uint32_t        nchunks;
    uint32_t        window;
    uint32_t        sent;           /* first chunk never sent */
    uint32_t        cum;            /* every chunk below is acked */
    uint32_t        rexmit_mark;    /* holes below were resent at rexmit_ns */
    uint32_t        backoff;
    int32_t         status;         /* <0: refused, answer ZERR */
} udz_ztx_t;

struct udz_core {
    udz_config_t          cfg;
    const udz_wire_ops_t *wops;
    void                 *wire;
    const udz_user_ops_t *uops;
    void                 *user;
    udz_counters_t       *cnt;
    uint64_t              cookie;
    uint64_t              now;
    uint64_t              live;         /* core_clock(): now less the time this process was away */

    /* peers */
    udz_peer_t          **htab;
    unsigned              hmask;
    unsigned              npeers;
    udz_peer_t           *all;
    udz_dlist_t           active;

    /* send buffers */
    udz_skb_t            *skb_free;
    unsigned              skb_count;
    size_t                skb_size;
    udz_skb_t            *cur;
    udz_peer_t           *cur_peer;
    int                   starved;      /* someone got -EAGAIN: call resources() on release */

    /* control receive */
    uint8_t              *rxbuf;
    udz_rxmsg_t          *rxmsgs;
    udz_peer_t          **acklist;
    unsigned              nack;

    /* zero copy */
    udz_zrx_t             zrx[UDZ_MAX_CHANNELS];
    uint32_t              next_xfer;
    unsigned              zrx_busy;
    unsigned              zbatch;       /* receive slots per data-channel poll: rx_batch, or
                                         * more so that one coalesced (GRO) run of up to 64
                                         * datagrams or 64 KiB always fits whole */
    uint8_t              *zscratch;     /* zbatch chunks: misplaced datagrams */
    udz_hdr_t            *zhdr;         /* zbatch headers (rx) */
    udz_rxmsg_t          *zmsgs;        /* zbatch receive slots of the data channels (the
                                         * control endpoint's own stay set up for good) */
    udz_txmsg_t          *ztxmsgs;      /* rx_batch datagrams (tx) */
    udz_hdr_t            *ztxhdr;
    int                  *zplace;
    udz_ztx_t            *ztx_active;
    udz_ztx_t            *ztx_free;
    uint32_t              bitmap_words;
};

size_t udz_peer_state_bytes(void)
{
    return sizeof(udz_peer_t) + sizeof(udz_peer_t*);    /* + its hash slot */
}

void udz_peer_set_user(udz_peer_t *peer, void *user) { peer->user = user; }
void *udz_peer_user(const udz_peer_t *peer) { return peer->user; }
int udz_peer_is_failed(const udz_peer_t *peer) { return peer->failed; }
size_t udz_core_max_payload(const udz_core_t *core) { return core->cfg.seg_size - UDZ_HDR_LEN; }
void udz_core_set_time(udz_core_t *core, uint64_t now_ns) { core->now = now_ns; }

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

/* Retransmission timeout towards a peer: the configured minimum, or srtt + 4 rttvar when the
 * measured round trips are longer (a loaded host delays acks by whole scheduler slices), doubled
 * per retransmission up to the cap. */
/* srtt + 4 rttvar: a round trip and its variation (0 before the first sample). */
static uint64_t rtt_span_ns(const udz_peer_t *p)
{
    return (uint64_t)p->srtt_us * 1000 + 4000ull * p->rttvar_us;
}

static uint64_t rto(const udz_core_t *core, const udz_peer_t *p, unsigned backoff)
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

/* How long a resent chunk is given before it is resent again when a ZACK still names it: a
 * round trip and its variation, without the RTO's floor (a lost repair would otherwise cost
 * the floor, 2 ms by default, where the round trip is tens of microseconds). */
static uint64_t repair_gate(const udz_core_t *core, const udz_peer_t *p)
{
    uint64_t t = rtt_span_ns(p);

    if (p->srtt_us == 0) {
        return rto(core, p, 0);
    }
    return (t < UDZ_REPAIR_GATE_MIN_NS) ? UDZ_REPAIR_GATE_MIN_NS : t;
}

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

/* ---- peers ---- */

static unsigned addr_hash(const udz_addr_t *a)
{
    uint64_t w0, w1;

    memcpy(&w0, a->b, 8);
    memcpy(&w1, a->b + 8, 8);
    w0 ^= w1 * 0x9e3779b97f4a7c15ull;
    w0 ^= w0 >> 29;
    w0 *= 0xbf58476d1ce4e5b9ull;
    return (unsigned)(w0 ^ (w0 >> 32));
}

static udz_peer_t *peer_lookup(udz_core_t *core, const udz_addr_t *addr)
{
    udz_peer_t *p;

    for (p = core->htab[addr_hash(addr) & core->hmask]; p != NULL; p = p->hnext) {
        if (!memcmp(&p->addr, addr, sizeof(*addr))) {
            return p;
        }
    }
    return NULL;
}

static void peer_hash_insert(udz_core_t *core, udz_peer_t *p)
{
    unsigned b = addr_hash(&p->addr) & core->hmask;

    p->hnext = core->htab[b];
    core->htab[b] = p;
    p->hashed = 1;
}

static void peer_hash_remove(udz_core_t *core, udz_peer_t *p)
{
    udz_peer_t **pp;

    for (pp = &core->htab[addr_hash(&p->addr) & core->hmask]; *pp != NULL; pp = &(*pp)->hnext) {
        if (*pp == p) {
            *pp = p->hnext;
            p->hashed = 0;
            return;
        }
    }
}

static int peer_hash_grow(udz_core_t *core)
{
    unsigned size = (core->hmask + 1) * 2, i;
    udz_peer_t **old = core->htab, *p, *n;
    unsigned old_size = core->hmask + 1;

    core->htab = calloc(size, sizeof(*core->htab));
    if (core->htab == NULL) {
        core->htab = old;
        return -ENOMEM;
    }
    core->hmask = size - 1;
    for (i = 0; i < old_size; ++i) {
        for (p = old[i]; p != NULL; p = n) {
            n = p->hnext;
            peer_hash_insert(core, p);
        }
    }
    core->cnt->peer_state_bytes += (size - old_size) * sizeof(udz_peer_t*);
    free(old);
    return 0;
}

static udz_peer_t *peer_create(udz_core_t *core, const udz_addr_t *addr, uint64_t cookie)
{
    udz_peer_t *p;

    if (core->npeers >= core->cfg.max_peers) {
        return NULL;
    }
    if ((core->npeers + 1 > core->hmask + 1) && (peer_hash_grow(core) != 0)) {
        return NULL;
    }
    p = calloc(1, sizeof(*p));
    if (p == NULL) {
        return NULL;
    }
    p->addr        = *addr;
    p->cookie      = cookie;
    p->next_psn    = 1;
    p->rx_expected = 1;
    dl_init(&p->active);
    p->all_next    = core->all;
    core->all      = p;
    peer_hash_insert(core, p);
    core->npeers++;
    core->cnt->peers++;
    core->cnt->peer_state_bytes += sizeof(*p);
    return p;
}

static void peer_activate(udz_core_t *core, udz_peer_t *p)
{
    if (!dl_linked(&p->active)) {
        dl_add(&core->active, &p->active);
    }
}

static void skb_release(udz_core_t *core, udz_skb_t *skb, int status)
{
    if (skb->has_ctx) {
        skb->has_ctx = 0;
        core->uops->send_done(core->user, skb->ctx, status);
    }
    skb->iovcnt = 0;
    skb->next = core->skb_free;
    core->skb_free = skb;
}

static void zrx_finish(udz_core_t *core, udz_zrx_t *z, int status);
static void ztx_free(udz_core_t *core, udz_ztx_t **pp);

/* The peer is gone: drop its packets, fail its gets and transfers, tell the user once. */
static void peer_fail(udz_core_t *core, udz_peer_t *p)
{
    udz_skb_t *skb;
    udz_ztx_t **pp;
    unsigned i;

    if (p->failed) {
        return;
    }
    p->failed = 1;
    core->cnt->timeouts++;
    while ((skb = p->unacked) != NULL) {
        p->unacked = skb->next;
        skb_release(core, skb, -ECONNRESET);
    }
    p->unacked_tail  = NULL;
    p->unacked_count = 0;
    p->ack_owed      = 0;
    for (i = 0; i < core->cfg.channels; ++i) {
        if (core->zrx[i].peer == p) {
            zrx_finish(core, &core->zrx[i], -ECONNRESET);
        }
    }
    for (pp = &core->ztx_active; *pp != NULL;) {
        if ((*pp)->peer == p) {
            ztx_free(core, pp);
        } else {
            pp = &(*pp)->next;
        }
    }
    if (dl_linked(&p->active)) {
        dl_del(&p->active);
    }
    core->uops->peer_failed(core->user, p);
    core->uops->resources(core->user);
}

udz_peer_t *udz_peer_get(udz_core_t *core, const udz_addr_t *addr, uint64_t cookie)
{
    udz_peer_t *p = peer_lookup(core, addr), *n;

    if (p != NULL) {
        if (p->cookie == cookie) {
            return p;
        }
        /* the address belongs to a new incarnation: the old one has failed, keep it aside for
         * whoever still points to it and start afresh. The old record still counts against
         * max_peers: whoever knows our cookie cannot grow our memory without bound by
         * inventing incarnations. */
        peer_hash_remove(core, p);
        peer_fail(core, p);
        n = peer_create(core, addr, cookie);
        if (n != NULL) {
            n->prev_cookie = p->cookie;
        }
        return n;
    }
    return peer_create(core, addr, cookie);
}

/* ---- sending ---- */

static void hdr_fill(const udz_core_t *core, udz_hdr_t *h, const udz_peer_t *p, uint8_t type)
{
    h->magic      = UDZ_MAGIC;
    h->version    = UDZ_VERSION;
    h->type       = type;
    h->dst_cookie = p->cookie;
    h->src_cookie = core->cookie;
}

static int wire_send1(udz_core_t *core, const udz_addr_t *dst, const void *hdr, size_t len,
                      const struct iovec *iov, int iovcnt)
{
    udz_txmsg_t m;
    int i, rc;

    m.iov[0].iov_base = (void*)hdr;
    m.iov[0].iov_len  = len;
    for (i = 0; i < iovcnt; ++i) {
        m.iov[1 + i] = iov[i];
    }
    m.iovcnt = 1 + iovcnt;
    rc = core->wops->send(core->wire, dst, &m, 1);
    if (rc != 1) {
        core->cnt->tx_eagain++;
        return -EAGAIN;
    }
    return 0;
}

/* A standalone ack (with NAK: "resend from header.ack"). */
static void send_ack(udz_core_t *core, udz_peer_t *p, uint8_t flags)
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

static udz_skb_t *skb_get(udz_core_t *core)
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

int udz_put_iov(udz_core_t *core, udz_peer_t *peer, uint64_t raddr, const uint8_t *rkey,
                const struct iovec *iov, int iovcnt, void *ctx)
{
    udz_put_t *put;
    int err, i;

    if (iovcnt > UDZ_MAX_IOV) {
        return -EMSGSIZE;
    }
    put = udz_send_begin(core, peer, &err);
    if (put == NULL) {
        return err;
    }
    put->addr = raddr;
    memcpy(put->rkey, rkey, UDZ_RKEY_LEN);
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
    put = udz_send_begin(core, peer, &err);
    if (put == NULL) {
        return err;
    }
    put->addr = raddr;
    memcpy(put->rkey, rkey, UDZ_RKEY_LEN);
    memcpy(put + 1, buf, len);
    return udz_send_commit(core, UDZ_T_PUT, 0, sizeof(*put) + len);
}

/* ---- acks ---- */

static void peer_acked(udz_core_t *core, udz_peer_t *p, uint32_t ack, uint8_t flags)
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

/* ---- zero copy: requester side ---- */

static uint32_t chunk_len(size_t len, uint32_t chunk, uint32_t i)
{
    size_t off = (size_t)i * chunk;

    return (uint32_t)((len - off) < chunk ? (len - off) : chunk);
}

static int bit_get(const uint64_t *bm, uint32_t i) { return (bm[i >> 6] >> (i & 63)) & 1; }
static void bit_set(uint64_t *bm, uint32_t i) { bm[i >> 6] |= 1ull << (i & 63); }

static void send_zctl(udz_core_t *core, udz_peer_t *p, uint8_t type, uint8_t flags,
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
    send_zctl(core, z->peer, UDZ_T_ZACK, flags, z->xfer_id, &a, UDZ_ZACK_LEN(words));
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
    core->uops->get_done(core->user, ctx, status);
    if (core->starved) {
        core->starved = 0;
        core->uops->resources(core->user);
    }
}

int udz_get(udz_core_t *core, udz_peer_t *peer, void *buf, size_t len, uint64_t raddr,
            const uint8_t *rkey, void *ctx)
{
    uint32_t chunk = (uint32_t)core->cfg.chunk_size;
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
    fin = skb_get(core);
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
    z->last_rx_ns   = core->now;
    z->last_rx_live = core->live;
    z->zack_ns      = core->now;
    memset(z->bitmap, 0, ((z->nchunks + 63) / 64) * sizeof(uint64_t));
    core->zrx_busy++;

    req->xfer_id = z->xfer_id;
    req->chan_id = core->wops->chan_id(core->wire, 1 + (int)(z - core->zrx));
    req->addr    = raddr;
    req->len     = len;
    req->chunk   = chunk;
    req->window  = (uint32_t)(core->cfg.zc_window / chunk);
    if (req->window == 0) {
        req->window = 1;
    }
    memcpy(req->rkey, rkey, UDZ_RKEY_LEN);
    err = udz_send_commit(core, UDZ_T_ZREQ, 0, sizeof(*req));
    if (err != 0) {
        skb_release(core, z->fin, 0);
        z->fin  = NULL;
        z->peer = NULL;
        core->zrx_busy--;
        return err;
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

/* Receive slot k: header k, then a full chunk at dst, or in scratch slot k when dst is NULL. */
static void zrx_slot(udz_core_t *core, unsigned k, uint8_t *dst)
{
    size_t chunk = core->cfg.chunk_size;
    udz_rxmsg_t *m = &core->zmsgs[k];

    m->iov[0].iov_base = &core->zhdr[k];
    m->iov[0].iov_len  = UDZ_HDR_LEN;
    m->iov[1].iov_base = (dst != NULL) ? dst : core->zscratch + (size_t)k * chunk;
    m->iov[1].iov_len  = chunk;
}

/* Receives what is waiting on one busy channel; returns datagrams handled. */
static unsigned zrx_poll(udz_core_t *core, udz_zrx_t *z, int chan)
{
    uint32_t chunk = (uint32_t)core->cfg.chunk_size;
    unsigned batch = core->zbatch, k = 0, j, handled = 0;
    uint32_t slot[64], idx, clen, p, next_pred = z->pred;
    udz_rxmsg_t *m = core->zmsgs;
    udz_hdr_t *h;
    int n, misplaced = 0;

    /* Predict where the next datagrams go: the next missing chunks from pred on, in order.
     * Every slot takes a full chunk: the short last chunk is received into scratch and copied,
     * so that a full datagram arriving there (after a loss) is never cut. */
    for (p = zrx_next_missing(z, z->pred); (k < batch) && (p < z->nchunks);
         p = zrx_next_missing_from(z, p + 1)) {
        slot[k] = p;
        zrx_slot(core, k, (chunk_len(z->len, chunk, p) == chunk) ?
                          z->buf + (size_t)p * chunk : NULL);
        ++k;
    }
    if (k == 0) {
        return 0;
    }
    /* Fewer chunks missing than slots: the rest go to scratch (predicting nothing), so the
     * receive area never shrinks below one coalesced run. Otherwise duplicates at the head of
     * a run could push the chunks still missing out of a GRO receive (truncated, lost). */
    for (; k < batch; ++k) {
        slot[k] = UINT32_MAX;
        zrx_slot(core, k, NULL);
    }
    n = core->wops->recv(core->wire, chan, m, (int)k);
    if (n <= 0) {
        return 0;
    }
    /* pass 1: datagrams that landed where predicted are done; misplaced ones are saved */
    for (j = 0; j < (unsigned)n; ++j) {
        h = &core->zhdr[j];
        core->zplace[j] = -1;
        if ((m[j].len < UDZ_HDR_LEN) || m[j].trunc || (h->magic != UDZ_MAGIC) ||
            (h->version != UDZ_VERSION) || (h->type != UDZ_T_ZDATA) ||
            (h->dst_cookie != core->cookie)) {
            core->cnt->rx_corrupt++;
            continue;
        }
        if ((h->psn != z->xfer_id) || memcmp(&m[j].src, &z->peer->addr, sizeof(udz_addr_t)) ||
            (h->src_cookie != z->peer->cookie)) {
            /* a late datagram of a finished transfer: tell its sender to stop */
            udz_peer_t *o = peer_lookup(core, &m[j].src);
            core->cnt->rx_zstale++;
            if ((o != NULL) && (o->cookie == h->src_cookie)) {
                send_zctl(core, o, UDZ_T_ZDONE, 0, h->psn, NULL, 0);
            }
            continue;
        }
        idx = h->ack;
        if (idx >= z->nchunks) {
            core->cnt->rx_corrupt++;
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
               ((z->cum != z->zack_cum) && (z->cum < z->top))) {
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

/* ---- zero copy: owner side ---- */

static void ztx_free(udz_core_t *core, udz_ztx_t **pp)
{
    udz_ztx_t *t = *pp;

    *pp = t->next;
    t->next = core->ztx_free;
    core->ztx_free = t;
}

static udz_ztx_t **ztx_find(udz_core_t *core, udz_peer_t *p, uint32_t xfer_id)
{
    udz_ztx_t **pp;

    for (pp = &core->ztx_active; *pp != NULL; pp = &(*pp)->next) {
        if (((*pp)->peer == p) && ((*pp)->xfer_id == xfer_id)) {
            return pp;
        }
    }
    return NULL;
}

/* Sends chunks [first, first+n) of t as one batch (or the listed ones). */
static unsigned ztx_send(udz_core_t *core, udz_ztx_t *t, const uint32_t *list, unsigned n)
{
    udz_txmsg_t *msg = core->ztxmsgs;
    unsigned i;
    uint32_t c;
    int rc;

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
    }
    rc = core->wops->send(core->wire, &t->dst, msg, (int)n);
    if (rc < (int)n) {
        core->cnt->tx_eagain++;
    }
    if (rc > 0) {
        t->last_send_ns = core->now;
    }
    return rc > 0 ? (unsigned)rc : 0;
}

/* Streams new chunks of every transfer, up to its window. */
static unsigned ztx_pump(udz_core_t *core)
{
    uint32_t list[64];
    unsigned batch = 64, n, sent, total = 0;    /* the wire may send a batch as one GSO packet */
    udz_ztx_t *t;

    for (t = core->ztx_active; t != NULL; t = t->next) {
        while ((t->status == 0) && (t->sent < t->nchunks) && (t->sent < t->cum + t->window)) {
            for (n = 0; (n < batch) && (t->sent + n < t->nchunks) &&
                        (t->sent + n < t->cum + t->window); ++n) {
                list[n] = t->sent + n;
            }
            sent = ztx_send(core, t, list, n);
            t->sent += sent;
            total += sent;
            if (sent < n) {
                return total;   /* the socket is full: next progress */
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
    uint32_t list[64], top = t->cum, c, w;
    unsigned n = 0, total = 0;

    for (w = t->sack_words; w > 0; --w) {
        if (t->sack[w - 1] != 0) {
            top = t->cum + 1 + 64 * (w - 1) + (63 - (uint32_t)__builtin_clzll(t->sack[w - 1]));
            break;
        }
    }
    if (stuck && (top == t->cum)) {
        /* nothing arrives and no hole is known: the tail was lost (a whole GSO run may be
         * one dropped packet). Resend a run's worth from the first missing chunk on; the
         * requester's next ZACKs name the rest. */
        top = t->cum + 63;
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
        if (n == 64) {
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

static void ztx_on_zreq(udz_core_t *core, udz_peer_t *p, const udz_zreq_t *req)
{
    udz_ztx_t *t = core->ztx_free;
    const void *src;

    if (t != NULL) {
        core->ztx_free = t->next;
    } else if ((t = malloc(sizeof(*t))) == NULL) {
        return;     /* the requester times out */
    }
    memset(t, 0, sizeof(*t));
    t->peer    = p;
    t->xfer_id = req->xfer_id;
    t->len     = req->len;
    t->chunk   = req->chunk;
    t->window  = req->window;
    core->wops->chan_addr(core->wire, &p->addr, req->chan_id, &t->dst);
    t->last_progress_ns   = core->now;
    t->last_progress_live = core->live;
    src = NULL;
    if ((req->chunk == 0) || (req->chunk > 65507 - UDZ_HDR_LEN) ||
        (req->len == 0) || (req->window == 0) ||
        ((req->len + req->chunk - 1) / req->chunk > 0xffffffffull)) {
        t->status = -EINVAL;
    } else if ((src = core->uops->mem(core->user, req->addr, req->len, req->rkey, 0)) == NULL) {
        t->status = -EACCES;
    }
    if (t->status != 0) {
        core->cnt->zreq_refused++;
        udz_zerr_t e = {t->xfer_id, t->status};
        send_zctl(core, p, UDZ_T_ZERR, 0, t->xfer_id, &e, sizeof(e));
    } else {
        t->src     = src;
        t->nchunks = (uint32_t)((req->len + req->chunk - 1) / req->chunk);
    }
    {
        /* append: transfers are served in arrival order */
        udz_ztx_t **pp = &core->ztx_active;
        while (*pp != NULL) {
            pp = &(*pp)->next;
        }
        *pp = t;
        t->next = NULL;
    }
    peer_activate(core, p);
}

static void ztx_on_zack(udz_core_t *core, udz_peer_t *p, const udz_zack_t *a, unsigned words,
                        uint8_t flags)
{
    udz_ztx_t **pp = ztx_find(core, p, a->xfer_id), *t;
    unsigned w;
    int holes;

    if (pp == NULL) {
        return;     /* finished (our ZDONE crossed it) or never known */
    }
    t = *pp;
    if (t->status != 0) {
        udz_zerr_t e = {t->xfer_id, t->status};
        send_zctl(core, p, UDZ_T_ZERR, 0, t->xfer_id, &e, sizeof(e));
        t->last_progress_ns   = core->now;
        t->last_progress_live = core->live;
        return;
    }
    if ((a->cum > t->nchunks) || (a->cum > t->sent)) {
        core->cnt->rx_corrupt++;
        return;
    }
    if (a->cum > t->cum) {
        t->cum = a->cum;
        t->backoff = 0;
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
        ztx_free(core, pp);     /* all there; the ZDONE will find nothing */
        return;
    }
    if (holes || (flags & UDZ_F_STUCK)) {
        ztx_repair(core, t, flags & UDZ_F_STUCK);
    }
}

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
    default:          return 0;
    }
}

static void deliver(udz_core_t *core, udz_peer_t *p, udz_hdr_t *h)
{
    void *payload = h + 1;
    udz_ztx_t **pp;
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
        ztx_on_zreq(core, p, payload);
        break;
    case UDZ_T_ZFIN:
        pp = ztx_find(core, p, ((const udz_zfin_t*)payload)->xfer_id);
        if (pp != NULL) {
            ztx_free(core, pp);
        }
        break;
    }
}

/* Validates one control datagram and acts on it. */
static void rx_ctrl(udz_core_t *core, udz_rxmsg_t *m)
{
    udz_hdr_t *h = m->iov[0].iov_base;
    udz_peer_t *p;
    udz_ztx_t **pp;
    udz_zrx_t *z;
    unsigned i;

    if (m->unreach) {
        /* nothing listens at that address any more: whoever was there is gone */
        p = peer_lookup(core, &m->src);
        if ((p != NULL) && !p->failed) {
            peer_fail(core, p);
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
        p = udz_peer_get(core, &m->src, h->src_cookie);
    } else if (p == NULL) {
        p = peer_create(core, &m->src, h->src_cookie);
    }
    if ((p == NULL) || p->failed) {
        core->cnt->rx_foreign++;
        return;
    }
    peer_acked(core, p, h->ack, h->type == UDZ_T_ACK ? h->flags : 0);
    if (p->failed) {
        return;
    }

    if (h->type <= UDZ_T_RELIABLE_MAX) {
        if (h->psn == p->rx_expected) {
            p->rx_expected++;
            if ((++p->ack_owed == 1) || !dl_linked(&p->active)) {
                p->ack_due_ns = core->now + core->cfg.ack_delay_ns;
                peer_activate(core, p);
            }
            if ((p->ack_owed >= core->cfg.ack_every) || (h->flags & UDZ_F_ACK_REQ)) {
                p->ack_now = 1;
            }
            deliver(core, p, h);
        } else if (seq_lt(h->psn, p->rx_expected)) {
            core->cnt->rx_dup++;
            p->ack_now = 1;         /* our ack was lost: repeat it */
        } else {
            core->cnt->rx_ooo++;    /* a gap: ask for a go-back, at most every rto/4 */
            if (core->now - p->nak_ns >= core->cfg.rto_ns / 4) {
                p->nak_ns = core->now;
                send_ack(core, p, UDZ_F_NAK);
            }
        }
        if (p->ack_now && (core->nack < core->cfg.rx_batch)) {
            core->acklist[core->nack++] = p;
        }
        return;
    }

    if ((h->flags & UDZ_F_ACK_REQ) && (h->type == UDZ_T_ACK) && (core->nack < core->cfg.rx_batch)) {
        p->ack_now = 1;     /* a flushing sender asks where we are */
        core->acklist[core->nack++] = p;
    }
    switch (h->type) {
    case UDZ_T_ZACK:
        ztx_on_zack(core, p, (udz_zack_t*)(h + 1), (h->len - UDZ_ZACK_LEN(0)) / 8, h->flags);
        break;
    case UDZ_T_ZDONE:
        pp = ztx_find(core, p, h->psn);
        if (pp != NULL) {
            ztx_free(core, pp);
        }
        break;
    case UDZ_T_ZERR:
        for (i = 0; i < core->cfg.channels; ++i) {
            z = &core->zrx[i];
            if ((z->peer == p) && (z->xfer_id == ((udz_zerr_t*)(h + 1))->xfer_id)) {
                zrx_finish(core, z, ((udz_zerr_t*)(h + 1))->status < 0 ?
                                    ((udz_zerr_t*)(h + 1))->status : -EACCES);
                break;
            }
        }
        break;
    }
}

/* ---- timers ---- */

/* A peer stays on the active list while it has reliable packets in flight or owes an ack.
 * Its zero-copy transfers need no list entry: their timers run while any channel is busy or
 * any transfer is being served (udz_core_progress), so this check is O(1) per peer. */
static int peer_busy(const udz_peer_t *p)
{
    return (p->unacked != NULL) || (p->ack_owed != 0);
}

static void timers(udz_core_t *core)
{
    udz_dlist_t *e, *n;
    udz_peer_t *p;
    udz_ztx_t **pp, *t;
    udz_zrx_t *z;
    uint64_t now = core->now, gate;
    unsigned i;

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

    for (i = 0; i < core->cfg.channels; ++i) {
        z = &core->zrx[i];
        if (z->peer == NULL) {
            continue;
        }
        if (live_since(core, z->last_rx_live) >= core->cfg.peer_timeout_ns) {
            p = z->peer;
            zrx_finish(core, z, -ETIMEDOUT);
            peer_fail(core, p);
        } else if ((z->cum < z->top) &&
                   (now - z->zack_ns >= ((gate = repair_gate(core, z->peer)) <<
                                         (z->backoff < 8 ? z->backoff : 8))) &&
                   (now - z->last_rx_ns >= gate)) {
            /* holes are known and their repairs did not come (lost too): name them again
             * after the repair gate (srtt + 4 rttvar), not an RTO, backing off while nothing
             * comes. (With no hole known, a pause in arrivals is more often the owner's pace
             * than a lost tail: that case waits for the stuck timer below, measured to cost
             * less than resending on every pause.)
             * STUCK: the owner resends them without its own gate (it may have no round-trip
             * sample of us); this pacing is the gate. */
            if (z->backoff < UDZ_BACKOFF_MAX) {
                z->backoff++;
            }
            zrx_send_zack(core, z, UDZ_F_STUCK);
        } else if ((now - z->zack_ns >= rto(core, z->peer, z->backoff)) &&
                   (now - z->last_rx_ns >= rto(core, z->peer, z->backoff))) {
            if (z->backoff < UDZ_BACKOFF_MAX) {
                z->backoff++;
            }
            zrx_send_zack(core, z, UDZ_F_STUCK);
        }
    }

    for (pp = &core->ztx_active; (t = *pp) != NULL;) {
        if (live_since(core, t->last_progress_live) >= core->cfg.peer_timeout_ns) {
            ztx_free(core, pp);     /* the requester gave up or died */
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
        pp = &t->next;
    }
}

/* ---- progress ---- */

unsigned udz_core_progress(udz_core_t *core, uint64_t now_ns)
{
    unsigned count = 0, i;
    int n, j;

    core_clock(core, now_ns);
    n = core->wops->recv(core->wire, 0, core->rxmsgs, (int)core->cfg.rx_batch);
    if (n > 0) {
        core->nack = 0;
        for (j = 0; j < n; ++j) {
            rx_ctrl(core, &core->rxmsgs[j]);
        }
        for (i = 0; i < core->nack; ++i) {
            if (core->acklist[i]->ack_now && !core->acklist[i]->failed) {
                send_ack(core, core->acklist[i], 0);
            }
        }
        core->nack = 0;
        count += (unsigned)n;
    }
    if (core->zrx_busy > 0) {
        for (i = 0; i < core->cfg.channels; ++i) {
            if (core->zrx[i].peer != NULL) {
                count += zrx_poll(core, &core->zrx[i], 1 + (int)i);
            }
        }
    }
    if (core->ztx_active != NULL) {
        count += ztx_pump(core);
    }
    if ((core->active.next != &core->active) || (core->zrx_busy > 0) ||
        (core->ztx_active != NULL)) {
        timers(core);
    }
    return count;
}

/* ---- flush ---- */

int udz_flush_done(udz_core_t *core, udz_peer_t *peer, uint64_t *token, int start)
{
    uint32_t psn, gseq;
    unsigned i;

    if (start) {
        *token = ((uint64_t)(peer->next_psn - 1) << 32) | peer->get_seq;
        if ((peer->unacked != NULL) && !peer->failed) {
            send_ack(core, peer, UDZ_F_ACK_REQ);   /* do not wait for the delayed ack */
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
    for (i = 0; i < core->cfg.channels; ++i) {
        if ((core->zrx[i].peer == peer) && seq_le(core->zrx[i].seq, gseq)) {
            return 0;
        }
    }
    return 1;
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

void udz_peer_cancel(udz_core_t *core, udz_peer_t *peer, int status)
{
    unsigned i;

    for (i = 0; i < core->cfg.channels; ++i) {
        if (core->zrx[i].peer == peer) {
            zrx_finish(core, &core->zrx[i], status);
        }
    }
}

/* ---- life cycle ---- */

udz_core_t *udz_core_create(const udz_config_t *cfg, const udz_wire_ops_t *wire_ops,
                            void *wire, const udz_user_ops_t *user_ops, void *user,
                            uint64_t cookie, udz_counters_t *counters, int *err)
{
    udz_core_t *core;
    unsigned i, batch;
    size_t nwords;

    if ((cfg->seg_size < UDZ_HDR_LEN + 64) || (cfg->seg_size > 65507) ||
        (cfg->chunk_size == 0) || (cfg->chunk_size + UDZ_HDR_LEN > 65507) ||
        (cfg->tx_window == 0) || (cfg->tx_window > 32768) || (cfg->tx_pool < cfg->tx_window) ||
        (cfg->channels == 0) || (cfg->channels > UDZ_MAX_CHANNELS) || (cfg->rx_batch == 0) ||
        (cfg->rx_batch > 64) || (cfg->zc_max < cfg->chunk_size) || (cfg->ack_every == 0) ||
        (cfg->rto_ns == 0) || (cfg->rto_max_ns < cfg->rto_ns) || (cfg->max_peers == 0) ||
        (cfg->zc_max / cfg->chunk_size > (64u << 20))) {
        *err = -EINVAL;
        return NULL;
    }
    core = calloc(1, sizeof(*core));
    if (core == NULL) {
        *err = -ENOMEM;
        return NULL;
    }
    core->cfg      = *cfg;
    core->wops     = wire_ops;
    core->wire     = wire;
    core->uops     = user_ops;
    core->user     = user;
    core->cnt      = counters;
    core->cookie   = cookie;
    core->skb_size = sizeof(udz_skb_t) + ((cfg->seg_size + 7) & ~(size_t)7);
    dl_init(&core->active);
    core->hmask    = 63;
    batch          = cfg->rx_batch;
    /* a coalesced run is at most 64 datagrams and 64 KiB: enough slots to take any whole */
    core->zbatch   = (unsigned)((65536 + cfg->chunk_size + UDZ_HDR_LEN - 1) /
                                (cfg->chunk_size + UDZ_HDR_LEN));
    if (core->zbatch > 64) {
        core->zbatch = 64;
    }
    if (core->zbatch < batch) {
        core->zbatch = batch;
    }
    nwords         = (cfg->zc_max / cfg->chunk_size + 1 + 63) / 64;
    core->bitmap_words = (uint32_t)nwords;
    core->htab     = calloc(core->hmask + 1, sizeof(*core->htab));
    core->rxbuf    = aligned_alloc(64, ((batch * cfg->seg_size) + 63) & ~(size_t)63);
    core->rxmsgs   = calloc(batch, sizeof(*core->rxmsgs));
    core->acklist  = calloc(batch, sizeof(*core->acklist));
    core->zscratch = malloc(core->zbatch * cfg->chunk_size);
    core->zhdr     = calloc(core->zbatch, sizeof(*core->zhdr));
    core->zmsgs    = calloc(core->zbatch, sizeof(*core->zmsgs));
    core->ztxhdr   = calloc(64, sizeof(*core->ztxhdr));
    core->ztxmsgs  = calloc(64, sizeof(*core->ztxmsgs));
    core->zplace   = calloc(core->zbatch, sizeof(*core->zplace));
    if ((core->htab == NULL) || (core->rxbuf == NULL) || (core->rxmsgs == NULL) ||
        (core->acklist == NULL) || (core->zscratch == NULL) || (core->zhdr == NULL) ||
        (core->zmsgs == NULL) ||
        (core->ztxhdr == NULL) || (core->ztxmsgs == NULL) || (core->zplace == NULL)) {
        goto nomem;
    }
    for (i = 0; i < cfg->channels; ++i) {
        core->zrx[i].bitmap = calloc(nwords, sizeof(uint64_t));
        if (core->zrx[i].bitmap == NULL) {
            goto nomem;
        }
    }
    for (i = 0; i < batch; ++i) {
        core->rxmsgs[i].iov[0].iov_base = core->rxbuf + (size_t)i * cfg->seg_size;
        core->rxmsgs[i].iov[0].iov_len  = cfg->seg_size;
    }
    counters->peer_state_bytes += (core->hmask + 1) * sizeof(udz_peer_t*);
    return core;

nomem:
    udz_core_destroy(core);
    *err = -ENOMEM;
    return NULL;
}

void udz_core_destroy(udz_core_t *core)
{
    udz_peer_t *p, *pn;
    udz_skb_t *skb, *sn;
    udz_ztx_t *t, *tn;
    unsigned i;

    if (core == NULL) {
        return;
    }
    for (p = core->all; p != NULL; p = pn) {
        pn = p->all_next;
        for (skb = p->unacked; skb != NULL; skb = sn) {
            sn = skb->next;
            free(skb);
        }
        free(p);
    }
    for (skb = core->skb_free; skb != NULL; skb = sn) {
        sn = skb->next;
        free(skb);
    }
    for (t = core->ztx_active; t != NULL; t = tn) {
        tn = t->next;
        free(t);
    }
    for (t = core->ztx_free; t != NULL; t = tn) {
        tn = t->next;
        free(t);
    }
    for (i = 0; i < UDZ_MAX_CHANNELS; ++i) {
        free(core->zrx[i].bitmap);
    }
    free(core->htab);
    free(core->rxbuf);
    free(core->rxmsgs);
    free(core->acklist);
    free(core->zscratch);
    free(core->zhdr);
    free(core->zmsgs);
    free(core->ztxhdr);
    free(core->ztxmsgs);
    free(core->zplace);
    free(core);
}
