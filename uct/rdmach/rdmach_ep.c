/*
 * rdmach ep: one sender of one ring in the peer's segment.
 * Active messages go through the ring (no syscall, no atomic, no allocation); put/get are the
 * wire's RDMA write/read, process_vm_writev/readv, complete when they return.
 */
#include "rdmach_uct.h"
#include "ucx_ext_pending.h"

#include <uct/base/uct_iov.inl>
#include <ucs/sys/sys.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/uio.h>
#include <unistd.h>

static const rdmach_wire_ops_t uct_rdmach_ep_shm_ops = {NULL, NULL};

UCS_CLASS_INIT_FUNC(uct_rdmach_ep_t, const uct_ep_params_t *params)
{
    uct_rdmach_iface_t *iface = ucs_derived_of(params->iface, uct_rdmach_iface_t);
    const uct_rdmach_iface_addr_t *addr;
    rdmach_shm_seg_t *peer;
    rdmach_ring_ctl_t *ctl;
    rdmach_geom_t geom;
    ucs_status_t status;
    uint32_t credit, id;

    UCT_EP_PARAMS_CHECK_DEV_IFACE_ADDRS(params);
    UCS_CLASS_CALL_SUPER_INIT(uct_base_ep_t, &iface->super.super);
    addr = (const uct_rdmach_iface_addr_t*)params->iface_addr;

    credit = iface->next_credit;
    if (credit >= iface->seg.max_rings) {
        ucs_error("rdmach: iface %p has made %u connections, UCX_RDMACH_MAX_PEERS allows no more",
                  iface, credit);
        return UCS_ERR_EXCEEDS_LIMIT;
    }

    status = uct_rdmach_iface_peer(iface, addr->pid, addr->fd, addr->seg_id, &peer);
    if (status != UCS_OK) {
        return status;
    }

    /* the receiver's geometry rules; our largest record must fit its largest span */
    geom = peer->geom;
    if (rdmach_geom_span(&geom, ucs_max(iface->chunk_size, iface->max_short)) > geom.max_span) {
        ucs_error("rdmach: peer pid %d accepts records of at most %u x %u bytes, smaller than "
                  "this process's UCX_RDMACH_CHUNK_SIZE=%zu: use the same configuration",
                  addr->pid, geom.max_span, geom.slot_size, iface->chunk_size);
        return UCS_ERR_UNREACHABLE;
    }

    id = __atomic_fetch_add(&peer->hdr->next_ring, 1, __ATOMIC_RELAXED);
    if (id >= peer->max_rings) {
        ucs_error("rdmach: peer pid %d accepts no more connections (its UCX_RDMACH_MAX_PEERS=%u)",
                  addr->pid, peer->max_rings);
        return UCS_ERR_EXCEEDS_LIMIT;
    }
    iface->next_credit = credit + 1;

    /* describe ourselves, then publish the claim: the receiver looks only after owner != 0 */
    ctl               = rdmach_shm_ring_ctl(peer, id);
    ctl->peer_info[0] = (uint64_t)getpid();
    ctl->peer_info[1] = ((uint64_t)credit << 32) | (uint32_t)iface->seg.fd;
    ctl->peer_info[2] = iface->seg.seg_id;
    __atomic_store_n(&ctl->owner, 1, __ATOMIC_RELEASE);

    rdmach_tx_init(&self->tx, &geom, rdmach_shm_ring_slots(peer, id), ctl,
                   rdmach_shm_doorbells(peer) + id, &rdmach_shm_credit(&iface->seg, credit)->tail,
                   &uct_rdmach_ep_shm_ops, NULL);
    self->pid     = addr->pid;
    self->ring_id = id;
    self->failed  = 0;
    ucs_arbiter_group_init(&self->arb_group);
    ucs_list_add_tail(&iface->eps, &self->list);

    status = uct_ep_keepalive_init(&self->keepalive, self->pid);
    if (status != UCS_OK) {
        ucs_list_del(&self->list);
        return status;
    }
    ucs_debug("rdmach ep %p: ring %u of pid %d, credit line %u", self, id, addr->pid, credit);
    return UCS_OK;
}

UCS_CLASS_CLEANUP_FUNC(uct_rdmach_ep_t)
{
    uct_rdmach_ep_pending_purge(&self->super.super, NULL, NULL);
    ucs_arbiter_group_cleanup(&self->arb_group);
    ucs_list_del(&self->list);
    /* the ring is not reused: its receiver may still be draining it */
}

