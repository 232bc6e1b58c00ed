/*
 * rdmach XRC connection sharing: the decisions of rdmach_xrc.h. No verbs here: the QPs are
 * the ops' handles.
 */
#include "rdmach_xrc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int rdmach_xrc_init(rdmach_xrc_t *x, const rdmach_xrc_ops_t *ops, void *arg, unsigned max,
                    size_t host_len)
{
    memset(x, 0, sizeof(*x));
    if ((host_len == 0) || (host_len > RDMACH_XRC_HOST_MAX) || (max == 0)) {
        return -EINVAL;
    }
    x->ops      = ops;
    x->arg      = arg;
    x->max      = max;
    x->host_len = host_len;
    x->hosts    = calloc(max, sizeof(*x->hosts));
    x->tgts     = calloc(max, sizeof(*x->tgts));
    if ((x->hosts == NULL) || (x->tgts == NULL)) {
        rdmach_xrc_cleanup(x);
        return -ENOMEM;
    }
    return 0;
}

void rdmach_xrc_cleanup(rdmach_xrc_t *x)
{
    unsigned i;

    for (i = 0; (x->hosts != NULL) && (i < x->max); ++i) {
        if (x->hosts[i].users != 0) {
            x->ops->release(x->arg, x->hosts[i].ini);
        }
    }
    for (i = 0; (x->tgts != NULL) && (i < x->max); ++i) {
        if (x->tgts[i].refs != 0) {
            x->ops->release(x->arg, x->tgts[i].qp);
        }
    }
    for (i = 0; i < x->nini_pool; ++i) {
        x->ops->release(x->arg, x->ini_pool[i]);
    }
    for (i = 0; i < x->ntgt_pool; ++i) {
        x->ops->release(x->arg, x->tgt_pool[i]);
    }
    free(x->hosts);
    free(x->tgts);
    x->hosts     = NULL;
    x->tgts      = NULL;
    x->nini_pool = x->ntgt_pool = 0;
}

/* ---- candidates ---- */

static void *rdmach_xrc_take(rdmach_xrc_t *x, int tgt, uint32_t *qpn)
{
    void **pool        = tgt ? x->tgt_pool : x->ini_pool;
    uint32_t *pool_qpn = tgt ? x->tgt_pool_qpn : x->ini_pool_qpn;
    unsigned *n        = tgt ? &x->ntgt_pool : &x->nini_pool;
    void *qp;

    if (*n > 0) {
        --*n;
        *qpn = pool_qpn[*n];
        return pool[*n];
    }
    qp = tgt ? x->ops->tgt_create(x->arg, qpn) : x->ops->ini_create(x->arg, qpn);
    if (qp != NULL) {
        ++x->stats.qps_created;
    }
    return qp;
}

/* An unused candidate back to its pool (a full pool: the QP goes). Only candidates never
 * connected come here: a connected QP cannot serve another peer. */
static void rdmach_xrc_give_back(rdmach_xrc_t *x, int tgt, void *qp, uint32_t qpn)
{
    void **pool        = tgt ? x->tgt_pool : x->ini_pool;
    uint32_t *pool_qpn = tgt ? x->tgt_pool_qpn : x->ini_pool_qpn;
    unsigned *n        = tgt ? &x->ntgt_pool : &x->nini_pool;

    if (qp == NULL) {
        return;
    }
    if (*n < RDMACH_XRC_POOL) {
        pool[*n]     = qp;
        pool_qpn[*n] = qpn;
        ++*n;
    } else {
        x->ops->release(x->arg, qp);
    }
}

int rdmach_xrc_conn_open(rdmach_xrc_t *x, rdmach_xrc_conn_t *c)
{
    memset(c, 0, sizeof(*c));
    c->host = c->tgt = -1;
    c->ini_cand      = rdmach_xrc_take(x, 0, &c->ini_cand_qpn);
    c->tgt_cand      = (c->ini_cand != NULL) ? rdmach_xrc_take(x, 1, &c->tgt_cand_qpn) : NULL;
    if (c->tgt_cand == NULL) {
        rdmach_xrc_give_back(x, 0, c->ini_cand, c->ini_cand_qpn);
        c->ini_cand = NULL;
        return -ENOMEM;
    }
    return 0;
}

void rdmach_xrc_conn_pack(const rdmach_xrc_t *x, const rdmach_xrc_conn_t *c,
                          rdmach_xrc_addr_t *addr)
{
    memset(addr, 0, sizeof(*addr));
    if (c->host >= 0) {
        addr->ini_qpn  = x->hosts[c->host].ini_qpn;
        addr->tgt_used = c->tgt_used;
    } else {
        addr->ini_qpn = c->ini_cand_qpn;
    }
    /* the TGT we wired to your INI candidate at our connect (you connect after us), or the
     * candidate still to wire */
    addr->tgt_qpn = (c->tgt >= 0) ? x->tgts[c->tgt].qpn : c->tgt_cand_qpn;
}

/* ---- tables ---- */

