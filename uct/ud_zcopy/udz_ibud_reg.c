/*
 * ud_zcopy InfiniBand UD wire: registration of the destinations a data channel receives into
 * (UCX's registration cache, as its ib md; without it, a registration per transfer).
 */

#include "udz_ibud_int.h"
#include "ucx_ext_md.h"

/* ---- registration of destinations (UCX's cache, as its ib md) ---- */

static ucs_status_t udz_ibud_rcache_reg(void *context, ucs_rcache_t *rcache, void *arg,
                                        ucs_rcache_region_t *rregion, uint16_t flags)
{
    udz_ibud_t *w = context;
    udz_ibud_rcache_region_t *r = (udz_ibud_rcache_region_t*)rregion;

    r->mr = ibv_reg_mr(w->pd, (void*)rregion->super.start,
                       rregion->super.end - rregion->super.start, IBV_ACCESS_LOCAL_WRITE);
    return (r->mr != NULL) ? UCS_OK : UCS_ERR_IO_ERROR;
}

static void udz_ibud_rcache_dereg(void *context, ucs_rcache_t *rcache, ucs_rcache_region_t *rregion)
{
    ibv_dereg_mr(((udz_ibud_rcache_region_t*)rregion)->mr);
}

static void udz_ibud_rcache_dump(void *context, ucs_rcache_t *rcache, ucs_rcache_region_t *rregion,
                                 char *buf, size_t max)
{
    snprintf(buf, max, "lkey 0x%x", ((udz_ibud_rcache_region_t*)rregion)->mr->lkey);
}

static const ucs_rcache_ops_t udz_ibud_rcache_ops = {
    UCX_EXT_RCACHE_VERSION_OPS
    .mem_reg     = udz_ibud_rcache_reg,
    .mem_dereg   = udz_ibud_rcache_dereg,
    .dump_region = udz_ibud_rcache_dump,
};

/* The wire's cache, set up as rdmach's verbs domains set up theirs (config: the knobs,
 * udz_wire_params_t.reg_cache); without one every transfer registers its destination itself. */
void udz_ibud_rcache_open(udz_ibud_t *w, const void *config)
{
    w->rcache = NULL;
    if (config != NULL) {
        (void)ucx_ext_rcache_create("ud_zcopy", config, sizeof(udz_ibud_rcache_region_t),
                                    &udz_ibud_rcache_ops, w, &w->rcache);
    }
}

/* The lkey of [p, p + len) among the destinations held for a channel. */
int udz_ibud_chan_lkey(udz_ibud_t *w, unsigned chan, const void *p, size_t len,
                       uint32_t *lkey)
{
    const udz_ibud_chan_t *c = &w->chan[chan];
    uintptr_t a = (uintptr_t)p;
    unsigned i;

    for (i = 0; i < c->nreg; ++i) {
        if ((a >= c->reg[i].start) && (a + len <= c->reg[i].end)) {
            *lkey = c->reg[i].lkey;
            return 0;
        }
    }
    return -ENOENT;
}

/* The destination of a transfer's DEST slots, registered until the transfer ends. */
void udz_ibud_chan_hold(udz_ibud_t *w, unsigned chan, const struct iovec *dest)
{
    udz_ibud_chan_t *c = &w->chan[chan];
    udz_ibud_reg_t *r;
    ucs_rcache_region_t *region;
    uint32_t lkey;

    if ((dest->iov_len == 0) || (c->nreg == UDZ_IBUD_CHAN_REGS) ||
        (udz_ibud_chan_lkey(w, chan, dest->iov_base, dest->iov_len, &lkey) == 0)) {
        return;
    }
    r = &c->reg[c->nreg];
    memset(r, 0, sizeof(*r));
    if (w->rcache != NULL) {
        if (ucx_ext_rcache_get(w->rcache, dest->iov_base, dest->iov_len, UCS_PGT_ADDR_ALIGN,
                               PROT_READ | PROT_WRITE, NULL, &region) != UCS_OK) {
            return;     /* its chunks go through bounce buffers */
        }
        r->region = region;
        r->lkey   = ((udz_ibud_rcache_region_t*)region)->mr->lkey;
        r->start  = region->super.start;
        r->end    = region->super.end;
    } else {
        r->mr = ibv_reg_mr(w->pd, dest->iov_base, dest->iov_len, IBV_ACCESS_LOCAL_WRITE);
        if (r->mr == NULL) {
            return;
        }
        r->lkey  = r->mr->lkey;
        r->start = (uintptr_t)dest->iov_base;
        r->end   = r->start + dest->iov_len;
    }
    c->nreg++;
}

void udz_ibud_chan_release(udz_ibud_t *w, unsigned chan)
{
    udz_ibud_chan_t *c = &w->chan[chan];
    unsigned i;

    for (i = 0; i < c->nreg; ++i) {
        if (c->reg[i].region != NULL) {
            ucs_rcache_region_put(w->rcache, c->reg[i].region);
        } else if (c->reg[i].mr != NULL) {
            ibv_dereg_mr(c->reg[i].mr);
        }
    }
    c->nreg = 0;
}
