/*
 * rdmach ep: one sender of one ring in the peer's segment.
 * Active messages go through the ring (no syscall, no atomic, no allocation); put/get are the
 * wire's RDMA write/read, process_vm_writev/readv, complete when they return.
 */
#include "rdmach_uct.h"
#include "ucx_ext_sys.h"

#include <uct/base/uct_iov.inl>
#include <errno.h>
#include <sys/uio.h>
#include <unistd.h>

static const rdmach_ring_ops_t uct_rdmach_ep_shm_ops = {NULL, NULL};

UCS_CLASS_INIT_FUNC(uct_rdmach_ep_t, const uct_ep_params_t *params)
{
    uct_rdmach_iface_t *iface = ucs_derived_of(params->iface, uct_rdmach_iface_t);
    const uct_rdmach_iface_addr_t *addr;
    rdmach_shm_seg_t *peer;
    rdmach_ring_ctl_t *ctl;
    rdmach_geom_t geom;
    ucs_status_t status;
    uint32_t credit, id;

    UCT_EP_PARAMS_CHECK_DEV_IFACE_ADDRS(params);
    addr = (const uct_rdmach_iface_addr_t*)params->iface_addr;
    UCS_CLASS_CALL_SUPER_INIT(ucx_ext_ep_t, &iface->super.super, &iface->x, addr->pid);

    credit = iface->next_credit;
    if (credit >= iface->seg.max_rings) {
        ucs_error("rdmach: iface %p has made %u connections, UCX_RDMACH_MAX_PEERS allows no more",
                  iface, credit);
        return UCS_ERR_EXCEEDS_LIMIT;
    }

    status = uct_rdmach_iface_peer(iface, addr->pid, addr->fd, addr->seg_id, &peer);
    if (status != UCS_OK) {
        return status;
    }

    /* the receiver's geometry rules; our largest record must fit its largest span */
    geom = peer->geom;
    if (rdmach_geom_span(&geom, ucs_max(iface->chunk_size, iface->max_short)) > geom.max_span) {
        ucs_error("rdmach: peer pid %d accepts records of at most %u x %u bytes, smaller than "
                  "this process's UCX_RDMACH_CHUNK_SIZE=%zu: use the same configuration",
                  addr->pid, geom.max_span, geom.slot_size, iface->chunk_size);
        return UCS_ERR_UNREACHABLE;
    }

    id = __atomic_fetch_add(&peer->hdr->next_ring, 1, __ATOMIC_RELAXED);
    if (id >= peer->max_rings) {
        ucs_error("rdmach: peer pid %d accepts no more connections (its UCX_RDMACH_MAX_PEERS=%u)",
                  addr->pid, peer->max_rings);
        return UCS_ERR_EXCEEDS_LIMIT;
    }
    iface->next_credit = credit + 1;

    /* describe ourselves, then publish the claim: the receiver looks only after owner != 0 */
    ctl               = rdmach_shm_ring_ctl(peer, id);
    ctl->peer_info[0] = (uint64_t)getpid();
    ctl->peer_info[1] = ((uint64_t)credit << 32) | (uint32_t)iface->seg.fd;
    ctl->peer_info[2] = iface->seg.seg_id;
    __atomic_store_n(&ctl->owner, 1, __ATOMIC_RELEASE);

    rdmach_tx_init(&self->tx, &geom, rdmach_shm_ring_slots(peer, id), ctl,
                   rdmach_shm_doorbells(peer) + id, &rdmach_shm_credit(&iface->seg, credit)->tail,
                   &uct_rdmach_ep_shm_ops, NULL);
    self->ring_id = id;
    ucs_debug("rdmach ep %p: ring %u of pid %d, credit line %u", self, id, addr->pid, credit);
    return UCS_OK;
}

UCS_CLASS_CLEANUP_FUNC(uct_rdmach_ep_t)
{
    /* the ring is not reused: its receiver may still be draining it */
}

UCS_CLASS_DEFINE(uct_rdmach_ep_t, ucx_ext_ep_t);
UCS_CLASS_DEFINE_NEW_FUNC(uct_rdmach_ep_t, uct_ep_t, const uct_ep_params_t*);
UCS_CLASS_DEFINE_DELETE_FUNC(uct_rdmach_ep_t, uct_ep_t);

/* ---- active messages: the ring ---- */

static UCS_F_ALWAYS_INLINE int uct_rdmach_ep_must_queue(uct_rdmach_ep_t *ep)
{
    return ucx_ext_ep_must_queue(&ep->super);
}

