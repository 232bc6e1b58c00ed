/* Semantics cases: flush (remote completion), fence (ordering), pending (back-pressure). */
#include "cases.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FLUSH_SEED   0x3000u
#define FENCE_SEED   0x4000u
#define PENDING_SEED 0x5000u

static const uint64_t put_ops[] = {UCT_IFACE_FLAG_PUT_SHORT, UCT_IFACE_FLAG_PUT_BCOPY,
                                   UCT_IFACE_FLAG_PUT_ZCOPY};

/* 1 if some put op exists; else says why the case is skipped */
static int ut_any_put(ut_t *t)
{
    if (t->attr.cap.flags & (UCT_IFACE_FLAG_PUT_SHORT | UCT_IFACE_FLAG_PUT_BCOPY |
                             UCT_IFACE_FLAG_PUT_ZCOPY)) {
        return 1;
    }
    if (t->pair->role == PAIR_INITIATOR) {
        pair_log(t->pair, "skip: %s has no put operation", t->tl);
    }
    return 0;
}

/* ---- flush ---- */

#define FLUSH_PUTS 24

/* short ones small, zcopy ones large: they may all still be in flight when flushing */
static size_t flush_len(const ut_t *t, uint64_t op, size_t slot, size_t k, size_t nops)
{
    return ut_min(ut_op_len(t, op, (k % nops + 1) * 20000 + k), slot - 2 * UT_GUARD - 8);
}

/* FLUSH_PUTS puts of all available kinds in flight at once, then one flush (of the ep, then of
 * the iface), then every put must be visible at the target and every zcopy completion called. */
static int flush_round(ut_t *t, ut_buf_t *buf, size_t slot, unsigned seed, int iface_flush)
{
    uint64_t ops[3];
    size_t nops = 0, k, len, off;
    ut_comp_t comps[FLUSH_PUTS];
    ucs_status_t status;
    int ok = 1;

    for (k = 0; k < 3; ++k) {
        if (ut_put_max(t, put_ops[k]) > 0) {
            ops[nops++] = put_ops[k];
        }
    }
    for (k = 0; k < FLUSH_PUTS; ++k) {
        len = flush_len(t, ops[k % nops], slot, k, nops);
        off = UT_GUARD + k * slot;
        pair_pattern_fill(buf->addr + k * slot, len, seed + k);
        comps[k].done = 1;
        status = ut_put(t, ops[k % nops], buf, k * slot, len, t->peer_addr + off,
                        t->peer_rkey.rkey, &comps[k]);
        if (status == UCS_OK) {
            comps[k].done = 1;
        } else if (status != UCS_INPROGRESS) {
            pair_log(t->pair, "%s of %zu bytes: %s", ut_op_name(ops[k % nops]), len,
                     ucs_status_string(status));
            return 0;
        }
    }

    status = ut_flush(t, iface_flush ? NULL : t->ep);
    if (status != UCS_OK) {
        pair_log(t->pair, "%s flush: %s", iface_flush ? "iface" : "ep", ucs_status_string(status));
        return 0;
    }
    for (k = 0; k < FLUSH_PUTS; ++k) {
        len = flush_len(t, ops[k % nops], slot, k, nops);
        if (!comps[k].done) {
            pair_log(t->pair, "%s flush completed before the completion of %s #%zu",
                     iface_flush ? "iface" : "ep", ut_op_name(ops[k % nops]), k);
            ok = 0;
        }
        if (!ut_request_put_check(t, seed + k, UT_GUARD + k * slot, len, 0)) {
            pair_log(t->pair, "after %s flush, %s #%zu (%zu bytes) is not visible at the target",
                     iface_flush ? "iface" : "ep", ut_op_name(ops[k % nops]), k, len);
            ok = 0;
        }
    }
    return ok;
}

