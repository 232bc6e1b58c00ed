/*
 * ucp_unimem: UCP-level tests specific to the unimem transport.
 *
 *   UCX_TLS=unimem ucp_unimem [--case rndv_shape,eager_ends,...] [--counters] [--iters N]
 *
 * rndv_shape    One UCP rendezvous ping-pong must have UnimemMPI's shape (the ExaNeSt paper): 4 control
 *               messages over the mailbox (RTS and ATS each way) and 2 zDMA reads. Both
 *               processes read their live transport counters (uct_unimem_counters_get, found
 *               with dlsym in the preloaded transport) around N ping-pongs of 4 KiB after a
 *               warm-up, swap the deltas, and the initiator checks the totals: control AMs =
 *               4 N, zDMA reads = 2 N, no zDMA write, every AM received. It reports how many
 *               32-byte mailbox messages each control message takes. With landing slots (the
 *               default) that is one each, UnimemMPI's 4 mailbox messages per ping-pong: the
 *               RTS (header + rkey) lands in the receiver's slot and rings with one LAND; the
 *               RTS a process sends after its peer's message demotes its slot's line
 *               (tx_land_demoted).
 * rndv_shape_frag  The same with UCX_UNIMEM_LAND_SLOTS=0: the RTS is fragmented over several
 *               mailbox messages (the mailbox protocol alone).
 * eager_ends    With the defaults, messages of 8-32 KiB go eagerly (one am_bcopy each, landed,
 *               no zDMA) on both UCX versions, and 64 KiB by rendezvous (one zDMA read each).
 * pdid_refused  The two processes run in different protection domains (UCX_UNIMEM_PDID 1 and
 *               2): UCP must find no unimem lane to the peer (the iface reports it unreachable,
 *               the HAL would refuse any transfer), so ucp_ep_create fails.
 */
#include "ucp_pair.h"

#include <dlfcn.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SHAPE_SIZE 4096
#define UNIMEM_MAX_SIZE (64 << 10)
static unsigned opt_iters = 10;

typedef unsigned (*counters_get_fn_t)(const char *const **names, const uint64_t **values);

/* the counters the shape is computed from, in this order */
static const char *const shape_names[] = {
    "tx_am_short", "tx_am_bcopy", "tx_am_zcopy", "rx_am", "mbox_tx_msgs", "mbox_rx_msgs",
    "tx_am_frag", "mbox_tx_frag_msgs", "zdma_reads", "zdma_writes", "tx_get_zcopy",
    "rx_corrupt", "tx_am_land"
};
#define NSHAPE (sizeof(shape_names) / sizeof(shape_names[0]))
enum { AM_SHORT, AM_BCOPY, AM_ZCOPY, RX_AM, MBOX_TX, MBOX_RX, AM_FRAG, MBOX_FRAG, ZREAD,
       ZWRITE, GET_ZCOPY, CORRUPT, AM_LAND };

static int read_counters(pair_t *pair, uint64_t out[NSHAPE])
{
    counters_get_fn_t get;
    const char *const *names;
    const uint64_t *values;
    unsigned n, i, j;

    void *module;

    /* preloaded (UCX 1.13.1): in the global scope; a plugin (UCX 1.22.0, UCX_PLUGIN_PATH)
     * is loaded RTLD_LOCAL, so it is asked for by its soname */
    *(void**)&get = dlsym(RTLD_DEFAULT, "uct_unimem_counters_get");
    module        = (get == NULL) ? dlopen("libuct_unimem.so.0", RTLD_LAZY | RTLD_NOLOAD) :
                                    NULL;
    if (module != NULL) {
        *(void**)&get = dlsym(module, "uct_unimem_counters_get");
        dlclose(module);   /* the reference RTLD_NOLOAD took: UCX keeps its own */
    }
    if (get == NULL) {
        pair_log(pair, "uct_unimem_counters_get not found: is libuct_unimem loaded (preloaded, "
                 "or a plugin from UCX_PLUGIN_PATH)?");
        return -1;
    }
    n = get(&names, &values);
    for (i = 0; i < NSHAPE; ++i) {
        for (j = 0; (j < n) && strcmp(names[j], shape_names[i]); ++j) {
        }
        if (j == n) {
            pair_log(pair, "the transport has no counter %s", shape_names[i]);
            return -1;
        }
        out[i] = values[j];
    }
    return 0;
}

