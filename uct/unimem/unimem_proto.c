/*
 * unimem mailbox protocol: fragmentation and per-sender reassembly (see unimem_proto.h).
 */
#include "unimem_proto.h"

#include <errno.h>
#include <stdlib.h>

#define UNIMEM_LIKELY(x)   __builtin_expect(!!(x), 1)
#define UNIMEM_UNLIKELY(x) __builtin_expect(!!(x), 0)

static inline void unimem_put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline void unimem_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static inline uint16_t unimem_get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t unimem_get32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

unsigned unimem_proto_pack(unimem_msg_t *msgs, uint8_t am_id, uint16_t sender,
                           const void *data, size_t len)
{
    const uint8_t *src = data;
    uint8_t type_am    = am_id & 0x1f;
    unsigned n, i;
    size_t chunk;

    if (len <= UNIMEM_PROTO_SHORT_MAX) {
        msgs[0].b[0] = (uint8_t)((UNIMEM_PROTO_SHORT << 5) | type_am);
        msgs[0].b[1] = (uint8_t)len;
        if (len > 0) {
            memcpy(&msgs[0].b[2], src, len);
        }
        return 1;
    }

    n = unimem_proto_nmsgs(len);
    msgs[0].b[0] = (uint8_t)((UNIMEM_PROTO_FIRST << 5) | type_am);
    msgs[0].b[1] = 0;
    unimem_put16(&msgs[0].b[2], sender);
    unimem_put32(&msgs[0].b[4], (uint32_t)len);
    memcpy(&msgs[0].b[8], src, UNIMEM_PROTO_FIRST_DATA);
    src += UNIMEM_PROTO_FIRST_DATA;
    len -= UNIMEM_PROTO_FIRST_DATA;

    for (i = 1; i < n; ++i) {
        chunk        = (len < UNIMEM_PROTO_CONT_DATA) ? len : UNIMEM_PROTO_CONT_DATA;
        msgs[i].b[0] = (uint8_t)((UNIMEM_PROTO_CONT << 5) | type_am);
        msgs[i].b[1] = (uint8_t)i;
        unimem_put16(&msgs[i].b[2], sender);
        memcpy(&msgs[i].b[4], src, chunk);
        src += chunk;
        len -= chunk;
    }
    return n;
}

int unimem_rx_init(unimem_rx_t *rx, uint32_t max_senders, uint32_t max_len,
                   unimem_rx_stats_t *stats, unimem_am_cb_t cb, void *arg)
{
    if ((max_senders == 0) || (max_senders > UNIMEM_PROTO_MAX_SENDERS)) {
        return -EINVAL;
    }
    rx->senders = calloc(max_senders, sizeof(*rx->senders));
    if (rx->senders == NULL) {
        return -ENOMEM;
    }
    rx->land          = NULL;
    rx->land_rings    = 0;
    rx->land_slots    = 0;
    rx->land_prefault = 0;
    rx->land_seen     = 0;
    rx->land_new      = NULL;
    rx->max_senders   = max_senders;
    rx->max_len       = max_len;
    rx->stats         = stats;
    rx->cb            = cb;
    rx->arg           = arg;
    return 0;
}

void unimem_rx_cleanup(unimem_rx_t *rx)
{
    uint32_t i;

    if (rx->senders == NULL) {
        return;
    }
    for (i = 0; i < rx->max_senders; ++i) {
        free(rx->senders[i].buf);
    }
    free(rx->senders);
    rx->senders = NULL;
}

void unimem_rx_land(unimem_rx_t *rx, uint8_t *area, uint32_t rings, uint32_t slots)
{
    rx->land           = area;
    rx->land_rings     = (rings < rx->max_senders) ? rings : rx->max_senders;
    rx->land_slots     = slots;
    rx->land_slot_size = (uint32_t)unimem_land_slot_size(rx->max_len);
}

void unimem_rx_land_prefault(unimem_rx_t *rx, uint32_t rings, unimem_land_new_cb_t cb)
{
    rings             = (rings < rx->land_rings) ? rings : rx->land_rings;
    rx->land_prefault = (cb == NULL) ? 0 : ((rings < 64) ? rings : 64);
    rx->land_new      = cb;
}

static inline void unimem_rx_deliver(unimem_rx_t *rx, uint8_t am_id, void *data,
                                     uint32_t length)
{
    rx->stats->am++;
    rx->stats->bytes += length;
    rx->cb(rx->arg, am_id, data, length);
}