UCS_CLASS_DEFINE(uct_rdmach_ep_t, uct_base_ep_t);
UCS_CLASS_DEFINE_NEW_FUNC(uct_rdmach_ep_t, uct_ep_t, const uct_ep_params_t*);
UCS_CLASS_DEFINE_DELETE_FUNC(uct_rdmach_ep_t, uct_ep_t);

/* ---- peer failure ---- */

/* Alive means: /proc/<pid>/stat exists, is not a zombie, and has the start time we connected
 * to (robust to pid reuse). A killed process that its parent has not reaped yet is a zombie
 * with the old start time: UCX's keepalive alone would call it alive. */
static int uct_rdmach_proc_alive(pid_t pid, unsigned long start_time)
{
    char path[64], buf[1024], *p;
    unsigned long long start = 0;
    ssize_t len;
    int fd, field;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return 0;
    }
    len = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (len <= 0) {
        return 0;
    }
    buf[len] = '\0';
    p = strrchr(buf, ')');            /* the command name may hold spaces and parens */
    if ((p == NULL) || (p[1] != ' ') || (p[2] == 'Z') || (p[2] == 'X')) {
        return 0;
    }
    /* state is field 3, starttime field 22 */
    for (field = 3, p += 2; (field < 22) && (p != NULL); ++field) {
        p = strchr(p, ' ');
        p = (p != NULL) ? p + 1 : NULL;
    }
    if ((p == NULL) || (sscanf(p, "%llu", &start) != 1)) {
        return 1;                      /* unreadable: do not fail a peer on a parse problem */
    }
    return start == start_time;
}

/* A dead peer never returns credit: hand the ep to the iface's error handler, through UCX's
 * keepalive path so that the handler runs from the worker's progress, not from inside ours. */
static int uct_rdmach_ep_peer_alive(uct_rdmach_ep_t *ep)
{
    if (ep->failed) {
        return 0;
    }
    if (uct_rdmach_proc_alive(ep->pid, ep->keepalive.start_time)) {
        return 1;
    }
    ep->failed = 1;
    UCT_RDMACH_COUNT(peer_failed, 1);
    ucs_diag("rdmach ep %p: peer pid %d is gone", ep, ep->pid);
    ep->keepalive.start_time ^= 1;   /* a zombie still has its start time: force the mismatch */
    uct_ep_keepalive_check(&ep->super.super, &ep->keepalive, ep->pid, 0, NULL);
    return 0;
}

void uct_rdmach_ep_check_blocked(uct_rdmach_iface_t *iface)
{
    ucs_time_t now = ucs_get_time();
    uct_rdmach_ep_t *ep;

    if (now < iface->next_peer_check) {
        return;
    }
    iface->next_peer_check = now + iface->peer_check_interval;
    ucs_list_for_each(ep, &iface->eps, list) {
        if (!ucs_arbiter_group_is_empty(&ep->arb_group)) {
            uct_rdmach_ep_peer_alive(ep);
        }
    }
}

ucs_status_t uct_rdmach_ep_check(uct_ep_h tl_ep, unsigned flags, uct_completion_t *comp)
{
    UCT_EP_KEEPALIVE_CHECK_PARAM(flags, comp);
    uct_rdmach_ep_peer_alive(ucs_derived_of(tl_ep, uct_rdmach_ep_t));
    return UCS_OK;
}

static UCS_F_NOINLINE ucs_status_t uct_rdmach_ep_no_resource(uct_rdmach_ep_t *ep,
                                                             unsigned flags)
{
    UCT_RDMACH_COUNT(tx_no_resource, 1);
    if (flags & UCT_SEND_FLAG_PEER_CHECK) {
        uct_rdmach_ep_peer_alive(ep);
    }
    return UCS_ERR_NO_RESOURCE;
}

/* ---- active messages: the ring ---- */

/* While requests wait in the ep's pending queue, a new send (or flush) must not overtake them:
 * UCP matches multi-fragment messages by the order of their first fragments. Operations issued
 * by the dispatch of this ep's queue head are the queue itself making progress. */
static UCS_F_ALWAYS_INLINE int uct_rdmach_ep_must_queue(uct_rdmach_ep_t *ep)
{
    return ucs_unlikely(!ucs_arbiter_group_is_empty(&ep->arb_group)) &&
           (ucs_derived_of(ep->super.super.iface, uct_rdmach_iface_t)->dispatching != ep);
}