static int pingpong(up_t *u, uint8_t *sbuf, uint8_t *rbuf, size_t size, unsigned iters,
                    uint32_t seed)
{
    ucp_request_param_t param = {.op_attr_mask = 0};
    ucs_status_ptr_t sreq, rreq;
    unsigned i;

    for (i = 0; i < iters; ++i) {
        if (u->pair->role == PAIR_INITIATOR) {
            pair_pattern_fill(sbuf, size, seed + 2 * i);
            rreq = ucp_tag_recv_nbx(u->worker, rbuf, size, 2, (ucp_tag_t)-1, &param);
            sreq = ucp_tag_send_nbx(u->ep, sbuf, size, 1, &param);
            if ((up_wait(u, sreq) != UCS_OK) || (up_wait(u, rreq) != UCS_OK)) {
                pair_log(u->pair, "ping-pong %u failed", i);
                return -1;
            }
            if (pair_pattern_check(rbuf, size, seed + 2 * i + 1) >= 0) {
                pair_log(u->pair, "pong %u has wrong data", i);
                return -1;
            }
        } else {
            rreq = ucp_tag_recv_nbx(u->worker, rbuf, size, 1, (ucp_tag_t)-1, &param);
            if (up_wait(u, rreq) != UCS_OK) {
                pair_log(u->pair, "ping %u not received", i);
                return -1;
            }
            if (pair_pattern_check(rbuf, size, seed + 2 * i) >= 0) {
                pair_log(u->pair, "ping %u has wrong data", i);
                return -1;
            }
            pair_pattern_fill(sbuf, size, seed + 2 * i + 1);
            sreq = ucp_tag_send_nbx(u->ep, sbuf, size, 2, &param);
            if (up_wait(u, sreq) != UCS_OK) {
                pair_log(u->pair, "pong %u failed", i);
                return -1;
            }
        }
    }
    return 0;
}

static int check_eq(pair_t *pair, const char *what, uint64_t got, uint64_t want)
{
    if (got == want) {
        return 1;
    }
    pair_log(pair, "%s: %llu, expected %llu", what, (unsigned long long)got,
             (unsigned long long)want);
    return 0;
}

/* Ping-pongs of size bytes after a warm-up (wireup over, rkeys exchanged and cached); the
 * initiator gets both processes' counter deltas summed in sum. Returns 1 if all went well;
 * the target's sum stays unset. */
static int counted_pingpong(up_t *u, size_t size, uint64_t sum[NSHAPE])
{
    static uint8_t sbuf[UNIMEM_MAX_SIZE], rbuf[UNIMEM_MAX_SIZE];
    uint64_t before[NSHAPE], after[NSHAPE], mine[NSHAPE], peer[NSHAPE];
    unsigned i;
    int ok;

    ok = (pingpong(u, sbuf, rbuf, size, 5, 1000) == 0);
    ok = (pair_sync(u->pair, ok) == 0) && (read_counters(u->pair, before) == 0);
    ok = (pair_sync(u->pair, ok) == 0) && (pingpong(u, sbuf, rbuf, size, opt_iters, 7) == 0);
    /* both sides progressed until the other's last request completed (the last ATS is in) */
    ok = (pair_sync(u->pair, ok) == 0) && (pair_sync(u->pair, 1) == 0) &&
         (read_counters(u->pair, after) == 0);
    if (pair_sync(u->pair, ok) != 0) {
        return 0;
    }
    for (i = 0; i < NSHAPE; ++i) {
        mine[i] = after[i] - before[i];
    }
    if (u->pair->role == PAIR_TARGET) {
        return pair_send(u->pair, mine, sizeof(mine)) == 0;
    }
    if (pair_recv(u->pair, peer, sizeof(peer)) != sizeof(peer)) {
        return 0;
    }
    for (i = 0; i < NSHAPE; ++i) {
        sum[i] = mine[i] + peer[i];
    }
    return 1;
}

