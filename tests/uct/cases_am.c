/* Active-message cases: a planned list of sizes around every boundary, checked by the target's
 * AM handler (length, every byte, order, exactly once). */
#include "cases.h"
#include "unimem_uct.h"   /* the iface address case_forged_land_area forges */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AM_SEED 0x1000u
#define MAX_MSGS 16

typedef struct {
    const uint8_t *src;
    size_t        len;
} am_pack_arg_t;

static size_t am_pack(void *dest, void *arg)
{
    am_pack_arg_t *a = arg;
    memcpy(dest, a->src, a->len);
    return a->len;
}

/* Sizes are totals as the target sees them (am_short's 8-byte header included). */
static size_t am_plan(const ut_t *t, uint64_t op, size_t *sizes)
{
    const uint64_t flags = t->attr.cap.flags;
    size_t max_short = (flags & UCT_IFACE_FLAG_AM_SHORT) ? t->attr.cap.am.max_short : 0;
    size_t max_bcopy = (flags & UCT_IFACE_FLAG_AM_BCOPY) ? t->attr.cap.am.max_bcopy : 0;

    switch (op) {
    case UCT_IFACE_FLAG_AM_SHORT:
        return ut_sizes(sizes, MAX_MSGS, 8, 0, ut_min(max_short, t->cap));
    case UCT_IFACE_FLAG_AM_BCOPY:
        return ut_sizes(sizes, MAX_MSGS, 0, max_short, ut_min(max_bcopy, t->cap));
    default:
        return ut_sizes(sizes, MAX_MSGS, t->attr.cap.am.min_zcopy, max_bcopy,
                        ut_min(t->attr.cap.am.max_zcopy, t->cap));
    }
}

/* zcopy: header lengths rotate through 0, 8 and the largest allowed */
static size_t zcopy_header_len(const ut_t *t, size_t i, size_t total)
{
    size_t max_hdr = t->attr.cap.am.max_hdr;
    size_t h       = (i % 3 == 0) ? 0 : (i % 3 == 1) ? ut_min(8, max_hdr) : max_hdr;
    return ut_min(h, total);
}

static ucs_status_t send_one(ut_t *t, uct_ep_h ep, uint8_t id, uint64_t op, ut_buf_t *buf,
                             size_t off, size_t len, size_t i, ut_comp_t *comp)
{
    uint8_t *p = buf->addr + off;
    am_pack_arg_t arg = {p, len};
    uct_iov_t iov[3];
    uint64_t header;
    size_t h, iovcnt;
    ssize_t r;

    switch (op) {
    case UCT_IFACE_FLAG_AM_SHORT:
        memcpy(&header, p, 8);
        return UT_RETRY(t, uct_ep_am_short(ep, id, header, p + 8, len - 8));
    case UCT_IFACE_FLAG_AM_BCOPY:
        r = UT_RETRY(t, uct_ep_am_bcopy(ep, id, am_pack, &arg, 0));
        if ((r >= 0) && ((size_t)r != len)) {
            pair_log(t->pair, "am_bcopy of %zu bytes returned %zd", len, r);
            return UCS_ERR_IO_ERROR;
        }
        return (r < 0) ? (ucs_status_t)r : UCS_OK;
    default:
        h      = zcopy_header_len(t, i, len);
        iovcnt = ut_iov_split(iov, t->attr.cap.am.max_iov, p + h, len - h, buf->memh);
        ut_comp_init(comp);
        return UT_RETRY(t, uct_ep_am_zcopy(ep, id, p, h, iov, iovcnt, 0, &comp->uct));
    }
}

