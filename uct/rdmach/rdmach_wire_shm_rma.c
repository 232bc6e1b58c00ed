/*
 * rdmach shared-memory wire: the RDMA channel's reads and writes. A small one is one
 * process_vm_readv/writev on the peer's pid (or a memcpy into memory its md allocated, mapped
 * here); from 64 KiB a job on the owner's desk (rdmach_shm.h, rdmach_shm_copy.c) that both
 * processes copy, in the background when it has a completion; a get up to STAGED_COPY staged by
 * the owner where that is faster here (rdmach_shm_pick.h).
 */
#include "rdmach_wire_shm_int.h"
#include "ucx_ext_sys.h"

#include <errno.h>
#include <string.h>
#include <sys/uio.h>

/* Is the destination of this zero copy one of the last few? A buffer received into again
 * (MPI's usual windowed bandwidth: 64 receives into one buffer; a ping-pong) is in the caches
 * of the cores that wrote it last. Chunks taken by whoever comes first move its lines between
 * the two cores on every copy; two fixed halves (rdmach_shm_copy_post_hot) leave each half
 * in one core's cache. Measured with perf/mpi_p2p (MPICH, one receive buffer, 2 alternating
 * rounds, GB/s; chunks taken by whoever comes first / fixed halves / sm): windowed bandwidth
 * 64 KiB 11.8 / 19.6-21.5 / 18.2-19.2, 256 KiB 22.2 / 34.9-36.1 / 23.7-23.9, 1 MiB 18.3 /
 * 44.5-45.0 / 10.3-15.6, 4 MiB 12.7-14.2 / 15.9-19.3 / 5.1-9.7; ping-pong latency 256 KiB
 * 12.1-12.8 / 7.2-7.5 / 11.4-11.5 us (medians). Buffers that differ each time (a pool out of
 * cache) keep the chunks: there two cores walking cold pages at once is what wins (2x). */
static int rdmach_shm_hot(rdmach_shm_wire_t *w, uint64_t dest)
{
    unsigned i;

    for (i = 0; i < RDMACH_SHM_RECENT; ++i) {
        if (w->recent[i] == dest) {
            return 1;
        }
    }
    w->recent[w->recent_next++ % RDMACH_SHM_RECENT] = dest;
    return 0;
}

/* A reader on our desk is a peer whose segment we map (it sends to us, or we to it): the desk
 * is writable by anyone who maps us, and we copy only for processes of this job. */
static int rdmach_shm_known_peer(void *arg, pid_t pid, uint64_t seg_id)
{
    const rdmach_shm_wire_t *w = arg;
    unsigned i;

    for (i = 0; i < w->npeers; ++i) {
        if ((w->peers[i].seg.hdr != NULL) && (w->peers[i].seg.pid == pid) &&
            (w->peers[i].seg_id == seg_id)) {
            return 1;
        }
    }
    return 0;
}

/* What our progress helps peers with (rdmach_shm_copy_help). */
rdmach_shm_helper_t rdmach_shm_helper(rdmach_shm_wire_t *w)
{
    const rdmach_shm_helper_t helper = {
        .known_peer   = rdmach_shm_known_peer,
        .arg          = w,
        .may_read     = w->super.params.may_read,
        .may_read_arg = w->super.params.may_read_arg
    };

    return helper;
}

/* A word of our segment's header that peers read (own_copies, stage_ways): stored only when
 * it changes, so its line moves to our core once per change, not per message. */
static inline void rdmach_shm_publish(volatile uint32_t *word, uint32_t value)
{
    if (*word != value) {
        __atomic_store_n(word, value, __ATOMIC_RELAXED);
    }
}

/* Tells peers whether we copy reads or writes of our own now (own_copies, rdmach_shm_rma_way) */
static inline void rdmach_shm_own_copies(rdmach_shm_wire_t *w, uint32_t busy)
{
    rdmach_shm_publish(&w->seg.hdr->own_copies, busy);
}

