/*
 * ud_zcopy: the zero-copy receive of a wire whose receives are posted ahead (udz_wire.h
 * posts_ahead; InfiniBand UD, where the HCA places a datagram into the oldest receive posted
 * on the QP, or drops it when there is none). Koop, Sur, Panda's zero-copy UD protocol: the
 * receiver posts one receive per chunk, the header into a buffer of its own and the payload
 * straight into the user's buffer, before the sender starts; the chunk's sequence number
 * comes as immediate data.
 *
 * Plain C, no verbs: a wire gives the engine its calls (udz_postq_ops_t: post a receive,
 * poll completions, recall every posted receive, its own buffers) and fills its table's
 * chan_recv and chan_end with udz_postq_recv and udz_postq_end; the unit tests run it over
 * an in-memory receive queue with the same semantics (tests/unit/udz_memwire.h).
 *
 * The core's slots are its predictions for one call (udz_wire.h); posted receives outlive
 * the call. Per channel the engine keeps the FIFO of receives it posted, each one
 *  - zero-copy: into a DEST slot's destination, with the slot's tag;
 *  - bounce: into the wire's buffer for that FIFO position (a SCRATCH slot's datagram: the
 *    short last chunk; and everything after a recall), copied into a slot when reported.
 * The invariant that makes it safe: a zero-copy receive is posted only into the destination
 * of a chunk the core does not have yet, and stays posted only while every datagram came
 * where predicted. Then a landing never overwrites what the core holds, and the core and the
 * engine never write where a receive may still land. The first surprise (a completion whose
 * immediate is not its receive's tag: a loss shifted the stream, a duplicate, a stale
 * datagram; or a report that would copy into a destination a receive may land in) breaks the
 * prediction for the whole FIFO: the engine recalls every posted receive (the wire moves its
 * QP to error, which flushes them, and back), moves what had landed in destinations into
 * the bounce buffers, and reports it from there. The channel then receives through bounce
 * buffers until the transfer ends; chan_end recalls what is still posted, and the next
 * transfer starts zero-copy again. Loss is rare on InfiniBand: the recall is the slow path.
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

/* One completion of a posted receive. */
typedef struct udz_postq_wc {
    uint32_t   pos;         /* the receive's FIFO position (what post was given) */
    int        ok;          /* 0: flushed by a recall, or failed: nothing landed */
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
    /* Every receive posted on chan completes (poll returns it, landed or flushed), and the
     * channel takes receives again with none posted. 0 or -errno. */
    int (*recall)(void *wire, unsigned chan);
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
    uint8_t     done, ok;
    udz_addr_t  src;
} udz_postq_ent_t;

typedef struct udz_postq_chan {
    udz_postq_ent_t ent[UDZ_POSTQ_MAX_DEPTH];
    uint32_t        tail;   /* oldest receive not reported */
    uint32_t        polled; /* [tail, polled) completed, [polled, head) posted */
    uint32_t        head;   /* next position to post */
    int             bounce; /* recalled: bounce receives until the transfer ends */
    int             error;  /* a post or recall failed: the channel receives nothing */
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

/* The table's chan_recv and chan_end (udz_wire.h). */
int udz_postq_recv(udz_postq_t *q, unsigned chan, udz_rxmsg_t *msgs, int n);
void udz_postq_end(udz_postq_t *q, unsigned chan);

/* Receives posted on chan now (for tests and the wire's sizing). */
unsigned udz_postq_posted(const udz_postq_t *q, unsigned chan);

#ifdef __cplusplus
}
#endif
#endif
