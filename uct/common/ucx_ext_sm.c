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

void ucx_ext_sm_iface_query(uct_sm_iface_t *iface, size_t iface_addr_len,
                            uct_iface_attr_t *attr)
{
    uct_base_iface_query(&iface->super, attr);

    attr->iface_addr_len  = iface_addr_len;
    attr->device_addr_len = uct_sm_iface_get_device_addr_len();
    attr->ep_addr_len     = 0;
    attr->max_conn_priv   = 0;
    attr->cap.flags       = UCT_IFACE_FLAG_CONNECT_TO_IFACE | UCT_IFACE_FLAG_AM_SHORT |
                            UCT_IFACE_FLAG_AM_BCOPY |
                            UCT_IFACE_FLAG_PUT_SHORT | UCT_IFACE_FLAG_PUT_BCOPY |
                            UCT_IFACE_FLAG_PUT_ZCOPY | UCT_IFACE_FLAG_GET_BCOPY |
                            UCT_IFACE_FLAG_GET_ZCOPY | UCT_IFACE_FLAG_PENDING |
                            UCT_IFACE_FLAG_CB_SYNC | UCT_IFACE_FLAG_EP_CHECK |
                            UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE;
}
