/* Per-operation estimates by kind of wire (ucx_ext_perf.h). */
#include "ucx_ext_perf.h"

#include "ucx_ext_compat.h"

/* Not UCX's uct_ep_op_is_zcopy/bcopy: 1.22's zero copy counts a fetching atomic (a CPU
 * atomic on these wires) and leaves out the rendezvous' zero copy (UCT_EP_OP_RNDV_ZCOPY), which
 * on a copy wire is the system call's copy itself; 1.13 has no uct_ep_op_is_bcopy. */
static int ucx_ext_perf_op_is_zcopy(uct_ep_operation_t op)
{
    return (op == UCT_EP_OP_AM_ZCOPY) || (op == UCT_EP_OP_PUT_ZCOPY) ||
           (op == UCT_EP_OP_GET_ZCOPY) || (op == UCT_EP_OP_EAGER_ZCOPY) ||
           (op == UCT_EP_OP_RNDV_ZCOPY);
}

static int ucx_ext_perf_op_is_bcopy(uct_ep_operation_t op)
{
    return (op == UCT_EP_OP_AM_BCOPY) || (op == UCT_EP_OP_PUT_BCOPY) ||
           (op == UCT_EP_OP_GET_BCOPY) || (op == UCT_EP_OP_EAGER_BCOPY);
}

ucs_status_t ucx_ext_perf_copy_estimate(uct_iface_h iface, uct_perf_attr_t *perf_attr,
                                        const ucx_ext_perf_copy_t *copy)
{
    uct_ep_operation_t op        = ucx_ext_perf_op(perf_attr);
    int zcopy                    = ucx_ext_perf_op_is_zcopy(op);
    uint64_t asked               = perf_attr->field_mask;
    uct_ppn_bandwidth_t asked_bw = perf_attr->bandwidth;
    uct_ppn_bandwidth_t bw;
    ucs_status_t status;

    /* The base estimate reads the iface's attributes: have it give their bandwidth too, so
     * that the iface is queried once, and leave the caller's field as it was if not asked. */
    perf_attr->field_mask |= UCT_PERF_ATTR_FIELD_BANDWIDTH;
    status                 = uct_base_iface_estimate_perf(iface, perf_attr);
    perf_attr->field_mask  = asked;
    bw                     = perf_attr->bandwidth;
    if (!(asked & UCT_PERF_ATTR_FIELD_BANDWIDTH)) {
        perf_attr->bandwidth = asked_bw;
    }
    if ((status != UCS_OK) || (op == UCT_EP_OP_LAST)) {
        return status;
    }
    bw.dedicated = bw.dedicated / ucs_max(copy->iface_cores, 1) *
                   (zcopy ? copy->zcopy_cores : 1);
    ucx_ext_perf_set_bandwidth(perf_attr, &bw);
    if (zcopy && (perf_attr->field_mask & UCT_PERF_ATTR_FIELD_SEND_PRE_OVERHEAD)) {
        perf_attr->send_pre_overhead += copy->zcopy_overhead;
    }
    return UCS_OK;
}

ucs_status_t ucx_ext_perf_hca_estimate(uct_iface_h iface, uct_perf_attr_t *perf_attr)
{
    uct_ep_operation_t op = ucx_ext_perf_op(perf_attr);
    int zcopy             = ucx_ext_perf_op_is_zcopy(op);
    int bcopy             = ucx_ext_perf_op_is_bcopy(op);
    ucs_status_t status;

    status = uct_base_iface_estimate_perf(iface, perf_attr);
    if ((status != UCS_OK) || (op == UCT_EP_OP_LAST)) {
        return status;
    }
    if ((perf_attr->field_mask & UCT_PERF_ATTR_FIELD_SEND_PRE_OVERHEAD) && bcopy) {
        perf_attr->send_pre_overhead += 5e-9;
    }
    if (perf_attr->field_mask & UCT_PERF_ATTR_FIELD_SEND_POST_OVERHEAD) {
        perf_attr->send_post_overhead = 40e-9 + (zcopy ? 20e-9 : 0);
    }
    if ((perf_attr->field_mask & UCT_PERF_ATTR_FIELD_LATENCY) && (bcopy || zcopy)) {
        perf_attr->latency.c += 350e-9;
    }
    return UCS_OK;
}
