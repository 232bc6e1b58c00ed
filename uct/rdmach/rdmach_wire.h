/*
 * rdmach wire table: everything the UCT glue asks of the medium under the rings, so that a wire
 * is one file implementing this table, listed in rdmach_wires[] (rdmach_wires.c) and built in
 * meson.build's rdmach_core. Plain C, no UCX headers: wires are unit-tested alone.
 *
 * Three levels:
 *  - rdmach_wire_domain_t, one per UCT md: what registers memory for remote access (RC: a
 *    verbs context and its protection domain). A wire without domains (shm) lives under the
 *    transport's register-only md.
 *  - rdmach_wire_t, one per iface: the receive side (our rings, their doorbells, the ring claim
 *    counter, the credit lines where receivers at the other ends write our tail copies) and the
 *    peers reached so far. A wire embeds it first in its own object.
 *  - per connection, the ring core's hooks (rdmach_ring_ops_t, rdmach_ring.h), which claim and
 *    activate (or ep_connect) hand to rdmach_tx_init / rdmach_rx_init together with the
 *    connection's context. They are the only wire calls on the message path, and NULL on
 *    shared memory.
 *
 * Two ways to connect, as UCT has them:
 *  - to an iface (shm): a sender claims a ring in the receiver's memory by itself (claim); the
 *    receiver finds it (activate).
 *  - ep to ep (RC): a QP needs both ends, so each side opens a connection (ep_open: a QP, the
 *    ring it receives on, the shadow of the ring it sends into), UCP exchanges their ep
 *    addresses through an auxiliary transport, and ep_connect joins them.
 *
 * Each entry says what the shared-memory wire does ("shm:") and what the InfiniBand RC verbs
 * wire does ("RC:", rdmach_wire_rc.c and its rdmach_rc_*.c). The RC design in short: a
 * connection's rings, shadow and credit line live in one registered block; the sender builds
 * records in the shadow and RDMA-writes each, as one WRITE with immediate to a receiver with a
 * shared receive queue (it reads the record once the completion counted it in), else as header
 * fields and payload, then the mark (two WRITEs on one QP, placed in order, so the mark lands
 * last); the receiver RDMA-writes its tail into the sender's credit line (and, without SRQ, its
 * rx_hot into the sender's shadow ctl, which tells the sender when to chain a doorbell WRITE).
 */
#ifndef RDMACH_WIRE_H
#define RDMACH_WIRE_H

#include "rdmach_ring.h"
#include "ucx_ext_sys.h"

#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* rma and flush: issued, completion follows through rdmach_wire_params_t.complete */
#define RDMACH_WIRE_INPROGRESS 1

#define RDMACH_WIRE_DEV_NAME_MAX  32
#define RDMACH_WIRE_PEER_NAME_MAX 48
#define RDMACH_WIRE_MAX_DEVS      64   /* devices of all wires together */
#define RDMACH_WIRE_MAX_IOV       16   /* local buffers of one rma (UCT_SM_MAX_IOV) */

typedef struct rdmach_wire_ops rdmach_wire_ops_t;
typedef struct rdmach_wire_domain rdmach_wire_domain_t;   /* a wire's own type */

typedef enum {
    RDMACH_WIRE_DEV_SHM,        /* same host (UCT_DEVICE_TYPE_SHM) */
    RDMACH_WIRE_DEV_NET         /* a network device (UCT_DEVICE_TYPE_NET) */
} rdmach_wire_dev_type_t;

typedef struct rdmach_wire_dev {
    char                   name[RDMACH_WIRE_DEV_NAME_MAX];
    rdmach_wire_dev_type_t type;
} rdmach_wire_dev_t;

