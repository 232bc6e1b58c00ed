/* The register-only memory domain of the project's transports (see ucx_ext_md.h). */
#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "ucx_ext_md.h"

#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/type/class.h>
#include <ucs/sys/sys.h>
#include <ucm/api/ucm.h>
#include <string.h>

static ucx_ext_component_t *ucx_ext_component(uct_component_t *component)
{
    return ucs_container_of(component, ucx_ext_component_t, super);
}

static ucs_status_t ucx_ext_md_query(uct_md_h md, ucx_ext_md_attr_t *attr)
{
    const ucx_ext_component_t *comp = ucx_ext_component(md->component);

    ucx_ext_md_attr_init(attr);
    UCX_EXT_MD_CAP(attr, flags)            = UCT_MD_FLAG_REG | UCT_MD_FLAG_NEED_RKEY;
    UCX_EXT_MD_CAP(attr, reg_mem_types)    = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    UCX_EXT_MD_CAP(attr, alloc_mem_types)  = 0;
    UCX_EXT_MD_CAP(attr, detect_mem_types) = 0;
    UCX_EXT_MD_CAP(attr, access_mem_types) = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    UCX_EXT_MD_CAP(attr, max_alloc)        = 0;
    UCX_EXT_MD_CAP(attr, max_reg)          = ULONG_MAX;
    if (comp->xmem) {
        /* not UCT_MD_FLAG_RKEY_PTR: UCP would then take the rkey_ptr rendezvous for every
         * key of this md, also those of registered memory, which no peer maps (it fails
         * them as unreachable); ucp_rkey_ptr still answers for mapped keys */
        UCX_EXT_MD_CAP(attr, flags)          |= UCT_MD_FLAG_ALLOC;
        UCX_EXT_MD_CAP(attr, alloc_mem_types) = UCS_BIT(UCS_MEMORY_TYPE_HOST);
        UCX_EXT_MD_CAP(attr, max_alloc)       = ULONG_MAX;
    }
    attr->rkey_packed_size     = comp->rkey_size;
    attr->reg_cost             = ucs_linear_func_make(comp->reg_cost, 0);
    memset(&attr->local_cpus, 0xff, sizeof(attr->local_cpus));
    return UCS_OK;
}

