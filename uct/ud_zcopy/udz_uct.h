/*
 * ud_zcopy UCT glue: the types shared by md, iface and ep. Thin on purpose: the protocol is in
 * udz_core.[ch], the wires behind their table (udz_wire.h), which is all the glue calls.
 */
#ifndef UDZ_UCT_H
#define UDZ_UCT_H

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "udz_core.h"
#include "ucx_ext_base.h"
#include "ucx_ext_md.h"
#include "ucx_ext_ops.h"

#include <uct/base/uct_iface.h>
#include <uct/base/uct_md.h>
#include <ucs/async/async.h>
#include <ucs/datastruct/arbiter.h>
#include <ucs/datastruct/list.h>
#include <ucs/time/time.h>

#define UCT_UDZ_NAME    "ud_zcopy"
#define UCT_UDZ_PREFIX  "UD_ZCOPY_"

/* ep_check's keepalive: an empty reliable message the receiver drops */
#define UCT_UDZ_AM_ID_KEEPALIVE 0xff
/* progress calls between retries of the pending queue when nothing was freed (a safety net:
 * whatever frees a resource kicks it at once, uct_udz_iface_t.pending_kick) */
#define UCT_UDZ_PENDING_RETRY   64
/* am_zcopy's header: copied into the datagram, the payload goes by reference */
#define UCT_UDZ_AM_MAX_HDR(_iface) ucs_min((_iface)->max_payload, 128)

/* ---- counters (uct/common: the file contract and the standard send-side block) ---- */

/* put_denied / get_denied: peers' puts and gets with a valid key that the registration does
 * not allow (registered without UCT_MD_MEM_ACCESS_REMOTE_PUT / _GET), refused */
#define UCT_UDZ_OWN_COUNTERS(_) _(get_failed) _(async_ticks) _(async_deferred) _(sleeps) \
                                _(async_wakeups) _(async_parks) _(put_denied) \
                                _(get_denied)

#define UCT_UDZ_COUNTERS(_) UDZ_CORE_COUNTERS(_) UDZ_WIRE_COUNTERS(_) UCX_EXT_TX_COUNTERS(_) \
                            UCT_UDZ_OWN_COUNTERS(_)

typedef struct uct_udz_counters {
    udz_counters_t        core;
    udz_wire_counters_t   wire;
    ucx_ext_tx_counters_t tx;
    UCT_UDZ_OWN_COUNTERS(UCX_EXT_COUNTER_FIELD)
} uct_udz_counters_t;

extern uct_udz_counters_t uct_udz_counters;

#define UCT_UDZ_COUNT(_name, _n)     (uct_udz_counters.tx._name += (_n))
#define UCT_UDZ_COUNT_OWN(_name, _n) (uct_udz_counters._name += (_n))

/* ---- md ---- */

extern ucx_ext_component_t uct_udz_component;

/* Packed remote key: names a registration of the owner; the owner checks every access. */
typedef struct uct_udz_rkey {
    uint32_t magic;
    uint32_t id;            /* registration slot at the owner */
    uint64_t key;           /* random, per registration */
    uint64_t address;       /* informational */
} UCS_S_PACKED uct_udz_rkey_t;

#define UCT_UDZ_RKEY_MAGIC 0x4b5a4455u   /* "UDZK" */

/* The local memory a peer may access with rkey, for a put (write) or a get: NULL when
 * refused (key, bounds, or an access the registration does not grant: counted). With hold,
 * the get's transfer is linked to the registration until uct_udz_md_unhold, and deregistering
 * it revokes the transfer (udz_mem_hold_t). */
void *uct_udz_md_resolve(uint64_t addr, uint64_t len, const uint8_t *rkey, int write,
                         udz_mem_hold_t *hold);
void uct_udz_md_unhold(udz_mem_hold_t *hold);

/* ---- iface ---- */

/* What UCP exchanges, the wire's part first (udz_wire.h; UDP: the IPv4 address and the control
 * port), then the glue's: the device address ends with the host identity below, the iface
 * address with the core's cookie (uint64_t). */
