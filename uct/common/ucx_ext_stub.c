/*
 * The file UCX loads for a transport (libuct_<name>.so, preloaded into UCX 1.13.1; .so.0, a
 * plugin of UCX 1.22.0): it loads the transport itself, the module beside it, only into the UCX
 * it was built for.
 *
 * UCT's internal ABI is unversioned, and each release's modules refer to symbols the other
 * lacks (1.13.1's uct_base_iface_internal_ops, 1.22.0's uct_base_rkey_compare, rcache tables
 * that moved from uct to ucs). The dynamic loader resolves data and function addresses when it
 * maps a library, before any code of it runs, so a module built for one release stops a
 * process of the other with "symbol lookup error" (preloaded: the program dies) or fails its
 * dlopen silently (a plugin). This file refers to no UCX symbol at all: it asks which UCX the
 * process runs, and either loads the transport or says, in one line, why not; the process
 * goes on without it either way.
 *
 * Built once per transport, with UCX_EXT_STUB_TL (the transport's name), UCX_EXT_STUB_IMPL
 * (the module's file name) and UCX_EXT_STUB_UCX (the UCX version it was built for).
 */
#ifndef _GNU_SOURCE
#  define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

/* The UCX of this process: its exact version through UCP, else (a UCT-only program) the
 * release family its symbols show; "" when no UCX is loaded. */
static void ucx_ext_stub_ucx_version(char *buf, size_t len)
{
    void (*get_version)(unsigned*, unsigned*, unsigned*);
    unsigned major, minor, release;

    *(void**)&get_version = dlsym(RTLD_DEFAULT, "ucp_get_version");
    if (get_version != NULL) {
        get_version(&major, &minor, &release);
        snprintf(buf, len, "%u.%u.%u", major, minor, release);
    } else if (dlsym(RTLD_DEFAULT, "uct_base_iface_internal_ops") != NULL) {
        snprintf(buf, len, "1.13");   /* gone in 1.22: every transport has its own */
    } else if (dlsym(RTLD_DEFAULT, "uct_base_rkey_compare") != NULL) {
        snprintf(buf, len, "1.22");   /* not in 1.13 */
    } else {
        snprintf(buf, len, "%s", "");
    }
}

/* loaded names a version ("1.22.0") or a family ("1.22") that built belongs to */
static int ucx_ext_stub_matches(const char *loaded, const char *built)
{
    size_t n = strlen(loaded);

    return (n > 0) && !strncmp(loaded, built, n) && ((built[n] == '\0') || (built[n] == '.'));
}

__attribute__((constructor)) static void ucx_ext_stub_load(void)
{
    char loaded[32], path[PATH_MAX];
    const char *slash;
    Dl_info self;

    ucx_ext_stub_ucx_version(loaded, sizeof(loaded));
    if (!ucx_ext_stub_matches(loaded, UCX_EXT_STUB_UCX)) {
        fprintf(stderr, "[%s] not loading the %s transport: it was built for UCX %s, and this "
                "process runs UCX %s\n", UCX_EXT_STUB_TL, UCX_EXT_STUB_TL, UCX_EXT_STUB_UCX,
                (loaded[0] != '\0') ? loaded : "none");
        return;
    }
    if ((dladdr((void*)ucx_ext_stub_load, &self) == 0) || (self.dli_fname == NULL)) {
        fprintf(stderr, "[%s] not loading the %s transport: cannot find its own file\n",
                UCX_EXT_STUB_TL, UCX_EXT_STUB_TL);
        return;
    }
    slash = strrchr(self.dli_fname, '/');
    snprintf(path, sizeof(path), "%.*s%s", (slash != NULL) ? (int)(slash - self.dli_fname + 1) : 0,
             self.dli_fname, UCX_EXT_STUB_IMPL);
    /* global: tools and tests find a transport's counters by name (dlsym) */
    if (dlopen(path, RTLD_NOW | RTLD_GLOBAL) == NULL) {
        fprintf(stderr, "[%s] not loading the %s transport: %s\n", UCX_EXT_STUB_TL,
                UCX_EXT_STUB_TL, dlerror());
    }
}
