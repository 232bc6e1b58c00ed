/*
 * rdmach shared-memory wire: the wire table (rdmach_wire.h) over rdmach_shm.[ch], its only user.
 *
 * Our rings live in one memfd segment; a peer's segment is mapped once, when we first send to
 * it or it first sends to us. From then on a record and a credit return are plain stores into
 * mapped memory (the ring hooks are NULL), and the RDMA channel's RDMA read/write (put, get,
 * zero copy) is process_vm_readv/writev on the peer's pid; a large one is copied by both ends at
 * once (the desk of rdmach_shm.h, rdmach_shm_copy.c).
 *
 * Churn: a peer whose iface closed (the closed word of its segment) or whose process died has
 * gone for good. reap takes back the rings such senders held in us (drained, zeroed, into the
 * free map); unclaim gives up our ring in such a receiver (its credit line back). A peer's
 * segment is unmapped with its last ring, and its entry reused: memory and descriptors follow
 * the peers present, not all the peers ever met.
 *
 * Wakeup: the segment carries our eventfd's number, our asleep word and whether we can make
 * senders' stores visible (membarrier); a sender takes its own descriptor of the eventfd
 * when it maps us (rdmach_shm_attach), and writes it from the ring's wake hook.
 */
#include "rdmach_wire.h"
#include "rdmach_shm.h"
#include "rdmach_shm_pick.h"
#include "ucx_ext_sys.h"
#include "ucx_ext_wake.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

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
/* Destinations of the last zero copies, to tell a buffer copied into again (rdmach_shm_hot) */
#define RDMACH_SHM_RECENT  4

typedef struct rdmach_shm_posted {
    rdmach_shm_copy_req_t req;
    rdmach_shm_peer_t     *peer;    /* holds a reference: its segment stays mapped */
    void                  *comp;
    int                   finished; /* the copy is over (ret), its completion not yet run:
                                     * finished inside rma, which calls no completion */
    int                   ret;
    unsigned              way;      /* its rdmach_shm_pick bits */
    int                   alone;    /* no other posted copy ran beside it (a timed get) */
    uint64_t              t_post;   /* ns, of a timed get */
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
    rdmach_shm_pick_t pick;         /* gets that could be staged: staged or not */
} rdmach_shm_wire_t;

_Static_assert(RDMACH_SHM_STAGE_MAX == RDMACH_WIRE_STAGE_MAX, "STAGED_COPY's range");
_Static_assert(RDMACH_SHM_POSTED <= 32 && RDMACH_SHM_FLUSHES <= 32, "32-bit masks");

#define RDMACH_SHM_LOG(_w, _error, ...) RDMACH_WIRE_LOG(&(_w)->super, _error, __VA_ARGS__)

static void rdmach_shm_settle(rdmach_shm_wire_t *w);

static unsigned rdmach_shm_query_devices(rdmach_wire_domain_t *domain, rdmach_wire_dev_t *devs,
                                         unsigned max)
{
    (void)domain;
    if (max == 0) {
        return 0;
    }
    snprintf(devs[0].name, sizeof(devs[0].name), "%s", "memory");   /* UCT_SM_DEVICE_NAME */
    devs[0].type = RDMACH_WIRE_DEV_SHM;
    return 1;
}

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