static int rdmach_xrc_find_host(const rdmach_xrc_t *x, const void *host)
{
    unsigned i;

    for (i = 0; i < x->max; ++i) {
        if ((x->hosts[i].users != 0) && x->hosts[i].confirmed && !x->hosts[i].failed &&
            (memcmp(x->hosts[i].key, host, x->host_len) == 0)) {
            return (int)i;
        }
    }
    return -1;
}

static int rdmach_xrc_free_slot(const void *table, size_t elem, size_t users_off, unsigned max)
{
    unsigned i;

    for (i = 0; i < max; ++i) {
        if (*(const uint32_t*)((const uint8_t*)table + i * elem + users_off) == 0) {
            return (int)i;
        }
    }
    return -1;
}

static int rdmach_xrc_find_tgt(const rdmach_xrc_t *x, uint32_t qpn)
{
    unsigned i;

    for (i = 0; i < x->max; ++i) {
        if ((x->tgts[i].refs != 0) && (x->tgts[i].qpn == qpn)) {
            return (int)i;
        }
    }
    return -1;
}

/* The connection receives through the TGT qpn: a reference more on one we hold, else a new
 * one (taken from the candidate when it is ours, else opened). Returns the index or -errno. */
static int rdmach_xrc_hold_tgt(rdmach_xrc_t *x, void *own, uint32_t qpn)
{
    int t = rdmach_xrc_find_tgt(x, qpn);
    void *qp;

    if (t >= 0) {
        ++x->tgts[t].refs;
        return t;
    }
    t = rdmach_xrc_free_slot(x->tgts, sizeof(*x->tgts), offsetof(rdmach_xrc_tgt_t, refs),
                             x->max);
    if (t < 0) {
        return -EMFILE;
    }
    qp = own;
    if (qp == NULL) {
        qp = x->ops->tgt_open(x->arg, qpn);
        if (qp == NULL) {
            return -ESRCH;
        }
        ++x->stats.tgt_opens;
    }
    x->tgts[t].qp    = qp;
    x->tgts[t].qpn   = qpn;
    x->tgts[t].refs  = 1;
    x->tgts[t].owned = (own != NULL);
    return t;
}

static void rdmach_xrc_drop_tgt(rdmach_xrc_t *x, int t)
{
    if ((t >= 0) && (--x->tgts[t].refs == 0)) {
        x->ops->release(x->arg, x->tgts[t].qp);
        x->tgts[t].qp = NULL;
    }
}

static void rdmach_xrc_drop_host(rdmach_xrc_t *x, int h)
{
    if ((h >= 0) && (--x->hosts[h].users == 0)) {
        x->ops->release(x->arg, x->hosts[h].ini);
        memset(&x->hosts[h], 0, sizeof(x->hosts[h]));
    }
}

/* ---- connect ---- */

/* A candidate that a failed step may have half connected: released, never pooled. */
static void rdmach_xrc_discard(rdmach_xrc_t *x, void **qp, uint32_t *qpn)
{
    x->ops->release(x->arg, *qp);
    *qp  = NULL;
    *qpn = 0;
}

/* Receive side: which TGT of our host the peer's INI reaches, as far as we know now. */
static int rdmach_xrc_connect_rx(rdmach_xrc_t *x, rdmach_xrc_conn_t *c, const void *host,
                                 const rdmach_xrc_addr_t *peer)
{
    int ret, t;

    if ((peer->tgt_used != 0) && (peer->tgt_used != c->tgt_cand_qpn)) {
        /* the peer reaches us through a TGT it already had: our candidate is not needed */
        t = rdmach_xrc_hold_tgt(x, NULL, peer->tgt_used);
        if (t < 0) {
            return t;
        }
        rdmach_xrc_give_back(x, 1, c->tgt_cand, c->tgt_cand_qpn);
        c->pending = 0;
    } else {
        /* the peer took our candidate, or has not decided yet (speculative: pending) */
        ret = x->ops->tgt_connect(x->arg, c->tgt_cand, host, peer->ini_qpn);
        t   = (ret == 0) ? rdmach_xrc_hold_tgt(x, c->tgt_cand, c->tgt_cand_qpn) : ret;
        if (t < 0) {
            rdmach_xrc_discard(x, &c->tgt_cand, &c->tgt_cand_qpn);
            return t;
        }
        c->pending = (peer->tgt_used == 0);
    }
    c->tgt          = t;
    c->tgt_cand     = NULL;
    c->tgt_cand_qpn = 0;
    return 0;
}

