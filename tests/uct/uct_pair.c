/*
 * uct_pair: a UCT transport between two processes, through the public UCT API only.
 *
 *   uct_pair --tl rdmach --dev memory [--case a,b] [--require caps|all] [--counters] ...
 *
 * Every case forks a fresh initiator/target pair (see pair.h); prints PASS/FAIL/SKIP per case and
 * "N passed, M failed, K skipped"; exits 1 if anything failed.
 */
#include "cases.h"

#include <uct/api/v2/uct_v2.h>

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *opt_tl      = "rdmach";
static const char *opt_dev     = "memory";
static const char *opt_require = NULL;
static size_t      opt_max     = (8u << 20) + 4096;

/* ---- the caps case: what the transport reports, and whether it offers what it must ---- */

/* "inf" for the SIZE_MAX-like limits of unlimited ops */
static const char *lim(size_t v, char *buf)
{
    if (v >= ((size_t)1 << 62)) {
        return "inf";
    }
    sprintf(buf, "%zu", v);
    return buf;
}

static int case_caps(ut_t *t)
{
    const uct_iface_attr_t *a = &t->attr;
    char *copy, *tok, *save = NULL, b[12][24];
    int ok = 1, has;

    if (t->pair->role == PAIR_TARGET) {
        return PAIR_PASS;
    }
    printf("    %s/%s: am short %s bcopy %s zcopy %zu..%s (hdr %zu, iov %s); put short %s bcopy "
           "%s zcopy %zu..%s (iov %s); get short %s bcopy %s zcopy %zu..%s (iov %s); md%s%s%s, "
           "rkey %zu bytes\n", t->tl, t->dev, lim(a->cap.am.max_short, b[0]),
           lim(a->cap.am.max_bcopy, b[1]), a->cap.am.min_zcopy, lim(a->cap.am.max_zcopy, b[2]),
           a->cap.am.max_hdr, lim(a->cap.am.max_iov, b[3]), lim(a->cap.put.max_short, b[4]),
           lim(a->cap.put.max_bcopy, b[5]), a->cap.put.min_zcopy, lim(a->cap.put.max_zcopy, b[6]),
           lim(a->cap.put.max_iov, b[7]), lim(a->cap.get.max_short, b[8]),
           lim(a->cap.get.max_bcopy, b[9]), a->cap.get.min_zcopy, lim(a->cap.get.max_zcopy, b[10]),
           lim(a->cap.get.max_iov, b[11]),
           (t->md_attr.cap.flags & UCT_MD_FLAG_REG) ? " reg" : "",
           (t->md_attr.cap.flags & UCT_MD_FLAG_ALLOC) ? " alloc" : "",
           (t->md_attr.cap.flags & UCT_MD_FLAG_NEED_RKEY) ? " need_rkey" : "",
           t->md_attr.rkey_packed_size);
    fflush(stdout);
    if (opt_require == NULL) {
        return PAIR_PASS;
    }
    copy = strdup(!strcmp(opt_require, "all") ? ut_cap_names() : opt_require);
    for (tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        has = ut_has_cap(t, tok);
        if (has < 0) {
            pair_log(t->pair, "unknown capability '%s' (known: %s)", tok, ut_cap_names());
            ok = 0;
        } else if (!has) {
            pair_log(t->pair, "%s does not offer required capability %s", t->tl, tok);
            ok = 0;
        }
    }
    free(copy);
    return ok ? PAIR_PASS : PAIR_FAIL;
}

/* ---- the estimates case: what the transport tells UCP per operation ---- */

/* UCP's protocols v2 (the default from UCX 1.16) choose every protocol by these. A zero copy
 * costs more per operation than a bcopy (registration, a system call, a completion: else UCP
 * would take it for every size) and moves bytes at least as fast (it copies once at most). */
