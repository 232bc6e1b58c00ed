/*
 * unimem iface: one attached mailbox (what this process receives on), one owned zDMA channel,
 * the reassembly state of the mailbox protocol, and the send-side queues (pending, stash).
 */
#include "unimem_uct.h"
#include "ucx_ext_perf.h"

#include <ucs/arch/cpu.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/string.h>
#include <errno.h>
#include <unistd.h>

static uct_iface_ops_t uct_unimem_iface_ops;
static ucx_ext_internal_ops_t uct_unimem_internal_ops;

ucs_config_field_t uct_unimem_iface_config_table[] = {
    {"", "", NULL, ucs_offsetof(uct_unimem_iface_config_t, super),
     UCS_CONFIG_TYPE_TABLE(ucx_ext_sm_iface_config_table)},

    {"MBOX_SLOTS", "8192",
     "32-byte message slots of this process's mailbox (a power of two, 64..1048576). Senders\n"
     "get UCS_ERR_NO_RESOURCE (and queue as pending) while it is full.",
     ucs_offsetof(uct_unimem_iface_config_t, mbox_slots), UCS_CONFIG_TYPE_UINT},

    {"SEG_SIZE", "32832",
     "Largest am_bcopy (and put/get bcopy) message, and a landing slot's payload: 32 KiB and\n"
     "UCP's header. UCP sends messages up to it eagerly (its rendezvous threshold is at least\n"
     "this), larger eager messages in SEG_SIZE pieces. Without a free landing slot an active\n"
     "message longer than 30 bytes is fragmented over 1 + ceil((len - 24) / 28) mailbox\n"
     "messages. At least 64, and its fragments must fit half the mailbox (MBOX_SLOTS).",
     ucs_offsetof(uct_unimem_iface_config_t, seg_size), UCS_CONFIG_TYPE_MEMUNITS},

    {"MAX_SENDERS", "1024",
     "Sender ids this mailbox hands out (one per connected endpoint, 1..65536); fragmented\n"
     "messages are reassembled per sender.",
     ucs_offsetof(uct_unimem_iface_config_t, max_senders), UCS_CONFIG_TYPE_UINT},

    {"RX_BUDGET", "64",
     "Mailbox messages received per progress call (1..4096).",
     ucs_offsetof(uct_unimem_iface_config_t, rx_budget), UCS_CONFIG_TYPE_UINT},

    {"ZCOPY_THRESH", "auto",
     "get/put zero copy (zDMA) from this size on; UCP's rendezvous threshold is floored by it,\n"
     "so messages below it go eagerly through the mailbox, above it as a rendezvous whose data\n"
     "moves by zDMA read. auto: 8k, and on UCX 1.22 above SEG_SIZE: its protocols start a\n"
     "rendezvous where zero copy starts, and messages up to SEG_SIZE go eagerly through a\n"
     "landing slot, as UCX 1.13 sends them by itself. At least 1.\n",
     ucs_offsetof(uct_unimem_iface_config_t, zcopy_thresh), UCS_CONFIG_TYPE_MEMUNITS},

    {"PUT_MAX_SHORT", "256",
     "Largest put_short (a zDMA write from the caller's buffer), 1..SEG_SIZE.",
     ucs_offsetof(uct_unimem_iface_config_t, put_max_short), UCS_CONFIG_TYPE_MEMUNITS},

    {"ZDMA_CHANNEL", "auto",
     "zDMA channel this iface owns, 0..7, or auto for the first free one.",
     ucs_offsetof(uct_unimem_iface_config_t, zdma_channel), UCS_CONFIG_TYPE_ULUNITS},

    {"LAND_SLOTS", "64",
     "Landing slots per sender in this process's landing area (0..256; 0: none). A sender\n"
     "stores an active message of up to SEG_SIZE bytes into its next free slot through the\n"
     "global address space and sends one mailbox message as the doorbell, instead of\n"
     "fragmenting it over 1 + len/28 mailbox messages; with its slot still busy it fragments.\n"
     "The area is LAND_SENDERS x LAND_SLOTS x (SEG_SIZE + 64) bytes of address space; only\n"
     "the slots senders use take memory. Landing needs both sides to have slots.",
     ucs_offsetof(uct_unimem_iface_config_t, land_slots), UCS_CONFIG_TYPE_UINT},

    {"LAND_SENDERS", "256",
     "Senders with a ring of landing slots (1..MAX_SENDERS): the first LAND_SENDERS sender ids\n"
     "of this mailbox; the senders beyond them fragment every message.",
     ucs_offsetof(uct_unimem_iface_config_t, land_senders), UCS_CONFIG_TYPE_UINT},

    {"LAND_PREFAULT", "8",
     "Landing rings made resident whole when first used (0..64): the rings of the first\n"
     "LAND_PREFAULT sender ids, at both ends (the sender when it connects, the receiver at\n"
     "the first message into it). Otherwise each page of a ring is faulted in on its first\n"
     "use, in both processes, while messages wait: Open MPI's 16 KiB latency over OSU's\n"
     "warm-up then measured 1.9x its steady value. Each such ring takes LAND_SLOTS x\n"
     "(SEG_SIZE + 64) bytes (2 MiB by default) from its first use on.",
     ucs_offsetof(uct_unimem_iface_config_t, land_prefault), UCS_CONFIG_TYPE_UINT},

    {"ZDMA_QUEUE", "256",
     "zDMA transfers in flight per iface whose completion is awaited (2..65536; the\n"
     "emulation completes every transfer when it is posted).",
     ucs_offsetof(uct_unimem_iface_config_t, zdma_queue), UCS_CONFIG_TYPE_UINT},

    {NULL}
};

