/*
 * rdmach iface: opens the wire of its device (rdmach_wire.h: the rings this process receives on
 * and the peers it reaches) and polls the rings.
 */
#include "rdmach_uct.h"
#include "ucx_ext_perf.h"

#include <ucs/arch/cpu.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/string.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

static uct_iface_ops_t uct_rdmach_iface_ops;
static ucx_ext_internal_ops_t uct_rdmach_internal_ops;

ucs_config_field_t uct_rdmach_iface_config_table[] = {
    {"", "", NULL, ucs_offsetof(uct_rdmach_iface_config_t, super),
     UCS_CONFIG_TYPE_TABLE(ucx_ext_sm_iface_config_table)},

    {"RING_SIZE", "auto",
     "Slots in each per-connection ring (a power of two). The ring lives in the receiver's\n"
     "memory and is written only by its sender. auto: 128 KiB of slots.",
     ucs_offsetof(uct_rdmach_iface_config_t, ring_size), UCS_CONFIG_TYPE_ULUNITS},

    {"LARGE_RING_SIZE", "auto",
     "Slots of the rings of the first LARGE_RINGS senders on shared memory (a power of two;\n"
     "no effect unless above RING_SIZE). auto: 2 MiB of slots, beyond a core's private\n"
     "cache: a sender then rewrites a slot after its lines have left the receiver's cache,\n"
     "which makes 2-64 KiB messages much cheaper (perf/bench p2p measured it). Only what\n"
     "senders write becomes resident: at most 2 MiB per large ring.",
     ucs_offsetof(uct_rdmach_iface_config_t, large_ring_size), UCS_CONFIG_TYPE_ULUNITS},

    {"LARGE_RINGS", "8",
     "How many senders (the first to connect) get a ring of LARGE_RING_SIZE slots on shared\n"
     "memory; the others get RING_SIZE. Bounds the memory of the rings of an iface at\n"
     "LARGE_RINGS x 2 MiB + further senders x 128 KiB by default. 0: every ring RING_SIZE.",
     ucs_offsetof(uct_rdmach_iface_config_t, large_rings), UCS_CONFIG_TYPE_UINT},

    {"SLOT_SIZE", "auto",
     "Bytes per ring slot, a multiple of 64. A record takes whole slots; a short active\n"
     "message up to 256 bytes with its header. auto: 128 on shared memory, where a receiver\n"
     "reading 8-byte messages back to back took twice as long per message with slots of 256\n"
     "(UCP tag message rate 12.7 against 21-25 million/s; the ring's bytes the same); 256 on\n"
     "a verbs port.",
     ucs_offsetof(uct_rdmach_iface_config_t, slot_size), UCS_CONFIG_TYPE_MEMUNITS},

    {"CHUNK_SIZE", "16k",
     "Largest bcopy/zcopy active message, i.e. the pipelining chunk: UCP splits larger eager\n"
     "messages into chunks of this size that flow through the ring back to back.",
     ucs_offsetof(uct_rdmach_iface_config_t, chunk_size), UCS_CONFIG_TYPE_MEMUNITS},

    {"LAZY_TAIL", "0.25",
     "Fraction of the ring the receiver consumes before it writes its tail back to the\n"
     "sender (lazy tail update).",
     ucs_offsetof(uct_rdmach_iface_config_t, lazy_tail), UCS_CONFIG_TYPE_DOUBLE},

    {"EAGER_LIMIT", "auto",
     "Messages below this size are sent eagerly, pipelined through the ring in CHUNK_SIZE\n"
     "records. From it on UCP uses rendezvous: the data moves once the receiver is ready,\n"
     "through the ring below ZCOPY_THRESH, by zero copy from it on. auto: ZCOPY_THRESH's\n"
     "auto on shared memory, where from there zero copy by both processes at once beats the\n"
     "ring's two copies; 256k on a verbs port, where rendezvous moves the data by RDMA\n"
     "READ (perf/bench p2p and rdmach-rc measured both).",
     ucs_offsetof(uct_rdmach_iface_config_t, eager_limit), UCS_CONFIG_TYPE_MEMUNITS},

    {"ZCOPY_THRESH", "auto",
     "Rendezvous messages from this size on move by zero copy: get_zcopy, i.e.\n"
     "process_vm_readv on shared memory, RDMA READ on a verbs port. Below it their data is\n"
     "pipelined through the ring. RMA put/get below it go in CHUNK_SIZE bcopy pieces.\n"
     "On shared memory a zero copy of 64k or more is shared: the process whose memory is\n"
     "read (written) takes chunks of it from its progress while the reader copies the rest,\n"
     "so two cores walk and pin pages at once (cooperative zero copy).\n"
     "auto: on shared memory 64k, or 32k where the probe of STAGED_PICK finds the page walk\n"
     "cheap against a memcpy (perf/bench p2p measured both against the ring and sm); any\n"
     "size on a verbs port, where zero copy saves both of the ring's copies.",
     ucs_offsetof(uct_rdmach_iface_config_t, zcopy_thresh), UCS_CONFIG_TYPE_MEMUNITS},

    {"STAGED_COPY", "1m",
     "On shared memory, zero-copy gets of 64k up to this size (at most 16m; 0: none) are\n"
     "staged: the process whose memory is read, idle in its progress, copies it in 16k\n"
     "pieces into its segment, and the reader copies them out, two memcpys instead of the\n"
     "kernel's page walk in process_vm_readv. The reader copies what is left itself when\n"
     "the owner does not help (it computes). Whether it pays depends on the machine (the\n"
     "page walk against the line transfers between the cores): see STAGED_PICK.",
     ucs_offsetof(uct_rdmach_iface_config_t, staged_copy), UCS_CONFIG_TYPE_MEMUNITS},

    {"STAGED_PICK", "y",
     "Stage gets (STAGED_COPY) only where that is faster on this machine: a probe at the\n"
     "first iface compares a 64k process_vm_readv with a memcpy (logged at info level);\n"
     "where the two are close, the traffic is timed both ways now and then, per class of\n"
     "sizes (a ping-pong's get, or a window of them, one way at a time). n: stage every\n"
     "get up to STAGED_COPY.",
     ucs_offsetof(uct_rdmach_iface_config_t, staged_pick), UCS_CONFIG_TYPE_BOOL},

    {"MAX_PEERS", "256",
     "Rings in this process's segment, i.e. how many senders can connect to it. Costs\n"
     "address space only until a ring is used.",
     ucs_offsetof(uct_rdmach_iface_config_t, max_peers), UCS_CONFIG_TYPE_UINT},

    {"SWEEP_INTERVAL", "64",
     "Progress calls between two sweeps over idle (cold) rings.",
     ucs_offsetof(uct_rdmach_iface_config_t, sweep_interval), UCS_CONFIG_TYPE_UINT},

    {"HOT_MAX", "8",
     "Most rings polled on every progress call; further active rings are found through\n"
     "their doorbells, which keeps a progress call's cost bounded when many peers talk.",
     ucs_offsetof(uct_rdmach_iface_config_t, hot_max), UCS_CONFIG_TYPE_UINT},

    {"RX_BUDGET", "16",
     "Records delivered per ring per progress call.",
     ucs_offsetof(uct_rdmach_iface_config_t, rx_budget), UCS_CONFIG_TYPE_UINT},

    {"POLL_ALL", "n",
     "Poll every connected ring on every progress call, as the paper's design does. For\n"
     "comparison: perf/bench scaling measures both; the default polls only active rings plus\n"
     "doorbells, which costs less per call the more peers are connected.",
     ucs_offsetof(uct_rdmach_iface_config_t, poll_all), UCS_CONFIG_TYPE_BOOL},

    /* the RC wire's own knobs: RC_TIMEOUT, RC_RETRY_COUNT, RC_SRQ, XRC (rdmach_rc_config.c) */
    {"", "", NULL, ucs_offsetof(uct_rdmach_iface_config_t, rc),
     UCS_CONFIG_TYPE_TABLE(uct_rdmach_rc_config_table)},

    {NULL}
};

