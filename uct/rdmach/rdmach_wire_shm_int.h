/*
 * rdmach shared-memory wire, inside: what its two files share. rdmach_wire_shm.c has the wire
 * table, the peers and their rings; rdmach_wire_shm_rma.c the RDMA channel's reads and writes
 * (process_vm, the cooperative copies of the desk, staged gets and the choice of them) and
 * their completions.
 */
#ifndef RDMACH_WIRE_SHM_INT_H
#define RDMACH_WIRE_SHM_INT_H

#include "rdmach_wire.h"
#include "rdmach_shm.h"
#include "rdmach_shm_pick.h"

/* The iface address: where a peer finds our segment, and the id that proves it is ours. */
typedef struct rdmach_shm_addr {
    int32_t  pid;
    int32_t  fd;
    uint64_t seg_id;
} __attribute__((packed)) rdmach_shm_addr_t;

/* A peer segment we mapped (for rings we send into, or credit lines we write). */
typedef struct rdmach_shm_peer {
    rdmach_wire_peer_t super;
    rdmach_shm_seg_t   seg;         /* seg.hdr NULL: a free entry */
    int32_t            fd;
    uint64_t           seg_id;
    unsigned long long start_time;  /* of seg.pid, at mapping: tells a reused pid apart */
    unsigned           refs;        /* our ring in it (claim), its rings in us (activate) */
} rdmach_shm_peer_t;

/* Cooperative copies posted with a completion (rdmach_shm_copy.c), advanced from progress,
 * and flushes waiting for them: bits of posted_busy and flush_busy. */
#define RDMACH_SHM_POSTED  16
#define RDMACH_SHM_FLUSHES 16
#define RDMACH_SHM_ALL(_n) ((uint32_t)((1ull << (_n)) - 1))
/* ZCOPY_THRESH and EAGER_LIMIT's auto where the page walk is cheap (rdmach_shm_probe) */
#define RDMACH_SHM_ZCOPY_CHEAP_WALK (32ul * 1024)
/* Destinations of the last zero copies, to tell a buffer copied into again (rdmach_shm_hot) */
#define RDMACH_SHM_RECENT  4

typedef struct rdmach_shm_posted {
    rdmach_shm_copy_req_t req;
    rdmach_shm_peer_t     *peer;    /* holds a reference: its segment stays mapped */
    void                  *comp;
    int                   finished; /* the copy is over (ret), its completion not yet run:
                                     * finished inside rma, which calls no completion */
    int                   ret;
} rdmach_shm_posted_t;

typedef struct rdmach_shm_flush {
    uint32_t waits;     /* posted entries it waits for */
    int      err;       /* the first error among them */
    void     *comp;
} rdmach_shm_flush_t;

typedef struct rdmach_shm_wire {
    rdmach_wire_t     super;
    rdmach_shm_seg_t  seg;          /* own segment: the rings we receive on */
    rdmach_shm_peer_t *peers;       /* [max_peers]: handed out by address, never moved */
    unsigned          npeers, max_peers;
    rdmach_shm_peer_t **rx_peer;    /* [max_rings]: the sender of each ring we activated */
    uint32_t          *free_credits; /* [max_rings]: credit lines given back, a stack */
    uint32_t          nfree_credits;
    uint32_t          posted_busy, flush_busy;
    rdmach_shm_posted_t posted[RDMACH_SHM_POSTED];
    rdmach_shm_flush_t  flushes[RDMACH_SHM_FLUSHES];
    uint64_t          recent[RDMACH_SHM_RECENT];   /* destination addresses, a ring */
    unsigned          recent_next;
    rdmach_shm_pick_t pick;         /* gets that could be staged: staged or not, by periods */
    uint64_t          work;         /* ticks both processes spent on our timed copies */
    double            ns_per_tick;  /* of ucx_ext_ticks, measured at the probe */
    uint64_t          pick_work0;   /* work at the open period's start */
    int               pick_bidir;   /* a peer had copies on our desk during it */
} rdmach_shm_wire_t;

_Static_assert(RDMACH_SHM_STAGE_MAX == RDMACH_WIRE_STAGE_MAX, "STAGED_COPY's range");
_Static_assert(RDMACH_SHM_POSTED <= 32 && RDMACH_SHM_FLUSHES <= 32, "32-bit masks");

#define RDMACH_SHM_LOG(_w, _error, ...) RDMACH_WIRE_LOG(&(_w)->super, _error, __VA_ARGS__)

/* A peer's segment is unmapped with its last ring, either way: memory and descriptors stay
 * bounded however many peers come and go. */
static inline void rdmach_shm_peer_put(rdmach_shm_peer_t *peer)
{
    if (--peer->refs == 0) {
        rdmach_shm_detach(&peer->seg);
    }
}

/* rdmach_wire_shm_rma.c */
rdmach_shm_helper_t rdmach_shm_helper(rdmach_shm_wire_t *w);
int rdmach_shm_rma(rdmach_wire_t *wire, rdmach_wire_peer_t *wire_peer,
                   const rdmach_wire_iov_t *local, size_t cnt, uint64_t remote_addr,
                   uint32_t rkey, size_t len, int write, void *mapped, void *comp);
unsigned rdmach_shm_posted_progress(rdmach_shm_wire_t *w);
int rdmach_shm_flush(rdmach_wire_t *wire, rdmach_wire_peer_t *wire_peer, void *comp);
void rdmach_shm_settle(rdmach_shm_wire_t *w);

#endif
