/*
 * ep_memory - memory and file descriptors that N UCP endpoints cost, for one UCX_TLS.
 *
 *   ep_memory -n N [-q]
 *
 * A forked child process creates one UCP worker and progresses it; the parent creates its own
 * worker, one warm-up endpoint to the child's worker address (not counted: it pays for the
 * transport's lazily created shared state), then N more endpoints to the same address (UCP
 * creates a new endpoint, with its own transport endpoints, for every ucp_ep_create call),
 * flushes them all (which completes wireup), and prints one CSV line:
 *
 *   peers,rss_delta_bytes,rss_per_ep,fds_delta,fds_per_ep,peer_rss_delta_bytes,peer_rss_per_ep,
 *   peer_fds_delta,pid
 *
 * rss_* from /proc/self/statm (resident pages of the parent: the initiator side of each
 * endpoint), fds_* from /proc/self/fd; peer_* the same in the child over the same interval (the
 * target side: accepted connections, receive rings, peer tables). Kernel socket memory is in
 * neither. The parent then exits WITHOUT destroying its endpoints, so
 * a project transport that writes counters at exit (UCX_EXT_COUNTERS_DIR, file <tl>.<pid>) still
 * reports its per-peer state for the N+1 live endpoints (e.g. a peer_state_bytes counter).
 * The child leaves with _exit() and writes no counter file.
 *
 * The transport is chosen with UCX_TLS (and UCX_NET_DEVICES) in the environment, as for any UCP
 * program; run by `perf/bench udzcopy` once per N. -q: no header line.
 */
#include <ucp/api/ucp.h>

#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DIE(...) do { fprintf(stderr, "ep_memory: " __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static long rss_bytes(void)
{
    long size, resident;
    FILE *f = fopen("/proc/self/statm", "r");

    if (!f || fscanf(f, "%ld %ld", &size, &resident) != 2)
        DIE("cannot read /proc/self/statm");
    fclose(f);
    return resident * sysconf(_SC_PAGESIZE);
}

static long open_fds(void)
{
    long n = 0;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;

    if (!d)
        DIE("cannot open /proc/self/fd");
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1; /* the DIR's own fd */
}

static void setup(ucp_context_h *ctx, ucp_worker_h *worker)
{
    ucp_params_t params = {
        .field_mask = UCP_PARAM_FIELD_FEATURES,
        .features   = UCP_FEATURE_TAG,
    };
    ucp_worker_params_t wparams = {
        .field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        .thread_mode = UCS_THREAD_MODE_SINGLE,
    };
    ucp_config_t *config;
    ucs_status_t st;

    if ((st = ucp_config_read(NULL, NULL, &config)) != UCS_OK)
        DIE("ucp_config_read: %s", ucs_status_string(st));
    st = ucp_init(&params, config, ctx);
    ucp_config_release(config);
    if (st != UCS_OK)
        DIE("ucp_init: %s", ucs_status_string(st));
    if ((st = ucp_worker_create(*ctx, &wparams, worker)) != UCS_OK)
        DIE("ucp_worker_create: %s", ucs_status_string(st));
}

static void write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;

    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            DIE("write: %s", strerror(errno));
        p += n;
        len -= (size_t)n;
    }
}

static void read_all(int fd, void *buf, size_t len)
{
    char *p = buf;

    while (len) {
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            DIE("read: %s", n == 0 ? "peer closed" : strerror(errno));
        p += n;
        len -= (size_t)n;
    }
}

/* The child: a worker that answers wireup. Commands from the parent on cmd_fd: 'B' takes the
 * baseline (RSS, fds) and acks, 'E' answers the deltas since 'B'; end of file: exit. */
static void child(int out_fd, int cmd_fd)
{
    ucp_context_h ctx;
    ucp_worker_h worker;
    ucp_address_t *addr;
    size_t len;
    uint64_t len64;
    int64_t base[2] = { 0, 0 }, res[2];
    struct pollfd pfd = { .fd = cmd_fd, .events = POLLIN };
    unsigned n = 0;
    char c;

    setup(&ctx, &worker);
    if (ucp_worker_get_address(worker, &addr, &len) != UCS_OK)
        DIE("ucp_worker_get_address");
    len64 = len;
    write_all(out_fd, &len64, sizeof(len64));
    write_all(out_fd, addr, len);
    for (;;) {
        ucp_worker_progress(worker);
        if ((++n & 63) != 0 || poll(&pfd, 1, 0) == 0)
            continue;
        if (read(cmd_fd, &c, 1) != 1)
            break; /* parent closed the pipe (or died) */
        if (c == 'B') {
            base[0] = rss_bytes();
            base[1] = open_fds();
            write_all(out_fd, base, sizeof(base));
        } else if (c == 'E') {
            res[0] = rss_bytes() - base[0];
            res[1] = open_fds() - base[1];
            write_all(out_fd, res, sizeof(res));
        }
    }
    _exit(0);
}

