/* RMA cases: put/get of every size class through the peer's rkey, data and guard bytes checked. */
#include "cases.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PUT_SEED 0x2000u

size_t ut_min(size_t a, size_t b)
{
    return (a < b) ? a : b;
}

/* Room for the largest transfer plus guards and the unaligned offsets used below. */
static size_t rma_cap(const ut_t *t)
{
    return ut_min(t->cap, t->peer_len) - 2 * UT_GUARD - 8;
}

size_t ut_put_max(const ut_t *t, uint64_t op)
{
    const uct_iface_attr_t *a = &t->attr;
    size_t max;

    if (!(a->cap.flags & op)) {
        return 0;
    }
    max = (op == UCT_IFACE_FLAG_PUT_SHORT) ? a->cap.put.max_short :
          (op == UCT_IFACE_FLAG_PUT_BCOPY) ? a->cap.put.max_bcopy : a->cap.put.max_zcopy;
    return ut_min(max, rma_cap(t));
}

size_t ut_get_max(const ut_t *t, uint64_t op)
{
    const uct_iface_attr_t *a = &t->attr;
    size_t max;

    if (!(a->cap.flags & op)) {
        return 0;
    }
    max = (op == UCT_IFACE_FLAG_GET_SHORT) ? a->cap.get.max_short :
          (op == UCT_IFACE_FLAG_GET_BCOPY) ? a->cap.get.max_bcopy : a->cap.get.max_zcopy;
    return ut_min(max, rma_cap(t));
}

size_t ut_op_min(const ut_t *t, uint64_t op)
{
    switch (op) {
    case UCT_IFACE_FLAG_PUT_ZCOPY: return t->attr.cap.put.min_zcopy;
    case UCT_IFACE_FLAG_GET_ZCOPY: return t->attr.cap.get.min_zcopy;
    case UCT_IFACE_FLAG_AM_ZCOPY:  return t->attr.cap.am.min_zcopy;
    default:                       return 0;
    }
}

size_t ut_op_len(const ut_t *t, uint64_t op, size_t want)
{
    int put = (op & (UCT_IFACE_FLAG_PUT_SHORT | UCT_IFACE_FLAG_PUT_BCOPY |
                     UCT_IFACE_FLAG_PUT_ZCOPY)) != 0;
    size_t max = put ? ut_put_max(t, op) : ut_get_max(t, op);
    size_t min = ut_op_min(t, op);

    return (want < min) ? min : (want > max) ? max : want;
}

const char *ut_op_name(uint64_t op)
{
    switch (op) {
    case UCT_IFACE_FLAG_PUT_SHORT: return "put_short";
    case UCT_IFACE_FLAG_PUT_BCOPY: return "put_bcopy";
    case UCT_IFACE_FLAG_PUT_ZCOPY: return "put_zcopy";
    case UCT_IFACE_FLAG_GET_SHORT: return "get_short";
    case UCT_IFACE_FLAG_GET_BCOPY: return "get_bcopy";
    case UCT_IFACE_FLAG_GET_ZCOPY: return "get_zcopy";
    case UCT_IFACE_FLAG_AM_SHORT:  return "am_short";
    case UCT_IFACE_FLAG_AM_BCOPY:  return "am_bcopy";
    case UCT_IFACE_FLAG_AM_ZCOPY:  return "am_zcopy";
    default:                       return "?";
    }
}

int ut_need(ut_t *t, uint64_t flags)
{
    static const struct {
        uint64_t   flag;
        const char *name;
    } names[] = {
        {UCT_IFACE_FLAG_AM_SHORT, "am_short"},   {UCT_IFACE_FLAG_AM_BCOPY, "am_bcopy"},
        {UCT_IFACE_FLAG_AM_ZCOPY, "am_zcopy"},   {UCT_IFACE_FLAG_PUT_SHORT, "put_short"},
        {UCT_IFACE_FLAG_PUT_BCOPY, "put_bcopy"}, {UCT_IFACE_FLAG_PUT_ZCOPY, "put_zcopy"},
        {UCT_IFACE_FLAG_GET_BCOPY, "get_bcopy"}, {UCT_IFACE_FLAG_GET_ZCOPY, "get_zcopy"},
        {UCT_IFACE_FLAG_PENDING, "pending"},
        {UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE, "peer failure handling"},
    };
    char missing[256] = "";
    size_t i, off = 0;

    for (i = 0; i < sizeof(names) / sizeof(names[0]); ++i) {
        if ((flags & names[i].flag) && !(t->attr.cap.flags & names[i].flag)) {
            off += snprintf(missing + off, sizeof(missing) - off, "%s%s", off ? ", " : "",
                            names[i].name);
        }
    }
    if (off == 0) {
        return 1;
    }
    if (t->pair->role == PAIR_INITIATOR) {
        pair_log(t->pair, "skip: %s has no %s", t->tl, missing);
    }
    return 0;
}

