/*
 * rdmach wire table: everything the UCT glue asks of the medium under the rings, so that a wire
 * is one file implementing this table, listed in rdmach_wires[] (rdmach_wires.c) and built in
 * meson.build's rdmach_core. Plain C, no UCX headers: wires are unit-tested alone.
 *
 * Two levels:
 *  - rdmach_wire_t, one per iface: the receive side (our rings, their doorbells, the ring claim
 *    counter, the credit lines where receivers at the other ends write our tail copies) and the
 *    peers reached so far. A wire embeds it first in its own object.
 *  - per connection, the ring core's hooks (rdmach_ring_ops_t, rdmach_ring.h), which claim and
 *    activate hand to rdmach_tx_init / rdmach_rx_init together with the connection's context.
 *    They are the only wire calls on the message path, and NULL on shared memory.
 *
 * Each entry says what the shared-memory wire does ("shm:") and what an InfiniBand RC verbs
 * wire implements ("RC:"). The RC design in short: our rings, doorbells, claim counter and
 * credit lines live in one registered region; a sender holds one QP per receiving iface,
 * builds records in a local shadow ring and RDMA-writes each as payload, then header (two
 * WRITEs on one QP, placed in order, so the mark lands last); the receiver RDMA-writes its tail
 * into the sender's credit line. The sender cannot read the receiver's rx_hot cheaply, so its
 * shadow ctl keeps rx_hot = 1 and post_record chains the doorbell byte instead.
 */
#ifndef RDMACH_WIRE_H
#define RDMACH_WIRE_H

#include "rdmach_ring.h"

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

typedef struct rdmach_wire_ops rdmach_wire_ops_t;

typedef enum {
    RDMACH_WIRE_DEV_SHM,        /* same host (UCT_DEVICE_TYPE_SHM) */
    RDMACH_WIRE_DEV_NET         /* a network device (UCT_DEVICE_TYPE_NET) */
} rdmach_wire_dev_type_t;

typedef struct rdmach_wire_dev {
    char                   name[RDMACH_WIRE_DEV_NAME_MAX];
    rdmach_wire_dev_type_t type;
} rdmach_wire_dev_t;

/* How the glue opens a wire's receive side. */
typedef struct rdmach_wire_params {
    const char        *dev_name;    /* one of the wire's devices */
    rdmach_geom_t     geom;         /* of our rings: senders adopt it */
    uint32_t          max_rings;    /* our rings; as many credit lines for our connections */
    uint32_t          max_peers;    /* peers reached at most (as senders and as receivers) */
    uint64_t          uuid;         /* random identity of this iface */
    rdmach_rx_stats_t *stats;       /* invalid peer descriptions count as corrupt */
    /* Messages (error != 0: an error, else a diagnostic); NULL: silent */
    void              (*log)(int error, const char *fmt, ...)
                          __attribute__((format(printf, 2, 3)));
    /* An operation that answered RDMACH_WIRE_INPROGRESS is done (err: 0 or -errno); called from
     * the wire's progress with the comp it was given */
    void              (*complete)(void *comp, int err);
} rdmach_wire_params_t;

/* The per-iface object; a wire embeds it first. Set by open and read-only for the glue; claim
 * advances next_credit. */
typedef struct rdmach_wire {
    const rdmach_wire_ops_t *ops;
    rdmach_geom_t           geom;         /* of our rings */
    uint32_t                max_rings;    /* our rings, and our credit lines */
    uint32_t                next_credit;  /* credit lines handed to our senders so far */
    volatile uint8_t        *doorbells;   /* [max_rings], local: the poller reads them */
    volatile uint32_t       *next_ring;   /* ring claim counter, local: senders bump it */
    size_t                  size;         /* bytes of the receive side (for messages) */
    rdmach_wire_params_t    params;
} rdmach_wire_t;

/* A peer iface reached by this one (one per peer, shared by all its connections); a wire
 * embeds it first. */
typedef struct rdmach_wire_peer {
    rdmach_geom_t geom;         /* the receiver's ring geometry (lazy_slots unused) */
    uint32_t      max_rings;    /* how many senders it accepts */
} rdmach_wire_peer_t;

/* What the glue learns from a peer's address before reaching it. */
typedef struct rdmach_wire_addr {
    pid_t pid;                                  /* its process on this host; 0: remote */
    char  name[RDMACH_WIRE_PEER_NAME_MAX];      /* for messages: "pid 1234" */
} rdmach_wire_addr_t;

struct rdmach_wire_ops {
    const char *name;

    /* Devices this wire offers (at most max); returns how many. An iface runs the wire of the
     * device it is opened on.
     * shm: one, "memory".
     * RC: one per active port of each HCA, "mlx5_0:1". */
    unsigned (*query_devices)(rdmach_wire_dev_t *devs, unsigned max);

    /* The receive side: rings, doorbells, claim counter, credit lines. 0 or -errno (logged).
     * shm: one memfd segment, mapped by peers through /proc/<pid>/fd; ptrace consent.
     * RC: PD, CQ, and one registered region (ibv_reg_mr) holding the same four parts. */
    int  (*open)(const rdmach_wire_params_t *params, rdmach_wire_t **wire_p);
    void (*close)(rdmach_wire_t *wire);

