/*
 * rdmach ep: one sender of one ring in the peer's receive side, claimed through the wire table
 * (connect to iface: shm), or one end of a connection the wire joins with the peer's (connect
 * ep to ep: RC). Active messages go through the ring (no syscall, no atomic, no allocation on
 * shared memory); put/get are the wire's RDMA write/read (shm: process_vm_writev/readv,
 * complete at return; RC: RDMA WRITE/READ), or stores and loads where the key's segment is
 * mapped here (memory the shm md allocated, ucx_ext_xmem.h).
 */
#include "rdmach_uct.h"
#include "ucx_ext_sys.h"

#include <uct/base/uct_iov.inl>
#include <errno.h>
#include <sys/uio.h>

/* Until ep_connect_to_ep the ep has no room: sends answer NO_RESOURCE, pending requests wait. */
static void uct_rdmach_ep_unconnected(uct_rdmach_ep_t *ep, const rdmach_geom_t *geom)
{
    static rdmach_ring_ctl_t ctl = {.rx_hot = 1};
    static const rdmach_ring_ops_t ops;
    static uint64_t tail;
    static uint8_t doorbell;

    ep->tx = &ep->own_tx;
    rdmach_tx_init(ep->tx, geom, NULL, &ctl, &doorbell, &tail, &ops, NULL);
    ep->tx->head = geom->nslots;
}

/* Connect ep to ep: the wire opens our end now, ep_connect_to_ep joins it with the peer's. */
static ucs_status_t uct_rdmach_ep_open(uct_rdmach_ep_t *self, uct_rdmach_iface_t *iface)
{
    rdmach_wire_t *wire = iface->wire;
    int ret;

    if (wire->ops->ep_open == NULL) {
        ucs_error("rdmach: the %s wire connects to an iface address only", wire->ops->name);
        return UCS_ERR_INVALID_PARAM;
    }
    ret = wire->ops->ep_open(wire, self, &self->peer);
    if (ret == -ENOSPC) {
        ucs_error("rdmach: iface %p has made %u connections, UCX_RDMACH_MAX_PEERS allows no more",
                  iface, wire->max_rings);
        return UCS_ERR_EXCEEDS_LIMIT;
    } else if (ret != 0) {
        return uct_rdmach_wire_status(ret, UCS_ERR_IO_ERROR);
    }
    self->ring_id = UINT32_MAX;
    uct_rdmach_ep_unconnected(self, &iface->geom);
    return UCS_OK;
}

