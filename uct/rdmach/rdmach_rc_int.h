/*
 * rdmach InfiniBand RC verbs wire, internal: the types and functions that the RC wire's files
 * share (rdmach_wire_rc.c, the table and the iface; rdmach_rc_dev.c, rdmach_rc_post.c,
 * rdmach_rc_rma.c, rdmach_rc_qp.c; its XRC mode, rdmach_rc_xrc.c). Nothing here is seen by the
 * glue, which knows the wire through rdmach_wire.h only.
 */
#ifndef RDMACH_RC_INT_H
#define RDMACH_RC_INT_H

#include "rdmach_rc.h"
#include "rdmach_wire.h"
#include "rdmach_xrc.h"
#include "ucx_ext_verbs.h"

#include <infiniband/verbs.h>

#define RC_SQ_EXTRA      320u   /* WRs beyond 3 per ring slot (a record takes at most 3) */
#define RDMACH_RC_RETH_LEN 16u  /* an RDMA WRITE's header: what UCP is told a packet carries */
#define RC_SIGNAL_EVERY  32u    /* unsignalled WRs between two signalled ones */
#define RC_OPS_MAX       256u   /* signalled operations (RMA, flush) in flight per QP */
#define RC_CQ_SIZE       4096   /* shared by the QPs of an iface */
#define RC_SRQ_DEPTH     2048   /* receive WQEs that records with immediate consume */
#define RC_POLL_BATCH    16
#define RC_RNR_RETRY     7
#define RC_SEQ_BITS      40
#define RC_SEQ_MASK      ((1ull << RC_SEQ_BITS) - 1)
#define RC_MAX_RD_ATOMIC 16
#define RC_BOUNCES       16     /* bcopy reads and writes in flight per iface */
#define RC_AMO_SLOTS     64     /* device atomics in flight per iface (their old values) */

#define RC_MIN(_a, _b) (((_a) < (_b)) ? (_a) : (_b))

#define RC_LOG(_w, _error, ...) RDMACH_WIRE_LOG(&(_w)->super, _error, __VA_ARGS__)
#define STATS(_w, _f) RDMACH_WIRE_STATS(&(_w)->super)->_f

struct rdmach_wire_domain {
    struct ibv_context    *ctx;
    struct ibv_pd         *pd;
    struct ibv_device_attr attr;
    char                  name[RDMACH_WIRE_DEV_NAME_MAX];
};

/* Device address: the port's GID (RoCE, and IB global routes) and LID (IB). */
typedef struct rdmach_rc_dev_addr {
    uint8_t  gid[16];
    uint16_t lid;
    uint8_t  link_layer;   /* IBV_LINK_LAYER_* */
    uint8_t  pad;
} __attribute__((packed)) rdmach_rc_dev_addr_t;

/* Ep address: the QP, and where its peer writes (all in our block but the doorbell). */
typedef struct rdmach_rc_ep_addr {
    uint32_t qpn;
    uint32_t ring_id;       /* our rx ring: the immediate of the records written into it */
    uint32_t rkey;          /* of the block */
    uint64_t ring;          /* our rx ctl; the slots follow it */
    uint64_t shadow_ctl;    /* our shadow ctl: the peer's receiver writes rx_hot there */
    uint64_t credit;        /* our credit line: the peer's receiver writes its tail there */
    uint64_t doorbell;      /* our rx ring's doorbell byte */
    uint32_t db_rkey;
    uint32_t slot_size;
    uint32_t nslots;
    uint8_t  flags;         /* RDMACH_RC_ADDR_* */
    uint32_t srqn;          /* XRC: our SRQ, which every WR to us names */
    rdmach_xrc_addr_t xrc;  /* XRC: the QPs offered and used (rdmach_xrc.h) */
} __attribute__((packed)) rdmach_rc_ep_addr_t;

/* We receive records through a shared receive queue: write them with immediate (one WRITE),
 * not as fields and payload then the mark. The sender follows the receiver's choice, so
 * ends with and without SRQ (UCX_RDMACH_RC_SRQ, or devices without one) talk. */
#define RDMACH_RC_ADDR_IMM 0x1
/* We connect through XRC (rdmach_xrc.h); both ends must (UCX_RDMACH_XRC). */
#define RDMACH_RC_ADDR_XRC 0x2