    /* Device address; length 0 means this host (the glue uses UCX's shared-memory device
     * address and IPC-namespace reachability).
     * shm: 0.
     * RC: port GID (and LID for IB fabrics). */
    size_t dev_addr_len;
    void   (*pack_dev_addr)(const rdmach_wire_t *wire, void *buf);

    /* Iface address, what UCP exchanges; unpack: 0 if this wire reaches it (fills info), else
     * -errno.
     * shm: pid, memfd number, segment id; reachable when pid and fd are plausible.
     * RC: GID + QPN of a connect service QP, receive region address + rkey; same subnet. */
    size_t iface_addr_len;
    void   (*pack_addr)(const rdmach_wire_t *wire, void *buf);
    int    (*unpack_addr)(const rdmach_wire_t *wire, const void *dev_addr, const void *iface_addr,
                          rdmach_wire_addr_t *info);

    /* Maps or finds the peer at iface_addr (logs why not). 0, or -ESRCH / -ENOENT (gone),
     * -EMFILE (too many peers), another -errno.
     * shm: maps the peer's segment once and validates its layout (nothing there is trusted).
     * RC: creates an RC QP, exchanges QPN+GID through the connect service, moves it to RTS. */
    int  (*attach)(rdmach_wire_t *wire, const void *iface_addr, rdmach_wire_peer_t **peer_p);

    /* Claims a ring in the peer for a new sender: takes one of our credit lines, describes us in
     * ctl->peer_info (how the receiver returns credit), publishes ctl->owner last, sets up tx
     * (slots, ctl, doorbell, tail copy = the credit line, ring hooks). 0, -EMFILE (no credit line
     * left), -ENOSPC (no free ring in the peer).
     * shm: fetch-and-add on the peer's mapped claim counter; slots and ctl are its memory.
     * RC: RDMA FETCH_ADD on the claim counter, RDMA WRITE of peer_info then owner; local shadow. */
    int  (*claim)(rdmach_wire_t *wire, rdmach_wire_peer_t *peer, rdmach_tx_t *tx,
                  uint32_t *ring_id_p);

    /* Receive side of a ring a sender claimed: 0 while ctl->owner is unpublished; else sets up
     * rx (slots, ctl, where the tail goes, ring hooks) and returns 1. A sender that cannot be
     * reached still gets its records delivered; only its credit is lost.
     * shm: maps the sender's segment named in peer_info; the tail goes to its credit line.
     * RC: finds the sender's QP named in peer_info; post_tail writes its credit line. */
    int  (*activate)(rdmach_wire_t *wire, uint32_t ring_id, rdmach_rx_t *rx);

    /* The ring core's per-message hooks (rdmach_ring.h) for this wire's connections.
     * shm: both NULL: stores into the mapped ring and credit line are the writes.
     * RC: post_record = WRITE of payload, then header: inline when small, selective signalling.
     * RC: post_tail = unsignalled WRITE of the tail into the sender's credit line. */
    rdmach_ring_ops_t ring;

    /* RMA: len bytes between the local iovec list (advanced) and remote_addr in the peer; the
     * glue has checked rkey against its region. comp == NULL: complete at return (for a write:
     * the local buffer is reusable). 0 (complete), RDMACH_WIRE_INPROGRESS (complete() follows)
     * or -errno: -ESRCH / -ECONNRESET for a dead peer, -EFAULT for a bad address.
     * shm: process_vm_writev/readv to the peer's pid, complete at return.
     * RC: RDMA WRITE / READ with the rkey, signalled; comp == NULL: poll the CQ until done. */
    int  (*rma)(rdmach_wire_t *wire, rdmach_wire_peer_t *peer, struct iovec *local, size_t cnt,
                uint64_t remote_addr, uint64_t rkey, size_t len, int write, void *comp);

    /* Completions to poll, from the iface's progress; returns how many. NULL: none.
     * shm: NULL.
     * RC: polls the CQ: frees shadow slots and WQEs, calls complete() for RMA and flush. */
    unsigned (*progress)(rdmach_wire_t *wire);

    /* Everything issued to peer (NULL: to any peer) done in the peer's memory? 0, or
     * RDMACH_WIRE_INPROGRESS (complete(comp) follows). NULL: always done at return.
     * shm: NULL.
     * RC: a signalled zero-byte WRITE behind the unsignalled ones; done at its completion. */
    int  (*flush)(rdmach_wire_t *wire, rdmach_wire_peer_t *peer, void *comp);
};

/* The shared-memory wire (rdmach_wire_shm.c). */
extern const rdmach_wire_ops_t rdmach_wire_shm_ops;

/* The wires built in, NULL-terminated (rdmach_wires.c): the glue lists their devices and opens
 * a device on the first wire that lists it (NULL: none does). */
extern const rdmach_wire_ops_t *const rdmach_wires[];
const rdmach_wire_ops_t *rdmach_wire_find(const char *dev_name);

#ifdef __cplusplus
}
#endif

#endif
