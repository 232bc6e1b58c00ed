/*
 * Two ifaces of one worker, on two devices that both reach the peer (ud_zcopy only: tests/uct/run
 * runs the case for it). UCP 1.13's worker fence (ucp_worker_fence, under Open MPI's MPI_Rget)
 * calls every iface's fence and goes on, and UCP may put a peer's RMA and active messages on two
 * ifaces. ud_zcopy promises that a fence on an iface holds that iface's later operations until
 * what any iface of the worker issued before it can no longer take effect after them
 * (uct/ud_zcopy/udz_fence.c). The case checks it where it cannot be a matter of timing: no
 * progress runs between the operation before the fence and the one after it.
 */
#include "cases.h"

#include <stdlib.h>
#include <string.h>

#define IFACES_AM_ID 9      /* the case's own messages, counted on both ifaces of each side */

typedef struct {
    uct_iface_h iface;
    uct_ep_h    ep;
    size_t      received;
} ut_second_t;

static ucs_status_t ifaces_am_handler(void *arg, void *data, size_t length, unsigned flags)
{
    ++*(size_t*)arg;
    return UCS_OK;
}

/* The first other device of t's transport: 0, or -1 when there is none. */
static int other_device(ut_t *t, char *dev, size_t len)
{
    uct_tl_resource_desc_t *res;
    unsigned n, i;
    int ret = -1;

    if (uct_md_query_tl_resources(t->md, &res, &n) != UCS_OK) {
        return -1;
    }
    for (i = 0; (i < n) && (ret != 0); ++i) {
        if (!strcmp(res[i].tl_name, t->tl) && strcmp(res[i].dev_name, t->dev)) {
            snprintf(dev, len, "%s", res[i].dev_name);
            ret = 0;
        }
    }
    uct_release_tl_resource_list(res);
    return ret;
}

/* Opens the second iface in t's worker and connects it to the peer's second iface. Returns 0,
 * PAIR_SKIP when either side has no second device, or PAIR_FAIL. */