static UCS_F_ALWAYS_INLINE ucs_status_t uct_rdmach_ep_no_resource(uct_rdmach_ep_t *ep,
                                                                  unsigned flags)
{
    return ucx_ext_ep_no_resource(&ep->super, flags);
}

ucs_status_t uct_rdmach_ep_am_short(uct_ep_h tl_ep, uint8_t id, uint64_t header,
                                    const void *payload, unsigned length)
{
    uct_rdmach_ep_t *ep = ucs_derived_of(tl_ep, uct_rdmach_ep_t);
    rdmach_rec_hdr_t *rec;
    uint8_t *data;

    UCT_CHECK_AM_ID(id);
    UCT_CHECK_LENGTH(length + sizeof(header), 0,
                     ucs_derived_of(tl_ep->iface, uct_rdmach_iface_t)->max_short, "am_short");

    rec = uct_rdmach_ep_must_queue(ep) ? NULL :
          rdmach_tx_reserve(&ep->tx, length + sizeof(header));
    if (ucs_unlikely(rec == NULL)) {
        return uct_rdmach_ep_no_resource(ep, 0);
    }
    data = (uint8_t*)(rec + 1);
    *(uint64_t*)data = header;
    memcpy(data + sizeof(header), payload, length);
    rdmach_tx_commit(&ep->tx, rec, id, length + sizeof(header));

    UCT_RDMACH_COUNT(tx_am_short, 1);
    UCT_RDMACH_COUNT(tx_bytes, length + sizeof(header));
    return UCS_OK;
}

ucs_status_t uct_rdmach_ep_am_short_iov(uct_ep_h tl_ep, uint8_t id, const uct_iov_t *iov,
                                        size_t iovcnt)
{
    uct_rdmach_ep_t *ep = ucs_derived_of(tl_ep, uct_rdmach_ep_t);
    size_t length       = uct_iov_total_length(iov, iovcnt);
    ucs_iov_iter_t iov_iter;
    rdmach_rec_hdr_t *rec;

    UCT_CHECK_AM_ID(id);
    UCT_CHECK_LENGTH(length, 0, ucs_derived_of(tl_ep->iface, uct_rdmach_iface_t)->max_short,
                     "am_short_iov");

    rec = uct_rdmach_ep_must_queue(ep) ? NULL : rdmach_tx_reserve(&ep->tx, length);
    if (ucs_unlikely(rec == NULL)) {
        return uct_rdmach_ep_no_resource(ep, 0);
    }
    ucs_iov_iter_init(&iov_iter);
    uct_iov_to_buffer(iov, iovcnt, &iov_iter, rec + 1, SIZE_MAX);
    rdmach_tx_commit(&ep->tx, rec, id, (uint32_t)length);

    UCT_RDMACH_COUNT(tx_am_short, 1);
    UCT_RDMACH_COUNT(tx_bytes, length);
    return UCS_OK;
}

ssize_t uct_rdmach_ep_am_bcopy(uct_ep_h tl_ep, uint8_t id, uct_pack_callback_t pack_cb,
                               void *arg, unsigned flags)
{
    uct_rdmach_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_rdmach_iface_t);
    uct_rdmach_ep_t *ep       = ucs_derived_of(tl_ep, uct_rdmach_ep_t);
    uint32_t max_span         = ep->tx.geom.max_span;
    uint32_t to_end           = rdmach_tx_to_end(&ep->tx);
    rdmach_rec_hdr_t *rec;
    size_t length;

    UCT_CHECK_AM_ID(id);
    if (uct_rdmach_ep_must_queue(ep)) {
        return uct_rdmach_ep_no_resource(ep, flags);
    }

    /* the packer may advance the caller's state, so room is ensured before it runs */
    if (ucs_likely(to_end >= max_span)) {
        if (ucs_unlikely(!rdmach_tx_ensure(&ep->tx, max_span))) {
            return uct_rdmach_ep_no_resource(ep, flags);
        }
        rec    = (rdmach_rec_hdr_t*)rdmach_tx_slot(&ep->tx, ep->tx.geom.nslots - to_end);
        length = pack_cb(rec + 1, arg);
    } else {
        /* near the ring end the length decides whether a pad is needed: pack aside first */
        if (ucs_unlikely(!rdmach_tx_ensure(&ep->tx, to_end + max_span))) {
            return uct_rdmach_ep_no_resource(ep, flags);
        }
        length = pack_cb(iface->bounce, arg);
        rec    = rdmach_tx_reserve(&ep->tx, length);
        ucs_assert(rec != NULL);
        memcpy(rec + 1, iface->bounce, length);
    }
    ucs_assertv(length <= iface->chunk_size, "am_bcopy length %zu > chunk %zu", length,
                iface->chunk_size);
    rdmach_tx_commit(&ep->tx, rec, id, (uint32_t)length);

    UCT_RDMACH_COUNT(tx_am_bcopy, 1);
    UCT_RDMACH_COUNT(tx_bytes, length);
    return length;
}