typedef struct rdmach_rc_op {
    uint64_t seq;           /* done when the QP completed this WR */
    void     *comp;         /* complete(comp) then */
    void     (*unpack)(void *arg, const void *data, size_t len);   /* a read through a bounce */
    void     *arg;
    size_t   len;
    int      bounce;        /* the bounce buffer it holds until done, or -1 */
    int      amo;           /* the atomic result slot it holds until done, or -1 */
    uint64_t *result;       /* where that slot's value goes */
} rdmach_rc_op_t;

typedef struct rdmach_rc_wire rdmach_rc_wire_t;

/* A send queue: a connection's own QP (RC), or the INI QP of a host connection that several
 * connections share (XRC). Room is counted per QP: sig holds the QP positions of its
 * signalled WRs in post order, and each completion (in order, per QP) pops the next one, since
 * a completion of one connection's WR also retires the unsignalled WRs that others posted
 * before it. NULL sig: the QP is one connection's, whose own sequence tells. */
typedef struct rdmach_rc_sq {
    struct ibv_qp *qp;
    uint32_t      depth;
    uint64_t      posted, completed, signalled;   /* WRs of this QP */
    uint64_t      *sig;                           /* [depth] when shared */
    uint64_t      sig_head, sig_tail;
} rdmach_rc_sq_t;

typedef struct rdmach_rc_conn {
    rdmach_wire_peer_t super;
    rdmach_rc_wire_t   *w;
    void               *ep_ctx;
    struct ibv_qp      *qp;           /* = sq->qp once connected */
    rdmach_rc_sq_t     *sq;           /* &own_sq (RC), or a host connection's (XRC) */
    rdmach_rc_sq_t     own_sq;
    uint32_t           r_srqn;        /* XRC: the peer's SRQ, named by every WR */
    int                notice_due;    /* XRC: the peer awaits our notice (rdmach_xrc.h) */
    rdmach_xrc_conn_t  xrc;
    uint32_t           ring_id;
    uint32_t           r_ring;        /* the peer's ring id for us (the records' immediate) */
    uint32_t           rx_avail;      /* records into our ring counted in by their CQE */
    int                connected, failed, closed, dirty;
    uint64_t           fence_seq;     /* closed: the last WR's sequence (0: none posted) */
    int                fence_done;    /* closed: its completion came, the QP is quiet */
    int                imm;           /* the peer reads records by their completion */
    /* the block */
    uint8_t            *block;
    size_t             block_size;
    struct ibv_mr      *mr;
    rdmach_ring_ctl_t  *rx_ctl;
    rdmach_ring_ctl_t  *sh_ctl;
    volatile uint64_t  *credit;
    uint8_t            *sh_slots;
    uint8_t            sh_doorbell;   /* the core's doorbell store on a mapped wire: unused */
    /* the peer's */
    uint64_t           r_slots, r_shadow_ctl, r_credit, r_doorbell;
    uint32_t           r_rkey, r_db_rkey;
    /* send queue */
    uint64_t           posted, completed, signalled;   /* WRs of this connection */
    rdmach_rc_op_t     ops[RC_OPS_MAX];
    uint32_t           op_head, op_tail;   /* FIFO: [head, tail) in flight */
} rdmach_rc_conn_t;

