/*
 * The wires that have knobs of their own (rdmach_uct.h, "the wires' own knobs"): a wire with
 * knobs adds its sub-table to the iface's configuration table and its entry here.
 */
#include "rdmach_uct.h"

static const uct_rdmach_wire_knobs_t *const uct_rdmach_wire_knobs[] = {
    &uct_rdmach_rc_knobs,
    NULL
};

ucs_status_t uct_rdmach_wire_knobs_read(const uct_rdmach_iface_config_t *config,
                                        const rdmach_wire_ops_t *wire, void *buf,
                                        const void **wire_config)
{
    const uct_rdmach_wire_knobs_t *const *k;
    ucs_status_t status;

    *wire_config = NULL;
    for (k = uct_rdmach_wire_knobs; *k != NULL; ++k) {
        status = (*k)->check(config);
        if (status != UCS_OK) {
            return status;
        }
        if ((*k)->wire == wire) {
            (*k)->get(config, buf);
            *wire_config = buf;
        }
    }
    return UCS_OK;
}