static ucs_status_t uct_unimem_iface_query(uct_iface_h tl_iface, uct_iface_attr_t *attr)
{
    uct_unimem_iface_t *iface = ucs_derived_of(tl_iface, uct_unimem_iface_t);
    const ucx_ext_sm_caps_t caps = {
        .am_max_short  = iface->am_max_short,     /* one mailbox message: a SHORT, or a LAND */
        .am_align      = 1,
        .rndv_floor    = iface->zcopy_thresh,
        .put_max_short = iface->put_max_short,    /* put/get: zDMA write/read */
        .max_bcopy     = iface->seg_size,
        .zcopy_thresh  = iface->zcopy_thresh,
        .eager_max     = iface->eager_max,
        .latency       = 100e-9
    };

    ucx_ext_sm_iface_query(&iface->super, sizeof(uct_unimem_iface_addr_t), &caps, attr);
    if (unimem_hal_mbox_event_fd(iface->mbox) >= 0) {
        attr->cap.event_flags = UCX_EXT_EVENT_FLAGS;
    }
    return UCS_OK;
}

static ucs_status_t uct_unimem_iface_get_address(uct_iface_h tl_iface, uct_iface_addr_t *addr)
{
    uct_unimem_iface_t *iface      = ucs_derived_of(tl_iface, uct_unimem_iface_t);
    uct_unimem_iface_addr_t *uaddr = (uct_unimem_iface_addr_t*)addr;

    unimem_hal_mbox_address(iface->mbox, &uaddr->mbox);
    uaddr->seg_size   = (uint32_t)iface->seg_size;
    uaddr->nslots     = iface->nslots;
    uaddr->land_fd    = iface->land_desc.fd;
    uaddr->land_ino   = iface->land_desc.ino;
    uaddr->land_base  = iface->land_desc.base;
    uaddr->land_rings = iface->rx.land_rings;
    uaddr->land_slots = iface->rx.land_slots;
    return UCS_OK;
}

/* Same host (the emulation's reach) and the same protection domain: a peer of another PDID
 * is unreachable, so UCP never selects unimem for it. */
static int uct_unimem_iface_is_reachable(const uct_iface_h tl_iface,
                                         const uct_device_addr_t *dev_addr,
                                         const uct_iface_addr_t *iface_addr)
{
    uct_unimem_iface_t *iface = ucs_derived_of(tl_iface, uct_unimem_iface_t);
    const uct_unimem_iface_addr_t *uaddr = (const uct_unimem_iface_addr_t*)iface_addr;

    if (!ucx_ext_sm_is_same_host(dev_addr)) {
        return 0;
    }
    return (uaddr == NULL) || (uaddr->mbox.pdid == iface->pdid);
}

