/*
 * rdmach InfiniBand RC verbs wire: domains (an HCA with a usable port, its PD), devices (its
 * ports), memory registration for the glue's md, the wire's own registrations (counted for
 * the resource model), and the sizing of what an iface and a connection allocate. The wire
 * itself is rdmach_wire_rc.c; what the RC files share, rdmach_rc_int.h.
 */
#include "rdmach_rc_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RDMACH_RC_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
                          IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

/* ---- sizing: what the allocations below take, and the resource model's figures ---- */

size_t rdmach_rc_ring_bytes(const rdmach_geom_t *geom)
{
    return sizeof(rdmach_ring_ctl_t) + rdmach_geom_ring_bytes(geom);
}

/* A connection's block: rx ring | shadow ctl (the credit line in its padding) + slots. */
size_t rdmach_rc_block_bytes(const rdmach_geom_t *geom)
{
    return 2 * rdmach_rc_ring_bytes(geom);
}

/* A sender waiting for ring credit must not also wait for send queue room (a dead peer would
 * hold it in the send call until its QP fails): 3 WRs per slot, and RMA. */
uint32_t rdmach_rc_sq_depth(const rdmach_geom_t *geom, uint32_t max_qp_wr)
{
    return RC_MIN(3u * geom->nslots + RC_SQ_EXTRA, max_qp_wr);
}

size_t rdmach_rc_doorbell_bytes(uint32_t max_rings)
{
    return (max_rings + 63) & ~(size_t)63;
}

/* RC_BOUNCES buffers of a record's span, then RC_AMO_SLOTS atomic results. */
size_t rdmach_rc_bounce_bytes(const rdmach_geom_t *geom)
{
    return geom->slot_size * (size_t)geom->max_span * RC_BOUNCES +
           RC_AMO_SLOTS * sizeof(uint64_t);
}

void rdmach_wire_rc_sizing(const rdmach_geom_t *geom, uint32_t max_rings, uint32_t max_qp_wr,
                           rdmach_wire_rc_sizing_t *sizing)
{
    sizing->iface_reg_bytes  = rdmach_rc_doorbell_bytes(max_rings) +
                               rdmach_rc_bounce_bytes(geom);
    sizing->conn_reg_bytes   = rdmach_rc_block_bytes(geom);
    sizing->conn_state_bytes = sizeof(rdmach_rc_conn_t);
    sizing->conn_sq_depth    = rdmach_rc_sq_depth(geom, max_qp_wr);
    sizing->xrc_sq_depth     = rdmach_rc_xrc_sq_depth(sizing->conn_sq_depth, max_qp_wr);
}

/* Registered bytes of the wire's own memory, process-wide (the counters are), and their
 * peak: the live figure the sizing functions are checked against. */
static uint64_t rdmach_rc_reg_now;

struct ibv_mr *rdmach_rc_reg(rdmach_rc_wire_t *w, void *addr, size_t len)
{
    struct ibv_mr *mr = ibv_reg_mr(w->dom->pd, addr, len, RDMACH_RC_ACCESS);
    uint64_t now;

    if (mr != NULL) {
        now = __atomic_add_fetch(&rdmach_rc_reg_now, len, __ATOMIC_RELAXED);
        if (now > STATS(w, reg_peak)) {
            STATS(w, reg_peak) = now;
        }
    }
    return mr;
}

void rdmach_rc_dereg(struct ibv_mr *mr)
{
    if (mr != NULL) {
        __atomic_sub_fetch(&rdmach_rc_reg_now, mr->length, __ATOMIC_RELAXED);
        ibv_dereg_mr(mr);
    }
}

/* ---- domains and devices ---- */

typedef struct {
    char     (*names)[RDMACH_WIRE_DEV_NAME_MAX];
    unsigned n, max;
} rdmach_rc_names_t;

/* A domain is an HCA with a usable port: its ports come in a row, the name is added once. */
static int rdmach_rc_add_name(void *arg, const char *name, uint8_t port, struct ibv_context *ctx)
{
    rdmach_rc_names_t *names = arg;

    (void)port;
    (void)ctx;
    if ((names->n > 0) && (strcmp(names->names[names->n - 1], name) == 0)) {
        return 0;
    }
    if (names->n < names->max) {
        snprintf(names->names[names->n++], RDMACH_WIRE_DEV_NAME_MAX, "%s", name);
    }
    return 0;
}

unsigned rdmach_rc_query_domains(char (*names)[RDMACH_WIRE_DEV_NAME_MAX], unsigned max)
{
    rdmach_rc_names_t found = {names, 0, max};

    (void)ucx_ext_verbs_each_port(rdmach_rc_add_name, &found);
    return found.n;
}

int rdmach_rc_domain_open(const char *name, rdmach_wire_domain_t **domain_p)
{
    rdmach_wire_domain_t *dom;
    int ret = -ENODEV;

    dom = calloc(1, sizeof(*dom));
    if (dom == NULL) {
        return -ENOMEM;
    }
    dom->ctx = ucx_ext_verbs_open(name);
    if (dom->ctx == NULL) {
        goto err;
    }
    if (ibv_query_device(dom->ctx, &dom->attr) != 0) {
        ret = -errno;
        goto err_close;
    }
    dom->pd = ibv_alloc_pd(dom->ctx);
    if (dom->pd == NULL) {
        ret = -errno;
        goto err_close;
    }
    snprintf(dom->name, sizeof(dom->name), "%s", name);
    *domain_p = dom;
    return 0;

err_close:
    ibv_close_device(dom->ctx);
err:
    free(dom);
    return ret;
}

void rdmach_rc_domain_close(rdmach_wire_domain_t *dom)
{
    ibv_dealloc_pd(dom->pd);
    ibv_close_device(dom->ctx);
    free(dom);
}

int rdmach_rc_mem_reg(rdmach_wire_domain_t *dom, void *addr, size_t len, void **reg_p,
                      uint32_t *rkey_p)
{
    struct ibv_mr *mr = ibv_reg_mr(dom->pd, addr, len ? len : 1, RDMACH_RC_ACCESS);

    if (mr == NULL) {
        return (errno != 0) ? -errno : -ENOMEM;
    }
    *reg_p  = mr;
    *rkey_p = mr->rkey;
    return 0;
}

void rdmach_rc_mem_dereg(void *reg)
{
    ibv_dereg_mr(reg);
}

unsigned rdmach_rc_query_devices(rdmach_wire_domain_t *dom, rdmach_wire_dev_t *devs,
                                 unsigned max)
{
    unsigned n = 0;
    uint8_t p;

    for (p = 1; (dom != NULL) && (p <= dom->attr.phys_port_cnt) && (n < max); ++p) {
        if (ucx_ext_verbs_port_usable(dom->ctx, p, NULL)) {
            snprintf(devs[n].name, sizeof(devs[n].name), "%.24s:%u", dom->name, p);
            devs[n].type = RDMACH_WIRE_DEV_NET;
            ++n;
        }
    }
    return n;
}
