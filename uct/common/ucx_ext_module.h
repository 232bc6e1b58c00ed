/*
 * Load-time ABI guard shared by the transport modules. UCT's internal ABI is unversioned, so a
 * module preloaded into a process checks, before it registers, that the loaded UCX is the
 * version it was built against and that UCX's internal classes have the sizes it was compiled
 * with; on a mismatch it warns and does not register (the process keeps working without it).
 */
#ifndef UCX_EXT_MODULE_H
#define UCX_EXT_MODULE_H

#include <stddef.h>

/* One internal class: its size in the loaded UCX, and sizeof() at our build. */
typedef struct ucx_ext_class_size {
    size_t loaded;
    size_t built;
} ucx_ext_class_size_t;

/* NULL when version and every class size match; otherwise what differs ("version", ...). */
const char *ucx_ext_abi_mismatch(const ucx_ext_class_size_t *classes, unsigned count);

/* The warning printed instead of registering transport tl. */
void ucx_ext_abi_warn(const char *tl, const char *what);

#endif
