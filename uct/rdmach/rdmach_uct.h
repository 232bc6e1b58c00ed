/*
 * rdmach UCT glue: the types shared by md, iface and ep. Thin on purpose: the protocol is in
 * rdmach_ring.[ch]; the wire is reached only through its table (rdmach_wire.h), never directly.
 */
#ifndef RDMACH_UCT_H
#define RDMACH_UCT_H

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "rdmach_ring.h"
#include "rdmach_serve.h"
#include "rdmach_wire.h"
#include "ucx_ext_base.h"
#include "ucx_ext_md.h"
#include "ucx_ext_ops.h"
#include "ucx_ext_sm.h"

#include <uct/base/uct_iface.h>
#include <uct/base/uct_md.h>
#include <uct/sm/base/sm_iface.h>
#include <ucs/datastruct/arbiter.h>
#include <ucs/datastruct/list.h>
#include <ucs/datastruct/queue.h>
#include <ucs/memory/rcache.h>
#include <ucs/time/time.h>
#include <errno.h>

#define UCT_RDMACH_NAME    "rdmach"
#define UCT_RDMACH_PREFIX  "RDMACH_"

/* ---- counters (uct/common: the file contract and the standard send-side block) ---- */

/* The ring core's receive counters, then the standard send side. */
/* The glue's own: rings taken back from senders that had gone, and our rings given up in
 * receivers that had gone (connection churn); arms that put the iface to sleep (wakeup);
 * mapped memory (rdmach_amo_cpu.c): puts and gets done as stores and loads, CPU atomics
 * done here, atomics on memory we cannot map that the target served for us, and those we
 * served as the target (atomics, puts and gets); small puts and gets on memory we cannot
 * map that the target served for us, and those we took back from a target that did not
 * serve them in time and did ourselves (rdmach_serve_rma.c); served records we dropped
 * (malformed, or on a wire that serves none) and refused (memory outside the registration
 * they name: rdmach_serve.h). */
#define UCT_RDMACH_OWN_COUNTERS(_) _(rings_reaped) _(rings_unclaimed) _(sleeps) \
                                   _(rma_mapped) _(atomic_cpu) _(atomic_served) _(served) \
                                   _(rma_served) _(rma_revoked) _(serve_dropped) \
                                   _(serve_refused)
#define UCT_RDMACH_COUNTERS(_) RDMACH_RX_COUNTERS(_) UCX_EXT_TX_COUNTERS(_) \
                               RDMACH_WIRE_COUNTERS(_) UCT_RDMACH_OWN_COUNTERS(_)

typedef struct uct_rdmach_counters {
    rdmach_rx_stats_t     rx;
    ucx_ext_tx_counters_t tx;
    rdmach_wire_stats_t   wire;
    uint64_t              rings_reaped, rings_unclaimed, sleeps;
    uint64_t              rma_mapped, atomic_cpu, atomic_served, served;
    uint64_t              rma_served, rma_revoked, serve_dropped, serve_refused;
} uct_rdmach_counters_t;

extern uct_rdmach_counters_t uct_rdmach_counters;

#define UCT_RDMACH_COUNT(_name, _n) (uct_rdmach_counters.tx._name += (_n))
#define UCT_RDMACH_COUNT_OWN(_name) (uct_rdmach_counters._name++)

/* ---- md ---- */

extern ucx_ext_component_t uct_rdmach_component;

/* An md: the shared-memory wire's (wire == NULL, register-only), or a wire domain's. */
typedef struct uct_rdmach_md {
    uct_md_t                super;
    uct_md_ops_t            ops;
    const rdmach_wire_ops_t *wire;
    rdmach_wire_domain_t    *domain;
    uct_md_query_func_t     shm_query;   /* uct/common's query, amended by the domain md */
    ucs_rcache_t            *rcache;     /* a domain's registration cache, or NULL */
    double                  rcache_overhead;
} uct_rdmach_md_t;