static int rdmach_shm_open(const rdmach_wire_params_t *params, rdmach_wire_t **wire_p)
{
    rdmach_shm_wire_t *w = calloc(1, sizeof(*w));
    int ret;

    if (w == NULL) {
        return -ENOMEM;
    }
    w->super.params     = *params;
    if (params->stage_measure && (params->stage_max > 0)) {
        uint64_t walk, copy;
        int staged = rdmach_shm_pick_probe(&walk, &copy);

        rdmach_shm_pick_init(&w->pick, staged);
        RDMACH_SHM_LOG(w, RDMACH_WIRE_LOG_INFO, "rdmach: a 64 KiB process_vm_readv took %.1f us "
                       "and a memcpy %.1f: gets up to %zu bytes %s first (UCX_RDMACH_STAGED_PICK)",
                       walk / 1e3, copy / 1e3, params->stage_max,
                       staged ? "staged" : "by the page walk");
    }
    w->super.latency    = 80e-9;      /* a record's stores seen by the peer's poll */
    w->super.max_inline = SIZE_MAX;   /* put_short is a process_vm_writev or a memcpy */
    w->max_peers        = params->max_peers;
    w->peers        = calloc(w->max_peers, sizeof(*w->peers));
    w->rx_peer      = calloc(params->max_rings, sizeof(*w->rx_peer));
    w->free_credits = calloc(params->max_rings, sizeof(*w->free_credits));
    if ((w->peers == NULL) || (w->rx_peer == NULL) || (w->free_credits == NULL)) {
        free(w->peers);
        free(w->rx_peer);
        free(w->free_credits);
        free(w);
        return -ENOMEM;
    }

    /* peers read and write our memory with process_vm_readv/writev (the RDMA read/write of
     * this wire); under Yama ptrace_scope=1 that needs our consent. No Yama: EINVAL, fine. */
    (void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);

    ret = rdmach_shm_create(&w->seg, &params->geom, &params->geom_large, params->large_rings,
                            params->max_rings, params->uuid);
    if (ret != 0) {
        RDMACH_SHM_LOG(w, 1, "rdmach: cannot create shared memory segment: %s", strerror(-ret));
        free(w->peers);
        free(w->rx_peer);
        free(w->free_credits);
        free(w);
        return -ENOMEM;
    }

    w->super.ops         = &rdmach_wire_shm_ops;
    w->super.geom        = params->geom;
    w->super.max_rings   = params->max_rings;
    w->super.next_credit = 0;
    w->super.doorbells   = rdmach_shm_doorbells(&w->seg);
    w->super.next_ring   = &w->seg.hdr->next_ring;
    w->super.size        = w->seg.size;
    w->super.rma_async_min = RDMACH_SHM_COPY_MIN;
    w->super.quiet[0]    = &w->posted_busy;             /* rdmach_shm_progress's two looks */
    w->super.quiet[1]    = &w->seg.hdr->copy_active;
    *wire_p              = &w->super;
    return 0;
}

static void rdmach_shm_close(rdmach_wire_t *wire)
{
    rdmach_shm_wire_t *w = (rdmach_shm_wire_t*)wire;
    unsigned i;

    /* posted copies end here, without completions: the iface is going */
    rdmach_shm_settle(w);
    rdmach_shm_close_mark(&w->seg);     /* before anything goes: peers may still look */
    for (i = 0; i < w->npeers; ++i) {
        rdmach_shm_detach(&w->peers[i].seg);
    }
    rdmach_shm_detach(&w->seg);
    free(w->peers);
    free(w->rx_peer);
    free(w->free_credits);
    free(w);
}

static void rdmach_shm_pack_addr(const rdmach_wire_t *wire, void *buf)
{
    const rdmach_shm_wire_t *w = (const rdmach_shm_wire_t*)wire;
    rdmach_shm_addr_t addr     = {w->seg.pid, w->seg.fd, w->seg.seg_id};

    memcpy(buf, &addr, sizeof(addr));
}

static int rdmach_shm_unpack_addr(const rdmach_wire_t *wire, const void *dev_addr,
                                  const void *iface_addr, rdmach_wire_addr_t *info)
{
    rdmach_shm_addr_t addr;

    (void)wire;
    (void)dev_addr;   /* this host: the glue checked the IPC namespace */
    memcpy(&addr, iface_addr, sizeof(addr));
    if ((addr.pid <= 0) || (addr.fd < 0)) {
        return -EINVAL;
    }
    info->pid = addr.pid;
    snprintf(info->name, sizeof(info->name), "pid %d", (int)addr.pid);
    return 0;
}

/* Maps (or finds) a peer's segment: the same table serves the rings we send into and the credit
 * lines we write, so each peer segment is mapped once. */