ucs_status_t uct_rdmach_ep_am_short(uct_ep_h tl_ep, uint8_t id, uint64_t header,
                                    const void *payload, unsigned length)
{
    uct_rdmach_ep_t *ep = ucs_derived_of(tl_ep, uct_rdmach_ep_t);
    rdmach_rec_hdr_t *rec;
    uint8_t *data;

    UCT_CHECK_AM_ID(id);
    UCT_CHECK_LENGTH(length + sizeof(header), 0,
                     ucs_derived_of(tl_ep->iface, uct_rdmach_iface_t)->max_short, "am_short");

    rec = uct_rdmach_ep_must_queue(ep) ? NULL :
          rdmach_tx_reserve(&ep->tx, length + sizeof(header));
    if (ucs_unlikely(rec == NULL)) {
        return uct_rdmach_ep_no_resource(ep, 0);
    }
    data = (uint8_t*)(rec + 1);
    *(uint64_t*)data = header;
    memcpy(data + sizeof(header), payload, length);
    rdmach_tx_commit(&ep->tx, rec, id, length + sizeof(header));

    UCT_RDMACH_COUNT(tx_am_short, 1);
    UCT_RDMACH_COUNT(tx_bytes, length + sizeof(header));
    return UCS_OK;
}

ucs_status_t uct_rdmach_ep_am_short_iov(uct_ep_h tl_ep, uint8_t id, const uct_iov_t *iov,
                                        size_t iovcnt)
{
    uct_rdmach_ep_t *ep = ucs_derived_of(tl_ep, uct_rdmach_ep_t);
    size_t length       = uct_iov_total_length(iov, iovcnt);
    ucs_iov_iter_t iov_iter;
    rdmach_rec_hdr_t *rec;

    UCT_CHECK_AM_ID(id);
    UCT_CHECK_LENGTH(length, 0, ucs_derived_of(tl_ep->iface, uct_rdmach_iface_t)->max_short,
                     "am_short_iov");

    rec = uct_rdmach_ep_must_queue(ep) ? NULL : rdmach_tx_reserve(&ep->tx, length);
    if (ucs_unlikely(rec == NULL)) {
        return uct_rdmach_ep_no_resource(ep, 0);
    }
    ucs_iov_iter_init(&iov_iter);
    uct_iov_to_buffer(iov, iovcnt, &iov_iter, rec + 1, SIZE_MAX);
    rdmach_tx_commit(&ep->tx, rec, id, (uint32_t)length);

    UCT_RDMACH_COUNT(tx_am_short, 1);
    UCT_RDMACH_COUNT(tx_bytes, length);
    return UCS_OK;
}

ssize_t uct_rdmach_ep_am_bcopy(uct_ep_h tl_ep, uint8_t id, uct_pack_callback_t pack_cb,
                               void *arg, unsigned flags)
{
    uct_rdmach_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_rdmach_iface_t);
    uct_rdmach_ep_t *ep       = ucs_derived_of(tl_ep, uct_rdmach_ep_t);
    uint32_t max_span         = ep->tx.geom.max_span;
    uint32_t to_end           = rdmach_tx_to_end(&ep->tx);
    rdmach_rec_hdr_t *rec;
    size_t length;

    UCT_CHECK_AM_ID(id);
    if (uct_rdmach_ep_must_queue(ep)) {
        return uct_rdmach_ep_no_resource(ep, flags);
    }

    /* the packer may advance the caller's state, so room is ensured before it runs */
    if (ucs_likely(to_end >= max_span)) {
        if (ucs_unlikely(!rdmach_tx_ensure(&ep->tx, max_span))) {
            return uct_rdmach_ep_no_resource(ep, flags);
        }
        rec    = (rdmach_rec_hdr_t*)rdmach_tx_slot(&ep->tx, ep->tx.geom.nslots - to_end);
        length = pack_cb(rec + 1, arg);
    } else {
        /* near the ring end the length decides whether a pad is needed: pack aside first */
        if (ucs_unlikely(!rdmach_tx_ensure(&ep->tx, to_end + max_span))) {
            return uct_rdmach_ep_no_resource(ep, flags);
        }
        length = pack_cb(iface->bounce, arg);
        rec    = rdmach_tx_reserve(&ep->tx, length);
        ucs_assert(rec != NULL);
        memcpy(rec + 1, iface->bounce, length);
    }
    ucs_assertv(length <= iface->chunk_size, "am_bcopy length %zu > chunk %zu", length,
                iface->chunk_size);
    rdmach_tx_commit(&ep->tx, rec, id, (uint32_t)length);

    UCT_RDMACH_COUNT(tx_am_bcopy, 1);
    UCT_RDMACH_COUNT(tx_bytes, length);
    return length;
}