typedef struct uct_udz_host_id {
    uint64_t hash;          /* the wire may reach some addresses (UDP: loopback) only from the
                             * same host and network namespace: a hash of the system id and
                             * the namespace (UCP takes 31 bytes of device address at most,
                             * and a GID is 16) */
    uint32_t shm;           /* uct_udz_shm_domain: with hash equal, every shared-memory
                             * transport reaches the peer too (udz_reach.c) */
    uint8_t  flags;         /* UCT_UDZ_HOST_* of the iface's worker */
} UCS_S_PACKED uct_udz_host_id_t;

/* The worker has an iface of the same wire on a loopback device, and reaches the peers of its
 * host through it alone (udz_reach.c, uct_udz_worker_loopback). */
#define UCT_UDZ_HOST_VIA_LOOPBACK 0x1

/* TX_WINDOW auto (udz_iface.c): bytes of full-size datagrams in flight per peer, and the
 * window a peer's falls back to under loss. */
#define UCT_UDZ_TX_WINDOW_BYTES (2ul << 20)
#define UCT_UDZ_TX_WINDOW_MIN   128

typedef struct uct_udz_iface_config {
    uct_iface_config_t super;
    size_t             seg_size;
    size_t             chunk_size;
    unsigned long      tx_window;   /* UCS_ULUNITS_AUTO: uct_udz_tx_window */
    unsigned           tx_pool;
    unsigned           ack_every;
    double             ack_delay;
    double             rto;
    double             rto_max;
    double             peer_timeout;
    unsigned           channels;
    size_t             zc_window;
    size_t             zc_max;
    size_t             zcopy_thresh;
    unsigned           rx_batch;
    unsigned           max_peers;
    size_t             rcvbuf;
    size_t             sndbuf;
    int                gro;
    int                on_host;         /* UCS_YES, UCS_NO, UCS_AUTO (udz_reach.c) */
    double             async_tick;
    int                rcache;          /* a wire that registers memory (InfiniBand UD) */
    ucx_ext_rcache_config_t rcache_config;
} uct_udz_iface_config_t;

/* A get_bcopy: a zero-copy get into a bounce buffer, unpacked on completion. */
typedef struct uct_udz_getb {
    void                  *buf;         /* max_payload bytes, allocated on first use */
    uct_unpack_callback_t unpack_cb;
    void                  *arg;
    size_t                length;
    uct_completion_t      *comp;
    int                   busy;
} uct_udz_getb_t;

typedef struct uct_udz_fence_group uct_udz_fence_group_t;

typedef struct uct_udz_iface {
    uct_base_iface_t   super;
    ucx_ext_iface_t    x;               /* pending queue, flush rule (uct/common) */
    const udz_wire_ops_t *wops;         /* the wire that has the device */
    void               *wire;
    udz_core_t         *core;
    char               ifname[UCT_DEVICE_NAME_MAX];
    uct_udz_host_id_t  host;
    int                yield_on_host;   /* on-host peers go to a shared-memory transport */
    uint64_t           cookie;
    size_t             max_payload;
    int                loopback;        /* the wire's device reaches this host alone */
    size_t             zcopy_thresh;
    size_t             zc_max;
    ucs_list_link_t    flushes;         /* ep flushes waiting for acks */
    uct_udz_getb_t     getb[UDZ_MAX_CHANNELS];
    unsigned           nchannels;
    int                fenced;          /* a fence waits for what was issued before it */
    uct_udz_fence_group_t *fence_group; /* the worker's ud_zcopy ifaces (udz_fence.c) */
    ucs_list_link_t    fence_link;
    /* Pending requests are retried when something they may wait for was freed (the core's
     * resources(), a finished get: a channel, a get_bcopy buffer, a fence), and every
     * UCT_UDZ_PENDING_RETRY progress calls in any case; not on every call, where a get
     * waiting for a busy channel would be refused again and again. */
    int                pending_kick;
    unsigned           pending_skips;
    struct {
        ucs_async_context_t *context;   /* the worker's: every entry point holds it */
        int                 enabled;    /* ASYNC_TICK > 0 with an async context */
        int                 timer_id;   /* -1: no timer now (disabled, or parked) */
        int                 park_fd;    /* parked: the wire's event fd watched instead of
                                         * the timer (no peer record); -1 */
        ucs_time_t          tick;
        int                 in_timer;   /* the core runs from the async timer */
        ucs_queue_head_t    deferred;   /* for the next progress (udz_async.c) */
        size_t              deferred_bytes; /* what deferred holds: at UCT_UDZ_ASYNC_BUDGET
                                             * the timer takes no more packets */
        const udz_user_ops_t *handlers; /* the iface's, which replay what the timer deferred
                                         * (udz_async.c gets them, not the iface's symbols) */
    } async;
    struct {
        int                 epfd;       /* the event fd: the wire's and wake_fd; -1 */
        int                 wake_fd;    /* eventfd the async timer writes; -1 */
        int                 armed;      /* a worker sleeps on epfd (udz_wakeup.c) */
    } wakeup;
} uct_udz_iface_t;