int case_flush(ut_t *t)
{
    size_t slot = (ut_min(t->cap, t->peer_len) / FLUSH_PUTS) & ~(size_t)7;
    ut_buf_t buf;
    int ok;

    if (!ut_any_put(t)) {
        return PAIR_SKIP;
    }
    if (t->pair->role == PAIR_TARGET) {
        ut_bg_fill(t->region.addr, 0, t->region.len);
        if (pair_sync(t->pair, 1) != 0) {
            return PAIR_FAIL;
        }
        return ut_serve_put_checks(t, NULL);
    }
    if ((pair_sync(t->pair, 1) != 0) || (ut_buf_alloc(t, &buf, slot * FLUSH_PUTS) != 0)) {
        return PAIR_FAIL;
    }
    ok = flush_round(t, &buf, slot, FLUSH_SEED, 0) &&
         flush_round(t, &buf, slot, FLUSH_SEED + 100, 1);
    pair_sendf(t->pair, "check done");
    ut_buf_free(t, &buf);
    return ok ? PAIR_PASS : PAIR_FAIL;
}

/* ---- fence ---- */

#define FENCE_ITERS 100

/* Iterations per phase: fewer when the data put is large (rdmach's smallest put_zcopy is
 * 16 MiB), so that filling and checking the data stays within the case's time limit on a
 * loaded machine. Both sides compute it from the same length. */
static uint64_t fence_iters(size_t data_len)
{
    uint64_t n = FENCE_ITERS * (uint64_t)(1u << 20) / (data_len ? data_len : 1);

    return (n >= FENCE_ITERS) ? FENCE_ITERS : (n < 10) ? 10 : n;
}
#define FENCE_FLAG_OFF 0
#define FENCE_DATA_OFF 4096

typedef struct {
    ut_t     *t;
    size_t   data_len;
    uint64_t handled;     /* last fence-am seen */
    int      bad;
} fence_am_t;

/* Target: the fence-am for iteration k must find the data put before the fence already there. */
static ucs_status_t fence_am_handler(void *arg, void *data, size_t length, unsigned flags)
{
    fence_am_t *f = arg;
    uint64_t k;
    ssize_t bad;

    (void)length;
    (void)flags;
    memcpy(&k, data, 8);
    bad = pair_pattern_check(f->t->region.addr + FENCE_DATA_OFF, f->data_len, FENCE_SEED + k);
    if (bad >= 0) {
        pair_log(f->t->pair, "am #%llu arrived before the data put ahead of the fence (byte %zd)",
                 (unsigned long long)k, bad);
        f->bad = 1;
    }
    f->handled = k;
    return UCS_OK;
}

static int fence_target(ut_t *t, uint64_t data_op, size_t data_len, int with_am)
{
    volatile uint64_t *flag = (volatile uint64_t*)(t->region.addr + FENCE_FLAG_OFF);
    fence_am_t f = {t, data_len, 0, 0};
    const uint64_t iters = fence_iters(data_len);
    uint64_t k;
    ssize_t bad;

    (void)data_op;
    *flag = 0;
    if (with_am &&
        (uct_iface_set_am_handler(t->iface, UT_AM_ID + 1, fence_am_handler, &f, 0) != UCS_OK)) {
        return PAIR_FAIL;
    }
    if (pair_sync(t->pair, 1) != 0) {
        return PAIR_FAIL;
    }
    /* phase 1: data put, fence, flag put; phase 2: data put, fence, am */
    for (k = 1; k <= 2 * iters; ++k) {
        if (k <= iters) {
            while ((__atomic_load_n(flag, __ATOMIC_ACQUIRE) != k) && !ut_expired(t)) {
                ut_progress(t);
            }
            if (ut_expired(t)) {
                pair_log(t->pair, "flag %llu: timed out waiting for it", (unsigned long long)k);
                return PAIR_FAIL;
            }
            bad = pair_pattern_check(t->region.addr + FENCE_DATA_OFF, data_len, FENCE_SEED + k);
            if (bad >= 0) {
                pair_log(t->pair, "flag %llu seen before the data put ahead of the fence "
                         "(byte %zd of %zu differs)", (unsigned long long)k, bad, data_len);
                f.bad = 1;
            }
        } else if (with_am) {
            while ((f.handled != k) && !ut_expired(t)) {
                ut_progress(t);
            }
        } else {
            break;
        }
        if (ut_expired(t) || (pair_sendf(t->pair, "seen %s", f.bad ? "bad" : "ok") != 0) ||
            f.bad) {
            return PAIR_FAIL;
        }
    }
    return PAIR_PASS;
}

