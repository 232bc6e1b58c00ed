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
#include "rdmach_wire_shm_int.h"
#include "ucx_ext_sys.h"
#include "ucx_ext_wake.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

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

/* What this machine favours (rdmach_shm_pick_probe): whether gets are staged, and from which
 * size zero copy beats the ring. Where the page walk costs fewer memcpys than staging's line,
 * it beats the ring's two copies from 32 KiB (docs/rdmach.md, "Staged gets"). */
static void rdmach_shm_probe(rdmach_shm_wire_t *w, const rdmach_wire_params_t *params)
{
    uint64_t ns0   = ucx_ext_now_ns(), ticks0 = ucx_ext_ticks(), walk, copy, ns, ticks;
    int staged     = rdmach_shm_pick_probe(&walk, &copy);
    int near       = ((walk == 0) && (copy == 0)) || rdmach_shm_pick_near(walk, copy);

    /* the ticks the copies are counted in (rdmach_shm_pick_clock), on the probe's clock */
    ns             = ucx_ext_now_ns() - ns0;
    ticks          = ucx_ext_ticks() - ticks0;
    w->ns_per_tick = ((ns > 0) && (ticks > 0)) ? (double)ns / (double)ticks : 1.0;

    w->super.zcopy_auto = (staged || near) ? 0 : RDMACH_SHM_ZCOPY_CHEAP_WALK;
    if (!params->stage_measure || (params->stage_max == 0)) {
        return;   /* (the unit tests' wires stage every get) */
    }
    rdmach_shm_pick_init(&w->pick, staged, !near);
    RDMACH_SHM_LOG(w, RDMACH_WIRE_LOG_INFO, "rdmach: a 64 KiB process_vm_readv took %.1f us and "
                   "a memcpy %.1f: gets up to %zu bytes %s (UCX_RDMACH_STAGED_PICK), zero copy "
                   "from %zu", walk / 1e3, copy / 1e3, params->stage_max,
                   near ? (staged ? "staged, timed against the page walk" :
                                    "staged if timing shows it pays") :
                   staged ? "staged" : "by the page walk",
                   w->super.zcopy_auto ? w->super.zcopy_auto : (size_t)RDMACH_SHM_COPY_MIN);
}

/* Gets may go staged here: staging is on, and the pick may choose it (the unit tests' wires,
 * with no pick, stage every get). Then the staging buffers' first touch, a page fault per
 * page on each side, is taken off the message path: it fell in the pick's first staged
 * samples, where in ping-pongs the owner came late, the reader walked the pieces itself
 * (copy_unstaged) and staging lost every exploration (docs/rdmach.md). */
static int rdmach_shm_may_stage(const rdmach_shm_wire_t *w)
{
    return (w->super.params.stage_max > 0) && (!w->pick.fixed || w->pick.c[0].won);
}

static int rdmach_shm_open(const rdmach_wire_params_t *params, rdmach_wire_t **wire_p)
{
    rdmach_shm_wire_t *w = calloc(1, sizeof(*w));
    int ret;

    if (w == NULL) {
        return -ENOMEM;
    }
    w->super.params     = *params;
    rdmach_shm_probe(w, params);
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

    /* which of our gets go staged, for peers reading from us (rdmach_wire_shm_rma.c): at
     * first every class the probe's way, or every get staged without the pick */
    w->seg.hdr->stage_ways = ((params->stage_max > 0) &&
                              (!params->stage_measure || w->pick.c[0].won)) ?
                             (1u << RDMACH_SHM_PICK_CLASSES) - 1 : 0;
    if (rdmach_shm_may_stage(w)) {
        rdmach_shm_stage_prefault(&w->seg, 1);
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
    if (rdmach_shm_may_stage(w)) {
        rdmach_shm_stage_prefault(&peer->seg, 0);
    }
    if (i == w->npeers) {
        ++w->npeers;
    }
    *peer_p = peer;
    return 0;
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
