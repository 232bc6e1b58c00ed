/*
 * uct_iface_ops_t in families, so that a transport's ops table names what it implements and
 * takes the rest as one line each, and so that its ep operations are declared from a prefix
 * instead of copied signature by signature.
 *
 *   static uct_iface_ops_t ops = {
 *       UCX_EXT_OPS_AM(uct_foo_ep), UCX_EXT_OPS_RMA(uct_foo_ep), UCX_EXT_OPS_NO_ATOMICS,
 *       UCX_EXT_OPS_NO_TAG, UCX_EXT_OPS_NO_EP_ADDR, UCX_EXT_OPS_NO_EVENTS,
 *       UCX_EXT_OPS_PENDING, UCX_EXT_OPS_EP_LIFE(uct_foo_ep_t, uct_foo_iface_t), ...
 *   };
 *
 * Needs UCX's internal headers.
 */
#ifndef UCX_EXT_OPS_H
#define UCX_EXT_OPS_H

#include "ucx_ext_base.h"

#define UCX_EXT_UNSUPPORTED(_type) ((_type)ucs_empty_function_return_unsupported)

/* ---- declarations of a transport's ep operations, from its prefix ---- */

#define UCX_EXT_EP_CLASS_DECLARE(_ep_type) \
    UCS_CLASS_DECLARE(_ep_type, const uct_ep_params_t*); \
    UCS_CLASS_DECLARE_NEW_FUNC(_ep_type, uct_ep_t, const uct_ep_params_t*); \
    UCS_CLASS_DECLARE_DELETE_FUNC(_ep_type, uct_ep_t)

#define UCX_EXT_EP_AM_DECLARE(_p) \
    ucs_status_t _p##_am_short(uct_ep_h tl_ep, uint8_t id, uint64_t header, \
                               const void *payload, unsigned length); \
    ucs_status_t _p##_am_short_iov(uct_ep_h tl_ep, uint8_t id, const uct_iov_t *iov, \
                                   size_t iovcnt); \
    ssize_t _p##_am_bcopy(uct_ep_h tl_ep, uint8_t id, uct_pack_callback_t pack_cb, void *arg, \
                          unsigned flags)

#define UCX_EXT_EP_AM_ZCOPY_DECLARE(_p) \
    ucs_status_t _p##_am_zcopy(uct_ep_h tl_ep, uint8_t id, const void *header, \
                               unsigned header_length, const uct_iov_t *iov, size_t iovcnt, \
                               unsigned flags, uct_completion_t *comp)

#define UCX_EXT_EP_RMA_DECLARE(_p) \
    ucs_status_t _p##_put_short(uct_ep_h tl_ep, const void *buffer, unsigned length, \
                                uint64_t remote_addr, uct_rkey_t rkey); \
    ssize_t _p##_put_bcopy(uct_ep_h tl_ep, uct_pack_callback_t pack_cb, void *arg, \
                           uint64_t remote_addr, uct_rkey_t rkey); \
    ucs_status_t _p##_put_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov, size_t iovcnt, \
                                uint64_t remote_addr, uct_rkey_t rkey, uct_completion_t *comp); \
    ucs_status_t _p##_get_bcopy(uct_ep_h tl_ep, uct_unpack_callback_t unpack_cb, void *arg, \
                                size_t length, uint64_t remote_addr, uct_rkey_t rkey, \
                                uct_completion_t *comp); \
    ucs_status_t _p##_get_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov, size_t iovcnt, \
                                uint64_t remote_addr, uct_rkey_t rkey, uct_completion_t *comp); \
    ucs_status_t _p##_flush(uct_ep_h tl_ep, unsigned flags, uct_completion_t *comp)

/* put_zcopy and get_zcopy of prefix _p as one transfer function
 * _p##_zcopy(tl_ep, iov, iovcnt, remote_addr, rkey, write, comp), counted by _count(name) */
#define UCX_EXT_EP_ZCOPY_DEFINE(_p, _count) \
    ucs_status_t _p##_put_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov, size_t iovcnt, \
                                uint64_t remote_addr, uct_rkey_t rkey, uct_completion_t *comp) \
    { \
        _count(tx_put_zcopy, 1); \
        return _p##_zcopy(tl_ep, iov, iovcnt, remote_addr, rkey, 1, comp); \
    } \
    ucs_status_t _p##_get_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov, size_t iovcnt, \
                                uint64_t remote_addr, uct_rkey_t rkey, uct_completion_t *comp) \
    { \
        _count(tx_get_zcopy, 1); \
        return _p##_zcopy(tl_ep, iov, iovcnt, remote_addr, rkey, 0, comp); \
    }

/* ---- ops table families ---- */

