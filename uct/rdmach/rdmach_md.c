/*
 * rdmach memory domain: registration records a region, the packed rkey names the process and
 * region, and every put/get checks its target against it (the shm analogue of an IB rkey).
 */
#include "rdmach_uct.h"

#include <ucs/debug/memtrack_int.h>
#include <unistd.h>

static ucs_config_field_t uct_rdmach_md_config_table[] = {
    {"", "", NULL, 0, UCS_CONFIG_TYPE_TABLE(uct_md_config_table)},
    {NULL}
};

static ucs_status_t uct_rdmach_md_query(uct_md_h md, uct_md_attr_t *attr)
{
    attr->cap.flags            = UCT_MD_FLAG_REG | UCT_MD_FLAG_NEED_RKEY;
    attr->cap.reg_mem_types    = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    attr->cap.alloc_mem_types  = 0;
    attr->cap.detect_mem_types = 0;
    attr->cap.access_mem_types = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    attr->cap.max_alloc        = 0;
    attr->cap.max_reg          = ULONG_MAX;
    attr->rkey_packed_size     = sizeof(uct_rdmach_rkey_t);
    attr->reg_cost             = ucs_linear_func_make(0, 0);
    memset(&attr->local_cpus, 0xff, sizeof(attr->local_cpus));
    return UCS_OK;
}

static ucs_status_t uct_rdmach_mem_reg(uct_md_h md, void *address, size_t length,
                                       unsigned flags, uct_mem_h *memh_p)
{
    uct_rdmach_memh_t *memh = ucs_malloc(sizeof(*memh), "rdmach_memh");

    if (memh == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    memh->address = (uintptr_t)address;
    memh->length  = length;
    *memh_p       = memh;
    return UCS_OK;
}

static ucs_status_t uct_rdmach_mem_dereg(uct_md_h md,
                                         const uct_md_mem_dereg_params_t *params)
{
    UCT_MD_MEM_DEREG_CHECK_PARAMS(params, 0);
    ucs_free(params->memh);
    return UCS_OK;
}

static ucs_status_t uct_rdmach_mkey_pack(uct_md_h md, uct_mem_h tl_memh,
                                         const uct_md_mkey_pack_params_t *params,
                                         void *rkey_buffer)
{
    const uct_rdmach_memh_t *memh = tl_memh;
    uct_rdmach_rkey_t rkey        = {
        .magic   = UCT_RDMACH_RKEY_MAGIC,
        .pid     = getpid(),
        .address = memh->address,
        .length  = memh->length
    };

    memcpy(rkey_buffer, &rkey, sizeof(rkey));
    return UCS_OK;
}

static ucs_status_t uct_rdmach_rkey_unpack(uct_component_t *component, const void *buffer,
                                           uct_rkey_t *rkey_p, void **handle_p)
{
    uct_rdmach_rkey_t *rkey;

    if (((const uct_rdmach_rkey_t*)buffer)->magic != UCT_RDMACH_RKEY_MAGIC) {
        ucs_error("rdmach: invalid remote key (bad magic)");
        return UCS_ERR_INVALID_PARAM;
    }
    rkey = ucs_malloc(sizeof(*rkey), "rdmach_rkey");
    if (rkey == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    memcpy(rkey, buffer, sizeof(*rkey));
    *rkey_p   = (uintptr_t)rkey;
    *handle_p = rkey;
    return UCS_OK;
}

static ucs_status_t uct_rdmach_rkey_release(uct_component_t *component, uct_rkey_t rkey,
                                            void *handle)
{
    ucs_free(handle);
    return UCS_OK;
}

static ucs_status_t uct_rdmach_md_open(uct_component_t *component, const char *md_name,
                                       const uct_md_config_t *config, uct_md_h *md_p)
{
    static uct_md_ops_t md_ops = {
        .close                  = ucs_empty_function,
        .query                  = uct_rdmach_md_query,
        .mem_alloc              = (uct_md_mem_alloc_func_t)ucs_empty_function_return_unsupported,
        .mem_free               = (uct_md_mem_free_func_t)ucs_empty_function_return_unsupported,
        .mem_advise             = (uct_md_mem_advise_func_t)ucs_empty_function_return_unsupported,
        .mem_reg                = uct_rdmach_mem_reg,
        .mem_dereg              = uct_rdmach_mem_dereg,
        .mem_query              = (uct_md_mem_query_func_t)ucs_empty_function_return_unsupported,
        .mkey_pack              = uct_rdmach_mkey_pack,
        .is_sockaddr_accessible = (uct_md_is_sockaddr_accessible_func_t)ucs_empty_function_return_zero_int,
        .detect_memory_type     = (uct_md_detect_memory_type_func_t)ucs_empty_function_return_unsupported
    };
    static uct_md_t md = {.ops = &md_ops, .component = &uct_rdmach_component};

    *md_p = &md;
    return UCS_OK;
}

uct_component_t uct_rdmach_component = {
    .query_md_resources = uct_md_query_single_md_resource,
    .md_open            = uct_rdmach_md_open,
    .cm_open            = (uct_component_cm_open_func_t)ucs_empty_function_return_unsupported,
    .rkey_unpack        = uct_rdmach_rkey_unpack,
    .rkey_ptr           = (uct_component_rkey_ptr_func_t)ucs_empty_function_return_unsupported,
    .rkey_release       = uct_rdmach_rkey_release,
    .name               = UCT_RDMACH_NAME,
    .md_config          = {
        .name           = "rdmach memory domain",
        .prefix         = UCT_RDMACH_PREFIX,
        .table          = uct_rdmach_md_config_table,
        .size           = sizeof(uct_md_config_t),
    },
    .cm_config          = UCS_CONFIG_EMPTY_GLOBAL_LIST_ENTRY,
    .tl_list            = UCT_COMPONENT_TL_LIST_INITIALIZER(&uct_rdmach_component),
    .flags              = 0,
    .md_vfs_init        = (uct_component_md_vfs_init_func_t)ucs_empty_function
};