static void unimem_rx_fragment(unimem_rx_t *rx, uint8_t type, uint8_t am_id,
                               const unimem_msg_t *m)
{
    uint16_t sender = unimem_get16(&m->b[2]);
    unimem_reasm_t *r;
    uint32_t total, chunk;

    if (UNIMEM_UNLIKELY(sender >= rx->max_senders)) {
        rx->stats->corrupt++;
        return;
    }
    r = &rx->senders[sender];

    if (type == UNIMEM_PROTO_FIRST) {
        total = unimem_get32(&m->b[4]);
        if (r->active) {
            rx->stats->corrupt++;      /* the previous message never completed */
            r->active = 0;
        }
        if (UNIMEM_UNLIKELY((m->b[1] != 0) || (total == 0) || (total > rx->max_len))) {
            rx->stats->corrupt++;
            return;
        }
        if (UNIMEM_UNLIKELY(r->buf == NULL)) {
            r->buf = malloc(rx->max_len);   /* once per sender, not per message */
            if (r->buf == NULL) {
                rx->stats->corrupt++;
                return;
            }
        }
        chunk = (total < UNIMEM_PROTO_FIRST_DATA) ? total : UNIMEM_PROTO_FIRST_DATA;
        memcpy(r->buf, &m->b[8], chunk);
        r->total    = total;
        r->got      = chunk;
        r->am_id    = am_id;
        r->next_seq = 1;
        r->active   = 1;
    } else {
        if (UNIMEM_UNLIKELY(!r->active || (m->b[1] != r->next_seq) || (am_id != r->am_id))) {
            rx->stats->corrupt++;
            r->active = 0;
            return;
        }
        chunk = r->total - r->got;
        if (chunk > UNIMEM_PROTO_CONT_DATA) {
            chunk = UNIMEM_PROTO_CONT_DATA;
        }
        memcpy(r->buf + r->got, &m->b[4], chunk);
        r->got += chunk;
        r->next_seq++;
    }

    if (r->got == r->total) {
        r->active = 0;
        unimem_rx_deliver(rx, r->am_id, r->buf, r->total);
    }
}

/* A message waiting in a landing slot (LAND, or LANDI with its head in m): every field
 * checked before the slot is read. */
static void unimem_rx_landed(unimem_rx_t *rx, uint8_t type, uint8_t am_id,
                             const unimem_msg_t *m)
{
    uint16_t sender = unimem_get16(&m->b[2]);
    uint32_t length = unimem_get32(&m->b[4]);
    uint32_t min    = (type == UNIMEM_PROTO_LANDI) ? UNIMEM_LANDI_HEAD : 0;
    uint32_t max    = ((type == UNIMEM_PROTO_LANDI) && (UNIMEM_LANDI_MAX < rx->max_len)) ?
                      UNIMEM_LANDI_MAX : rx->max_len;
    uint8_t *slot;

    if (UNIMEM_UNLIKELY((rx->land == NULL) || (sender >= rx->land_rings) ||
                        (m->b[1] >= rx->land_slots) || (length < min) || (length > max))) {
        rx->stats->corrupt++;
        return;
    }
    slot = rx->land + ((size_t)sender * rx->land_slots + m->b[1]) * rx->land_slot_size;
    if (UNIMEM_UNLIKELY(__atomic_load_n(unimem_land_busy(slot), __ATOMIC_ACQUIRE) != 1)) {
        rx->stats->corrupt++;
        return;
    }
    if (UNIMEM_UNLIKELY((sender < rx->land_prefault) && !((rx->land_seen >> sender) & 1))) {
        rx->land_seen |= 1ull << sender;
        rx->land_new(rx->land + (size_t)sender * rx->land_slots * rx->land_slot_size,
                     (size_t)rx->land_slots * rx->land_slot_size);
    }
    rx->stats->land++;
    if (type == UNIMEM_PROTO_LANDI) {
        memcpy(rx->landi, &m->b[8], UNIMEM_LANDI_HEAD);
        memcpy(rx->landi + UNIMEM_LANDI_HEAD, slot + UNIMEM_LAND_HDR,
               length - UNIMEM_LANDI_HEAD);
        __atomic_store_n(unimem_land_busy(slot), 0, __ATOMIC_RELEASE);
        unimem_rx_deliver(rx, am_id, rx->landi, length);
        return;
    }
    unimem_rx_deliver(rx, am_id, slot + UNIMEM_LAND_HDR, length);
    __atomic_store_n(unimem_land_busy(slot), 0, __ATOMIC_RELEASE);
}

void unimem_rx_msg_other(unimem_rx_t *rx, unimem_msg_t *m)
{
    uint8_t type  = m->b[0] >> 5;
    uint8_t am_id = m->b[0] & 0x1f;

    rx->stats->msgs++;
    if ((type == UNIMEM_PROTO_LAND) || (type == UNIMEM_PROTO_LANDI)) {
        unimem_rx_landed(rx, type, am_id, m);
    } else if ((type == UNIMEM_PROTO_FIRST) || (type == UNIMEM_PROTO_CONT)) {
        unimem_rx_fragment(rx, type, am_id, m);
    } else {
        rx->stats->corrupt++;   /* an unknown type, or a SHORT longer than it may be */
    }
}

void unimem_rx_msg(unimem_rx_t *rx, unimem_msg_t *m)
{
    unimem_rx_msg_inline(rx, m, rx->cb, rx->arg);
}