/* The md's registration, as both UCX versions call it (ucx_ext_compat.h). */
static ucs_status_t ucx_ext_mem_reg_flags(uct_md_h md, void *address, size_t length,
                                          unsigned flags, uct_mem_h *memh_p)
{
    const ucx_ext_component_t *comp = ucx_ext_component(md->component);
    ucx_ext_memh_t *memh;

    if (comp->mem_reg != NULL) {
        return comp->mem_reg(md, address, length, flags, memh_p);
    }
    memh = ucs_malloc(sizeof(*memh), "ucx_ext_memh");
    if (memh == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    memh->address = (uintptr_t)address;
    memh->length  = length;
    *memh_p       = memh;
    return UCS_OK;
}

static ucs_status_t ucx_ext_mem_reg(uct_md_h md, void *address, size_t length,
                                    UCX_EXT_MEM_REG_ARGS, uct_mem_h *memh_p)
{
    return ucx_ext_mem_reg_flags(md, address, length, UCX_EXT_MEM_REG_FLAGS, memh_p);
}

static ucs_status_t ucx_ext_mem_dereg(uct_md_h md, const uct_md_mem_dereg_params_t *params)
{
    const ucx_ext_component_t *comp = ucx_ext_component(md->component);

    UCT_MD_MEM_DEREG_CHECK_PARAMS(params, 0);
    if (comp->mem_dereg != NULL) {
        return comp->mem_dereg(md, params->memh);
    }
    ucs_free(params->memh);
    return UCS_OK;
}

/* Mapped memory, registered in this md as any other: peers map it through the key. */
static ucs_status_t ucx_ext_mem_alloc(uct_md_h md, size_t *length_p, void **address_p,
                                      ucs_memory_type_t mem_type,
                                      UCX_EXT_MEM_ALLOC_SYS_DEV_ARG unsigned flags,
                                      const char *alloc_name, uct_mem_h *memh_p)
{
    ucs_status_t status;

    if (!ucx_ext_component(md->component)->xmem || (mem_type != UCS_MEMORY_TYPE_HOST) ||
        (flags & UCT_MD_MEM_FLAG_FIXED)) {
        return UCS_ERR_UNSUPPORTED;
    }
    status = ucx_ext_xmem_alloc(length_p, alloc_name, address_p);
    if (status != UCS_OK) {
        return status;
    }
    status = ucx_ext_mem_reg_flags(md, *address_p, *length_p, flags, memh_p);
    if (status != UCS_OK) {
        ucx_ext_xmem_free(*address_p);
    }
    return status;
}

static ucs_status_t ucx_ext_mem_free(uct_md_h md, uct_mem_h memh)
{
    void *address = (void*)(uintptr_t)((ucx_ext_memh_t*)memh)->address;
    uct_md_mem_dereg_params_t params = {
        .field_mask = UCT_MD_MEM_DEREG_FIELD_MEMH,
        .memh       = memh
    };
    ucs_status_t status;

    status = ucx_ext_mem_dereg(md, &params);
    return (status == UCS_OK) ? ucx_ext_xmem_free(address) : status;
}

static ucs_status_t ucx_ext_mkey_pack(uct_md_h md, uct_mem_h memh,
                                      UCX_EXT_MKEY_PACK_RANGE_ARGS
                                      const uct_md_mkey_pack_params_t *params,
                                      void *rkey_buffer)
{
    ucx_ext_component(md->component)->rkey_pack(md, memh, rkey_buffer);
    return UCS_OK;
}

void ucx_ext_md_ops_init(uct_md_ops_t *ops, void (*md_close)(uct_md_h md))
{
    ops->close                  = (md_close != NULL) ? md_close :
                                  (uct_md_close_func_t)ucs_empty_function;
    ops->query                  = ucx_ext_md_query;
    ops->mem_alloc              = ucx_ext_mem_alloc;
    ops->mem_free               = ucx_ext_mem_free;
    ops->mem_advise             = (uct_md_mem_advise_func_t)ucs_empty_function_return_unsupported;
    ops->mem_reg                = ucx_ext_mem_reg;
    ops->mem_dereg              = ucx_ext_mem_dereg;
    ops->mem_query              = (uct_md_mem_query_func_t)ucs_empty_function_return_unsupported;
    ops->mkey_pack              = ucx_ext_mkey_pack;
    ucx_ext_md_ops_version_init(ops);
    ops->detect_memory_type     = (uct_md_detect_memory_type_func_t)
                                  ucs_empty_function_return_unsupported;
}

ucs_status_t ucx_ext_md_open_static(uct_component_t *component, const char *md_name,
                                    const uct_md_config_t *config, uct_md_h *md_p)
{
    /* the transports keep no per-md state, and each module links its own copy of this base:
     * one static md per module */
    static uct_md_ops_t ops;
    static uct_md_t md;

    if (ops.query == NULL) {
        ucx_ext_md_ops_init(&ops, NULL);
    }
    md.ops       = &ops;
    md.component = component;
    *md_p        = &md;
    return UCS_OK;
}

ucs_status_t ucx_ext_rkey_unpack(uct_component_t *component, const void *buffer,
                                 UCX_EXT_RKEY_UNPACK_PARAMS_ARG
                                 uct_rkey_t *rkey_p, void **handle_p)
{
    const ucx_ext_component_t *comp = ucx_ext_component(component);
    ucx_ext_xmem_desc_t desc;
    ucx_ext_rkey_map_t *map;
    uint8_t *rkey;
    int32_t key_pid;
    size_t i;
    int empty = 1;

    *rkey_p   = UCT_INVALID_RKEY;
    *handle_p = NULL;
    for (i = 0; i < comp->rkey_size; ++i) {
        empty &= (((const uint8_t*)buffer)[i] == 0);
    }
    if (!empty && !comp->rkey_valid(buffer)) {
        /* UCP then leaves this md out of the key instead of failing the whole unpack (seen
         * with Open MPI's osc ucx over rdmach's RC md: a key that is not ours) */
        ucs_diag("%s: not a remote key of this component; left out", component->name);
        return UCS_ERR_UNREACHABLE;
    }
    /* the packed key as it came, then where its segment is mapped here */
    rkey = ucs_malloc(UCX_EXT_RKEY_MAP_OFFSET(comp->rkey_size) + sizeof(*map), "ucx_ext_rkey");
    if (rkey == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    /* all zeros: UCP's key of an empty region (a rank's zero-size window); it names no
     * memory, so every access through it fails the transport's region check */
    memcpy(rkey, buffer, comp->rkey_size);
    map        = (ucx_ext_rkey_map_t*)(rkey + UCX_EXT_RKEY_MAP_OFFSET(comp->rkey_size));
    map->local = NULL;
    if (comp->xmem && !empty) {
        memcpy(&desc, rkey + comp->xmem_offset, sizeof(desc));
        memcpy(&key_pid, rkey + comp->xmem_pid_offset, sizeof(key_pid));
        /* The transports check the key's process against the ep's peer, and the region
         * against the key: the mapping must be that process's too, and its end must not wrap,
         * or a key could name one process and map another (or this one). Without a mapping
         * the transport reaches the key's process by its own checked path. */
        if ((desc.pid == key_pid) && (desc.length <= UINT64_MAX - desc.base)) {
            map->local = ucx_ext_xmem_attach(&desc);
            map->base  = desc.base;
            map->end   = desc.base + desc.length;
        } else if (desc.pid != 0) {
            ucs_diag("%s: remote key of process %d maps memory of process %d (or wraps): "
                     "not mapped", component->name, key_pid, desc.pid);
        }
    }
    *rkey_p   = (uintptr_t)rkey;
    *handle_p = rkey;
    return UCS_OK;
}

ucs_status_t ucx_ext_rkey_release(uct_component_t *component, uct_rkey_t rkey, void *handle)
{
    const ucx_ext_component_t *comp = ucx_ext_component(component);
    const ucx_ext_rkey_map_t *map   = ucx_ext_rkey_map(rkey, comp->rkey_size);

    if (map->local != NULL) {
        ucx_ext_xmem_detach(map->local);
    }
    ucs_free(handle);
    return UCS_OK;
}

ucs_status_t ucx_ext_rkey_ptr(uct_component_t *component, uct_rkey_t rkey, void *handle,
                              uint64_t remote_addr, void **local_addr_p)
{
    const ucx_ext_component_t *comp = ucx_ext_component(component);
    const ucx_ext_rkey_map_t *map   = ucx_ext_rkey_map(rkey, comp->rkey_size);

    if (map->local == NULL) {
        return UCS_ERR_UNREACHABLE;
    }
    *local_addr_p = ucx_ext_rkey_local(map, remote_addr, 1);
    return (*local_addr_p != NULL) ? UCS_OK : UCS_ERR_INVALID_ADDR;
}

ucs_status_t ucx_ext_rcache_create(const char *name, const ucx_ext_rcache_config_t *config,
                                   size_t region_size, const ucs_rcache_ops_t *ops,
                                   void *context, ucs_rcache_t **rcache_p)
{
    ucs_rcache_params_t params;
    ucs_status_t status;

    memset(&params, 0, sizeof(params));
    ucx_ext_rcache_params(&params, config, ucs_get_page_size());
    params.region_struct_size = region_size;
    params.ucm_events         = UCM_EVENT_VM_UNMAPPED;
    params.context            = context;
    params.ops                = ops;
    params.flags              = 0;
    status = ucs_rcache_create(&params, name, NULL, rcache_p);
    if (status != UCS_OK) {
        ucs_diag("%s: no registration cache: %s", name, ucs_status_string(status));
        *rcache_p = NULL;
    }
    return status;
}