static void uct_unimem_iface_deliver(void *arg, uint8_t am_id, void *data, uint32_t length)
{
    uct_unimem_iface_t *iface = arg;

    uct_iface_trace_am(&iface->super.super, UCT_AM_TRACE_TYPE_RECV, am_id, data, length,
                       "RX: AM");
    uct_iface_invoke_am(&iface->super.super, am_id, data, length, 0);
}

/* ---- wakeup: the mailbox's event fd (unimem_hal.h) ---- */

static ucs_status_t uct_unimem_iface_event_fd_get(uct_iface_h tl_iface, int *fd_p)
{
    uct_unimem_iface_t *iface = ucs_derived_of(tl_iface, uct_unimem_iface_t);

    return ucx_ext_iface_event_fd(unimem_hal_mbox_event_fd(iface->mbox), fd_p);
}

/* Stashed messages and zDMA transfers still awaited go on from progress, not from an
 * event: a worker waiting for send completions stays awake for them. */
static ucs_status_t uct_unimem_iface_event_arm(uct_iface_h tl_iface, unsigned events)
{
    uct_unimem_iface_t *iface = ucs_derived_of(tl_iface, uct_unimem_iface_t);
    ucs_status_t status       = ucx_ext_iface_arm_check(&iface->x, events,
                                                        !ucs_list_is_empty(&iface->stashed) ||
                                                        (iface->zwait_head != iface->zwait_tail));

    if ((status != UCS_OK) || !(events & UCX_EXT_EVENTS_RECV)) {
        return status;
    }
    if (unimem_hal_mbox_arm(iface->mbox) != 0) {
        return UCS_ERR_BUSY;
    }
    iface->armed = 1;
    uct_unimem_counters.sleeps++;
    return UCS_OK;
}

static UCS_F_NOINLINE void uct_unimem_iface_awake(uct_unimem_iface_t *iface)
{
    iface->armed = 0;
    unimem_hal_mbox_disarm(iface->mbox);
}

static unsigned uct_unimem_iface_progress(uct_iface_h tl_iface)
{
    uct_unimem_iface_t *iface = ucs_derived_of(tl_iface, uct_unimem_iface_t);
    unsigned count, i;

    if (ucs_unlikely(iface->armed)) {
        uct_unimem_iface_awake(iface);
    }
    count = unimem_hal_mbox_recv(iface->mbox, iface->rx_msgs, iface->rx_budget);
    for (i = 0; i < count; ++i) {
        unimem_rx_msg_inline(&iface->rx, &iface->rx_msgs[i], uct_unimem_iface_deliver, iface);
    }
    /* the send side: stashed messages first, then the pending queue */
    if (ucs_unlikely(!ucs_list_is_empty(&iface->stashed))) {
        count += uct_unimem_ep_progress_stash(iface);
    }
    if (ucs_unlikely(ucx_ext_iface_has_pending(&iface->x))) {
        count += ucx_ext_iface_progress_pending(&iface->x);
    }
    if (ucs_unlikely(iface->zwait_head != iface->zwait_tail)) {
        count += uct_unimem_iface_progress_zdma(iface);
    }
    /* a mailbox message into a dead process succeeds: its death shows only here */
    if (ucs_unlikely(++iface->progress_calls >= UCX_EXT_ALL_PEERS_CALLS)) {
        iface->progress_calls = 0;
        ucx_ext_iface_check_all_peers(&iface->x);
    }
    return count;
}

/* Complete when the stash and pending queues are empty and the zDMA channel caught up. */
static ucs_status_t uct_unimem_iface_flush(uct_iface_h tl_iface, unsigned flags,
                                           uct_completion_t *comp)
{
    uct_unimem_iface_t *iface = ucs_derived_of(tl_iface, uct_unimem_iface_t);

    if (!ucs_list_is_empty(&iface->stashed)) {
        return UCS_INPROGRESS;  /* the flush rule of uct/common: progress sends the stash */
    }
    if (ucx_ext_iface_flush_queued(&iface->x) != UCS_OK) {
        return UCS_INPROGRESS;
    }
    ucs_memory_cpu_store_fence();
    return uct_unimem_iface_zdma_wait(iface, iface->zdma_last, comp);
}

