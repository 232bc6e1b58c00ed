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

#include <uct/base/uct_iov.inl>
#include <uct/sm/base/sm_iface.h>

typedef struct ucx_ext_sm_iface_config {
    uct_sm_iface_config_t super;
    double                peer_check_interval;
} ucx_ext_sm_iface_config_t;

/* The first entry of a transport's config table: {"", "", NULL, offset of its
 * ucx_ext_sm_iface_config_t, UCS_CONFIG_TYPE_TABLE(ucx_ext_sm_iface_config_table)}. */
extern ucs_config_field_t ucx_ext_sm_iface_config_table[];

/* What differs between the shared-memory transports' capabilities. No am_zcopy: on shared
 * memory it is the same single copy as am_bcopy. */
typedef struct ucx_ext_sm_caps {
    size_t am_max_short;    /* header included */
    size_t am_align;        /* optimal alignment of AM payloads */
    size_t rndv_floor;      /* am.min_zcopy: UCP floors its AM rendezvous threshold with it */
    size_t put_max_short;
    size_t max_bcopy;       /* am, put and get bcopy */
    size_t zcopy_thresh;    /* put/get min_zcopy: UCP's rendezvous uses get_zcopy from here */
    size_t eager_max;       /* 0, or: UCP sends up to it eagerly (ucx_ext_iface_eager_floor) */
    double latency;         /* seconds */
} ucx_ext_sm_caps_t;

/* Fills what every shared-memory transport answers alike: base attributes, addresses
 * (iface_addr_len bytes, UCX's sm device address, connect to iface), the capabilities (am
 * short/bcopy, put short/bcopy/zcopy, get bcopy/zcopy, pending, ep check, peer failure) with
 * the limits from caps, and the performance estimates. */
void ucx_ext_sm_iface_query(uct_sm_iface_t *iface, size_t iface_addr_len,
                            const ucx_ext_sm_caps_t *caps, uct_iface_attr_t *attr);

/* A zcopy's iov list as struct iovec for the local side of a transfer (at most
 * UCT_SM_MAX_IOV entries; *cnt_p: how many). Returns the total length. */
static UCS_F_ALWAYS_INLINE size_t ucx_ext_sm_iovec(const uct_iov_t *iov, size_t iovcnt,
                                                   struct iovec *local, size_t *cnt_p)
{
    ucs_iov_iter_t iov_iter;

    *cnt_p = UCT_SM_MAX_IOV;
    ucs_iov_iter_init(&iov_iter);
    return uct_iov_to_iovec(local, cnt_p, iov, iovcnt, SIZE_MAX, &iov_iter);
}

/*
 * "This host", for the shared-memory transports: every peer they reach is addressed by its pid
 * (process_vm_readv/writev for zero copy and zDMA, /proc/<pid>/fd and pidfd_getfd for its
 * segments and doorbell). So the host is the kernel (UCX's system id, from the boot id) and
 * the PID namespace the pids mean something in, as UCX's cma has it; not UCX's sm rule (the IPC
 * namespace), which would let two containers with one IPC namespace but their own pids take
 * each other's pids for their own. Containers or namespace "hosts" with their own PID
 * namespace are other hosts; a process in the initial namespace sends the short form.
 */
size_t ucx_ext_sm_device_addr_len(void);
ucs_status_t ucx_ext_sm_get_device_address(uct_iface_h tl_iface, uct_device_addr_t *addr);
int ucx_ext_sm_is_same_host(const uct_device_addr_t *dev_addr);

/* Fence, device address and peer check of UCX's sm base and uct/common. */
#define UCX_EXT_OPS_SM \
    .ep_fence                 = uct_sm_ep_fence, \
    .iface_fence              = uct_sm_iface_fence, \
    .iface_get_device_address = ucx_ext_sm_get_device_address, \
    .ep_check                 = ucx_ext_ep_check

#endif
