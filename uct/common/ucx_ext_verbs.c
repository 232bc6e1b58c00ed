/*
 * The InfiniBand wires' shared helpers (see ucx_ext_verbs.h).
 */
#include "ucx_ext_verbs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int ucx_ext_verbs_port_usable(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr)
{
    struct ibv_port_attr a;

    if (attr == NULL) {
        attr = &a;
    }
    return (ibv_query_port(ctx, port, attr) == 0) && (attr->state == IBV_PORT_ACTIVE) &&
           ((attr->link_layer == IBV_LINK_LAYER_ETHERNET) ||
            (attr->link_layer == IBV_LINK_LAYER_INFINIBAND));
}

struct ibv_context *ucx_ext_verbs_open(const char *name)
{
    struct ibv_device **list;
    struct ibv_context *ctx = NULL;
    int i, num;

    list = ibv_get_device_list(&num);
    for (i = 0; (list != NULL) && (i < num); ++i) {
        if (strcmp(ibv_get_device_name(list[i]), name) == 0) {
            ctx = ibv_open_device(list[i]);
            break;
        }
    }
    if (list != NULL) {
        ibv_free_device_list(list);
    }
    return ctx;
}

int ucx_ext_verbs_each_port(int (*found)(void *arg, const char *name, uint8_t port,
                                         struct ibv_context *ctx),
                            void *arg)
{
    struct ibv_device **list;
    struct ibv_device_attr attr;
    struct ibv_context *ctx;
    int i, num, rc = 0;
    uint8_t p;

    list = ibv_get_device_list(&num);
    for (i = 0; (list != NULL) && (i < num) && (rc == 0); ++i) {
        ctx = ibv_open_device(list[i]);
        if (ctx == NULL) {
            continue;
        }
        if (ibv_query_device(ctx, &attr) == 0) {
            for (p = 1; (p <= attr.phys_port_cnt) && (rc == 0); ++p) {
                if (ucx_ext_verbs_port_usable(ctx, p, NULL)) {
                    rc = found(arg, ibv_get_device_name(list[i]), p, ctx);
                }
            }
        }
        ibv_close_device(ctx);
    }
    if (list != NULL) {
        ibv_free_device_list(list);
    }
    return rc;
}

int ucx_ext_verbs_parse(const char *dev, char *name, size_t len, uint8_t *port)
{
    const char *colon = strrchr(dev, ':');
    char *end;
    unsigned long p;

    if ((colon == NULL) || ((size_t)(colon - dev) >= len)) {
        return -ENODEV;
    }
    p = strtoul(colon + 1, &end, 10);
    if ((*end != '\0') || (p == 0) || (p > 255)) {
        return -ENODEV;
    }
    memcpy(name, dev, (size_t)(colon - dev));
    name[colon - dev] = '\0';
    *port = (uint8_t)p;
    return 0;
}

int ucx_ext_verbs_pick_gid(struct ibv_context *ctx, uint8_t port,
                           const struct ibv_port_attr *attr, union ibv_gid *gid)
{
    struct ibv_gid_entry entry;
    int i, v1 = -1;

    if (attr->link_layer == IBV_LINK_LAYER_INFINIBAND) {
        return (ibv_query_gid(ctx, port, 0, gid) == 0) ? 0 : -1;
    }
    for (i = 0; i < attr->gid_tbl_len; ++i) {
        if (ibv_query_gid_ex(ctx, port, (uint32_t)i, &entry, 0) != 0) {
            continue;
        }
        if (entry.gid_type == IBV_GID_TYPE_ROCE_V2) {
            memcpy(gid, &entry.gid, sizeof(*gid));
            return i;
        } else if (v1 < 0) {
            v1 = i;
        }
    }
    if ((v1 >= 0) && (ibv_query_gid(ctx, port, v1, gid) == 0)) {
        return v1;
    }
    return -1;
}

void ucx_ext_verbs_port_perf(const struct ibv_port_attr *attr, size_t xport_hdr,
                             double *latency, double *bandwidth)
{
    /* IBTA PortInfo LinkWidthActive: 1x, 4x, 8x, 12x, 2x */
    static const uint8_t widths[] = {[1] = 1, [2] = 4, [4] = 8, [8] = 12, [16] = 2};
    int roce         = (attr->link_layer == IBV_LINK_LAYER_ETHERNET);
    unsigned width   = ((attr->active_width < sizeof(widths)) && widths[attr->active_width]) ?
                       widths[attr->active_width] : 1;
    double lat, rate, encoding = 64.0 / 66.0;
    size_t mtu, extra;

    switch (attr->active_speed) {   /* IBTA LinkSpeedActive, as uct_ib_iface_query reads it */
    case 2:  lat = 2500e-9; rate = 5.0e9;  encoding = 8.0 / 10.0; break;           /* DDR */
    case 4:  lat = 1300e-9; rate = roce ? 10.3125e9 : 10.0e9;                        /* QDR */
             encoding = roce ? 64.0 / 66.0 : 8.0 / 10.0; break;
    case 8:  lat = 700e-9;  rate = 10.3125e9; break;                                 /* FDR10 */
    case 16: lat = 700e-9;  rate = 14.0625e9; break;                                 /* FDR */
    case 32: lat = 600e-9;  rate = 25.78125e9; break;                                /* EDR */
    case 64: lat = 600e-9;  rate = 25.78125e9 * 2; break;                            /* HDR */
    case 128: lat = 600e-9; rate = 100e9; break;                                     /* NDR */
    default: lat = 5000e-9; rate = 2.5e9;  encoding = 8.0 / 10.0; break;           /* SDR */
    }
    mtu   = (size_t)128 << ((attr->active_mtu >= IBV_MTU_256) && (attr->active_mtu <= IBV_MTU_4096) ?
                            attr->active_mtu : IBV_MTU_1024);
    /* BTH 12, ICRC 4, VCRC 2, delimiter 2; RoCE: GRH 40 and Ethernet 14; IB: LRH 8 */
    extra = 12 + xport_hdr + 4 + 2 + 2 + (roce ? 40 + 14 : 8);
    *latency   = lat + (roce ? 200e-9 : 0);
    *bandwidth = (width * rate * encoding / 8.0) * (double)mtu / (double)(mtu + extra);
}

int ucx_ext_verbs_qp_teardown(struct ibv_qp *qp, int destroy)
{
    struct ibv_qp_attr attr;
    int ret, destroyed;

    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_ERR;
    ret = ibv_modify_qp(qp, &attr, IBV_QP_STATE);
    if (destroy) {
        destroyed = ibv_destroy_qp(qp);
        ret       = (ret != 0) ? ret : destroyed;
    }
    return ret;
}