ucs_status_t uct_rdmach_ep_am_zcopy(uct_ep_h tl_ep, uint8_t id, const void *header,
                                    unsigned header_length, const uct_iov_t *iov,
                                    size_t iovcnt, unsigned flags, uct_completion_t *comp)
{
    uct_rdmach_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_rdmach_iface_t);
    uct_rdmach_ep_t *ep       = ucs_derived_of(tl_ep, uct_rdmach_ep_t);
    size_t length             = header_length + uct_iov_total_length(iov, iovcnt);
    ucs_iov_iter_t iov_iter;
    rdmach_rec_hdr_t *rec;
    uint8_t *data;

    UCT_CHECK_AM_ID(id);
    UCT_CHECK_LENGTH(length, 0, iface->chunk_size, "am_zcopy");

    /* on this wire the sender's single copy is into the receiver's ring */
    rec = uct_rdmach_ep_must_queue(ep) ? NULL : rdmach_tx_reserve(&ep->tx, length);
    if (ucs_unlikely(rec == NULL)) {
        return uct_rdmach_ep_no_resource(ep, flags);
    }
    data = (uint8_t*)(rec + 1);
    memcpy(data, header, header_length);
    ucs_iov_iter_init(&iov_iter);
    uct_iov_to_buffer(iov, iovcnt, &iov_iter, data + header_length, SIZE_MAX);
    rdmach_tx_commit(&ep->tx, rec, id, (uint32_t)length);

    UCT_RDMACH_COUNT(tx_am_zcopy, 1);
    UCT_RDMACH_COUNT(tx_bytes, length);
    return UCS_OK;
}

/* ---- RMA: process_vm_writev/readv, checked against the remote key ---- */

static UCS_F_NOINLINE ucs_status_t
uct_rdmach_ep_rma_error(uct_rdmach_ep_t *ep, const char *op, size_t length,
                        uint64_t remote_addr, int err)
{
    if ((err == ESRCH) || ((err == EPERM) && !ucx_ext_ep_peer_alive(&ep->super))) {
        ep->super.failed = 1;
        return uct_iface_handle_ep_err(ep->super.super.super.iface, &ep->super.super.super,
                                       UCS_ERR_ENDPOINT_TIMEOUT);
    }
    ucs_error("rdmach: %s of %zu bytes at 0x%" PRIx64 " in pid %d failed: %s%s", op, length,
              remote_addr, ep->super.pid, strerror(err),
              (err == EPERM) ? " (check kernel.yama.ptrace_scope and that both processes "
                               "run as the same user)" : "");
    return (err == EFAULT) ? UCS_ERR_INVALID_ADDR : UCS_ERR_IO_ERROR;
}

static UCS_F_ALWAYS_INLINE ucs_status_t
uct_rdmach_ep_rma(uct_rdmach_ep_t *ep, struct iovec *local, size_t cnt, size_t length,
                  uint64_t remote_addr, uct_rkey_t rkey, int write)
{
    const uct_rdmach_rkey_t *key = (const uct_rdmach_rkey_t*)rkey;
    const char *op               = write ? "put" : "get";
    int ret;

    if (ucs_unlikely((rkey == UCT_INVALID_RKEY) || (key->pid != ep->super.pid) ||
                     (remote_addr < key->address) ||
                     (remote_addr + length > key->address + key->length))) {
        ucs_error("rdmach: %s of %zu bytes at 0x%" PRIx64 " is outside the remote key's region",
                  op, length, remote_addr);
        return UCS_ERR_INVALID_PARAM;
    }
    ret = ucx_ext_process_vm(ep->super.pid, local, cnt, remote_addr, length, write);
    if (ucs_unlikely(ret != 0)) {
        return uct_rdmach_ep_rma_error(ep, op, length, remote_addr, -ret);
    }
    return UCS_OK;
}

ucs_status_t uct_rdmach_ep_put_short(uct_ep_h tl_ep, const void *buffer, unsigned length,
                                     uint64_t remote_addr, uct_rkey_t rkey)
{
    uct_rdmach_ep_t *ep = ucs_derived_of(tl_ep, uct_rdmach_ep_t);
    struct iovec local  = {(void*)buffer, length};

    if (length == 0) {
        return UCS_OK;
    }
    UCT_RDMACH_COUNT(tx_put_short, 1);
    UCT_RDMACH_COUNT(tx_bytes, length);
    return uct_rdmach_ep_rma(ep, &local, 1, length, remote_addr, rkey, 1);
}

