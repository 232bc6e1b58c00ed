/*
 * ud_zcopy wire format: what one datagram carries. Shared by the protocol core (udz_core.h), the
 * decoder fuzzer and the unit tests; no sockets, no UCX.
 *
 * Every datagram starts with the same 32-byte header. Two kinds of datagrams exist:
 *  - on the control endpoint: the reliable stream per peer (AM, PUT, ZREQ, ZERR carry a packet
 *    sequence number and are delivered exactly once, in order) and unreliable control (ACK, ZACK,
 *    ZDONE), every one of them carrying a piggybacked cumulative ack;
 *  - on a data channel: ZDATA, one chunk of a zero-copy transfer, whose payload the receiver has
 *    already scattered into the destination buffer (the 32-byte header is the analogue of the
 *    40-byte GRH that InfiniBand UD puts in front of every receive).
 * Fields are in host byte order: ud_zcopy peers are homogeneous (one MPI job).
 */
#ifndef UDZ_PROTO_H
#define UDZ_PROTO_H

#include <stdint.h>
#include <string.h>

#define UDZ_MAGIC       0x5a75u     /* "uZ" */
#define UDZ_VERSION     2   /* 2: CHAL (address validation) and the BUSY ack flag */

/* header.type */
enum {
    /* reliable (psn, in order, exactly once) */
    UDZ_T_AM    = 1,    /* active message: am_id in header, payload = user data */
    UDZ_T_PUT   = 2,    /* udz_put_t + data, written into the target's registered memory */
    UDZ_T_ZREQ  = 3,    /* udz_zreq_t: "send me this region on my data channel" */
    UDZ_T_ZFIN  = 4,    /* udz_zfin_t: the requester is done with a transfer (all data there, or
                         * failed): the owner stops touching the region. Reliable, so that it
                         * arrives before whatever the requester sends next (UCP's ATS, after
                         * which the owner's buffer may be freed). */
    UDZ_T_RELIABLE_MAX = UDZ_T_ZFIN,
    /* unreliable control (a transfer's own timers recover their loss) */
    UDZ_T_ACK   = 8,    /* header only: cumulative ack, maybe NAK */
    UDZ_T_ZACK  = 9,    /* udz_zack_t: progress of a transfer, selective ack */
    UDZ_T_ZDONE = 10,   /* header only, psn = transfer id: "no such transfer here" (answer to a
                         * late ZDATA of a finished transfer) */
    UDZ_T_ZERR  = 11,   /* udz_zerr_t: the owner refused a ZREQ (resent on every ZACK) */
    UDZ_T_CHAL  = 12,   /* udz_chal_t: address validation, a cookie echo as QUIC and DTLS do
                         * it: the owner serves a peer's ZREQs only once the peer has echoed
                         * a random value sent to its address (udz_peer.c) */
    /* data channel */
    UDZ_T_ZDATA = 16,   /* psn = transfer id, ack = chunk index, payload = chunk */
};

/* header.flags */
#define UDZ_F_ACK_REQ   0x01    /* receiver: ack now (sender window filling, flush, retransmit) */
#define UDZ_F_NAK       0x02    /* ACK: a gap was seen at header.ack; go back and resend */
#define UDZ_F_STUCK     0x04    /* ZACK: nothing arrived for a while; resend the holes now */
#define UDZ_F_BUSY      0x08    /* ACK: alive, but taking no packets now (its application is
                                 * away and what it has not taken yet reached a budget): keep
                                 * them in the window and resend later, do not fail it */
#define UDZ_F_SACK      0x10    /* ACK with NAK: the receiver keeps what came after the hole
                                 * at header.ack, from header.psn on: resend the packets from
                                 * header.ack up to header.psn only (a psn that is not after
                                 * header.ack, or beyond what went: the one at header.ack) */