typedef struct {
    const uint8_t *src;
    size_t        len;
} pack_arg_t;

static size_t pack_cb(void *dest, void *arg)
{
    pack_arg_t *a = arg;
    memcpy(dest, a->src, a->len);
    return a->len;
}

typedef struct {
    uint8_t *dst;
    size_t  got;
} unpack_arg_t;

static void unpack_cb(void *arg, const void *data, size_t length)
{
    unpack_arg_t *a = arg;
    memcpy(a->dst, data, length);
    a->got += length;
}

ucs_status_t ut_put(ut_t *t, uint64_t op, ut_buf_t *buf, size_t loff, size_t len, uint64_t raddr,
                    uct_rkey_t rkey, ut_comp_t *comp)
{
    pack_arg_t arg = {buf->addr + loff, len};
    uct_iov_t iov[3];
    size_t iovcnt;
    ssize_t r;

    switch (op) {
    case UCT_IFACE_FLAG_PUT_SHORT:
        return UT_RETRY(t, uct_ep_put_short(t->ep, buf->addr + loff, len, raddr, rkey));
    case UCT_IFACE_FLAG_PUT_BCOPY:
        r = UT_RETRY(t, uct_ep_put_bcopy(t->ep, pack_cb, &arg, raddr, rkey));
        if (r < 0) {
            return (ucs_status_t)r;
        }
        if ((size_t)r != len) {
            pair_log(t->pair, "put_bcopy of %zu bytes returned %zd", len, r);
            return UCS_ERR_IO_ERROR;
        }
        return UCS_OK;
    default:
        iovcnt = ut_iov_split(iov, t->attr.cap.put.max_iov, buf->addr + loff, len, buf->memh);
        ut_comp_init(comp);
        return UT_RETRY(t, uct_ep_put_zcopy(t->ep, iov, iovcnt, raddr, rkey, &comp->uct));
    }
}

ucs_status_t ut_get(ut_t *t, uint64_t op, ut_buf_t *buf, size_t loff, size_t len, uint64_t raddr,
                    uct_rkey_t rkey)
{
    unpack_arg_t arg = {buf->addr + loff, 0};
    ucs_status_t status;
    uct_iov_t iov[3];
    ut_comp_t comp;
    size_t iovcnt;

    ut_comp_init(&comp);
    switch (op) {
    case UCT_IFACE_FLAG_GET_SHORT:
        return UT_RETRY(t, uct_ep_get_short(t->ep, buf->addr + loff, len, raddr, rkey));
    case UCT_IFACE_FLAG_GET_BCOPY:
        status = UT_RETRY(t, uct_ep_get_bcopy(t->ep, unpack_cb, &arg, len, raddr, rkey,
                                              &comp.uct));
        status = ut_comp_wait(t, &comp, status);
        if ((status == UCS_OK) && (arg.got != len)) {
            pair_log(t->pair, "get_bcopy of %zu bytes unpacked %zu", len, arg.got);
            return UCS_ERR_IO_ERROR;
        }
        return status;
    default:
        iovcnt = ut_iov_split(iov, t->attr.cap.get.max_iov, buf->addr + loff, len, buf->memh);
        status = UT_RETRY(t, uct_ep_get_zcopy(t->ep, iov, iovcnt, raddr, rkey, &comp.uct));
        return ut_comp_wait(t, &comp, status);
    }
}

ssize_t ut_bg_check(const uint8_t *region, size_t off, size_t len)
{
    size_t i;

    for (i = off; i < off + len; ++i) {
        if (region[i] != pair_pattern_byte(UT_BG_SEED, i)) {
            return i;
        }
    }
    return -1;
}

void ut_bg_fill(uint8_t *region, size_t off, size_t len)
{
    size_t i;

    for (i = off; i < off + len; ++i) {
        region[i] = pair_pattern_byte(UT_BG_SEED, i);
    }
}

