/*
 * What the project's shared-memory transports (rdmach on shm, unimem) share on top of UCX's
 * sm iface: the config every one of them has (UCX's sm knobs plus PEER_CHECK_INTERVAL), the
 * capabilities they all offer, and their ops-table family.
 *
 * Needs UCX's internal headers.
 */
#ifndef UCX_EXT_SM_H
#define UCX_EXT_SM_H

#include "ucx_ext_base.h"

#include <uct/sm/base/sm_iface.h>

typedef struct ucx_ext_sm_iface_config {
    uct_sm_iface_config_t super;
    double                peer_check_interval;
} ucx_ext_sm_iface_config_t;

/* The first entry of a transport's config table: {"", "", NULL, offset of its
 * ucx_ext_sm_iface_config_t, UCS_CONFIG_TYPE_TABLE(ucx_ext_sm_iface_config_table)}. */
extern ucs_config_field_t ucx_ext_sm_iface_config_table[];

/* Fills what every shared-memory transport answers alike: base attributes, addresses
 * (iface_addr_len bytes, UCX's sm device address, connect to iface), and the capabilities:
 * am short/bcopy, put short/bcopy/zcopy, get bcopy/zcopy, pending, ep check, peer failure. */
void ucx_ext_sm_iface_query(uct_sm_iface_t *iface, size_t iface_addr_len,
                            uct_iface_attr_t *attr);

/* Fence, device address and peer check of UCX's sm base and uct/common. */
#define UCX_EXT_OPS_SM \
    .ep_fence                 = uct_sm_ep_fence, \
    .iface_fence              = uct_sm_iface_fence, \
    .iface_get_device_address = uct_sm_iface_get_device_address, \
    .ep_check                 = ucx_ext_ep_check

#endif