static int ut_estimate(ut_t *t, uct_ep_operation_t op, const char *name, double *ovh, double *bw)
{
    uct_perf_attr_t p = {.field_mask = UCT_PERF_ATTR_FIELD_OPERATION |
                                       UCT_PERF_ATTR_FIELD_SEND_PRE_OVERHEAD |
                                       UCT_PERF_ATTR_FIELD_SEND_POST_OVERHEAD |
                                       UCT_PERF_ATTR_FIELD_RECV_OVERHEAD |
                                       UCT_PERF_ATTR_FIELD_BANDWIDTH |
                                       UCT_PERF_ATTR_FIELD_LATENCY,
                         .operation = op};
    ucs_status_t status = uct_iface_estimate_perf(t->iface, &p);

    if (status != UCS_OK) {
        pair_log(t->pair, "estimate of %s: %s", name, ucs_status_string(status));
        return 0;
    }
    *ovh = p.send_pre_overhead + p.send_post_overhead;
    *bw  = p.bandwidth.dedicated + p.bandwidth.shared;
    printf("    %s: send %.3f us, recv %.3f us, latency %.3f us, %.2f GB/s\n", name, *ovh * 1e6,
           p.recv_overhead * 1e6, p.latency.c * 1e6, *bw / 1e9);
    if ((p.send_pre_overhead < 0) || (p.send_post_overhead < 0) || (p.recv_overhead < 0) ||
        !(p.latency.c > 0) || !(*bw > 0)) {
        pair_log(t->pair, "estimate of %s out of range", name);
        return 0;
    }
    return 1;
}

static int case_estimates(ut_t *t)
{
    static const struct {
        uct_ep_operation_t op;
        uint64_t           cap;
        const char         *name;
    } zops[] = {{UCT_EP_OP_PUT_ZCOPY, UCT_IFACE_FLAG_PUT_ZCOPY, "put_zcopy"},
                {UCT_EP_OP_GET_ZCOPY, UCT_IFACE_FLAG_GET_ZCOPY, "get_zcopy"}};
    double b_ovh, b_bw, ovh, bw;
    int ok;
    size_t i;

    if (t->pair->role == PAIR_TARGET) {
        return PAIR_PASS;
    }
    ok = ut_estimate(t, UCT_EP_OP_AM_BCOPY, "am_bcopy", &b_ovh, &b_bw);
    for (i = 0; ok && (i < sizeof(zops) / sizeof(zops[0])); i++) {
        if (!(t->attr.cap.flags & zops[i].cap)) {
            continue;
        }
        ok = ut_estimate(t, zops[i].op, zops[i].name, &ovh, &bw);
        if (ok && ((ovh < b_ovh) || (bw < b_bw))) {
            pair_log(t->pair, "%s costs less per operation (%.3f us) or moves less (%.2f GB/s) "
                     "than am_bcopy", zops[i].name, ovh * 1e6, bw / 1e9);
            ok = 0;
        }
    }
    fflush(stdout);
    return ok ? PAIR_PASS : PAIR_FAIL;
}

/* ---- one case in one process: open, run, close ---- */

static int run_case(pair_t *pair, void *arg)
{
    ut_case_fn_t fn = (ut_case_fn_t)arg;
    ut_t t;
    int result = ut_open(&t, pair, opt_tl, opt_dev, opt_max);

    if (result == 0) {
        result = fn(&t);
        /* neither side may tear down its memory while the other could still be using it */
        if ((result != PAIR_FAIL) && !t.peer_killed && (pair_sync(pair, 1) != 0)) {
            result = PAIR_FAIL;
        }
    }
    ut_close(&t);
    return result;
}

#define CASE(_name, _counters) {#_name, run_case, (void*)case_##_name, _counters, NULL, 0, 0}

