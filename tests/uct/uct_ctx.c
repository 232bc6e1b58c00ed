#include "uct_ctx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- finding the transport by name ---- */

/* Opens every md of every component until one offers tl on dev; leaves t->md/component open. */
static int find_md(ut_t *t)
{
    uct_component_h *components;
    unsigned num_components, c, m, r, num_rsc;
    uct_tl_resource_desc_t *rsc;
    uct_component_attr_t attr;
    uct_md_config_t *config;
    uct_md_h md;
    int found = 0;

    if (uct_query_components(&components, &num_components) != UCS_OK) {
        pair_log(t->pair, "uct_query_components failed");
        return -1;
    }
    for (c = 0; (c < num_components) && !found; ++c) {
        attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME | UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
        if (uct_component_query(components[c], &attr) != UCS_OK) {
            continue;
        }
        attr.md_resources = calloc(attr.md_resource_count + 1, sizeof(*attr.md_resources));
        attr.field_mask   = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
        if (uct_component_query(components[c], &attr) != UCS_OK) {
            free(attr.md_resources);
            continue;
        }
        for (m = 0; (m < attr.md_resource_count) && !found; ++m) {
            if (uct_md_config_read(components[c], NULL, NULL, &config) != UCS_OK) {
                continue;
            }
            if (uct_md_open(components[c], attr.md_resources[m].md_name, config, &md) != UCS_OK) {
                uct_config_release(config);
                continue;
            }
            uct_config_release(config);
            if (uct_md_query_tl_resources(md, &rsc, &num_rsc) == UCS_OK) {
                for (r = 0; r < num_rsc; ++r) {
                    found |= !strcmp(rsc[r].tl_name, t->tl) && !strcmp(rsc[r].dev_name, t->dev);
                }
                uct_release_tl_resource_list(rsc);
            }
            if (found) {
                t->md        = md;
                t->component = components[c];
            } else {
                uct_md_close(md);
            }
        }
        free(attr.md_resources);
    }
    uct_release_component_list(components);

    if (!found) {
        pair_log(t->pair, "no transport %s on device %s (is the transport preloaded? see "
                 "`ucx_info -d`)", t->tl, t->dev);
        return -1;
    }
    return 0;
}

/* ---- callbacks ---- */

static ucs_status_t err_handler(void *arg, uct_ep_h ep, ucs_status_t status)
{
    ut_t *t = arg;

    (void)ep;
    if (t->errors++ == 0) {
        t->err_status = status;
        t->err_time   = pair_now();
    }
    return UCS_OK;
}

/* Checks each active message against the plan; records the first problem. */
static ucs_status_t am_handler(void *arg, void *data, size_t length, unsigned flags)
{
    ut_rx_t *rx = arg;
    size_t i   = rx->received++;
    size_t want;
    ssize_t bad;

    (void)flags;
    /* count is 0 until a rule-based sender announces its total */
    if ((rx->count != 0) && (i >= rx->count)) {
        if (rx->errors++ == 0) {
            snprintf(rx->first_error, sizeof(rx->first_error),
                     "message #%zu (%zu bytes) beyond the %zu sent (duplicate?)", i, length,
                     rx->count);
        }
        return UCS_OK;
    }
    want = (rx->plan != NULL) ? rx->plan[i] :
           rx->mix_max ? ut_mix_len(i, rx->mix_max) : ut_rule_len(i);
    if (length != want) {
        if (rx->errors++ == 0) {
            snprintf(rx->first_error, sizeof(rx->first_error),
                     "message #%zu has %zu bytes, expected %zu (lost, reordered or truncated)",
                     i, length, want);
        }
        return UCS_OK;
    }
    bad = pair_pattern_check(data, length, rx->seed_base + (uint32_t)i);
    if ((bad >= 0) && (rx->errors++ == 0)) {
        snprintf(rx->first_error, sizeof(rx->first_error),
                 "message #%zu (%zu bytes): byte %zd is 0x%02x, expected 0x%02x", i, length, bad,
                 ((uint8_t*)data)[bad], pair_pattern_byte(rx->seed_base + (uint32_t)i, bad));
    }
    return UCS_OK;
}

static void progress_cb(void *arg)
{
    ut_progress(arg);
}

/* ---- buffers ---- */