#define uct_unimem_iface_config_error(_var, _msg) \
    ucx_ext_config_error(UCT_UNIMEM_NAME, UCT_UNIMEM_PREFIX, "%s %s", _var, _msg)

/* Knob ranges; the rules between knobs follow in the iface's init. */
static const ucx_ext_knob_t uct_unimem_knobs[] = {
    UCX_EXT_KNOB(uct_unimem_iface_config_t, "SEG_SIZE", seg_size, SIZE, 64,
                 UCT_UNIMEM_SEG_SIZE_MAX),
    UCX_EXT_KNOB(uct_unimem_iface_config_t, "MAX_SENDERS", max_senders, UINT, 1,
                 UNIMEM_PROTO_MAX_SENDERS),
    UCX_EXT_KNOB(uct_unimem_iface_config_t, "RX_BUDGET", rx_budget, UINT, 1, 4096),
    UCX_EXT_KNOB(uct_unimem_iface_config_t, "ZCOPY_THRESH", zcopy_thresh, SIZE, 1, SIZE_MAX),
    UCX_EXT_KNOB(uct_unimem_iface_config_t, "ZDMA_QUEUE", zdma_queue, UINT, 2, 65536),
    UCX_EXT_KNOB(uct_unimem_iface_config_t, "LAND_SLOTS", land_slots, UINT, 0,
                 UNIMEM_LAND_MAX_SLOTS),
    UCX_EXT_KNOB(uct_unimem_iface_config_t, "LAND_SENDERS", land_senders, UINT, 1,
                 UNIMEM_PROTO_MAX_SENDERS),
    UCX_EXT_KNOB(uct_unimem_iface_config_t, "LAND_PREFAULT", land_prefault, UINT, 0, 64),
    UCX_EXT_KNOB(uct_unimem_iface_config_t, "PEER_CHECK_INTERVAL", super.peer_check_interval,
                 DOUBLE, 1e-9, 1e9),
};

static ucs_status_t uct_unimem_hal_status(int ret)
{
    switch (ret) {
    case -ENOMEM: return UCS_ERR_NO_MEMORY;
    case -ENOSPC:
    case -EBUSY:  return UCS_ERR_BUSY;
    default:      return UCS_ERR_IO_ERROR;
    }
}

/* Every knob, each bad value named by its variable: the ranges from the table, then the
 * rules between knobs. */
static ucs_status_t uct_unimem_iface_check_config(const uct_unimem_md_t *md,
                                                  const uct_unimem_iface_config_t *config)
{
    ucs_status_t status;

    if ((md->pdid == 0) || (md->pdid > UNIMEM_HAL_PDID_MAX)) {
        return uct_unimem_iface_config_error("PDID", "must be between 1 and 65535");
    }
    if (md->hal == NULL) {
        return uct_unimem_iface_config_error("PDID", "differs from the PDID this process "
                                             "already uses (one protection domain per process)");
    }
    if ((config->mbox_slots < 64) || (config->mbox_slots > (1u << 20)) ||
        (config->mbox_slots & (config->mbox_slots - 1))) {
        return uct_unimem_iface_config_error("MBOX_SLOTS", "must be a power of two between "
                                             "64 and 1048576");
    }
    status = ucx_ext_config_check(UCT_UNIMEM_NAME, UCT_UNIMEM_PREFIX, config, uct_unimem_knobs,
                                  ucs_static_array_size(uct_unimem_knobs));
    if (status != UCS_OK) {
        return status;
    }
    if (unimem_proto_nmsgs(config->seg_size) > config->mbox_slots / 2) {
        return uct_unimem_iface_config_error("SEG_SIZE", "needs more than half of the mailbox "
                                             "(UCX_UNIMEM_MBOX_SLOTS) for one message");
    }
    if (config->land_senders > config->max_senders) {
        return uct_unimem_iface_config_error("LAND_SENDERS", "must not exceed MAX_SENDERS");
    }
    if (unimem_land_area_size(config->land_senders, config->land_slots, config->seg_size) >
        UCT_UNIMEM_LAND_MAX_AREA) {
        return uct_unimem_iface_config_error("LAND_SLOTS", "makes a landing area of more than "
                                             "64 GiB (LAND_SENDERS x LAND_SLOTS x SEG_SIZE): "
                                             "lower it, or LAND_SENDERS or SEG_SIZE");
    }
    if ((config->put_max_short == 0) || (config->put_max_short > config->seg_size)) {
        return uct_unimem_iface_config_error("PUT_MAX_SHORT", "must be between 1 and SEG_SIZE");
    }
    if ((config->zdma_channel != UCS_ULUNITS_AUTO) &&
        (config->zdma_channel >= UNIMEM_HAL_MAX_ZDMA)) {
        return uct_unimem_iface_config_error("ZDMA_CHANNEL", "must be auto or 0..7");
    }
    return UCS_OK;
}

