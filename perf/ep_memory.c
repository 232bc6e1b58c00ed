/*
 * ep_memory - memory and file descriptors that N peers cost a UCP process, for one UCX_TLS.
 *
 *   ep_memory -n N [-s] [-W WORKERS_PER_CHILD] [-P NAME=VALUE]... [-q]
 *
 * Forked child processes create the peers: N UCP workers (at most -W per child, default 512, so
 * no process runs out of file descriptors), each progressed by its child. The parent creates
 * its own worker, one warm-up endpoint to an extra worker (not counted: it pays for the
 * transport's lazily created per-iface state), then one endpoint to each of the N peer
 * workers, flushes them all (which completes wireup), and prints one CSV line:
 *
 *   peers,rss_delta_bytes,rss_per_ep,fds_delta,fds_per_ep,peer_rss_delta_bytes,peer_rss_per_ep,
 *   peer_fds_delta,pid
 *
 * rss_* from /proc/self/statm (resident pages of the parent: the initiator side of each
 * endpoint), fds_* from /proc/self/fd; peer_* the same summed over the children over the same
 * interval (the target side: accepted connections, receive rings, peer tables). Kernel socket
 * memory is in neither.
 *
 * -s: all N endpoints go to the SAME peer worker instead (UCP makes a new endpoint, with its own
 * transport endpoints, for every ucp_ep_create): the cost of an endpoint rather than of a peer;
 * a connectionless transport may share its per-peer state between them.
 *
 * The parent then exits WITHOUT destroying its endpoints, so a project transport that writes
 * counters at exit (UCX_EXT_COUNTERS_DIR, file <tl>.<pid>) still reports its per-peer state for
 * the live endpoints (e.g. a peer_state_bytes counter). The children leave with _exit() and
 * write no counter file.
 *
 * -P NAME=VALUE: environment for the peer processes only (repeatable), e.g.
 * -P UCX_UD_ZCOPY_CHANNELS=1 so that 4096 peer ifaces on one host do not exhaust the ephemeral
 * UDP ports; the measured (parent) process keeps the configuration under test.
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

static void add_worker(ucp_context_h ctx, ucp_worker_h *worker)
{
    ucp_worker_params_t wparams = {
        .field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        .thread_mode = UCS_THREAD_MODE_SINGLE,
    };
    ucs_status_t st;

    if ((st = ucp_worker_create(ctx, &wparams, worker)) != UCS_OK)
        DIE("ucp_worker_create: %s", ucs_status_string(st));
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

/* A child: nw workers that answer wireup. Sends "count, then (length, address) per worker" on
 * out_fd. Commands from the parent on cmd_fd: 'B' takes the baseline (RSS, fds) and acks, 'E'
 * answers the deltas since 'B'; end of file: exit. */
