/*
 * The victim of the fault tier's reflect attack (tests/fault/attack): a UCP job of two
 * processes with a long-lived registration. The owner registers a region (ucp_mem_map) and keeps
 * it registered for the whole run; the reader reads it with ucp_get_nbx again and again (over
 * ud_zcopy: a ZREQ per get, each naming the same key) and checks every byte. So an observer on
 * the network learns a key that stays good, unlike a rendezvous key, which dies with its
 * transfer.
 *
 *   udz_victim owner  --dir DIR [--seconds S] [--size BYTES]
 *   udz_victim reader --dir DIR [--seconds S] [--size BYTES]
 *
 * The two meet through files in DIR (a shared directory, whatever network namespace each runs
 * in): owner.addr, owner.rkey, reader.addr, done (the reader's last gets are complete) and closed
 * (the owner closed its ep, while the reader still answered). Each
 * connects an ep to the other (as an MPI job does). The reader gets for S seconds, or until a
 * file named stop appears in DIR (the caller's window is over). The reader prints "PASS victim: N gets of
 * BYTES bytes, data checked" or "FAIL victim: ..."; the owner runs until done appears (or S + 60
 * seconds). Transports as UCX_TLS says; the project's are preloaded by the caller.
 *
 *   udz_victim sender   --dir DIR [--seconds S]
 *   udz_victim receiver --dir DIR [--compute C]
 *       a stream into a process that computes: the sender sends 16 KiB tagged messages (eager:
 *       the data itself goes), at most 1,024 in flight (16 MiB), until the receiver's C seconds of compute
 *       without a UCP call are over (at most S seconds); the receiver then takes every message,
 *       in order, data checked, and prints "PASS stream: ... receiver RSS over C s of compute
 *       +X KiB" (files sender.addr, receiver.addr, computed, sent, received, closed).
 */
#include "ucp_req_wait.h"

#include <ucp/api/ucp.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const char *dir;

static void path_of(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", dir, name);
}

/* Writes name atomically (a temporary file renamed): the peer never reads half of it. */
static int put_file(const char *name, const void *a, size_t alen, const void *b, size_t blen)
{
    char p[4096], tmp[4200];
    FILE *f;

    path_of(p, sizeof(p), name);
    snprintf(tmp, sizeof(tmp), "%s.tmp", p);
    f = fopen(tmp, "wb");
    if ((f == NULL) || (fwrite(a, 1, alen, f) != alen) ||
        ((blen > 0) && (fwrite(b, 1, blen, f) != blen)) || (fclose(f) != 0)) {
        perror("udz_victim: write");
        return -1;
    }
    return rename(tmp, p);
}