static int am_target(ut_t *t)
{
    size_t plan[MAX_MSGS + 1];
    ssize_t n = pair_recv(t->pair, plan, sizeof(plan));
    const char *sent;
    double until;
    int ok;

    if ((n < 8) || (n != (ssize_t)(8 * (plan[0] + 1)))) {
        pair_log(t->pair, "bad plan message");
        return PAIR_FAIL;
    }
    t->rx.plan      = plan + 1;
    t->rx.count     = plan[0];
    t->rx.seed_base = AM_SEED;
    if ((pair_sendf(t->pair, "ready") != 0) || ((sent = pair_expect(t->pair, "sent")) == NULL)) {
        return PAIR_FAIL;
    }
    if (strtoul(sent, NULL, 10) != t->rx.count) {
        return (pair_sync(t->pair, 1) == 0) ? PAIR_PASS : PAIR_FAIL;   /* the sender failed */
    }
    while ((t->rx.received < t->rx.count) && !ut_expired(t)) {
        ut_progress(t);
    }
    /* a little longer, to catch duplicates */
    for (until = pair_now() + 0.05; pair_now() < until;) {
        ut_progress(t);
    }
    ok = (t->rx.errors == 0) && (t->rx.received == t->rx.count);
    if (t->rx.errors) {
        pair_log(t->pair, "%zu bad messages; first: %s", t->rx.errors, t->rx.first_error);
    }
    if (t->rx.received != t->rx.count) {
        pair_log(t->pair, "received %zu messages, %zu were sent", t->rx.received, t->rx.count);
    }
    return (pair_sync(t->pair, ok) == 0) ? PAIR_PASS : PAIR_FAIL;
}

static int am_case(ut_t *t, uint64_t op)
{
    size_t plan[MAX_MSGS + 1], *sizes = plan + 1, n, i, off, total = 0;
    ut_comp_t comps[MAX_MSGS];
    ucs_status_t status = UCS_OK;
    ut_buf_t buf;
    int ok = 1;

    if (!ut_need(t, op)) {
        return PAIR_SKIP;
    }
    if (t->pair->role == PAIR_TARGET) {
        return am_target(t);
    }

    n = am_plan(t, op, sizes);
    ut_log_sizes(t, ut_op_name(op), sizes, n);
    plan[0] = n;
    for (i = 0; i < n; ++i) {
        total += sizes[i] + 8;
    }
    if ((ut_buf_alloc(t, &buf, total) != 0) || (pair_send(t->pair, plan, 8 * (n + 1)) != 0) ||
        (pair_expect(t->pair, "ready") == NULL)) {
        return PAIR_FAIL;
    }

    /* back to back: every message has its own slice, zcopy ones stay in flight meanwhile */
    for (i = 0, off = 0; (i < n) && ok; off += sizes[i] + 8, ++i) {
        comps[i].done = 1;
        pair_pattern_fill(buf.addr + off + (i % 8), sizes[i], AM_SEED + i);
        status = send_one(t, t->ep, UT_AM_ID, op, &buf, off + (i % 8), sizes[i], i, &comps[i]);
        if (status == UCS_OK) {
            comps[i].done = 1;   /* completed at once: the completion will not be called */
        }
        if ((status != UCS_OK) && (status != UCS_INPROGRESS)) {
            pair_log(t->pair, "%s message #%zu of %zu bytes: %s", ut_op_name(op), i, sizes[i],
                     ucs_status_string(status));
            ok = 0;
        }
    }
    for (i = 0; (i < n) && ok; ++i) {
        if (ut_comp_wait(t, &comps[i], comps[i].done ? UCS_OK : UCS_INPROGRESS) != UCS_OK) {
            pair_log(t->pair, "%s message #%zu of %zu bytes: completion %s", ut_op_name(op), i,
                     sizes[i], comps[i].done ? ucs_status_string(comps[i].uct.status) :
                     "never called");
            ok = 0;
        }
    }
    if (ok && ((status = ut_flush(t, t->ep)) != UCS_OK)) {
        pair_log(t->pair, "flush after %s: %s", ut_op_name(op), ucs_status_string(status));
        ok = 0;
    }
    pair_sendf(t->pair, "sent %zu", ok ? n : (size_t)0);
    ut_buf_free(t, &buf);
    return ((pair_sync(t->pair, ok) == 0) && ok) ? PAIR_PASS : PAIR_FAIL;
}

