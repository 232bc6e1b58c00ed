/*
 * rdmach's pool of requests in flight: device atomics (rdmach_amo.c), and the atomics, puts
 * and gets a target serves (rdmach_amo_cpu.c, rdmach_serve_rma.c). A fixed pool per iface, no
 * allocation; an ep and its iface count what they have in flight (fences and flush wait for
 * them).
 */
#include "rdmach_amo.h"

uct_rdmach_amo_t *uct_rdmach_amo_take(uct_rdmach_iface_t *iface, uct_rdmach_ep_t *ep,
                                      unsigned kind, uct_completion_t *comp, void *result)
{
    uct_rdmach_amo_t *req = iface->amo_free;

    iface->amo_free = req->next_free;
    req->ep         = ep;
    req->kind       = (uint8_t)kind;
    req->user_comp  = comp;
    req->result     = result;
    ++ep->amo_busy;
    ++iface->amo_inflight;
    return req;
}

/* The request goes back to the pool; its ep and iface have one request less in flight. */
void uct_rdmach_amo_release(uct_rdmach_iface_t *iface, uct_rdmach_amo_t *req)
{
    --req->ep->amo_busy;
    --iface->amo_inflight;
    req->next_free  = iface->amo_free;
    iface->amo_free = req;
}

void uct_rdmach_amo_finish(uct_rdmach_amo_t *req, uint64_t old, ucs_status_t status)
{
    uct_rdmach_iface_t *iface = ucs_derived_of(req->ep->super.super.super.iface,
                                               uct_rdmach_iface_t);
    uct_completion_t *comp    = req->user_comp;

    if ((status == UCS_OK) && (req->result != NULL)) {
        if (req->bits == 64) {
            *(uint64_t*)req->result = old;
        } else {
            *(uint32_t*)req->result = (uint32_t)old;
        }
    }
    uct_rdmach_amo_release(iface, req);
    if (comp != NULL) {
        uct_invoke_completion(comp, status);
    }
}