struct rdmach_rc_wire {
    rdmach_wire_t        super;
    rdmach_rc_config_t   config;     /* params.config's copy, or the defaults */
    rdmach_wire_domain_t *dom;
    uint8_t              port;
    int                  gid_index;
    struct ibv_port_attr port_attr;
    rdmach_rc_dev_addr_t dev_addr;
    struct ibv_cq        *cq;
    /* wakeup: both CQs report to it once armed (NULL: no wakeup on this device) */
    struct ibv_comp_channel *chan;
    /* records as one RDMA WRITE with immediate each: the receive completion (from a shared
     * receive queue) says the whole record is placed; without an SRQ two WRITEs, mark last */
    struct ibv_srq       *srq;
    struct ibv_cq        *rcq;
    uint32_t             srq_depth;
    uint32_t             srq_repost;     /* receive WQEs consumed, to post again */
    int                  cq_free;        /* CQEs we may still cause */
    int                  cq_size;
    uint32_t             sq_depth;       /* WRs per QP: a full ring's records fit */
    uint8_t              *doorbells;     /* [max_rings], registered */
    struct ibv_mr        *db_mr;
    uint32_t             next_ring;
    rdmach_rc_conn_t     **conns;        /* [max_rings], by ring id */
    uint32_t             *free_ids;      /* ring ids taken back (reap), to use first */
    uint32_t             nfree;
    uint32_t             *dirty;         /* conns with ops completed by a wait, to deliver */
    uint32_t             ndirty;
    void                 *bounce;        /* RC_BOUNCES registered buffers, for rma of */
    size_t               bounce_size;    /* unregistered ones (bcopy) */
    struct ibv_mr        *bounce_mr;
    int                  bounce_free[RC_BOUNCES];
    int                  nbounce_free;
    uint64_t             *amo;           /* RC_AMO_SLOTS registered result words, after the */
    int                  amo_free[RC_AMO_SLOTS];   /* bounce buffers, in bounce_mr */
    int                  namo_free;
    /* XRC mode (rdmach_rc_xrc.c): the host's XRC domain, our XRC SRQ (as srq) and the
     * connection sharing core; xrcd NULL: plain RC */
    struct ibv_xrcd      *xrcd;
    int                  xrcd_fd;
    uint32_t             srqn;
    rdmach_xrc_t         xrc;
};

/* ---- shared by the RC wire's files, by the file that defines them ----
 * Each file uses only the ones listed before it: rdmach_rc_dev.c, rdmach_rc_post.c,
 * rdmach_rc_rma.c and rdmach_rc_qp.c, rdmach_rc_xrc.c, rdmach_wire_rc.c (the table). */

/* rdmach_rc_dev.c: sizing (rdmach_wire_rc_sizing's figures, and what the iface and a
 * connection allocate). A connection's ring: its ctl and slots. */
size_t   rdmach_rc_ring_bytes(const rdmach_geom_t *geom);
/* A connection's block: rx ring | shadow ctl (the credit line in its padding) + slots. */
size_t   rdmach_rc_block_bytes(const rdmach_geom_t *geom);
/* WRs per QP: 3 per ring slot, and RMA (a sender short of room is short of ring credit). */
uint32_t rdmach_rc_sq_depth(const rdmach_geom_t *geom, uint32_t max_qp_wr);
size_t   rdmach_rc_doorbell_bytes(uint32_t max_rings);
/* RC_BOUNCES buffers of a record's span, then RC_AMO_SLOTS atomic results. */
size_t   rdmach_rc_bounce_bytes(const rdmach_geom_t *geom);

/* WRs of an XRC INI QP: it carries several connections' records. */
static inline uint32_t rdmach_rc_xrc_sq_depth(uint32_t conn_sq_depth, uint32_t max_qp_wr)
{
    return (4u * conn_sq_depth < max_qp_wr) ? 4u * conn_sq_depth : max_qp_wr;
}

/* rdmach_rc_dev.c: the wire's own registrations (counted: the stats' reg_peak), and the
 * table's domain, device and memory entries. */
struct ibv_mr *rdmach_rc_reg(rdmach_rc_wire_t *w, void *addr, size_t len);
void     rdmach_rc_dereg(struct ibv_mr *mr);   /* NULL: nothing */
unsigned rdmach_rc_query_domains(char (*names)[RDMACH_WIRE_DEV_NAME_MAX], unsigned max);
int      rdmach_rc_domain_open(const char *name, rdmach_wire_domain_t **domain_p);
void     rdmach_rc_domain_close(rdmach_wire_domain_t *dom);
int      rdmach_rc_mem_reg(rdmach_wire_domain_t *dom, void *addr, size_t len, void **reg_p,
                           uint32_t *rkey_p);
void     rdmach_rc_mem_dereg(void *reg);
unsigned rdmach_rc_query_devices(rdmach_wire_domain_t *dom, rdmach_wire_dev_t *devs,
                                 unsigned max);

