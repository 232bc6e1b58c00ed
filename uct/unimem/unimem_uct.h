/*
 * unimem UCT glue: the types shared by md, iface and ep. Thin on purpose: the mailbox protocol
 * is in unimem_proto.[ch], the hardware behind unimem_hal.h (emulated: unimem_hal_emu.c).
 */
#ifndef UNIMEM_UCT_H
#define UNIMEM_UCT_H

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "unimem_hal.h"
#include "unimem_proto.h"
#include "ucx_ext_base.h"
#include "ucx_ext_md.h"
#include "ucx_ext_ops.h"
#include "ucx_ext_sm.h"
#include "ucx_ext_sys.h"
#include "ucx_ext_xmem.h"

#include <ucs/datastruct/mpool.h>
#include <uct/base/uct_iface.h>
#include <uct/base/uct_md.h>
#include <uct/sm/base/sm_iface.h>
#include <ucs/datastruct/arbiter.h>
#include <ucs/datastruct/list.h>
#include <ucs/time/time.h>

#define UCT_UNIMEM_NAME    "unimem"
#define UCT_UNIMEM_PREFIX  "UNIMEM_"

/* ---- counters (uct/common: the file contract and the standard send-side block) ---- */

/* The mailbox and zDMA level, after the standard send side; rma_mapped: puts and gets done
 * as loads and stores through the global address space (a mapped key); tx_am_land: active
 * messages stored into the receiver's landing slot (one LAND message each), tx_land_busy:
 * messages fragmented instead because the sender's next slot was still busy;
 * tx_land_demoted: landed sends whose slot line was demoted (uct_unimem_ep_land_demote). */
#define UCT_UNIMEM_OWN_COUNTERS(_) \
    _(mbox_tx_msgs) _(tx_am_frag) _(mbox_tx_frag_msgs) _(mbox_full) _(tx_stashed) \
    _(zdma_reads) _(zdma_writes) _(zdma_bytes) _(pdid_refused) _(sleeps) _(rma_mapped) \
    _(tx_am_land) _(tx_land_busy) _(tx_land_demoted)

#define UCT_UNIMEM_COUNTERS(_) \
    UNIMEM_RX_COUNTERS(_) UCX_EXT_TX_COUNTERS(_) UCT_UNIMEM_OWN_COUNTERS(_)

typedef struct uct_unimem_counters {
    unimem_rx_stats_t     rx;
    ucx_ext_tx_counters_t tx;
    UCT_UNIMEM_OWN_COUNTERS(UCX_EXT_COUNTER_FIELD)
} uct_unimem_counters_t;

extern uct_unimem_counters_t uct_unimem_counters;

#define UCT_UNIMEM_COUNT(_name, _n)    (uct_unimem_counters.tx._name += (_n))
#define UCT_UNIMEM_COUNT_OWN(_name, _n) (uct_unimem_counters._name += (_n))

/* ---- md ---- */

extern ucx_ext_component_t uct_unimem_component;

typedef struct uct_unimem_md_config {
    uct_md_config_t super;
    unsigned        pdid;
} uct_unimem_md_config_t;

typedef struct uct_unimem_md {
    uct_md_t     super;
    unsigned     pdid;    /* as configured; validated at iface open */
    unimem_hal_t *hal;    /* NULL while the PDID is invalid */
} uct_unimem_md_t;

/* Packed remote key: the global address (process, vaddr), the PDID and the length; xmem: the
 * segment of the global address space that holds the region, when a peer can load and store
 * there (memory the md allocated, or a shared file mapping), else empty (ucx_ext_xmem.h). */
typedef struct uct_unimem_rkey {
    uint32_t            proc;
    uint16_t            pdid;
    uint64_t            vaddr;
    uint64_t            length;
    ucx_ext_xmem_desc_t xmem;
} UCS_S_PACKED uct_unimem_rkey_t;

/* ---- iface ---- */

