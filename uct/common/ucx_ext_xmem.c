/* Mapped memory: shareable allocations and peers' mapped segments (see ucx_ext_xmem.h). */
#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "ucx_ext_xmem.h"
#include "ucx_ext_sys.h"

#include <ucs/datastruct/list.h>
#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/math.h>
#include <ucs/sys/sys.h>
#include <ucm/api/ucm.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/sysmacros.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* A segment: one of ours (owner), or a peer's mapped here (refs: keys naming it). */
typedef struct ucx_ext_xmem_seg {
    ucs_list_link_t     list;
    ucx_ext_xmem_desc_t desc;     /* desc.base: the owner's address */
    uint8_t             *local;   /* its address here */
    size_t              mapped;   /* bytes mapped there (a peer's segment: its file size) */
    unsigned            refs;
} ucx_ext_xmem_seg_t;

/* Registration, key unpack and release run off the message path, from any thread. */
static pthread_mutex_t ucx_ext_xmem_lock = PTHREAD_MUTEX_INITIALIZER;

/* A peer's segment that no key names any more stays mapped for the next key (UCP unpacks a
 * key for every rendezvous and releases it after: without this, each message paid an open of
 * /proc/<pid>/fd, an fstat, mmap and munmap, and ucx_perftest's 64 KiB tag latency over rdmach
 * was 16.2 us against sm's 3.5). At most this many such segments and bytes stay, the least
 * recently used going first: a mapping keeps the owner's memory alive after it freed it. A
 * match is by owner, inode, address and length, and the inode cannot be reused while this
 * mapping holds the file, so a segment found here is still the one its key names. */
#define UCX_EXT_XMEM_IDLE_MAX       32      /* tests/uct/cases_rma.c (rkey_reuse) has it too */
#define UCX_EXT_XMEM_IDLE_MAX_BYTES (256ul << 20)
static unsigned ucx_ext_xmem_idle_count;
static size_t ucx_ext_xmem_idle_bytes;
static UCS_LIST_HEAD(ucx_ext_xmem_own);
static UCS_LIST_HEAD(ucx_ext_xmem_peers);

