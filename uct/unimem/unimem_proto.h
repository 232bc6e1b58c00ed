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
 *
 * A message of up to 30 bytes is one SHORT: the compact header is 2 bytes (UCT's am_short, an
 * 8-byte header plus up to 22 bytes, is always one mailbox message). A longer one is a FIRST
 * and CONT fragments that carry the sender's id (unique at that mailbox, from the HAL) and a
 * rolling 8-bit sequence number: the mailbox keeps each sender's order but may interleave
 * senders, so the receiver reassembles per sender. The sender hands all fragments of one
 * message to the HAL as one all-or-nothing group.
 *
 * Bad input (from a buggy or hostile peer) is dropped and counted, never trusted: unknown type,
 * SHORT longer than 30, a total length of 0 or beyond the receiver's limit, a sender id beyond
 * its table, a CONT without a FIRST or out of sequence or with another AM id (the partial
 * message is dropped with it).
 */
#ifndef UNIMEM_PROTO_H
#define UNIMEM_PROTO_H

#include "unimem_hal.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define UNIMEM_PROTO_SHORT       1
#define UNIMEM_PROTO_FIRST       2
#define UNIMEM_PROTO_CONT        3
#define UNIMEM_PROTO_AM_ID_MAX   32
#define UNIMEM_PROTO_SHORT_MAX   30
#define UNIMEM_PROTO_FIRST_DATA  24
#define UNIMEM_PROTO_CONT_DATA   28
#define UNIMEM_PROTO_MAX_SENDERS 65536

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
    if (len > 0) {
        memcpy(&m->b[2 + hdr_len], payload, len);
    }
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
} unimem_rx_stats_t;

/* Their names in the transport's counters file, in field order. */
#define UNIMEM_RX_COUNTERS(_) _(mbox_rx_msgs) _(rx_am) _(rx_bytes) _(rx_corrupt)

/* Delivery of a whole active message; data is valid only during the call. */
typedef void (*unimem_am_cb_t)(void *arg, uint8_t am_id, void *data, uint32_t length);

typedef struct unimem_reasm {
    uint8_t  *buf;       /* max_len bytes, allocated at the sender's first FIRST */
    uint32_t total, got;
    uint8_t  am_id, next_seq, active;
} unimem_reasm_t;

typedef struct unimem_rx {
    unimem_reasm_t    *senders;
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

/* Decodes one mailbox message (the caller's private copy: a SHORT is delivered in place, and
 * the handler may write into it); delivers through cb when a message is complete. */
void unimem_rx_msg(unimem_rx_t *rx, unimem_msg_t *m);

#ifdef __cplusplus
}
#endif

#endif