/* Memory the md allocates (e.g. posix: shared memory, which a peer may map). */
static int ut_buf_alloc_by_md(ut_t *t, ut_buf_t *buf, size_t len)
{
    uct_alloc_method_t method = UCT_ALLOC_METHOD_MD;
    uct_mem_alloc_params_t params;
    ucs_status_t status;

    params.field_mask = UCT_MEM_ALLOC_PARAM_FIELD_FLAGS | UCT_MEM_ALLOC_PARAM_FIELD_MDS |
                        UCT_MEM_ALLOC_PARAM_FIELD_NAME;
    params.flags      = UCT_MD_MEM_ACCESS_ALL;
    params.mds.mds    = &t->md;
    params.mds.count  = 1;
    params.name       = "uct_pair";
    status = uct_mem_alloc(len ? len : 1, &method, 1, &params, &buf->mem);
    if (status != UCS_OK) {
        pair_log(t->pair, "uct_mem_alloc(%zu bytes): %s", len, ucs_status_string(status));
        return -1;
    }
    buf->addr     = buf->mem.address;
    buf->memh     = buf->mem.memh;
    buf->md_alloc = 1;
    return 0;
}

int ut_buf_alloc(ut_t *t, ut_buf_t *buf, size_t len)
{
    ucs_status_t status;

    memset(buf, 0, sizeof(*buf));
    buf->len = len;
    if (t->md_attr.cap.flags & UCT_MD_FLAG_REG) {
        if (posix_memalign((void**)&buf->addr, 4096, len ? len : 1) != 0) {
            pair_log(t->pair, "out of memory (%zu bytes)", len);
            return -1;
        }
        status = uct_md_mem_reg(t->md, buf->addr, len ? len : 1, UCT_MD_MEM_ACCESS_ALL,
                                &buf->memh);
        if (status != UCS_OK) {
            pair_log(t->pair, "uct_md_mem_reg(%zu bytes): %s", len, ucs_status_string(status));
            free(buf->addr);
            return -1;
        }
    } else if (t->md_attr.cap.flags & UCT_MD_FLAG_ALLOC) {
        /* e.g. posix: remote access needs memory the md allocated (shared memory) */
        return ut_buf_alloc_by_md(t, buf, len);
    } else {
        buf->addr = malloc(len ? len : 1);
        buf->memh = UCT_MEM_HANDLE_NULL;
    }
    return 0;
}

int ut_buf_alloc_md(ut_t *t, ut_buf_t *buf, size_t len)
{
    if (!(t->md_attr.cap.flags & UCT_MD_FLAG_ALLOC)) {
        return ut_buf_alloc(t, buf, len);
    }
    memset(buf, 0, sizeof(*buf));
    buf->len = len;
    return ut_buf_alloc_by_md(t, buf, len);
}

void ut_buf_free(ut_t *t, ut_buf_t *buf)
{
    if (buf->addr == NULL) {
        return;
    }
    if (buf->md_alloc) {
        uct_mem_free(&buf->mem);
    } else {
        if (buf->memh != UCT_MEM_HANDLE_NULL) {
            uct_md_mem_dereg(t->md, buf->memh);
        }
        free(buf->addr);
    }
    buf->addr = NULL;
}

/* ---- open / connect ---- */

typedef struct {
    uint32_t dev_len, iface_len, rkey_len, ep_len;
    uint64_t region_addr, region_len;
} addr_hdr_t;

void ut_iface_params(const ut_t *t, uct_iface_params_t *params)
{
    memset(params, 0, sizeof(*params));
    params->field_mask = UCT_IFACE_PARAM_FIELD_OPEN_MODE | UCT_IFACE_PARAM_FIELD_DEVICE |
                         UCT_IFACE_PARAM_FIELD_RX_HEADROOM | UCT_IFACE_PARAM_FIELD_CPU_MASK |
                         UCT_IFACE_PARAM_FIELD_FEATURES;
    params->open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
    params->mode.device.tl_name  = t->tl;
    params->mode.device.dev_name = t->dev;
    params->rx_headroom          = 0;
    params->features = UCT_IFACE_FEATURE_AM | UCT_IFACE_FEATURE_PUT | UCT_IFACE_FEATURE_GET;
    UCS_CPU_ZERO(&params->cpu_mask);
}

