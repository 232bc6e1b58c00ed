/*
 * Wakeup through UCP: two processes whose workers sleep between bursts of messages instead of
 * polling, as a server that waits for requests (UCX-Py, blocking-progress MPI modes) does.
 *
 *   ucp_wakeup [--mode wait|efd] [--bursts N] [--gap-ms G]
 *
 * The parent (server) and a forked child (client) each open a worker with UCP_FEATURE_WAKEUP
 * and connect to the other's address (swapped over a socketpair). The client sends N bursts,
 * sleeping G ms before each; a burst is tagged messages of 8 B, 4 KiB, 64 KiB, 1 MiB and
 * 4 MiB (eager, pipelined, rendezvous) whose bytes name their burst and place. The server
 * receives each burst, checks every byte and answers with an ack the client waits for.
 * Neither side polls while it waits: ucp_worker_progress until idle, ucp_worker_arm, then
 * ucp_worker_wait (--mode wait) or poll(2) on ucp_worker_get_efd (--mode efd). Fails when:
 *  - a byte differs;
 *  - a wakeup is lost (no progress for 20 s: the efd's poll times out, or the watchdog fires in
 *    ucp_worker_wait);
 *  - the server did not sleep: its CPU time over the run must stay under half its wall time
 *    (--max-cpu; a polling server takes all of it).
 * Transports come from UCX_TLS; tests/ucp/run checks the transport's counters (sleeps, and the
 * traffic it carried). Prints PASS/FAIL lines and "N passed, M failed".
 *
 *   ucp_wakeup --compute SEC
 *
 * Progress without the application: the server posts a burst to the client and receives one
 * from it, then computes for SEC seconds without calling UCP, while the client progresses.
 * The client sends its burst once the server computes, so it waits on a process that does
 * not progress. Both eps handle peer failures. Passes when no ep is failed and every byte
 * arrives (after the compute). Run with a PEER_TIMEOUT below SEC: without the transport's
 * async progress (ud_zcopy's timer: acks, retransmissions) the client fails its ep
 * ("Endpoint timeout"), as it does with UCX_UD_ZCOPY_ASYNC_TICK=0.
 */
#include "ucp_node.h"

#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TAG_DATA   0x10000ull
#define TAG_ACK    0x20000ull
#define NSIZES     5
#define STALL_SEC  20
#define WAKEUP_FEATURES (UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP)

static const size_t sizes[NSIZES] = {8, 4096, 65536, 1u << 20, 4u << 20};
static double max_cpu = 0.5;   /* --max-cpu: the server's CPU time over wall time */