/* Busy, as peers see it, is a window of copies posted (two or more), not one: a ping-pong's
 * single get ends before its answer is sent, and its peer would only fetch the word's line
 * back and forth on every message. */
static inline void rdmach_shm_own_posted(rdmach_shm_wire_t *w)
{
    rdmach_shm_own_copies(w, (w->posted_busy & (w->posted_busy - 1)) != 0);
}

/* Our posted staged gets advanced, without their completions (we may be inside rma): the
 * pieces their owners staged are copied out, so that the owners go on, and the ones that end
 * give their desk slots back. Are some still going? */
static int rdmach_shm_posted_drain(rdmach_shm_wire_t *w)
{
    uint32_t busy = w->posted_busy;
    rdmach_shm_posted_t *p;
    int e, going = 0;

    while (busy != 0) {
        e     = __builtin_ctz(busy);
        busy &= busy - 1;
        p     = &w->posted[e];
        if (!p->req.staged || p->finished) {
            continue;
        }
        p->ret = rdmach_shm_copy_advance(&p->req, 0);
        if (p->ret == RDMACH_SHM_COPY_PENDING) {
            going = 1;
        } else {
            p->finished = 1;
        }
    }
    return going;
}

/* A staged get done at return (no completion, or every posted entry taken): we copy out what
 * the owner stages, and stage the pieces of our own desk meanwhile, since in bi-directional
 * traffic the owner may be waiting the same way for us. A window of gets fills the desk with
 * our posted ones: those are advanced (above) until a slot is free. -EBUSY: the desk is full
 * of other jobs. */
static int rdmach_shm_staged_run(rdmach_shm_wire_t *w, rdmach_shm_peer_t *peer, void *local,
                                 uint64_t remote_addr, size_t len, int timed)
{
    const rdmach_shm_helper_t helper = rdmach_shm_helper(w);
    rdmach_shm_copy_req_t req;
    int ret, settled = 0;

    while ((ret = rdmach_shm_copy_post_staged(&req, &peer->seg, peer->start_time, &w->seg,
                                              local, remote_addr, len, timed)) == -EBUSY) {
        /* once more after the last of ours ended: it may have freed a slot just now */
        if (!rdmach_shm_posted_drain(w) && settled++) {
            return ret;
        }
        RDMACH_WIRE_STATS(&w->super)->copy_helped += rdmach_shm_copy_help(&w->seg, &helper, 1);
    }
    if (ret != 0) {
        return ret;
    }
    while ((ret = rdmach_shm_copy_advance(&req, 0)) == RDMACH_SHM_COPY_PENDING) {
        RDMACH_WIRE_STATS(&w->super)->copy_helped += rdmach_shm_copy_help(&w->seg, &helper, 1);
        (void)rdmach_shm_posted_drain(w);
    }
    RDMACH_WIRE_STATS(&w->super)->copy_jobs++;
    RDMACH_WIRE_STATS(&w->super)->copy_staged++;
    RDMACH_WIRE_STATS(&w->super)->copy_unstaged += req.unstaged;
    w->work += req.work;
    return ret;
}

/* Tells peers which way our pick gave our latest get of len's class (stage_ways, read by
 * rdmach_shm_peer_walks; set at open to the first choices, rdmach_shm_open): an exploration's
 * turn too, so a peer reading from us meanwhile does not stage beside a turn of our page
 * walks. The pick's way, before rdmach_shm_peer_walks: were it the way taken, two processes
 * that each walked for the other would walk for good. Changes about once per period. */
static inline void rdmach_shm_publish_way(rdmach_shm_wire_t *w, size_t len, unsigned way)
{
    uint32_t bit  = 1u << rdmach_shm_pick_class_of(len);
    uint32_t ways = w->seg.hdr->stage_ways;

    rdmach_shm_publish(&w->seg.hdr->stage_ways,
                       (way & RDMACH_SHM_PICK_STAGED) ? (ways | bit) : (ways & ~bit));
}

