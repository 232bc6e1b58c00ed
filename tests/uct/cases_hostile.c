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
 *
 * hostile_serve_rc: the same attacker over InfiniBand RC (a verbs port, e.g. rxe0:1). RC
 * serves no requests, since its peers are on other hosts: the attacker opens rdmach's own RC
 * wire (its own QP, past UCT), connects it to a new ep of the target's iface and writes
 * d09a544's record aimed at the target's stack (both processes share the guest, so that
 * build's reply went there), the same at 2^64-8, and today's atomic and put through the
 * target's real registration. Every one is dropped and counted (serve_dropped, and as
 * corrupt: rx_corrupt), nothing in the target changes, and an honest AM written after them
 * still arrives.
 */
#include "cases.h"
#include "rdmach_rc_int.h"
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
#define HOSTILE_AM_DONE      9    /* the honest AM after the hostile records (RC) */

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

static int hostile_send(ut_t *t, rdmach_tx_t *tx, uint8_t am_id, const void *rec, uint32_t len)
{
    rdmach_rec_hdr_t *hdr;

    while ((hdr = rdmach_tx_reserve(tx, len)) == NULL) {
        if (ut_expired(t)) {
            pair_log(t->pair, "the target's ring stayed full");
            return -1;
        }
    }
    memcpy(hdr + 1, rec, len);
    rdmach_tx_commit(tx, hdr, am_id, len);
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

/* The attacker's own wire: rings of slot_size x nslots, a few peers, its own counters. */
static int hostile_params(rdmach_wire_params_t *params, const char *dev_name,
                          uint32_t slot_size, uint32_t nslots, size_t max_payload)
{
    static rdmach_rx_stats_t stats;
    static rdmach_wire_stats_t wire_stats;

    memset(params, 0, sizeof(*params));
    if ((rdmach_geom_init(&params->geom, slot_size, nslots, max_payload, 0.25) != NULL) ||
        (rdmach_geom_init(&params->geom_large, slot_size, nslots, max_payload, 0.25) != NULL)) {
        return -1;
    }
    params->dev_name   = dev_name;
    params->max_rings  = 4;
    params->max_peers  = 4;
    params->uuid       = 0xbadc0ffee;
    params->stats      = &stats;
    params->wire_stats = &wire_stats;
    params->complete   = hostile_done;
    return 0;
}

static int hostile_open(ut_t *t, hostile_t *h)
{
    rdmach_wire_params_t params;
    rdmach_wire_peer_t *peer;
    struct stat st;
    uint32_t id;
    void *base;
    int fd;

    memset(h, 0, sizeof(*h));
    if (hostile_params(&params, "memory", 256, 64, 4096) != 0) {
        return -1;
    }
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
    ok &= hostile_send(t, &h.tx, HOSTILE_AM_SERVE, &old, sizeof(old)) == 0;
    hostile_old(&old, 0xfffffffffffffff8ull, t->pair->peer_pid, canary);
    ok &= hostile_send(t, &h.tx, HOSTILE_AM_SERVE, &old, sizeof(old)) == 0;

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
    ok &= (hostile_send(t, &h.tx, HOSTILE_AM_SERVE, &amo, sizeof(amo)) == 0) &&
          (hostile_reply(t, &h, 1, 11 | RDMACH_SERVE_REFUSED, "atomic at 2^64 - 8") == 0);
    /* a reply segment whose inode is wrong: not mapped, and written only in the sender (at
     * an address unmapped there; a record can no longer name the target's canary) */
    amo.address      = t->peer_addr;
    amo.replies.ino ^= 1;
    amo.replies.base = 0x10000;
    amo.slot         = 2;
    amo.token        = 12;
    ok &= hostile_send(t, &h.tx, HOSTILE_AM_SERVE, &amo, sizeof(amo)) == 0;
    /* one honest ADD of 5 on the target's first registered word */
    amo.replies = h.named;
    amo.value   = 5;
    amo.slot    = 3;
    amo.token   = 13;
    ok &= (hostile_send(t, &h.tx, HOSTILE_AM_SERVE, &amo, sizeof(amo)) == 0) &&
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
    ok &= (hostile_send(t, &h.tx, HOSTILE_AM_SERVE_RMA, &rma, sizeof(rma)) == 0) &&
          (hostile_reply(t, &h, 4, 14 | RDMACH_SERVE_REFUSED, "put, wrong registration") == 0);
    rma.address     = canary;
    rma.reg.address = canary;
    rma.reg.length  = 64;
    rma.slot        = 5;
    rma.token       = 15;
    memset((void*)&h.replies[5 * RDMACH_SERVE_SLOT_WORDS + 2], 0xee, 64);
    h.replies[5 * RDMACH_SERVE_SLOT_WORDS + 1] = 15 | RDMACH_SERVE_OPEN;
    ok &= (hostile_send(t, &h.tx, HOSTILE_AM_SERVE_RMA, &rma, sizeof(rma)) == 0) &&
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

/* ---- over RC ---- */

/* What each side of the RC attack sends the other: rdmach's RC device and ep addresses. */
typedef struct {
    rdmach_rc_dev_addr_t dev;
    rdmach_rc_ep_addr_t  ep;
} __attribute__((packed)) hostile_rc_addr_t;

static void hostile_rc_failed(void *ep_ctx, int err)
{
    (void)ep_ctx;
    (void)err;
}

/* rdmach's RC wire, opened as the target's rings are shaped, connected to the target's ep. */
static int hostile_rc_open(ut_t *t, const hostile_rc_addr_t *target, rdmach_wire_domain_t **dom,
                           rdmach_wire_t **wire, rdmach_wire_peer_t **peer, rdmach_tx_t *tx,
                           hostile_rc_addr_t *ours)
{
    const rdmach_wire_ops_t *ops = &rdmach_wire_rc_ops;
    static const rdmach_rc_config_t rc_config = {1.0, 7, 1, RDMACH_RC_XRC_NO};
    char domain[RDMACH_WIRE_DEV_NAME_MAX];
    rdmach_wire_params_t params;
    int ret;

    snprintf(domain, sizeof(domain), "%.*s", (int)strcspn(t->dev, ":"), t->dev);
    if (hostile_params(&params, t->dev, target->ep.slot_size, target->ep.nslots, 256) != 0) {
        pair_log(t->pair, "the target's rings (%u x %u) do not make a geometry",
                 target->ep.nslots, target->ep.slot_size);
        return -1;
    }
    if (target->ep.flags & RDMACH_RC_ADDR_XRC) {
        pair_log(t->pair, "the target connects through XRC: run with UCX_RDMACH_XRC=n");
        return -1;
    }
    params.failed = hostile_rc_failed;
    params.config = &rc_config;
    if ((ret = ops->domain_open(domain, dom)) != 0) {
        pair_log(t->pair, "cannot open verbs device %s: %s", domain, strerror(-ret));
        return -1;
    }
    params.domain = *dom;
    if (((ret = ops->open(&params, wire)) != 0) ||
        ((ret = ops->ep_open(*wire, NULL, peer)) != 0) ||
        ((ret = ops->ep_connect(*wire, *peer, &target->dev, &target->ep, tx)) != 0)) {
        pair_log(t->pair, "cannot connect an RC wire of our own to the target: %s",
                 strerror(-ret));
        return -1;
    }
    ops->pack_dev_addr(*wire, &ours->dev);
    ops->ep_pack_addr(*peer, &ours->ep);
    return 0;
}

static int hostile_rc_initiator(ut_t *t)
{
    const rdmach_wire_ops_t *ops = &rdmach_wire_rc_ops;
    rdmach_wire_domain_t *dom   = NULL;
    rdmach_wire_t *wire         = NULL;
    rdmach_wire_peer_t *peer    = NULL;
    hostile_rc_addr_t target, ours;
    rdmach_serve_amo_rec_t amo;
    rdmach_serve_rma_rec_t rma;
    hostile_old_amo_t old;
    uint64_t canary, done = 0;
    rdmach_tx_t tx;
    const char *s;
    int ok = 0, i;

    s = pair_expect(t->pair, "canary");
    if ((s == NULL) || (sscanf(s, "%" SCNx64, &canary) != 1) ||
        (pair_recv(t->pair, &target, sizeof(target)) != (ssize_t)sizeof(target)) ||
        (hostile_rc_open(t, &target, &dom, &wire, &peer, &tx, &ours) != 0) ||
        (pair_send(t->pair, &ours, sizeof(ours)) != 0) ||
        (pair_expect(t->pair, "connected") == NULL)) {
        goto out;
    }
    ok = 1;
    /* d09a544: the reply into the target's stack, then a registration check that overflows */
    hostile_old(&old, t->peer_addr, t->pair->peer_pid, canary);
    ok &= hostile_send(t, &tx, HOSTILE_AM_SERVE, &old, sizeof(old)) == 0;
    hostile_old(&old, 0xfffffffffffffff8ull, t->pair->peer_pid, canary);
    ok &= hostile_send(t, &tx, HOSTILE_AM_SERVE, &old, sizeof(old)) == 0;
    /* today's format, through the target's real registration: an ADD of 1 and a put of 64
     * bytes of 0xee (their replies have nowhere to go on RC) */
    memset(&amo, 0, sizeof(amo));
    amo.address     = t->peer_addr;
    amo.value       = 1;
    amo.reg.address = t->peer_addr;
    amo.reg.length  = t->peer_len;
    amo.op          = RDMACH_SERVE_OP_ADD;
    amo.bits        = 64;
    amo.token       = 21;
    ok &= hostile_send(t, &tx, HOSTILE_AM_SERVE, &amo, sizeof(amo)) == 0;
    memset(&rma, 0, sizeof(rma));
    rma.address     = t->peer_addr + 8;
    rma.reg.address = t->peer_addr;
    rma.reg.length  = t->peer_len;
    rma.length      = 64;
    rma.write       = 1;
    rma.token       = 22;
    ok &= hostile_send(t, &tx, HOSTILE_AM_SERVE_RMA, &rma, sizeof(rma)) == 0;
    /* an honest AM behind them: once the target has it, it has read the rest */
    ok &= hostile_send(t, &tx, HOSTILE_AM_DONE, &done, sizeof(done)) == 0;
    for (i = 0; (i < 1000) && (ops->progress(wire) != 0); ++i) {
    }
    if (pair_expect(t->pair, "done") == NULL) {
        ok = 0;
    }
out:
    if (peer != NULL) {
        ops->ep_close(wire, peer);
    }
    if (wire != NULL) {
        ops->close(wire);
    }
    if (dom != NULL) {
        ops->domain_close(dom);
    }
    return (pair_sync(t->pair, ok) == 0) ? PAIR_PASS : PAIR_FAIL;
}

static ucs_status_t hostile_rc_done_am(void *arg, void *data, size_t length, unsigned flags)
{
    (void)data;
    (void)length;
    (void)flags;
    *(volatile int*)arg = 1;
    return UCS_OK;
}

static int hostile_rc_target(ut_t *t)
{
    volatile uint64_t canary[8];
    uint8_t before[72];
    hostile_rc_addr_t ours, theirs;
    uct_ep_params_t ep_params;
    volatile int done = 0;
    uct_ep_h ep = NULL;
    ucs_status_t status;
    int ok = 0, i;

    for (i = 0; i < 8; ++i) {
        canary[i] = HOSTILE_CANARY + i;
    }
    memcpy(before, t->region.addr, sizeof(before));
    if ((t->attr.device_addr_len != sizeof(ours.dev)) ||
        (t->attr.ep_addr_len != sizeof(ours.ep))) {
        pair_log(t->pair, "not rdmach's RC wire: addresses of %zu and %zu bytes",
                 t->attr.device_addr_len, t->attr.ep_addr_len);
        goto out;
    }
    ep_params.field_mask = UCT_EP_PARAM_FIELD_IFACE;
    ep_params.iface      = t->iface;
    if (((status = uct_iface_set_am_handler(t->iface, HOSTILE_AM_DONE, hostile_rc_done_am,
                                            (void*)&done, 0)) != UCS_OK) ||
        ((status = uct_ep_create(&ep_params, &ep)) != UCS_OK) ||
        ((status = uct_iface_get_device_address(t->iface, (void*)&ours.dev)) != UCS_OK) ||
        ((status = uct_ep_get_address(ep, (void*)&ours.ep)) != UCS_OK)) {
        pair_log(t->pair, "a second ep for the attacker: %s", ucs_status_string(status));
        goto out;
    }
    if ((pair_sendf(t->pair, "canary %" PRIx64, (uint64_t)(uintptr_t)canary) != 0) ||
        (pair_send(t->pair, &ours, sizeof(ours)) != 0) ||
        (pair_recv(t->pair, &theirs, sizeof(theirs)) != (ssize_t)sizeof(theirs))) {
        goto out;
    }
    status = uct_ep_connect_to_ep(ep, (void*)&theirs.dev, (void*)&theirs.ep);
    if ((status != UCS_OK) || (pair_sendf(t->pair, "connected") != 0)) {
        pair_log(t->pair, "uct_ep_connect_to_ep to the attacker: %s",
                 ucs_status_string(status));
        goto out;
    }
    while (!done && !ut_expired(t)) {
        ut_progress(t);
    }
    ok = done;
    if (!done) {
        pair_log(t->pair, "the honest AM behind the hostile records never arrived");
    }
    for (i = 0; i < 8; ++i) {
        if (canary[i] != HOSTILE_CANARY + i) {
            pair_log(t->pair, "a peer's record wrote into the target's stack: word %d is 0x%"
                     PRIx64, i, canary[i]);
            ok = 0;
        }
    }
    if (memcmp(before, t->region.addr, sizeof(before)) != 0) {
        pair_log(t->pair, "a served record changed the registered region over RC");
        ok = 0;
    }
out:
    if (ep != NULL) {
        uct_ep_destroy(ep);
    }
    uct_iface_set_am_handler(t->iface, HOSTILE_AM_DONE, NULL, NULL, 0);
    pair_sendf(t->pair, "done");
    return (pair_sync(t->pair, ok) == 0) ? PAIR_PASS : PAIR_FAIL;
}

int case_hostile_serve(ut_t *t)
{
    if ((strcmp(t->tl, "rdmach") != 0) || ((t->dev != NULL) && strcmp(t->dev, "memory"))) {
        return PAIR_SKIP;   /* served requests exist on rdmach's shared-memory wire only */
    }
    return (t->pair->role == PAIR_INITIATOR) ? hostile_initiator(t) : hostile_target(t);
}

int case_hostile_serve_rc(ut_t *t)
{
    if ((strcmp(t->tl, "rdmach") != 0) || (t->dev == NULL) || (strchr(t->dev, ':') == NULL)) {
        return PAIR_SKIP;   /* rdmach on a verbs port (the RC wire) */
    }
    return (t->pair->role == PAIR_INITIATOR) ? hostile_rc_initiator(t) : hostile_rc_target(t);
}
