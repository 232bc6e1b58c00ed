/*
 * rdmach on shared memory: small puts and gets on memory we cannot map, served by the
 * target's progress when it is there to serve them, and done one-sided when it is not.
 *
 * Memory no peer can map (an application's malloc: MPI_Win_create windows) is reached by
 * process_vm_writev/readv, which costs about 2 us on this kind of VM whatever the size, where
 * UCX's sm emulates those puts and gets with active messages that the target's progress
 * serves (0.4 us). A put or get of up to UCT_RDMACH_SERVE_RMA_MAX bytes therefore goes
 * through the target first:
 *  - the requester writes a put's bytes into its request's reply slot (the segment that
 *    served atomics reply into, rdmach_amo_cpu.c, which the target maps once), sets the
 *    slot's token word to token | OPEN and sends a UCT_RDMACH_AM_SERVE_RMA record (address,
 *    length, direction, token, slot) through the ring;
 *  - the target checks the record, claims the slot by compare-and-swap of token | OPEN to
 *    token | CLAIMED, checks that the memory is registered here, copies (put: from the slot
 *    into its memory; get: from its memory into the slot), then stores the token (release);
 *  - the requester finishes when the token word holds its token: a get unpacks from the slot.
 * A put is done as far as the caller goes when the record is sent; like a served atomic it
 * makes the ep's later RMA and atomics wait in the pending queue and its flush answer
 * NO_RESOURCE until the reply, so fence and flush keep their order.
 *
 * RMA must not depend on the target's progress, and here it does not: a request the target
 * has not claimed after UCT_RDMACH_SERVE_RMA_WAIT_US is taken back by compare-and-swap of
 * token | OPEN to 0 (then no target can claim it) and done by the requester through the
 * wire, one-sided; that ep then goes one-sided for UCT_RDMACH_SERVE_RMA_PAUSE_MS before it
 * asks its target again. So a target computing without progress costs its requesters one
 * wait per pause (2% of their time), and one serving costs a round trip through the ring.
 * A record of a request taken back, or of an earlier use of the slot, fails its claim: the
 * token differs. A full ring, a peer that cannot map the reply segment, or a request of
 * more bytes goes one-sided at once.
 */
#include "rdmach_amo.h"

#include <ucs/time/time.h>

static UCS_F_ALWAYS_INLINE void *uct_rdmach_serve_rma_data(volatile uint64_t *slot)
{
    return (void*)(slot + 2);
}

ucs_status_t uct_rdmach_serve_rma_start(uct_rdmach_ep_t *ep, const uct_rdmach_rkey_t *key,
                                        uint64_t remote_addr, const void *put_data,
                                        size_t length, uct_unpack_callback_t unpack_cb,
                                        void *unpack_arg, uct_completion_t *comp)
{
    uct_rdmach_iface_t *iface = ucs_derived_of(ep->super.super.super.iface, uct_rdmach_iface_t);
    rdmach_serve_rma_rec_t *rec;
    rdmach_rec_hdr_t *hdr;
    uct_rdmach_amo_t *req;
    ucs_time_t now;

    if ((iface->amo_free == NULL) || (ep->peer == NULL)) {
        return UCS_ERR_UNSUPPORTED;
    }
    now = ucs_get_time();
    if ((int64_t)(now - ep->serve_rma_after) < 0) {
        return UCS_ERR_UNSUPPORTED;   /* its target did not serve the last one in time */
    }
    hdr = rdmach_tx_reserve(ep->tx, sizeof(*rec));
    if (hdr == NULL) {
        return UCS_ERR_UNSUPPORTED;   /* a full ring: the target is not reading it now */
    }
    req             = uct_rdmach_amo_take(iface, ep, (put_data != NULL) ? UCT_RDMACH_AMO_PUT :
                                                                          UCT_RDMACH_AMO_GET,
                                          comp, NULL);
    req->word       = remote_addr;
    req->rkey       = key->key;
    req->length     = (uint32_t)length;
    req->unpack_cb  = unpack_cb;
    req->unpack_arg = unpack_arg;
    req->token      = uct_rdmach_serve_token(iface);
    req->sent       = now;
    if (put_data != NULL) {
        memcpy(uct_rdmach_serve_rma_data(req->reply), put_data, length);
    }
    /* published with the record (the commit's release store) */
    req->reply[1]   = req->token | UCT_RDMACH_SERVE_OPEN;
    rec             = (rdmach_serve_rma_rec_t*)(hdr + 1);
    memset(rec, 0, sizeof(*rec));
    rec->address     = remote_addr;
    rec->token       = req->token;
    rec->reg.address = key->address;
    rec->reg.length  = key->length;
    rec->slot        = (uint32_t)(req - iface->amo_pool);
    rec->length      = (uint32_t)length;
    rec->write       = (put_data != NULL);
    uct_rdmach_serve_replies_of(iface, &rec->replies);
    rdmach_tx_commit(ep->tx, hdr, UCT_RDMACH_AM_SERVE_RMA, sizeof(*rec));
    ucs_queue_push(&iface->amo_served, &req->stalled);
    return (put_data != NULL) ? UCS_OK : UCS_INPROGRESS;
}

