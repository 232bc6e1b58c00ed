/*
 * ud_zcopy: the zero-copy receive of a wire whose receives are posted ahead (udz_wire.h
 * posts_ahead; InfiniBand UD, where the HCA places a datagram into the oldest receive posted
 * on the QP, or drops it when there is none). Koop, Sur, Panda's zero-copy UD protocol: the
 * receiver posts one receive per chunk, the header into a buffer of its own and the payload
 * straight into the user's buffer, before the sender starts; the chunk's sequence number
 * comes as immediate data.
 *
 * Plain C, no verbs: a wire gives the engine its calls (udz_postq_ops_t: post a receive,
 * poll completions, renew a channel, its own buffers) and fills its table's
 * chan_recv and chan_end with udz_postq_recv and udz_postq_end; the unit tests run it over
 * an in-memory receive queue with the same semantics (tests/unit/udz_memwire.h).
 *
 * The core's slots are its predictions for one call (udz_wire.h); posted receives outlive
 * the call. Per channel the engine keeps the FIFO of receives it posted, each one
 *  - zero-copy: into a DEST slot's destination, with the slot's tag;
 *  - bounce: into the wire's buffer for that FIFO position (a SCRATCH slot's datagram: the
 *    short last chunk; and everything after a surprise).
 * A completion is reported where its payload lies (the core's slot is pointed there, and the
 * core copies what is not in its own place), so the engine copies no payload on its way,
 * and nothing is ever taken back from the receive queue while the transfer runs: taking
 * receives back means moving the QP to error and reset, which races with arriving packets
 * in rdma_rxe (a NULL dereference in rxe_responder on Linux 6.1).
 * Two rules keep every landing away from what the core holds, and the core away from where
 * a receive may land:
 *  - a zero-copy receive is posted only into the destination of a chunk the core does not
 *    have; a datagram that landed in another chunk's destination (its immediate is not its
 *    receive's tag: a loss shifted the stream, a duplicate, a stale datagram) is copied out
 *    into the bounce buffer of its position when polled, so that place is free again;
 *  - a chunk is not reported while a zero-copy receive for it is still posted (the core
 *    would write its destination, where that receive may land): it waits, in its bounce
 *    buffer, until that receive completed (the datagrams that follow fill it: the core's
 *    repair keeps them coming).
 * After a surprise a channel posts only bounce receives, until datagrams come as the core
 * predicts them again (UDZ_POSTQ_RESYNC in a row: a surprise is mostly a burst, a late run
 * and its resends); bounce receives still posted then, or when a transfer ends (serving the
 * next transfer's first datagrams), take any datagram, and zero-copy receives are posted
 * behind them for the chunks that follow. A transfer that completed has no
 * zero-copy receive posted (the second rule); one that was cancelled may have: the wire then
 * renews the channel, a new QP with a new number for the next ZREQ, so nothing can land in a
 * buffer the user has back.
 */
#ifndef UDZ_POSTQ_H
#define UDZ_POSTQ_H

#include "udz_wire.h"

