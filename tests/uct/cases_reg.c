/* Registration cases (issue 38, item 6): what a registration grants is what a peer gets.
 *  - rkey_access: a put into a region registered without remote-put access is refused (the
 *    target's bytes stay as they were), a get from one without remote-get access fails, and
 *    the access each grants still works;
 *  - dereg_revokes: a get being served when the owner deregisters the region stops with an
 *    error, long before any timeout, and never carries what the memory holds afterwards;
 *  - keys_getrandom: the key in a packed rkey comes from getrandom(2), the kernel's CSPRNG (a
 *    key is all that stands between a peer who learned a region's id and address and its
 *    memory; ucs_generate_uuid mixes the time, the pid and an address).
 * They test ud_zcopy's md, whose owner serves every access in software; tests/uct/run runs
 * them for ud_zcopy only. */
#include "cases.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define REG_LEN       65536
#define REG_PUT_SEED  0x3100u
#define REG_ACCESS_LOCAL (UCT_MD_MEM_ACCESS_LOCAL_READ | UCT_MD_MEM_ACCESS_LOCAL_WRITE)

/* ---- getrandom(2), seen from the test: uct_pair exports this definition (meson.build), so
 * the transports' calls land here first ---- */

static volatile int reg_rand_watch;
static unsigned     reg_rand_calls;
static uint8_t      reg_rand_last[64];
static size_t       reg_rand_last_len;

/* (default visibility: the executable is built with UCX's internal flags, hidden by default) */
__attribute__((visibility("default")))
ssize_t getrandom(void *buf, size_t len, unsigned int flags)
{
    long n = syscall(SYS_getrandom, buf, len, flags);

    if (reg_rand_watch && (n > 0)) {
        reg_rand_calls++;
        reg_rand_last_len = ((size_t)n < sizeof(reg_rand_last)) ? (size_t)n : sizeof(reg_rand_last);
        memcpy(reg_rand_last, buf, reg_rand_last_len);
    }
    return n;
}

static int reg_region(ut_t *t, uint8_t **addr, size_t len, unsigned flags, uct_mem_h *memh)
{
    ucs_status_t status;

    if (posix_memalign((void**)addr, 4096, len) != 0) {
        pair_log(t->pair, "out of memory (%zu bytes)", len);
        return -1;
    }
    ut_bg_fill(*addr, 0, len);
    status = uct_md_mem_reg(t->md, *addr, len, flags, memh);
    if (status != UCS_OK) {
        pair_log(t->pair, "uct_md_mem_reg(flags 0x%x): %s", flags, ucs_status_string(status));
        free(*addr);
        return -1;
    }
    return 0;
}

/* The target's side of a case: sends addresses and rkeys of n regions. */
static int reg_send_keys(ut_t *t, uint8_t **addrs, uct_mem_h *memhs, int n)
{
    size_t rkey_len = t->md_attr.rkey_packed_size;
    uint8_t msg[2048];
    uint64_t a;
    int i;

    if (n * (8 + rkey_len) > sizeof(msg)) {
        return -1;
    }
    for (i = 0; i < n; ++i) {
        a = (uintptr_t)addrs[i];
        memcpy(msg + i * (8 + rkey_len), &a, 8);
        if (uct_md_mkey_pack(t->md, memhs[i], msg + i * (8 + rkey_len) + 8) != UCS_OK) {
            return -1;
        }
    }
    return pair_send(t->pair, msg, n * (8 + rkey_len));
}

/* The initiator's side: unpacks them (release with uct_rkey_release). */
static int reg_recv_keys(ut_t *t, uint64_t *addrs, uct_rkey_bundle_t *rkeys, int n)
{
    size_t rkey_len = t->md_attr.rkey_packed_size;
    uint8_t msg[2048];
    ucs_status_t status;
    int i;

    if (pair_recv(t->pair, msg, sizeof(msg)) != (ssize_t)(n * (8 + rkey_len))) {
        return -1;
    }
    for (i = 0; i < n; ++i) {
        memcpy(&addrs[i], msg + i * (8 + rkey_len), 8);
        status = uct_rkey_unpack(t->component, msg + i * (8 + rkey_len) + 8, &rkeys[i]);
        if (status != UCS_OK) {
            pair_log(t->pair, "uct_rkey_unpack: %s", ucs_status_string(status));
            return -1;
        }
    }
    return 0;
}