/* A sender's first message into its landing ring here: its pages, which the sender made
 * resident in the file when it connected, are mapped into this process at once. */
static void uct_unimem_iface_land_new(uint8_t *ring, size_t len)
{
    ucx_ext_prefault(ring, len, 0);
}

/* The landing area (unimem_proto.h, LAND): shareable memory peers map and store into, one
 * ring of slots per sender id. Its pages exist only where senders wrote, and in the rings of
 * the first LAND_PREFAULT senders. */
static ucs_status_t uct_unimem_iface_land_init(uct_unimem_iface_t *iface,
                                               const uct_unimem_iface_config_t *config)
{
    size_t length = unimem_land_area_size(config->land_senders, config->land_slots,
                                          iface->seg_size);
    ucs_status_t status;
    void *area;

    status = ucx_ext_xmem_alloc(&length, "unimem_land", &area);
    if (status != UCS_OK) {
        ucs_error("unimem: cannot allocate a landing area of %zu bytes "
                  "(UCX_UNIMEM_LAND_SLOTS=%u x LAND_SENDERS=%u): %s", length,
                  config->land_slots, config->land_senders, ucs_status_string(status));
        return status;
    }
    ucx_ext_xmem_describe((uintptr_t)area, length, &iface->land_desc);
    iface->am_max_short = ucs_min(UCT_UNIMEM_LAND_SHORT_MAX, iface->seg_size);
    unimem_rx_land(&iface->rx, area, config->land_senders, config->land_slots);
    unimem_rx_land_prefault(&iface->rx, config->land_prefault, uct_unimem_iface_land_new);
    return UCS_OK;
}

static ucs_mpool_ops_t uct_unimem_stash_mpool_ops = {
    .chunk_alloc   = ucs_mpool_chunk_malloc,
    .chunk_release = ucs_mpool_chunk_free,
};

