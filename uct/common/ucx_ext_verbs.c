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
