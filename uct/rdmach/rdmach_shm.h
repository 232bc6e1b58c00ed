/*
 * rdmach shared-memory segment: where the rings live and how peers reach them. Used only by the
 * shared-memory wire (rdmach_wire_shm.c), which puts it behind the wire table (rdmach_wire.h).
 *
 * Each iface owns one segment, a memfd (anonymous shared memory that disappears with its last
 * mapping, so a killed process leaks nothing). Peers map it through /proc/<pid>/fd/<fd>, the way
 * UCX's posix transport does, once per peer at connection time; after that every message is
 * plain stores and loads.
 *
 * Segment layout (page aligned parts):
 *   header       geometry, owner, the ring allocation counter senders bump to claim a ring, and
 *                the copy desk (rdmach_shm_copy_t below)
 *   staging      the desk's staging buffers for staged gets (below): 2 MiB, made resident at
 *                open where gets may go staged (rdmach_shm_stage_prefault), else untouched
 *   free map     one bit per ring its owner has taken back from a sender that has gone (closed
 *                iface, dead process) and zeroed: a new sender claims one by compare-and-swap
 *                once the counter has passed max_rings
 *   doorbells    one byte per ring, set by a sender writing into a cold ring
 *   credits      one cache line per outgoing connection of THIS process: the paper's remote copy
 *                of the tail, written by the receiver at the other end
 *   rings        large_rings x (rdmach_ring_ctl_t + large_nslots * slot_size), then the other
 *                rings x (rdmach_ring_ctl_t + nslots * slot_size), each written by its sender.
 *                Large rings go to the first senders (ring ids are claimed in order): a ring
 *                whose span is well beyond the receiver's private cache makes every record's
 *                lines cheaper to write, since the sender rewrites a line a lap later, after it
 *                has left the receiver's cache (docs/rdmach.md, "rdmach large rings").
 * Pages are touched only when used, so max_rings costs address space, not memory.
 */
#ifndef RDMACH_SHM_H
#define RDMACH_SHM_H

#include "rdmach_ring.h"

#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RDMACH_SHM_MAGIC   0x3130484341444d52ull   /* "RDMACH01" */
#define RDMACH_SHM_VERSION 8

/*
 * Cooperative zero copy (rdmach_shm_copy.c). The RDMA channel moves a large message by one RDMA
 * read; on shared memory that is process_vm_readv, whose cost is the kernel's page walk and
 * pinning rather than memory bandwidth, so one core copies at well under what the memory
 * takes. While the receiver reads, the sender of a rendezvous message is idle in its progress
 * loop, waiting for the ATS. So the reader posts its get (or put) as a job on the desk in the
 * segment of the process whose memory it reads (writes), and both take chunks off it: the
 * reader with process_vm_readv, the owner, from its progress, with process_vm_writev of its
 * own memory into the reader's. An owner that is busy elsewhere never looks: the reader then
 * takes every chunk itself, as before, and waits at most for chunks the owner is copying.
 *
 * A job's claim word is gen << 32 | next chunk; next is RDMACH_SHM_COPY_CLOSED while the
 * reader fills the job in, so an owner that read the fields of an older job cannot claim a
 * chunk of the new one (its compare-and-swap expects the old word). done and given_back are
 * bit masks of chunks: copied, and failed at the owner (the reader copies those itself).
 */
#define RDMACH_SHM_COPY_SLOTS  16
#define RDMACH_SHM_COPY_CHUNKS 64
#define RDMACH_SHM_COPY_CLOSED 0xffffffffu

