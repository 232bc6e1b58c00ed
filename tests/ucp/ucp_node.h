/*
 * One process's side of a two-process UCP test (ucp_wakeup, ucp_threads): context, worker and
 * one ep to the peer, whose worker address (and any other blob, an rkey) is swapped over a
 * socketpair the parent made before fork. Also the PASS/FAIL line every program prints.
 */
#ifndef TESTS_UCP_NODE_H
#define TESTS_UCP_NODE_H

#include <ucp/api/ucp.h>

#include <stddef.h>
#include <stdint.h>

typedef struct {
    ucp_context_h ctx;
    ucp_worker_h  worker;
    ucp_ep_h      ep;
    int           efd;        /* ucp_worker_get_efd, when asked for */
    int           use_efd;
    unsigned long sleeps;     /* waits that blocked (ucp_wakeup) */
    int           ep_errors;  /* calls of the ep error handler */
} node_t;

extern int node_passed, node_failed;

/* "PASS  name  detail" or "FAIL ...", counted in node_passed / node_failed. */
void result(int ok, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

double now_sec(void);

/* Context with features, worker in thread_mode (UCP_WAKEUP_TAG_SEND/RECV events when the
 * features ask for wakeup), the worker's efd when use_efd. 0 or -1 (logged). */
int  node_open(node_t *n, uint64_t features, ucs_thread_mode_t thread_mode, int use_efd);
/* Swaps len bytes at buf for the peer's (at most max; *got: how many) over sock. A malloc'ed
 * copy in *peer_p, or -1. */
int  node_swap(int sock, const void *buf, size_t len, void **peer_p, size_t *got, size_t max);
/* Swaps worker addresses and connects (err_peer: UCP_ERR_HANDLING_MODE_PEER, errors counted
 * in ep_errors). 0 or -1. */
int  node_connect(node_t *n, int sock, int err_peer);
void node_close(node_t *n);

/* Tagged send / receive whose completion writes *st (UCS_INPROGRESS until then); the request
 * to free, or NULL when complete at once. */
void *send_tag(node_t *n, const void *buf, size_t len, uint64_t tag, ucs_status_t *st);
void *recv_tag(node_t *n, void *buf, size_t len, uint64_t tag, ucs_status_t *st);
/* The callback behind both (also for RMA, atomics and flush): *user_data = status. */
void req_done(void *request, ucs_status_t status, void *user_data);

#endif