static int shape(up_t *u, int landing)
{
    uint64_t sum[NSHAPE];
    uint64_t ctrl, single, n = opt_iters;
    int ok;

    if (!counted_pingpong(u, SHAPE_SIZE, sum)) {
        return 0;
    }
    if (u->pair->role == PAIR_TARGET) {
        return 1;
    }

    ctrl   = sum[AM_SHORT] + sum[AM_BCOPY] + sum[AM_ZCOPY];
    single = ctrl - sum[AM_FRAG];   /* a SHORT or a LAND */
    printf("    unimem rendezvous ping-pong, %d B x %llu: %llu control messages "
           "(%.2f per ping-pong: %llu am_short, %llu am_bcopy), %llu zDMA reads (%.2f per "
           "ping-pong), %llu zDMA writes\n", SHAPE_SIZE, (unsigned long long)n,
           (unsigned long long)ctrl, (double)ctrl / n, (unsigned long long)sum[AM_SHORT],
           (unsigned long long)sum[AM_BCOPY], (unsigned long long)sum[ZREAD],
           (double)sum[ZREAD] / n, (unsigned long long)sum[ZWRITE]);
    printf("    32-byte mailbox messages: %llu (%.2f per ping-pong); %llu control messages "
           "fragmented into %llu mailbox messages (%.2f each: the RTS, header + rkey), %llu "
           "in one mailbox message each (the ATS; with landing slots the RTS too: %llu "
           "landed)\n", (unsigned long long)sum[MBOX_TX],
           (double)sum[MBOX_TX] / n, (unsigned long long)sum[AM_FRAG],
           (unsigned long long)sum[MBOX_FRAG],
           sum[AM_FRAG] ? (double)sum[MBOX_FRAG] / sum[AM_FRAG] : 0.0,
           (unsigned long long)single, (unsigned long long)sum[AM_LAND]);
    fflush(stdout);

    ok = check_eq(u->pair, "control messages (RTS + ATS each way)", ctrl, 4 * n);
    ok = check_eq(u->pair, "zDMA reads", sum[ZREAD], 2 * n) && ok;
    ok = check_eq(u->pair, "get_zcopy", sum[GET_ZCOPY], 2 * n) && ok;
    ok = check_eq(u->pair, "zDMA writes", sum[ZWRITE], 0) && ok;
    ok = check_eq(u->pair, "active messages received", sum[RX_AM], ctrl) && ok;
    ok = check_eq(u->pair, "mailbox messages received", sum[MBOX_RX], sum[MBOX_TX]) && ok;
    ok = check_eq(u->pair, "rx_corrupt", sum[CORRUPT], 0) && ok;
    ok = check_eq(u->pair, "mailbox messages", sum[MBOX_TX], single + sum[MBOX_FRAG]) && ok;
    if (landing) {
        /* UnimemMPI's shape exactly: 4 mailbox messages per ping-pong, the RTS landed */
        ok = check_eq(u->pair, "mailbox messages with landing slots", sum[MBOX_TX], 4 * n) &&
             ok;
        ok = check_eq(u->pair, "landed control messages (the RTS)", sum[AM_LAND], 2 * n) &&
             ok;
    }
    return ok;
}

static int run_shape(pair_t *pair, void *arg)
{
    int ok;
    up_t u;

    if (up_open(&u, pair, "unimem", 0) != 0) {
        up_close(&u, 0);
        return PAIR_FAIL;
    }
    ok = shape(&u, arg == NULL);
    if (up_check_lanes(&u) != 0) {
        ok = 0;
    }
    return up_close(&u, ok) ? PAIR_PASS : PAIR_FAIL;
}

/* ---- where eager ends ---- */

/* With the defaults, UCP sends a message up to SEG_SIZE (32 KiB and its header) eagerly, in
 * one am_bcopy that lands in a slot, on both UCX versions (1.22's protocols would start the
 * rendezvous at the zero copy's 8 KiB: ucx_ext_iface_eager_floor); a larger one goes by
 * rendezvous, one zDMA read per message. */
static int eager_ends(up_t *u)
{
    static const size_t sizes[] = {8192, 16384, 32768, UNIMEM_MAX_SIZE};
    uint64_t sum[NSHAPE], n = opt_iters;
    size_t i;
    int ok = 1;

    for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); ++i) {
        if (!counted_pingpong(u, sizes[i], sum)) {
            return 0;
        }
        if (u->pair->role == PAIR_TARGET) {
            continue;
        }
        printf("    unimem ping-pong, %zu B x %llu: %llu am_bcopy, %llu landed, %llu zDMA "
               "reads\n", sizes[i], (unsigned long long)n, (unsigned long long)sum[AM_BCOPY],
               (unsigned long long)sum[AM_LAND], (unsigned long long)sum[ZREAD]);
        fflush(stdout);
        if (sizes[i] < UNIMEM_MAX_SIZE) {
            ok = check_eq(u->pair, "eager messages (am_bcopy)", sum[AM_BCOPY], 2 * n) && ok;
            ok = check_eq(u->pair, "zDMA reads of eager messages", sum[ZREAD], 0) && ok;
        } else {
            ok = check_eq(u->pair, "rendezvous zDMA reads", sum[GET_ZCOPY], 2 * n) && ok;
        }
        ok = check_eq(u->pair, "rx_corrupt", sum[CORRUPT], 0) && ok;
    }
    return ok;
}

static int run_eager_ends(pair_t *pair, void *arg)
{
    int ok;
    up_t u;

    (void)arg;

    if (up_open(&u, pair, "unimem", 0) != 0) {
        up_close(&u, 0);
        return PAIR_FAIL;
    }
    ok = eager_ends(&u);
    if (up_check_lanes(&u) != 0) {
        ok = 0;
    }
    return up_close(&u, ok) ? PAIR_PASS : PAIR_FAIL;
}

/* ---- protection domains ---- */

