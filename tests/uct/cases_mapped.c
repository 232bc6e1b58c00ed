/*
 * RMA bcopy through a peer's segment mapped here: rdmach on shared memory and unimem (whose
 * emulated global address space maps the peer's memfd) pack a put_bcopy straight into the
 * peer's memory and unpack a get_bcopy straight from it, one copy, when the key's mapping
 * holds the whole range (a put: room for the largest fragment); else they go through the
 * bounce buffer. UCP 1.22 sends every put and, below unimem's rendezvous floor, every get this
 * way.
 */
#include "cases.h"

#include <string.h>

#define MAPPED_SEED 0x6d617000u

/* The offsets of the slots a put lands in: one per size, apart, at odd offsets; the last
 * ends at the region's end, with fewer than the largest fragment's bytes left after its
 * start, so that it takes the bounce buffer. */
static void mapped_layout(size_t max, size_t sizes[5], size_t offs[5], size_t *region_len)
{
    size_t i;

    sizes[0] = 1;
    sizes[1] = 100;
    sizes[2] = ut_min(4096, max);
    sizes[3] = max;
    for (i = 0; i < 4; ++i) {
        offs[i] = 64 + i * (max + 256) + (i % 4) * 3;
    }
    *region_len = 64 + 4 * (max + 256) + max;
    sizes[4]    = ut_min(512, max);
    offs[4]     = *region_len - sizes[4];
}

static int mapped_target(ut_t *t, size_t max)
{
    size_t sizes[5], offs[5], len, i;
    int ok = 1;
    ut_buf_t region;

    mapped_layout(max, sizes, offs, &len);
    if (ut_buf_alloc_md(t, &region, len) != 0) {
        return PAIR_FAIL;
    }
    memset(region.addr, 0, len);   /* before the initiator may put into it */
    if (ut_send_region(t, &region) != 0) {
        ut_buf_free(t, &region);
        return PAIR_FAIL;
    }
    if (pair_sync(t->pair, 1) != 0) {   /* the initiator's puts and gets are done */
        ut_buf_free(t, &region);
        return PAIR_FAIL;
    }
    for (i = 0; i < 5; ++i) {
        if (pair_pattern_check(region.addr + offs[i], sizes[i], MAPPED_SEED + i) >= 0) {
            pair_log(t->pair, "put_bcopy of %zu bytes at offset %zu: wrong data here",
                     sizes[i], offs[i]);
            ok = 0;
        }
        if ((offs[i] + sizes[i] < len) && (region.addr[offs[i] + sizes[i]] != 0)) {
            pair_log(t->pair, "put_bcopy of %zu bytes at offset %zu wrote past its end",
                     sizes[i], offs[i]);
            ok = 0;
        }
    }
    ok = (pair_sync(t->pair, ok) == 0) && ok;
    ut_buf_free(t, &region);
    return ok ? PAIR_PASS : PAIR_FAIL;
}

/* What the transport handed the callbacks: where a put was packed, what a get unpacked from */
typedef struct {
    const uint8_t *src;
    size_t        len;
    const void    *at;
} mapped_pack_t;

static size_t mapped_pack(void *dest, void *arg)
{
    mapped_pack_t *a = arg;

    memcpy(dest, a->src, a->len);
    a->at = dest;
    return a->len;
}

typedef struct {
    uint8_t    *dst;
    size_t     got;
    const void *at;
} mapped_unpack_t;

static void mapped_unpack(void *arg, const void *data, size_t length)
{
    mapped_unpack_t *a = arg;

    memcpy(a->dst, data, length);
    a->got += length;
    a->at   = data;
}

/* One put_bcopy and one get_bcopy of the same bytes; *put_at, *get_at: the transport's
 * pointers. */
static ucs_status_t mapped_put_get(ut_t *t, const uint8_t *src, uint8_t *dst, size_t len,
                                   uint64_t raddr, uct_rkey_t rkey, const void **put_at,
                                   const void **get_at)
{
    mapped_pack_t pack     = {src, len, NULL};
    mapped_unpack_t unpack = {dst, 0, NULL};
    ucs_status_t status;
    ut_comp_t comp;
    ssize_t r;

    *put_at = NULL;
    *get_at = NULL;
    r = UT_RETRY(t, uct_ep_put_bcopy(t->ep, mapped_pack, &pack, raddr, rkey));
    if (r != (ssize_t)len) {
        return (r < 0) ? (ucs_status_t)r : UCS_ERR_IO_ERROR;
    }
    status = ut_flush(t, t->ep);
    if (status != UCS_OK) {
        return status;
    }
    ut_comp_init(&comp);
    status = UT_RETRY(t, uct_ep_get_bcopy(t->ep, mapped_unpack, &unpack, len, raddr, rkey,
                                          &comp.uct));
    status = ut_comp_wait(t, &comp, status);
    *put_at = pack.at;
    *get_at = unpack.at;
    return ((status == UCS_OK) && (unpack.got != len)) ? UCS_ERR_IO_ERROR : status;
}