typedef struct uct_rdmach_memh {
    ucx_ext_memh_t  super;
    void            *reg;    /* the wire's registration (NULL on the shm md) */
    uint32_t        key;     /* its remote key */
    ucs_list_link_t list;    /* the shm md's registrations (uct_rdmach_md_holds) */
} uct_rdmach_memh_t;

/* Packed remote key: a registered region, checked on every RMA; pid names the process on the
 * shm md (0 on a wire domain's, whose device checks key); xmem: the mapped segment holding
 * the region (the shm md's allocations), else empty. Unpacked, a ucx_ext_rkey_map_t
 * follows it (ucx_ext_md.c). */
typedef struct uct_rdmach_rkey {
    uint32_t            magic;
    int32_t             pid;
    uint64_t            address;
    uint64_t            length;
    uint32_t            key;
    ucx_ext_xmem_desc_t xmem;
} UCS_S_PACKED uct_rdmach_rkey_t;

/* 1 if [address, address + length) is exactly a registration of the shm md (what a served
 * request's key names must be: rdmach_serve.h). */
int uct_rdmach_md_registered(void *arg, uint64_t address, uint64_t length);
/* Does one registration of the shm md hold [address, address + length)? */
int uct_rdmach_md_covers(void *arg, uint64_t address, uint64_t length);

#define UCT_RDMACH_RKEY_MAGIC 0x52444d52u   /* "RMDR" */

/* ---- iface ---- */

typedef struct uct_rdmach_amo uct_rdmach_amo_t;

/* UCX_RDMACH_RC_TIMEOUT, RC_RETRY_COUNT, RC_SRQ, XRC (rdmach_rc_config.c) */
typedef struct uct_rdmach_rc_iface_config {
    double   timeout;
    unsigned retry_count;
    int      srq;
    int      xrc;           /* UCS_YES / UCS_NO / UCS_AUTO (or UCS_TRY) */
} uct_rdmach_rc_iface_config_t;

typedef struct uct_rdmach_iface_config {
    ucx_ext_sm_iface_config_t super;
    unsigned long         ring_size;         /* UCS_ULUNITS_AUTO: the wire's ring bytes */
    unsigned long         large_ring_size;
    unsigned              large_rings;
    size_t                slot_size;
    size_t                chunk_size;
    double                lazy_tail;
    size_t                zcopy_thresh;
    size_t                eager_limit;
    size_t                staged_copy;
    int                   staged_pick;
    unsigned              max_peers;
    unsigned              sweep_interval;
    unsigned              hot_max;
    unsigned              rx_budget;
    int                   poll_all;
    uct_rdmach_rc_iface_config_t rc;     /* the RC wire's own (rdmach_rc_config.c) */
} uct_rdmach_iface_config_t;

/* ---- the wires' own knobs ----
 * A wire with knobs of its own has a sub-table of the iface's configuration, read by a file of
 * its own (rdmach_rc_config.c), and is listed in rdmach_wire_knobs.c. Every iface open checks
 * every wire's knobs (UCX reads them all: a bad value fails whatever device is opened) and
 * hands the opened wire its own, so the glue never asks which wire it runs on. */
typedef struct uct_rdmach_wire_knobs {
    const rdmach_wire_ops_t *wire;
    /* UCS_OK, or an error naming the first bad knob */
    ucs_status_t (*check)(const uct_rdmach_iface_config_t *config);
    /* the wire's config (the type its header names) from config, into buf of size bytes */
    void         (*get)(const uct_rdmach_iface_config_t *config, void *buf);
} uct_rdmach_wire_knobs_t;

extern const uct_rdmach_wire_knobs_t uct_rdmach_rc_knobs;
extern ucs_config_field_t uct_rdmach_rc_config_table[];

#define UCT_RDMACH_WIRE_CONFIG_MAX 64   /* bytes of the largest wire config (each file asserts) */

/* Checks every wire's knobs; *wire_config: the opened wire's, in buf (NULL: it has none). */
ucs_status_t uct_rdmach_wire_knobs_read(const uct_rdmach_iface_config_t *config,
                                        const rdmach_wire_ops_t *wire, void *buf,
                                        const void **wire_config);

