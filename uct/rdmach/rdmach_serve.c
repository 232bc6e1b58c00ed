/*
 * rdmach's served requests: decoding and checking the records a peer wrote (rdmach_serve.h
 * says what is trusted and what is not), and the CPU atomics a served atomic runs.
 */
#include "rdmach_serve.h"

#include <string.h>

/* Wire formats: naturally aligned, no padding, the same on both ends of a ring. */
_Static_assert(sizeof(rdmach_serve_replies_t) == 24, "reply segment: 24 bytes");
_Static_assert(sizeof(rdmach_serve_amo_rec_t) == 80, "served atomic: 80 bytes");
_Static_assert(sizeof(rdmach_serve_rma_rec_t) == 72, "served put/get: 72 bytes");

/* The requester's reply segment as a record names it: a memfd (a file mapping or a pid is
 * never taken from a record), its inode known, the segment whole below 2^64, and the slot
 * inside it. */
static int rdmach_serve_replies_valid(const rdmach_serve_replies_t *replies, uint32_t slot)
{
    return (replies->fd >= 0) && (replies->reserved == 0) && (replies->ino != 0) &&
           !(replies->base & 7) && (replies->base != 0) &&
           (replies->base <= UINT64_MAX - RDMACH_SERVE_REPLY_BYTES) &&
           (slot < RDMACH_SERVE_POOL);
}

/* The named registration is one of ours, and [address, address + length) lies inside it. */
static int rdmach_serve_inside(const rdmach_serve_reg_t *reg, uint64_t address,
                               uint64_t length, rdmach_serve_registered_cb_t registered,
                               void *arg)
{
    return ucx_ext_range_within(address, length, reg->address, reg->length) &&
           registered(arg, reg->address, reg->length);
}

rdmach_serve_verdict_t rdmach_serve_amo_decode(const void *data, uint32_t length,
                                               rdmach_serve_registered_cb_t registered,
                                               void *arg, rdmach_serve_amo_rec_t *rec)
{
    if (length != sizeof(*rec)) {
        return RDMACH_SERVE_DROP;
    }
    memcpy(rec, data, sizeof(*rec));
    if (!rdmach_serve_replies_valid(&rec->replies, rec->slot) ||
        (rec->token & ~RDMACH_SERVE_TOKENS) || (rec->token == 0) ||
        (rec->reserved[0] | rec->reserved[1])) {
        return RDMACH_SERVE_DROP;
    }
    return rdmach_serve_amo_allowed(rec, registered, arg);
}

rdmach_serve_verdict_t rdmach_serve_amo_allowed(const rdmach_serve_amo_rec_t *rec,
                                                rdmach_serve_registered_cb_t registered,
                                                void *arg)
{
    if (((rec->bits != 32) && (rec->bits != 64)) || (rec->op > RDMACH_SERVE_OP_CSWAP) ||
        (rec->address & (rec->bits / 8 - 1)) ||
        !rdmach_serve_inside(&rec->reg, rec->address, rec->bits / 8, registered, arg)) {
        return RDMACH_SERVE_REFUSE;
    }
    return RDMACH_SERVE_DO;
}

rdmach_serve_verdict_t rdmach_serve_rma_decode(const void *data, uint32_t length,
                                               rdmach_serve_rma_rec_t *rec)
{
    unsigned i;

    if (length != sizeof(*rec)) {
        return RDMACH_SERVE_DROP;
    }
    memcpy(rec, data, sizeof(*rec));
    for (i = 0; i < sizeof(rec->reserved); ++i) {
        if (rec->reserved[i] != 0) {
            return RDMACH_SERVE_DROP;
        }
    }
    if (!rdmach_serve_replies_valid(&rec->replies, rec->slot) || (rec->length == 0) ||
        (rec->length > RDMACH_SERVE_RMA_MAX) || (rec->write > 1) ||
        (rec->token & ~RDMACH_SERVE_TOKENS) || (rec->token == 0)) {
        return RDMACH_SERVE_DROP;
    }
    return RDMACH_SERVE_DO;
}

rdmach_serve_verdict_t rdmach_serve_rma_allowed(const rdmach_serve_rma_rec_t *rec,
                                                rdmach_serve_registered_cb_t registered,
                                                void *arg)
{
    return rdmach_serve_inside(&rec->reg, rec->address, rec->length, registered, arg) ?
           RDMACH_SERVE_DO : RDMACH_SERVE_REFUSE;
}

#define RDMACH_SERVE_AMO_OP(_type, _ptr, _op, _value, _compare) \
    ({ \
        _type *_p = (_type*)(_ptr), _v = (_type)(_value), _c = (_type)(_compare); \
        _type _old; \
        switch (_op) { \
        case RDMACH_SERVE_OP_ADD:  _old = __atomic_fetch_add(_p, _v, __ATOMIC_SEQ_CST); break; \
        case RDMACH_SERVE_OP_AND:  _old = __atomic_fetch_and(_p, _v, __ATOMIC_SEQ_CST); break; \
        case RDMACH_SERVE_OP_OR:   _old = __atomic_fetch_or(_p, _v, __ATOMIC_SEQ_CST); break; \
        case RDMACH_SERVE_OP_XOR:  _old = __atomic_fetch_xor(_p, _v, __ATOMIC_SEQ_CST); break; \
        case RDMACH_SERVE_OP_SWAP: _old = __atomic_exchange_n(_p, _v, __ATOMIC_SEQ_CST); break; \
        default: /* CSWAP: the word as it was, swapped or not */ \
            _old = _c; \
            __atomic_compare_exchange_n(_p, &_old, _v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); \
            break; \
        } \
        (uint64_t)_old; \
    })

uint64_t rdmach_serve_amo_apply(void *ptr, unsigned op, unsigned bits, uint64_t value,
                                uint64_t compare)
{
    return (bits == 64) ? RDMACH_SERVE_AMO_OP(uint64_t, ptr, op, value, compare) :
                          RDMACH_SERVE_AMO_OP(uint32_t, ptr, op, value, compare);
}
