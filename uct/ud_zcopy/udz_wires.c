/*
 * The wires ud_zcopy is built with (udz_wire.h). A new wire is a file that defines its table,
 * declared and listed here (and built: meson.build); the glue lists every wire's devices and
 * opens a device on the first wire that lists it.
 */
#include "udz_wire.h"

#include <string.h>

extern const udz_wire_ops_t udz_udp_wire;
#ifdef UDZ_HAVE_IBUD
extern const udz_wire_ops_t udz_ibud_wire;
#endif

const udz_wire_ops_t *const udz_wires[] = {
    &udz_udp_wire,
#ifdef UDZ_HAVE_IBUD
    &udz_ibud_wire,     /* InfiniBand UD (udz_ibud.c): "mlx5_0:1", "rxe0:1" */
#endif
    NULL
};

static int udz_wire_dev_is(void *arg, const char *dev)
{
    return strcmp(dev, arg) == 0;
}

const udz_wire_ops_t *udz_wire_find(const char *dev)
{
    const udz_wire_ops_t *const *w;

    for (w = udz_wires; *w != NULL; ++w) {
        if ((*w)->query_devices(udz_wire_dev_is, (void*)dev) == 1) {
            return *w;
        }
    }
    return NULL;
}