ucs_status_t uct_rdmach_ep_am_zcopy(uct_ep_h tl_ep, uint8_t id, const void *header,
                                    unsigned header_length, const uct_iov_t *iov,
                                    size_t iovcnt, unsigned flags, uct_completion_t *comp)
{
    uct_rdmach_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_rdmach_iface_t);
    uct_rdmach_ep_t *ep       = ucs_derived_of(tl_ep, uct_rdmach_ep_t);
    size_t length             = header_length + uct_iov_total_length(iov, iovcnt);
    ucs_iov_iter_t iov_iter;
    rdmach_rec_hdr_t *rec;
    uint8_t *data;

    UCT_CHECK_AM_ID(id);
    UCT_CHECK_LENGTH(length, 0, iface->chunk_size, "am_zcopy");

    /* on this wire the sender's single copy is into the receiver's ring */
    rec = uct_rdmach_ep_must_queue(ep) ? NULL : rdmach_tx_reserve(&ep->tx, length);
    if (ucs_unlikely(rec == NULL)) {
        return uct_rdmach_ep_no_resource(ep, flags);
    }
    data = (uint8_t*)(rec + 1);
    memcpy(data, header, header_length);
    ucs_iov_iter_init(&iov_iter);
    uct_iov_to_buffer(iov, iovcnt, &iov_iter, data + header_length, SIZE_MAX);
    rdmach_tx_commit(&ep->tx, rec, id, (uint32_t)length);

    UCT_RDMACH_COUNT(tx_am_zcopy, 1);
    UCT_RDMACH_COUNT(tx_bytes, length);
    return UCS_OK;
}

/* ---- RMA: process_vm_writev/readv, checked against the remote key ---- */

static UCS_F_NOINLINE ucs_status_t
uct_rdmach_ep_rma_error(uct_rdmach_ep_t *ep, const char *op, size_t length,
                        uint64_t remote_addr, int err)
{
    uct_base_iface_t *iface = ucs_derived_of(ep->super.super.iface, uct_base_iface_t);

    if ((err == ESRCH) || ((err == EPERM) && !uct_rdmach_ep_peer_alive(ep))) {
        ep->failed = 1;
        return uct_iface_handle_ep_err(&iface->super, &ep->super.super,
                                       UCS_ERR_ENDPOINT_TIMEOUT);
    }
    ucs_error("rdmach: %s of %zu bytes at 0x%" PRIx64 " in pid %d failed: %s%s", op, length,
              remote_addr, ep->pid, strerror(err),
              (err == EPERM) ? " (check kernel.yama.ptrace_scope and that both processes "
                               "run as the same user)" : "");
    return (err == EFAULT) ? UCS_ERR_INVALID_ADDR : UCS_ERR_IO_ERROR;
}

static UCS_F_ALWAYS_INLINE ucs_status_t
uct_rdmach_ep_rma(uct_rdmach_ep_t *ep, struct iovec *local, size_t cnt, size_t length,
                  uint64_t remote_addr, uct_rkey_t rkey, int write)
{
    const uct_rdmach_rkey_t *key = (const uct_rdmach_rkey_t*)rkey;
    const char *op               = write ? "put" : "get";
    struct iovec remote;
    ssize_t ret;

    if (ucs_unlikely((rkey == UCT_INVALID_RKEY) || (key->pid != ep->pid) ||
                     (remote_addr < key->address) ||
                     (remote_addr + length > key->address + key->length))) {
        ucs_error("rdmach: %s of %zu bytes at 0x%" PRIx64 " is outside the remote key's region",
                  op, length, remote_addr);
        return UCS_ERR_INVALID_PARAM;
    }

    while (length > 0) {
        remote.iov_base = (void*)(uintptr_t)remote_addr;
        remote.iov_len  = length;
        ret = write ? process_vm_writev(ep->pid, local, cnt, &remote, 1, 0) :
                      process_vm_readv(ep->pid, local, cnt, &remote, 1, 0);
        if (ucs_unlikely(ret <= 0)) {
            if ((ret < 0) && (errno == EINTR)) {
                continue;
            }
            return uct_rdmach_ep_rma_error(ep, op, length, remote_addr,
                                           (ret < 0) ? errno : EFAULT);
        }
        /* partial transfer: advance both sides */
        length      -= ret;
        remote_addr += ret;
        while ((ret > 0) && (cnt > 0)) {
            if ((size_t)ret >= local->iov_len) {
                ret -= local->iov_len;
                ++local;
                --cnt;
            } else {
                local->iov_base = (char*)local->iov_base + ret;
                local->iov_len -= ret;
                ret             = 0;
            }
        }
    }
    return UCS_OK;
}

