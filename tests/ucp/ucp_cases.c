/* ucp_ops cases: tag (eager short, eager multi-fragment, rendezvous), stream, rma, amo. Every byte
 * is checked; the initiator sends/accesses, the target receives/exposes memory. */
#include "ucp_cases.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TAG_SEED    0x7000u
#define STREAM_SEED 0x8000u
#define RMA_SEED    0x9000u
#define BG_SEED     0xb7u
#define RMA_REGION  ((8u << 20) + 8192)

static void *xmalloc(size_t len)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, len ? len : 1) != 0) {
        abort();
    }
    return p;
}

/* ---- tag ---- */

typedef struct {
    ucs_status_t status;
    size_t       length;
    ucp_tag_t    tag;
} recv_info_t;

static void tag_recv_cb(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info,
                        void *user_data)
{
    recv_info_t *r = user_data;

    (void)request;
    r->status = status;
    r->length = info->length;
    r->tag    = info->sender_tag;
}

static ucs_status_ptr_t post_recv(up_t *u, void *buf, size_t len, ucp_tag_t tag, recv_info_t *r)
{
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                        UCP_OP_ATTR_FLAG_NO_IMM_CMPL,   /* always through the callback */
        .cb.recv      = tag_recv_cb,
        .user_data    = r,
    };
    r->status = UCS_INPROGRESS;
    return ucp_tag_recv_nbx(u->worker, buf, len, tag, (ucp_tag_t)-1, &param);
}

/* Each size twice: once with the receive posted first (expected), once after the send
 * (unexpected) - eager and rendezvous take different paths for the two. */
int up_tag_case(up_t *u, const size_t *sizes, size_t n)
{
    ucp_request_param_t sparam = {.op_attr_mask = 0};
    size_t j, s;
    ucs_status_t status;
    ucs_status_ptr_t req;
    recv_info_t info;
    int ok = 1, good, expected;
    uint8_t *buf;
    ssize_t bad;

    for (j = 0; (j < 2 * n) && ok; ++j) {
        s        = sizes[j / 2];
        expected = (j % 2 == 0);
        /* the receive buffer is larger than the message: a wrong length shows, not truncates */
        buf      = xmalloc(s + 64);
        good     = 1;
        if (u->pair->role == PAIR_TARGET) {
            memset(buf, 0, s + 64);
            req = NULL;
            if (expected) {
                req = post_recv(u, buf, s + 64, 100 + j, &info);
                pair_sendf(u->pair, "posted");
            } else if (pair_expect(u->pair, "sent") != NULL) {
                req = post_recv(u, buf, s + 64, 100 + j, &info);
            }
            status = (req == NULL) ? UCS_ERR_IO_ERROR : up_wait(u, req);
            if ((status != UCS_OK) || (info.status != UCS_OK)) {
                pair_log(u->pair, "tag recv of %zu bytes (%s): %s", s,
                         expected ? "expected" : "unexpected",
                         ucs_status_string(status != UCS_OK ? status : info.status));
                good = 0;
            } else if ((info.length != s) || (info.tag != 100 + j)) {
                pair_log(u->pair, "tag recv (%s): %zu bytes with tag %llu, expected %zu with "
                         "tag %zu", expected ? "expected" : "unexpected", info.length,
                         (unsigned long long)info.tag, s, 100 + j);
                good = 0;
            } else if ((bad = pair_pattern_check(buf, s, TAG_SEED + j)) >= 0) {
                pair_log(u->pair, "tag message of %zu bytes (%s): byte %zd is 0x%02x, expected "
                         "0x%02x", s, expected ? "expected" : "unexpected", bad, buf[bad],
                         pair_pattern_byte(TAG_SEED + j, bad));
                good = 0;
            }
        } else {
            pair_pattern_fill(buf, s, TAG_SEED + j);
            if (expected && (pair_expect(u->pair, "posted") == NULL)) {
                good = 0;
            } else {
                /* a rendezvous send completes only once the target has posted its receive */
                req = ucp_tag_send_nbx(u->ep, buf, s, 100 + j, &sparam);
                if (!expected) {
                    pair_sendf(u->pair, "sent");
                }
                status = up_wait(u, req);
                if (status != UCS_OK) {
                    pair_log(u->pair, "tag send of %zu bytes: %s", s, ucs_status_string(status));
                    good = 0;
                }
            }
        }
        ok = (pair_sync(u->pair, good) == 0);
        free(buf);
    }
    return ok;
}