static int rdmach_shm_peer(rdmach_shm_wire_t *w, pid_t pid, int32_t fd, uint64_t seg_id,
                           rdmach_shm_peer_t **peer_p)
{
    rdmach_shm_peer_t *peer;
    unsigned i;
    int ret;

    for (i = 0; i < w->npeers; ++i) {
        peer = &w->peers[i];
        if ((peer->seg.hdr != NULL) && (peer->seg.pid == pid) && (peer->fd == fd) &&
            (peer->seg_id == seg_id)) {
            if (rdmach_shm_closed(&peer->seg)) {
                return -ENOENT;     /* that iface has closed since */
            }
            *peer_p = peer;
            return 0;
        }
    }

    /* an entry given back (its peer gone), else a new one */
    for (i = 0; (i < w->npeers) && (w->peers[i].seg.hdr != NULL); ++i) {
    }
    if (i == w->max_peers) {
        RDMACH_SHM_LOG(w, 1, "rdmach: more than %u peer segments mapped (UCX_RDMACH_MAX_PEERS)",
                       w->max_peers);
        return -ENOSPC;
    }

    peer = &w->peers[i];
    ret  = rdmach_shm_attach(&peer->seg, pid, fd, seg_id);
    if (ret != 0) {
        RDMACH_SHM_LOG(w, 0, "rdmach: cannot map segment of pid %d fd %d: %s", (int)pid, fd,
                       (ret == -EPROTO) ? "not a compatible rdmach segment" : strerror(-ret));
        return ret;
    }
    peer->fd              = fd;
    peer->seg_id          = seg_id;
    peer->start_time      = ucx_ext_proc_start_time(pid);
    peer->refs            = 0;
    peer->super.geom      = peer->seg.geom;
    peer->super.max_rings = peer->seg.max_rings;
    if (i == w->npeers) {
        ++w->npeers;
    }
    *peer_p = peer;
    return 0;
}

/* A peer's segment is unmapped with its last ring, either way: memory and descriptors stay
 * bounded however many peers come and go. */
static void rdmach_shm_peer_put(rdmach_shm_peer_t *peer)
{
    if (--peer->refs == 0) {
        rdmach_shm_detach(&peer->seg);
    }
}

/* Its iface has closed, or (when procs) its process is gone: nothing more comes from it or
 * goes to it. */
static int rdmach_shm_peer_gone(const rdmach_shm_peer_t *peer, int procs)
{
    return rdmach_shm_closed(&peer->seg) ||
           (procs && !ucx_ext_proc_alive(peer->seg.pid, peer->start_time));
}

static int rdmach_shm_attach_peer(rdmach_wire_t *wire, const void *iface_addr,
                                  rdmach_wire_peer_t **peer_p)
{
    rdmach_shm_peer_t *peer;
    rdmach_shm_addr_t addr;
    int ret;

    memcpy(&addr, iface_addr, sizeof(addr));
    ret = rdmach_shm_peer((rdmach_shm_wire_t*)wire, addr.pid, addr.fd, addr.seg_id, &peer);
    if (ret == 0) {
        *peer_p = &peer->super;
    }
    return ret;
}

/* peer_info of a ring on this wire: the sender's pid; its credit line (high 32 bits) and memfd
 * (low 32 bits); its segment id. */
static int rdmach_shm_claim(rdmach_wire_t *wire, rdmach_wire_peer_t *wire_peer, rdmach_tx_t *tx,
                            uint32_t *ring_id_p)
{
    rdmach_shm_wire_t *w    = (rdmach_shm_wire_t*)wire;
    rdmach_shm_peer_t *peer = (rdmach_shm_peer_t*)wire_peer;
    rdmach_ring_ctl_t *ctl;
    uint32_t credit, id;
    int ret;

    if ((w->nfree_credits == 0) && (wire->next_credit >= wire->max_rings)) {
        return -ENOBUFS;
    }
    ret = rdmach_shm_claim_ring(&peer->seg);
    if (ret < 0) {
        if (peer->refs == 0) {
            rdmach_shm_detach(&peer->seg);  /* mapped for this claim alone */
        }
        return ret;
    }
    id     = (uint32_t)ret;
    credit = (w->nfree_credits > 0) ? w->free_credits[--w->nfree_credits] :
             wire->next_credit++;
    rdmach_shm_credit(&w->seg, credit)->tail = 0;   /* nothing of a former receiver's */
    ++peer->refs;

    /* describe ourselves, then publish the claim: the receiver looks only after owner != 0 */
    ctl               = rdmach_shm_ring_ctl(&peer->seg, id);
    ctl->peer_info[0] = (uint64_t)getpid();
    ctl->peer_info[1] = ((uint64_t)credit << 32) | (uint32_t)w->seg.fd;
    ctl->peer_info[2] = w->seg.seg_id;
    __atomic_store_n(&ctl->owner, 1, __ATOMIC_RELEASE);

    rdmach_tx_init(tx, rdmach_shm_ring_geom(&peer->seg, id),
                   rdmach_shm_ring_slots(&peer->seg, id), ctl,
                   rdmach_shm_doorbells(&peer->seg) + id,
                   &rdmach_shm_credit(&w->seg, credit)->tail, &rdmach_wire_shm_ops.ring, peer);
    tx->asleep = &peer->seg.hdr->asleep;
    tx->fence  = (uint32_t)peer->seg.no_barrier;
    rdmach_shm_ring_prefault(&peer->seg, id, 1);
    *ring_id_p = id;
    return 0;
}