int case_fence(ut_t *t)
{
    uint64_t data_op = 0, flag_op = 0;
    size_t data_len, i;
    int with_am = !!(t->attr.cap.flags & UCT_IFACE_FLAG_AM_SHORT);
    ut_comp_t data_comp, flag_comp;
    ucs_status_t status, fst;
    const char *seen;
    ut_buf_t buf;
    uint64_t k, iters;

    for (i = 0; i < 3; ++i) {
        if (ut_put_max(t, put_ops[2 - i]) >= 8 && !data_op) {
            data_op = put_ops[2 - i];     /* the largest kind carries the data */
        }
        if (ut_put_max(t, put_ops[i]) >= 8 && ut_op_min(t, put_ops[i]) <= 8 && !flag_op) {
            flag_op = put_ops[i];         /* the smallest kind carries the flag */
        }
    }
    if (!ut_any_put(t)) {
        return PAIR_SKIP;
    }
    if (flag_op == 0) {
        if (t->pair->role == PAIR_INITIATOR) {
            pair_log(t->pair, "skip: no put op of %s can write an 8-byte flag", t->tl);
        }
        return PAIR_SKIP;
    }
    data_len = ut_op_len(t, data_op, 65536 + 3);

    if (t->pair->role == PAIR_TARGET) {
        return fence_target(t, data_op, data_len, with_am);
    }
    /* data_len may exceed 64 KiB: the transport's smallest zcopy can be larger */
    if ((ut_buf_alloc(t, &buf, data_len + 2 * 64) != 0) || (pair_sync(t->pair, 1) != 0)) {
        return PAIR_FAIL;
    }
    iters = fence_iters(data_len);
    for (k = 1; k <= (with_am ? 2 : 1) * iters; ++k) {
        /* the data put is not waited for: the fence alone must order it before the flag */
        pair_pattern_fill(buf.addr + 64, data_len, FENCE_SEED + k);
        data_comp.done = 1;
        status = ut_put(t, data_op, &buf, 64, data_len, t->peer_addr + FENCE_DATA_OFF,
                        t->peer_rkey.rkey, &data_comp);
        if ((status != UCS_OK) && (status != UCS_INPROGRESS)) {
            pair_log(t->pair, "data %s: %s", ut_op_name(data_op), ucs_status_string(status));
            return PAIR_FAIL;
        }
        fst = uct_ep_fence(t->ep, 0);
        if (fst != UCS_OK) {
            pair_log(t->pair, "uct_ep_fence: %s", ucs_status_string(fst));
            return PAIR_FAIL;
        }
        memcpy(buf.addr, &k, 8);
        flag_comp.done = 1;
        if (k <= iters) {
            fst = ut_put(t, flag_op, &buf, 0, 8, t->peer_addr + FENCE_FLAG_OFF,
                         t->peer_rkey.rkey, &flag_comp);
        } else {
            fst = UT_RETRY(t, uct_ep_am_short(t->ep, UT_AM_ID + 1, k, NULL, 0));
        }
        if ((fst != UCS_OK) && (fst != UCS_INPROGRESS)) {
            pair_log(t->pair, "flag %s: %s",
                     (k <= iters) ? ut_op_name(flag_op) : "am_short",
                     ucs_status_string(fst));
            return PAIR_FAIL;
        }
        if ((seen = pair_expect(t->pair, "seen")) == NULL) {
            pair_log(t->pair, "iteration %llu: no answer from the target (timed out or died)",
                     (unsigned long long)k);
            return PAIR_FAIL;
        }
        if (strcmp(seen, "ok")) {
            pair_log(t->pair, "iteration %llu: the target saw the flag before the data "
                     "(data %s of %zu bytes, fence, then %s)", (unsigned long long)k,
                     ut_op_name(data_op), data_len,
                     (k <= iters) ? ut_op_name(flag_op) : "am_short");
            return PAIR_FAIL;
        }
        if ((ut_comp_wait(t, &data_comp, data_comp.done ? UCS_OK : status) != UCS_OK) ||
            (ut_comp_wait(t, &flag_comp, flag_comp.done ? UCS_OK : fst) != UCS_OK)) {
            pair_log(t->pair, "iteration %llu: zcopy completion failed", (unsigned long long)k);
            return PAIR_FAIL;
        }
    }
    ut_buf_free(t, &buf);
    return PAIR_PASS;
}