/* The wire's event fd, -1 when it cannot wake a sleeping iface. */
static int uct_rdmach_wire_event_fd(const rdmach_wire_t *wire)
{
    return (wire->ops->event_fd != NULL) ? wire->ops->event_fd(wire) : -1;
}

static ucs_status_t uct_rdmach_iface_query(uct_iface_h tl_iface, uct_iface_attr_t *attr)
{
    uct_rdmach_iface_t *iface = ucs_derived_of(tl_iface, uct_rdmach_iface_t);
    const ucx_ext_sm_caps_t caps = {
        .am_max_short  = iface->max_short,
        .am_align      = UCS_SYS_CACHE_LINE_SIZE,
        /* below EAGER_LIMIT messages go eagerly, pipelined through the ring */
        .rndv_floor    = iface->eager_limit,
        /* put/get are the wire's RDMA write/read (process_vm_writev/readv on shm) */
        .put_max_short = iface->put_max_short,
        .max_bcopy     = iface->chunk_size,
        /* below it the receiver asks for the data (RTR) and the sender pipelines it through
         * the ring; put's floor too, else rendezvous falls back to put_zcopy */
        .zcopy_thresh  = iface->zcopy_thresh,
        .latency       = iface->wire->latency
    };

    const rdmach_wire_t *wire      = iface->wire;
    const rdmach_wire_caps_t *wcap = &wire->ops->caps;

    ucx_ext_sm_iface_query(&iface->super, wire->ops->iface_addr_len, &caps, attr);
    attr->overhead = wcap->overhead;
    if (wcap->this_host) {
        /* the copy model's BW is one core's copy rate; shm's zero copy is shared by the two
         * processes (cooperative zero copy, rdmach_shm_copy.c). UCP also splits a rendezvous
         * over every lane within MULTI_LANE_MAX_RATIO (4) of the best one: at one core's rate
         * ud_zcopy's loopback (4.8 GB/s) qualified, and with UCX_TLS=rdmach,ud_zcopy a
         * quarter of every on-host 1 MiB message went through UDP (MPICH bandwidth 7.0 GB/s
         * against 12.7 with rdmach alone). */
        attr->bandwidth.dedicated *= wcap->copy_cores;
    } else {
        /* other hosts: the wire's device address, the port's bandwidth */
        attr->device_addr_len     = wire->ops->dev_addr_len;
        attr->cap.flags          |= UCX_EXT_IFACE_FLAG_INTER_NODE;
        attr->bandwidth.dedicated = 0;
        attr->bandwidth.shared    = wire->bandwidth;
    }
    if (wcap->to_ep) {
        /* ep to ep (RC); zero copy from ZCOPY_THRESH also for put and get (auto: any size, as
         * UCP finds worth it against registration) */
        attr->cap.flags        &= ~(uint64_t)UCT_IFACE_FLAG_CONNECT_TO_IFACE;
        attr->cap.flags        |= UCT_IFACE_FLAG_CONNECT_TO_EP;
        attr->ep_addr_len       = wire->ops->ep_addr_len;
        attr->cap.put.min_zcopy = iface->zcopy_thresh;
        attr->cap.get.min_zcopy = iface->zcopy_thresh;
        attr->cap.put.max_iov   = ucs_min(attr->cap.put.max_iov, RDMACH_WIRE_MAX_IOV);
        attr->cap.get.max_iov   = ucs_min(attr->cap.get.max_iov, RDMACH_WIRE_MAX_IOV);
    }
    uct_rdmach_amo_query(iface, attr);
    if (uct_rdmach_wire_event_fd(wire) >= 0) {
        attr->cap.event_flags = UCX_EXT_EVENT_FLAGS;
    }
    return UCS_OK;
}

