/*
 * rdmach atomics: the device's on a wire whose device has them (RC verbs), below; on shared
 * memory CPU atomics (rdmach_amo_cpu.c), which share the request pool (rdmach_amo_pool.c) and
 * this file's entry. The progress of requests a target serves (atomics, puts and gets, with
 * rdmach_serve_rma.c) is here too, above both kinds.
 *
 * UCP 1.13.1 selects device atomics only from a transport that offers the whole op set for
 * each size the application asked for (ucp_worker_init_device_atomics: ADD, AND, OR, XOR, and
 * fetching also SWAP and CSWAP; MPICH and Open MPI ask for 32 and 64 bits). InfiniBand, and
 * rxe, have two: 64-bit fetch-and-add and compare-and-swap. The rest is built from them:
 *  - 64-bit add (posted or fetching) and compare-and-swap: one device atomic each, and so is
 *    a 32-bit add on the upper half of its word (added shifted, the carry leaves the word);
 *  - 64-bit and/or/xor/swap, and every 32-bit op (on the aligned 8-byte word that holds the
 *    operand): a compare-and-swap loop. The word is read by a device fetch-and-add of 0, the
 *    new word computed, and swapped in if the word still holds what was read; if another
 *    writer changed it meanwhile, the swap returns the new contents and the loop goes again
 *    from there.
 * A loop's first step is a read unless the iface has seen the word lately (its last value
 * from an earlier step): then it tries the compare-and-swap against that value at once, one
 * round trip when the guess holds (a counter that one origin bumps), and no more than the
 * read would cost when it does not, since the failed swap returns the word.
 * Every step is a device atomic on the target's memory, so these ops are atomic against each
 * other and the device's own from every peer, which is what UCP's device atomic mode promises
 * (as on any HCA, not against the target CPU's plain stores). The other half of a 32-bit
 * operand's word is compared too, so a put there between read and swap costs one more round
 * and is never lost. The md registers regions widened to 8-byte boundaries so that the word
 * of a 32-bit operand at a region's edge is always inside it.
 *
 * An operation in flight is a request from the iface's fixed pool, driven by the wire's
 * completions (no allocation, no waiting). A step the wire cannot take now (-EAGAIN) waits in
 * the iface's stalled queue for the next progress. While its atomics are in flight an ep
 * answers flush with NO_RESOURCE (UCP queues the flush as pending and the ep dispatches it
 * once they are done), because a loop's next step is posted after any flush WRITE would be.
 */
#include "rdmach_amo.h"

static void uct_rdmach_amo_step_done(uct_completion_t *self);

#define UCT_RDMACH_AMO_SEEN(_iface, _word) \
    (&(_iface)->amo_seen[((_word) >> 3) % ucs_static_array_size((_iface)->amo_seen)])

/* The word's value after a step that returned fetched, as far as this iface knows. */
static void uct_rdmach_amo_saw(uct_rdmach_amo_t *req, uint64_t value)
{
    uct_rdmach_iface_t *iface = ucs_derived_of(req->ep->super.super.super.iface,
                                               uct_rdmach_iface_t);

    UCT_RDMACH_AMO_SEEN(iface, req->word)->word  = req->word;
    UCT_RDMACH_AMO_SEEN(iface, req->word)->value = value;
}