/* Counter expectations use the names of the transports' counters contract (uct/common). */
static pair_case_t cases[] = {
    CASE(caps, NULL),
    CASE(estimates, NULL),
    CASE(am_short, "tx_am_short>0,rx_am>0,rx_corrupt==0"),
    CASE(am_bcopy, "tx_am_bcopy>0,rx_am>0,rx_corrupt==0"),
    CASE(am_zcopy, "tx_am_zcopy>0,rx_am>0,rx_corrupt==0"),
    CASE(am_mix, "rx_am>=3000,rx_corrupt==0"),
    CASE(am_bidir, "rx_am>=6000,rx_corrupt==0"),
    CASE(two_eps, "rx_am>=3000,rx_corrupt==0"),
    CASE(forged_land_area, "rx_corrupt==0"),
    CASE(put_short, "tx_put_short>0,rx_corrupt==0"),
    CASE(put_bcopy, "tx_put_bcopy>0,rx_corrupt==0"),
    CASE(put_zcopy, "tx_put_zcopy>0,rx_corrupt==0"),
    CASE(get_bcopy, "tx_get_bcopy>0,rx_corrupt==0"),
    CASE(get_zcopy, "tx_get_zcopy>0,rx_corrupt==0"),
    CASE(rkeys, "tx_bytes>0,rx_corrupt==0"),
    CASE(rkey_reuse, NULL),
    CASE(rkey_forged, NULL),
    CASE(bcopy_mapped, "rma_mapped>0,tx_put_bcopy>0,tx_get_bcopy>0,rx_corrupt==0"),
    CASE(flush, "tx_bytes>0,rx_corrupt==0"),
    CASE(fence, "tx_bytes>0,rx_corrupt==0"),
    CASE(fence_ifaces, "tx_get_zcopy>0,tx_no_resource>0,rx_corrupt==0"),
    CASE(atomic_order, "tx_put_zcopy>0,tx_atomic>0,rx_corrupt==0"),
    CASE(pending, "tx_no_resource>0,pending_add>0,rx_corrupt==0"),
    CASE(pending_order, "tx_no_resource>0,pending_add>0,rx_corrupt==0"),
    CASE(ep_churn, "rx_am>0,rx_corrupt==0"),
    CASE(ep_is_connected, NULL),
    CASE(hostile_serve, "serve_dropped>=2,serve_refused>=3,served>=2"),
    CASE(hostile_serve_rc, "serve_dropped>=4,rx_corrupt>=4"),
    CASE(rkey_access, "put_denied>0,get_denied>0"),
    {"dereg_revokes", run_case, (void*)case_dereg_revokes, "ztx_revoked>0",
     "UCX_UD_ZCOPY_ZC_WINDOW=256k", 0, 0},
    CASE(keys_getrandom, NULL),
    {"peer_death", run_case, (void*)case_peer_death, "peer_failed>0", NULL, 40, 1},
    {"peer_death_full", run_case, (void*)case_peer_death_full, "peer_failed>0,pending_add>0",
     NULL, 40, 1},
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: uct_pair [--tl TL] [--dev DEV] [--case NAME[,NAME]] [--require CAPS|all]\n"
            "                [--counters] [--max-size BYTES] [--timeout SEC] [--list] [-v]\n"
            "  --tl, --dev    transport and device (default rdmach/memory)\n"
            "  --case         run only these cases (--list shows them)\n"
            "  --require      the caps case fails unless the transport offers these:\n"
            "                 %s (all: every one)\n"
            "  --counters     after each passing case, check the transport counters written to\n"
            "                 a per-case subdirectory of $UCX_EXT_COUNTERS_DIR\n"
            "  --counters-all more expectations for every case that has some (e.g. that a\n"
            "                 network wire carried the traffic: wire_posts>0)\n"
            "  --max-size     largest transfer for ops whose limit is larger (default %zu)\n"
            "  --timeout      per-case limit in seconds (default 60)\n"
            "  -v             list the sizes each case sends\n",
            ut_cap_names(), opt_max);
}

int main(int argc, char **argv)
{
    static const struct option long_opts[] = {
        {"tl", required_argument, NULL, 't'},       {"dev", required_argument, NULL, 'd'},
        {"case", required_argument, NULL, 'c'},     {"require", required_argument, NULL, 'r'},
        {"counters", no_argument, NULL, 'C'},       {"max-size", required_argument, NULL, 'm'},
        {"timeout", required_argument, NULL, 'T'},  {"list", no_argument, NULL, 'l'},
        {"verbose", no_argument, NULL, 'v'},        {"help", no_argument, NULL, 'h'},
        {"counters-all", required_argument, NULL, 'A'},
        {NULL, 0, NULL, 0}};
    pair_opts_t opts = {.timeout = 60};
    int c;

    while ((c = getopt_long(argc, argv, "t:d:c:r:Cm:T:lvhA:", long_opts, NULL)) != -1) {
        switch (c) {
        case 't': opt_tl = optarg; break;
        case 'd': opt_dev = optarg; break;
        case 'c': opts.only = optarg; break;
        case 'r': opt_require = optarg; break;
        case 'C': opts.counters = 1; break;
        case 'A': opts.counters_all = optarg; break;
        case 'm': opt_max = strtoull(optarg, NULL, 0); break;
        case 'T': opts.timeout = atof(optarg); break;
        case 'v': ut_verbose = 1; break;
        case 'l': pair_list_cases(cases, sizeof(cases) / sizeof(cases[0])); return 0;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return 2;
    }
    opts.tl = opt_tl;
    /* the region must hold the largest transfer with guards, and the flush case's 24 slots */
    if (opt_max < 65536) {
        fprintf(stderr, "--max-size must be at least 65536\n");
        return 2;
    }
    printf("uct_pair: %s/%s\n", opt_tl, opt_dev);
    return pair_run_cases(cases, sizeof(cases) / sizeof(cases[0]), &opts) ? 1 : 0;
}
