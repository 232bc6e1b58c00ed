/* Plain-C wakeup helpers (see ucx_ext_wake.h). */

#include "ucx_ext_wake.h"

#include <errno.h>
#include <linux/membarrier.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

int ucx_ext_wake_fd_create(void)
{
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);

    return (fd < 0) ? -errno : fd;
}

void ucx_ext_wake_fd_drain(int fd)
{
    uint64_t v;

    while (read(fd, &v, sizeof(v)) == (ssize_t)sizeof(v)) {
    }
}

int ucx_ext_wake_fd_get(pid_t pid, int fd)
{
    char path[64], link[64];
    ssize_t len;
    int pidfd, own, err;

    if ((pid <= 0) || (fd < 0)) {
        return -EINVAL;
    }
    pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pidfd < 0) {
        return -errno;
    }
    own = (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
    err = (own < 0) ? -errno : 0;
    close(pidfd);
    if (own < 0) {
        return err;
    }
    /* pidfd_getfd's descriptor is close-on-exec already; it must be an eventfd */
    snprintf(path, sizeof(path), "/proc/self/fd/%d", own);
    len = readlink(path, link, sizeof(link) - 1);
    if ((len < 0) || ((link[len] = '\0'), strcmp(link, "anon_inode:[eventfd]") != 0)) {
        close(own);
        return -EPROTO;
    }
    return own;
}

int ucx_ext_wake_fd_signal(int fd)
{
    uint64_t one = 1;

    for (;;) {
        if (write(fd, &one, sizeof(one)) == (ssize_t)sizeof(one)) {
            return 0;
        }
        if (errno == EAGAIN) {
            return 0;   /* counter full: the owner has a wakeup waiting */
        }
        if (errno != EINTR) {
            return -errno;
        }
    }
}

static int ucx_ext_membarrier(int cmd)
{
    return (int)syscall(SYS_membarrier, cmd, 0, 0);
}

static int ucx_ext_wake_registered = -1;   /* -1: not tried yet */

int ucx_ext_wake_barrier_register(void)
{
    int r = __atomic_load_n(&ucx_ext_wake_registered, __ATOMIC_ACQUIRE);
    int q;

    if (r < 0) {
        q = ucx_ext_membarrier(MEMBARRIER_CMD_QUERY);
        r = (q > 0) && (q & MEMBARRIER_CMD_GLOBAL_EXPEDITED) &&
            (ucx_ext_membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0);
        __atomic_store_n(&ucx_ext_wake_registered, r, __ATOMIC_RELEASE);
    }
    return r;
}

void ucx_ext_wake_barrier(void)
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (ucx_ext_wake_barrier_register() &&
        (ucx_ext_membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0)) {
        return;
    }
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
