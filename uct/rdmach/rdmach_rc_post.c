/*
 * rdmach InfiniBand RC verbs wire: posting and completions. The send queue (WR sequences,
 * selective signalling, room), the ring hooks that post records, tail and rx_hot updates
 * (post_record, post_tail, post_hot), the CQ polling that completes them and the operations
 * queued behind them, the shared receive queue's records (their receive completions),
 * progress, a connection's failure, check and flush. Everything a record costs on its way
 * out and in is in this file.
 */
#include "rdmach_rc_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

/* Receive WQEs without buffers into the SRQ: a WRITE with immediate consumes one. */
int rdmach_rc_srq_post(rdmach_rc_wire_t *w, uint32_t n)
{
    struct ibv_recv_wr wr[32], *bad;
    uint32_t i, k;

    while (n > 0) {
        k = RC_MIN(n, 32u);
        memset(wr, 0, sizeof(wr[0]) * k);
        for (i = 0; i < k; ++i) {
            wr[i].next = (i + 1 < k) ? &wr[i + 1] : NULL;
        }
        if (ibv_post_srq_recv(w->srq, wr, &bad) != 0) {
            return -1;
        }
        n -= k;
    }
    return 0;
}

/* ---- send queue ---- */

static inline uint64_t rdmach_rc_wr_id(const rdmach_rc_conn_t *c, uint64_t seq)
{
    return ((uint64_t)c->ring_id << RC_SEQ_BITS) | (seq & RC_SEQ_MASK);
}

/* Delivers the operations done up to c->completed, in order. */
void rdmach_rc_deliver(rdmach_rc_conn_t *c)
{
    rdmach_rc_wire_t *w = c->w;
    rdmach_rc_op_t *op;

    while (c->op_head != c->op_tail) {
        op = &c->ops[c->op_head % RC_OPS_MAX];
        if (!c->failed && (op->seq > c->completed)) {
            break;
        }
        ++c->op_head;
        if (op->bounce >= 0) {
            if ((op->unpack != NULL) && !c->failed) {
                op->unpack(op->arg, rdmach_rc_bounce(w, op->bounce), op->len);
            }
            w->bounce_free[w->nbounce_free++] = op->bounce;
        }
        if (op->amo >= 0) {
            if (!c->failed) {
                *op->result = w->amo[op->amo];
            }
            w->amo_free[w->namo_free++] = op->amo;
        }
        if (op->comp != NULL) {
            w->super.params.complete(op->comp, c->failed ? -ECONNRESET : 0);
        }
    }
}

/* A signalled WR of c completed: its QP's WRs up to it are done. A QP of its own: c's
 * sequence is the QP's. Shared (XRC): the next signalled position of the QP (they complete
 * in order). */
static inline void rdmach_rc_sq_done(rdmach_rc_conn_t *c)
{
    rdmach_rc_sq_t *sq = c->sq;

    if (sq->sig == NULL) {
        sq->completed = c->completed;
    } else if (sq->sig_head != sq->sig_tail) {
        sq->completed = sq->sig[sq->sig_head++ % sq->depth];
    }
}

/* Polls the CQ; deliver == 0 (inside an operation): only advances the completed sequences,
 * and the operations they finish are delivered by the next progress. */