/* Does the owner of a get of len bytes walk pages of its own meanwhile: a window of copies of
 * its own (own_copies), its gets of len's class not staged? Then our get takes the page walk
 * too. A staged get's pieces need the owner's core, which its own walks hold, while ours stay
 * light: of two processes reading from each other, one staging and one walking was the worst
 * pair (MPICH bi-directional 64 KiB 9-12 GB/s, both walking 15-16, both staging 20-21). Both
 * words are the owner's and anyone's who maps its segment: a lie only makes us walk, as we
 * may anyway. */
static inline int rdmach_shm_peer_walks(const rdmach_shm_peer_t *peer, size_t len)
{
    const rdmach_shm_hdr_t *hdr = peer->seg.hdr;

    return (__atomic_load_n(&hdr->own_copies, __ATOMIC_RELAXED) != 0) &&
           !((__atomic_load_n(&hdr->stage_ways, __ATOMIC_RELAXED) >>
              rdmach_shm_pick_class_of(len)) & 1);
}

/* A peer has copies on our desk: it reads from us (while we read from it, in a period) */
static inline void rdmach_shm_pick_note_peer(rdmach_shm_wire_t *w)
{
    w->pick_bidir |= (__atomic_load_n(&w->seg.hdr->copy_busy, __ATOMIC_RELAXED) != 0);
}

/* The clock at the open period's end (ns, on its start's). Where a peer had copies on our
 * desk meanwhile (its gets from us: both cores had copies of their own), the start plus the
 * work of both processes on our copies, so that a way is not judged by how long we waited
 * for a peer busy with its own (in bi-directional windows staging lost so, 9-11 GB/s against
 * 18-21 with both staging); else the wall clock, which counts a peer's idle core that helps
 * for free (a ping-pong, a window one way: there work would choose staging where the helped
 * page walk is faster, 1 MiB ping-pong 1.2-1.5x the latency). Every period of a class is
 * timed the same way while its traffic is. */
static uint64_t rdmach_shm_pick_clock(rdmach_shm_wire_t *w)
{
    rdmach_shm_pick_note_peer(w);
    if (w->pick_bidir) {
        return w->pick.period.t0 +
               (uint64_t)((double)(w->work - w->pick_work0) * w->ns_per_tick);
    }
    return ucx_ext_now_ns();
}

/* Nothing is posted any more: the timed period open, if any, ends; its decision counted. */
static void rdmach_shm_pick_idle(rdmach_shm_wire_t *w)
{
    int won;

    if (!rdmach_shm_pick_open(&w->pick)) {
        return;
    }
    won = rdmach_shm_pick_end(&w->pick, rdmach_shm_pick_clock(w));
    if (won >= 0) {
        RDMACH_WIRE_STATS(&w->super)->stage_picks++;
        RDMACH_WIRE_STATS(&w->super)->stage_picked += (unsigned)won;
    }
}

/* staged: a get that may be staged goes staged (rdmach_shm_pick_get's choice); timed: a
 * period is open, what its copies cost counts (w->work) */
