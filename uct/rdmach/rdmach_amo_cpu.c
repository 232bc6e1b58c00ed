/*
 * rdmach atomics on shared memory: CPU atomics, the full 32- and 64-bit set that UCX's mm
 * transports offer (UCT_IFACE_FLAG_ATOMIC_CPU), so that UCP runs Open MPI's Fetch_and_op,
 * Compare_and_swap and window locks here instead of in its active-message emulation.
 *
 *  - A key whose segment is mapped here (memory the rdmach md allocated: Open MPI's
 *    Win_allocate windows, ucx_ext_xmem.h): a locked instruction on the mapping, done at
 *    return; the target does nothing.
 *  - Memory we cannot map (the application's own, registered: Win_create windows): the
 *    target serves it. A record in the ring (UCT_RDMACH_AM_SERVE, above UCT's AM ids) asks
 *    its progress to run the same instruction on its memory and to write the old value,
 *    then the request's token, back into the request's reply slot. The slots are a segment
 *    of the requester's that the target maps once (ucx_ext_xmem.h), so a reply is two
 *    stores (process_vm_writev where it cannot be mapped). The target decides what a
 *    record may do in rdmach_serve.c: the reply goes only into the process its wire knows
 *    as the ring's sender, the word only inside a registration of its own. UCP's CPU atomic
 *    mode promises atomicity against every other CPU atomic on that memory; both ways keep
 *    it, since each is one locked instruction on the one physical word. Like UCP's
 *    emulation, a served atomic needs the target's progress.
 *  - While an ep has a served atomic in flight, its later RMA and atomics wait in the
 *    pending queue (uct_rdmach_ep_serving) and its flush answers NO_RESOURCE, so nothing
 *    overtakes it: a posted atomic is complete as far as the caller goes, and a put after
 *    a fence, or a flush, must see it done.
 *  - A target that dies with one in flight fails the ep (peer watch) and the request ends
 *    with UCS_ERR_ENDPOINT_TIMEOUT.
 */
#include "rdmach_amo.h"
#include "ucx_ext_sys.h"

#include <ucs/arch/atomic.h>
#include <ucs/time/time.h>

_Static_assert(((int)RDMACH_SERVE_OP_ADD == (int)UCT_ATOMIC_OP_ADD) &&
               ((int)RDMACH_SERVE_OP_AND == (int)UCT_ATOMIC_OP_AND) &&
               ((int)RDMACH_SERVE_OP_OR == (int)UCT_ATOMIC_OP_OR) &&
               ((int)RDMACH_SERVE_OP_XOR == (int)UCT_ATOMIC_OP_XOR) &&
               ((int)RDMACH_SERVE_OP_SWAP == (int)UCT_ATOMIC_OP_SWAP) &&
               ((int)RDMACH_SERVE_OP_CSWAP == (int)UCT_ATOMIC_OP_CSWAP),
               "rdmach_serve.h numbers atomics as UCT does");

ucs_status_t uct_rdmach_amo_serve_init(uct_rdmach_iface_t *iface)
{
    size_t length = RDMACH_SERVE_REPLY_BYTES;
    ucs_status_t status;
    void *replies;
    unsigned i;

    memset(iface->serve_peers, 0, sizeof(iface->serve_peers));
    iface->serve_next = 0;
    status = ucx_ext_xmem_alloc(&length, "rdmach amo replies", &replies);
    if (status != UCS_OK) {
        return status;
    }
    iface->amo_replies = replies;
    ucx_ext_xmem_describe((uintptr_t)replies, length, &iface->amo_replies_desc);
    for (i = 0; i < UCT_RDMACH_AMO_POOL; ++i) {
        iface->amo_pool[i].reply = &iface->amo_replies[UCT_RDMACH_SERVE_SLOT_WORDS * i];
    }
    return UCS_OK;
}

void uct_rdmach_amo_serve_cleanup(uct_rdmach_iface_t *iface)
{
    unsigned i;

    for (i = 0; i < ucs_static_array_size(iface->serve_peers); ++i) {
        if (iface->serve_peers[i].local != NULL) {
            ucx_ext_xmem_detach(iface->serve_peers[i].local);
        }
    }
    ucx_ext_xmem_free(iface->amo_replies);
}

void uct_rdmach_serve_replies_of(const uct_rdmach_iface_t *iface,
                                 rdmach_serve_replies_t *replies)
{
    memset(replies, 0, sizeof(*replies));
    replies->fd   = iface->amo_replies_desc.fd;
    replies->ino  = iface->amo_replies_desc.ino;
    replies->base = iface->amo_replies_desc.base;
}

/* A requester in our own process (an ep of ours to an iface of ours): its reply segment must
 * be one of our own allocations, whole, with that memfd: never an address a record names. */
static uint64_t *uct_rdmach_amo_replies_own(const rdmach_serve_replies_t *replies)
{
    ucx_ext_xmem_desc_t own;

    ucx_ext_xmem_describe(replies->base, RDMACH_SERVE_REPLY_BYTES, &own);
    if ((own.pid != ucx_ext_getpid()) || (own.fd != replies->fd) || (own.ino != replies->ino) ||
        (own.base != replies->base) || (own.length < RDMACH_SERVE_REPLY_BYTES)) {
        return NULL;
    }
    return (uint64_t*)(uintptr_t)replies->base;
}

/* The requester's reply segment, mapped here (kept for its next requests), or NULL. The
 * process is sender, the one the wire knows; the record names only the segment in it. */
