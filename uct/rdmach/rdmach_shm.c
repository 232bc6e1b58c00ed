/*
 * rdmach shared-memory segment: creation and peer attach (connection time only).
 */
#include "rdmach_shm.h"
#include "ucx_ext_wake.h"
#include "ucx_ext_sys.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define RDMACH_PAGE 4096ul

static uint64_t rdmach_align(uint64_t v, uint64_t a)
{
    return (v + a - 1) & ~(a - 1);
}

/* Layout from the geometry; the same function validates a peer's header, after
 * rdmach_shm_geom_ok: within its bounds nothing here wraps (a ring is at most 2^20 * 2^24 =
 * 2^44 bytes, so a stride below 2^45, and 2^16 rings of either stride below 2^61). */
static void rdmach_shm_layout(rdmach_shm_hdr_t *hdr)
{
    uint64_t ring_bytes = (uint64_t)hdr->slot_size * hdr->nslots;
    uint32_t large      = (hdr->large_rings < hdr->max_rings) ? hdr->large_rings : hdr->max_rings;

    /* the desk's staging buffers (rdmach_shm_stage_buf) between the header and the map */
    hdr->freemap_off   = rdmach_align(sizeof(rdmach_shm_hdr_t), RDMACH_PAGE) +
                         RDMACH_SHM_STAGE_BYTES;
    hdr->doorbells_off = hdr->freemap_off +
                         rdmach_align(rdmach_align(hdr->max_rings, 64) / 8, RDMACH_PAGE);
    hdr->credits_off   = hdr->doorbells_off +
                         rdmach_align(rdmach_align(hdr->max_rings, 8), RDMACH_PAGE);
    hdr->rings_off     = hdr->credits_off +
                         rdmach_align((size_t)hdr->max_rings * sizeof(rdmach_shm_credit_t),
                                      RDMACH_PAGE);
    hdr->ring_stride   = rdmach_align(sizeof(rdmach_ring_ctl_t) + ring_bytes, RDMACH_PAGE);
    hdr->large_stride  = (large == 0) ? 0 :
                         rdmach_align(sizeof(rdmach_ring_ctl_t) +
                                      (uint64_t)hdr->slot_size * hdr->large_nslots, RDMACH_PAGE);
    hdr->size          = hdr->rings_off + (uint64_t)large * hdr->large_stride +
                         (uint64_t)(hdr->max_rings - large) * hdr->ring_stride;
}

/* A peer's geometry within rdmach_geom_init's bounds (and at most 2^16 rings), checked before
 * rdmach_shm_layout multiplies it: beyond them the ring sizes wrap, and a wrapped layout that
 * matches the header's own offsets would put our ring pointers far outside the mapping. */
static int rdmach_shm_geom_ok(const rdmach_shm_hdr_t *hdr)
{
    return (hdr->slot_size >= RDMACH_CACHE_LINE) && !(hdr->slot_size % RDMACH_CACHE_LINE) &&
           (hdr->slot_size <= (1u << 20)) &&
           (hdr->nslots >= 2) && !(hdr->nslots & (hdr->nslots - 1)) &&
           (hdr->nslots <= (1u << 24)) &&
           (hdr->max_span != 0) && (hdr->max_span <= hdr->nslots) &&
           (hdr->max_span <= UINT16_MAX) &&
           (hdr->max_rings != 0) && (hdr->max_rings <= (1u << 16)) &&
           (hdr->large_rings <= hdr->max_rings) &&
           ((hdr->large_rings == 0) ||
            ((hdr->large_nslots >= 2) && !(hdr->large_nslots & (hdr->large_nslots - 1)) &&
             (hdr->large_nslots <= (1u << 24)) && (hdr->max_span <= hdr->large_nslots)));
}

static void rdmach_shm_geom_layout(rdmach_shm_hdr_t *hdr, const rdmach_geom_t *geom,
                                   const rdmach_geom_t *large, uint32_t large_rings,
                                   uint32_t max_rings)
{
    memset(hdr, 0, sizeof(*hdr));
    hdr->slot_size = geom->slot_size;
    hdr->nslots    = geom->nslots;
    hdr->max_span  = geom->max_span;
    hdr->max_rings = max_rings;
    if ((large != NULL) && (large_rings != 0)) {
        hdr->large_nslots = large->nslots;
        hdr->large_rings  = (large_rings < max_rings) ? large_rings : max_rings;
    }
    rdmach_shm_layout(hdr);
}

size_t rdmach_shm_segment_bytes(const rdmach_geom_t *geom, const rdmach_geom_t *large,
                                uint32_t large_rings, uint32_t max_rings)
{
    rdmach_shm_hdr_t tmp;

    rdmach_shm_geom_layout(&tmp, geom, large, large_rings, max_rings);
    return tmp.size;
}

