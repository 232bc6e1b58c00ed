/*
 * ud_zcopy ep: a handle on the core's per-peer state (connect-to-iface: nothing is exchanged to
 * create it, the peer learns of us from our first datagram). Sends map onto the core's reliable
 * stream; get_zcopy onto a zero-copy transfer over a data channel.
 */
#include "udz_uct.h"

#include <ucs/debug/memtrack_int.h>
#include <uct/base/uct_iov.inl>
#include <errno.h>

/* The peer's control address and cookie from the addresses UCP exchanged (the wire's part
 * first, as uct_udz_iface_get_address packs them). */
static void uct_udz_ep_unpack_addr(const uct_udz_iface_t *iface,
                                   const uct_device_addr_t *dev_addr,
                                   const uct_iface_addr_t *iface_addr, udz_addr_t *addr,
                                   udz_chans_t *chans, uint64_t *cookie)
{
    iface->wops->addr_unpack(dev_addr, iface_addr, addr, chans);
    memcpy(cookie, UCS_PTR_BYTE_OFFSET(iface_addr, iface->wops->iface_addr_len),
           sizeof(*cookie));
}

UCS_CLASS_INIT_FUNC(uct_udz_ep_t, const uct_ep_params_t *params)
{
    uct_udz_iface_t *iface = ucs_derived_of(params->iface, uct_udz_iface_t);
    udz_addr_t addr;
    udz_chans_t chans;
    uint64_t cookie;

    UCT_EP_PARAMS_CHECK_DEV_IFACE_ADDRS(params);
    UCS_CLASS_CALL_SUPER_INIT(ucx_ext_ep_t, &iface->super, &iface->x, 0);
    ucx_ext_ep_set_peer_addr(&self->super, UCX_EXT_PEER_IFACE, params->iface_addr,
                             iface->wops->iface_addr_len + sizeof(uint64_t));

    uct_udz_ep_unpack_addr(iface, params->dev_addr, params->iface_addr, &addr, &chans,
                           &cookie);
    /* the data channels the peer's address announces: the only ones we serve it on */
    self->peer = udz_peer_get(iface->core, &addr, cookie, &chans);
    if (self->peer == NULL) {
        ucs_error("ud_zcopy: more than UCX_" UCT_UDZ_PREFIX "MAX_PEERS peers");
        return UCS_ERR_EXCEEDS_LIMIT;
    }
    uct_udz_async_unpark(iface);    /* a record: acks and retransmissions need the timer */
    return UCS_OK;
}

/* Another ep of this iface to the same peer (they share the core's peer state)? */
static int uct_udz_ep_peer_shared(uct_udz_iface_t *iface, uct_udz_ep_t *self)
{
    ucx_ext_ep_t *ep;

    ucs_list_for_each(ep, &iface->x.eps, list) {
        if ((ep != &self->super) && (ucs_derived_of(ep, uct_udz_ep_t)->peer == self->peer)) {
            return 1;
        }
    }
    return 0;
}

/* Every operation of the ep completes by the time it is gone (UCT's rule, and the caller may
 * free the completions right after): sends by reference keep their data and go on reliably,
 * gets from a peer no other ep uses are cancelled, flushes complete as cancelled, and
 * completions deferred by the async timer are delivered now. */
UCS_CLASS_CLEANUP_FUNC(uct_udz_ep_t)
{
    uct_udz_iface_t *iface = ucs_derived_of(self->super.super.super.iface, uct_udz_iface_t);
    uct_udz_flush_t *f, *tmp;

    if (!udz_peer_is_failed(self->peer)) {
        udz_peer_absorb(iface->core, self->peer);
        if (!uct_udz_ep_peer_shared(iface, self)) {
            udz_peer_cancel(iface->core, self->peer, -ECANCELED);
        }
    }
    uct_udz_async_complete_now(iface);
    ucs_list_for_each_safe(f, tmp, &iface->flushes, list) {
        if (f->ep == self) {
            ucs_list_del(&f->list);
            uct_invoke_completion(f->comp, UCS_ERR_CANCELED);
            ucs_free(f);
        }
    }
    /* the ep's hold (udz_peer_get): a failed record nobody else holds is freed */
    udz_peer_put(iface->core, self->peer);
}

UCS_CLASS_DEFINE(uct_udz_ep_t, ucx_ext_ep_t);
UCS_CLASS_DEFINE_NEW_FUNC(uct_udz_ep_t, uct_ep_t, const uct_ep_params_t*);
UCS_CLASS_DEFINE_DELETE_FUNC(uct_udz_ep_t, uct_ep_t);

