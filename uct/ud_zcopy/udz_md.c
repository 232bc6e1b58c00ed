/*
 * ud_zcopy memory domain. The wire has no RDMA: a remote access is served by the owner's own
 * process (it sends the region for a get, it copies a put into it), so registration only records
 * what peers may touch. The packed rkey names a registration slot and its random key; the owner
 * checks slot, key and bounds on every access (udz_md_resolve), the software analogue of an
 * InfiniBand rkey check. Nothing is pinned.
 */
#include "udz_uct.h"

#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/string.h>

typedef struct uct_udz_region {
    uint64_t address;
    uint64_t length;
    uint64_t key;           /* 0: free */
    uint32_t next_free;
} uct_udz_region_t;

/* One table per process: the md is a singleton, and every iface resolves against it. */
static uct_udz_region_t *uct_udz_regions;
static uint32_t uct_udz_nregions, uct_udz_free_head = UINT32_MAX;

static ucs_config_field_t uct_udz_md_config_table[] = {
    {"", "", NULL, 0, UCS_CONFIG_TYPE_TABLE(uct_md_config_table)},
    {NULL}
};

static ucs_status_t uct_udz_md_query(uct_md_h md, uct_md_attr_t *attr)
{
    attr->cap.flags            = UCT_MD_FLAG_REG | UCT_MD_FLAG_NEED_RKEY;
    attr->cap.reg_mem_types    = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    attr->cap.alloc_mem_types  = 0;
    attr->cap.detect_mem_types = 0;
    attr->cap.access_mem_types = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    attr->cap.max_alloc        = 0;
    attr->cap.max_reg          = ULONG_MAX;
    attr->rkey_packed_size     = sizeof(uct_udz_rkey_t);
    attr->reg_cost             = ucs_linear_func_make(50e-9, 0);
    memset(&attr->local_cpus, 0xff, sizeof(attr->local_cpus));
    return UCS_OK;
}

static uint64_t uct_udz_random64(void)
{
    uint64_t key;

    do {
        key = ucs_generate_uuid((uintptr_t)&key);
    } while (key == 0);
    return key;
}

static ucs_status_t uct_udz_mem_reg(uct_md_h md, void *address, size_t length,
                                    unsigned flags, uct_mem_h *memh_p)
{
    uct_udz_region_t *r;
    uint32_t id;

    if (uct_udz_free_head != UINT32_MAX) {
        id = uct_udz_free_head;
        uct_udz_free_head = uct_udz_regions[id].next_free;
    } else {
        uint32_t n = uct_udz_nregions ? uct_udz_nregions * 2 : 64;
        uct_udz_region_t *t = ucs_realloc(uct_udz_regions, n * sizeof(*t), "udz_regions");
        uint32_t i;
        if (t == NULL) {
            return UCS_ERR_NO_MEMORY;
        }
        uct_udz_regions = t;
        for (i = n; i-- > uct_udz_nregions + 1;) {
            t[i].key       = 0;
            t[i].next_free = uct_udz_free_head;
            uct_udz_free_head = i;
        }
        id = uct_udz_nregions;
        uct_udz_nregions = n;
    }
    r = &uct_udz_regions[id];
    r->address = (uintptr_t)address;
    r->length  = length;
    r->key     = uct_udz_random64();
    *memh_p    = (uct_mem_h)(uintptr_t)(id + 1);
    return UCS_OK;
}

static ucs_status_t uct_udz_mem_dereg(uct_md_h md, const uct_md_mem_dereg_params_t *params)
{
    uint32_t id;

    UCT_MD_MEM_DEREG_CHECK_PARAMS(params, 0);
    id = (uint32_t)((uintptr_t)params->memh - 1);
    if ((id >= uct_udz_nregions) || (uct_udz_regions[id].key == 0)) {
        return UCS_ERR_INVALID_PARAM;
    }
    uct_udz_regions[id].key       = 0;     /* a get or put still in flight is refused now */
    uct_udz_regions[id].next_free = uct_udz_free_head;
    uct_udz_free_head = id;
    return UCS_OK;
}

static ucs_status_t uct_udz_mkey_pack(uct_md_h md, uct_mem_h memh,
                                      const uct_md_mkey_pack_params_t *params,
                                      void *rkey_buffer)
{
    uint32_t id = (uint32_t)((uintptr_t)memh - 1);
    uct_udz_rkey_t rkey = {
        .magic   = UCT_UDZ_RKEY_MAGIC,
        .id      = id,
        .key     = uct_udz_regions[id].key,
        .address = uct_udz_regions[id].address
    };

    memcpy(rkey_buffer, &rkey, sizeof(rkey));
    return UCS_OK;
}