/*
 * Staged gets (rdmach_shm_copy_post_staged). On a machine where the kernel's page walk costs
 * far more than the copy (this project's 2-core VM: process_vm_readv moves 64 KiB in 6-7 us, a
 * memcpy of it takes 0.6), the owner of a get, idle in its progress, does better to memcpy
 * its own bytes into a staging buffer in its segment, which the reader maps, and the reader to
 * memcpy them out: two copies through shared memory, as the ring does, and no page walk. A
 * staged job's chunks are pieces of RDMACH_SHM_STAGE_PIECE bytes (up to STAGE_PIECES of them,
 * not bounded by the 64-bit chunk masks: the pieces go in order); its desk slot has
 * RDMACH_SHM_STAGE_DEPTH staging buffers, piece k going through buffer k % DEPTH. staged[b]
 * is k + 1 while buffer b holds piece k (set by the owner after its copy), 0 once the reader
 * has copied it out. A reader that sees nothing move for a while (the owner computes) takes
 * the pieces left in one process_vm_readv.
 *
 * A piece sits in its buffer at the reader's destination's offset within a cache line
 * (rdmach_shm_stage_at: req_addr's low bits, a word the owner masks), so the reader's memcpy
 * out goes line to line, and so does the owner's in wherever source and destination share
 * that offset (two malloc'd buffers, two page-aligned ones). A page-aligned piece copied out
 * to a destination 1-31 bytes into a page fell in AMD's REP MOVSB window (ucx_ext_memcpy):
 * 2 KiB pieces there still copy at a fifth of an aligned copy's rate.
 */
#define RDMACH_SHM_STAGE_PIECE  (16ul * 1024)
#define RDMACH_SHM_STAGE_ALIGN  64ul    /* a cache line: a buffer holds a piece and a shift */
#define RDMACH_SHM_STAGE_STRIDE (RDMACH_SHM_STAGE_PIECE + RDMACH_SHM_STAGE_ALIGN)
#define RDMACH_SHM_STAGE_DEPTH  8
#define RDMACH_SHM_STAGE_PIECES 1024   /* a staged job's most pieces: 16 MiB */
#define RDMACH_SHM_STAGE_MAX    (RDMACH_SHM_STAGE_PIECES * RDMACH_SHM_STAGE_PIECE)

typedef struct rdmach_shm_copy {
    volatile uint64_t claim;
    volatile uint64_t done;
    volatile uint64_t given_back;
    int32_t           pid;          /* the reader's process */
    uint32_t          nchunks;      /* 1..RDMACH_SHM_COPY_CHUNKS (staged: STAGE_PIECES) */
    uint64_t          seg_id;       /* the reader's segment: the owner helps known peers only */
    uint64_t          owner_addr;   /* the bytes in the owner's memory */
    uint64_t          req_addr;     /* and in the reader's */
    uint64_t          len, chunk;
    volatile uint64_t owner_work;   /* ticks the owner spent on its chunks or pieces, when
                                     * timed (the staged-or-not pick's sample, its word) */
    uint32_t          to_req;       /* 1: owner's memory to the reader's (a get), 0: a put */
    uint32_t          staged_mode;  /* 1: a staged get (above), chunk RDMACH_SHM_STAGE_PIECE */
    volatile uint32_t refused;      /* set by an owner that will not stage it (not its memory) */
    uint32_t          timed;        /* the reader times this job: the owner counts owner_work */
    volatile uint32_t staged[RDMACH_SHM_STAGE_DEPTH];
} rdmach_shm_copy_t;

