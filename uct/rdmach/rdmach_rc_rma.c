/*
 * rdmach InfiniBand RC verbs wire: RMA (RDMA WRITE and READ, zcopy from registered memory or
 * through a registered bounce buffer for bcopy) and device atomics (64-bit fetch-and-add and
 * compare-and-swap into registered result slots). Posted and completed as rdmach_rc_post.c
 * does: signalled, in the connection's FIFO of operations.
 */
#include "rdmach_rc_int.h"

#include <errno.h>
#include <string.h>

/* A read into an unregistered buffer goes through a bounce buffer: copied out at the end. */
static void rdmach_rc_copy_out(void *arg, const void *data, size_t len)
{
    memcpy(arg, data, len);
}

/* RMA of len bytes; unregistered local buffers (bcopy: cnt == 1) go through a bounce buffer,
 * a read's data then handed to unpack(arg) (NULL: copied into local[0]). comp == NULL: done at
 * return. */
static int rdmach_rc_post_rma(rdmach_rc_wire_t *w, rdmach_rc_conn_t *c,
                              const rdmach_wire_iov_t *local, size_t cnt, uint64_t raddr,
                              uint32_t rkey, size_t len, int write,
                              void (*unpack)(void*, const void*, size_t), void *arg,
                              void *comp)
{
    struct ibv_send_wr wr[RDMACH_WIRE_MAX_IOV];
    struct ibv_sge sge[RDMACH_WIRE_MAX_IOV];
    int bounce = -1, unregistered = 0, inl;
    unsigned nwr = (unsigned)cnt;
    uint64_t seq;
    size_t i, off;

    if (c->failed) {
        return -ECONNRESET;
    }
    if ((cnt > RDMACH_WIRE_MAX_IOV) || (cnt == 0)) {
        return -EINVAL;
    }
    for (i = 0; i < cnt; ++i) {
        unregistered |= (local[i].reg == NULL);
    }
    inl = write && (len <= w->super.max_inline);
    if (unregistered && !inl && ((cnt != 1) || (len > w->bounce_size))) {
        return -EINVAL;   /* the glue bounds bcopy by the chunk size */
    }
    if ((rdmach_rc_sq_free(c) < cnt) || (w->cq_free < 2) ||
        (c->op_tail - c->op_head >= RC_OPS_MAX) ||
        (unregistered && !inl && (w->nbounce_free == 0))) {
        rdmach_rc_poll(w, 1);
        if ((rdmach_rc_sq_free(c) < cnt) || (w->cq_free < 2) ||
            (c->op_tail - c->op_head >= RC_OPS_MAX) ||
            (unregistered && !inl && (w->nbounce_free == 0))) {
            return -EAGAIN;
        }
    }

    memset(wr, 0, sizeof(wr[0]) * cnt);
    if (unregistered && !inl) {
        bounce = w->bounce_free[--w->nbounce_free];
        if (write) {
            memcpy(rdmach_rc_bounce(w, bounce), local[0].base, len);
        } else if (unpack == NULL) {
            unpack = rdmach_rc_copy_out;
            arg    = local[0].base;
        }
        rdmach_rc_write_wr(&wr[0], &sge[0], rdmach_rc_bounce(w, bounce), (uint32_t)len,
                           w->bounce_mr->lkey, raddr, rkey, 0);
        nwr = 1;
    } else {
        for (i = 0, off = 0; i < cnt; ++i) {
            rdmach_rc_write_wr(&wr[i], &sge[i], local[i].base, (uint32_t)local[i].len,
                               inl ? 0 : ((struct ibv_mr*)local[i].reg)->lkey,
                               raddr + off, rkey, inl);
            off += local[i].len;
        }
    }
    if (!write) {
        for (i = 0; i < nwr; ++i) {
            wr[i].opcode = IBV_WR_RDMA_READ;
        }
        STATS(w, rdma_reads) += nwr;
    }
    seq = rdmach_rc_post(c, wr, nwr, 1);
    if (seq == 0) {
        if (bounce >= 0) {
            w->bounce_free[w->nbounce_free++] = bounce;
        }
        return (errno == ENOMEM) ? -EAGAIN : -errno;
    }
    if (comp != NULL) {
        rdmach_rc_push_op(c, seq, comp, bounce, write ? NULL : unpack, arg, len);
        return RDMACH_WIRE_INPROGRESS;
    }
    /* done at return: wait for this WR only (the completions of earlier ones are called by
     * progress, never from inside an operation) */
    while ((c->completed < seq) && !c->failed) {
        rdmach_rc_poll(w, 0);
    }
    if ((bounce >= 0) && !write && !c->failed) {
        unpack(arg, rdmach_rc_bounce(w, bounce), len);
    }
    if (bounce >= 0) {
        w->bounce_free[w->nbounce_free++] = bounce;
    }
    return c->failed ? -ECONNRESET : 0;
}

