/*
 * unimem memory domain: registration records a region (zDMA needs no pinning), and the packed
 * rkey is the region's global address - (process id, virtual address) - with the process's
 * PDID and the length, and the segment of the global address space holding it where peers
 * can load and store there (ucx_ext_xmem.h). Every put/get checks its target against the
 * key, and the key's PDID against this process's. The md allocates such memory.
 */
#include "unimem_uct.h"

#include <ucs/debug/memtrack_int.h>
#include <unistd.h>

/* The process-wide counters block lives with the md, the transport's root object: iface, ep
 * and module all count into it, and none of them depends on another for it. */
uct_unimem_counters_t uct_unimem_counters;

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

static void uct_unimem_rkey_pack(uct_md_h tl_md, uct_mem_h tl_memh, void *rkey_buffer)
{
    const uct_unimem_md_t *md  = ucs_derived_of(tl_md, uct_unimem_md_t);
    const ucx_ext_memh_t *memh = tl_memh;
    uct_unimem_rkey_t rkey     = {
        .proc   = (md->hal != NULL) ? unimem_hal_proc_id(md->hal) : (uint32_t)getpid(),
        .pdid   = (uint16_t)md->pdid,
        .vaddr  = memh->address,
        .length = memh->length
    };

    ucx_ext_xmem_describe(memh->address, memh->length, &rkey.xmem);
    memcpy(rkey_buffer, &rkey, sizeof(rkey));
}

static int uct_unimem_rkey_valid(const void *buffer)
{
    uct_unimem_rkey_t rkey;

    memcpy(&rkey, buffer, sizeof(rkey));
    return (rkey.pdid != 0) && (rkey.vaddr + rkey.length >= rkey.vaddr);
}

static void uct_unimem_md_close(uct_md_h tl_md)
{
    uct_unimem_md_t *md = ucs_derived_of(tl_md, uct_unimem_md_t);

    if (md->hal != NULL) {
        unimem_hal_close(md->hal);
    }
    ucs_free(md);
}

static uct_md_ops_t uct_unimem_md_ops;

static ucs_status_t uct_unimem_md_open(uct_component_t *component, const char *md_name,
                                       const uct_md_config_t *tl_config, uct_md_h *md_p)
{
    const uct_unimem_md_config_t *config = ucs_derived_of(tl_config, uct_unimem_md_config_t);
    uct_unimem_md_t *md = ucs_calloc(1, sizeof(*md), "unimem_md");
    int ret;

    if (md == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    if (uct_unimem_md_ops.query == NULL) {
        ucx_ext_md_ops_init(&uct_unimem_md_ops, uct_unimem_md_close);
    }
    md->super.ops       = &uct_unimem_md_ops;
    md->super.component = &uct_unimem_component.super;
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

ucx_ext_component_t uct_unimem_component = {
    UCX_EXT_COMPONENT(uct_unimem_component, UCT_UNIMEM_NAME, UCT_UNIMEM_PREFIX,
                      uct_unimem_md_open, uct_unimem_md_config_table,
                      sizeof(uct_unimem_md_config_t)),
    .rkey_size  = sizeof(uct_unimem_rkey_t),
    .reg_cost   = 0,
    .rkey_pack  = uct_unimem_rkey_pack,
    .rkey_valid = uct_unimem_rkey_valid,
    /* the global address space's segments: memory the md allocates (Open MPI's
     * Win_allocate windows) is reached by loads and stores (ucx_ext_xmem.h) */
    .xmem        = 1,
    .xmem_offset = ucs_offsetof(uct_unimem_rkey_t, xmem),
    .xmem_pid_offset = ucs_offsetof(uct_unimem_rkey_t, proc),
};