/* ---- pending ---- */

#define PENDING_REQS   64
#define PENDING_LIMIT  (1u << 22)   /* sends without back-pressure before giving up */

/* am_short number seq of the rule-based stream (length ut_rule_len(seq)) */
ucs_status_t ut_send_seq(ut_t *t, size_t seq)
{
    uint8_t msg[64];
    size_t len = ut_rule_len(seq);
    uint64_t header;

    pair_pattern_fill(msg, len, PENDING_SEED + (uint32_t)seq);
    memcpy(&header, msg, 8);
    return uct_ep_am_short(t->ep, UT_AM_ID, header, msg + 8, len - 8);
}

static ucs_status_t pending_cb(uct_pending_req_t *self)
{
    pending_req_t *req = (pending_req_t*)self;
    ucs_status_t status = ut_send_seq(req->t, req->seq);

    if (status == UCS_OK) {
        ++req->dispatched;
    }
    return status;   /* NO_RESOURCE: stays queued and dispatching stops, as UCT specifies */
}

void ut_pending_purge_cb(uct_pending_req_t *self, void *arg)
{
    (void)arg;
    ++((pending_req_t*)self)->purged;
}

/* Sends until UCS_ERR_NO_RESOURCE; returns the number sent, or 0 on error (diagnosed). */
size_t ut_fill_until_no_resource(ut_t *t, size_t *no_resource_seen)
{
    size_t seq;
    ucs_status_t status = UCS_OK;

    for (seq = 0; seq < PENDING_LIMIT; ++seq) {
        status = ut_send_seq(t, seq);
        if (status != UCS_OK) {
            break;
        }
    }
    *no_resource_seen = (status == UCS_ERR_NO_RESOURCE);
    if (status == UCS_OK) {
        pair_log(t->pair, "%u am_short sends to a peer that does not progress never returned "
                 "UCS_ERR_NO_RESOURCE", PENDING_LIMIT);
    } else if (status != UCS_ERR_NO_RESOURCE) {
        pair_log(t->pair, "am_short #%zu: %s", seq, ucs_status_string(status));
    }
    return seq;
}

/* Queues reqs[0..n) with sequence numbers from first; returns how many are now queued (the rest
 * were sent at once because the ep said UCS_ERR_BUSY and the send then succeeded), or -1. */
