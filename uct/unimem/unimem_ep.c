/*
 * unimem ep: a sender into one peer mailbox (the packetizer), and zDMA into that peer process.
 * Active messages: the mailbox protocol (unimem_proto.h) - am_short is one 32-byte message,
 * am_bcopy is fragmented and handed to the HAL as one all-or-nothing group. put/get: zDMA
 * write/read, checked against the rkey (global address + PDID + length).
 */
#include "unimem_uct.h"

#include <uct/base/uct_iov.inl>
#include <errno.h>

/* Maps the peer's landing area (unimem_proto.h, LAND) for sender s: both sides need slots,
 * the id a ring, and the area must map here (same user); otherwise messages fragment. */
static void uct_unimem_sender_land(uct_unimem_iface_t *iface, uct_unimem_sender_t *s,
                                   const uct_unimem_iface_addr_t *addr)
{
    ucx_ext_xmem_desc_t desc;

    s->land_map = NULL;
    /* the peer's own limits (UCX_UNIMEM_SEG_SIZE, LAND_SENDERS, the area's cap) bound its
     * word before the area's size is computed from it: a larger one would wrap the product,
     * map a small file and place slots beyond it */
    if ((iface->rx.land == NULL) || (addr->land_slots == 0) ||
        (addr->land_slots > UNIMEM_LAND_MAX_SLOTS) || (s->id >= addr->land_rings) ||
        (addr->land_rings > UNIMEM_PROTO_MAX_SENDERS) ||
        (addr->seg_size > UCT_UNIMEM_SEG_SIZE_MAX) ||
        (unimem_land_area_size(addr->land_rings, addr->land_slots, addr->seg_size) >
         UCT_UNIMEM_LAND_MAX_AREA)) {
        return;
    }
    s->slot_size   = unimem_land_slot_size(addr->seg_size);
    s->land_slots  = addr->land_slots;
    s->land_next   = 0;
    memset(&desc, 0, sizeof(desc));
    desc.pid    = (int32_t)addr->mbox.proc;
    desc.fd     = addr->land_fd;
    desc.ino    = addr->land_ino;
    desc.base   = addr->land_base;
    desc.length = ucx_ext_xmem_alloc_size(unimem_land_area_size(addr->land_rings,
                                                                addr->land_slots,
                                                                addr->seg_size));
    s->land_map = ucx_ext_xmem_attach(&desc);
    if (s->land_map != NULL) {
        s->land_ring = s->land_map + (size_t)s->id * s->land_slots * s->slot_size;
        if (s->id < iface->land_prefault) {
            /* its pages now, not one fault per page on the first lap (LAND_PREFAULT) */
            ucx_ext_prefault(s->land_ring, (size_t)s->land_slots * s->slot_size, 1);
        }
    }
}

static uct_unimem_sender_t *uct_unimem_sender_get(uct_unimem_iface_t *iface,
                                                  unimem_hal_dest_t *dest,
                                                  const uct_unimem_iface_addr_t *addr)
{
    uct_unimem_sender_t *s;

    ucs_list_for_each(s, &iface->senders, list) {
        if (s->dest == dest) {
            ++s->refs;
            return s;
        }
    }
    s = ucs_malloc(sizeof(*s), "unimem_sender");
    if (s == NULL) {
        return NULL;
    }
    if (unimem_hal_dest_sender_id(dest, &s->id) != 0) {
        ucs_free(s);
        return NULL;
    }
    s->dest = dest;
    s->refs = 1;
    uct_unimem_sender_land(iface, s, addr);
    ucs_list_add_tail(&iface->senders, &s->list);
    return s;
}

static void uct_unimem_sender_put(uct_unimem_sender_t *s)
{
    if (--s->refs == 0) {
        if (s->land_map != NULL) {
            ucx_ext_xmem_detach(s->land_map);
        }
        unimem_hal_dest_sender_id_release(s->dest, s->id);
        ucs_list_del(&s->list);
        ucs_free(s);
    }
}