unsigned rdmach_rc_poll(rdmach_rc_wire_t *w, int deliver)
{
    struct ibv_wc wc[RC_POLL_BATCH];
    rdmach_rc_conn_t *c;
    int i, n;

    n = ibv_poll_cq(w->cq, RC_POLL_BATCH, wc);
    for (i = 0; i < n; ++i) {
        if (w->cq_free < w->cq_size) {
            ++w->cq_free;   /* a QP in error completes unsignalled WRs too */
        }
        c = rdmach_rc_conn(w, (uint32_t)(wc[i].wr_id >> RC_SEQ_BITS));
        if (c == NULL) {
            continue;
        }
        if (c->closed && (c->fence_seq != 0) && ((wc[i].wr_id & RC_SEQ_MASK) == c->fence_seq)) {
            c->fence_done = 1;   /* flushed or done: nothing of this QP comes after it */
            ++w->super.reap_ready;
        }
        if (wc[i].status != IBV_WC_SUCCESS) {
            if (!c->failed) {
                RC_LOG(w, 0, "rdmach: RC connection of ring %u failed: %s (vendor error 0x%x)",
                       c->ring_id, ibv_wc_status_str(wc[i].status), wc[i].vendor_err);
            }
            if ((w->xrcd != NULL) && (c->xrc.host >= 0)) {
                /* the host connection's INI QP is in error: every connection through it
                 * fails with its own WRs' flushed completions; new ones make a new one */
                rdmach_xrc_host_failed(&w->xrc, c->xrc.host);
            }
            rdmach_rc_fail(c, -ECONNRESET);
            continue;
        }
        STATS(w, completions)++;
        /* 2^40 WRs per connection: the sequence does not wrap in practice; a nested poll
         * (from a send inside a completion callback) may have seen a later one */
        if ((wc[i].wr_id & RC_SEQ_MASK) > c->completed) {
            c->completed = wc[i].wr_id & RC_SEQ_MASK;
        }
        rdmach_rc_sq_done(c);
        if ((w->xrcd != NULL) && (c->xrc.host >= 0)) {
            rdmach_xrc_confirm(&w->xrc, c->xrc.host);   /* its TGT answers: shareable */
        }
        if (c->op_head != c->op_tail) {
            if (deliver) {
                rdmach_rc_deliver(c);
            } else if (!c->dirty) {
                c->dirty             = 1;
                w->dirty[w->ndirty++] = c->ring_id;
            }
        }
    }
    if (deliver && (w->ndirty != 0)) {
        while (w->ndirty != 0) {
            c        = w->conns[w->dirty[--w->ndirty]];
            c->dirty = 0;
            rdmach_rc_deliver(c);
        }
    }
    return (n > 0) ? (unsigned)n : 0;
}

void rdmach_rc_write_wr(struct ibv_send_wr *wr, struct ibv_sge *sge, void *addr,
                        uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey,
                        int inl)
{
    sge->addr            = (uintptr_t)addr;
    sge->length          = len;
    sge->lkey            = lkey;
    wr->sg_list          = sge;
    wr->num_sge          = (len == 0) ? 0 : 1;
    wr->opcode           = IBV_WR_RDMA_WRITE;
    wr->send_flags       = inl ? IBV_SEND_INLINE : 0;
    wr->wr.rdma.remote_addr = raddr;
    wr->wr.rdma.rkey     = rkey;
}

/* XRC: the notice the peer awaits (the TGT on its host our INI reaches), one inline WRITE
 * into its rx ctl ahead of our first WR to it: RC places a QP's WRITEs in order, so the peer
 * has it before any record of ours completes there (rdmach_rc_came_on reads it then). */
static int rdmach_rc_post_notice(rdmach_rc_conn_t *c)
{
    uint64_t word = rdmach_rc_notice_pack(c->xrc.tgt_used);
    struct ibv_send_wr wr, *bad;
    struct ibv_sge sge;
    int ret;

    memset(&wr, 0, sizeof(wr));
    rdmach_rc_write_wr(&wr, &sge, &word, sizeof(word), 0,
                       c->r_slots - sizeof(rdmach_ring_ctl_t) +
                       offsetof(rdmach_ring_ctl_t, peer_info[RDMACH_RC_NOTICE_WORD]),
                       c->r_rkey, 1);
    wr.qp_type.xrc.remote_srqn = c->r_srqn;
    wr.wr_id                   = rdmach_rc_wr_id(c, c->posted);   /* names c if flushed */
    ret = ibv_post_send(c->qp, &wr, &bad);
    if (ret == 0) {
        c->notice_due = 0;
        ++c->sq->posted;   /* unsignalled: retired by the next signalled WR of the QP */
        STATS(c->w, posts)++;
    }
    return ret;
}

/* Posts a chain of n WRs; the last is signalled when 'signal' or when RC_SIGNAL_EVERY WRs
 * went unsignalled. Returns the last WR's sequence, or 0 (errno set). */
