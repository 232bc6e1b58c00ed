/* ep_is_connected: UCP 1.22 asks a transport whether an ep it has already reaches a peer
 * whose address it just got (ucp_wireup_is_ep_connected... on every wireup message and when it
 * merges eps after a simultaneous connect); an ep that says yes to every address makes UCP
 * reuse it for the wrong peer, one that says no makes it connect again. UCT 1.13 has no such
 * call (its UCP compares addresses itself), so the case runs where the API exists.
 *
 * The initiator's ep must say it is connected to the target's iface address, and not to other
 * addresses of the same transport: its own iface's (a different peer on the same device) and a
 * second iface it opens for the purpose; and its own ep to that second iface must tell the two
 * apart the other way round. Eps that connect to eps (RC) are skipped here: their ep address
 * is what the wire exchanges, and the verbs tier covers it. */
#include "cases.h"

#include <stdlib.h>
#include <string.h>
#include <uct/api/version.h>

#if (UCT_VERNO_MAJOR > 1) || (UCT_VERNO_MINOR >= 16)
#include <uct/api/v2/uct_v2.h>

static int conn_is_connected(uct_ep_h ep, const void *dev, const void *iface)
{
    uct_ep_is_connected_params_t params = {
        .field_mask  = UCT_EP_IS_CONNECTED_FIELD_DEVICE_ADDR |
                       UCT_EP_IS_CONNECTED_FIELD_IFACE_ADDR,
        .device_addr = dev,
        .iface_addr  = iface
    };

    return uct_ep_is_connected(ep, &params);
}

/* The device and iface address of iface (malloc'd, free both). */
static int conn_addresses(ut_t *t, uct_iface_h iface, const uct_iface_attr_t *attr, void **dev,
                          void **addr)
{
    *dev  = calloc(1, attr->device_addr_len + 1);
    *addr = calloc(1, attr->iface_addr_len + 1);
    if ((*dev == NULL) || (*addr == NULL) ||
        (uct_iface_get_device_address(iface, *dev) != UCS_OK) ||
        (uct_iface_get_address(iface, *addr) != UCS_OK)) {
        pair_log(t->pair, "cannot get an iface's addresses");
        return -1;
    }
    return 0;
}

int case_ep_is_connected(ut_t *t)
{
    uct_iface_params_t params = {
        .field_mask  = UCT_IFACE_PARAM_FIELD_OPEN_MODE | UCT_IFACE_PARAM_FIELD_DEVICE |
                       UCT_IFACE_PARAM_FIELD_STATS_ROOT | UCT_IFACE_PARAM_FIELD_RX_HEADROOM,
        .open_mode   = UCT_IFACE_OPEN_MODE_DEVICE,
        .mode.device = {.tl_name = t->tl, .dev_name = t->dev},
        .stats_root  = NULL,
        .rx_headroom = 0
    };
    uct_ep_params_t ep_params = {.field_mask = UCT_EP_PARAM_FIELD_IFACE |
                                               UCT_EP_PARAM_FIELD_DEV_ADDR |
                                               UCT_EP_PARAM_FIELD_IFACE_ADDR};
    void *own_dev = NULL, *own = NULL, *other_dev = NULL, *other = NULL;
    uct_iface_config_t *config = NULL;
    uct_iface_h second         = NULL;
    uct_ep_h to_second         = NULL;
    uct_iface_attr_t attr;
    int ok = 1;

    if (ut_ep_to_ep(t)) {
        return PAIR_SKIP;
    }
    if (t->pair->role == PAIR_TARGET) {
        return PAIR_PASS;   /* the target only has to be there */
    }
    if ((uct_md_iface_config_read(t->md, t->tl, NULL, NULL, &config) != UCS_OK) ||
        (uct_iface_open(t->md, t->worker, &params, config, &second) != UCS_OK) ||
        (uct_iface_query(second, &attr) != UCS_OK) ||
        (conn_addresses(t, t->iface, &t->attr, &own_dev, &own) != 0) ||
        (conn_addresses(t, second, &attr, &other_dev, &other) != 0)) {
        pair_log(t->pair, "cannot open a second %s iface", t->tl);
        ok = 0;
        goto out;
    }
    ep_params.iface      = t->iface;
    ep_params.dev_addr   = other_dev;
    ep_params.iface_addr = other;
    if (uct_ep_create(&ep_params, &to_second) != UCS_OK) {
        pair_log(t->pair, "cannot connect to the second iface");
        ok = 0;
        goto out;
    }
    if (!conn_is_connected(t->ep, t->peer_dev_addr, t->peer_iface_addr)) {
        pair_log(t->pair, "the ep says it is not connected to the peer it was created for");
        ok = 0;
    }
    if (conn_is_connected(t->ep, own_dev, own)) {
        pair_log(t->pair, "the ep to the peer says it is connected to its own iface");
        ok = 0;
    }
    if (conn_is_connected(t->ep, other_dev, other)) {
        pair_log(t->pair, "the ep to the peer says it is connected to another iface");
        ok = 0;
    }
    if (!conn_is_connected(to_second, other_dev, other) ||
        conn_is_connected(to_second, t->peer_dev_addr, t->peer_iface_addr)) {
        pair_log(t->pair, "the ep to the second iface does not tell it from the peer");
        ok = 0;
    }
out:
    if (to_second != NULL) {
        uct_ep_destroy(to_second);
    }
    if (second != NULL) {
        uct_iface_close(second);
    }
    if (config != NULL) {
        uct_config_release(config);
    }
    free(own_dev);
    free(own);
    free(other_dev);
    free(other);
    return ok ? PAIR_PASS : PAIR_FAIL;
}
#else
int case_ep_is_connected(ut_t *t)
{
    (void)t;
    return PAIR_SKIP;   /* UCT 1.13 has no uct_ep_is_connected */
}
#endif