UCS_CLASS_INIT_FUNC(uct_unimem_ep_t, const uct_ep_params_t *params)
{
    uct_unimem_iface_t *iface = ucs_derived_of(params->iface, uct_unimem_iface_t);
    const uct_unimem_iface_addr_t *addr;
    int ret;

    UCT_EP_PARAMS_CHECK_DEV_IFACE_ADDRS(params);
    addr = (const uct_unimem_iface_addr_t*)params->iface_addr;
    UCS_CLASS_CALL_SUPER_INIT(ucx_ext_ep_t, &iface->super.super, &iface->x,
                              (pid_t)addr->mbox.proc);
    ucx_ext_ep_set_peer_addr(&self->super, UCX_EXT_PEER_IFACE, addr, sizeof(*addr));

    /* the receiver's limits rule: our largest message must be one it reassembles */
    if ((addr->seg_size < iface->seg_size) || (addr->nslots / 2 < iface->max_msgs)) {
        ucs_error("unimem: peer %u reassembles messages of at most %u bytes in a mailbox of "
                  "%u slots, less than this process's UCX_UNIMEM_SEG_SIZE=%zu needs: use the "
                  "same configuration", addr->mbox.proc, addr->seg_size, addr->nslots,
                  iface->seg_size);
        return UCS_ERR_UNREACHABLE;
    }

    ret = unimem_hal_dest_resolve(iface->hal, &addr->mbox, &self->dest);
    if (ret != 0) {
        if (ret == -EACCES) {
            UCT_UNIMEM_COUNT_OWN(pdid_refused, 1);
            ucs_error("unimem: peer %u is in protection domain %u, this process in %u: refused",
                      addr->mbox.proc, addr->mbox.pdid, iface->pdid);
            return UCS_ERR_REJECTED;
        }
        ucs_diag("unimem: cannot reach mailbox %u of process %u: %s", addr->mbox.index,
                 addr->mbox.proc, (ret == -EPROTO) ? "not a compatible mailbox" :
                 strerror(-ret));
        return UCS_ERR_UNREACHABLE;
    }
    self->sender = uct_unimem_sender_get(iface, self->dest, addr);
    if (self->sender == NULL) {
        ucs_error("unimem: process %u's mailbox accepts no more senders (its "
                  "UCX_UNIMEM_MAX_SENDERS)", addr->mbox.proc);
        unimem_hal_dest_release(self->dest);
        return UCS_ERR_EXCEEDS_LIMIT;
    }

    self->sender_id  = (uint16_t)self->sender->id;
    self->stash_len  = 0;
    self->stash_land = 0;
    self->stash      = NULL;
    ucs_debug("unimem ep %p: mailbox %u of process %u, sender id %u, %s", self,
              addr->mbox.index, addr->mbox.proc, self->sender->id,
              (self->sender->land_map != NULL) ? "landing slots" : "fragments only");
    return UCS_OK;
}

/* The stash is out (sent) or given up: a stashed LAND that never went frees its slot for the
 * id's next message; a fragmented message's buffer goes back to the iface. */
static void uct_unimem_ep_unstash(uct_unimem_ep_t *ep, int sent)
{
    if (!sent && ep->stash_land) {
        *unimem_land_busy(ep->sender->land_ring +
                          (size_t)ep->stash_msg.b[1] * ep->sender->slot_size) = 0;
    }
    if (ep->stash != NULL) {
        ucs_mpool_put(ep->stash);
        ep->stash = NULL;
    }
    ep->super.blocked = 0;
    ep->stash_land    = 0;
    ucs_list_del(&ep->stash_list);
}

UCS_CLASS_CLEANUP_FUNC(uct_unimem_ep_t)
{
    if (self->super.blocked) {
        uct_unimem_ep_unstash(self, 0);
    }
    uct_unimem_sender_put(self->sender);
    unimem_hal_dest_release(self->dest);
}

UCS_CLASS_DEFINE(uct_unimem_ep_t, ucx_ext_ep_t);
UCS_CLASS_DEFINE_NEW_FUNC(uct_unimem_ep_t, uct_ep_t, const uct_ep_params_t*);
UCS_CLASS_DEFINE_DELETE_FUNC(uct_unimem_ep_t, uct_ep_t);

static UCS_F_ALWAYS_INLINE ucs_status_t uct_unimem_ep_no_resource(uct_unimem_ep_t *ep,
                                                                  unsigned flags)
{
    return ucx_ext_ep_no_resource(&ep->super, flags);
}

static UCS_F_NOINLINE ucs_status_t uct_unimem_ep_send_error(uct_unimem_ep_t *ep, int ret)
{
    if (ret == -EAGAIN) {
        UCT_UNIMEM_COUNT_OWN(mbox_full, 1);
        return uct_unimem_ep_no_resource(ep, 0);
    }
    if (ret == -EACCES) {
        UCT_UNIMEM_COUNT_OWN(pdid_refused, 1);
        ucs_error("unimem: process %d left this protection domain: message refused", ep->super.pid);
        return UCS_ERR_REJECTED;
    }
    ucs_error("unimem: mailbox send to process %d failed: %s", ep->super.pid, strerror(-ret));
    return UCS_ERR_IO_ERROR;
}

/* ---- active messages: the mailbox ---- */

/* A stashed message blocks the ep as pending requests do (see ucx_ext_ep_must_queue). */
static UCS_F_ALWAYS_INLINE int uct_unimem_ep_must_queue(uct_unimem_ep_t *ep)
{
    return ucx_ext_ep_must_queue(&ep->super);
}