/* Reads name whole once it exists, progressing the worker meanwhile; NULL after the deadline. */
static void *get_file(ucp_worker_h w, const char *name, size_t *len, double deadline)
{
    char p[4096];
    struct stat st;
    FILE *f;
    void *buf;

    path_of(p, sizeof(p), name);
    while (stat(p, &st) != 0) {
        if (now() > deadline) {
            fprintf(stderr, "udz_victim: no %s\n", p);
            return NULL;
        }
        ucp_worker_progress(w);
        usleep(1000);
    }
    buf = malloc((size_t)st.st_size + 1);
    f   = fopen(p, "rb");
    if ((buf == NULL) || (f == NULL) || (fread(buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size)) {
        fprintf(stderr, "udz_victim: cannot read %s\n", p);
        exit(1);
    }
    fclose(f);
    *len = (size_t)st.st_size;
    return buf;
}

static int exists(const char *name)
{
    char p[4096];
    struct stat st;

    path_of(p, sizeof(p), name);
    return stat(p, &st) == 0;
}

static uint8_t pattern(size_t i)
{
    return (uint8_t)(i * 7 + 3 + (i >> 12));
}

static long rss_kb(void)
{
    char line[256];
    long kb = 0;
    FILE *f = fopen("/proc/self/status", "r");

    while ((f != NULL) && (fgets(line, sizeof(line), f) != NULL)) {
        if (!strncmp(line, "VmRSS:", 6)) {
            kb = atol(line + 6);
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    return kb;
}

/* Message n of the stream: 8 bytes of n, then bytes that depend on n and the offset. */
static void stream_fill(uint8_t *m, size_t len, uint64_t n)
{
    size_t i;

    memcpy(m, &n, sizeof(n));
    for (i = sizeof(n); i < len; ++i) {
        m[i] = (uint8_t)(n * 31 + i);
    }
}

static ucp_ep_h connect_to(ucp_worker_h w, const void *addr);
static void close_ep(ucp_worker_h w, ucp_ep_h ep);

#define STREAM_TAG     0x5157ull
#define STREAM_MSG     16384     /* eager: the data itself goes to a receiver that computes */
#define STREAM_INFLIGHT 1024

/* The streaming sender: tagged messages to the receiver, at most STREAM_INFLIGHT outstanding,
 * until the receiver's compute is over (file computed), then the count (file sent). */
static int run_sender(ucp_worker_h w, const void *my_addr, size_t my_len, double seconds)
{
    void *peer, *req[STREAM_INFLIGHT];
    uint8_t (*buf)[STREAM_MSG] = malloc((size_t)STREAM_INFLIGHT * STREAM_MSG);
    ucp_request_param_t p;
    uint64_t n = 0, k;
    size_t len;
    double t0 = now();
    ucp_ep_h ep;

    memset(req, 0, sizeof(req));
    if ((buf == NULL) || (put_file("sender.addr", my_addr, my_len, NULL, 0) != 0) ||
        ((peer = get_file(w, "receiver.addr", &len, t0 + 60)) == NULL)) {
        return 1;
    }
    ep = connect_to(w, peer);
    memset(&p, 0, sizeof(p));
    while (!exists("computed") && (now() < t0 + seconds)) {
        k = n % STREAM_INFLIGHT;
        if (req[k] != NULL) {   /* the oldest in flight must complete before its slot is reused */
            ucp_worker_progress(w);
            if (ucp_request_check_status(req[k]) == UCS_INPROGRESS) {
                continue;
            }
            ucp_request_free(req[k]);
            req[k] = NULL;
        }
        stream_fill(buf[k], STREAM_MSG, n);
        req[k] = ucp_tag_send_nbx(ep, buf[k], STREAM_MSG, STREAM_TAG, &p);
        if (UCS_PTR_IS_ERR(req[k])) {
            fprintf(stderr, "udz_victim: send: %s\n", ucs_status_string(UCS_PTR_STATUS(req[k])));
            return 1;
        }
        ++n;
    }
    for (k = 0; k < STREAM_INFLIGHT; ++k) {
        if (wait_req(w, req[k]) != UCS_OK) {
            fprintf(stderr, "udz_victim: a send failed\n");
            return 1;
        }
    }
    (void)put_file("sent", &n, sizeof(n), NULL, 0);
    (void)get_file(w, "received", &len, now() + 120);
    close_ep(w, ep);
    (void)put_file("closed", "", 0, NULL, 0);
    printf("udz_victim sender: %llu messages of %u bytes\n", (unsigned long long)n, STREAM_MSG);
    free(peer);
    free(buf);
    return 0;
}

/* The computing receiver: connects, lets the stream start, computes for `compute` seconds
 * without a UCP call, then receives and checks every message. Prints its resident memory's
 * growth over the compute. */
static int run_receiver(ucp_worker_h w, const void *my_addr, size_t my_len, double compute)
{
    void *peer, *cnt;
    uint8_t *m = malloc(STREAM_MSG), *want = malloc(STREAM_MSG);
    ucp_request_param_t p;
    uint64_t n, i, got = 0, bad = 0;
    long r0, r1, peak;
    size_t len;
    double t0 = now(), end;
    volatile double x = 1;
    ucp_ep_h ep;

    if ((m == NULL) || (want == NULL) ||
        (put_file("receiver.addr", my_addr, my_len, NULL, 0) != 0) ||
        ((peer = get_file(w, "sender.addr", &len, t0 + 60)) == NULL)) {
        return 1;
    }
    ep = connect_to(w, peer);
    /* the first message: the stream runs */
    memset(&p, 0, sizeof(p));
    if (wait_req(w, ucp_tag_recv_nbx(w, m, STREAM_MSG, STREAM_TAG, ~0ull, &p)) != UCS_OK) {
        printf("FAIL stream: no first message\n");
        return 1;
    }
    stream_fill(want, STREAM_MSG, got);
    bad += !!memcmp(m, want, STREAM_MSG);
    ++got;
    r0 = r1 = peak = rss_kb();
    for (end = now() + compute; now() < end;) {     /* no UCP call: the transport is alone */
        for (i = 0; i < 100000; ++i) {
            x = x * 1.0000001 + 1e-9;
        }
        r1 = rss_kb();
        peak = (r1 > peak) ? r1 : peak;
    }
    (void)put_file("computed", "", 0, NULL, 0);
    cnt = get_file(w, "sent", &len, now() + 120);
    if ((cnt == NULL) || (len != sizeof(n))) {
        printf("FAIL stream: the sender did not finish\n");
        return 1;
    }
    memcpy(&n, cnt, sizeof(n));
    for (; got < n; ++got) {
        if (wait_req(w, ucp_tag_recv_nbx(w, m, STREAM_MSG, STREAM_TAG, ~0ull, &p)) != UCS_OK) {
            break;
        }
        stream_fill(want, STREAM_MSG, got);
        bad += !!memcmp(m, want, STREAM_MSG);
    }
    (void)put_file("received", "", 0, NULL, 0);
    for (end = now() + 30; !exists("closed") && (now() < end);) {
        ucp_worker_progress(w);
    }
    close_ep(w, ep);
    if ((got != n) || bad) {
        printf("FAIL stream: %llu of %llu messages, %llu with wrong data\n",
               (unsigned long long)got, (unsigned long long)n, (unsigned long long)bad);
        return 1;
    }
    printf("PASS stream: %llu messages of %u bytes in order, data checked; receiver RSS over "
           "%.0f s of compute +%ld KiB (peak +%ld KiB)\n", (unsigned long long)n, STREAM_MSG,
           compute, r1 - r0, peak - r0);
    free(peer);
    free(cnt);
    free(m);
    free(want);
    return 0;
}

static ucp_ep_h connect_to(ucp_worker_h w, const void *addr)
{
    ucp_ep_params_t ep_params;
    ucp_ep_h ep;
    ucs_status_t st;

    memset(&ep_params, 0, sizeof(ep_params));
    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep_params.address    = addr;
    st = ucp_ep_create(w, &ep_params, &ep);
    if (st != UCS_OK) {
        fprintf(stderr, "udz_victim: ucp_ep_create: %s\n", ucs_status_string(st));
        exit(1);
    }
    return ep;
}

static void close_ep(ucp_worker_h w, ucp_ep_h ep)
{
    ucp_request_param_t p;

    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags        = 0;     /* flush */
    (void)wait_req(w, ucp_ep_close_nbx(ep, &p));
}

int main(int argc, char **argv)
{
    ucp_params_t params;
    ucp_worker_params_t wparams;
    ucp_context_h ctx;
    ucp_worker_h w;
    ucp_address_t *my_addr;
    size_t my_len, size = 1 << 20, i, len;
    double seconds = 20, t0;
    int owner, stream, a;
    double compute = 10;
    ucs_status_t st;

    if (argc < 2) {
        goto usage;
    }
    owner  = !strcmp(argv[1], "owner");
    stream = !strcmp(argv[1], "sender") ? 1 : !strcmp(argv[1], "receiver") ? 2 : 0;
    if (!owner && !stream && strcmp(argv[1], "reader")) {
        goto usage;
    }
    for (a = 2; a + 1 < argc; a += 2) {
        if (!strcmp(argv[a], "--dir")) {
            dir = argv[a + 1];
        } else if (!strcmp(argv[a], "--seconds")) {
            seconds = atof(argv[a + 1]);
        } else if (!strcmp(argv[a], "--compute")) {
            compute = atof(argv[a + 1]);
        } else if (!strcmp(argv[a], "--size")) {
            size = (size_t)atol(argv[a + 1]);
        } else {
            goto usage;
        }
    }
    if ((dir == NULL) || (seconds <= 0) || (seconds > 600) || (compute <= 0) ||
        (compute > 600) || (size == 0) ||
        (size > (256u << 20))) {
        goto usage;
    }
    t0 = now();

    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features   = UCP_FEATURE_RMA | UCP_FEATURE_TAG;
    st = ucp_init(&params, NULL, &ctx);
    if (st != UCS_OK) {
        fprintf(stderr, "udz_victim: ucp_init: %s\n", ucs_status_string(st));
        return 1;
    }
    memset(&wparams, 0, sizeof(wparams));
    wparams.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    if ((ucp_worker_create(ctx, &wparams, &w) != UCS_OK) ||
        (ucp_worker_get_address(w, &my_addr, &my_len) != UCS_OK)) {
        fprintf(stderr, "udz_victim: no worker\n");
        return 1;
    }

    if (stream) {
        int rc = (stream == 1) ? run_sender(w, my_addr, my_len, seconds) :
                                 run_receiver(w, my_addr, my_len, compute);
        ucp_worker_release_address(w, my_addr);
        ucp_worker_destroy(w);
        ucp_cleanup(ctx);
        return rc;
    }
    if (owner) {
        ucp_mem_map_params_t mp;
        ucp_mem_h memh;
        void *rkey_buf, *peer;
        size_t rkey_len;
        uint8_t *region = malloc(size);
        uint64_t hdr[2];

        for (i = 0; i < size; ++i) {
            region[i] = pattern(i);
        }
        memset(&mp, 0, sizeof(mp));
        mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
        mp.address    = region;
        mp.length     = size;
        if ((ucp_mem_map(ctx, &mp, &memh) != UCS_OK) ||
            (ucp_rkey_pack(ctx, memh, &rkey_buf, &rkey_len) != UCS_OK)) {
            fprintf(stderr, "udz_victim: cannot register the region\n");
            return 1;
        }
        hdr[0] = (uint64_t)(uintptr_t)region;
        hdr[1] = size;
        if ((put_file("owner.rkey", hdr, sizeof(hdr), rkey_buf, rkey_len) != 0) ||
            (put_file("owner.addr", my_addr, my_len, NULL, 0) != 0)) {
            return 1;
        }
        peer = get_file(w, "reader.addr", &len, t0 + 60);
        if (peer == NULL) {
            return 1;
        }
        ucp_ep_h ep = connect_to(w, peer);
        /* serve until the reader is done (the region stays registered all along) */
        while (!exists("done") && (now() < t0 + seconds + 60)) {
            for (i = 0; i < 1000; ++i) {
                ucp_worker_progress(w);
            }
        }
        close_ep(w, ep);    /* while the reader still listens: its acks end our flush */
        (void)put_file("closed", "", 0, NULL, 0);
        ucp_rkey_buffer_release(rkey_buf);
        ucp_mem_unmap(ctx, memh);
        printf("udz_victim owner: served for %.1f s\n", now() - t0);
        free(peer);
        free(region);
    } else {
        void *peer, *rk;
        uint64_t hdr[2];
        ucp_rkey_h rkey;
        ucp_request_param_t p;
        uint8_t *dst = malloc(size);
        long gets = 0, bad = 0, failed = 0;
        double end;

        if (put_file("reader.addr", my_addr, my_len, NULL, 0) != 0) {
            return 1;
        }
        peer = get_file(w, "owner.addr", &len, t0 + 60);
        rk   = (peer != NULL) ? get_file(w, "owner.rkey", &len, t0 + 60) : NULL;
        if ((rk == NULL) || (len < sizeof(hdr))) {
            printf("FAIL victim: the owner did not start\n");
            return 1;
        }
        memcpy(hdr, rk, sizeof(hdr));
        ucp_ep_h ep = connect_to(w, peer);
        if (ucp_ep_rkey_unpack(ep, (uint8_t*)rk + sizeof(hdr), &rkey) != UCS_OK) {
            printf("FAIL victim: cannot unpack the owner's key\n");
            return 1;
        }
        if (hdr[1] < size) {
            size = hdr[1];
        }
        memset(&p, 0, sizeof(p));
        for (end = now() + seconds; (now() < end) && !exists("stop");) {
            memset(dst, 0, size);
            st = wait_req(w, ucp_get_nbx(ep, dst, size, hdr[0], rkey, &p));
            if (st == UCS_OK) {
                st = wait_req(w, ucp_ep_flush_nbx(ep, &p));
            }
            if (st != UCS_OK) {
                if (failed++ == 0) {
                    fprintf(stderr, "udz_victim: get: %s\n", ucs_status_string(st));
                }
                break;
            }
            for (i = 0; i < size; ++i) {
                if (dst[i] != pattern(i)) {
                    if (bad++ == 0) {
                        fprintf(stderr, "udz_victim: byte %zu of get %ld is %u, not %u\n", i,
                                gets, dst[i], pattern(i));
                    }
                    break;
                }
            }
            ++gets;
        }
        (void)put_file("done", "", 0, NULL, 0);
        /* the owner closes its ep first (a flush needs our acks), then we close ours */
        for (end = now() + 30; !exists("closed") && (now() < end);) {
            for (i = 0; i < 1000; ++i) {
                ucp_worker_progress(w);
            }
        }
        ucp_rkey_destroy(rkey);
        close_ep(w, ep);
        if ((gets == 0) || bad || failed) {
            printf("FAIL victim: %ld gets of %zu bytes, %ld with wrong data, %ld failed\n",
                   gets, size, bad, failed);
            return 1;
        }
        printf("PASS victim: %ld gets of %zu bytes, data checked\n", gets, size);
        free(peer);
        free(rk);
        free(dst);
    }
    ucp_worker_release_address(w, my_addr);
    ucp_worker_destroy(w);
    ucp_cleanup(ctx);
    return 0;

usage:
    fprintf(stderr, "usage: udz_victim owner|reader --dir DIR [--seconds S] [--size BYTES]\n"
                    "       udz_victim sender|receiver --dir DIR [--seconds S] [--compute C]\n");
    return 2;
}
