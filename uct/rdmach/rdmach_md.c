/*
 * rdmach memory domains.
 *  - "rdmach": the shared-memory wire's. Registration records a region, the packed rkey names
 *    the process and region, and every put/get checks its target against it (the shm analogue
 *    of an IB rkey). It is uct/common's md, and it allocates mapped memory
 *    (ucx_ext_xmem.h): a key to memory it allocated carries the segment, which peers map,
 *    so that their puts, gets and atomics there are stores, loads and CPU atomics.
 *  - one per domain of a wire that has them ("rdmach_<hca>" for RC): registration is the wire's
 *    (ibv_reg_mr), the packed rkey carries the wire's 32-bit key, and the HCA checks it too.
 *    Registrations go through UCX's registration cache (ucs_rcache, as UCX's ib md does): a
 *    buffer registered again is found, not pinned again, and unmapping memory invalidates
 *    its regions. UCP then sees the cache's lookup cost as the registration cost and moves
 *    large messages by zero copy from a lower size on.
 * Both pack the same rkey layout, so the component unpacks either.
 */
#include "rdmach_uct.h"

#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/string.h>
#include <ucm/api/ucm.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

/* The process-wide counters block lives with the md, the transport's root object: iface, ep
 * and module all count into it, and none of them depends on another for it. */
uct_rdmach_counters_t uct_rdmach_counters;

/* The shm md's registrations: a served request (rdmach_serve.h) touches only these. */
static pthread_mutex_t uct_rdmach_shm_regs_lock = PTHREAD_MUTEX_INITIALIZER;
static UCS_LIST_HEAD(uct_rdmach_shm_regs);

/* Is [address, address + length) one of the shm md's registrations (exact), or inside one?
 * Overflow-safe: the range is a peer's word. */