/* ---- stream ---- */

typedef struct {
    ucs_status_t status;
    size_t       length;
    int          done;
} stream_info_t;

static void stream_recv_cb(void *request, ucs_status_t status, size_t length, void *user_data)
{
    stream_info_t *r = user_data;

    (void)request;
    r->status = status;
    r->length = length;
    r->done   = 1;
}

int up_stream_case(up_t *u)
{
    static const size_t sizes[] = {1, 7, 4099, 65537, (1u << 20) + 1};
    const size_t n = sizeof(sizes) / sizeof(sizes[0]);
    ucp_request_param_t param = {.op_attr_mask = 0};
    ucs_status_ptr_t reqs[sizeof(sizes) / sizeof(sizes[0])];
    uint8_t *bufs[sizeof(sizes) / sizeof(sizes[0])];
    stream_info_t info;
    ucs_status_t status;
    size_t i, length;
    int ok = 1;
    ssize_t bad;

    for (i = 0; i < n; ++i) {
        bufs[i] = xmalloc(sizes[i]);
    }
    if (u->pair->role == PAIR_INITIATOR) {
        /* all in flight at once: the stream must keep them in order */
        for (i = 0; i < n; ++i) {
            pair_pattern_fill(bufs[i], sizes[i], STREAM_SEED + i);
            reqs[i] = ucp_stream_send_nbx(u->ep, bufs[i], sizes[i], &param);
        }
        for (i = 0; i < n; ++i) {
            status = up_wait(u, reqs[i]);
            if (status != UCS_OK) {
                pair_log(u->pair, "stream send of %zu bytes: %s", sizes[i],
                         ucs_status_string(status));
                ok = 0;
            }
        }
    } else {
        param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                             UCP_OP_ATTR_FIELD_FLAGS;
        param.cb.recv_stream = stream_recv_cb;
        param.user_data      = &info;
        param.flags          = UCP_STREAM_RECV_FLAG_WAITALL;
        for (i = 0; (i < n) && ok; ++i) {
            memset(bufs[i], 0, sizes[i]);
            info.done = 0;
            length    = 0;
            status    = up_wait(u, ucp_stream_recv_nbx(u->ep, bufs[i], sizes[i], &length,
                                                       &param));
            if (info.done) {
                length = info.length;
                status = (status == UCS_OK) ? info.status : status;
            }
            if ((status != UCS_OK) || (length != sizes[i])) {
                pair_log(u->pair, "stream recv #%zu of %zu bytes: %s, %zu bytes", i, sizes[i],
                         ucs_status_string(status), length);
                ok = 0;
            } else if ((bad = pair_pattern_check(bufs[i], sizes[i], STREAM_SEED + i)) >= 0) {
                pair_log(u->pair, "stream message #%zu (%zu bytes): byte %zd is 0x%02x, "
                         "expected 0x%02x (out of order or corrupt)", i, sizes[i], bad,
                         bufs[i][bad], pair_pattern_byte(STREAM_SEED + i, bad));
                ok = 0;
            }
        }
    }
    for (i = 0; i < n; ++i) {
        free(bufs[i]);
    }
    return (pair_sync(u->pair, ok) == 0);
}

/* ---- memory exposed for rma and amo ---- */

typedef struct {
    uint8_t   *addr;
    size_t    len;
    ucp_mem_h memh;
    int       allocated;
} region_t;

/* Target: maps user memory (like MPI_Win_create), or with UCP_OPS_ALLOCATE=1 in the
 * environment has UCP allocate it (UCP_MEM_MAP_ALLOCATE, like Open MPI's Win_allocate), and
 * sends address + packed rkey. */
