/*
 * libFuzzer target for the rdmach ring records (uct/rdmach/rdmach_ring.[ch], the MPICH2 RDMA
 * channel's ring): the receive side, rdmach_rx_poll and the many-ring poller, reading records
 * that a sender wrote into a ring in the receiver's memory - header (mark, length, span, type,
 * AM id), pads at the ring's end, multi-slot chunk records - and the control words a peer writes
 * (the ring's owner, the claim counter, doorbells, RC completions, the credit it returns).
 *
 * The scene, rebuilt for every input (rdmach_fuzz.h): five rings, ring 2 RDMACHF_LARGE times as
 * long as the others (rdmach's large rings: a receiver's rings differ in length), each in an
 * allocation of exactly its size (and the doorbell bytes too), so that ASan sees any access
 * past a ring; a poller over them as the glue sets it up, its activate callback doing what a
 * wire's does; an honest sender per ring (rdmach_tx) and the fuzzer, which forges headers,
 * stores arbitrary bytes into the rings and writes the peers' control words. Checked:
 *   - every delivered record lies inside its ring on a slot boundary, its header valid (span
 *     1..max_span inside the ring, header + length within the span, type AM), and its bytes
 *     are read; the core's msgs/bytes counters match the deliveries;
 *   - one record polled alone (RDMACHF_OP_POLL1) is delivered, skipped as a pad, or dropped
 *     and counted in rx_corrupt exactly as rdmach_ring.h's rules say, and its position moves
 *     by its span (1 for a corrupt span);
 *   - the credit returned never passes the receiver's position and lags it by less than the
 *     lazy tail; the hot list stays within its cap;
 *   - on a ring the fuzzer did not corrupt, the receiver gets exactly the honest sender's
 *     records, in order, and all of them once the input ends.
 * Built with -fsanitize=fuzzer,address,undefined: an out-of-bounds access or UB aborts.
 */
#include "rdmach_ring.h"
#include "rdmach_fuzz.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <vector>

namespace {

struct Sent {
    uint8_t am_id;
    uint32_t len;
    uint32_t seq;
};

struct Ring {
    int id;
    bool posted, gated;
    uint8_t *slots;             /* the ring in the receiver's memory */
    uint8_t *shadow;            /* posted: where the sender builds its records */
    rdmach_ring_ctl_t *ctl;     /* in the receiver's memory */
    rdmach_ring_ctl_t *sh_ctl;  /* posted: the sender's copy (rx_hot posted to it) */
    uint64_t tail_copy;         /* in the sender's memory: the credit the receiver returned */
    uint32_t avail;             /* ring 1: records whose completion was counted in */
    uint8_t dummy_doorbell;
    rdmach_tx_t tx;
    uint32_t seq;               /* the honest sender's next message */
    bool tainted;               /* the fuzzer wrote into it: no exact-delivery check */
    std::deque<Sent> expect;
    std::vector<Sent> racing;   /* posted: sent when the receiver demotes the ring */
    uint64_t last_pos;
    rdmach_geom_t geom;         /* its receiver's geometry for it */
    size_t ring_bytes;
    struct Scene *s;
};

struct Scene {
    rdmach_geom_t geom;         /* of every ring but ring 2 */
    rdmach_geom_t geom_large;   /* of ring 2 */
    Ring rings[RDMACHF_RINGS];
    rdmach_rx_t rx[RDMACHF_RINGS];
    uint32_t hot[RDMACHF_RINGS];
    uint8_t *doorbells;         /* RDMACHF_RINGS bytes, padded to a 64-bit word */
    uint32_t claimed;           /* the claim counter, written by senders */
    rdmach_poller_t p;
    rdmach_rx_stats_t stats;
    uint64_t delivered, delivered_bytes, bad_am_id, sink;
};

void check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "rdmach_fuzz: %s\n", what);
        abort();
    }
}

