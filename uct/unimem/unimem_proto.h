/*
 * unimem mailbox protocol (the protocol core): active messages over 32-byte mailbox messages.
 * Plain C, no UCX and no backend: it only encodes and decodes unimem_msg_t (unimem_hal.h), so
 * it is unit-tested with an in-memory mailbox.
 *
 * Every message starts with one byte: type (bits 7..5) | AM id (bits 4..0). Little endian.
 *
 *   SHORT  [0] type|am  [1] length (0..30)                      [2..31]  payload, 30 bytes
 *   FIRST  [0] type|am  [1] seq = 0  [2..3] sender  [4..7] total [8..31]  payload, 24 bytes
 *   CONT   [0] type|am  [1] seq      [2..3] sender               [4..31]  payload, 28 bytes
 *   LAND   [0] type|am  [1] slot     [2..3] sender  [4..7] length        (payload in a slot)
 *   LANDI  [0] type|am  [1] slot     [2..3] sender  [4..7] length [8..31] first 24 bytes
 *
 * A message of up to 30 bytes is one SHORT: the compact header is 2 bytes (UCT's am_short, an
 * 8-byte header plus up to 22 bytes, is always one mailbox message). A longer one is a FIRST
 * and CONT fragments that carry the sender's id (unique at that mailbox, from the HAL) and a
 * rolling 8-bit sequence number: the mailbox keeps each sender's order but may interleave
 * senders, so the receiver reassembles per sender. The sender hands all fragments of one
 * message to the HAL as one all-or-nothing group.
 *
 * LAND: the payload is already in the receiver's memory. A receiver that exports a landing
 * area (unimem_rx_land) keeps a ring of slots per sender id there; the sender stores a message
 * into its next slot through Unimem's global address space (remote stores, as the ExaNeSt
 * paper's Unimem offers them), marks the slot busy and sends one LAND message as the doorbell:
 * any message up to a slot's size costs one mailbox message instead of 1 + len/28. The slot
 * index travels in the message, so the receiver needs no per-sender state; it delivers from
 * the slot and frees it (busy word 0, release) after the handler returns, and the sender takes
 * a slot only when it reads it free (acquire). The mailbox's publication of the LAND message
 * orders the payload's stores before it (a driver backend: a store barrier before the
 * packetizer). A sender that finds its slot busy sends the message as fragments instead: both
 * go through the same mailbox, so order per sender holds.
 *
 *   slot   [0..3] busy (1: written, 0: free)  [4..7] reserved  [8..] payload
 *
 * LANDI, for a message of 31..80 bytes (an am_short): its first 24 bytes ride in the message
 * and the rest in the slot's first cache line, so such a message moves two lines between the
 * cores (the mailbox slot and one landing line) rather than three. The receiver joins both in
 * a private buffer, frees the slot and delivers from the buffer.
 *
 * Bad input (from a buggy or hostile peer) is dropped and counted, never trusted: unknown type,
 * SHORT longer than 30, a total length of 0 or beyond the receiver's limit, a sender id beyond
 * its table, a CONT without a FIRST or out of sequence or with another AM id (the partial
 * message is dropped with it), a LAND to a receiver without a landing area, or naming a
 * slot out of range, a slot not marked busy, or a length beyond the slot.
 */
#ifndef UNIMEM_PROTO_H
#define UNIMEM_PROTO_H

#include "unimem_hal.h"
#include "ucx_ext_sys.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define UNIMEM_PROTO_SHORT       1
#define UNIMEM_PROTO_FIRST       2
#define UNIMEM_PROTO_CONT        3
#define UNIMEM_PROTO_LAND        4
#define UNIMEM_PROTO_LANDI       5
#define UNIMEM_PROTO_AM_ID_MAX   32
#define UNIMEM_PROTO_SHORT_MAX   30
#define UNIMEM_PROTO_FIRST_DATA  24
#define UNIMEM_PROTO_CONT_DATA   28
#define UNIMEM_PROTO_MAX_SENDERS 65536
#define UNIMEM_LAND_HDR          8      /* a slot's busy word and reserved bytes */
#define UNIMEM_LAND_MAX_SLOTS    256    /* the slot index is one byte */
#define UNIMEM_LANDI_HEAD        24     /* bytes of a LANDI carried in the message */
#define UNIMEM_LANDI_MAX         (UNIMEM_LANDI_HEAD + 64 - UNIMEM_LAND_HDR)   /* 80 */

