/*
 * UCP in multi-thread mode: several threads of each of two processes share one worker
 * (UCS_THREAD_MODE_MULTI) and send, receive, put, get and add at once, every byte checked.
 *
 *   ucp_threads [--threads T] [--iters N]
 *
 * The parent and a forked child each map a window (T slots of 64 KiB and a 64-bit counter),
 * swap worker addresses and packed rkeys over a socketpair, and connect. Each of T threads
 * (default 4), N times (default 200):
 *  - exchanges a tagged message with the same thread of the peer (8 B .. 256 KiB: eager and
 *    rendezvous), data checked;
 *  - puts a block into its slot of the peer's window, flushes the ep, gets it back, checks it;
 *  - adds 1 to the peer's counter (ucp_atomic_op_nbx, 64-bit add).
 * Each thread progresses the worker itself while it waits. At the end each window's counter
 * must be T x N. Transports come from UCX_TLS; tests/ucp/run checks the transport's counters.
 * Prints PASS/FAIL lines and "N passed, M failed".
 */
#include "ucp_node.h"

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_THREADS 16
#define SLOT        (64 * 1024)
#define TMO_SEC     120

static const size_t sizes[] = {8, 1024, 8192, 65536, 262144};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static node_t node;
static int nthreads = 4, iters = 200, side;
static uint8_t *win;               /* nthreads slots, then the counter */
static ucp_mem_h memh;
static ucp_rkey_h rkey;
static uint64_t remote_base;
static long errors;

static uint8_t byte_of(int who, int t, int i, int kind, size_t off)
{
    return (uint8_t)(who * 101 + t * 37 + i * 13 + kind * 7 + off * 31 + (off >> 8));
}

static void fill(uint8_t *b, size_t len, int who, int t, int i, int kind)
{
    size_t o;

    for (o = 0; o < len; ++o) {
        b[o] = byte_of(who, t, i, kind, o);
    }
}

static void check(const uint8_t *b, size_t len, int who, int t, int i, int kind,
                  const char *what)
{
    size_t o;

    for (o = 0; o < len; ++o) {
        if (b[o] != byte_of(who, t, i, kind, o)) {
            if (__atomic_fetch_add(&errors, 1, __ATOMIC_RELAXED) < 10) {
                fprintf(stderr, "side %d thread %d iteration %d: %s differs at %zu of %zu\n",
                        side, t, i, what, o, len);
            }
            return;
        }
    }
}

/* Progresses the worker (from this thread) until every status left UCS_INPROGRESS. */
static int wait_sts(void **reqs, ucs_status_t *sts, int cnt, const char *what)
{
    double deadline = now_sec() + TMO_SEC;
    int i, busy = 1;

    while (busy) {
        busy = 0;
        for (i = 0; i < cnt; ++i) {
            busy |= (sts[i] == UCS_INPROGRESS);
        }
        if (busy) {
            ucp_worker_progress(node.worker);
            if (now_sec() > deadline) {
                fprintf(stderr, "side %d: %s not done after %d s (%d %d)\n", side, what,
                        TMO_SEC, sts[0], (cnt > 1) ? sts[1] : 0);
                return -1;
            }
        }
    }
    for (i = 0; i < cnt; ++i) {
        if (reqs[i] != NULL) {
            ucp_request_free(reqs[i]);
        }
        if (sts[i] != UCS_OK) {
            fprintf(stderr, "side %d request %d: %s\n", side, i, ucs_status_string(sts[i]));
            return -1;
        }
    }
    return 0;
}

static void *nbx(ucs_status_ptr_t p, ucs_status_t *st)
{
    if (UCS_PTR_IS_PTR(p)) {
        return p;
    }
    *st = UCS_PTR_STATUS(p);
    return NULL;
}

