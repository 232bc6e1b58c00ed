/*
 * rdmach's InfiniBand RC verbs wire, as the glue sees it: its table (rdmach_wire.h) and its
 * own knobs. The glue reads them from UCX's configuration (rdmach_rc_config.c: UCX_RDMACH_RC_*,
 * UCX_RDMACH_XRC) and hands them to the wire's open as params.config; the other wires never
 * see them.
 */
#ifndef RDMACH_RC_H
#define RDMACH_RC_H

#ifdef __cplusplus
extern "C" {
#endif

/* xrc: plain RC; XRC or fail the iface open; XRC where the device has it, else RC after one
 * info line. */
enum { RDMACH_RC_XRC_NO = 0, RDMACH_RC_XRC_YES = 1, RDMACH_RC_XRC_AUTO = 2 };

typedef struct rdmach_rc_config {
    double   timeout;      /* s: the QPs' local ACK timeout; with retry_count it bounds how soon
                            * a dead peer fails its connection */
    unsigned retry_count;  /* 0-7 */
    int      srq;          /* records into our rings as WRITEs with immediate, counted in by a
                            * shared receive queue's completions, where the device has one */
    int      xrc;          /* RDMACH_RC_XRC_*: QPs per remote host (MVAPICH with XRC),
                            * rdmach_xrc.h */
} rdmach_rc_config_t;

/* params.config NULL (a test's own wire): UCX's defaults for the knobs above */
#define RDMACH_RC_CONFIG_DEFAULT {0.268, 6, 1, RDMACH_RC_XRC_NO}

#ifdef __cplusplus
}
#endif

#endif
