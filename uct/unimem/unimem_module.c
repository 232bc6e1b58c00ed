/*
 * unimem module (rdmach_module.c's scheme): registers the component and transport with the
 * UCX that loaded us, if that UCX has the internal layout we were compiled against, and writes
 * the counters at exit.
 *
 * UCX 1.13.1 loads only modules compiled into its list, so this library is preloaded and its
 * constructor registers. UCT_SINGLE_TL_INIT is not used: its destructor always unregisters,
 * and here registration may have been skipped.
 */
#include "unimem_uct.h"
#include "ucx_ext_counters.h"
#include "ucx_ext_module.h"


extern uct_tl_t UCT_TL_NAME(unimem);

uct_unimem_counters_t uct_unimem_counters;

static int uct_unimem_registered;

/* Test hook: a build with a non-zero skew sees every UCX as a foreign layout (tests/config). */
#ifndef UCT_UNIMEM_ABI_SKEW
#  define UCT_UNIMEM_ABI_SKEW 0
#endif

/* UCT's internal ABI is unversioned: the runtime version and the class sizes we use. */
static const char *uct_unimem_abi_mismatch(void)
{
    const ucx_ext_class_size_t classes[] = {
        {uct_base_iface_t_class.size, sizeof(uct_base_iface_t) + UCT_UNIMEM_ABI_SKEW},
        {uct_base_ep_t_class.size, sizeof(uct_base_ep_t)},
        {uct_sm_iface_t_class.size, sizeof(uct_sm_iface_t)},
    };

    return ucx_ext_abi_mismatch(classes, sizeof(classes) / sizeof(classes[0]));
}

static const char *const uct_unimem_counter_names[] = {
    "mbox_rx_msgs", "rx_am", "rx_bytes", "rx_corrupt",
#define UCT_UNIMEM_COUNTER_NAME(_n) #_n,
    UCT_UNIMEM_TX_COUNTERS(UCT_UNIMEM_COUNTER_NAME)
};

/* Live counters for in-process tests (tests/ucp/ucp_unimem.c finds it with dlsym): returns
 * the number of counters and points at their names and values. */
__attribute__((visibility("default"))) unsigned
uct_unimem_counters_get(const char *const **names_p, const uint64_t **values_p)
{
    *names_p  = uct_unimem_counter_names;
    *values_p = (const uint64_t*)&uct_unimem_counters;
    return sizeof(uct_unimem_counter_names) / sizeof(uct_unimem_counter_names[0]);
}

static void uct_unimem_dump_counters(void)
{
    const char *const *names = uct_unimem_counter_names;
    ucx_ext_counters_t c = {
        .tl     = UCT_UNIMEM_NAME,
        .count  = sizeof(uct_unimem_counter_names) / sizeof(uct_unimem_counter_names[0]),
        .names  = names,
        .values = (uint64_t*)&uct_unimem_counters
    };

    UCS_STATIC_ASSERT(sizeof(uct_unimem_counter_names) / sizeof(uct_unimem_counter_names[0]) *
                      sizeof(uint64_t) == sizeof(uct_unimem_counters_t));
    ucx_ext_counters_dump(&c);
}

UCS_F_CTOR static void uct_unimem_init(void)
{
    const char *what = uct_unimem_abi_mismatch();

    if (what != NULL) {
        ucx_ext_abi_warn(UCT_UNIMEM_NAME, what);
        return;
    }
    ucx_ext_counters_config_init();
    uct_component_register(&uct_unimem_component);
    uct_tl_register(&uct_unimem_component, &UCT_TL_NAME(unimem));
    uct_unimem_registered = 1;
}

UCS_F_DTOR static void uct_unimem_cleanup(void)
{
    uct_unimem_dump_counters();
    if (uct_unimem_registered) {
        uct_tl_unregister(&UCT_TL_NAME(unimem));
        uct_component_unregister(&uct_unimem_component);
    }
}