size_t rdmach_shm_ring_stride(const rdmach_geom_t *geom)
{
    rdmach_shm_hdr_t tmp;

    rdmach_shm_geom_layout(&tmp, geom, NULL, 0, 1);
    return tmp.ring_stride;
}

/* Takes the private copy of a (validated) layout. */
static void rdmach_shm_seg_init(rdmach_shm_seg_t *seg, void *base, size_t size, int fd,
                                const rdmach_shm_hdr_t *layout)
{
    seg->hdr            = base;
    seg->size           = size;
    seg->fd             = fd;
    seg->pid            = layout->pid;
    seg->seg_id         = layout->seg_id;
    seg->max_rings      = layout->max_rings;
    seg->freemap_off    = layout->freemap_off;
    seg->doorbells_off  = layout->doorbells_off;
    seg->credits_off    = layout->credits_off;
    seg->rings_off      = layout->rings_off;
    seg->ring_stride    = layout->ring_stride;
    seg->large_stride   = layout->large_stride;
    seg->large_rings    = layout->large_rings;
    seg->geom.slot_size = layout->slot_size;
    seg->geom.nslots    = layout->nslots;
    seg->geom.max_span  = layout->max_span;
    seg->geom.lazy_slots = 0;
    seg->geom_large     = seg->geom;
    seg->geom_large.nslots = (layout->large_rings != 0) ? layout->large_nslots : layout->nslots;
    seg->wake_fd        = -1;
    seg->no_barrier     = 0;
}

int rdmach_shm_create(rdmach_shm_seg_t *seg, const rdmach_geom_t *geom,
                      const rdmach_geom_t *large, uint32_t large_rings, uint32_t max_rings,
                      uint64_t seg_id)
{
    rdmach_shm_hdr_t tmp;
    void *base;
    int fd, err;

    rdmach_shm_geom_layout(&tmp, geom, large, large_rings, max_rings);

    err = ucx_ext_seg_create("rdmach", tmp.size, &fd, &base);
    if (err != 0) {
        return err;
    }

    tmp.seg_id     = seg_id;
    tmp.version    = RDMACH_SHM_VERSION;
    tmp.pid        = getpid();
    /* wakeup: a sleeping owner waits on this eventfd (no eventfd: it never sleeps) */
    tmp.wake_fd    = ucx_ext_wake_fd_create();
    tmp.no_barrier = !ucx_ext_wake_barrier_register();
    if (tmp.wake_fd < 0) {
        tmp.wake_fd = -1;
    }
    memcpy(base, &tmp, sizeof(tmp));
    __atomic_store_n(&((rdmach_shm_hdr_t*)base)->magic, RDMACH_SHM_MAGIC, __ATOMIC_RELEASE);

    rdmach_shm_seg_init(seg, base, tmp.size, fd, &tmp);
    seg->geom.lazy_slots = geom->lazy_slots;
    seg->geom_large      = (tmp.large_rings != 0) ? *large : *geom;
    seg->wake_fd         = tmp.wake_fd;
    seg->no_barrier      = (int)tmp.no_barrier;
    return 0;
}

int rdmach_shm_attach(rdmach_shm_seg_t *seg, pid_t pid, int fd, uint64_t seg_id)
{
    rdmach_shm_hdr_t expect;
    size_t size;
    void *base;
    int err;

    err = ucx_ext_seg_attach(pid, fd, sizeof(rdmach_shm_hdr_t), &base, &size);
    if (err != 0) {
        return err;
    }

    /* never trust the peer's offsets: recompute them from its geometry (once it is within
     * bounds: the layout multiplies it) and compare; all from one private copy */
    expect = *(rdmach_shm_hdr_t*)base;
    if (!rdmach_shm_geom_ok(&expect)) {
        munmap(base, size);
        return -EPROTO;
    }
    rdmach_shm_layout(&expect);
    if ((expect.magic != RDMACH_SHM_MAGIC) || (expect.version != RDMACH_SHM_VERSION) ||
        (expect.seg_id != seg_id) || (expect.pid != pid) ||
        (memcmp(&expect.freemap_off, &((rdmach_shm_hdr_t*)base)->freemap_off,
                7 * sizeof(uint64_t)) != 0) ||
        (expect.size > size)) {
        munmap(base, size);
        return -EPROTO;
    }
    if (expect.closed) {
        munmap(base, size);
        return -ENOENT;     /* its iface closed (its process lives on) */
    }

    rdmach_shm_seg_init(seg, base, size, -1, &expect);
    /* our own descriptor of its eventfd, to wake it (-1: it cannot be woken, or we may not
     * reach it; a wakeup then logs why); per record fences unless both ends have membarrier */
    if (expect.wake_fd >= 0) {
        seg->wake_fd = ucx_ext_wake_fd_get(pid, expect.wake_fd);
        if (seg->wake_fd < 0) {
            seg->wake_fd = -1;
        }
    }
    seg->no_barrier = (expect.no_barrier != 0) || !ucx_ext_wake_barrier_register();
    return 0;
}

