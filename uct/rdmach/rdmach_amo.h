/*
 * rdmach atomics in flight: the request both kinds share (rdmach_amo.c: the device's, a
 * step at a time; rdmach_amo_cpu.c: one the target serves, on memory we cannot map), and
 * the small puts and gets a target serves (rdmach_serve_rma.c) from the same pool.
 */
#ifndef RDMACH_AMO_H
#define RDMACH_AMO_H

#include "rdmach_uct.h"

#include <uct/api/uct.h>

#define UCT_RDMACH_AMO_POOL RDMACH_SERVE_POOL   /* atomics in flight per iface (the wire
                                                * holds 64 of them) */

/* A reply slot, and its token word (rdmach_serve.h). */
#define UCT_RDMACH_SERVE_SLOT_WORDS RDMACH_SERVE_SLOT_WORDS
#define UCT_RDMACH_SERVE_REFUSED    RDMACH_SERVE_REFUSED
#define UCT_RDMACH_SERVE_CLAIMED    RDMACH_SERVE_CLAIMED
#define UCT_RDMACH_SERVE_OPEN       RDMACH_SERVE_OPEN
#define UCT_RDMACH_SERVE_TOKENS     RDMACH_SERVE_TOKENS

/* What a request of the pool carries out. */
enum { UCT_RDMACH_AMO_ATOMIC = 0, UCT_RDMACH_AMO_PUT = 1, UCT_RDMACH_AMO_GET = 2 };

#define UCT_RDMACH_AMO_OPS \
    (UCS_BIT(UCT_ATOMIC_OP_ADD) | UCS_BIT(UCT_ATOMIC_OP_AND) | UCS_BIT(UCT_ATOMIC_OP_OR) | \
     UCS_BIT(UCT_ATOMIC_OP_XOR))
#define UCT_RDMACH_AMO_FOPS \
    (UCT_RDMACH_AMO_OPS | UCS_BIT(UCT_ATOMIC_OP_SWAP) | UCS_BIT(UCT_ATOMIC_OP_CSWAP))

struct uct_rdmach_amo {
    uct_completion_t  comp;       /* each step's, from the wire */
    ucs_queue_elem_t  stalled;    /* in amo_stalled (device), or amo_served (served) */
    uct_rdmach_amo_t  *next_free;
    uct_rdmach_ep_t   *ep;
    uct_completion_t  *user_comp;
    void              *result;    /* uint32_t* or uint64_t*; NULL for a posted op */
    uint64_t          word;       /* remote address of the 8-byte word (served: the operand) */
    rdmach_serve_reg_t reg;       /* served: the registration the key names */
    uint32_t          rkey;
    uint8_t           op;         /* UCT_ATOMIC_OP_* */
    uint8_t           bits;       /* 32 or 64 */
    uint8_t           shift;      /* of a 32-bit operand in its word */
    uint8_t           direct;     /* one device atomic does it all */
    uint8_t           kind;       /* UCT_RDMACH_AMO_ATOMIC, _PUT or _GET */
    uint32_t          length;     /* a served put's or get's bytes */
    uct_unpack_callback_t unpack_cb;   /* a served get's */
    void              *unpack_arg;
    uint64_t          value;      /* operand; swap for CSWAP */
    uint64_t          compare;    /* CSWAP */
    uint64_t          fetched;    /* the word before the last step (the wire's result) */
    uint64_t          expect;     /* what the last compare-and-swap expected; reading: none */
    int               reading;
    /* served: the target writes the old value (or a get's bytes at reply + 2), then the
     * token, into the request's slot of the iface's reply segment (mapped by targets,
     * rdmach_amo_cpu.c) */
    volatile uint64_t *reply;
    uint64_t          token;
    ucs_time_t        sent;
};

/* A request from the iface's pool (amo_free must not be NULL) for ep; ep and iface count it
 * in flight until uct_rdmach_amo_release. */
uct_rdmach_amo_t *uct_rdmach_amo_take(uct_rdmach_iface_t *iface, uct_rdmach_ep_t *ep,
                                      unsigned kind, uct_completion_t *comp, void *result);

/* ---- served puts and gets (rdmach_serve_rma.c) ---- */

/* How long a served put or get may wait for its target to claim it: then its requester
 * takes it back and does it itself, and goes the one-sided way for a while. */
#define UCT_RDMACH_SERVE_RMA_WAIT_US   20
#define UCT_RDMACH_SERVE_RMA_PAUSE_MS  1

/* req is done: t is its token word from the target, or 0 when we took it back and do it
 * ourselves (through the wire, one-sided). */
void uct_rdmach_serve_rma_done(uct_rdmach_amo_t *req, uint64_t t);
/* req has waited too long: 1 if we took it back from its target (no target will serve
 * it now), 0 if its target has claimed it (its reply follows). */
int uct_rdmach_serve_rma_revoke(uct_rdmach_amo_t *req);
/* The ep of req goes away: req ends as canceled. */
void uct_rdmach_serve_rma_cancel(uct_rdmach_amo_t *req);
/* The next token of a served request (never 0: a token word of 0 is no reply). */
static UCS_F_ALWAYS_INLINE uint64_t uct_rdmach_serve_token(uct_rdmach_iface_t *iface)
{
    uint64_t token;

    do {
        token = ++iface->amo_token & UCT_RDMACH_SERVE_TOKENS;
    } while (token == 0);
    return token;
}

/* What a record names of the requester's reply segment (rdmach_serve.h): ours. */
void uct_rdmach_serve_replies_of(const uct_rdmach_iface_t *iface,
                                 rdmach_serve_replies_t *replies);
/* The reply segment of a record whose ring's sender is process sender, mapped here
 * (rdmach_amo_cpu.c), or NULL: reached by process_vm on sender. */
uint64_t *uct_rdmach_amo_replies(uct_rdmach_iface_t *iface, int32_t sender,
                                 const rdmach_serve_replies_t *replies);
/* Writes words [word, word + count) of reply slot slot into the reply segment of
 * process sender, through the kernel (a requester that cannot be mapped here). */
int uct_rdmach_serve_reply_vm(int32_t sender, const rdmach_serve_replies_t *replies,
                              uint32_t slot, uint32_t word, const uint64_t *values,
                              uint32_t count);

#endif