static int open_iface(ut_t *t)
{
    uct_iface_config_t *config;
    uct_iface_params_t params;
    ucs_status_t status;

    status = ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK, &t->async);
    if (status == UCS_OK) {
        status = uct_worker_create(t->async, UCS_THREAD_MODE_SINGLE, &t->worker);
    }
    if (status != UCS_OK) {
        pair_log(t->pair, "async/worker create: %s", ucs_status_string(status));
        return -1;
    }

    status = uct_md_iface_config_read(t->md, t->tl, NULL, NULL, &config);
    if (status != UCS_OK) {
        pair_log(t->pair, "uct_md_iface_config_read(%s): %s", t->tl, ucs_status_string(status));
        return -1;
    }
    ut_iface_params(t, &params);
    params.field_mask       |= UCT_IFACE_PARAM_FIELD_ERR_HANDLER |
                               UCT_IFACE_PARAM_FIELD_ERR_HANDLER_ARG |
                               UCT_IFACE_PARAM_FIELD_ERR_HANDLER_FLAGS;
    params.err_handler       = err_handler;
    params.err_handler_arg   = t;
    params.err_handler_flags = 0;   /* called from progress, like uct's own gtests */

    status = uct_iface_open(t->md, t->worker, &params, config, &t->iface);
    uct_config_release(config);
    if (status != UCS_OK) {
        pair_log(t->pair, "uct_iface_open(%s/%s): %s", t->tl, t->dev, ucs_status_string(status));
        return -1;
    }
    status = uct_iface_query(t->iface, &t->attr);
    if (status != UCS_OK) {
        pair_log(t->pair, "uct_iface_query: %s", ucs_status_string(status));
        return -1;
    }
    uct_iface_progress_enable(t->iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);

    if (t->attr.cap.flags & (UCT_IFACE_FLAG_AM_SHORT | UCT_IFACE_FLAG_AM_BCOPY |
                             UCT_IFACE_FLAG_AM_ZCOPY)) {
        status = uct_iface_set_am_handler(t->iface, UT_AM_ID, am_handler, &t->rx, 0);
        if (status == UCS_OK) {
            status = uct_iface_set_am_handler(t->iface, UT_AM_ID2, am_handler, &t->rx2, 0);
        }
        if (status != UCS_OK) {
            pair_log(t->pair, "uct_iface_set_am_handler: %s", ucs_status_string(status));
            return -1;
        }
    }
    return 0;
}

int ut_ep_to_ep(const ut_t *t)
{
    return !(t->attr.cap.flags & UCT_IFACE_FLAG_CONNECT_TO_IFACE) &&
           (t->attr.cap.flags & UCT_IFACE_FLAG_CONNECT_TO_EP);
}

/* Sends our addresses, rkey and region; receives the peer's; creates the ep (connect to iface)
 * or connects the ep made before to the peer's (ep to ep: RC). */
