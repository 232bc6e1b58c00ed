/*
 * ud_zcopy iface: a wire opened on one device (udz_wire.h; UDP: a control socket plus a pool of
 * data-channel sockets), and the protocol core that runs over it.
 */
#include "udz_uct.h"
#include "ucx_ext_perf.h"

#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/string.h>
#include <ucs/sys/sys.h>
#include <ucs/time/time.h>
#include <errno.h>
#include <sys/random.h>
#include <time.h>

static uct_iface_ops_t uct_udz_iface_ops;
static ucx_ext_internal_ops_t uct_udz_internal_ops;

ucs_config_field_t uct_udz_iface_config_table[] = {
    {"", "", NULL, ucs_offsetof(uct_udz_iface_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_iface_config_table)},

    {"SEG_SIZE", "16k",
     "Largest control datagram (eager active messages, puts), header included. Capped at the\n"
     "device MTU minus the IP and UDP headers, so that a datagram is never IP-fragmented\n"
     "(one lost fragment would lose the whole datagram).",
     ucs_offsetof(uct_udz_iface_config_t, seg_size), UCS_CONFIG_TYPE_MEMUNITS},

    {"CHUNK_SIZE", "auto",
     "Payload bytes per zero-copy datagram. auto: the device MTU minus the IP, UDP and\n"
     "ud_zcopy headers (64k loopback: 65475 bytes; Ethernet 1500: 1440 bytes), and for a\n"
     "peer whose route carries more, the route's (a peer on this host is reached through\n"
     "loopback whatever the device: 65475 bytes).",
     ucs_offsetof(uct_udz_iface_config_t, chunk_size), UCS_CONFIG_TYPE_MEMUNITS},

    {"TX_WINDOW", "auto",
     "Reliable datagrams in flight (sent, not yet acked) per peer, 1..32768. auto: 2 MiB of\n"
     "full-size datagrams, from 128 to half of TX_POOL: 128 of 16 KiB through loopback, 512\n"
     "across a 1500-byte MTU (where 128 would leave 180 KiB in flight); 128 over InfiniBand UD.\n"
     "An auto window above 128 halves at every loss, down to 128, and grows back\n"
     "while packets are acked; a number is a fixed window.",
     ucs_offsetof(uct_udz_iface_config_t, tx_window), UCS_CONFIG_TYPE_ULUNITS},

    {"TX_POOL", "1024",
     "Send buffers per iface, shared by all peers (memory grows with traffic in flight, not\n"
     "with the number of peers). At least TX_WINDOW.",
     ucs_offsetof(uct_udz_iface_config_t, tx_pool), UCS_CONFIG_TYPE_UINT},

    {"ACK_EVERY", "16",
     "Send a standalone ack after this many received datagrams without reverse traffic.",
     ucs_offsetof(uct_udz_iface_config_t, ack_every), UCS_CONFIG_TYPE_UINT},

    {"ACK_DELAY", "50us",
     "... or after this delay.",
     ucs_offsetof(uct_udz_iface_config_t, ack_delay), UCS_CONFIG_TYPE_TIME},

    {"RTO", "2ms",
     "Smallest retransmission timeout. Per peer it follows the measured round trip (smoothed\n"
     "round trip + 4 x its variation, as TCP), and doubles on every retransmission up to RTO_MAX.",
     ucs_offsetof(uct_udz_iface_config_t, rto), UCS_CONFIG_TYPE_TIME},

    {"RTO_MAX", "500ms",
     "Largest retransmission timeout (backoff cap).",
     ucs_offsetof(uct_udz_iface_config_t, rto_max), UCS_CONFIG_TYPE_TIME},

    {"PEER_TIMEOUT", "30s",
     "A peer that acknowledges nothing for this long has failed: its endpoints get an error.",
     ucs_offsetof(uct_udz_iface_config_t, peer_timeout), UCS_CONFIG_TYPE_TIME},

    {"CHANNELS", "8",
     "Zero-copy data channels (sockets) per iface: how many gets can be in flight at once\n"
     "(the paper's pool of UD queue pairs).",
     ucs_offsetof(uct_udz_iface_config_t, channels), UCS_CONFIG_TYPE_UINT},

    {"ZC_WINDOW", "2m",
     "Bytes of one zero-copy transfer in flight before the receiver acknowledges them.",
     ucs_offsetof(uct_udz_iface_config_t, zc_window), UCS_CONFIG_TYPE_MEMUNITS},

    {"ZC_MAX", "16m",
     "Largest get in one transfer; UCP splits larger ones.",
     ucs_offsetof(uct_udz_iface_config_t, zc_max), UCS_CONFIG_TYPE_MEMUNITS},

    {"ZCOPY_THRESH", "32k",
     "Rendezvous messages from this size on move by zero copy (get_zcopy over a data\n"
     "channel); UCP sends smaller ones eagerly.",
     ucs_offsetof(uct_udz_iface_config_t, zcopy_thresh), UCS_CONFIG_TYPE_MEMUNITS},

    {"RX_BATCH", "32",
     "Datagrams received per system call (recvmmsg), at most 64.",
     ucs_offsetof(uct_udz_iface_config_t, rx_batch), UCS_CONFIG_TYPE_UINT},

    {"MAX_PEERS", "65536",
     "Peers this iface keeps state for (a few hundred bytes each, created on first contact).",
     ucs_offsetof(uct_udz_iface_config_t, max_peers), UCS_CONFIG_TYPE_UINT},

    {"RCVBUF", "8m",
     "Socket receive buffer of the control socket and of each data channel (as root beyond\n"
     "net.core.rmem_max).",
     ucs_offsetof(uct_udz_iface_config_t, rcvbuf), UCS_CONFIG_TYPE_MEMUNITS},

    {"SNDBUF", "4m",
     "Socket send buffer of the control socket.",
     ucs_offsetof(uct_udz_iface_config_t, sndbuf), UCS_CONFIG_TYPE_MEMUNITS},

    {"GRO", "y",
     "Data channels receive coalesced runs of zero-copy datagrams (UDP GRO), one system call\n"
     "per run, scattered straight into the destination. n: one datagram at a time (recvmmsg).",
     ucs_offsetof(uct_udz_iface_config_t, gro), UCS_CONFIG_TYPE_BOOL},

    {"ON_HOST", "auto",
     "Serve peers on this host (same kernel, network, PID and IPC namespaces), which a\n"
     "shared-memory transport reaches too. auto: not when UCX_TLS names ud_zcopy (not as aux)\n"
     "with a transport that carries active messages on one host (sm, shm, mm, posix, sysv,\n"
     "rdmach, unimem) and UCX_SHM_DEVICES is unset or \"all\"; y: always; n: never. UCP\n"
     "1.13 would otherwise add ud_zcopy as a second rendezvous lane to such a peer, and\n"
     "progress it.",
     ucs_offsetof(uct_udz_iface_config_t, on_host), UCS_CONFIG_TYPE_TERNARY_AUTO},

    {"ASYNC_TICK", "10ms",
     "Period of the async progress timer, which keeps acks and retransmissions going while\n"
     "the application computes, and delivers UCP's wireup messages (what an auxiliary\n"
     "transport needs: UCX_TLS=rdmach,ud_zcopy:aux). 0: progress only when called.",
     ucs_offsetof(uct_udz_iface_config_t, async_tick), UCS_CONFIG_TYPE_TIME},

    UCX_EXT_RCACHE_CONFIG_ENTRIES(uct_udz_iface_config_t, rcache, rcache_config,
                                  "the InfiniBand UD wire (the destinations its data channels\n"
                                  "receive into; the UDP wire registers nothing)"),

    {NULL}
};