typedef struct rdmach_shm_hdr {
    uint64_t          magic;
    uint64_t          seg_id;          /* random, checked by peers against the iface address */
    uint32_t          version;
    int32_t           pid;
    uint32_t          slot_size, nslots, max_span, max_rings;
    uint64_t          freemap_off, doorbells_off, credits_off, rings_off, ring_stride, size;
    uint64_t          large_stride;    /* of the first large_rings rings (0: none) */
    uint32_t          large_nslots, large_rings;
    char              pad[RDMACH_CACHE_LINE];
    volatile uint32_t next_ring;       /* senders claim ring ids with fetch-and-add */
    volatile uint32_t closed;          /* set by the owner's iface at close: its process may
                                        * live on, and the segment with its senders' maps */
    volatile uint32_t asleep;          /* the owner sleeps on wake_fd: the sender that swaps
                                        * it back to 0 writes wake_fd (ucx_ext_wake.h) */
    int32_t           wake_fd;         /* the owner's eventfd, -1: none */
    uint32_t          no_barrier;      /* the owner cannot make its senders' stores visible
                                        * (no membarrier): senders fence per record */
    char              pad2[RDMACH_CACHE_LINE];
    volatile uint32_t copy_busy;       /* desk slots taken by readers */
    volatile uint32_t copy_active;     /* of those, jobs open to the owner: one load per
                                        * progress call tells it there is nothing to do */
    char              pad3[RDMACH_CACHE_LINE - 2 * sizeof(uint32_t)];
    volatile uint64_t staged_seq;      /* pieces the owner staged, any job: a reader whose
                                        * own jobs wait for their turn sees it is at work */
    volatile uint32_t own_copies;      /* the owner has a window of copies of its own (two
                                        * or more posted, or one inside process_vm) and
                                        * helps nobody meanwhile: a reader's job to it goes
                                        * in one piece (the owner's word: anyone's who maps
                                        * the segment, deciding nothing else) */
    volatile uint32_t stage_ways;      /* bit c: the owner's own gets of size class c go
                                        * staged (its pick's way, its latest get):
                                        * a reader does not stage against a page walk of the
                                        * owner's own (the owner's word, deciding only that
                                        * a get of the reader's takes the page walk) */
    char              pad4[RDMACH_CACHE_LINE - sizeof(uint64_t) - 2 * sizeof(uint32_t)];
    rdmach_shm_copy_t copy[RDMACH_SHM_COPY_SLOTS];
} rdmach_shm_hdr_t;

/* Where a piece of a job whose reader's destination is req_addr goes in staging buffer b of
 * desk slot slot, in the segment of hdr (its owner's): the buffers lie right after the
 * header's page, before the free map (rdmach_shm.c), so inside every segment that attach
 * accepted; a piece and its shift (req_addr, the reader's word: masked) fit in a stride. */
static inline uint8_t *rdmach_shm_stage_at(rdmach_shm_hdr_t *hdr, unsigned slot, unsigned b,
                                           uint64_t req_addr)
{
    size_t off = ((sizeof(rdmach_shm_hdr_t) + 4095) & ~(size_t)4095) +
                 ((size_t)slot * RDMACH_SHM_STAGE_DEPTH + b) * RDMACH_SHM_STAGE_STRIDE +
                 (size_t)(req_addr & (RDMACH_SHM_STAGE_ALIGN - 1));

    return (uint8_t*)hdr + off;
}

#define RDMACH_SHM_STAGE_BYTES \
    ((size_t)RDMACH_SHM_COPY_SLOTS * RDMACH_SHM_STAGE_DEPTH * RDMACH_SHM_STAGE_STRIDE)

/* One credit line: the tail copy of one outgoing connection. */
typedef struct rdmach_shm_credit {
    volatile uint64_t tail;
    char              pad[RDMACH_CACHE_LINE - sizeof(uint64_t)];
} rdmach_shm_credit_t;

/* A mapped segment, own or a peer's. The layout is a private copy taken (and, for a peer,
 * validated) when the segment is mapped: the shared header is writable by every peer, so a
 * buggy or hostile one must not be able to steer our pointers through it. */
typedef struct rdmach_shm_seg {
    rdmach_shm_hdr_t *hdr;
    size_t           size;
    int              fd;       /* own segment: the memfd; peers: -1 */
    pid_t            pid;
    uint64_t         seg_id;
    uint32_t         max_rings;
    uint64_t         freemap_off, doorbells_off, credits_off, rings_off, ring_stride;
    uint64_t         large_stride;
    uint32_t         large_rings;
    rdmach_geom_t    geom;     /* of rings from large_rings on; lazy_slots unused for a peer */
    rdmach_geom_t    geom_large;   /* of the rings below large_rings */
    int              wake_fd;  /* own: our eventfd; peer: ours of its eventfd; -1: none */
    int              no_barrier;  /* peer: its hdr->no_barrier, read at attach */
} rdmach_shm_seg_t;