/* What a wire did, so that a test can tell it carried the traffic. A network wire's posts to
 * completions (shm: 0); reg_peak: the most bytes the wire held registered at once for its rings,
 * doorbells and bounce buffers (the resource model's figure, checked against a live iface).
 * shm's cooperative zero copy (rdmach_shm.h): copy_jobs, the large gets and puts this process
 * put on a peer's desk, copy_halves those of them into a buffer copied into again (two fixed
 * halves, the first copied at once), copy_staged those of them staged by the owner and
 * copy_unstaged of those the ones whose last pieces the reader read itself (the owner was busy
 * elsewhere, or refused); copy_helped, the chunks (and staged pieces) it copied for peers
 * from their desks on its own (RC: 0). large_rings: rings of ours set up for a sender with
 * the large geometry (shm's large rings, rdmach_shm.h; RC: 0). stage_picks: how often shm
 * measured staged gets against not (rdmach_shm_pick.h), stage_picked: how often staging won;
 * copy_owner_busy: large gets and puts to a peer busy with copies of its own (no help to
 * expect), each in one piece: posted whole, or one process_vm when done at return;
 * stage_peer_walks: gets that would have gone staged and took the page walk, their owner
 * busy with a page walk of its own (rdmach_wire_shm_rma.c, rdmach_shm_peer_walks). */
typedef struct rdmach_wire_stats {
    uint64_t posts, rdma_reads, completions, failures, atomics, reg_peak;
    uint64_t copy_jobs, copy_helped, large_rings, copy_halves, copy_staged, copy_unstaged;
    uint64_t stage_picks, stage_picked, copy_owner_busy, stage_peer_walks;
} rdmach_wire_stats_t;

/* A wire's counters: the glue's, or a sink when it keeps none (unit tests); the sink is never
 * read, so each file has its own (and no wire file depends on the wire list for it). */
static rdmach_wire_stats_t rdmach_wire_stats_sink __attribute__((unused));
#define RDMACH_WIRE_STATS(_wire) \
    (((_wire)->params.wire_stats != NULL) ? (_wire)->params.wire_stats : &rdmach_wire_stats_sink)

/* Their names in the transport's counters file, in field order. */
#define RDMACH_WIRE_COUNTERS(_) \
    _(wire_posts) _(wire_reads) _(wire_completions) _(wire_failures) _(wire_atomics) \
    _(wire_reg_peak) _(wire_copy_jobs) _(wire_copy_helped) _(wire_large_rings) \
    _(wire_copy_halves) _(wire_copy_staged) _(wire_copy_unstaged) _(wire_stage_picks) \
    _(wire_stage_picked) _(wire_copy_owner_busy) _(wire_stage_peer_walks)

/* The largest staged get (params.stage_max below). */
#define RDMACH_WIRE_STAGE_MAX (16ul * 1024 * 1024)

/* How the glue opens a wire's receive side. */
typedef struct rdmach_wire_params {
    const char        *dev_name;    /* one of the wire's devices */
    rdmach_wire_domain_t *domain;   /* its md's domain; NULL on a wire without domains */
    rdmach_geom_t     geom;         /* of our rings: senders adopt it */
    rdmach_geom_t     geom_large;   /* of our first large_rings rings, on a wire that has
                                     * large rings (shared memory); others ignore both */
    uint32_t          large_rings;
    uint32_t          max_rings;    /* our rings; as many credit lines for our connections */
    uint32_t          max_peers;    /* peers reached at most (as senders and as receivers) */
    uint64_t          uuid;         /* random identity of this iface */
    rdmach_rx_stats_t *stats;       /* invalid peer descriptions count as corrupt */
    rdmach_wire_stats_t *wire_stats;
    /* Messages (error: 1 an error, RDMACH_WIRE_LOG_INFO a line users see at UCX_LOG_LEVEL=info,
     * 0 a diagnostic); NULL: silent */
    void              (*log)(int error, const char *fmt, ...)
                          __attribute__((format(printf, 2, 3)));
    /* An operation that answered RDMACH_WIRE_INPROGRESS is done (err: 0 or -errno); called from
     * the wire's progress with the comp it was given */
    void              (*complete)(void *comp, int err);
    /* A connection (ep_open's ep_ctx) failed (err: -errno): its QP broke or its peer died.
     * Called from the wire's progress, once per connection. */
    void              (*failed)(void *ep_ctx, int err);
    /* Shared memory: gets of up to stage_max bytes (0: none) are staged by the owner of the
     * memory, two memcpys through its segment instead of the kernel's page walk
     * (rdmach_shm.h); may_read(may_read_arg, address, length): is that range of our memory
     * registered, i.e. may a peer's job on our desk read it (a staged or helped get) or
     * write it (a helped put: a registration admits both, as its rkey does); NULL: we copy
     * for none. */
    size_t            stage_max;    /* at most RDMACH_WIRE_STAGE_MAX */
    int               stage_measure; /* 1: a get up to stage_max is staged only if that
                                      * measured faster (rdmach_shm_pick.h); 0: always */
    int               (*may_read)(void *arg, uint64_t address, uint64_t length);
    void              *may_read_arg;
    /* The wire's own knobs, of the type its header names (RC: rdmach_rc_config_t,
     * rdmach_rc.h); NULL: its defaults. Read at open only. */
    const void        *config;
} rdmach_wire_params_t;

