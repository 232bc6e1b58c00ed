/*
 * Resource model (MVAPICH with XRC, OFA 2007: connection resources per remote host instead of
 * per remote process): what a process and a node hold when every process of a job talks to
 * every other, for P processes per node and N nodes, from 2 processes to 1,048,576. The
 * figures come from the transports' own sizing functions, the ones their allocations use:
 *   rdmach RC      rdmach_wire_rc_sizing: a connection's registered block (its rx ring and the
 *                  shadow of the ring it sends into), its QP's depth, its bookkeeping
 *   rdmach XRC     the same rings; QPs from rdmach_xrc_model, the steady state of the sharing
 *                  core (tests/unit/rdmach_xrc_test.cc checks one against the other)
 *   rdmach shm     rdmach_shm_segment_bytes / rdmach_shm_ring_stride: within a node
 *   ud_zcopy UD    udz_peer_state_bytes / udz_peer_table_bytes per peer; one control QP and
 *                  CHANNELS zero-copy QPs per process (the paper's QP pool)
 * and, for comparison, UCX's built-ins from their documented defaults (ucx_info -c):
 *   rc_verbs       one RC QP per peer, RC_VERBS_TX_QUEUE_LEN send WQEs each (--wqe-bytes)
 *   ud_verbs       one UD QP per process, an address handle per peer
 * Off-node peers go through the inter-node scheme, on-node peers through rdmach's shm wire
 * (the shm row); a process's total is its scheme's row plus the shm row.
 *
 *   resource_model [--slot-size B] [--ring-size N] [--chunk-size B] [--lazy-tail F]
 *                  [--large-ring-size N] [--large-rings N]
 *                  [--max-peers N] [--max-qp-wr N] [--udz-channels N]
 *                  [--rc-verbs-tx-queue N] [--wqe-bytes B] [--ppn 1,2,..] [--max-procs N]
 *   resource_model --sizing [geometry options]   the per-iface and per-connection figures
 *
 * perf/bench resources runs it with the defaults ucx_info reports, and draws the plots.
 * Output: CSV on stdout, one row per scheme, P and N.
 */
#include "rdmach_wire.h"
#include "rdmach_shm.h"
#include "rdmach_xrc.h"
#include "udz_core.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    rdmach_geom_t           geom;
    rdmach_geom_t           geom_large;   /* of the first large_rings rings on shm */
    uint32_t                large_rings;
    uint32_t                max_peers, max_qp_wr, udz_channels, rc_verbs_txq, wqe_bytes;
    rdmach_wire_rc_sizing_t rc;
} model_t;

typedef struct {
    const char *scheme;
    uint64_t   qps_proc, qps_node;     /* QPs a process / a node holds */
    uint64_t   pinned_proc;            /* registered (or shared, shm) bytes of a process */
    uint64_t   state_proc;             /* host bookkeeping bytes for its peers */
    uint64_t   setups_proc;            /* connections it sets up (QPs it connects; shm: rings
                                        * it claims) */
    int        fits;                   /* within the transport's limits (MAX_PEERS rings) */
} row_t;

static void print_row(const row_t *r, uint64_t ppn, uint64_t nodes)
{
    printf("%s,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%d\n", r->scheme,
           (unsigned long long)ppn, (unsigned long long)nodes,
           (unsigned long long)(ppn * nodes), (unsigned long long)r->qps_proc,
           (unsigned long long)r->qps_node, (unsigned long long)r->pinned_proc,
           (unsigned long long)(r->pinned_proc * ppn), (unsigned long long)r->state_proc,
           (unsigned long long)r->setups_proc, r->fits);
}

static void model_rows(const model_t *m, uint64_t ppn, uint64_t nodes)
{
    uint64_t off  = (nodes - 1) * ppn;   /* peers on other nodes */
    uint64_t on   = ppn - 1;             /* peers on this node */
    uint64_t conn = m->rc.conn_reg_bytes;
    rdmach_xrc_model_t x;
    uint64_t large;
    row_t r;

    rdmach_xrc_model(ppn, nodes, &x);

    r = (row_t){"rdmach_rc", off, off * ppn, off ? m->rc.iface_reg_bytes + off * conn : 0,
                off * m->rc.conn_state_bytes, off, off <= m->max_peers};
    print_row(&r, ppn, nodes);
    /* the same rings; QPs and setups per remote host */
    r = (row_t){"rdmach_xrc", x.ini_per_proc + x.tgt_per_node / ppn,
                x.ini_per_proc * ppn + x.tgt_per_node,
                off ? m->rc.iface_reg_bytes + off * conn : 0,
                off * m->rc.conn_state_bytes + x.ini_per_proc * sizeof(rdmach_xrc_host_t),
                x.setups_per_proc, off <= m->max_peers};
    print_row(&r, ppn, nodes);
    r = (row_t){"ud_zcopy_ud", off ? 1 + m->udz_channels : 0,
                off ? ppn * (1 + m->udz_channels) : 0, 0,
                off * udz_peer_state_bytes() + (off ? udz_peer_table_bytes((unsigned)off) : 0),
                0, 1};
    print_row(&r, ppn, nodes);
    r = (row_t){"rc_verbs", off, off * ppn, off * m->rc_verbs_txq * m->wqe_bytes, 0, off, 1};
    print_row(&r, ppn, nodes);
    r = (row_t){"ud_verbs", off ? 1 : 0, off ? ppn : 0, 0, 0, 0, 1};
    print_row(&r, ppn, nodes);
    /* shm: the segment's header part and one ring per on-node sender (pages of unclaimed
     * rings are never touched), the first large_rings of them large */
    large = (on < m->large_rings) ? on : m->large_rings;
    r = (row_t){"rdmach_shm", 0, 0,
                on ? rdmach_shm_segment_bytes(&m->geom, NULL, 0, m->max_peers) -
                     (uint64_t)m->max_peers * rdmach_shm_ring_stride(&m->geom) +
                     large * rdmach_shm_ring_stride(&m->geom_large) +
                     (on - large) * rdmach_shm_ring_stride(&m->geom) : 0,
                0, on, on <= m->max_peers};
    print_row(&r, ppn, nodes);
}