static int expose(up_t *u, region_t *r, size_t len)
{
    ucp_mem_map_params_t params = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
    };
    const char *alloc = getenv("UCP_OPS_ALLOCATE");
    ucp_mem_attr_t attr = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS};
    up_rkey_msg_t *msg;
    ucs_status_t status;
    void *rkey;
    size_t rkey_len;
    int ret;

    r->len       = len;
    r->allocated = (alloc != NULL) && !strcmp(alloc, "1");
    r->addr      = r->allocated ? NULL : xmalloc(len);
    if (r->allocated) {
        params.field_mask |= UCP_MEM_MAP_PARAM_FIELD_FLAGS;
        params.flags       = UCP_MEM_MAP_ALLOCATE;
    }
    params.address = r->addr;
    params.length  = len;
    status = ucp_mem_map(u->context, &params, &r->memh);
    if ((status == UCS_OK) && r->allocated) {
        status  = ucp_mem_query(r->memh, &attr);
        r->addr = attr.address;
    }
    if (status == UCS_OK) {
        status = ucp_rkey_pack(u->context, r->memh, &rkey, &rkey_len);
    }
    if (status != UCS_OK) {
        pair_log(u->pair, "ucp_mem_map/ucp_rkey_pack: %s", ucs_status_string(status));
        return -1;
    }
    msg           = calloc(1, sizeof(*msg) + rkey_len);
    msg->addr     = (uintptr_t)r->addr;
    msg->len      = len;
    msg->rkey_len = rkey_len;
    memcpy(msg->rkey, rkey, rkey_len);
    ucp_rkey_buffer_release(rkey);
    ret = pair_send(u->pair, msg, sizeof(*msg) + rkey_len);
    free(msg);
    return ret;
}

static void unexpose(up_t *u, region_t *r)
{
    ucp_mem_unmap(u->context, r->memh);
    if (!r->allocated) {
        free(r->addr);
    }
}

/* Initiator: receives address + rkey and unpacks it on the ep. */
static int remote(up_t *u, uint64_t *addr, ucp_rkey_h *rkey)
{
    uint8_t buf[8192];
    up_rkey_msg_t *msg = (up_rkey_msg_t*)buf;
    ssize_t n          = pair_recv(u->pair, buf, sizeof(buf));
    ucs_status_t status;

    if ((n < (ssize_t)sizeof(*msg)) || (n != (ssize_t)(sizeof(*msg) + msg->rkey_len))) {
        pair_log(u->pair, "bad rkey message");
        return -1;
    }
    *addr  = msg->addr;
    status = ucp_ep_rkey_unpack(u->ep, msg->rkey, rkey);
    if (status != UCS_OK) {
        pair_log(u->pair, "ucp_ep_rkey_unpack: %s", ucs_status_string(status));
        return -1;
    }
    return 0;
}

static ssize_t bg_check(const uint8_t *p, size_t off, size_t len)
{
    size_t i;
    for (i = off; i < off + len; ++i) {
        if (p[i] != pair_pattern_byte(BG_SEED, i)) {
            return i;
        }
    }
    return -1;
}

static void bg_fill(uint8_t *p, size_t off, size_t len)
{
    size_t i;
    for (i = off; i < off + len; ++i) {
        p[i] = pair_pattern_byte(BG_SEED, i);
    }
}

/* A get of len bytes from the target's background pattern at off, into buf, checked: 1, or
 * 0 with the reason logged. */
static int get_bg_checked(up_t *u, uint8_t *buf, size_t len, uint64_t raddr, size_t off,
                          ucp_rkey_h rkey)
{
    ucp_request_param_t param = {.op_attr_mask = 0};
    ucs_status_t status;
    size_t i;

    memset(buf, 0, len);
    status = up_wait(u, ucp_get_nbx(u->ep, buf, len, raddr + off, rkey, &param));
    if (status != UCS_OK) {
        pair_log(u->pair, "get of %zu bytes: %s", len, ucs_status_string(status));
        return 0;
    }
    for (i = 0; i < len; ++i) {
        if (buf[i] != pair_pattern_byte(BG_SEED, off + i)) {
            pair_log(u->pair, "get of %zu bytes from offset %zu: byte %zu is 0x%02x, expected "
                     "0x%02x", len, off, i, buf[i], pair_pattern_byte(BG_SEED, off + i));
            return 0;
        }
    }
    return 1;
}

/* ---- rma ---- */

/* Target: exposes len bytes filled with the background pattern, then syncs with the
 * initiator, so that the region is filled before the first put lands. */
