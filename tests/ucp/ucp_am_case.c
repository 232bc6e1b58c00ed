/* ucp_ops am case: UCP's active-message API (ucp_am_send_nbx), which the tag cases never reach:
 * short messages with a user header go through uct_ep_am_short_iov, larger ones through
 * bcopy/zcopy (pipelined fragments), and the largest through rendezvous with ucp_am_recv_data_nbx on the target. */
#include "ucp_cases.h"

#include <stdlib.h>
#include <string.h>

#define AM_ID   7
#define AM_SEED 0xa000u

static const size_t am_sizes[] = {0, 1, 8, 100, 4000, 20000, (1u << 20) + 5, (4u << 20) + 5};
#define AM_COUNT (sizeof(am_sizes) / sizeof(am_sizes[0]))

typedef struct {
    up_t    *u;
    unsigned got, good, rndv_pending;
    uint8_t  *rndv_buf;
    size_t   rndv_len;
    uint64_t rndv_seq;
} am_target_t;

static int am_check(am_target_t *t, uint64_t seq, const void *data, size_t len)
{
    ssize_t bad;

    if ((seq >= AM_COUNT) || (len != am_sizes[seq])) {
        pair_log(t->u->pair, "am #%llu: %zu bytes, expected %zu", (unsigned long long)seq, len,
                 (seq < AM_COUNT) ? am_sizes[seq] : 0);
        return 0;
    }
    if ((bad = pair_pattern_check(data, len, AM_SEED + (uint32_t)seq)) >= 0) {
        pair_log(t->u->pair, "am #%llu (%zu bytes): byte %zd differs", (unsigned long long)seq,
                 len, bad);
        return 0;
    }
    return 1;
}

static void am_rndv_done(void *request, ucs_status_t status, size_t length, void *user_data)
{
    am_target_t *t = user_data;

    (void)request;
    t->good += (status == UCS_OK) && am_check(t, t->rndv_seq, t->rndv_buf, length);
    t->rndv_pending = 0;
    ++t->got;
}

static ucs_status_t am_recv(void *arg, const void *header, size_t header_length, void *data,
                            size_t length, const ucp_am_recv_param_t *param)
{
    am_target_t *t = arg;
    uint64_t seq;
    ucp_request_param_t rparam = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.recv_am   = am_rndv_done,
        .user_data    = t,
    };
    ucs_status_ptr_t req;

    if (header_length != sizeof(seq)) {
        pair_log(t->u->pair, "am header of %zu bytes, expected 8", header_length);
        ++t->got;
        return UCS_OK;
    }
    memcpy(&seq, header, sizeof(seq));
    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
        t->good += am_check(t, seq, data, length);
        ++t->got;
        return UCS_OK;
    }
    /* rendezvous: fetch the data into our buffer (the transport's get_zcopy) */
    free(t->rndv_buf);
    t->rndv_buf     = malloc(length ? length : 1);
    t->rndv_len     = length;
    t->rndv_seq     = seq;
    t->rndv_pending = 1;
    req = ucp_am_recv_data_nbx(t->u->worker, data, t->rndv_buf, length, &rparam);
    if (!UCS_PTR_IS_PTR(req)) {
        am_rndv_done(NULL, UCS_PTR_STATUS(req), length, t);
    }
    return UCS_OK;
}

int up_am_case(up_t *u)
{
    ucp_am_handler_param_t hparam;
    am_target_t t = {.u = u};
    uint8_t *bufs[AM_COUNT];
    ucs_status_t status;
    uint64_t seq;
    int ok = 1;

    if (u->pair->role == PAIR_TARGET) {
        hparam.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                            UCP_AM_HANDLER_PARAM_FIELD_ARG;
        hparam.id         = AM_ID;
        hparam.cb         = am_recv;
        hparam.arg        = &t;
        if (ucp_worker_set_am_recv_handler(u->worker, &hparam) != UCS_OK) {
            pair_log(u->pair, "ucp_worker_set_am_recv_handler failed");
            return 0;
        }
    }
    if (pair_sync(u->pair, 1) != 0) {
        return 0;
    }

    if (u->pair->role == PAIR_INITIATOR) {
        for (seq = 0; seq < AM_COUNT; ++seq) {
            ucp_request_param_t param = {.op_attr_mask = 0};
            bufs[seq] = malloc(am_sizes[seq] ? am_sizes[seq] : 1);
            pair_pattern_fill(bufs[seq], am_sizes[seq], AM_SEED + (uint32_t)seq);
            status = up_wait(u, ucp_am_send_nbx(u->ep, AM_ID, &seq, sizeof(seq), bufs[seq],
                                                am_sizes[seq], &param));
            if (status != UCS_OK) {
                pair_log(u->pair, "ucp_am_send_nbx of %zu bytes: %s", am_sizes[seq],
                         ucs_status_string(status));
                ok = 0;
            }
            free(bufs[seq]);
        }
    } else {
        while ((t.got < AM_COUNT) && !up_expired(u)) {
            up_progress(u);
        }
        free(t.rndv_buf);
        if (t.got < AM_COUNT) {
            pair_log(u->pair, "received %u of %zu active messages", t.got, AM_COUNT);
        }
        ok = (t.got == AM_COUNT) && (t.good == AM_COUNT);
    }
    return (pair_sync(u->pair, ok) == 0) && ok;
}