uint64_t rdmach_rc_post(rdmach_rc_conn_t *c, struct ibv_send_wr *wr, unsigned n,
                        int signal)
{
    rdmach_rc_wire_t *w = c->w;
    rdmach_rc_sq_t *sq  = c->sq;
    struct ibv_send_wr *bad;
    uint64_t seq        = c->posted + n;
    unsigned i;
    int ret;

    if (c->notice_due && ((ret = rdmach_rc_post_notice(c)) != 0)) {
        errno = ret;
        return 0;
    }
    /* signalling is counted per QP: a QP shared by connections (XRC) retires its WRs only
     * through its own signalled ones */
    if (sq->posted + n - sq->signalled >= RC_SIGNAL_EVERY) {
        signal = 1;
    }
    for (i = 0; i < n; ++i) {
        wr[i].next       = (i + 1 < n) ? &wr[i + 1] : NULL;
        wr[i].wr_id      = rdmach_rc_wr_id(c, c->posted + i + 1);
        wr[i].send_flags = (wr[i].send_flags & IBV_SEND_INLINE) |
                           ((signal && (i + 1 == n)) ? IBV_SEND_SIGNALED : 0);
        wr[i].qp_type.xrc.remote_srqn = c->r_srqn;   /* XRC: the peer's SRQ; RC ignores it */
    }
    ret = ibv_post_send(c->qp, wr, &bad);
    if (ret != 0) {
        errno = ret;
        return 0;
    }
    c->posted   = seq;
    sq->posted += n;
    STATS(w, posts) += n;
    if (signal) {
        c->signalled  = seq;
        sq->signalled = sq->posted;
        if (sq->sig != NULL) {
            sq->sig[sq->sig_tail++ % sq->depth] = sq->posted;
        }
        --w->cq_free;
    }
    return seq;
}

/* Waits until the send queue has room for n WRs (a record cannot be refused: the ring core
 * has committed it). Completions free the room; the peer's ACKs bring them. */
static int rdmach_rc_wait_room(rdmach_rc_conn_t *c, unsigned n)
{
    while ((rdmach_rc_sq_free(c) < n) || (c->w->cq_free < 2)) {
        if (c->failed) {
            return -ECONNRESET;
        }
        rdmach_rc_poll(c->w, 0);
    }
    return c->failed ? -ECONNRESET : 0;
}

/* ---- ring hooks ---- */

static const uint8_t rdmach_rc_one = 1;

/*
 * A record is one WRITE, or two, on the QP. To a peer that receives through a shared receive
 * queue (c->imm): one RDMA WRITE with immediate (the peer's ring id), read there once its
 * receive completion counted it in. Else everything but the mark (header fields and payload),
 * then the 8-byte mark, inline. The responder places the first completely before the second,
 * and however the device stores the mark's bytes, it can only equal the expected position once
 * all its differing bytes landed: a receiver that sees the mark sees the whole record. (One
 * WRITE of header and payload would not do without the completion: the device may store its
 * bytes in any order.) A doorbell byte WRITE follows them when the receiver's ring is cold.
 */
void rdmach_rc_post_record(void *ctx, uint32_t index, const void *rec, size_t bytes,
                           int doorbell)
{
    rdmach_rc_conn_t *c  = ctx;
    size_t inl           = c->w->super.max_inline;
    uint64_t raddr       = c->r_slots + (uint64_t)index * c->super.geom.slot_size;
    const size_t mark    = sizeof(((rdmach_rec_hdr_t*)0)->mark);
    struct ibv_send_wr wr[3];
    struct ibv_sge sge[3];
    unsigned n = 0;

    if (c->failed || (rdmach_rc_wait_room(c, c->imm ? 1 : 3) != 0)) {
        return;   /* the connection failed: its ep reports it */
    }
    if (c->imm) {
        /* one WRITE with immediate: the receiver reads the record once its completion
         * arrives (which also rings the ring's doorbell there): one packet, no doorbell */
        memset(&wr[0], 0, sizeof(wr[0]));
        rdmach_rc_write_wr(&wr[0], &sge[0], (void*)rec, (uint32_t)bytes, c->mr->lkey, raddr,
                           c->r_rkey, bytes <= inl);
        wr[0].opcode   = IBV_WR_RDMA_WRITE_WITH_IMM;
        wr[0].imm_data = htonl(c->r_ring);
        if (rdmach_rc_post(c, wr, 1, 0) == 0) {
            rdmach_rc_fail(c, -errno);
        }
        return;
    }
    memset(wr, 0, sizeof(wr));
    rdmach_rc_write_wr(&wr[n], &sge[n], (uint8_t*)rec + mark, (uint32_t)(bytes - mark),
                       c->mr->lkey, raddr + mark, c->r_rkey, bytes - mark <= inl);
    ++n;
    rdmach_rc_write_wr(&wr[n], &sge[n], (void*)rec, (uint32_t)mark, c->mr->lkey, raddr,
                       c->r_rkey, mark <= inl);
    ++n;
    if (doorbell) {
        rdmach_rc_write_wr(&wr[n], &sge[n], (void*)&rdmach_rc_one, 1, 0, c->r_doorbell,
                           c->r_db_rkey, 1);
        ++n;
    }
    if (rdmach_rc_post(c, wr, n, 0) == 0) {
        rdmach_rc_fail(c, -errno);
    }
}