static int reg_needs(ut_t *t)
{
    if (!(t->md_attr.cap.flags & UCT_MD_FLAG_REG) || !(t->md_attr.cap.flags & UCT_MD_FLAG_NEED_RKEY) ||
        !(t->attr.cap.flags & UCT_IFACE_FLAG_PUT_BCOPY) ||
        !(t->attr.cap.flags & UCT_IFACE_FLAG_GET_BCOPY)) {
        if (t->pair->role == PAIR_INITIATOR) {
            pair_log(t->pair, "skip: %s registers no memory for put_bcopy and get_bcopy", t->tl);
        }
        return 0;
    }
    return 1;
}

int case_rkey_access(ut_t *t)
{
    static const uint64_t puts[] = {UCT_IFACE_FLAG_PUT_SHORT, UCT_IFACE_FLAG_PUT_BCOPY,
                                    UCT_IFACE_FLAG_PUT_ZCOPY};
    uint8_t *regions[2];
    uct_mem_h memhs[2];
    uint64_t raddr[2];
    uct_rkey_bundle_t rkeys[2];
    ut_buf_t buf;
    ut_comp_t comp;
    ucs_status_t status;
    ssize_t bad;
    size_t i, len;
    int ok = 1, puts_done = 0;

    if (!reg_needs(t)) {
        return PAIR_SKIP;
    }
    if (t->pair->role == PAIR_TARGET) {
        /* region 0 may be read, not written; region 1 written, not read */
        if ((reg_region(t, &regions[0], REG_LEN, UCT_MD_MEM_ACCESS_REMOTE_GET | REG_ACCESS_LOCAL,
                        &memhs[0]) != 0) ||
            (reg_region(t, &regions[1], REG_LEN, UCT_MD_MEM_ACCESS_REMOTE_PUT | REG_ACCESS_LOCAL,
                        &memhs[1]) != 0) ||
            (reg_send_keys(t, regions, memhs, 2) != 0)) {
            return PAIR_FAIL;
        }
        if (pair_expect(t->pair, "check") == NULL) {   /* the initiator is done */
            return PAIR_FAIL;
        }
        if ((bad = ut_bg_check(regions[0], 0, REG_LEN)) >= 0) {
            pair_log(t->pair, "a put wrote byte %zd of a region registered without remote put",
                     bad);
            ok = 0;
        }
        if ((bad = pair_pattern_check(regions[1], 100, REG_PUT_SEED)) >= 0) {
            pair_log(t->pair, "the put into the region registered for it missed byte %zd", bad);
            ok = 0;
        }
        ok = (pair_sync(t->pair, ok) == 0) && ok;
        for (i = 0; i < 2; ++i) {
            uct_md_mem_dereg(t->md, memhs[i]);
            free(regions[i]);
        }
        return ok ? PAIR_PASS : PAIR_FAIL;
    }

    if ((reg_recv_keys(t, raddr, rkeys, 2) != 0) || (ut_buf_alloc(t, &buf, REG_LEN) != 0)) {
        return PAIR_FAIL;
    }
    pair_pattern_fill(buf.addr, REG_LEN, REG_PUT_SEED);
    /* every put op into the read-only region: the transport takes them (the target refuses) */
    for (i = 0; i < sizeof(puts) / sizeof(puts[0]); ++i) {
        if (ut_put_max(t, puts[i]) == 0) {
            continue;
        }
        len = ut_op_len(t, puts[i], 100);
        ut_comp_init(&comp);
        status = ut_comp_wait(t, &comp, ut_put(t, puts[i], &buf, 0, len, raddr[0] + 256 * i,
                                               rkeys[0].rkey, &comp));
        if ((status != UCS_OK) && (status != UCS_ERR_INVALID_ADDR)) {
            pair_log(t->pair, "%s into the read-only region: %s", ut_op_name(puts[i]),
                     ucs_status_string(status));
            ok = 0;
        }
        puts_done++;
    }
    /* the write-only region takes a put, and the read-only one gives its bytes */
    status = ut_put(t, UCT_IFACE_FLAG_PUT_BCOPY, &buf, 0, 100, raddr[1], rkeys[1].rkey, NULL);
    if ((status != UCS_OK) || ((status = ut_flush(t, t->ep)) != UCS_OK)) {
        pair_log(t->pair, "put_bcopy into the write-only region: %s", ucs_status_string(status));
        ok = 0;
    }
    memset(buf.addr, 0, 100);
    status = ut_get(t, UCT_IFACE_FLAG_GET_BCOPY, &buf, 0, 100, raddr[0] + 8192, rkeys[0].rkey);
    if (status != UCS_OK) {
        pair_log(t->pair, "get_bcopy from the read-only region: %s", ucs_status_string(status));
        ok = 0;
    } else {
        for (i = 0; i < 100; ++i) {
            if (buf.addr[i] != pair_pattern_byte(UT_BG_SEED, 8192 + i)) {
                pair_log(t->pair, "get_bcopy from the read-only region: byte %zu differs", i);
                ok = 0;
                break;
            }
        }
    }
    /* a get from the write-only region fails */
    status = ut_get(t, UCT_IFACE_FLAG_GET_BCOPY, &buf, 0, 100, raddr[1], rkeys[1].rkey);
    if (status == UCS_OK) {
        pair_log(t->pair, "get_bcopy from a region registered without remote get succeeded");
        ok = 0;
    }
    if (puts_done == 0) {
        pair_log(t->pair, "no put op to try");
        ok = 0;
    }
    for (i = 0; i < 2; ++i) {
        uct_rkey_release(t->component, &rkeys[i]);
    }
    ut_buf_free(t, &buf);
    if (pair_sendf(t->pair, "check") != 0) {
        return PAIR_FAIL;
    }
    return (pair_sync(t->pair, ok) == 0) && ok ? PAIR_PASS : PAIR_FAIL;
}

