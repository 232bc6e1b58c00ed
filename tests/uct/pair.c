#include "pair.h"

#include <ucp_ext.h>

#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CTL_MSG_MAX 65536

static const char *role_name(pair_role_t role)
{
    return (role == PAIR_INITIATOR) ? "initiator" : "target";
}

double pair_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

long pair_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    long n = 0;

    if (d == NULL) {
        return -1;
    }
    while ((e = readdir(d)) != NULL) {
        n += (e->d_name[0] != '.');
    }
    closedir(d);
    return n - 1;   /* the directory's own */
}

long pair_rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;

    if (f == NULL) {
        return -1;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "VmRSS: %ld", &kb) == 1) {
            break;
        }
    }
    fclose(f);
    return kb;
}

void pair_log(const pair_t *pair, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "    [%s %s] %s\n", pair->case_name, role_name(pair->role), msg);
}

/* ---- control channel ---- */

int pair_send(pair_t *pair, const void *msg, size_t len)
{
    ssize_t n;

    do {
        n = send(pair->fd, msg, len, MSG_NOSIGNAL);
    } while ((n < 0) && (errno == EINTR));
    if (n != (ssize_t)len) {
        pair_log(pair, "control send failed: %s", (n < 0) ? strerror(errno) : "short write");
        return -1;
    }
    return 0;
}

static ssize_t recv_common(pair_t *pair, void *msg, size_t max, int progress)
{
    struct pollfd pfd = {.fd = pair->fd, .events = POLLIN};
    unsigned spins = 0;
    ssize_t n;
    int r;

    for (;;) {
        /* poll is a syscall: while progressing, look at the socket only every few rounds */
        if (!progress || ((++spins & 63) == 0)) {
            r = poll(&pfd, 1, progress ? 0 : 50);
            if ((r < 0) && (errno != EINTR)) {
                pair_log(pair, "control poll failed: %s", strerror(errno));
                return -1;
            }
            if (r > 0) {
                break;
            }
            if (pair_now() > pair->deadline) {
                pair_log(pair, "timed out waiting for the peer's control message");
                return -1;
            }
        }
        if (progress && (pair->progress != NULL)) {
            pair->progress(pair->progress_arg);
        }
    }

    do {
        n = recv(pair->fd, msg, max, 0);
    } while ((n < 0) && (errno == EINTR));
    if (n <= 0) {
        pair_log(pair, "peer closed the control socket (it exited or failed)");
        return -1;
    }
    return n;
}

ssize_t pair_recv(pair_t *pair, void *msg, size_t max)
{
    return recv_common(pair, msg, max, 1);
}

ssize_t pair_recv_idle(pair_t *pair, void *msg, size_t max)
{
    return recv_common(pair, msg, max, 0);
}

int pair_sendf(pair_t *pair, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return pair_send(pair, msg, (n < (int)sizeof(msg)) ? (size_t)n + 1 : sizeof(msg));
}

const char *pair_expect(pair_t *pair, const char *keyword)
{
    static char msg[1024];
    size_t klen = strlen(keyword);
    ssize_t n   = pair_recv(pair, msg, sizeof(msg) - 1);

    if (n < 0) {
        return NULL;
    }
    msg[n] = '\0';
    if ((strncmp(msg, keyword, klen) != 0) || ((msg[klen] != '\0') && (msg[klen] != ' '))) {
        pair_log(pair, "protocol error: expected '%s', got '%.60s'", keyword, msg);
        return NULL;
    }
    return msg + klen + (msg[klen] == ' ');
}

int pair_sync(pair_t *pair, int ok)
{
    const char *peer;
    int peer_ok = 0;

    if (pair_sendf(pair, "sync %d", ok) != 0) {
        return -1;
    }
    peer = pair_expect(pair, "sync");
    if ((peer == NULL) || (sscanf(peer, "%d", &peer_ok) != 1)) {
        return -1;
    }
    return (ok && peer_ok) ? 0 : -1;
}

/* ---- patterns ---- */

uint8_t pair_pattern_byte(uint32_t seed, size_t i)
{
    uint32_t x = (uint32_t)i * 2654435761u + (uint32_t)(i >> 32) + seed * 0x9e3779b9u + 1;
    x ^= x >> 15;
    x *= 0x2c1b3c6du;
    x ^= x >> 12;
    return (uint8_t)x;
}

void pair_pattern_fill(void *buf, size_t len, uint32_t seed)
{
    uint8_t *p = buf;
    size_t i;

    for (i = 0; i < len; ++i) {
        p[i] = pair_pattern_byte(seed, i);
    }
}