ucs_status_t uct_rdmach_amo_init(uct_rdmach_iface_t *iface)
{
    unsigned i;

    ucs_queue_head_init(&iface->amo_stalled);
    ucs_queue_head_init(&iface->amo_served);
    memset(iface->amo_seen, 0xff, sizeof(iface->amo_seen));   /* no word is at ~0 */
    iface->amo_inflight = 0;
    iface->amo_free = NULL;
    iface->amo_pool = NULL;
    /* a wire without device atomics that reaches memory on this host: CPU atomics */
    iface->amo_cpu  = (iface->wire->ops->atomic64 == NULL) && iface->wire->ops->caps.this_host;
    if (!iface->amo_cpu && ((iface->wire->ops->atomic64 == NULL) || !iface->wire->atomics)) {
        return UCS_OK;
    }
    iface->amo_pool = ucs_calloc(UCT_RDMACH_AMO_POOL, sizeof(*iface->amo_pool), "rdmach amo");
    if (iface->amo_pool == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    for (i = 0; i < UCT_RDMACH_AMO_POOL; ++i) {
        iface->amo_pool[i].next_free = iface->amo_free;
        iface->amo_free              = &iface->amo_pool[i];
    }
    return iface->amo_cpu ? uct_rdmach_amo_serve_init(iface) : UCS_OK;
}

void uct_rdmach_amo_cleanup(uct_rdmach_iface_t *iface)
{
    if (iface->amo_cpu && (iface->amo_pool != NULL)) {
        uct_rdmach_amo_serve_cleanup(iface);
    }
    ucs_free(iface->amo_pool);
}

void uct_rdmach_amo_query(uct_rdmach_iface_t *iface, uct_iface_attr_t *attr)
{
    if (iface->amo_pool == NULL) {
        return;
    }
    attr->cap.flags              |= iface->amo_cpu ? UCT_IFACE_FLAG_ATOMIC_CPU :
                                                     UCT_IFACE_FLAG_ATOMIC_DEVICE;
    attr->cap.atomic32.op_flags   = UCT_RDMACH_AMO_OPS;
    attr->cap.atomic32.fop_flags  = UCT_RDMACH_AMO_FOPS;
    attr->cap.atomic64.op_flags   = UCT_RDMACH_AMO_OPS;
    attr->cap.atomic64.fop_flags  = UCT_RDMACH_AMO_FOPS;
}

/* The operand's bits of a word, and a word with them replaced. */
static UCS_F_ALWAYS_INLINE uint64_t uct_rdmach_amo_get(const uct_rdmach_amo_t *req,
                                                       uint64_t word)
{
    return (req->bits == 64) ? word : (uint32_t)(word >> req->shift);
}

static UCS_F_ALWAYS_INLINE uint64_t uct_rdmach_amo_set(const uct_rdmach_amo_t *req,
                                                       uint64_t word, uint64_t v)
{
    uint64_t mask;

    if (req->bits == 64) {
        return v;
    }
    mask = (uint64_t)UINT32_MAX << req->shift;
    return (word & ~mask) | (((uint64_t)(uint32_t)v << req->shift) & mask);
}

static uint64_t uct_rdmach_amo_apply(const uct_rdmach_amo_t *req, uint64_t old)
{
    switch (req->op) {
    case UCT_ATOMIC_OP_ADD:   return old + req->value;
    case UCT_ATOMIC_OP_AND:   return old & req->value;
    case UCT_ATOMIC_OP_OR:    return old | req->value;
    case UCT_ATOMIC_OP_XOR:   return old ^ req->value;
    case UCT_ATOMIC_OP_SWAP:  return req->value;
    case UCT_ATOMIC_OP_CSWAP: return (old == req->compare) ? req->value : old;
    default:                  return old;
    }
}

/* Posts the request's next device atomic: the direct one, the read (fetch-and-add 0), or the
 * compare-and-swap of fetched to its new value. */
static int uct_rdmach_amo_post(uct_rdmach_amo_t *req)
{
    uct_rdmach_iface_t *iface = ucs_derived_of(req->ep->super.super.super.iface,
                                               uct_rdmach_iface_t);
    rdmach_wire_t *wire       = iface->wire;
    int cswap;
    uint64_t a, b;

    if (req->direct) {
        cswap = (req->op == UCT_ATOMIC_OP_CSWAP);
        a     = cswap ? req->compare : (req->value << req->shift);
        b     = req->value;
    } else if (req->reading) {
        cswap = 0;
        a     = 0;
        b     = 0;
    } else {
        cswap = 1;
        a     = req->expect;
        b     = uct_rdmach_amo_set(req, req->expect,
                                   uct_rdmach_amo_apply(req, uct_rdmach_amo_get(req,
                                                                                req->expect)));
    }
    req->comp.func   = uct_rdmach_amo_step_done;
    req->comp.count  = 1;
    req->comp.status = UCS_OK;
    return wire->ops->atomic64(wire, req->ep->peer, req->word, req->rkey, cswap, a, b,
                               &req->fetched, &req->comp);
}

/* A step posted from a completion: -EAGAIN waits for the next progress. */
static void uct_rdmach_amo_continue(uct_rdmach_amo_t *req)
{
    uct_rdmach_iface_t *iface = ucs_derived_of(req->ep->super.super.super.iface,
                                               uct_rdmach_iface_t);
    int ret                   = uct_rdmach_amo_post(req);

    if (ret == RDMACH_WIRE_INPROGRESS) {
        return;
    } else if (ret == -EAGAIN) {
        ucs_queue_push(&iface->amo_stalled, &req->stalled);
        return;
    }
    uct_rdmach_amo_finish(req, 0, uct_rdmach_wire_status(ret, UCS_ERR_ENDPOINT_TIMEOUT));
}

static void uct_rdmach_amo_step_done(uct_completion_t *self)
{
    uct_rdmach_amo_t *req = ucs_container_of(self, uct_rdmach_amo_t, comp);
    uint64_t cur, old, new;

    if (self->status != UCS_OK) {
        uct_rdmach_amo_finish(req, 0, self->status);
        return;
    }
    cur = req->fetched;   /* the word before this step */
    old = uct_rdmach_amo_get(req, cur);
    new = uct_rdmach_amo_set(req, cur, uct_rdmach_amo_apply(req, old));
    if (req->direct || (!req->reading && (cur == req->expect))) {
        uct_rdmach_amo_saw(req, new);                 /* done: it holds new now */
        uct_rdmach_amo_finish(req, old, UCS_OK);
        return;
    }
    /* the word as it is now (read, or what foiled the swap): again from there */
    uct_rdmach_amo_saw(req, cur);
    if (new == cur) {
        uct_rdmach_amo_finish(req, old, UCS_OK);   /* nothing to write: the read was atomic */
        return;
    }
    req->reading = 0;
    req->expect  = cur;
    uct_rdmach_amo_continue(req);
}

unsigned uct_rdmach_amo_progress(uct_rdmach_iface_t *iface)
{
    unsigned count = 0;
    uct_rdmach_amo_t *req;

    while (!ucs_queue_is_empty(&iface->amo_stalled)) {
        req = ucs_queue_head_elem_non_empty(&iface->amo_stalled, uct_rdmach_amo_t, stalled);
        if (uct_rdmach_amo_post(req) == -EAGAIN) {
            break;
        }
        ucs_queue_pull_non_empty(&iface->amo_stalled);
        ++count;
    }
    return count;
}

/* Served atomics, puts and gets whose reply came; a put or get the target has not claimed
 * in time is taken back (rdmach_serve_rma.c); a target silent for a second is checked for
 * life. */
unsigned uct_rdmach_amo_served_progress(uct_rdmach_iface_t *iface)
{
    unsigned count = 0;
    ucs_queue_iter_t iter;
    uct_rdmach_amo_t *req;
    ucs_time_t now   = ucs_get_time();
    uint64_t token;

again:
    ucs_queue_for_each_safe(req, iter, &iface->amo_served, stalled) {
        token = __atomic_load_n(&req->reply[1], __ATOMIC_ACQUIRE);
        if ((token & ~UCT_RDMACH_SERVE_REFUSED) == req->token) {
            req->ep->serve_seen = now;
            ucs_queue_del_iter(&iface->amo_served, iter);
            if (req->kind != UCT_RDMACH_AMO_ATOMIC) {
                uct_rdmach_serve_rma_done(req, token);
            } else {
                uct_rdmach_amo_finish(req, req->reply[0], (token & UCT_RDMACH_SERVE_REFUSED) ?
                                                          UCS_ERR_INVALID_ADDR : UCS_OK);
            }
            ++count;
            goto again;   /* the completion may have queued more */
        }
        if ((req->kind != UCT_RDMACH_AMO_ATOMIC) && (token & UCT_RDMACH_SERVE_OPEN)) {
            /* timed from its sending or the target's last answer on its ep, whichever
             * came later: a target that serves a queue of them in order is serving (signed:
             * a request sent by a completion of this call is younger than now) */
            if (((int64_t)(now - ucs_max(req->sent, req->ep->serve_seen)) >
                 (int64_t)ucs_time_from_usec(UCT_RDMACH_SERVE_RMA_WAIT_US)) &&
                uct_rdmach_serve_rma_revoke(req)) {
                ucs_queue_del_iter(&iface->amo_served, iter);
                uct_rdmach_serve_rma_done(req, 0);   /* ourselves, the one-sided way */
                ++count;
                goto again;
            }
        }
        if (ucs_unlikely((int64_t)(now - req->sent) > (int64_t)ucs_time_from_sec(1.0))) {
            req->sent = now;
            if (!ucx_ext_ep_peer_alive(&req->ep->super)) {
                ucs_queue_del_iter(&iface->amo_served, iter);
                uct_rdmach_amo_finish(req, 0, UCS_ERR_ENDPOINT_TIMEOUT);
                ++count;
                goto again;
            }
        }
    }
    return count;
}

/* The ep goes away: its stalled steps, served atomics, puts and gets end as canceled (those
 * in the wire end through it). */
void uct_rdmach_amo_ep_cleanup(uct_rdmach_ep_t *ep)
{
    uct_rdmach_iface_t *iface = ucs_derived_of(ep->super.super.super.iface, uct_rdmach_iface_t);
    ucs_queue_iter_t iter;
    uct_rdmach_amo_t *req;

    ucs_queue_head_t *queues[] = {&iface->amo_stalled, &iface->amo_served};
    unsigned i;

    /* a served atomic's target may still reply into the request: its token no longer
     * matches the one of the request's next use */
    for (i = 0; i < ucs_static_array_size(queues); ++i) {
        ucs_queue_for_each_safe(req, iter, queues[i], stalled) {
            if (req->ep != ep) {
                continue;
            }
            ucs_queue_del_iter(queues[i], iter);
            if (req->kind != UCT_RDMACH_AMO_ATOMIC) {
                uct_rdmach_serve_rma_cancel(req);   /* rdmach_serve_rma.c */
            } else {
                uct_rdmach_amo_finish(req, 0, UCS_ERR_CANCELED);
            }
        }
    }
}

static ucs_status_t uct_rdmach_amo_start(uct_ep_h tl_ep, unsigned op, unsigned bits,
                                         uint64_t value, uint64_t compare, uint64_t remote_addr,
                                         uct_rkey_t rkey, void *result, uct_completion_t *comp)
{
    uct_rdmach_ep_t *ep       = ucs_derived_of(tl_ep, uct_rdmach_ep_t);
    uct_rdmach_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_rdmach_iface_t);
    uint64_t word             = remote_addr & ~(uint64_t)7;
    const uct_rdmach_rkey_t *key;
    uct_rdmach_amo_t *req;
    uint64_t old;
    void *ptr;
    int ret;

    if (ucs_unlikely(iface->amo_pool == NULL)) {
        return UCS_ERR_UNSUPPORTED;
    }
    if (ucs_unlikely(remote_addr & (bits / 8 - 1))) {
        ucs_error("rdmach: %u-bit atomic at unaligned address 0x%" PRIx64, bits, remote_addr);
        return UCS_ERR_INVALID_PARAM;
    }
    /* CPU atomics check the operand's own bytes (the md widens nothing on shm) */
    key = iface->amo_cpu ? uct_rdmach_ep_key(ep, "atomic", bits / 8, remote_addr, rkey) :
                           uct_rdmach_ep_key(ep, "atomic", sizeof(uint64_t), word, rkey);
    if (key == NULL) {
        return UCS_ERR_INVALID_PARAM;
    }
    if (ucs_unlikely(uct_rdmach_ep_order_atomic(iface, ep))) {
        return ucx_ext_ep_no_resource(&ep->super, 0);   /* after the ep's copies still running */
    }
    if (iface->amo_cpu) {
        ptr = uct_rdmach_ep_mapped(rkey, remote_addr, bits / 8);
        if (ucs_likely(ptr != NULL) && !uct_rdmach_ep_serving(ep, iface)) {
            old = rdmach_serve_amo_apply(ptr, op, bits, value, compare);
            if (result != NULL) {
                if (bits == 64) {
                    *(uint64_t*)result = old;
                } else {
                    *(uint32_t*)result = (uint32_t)old;
                }
            }
            UCT_RDMACH_COUNT(tx_atomic, 1);
            UCT_RDMACH_COUNT_OWN(atomic_cpu);
            return UCS_OK;
        }
        if (uct_rdmach_ep_serving(ep, iface) || ucx_ext_ep_must_queue(&ep->super)) {
            return ucx_ext_ep_no_resource(&ep->super, 0);
        }
    }
    if ((ep->peer == NULL) || (iface->amo_free == NULL) ||
        !ucs_queue_is_empty(&iface->amo_stalled)) {
        return UCS_ERR_NO_RESOURCE;
    }
    req             = uct_rdmach_amo_take(iface, ep, UCT_RDMACH_AMO_ATOMIC, comp, result);
    req->word       = word;
    req->rkey       = key->key;
    req->reg.address = key->address;
    req->reg.length  = key->length;
    req->op         = (uint8_t)op;
    req->bits       = (uint8_t)bits;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    req->shift      = (uint8_t)((remote_addr - word) * 8);
#else
    req->shift      = (uint8_t)((4 - (remote_addr - word)) * 8);
#endif
    req->value      = value;
    req->compare    = compare;
    req->direct     = ((bits == 64) &&
                       ((op == UCT_ATOMIC_OP_ADD) || (op == UCT_ATOMIC_OP_CSWAP))) ||
                      ((op == UCT_ATOMIC_OP_ADD) && (req->shift == 32));
    /* a word seen lately: compare-and-swap against its last value at once */
    req->reading    = !req->direct && (UCT_RDMACH_AMO_SEEN(iface, word)->word != word);
    req->expect     = req->reading ? 0 : UCT_RDMACH_AMO_SEEN(iface, word)->value;
    UCT_RDMACH_COUNT(tx_atomic, 1);

    if (iface->amo_cpu) {
        req->word = remote_addr;
        return uct_rdmach_amo_serve_start(req);
    }
    ret = uct_rdmach_amo_post(req);
    if (ret == RDMACH_WIRE_INPROGRESS) {
        /* a posted op is done as far as the caller goes: flush waits for it */
        return (result == NULL) ? UCS_OK : UCS_INPROGRESS;
    }
    uct_rdmach_amo_release(iface, req);
    return (ret == -EAGAIN) ? UCS_ERR_NO_RESOURCE :
           uct_rdmach_wire_status(ret, UCS_ERR_ENDPOINT_TIMEOUT);
}