static ucs_status_t uct_rdmach_iface_get_address(uct_iface_h tl_iface, uct_iface_addr_t *addr)
{
    rdmach_wire_t *wire = ucs_derived_of(tl_iface, uct_rdmach_iface_t)->wire;

    wire->ops->pack_addr(wire, addr);
    return UCS_OK;
}

/* A wire without a device address is on this host: the host identity of ucx_ext_sm.h. */
static ucs_status_t uct_rdmach_iface_get_device_address(uct_iface_h tl_iface,
                                                        uct_device_addr_t *addr)
{
    rdmach_wire_t *wire = ucs_derived_of(tl_iface, uct_rdmach_iface_t)->wire;

    if (wire->ops->caps.this_host) {
        return ucx_ext_sm_get_device_address(tl_iface, addr);
    }
    wire->ops->pack_dev_addr(wire, addr);
    return UCS_OK;
}

static int uct_rdmach_iface_is_reachable(const uct_iface_h tl_iface,
                                         const uct_device_addr_t *dev_addr,
                                         const uct_iface_addr_t *iface_addr)
{
    rdmach_wire_t *wire = ucs_derived_of(tl_iface, uct_rdmach_iface_t)->wire;
    rdmach_wire_addr_t info;

    if (wire->ops->caps.this_host && !ucx_ext_sm_is_same_host(dev_addr)) {
        return 0;
    }
    /* without an iface address only the device can be judged (this host: done above) */
    if ((iface_addr == NULL) && wire->ops->caps.this_host) {
        return 1;
    }
    return wire->ops->unpack_addr(wire, dev_addr, iface_addr, &info) == 0;
}

/* A sender claimed ring 'id' of ours: the wire finds where its credit goes. */
static int uct_rdmach_iface_activate(void *arg, uint32_t id)
{
    uct_rdmach_iface_t *iface = arg;

    return iface->wire->ops->activate(iface->wire, id, &iface->poller.rx[id]);
}

/* A served request's record (rdmach_serve.h) from ring rx: served only on a wire that knows
 * the ring's sender, for whom alone the reply is. */
static UCS_F_NOINLINE void uct_rdmach_iface_serve(uct_rdmach_iface_t *iface,
                                                  const rdmach_rx_t *rx, uint8_t am_id,
                                                  const void *data, uint32_t length)
{
    rdmach_wire_t *wire = iface->wire;
    int32_t sender;

    if (((am_id != UCT_RDMACH_AM_SERVE) && (am_id != UCT_RDMACH_AM_SERVE_RMA)) ||
        (wire->ops->ring_sender == NULL) || !iface->amo_cpu ||
        (wire->ops->ring_sender(wire, (uint32_t)(rx - iface->poller.rx), &sender) != 0)) {
        /* from a misbehaving peer, or one this wire does not serve: never index am[] */
        uct_rdmach_counters.rx.corrupt++;
        UCT_RDMACH_COUNT_OWN(serve_dropped);
        return;
    }
    if (am_id == UCT_RDMACH_AM_SERVE) {
        uct_rdmach_amo_serve(iface, sender, data, length);   /* rdmach_amo_cpu.c */
    } else {
        uct_rdmach_serve_rma(iface, sender, data, length);   /* rdmach_serve_rma.c */
    }
}

static void uct_rdmach_iface_deliver(void *arg, const rdmach_rx_t *rx, uint8_t am_id,
                                     void *data, uint32_t length)
{
    uct_rdmach_iface_t *iface = arg;

    if (ucs_unlikely(am_id >= UCT_AM_ID_MAX)) {
        uct_rdmach_iface_serve(iface, rx, am_id, data, length);
        return;
    }
    uct_iface_trace_am(&iface->super.super, UCT_AM_TRACE_TYPE_RECV, am_id, data, length,
                       "RX: AM");
    uct_iface_invoke_am(&iface->super.super, am_id, data, length, 0);
}

/* A ring whose sender has gone: what it wrote last is delivered (one lap at most: a live
 * peer that set its closed word may write on), then the ring is forgotten (the wire zeroes it
 * and lets a new sender claim it). */
static void uct_rdmach_iface_drain(void *arg, uint32_t id)
{
    uct_rdmach_iface_t *iface = arg;

    if (iface->poller.rx[id].active) {
        rdmach_rx_drain(&iface->poller.rx[id], uct_rdmach_iface_deliver, iface,
                        &uct_rdmach_counters.rx);
    }
    rdmach_poller_forget(&iface->poller, id);
    uct_rdmach_counters.rings_reaped++;
    ucs_debug("rdmach iface %p: ring %u taken back, its sender has gone", iface, id);
}

/* Every RDMACH_REAP_CALLS progress calls: the rings of senders that have gone are taken back,
 * so clients that come and go never use up a server's rings, memory or descriptors. A closed
 * iface is one load per peer, looked for every PEER_CHECK_INTERVAL, and every time once all
 * rings have been claimed (new senders then wait for rings taken back); a dead process is a
 * read of /proc per peer, looked for every 8 intervals. */