static int rdmach_shm_rma_way(rdmach_wire_t *wire, rdmach_wire_peer_t *wire_peer,
                              const rdmach_wire_iov_t *local, size_t cnt, uint64_t remote_addr,
                              size_t len, int write, void *mapped, void *comp, int staged,
                              int timed)
{
    rdmach_shm_wire_t *w    = (rdmach_shm_wire_t*)wire;
    rdmach_shm_peer_t *peer = (rdmach_shm_peer_t*)wire_peer;
    struct iovec iov[RDMACH_WIRE_MAX_IOV];
    rdmach_shm_posted_t *p;
    uint64_t work, t0;
    size_t i;
    int ret, e, hot, busy;

    /* A peer that copies its own (a window posted, or one inside process_vm) helps nobody
     * until it is done (rdmach_shm_progress): on its desk our job is ours unless the peer comes
     * free first (bi-directional traffic: both read from each other). So the job goes in one
     * piece, one system call for whoever takes it, not in halves or chunks that only add
     * system calls of ours; done at return, it is one process_vm, as cma's. Staged pieces
     * need the owner all the same. */
    busy = !staged && (mapped == NULL) && (len >= RDMACH_SHM_COPY_MIN) &&
           (__atomic_load_n(&peer->seg.hdr->own_copies, __ATOMIC_RELAXED) != 0);
    if (busy) {
        RDMACH_WIRE_STATS(wire)->copy_owner_busy++;
        if ((comp == NULL) || (w->posted_busy == RDMACH_SHM_ALL(RDMACH_SHM_POSTED))) {
            goto direct;
        }
    }
    hot = (len >= RDMACH_SHM_COPY_MIN) && (cnt == 1) && !busy &&
          rdmach_shm_hot(w, write ? remote_addr : (uintptr_t)local[0].base);
    if ((len >= RDMACH_SHM_COPY_MIN) && (cnt == 1) && staged &&
        ((comp == NULL) || (w->posted_busy == RDMACH_SHM_ALL(RDMACH_SHM_POSTED)))) {
        ret = rdmach_shm_staged_run(w, peer, local[0].base, remote_addr, len, timed);
        if (ret != -EBUSY) {
            return ret;
        }
    } else if ((len >= RDMACH_SHM_COPY_MIN) && (cnt == 1)) {
        if ((comp != NULL) && (w->posted_busy != RDMACH_SHM_ALL(RDMACH_SHM_POSTED))) {
            /* in the background: the peer may copy it all before our next progress. A get of
             * up to stage_max is staged by the owner (rdmach_shm.h), whatever the buffer: the
             * reader writes all of its destination, the owner reads all of its source, so a
             * buffer copied into again stays in its core's cache without halves. Otherwise,
             * alone it is cut in chunks that both processes take; posted behind others, it
             * goes whole: the two processes then copy different ones at once (a window of
             * messages), one system call each (MPICH windowed bandwidth 64 KiB / 256 KiB
             * 17.5 / 20.8 GB/s against 13.5 / 15.2 cut in 8). Not into mapped memory: there
             * our chunks are memcpy, 3-4x the owner's process_vm, and a whole job the owner
             * took would bound the window by its rate (Win_allocate put bandwidth 31 GB/s
             * against 50). A buffer copied into again goes in two fixed halves
             * (rdmach_shm_hot). */
            e = __builtin_ctz(~w->posted_busy);
            p = &w->posted[e];
            if (staged) {
                ret = rdmach_shm_copy_post_staged(&p->req, &peer->seg, peer->start_time,
                                                  &w->seg, local[0].base, remote_addr, len,
                                                  timed);
            } else if (hot) {
                ret = rdmach_shm_copy_post_hot(&p->req, &peer->seg, peer->start_time, &w->seg,
                                               local[0].base, remote_addr, mapped, len, write,
                                               timed);
            } else {
                ret = rdmach_shm_copy_post(&p->req, &peer->seg, peer->start_time, &w->seg,
                                           local[0].base, remote_addr, mapped, len, write,
                                           (!busy && ((w->posted_busy == 0) || (mapped != NULL))) ?
                                           RDMACH_SHM_COPY_SPLIT : 1, timed);
            }
            if (ret == 0) {
                p->peer         = peer;
                p->comp         = comp;
                p->finished     = 0;
                ++peer->refs;
                w->posted_busy |= 1u << e;
                rdmach_shm_own_posted(w);
                RDMACH_WIRE_STATS(wire)->copy_jobs++;
                RDMACH_WIRE_STATS(wire)->copy_staged += staged;
                RDMACH_WIRE_STATS(wire)->copy_halves += hot && !staged;
                return RDMACH_WIRE_INPROGRESS;
            }
        } else if (!hot) {
            /* done at return (no completion, or 16 posted): shared all the same, but a
             * buffer copied into again is ours alone (below), halves taken by whoever comes
             * first would move between the cores */
            work = 0;
            ret  = (mapped != NULL) ? -EBUSY :
                   rdmach_shm_copy_run(&peer->seg, peer->start_time, &w->seg, local[0].base,
                                       remote_addr, len, write, timed ? &work : NULL);
            if (ret != -EBUSY) {
                RDMACH_WIRE_STATS(wire)->copy_jobs++;
                w->work += work;
                return ret;
            }
        }
    }
    if (mapped != NULL) {
        /* the desk is full (or a list of buffers): the glue's copy */
        rdmach_wire_iov_copy_mapped(mapped, local, cnt, write);
        return 0;
    }
direct:
    for (i = 0; i < cnt; ++i) {
        iov[i].iov_base = local[i].base;
        iov[i].iov_len  = local[i].len;
    }
    if (len >= RDMACH_SHM_COPY_MIN) {
        rdmach_shm_own_copies(w, 1);   /* a peer reading from us now expects no help */
    }
    t0       = timed ? ucx_ext_ticks() : 0;
    ret      = ucx_ext_process_vm(peer->seg.pid, iov, cnt, remote_addr, len, write);
    w->work += timed ? ucx_ext_ticks() - t0 : 0;
    rdmach_shm_own_posted(w);
    return ret;
}