UCS_CLASS_INIT_FUNC(uct_rdmach_ep_t, const uct_ep_params_t *params)
{
    uct_rdmach_iface_t *iface = ucs_derived_of(params->iface, uct_rdmach_iface_t);
    rdmach_wire_t *wire       = iface->wire;
    rdmach_wire_peer_t *peer;
    rdmach_wire_addr_t info;
    uct_rdmach_conn_t *conn;
    uint32_t id;
    int ret;

    self->peer     = NULL;
    self->tx       = NULL;
    self->amo_busy = 0;
    self->serve_rma_after = 0;
    self->serve_seen      = 0;
    self->fenced   = UCT_RDMACH_FENCE_NONE;
    if (!(params->field_mask & UCT_EP_PARAM_FIELD_IFACE_ADDR)) {
        UCS_CLASS_CALL_SUPER_INIT(ucx_ext_ep_t, &iface->super.super, &iface->x, 0);
        return uct_rdmach_ep_open(self, iface);
    }

    UCT_EP_PARAMS_CHECK_DEV_IFACE_ADDRS(params);
    if (wire->ops->attach == NULL) {
        ucs_error("rdmach: the %s wire connects ep to ep only", wire->ops->name);
        return UCS_ERR_INVALID_PARAM;
    }
    if (wire->ops->unpack_addr(wire, params->dev_addr, params->iface_addr, &info) != 0) {
        ucs_error("rdmach: the %s wire cannot reach the peer's address", wire->ops->name);
        return UCS_ERR_UNREACHABLE;
    }
    UCS_CLASS_CALL_SUPER_INIT(ucx_ext_ep_t, &iface->super.super, &iface->x, info.pid);
    ucx_ext_ep_set_peer_addr(&self->super, UCX_EXT_PEER_IFACE, params->iface_addr,
                             wire->ops->iface_addr_len);

    ret = wire->ops->attach(wire, params->iface_addr, &peer);
    if (ret != 0) {
        return uct_rdmach_wire_status(ret, UCS_ERR_IO_ERROR);
    }
    ucs_list_for_each(conn, &iface->conns, list) {
        if (conn->peer == peer) {
            ++conn->refs;
            self->tx      = &conn->tx;      /* the ring this iface has there already */
            self->ring_id = conn->ring_id;
            self->peer    = peer;
            return UCS_OK;
        }
    }


    /* the receiver's geometry rules; our largest record must fit its largest span */
    if (rdmach_geom_span(&peer->geom, ucs_max(iface->chunk_size, iface->max_short)) >
        peer->geom.max_span) {
        ucs_error("rdmach: peer %s accepts records of at most %u x %u bytes, smaller than "
                  "this process's UCX_RDMACH_CHUNK_SIZE=%zu: use the same configuration",
                  info.name, peer->geom.max_span, peer->geom.slot_size, iface->chunk_size);
        return UCS_ERR_UNREACHABLE;
    }

    conn = ucs_malloc(sizeof(*conn), "rdmach_conn");
    if (conn == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    ret = wire->ops->claim(wire, peer, &conn->tx, &id);
    if (ret != 0) {
        ucs_free(conn);
        if (ret == -ENOSPC) {
            ucs_error("rdmach: peer %s accepts no more connections (its "
                      "UCX_RDMACH_MAX_PEERS=%u)", info.name, peer->max_rings);
            return UCS_ERR_EXCEEDS_LIMIT;
        } else if (ret == -ENOBUFS) {
            ucs_error("rdmach: iface %p sends to %u peer ifaces, UCX_RDMACH_MAX_PEERS allows "
                      "no more", iface, wire->max_rings);
            return UCS_ERR_EXCEEDS_LIMIT;
        }
        return uct_rdmach_wire_status(ret, UCS_ERR_IO_ERROR);
    }
    conn->peer    = peer;
    conn->ring_id = id;
    conn->refs    = 1;
    ucs_list_add_tail(&iface->conns, &conn->list);
    self->tx      = &conn->tx;
    self->ring_id = id;
    self->peer    = peer;
    ucs_debug("rdmach ep %p: ring %u of %s", self, id, info.name);
    return UCS_OK;
}

/* The last ep into a shared ring has gone: the ring stays with the iface for the next ep to
 * that peer, unless the peer has gone too (closed, dead): then it is given up, with its credit
 * line and, with its last ring, the peer's mapping. */
static void uct_rdmach_ep_conn_put(uct_rdmach_ep_t *ep, rdmach_wire_t *wire)
{
    uct_rdmach_conn_t *conn = ucs_container_of(ep->tx, uct_rdmach_conn_t, tx);

    if ((--conn->refs > 0) || (wire->ops->unclaim == NULL)) {
        return;
    }
    if (!wire->ops->peer_closed(wire, conn->peer) &&
        ucx_ext_proc_alive(ep->super.pid, ep->super.start_time)) {
        return;
    }
    wire->ops->unclaim(wire, conn->peer, &conn->tx);
    ucs_list_del(&conn->list);
    ucs_free(conn);
    uct_rdmach_counters.rings_unclaimed++;
}

UCS_CLASS_CLEANUP_FUNC(uct_rdmach_ep_t)
{
    rdmach_wire_t *wire = ucs_derived_of(self->super.super.super.iface,
                                         uct_rdmach_iface_t)->wire;

    uct_rdmach_amo_ep_cleanup(self);
    if (self->fenced != UCT_RDMACH_FENCE_NONE) {
        --ucs_derived_of(self->super.super.super.iface, uct_rdmach_iface_t)->fenced;
    }
    if ((self->tx != NULL) && (self->tx != &self->own_tx)) {
        uct_rdmach_ep_conn_put(self, wire);
    }
    if ((wire->ops->ep_close != NULL) && (self->peer != NULL)) {
        wire->ops->ep_close(wire, self->peer);   /* ends its atomics in flight too */
    }
}

ucs_status_t uct_rdmach_ep_get_address(uct_ep_h tl_ep, uct_ep_addr_t *addr)
{
    uct_rdmach_ep_t *ep = ucs_derived_of(tl_ep, uct_rdmach_ep_t);
    rdmach_wire_t *wire = ucs_derived_of(tl_ep->iface, uct_rdmach_iface_t)->wire;

    if (wire->ops->ep_pack_addr == NULL) {
        return UCS_ERR_UNSUPPORTED;
    }
    wire->ops->ep_pack_addr(ep->peer, addr);
    return UCS_OK;
}

ucs_status_t uct_rdmach_ep_connect_to_ep(uct_ep_h tl_ep, const uct_device_addr_t *dev_addr,
                                         const uct_ep_addr_t *ep_addr)
{
    uct_rdmach_ep_t *ep = ucs_derived_of(tl_ep, uct_rdmach_ep_t);
    rdmach_wire_t *wire = ucs_derived_of(tl_ep->iface, uct_rdmach_iface_t)->wire;
    int ret;

    if (wire->ops->ep_connect == NULL) {
        return UCS_ERR_UNSUPPORTED;
    }
    ret = wire->ops->ep_connect(wire, ep->peer, dev_addr, ep_addr, ep->tx);
    if (ret != 0) {
        return uct_rdmach_wire_status(ret, UCS_ERR_UNREACHABLE);
    }
    ucx_ext_ep_set_peer_addr(&ep->super, UCX_EXT_PEER_EP, ep_addr, wire->ops->ep_addr_len);
    ucs_debug("rdmach ep %p: connected over %s", ep, wire->ops->name);
    return UCS_OK;
}

UCS_CLASS_DEFINE(uct_rdmach_ep_t, ucx_ext_ep_t);
UCS_CLASS_DEFINE_NEW_FUNC(uct_rdmach_ep_t, uct_ep_t, const uct_ep_params_t*);
UCS_CLASS_DEFINE_DELETE_FUNC(uct_rdmach_ep_t, uct_ep_t);

/* ---- active messages: the ring ---- */

typedef enum {
    UCT_RDMACH_SEND_SHORT,       /* header + payload */
    UCT_RDMACH_SEND_SHORT_IOV,   /* an iov list */
    UCT_RDMACH_SEND_BCOPY        /* what pack_cb writes */
} uct_rdmach_send_t;

/* The one send of an active message (after UCX's mm_ep.c): room in the ring, the record's
 * data, the commit (the piggybacked head mark; on RC the WRITE) and the counters. send is a
 * constant in each caller, so each folds to its own straight path. */
static UCS_F_ALWAYS_INLINE ssize_t
uct_rdmach_ep_am_send(uct_rdmach_send_t send, uct_rdmach_ep_t *ep, uint8_t id, uint64_t header,
                      const void *payload, unsigned length, const uct_iov_t *iov,
                      size_t iovcnt, uct_pack_callback_t pack_cb, void *arg, unsigned flags)
{
    uct_rdmach_iface_t *iface;
    rdmach_rec_hdr_t *rec;
    ucs_iov_iter_t iov_iter;
    uint32_t max_span, to_end;
    size_t len;

    UCT_CHECK_AM_ID(id);
    if (ucs_unlikely(ucx_ext_ep_must_queue(&ep->super))) {
        return ucx_ext_ep_no_resource(&ep->super, flags);
    }

    switch (send) {
    case UCT_RDMACH_SEND_SHORT:
        len = length + sizeof(header);
        rec = rdmach_tx_reserve(ep->tx, len);
        if (ucs_unlikely(rec == NULL)) {
            return ucx_ext_ep_no_resource(&ep->super, flags);
        }
        *(uint64_t*)(rec + 1) = header;
        if (length <= 32) {
            ucx_ext_copy_small((uint8_t*)(rec + 1) + sizeof(header), payload, length);
        } else {
            memcpy((uint8_t*)(rec + 1) + sizeof(header), payload, length);
        }
        break;
    case UCT_RDMACH_SEND_SHORT_IOV:
        len = uct_iov_total_length(iov, iovcnt);
        rec = rdmach_tx_reserve(ep->tx, len);
        if (ucs_unlikely(rec == NULL)) {
            return ucx_ext_ep_no_resource(&ep->super, flags);
        }
        ucs_iov_iter_init(&iov_iter);
        uct_iov_to_buffer(iov, iovcnt, &iov_iter, rec + 1, SIZE_MAX);
        break;
    default:
        /* the packer may advance the caller's state, so room is ensured before it runs */
        iface    = ucs_derived_of(ep->super.super.super.iface, uct_rdmach_iface_t);
        max_span = ep->tx->geom.max_span;
        to_end   = rdmach_tx_to_end(ep->tx);
        if (ucs_likely(to_end >= max_span)) {
            if (ucs_unlikely(!rdmach_tx_ensure(ep->tx, max_span))) {
                return ucx_ext_ep_no_resource(&ep->super, flags);
            }
            rec = (rdmach_rec_hdr_t*)rdmach_tx_slot(ep->tx, ep->tx->geom.nslots - to_end);
            len = pack_cb(rec + 1, arg);
        } else {
            /* near the ring end the length decides whether a pad is needed: pack aside */
            if (ucs_unlikely(!rdmach_tx_ensure(ep->tx, to_end + max_span))) {
                return ucx_ext_ep_no_resource(&ep->super, flags);
            }
            len = pack_cb(iface->bounce, arg);
            rec = rdmach_tx_reserve(ep->tx, len);
            ucs_assert(rec != NULL);
            memcpy(rec + 1, iface->bounce, len);
        }
        ucs_assertv(len <= iface->chunk_size, "am_bcopy length %zu > chunk %zu", len,
                    iface->chunk_size);
        break;
    }
    rdmach_tx_commit(ep->tx, rec, id, (uint32_t)len);

    if (send == UCT_RDMACH_SEND_BCOPY) {
        UCT_RDMACH_COUNT(tx_am_bcopy, 1);
    } else {
        UCT_RDMACH_COUNT(tx_am_short, 1);
    }
    UCT_RDMACH_COUNT(tx_bytes, len);
    return (send == UCT_RDMACH_SEND_BCOPY) ? (ssize_t)len : UCS_OK;
}

ucs_status_t uct_rdmach_ep_am_short(uct_ep_h tl_ep, uint8_t id, uint64_t header,
                                    const void *payload, unsigned length)
{
    UCT_CHECK_LENGTH(length + sizeof(header), 0,
                     ucs_derived_of(tl_ep->iface, uct_rdmach_iface_t)->max_short, "am_short");
    return (ucs_status_t)uct_rdmach_ep_am_send(UCT_RDMACH_SEND_SHORT,
                                               ucs_derived_of(tl_ep, uct_rdmach_ep_t), id,
                                               header, payload, length, NULL, 0, NULL, NULL, 0);
}

ucs_status_t uct_rdmach_ep_am_short_iov(uct_ep_h tl_ep, uint8_t id, const uct_iov_t *iov,
                                        size_t iovcnt)
{
    UCT_CHECK_LENGTH(uct_iov_total_length(iov, iovcnt), 0,
                     ucs_derived_of(tl_ep->iface, uct_rdmach_iface_t)->max_short,
                     "am_short_iov");
    return (ucs_status_t)uct_rdmach_ep_am_send(UCT_RDMACH_SEND_SHORT_IOV,
                                               ucs_derived_of(tl_ep, uct_rdmach_ep_t), id, 0,
                                               NULL, 0, iov, iovcnt, NULL, NULL, 0);
}

ssize_t uct_rdmach_ep_am_bcopy(uct_ep_h tl_ep, uint8_t id, uct_pack_callback_t pack_cb,
                               void *arg, unsigned flags)
{
    return uct_rdmach_ep_am_send(UCT_RDMACH_SEND_BCOPY, ucs_derived_of(tl_ep, uct_rdmach_ep_t),
                                 id, 0, NULL, 0, NULL, 0, pack_cb, arg, flags);
}

/* ---- RMA: the wire's RDMA write/read, checked against the remote key ---- */

static UCS_F_NOINLINE ucs_status_t
uct_rdmach_ep_rma_error(uct_rdmach_ep_t *ep, const char *op, size_t length,
                        uint64_t remote_addr, int err)
{
    if (err == EAGAIN) {
        return ucx_ext_ep_no_resource(&ep->super, 0);
    }
    if ((err == ESRCH) || (err == ECONNRESET) ||
        ((err == EPERM) && !ucx_ext_ep_peer_alive(&ep->super))) {
        /* failed once and counted; the error handler runs from progress, not inside this
         * op (UCP 1.22 reconfigures and may destroy the ep from there) */
        ucx_ext_ep_set_failed(&ep->super, UCS_ERR_ENDPOINT_TIMEOUT);
        return UCS_ERR_ENDPOINT_TIMEOUT;
    }
    ucs_error("rdmach: %s of %zu bytes at 0x%" PRIx64 " in pid %d failed: %s%s", op, length,
              remote_addr, ep->super.pid, strerror(err),
              (err == EPERM) ? " (check kernel.yama.ptrace_scope and that both processes "
                               "run as the same user)" : "");
    return (err == EFAULT) ? UCS_ERR_INVALID_ADDR : UCS_ERR_IO_ERROR;
}

/* A served get's bytes into the caller's buffer (a zcopy get). */
static void uct_rdmach_ep_unpack_to(void *arg, const void *data, size_t length)
{
    memcpy(arg, data, length);
}

/* comp == NULL: complete at return (see the wire table's rma). */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_rdmach_ep_rma(uct_rdmach_ep_t *ep, const rdmach_wire_iov_t *local, size_t cnt, size_t length,
                  uint64_t remote_addr, uct_rkey_t rkey, int write, uct_completion_t *comp)
{
    const char *op            = write ? "put" : "get";
    uct_rdmach_iface_t *iface = ucs_derived_of(ep->super.super.super.iface, uct_rdmach_iface_t);
    rdmach_wire_t *wire       = iface->wire;
    const uct_rdmach_rkey_t *key = uct_rdmach_ep_key(ep, op, length, remote_addr, rkey);
    ucs_status_t status;
    uint8_t *mapped;
    int ret;

    if (key == NULL) {
        return UCS_ERR_INVALID_PARAM;
    }
    if (ucs_unlikely(ep->super.blocked)) {
        return ucx_ext_ep_no_resource(&ep->super, 0);   /* behind a fence */
    }
    mapped = uct_rdmach_ep_mapped(rkey, remote_addr, length);
    if ((mapped == NULL) && (cnt == 1) && uct_rdmach_serve_rma_fits(iface, length) &&
        (write || (comp != NULL))) {
        /* a small put or get on memory we cannot map: the target's progress, if it serves
         * (a put is done at return: its bytes are copied; a get copies at the reply). It
         * may follow the ep's served requests in flight: the target serves the ring's
         * records in order */
        status = uct_rdmach_serve_rma_start(ep, key, remote_addr,
                                            write ? local->base : NULL, length,
                                            uct_rdmach_ep_unpack_to, local->base, comp);
        if (status != UCS_ERR_UNSUPPORTED) {
            return status;
        }
    }
    if (uct_rdmach_ep_serving(ep, iface)) {
        return ucx_ext_ep_no_resource(&ep->super, 0);   /* after the served requests */
    }
    /* memory mapped here (ucx_ext_xmem.h): stores and loads, no system call; a large one
     * with a completion goes to the wire, which may copy it together with the peer */
    if ((mapped != NULL) && ((comp == NULL) || (length < wire->rma_async_min))) {
        rdmach_wire_iov_copy_mapped(mapped, local, cnt, write);
        UCT_RDMACH_COUNT_OWN(rma_mapped);
        return UCS_OK;
    }
    if (mapped != NULL) {
        UCT_RDMACH_COUNT_OWN(rma_mapped);
    }
    ret = wire->ops->rma(wire, ep->peer, local, cnt, remote_addr, key->key, length, write,
                         mapped, comp);
    if (ucs_likely(ret == 0)) {
        return UCS_OK;
    } else if (ret == RDMACH_WIRE_INPROGRESS) {
        return UCS_INPROGRESS;
    }
    return uct_rdmach_ep_rma_error(ep, op, length, remote_addr, -ret);
}

ucs_status_t uct_rdmach_ep_put_short(uct_ep_h tl_ep, const void *buffer, unsigned length,
                                     uint64_t remote_addr, uct_rkey_t rkey)
{
    uct_rdmach_ep_t *ep = ucs_derived_of(tl_ep, uct_rdmach_ep_t);
    rdmach_wire_iov_t local = {(void*)buffer, length, NULL};

    UCT_CHECK_LENGTH(length, 0, ucs_derived_of(tl_ep->iface, uct_rdmach_iface_t)->put_max_short,
                     "put_short");
    if (length == 0) {
        return UCS_OK;
    }
    UCT_RDMACH_COUNT(tx_put_short, 1);
    UCX_EXT_COUNT_RMA_BYTES(UCT_RDMACH_COUNT, 1, length);
    return uct_rdmach_ep_rma(ep, &local, 1, length, remote_addr, rkey, 1, NULL);
}

ssize_t uct_rdmach_ep_put_bcopy(uct_ep_h tl_ep, uct_pack_callback_t pack_cb, void *arg,
                                uint64_t remote_addr, uct_rkey_t rkey)
{
    uct_rdmach_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_rdmach_iface_t);
    uct_rdmach_ep_t *ep       = ucs_derived_of(tl_ep, uct_rdmach_ep_t);
    rdmach_wire_iov_t local;
    ucs_status_t status;
    size_t length;
    void *mapped;

    /* mapped here, with room for the largest fragment inside the key's region: packed
     * straight into the peer's memory, one copy (else through the bounce buffer, checked) */
    if (!uct_rdmach_ep_serving(ep, iface) &&
        uct_rdmach_ep_key_holds(ep, rkey, remote_addr, iface->chunk_size) &&
        ((mapped = uct_rdmach_ep_mapped(rkey, remote_addr, iface->chunk_size)) != NULL)) {
        length = pack_cb(mapped, arg);
        UCT_RDMACH_COUNT(tx_put_bcopy, 1);
        UCX_EXT_COUNT_RMA_BYTES(UCT_RDMACH_COUNT, 1, length);
        UCT_RDMACH_COUNT_OWN(rma_mapped);
        return length;
    }
    length        = pack_cb(iface->bounce, arg);
    local.base    = iface->bounce;
    local.len     = length;
    local.reg     = NULL;
    UCT_RDMACH_COUNT(tx_put_bcopy, 1);
    UCX_EXT_COUNT_RMA_BYTES(UCT_RDMACH_COUNT, 1, length);
    if (length == 0) {
        return 0;
    }
    status = uct_rdmach_ep_rma(ep, &local, 1, length, remote_addr, rkey, 1, NULL);
    return (status == UCS_OK) ? (ssize_t)length : status;
}