#define RDMACH_WIRE_LOG_INFO 2

/* A message through params.log (_error as there); _wire is the rdmach_wire_t. */
#define RDMACH_WIRE_LOG(_wire, _error, ...) \
    do { \
        if ((_wire)->params.log != NULL) { \
            (_wire)->params.log(_error, __VA_ARGS__); \
        } \
    } while (0)

/* The per-iface object; a wire embeds it first. Set by open and read-only for the glue; claim
 * advances next_credit; reap_ready: rings the wire can take back now (RC: closed connections
 * whose QP is quiet), for the glue to call reap at its next progress. */
typedef struct rdmach_wire {
    const rdmach_wire_ops_t *ops;
    rdmach_geom_t           geom;         /* of our rings */
    uint32_t                max_rings;    /* our rings, and our credit lines */
    uint32_t                next_credit;  /* credit lines handed to our senders so far */
    volatile uint8_t        *doorbells;   /* [max_rings], local: the poller reads them */
    volatile uint32_t       *next_ring;   /* ring claim counter, local: senders bump it */
    size_t                  size;         /* bytes of the receive side (for messages) */
    /* For UCP's lane choice: the latency, and a network wire's bandwidth (caps.this_host:
     * 0, the glue's copy model) */
    double                  bandwidth;    /* bytes/s */
    double                  latency;      /* s */
    size_t                  max_inline;   /* put_short's bytes (RC: a WRITE carries them
                                           * without registration; shm: SIZE_MAX) */
    int                     atomics;      /* the device does atomic64 (RC: atomic_cap) */
    size_t                  rma_async_min;  /* rma with a comp may run on after return from
                                           * this size on, also to memory mapped here (shm:
                                           * RDMACH_SHM_COPY_MIN; RC: SIZE_MAX) */
    uint32_t                reap_ready;
    /* EAGER_LIMIT and ZCOPY_THRESH when auto on this machine, if the wire's open measured
     * them (shm: rdmach_shm_pick_probe); 0: caps.eager_limit and caps.zcopy_thresh */
    size_t                  zcopy_auto;
    /* While both words are 0 the wire's progress would do nothing, and the glue's idle poll
     * does not call it (shm: its own posted copies, and the copy jobs peers left on its
     * desk). quiet[0] NULL: progress on every call (RC: its completion queue). */
    const volatile uint32_t *quiet[2];
    rdmach_wire_params_t    params;
} rdmach_wire_t;

/* A peer iface reached by this one (one per peer, shared by all its connections); a wire
 * embeds it first. */
typedef struct rdmach_wire_peer {
    rdmach_geom_t geom;         /* the receiver's ring geometry (lazy_slots unused) */
    uint32_t      max_rings;    /* how many senders it accepts */
    int           gone;         /* found gone by the last reap */
} rdmach_wire_peer_t;