#define UCX_EXT_OPS_AM(_p) \
    .ep_am_short     = _p##_am_short, \
    .ep_am_short_iov = _p##_am_short_iov, \
    .ep_am_bcopy     = _p##_am_bcopy

#define UCX_EXT_OPS_RMA(_p) \
    .ep_put_short = _p##_put_short, \
    .ep_put_bcopy = _p##_put_bcopy, \
    .ep_put_zcopy = _p##_put_zcopy, \
    .ep_get_short = UCX_EXT_UNSUPPORTED(uct_ep_get_short_func_t), \
    .ep_get_bcopy = _p##_get_bcopy, \
    .ep_get_zcopy = _p##_get_zcopy, \
    .ep_flush     = _p##_flush

#define UCX_EXT_OPS_NO_ATOMICS \
    .ep_atomic_cswap64 = UCX_EXT_UNSUPPORTED(uct_ep_atomic_cswap64_func_t), \
    .ep_atomic_cswap32 = UCX_EXT_UNSUPPORTED(uct_ep_atomic_cswap32_func_t), \
    .ep_atomic32_post  = UCX_EXT_UNSUPPORTED(uct_ep_atomic32_post_func_t), \
    .ep_atomic64_post  = UCX_EXT_UNSUPPORTED(uct_ep_atomic64_post_func_t), \
    .ep_atomic32_fetch = UCX_EXT_UNSUPPORTED(uct_ep_atomic32_fetch_func_t), \
    .ep_atomic64_fetch = UCX_EXT_UNSUPPORTED(uct_ep_atomic64_fetch_func_t)

#define UCX_EXT_OPS_NO_TAG \
    .ep_tag_eager_short    = UCX_EXT_UNSUPPORTED(uct_ep_tag_eager_short_func_t), \
    .ep_tag_eager_bcopy    = UCX_EXT_UNSUPPORTED(uct_ep_tag_eager_bcopy_func_t), \
    .ep_tag_eager_zcopy    = UCX_EXT_UNSUPPORTED(uct_ep_tag_eager_zcopy_func_t), \
    .ep_tag_rndv_zcopy     = UCX_EXT_UNSUPPORTED(uct_ep_tag_rndv_zcopy_func_t), \
    .ep_tag_rndv_cancel    = UCX_EXT_UNSUPPORTED(uct_ep_tag_rndv_cancel_func_t), \
    .ep_tag_rndv_request   = UCX_EXT_UNSUPPORTED(uct_ep_tag_rndv_request_func_t), \
    .iface_tag_recv_zcopy  = UCX_EXT_UNSUPPORTED(uct_iface_tag_recv_zcopy_func_t), \
    .iface_tag_recv_cancel = UCX_EXT_UNSUPPORTED(uct_iface_tag_recv_cancel_func_t)

/* connect-to-iface transports */
#define UCX_EXT_OPS_NO_EP_ADDR \
    .ep_get_address   = UCX_EXT_UNSUPPORTED(uct_ep_get_address_func_t), \
    .ep_connect_to_ep = UCX_EXT_UNSUPPORTED(uct_ep_connect_to_ep_func_t)

#define UCX_EXT_OPS_NO_EVENTS \
    .iface_event_fd_get = UCX_EXT_UNSUPPORTED(uct_iface_event_fd_get_func_t), \
    .iface_event_arm    = UCX_EXT_UNSUPPORTED(uct_iface_event_arm_func_t)

/* a transport with wakeup: _p##_event_fd_get and _p##_event_arm */
#define UCX_EXT_OPS_EVENTS(_p) \
    .iface_event_fd_get = _p##_event_fd_get, \
    .iface_event_arm    = _p##_event_arm

/* the pending queue of uct/common */
#define UCX_EXT_OPS_PENDING \
    .ep_pending_add   = ucx_ext_ep_pending_add, \
    .ep_pending_purge = ucx_ext_ep_pending_purge

/* ep and iface life, progress switches of uct_base_iface */
#define UCX_EXT_OPS_LIFE(_ep_type, _iface_type) \
    .ep_create              = UCS_CLASS_NEW_FUNC_NAME(_ep_type), \
    .ep_destroy             = UCS_CLASS_DELETE_FUNC_NAME(_ep_type), \
    .iface_close            = UCS_CLASS_DELETE_FUNC_NAME(_iface_type), \
    .iface_progress_enable  = uct_base_iface_progress_enable, \
    .iface_progress_disable = uct_base_iface_progress_disable

/* the iface entries named after the transport's iface prefix */
#define UCX_EXT_OPS_IFACE(_p) \
    .iface_flush        = _p##_flush, \
    .iface_progress     = _p##_progress, \
    .iface_query        = _p##_query, \
    .iface_get_address  = _p##_get_address, \
    .iface_is_reachable = _p##_is_reachable

#endif