ucs_status_t uct_rdmach_ep_atomic64_post(uct_ep_h tl_ep, unsigned opcode, uint64_t value,
                                         uint64_t remote_addr, uct_rkey_t rkey)
{
    return uct_rdmach_amo_start(tl_ep, opcode, 64, value, 0, remote_addr, rkey, NULL, NULL);
}

ucs_status_t uct_rdmach_ep_atomic32_post(uct_ep_h tl_ep, unsigned opcode, uint32_t value,
                                         uint64_t remote_addr, uct_rkey_t rkey)
{
    return uct_rdmach_amo_start(tl_ep, opcode, 32, value, 0, remote_addr, rkey, NULL, NULL);
}

ucs_status_t uct_rdmach_ep_atomic64_fetch(uct_ep_h tl_ep, uct_atomic_op_t opcode,
                                          uint64_t value, uint64_t *result,
                                          uint64_t remote_addr, uct_rkey_t rkey,
                                          uct_completion_t *comp)
{
    return uct_rdmach_amo_start(tl_ep, opcode, 64, value, 0, remote_addr, rkey, result, comp);
}

ucs_status_t uct_rdmach_ep_atomic32_fetch(uct_ep_h tl_ep, uct_atomic_op_t opcode,
                                          uint32_t value, uint32_t *result,
                                          uint64_t remote_addr, uct_rkey_t rkey,
                                          uct_completion_t *comp)
{
    return uct_rdmach_amo_start(tl_ep, opcode, 32, value, 0, remote_addr, rkey, result, comp);
}

ucs_status_t uct_rdmach_ep_atomic_cswap64(uct_ep_h tl_ep, uint64_t compare, uint64_t swap,
                                          uint64_t remote_addr, uct_rkey_t rkey,
                                          uint64_t *result, uct_completion_t *comp)
{
    return uct_rdmach_amo_start(tl_ep, UCT_ATOMIC_OP_CSWAP, 64, swap, compare, remote_addr,
                                rkey, result, comp);
}

ucs_status_t uct_rdmach_ep_atomic_cswap32(uct_ep_h tl_ep, uint32_t compare, uint32_t swap,
                                          uint64_t remote_addr, uct_rkey_t rkey,
                                          uint32_t *result, uct_completion_t *comp)
{
    return uct_rdmach_amo_start(tl_ep, UCT_ATOMIC_OP_CSWAP, 32, swap, compare, remote_addr,
                                rkey, result, comp);
}
