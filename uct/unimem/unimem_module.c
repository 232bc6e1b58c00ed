/* unimem module: registration, ABI guard and counters file (uct/common/ucx_ext_module.h). */
#include "unimem_uct.h"
#include "ucx_ext_module.h"

UCX_EXT_MODULE_DEFINE(unimem, uct_unimem_component.super, uct_unimem_counters,
                      UCT_UNIMEM_COUNTERS, {uct_sm_iface_t_class.size, sizeof(uct_sm_iface_t), UCX_EXT_LAYOUT})