/* A datagram's trip through loopback, one way: UCT's am_lat of 8 bytes over lo on the Intel
 * Xeon VM (docs/ud_zcopy.md, "ud_zcopy's figures by datagram size and by device"). */
#define UCT_UDZ_LOOPBACK_LATENCY 2.5e-6

/* The share of a datagram of 'payload' bytes (and its headers and framing) that is payload. */
static double uct_udz_dgram_share(size_t payload)
{
    return (double)payload / (double)(payload + UDZ_HDR_LEN + UDZ_DGRAM_HEADERS);
}

static ucs_status_t uct_udz_iface_query(uct_iface_h tl_iface, uct_iface_attr_t *attr)
{
    uct_udz_iface_t *iface = ucs_derived_of(tl_iface, uct_udz_iface_t);
    size_t put_max         = iface->max_payload - sizeof(udz_put_t);

    uct_base_iface_query(&iface->super, attr);

    attr->iface_addr_len  = iface->wops->iface_addr_len + sizeof(uint64_t);
    attr->device_addr_len = iface->wops->dev_addr_len + sizeof(uct_udz_host_id_t);
    attr->ep_addr_len     = 0;
    attr->max_conn_priv   = 0;
    attr->cap.flags       = UCT_IFACE_FLAG_CONNECT_TO_IFACE | UCT_IFACE_FLAG_AM_SHORT |
                            UCT_IFACE_FLAG_AM_BCOPY | UCT_IFACE_FLAG_AM_ZCOPY |
                            UCT_IFACE_FLAG_PUT_SHORT | UCT_IFACE_FLAG_PUT_BCOPY |
                            UCT_IFACE_FLAG_PUT_ZCOPY | UCT_IFACE_FLAG_GET_BCOPY |
                            UCT_IFACE_FLAG_GET_ZCOPY | UCT_IFACE_FLAG_PENDING |
                            UCT_IFACE_FLAG_CB_SYNC | UCT_IFACE_FLAG_EP_CHECK |
                            UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE |
                            UCX_EXT_IFACE_FLAG_INTER_NODE;   /* any IP network, or UD */
    if (iface->async.enabled) {
        /* the async timer delivers UCT_CB_FLAG_ASYNC handlers (udz_async.c) */
        attr->cap.flags |= UCT_IFACE_FLAG_CB_ASYNC;
    }
    if (iface->wops->event_fd != NULL) {
        attr->cap.event_flags = UCX_EXT_EVENT_FLAGS;   /* udz_wakeup.c */
    }

    attr->cap.am.max_short       = iface->max_payload;
    attr->cap.am.max_bcopy       = iface->max_payload;
    attr->cap.am.min_zcopy       = 0;
    attr->cap.am.max_zcopy       = iface->max_payload;
    attr->cap.am.max_hdr         = UCT_UDZ_AM_MAX_HDR(iface);
    attr->cap.am.max_iov         = UDZ_MAX_IOV;
    attr->cap.am.opt_zcopy_align = 1;
    attr->cap.am.align_mtu       = 1;

    attr->cap.put.max_short       = put_max;
    attr->cap.put.max_bcopy       = put_max;
    /* put_zcopy: one datagram sent from the caller's buffer, completed when acked */
    attr->cap.put.min_zcopy       = 0;
    attr->cap.put.max_zcopy       = put_max;
    attr->cap.put.max_iov         = UDZ_MAX_IOV;
    attr->cap.put.opt_zcopy_align = 1;
    attr->cap.put.align_mtu       = 1;

    attr->cap.get.max_short       = 0;
    attr->cap.get.max_bcopy       = iface->max_payload;    /* through a bounce buffer */
    /* UCP's rendezvous uses get_zcopy from get.min_zcopy on (any size works) */
    attr->cap.get.min_zcopy       = iface->zcopy_thresh;
    attr->cap.get.max_zcopy       = iface->zc_max;
    attr->cap.get.max_iov         = 1;
    attr->cap.get.opt_zcopy_align = 1;
    attr->cap.get.align_mtu       = 1;

    /* a network path's 10 us has a wire and the receiving host's interrupt in it; loopback's
     * trip is the host's own path. UCP 1.13 gives active messages to the iface of lowest
     * latency, whatever the bandwidth, and RMA to the one of highest bandwidth: loopback is
     * both, so one iface carries an on-host peer's gets and the atomics UCP emulates by active
     * messages, which a fence of UCP 1.13 orders only within one iface (Open MPI's Rget).
     * Each device adds its datagrams' header share of a microsecond, so that two networks of
     * different MTUs never tie: UCP 1.13 breaks a tie by the order in which it meets the
     * peer's addresses, which is not the same in a worker's address and in a wireup message,
     * and a simultaneous connect whose two selections differ aborts the process ("endpoint
     * reconfiguration not supported yet"). With the tie gone, the device of larger datagrams
     * has the lowest latency and the highest bandwidth, and gets every lane. */
    attr->latency             = ucs_linear_func_make((iface->loopback ?
                                                      UCT_UDZ_LOOPBACK_LATENCY : 10e-6) +
                                                     1e-6 * (1.0 - uct_udz_dgram_share(
                                                                       iface->max_payload)),
                                                     0);
    attr->bandwidth.dedicated = 0;
    /* What a 25G link gives a copy-based UDP path at a 1500-byte MTU (the measure of the
     * estimates UCP's thresholds were set by), scaled by the share of each datagram that is
     * payload, as UCX's tcp counts its MTU. A peer on this host is reached through every
     * device's iface, and this is how UCP tells that loopback carries messages in fewer,
     * larger datagrams: it takes lo's iface for active messages, as it takes tcp's (an eager
     * 4 KiB message is one datagram there, three on a 1400-byte MTU). */
    attr->bandwidth.shared    = 5e9 * uct_udz_dgram_share(iface->max_payload) /
                                uct_udz_dgram_share(1500 - 28 - UDZ_HDR_LEN);
    attr->overhead            = 1e-6;
    attr->priority            = 0;
    return UCS_OK;
}