int case_am_short(ut_t *t) { return am_case(t, UCT_IFACE_FLAG_AM_SHORT); }
int case_am_bcopy(ut_t *t) { return am_case(t, UCT_IFACE_FLAG_AM_BCOPY); }
int case_am_zcopy(ut_t *t) { return am_case(t, UCT_IFACE_FLAG_AM_ZCOPY); }

/* ---- mixed streams: thousands of messages of every op and size, across ring wrap-arounds ---- */

#define MIX_MSGS  3000
#define MIX_SEED  0x11000u
#define MIX_BACK  0x100000u   /* seeds of the target -> initiator direction */
#define MIX_CAP   65536

static size_t am_mix_max(const ut_t *t)
{
    const uint64_t flags = t->attr.cap.flags;
    size_t max = 0;

    if (flags & UCT_IFACE_FLAG_AM_SHORT) max = t->attr.cap.am.max_short;
    if ((flags & UCT_IFACE_FLAG_AM_BCOPY) && (t->attr.cap.am.max_bcopy > max)) {
        max = t->attr.cap.am.max_bcopy;
    }
    if ((flags & UCT_IFACE_FLAG_AM_ZCOPY) && (t->attr.cap.am.max_zcopy > max)) {
        max = t->attr.cap.am.max_zcopy;
    }
    return ut_min(max, MIX_CAP);
}

/* Message seq of a mixed stream: every op able to carry its length takes turns. */
static ucs_status_t send_mix(ut_t *t, uct_ep_h ep, uint8_t id, ut_buf_t *buf, size_t seq,
                             uint32_t seed_base, size_t max)
{
    const uint64_t flags = t->attr.cap.flags;
    size_t len = ut_mix_len(seq, max), off = seq % 8, n = 0;
    uint64_t ops[3];
    ucs_status_t status;
    ut_comp_t comp;

    if ((flags & UCT_IFACE_FLAG_AM_SHORT) && (len >= 8) && (len <= t->attr.cap.am.max_short)) {
        ops[n++] = UCT_IFACE_FLAG_AM_SHORT;
    }
    if ((flags & UCT_IFACE_FLAG_AM_BCOPY) && (len <= t->attr.cap.am.max_bcopy)) {
        ops[n++] = UCT_IFACE_FLAG_AM_BCOPY;
    }
    if ((flags & UCT_IFACE_FLAG_AM_ZCOPY) && (len >= t->attr.cap.am.min_zcopy) &&
        (len <= t->attr.cap.am.max_zcopy)) {
        ops[n++] = UCT_IFACE_FLAG_AM_ZCOPY;
    }
    if (n == 0) {
        pair_log(t->pair, "no am op can send %zu bytes", len);
        return UCS_ERR_UNSUPPORTED;
    }
    pair_pattern_fill(buf->addr + off, len, seed_base + (uint32_t)seq);
    status = send_one(t, ep, id, ops[(seq / 3) % n], buf, off, len, seq, &comp);
    if (status == UCS_INPROGRESS) {
        status = ut_comp_wait(t, &comp, status);   /* the buffer is reused at once */
    }
    if (status != UCS_OK) {
        pair_log(t->pair, "%s message #%zu of %zu bytes: %s", ut_op_name(ops[(seq / 3) % n]), seq,
                 len, ucs_status_string(status));
    }
    return status;
}

/* Receives until count messages arrived on rx (or the deadline), a little longer for
 * duplicates. */
static int mix_receive_all(ut_t *t, ut_rx_t *rx, size_t count)
{
    double until;

    while ((rx->received < count) && !ut_expired(t)) {
        ut_progress(t);
    }
    for (until = pair_now() + 0.05; pair_now() < until;) {
        ut_progress(t);
    }
    if (rx->errors) {
        pair_log(t->pair, "%zu bad messages; first: %s", rx->errors, rx->first_error);
    }
    if (rx->received != count) {
        pair_log(t->pair, "received %zu messages, %zu were sent", rx->received, count);
    }
    return (rx->errors == 0) && (rx->received == count);
}