void uct_rdmach_iface_reap(uct_rdmach_iface_t *iface, int now_anyway)
{
    ucs_time_t now = ucs_get_time();
    uct_rdmach_conn_t *conn, *tmp;
    int procs;

    iface->reap_calls = 0;
    if ((iface->wire->ops->reap == NULL) ||
        (!now_anyway && (now < iface->next_reap) &&
         (__atomic_load_n(iface->next_ring, __ATOMIC_RELAXED) < iface->poller.max_rings))) {
        return;
    }
    iface->next_reap = now + iface->x.peer_check_interval;
    procs            = (now >= iface->next_proc_reap);
    if (procs) {
        iface->next_proc_reap = now + 8 * iface->x.peer_check_interval;
    }
    iface->wire->ops->reap(iface->wire, procs, uct_rdmach_iface_drain, iface);
    /* our rings kept for eps that may come again, in receivers that have gone (a server's
     * replies to clients that have left): given up, with their credit lines and mappings */
    ucs_list_for_each_safe(conn, tmp, &iface->conns, list) {
        if ((conn->refs == 0) && conn->peer->gone && (iface->wire->ops->unclaim != NULL)) {
            iface->wire->ops->unclaim(iface->wire, conn->peer, &conn->tx);
            ucs_list_del(&conn->list);
            ucs_free(conn);
            uct_rdmach_counters.rings_unclaimed++;
        }
    }
}

/* ---- wakeup: the wire's event fd, armed by making every ring cold (rdmach_ring.h) ---- */

static UCS_F_NOINLINE void uct_rdmach_iface_awake(uct_rdmach_iface_t *iface)
{
    iface->armed = 0;
    iface->wire->ops->awake(iface->wire);
    rdmach_poller_wake(&iface->poller, __atomic_load_n(iface->next_ring, __ATOMIC_ACQUIRE));
}

static ucs_status_t uct_rdmach_iface_event_fd_get(uct_iface_h tl_iface, int *fd_p)
{
    uct_rdmach_iface_t *iface = ucs_derived_of(tl_iface, uct_rdmach_iface_t);

    return ucx_ext_iface_event_fd(uct_rdmach_wire_event_fd(iface->wire), fd_p);
}

/* On shared memory sends complete at return; on RC their completions raise the channel
 * too. Requests waiting in the pending queue, or atomics waiting for room, keep a worker
 * that waits for send completions awake. Shared memory's posted copies keep any worker
 * awake: they end from our progress, with no event, and a rendezvous receiver waits for
 * its message, not for a send. */
static ucs_status_t uct_rdmach_iface_event_arm(uct_iface_h tl_iface, unsigned events)
{
    uct_rdmach_iface_t *iface = ucs_derived_of(tl_iface, uct_rdmach_iface_t);
    rdmach_wire_t *wire       = iface->wire;
    ucs_status_t status       = ucx_ext_iface_arm_check(&iface->x, events,
                                                        !ucs_queue_is_empty(&iface->amo_stalled) ||
                                                        !ucs_queue_is_empty(&iface->amo_served));

    if ((iface->fenced != 0) ||
        (wire->ops->fence_query &&
         (wire->ops->flush(wire, NULL, NULL) == RDMACH_WIRE_INPROGRESS))) {
        return UCS_ERR_BUSY;
    }

    if ((status != UCS_OK) ||
        (!(events & UCX_EXT_EVENTS_RECV) && !iface->wire->ops->caps.arm_sends)) {
        return status;
    }
    rdmach_poller_sleep(&iface->poller, __atomic_load_n(iface->next_ring, __ATOMIC_ACQUIRE));
    iface->armed = 1;
    if ((iface->wire->ops->sleep(iface->wire) != 0) ||
        rdmach_poller_pending(&iface->poller,
                              __atomic_load_n(iface->next_ring, __ATOMIC_ACQUIRE))) {
        uct_rdmach_iface_awake(iface);
        return UCS_ERR_BUSY;
    }
    uct_rdmach_counters.sleeps++;
    return UCS_OK;
}

static UCS_F_ALWAYS_INLINE unsigned uct_rdmach_iface_poll(uct_rdmach_iface_t *iface)
{
    unsigned count;

    if (ucs_unlikely(iface->armed)) {
        uct_rdmach_iface_awake(iface);
    }

    iface->reap_calls += 1 + iface->poller.skipped;    /* with the quiet calls before */
    if (ucs_unlikely(iface->reap_calls >= RDMACH_REAP_CALLS)) {
        uct_rdmach_iface_reap(iface, 0);
    }

    /* the poller clamps the claim counter, which senders write, to max_rings */
    count = rdmach_poller_progress(&iface->poller,
                                   __atomic_load_n(iface->next_ring, __ATOMIC_ACQUIRE),
                                   uct_rdmach_iface_activate, uct_rdmach_iface_deliver, iface);
    if (ucs_unlikely(!ucs_queue_is_empty(&iface->amo_served))) {
        count += uct_rdmach_amo_served_progress(iface);
    }
    if (ucs_unlikely(ucx_ext_iface_has_pending(&iface->x))) {
        count += ucx_ext_iface_progress_pending(&iface->x);
    }
    return count;
}

/* The wire's completions (RC's CQ; shm's desk of peers' cooperative copies), what they
 * unblock (stalled atomics, fenced eps, rings of closed connections), then the rings and the
 * pending queue. */
