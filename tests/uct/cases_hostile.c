/*
 * A hostile peer against rdmach's served requests (uct/rdmach/rdmach_serve.h), black box: the
 * target is a real rdmach iface; the initiator claims a ring in it with rdmach's own shm wire
 * (the plain-C core, not through UCT, so nothing on its side checks what it sends) and writes
 * the records an attacker would:
 *   - the served-atomic record of d09a544 (it named the reply's pid, fd, inode and address),
 *     aimed at a word of the target's own stack with pid = the target's and inode 0: that
 *     build wrote the reply there. Now a record of that size is dropped.
 *   - the same record for an atomic at 0xfffffffffffffff8: d09a544's registration check
 *     overflowed, and the target faulted.
 *   - today's records: an atomic at 0xfffffffffffffff8 naming the target's real
 *     registration, a put through a registration the target does not have, and one at the
 *     target's stack, each refused into the attacker's own reply slot; a reply segment with
 *     a wrong inode, which must not be written anywhere in the target; and one honest ADD,
 *     served.
 * The target checks its canary and its registered word; the counters show the drops and the
 * refusals.
 */
#include "cases.h"
#include "rdmach_serve.h"
#include "rdmach_wire.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define HOSTILE_AM_SERVE     32   /* UCT_AM_ID_MAX: rdmach's served atomic */
#define HOSTILE_AM_SERVE_RMA 33
#define HOSTILE_CANARY       0x5ca1ab1e0ddba11ull

/* d09a544's served-atomic record: its reply descriptor was the peer's word. */
typedef struct {
    uint64_t address, value, compare, token;
    int32_t  pid, fd;
    uint64_t ino, base, length, dev, offset;
    uint32_t slot;
    uint8_t  op, bits;
} __attribute__((packed)) hostile_old_amo_t;

typedef struct {
    rdmach_wire_t      *wire;
    rdmach_tx_t        tx;
    uint64_t           *replies;     /* our reply segment: where honest replies go */
    rdmach_serve_replies_t named;    /* how records name it */
} hostile_t;

static void hostile_done(void *comp, int err)
{
    (void)comp;
    (void)err;
}

static int hostile_send(ut_t *t, hostile_t *h, uint8_t am_id, const void *rec, uint32_t len)
{
    rdmach_rec_hdr_t *hdr;

    while ((hdr = rdmach_tx_reserve(&h->tx, len)) == NULL) {
        if (ut_expired(t)) {
            pair_log(t->pair, "the target's ring stayed full");
            return -1;
        }
    }
    memcpy(hdr + 1, rec, len);
    rdmach_tx_commit(&h->tx, hdr, am_id, len);
    return 0;
}

/* Waits for slot's token word to become want (the target progresses meanwhile). */
static int hostile_reply(ut_t *t, hostile_t *h, uint32_t slot, uint64_t want, const char *what)
{
    volatile uint64_t *word = &h->replies[slot * RDMACH_SERVE_SLOT_WORDS + 1];

    while (__atomic_load_n(word, __ATOMIC_ACQUIRE) != want) {
        if (ut_expired(t)) {
            pair_log(t->pair, "%s: token word 0x%" PRIx64 ", expected 0x%" PRIx64, what, *word,
                     want);
            return -1;
        }
        usleep(100);
    }
    return 0;
}

static int hostile_open(ut_t *t, hostile_t *h)
{
    static rdmach_rx_stats_t stats;
    static rdmach_wire_stats_t wire_stats;
    rdmach_wire_params_t params;
    rdmach_wire_peer_t *peer;
    struct stat st;
    uint32_t id;
    void *base;
    int fd;

    memset(&params, 0, sizeof(params));
    memset(h, 0, sizeof(*h));
    if ((rdmach_geom_init(&params.geom, 256, 64, 4096, 0.25) != NULL) ||
        (rdmach_geom_init(&params.geom_large, 256, 64, 4096, 0.25) != NULL)) {
        return -1;
    }
    params.dev_name   = "memory";
    params.max_rings  = 4;
    params.max_peers  = 4;
    params.uuid       = 0xbadc0ffee;
    params.stats      = &stats;
    params.wire_stats = &wire_stats;
    params.complete   = hostile_done;
    if ((rdmach_wire_shm_ops.open(&params, &h->wire) != 0) ||
        (rdmach_wire_shm_ops.attach(h->wire, t->peer_iface_addr, &peer) != 0) ||
        (rdmach_wire_shm_ops.claim(h->wire, peer, &h->tx, &id) != 0)) {
        pair_log(t->pair, "cannot claim a ring in the target");
        return -1;
    }
    if ((ucx_ext_seg_create("hostile replies", RDMACH_SERVE_REPLY_BYTES, &fd, &base) != 0) ||
        (fstat(fd, &st) != 0)) {
        pair_log(t->pair, "cannot make a reply segment");
        return -1;
    }
    h->replies         = base;
    h->named.fd        = fd;
    h->named.ino       = st.st_ino;
    h->named.base      = (uintptr_t)base;
    return 0;
}

static void hostile_old(hostile_old_amo_t *rec, uint64_t address, pid_t target,
                        uint64_t canary)
{
    memset(rec, 0, sizeof(*rec));
    rec->address = address;
    rec->value   = 1;
    rec->token   = 1;
    rec->pid     = target;
    rec->base    = canary;
    rec->length  = 1ull << 30;
    rec->op      = RDMACH_SERVE_OP_ADD;
    rec->bits    = 64;
}

