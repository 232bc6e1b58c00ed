/* ud_zcopy module: registration, ABI guard and counters file (uct/common/ucx_ext_module.h).
 * The module file has no '_' in the transport part (UCX >= 1.21 plugin naming). */
#include "udz_uct.h"
#include "ucx_ext_module.h"

UCX_EXT_MODULE_DEFINE(ud_zcopy, uct_udz_component.super, uct_udz_counters, UCT_UDZ_COUNTERS)