void rdmach_shm_detach(rdmach_shm_seg_t *seg)
{
    if (seg->hdr != NULL) {
        munmap(seg->hdr, seg->size);
        seg->hdr = NULL;
    }
    if (seg->fd >= 0) {
        close(seg->fd);
        seg->fd = -1;
    }
    if (seg->wake_fd >= 0) {
        close(seg->wake_fd);
        seg->wake_fd = -1;
    }
}

int rdmach_shm_claim_ring(const rdmach_shm_seg_t *seg)
{
    volatile uint64_t *map = (volatile uint64_t*)((char*)seg->hdr + seg->freemap_off);
    uint32_t id, w, words;
    uint64_t bits;

    if (__atomic_load_n(&seg->hdr->next_ring, __ATOMIC_RELAXED) < seg->max_rings) {
        id = __atomic_fetch_add(&seg->hdr->next_ring, 1, __ATOMIC_RELAXED);
        if (id < seg->max_rings) {
            return (int)id;
        }
    }
    words = (seg->max_rings + 63) / 64;
    for (w = 0; w < words; ++w) {
        bits = __atomic_load_n(&map[w], __ATOMIC_ACQUIRE);
        while (bits != 0) {
            uint64_t bit = bits & (~bits + 1);      /* lowest set */
            if (__atomic_compare_exchange_n(&map[w], &bits, bits & ~bit, 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE)) {
                id = w * 64 + (uint32_t)__builtin_ctzll(bit);
                /* a corrupt map could name a ring beyond the segment: never hand it out */
                if (id < seg->max_rings) {
                    return (int)id;
                }
                break;
            }
        }
    }
    return -ENOSPC;
}

/* Zeroes [p, p + len) of our own segment. Whole pages go back to the system (a hole punched in
 * the memfd reads as zeros, in every process that maps it): a ring that a short-lived sender
 * touched a few pages of is not made resident whole by zeroing it (a large ring is 2 MiB). */
static void rdmach_shm_zero(const rdmach_shm_seg_t *seg, void *p, size_t len)
{
    char *start = p, *end = start + len;
    char *pg_start = (char*)rdmach_align((uintptr_t)start, RDMACH_PAGE);
    char *pg_end   = (char*)((uintptr_t)end & ~(RDMACH_PAGE - 1));

    if ((seg->fd >= 0) && (pg_end > pg_start) &&
        (fallocate(seg->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                   (off_t)(pg_start - (char*)seg->hdr), (off_t)(pg_end - pg_start)) == 0)) {
        memset(start, 0, (size_t)(pg_start - start));
        memset(pg_end, 0, (size_t)(end - pg_end));
    } else {
        memset(start, 0, len);
    }
}

void rdmach_shm_ring_prefault(const rdmach_shm_seg_t *seg, uint32_t id, int write)
{
    ucx_ext_prefault(rdmach_shm_ring_slots(seg, id),
                     rdmach_geom_ring_bytes(rdmach_shm_ring_geom(seg, id)), write);
}

void rdmach_shm_stage_prefault(const rdmach_shm_seg_t *seg, int write)
{
    ucx_ext_prefault(rdmach_shm_stage_at(seg->hdr, 0, 0, 0), RDMACH_SHM_STAGE_BYTES, write);
}

void rdmach_shm_free_ring(rdmach_shm_seg_t *seg, uint32_t id)
{
    volatile uint64_t *map = (volatile uint64_t*)((char*)seg->hdr + seg->freemap_off);
    rdmach_ring_ctl_t *ctl = rdmach_shm_ring_ctl(seg, id);

    /* no mark of the old sender may be left: a new one's positions start at 0 again and would
     * meet them (marks are absolute positions + 1) */
    rdmach_shm_zero(seg, rdmach_shm_ring_slots(seg, id),
                    rdmach_geom_ring_bytes(rdmach_shm_ring_geom(seg, id)));
    memset(ctl->peer_info, 0, sizeof(ctl->peer_info));
    ctl->rx_hot = 0;
    rdmach_shm_doorbells(seg)[id] = 0;
    __atomic_store_n(&ctl->owner, 0, __ATOMIC_RELEASE);
    __atomic_fetch_or(&map[id / 64], 1ull << (id % 64), __ATOMIC_RELEASE);
}