UCS_CLASS_INIT_FUNC(uct_unimem_iface_t, uct_md_h tl_md, uct_worker_h worker,
                    const uct_iface_params_t *params, const uct_iface_config_t *tl_config)
{
    const uct_unimem_iface_config_t *config = ucs_derived_of(tl_config,
                                                             uct_unimem_iface_config_t);
    uct_unimem_md_t *md = ucs_derived_of(tl_md, uct_unimem_md_t);
    ucs_status_t status;
    int ret;

    UCS_CLASS_CALL_SUPER_INIT(uct_sm_iface_t, &uct_unimem_iface_ops,
                              &uct_unimem_internal_ops.super, tl_md, worker, params, tl_config);

    status = ucx_ext_iface_check_params(params, UCT_UNIMEM_NAME);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_unimem_iface_check_config(md, config);
    if (status != UCS_OK) {
        return status;
    }

    self->hal                 = md->hal;
    self->pdid                = md->pdid;
    self->nslots              = config->mbox_slots;
    self->seg_size            = config->seg_size;
    self->max_msgs            = unimem_proto_nmsgs(config->seg_size);
    if (config->zcopy_thresh == UCS_MEMUNITS_AUTO) {
        self->zcopy_thresh = UCT_UNIMEM_ZCOPY_AUTO;
        self->eager_max    = config->seg_size;   /* an eager message lands in one slot */
    } else {
        self->zcopy_thresh = config->zcopy_thresh;
        self->eager_max    = 0;
    }
    self->put_max_short       = config->put_max_short;
    self->rx_budget           = config->rx_budget;
    self->zwait_size          = config->zdma_queue;
    self->zwait_head          = 0;
    self->zwait_tail          = 0;
    self->zdma_last           = 0;
    self->mbox                = NULL;
    self->armed               = 0;
    self->zdma                = NULL;
    self->rx.senders          = NULL;
    self->rx.land             = NULL;
    self->am_max_short        = UNIMEM_PROTO_SHORT_MAX;
    self->land_prefault       = config->land_prefault;
    memset(&self->land_desc, 0, sizeof(self->land_desc));
    ucx_ext_iface_init(&self->x, &self->super.super, UCT_UNIMEM_NAME,
                       &uct_unimem_counters.tx, uct_unimem_ep_tx_ready,
                       config->super.peer_check_interval);
    self->x.peer_closed       = uct_unimem_ep_peer_closed;
    ucs_list_head_init(&self->stashed);
    ucs_list_head_init(&self->senders);
    /* one buffer per chunk: a stash is rare, and its buffers come back for the next one */
    status = ucx_ext_mpool_init(&self->stash_mp, self->seg_size, UCS_SYS_CACHE_LINE_SIZE, 1,
                                &uct_unimem_stash_mpool_ops, "unimem_stash");
    if (status != UCS_OK) {
        return status;
    }

    self->rx_msgs = ucs_malloc(sizeof(unimem_msg_t) * self->rx_budget, "unimem_rx_msgs");
    self->tx_msgs = ucs_malloc(sizeof(unimem_msg_t) * self->max_msgs, "unimem_tx_msgs");
    self->bounce  = ucs_malloc(self->seg_size, "unimem_bounce");
    self->zwait   = ucs_calloc(self->zwait_size, sizeof(*self->zwait), "unimem_zwait");
    if ((self->rx_msgs == NULL) || (self->tx_msgs == NULL) || (self->bounce == NULL) ||
        (self->zwait == NULL)) {
        status = UCS_ERR_NO_MEMORY;
        goto err;
    }

    ret = unimem_rx_init(&self->rx, config->max_senders, (uint32_t)self->seg_size,
                         &uct_unimem_counters.rx, uct_unimem_iface_deliver, self);
    if (ret != 0) {
        status = UCS_ERR_NO_MEMORY;
        goto err;
    }

    if (config->land_slots > 0) {
        status = uct_unimem_iface_land_init(self, config);
        if (status != UCS_OK) {
            goto err;
        }
    }

    ret = unimem_hal_mbox_attach(self->hal, config->mbox_slots, config->max_senders,
                                 &self->mbox);
    if (ret != 0) {
        ucs_error("unimem: cannot attach a mailbox: %s%s", strerror(-ret),
                  (ret == -ENOSPC) ? " (this process has all 64 attached)" : "");
        status = uct_unimem_hal_status(ret);
        goto err;
    }

    ret = uct_unimem_zdma_get(self->hal, (config->zdma_channel == UCS_ULUNITS_AUTO) ? -1 :
                              (int)config->zdma_channel, &self->zdma);
    if (ret != 0) {
        ucs_error("unimem: cannot own a zDMA channel%s: %s", (ret == -EBUSY) ?
                  " (UCX_UNIMEM_ZDMA_CHANNEL is taken)" : "", strerror(-ret));
        status = uct_unimem_hal_status(ret);
        goto err;
    }

    ucs_debug("unimem iface %p: mailbox %u slots, seg %zu (%u msgs), pdid %u", self,
              self->nslots, self->seg_size, self->max_msgs, self->pdid);
    return UCS_OK;

err:
    ucs_mpool_cleanup(&self->stash_mp, 1);
    if (self->rx.land != NULL) {
        ucx_ext_xmem_free(self->rx.land);
    }
    if (self->zdma != NULL) {
        uct_unimem_zdma_put(self->zdma);
    }
    if (self->mbox != NULL) {
        unimem_hal_mbox_detach(self->mbox);
    }
    unimem_rx_cleanup(&self->rx);
    ucs_free(self->rx_msgs);
    ucs_free(self->tx_msgs);
    ucs_free(self->bounce);
    ucs_free(self->zwait);
    return status;
}