/* ---- peer failure ---- */

/* The core found the peer failed (timeout, unreachable, new incarnation): the error handler
 * runs from the worker's progress queue (uct/common). */
void uct_udz_ep_set_failed(uct_udz_ep_t *ep)
{
    ucx_ext_ep_set_failed(&ep->super, UCS_ERR_ENDPOINT_TIMEOUT);
}

/* A keepalive: a reliable empty message; if the peer never acks it, the core fails the peer. */
ucs_status_t uct_udz_ep_check(uct_ep_h tl_ep, unsigned flags, uct_completion_t *comp)
{
    uct_udz_ep_t *ep       = ucs_derived_of(tl_ep, uct_udz_ep_t);
    uct_udz_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_udz_iface_t);
    int err;

    UCX_EXT_EP_CHECK_PARAMS(flags, comp);
    if (ep->super.failed || udz_peer_is_failed(ep->peer)) {
        uct_udz_ep_set_failed(ep);
        return UCS_OK;
    }
    if (udz_send_begin(iface->core, ep->peer, &err) != NULL) {
        udz_send_commit(iface->core, UDZ_T_AM, UCT_UDZ_AM_ID_KEEPALIVE, 0);
    }
    return UCS_OK;
}

/* While requests wait in the ep's pending queue, a new send (or flush) must not overtake them
 * (UCP matches multi-fragment messages by the order of their first fragments); only the
 * dispatch of this ep's own queue may send. */
static UCS_F_ALWAYS_INLINE int uct_udz_ep_must_queue(uct_udz_ep_t *ep)
{
    uct_udz_iface_t *iface = ucs_derived_of(ep->super.super.super.iface, uct_udz_iface_t);

    return uct_udz_iface_fence_holds(iface) || ucx_ext_ep_must_queue(&ep->super);
}

ucs_status_t uct_udz_ep_fence(uct_ep_h tl_ep, unsigned flags)
{
    uct_udz_fence_set(ucs_derived_of(tl_ep->iface, uct_udz_iface_t));
    return UCS_OK;
}

static UCS_F_NOINLINE ucs_status_t uct_udz_ep_send_error(uct_udz_ep_t *ep, int err)
{
    if (err == -EAGAIN) {
        UCT_UDZ_COUNT(tx_no_resource, 1);
        return UCS_ERR_NO_RESOURCE;
    }
    if (err == -EPIPE) {
        uct_udz_ep_set_failed(ep);
    }
    return uct_udz_status(err);
}

typedef enum {
    UCT_UDZ_SEND_AM_SHORT,
    UCT_UDZ_SEND_AM_BCOPY,
    UCT_UDZ_SEND_PUT_SHORT,
    UCT_UDZ_SEND_PUT_BCOPY
} uct_udz_send_t;

/* The one send of a reliable datagram from the core's send slot (after UCX's mm_ep.c): the
 * fence and pending queue, the slot, the payload (a put's target address and key ahead of
 * its data), the commit and the counters. send is a constant in each caller, so each folds
 * to its own straight path. am_zcopy and the zero-copy RMA go through the core's own calls. */
