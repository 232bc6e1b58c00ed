/* What the project's shared-memory transports share on top of UCX's sm iface (ucx_ext_sm.h). */
#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "ucx_ext_sm.h"

ucs_config_field_t ucx_ext_sm_iface_config_table[] = {
    {"", "", NULL, ucs_offsetof(ucx_ext_sm_iface_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_sm_iface_config_table)},

    {"PEER_CHECK_INTERVAL", "100ms",
     "How often an endpoint that waits for room at its peer (ring, mailbox) checks that the\n"
     "peer process is alive: a dead receiver never makes room.",
     ucs_offsetof(ucx_ext_sm_iface_config_t, peer_check_interval), UCS_CONFIG_TYPE_TIME},

    {NULL}
};

/* put or get: synchronous or completion-tracked, from any address, any iov */
static void ucx_ext_sm_rma_caps(size_t max_short, size_t max_bcopy, size_t min_zcopy,
                                size_t *cap_max_short, size_t *cap_max_bcopy,
                                size_t *cap_min_zcopy, size_t *cap_max_zcopy,
                                size_t *cap_max_iov, size_t *cap_align, size_t *cap_align_mtu)
{
    *cap_max_short = max_short;
    *cap_max_bcopy = max_bcopy;
    *cap_min_zcopy = min_zcopy;
    *cap_max_zcopy = SIZE_MAX;
    *cap_max_iov   = UCT_SM_MAX_IOV;
    *cap_align     = 1;
    *cap_align_mtu = 1;
}

size_t ucx_ext_sm_device_addr_len(void)
{
    return ucs_sys_ns_is_default(UCS_SYS_NS_TYPE_PID) ? sizeof(uct_iface_local_addr_base_t) :
                                                         sizeof(uct_iface_local_addr_ns_t);
}

ucs_status_t ucx_ext_sm_get_device_address(uct_iface_h tl_iface, uct_device_addr_t *addr)
{
    uct_iface_get_local_address((uct_iface_local_addr_ns_t*)addr, UCS_SYS_NS_TYPE_PID);
    return UCS_OK;
}

int ucx_ext_sm_is_same_host(const uct_device_addr_t *dev_addr)
{
    return ucx_ext_local_is_reachable(dev_addr, UCS_SYS_NS_TYPE_PID);
}

void ucx_ext_sm_iface_query(uct_sm_iface_t *iface, size_t iface_addr_len,
                            const ucx_ext_sm_caps_t *caps, uct_iface_attr_t *attr)
{
    uct_base_iface_query(&iface->super, attr);

    attr->iface_addr_len  = iface_addr_len;
    attr->device_addr_len = ucx_ext_sm_device_addr_len();
    attr->ep_addr_len     = 0;
    attr->max_conn_priv   = 0;
    attr->cap.flags       = UCT_IFACE_FLAG_CONNECT_TO_IFACE | UCT_IFACE_FLAG_AM_SHORT |
                            UCT_IFACE_FLAG_AM_BCOPY |
                            UCT_IFACE_FLAG_PUT_SHORT | UCT_IFACE_FLAG_PUT_BCOPY |
                            UCT_IFACE_FLAG_PUT_ZCOPY | UCT_IFACE_FLAG_GET_BCOPY |
                            UCT_IFACE_FLAG_GET_ZCOPY | UCT_IFACE_FLAG_PENDING |
                            UCT_IFACE_FLAG_CB_SYNC | UCT_IFACE_FLAG_EP_CHECK |
                            UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE;

    attr->cap.am.max_short       = caps->am_max_short;
    attr->cap.am.max_bcopy       = caps->max_bcopy;
    attr->cap.am.min_zcopy       = caps->rndv_floor;
    attr->cap.am.max_zcopy       = 0;
    attr->cap.am.max_hdr         = 0;
    attr->cap.am.max_iov         = UCT_SM_MAX_IOV;
    attr->cap.am.opt_zcopy_align = caps->am_align;
    attr->cap.am.align_mtu       = caps->am_align;

    ucx_ext_sm_rma_caps(caps->put_max_short, caps->max_bcopy, caps->zcopy_thresh,
                        &attr->cap.put.max_short, &attr->cap.put.max_bcopy,
                        &attr->cap.put.min_zcopy, &attr->cap.put.max_zcopy,
                        &attr->cap.put.max_iov, &attr->cap.put.opt_zcopy_align,
                        &attr->cap.put.align_mtu);
    ucx_ext_sm_rma_caps(0, caps->max_bcopy, caps->zcopy_thresh,
                        &attr->cap.get.max_short, &attr->cap.get.max_bcopy,
                        &attr->cap.get.min_zcopy, &attr->cap.get.max_zcopy,
                        &attr->cap.get.max_iov, &attr->cap.get.opt_zcopy_align,
                        &attr->cap.get.align_mtu);
    ucx_ext_iface_eager_floor(attr, caps->eager_max);

    attr->latency             = ucs_linear_func_make(caps->latency, 0);
    attr->bandwidth.dedicated = iface->config.bandwidth;
    attr->bandwidth.shared    = 0;
    attr->overhead            = 10e-9;
    attr->priority            = 0;
}
