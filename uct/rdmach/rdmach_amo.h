/*
 * rdmach atomics in flight: the request both kinds share (rdmach_amo.c: the device's, a
 * step at a time; rdmach_amo_cpu.c: one the target serves, on memory we cannot map).
 */
#ifndef RDMACH_AMO_H
#define RDMACH_AMO_H

#include "rdmach_uct.h"

#include <uct/api/uct.h>

#define UCT_RDMACH_AMO_POOL 256   /* atomics in flight per iface (the wire holds 64 of them) */

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
    uint32_t          rkey;
    uint8_t           op;         /* UCT_ATOMIC_OP_* */
    uint8_t           bits;       /* 32 or 64 */
    uint8_t           shift;      /* of a 32-bit operand in its word */
    uint8_t           direct;     /* one device atomic does it all */
    uint64_t          value;      /* operand; swap for CSWAP */
    uint64_t          compare;    /* CSWAP */
    uint64_t          fetched;    /* the word before the last step (the wire's result) */
    uint64_t          expect;     /* what the last compare-and-swap expected; reading: none */
    int               reading;
    /* served: the target writes the old value, then the token, into reply[0..1], a slot
     * of the iface's reply segment (mapped by targets, rdmach_amo_cpu.c) */
    volatile uint64_t *reply;
    uint64_t          token;
    ucs_time_t        sent;
};

#endif
