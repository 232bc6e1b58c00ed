/*
 * ud_zcopy async progress: a UCX async timer runs the protocol core while the application is
 * away from UCX (computing, or blocked elsewhere), so that peers get their acks and
 * retransmissions keep going, and active messages whose handler is registered with
 * UCT_CB_FLAG_ASYNC (UCP's wireup) are delivered at once. That is what UCT_IFACE_FLAG_CB_ASYNC
 * promises, and what UCP asks of an auxiliary transport (UCX_TLS=rdmach,ud_zcopy:aux).
 *
 * The timer runs in UCX's async thread with the worker's async context held; every entry point
 * of the transport holds the same context (UCS_ASYNC_BLOCK, recursive), so the core is never
 * entered twice at once - the scheme of UCX's own ud transport. Whatever the core reports
 * from the async thread for the application (other active messages, completions, peer
 * failures) is queued and handed over by the next progress call, in order. Pending requests
 * added with UCT_CB_FLAG_ASYNC (by an async handler that found no room) are dispatched from
 * the timer too, as ud does; the others wait for the application's progress.
 */
#include "udz_uct.h"

#include <ucs/async/async.h>
#include <ucs/debug/memtrack_int.h>

/* What the async progress may queue for an application that is away (computing) before it
 * takes no more packets: the core then leaves them in their senders' windows, which fill, and
 * tells the senders by BUSY acks that we are alive (udz_core_rx_hold). Without it a fast
 * sender grew the receiver's memory without limit; tcp gets the same bound from its socket
 * buffer. 8 MiB: four times the default send window of a peer (UCT_UDZ_TX_WINDOW_BYTES), so
 * a few senders' windows fit before anyone waits. */
#define UCT_UDZ_ASYNC_BUDGET (8ul << 20)

typedef enum {
    UCT_UDZ_DEFER_AM,
    UCT_UDZ_DEFER_GET_DONE,
    UCT_UDZ_DEFER_SEND_DONE,
    UCT_UDZ_DEFER_PEER_FAILED
} uct_udz_defer_type_t;

typedef struct uct_udz_deferred {
    ucs_queue_elem_t     queue;
    uct_udz_defer_type_t type;
    int                  status;
    void                 *ctx;      /* completion, or peer */
    uint8_t              am_id;
    size_t               len;
    uint8_t              data[0];
} uct_udz_deferred_t;

static uct_udz_deferred_t *uct_udz_defer(uct_udz_iface_t *iface, uct_udz_defer_type_t type,
                                         void *ctx, int status, size_t len)
{
    uct_udz_deferred_t *d = ucs_malloc(sizeof(*d) + len, "udz deferred");

    if (d == NULL) {
        ucs_error("ud_zcopy: out of memory for an event of the async progress (lost)");
        return NULL;
    }
    d->type   = type;
    d->ctx    = ctx;
    d->status = status;
    d->len    = len;
    ucs_queue_push(&iface->async.deferred, &d->queue);
    iface->async.deferred_bytes += sizeof(*d) + len;
    UCT_UDZ_COUNT_OWN(async_deferred, 1);
    return d;
}

int uct_udz_async_defer_am(uct_udz_iface_t *iface, uint8_t am_id, const void *data, size_t len)
{
    uct_udz_deferred_t *d;

    if (!iface->async.in_timer || (iface->super.am[am_id].flags & UCT_CB_FLAG_ASYNC)) {
        return 0;
    }
    d = uct_udz_defer(iface, UCT_UDZ_DEFER_AM, NULL, 0, len);
    if (d != NULL) {
        d->am_id = am_id;
        memcpy(d->data, data, len);
    }
    return 1;
}

int uct_udz_async_defer_event(uct_udz_iface_t *iface, int type, void *ctx, int status)
{
    if (!iface->async.in_timer) {
        return 0;
    }
    if ((uct_udz_defer(iface, (uct_udz_defer_type_t)type, ctx, status, 0) != NULL) &&
        (type == UCT_UDZ_DEFER_PEER_FAILED)) {
        /* the core frees a failed record that nobody holds: this one is compared with the
         * eps' when handed over, and its memory must not be a new peer's by then */
        udz_peer_hold(ctx);
    }
    return 1;
}