/* am_short with a landing area: up to this many bytes (8-byte header included) are one
 * LAND message; without one, 30 (one SHORT). */
#define UCT_UNIMEM_LAND_SHORT_MAX 128
#define UCT_UNIMEM_LAND_MAX_AREA  (64ull << 30)
/* UCX_UNIMEM_SEG_SIZE's upper bound (unimem_iface.c), which a peer's address obeys too */
#define UCT_UNIMEM_SEG_SIZE_MAX   (64u << 20)
/* UCX_UNIMEM_ZCOPY_THRESH=auto: zDMA from 8 KiB (docs/unimem.md, "Where eager ends") */
#define UCT_UNIMEM_ZCOPY_AUTO     (8u << 10)

/* UCP packs an iface address of at most 63 bytes: the landing area is described by what a
 * peer needs to map it (the owner is mbox.proc). */
typedef struct uct_unimem_iface_addr {
    unimem_hal_mbox_addr_t mbox;
    uint32_t               seg_size;   /* largest message its receiver reassembles */
    uint32_t               nslots;     /* its mailbox slots */
    int32_t                land_fd;    /* landing area: the owner's memfd */
    uint64_t               land_ino;   /* its inode */
    uint64_t               land_base;  /* its address in the owner */
    uint32_t               land_rings; /* sender ids 0..land_rings-1 have a ring */
    uint32_t               land_slots; /* slots per ring; 0: no landing area */
} UCS_S_PACKED uct_unimem_iface_addr_t;

typedef struct uct_unimem_iface_config {
    ucx_ext_sm_iface_config_t super;
    unsigned              mbox_slots;
    size_t                seg_size;
    unsigned              max_senders;
    unsigned              rx_budget;
    size_t                zcopy_thresh;
    size_t                put_max_short;
    unsigned long         zdma_channel;
    unsigned              zdma_queue;
    unsigned              land_slots;
    unsigned              land_senders;
    unsigned              land_prefault;
} uct_unimem_iface_config_t;

/* A posted zDMA transfer whose completion is not known yet (not with the emulation, whose
 * transfers complete when posted; a driver backend's do). */
typedef struct uct_unimem_zdma_wait {
    uint64_t         ticket;
    uct_completion_t *comp;
} uct_unimem_zdma_wait_t;

typedef struct uct_unimem_iface {
    uct_sm_iface_t         super;
    ucx_ext_iface_t        x;              /* pending, flush, peer liveness (uct/common) */
    unsigned               progress_calls; /* since the last look at every peer's process */
    unimem_hal_t           *hal;
    unimem_hal_mbox_t      *mbox;
    unimem_hal_zdma_t      *zdma;
    unimem_rx_t            rx;
    uint32_t               pdid;
    uint32_t               nslots;
    size_t                 seg_size;       /* am/put/get bcopy limit */
    unsigned               max_msgs;       /* mailbox messages of the largest message */
    size_t                 zcopy_thresh;
    size_t                 eager_max;      /* 0, or UCP sends up to it eagerly: a
                                            * ZCOPY_THRESH of auto (ucx_ext_sm_caps_t) */
    size_t                 put_max_short;
    unsigned               rx_budget;
    unimem_msg_t           *rx_msgs;       /* rx_budget messages */
    unimem_msg_t           *tx_msgs;       /* max_msgs messages */
    uint8_t                *bounce;        /* seg_size */
    ucx_ext_xmem_desc_t    land_desc;      /* the landing area peers store into: rx.land
                                            * (NULL: none), rx.land_rings, rx.land_slots */
    unsigned               am_max_short;
    unsigned               land_prefault;  /* LAND_PREFAULT: our rings at peers, too */
    uint64_t               land_rx_seen;   /* mailbox messages received (rx.msgs) at our
                                            * last landed send that demoted its line */
    ucs_list_link_t        stashed;        /* eps holding an accepted, unsent message */
    ucs_mpool_t            stash_mp;       /* stash buffers (seg_size), taken while an ep
                                            * is stashed: memory follows the eps stashed at
                                            * once, not the eps */
    ucs_list_link_t        senders;        /* sender ids in use, one per mailbox reached */
    uct_unimem_zdma_wait_t *zwait;         /* ring of zdma_queue entries */
    unsigned               zwait_size, zwait_head, zwait_tail;
    uint64_t               zdma_last;      /* last ticket posted */
    int                    armed;          /* the mailbox is armed: the next progress
                                            * disarms it (wakeup) */
} uct_unimem_iface_t;