static UCS_F_ALWAYS_INLINE int uct_rdmach_wire_quiet(const rdmach_wire_t *wire)
{
    return (wire->quiet[0] != NULL) && (*wire->quiet[0] == 0) && (*wire->quiet[1] == 0);
}

static UCS_F_NOINLINE unsigned uct_rdmach_iface_progress_full(uct_rdmach_iface_t *iface)
{
    unsigned count = uct_rdmach_wire_quiet(iface->wire) ? 0 :
                     iface->wire->ops->progress(iface->wire);

    /* rings of closed connections whose QPs are quiet come back now (RC) */
    if (ucs_unlikely(iface->wire->reap_ready != 0)) {
        uct_rdmach_iface_reap(iface, 1);
    }

    if (ucs_unlikely(!ucs_queue_is_empty(&iface->amo_stalled))) {
        count += uct_rdmach_amo_progress(iface);
    }
    if (ucs_unlikely(iface->fenced != 0)) {
        count += uct_rdmach_ep_fence_progress(iface);
    }
    return count + uct_rdmach_iface_poll(iface);
}

/* The short ways first (rdmach_poller_look says why they matter): when the wire has nothing
 * and none of the rare states holds, an empty call returns, and a record in the only hot ring
 * is handed over at once. Kept apart from the rest, so that they save no registers. */
static unsigned uct_rdmach_iface_progress(uct_iface_h tl_iface)
{
    uct_rdmach_iface_t *iface = ucs_derived_of(tl_iface, uct_rdmach_iface_t);
    const rdmach_wire_t *wire = iface->wire;

    if (uct_rdmach_wire_quiet(wire) &&
        ucs_likely(!iface->armed && (wire->reap_ready == 0) && !iface->fenced &&
                   ucs_queue_is_empty(&iface->amo_stalled) &&
                   ucs_queue_is_empty(&iface->amo_served) &&
                   !ucx_ext_iface_has_pending(&iface->x))) {
        switch (rdmach_poller_look(&iface->poller,
                                   __atomic_load_n(iface->next_ring, __ATOMIC_ACQUIRE))) {
        case RDMACH_POLL_QUIET:
            return 0;
        case RDMACH_POLL_ONE:
            return rdmach_poller_one(&iface->poller, uct_rdmach_iface_deliver, iface);
        default:
            break;
        }
    }
    return uct_rdmach_iface_progress_full(iface);
}

/* Ops the wire completes at return (shm: ring stores, synchronous process_vm) leave only the
 * requests still waiting in the pending queue to keep the iface from being flushed. */
static ucs_status_t uct_rdmach_iface_flush(uct_iface_h tl_iface, unsigned flags,
                                           uct_completion_t *comp)
{
    uct_rdmach_iface_t *iface = ucs_derived_of(tl_iface, uct_rdmach_iface_t);
    ucs_status_t status;
    int ret;

    if ((comp != NULL) && !iface->wire->ops->caps.flush_comp) {
        return UCS_ERR_UNSUPPORTED;   /* as UCX's RC transports: the caller polls */
    }
    ucs_memory_cpu_store_fence();
    status = ucx_ext_iface_flush_queued(&iface->x);
    if (status != UCS_OK) {
        return status;
    }
    if (iface->wire->ops->flush == NULL) {
        /* served atomics (rdmach_amo_cpu.c) are done when their replies come */
        return (iface->amo_inflight != 0) ? UCS_INPROGRESS : UCS_OK;
    }
    ret = iface->wire->ops->flush(iface->wire, NULL, comp);
    if (ret == -EAGAIN) {
        return UCS_ERR_NO_RESOURCE;
    }
    if (iface->amo_inflight != 0) {
        return UCS_INPROGRESS;   /* a loop's next step may still come (rdmach_amo.c) */
    }
    return (ret == RDMACH_WIRE_INPROGRESS) ? UCS_INPROGRESS :
           uct_rdmach_wire_status(ret, UCS_ERR_IO_ERROR);
}

static void uct_rdmach_wire_log(int error, const char *fmt, ...)
{
    char msg[256];
    va_list ap;

    if (!ucs_log_is_enabled((error == RDMACH_WIRE_LOG_INFO) ? UCS_LOG_LEVEL_INFO :
                            error ? UCS_LOG_LEVEL_ERROR : UCS_LOG_LEVEL_DIAG)) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (error == RDMACH_WIRE_LOG_INFO) {
        ucs_info("%s", msg);
    } else if (error) {
        ucs_error("%s", msg);
    } else {
        ucs_diag("%s", msg);
    }
}

/* A connection of the wire broke (RC: retries exhausted, QP in error): its ep fails, reported
 * from the worker's progress. */
static void uct_rdmach_wire_failed(void *ep_ctx, int err)
{
    ucx_ext_ep_set_failed(&((uct_rdmach_ep_t*)ep_ctx)->super, UCS_ERR_ENDPOINT_TIMEOUT);
}

/* A wire's asynchronous operation is done: comp is the UCT completion it was given. */
static void uct_rdmach_wire_complete(void *comp, int err)
{
    uct_invoke_completion(comp, uct_rdmach_wire_status(err, UCS_ERR_IO_ERROR));
}

/* A ring's bytes when RING_SIZE / LARGE_RING_SIZE are auto: what 512 and 8192 slots of 256
 * bytes were, so that the slot size alone decides how a ring is cut */
#define RDMACH_RING_BYTES       (128ul * 1024)
#define RDMACH_LARGE_RING_BYTES (2ul * 1024 * 1024)

/* The slots of a ring: the knob's value, or (auto) a power of two spanning bytes. A value
 * above 32 bits stays invalid (not a power of two) for rdmach_geom_init to name. */
