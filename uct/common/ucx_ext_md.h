/*
 * The memory domain of the project's transports. None of them pins memory: registration
 * records what peers may touch, the packed remote key names it, and every remote access is
 * checked against the key (the software analogue of an InfiniBand rkey check). A transport
 * supplies the key's size, how to pack it, how to validate one that arrives, and, if it
 * keeps its own registration table, its reg/dereg. A shared-memory transport can also have
 * the md allocate mapped memory (ucx_ext_xmem.h): its keys then carry the segment, unpack
 * maps it, and rkey_ptr answers with the local address.
 *
 * Needs UCX's internal headers (include after config.h).
 */
#ifndef UCX_EXT_MD_H
#define UCX_EXT_MD_H

#include "ucx_ext_compat.h"
#include "ucx_ext_xmem.h"

#include <uct/base/uct_md.h>

/* The default registration record. */
typedef struct ucx_ext_memh {
    uint64_t address;
    uint64_t length;
} ucx_ext_memh_t;

typedef struct ucx_ext_component {
    uct_component_t super;
    size_t          rkey_size;
    double          reg_cost;       /* seconds per registration, for UCP's choices */
    /* Packs memh's remote key (rkey_size bytes). */
    void          (*rkey_pack)(uct_md_h md, uct_mem_h memh, void *buffer);
    /* A key received from a peer (rkey_size bytes): 1 if well formed. */
    int           (*rkey_valid)(const void *buffer);
    /* NULL: the default record (ucx_ext_memh_t). */
    ucs_status_t  (*mem_reg)(uct_md_h md, void *address, size_t length, unsigned flags,
                             uct_mem_h *memh_p);
    ucs_status_t  (*mem_dereg)(uct_md_h md, uct_mem_h memh);
    /* Mapped memory (ucx_ext_xmem.h): the md allocates shareable memory, and the packed key
     * carries a ucx_ext_xmem_desc_t at xmem_offset, which unpack maps. */
    int           xmem;
    size_t        xmem_offset;
    /* the key's own process (an int32 at this offset): the mapped segment must be its */
    size_t        xmem_pid_offset;
} ucx_ext_component_t;

/* The md operations of every transport (close: md_close, NULL for a static md). */
void ucx_ext_md_ops_init(uct_md_ops_t *ops, void (*md_close)(uct_md_h md));

/* md_open of a transport whose md has no state: one static md per component. */
ucs_status_t ucx_ext_md_open_static(uct_component_t *component, const char *md_name,
                                    const uct_md_config_t *config, uct_md_h *md_p);

ucs_status_t ucx_ext_rkey_unpack(uct_component_t *component, const void *buffer,
                                 UCX_EXT_RKEY_UNPACK_PARAMS_ARG
                                 uct_rkey_t *rkey_p, void **handle_p);
ucs_status_t ucx_ext_rkey_release(uct_component_t *component, uct_rkey_t rkey, void *handle);
ucs_status_t ucx_ext_rkey_ptr(uct_component_t *component, uct_rkey_t rkey, void *handle,
                              uint64_t remote_addr, void **local_addr_p);

/* A registration cache, set up one way for every transport that registers memory with a
 * device (rdmach's verbs domains, ud_zcopy's InfiniBand UD wire), as UCX's ib md does: UCX's
 * RCACHE_* knobs (config), regions page-aligned, dropped when their pages are unmapped. ops
 * register and deregister a region of region_size bytes (a ucs_rcache_region_t first).
 * UCS_OK and *rcache_p; otherwise the caller registers per request (logged at diag, naming
 * the transport). */
ucs_status_t ucx_ext_rcache_create(const char *name, const ucx_ext_rcache_config_t *config,
                                   size_t region_size, const ucs_rcache_ops_t *ops,
                                   void *context, ucs_rcache_t **rcache_p);

/* The two config entries of such a cache, under the table's prefix: RCACHE (y/n, in the int
 * field _on) and UCX's RCACHE_* knobs (the ucx_ext_rcache_config_t field _config); _what
 * says what is registered. */
#define UCX_EXT_RCACHE_CONFIG_ENTRIES(_type, _on, _config, _what) \
    {"RCACHE", "y", \
     "Cache the memory registrations of " _what " (UCX's registration cache; the\n" \
     "RCACHE_* variables below tune it). n: register and deregister on every request.", \
     ucs_offsetof(_type, _on), UCS_CONFIG_TYPE_BOOL}, \
    {"", "", NULL, ucs_offsetof(_type, _config), \
     UCS_CONFIG_TYPE_TABLE(UCX_EXT_RCACHE_CONFIG_TABLE)}

/* A component: its name is the transport's, its md config under UCX_<prefix>; one md named
 * after the component. */
#define UCX_EXT_COMPONENT(_var, _name, _prefix, _md_open, _md_table, _md_config_size) \
    UCX_EXT_COMPONENT_MDS(_var, _name, _prefix, uct_md_query_single_md_resource, _md_open, \
                          _md_table, _md_config_size)

/* The same, with the component's own list of mds. */
#define UCX_EXT_COMPONENT_MDS(_var, _name, _prefix, _query_mds, _md_open, _md_table, \
                              _md_config_size) \
    .super = { \
        .query_md_resources = (_query_mds), \
        .md_open            = (_md_open), \
        .cm_open            = (uct_component_cm_open_func_t)ucs_empty_function_return_unsupported, \
        .rkey_unpack        = ucx_ext_rkey_unpack, \
        .rkey_ptr           = ucx_ext_rkey_ptr, \
        .rkey_release       = ucx_ext_rkey_release, \
        UCX_EXT_COMPONENT_VERSION_OPS \
        .name               = (_name), \
        .md_config          = { \
            .name   = _name " memory domain", \
            .prefix = (_prefix), \
            .table  = (_md_table), \
            .size   = (_md_config_size), \
        }, \
        .cm_config          = UCS_CONFIG_EMPTY_GLOBAL_LIST_ENTRY, \
        .tl_list            = UCT_COMPONENT_TL_LIST_INITIALIZER(&(_var).super), \
        .flags              = 0, \
        .md_vfs_init        = (uct_component_md_vfs_init_func_t)ucs_empty_function \
    }

#endif