/* A local buffer of an RMA; reg is its registration in the wire's domain (mem_reg), or NULL
 * (the wire copies or inlines). */
typedef struct rdmach_wire_iov {
    void   *base;
    size_t len;
    void   *reg;
} rdmach_wire_iov_t;

/* Copies the local buffers to (write) or from memory mapped here, one after the other from
 * mapped: the glue's copy of a small or synchronous rma, and shm's when its desk is full. */
static inline void rdmach_wire_iov_copy_mapped(void *mapped, const rdmach_wire_iov_t *local,
                                               size_t cnt, int write)
{
    uint8_t *dst = (uint8_t*)mapped;
    size_t i;

    for (i = 0; i < cnt; dst += local[i++].len) {
        if (write) {
            ucx_ext_memcpy(dst, local[i].base, local[i].len);
        } else {
            ucx_ext_memcpy(local[i].base, dst, local[i].len);
        }
    }
}

/* What the glue learns from a peer's address before reaching it. */
typedef struct rdmach_wire_addr {
    pid_t pid;                                  /* its process on this host; 0: remote */
    char  name[RDMACH_WIRE_PEER_NAME_MAX];      /* for messages: "pid 1234" */
} rdmach_wire_addr_t;

/* What the glue needs to know of a wire to present it to UCT, so that it never asks which
 * wire it runs on (mm's mappers to their base, in UCX's source). */
typedef struct rdmach_wire_caps {
    /* Peers on this host only: the device address is the host's identity (the sm base's),
     * reachability is the same host, atomics on memory mapped here are the CPU's, and UCT's
     * bandwidth is the sm base's copy model. Else the wire has a device address of its own
     * (dev_addr_len), UCT's INTER_NODE, and the port's bandwidth (wire->bandwidth), shared
     * by the iface's connections.
     * shm: 1. RC: 0. */
    int      this_host;
    /* Eps connect ep to ep (ep_open, ep_connect; UCT's CONNECT_TO_EP), else to the peer's
     * iface (attach, claim). shm: 0. RC: 1. */
    int      to_ep;
    /* Zero copies run on this many cores (shm's cooperative copy: both processes'), which
     * multiplies the copy model's dedicated bandwidth. shm: 2. RC: 1 (unused). */
    unsigned copy_cores;
    /* A zero copy's own cost per operation, for UCP's per-operation estimates: shm's system
     * call (process_vm_readv/writev, 500 ns as UCX's cma tells UCP; 0.55 us measured for an
     * 8-byte get here). RC: 0, the HCA model of ucx_ext_perf.h instead. */
    double   zcopy_overhead;
    /* UCX_RDMACH_SLOT_SIZE when auto. shm: 128 (a receiver reads a record's lines twice as
     * fast as with 256-byte slots, rdmach_iface.c). RC: 256. */
    uint32_t slot_size;
    /* UCX_RDMACH_EAGER_LIMIT and ZCOPY_THRESH when auto (and no zcopy_auto above). shm: 64
     * KiB and 64 KiB. RC: 256 KiB and 0 (any size, as UCP finds worth it against
     * registration). */
    size_t   eager_limit, zcopy_thresh;
    /* An iface flush with a completion (else UCS_ERR_UNSUPPORTED, as UCX's RC transports:
     * the caller polls). shm: 1. RC: 0. */
    int      flush_comp;
    /* Arming for send events alone puts the wire to sleep too (its sends complete by
     * events). shm: 0. RC: 1. */
    int      arm_sends;
    double   overhead;    /* s per operation, UCT's attr (shm 10 ns, RC 75 ns) */
} rdmach_wire_caps_t;

struct rdmach_wire_ops {
    const char *name;
    rdmach_wire_caps_t caps;