/* The owner serves a large get_zcopy; once the first bytes arrived the initiator stops
 * progressing (the owner stalls at its window) and tells the target, which deregisters the
 * region and overwrites it (as a freed and reused buffer would be). The get must fail, soon,
 * and nothing of the overwritten bytes may arrive. */
int case_dereg_revokes(ut_t *t)
{
    const size_t len = 16u << 20;
    uint8_t *region;
    uct_mem_h memh;
    uint64_t raddr;
    uct_rkey_bundle_t rkey;
    ut_buf_t buf;
    ut_comp_t comp;
    uct_iov_t iov;
    ucs_status_t status;
    double t0, waited;
    uint8_t ee[64];
    char msg[64];
    size_t i;
    int ok = 1;

    if (!reg_needs(t) || !(t->attr.cap.flags & UCT_IFACE_FLAG_GET_ZCOPY) ||
        (t->attr.cap.get.max_zcopy < len)) {
        if (t->pair->role == PAIR_INITIATOR) {
            pair_log(t->pair, "skip: %s has no get_zcopy of %zu bytes", t->tl, len);
        }
        return PAIR_SKIP;
    }
    if (t->pair->role == PAIR_TARGET) {
        if ((reg_region(t, &region, len, UCT_MD_MEM_ACCESS_ALL, &memh) != 0) ||
            (reg_send_keys(t, &region, &memh, 1) != 0)) {
            return PAIR_FAIL;
        }
        if (pair_expect(t->pair, "dereg") == NULL) {    /* serving while it waits */
            return PAIR_FAIL;
        }
        status = uct_md_mem_dereg(t->md, memh);
        memset(region, 0xee, len);
        if ((status != UCS_OK) || (pair_sendf(t->pair, "done") != 0)) {
            pair_log(t->pair, "uct_md_mem_dereg: %s", ucs_status_string(status));
            return PAIR_FAIL;
        }
        ok = (pair_sync(t->pair, 1) == 0);
        free(region);
        return ok ? PAIR_PASS : PAIR_FAIL;
    }

    if ((reg_recv_keys(t, &raddr, &rkey, 1) != 0) || (ut_buf_alloc(t, &buf, len) != 0)) {
        return PAIR_FAIL;
    }
    memset(buf.addr, 0, len);
    iov.buffer = buf.addr;
    iov.length = len;
    iov.memh   = buf.memh;
    iov.stride = 0;
    iov.count  = 1;
    ut_comp_init(&comp);
    status = UT_RETRY(t, uct_ep_get_zcopy(t->ep, &iov, 1, raddr, rkey.rkey, &comp.uct));
    if (status != UCS_INPROGRESS) {
        pair_log(t->pair, "get_zcopy of %zu bytes: %s", len, ucs_status_string(status));
        ok = 0;
    }
    /* until the first 4 KiB are there: the owner is serving the transfer */
    while (ok && !comp.done && (ut_bg_check(buf.addr, 0, 4096) >= 0)) {
        ut_progress(t);
        if (ut_expired(t)) {
            pair_log(t->pair, "no data of the get arrived");
            ok = 0;
        }
    }
    if (ok && comp.done) {
        pair_log(t->pair, "the get finished before the target could deregister (%s)",
                 ucs_status_string(comp.uct.status));
        ok = 0;
    }
    /* not progressing while the target deregisters: the owner stalls at the window */
    if (ok && ((pair_sendf(t->pair, "dereg") != 0) ||
               (pair_recv_idle(t->pair, msg, sizeof(msg)) < 0))) {  /* "done" */
        ok = 0;
    }
    if (ok) {
        t0     = pair_now();
        status = ut_comp_wait(t, &comp, UCS_INPROGRESS);
        waited = pair_now() - t0;
        if (status == UCS_OK) {
            pair_log(t->pair, "the get completed after the region was deregistered");
            ok = 0;
        } else if (waited > 1.0) {
            pair_log(t->pair, "the get failed (%s) only after %.2f s: a timeout, not the "
                     "deregistration", ucs_status_string(status), waited);
            ok = 0;
        }
        /* the bytes the target wrote after the deregistration: 64 of 0xee in a row (the
         * background pattern has no such run) */
        memset(ee, 0xee, sizeof(ee));
        for (i = 0; i + sizeof(ee) <= len; i += sizeof(ee)) {
            if (!memcmp(buf.addr + i, ee, sizeof(ee))) {
                pair_log(t->pair, "bytes written after the deregistration arrived at %zu", i);
                ok = 0;
                break;
            }
        }
    } else if (!comp.done) {
        ut_comp_wait(t, &comp, UCS_INPROGRESS);     /* nothing may land in buf after free */
    }
    uct_rkey_release(t->component, &rkey);
    ut_buf_free(t, &buf);
    return (pair_sync(t->pair, ok) == 0) && ok ? PAIR_PASS : PAIR_FAIL;
}