static int expose_filled(up_t *u, region_t *r, size_t len)
{
    if (expose(u, r, len) != 0) {
        return -1;
    }
    bg_fill(r->addr, 0, r->len);
    return (pair_sync(u->pair, 1) != 0) ? -1 : 0;
}

int up_rma_case(up_t *u)
{
    static const size_t sizes[] = {1, 8, 4099, 65537, 4u << 20};
    const size_t n = sizeof(sizes) / sizeof(sizes[0]);
    const char *rounds_env = getenv("UCP_OPS_SMALL_ROUNDS");
    unsigned r, small_rounds = (rounds_env != NULL) ? (unsigned)atoi(rounds_env) : 1;
    ucp_request_param_t param = {.op_attr_mask = 0};
    unsigned seed;
    size_t i, off, len;
    ucs_status_t status, fstatus;
    ucs_status_ptr_t req;
    const char *msg;
    ucp_rkey_h rkey;
    uint64_t raddr;
    region_t region;
    uint8_t *buf;
    ssize_t bad;
    int ok = 1;

    if (u->pair->role == PAIR_TARGET) {
        if (expose_filled(u, &region, RMA_REGION) != 0) {
            return 0;
        }
        /* puts are checked on request; gets need nothing but progress */
        while ((msg = pair_expect(u->pair, "check")) != NULL && strcmp(msg, "done")) {
            sscanf(msg, "%u %zu %zu", &seed, &off, &len);
            bad = pair_pattern_check(region.addr + off, len, seed);
            if (bad < 0) {
                bad = bg_check(region.addr, off - 64, 64);
            }
            if (bad < 0) {
                bad = bg_check(region.addr, off + len, 64);
            }
            if (bad >= 0) {
                pair_log(u->pair, "put of %zu bytes at offset %zu: wrong byte at %zd", len, off,
                         bad - (ssize_t)off);
                ok = 0;
            }
            bg_fill(region.addr, off - 64, len + 128);
            pair_sendf(u->pair, "result %s", (bad >= 0) ? "bad" : "ok");
        }
        unexpose(u, &region);
        return ok && (msg != NULL) && (pair_sync(u->pair, ok) == 0);
    }

    if ((remote(u, &raddr, &rkey) != 0) || (pair_sync(u->pair, 1) != 0)) {
        return 0;
    }
    buf = xmalloc(RMA_REGION);
    for (i = 0; (i < n) && ok; ++i) {
        /* put, then flush: the flush must cover the put even if the put is still in flight */
        off = 64 + i;
        pair_pattern_fill(buf, sizes[i], RMA_SEED + i);
        req     = ucp_put_nbx(u->ep, buf, sizes[i], raddr + off, rkey, &param);
        fstatus = up_wait(u, ucp_ep_flush_nbx(u->ep, &param));
        status  = up_wait(u, req);
        if ((status != UCS_OK) || (fstatus != UCS_OK)) {
            pair_log(u->pair, "put of %zu bytes: %s, flush: %s", sizes[i],
                     ucs_status_string(status), ucs_status_string(fstatus));
            ok = 0;
            break;
        }
        pair_sendf(u->pair, "check %u %zu %zu", RMA_SEED + (unsigned)i, off, sizes[i]);
        msg = pair_expect(u->pair, "result");
        if ((msg == NULL) || strcmp(msg, "ok")) {
            pair_log(u->pair, "put of %zu bytes to offset %zu: wrong data at the target",
                     sizes[i], off);
            ok = 0;
        }
    }
    /* UCP_OPS_SMALL_ROUNDS=R (the rma_served case): the gets of up to 8 KiB R times, 2 ms
     * apart. rdmach serves them through the target's progress, and an ep whose request the
     * target did not claim in time (a loaded machine) asks again only after 1 ms: with one
     * round, a busy moment could leave no get served */
    for (r = 0; (r < small_rounds) && ok; ++r) {
        if (r > 0) {
            usleep(2000);
        }
        for (i = 0; (i < n) && ok; ++i) {
            if ((r > 0) && (sizes[i] > 8192)) {
                continue;
            }
            ok = get_bg_checked(u, buf, sizes[i], raddr, 128 + 3 * i, rkey);
        }
    }
    pair_sendf(u->pair, "check done");
    ucp_rkey_destroy(rkey);
    free(buf);
    return (pair_sync(u->pair, ok) == 0) && ok;
}

