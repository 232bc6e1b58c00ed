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
 */
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

/* Waits for a request of a nbx call; its status. */
static ucs_status_t wait_req(ucp_worker_h w, void *req)
{
    ucs_status_t st;

    if (req == NULL) {
        return UCS_OK;
    }
    if (UCS_PTR_IS_ERR(req)) {
        return UCS_PTR_STATUS(req);
    }
    do {
        ucp_worker_progress(w);
        st = ucp_request_check_status(req);
    } while (st == UCS_INPROGRESS);
    ucp_request_free(req);
    return st;
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
    int owner, a;
    ucs_status_t st;

    if (argc < 2) {
        goto usage;
    }
    owner = !strcmp(argv[1], "owner");
    if (!owner && strcmp(argv[1], "reader")) {
        goto usage;
    }
    for (a = 2; a + 1 < argc; a += 2) {
        if (!strcmp(argv[a], "--dir")) {
            dir = argv[a + 1];
        } else if (!strcmp(argv[a], "--seconds")) {
            seconds = atof(argv[a + 1]);
        } else if (!strcmp(argv[a], "--size")) {
            size = (size_t)atol(argv[a + 1]);
        } else {
            goto usage;
        }
    }
    if ((dir == NULL) || (seconds <= 0) || (seconds > 600) || (size == 0) ||
        (size > (256u << 20))) {
        goto usage;
    }
    t0 = now();

    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features   = UCP_FEATURE_RMA;
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
    fprintf(stderr, "usage: udz_victim owner|reader --dir DIR [--seconds S] [--size BYTES]\n");
    return 2;
}
