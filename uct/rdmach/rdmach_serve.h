/*
 * rdmach's served requests, the plain-C core: the records a requester puts into a target's
 * ring to have the target's progress run an atomic, or a small put or get, on memory the
 * requester cannot map (an application's malloc: MPI_Win_create windows), and the reply the
 * target writes back into the requester's reply slot. No UCX headers: the glue
 * (rdmach_amo_cpu.c, rdmach_serve_rma.c) maps memory and replies; this file decides what a
 * record may do, and is unit-tested (tests/unit/rdmach_serve_test.cc) and fuzzed
 * (tests/fuzz/rdmach_serve_fuzz.cc) on its own.
 *
 * A record is written by a peer, so nothing in it is trusted:
 *  - where the reply goes: the process is the one the wire established as the ring's sender
 *    (the shm wire's ring owner, whose segment it mapped at activate), never a pid from the
 *    record. The record names only the requester's own reply segment inside that process
 *    (its memfd, inode and address), which the target maps through /proc/<sender>/fd with the
 *    inode checked, or reaches with process_vm_writev on the sender: a lying requester can
 *    only write into itself. A wire whose peers are on other hosts serves nothing, and its
 *    served records are dropped and counted (rdmach_wire.h, ring_sender).
 *  - what the request touches: the record names the registration the requester's key
 *    describes; the target serves only if that is exactly one of its own registrations and
 *    the bytes lie inside it, checked without overflow (ucx_ext_range_within).
 *  - the reply slot is below RDMACH_SERVE_POOL, so a reply stays inside the segment.
 * A malformed record (nowhere to reply, a bad token or length) is dropped and counted; a
 * well-formed one on memory the target does not hold is refused (the requester learns).
 */
#ifndef RDMACH_SERVE_H
#define RDMACH_SERVE_H

#include "ucx_ext_sys.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Requests in flight per iface, and so reply slots in its reply segment. */
#define RDMACH_SERVE_POOL        256
/* The largest served put or get: its bytes travel in the reply slot. */
#define RDMACH_SERVE_RMA_MAX     8192
/* A reply slot: the old value, the token word, then a served put's or get's bytes. */
#define RDMACH_SERVE_SLOT_WORDS  (2 + RDMACH_SERVE_RMA_MAX / 8)
#define RDMACH_SERVE_REPLY_BYTES ((uint64_t)RDMACH_SERVE_POOL * RDMACH_SERVE_SLOT_WORDS * 8)

/* The token word of a reply slot. A token is below RDMACH_SERVE_OPEN; the word holds
 * token | OPEN while a served put or get may still be claimed, token | CLAIMED once its
 * target took it, token (| REFUSED) when it is done, and 0 for an atomic in flight or a
 * request its requester took back (rdmach_serve_rma.c). */
#define RDMACH_SERVE_REFUSED (1ull << 63)   /* nothing was done */
#define RDMACH_SERVE_CLAIMED (1ull << 62)
#define RDMACH_SERVE_OPEN    (1ull << 61)
#define RDMACH_SERVE_TOKENS  (RDMACH_SERVE_OPEN - 1)

/* Atomic operations, numbered as UCT's uct_atomic_op_t (the glue checks it at build time). */
enum {
    RDMACH_SERVE_OP_ADD, RDMACH_SERVE_OP_AND, RDMACH_SERVE_OP_OR, RDMACH_SERVE_OP_XOR,
    RDMACH_SERVE_OP_SWAP, RDMACH_SERVE_OP_CSWAP
};

/* The requester's reply segment, as it lies in the requester (the sender of the ring). */
typedef struct rdmach_serve_replies {
    int32_t  fd;         /* its memfd there */
    uint32_t reserved;   /* 0 */
    uint64_t ino;        /* the memfd's inode: a reused fd number never maps other memory */
    uint64_t base;       /* its address there; RDMACH_SERVE_REPLY_BYTES long */
} rdmach_serve_replies_t;

