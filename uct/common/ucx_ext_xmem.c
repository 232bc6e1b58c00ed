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
static UCS_LIST_HEAD(ucx_ext_xmem_own);
static UCS_LIST_HEAD(ucx_ext_xmem_peers);

ucs_status_t ucx_ext_xmem_alloc(size_t *length_p, const char *name, void **address_p)
{
    size_t length = ucs_align_up_pow2(ucs_max(*length_p, 1), ucs_get_page_size());
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
 * The shared file mappings of this process, as /proc/self/maps lists them. Reading the file
 * costs tens of microseconds and rendezvous protocols pack keys per message, so the list is
 * kept and read again only when UCM reports that the address space changed (any mmap,
 * munmap, mremap, brk; a counter the event handler bumps), or on every lookup when UCM
 * cannot report (UCX_MEM_EVENTS=n). Under ucx_ext_xmem_lock.
 */
typedef struct ucx_ext_xmem_fmap {
    uintptr_t start, end;
    uint64_t  dev, ino, offset;
} ucx_ext_xmem_fmap_t;

static ucx_ext_xmem_fmap_t *ucx_ext_xmem_fmaps;
static size_t ucx_ext_xmem_nfmaps, ucx_ext_xmem_fmaps_cap;
static uint64_t ucx_ext_xmem_vm_gen = 1, ucx_ext_xmem_fmaps_gen;
static int ucx_ext_xmem_events = -1;   /* -1: not tried; 0: UCM cannot report; 1: it does */

static void ucx_ext_xmem_vm_event(ucm_event_type_t type, ucm_event_t *event, void *arg)
{
    __atomic_add_fetch(&ucx_ext_xmem_vm_gen, 1, __ATOMIC_RELEASE);
}

static void ucx_ext_xmem_fmaps_refresh(void)
{
    unsigned long start, end, off, inode;
    ucx_ext_xmem_fmap_t *grown;
    unsigned major, minor;
    char line[512], perms[8];
    uint64_t gen;
    FILE *f;

    if (ucx_ext_xmem_events < 0) {
        ucx_ext_xmem_events = (ucm_set_event_handler(UCM_EVENT_VM_MAPPED |
                                                     UCM_EVENT_VM_UNMAPPED, 1000,
                                                     ucx_ext_xmem_vm_event, NULL) == UCS_OK);
    }
    gen = __atomic_load_n(&ucx_ext_xmem_vm_gen, __ATOMIC_ACQUIRE);   /* before reading */
    if (ucx_ext_xmem_events && (gen == ucx_ext_xmem_fmaps_gen)) {
        return;
    }
    ucx_ext_xmem_nfmaps = 0;
    f = fopen("/proc/self/maps", "r");
    if (f == NULL) {
        return;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        if ((sscanf(line, "%lx-%lx %7s %lx %x:%x %lu", &start, &end, perms, &off, &major,
                    &minor, &inode) != 7) || (perms[3] != 's') || (inode == 0)) {
            continue;
        }
        if (ucx_ext_xmem_nfmaps == ucx_ext_xmem_fmaps_cap) {
            grown = ucs_realloc(ucx_ext_xmem_fmaps, sizeof(*grown) *
                                (ucx_ext_xmem_fmaps_cap * 2 + 16), "ucx_ext_xmem_fmaps");
            if (grown == NULL) {
                break;
            }
            ucx_ext_xmem_fmaps      = grown;
            ucx_ext_xmem_fmaps_cap  = ucx_ext_xmem_fmaps_cap * 2 + 16;
        }
        ucx_ext_xmem_fmaps[ucx_ext_xmem_nfmaps++] = (ucx_ext_xmem_fmap_t){
            start, end, makedev(major, minor), inode, off};
    }
    fclose(f);
    ucx_ext_xmem_fmaps_gen = gen;
}

/* The shared file mapping of this process that holds [address, address + length) (dev 0)
 * or that maps [offset, offset + length) of file dev:ino; 1 and *desc if found. Under
 * ucx_ext_xmem_lock. */
static int ucx_ext_xmem_maps(uintptr_t address, size_t length, uint64_t dev, uint64_t ino,
                             uint64_t offset, ucx_ext_xmem_desc_t *desc)
{
    const ucx_ext_xmem_fmap_t *m;
    size_t i;

    ucx_ext_xmem_fmaps_refresh();
    for (i = 0; i < ucx_ext_xmem_nfmaps; ++i) {
        m = &ucx_ext_xmem_fmaps[i];
        if (dev == 0) {
            if ((address >= m->start) && (address + length <= m->end)) {
                desc->dev    = m->dev;
                desc->ino    = m->ino;
                desc->offset = m->offset + (address - m->start);
                return 1;
            }
        } else if ((m->dev == dev) && (m->ino == ino) && (offset >= m->offset) &&
                   (offset + length <= m->offset + (m->end - m->start))) {
            desc->base = m->start + (offset - m->offset);   /* here */
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
    if ((desc->pid == 0) && (length > 0) && ucx_ext_xmem_maps(address, length, 0, 0, 0, desc)) {
        desc->pid    = getpid();
        desc->fd     = UCX_EXT_XMEM_FILE;
        desc->base   = address;
        desc->length = length;
    }
    pthread_mutex_unlock(&ucx_ext_xmem_lock);
}

void *ucx_ext_xmem_attach(const ucx_ext_xmem_desc_t *desc)
{
    ucx_ext_xmem_desc_t found;
    ucx_ext_xmem_seg_t *seg;
    size_t size;
    void *base;
    int ret;

    if (desc->pid == 0) {
        return NULL;
    }
    if (desc->pid == getpid()) {
        return (void*)(uintptr_t)desc->base;   /* our own segment (a key to ourselves) */
    }
    if (desc->fd == UCX_EXT_XMEM_FILE) {
        /* the same file mapped here too (the application keeps it mapped as long as the
         * region is registered in its owner: nothing to hold) */
        found.base = 0;
        pthread_mutex_lock(&ucx_ext_xmem_lock);
        ucx_ext_xmem_maps(0, desc->length, desc->dev, desc->ino, desc->offset, &found);
        pthread_mutex_unlock(&ucx_ext_xmem_lock);
        return (void*)(uintptr_t)found.base;
    }
    pthread_mutex_lock(&ucx_ext_xmem_lock);
    ucs_list_for_each(seg, &ucx_ext_xmem_peers, list) {
        if ((seg->desc.pid == desc->pid) && (seg->desc.ino == desc->ino) &&
            (seg->desc.base == desc->base) && (seg->desc.length == desc->length)) {
            ++seg->refs;
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

void ucx_ext_xmem_detach(void *local)
{
    ucx_ext_xmem_seg_t *seg;

    pthread_mutex_lock(&ucx_ext_xmem_lock);
    ucs_list_for_each(seg, &ucx_ext_xmem_peers, list) {
        if (seg->local == local) {
            if (--seg->refs == 0) {
                ucs_list_del(&seg->list);
                munmap(seg->local, seg->mapped);
                ucs_free(seg);
            }
            break;
        }
    }
    pthread_mutex_unlock(&ucx_ext_xmem_lock);
}
