/* The register-only memory domain of the project's transports (see ucx_ext_md.h). */
#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "ucx_ext_md.h"

#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/type/class.h>

static ucx_ext_component_t *ucx_ext_component(uct_component_t *component)
{
    return ucs_container_of(component, ucx_ext_component_t, super);
}

static ucs_status_t ucx_ext_md_query(uct_md_h md, uct_md_attr_t *attr)
{
    const ucx_ext_component_t *comp = ucx_ext_component(md->component);

    attr->cap.flags            = UCT_MD_FLAG_REG | UCT_MD_FLAG_NEED_RKEY;
    attr->cap.reg_mem_types    = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    attr->cap.alloc_mem_types  = 0;
    attr->cap.detect_mem_types = 0;
    attr->cap.access_mem_types = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    attr->cap.max_alloc        = 0;
    attr->cap.max_reg          = ULONG_MAX;
    attr->rkey_packed_size     = comp->rkey_size;
    attr->reg_cost             = ucs_linear_func_make(comp->reg_cost, 0);
    memset(&attr->local_cpus, 0xff, sizeof(attr->local_cpus));
    return UCS_OK;
}

static ucs_status_t ucx_ext_mem_reg(uct_md_h md, void *address, size_t length,
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

static ucs_status_t ucx_ext_mkey_pack(uct_md_h md, uct_mem_h memh,
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
    ops->mem_alloc              = (uct_md_mem_alloc_func_t)ucs_empty_function_return_unsupported;
    ops->mem_free               = (uct_md_mem_free_func_t)ucs_empty_function_return_unsupported;
    ops->mem_advise             = (uct_md_mem_advise_func_t)ucs_empty_function_return_unsupported;
    ops->mem_reg                = ucx_ext_mem_reg;
    ops->mem_dereg              = ucx_ext_mem_dereg;
    ops->mem_query              = (uct_md_mem_query_func_t)ucs_empty_function_return_unsupported;
    ops->mkey_pack              = ucx_ext_mkey_pack;
    ops->is_sockaddr_accessible = (uct_md_is_sockaddr_accessible_func_t)
                                  ucs_empty_function_return_zero_int;
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
                                 uct_rkey_t *rkey_p, void **handle_p)
{
    const ucx_ext_component_t *comp = ucx_ext_component(component);
    void *rkey;
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
    rkey = ucs_malloc(comp->rkey_size, "ucx_ext_rkey");
    if (rkey == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    /* all zeros: UCP's key of an empty region (a rank's zero-size window); it names no
     * memory, so every access through it fails the transport's region check */
    memcpy(rkey, buffer, comp->rkey_size);
    *rkey_p   = (uintptr_t)rkey;
    *handle_p = rkey;
    return UCS_OK;
}

ucs_status_t ucx_ext_rkey_release(uct_component_t *component, uct_rkey_t rkey, void *handle)
{
    ucs_free(handle);
    return UCS_OK;
}
