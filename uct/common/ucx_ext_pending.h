/*
 * The pending-queue purge every transport of the project shares: each ep keeps its queued
 * requests in an arbiter group of its iface; a purge hands each one back to the caller's
 * callback (or drops it when there is none) and empties the group. Needs the UCT internal
 * headers (include after the transport's <tl>_uct.h).
 */
#ifndef UCX_EXT_PENDING_H
#define UCX_EXT_PENDING_H

static ucs_arbiter_cb_result_t ucx_ext_pending_purge_cb(ucs_arbiter_t *arbiter,
                                                        ucs_arbiter_group_t *group,
                                                        ucs_arbiter_elem_t *elem, void *arg)
{
    uct_purge_cb_args_t *args = arg;
    uct_pending_req_t *req    = ucs_container_of(elem, uct_pending_req_t, priv);

    if (args->cb != NULL) {
        args->cb(req, args->arg);
    } else {
        ucs_debug("canceling pending request %p", req);
    }
    return UCS_ARBITER_CB_RESULT_REMOVE_ELEM;
}

static inline void ucx_ext_pending_purge(ucs_arbiter_t *arbiter, ucs_arbiter_group_t *group,
                                         uct_pending_purge_callback_t cb, void *arg)
{
    uct_purge_cb_args_t args = {cb, arg};

    ucs_arbiter_group_purge(arbiter, group, ucx_ext_pending_purge_cb, &args);
}

#endif