ssize_t pair_pattern_check(const void *buf, size_t len, uint32_t seed)
{
    const uint8_t *p = buf;
    size_t i;

    for (i = 0; i < len; ++i) {
        if (p[i] != pair_pattern_byte(seed, i)) {
            return i;
        }
    }
    return -1;
}

/* ---- launcher ---- */

static pid_t spawn(pair_t *pair, int fd_keep, int fd_close, pair_fn_t fn, void *arg)
{
    pid_t pid;

    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid != 0) {
        return pid;
    }
    close(fd_close);
    pair->fd = fd_keep;
    /* exit(), not _exit(): the transports write their counters from exit handlers */
    exit(fn(pair, arg));
}

static void describe_exit(char *buf, size_t len, const char *who, int status, int target_dies)
{
    if (WIFEXITED(status)) {
        snprintf(buf, len, "%s exit %d", who, WEXITSTATUS(status));
    } else if (WIFSIGNALED(status)) {
        snprintf(buf, len, "%s killed by signal %d (%s)%s", who, WTERMSIG(status),
                 strsignal(WTERMSIG(status)),
                 (target_dies && (WTERMSIG(status) == SIGKILL)) ? " as planned" : "");
    } else {
        snprintf(buf, len, "%s status 0x%x", who, status);
    }
}

/* Sets "VAR=value VAR=value" and returns a malloc'ed copy of the previous values to restore. */
static char **set_env(const char *env)
{
    char *copy, *tok, *save = NULL, *eq, **old;
    int n = 0;

    if (env == NULL) {
        return NULL;
    }
    old  = calloc(64, sizeof(*old));
    copy = strdup(env);
    for (tok = strtok_r(copy, " ", &save); (tok != NULL) && (n < 62);
         tok = strtok_r(NULL, " ", &save)) {
        eq = strchr(tok, '=');
        if (eq == NULL) {
            continue;
        }
        *eq = '\0';
        old[n++] = strdup(tok);
        old[n++] = getenv(tok) ? strdup(getenv(tok)) : NULL;
        setenv(tok, eq + 1, 1);
    }
    free(copy);
    return old;
}

static void restore_env(char **old)
{
    int i;

    if (old == NULL) {
        return;
    }
    for (i = 0; old[i] != NULL; i += 2) {
        if (old[i + 1] != NULL) {
            setenv(old[i], old[i + 1], 1);
        } else {
            unsetenv(old[i]);
        }
        free(old[i]);
        free(old[i + 1]);
    }
    free(old);
}

/* A fresh, empty per-case counters directory under base. */
static int case_counters_dir(const char *base, const char *name, char *dir, size_t len)
{
    char cmd[8300];

    snprintf(dir, len, "%s/%s", base, name);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if ((system(cmd) != 0) || (mkdir(dir, 0777) != 0)) {
        return -1;
    }
    return 0;
}

typedef struct {
    int    result;
    char   detail[2200];
    double seconds;
} run_result_t;

static void run_one(const pair_case_t *c, const pair_opts_t *opts, run_result_t *res)
{
    double timeout = (c->timeout > 0) ? c->timeout : opts->timeout;
    int kills_target = c->kills_target;
    pair_t pair = {.case_name = c->name};
    pid_t pids[2];
    int status[2] = {0, 0}, done[2] = {0, 0}, timed_out = 0, sv[2], i, fail = 0, skip = 0;
    char what[2][256];
    double start = pair_now();

    res->detail[0] = '\0';
    if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) != 0) {
        res->result = PAIR_FAIL;
        snprintf(res->detail, sizeof(res->detail), "socketpair: %s", strerror(errno));
        return;
    }

    /* children stop a little before the launcher would kill them, to say what they waited for */
    pair.deadline = start + timeout * 0.9;
    pair.role     = PAIR_TARGET;
    pids[1]       = spawn(&pair, sv[1], sv[0], c->fn, c->arg);
    pair.role     = PAIR_INITIATOR;
    pair.peer_pid = pids[1];
    pids[0]       = spawn(&pair, sv[0], sv[1], c->fn, c->arg);
    close(sv[0]);
    close(sv[1]);

    /* reap promptly: a killed target must not linger as a zombie that still looks alive */
    while (!done[0] || !done[1]) {
        for (i = 0; i < 2; ++i) {
            if (!done[i] && (waitpid(pids[i], &status[i], WNOHANG) == pids[i])) {
                done[i] = 1;
            }
        }
        if (pair_now() - start > timeout) {
            timed_out = 1;
            for (i = 0; i < 2; ++i) {
                if (!done[i]) {
                    kill(pids[i], SIGKILL);
                    waitpid(pids[i], &status[i], 0);
                    done[i] = 2;
                }
            }
        }
        usleep(1000);
    }
    res->seconds = pair_now() - start;

    for (i = 0; i < 2; ++i) {
        describe_exit(what[i], sizeof(what[i]), i ? "target" : "initiator", status[i],
                      i && kills_target);
        if (done[i] == 2) {
            snprintf(what[i], sizeof(what[i]), "%s hung (killed after %.0f s)",
                     i ? "target" : "initiator", timeout);
        }
        if (WIFEXITED(status[i]) && (WEXITSTATUS(status[i]) == PAIR_SKIP)) {
            skip = 1;
        } else if (!(WIFEXITED(status[i]) && (WEXITSTATUS(status[i]) == 0)) &&
                   !(i && kills_target && WIFSIGNALED(status[i]) &&
                     (WTERMSIG(status[i]) == SIGKILL))) {
            fail = 1;
        }
    }
    if (timed_out || fail) {
        res->result = PAIR_FAIL;
        snprintf(res->detail, sizeof(res->detail), "%s; %s", what[0], what[1]);
    } else {
        res->result = skip ? PAIR_SKIP : PAIR_PASS;
    }
}