static ucs_status_t uct_udz_iface_get_address(uct_iface_h tl_iface, uct_iface_addr_t *addr)
{
    uct_udz_iface_t *iface = ucs_derived_of(tl_iface, uct_udz_iface_t);

    iface->wops->iface_addr_pack(iface->wire, addr);
    memcpy(UCS_PTR_BYTE_OFFSET(addr, iface->wops->iface_addr_len), &iface->cookie,
           sizeof(iface->cookie));
    return UCS_OK;
}

static ucs_status_t uct_udz_iface_get_device_address(uct_iface_h tl_iface,
                                                     uct_device_addr_t *addr)
{
    uct_udz_iface_t *iface = ucs_derived_of(tl_iface, uct_udz_iface_t);
    uct_udz_host_id_t host = iface->host;

    /* the worker's ifaces are all open by the time UCP packs an address */
    host.flags = uct_udz_worker_loopback(iface) ? UCT_UDZ_HOST_VIA_LOOPBACK : 0;
    iface->wops->dev_addr_pack(iface->wire, addr);
    memcpy(UCS_PTR_BYTE_OFFSET(addr, iface->wops->dev_addr_len), &host, sizeof(host));
    return UCS_OK;
}

/* ---- the core's view of us ---- */

static void uct_udz_iface_am(void *user, udz_peer_t *peer, uint8_t am_id, void *data,
                             size_t len)
{
    uct_udz_iface_t *iface = user;

    if (ucs_unlikely(am_id >= UCT_AM_ID_MAX)) {
        if (am_id == UCT_UDZ_AM_ID_KEEPALIVE) {
            return;     /* its ack was the point */
        }
        uct_udz_counters.core.rx_corrupt++;     /* never index am[] with a peer's value */
        return;
    }
    if (ucs_unlikely(iface->async.in_timer) &&
        uct_udz_async_defer_am(iface, am_id, data, len)) {
        return;
    }
    uct_iface_trace_am(&iface->super, UCT_AM_TRACE_TYPE_RECV, am_id, data, len, "RX: AM");
    uct_iface_invoke_am(&iface->super, am_id, data, (unsigned)len, 0);
}

static void *uct_udz_iface_mem(void *user, uint64_t addr, uint64_t len, const uint8_t *rkey,
                               int write)
{
    return uct_udz_md_resolve(addr, len, rkey, write, NULL);
}

static void *uct_udz_iface_mem_hold(void *user, uint64_t addr, uint64_t len,
                                    const uint8_t *rkey, udz_mem_hold_t *hold)
{
    return uct_udz_md_resolve(addr, len, rkey, 0, hold);
}

static void uct_udz_iface_mem_unhold(void *user, udz_mem_hold_t *hold)
{
    uct_udz_md_unhold(hold);
}

static void uct_udz_iface_get_done(void *user, void *ctx, int status)
{
    uct_udz_iface_t *iface = user;
    uct_udz_getb_t *g      = ctx;

    if (ucs_unlikely(iface->async.in_timer) &&
        uct_udz_async_defer_event(iface, UCT_UDZ_ASYNC_GET_DONE, ctx, status)) {
        return;
    }
    if (status != 0) {
        UCT_UDZ_COUNT_OWN(get_failed, 1);
    }
    uct_udz_fence_kick(iface);  /* a channel, a get_bcopy buffer, a fence's wait */
    if ((g >= iface->getb) && (g < iface->getb + UDZ_MAX_CHANNELS)) {
        /* a get_bcopy: hand the bounce buffer to the caller's unpack */
        g->busy = 0;
        if (status == 0) {
            g->unpack_cb(g->arg, g->buf, g->length);
        }
        if (g->comp != NULL) {
            uct_invoke_completion(g->comp, uct_udz_status(status));
        }
        return;
    }
    if (ctx != NULL) {  /* UCT allows no completion: the caller flushes */
        uct_invoke_completion((uct_completion_t*)ctx, uct_udz_status(status));
    }
}