/* rdmach_rc_post.c: the send queue. Free WRs of c's send queue. */
static inline uint32_t rdmach_rc_sq_free(const rdmach_rc_conn_t *c)
{
    /* an owed XRC notice goes ahead of the next WR: its room is kept */
    return c->sq->depth - (uint32_t)(c->sq->posted - c->sq->completed) - (uint32_t)c->notice_due;
}

static inline void *rdmach_rc_bounce(rdmach_rc_wire_t *w, int idx)
{
    return (uint8_t*)w->bounce + (size_t)idx * w->bounce_size;
}

/* The connection of ring id (from a completion or a peer's immediate: checked), or NULL. */
static inline rdmach_rc_conn_t *rdmach_rc_conn(const rdmach_rc_wire_t *w, uint32_t id)
{
    return (id < w->next_ring) ? w->conns[id] : NULL;
}

/* Posts n receive WQEs (no buffers: WRITEs with immediate consume them) into w->srq. */
int      rdmach_rc_srq_post(rdmach_rc_wire_t *w, uint32_t n);
/* Fills wr and sge as an RDMA WRITE of len bytes at addr (lkey) to raddr (rkey); inl: inline. */
void     rdmach_rc_write_wr(struct ibv_send_wr *wr, struct ibv_sge *sge, void *addr,
                            uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey,
                            int inl);
/* Posts a chain of n WRs; the last is signalled when 'signal' or when RC_SIGNAL_EVERY WRs
 * went unsignalled. Returns the last WR's sequence, or 0 (errno set). */
uint64_t rdmach_rc_post(rdmach_rc_conn_t *c, struct ibv_send_wr *wr, unsigned n, int signal);
/* A signalled zero-byte WRITE (to the credit line: it writes nothing): its sequence, or 0
 * (errno set; EAGAIN: no room). */
uint64_t rdmach_rc_post_empty(rdmach_rc_conn_t *c);
/* Queues a completion for the WR of sequence seq (room checked by the caller). */
rdmach_rc_op_t *rdmach_rc_push_op(rdmach_rc_conn_t *c, uint64_t seq, void *comp, int bounce,
                                  void (*unpack)(void*, const void*, size_t), void *arg,
                                  size_t len);
/* Delivers the operations done up to c->completed, in order (all of them, failed, once c
 * failed). */
void     rdmach_rc_deliver(rdmach_rc_conn_t *c);
/* Polls the send CQ; deliver == 0 (inside an operation): only advances the completed
 * sequences, and the operations they finish are delivered by the next progress. */
unsigned rdmach_rc_poll(rdmach_rc_wire_t *w, int deliver);
/* Polls the receive CQ: counts the records written into our rings in. */
unsigned rdmach_rc_poll_recv(rdmach_rc_wire_t *w);
/* Fails the connection once: its operations complete with -ECONNRESET, the glue is told. */
void     rdmach_rc_fail(rdmach_rc_conn_t *c, int err);
/* The ring hooks (rdmach_ring.h), and the table's posting and completion entries. */
extern const rdmach_ring_ops_t rdmach_rc_ring_ops;
void     rdmach_rc_post_record(void *ctx, uint32_t index, const void *rec, size_t bytes,
                               int doorbell);
void     rdmach_rc_post_tail(void *ctx, uint64_t tail);
void     rdmach_rc_post_hot(void *ctx, uint32_t hot);
unsigned rdmach_rc_progress(rdmach_wire_t *wire);
int      rdmach_rc_check(rdmach_wire_t *wire, rdmach_wire_peer_t *peer);
int      rdmach_rc_flush(rdmach_wire_t *wire, rdmach_wire_peer_t *peer, void *comp);

/* rdmach_rc_rma.c: the table's RMA and atomic entries. */
int      rdmach_rc_rma(rdmach_wire_t *wire, rdmach_wire_peer_t *peer,
                       const rdmach_wire_iov_t *local, size_t cnt, uint64_t remote_addr,
                       uint32_t rkey, size_t len, int write, void *mapped, void *comp);
int      rdmach_rc_get_unpack(rdmach_wire_t *wire, rdmach_wire_peer_t *peer,
                              uint64_t remote_addr, uint32_t rkey, size_t len,
                              void (*unpack)(void*, const void*, size_t), void *arg,
                              void *comp);