/* From progress, with the async context held: what the timer kept for the application. */
unsigned uct_udz_async_dispatch(uct_udz_iface_t *iface)
{
    uct_udz_deferred_t *d;
    unsigned count = 0;

    while (!ucs_queue_is_empty(&iface->async.deferred)) {
        d = ucs_queue_pull_elem_non_empty(&iface->async.deferred, uct_udz_deferred_t, queue);
        switch (d->type) {
        case UCT_UDZ_DEFER_AM:
            uct_iface_invoke_am(&iface->super, d->am_id, d->data, (unsigned)d->len, 0);
            break;
        case UCT_UDZ_DEFER_GET_DONE:
            iface->async.handlers->get_done(iface, d->ctx, d->status);
            break;
        case UCT_UDZ_DEFER_SEND_DONE:
            uct_invoke_completion((uct_completion_t*)d->ctx, uct_udz_status(d->status));
            break;
        case UCT_UDZ_DEFER_PEER_FAILED:
            iface->async.handlers->peer_failed(iface, d->ctx);   /* not in the timer now */
            udz_peer_put(iface->core, d->ctx);  /* the event's hold (uct_udz_async_defer_event) */
            break;
        }
        iface->async.deferred_bytes -= sizeof(*d) + d->len;
        ucs_free(d);
        ++count;
    }
    return count;
}

void uct_udz_async_complete_now(uct_udz_iface_t *iface)
{
    uct_udz_deferred_t *d;

    /* completions only: messages and peer failures keep their turn for progress */
    ucs_queue_for_each_extract(d, &iface->async.deferred, queue,
                               (d->type == UCT_UDZ_DEFER_GET_DONE) ||
                               (d->type == UCT_UDZ_DEFER_SEND_DONE)) {
        if (d->type == UCT_UDZ_DEFER_GET_DONE) {
            iface->async.handlers->get_done(iface, d->ctx, d->status);
        } else {
            uct_invoke_completion((uct_completion_t*)d->ctx, uct_udz_status(d->status));
        }
        iface->async.deferred_bytes -= sizeof(*d) + d->len;
        ucs_free(d);
    }
}

/*
 * Parking. A timer at ASYNC_TICK wakes UCX's async thread 100 times a second per iface, with
 * or without peers; on a host whose cores all poll (two ranks on two cores) every wakeup
 * takes one from a rank. UCX_TLS=rdmach,ud_zcopy,self on one host, where ud_zcopy has no peer:
 * MPICH 8 B ping-pong, mean over 2,000 round trips, 1.10x rdmach alone with the timer and
 * 1.01x without, 40 alternating jobs (perf/RESULTS.md). So an iface whose core holds no peer
 * record watches its wire's event fd instead; a datagram there (a peer's handshake) or a
 * record made by the application (an ep) starts the timer again, and the handshake is taken
 * at once, as UCT_IFACE_FLAG_CB_ASYNC promises. The timer parks itself when it finds the
 * core without records and nothing queued for the application. Both run with the async
 * context held, as every entry point does.
 */
static void uct_udz_async_timer(int id, ucs_event_set_types_t events, void *arg);

static void uct_udz_async_park(uct_udz_iface_t *iface)
{
    ucs_async_mode_t mode = iface->async.context->mode;
    int fd = (iface->wops->event_fd != NULL) ? iface->wops->event_fd(iface->wire) : -1;

    if ((fd < 0) || !iface->async.enabled || (iface->async.timer_id < 0) ||
        (ucs_async_set_event_handler(mode, fd, UCS_EVENT_SET_EVREAD,
                                     uct_udz_async_timer, iface,
                                     iface->async.context) != UCS_OK)) {
        return;     /* no event fd (InfiniBand UD): the timer keeps running */
    }
    ucs_async_remove_handler(iface->async.timer_id, 0);    /* maybe from itself: no wait */
    iface->async.timer_id = -1;
    iface->async.park_fd  = fd;
    UCT_UDZ_COUNT_OWN(async_parks, 1);
}

