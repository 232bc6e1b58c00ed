/*
 * One side of a UCP connection for ucp_ops: context + worker + an ep to the peer's worker
 * address (swapped over the pair's control socket). UCX_TLS comes from the environment; every
 * case ends by checking, through ucp_ext, that the ep's lanes use the transport under test.
 */
#ifndef TESTS_UCP_PAIR_H
#define TESTS_UCP_PAIR_H

#include "pair.h"

#include <ucp/api/ucp.h>

typedef struct up {
    pair_t        *pair;
    const char    *tls;        /* transports the lanes may use (comma-separated) */
    ucp_context_h context;
    ucp_worker_h  worker;
    ucp_ep_h      ep;
    int           err_mode_peer;  /* ep created with UCP_ERR_HANDLING_MODE_PEER */
    int           ep_errors;      /* calls of the ep error handler */
    ucs_status_t  ep_status;
    double        ep_error_time;
} up_t;

/* 0, PAIR_SKIP (err_mode_peer and no transport can handle peer failures), or PAIR_FAIL with a
 * diagnostic. */
int  up_open(up_t *u, pair_t *pair, const char *tls, int err_mode_peer);
/* Closes the ep with a flush while both sides progress, then destroys the worker. */
int  up_close(up_t *u, int ok);

void up_progress(up_t *u);
int  up_expired(const up_t *u);

/* Waits for a request from a *_nbx call (NULL: completed at once) and frees it. */
ucs_status_t up_wait(up_t *u, ucs_status_ptr_t request);

/* 0 if every lane of the ep uses one of u->tls; else logs the lanes and returns -1. */
int  up_check_lanes(up_t *u);

/* A 64-bit big-enough-to-hold-anything packed rkey + address message. */
typedef struct {
    uint64_t addr;
    uint64_t len;
    uint64_t rkey_len;
    uint8_t  rkey[];
} up_rkey_msg_t;

#endif