/* Bytes of one landing slot for messages of up to max_len bytes (cache-line multiples). */
static inline size_t unimem_land_slot_size(size_t max_len)
{
    return (UNIMEM_LAND_HDR + max_len + 63) & ~(size_t)63;
}

/* The busy word of a slot: the sender sets it before the LAND message, the receiver clears
 * it when the handler has returned. */
static inline uint32_t *unimem_land_busy(uint8_t *slot)
{
    return (uint32_t*)(void*)slot;
}

/* A LAND message: len bytes of AM am_id wait in the sender's slot (type LAND); or, type
 * LANDI, the first UNIMEM_LANDI_HEAD of them follow in bytes 8..31 (written by the caller). */
static inline void unimem_proto_land_type(unimem_msg_t *m, uint8_t type, uint8_t am_id,
                                          uint16_t sender, uint8_t slot, uint32_t len)
{
    m->b[0] = (uint8_t)((type << 5) | (am_id & 0x1f));
    m->b[1] = slot;
    m->b[2] = (uint8_t)sender;
    m->b[3] = (uint8_t)(sender >> 8);
    m->b[4] = (uint8_t)len;
    m->b[5] = (uint8_t)(len >> 8);
    m->b[6] = (uint8_t)(len >> 16);
    m->b[7] = (uint8_t)(len >> 24);
}

static inline void unimem_proto_land(unimem_msg_t *m, uint8_t am_id, uint16_t sender,
                                     uint8_t slot, uint32_t len)
{
    memset(m, 0, sizeof(*m));
    unimem_proto_land_type(m, UNIMEM_PROTO_LAND, am_id, sender, slot, len);
}

/* Mailbox messages a message of len bytes takes. */
static inline unsigned unimem_proto_nmsgs(size_t len)
{
    return (len <= UNIMEM_PROTO_SHORT_MAX) ? 1 :
           1 + (unsigned)((len - UNIMEM_PROTO_FIRST_DATA + UNIMEM_PROTO_CONT_DATA - 1) /
                          UNIMEM_PROTO_CONT_DATA);
}

/* One SHORT from a 64-bit header and a payload (hdr_len 0 or 8; hdr_len + len <= 30). */
static inline void unimem_proto_short(unimem_msg_t *m, uint8_t am_id, uint64_t hdr,
                                      unsigned hdr_len, const void *payload, unsigned len)
{
    m->b[0] = (uint8_t)((UNIMEM_PROTO_SHORT << 5) | (am_id & 0x1f));
    m->b[1] = (uint8_t)(hdr_len + len);
    memcpy(&m->b[2], &hdr, hdr_len);
    ucx_ext_copy_small(&m->b[2 + hdr_len], payload, len);
}

/* Encodes a message of len bytes (1 <= len, any size) into msgs[0..n), n = unimem_proto_nmsgs;
 * returns n. */
unsigned unimem_proto_pack(unimem_msg_t *msgs, uint8_t am_id, uint16_t sender,
                           const void *data, size_t len);

/* Receiver statistics (the transport's counters). */
typedef struct unimem_rx_stats {
    uint64_t msgs;      /* mailbox messages decoded (mbox_rx_msgs) */
    uint64_t am;        /* active messages delivered (rx_am) */
    uint64_t bytes;     /* their bytes (rx_bytes) */
    uint64_t corrupt;   /* messages dropped as invalid (rx_corrupt) */
    uint64_t land;      /* of the delivered, those from a landing slot (rx_land) */
} unimem_rx_stats_t;

/* Their names in the transport's counters file, in field order. */
#define UNIMEM_RX_COUNTERS(_) _(mbox_rx_msgs) _(rx_am) _(rx_bytes) _(rx_corrupt) _(rx_land)

/* Delivery of a whole active message; data is valid only during the call. */
typedef void (*unimem_am_cb_t)(void *arg, uint8_t am_id, void *data, uint32_t length);

