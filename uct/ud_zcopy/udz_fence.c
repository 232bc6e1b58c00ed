/*
 * ud_zcopy fences across the ifaces of one worker.
 *
 * Within one iface, puts, active messages and get requests travel one in-order reliable stream
 * per peer, so a fence only waits for the gets issued before it: their data comes back on its
 * own channel (udz_uct.h, uct_udz_iface_fence_holds). But one worker has an iface per device,
 * and UCP may put a peer's lanes on two of them: on a host with two networks, UCP 1.13 gives
 * active messages to the iface of lowest latency (a tie: the first device) and RMA to the one
 * of highest bandwidth (the larger MTU). Its worker fence (ucp_worker_fence) only calls every
 * iface's fence, so the streams of two ifaces were not ordered against each other. Open MPI's
 * MPI_Rget is a get, a worker fence, then an atomic that UCP emulates by active messages: across
 * two namespace hosts with two links its data was wrong after MPI_Wait in every run.
 *
 * So a fence on an iface holds its later operations (NO_RESOURCE, then the pending queue) until
 * nothing issued before it on any iface of the worker can still take effect: no get of any of
 * them in flight, and every other iface's sends acked. It asks the peers for those acks at once
 * rather than waiting for their delayed ones. The ifaces of a worker find each other through a
 * group the first one makes; its members list changes and is read with the worker's async
 * context held (every entry point holds it), and the process's list of groups under a mutex.
 * A worker with one ud_zcopy iface pays what it paid before: its own gets.
 *
 * The same group answers which of a worker's ifaces carries the peers of its host
 * (uct_udz_worker_loopback, udz_reach.c).
 */
#include "udz_uct.h"

#include <pthread.h>

struct uct_udz_fence_group {
    ucs_list_link_t list;       /* in uct_udz_fence_groups */
    uct_worker_h    worker;
    ucs_list_link_t members;    /* uct_udz_iface_t.fence_link */
    unsigned        refcount;
};

static UCS_LIST_HEAD(uct_udz_fence_groups);
static pthread_mutex_t uct_udz_fence_lock = PTHREAD_MUTEX_INITIALIZER;

ucs_status_t uct_udz_fence_join(uct_udz_iface_t *iface, uct_worker_h worker)
{
    uct_udz_fence_group_t *g;

    pthread_mutex_lock(&uct_udz_fence_lock);
    ucs_list_for_each(g, &uct_udz_fence_groups, list) {
        if (g->worker == worker) {
            goto found;
        }
    }
    g = ucs_malloc(sizeof(*g), "udz_fence_group");
    if (g == NULL) {
        pthread_mutex_unlock(&uct_udz_fence_lock);
        return UCS_ERR_NO_MEMORY;
    }
    g->worker   = worker;
    g->refcount = 0;
    ucs_list_head_init(&g->members);
    ucs_list_add_tail(&uct_udz_fence_groups, &g->list);
found:
    ++g->refcount;
    UDZ_ENTER(iface);
    ucs_list_add_tail(&g->members, &iface->fence_link);
    iface->fence_group = g;
    UDZ_LEAVE(iface);
    pthread_mutex_unlock(&uct_udz_fence_lock);
    return UCS_OK;
}

void uct_udz_fence_leave(uct_udz_iface_t *iface)
{
    uct_udz_fence_group_t *g = iface->fence_group;

    if (g == NULL) {
        return;
    }
    pthread_mutex_lock(&uct_udz_fence_lock);
    UDZ_ENTER(iface);
    ucs_list_del(&iface->fence_link);
    iface->fence_group = NULL;
    UDZ_LEAVE(iface);
    if (--g->refcount == 0) {
        ucs_list_del(&g->list);
        ucs_free(g);
    }
    pthread_mutex_unlock(&uct_udz_fence_lock);
}

/* Whether the worker of iface has an iface of the same wire on a loopback device (iface
 * itself included). Read with the async context held, as the members change (the process's
 * mutex is taken before the context in join: not here, against the reverse order). */
int uct_udz_worker_loopback(uct_udz_iface_t *iface)
{
    uct_udz_iface_t *m;
    int found = 0;

    if (iface->fence_group == NULL) {
        return iface->loopback;
    }
    UDZ_ENTER(iface);
    ucs_list_for_each(m, &iface->fence_group->members, fence_link) {
        if (m->loopback && (m->wops == iface->wops)) {
            found = 1;
            break;
        }
    }
    UDZ_LEAVE(iface);
    return found;
}

/* 1 when nothing issued before a fence on iface can take effect after what follows it. ask:
 * request the acks it waits for now (when the fence is set). */
static int uct_udz_fence_done(uct_udz_iface_t *iface, int ask)
{
    uct_udz_iface_t *m;
    int done = 1;

    if (iface->fence_group == NULL) {
        return udz_core_gets_in_flight(iface->core) == 0;
    }
    ucs_list_for_each(m, &iface->fence_group->members, fence_link) {
        if ((udz_core_gets_in_flight(m->core) > 0) ||
            ((m != iface) && !udz_core_sends_acked(m->core, ask))) {
            done = 0;
            if (!ask) {
                break;
            }
        }
    }
    return done;
}

void uct_udz_fence_set(uct_udz_iface_t *iface)
{
    iface->fenced = !uct_udz_fence_done(iface, 1);
}

int uct_udz_fence_wait(uct_udz_iface_t *iface)
{
    if (uct_udz_fence_done(iface, 0)) {
        iface->fenced = 0;
        return 0;
    }
    return 1;
}

void uct_udz_fence_kick(uct_udz_iface_t *iface)
{
    uct_udz_iface_t *m;

    iface->pending_kick = 1;
    if (iface->fence_group == NULL) {
        return;
    }
    ucs_list_for_each(m, &iface->fence_group->members, fence_link) {
        if (m->fenced) {
            m->pending_kick = 1;    /* its fence may have waited for this get */
        }
    }
}
