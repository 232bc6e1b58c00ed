/*
 * The UCT glue base every transport of the project derives from (as UCX's scopy base carries
 * cma): what an iface and an ep do the same way whatever the wire.
 *
 * - ucx_ext_iface_t, embedded in each transport's iface (after its UCX superclass, which
 *   differs: sm for the shared-memory transports, base for the network one): the arbiter of
 *   eps with pending requests, their dispatch, the flush rule, the peer-liveness check of eps
 *   that wait on their peer, and the transport's standard counters.
 * - ucx_ext_ep_t, the base class of each transport's ep: its pending group, must-queue rule,
 *   no-resource path, peer process watch and failure reporting.
 * - Knob checking from a table: a bad value fails iface open naming UCX_<PREFIX><KNOB>.
 * - One counters style: the standard send-side counters every transport keeps, in the same
 *   order, followed by the transport's own (see UCX_EXT_TX_COUNTERS).
 *
 * Needs UCX's internal headers (include after config.h).
 */
#ifndef UCX_EXT_BASE_H
#define UCX_EXT_BASE_H

#include "ucx_ext_compat.h"

#include <uct/base/uct_iface.h>
#include <ucs/datastruct/arbiter.h>
#include <ucs/datastruct/list.h>
#include <ucs/time/time.h>

/* ---- counters ---- */

/* The send side of every transport, named alike so that tools compare transports (tx_bytes:
 * every kind; tx_put_bytes and tx_get_bytes: the RMA share of it; mpi_glue/launch --report). */
#define UCX_EXT_TX_COUNTERS(_) \
    _(tx_am_short) _(tx_am_bcopy) _(tx_am_zcopy) _(tx_put_short) _(tx_put_bcopy) \
    _(tx_put_zcopy) _(tx_get_bcopy) _(tx_get_zcopy) _(tx_atomic) _(tx_bytes) _(tx_no_resource) \
    _(pending_add) _(peer_failed) _(tx_put_bytes) _(tx_get_bytes)

/* The bytes of a put (write) or get, with _COUNT the transport's counting macro. */
#define UCX_EXT_COUNT_RMA_BYTES(_COUNT, _write, _len) \
    do { \
        _COUNT(tx_bytes, _len); \
        if (_write) { \
            _COUNT(tx_put_bytes, _len); \
        } else { \
            _COUNT(tx_get_bytes, _len); \
        } \
    } while (0)

#define UCX_EXT_COUNTER_FIELD(_n) uint64_t _n;
#define UCX_EXT_COUNTER_NAME(_n)  #_n,

typedef struct ucx_ext_tx_counters {
    UCX_EXT_TX_COUNTERS(UCX_EXT_COUNTER_FIELD)
} ucx_ext_tx_counters_t;

/* ---- knobs ---- */

typedef enum {
    UCX_EXT_KNOB_UINT,      /* unsigned */
    UCX_EXT_KNOB_SIZE,      /* size_t (MEMUNITS) */
    UCX_EXT_KNOB_ULONG,     /* unsigned long */
    UCX_EXT_KNOB_ULUNITS,   /* unsigned long (ULUNITS): "auto" passes, the rest is ranged */
    UCX_EXT_KNOB_DOUBLE     /* double (TIME, fractions) */
} ucx_ext_knob_type_t;

/* One range rule: min <= value <= max. */
typedef struct ucx_ext_knob {
    const char          *name;      /* without the UCX_<PREFIX> part */
    size_t              offset;     /* in the transport's config struct */
    ucx_ext_knob_type_t type;
    double              min, max;
} ucx_ext_knob_t;

