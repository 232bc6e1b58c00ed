#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "ucx_ext_module.h"

#include "ucx_ext_md.h"

#include <uct/api/version.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The loaded UCX's version, through UCP when the process has it (libuct has no such call). */
static void ucx_ext_ucx_version(unsigned *major, unsigned *minor, unsigned *release)
{
    void (*get_version)(unsigned*, unsigned*, unsigned*);

    *major   = UCT_VERNO_MAJOR;
    *minor   = UCT_VERNO_MINOR;
    *release = UCT_VERNO_PATCH;
    *(void**)&get_version = dlsym(RTLD_DEFAULT, "ucp_get_version");
    if (get_version != NULL) {
        get_version(major, minor, release);
    }
}

static size_t ucx_ext_async_written_end(uint8_t pattern)
{
    union {
        ucs_async_context_t ctx;
        uint8_t             bytes[4 * sizeof(ucs_async_context_t) + 256];
    } probe;
    size_t end = 0, i;

    memset(&probe, pattern, sizeof(probe));
    /* thread-mutex mode writes the lock's owner and count, present with assertions (both
     * releases), and 1.22's context owner; no thread starts before a handler is added */
    if (ucs_async_context_init(&probe.ctx, UCS_ASYNC_MODE_THREAD_MUTEX) != UCS_OK) {
        return 0;
    }
    for (i = 0; i < sizeof(probe.bytes); ++i) {
        if (probe.bytes[i] != pattern) {
            end = i + 1;
        }
    }
    ucs_async_context_cleanup(&probe.ctx);
    return end;
}

size_t ucx_ext_loaded_async_context_size(void)
{
    /* a byte written with the pattern's own value is seen by the other pattern */
    size_t end = ucs_max(ucx_ext_async_written_end(0xa5), ucx_ext_async_written_end(0x5a));

    return ucs_align_up(end, __alignof__(ucs_async_context_t));
}

int ucx_ext_loaded_has_assertions(void)
{
    size_t loaded = ucx_ext_loaded_async_context_size();

    return (loaded == sizeof(ucs_async_context_t)) ? UCS_ENABLE_ASSERT : !UCS_ENABLE_ASSERT;
}

const char *ucx_ext_abi_mismatch(const ucx_ext_class_size_t *classes, unsigned count)
{
    unsigned major, minor, release, i;

    ucx_ext_ucx_version(&major, &minor, &release);
    if ((major != UCT_VERNO_MAJOR) || (minor != UCT_VERNO_MINOR) ||
        (release != UCT_VERNO_PATCH)) {
        return "version";
    }
    for (i = 0; i < count; ++i) {
        if (classes[i].loaded != classes[i].built) {
            return classes[i].what;
        }
    }
    return NULL;
}

static void ucx_ext_abi_warn(const ucx_ext_module_t *m, const char *what)
{
    const char *tl = m->counters.tl;
    unsigned major, minor, release;

    ucx_ext_ucx_version(&major, &minor, &release);
    fprintf(stderr, "[%s] WARNING: not registering the %s transport: it was built for UCX "
            "%d.%d.%d (assertions %s, stats %s) and the loaded UCX %u.%u.%u differs in its "
            "%s\n", tl, tl, UCT_VERNO_MAJOR, UCT_VERNO_MINOR, UCT_VERNO_PATCH,
            m->built_asserts ? "on" : "off", m->built_stats ? "on" : "off", major, minor,
            release, what);
}

/*
 * UCP allocates memory (ucp_mem_map with UCP_MEM_MAP_ALLOCATE: Open MPI's Win_allocate) by
 * UCX_ALLOC_PRIO, "md:sysv,md:posix,huge,thp,md:*,mmap,heap" by default. With UCX_TLS=sm the
 * mm mds come first and every window is mapped memory; with one of our transports they are
 * closed (no transport of theirs selected), and "thp" takes every window from 1 MiB on
 * before our md is asked. A transport whose md allocates mapped memory therefore puts
 * itself where the mm mds stand, when the user has not set the variable (or it is what
 * another of our modules wrote). The variable is read at ucp_config_read, after the
 * preloaded module's constructor; a module loaded later (UCX 1.22's plugins) changes
 * nothing, and scripts/env sets it instead.
 */
#define UCX_EXT_ALLOC_HEAD "md:sysv,md:posix,"
#define UCX_EXT_ALLOC_TAIL "huge,thp,md:*,mmap,heap"

static void ucx_ext_alloc_prio(const char *md_name)
{
    const char *cur = getenv("UCX_ALLOC_PRIO");
    size_t head = strlen(UCX_EXT_ALLOC_HEAD), tail = strlen(UCX_EXT_ALLOC_TAIL), len;
    char value[256];

    if (cur == NULL) {
        snprintf(value, sizeof(value), "%smd:%s,%s", UCX_EXT_ALLOC_HEAD, md_name,
                 UCX_EXT_ALLOC_TAIL);
    } else {
        len = strlen(cur);
        if ((len < head + tail) || strncmp(cur, UCX_EXT_ALLOC_HEAD, head) ||
            strcmp(cur + len - tail, UCX_EXT_ALLOC_TAIL) ||
            ((len > head + tail) && strncmp(cur + head, "md:", 3))) {
            return;   /* the user's */
        }
        snprintf(value, sizeof(value), "%.*smd:%s,%s", (int)(len - tail), cur, md_name,
                 UCX_EXT_ALLOC_TAIL);
    }
    setenv("UCX_ALLOC_PRIO", value, 1);
}

void ucx_ext_module_load(ucx_ext_module_t *m, const ucx_ext_class_size_t *classes,
                         unsigned count)
{
    const char *what = ucx_ext_abi_mismatch(classes, count);

    if (what != NULL) {
        ucx_ext_abi_warn(m, what);
        return;
    }
    ucx_ext_counters_config_init();
    if (UCX_EXT_MODULE_BEFORE_CONFIG &&
        ucs_container_of(m->component, ucx_ext_component_t, super)->xmem) {
        ucx_ext_alloc_prio(m->component->name);
    }
    uct_component_register(m->component);
    uct_tl_register(m->component, m->tl);
    m->registered = 1;
}

void ucx_ext_module_unload(ucx_ext_module_t *m)
{
    ucx_ext_counters_dump(&m->counters);
    if (m->registered) {
        uct_tl_unregister(m->tl);
        uct_component_unregister(m->component);
        m->registered = 0;
    }
}