uint8_t pattern(uint32_t seq, uint32_t i) { return (uint8_t)(seq * 131u + i * 7u + 1u); }

/* The glue's deliver (uct_rdmach_iface_deliver), with checks of what the core hands over. */
void f_deliver(void *arg, const rdmach_rx_t *, uint8_t am_id, void *data, uint32_t length)
{
    Scene *s                    = (Scene*)arg;
    const uint8_t *d            = (const uint8_t*)data;
    const rdmach_rec_hdr_t *hdr = (const rdmach_rec_hdr_t*)data - 1;
    Ring *r                     = nullptr;

    for (Ring &c : s->rings) {
        if (((const uint8_t*)hdr >= c.slots) && ((const uint8_t*)hdr < c.slots + c.ring_bytes)) {
            r = &c;
        }
    }
    check(r != nullptr, "delivered a record outside every ring");
    const rdmach_geom_t *g = &r->geom;
    size_t off = (size_t)((const uint8_t*)hdr - r->slots);
    check(off % g->slot_size == 0, "record not on a slot boundary");
    uint32_t index = (uint32_t)(off / g->slot_size);
    check((hdr->nslots >= 1) && (hdr->nslots <= g->max_span) &&
          (index + hdr->nslots <= g->nslots), "delivered a record whose span is not valid");
    check(RDMACH_REC_HDR_SIZE + (uint64_t)length <= (uint64_t)hdr->nslots * g->slot_size,
          "delivered more bytes than the record's slots hold");
    check((hdr->length == length) && (hdr->type == RDMACH_REC_AM) && (hdr->am_id == am_id),
          "delivered a record unlike its header");
    for (uint32_t i = 0; i < length; ++i) {
        s->sink += d[i];    /* every delivered byte must be readable */
    }
    s->delivered++;
    s->delivered_bytes += length;
    if (!r->tainted) {
        check(!r->expect.empty(), "delivered a record the sender never sent");
        Sent e = r->expect.front();
        r->expect.pop_front();
        check((e.am_id == am_id) && (e.len == length), "delivered another record than sent");
        for (uint32_t i = 0; i < length; ++i) {
            check(d[i] == pattern(e.seq, i), "delivered other bytes than sent");
        }
    }
    if (am_id >= 32) {      /* UCT_AM_ID_MAX: the glue drops it, counted */
        s->stats.corrupt++;
        s->bad_am_id++;
    }
}

/* The wire's hooks on a posted ring: an in-order RDMA write of the record (its mark last), the
 * doorbell byte after it; the credit and rx_hot written back into the sender's memory. */
void f_post_record(void *ctx, uint32_t index, const void *rec, size_t bytes, int doorbell)
{
    Ring *r  = (Ring*)ctx;
    Scene *s = r->s;
    size_t off = (size_t)index * r->geom.slot_size;

    (void)s;
    check((index < r->geom.nslots) && (bytes >= RDMACH_REC_HDR_SIZE) &&
          (off + bytes <= r->ring_bytes), "post_record beyond the ring");
    check((const uint8_t*)rec == r->shadow + off, "post_record of another place");
    memcpy(r->slots + off + RDMACH_REC_HDR_SIZE, (const uint8_t*)rec + RDMACH_REC_HDR_SIZE,
           bytes - RDMACH_REC_HDR_SIZE);
    memcpy(r->slots + off, rec, RDMACH_REC_HDR_SIZE);
    if (r->gated) {
        r->avail++;         /* the write's completion */
    }
    if (doorbell) {
        s->doorbells[r->id] = 1;
    }
}

bool send(Ring *r, uint8_t am_id, uint32_t len);

void f_post_tail(void *ctx, uint64_t tail) { ((Ring*)ctx)->tail_copy = tail; }

/* The demotion race: records whose sender still saw rx_hot == 1 (so rang no doorbell) land
 * just as the receiver demotes the ring; its last look or a sweep must find them. */
