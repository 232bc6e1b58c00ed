#include "ucp_pair.h"

#include <ucp_ext.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void progress_cb(void *arg)
{
    up_progress(arg);
}

void up_progress(up_t *u)
{
    ucp_worker_progress(u->worker);
}

int up_expired(const up_t *u)
{
    return pair_now() > u->pair->deadline;
}

ucs_status_t up_wait(up_t *u, ucs_status_ptr_t request)
{
    ucs_status_t status;

    if (request == NULL) {
        return UCS_OK;
    }
    if (UCS_PTR_IS_ERR(request)) {
        return UCS_PTR_STATUS(request);
    }
    while ((status = ucp_request_check_status(request)) == UCS_INPROGRESS) {
        up_progress(u);
        if (up_expired(u)) {
            /* leave the request alone: freeing it would let UCP complete into freed memory */
            return UCS_ERR_TIMED_OUT;
        }
    }
    ucp_request_free(request);
    return status;
}

static void ep_error_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    up_t *u = arg;

    (void)ep;
    if (u->ep_errors++ == 0) {
        u->ep_status     = status;
        u->ep_error_time = pair_now();
    }
}

int up_open(up_t *u, pair_t *pair, const char *tls, int err_mode_peer)
{
    ucp_params_t params = {
        .field_mask = UCP_PARAM_FIELD_FEATURES,
        .features   = UCP_FEATURE_TAG | UCP_FEATURE_STREAM | UCP_FEATURE_RMA |
                      UCP_FEATURE_AMO32 | UCP_FEATURE_AMO64 | UCP_FEATURE_AM,
    };
    ucp_worker_params_t wparams = {
        .field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        .thread_mode = UCS_THREAD_MODE_SINGLE,
    };
    ucp_ep_params_t ep_params;
    ucp_address_t *address;
    size_t address_len;
    ucp_config_t *config;
    ucs_status_t status;
    uint8_t peer[8192];
    ssize_t n;
    int ok;

    memset(u, 0, sizeof(*u));
    u->pair          = pair;
    u->tls           = tls;
    u->err_mode_peer = err_mode_peer;

    status = ucp_config_read(NULL, NULL, &config);
    if (status == UCS_OK) {
        status = ucp_init(&params, config, &u->context);
        ucp_config_release(config);
    }
    if (status == UCS_OK) {
        status = ucp_worker_create(u->context, &wparams, &u->worker);
    }
    if (status == UCS_OK) {
        status = ucp_worker_get_address(u->worker, &address, &address_len);
    }
    if (status != UCS_OK) {
        pair_log(pair, "UCP init (UCX_TLS=%s): %s", getenv("UCX_TLS") ? getenv("UCX_TLS") : "",
                 ucs_status_string(status));
        return PAIR_FAIL;
    }
    pair->progress     = progress_cb;
    pair->progress_arg = u;

    ok = (pair_send(pair, address, address_len) == 0);
    ucp_worker_release_address(u->worker, address);
    n = ok ? pair_recv(pair, peer, sizeof(peer)) : -1;
    if (n <= 0) {
        return PAIR_FAIL;
    }

    /* both sides connect to each other; UCP matches the two eps into one connection */
    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep_params.address    = (ucp_address_t*)peer;
    if (err_mode_peer) {
        ep_params.field_mask    |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                   UCP_EP_PARAM_FIELD_ERR_HANDLER;
        ep_params.err_mode       = UCP_ERR_HANDLING_MODE_PEER;
        ep_params.err_handler.cb  = ep_error_cb;
        ep_params.err_handler.arg = u;
    }
    status = ucp_ep_create(u->worker, &ep_params, &u->ep);
    if (err_mode_peer && (status == UCS_ERR_UNREACHABLE)) {
        /* both sides see the same transports, so both skip */
        if (pair->role == PAIR_INITIATOR) {
            pair_log(pair, "skip: no transport in UCX_TLS=%s handles peer failures",
                     getenv("UCX_TLS") ? getenv("UCX_TLS") : "");
        }
        u->ep = NULL;
        return (pair_sync(pair, 1) == 0) ? PAIR_SKIP : PAIR_FAIL;
    }
    if (status != UCS_OK) {
        pair_log(pair, "ucp_ep_create (UCX_TLS=%s): %s",
                 getenv("UCX_TLS") ? getenv("UCX_TLS") : "", ucs_status_string(status));
        u->ep = NULL;
    }
    return (pair_sync(pair, u->ep != NULL) == 0) ? 0 : PAIR_FAIL;
}

int up_close(up_t *u, int ok)
{
    ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = 0};
    ucs_status_t status;

    /* both sides are done before either closes; the flush of the close needs both progressing,
     * and the second sync keeps each alive (and progressing) until the other has closed */
    if (ok && (pair_sync(u->pair, 1) != 0)) {
        ok = 0;
    }
    if (u->ep != NULL) {
        if (!ok) {
            param.flags = UCP_EP_CLOSE_FLAG_FORCE;
        }
        status = up_wait(u, ucp_ep_close_nbx(u->ep, &param));
        if (ok && (status != UCS_OK)) {
            pair_log(u->pair, "ucp_ep_close_nbx: %s", ucs_status_string(status));
            ok = 0;
        }
    }
    if (ok && (pair_sync(u->pair, 1) != 0)) {
        ok = 0;
    }
    u->pair->progress = NULL;
    if (u->worker != NULL) {
        ucp_worker_destroy(u->worker);
    }
    if (u->context != NULL) {
        ucp_cleanup(u->context);
    }
    return ok;
}

int up_check_lanes(up_t *u)
{
    char why[1500];

    if (ucp_ext_ep_check_tl(u->ep, u->tls, why, sizeof(why)) == 0) {
        return 0;
    }
    pair_log(u->pair, "silent fallback? UCX_TLS=%s, expected lanes on %s: %s",
             getenv("UCX_TLS") ? getenv("UCX_TLS") : "(unset)", u->tls, why);
    return -1;
}
