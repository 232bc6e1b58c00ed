/*
 * Per-process transport counters, the proof that a transport carried traffic.
 *
 * UCX 1.13.1 in Debian is built without ENABLE_STATS, so each transport keeps its own counters:
 * one process-wide block per transport, bumped on the data paths with plain (non-atomic)
 * increments - they are statistics, a lost increment under a multi-threaded worker is harmless.
 *
 * Contract used by every test tier and benchmark: when UCX_EXT_COUNTERS_DIR is set, each process
 * writes "<dir>/<tl>.<pid>" at exit ("%h" in dir: the host name) (and ucx_ext_counters_dump() may be called earlier), one
 * "name value" pair per line. Tools sum the files of one run to check which transport moved data.
 */
#ifndef UCX_EXT_COUNTERS_H
#define UCX_EXT_COUNTERS_H

#include <stdint.h>

typedef struct ucx_ext_counters {
    const char        *tl;      /* transport name, file name prefix */
    unsigned          count;
    const char *const *names;
    uint64_t          *values;
} ucx_ext_counters_t;

/* Registers UCX_EXT_COUNTERS_DIR as a UCX configuration variable (documented by ucx_info -c,
 * and not reported as unused by UCX). Call from each transport's constructor. */
void ucx_ext_counters_config_init(void);

/* Writes the counters to $UCX_EXT_COUNTERS_DIR/<tl>.<pid> ("%h" in the variable: the host
 * name); no-op when the variable is unset. */
void ucx_ext_counters_dump(const ucx_ext_counters_t *counters);

#endif
