/*
 * unimem zDMA completions: a transfer posted with a ticket is complete when the channel's
 * completed count reaches it (in order). Callers that pass a completion are queued in a ring
 * and called from progress. The emulated backend completes at post time; a driver backend
 * completes later. Used by the ep (posting) and the iface (progress, flush).
 */
#include "unimem_uct.h"

unsigned uct_unimem_iface_progress_zdma(uct_unimem_iface_t *iface)
{
    uint64_t done = unimem_hal_zdma_completed(iface->zdma);
    unsigned count = 0;
    uct_unimem_zdma_wait_t *w;

    while (iface->zwait_head != iface->zwait_tail) {
        w = &iface->zwait[iface->zwait_head % iface->zwait_size];
        if (w->ticket > done) {
            break;
        }
        ++iface->zwait_head;
        uct_invoke_completion(w->comp, UCS_OK);
        ++count;
    }
    return count;
}

ucs_status_t uct_unimem_iface_zdma_wait(uct_unimem_iface_t *iface, uint64_t ticket,
                                        uct_completion_t *comp)
{
    uct_unimem_zdma_wait_t *w;

    if (ucs_likely(unimem_hal_zdma_completed(iface->zdma) >= ticket)) {
        return UCS_OK;
    }
    if (comp == NULL) {
        return UCS_INPROGRESS;
    }
    if (iface->zwait_tail - iface->zwait_head >= iface->zwait_size) {
        return UCS_ERR_NO_RESOURCE;
    }
    w         = &iface->zwait[iface->zwait_tail++ % iface->zwait_size];
    w->ticket = ticket;
    w->comp   = comp;
    return UCS_INPROGRESS;
}