static void uct_udz_iface_send_done(void *user, void *ctx, int status)
{
    uct_udz_iface_t *iface = user;

    if ((ctx != NULL) && ucs_unlikely(iface->async.in_timer) &&
        uct_udz_async_defer_event(iface, UCT_UDZ_ASYNC_SEND_DONE, ctx, status)) {
        return;
    }
    if (ctx != NULL) {
        uct_invoke_completion((uct_completion_t*)ctx, uct_udz_status(status));
    }
}

static void uct_udz_iface_peer_failed(uct_udz_iface_t *iface, udz_peer_t *peer);

static void uct_udz_iface_core_peer_failed(void *user, udz_peer_t *peer)
{
    uct_udz_iface_t *iface = user;

    if (ucs_unlikely(iface->async.in_timer) &&
        uct_udz_async_defer_event(iface, UCT_UDZ_ASYNC_PEER_FAILED, peer, 0)) {
        return;
    }
    uct_udz_iface_peer_failed(iface, peer);
}

static void uct_udz_iface_resources(void *user)
{
    uct_udz_iface_t *iface = user;

    iface->pending_kick = 1;    /* dispatched by the progress that follows */
}

static uint64_t uct_udz_iface_now(void *user)
{
    return uct_udz_now_ns();
}

ucs_status_t uct_udz_iface_fence(uct_iface_h tl_iface, unsigned flags)
{
    uct_udz_fence_set(ucs_derived_of(tl_iface, uct_udz_iface_t));
    return UCS_OK;
}

static const udz_user_ops_t uct_udz_user_ops = {
    .now         = uct_udz_iface_now,
    .am          = uct_udz_iface_am,
    .mem         = uct_udz_iface_mem,
    .mem_hold    = uct_udz_iface_mem_hold,
    .mem_unhold  = uct_udz_iface_mem_unhold,
    .get_done    = uct_udz_iface_get_done,
    .send_done   = uct_udz_iface_send_done,
    .peer_failed = uct_udz_iface_core_peer_failed,
    .resources   = uct_udz_iface_resources,
};

static void uct_udz_iface_peer_failed(uct_udz_iface_t *iface, udz_peer_t *peer)
{
    ucx_ext_ep_t *ep;

    /* every ep to the peer fails (the base counts each in peer_failed) */
    ucs_list_for_each(ep, &iface->x.eps, list) {
        if (ucs_derived_of(ep, uct_udz_ep_t)->peer == peer) {
            uct_udz_ep_set_failed(ucs_derived_of(ep, uct_udz_ep_t));
        }
    }
}

static unsigned uct_udz_iface_progress(uct_iface_h tl_iface)
{
    uct_udz_iface_t *iface = ucs_derived_of(tl_iface, uct_udz_iface_t);
    unsigned count = 0;

    iface->wakeup.armed = 0;   /* awake: the async timer need not wake us */
    if (ucs_unlikely(!ucs_queue_is_empty(&iface->async.deferred))) {
        count += uct_udz_async_dispatch(iface);   /* before anything newer */
    }
    count += udz_core_progress(iface->core, uct_udz_now_ns());
    if (ucs_unlikely(iface->async.park_fd >= 0)) {
        uct_udz_async_unpark(iface);    /* a handshake taken here made a record */
    }
    if (ucs_unlikely(ucx_ext_iface_has_pending(&iface->x)) &&
        (iface->pending_kick || (++iface->pending_skips >= UCT_UDZ_PENDING_RETRY))) {
        iface->pending_kick  = 0;
        iface->pending_skips = 0;
        count += ucx_ext_iface_progress_pending(&iface->x);
    }
    if (ucs_unlikely(!ucs_list_is_empty(&iface->flushes))) {
        count += uct_udz_ep_check_flushes(iface);
    }
    udz_core_tx_flush(iface->core);  /* what the pending dispatch sent goes as one run */
    return count;
}

static ucs_status_t uct_udz_iface_flush(uct_iface_h tl_iface, unsigned flags,
                                        uct_completion_t *comp)
{
    uct_udz_iface_t *iface = ucs_derived_of(tl_iface, uct_udz_iface_t);

    if (comp != NULL) {
        return UCS_ERR_UNSUPPORTED;
    }
    udz_core_tx_flush(iface->core);  /* packets held for coalescing go now */
    /* UCP's worker flush polls this and takes anything but OK/INPROGRESS as a failure */
    if (!udz_core_idle(iface->core)) {
        return UCS_INPROGRESS;
    }
    return ucx_ext_iface_flush_queued(&iface->x);
}

#define uct_udz_config_error(_var, _what) \
    ucx_ext_config_error(UCT_UDZ_NAME, UCT_UDZ_PREFIX, "%s %s", _var, _what)

/* Knob ranges; the limits from the wire and the rules between knobs follow in
 * uct_udz_config_check. Sizes stay below 1e18: "auto" is not a size here. */