/* Bytes of a segment for max_rings rings, the first large_rings of them of geometry large
 * (NULL when large_rings is 0) and the rest of geom, and of one ring of a geometry (its
 * stride): the layout rdmach_shm_create allocates, for the resource model
 * (perf/resource_model). */
size_t rdmach_shm_segment_bytes(const rdmach_geom_t *geom, const rdmach_geom_t *large,
                                uint32_t large_rings, uint32_t max_rings);
size_t rdmach_shm_ring_stride(const rdmach_geom_t *geom);

/* Creates this process's segment: max_rings rings, the first large_rings (at most max_rings;
 * 0: none, large may be NULL) of geometry large, which differs from geom in nslots and
 * lazy_slots only. Returns 0 or -errno. */
int rdmach_shm_create(rdmach_shm_seg_t *seg, const rdmach_geom_t *geom,
                      const rdmach_geom_t *large, uint32_t large_rings, uint32_t max_rings,
                      uint64_t seg_id);

/* Maps a peer's segment and validates its header and size. Returns 0, -errno, or -EPROTO
 * for a segment that is not a compatible rdmach segment. */
int rdmach_shm_attach(rdmach_shm_seg_t *seg, pid_t pid, int fd, uint64_t seg_id);

void rdmach_shm_detach(rdmach_shm_seg_t *seg);

static inline volatile uint8_t *rdmach_shm_doorbells(const rdmach_shm_seg_t *seg)
{
    return (volatile uint8_t*)seg->hdr + seg->doorbells_off;
}

static inline rdmach_shm_credit_t *rdmach_shm_credit(const rdmach_shm_seg_t *seg, uint32_t i)
{
    return (rdmach_shm_credit_t*)((char*)seg->hdr + seg->credits_off) + i;
}

static inline rdmach_ring_ctl_t *rdmach_shm_ring_ctl(const rdmach_shm_seg_t *seg, uint32_t id)
{
    size_t off = (id < seg->large_rings) ?
                 (size_t)id * seg->large_stride :
                 (size_t)seg->large_rings * seg->large_stride +
                 (size_t)(id - seg->large_rings) * seg->ring_stride;

    return (rdmach_ring_ctl_t*)((char*)seg->hdr + seg->rings_off + off);
}

/* The geometry of ring id: its sender and its receiver take it from here. */
static inline const rdmach_geom_t *rdmach_shm_ring_geom(const rdmach_shm_seg_t *seg,
                                                        uint32_t id)
{
    return (id < seg->large_rings) ? &seg->geom_large : &seg->geom;
}

static inline uint8_t *rdmach_shm_ring_slots(const rdmach_shm_seg_t *seg, uint32_t id)
{
    return (uint8_t*)(rdmach_shm_ring_ctl(seg, id) + 1);
}

/* Claims a ring of a peer's segment: a never used one by fetch-and-add on the counter, else a
 * taken-back one from the free map. The ring id, or -ENOSPC. */
int rdmach_shm_claim_ring(const rdmach_shm_seg_t *seg);

/* Maps ring id's pages into this process now (write: the sender's side, which also allocates
 * them), at connection time: left to the message path, the first lap of a ring costs two page
 * faults per page, one in each process (MPICH 512 B latency 1.08 us instead of 0.28 over the
 * first lap of a 2 MiB ring). */
void rdmach_shm_ring_prefault(const rdmach_shm_seg_t *seg, uint32_t id, int write);

/* Makes the staging buffers (RDMACH_SHM_STAGE_BYTES, 2 MiB) resident in this mapping: write,
 * the owner's, at open; read, a reader's mapping of a peer's, when it maps the peer. Off the
 * message path, so a get's first staged pieces do not pay a page fault on each side. */
void rdmach_shm_stage_prefault(const rdmach_shm_seg_t *seg, int write);

/* Our own ring, drained and its sender gone: zeroed, then published in the free map. */
void rdmach_shm_free_ring(rdmach_shm_seg_t *seg, uint32_t id);

