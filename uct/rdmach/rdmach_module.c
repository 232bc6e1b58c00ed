/* rdmach module: registration, ABI guard and counters file (uct/common/ucx_ext_module.h). */
#include "rdmach_uct.h"
#include "ucx_ext_module.h"

uct_rdmach_counters_t uct_rdmach_counters;

static const char *const uct_rdmach_counter_names[] = {
    UCT_RDMACH_COUNTERS(UCX_EXT_COUNTER_NAME)
};

UCX_EXT_MODULE_DEFINE(rdmach, uct_rdmach_component.super, uct_rdmach_counters,
                      uct_rdmach_counter_names,
                      {uct_sm_iface_t_class.size, sizeof(uct_sm_iface_t)})