int case_keys_getrandom(ut_t *t)
{
    size_t rkey_len = t->md_attr.rkey_packed_size, i;
    uint8_t rkey_buf[1024], *region;
    uct_mem_h memh;
    unsigned calls;
    int ok = 1, found = 0;

    if (!reg_needs(t)) {
        return PAIR_SKIP;
    }
    if (t->pair->role == PAIR_TARGET) {
        return PAIR_PASS;   /* one process is enough */
    }
    if (posix_memalign((void**)&region, 4096, 4096) != 0) {
        return PAIR_FAIL;
    }
    reg_rand_calls    = 0;
    reg_rand_last_len = 0;
    reg_rand_watch    = 1;
    if (uct_md_mem_reg(t->md, region, 4096, UCT_MD_MEM_ACCESS_ALL, &memh) != UCS_OK) {
        reg_rand_watch = 0;
        free(region);
        return PAIR_FAIL;
    }
    reg_rand_watch = 0;
    calls = reg_rand_calls;
    if (rkey_len > sizeof(rkey_buf) || (uct_md_mkey_pack(t->md, memh, rkey_buf) != UCS_OK)) {
        ok = 0;
    }
    /* the bytes getrandom gave are the key in the packed rkey */
    for (i = 0; ok && (reg_rand_last_len >= 8) && (i + 8 <= rkey_len); ++i) {
        found |= !memcmp(rkey_buf + i, reg_rand_last, 8);
    }
    if (calls == 0) {
        pair_log(t->pair, "uct_md_mem_reg made its key without getrandom(2)");
        ok = 0;
    } else if (!found) {
        pair_log(t->pair, "the packed rkey does not carry the bytes getrandom(2) gave");
        ok = 0;
    }
    uct_md_mem_dereg(t->md, memh);
    free(region);
    return ok ? PAIR_PASS : PAIR_FAIL;
}
