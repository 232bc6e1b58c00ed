/* The UCT glue base of the project's transports (see ucx_ext_base.h). */
#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "ucx_ext_base.h"
#include "ucx_ext_sys.h"

#include <ucs/debug/log.h>
#include <ucs/sys/math.h>
#include <ucs/sys/string.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- knobs ---- */

ucs_status_t ucx_ext_config_error(const char *tl, const char *prefix, const char *fmt, ...)
{
    char what[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    ucs_error("%s: invalid configuration: UCX_%s%s", tl, prefix, what);
    return UCS_ERR_INVALID_PARAM;
}

ucs_status_t ucx_ext_config_check(const char *tl, const char *prefix, const void *config,
                                  const ucx_ext_knob_t *knobs, unsigned count)
{
    const char *base = config;
    unsigned long ul;
    double value;
    unsigned i;

    for (i = 0; i < count; ++i) {
        switch (knobs[i].type) {
        case UCX_EXT_KNOB_UINT:
            value = *(const unsigned*)(base + knobs[i].offset);
            break;
        case UCX_EXT_KNOB_SIZE:
            value = (double)*(const size_t*)(base + knobs[i].offset);
            break;
        case UCX_EXT_KNOB_ULONG:
            value = (double)*(const unsigned long*)(base + knobs[i].offset);
            break;
        case UCX_EXT_KNOB_ULUNITS:
            ul = *(const unsigned long*)(base + knobs[i].offset);
            if (ul == UCS_ULUNITS_AUTO) {
                continue;   /* the transport derives it */
            }
            value = (ul == UCS_ULUNITS_INF) ? INFINITY : (double)ul;
            break;
        default:
            value = *(const double*)(base + knobs[i].offset);
            break;
        }
        if ((value >= knobs[i].min) && (value <= knobs[i].max)) {
            continue;
        }
        if (knobs[i].type == UCX_EXT_KNOB_ULUNITS) {
            return ucx_ext_config_error(tl, prefix, "%s=%.0f must be auto or between %.0f "
                                        "and %.0f", knobs[i].name, value, knobs[i].min,
                                        knobs[i].max);
        }
        if (knobs[i].type == UCX_EXT_KNOB_DOUBLE) {
            return ucx_ext_config_error(tl, prefix, "%s=%g must be between %g and %g",
                                        knobs[i].name, value, knobs[i].min, knobs[i].max);
        }
        return ucx_ext_config_error(tl, prefix, "%s=%.0f must be between %.0f and %.0f",
                                    knobs[i].name, value, knobs[i].min, knobs[i].max);
    }
    return UCS_OK;
}

/* ---- iface part ---- */

ucs_status_t ucx_ext_iface_check_params(const uct_iface_params_t *params, const char *tl)
{
    size_t align, offset;
    ucs_status_t status;

    /* Active messages are handed to the callback in place (no UCT_CB_PARAM_FLAG_DESC), so
     * there is nothing to align; a bad request is still refused as UCX's own transports do. */
    status = uct_iface_param_am_alignment(params, 1, 0, 0, &align, &offset);
    if (status != UCS_OK) {
        return status;
    }
    if ((align == 0) || !ucs_is_pow2(align)) {
        ucs_error("%s: AM alignment %zu is not a power of 2", tl, align);
        return UCS_ERR_INVALID_PARAM;
    }
    return UCS_OK;
}

void ucx_ext_iface_init(ucx_ext_iface_t *x, uct_base_iface_t *uct, const char *tl,
                        ucx_ext_tx_counters_t *cnt, int (*tx_ready)(ucx_ext_ep_t*),
                        double peer_check_interval)
{
    x->uct                 = uct;
    x->tl                  = tl;
    x->cnt                 = cnt;
    x->tx_ready            = tx_ready;
    x->dispatching         = NULL;
    x->peer_check_interval = ucs_time_from_sec(peer_check_interval);
    x->next_peer_check     = 0;
    x->peer_closed         = NULL;
    x->next_closed_check   = 0;
    x->err_pending         = 0;
    ucs_arbiter_init(&x->arbiter);
    ucs_list_head_init(&x->eps);
}

void ucx_ext_iface_cleanup(ucx_ext_iface_t *x)
{
    ucs_arbiter_cleanup(&x->arbiter);
}

/* A pending request's private part: its arbiter element first (as uct_pending_req_priv_arb_elem
 * has it), then pending_add's flags. */
typedef struct {
    ucs_arbiter_elem_t elem;
    unsigned           flags;
} ucx_ext_pending_priv_t;

typedef struct {
    unsigned count;
    int      async;     /* from an async progress: only requests added with CB_FLAG_ASYNC */
} ucx_ext_dispatch_t;

static ucs_arbiter_cb_result_t ucx_ext_pending_cb(ucs_arbiter_t *arbiter,
                                                  ucs_arbiter_group_t *group,
                                                  ucs_arbiter_elem_t *elem, void *arg)
{
    ucx_ext_ep_t *ep       = ucs_container_of(group, ucx_ext_ep_t, arb_group);
    ucx_ext_dispatch_t *d  = arg;
    unsigned *count        = &d->count;
    uct_pending_req_t *req;
    ucs_status_t status;

    /* the room any op may need: a request that would fail again is not even called */
    if (ep->blocked || ((ep->x->tx_ready != NULL) && !ep->x->tx_ready(ep))) {
        return UCS_ARBITER_CB_RESULT_RESCHED_GROUP;
    }
    if (d->async && !(((ucx_ext_pending_priv_t*)elem)->flags & UCT_CB_FLAG_ASYNC)) {
        return UCS_ARBITER_CB_RESULT_RESCHED_GROUP;    /* the application's thread calls it */
    }
    req                = ucs_container_of(elem, uct_pending_req_t, priv);
    ep->x->dispatching = ep;
    status             = req->func(req);
    ep->x->dispatching = NULL;
    if (status == UCS_OK) {
        ++(*count);
        return UCS_ARBITER_CB_RESULT_REMOVE_ELEM;
    } else if (status == UCS_INPROGRESS) {
        ++(*count);
        return UCS_ARBITER_CB_RESULT_NEXT_GROUP;
    }
    return UCS_ARBITER_CB_RESULT_RESCHED_GROUP;
}

/* A dead receiver never makes room: check the processes that eps wait on. */
static void ucx_ext_iface_check_peers(ucx_ext_iface_t *x)
{
    ucs_time_t now;
    ucx_ext_ep_t *ep;

    if (x->peer_check_interval == 0) {
        return;     /* network peers: the transport judges them itself */
    }
    now = ucs_get_time();
    if (now < x->next_peer_check) {
        return;
    }
    x->next_peer_check = now + x->peer_check_interval;
    ucs_list_for_each(ep, &x->eps, list) {
        if (ep->blocked || !ucs_arbiter_group_is_empty(&ep->arb_group)) {
            ucx_ext_ep_peer_alive(ep);
        }
    }
}

void ucx_ext_iface_check_all_peers(ucx_ext_iface_t *x)
{
    ucs_time_t now = ucs_get_time();
    ucx_ext_ep_t *ep;

    if ((x->peer_check_interval == 0) || (now < x->next_peer_check)) {
        return;
    }
    x->next_peer_check = now + x->peer_check_interval;
    ucs_list_for_each(ep, &x->eps, list) {
        ucx_ext_ep_peer_alive(ep);
    }
}

void ucx_ext_iface_check_closed(ucx_ext_iface_t *x)
{
    ucx_ext_ep_t *ep;

    x->next_closed_check = ucs_get_time() + x->peer_check_interval;
    ucs_list_for_each(ep, &x->eps, list) {
        if (!ep->failed && x->peer_closed(ep)) {
            ucs_diag("%s ep %p: the peer iface has closed", x->tl, ep);
            ucx_ext_ep_set_failed(ep, UCS_ERR_CONNECTION_RESET);
        }
    }
}

unsigned ucx_ext_iface_progress_pending(ucx_ext_iface_t *x)
{
    ucx_ext_dispatch_t d = {0, 0};

    if (!ucs_arbiter_is_empty(&x->arbiter)) {
        ucs_arbiter_dispatch(&x->arbiter, 1, ucx_ext_pending_cb, &d);
    }
    ucx_ext_iface_check_peers(x);
    return d.count;
}

unsigned ucx_ext_iface_progress_pending_async(ucx_ext_iface_t *x)
{
    ucx_ext_dispatch_t d = {0, 1};

    if (!ucs_arbiter_is_empty(&x->arbiter)) {
        ucs_arbiter_dispatch(&x->arbiter, 1, ucx_ext_pending_cb, &d);
    }
    return d.count;
}

/* ---- ep ---- */

UCS_CLASS_INIT_FUNC(ucx_ext_ep_t, uct_base_iface_t *iface, ucx_ext_iface_t *x, pid_t pid)
{
    UCS_CLASS_CALL_SUPER_INIT(uct_base_ep_t, iface);

    self->x          = x;
    self->pid        = pid;
    self->start_time = (pid != 0) ? ucx_ext_proc_start_time(pid) : 0;
    self->failed     = 0;
    self->blocked    = 0;
    self->err_cb_id  = UCS_CALLBACKQ_ID_NULL;
    self->err_status = UCS_OK;
    self->peer_addr_kind = 0;
    self->peer_addr_len  = 0;
    if ((pid != 0) && (self->start_time == 0)) {
        ucs_diag("%s: peer process %d is not running", x->tl, (int)pid);
        return UCS_ERR_UNREACHABLE;
    }
    ucs_arbiter_group_init(&self->arb_group);
    ucs_list_add_tail(&x->eps, &self->list);
    return UCS_OK;
}

UCS_CLASS_CLEANUP_FUNC(ucx_ext_ep_t)
{
    ucx_ext_ep_pending_purge(&self->super.super, NULL, NULL);
    ucs_arbiter_group_cleanup(&self->arb_group);
    if (self->err_cb_id != UCS_CALLBACKQ_ID_NULL) {
        ucx_ext_oneshot_remove(&self->x->uct->worker->super.progress_q, self,
                               &self->err_cb_id);
        --self->x->err_pending;
    }
    ucs_list_del(&self->list);
}

UCS_CLASS_DEFINE(ucx_ext_ep_t, uct_base_ep_t);

static unsigned ucx_ext_ep_err_progress(void *arg)
{
    ucx_ext_ep_t *ep = arg;

    ep->err_cb_id = UCS_CALLBACKQ_ID_NULL;
    --ep->x->err_pending;
    uct_iface_handle_ep_err(ep->super.super.iface, &ep->super.super, ep->err_status);
    return 1;
}

void ucx_ext_ep_set_failed(ucx_ext_ep_t *ep, ucs_status_t status)
{
    if (ep->failed) {
        return;
    }
    ep->failed     = 1;
    ep->err_status = status;
    ep->x->cnt->peer_failed++;
    if (ep->x->uct->err_handler == NULL) {
        return;
    }
    ucx_ext_oneshot_add(&ep->x->uct->worker->super.progress_q, ep, ucx_ext_ep_err_progress,
                        ep, &ep->err_cb_id);
    ++ep->x->err_pending;
}

int ucx_ext_ep_peer_alive(ucx_ext_ep_t *ep)
{
    if (ep->failed) {
        return 0;
    }
    if ((ep->pid != 0) && !ucx_ext_proc_alive(ep->pid, ep->start_time)) {
        ucs_diag("%s ep %p: peer process %d is gone", ep->x->tl, ep, (int)ep->pid);
    } else if ((ep->x->peer_closed != NULL) && ep->x->peer_closed(ep)) {
        ucs_diag("%s ep %p: the peer iface has closed", ep->x->tl, ep);
    } else {
        return 1;
    }
    ucx_ext_ep_set_failed(ep, UCS_ERR_CONNECTION_RESET);
    return 0;
}

UCS_F_NOINLINE ucs_status_t ucx_ext_ep_no_resource(ucx_ext_ep_t *ep, unsigned flags)
{
    ep->x->cnt->tx_no_resource++;
    if (flags & UCT_SEND_FLAG_PEER_CHECK) {
        ucx_ext_ep_peer_alive(ep);
    }
    return UCS_ERR_NO_RESOURCE;
}

ucs_status_t ucx_ext_ep_pending_add(uct_ep_h tl_ep, uct_pending_req_t *req, unsigned flags)
{
    ucx_ext_ep_t *ep = ucs_derived_of(tl_ep, ucx_ext_ep_t);

    /* a request we queue must not be one that could go out now */
    if ((ep->x->tx_ready != NULL) && ucs_arbiter_group_is_empty(&ep->arb_group) &&
        !ep->blocked && ep->x->tx_ready(ep)) {
        return UCS_ERR_BUSY;
    }
    UCS_STATIC_ASSERT(sizeof(ucx_ext_pending_priv_t) <= UCT_PENDING_REQ_PRIV_LEN);
    ((ucx_ext_pending_priv_t*)req->priv)->flags = flags;
    uct_pending_req_arb_group_push(&ep->arb_group, req);
    ucs_arbiter_group_schedule(&ep->x->arbiter, &ep->arb_group);
    ep->x->cnt->pending_add++;
    return UCS_OK;
}

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

void ucx_ext_ep_pending_purge(uct_ep_h tl_ep, uct_pending_purge_callback_t cb, void *arg)
{
    ucx_ext_ep_t *ep          = ucs_derived_of(tl_ep, ucx_ext_ep_t);
    uct_purge_cb_args_t args = {cb, arg};

    ucs_arbiter_group_purge(&ep->x->arbiter, &ep->arb_group, ucx_ext_pending_purge_cb, &args);
}

void ucx_ext_ep_set_peer_addr(ucx_ext_ep_t *ep, int kind, const void *addr, size_t len)
{
    if ((addr == NULL) || (len == 0) || (len > sizeof(ep->peer_addr))) {
        ep->peer_addr_len = 0;
        return;
    }
    memcpy(ep->peer_addr, addr, len);
    ep->peer_addr_kind = (uint8_t)kind;
    ep->peer_addr_len  = (uint8_t)len;
}

int ucx_ext_ep_is_connected(uct_ep_h tl_ep, const uct_device_addr_t *dev_addr,
                            const uct_iface_addr_t *iface_addr, const uct_ep_addr_t *ep_addr)
{
    const ucx_ext_ep_t *ep = ucs_derived_of(tl_ep, ucx_ext_ep_t);
    const void *named      = (ep_addr != NULL) ? (const void*)ep_addr : (const void*)iface_addr;
    int kind               = (ep_addr != NULL) ? UCX_EXT_PEER_EP : UCX_EXT_PEER_IFACE;

    if (ep->peer_addr_len == 0) {
        /* nothing kept: what UCT's base answers, whether the peer is reachable at all */
        return (dev_addr != NULL) &&
               tl_ep->iface->ops.iface_is_reachable(tl_ep->iface, dev_addr, iface_addr);
    }
    return (named != NULL) && (ep->peer_addr_kind == kind) &&
           !memcmp(named, ep->peer_addr, ep->peer_addr_len);
}

ucs_status_t ucx_ext_ep_check(uct_ep_h tl_ep, unsigned flags, uct_completion_t *comp)
{
    UCX_EXT_EP_CHECK_PARAMS(flags, comp);
    ucx_ext_ep_peer_alive(ucs_derived_of(tl_ep, ucx_ext_ep_t));
    return UCS_OK;
}
