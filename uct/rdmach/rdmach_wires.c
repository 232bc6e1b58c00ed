/*
 * The wires rdmach is built with (rdmach_wire.h). A new wire is a file that defines its table,
 * declared in rdmach_wire.h and listed here (and built: meson.build's rdmach_core); the glue
 * lists every wire's devices and opens a device on the first wire that lists it.
 */
#include "rdmach_wire.h"

#include <string.h>

const rdmach_wire_ops_t *const rdmach_wires[] = {
    &rdmach_wire_shm_ops,
#ifdef RDMACH_HAVE_VERBS
    &rdmach_wire_rc_ops,
#endif
    NULL
};

const rdmach_wire_ops_t *rdmach_wire_find(const char *dev_name)
{
    rdmach_wire_dev_t devs[RDMACH_WIRE_MAX_DEVS];
    const rdmach_wire_ops_t *const *w;
    unsigned d, n;

    for (w = rdmach_wires; *w != NULL; ++w) {
        if ((*w)->query_domains != NULL) {
            continue;   /* its devices belong to its domains */
        }
        n = (*w)->query_devices(NULL, devs, RDMACH_WIRE_MAX_DEVS);
        for (d = 0; d < n; ++d) {
            if (strcmp(devs[d].name, dev_name) == 0) {
                return *w;
            }
        }
    }
    return NULL;
}