static int hostile_initiator(ut_t *t)
{
    rdmach_serve_amo_rec_t amo;
    rdmach_serve_rma_rec_t rma;
    hostile_old_amo_t old;
    hostile_t h;
    uint64_t canary;
    const char *s;
    int ok = 1;

    s = pair_expect(t->pair, "canary");
    if ((s == NULL) || (sscanf(s, "%" SCNx64, &canary) != 1) || (hostile_open(t, &h) != 0)) {
        return PAIR_FAIL;
    }
    /* d09a544: the reply into the target's stack, then a registration check that overflows */
    hostile_old(&old, t->peer_addr, t->pair->peer_pid, canary);
    ok &= hostile_send(t, &h, HOSTILE_AM_SERVE, &old, sizeof(old)) == 0;
    hostile_old(&old, 0xfffffffffffffff8ull, t->pair->peer_pid, canary);
    ok &= hostile_send(t, &h, HOSTILE_AM_SERVE, &old, sizeof(old)) == 0;

    /* today's format: an atomic at the top of the address space through a real key */
    memset(&amo, 0, sizeof(amo));
    amo.address     = 0xfffffffffffffff8ull;
    amo.value       = 1;
    amo.reg.address = t->peer_addr;
    amo.reg.length  = t->peer_len;
    amo.replies     = h.named;
    amo.op          = RDMACH_SERVE_OP_ADD;
    amo.bits        = 64;
    amo.slot        = 1;
    amo.token       = 11;
    ok &= (hostile_send(t, &h, HOSTILE_AM_SERVE, &amo, sizeof(amo)) == 0) &&
          (hostile_reply(t, &h, 1, 11 | RDMACH_SERVE_REFUSED, "atomic at 2^64 - 8") == 0);
    /* a reply segment whose inode is wrong: not mapped, and written only in the sender (at
     * an address unmapped there; a record can no longer name the target's canary) */
    amo.address      = t->peer_addr;
    amo.replies.ino ^= 1;
    amo.replies.base = 0x10000;
    amo.slot         = 2;
    amo.token        = 12;
    ok &= hostile_send(t, &h, HOSTILE_AM_SERVE, &amo, sizeof(amo)) == 0;
    /* one honest ADD of 5 on the target's first registered word */
    amo.replies = h.named;
    amo.value   = 5;
    amo.slot    = 3;
    amo.token   = 13;
    ok &= (hostile_send(t, &h, HOSTILE_AM_SERVE, &amo, sizeof(amo)) == 0) &&
          (hostile_reply(t, &h, 3, 13, "honest ADD") == 0);

    /* puts: through a registration the target does not have, and at its stack */
    memset(&rma, 0, sizeof(rma));
    rma.address     = t->peer_addr + 8;
    rma.reg.address = t->peer_addr;
    rma.reg.length  = t->peer_len + 4096;
    rma.replies     = h.named;
    rma.length      = 64;
    rma.write       = 1;
    rma.slot        = 4;
    rma.token       = 14;
    h.replies[4 * RDMACH_SERVE_SLOT_WORDS + 1] = 14 | RDMACH_SERVE_OPEN;
    ok &= (hostile_send(t, &h, HOSTILE_AM_SERVE_RMA, &rma, sizeof(rma)) == 0) &&
          (hostile_reply(t, &h, 4, 14 | RDMACH_SERVE_REFUSED, "put, wrong registration") == 0);
    rma.address     = canary;
    rma.reg.address = canary;
    rma.reg.length  = 64;
    rma.slot        = 5;
    rma.token       = 15;
    memset((void*)&h.replies[5 * RDMACH_SERVE_SLOT_WORDS + 2], 0xee, 64);
    h.replies[5 * RDMACH_SERVE_SLOT_WORDS + 1] = 15 | RDMACH_SERVE_OPEN;
    ok &= (hostile_send(t, &h, HOSTILE_AM_SERVE_RMA, &rma, sizeof(rma)) == 0) &&
          (hostile_reply(t, &h, 5, 15 | RDMACH_SERVE_REFUSED, "put at the stack") == 0);

    pair_sendf(t->pair, "done");
    rdmach_wire_shm_ops.close(h.wire);
    munmap(h.replies, RDMACH_SERVE_REPLY_BYTES);
    close(h.named.fd);
    return (pair_sync(t->pair, ok) == 0) ? PAIR_PASS : PAIR_FAIL;
}

static int hostile_target(ut_t *t)
{
    volatile uint64_t canary[8];
    uint64_t word0;
    int ok = 1, i;

    for (i = 0; i < 8; ++i) {
        canary[i] = HOSTILE_CANARY + i;
    }
    memcpy(&word0, t->region.addr, sizeof(word0));
    pair_sendf(t->pair, "canary %" PRIx64, (uint64_t)(uintptr_t)canary);
    if (pair_expect(t->pair, "done") == NULL) {   /* progresses meanwhile */
        return PAIR_FAIL;
    }
    for (i = 0; i < 8; ++i) {
        if (canary[i] != HOSTILE_CANARY + i) {
            pair_log(t->pair, "a peer's record wrote into the target's stack: word %d is 0x%"
                     PRIx64, i, canary[i]);
            ok = 0;
        }
    }
    /* the ADD of 1 whose reply had nowhere to go, and the honest ADD of 5 */
    if (*(uint64_t*)t->region.addr != word0 + 6) {
        pair_log(t->pair, "the registered word is 0x%" PRIx64 ", expected 0x%" PRIx64,
                 *(uint64_t*)t->region.addr, word0 + 6);
        ok = 0;
    }
    return (pair_sync(t->pair, ok) == 0) ? PAIR_PASS : PAIR_FAIL;
}

int case_hostile_serve(ut_t *t)
{
    if ((strcmp(t->tl, "rdmach") != 0) || ((t->dev != NULL) && strcmp(t->dev, "memory"))) {
        return PAIR_SKIP;   /* served requests exist on rdmach's shared-memory wire only */
    }
    return (t->pair->role == PAIR_INITIATOR) ? hostile_initiator(t) : hostile_target(t);
}
