/*
 * ud_zcopy memory domain. The wire has no RDMA: a remote access is served by the owner's own
 * process (it sends the region for a get, it copies a put into it), so registration only records
 * what peers may touch. The packed rkey names a registration slot and its random key; the owner
 * checks slot, key, bounds and the access the registration grants (a put needs
 * UCT_MD_MEM_ACCESS_REMOTE_PUT, a get UCT_MD_MEM_ACCESS_REMOTE_GET) on every access
 * (uct_udz_md_resolve), the software analogue of an InfiniBand rkey check. Keys come from
 * getrandom(2). Nothing is pinned.
 *
 * A get is served over time, from the owner's memory: the transfer holds the registration
 * (udz_mem_hold_t, linked into the region's list), and deregistration revokes every transfer
 * on that list before it returns, so the memory is never read again once the caller has it
 * back.
 *
 * The table is the process's, and workers of several threads register into it at once (UCX's
 * uct perf test does, a sender and a receiver thread): every access holds its lock, as a
 * registration that grows the table moves it.
 */
#include "udz_uct.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <sys/random.h>

#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/string.h>

typedef struct uct_udz_region {
    uint64_t        address;
    uint64_t        length;
    uint64_t        key;        /* 0: free */
    uint32_t        next_free;
    unsigned        access;     /* the registration's UCT_MD_MEM_ACCESS_REMOTE_* flags */
    udz_mem_hold_t *holds;      /* the transfers being served from it (revoked at dereg) */
} uct_udz_region_t;

/* One table per process: the md is a singleton, and every iface resolves against it. */
static uct_udz_region_t *uct_udz_regions;
static uint32_t uct_udz_nregions, uct_udz_free_head = UINT32_MAX;
static pthread_mutex_t uct_udz_regions_lock = PTHREAD_MUTEX_INITIALIZER;

/* The process-wide counters block lives with the md, the transport's root object: iface, ep
 * and module all count into it, and none of them depends on another for it. */
uct_udz_counters_t uct_udz_counters;

static ucs_config_field_t uct_udz_md_config_table[] = {
    {"", "", NULL, 0, UCS_CONFIG_TYPE_TABLE(uct_md_config_table)},
    {NULL}
};

/* A key is all that stands between a peer that learned a region's slot and address and its
 * memory, so it comes from the kernel's CSPRNG: ucs_generate_uuid, used before, mixes the
 * time, the pid and an address, which a peer can guess. 0 means a free slot: never a key. */
static ucs_status_t uct_udz_random64(uint64_t *key_p)
{
    uint64_t key = 0;
    ssize_t n;

    while (key == 0) {
        n = getrandom(&key, sizeof(key), 0);
        if ((n < 0) && (errno == EINTR)) {
            key = 0;
            continue;
        }
        if (n != (ssize_t)sizeof(key)) {
            ucs_error("ud_zcopy: getrandom(2) for a memory key: %m");
            return UCS_ERR_IO_ERROR;
        }
    }
    *key_p = key;
    return UCS_OK;
}