UCS_CLASS_DECLARE(uct_unimem_iface_t, uct_md_h, uct_worker_h, const uct_iface_params_t*,
                  const uct_iface_config_t*);

extern ucs_config_field_t uct_unimem_iface_config_table[];

/* ---- ep ---- */

/* A message accepted while the mailbox filled waits in the ep's stash, and the ep is blocked
 * (super.blocked) until it is out. */
/* This iface's sender id at one mailbox, shared by all its eps there (each message is one
 * whole group, so their messages never mix), given back with the last of them: neither many
 * eps nor connection churn use up the receiver's ids. */
typedef struct uct_unimem_sender {
    ucs_list_link_t      list;
    unimem_hal_dest_t    *dest;
    uint32_t             id;
    unsigned             refs;
    uint8_t              *land_map;   /* the peer's landing area mapped here, or NULL */
    uint8_t              *land_ring;  /* this id's ring in it */
    uint32_t             land_slots;  /* slots in the ring */
    uint32_t             land_next;   /* the slot to write next */
    size_t               slot_size;
} uct_unimem_sender_t;

typedef struct uct_unimem_ep {
    ucx_ext_ep_t         super;       /* pending group, peer process watch (uct/common) */
    unimem_hal_dest_t    *dest;
    uct_unimem_sender_t  *sender;
    uint16_t             sender_id;
    uint8_t              *stash;      /* a fragmented message's (seg_size, from the iface's
                                       * stash_mp while stashed; NULL otherwise) */
    uint32_t             stash_len;
    uint8_t              stash_am_id;
    uint8_t              stash_land;  /* the stash is stash_msg: a LAND whose slot is written */
    unimem_msg_t         stash_msg;
    ucs_list_link_t      stash_list;
} uct_unimem_ep_t;

UCX_EXT_EP_CLASS_DECLARE(uct_unimem_ep_t);

UCX_EXT_EP_AM_DECLARE(uct_unimem_ep);
UCX_EXT_EP_RMA_DECLARE(uct_unimem_ep);

/* The mailbox behind ep was detached by its owner (ucx_ext_iface_t.peer_closed). */
int uct_unimem_ep_peer_closed(ucx_ext_ep_t *ep);

/* Room in the mailbox for the largest message (the pending queue's test). */
int uct_unimem_ep_tx_ready(ucx_ext_ep_t *ep);

/* From the iface's progress: the stashed messages of its eps that now fit (then the pending
 * queue goes, ucx_ext_iface_progress_pending). */
unsigned uct_unimem_ep_progress_stash(uct_unimem_iface_t *iface);
/* zDMA completions of a backend that completes asynchronously. */
/* A zDMA channel for an iface (channel -1: any; shared once the process owns all) and its
 * release; the HAL's open and close, counted per process. */
int  uct_unimem_zdma_get(unimem_hal_t *hal, int channel, unimem_hal_zdma_t **ch_p);
void uct_unimem_zdma_put(unimem_hal_zdma_t *ch);

unsigned uct_unimem_iface_progress_zdma(uct_unimem_iface_t *iface);
/* UCS_OK if ticket is complete, else UCS_INPROGRESS with comp called when it is (or
 * UCS_ERR_NO_RESOURCE when ZDMA_QUEUE transfers are already awaited). */
ucs_status_t uct_unimem_iface_zdma_wait(uct_unimem_iface_t *iface, uint64_t ticket,
                                        uct_completion_t *comp);

#endif
