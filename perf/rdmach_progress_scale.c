/*
 * How the receiver's progress cost scales with connected peers (public UCT API only).
 *
 * One receiver iface and N sender ifaces in one process, each sender connected to the receiver.
 * Every sender sends once (so every connection is live), then we measure on the receiver:
 *   idle   ns per uct_iface_progress() call with N connected, silent peers
 *   one    ns per message when one peer of N ping-streams (send, progress until delivered)
 *   rr     ns per message when all N peers take turns
 * rdmach polls hot rings + doorbells + a periodic sweep; UCX_RDMACH_POLL_ALL=y polls every ring
 * like the seed; posix (UCX mm) has one shared receive FIFO per receiver.
 *
 *   rdmach_progress_scale [-t tl] [-p 2,8,64] [-n iters] [-c KEY=VALUE]... [--csv]
 * The transport must be loaded (eval "$(scripts/env)").
 */
#include <uct/api/uct.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(_st, _what) \
    do { \
        ucs_status_t __s = (_st); \
        if (__s != UCS_OK) { \
            fprintf(stderr, "%s failed: %s\n", _what, ucs_status_string(__s)); \
            exit(1); \
        } \
    } while (0)

static volatile unsigned long received;

static ucs_status_t on_am(void *arg, void *data, size_t length, unsigned flags)
{
    (void)arg;
    (void)data;
    (void)length;
    (void)flags;
    ++received;
    return UCS_OK;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

typedef struct {
    uct_component_h   comp;
    uct_md_h          md;
    char              dev[UCT_DEVICE_NAME_MAX];
} md_ctx_t;

static void open_md(const char *tl, md_ctx_t *ctx)
{
    uct_component_h *comps;
    unsigned ncomps, i, j, k;

    CHECK(uct_query_components(&comps, &ncomps), "uct_query_components");
    for (i = 0; i < ncomps; ++i) {
        uct_component_attr_t attr = {.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME |
                                                   UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT};
        CHECK(uct_component_query(comps[i], &attr), "uct_component_query");
        uct_md_resource_desc_t mds[attr.md_resource_count ? attr.md_resource_count : 1];
        attr.field_mask   = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
        attr.md_resources = mds;
        CHECK(uct_component_query(comps[i], &attr), "uct_component_query");
        for (j = 0; j < attr.md_resource_count; ++j) {
            uct_md_config_t *mdc;
            uct_tl_resource_desc_t *res;
            unsigned nres;
            uct_md_h md;

            CHECK(uct_md_config_read(comps[i], NULL, NULL, &mdc), "uct_md_config_read");
            CHECK(uct_md_open(comps[i], mds[j].md_name, mdc, &md), "uct_md_open");
            uct_config_release(mdc);
            CHECK(uct_md_query_tl_resources(md, &res, &nres), "uct_md_query_tl_resources");
            for (k = 0; k < nres; ++k) {
                if (!strcmp(res[k].tl_name, tl)) {
                    ctx->comp = comps[i];
                    ctx->md   = md;
                    snprintf(ctx->dev, sizeof(ctx->dev), "%s", res[k].dev_name);
                    uct_release_tl_resource_list(res);
                    return;
                }
            }
            uct_release_tl_resource_list(res);
            uct_md_close(md);
        }
    }
    fprintf(stderr, "transport %s not found (is it preloaded?)\n", tl);
    exit(1);
}

static uct_iface_h open_iface(md_ctx_t *ctx, uct_worker_h worker, const char *tl,
                              char **cfg, int ncfg)
{
    uct_iface_params_t params = {0};
    uct_iface_config_t *config;
    uct_iface_h iface;
    int i;

    CHECK(uct_md_iface_config_read(ctx->md, tl, NULL, NULL, &config), "iface_config_read");
    for (i = 0; i < ncfg; ++i) {
        char key[128], *eq = strchr(cfg[i], '=');
        snprintf(key, sizeof(key), "%.*s", (int)(eq - cfg[i]), cfg[i]);
        CHECK(uct_config_modify(config, key, eq + 1), cfg[i]);
    }
    params.field_mask           = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                                  UCT_IFACE_PARAM_FIELD_DEVICE;
    params.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
    params.mode.device.tl_name  = tl;
    params.mode.device.dev_name = ctx->dev;
    CHECK(uct_iface_open(ctx->md, worker, &params, config, &iface), "uct_iface_open");
    uct_config_release(config);
    uct_iface_progress_enable(iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    return iface;
}

static void send_one(uct_ep_h ep, uct_iface_h rx, uct_iface_h tx)
{
    unsigned long want = received + 1;
    ucs_status_t st;

    while ((st = uct_ep_am_short(ep, 1, 0, NULL, 0)) == UCS_ERR_NO_RESOURCE) {
        uct_iface_progress(rx);
        uct_iface_progress(tx);
    }
    CHECK(st, "uct_ep_am_short");
    while (received < want) {
        uct_iface_progress(rx);
    }
}

int main(int argc, char **argv)
{
    const char *tl = "rdmach", *peers_arg = "2,8,64";
    long iters = 200000;
    char *cfg[16];
    int ncfg = 0, csv = 0, i;
    char *peers, *tok;
    ucs_async_context_t *async;
    uct_worker_h worker;
    md_ctx_t ctx;

    for (i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) {
            tl = argv[++i];
        } else if (!strcmp(argv[i], "-p") && i + 1 < argc) {
            peers_arg = argv[++i];
        } else if (!strcmp(argv[i], "-n") && i + 1 < argc) {
            iters = atol(argv[++i]);
        } else if (!strcmp(argv[i], "-c") && i + 1 < argc && ncfg < 16 &&
                   strchr(argv[i + 1], '=')) {
            cfg[ncfg++] = argv[++i];
        } else if (!strcmp(argv[i], "--csv")) {
            csv = 1;
        } else {
            fprintf(stderr, "usage: %s [-t tl] [-p 2,8,64] [-n iters] [-c KEY=VALUE]... [--csv]\n",
                    argv[0]);
            return 2;
        }
    }

    CHECK(ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK, &async), "async");
    CHECK(uct_worker_create(async, UCS_THREAD_MODE_SINGLE, &worker), "worker");
    open_md(tl, &ctx);

    if (csv) {
        printf("tl,config,peers,idle_ns_per_progress,one_active_ns_per_msg,round_robin_ns_per_msg\n");
    } else {
        printf("%-8s %-22s %6s %18s %18s %18s\n", "tl", "config", "peers", "idle ns/progress",
               "1 active ns/msg", "round-robin ns/msg");
    }

    peers = strdup(peers_arg);
    for (tok = strtok(peers, ","); tok != NULL; tok = strtok(NULL, ",")) {
        int n = atoi(tok), p;
        uct_iface_h rx = open_iface(&ctx, worker, tl, cfg, ncfg);
        uct_iface_h tx[n];
        uct_ep_h ep[n];
        uct_iface_attr_t attr;
        double t0, idle, one, rr;
        long k;

        CHECK(uct_iface_query(rx, &attr), "uct_iface_query");
        CHECK(uct_iface_set_am_handler(rx, 1, on_am, NULL, 0), "am handler");
        {
            uct_device_addr_t *dev = alloca(attr.device_addr_len);
            uct_iface_addr_t *ifa  = alloca(attr.iface_addr_len);
            CHECK(uct_iface_get_device_address(rx, dev), "device address");
            CHECK(uct_iface_get_address(rx, ifa), "iface address");
            for (p = 0; p < n; ++p) {
                uct_ep_params_t ep_params = {
                    .field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR |
                                  UCT_EP_PARAM_FIELD_IFACE_ADDR,
                    .dev_addr   = dev,
                    .iface_addr = ifa
                };
                tx[p]           = open_iface(&ctx, worker, tl, cfg, ncfg);
                ep_params.iface = tx[p];
                CHECK(uct_ep_create(&ep_params, &ep[p]), "uct_ep_create");
            }
        }

        for (p = 0; p < n; ++p) {          /* every connection live once */
            send_one(ep[p], rx, tx[p]);
        }
        for (k = 0; k < 10000; ++k) {      /* let idle rings cool down */
            uct_iface_progress(rx);
        }

        t0 = now_ns();
        for (k = 0; k < iters; ++k) {
            uct_iface_progress(rx);
        }
        idle = (now_ns() - t0) / iters;

        t0 = now_ns();
        for (k = 0; k < iters; ++k) {
            send_one(ep[0], rx, tx[0]);
        }
        one = (now_ns() - t0) / iters;

        t0 = now_ns();
        for (k = 0; k < iters; ++k) {
            send_one(ep[k % n], rx, tx[k % n]);
        }
        rr = (now_ns() - t0) / iters;

        {
            char cfgs[256] = "default";
            size_t off = 0;
            for (i = 0; i < ncfg; ++i) {
                off += snprintf(cfgs + off, sizeof(cfgs) - off, "%s%s", i ? ";" : "", cfg[i]);
            }
            if (csv) {
                printf("%s,%s,%d,%.1f,%.1f,%.1f\n", tl, cfgs, n, idle, one, rr);
            } else {
                printf("%-8s %-22s %6d %18.1f %18.1f %18.1f\n", tl, cfgs, n, idle, one, rr);
            }
        }
        fflush(stdout);

        for (p = 0; p < n; ++p) {
            uct_ep_destroy(ep[p]);
            uct_iface_close(tx[p]);
        }
        uct_iface_close(rx);
    }
    free(peers);
    uct_worker_destroy(worker);
    ucs_async_context_destroy(async);
    uct_md_close(ctx.md);
    return 0;
}