/* A get that may be staged goes the way rdmach_shm_pick measured faster (or, without
 * params.stage_measure, staged); a period of them is timed from the get that opens it until
 * nothing is posted (here, or in rdmach_shm_posted_progress). Any other copy in the period
 * spoils it. */
int rdmach_shm_rma(rdmach_wire_t *wire, rdmach_wire_peer_t *wire_peer,
                   const rdmach_wire_iov_t *local, size_t cnt, uint64_t remote_addr,
                   uint32_t rkey, size_t len, int write, void *mapped, void *comp)
{
    rdmach_shm_wire_t *w = (rdmach_shm_wire_t*)wire;
    unsigned way         = 0;
    int ret, timed;

    (void)rkey;   /* checked by the glue against pid and region */
    if (cnt > RDMACH_WIRE_MAX_IOV) {
        return -EINVAL;
    }
    if (!write && (mapped == NULL) && (cnt == 1) && (len >= RDMACH_SHM_COPY_MIN) &&
        (len <= w->super.params.stage_max)) {
        way = !w->super.params.stage_measure ? RDMACH_SHM_PICK_STAGED :
              rdmach_shm_pick_get(&w->pick, len, w->posted_busy == 0);
        if (way & RDMACH_SHM_PICK_TIMED) {
            w->pick_work0 = w->work;
            w->pick_bidir = 0;
            rdmach_shm_pick_start(&w->pick, ucx_ext_now_ns());
        }
        rdmach_shm_publish_way(w, len, way);
        if ((way & RDMACH_SHM_PICK_STAGED) &&
            rdmach_shm_peer_walks((const rdmach_shm_peer_t*)wire_peer, len)) {
            way &= ~RDMACH_SHM_PICK_STAGED;
            rdmach_shm_pick_spoil(&w->pick);   /* a staged turn that walked times nothing */
            RDMACH_WIRE_STATS(wire)->stage_peer_walks++;
        }
    } else {
        rdmach_shm_pick_spoil(&w->pick);   /* (no period open: nothing to spoil) */
    }
    timed = rdmach_shm_pick_open(&w->pick);
    if (timed) {
        rdmach_shm_pick_note_peer(w);
    }
    ret = rdmach_shm_rma_way(wire, wire_peer, local, cnt, remote_addr, len, write, mapped,
                             comp, way & RDMACH_SHM_PICK_STAGED, timed);
    if (ret < 0) {
        rdmach_shm_pick_spoil(&w->pick);   /* a failed get times nothing */
    }
    if ((ret != RDMACH_WIRE_INPROGRESS) && (w->posted_busy == 0)) {
        rdmach_shm_pick_idle(w);
    }
    return ret;
}

/* Posted copies to peer (NULL: any), as bits of posted_busy. */
static uint32_t rdmach_shm_posted_to(const rdmach_shm_wire_t *w, const rdmach_shm_peer_t *peer)
{
    uint32_t busy = w->posted_busy, mask = 0;
    int e;

    while (busy != 0) {
        e     = __builtin_ctz(busy);
        busy &= busy - 1;
        if ((peer == NULL) || (w->posted[e].peer == peer)) {
            mask |= 1u << e;
        }
    }
    return mask;
}

