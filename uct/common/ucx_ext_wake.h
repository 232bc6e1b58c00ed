/*
 * Plain-C wakeup helpers for the shared-memory wires and HAL backends (no UCX headers): how a
 * sleeping receiver is woken by a sender in another process, at no cost while it polls.
 *
 * - The receiver owns an eventfd: its iface's event fd, which UCP puts in the worker's epoll
 *   set (ucp_worker_wait, ucp_worker_get_efd) and in its async thread (adaptive progress).
 * - A sender gets its own descriptor of that eventfd with pidfd_getfd(2), which needs the same
 *   permission as mapping the receiver's segment through /proc/<pid>/fd (same user, or ptrace
 *   consent); it checks the descriptor is an eventfd, so a peer cannot make it write
 *   anywhere else.
 * - The receiver arms by setting a word in its shared memory ("asleep"), then checks its queues
 *   once more; a sender that publishes into a cold queue looks at the word after publishing,
 *   and the one that swaps it back to 0 writes the eventfd: one system call per sleep, none
 *   while the receiver is awake.
 * - A sender that publishes with a plain store (rdmach's ring: no atomic on the path) could see
 *   the word stale while its store still sits in its CPU's store buffer, and the receiver would
 *   sleep on a message. Instead of a fence per message, the receiver's arm issues
 *   membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED), which makes every registered process's
 *   running threads pass a full barrier: after it, either the sender's record is visible to
 *   the receiver's check or the sender's later load sees the word set. Every process registers
 *   at iface open; one that cannot (old kernel, seccomp) fences per message instead
 *   (ucx_ext_wake_need_fence), and tells its peers in its segment, so they fence too.
 */
#ifndef UCX_EXT_WAKE_H
#define UCX_EXT_WAKE_H

#include <stdint.h>
#include <sys/types.h>

/* A new non-blocking, close-on-exec eventfd; fd or -errno. */
int ucx_ext_wake_fd_create(void);

/* Empties the eventfd (before the owner goes to sleep on it). */
void ucx_ext_wake_fd_drain(int fd);

/* Our own descriptor of eventfd fd of process pid, or -errno (-EPROTO: not an eventfd). */
int ucx_ext_wake_fd_get(pid_t pid, int fd);

/* Wakes the eventfd's owner (a full counter is a wakeup already pending). 0 or -errno. */
int ucx_ext_wake_fd_signal(int fd);

/* Registers this process for the receivers' global membarrier, once per process. 1 when it
 * can rely on it (no fence per message needed), 0 when it must fence per message. */
int ucx_ext_wake_barrier_register(void);

/* The receiver's side, after it marked itself asleep: every registered process's stores so
 * far are visible. Falls back to a local full fence. */
void ucx_ext_wake_barrier(void);

#endif
