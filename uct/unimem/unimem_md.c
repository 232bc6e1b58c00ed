/*
 * unimem memory domain: registration records a region (zDMA needs no pinning), and the packed
 * rkey is the region's global address - (process id, virtual address) - with the process's
 * PDID and the length: 22 bytes. Every put/get checks its target against the key, and the
 * key's PDID against this process's.
 */
#include "unimem_uct.h"

#include <ucs/debug/memtrack_int.h>
#include <unistd.h>

static ucs_config_field_t uct_unimem_md_config_table[] = {
    {"", "", NULL, ucs_offsetof(uct_unimem_md_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_md_config_table)},

    {"PDID", "1",
     "Protection-domain id of this process (1..65535). Every process of a job must use the\n"
     "same one: mailbox messages and zDMA transfers into a process of another PDID are\n"
     "refused, as the ExaNeSt SMMU context banks refuse them.",
     ucs_offsetof(uct_unimem_md_config_t, pdid), UCS_CONFIG_TYPE_UINT},

    {NULL}
};

static ucs_status_t uct_unimem_md_query(uct_md_h md, uct_md_attr_t *attr)
{
    attr->cap.flags            = UCT_MD_FLAG_REG | UCT_MD_FLAG_NEED_RKEY;
    attr->cap.reg_mem_types    = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    attr->cap.alloc_mem_types  = 0;
    attr->cap.detect_mem_types = 0;
    attr->cap.access_mem_types = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    attr->cap.max_alloc        = 0;
    attr->cap.max_reg          = ULONG_MAX;
    attr->rkey_packed_size     = sizeof(uct_unimem_rkey_t);
    attr->reg_cost             = ucs_linear_func_make(0, 0);
    memset(&attr->local_cpus, 0xff, sizeof(attr->local_cpus));
    return UCS_OK;
}

static ucs_status_t uct_unimem_mem_reg(uct_md_h md, void *address, size_t length,
                                       unsigned flags, uct_mem_h *memh_p)
{
    uct_unimem_memh_t *memh = ucs_malloc(sizeof(*memh), "unimem_memh");

    if (memh == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    memh->address = (uintptr_t)address;
    memh->length  = length;
    *memh_p       = memh;
    return UCS_OK;
}

static ucs_status_t uct_unimem_mem_dereg(uct_md_h md,
                                         const uct_md_mem_dereg_params_t *params)
{
    UCT_MD_MEM_DEREG_CHECK_PARAMS(params, 0);
    ucs_free(params->memh);
    return UCS_OK;
}

static ucs_status_t uct_unimem_mkey_pack(uct_md_h tl_md, uct_mem_h tl_memh,
                                         const uct_md_mkey_pack_params_t *params,
                                         void *rkey_buffer)
{
    const uct_unimem_md_t *md     = ucs_derived_of(tl_md, uct_unimem_md_t);
    const uct_unimem_memh_t *memh = tl_memh;
    uct_unimem_rkey_t rkey        = {
        .proc   = (md->hal != NULL) ? unimem_hal_proc_id(md->hal) : (uint32_t)getpid(),
        .pdid   = (uint16_t)md->pdid,
        .vaddr  = memh->address,
        .length = memh->length
    };

    memcpy(rkey_buffer, &rkey, sizeof(rkey));
    return UCS_OK;
}

static ucs_status_t uct_unimem_rkey_unpack(uct_component_t *component, const void *buffer,
                                           uct_rkey_t *rkey_p, void **handle_p)
{
    uct_unimem_rkey_t *rkey = ucs_malloc(sizeof(*rkey), "unimem_rkey");

    if (rkey == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    memcpy(rkey, buffer, sizeof(*rkey));
    if ((rkey->pdid == 0) || (rkey->vaddr + rkey->length < rkey->vaddr)) {
        ucs_free(rkey);
        ucs_error("unimem: invalid remote key");
        return UCS_ERR_INVALID_PARAM;
    }
    *rkey_p   = (uintptr_t)rkey;
    *handle_p = rkey;
    return UCS_OK;
}

static ucs_status_t uct_unimem_rkey_release(uct_component_t *component, uct_rkey_t rkey,
                                            void *handle)
{
    ucs_free(handle);
    return UCS_OK;
}

static void uct_unimem_md_close(uct_md_h tl_md)
{
    uct_unimem_md_t *md = ucs_derived_of(tl_md, uct_unimem_md_t);

    if (md->hal != NULL) {
        unimem_hal_close(md->hal);
    }
    ucs_free(md);
}

static uct_md_ops_t uct_unimem_md_ops = {
    .close                  = uct_unimem_md_close,
    .query                  = uct_unimem_md_query,
    .mem_alloc              = (uct_md_mem_alloc_func_t)ucs_empty_function_return_unsupported,
    .mem_free               = (uct_md_mem_free_func_t)ucs_empty_function_return_unsupported,
    .mem_advise             = (uct_md_mem_advise_func_t)ucs_empty_function_return_unsupported,
    .mem_reg                = uct_unimem_mem_reg,
    .mem_dereg              = uct_unimem_mem_dereg,
    .mem_query              = (uct_md_mem_query_func_t)ucs_empty_function_return_unsupported,
    .mkey_pack              = uct_unimem_mkey_pack,
    .is_sockaddr_accessible = (uct_md_is_sockaddr_accessible_func_t)ucs_empty_function_return_zero_int,
    .detect_memory_type     = (uct_md_detect_memory_type_func_t)ucs_empty_function_return_unsupported
};

static ucs_status_t uct_unimem_md_open(uct_component_t *component, const char *md_name,
                                       const uct_md_config_t *tl_config, uct_md_h *md_p)
{
    const uct_unimem_md_config_t *config = ucs_derived_of(tl_config, uct_unimem_md_config_t);
    uct_unimem_md_t *md = ucs_calloc(1, sizeof(*md), "unimem_md");
    int ret;

    if (md == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    md->super.ops       = &uct_unimem_md_ops;
    md->super.component = &uct_unimem_component;
    md->pdid            = config->pdid;
    md->hal             = NULL;
    if ((config->pdid >= 1) && (config->pdid <= UNIMEM_HAL_PDID_MAX)) {
        ret = unimem_hal_open(config->pdid, &md->hal);
        if (ret != 0) {
            ucs_diag("unimem: cannot open the HAL context with PDID %u: %s (a process has "
                     "one protection domain)", config->pdid, strerror(-ret));
            md->hal = NULL;
        }
    }
    *md_p = &md->super;
    return UCS_OK;
}

uct_component_t uct_unimem_component = {
    .query_md_resources = uct_md_query_single_md_resource,
    .md_open            = uct_unimem_md_open,
    .cm_open            = (uct_component_cm_open_func_t)ucs_empty_function_return_unsupported,
    .rkey_unpack        = uct_unimem_rkey_unpack,
    .rkey_ptr           = (uct_component_rkey_ptr_func_t)ucs_empty_function_return_unsupported,
    .rkey_release       = uct_unimem_rkey_release,
    .name               = UCT_UNIMEM_NAME,
    .md_config          = {
        .name           = "unimem memory domain",
        .prefix         = UCT_UNIMEM_PREFIX,
        .table          = uct_unimem_md_config_table,
        .size           = sizeof(uct_unimem_md_config_t),
    },
    .cm_config          = UCS_CONFIG_EMPTY_GLOBAL_LIST_ENTRY,
    .tl_list            = UCT_COMPONENT_TL_LIST_INITIALIZER(&uct_unimem_component),
    .flags              = 0,
    .md_vfs_init        = (uct_component_md_vfs_init_func_t)ucs_empty_function
};