/* Target side of the put cases: "check <seed> <off> <len> <region>" -> "result ok|bad ..." */
int ut_serve_put_checks(ut_t *t, uint8_t *region2)
{
    unsigned seed, which;
    size_t off, len;
    const char *msg;
    char why[256];
    uint8_t *r;
    ssize_t bad;
    int ok = 1;

    while ((msg = pair_expect(t->pair, "check")) != NULL) {
        if (!strcmp(msg, "done")) {
            return ok ? PAIR_PASS : PAIR_FAIL;
        }
        if (sscanf(msg, "%u %zu %zu %u", &seed, &off, &len, &which) != 4) {
            pair_log(t->pair, "bad check request '%s'", msg);
            return PAIR_FAIL;
        }
        r      = which ? region2 : t->region.addr;
        why[0] = '\0';
        bad    = pair_pattern_check(r + off, len, seed);
        if (bad >= 0) {
            snprintf(why, sizeof(why), "byte %zd of %zu is 0x%02x, expected 0x%02x", bad, len,
                     r[off + bad], pair_pattern_byte(seed, bad));
        } else if ((bad = ut_bg_check(r, off - UT_GUARD, UT_GUARD)) >= 0) {
            snprintf(why, sizeof(why), "guard byte %zd before the target range changed",
                     bad - (ssize_t)off);
        } else if ((bad = ut_bg_check(r, off + len, UT_GUARD)) >= 0) {
            snprintf(why, sizeof(why), "guard byte +%zd after the target range changed",
                     bad - (ssize_t)(off + len));
        }
        ut_bg_fill(r, off - UT_GUARD, len + 2 * UT_GUARD);
        if (why[0] != '\0') {
            ok = 0;
            pair_log(t->pair, "region %u offset %zu, %zu bytes: %s", which, off, len, why);
        }
        if (pair_sendf(t->pair, "result %s", why[0] ? why : "ok") != 0) {
            return PAIR_FAIL;
        }
    }
    return PAIR_FAIL;
}

/* Initiator: asks the target to check a put; returns 1 if the data arrived intact. */
int ut_request_put_check(ut_t *t, unsigned seed, size_t off, size_t len, unsigned which)
{
    const char *r;

    if (pair_sendf(t->pair, "check %u %zu %zu %u", seed, off, len, which) != 0) {
        return 0;
    }
    r = pair_expect(t->pair, "result");
    return (r != NULL) && !strcmp(r, "ok");
}

static void size_list(const ut_t *t, uint64_t op, size_t *sizes, size_t *n)
{
    int put    = (op & (UCT_IFACE_FLAG_PUT_SHORT | UCT_IFACE_FLAG_PUT_BCOPY |
                        UCT_IFACE_FLAG_PUT_ZCOPY)) != 0;
    size_t (*max_of)(const ut_t*, uint64_t) = put ? ut_put_max : ut_get_max;
    uint64_t shorter = (op == UCT_IFACE_FLAG_PUT_ZCOPY) ? UCT_IFACE_FLAG_PUT_BCOPY :
                       (op == UCT_IFACE_FLAG_PUT_BCOPY) ? UCT_IFACE_FLAG_PUT_SHORT :
                       (op == UCT_IFACE_FLAG_GET_ZCOPY) ? UCT_IFACE_FLAG_GET_BCOPY :
                       (op == UCT_IFACE_FLAG_GET_BCOPY) ? UCT_IFACE_FLAG_GET_SHORT : 0;

    /* the sizes just above the next smaller op's limit are where this op takes over */
    *n = ut_sizes(sizes, 16, ut_op_min(t, op), shorter ? max_of(t, shorter) : 0, max_of(t, op));
}

