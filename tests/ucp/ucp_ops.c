/*
 * ucp_ops: tag, stream, rma and amo through UCP between two processes, with UCX_TLS naming the
 * transport under test. Every case also checks (ucp_ext) that the ep's lanes use that transport
 * - a silent fallback fails - and, with --counters, that the transport's counters moved.
 *
 *   UCX_TLS=rdmach ucp_ops --tl rdmach [--case a,b] [--counters] [-v]
 */
#include "ucp_cases.h"

#include <ucp_ext.h>

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *opt_tl = "rdmach";
static int         opt_verbose;

typedef int (*up_case_fn_t)(up_t *u);

static int case_tag_eager_short(up_t *u)
{
    static const size_t sizes[] = {0, 1, 8, 33};
    return up_tag_case(u, sizes, sizeof(sizes) / sizeof(sizes[0]));
}

/* run with UCX_RNDV_THRESH=inf: larger than one AM, so eager in several fragments */
static int case_tag_eager_multi(up_t *u)
{
    static const size_t sizes[] = {16383, 16385, 65537, 262147};
    return up_tag_case(u, sizes, sizeof(sizes) / sizeof(sizes[0]));
}

/* run with UCX_RNDV_THRESH=64K: rendezvous for sure */
static int case_tag_rndv(up_t *u)
{
    static const size_t sizes[] = {(1u << 20) + 3, 4u << 20};
    return up_tag_case(u, sizes, sizeof(sizes) / sizeof(sizes[0]));
}

static int run_case(pair_t *pair, void *arg)
{
    up_case_fn_t fn = (up_case_fn_t)arg;
    int ok;
    up_t u;

    if (up_open(&u, pair, opt_tl, 0) != 0) {
        up_close(&u, 0);
        return PAIR_FAIL;
    }
    ok = fn(&u);
    /* after the traffic, so that wireup is certainly over */
    if (up_check_lanes(&u) != 0) {
        ok = 0;
    }
    if (opt_verbose && (pair->role == PAIR_INITIATOR)) {
        ucp_ext_ep_print_lanes(u.ep, stdout);
        fflush(stdout);
    }
    return up_close(&u, ok) ? PAIR_PASS : PAIR_FAIL;
}

/*
 * Peer death through UCP: eps with UCP_ERR_HANDLING_MODE_PEER (what ucx_perftest -e and
 * fault-tolerant MPI use); after the target is SIGKILLed, sends on the initiator's ep must end
 * in the ep error handler (or failed requests) within PEER_DEATH_LIMIT seconds. With arg set,
 * the operations after the kill are fetching atomics on the dead target's malloc'd memory
 * (rdmach: atomics its target serves, which it must stop waiting for).
 */
#define PEER_DEATH_LIMIT 10.0

static int run_peer_death(pair_t *pair, void *arg)
{
    ucp_request_param_t param = {.op_attr_mask = 0};
    ucp_request_param_t close = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                 .flags        = UCP_EP_CLOSE_FLAG_FORCE};
    static const size_t warmup[] = {8};
    ucs_status_t status = UCS_OK;
    ucs_status_ptr_t req;
    uint64_t payload = 42, one = 1, old, raddr = 0;
    ucp_rkey_h rkey = NULL;
    double killed;
    int r, ok;
    up_t u;

    r = up_open(&u, pair, opt_tl, 1);
    if (r != 0) {
        up_close(&u, 0);
        return r;
    }
    /* the connection works, and its lanes are the right ones, before the kill */
    ok = up_tag_case(&u, warmup, 1) && (up_check_lanes(&u) == 0) &&
         ((arg == NULL) || (up_amo_region(&u, &raddr, &rkey) == 0));
    if (!ok || (pair->role == PAIR_TARGET)) {
        /* the target waits to be killed */
        if (ok) {
            pair_recv_idle(pair, &payload, sizeof(payload));
            pair_log(pair, "was not killed");
        }
        up_close(&u, 0);
        return PAIR_FAIL;
    }

    kill(pair->peer_pid, SIGKILL);
    killed = pair_now();
    while ((u.ep_errors == 0) && (pair_now() - killed < PEER_DEATH_LIMIT)) {
        if (arg == NULL) {
            req = ucp_tag_send_nbx(u.ep, &payload, sizeof(payload), 1, &param);
        } else {
            param.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_REPLY_BUFFER;
            param.datatype     = ucp_dt_make_contig(sizeof(one));
            param.reply_buffer = &old;
            req = ucp_atomic_op_nbx(u.ep, UCP_ATOMIC_OP_ADD, &one, 1, raddr, rkey, &param);
            /* UCP may never complete an emulated atomic whose reply cannot come (it keeps
             * it after the ep failed): wait for the request or the ep's error, not for the
             * case's deadline, and leave an unfinished request alone */
            while (!UCS_PTR_IS_ERR(req) && (req != NULL) && (u.ep_errors == 0) &&
                   (ucp_request_check_status(req) == UCS_INPROGRESS) &&
                   (pair_now() - killed < PEER_DEATH_LIMIT)) {
                up_progress(&u);
            }
            if ((u.ep_errors != 0) && !UCS_PTR_IS_ERR(req) && (req != NULL) &&
                (ucp_request_check_status(req) == UCS_INPROGRESS)) {
                break;
            }
        }
        status = up_wait(&u, req);
        if ((status != UCS_OK) && (status != UCS_ERR_TIMED_OUT)) {
            break;
        }
        up_progress(&u);
    }
    if (u.ep_errors) {
        pair_log(pair, "info: the ep error handler reported %s %.2f s after the kill",
                 ucs_status_string(u.ep_status), u.ep_error_time - killed);
    } else if ((status != UCS_OK) && (status != UCS_ERR_TIMED_OUT)) {
        pair_log(pair, "info: a send failed with %s %.2f s after the kill (no ep error handler "
                 "call)", ucs_status_string(status), pair_now() - killed);
    } else {
        pair_log(pair, "the peer was killed %.0f s ago and UCP reports no error on the ep",
                 PEER_DEATH_LIMIT);
        ok = 0;
    }
    if (rkey != NULL) {
        ucp_rkey_destroy(rkey);
    }
    status = up_wait(&u, ucp_ep_close_nbx(u.ep, &close));
    u.ep   = NULL;
    up_close(&u, 0);
    return ok ? PAIR_PASS : PAIR_FAIL;
}