static UCS_F_ALWAYS_INLINE ucs_status_t uct_unimem_ep_send1(uct_unimem_ep_t *ep,
                                                            const unimem_msg_t *msg)
{
    int ret = unimem_hal_send(ep->dest, msg, 1);

    if (ucs_unlikely(ret != 0)) {
        return uct_unimem_ep_send_error(ep, ret);
    }
    UCT_UNIMEM_COUNT_OWN(mbox_tx_msgs, 1);
    return UCS_OK;
}

/* ---- landing slots (unimem_proto.h, LAND) ---- */

/* The sender's next landing slot if it is free, else NULL (no area, or the receiver has not
 * taken the message in it yet). */
static UCS_F_ALWAYS_INLINE uint8_t *uct_unimem_ep_land_slot(uct_unimem_ep_t *ep)
{
    uct_unimem_sender_t *s = ep->sender;
    uint8_t *slot;

    if (s->land_map == NULL) {
        return NULL;
    }
    slot = s->land_ring + (size_t)s->land_next * s->slot_size;
    return ucs_likely(__atomic_load_n(unimem_land_busy(slot), __ATOMIC_ACQUIRE) == 0) ?
           slot : NULL;
}

/*
 * The receiver reads a slot's first line (busy word, the head of the message) only after the
 * LAND message, whose slot index it needs: one cache line after another, each from the
 * sender's core. Demoted right after the doorbell, the slot's line waits in the shared cache
 * while the receiver fetches the message. That pays where someone waits for the message and
 * costs the writer where it streams, so a send demotes only when a message came in since the
 * last one that did: an answer, or the first of a burst (docs/unimem.md, "The slot's line").
 */
static UCS_F_ALWAYS_INLINE void uct_unimem_ep_land_demote(uct_unimem_ep_t *ep, uint8_t *slot)
{
    uct_unimem_iface_t *iface = ucs_derived_of(ep->super.super.super.iface,
                                               uct_unimem_iface_t);

    if (iface->land_rx_seen != uct_unimem_counters.rx.msgs) {
        iface->land_rx_seen = uct_unimem_counters.rx.msgs;
        ucx_ext_cpu_demote(slot);
        UCT_UNIMEM_COUNT_OWN(tx_land_demoted, 1);
    }
}

/* Rings the doorbell for length bytes written into slot: 0, or the HAL's error (the slot
 * stays marked: the caller gives it back or stashes the LAND). */
static UCS_F_ALWAYS_INLINE int uct_unimem_ep_land_send(uct_unimem_ep_t *ep, uint8_t *slot,
                                                       uint8_t type, uint8_t id,
                                                       size_t length, unimem_msg_t *msg)
{
    uct_unimem_sender_t *s = ep->sender;
    int ret;

    *unimem_land_busy(slot) = 1;    /* published with the LAND message (release) */
    if (type == UNIMEM_PROTO_LAND) {
        memset(&msg->b[8], 0, sizeof(*msg) - 8);
    }
    unimem_proto_land_type(msg, type, id, ep->sender_id, (uint8_t)s->land_next,
                           (uint32_t)length);
    ret = unimem_hal_send(ep->dest, msg, 1);
    if (ucs_likely(ret == 0)) {
        /* a LAND the mailbox refused is stashed: nobody reads the slot before it goes */
        uct_unimem_ep_land_demote(ep, slot);
        UCT_UNIMEM_COUNT_OWN(mbox_tx_msgs, 1);
        UCT_UNIMEM_COUNT_OWN(tx_am_land, 1);
    }
    return ret;
}

/* The slot is the sender's from here on, whatever happens to the LAND message. */
static UCS_F_ALWAYS_INLINE void uct_unimem_ep_land_next(uct_unimem_ep_t *ep)
{
    uct_unimem_sender_t *s = ep->sender;

    if (++s->land_next == s->land_slots) {
        s->land_next = 0;
    }
    /* the next slot's first line: busy word (the receiver cleared it a lap ago, so it sits
     * in the receiver's cache) and the head of the next message */
    ucx_ext_cpu_prefetch_own(s->land_ring + (size_t)s->land_next * s->slot_size);
}

/* Fragments and sends a packed message; 0 or the HAL's error. */
static UCS_F_ALWAYS_INLINE int uct_unimem_ep_send_packed(uct_unimem_iface_t *iface,
                                                         uct_unimem_ep_t *ep, uint8_t id,
                                                         const void *data, size_t length)
{
    unsigned n = unimem_proto_pack(iface->tx_msgs, id, ep->sender_id, data, length);
    int ret    = unimem_hal_send(ep->dest, iface->tx_msgs, n);

    if (ucs_likely(ret == 0)) {
        UCT_UNIMEM_COUNT_OWN(mbox_tx_msgs, n);
        if (n > 1) {
            /* how many 32-byte messages the fragmented AMs take */
            UCT_UNIMEM_COUNT_OWN(tx_am_frag, 1);
            UCT_UNIMEM_COUNT_OWN(mbox_tx_frag_msgs, n);
            if (ep->sender->land_map != NULL) {
                UCT_UNIMEM_COUNT_OWN(tx_land_busy, 1);   /* its slot was taken */
            }
        }
    }
    return ret;
}