static int put_case(ut_t *t, uint64_t op)
{
    size_t sizes[16], n, i, off;
    int ok = 1, r;
    ucs_status_t status;
    ut_comp_t comp;
    ut_buf_t buf;

    if (!ut_need(t, op)) {
        return PAIR_SKIP;
    }
    if (t->pair->role == PAIR_TARGET) {
        ut_bg_fill(t->region.addr, 0, t->region.len);
        if (pair_sync(t->pair, 1) != 0) {
            return PAIR_FAIL;
        }
        return ut_serve_put_checks(t, NULL);
    }

    size_list(t, op, sizes, &n);
    ut_log_sizes(t, ut_op_name(op), sizes, n);
    if ((pair_sync(t->pair, 1) != 0) || (ut_buf_alloc(t, &buf, sizes[n - 1] + 8) != 0)) {
        return PAIR_FAIL;
    }
    for (i = 0; i < n; ++i) {
        off = UT_GUARD + (i % 4);      /* unaligned remote offsets too */
        pair_pattern_fill(buf.addr + (i % 8), sizes[i], PUT_SEED + i);
        status = ut_put(t, op, &buf, i % 8, sizes[i], t->peer_addr + off, t->peer_rkey.rkey,
                        &comp);
        status = ut_comp_wait(t, &comp, status);
        if (status == UCS_OK) {
            status = ut_flush(t, t->ep);
        }
        if (status != UCS_OK) {
            pair_log(t->pair, "%s of %zu bytes: %s", ut_op_name(op), sizes[i],
                     ucs_status_string(status));
            ok = 0;
            break;
        }
        r = ut_request_put_check(t, PUT_SEED + i, off, sizes[i], 0);
        if (!r) {
            pair_log(t->pair, "%s of %zu bytes to offset %zu: wrong data at the target",
                     ut_op_name(op), sizes[i], off);
            ok = 0;
        }
    }
    pair_sendf(t->pair, "check done");
    ut_buf_free(t, &buf);
    return ok ? PAIR_PASS : PAIR_FAIL;
}

static int all_bytes(const uint8_t *p, size_t len, uint8_t value)
{
    size_t i;
    for (i = 0; (i < len) && (p[i] == value); ++i) {
    }
    return i == len;
}

static int get_case(ut_t *t, uint64_t op)
{
    size_t sizes[16], n, i, off;
    ucs_status_t status;
    ssize_t bad;
    ut_buf_t buf;
    int ok = 1;

    if (!ut_need(t, op)) {
        return PAIR_SKIP;
    }
    if (t->pair->role == PAIR_TARGET) {
        /* the target only exposes its region; it keeps progressing while it waits */
        ut_bg_fill(t->region.addr, 0, t->region.len);
        return ((pair_sync(t->pair, 1) == 0) && (pair_sync(t->pair, 1) == 0)) ? PAIR_PASS :
                                                                                 PAIR_FAIL;
    }

    size_list(t, op, sizes, &n);
    ut_log_sizes(t, ut_op_name(op), sizes, n);
    if ((pair_sync(t->pair, 1) != 0) ||
        (ut_buf_alloc(t, &buf, sizes[n - 1] + 2 * UT_GUARD + 8) != 0)) {
        return PAIR_FAIL;
    }
    for (i = 0; i < n; ++i) {
        off = UT_GUARD + (i % 4) * 3;
        memset(buf.addr, 0xa5, buf.len);
        status = ut_get(t, op, &buf, UT_GUARD + (i % 8), sizes[i], t->peer_addr + off,
                        t->peer_rkey.rkey);
        if (status != UCS_OK) {
            pair_log(t->pair, "%s of %zu bytes: %s", ut_op_name(op), sizes[i],
                     ucs_status_string(status));
            ok = 0;
            break;
        }
        for (bad = 0; (size_t)bad < sizes[i]; ++bad) {
            if (buf.addr[UT_GUARD + (i % 8) + bad] != pair_pattern_byte(UT_BG_SEED, off + bad)) {
                break;
            }
        }
        if ((size_t)bad < sizes[i]) {
            pair_log(t->pair, "%s of %zu bytes from offset %zu: byte %zd is 0x%02x, expected "
                     "0x%02x", ut_op_name(op), sizes[i], off, bad,
                     buf.addr[UT_GUARD + (i % 8) + bad], pair_pattern_byte(UT_BG_SEED, off + bad));
            ok = 0;
            continue;
        }
        if (!all_bytes(buf.addr, UT_GUARD + (i % 8), 0xa5) ||
            !all_bytes(buf.addr + UT_GUARD + (i % 8) + sizes[i], UT_GUARD, 0xa5)) {
            pair_log(t->pair, "%s of %zu bytes wrote outside the local buffer",
                     ut_op_name(op), sizes[i]);
            ok = 0;
        }
    }
    ut_buf_free(t, &buf);
    return ((pair_sync(t->pair, ok) == 0) && ok) ? PAIR_PASS : PAIR_FAIL;
}