static const ucx_ext_knob_t uct_udz_knobs[] = {
    UCX_EXT_KNOB(uct_udz_iface_config_t, "TX_WINDOW", tx_window, ULUNITS, 1, 32768),
    UCX_EXT_KNOB(uct_udz_iface_config_t, "RTO", rto, DOUBLE, 1e-6, 60),
    UCX_EXT_KNOB(uct_udz_iface_config_t, "CHANNELS", channels, UINT, 1, UDZ_MAX_CHANNELS),
    UCX_EXT_KNOB(uct_udz_iface_config_t, "ZCOPY_THRESH", zcopy_thresh, SIZE, 1, 1e18),
    UCX_EXT_KNOB(uct_udz_iface_config_t, "RX_BATCH", rx_batch, UINT, 1, 64),
    UCX_EXT_KNOB(uct_udz_iface_config_t, "MAX_PEERS", max_peers, UINT, 1, 1u << 24),
    /* socket buffers: any size, the kernel rounds a small one up to its minimum (a queue
     * that fills at once is what UCX's own pending tests ask every transport for) */
    UCX_EXT_KNOB(uct_udz_iface_config_t, "RCVBUF", rcvbuf, SIZE, 1, INT_MAX),
    UCX_EXT_KNOB(uct_udz_iface_config_t, "SNDBUF", sndbuf, SIZE, 1, INT_MAX),
};

/* The largest datagram of any wire: SEG_SIZE's bound (a wire that carries less caps it). */
static size_t uct_udz_wires_max_dgram(void)
{
    const udz_wire_ops_t *const *w;
    size_t max = 0;

    for (w = udz_wires; *w != NULL; ++w) {
        max = ucs_max(max, (*w)->max_dgram);
    }
    return max;
}

/* Every knob checked on its own, so the message names the variable. max_dgram: the largest
 * datagram a chunk's may be (a wire that posts receives ahead receives one device MTU at
 * most per receive). */
static ucs_status_t uct_udz_config_check(const uct_udz_iface_config_t *c, size_t seg,
                                         size_t chunk, size_t max_dgram)
{
    ucs_status_t status;

    status = ucx_ext_config_check(UCT_UDZ_NAME, UCT_UDZ_PREFIX, c, uct_udz_knobs,
                                  ucs_static_array_size(uct_udz_knobs));
    if (status != UCS_OK) {
        return status;
    }
    if ((c->seg_size < UDZ_HDR_LEN + 256) || (c->seg_size > uct_udz_wires_max_dgram())) {
        return ucx_ext_config_error(UCT_UDZ_NAME, UCT_UDZ_PREFIX,
                                    "SEG_SIZE must be between %u and %zu bytes",
                                    UDZ_HDR_LEN + 256, uct_udz_wires_max_dgram());
    }
    if ((c->chunk_size != UCS_MEMUNITS_AUTO) &&
        ((c->chunk_size < 256) || (c->chunk_size > max_dgram - UDZ_HDR_LEN))) {
        return ucx_ext_config_error(UCT_UDZ_NAME, UCT_UDZ_PREFIX,
                                    "CHUNK_SIZE must be auto or between 256 and %zu",
                                    max_dgram - UDZ_HDR_LEN);
    }
    if ((c->tx_window != UCS_ULUNITS_AUTO) && (c->tx_pool < c->tx_window)) {
        return uct_udz_config_error("TX_POOL", "must be at least TX_WINDOW");
    }
    if ((c->ack_every == 0) || (c->ack_every > ucs_min(c->tx_window, c->tx_pool))) {
        return uct_udz_config_error("ACK_EVERY", "must be between 1 and TX_WINDOW (and TX_POOL)");
    }
    if ((c->ack_delay < 0) || (c->ack_delay >= c->rto)) {
        return uct_udz_config_error("ACK_DELAY", "must be shorter than RTO");
    }
    if (c->rto_max < c->rto) {
        return uct_udz_config_error("RTO_MAX", "must be at least RTO");
    }
    if (c->peer_timeout <= c->rto) {
        return uct_udz_config_error("PEER_TIMEOUT", "must be longer than RTO");
    }
    if ((c->zc_window == UCS_MEMUNITS_AUTO) || (c->zc_window < chunk)) {
        return uct_udz_config_error("ZC_WINDOW", "must be at least one CHUNK_SIZE");
    }
    if ((c->zc_max == UCS_MEMUNITS_AUTO) || (c->zc_max < chunk) ||
        (c->zc_max / chunk > (64u << 20))) {
        return uct_udz_config_error("ZC_MAX", "must be at least one CHUNK_SIZE "
                                    "and at most 64M chunks");
    }
    return UCS_OK;
}

/* The send window per peer. A count of datagrams bounds the bytes in flight by the path's
 * datagram size: the former 128 were 2 MiB through loopback (16 KiB datagrams) but 180 KiB
 * across a 1500-byte MTU, where a window of 64 eager 16 KiB messages stalled on it (about one
 * NO_RESOURCE per message) and Open MPI's bi-directional bandwidth of 16-32 KiB messages ran
 * 12-16% below what 512 gives (1024 gained nothing more). auto: 2 MiB of full-size datagrams,
 * from 128 to half of the pool every peer shares. A go-back costs the whole window, so a
 * window above 128 shrinks under loss down to 128 (udz_config_t.tx_window_min): with a fixed
 * 512, 1% loss cost 16 KiB messages 4x the retransmissions and a quarter of their bandwidth.
 * A wire that posts receives ahead (InfiniBand UD) drops what finds none posted, so it keeps
 * 128: more was not measured there. */
static unsigned uct_udz_tx_window(const uct_udz_iface_config_t *c, const udz_wire_ops_t *wops,
                                  size_t seg_size)
{
    size_t w;

    if (c->tx_window != UCS_ULUNITS_AUTO) {
        return (unsigned)c->tx_window;
    }
    w = wops->posts_ahead ? UCT_UDZ_TX_WINDOW_MIN :
        ucs_max(UCT_UDZ_TX_WINDOW_BYTES / seg_size, UCT_UDZ_TX_WINDOW_MIN);
    w = ucs_min(w, c->tx_pool / 2);
    return (unsigned)ucs_max(w, c->ack_every);
}