/* The owner of ring id: the process whose segment activate mapped for it (its pid from
 * the ring's control block, proven by /proc/<pid>/fd/<fd> being that rdmach segment). */
static int rdmach_shm_ring_sender(const rdmach_wire_t *wire, uint32_t id, int32_t *pid)
{
    const rdmach_shm_wire_t *w = (const rdmach_shm_wire_t*)wire;

    if ((id >= wire->max_rings) || (w->rx_peer[id] == NULL)) {
        return -ENOENT;
    }
    *pid = w->rx_peer[id]->seg.pid;
    return 0;
}

static int rdmach_shm_activate(rdmach_wire_t *wire, uint32_t id, rdmach_rx_t *rx)
{
    rdmach_shm_wire_t *w   = (rdmach_shm_wire_t*)wire;
    rdmach_ring_ctl_t *ctl = rdmach_shm_ring_ctl(&w->seg, id);
    static uint64_t dummy_tail;
    volatile uint64_t *tail_out = &dummy_tail;
    rdmach_shm_peer_t *peer;
    uint64_t credit;

    if (__atomic_load_n(&ctl->owner, __ATOMIC_ACQUIRE) == 0) {
        return 0;   /* claimed but not yet described */
    }

    credit = ctl->peer_info[1] >> 32;
    if (rdmach_shm_peer(w, (pid_t)ctl->peer_info[0], (int32_t)(ctl->peer_info[1] & 0xffffffffu),
                        ctl->peer_info[2], &peer) == 0) {
        if (credit < peer->seg.max_rings) {
            tail_out = &rdmach_shm_credit(&peer->seg, (uint32_t)credit)->tail;
        } else if (wire->params.stats != NULL) {
            wire->params.stats->corrupt++;
        }
        ++peer->refs;
        w->rx_peer[id] = peer;
    }
    /* a sender we cannot reach still gets its messages delivered; only its credit is lost */
    rdmach_rx_init(rx, rdmach_shm_ring_geom(&w->seg, id), rdmach_shm_ring_slots(&w->seg, id),
                   ctl, tail_out, &rdmach_wire_shm_ops.ring, wire);
    if (id < w->seg.large_rings) {
        RDMACH_WIRE_STATS(wire)->large_rings++;
    }
    rdmach_shm_ring_prefault(&w->seg, id, 0);
    return 1;
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
static rdmach_shm_helper_t rdmach_shm_helper(rdmach_shm_wire_t *w)
{
    const rdmach_shm_helper_t helper = {
        .known_peer   = rdmach_shm_known_peer,
        .arg          = w,
        .may_read     = w->super.params.may_read,
        .may_read_arg = w->super.params.may_read_arg
    };

    return helper;
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
                                 uint64_t remote_addr, size_t len)
{
    const rdmach_shm_helper_t helper = rdmach_shm_helper(w);
    rdmach_shm_copy_req_t req;
    int ret, settled = 0;

    while ((ret = rdmach_shm_copy_post_staged(&req, &peer->seg, peer->start_time, &w->seg,
                                              local, remote_addr, len)) == -EBUSY) {
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
    return ret;
}

static uint64_t rdmach_shm_now_ns(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* A timed get that ran alone is over: its time to rdmach_shm_pick, its decision counted. */
static void rdmach_shm_picked(rdmach_shm_wire_t *w, size_t len, unsigned way, uint64_t t0)
{
    int won = rdmach_shm_pick_sample(&w->pick, len, way, rdmach_shm_now_ns() - t0);

    if (won >= 0) {
        RDMACH_WIRE_STATS(&w->super)->stage_picks++;
        RDMACH_WIRE_STATS(&w->super)->stage_picked += (unsigned)won;
    }
}

/* way: rdmach_shm_pick's bits for a get that may be staged (0 otherwise); t0: its start */
static int rdmach_shm_rma_way(rdmach_wire_t *wire, rdmach_wire_peer_t *wire_peer,
                              const rdmach_wire_iov_t *local, size_t cnt, uint64_t remote_addr,
                              size_t len, int write, void *mapped, void *comp, unsigned way,
                              uint64_t t0)
{
    rdmach_shm_wire_t *w    = (rdmach_shm_wire_t*)wire;
    rdmach_shm_peer_t *peer = (rdmach_shm_peer_t*)wire_peer;
    struct iovec iov[RDMACH_WIRE_MAX_IOV];
    rdmach_shm_posted_t *p;
    size_t i;
    uint32_t others;
    int ret, e, hot, staged = way & RDMACH_SHM_PICK_STAGED;

    hot = (len >= RDMACH_SHM_COPY_MIN) && (cnt == 1) &&
          rdmach_shm_hot(w, write ? remote_addr : (uintptr_t)local[0].base);
    if ((len >= RDMACH_SHM_COPY_MIN) && (cnt == 1) && staged &&
        ((comp == NULL) || (w->posted_busy == RDMACH_SHM_ALL(RDMACH_SHM_POSTED)))) {
        ret = rdmach_shm_staged_run(w, peer, local[0].base, remote_addr, len);
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
                                                  &w->seg, local[0].base, remote_addr, len);
            } else if (hot) {
                ret = rdmach_shm_copy_post_hot(&p->req, &peer->seg, peer->start_time, &w->seg,
                                               local[0].base, remote_addr, mapped, len, write);
            } else {
                ret = rdmach_shm_copy_post(&p->req, &peer->seg, peer->start_time, &w->seg,
                                           local[0].base, remote_addr, mapped, len, write,
                                           ((w->posted_busy == 0) || (mapped != NULL)) ?
                                           RDMACH_SHM_COPY_SPLIT : 1);
            }
            if (ret == 0) {
                p->peer         = peer;
                p->comp         = comp;
                p->finished     = 0;
                p->way          = way;
                p->t_post       = t0;
                p->alone        = (w->posted_busy == 0);
                for (others = w->posted_busy; others != 0; others &= others - 1) {
                    w->posted[__builtin_ctz(others)].alone = 0;   /* they share the cores */
                }
                ++peer->refs;
                w->posted_busy |= 1u << e;
                RDMACH_WIRE_STATS(wire)->copy_jobs++;
                RDMACH_WIRE_STATS(wire)->copy_staged += staged;
                RDMACH_WIRE_STATS(wire)->copy_halves += hot && !staged;
                return RDMACH_WIRE_INPROGRESS;
            }
        } else if (!hot) {
            /* done at return (no completion, or 16 posted): shared all the same, but a
             * buffer copied into again is ours alone (below), halves taken by whoever comes
             * first would move between the cores */
            ret = (mapped != NULL) ? -EBUSY :
                  rdmach_shm_copy_run(&peer->seg, peer->start_time, &w->seg, local[0].base,
                                      remote_addr, len, write);
            if (ret != -EBUSY) {
                RDMACH_WIRE_STATS(wire)->copy_jobs++;
                return ret;
            }
        }
    }
    if (mapped != NULL) {
        /* the desk is full (or a list of buffers): the glue's copy */
        rdmach_wire_iov_copy_mapped(mapped, local, cnt, write);
        return 0;
    }
    for (i = 0; i < cnt; ++i) {
        iov[i].iov_base = local[i].base;
        iov[i].iov_len  = local[i].len;
    }
    return ucx_ext_process_vm(peer->seg.pid, iov, cnt, remote_addr, len, write);
}