int case_put_short(ut_t *t) { return put_case(t, UCT_IFACE_FLAG_PUT_SHORT); }
int case_put_bcopy(ut_t *t) { return put_case(t, UCT_IFACE_FLAG_PUT_BCOPY); }
int case_put_zcopy(ut_t *t) { return put_case(t, UCT_IFACE_FLAG_PUT_ZCOPY); }
int case_get_bcopy(ut_t *t) { return get_case(t, UCT_IFACE_FLAG_GET_BCOPY); }
int case_get_zcopy(ut_t *t) { return get_case(t, UCT_IFACE_FLAG_GET_ZCOPY); }

/*
 * A second region with its own rkey: puts through key 2 must land in region 2 (region 1 stays
 * untouched) and gets through key 2 must read region 2 - a transport that ignores the rkey or
 * mixes up keys fails here. Every put and get op the transport has is used.
 */
/* Region 2 and the local buffer must hold the smallest zcopy the transport accepts. */
static size_t rkeys_region_len(const ut_t *t)
{
    size_t get = t->attr.cap.get.min_zcopy, put = t->attr.cap.put.min_zcopy;
    size_t len = ((get > put) ? get : put) + (256u << 10);
    return (len > ((size_t)1 << 20)) ? len : ((size_t)1 << 20);
}

int case_rkeys(ut_t *t)
{
    static const uint64_t puts[] = {UCT_IFACE_FLAG_PUT_SHORT, UCT_IFACE_FLAG_PUT_BCOPY,
                                    UCT_IFACE_FLAG_PUT_ZCOPY};
    static const uint64_t gets[] = {UCT_IFACE_FLAG_GET_BCOPY, UCT_IFACE_FLAG_GET_ZCOPY};
    uct_rkey_bundle_t rkey2 = {.rkey = UCT_INVALID_RKEY};
    size_t len, i, off;
    ucs_status_t status;
    uint64_t addr2;
    ut_buf_t region2, buf;
    ut_comp_t comp;
    ssize_t bad;
    int ok = 1;

    if (!(t->attr.cap.flags & (UCT_IFACE_FLAG_PUT_SHORT | UCT_IFACE_FLAG_PUT_BCOPY |
                               UCT_IFACE_FLAG_PUT_ZCOPY | UCT_IFACE_FLAG_GET_BCOPY |
                               UCT_IFACE_FLAG_GET_ZCOPY))) {
        if (t->pair->role == PAIR_INITIATOR) {
            pair_log(t->pair, "skip: %s has no put or get", t->tl);
        }
        return PAIR_SKIP;
    }
    if (!(t->md_attr.cap.flags & UCT_MD_FLAG_NEED_RKEY)) {
        if (t->pair->role == PAIR_INITIATOR) {
            pair_log(t->pair, "skip: the %s md needs no rkeys", t->tl);
        }
        return PAIR_SKIP;
    }

    if (t->pair->role == PAIR_TARGET) {
        int result;
        if (ut_buf_alloc(t, &region2, rkeys_region_len(t)) != 0) {
            return PAIR_FAIL;
        }
        ut_bg_fill(t->region.addr, 0, t->region.len);
        /* region 2 holds the background pattern shifted by 1000 bytes: gets can tell them apart */
        ut_bg_fill(region2.addr, 0, region2.len);
        memmove(region2.addr, region2.addr + 1000, region2.len - 1000);
        if (ut_send_region(t, &region2) != 0) {
            return PAIR_FAIL;
        }
        /* gets first (region 2 must still be pristine), then the puts are checked */
        if (pair_sync(t->pair, 1) != 0) {
            return PAIR_FAIL;
        }
        ut_bg_fill(region2.addr, 0, region2.len);
        if (pair_sync(t->pair, 1) != 0) {
            return PAIR_FAIL;
        }
        result = ut_serve_put_checks(t, region2.addr);
        if ((bad = ut_bg_check(t->region.addr, 0, t->region.len)) >= 0) {
            pair_log(t->pair, "region 1 byte %zd changed by accesses through region 2's rkey",
                     bad);
            result = PAIR_FAIL;
        }
        ut_buf_free(t, &region2);
        return result;
    }

    if ((ut_recv_region(t, &addr2, &rkey2) != 0) ||
        (ut_buf_alloc(t, &buf, rkeys_region_len(t)) != 0)) {
        return PAIR_FAIL;
    }

    for (i = 0; i < 2; ++i) {
        if (ut_get_max(t, gets[i]) == 0) {
            continue;
        }
        len = ut_op_len(t, gets[i], 4096 + 3);
        off = 64 + i;
        memset(buf.addr, 0, len);
        status = ut_get(t, gets[i], &buf, 0, len, addr2 + off, rkey2.rkey);
        for (bad = 0; (status == UCS_OK) && ((size_t)bad < len); ++bad) {
            if (buf.addr[bad] != pair_pattern_byte(UT_BG_SEED, off + 1000 + bad)) {
                break;
            }
        }
        if ((status != UCS_OK) || ((size_t)bad < len)) {
            pair_log(t->pair, "%s of %zu bytes through rkey 2: %s", ut_op_name(gets[i]), len,
                     (status != UCS_OK) ? ucs_status_string(status) :
                     "read the wrong data (region 1, or the wrong offset?)");
            ok = 0;
        }
    }
    if (pair_sync(t->pair, 1) != 0 || pair_sync(t->pair, 1) != 0) {
        return PAIR_FAIL;
    }

    for (i = 0; i < 3; ++i) {
        if (ut_put_max(t, puts[i]) == 0) {
            continue;
        }
        len = ut_op_len(t, puts[i], 4096 + 5);
        off = UT_GUARD + 65536 * i + i;
        pair_pattern_fill(buf.addr, len, PUT_SEED + 100 + i);
        status = ut_put(t, puts[i], &buf, 0, len, addr2 + off, rkey2.rkey, &comp);
        status = ut_comp_wait(t, &comp, status);
        if (status == UCS_OK) {
            status = ut_flush(t, t->ep);
        }
        if ((status != UCS_OK) || !ut_request_put_check(t, PUT_SEED + 100 + i, off, len, 1)) {
            pair_log(t->pair, "%s of %zu bytes through rkey 2: %s", ut_op_name(puts[i]), len,
                     (status != UCS_OK) ? ucs_status_string(status) : "wrong data at the target");
            ok = 0;
        }
    }
    pair_sendf(t->pair, "check done");
    uct_rkey_release(t->component, &rkey2);
    ut_buf_free(t, &buf);
    return ok ? PAIR_PASS : PAIR_FAIL;
}