static UCS_F_ALWAYS_INLINE ucs_status_t
uct_rdmach_ep_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov, size_t iovcnt, uint64_t remote_addr,
                    uct_rkey_t rkey, int write, uct_completion_t *comp)
{
    uct_rdmach_ep_t *ep = ucs_derived_of(tl_ep, uct_rdmach_ep_t);
    /* a wire without domains (shm) registers nothing: a memh there may be another kind,
     * e.g. of memory the md allocated (ucx_ext_xmem.h), and is never looked into */
    int domains = ucs_derived_of(tl_ep->iface, uct_rdmach_iface_t)->wire->ops->mem_reg != NULL;
    rdmach_wire_iov_t local[RDMACH_WIRE_MAX_IOV];
    size_t i, cnt = 0, length = 0, len;

    /* each buffer with its registration in the wire's domain (RC: the lkey) */
    for (i = 0; i < iovcnt; ++i) {
        len = uct_iov_get_length(&iov[i]);
        if (len == 0) {
            continue;
        }
        if (cnt == RDMACH_WIRE_MAX_IOV) {
            return UCS_ERR_INVALID_PARAM;
        }
        local[cnt].base = iov[i].buffer;
        local[cnt].len  = len;
        local[cnt].reg  = (!domains || (iov[i].memh == UCT_MEM_HANDLE_NULL)) ? NULL :
                          ((uct_rdmach_memh_t*)iov[i].memh)->reg;
        length         += len;
        ++cnt;
    }
    if (length == 0) {
        return UCS_OK;
    }
    UCX_EXT_COUNT_RMA_BYTES(UCT_RDMACH_COUNT, write, length);
    return uct_rdmach_ep_rma(ep, local, cnt, length, remote_addr, rkey, write, comp);
}