UCS_CLASS_DECLARE(uct_udz_iface_t, uct_md_h, uct_worker_h, const uct_iface_params_t*,
                  const uct_iface_config_t*);

extern ucs_config_field_t uct_udz_iface_config_table[];

/* The core's clock: UCX's own (the TSC on x86), as its transports keep time. Progress reads
 * it on every call, and clock_gettime is a system call where the kernel's clocksource is not
 * the TSC (a VM's hpet or acpi_pm). */
static inline uint64_t uct_udz_now_ns(void)
{
    return (uint64_t)ucs_time_to_nsec(ucs_get_time());
}

/* Every entry point holds the worker's async context, so the async timer never runs the core
 * at the same time (udz_async.c). */
#define UDZ_ENTER(_iface) \
    if ((_iface)->async.context != NULL) UCS_ASYNC_BLOCK((_iface)->async.context)
#define UDZ_LEAVE(_iface) \
    if ((_iface)->async.context != NULL) UCS_ASYNC_UNBLOCK((_iface)->async.context)

/* ---- which peers it serves (udz_reach.c) ---- */

uint32_t uct_udz_shm_domain(void);
/* 1 if peers on this host, in its shared-memory domain, are left to another transport
 * (on_host: the ON_HOST setting) */
int      uct_udz_on_host_yields(int on_host);
int      uct_udz_iface_is_reachable(const uct_iface_h tl_iface,
                                    const uct_device_addr_t *dev_addr,
                                    const uct_iface_addr_t *iface_addr);

/* ---- wakeup (udz_wakeup.c) ---- */

void         uct_udz_wakeup_init(uct_udz_iface_t *iface);
void         uct_udz_wakeup_cleanup(uct_udz_iface_t *iface);
ucs_status_t uct_udz_iface_event_fd_get(uct_iface_h tl_iface, int *fd_p);
ucs_status_t uct_udz_iface_event_arm(uct_iface_h tl_iface, unsigned events);
/* From the async timer, after it ran the core: wakes a sleeping worker when it left
 * something for it. */
void         uct_udz_wakeup_notify(uct_udz_iface_t *iface);

/* ---- async progress (udz_async.c) ---- */

void         uct_udz_async_wrap_ops(uct_iface_ops_t *ops);
ucs_status_t uct_udz_async_init(uct_udz_iface_t *iface, uct_worker_h worker, double tick,
                                 const udz_user_ops_t *handlers);
void         uct_udz_async_cleanup(uct_udz_iface_t *iface);
/* The timer runs while the core holds a peer record; an iface without one parks it (the
 * wire's event fd restarts it). Call after something may have made a peer record. */
void         uct_udz_async_unpark(uct_udz_iface_t *iface);
unsigned     uct_udz_async_dispatch(uct_udz_iface_t *iface);
/* Delivers the deferred completions now (an ep going away), leaving messages in their turn. */
void         uct_udz_async_complete_now(uct_udz_iface_t *iface);
/* From the core's callbacks: 1 when the event was queued for the next progress (the timer
 * runs the core and the application's handler is not async-safe), else 0: handle it now. */
int          uct_udz_async_defer_am(uct_udz_iface_t *iface, uint8_t am_id, const void *data,
                                    size_t len);