/* ---- a peer's mapped segments, kept for the next key ---- */

#define RKEY_REUSE_REGIONS 40   /* more than the transports keep mapped (ucx_ext_xmem.c: 32) */

/* Mappings of shareable memory (memfd) in this process. */
static int rkey_reuse_memfd_maps(void)
{
    char line[512];
    FILE *f = fopen("/proc/self/maps", "r");
    int n   = 0;

    if (f == NULL) {
        return -1;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        n += (strstr(line, "/memfd:") != NULL);
    }
    fclose(f);
    return n;
}

/* The target allocates RKEY_REUSE_REGIONS regions the md maps for peers (memfd) and sends
 * their keys. The initiator unpacks each, reads a word through rkey_ptr, releases it, twice
 * over: a released key's segment stays mapped for the next key (UCP unpacks a key for every
 * rendezvous), at most the bound's worth stay, and every read sees its own region. */
int case_rkey_reuse(ut_t *t)
{
    uct_rkey_bundle_t rkey;
    uint64_t addr[RKEY_REUSE_REGIONS];
    uint8_t packed[RKEY_REUSE_REGIONS][512];
    ut_buf_t regions[RKEY_REUSE_REGIONS];
    int i, round, base, after, ok = 1;
    size_t rlen = t->md_attr.rkey_packed_size;
    void *local;

    /* (the md answers rkey_ptr for mapped keys without UCT_MD_FLAG_RKEY_PTR: ucx_ext_md.c) */
    if (!(t->md_attr.cap.flags & UCT_MD_FLAG_ALLOC) || (rlen + 8 > 512)) {
        if (t->pair->role == PAIR_INITIATOR) {
            pair_log(t->pair, "skip: the %s md maps no memory for peers", t->tl);
        }
        return PAIR_SKIP;
    }
    /* keeping segments is the project's mds' promise (ucx_ext_xmem.c); UCX's posix, run as
     * the reference, unmaps a segment when its key is released */
    if (strcmp(t->tl, "rdmach") && strcmp(t->tl, "unimem")) {
        if (t->pair->role == PAIR_INITIATOR) {
            pair_log(t->pair, "skip: %s is a UCX built-in (its md unmaps at release)", t->tl);
        }
        return PAIR_SKIP;
    }
    if (t->pair->role == PAIR_TARGET) {
        int result = PAIR_PASS;

        for (i = 0; i < RKEY_REUSE_REGIONS; ++i) {
            if ((ut_buf_alloc_md(t, &regions[i], 4096) != 0) ||
                (ut_send_region(t, &regions[i]) != 0)) {
                return PAIR_FAIL;
            }
            memset(regions[i].addr, 0x40 + i, 4096);
        }
        if (pair_sync(t->pair, 1) != 0) {    /* the regions are filled */
            result = PAIR_FAIL;
        }
        if (pair_sync(t->pair, 1) != 0) {    /* the initiator is done */
            result = PAIR_FAIL;
        }
        for (i = 0; i < RKEY_REUSE_REGIONS; ++i) {
            ut_buf_free(t, &regions[i]);
        }
        return result;
    }

    for (i = 0; i < RKEY_REUSE_REGIONS; ++i) {
        if (pair_recv(t->pair, packed[i], sizeof(packed[i])) != (ssize_t)(8 + rlen)) {
            pair_log(t->pair, "no region %d from the peer", i);
            return PAIR_FAIL;
        }
        memcpy(&addr[i], packed[i], 8);
    }
    if (pair_sync(t->pair, 1) != 0) {
        return PAIR_FAIL;
    }
    base = rkey_reuse_memfd_maps();
    for (round = 0; round < 2; ++round) {
        for (i = 0; i < RKEY_REUSE_REGIONS; ++i) {
            if (uct_rkey_unpack(t->component, packed[i] + 8, &rkey) != UCS_OK) {
                pair_log(t->pair, "uct_rkey_unpack of region %d failed", i);
                return PAIR_FAIL;
            }
            if ((uct_rkey_ptr(t->component, &rkey, addr[i] + 100, &local) != UCS_OK) ||
                (*(volatile uint8_t*)local != 0x40 + i)) {
                pair_log(t->pair, "round %d region %d: no pointer or another region's bytes",
                         round, i);
                ok = 0;
            }
            uct_rkey_release(t->component, &rkey);
        }
    }
    after = rkey_reuse_memfd_maps();
    /* kept: the last keys' segments are still mapped, within the bound */
    if ((base < 0) || (after <= base) || (after - base > 32)) {
        pair_log(t->pair, "%d of the peer's %d segments still mapped after their keys were "
                 "released (want 1..32)", after - base, RKEY_REUSE_REGIONS);
        ok = 0;
    }
    if (pair_sync(t->pair, 1) != 0) {
        return PAIR_FAIL;
    }
    return ok ? PAIR_PASS : PAIR_FAIL;
}