    /* Memory domains (UCT mds) of this wire: names of at most max; returns how many. NULL: the
     * wire needs no registration and its devices belong to the register-only md.
     * shm: NULL.
     * RC: one per HCA with an active port, "mlx5_0". */
    unsigned (*query_domains)(char (*names)[RDMACH_WIRE_DEV_NAME_MAX], unsigned max);
    int      (*domain_open)(const char *name, rdmach_wire_domain_t **domain_p);
    void     (*domain_close)(rdmach_wire_domain_t *domain);
    /* Registers [addr, addr+len) for local and remote access: *reg_p for rma's iov, *rkey_p
     * for peers. 0 or -errno. RC: ibv_reg_mr. */
    int      (*mem_reg)(rdmach_wire_domain_t *domain, void *addr, size_t len, void **reg_p,
                        uint32_t *rkey_p);
    void     (*mem_dereg)(void *reg);

    /* Devices this wire offers in domain (NULL for a wire without domains), at most max;
     * returns how many. An iface runs the wire of the device it is opened on.
     * shm: one, "memory".
     * RC: one per active port of the HCA, "mlx5_0:1". */
    unsigned (*query_devices)(rdmach_wire_domain_t *domain, rdmach_wire_dev_t *devs,
                              unsigned max);

    /* The receive side: rings, doorbells, claim counter, credit lines. 0 or -errno (logged).
     * shm: one memfd segment, mapped by peers through /proc/<pid>/fd; ptrace consent.
     * RC: a CQ, and the doorbells registered for peers' WRITEs; rings come with ep_open. */
    int  (*open)(const rdmach_wire_params_t *params, rdmach_wire_t **wire_p);
    void (*close)(rdmach_wire_t *wire);

    /* Device address; length 0 means this host (the glue uses UCX's shared-memory device
     * address and IPC-namespace reachability).
     * shm: 0.
     * RC: port GID (and LID for IB fabrics). */
    size_t dev_addr_len;
    void   (*pack_dev_addr)(const rdmach_wire_t *wire, void *buf);

    /* Iface address, what UCP exchanges; unpack: 0 if this wire reaches it (fills info), else
     * -errno. iface_addr may be NULL: judge by the device address alone.
     * shm: pid, memfd number, segment id; reachable when pid and fd are plausible.
     * RC: none (length 0); reachable when the link layers match. */
    size_t iface_addr_len;
    void   (*pack_addr)(const rdmach_wire_t *wire, void *buf);
    int    (*unpack_addr)(const rdmach_wire_t *wire, const void *dev_addr, const void *iface_addr,
                          rdmach_wire_addr_t *info);

    /* Connect to an iface (NULL: the wire connects ep to ep only).
     * Maps or finds the peer at iface_addr (logs why not). 0, or -ESRCH / -ENOENT (gone),
     * -EMFILE (too many peers), another -errno.
     * shm: maps the peer's segment once and validates its layout (nothing there is trusted). */
    int  (*attach)(rdmach_wire_t *wire, const void *iface_addr, rdmach_wire_peer_t **peer_p);

    /* Claims a ring in the peer for a new sender: takes one of our credit lines, describes us in
     * ctl->peer_info (how the receiver returns credit), publishes ctl->owner last, sets up tx
     * (slots, ctl, doorbell, tail copy = the credit line, ring hooks). 0, -EMFILE (no credit line
     * left), -ENOSPC (no free ring in the peer).
     * shm: fetch-and-add on the peer's mapped claim counter, then a ring the peer took back
     * (its free map); slots and ctl are its memory. A credit line given back (unclaim) is
     * used first. */
    int  (*claim)(rdmach_wire_t *wire, rdmach_wire_peer_t *peer, rdmach_tx_t *tx,
                  uint32_t *ring_id_p);