static void child(int out_fd, int cmd_fd, long nw)
{
    ucp_context_h ctx;
    ucp_worker_h *workers = calloc((size_t)nw, sizeof(*workers));
    ucp_address_t *addr;
    size_t len;
    uint64_t len64;
    int64_t base[2] = { 0, 0 }, res[2];
    struct pollfd pfd = { .fd = cmd_fd, .events = POLLIN };
    unsigned long calls = 0;
    long i;
    char c;

    if (!workers)
        DIE("out of memory");
    setup(&ctx, &workers[0]);
    for (i = 1; i < nw; i++)
        add_worker(ctx, &workers[i]);
    for (i = 0; i < nw; i++) {
        if (ucp_worker_get_address(workers[i], &addr, &len) != UCS_OK)
            DIE("ucp_worker_get_address");
        len64 = len;
        write_all(out_fd, &len64, sizeof(len64));
        write_all(out_fd, addr, len);
        ucp_worker_release_address(workers[i], addr);
    }
    for (;;) {
        for (i = 0; i < nw; i++)
            ucp_worker_progress(workers[i]);
        calls += (unsigned long)nw;
        if (calls < 64)
            continue;
        calls = 0;
        if (poll(&pfd, 1, 0) == 0)
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

struct peer_proc {
    pid_t pid;
    int   out_fd; /* child -> parent */
    int   cmd_fd; /* parent -> child */
};

static void *read_address(int fd)
{
    uint64_t len;
    void *addr;

    read_all(fd, &len, sizeof(len));
    if (len == 0 || len > (1u << 20))
        DIE("bad address length %llu", (unsigned long long)len);
    if (!(addr = malloc(len)))
        DIE("out of memory");
    read_all(fd, addr, len);
    return addr;
}

static void command_all(struct peer_proc *pp, int np, char cmd, int64_t sum[2])
{
    int64_t r[2];
    int k;

    sum[0] = sum[1] = 0;
    for (k = 0; k < np; k++)
        write_all(pp[k].cmd_fd, &cmd, 1);
    for (k = 0; k < np; k++) {
        read_all(pp[k].out_fd, r, sizeof(r));
        sum[0] += r[0];
        sum[1] += r[1];
    }
}

int main(int argc, char **argv)
{
    long n = 0, per_child = 512, i, nw_total, start;
    int quiet = 0, same = 0, opt, np, k, npenv = 0;
    char *penv[64];
    struct rlimit rl;
    struct peer_proc *pp;
    void **addrs;
    ucp_context_h ctx;
    ucp_worker_h worker;
    ucp_ep_h *eps;
    void **reqs;
    ucp_ep_params_t ep_params = { .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS };
    ucp_request_param_t rparam = { .op_attr_mask = 0 };
    long rss0, rss1, fds0, fds1;
    int64_t peer[2];
    double deadline;

    while ((opt = getopt(argc, argv, "n:sW:P:qh")) != -1) {
        switch (opt) {
        case 'n': n = strtol(optarg, NULL, 0); break;
        case 's': same = 1; break;
        case 'W': per_child = strtol(optarg, NULL, 0); break;
        case 'P':
            if (!strchr(optarg, '=') || npenv == 64)
                DIE("-P needs NAME=VALUE (at most 64)");
            penv[npenv++] = optarg;
            break;
        case 'q': quiet = 1; break;
        default:
            fprintf(stderr, "usage: ep_memory -n N [-s] [-W WORKERS_PER_CHILD] [-P NAME=VALUE]... [-q]   "
                    "(transport from UCX_TLS)\n");
            return 2;
        }
    }
    if (n < 1 || per_child < 1)
        DIE("-n and -W need positive numbers");

    /* tcp: one socket per endpoint on each side, and a few per worker */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }

    /* peer workers: the warm-up target plus N (or just one with -s) */
    nw_total = same ? 1 : n + 1;
    np = (int)((nw_total + per_child - 1) / per_child);
    pp = calloc((size_t)np, sizeof(*pp));
    addrs = calloc((size_t)nw_total, sizeof(*addrs));
    eps = calloc((size_t)n + 1, sizeof(*eps));
    reqs = calloc((size_t)n + 1, sizeof(*reqs));
    if (!pp || !addrs || !eps || !reqs)
        DIE("out of memory");
    for (k = 0, start = 0; k < np; k++, start += per_child) {
        int out_pipe[2], cmd_pipe[2];
        long nw = nw_total - start < per_child ? nw_total - start : per_child;

        if (pipe(out_pipe) || pipe(cmd_pipe))
            DIE("pipe: %s", strerror(errno));
        pp[k].pid = fork();
        if (pp[k].pid < 0)
            DIE("fork: %s", strerror(errno));
        if (pp[k].pid == 0) {
            int j;

            for (j = 0; j < k; j++) { /* not our siblings' pipes */
                close(pp[j].out_fd);
                close(pp[j].cmd_fd);
            }
            close(out_pipe[0]);
            close(cmd_pipe[1]);
            for (j = 0; j < npenv; j++)
                putenv(penv[j]);
            child(out_pipe[1], cmd_pipe[0], nw);
        }
        close(out_pipe[1]);
        close(cmd_pipe[0]);
        pp[k].out_fd = out_pipe[0];
        pp[k].cmd_fd = cmd_pipe[1];
        for (i = 0; i < nw; i++)
            addrs[start + i] = read_address(pp[k].out_fd);
    }

    setup(&ctx, &worker);

    /* warm-up endpoint: lazily created per-worker/per-iface state is not per-peer state */
    ep_params.address = addrs[nw_total - 1];
    if (ucp_ep_create(worker, &ep_params, &eps[n]) != UCS_OK)
        DIE("ucp_ep_create (warm-up)");
    wait_req(worker, ucp_ep_flush_nbx(eps[n], &rparam), "flush (warm-up)");

    command_all(pp, np, 'B', peer);
    rss0 = rss_bytes();
    fds0 = open_fds();
    for (i = 0; i < n; i++) {
        ucs_status_t st;

        ep_params.address = addrs[same ? 0 : i];
        st = ucp_ep_create(worker, &ep_params, &eps[i]);
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
    /* let the peers finish their side of wireup (accepting connections, peer tables) */
    for (i = 0; i < 1000; i++)
        ucp_worker_progress(worker);
    command_all(pp, np, 'E', peer);

    if (!quiet)
        printf("peers,rss_delta_bytes,rss_per_ep,fds_delta,fds_per_ep,"
               "peer_rss_delta_bytes,peer_rss_per_ep,peer_fds_delta,pid\n");
    printf("%ld,%ld,%.1f,%ld,%.3f,%lld,%.1f,%lld,%d\n", n, rss1 - rss0,
           (double)(rss1 - rss0) / n, fds1 - fds0, (double)(fds1 - fds0) / n,
           (long long)peer[0], (double)peer[0] / n, (long long)peer[1], (int)getpid());
    fflush(stdout);

    /* stop the children; keep our endpoints alive so that exit-time counters still see them */
    for (k = 0; k < np; k++)
        close(pp[k].cmd_fd);
    for (k = 0; k < np; k++)
        waitpid(pp[k].pid, NULL, 0);
    return 0;
}
