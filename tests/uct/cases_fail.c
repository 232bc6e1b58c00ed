/*
 * Peer death: the initiator SIGKILLs the target (the launcher reaps it at once) and must then see
 * the failure - through the iface error handler, or an operation returning an error - within
 * DEATH_LIMIT seconds, and tear its ep down without hanging. A transport that waits forever for
 * a dead receiver to drain its ring fails here.
 */
#include "cases.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define DEATH_LIMIT   10.0
#define DEATH_REQS    8

/* One small operation towards the peer: the next am_short of the stream, or an 8-byte put. */
static ucs_status_t poke(ut_t *t, ut_buf_t *buf, size_t *seq, ut_comp_t *comp)
{
    static const uint64_t puts[] = {UCT_IFACE_FLAG_PUT_SHORT, UCT_IFACE_FLAG_PUT_BCOPY,
                                    UCT_IFACE_FLAG_PUT_ZCOPY};
    ucs_status_t status;
    int i;

    if (t->attr.cap.flags & UCT_IFACE_FLAG_AM_SHORT) {
        status = ut_send_seq(t, *seq);
        *seq  += (status == UCS_OK);
        return status;
    }
    for (i = 0; i < 3; ++i) {
        if ((t->attr.cap.flags & puts[i]) && comp->done) {
            status = ut_put(t, puts[i], buf, 0, ut_op_len(t, puts[i], 8), t->peer_addr + 64,
                            t->peer_rkey.rkey, comp);
            if (status != UCS_INPROGRESS) {
                comp->done = 1;
            }
            return (status == UCS_INPROGRESS) ? UCS_OK : status;
        }
    }
    return UCS_OK;   /* a zcopy put is still in flight: its completion will carry the error */
}

static int peer_death(ut_t *t, int full)
{
    pending_req_t reqs[DEATH_REQS];
    size_t seq = 0, no_res = 0, i, dispatched = 0, purged = 0;
    ucs_status_t status = UCS_OK, op_error = UCS_OK;
    double killed, last_check = 0, now;
    int queued = 0, ok = 1;
    ut_comp_t comp;
    ut_buf_t buf;

    if (!ut_need(t, UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE |
                   (full ? (UCT_IFACE_FLAG_AM_SHORT | UCT_IFACE_FLAG_PENDING) : 0))) {
        return PAIR_SKIP;
    }
    t->peer_killed = 1;

    if (t->pair->role == PAIR_TARGET) {
        /* one message proves the connection works; then idle (no progress) until killed */
        t->rx.seed_base = 0x6000u;
        if (pair_sync(t->pair, 1) != 0) {
            return PAIR_FAIL;
        }
        pair_recv_idle(t->pair, &seq, sizeof(seq));
        pair_log(t->pair, "was not killed");
        return PAIR_FAIL;
    }

    memset(reqs, 0, sizeof(reqs));
    memset(&comp, 0, sizeof(comp));   /* comp.uct.status is read even when no put used it */
    comp.done = 1;
    if ((ut_buf_alloc(t, &buf, 4096) != 0) || (pair_sync(t->pair, 1) != 0)) {
        return PAIR_FAIL;
    }
    status = UT_RETRY(t, poke(t, &buf, &seq, &comp));
    if (status != UCS_OK) {
        pair_log(t->pair, "first operation, before the kill: %s", ucs_status_string(status));
        return PAIR_FAIL;
    }
    if (full) {
        /* leave the ep out of resources with requests queued, then kill the drainer */
        seq    = ut_fill_until_no_resource(t, &no_res);
        if (!no_res) {
            return PAIR_FAIL;
        }
        queued = ut_add_pending(t, reqs, DEATH_REQS, seq);
        if (queued < 0) {
            return PAIR_FAIL;
        }
        seq += DEATH_REQS;
    }

    kill(t->pair->peer_pid, SIGKILL);
    killed = pair_now();
    /* the launcher reaps it: wait until the pid is really gone */
    while ((kill(t->pair->peer_pid, 0) == 0) && (pair_now() - killed < 2)) {
        usleep(1000);
    }

    while ((t->errors == 0) && (op_error == UCS_OK)) {
        now = pair_now();
        if (now - killed > DEATH_LIMIT) {
            pair_log(t->pair, "the peer was killed %.0f s ago and the ep reports no error "
                     "(%s ep_check; %zu sent)", DEATH_LIMIT,
                     (t->attr.cap.flags & UCT_IFACE_FLAG_EP_CHECK) ? "with" : "no", seq);
            ok = 0;
            break;
        }
        ut_progress(t);
        if (!full) {
            status = poke(t, &buf, &seq, &comp);
            if ((status != UCS_OK) && (status != UCS_ERR_NO_RESOURCE)) {
                op_error = status;
            }
            if (comp.done && (comp.uct.status != UCS_OK)) {
                op_error = comp.uct.status;
            }
        }
        /* UCP's keepalive calls uct_ep_check on transports that offer it; so do we */
        if ((t->attr.cap.flags & UCT_IFACE_FLAG_EP_CHECK) && (now - last_check > 0.1)) {
            last_check = now;
            status     = uct_ep_check(t->ep, 0, NULL);
            if ((status != UCS_OK) && (status != UCS_ERR_NO_RESOURCE) &&
                (status != UCS_INPROGRESS)) {
                op_error = status;
            }
        }
        usleep(500);
    }

    if (ok) {
        if (t->errors) {
            pair_log(t->pair, "info: peer failure reported by the error handler after %.2f s: %s",
                     t->err_time - killed, ucs_status_string(t->err_status));
        } else {
            pair_log(t->pair, "info: peer failure reported by an operation after %.2f s: %s "
                     "(the iface error handler was not called)", pair_now() - killed,
                     ucs_status_string(op_error));
        }
    }

    /* every queued request is either sent before the death or handed back by purge - once */
    uct_ep_pending_purge(t->ep, ut_pending_purge_cb, NULL);
    for (i = 0; i < DEATH_REQS; ++i) {
        dispatched += reqs[i].dispatched;
        purged     += reqs[i].purged;
        if (full && (reqs[i].dispatched + reqs[i].purged != 1)) {
            pair_log(t->pair, "pending request #%zu: dispatched %d times, purged %d times",
                     i, reqs[i].dispatched, reqs[i].purged);
            ok = 0;
        }
    }
    if (!comp.done) {
        /* a zcopy put still in flight on a failed ep: its completion must come */
        while (!comp.done && (pair_now() - killed < DEATH_LIMIT)) {
            ut_progress(t);
        }
        if (!comp.done) {
            pair_log(t->pair, "a put_zcopy in flight when the peer died never completed");
            ok = 0;
        }
    }
    /* ut_close destroys the ep and closes the iface: the launcher's timeout catches a hang */
    ut_buf_free(t, &buf);
    return ok ? PAIR_PASS : PAIR_FAIL;
}

int case_peer_death(ut_t *t)
{
    return peer_death(t, 0);
}

int case_peer_death_full(ut_t *t)
{
    return peer_death(t, 1);
}