void f_post_hot(void *ctx, uint32_t hot)
{
    Ring *r = (Ring*)ctx;
    if (hot == 0) {
        for (const Sent &e : r->racing) {
            (void)send(r, e.am_id, e.len);
        }
        r->racing.clear();
    }
    r->sh_ctl->rx_hot = hot;
}

const rdmach_ring_ops_t mapped_ops = {nullptr, nullptr, nullptr, nullptr};
const rdmach_ring_ops_t posted_ops = {f_post_record, f_post_tail, f_post_hot, nullptr};

/* What a wire's activate does: nothing until the sender described itself (owner != 0). */
int f_activate(void *arg, uint32_t id)
{
    Scene *s = (Scene*)arg;
    check(id < RDMACHF_RINGS, "activate beyond max_rings");
    Ring *r = &s->rings[id];
    if (__atomic_load_n(&r->ctl->owner, __ATOMIC_ACQUIRE) == 0) {
        return 0;
    }
    rdmach_rx_init(&s->rx[id], &r->geom, r->slots, r->ctl, r->posted ? nullptr : &r->tail_copy,
                   r->posted ? &posted_ops : &mapped_ops, r);
    if (r->gated) {
        s->rx[id].avail = &r->avail;
    }
    return 1;
}

bool send(Ring *r, uint8_t am_id, uint32_t len)
{
    rdmach_rec_hdr_t *hdr = rdmach_tx_reserve(&r->tx, len);
    if (hdr == nullptr) {
        return false;
    }
    uint8_t *d = (uint8_t*)(hdr + 1);
    for (uint32_t i = 0; i < len; ++i) {
        d[i] = pattern(r->seq, i);
    }
    rdmach_tx_commit(&r->tx, hdr, am_id, len);
    r->expect.push_back({am_id, len, r->seq});
    r->seq++;
    return true;
}

/* As the glue polls: the first look (rdmach_poller_look), then the one ring or the walk */
unsigned progress(Scene *s)
{
    switch (rdmach_poller_look(&s->p, s->claimed)) {
    case RDMACH_POLL_QUIET:
        return 0;
    case RDMACH_POLL_ONE:
        return rdmach_poller_one(&s->p, f_deliver, s);
    default:
        return rdmach_poller_progress(&s->p, s->claimed, f_activate, f_deliver, s);
    }
}

/* After every operation: counters, credit, positions, the hot list. */
void check_state(Scene *s)
{
    check(s->stats.msgs == s->delivered, "rx_am differs from the records delivered");
    check(s->stats.bytes == s->delivered_bytes, "rx_bytes differs from the bytes delivered");
    check(s->p.nhot <= s->p.hot_max, "hot list beyond its cap");
    for (uint32_t i = 0; i < s->p.nhot; ++i) {
        uint32_t id = s->p.hot[i];
        check((id < RDMACHF_RINGS) && s->rx[id].active && s->rx[id].hot, "hot list entry");
        for (uint32_t j = 0; j < i; ++j) {
            check(s->p.hot[j] != id, "a ring twice in the hot list");
        }
    }
    for (int i = 0; i < RDMACHF_RINGS; ++i) {
        rdmach_rx_t *rx = &s->rx[i];
        Ring *r         = &s->rings[i];
        if (!rx->active) {
            continue;
        }
        check(rx->pos >= r->last_pos, "the receiver's position went back");
        r->last_pos = rx->pos;
        check((rx->tail_sent <= rx->pos) && (rx->pos - rx->tail_sent < r->geom.lazy_slots),
              "credit beyond the position or lazier than the lazy tail");
        if (!r->tainted) {
            check(r->tail_copy == rx->tail_sent, "the sender's tail copy is not the credit");
        }
    }
}