/* Has the segment's owner closed it (a peer's segment we still map)? */
static inline int rdmach_shm_closed(const rdmach_shm_seg_t *seg)
{
    return __atomic_load_n(&seg->hdr->closed, __ATOMIC_ACQUIRE) != 0;
}

/* Marks our own segment closed for the peers that still map it. */
static inline void rdmach_shm_close_mark(rdmach_shm_seg_t *seg)
{
    __atomic_store_n(&seg->hdr->closed, 1, __ATOMIC_RELEASE);
}

/* Rings senders have claimed so far: a shared counter, so clamped to what exists. */
static inline uint32_t rdmach_shm_claimed(const rdmach_shm_seg_t *seg)
{
    uint32_t n = __atomic_load_n(&seg->hdr->next_ring, __ATOMIC_ACQUIRE);
    return (n < seg->max_rings) ? n : seg->max_rings;
}

/* Smallest message the desk is used for (two chunks); smaller ones are one process_vm call. */
#define RDMACH_SHM_COPY_MIN (64ul * 1024)

/* A job this process opened on a peer's desk: the reader's side of it. */
typedef struct rdmach_shm_copy_req {
    rdmach_shm_hdr_t   *hdr;        /* the owner's segment, mapped here */
    rdmach_shm_copy_t  *job;        /* its slot there */
    pid_t              pid;         /* the owner */
    unsigned long long start;       /* its start time (tells a reused pid apart), 0: unknown */
    uint8_t            *local;      /* our bytes */
    uint8_t            *mapped;     /* the owner's bytes mapped here (memory its md allocated):
                                     * our chunks are memcpy; NULL: process_vm */
    uint64_t           remote;      /* the owner's bytes, in its address space */
    uint64_t           gen, mine, all;
    size_t             len, chunk;
    uint32_t           nchunks, bit, probe;
    uint32_t           stall_mark;  /* the owner's chunks we saw ended, at stall_since */
    uint64_t           stall_since; /* ns; 0: not waited yet (rdmach_shm_copy_advance) */
    int                write, open, ret;
    unsigned           slot;        /* of the job on the owner's desk */
    unsigned           staged;      /* a staged get: its pieces come through the staging */
    /* staged: */
    unsigned           idle;        /* advances since the owner last staged */
    uint64_t           seen_seq;    /* its staged_seq then */
    int                unstaged;    /* we read pieces of it ourselves */
    uint32_t           expect[RDMACH_SHM_STAGE_DEPTH];   /* the next piece in each buffer */
    uint32_t           drained;     /* pieces copied out */
    uint32_t           owner_end;   /* the owner's pieces are those below: all, or where we
                                     * took the rest */
    int                timed;       /* count the work of both processes on it: */
    uint64_t           work;        /* ticks: ours so far, both at the end (the owner's word
                                     * added, bounded) */
} rdmach_shm_copy_req_t;

/* advance: the owner still copies a chunk it claimed */
#define RDMACH_SHM_COPY_PENDING 1

/* Reader: opens a job on the desk of peer's owner that moves len bytes between local and
 * remote_addr in the owner (write: to it); own: our segment, which the owner knows us by;
 * split: about how many chunks to cut it into, at least 1 (1: whole, one taker). Nothing is
 * copied yet: the owner may start at once, we at the first advance. 0, or -EBUSY: the desk
 * is full. timed (here and in the other posts): both processes count the ticks they spend in
 * its copies, and req->work holds their sum when it is over (the staged-or-not pick's sample,
 * rdmach_shm_pick.h: what a way costs, not how long the reader waited). */
int rdmach_shm_copy_post(rdmach_shm_copy_req_t *req, const rdmach_shm_seg_t *peer,
                         unsigned long long peer_start, const rdmach_shm_seg_t *own,
                         void *local, uint64_t remote_addr, void *mapped, size_t len,
                         int write, unsigned split, int timed);

