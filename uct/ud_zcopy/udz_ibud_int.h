/*
 * ud_zcopy InfiniBand UD wire, internal: the constants, the wire's state and the functions that
 * its files share (udz_ibud.c says which file does what). Nothing here is seen by the core or
 * the glue, which know the wire through udz_wire.h (udz_ibud_wire) only.
 */
#ifndef UDZ_IBUD_INT_H
#define UDZ_IBUD_INT_H

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "udz_postq.h"
#include "udz_proto.h"
#include "ucx_ext_compat.h"
#include "ucx_ext_verbs.h"

#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <ucm/api/ucm.h>
#include <ucs/memory/rcache.h>
#include <ucs/sys/sys.h>

#define UDZ_IBUD_GRH          40u
#define UDZ_IBUD_QKEY         0x757a6b31u      /* "uzk1": ud_zcopy's datagrams, nobody else's */
#define UDZ_IBUD_MAX_MTU      4096u
#define UDZ_IBUD_HDR_STRIDE   80u              /* GRH + the core's header, 8-byte aligned */
#define UDZ_IBUD_SQ_DEPTH     256u
#define UDZ_IBUD_SIGNAL_EVERY 16u
#define UDZ_IBUD_BATCH        64
#define UDZ_IBUD_CHAN_REGS    4                /* destinations a channel holds registered */
#define UDZ_IBUD_AH_BUCKETS   64

typedef struct udz_ibud_ah {
    struct ibv_ah      *ah;
    uint8_t             gid[16];
    uint16_t            lid;
    struct udz_ibud_ah *next;
} udz_ibud_ah_t;

/* A destination held registered for a channel's transfer. */
typedef struct udz_ibud_reg {
    uintptr_t            start, end;
    uint32_t             lkey;
    ucs_rcache_region_t *region;    /* from the cache, or NULL: mr is ours */
    struct ibv_mr       *mr;
} udz_ibud_reg_t;

typedef struct udz_ibud_chan {
    struct ibv_cq  *cq;
    struct ibv_qp  *qp;
    uint32_t        posted;                         /* receives not polled yet */
    udz_ibud_reg_t  reg[UDZ_IBUD_CHAN_REGS];
    unsigned        nreg;
} udz_ibud_chan_t;

typedef struct udz_ibud_rcache_region {
    ucs_rcache_region_t super;
    struct ibv_mr      *mr;
} udz_ibud_rcache_region_t;

typedef struct udz_ibud {
    struct ibv_context  *ctx;
    struct ibv_pd       *pd;
    struct ibv_cq       *scq, *rcq;         /* the control QP's */
    struct ibv_qp       *qp;
    struct ibv_mr       *mr;                /* all our buffers */
    uint8_t             *mem;
    size_t               mem_len;
    uint8_t              port;
    int                  gid_index;
    int                  roce, ipv4;        /* RoCE; its GRH area holds an IPv4 header */
    uint8_t              gid[16];
    uint16_t             lid;
    uint32_t             mtu;               /* datagram bytes: the active path MTU */
    uint32_t             max_inline;
    /* control receive buffers, send buffers (one per send queue position) */
    uint8_t             *rxbuf, *txbuf;
    uint32_t             nrx, rx_stride;
    uint32_t             sq_depth;
    uint64_t             sq_head, sq_done;  /* WRs posted; WRs known complete */
    ucs_rcache_region_t **sq_reg;           /* per send queue position: the registration a
                                             * zero-copy chunk's WR holds until it completes */
    /* data channels */
    unsigned             nchan, depth;
    uint8_t             *chdr, *cbounce;
    size_t               bounce_len;
    udz_ibud_chan_t      chan[UDZ_MAX_CHANNELS];
    udz_postq_t          pq;
    ucs_rcache_t        *rcache;
    udz_ibud_ah_t       *ah[UDZ_IBUD_AH_BUCKETS];
    udz_wire_counters_t *counters;
    char                 name[64];
    struct ibv_wc        wc[UDZ_IBUD_BATCH];
} udz_ibud_t;