/* One iface class for every wire, on UCX's sm iface, and this is the one place that says so.
 * What rdmach takes from it holds on any wire: the config (UCX's sm knobs: BW, latency
 * overhead; ucx_ext_sm.h), the fence, the host identity as device address (shm). What differs
 * per wire comes from the wire's capabilities record (rdmach_wire_caps_t) and nowhere else:
 * a wire off this host (this_host 0: RC) gets its own device address and reachability,
 * INTER_NODE and its port's bandwidth (uct_rdmach_iface_query), and ep-to-ep connection
 * (to_ep). A second class would only copy that. */
typedef struct uct_rdmach_iface {
    uct_sm_iface_t        super;
    ucx_ext_iface_t       x;             /* pending, flush, peer liveness (uct/common) */
    rdmach_wire_t         *wire;         /* our rings and the peers reached (rdmach_wire.h) */
    volatile uint32_t     *next_ring;    /* wire->next_ring: read on every progress call */
    rdmach_geom_t         geom;
    size_t                chunk_size;
    size_t                zcopy_thresh;  /* rendezvous by get_zcopy from this size */
    size_t                eager_limit;   /* eager below this size (UCP's rndv floor) */
    size_t                max_short;     /* am_short payload incl. the 8-byte header */
    size_t                put_max_short; /* max_short, on a network wire the inline WRITE */
    rdmach_poller_t       poller;
    void                  *bounce;       /* chunk_size staging for bcopy near the ring end */
    uct_rdmach_amo_t      *amo_pool;     /* device atomics in flight (NULL: none) */
    uct_rdmach_amo_t      *amo_free;
    unsigned              amo_inflight;
    unsigned              fenced;        /* eps blocked by a fence (uct_rdmach_ep_fence) */
    struct {                             /* the last value seen of recent words: a loop's */
        uint64_t          word, value;   /* first guess (rdmach_amo.c) */
    }                     amo_seen[64];
    ucs_queue_head_t      amo_stalled;   /* their steps waiting for wire resources */
    int                   amo_cpu;       /* CPU atomics (shm): mapped, else served */
    ucs_queue_head_t      amo_served;    /* atomics the targets serve (rdmach_amo_cpu.c) */
    uint64_t              amo_token;     /* the last served atomic's */
    uint64_t              *amo_replies;  /* their reply slots: a segment targets map */
    ucx_ext_xmem_desc_t   amo_replies_desc;
    struct {                             /* requesters' reply segments mapped here (a
                                          * miss maps one: tens of us; 64 of 2 MiB are
                                          * address space only) */
        ucx_ext_xmem_desc_t desc;
        uint8_t             *local;
    }                     serve_peers[64];
    unsigned              serve_next;    /* the entry the next new requester replaces */
    ucs_list_link_t       conns;         /* rings claimed in peer ifaces (uct_rdmach_conn_t) */
    unsigned              reap_calls;    /* progress calls since the last look for gone senders */
    int                   armed;         /* asleep since the last arm: the next progress
                                          * wakes the rings (uct_rdmach_iface_awake) */
    ucs_time_t            next_reap, next_proc_reap;
} uct_rdmach_iface_t;

UCS_CLASS_DECLARE(uct_rdmach_iface_t, uct_md_h, uct_worker_h, const uct_iface_params_t*,
                  const uct_iface_config_t*);

extern ucs_config_field_t uct_rdmach_iface_config_table[];

ucs_status_t uct_rdmach_query_devices(uct_md_h md, uct_tl_device_resource_t **devices_p,
                                      unsigned *num_devices_p);

/* A wire's -errno as a status: the codes the wire table names, else fallback (what the
 * failing step reported before it was behind the table). */
static inline ucs_status_t uct_rdmach_wire_status(int err, ucs_status_t fallback)
{
    switch (-err) {
    case 0:
        return UCS_OK;
    case ESRCH:
    case ENOENT:
    case EHOSTUNREACH:
        return UCS_ERR_UNREACHABLE;
    case ENOSPC:
    case ENOBUFS:
        return UCS_ERR_EXCEEDS_LIMIT;
    case ENODEV:
        return UCS_ERR_NO_DEVICE;
    case EOPNOTSUPP:
        return UCS_ERR_UNSUPPORTED;
    default:
        return fallback;
    }
}