ssize_t uct_rdmach_ep_put_bcopy(uct_ep_h tl_ep, uct_pack_callback_t pack_cb, void *arg,
                                uint64_t remote_addr, uct_rkey_t rkey)
{
    uct_rdmach_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_rdmach_iface_t);
    uct_rdmach_ep_t *ep       = ucs_derived_of(tl_ep, uct_rdmach_ep_t);
    size_t length             = pack_cb(iface->bounce, arg);
    struct iovec local        = {iface->bounce, length};
    ucs_status_t status;

    UCT_RDMACH_COUNT(tx_put_bcopy, 1);
    UCT_RDMACH_COUNT(tx_bytes, length);
    if (length == 0) {
        return 0;
    }
    status = uct_rdmach_ep_rma(ep, &local, 1, length, remote_addr, rkey, 1);
    return (status == UCS_OK) ? (ssize_t)length : status;
}

static UCS_F_ALWAYS_INLINE ucs_status_t
uct_rdmach_ep_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov, size_t iovcnt, uint64_t remote_addr,
                    uct_rkey_t rkey, int write)
{
    uct_rdmach_ep_t *ep = ucs_derived_of(tl_ep, uct_rdmach_ep_t);
    struct iovec local[UCT_SM_MAX_IOV];
    size_t cnt = UCT_SM_MAX_IOV;
    ucs_iov_iter_t iov_iter;
    size_t length;

    ucs_iov_iter_init(&iov_iter);
    length = uct_iov_to_iovec(local, &cnt, iov, iovcnt, SIZE_MAX, &iov_iter);
    if (length == 0) {
        return UCS_OK;
    }
    UCT_RDMACH_COUNT(tx_bytes, length);
    return uct_rdmach_ep_rma(ep, local, cnt, length, remote_addr, rkey, write);
}

ucs_status_t uct_rdmach_ep_put_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov, size_t iovcnt,
                                     uint64_t remote_addr, uct_rkey_t rkey,
                                     uct_completion_t *comp)
{
    UCT_RDMACH_COUNT(tx_put_zcopy, 1);
    return uct_rdmach_ep_zcopy(tl_ep, iov, iovcnt, remote_addr, rkey, 1);
}

ucs_status_t uct_rdmach_ep_get_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov, size_t iovcnt,
                                     uint64_t remote_addr, uct_rkey_t rkey,
                                     uct_completion_t *comp)
{
    UCT_RDMACH_COUNT(tx_get_zcopy, 1);
    return uct_rdmach_ep_zcopy(tl_ep, iov, iovcnt, remote_addr, rkey, 0);
}

ucs_status_t uct_rdmach_ep_get_bcopy(uct_ep_h tl_ep, uct_unpack_callback_t unpack_cb,
                                     void *arg, size_t length, uint64_t remote_addr,
                                     uct_rkey_t rkey, uct_completion_t *comp)
{
    uct_rdmach_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_rdmach_iface_t);
    uct_rdmach_ep_t *ep       = ucs_derived_of(tl_ep, uct_rdmach_ep_t);
    struct iovec local        = {iface->bounce, length};
    ucs_status_t status;

    UCT_CHECK_LENGTH(length, 0, iface->chunk_size, "get_bcopy");
    UCT_RDMACH_COUNT(tx_get_bcopy, 1);
    UCT_RDMACH_COUNT(tx_bytes, length);
    if (length > 0) {
        status = uct_rdmach_ep_rma(ep, &local, 1, length, remote_addr, rkey, 0);
        if (status != UCS_OK) {
            return status;
        }
    }
    unpack_cb(arg, iface->bounce, length);
    return UCS_OK;
}

/* ---- pending, flush ---- */

int uct_rdmach_ep_tx_ready(ucx_ext_ep_t *ep)
{
    return rdmach_tx_has_room(&ucs_derived_of(ep, uct_rdmach_ep_t)->tx);
}

/* Every issued op is complete in the peer's memory when it returns (ring stores, synchronous
 * process_vm); requests still in the pending queue are not issued yet. */
ucs_status_t uct_rdmach_ep_flush(uct_ep_h tl_ep, unsigned flags, uct_completion_t *comp)
{
    return ucx_ext_ep_flush_queued(ucs_derived_of(tl_ep, ucx_ext_ep_t));
}