/* Small puts and gets while the target makes no progress for QUIET_US: nothing may wait for
 * it (rdmach serves small RMA on memory it cannot map through the target's progress, and
 * must take such a request back and do it itself when the target does not serve it). The
 * target checks the puts when it wakes; the initiator checks the gets. */
#define QUIET_US     400000
#define QUIET_REGION 65536

int up_rma_quiet_case(up_t *u)
{
    static const size_t sizes[] = {1, 8, 100, 4099, 8192, 8};
    const size_t n = sizeof(sizes) / sizeof(sizes[0]);
    ucp_request_param_t param = {.op_attr_mask = 0};
    double start, elapsed;
    size_t i, off;
    ucs_status_t status, fstatus;
    ucs_status_ptr_t req;
    ucp_rkey_h rkey;
    uint64_t raddr;
    region_t region;
    uint8_t *buf;
    ssize_t bad;
    int ok = 1;

    if (u->pair->role == PAIR_TARGET) {
        if (expose_filled(u, &region, QUIET_REGION) != 0) {
            return 0;
        }
        usleep(QUIET_US);   /* no progress: the initiator's puts and gets go on without us */
        if (pair_sync(u->pair, 1) != 0) {
            return 0;
        }
        for (i = 0, off = 64; i < n; off += sizes[i] + 128, ++i) {
            bad = pair_pattern_check(region.addr + off, sizes[i], RMA_SEED + (unsigned)i);
            if (bad < 0) {
                bad = bg_check(region.addr, off + sizes[i], 64);
            }
            if (bad >= 0) {
                pair_log(u->pair, "put of %zu bytes at offset %zu: wrong byte at %zd",
                         sizes[i], off, bad - (ssize_t)off);
                ok = 0;
            }
        }
        unexpose(u, &region);
        return pair_sync(u->pair, ok) == 0;
    }

    if ((remote(u, &raddr, &rkey) != 0) || (pair_sync(u->pair, 1) != 0)) {
        return 0;
    }
    buf   = xmalloc(QUIET_REGION);
    start = pair_now();
    for (i = 0, off = 64; (i < n) && ok; off += sizes[i] + 128, ++i) {
        pair_pattern_fill(buf, sizes[i], RMA_SEED + (unsigned)i);
        req     = ucp_put_nbx(u->ep, buf, sizes[i], raddr + off, rkey, &param);
        fstatus = up_wait(u, ucp_ep_flush_nbx(u->ep, &param));
        status  = up_wait(u, req);
        if ((status != UCS_OK) || (fstatus != UCS_OK)) {
            pair_log(u->pair, "put of %zu bytes: %s, flush: %s", sizes[i],
                     ucs_status_string(status), ucs_status_string(fstatus));
            ok = 0;
        }
    }
    for (i = 0, off = QUIET_REGION / 2; (i < n) && ok; off += sizes[i] + 64, ++i) {
        ok = get_bg_checked(u, buf, sizes[i], raddr, off, rkey);
    }
    /* all of it done while the target slept, or the test proves nothing */
    elapsed = pair_now() - start;
    if (ok && (elapsed * 1e6 > QUIET_US * 3 / 4)) {
        pair_log(u->pair, "the puts and gets took %.0f us: they waited for the target",
                 elapsed * 1e6);
        ok = 0;
    }
    if (pair_sync(u->pair, 1) != 0) {
        ok = 0;
    }
    ucp_rkey_destroy(rkey);
    free(buf);
    return (pair_sync(u->pair, ok) == 0) && ok;
}

/* ---- amo ---- */

int up_amo_region(up_t *u, uint64_t *raddr, ucp_rkey_h *rkey)
{
    region_t region;

    if (u->pair->role == PAIR_TARGET) {
        return expose(u, &region, 4096);
    }
    return remote(u, raddr, rkey);
}

#define AMO_ADDS 100

/* Values above 2^32 in the 64-bit words catch a transport or emulation that truncates. */
static const uint64_t init64[4] = {0x100000000ull + 100, 0x200000000ull + 200, 0x10000000000ull,
                                   0xf0f0f0f0f0f0f0f0ull};