void uct_udz_async_unpark(uct_udz_iface_t *iface)
{
    int fd = iface->async.park_fd;

    if ((fd < 0) || !iface->async.enabled || (udz_core_npeers(iface->core) == 0)) {
        return;
    }
    ucs_async_remove_handler(fd, 0);    /* maybe from itself: no wait */
    iface->async.park_fd = -1;
    if (ucs_async_add_timer(iface->async.context->mode, iface->async.tick,
                            uct_udz_async_timer, iface, iface->async.context,
                            &iface->async.timer_id) != UCS_OK) {
        ucs_error("ud_zcopy: cannot restart the async progress timer");
        iface->async.timer_id = -1;
    }
}

/* The timer, or the parked iface's event fd (id is then the fd) */
static void uct_udz_async_timer(int id, ucs_event_set_types_t events, void *arg)
{
    uct_udz_iface_t *iface = arg;
    int parked             = (iface->async.park_fd >= 0);

    /* the async context is held here: no entry point runs at the same time */
    iface->async.in_timer = 1;
    udz_core_rx_hold(iface->core, iface->async.deferred_bytes >= UCT_UDZ_ASYNC_BUDGET);
    udz_core_progress(iface->core, uct_udz_now_ns());
    if (parked) {
        /* the fd said readable: what sits on an idle data channel would keep it so */
        udz_core_drain_idle(iface->core);
    }
    udz_core_rx_hold(iface->core, 0);   /* the application's own progress takes them */
    ucx_ext_iface_progress_pending_async(&iface->x);   /* requests added from async handlers */
    iface->async.in_timer = 0;
    uct_udz_wakeup_notify(iface);   /* a sleeping worker, if it left something for it */
    UCT_UDZ_COUNT_OWN(async_ticks, 1);
    if (iface->async.park_fd >= 0) {
        uct_udz_async_unpark(iface);    /* a handshake made a record: ticks again */
    } else if ((udz_core_npeers(iface->core) == 0) &&
               ucs_queue_is_empty(&iface->async.deferred)) {
        uct_udz_async_park(iface);
    }
}

ucs_status_t uct_udz_async_init(uct_udz_iface_t *iface, uct_worker_h tl_worker, double tick,
                                 const udz_user_ops_t *handlers)
{
    uct_priv_worker_t *worker = ucs_derived_of(tl_worker, uct_priv_worker_t);
    ucs_status_t status;

    ucs_queue_head_init(&iface->async.deferred);
    iface->async.deferred_bytes = 0;
    iface->async.handlers = handlers;
    iface->async.in_timer = 0;
    iface->async.timer_id = -1;
    iface->async.park_fd  = -1;
    iface->async.enabled  = 0;
    iface->async.context  = worker->async;
    if ((tick <= 0) || (worker->async == NULL)) {
        return UCS_OK;   /* no async progress: the application's progress only */
    }
    iface->async.tick = ucs_time_from_sec(tick);
    status = ucs_async_add_timer(worker->async->mode, iface->async.tick,
                                 uct_udz_async_timer, iface, worker->async,
                                 &iface->async.timer_id);
    if (status != UCS_OK) {
        ucs_error("ud_zcopy: cannot add the async progress timer: %s",
                  ucs_status_string(status));
        iface->async.timer_id = -1;
        return status;
    }
    iface->async.enabled = 1;
    UCS_ASYNC_BLOCK(worker->async);
    uct_udz_async_park(iface);      /* no peer yet */
    UCS_ASYNC_UNBLOCK(worker->async);
    return UCS_OK;
}

void uct_udz_async_cleanup(uct_udz_iface_t *iface)
{
    uct_udz_deferred_t *d;
    int timer_id, park_fd;

    /* A callback running now may be parking or unparking (replacing one handler by the
     * other): take the ids once it is done, and let no later callback make a new one */
    if (iface->async.context != NULL) {
        UCS_ASYNC_BLOCK(iface->async.context);
    }
    timer_id              = iface->async.timer_id;
    park_fd               = iface->async.park_fd;
    iface->async.timer_id = -1;
    iface->async.park_fd  = -1;
    iface->async.enabled  = 0;
    if (iface->async.context != NULL) {
        UCS_ASYNC_UNBLOCK(iface->async.context);
    }
    if (timer_id >= 0) {
        ucs_async_remove_handler(timer_id, 1);
    }
    if (park_fd >= 0) {
        ucs_async_remove_handler(park_fd, 1);
    }
    while (!ucs_queue_is_empty(&iface->async.deferred)) {
        d = ucs_queue_pull_elem_non_empty(&iface->async.deferred, uct_udz_deferred_t, queue);
        iface->async.deferred_bytes -= sizeof(*d) + d->len;
        ucs_free(d);
    }
}