static void *worker(void *arg)
{
    int t = (int)(intptr_t)arg, i;
    size_t max = sizes[NSIZES - 1], len, blen;
    uint8_t *sbuf = malloc(max), *rbuf = malloc(max), *pbuf = malloc(SLOT),
            *gbuf = malloc(SLOT);
    uint64_t tag, one = 1, slot;
    void *reqs[2];
    ucs_status_t sts[2];
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send      = req_done
    };
    ucp_request_param_t aparam = param;

    for (i = 0; i < iters; ++i) {
        /* tag: to the same thread of the peer */
        len = sizes[(i + t) % NSIZES];
        tag = ((uint64_t)t << 32) | (uint64_t)i;
        fill(sbuf, len, side, t, i, 0);
        memset(rbuf, 0, len);
        reqs[0] = recv_tag(&node, rbuf, len, tag, &sts[0]);
        reqs[1] = send_tag(&node, sbuf, len, tag, &sts[1]);
        if (wait_sts(reqs, sts, 2, "tag recv/send") != 0) {
            __atomic_fetch_add(&errors, 1, __ATOMIC_RELAXED);
            break;
        }
        check(rbuf, len, !side, t, i, 0, "tagged message");

        /* our slot of the peer's window: put, flush, get, flush */
        blen = 64 + (size_t)((i * 977 + t * 131) % (SLOT - 64));
        slot = remote_base + (uint64_t)t * SLOT;
        fill(pbuf, blen, side, t, i, 1);
        memset(gbuf, 0, blen);
        sts[0] = sts[1] = UCS_INPROGRESS;
        param.user_data = &sts[0];
        reqs[0] = nbx(ucp_put_nbx(node.ep, pbuf, blen, slot, rkey, &param), &sts[0]);
        param.user_data = &sts[1];
        reqs[1] = nbx(ucp_ep_flush_nbx(node.ep, &param), &sts[1]);
        if (wait_sts(reqs, sts, 2, "put/flush") != 0) {
            __atomic_fetch_add(&errors, 1, __ATOMIC_RELAXED);
            break;
        }
        sts[0] = sts[1] = UCS_INPROGRESS;
        param.user_data = &sts[0];
        reqs[0] = nbx(ucp_get_nbx(node.ep, gbuf, blen, slot, rkey, &param), &sts[0]);
        param.user_data = &sts[1];
        reqs[1] = nbx(ucp_ep_flush_nbx(node.ep, &param), &sts[1]);
        if (wait_sts(reqs, sts, 2, "get/flush") != 0) {
            __atomic_fetch_add(&errors, 1, __ATOMIC_RELAXED);
            break;
        }
        check(gbuf, blen, side, t, i, 1, "get after put");

        /* the peer's counter */
        sts[0]                = UCS_INPROGRESS;
        aparam.op_attr_mask  |= UCP_OP_ATTR_FIELD_DATATYPE;
        aparam.datatype       = ucp_dt_make_contig(sizeof(uint64_t));
        aparam.user_data      = &sts[0];
        reqs[0] = nbx(ucp_atomic_op_nbx(node.ep, UCP_ATOMIC_OP_ADD, &one, 1,
                                        remote_base + (uint64_t)nthreads * SLOT, rkey, &aparam),
                      &sts[0]);
        if (wait_sts(reqs, sts, 1, "atomic add") != 0) {
            __atomic_fetch_add(&errors, 1, __ATOMIC_RELAXED);
            break;
        }
    }
    free(sbuf);
    free(rbuf);
    free(pbuf);
    free(gbuf);
    return NULL;
}

/* Flushes the ep, then a byte each way over the socket (progressing meanwhile): the peer's
 * ops on us are done. */
static int barrier(int sock)
{
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send      = req_done
    };
    ucs_status_t st = UCS_INPROGRESS;
    void *req;
    char c = 'b';

    param.user_data = &st;
    req = nbx(ucp_ep_flush_nbx(node.ep, &param), &st);
    if (wait_sts(&req, &st, 1, "barrier flush") != 0) {
        return -1;
    }
    if (write(sock, &c, 1) != 1) {
        return -1;
    }
    /* progress while waiting: the peer's flush may need us */
    while (recv(sock, &c, 1, MSG_DONTWAIT) != 1) {
        if ((errno != EAGAIN) && (errno != EWOULDBLOCK) && (errno != EINTR)) {
            return -1;
        }
        ucp_worker_progress(node.worker);
    }
    return 0;
}