static UCS_F_ALWAYS_INLINE ssize_t
uct_udz_ep_send(uct_udz_send_t send, uct_udz_ep_t *ep, uint8_t id, uint64_t header,
                const void *buffer, unsigned length, uct_pack_callback_t pack_cb, void *arg,
                uint64_t remote_addr, uct_rkey_t rkey)
{
    uct_udz_iface_t *iface = ucs_derived_of(ep->super.super.super.iface, uct_udz_iface_t);
    int put               = (send == UCT_UDZ_SEND_PUT_SHORT) || (send == UCT_UDZ_SEND_PUT_BCOPY);
    size_t hdr            = put ? sizeof(udz_put_t) : 0;
    udz_put_t *put_hdr;
    uint8_t *data;
    size_t len;
    int err;

    if (uct_udz_ep_must_queue(ep)) {
        UCT_UDZ_COUNT(tx_no_resource, 1);
        return UCS_ERR_NO_RESOURCE;
    }
    data = udz_send_begin(iface->core, ep->peer, &err);
    if (ucs_unlikely(data == NULL)) {
        return uct_udz_ep_send_error(ep, err);
    }
    put_hdr = (udz_put_t*)data;

    switch (send) {
    case UCT_UDZ_SEND_AM_SHORT:
        *(uint64_t*)data = header;
        memcpy(data + sizeof(header), buffer, length);
        len = length + sizeof(header);
        break;
    case UCT_UDZ_SEND_PUT_SHORT:
        put_hdr->addr = remote_addr;
        udz_put_key(put_hdr, (length > 0) ? (const void*)rkey : NULL);
        memcpy(put_hdr + 1, buffer, length);
        len = length;
        break;
    default:
        if (put) {
            put_hdr->addr = remote_addr;
        }
        len = pack_cb(data + hdr, arg);
        if (ucs_unlikely(len > iface->max_payload - hdr)) {
            udz_send_abort(iface->core);
            ucs_error("ud_zcopy: %s packed %zu bytes, max %zu", put ? "put_bcopy" : "am_bcopy",
                      len, iface->max_payload - hdr);
            return UCS_ERR_INVALID_PARAM;
        }
        if (put) {
            udz_put_key(put_hdr, (len > 0) ? (const void*)rkey : NULL);
        }
        break;
    }
    udz_send_commit(iface->core, put ? UDZ_T_PUT : UDZ_T_AM, put ? 0 : id, hdr + len);

    switch (send) {
    case UCT_UDZ_SEND_AM_SHORT:  UCT_UDZ_COUNT(tx_am_short, 1);  break;
    case UCT_UDZ_SEND_AM_BCOPY:  UCT_UDZ_COUNT(tx_am_bcopy, 1);  break;
    case UCT_UDZ_SEND_PUT_SHORT: UCT_UDZ_COUNT(tx_put_short, 1); break;
    default:                     UCT_UDZ_COUNT(tx_put_bcopy, 1); break;
    }
    if (put) {
        UCX_EXT_COUNT_RMA_BYTES(UCT_UDZ_COUNT, 1, len);
    } else {
        UCT_UDZ_COUNT(tx_bytes, len);
    }
    return ((send == UCT_UDZ_SEND_AM_BCOPY) || (send == UCT_UDZ_SEND_PUT_BCOPY)) ?
           (ssize_t)len : UCS_OK;
}

/* ---- active messages ---- */

ucs_status_t uct_udz_ep_am_short(uct_ep_h tl_ep, uint8_t id, uint64_t header,
                                 const void *payload, unsigned length)
{
    UCT_CHECK_AM_ID(id);
    UCT_CHECK_LENGTH(length + sizeof(header), 0,
                     ucs_derived_of(tl_ep->iface, uct_udz_iface_t)->max_payload, "am_short");
    return (ucs_status_t)uct_udz_ep_send(UCT_UDZ_SEND_AM_SHORT,
                                         ucs_derived_of(tl_ep, uct_udz_ep_t), id, header,
                                         payload, length, NULL, NULL, 0, 0);
}

ssize_t uct_udz_ep_am_bcopy(uct_ep_h tl_ep, uint8_t id, uct_pack_callback_t pack_cb,
                            void *arg, unsigned flags)
{
    UCT_CHECK_AM_ID(id);
    return uct_udz_ep_send(UCT_UDZ_SEND_AM_BCOPY, ucs_derived_of(tl_ep, uct_udz_ep_t), id, 0,
                           NULL, 0, pack_cb, arg, 0, 0);
}

/* The caller's iov as the core's (iovcnt <= UDZ_MAX_IOV, checked by the caller; UCX's
 * converter leaves empty entries out); their bytes added to *total. The number of entries. */
static UCS_F_ALWAYS_INLINE size_t uct_udz_ep_iov_gather(const uct_iov_t *iov, size_t iovcnt,
                                                        struct iovec *vec, size_t *total)
{
    size_t n = UDZ_MAX_IOV;
    ucs_iov_iter_t iter;

    ucs_iov_iter_init(&iter);
    *total += uct_iov_to_iovec(vec, &n, iov, iovcnt, SIZE_MAX, &iter);
    return n;
}

/* Zero copy on the send side: the payload goes from the caller's buffer at every
 * (re)transmission, and comp completes when the peer has acked it. */