/* ---- ep ---- */

/* The sending side of one ring claimed in a peer iface (connect to iface). UCT's eps to an
 * iface carry nothing of their own on the wire, so every ep of this iface to that peer iface
 * sends into the same ring (records are whole messages; eps are only queues in front of it),
 * and the ring stays ours until this iface closes: any number of eps, and connect/disconnect
 * churn between two ifaces, take one ring and one credit line. */
typedef struct uct_rdmach_conn {
    rdmach_tx_t          tx;
    ucs_list_link_t      list;
    rdmach_wire_peer_t   *peer;
    uint32_t             ring_id;
    unsigned             refs;        /* eps sending into it */
} uct_rdmach_conn_t;

/* Progress calls between looks for senders that have gone (uct_rdmach_iface_reap). */
#define RDMACH_REAP_CALLS 1024

/* Takes back the rings of senders that have gone (the wire's reap) and gives up ours in
 * receivers that have gone: every PEER_CHECK_INTERVAL, or at once with now_anyway (the wire
 * has rings ready to take back: reap_ready). From progress only: it delivers what such a
 * ring still holds. */
void uct_rdmach_iface_reap(uct_rdmach_iface_t *iface, int now_anyway);

typedef struct uct_rdmach_ep {
    ucx_ext_ep_t         super;       /* pending group, peer process watch (uct/common) */
    rdmach_tx_t          *tx;         /* &own_tx (ep to ep) or the shared conn's */
    rdmach_tx_t          own_tx;
    uint32_t             ring_id;
    rdmach_wire_peer_t   *peer;       /* the receiving iface, for RMA and flush */
    uint32_t             amo_busy;    /* device or served atomics in flight (rdmach_amo.c),
                                       * and served puts and gets */
    ucs_time_t           serve_rma_after; /* no served put or get before this time: the
                                       * target did not serve the last one in time */
    ucs_time_t           serve_seen;  /* the target last answered a served request: one
                                       * queued behind others is timed from here */
    uint8_t              fenced;      /* UCT_RDMACH_FENCE_*: blocked (super.blocked) behind
                                       * operations that run on after return */
} uct_rdmach_ep_t;

/* What a fenced ep waits for: the wire's operations to its peer, or to any peer (an iface
 * fence). */
enum { UCT_RDMACH_FENCE_NONE = 0, UCT_RDMACH_FENCE_PEER = 1, UCT_RDMACH_FENCE_ALL = 2 };

UCX_EXT_EP_CLASS_DECLARE(uct_rdmach_ep_t);

UCX_EXT_EP_AM_DECLARE(uct_rdmach_ep);
UCX_EXT_EP_RMA_DECLARE(uct_rdmach_ep);

/* Connect ep to ep (a wire with ep addresses: RC). */
ucs_status_t uct_rdmach_ep_get_address(uct_ep_h tl_ep, uct_ep_addr_t *addr);
ucs_status_t uct_rdmach_ep_connect_to_ep(uct_ep_h tl_ep, const uct_device_addr_t *dev_addr,
                                         const uct_ep_addr_t *ep_addr);

ucs_status_t uct_rdmach_ep_check(uct_ep_h tl_ep, unsigned flags, uct_completion_t *comp);
ucs_status_t uct_rdmach_ep_fence(uct_ep_h tl_ep, unsigned flags);
ucs_status_t uct_rdmach_iface_fence(uct_iface_h tl_iface, unsigned flags);

/* The wire says the peer's iface has closed (ucx_ext_iface_t.peer_closed). */
int uct_rdmach_ep_peer_closed(ucx_ext_ep_t *ep);

/* Room in the ring for the largest record (the pending queue's test, see ucx_ext_base.h). */
int uct_rdmach_ep_tx_ready(ucx_ext_ep_t *ep);