/* Reader: a job into (or out of) a buffer that is in this core's cache (rdmach_wire_shm.c
 * tells): two halves; the first is ours, copied before this returns (the owner never sees
 * it), the second the owner's if it is in its progress. Each half then stays in one core's
 * cache from one copy into the buffer to the next, where halves taken by whoever comes first
 * would move between the cores on every copy. 0 (a failed first half is reported by advance),
 * or -EBUSY: the desk is full; nothing was copied. */
int rdmach_shm_copy_post_hot(rdmach_shm_copy_req_t *req, const rdmach_shm_seg_t *peer,
                             unsigned long long peer_start, const rdmach_shm_seg_t *own,
                             void *local, uint64_t remote_addr, void *mapped, size_t len,
                             int write, int timed);

/* Reader: a get of len bytes (at most RDMACH_SHM_STAGE_MAX) staged by its owner (above):
 * nothing is copied yet; advance copies out what the owner staged, and the rest itself once the
 * owner has staged nothing, for any job, for RDMACH_SHM_STAGE_PATIENCE advances (or refused
 * the job; req->unstaged then tells). 0, or -EBUSY: the desk is full. */
int rdmach_shm_copy_post_staged(rdmach_shm_copy_req_t *req, const rdmach_shm_seg_t *peer,
                                unsigned long long peer_start, const rdmach_shm_seg_t *own,
                                void *local, uint64_t remote_addr, size_t len, int timed);

#define RDMACH_SHM_STAGE_PATIENCE 256

/* Chunks a job alone (or with mapped memory) is cut into (rdmach_shm_copy.c has the
 * measurements). */
#define RDMACH_SHM_COPY_SPLIT 8

/* Reader: takes every chunk still unclaimed and copies it; then, with wait, waits for the
 * chunks the owner is copying. RDMACH_SHM_COPY_PENDING (only without wait), or the job is
 * over and its slot free: 0, or -errno of the copy (-ESRCH: the owner died while copying a
 * chunk; a live owner is waited for, as returning would give the caller back a buffer the
 * owner still copies into or from, but not forever: -ETIMEDOUT once none of its chunks has
 * ended for seconds, the slot then left taken, rdmach_shm_copy.c). Without wait, the owner's
 * liveness and progress are probed every 65536 calls. */
int rdmach_shm_copy_advance(rdmach_shm_copy_req_t *req, int wait);

/* Reader: post and advance until done, complete at return. -EBUSY: the desk is full; nothing
 * was copied. work (NULL: not timed): the ticks both processes spent on it (timed, below). */
int rdmach_shm_copy_run(const rdmach_shm_seg_t *peer, unsigned long long peer_start,
                        const rdmach_shm_seg_t *own, void *local, uint64_t remote_addr,
                        size_t len, int write, uint64_t *work);

/* Owner: takes chunks of the jobs open on our desk, for readers known_peer() accepts; returns
 * how many chunks it copied. The job's addresses are the reader's word: it copies only when
 * may_read() says [owner_addr, owner_addr + len) is ours to copy, to or from (a registered
 * region, which admits a peer's puts and gets alike; NULL: nothing is copied). Staged gets
 * are read with memcpy, the other jobs with process_vm into or out of that range. With
 * staged_only it does only the staged gets. */
typedef struct rdmach_shm_helper {
    int (*known_peer)(void *arg, pid_t pid, uint64_t seg_id);
    int (*may_read)(void *arg, uint64_t address, uint64_t length);
    void *arg, *may_read_arg;
} rdmach_shm_helper_t;

unsigned rdmach_shm_copy_help(const rdmach_shm_seg_t *own, const rdmach_shm_helper_t *helper,
                              int staged_only);

/* Owner: the desk slots a reader that has gone (its segment seg_id of process pid: another
 * iface of that process may still be reading) left taken, given back. */
void rdmach_shm_copy_reap(const rdmach_shm_seg_t *own, pid_t pid, uint64_t seg_id);

#ifdef __cplusplus
}
#endif

#endif