static uint32_t uct_rdmach_ring_slots(unsigned long knob, unsigned long bytes, uint32_t slot)
{
    if (knob == UCS_ULUNITS_AUTO) {
        return ucs_roundup_pow2(ucs_max(bytes / slot, 2));
    }
    return (knob > UINT32_MAX) ? UINT32_MAX : (uint32_t)knob;
}

/* Knob ranges beyond what the ring geometry checks (rdmach_geom_init). */
static const ucx_ext_knob_t uct_rdmach_knobs[] = {
    UCX_EXT_KNOB(uct_rdmach_iface_config_t, "MAX_PEERS", max_peers, UINT, 1, 65536),
    UCX_EXT_KNOB(uct_rdmach_iface_config_t, "LARGE_RINGS", large_rings, UINT, 0, 65536),
    UCX_EXT_KNOB(uct_rdmach_iface_config_t, "SWEEP_INTERVAL", sweep_interval, UINT, 1, UINT_MAX),
    UCX_EXT_KNOB(uct_rdmach_iface_config_t, "HOT_MAX", hot_max, UINT, 1, UINT_MAX),
    UCX_EXT_KNOB(uct_rdmach_iface_config_t, "RX_BUDGET", rx_budget, UINT, 1, UINT_MAX),
    UCX_EXT_KNOB(uct_rdmach_iface_config_t, "ZCOPY_THRESH", zcopy_thresh, SIZE, 1, SIZE_MAX),
    UCX_EXT_KNOB(uct_rdmach_iface_config_t, "EAGER_LIMIT", eager_limit, SIZE, 1, SIZE_MAX),
    UCX_EXT_KNOB(uct_rdmach_iface_config_t, "STAGED_COPY", staged_copy, SIZE, 0,
                 RDMACH_WIRE_STAGE_MAX),
};