int          uct_udz_async_defer_event(uct_udz_iface_t *iface, int type, void *ctx, int status);
#define UCT_UDZ_ASYNC_GET_DONE    1
#define UCT_UDZ_ASYNC_SEND_DONE   2
#define UCT_UDZ_ASYNC_PEER_FAILED 3

/* ---- ep ---- */

/* A network peer: no process to watch (pid 0 in the base); the core judges its liveness. */
typedef struct uct_udz_ep {
    ucx_ext_ep_t         super;         /* pending group, failure reporting (uct/common) */
    udz_peer_t           *peer;
} uct_udz_ep_t;

typedef struct uct_udz_flush {
    ucs_list_link_t      list;
    uct_udz_ep_t         *ep;
    uint64_t             token;
    uct_completion_t     *comp;
} uct_udz_flush_t;

UCX_EXT_EP_CLASS_DECLARE(uct_udz_ep_t);

ucs_status_t uct_udz_ep_am_short(uct_ep_h tl_ep, uint8_t id, uint64_t header,
                                 const void *payload, unsigned length);
ssize_t uct_udz_ep_am_bcopy(uct_ep_h tl_ep, uint8_t id, uct_pack_callback_t pack_cb,
                            void *arg, unsigned flags);
UCX_EXT_EP_AM_ZCOPY_DECLARE(uct_udz_ep);
UCX_EXT_EP_RMA_DECLARE(uct_udz_ep);
ucs_status_t uct_udz_ep_check(uct_ep_h tl_ep, unsigned flags, uct_completion_t *comp);
ucs_status_t uct_udz_ep_fence(uct_ep_h tl_ep, unsigned flags);
ucs_status_t uct_udz_iface_fence(uct_iface_h tl_iface, unsigned flags);

/* An ep fence is an iface fence (both in their own files, on udz_fence.c): later operations
 * wait while what was issued before it may still take effect after them. */
ucs_status_t uct_udz_fence_join(uct_udz_iface_t *iface, uct_worker_h worker);
void uct_udz_fence_leave(uct_udz_iface_t *iface);
int uct_udz_worker_loopback(uct_udz_iface_t *iface);
void uct_udz_fence_set(uct_udz_iface_t *iface);
/* The fence's wait, once set: 1 while it holds, 0 (and cleared) when it is done. */
int uct_udz_fence_wait(uct_udz_iface_t *iface);
/* A get of iface finished: its pending queue and every fenced member's are retried. */
void uct_udz_fence_kick(uct_udz_iface_t *iface);

unsigned uct_udz_ep_check_flushes(uct_udz_iface_t *iface);
void uct_udz_ep_set_failed(uct_udz_ep_t *ep);

/* Fence: puts, active messages and get requests travel one in-order reliable stream, so they
 * are ordered already; only a get's data comes back on its own channel, after later operations
 * may have taken effect, and another iface of the worker has streams of its own. A fence
 * therefore holds every later operation (they get NO_RESOURCE and wait in the pending queue)
 * until the worker's gets issued before it have completed and its other ifaces' sends are
 * acked (udz_fence.c). Open MPI's request-based Rget relies on this: get, fence, then an
 * atomic whose reply completes it. */
static UCS_F_ALWAYS_INLINE int uct_udz_iface_fence_holds(uct_udz_iface_t *iface)
{
    if (ucs_likely(!iface->fenced)) {
        return 0;
    }
    return uct_udz_fence_wait(iface);
}

static inline ucs_status_t uct_udz_status(int err)
{
    switch (err) {
    case 0:             return UCS_OK;
    case -EAGAIN:       return UCS_ERR_NO_RESOURCE;
    case -EMSGSIZE:     return UCS_ERR_INVALID_PARAM;
    case -ECANCELED:    return UCS_ERR_CANCELED;
    case -EACCES:
    case -EINVAL:       return UCS_ERR_INVALID_ADDR;
    case -EPIPE:
    case -ECONNRESET:
    case -ETIMEDOUT:    return UCS_ERR_ENDPOINT_TIMEOUT;
    default:            return UCS_ERR_IO_ERROR;
    }
}

#endif