static int uct_rdmach_md_find(uint64_t address, uint64_t length, int exact)
{
    uct_rdmach_memh_t *memh;
    uint64_t off;
    int found = 0;

    pthread_mutex_lock(&uct_rdmach_shm_regs_lock);
    ucs_list_for_each(memh, &uct_rdmach_shm_regs, list) {
        off = address - memh->super.address;
        if (exact ? ((address == memh->super.address) && (length == memh->super.length)) :
                    ((address >= memh->super.address) && (off <= memh->super.length) &&
                     (length <= memh->super.length - off))) {
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&uct_rdmach_shm_regs_lock);
    return found;
}

int uct_rdmach_md_registered(void *arg, uint64_t address, uint64_t length)
{
    (void)arg;
    return uct_rdmach_md_find(address, length, 1);
}

int uct_rdmach_md_covers(void *arg, uint64_t address, uint64_t length)
{
    (void)arg;
    return uct_rdmach_md_find(address, length, 0);
}

typedef struct uct_rdmach_md_config {
    uct_md_config_t        super;
    int                    rcache;
    ucx_ext_rcache_config_t rcache_config;
} uct_rdmach_md_config_t;

static ucs_config_field_t uct_rdmach_md_config_table[] = {
    {"", "", NULL, 0, UCS_CONFIG_TYPE_TABLE(uct_md_config_table)},

    UCX_EXT_RCACHE_CONFIG_ENTRIES(uct_rdmach_md_config_t, rcache, rcache_config,
                                  "a verbs domain"),

    {NULL}
};

/* Registers memh's region [address, address + length) in the md's wire domain (logged
 * unless silent). */
static ucs_status_t uct_rdmach_md_wire_reg(uct_rdmach_md_t *md, uct_rdmach_memh_t *memh,
                                           int silent)
{
    int ret = md->wire->mem_reg(md->domain, (void*)memh->super.address, memh->super.length,
                                &memh->reg, &memh->key);

    if (ret == 0) {
        return UCS_OK;
    }
    if (!silent) {
        ucs_error("rdmach: cannot register %zu bytes at 0x%lx: %s%s", memh->super.length,
                  memh->super.address, strerror(-ret),
                  (ret == -ENOMEM) ? " (check ulimit -l)" : "");
    }
    return UCS_ERR_IO_ERROR;
}

/* A cached registration: the rcache's region, then our memh. */
typedef struct uct_rdmach_rcache_region {
    ucs_rcache_region_t super;
    uct_rdmach_memh_t   memh;
} uct_rdmach_rcache_region_t;

static ucs_status_t uct_rdmach_rcache_mem_reg(void *context, ucs_rcache_t *rcache, void *arg,
                                              ucs_rcache_region_t *rregion, uint16_t flags)
{
    uct_rdmach_md_t *md                = context;
    uct_rdmach_rcache_region_t *region = ucs_derived_of(rregion, uct_rdmach_rcache_region_t);
    uct_rdmach_memh_t *memh            = &region->memh;

    memh->super.address = rregion->super.start;
    memh->super.length  = rregion->super.end - rregion->super.start;
    return uct_rdmach_md_wire_reg(md, memh, flags & UCS_RCACHE_MEM_REG_HIDE_ERRORS);
}

static void uct_rdmach_rcache_mem_dereg(void *context, ucs_rcache_t *rcache,
                                        ucs_rcache_region_t *rregion)
{
    uct_rdmach_md_t *md = context;

    md->wire->mem_dereg(ucs_derived_of(rregion, uct_rdmach_rcache_region_t)->memh.reg);
}

static void uct_rdmach_rcache_dump(void *context, ucs_rcache_t *rcache,
                                   ucs_rcache_region_t *rregion, char *buf, size_t max)
{
    snprintf(buf, max, "key 0x%x", ucs_derived_of(rregion, uct_rdmach_rcache_region_t)->memh.key);
}

static const ucs_rcache_ops_t uct_rdmach_rcache_ops = {
    UCX_EXT_RCACHE_VERSION_OPS
    .mem_reg     = uct_rdmach_rcache_mem_reg,
    .mem_dereg   = uct_rdmach_rcache_mem_dereg,
    .dump_region = uct_rdmach_rcache_dump
};

/* The domain md's cache; without one (UCX_RDMACH_RCACHE=n, or it cannot be made) every
 * registration is the wire's own. */
static void uct_rdmach_md_rcache_init(uct_rdmach_md_t *md, const uct_rdmach_md_config_t *config)
{
    md->rcache = NULL;
    if (config->rcache &&
        (ucx_ext_rcache_create(UCT_RDMACH_NAME, &config->rcache_config,
                               sizeof(uct_rdmach_rcache_region_t), &uct_rdmach_rcache_ops, md,
                               &md->rcache) == UCS_OK)) {
        md->rcache_overhead = ucx_ext_rcache_overhead(&config->rcache_config);
    }
}

#define UCT_RDMACH_MD_MAX 16

/* The md names of a wire's domains: rdmach_<domain>, cut to UCT_MD_NAME_MAX. */
static unsigned uct_rdmach_domain_names(const rdmach_wire_ops_t *wire,
                                        char (*domains)[RDMACH_WIRE_DEV_NAME_MAX],
                                        char (*md_names)[UCT_MD_NAME_MAX], unsigned max)
{
    unsigned i, n = wire->query_domains(domains, max);

    for (i = 0; i < n; ++i) {
        ucs_snprintf_zero(md_names[i], UCT_MD_NAME_MAX, "%s_%s", UCT_RDMACH_NAME, domains[i]);
    }
    return n;
}

static ucs_status_t uct_rdmach_query_md_resources(uct_component_t *component,
                                                  uct_md_resource_desc_t **resources_p,
                                                  unsigned *num_resources_p)
{
    char domains[UCT_RDMACH_MD_MAX][RDMACH_WIRE_DEV_NAME_MAX];
    char names[UCT_RDMACH_MD_MAX][UCT_MD_NAME_MAX];
    const rdmach_wire_ops_t *const *w;
    uct_md_resource_desc_t *res;
    unsigned i, n = 1;

    res = ucs_calloc(UCT_RDMACH_MD_MAX, sizeof(*res), "rdmach md resources");
    if (res == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    ucs_snprintf_zero(res[0].md_name, UCT_MD_NAME_MAX, "%s", component->name);
    for (w = rdmach_wires; *w != NULL; ++w) {
        if ((*w)->query_domains == NULL) {
            continue;
        }
        for (i = 0; i < uct_rdmach_domain_names(*w, domains, names, UCT_RDMACH_MD_MAX - n);
             ++i) {
            memcpy(res[n++].md_name, names[i], UCT_MD_NAME_MAX);
        }
    }
    *resources_p     = res;
    *num_resources_p = n;
    return UCS_OK;
}

static uct_rdmach_md_t uct_rdmach_shm_md;

static ucs_status_t uct_rdmach_md_query(uct_md_h tl_md, ucx_ext_md_attr_t *attr)
{
    uct_rdmach_md_t *md = ucs_derived_of(tl_md, uct_rdmach_md_t);
    ucs_status_t status = md->shm_query(tl_md, attr);

    /* zero copy needs the local buffer registered too (the lkey): UCP then passes memh;
     * mapped memory is the shm md's (a network peer cannot map it) */
    UCX_EXT_MD_CAP(attr, flags) |= UCT_MD_FLAG_NEED_MEMH;
    UCX_EXT_MD_CAP(attr, flags) &= ~(uint64_t)UCT_MD_FLAG_ALLOC;
    UCX_EXT_MD_CAP(attr, alloc_mem_types) = 0;
    UCX_EXT_MD_CAP(attr, max_alloc)       = 0;
    /* registration pins pages and programs the HCA (ib md: about 16 us + 0.06 ns/byte); a
     * cached one costs the lookup */
    attr->reg_cost = (md->rcache != NULL) ? ucs_linear_func_make(md->rcache_overhead, 0) :
                                            ucs_linear_func_make(16e-6, 0.06e-9);
    return status;
}

static void uct_rdmach_md_close(uct_md_h tl_md)
{
    uct_rdmach_md_t *md = ucs_derived_of(tl_md, uct_rdmach_md_t);

    if (md->rcache != NULL) {
        ucs_rcache_destroy(md->rcache);
    }
    md->wire->domain_close(md->domain);
    ucs_free(md);
}

static ucs_status_t uct_rdmach_md_open(uct_component_t *component, const char *md_name,
                                       const uct_md_config_t *config, uct_md_h *md_p)
{
    char domains[UCT_RDMACH_MD_MAX][RDMACH_WIRE_DEV_NAME_MAX];
    char names[UCT_RDMACH_MD_MAX][UCT_MD_NAME_MAX];
    const rdmach_wire_ops_t *const *w;
    uct_rdmach_md_t *md;
    unsigned i, n;
    int ret;

    if (!strcmp(md_name, component->name)) {
        if (uct_rdmach_shm_md.super.ops == NULL) {
            ucx_ext_md_ops_init(&uct_rdmach_shm_md.ops, NULL);
            uct_rdmach_shm_md.super.ops       = &uct_rdmach_shm_md.ops;
            uct_rdmach_shm_md.super.component = component;
        }
        *md_p = &uct_rdmach_shm_md.super;
        return UCS_OK;
    }

    for (w = rdmach_wires; *w != NULL; ++w) {
        if ((*w)->query_domains == NULL) {
            continue;
        }
        n = uct_rdmach_domain_names(*w, domains, names, UCT_RDMACH_MD_MAX);
        for (i = 0; i < n; ++i) {
            if (strcmp(names[i], md_name) != 0) {
                continue;
            }
            md = ucs_calloc(1, sizeof(*md), "rdmach md");
            if (md == NULL) {
                return UCS_ERR_NO_MEMORY;
            }
            ret = (*w)->domain_open(domains[i], &md->domain);
            if (ret != 0) {
                ucs_error("rdmach: cannot open %s: %s", domains[i], strerror(-ret));
                ucs_free(md);
                return UCS_ERR_NO_DEVICE;
            }
            ucx_ext_md_ops_init(&md->ops, uct_rdmach_md_close);
            md->shm_query        = md->ops.query;
            md->ops.query        = uct_rdmach_md_query;
            md->super.ops        = &md->ops;
            md->super.component  = component;
            md->wire             = *w;
            uct_rdmach_md_rcache_init(md, ucs_derived_of(config, uct_rdmach_md_config_t));
            *md_p                = &md->super;
            return UCS_OK;
        }
    }
    return UCS_ERR_NO_DEVICE;
}

static ucs_status_t uct_rdmach_mem_reg(uct_md_h tl_md, void *address, size_t length,
                                       unsigned flags, uct_mem_h *memh_p)
{
    uct_rdmach_md_t *md = ucs_derived_of(tl_md, uct_rdmach_md_t);
    ucs_rcache_region_t *rregion;
    uct_rdmach_memh_t *memh;
    ucs_status_t status;

    if (md->rcache != NULL) {
        status = ucx_ext_rcache_get(md->rcache, address, length, UCS_PGT_ADDR_ALIGN,
                                    PROT_READ | PROT_WRITE, NULL, &rregion);
        if (status == UCS_OK) {
            *memh_p = &ucs_derived_of(rregion, uct_rdmach_rcache_region_t)->memh;
        }
        return status;
    }
    memh = ucs_calloc(1, sizeof(*memh), "rdmach memh");
    if (memh == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    memh->super.address = (uintptr_t)address;
    memh->super.length  = length;
    if (md->wire != NULL) {
        /* widened to 8-byte boundaries (the same pages): a 32-bit device atomic works on the
         * aligned word that holds it, also at the region's edge (rdmach_amo.c) */
        memh->super.address = ucs_align_down_pow2((uintptr_t)address, 8);
        memh->super.length  = ucs_align_up_pow2((uintptr_t)address + length, 8) -
                              memh->super.address;
        status = uct_rdmach_md_wire_reg(md, memh, 0);
        if (status != UCS_OK) {
            ucs_free(memh);
            return status;
        }
    } else {
        pthread_mutex_lock(&uct_rdmach_shm_regs_lock);
        ucs_list_add_tail(&uct_rdmach_shm_regs, &memh->list);
        pthread_mutex_unlock(&uct_rdmach_shm_regs_lock);
    }
    *memh_p = memh;
    return UCS_OK;
}

static ucs_status_t uct_rdmach_mem_dereg(uct_md_h tl_md, uct_mem_h tl_memh)
{
    uct_rdmach_md_t *md     = ucs_derived_of(tl_md, uct_rdmach_md_t);
    uct_rdmach_memh_t *memh = tl_memh;

    if (md->rcache != NULL) {
        ucs_rcache_region_put(md->rcache,
                              &ucs_container_of(memh, uct_rdmach_rcache_region_t, memh)->super);
        return UCS_OK;
    }
    if ((md->wire != NULL) && (memh->reg != NULL)) {
        md->wire->mem_dereg(memh->reg);
    } else if (md->wire == NULL) {
        pthread_mutex_lock(&uct_rdmach_shm_regs_lock);
        ucs_list_del(&memh->list);
        pthread_mutex_unlock(&uct_rdmach_shm_regs_lock);
    }
    ucs_free(memh);
    return UCS_OK;
}

static void uct_rdmach_rkey_pack(uct_md_h tl_md, uct_mem_h tl_memh, void *rkey_buffer)
{
    uct_rdmach_md_t *md           = ucs_derived_of(tl_md, uct_rdmach_md_t);
    const uct_rdmach_memh_t *memh = tl_memh;
    uct_rdmach_rkey_t rkey        = {
        .magic   = UCT_RDMACH_RKEY_MAGIC,
        /* the shm wire reaches a process; a network wire's key is checked by its device */
        .pid     = (md->wire == NULL) ? ucx_ext_getpid() : 0,
        .key     = memh->key,
        .address = memh->super.address,
        .length  = memh->super.length
    };

    if (md->wire == NULL) {
        /* the segment holding the region, if the md allocated it: peers map it */
        ucx_ext_xmem_describe(memh->super.address, memh->super.length, &rkey.xmem);
    } else {
        memset(&rkey.xmem, 0, sizeof(rkey.xmem));
    }
    memcpy(rkey_buffer, &rkey, sizeof(rkey));
}

static int uct_rdmach_rkey_valid(const void *buffer)
{
    return ((const uct_rdmach_rkey_t*)buffer)->magic == UCT_RDMACH_RKEY_MAGIC;
}

ucx_ext_component_t uct_rdmach_component = {
    UCX_EXT_COMPONENT_MDS(uct_rdmach_component, UCT_RDMACH_NAME, UCT_RDMACH_PREFIX,
                          uct_rdmach_query_md_resources, uct_rdmach_md_open,
                          uct_rdmach_md_config_table, sizeof(uct_rdmach_md_config_t)),
    .rkey_size  = sizeof(uct_rdmach_rkey_t),
    .reg_cost   = 0,
    .rkey_pack  = uct_rdmach_rkey_pack,
    .rkey_valid = uct_rdmach_rkey_valid,
    .mem_reg    = uct_rdmach_mem_reg,
    .mem_dereg  = uct_rdmach_mem_dereg,
    /* the shm md allocates mapped memory (Open MPI's Win_allocate windows) */
    .xmem        = 1,
    .xmem_offset = ucs_offsetof(uct_rdmach_rkey_t, xmem),
    .xmem_pid_offset = ucs_offsetof(uct_rdmach_rkey_t, pid),
};
