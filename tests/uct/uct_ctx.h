/*
 * One side of a UCT connection, opened through the public UCT API only: the transport is found by
 * name among uct_query_components() -> md resources -> tl resources, the iface is opened on the
 * named device, and the two sides swap device/iface addresses, an rkey and the address of the
 * region they expose over the pair's control socket, then connect ep -> peer iface.
 */
#ifndef TESTS_UCT_CTX_H
#define TESTS_UCT_CTX_H

#include "pair.h"

#include <uct/api/uct.h>

/* A buffer usable for zero-copy and as an RMA target: registered if the md can register,
 * else allocated by the md (posix shm), else plain memory. */
typedef struct ut_buf {
    uint8_t                *addr;
    size_t                 len;
    uct_mem_h              memh;
    int                    md_alloc;    /* from uct_mem_alloc(): free with uct_mem_free() */
    uct_allocated_memory_t mem;
} ut_buf_t;

/* What the AM handler expects: message i is plan[i] bytes of pattern seed (seed_base + i);
 * without a plan, message i has ut_mix_len(i, mix_max) bytes if mix_max is set, else
 * ut_rule_len(i). The handler counts and checks, never asserts. */
typedef struct ut_rx {
    const size_t  *plan;
    size_t        mix_max;
    size_t        count;            /* messages planned (the plan's length or the announced total) */
    uint32_t      seed_base;
    size_t        received;
    size_t        errors;
    char          first_error[256];
} ut_rx_t;

#define UT_AM_ID  5
#define UT_AM_ID2 7    /* a second stream with its own checker (t->rx2) */

/* Message lengths when there is no plan (pending cases): within any am_short limit >= 24. */
static inline size_t ut_rule_len(size_t i)
{
    return 8 + i % 17;
}

/* Message lengths of the mixed streams: a quarter tiny, the rest spread up to max (max >= 8). */
static inline size_t ut_mix_len(size_t i, size_t max)
{
    uint32_t h = (uint32_t)i * 2654435761u;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    switch (h % 4) {
    case 0:  return h % 16 < max ? h % 16 : max;       /* 0..15: below every header */
    case 1:  return 8 + (h >> 4) % 249 < max ? 8 + (h >> 4) % 249 : max;  /* 8..256 */
    default: return (h >> 4) % (max + 1);               /* anything up to max */
    }
}

typedef struct ut {
    pair_t              *pair;
    const char          *tl, *dev;
    uct_component_h     component;
    uct_md_h            md;
    uct_md_attr_t       md_attr;
    ucs_async_context_t *async;
    uct_worker_h        worker;
    uct_iface_h         iface;
    uct_iface_attr_t    attr;
    uct_ep_h            ep;

    ut_buf_t            region;         /* this side's RMA target, exposed to the peer */
    void                *peer_dev_addr; /* the peer's addresses, for more eps */
    void                *peer_iface_addr;
    uint64_t            peer_addr;      /* the peer's region */
    size_t              peer_len;
    uct_rkey_bundle_t   peer_rkey;
    int                 have_rkey;

    volatile int        errors;         /* iface error handler calls */
    ucs_status_t        err_status;
    double              err_time;

    ut_rx_t             rx, rx2;        /* what the handlers of UT_AM_ID / UT_AM_ID2 expect */
    size_t              cap;            /* largest size tried for "unlimited" ops */
    int                 peer_killed;    /* no closing handshake: the case killed the peer */
} ut_t;

/* Opens md + iface of tl/dev, exchanges addresses with the peer, creates the ep and unpacks the
 * peer's rkey. region_len is the size of the exposed region. Returns 0, PAIR_SKIP (no such
 * transport) or PAIR_FAIL, with a diagnostic. */
int  ut_open(ut_t *t, pair_t *pair, const char *tl, const char *dev, size_t region_len);
void ut_close(ut_t *t);
/* The parameters every iface of the cases opens with (t's tl and device; AM, put, get), no
 * error handler. */
void ut_iface_params(const ut_t *t, uct_iface_params_t *params);
/* Another ep to the peer's iface (destroy it with uct_ep_destroy); 0 or -1. */
int  ut_connect_again(ut_t *t, uct_ep_h *ep_p);
/* The transport connects ep to ep (UCT_IFACE_FLAG_CONNECT_TO_EP only: RC). */
int  ut_ep_to_ep(const ut_t *t);

void ut_progress(ut_t *t);
int  ut_expired(const ut_t *t);                 /* past the pair's deadline */

int  ut_buf_alloc(ut_t *t, ut_buf_t *buf, size_t len);
/* Memory the md allocates where it can (rdmach: shared memory its peers map, as UCP's
 * ucp_mem_map with ALLOCATE and so MPI_Win_allocate get), else as ut_buf_alloc. */
int  ut_buf_alloc_md(ut_t *t, ut_buf_t *buf, size_t len);
/* Another region for the peer's RMA: its address and packed rkey over the pair's socket;
 * the peer takes them with ut_recv_region (release its rkey with uct_rkey_release). 0 or -1,
 * with a diagnostic. */
int  ut_send_region(ut_t *t, const ut_buf_t *buf);
int  ut_recv_region(ut_t *t, uint64_t *addr, uct_rkey_bundle_t *rkey);
void ut_buf_free(ut_t *t, ut_buf_t *buf);

/* Completion objects for zcopy/get operations. */
typedef struct ut_comp {
    uct_completion_t uct;
    int              done;
} ut_comp_t;

void ut_comp_init(ut_comp_t *comp);
/* Waits for an operation that returned status (UCS_INPROGRESS: until comp fires); returns the
 * final status, or UCS_ERR_TIMED_OUT. */
ucs_status_t ut_comp_wait(ut_t *t, ut_comp_t *comp, ucs_status_t status);

/* Flushes the ep (ep != NULL, with a completion) or the iface (by polling), progressing. */
ucs_status_t ut_flush(ut_t *t, uct_ep_h ep);

/* Splits [buf, buf+len) into up to max_iov uneven pieces; returns the iov count. */
size_t ut_iov_split(uct_iov_t *iov, size_t max_iov, void *buf, size_t len, uct_mem_h memh);

/* Repeats an operation while it answers UCS_ERR_NO_RESOURCE, progressing in between; gives
 * UCS_ERR_TIMED_OUT after the deadline. Works for ucs_status_t and ssize_t results. */
#define UT_RETRY(_t, _expr) \
    ({ \
        ssize_t _r; \
        while ((_r = (ssize_t)(_expr)) == UCS_ERR_NO_RESOURCE) { \
            ut_progress(_t); \
            if (ut_expired(_t)) { \
                _r = UCS_ERR_TIMED_OUT; \
                break; \
            } \
        } \
        _r; \
    })

/* Sizes to try for an op whose limit is max (already capped) and which takes over from an op
 * whose limit is below (0: none): min..3, odd sizes, below-1..below+1, max-1, max. Returns the
 * count, sorted and unique. */
size_t ut_sizes(size_t *sizes, size_t max_count, size_t min, size_t below, size_t max);

/* With uct_pair -v: the initiator lists the sizes each case sends. */
extern int ut_verbose;
void ut_log_sizes(const ut_t *t, const char *what, const size_t *sizes, size_t n);

/* Human-readable capability name list -> iface/md flags test (see uct_pair --help). */
int  ut_has_cap(const ut_t *t, const char *name);
const char *ut_cap_names(void);

#endif