/* One record alone, against rdmach_ring.h's rules. */
void poll_one(Scene *s, int id)
{
    rdmach_rx_t *rx        = &s->rx[id];
    const rdmach_geom_t *g = &s->rings[id].geom;
    if (!rx->active) {
        return;
    }
    uint32_t index        = (uint32_t)rx->pos & (g->nslots - 1);
    rdmach_rec_hdr_t hdr;
    memcpy(&hdr, s->rings[id].slots + (size_t)index * g->slot_size, sizeof(hdr));
    uint64_t pos = rx->pos, corrupt = s->stats.corrupt, msgs = s->stats.msgs;
    uint64_t tails = s->stats.tail_updates, tail_sent = rx->tail_sent, bad = s->bad_am_id;
    uint32_t avail = (rx->avail != nullptr) ? *rx->avail : 1;

    unsigned n = rdmach_rx_poll(rx, 1, f_deliver, s, &s->stats);
    if ((avail == 0) || (hdr.mark != pos + 1)) {
        check((n == 0) && (rx->pos == pos) && (s->stats.corrupt == corrupt) &&
              (s->stats.msgs == msgs), "a record without its mark (or completion) was taken");
        return;
    }
    check(n == 1, "a marked record was not taken");
    check((rx->avail == nullptr) || (*rx->avail == avail - 1), "completion not consumed");
    uint32_t span = hdr.nslots;
    bool inside   = (span >= 1) && (index + span <= g->nslots);
    if (inside && (span <= g->max_span) &&
        (RDMACH_REC_HDR_SIZE + (uint64_t)hdr.length <= (uint64_t)span * g->slot_size) &&
        (hdr.type == RDMACH_REC_AM)) {
        check((s->stats.msgs == msgs + 1) && (rx->pos == pos + span) &&
              (s->stats.corrupt == corrupt + (s->bad_am_id - bad)) &&
              (s->bad_am_id - bad == (hdr.am_id >= 32)), "a valid record was not delivered");
    } else if ((hdr.type == RDMACH_REC_PAD) && (span >= 1) && (index + span == g->nslots)) {
        check((s->stats.msgs == msgs) && (s->stats.corrupt == corrupt) &&
              (rx->pos == pos + span), "a valid pad was not skipped to the ring's start");
    } else {
        check((s->stats.msgs == msgs) && (s->stats.corrupt == corrupt + 1) &&
              (rx->pos == pos + (inside ? span : 1)),
              "a corrupt record was not dropped and counted");
    }
    bool credit = rx->pos - tail_sent >= g->lazy_slots;
    check((s->stats.tail_updates == tails + credit) &&
          (rx->tail_sent == (credit ? rx->pos : tail_sent)),
          "credit not returned once the lazy tail's worth of slots was consumed");
}

struct Input {
    const uint8_t *d;
    size_t size, off;
    uint64_t get(int bytes)
    {
        uint64_t v = 0;
        for (int i = 0; i < bytes; ++i, ++off) {
            v |= (uint64_t)((off < size) ? d[off] : 0) << (8 * i);
        }
        return v;
    }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint32_t geoms[4][4] = RDMACHF_GEOMS;
    static const uint32_t budgets[4]  = {1, 2, 4, 16};
    Input in = {data, size, 0};
    uint8_t cfg = (uint8_t)in.get(1);
    const uint32_t *gp = geoms[cfg & 3];