/* An am_short of header + iov beyond one SHORT: into a landing slot, else fragmented from the
 * bounce buffer. Nothing is consumed on failure: NO_RESOURCE leaves the data to the caller. */
static UCS_F_NOINLINE ucs_status_t
uct_unimem_ep_am_short_long(uct_unimem_ep_t *ep, uint8_t id, uint64_t header, int has_header,
                            const uct_iov_t *iov, size_t iovcnt, size_t length)
{
    uct_unimem_iface_t *iface = ucs_derived_of(ep->super.super.super.iface, uct_unimem_iface_t);
    uint8_t *slot             = uct_unimem_ep_land_slot(ep);
    uint8_t *dst              = (slot != NULL) ? slot + UNIMEM_LAND_HDR : iface->bounce;
    size_t hdr_len            = has_header ? sizeof(header) : 0;
    uint8_t small[UNIMEM_LANDI_MAX];
    ucs_iov_iter_t iov_iter;
    unimem_msg_t msg;
    int ret;

    if ((slot != NULL) && (length <= UNIMEM_LANDI_MAX)) {
        /* LANDI: the head in the mailbox message, the rest in the slot's first line */
        dst = small;
    }
    memcpy(dst, &header, hdr_len);
    ucs_iov_iter_init(&iov_iter);
    uct_iov_to_buffer(iov, iovcnt, &iov_iter, dst + hdr_len, SIZE_MAX);
    if (slot == NULL) {
        ret = uct_unimem_ep_send_packed(iface, ep, id, dst, length);
    } else {
        if (dst == small) {
            memcpy(slot + UNIMEM_LAND_HDR, small + UNIMEM_LANDI_HEAD,
                   length - UNIMEM_LANDI_HEAD);
            memcpy(&msg.b[8], small, UNIMEM_LANDI_HEAD);
        }
        ret = uct_unimem_ep_land_send(ep, slot, (dst == small) ? UNIMEM_PROTO_LANDI :
                                      UNIMEM_PROTO_LAND, id, length, &msg);
        if (ret == 0) {
            uct_unimem_ep_land_next(ep);
        } else {
            *unimem_land_busy(slot) = 0;
        }
    }
    return (ret == 0) ? UCS_OK : uct_unimem_ep_send_error(ep, ret);
}

ucs_status_t uct_unimem_ep_am_short(uct_ep_h tl_ep, uint8_t id, uint64_t header,
                                    const void *payload, unsigned length)
{
    uct_unimem_ep_t *ep = ucs_derived_of(tl_ep, uct_unimem_ep_t);
    unimem_msg_t msg;
    uct_iov_t iov;
    ucs_status_t status;

    UCT_CHECK_AM_ID(id);
    UCT_CHECK_LENGTH(length + sizeof(header), 0,
                     ucs_derived_of(tl_ep->iface, uct_unimem_iface_t)->am_max_short,
                     "am_short");
    if (uct_unimem_ep_must_queue(ep)) {
        return uct_unimem_ep_no_resource(ep, 0);
    }
    if (ucs_likely(length + sizeof(header) <= UNIMEM_PROTO_SHORT_MAX)) {
        unimem_proto_short(&msg, id, header, sizeof(header), payload, length);
        status = uct_unimem_ep_send1(ep, &msg);
    } else {
        iov.buffer = (void*)payload;
        iov.length = length;
        iov.count  = 1;
        iov.stride = 0;
        iov.memh   = UCT_MEM_HANDLE_NULL;
        status     = uct_unimem_ep_am_short_long(ep, id, header, 1, &iov, 1,
                                                 length + sizeof(header));
    }
    if (ucs_likely(status == UCS_OK)) {
        UCT_UNIMEM_COUNT(tx_am_short, 1);
        UCT_UNIMEM_COUNT(tx_bytes, length + sizeof(header));
    }
    return status;
}