/* A small value WRITE (inline: the value is copied at post time). */
static void rdmach_rc_post_value(rdmach_rc_conn_t *c, const void *value, uint32_t len,
                                 uint64_t raddr)
{
    struct ibv_send_wr wr;
    struct ibv_sge sge;

    if (c->failed || !c->connected || (rdmach_rc_wait_room(c, 1) != 0)) {
        return;
    }
    memset(&wr, 0, sizeof(wr));
    rdmach_rc_write_wr(&wr, &sge, (void*)value, len, 0, raddr, c->r_rkey, 1);
    if (rdmach_rc_post(c, &wr, 1, 0) == 0) {
        rdmach_rc_fail(c, -errno);
    }
}

void rdmach_rc_post_tail(void *ctx, uint64_t tail)
{
    rdmach_rc_conn_t *c = ctx;

    rdmach_rc_post_value(c, &tail, sizeof(tail), c->r_credit);
}

void rdmach_rc_post_hot(void *ctx, uint32_t hot)
{
    rdmach_rc_conn_t *c = ctx;

    if (c->w->srq != NULL) {
        return;   /* records ring the doorbell through their completion: no sender asks */
    }
    rdmach_rc_post_value(c, &hot, sizeof(hot),
                         c->r_shadow_ctl + offsetof(rdmach_ring_ctl_t, rx_hot));
}

const rdmach_ring_ops_t rdmach_rc_ring_ops = {
    rdmach_rc_post_record, rdmach_rc_post_tail, rdmach_rc_post_hot, NULL
};

void rdmach_rc_fail(rdmach_rc_conn_t *c, int err)
{
    int was_failed = c->failed;

    c->failed = 1;
    if (!was_failed) {
        STATS(c->w, failures)++;
    }
    rdmach_rc_deliver(c);
    if (!was_failed && !c->closed && (c->w->super.params.failed != NULL)) {
        c->w->super.params.failed(c->ep_ctx, err);
    }
}

/* Queues a completion for the WR of sequence seq. */
rdmach_rc_op_t *rdmach_rc_push_op(rdmach_rc_conn_t *c, uint64_t seq, void *comp,
                                  int bounce,
                                  void (*unpack)(void*, const void*, size_t),
                                  void *arg, size_t len)
{
    rdmach_rc_op_t *op = &c->ops[c->op_tail++ % RC_OPS_MAX];

    op->seq    = seq;
    op->comp   = comp;
    op->bounce = bounce;
    op->unpack = unpack;
    op->arg    = arg;
    op->len    = len;
    op->amo    = -1;
    return op;
}

/* Did a record for c arrive on the QP it should (a peer's ring id is checked against the
 * connection's QP)? XRC: through the TGT c receives on. A pending one (rdmach_xrc.h) may have
 * changed: the peer's notice, written before its first record, says which. */
static int rdmach_rc_came_on(rdmach_rc_wire_t *w, rdmach_rc_conn_t *c, uint32_t qpn)
{
    uint32_t notice;

    if (w->xrcd == NULL) {
        return (c->qp != NULL) && (c->qp->qp_num == qpn);
    }
    if (c->xrc.pending) {
        notice = rdmach_rc_notice_unpack(
                __atomic_load_n(&c->rx_ctl->peer_info[RDMACH_RC_NOTICE_WORD], __ATOMIC_ACQUIRE));
        if ((notice != 0) && (rdmach_xrc_notice(&w->xrc, &c->xrc, notice) != 0)) {
            RC_LOG(w, 0, "rdmach: XRC notice of ring %u names TGT 0x%x: refused", c->ring_id,
                   notice);
        }
    }
    return rdmach_rc_xrc_tgt_qpn(w, c) == qpn;
}

/* Completions of records written into our rings: count each in for its ring (the immediate
 * names it; a peer's claim is checked against the QP it came on) and ring its doorbell. A
 * record is at least its header: a shorter write with immediate (a broken peer's) is counted
 * as corrupt, not in, or it would let a later record be read before all of it landed. */
