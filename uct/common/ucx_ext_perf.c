/* Per-operation estimates by kind of wire (ucx_ext_perf.h). */
#include "ucx_ext_perf.h"

#include "ucx_ext_compat.h"

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

/* The operation asked about; UCT_EP_OP_LAST when none is (the iface's own figures). */
static uct_ep_operation_t ucx_ext_perf_op(const uct_perf_attr_t *perf_attr)
{
    return (perf_attr->field_mask & UCT_PERF_ATTR_FIELD_OPERATION) ? perf_attr->operation :
                                                                     UCT_EP_OP_LAST;
}

ucs_status_t ucx_ext_perf_copy_estimate(uct_iface_h iface, uct_perf_attr_t *perf_attr,
                                        const ucx_ext_perf_copy_t *copy)
{
    uct_ep_operation_t op = ucx_ext_perf_op(perf_attr);
    int zcopy             = ucx_ext_perf_op_is_zcopy(op);
    uct_ppn_bandwidth_t bw;
    uct_iface_attr_t attr;
    ucs_status_t status;

    status = uct_base_iface_estimate_perf(iface, perf_attr);
    if ((status != UCS_OK) || (op == UCT_EP_OP_LAST)) {
        return status;
    }
    status = uct_iface_query(iface, &attr);
    if (status != UCS_OK) {
        return status;
    }
    bw.dedicated = attr.bandwidth.dedicated / ucs_max(copy->iface_cores, 1) *
                   (zcopy ? copy->zcopy_cores : 1);
    bw.shared    = attr.bandwidth.shared;
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