void *uct_udz_md_resolve(uint64_t addr, uint64_t len, const uint8_t *rkey_bytes)
{
    uct_udz_rkey_t rkey;
    const uct_udz_region_t *r;

    UCS_STATIC_ASSERT(sizeof(rkey) == UDZ_RKEY_LEN);
    memcpy(&rkey, rkey_bytes, sizeof(rkey));
    if ((rkey.magic != UCT_UDZ_RKEY_MAGIC) || (rkey.id >= uct_udz_nregions)) {
        return NULL;
    }
    r = &uct_udz_regions[rkey.id];
    if ((r->key == 0) || (r->key != rkey.key) || (addr < r->address) ||
        (len > r->length) || (addr - r->address > r->length - len)) {
        return NULL;
    }
    return (void*)(uintptr_t)addr;
}

static ucs_status_t uct_udz_rkey_unpack(uct_component_t *component, const void *buffer,
                                        uct_rkey_t *rkey_p, void **handle_p)
{
    uct_udz_rkey_t *rkey;

    if (((const uct_udz_rkey_t*)buffer)->magic != UCT_UDZ_RKEY_MAGIC) {
        ucs_error("ud_zcopy: invalid remote key (bad magic)");
        return UCS_ERR_INVALID_PARAM;
    }
    rkey = ucs_malloc(sizeof(*rkey), "udz_rkey");
    if (rkey == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    memcpy(rkey, buffer, sizeof(*rkey));
    *rkey_p   = (uintptr_t)rkey;
    *handle_p = rkey;
    return UCS_OK;
}

static ucs_status_t uct_udz_rkey_release(uct_component_t *component, uct_rkey_t rkey,
                                         void *handle)
{
    ucs_free(handle);
    return UCS_OK;
}

static ucs_status_t uct_udz_md_open(uct_component_t *component, const char *md_name,
                                    const uct_md_config_t *config, uct_md_h *md_p)
{
    static uct_md_ops_t md_ops = {
        .close                  = ucs_empty_function,
        .query                  = uct_udz_md_query,
        .mem_alloc              = (uct_md_mem_alloc_func_t)ucs_empty_function_return_unsupported,
        .mem_free               = (uct_md_mem_free_func_t)ucs_empty_function_return_unsupported,
        .mem_advise             = (uct_md_mem_advise_func_t)ucs_empty_function_return_unsupported,
        .mem_reg                = uct_udz_mem_reg,
        .mem_dereg              = uct_udz_mem_dereg,
        .mem_query              = (uct_md_mem_query_func_t)ucs_empty_function_return_unsupported,
        .mkey_pack              = uct_udz_mkey_pack,
        .is_sockaddr_accessible = (uct_md_is_sockaddr_accessible_func_t)ucs_empty_function_return_zero_int,
        .detect_memory_type     = (uct_md_detect_memory_type_func_t)ucs_empty_function_return_unsupported
    };
    static uct_md_t md = {.ops = &md_ops, .component = &uct_udz_component};

    *md_p = &md;
    return UCS_OK;
}

uct_component_t uct_udz_component = {
    .query_md_resources = uct_md_query_single_md_resource,
    .md_open            = uct_udz_md_open,
    .cm_open            = (uct_component_cm_open_func_t)ucs_empty_function_return_unsupported,
    .rkey_unpack        = uct_udz_rkey_unpack,
    .rkey_ptr           = (uct_component_rkey_ptr_func_t)ucs_empty_function_return_unsupported,
    .rkey_release       = uct_udz_rkey_release,
    .name               = "udz",
    .md_config          = {
        .name           = "ud_zcopy memory domain",
        .prefix         = UCT_UDZ_PREFIX,
        .table          = uct_udz_md_config_table,
        .size           = sizeof(uct_md_config_t),
    },
    .cm_config          = UCS_CONFIG_EMPTY_GLOBAL_LIST_ENTRY,
    .tl_list            = UCT_COMPONENT_TL_LIST_INITIALIZER(&uct_udz_component),
    .flags              = 0,
    .md_vfs_init        = (uct_component_md_vfs_init_func_t)ucs_empty_function
};