UCX_EXT_EP_ZCOPY_DEFINE(uct_rdmach_ep, UCT_RDMACH_COUNT)

ucs_status_t uct_rdmach_ep_get_bcopy(uct_ep_h tl_ep, uct_unpack_callback_t unpack_cb,
                                     void *arg, size_t length, uint64_t remote_addr,
                                     uct_rkey_t rkey, uct_completion_t *comp)
{
    uct_rdmach_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_rdmach_iface_t);
    uct_rdmach_ep_t *ep       = ucs_derived_of(tl_ep, uct_rdmach_ep_t);
    rdmach_wire_iov_t local   = {iface->bounce, length, NULL};
    ucs_status_t status;
    void *mapped;

    UCT_CHECK_LENGTH(length, 0, iface->chunk_size, "get_bcopy");
    UCT_RDMACH_COUNT(tx_get_bcopy, 1);
    UCX_EXT_COUNT_RMA_BYTES(UCT_RDMACH_COUNT, 0, length);
    if ((iface->wire->ops->get_unpack != NULL) && (comp != NULL) && (length > 0)) {
        /* a network wire reads into its own buffer and unpacks at completion (RC: several
         * reads in flight instead of one round trip per call) */
        const uct_rdmach_rkey_t *key = uct_rdmach_ep_key(ep, "get", length, remote_addr, rkey);
        int ret;

        if (key == NULL) {
            return UCS_ERR_INVALID_PARAM;
        }
        ret = iface->wire->ops->get_unpack(iface->wire, ep->peer, remote_addr, key->key, length,
                                           unpack_cb, arg, comp);
        if (ret == RDMACH_WIRE_INPROGRESS) {
            return UCS_INPROGRESS;
        }
        return uct_rdmach_ep_rma_error(ep, "get", length, remote_addr, -ret);
    }
    if ((length > 0) && !ep->super.blocked) {
        const uct_rdmach_rkey_t *key = uct_rdmach_ep_key(ep, "get", length, remote_addr, rkey);

        if (key == NULL) {
            return UCS_ERR_INVALID_PARAM;
        }
        /* mapped here: unpacked straight from the peer's memory */
        mapped = uct_rdmach_ep_mapped(rkey, remote_addr, length);
        if ((mapped != NULL) && !uct_rdmach_ep_serving(ep, iface)) {
            UCT_RDMACH_COUNT_OWN(rma_mapped);
            unpack_cb(arg, mapped, length);
            return UCS_OK;
        }
        /* a small one on memory we cannot map: the target's progress, if it serves (behind
         * the ep's served requests in flight, in the ring's order) */
        if ((mapped == NULL) && (comp != NULL) && uct_rdmach_serve_rma_fits(iface, length)) {
            status = uct_rdmach_serve_rma_start(ep, key, remote_addr, NULL, length,
                                                unpack_cb, arg, comp);
            if (status != UCS_ERR_UNSUPPORTED) {
                return status;
            }
        }
    }
    if (length > 0) {
        status = uct_rdmach_ep_rma(ep, &local, 1, length, remote_addr, rkey, 0, NULL);
        if (status != UCS_OK) {
            return status;
        }
    }
    unpack_cb(arg, iface->bounce, length);
    return UCS_OK;
}

