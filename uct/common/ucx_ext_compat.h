/*
 * Every difference between the UCX releases this project builds for, in one place: Debian
 * bookworm's 1.13.1 and 1.22.0 (the libucx-cu12 wheel). Each build is for one of them
 * (meson -Ducx=...); the transports use the names below and never test the version
 * themselves. Each shim says what changed after 1.13 as 1.22.0 has it.
 *
 * Needs UCX's internal headers (include after config.h).
 */
#ifndef UCX_EXT_COMPAT_H
#define UCX_EXT_COMPAT_H

#include <uct/api/version.h>
#include <uct/base/uct_iface.h>
#include <uct/base/uct_md.h>
#include <ucs/datastruct/callbackq.h>
#include <ucs/datastruct/mpool.h>
#include <ucs/config/parser.h>
#include <ucs/memory/rcache.h>
#include <ucs/sys/math.h>
#include <ucs/time/time.h>

#define UCX_EXT_UCX_AT_LEAST(_major, _minor) (UCT_API >= UCT_VERSION(_major, _minor))
#define UCX_EXT_UCX_1_22 UCX_EXT_UCX_AT_LEAST(1, 22)

/* 1.22: ucs_align_up_pow2 and its kin moved from ucs/sys/math.h to their own header */
#if UCX_EXT_UCX_1_22
#  include <ucs/sys/ptr_arith.h>
#endif

#if !UCX_EXT_UCX_AT_LEAST(1, 13) || (UCT_API > UCT_VERSION(1, 22))
#  error "this project builds for UCX 1.13.1 or 1.22.0 only (UCT's internal ABI is unversioned)"
#endif

/* ---- loading ---- */

/* 1.13 loads the modules preloaded, before UCP reads its configuration (a module may still
 * set a UCX_ variable for it); 1.22 loads them as plugins from UCX_PLUGIN_PATH during
 * ucp_init, after it (scripts/env sets such variables instead). */
#define UCX_EXT_MODULE_BEFORE_CONFIG (!UCX_EXT_UCX_1_22)

/* ---- md ---- */

/* 1.22: an md's query fills uct_md_attr_v2_t, whose capabilities are its own fields (1.13:
 * uct_md_attr_t's cap.*), and must start from uct_md_base_md_query's defaults, else
 * reg_alignment (new) stays 0. */
#if UCX_EXT_UCX_1_22
typedef uct_md_attr_v2_t ucx_ext_md_attr_t;
#  define UCX_EXT_MD_CAP(_attr, _field) ((_attr)->_field)
#  define ucx_ext_md_attr_init(_attr)   uct_md_base_md_query(_attr)
#else
typedef uct_md_attr_t ucx_ext_md_attr_t;
#  define UCX_EXT_MD_CAP(_attr, _field) ((_attr)->cap._field)
#  define ucx_ext_md_attr_init(_attr)   memset((_attr), 0, sizeof(*(_attr)))
#endif

/* 1.22: mem_reg takes a params struct (1.13: flags) */
#if UCX_EXT_UCX_1_22
#  define UCX_EXT_MEM_REG_ARGS const uct_md_mem_reg_params_t *params
#  define UCX_EXT_MEM_REG_FLAGS \
       UCT_MD_MEM_REG_FIELD_VALUE(params, flags, FIELD_FLAGS, 0)
#else
#  define UCX_EXT_MEM_REG_ARGS unsigned flags
#  define UCX_EXT_MEM_REG_FLAGS flags
#endif

/* 1.22: mem_alloc names the system device to allocate near */
#if UCX_EXT_UCX_1_22
#  define UCX_EXT_MEM_ALLOC_SYS_DEV_ARG ucs_sys_device_t sys_dev,
#else
#  define UCX_EXT_MEM_ALLOC_SYS_DEV_ARG
#endif

/* 1.22: mkey_pack is also told the address and length of what it packs */
#if UCX_EXT_UCX_1_22
#  define UCX_EXT_MKEY_PACK_RANGE_ARGS void *address, size_t length,
#else
#  define UCX_EXT_MKEY_PACK_RANGE_ARGS
#endif

/* 1.22: rkey_unpack takes a params struct */
#if UCX_EXT_UCX_1_22
#  define UCX_EXT_RKEY_UNPACK_PARAMS_ARG const uct_rkey_unpack_params_t *params,
#else
#  define UCX_EXT_RKEY_UNPACK_PARAMS_ARG
#endif

/* 1.22: md ops mem_attach and mem_elem_pack (called unchecked, so never NULL), and no
 * is_sockaddr_accessible; a component's rkey_compare (called unchecked too) */