ucs_status_t ucx_ext_xmem_alloc(size_t *length_p, const char *name, void **address_p)
{
    size_t length = ucx_ext_xmem_alloc_size(*length_p);
    ucx_ext_xmem_seg_t *seg;
    struct stat st;
    void *base;
    int fd, ret;

    seg = ucs_calloc(1, sizeof(*seg), "ucx_ext_xmem_seg");
    if (seg == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    ret = ucx_ext_seg_create(name, length, &fd, &base);
    if ((ret == 0) && (fstat(fd, &st) != 0)) {
        ret = -errno;
        munmap(base, length);
        close(fd);
    }
    if (ret != 0) {
        ucs_debug("cannot allocate %zu bytes of shared memory: %s", length, strerror(-ret));
        ucs_free(seg);
        return UCS_ERR_NO_MEMORY;
    }
    seg->desc.pid    = getpid();
    seg->desc.fd     = fd;
    seg->desc.ino    = st.st_ino;
    seg->desc.base   = (uintptr_t)base;
    seg->desc.length = length;
    seg->local       = base;
    seg->mapped      = length;
    pthread_mutex_lock(&ucx_ext_xmem_lock);
    ucs_list_add_tail(&ucx_ext_xmem_own, &seg->list);
    pthread_mutex_unlock(&ucx_ext_xmem_lock);
    *length_p  = length;
    *address_p = base;
    return UCS_OK;
}

ucs_status_t ucx_ext_xmem_free(void *address)
{
    ucx_ext_xmem_seg_t *seg;

    pthread_mutex_lock(&ucx_ext_xmem_lock);
    ucs_list_for_each(seg, &ucx_ext_xmem_own, list) {
        if (seg->local == address) {
            ucs_list_del(&seg->list);
            pthread_mutex_unlock(&ucx_ext_xmem_lock);
            /* peers' mappings keep the memory until their keys go */
            munmap(seg->local, seg->mapped);
            close(seg->desc.fd);
            ucs_free(seg);
            return UCS_OK;
        }
    }
    pthread_mutex_unlock(&ucx_ext_xmem_lock);
    return UCS_ERR_NO_ELEM;
}

/*
 * The mappings of this process, as /proc/self/maps lists them. Reading the file costs a
 * fraction of a millisecond in an MPI process, and rendezvous protocols pack keys per
 * message, so the list is kept: a region inside a mapping the list knows is answered from it
 * (a shared file mapping: its device, inode and offset; anything else: not mappable). UCM's
 * events note the address ranges that changed since the file was read (UCM_EVENT_VM_UNMAPPED:
 * munmap, mremap, MAP_FIXED, shmdt, brk; UCM_EVENT_VM_MAPPED where UCM reports it: Open MPI
 * reports unmaps to UCM itself and UCM then has no mapped events), and the file is read again
 * when a lookup meets a changed range or falls outside every known mapping (a new one). MPI
 * libraries map and unmap temporary buffers per message; those changes touch other ranges
 * and cost nothing. The changed ranges are a short list; when it is full its two closest
 * neighbours merge (more is then marked changed than did change, never less). Without UCM
 * events (UCX_MEM_EVENTS=n) every lookup reads the file. Under ucx_ext_xmem_lock; the event
 * handler takes only the spinlock of the changed ranges.
 */
typedef struct ucx_ext_xmem_fmap {
    uintptr_t start, end;
    uint64_t  dev, ino, offset;    /* ino 0: not a shared file mapping */
} ucx_ext_xmem_fmap_t;

#define UCX_EXT_XMEM_DIRTY_MAX 32

static ucx_ext_xmem_fmap_t *ucx_ext_xmem_fmaps;     /* sorted by address, as the file */
static size_t ucx_ext_xmem_nfmaps, ucx_ext_xmem_fmaps_cap;
static int ucx_ext_xmem_events = -1;   /* -1: not tried; 0: UCM cannot report; 1: it does */
static int ucx_ext_xmem_fmaps_valid;
static pthread_spinlock_t ucx_ext_xmem_dirty_lock;
static struct {
    uintptr_t start, end;
} ucx_ext_xmem_dirty[UCX_EXT_XMEM_DIRTY_MAX];
static unsigned ucx_ext_xmem_ndirty;

static void ucx_ext_xmem_vm_event(ucm_event_type_t type, ucm_event_t *event, void *arg)
{
    uintptr_t start = (uintptr_t)event->vm_mapped.address;   /* same layout as vm_unmapped */
    uintptr_t end   = start + event->vm_mapped.size;
    unsigned i, best = 0;
    uintptr_t gap, best_gap = UINTPTR_MAX;

    pthread_spin_lock(&ucx_ext_xmem_dirty_lock);
    if (ucx_ext_xmem_ndirty == UCX_EXT_XMEM_DIRTY_MAX) {
        /* full: merge the two closest ranges (the list is kept sorted by start) */
        for (i = 0; i + 1 < ucx_ext_xmem_ndirty; ++i) {
            gap = (ucx_ext_xmem_dirty[i + 1].start > ucx_ext_xmem_dirty[i].end) ?
                  ucx_ext_xmem_dirty[i + 1].start - ucx_ext_xmem_dirty[i].end : 0;
            if (gap < best_gap) {
                best_gap = gap;
                best     = i;
            }
        }
        ucx_ext_xmem_dirty[best].end = ucs_max(ucx_ext_xmem_dirty[best].end,
                                               ucx_ext_xmem_dirty[best + 1].end);
        memmove(&ucx_ext_xmem_dirty[best + 1], &ucx_ext_xmem_dirty[best + 2],
                sizeof(ucx_ext_xmem_dirty[0]) * (ucx_ext_xmem_ndirty - best - 2));
        --ucx_ext_xmem_ndirty;
    }
    for (i = ucx_ext_xmem_ndirty; (i > 0) && (ucx_ext_xmem_dirty[i - 1].start > start); --i) {
        ucx_ext_xmem_dirty[i] = ucx_ext_xmem_dirty[i - 1];
    }
    ucx_ext_xmem_dirty[i].start = start;
    ucx_ext_xmem_dirty[i].end   = end;
    ++ucx_ext_xmem_ndirty;
    pthread_spin_unlock(&ucx_ext_xmem_dirty_lock);
}

/* 1 if no range changed since the read that meets [start, end) (end 0: none changed). */
static int ucx_ext_xmem_unchanged(uintptr_t start, uintptr_t end)
{
    int fresh = 1;
    unsigned i;

    pthread_spin_lock(&ucx_ext_xmem_dirty_lock);
    for (i = 0; fresh && (i < ucx_ext_xmem_ndirty); ++i) {
        fresh = (end != 0) && ((ucx_ext_xmem_dirty[i].end <= start) ||
                               (ucx_ext_xmem_dirty[i].start >= end));
    }
    pthread_spin_unlock(&ucx_ext_xmem_dirty_lock);
    return fresh;
}

static void ucx_ext_xmem_fmaps_read(void)
{
    unsigned long mstart, mend, off, inode;
    ucx_ext_xmem_fmap_t *grown;
    unsigned major, minor;
    char line[512], perms[8];
    FILE *f;

    if (ucx_ext_xmem_events < 0) {
        pthread_spin_init(&ucx_ext_xmem_dirty_lock, PTHREAD_PROCESS_PRIVATE);
        ucx_ext_xmem_events =
            (ucm_set_event_handler(UCM_EVENT_VM_MAPPED | UCM_EVENT_VM_UNMAPPED, 1000,
                                   ucx_ext_xmem_vm_event, NULL) == UCS_OK) ||
            (ucm_set_event_handler(UCM_EVENT_VM_UNMAPPED, 1000, ucx_ext_xmem_vm_event,
                                   NULL) == UCS_OK);
    }
    /* the changes so far are in what is read now (later ones are noted again) */
    pthread_spin_lock(&ucx_ext_xmem_dirty_lock);
    ucx_ext_xmem_ndirty = 0;
    pthread_spin_unlock(&ucx_ext_xmem_dirty_lock);
    ucx_ext_xmem_nfmaps      = 0;
    ucx_ext_xmem_fmaps_valid = 0;
    f = fopen("/proc/self/maps", "r");
    if (f == NULL) {
        return;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "%lx-%lx %7s %lx %x:%x %lu", &mstart, &mend, perms, &off, &major,
                   &minor, &inode) != 7) {
            continue;
        }
        if (ucx_ext_xmem_nfmaps == ucx_ext_xmem_fmaps_cap) {
            grown = ucs_realloc(ucx_ext_xmem_fmaps, sizeof(*grown) *
                                (ucx_ext_xmem_fmaps_cap * 2 + 64), "ucx_ext_xmem_fmaps");
            if (grown == NULL) {
                break;
            }
            ucx_ext_xmem_fmaps      = grown;
            ucx_ext_xmem_fmaps_cap  = ucx_ext_xmem_fmaps_cap * 2 + 64;
        }
        ucx_ext_xmem_fmaps[ucx_ext_xmem_nfmaps++] = (ucx_ext_xmem_fmap_t){
            mstart, mend, makedev(major, minor), (perms[3] == 's') ? inode : 0, off};
    }
    fclose(f);
    ucx_ext_xmem_fmaps_valid = ucx_ext_xmem_events;   /* without events: read every time */
}