/* ---- pending, flush, check ---- */

/* The peer's process is watched on this host; a network wire probes the connection (RC: a
 * zero-byte WRITE whose retries run out if the peer is gone). */
ucs_status_t uct_rdmach_ep_check(uct_ep_h tl_ep, unsigned flags, uct_completion_t *comp)
{
    uct_rdmach_ep_t *ep = ucs_derived_of(tl_ep, uct_rdmach_ep_t);
    rdmach_wire_t *wire = ucs_derived_of(tl_ep->iface, uct_rdmach_iface_t)->wire;

    if ((wire->ops->check == NULL) || (ep->peer == NULL)) {
        return ucx_ext_ep_check(tl_ep, flags, comp);
    }
    UCX_EXT_EP_CHECK_PARAMS(flags, comp);
    return (wire->ops->check(wire, ep->peer) == -EAGAIN) ? UCS_ERR_NO_RESOURCE : UCS_OK;
}

int uct_rdmach_ep_peer_closed(ucx_ext_ep_t *x_ep)
{
    uct_rdmach_ep_t *ep = ucs_derived_of(x_ep, uct_rdmach_ep_t);
    rdmach_wire_t *wire = ucs_derived_of(x_ep->super.super.iface, uct_rdmach_iface_t)->wire;

    return (ep->peer != NULL) && wire->ops->peer_closed(wire, ep->peer);
}