static const uint32_t init32[4] = {100, 200, 7, 0xf0f0f0f0u};
/* word 3 goes through AND, OR, XOR (fetching), then XOR, AND, OR (posted) with these */
static const uint64_t bit_ops64[6] = {0xff00ff00ff00ff0full, 0x0000000f000000f0ull,
                                      0xffffffff00000000ull, 0x1111111111111111ull,
                                      0x7fffffffffffffffull, 0x8000000000000001ull};
#define BIT_OPS_MASK(_bits) (((_bits) == 32) ? 0xffffffffull : ~0ull)

/* Word 3 after the i-th of those (and, or, xor in turn) */
static uint64_t bit_op(int i, uint64_t w, uint64_t v)
{
    return (i % 3 == 0) ? (w & v) : (i % 3 == 1) ? (w | v) : (w ^ v);
}

/* With reply != NULL the operation fetches (ADD becomes fetch-and-add): the nbx API has no
 * separate FADD opcode. */
static ucs_status_t amo(up_t *u, ucp_atomic_op_t op, int bits, uint64_t value, uint64_t *reply,
                        uint64_t raddr, ucp_rkey_h rkey)
{
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE,
        .datatype     = ucp_dt_make_contig(bits / 8),
    };
    uint32_t v32 = (uint32_t)value, r32 = reply ? (uint32_t)*reply : 0;
    uint64_t v64 = value;
    ucs_status_t status;

    if (reply != NULL) {
        param.op_attr_mask |= UCP_OP_ATTR_FIELD_REPLY_BUFFER;
        param.reply_buffer  = (bits == 32) ? (void*)&r32 : (void*)reply;
    }
    status = up_wait(u, ucp_atomic_op_nbx(u->ep, op, (bits == 32) ? (void*)&v32 : (void*)&v64, 1,
                                          raddr, rkey, &param));
    if ((bits == 32) && (reply != NULL)) {
        *reply = r32;
    }
    return status;
}

static int amo_bits(up_t *u, int bits, uint64_t raddr, ucp_rkey_h rkey)
{
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE,
        .datatype     = ucp_dt_make_contig(bits / 8),
    };
    uint64_t w0 = (bits == 32) ? init32[0] : init64[0];
    uint64_t w1 = (bits == 32) ? init32[1] : init64[1];
    uint64_t x  = (bits == 32) ? 0xdeadbeefu : 0xdeadbeef00000001ull;
    uint64_t y  = (bits == 32) ? 0x12345678u : 0x1234567800000002ull;
    uint64_t z  = (bits == 32) ? 0x0badf00du : 0x0badf00d00000003ull;
    uint64_t one64 = 1, reply;
    uint32_t one32 = 1;
    ucs_status_ptr_t reqs[AMO_ADDS];
    size_t stride = bits / 8;
    int ok = 1, i;