uint64_t *uct_rdmach_amo_replies(uct_rdmach_iface_t *iface, int32_t sender,
                                 const rdmach_serve_replies_t *replies)
{
    ucx_ext_xmem_desc_t desc = {
        .pid    = sender,
        .fd     = replies->fd,
        .ino    = replies->ino,
        .base   = replies->base,
        .length = RDMACH_SERVE_REPLY_BYTES
    };
    unsigned i;

    for (i = 0; i < ucs_static_array_size(iface->serve_peers); ++i) {
        if ((iface->serve_peers[i].local != NULL) &&
            !memcmp(&iface->serve_peers[i].desc, &desc, sizeof(desc))) {
            return (uint64_t*)iface->serve_peers[i].local;
        }
    }
    if (sender == ucx_ext_getpid()) {
        return uct_rdmach_amo_replies_own(replies);   /* nothing to map or cache */
    }
    i = iface->serve_next++ % ucs_static_array_size(iface->serve_peers);
    if (iface->serve_peers[i].local != NULL) {
        ucx_ext_xmem_detach(iface->serve_peers[i].local);
    }
    iface->serve_peers[i].desc  = desc;
    iface->serve_peers[i].local = ucx_ext_xmem_attach(&desc);
    return (uint64_t*)iface->serve_peers[i].local;
}

int uct_rdmach_serve_reply_vm(int32_t sender, const rdmach_serve_replies_t *replies,
                              uint32_t slot, uint32_t word, const uint64_t *values,
                              uint32_t count)
{
    struct iovec iov = {(void*)values, count * sizeof(uint64_t)};

    if (sender == ucx_ext_getpid()) {
        return -EPERM;   /* our own segment is always mapped: never write a named address */
    }
    return ucx_ext_process_vm(sender, &iov, 1,
                              replies->base + rdmach_serve_reply_offset(slot, word),
                              iov.iov_len, 1);
}

/* Sends req's record into the ring; the request waits in amo_served for the reply. */
ucs_status_t uct_rdmach_amo_serve_start(uct_rdmach_amo_t *req)
{
    uct_rdmach_ep_t *ep       = req->ep;
    uct_rdmach_iface_t *iface = ucs_derived_of(ep->super.super.super.iface, uct_rdmach_iface_t);
    rdmach_serve_amo_rec_t *rec;
    rdmach_rec_hdr_t *hdr;

    hdr = rdmach_tx_reserve(ep->tx, sizeof(*rec));
    if (hdr == NULL) {
        uct_rdmach_amo_release(iface, req);
        return ucx_ext_ep_no_resource(&ep->super, 0);
    }
    req->token    = uct_rdmach_serve_token(iface);
    req->reply[0] = 0;
    req->reply[1] = 0;
    req->sent     = ucs_get_time();
    rec           = (rdmach_serve_amo_rec_t*)(hdr + 1);
    rec->address  = req->word;
    rec->value    = req->value;
    rec->compare  = req->compare;
    rec->token    = req->token;
    rec->reg      = req->reg;
    rec->slot     = (uint32_t)(req - iface->amo_pool);
    rec->op       = req->op;
    rec->bits     = req->bits;
    rec->reserved[0] = rec->reserved[1] = 0;
    uct_rdmach_serve_replies_of(iface, &rec->replies);
    rdmach_tx_commit(ep->tx, hdr, UCT_RDMACH_AM_SERVE, sizeof(*rec));
    ucs_queue_push(&iface->amo_served, &req->stalled);
    UCT_RDMACH_COUNT_OWN(atomic_served);
    /* a posted op is done as far as the caller goes: the ep's flush waits for it */
    return (req->result == NULL) ? UCS_OK : UCS_INPROGRESS;
}

void uct_rdmach_amo_serve(uct_rdmach_iface_t *iface, int32_t sender, const void *data,
                          uint32_t length)
{
    rdmach_serve_amo_rec_t rec;
    rdmach_serve_verdict_t verdict;
    uint64_t reply[2], *replies;

    verdict = rdmach_serve_amo_decode(data, length, uct_rdmach_md_registered, NULL, &rec);
    if (verdict == RDMACH_SERVE_DROP) {
        uct_rdmach_counters.rx.corrupt++;   /* nowhere to reply */
        UCT_RDMACH_COUNT_OWN(serve_dropped);
        return;
    }
    reply[0] = 0;
    if (verdict == RDMACH_SERVE_DO) {
        reply[0] = rdmach_serve_amo_apply((void*)(uintptr_t)rec.address, rec.op, rec.bits,
                                          rec.value, rec.compare);
        UCT_RDMACH_COUNT_OWN(served);
    } else {
        uct_rdmach_counters.rx.corrupt++;
        UCT_RDMACH_COUNT_OWN(serve_refused);
        ucs_diag("rdmach: refused to serve a %u-bit atomic at 0x%" PRIx64 " for process %d",
                 rec.bits, rec.address, sender);
    }
    /* the value, then (ordered after it) the token the requester polls */
    reply[1] = rec.token | ((verdict == RDMACH_SERVE_DO) ? 0 : UCT_RDMACH_SERVE_REFUSED);
    replies  = uct_rdmach_amo_replies(iface, sender, &rec.replies);
    if (replies != NULL) {
        replies += UCT_RDMACH_SERVE_SLOT_WORDS * rec.slot;
        replies[0] = reply[0];
        __atomic_store_n(&replies[1], reply[1], __ATOMIC_RELEASE);
        return;
    }
    /* a requester we cannot map: its memory through the kernel (one that has gone is no
     * concern of ours) */
    if (uct_rdmach_serve_reply_vm(sender, &rec.replies, rec.slot, 0, &reply[0], 1) != 0) {
        return;
    }
    ucs_memory_cpu_store_fence();
    uct_rdmach_serve_reply_vm(sender, &rec.replies, rec.slot, 1, &reply[1], 1);
}
