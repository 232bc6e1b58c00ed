/* unimem module: registration, ABI guard and counters file (uct/common/ucx_ext_module.h). */
#include "unimem_uct.h"
#include "ucx_ext_module.h"

uct_unimem_counters_t uct_unimem_counters;

static const char *const uct_unimem_counter_names[] = {
    UCT_UNIMEM_COUNTERS(UCX_EXT_COUNTER_NAME)
};

UCX_EXT_MODULE_DEFINE(unimem, uct_unimem_component.super, uct_unimem_counters,
                      uct_unimem_counter_names,
                      {uct_sm_iface_t_class.size, sizeof(uct_sm_iface_t)})