    /* Connect ep to ep (ep_addr_len 0: the wire connects to ifaces only).
     * ep_open: a connection of ours (*peer_p, also the peer for rma and flush) with a ring it
     * receives on (its id below max_rings; the claim counter counts it), for ep_ctx (handed
     * to failed()). 0, -ENOSPC (no ring left), another -errno.
     * ep_pack_addr: what the other side's ep_connect needs.
     * ep_connect: joins the connection with the one at dev_addr/ep_addr and sets up tx, the
     * sender of the ring there; our ring becomes active. 0 or -errno (logged).
     * ep_close: the connection ends; its ring stays claimed until reap takes it back.
     * RC: an RC QP, and one registered block for the receive ring, the shadow of the ring we
     * send into, and the credit line; the ep address names the QP, block and doorbell. */
    size_t ep_addr_len;
    int    (*ep_open)(rdmach_wire_t *wire, void *ep_ctx, rdmach_wire_peer_t **peer_p);
    void   (*ep_pack_addr)(const rdmach_wire_peer_t *peer, void *buf);
    int    (*ep_connect)(rdmach_wire_t *wire, rdmach_wire_peer_t *peer, const void *dev_addr,
                         const void *ep_addr, rdmach_tx_t *tx);
    void   (*ep_close)(rdmach_wire_t *wire, rdmach_wire_peer_t *peer);

    /* Receive side of a ring a sender claimed: 0 while ctl->owner is unpublished; else sets up
     * rx (slots, ctl, where the tail goes, ring hooks) and returns 1. A sender that cannot be
     * reached still gets its records delivered; only its credit is lost.
     * shm: maps the sender's segment named in peer_info; the tail goes to its credit line.
     * RC: the ring of a connected connection; post_tail writes its sender's credit line. */
    int  (*activate)(rdmach_wire_t *wire, uint32_t ring_id, rdmach_rx_t *rx);

    /* Served requests (rdmach_serve.h): the process that sends into ring ring_id, as the
     * wire established it, into *pid; 0, or -ENOENT when the ring has no sender known.
     * Replies go only there, whatever a record says.
     * shm: the ring's owner, whose segment activate mapped through /proc/<pid>/fd.
     * RC: NULL: its peers are on other hosts, and their served records are dropped and
     * counted (a target never writes where a record points). */
    int  (*ring_sender)(const rdmach_wire_t *wire, uint32_t ring_id, int32_t *pid);

    /* The ring core's per-message hooks (rdmach_ring.h) for this wire's connections.
     * shm: both NULL: stores into the mapped ring and credit line are the writes.
     * RC: post_record = WRITE of fields and payload, then mark: inline when small, selective
     * signalling.
     * RC: post_tail = unsignalled WRITE of the tail into the sender's credit line.
     * RC: post_hot = unsignalled WRITE of rx_hot into the sender's shadow ctl. */
    rdmach_ring_ops_t ring;

    /* RMA: len bytes between the local iov list and remote_addr in the peer; the glue has
     * checked rkey (the 32-bit key of the peer's mem_reg) against its region. comp == NULL:
     * complete at return (for a write: the local buffer is reusable). 0 (complete),
     * RDMACH_WIRE_INPROGRESS (complete() follows) or -errno: -ESRCH / -ECONNRESET for a dead
     * peer, -EFAULT for a bad address, -EAGAIN for no send resources now (retry later).
     * mapped: the remote bytes mapped here (memory the peer's md allocated), or NULL; the
     * glue passes it only from wire->rma_async_min on with a comp, and copies smaller ones
     * itself.
     * shm: process_vm_writev/readv to the peer's pid (memcpy where mapped), complete at
     * return; from RDMACH_SHM_COPY_MIN on, a single buffer is copied together with the peer,
     * which takes chunks from its progress (cooperative zero copy, rdmach_shm.h): with a comp
     * the job is posted and this returns RDMACH_WIRE_INPROGRESS, the rest follows from
     * progress (the peer may have copied all of it by then); at close the wire finishes
     * them without completions.
     * RC: RDMA WRITE / READ with the rkey, signalled; unregistered buffers inline or through
     * a registered bounce buffer; comp == NULL: poll the CQ until done. */
    int  (*rma)(rdmach_wire_t *wire, rdmach_wire_peer_t *peer, const rdmach_wire_iov_t *local,
                size_t cnt, uint64_t remote_addr, uint32_t rkey, size_t len, int write,
                void *mapped, void *comp);