int ut_add_pending(ut_t *t, pending_req_t *reqs, int n, size_t first)
{
    ucs_status_t status;
    int i, queued = 0;

    for (i = 0; i < n; ++i) {
        reqs[i].uct.func = pending_cb;
        reqs[i].t        = t;
        reqs[i].seq      = first + i;
        for (;;) {
            status = uct_ep_pending_add(t->ep, &reqs[i].uct, 0);
            if (status == UCS_OK) {
                ++queued;
                break;
            }
            if (status != UCS_ERR_BUSY) {
                pair_log(t->pair, "uct_ep_pending_add: %s", ucs_status_string(status));
                return -1;
            }
            /* BUSY: resources are back, the send must be done now */
            status = ut_send_seq(t, reqs[i].seq);
            if (status == UCS_OK) {
                reqs[i].dispatched = 1;
                break;
            }
            if (status != UCS_ERR_NO_RESOURCE) {
                pair_log(t->pair, "am_short after UCS_ERR_BUSY: %s", ucs_status_string(status));
                return -1;
            }
        }
    }
    return queued;
}

int case_pending(ut_t *t)
{
    if (!ut_need(t, UCT_IFACE_FLAG_AM_SHORT | UCT_IFACE_FLAG_PENDING)) {
        return PAIR_SKIP;
    }
    pending_req_t reqs[PENDING_REQS];
    size_t sent, no_res, total, i, done;
    const char *msg;
    char text[64] = "";
    double until;
    int ok, queued;
    ssize_t n;

    if (t->pair->role == PAIR_TARGET) {
        t->rx.seed_base = PENDING_SEED;
        if (pair_sync(t->pair, 1) != 0) {
            return PAIR_FAIL;
        }
        /* not progressing until the initiator has run out of resources and queued requests */
        n = pair_recv_idle(t->pair, text, sizeof(text) - 1);
        if ((n <= 0) || (sscanf(text, "filled %zu", &total) != 1)) {
            return PAIR_FAIL;
        }
        t->rx.count = total;
        if ((msg = pair_expect(t->pair, "sent")) == NULL) {
            return PAIR_FAIL;
        }
        while ((t->rx.received < total) && !ut_expired(t)) {
            ut_progress(t);
        }
        for (until = pair_now() + 0.05; pair_now() < until;) {
            ut_progress(t);
        }
        ok = (t->rx.errors == 0) && (t->rx.received == total);
        if (t->rx.errors) {
            pair_log(t->pair, "%zu bad messages; first: %s", t->rx.errors, t->rx.first_error);
        }
        if (t->rx.received != total) {
            pair_log(t->pair, "received %zu messages, %zu were sent", t->rx.received, total);
        }
        return (pair_sync(t->pair, ok) == 0) ? PAIR_PASS : PAIR_FAIL;
    }

    memset(reqs, 0, sizeof(reqs));
    if (pair_sync(t->pair, 1) != 0) {
        return PAIR_FAIL;
    }
    sent = ut_fill_until_no_resource(t, &no_res);
    if (!no_res) {
        pair_sendf(t->pair, "filled 0");
        return PAIR_FAIL;
    }
    queued = ut_add_pending(t, reqs, PENDING_REQS, sent);
    total  = sent + PENDING_REQS;
    if ((queued < 0) || (pair_sendf(t->pair, "filled %zu", total) != 0)) {
        return PAIR_FAIL;
    }
    ok = 1;
    /* the target drains now; our progress must dispatch every queued request, in order */
    do {
        ut_progress(t);
        for (i = 0, done = 0; i < PENDING_REQS; ++i) {
            done += (reqs[i].dispatched > 0);
        }
    } while ((done < PENDING_REQS) && !ut_expired(t));
    if (done < PENDING_REQS) {
        pair_log(t->pair, "only %zu of %d pending requests were dispatched (%d queued after %zu "
                 "sends hit NO_RESOURCE)", done, PENDING_REQS, queued, sent);
        ok = 0;
    }
    for (i = 0; i < PENDING_REQS; ++i) {
        if (reqs[i].dispatched > 1) {
            pair_log(t->pair, "pending request #%zu was dispatched %d times", i,
                     reqs[i].dispatched);
            ok = 0;
        }
    }
    if (ok && (ut_flush(t, t->ep) != UCS_OK)) {
        pair_log(t->pair, "flush after the pending requests failed");
        ok = 0;
    }
    uct_ep_pending_purge(t->ep, ut_pending_purge_cb, NULL);
    pair_sendf(t->pair, "sent %zu", total);
    return ((pair_sync(t->pair, ok) == 0) && ok) ? PAIR_PASS : PAIR_FAIL;
}