    Scene *s = new Scene();
    if ((rdmach_geom_init(&s->geom, gp[0], gp[1], gp[2], gp[3] / 8.0) != nullptr) ||
        (rdmach_geom_init(&s->geom_large, gp[0], gp[1] * RDMACHF_LARGE, gp[2], gp[3] / 8.0) !=
         nullptr)) {
        abort();
    }
    const uint32_t chunk = gp[2];
    s->doorbells  = (uint8_t*)calloc(1, (RDMACHF_RINGS + 7) & ~7);
    s->claimed    = RDMACHF_RINGS;
    for (int i = 0; i < RDMACHF_RINGS; ++i) {
        Ring *r   = &s->rings[i];
        r->id     = i;
        r->s      = s;
        r->posted = (i == 1) || (i == 3);
        r->gated  = (i == 1);
        r->geom       = (i == 2) ? s->geom_large : s->geom;
        r->ring_bytes = rdmach_geom_ring_bytes(&r->geom);
        r->slots  = (uint8_t*)calloc(1, r->ring_bytes);
        r->shadow = r->posted ? (uint8_t*)calloc(1, r->ring_bytes) : nullptr;
        r->ctl    = (rdmach_ring_ctl_t*)calloc(1, sizeof(rdmach_ring_ctl_t));
        r->sh_ctl = r->posted ? (rdmach_ring_ctl_t*)calloc(1, sizeof(rdmach_ring_ctl_t)) : r->ctl;
        r->ctl->owner = (i == 4) ? 0 : 1;
        rdmach_tx_init(&r->tx, &r->geom, r->posted ? r->shadow : r->slots, r->sh_ctl,
                       r->posted ? &r->dummy_doorbell : &s->doorbells[i], &r->tail_copy,
                       r->posted ? &posted_ops : &mapped_ops, r);
    }
    s->p.rx             = s->rx;
    s->p.hot            = s->hot;
    s->p.hot_max        = ((cfg >> 3) & 3) + 1;
    s->p.max_rings      = RDMACHF_RINGS;
    s->p.doorbells      = s->doorbells;
    s->p.sweep_interval = RDMACHF_SWEEP;
    s->p.idle_limit     = RDMACHF_IDLE;
    s->p.budget         = budgets[(cfg >> 5) & 3];
    s->p.poll_all       = (cfg >> 2) & 1;
    s->p.stats          = &s->stats;

    while (in.off < in.size) {
        uint8_t op = (uint8_t)in.get(1);
        Ring *r    = &s->rings[(op & 7) % RDMACHF_RINGS];
        rdmach_rx_t *rx = &s->rx[r->id];
        unsigned n = op >> 6;
        switch ((op >> 3) & 7) {
        case RDMACHF_OP_SEND: {
            uint32_t len  = (uint32_t)(in.get(2) % (chunk + 1));
            uint8_t am_id = (uint8_t)(in.get(1) & 31);
            if ((n & 1) && r->posted && (r->racing.size() < 16)) {
                r->racing.push_back({am_id, len, 0});
            } else {
                (void)send(r, am_id, len);
            }
            break;
        }
        case RDMACHF_OP_PIPE: {
            uint32_t left = (uint32_t)(in.get(2) % (RDMACHF_PIPE_CHUNKS * chunk + 1));
            for (int stalls = 0; (left > 0) && (stalls < 64);) {
                uint32_t len = (left < chunk) ? left : chunk;
                if (send(r, 3, len)) {
                    left -= len;
                } else if (progress(s) == 0) {
                    ++stalls;
                }
            }
            break;
        }
        case RDMACHF_OP_FORGE: {
            uint64_t pos = rx->active ? rx->pos : 0;
            uint32_t index = (uint32_t)pos & (r->geom.nslots - 1);
            rdmach_rec_hdr_t *hdr = (rdmach_rec_hdr_t*)(r->slots + (size_t)index *
                                                         r->geom.slot_size);
            uint64_t marks[4] = {pos + 1, pos + 1 + r->geom.nslots, pos + 1 - r->geom.nslots, 0};
            hdr->length = (uint32_t)in.get(4);
            hdr->nslots = (uint16_t)in.get(2);
            hdr->type   = (uint8_t)in.get(1);
            hdr->am_id  = (uint8_t)in.get(1);
            __atomic_store_n(&hdr->mark, marks[n], __ATOMIC_RELEASE);
            r->tainted = true;
            break;
        }
        case RDMACHF_OP_RAW: {
            uint32_t slot = (uint32_t)in.get(1) & (r->geom.nslots - 1);
            uint32_t off  = (uint32_t)in.get(1) % r->geom.slot_size;
            size_t len    = (size_t)in.get(1);
            size_t at     = (size_t)slot * r->geom.slot_size + off;
            for (size_t i = 0; i < len; ++i) {
                uint8_t b = (uint8_t)in.get(1);
                if (at + i < r->ring_bytes) {
                    r->slots[at + i] = b;
                }
            }
            r->tainted = true;
            break;
        }
        case RDMACHF_OP_CTL: {
            uint8_t what   = (uint8_t)(in.get(1) % 5);
            uint64_t value = in.get(8);
            switch (what) {
            case RDMACHF_CTL_OWNER:
                __atomic_store_n(&r->ctl->owner, value, __ATOMIC_RELEASE);
                break;
            case RDMACHF_CTL_CLAIM:
                s->claimed = (uint32_t)value;
                break;
            case RDMACHF_CTL_DOORBELL:
                s->doorbells[r->id] = (uint8_t)value;
                break;
            case RDMACHF_CTL_TAIL:
                r->tail_copy = value;
                r->tainted   = true;    /* the sender may overwrite unread records */
                break;
            case RDMACHF_CTL_AVAIL:
                if (r->gated) {
                    r->avail += (uint32_t)(value & 0xff);
                }
                break;
            }
            break;
        }
        case RDMACHF_OP_POLL:
            for (unsigned i = 0; i <= n; ++i) {
                progress(s);
            }
            break;
        case RDMACHF_OP_POLL1:
            poll_one(s, r->id);
            break;
        case RDMACHF_OP_SYNC:
            r->tx.head        = rx->active ? rx->pos : 0;
            r->tx.cached_tail = r->tx.head;
            r->tainted        = true;   /* records in flight are skipped */
            break;
        }
        check_state(s);
    }