static int connect_peer(ut_t *t)
{
    size_t rkey_len = (t->md_attr.cap.flags & UCT_MD_FLAG_NEED_RKEY) ?
                      t->md_attr.rkey_packed_size : 0;
    int ep_to_ep    = ut_ep_to_ep(t);
    addr_hdr_t hdr = {.dev_len = t->attr.device_addr_len, .iface_len = t->attr.iface_addr_len,
                      .rkey_len = rkey_len, .ep_len = ep_to_ep ? t->attr.ep_addr_len : 0,
                      .region_addr = (uintptr_t)t->region.addr, .region_len = t->region.len};
    size_t len = sizeof(hdr) + hdr.dev_len + hdr.iface_len + hdr.rkey_len + hdr.ep_len;
    uint8_t *msg = calloc(1, 65536), *p;
    uct_ep_params_t ep_params;
    ucs_status_t status;
    addr_hdr_t *peer;
    ssize_t n;
    int ret = -1;

    if (!(t->attr.cap.flags & UCT_IFACE_FLAG_CONNECT_TO_IFACE) && !ep_to_ep) {
        pair_log(t->pair, "%s connects neither to an iface nor ep to ep", t->tl);
        goto out;
    }
    if (ep_to_ep) {
        ep_params.field_mask = UCT_EP_PARAM_FIELD_IFACE;
        ep_params.iface      = t->iface;
        status = uct_ep_create(&ep_params, &t->ep);
        if (status != UCS_OK) {
            pair_log(t->pair, "uct_ep_create (ep to ep): %s", ucs_status_string(status));
            t->ep = NULL;
            goto out;
        }
    }
    memcpy(msg, &hdr, sizeof(hdr));
    p = msg + sizeof(hdr);
    if (((status = uct_iface_get_device_address(t->iface, (void*)p)) != UCS_OK) ||
        ((status = uct_iface_get_address(t->iface, (void*)(p + hdr.dev_len))) != UCS_OK) ||
        (rkey_len && ((status = uct_md_mkey_pack(t->md, t->region.memh,
                                                 p + hdr.dev_len + hdr.iface_len)) != UCS_OK)) ||
        (ep_to_ep && ((status = uct_ep_get_address(t->ep, (void*)(p + hdr.dev_len +
                                                   hdr.iface_len + hdr.rkey_len))) != UCS_OK))) {
        pair_log(t->pair, "getting addresses / packing the rkey: %s", ucs_status_string(status));
        goto out;
    }
    if (pair_send(t->pair, msg, len) != 0) {
        goto out;
    }

    n = pair_recv(t->pair, msg, 65536);
    peer = (addr_hdr_t*)msg;
    if ((n < (ssize_t)sizeof(*peer)) ||
        (n != (ssize_t)(sizeof(*peer) + peer->dev_len + peer->iface_len + peer->rkey_len +
                        peer->ep_len)) || (ep_to_ep && (peer->ep_len != hdr.ep_len))) {
        pair_log(t->pair, "bad address message from the peer (%zd bytes)", n);
        goto out;
    }
    p = msg + sizeof(*peer);
    if (!uct_iface_is_reachable(t->iface, (void*)p, (void*)(p + peer->dev_len))) {
        pair_log(t->pair, "the peer's %s iface is not reachable", t->tl);
        goto out;
    }
    t->peer_dev_addr   = malloc(peer->dev_len + 1);
    t->peer_iface_addr = malloc(peer->iface_len + 1);
    memcpy(t->peer_dev_addr, p, peer->dev_len);
    memcpy(t->peer_iface_addr, p + peer->dev_len, peer->iface_len);
    if (ep_to_ep) {
        status = uct_ep_connect_to_ep(t->ep, (void*)p, (void*)(p + peer->dev_len +
                                      peer->iface_len + peer->rkey_len));
        if (status != UCS_OK) {
            pair_log(t->pair, "uct_ep_connect_to_ep: %s", ucs_status_string(status));
            goto out;
        }
    } else if (ut_connect_again(t, &t->ep) != 0) {
        goto out;
    }

    t->peer_addr = peer->region_addr;
    t->peer_len  = peer->region_len;
    if (peer->rkey_len) {
        status = uct_rkey_unpack(t->component, p + peer->dev_len + peer->iface_len,
                                 &t->peer_rkey);
        if (status != UCS_OK) {
            pair_log(t->pair, "uct_rkey_unpack: %s", ucs_status_string(status));
            goto out;
        }
        t->have_rkey = 1;
    } else {
        t->peer_rkey.rkey = UCT_INVALID_RKEY;
    }
    ret = 0;
out:
    free(msg);
    return ret;
}

int ut_connect_again(ut_t *t, uct_ep_h *ep_p)
{
    uct_ep_params_t ep_params;
    ucs_status_t status;

    ep_params.field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR |
                           UCT_EP_PARAM_FIELD_IFACE_ADDR;
    ep_params.iface      = t->iface;
    ep_params.dev_addr   = t->peer_dev_addr;
    ep_params.iface_addr = t->peer_iface_addr;
    status = uct_ep_create(&ep_params, ep_p);
    if (status != UCS_OK) {
        pair_log(t->pair, "uct_ep_create: %s", ucs_status_string(status));
        *ep_p = NULL;
        return -1;
    }
    return 0;
}

int ut_open(ut_t *t, pair_t *pair, const char *tl, const char *dev, size_t region_len)
{
    memset(t, 0, sizeof(*t));
    t->pair = pair;
    t->tl   = tl;
    t->dev  = dev;
    t->cap  = region_len;
    pair->progress     = progress_cb;
    pair->progress_arg = t;

    if ((find_md(t) != 0) || (uct_md_query(t->md, &t->md_attr) != UCS_OK) ||
        (open_iface(t) != 0)) {
        return PAIR_FAIL;
    }
    /* the region must hold the smallest zcopy transfer the transport accepts, with guards */
    {
        size_t min_zcopy = t->attr.cap.get.min_zcopy;
        if (t->attr.cap.put.min_zcopy > min_zcopy) {
            min_zcopy = t->attr.cap.put.min_zcopy;
        }
        if (region_len < min_zcopy + 65536) {
            region_len = min_zcopy + 65536;
            t->cap     = region_len;
        }
    }
    if (ut_buf_alloc(t, &t->region, region_len) != 0) {
        return PAIR_FAIL;
    }
    /* both sides must have unpacked the other's rkey before either may leave (posix maps the
     * peer's memory through /proc/<pid>/fd, which goes away with the peer) */
    return (pair_sync(pair, connect_peer(t) == 0) == 0) ? 0 : PAIR_FAIL;
}

