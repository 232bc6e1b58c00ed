/*
 * What one operation costs, for the per-operation estimates of UCP's protocols v2 (the default
 * from UCX 1.16; UCP 1.22 chooses every protocol and threshold by them). UCT's base estimate
 * gives every operation the iface's one latency, overhead and bandwidth; these models tell
 * the copies, system calls and work requests of each kind of operation apart, per kind of
 * wire: a copy wire (shared memory, the emulated Unimem) or an HCA wire (InfiniBand RC).
 *
 * Needs UCX's internal headers.
 */
#ifndef UCX_EXT_PERF_H
#define UCX_EXT_PERF_H

#include <uct/base/uct_iface.h>

/* The operation asked about; UCT_EP_OP_LAST when none is (the iface's own figures). */
static inline uct_ep_operation_t ucx_ext_perf_op(const uct_perf_attr_t *perf_attr)
{
    return (perf_attr->field_mask & UCT_PERF_ATTR_FIELD_OPERATION) ? perf_attr->operation :
                                                                     UCT_EP_OP_LAST;
}

/* A copy wire: what an iface's attributes count, and what its zero copy is. */
typedef struct ucx_ext_perf_copy {
    /* Cores the iface's dedicated bandwidth counts (its attributes give UCP 1.13 the zero
     * copy's rate). A short or bcopy operation copies on one core: the sender's into the ring
     * or mailbox, while the receiver's copy out runs beside it on the other. */
    unsigned iface_cores;
    unsigned zcopy_cores;      /* cores a zero copy moves data on (cooperative copy: 2) */
    double   zcopy_overhead;   /* s: the zero copy's system call (process_vm_readv/writev) */
} ucx_ext_perf_copy_t;

ucs_status_t ucx_ext_perf_copy_estimate(uct_iface_h iface, uct_perf_attr_t *perf_attr,
                                        const ucx_ext_perf_copy_t *copy);

/* An HCA wire: UCX's InfiniBand model with its defaults (UCX_IB_SEND_OVERHEAD: a bcopy's
 * buffer 5 ns, a doorbell 40 ns, a zero copy's completion 20 ns, the HCA's fetch of a
 * work request that is not inline 350 ns; the iface's overhead is the post), so that UCP
 * weighs a wire that posts the HCA's own operations as it weighs rc_verbs on that port. */
ucs_status_t ucx_ext_perf_hca_estimate(uct_iface_h iface, uct_perf_attr_t *perf_attr);

#endif