void uct_rdmach_serve_rma(uct_rdmach_iface_t *iface, int32_t sender, const void *data,
                          uint32_t length)
{
    rdmach_serve_rma_rec_t rec;
    uint64_t *replies, open;
    volatile uint64_t *slot;

    if (rdmach_serve_rma_decode(data, length, &rec) == RDMACH_SERVE_DROP) {
        uct_rdmach_counters.rx.corrupt++;
        UCT_RDMACH_COUNT_OWN(serve_dropped);
        return;
    }
    replies = uct_rdmach_amo_replies(iface, sender, &rec.replies);
    if (replies == NULL) {
        return;   /* its requester takes it back when its wait is over */
    }
    slot = replies + UCT_RDMACH_SERVE_SLOT_WORDS * rec.slot;
    open = rec.token | UCT_RDMACH_SERVE_OPEN;
    if (!__atomic_compare_exchange_n(slot + 1, &open, rec.token | UCT_RDMACH_SERVE_CLAIMED, 0,
                                     __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
        return;   /* taken back, or a record of the slot's earlier use */
    }
    /* only inside a registration of this process, the one the requester's key names */
    if (rdmach_serve_rma_allowed(&rec, uct_rdmach_md_registered, NULL) != RDMACH_SERVE_DO) {
        uct_rdmach_counters.rx.corrupt++;
        UCT_RDMACH_COUNT_OWN(serve_refused);
        ucs_diag("rdmach: refused to serve a %u-byte %s at 0x%" PRIx64 " for process %d",
                 rec.length, rec.write ? "put" : "get", rec.address, sender);
        __atomic_store_n(slot + 1, rec.token | UCT_RDMACH_SERVE_REFUSED, __ATOMIC_RELEASE);
        return;
    }
    if (rec.write) {
        memcpy((void*)(uintptr_t)rec.address, uct_rdmach_serve_rma_data(slot), rec.length);
    } else {
        memcpy(uct_rdmach_serve_rma_data(slot), (const void*)(uintptr_t)rec.address,
               rec.length);
    }
    UCT_RDMACH_COUNT_OWN(served);
    __atomic_store_n(slot + 1, rec.token, __ATOMIC_RELEASE);
}

int uct_rdmach_serve_rma_revoke(uct_rdmach_amo_t *req)
{
    uint64_t open = req->token | UCT_RDMACH_SERVE_OPEN;

    return __atomic_compare_exchange_n(&req->reply[1], &open, 0, 0, __ATOMIC_ACQ_REL,
                                       __ATOMIC_ACQUIRE);
}

void uct_rdmach_serve_rma_done(uct_rdmach_amo_t *req, uint64_t t)
{
    uct_rdmach_ep_t *ep       = req->ep;
    uct_rdmach_iface_t *iface = ucs_derived_of(ep->super.super.super.iface, uct_rdmach_iface_t);
    rdmach_wire_t *wire       = iface->wire;
    uct_completion_t *comp    = req->user_comp;
    int write                 = (req->kind == UCT_RDMACH_AMO_PUT);
    rdmach_wire_iov_t local   = {uct_rdmach_serve_rma_data(req->reply), req->length, NULL};
    ucs_status_t status       = UCS_OK;
    int ret;

    if (t == 0) {
        /* taken back: through the wire, one-sided, and so for a while on this ep */
        ret = wire->ops->rma(wire, ep->peer, &local, 1, req->word, req->rkey, req->length,
                             write, NULL, NULL);
        status = uct_rdmach_wire_status(ret, UCS_ERR_IO_ERROR);
        ep->serve_rma_after = ucs_get_time() +
                              ucs_time_from_msec(UCT_RDMACH_SERVE_RMA_PAUSE_MS);
        UCT_RDMACH_COUNT_OWN(rma_revoked);
    } else if (t & UCT_RDMACH_SERVE_REFUSED) {
        status = UCS_ERR_INVALID_ADDR;   /* the target holds no such registration */
    } else {
        UCT_RDMACH_COUNT_OWN(rma_served);
    }
    if ((status == UCS_OK) && !write) {
        req->unpack_cb(req->unpack_arg, local.base, req->length);
    }
    uct_rdmach_amo_release(iface, req);
    if (comp != NULL) {
        uct_invoke_completion(comp, status);
    } else if (status != UCS_OK) {
        /* a put the caller was told was done: the ep is in error from now on (a peer
         * that has gone is no surprise: the peer watch reports it too) */
        ucs_log((status == UCS_ERR_UNREACHABLE) ? UCS_LOG_LEVEL_DIAG : UCS_LOG_LEVEL_ERROR,
                "rdmach: %u-byte put at 0x%" PRIx64 " in pid %d failed: %s", req->length,
                req->word, ep->super.pid, ucs_status_string(status));
        ucx_ext_ep_set_failed(&ep->super, (status == UCS_ERR_UNREACHABLE) ?
                                          UCS_ERR_ENDPOINT_TIMEOUT : status);
    }
}

void uct_rdmach_serve_rma_cancel(uct_rdmach_amo_t *req)
{
    uct_rdmach_iface_t *iface = ucs_derived_of(req->ep->super.super.super.iface,
                                               uct_rdmach_iface_t);
    uint64_t t                = __atomic_load_n(&req->reply[1], __ATOMIC_ACQUIRE);
    uct_completion_t *comp    = req->user_comp;

    if (((t & ~UCT_RDMACH_SERVE_REFUSED) == req->token) || uct_rdmach_serve_rma_revoke(req)) {
        uct_rdmach_amo_release(iface, req);
    } else {
        /* its target is copying into the slot now: the slot is never used again */
        --req->ep->amo_busy;
        --iface->amo_inflight;
    }
    if (comp != NULL) {
        uct_invoke_completion(comp, UCS_ERR_CANCELED);
    }
}