static int run(int sock, int s)
{
    size_t win_len = (size_t)nthreads * SLOT + 64, rkey_len, got;
    ucp_mem_map_params_t mp;
    ucp_worker_attr_t wattr = {.field_mask = UCP_WORKER_ATTR_FIELD_THREAD_MODE};
    pthread_t th[MAX_THREADS];
    void *packed, *peer_rkey, *peer_base;
    uint64_t base, counter, want = (uint64_t)nthreads * iters;
    char detail[160];
    int t;

    side = s;
    if (node_open(&node, UCP_FEATURE_TAG | UCP_FEATURE_RMA | UCP_FEATURE_AMO64,
                  UCS_THREAD_MODE_MULTI, 0) != 0) {
        return -1;
    }
    if ((ucp_worker_query(node.worker, &wattr) != UCS_OK) ||
        (wattr.thread_mode != UCS_THREAD_MODE_MULTI)) {
        result(0, "thread_mode", "the worker is not in UCS_THREAD_MODE_MULTI (%d)",
               (int)wattr.thread_mode);
        return -1;
    }
    if (posix_memalign((void**)&win, 4096, win_len) != 0) {
        return -1;
    }
    memset(win, 0, win_len);
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address    = win;
    mp.length     = win_len;
    if ((ucp_mem_map(node.ctx, &mp, &memh) != UCS_OK) ||
        (ucp_rkey_pack(node.ctx, memh, &packed, &rkey_len) != UCS_OK) ||
        (node_connect(&node, sock, 0) != 0) ||
        (node_swap(sock, packed, rkey_len, &peer_rkey, &got, 1u << 20) != 0)) {
        fprintf(stderr, "side %d: cannot map, pack or connect\n", s);
        return -1;
    }
    base = (uint64_t)(uintptr_t)win;
    if ((node_swap(sock, &base, sizeof(base), &peer_base, &got, sizeof(base)) != 0) ||
        (ucp_ep_rkey_unpack(node.ep, peer_rkey, &rkey) != UCS_OK)) {
        fprintf(stderr, "side %d: cannot swap the window\n", s);
        return -1;
    }
    memcpy(&remote_base, peer_base, sizeof(remote_base));
    ucp_rkey_buffer_release(packed);
    free(peer_rkey);
    free(peer_base);

    for (t = 0; t < nthreads; ++t) {
        pthread_create(&th[t], NULL, worker, (void*)(intptr_t)t);
    }
    for (t = 0; t < nthreads; ++t) {
        pthread_join(th[t], NULL);
    }
    if (barrier(sock) != 0) {
        ++errors;
    }
    counter = __atomic_load_n((uint64_t*)(win + (size_t)nthreads * SLOT), __ATOMIC_ACQUIRE);
    if (s == 0) {
        snprintf(detail, sizeof(detail), "%d threads x %d iterations of tag, put/get and add "
                 "on one UCS_THREAD_MODE_MULTI worker; %ld failed checks", nthreads, iters,
                 errors);
        result(errors == 0, "threads", "%s", detail);
        result(counter == want, "atomics", "counter %lu, want %lu", (unsigned long)counter,
               (unsigned long)want);
    }
    ucp_rkey_destroy(rkey);
    if (barrier(sock) != 0) {   /* both done with the rkeys before the windows go */
        ++errors;
    }
    ucp_mem_unmap(node.ctx, memh);
    node_close(&node);
    free(win);
    return ((errors == 0) && (counter == want)) ? 0 : -1;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"threads", required_argument, NULL, 't'},
        {"iters", required_argument, NULL, 'i'},
        {NULL, 0, NULL, 0}
    };
    int sv[2], c, status;
    pid_t pid;

    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 't': nthreads = atoi(optarg); break;
        case 'i': iters = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: %s [--threads T] [--iters N]\n", argv[0]);
            return 2;
        }
    }
    if ((nthreads < 1) || (nthreads > MAX_THREADS) || (iters < 1)) {
        fprintf(stderr, "--threads 1..%d, --iters >= 1\n", MAX_THREADS);
        return 2;
    }
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
        perror("socketpair");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    pid = fork();
    if (pid == 0) {
        close(sv[0]);
        exit(run(sv[1], 1) == 0 ? 0 : 1);     /* exit: counters written */
    }
    close(sv[1]);
    if ((run(sv[0], 0) != 0) && (node_failed == 0)) {
        result(0, "threads", "the run stopped before its checks (see above)");
    }
    waitpid(pid, &status, 0);
    result(WIFEXITED(status) && (WEXITSTATUS(status) == 0), "peer",
           "the other process's checks: exit status %d", WIFEXITED(status) ?
           WEXITSTATUS(status) : -1);
    printf("%d passed, %d failed\n", node_passed, node_failed);
    return node_failed ? 1 : 0;
}
