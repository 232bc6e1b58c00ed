/*
 * ud_zcopy module: registers the component and transport with the UCX that loaded us, if that
 * UCX has the internal layout we were compiled against, and writes the counters at exit.
 * (Same scheme as uct/rdmach/rdmach_module.c: UCX 1.13.1 loads only modules compiled into its
 * list, so this library is preloaded; UCT_SINGLE_TL_INIT's destructor always unregisters.)
 */
#include "udz_uct.h"
#include "ucx_ext_counters.h"

#include <uct/api/version.h>
#include <dlfcn.h>
#include <stdio.h>

extern uct_tl_t UCT_TL_NAME(ud_zcopy);

uct_udz_counters_t uct_udz_counters;

static int uct_udz_registered;

/* Test hook: a build with a non-zero skew sees every UCX as a foreign layout (tests/config). */
#ifndef UCT_UDZ_ABI_SKEW
#  define UCT_UDZ_ABI_SKEW 0
#endif

static void uct_udz_ucx_version(unsigned *major, unsigned *minor, unsigned *release)
{
    void (*get_version)(unsigned*, unsigned*, unsigned*);

    *major   = UCT_VERNO_MAJOR;
    *minor   = UCT_VERNO_MINOR;
    *release = UCT_VERNO_PATCH;
    *(void**)&get_version = dlsym(RTLD_DEFAULT, "ucp_get_version");
    if (get_version != NULL) {
        get_version(major, minor, release);
    }
}

static const char *uct_udz_abi_mismatch(void)
{
    unsigned major, minor, release;

    uct_udz_ucx_version(&major, &minor, &release);
    if ((major != UCT_VERNO_MAJOR) || (minor != UCT_VERNO_MINOR) ||
        (release != UCT_VERNO_PATCH)) {
        return "version";
    }
    if ((uct_base_iface_t_class.size != sizeof(uct_base_iface_t) + UCT_UDZ_ABI_SKEW) ||
        (uct_base_ep_t_class.size != sizeof(uct_base_ep_t))) {
        return "UCT internal object layout";
    }
    return NULL;
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
    unsigned major, minor, release;
    const char *what = uct_udz_abi_mismatch();

    if (what != NULL) {
        uct_udz_ucx_version(&major, &minor, &release);
        fprintf(stderr, "[ud_zcopy] WARNING: not registering the ud_zcopy transport: it was "
                "built for UCX %d.%d.%d and the loaded UCX %u.%u.%u differs in its %s\n",
                UCT_VERNO_MAJOR, UCT_VERNO_MINOR, UCT_VERNO_PATCH, major, minor, release,
                what);
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