ucs_status_t uct_unimem_ep_am_short_iov(uct_ep_h tl_ep, uint8_t id, const uct_iov_t *iov,
                                        size_t iovcnt)
{
    uct_unimem_ep_t *ep = ucs_derived_of(tl_ep, uct_unimem_ep_t);
    size_t length       = uct_iov_total_length(iov, iovcnt);
    ucs_iov_iter_t iov_iter;
    unimem_msg_t msg;
    ucs_status_t status;

    UCT_CHECK_AM_ID(id);
    UCT_CHECK_LENGTH(length, 0, ucs_derived_of(tl_ep->iface, uct_unimem_iface_t)->am_max_short,
                     "am_short_iov");
    if (uct_unimem_ep_must_queue(ep)) {
        return uct_unimem_ep_no_resource(ep, 0);
    }
    if (ucs_likely(length <= UNIMEM_PROTO_SHORT_MAX)) {
        ucs_iov_iter_init(&iov_iter);
        uct_iov_to_buffer(iov, iovcnt, &iov_iter, &msg.b[2], SIZE_MAX);
        msg.b[0] = (uint8_t)((UNIMEM_PROTO_SHORT << 5) | (id & 0x1f));
        msg.b[1] = (uint8_t)length;
        status   = uct_unimem_ep_send1(ep, &msg);
    } else {
        status = uct_unimem_ep_am_short_long(ep, id, 0, 0, iov, iovcnt, length);
    }
    if (ucs_likely(status == UCS_OK)) {
        UCT_UNIMEM_COUNT(tx_am_short, 1);
        UCT_UNIMEM_COUNT(tx_bytes, length);
    }
    return status;
}

/* A message packed and then beaten to the mailbox's room by another sender is kept and sent
 * by progress; the ep accepts nothing until it is out. */
static void uct_unimem_ep_stash(uct_unimem_iface_t *iface, uct_unimem_ep_t *ep)
{
    ep->super.blocked = 1;
    ucs_list_add_tail(&iface->stashed, &ep->stash_list);
    UCT_UNIMEM_COUNT_OWN(tx_stashed, 1);
}

ssize_t uct_unimem_ep_am_bcopy(uct_ep_h tl_ep, uint8_t id, uct_pack_callback_t pack_cb,
                               void *arg, unsigned flags)
{
    uct_unimem_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_unimem_iface_t);
    uct_unimem_ep_t *ep       = ucs_derived_of(tl_ep, uct_unimem_ep_t);
    uint8_t *slot;
    size_t length;
    int ret;

    UCT_CHECK_AM_ID(id);
    /* the packer may advance the caller's state: room for the message is checked before it
     * runs, and a message beaten to the room afterwards is stashed */
    if (uct_unimem_ep_must_queue(ep)) {
        return uct_unimem_ep_no_resource(ep, flags);
    }
    slot = uct_unimem_ep_land_slot(ep);
    if (ucs_likely(slot != NULL)) {
        /* packed straight into the receiver's memory: one LAND message */
        if (!unimem_hal_can_send(ep->dest, 1)) {
            return uct_unimem_ep_no_resource(ep, flags);
        }
        length = pack_cb(slot + UNIMEM_LAND_HDR, arg);
        ucs_assertv(length <= iface->seg_size, "am_bcopy length %zu > seg %zu", length,
                    iface->seg_size);
        ret = uct_unimem_ep_land_send(ep, slot, UNIMEM_PROTO_LAND, id, length,
                                      &ep->stash_msg);
        if (ucs_unlikely(ret != 0)) {
            if (ret != -EAGAIN) {
                *unimem_land_busy(slot) = 0;
                return uct_unimem_ep_send_error(ep, ret);
            }
            ep->stash_land = 1;           /* the stashed LAND names the slot */
            uct_unimem_ep_stash(iface, ep);
        }
        uct_unimem_ep_land_next(ep);
    } else {
        if (!unimem_hal_can_send(ep->dest, iface->max_msgs)) {
            return uct_unimem_ep_no_resource(ep, flags);
        }
        length = pack_cb(iface->bounce, arg);
        ucs_assertv(length <= iface->seg_size, "am_bcopy length %zu > seg %zu", length,
                    iface->seg_size);
        ret = uct_unimem_ep_send_packed(iface, ep, id, iface->bounce, length);
        if (ucs_unlikely(ret != 0)) {
            if (ret != -EAGAIN) {
                return uct_unimem_ep_send_error(ep, ret);
            }
            ep->stash = ucs_mpool_get(&iface->stash_mp);
            if (ep->stash == NULL) {
                ucs_error("unimem: no memory to keep a message for process %d",
                          ep->super.pid);
                return UCS_ERR_NO_MEMORY;
            }
            memcpy(ep->stash, iface->bounce, length);
            ep->stash_len   = (uint32_t)length;
            ep->stash_am_id = id;
            ep->stash_land  = 0;
            uct_unimem_ep_stash(iface, ep);
        }
    }
    UCT_UNIMEM_COUNT(tx_am_bcopy, 1);
    UCT_UNIMEM_COUNT(tx_bytes, length);
    return length;
}