int uct_rdmach_ep_tx_ready(ucx_ext_ep_t *ep)
{
    uct_rdmach_ep_t *rep = ucs_derived_of(ep, uct_rdmach_ep_t);

    /* a flush waits for the atomics in flight (see uct_rdmach_ep_flush) */
    return rdmach_tx_has_room(rep->tx) && (rep->amo_busy == 0);
}

/* Requests still in the pending queue are not issued yet; what was issued is complete in the
 * peer's memory when it returns on a wire without flush (shm: ring stores, synchronous
 * process_vm), else the wire tells. */
ucs_status_t uct_rdmach_ep_flush(uct_ep_h tl_ep, unsigned flags, uct_completion_t *comp)
{
    uct_rdmach_ep_t *ep = ucs_derived_of(tl_ep, uct_rdmach_ep_t);
    rdmach_wire_t *wire = ucs_derived_of(tl_ep->iface, uct_rdmach_iface_t)->wire;
    ucs_status_t status;
    int ret;

    status = ucx_ext_ep_flush_queued(&ep->super);
    if ((status != UCS_OK) || ((wire->ops->flush == NULL) && (ep->amo_busy == 0))) {
        return status;
    }
    if (ep->amo_busy != 0) {
        /* a compare-and-swap loop posts its next step after any flush WRITE of ours would
         * be, and a served atomic is done when its reply comes: pending until they are
         * done (tx_ready) */
        return ucx_ext_ep_no_resource(&ep->super, 0);
    }
    ret = wire->ops->flush(wire, ep->peer, comp);
    if (ret == -EAGAIN) {
        return ucx_ext_ep_no_resource(&ep->super, 0);
    }
    return (ret == RDMACH_WIRE_INPROGRESS) ? UCS_INPROGRESS :
           uct_rdmach_wire_status(ret, UCS_ERR_IO_ERROR);
}