UCS_CLASS_INIT_FUNC(uct_rdmach_iface_t, uct_md_h md, uct_worker_h worker,
                           const uct_iface_params_t *params,
                           const uct_iface_config_t *tl_config)
{
    const uct_rdmach_iface_config_t *config = ucs_derived_of(tl_config,
                                                             uct_rdmach_iface_config_t);
    uint64_t wire_buf[UCT_RDMACH_WIRE_CONFIG_MAX / sizeof(uint64_t)];
    rdmach_wire_params_t wire_params;
    const void *wire_config;
    rdmach_geom_t geom_large;
    uint32_t large_rings, slot_size, ring_size, large_size;
    const rdmach_wire_ops_t *wire_ops;
    ucs_status_t status;
    const char *err;
    int ret;

    UCS_CLASS_CALL_SUPER_INIT(uct_sm_iface_t, &uct_rdmach_iface_ops,
                              &uct_rdmach_internal_ops.super, md, worker, params, tl_config);

    status = ucx_ext_iface_check_params(params, UCT_RDMACH_NAME);
    if (status != UCS_OK) {
        return status;
    }

    wire_ops = ucs_derived_of(md, uct_rdmach_md_t)->wire;
    if (wire_ops == NULL) {
        wire_ops = rdmach_wire_find(params->mode.device.dev_name);
    }
    if (wire_ops == NULL) {
        ucs_error("rdmach: no wire serves device '%s'", params->mode.device.dev_name);
        return UCS_ERR_NO_DEVICE;
    }

    slot_size = (config->slot_size == UCS_MEMUNITS_AUTO) ? wire_ops->caps.slot_size :
                (uint32_t)ucs_min(config->slot_size, UINT32_MAX);
    ring_size = uct_rdmach_ring_slots(config->ring_size, RDMACH_RING_BYTES, slot_size);
    err       = rdmach_geom_init(&self->geom, slot_size, ring_size, config->chunk_size,
                                 config->lazy_tail);
    if (err != NULL) {
        return ucx_ext_config_error(UCT_RDMACH_NAME, UCT_RDMACH_PREFIX, "%s", err);
    }
    status = ucx_ext_config_check(UCT_RDMACH_NAME, UCT_RDMACH_PREFIX, config, uct_rdmach_knobs,
                                  ucs_static_array_size(uct_rdmach_knobs));
    if (status != UCS_OK) {
        return status;
    }
    status = uct_rdmach_wire_knobs_read(config, wire_ops, wire_buf, &wire_config);
    if (status != UCS_OK) {
        return status;
    }
    /* a large ring no longer than RING_SIZE has no effect; the geometry checks name
     * RING_SIZE, this one is LARGE_RING_SIZE */
    geom_large  = self->geom;
    large_rings = 0;
    large_size = uct_rdmach_ring_slots(config->large_ring_size, RDMACH_LARGE_RING_BYTES,
                                       slot_size);
    if ((large_size > ring_size) || (config->large_ring_size != UCS_ULUNITS_AUTO)) {
        /* a value set by hand is checked even where it has no effect */
        err = rdmach_geom_init(&geom_large, self->geom.slot_size, large_size,
                               config->chunk_size, config->lazy_tail);
        if (err != NULL) {
            return ucx_ext_config_error(UCT_RDMACH_NAME, UCT_RDMACH_PREFIX, "LARGE_%s", err);
        }
        if (large_size > ring_size) {
            large_rings = ucs_min(config->large_rings, config->max_peers);
        } else {
            geom_large = self->geom;
        }
    }

    self->chunk_size          = config->chunk_size;
    self->zcopy_thresh        = config->zcopy_thresh;
    self->eager_limit         = config->eager_limit;   /* auto: resolved with the wire */
    self->max_short           = ucs_max(self->geom.slot_size, RDMACH_SHORT_REC_MAX) -
                                RDMACH_REC_HDR_SIZE;
    self->wire                = NULL;
    ucs_list_head_init(&self->conns);
    self->reap_calls          = 0;
    self->armed               = 0;
    self->fenced              = 0;
    self->next_reap           = 0;
    self->next_proc_reap      = 0;
    ucx_ext_iface_init(&self->x, &self->super.super, UCT_RDMACH_NAME,
                       &uct_rdmach_counters.tx, uct_rdmach_ep_tx_ready,
                       config->super.peer_check_interval);

    self->bounce     = ucs_malloc(self->chunk_size, "rdmach_bounce");
    self->poller.rx  = ucs_calloc(config->max_peers, sizeof(rdmach_rx_t), "rdmach_rx");
    self->poller.hot = ucs_calloc(config->max_peers, sizeof(uint32_t), "rdmach_hot");
    if ((self->bounce == NULL) || (self->poller.rx == NULL) || (self->poller.hot == NULL)) {
        status = UCS_ERR_NO_MEMORY;
        goto err_free;
    }

    /* our rings: config->max_peers senders can connect, and this iface can make as many
     * connections (one credit line each); peers are reached both ways */
    memset(&wire_params, 0, sizeof(wire_params));
    wire_params.dev_name  = params->mode.device.dev_name;
    wire_params.domain    = ucs_derived_of(md, uct_rdmach_md_t)->domain;
    wire_params.geom      = self->geom;
    wire_params.geom_large  = geom_large;
    wire_params.large_rings = large_rings;
    wire_params.max_rings = config->max_peers;
    wire_params.max_peers = config->max_peers * 2;
    wire_params.uuid      = ucs_generate_uuid((uintptr_t)self);
    wire_params.stats     = &uct_rdmach_counters.rx;
    wire_params.wire_stats = &uct_rdmach_counters.wire;
    wire_params.log       = uct_rdmach_wire_log;
    wire_params.complete  = uct_rdmach_wire_complete;
    wire_params.failed    = uct_rdmach_wire_failed;
    wire_params.config    = wire_config;
    wire_params.stage_max = config->staged_copy;
    wire_params.stage_measure = config->staged_pick;
    wire_params.may_read  = uct_rdmach_md_covers;
    ret = wire_ops->open(&wire_params, &self->wire);
    if (ret != 0) {
        status = uct_rdmach_wire_status(ret, UCS_ERR_NO_MEMORY);
        goto err_free;
    }
    self->next_ring     = self->wire->next_ring;
    self->put_max_short = ucs_min(self->max_short, self->wire->max_inline);
    if (config->eager_limit == UCS_MEMUNITS_AUTO) {
        self->eager_limit = self->wire->zcopy_auto ? self->wire->zcopy_auto :
                                                     wire_ops->caps.eager_limit;
    }
    if (config->zcopy_thresh == UCS_MEMUNITS_AUTO) {
        self->zcopy_thresh = self->wire->zcopy_auto ? self->wire->zcopy_auto :
                                                      wire_ops->caps.zcopy_thresh;
    }
    if (wire_ops->peer_closed != NULL) {
        self->x.peer_closed = uct_rdmach_ep_peer_closed;
    }
    status = uct_rdmach_amo_init(self);
    if (status != UCS_OK) {
        self->wire->ops->close(self->wire);
        goto err_free;
    }

    self->poller.nhot           = 0;
    self->poller.hot_max        = ucs_min(config->hot_max, config->max_peers);
    self->poller.max_rings      = config->max_peers;
    self->poller.doorbells      = self->wire->doorbells;
    self->poller.sweep_interval = config->sweep_interval;
    self->poller.sweep_count    = 0;
    self->poller.idle_limit     = RDMACH_IDLE_LIMIT;
    self->poller.budget         = config->rx_budget;
    self->poller.poll_all       = config->poll_all;
    self->poller.stats          = &uct_rdmach_counters.rx;
    self->poller.skipped        = 0;
    self->poller.took           = 0;

    ucs_debug("rdmach iface %p: %s wire, %u rings of %u x %u bytes (on shared memory the "
              "first %u of %u slots), chunk %zu, segment %zu bytes", self, wire_ops->name,
              config->max_peers, self->geom.nslots, self->geom.slot_size, large_rings,
              geom_large.nslots, self->chunk_size, self->wire->size);
    return UCS_OK;

err_free:
    ucs_free(self->bounce);
    ucs_free(self->poller.rx);
    ucs_free(self->poller.hot);
    return status;
}