/* ---- pending order ---- */

/*
 * A request waits in the pending queue; the receiver then drains the ring, so there is room
 * again - but the initiator has not progressed. A new send now must not overtake the queued
 * request (UCP matches multi-fragment messages by the order of their first fragments): it has
 * to return UCS_ERR_NO_RESOURCE until the queue has gone out.
 */
int case_pending_order(ut_t *t)
{
    if (!ut_need(t, UCT_IFACE_FLAG_AM_SHORT | UCT_IFACE_FLAG_PENDING)) {
        return PAIR_SKIP;
    }
    pending_req_t req;
    size_t sent, no_res, total;
    ucs_status_t status;
    char text[64] = "";
    int ok = 1;
    ssize_t n;

    if (t->pair->role == PAIR_TARGET) {
        t->rx.seed_base = PENDING_SEED;
        if (pair_sync(t->pair, 1) != 0) {
            return PAIR_FAIL;
        }
        n = pair_recv_idle(t->pair, text, sizeof(text) - 1);
        if ((n <= 0) || (sscanf(text, "filled %zu", &total) != 1) || (total < 2)) {
            return PAIR_FAIL;
        }
        t->rx.count = total;
        while ((t->rx.received < total - 2) && !ut_expired(t)) {
            ut_progress(t);   /* drain what was sent before the queued request */
        }
        pair_sendf(t->pair, "drained");
        while ((t->rx.received < total) && !ut_expired(t)) {
            ut_progress(t);
        }
        if (t->rx.errors) {
            pair_log(t->pair, "%zu bad messages; first: %s", t->rx.errors, t->rx.first_error);
        }
        ok = (t->rx.errors == 0) && (t->rx.received == total);
        return (pair_sync(t->pair, ok) == 0) ? PAIR_PASS : PAIR_FAIL;
    }

    memset(&req, 0, sizeof(req));
    if (pair_sync(t->pair, 1) != 0) {
        return PAIR_FAIL;
    }
    sent = ut_fill_until_no_resource(t, &no_res);
    if (!no_res || (ut_add_pending(t, &req, 1, sent) != 1)) {
        pair_sendf(t->pair, "filled 0");
        return PAIR_FAIL;
    }
    total = sent + 2;
    if ((pair_sendf(t->pair, "filled %zu", total) != 0) ||
        ((n = pair_recv_idle(t->pair, text, sizeof(text) - 1)) <= 0)) {   /* no progress here */
        return PAIR_FAIL;
    }
    status = ut_send_seq(t, sent + 1);
    if (status != UCS_ERR_NO_RESOURCE) {
        pair_log(t->pair, "with a request pending and room in the ring, a new am_short returned "
                 "%s instead of UCS_ERR_NO_RESOURCE: it overtook the queued request",
                 ucs_status_string(status));
        ok = 0;
    }
    while ((req.dispatched == 0) && !ut_expired(t)) {
        ut_progress(t);
    }
    while (ok && ((status = ut_send_seq(t, sent + 1)) == UCS_ERR_NO_RESOURCE) && !ut_expired(t)) {
        ut_progress(t);
    }
    if (ok && (status != UCS_OK)) {
        pair_log(t->pair, "am_short after the queue drained: %s", ucs_status_string(status));
        ok = 0;
    }
    return ((pair_sync(t->pair, ok) == 0) && ok) ? PAIR_PASS : PAIR_FAIL;
}

/* ---- an atomic after a put ---- */

#define AORDER_ITERS    40
#define AORDER_FLAG_OFF 0
#define AORDER_DATA_OFF 4096
#define AORDER_SEED     0x6000u