/* The registration a requester's key names: the target serves only inside one of its own. */
typedef struct rdmach_serve_reg {
    uint64_t address;
    uint64_t length;
} rdmach_serve_reg_t;

/* A served atomic's record. */
typedef struct rdmach_serve_amo_rec {
    uint64_t               address;
    uint64_t               value;
    uint64_t               compare;   /* CSWAP */
    uint64_t               token;
    rdmach_serve_reg_t     reg;
    rdmach_serve_replies_t replies;
    uint32_t               slot;      /* the request's reply slot */
    uint8_t                op;        /* RDMACH_SERVE_OP_* */
    uint8_t                bits;      /* 32 or 64 */
    uint8_t                reserved[2];
} rdmach_serve_amo_rec_t;

/* A served put's or get's record (a put's bytes are in the reply slot). */
typedef struct rdmach_serve_rma_rec {
    uint64_t               address;
    uint64_t               token;
    rdmach_serve_reg_t     reg;
    rdmach_serve_replies_t replies;
    uint32_t               slot;
    uint32_t               length;    /* 1..RDMACH_SERVE_RMA_MAX */
    uint8_t                write;     /* 1: a put, 0: a get */
    uint8_t                reserved[7];
} rdmach_serve_rma_rec_t;

/* What the target does with a record. */
typedef enum {
    RDMACH_SERVE_DROP,     /* malformed: nothing replies; counted */
    RDMACH_SERVE_REFUSE,   /* well formed, not allowed here: the reply says refused */
    RDMACH_SERVE_DO        /* serve it */
} rdmach_serve_verdict_t;

/* What the target knows: 1 if [address, address + length) is exactly one of its own
 * registrations (the registration a key of it describes). */
typedef int (*rdmach_serve_registered_cb_t)(void *arg, uint64_t address, uint64_t length);

/* The byte offset of word 'word' of reply slot 'slot' in a reply segment (slot below
 * RDMACH_SERVE_POOL, word below RDMACH_SERVE_SLOT_WORDS). */
static inline uint64_t rdmach_serve_reply_offset(uint32_t slot, uint32_t word)
{
    return ((uint64_t)slot * RDMACH_SERVE_SLOT_WORDS + word) * sizeof(uint64_t);
}

/* A served atomic's record, length bytes at data: DROP when it is malformed or names no
 * reply slot of the requester (*rec is then unset), else the record in *rec and REFUSE or DO
 * by rdmach_serve_amo_allowed. */
rdmach_serve_verdict_t rdmach_serve_amo_decode(const void *data, uint32_t length,
                                               rdmach_serve_registered_cb_t registered,
                                               void *arg, rdmach_serve_amo_rec_t *rec);

/* A decoded atomic: DO if its operation and size are ones we serve, the word is aligned,
 * and it lies inside the registration it names, which is one of ours; else REFUSE. */
rdmach_serve_verdict_t rdmach_serve_amo_allowed(const rdmach_serve_amo_rec_t *rec,
                                                rdmach_serve_registered_cb_t registered,
                                                void *arg);

/* A served put's or get's record: DROP when it is malformed (*rec is then unset), else DO
 * with the record in *rec (its memory is judged by rdmach_serve_rma_allowed, once the target
 * has claimed the request). */
rdmach_serve_verdict_t rdmach_serve_rma_decode(const void *data, uint32_t length,
                                               rdmach_serve_rma_rec_t *rec);

/* A decoded put or get: DO if its bytes lie inside the registration it names, which is one
 * of ours; else REFUSE. */
rdmach_serve_verdict_t rdmach_serve_rma_allowed(const rdmach_serve_rma_rec_t *rec,
                                                rdmach_serve_registered_cb_t registered,
                                                void *arg);

/* Runs atomic op on the 32- or 64-bit word at ptr as one locked instruction (the same
 * physical word that peers who map it reach with their own): returns the word before. */
uint64_t rdmach_serve_amo_apply(void *ptr, unsigned op, unsigned bits, uint64_t value,
                                uint64_t compare);

#ifdef __cplusplus
}
#endif

#endif