unsigned rdmach_rc_poll_recv(rdmach_rc_wire_t *w)
{
    struct ibv_wc wc[RC_POLL_BATCH];
    rdmach_rc_conn_t *c;
    uint32_t id;
    int i, n;

    n = ibv_poll_cq(w->rcq, RC_POLL_BATCH, wc);
    for (i = 0; i < n; ++i) {
        ++w->srq_repost;
        if (wc[i].status != IBV_WC_SUCCESS) {
            continue;   /* its QP broke: the send side reports the connection */
        }
        id = ntohl(wc[i].imm_data);
        c  = rdmach_rc_conn(w, id);
        if ((wc[i].opcode != IBV_WC_RECV_RDMA_WITH_IMM) || (c == NULL) ||
            !rdmach_rc_came_on(w, c, wc[i].qp_num) ||
            (wc[i].byte_len < sizeof(rdmach_rec_hdr_t))) {
            if (w->super.params.stats != NULL) {
                w->super.params.stats->corrupt++;
            }
            continue;
        }
        ++c->rx_avail;
        w->doorbells[id] = 1;
    }
    if ((w->srq_repost >= 32) || ((n == 0) && (w->srq_repost != 0))) {
        if (rdmach_rc_srq_post(w, w->srq_repost) == 0) {
            w->srq_repost = 0;
        }
    }
    return (n > 0) ? (unsigned)n : 0;
}

unsigned rdmach_rc_progress(rdmach_wire_t *wire)
{
    rdmach_rc_wire_t *w = (rdmach_rc_wire_t*)wire;
    unsigned count      = (w->srq != NULL) ? rdmach_rc_poll_recv(w) : 0;

    return count + rdmach_rc_poll(w, 1);
}

/* A signalled zero-byte WRITE (to the credit line: it writes nothing). */
uint64_t rdmach_rc_post_empty(rdmach_rc_conn_t *c)
{
    struct ibv_send_wr wr;
    struct ibv_sge sge;

    if ((rdmach_rc_sq_free(c) < 1) || (c->w->cq_free < 2)) {
        errno = EAGAIN;
        return 0;
    }
    memset(&wr, 0, sizeof(wr));
    rdmach_rc_write_wr(&wr, &sge, NULL, 0, 0, c->r_credit, c->r_rkey, 0);
    return rdmach_rc_post(c, &wr, 1, 1);
}

int rdmach_rc_check(rdmach_wire_t *wire, rdmach_wire_peer_t *peer)
{
    rdmach_rc_conn_t *c = (rdmach_rc_conn_t*)peer;

    (void)wire;
    if (c->failed || !c->connected ||
        ((c->signalled == c->posted) && (c->completed != c->posted))) {
        return 0;   /* failed: reported; a signalled WR in flight probes the peer already */
    }
    return (rdmach_rc_post_empty(c) != 0) ? 0 : -errno;
}

/* A signalled zero-byte WRITE behind everything posted: done when it completes. */
static int rdmach_rc_flush_conn(rdmach_rc_conn_t *c, void *comp)
{
    uint64_t seq;

    if (c->failed) {
        return -ECONNRESET;
    }
    if (!c->connected || (c->completed == c->posted)) {
        return 0;
    }
    if (c->signalled == c->posted) {
        seq = c->posted;   /* the last WR is signalled already */
    } else {
        if (c->op_tail - c->op_head >= RC_OPS_MAX) {
            return -EAGAIN;
        }
        seq = rdmach_rc_post_empty(c);
        if (seq == 0) {
            return -errno;
        }
    }
    if (comp != NULL) {
        if (c->op_tail - c->op_head >= RC_OPS_MAX) {
            return -EAGAIN;
        }
        rdmach_rc_push_op(c, seq, comp, -1, NULL, NULL, 0);
    }
    return RDMACH_WIRE_INPROGRESS;
}

int rdmach_rc_flush(rdmach_wire_t *wire, rdmach_wire_peer_t *peer, void *comp)
{
    rdmach_rc_wire_t *w = (rdmach_rc_wire_t*)wire;
    int ret, busy = 0;
    uint32_t i;

    if (peer != NULL) {
        return rdmach_rc_flush_conn((rdmach_rc_conn_t*)peer, comp);
    }
    /* the iface: without a completion (UCT's iface flush on RC takes none) */
    for (i = 0; i < w->next_ring; ++i) {
        if ((w->conns[i] == NULL) || w->conns[i]->closed) {
            continue;
        }
        ret = rdmach_rc_flush_conn(w->conns[i], NULL);
        if (ret == RDMACH_WIRE_INPROGRESS || ret == -EAGAIN) {
            busy = 1;
        }
    }
    return busy ? RDMACH_WIRE_INPROGRESS : 0;
}
