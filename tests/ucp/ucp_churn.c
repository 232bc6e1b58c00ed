/*
 * Connection churn through UCP, as a client-server program or a job with dynamic processes
 * makes it: a server worker, and clients that connect, send, disconnect, again and again.
 *
 *   ucp_churn [--cycles N] [--clients K] [--client-cycles M]
 *
 * The server (this process) writes its worker address to a file and starts clients as new
 * processes (this program with --client), one after another:
 *   1. one client makes N cycles of: ep to the server, a tagged message, ep closed (flush);
 *   2. then K clients in turn, each M cycles, and each message asks for a reply: the server
 *      opens an ep to the client's worker, answers, and closes it. Each client exits.
 * Every message and reply carries a pattern the other side checks. Transports come from
 * UCX_TLS. Open file descriptors and resident memory of the server (and of the first client)
 * must stay flat: after the first clients, nothing may grow with the number of clients or
 * cycles (rdmach takes back the rings of the clients that left; UCX_RDMACH_MAX_PEERS below K
 * makes that necessary). Prints PASS/FAIL lines and "N passed, M failed".
 */
#include "ucp_node.h"
#include "ucp_req_wait.h"
#include "pair.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TAG_MSG    0x100000000ull
#define TAG_REPLY  0x200000000ull
#define MSG_DATA   256

extern char **environ;

typedef struct {
    uint32_t client, seq, want_reply, addr_len;
    uint8_t  data[MSG_DATA];
    uint8_t  addr[2048];          /* the client's worker address, for the reply */
} churn_msg_t;

static void fill(uint8_t *d, uint32_t client, uint32_t seq)
{
    for (int i = 0; i < MSG_DATA; ++i) {
        d[i] = (uint8_t)(client * 131 + seq * 7 + i);
    }
}

static int check(const uint8_t *d, uint32_t client, uint32_t seq)
{
    uint8_t want[MSG_DATA];

    fill(want, client, seq);
    return memcmp(d, want, MSG_DATA) == 0;
}

typedef struct {
    ucp_context_h ctx;
    ucp_worker_h  worker;
    ucp_address_t *addr;
    size_t        addr_len;
} churn_node_t;

static int churn_node_open(churn_node_t *n)
{
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG};
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    ucp_config_t *config;

    if ((ucp_config_read(NULL, NULL, &config) != UCS_OK)) {
        return -1;
    }
    if (ucp_init(&params, config, &n->ctx) != UCS_OK) {
        ucp_config_release(config);
        return -1;
    }
    ucp_config_release(config);
    if (ucp_worker_create(n->ctx, &wp, &n->worker) != UCS_OK) {
        return -1;
    }
    return (ucp_worker_get_address(n->worker, &n->addr, &n->addr_len) == UCS_OK) ? 0 : -1;
}

static void churn_node_close(churn_node_t *n)
{
    ucp_worker_release_address(n->worker, n->addr);
    ucp_worker_destroy(n->worker);
    ucp_cleanup(n->ctx);
}

static ucs_status_t ep_open(ucp_worker_h w, const void *addr, ucp_ep_h *ep)
{
    ucp_ep_params_t ep_params = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
                                 .address    = addr};

    return ucp_ep_create(w, &ep_params, ep);
}

static ucs_status_t ep_close(ucp_worker_h w, ucp_ep_h ep)
{
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = 0};

    return wait_req(w, ucp_ep_close_nbx(ep, &p));   /* flush, then close */
}

static ucs_status_t send_msg(ucp_worker_h w, ucp_ep_h ep, uint64_t tag, const void *buf,
                             size_t len)
{
    ucp_request_param_t p = {.op_attr_mask = 0};

    return wait_req(w, ucp_tag_send_nbx(ep, buf, len, tag, &p));
}

static ucs_status_t recv_msg(ucp_worker_h w, uint64_t tag, void *buf, size_t len, double tmo)
{
    ucp_request_param_t p = {.op_attr_mask = 0};
    ucs_status_ptr_t req = ucp_tag_recv_nbx(w, buf, len, tag, ~0ull, &p);
    struct timespec t0, t;
    ucs_status_t st;

    if (req == NULL) {
        return UCS_OK;      /* matched an unexpected message at once */
    }
    if (UCS_PTR_IS_ERR(req)) {
        return UCS_PTR_STATUS(req);
    }
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        ucp_worker_progress(w);
        st = ucp_request_check_status(req);
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((st == UCS_INPROGRESS) &&
             ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) * 1e-9 < tmo));
    if (st == UCS_INPROGRESS) {
        ucp_request_cancel(w, req);
        wait_req(w, req);
        return UCS_ERR_TIMED_OUT;
    }
    ucp_request_free(req);
    return st;
}

