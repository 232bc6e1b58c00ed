/*
 * UCP-level helpers shared by tools and tests.
 *
 * 1. Which transport each lane of a UCP endpoint uses. UCX 1.13.1 has no public query for it, so
 *    the lines that ucp_ep_print_info() prints are parsed; the format is (ucp_ep.c):
 *      "#                 lane[0]:  3:posix/memory.0 md[2]      -> md[2]/posix/sysdev[255] ... am wireup"
 *      "#                 lane[1]: cm tcp"
 *    A test that asks for UCX_TLS=<tl> uses this to prove UCP did not silently pick another one.
 *
 * 2. The transport counters: with UCX_EXT_COUNTERS_DIR=<dir>, each process that loaded one of our
 *    transports writes <dir>/<tl>.<pid> ("name value" lines) at exit; these functions sum them.
 *    Scripts and perf/bench use ucp_ext/counters.py, the Python reader with the same file and
 *    expectation rules (keep the two in step).
 *
 * Only public UCX headers are used.
 */
#ifndef UCP_EXT_H
#define UCP_EXT_H

#include <stddef.h>
#include <stdint.h>
#include <ucp/api/ucp.h>

#ifdef __cplusplus
extern "C" {
#endif

#define UCP_EXT_NAME_MAX 32

typedef struct ucp_ext_lane {
    int  index;                       /* lane number as UCP prints it */
    int  is_cm;                       /* a connection-manager lane (no transport resource) */
    char tl[UCP_EXT_NAME_MAX];        /* transport name ("posix"), or the cm name for a cm lane */
    char dev[UCP_EXT_NAME_MAX];       /* device name ("memory") */
    char aux_tl[UCP_EXT_NAME_MAX];    /* wireup auxiliary transport, "" if none */
    char roles[128];                  /* what UCP uses the lane for: "am", "rma_bw#0", "amo#0", ... */
} ucp_ext_lane_t;

/*
 * Fills up to max lanes of ep; returns the number of lanes found (may exceed max, then only max
 * entries are filled), or -1 if ucp_ep_print_info() output could not be captured or parsed.
 */
int ucp_ext_ep_lanes(ucp_ep_h ep, ucp_ext_lane_t *lanes, int max);

/* Transport names of the ep's lanes (cm lanes left out); returns the count or -1. */
int ucp_ext_ep_lane_tls(ucp_ep_h ep, char names[][UCP_EXT_NAME_MAX], int max);

/*
 * Checks that every lane of ep uses transport tl (or one of a comma-separated list, such as
 * "posix,cma"), except lanes on "self" (the loopback transport UCP may add when UCX_TLS includes
 * it) and cm lanes; a wireup auxiliary transport must be in tl too, and there must be at least one
 * lane. Returns 0 if so; else -1 with a readable reason (listing all lanes) in why.
 */
int ucp_ext_ep_check_tl(ucp_ep_h ep, const char *tl, char *why, size_t why_len);

/* Writes the lanes one per line ("lane[0] posix/memory am wireup") to stream. */
void ucp_ext_ep_print_lanes(ucp_ep_h ep, FILE *stream);


typedef struct ucp_ext_counter {
    char     name[UCP_EXT_NAME_MAX];
    uint64_t value;
} ucp_ext_counter_t;

/*
 * Sums the counters in all files <dir>/<tl>.<pid>. Returns the number of distinct names (fills up
 * to max), 0 when no file exists, -1 if dir cannot be read. *files_p (if not NULL) gets the number
 * of files summed.
 */
int ucp_ext_counters_read(const char *dir, const char *tl, ucp_ext_counter_t *counters, int max,
                          int *files_p);

/*
 * Checks expectations against the summed counters of tl in dir. expr is a comma-separated list of
 * conditions "name OP number" with OP one of > >= == < <= !=; a condition may list alternatives
 * separated by '|' (one of them must hold). A name that no file has counts as 0, but having no file
 * at all fails (the transport was never loaded or never exited cleanly).
 * Returns 0 if every condition holds, else -1 with the failed conditions and values in why.
 */
int ucp_ext_counters_expect(const char *dir, const char *tl, const char *expr, char *why,
                            size_t why_len);

#ifdef __cplusplus
}
#endif

#endif