static int mix_case(ut_t *t, int both_ways)
{
    size_t max = am_mix_max(t), seq;
    int sender = both_ways || (t->pair->role == PAIR_INITIATOR);
    int receiver = both_ways || (t->pair->role == PAIR_TARGET);
    uint32_t tx_seed = (t->pair->role == PAIR_INITIATOR) ? MIX_SEED : MIX_SEED + MIX_BACK;
    int ok = 1;
    ut_buf_t buf;

    /* 0..15-byte messages need am_bcopy: every transport UCP can use has it */
    if (!ut_need(t, UCT_IFACE_FLAG_AM_BCOPY)) {
        return PAIR_SKIP;
    }
    t->rx.mix_max   = max;
    t->rx.count     = MIX_MSGS;
    t->rx.seed_base = (t->pair->role == PAIR_INITIATOR) ? MIX_SEED + MIX_BACK : MIX_SEED;
    if ((ut_buf_alloc(t, &buf, max + 8) != 0) || (pair_sync(t->pair, 1) != 0)) {
        return PAIR_FAIL;
    }
    /* the receiving side progresses all along: producer and consumer really run concurrently */
    for (seq = 0; sender && ok && (seq < MIX_MSGS); ++seq) {
        ok = (send_mix(t, t->ep, UT_AM_ID, &buf, seq, tx_seed, max) == UCS_OK);
    }
    if (sender && ok && (ut_flush(t, t->ep) != UCS_OK)) {
        pair_log(t->pair, "flush after the mixed stream failed");
        ok = 0;
    }
    if (ok && receiver) {
        ok = mix_receive_all(t, &t->rx, MIX_MSGS);
    }
    ut_buf_free(t, &buf);
    return ((pair_sync(t->pair, ok) == 0) && ok) ? PAIR_PASS : PAIR_FAIL;
}

int case_am_mix(ut_t *t)   { return mix_case(t, 0); }
int case_am_bidir(ut_t *t) { return mix_case(t, 1); }

/* A second ep from the same iface to the same peer iface, used alternately with the first:
 * each connection must carry its own stream intact and in order (a shared-memory transport
 * with a ring per connection must tell them apart, and set up the second one on demand). */
int case_two_eps(ut_t *t)
{
    size_t max = am_mix_max(t), seq;
    uct_ep_h ep2 = NULL;
    int ok = 1;
    ut_buf_t buf;

    if (!ut_need(t, UCT_IFACE_FLAG_AM_BCOPY) || ut_ep_to_ep(t)) {
        return PAIR_SKIP;   /* ep to ep: a second ep needs a second one at the peer */
    }
    t->rx.mix_max    = t->rx2.mix_max = max;
    t->rx.count      = t->rx2.count = MIX_MSGS / 2;
    t->rx.seed_base  = MIX_SEED;
    t->rx2.seed_base = MIX_SEED + MIX_BACK;
    if (t->pair->role == PAIR_TARGET) {
        if (pair_sync(t->pair, 1) != 0) {
            return PAIR_FAIL;
        }
        ok = mix_receive_all(t, &t->rx, MIX_MSGS / 2) & mix_receive_all(t, &t->rx2, MIX_MSGS / 2);
        return (pair_sync(t->pair, ok) == 0) ? PAIR_PASS : PAIR_FAIL;
    }

    if ((ut_connect_again(t, &ep2) != 0) || (ut_buf_alloc(t, &buf, max + 8) != 0) ||
        (pair_sync(t->pair, 1) != 0)) {
        return PAIR_FAIL;
    }
    for (seq = 0; ok && (seq < MIX_MSGS / 2); ++seq) {
        ok = (send_mix(t, t->ep, UT_AM_ID, &buf, seq, MIX_SEED, max) == UCS_OK) &&
             (send_mix(t, ep2, UT_AM_ID2, &buf, seq, MIX_SEED + MIX_BACK, max) == UCS_OK);
    }
    if (ok && ((ut_flush(t, t->ep) != UCS_OK) || (ut_flush(t, ep2) != UCS_OK))) {
        pair_log(t->pair, "flush of the two eps failed");
        ok = 0;
    }
    ut_buf_free(t, &buf);
    ok = (pair_sync(t->pair, ok) == 0) && ok;
    uct_ep_destroy(ep2);
    return ok ? PAIR_PASS : PAIR_FAIL;
}