/* A key's mapped segment (ucx_ext_xmem_desc_t, the last bytes of rdmach's and unimem's packed
 * keys) is the packer's word. Forged by the initiator after the target's genuine key, it
 * names a malloc'd buffer of the initiator itself: first while the key still names the
 * target (a key to one process mapping another), then with the key naming the initiator too
 * (a key to ourselves that is not one of our segments). Neither may give a pointer into that
 * buffer: UCP's rkey_ptr dereferences it, and puts, gets and atomics go through the same
 * mapping. The genuine key still reads the target's bytes. */
typedef struct forged_key_layout {
    const char *tl;
    size_t     pid, address, length;   /* offsets of the key's process and region */
} forged_key_layout_t;

static const forged_key_layout_t forged_key_layouts[] = {
    {"rdmach", 4, 8, 16},   /* uct_rdmach_rkey_t: magic, pid, address, length, key, xmem */
    {"unimem", 0, 6, 14},   /* uct_unimem_rkey_t: proc, pdid, vaddr, length, xmem */
};

#define FORGED_XMEM_BYTES 48   /* ucx_ext_xmem_desc_t: pid, fd, ino, base, length, dev, offset */

static int forged_key_points_at(ut_t *t, const uint8_t *packed, uint64_t at, void **local)
{
    uct_rkey_bundle_t rkey;
    ucs_status_t status;

    *local = NULL;
    if (uct_rkey_unpack(t->component, packed, &rkey) != UCS_OK) {
        return 0;   /* refused outright: no pointer either */
    }
    status = uct_rkey_ptr(t->component, &rkey, at, local);
    uct_rkey_release(t->component, &rkey);
    return status == UCS_OK;
}