void ucx_ext_md_ops_version_init(uct_md_ops_t *ops);
#if UCX_EXT_UCX_1_22
#  define UCX_EXT_COMPONENT_VERSION_OPS .rkey_compare = uct_base_rkey_compare,
#else
#  define UCX_EXT_COMPONENT_VERSION_OPS
#endif

/* ---- registration cache: its config table and API moved to ucs in 1.22 ---- */

#if UCX_EXT_UCX_1_22
typedef ucs_rcache_config_t ucx_ext_rcache_config_t;
#  define UCX_EXT_RCACHE_CONFIG_TABLE ucs_config_rcache_table
#else
typedef uct_md_rcache_config_t ucx_ext_rcache_config_t;
#  define UCX_EXT_RCACHE_CONFIG_TABLE uct_md_config_rcache_table
#endif

/* Regions aligned up to alignment (1.22: per lookup, ucx_ext_rcache_get). */
void ucx_ext_rcache_set_alignment(ucs_rcache_params_t *params, size_t alignment);
/* The cache's parameters from UCX's RCACHE_* knobs, aligned to alignment. */
void ucx_ext_rcache_params(ucs_rcache_params_t *params, const ucx_ext_rcache_config_t *config,
                           size_t alignment);
/* Its lookup cost, in seconds (UCP's registration cost of a cached md). */
double ucx_ext_rcache_overhead(const ucx_ext_rcache_config_t *config);
/* A region of the cache (1.22: the alignment is per lookup). */
ucs_status_t ucx_ext_rcache_get(ucs_rcache_t *rcache, void *address, size_t length,
                                size_t alignment, int prot, void *arg,
                                ucs_rcache_region_t **region_p);
/* 1.22's rcache calls its ops' merge unchecked: a region that grows keeps our record. */
#if UCX_EXT_UCX_1_22
#  define UCX_EXT_RCACHE_VERSION_OPS .merge = ucx_ext_rcache_merge,
void ucx_ext_rcache_merge(void *context, ucs_rcache_t *rcache, void *arg,
                          ucs_rcache_region_t *region);
#else
#  define UCX_EXT_RCACHE_VERSION_OPS
#endif

/* ---- iface and ep ---- */

/* 1.22: a transport that reaches other hosts says so (UCP 1.22 counts every lane without it
 * as intra-node, and packs only such lanes into a network-only address); 1.13 has no flag. */
#ifdef UCT_IFACE_FLAG_INTER_NODE
#  define UCX_EXT_IFACE_FLAG_INTER_NODE UCT_IFACE_FLAG_INTER_NODE
#else
#  define UCX_EXT_IFACE_FLAG_INTER_NODE 0
#endif

/* Messages up to eager_max go eagerly whatever UCP's estimates say (0: no such floor). UCP
 * 1.13 never starts a rendezvous below am.max_bcopy (ucp_ep_config_calc_rndv_thresh); 1.22's
 * protocols v2 (its default since 1.16) choose by estimates, and a rendezvous there reads or
 * writes from get/put min_zcopy on, the only floor a transport has: 1.22 raises both above
 * eager_max, so RMA of up to eager_max bytes goes by bcopy. 1.13: nothing. */
void ucx_ext_iface_eager_floor(uct_iface_attr_t *attr, size_t eager_max);

/* A callback that runs once from the worker's progress (the failed ep's error handler). 1.22
 * has keyed oneshot callbacks (add_safe lost its flags and repeats until removed); 1.13 has
 * add_safe with UCS_CALLBACKQ_FLAG_ONESHOT. *id_p: UCS_CALLBACKQ_ID_NULL when none. */
void ucx_ext_oneshot_add(ucs_callbackq_t *cbq, void *key, ucs_callback_t cb, void *arg,
                         int *id_p);
void ucx_ext_oneshot_remove(ucs_callbackq_t *cbq, void *key, int *id_p);

/* ep_check's parameters (1.22: no completion argument) */
#if UCX_EXT_UCX_1_22
#  define UCX_EXT_EP_CHECK_PARAMS(_flags, _comp) UCT_EP_KEEPALIVE_CHECK_PARAM(_flags)
#else
#  define UCX_EXT_EP_CHECK_PARAMS(_flags, _comp) UCT_EP_KEEPALIVE_CHECK_PARAM(_flags, _comp)
#endif

/* 1 if a peer's address (from uct_iface_get_local_address) is on this host, in our
 * namespace of type ns (1.22: the check takes reachability params) */
int ucx_ext_local_is_reachable(const uct_device_addr_t *dev_addr,
                               ucs_sys_namespace_type_t ns);

/* Parses a config table under env_prefix + table_prefix (1.22: the parser takes a global
 * list entry, whose prefix is the table's) */
ucs_status_t ucx_ext_config_fill(void *opts, ucs_config_global_list_entry_t *entry,
                                 const char *env_prefix, int ignore_errors);