    /* get_bcopy with a completion: len bytes at remote_addr handed to unpack(arg, data, len),
     * then complete(comp). RDMACH_WIRE_INPROGRESS, or -errno (-EAGAIN: no resources now).
     * NULL: the glue reads synchronously through rma.
     * RC: an RDMA READ into one of the wire's registered bounce buffers. */
    int  (*get_unpack)(rdmach_wire_t *wire, rdmach_wire_peer_t *peer, uint64_t remote_addr,
                       uint32_t rkey, size_t len, void (*unpack)(void *arg, const void *data,
                                                                 size_t len),
                       void *arg, void *comp);

    /* Device atomic on the 8-byte aligned word at remote_addr in the peer: compare-and-swap
     * (cswap: the word becomes swap if it equals compare_add) or fetch-and-add (of
     * compare_add). The word's previous value lands in *result, then complete(comp).
     * RDMACH_WIRE_INPROGRESS, or -errno (-EAGAIN: no resources now). Never calls complete()
     * itself, so the glue may post from a completion. NULL (or wire->atomics == 0): none.
     * RC: IBV_WR_ATOMIC_CMP_AND_SWP / IBV_WR_ATOMIC_FETCH_AND_ADD into a registered bounce
     * buffer; the value is in host byte order (rxe, mlx5). */
    int  (*atomic64)(rdmach_wire_t *wire, rdmach_wire_peer_t *peer, uint64_t remote_addr,
                     uint32_t rkey, int cswap, uint64_t compare_add, uint64_t swap,
                     uint64_t *result, void *comp);

    /* Completions to poll, from the iface's progress; returns how many. Every wire has it.
     * shm: the chunks of peers' cooperative copies on our desk (one load when there are
     * none).
     * RC: polls the CQ: frees shadow slots and WQEs, calls complete() for RMA and flush. */
    unsigned (*progress)(rdmach_wire_t *wire);

    /* Liveness probe of a connection (ep_check): 0, or -EAGAIN (retry later). A broken one
     * is reported through failed(). NULL: the glue watches the peer's process (shm).
     * RC: a signalled zero-byte WRITE; if the peer is gone, its retries run out. */
    int  (*check)(rdmach_wire_t *wire, rdmach_wire_peer_t *peer);

    /* Everything issued to peer (NULL: to any peer) done in the peer's memory? 0, or
     * RDMACH_WIRE_INPROGRESS (complete(comp) follows). NULL: always done at return.
     * -EAGAIN: comp cannot be kept now (retry later).
     * shm: the posted cooperative copies to the peer; comp == NULL: the caller asks again
     * (and nothing is issued: the glue's fence asks this way, see fence_query).
     * RC: a signalled zero-byte WRITE behind the unsignalled ones; done at its completion. */
    int  (*flush)(rdmach_wire_t *wire, rdmach_wire_peer_t *peer, void *comp);

    /* The glue's fence: operations issued later wait (the ep's pending queue) while
     * flush(peer, NULL) answers RDMACH_WIRE_INPROGRESS. 0: the wire orders them itself (UCX's
     * sm fence, a store fence, is all the glue does).
     * shm: 1 (posted cooperative copies). RC: 0. */
    int  fence_query;

    /* Has the peer's iface closed while its process lives on (an MPI process after
     * MPI_Finalize)? 1 or 0; the glue then fails the eps to it. NULL: never tells.
     * shm: the closed word its owner sets in its segment's header at close (we keep the
     * segment mapped, and records into it would go unread).
     * RC: NULL: a closed peer's QP is gone, so the next operation or check fails. */
    int  (*peer_closed)(const rdmach_wire_t *wire, const rdmach_wire_peer_t *peer);

