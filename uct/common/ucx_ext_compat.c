/* The shims between UCX 1.13.1 and 1.22.0 (see ucx_ext_compat.h). */
#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "ucx_ext_compat.h"

#include <ucs/sys/compiler_def.h>
#include <ucs/type/status.h>
#include <string.h>

void ucx_ext_md_ops_version_init(uct_md_ops_t *ops)
{
#if UCX_EXT_UCX_1_22
    ops->mem_attach    = (uct_md_mem_attach_func_t)ucs_empty_function_return_unsupported;
    ops->mem_elem_pack = (uct_md_mem_elem_pack_func_t)ucs_empty_function_return_unsupported;
#else
    ops->is_sockaddr_accessible = (uct_md_is_sockaddr_accessible_func_t)
                                  ucs_empty_function_return_zero_int;
#endif
}

void ucx_ext_rcache_set_alignment(ucs_rcache_params_t *params, size_t alignment)
{
#if UCX_EXT_UCX_1_22
    (void)params;
    (void)alignment;   /* per lookup (ucx_ext_rcache_get) */
#else
    params->alignment     = UCS_RCACHE_MIN_ALIGNMENT;
    params->max_alignment = alignment;
#endif
}

void ucx_ext_rcache_params(ucs_rcache_params_t *params, const ucx_ext_rcache_config_t *config,
                           size_t alignment)
{
#if UCX_EXT_UCX_1_22
    ucs_rcache_set_params(params, config);
#else
    uct_md_set_rcache_params(params, config);
#endif
    ucx_ext_rcache_set_alignment(params, alignment);
}

double ucx_ext_rcache_overhead(const ucx_ext_rcache_config_t *config)
{
#if UCX_EXT_UCX_1_22
    return ucs_time_to_sec(config->overhead);
#else
    return uct_md_rcache_overhead(config);
#endif
}

ucs_status_t ucx_ext_rcache_get(ucs_rcache_t *rcache, void *address, size_t length,
                                size_t alignment, int prot, void *arg,
                                ucs_rcache_region_t **region_p)
{
#if UCX_EXT_UCX_1_22
    return ucs_rcache_get(rcache, address, length, alignment, prot, arg, region_p);
#else
    (void)alignment;   /* the cache's max_alignment (ucx_ext_rcache_params) */
    return ucs_rcache_get(rcache, address, length, prot, arg, region_p);
#endif
}

#if UCX_EXT_UCX_1_22
void ucx_ext_rcache_merge(void *context, ucs_rcache_t *rcache, void *arg,
                          ucs_rcache_region_t *region)
{
    /* our region record is filled by mem_reg for the merged region: nothing to carry */
}

static int ucx_ext_oneshot_any(const ucs_callbackq_elem_t *elem, void *arg)
{
    return 1;
}
#endif

void ucx_ext_oneshot_add(ucs_callbackq_t *cbq, void *key, ucs_callback_t cb, void *arg,
                         int *id_p)
{
#if UCX_EXT_UCX_1_22
    ucs_callbackq_add_oneshot(cbq, key, cb, arg);
    *id_p = 0;   /* armed: removed by key */
#else
    *id_p = ucs_callbackq_add_safe(cbq, cb, arg, UCS_CALLBACKQ_FLAG_ONESHOT);
#endif
}

void ucx_ext_oneshot_remove(ucs_callbackq_t *cbq, void *key, int *id_p)
{
    if (*id_p == UCS_CALLBACKQ_ID_NULL) {
        return;
    }
#if UCX_EXT_UCX_1_22
    ucs_callbackq_remove_oneshot(cbq, key, ucx_ext_oneshot_any, NULL);
#else
    ucs_callbackq_remove_safe(cbq, *id_p);
#endif
    *id_p = UCS_CALLBACKQ_ID_NULL;
}

int ucx_ext_local_is_reachable(const uct_device_addr_t *dev_addr, ucs_sys_namespace_type_t ns)
{
#if UCX_EXT_UCX_1_22
    uct_iface_is_reachable_params_t params = {
        .field_mask  = UCT_IFACE_IS_REACHABLE_FIELD_DEVICE_ADDR,
        .device_addr = dev_addr
    };

    return uct_iface_local_is_reachable((uct_iface_local_addr_ns_t*)dev_addr, ns, &params);
#else
    return uct_iface_local_is_reachable((uct_iface_local_addr_ns_t*)dev_addr, ns);
#endif
}

ucs_status_t ucx_ext_config_fill(void *opts, ucs_config_global_list_entry_t *entry,
                                 const char *env_prefix, int ignore_errors)
{
#if UCX_EXT_UCX_1_22
    return ucs_config_parser_fill_opts(opts, entry, env_prefix, ignore_errors);
#else
    return ucs_config_parser_fill_opts(opts, entry->table, env_prefix, entry->prefix,
                                       ignore_errors);
#endif
}

