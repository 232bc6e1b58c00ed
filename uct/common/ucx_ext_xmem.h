/*
 * Mapped memory: what a transport's md allocates for peers on this host to map, and the
 * mappings of peers' segments behind unpacked remote keys (the analogue of UCX's mm mds,
 * which make stock sm fast at RMA: put/get become loads and stores, atomics CPU atomics,
 * and none of them needs the target's progress).
 *
 *  - An allocation is a memfd segment mapped shared (ucx_ext_sys.h). The md records it in a
 *    process-wide list, so a registration that falls inside one (the md's own allocation,
 *    or a buffer carved from it) packs the segment's description into its remote key.
 *  - A peer maps the segment through /proc/<pid>/fd/<fd> (same user, or ptrace consent) and
 *    checks the inode, so a reused fd number never maps the wrong memory. Mappings are
 *    shared by every key that names the segment and go with the last of them.
 *  - A registration in a shared mapping of a file (MPICH's windows live in one /dev/shm
 *    segment that every rank on the host maps) is described by the file's device, inode
 *    and offset (from /proc/self/maps): a peer that maps the same file, as MPICH's ranks
 *    all do, reaches it through its own mapping.
 *  - Memory that is not ours to map (the application's malloc, another md's allocation)
 *    has an empty description: the transport keeps its process_vm path for it.
 *
 * Needs UCX's internal headers (include after config.h).
 */
#ifndef UCX_EXT_XMEM_H
#define UCX_EXT_XMEM_H

#include "ucx_ext_compat.h"

#include <ucs/type/status.h>
#include <ucs/sys/compiler_def.h>
#include <ucs/sys/math.h>
#include <ucs/sys/sys.h>
#include <stddef.h>
#include <stdint.h>

/* A segment as a packed remote key carries it; pid 0: nothing to map. */
typedef struct ucx_ext_xmem_desc {
    int32_t  pid;
    int32_t  fd;       /* the owner's memfd; UCX_EXT_XMEM_FILE: a shared file mapping */
    uint64_t ino;      /* the memfd's or the file's inode */
    uint64_t base;     /* the segment's address in its owner */
    uint64_t length;
    uint64_t dev;      /* a file's device, and the file offset at base */
    uint64_t offset;
} UCS_S_PACKED ucx_ext_xmem_desc_t;

#define UCX_EXT_XMEM_FILE (-1)

/* The length ucx_ext_xmem_alloc gives a request of length bytes (whole pages): what a peer
 * that computes a segment's size itself must name in its description. */
static UCS_F_ALWAYS_INLINE size_t ucx_ext_xmem_alloc_size(size_t length)
{
    return ucs_align_up_pow2(ucs_max(length, 1), ucs_get_page_size());
}

/* Allocates at least *length_p bytes (rounded up to pages, written back) of shareable memory
 * named name. */
ucs_status_t ucx_ext_xmem_alloc(size_t *length_p, const char *name, void **address_p);

/* Frees an allocation of ucx_ext_xmem_alloc: UCS_ERR_NO_ELEM if address is not one. */
ucs_status_t ucx_ext_xmem_free(void *address);

/* The description of the segment holding [address, address + length): one of ours, else
 * a shared file mapping (reads /proc/self/maps: off the message path), else empty. */
void ucx_ext_xmem_describe(uintptr_t address, size_t length, ucx_ext_xmem_desc_t *desc);

/* The local address of desc's segment (mapped now, or shared with earlier keys), or NULL
 * (logged at diag level): the peer's segment cannot be mapped here. */
void *ucx_ext_xmem_attach(const ucx_ext_xmem_desc_t *desc);

/* One key less on the mapping that ucx_ext_xmem_attach returned. When none is left the
 * segment stays mapped for the next key (a bounded set, least recently used unmapped first:
 * ucx_ext_xmem.c). */
void ucx_ext_xmem_detach(void *local);

/* What an unpacked remote key keeps after the packed bytes (ucx_ext_md.c): where the
 * segment is mapped here, NULL if it is not. */
typedef struct ucx_ext_rkey_map {
    uint8_t  *local;   /* the segment's local address */
    uint64_t base;     /* its address in the owner */
    uint64_t end;
} ucx_ext_rkey_map_t;

#define UCX_EXT_RKEY_MAP_OFFSET(_packed_size) (((_packed_size) + 7) & ~(size_t)7)

static UCS_F_ALWAYS_INLINE const ucx_ext_rkey_map_t *
ucx_ext_rkey_map(uintptr_t rkey, size_t packed_size)
{
    return (const ucx_ext_rkey_map_t*)(rkey + UCX_EXT_RKEY_MAP_OFFSET(packed_size));
}

/* The local address of [remote_addr, remote_addr + length) through a key's mapping, or
 * NULL when the key has none or the range leaves the segment. */
static UCS_F_ALWAYS_INLINE void *
ucx_ext_rkey_local(const ucx_ext_rkey_map_t *map, uint64_t remote_addr, size_t length)
{
    if ((map->local == NULL) || (remote_addr < map->base) || (remote_addr > map->end) ||
        (length > map->end - remote_addr)) {
        return NULL;
    }
    return map->local + (remote_addr - map->base);
}

#endif
