/*
 * rdmach module: registers the component and transport with the UCX that loaded us, if that
 * UCX has the internal layout we were compiled against, and writes the counters at exit.
 *
 * UCX 1.13.1 loads only modules compiled into its list, so this library is preloaded and its
 * constructor registers. UCT_SINGLE_TL_INIT is not used: its destructor always unregisters,
 * and here registration may have been skipped.
 */
#include "rdmach_uct.h"
#include "ucx_ext_counters.h"
#include "ucx_ext_module.h"


extern uct_tl_t UCT_TL_NAME(rdmach);

uct_rdmach_counters_t uct_rdmach_counters;

static int uct_rdmach_registered;

/* Test hook: a build with a non-zero skew sees every UCX as a foreign layout (tests/config). */
#ifndef UCT_RDMACH_ABI_SKEW
#  define UCT_RDMACH_ABI_SKEW 0
#endif

/* UCT's internal ABI is unversioned: the runtime version and the class sizes we use. */
static const char *uct_rdmach_abi_mismatch(void)
{
    const ucx_ext_class_size_t classes[] = {
        {uct_base_iface_t_class.size, sizeof(uct_base_iface_t) + UCT_RDMACH_ABI_SKEW},
        {uct_base_ep_t_class.size, sizeof(uct_base_ep_t)},
        {uct_sm_iface_t_class.size, sizeof(uct_sm_iface_t)},
    };

    return ucx_ext_abi_mismatch(classes, sizeof(classes) / sizeof(classes[0]));
}

static void uct_rdmach_dump_counters(void)
{
    static const char *const names[] = {
        "rx_am", "rx_bytes", "rx_corrupt", "tail_updates", "doorbells",
#define UCT_RDMACH_COUNTER_NAME(_n) #_n,
        UCT_RDMACH_TX_COUNTERS(UCT_RDMACH_COUNTER_NAME)
    };
    ucx_ext_counters_t c = {
        .tl     = UCT_RDMACH_NAME,
        .count  = sizeof(names) / sizeof(names[0]),
        .names  = names,
        .values = (uint64_t*)&uct_rdmach_counters
    };

    UCS_STATIC_ASSERT(sizeof(names) / sizeof(names[0]) * sizeof(uint64_t) ==
                      sizeof(uct_rdmach_counters_t));
    ucx_ext_counters_dump(&c);
}

UCS_F_CTOR static void uct_rdmach_init(void)
{
    const char *what = uct_rdmach_abi_mismatch();

    if (what != NULL) {
        ucx_ext_abi_warn(UCT_RDMACH_NAME, what);
        return;
    }
    ucx_ext_counters_config_init();
    uct_component_register(&uct_rdmach_component);
    uct_tl_register(&uct_rdmach_component, &UCT_TL_NAME(rdmach));
    uct_rdmach_registered = 1;
}

UCS_F_DTOR static void uct_rdmach_cleanup(void)
{
    uct_rdmach_dump_counters();
    if (uct_rdmach_registered) {
        uct_tl_unregister(&UCT_TL_NAME(rdmach));
        uct_component_unregister(&uct_rdmach_component);
    }
}
