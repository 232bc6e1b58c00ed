/*
 * rdmach shared-memory wire: cooperative zero copy, the desk of rdmach_shm.h.
 *
 * A large get or put is split into chunks (at most RDMACH_SHM_COPY_CHUNKS) that the reader and
 * the owner of the other memory take off one counter. Each copies a chunk with one
 * process_vm_readv/writev of its own: two cores walk and pin pages at once, where the RDMA
 * read of the paper, on one core, is bounded by that kernel work (perf/README.md has the
 * measurement). Nothing here waits on the owner except a chunk it has claimed, which it is
 * copying at that moment: an owner that does not look takes nothing.
 *
 * A job is posted, then advanced. The wire runs one with a completion (a zero-copy get or
 * put) in the background: post, return, and take what is left from the reader's progress.
 * An owner in its progress meanwhile (a rendezvous sender waiting for the ATS, the target of
 * passive one-sided RMA in a barrier) copies the whole job while the reader computes, which
 * is what MPI's request-based RMA overlaps. rdmach_shm_copy_run is both at once.
 *
 * A staged get (rdmach_shm.h) uses the same desk slot and claim word, with other work: the
 * owner's claim is a piece it memcpys into the slot's staging buffer, the reader copies the
 * pieces out, and takes the rest in one process_vm_readv when the owner stops.
 */
#include "rdmach_shm.h"
#include "ucx_ext_sys.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/uio.h>

_Static_assert(sizeof(rdmach_shm_copy_t) == 128, "desk slot: two cache lines");
_Static_assert(sizeof(rdmach_shm_hdr_t) <= 4096, "the header stays one page");
_Static_assert(RDMACH_SHM_COPY_SLOTS <= 32, "desk masks are 32 bits");

/* A job alone is split into about RDMACH_SHM_COPY_SPLIT chunks of at least CHUNK_MIN bytes:
 * few large chunks cost fewer system calls, enough of them let the owner join late and still
 * take half. Measured with perf/mpi_p2p, MPICH, alternating with sm: 1 MiB windowed bandwidth
 * 8 chunks 1.47x sm, 16 chunks 1.32x, 64 chunks 1.08x. 4 chunks gave better ping-pong latency
 * (256 KiB / 1 MiB / 4 MiB 14.0 / 46.2 / 189 us against 17.6 / 49.7 / 215) but took MPICH's
 * Rget overlap at 512 KiB from 5-50% to 0% in every run: left at 8. A job posted while others
 * are (a window of messages) goes whole (rdmach_wire_shm.c): the two processes then copy
 * different messages at once, with a system call per message, not per chunk. */
#define RDMACH_SHM_COPY_CHUNK_MIN (32ul * 1024)
#define RDMACH_SHM_COPY_PROBE     (1u << 16)    /* wait loops between two liveness probes */
#define RDMACH_SHM_COPY_MASK      ((uint32_t)((1ull << RDMACH_SHM_COPY_SLOTS) - 1))
#define RDMACH_SHM_COPY_CHUNK_MAX (1ull << 40)  /* beyond any job: an owner refuses it */
/* A reader gives up on chunks the owner claimed after this long without one of them ending,
 * plus 4 ns a byte of a chunk (250 MB/s: a whole job of GiBs is one chunk, copied in one call
 * by an honest owner): only an owner that is stopped, or that claims and never copies (any
 * process that maps its segment can write the claim word), holds a chunk that long. */
#define RDMACH_SHM_COPY_STALL_NS  (5ull * 1000 * 1000 * 1000)

static inline void rdmach_shm_copy_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield" ::: "memory");
#endif
}

static inline size_t rdmach_shm_copy_min(size_t a, size_t b)
{
    return (a < b) ? a : b;
}

static inline uint64_t rdmach_shm_copy_mask(uint32_t nchunks)
{
    return (nchunks >= 64) ? ~0ull : ((1ull << nchunks) - 1);
}

/* Chunk k of a job of len bytes between the two memories (local: this process's side, pid:
 * the other process); write: from local to remote. */
static int rdmach_shm_copy_chunk(pid_t pid, uint64_t local, uint64_t remote, size_t len,
                                 size_t chunk, int k, int write)
{
    uint64_t off     = (uint64_t)k * chunk;
    struct iovec iov = {(void*)(uintptr_t)(local + off), rdmach_shm_copy_min(chunk, len - off)};

    return ucx_ext_process_vm(pid, &iov, 1, remote + off, iov.iov_len, write);
}