/* The first LAND into a sender's ring (below unimem_rx_land_prefault's bound): the receiver
 * may make the ring's len bytes at ring resident now (ucx_ext_prefault). */
typedef void (*unimem_land_new_cb_t)(uint8_t *ring, size_t len);

typedef struct unimem_reasm {
    uint8_t  *buf;       /* max_len bytes, allocated at the sender's first FIRST */
    uint32_t total, got;
    uint8_t  am_id, next_seq, active;
} unimem_reasm_t;

typedef struct unimem_rx {
    unimem_reasm_t    *senders;
    uint8_t           *land;           /* landing area, or NULL */
    uint32_t          land_rings;      /* senders 0..land_rings-1 have a ring */
    uint32_t          land_slots;      /* slots per sender */
    uint32_t          land_slot_size;  /* unimem_land_slot_size(max_len) */
    uint32_t          land_prefault;   /* rings 0..land_prefault-1 get land_new, once */
    uint64_t          land_seen;       /* of those, the rings whose first LAND came */
    unimem_land_new_cb_t land_new;
    uint8_t           landi[UNIMEM_LANDI_MAX];   /* a LANDI's two parts, joined */
    uint32_t          max_senders;
    uint32_t          max_len;
    unimem_rx_stats_t *stats;
    unimem_am_cb_t    cb;
    void              *arg;
} unimem_rx_t;

/* Returns 0 or -ENOMEM. */
int  unimem_rx_init(unimem_rx_t *rx, uint32_t max_senders, uint32_t max_len,
                    unimem_rx_stats_t *stats, unimem_am_cb_t cb, void *arg);
void unimem_rx_cleanup(unimem_rx_t *rx);

/* Exports a landing area to LAND messages: rings (<= max_senders, for sender ids 0..rings-1)
 * of slots (1..256) slots of unimem_land_slot_size(max_len) bytes each, sender s's ring at
 * s * slots * slot size. The memory stays the caller's. */
void unimem_rx_land(unimem_rx_t *rx, uint8_t *area, uint32_t rings, uint32_t slots);

/* The first LAND into each of the rings of senders 0..rings-1 (at most 64) calls cb first:
 * a ring's pages would otherwise be faulted in one by one over its first lap, one fault per
 * page at each end, in the messages' time. A bound, since a ring is slots x slot size bytes
 * (2 MiB by default) that then stay resident. */
void unimem_rx_land_prefault(unimem_rx_t *rx, uint32_t rings, unimem_land_new_cb_t cb);

/* Bytes of the landing area unimem_rx_land expects. */
static inline size_t unimem_land_area_size(uint32_t max_senders, uint32_t slots,
                                           size_t max_len)
{
    return (size_t)max_senders * slots * unimem_land_slot_size(max_len);
}

/* Every message but a valid SHORT (unimem_rx_msg_inline decodes those): LAND, LANDI, FIRST
 * and CONT, and what is corrupt, counted. */
void unimem_rx_msg_other(unimem_rx_t *rx, unimem_msg_t *m);

/* Decodes one mailbox message (the caller's private copy: a SHORT is delivered in place, and
 * the handler may write into it) and delivers through deliver when a message is complete: a
 * SHORT here, every other message by unimem_rx_msg_other through rx->cb. The caller names
 * deliver at compile time so that it inlines (the glue's progress: the way of most small
 * messages, with no call into the decoder and none through rx->cb). */
static inline void unimem_rx_msg_inline(unimem_rx_t *rx, unimem_msg_t *m, unimem_am_cb_t deliver,
                                        void *arg)
{
    if (((m->b[0] >> 5) == UNIMEM_PROTO_SHORT) && (m->b[1] <= UNIMEM_PROTO_SHORT_MAX)) {
        rx->stats->msgs++;
        rx->stats->am++;
        rx->stats->bytes += m->b[1];
        deliver(arg, m->b[0] & 0x1f, &m->b[2], m->b[1]);
        return;
    }
    unimem_rx_msg_other(rx, m);
}

/* unimem_rx_msg_inline with rx's own callback. */
void unimem_rx_msg(unimem_rx_t *rx, unimem_msg_t *m);

#ifdef __cplusplus
}
#endif

#endif