/* Advances the posted copies; each one done completes, then the flushes that waited for it
 * and nothing else. An entry is free before its completion runs, which may post again. */
unsigned rdmach_shm_posted_progress(rdmach_shm_wire_t *w)
{
    uint32_t busy = w->posted_busy, bit, ready;
    rdmach_shm_posted_t *p;
    rdmach_shm_flush_t done[RDMACH_SHM_FLUSHES];
    unsigned count = 0, ndone = 0, i;
    void *comp;
    int e, f, ret;

    while (busy != 0) {
        e     = __builtin_ctz(busy);
        busy &= busy - 1;
        p     = &w->posted[e];
        ret   = p->finished ? p->ret : rdmach_shm_copy_advance(&p->req, 0);
        if (ret == RDMACH_SHM_COPY_PENDING) {
            continue;
        }
        bit             = 1u << e;
        comp            = p->comp;
        RDMACH_WIRE_STATS(&w->super)->copy_unstaged += p->req.staged && p->req.unstaged;
        w->work        += p->req.work;
        w->posted_busy &= ~bit;
        rdmach_shm_own_posted(w);
        rdmach_shm_peer_put(p->peer);
        if (ret != 0) {
            rdmach_shm_pick_spoil(&w->pick);
        }
        if (w->posted_busy == 0) {
            rdmach_shm_pick_idle(w);   /* before the completion, which may post again */
        }
        /* the flushes this one ends, taken off their slots before any callback runs */
        ready = w->flush_busy;
        while (ready != 0) {
            f      = __builtin_ctz(ready);
            ready &= ready - 1;
            if (w->flushes[f].waits & bit) {
                w->flushes[f].waits &= ~bit;
                w->flushes[f].err    = (w->flushes[f].err != 0) ? w->flushes[f].err : ret;
                if (w->flushes[f].waits == 0) {
                    done[ndone++]  = w->flushes[f];
                    w->flush_busy &= ~(1u << f);
                }
            }
        }
        w->super.params.complete(comp, ret);
        ++count;
    }
    for (i = 0; i < ndone; ++i) {
        w->super.params.complete(done[i].comp, done[i].err);
    }
    return count;
}

/* Posted copies to the peer still going: done later, with comp, or asked again (no comp). */
int rdmach_shm_flush(rdmach_wire_t *wire, rdmach_wire_peer_t *wire_peer, void *comp)
{
    rdmach_shm_wire_t *w = (rdmach_shm_wire_t*)wire;
    uint32_t waits       = rdmach_shm_posted_to(w, (rdmach_shm_peer_t*)wire_peer);
    int f;

    if (waits == 0) {
        return 0;
    } else if (comp == NULL) {
        return RDMACH_WIRE_INPROGRESS;
    } else if (w->flush_busy == RDMACH_SHM_ALL(RDMACH_SHM_FLUSHES)) {
        return -EAGAIN;
    }
    f                    = __builtin_ctz(~w->flush_busy);
    w->flushes[f].waits  = waits;
    w->flushes[f].err    = 0;
    w->flushes[f].comp   = comp;
    w->flush_busy       |= 1u << f;
    return RDMACH_WIRE_INPROGRESS;
}

/* At close: the posted copies finished (waiting for the chunks the peers copy: they write
 * into or read from our memory), their completions dropped with the iface. */
void rdmach_shm_settle(rdmach_shm_wire_t *w)
{
    uint32_t busy = w->posted_busy;
    int e;

    while (busy != 0) {
        e     = __builtin_ctz(busy);
        busy &= busy - 1;
        if (!w->posted[e].finished) {
            (void)rdmach_shm_copy_advance(&w->posted[e].req, 1);   /* close unmaps the peers */
        }
    }
    w->posted_busy = 0;
    rdmach_shm_own_posted(w);
}

