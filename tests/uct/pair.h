/*
 * Two-process test harness shared by the uct and ucp tiers.
 *
 * Each case runs in a fresh pair of processes forked by a launcher that never opens UCX itself:
 * an "initiator" that issues operations and a "target" that receives them, joined by a control
 * socket (SOCK_SEQPACKET, so one send is one message). A fresh pair per case keeps a broken
 * transport state from leaking into the next case, lets the peer-death cases SIGKILL the target,
 * and lets the launcher read the transport counters after both processes have exited (the
 * transports write them at exit).
 */
#ifndef TESTS_PAIR_H
#define TESTS_PAIR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define PAIR_PASS 0
#define PAIR_FAIL 1
#define PAIR_SKIP 77   /* the automake convention */

typedef enum { PAIR_INITIATOR = 0, PAIR_TARGET = 1 } pair_role_t;

typedef struct pair {
    pair_role_t role;
    const char  *case_name;
    int         fd;            /* control socket to the peer process */
    pid_t       peer_pid;      /* the target's pid, known to the initiator only */
    double      deadline;      /* pair_now() value after which waits give up */
    /* called while waiting for a control message: the transport must keep progressing */
    void        (*progress)(void *arg);
    void        *progress_arg;
} pair_t;

typedef int (*pair_fn_t)(pair_t *pair, void *arg);

typedef struct pair_case {
    const char *name;
    pair_fn_t  fn;
    void       *arg;           /* passed to fn (a tier's own case description) */
    const char *counters;      /* expectations on the counters of the tested tl (see counters) */
    const char *env;           /* "VAR=value VAR=value" set in both processes, or NULL */
    double     timeout;        /* seconds; 0 for the default */
    int        kills_target;   /* the initiator SIGKILLs the target (peer-death cases) */
} pair_case_t;

typedef struct pair_opts {
    const char *tl;            /* transport whose counters are checked */
    const char *only;          /* comma-separated case names to run, NULL for all */
    int        counters;       /* check counters (needs UCX_EXT_COUNTERS_DIR) */
    const char *counters_all;  /* more expectations for every case with some, or NULL */
    double     timeout;        /* default per-case timeout, seconds */
} pair_opts_t;

/* Runs the selected cases, prints "PASS/FAIL/SKIP name" lines and "N passed, M failed";
 * returns the number of failed cases (unknown --case names count as failures). */
int pair_run_cases(const pair_case_t *cases, int count, const pair_opts_t *opts);

/* Prints the names of the cases, one per line. */
void pair_list_cases(const pair_case_t *cases, int count);

/* Monotonic seconds. */
double pair_now(void);

/* This process's open descriptors and resident memory (VmRSS, KiB); -1 when unknown. For
 * the churn tests, whose resources must stay flat. */
long pair_fds(void);
long pair_rss_kb(void);

/* "    [case initiator] ..." on stderr: every diagnostic names its case and side. */
void pair_log(const pair_t *pair, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Control messages. pair_recv* return the message length, or -1 (with a diagnostic) on timeout
 * or when the peer is gone. pair_recv progresses the transport while waiting; pair_recv_idle
 * does not (to let a ring fill up, for instance). */
int     pair_send(pair_t *pair, const void *msg, size_t len);
ssize_t pair_recv(pair_t *pair, void *msg, size_t max);
ssize_t pair_recv_idle(pair_t *pair, void *msg, size_t max);

/* Text control messages: pair_sendf("check %zu", n); pair_expect(pair, "check") returns the text
 * after the keyword in a static buffer, or NULL if another keyword or nothing arrived. */
int         pair_sendf(pair_t *pair, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *pair_expect(pair_t *pair, const char *keyword);

/* Both sides call it: returns 0 when both reached it with ok=1, else -1 (the peer's verdict is
 * how a side learns that the other one failed and must not go on). */
int pair_sync(pair_t *pair, int ok);

/* Data patterns that differ per message (seed) and per byte, with a period far beyond any
 * power-of-two size, so shifted, truncated, duplicated or stale data is caught. */
uint8_t pair_pattern_byte(uint32_t seed, size_t i);
void    pair_pattern_fill(void *buf, size_t len, uint32_t seed);
/* Returns the index of the first byte that differs, or -1 if all match. */
ssize_t pair_pattern_check(const void *buf, size_t len, uint32_t seed);

#endif
