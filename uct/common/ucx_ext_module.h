/*
 * One module definition for the project's transports: the load-time ABI guard, registration
 * of the component and transport with the UCX that loaded us, and the counters file at exit.
 *
 * UCT's internal ABI is unversioned, so a module preloaded into a process checks, before it
 * registers, that the loaded UCX is the version it was built against and that UCX's internal
 * classes have the sizes it was compiled with; on a mismatch it warns and does not register
 * (the process keeps working without it). UCX 1.13.1 loads only modules compiled into its own
 * list, so the module is preloaded and its constructor registers. UCT_SINGLE_TL_INIT is not
 * used: its destructor always unregisters, and here registration may have been skipped.
 *
 * Needs UCX's internal headers (include after config.h).
 */
#ifndef UCX_EXT_MODULE_H
#define UCX_EXT_MODULE_H

#include "ucx_ext_counters.h"

#include <ucs/async/async.h>
#include <uct/base/uct_component.h>
#include <uct/base/uct_iface.h>
#include <stddef.h>

/* One internal structure: its size in the loaded UCX, sizeof() at our build, and what a
 * difference means (the build option that shapes it). */
typedef struct ucx_ext_class_size {
    size_t     loaded;
    size_t     built;
    const char *what;
} ucx_ext_class_size_t;

/*
 * The size of ucs_async_context_t in the loaded libucs, as its own initializer writes it.
 * UCX's --enable-assertions (UCS_ENABLE_ASSERT) adds fields to structures the transports embed
 * and libucs code writes: the owner of the async context and of its lock, a guard in every
 * arbiter group (each ep's pending queue). It changes no UCS class size, so the class sizes
 * below do not see it: Debian's 1.13.1 has assertions on and the libucx-cu12 wheel has them
 * off, and a module built for one build of a release must not load into another that
 * differs. libucs says nothing of its build options at run time, so the probe asks the code:
 * it initializes a context (thread-mutex mode: its lock's owner and count exist only with
 * assertions, in both releases) in a buffer filled with a pattern, twice with two patterns,
 * and returns where the writes end, rounded up to the context's alignment.
 */
size_t ucx_ext_loaded_async_context_size(void);

/* 1 if the loaded libucs has assertions, by the probe above against our own layout. */
int ucx_ext_loaded_has_assertions(void);

/* Test hook: a build with a non-zero skew sees every UCX as a foreign layout (tests/config). */
#ifndef UCX_EXT_ABI_SKEW
#  define UCX_EXT_ABI_SKEW 0
#endif

/* The UCX classes every transport derives from, with the skew hook. */
#define UCX_EXT_LAYOUT "internal object layout (--enable-stats, --enable-debug-data)"
#define UCX_EXT_BASE_CLASSES \
    {uct_base_iface_t_class.size, sizeof(uct_base_iface_t) + UCX_EXT_ABI_SKEW, UCX_EXT_LAYOUT}, \
    {uct_base_ep_t_class.size, sizeof(uct_base_ep_t), UCX_EXT_LAYOUT}, \
    {ucx_ext_loaded_async_context_size(), sizeof(ucs_async_context_t), \
     "assertions (--enable-assertions)"}

#ifdef ENABLE_STATS
#  define UCX_EXT_BUILT_STATS 1
#else
#  define UCX_EXT_BUILT_STATS 0
#endif

typedef struct ucx_ext_module {
    uct_component_t    *component;
    uct_tl_t           *tl;
    ucx_ext_counters_t counters;
    int                built_asserts;   /* the build options the layout was compiled with, */
    int                built_stats;     /* for the refusal line */
    int                registered;
} ucx_ext_module_t;

/* NULL when version and every class size match; otherwise what differs ("version", or the
 * class's what). */
const char *ucx_ext_abi_mismatch(const ucx_ext_class_size_t *classes, unsigned count);

/* Registers the module unless the ABI differs (then warns and registers nothing). */
void ucx_ext_module_load(ucx_ext_module_t *m, const ucx_ext_class_size_t *classes,
                         unsigned count);

/* Writes the counters file and unregisters what was registered. */
void ucx_ext_module_unload(ucx_ext_module_t *m);

/*
 * Defines the module of transport _tl (its uct_tl_t is UCT_TL_NAME(_tl), its component
 * _component) whose counters block _counters is laid out as the X-macro list _LIST names it;
 * the variadic part lists further UCX classes (ucx_ext_class_size_t) the transport derives
 * from.
 */
#define UCX_EXT_MODULE_DEFINE(_tl, _component, _counters, _LIST, ...) \
    extern uct_tl_t UCT_TL_NAME(_tl); \
    static const char *const ucx_ext_counter_names_##_tl[] = {_LIST(UCX_EXT_COUNTER_NAME)}; \
    _Static_assert(ucs_static_array_size(ucx_ext_counter_names_##_tl) * sizeof(uint64_t) == \
                   sizeof(_counters), "counter names and counters block differ"); \
    static ucx_ext_module_t ucx_ext_module_##_tl = { \
        .component = &(_component), \
        .tl        = &UCT_TL_NAME(_tl), \
        .counters  = {.tl = #_tl, .count = ucs_static_array_size(ucx_ext_counter_names_##_tl), \
                      .names = ucx_ext_counter_names_##_tl, .values = (uint64_t*)&(_counters)}, \
        .built_asserts = UCS_ENABLE_ASSERT, \
        .built_stats   = UCX_EXT_BUILT_STATS \
    }; \
    /* live counters for in-process tests (found with dlsym): how many, names and values */ \
    __attribute__((visibility("default"))) unsigned \
    uct_##_tl##_counters_get(const char *const **names_p, const uint64_t **values_p) \
    { \
        *names_p  = ucx_ext_counter_names_##_tl; \
        *values_p = (const uint64_t*)&(_counters); \
        return ucs_static_array_size(ucx_ext_counter_names_##_tl); \
    } \
    UCS_F_CTOR static void ucx_ext_module_##_tl##_init(void) \
    { \
        const ucx_ext_class_size_t classes[] = {UCX_EXT_BASE_CLASSES, ##__VA_ARGS__}; \
        ucx_ext_module_load(&ucx_ext_module_##_tl, classes, ucs_static_array_size(classes)); \
    } \
    UCS_F_DTOR static void ucx_ext_module_##_tl##_cleanup(void) \
    { \
        ucx_ext_module_unload(&ucx_ext_module_##_tl); \
    }

#endif
