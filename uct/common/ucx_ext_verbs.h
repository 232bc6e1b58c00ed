/*
 * Plain-C helpers the InfiniBand wires share (rdmach's RC wire, ud_zcopy's UD wire): which
 * ports are usable, the device by name, every active port as "device:port", the GID a wire
 * addresses itself by, what a port costs, and QP teardown. libibverbs only, no UCX headers.
 */
#ifndef UCX_EXT_VERBS_H
#define UCX_EXT_VERBS_H

#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>

/* 1 when the port is active with an InfiniBand or Ethernet (RoCE) link; attr filled (may be
 * NULL). */
int ucx_ext_verbs_port_usable(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr);

/* The opened device of that name, NULL when there is none. */
struct ibv_context *ucx_ext_verbs_open(const char *name);

/* Calls found(arg, name, port, ctx) for every usable port of every device (ctx is closed
 * after); a non-zero return from found stops the walk and is returned. */
int ucx_ext_verbs_each_port(int (*found)(void *arg, const char *name, uint8_t port,
                                         struct ibv_context *ctx),
                            void *arg);

/* "mlx5_0:1" into name (len bytes) and the port: 0, or -ENODEV when it is no such name. */
int ucx_ext_verbs_parse(const char *dev, char *name, size_t len, uint8_t *port);

/* The GID a wire addresses itself by: RoCE, the first RoCE v2 GID (routable over UDP, what
 * rdma_rxe offers), else RoCE v1; InfiniBand, index 0. Its index, or -1. */
int ucx_ext_verbs_pick_gid(struct ibv_context *ctx, uint8_t port,
                           const struct ibv_port_attr *attr, union ibv_gid *gid);

/* What a port moves and takes, as UCX's ib transports tell UCP (uct_ib_iface_query): the
 * latency of its speed class (plus 200 ns on RoCE), and the bandwidth of its width, signal
 * rate and encoding less each packet's headers (xport_hdr: the transport's own, on top of
 * BTH, CRCs and on RoCE GRH and Ethernet), in bytes per second. A transport that moves data
 * with the HCA's own operations costs what the port does, so UCP's thresholds then follow
 * rc_verbs' on the same port. */
void ucx_ext_verbs_port_perf(const struct ibv_port_attr *attr, size_t xport_hdr,
                             double *latency, double *bandwidth);

/* QP teardown: moves qp to the error state (from any state; its posted WRs complete as
 * flushed, IBV_WC_WR_FLUSH_ERR, in post order, and it neither sends nor receives any more),
 * then, when destroy, destroys it. A wire that waits for those flushed completions before the
 * QP goes (rdmach's RC wire: its fence, the last WR of a closed connection) passes destroy 0
 * and destroys the QP (ibv_destroy_qp) once they came. 0, or the verbs error (positive) of the
 * state change or else of the destroy; when destroy, qp is destroyed (tried) either way. */
int ucx_ext_verbs_qp_teardown(struct ibv_qp *qp, int destroy);

#endif