UCS_CLASS_CLEANUP_FUNC(uct_unimem_iface_t)
{
    uct_base_iface_progress_disable(&self->super.super.super,
                                    UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    ucx_ext_iface_cleanup(&self->x);
    uct_unimem_zdma_put(self->zdma);
    unimem_hal_mbox_detach(self->mbox);
    if (self->rx.land != NULL) {
        ucx_ext_xmem_free(self->rx.land);   /* peers keep their mappings until they let go */
    }
    unimem_rx_cleanup(&self->rx);
    ucs_mpool_cleanup(&self->stash_mp, 1);
    ucs_free(self->rx_msgs);
    ucs_free(self->tx_msgs);
    ucs_free(self->bounce);
    ucs_free(self->zwait);
}

UCS_CLASS_DEFINE(uct_unimem_iface_t, uct_sm_iface_t);
static UCS_CLASS_DEFINE_NEW_FUNC(uct_unimem_iface_t, uct_iface_t, uct_md_h, uct_worker_h,
                                 const uct_iface_params_t*, const uct_iface_config_t*);
static UCS_CLASS_DEFINE_DELETE_FUNC(uct_unimem_iface_t, uct_iface_t);

static ucs_status_t uct_unimem_query_devices(uct_md_h md,
                                             uct_tl_device_resource_t **devices_p,
                                             unsigned *num_devices_p)
{
    return uct_single_device_resource(md, unimem_hal_device_name(), UCT_DEVICE_TYPE_SHM,
                                      UCS_SYS_DEVICE_ID_UNKNOWN, devices_p, num_devices_p);
}

/* Per operation (ucx_ext_perf.h): the mailbox's and the landing slots' copies are the
 * sender's, one core; a zDMA (from ZCOPY_THRESH) is one process_vm_readv/writev in the
 * emulation, a descriptor post on the hardware: the emulation's cost is what runs here. */
static ucs_status_t uct_unimem_iface_estimate_perf(uct_iface_h tl_iface,
                                                   uct_perf_attr_t *perf_attr)
{
    static const ucx_ext_perf_copy_t copy = {
        .iface_cores    = 1,
        .zcopy_cores    = 1,
        .zcopy_overhead = 500e-9
    };

    return ucx_ext_perf_copy_estimate(tl_iface, perf_attr, &copy);
}

/* What UCP asks besides the iface ops (ucx_ext_compat.h) */
static const ucx_ext_iface_hooks_t uct_unimem_iface_hooks = {
    .is_reachable    = uct_unimem_iface_is_reachable,
    .ep_is_connected = ucx_ext_ep_is_connected,
    .estimate_perf   = uct_unimem_iface_estimate_perf
};

static ucx_ext_internal_ops_t uct_unimem_internal_ops =
        UCX_EXT_INTERNAL_OPS(&uct_unimem_iface_hooks);

static uct_iface_ops_t uct_unimem_iface_ops = {
    UCX_EXT_OPS_AM(uct_unimem_ep),
    .ep_am_zcopy              = UCX_EXT_UNSUPPORTED(uct_ep_am_zcopy_func_t),
    UCX_EXT_OPS_RMA(uct_unimem_ep),
    UCX_EXT_OPS_NO_ATOMICS,
    UCX_EXT_OPS_NO_TAG,
    UCX_EXT_OPS_NO_EP_ADDR,
    UCX_EXT_OPS_EVENTS(uct_unimem_iface),
    UCX_EXT_OPS_PENDING,
    UCX_EXT_OPS_LIFE(uct_unimem_ep_t, uct_unimem_iface_t),
    UCX_EXT_OPS_SM,
    UCX_EXT_OPS_IFACE(uct_unimem_iface)
};

UCT_TL_DEFINE_ENTRY(&uct_unimem_component.super, unimem, uct_unimem_query_devices,
                    uct_unimem_iface_t, UCT_UNIMEM_PREFIX, uct_unimem_iface_config_table,
                    uct_unimem_iface_config_t);