#define UCX_EXT_KNOB(_cfg_type, _name, _field, _type, _min, _max) \
    {_name, ucs_offsetof(_cfg_type, _field), UCX_EXT_KNOB_##_type, (_min), (_max)}

/* UCS_OK, or UCS_ERR_INVALID_PARAM with an error naming the first knob out of its range. */
ucs_status_t ucx_ext_config_check(const char *tl, const char *prefix, const void *config,
                                  const ucx_ext_knob_t *knobs, unsigned count);

/* Logs "<tl>: invalid configuration: UCX_<prefix><what>" and returns UCS_ERR_INVALID_PARAM. */
ucs_status_t ucx_ext_config_error(const char *tl, const char *prefix, const char *fmt, ...)
    UCS_F_PRINTF(3, 4);

/* ---- iface part ---- */

typedef struct ucx_ext_ep ucx_ext_ep_t;

typedef struct ucx_ext_iface {
    uct_base_iface_t      *uct;
    const char            *tl;
    ucx_ext_tx_counters_t *cnt;
    /* Room for any op of this ep now (ring, mailbox, window)? A pending request is called
     * only when there is, and pending_add refuses (BUSY) one that could go now. NULL: the
     * transport cannot tell before trying (requests are always queued and always tried). */
    int                  (*tx_ready)(ucx_ext_ep_t *ep);
    ucs_arbiter_t          arbiter;         /* eps with pending requests */
    ucx_ext_ep_t          *dispatching;     /* ep whose queue head is being dispatched */
    ucs_list_link_t        eps;
    ucs_time_t             peer_check_interval;
    ucs_time_t             next_peer_check;
    /* Has the peer iface behind ep closed, while its process may live on (an MPI process
     * after MPI_Finalize)? Its memory stays mapped, so nothing else tells. Set after init;
     * NULL: the transport cannot tell, or judges its peers itself. */
    int                  (*peer_closed)(ucx_ext_ep_t *ep);
    ucs_time_t             next_closed_check;
    unsigned               err_pending;     /* eps whose error handler is scheduled */
} ucx_ext_iface_t;

/* The iface parameters every transport checks the same way (AM alignment), right after the
 * base class init. */
ucs_status_t ucx_ext_iface_check_params(const uct_iface_params_t *params, const char *tl);

/* peer_check_interval: seconds between liveness checks of the processes that eps wait on;
 * 0 for a transport whose peers are not local processes (it judges them itself). */
void ucx_ext_iface_init(ucx_ext_iface_t *x, uct_base_iface_t *uct, const char *tl,
                        ucx_ext_tx_counters_t *cnt, int (*tx_ready)(ucx_ext_ep_t*),
                        double peer_check_interval);
void ucx_ext_iface_cleanup(ucx_ext_iface_t *x);

static UCS_F_ALWAYS_INLINE int ucx_ext_iface_has_pending(ucx_ext_iface_t *x)
{
    return !ucs_arbiter_is_empty(&x->arbiter);
}

/* Dispatches pending requests and checks, every peer_check_interval, that the processes
 * waited on are alive. Called from progress only while something waits (pending requests,
 * blocked eps), so an idle iface pays nothing. Returns the number of requests that went out. */
unsigned ucx_ext_iface_progress_pending(ucx_ext_iface_t *x);
/* The same from a transport's async progress (its async context held): only requests added
 * with UCT_CB_FLAG_ASYNC are called there, as UCX's ud does. */
unsigned ucx_ext_iface_progress_pending_async(ucx_ext_iface_t *x);

/* Looks for eps whose peer iface has closed (peer_closed), at most every peer_check_interval. */
void ucx_ext_iface_check_closed(ucx_ext_iface_t *x);

/* Progress calls between looks at the clock for ucx_ext_iface_check_all_peers. */
#define UCX_EXT_ALL_PEERS_CALLS 4096

/* Checks the process of every ep (not only those waited on here), at most every
 * peer_check_interval: a request whose reply never comes waits on its peer with nothing
 * queued in the transport (UCP's atomics and RMA emulated with active messages), and a
 * transport whose sends into a dead peer's memory succeed would not learn otherwise. */
void ucx_ext_iface_check_all_peers(ucx_ext_iface_t *x);

/* The flush rule: requests still queued are not issued yet. UCS_INPROGRESS while any is:
 * UCP's worker flush completes at the first UCS_OK from every iface without flushing eps,
 * and an RMA op UCP queued here is not counted anywhere else (UCS_ERR_NO_RESOURCE is taken
 * as a failure). Also while a failure found here waits for its error handler, and a flush
 * is where a peer whose iface closed is found: its ops complete into memory nobody reads. */
static UCS_F_ALWAYS_INLINE ucs_status_t ucx_ext_iface_flush_queued(ucx_ext_iface_t *x)
{
    if (ucs_unlikely(x->peer_closed != NULL) && (ucs_get_time() >= x->next_closed_check)) {
        ucx_ext_iface_check_closed(x);
    }
    return (ucx_ext_iface_has_pending(x) || ucs_unlikely(x->err_pending != 0)) ?
           UCS_INPROGRESS : UCS_OK;
}

/* ---- wakeup ---- */

/* What a transport with an event fd offers (ucp_worker_wait, ucp_worker_get_efd, UCP's
 * adaptive progress): the fd becomes readable on a receive, and on a send completion. */
#define UCX_EXT_EVENT_FLAGS \
    (UCT_IFACE_FLAG_EVENT_SEND_COMP | UCT_IFACE_FLAG_EVENT_RECV | UCT_IFACE_FLAG_EVENT_FD)

/* iface_event_fd_get of a transport whose fd may be missing (fd < 0: no wakeup here). */
static UCS_F_ALWAYS_INLINE ucs_status_t ucx_ext_iface_event_fd(int fd, int *fd_p)
{
    if (fd < 0) {
        return UCS_ERR_UNSUPPORTED;
    }
    *fd_p = fd;
    return UCS_OK;
}

/* Events that ask for a receive to wake the worker. */
#define UCX_EXT_EVENTS_RECV (UCT_EVENT_RECV | UCT_EVENT_RECV_SIG)

/* The arm rules every transport shares, before its own: a worker waiting for send
 * completions must not sleep while requests wait in the pending queue, or while the
 * transport has sends that only its progress completes (tx_by_progress: stashed messages,
 * stalled atomics, flushes checked by progress), since no event would come for them; nor
 * while a failure waits for its error handler. UCS_ERR_BUSY or UCS_OK. */
static UCS_F_ALWAYS_INLINE ucs_status_t ucx_ext_iface_arm_check(ucx_ext_iface_t *x,
                                                                unsigned events,
                                                                int tx_by_progress)
{
    if (((events & UCT_EVENT_SEND_COMP) && (ucx_ext_iface_has_pending(x) || tx_by_progress)) ||
        (x->err_pending != 0)) {
        return UCS_ERR_BUSY;
    }
    return UCS_OK;
}

/* ---- ep ---- */

#define UCX_EXT_PEER_ADDR_MAX 96
enum { UCX_EXT_PEER_IFACE = 1, UCX_EXT_PEER_EP = 2 };

struct ucx_ext_ep {
    uct_base_ep_t        super;
    ucx_ext_iface_t      *x;
    ucs_arbiter_group_t  arb_group;
    ucs_list_link_t      list;
    pid_t                pid;           /* 0: no local process to watch (a network peer) */
    unsigned long long   start_time;    /* of pid, at connection */
    uint8_t              failed;        /* peer failed; the error handler has it */
    uint8_t              blocked;       /* waits on its peer outside the pending queue */
    int                  err_cb_id;
    ucs_status_t         err_status;
    /* the address it connected to, which ucx_ext_ep_is_connected compares (UCP 1.22 asks
     * whether an ep reaches a peer): the peer iface's, or on an ep-to-ep transport the peer
     * ep's; 0 bytes: none known */
    uint8_t              peer_addr_kind;
    uint8_t              peer_addr_len;
    uint8_t              peer_addr[UCX_EXT_PEER_ADDR_MAX];
};

/* pid: the peer's process on this host, watched while the ep waits on it; 0 for none. */
UCS_CLASS_DECLARE(ucx_ext_ep_t, uct_base_iface_t*, ucx_ext_iface_t*, pid_t);

/* While requests wait in the ep's pending queue (or the ep is blocked), a new send or flush
 * must not overtake them: UCP matches multi-fragment messages by the order of their first
 * fragments. Operations issued by the dispatch of this ep's queue head are the queue itself
 * making progress. */
static UCS_F_ALWAYS_INLINE int ucx_ext_ep_must_queue(ucx_ext_ep_t *ep)
{
    return ucs_unlikely(ep->blocked) ||
           (ucs_unlikely(!ucs_arbiter_group_is_empty(&ep->arb_group)) &&
            (ep->x->dispatching != ep));
}

/* Counts the refusal; with UCT_SEND_FLAG_PEER_CHECK also checks the peer. */
ucs_status_t ucx_ext_ep_no_resource(ucx_ext_ep_t *ep, unsigned flags);

/* 1 while the peer process lives (always 1 without a pid) and its iface is open (as far as
 * peer_closed tells); else fails the ep once. */
int ucx_ext_ep_peer_alive(ucx_ext_ep_t *ep);

/* Fails the ep once: the iface's error handler runs from the worker's progress queue with
 * status, not from inside the caller (it may destroy the ep). */
void ucx_ext_ep_set_failed(ucx_ext_ep_t *ep, ucs_status_t status);

/* Flush of an ep whose issued ops are complete at return: only its queue counts. */
static UCS_F_ALWAYS_INLINE ucs_status_t ucx_ext_ep_flush_queued(ucx_ext_ep_t *ep)
{
    if (ucx_ext_ep_must_queue(ep)) {
        return ucx_ext_ep_no_resource(ep, 0);
    }
    ucs_memory_cpu_store_fence();
    return UCS_OK;
}

/* The peer address ep connected to (kind: UCX_EXT_PEER_IFACE or _EP), len bytes; one longer
 * than UCX_EXT_PEER_ADDR_MAX is not kept (ucx_ext_ep_is_connected then answers as UCT's base
 * does: by reachability). */
void ucx_ext_ep_set_peer_addr(ucx_ext_ep_t *ep, int kind, const void *addr, size_t len);

/* The ucx_ext_iface_hooks_t.ep_is_connected of a transport that set its eps' peer addresses:
 * the ep's own peer is the one named (its ep address when one is given, else its iface
 * address). */
int ucx_ext_ep_is_connected(uct_ep_h tl_ep, const uct_device_addr_t *dev_addr,
                            const uct_iface_addr_t *iface_addr, const uct_ep_addr_t *ep_addr);

/* uct_iface_ops_t entries. */
ucs_status_t ucx_ext_ep_pending_add(uct_ep_h tl_ep, uct_pending_req_t *req, unsigned flags);
void ucx_ext_ep_pending_purge(uct_ep_h tl_ep, uct_pending_purge_callback_t cb, void *arg);
ucs_status_t ucx_ext_ep_check(uct_ep_h tl_ep, unsigned flags, uct_completion_t *comp);

#endif