void ut_close(ut_t *t)
{
    t->pair->progress = NULL;
    if (t->have_rkey) {
        uct_rkey_release(t->component, &t->peer_rkey);
    }
    if (t->ep != NULL) {
        uct_ep_destroy(t->ep);
    }
    free(t->peer_dev_addr);
    free(t->peer_iface_addr);
    ut_buf_free(t, &t->region);
    if (t->iface != NULL) {
        uct_iface_close(t->iface);
    }
    if (t->md != NULL) {
        uct_md_close(t->md);
    }
    if (t->worker != NULL) {
        uct_worker_destroy(t->worker);
    }
    if (t->async != NULL) {
        ucs_async_context_destroy(t->async);
    }
}

/* ---- progress, completion, flush ---- */

void ut_progress(ut_t *t)
{
    uct_worker_progress(t->worker);
}

int ut_expired(const ut_t *t)
{
    return pair_now() > t->pair->deadline;
}

static void comp_cb(uct_completion_t *self)
{
    ((ut_comp_t*)self)->done = 1;
}

void ut_comp_init(ut_comp_t *comp)
{
    comp->uct.func   = comp_cb;
    comp->uct.count  = 1;
    comp->uct.status = UCS_OK;
    comp->done       = 0;
}

ucs_status_t ut_comp_wait(ut_t *t, ut_comp_t *comp, ucs_status_t status)
{
    if (status != UCS_INPROGRESS) {
        return status;
    }
    while (!comp->done) {
        ut_progress(t);
        if (ut_expired(t)) {
            return UCS_ERR_TIMED_OUT;
        }
    }
    return comp->uct.status;
}

ucs_status_t ut_flush(ut_t *t, uct_ep_h ep)
{
    ut_comp_t comp;
    ucs_status_t status;

    if (ep != NULL) {
        ut_comp_init(&comp);
        status = UT_RETRY(t, uct_ep_flush(ep, 0, &comp.uct));
        return ut_comp_wait(t, &comp, status);
    }
    /* the iface is flushed by polling (no completion): the way UCP does it, and the only way
     * some built-ins (mm) support */
    while ((status = uct_iface_flush(t->iface, 0, NULL)) == UCS_INPROGRESS ||
           (status == UCS_ERR_NO_RESOURCE)) {
        ut_progress(t);
        if (ut_expired(t)) {
            return UCS_ERR_TIMED_OUT;
        }
    }
    return status;
}

/* ---- sizes, iovs, capabilities ---- */

int ut_verbose;

void ut_log_sizes(const ut_t *t, const char *what, const size_t *sizes, size_t n)
{
    char list[512];
    size_t i, off = 0;

    if (!ut_verbose || (t->pair->role != PAIR_INITIATOR)) {
        return;
    }
    for (i = 0; (i < n) && (off < sizeof(list)); ++i) {
        off += snprintf(list + off, sizeof(list) - off, " %zu", sizes[i]);
    }
    pair_log(t->pair, "%s sizes:%s", what, list);
}

size_t ut_iov_split(uct_iov_t *iov, size_t max_iov, void *buf, size_t len, uct_mem_h memh)
{
    /* uneven pieces (1/2, 1/3, rest) catch transports that mishandle all but the first iov */
    size_t n = (max_iov < 3) ? max_iov : 3, i, off = 0, piece;

    if ((n == 0) || (len < n)) {
        n = 1;
    }
    for (i = 0; i < n; ++i) {
        piece = (i == n - 1) ? len - off : len / (i + 2);
        iov[i].buffer = (uint8_t*)buf + off;
        iov[i].length = piece;
        iov[i].memh   = memh;
        iov[i].stride = 0;
        iov[i].count  = 1;
        off          += piece;
    }
    return n;
}

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t*)a, y = *(const size_t*)b;
    return (x > y) - (x < y);
}

