/* Two-process UCP test helpers (see ucp_node.h). */
#include "ucp_node.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int node_passed, node_failed;

void result(int ok, const char *name, const char *fmt, ...)
{
    va_list ap;

    printf("%s  %-22s ", ok ? "PASS" : "FAIL", name);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    ok ? ++node_passed : ++node_failed;
}

double now_sec(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void req_done(void *request, ucs_status_t status, void *user_data)
{
    (void)request;
    *(ucs_status_t*)user_data = status;
}

static void recv_done(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info,
                      void *user_data)
{
    (void)request;
    (void)info;
    *(ucs_status_t*)user_data = status;
}

int node_open(node_t *n, uint64_t features, ucs_thread_mode_t thread_mode, int use_efd)
{
    ucp_params_t params = {
        .field_mask = UCP_PARAM_FIELD_FEATURES,
        .features   = features
    };
    ucp_worker_params_t wparams = {
        .field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        .thread_mode = thread_mode
    };
    ucp_config_t *config;
    ucs_status_t st;

    memset(n, 0, sizeof(*n));
    n->use_efd = use_efd;
    if (features & UCP_FEATURE_WAKEUP) {
        wparams.field_mask |= UCP_WORKER_PARAM_FIELD_EVENTS;
        wparams.events      = UCP_WAKEUP_TAG_SEND | UCP_WAKEUP_TAG_RECV;
    }
    if (ucp_config_read(NULL, NULL, &config) != UCS_OK) {
        return -1;
    }
    st = ucp_init(&params, config, &n->ctx);
    ucp_config_release(config);
    if (st != UCS_OK) {
        fprintf(stderr, "ucp_init: %s\n", ucs_status_string(st));
        return -1;
    }
    st = ucp_worker_create(n->ctx, &wparams, &n->worker);
    if (st != UCS_OK) {
        fprintf(stderr, "ucp_worker_create: %s\n", ucs_status_string(st));
        return -1;
    }
    if (use_efd && (ucp_worker_get_efd(n->worker, &n->efd) != UCS_OK)) {
        fprintf(stderr, "ucp_worker_get_efd failed\n");
        return -1;
    }
    return 0;
}

int node_swap(int sock, const void *buf, size_t len, void **peer_p, size_t *got, size_t max)
{
    size_t peer_len;
    void *peer;

    if ((write(sock, &len, sizeof(len)) != sizeof(len)) ||
        (write(sock, buf, len) != (ssize_t)len) ||
        (recv(sock, &peer_len, sizeof(peer_len), MSG_WAITALL) != sizeof(peer_len)) ||
        (peer_len > max)) {
        return -1;
    }
    peer = malloc(peer_len ? peer_len : 1);
    if ((peer == NULL) || (recv(sock, peer, peer_len, MSG_WAITALL) != (ssize_t)peer_len)) {
        free(peer);
        return -1;
    }
    *peer_p = peer;
    *got    = peer_len;
    return 0;
}

static void ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    (void)ep;
    fprintf(stderr, "ep error: %s\n", ucs_status_string(status));
    ++((node_t*)arg)->ep_errors;
}

/* Swaps worker addresses over the socketpair and connects (err_peer: the ep handles peer
 * failures, as MPI libraries ask). */
int node_connect(node_t *n, int sock, int err_peer)
{
    ucp_ep_params_t ep_params;
    ucp_address_t *addr;
    size_t len, peer_len;
    void *peer;
    ucs_status_t st;
    int ret;

    if (ucp_worker_get_address(n->worker, &addr, &len) != UCS_OK) {
        return -1;
    }
    ret = node_swap(sock, addr, len, &peer, &peer_len, 1u << 20);
    ucp_worker_release_address(n->worker, addr);
    if (ret != 0) {
        return -1;
    }
    memset(&ep_params, 0, sizeof(ep_params));
    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep_params.address    = (ucp_address_t*)peer;
    if (err_peer) {
        ep_params.field_mask     |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
        ep_params.err_mode        = UCP_ERR_HANDLING_MODE_PEER;
        ep_params.err_handler.cb  = ep_error;
        ep_params.err_handler.arg = n;
    }
    st = ucp_ep_create(n->worker, &ep_params, &n->ep);
    free(peer);
    if (st != UCS_OK) {
        fprintf(stderr, "ucp_ep_create: %s\n", ucs_status_string(st));
        return -1;
    }
    return 0;
}

void node_close(node_t *n)
{
    ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                 .flags        = UCP_EP_CLOSE_FLAG_FORCE};
    void *req;

    if (n->ep != NULL) {
        req = ucp_ep_close_nbx(n->ep, &param);
        if (UCS_PTR_IS_PTR(req)) {
            while (ucp_request_check_status(req) == UCS_INPROGRESS) {
                ucp_worker_progress(n->worker);
            }
            ucp_request_free(req);
        }
    }
    if (n->worker != NULL) {
        ucp_worker_destroy(n->worker);
    }
    if (n->ctx != NULL) {
        ucp_cleanup(n->ctx);
    }
}

void *send_tag(node_t *n, const void *buf, size_t len, uint64_t tag, ucs_status_t *st)
{
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send      = req_done,
        .user_data    = st
    };
    void *req;

    *st = UCS_INPROGRESS;
    req = ucp_tag_send_nbx(n->ep, buf, len, tag, &param);
    if (!UCS_PTR_IS_PTR(req)) {
        *st = UCS_PTR_STATUS(req);
        return NULL;
    }
    return req;
}

void *recv_tag(node_t *n, void *buf, size_t len, uint64_t tag, ucs_status_t *st)
{
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.recv      = recv_done,
        .user_data    = st
    };
    void *req;

    *st = UCS_INPROGRESS;
    req = ucp_tag_recv_nbx(n->worker, buf, len, tag, (uint64_t)-1, &param);
    if (!UCS_PTR_IS_PTR(req)) {
        *st = UCS_PTR_STATUS(req);
        return NULL;
    }
    return req;
}