ucs_status_t uct_rdmach_ep_put_short(uct_ep_h tl_ep, const void *buffer, unsigned length,
                                     uint64_t remote_addr, uct_rkey_t rkey)
{
    uct_rdmach_ep_t *ep = ucs_derived_of(tl_ep, uct_rdmach_ep_t);
    struct iovec local  = {(void*)buffer, length};

    if (length == 0) {
        return UCS_OK;
    }
    UCT_RDMACH_COUNT(tx_put_short, 1);
    UCT_RDMACH_COUNT(tx_bytes, length);
    return uct_rdmach_ep_rma(ep, &local, 1, length, remote_addr, rkey, 1);
}

ssize_t uct_rdmach_ep_put_bcopy(uct_ep_h tl_ep, uct_pack_callback_t pack_cb, void *arg,
                                uint64_t remote_addr, uct_rkey_t rkey)
{
    uct_rdmach_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_rdmach_iface_t);
    uct_rdmach_ep_t *ep       = ucs_derived_of(tl_ep, uct_rdmach_ep_t);
    size_t length             = pack_cb(iface->bounce, arg);
    struct iovec local        = {iface->bounce, length};
    ucs_status_t status;

    UCT_RDMACH_COUNT(tx_put_bcopy, 1);
    UCT_RDMACH_COUNT(tx_bytes, length);
    if (length == 0) {
        return 0;
    }
    status = uct_rdmach_ep_rma(ep, &local, 1, length, remote_addr, rkey, 1);
    return (status == UCS_OK) ? (ssize_t)length : status;
}

static UCS_F_ALWAYS_INLINE ucs_status_t
uct_rdmach_ep_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov, size_t iovcnt, uint64_t remote_addr,
                    uct_rkey_t rkey, int write)
{
    uct_rdmach_ep_t *ep = ucs_derived_of(tl_ep, uct_rdmach_ep_t);
    struct iovec local[UCT_SM_MAX_IOV];
    size_t cnt = UCT_SM_MAX_IOV;
    ucs_iov_iter_t iov_iter;
    size_t length;

    ucs_iov_iter_init(&iov_iter);
    length = uct_iov_to_iovec(local, &cnt, iov, iovcnt, SIZE_MAX, &iov_iter);
    if (length == 0) {
        return UCS_OK;
    }
    UCT_RDMACH_COUNT(tx_bytes, length);
    return uct_rdmach_ep_rma(ep, local, cnt, length, remote_addr, rkey, write);
}

ucs_status_t uct_rdmach_ep_put_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov, size_t iovcnt,
                                     uint64_t remote_addr, uct_rkey_t rkey,
                                     uct_completion_t *comp)
{
    UCT_RDMACH_COUNT(tx_put_zcopy, 1);
    return uct_rdmach_ep_zcopy(tl_ep, iov, iovcnt, remote_addr, rkey, 1);
}

ucs_status_t uct_rdmach_ep_get_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov, size_t iovcnt,
                                     uint64_t remote_addr, uct_rkey_t rkey,
                                     uct_completion_t *comp)
{
    UCT_RDMACH_COUNT(tx_get_zcopy, 1);
    return uct_rdmach_ep_zcopy(tl_ep, iov, iovcnt, remote_addr, rkey, 0);
}

