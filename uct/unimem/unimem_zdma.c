/*
 * unimem zDMA completions: a transfer posted with a ticket is complete when the channel's
 * completed count reaches it (in order). Callers that pass a completion are queued in a ring
 * and called from progress. The emulated backend completes at post time; a driver backend
 * completes later. Used by the ep (posting) and the iface (progress, flush).
 */
#include "unimem_uct.h"

#include <pthread.h>

/* The process's channels as its ifaces use them. A process owns UNIMEM_HAL_MAX_ZDMA channels
 * and UCT puts no bound on its ifaces (UCP opens one per worker, and a program may open many):
 * once every channel is owned, a new iface shares the least used one. Its tickets still
 * complete in order, and each iface waits only for its own. */
static struct {
    unimem_hal_zdma_t *ch;
    unsigned          refs;
} uct_unimem_zdma_chans[UNIMEM_HAL_MAX_ZDMA];
static pthread_mutex_t uct_unimem_zdma_lock = PTHREAD_MUTEX_INITIALIZER;

int uct_unimem_zdma_get(unimem_hal_t *hal, int channel, unimem_hal_zdma_t **ch_p)
{
    int i, best = -1, ret;

    pthread_mutex_lock(&uct_unimem_zdma_lock);
    ret = unimem_hal_zdma_open(hal, channel, ch_p);
    if ((ret == -ENOSPC) && (channel < 0)) {
        for (i = 0; i < UNIMEM_HAL_MAX_ZDMA; ++i) {
            if ((uct_unimem_zdma_chans[i].ch != NULL) &&
                ((best < 0) || (uct_unimem_zdma_chans[i].refs <
                                uct_unimem_zdma_chans[best].refs))) {
                best = i;
            }
        }
        if (best >= 0) {
            ++uct_unimem_zdma_chans[best].refs;
            *ch_p = uct_unimem_zdma_chans[best].ch;
            ret   = 0;
        }
    } else if (ret == 0) {
        for (i = 0; i < UNIMEM_HAL_MAX_ZDMA; ++i) {
            if (uct_unimem_zdma_chans[i].ch == NULL) {
                uct_unimem_zdma_chans[i].ch   = *ch_p;
                uct_unimem_zdma_chans[i].refs = 1;
                break;
            }
        }
    }
    pthread_mutex_unlock(&uct_unimem_zdma_lock);
    return ret;
}

void uct_unimem_zdma_put(unimem_hal_zdma_t *ch)
{
    int i;

    pthread_mutex_lock(&uct_unimem_zdma_lock);
    for (i = 0; i < UNIMEM_HAL_MAX_ZDMA; ++i) {
        if (uct_unimem_zdma_chans[i].ch == ch) {
            if (--uct_unimem_zdma_chans[i].refs == 0) {
                uct_unimem_zdma_chans[i].ch = NULL;
                unimem_hal_zdma_close(ch);
            }
            break;
        }
    }
    pthread_mutex_unlock(&uct_unimem_zdma_lock);
}

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