/* 1 if rkey names this peer (its process on shared memory) and a region holding the whole
 * access of length bytes at remote_addr. */
static UCS_F_ALWAYS_INLINE int
uct_rdmach_ep_key_holds(const uct_rdmach_ep_t *ep, uct_rkey_t rkey, uint64_t remote_addr,
                        size_t length)
{
    const uct_rdmach_rkey_t *key = (const uct_rdmach_rkey_t*)rkey;

    return (rkey != UCT_INVALID_RKEY) && (key->pid == ep->super.pid) &&
           ucx_ext_range_within(remote_addr, length, key->address, key->length);
}

/* The remote key of an access of length bytes at remote_addr, or NULL (logged) unless it
 * holds the access (uct_rdmach_ep_key_holds). */
static UCS_F_ALWAYS_INLINE const uct_rdmach_rkey_t *
uct_rdmach_ep_key(uct_rdmach_ep_t *ep, const char *op, size_t length, uint64_t remote_addr,
                  uct_rkey_t rkey)
{
    const uct_rdmach_rkey_t *key = (const uct_rdmach_rkey_t*)rkey;

    if (ucs_unlikely(!uct_rdmach_ep_key_holds(ep, rkey, remote_addr, length))) {
        ucs_error("rdmach: %s of %zu bytes at 0x%" PRIx64 " is outside the remote key's region",
                  op, length, remote_addr);
        return NULL;
    }
    return key;
}

/* The local address of an access through a key whose segment is mapped here, else NULL. */
static UCS_F_ALWAYS_INLINE void *uct_rdmach_ep_mapped(uct_rkey_t rkey, uint64_t remote_addr,
                                                      size_t length)
{
    return ucx_ext_rkey_local(ucx_ext_rkey_map(rkey, sizeof(uct_rdmach_rkey_t)), remote_addr,
                              length);
}

/* While the target serves an atomic of this ep (memory it could not map), later RMA and
 * atomics wait: they must not overtake it (UCT's fence and flush order). So do they while a
 * fence waits (the ep is blocked: AM sends wait in ucx_ext_ep_must_queue). */
static UCS_F_ALWAYS_INLINE int uct_rdmach_ep_serving(const uct_rdmach_ep_t *ep,
                                                     const uct_rdmach_iface_t *iface)
{
    return ucs_unlikely((iface->amo_cpu && (ep->amo_busy != 0)) || ep->super.blocked);
}

/* Before an atomic: blocks the ep while its puts and gets still run on the wire (shm's
 * cooperative copies); 1 if it did (rdmach_ep.c says why). */
int uct_rdmach_ep_order_atomic(uct_rdmach_iface_t *iface, uct_rdmach_ep_t *ep);

/* Eps blocked by a fence whose operations are done are unblocked (from progress). */
unsigned uct_rdmach_ep_fence_progress(uct_rdmach_iface_t *iface);

/* ---- atomics (rdmach_amo.c): the device's on a wire whose device has them, else CPU
 * atomics on shared memory (rdmach_amo_cpu.c) ---- */

/* Internal records of the ring (above UCT's AM ids): an atomic the target serves, and a
 * small put or get it serves (rdmach_serve_rma.c). */
#define UCT_RDMACH_AM_SERVE     UCT_AM_ID_MAX
#define UCT_RDMACH_AM_SERVE_RMA (UCT_AM_ID_MAX + 1)
/* Served puts and gets: at most this many bytes, carried in the request's reply slot. */
#define UCT_RDMACH_SERVE_RMA_MAX RDMACH_SERVE_RMA_MAX

ucs_status_t uct_rdmach_amo_serve_start(uct_rdmach_amo_t *req);
ucs_status_t uct_rdmach_amo_serve_init(uct_rdmach_iface_t *iface);
void uct_rdmach_amo_serve_cleanup(uct_rdmach_iface_t *iface);
/* A served atomic's record, at the target, from the process the wire knows as its ring's
 * sender. */
