/*
 * ud_zcopy wakeup: what a worker sleeping in UCP (ucp_worker_wait, its event fd in poll, the
 * adaptive progress of an iface without eps) waits on.
 *
 * The event fd is an epoll set of two: the wire's own (UDP: an epoll set of its sockets, so
 * any datagram wakes the worker) and an eventfd the async timer writes. The timer may take a
 * datagram off a socket before the sleeping worker sees it (udz_async.c): when that left a
 * message or a completion for the application, the timer wakes the worker itself. Both
 * arm and the timer hold the async context, so an arm and a tick never interleave.
 *
 * Arm refuses (UCS_ERR_BUSY) while something needs the application's progress rather than an
 * event: events the timer kept, ep flushes awaiting their acks (checked by progress), and,
 * without async progress (ASYNC_TICK=0), anything in flight: nobody would retransmit it; nor
 * a probe of a peer reported unreachable: nobody would fail the peer when it goes unanswered.
 * Nothing of this is on the message path: progress only clears a flag.
 */
#include "udz_uct.h"

#include <ucs/async/async.h>

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "ucx_ext_wake.h"

void uct_udz_wakeup_init(uct_udz_iface_t *iface)
{
    iface->wakeup.epfd    = -1;
    iface->wakeup.wake_fd = -1;
    iface->wakeup.armed   = 0;
}

void uct_udz_wakeup_cleanup(uct_udz_iface_t *iface)
{
    if (iface->wakeup.epfd >= 0) {
        close(iface->wakeup.epfd);
    }
    if (iface->wakeup.wake_fd >= 0) {
        close(iface->wakeup.wake_fd);
    }
    uct_udz_wakeup_init(iface);
}

/* Made at UCP's first ask (ucp_worker_iface_init, with wakeup or adaptive progress). */
static int uct_udz_wakeup_open(uct_udz_iface_t *iface)
{
    struct epoll_event ev;
    int wire_fd, i, fds[2];

    wire_fd = (iface->wops->event_fd != NULL) ? iface->wops->event_fd(iface->wire) : -ENOTSUP;
    if (wire_fd < 0) {
        return wire_fd;
    }
    iface->wakeup.wake_fd = ucx_ext_wake_fd_create();
    iface->wakeup.epfd    = epoll_create1(EPOLL_CLOEXEC);
    if ((iface->wakeup.wake_fd < 0) || (iface->wakeup.epfd < 0)) {
        goto err;
    }
    fds[0] = wire_fd;
    fds[1] = iface->wakeup.wake_fd;
    for (i = 0; i < 2; ++i) {
        memset(&ev, 0, sizeof(ev));
        ev.events  = EPOLLIN;
        ev.data.fd = fds[i];
        if (epoll_ctl(iface->wakeup.epfd, EPOLL_CTL_ADD, fds[i], &ev) != 0) {
            goto err;
        }
    }
    return iface->wakeup.epfd;

err:
    i = -errno;
    uct_udz_wakeup_cleanup(iface);
    return (i < 0) ? i : -EIO;
}

ucs_status_t uct_udz_iface_event_fd_get(uct_iface_h tl_iface, int *fd_p)
{
    uct_udz_iface_t *iface = ucs_derived_of(tl_iface, uct_udz_iface_t);
    int fd;

    UDZ_ENTER(iface);
    fd = (iface->wakeup.epfd >= 0) ? iface->wakeup.epfd : uct_udz_wakeup_open(iface);
    UDZ_LEAVE(iface);
    if (fd < 0) {
        ucs_error("ud_zcopy: no event fd for wakeup on %s: %s", iface->ifname, strerror(-fd));
        return UCS_ERR_IO_ERROR;
    }
    *fd_p = fd;
    return UCS_OK;
}

static ucs_status_t uct_udz_wakeup_arm(uct_udz_iface_t *iface, unsigned events)
{
    struct epoll_event ev;
    ucs_status_t status = ucx_ext_iface_arm_check(&iface->x, events,
                                                  !ucs_list_is_empty(&iface->flushes));

    if (status != UCS_OK) {
        return status;
    }
    udz_core_tx_flush(iface->core);   /* nothing held back while the worker sleeps */
    if (iface->wakeup.epfd < 0) {
        return UCS_ERR_UNSUPPORTED;   /* armed before its fd was asked for */
    }
    if (!ucs_queue_is_empty(&iface->async.deferred) ||
        (!iface->async.enabled &&
         (!udz_core_idle(iface->core) || udz_core_probing(iface->core)))) {
        return UCS_ERR_BUSY;
    }
    ucx_ext_wake_fd_drain(iface->wakeup.wake_fd);
    if ((epoll_wait(iface->wakeup.epfd, &ev, 1, 0) > 0) &&
        ((udz_core_drain_idle(iface->core) == 0) ||
         (epoll_wait(iface->wakeup.epfd, &ev, 1, 0) > 0))) {
        /* a datagram waits: progress first (one on a data channel that no transfer reads,
         * which progress never takes, is dropped here, or a waiting worker would spin) */
        return UCS_ERR_BUSY;
    }
    iface->wakeup.armed = 1;
    UCT_UDZ_COUNT_OWN(sleeps, 1);
    return UCS_OK;
}

/* Sends complete by their acks, which arrive as datagrams (or are taken by the timer, which
 * then wakes the worker): SEND_COMP and RECV arm alike. */
ucs_status_t uct_udz_iface_event_arm(uct_iface_h tl_iface, unsigned events)
{
    uct_udz_iface_t *iface = ucs_derived_of(tl_iface, uct_udz_iface_t);
    ucs_status_t status;

    UDZ_ENTER(iface);
    status = uct_udz_wakeup_arm(iface, events);
    UDZ_LEAVE(iface);
    return status;
}

void uct_udz_wakeup_notify(uct_udz_iface_t *iface)
{
    if (iface->wakeup.armed && !ucs_queue_is_empty(&iface->async.deferred)) {
        iface->wakeup.armed = 0;
        (void)ucx_ext_wake_fd_signal(iface->wakeup.wake_fd);
        UCT_UDZ_COUNT_OWN(async_wakeups, 1);
    }
}