/* ---- addresses: [GID 16][LID 2][0 0][QPN 4] (udz_ibud_dev.c) ---- */

static inline void udz_ibud_addr_make(const uint8_t *gid, uint16_t lid, uint32_t qpn,
                                      udz_addr_t *out)
{
    memset(out, 0, sizeof(*out));
    memcpy(out->b, gid, 16);
    memcpy(out->b + 16, &lid, 2);
    memcpy(out->b + 20, &qpn, 4);
}

static inline uint32_t udz_ibud_addr_qpn(const udz_addr_t *a)
{
    uint32_t qpn;

    memcpy(&qpn, a->b + 20, 4);
    return qpn;
}

/* ---- the functions the files share (none leaves the module: -fvisibility=hidden) ---- */

/* udz_ibud_dev.c: devices and addresses */
uint32_t udz_ibud_mtu_bytes(enum ibv_mtu mtu);
int udz_ibud_query_devices(int (*found)(void *arg, const char *dev), void *arg);
size_t udz_ibud_dev_mtu(const char *dev);
void udz_ibud_src(const udz_ibud_t *w, const uint8_t *grh, const struct ibv_wc *wc,
                  udz_addr_t *out);
udz_ibud_ah_t *udz_ibud_ah(udz_ibud_t *w, const udz_addr_t *dst);
void udz_ibud_dev_addr_pack(void *wire, void *dev_addr);
void udz_ibud_iface_addr_pack(void *wire, void *iface_addr);
void udz_ibud_addr_unpack(const void *dev_addr, const void *iface_addr, udz_addr_t *out,
                          udz_chans_t *chans);
int udz_ibud_is_reachable(void *wire, const void *dev_addr, int same_host);

/* udz_ibud_qp.c: UD QPs, the control QP's receive and send */
int udz_ibud_qp_ready(udz_ibud_t *w, struct ibv_qp *qp);
struct ibv_qp *udz_ibud_qp_create(udz_ibud_t *w, struct ibv_cq *scq, struct ibv_cq *rcq,
                                  uint32_t sq, uint32_t rq, uint32_t *max_inline);
int udz_ibud_rx_post(udz_ibud_t *w, const uint32_t *idx, int n);
int udz_ibud_recv(void *wire, udz_rxmsg_t *msgs, int n);
int udz_ibud_send(void *wire, const udz_addr_t *dst, const udz_txmsg_t *msgs, int n);
int udz_ibud_chan_send(void *wire, const udz_addr_t *dst, const udz_txmsg_t *msgs, int n);

/* udz_ibud_reg.c: registration of destinations */
void udz_ibud_rcache_open(udz_ibud_t *w, const void *config);
int udz_ibud_chan_lkey(udz_ibud_t *w, unsigned chan, const void *p, size_t len, uint32_t *lkey);
void udz_ibud_chan_hold(udz_ibud_t *w, unsigned chan, const struct iovec *dest);
void udz_ibud_chan_release(udz_ibud_t *w, unsigned chan);

/* udz_ibud_chan.c: data channels */
extern const udz_postq_ops_t udz_ibud_pq_ops;
int udz_ibud_chan_open(udz_ibud_t *w, unsigned chan);
void udz_ibud_chan_close(udz_ibud_t *w, unsigned chan);
int udz_ibud_chan_recv(void *wire, unsigned chan, udz_rxmsg_t *msgs, int n);
void udz_ibud_chan_end(void *wire, unsigned chan);
int udz_ibud_chan_quiet(void *wire, unsigned chan);
uint32_t udz_ibud_chan_id(void *wire, unsigned chan);
int udz_ibud_chan_addr(void *wire, const udz_addr_t *ctrl, const udz_chans_t *chans,
                       uint32_t chan_id, udz_addr_t *out);

#endif
