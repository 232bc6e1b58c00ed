/*
 * Connection churn at the UCT level: eps to the same peer made, used and destroyed again and
 * again. For a transport that connects ep to ep (rdmach's RC wire) both sides create an ep per
 * cycle and exchange the ep addresses, as UCP's wireup would; to an iface, the initiator
 * connects again each cycle. Every cycle's message carries its cycle number, checked at the
 * target. With UCX_RDMACH_MAX_PEERS=8 (the verbs tier) an RC iface runs out of rings after 8
 * connections unless the rings of destroyed ones come back (rdmach_rc_reap). Open descriptors
 * and resident memory must stay flat from the first quarter of the cycles on (an RC
 * connection's QP and block of two rings, 1 MiB with the default ring, must go with it).
 */
#include "cases.h"

#include <stdlib.h>
#include <string.h>

#define CHURN_AM_ID  9
#define CHURN_CYCLES 40

typedef struct {
    uint64_t want;      /* the cycle whose message is due */
    size_t   got;
    size_t   bad;
} churn_rx_t;

static ucs_status_t churn_am(void *arg, void *data, size_t length, unsigned flags)
{
    churn_rx_t *rx = arg;
    uint64_t hdr;

    (void)flags;
    memcpy(&hdr, data, sizeof(hdr));
    if ((length != sizeof(hdr)) || (hdr != rx->want)) {
        ++rx->bad;
    } else {
        ++rx->got;
        ++rx->want;
    }
    return UCS_OK;
}

#define CHURN_RSS_SLACK_KB 4096   /* RSS may grow this much after the first quarter */

/* An ep to the peer for this cycle: ep to ep (addresses exchanged now), or to its iface. */
static int churn_connect(ut_t *t, uct_ep_h *ep_p)
{
    uint8_t mine[512], theirs[512];
    uct_ep_params_t params;
    ucs_status_t status;
    ssize_t n;

    if (!ut_ep_to_ep(t)) {
        return (t->pair->role == PAIR_INITIATOR) ? ut_connect_again(t, ep_p) : (*ep_p = NULL, 0);
    }
    params.field_mask = UCT_EP_PARAM_FIELD_IFACE;
    params.iface      = t->iface;
    if ((t->attr.ep_addr_len > sizeof(mine)) ||
        ((status = uct_ep_create(&params, ep_p)) != UCS_OK)) {
        pair_log(t->pair, "uct_ep_create (ep to ep): %s",
                 (t->attr.ep_addr_len > sizeof(mine)) ? "address too long" :
                 ucs_status_string(status));
        *ep_p = NULL;
        return -1;
    }
    if (((status = uct_ep_get_address(*ep_p, (void*)mine)) != UCS_OK) ||
        (pair_send(t->pair, mine, t->attr.ep_addr_len) != 0) ||
        ((n = pair_recv(t->pair, theirs, sizeof(theirs))) != (ssize_t)t->attr.ep_addr_len) ||
        ((status = uct_ep_connect_to_ep(*ep_p, t->peer_dev_addr, (void*)theirs)) != UCS_OK)) {
        pair_log(t->pair, "connecting a new ep: %s", ucs_status_string(status));
        return -1;
    }
    return 0;
}

int case_ep_churn(ut_t *t)
{
    const char *env = getenv("UT_CHURN_CYCLES");
    size_t cycles   = (env != NULL) ? strtoul(env, NULL, 0) : CHURN_CYCLES, c;
    churn_rx_t rx   = {0, 0, 0};
    uct_ep_h ep     = NULL;
    ucs_status_t status;
    long fds0 = -1, rss0 = -1, fds, rss;
    double until;
    int ok = 1;

    if (!ut_need(t, UCT_IFACE_FLAG_AM_SHORT)) {
        return PAIR_SKIP;
    }
    if (uct_iface_set_am_handler(t->iface, CHURN_AM_ID, churn_am, &rx, 0) != UCS_OK) {
        return PAIR_FAIL;
    }
    for (c = 0; ok && (c < cycles); ++c) {
        if (churn_connect(t, &ep) != 0) {
            pair_log(t->pair, "cycle %zu: no ep", c);
            ok = 0;
        }
        ok = (pair_sync(t->pair, ok) == 0) && ok;
        if (ok && (t->pair->role == PAIR_INITIATOR)) {
            uint64_t hdr = c;

            do {
                status = uct_ep_am_short(ep, CHURN_AM_ID, hdr, NULL, 0);
                ut_progress(t);
            } while ((status == UCS_ERR_NO_RESOURCE) && !ut_expired(t));
            if ((status != UCS_OK) || (ut_flush(t, ep) != UCS_OK)) {
                pair_log(t->pair, "cycle %zu: am_short %s", c, ucs_status_string(status));
                ok = 0;
            }
        } else if (ok) {
            while ((rx.got <= c) && (rx.bad == 0) && !ut_expired(t)) {
                ut_progress(t);
            }
            if (rx.got != c + 1) {
                pair_log(t->pair, "cycle %zu: %zu messages of %zu, %zu bad", c, rx.got, c + 1,
                         rx.bad);
                ok = 0;
            }
        }
        ok = (pair_sync(t->pair, ok) == 0) && ok;
        if (ep != NULL) {
            uct_ep_destroy(ep);
            ep = NULL;
        }
        /* the closed connection's end settles (RC: its QP flushes, its ring comes back) */
        for (until = pair_now() + 0.002; pair_now() < until;) {
            ut_progress(t);
        }
        if (c + 1 == cycles / 4) {
            fds0 = pair_fds();
            rss0 = pair_rss_kb();
        }
    }
    fds = pair_fds();
    rss = pair_rss_kb();
    if (ok && (fds0 >= 0) && (rss0 >= 0) &&
        ((fds != fds0) || (rss > rss0 + CHURN_RSS_SLACK_KB))) {
        pair_log(t->pair, "after %zu connections: %ld descriptors (%ld at a quarter), RSS %ld "
                 "KiB (%ld KiB at a quarter)", cycles, fds, fds0, rss, rss0);
        ok = 0;
    }
    uct_iface_set_am_handler(t->iface, CHURN_AM_ID, NULL, NULL, 0);
    if (ok && (t->pair->role == PAIR_TARGET) && ut_ep_to_ep(t)) {
        pair_log(t->pair, "%zu connections made and closed, every message in order; %ld "
                 "descriptors and RSS %ld KiB from a quarter on (then %ld KiB)", cycles, fds,
                 rss, rss0);
    }
    return ok ? PAIR_PASS : PAIR_FAIL;
}
