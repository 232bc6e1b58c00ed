#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "ucx_ext_module.h"

#include <uct/api/version.h>
#include <dlfcn.h>
#include <stdio.h>

/* The loaded UCX's version, through UCP when the process has it (libuct has no such call). */
static void ucx_ext_ucx_version(unsigned *major, unsigned *minor, unsigned *release)
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

const char *ucx_ext_abi_mismatch(const ucx_ext_class_size_t *classes, unsigned count)
{
    unsigned major, minor, release, i;

    ucx_ext_ucx_version(&major, &minor, &release);
    if ((major != UCT_VERNO_MAJOR) || (minor != UCT_VERNO_MINOR) ||
        (release != UCT_VERNO_PATCH)) {
        return "version";
    }
    for (i = 0; i < count; ++i) {
        if (classes[i].loaded != classes[i].built) {
            return "UCT internal object layout";
        }
    }
    return NULL;
}

static void ucx_ext_abi_warn(const char *tl, const char *what)
{
    unsigned major, minor, release;

    ucx_ext_ucx_version(&major, &minor, &release);
    fprintf(stderr, "[%s] WARNING: not registering the %s transport: it was built for UCX "
            "%d.%d.%d and the loaded UCX %u.%u.%u differs in its %s\n", tl, tl,
            UCT_VERNO_MAJOR, UCT_VERNO_MINOR, UCT_VERNO_PATCH, major, minor, release, what);
}

void ucx_ext_module_load(ucx_ext_module_t *m, const ucx_ext_class_size_t *classes,
                         unsigned count)
{
    const char *what = ucx_ext_abi_mismatch(classes, count);

    if (what != NULL) {
        ucx_ext_abi_warn(m->counters.tl, what);
        return;
    }
    ucx_ext_counters_config_init();
    uct_component_register(m->component);
    uct_tl_register(m->component, m->tl);
    m->registered = 1;
}

void ucx_ext_module_unload(ucx_ext_module_t *m)
{
    ucx_ext_counters_dump(&m->counters);
    if (m->registered) {
        uct_tl_unregister(m->tl);
        uct_component_unregister(m->component);
        m->registered = 0;
    }
}
