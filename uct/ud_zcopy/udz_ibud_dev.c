/*
 * ud_zcopy InfiniBand UD wire: devices (every active port) and addresses (ours, a received
 * datagram's sender, the address handles of remote ports, what UCP exchanges).
 */

#include "udz_ibud_int.h"

/* ---- devices ---- */

uint32_t udz_ibud_mtu_bytes(enum ibv_mtu mtu)
{
    return 128u << (unsigned)mtu;   /* IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5 */
}

typedef struct {
    int (*found)(void *arg, const char *dev);
    void *arg;
} udz_ibud_found_t;

static int udz_ibud_found_port(void *arg, const char *name, uint8_t port, struct ibv_context *ctx)
{
    udz_ibud_found_t *f = arg;
    char dev[80];

    (void)ctx;
    snprintf(dev, sizeof(dev), "%s:%u", name, port);
    return f->found(f->arg, dev);
}

/* Every active port of every HCA, as "device:port" (rdmach's and UCX's ib names). */
int udz_ibud_query_devices(int (*found)(void *arg, const char *dev), void *arg)
{
    udz_ibud_found_t f = {found, arg};

    return ucx_ext_verbs_each_port(udz_ibud_found_port, &f);
}

size_t udz_ibud_dev_mtu(const char *dev)
{
    struct ibv_port_attr attr;
    struct ibv_context *ctx;
    char name[64];
    uint8_t port;
    size_t mtu = 0;

    if ((ucx_ext_verbs_parse(dev, name, sizeof(name), &port) != 0) ||
        ((ctx = ucx_ext_verbs_open(name)) == NULL)) {
        return 0;
    }
    if (ucx_ext_verbs_port_usable(ctx, port, &attr)) {
        mtu = udz_ibud_mtu_bytes(attr.active_mtu);
    }
    ibv_close_device(ctx);
    return mtu;
}

/* ---- addresses: [GID 16][LID 2][0 0][QPN 4]; UCP gets the GID as the device address and
 * the QPN and LID as the iface address ---- */

/* The sender of a received datagram, from its GRH (RoCE v2 over IPv4: rdma_rxe and the HCAs
 * put the IPv4 header in the GRH area's last 20 bytes) and the completion. */
void udz_ibud_src(const udz_ibud_t *w, const uint8_t *grh, const struct ibv_wc *wc,
                  udz_addr_t *out)
{
    uint8_t gid[16] = {0};
    uint16_t lid = w->roce ? 0 : wc->slid;

    if (wc->wc_flags & IBV_WC_GRH) {
        if (w->ipv4) {
            gid[10] = gid[11] = 0xff;
            memcpy(gid + 12, grh + 20 + 12, 4);
        } else {
            memcpy(gid, grh + 8, 16);
        }
    }
    udz_ibud_addr_make(gid, lid, wc->src_qp, out);
}

udz_ibud_ah_t *udz_ibud_ah(udz_ibud_t *w, const udz_addr_t *dst)
{
    struct ibv_ah_attr attr;
    udz_ibud_ah_t *a;
    uint16_t lid;
    unsigned b;

    memcpy(&lid, dst->b + 16, 2);
    b = (unsigned)(dst->b[15] ^ dst->b[14] * 7u ^ lid) % UDZ_IBUD_AH_BUCKETS;
    for (a = w->ah[b]; a != NULL; a = a->next) {
        if ((a->lid == lid) && !memcmp(a->gid, dst->b, 16)) {
            return a;
        }
    }
    memset(&attr, 0, sizeof(attr));
    attr.is_global      = 1;
    memcpy(attr.grh.dgid.raw, dst->b, 16);
    attr.grh.sgid_index = (uint8_t)w->gid_index;
    attr.grh.hop_limit  = 64;
    attr.dlid           = lid;
    attr.port_num       = w->port;
    a = calloc(1, sizeof(*a));
    if (a == NULL) {
        return NULL;
    }
    a->ah = ibv_create_ah(w->pd, &attr);
    if (a->ah == NULL) {
        free(a);
        return NULL;
    }
    memcpy(a->gid, dst->b, 16);
    a->lid   = lid;
    a->next  = w->ah[b];
    w->ah[b] = a;
    return a;
}

/* ---- the addresses UCP exchanges ---- */

void udz_ibud_dev_addr_pack(void *wire, void *dev_addr)
{
    memcpy(dev_addr, ((udz_ibud_t*)wire)->gid, 16);
}

void udz_ibud_iface_addr_pack(void *wire, void *iface_addr)
{
    udz_ibud_t *w = wire;
    uint32_t qpn  = w->qp->qp_num;

    memcpy(iface_addr, &qpn, 4);
    memcpy((uint8_t*)iface_addr + 4, &w->lid, 2);
}

void udz_ibud_addr_unpack(const void *dev_addr, const void *iface_addr, udz_addr_t *out,
                          udz_chans_t *chans)
{
    uint16_t lid;
    uint32_t qpn;

    memset(chans, 0, sizeof(*chans));   /* channels are named by QP number (udz_ibud_chan_addr) */

    memcpy(&qpn, iface_addr, 4);
    memcpy(&lid, (const uint8_t*)iface_addr + 4, 2);
    udz_ibud_addr_make(dev_addr, lid, qpn, out);
}

/* RoCE: any peer with a GID of the same kind (an IPv4 one for an IPv4 one); IB: any in the
 * subnet (the GID's prefix). */
int udz_ibud_is_reachable(void *wire, const void *dev_addr, int same_host)
{
    udz_ibud_t *w = wire;
    const uint8_t *gid = dev_addr;
    int v4 = !memcmp(gid, "\0\0\0\0\0\0\0\0\0\0\xff\xff", 12);

    (void)same_host;
    if (w->roce) {
        return v4 == w->ipv4;
    }
    return !memcmp(gid, w->gid, 8);
}