static void usage(void)
{
    fprintf(stderr, "usage: resource_model [--sizing] [--slot-size B] [--ring-size N] "
            "[--chunk-size B] [--lazy-tail F] [--large-ring-size N] [--large-rings N] "
            "[--max-peers N] [--max-qp-wr N] "
            "[--udz-channels N] [--rc-verbs-tx-queue N] [--wqe-bytes B] [--ppn P,..] "
            "[--max-procs N]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    uint32_t slot = 256, ring = 512, large_ring = 8192, large_rings = 8;
    uint64_t chunk = 16384, max_procs = 1u << 20;
    double lazy = 0.25;
    char ppn_list[256] = "1,2,4,8,16,32,64,128";
    int sizing = 0, i;
    const char *err;
    model_t m = {.max_peers = 256, .max_qp_wr = 16384, .udz_channels = 8,
                 .rc_verbs_txq = 256, .wqe_bytes = 64};
    char *tok, *save;

    for (i = 1; i < argc; ++i) {
        const char *v = (i + 1 < argc) ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--sizing")) {
            sizing = 1;
            continue;
        }
        if (v == NULL) {
            usage();
        }
        if (!strcmp(argv[i], "--slot-size")) {
            slot = (uint32_t)strtoul(v, NULL, 0);
        } else if (!strcmp(argv[i], "--ring-size")) {
            ring = (uint32_t)strtoul(v, NULL, 0);
        } else if (!strcmp(argv[i], "--large-ring-size")) {
            large_ring = (uint32_t)strtoul(v, NULL, 0);
        } else if (!strcmp(argv[i], "--large-rings")) {
            large_rings = (uint32_t)strtoul(v, NULL, 0);
        } else if (!strcmp(argv[i], "--chunk-size")) {
            chunk = strtoull(v, NULL, 0);
        } else if (!strcmp(argv[i], "--lazy-tail")) {
            lazy = strtod(v, NULL);
        } else if (!strcmp(argv[i], "--max-peers")) {
            m.max_peers = (uint32_t)strtoul(v, NULL, 0);
        } else if (!strcmp(argv[i], "--max-qp-wr")) {
            m.max_qp_wr = (uint32_t)strtoul(v, NULL, 0);
        } else if (!strcmp(argv[i], "--udz-channels")) {
            m.udz_channels = (uint32_t)strtoul(v, NULL, 0);
        } else if (!strcmp(argv[i], "--rc-verbs-tx-queue")) {
            m.rc_verbs_txq = (uint32_t)strtoul(v, NULL, 0);
        } else if (!strcmp(argv[i], "--wqe-bytes")) {
            m.wqe_bytes = (uint32_t)strtoul(v, NULL, 0);
        } else if (!strcmp(argv[i], "--ppn")) {
            snprintf(ppn_list, sizeof(ppn_list), "%s", v);
        } else if (!strcmp(argv[i], "--max-procs")) {
            max_procs = strtoull(v, NULL, 0);
        } else {
            usage();
        }
        ++i;
    }
    /* the geometry exactly as the iface makes it (rdmach_iface.c) */
    err = rdmach_geom_init(&m.geom, slot, ring, chunk, lazy);
    if (err != NULL) {
        fprintf(stderr, "resource_model: %s\n", err);
        return 2;
    }
    err = rdmach_geom_init(&m.geom_large, slot, large_ring, chunk, lazy);
    if (err != NULL) {
        fprintf(stderr, "resource_model: large rings: %s\n", err);
        return 2;
    }
    m.large_rings = (large_ring > ring) ? large_rings : 0;
    if (m.large_rings > m.max_peers) {
        m.large_rings = m.max_peers;
    }
    rdmach_wire_rc_sizing(&m.geom, m.max_peers, m.max_qp_wr, &m.rc);
    if (sizing) {
        printf("rc_iface_reg_bytes=%zu\nrc_conn_reg_bytes=%zu\nrc_conn_state_bytes=%zu\n"
               "rc_conn_sq_depth=%u\nrc_xrc_sq_depth=%u\nshm_segment_bytes=%zu\n"
               "shm_ring_stride=%zu\nshm_large_ring_stride=%zu\nshm_large_rings=%u\n"
               "udz_peer_state_bytes=%zu\n",
               m.rc.iface_reg_bytes, m.rc.conn_reg_bytes, m.rc.conn_state_bytes,
               m.rc.conn_sq_depth, m.rc.xrc_sq_depth,
               rdmach_shm_segment_bytes(&m.geom, &m.geom_large, m.large_rings, m.max_peers),
               rdmach_shm_ring_stride(&m.geom), rdmach_shm_ring_stride(&m.geom_large),
               m.large_rings, udz_peer_state_bytes());
        return 0;
    }
    printf("scheme,ppn,nodes,procs,qps_proc,qps_node,pinned_proc,pinned_node,state_proc,"
           "setups_proc,fits\n");
    for (tok = strtok_r(ppn_list, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        uint64_t ppn = strtoull(tok, NULL, 0), nodes;
        for (nodes = (ppn == 1) ? 2 : 1; (ppn > 0) && (ppn * nodes <= max_procs); nodes *= 2) {
            model_rows(&m, ppn, nodes);
        }
    }
    return 0;
}