/* Target: the flag the atomic swaps in for iteration k must find the put before it there. */
static int atomic_order_target(ut_t *t, uint8_t *region, size_t data_len, unsigned seed)
{
    volatile uint64_t *flag = (volatile uint64_t*)(region + AORDER_FLAG_OFF);
    uint64_t k;
    ssize_t bad;
    int ok;

    *flag = 0;
    if (pair_sync(t->pair, 1) != 0) {
        return PAIR_FAIL;
    }
    for (k = 1; k <= AORDER_ITERS; ++k) {
        while ((__atomic_load_n(flag, __ATOMIC_ACQUIRE) != k) && !ut_expired(t)) {
            ut_progress(t);
        }
        if (ut_expired(t)) {
            pair_log(t->pair, "flag %llu: timed out waiting for it", (unsigned long long)k);
            return PAIR_FAIL;
        }
        bad = pair_pattern_check(region + AORDER_DATA_OFF, data_len, seed + k);
        ok  = bad < 0;
        if (!ok) {
            pair_log(t->pair, "flag %llu swapped in before the put ahead of it landed (byte %zd "
                     "of %zu differs)", (unsigned long long)k, bad, data_len);
        }
        if ((pair_sendf(t->pair, "seen %s", ok ? "ok" : "bad") != 0) || !ok) {
            return PAIR_FAIL;
        }
    }
    return PAIR_PASS;
}

static int atomic_order_initiator(ut_t *t, ut_buf_t *buf, uint64_t raddr, uct_rkey_t rkey,
                                  size_t data_len, unsigned seed, const char *what)
{
    ut_comp_t data_comp, amo_comp;
    ucs_status_t status, ast;
    uint64_t k, old;
    const char *seen;
    uct_iov_t iov;

    if (pair_sync(t->pair, 1) != 0) {
        return PAIR_FAIL;
    }
    for (k = 1; k <= AORDER_ITERS; ++k) {
        pair_pattern_fill(buf->addr, data_len, seed + k);
        /* one iov: rdmach's shm wire runs a single buffer on in the background */
        iov.buffer = buf->addr;
        iov.length = data_len;
        iov.memh   = buf->memh;
        iov.stride = 0;
        iov.count  = 1;
        ut_comp_init(&data_comp);
        status = UT_RETRY(t, uct_ep_put_zcopy(t->ep, &iov, 1, raddr + AORDER_DATA_OFF, rkey,
                                              &data_comp.uct));
        if ((status != UCS_OK) && (status != UCS_INPROGRESS)) {
            pair_log(t->pair, "%s: put_zcopy of %zu bytes: %s", what, data_len,
                     ucs_status_string(status));
            return PAIR_FAIL;
        }
        data_comp.done |= (status == UCS_OK);
        ut_comp_init(&amo_comp);
        ast = UT_RETRY(t, uct_ep_atomic64_fetch(t->ep, UCT_ATOMIC_OP_SWAP, k, &old,
                                                raddr + AORDER_FLAG_OFF, rkey, &amo_comp.uct));
        if ((ast != UCS_OK) && (ast != UCS_INPROGRESS)) {
            pair_log(t->pair, "%s: atomic swap: %s", what, ucs_status_string(ast));
            return PAIR_FAIL;
        }
        /* the swap's result is what Open MPI waits for: the put must be done by then */
        while ((ast == UCS_INPROGRESS) && !amo_comp.done && !ut_expired(t)) {
            ut_progress(t);
        }
        if (!data_comp.done) {
            pair_log(t->pair, "%s, iteration %llu: the swap's result came before the completion "
                     "of the %zu-byte put issued ahead of it", what, (unsigned long long)k,
                     data_len);
            ut_comp_wait(t, &data_comp, status);   /* before the rkey and buffer go */
            return PAIR_FAIL;
        }
        if ((seen = pair_expect(t->pair, "seen")) == NULL || strcmp(seen, "ok")) {
            pair_log(t->pair, "%s, iteration %llu: %s", what, (unsigned long long)k,
                     seen ? "the target saw the flag before the data" :
                            "no answer from the target (timed out or died)");
            return PAIR_FAIL;
        }
        if (ut_comp_wait(t, &data_comp, data_comp.done ? UCS_OK : status) != UCS_OK) {
            pair_log(t->pair, "%s, iteration %llu: put completion failed", what,
                     (unsigned long long)k);
            return PAIR_FAIL;
        }
    }
    return PAIR_PASS;
}