#define CASE(_name, _fn, _counters, _env) {_name, run_case, (void*)_fn, _counters, _env, 0, 0}

/* Counter expectations use the names of the transports' counters contract (uct/common). */
static pair_case_t cases[] = {
    CASE("tag_eager_short", case_tag_eager_short, "tx_am_short>0,rx_am>0,rx_corrupt==0", NULL),
    CASE("tag_eager_multi", case_tag_eager_multi, "tx_am_bcopy>0|tx_am_zcopy>0,rx_corrupt==0",
         "UCX_RNDV_THRESH=inf"),
    /* rdmach: rendezvous from EAGER_LIMIT on, its data by zero copy from ZCOPY_THRESH on */
    CASE("tag_rndv", case_tag_rndv, "tx_get_zcopy>0|tx_put_zcopy>0,rx_corrupt==0",
         "UCX_RNDV_THRESH=65536 UCX_RDMACH_EAGER_LIMIT=64k UCX_RDMACH_ZCOPY_THRESH=64k"),
    /* rdmach: rendezvous whose data is pipelined through the ring (below ZCOPY_THRESH) */
    CASE("tag_rndv_ring", case_tag_rndv,
         "tx_am_bcopy>0,tx_get_zcopy==0,tx_put_zcopy==0,rx_corrupt==0",
         "UCX_RNDV_THRESH=65536 UCX_RDMACH_EAGER_LIMIT=64k UCX_RDMACH_ZCOPY_THRESH=64m"),
    CASE("stream", up_stream_case, "tx_am_short>0|tx_am_bcopy>0|tx_am_zcopy>0,rx_am>0", NULL),
    CASE("rma", up_rma_case,
         "tx_put_short>0|tx_put_bcopy>0|tx_put_zcopy>0,tx_get_bcopy>0|tx_get_zcopy>0", NULL),
    /* UCP emulates atomics with active messages, unless the transport has device atomics
     * (rdmach on a verbs port: tests/verbs checks they went through the wire) */
    CASE("amo", up_amo_case, "rx_am>0|tx_atomic>0,rx_corrupt==0", NULL),
    /* the same on memory UCP allocates (Open MPI's Win_allocate): on shared memory it is a
     * file the peer maps (the posix or sysv md's), so rdmach's and unimem's puts and gets are
     * stores and loads, and rdmach's atomics CPU atomics; on rdmach's RC wire alone
     * (tests/verbs: no shared-memory device, so UCP closes those mds and allocates
     * anonymous memory) they go through the QPs, atomics the device's. main() gives the
     * other transports the plain expectations */
    CASE("rma_alloc", up_rma_case, "rma_mapped>0|wire_posts>0", "UCP_OPS_ALLOCATE=1"),
    CASE("amo_alloc", up_amo_case, "atomic_cpu>0|wire_atomics>0,atomic_served==0,rx_corrupt==0",
         "UCP_OPS_ALLOCATE=1"),
    /* rdmach on shared memory: small puts and gets on memory it cannot map (the rma case's
     * malloc'd region, MPI_Win_create) are served by the target's progress (on its RC wire
     * they go through the QPs); and, with a target that makes no progress for a while, they
     * are taken back and done one-sided. The other transports must not wait for the
     * target either (unimem: zDMA; ud_zcopy: its async progress); main() gives them rma's
     * counter expectations. A target that a loaded machine deschedules for longer than the
     * initiator waits has every request taken back (rma_revoked): the served path still ran */
    CASE("rma_served", up_rma_case, "rma_served>0|rma_revoked>0|wire_posts>0,rx_corrupt==0",
         "UCP_OPS_SMALL_ROUNDS=10"),
    CASE("rma_quiet", up_rma_quiet_case, "rma_revoked>0|wire_posts>0,rx_corrupt==0", NULL),
    CASE("am", up_am_case, "tx_am_short>0,tx_get_zcopy>0|tx_put_zcopy>0,rx_corrupt==0",
         "UCX_RDMACH_ZCOPY_THRESH=2m"),
    {"peer_death", run_peer_death, NULL, "peer_failed>0", NULL, 40, 1},
    {"peer_death_amo", run_peer_death, (void*)1, "peer_failed>0", NULL, 40, 1},
};

