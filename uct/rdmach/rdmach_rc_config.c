/*
 * The InfiniBand RC verbs wire's own knobs, a sub-table of rdmach's iface configuration
 * (UCX_RDMACH_RC_*, UCX_RDMACH_XRC): their table, their ranges, and the wire's config
 * (rdmach_rc.h) made from them. The other wires never see them (rdmach_wire_knobs.c).
 */
#include "rdmach_rc.h"
#include "rdmach_uct.h"

ucs_config_field_t uct_rdmach_rc_config_table[] = {
    {"RC_TIMEOUT", "268ms",
     "On a verbs port: how long an RC QP waits for an acknowledgement before it resends\n"
     "(rounded up to the 4.096 us << n steps of InfiniBand's local ACK timeout). Together\n"
     "with RC_RETRY_COUNT it bounds how soon a dead peer fails its endpoint.",
     ucs_offsetof(uct_rdmach_rc_iface_config_t, timeout), UCS_CONFIG_TYPE_TIME},

    {"RC_RETRY_COUNT", "6",
     "On a verbs port: resends of an unacknowledged RC packet before the QP fails and its\n"
     "endpoint with it (0-7). rdma_rxe (Soft-RoCE) reads 7 as \"resend forever\": then a\n"
     "dead peer is never detected, but a lossy Ethernet cannot exhaust the budget (UCX's\n"
     "rc_verbs does the same by default).",
     ucs_offsetof(uct_rdmach_rc_iface_config_t, retry_count), UCS_CONFIG_TYPE_UINT},

    {"RC_SRQ", "y",
     "On a verbs port with shared receive queues: a record is one RDMA WRITE with immediate,\n"
     "read once its receive completion arrives (which also rings the ring's doorbell). n:\n"
     "as on a device without SRQ, two WRITEs (fields and payload, then the mark) and a\n"
     "doorbell WRITE when the receiver asks for it. Senders follow each receiver's choice.",
     ucs_offsetof(uct_rdmach_rc_iface_config_t, srq), UCS_CONFIG_TYPE_BOOL},

    {"XRC", "n",
     "On a verbs port: XRC connections (MVAPICH with XRC): one QP per remote host reaches\n"
     "every process there through its XRC SRQ, instead of one RC QP per remote process;\n"
     "the rings are unchanged. y: required (the iface open fails, naming the device and the\n"
     "reason, where the device has no XRC, e.g. Soft-RoCE); auto: XRC where the device has\n"
     "it, else RC after one info line; n: RC. Every process of a job must use the same mode.\n"
     "The default stays n until the XRC path has run on an XRC-capable HCA (mlx4, mlx5):\n"
     "the project's tests run on Soft-RoCE, which has none.",
     ucs_offsetof(uct_rdmach_rc_iface_config_t, xrc), UCS_CONFIG_TYPE_TERNARY_AUTO},

    {NULL}
};

static const ucx_ext_knob_t uct_rdmach_rc_knob_ranges[] = {
    UCX_EXT_KNOB(uct_rdmach_rc_iface_config_t, "RC_TIMEOUT", timeout, DOUBLE, 8e-6, 8000.0),
    UCX_EXT_KNOB(uct_rdmach_rc_iface_config_t, "RC_RETRY_COUNT", retry_count, UINT, 0, 7),
};

static ucs_status_t uct_rdmach_rc_knobs_check(const uct_rdmach_iface_config_t *config)
{
    return ucx_ext_config_check(UCT_RDMACH_NAME, UCT_RDMACH_PREFIX, &config->rc,
                                uct_rdmach_rc_knob_ranges,
                                ucs_static_array_size(uct_rdmach_rc_knob_ranges));
}

static void uct_rdmach_rc_knobs_get(const uct_rdmach_iface_config_t *config, void *buf)
{
    rdmach_rc_config_t *rc = buf;

    rc->timeout     = config->rc.timeout;
    rc->retry_count = config->rc.retry_count;
    rc->srq         = config->rc.srq;
    rc->xrc         = (config->rc.xrc == UCS_YES) ? RDMACH_RC_XRC_YES :
                      (config->rc.xrc == UCS_NO)  ? RDMACH_RC_XRC_NO : RDMACH_RC_XRC_AUTO;
}

const uct_rdmach_wire_knobs_t uct_rdmach_rc_knobs = {
    .wire  = &rdmach_wire_rc_ops,
    .check = uct_rdmach_rc_knobs_check,
    .get   = uct_rdmach_rc_knobs_get
};

_Static_assert(sizeof(rdmach_rc_config_t) <= UCT_RDMACH_WIRE_CONFIG_MAX,
               "the glue's buffer for a wire config (rdmach_iface.c) holds the RC wire's");