/* A memory pool of elem_size-byte elements, alignment-aligned (1.22: a params struct) */
ucs_status_t ucx_ext_mpool_init(ucs_mpool_t *mp, size_t elem_size, size_t alignment,
                                unsigned elems_per_chunk, ucs_mpool_ops_t *ops,
                                const char *name);

/* ---- what UCP asks a transport besides its iface ops ---- */

/* The hooks a transport gives its ifaces, the same for every UCX version; the internal ops
 * below turn them into what that UCX calls. 1.13 has four internal ops, with reachability
 * and connect-to-ep in the iface ops; 1.22 has ten, every one called unchecked, and UCP
 * there asks reachability (with a scope: SCOPE_DEVICE means "on this host"), whether an ep
 * is connected to a peer, and connect-to-ep only through them. */
typedef struct ucx_ext_iface_hooks {
    /* The peer at dev_addr (and iface_addr, NULL when only the device is asked about) is
     * reachable: the transport's iface_is_reachable. */
    int          (*is_reachable)(const uct_iface_h iface, const uct_device_addr_t *dev_addr,
                                 const uct_iface_addr_t *iface_addr);
    /* ep reaches the peer named by dev_addr and iface_addr (connect to iface) or ep_addr
     * (connect to ep; either may be NULL). NULL: UCT's base answer (reachability). */
    int          (*ep_is_connected)(uct_ep_h ep, const uct_device_addr_t *dev_addr,
                                    const uct_iface_addr_t *iface_addr,
                                    const uct_ep_addr_t *ep_addr);
    /* NULL when the transport connects to ifaces only. */
    ucs_status_t (*ep_connect_to_ep)(uct_ep_h ep, const uct_device_addr_t *dev_addr,
                                     const uct_ep_addr_t *ep_addr);
    /* Per-operation performance; NULL: UCT's base estimate from the iface attributes. */
    ucs_status_t (*estimate_perf)(uct_iface_h iface, uct_perf_attr_t *perf_attr);
} ucx_ext_iface_hooks_t;

/* A transport's internal ops: UCX's table, then its hooks (the ops find them there). */
typedef struct ucx_ext_internal_ops {
    uct_iface_internal_ops_t    super;
    const ucx_ext_iface_hooks_t *hooks;
} ucx_ext_internal_ops_t;

ucs_status_t ucx_ext_iface_estimate_perf(uct_iface_h iface, uct_perf_attr_t *perf_attr);

/* Sets an estimate's bandwidth where asked (1.22: also the path's bandwidth,
 * which UCP compares lanes by) */
void ucx_ext_perf_set_bandwidth(uct_perf_attr_t *perf_attr, const uct_ppn_bandwidth_t *bw);
#if UCX_EXT_UCX_1_22
int ucx_ext_iface_is_reachable_v2(const uct_iface_h iface,
                                  const uct_iface_is_reachable_params_t *params);
int ucx_ext_ep_is_connected_v2(uct_ep_h ep, const uct_ep_is_connected_params_t *params);
ucs_status_t ucx_ext_ep_connect_to_ep_v2(uct_ep_h ep, const uct_device_addr_t *dev_addr,
                                         const uct_ep_addr_t *ep_addr,
                                         const uct_ep_connect_to_ep_params_t *params);
#  define UCX_EXT_INTERNAL_OPS_VERSION \
       .iface_query_v2        = uct_iface_base_query_v2, \
       .ep_connect_to_ep_v2   = ucx_ext_ep_connect_to_ep_v2, \
       .iface_is_reachable_v2 = ucx_ext_iface_is_reachable_v2, \
       .ep_is_connected       = ucx_ext_ep_is_connected_v2, \
       .ep_get_device_ep      = (uct_ep_get_device_ep_func_t) \
                                ucs_empty_function_return_unsupported, \
       .ep_put_sgl_zcopy      = (uct_ep_put_sgl_zcopy_func_t) \
                                ucs_empty_function_return_unsupported,
#else
#  define UCX_EXT_INTERNAL_OPS_VERSION
#endif

/* The internal ops of a transport whose hooks are _hooks (a static, non-const object: UCT
 * takes the table by a non-const pointer). */
#define UCX_EXT_INTERNAL_OPS(_hooks) \
    { \
        .super = { \
            UCX_EXT_INTERNAL_OPS_VERSION \
            .iface_estimate_perf = ucx_ext_iface_estimate_perf, \
            .iface_vfs_refresh   = (uct_iface_vfs_refresh_func_t)ucs_empty_function, \
            .ep_query            = (uct_ep_query_func_t)ucs_empty_function_return_unsupported, \
            .ep_invalidate       = (uct_ep_invalidate_func_t) \
                                   ucs_empty_function_return_unsupported \
        }, \
        .hooks = (_hooks) \
    }

#endif