ucs_status_t uct_udz_ep_am_zcopy(uct_ep_h tl_ep, uint8_t id, const void *header,
                                 unsigned header_length, const uct_iov_t *iov,
                                 size_t iovcnt, unsigned flags, uct_completion_t *comp)
{
    uct_udz_ep_t *ep       = ucs_derived_of(tl_ep, uct_udz_ep_t);
    uct_udz_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_udz_iface_t);
    struct iovec vec[UDZ_MAX_IOV];
    size_t n, total = header_length;
    int err;

    UCT_CHECK_AM_ID(id);
    UCT_CHECK_PARAM(iovcnt <= UDZ_MAX_IOV, "iovcnt %zu > %d", iovcnt, UDZ_MAX_IOV);
    UCT_CHECK_LENGTH(header_length, 0, UCT_UDZ_AM_MAX_HDR(iface), "am_zcopy header");
    n = uct_udz_ep_iov_gather(iov, iovcnt, vec, &total);
    UCT_CHECK_LENGTH(total, 0, iface->max_payload, "am_zcopy");
    if (uct_udz_ep_must_queue(ep)) {
        UCT_UDZ_COUNT(tx_no_resource, 1);
        return UCS_ERR_NO_RESOURCE;
    }
    err = udz_send_iov(iface->core, ep->peer, id, header, header_length, vec, (int)n, comp);
    if (ucs_unlikely(err != 0)) {
        return uct_udz_ep_send_error(ep, err);
    }
    UCT_UDZ_COUNT(tx_am_zcopy, 1);
    UCT_UDZ_COUNT(tx_bytes, total);
    return UCS_INPROGRESS;
}

/* ---- RMA ---- */

ucs_status_t uct_udz_ep_put_short(uct_ep_h tl_ep, const void *buffer, unsigned length,
                                  uint64_t remote_addr, uct_rkey_t rkey)
{
    UCT_CHECK_LENGTH(length, 0,
                     ucs_derived_of(tl_ep->iface, uct_udz_iface_t)->max_payload -
                     sizeof(udz_put_t), "put_short");
    return (ucs_status_t)uct_udz_ep_send(UCT_UDZ_SEND_PUT_SHORT,
                                         ucs_derived_of(tl_ep, uct_udz_ep_t), 0, 0, buffer,
                                         length, NULL, NULL, remote_addr, rkey);
}

ssize_t uct_udz_ep_put_bcopy(uct_ep_h tl_ep, uct_pack_callback_t pack_cb, void *arg,
                             uint64_t remote_addr, uct_rkey_t rkey)
{
    return uct_udz_ep_send(UCT_UDZ_SEND_PUT_BCOPY, ucs_derived_of(tl_ep, uct_udz_ep_t), 0, 0,
                           NULL, 0, pack_cb, arg, remote_addr, rkey);
}

ucs_status_t uct_udz_ep_put_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov, size_t iovcnt,
                                  uint64_t remote_addr, uct_rkey_t rkey,
                                  uct_completion_t *comp)
{
    uct_udz_ep_t *ep       = ucs_derived_of(tl_ep, uct_udz_ep_t);
    uct_udz_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_udz_iface_t);
    struct iovec vec[UDZ_MAX_IOV];
    size_t n, total = 0;
    int err;

    UCT_CHECK_PARAM(iovcnt <= UDZ_MAX_IOV, "iovcnt %zu > %d", iovcnt, UDZ_MAX_IOV);
    n = uct_udz_ep_iov_gather(iov, iovcnt, vec, &total);
    UCT_CHECK_LENGTH(total, 0, iface->max_payload - sizeof(udz_put_t), "put_zcopy");
    if (uct_udz_ep_must_queue(ep)) {
        UCT_UDZ_COUNT(tx_no_resource, 1);
        return UCS_ERR_NO_RESOURCE;
    }
    err = udz_put_iov(iface->core, ep->peer, remote_addr, (const uint8_t*)rkey, vec, (int)n,
                      comp);
    if (ucs_unlikely(err != 0)) {
        return uct_udz_ep_send_error(ep, err);
    }
    UCT_UDZ_COUNT(tx_put_zcopy, 1);
    UCX_EXT_COUNT_RMA_BYTES(UCT_UDZ_COUNT, 1, total);
    return UCS_INPROGRESS;
}

ucs_status_t uct_udz_ep_get_bcopy(uct_ep_h tl_ep, uct_unpack_callback_t unpack_cb, void *arg,
                                  size_t length, uint64_t remote_addr, uct_rkey_t rkey,
                                  uct_completion_t *comp)
{
    uct_udz_ep_t *ep       = ucs_derived_of(tl_ep, uct_udz_ep_t);
    uct_udz_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_udz_iface_t);
    uct_udz_getb_t *g      = NULL;
    unsigned i;
    int err;

    UCT_CHECK_LENGTH(length, 0, iface->max_payload, "get_bcopy");
    if (length == 0) {
        return UCS_OK;
    }
    if (uct_udz_ep_must_queue(ep)) {
        UCT_UDZ_COUNT(tx_no_resource, 1);
        return UCS_ERR_NO_RESOURCE;
    }
    for (i = 0; i < iface->nchannels; ++i) {
        if (!iface->getb[i].busy) {
            g = &iface->getb[i];
            break;
        }
    }
    if (g == NULL) {
        UCT_UDZ_COUNT(tx_no_resource, 1);
        return UCS_ERR_NO_RESOURCE;    /* as many get_bcopy in flight as channels */
    }
    if ((g->buf == NULL) &&
        ((g->buf = ucs_malloc(iface->max_payload, "udz_getb")) == NULL)) {
        return UCS_ERR_NO_MEMORY;
    }
    g->unpack_cb = unpack_cb;
    g->arg       = arg;
    g->length    = length;
    g->comp      = comp;
    err = udz_get(iface->core, ep->peer, g->buf, length, remote_addr, (const uint8_t*)rkey, g);
    if (ucs_unlikely(err != 0)) {
        return uct_udz_ep_send_error(ep, err);
    }
    g->busy = 1;
    UCT_UDZ_COUNT(tx_get_bcopy, 1);
    UCX_EXT_COUNT_RMA_BYTES(UCT_UDZ_COUNT, 0, length);
    return UCS_INPROGRESS;
}