/* Takes the next chunk of the job whose claim word was *c; its index, or -1 when none is left
 * or the slot holds another job now (another gen: the caller's fields are not its). */
static int rdmach_shm_copy_take(rdmach_shm_copy_t *job, uint64_t *c, uint32_t nchunks)
{
    const uint64_t gen = *c >> 32;

    for (;;) {
        uint32_t next = (uint32_t)*c;

        if (((*c >> 32) != gen) || (next == RDMACH_SHM_COPY_CLOSED) || (next >= nchunks)) {
            return -1;
        }
        if (__atomic_compare_exchange_n(&job->claim, c, *c + 1, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
            return (int)next;
        }
        /* *c is the word now: another chunk went, or the job ended and the slot was
         * taken again (checked above) */
    }
}

/* Our chunk k of the job: memcpy where the owner's bytes are mapped here, else process_vm. */
static int rdmach_shm_copy_own_chunk_untimed(const rdmach_shm_copy_req_t *req, int k)
{
    uint64_t off;
    size_t len;

    if (req->mapped == NULL) {
        return rdmach_shm_copy_chunk(req->pid, (uintptr_t)req->local, req->remote, req->len,
                                     req->chunk, k, req->write);
    }
    off = (uint64_t)k * req->chunk;
    len = rdmach_shm_copy_min(req->chunk, req->len - off);
    if (req->write) {
        ucx_ext_memcpy(req->mapped + off, req->local + off, len);
    } else {
        ucx_ext_memcpy(req->local + off, req->mapped + off, len);
    }
    return 0;
}

static int rdmach_shm_copy_own_chunk(rdmach_shm_copy_req_t *req, int k)
{
    uint64_t t0;
    int ret;

    if (!req->timed) {
        return rdmach_shm_copy_own_chunk_untimed(req, k);
    }
    t0         = ucx_ext_ticks();
    ret        = rdmach_shm_copy_own_chunk_untimed(req, k);
    req->work += ucx_ext_ticks() - t0;
    return ret;
}

/* A timed job is over: its work is ours and the owner's, whose word counts up to a bound (a
 * copy that took 1000 cycles a byte is no copy). Read before the slot is given back. */
static void rdmach_shm_copy_work_done(rdmach_shm_copy_req_t *req)
{
    uint64_t owner;

    if (req->timed) {
        owner      = __atomic_load_n(&req->job->owner_work, __ATOMIC_RELAXED);
        req->work += (owner <= 1000 * (uint64_t)req->len) ? owner : 0;
    }
}

/* Opens the job; with first, chunk 0 is ours before the owner can see it. */
static int rdmach_shm_copy_open(rdmach_shm_copy_req_t *req, const rdmach_shm_seg_t *peer,
                                unsigned long long peer_start, const rdmach_shm_seg_t *own,
                                void *local, uint64_t remote_addr, void *mapped, size_t len,
                                int write, unsigned split, int first, int staged, int timed)
{
    rdmach_shm_hdr_t *hdr = peer->hdr;
    rdmach_shm_copy_t *job;
    uint32_t busy, bit;
    size_t chunk;
    unsigned b;
    int slot;

    /* a desk slot: a free bit of the busy mask (bits beyond the desk, which only a corrupt
     * segment has, never name a slot) */
    busy = __atomic_load_n(&hdr->copy_busy, __ATOMIC_RELAXED);
    do {
        if ((busy & RDMACH_SHM_COPY_MASK) == RDMACH_SHM_COPY_MASK) {
            return -EBUSY;
        }
        slot = __builtin_ctz(~busy & RDMACH_SHM_COPY_MASK);
        bit  = 1u << slot;
    } while (!__atomic_compare_exchange_n(&hdr->copy_busy, &busy, busy | bit, 0,
                                          __ATOMIC_ACQUIRE, __ATOMIC_RELAXED));

    if (staged) {
        chunk = RDMACH_SHM_STAGE_PIECE;
    } else {
        chunk = (len + split - 1) / split;
        chunk = (chunk + 4095) & ~(size_t)4095;
        chunk = (chunk < RDMACH_SHM_COPY_CHUNK_MIN) ? RDMACH_SHM_COPY_CHUNK_MIN : chunk;
    }

    req->hdr     = hdr;
    req->job     = job = &hdr->copy[slot];
    req->pid     = peer->pid;
    req->start   = peer_start;
    req->local   = local;
    req->mapped  = mapped;
    req->remote  = remote_addr;
    req->len     = len;
    req->chunk   = chunk;
    req->nchunks = (uint32_t)((len + chunk - 1) / chunk);
    req->all     = rdmach_shm_copy_mask(req->nchunks);
    req->mine    = first ? 1 : 0;
    req->bit     = bit;
    req->probe   = 0;
    req->stall_since = 0;
    req->stall_mark  = 0;
    req->write   = write;
    req->open    = 1;
    req->ret     = 0;
    req->slot     = (unsigned)slot;
    req->staged   = staged ? 1 : 0;
    req->idle     = 0;
    req->seen_seq = __atomic_load_n(&hdr->staged_seq, __ATOMIC_RELAXED);
    req->unstaged = 0;
    req->drained  = 0;
    req->owner_end = req->nchunks;
    req->timed     = timed;
    req->work      = 0;
    for (b = 0; b < RDMACH_SHM_STAGE_DEPTH; ++b) {
        req->expect[b] = b;
    }

    /* closed while the fields change (see rdmach_shm.h), then open under a new gen */
    req->gen = (__atomic_load_n(&job->claim, __ATOMIC_RELAXED) >> 32) + 1;
    __atomic_store_n(&job->claim, (req->gen << 32) | RDMACH_SHM_COPY_CLOSED, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    job->done        = 0;
    job->given_back  = 0;
    job->pid         = own->pid;
    job->seg_id      = own->seg_id;
    job->nchunks     = req->nchunks;
    job->owner_addr  = remote_addr;
    job->req_addr    = (uintptr_t)local;
    job->len         = len;
    job->chunk       = chunk;
    job->to_req      = !write;
    job->staged_mode = req->staged;
    job->refused     = 0;
    job->timed       = (uint32_t)timed;
    job->owner_work  = 0;
    memset((void*)job->staged, 0, sizeof(job->staged));   /* a dead owner's leftovers */
    __atomic_store_n(&job->claim, (req->gen << 32) | (first ? 1 : 0), __ATOMIC_RELEASE);
    __atomic_fetch_or(&hdr->copy_active, bit, __ATOMIC_RELEASE);
    return 0;
}

/* Closes the job after our chunk failed with ret: the owner takes no more; the chunks it
 * claimed before are those below the count the claim word had. */
static void rdmach_shm_copy_fail(rdmach_shm_copy_req_t *req, int ret)
{
    uint64_t c = __atomic_exchange_n(&req->job->claim,
                                     (req->gen << 32) | RDMACH_SHM_COPY_CLOSED,
                                     __ATOMIC_ACQ_REL);

    req->all = rdmach_shm_copy_mask((uint32_t)rdmach_shm_copy_min(req->nchunks, (uint32_t)c));
    req->ret = ret;
}

int rdmach_shm_copy_post(rdmach_shm_copy_req_t *req, const rdmach_shm_seg_t *peer,
                         unsigned long long peer_start, const rdmach_shm_seg_t *own,
                         void *local, uint64_t remote_addr, void *mapped, size_t len, int write,
                         unsigned split, int timed)
{
    return rdmach_shm_copy_open(req, peer, peer_start, own, local, remote_addr, mapped, len,
                                write, split, 0, 0, timed);
}

int rdmach_shm_copy_post_staged(rdmach_shm_copy_req_t *req, const rdmach_shm_seg_t *peer,
                                unsigned long long peer_start, const rdmach_shm_seg_t *own,
                                void *local, uint64_t remote_addr, size_t len, int timed)
{
    if ((len == 0) || (len > RDMACH_SHM_STAGE_MAX)) {
        return -EINVAL;
    }
    return rdmach_shm_copy_open(req, peer, peer_start, own, local, remote_addr, NULL, len, 0,
                                1, 0, 1, timed);
}

int rdmach_shm_copy_post_hot(rdmach_shm_copy_req_t *req, const rdmach_shm_seg_t *peer,
                             unsigned long long peer_start, const rdmach_shm_seg_t *own,
                             void *local, uint64_t remote_addr, void *mapped, size_t len,
                             int write, int timed)
{
    int ret = rdmach_shm_copy_open(req, peer, peer_start, own, local, remote_addr, mapped, len,
                                   write, 2, 1, 0, timed);

    if (ret != 0) {
        return ret;
    }
    ret = rdmach_shm_copy_own_chunk(req, 0);
    if (ret != 0) {
        rdmach_shm_copy_fail(req, ret);   /* advance reports it */
    }
    return 0;
}

/* Is the wait for the owner's chunks over? Probed every RDMACH_SHM_COPY_PROBE waits: -ESRCH
 * if the owner died, -ETIMEDOUT if mark (how many of the chunks we wait for have ended, which
 * only grows: a peer toggling the words cannot keep it moving) has not grown for the stall
 * limit, else 0. Only then: returning while a live owner copies would let it write into (or
 * read from) a buffer the caller has taken back, so the limit is far beyond an honest copy. */
static int rdmach_shm_copy_stuck(rdmach_shm_copy_req_t *req, uint32_t mark)
{
    uint64_t now;

    if (++req->probe != RDMACH_SHM_COPY_PROBE) {
        return 0;
    }
    req->probe = 0;
    if (!ucx_ext_proc_alive(req->pid, (req->start != 0) ? req->start :
                                      ucx_ext_proc_start_time(req->pid))) {
        return -ESRCH;
    }
    now = ucx_ext_now_ns();
    if ((req->stall_since == 0) || (mark > req->stall_mark)) {
        req->stall_since = now;
        req->stall_mark  = mark;
        return 0;
    }
    /* req->chunk is ours (at most len, an address space's size): 4 * chunk cannot wrap */
    return ((now - req->stall_since) > (RDMACH_SHM_COPY_STALL_NS + 4ull * req->chunk)) ?
           -ETIMEDOUT : 0;
}

/* The owner is stuck inside chunks of the job (-ETIMEDOUT): it may still store into the slot
 * (done, staged words) whenever it goes on, and a store into the next job of that slot would
 * count one of its chunks done that nobody copied. So the slot stays taken, closed, off the
 * owner's active jobs, until the owner's reap gives it back when we are gone (a full desk
 * only means we copy alone). */
static int rdmach_shm_copy_abandon(rdmach_shm_copy_req_t *req, int ret)
{
    __atomic_store_n(&req->job->claim, (req->gen << 32) | RDMACH_SHM_COPY_CLOSED,
                     __ATOMIC_RELEASE);
    __atomic_fetch_and(&req->hdr->copy_active, ~req->bit, __ATOMIC_RELAXED);
    req->ret = ret;
    return ret;
}

/* Reader of a staged get: copies out the pieces the owner has staged. The owner claims pieces
 * in order and stages piece k + DEPTH in a buffer only after we emptied it of piece k, so each
 * buffer carries the pieces b, b + DEPTH, ... in turn: a staging word (the owner's, or anyone's
 * who maps its segment) is taken only if it names the piece we expect there, below the pieces
 * we left to the owner. How many moved. */
static unsigned rdmach_shm_stage_drain(rdmach_shm_copy_req_t *req)
{
    rdmach_shm_copy_t *job = req->job;
    unsigned b, moved = 0;
    uint64_t off, t0;
    uint32_t v, k;

    for (b = 0; b < RDMACH_SHM_STAGE_DEPTH; ++b) {
        v = __atomic_load_n(&job->staged[b], __ATOMIC_ACQUIRE);
        k = v - 1;
        if ((v == 0) || (k != req->expect[b]) || (k >= req->owner_end)) {
            continue;
        }
        off = (uint64_t)k * req->chunk;
        t0  = req->timed ? ucx_ext_ticks() : 0;
        ucx_ext_memcpy(req->local + off,
                       rdmach_shm_stage_at(req->hdr, req->slot, b, (uintptr_t)req->local),
                       rdmach_shm_copy_min(req->chunk, req->len - off));
        if (req->timed) {
            req->work += ucx_ext_ticks() - t0;
        }
        req->expect[b] += RDMACH_SHM_STAGE_DEPTH;
        ++req->drained;
        __atomic_store_n(&job->staged[b], 0, __ATOMIC_RELEASE);   /* the owner's again */
        ++moved;
    }
    return moved;
}

/* Reader of a staged get: what is staged, copied out; the pieces nobody took, in one call of
 * our own once the owner has moved nothing for a while or refused the job. Every piece the
 * owner claimed is waited for (it is copying it) and copied out, also after a failure of
 * ours: its last store into the job must come before the slot is given back. */
static int rdmach_shm_copy_advance_staged(rdmach_shm_copy_req_t *req, int wait)
{
    rdmach_shm_copy_t *job = req->job;
    struct iovec iov;
    uint64_t c, off, t0;
    uint32_t next;
    int ret;

    for (;;) {
        (void)rdmach_shm_stage_drain(req);
        c = __atomic_load_n(&req->hdr->staged_seq, __ATOMIC_RELAXED);
        if (c != req->seen_seq) {
            req->seen_seq = c;   /* the owner is at work, maybe on our other jobs first */
            req->idle     = 0;
        }
        if (req->drained == req->owner_end) {
            break;   /* every piece the owner could claim is copied out, the rest is ours */
        }
        c    = __atomic_load_n(&job->claim, __ATOMIC_ACQUIRE);
        next = (uint32_t)c;
        if (((c >> 32) == req->gen) && (next < req->nchunks) &&
            ((++req->idle >= RDMACH_SHM_STAGE_PATIENCE) ||
             __atomic_load_n(&job->refused, __ATOMIC_RELAXED))) {
            if (__atomic_compare_exchange_n(&job->claim, &c, (req->gen << 32) | req->nchunks,
                                            0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                off          = (uint64_t)next * req->chunk;
                iov.iov_base = req->local + off;
                iov.iov_len  = req->len - off;
                t0           = req->timed ? ucx_ext_ticks() : 0;
                ret          = ucx_ext_process_vm(req->pid, &iov, 1, req->remote + off,
                                                  iov.iov_len, 0);
                req->work   += req->timed ? ucx_ext_ticks() - t0 : 0;
                req->ret       = (req->ret != 0) ? req->ret : ret;
                req->owner_end = next;   /* it claimed the pieces below, and no more */
                req->unstaged  = 1;
            }
            continue;
        }
        ret = rdmach_shm_copy_stuck(req, req->drained);
        if (ret == -ESRCH) {
            req->ret = ret;   /* died inside a piece it had claimed */
            break;
        } else if (ret != 0) {
            return rdmach_shm_copy_abandon(req, ret);
        }
        if (!wait) {
            return RDMACH_SHM_COPY_PENDING;
        }
        rdmach_shm_copy_pause();
    }
    rdmach_shm_copy_work_done(req);
    __atomic_fetch_and(&req->hdr->copy_active, ~req->bit, __ATOMIC_RELAXED);
    __atomic_fetch_and(&req->hdr->copy_busy, ~req->bit, __ATOMIC_RELEASE);
    return req->ret;
}

int rdmach_shm_copy_advance(rdmach_shm_copy_req_t *req, int wait)
{
    rdmach_shm_copy_t *job = req->job;
    uint64_t c, other;
    int k, ret = req->ret;

    if (req->staged) {
        return rdmach_shm_copy_advance_staged(req, wait);
    }
    if (req->open) {
        c = __atomic_load_n(&job->claim, __ATOMIC_ACQUIRE);
        if ((c >> 32) != req->gen) {
            c = req->gen << 32;   /* only a corrupt desk: take() then takes nothing */
        }
        while ((k = rdmach_shm_copy_take(job, &c, req->nchunks)) >= 0) {
            ret        = rdmach_shm_copy_own_chunk(req, k);
            req->mine |= 1ull << k;
            if (ret != 0) {
                rdmach_shm_copy_fail(req, ret);
                break;
            }
        }
        __atomic_fetch_and(&req->hdr->copy_active, ~req->bit, __ATOMIC_RELAXED);
        req->open = 0;
    }

    /* the chunks the owner claimed: done, or given back for us to copy */
    for (;;) {
        other = __atomic_load_n(&job->done, __ATOMIC_ACQUIRE) |
                __atomic_load_n(&job->given_back, __ATOMIC_ACQUIRE);
        if (((other | req->mine) & req->all) == req->all) {
            break;
        }
        k = rdmach_shm_copy_stuck(req, (uint32_t)__builtin_popcountll(other & req->all));
        if (k == -ESRCH) {
            ret = k;   /* died inside a chunk it had claimed */
            goto out;
        } else if (k != 0) {
            return rdmach_shm_copy_abandon(req, k);
        }
        if (!wait) {
            return RDMACH_SHM_COPY_PENDING;
        }
        rdmach_shm_copy_pause();
    }

    /* chunks the owner could not copy (a fault at its end): ours to do. The mask is anyone's
     * word: only chunks of this job (all) that we did not copy (mine) are taken, a bit beyond
     * the job would copy a chunk past both buffers */
    other = __atomic_load_n(&job->given_back, __ATOMIC_ACQUIRE) & req->all & ~req->mine;
    while ((ret == 0) && (other != 0)) {
        k      = __builtin_ctzll(other);
        other &= other - 1;
        ret    = rdmach_shm_copy_own_chunk(req, k);
    }
out:
    rdmach_shm_copy_work_done(req);
    __atomic_fetch_and(&req->hdr->copy_busy, ~req->bit, __ATOMIC_RELEASE);
    return ret;
}

int rdmach_shm_copy_run(const rdmach_shm_seg_t *peer, unsigned long long peer_start,
                        const rdmach_shm_seg_t *own, void *local, uint64_t remote_addr,
                        size_t len, int write, uint64_t *work)
{
    rdmach_shm_copy_req_t req;
    int ret = rdmach_shm_copy_post(&req, peer, peer_start, own, local, remote_addr, NULL, len,
                                   write, RDMACH_SHM_COPY_SPLIT, work != NULL);

    if (ret != 0) {
        return ret;
    }
    ret = rdmach_shm_copy_advance(&req, 1);
    if (work != NULL) {
        *work = req.work;
    }
    return ret;
}

/* Owner: stages the pieces of staged job slot (word c when snap was taken) that it has free
 * buffers for. Its bytes are read with memcpy, so the job's range must be memory we may read
 * (asked once, before the first piece): the addresses are the reader's word. */
static unsigned rdmach_shm_stage_help(rdmach_shm_hdr_t *hdr, int slot,
                                      const rdmach_shm_copy_t *snap, uint64_t c,
                                      const rdmach_shm_helper_t *helper)
{
    rdmach_shm_copy_t *job = &hdr->copy[slot];
    const uint64_t gen     = c >> 32;
    unsigned count = 0, b;
    int checked    = 0;
    uint64_t off, t0;
    uint32_t next;

    for (;;) {
        next = (uint32_t)c;
        if (((c >> 32) != gen) || (next == RDMACH_SHM_COPY_CLOSED) ||
            (next >= snap->nchunks)) {
            break;
        }
        b = next % RDMACH_SHM_STAGE_DEPTH;
        if (__atomic_load_n(&job->staged[b], __ATOMIC_ACQUIRE) != 0) {
            break;   /* the reader has not copied that buffer out yet */
        }
        if (!checked) {
            if ((helper->may_read == NULL) || (snap->owner_addr + snap->len < snap->owner_addr) ||
                !helper->may_read(helper->may_read_arg, snap->owner_addr, snap->len)) {
                if (__atomic_load_n(&job->claim, __ATOMIC_ACQUIRE) == c) {
                    job->refused = 1;   /* the reader takes it all at once */
                }
                break;
            }
            checked = 1;
        }
        if (!__atomic_compare_exchange_n(&job->claim, &c, c + 1, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE)) {
            continue;   /* c is the word now */
        }
        off = (uint64_t)next * snap->chunk;
        t0  = snap->timed ? ucx_ext_ticks() : 0;
        ucx_ext_memcpy(rdmach_shm_stage_at(hdr, (unsigned)slot, b, snap->req_addr),
                       (const void*)(uintptr_t)(snap->owner_addr + off),
                       rdmach_shm_copy_min(snap->chunk, snap->len - off));
        if (snap->timed) {   /* before the piece is the reader's: then the job may end */
            __atomic_fetch_add(&job->owner_work, ucx_ext_ticks() - t0, __ATOMIC_RELAXED);
        }
        __atomic_store_n(&job->staged[b], next + 1, __ATOMIC_RELEASE);
        ++c;
        ++count;
    }
    if (count != 0) {
        __atomic_fetch_add(&hdr->staged_seq, count, __ATOMIC_RELAXED);
    }
    return count;
}

unsigned rdmach_shm_copy_help(const rdmach_shm_seg_t *own, const rdmach_shm_helper_t *helper,
                              int staged_only)
{
    rdmach_shm_hdr_t *hdr = own->hdr;
    uint32_t active       = __atomic_load_n(&hdr->copy_active, __ATOMIC_ACQUIRE);
    unsigned count        = 0;
    rdmach_shm_copy_t *job, snap;
    uint64_t c, t0;
    int slot, k;

    while (active != 0) {
        slot    = __builtin_ctz(active);
        active &= active - 1;
        if (slot >= RDMACH_SHM_COPY_SLOTS) {
            break;
        }
        job = &hdr->copy[slot];
        c   = __atomic_load_n(&job->claim, __ATOMIC_ACQUIRE);
        if (((uint32_t)c == RDMACH_SHM_COPY_CLOSED) || ((uint32_t)c >= job->nchunks)) {
            continue;   /* closed, or every chunk taken: also a job its reader left behind
                         * when it died, which stays on the desk at the cost of this test */
        }
        /* a private copy, checked: the desk is writable by every peer. A claim that
         * succeeds below proves the fields were those of the job of word c. */
        snap = *job;
        if ((snap.nchunks == 0) ||
            (snap.nchunks > (snap.staged_mode ? RDMACH_SHM_STAGE_PIECES :
                                                RDMACH_SHM_COPY_CHUNKS)) ||
            (snap.chunk == 0) || (snap.chunk > RDMACH_SHM_COPY_CHUNK_MAX) ||
            (snap.len > snap.chunk * snap.nchunks) ||
            (snap.len <= snap.chunk * (snap.nchunks - 1)) || (snap.pid <= 0) ||
            (snap.staged_mode && ((snap.chunk != RDMACH_SHM_STAGE_PIECE) || !snap.to_req)) ||
            (staged_only && !snap.staged_mode) ||
            !helper->known_peer(helper->arg, snap.pid, snap.seg_id)) {
            continue;
        }
        if (snap.staged_mode) {
            count += rdmach_shm_stage_help(hdr, slot, &snap, c, helper);
            continue;
        }
        /* the addresses are the reader's word, and anyone who maps our segment can write a
         * job: we copy only inside our registrations, which a peer may put to and get from
         * anyway (a registration here admits both, as its rkey does: may_read is the
         * permission either way). to_req 0 has us write our own memory at owner_addr, 1 read
         * it out; a range that wraps is no registration's. The reader copies what we leave. */
        if ((helper->may_read == NULL) || (snap.owner_addr + snap.len < snap.owner_addr) ||
            !helper->may_read(helper->may_read_arg, snap.owner_addr, snap.len)) {
            continue;
        }
        while ((k = rdmach_shm_copy_take(job, &c, snap.nchunks)) >= 0) {
            t0 = snap.timed ? ucx_ext_ticks() : 0;
            if (rdmach_shm_copy_chunk(snap.pid, snap.owner_addr, snap.req_addr, snap.len,
                                      snap.chunk, k, snap.to_req) != 0) {
                __atomic_fetch_or(&job->given_back, 1ull << k, __ATOMIC_RELEASE);
                break;   /* the reader copies it, and the rest */
            }
            if (snap.timed) {   /* before done: then the job may end */
                __atomic_fetch_add(&job->owner_work, ucx_ext_ticks() - t0, __ATOMIC_RELAXED);
            }
            __atomic_fetch_or(&job->done, 1ull << k, __ATOMIC_RELEASE);
            ++count;
        }
    }
    return count;
}

void rdmach_shm_copy_reap(const rdmach_shm_seg_t *own, pid_t pid, uint64_t seg_id)
{
    rdmach_shm_hdr_t *hdr = own->hdr;
    uint32_t busy         = __atomic_load_n(&hdr->copy_busy, __ATOMIC_ACQUIRE);
    uint32_t bit;
    int slot;

    while (busy != 0) {
        slot  = __builtin_ctz(busy);
        busy &= busy - 1;
        if (slot >= RDMACH_SHM_COPY_SLOTS) {
            break;
        }
        if ((hdr->copy[slot].pid == pid) && (hdr->copy[slot].seg_id == seg_id)) {
            bit = 1u << slot;
            __atomic_fetch_and(&hdr->copy_active, ~bit, __ATOMIC_RELAXED);
            __atomic_fetch_and(&hdr->copy_busy, ~bit, __ATOMIC_RELEASE);
        }
    }
}