static void wait_req(ucp_worker_h worker, void *req, const char *what)
{
    ucs_status_t st;
    double deadline = now() + 120;

    if (req == NULL)
        return;
    if (UCS_PTR_IS_ERR(req))
        DIE("%s: %s", what, ucs_status_string(UCS_PTR_STATUS(req)));
    while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS) {
        ucp_worker_progress(worker);
        if (now() > deadline)
            DIE("%s: no completion after 120 s", what);
    }
    ucp_request_free(req);
    if (st != UCS_OK)
        DIE("%s: %s", what, ucs_status_string(st));
}

int main(int argc, char **argv)
{
    long n = 0, i;
    int quiet = 0, opt, addr_pipe[2], stop_pipe[2];
    struct rlimit rl;
    pid_t pid;
    uint64_t len;
    ucp_address_t *addr;
    ucp_context_h ctx;
    ucp_worker_h worker;
    ucp_ep_h *eps;
    void **reqs;
    ucp_ep_params_t ep_params = { .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS };
    ucp_request_param_t rparam = { .op_attr_mask = 0 };
    long rss0, rss1, fds0, fds1;
    int64_t peer[2];
    double deadline;

    while ((opt = getopt(argc, argv, "n:qh")) != -1) {
        switch (opt) {
        case 'n': n = strtol(optarg, NULL, 0); break;
        case 'q': quiet = 1; break;
        default:
            fprintf(stderr, "usage: ep_memory -n N [-q]   (transport from UCX_TLS)\n");
            return 2;
        }
    }
    if (n < 1)
        DIE("-n needs a positive number of endpoints");

    /* tcp: one socket per endpoint on each side */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (pipe(addr_pipe) || pipe(stop_pipe))
        DIE("pipe: %s", strerror(errno));
    pid = fork();
    if (pid < 0)
        DIE("fork: %s", strerror(errno));
    if (pid == 0) {
        close(addr_pipe[0]);
        close(stop_pipe[1]);
        child(addr_pipe[1], stop_pipe[0]);
    }
    close(addr_pipe[1]);
    close(stop_pipe[0]);

    read_all(addr_pipe[0], &len, sizeof(len));
    if (len == 0 || len > (1u << 20))
        DIE("bad address length %llu", (unsigned long long)len);
    addr = malloc(len);
    eps = calloc((size_t)n + 1, sizeof(*eps));
    reqs = calloc((size_t)n + 1, sizeof(*reqs));
    if (!addr || !eps || !reqs)
        DIE("out of memory");
    read_all(addr_pipe[0], addr, len);

    setup(&ctx, &worker);
    ep_params.address = addr;

    /* warm-up endpoint: lazily created per-worker/per-iface state is not per-peer state */
    if (ucp_ep_create(worker, &ep_params, &eps[n]) != UCS_OK)
        DIE("ucp_ep_create (warm-up)");
    wait_req(worker, ucp_ep_flush_nbx(eps[n], &rparam), "flush (warm-up)");

    write_all(stop_pipe[1], "B", 1);
    read_all(addr_pipe[0], peer, sizeof(peer));
    rss0 = rss_bytes();
    fds0 = open_fds();
    for (i = 0; i < n; i++) {
        ucs_status_t st = ucp_ep_create(worker, &ep_params, &eps[i]);
        if (st != UCS_OK)
            DIE("ucp_ep_create #%ld: %s", i, ucs_status_string(st));
        ucp_worker_progress(worker);
    }
    for (i = 0; i < n; i++) {
        reqs[i] = ucp_ep_flush_nbx(eps[i], &rparam);
        if (UCS_PTR_IS_ERR(reqs[i]))
            DIE("flush #%ld: %s", i, ucs_status_string(UCS_PTR_STATUS(reqs[i])));
    }
    deadline = now() + 300;
    for (i = 0; i < n; i++) {
        ucs_status_t st;

        if (reqs[i] == NULL)
            continue;
        while ((st = ucp_request_check_status(reqs[i])) == UCS_INPROGRESS) {
            ucp_worker_progress(worker);
            if (now() > deadline)
                DIE("flush #%ld: no completion after 300 s", i);
        }
        ucp_request_free(reqs[i]);
        if (st != UCS_OK)
            DIE("flush #%ld: %s", i, ucs_status_string(st));
    }
    rss1 = rss_bytes();
    fds1 = open_fds();
    /* let the peer finish its side of wireup (accepting connections, peer tables) */
    for (i = 0; i < 1000; i++)
        ucp_worker_progress(worker);
    write_all(stop_pipe[1], "E", 1);
    read_all(addr_pipe[0], peer, sizeof(peer));

    if (!quiet)
        printf("peers,rss_delta_bytes,rss_per_ep,fds_delta,fds_per_ep,"
               "peer_rss_delta_bytes,peer_rss_per_ep,peer_fds_delta,pid\n");
    printf("%ld,%ld,%.1f,%ld,%.3f,%lld,%.1f,%lld,%d\n", n, rss1 - rss0,
           (double)(rss1 - rss0) / n, fds1 - fds0, (double)(fds1 - fds0) / n,
           (long long)peer[0], (double)peer[0] / n, (long long)peer[1], (int)getpid());
    fflush(stdout);

    /* stop the child; keep our endpoints alive so that exit-time counters still see them */
    close(stop_pipe[1]);
    waitpid(pid, NULL, 0);
    return 0;
}