static int run_pdid_refused(pair_t *pair, void *arg)
{
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                           .features   = UCP_FEATURE_TAG | UCP_FEATURE_RMA};
    ucp_worker_params_t wparams = {.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                                   .thread_mode = UCS_THREAD_MODE_SINGLE};
    ucp_context_h context = NULL;
    ucp_worker_h worker   = NULL;
    ucp_ep_params_t ep_params;
    ucp_address_t *address;
    size_t address_len;
    ucp_config_t *config;
    ucs_status_t status;
    uint8_t peer[8192];
    ucp_ep_h ep = NULL;
    int ok = 0;
    ssize_t n;

    (void)arg;
    /* the target runs in another protection domain */
    setenv("UCX_UNIMEM_PDID", (pair->role == PAIR_TARGET) ? "2" : "1", 1);
    status = ucp_config_read(NULL, NULL, &config);
    if (status == UCS_OK) {
        status = ucp_init(&params, config, &context);
        ucp_config_release(config);
    }
    if (status == UCS_OK) {
        status = ucp_worker_create(context, &wparams, &worker);
    }
    if (status == UCS_OK) {
        status = ucp_worker_get_address(worker, &address, &address_len);
    }
    if (status != UCS_OK) {
        pair_log(pair, "UCP init: %s", ucs_status_string(status));
        goto out;
    }
    ok = (pair_send(pair, address, address_len) == 0);
    ucp_worker_release_address(worker, address);
    n = ok ? pair_recv(pair, peer, sizeof(peer)) : -1;
    if (n <= 0) {
        ok = 0;
        goto out;
    }
    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep_params.address    = (ucp_address_t*)peer;
    status = ucp_ep_create(worker, &ep_params, &ep);
    if (status == UCS_OK) {
        pair_log(pair, "ucp_ep_create to a peer of another PDID succeeded");
        ok = 0;
    } else if (status != UCS_ERR_UNREACHABLE) {
        pair_log(pair, "ucp_ep_create: %s, expected %s", ucs_status_string(status),
                 ucs_status_string(UCS_ERR_UNREACHABLE));
        ok = 0;
    } else if (pair->role == PAIR_INITIATOR) {
        pair_log(pair, "info: PDID 1 -> PDID 2: %s", ucs_status_string(status));
    }
out:
    ok = (pair_sync(pair, ok) == 0);
    if (ep != NULL) {
        ucp_ep_destroy(ep);
    }
    if (worker != NULL) {
        ucp_worker_destroy(worker);
    }
    if (context != NULL) {
        ucp_cleanup(context);
    }
    return ok ? PAIR_PASS : PAIR_FAIL;
}

static pair_case_t cases[] = {
    {"rndv_shape", run_shape, NULL,
     "tx_get_zcopy>0,zdma_reads>0,tx_am_land>0,rx_land>0,tx_land_demoted>0,tx_am_frag==0,"
     "rx_corrupt==0", "UCX_RNDV_THRESH=1k UCX_UNIMEM_ZCOPY_THRESH=1k", 0, 0},
    {"rndv_shape_frag", run_shape, (void*)1,
     "tx_get_zcopy>0,zdma_reads>0,tx_am_frag>0,tx_am_land==0,tx_land_demoted==0,"
     "rx_corrupt==0",
     "UCX_RNDV_THRESH=1k UCX_UNIMEM_ZCOPY_THRESH=1k UCX_UNIMEM_LAND_SLOTS=0", 0, 0},
    {"eager_ends", run_eager_ends, NULL, "tx_am_land>0,tx_get_zcopy>0,rx_corrupt==0", NULL, 0,
     0},
    {"pdid_refused", run_pdid_refused, NULL, "tx_bytes==0,rx_am==0", NULL, 0, 0},
};

int main(int argc, char **argv)
{
    static const struct option long_opts[] = {
        {"case", required_argument, NULL, 'c'}, {"counters", no_argument, NULL, 'C'},
        {"iters", required_argument, NULL, 'i'}, {"list", no_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    pair_opts_t opts = {.tl = "unimem", .timeout = 60};
    int c;

    while ((c = getopt_long(argc, argv, "c:Ci:lh", long_opts, NULL)) != -1) {
        switch (c) {
        case 'c': opts.only = optarg; break;
        case 'C': opts.counters = 1; break;
        case 'i': opt_iters = (unsigned)atoi(optarg); break;
        case 'l': pair_list_cases(cases, sizeof(cases) / sizeof(cases[0])); return 0;
        default:
            fprintf(stderr, "usage: ucp_unimem [--case NAME[,NAME]] [--counters] [--iters N] "
                    "[--list]\n");
            return (c == 'h') ? 0 : 2;
        }
    }
    if (opt_iters == 0) {
        opt_iters = 1;
    }
    setenv("UCX_TLS", "unimem", 0);
    printf("ucp_unimem: UCX_TLS=%s\n", getenv("UCX_TLS"));
    return pair_run_cases(cases, sizeof(cases) / sizeof(cases[0]), &opts) ? 1 : 0;
}
