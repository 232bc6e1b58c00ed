/* rdmach module: registration, ABI guard and counters file (uct/common/ucx_ext_module.h). */
#include "rdmach_uct.h"
#include "ucx_ext_module.h"

UCX_EXT_MODULE_DEFINE(rdmach, uct_rdmach_component.super, uct_rdmach_counters,
                      UCT_RDMACH_COUNTERS, {uct_sm_iface_t_class.size, sizeof(uct_sm_iface_t), UCX_EXT_LAYOUT})