#define AMO_EXPECT(_what, _got, _want) \
    if ((_got) != (_want)) { \
        pair_log(u->pair, "%d-bit %s: got 0x%llx, expected 0x%llx", bits, _what, \
                 (unsigned long long)(_got), (unsigned long long)(_want)); \
        ok = 0; \
    }

    ok &= (amo(u, UCP_ATOMIC_OP_ADD, bits, 5, NULL, raddr, rkey) == UCS_OK);
    reply = 0;
    ok &= (amo(u, UCP_ATOMIC_OP_ADD, bits, 7, &reply, raddr, rkey) == UCS_OK);
    AMO_EXPECT("fadd result (after add 5)", reply, w0 + 5);
    reply = 0;
    ok &= (amo(u, UCP_ATOMIC_OP_SWAP, bits, x, &reply, raddr + stride, rkey) == UCS_OK);
    AMO_EXPECT("swap result", reply, w1);
    reply = y;   /* cswap: buffer is the compare value, reply_buffer the new value in, old out */
    ok &= (amo(u, UCP_ATOMIC_OP_CSWAP, bits, x, &reply, raddr + stride, rkey) == UCS_OK);
    AMO_EXPECT("cswap result (matching compare)", reply, x);
    reply = z;
    ok &= (amo(u, UCP_ATOMIC_OP_CSWAP, bits, x, &reply, raddr + stride, rkey) == UCS_OK);
    AMO_EXPECT("cswap result (stale compare)", reply, y);

    /* and, or, xor fetching, then posted (a transport with device atomics builds them from
     * compare-and-swap: the 32-bit words share 8-byte words with their neighbours) */
    {
        const ucp_atomic_op_t bit_ops[3] = {UCP_ATOMIC_OP_AND, UCP_ATOMIC_OP_OR,
                                            UCP_ATOMIC_OP_XOR};
        uint64_t w = (bits == 32) ? init32[3] : init64[3], v;
        for (i = 0; i < 6; ++i) {
            v     = bit_ops64[i] & BIT_OPS_MASK(bits);
            reply = ~w;
            ok &= (amo(u, bit_ops[i % 3], bits, v, (i < 3) ? &reply : NULL,
                       raddr + 3 * stride, rkey) == UCS_OK);
            if (i < 3) {
                AMO_EXPECT("and/or/xor result", reply, w);
            }
            w = bit_op(i, w, v);
        }
    }

    /* many adds in flight at once: none may be lost (the operand stays valid until done) */
    for (i = 0; i < AMO_ADDS; ++i) {
        reqs[i] = ucp_atomic_op_nbx(u->ep, UCP_ATOMIC_OP_ADD,
                                    (bits == 32) ? (void*)&one32 : (void*)&one64, 1,
                                    raddr + 2 * stride, rkey, &param);
    }
    for (i = 0; i < AMO_ADDS; ++i) {
        if (up_wait(u, reqs[i]) != UCS_OK) {
            ok = 0;
        }
    }
    if (!ok) {
        pair_log(u->pair, "%d-bit atomic operations failed", bits);
    }
    return ok;
#undef AMO_EXPECT
}

int up_amo_case(up_t *u)
{
    ucp_request_param_t param = {.op_attr_mask = 0};
    const char *msg;
    ucp_rkey_h rkey;
    uint64_t raddr, w64[4];
    uint32_t w32[4];
    region_t region;
    int ok = 1, i;

    if (u->pair->role == PAIR_TARGET) {
        if (expose(u, &region, 4096) != 0) {
            return 0;
        }
        memcpy(region.addr, init32, sizeof(init32));
        memcpy(region.addr + 64, init64, sizeof(init64));
        if ((pair_sync(u->pair, 1) != 0) || ((msg = pair_expect(u->pair, "check")) == NULL)) {
            return 0;
        }
        memcpy(w32, region.addr, sizeof(w32));
        memcpy(w64, region.addr + 64, sizeof(w64));
        {
            uint64_t want32[4] = {init32[0] + 12, 0x12345678u, init32[2] + AMO_ADDS, init32[3]};
            uint64_t want64[4] = {init64[0] + 12, 0x1234567800000002ull,
                                  init64[2] + AMO_ADDS, init64[3]};
            for (i = 0; i < 6; ++i) {
                want32[3] = bit_op(i, want32[3], bit_ops64[i] & BIT_OPS_MASK(32));
                want64[3] = bit_op(i, want64[3], bit_ops64[i]);
            }
            for (i = 0; i < 4; ++i) {
                if (w32[i] != want32[i]) {
                    pair_log(u->pair, "32-bit word %d is 0x%x, expected 0x%llx", i, w32[i],
                             (unsigned long long)want32[i]);
                    ok = 0;
                }
                if (w64[i] != want64[i]) {
                    pair_log(u->pair, "64-bit word %d is 0x%llx, expected 0x%llx", i,
                             (unsigned long long)w64[i], (unsigned long long)want64[i]);
                    ok = 0;
                }
            }
        }
        unexpose(u, &region);
        return (pair_sync(u->pair, ok) == 0) && ok;
    }

    if ((remote(u, &raddr, &rkey) != 0) || (pair_sync(u->pair, 1) != 0)) {
        return 0;
    }
    ok = amo_bits(u, 32, raddr, rkey) & amo_bits(u, 64, raddr + 64, rkey);
    if (up_wait(u, ucp_ep_flush_nbx(u->ep, &param)) != UCS_OK) {
        pair_log(u->pair, "flush after the atomics failed");
        ok = 0;
    }
    pair_sendf(u->pair, "check");
    ucp_rkey_destroy(rkey);
    return (pair_sync(u->pair, ok) == 0) && ok;
}
