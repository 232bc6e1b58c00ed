/*
 * rdmach fences: what an ep fence, an iface fence and an atomic (which acts after the ep's
 * earlier puts and gets, as on RC) wait for, and the progress that unblocks fenced eps. On
 * their own between the ep's operations (rdmach_ep.c, rdmach_amo.c) and the iface's
 * progress (rdmach_iface.c), which all call in here.
 */
#include "rdmach_uct.h"

/* The wire's operations to ep's peer (all: to any peer) still run, or requests the target
 * serves (rdmach_serve_rma.c, rdmach_amo_cpu.c) are in flight on ep (all: on the iface):
 * a request taken back from its target is done by us later, after what the ring carries
 * behind its record. */
static int uct_rdmach_ep_fence_busy(uct_rdmach_iface_t *iface, uct_rdmach_ep_t *ep, int all)
{
    rdmach_wire_t *wire = iface->wire;

    return ((all ? iface->amo_inflight : ep->amo_busy) != 0) ||
           (wire->ops->flush(wire, all ? NULL : ep->peer, NULL) == RDMACH_WIRE_INPROGRESS);
}

/* Blocks the ep behind the wire's operations still running (to its peer, or with all: to any
 * peer) and the requests targets serve; 1 if it did. */
static int uct_rdmach_ep_fence_block(uct_rdmach_iface_t *iface, uct_rdmach_ep_t *ep, int all)
{
    if ((ep->fenced == UCT_RDMACH_FENCE_ALL) || (ep->peer == NULL) ||
        !uct_rdmach_ep_fence_busy(iface, ep, all)) {
        return 0;
    }
    if (ep->fenced == UCT_RDMACH_FENCE_NONE) {
        ++iface->fenced;
    }
    ep->fenced        = all ? UCT_RDMACH_FENCE_ALL : UCT_RDMACH_FENCE_PEER;
    ep->super.blocked = 1;
    return 1;
}

/* An atomic acts after the ep's earlier puts and gets are done, as a responder on RC executes
 * a connection's requests in order. Open MPI 4.1.4 counts on it: its MPI_Accumulate with
 * MPI_REPLACE takes the target's accumulate lock by compare-and-swap, puts, and releases the
 * lock by an atomic swap with no fence between; MPI_Raccumulate then completes its request
 * at once. A cooperative copy still running (shm) would land after the release, and read the
 * origin buffer after MPI_Wait returned (tests/mpi: Accumulate(REPLACE) sync=request).
 * Blocks the ep as a fence does; 1 if it did (the atomic then waits in the pending queue). */
int uct_rdmach_ep_order_atomic(uct_rdmach_iface_t *iface, uct_rdmach_ep_t *ep)
{
    return iface->wire->ops->fence_query && uct_rdmach_ep_fence_block(iface, ep, 0);
}

/* A fence orders: what is issued after it waits in the ep's pending queue (the ep is
 * blocked) while operations issued before it still run on the wire (shm: posted cooperative
 * copies, which the peer may be copying meanwhile). It does not wait itself, so Open MPI's
 * request-based get, fenced before the atomic that completes it, still overlaps. */
ucs_status_t uct_rdmach_ep_fence(uct_ep_h tl_ep, unsigned flags)
{
    uct_rdmach_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_rdmach_iface_t);

    if (iface->wire->ops->fence_query) {
        uct_rdmach_ep_fence_block(iface, ucs_derived_of(tl_ep, uct_rdmach_ep_t), 0);
    }
    return uct_sm_ep_fence(tl_ep, flags);
}

/* UCP's worker fence (Open MPI's osc ucx fences that way): every ep waits for all. */
ucs_status_t uct_rdmach_iface_fence(uct_iface_h tl_iface, unsigned flags)
{
    uct_rdmach_iface_t *iface = ucs_derived_of(tl_iface, uct_rdmach_iface_t);
    ucx_ext_ep_t *x_ep;

    if (iface->wire->ops->fence_query &&
        ((iface->amo_inflight != 0) ||
         (iface->wire->ops->flush(iface->wire, NULL, NULL) == RDMACH_WIRE_INPROGRESS))) {
        ucs_list_for_each(x_ep, &iface->x.eps, list) {
            uct_rdmach_ep_fence_block(iface, ucs_derived_of(x_ep, uct_rdmach_ep_t), 1);
        }
    }
    return uct_sm_iface_fence(tl_iface, flags);
}

unsigned uct_rdmach_ep_fence_progress(uct_rdmach_iface_t *iface)
{
    unsigned count = 0;
    uct_rdmach_ep_t *ep;
    ucx_ext_ep_t *x_ep;

    ucs_list_for_each(x_ep, &iface->x.eps, list) {
        ep = ucs_derived_of(x_ep, uct_rdmach_ep_t);
        if ((ep->fenced != UCT_RDMACH_FENCE_NONE) &&
            !uct_rdmach_ep_fence_busy(iface, ep, ep->fenced == UCT_RDMACH_FENCE_ALL)) {
            ep->fenced        = UCT_RDMACH_FENCE_NONE;
            ep->super.blocked = 0;   /* its pending queue goes at this progress */
            --iface->fenced;
            ++count;
        }
    }
    return count;
}