/* ---- client ---- */

static int run_client(const char *addr_file, uint32_t id, unsigned cycles, int want_reply)
{
    static churn_msg_t msg;
    uint8_t server[2048], reply[MSG_DATA];
    long fds0 = 0, rss0 = 0;
    size_t server_len;
    churn_node_t n;
    ucp_ep_h ep;
    FILE *f;

    f = fopen(addr_file, "rb");
    if ((f == NULL) || ((server_len = fread(server, 1, sizeof(server), f)) == 0)) {
        fprintf(stderr, "client %u: cannot read %s\n", id, addr_file);
        return 2;
    }
    fclose(f);
    if ((churn_node_open(&n) != 0) || (n.addr_len > sizeof(msg.addr))) {
        fprintf(stderr, "client %u: UCP init failed\n", id);
        return 2;
    }
    for (unsigned c = 0; c < cycles; ++c) {
        if (c == cycles / 10) {
            fds0 = pair_fds();
            rss0 = pair_rss_kb();
        }
        msg.client     = id;
        msg.seq        = c;
        msg.want_reply = (uint32_t)want_reply;
        msg.addr_len   = (uint32_t)n.addr_len;
        memcpy(msg.addr, n.addr, n.addr_len);
        fill(msg.data, id, c);
        if ((ep_open(n.worker, server, &ep) != UCS_OK) ||
            (send_msg(n.worker, ep, TAG_MSG | id, &msg, sizeof(msg)) != UCS_OK) ||
            (ep_close(n.worker, ep) != UCS_OK)) {
            fprintf(stderr, "client %u: cycle %u failed\n", id, c);
            return 1;
        }
        if (want_reply) {
            if (recv_msg(n.worker, TAG_REPLY | ((uint64_t)id << 16) | (c & 0xffff), reply,
                         sizeof(reply), 30) != UCS_OK) {
                fprintf(stderr, "client %u: no reply to %u\n", id, c);
                return 1;
            }
            if (!check(reply, id + 1000, c)) {
                fprintf(stderr, "client %u: reply %u corrupt\n", id, c);
                return 1;
            }
        }
    }
    if (cycles >= 1000) {
        long fds = pair_fds(), rss = pair_rss_kb();
        printf("client %u: %u cycles; fds %ld -> %ld, RSS %ld -> %ld KiB\n", id, cycles, fds0,
               fds, rss0, rss);
        if ((fds != fds0) || (rss - rss0 > 4096)) {
            fprintf(stderr, "client %u: grew with the cycles\n", id);
            return 1;
        }
    }
    churn_node_close(&n);
    return 0;
}

/* ---- server ---- */

static pid_t spawn_client(const char *self, const char *addr_file, uint32_t id, unsigned cycles,
                          int reply)
{
    char sid[16], scyc[16];
    char *argv[] = {(char*)self, "--client", (char*)addr_file, "--id", sid, "--client-cycles",
                    scyc, reply ? "--reply" : NULL, NULL};
    pid_t pid;

    snprintf(sid, sizeof(sid), "%u", id);
    snprintf(scyc, sizeof(scyc), "%u", cycles);
    return (posix_spawn(&pid, self, NULL, NULL, argv, environ) == 0) ? pid : -1;
}

/* Receives a client's messages (answering when asked) until it exits; 0 if all came, checked. */
static int serve(churn_node_t *n, pid_t child, uint32_t id, unsigned cycles)
{
    static churn_msg_t msg;
    uint8_t reply[MSG_DATA];
    unsigned got = 0;
    int status = 0, exited = 0, ok = 1;
    ucp_ep_h ep;

    while (got < cycles) {
        ucs_status_t st = recv_msg(n->worker, TAG_MSG | id, &msg, sizeof(msg), 1.0);
        if (st == UCS_ERR_TIMED_OUT) {
            if (waitpid(child, &status, WNOHANG) == child) {
                exited = 1;
                break;
            }
            continue;
        }
        if ((st != UCS_OK) || (msg.client != id) || (msg.seq != got) ||
            !check(msg.data, id, msg.seq)) {
            fprintf(stderr, "server: message %u of client %u wrong (status %s, seq %u)\n", got,
                    id, ucs_status_string(st), msg.seq);
            ok = 0;
            break;
        }
        ++got;
        if (msg.want_reply) {
            fill(reply, id + 1000, msg.seq);
            if ((ep_open(n->worker, msg.addr, &ep) != UCS_OK) ||
                (send_msg(n->worker, ep, TAG_REPLY | ((uint64_t)id << 16) | (msg.seq & 0xffff),
                          reply, sizeof(reply)) != UCS_OK) ||
                (ep_close(n->worker, ep) != UCS_OK)) {
                fprintf(stderr, "server: reply %u to client %u failed\n", msg.seq, id);
                ok = 0;
                break;
            }
        }
    }
    if (!exited) {
        while (waitpid(child, &status, WNOHANG) != child) {
            ucp_worker_progress(n->worker);     /* the client's ep close may need us */
        }
    }
    return (ok && (got == cycles) && WIFEXITED(status) && (WEXITSTATUS(status) == 0)) ? 0 : -1;
}