UCS_CLASS_CLEANUP_FUNC(uct_rdmach_iface_t)
{
    uct_rdmach_conn_t *conn, *tmp;

    uct_base_iface_progress_disable(&self->super.super.super,
                                    UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    ucx_ext_iface_cleanup(&self->x);
    ucs_list_for_each_safe(conn, tmp, &self->conns, list) {
        ucs_free(conn);
    }
    self->wire->ops->close(self->wire);
    uct_rdmach_amo_cleanup(self);
    ucs_free(self->bounce);
    ucs_free(self->poller.rx);
    ucs_free(self->poller.hot);
}

UCS_CLASS_DEFINE(uct_rdmach_iface_t, uct_sm_iface_t);
static UCS_CLASS_DEFINE_NEW_FUNC(uct_rdmach_iface_t, uct_iface_t, uct_md_h, uct_worker_h,
                                 const uct_iface_params_t*, const uct_iface_config_t*);
static UCS_CLASS_DEFINE_DELETE_FUNC(uct_rdmach_iface_t, uct_iface_t);

/* The devices of an md: its wire's in its domain, or those of the wires without domains. */
ucs_status_t uct_rdmach_query_devices(uct_md_h tl_md, uct_tl_device_resource_t **devices_p,
                                      unsigned *num_devices_p)
{
    uct_rdmach_md_t *md = ucs_derived_of(tl_md, uct_rdmach_md_t);
    rdmach_wire_dev_t devs[RDMACH_WIRE_MAX_DEVS];
    const rdmach_wire_ops_t *const *w;
    uct_tl_device_resource_t *devices;
    unsigned d, n = 0;

    if (md->wire != NULL) {
        n = md->wire->query_devices(md->domain, devs, RDMACH_WIRE_MAX_DEVS);
    }
    for (w = rdmach_wires; (md->wire == NULL) && (*w != NULL); ++w) {
        if ((*w)->query_domains == NULL) {
            n += (*w)->query_devices(NULL, devs + n, RDMACH_WIRE_MAX_DEVS - n);
        }
    }
    devices = ucs_calloc(ucs_max(n, 1), sizeof(*devices), "device resource");
    if (devices == NULL) {
        ucs_error("failed to allocate device resource");
        return UCS_ERR_NO_MEMORY;
    }
    for (d = 0; d < n; ++d) {
        ucs_snprintf_zero(devices[d].name, sizeof(devices[d].name), "%s", devs[d].name);
        devices[d].type       = (devs[d].type == RDMACH_WIRE_DEV_SHM) ? UCT_DEVICE_TYPE_SHM :
                                                                       UCT_DEVICE_TYPE_NET;
        devices[d].sys_device = UCS_SYS_DEVICE_ID_UNKNOWN;
    }
    *devices_p     = devices;
    *num_devices_p = n;
    return UCS_OK;
}

/* Per operation (ucx_ext_perf.h): on this host a ring's copy runs on one core and a zero copy
 * (from ZCOPY_THRESH) on both, after its system call; on a verbs port the HCA's model. */
static ucs_status_t uct_rdmach_iface_estimate_perf(uct_iface_h tl_iface,
                                                   uct_perf_attr_t *perf_attr)
{
    const rdmach_wire_caps_t *wcap = &ucs_derived_of(tl_iface, uct_rdmach_iface_t)->wire->ops->caps;
    const ucx_ext_perf_copy_t copy = {
        .iface_cores    = wcap->copy_cores,   /* what uct_rdmach_iface_query multiplied in */
        .zcopy_cores    = wcap->copy_cores,   /* the cooperative copy's cores: the same ones */
        .zcopy_overhead = wcap->zcopy_overhead
    };

    return wcap->this_host ? ucx_ext_perf_copy_estimate(tl_iface, perf_attr, &copy) :
                             ucx_ext_perf_hca_estimate(tl_iface, perf_attr);
}

/* What UCP asks besides the iface ops (ucx_ext_compat.h) */
static const ucx_ext_iface_hooks_t uct_rdmach_iface_hooks = {
    .is_reachable     = uct_rdmach_iface_is_reachable,
    .ep_is_connected  = ucx_ext_ep_is_connected,
    .ep_connect_to_ep = uct_rdmach_ep_connect_to_ep,
    .estimate_perf    = uct_rdmach_iface_estimate_perf
};

static ucx_ext_internal_ops_t uct_rdmach_internal_ops =
        UCX_EXT_INTERNAL_OPS(&uct_rdmach_iface_hooks);

static uct_iface_ops_t uct_rdmach_iface_ops = {
    UCX_EXT_OPS_AM(uct_rdmach_ep),
    .ep_am_zcopy              = UCX_EXT_UNSUPPORTED(uct_ep_am_zcopy_func_t),
    UCX_EXT_OPS_RMA(uct_rdmach_ep),
    /* device atomics where the wire has them (rdmach_amo.c); the caps tell UCP */
    .ep_atomic_cswap64        = uct_rdmach_ep_atomic_cswap64,
    .ep_atomic_cswap32        = uct_rdmach_ep_atomic_cswap32,
    .ep_atomic32_post         = uct_rdmach_ep_atomic32_post,
    .ep_atomic64_post         = uct_rdmach_ep_atomic64_post,
    .ep_atomic32_fetch        = uct_rdmach_ep_atomic32_fetch,
    .ep_atomic64_fetch        = uct_rdmach_ep_atomic64_fetch,
    UCX_EXT_OPS_NO_TAG,
    .ep_get_address           = uct_rdmach_ep_get_address,
    .ep_connect_to_ep         = uct_rdmach_ep_connect_to_ep,
    UCX_EXT_OPS_EVENTS(uct_rdmach_iface),
    UCX_EXT_OPS_PENDING,
    UCX_EXT_OPS_LIFE(uct_rdmach_ep_t, uct_rdmach_iface_t),
    .ep_fence                 = uct_rdmach_ep_fence,
    .iface_fence              = uct_rdmach_iface_fence,
    .ep_check                 = uct_rdmach_ep_check,
    .iface_get_device_address = uct_rdmach_iface_get_device_address,
    UCX_EXT_OPS_IFACE(uct_rdmach_iface)
};

UCT_TL_DEFINE_ENTRY(&uct_rdmach_component.super, rdmach, uct_rdmach_query_devices,
                    uct_rdmach_iface_t, UCT_RDMACH_PREFIX, uct_rdmach_iface_config_table,
                    uct_rdmach_iface_config_t);