int      rdmach_rc_atomic64(rdmach_wire_t *wire, rdmach_wire_peer_t *peer,
                            uint64_t remote_addr, uint32_t rkey, int cswap,
                            uint64_t compare_add, uint64_t swap, uint64_t *result, void *comp);

/* rdmach_rc_qp.c: an RC QP on our CQs (and SRQ), sized for a connection; max_inline (may be
 * NULL): what a WRITE carries inline on it. NULL (errno set) when the device refuses. */
struct ibv_qp *rdmach_rc_create_qp(rdmach_rc_wire_t *w, uint32_t *max_inline);
/* Moves qp from RESET to INIT on our port (remote access: TGT and RC QPs; an INI QP is
 * sent from only). 0 or the verbs error (positive). */
int  rdmach_rc_qp_init(const rdmach_rc_wire_t *w, struct ibv_qp *qp, int remote_access);
/* Connects qp to the QP dest_qpn at dev (a peer's device address), RTR then RTS, with the
 * attributes its type requires (RC, XRC INI, XRC TGT). 0 or the verbs error (positive). */
int  rdmach_rc_qp_connect(const rdmach_rc_wire_t *w, struct ibv_qp *qp,
                          const rdmach_rc_dev_addr_t *dev, uint32_t dest_qpn);
/* Frees a connection: its QP (RC) or its share of a host connection (XRC), block, state. */
void     rdmach_rc_conn_free(rdmach_rc_conn_t *c);
/* The table's connection entries. */
int      rdmach_rc_ep_open(rdmach_wire_t *wire, void *ep_ctx, rdmach_wire_peer_t **peer_p);
void     rdmach_rc_ep_pack_addr(const rdmach_wire_peer_t *peer, void *buf);
int      rdmach_rc_ep_connect(rdmach_wire_t *wire, rdmach_wire_peer_t *peer,
                              const void *dev_addr, const void *ep_addr, rdmach_tx_t *tx);
void     rdmach_rc_ep_close(rdmach_wire_t *wire, rdmach_wire_peer_t *peer);
int      rdmach_rc_activate(rdmach_wire_t *wire, uint32_t id, rdmach_rx_t *rx);
unsigned rdmach_rc_reap(rdmach_wire_t *wire, int procs,
                        void (*drain)(void *arg, uint32_t ring_id), void *arg);

/* XRC mode (rdmach_rc_xrc.c). open: from config.xrc, the host's XRC domain and our XRC SRQ
 * on rcq; 0 (xrcd NULL: plain RC, after one info line when the device has no XRC in auto),
 * or -errno when XRC was required and the device cannot (logged, naming the device and the
 * reason). */
int  rdmach_rc_xrc_open(rdmach_rc_wire_t *w);
void rdmach_rc_xrc_close(rdmach_rc_wire_t *w);
/* A host connection's send queue (the core's INI handle). */
static inline rdmach_rc_sq_t *rdmach_rc_xrc_sq(const rdmach_rc_wire_t *w, int host)
{
    return (rdmach_rc_sq_t*)w->xrc.hosts[host].ini;
}
/* The TGT QP number a connection receives through. */
static inline uint32_t rdmach_rc_xrc_tgt_qpn(const rdmach_rc_wire_t *w,
                                             const rdmach_rc_conn_t *c)
{
    return (c->xrc.tgt >= 0) ? w->xrc.tgts[c->xrc.tgt].qpn : 0;
}

/* The notice word (rdmach_xrc.h): the TGT on the receiver's host that our INI reaches,
 * written by the sender into the receiver's rx ctl (peer_info[1], unused on RC), checked
 * against its complement so that a torn read is no notice. */
#define RDMACH_RC_NOTICE_WORD 1
static inline uint64_t rdmach_rc_notice_pack(uint32_t tgt_qpn)
{
    return ((uint64_t)(uint32_t)~tgt_qpn << 32) | tgt_qpn;
}
static inline uint32_t rdmach_rc_notice_unpack(uint64_t word)
{
    return ((uint32_t)(word >> 32) == (uint32_t)~(uint32_t)word) ? (uint32_t)word : 0;
}

#endif
