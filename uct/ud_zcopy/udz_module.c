/*
 * ud_zcopy module: registers the component and transport with the UCX that loaded us, if that
 * UCX has the internal layout we were compiled against, and writes the counters at exit.
 * (Same scheme as uct/rdmach/rdmach_module.c: UCX 1.13.1 loads only modules compiled into its
 * list, so this library is preloaded; UCT_SINGLE_TL_INIT's destructor always unregisters.)
 */
#include "udz_uct.h"
#include "ucx_ext_counters.h"
#include "ucx_ext_module.h"


extern uct_tl_t UCT_TL_NAME(ud_zcopy);

uct_udz_counters_t uct_udz_counters;

static int uct_udz_registered;

/* Test hook: a build with a non-zero skew sees every UCX as a foreign layout (tests/config). */
#ifndef UCT_UDZ_ABI_SKEW
#  define UCT_UDZ_ABI_SKEW 0
#endif

/* UCT's internal ABI is unversioned: the runtime version and the class sizes we use. */
static const char *uct_udz_abi_mismatch(void)
{
    const ucx_ext_class_size_t classes[] = {
        {uct_base_iface_t_class.size, sizeof(uct_base_iface_t) + UCT_UDZ_ABI_SKEW},
        {uct_base_ep_t_class.size, sizeof(uct_base_ep_t)},
    };

    return ucx_ext_abi_mismatch(classes, sizeof(classes) / sizeof(classes[0]));
}

static void uct_udz_dump_counters(void)
{
    static const char *const names[] = {
#define UCT_UDZ_COUNTER_NAME(_n) #_n,
        UDZ_CORE_COUNTERS(UCT_UDZ_COUNTER_NAME)
        UCT_UDZ_TX_COUNTERS(UCT_UDZ_COUNTER_NAME)
    };
    ucx_ext_counters_t c = {
        .tl     = UCT_UDZ_NAME,
        .count  = sizeof(names) / sizeof(names[0]),
        .names  = names,
        .values = (uint64_t*)&uct_udz_counters
    };

    UCS_STATIC_ASSERT(sizeof(names) / sizeof(names[0]) * sizeof(uint64_t) ==
                      sizeof(uct_udz_counters_t));
    ucx_ext_counters_dump(&c);
}

UCS_F_CTOR static void uct_udz_init(void)
{
    const char *what = uct_udz_abi_mismatch();

    if (what != NULL) {
        ucx_ext_abi_warn(UCT_UDZ_NAME, what);
        return;
    }
    ucx_ext_counters_config_init();
    uct_component_register(&uct_udz_component);
    uct_tl_register(&uct_udz_component, &UCT_TL_NAME(ud_zcopy));
    uct_udz_registered = 1;
}

UCS_F_DTOR static void uct_udz_cleanup(void)
{
    uct_udz_dump_counters();
    if (uct_udz_registered) {
        uct_tl_unregister(&UCT_TL_NAME(ud_zcopy));
        uct_component_unregister(&uct_udz_component);
    }
}