    /* Taking rings back (NULL: the wire never does; its rings stay claimed).
     * reap: finds the rings whose sender has gone for good (its iface closed; with procs, its
     * process dead, which costs a read of /proc per peer: nothing will be written there
     * again), calls drain(arg, id) for each (the glue delivers what is left and forgets the
     * ring), then makes each claimable by a new sender, with nothing of the old one left in
     * it; sets peer->gone of every peer. Returns how many. Not called per message.
     * unclaim: our ring in a peer that has gone is given up, and our credit line for it
     * comes back.
     * shm: a free map in the segment (rdmach_shm.h); the peer's segment is unmapped with its
     * last ring, so memory and descriptors stay bounded as peers come and go.
     * RC: a connection is both rings of one QP pair, so reap takes it whole (no unclaim): the
     * rings of closed connections whose QP is quiet (a fence WR posted at ep_close completed,
     * reap_ready counts them), then the QP, registration and block are freed and the ring id
     * serves the next ep_open. */
    unsigned (*reap)(rdmach_wire_t *wire, int procs, void (*drain)(void *arg, uint32_t ring_id),
                     void *arg);
    void     (*unclaim)(rdmach_wire_t *wire, rdmach_wire_peer_t *peer, const rdmach_tx_t *tx);

    /* Wakeup: a receiver sleeping in UCP (ucp_worker_wait, an event fd in poll) is woken by
     * the next record into any of its rings. NULL: the wire cannot; its ifaces offer no
     * events.
     * event_fd: the descriptor that becomes readable then (-1: none on this iface).
     * sleep: arms the wire (the glue has made all rings cold before, and looks at them once
     * more after); returns non-zero when it found work meanwhile (the glue stays awake).
     * awake: undoes it (the first progress after a sleep).
     * shm: an eventfd in our process, its number in the segment header; senders take their
     * own descriptor of it (pidfd_getfd) and write it from the ring's wake hook; sleep sets
     * the asleep word and issues a global membarrier (ucx_ext_wake.h); returns 0. (Copies
     * it posted end from its progress only: the glue does not sleep while flush lists any.)
     * RC: the completion channel of both CQs (with an SRQ: every record is a receive
     * completion; without one, -1: no wakeup); sleep acks its events, requests the next
     * completion of both CQs and polls them once more (returns what that found). */
    int      (*event_fd)(const rdmach_wire_t *wire);
    int      (*sleep)(rdmach_wire_t *wire);
    void     (*awake)(rdmach_wire_t *wire);
};

/* What the RC wire allocates, from the functions its allocations use (the resource model,
 * perf/resource_model, calls them too): per iface, per connection, per QP. */
typedef struct rdmach_wire_rc_sizing {
    size_t   iface_reg_bytes;    /* registered per iface: doorbells, bounce buffers, results */
    size_t   conn_reg_bytes;     /* registered per connection: rx ring, shadow, credit line */
    size_t   conn_state_bytes;   /* host memory per connection: its bookkeeping */
    uint32_t conn_sq_depth;      /* WRs of a connection's RC QP */
    uint32_t xrc_sq_depth;       /* WRs of an XRC host connection's INI QP */
} rdmach_wire_rc_sizing_t;
void rdmach_wire_rc_sizing(const rdmach_geom_t *geom, uint32_t max_rings, uint32_t max_qp_wr,
                           rdmach_wire_rc_sizing_t *sizing);

/* The shared-memory wire (rdmach_wire_shm.c) and the InfiniBand RC verbs wire
 * (rdmach_wire_rc.c). */
extern const rdmach_wire_ops_t rdmach_wire_shm_ops;
extern const rdmach_wire_ops_t rdmach_wire_rc_ops;

/* The wires built in, NULL-terminated (rdmach_wires.c): the glue lists their domains and
 * devices; rdmach_wire_find gives the wire without domains that lists dev_name (NULL: none). */
extern const rdmach_wire_ops_t *const rdmach_wires[];
const rdmach_wire_ops_t *rdmach_wire_find(const char *dev_name);

#ifdef __cplusplus
}
#endif

#endif