/* ---- every entry point holds the async context ---- */

static uct_iface_ops_t uct_udz_inner;   /* the transport's own ops */

#define UDZ_EP_IFACE(_ep) ucs_derived_of((_ep)->iface, uct_udz_iface_t)

#define UDZ_WRAP(_op, _ret, _iface_expr, _params, ...) \
    static _ret uct_udz_async_##_op _params \
    { \
        uct_udz_iface_t *iface = (_iface_expr); \
        _ret ret; \
        UDZ_ENTER(iface); \
        ret = uct_udz_inner._op(__VA_ARGS__); \
        UDZ_LEAVE(iface); \
        return ret; \
    }

UDZ_WRAP(ep_am_short, ucs_status_t, UDZ_EP_IFACE(ep),
         (uct_ep_h ep, uint8_t id, uint64_t hdr, const void *p, unsigned len), ep, id, hdr, p, len)
UDZ_WRAP(ep_am_short_iov, ucs_status_t, UDZ_EP_IFACE(ep),
         (uct_ep_h ep, uint8_t id, const uct_iov_t *iov, size_t cnt), ep, id, iov, cnt)
UDZ_WRAP(ep_am_bcopy, ssize_t, UDZ_EP_IFACE(ep),
         (uct_ep_h ep, uint8_t id, uct_pack_callback_t cb, void *arg, unsigned flags),
         ep, id, cb, arg, flags)
UDZ_WRAP(ep_am_zcopy, ucs_status_t, UDZ_EP_IFACE(ep),
         (uct_ep_h ep, uint8_t id, const void *hdr, unsigned hlen, const uct_iov_t *iov,
          size_t cnt, unsigned flags, uct_completion_t *comp),
         ep, id, hdr, hlen, iov, cnt, flags, comp)
UDZ_WRAP(ep_put_short, ucs_status_t, UDZ_EP_IFACE(ep),
         (uct_ep_h ep, const void *b, unsigned len, uint64_t ra, uct_rkey_t rkey),
         ep, b, len, ra, rkey)
UDZ_WRAP(ep_put_bcopy, ssize_t, UDZ_EP_IFACE(ep),
         (uct_ep_h ep, uct_pack_callback_t cb, void *arg, uint64_t ra, uct_rkey_t rkey),
         ep, cb, arg, ra, rkey)
UDZ_WRAP(ep_put_zcopy, ucs_status_t, UDZ_EP_IFACE(ep),
         (uct_ep_h ep, const uct_iov_t *iov, size_t cnt, uint64_t ra, uct_rkey_t rkey,
          uct_completion_t *comp), ep, iov, cnt, ra, rkey, comp)
UDZ_WRAP(ep_get_bcopy, ucs_status_t, UDZ_EP_IFACE(ep),
         (uct_ep_h ep, uct_unpack_callback_t cb, void *arg, size_t len, uint64_t ra,
          uct_rkey_t rkey, uct_completion_t *comp), ep, cb, arg, len, ra, rkey, comp)
UDZ_WRAP(ep_get_zcopy, ucs_status_t, UDZ_EP_IFACE(ep),
         (uct_ep_h ep, const uct_iov_t *iov, size_t cnt, uint64_t ra, uct_rkey_t rkey,
          uct_completion_t *comp), ep, iov, cnt, ra, rkey, comp)
UDZ_WRAP(ep_flush, ucs_status_t, UDZ_EP_IFACE(ep),
         (uct_ep_h ep, unsigned flags, uct_completion_t *comp), ep, flags, comp)
UDZ_WRAP(ep_fence, ucs_status_t, UDZ_EP_IFACE(ep), (uct_ep_h ep, unsigned flags), ep, flags)
UDZ_WRAP(ep_check, ucs_status_t, UDZ_EP_IFACE(ep),
         (uct_ep_h ep, unsigned flags, uct_completion_t *comp), ep, flags, comp)
UDZ_WRAP(ep_pending_add, ucs_status_t, UDZ_EP_IFACE(ep),
         (uct_ep_h ep, uct_pending_req_t *req, unsigned flags), ep, req, flags)