typedef struct udz_hdr {
    uint16_t magic;
    uint8_t  version;
    uint8_t  type;
    uint8_t  flags;
    uint8_t  am_id;
    uint16_t len;           /* payload bytes after the header: datagram = 32 + len exactly */
    uint64_t dst_cookie;    /* the receiver iface's random cookie: anything else is dropped */
    uint64_t src_cookie;    /* the sender iface's cookie: a new value means a new incarnation */
    uint32_t psn;           /* reliable types: sequence number; ZDATA/ZDONE: transfer id */
    uint32_t ack;           /* control: next psn expected from the receiver; ZDATA: chunk */
} __attribute__((packed)) udz_hdr_t;

#define UDZ_HDR_LEN     ((unsigned)sizeof(udz_hdr_t))
/* The wire's own headers and framing around a datagram, for the iface's bandwidth: IPv4 and
 * UDP (28) in an Ethernet frame (38 with preamble, FCS and gap); InfiniBand UD's LRH, GRH,
 * BTH, DETH and CRCs come to 74, close enough for an estimate. */
#define UDZ_DGRAM_HEADERS 66u

/* Remote key as carried on the wire: opaque to the core, checked by the owner's memory domain. */
#define UDZ_RKEY_LEN    24

typedef struct udz_put {
    uint64_t addr;
    uint8_t  rkey[UDZ_RKEY_LEN];
} __attribute__((packed)) udz_put_t;

/* The key a put carries; NULL for an empty put, which the owner accepts without looking it up
 * (a UCT caller may pass UCT_INVALID_RKEY with zero bytes). */
static inline void udz_put_key(udz_put_t *put, const void *rkey)
{
    if (rkey != NULL) {
        memcpy(put->rkey, rkey, UDZ_RKEY_LEN);
    } else {
        memset(put->rkey, 0, UDZ_RKEY_LEN);
    }
}

typedef struct udz_zreq {
    uint32_t xfer_id;       /* chosen by the requester, echoed in every ZDATA */
    uint32_t chan_id;       /* the requester's data channel (UDP: its port) */
    uint64_t addr;          /* source region in the owner's address space */
    uint64_t len;
    uint32_t chunk;         /* payload bytes per ZDATA */
    uint32_t window;        /* chunks the owner may have in flight beyond the acked ones */
    uint8_t  rkey[UDZ_RKEY_LEN];
} __attribute__((packed)) udz_zreq_t;

/* A challenge and/or the echo of one. chal: a random value the sender sent to the receiver's
 * address (0: none; the sender knows the receiver already); echo: the receiver's own chal
 * coming back (0: none). Answered at once, one CHAL for one, never larger: nobody can use it to
 * amplify. */
typedef struct udz_chal {
    uint64_t echo;
    uint64_t chal;
} __attribute__((packed)) udz_chal_t;

typedef struct udz_zfin {
    uint32_t xfer_id;
} __attribute__((packed)) udz_zfin_t;

typedef struct udz_zerr {
    uint32_t xfer_id;
    int32_t  status;        /* negative errno */
} __attribute__((packed)) udz_zerr_t;

/* A ZACK names every hole up to 1024 chunks above cum, so that one ZACK lets the owner repair
 * all of them (at 1% loss per datagram a 1 MiB transfer of 1440-byte chunks has 7 holes).
 * It carries 1 to UDZ_ZACK_WORDS words, as many as reach the highest chunk received: the
 * datagram is 8 + 8 * words bytes (16 bytes, one word, is the first version's ZACK). */
#define UDZ_ZACK_WORDS  16

typedef struct udz_zack {
    uint32_t xfer_id;
    uint32_t cum;           /* every chunk below has arrived */
    uint64_t sack[UDZ_ZACK_WORDS];  /* bit i of word w: chunk cum + 1 + 64 w + i has arrived */
} __attribute__((packed)) udz_zack_t;

#define UDZ_ZACK_LEN(_words)  (8u + 8u * (unsigned)(_words))

#ifdef __cplusplus
static_assert(sizeof(udz_hdr_t) == 32, "header must stay 32 bytes (payload alignment)");
#else
_Static_assert(sizeof(udz_hdr_t) == 32, "header must stay 32 bytes (payload alignment)");
#endif

#endif
