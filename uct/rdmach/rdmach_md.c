/*
 * rdmach memory domain: registration records a region, the packed rkey names the process and
 * region, and every put/get checks its target against it (the shm analogue of an IB rkey).
 * The md itself is uct/common's register-only one.
 */
#include "rdmach_uct.h"

#include <unistd.h>

/* The process-wide counters block lives with the md, the transport's root object: iface, ep
 * and module all count into it, and none of them depends on another for it. */
uct_rdmach_counters_t uct_rdmach_counters;

static ucs_config_field_t uct_rdmach_md_config_table[] = {
    {"", "", NULL, 0, UCS_CONFIG_TYPE_TABLE(uct_md_config_table)},
    {NULL}
};

static void uct_rdmach_rkey_pack(uct_md_h md, uct_mem_h tl_memh, void *rkey_buffer)
{
    const ucx_ext_memh_t *memh = tl_memh;
    uct_rdmach_rkey_t rkey     = {
        .magic   = UCT_RDMACH_RKEY_MAGIC,
        .pid     = getpid(),
        .address = memh->address,
        .length  = memh->length
    };

    memcpy(rkey_buffer, &rkey, sizeof(rkey));
}

static int uct_rdmach_rkey_valid(const void *buffer)
{
    return ((const uct_rdmach_rkey_t*)buffer)->magic == UCT_RDMACH_RKEY_MAGIC;
}

ucx_ext_component_t uct_rdmach_component = {
    UCX_EXT_COMPONENT(uct_rdmach_component, UCT_RDMACH_NAME, UCT_RDMACH_PREFIX,
                      ucx_ext_md_open_static, uct_rdmach_md_config_table,
                      sizeof(uct_md_config_t)),
    .rkey_size  = sizeof(uct_rdmach_rkey_t),
    .reg_cost   = 0,
    .rkey_pack  = uct_rdmach_rkey_pack,
    .rkey_valid = uct_rdmach_rkey_valid,
};