/* ---- RMA: zDMA, checked against the remote key ---- */

static UCS_F_NOINLINE ucs_status_t
uct_unimem_ep_zdma_error(uct_unimem_ep_t *ep, const char *op, size_t length,
                         uint64_t remote_addr, int ret)
{
    if (ret == -EACCES) {
        UCT_UNIMEM_COUNT_OWN(pdid_refused, 1);
        ucs_error("unimem: zDMA %s of %zu bytes into process %d refused: another protection "
                  "domain", op, length, ep->super.pid);
        return UCS_ERR_REJECTED;
    }
    if ((ret == -ESRCH) || ((ret == -EPERM) && !ucx_ext_ep_peer_alive(&ep->super))) {
        ep->super.failed = 1;
        return uct_iface_handle_ep_err(ep->super.super.super.iface, &ep->super.super.super,
                                       UCS_ERR_ENDPOINT_TIMEOUT);
    }
    ucs_error("unimem: zDMA %s of %zu bytes at 0x%" PRIx64 " in process %d failed: %s%s", op,
              length, remote_addr, ep->super.pid, strerror(-ret),
              (ret == -EPERM) ? " (check kernel.yama.ptrace_scope and that both processes "
                                "run as the same user)" : "");
    return (ret == -EFAULT) ? UCS_ERR_INVALID_ADDR : UCS_ERR_IO_ERROR;
}

/* Whether a key (from the peer) names this ep's process and this iface's protection domain,
 * and holds [remote_addr, remote_addr + length): overflow-safe, silent. */
static UCS_F_ALWAYS_INLINE int
uct_unimem_ep_key_holds(uct_unimem_ep_t *ep, uct_unimem_iface_t *iface, size_t length,
                        uint64_t remote_addr, uct_rkey_t rkey)
{
    const uct_unimem_rkey_t *key = (const uct_unimem_rkey_t*)rkey;

    return (rkey != UCT_INVALID_RKEY) && (key->proc == (uint32_t)ep->super.pid) &&
           (key->pdid == iface->pdid) && (remote_addr >= key->vaddr) &&
           (length <= key->length) && (remote_addr - key->vaddr <= key->length - length);
}

/* uct_unimem_ep_key_holds(), or an error that says which check failed */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_unimem_ep_rma_check(uct_unimem_ep_t *ep, uct_unimem_iface_t *iface, size_t length,
                        uint64_t remote_addr, uct_rkey_t rkey, int write)
{
    const uct_unimem_rkey_t *key = (const uct_unimem_rkey_t*)rkey;

    if (ucs_likely(uct_unimem_ep_key_holds(ep, iface, length, remote_addr, rkey))) {
        return UCS_OK;
    }
    if ((rkey != UCT_INVALID_RKEY) && (key->pdid != iface->pdid)) {
        UCT_UNIMEM_COUNT_OWN(pdid_refused, 1);
        ucs_error("unimem: remote key of protection domain %u used in domain %u: refused",
                  key->pdid, iface->pdid);
        return UCS_ERR_REJECTED;
    }
    ucs_error("unimem: zDMA %s of %zu bytes at 0x%" PRIx64 " is outside the remote key's "
              "region", write ? "write" : "read", length, remote_addr);
    return UCS_ERR_INVALID_PARAM;
}

/* Unimem's global address space: a segment mapped here takes loads and stores, unless zDMA
 * transfers are in flight, which a store must not overtake. The local address of a checked
 * range, or NULL. */
static UCS_F_ALWAYS_INLINE uint8_t *
uct_unimem_ep_rma_mapped(uct_unimem_iface_t *iface, uint64_t remote_addr, uct_rkey_t rkey,
                         size_t length)
{
    if (iface->zwait_tail != iface->zwait_head) {
        return NULL;
    }
    return ucx_ext_rkey_local(ucx_ext_rkey_map(rkey, sizeof(uct_unimem_rkey_t)), remote_addr,
                              length);
}