static double cpu_sec(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

static uint8_t pattern(unsigned burst, unsigned i, size_t off)
{
    return (uint8_t)(burst * 31 + i * 7 + off * 13 + (off >> 9));
}

static void watchdog(int sig)
{
    static const char msg[] = "FAIL  wakeup               no progress for 20 s in "
                              "ucp_worker_wait: a wakeup was lost\n";

    (void)sig;
    (void)!write(1, msg, sizeof(msg) - 1);
    _exit(3);
}

/* Sleeps until the worker has an event (after ucp_worker_arm said OK). -1: none came in
 * STALL_SEC, a wakeup was lost. */
static int sleep_once(node_t *n)
{
    struct pollfd pfd = {n->efd, POLLIN, 0};
    ucs_status_t st;

    ++n->sleeps;
    if (n->use_efd) {
        if (poll(&pfd, 1, STALL_SEC * 1000) == 0) {
            fprintf(stderr, "poll on the worker's efd: no event for %d s\n", STALL_SEC);
            return -1;
        }
        return 0;
    }
    alarm(STALL_SEC);
    st = ucp_worker_wait(n->worker);
    alarm(0);
    if (st != UCS_OK) {
        fprintf(stderr, "ucp_worker_wait: %s\n", ucs_status_string(st));
        return -1;
    }
    return 0;
}

static int all_done(const ucs_status_t *sts, unsigned cnt)
{
    unsigned i;

    for (i = 0; i < cnt; ++i) {
        if (sts[i] == UCS_INPROGRESS) {
            return 0;
        }
    }
    return 1;
}

/* Waits for requests whose status words start at UCS_INPROGRESS: progress until idle, then
 * arm and sleep, as a program that does not poll does. */
static int wait_all(node_t *n, void **reqs, ucs_status_t *sts, unsigned cnt)
{
    double deadline = now_sec() + 3 * STALL_SEC;
    ucs_status_t st;
    unsigned i;

    while (!all_done(sts, cnt)) {
        if (now_sec() > deadline) {
            fprintf(stderr, "requests not done after %d s\n", 3 * STALL_SEC);
            return -1;
        }
        if (ucp_worker_progress(n->worker) != 0) {
            continue;
        }
        st = ucp_worker_arm(n->worker);
        if (st == UCS_OK) {
            if (sleep_once(n) != 0) {
                return -1;
            }
        } else if (st != UCS_ERR_BUSY) {
            fprintf(stderr, "ucp_worker_arm: %s\n", ucs_status_string(st));
            return -1;
        }
    }
    for (i = 0; i < cnt; ++i) {
        if (reqs[i] != NULL) {
            ucp_request_free(reqs[i]);
        }
        if (sts[i] != UCS_OK) {
            fprintf(stderr, "request %u: %s\n", i, ucs_status_string(sts[i]));
            return -1;
        }
    }
    return 0;
}

static int run_client(int sock, int use_efd, unsigned bursts, unsigned gap_ms)
{
    uint8_t *bufs[NSIZES], ack[8];
    void *reqs[NSIZES + 1];
    ucs_status_t sts[NSIZES + 1];
    unsigned b, i;
    node_t n;
    size_t o;
    int ok = 1;

    if ((node_open(&n, WAKEUP_FEATURES, UCS_THREAD_MODE_SINGLE, use_efd) != 0) ||
        (node_connect(&n, sock, 0) != 0)) {
        return 2;
    }
    for (i = 0; i < NSIZES; ++i) {
        bufs[i] = malloc(sizes[i]);
    }
    for (b = 0; ok && (b < bursts); ++b) {
        usleep(gap_ms * 1000);     /* the server sleeps meanwhile */
        for (i = 0; i < NSIZES; ++i) {
            for (o = 0; o < sizes[i]; ++o) {
                bufs[i][o] = pattern(b, i, o);
            }
            reqs[i] = send_tag(&n, bufs[i], sizes[i], TAG_DATA | (b << 4) | i, &sts[i]);
        }
        reqs[NSIZES] = recv_tag(&n, ack, sizeof(ack), TAG_ACK | b, &sts[NSIZES]);
        ok = (wait_all(&n, reqs, sts, NSIZES + 1) == 0);
    }
    for (i = 0; i < NSIZES; ++i) {
        free(bufs[i]);
    }
    printf("client: %u bursts, %lu sleeps\n", b, n.sleeps);
    node_close(&n);
    return ok ? 0 : 1;
}

static void run_server(int sock, int use_efd, unsigned bursts, const char *mode)
{
    uint8_t *bufs[NSIZES], ack[8] = {0};
    void *reqs[NSIZES + 1];
    ucs_status_t sts[NSIZES + 1];
    double wall, cpu;
    unsigned b, i, bad = 0;
    node_t n;
    size_t o;
    int ok = 1;

    if ((node_open(&n, WAKEUP_FEATURES, UCS_THREAD_MODE_SINGLE, use_efd) != 0) ||
        (node_connect(&n, sock, 0) != 0)) {
        result(0, mode, "cannot set up the server");
        return;
    }
    for (i = 0; i < NSIZES; ++i) {
        bufs[i] = malloc(sizes[i]);
    }
    wall = now_sec();
    cpu  = cpu_sec();
    for (b = 0; ok && (b < bursts); ++b) {
        for (i = 0; i < NSIZES; ++i) {
            memset(bufs[i], 0xee, sizes[i]);
            reqs[i] = recv_tag(&n, bufs[i], sizes[i], TAG_DATA | (b << 4) | i, &sts[i]);
        }
        ok = (wait_all(&n, reqs, sts, NSIZES) == 0);
        for (i = 0; ok && (i < NSIZES); ++i) {
            for (o = 0; o < sizes[i]; ++o) {
                bad += (bufs[i][o] != pattern(b, i, o));
            }
        }
        reqs[0] = send_tag(&n, ack, sizeof(ack), TAG_ACK | b, &sts[0]);
        ok = ok && (wait_all(&n, reqs, sts, 1) == 0);
    }
    wall = now_sec() - wall;
    cpu  = cpu_sec() - cpu;
    result(ok && (b == bursts), "received", "%u bursts of %d messages (8 B to 4 MiB) received",
           b, NSIZES);
    result(ok && (bad == 0), "data", "%u bytes differ", bad);
    result(n.sleeps >= bursts, "slept", "%lu sleeps in %s for %u bursts", n.sleeps,
           use_efd ? "poll(efd)" : "ucp_worker_wait", bursts);
    result(cpu < max_cpu * wall, "idle_cpu", "server CPU %.2f s over %.2f s (a poller uses all)",
           cpu, wall);
    for (i = 0; i < NSIZES; ++i) {
        free(bufs[i]);
    }
    node_close(&n);
}

/* ---- --compute: progress while the server computes ---- */

static uint8_t *alloc_pattern(unsigned side, unsigned i, int fill)
{
    uint8_t *b = malloc(sizes[i]);
    size_t o;

    for (o = 0; o < sizes[i]; ++o) {
        b[o] = fill ? pattern(side, i, o) : 0xee;
    }
    return b;
}

static unsigned count_bad(const uint8_t *b, unsigned side, unsigned i)
{
    unsigned bad = 0;
    size_t o;

    for (o = 0; o < sizes[i]; ++o) {
        bad += (b[o] != pattern(side, i, o));
    }
    return bad;
}

/* Posts side's burst to the peer and the receives of the peer's (2 * NSIZES requests: sends
 * first). */
static void post_both(node_t *n, unsigned side, uint8_t **tx, uint8_t **rx, void **reqs,
                      ucs_status_t *sts)
{
    unsigned k, i;

    /* largest first: its rendezvous request goes out before eager fragments fill the window */
    for (k = 0; k < NSIZES; ++k) {
        i       = NSIZES - 1 - k;
        tx[i]   = alloc_pattern(side, i, 1);
        rx[i]   = alloc_pattern(!side, i, 0);
        reqs[i] = send_tag(n, tx[i], sizes[i], TAG_DATA | (side << 4) | i, &sts[i]);
        reqs[NSIZES + i] = recv_tag(n, rx[i], sizes[i], TAG_DATA | (!side << 4) | i,
                                    &sts[NSIZES + i]);
    }
}

/* One message each way, so that the eps are wired up before the burst. */
static int handshake(node_t *n, unsigned side)
{
    uint8_t out = (uint8_t)side, in = 0xff;
    void *reqs[2];
    ucs_status_t sts[2];

    reqs[0] = send_tag(n, &out, 1, TAG_ACK | side, &sts[0]);
    reqs[1] = recv_tag(n, &in, 1, TAG_ACK | !side, &sts[1]);
    return ((wait_all(n, reqs, sts, 2) == 0) && (in == !side)) ? 0 : -1;
}

static unsigned check_free(unsigned side, uint8_t **tx, uint8_t **rx)
{
    unsigned i, bad = 0;

    for (i = 0; i < NSIZES; ++i) {
        bad += count_bad(rx[i], !side, i);
        free(tx[i]);
        free(rx[i]);
    }
    return bad;
}

static int run_compute_client(int sock)
{
    uint8_t *tx[NSIZES], *rx[NSIZES], msg = 0;
    void *reqs[2 * NSIZES];
    ucs_status_t sts[2 * NSIZES];
    int computing = 0, ok;
    unsigned bad, i, done_tx = 0, done_rx = 0;
    node_t n;

    if ((node_open(&n, WAKEUP_FEATURES, UCS_THREAD_MODE_SINGLE, 0) != 0) ||
        (node_connect(&n, sock, 1) != 0) ||
        (handshake(&n, 1) != 0)) {
        return 2;
    }
    /* the server computes from now on: our burst goes to a process that does not progress */
    if ((read(sock, &msg, 1) != 1) || (msg != 'c')) {
        return 2;
    }
    computing = 1;
    post_both(&n, 1, tx, rx, reqs, sts);
    /* progress (polling) until the server says its compute is over; note what completed
     * while it computed */
    while (msg != 'd') {
        ucp_worker_progress(n.worker);
        if (recv(sock, &msg, 1, MSG_DONTWAIT) == 1) {
            computing = (msg == 'c');
        }
        if (computing) {
            for (i = 0; i < NSIZES; ++i) {
                done_tx |= (sts[i] == UCS_OK) << i;
                done_rx |= (sts[NSIZES + i] == UCS_OK) << i;
            }
        }
    }
    printf("client: during the compute %d of %d sends and %d of %d receives completed\n",
           __builtin_popcount(done_tx), NSIZES, __builtin_popcount(done_rx), NSIZES);

    ok  = (wait_all(&n, reqs, sts, 2 * NSIZES) == 0);
    bad = check_free(1, tx, rx);
    /* the verdict goes to the server, which prints it */
    msg = (uint8_t)((ok && !bad) | ((n.ep_errors == 0) << 3));
    (void)!write(sock, &msg, 1);
    (void)!read(sock, &msg, 1);    /* both sides done before either closes */
    node_close(&n);
    return 0;
}

static void run_compute_server(int sock, double sec)
{
    uint8_t *tx[NSIZES], *rx[NSIZES], msg;
    void *reqs[2 * NSIZES];
    ucs_status_t sts[2 * NSIZES];
    volatile double x = 1.0;
    double start;
    unsigned bad;
    node_t n;
    int ok;

    if ((node_open(&n, WAKEUP_FEATURES, UCS_THREAD_MODE_SINGLE, 0) != 0) ||
        (node_connect(&n, sock, 1) != 0) ||
        (handshake(&n, 0) != 0)) {
        result(0, "compute", "cannot set up the server");
        return;
    }
    post_both(&n, 0, tx, rx, reqs, sts);   /* what the sends pushed out is in flight */
    msg = 'c';
    (void)!write(sock, &msg, 1);
    start = now_sec();
    while (now_sec() - start < sec) {     /* no UCP call */
        x = x * 1.0000001 + 1e-9;
    }
    msg = 'd';
    (void)!write(sock, &msg, 1);
    ok  = (wait_all(&n, reqs, sts, 2 * NSIZES) == 0);
    bad = check_free(0, tx, rx);
    if (read(sock, &msg, 1) != 1) {
        msg = 0;
    }
    result(ok && !bad && (n.ep_errors == 0), "compute_server",
           "computed %.0f s without progress; its sends and receives completed after, "
           "%u bytes differ, %d ep errors", sec, bad, n.ep_errors);
    result((msg & 1) && (msg & 8), "compute_client", "every message arrived and the client "
           "failed no ep: the computing server's transport kept acknowledging");
    msg = 'x';
    (void)!write(sock, &msg, 1);
    node_close(&n);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"mode", required_argument, NULL, 'm'},
        {"bursts", required_argument, NULL, 'b'},
        {"gap-ms", required_argument, NULL, 'g'},
        {"compute", required_argument, NULL, 'c'},
        {"max-cpu", required_argument, NULL, 'x'},
        {NULL, 0, NULL, 0}
    };
    double compute = 0;
    const char *mode = "wait";
    unsigned bursts  = 20, gap_ms = 100;
    int sv[2], c, status;
    pid_t pid;

    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'm': mode = optarg; break;
        case 'b': bursts = (unsigned)atoi(optarg); break;
        case 'g': gap_ms = (unsigned)atoi(optarg); break;
        case 'c': compute = atof(optarg); break;
        case 'x': max_cpu = atof(optarg); break;
        default:
            fprintf(stderr, "usage: %s [--mode wait|efd] [--bursts N] [--gap-ms G] "
                    "[--max-cpu F] | --compute SEC\n", argv[0]);
            return 2;
        }
    }
    if (strcmp(mode, "wait") && strcmp(mode, "efd")) {
        fprintf(stderr, "--mode: wait or efd\n");
        return 2;
    }
    signal(SIGALRM, watchdog);
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
        perror("socketpair");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    pid = fork();
    if ((pid == 0) && (compute > 0)) {
        close(sv[0]);
        exit(run_compute_client(sv[1]));
    }
    if (pid == 0) {
        close(sv[0]);
        exit(run_client(sv[1], !strcmp(mode, "efd"), bursts, gap_ms));   /* counters written */
    }
    close(sv[1]);
    if (compute > 0) {
        run_compute_server(sv[0], compute);
    } else {
        run_server(sv[0], !strcmp(mode, "efd"), bursts, !strcmp(mode, "efd") ? "efd" : "wait");
    }
    waitpid(pid, &status, 0);
    result(WIFEXITED(status) && (WEXITSTATUS(status) == 0), "client",
           "exit status %d", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    printf("%d passed, %d failed\n", node_passed, node_failed);
    return node_failed ? 1 : 0;
}