ucs_status_t uct_rdmach_ep_get_bcopy(uct_ep_h tl_ep, uct_unpack_callback_t unpack_cb,
                                     void *arg, size_t length, uint64_t remote_addr,
                                     uct_rkey_t rkey, uct_completion_t *comp)
{
    uct_rdmach_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_rdmach_iface_t);
    uct_rdmach_ep_t *ep       = ucs_derived_of(tl_ep, uct_rdmach_ep_t);
    struct iovec local        = {iface->bounce, length};
    ucs_status_t status;

    UCT_CHECK_LENGTH(length, 0, iface->chunk_size, "get_bcopy");
    UCT_RDMACH_COUNT(tx_get_bcopy, 1);
    UCT_RDMACH_COUNT(tx_bytes, length);
    if (length > 0) {
        status = uct_rdmach_ep_rma(ep, &local, 1, length, remote_addr, rkey, 0);
        if (status != UCS_OK) {
            return status;
        }
    }
    unpack_cb(arg, iface->bounce, length);
    return UCS_OK;
}

/* ---- pending, flush ---- */

ucs_status_t uct_rdmach_ep_pending_add(uct_ep_h tl_ep, uct_pending_req_t *req, unsigned flags)
{
    uct_rdmach_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_rdmach_iface_t);
    uct_rdmach_ep_t *ep       = ucs_derived_of(tl_ep, uct_rdmach_ep_t);

    /* the same room test any op passes: a request we queue could not have gone out now */
    if (ucs_arbiter_group_is_empty(&ep->arb_group) && rdmach_tx_has_room(&ep->tx)) {
        return UCS_ERR_BUSY;
    }
    uct_pending_req_arb_group_push(&ep->arb_group, req);
    ucs_arbiter_group_schedule(&iface->arbiter, &ep->arb_group);
    UCT_RDMACH_COUNT(pending_add, 1);
    return UCS_OK;
}

static ucs_arbiter_cb_result_t uct_rdmach_ep_pending_cb(ucs_arbiter_t *arbiter,
                                                        ucs_arbiter_group_t *group,
                                                        ucs_arbiter_elem_t *elem, void *arg)
{
    uct_rdmach_ep_t *ep       = ucs_container_of(group, uct_rdmach_ep_t, arb_group);
    uct_rdmach_iface_t *iface = ucs_derived_of(ep->super.super.iface, uct_rdmach_iface_t);
    unsigned *count           = arg;
    uct_pending_req_t *req;
    ucs_status_t status;

    if (!rdmach_tx_has_room(&ep->tx)) {
        return UCS_ARBITER_CB_RESULT_RESCHED_GROUP;
    }
    req    = ucs_container_of(elem, uct_pending_req_t, priv);
    iface->dispatching = ep;
    status = req->func(req);
    iface->dispatching = NULL;
    if (status == UCS_OK) {
        ++(*count);
        return UCS_ARBITER_CB_RESULT_REMOVE_ELEM;
    } else if (status == UCS_INPROGRESS) {
        ++(*count);
        return UCS_ARBITER_CB_RESULT_NEXT_GROUP;
    }
    return UCS_ARBITER_CB_RESULT_RESCHED_GROUP;
}

unsigned uct_rdmach_ep_dispatch_pending(uct_rdmach_iface_t *iface)
{
    unsigned count = 0;

    ucs_arbiter_dispatch(&iface->arbiter, 1, uct_rdmach_ep_pending_cb, &count);
    return count;
}

void uct_rdmach_ep_pending_purge(uct_ep_h tl_ep, uct_pending_purge_callback_t cb, void *arg)
{
    uct_rdmach_iface_t *iface = ucs_derived_of(tl_ep->iface, uct_rdmach_iface_t);
    uct_rdmach_ep_t *ep       = ucs_derived_of(tl_ep, uct_rdmach_ep_t);

    ucx_ext_pending_purge(&iface->arbiter, &ep->arb_group, cb, arg);
}

/* Every issued op is complete in the peer's memory when it returns (ring stores, synchronous
 * process_vm); requests still in the pending queue are not issued yet. */
ucs_status_t uct_rdmach_ep_flush(uct_ep_h tl_ep, unsigned flags, uct_completion_t *comp)
{
    uct_rdmach_ep_t *ep = ucs_derived_of(tl_ep, uct_rdmach_ep_t);

    if (uct_rdmach_ep_must_queue(ep)) {
        return UCS_ERR_NO_RESOURCE;
    }
    ucs_memory_cpu_store_fence();
    return UCS_OK;
}