static ucs_status_t uct_udz_mem_reg(uct_md_h md, void *address, size_t length,
                                    unsigned flags, uct_mem_h *memh_p)
{
    uct_udz_region_t *r;
    ucs_status_t status;
    uint64_t key;
    uint32_t id;

    status = uct_udz_random64(&key);    /* outside the lock: it may be a system call */
    if (status != UCS_OK) {
        return status;
    }
    pthread_mutex_lock(&uct_udz_regions_lock);
    if (uct_udz_free_head != UINT32_MAX) {
        id = uct_udz_free_head;
        uct_udz_free_head = uct_udz_regions[id].next_free;
    } else {
        uint32_t n = uct_udz_nregions ? uct_udz_nregions * 2 : 64;
        uct_udz_region_t *t = ucs_realloc(uct_udz_regions, n * sizeof(*t), "udz_regions");
        uint32_t i;
        if (t == NULL) {
            pthread_mutex_unlock(&uct_udz_regions_lock);
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
    r->key     = key;
    r->access  = flags & (UCT_MD_MEM_ACCESS_REMOTE_PUT | UCT_MD_MEM_ACCESS_REMOTE_GET);
    r->holds   = NULL;
    *memh_p    = (uct_mem_h)(uintptr_t)(id + 1);
    pthread_mutex_unlock(&uct_udz_regions_lock);
    return UCS_OK;
}

/* Unlinks hold from its region's list (the lock held). */
static void uct_udz_hold_unlink(udz_mem_hold_t *hold)
{
    if (hold->prev != NULL) {
        hold->prev->next = hold->next;
    } else {
        uct_udz_regions[hold->region - 1].holds = hold->next;
    }
    if (hold->next != NULL) {
        hold->next->prev = hold->prev;
    }
    hold->next   = NULL;
    hold->prev   = NULL;
    hold->region = 0;
}

static ucs_status_t uct_udz_mem_dereg(uct_md_h md, uct_mem_h memh)
{
    uint32_t id = (uint32_t)((uintptr_t)memh - 1);
    udz_mem_hold_t *hold;

    pthread_mutex_lock(&uct_udz_regions_lock);
    if ((id >= uct_udz_nregions) || (uct_udz_regions[id].key == 0)) {
        pthread_mutex_unlock(&uct_udz_regions_lock);
        return UCS_ERR_INVALID_PARAM;
    }
    /* a put or a get that comes now is refused by the key; one being served (a get's
     * transfer) is revoked, and waited for if the wire is reading the region right now (its
     * core may run on another thread, e.g. the async timer's: udz_mem_hold_t). The core never
     * takes this lock while busy, so the wait cannot deadlock; it lasts one send call. The
     * transfer's memory stays valid meanwhile: the core frees it only after mem_unhold, which
     * takes this lock. */
    while ((hold = uct_udz_regions[id].holds) != NULL) {
        __atomic_store_n(&hold->revoked, 1, __ATOMIC_SEQ_CST);
        while (__atomic_load_n(&hold->busy, __ATOMIC_SEQ_CST)) {
            sched_yield();
        }
        uct_udz_hold_unlink(hold);
    }
    uct_udz_regions[id].key       = 0;
    uct_udz_regions[id].next_free = uct_udz_free_head;
    uct_udz_free_head = id;
    pthread_mutex_unlock(&uct_udz_regions_lock);
    return UCS_OK;
}

static void uct_udz_rkey_pack(uct_md_h md, uct_mem_h memh, void *rkey_buffer)
{
    uint32_t id = (uint32_t)((uintptr_t)memh - 1);
    uct_udz_rkey_t rkey;

    pthread_mutex_lock(&uct_udz_regions_lock);
    rkey.magic   = UCT_UDZ_RKEY_MAGIC;
    rkey.id      = id;
    rkey.key     = uct_udz_regions[id].key;
    rkey.address = uct_udz_regions[id].address;
    pthread_mutex_unlock(&uct_udz_regions_lock);
    memcpy(rkey_buffer, &rkey, sizeof(rkey));
}

void *uct_udz_md_resolve(uint64_t addr, uint64_t len, const uint8_t *rkey_bytes, int write,
                         udz_mem_hold_t *hold)
{
    unsigned need = write ? UCT_MD_MEM_ACCESS_REMOTE_PUT : UCT_MD_MEM_ACCESS_REMOTE_GET;
    uct_udz_rkey_t rkey;
    uct_udz_region_t *r;
    int ok;

    UCS_STATIC_ASSERT(sizeof(rkey) == UDZ_RKEY_LEN);
    memcpy(&rkey, rkey_bytes, sizeof(rkey));
    if (rkey.magic != UCT_UDZ_RKEY_MAGIC) {
        return NULL;
    }
    pthread_mutex_lock(&uct_udz_regions_lock);
    ok = (rkey.id < uct_udz_nregions);
    r  = ok ? &uct_udz_regions[rkey.id] : NULL;     /* a peer's index: checked first */
    ok = ok && (r->key != 0) && (r->key == rkey.key) &&
         (addr >= r->address) && (len <= r->length) && (addr - r->address <= r->length - len);
    if (ok && !(r->access & need)) {
        /* the right key, an access the registration does not grant */
        ok = 0;
        if (write) {
            UCT_UDZ_COUNT_OWN(put_denied, 1);
        } else {
            UCT_UDZ_COUNT_OWN(get_denied, 1);
        }
    }
    if (ok && (hold != NULL)) {
        /* the transfer is on the region's list until unhold or a deregistration */
        hold->revoked = 0;
        hold->busy    = 0;
        hold->region  = (uint64_t)rkey.id + 1;
        hold->prev    = NULL;
        hold->next    = r->holds;
        if (r->holds != NULL) {
            r->holds->prev = hold;
        }
        r->holds = hold;
    }
    pthread_mutex_unlock(&uct_udz_regions_lock);
    return ok ? (void*)(uintptr_t)addr : NULL;
}

void uct_udz_md_unhold(udz_mem_hold_t *hold)
{
    pthread_mutex_lock(&uct_udz_regions_lock);
    if (hold->region != 0) {
        uct_udz_hold_unlink(hold);  /* else a deregistration unlinked it already */
    }
    pthread_mutex_unlock(&uct_udz_regions_lock);
}

static int uct_udz_rkey_valid(const void *buffer)
{
    return ((const uct_udz_rkey_t*)buffer)->magic == UCT_UDZ_RKEY_MAGIC;
}

ucx_ext_component_t uct_udz_component = {
    UCX_EXT_COMPONENT(uct_udz_component, "ud_zcopy", UCT_UDZ_PREFIX, ucx_ext_md_open_static,
                      uct_udz_md_config_table, sizeof(uct_md_config_t)),
    .rkey_size  = sizeof(uct_udz_rkey_t),
    .reg_cost   = 50e-9,
    .rkey_pack  = uct_udz_rkey_pack,
    .rkey_valid = uct_udz_rkey_valid,
    .mem_reg    = uct_udz_mem_reg,
    .mem_dereg  = uct_udz_mem_dereg,
};