int case_bcopy_mapped(ut_t *t)
{
    size_t max = ut_min(ut_put_max(t, UCT_IFACE_FLAG_PUT_BCOPY),
                        ut_get_max(t, UCT_IFACE_FLAG_GET_BCOPY));
    size_t sizes[5], offs[5], len, i;
    const void *put_at, *get_at;
    uct_rkey_bundle_t rkey;
    ucs_status_t status;
    ut_buf_t src, dst;
    uint8_t *mapped;
    uint64_t raddr;
    void *local;
    int ok = 1;

    if (!(t->md_attr.cap.flags & UCT_MD_FLAG_ALLOC) || (max < 512) ||
        !(!strcmp(t->tl, "unimem") || (!strcmp(t->tl, "rdmach") &&
                                       !strcmp(t->dev, "memory")))) {
        if (t->pair->role == PAIR_INITIATOR) {
            pair_log(t->pair, "skip: %s/%s maps no peer segment for bcopy", t->tl, t->dev);
        }
        return PAIR_SKIP;
    }
    if (t->pair->role == PAIR_TARGET) {
        return mapped_target(t, max);
    }

    mapped_layout(max, sizes, offs, &len);
    if (ut_recv_region(t, &raddr, &rkey) != 0) {
        return PAIR_FAIL;
    }
    /* where the peer's region is mapped here (UCP's rkey_ptr asks the same) */
    if (uct_rkey_ptr(t->component, &rkey, raddr, &local) != UCS_OK) {
        pair_log(t->pair, "the peer's md-allocated region is not mapped here");
        uct_rkey_release(t->component, &rkey);
        return PAIR_FAIL;
    }
    mapped = local;
    if ((ut_buf_alloc(t, &src, max + 8) != 0) || (ut_buf_alloc(t, &dst, max + 8) != 0)) {
        uct_rkey_release(t->component, &rkey);
        return PAIR_FAIL;
    }
    for (i = 0; ok && (i < 5); ++i) {
        pair_pattern_fill(src.addr + (i % 8), sizes[i], MAPPED_SEED + i);
        memset(dst.addr, 0, max + 8);
        status = mapped_put_get(t, src.addr + (i % 8), dst.addr + 3, sizes[i], raddr + offs[i],
                                rkey.rkey, &put_at, &get_at);
        if (status != UCS_OK) {
            pair_log(t->pair, "put/get_bcopy of %zu bytes at offset %zu: %s", sizes[i],
                     offs[i], ucs_status_string(status));
            ok = 0;
        } else if ((pair_pattern_check(dst.addr + 3, sizes[i], MAPPED_SEED + i) >= 0) ||
                   (dst.addr[2] != 0) || (dst.addr[3 + sizes[i]] != 0)) {
            pair_log(t->pair, "get_bcopy of %zu bytes at offset %zu: not what was put",
                     sizes[i], offs[i]);
            ok = 0;
        } else if ((i < 4) && ((put_at != mapped + offs[i]) || (get_at != mapped + offs[i]))) {
            /* room for the largest fragment: one copy, in the peer's memory */
            pair_log(t->pair, "bcopy of %zu bytes at offset %zu went through %p / %p, not "
                     "the mapping at %p", sizes[i], offs[i], put_at, get_at,
                     (void*)(mapped + offs[i]));
            ok = 0;
        } else if ((i == 4) && (put_at == mapped + offs[i])) {
            /* less than the largest fragment left before the region's end: the bounce */
            pair_log(t->pair, "put_bcopy at %zu bytes before the region's end was packed "
                     "straight into it: a larger fragment would have overrun it",
                     len - offs[i]);
            ok = 0;
        }
    }
    ut_buf_free(t, &src);
    ut_buf_free(t, &dst);
    uct_rkey_release(t->component, &rkey);
    /* the target checks its bytes, then both agree */
    ok = (pair_sync(t->pair, ok) == 0) && (pair_sync(t->pair, 1) == 0) && ok;
    return ok ? PAIR_PASS : PAIR_FAIL;
}