ucs_status_t ucx_ext_mpool_init(ucs_mpool_t *mp, size_t elem_size, size_t alignment,
                                unsigned elems_per_chunk, ucs_mpool_ops_t *ops,
                                const char *name)
{
#if UCX_EXT_UCX_1_22
    ucs_mpool_params_t params;

    ucs_mpool_params_reset(&params);
    params.elem_size       = elem_size;
    params.alignment       = alignment;
    params.elems_per_chunk = elems_per_chunk;
    params.ops             = ops;
    params.name            = name;
    return ucs_mpool_init(&params, mp);
#else
    return ucs_mpool_init(mp, 0, elem_size, 0, alignment, elems_per_chunk, UINT_MAX, ops,
                          name);
#endif
}

static const ucx_ext_iface_hooks_t *ucx_ext_hooks(uct_iface_h iface)
{
    return ucs_container_of(ucs_derived_of(iface, uct_base_iface_t)->internal_ops,
                            ucx_ext_internal_ops_t, super)->hooks;
}

ucs_status_t ucx_ext_iface_estimate_perf(uct_iface_h iface, uct_perf_attr_t *perf_attr)
{
    const ucx_ext_iface_hooks_t *hooks = ucx_ext_hooks(iface);

    return (hooks->estimate_perf != NULL) ? hooks->estimate_perf(iface, perf_attr) :
                                            uct_base_iface_estimate_perf(iface, perf_attr);
}

void ucx_ext_iface_eager_floor(uct_iface_attr_t *attr, size_t eager_max)
{
#if UCX_EXT_UCX_1_22
    if (eager_max > 0) {
        attr->cap.get.min_zcopy = ucs_max(attr->cap.get.min_zcopy, eager_max + 1);
        attr->cap.put.min_zcopy = ucs_max(attr->cap.put.min_zcopy, eager_max + 1);
    }
#else
    (void)attr;
    (void)eager_max;
#endif
}

void ucx_ext_perf_set_bandwidth(uct_perf_attr_t *perf_attr, const uct_ppn_bandwidth_t *bw)
{
    if (perf_attr->field_mask & UCT_PERF_ATTR_FIELD_BANDWIDTH) {
        perf_attr->bandwidth = *bw;
    }
#if UCX_EXT_UCX_1_22
    if (perf_attr->field_mask & UCT_PERF_ATTR_FIELD_PATH_BANDWIDTH) {
        perf_attr->path_bandwidth = *bw;
    }
#endif
}

#if UCX_EXT_UCX_1_22
int ucx_ext_iface_is_reachable_v2(const uct_iface_h iface,
                                  const uct_iface_is_reachable_params_t *params)
{
    const uct_iface_addr_t *iface_addr =
            (params->field_mask & UCT_IFACE_IS_REACHABLE_FIELD_IFACE_ADDR) ?
            params->iface_addr : NULL;

    if (!(params->field_mask & UCT_IFACE_IS_REACHABLE_FIELD_DEVICE_ADDR) ||
        !ucx_ext_hooks(iface)->is_reachable(iface, params->device_addr, iface_addr)) {
        uct_iface_fill_info_str_buf(params, "unreachable");
        return 0;
    }
    return uct_iface_scope_is_reachable(iface, params);
}

int ucx_ext_ep_is_connected_v2(uct_ep_h ep, const uct_ep_is_connected_params_t *params)
{
    const ucx_ext_iface_hooks_t *hooks = ucx_ext_hooks(ep->iface);

    if (hooks->ep_is_connected == NULL) {
        return uct_base_ep_is_connected(ep, params);
    }
    return hooks->ep_is_connected(
            ep,
            (params->field_mask & UCT_EP_IS_CONNECTED_FIELD_DEVICE_ADDR) ?
            params->device_addr : NULL,
            (params->field_mask & UCT_EP_IS_CONNECTED_FIELD_IFACE_ADDR) ?
            params->iface_addr : NULL,
            (params->field_mask & UCT_EP_IS_CONNECTED_FIELD_EP_ADDR) ?
            params->ep_addr : NULL);
}

ucs_status_t ucx_ext_ep_connect_to_ep_v2(uct_ep_h ep, const uct_device_addr_t *dev_addr,
                                         const uct_ep_addr_t *ep_addr,
                                         const uct_ep_connect_to_ep_params_t *params)
{
    const ucx_ext_iface_hooks_t *hooks = ucx_ext_hooks(ep->iface);

    return (hooks->ep_connect_to_ep != NULL) ? hooks->ep_connect_to_ep(ep, dev_addr, ep_addr) :
                                               UCS_ERR_UNSUPPORTED;
}
#endif