int case_rkey_forged(ut_t *t)
{
    const forged_key_layout_t *lay = NULL;
    size_t rlen = t->md_attr.rkey_packed_size, i;
    uint8_t packed[512], forged[512];
    uint64_t raddr, u64;
    int32_t pid32;
    ut_buf_t region;
    uint8_t *canary;
    void *local;
    int ok = 1;

    for (i = 0; i < sizeof(forged_key_layouts) / sizeof(forged_key_layouts[0]); ++i) {
        if (strcmp(t->tl, forged_key_layouts[i].tl) == 0) {
            lay = &forged_key_layouts[i];
        }
    }
    if ((lay == NULL) || !(t->md_attr.cap.flags & UCT_MD_FLAG_ALLOC) ||
        (rlen + 8 > sizeof(packed)) || (rlen < lay->length + 8 + FORGED_XMEM_BYTES)) {
        if (t->pair->role == PAIR_INITIATOR) {
            pair_log(t->pair, "skip: the %s md maps no memory for peers", t->tl);
        }
        return PAIR_SKIP;
    }
    if (t->pair->role == PAIR_TARGET) {
        int result = PAIR_PASS;

        if ((ut_buf_alloc_md(t, &region, 4096) != 0) || (ut_send_region(t, &region) != 0)) {
            return PAIR_FAIL;
        }
        memset(region.addr, 0x5a, 4096);
        if ((pair_sync(t->pair, 1) != 0) || (pair_sync(t->pair, 1) != 0)) {
            result = PAIR_FAIL;
        }
        ut_buf_free(t, &region);
        return result;
    }

    if (pair_recv(t->pair, packed, sizeof(packed)) != (ssize_t)(8 + rlen)) {
        pair_log(t->pair, "no region from the peer");
        return PAIR_FAIL;
    }
    memcpy(&raddr, packed, 8);
    canary = aligned_alloc(4096, 4096);
    if ((canary == NULL) || (pair_sync(t->pair, 1) != 0)) {
        free(canary);
        return PAIR_FAIL;
    }
    memset(canary, 0xc5, 4096);

    /* the genuine key: a pointer into the target's region, its bytes */
    if (!forged_key_points_at(t, packed + 8, raddr + 100, &local) ||
        (*(volatile uint8_t*)local != 0x5a)) {
        pair_log(t->pair, "the genuine key gives no pointer to the target's bytes");
        ok = 0;
    }

    /* forged: the map names us (our pid, the canary), the region too, the key the target */
    memcpy(forged, packed + 8, rlen);
    pid32 = getpid();
    memcpy(forged + rlen - FORGED_XMEM_BYTES, &pid32, 4);
    u64 = (uintptr_t)canary;
    memcpy(forged + rlen - FORGED_XMEM_BYTES + 16, &u64, 8);   /* base */
    memcpy(forged + lay->address, &u64, 8);
    u64 = 4096;
    memcpy(forged + rlen - FORGED_XMEM_BYTES + 24, &u64, 8);   /* length */
    memcpy(forged + lay->length, &u64, 8);
    if (forged_key_points_at(t, forged, (uintptr_t)canary + 100, &local)) {
        pair_log(t->pair, "a key of process %d mapping this process's memory gave pointer %p "
                 "(canary %p)", t->pair->peer_pid, local, (void*)canary);
        ok = 0;
    }
    /* forged: the key names us too, the map is not one of our segments */
    memcpy(forged + lay->pid, &pid32, 4);
    if (forged_key_points_at(t, forged, (uintptr_t)canary + 100, &local)) {
        pair_log(t->pair, "a key to this process naming memory outside its segments gave "
                 "pointer %p (canary %p)", local, (void*)canary);
        ok = 0;
    }
    for (i = 0; i < 4096; ++i) {
        ok &= (canary[i] == 0xc5);
    }
    free(canary);
    if (pair_sync(t->pair, 1) != 0) {
        return PAIR_FAIL;
    }
    return ok ? PAIR_PASS : PAIR_FAIL;
}
