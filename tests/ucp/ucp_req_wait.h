/*
 * Waits for the request of a UCP nbx call by progressing the worker: the one wait that the
 * two-process test programs without a node_t (ucp_churn, tests/fault's udz_victim) share.
 */
#ifndef TESTS_UCP_REQ_WAIT_H
#define TESTS_UCP_REQ_WAIT_H

#include <ucp/api/ucp.h>

/* The request's status, freed once complete (NULL: done at once; an error pointer: its
 * status). */
static inline ucs_status_t wait_req(ucp_worker_h w, ucs_status_ptr_t req)
{
    ucs_status_t st;

    if (req == NULL) {
        return UCS_OK;
    }
    if (UCS_PTR_IS_ERR(req)) {
        return UCS_PTR_STATUS(req);
    }
    do {
        ucp_worker_progress(w);
        st = ucp_request_check_status(req);
    } while (st == UCS_INPROGRESS);
    ucp_request_free(req);
    return st;
}

#endif