UDZ_WRAP(ep_create, ucs_status_t, ucs_derived_of(params->iface, uct_udz_iface_t),
         (const uct_ep_params_t *params, uct_ep_h *ep_p), params, ep_p)

/* Progress of an idle iface (no transfer, no timer, nothing queued, and the wire knows that
 * nothing arrived) returns before the lock and the clock: with UCX_TLS=rdmach,ud_zcopy every
 * progress call of a process that has a peer on another host comes here, and on-host traffic
 * must not pay for it. The checks are reads that a concurrent async timer may make stale; a
 * stale "idle" only moves the work to the next call. */
static unsigned uct_udz_async_iface_progress(uct_iface_h tl_iface)
{
    uct_udz_iface_t *iface = ucs_derived_of(tl_iface, uct_udz_iface_t);
    unsigned ret;

    if (ucs_likely(ucs_queue_is_empty(&iface->async.deferred) &&
                   !ucx_ext_iface_has_pending(&iface->x) &&
                   ucs_list_is_empty(&iface->flushes) && udz_core_quiet(iface->core))) {
        iface->wakeup.armed = 0;   /* awake: the async timer need not wake us */
        return 0;
    }
    UDZ_ENTER(iface);
    ret = uct_udz_inner.iface_progress(tl_iface);
    UDZ_LEAVE(iface);
    return ret;
}
UDZ_WRAP(iface_flush, ucs_status_t, ucs_derived_of(tl_iface, uct_udz_iface_t),
         (uct_iface_h tl_iface, unsigned flags, uct_completion_t *comp), tl_iface, flags, comp)
UDZ_WRAP(iface_fence, ucs_status_t, ucs_derived_of(tl_iface, uct_udz_iface_t),
         (uct_iface_h tl_iface, unsigned flags), tl_iface, flags)

static void uct_udz_async_ep_pending_purge(uct_ep_h ep, uct_pending_purge_callback_t cb,
                                           void *arg)
{
    uct_udz_iface_t *iface = UDZ_EP_IFACE(ep);

    UDZ_ENTER(iface);
    uct_udz_inner.ep_pending_purge(ep, cb, arg);
    UDZ_LEAVE(iface);
}

static void uct_udz_async_ep_destroy(uct_ep_h ep)
{
    uct_udz_iface_t *iface = UDZ_EP_IFACE(ep);

    UDZ_ENTER(iface);
    uct_udz_inner.ep_destroy(ep);
    UDZ_LEAVE(iface);
}

void uct_udz_async_wrap_ops(uct_iface_ops_t *ops)
{
    if (ops->ep_create == uct_udz_async_ep_create) {
        return;   /* wrapped already (the table is static) */
    }
    uct_udz_inner          = *ops;
    ops->ep_am_short       = uct_udz_async_ep_am_short;
    ops->ep_am_short_iov   = uct_udz_async_ep_am_short_iov;
    ops->ep_am_bcopy       = uct_udz_async_ep_am_bcopy;
    ops->ep_am_zcopy       = uct_udz_async_ep_am_zcopy;
    ops->ep_put_short      = uct_udz_async_ep_put_short;
    ops->ep_put_bcopy      = uct_udz_async_ep_put_bcopy;
    ops->ep_put_zcopy      = uct_udz_async_ep_put_zcopy;
    ops->ep_get_bcopy      = uct_udz_async_ep_get_bcopy;
    ops->ep_get_zcopy      = uct_udz_async_ep_get_zcopy;
    ops->ep_flush          = uct_udz_async_ep_flush;
    ops->ep_fence          = uct_udz_async_ep_fence;
    ops->ep_check          = uct_udz_async_ep_check;
    ops->ep_pending_add    = uct_udz_async_ep_pending_add;
    ops->ep_pending_purge  = uct_udz_async_ep_pending_purge;
    ops->ep_create         = uct_udz_async_ep_create;
    ops->ep_destroy        = uct_udz_async_ep_destroy;
    ops->iface_progress    = uct_udz_async_iface_progress;
    ops->iface_flush       = uct_udz_async_iface_flush;
    ops->iface_fence       = uct_udz_async_iface_fence;
}