int rdmach_rc_rma(rdmach_wire_t *wire, rdmach_wire_peer_t *peer,
                  const rdmach_wire_iov_t *local, size_t cnt, uint64_t remote_addr,
                  uint32_t rkey, size_t len, int write, void *mapped, void *comp)
{
    (void)mapped;   /* never passed: rma_async_min is SIZE_MAX */
    return rdmach_rc_post_rma((rdmach_rc_wire_t*)wire, (rdmach_rc_conn_t*)peer, local, cnt,
                              remote_addr, rkey, len, write, NULL, NULL, comp);
}

int rdmach_rc_get_unpack(rdmach_wire_t *wire, rdmach_wire_peer_t *peer,
                         uint64_t remote_addr, uint32_t rkey, size_t len,
                         void (*unpack)(void*, const void*, size_t), void *arg,
                         void *comp)
{
    rdmach_wire_iov_t none = {NULL, len, NULL};

    return rdmach_rc_post_rma((rdmach_rc_wire_t*)wire, (rdmach_rc_conn_t*)peer, &none, 1,
                              remote_addr, rkey, len, 0, unpack, arg, comp);
}

/* A device atomic on the peer's word, its old value into one of our registered result
 * slots, copied to *result when the WR completes. Polls nothing: resources short = -EAGAIN. */
int rdmach_rc_atomic64(rdmach_wire_t *wire, rdmach_wire_peer_t *peer,
                       uint64_t remote_addr, uint32_t rkey, int cswap,
                       uint64_t compare_add, uint64_t swap, uint64_t *result, void *comp)
{
    rdmach_rc_wire_t *w   = (rdmach_rc_wire_t*)wire;
    rdmach_rc_conn_t *c   = (rdmach_rc_conn_t*)peer;
    struct ibv_send_wr wr;
    struct ibv_sge sge;
    rdmach_rc_op_t *op;
    uint64_t seq;
    int slot;

    if (c->failed) {
        return -ECONNRESET;
    }
    if (!w->super.atomics || (remote_addr & 7) || (comp == NULL)) {
        return -EINVAL;
    }
    if ((rdmach_rc_sq_free(c) < 1) || (w->cq_free < 2) || (w->namo_free == 0) ||
        (c->op_tail - c->op_head >= RC_OPS_MAX)) {
        return -EAGAIN;
    }
    slot = w->amo_free[--w->namo_free];
    memset(&wr, 0, sizeof(wr));
    rdmach_rc_write_wr(&wr, &sge, &w->amo[slot], sizeof(uint64_t), w->bounce_mr->lkey, 0, 0, 0);
    wr.opcode                = cswap ? IBV_WR_ATOMIC_CMP_AND_SWP : IBV_WR_ATOMIC_FETCH_AND_ADD;
    wr.wr.atomic.remote_addr = remote_addr;
    wr.wr.atomic.rkey        = rkey;
    wr.wr.atomic.compare_add = compare_add;
    wr.wr.atomic.swap        = swap;
    seq = rdmach_rc_post(c, &wr, 1, 1);
    if (seq == 0) {
        w->amo_free[w->namo_free++] = slot;
        return (errno == ENOMEM) ? -EAGAIN : -errno;
    }
    STATS(w, atomics)++;
    op         = rdmach_rc_push_op(c, seq, comp, -1, NULL, NULL, 0);
    op->amo    = slot;
    op->result = result;
    return RDMACH_WIRE_INPROGRESS;
}