/* Posts one zDMA transfer; UCS_OK when complete, UCS_INPROGRESS (comp called later), or an
 * error. */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_unimem_ep_zdma(uct_unimem_ep_t *ep, const struct iovec *local, int cnt, size_t length,
                   uint64_t remote_addr, uct_rkey_t rkey, int write, uct_completion_t *comp)
{
    uct_unimem_iface_t *iface = ucs_derived_of(ep->super.super.super.iface, uct_unimem_iface_t);
    const char *op            = write ? "write" : "read";
    ucs_status_t status;
    uint8_t *mapped;
    uint64_t ticket;
    int ret, i;

    status = uct_unimem_ep_rma_check(ep, iface, length, remote_addr, rkey, write);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }
    mapped = uct_unimem_ep_rma_mapped(iface, remote_addr, rkey, length);
    if (mapped != NULL) {
        for (i = 0; i < cnt; mapped += local[i++].iov_len) {
            if (write) {
                ucx_ext_memcpy(mapped, local[i].iov_base, local[i].iov_len);
            } else {
                ucx_ext_memcpy(local[i].iov_base, mapped, local[i].iov_len);
            }
        }
        UCT_UNIMEM_COUNT_OWN(rma_mapped, 1);
        UCX_EXT_COUNT_RMA_BYTES(UCT_UNIMEM_COUNT, write, length);
        return UCS_OK;
    }
    if (ucs_unlikely(iface->zwait_tail - iface->zwait_head >= iface->zwait_size)) {
        return uct_unimem_ep_no_resource(ep, 0);
    }

    ret = unimem_hal_zdma_post(iface->zdma, ep->dest, write, local, cnt, length, remote_addr,
                               &ticket);
    if (ucs_unlikely(ret != 0)) {
        return uct_unimem_ep_zdma_error(ep, op, length, remote_addr, ret);
    }
    iface->zdma_last = ticket;
    if (write) {
        UCT_UNIMEM_COUNT_OWN(zdma_writes, 1);
    } else {
        UCT_UNIMEM_COUNT_OWN(zdma_reads, 1);
    }
    UCT_UNIMEM_COUNT_OWN(zdma_bytes, length);
    UCX_EXT_COUNT_RMA_BYTES(UCT_UNIMEM_COUNT, write, length);
    return uct_unimem_iface_zdma_wait(iface, ticket, comp);
}

/* bcopy ops need the data before they return: wait for the transfer */
static ucs_status_t uct_unimem_ep_zdma_sync(uct_unimem_ep_t *ep, void *buf, size_t length,
                                            uint64_t remote_addr, uct_rkey_t rkey, int write)
{
    uct_unimem_iface_t *iface = ucs_derived_of(ep->super.super.super.iface, uct_unimem_iface_t);
    struct iovec local        = {buf, length};
    ucs_status_t status;

    status = uct_unimem_ep_zdma(ep, &local, 1, length, remote_addr, rkey, write, NULL);
    while (status == UCS_INPROGRESS) {
        status = uct_unimem_iface_zdma_wait(iface, iface->zdma_last, NULL);
    }
    return status;
}

ucs_status_t uct_unimem_ep_put_short(uct_ep_h tl_ep, const void *buffer, unsigned length,
                                     uint64_t remote_addr, uct_rkey_t rkey)
{
    uct_unimem_ep_t *ep = ucs_derived_of(tl_ep, uct_unimem_ep_t);

    UCT_CHECK_LENGTH(length, 0, ucs_derived_of(tl_ep->iface, uct_unimem_iface_t)->put_max_short,
                     "put_short");
    if (length == 0) {
        return UCS_OK;
    }
    UCT_UNIMEM_COUNT(tx_put_short, 1);
    return uct_unimem_ep_zdma_sync(ep, (void*)buffer, length, remote_addr, rkey, 1);
}

/* bcopy into a segment mapped here packs straight into the peer's memory, one copy, when the
 * largest fragment fits inside the key's region; else through the bounce buffer by zDMA */
ssize_t uct_unimem_ep_put_bcopy(uct_ep_h tl_ep, uct_pack_callback_t pack_cb, void *arg,
                                uint64_t remote_addr, uct_rkey_t rkey)
{
    uct_unimem_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_unimem_iface_t);
    uct_unimem_ep_t *ep       = ucs_derived_of(tl_ep, uct_unimem_ep_t);
    ucs_status_t status;
    uint8_t *mapped;
    size_t length;

    UCT_UNIMEM_COUNT(tx_put_bcopy, 1);
    if (uct_unimem_ep_key_holds(ep, iface, iface->seg_size, remote_addr, rkey) &&
        ((mapped = uct_unimem_ep_rma_mapped(iface, remote_addr, rkey, iface->seg_size)) !=
         NULL)) {
        length = pack_cb(mapped, arg);
        UCT_UNIMEM_COUNT_OWN(rma_mapped, 1);
        UCX_EXT_COUNT_RMA_BYTES(UCT_UNIMEM_COUNT, 1, length);
        return length;
    }
    length = pack_cb(iface->bounce, arg);
    if (length == 0) {
        return 0;
    }
    status = uct_unimem_ep_zdma_sync(ep, iface->bounce, length, remote_addr, rkey, 1);
    return (status == UCS_OK) ? (ssize_t)length : status;
}