int main(int argc, char **argv)
{
    static const struct option lopts[] = {
        {"cycles", required_argument, NULL, 'n'}, {"clients", required_argument, NULL, 'k'},
        {"client-cycles", required_argument, NULL, 'm'}, {"client", required_argument, NULL, 'c'},
        {"id", required_argument, NULL, 'i'}, {"reply", no_argument, NULL, 'r'},
        {NULL, 0, NULL, 0}};
    unsigned cycles = 100000, clients = 40, client_cycles = 10;
    const char *client_addr = NULL;
    uint32_t id = 0;
    int reply = 0, opt;
    char addr_file[] = "/tmp/ucp_churn.XXXXXX", self[4096];
    long fds_warm = 0, rss_warm = 0, fds, rss;
    ssize_t len;
    churn_node_t n;
    FILE *f;
    int fd;

    while ((opt = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
        switch (opt) {
        case 'n': cycles = (unsigned)strtoul(optarg, NULL, 0); break;
        case 'k': clients = (unsigned)strtoul(optarg, NULL, 0); break;
        case 'm': client_cycles = (unsigned)strtoul(optarg, NULL, 0); break;
        case 'c': client_addr = optarg; break;
        case 'i': id = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 'r': reply = 1; break;
        default:
            fprintf(stderr, "usage: ucp_churn [--cycles N] [--clients K] [--client-cycles M]\n");
            return 2;
        }
    }
    if (client_addr != NULL) {
        return run_client(client_addr, id, client_cycles, reply);
    }

    len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if ((len <= 0) || (churn_node_open(&n) != 0)) {
        fprintf(stderr, "server: UCP init failed\n");
        return 2;
    }
    self[len] = '\0';
    fd = mkstemp(addr_file);
    f  = (fd >= 0) ? fdopen(fd, "wb") : NULL;
    if ((f == NULL) || (fwrite(n.addr, 1, n.addr_len, f) != n.addr_len)) {
        fprintf(stderr, "server: cannot write %s\n", addr_file);
        return 2;
    }
    fclose(f);

    if (cycles > 0) {
        pid_t child = spawn_client(self, addr_file, 0, cycles, 0);
        int rc = (child > 0) ? serve(&n, child, 0, cycles) : -1;
        result(rc == 0, "connect_cycles", "one client, %u ep create / send / close cycles, "
               "data checked, its fds and RSS flat", cycles);
    }
    if (clients > 0) {
        int ok = 1;
        for (uint32_t k = 1; (k <= clients) && ok; ++k) {
            pid_t child = spawn_client(self, addr_file, k, client_cycles, 1);
            ok = (child > 0) && (serve(&n, child, k, client_cycles) == 0);
            if (k == 5) {
                fds_warm = pair_fds();
                rss_warm = pair_rss_kb();
            }
        }
        /* the last client's rings are taken back within PEER_CHECK_INTERVAL */
        for (int i = 0; i < 300000; ++i) {
            ucp_worker_progress(n.worker);
        }
        fds = pair_fds();
        rss = pair_rss_kb();
        result(ok, "many_clients", "%u clients in turn, %u messages and replies each, "
               "data checked", clients, client_cycles);
        result((clients < 5) || ((fds <= fds_warm) && (rss - rss_warm < 4096)), "server_flat",
               "server fds %ld -> %ld, RSS %ld -> %ld KiB from client 5 to client %u", fds_warm,
               fds, rss_warm, rss, clients);
    }
    unlink(addr_file);
    churn_node_close(&n);
    printf("%d passed, %d failed\n", node_passed, node_failed);
    return node_failed ? 1 : 0;
}
