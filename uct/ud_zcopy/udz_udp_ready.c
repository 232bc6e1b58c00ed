/*
 * ud_zcopy UDP wire: knowing that nothing has arrived without a system call.
 *
 * Every progress call of an iface polls its control socket, and on a socket that means a
 * recvmmsg that usually finds nothing. That empty poll is most of what an idle ud_zcopy costs
 * the transports beside it: with UCX_TLS=rdmach,ud_zcopy every progress call of a job polls
 * the UDP socket once the job has a peer on another host, and a process's on-host latency
 * (rdmach's 0.2 us) grows by the half microsecond of the system call.
 *
 * An io_uring with a poll request on the socket tells us instead, in memory we share with the
 * kernel: when a datagram (or an ICMP error) arrives, the socket's wakeup queues the poll's
 * completion as task work for us, and with IORING_SETUP_COOP_TASKRUN and
 * IORING_SETUP_TASKRUN_FLAG the kernel says so in the submission ring's flags word instead of
 * interrupting us (an interrupt costs ~6 us per wakeup here; the flag ~0.5 us: the
 * io_uring_enter that runs the work). The work also runs at our next return from the kernel
 * (the kernel posts the CQE then): a new CQE says the same. So an idle poll is three loads.
 *
 * The ring is a hint on top of the socket, never instead of it, and only for an idle socket:
 *  - while traffic flows (a receive found something in the last UDZ_READY_IDLE_POLLS polls)
 *    every poll is a plain receive, as without the ring, and no poll request is in the
 *    kernel: a datagram then costs no task work;
 *  - once the socket is idle, one one-shot poll request is armed (one io_uring_enter per
 *    idle spell) and a receive follows it, for whatever came before; from then on a poll
 *    receives only when the ring saw the request complete (or the kernel about to complete it);
 *  - the completion is consumed before the receive, so the socket is busy again and the next
 *    idle spell arms a new request; a receive that filled its batch is followed by another
 *    without asking.
 * Kernels without these flags (before 5.19), or where io_uring is disabled or forbidden
 * (seccomp, kernel.io_uring_disabled), get no ring, and every poll is a receive as before.
 *
 * The completion is task work of the thread that armed the request. Another thread that polls
 * sees the flag stay set until that thread returns from the kernel, and so receives on every
 * poll in the meantime: never wrong, only as costly as without the ring.
 */
#include "udz_udp.h"

#include <errno.h>
#include <linux/io_uring.h>
#include <poll.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define UDZ_READY_CQ_ENTRIES 64

static int ring_enter(int fd, unsigned submit, unsigned flags)
{
    return (int)syscall(__NR_io_uring_enter, fd, submit, 0, flags, NULL, 0);
}