static UCS_F_ALWAYS_INLINE ucs_status_t
uct_unimem_ep_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov, size_t iovcnt, uint64_t remote_addr,
                    uct_rkey_t rkey, int write, uct_completion_t *comp)
{
    uct_unimem_ep_t *ep = ucs_derived_of(tl_ep, uct_unimem_ep_t);
    struct iovec local[UCT_SM_MAX_IOV];
    size_t cnt, length;

    length = ucx_ext_sm_iovec(iov, iovcnt, local, &cnt);
    if (length == 0) {
        return UCS_OK;
    }
    return uct_unimem_ep_zdma(ep, local, (int)cnt, length, remote_addr, rkey, write, comp);
}

UCX_EXT_EP_ZCOPY_DEFINE(uct_unimem_ep, UCT_UNIMEM_COUNT)

ucs_status_t uct_unimem_ep_get_bcopy(uct_ep_h tl_ep, uct_unpack_callback_t unpack_cb,
                                     void *arg, size_t length, uint64_t remote_addr,
                                     uct_rkey_t rkey, uct_completion_t *comp)
{
    uct_unimem_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_unimem_iface_t);
    uct_unimem_ep_t *ep       = ucs_derived_of(tl_ep, uct_unimem_ep_t);
    ucs_status_t status;
    uint8_t *mapped;

    UCT_CHECK_LENGTH(length, 0, iface->seg_size, "get_bcopy");
    UCT_UNIMEM_COUNT(tx_get_bcopy, 1);
    if (length == 0) {
        unpack_cb(arg, iface->bounce, 0);
        return UCS_OK;
    }
    status = uct_unimem_ep_rma_check(ep, iface, length, remote_addr, rkey, 0);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }
    /* mapped here: unpacked straight from the peer's memory, one copy */
    mapped = uct_unimem_ep_rma_mapped(iface, remote_addr, rkey, length);
    if (mapped != NULL) {
        UCT_UNIMEM_COUNT_OWN(rma_mapped, 1);
        UCX_EXT_COUNT_RMA_BYTES(UCT_UNIMEM_COUNT, 0, length);
        unpack_cb(arg, mapped, length);
        return UCS_OK;
    }
    status = uct_unimem_ep_zdma_sync(ep, iface->bounce, length, remote_addr, rkey, 0);
    if (status != UCS_OK) {
        return status;
    }
    unpack_cb(arg, iface->bounce, length);
    return UCS_OK;
}

/* ---- stash, pending, flush ---- */

/* Sends the stashed messages of the iface's eps that now fit; 1 per message sent. */
unsigned uct_unimem_ep_progress_stash(uct_unimem_iface_t *iface)
{
    uct_unimem_ep_t *ep, *tmp;
    unsigned count = 0;
    int ret;

    ucs_list_for_each_safe(ep, tmp, &iface->stashed, stash_list) {
        if (ep->stash_land) {
            ret = unimem_hal_send(ep->dest, &ep->stash_msg, 1);
            if (ret == 0) {
                UCT_UNIMEM_COUNT_OWN(mbox_tx_msgs, 1);
                UCT_UNIMEM_COUNT_OWN(tx_am_land, 1);
            }
        } else {
            ret = uct_unimem_ep_send_packed(iface, ep, ep->stash_am_id, ep->stash,
                                            ep->stash_len);
        }
        if (ret == 0) {
            uct_unimem_ep_unstash(ep, 1);
            ++count;
        } else if (ret != -EAGAIN) {
            /* the peer refuses it for good: drop it, the ep's error shows on its next op */
            uct_unimem_ep_send_error(ep, ret);
            uct_unimem_ep_unstash(ep, 0);
        }
    }
    return count;
}

int uct_unimem_ep_peer_closed(ucx_ext_ep_t *ep)
{
    return unimem_hal_dest_closed(ucs_derived_of(ep, uct_unimem_ep_t)->dest);
}

int uct_unimem_ep_tx_ready(ucx_ext_ep_t *ep)
{
    uct_unimem_ep_t *uep      = ucs_derived_of(ep, uct_unimem_ep_t);
    uct_unimem_iface_t *iface = ucs_derived_of(ep->super.super.iface, uct_unimem_iface_t);

    return unimem_hal_can_send(uep->dest, iface->max_msgs);
}


/* Mailbox messages are in the peer's mailbox when the send returns; requests still queued
 * (pending, stash) are not issued yet; zDMA transfers are complete when the channel says so. */
ucs_status_t uct_unimem_ep_flush(uct_ep_h tl_ep, unsigned flags, uct_completion_t *comp)
{
    uct_unimem_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_unimem_iface_t);
    uct_unimem_ep_t *ep       = ucs_derived_of(tl_ep, uct_unimem_ep_t);

    if (uct_unimem_ep_must_queue(ep)) {
        return uct_unimem_ep_no_resource(ep, 0);
    }
    ucs_memory_cpu_store_fence();
    return uct_unimem_iface_zdma_wait(iface, iface->zdma_last, comp);
}