static int selected(const char *only, const char *name)
{
    size_t n = strlen(name);
    const char *p;

    if (only == NULL) {
        return 1;
    }
    for (p = only; (p = strstr(p, name)) != NULL; p += n) {
        if (((p == only) || (p[-1] == ',')) && ((p[n] == '\0') || (p[n] == ','))) {
            return 1;
        }
    }
    return 0;
}

void pair_list_cases(const pair_case_t *cases, int count)
{
    int i;
    for (i = 0; i < count; ++i) {
        printf("%s\n", cases[i].name);
    }
}

int pair_run_cases(const pair_case_t *cases, int count, const pair_opts_t *opts)
{
    const char *base = getenv("UCX_EXT_COUNTERS_DIR");
    int passed = 0, failed = 0, skipped = 0, i, found;
    char dir[4200], why[2048], *only_copy, *tok, *save = NULL;
    run_result_t res;
    char **old_env;

    if (opts->counters && ((base == NULL) || (*base == '\0'))) {
        fprintf(stderr, "counter checks need UCX_EXT_COUNTERS_DIR\n");
        return 1;
    }

    /* a misspelt --case must not pass silently */
    if (opts->only != NULL) {
        only_copy = strdup(opts->only);
        for (tok = strtok_r(only_copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            for (found = 0, i = 0; i < count; ++i) {
                found |= !strcmp(cases[i].name, tok);
            }
            if (!found) {
                printf("FAIL  %-22s no such case\n", tok);
                ++failed;
            }
        }
        free(only_copy);
    }

    for (i = 0; i < count; ++i) {
        if (!selected(opts->only, cases[i].name)) {
            continue;
        }
        old_env = set_env(cases[i].env);
        if (opts->counters) {
            if (case_counters_dir(base, cases[i].name, dir, sizeof(dir)) != 0) {
                printf("FAIL  %-22s cannot create counters dir %s\n", cases[i].name, dir);
                ++failed;
                restore_env(old_env);
                continue;
            }
            setenv("UCX_EXT_COUNTERS_DIR", dir, 1);
        }

        run_one(&cases[i], opts, &res);

        if (opts->counters) {
            setenv("UCX_EXT_COUNTERS_DIR", base, 1);
            if ((res.result == PAIR_PASS) && (cases[i].counters != NULL) &&
                ((ucp_ext_counters_expect(dir, opts->tl, cases[i].counters, why,
                                          sizeof(why)) != 0) ||
                 ((opts->counters_all != NULL) &&
                  (ucp_ext_counters_expect(dir, opts->tl, opts->counters_all, why,
                                           sizeof(why)) != 0)))) {
                res.result = PAIR_FAIL;
                snprintf(res.detail, sizeof(res.detail), "counters: %s", why);
            }
        }
        restore_env(old_env);

        switch (res.result) {
        case PAIR_PASS:
            printf("PASS  %-22s (%.2f s)\n", cases[i].name, res.seconds);
            ++passed;
            break;
        case PAIR_SKIP:
            printf("SKIP  %-22s (see the reason above)\n", cases[i].name);
            ++skipped;
            break;
        default:
            printf("FAIL  %-22s %s\n", cases[i].name, res.detail);
            ++failed;
            break;
        }
        fflush(stdout);
    }

    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed;
}