/* unimem: a second iface of the initiator reaches the target through an address whose landing
 * area words (largest message, senders' rings) would wrap the area's size: 2^24 rings of 256
 * slots of 4 GiB. The sender must bound them by its own limits and go without a landing area,
 * its messages whole (before, it mapped the real area at the wrapped size and placed its slots
 * 4 GiB apart: a fault on the second message). */
int case_forged_land_area(ut_t *t)
{
    size_t max = am_mix_max(t), seq;
    uct_iface_config_t *config = NULL;
    uct_iface_params_t params;
    uct_unimem_iface_addr_t forged;
    uct_ep_params_t ep_params;
    uct_iface_h iface2 = NULL;
    uct_ep_h ep2       = NULL;
    int ok = 1;
    ut_buf_t buf;

    if ((strcmp(t->tl, "unimem") != 0) || !ut_need(t, UCT_IFACE_FLAG_AM_BCOPY) ||
        (t->attr.iface_addr_len != sizeof(uct_unimem_iface_addr_t))) {
        return PAIR_SKIP;
    }
    t->rx2.mix_max   = max;
    t->rx2.count     = 200;
    t->rx2.seed_base = MIX_SEED + MIX_BACK;
    if (t->pair->role == PAIR_TARGET) {
        if (pair_sync(t->pair, 1) != 0) {
            return PAIR_FAIL;
        }
        ok = mix_receive_all(t, &t->rx2, 200);
        return (pair_sync(t->pair, ok) == 0) ? PAIR_PASS : PAIR_FAIL;
    }

    memcpy(&forged, t->peer_iface_addr, sizeof(forged));
    forged.seg_size   = 0xffffffc0u;
    forged.land_rings = 1u << 24;
    forged.land_slots = 256;
    ut_iface_params(t, &params);
    ep_params.field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR |
                           UCT_EP_PARAM_FIELD_IFACE_ADDR;
    ep_params.dev_addr   = t->peer_dev_addr;
    ep_params.iface_addr = (const uct_iface_addr_t*)&forged;
    if ((uct_md_iface_config_read(t->md, t->tl, NULL, NULL, &config) != UCS_OK) ||
        (uct_iface_open(t->md, t->worker, &params, config, &iface2) != UCS_OK) ||
        ((ep_params.iface = iface2), (uct_ep_create(&ep_params, &ep2) != UCS_OK)) ||
        (ut_buf_alloc(t, &buf, max + 8) != 0)) {
        pair_log(t->pair, "a second iface and an ep to the forged address: not made");
        ok = 0;
    }
    if (config != NULL) {
        uct_config_release(config);
    }
    if (pair_sync(t->pair, ok) != 0) {
        ok = 0;
    }
    for (seq = 0; ok && (seq < 200); ++seq) {
        ok = send_mix(t, ep2, UT_AM_ID2, &buf, seq, MIX_SEED + MIX_BACK, max) == UCS_OK;
    }
    if (ok && (ut_flush(t, ep2) != UCS_OK)) {
        pair_log(t->pair, "flush of the ep to the forged address failed");
        ok = 0;
    }
    if (ep2 != NULL) {
        ut_buf_free(t, &buf);
        uct_ep_destroy(ep2);
    }
    ok = (pair_sync(t->pair, ok) == 0) && ok;
    if (iface2 != NULL) {
        uct_iface_close(iface2);
    }
    return ok ? PAIR_PASS : PAIR_FAIL;
}