ucs_status_t uct_udz_ep_get_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov, size_t iovcnt,
                                  uint64_t remote_addr, uct_rkey_t rkey,
                                  uct_completion_t *comp)
{
    uct_udz_ep_t *ep       = ucs_derived_of(tl_ep, uct_udz_ep_t);
    uct_udz_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_udz_iface_t);
    size_t length          = uct_iov_total_length(iov, iovcnt);
    int err;

    UCT_CHECK_PARAM(iovcnt == 1, "get_zcopy takes one iov, got %zu", iovcnt);
    UCT_CHECK_LENGTH(length, 0, iface->zc_max, "get_zcopy");
    if (length == 0) {
        return UCS_OK;
    }
    if (uct_udz_ep_must_queue(ep)) {
        UCT_UDZ_COUNT(tx_no_resource, 1);
        return UCS_ERR_NO_RESOURCE;
    }
    err = udz_get(iface->core, ep->peer, iov[0].buffer, length, remote_addr,
                  (const uint8_t*)rkey, comp);
    if (ucs_unlikely(err != 0)) {
        return uct_udz_ep_send_error(ep, err);
    }
    UCT_UDZ_COUNT(tx_get_zcopy, 1);
    UCX_EXT_COUNT_RMA_BYTES(UCT_UDZ_COUNT, 0, length);
    return UCS_INPROGRESS;
}

/* ---- flush ---- */

ucs_status_t uct_udz_ep_flush(uct_ep_h tl_ep, unsigned flags, uct_completion_t *comp)
{
    uct_udz_ep_t *ep       = ucs_derived_of(tl_ep, uct_udz_ep_t);
    uct_udz_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_udz_iface_t);
    uct_udz_flush_t *f;
    uint64_t token;

    if (flags & UCT_FLUSH_FLAG_CANCEL) {
        /* queued requests and gets end now; sends already in the stream cannot be taken out
         * of it (the receiver waits for their sequence numbers): they complete when acked,
         * or fail with the peer, and so does this flush */
        ucx_ext_ep_pending_purge(tl_ep, NULL, NULL);
        udz_peer_cancel(iface->core, ep->peer, -ECANCELED);
        if (ep->super.failed || udz_peer_is_failed(ep->peer)) {
            return UCS_OK;
        }
    } else if (uct_udz_ep_must_queue(ep)) {
        return UCS_ERR_NO_RESOURCE;
    } else if (ep->super.failed || udz_peer_is_failed(ep->peer)) {
        return UCS_ERR_ENDPOINT_TIMEOUT;
    }
    if (udz_flush_done(iface->core, ep->peer, &token, 1)) {
        return UCS_OK;
    }
    if (comp != NULL) {
        f = ucs_malloc(sizeof(*f), "udz_flush");
        if (f == NULL) {
            return UCS_ERR_NO_MEMORY;
        }
        f->ep    = ep;
        f->token = token;
        f->comp  = comp;
        ucs_list_add_tail(&iface->flushes, &f->list);
    }
    return UCS_INPROGRESS;
}

unsigned uct_udz_ep_check_flushes(uct_udz_iface_t *iface)
{
    uct_udz_flush_t *f, *tmp;
    unsigned count = 0;

    ucs_list_for_each_safe(f, tmp, &iface->flushes, list) {
        if (udz_flush_done(iface->core, f->ep->peer, &f->token, 0)) {
            ucs_list_del(&f->list);
            uct_invoke_completion(f->comp, udz_peer_is_failed(f->ep->peer) ?
                                  UCS_ERR_ENDPOINT_TIMEOUT : UCS_OK);
            ucs_free(f);
            ++count;
        }
    }
    return count;
}