/* A large zero-copy put, not waited for, then a fetching atomic swap on the same ep, with no
 * fence between: the swap's result must not come before the put's completion, and the target
 * must find the data when it sees the flag. UCT does not promise this order; rdmach does, as
 * RC hardware gives it, because Open MPI 4.1.4's MPI_Accumulate(MPI_REPLACE) unlocks with
 * such a swap and MPI_Raccumulate completes at it (rdmach_ep.c, uct_rdmach_ep_order_atomic).
 * Twice: into the registered region (on shm: atomics the target serves) and into memory the
 * md allocated (on shm: mapped by the initiator, CPU atomics, as MPI_Win_allocate's). */
int case_atomic_order(ut_t *t)
{
    uct_rkey_bundle_t rkey2 = {.rkey = UCT_INVALID_RKEY};
    ut_buf_t buf, region2;
    size_t data_len;
    uint64_t addr2;
    int result;

    if (!(t->attr.cap.flags & UCT_IFACE_FLAG_PUT_ZCOPY) ||
        !(t->attr.cap.atomic64.fop_flags & UCS_BIT(UCT_ATOMIC_OP_SWAP))) {
        if (t->pair->role == PAIR_INITIATOR) {
            pair_log(t->pair, "skip: %s has no put_zcopy or no 64-bit atomic swap", t->tl);
        }
        return PAIR_SKIP;
    }
    /* past rdmach's shm cooperative-copy threshold (64 KiB), which is what runs on */
    data_len = ut_op_len(t, UCT_IFACE_FLAG_PUT_ZCOPY, 256 * 1024 + 8);
    if (t->pair->role == PAIR_TARGET) {
        result = atomic_order_target(t, t->region.addr, data_len, AORDER_SEED);
        if (result != PAIR_PASS) {
            return result;
        }
        if (ut_buf_alloc_md(t, &region2, AORDER_DATA_OFF + data_len) != 0) {
            return PAIR_FAIL;
        }
        if (ut_send_region(t, &region2) != 0) {
            ut_buf_free(t, &region2);
            return PAIR_FAIL;
        }
        result = atomic_order_target(t, region2.addr, data_len, AORDER_SEED + 0x100);
        /* the initiator's rkey to it is released before the memory goes */
        if ((result == PAIR_PASS) && (pair_sync(t->pair, 1) != 0)) {
            result = PAIR_FAIL;
        }
        ut_buf_free(t, &region2);
        return result;
    }
    if (ut_buf_alloc(t, &buf, data_len) != 0) {
        return PAIR_FAIL;
    }
    result = atomic_order_initiator(t, &buf, t->peer_addr, t->peer_rkey.rkey, data_len,
                                    AORDER_SEED, "registered memory");
    if (result == PAIR_PASS) {
        if (ut_recv_region(t, &addr2, &rkey2) != 0) {
            result = PAIR_FAIL;
        } else {
            result = atomic_order_initiator(t, &buf, addr2, rkey2.rkey, data_len,
                                            AORDER_SEED + 0x100, "memory the md allocated");
            uct_rkey_release(t->component, &rkey2);
            if ((result == PAIR_PASS) && (pair_sync(t->pair, 1) != 0)) {
                result = PAIR_FAIL;
            }
        }
    }
    ut_buf_free(t, &buf);
    return result;
}