/* Send side: the host connection to the peer's host. */
static int rdmach_xrc_connect_tx(rdmach_xrc_t *x, rdmach_xrc_conn_t *c, const void *host,
                                 const rdmach_xrc_addr_t *peer)
{
    int h = rdmach_xrc_find_host(x, host);
    int ret;

    if (h >= 0) {
        ++x->hosts[h].users;
        ++x->stats.shared;
        rdmach_xrc_give_back(x, 0, c->ini_cand, c->ini_cand_qpn);
    } else {
        h = rdmach_xrc_free_slot(x->hosts, sizeof(*x->hosts),
                                 offsetof(rdmach_xrc_host_t, users), x->max);
        if ((h < 0) || (peer->tgt_qpn == 0)) {
            return (h < 0) ? -EMFILE : -EPROTO;   /* a peer must offer a TGT we can use */
        }
        ret = x->ops->ini_connect(x->arg, c->ini_cand, host, peer->tgt_qpn);
        if (ret != 0) {
            rdmach_xrc_discard(x, &c->ini_cand, &c->ini_cand_qpn);
            return ret;
        }
        memcpy(x->hosts[h].key, host, x->host_len);
        x->hosts[h].ini     = c->ini_cand;
        x->hosts[h].ini_qpn = c->ini_cand_qpn;
        x->hosts[h].tgt_qpn = peer->tgt_qpn;
        x->hosts[h].users   = 1;
        /* the peer connected first: it wired its candidate to our INI candidate already */
        x->hosts[h].confirmed = (peer->tgt_used != 0);
        x->hosts[h].failed    = 0;
        ++x->stats.host_connects;
    }
    c->host         = h;
    c->tgt_used     = x->hosts[h].tgt_qpn;
    c->ini_cand     = NULL;
    c->ini_cand_qpn = 0;
    return 0;
}

int rdmach_xrc_conn_connect(rdmach_xrc_t *x, rdmach_xrc_conn_t *c, const void *host,
                            const rdmach_xrc_addr_t *peer)
{
    int ret;

    if ((c->host >= 0) || (c->tgt >= 0) || (c->ini_cand == NULL) || (c->tgt_cand == NULL) ||
        (peer->ini_qpn == 0)) {
        return -EPROTO;
    }
    ret = rdmach_xrc_connect_rx(x, c, host, peer);
    if (ret != 0) {
        return ret;
    }
    ret = rdmach_xrc_connect_tx(x, c, host, peer);
    if (ret != 0) {
        rdmach_xrc_drop_tgt(x, c->tgt);
        c->tgt     = -1;
        c->pending = 0;
    }
    return ret;
}

int rdmach_xrc_notice(rdmach_xrc_t *x, rdmach_xrc_conn_t *c, uint32_t tgt_qpn)
{
    int t;

    if ((c->tgt < 0) || (tgt_qpn == 0)) {
        ++x->stats.bad_notices;
        return -EPROTO;
    }
    if (x->tgts[c->tgt].qpn == tgt_qpn) {
        c->pending = 0;   /* the peer uses the TGT we receive through */
        return 0;
    }
    if (!c->pending) {
        ++x->stats.bad_notices;   /* resolved already by the peer's address: keep that */
        return -EPROTO;
    }
    t = rdmach_xrc_hold_tgt(x, NULL, tgt_qpn);
    if (t < 0) {
        return t;
    }
    rdmach_xrc_drop_tgt(x, c->tgt);   /* our speculative candidate: nobody sends into it */
    c->tgt     = t;
    c->pending = 0;
    return 0;
}

void rdmach_xrc_confirm(rdmach_xrc_t *x, int h)
{
    if ((h >= 0) && ((unsigned)h < x->max) && (x->hosts[h].users != 0)) {
        x->hosts[h].confirmed = 1;
    }
}

void rdmach_xrc_host_failed(rdmach_xrc_t *x, int h)
{
    if ((h >= 0) && ((unsigned)h < x->max) && (x->hosts[h].users != 0)) {
        x->hosts[h].failed = 1;
    }
}

void rdmach_xrc_conn_close(rdmach_xrc_t *x, rdmach_xrc_conn_t *c)
{
    /* candidates still held were never connected (a failed connect released its own) */
    rdmach_xrc_give_back(x, 0, c->ini_cand, c->ini_cand_qpn);
    rdmach_xrc_give_back(x, 1, c->tgt_cand, c->tgt_cand_qpn);
    rdmach_xrc_drop_host(x, c->host);
    rdmach_xrc_drop_tgt(x, c->tgt);
    memset(c, 0, sizeof(*c));
    c->host = c->tgt = -1;
}

void rdmach_xrc_model(uint64_t ppn, uint64_t nodes, rdmach_xrc_model_t *model)
{
    uint64_t remote_hosts = (nodes > 0) ? nodes - 1 : 0;

    model->ini_per_proc    = remote_hosts;
    model->tgt_per_node    = ppn * remote_hosts;   /* every remote process's INI to us */
    model->setups_per_proc = 2 * remote_hosts;
}

void rdmach_xrc_count(const rdmach_xrc_t *x, const rdmach_xrc_conn_t *conns, unsigned nconns,
                      rdmach_xrc_count_t *count)
{
    unsigned i;

    memset(count, 0, sizeof(*count));
    for (i = 0; i < x->max; ++i) {
        count->ini += (x->hosts[i].users != 0);
        if (x->tgts[i].refs != 0) {
            if (x->tgts[i].owned) {
                ++count->tgt_owned;
            } else {
                ++count->tgt_opened;
            }
        }
    }
    count->candidates = x->nini_pool + x->ntgt_pool;
    for (i = 0; i < nconns; ++i) {
        count->candidates += (conns[i].ini_cand != NULL) + (conns[i].tgt_cand != NULL);
    }
}