/* A get that may be staged goes the way rdmach_shm_pick measured faster (or, without
 * params.stage_measure, staged); an exploring one is timed, here if it ends at return, at its
 * completion if posted. */
static int rdmach_shm_rma(rdmach_wire_t *wire, rdmach_wire_peer_t *wire_peer,
                          const rdmach_wire_iov_t *local, size_t cnt, uint64_t remote_addr,
                          uint32_t rkey, size_t len, int write, void *mapped, void *comp)
{
    rdmach_shm_wire_t *w = (rdmach_shm_wire_t*)wire;
    unsigned way         = 0;
    uint64_t t0          = 0;
    int ret;

    (void)rkey;   /* checked by the glue against pid and region */
    if (cnt > RDMACH_WIRE_MAX_IOV) {
        return -EINVAL;
    }
    if (!write && (mapped == NULL) && (cnt == 1) && (len >= RDMACH_SHM_COPY_MIN) &&
        (len <= w->super.params.stage_max)) {
        way = !w->super.params.stage_measure ? RDMACH_SHM_PICK_STAGED :
              rdmach_shm_pick(&w->pick, len, w->posted_busy == 0);
        t0  = (way & RDMACH_SHM_PICK_TIMED) ? rdmach_shm_now_ns() : 0;
    }
    ret = rdmach_shm_rma_way(wire, wire_peer, local, cnt, remote_addr, len, write, mapped,
                             comp, way, t0);
    if ((way & RDMACH_SHM_PICK_TIMED) && (ret != RDMACH_WIRE_INPROGRESS)) {
        rdmach_shm_picked(w, len, way, t0);
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
static unsigned rdmach_shm_posted_progress(rdmach_shm_wire_t *w)
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
        if ((p->way & RDMACH_SHM_PICK_TIMED) && p->alone) {
            rdmach_shm_picked(w, p->req.len, p->way, p->t_post);
        }
        bit             = 1u << e;
        comp            = p->comp;
        RDMACH_WIRE_STATS(&w->super)->copy_unstaged += p->req.staged && p->req.unstaged;
        w->posted_busy &= ~bit;
        rdmach_shm_peer_put(p->peer);
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
static int rdmach_shm_flush(rdmach_wire_t *wire, rdmach_wire_peer_t *wire_peer, void *comp)
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
static void rdmach_shm_settle(rdmach_shm_wire_t *w)
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
}

/* Our own posted copies first; chunks of the cooperative copies peers opened on our desk only
 * when we have none, but for the pieces of staged gets. Help is worth a core that would
 * otherwise wait (a rendezvous sender until the ATS, a passive target); a process with reads
 * of its own (bi-directional traffic: both read at once) only adds the claim traffic, and the
 * reader it would have helped copies the chunks itself anyway. */
static unsigned rdmach_shm_progress(rdmach_wire_t *wire)
{
    rdmach_shm_wire_t *w = (rdmach_shm_wire_t*)wire;
    const int own_copies = (w->posted_busy != 0);
    unsigned count       = 0, helped;
    rdmach_shm_helper_t helper;

    if (own_copies) {
        count = rdmach_shm_posted_progress(w);
    }
    /* staging a piece is a memcpy: worth doing between our own copies too, where both read
     * at once (bi-directional traffic), each then copying out what the other staged */
    if (__atomic_load_n(&w->seg.hdr->copy_active, __ATOMIC_RELAXED) != 0) {
        helper = rdmach_shm_helper(w);
        helped = rdmach_shm_copy_help(&w->seg, &helper, own_copies);
        RDMACH_WIRE_STATS(wire)->copy_helped += helped;
        count += helped;
    }
    return count;
}

/* Rings whose sender has gone (checked once per peer), each drained by the glue and then made
 * claimable again. A ring whose sender we could not map is never taken back. */
static unsigned rdmach_shm_reap(rdmach_wire_t *wire, int procs,
                                void (*drain)(void *arg, uint32_t ring_id), void *arg)
{
    rdmach_shm_wire_t *w = (rdmach_shm_wire_t*)wire;
    uint32_t id, claimed = rdmach_shm_claimed(&w->seg);
    unsigned i, n = 0;
    rdmach_shm_peer_t *peer;
    int any = 0;

    for (i = 0; i < w->npeers; ++i) {
        peer = &w->peers[i];
        peer->super.gone = (peer->seg.hdr != NULL) && rdmach_shm_peer_gone(peer, procs);
        if (peer->super.gone) {
            /* jobs it left on our desk */
            rdmach_shm_copy_reap(&w->seg, peer->seg.pid, peer->seg_id);
        }
        any |= peer->super.gone;
    }
    if (!any) {
        return 0;
    }
    for (id = 0; id < claimed; ++id) {
        peer = w->rx_peer[id];
        if ((peer == NULL) || !peer->super.gone) {
            continue;
        }
        drain(arg, id);
        w->rx_peer[id] = NULL;
        rdmach_shm_free_ring(&w->seg, id);
        rdmach_shm_peer_put(peer);
        ++n;
    }
    return n;
}

/* Our ring in a peer that has gone: its credit line comes back (nobody writes it any more). */
static void rdmach_shm_unclaim(rdmach_wire_t *wire, rdmach_wire_peer_t *wire_peer,
                               const rdmach_tx_t *tx)
{
    rdmach_shm_wire_t *w    = (rdmach_shm_wire_t*)wire;
    rdmach_shm_peer_t *peer = (rdmach_shm_peer_t*)wire_peer;
    uint32_t credit = (uint32_t)((const rdmach_shm_credit_t*)tx->tail_copy -
                                 rdmach_shm_credit(&w->seg, 0));

    if (credit < wire->max_rings) {
        w->free_credits[w->nfree_credits++] = credit;
    }
    rdmach_shm_peer_put(peer);
}

/* ---- wakeup (ucx_ext_wake.h) ---- */

/* A sender's record found the receiver asleep and took its word back: write its eventfd. */
static void rdmach_shm_wake(void *ctx)
{
    rdmach_shm_peer_t *peer = ctx;
    int ret = (peer->seg.wake_fd >= 0) ? ucx_ext_wake_fd_signal(peer->seg.wake_fd) : -EBADF;

    if (ret != 0) {
        /* no shared wire here to log through: the receiver will look at its rings again
         * at its next arm or progress */
        fprintf(stderr, "rdmach: cannot wake pid %d: %s\n", (int)peer->seg.pid,
                strerror(-ret));
    }
}

static int rdmach_shm_event_fd(const rdmach_wire_t *wire)
{
    return ((const rdmach_shm_wire_t*)wire)->seg.wake_fd;
}

static int rdmach_shm_sleep(rdmach_wire_t *wire)
{
    rdmach_shm_wire_t *w = (rdmach_shm_wire_t*)wire;

    ucx_ext_wake_fd_drain(w->seg.wake_fd);
    __atomic_store_n(&w->seg.hdr->asleep, 1, __ATOMIC_SEQ_CST);
    ucx_ext_wake_barrier();
    return 0;
}

static void rdmach_shm_awake(rdmach_wire_t *wire)
{
    __atomic_store_n(&((rdmach_shm_wire_t*)wire)->seg.hdr->asleep, 0, __ATOMIC_RELAXED);
}

static int rdmach_shm_peer_closed(const rdmach_wire_t *wire, const rdmach_wire_peer_t *peer)
{
    (void)wire;
    return rdmach_shm_closed(&((const rdmach_shm_peer_t*)peer)->seg);
}

const rdmach_wire_ops_t rdmach_wire_shm_ops = {
    .name           = "shm",
    .caps           = {
        .this_host      = 1,
        .to_ep          = 0,
        .copy_cores     = 2,
        .zcopy_overhead = 500e-9,
        .slot_size      = 128,
        .eager_limit    = 64 * 1024,
        .zcopy_thresh   = 64 * 1024,
        .flush_comp     = 1,
        .arm_sends      = 0,
        .overhead       = 10e-9
    },
    .query_domains  = NULL,           /* the register-only md */
    .query_devices  = rdmach_shm_query_devices,
    .open           = rdmach_shm_open,
    .close          = rdmach_shm_close,
    .dev_addr_len   = 0,
    .pack_dev_addr  = NULL,
    .iface_addr_len = sizeof(rdmach_shm_addr_t),
    .pack_addr      = rdmach_shm_pack_addr,
    .unpack_addr    = rdmach_shm_unpack_addr,
    .attach         = rdmach_shm_attach_peer,
    .claim          = rdmach_shm_claim,
    .ep_addr_len    = 0,              /* connects to ifaces */
    .activate       = rdmach_shm_activate,
    .ring_sender    = rdmach_shm_ring_sender,
    .ring           = {NULL, NULL, NULL,    /* stores are the writes */
                       rdmach_shm_wake},
    .rma            = rdmach_shm_rma,
    .get_unpack     = NULL,           /* process_vm_readv: complete at return */
    .progress       = rdmach_shm_progress,
    .check          = NULL,
    .flush          = rdmach_shm_flush,
    .fence_query    = 1,              /* posted copies: later operations wait */
    .peer_closed    = rdmach_shm_peer_closed,
    .reap           = rdmach_shm_reap,
    .unclaim        = rdmach_shm_unclaim,
    .event_fd       = rdmach_shm_event_fd,
    .sleep          = rdmach_shm_sleep,
    .awake          = rdmach_shm_awake
};