/* UCP 1.16 and later select protocols by performance estimates (protocols v2) */
static int ucp_protocols_v2(void)
{
    unsigned major, minor, release;

    ucp_get_version(&major, &minor, &release);
    return (major > 1) || (minor >= 16);
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ucp_ops [--tl TL[,TL]] [--case NAME[,NAME]] [--counters] [--timeout SEC]\n"
            "               [--list] [-v]\n"
            "  --tl        transports the ep lanes must use (default rdmach; \"self\" lanes are\n"
            "              always allowed); UCX_TLS defaults to the same list\n"
            "  --counters  check the first TL's counters per case under $UCX_EXT_COUNTERS_DIR\n"
            "  -v          print the initiator ep's lanes for each case\n");
}

int main(int argc, char **argv)
{
    static const struct option long_opts[] = {
        {"tl", required_argument, NULL, 't'},      {"case", required_argument, NULL, 'c'},
        {"counters", no_argument, NULL, 'C'},      {"timeout", required_argument, NULL, 'T'},
        {"list", no_argument, NULL, 'l'},          {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0}};
    pair_opts_t opts = {.timeout = 60};
    char counters_tl[64];
    int c;

    while ((c = getopt_long(argc, argv, "t:c:CT:lvh", long_opts, NULL)) != -1) {
        switch (c) {
        case 't': opt_tl = optarg; break;
        case 'c': opts.only = optarg; break;
        case 'C': opts.counters = 1; break;
        case 'T': opts.timeout = atof(optarg); break;
        case 'v': opt_verbose = 1; break;
        case 'l': pair_list_cases(cases, sizeof(cases) / sizeof(cases[0])); return 0;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return 2;
    }
    snprintf(counters_tl, sizeof(counters_tl), "%.*s", (int)strcspn(opt_tl, ","), opt_tl);
    opts.tl = counters_tl;
    /* rdmach and unimem map what their md allocates; only rdmach has CPU atomics */
    for (c = 0; c < (int)(sizeof(cases) / sizeof(cases[0])); ++c) {
        if ((!strcmp(cases[c].name, "rma_alloc") && strcmp(counters_tl, "rdmach") &&
             strcmp(counters_tl, "unimem")) ||
            (!strcmp(cases[c].name, "amo_alloc") && strcmp(counters_tl, "rdmach"))) {
            cases[c].counters = cases[c - 2].counters;   /* rma's, amo's */
        }
        if (!strcmp(cases[c].name, "rma_served") && strcmp(counters_tl, "rdmach")) {
            cases[c].counters = cases[c - 4].counters;   /* rma's */
        }
        if (!strcmp(cases[c].name, "rma_quiet") && strcmp(counters_tl, "rdmach")) {
            cases[c].counters = cases[c - 5].counters;   /* rma's */
        }
        /* UCP's protocols v2 (1.16 on) have no atomic protocol for an ep with peer failure
         * handling (none of amo_offload.c's and amo_sw.c's sets ERR_HANDLING): the atomic
         * fails at once with "Request canceled" on every transport, stock tcp included, and
         * never reaches one. The case then checks only that it fails instead of hanging. */
        if (!strcmp(cases[c].name, "peer_death_amo") && ucp_protocols_v2()) {
            cases[c].counters = NULL;
        }
    }
    setenv("UCX_TLS", opt_tl, 0);
    printf("ucp_ops: UCX_TLS=%s, lanes must use %s\n", getenv("UCX_TLS"), opt_tl);
    return pair_run_cases(cases, sizeof(cases) / sizeof(cases[0]), &opts) ? 1 : 0;
}