UCS_CLASS_INIT_FUNC(uct_udz_iface_t, uct_md_h md, uct_worker_h worker,
                    const uct_iface_params_t *params, const uct_iface_config_t *tl_config)
{
    const uct_udz_iface_config_t *config = ucs_derived_of(tl_config, uct_udz_iface_config_t);
    udz_wire_params_t wparams;
    udz_wire_attr_t wattr;
    udz_config_t cc;
    ucs_status_t status;
    size_t mtu, seg_max, max_dgram;
    char err[256];
    int ret;

    /* entry points hold the worker's async context, against the async progress timer */
    uct_udz_async_wrap_ops(&uct_udz_iface_ops);
    ucs_queue_head_init(&self->async.deferred);
    self->async.context  = NULL;
    self->async.timer_id = -1;
    self->async.park_fd  = -1;
    self->async.enabled  = 0;
    self->async.in_timer = 0;
    UCS_CLASS_CALL_SUPER_INIT(uct_base_iface_t, &uct_udz_iface_ops,
                              &uct_udz_internal_ops.super, md, worker, params,
                              tl_config UCS_STATS_ARG(NULL) UCS_STATS_ARG(UCT_UDZ_NAME));

    status = ucx_ext_iface_check_params(params, UCT_UDZ_NAME);
    if (status != UCS_OK) {
        return status;
    }

    if (!(params->open_mode & UCT_IFACE_OPEN_MODE_DEVICE)) {
        ucs_error("ud_zcopy: only UCT_IFACE_OPEN_MODE_DEVICE is supported");
        return UCS_ERR_UNSUPPORTED;
    }
    ucs_strncpy_zero(self->ifname, params->mode.device.dev_name, sizeof(self->ifname));
    self->wops = udz_wire_find(self->ifname);
    if (self->wops == NULL) {
        ucs_error("ud_zcopy: no wire has device %s", self->ifname);
        return UCS_ERR_NO_DEVICE;
    }

    /* datagrams never exceed what crosses the device whole (UDP: no IP fragmentation) */
    max_dgram = self->wops->max_dgram;
    mtu       = self->wops->dev_mtu(self->ifname);
    seg_max   = (mtu > UDZ_HDR_LEN + 256) ? ucs_min(mtu, max_dgram) : max_dgram;
    /* SEG_SIZE above what the wire carries (16k on a 4 KiB InfiniBand MTU) is capped */
    if (config->seg_size >= UDZ_HDR_LEN + 256) {
        self->max_payload = ucs_min(config->seg_size, seg_max) - UDZ_HDR_LEN;
    }
    cc.seg_size   = self->max_payload + UDZ_HDR_LEN;
    cc.chunk_size = (config->chunk_size == UCS_MEMUNITS_AUTO) ?
                    seg_max - UDZ_HDR_LEN : config->chunk_size;
    /* CHUNK_SIZE auto: a peer whose path carries more than the device (on this host, through
     * loopback) gets chunks up to the wire's largest datagram (udz_wire_ops_t.path_mtu) */
    cc.chunk_max  = (config->chunk_size == UCS_MEMUNITS_AUTO) ?
                    max_dgram - UDZ_HDR_LEN : config->chunk_size;
    status = uct_udz_config_check(config, cc.seg_size, cc.chunk_size,
                                  self->wops->posts_ahead ? seg_max : max_dgram);
    if (status != UCS_OK) {
        return status;
    }

    self->host.hash = ucs_get_system_id() ^
                      ((uint64_t)ucs_sys_get_ns(UCS_SYS_NS_TYPE_NET) * 0x9e3779b97f4a7c15ull);
    self->host.shm      = uct_udz_shm_domain();
    self->host.flags    = 0;
    self->yield_on_host = uct_udz_on_host_yields(config->on_host);

    wparams.channels  = config->channels;
    wparams.rx_buffer = config->rcvbuf;
    wparams.tx_buffer = config->sndbuf;
    wparams.coalesce  = config->gro;
    wparams.counters  = &uct_udz_counters.wire;
    wparams.reg_cache = config->rcache ? &config->rcache_config : NULL;
    ret = self->wops->open(self->ifname, &wparams, &self->wire, err, sizeof(err));
    if (ret == -ENODEV) {
        ucs_error("ud_zcopy: %s", err);
        return UCS_ERR_NO_DEVICE;
    } else if (ret != 0) {
        ucs_error("ud_zcopy: %s: %s", self->ifname, err);
        return UCS_ERR_IO_ERROR;
    }
    self->wops->query(self->wire, &wattr);
    self->loopback = wattr.loopback;
    if (getrandom(&self->cookie, sizeof(self->cookie), 0) != sizeof(self->cookie)) {
        self->cookie = ucs_generate_uuid((uintptr_t)self);
    }

    cc.tx_window       = uct_udz_tx_window(config, self->wops, cc.seg_size);
    cc.tx_window_min   = (config->tx_window == UCS_ULUNITS_AUTO) ?
                         ucs_min(cc.tx_window, UCT_UDZ_TX_WINDOW_MIN) : cc.tx_window;
    cc.tx_pool         = config->tx_pool;
    cc.ack_every       = config->ack_every;
    cc.ack_delay_ns    = (uint64_t)(config->ack_delay * 1e9);
    cc.rto_ns          = (uint64_t)(config->rto * 1e9);
    cc.rto_max_ns      = (uint64_t)(config->rto_max * 1e9);
    cc.peer_timeout_ns = (uint64_t)(config->peer_timeout * 1e9);
    cc.channels        = config->channels;
    /* a transfer's window must fit the receive buffer the wire got */
    cc.zc_window       = ucs_max(ucs_min(config->zc_window, wattr.rx_buffer / 2),
                                 cc.chunk_size);
    cc.zc_max          = config->zc_max;
    cc.rx_batch        = config->rx_batch;
    /* keep a peer's window of packets after a hole (its window is ours: one configuration per
     * job), in at most as much memory as our own send pool */
    cc.rx_reorder      = ucs_min(cc.tx_window, cc.tx_pool);
    cc.max_peers       = config->max_peers;
    /* a record no ep holds, silent for four peer timeouts (2 minutes by default), is probed
     * and freed unless the peer answers: MAX_PEERS bounds the live records, not a server's
     * lifetime of churning clients */
    cc.peer_idle_ns    = 4 * cc.peer_timeout_ns;
    self->zcopy_thresh = config->zcopy_thresh;
    self->zc_max       = config->zc_max;

    self->core = udz_core_create(&cc, self->wops, self->wire, &uct_udz_user_ops, self,
                                 self->cookie, &uct_udz_counters.core, &ret);
    if (self->core == NULL) {
        ucs_error("ud_zcopy: cannot create the protocol core: %s", strerror(-ret));
        self->wops->close(self->wire);
        return (ret == -ENOMEM) ? UCS_ERR_NO_MEMORY : UCS_ERR_INVALID_PARAM;
    }
    udz_core_set_time(self->core, uct_udz_now_ns());

    memset(self->getb, 0, sizeof(self->getb));
    self->fenced      = 0;
    self->pending_kick  = 0;
    self->pending_skips = 0;
    self->nchannels   = config->channels;
    ucx_ext_iface_init(&self->x, &self->super, UCT_UDZ_NAME, &uct_udz_counters.tx, NULL, 0);
    ucs_list_head_init(&self->flushes);
    uct_udz_wakeup_init(self);
    self->fence_group = NULL;
    status = uct_udz_async_init(self, worker, config->async_tick, &uct_udz_user_ops);
    if (status == UCS_OK) {
        status = uct_udz_fence_join(self, worker);
        if (status != UCS_OK) {
            uct_udz_async_cleanup(self);
        }
    }
    if (status != UCS_OK) {
        udz_core_destroy(self->core);
        self->wops->close(self->wire);
        return status;
    }
    ucs_debug("ud_zcopy iface %p on %s, %s wire %s: seg %zu chunk %zu (up to %zu as a path "
              "allows), window %u, %u channels", self, self->ifname, self->wops->name,
              wattr.desc, cc.seg_size, cc.chunk_size, cc.chunk_max, cc.tx_window, cc.channels);
    return UCS_OK;
}