static unsigned load_acquire(const unsigned *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

/* Queues and submits a one-shot poll of the socket. */
int udz_udp_ready_arm(udz_udp_ready_t *r)
{
    unsigned tail = *r->sq_tail, idx = tail & r->sq_mask;
    struct io_uring_sqe *sqe = &r->sqes[idx];

    memset(sqe, 0, sizeof(*sqe));
    sqe->opcode        = IORING_OP_POLL_ADD;
    sqe->fd            = r->sock;
    sqe->poll32_events = POLLIN | POLLERR;
    sqe->len           = 0;   /* one shot: none of its task work while traffic flows */
    r->sq_array[idx]   = idx;
    __atomic_store_n(r->sq_tail, tail + 1, __ATOMIC_RELEASE);
    if (ring_enter(r->fd, 1, 0) != 1) {
        return -errno;
    }
    r->armed = 1;
    return 0;
}

void udz_udp_ready_close(udz_udp_ready_t *r)
{
    if (r->sq_ring != NULL) {
        munmap(r->sq_ring, r->sq_ring_len);
    }
    if ((r->cq_ring != NULL) && (r->cq_ring != r->sq_ring)) {
        munmap(r->cq_ring, r->cq_ring_len);
    }
    if (r->sqes != NULL) {
        munmap(r->sqes, r->sqes_len);
    }
    if (r->fd >= 0) {
        close(r->fd);
    }
    memset(r, 0, sizeof(*r));
    r->fd = -1;
}

int udz_udp_ready_open(udz_udp_ready_t *r, int sock)
{
    struct io_uring_params p;
    int rc;

    memset(r, 0, sizeof(*r));
    r->sock = sock;
    memset(&p, 0, sizeof(p));
    p.flags      = IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG | IORING_SETUP_CQSIZE;
    p.cq_entries = UDZ_READY_CQ_ENTRIES;
    r->fd = (int)syscall(__NR_io_uring_setup, 2, &p);
    if (r->fd < 0) {
        rc = -errno;   /* ENOSYS, EPERM (seccomp, io_uring_disabled), EINVAL (< 5.19) */
        r->fd = -1;
        return rc;
    }
    r->sq_ring_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    r->cq_ring_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    if (p.features & IORING_FEAT_SINGLE_MMAP) {
        if (r->cq_ring_len > r->sq_ring_len) {
            r->sq_ring_len = r->cq_ring_len;
        }
        r->cq_ring_len = r->sq_ring_len;
    }
    r->sq_ring = mmap(NULL, r->sq_ring_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                      r->fd, IORING_OFF_SQ_RING);
    if (r->sq_ring == MAP_FAILED) {
        r->sq_ring = NULL;
        goto err;
    }
    if (p.features & IORING_FEAT_SINGLE_MMAP) {
        r->cq_ring = r->sq_ring;
    } else {
        r->cq_ring = mmap(NULL, r->cq_ring_len, PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_CQ_RING);
        if (r->cq_ring == MAP_FAILED) {
            r->cq_ring = NULL;
            goto err;
        }
    }
    r->sqes_len = p.sq_entries * sizeof(struct io_uring_sqe);
    r->sqes     = mmap(NULL, r->sqes_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                       r->fd, IORING_OFF_SQES);
    if (r->sqes == MAP_FAILED) {
        r->sqes = NULL;
        goto err;
    }
    r->sq_tail  = (unsigned*)((char*)r->sq_ring + p.sq_off.tail);
    r->sq_mask  = *(unsigned*)((char*)r->sq_ring + p.sq_off.ring_mask);
    r->sq_flags = (unsigned*)((char*)r->sq_ring + p.sq_off.flags);
    r->sq_array = (unsigned*)((char*)r->sq_ring + p.sq_off.array);
    r->cq_head  = (unsigned*)((char*)r->cq_ring + p.cq_off.head);
    r->cq_tail  = (unsigned*)((char*)r->cq_ring + p.cq_off.tail);
    r->cq_mask  = *(unsigned*)((char*)r->cq_ring + p.cq_off.ring_mask);
    r->cqes     = (struct io_uring_cqe*)((char*)r->cq_ring + p.cq_off.cqes);
    return 0;   /* armed when the socket goes idle */

err:
    rc = -errno;
    udz_udp_ready_close(r);
    return rc;
}

int udz_udp_ready_wakeup(udz_udp_ready_t *r)
{
    unsigned flags, head, tail;

    flags = load_acquire(r->sq_flags);
    if (flags & (IORING_SQ_TASKRUN | IORING_SQ_CQ_OVERFLOW)) {
        /* run the task work (it posts the CQE), flush an overflow */
        (void)ring_enter(r->fd, 0, IORING_ENTER_GETEVENTS);
    }
    head = *r->cq_head;
    tail = load_acquire(r->cq_tail);
    if ((head == tail) && !(flags & (IORING_SQ_TASKRUN | IORING_SQ_CQ_OVERFLOW))) {
        return 0;
    }
    if (head != tail) {
        r->armed = 0;   /* the one-shot request completed: the next idle spell arms anew */
        __atomic_store_n(r->cq_head, tail, __ATOMIC_RELEASE);
    }
    return 1;
}