size_t ut_sizes(size_t *sizes, size_t max_count, size_t min, size_t below, size_t max)
{
    size_t cand[] = {min, min + 1, min + 2, min + 3, min + 7, 13, 61, below - 1, below, below + 1,
                     ((below + max) / 2) | 1, max - 1, max};
    size_t n = 0, i;

    for (i = 0; i < sizeof(cand) / sizeof(cand[0]); ++i) {
        if ((cand[i] >= min) && (cand[i] <= max) && (cand[i] != (size_t)-1) && (n < max_count) &&
            ((i < 7) || (i >= 10) || (below > 0))) {
            sizes[n++] = cand[i];
        }
    }
    qsort(sizes, n, sizeof(*sizes), cmp_size);
    for (i = 1; i < n; ) {   /* unique */
        if (sizes[i] == sizes[i - 1]) {
            memmove(&sizes[i], &sizes[i + 1], (n - i - 1) * sizeof(*sizes));
            --n;
        } else {
            ++i;
        }
    }
    return n;
}

static const struct {
    const char *name;
    uint64_t   flag;
    int        md;
} caps[] = {
    {"am_short", UCT_IFACE_FLAG_AM_SHORT, 0},      {"am_bcopy", UCT_IFACE_FLAG_AM_BCOPY, 0},
    {"am_zcopy", UCT_IFACE_FLAG_AM_ZCOPY, 0},      {"put_short", UCT_IFACE_FLAG_PUT_SHORT, 0},
    {"put_bcopy", UCT_IFACE_FLAG_PUT_BCOPY, 0},    {"put_zcopy", UCT_IFACE_FLAG_PUT_ZCOPY, 0},
    {"get_short", UCT_IFACE_FLAG_GET_SHORT, 0},    {"get_bcopy", UCT_IFACE_FLAG_GET_BCOPY, 0},
    {"get_zcopy", UCT_IFACE_FLAG_GET_ZCOPY, 0},    {"pending", UCT_IFACE_FLAG_PENDING, 0},
    {"cb_sync", UCT_IFACE_FLAG_CB_SYNC, 0},
    {"connect_to_iface", UCT_IFACE_FLAG_CONNECT_TO_IFACE, 0},
    {"connect_to_ep", UCT_IFACE_FLAG_CONNECT_TO_EP, 0},
    {"peer_failure", UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE, 0},
    {"ep_check", UCT_IFACE_FLAG_EP_CHECK, 0},
    {"md_reg", UCT_MD_FLAG_REG, 1},                {"md_alloc", UCT_MD_FLAG_ALLOC, 1},
    {"md_need_rkey", UCT_MD_FLAG_NEED_RKEY, 1},
};

int ut_has_cap(const ut_t *t, const char *name)
{
    size_t i;

    for (i = 0; i < sizeof(caps) / sizeof(caps[0]); ++i) {
        if (!strcmp(caps[i].name, name)) {
            return !!((caps[i].md ? t->md_attr.cap.flags : t->attr.cap.flags) & caps[i].flag);
        }
    }
    return -1;
}

const char *ut_cap_names(void)
{
    static char names[512];
    size_t i, off = 0;

    for (i = 0; i < sizeof(caps) / sizeof(caps[0]); ++i) {
        off += snprintf(names + off, sizeof(names) - off, "%s%s", i ? "," : "", caps[i].name);
    }
    return names;
}

int ut_send_region(ut_t *t, const ut_buf_t *buf)
{
    size_t rkey_len = t->md_attr.rkey_packed_size;
    uint64_t addr   = (uintptr_t)buf->addr;
    uint8_t msg[1024];
    ucs_status_t status;

    if (8 + rkey_len > sizeof(msg)) {
        pair_log(t->pair, "a packed rkey of %zu bytes", rkey_len);
        return -1;
    }
    status = uct_md_mkey_pack(t->md, buf->memh, msg + 8);
    memcpy(msg, &addr, 8);
    if ((status != UCS_OK) || (pair_send(t->pair, msg, 8 + rkey_len) != 0)) {
        pair_log(t->pair, "uct_md_mkey_pack: %s", ucs_status_string(status));
        return -1;
    }
    return 0;
}

int ut_recv_region(ut_t *t, uint64_t *addr, uct_rkey_bundle_t *rkey)
{
    size_t rkey_len = t->md_attr.rkey_packed_size;
    uint8_t msg[1024];
    ucs_status_t status;

    if ((8 + rkey_len > sizeof(msg)) ||
        (pair_recv(t->pair, msg, sizeof(msg)) != (ssize_t)(8 + rkey_len))) {
        pair_log(t->pair, "no region from the peer");
        return -1;
    }
    memcpy(addr, msg, 8);
    status = uct_rkey_unpack(t->component, msg + 8, rkey);
    if (status != UCS_OK) {
        pair_log(t->pair, "uct_rkey_unpack: %s", ucs_status_string(status));
        return -1;
    }
    return 0;
}