/* The kept mapping that holds [address, address + length), or NULL. */
static const ucx_ext_xmem_fmap_t *ucx_ext_xmem_fmap_of(uintptr_t address, size_t length)
{
    size_t lo = 0, hi = ucx_ext_xmem_nfmaps, mid;

    while (lo < hi) {
        mid = (lo + hi) / 2;
        if (ucx_ext_xmem_fmaps[mid].end <= address) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if ((lo < ucx_ext_xmem_nfmaps) && (ucx_ext_xmem_fmaps[lo].start <= address) &&
        (address + length <= ucx_ext_xmem_fmaps[lo].end)) {
        return &ucx_ext_xmem_fmaps[lo];
    }
    return NULL;
}

/* Under ucx_ext_xmem_lock: the shared file mapping that holds [address, address + length);
 * 1 and desc's dev, ino and offset if there is one. */
static int ucx_ext_xmem_file_of(uintptr_t address, size_t length, ucx_ext_xmem_desc_t *desc)
{
    const ucx_ext_xmem_fmap_t *m = NULL;

    if (ucx_ext_xmem_fmaps_valid && ucx_ext_xmem_unchanged(address, address + length)) {
        m = ucx_ext_xmem_fmap_of(address, length);
    }
    if (m == NULL) {   /* changed, or a mapping the list does not know */
        ucx_ext_xmem_fmaps_read();
        m = ucx_ext_xmem_fmap_of(address, length);
    }
    if ((m == NULL) || (m->ino == 0)) {
        return 0;
    }
    desc->dev    = m->dev;
    desc->ino    = m->ino;
    desc->offset = m->offset + (address - m->start);
    return 1;
}

/* Under ucx_ext_xmem_lock: where [offset, offset + length) of file dev:ino is mapped here, or
 * 0. */
static uintptr_t ucx_ext_xmem_file_here(uint64_t dev, uint64_t ino, uint64_t offset,
                                        size_t length)
{
    const ucx_ext_xmem_fmap_t *m;
    size_t i;
    int pass;

    for (pass = !(ucx_ext_xmem_fmaps_valid && ucx_ext_xmem_unchanged(0, 0)); pass < 2; ++pass) {
        if (pass == 1) {
            ucx_ext_xmem_fmaps_read();
        }
        for (i = 0; i < ucx_ext_xmem_nfmaps; ++i) {
            m = &ucx_ext_xmem_fmaps[i];
            /* offset and length come from a peer's key: no sum that can wrap */
            if ((m->ino == ino) && (m->ino != 0) && (m->dev == dev) && (offset >= m->offset) &&
                (length <= m->end - m->start) &&
                (offset - m->offset <= (m->end - m->start) - length)) {
                return m->start + (offset - m->offset);
            }
        }
    }
    return 0;
}

/* Under ucx_ext_xmem_lock: 1 if desc, a key's description naming this process, lies whole
 * inside one of our own segments (the same memfd). */
static int ucx_ext_xmem_own_holds(const ucx_ext_xmem_desc_t *desc)
{
    const ucx_ext_xmem_seg_t *seg;

    ucs_list_for_each(seg, &ucx_ext_xmem_own, list) {
        if ((seg->desc.ino == desc->ino) && (desc->base >= seg->desc.base) &&
            (desc->length <= seg->desc.length) &&
            (desc->base - seg->desc.base <= seg->desc.length - desc->length)) {
            return 1;
        }
    }
    return 0;
}

void ucx_ext_xmem_describe(uintptr_t address, size_t length, ucx_ext_xmem_desc_t *desc)
{
    ucx_ext_xmem_seg_t *seg;

    memset(desc, 0, sizeof(*desc));
    pthread_mutex_lock(&ucx_ext_xmem_lock);
    ucs_list_for_each(seg, &ucx_ext_xmem_own, list) {
        if ((address >= seg->desc.base) &&
            (address + length <= seg->desc.base + seg->desc.length)) {
            *desc = seg->desc;
            break;
        }
    }
    if ((desc->pid == 0) && (length > 0) && ucx_ext_xmem_file_of(address, length, desc)) {
        desc->pid    = ucx_ext_getpid();
        desc->fd     = UCX_EXT_XMEM_FILE;
        desc->base   = address;
        desc->length = length;
    }
    pthread_mutex_unlock(&ucx_ext_xmem_lock);
}

void *ucx_ext_xmem_attach(const ucx_ext_xmem_desc_t *desc)
{
    ucx_ext_xmem_seg_t *seg;
    uintptr_t here;
    size_t size;
    void *base;
    int ret;

    if (desc->pid == 0) {
        return NULL;
    }
    if ((desc->pid == ucx_ext_getpid()) && (desc->fd != UCX_EXT_XMEM_FILE)) {
        /* A key to ourselves: only one of our own segments, whole inside it. The description
         * is the packer's word, and a peer's key naming our pid with any base would make our
         * own puts, gets and UCP's rkey_ptr reach any address of this process. */
        pthread_mutex_lock(&ucx_ext_xmem_lock);
        here = ucx_ext_xmem_own_holds(desc) ? (uintptr_t)desc->base : 0;
        pthread_mutex_unlock(&ucx_ext_xmem_lock);
        return (void*)here;
    }
    if (desc->fd == UCX_EXT_XMEM_FILE) {
        /* the same file mapped here too (the application keeps it mapped as long as the
         * region is registered in its owner: nothing to hold) */
        pthread_mutex_lock(&ucx_ext_xmem_lock);
        here = ucx_ext_xmem_file_here(desc->dev, desc->ino, desc->offset, desc->length);
        pthread_mutex_unlock(&ucx_ext_xmem_lock);
        return (void*)here;
    }
    pthread_mutex_lock(&ucx_ext_xmem_lock);
    ucs_list_for_each(seg, &ucx_ext_xmem_peers, list) {
        if ((seg->desc.pid == desc->pid) && (seg->desc.ino == desc->ino) &&
            (seg->desc.base == desc->base) && (seg->desc.length == desc->length)) {
            if (seg->refs++ == 0) {
                ucx_ext_xmem_idle_count--;      /* kept mapped, named again */
                ucx_ext_xmem_idle_bytes -= seg->mapped;
            }
            pthread_mutex_unlock(&ucx_ext_xmem_lock);
            return seg->local;
        }
    }
    ret = ucx_ext_seg_attach_ino(desc->pid, desc->fd, desc->ino, desc->length, &base, &size);
    seg = (ret == 0) ? ucs_calloc(1, sizeof(*seg), "ucx_ext_xmem_peer") : NULL;
    if (seg == NULL) {
        pthread_mutex_unlock(&ucx_ext_xmem_lock);
        if (ret == 0) {
            munmap(base, size);
        }
        ucs_diag("cannot map process %d's segment (fd %d, %" PRIu64 " bytes): %s; its "
                 "memory is reached by process_vm", desc->pid, desc->fd, desc->length,
                 (ret == 0) ? "no memory" : strerror(-ret));
        return NULL;
    }
    seg->desc        = *desc;
    seg->local       = base;
    seg->mapped      = size;
    seg->refs        = 1;
    ucs_list_add_tail(&ucx_ext_xmem_peers, &seg->list);
    pthread_mutex_unlock(&ucx_ext_xmem_lock);
    return base;
}

/* Unmaps the least recently used idle segments beyond the bounds (lock held). */
static void ucx_ext_xmem_idle_trim(void)
{
    ucx_ext_xmem_seg_t *seg, *tmp;

    ucs_list_for_each_safe(seg, tmp, &ucx_ext_xmem_peers, list) {
        if ((ucx_ext_xmem_idle_count <= UCX_EXT_XMEM_IDLE_MAX) &&
            (ucx_ext_xmem_idle_bytes <= UCX_EXT_XMEM_IDLE_MAX_BYTES)) {
            return;
        }
        if (seg->refs == 0) {
            ucx_ext_xmem_idle_count--;
            ucx_ext_xmem_idle_bytes -= seg->mapped;
            ucs_list_del(&seg->list);
            munmap(seg->local, seg->mapped);
            ucs_free(seg);
        }
    }
}

void ucx_ext_xmem_detach(void *local)
{
    ucx_ext_xmem_seg_t *seg;

    pthread_mutex_lock(&ucx_ext_xmem_lock);
    ucs_list_for_each(seg, &ucx_ext_xmem_peers, list) {
        if (seg->local == local) {
            if (--seg->refs == 0) {
                /* idle: to the tail, so that the list's first idle one is the oldest */
                ucs_list_del(&seg->list);
                ucs_list_add_tail(&ucx_ext_xmem_peers, &seg->list);
                ucx_ext_xmem_idle_count++;
                ucx_ext_xmem_idle_bytes += seg->mapped;
                ucx_ext_xmem_idle_trim();
            }
            break;
        }
    }
    pthread_mutex_unlock(&ucx_ext_xmem_lock);
}