    /* the end: everything the honest senders sent into an intact, active ring arrives */
    for (Ring &r : s->rings) {
        for (const Sent &e : r.racing) {
            (void)send(&r, e.am_id, e.len);
        }
    }
    for (int i = 0; i < 2 * RDMACHF_SWEEP; ++i) {
        progress(s);
    }
    for (int i = 0; i < RDMACHF_RINGS; ++i) {
        if (s->rx[i].active) {
            while (rdmach_rx_poll(&s->rx[i], 1u << 20, f_deliver, s, &s->stats) != 0) {
            }
        }
    }
    check_state(s);
    for (int i = 0; i < RDMACHF_RINGS; ++i) {
        if (s->rx[i].active && !s->rings[i].tainted) {
            check(s->rings[i].expect.empty(), "records of an intact ring were not delivered");
        }
    }
    static const int verbose = getenv("RDMACH_FUZZ_VERBOSE") != nullptr;
    if (verbose) {  /* what an input reached, e.g. to check that the seeds go deep */
        fprintf(stderr, "rdmach_fuzz: %zu bytes, geometry %d:", size, cfg & 3);
#define RDMACHF_PRINT(_n, _v) fprintf(stderr, " %s=%llu", _n, (unsigned long long)(_v));
        RDMACHF_PRINT("rx_am", s->stats.msgs) RDMACHF_PRINT("rx_bytes", s->stats.bytes)
        RDMACHF_PRINT("rx_corrupt", s->stats.corrupt)
        RDMACHF_PRINT("tail_updates", s->stats.tail_updates)
        RDMACHF_PRINT("doorbells", s->stats.doorbells)
        RDMACHF_PRINT("hot", s->p.nhot)
        fprintf(stderr, "\n");
#undef RDMACHF_PRINT
    }
    for (Ring &r : s->rings) {
        free(r.slots);
        free(r.shadow);
        if (r.sh_ctl != r.ctl) {
            free(r.sh_ctl);
        }
        free(r.ctl);
    }
    free(s->doorbells);
    delete s;
    return 0;
}