static int open_second(ut_t *t, ut_second_t *s, char *dev, size_t devlen)
{
    uct_iface_config_t *config;
    uct_iface_params_t params;
    uct_ep_params_t ep_params;
    uct_iface_attr_t attr;
    uint8_t msg[1024], peer[1024];
    ssize_t n;
    size_t len;

    memset(msg, 0, sizeof(msg));
    if (other_device(t, dev, devlen) != 0) {
        pair_send(t->pair, msg, 1);     /* one byte: no second device here */
        return (pair_recv(t->pair, peer, sizeof(peer)) < 0) ? PAIR_FAIL : PAIR_SKIP;
    }
    if (uct_md_iface_config_read(t->md, t->tl, NULL, NULL, &config) != UCS_OK) {
        return PAIR_FAIL;
    }
    ut_iface_params(t, &params);
    params.mode.device.dev_name = dev;
    if (uct_iface_open(t->md, t->worker, &params, config, &s->iface) != UCS_OK) {
        uct_config_release(config);
        pair_log(t->pair, "uct_iface_open(%s/%s) failed", t->tl, dev);
        return PAIR_FAIL;
    }
    uct_config_release(config);
    uct_iface_progress_enable(s->iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    if ((uct_iface_query(s->iface, &attr) != UCS_OK) ||
        (attr.device_addr_len + attr.iface_addr_len + 2 > sizeof(msg)) ||
        (uct_iface_set_am_handler(s->iface, IFACES_AM_ID, ifaces_am_handler, &s->received,
                                  0) != UCS_OK) ||
        (uct_iface_get_device_address(s->iface, (void*)(msg + 2)) != UCS_OK) ||
        (uct_iface_get_address(s->iface, (void*)(msg + 2 + attr.device_addr_len)) != UCS_OK)) {
        pair_log(t->pair, "second iface on %s: query, handler or addresses failed", dev);
        return PAIR_FAIL;
    }
    msg[0] = (uint8_t)attr.device_addr_len;
    msg[1] = (uint8_t)attr.iface_addr_len;
    len    = 2 + attr.device_addr_len + attr.iface_addr_len;
    if ((pair_send(t->pair, msg, len) != 0) ||
        ((n = pair_recv(t->pair, peer, sizeof(peer))) < 0)) {
        return PAIR_FAIL;
    }
    if (n == 1) {
        return PAIR_SKIP;
    }
    if ((n < 2) || ((size_t)n != 2u + peer[0] + peer[1]) || (peer[0] != msg[0]) ||
        (peer[1] != msg[1])) {
        pair_log(t->pair, "bad second-iface address from the peer (%zd bytes)", n);
        return PAIR_FAIL;
    }
    ep_params.field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR |
                           UCT_EP_PARAM_FIELD_IFACE_ADDR;
    ep_params.iface      = s->iface;
    ep_params.dev_addr   = (void*)(peer + 2);
    ep_params.iface_addr = (void*)(peer + 2 + peer[0]);
    if (uct_ep_create(&ep_params, &s->ep) != UCS_OK) {
        pair_log(t->pair, "uct_ep_create on the second iface (%s) failed", dev);
        return PAIR_FAIL;
    }
    return 0;
}

static void close_second(ut_second_t *s)
{
    if (s->ep != NULL) {
        uct_ep_destroy(s->ep);
    }
    if (s->iface != NULL) {
        uct_iface_close(s->iface);
    }
}

/* UCP 1.13's worker fence: every iface's. */
static void fence_both(ut_t *t, ut_second_t *s)
{
    uct_iface_fence(t->iface, 0);
    uct_iface_fence(s->iface, 0);
}

/* The message after the fence on the second iface: held (NO_RESOURCE) at first, then sent once
 * progress finished what came before. 0 or -1. */
static int after_fence(ut_t *t, ut_second_t *s, const char *before, ut_comp_t *comp)
{
    uint64_t v = 1;
    ucs_status_t st;

    st = uct_ep_am_short(s->ep, IFACES_AM_ID, 0, &v, sizeof(v));
    if (st != UCS_ERR_NO_RESOURCE) {
        pair_log(t->pair, "an active message on the second iface after a fence returned %s, "
                 "with %s of the first iface before the fence not done",
                 ucs_status_string(st), before);
        return -1;
    }
    if ((comp != NULL) && (ut_comp_wait(t, comp, UCS_INPROGRESS) != UCS_OK)) {
        pair_log(t->pair, "the %s did not complete", before);
        return -1;
    }
    st = UT_RETRY(t, uct_ep_am_short(s->ep, IFACES_AM_ID, 0, &v, sizeof(v)));
    if (st != UCS_OK) {
        pair_log(t->pair, "the held active message never went: %s", ucs_status_string(st));
        return -1;
    }
    return 0;
}

int case_fence_ifaces(ut_t *t)
{
    ut_second_t s = {NULL, NULL, 0};
    size_t first_rx = 0, len;
    char dev[UCT_DEVICE_NAME_MAX];
    uct_iov_t iov;
    ut_comp_t comp;
    ut_buf_t buf;
    ucs_status_t st;
    uint64_t v = 1;
    int ret;

    if (strcmp(t->tl, "ud_zcopy")) {
        return PAIR_SKIP;   /* ud_zcopy's promise (the built-ins' fences are per iface) */
    }
    if (uct_iface_set_am_handler(t->iface, IFACES_AM_ID, ifaces_am_handler, &first_rx, 0) !=
        UCS_OK) {
        return PAIR_FAIL;
    }
    ret = open_second(t, &s, dev, sizeof(dev));
    if (ret != 0) {
        close_second(&s);
        if (ret == PAIR_SKIP) {
            pair_log(t->pair, "skip: no second %s device on one side", t->tl);
        }
        return ret;
    }
    if (t->pair->role == PAIR_TARGET) {
        /* serve the gets and ack the messages until the initiator is done */
        ret = pair_expect(t->pair, "done") ? PAIR_PASS : PAIR_FAIL;
        if ((ret == PAIR_PASS) && ((first_rx < 1) || (s.received < 2))) {
            pair_log(t->pair, "received %zu / %zu messages on the two ifaces, not 1 / 2",
                     first_rx, s.received);
            ret = PAIR_FAIL;
        }
        close_second(&s);
        return ret;
    }

    len = ut_min(ut_min(t->peer_len, t->attr.cap.get.max_zcopy), 1u << 20);
    if ((len < t->attr.cap.get.min_zcopy) || (ut_buf_alloc(t, &buf, len) != 0)) {
        close_second(&s);
        return PAIR_FAIL;
    }
    ret = PAIR_FAIL;
    /* 1: a get in flight on the first iface */
    iov = (uct_iov_t){.buffer = buf.addr, .length = len, .memh = buf.memh, .count = 1};
    ut_comp_init(&comp);
    st = uct_ep_get_zcopy(t->ep, &iov, 1, t->peer_addr, t->peer_rkey.rkey, &comp.uct);
    if (st != UCS_INPROGRESS) {
        pair_log(t->pair, "a get of %zu bytes returned %s, not in progress", len,
                 ucs_status_string(st));
        goto out;
    }
    fence_both(t, &s);
    if (after_fence(t, &s, "a get", &comp) != 0) {
        goto out;
    }
    /* 2: an active message of the first iface not yet acked */
    st = UT_RETRY(t, uct_ep_am_short(t->ep, IFACES_AM_ID, 0, &v, sizeof(v)));
    if (st != UCS_OK) {
        pair_log(t->pair, "am_short on the first iface: %s", ucs_status_string(st));
        goto out;
    }
    fence_both(t, &s);
    if ((after_fence(t, &s, "an active message", NULL) != 0) || (ut_flush(t, NULL) != UCS_OK)) {
        goto out;
    }
    pair_log(t->pair, "a fence held the %s iface's message for a get of %zu bytes and for "
             "an unacked message of the %s iface", dev, len, t->dev);
    ret = PAIR_PASS;
out:
    while (uct_iface_flush(s.iface, 0, NULL) == UCS_INPROGRESS) {
        ut_progress(t);
    }
    if (pair_sendf(t->pair, "done") != 0) {
        ret = PAIR_FAIL;
    }
    ut_buf_free(t, &buf);
    close_second(&s);
    return ret;
}