void uct_rdmach_amo_serve(uct_rdmach_iface_t *iface, int32_t sender, const void *data,
                          uint32_t length);
unsigned uct_rdmach_amo_served_progress(uct_rdmach_iface_t *iface);
/* A put or get of length bytes (> 0) on a key we cannot map may be served by the target
 * (rdmach_serve_rma.c): on shared memory (CPU atomics: the served requests' pool and reply
 * segment), up to UCT_RDMACH_SERVE_RMA_MAX bytes. A get needs a completion. */
static UCS_F_ALWAYS_INLINE int uct_rdmach_serve_rma_fits(const uct_rdmach_iface_t *iface,
                                                         size_t length)
{
    return iface->amo_cpu && (length <= UCT_RDMACH_SERVE_RMA_MAX);
}

/* A put or get that uct_rdmach_serve_rma_fits, served by the target's progress unless it
 * failed to serve one lately, the ring is full or the pool is empty (rdmach_serve_rma.c):
 * UCS_OK (a put: done as far as the caller goes; the ep's flush waits for it),
 * UCS_INPROGRESS (a get: comp follows, after unpack_cb), or UCS_ERR_UNSUPPORTED when it
 * goes the one-sided way instead (process_vm). */
ucs_status_t uct_rdmach_serve_rma_start(uct_rdmach_ep_t *ep, const uct_rdmach_rkey_t *key,
                                        uint64_t remote_addr, const void *put_data,
                                        size_t length, uct_unpack_callback_t unpack_cb,
                                        void *unpack_arg, uct_completion_t *comp);
/* A served put's or get's record, at the target, from the process the wire knows as its
 * ring's sender. */
void uct_rdmach_serve_rma(uct_rdmach_iface_t *iface, int32_t sender, const void *data,
                          uint32_t length);
void uct_rdmach_amo_finish(uct_rdmach_amo_t *req, uint64_t old, ucs_status_t status);
void uct_rdmach_amo_release(uct_rdmach_iface_t *iface, uct_rdmach_amo_t *req);

ucs_status_t uct_rdmach_amo_init(uct_rdmach_iface_t *iface);
void uct_rdmach_amo_cleanup(uct_rdmach_iface_t *iface);
void uct_rdmach_amo_query(uct_rdmach_iface_t *iface, uct_iface_attr_t *attr);
unsigned uct_rdmach_amo_progress(uct_rdmach_iface_t *iface);
void uct_rdmach_amo_ep_cleanup(uct_rdmach_ep_t *ep);

ucs_status_t uct_rdmach_ep_atomic64_post(uct_ep_h tl_ep, unsigned opcode, uint64_t value,
                                         uint64_t remote_addr, uct_rkey_t rkey);
ucs_status_t uct_rdmach_ep_atomic32_post(uct_ep_h tl_ep, unsigned opcode, uint32_t value,
                                         uint64_t remote_addr, uct_rkey_t rkey);
ucs_status_t uct_rdmach_ep_atomic64_fetch(uct_ep_h tl_ep, uct_atomic_op_t opcode,
                                          uint64_t value, uint64_t *result,
                                          uint64_t remote_addr, uct_rkey_t rkey,
                                          uct_completion_t *comp);
ucs_status_t uct_rdmach_ep_atomic32_fetch(uct_ep_h tl_ep, uct_atomic_op_t opcode,
                                          uint32_t value, uint32_t *result,
                                          uint64_t remote_addr, uct_rkey_t rkey,
                                          uct_completion_t *comp);
ucs_status_t uct_rdmach_ep_atomic_cswap64(uct_ep_h tl_ep, uint64_t compare, uint64_t swap,
                                          uint64_t remote_addr, uct_rkey_t rkey,
                                          uint64_t *result, uct_completion_t *comp);
ucs_status_t uct_rdmach_ep_atomic_cswap32(uct_ep_h tl_ep, uint32_t compare, uint32_t swap,
                                          uint64_t remote_addr, uct_rkey_t rkey,
                                          uint32_t *result, uct_completion_t *comp);

#endif