UCS_CLASS_CLEANUP_FUNC(uct_udz_iface_t)
{
    uct_udz_flush_t *f, *tmp;
    unsigned i;

    uct_udz_fence_leave(self);
    uct_udz_async_cleanup(self);
    uct_udz_wakeup_cleanup(self);
    uct_base_iface_progress_disable(&self->super.super, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    ucs_list_for_each_safe(f, tmp, &self->flushes, list) {
        ucs_list_del(&f->list);
        ucs_free(f);
    }
    ucx_ext_iface_cleanup(&self->x);
    udz_core_destroy(self->core);
    self->wops->close(self->wire);
    for (i = 0; i < UDZ_MAX_CHANNELS; ++i) {
        ucs_free(self->getb[i].buf);
    }
}

UCS_CLASS_DEFINE(uct_udz_iface_t, uct_base_iface_t);
static UCS_CLASS_DEFINE_NEW_FUNC(uct_udz_iface_t, uct_iface_t, uct_md_h, uct_worker_h,
                                 const uct_iface_params_t*, const uct_iface_config_t*);
static UCS_CLASS_DEFINE_DELETE_FUNC(uct_udz_iface_t, uct_iface_t);

/* Devices: every device of every wire (udz_wires; UDP: every network interface that is up
 * and has an IPv4 address, as UCX tcp). */
typedef struct {
    uct_tl_device_resource_t *devices;
    unsigned                 num;
} uct_udz_dev_list_t;

static int uct_udz_dev_add(void *arg, const char *dev)
{
    uct_udz_dev_list_t *l = arg;
    uct_tl_device_resource_t *tmp;

    tmp = ucs_realloc(l->devices, sizeof(*l->devices) * (l->num + 1), "udz_devices");
    if (tmp == NULL) {
        return -ENOMEM;
    }
    l->devices = tmp;
    ucs_snprintf_zero(l->devices[l->num].name, sizeof(l->devices[l->num].name), "%s", dev);
    l->devices[l->num].type       = UCT_DEVICE_TYPE_NET;
    l->devices[l->num].sys_device = UCS_SYS_DEVICE_ID_UNKNOWN;
    ++l->num;
    return 0;
}

static ucs_status_t uct_udz_query_devices(uct_md_h md, uct_tl_device_resource_t **devices_p,
                                          unsigned *num_devices_p)
{
    uct_udz_dev_list_t l = {NULL, 0};
    const udz_wire_ops_t *const *w;
    int ret;

    for (w = udz_wires; *w != NULL; ++w) {
        ret = (*w)->query_devices(uct_udz_dev_add, &l);
        if (ret != 0) {
            ucs_error("ud_zcopy: cannot list the devices of the %s wire: %s", (*w)->name,
                      strerror(-ret));
            ucs_free(l.devices);
            return (ret == -ENOMEM) ? UCS_ERR_NO_MEMORY : UCS_ERR_IO_ERROR;
        }
    }
    *devices_p     = l.devices;
    *num_devices_p = l.num;
    return UCS_OK;
}

/* What UCP asks besides the iface ops (ucx_ext_compat.h) */
/*
 * What an operation costs beyond the iface's attributes, for UCP's protocols v2 (1.16 on),
 * which choose a protocol per message size by these estimates. UCT's base estimate gives every
 * operation the same cost, and UCP 1.22 then took eager zero copy (am_zcopy) from 1 byte on.
 * On a datagram wire that is the wrong way round:
 *  - a zero-copy send is complete only when the peer's ack comes back, since the data must
 *    stay for a retransmission: its buffer and request are held a round trip, and the ack's
 *    receive (a system call) is the sender's. A short or bcopy send hands the kernel its copy
 *    and is complete when sendmsg returns, which is what UCP 1.13's thresholds gave. (A held
 *    buffer is also what MPI_Bsend cannot wait for: mpi4py's Bsend tests ran out of buffer
 *    space over UCX 1.22 and passed over 1.13.)
 *  - a get (and the rendezvous' read) asks the owner first, waits for the owner's turn, and
 *    ends with a completion of its own: more than the iface's figures say (the wire's
 *    get_setup, as measured).
 *  - after that, a get streams faster than anything on the reliable stream: its data goes on
 *    a data channel of its own, in the path's datagrams, straight into place, where active
 *    messages and puts go in the stream's datagrams (SEG_SIZE), each acked, kept for a resend
 *    and handed to UCP from our buffers (the wire's stream_bw_share, as measured).
 * With neither, UCP 1.22 modeled eager fragments at 4,814 MB/s and a rendezvous at 5,114 MB/s
 * plus 7 us, a crossover that any detail moved: eager up to 596 KiB under MPICH and 2 MiB under
 * Open MPI (its 2 processes per node halve the shared bandwidth), where windowed bandwidth at
 * 1 MiB was 0.70x rendezvous'. With both, rendezvous starts at 279 KiB under MPICH and 140 KiB
 * under Open MPI, near where it started when UCP striped it over two ifaces (219 and 126 KiB;
 * udz_reach.c).
 */
static ucs_status_t uct_udz_iface_estimate_perf(uct_iface_h tl_iface, uct_perf_attr_t *perf_attr)
{
    uct_udz_iface_t *iface = ucs_derived_of(tl_iface, uct_udz_iface_t);
    uct_ep_operation_t op  = ucx_ext_perf_op(perf_attr);
    uct_iface_attr_t attr;
    ucs_status_t status;

    status = uct_base_iface_estimate_perf(tl_iface, perf_attr);
    if ((status != UCS_OK) || (uct_iface_query(tl_iface, &attr) != UCS_OK)) {
        return status;
    }
    if (((op == UCT_EP_OP_AM_ZCOPY) || (op == UCT_EP_OP_PUT_ZCOPY) ||
         (op == UCT_EP_OP_EAGER_ZCOPY)) &&
        (perf_attr->field_mask & UCT_PERF_ATTR_FIELD_SEND_PRE_OVERHEAD)) {
        perf_attr->send_pre_overhead += attr.overhead;   /* the ack's receive */
    }
    if ((op == UCT_EP_OP_GET_ZCOPY) || (op == UCT_EP_OP_GET_BCOPY)) {
        if (perf_attr->field_mask & UCT_PERF_ATTR_FIELD_LATENCY) {
            /* the request to the owner, and what the wire measured a get to cost on top */
            perf_attr->latency.c += attr.latency.c + iface->wops->get_setup;
        }
    } else if ((perf_attr->field_mask & UCT_PERF_ATTR_FIELD_BANDWIDTH) &&
               (iface->wops->stream_bw_share > 0)) {
        perf_attr->bandwidth.dedicated *= iface->wops->stream_bw_share;
        perf_attr->bandwidth.shared    *= iface->wops->stream_bw_share;
    }
    return UCS_OK;
}

static const ucx_ext_iface_hooks_t uct_udz_iface_hooks = {
    .is_reachable    = uct_udz_iface_is_reachable,
    .ep_is_connected = ucx_ext_ep_is_connected,
    .estimate_perf   = uct_udz_iface_estimate_perf
};

static ucx_ext_internal_ops_t uct_udz_internal_ops = UCX_EXT_INTERNAL_OPS(&uct_udz_iface_hooks);

static uct_iface_ops_t uct_udz_iface_ops = {
    .ep_am_short              = uct_udz_ep_am_short,
    .ep_am_short_iov          = uct_base_ep_am_short_iov,
    .ep_am_bcopy              = uct_udz_ep_am_bcopy,
    .ep_am_zcopy              = uct_udz_ep_am_zcopy,
    UCX_EXT_OPS_RMA(uct_udz_ep),
    UCX_EXT_OPS_NO_ATOMICS,
    UCX_EXT_OPS_NO_TAG,
    UCX_EXT_OPS_NO_EP_ADDR,
    UCX_EXT_OPS_EVENTS(uct_udz_iface),
    UCX_EXT_OPS_PENDING,
    UCX_EXT_OPS_LIFE(uct_udz_ep_t, uct_udz_iface_t),
    .ep_fence                 = uct_udz_ep_fence,
    .ep_check                 = uct_udz_ep_check,
    .iface_fence              = uct_udz_iface_fence,
    .iface_get_device_address = uct_udz_iface_get_device_address,
    UCX_EXT_OPS_IFACE(uct_udz_iface)
};

UCT_TL_DEFINE_ENTRY(&uct_udz_component.super, ud_zcopy, uct_udz_query_devices, uct_udz_iface_t,
                    UCT_UDZ_PREFIX, uct_udz_iface_config_table, uct_udz_iface_config_t);