#ifdef __cplusplus
extern "C" {
#endif

/* FIFO positions per channel at most (the core offers at most 64 slots per call, and a
 * transfer's window is what the FIFO can hold: udz_postq_window). */
#define UDZ_POSTQ_MAX_DEPTH 64
/* Datagrams reported in a row as the core predicted them that end a channel's bounce mode;
 * doubled, up to the MAX, each time zero-copy receives ended in a surprise again before a
 * run of twice the FIFO's depth (a lossy stream: each loss, and each repair, shifts every
 * receive posted behind it). */
#define UDZ_POSTQ_RESYNC     4
#define UDZ_POSTQ_RESYNC_MAX 4096

/* One completion of a posted receive. */
typedef struct udz_postq_wc {
    uint32_t   pos;         /* the receive's FIFO position (what post was given) */
    int        ok;          /* 0: failed, nothing landed */
    uint32_t   len;         /* bytes of the datagram (the wire's own header, e.g. the GRH,
                             * not counted) */
    uint32_t   imm;         /* its tag (udz_txmsg_t.tag) */
    udz_addr_t src;         /* the sender's control address */
} udz_postq_wc_t;

typedef struct udz_postq_ops {
    /* Posts a receive at FIFO position pos of channel chan: the datagram's first hdr_len
     * bytes into the wire's header area of pos (udz_postq_hdr), the rest into payload (len
     * bytes), or into the wire's bounce buffer of pos when payload is NULL. 0 or -errno. */
    int (*post)(void *wire, unsigned chan, uint32_t pos, void *payload, size_t len);
    /* Up to n completions of chan, in the order the receives were posted: how many, or
     * -errno. */
    int (*poll)(void *wire, unsigned chan, udz_postq_wc_t *wc, int n);
    /* Every receive posted on chan is gone, none completes any more, and the channel takes
     * receives again with none posted (verbs: a new QP; its chan_id changes). 0 or -errno. */
    int (*renew)(void *wire, unsigned chan);
    /* The wire's header area and bounce buffer of FIFO position pos (hdr_len and
     * bounce_len bytes). */
    void *(*hdr)(void *wire, unsigned chan, uint32_t pos);
    void *(*bounce)(void *wire, unsigned chan, uint32_t pos);
} udz_postq_ops_t;

typedef struct udz_postq_ent {
    void       *dst;        /* zero-copy: the destination; NULL: bounce */
    uint32_t    tag;        /* the tag of the slot it was posted for */
    uint32_t    len;        /* completed: the datagram's bytes */
    uint32_t    imm;
    uint8_t     done, ok, reported;
    uint8_t     any;        /* a bounce receive that predicts no datagram yet */
    udz_addr_t  src;
} udz_postq_ent_t;

typedef struct udz_postq_chan {
    udz_postq_ent_t ent[UDZ_POSTQ_MAX_DEPTH];
    uint32_t        tail;   /* oldest receive not reported */
    uint32_t        polled; /* [tail, polled) completed, [polled, head) posted */
    uint32_t        head;   /* next position to post */
    int             bounce; /* a surprise: bounce receives until back in step */
    unsigned        in_step;/* in bounce mode: datagrams reported in a row as predicted */
    unsigned        need;   /* in_step that ends bounce mode (UDZ_POSTQ_RESYNC, doubled) */
    unsigned        zc_run; /* datagrams reported out of zero-copy mode since its start */
    uint32_t        seen;   /* polled when the last recv returned */
    int             want;   /* a transfer began: the next recv posts */
    int             error;  /* a post or renew failed: the channel receives nothing */
} udz_postq_chan_t;

typedef struct udz_postq {
    const udz_postq_ops_t *ops;
    void                  *wire;
    unsigned               depth;
    size_t                 hdr_len, bounce_len;
    udz_wire_counters_t   *counters;    /* NULL: none */
    udz_postq_wc_t         wc[UDZ_POSTQ_MAX_DEPTH];
    udz_postq_chan_t       chan[UDZ_MAX_CHANNELS];
} udz_postq_t;

/* depth receives at most per channel (1..UDZ_POSTQ_MAX_DEPTH); hdr_len: the bytes of every
 * datagram that go to the header area (the core's header); bounce_len: a bounce buffer's
 * bytes (the largest payload). */
void udz_postq_init(udz_postq_t *q, const udz_postq_ops_t *ops, void *wire, unsigned depth,
                    size_t hdr_len, size_t bounce_len, udz_wire_counters_t *counters);

/* The table's chan_recv, chan_end and chan_quiet (udz_wire.h). */
int udz_postq_recv(udz_postq_t *q, unsigned chan, udz_rxmsg_t *msgs, int n);
void udz_postq_end(udz_postq_t *q, unsigned chan);
int udz_postq_quiet(udz_postq_t *q, unsigned chan);

#ifdef __cplusplus
}
#endif
#endif
