/*
 * Helpers shared by the MPI test programs (pingpong, collectives, rma): error accounting,
 * deterministic data patterns, and the one-line PASS/FAIL verdict.
 *
 * The same sources build against MPICH and Open MPI, so only standard MPI-3 calls are used.
 * Every program returns the verdict as its exit code: 0 = all checks passed on all ranks.
 */
#ifndef MPI_GLUE_MPI_CHECK_H
#define MPI_GLUE_MPI_CHECK_H

#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Number of failed checks on this rank; mismatches are counted, not fatal, so one run reports
 * every broken case instead of the first. */
static long mc_errors;
static int  mc_rank, mc_size;

/* Print at most this many mismatch lines per rank: a broken transport would flood the log. */
#define MC_MAX_REPORTS 20

static inline void mc_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void mc_fail(const char *fmt, ...)
{
    va_list ap;

    if (__atomic_fetch_add(&mc_errors, 1, __ATOMIC_RELAXED) >= MC_MAX_REPORTS) {   /* threads */
        return;
    }
    va_start(ap, fmt);
    fprintf(stderr, "[rank %d] FAIL: ", mc_rank);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(stderr);
}

/* MPI errors are returned, not fatal, so the failing call can be named. */
#define MC_CALL(call)                                                          \
    do {                                                                       \
        int mc_rc_ = (call);                                                   \
        if (mc_rc_ != MPI_SUCCESS) {                                           \
            char mc_msg_[MPI_MAX_ERROR_STRING];                                \
            int  mc_len_ = 0;                                                  \
            MPI_Error_string(mc_rc_, mc_msg_, &mc_len_);                       \
            fprintf(stderr, "[rank %d] %s:%d: %s failed: %s\n", mc_rank,       \
                    __FILE__, __LINE__, #call, mc_msg_);                       \
            MPI_Abort(MPI_COMM_WORLD, 2);                                      \
        }                                                                      \
    } while (0)

static inline void mc_init(int *argc, char ***argv)
{
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &mc_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &mc_size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

/* MPI_Init_thread at level required; returns the level provided. */
static inline int mc_init_thread(int *argc, char ***argv, int required)
{
    int provided = MPI_THREAD_SINGLE;

    MPI_Init_thread(argc, argv, required, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &mc_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &mc_size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    return provided;
}

static inline void *mc_malloc(size_t size)
{
    void *p = malloc(size ? size : 1);

    if (p == NULL) {
        fprintf(stderr, "[rank %d] out of memory allocating %zu bytes\n", mc_rank, size);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return p;
}

/* Byte pattern that depends on who wrote it, for which case, and the offset, so that stale data
 * from an earlier case, a shifted copy or a message from the wrong peer never matches. */
static inline uint8_t mc_byte(uint64_t seed, size_t i)
{
    uint64_t x = (seed + 1) * 0x9e3779b97f4a7c15ull + i * 0xff51afd7ed558ccdull;

    x ^= x >> 29;
    return (uint8_t)(x ^ (x >> 7));
}

static inline void mc_fill(void *buf, size_t len, uint64_t seed)
{
    uint8_t *p = buf;
    size_t i;

    for (i = 0; i < len; ++i) {
        p[i] = mc_byte(seed, i);
    }
}

/* Returns 1 if buf holds the pattern, else reports the first differing offset and returns 0. */
static inline int mc_check(const void *buf, size_t len, uint64_t seed, const char *what)
{
    const uint8_t *p = buf;
    size_t i;

    for (i = 0; i < len; ++i) {
        if (p[i] != mc_byte(seed, i)) {
            mc_fail("%s: %zu bytes, first mismatch at offset %zu: got 0x%02x expected 0x%02x",
                    what, len, i, p[i], mc_byte(seed, i));
            return 0;
        }
    }
    return 1;
}

/* Sums the errors of all ranks, prints "PASS <name> ..." or "FAIL <name> ..." on rank 0, and
 * returns the exit code for main(). */
static inline int mc_finish(const char *name, const char *detail)
{
    long total = 0;

    MPI_Allreduce(&mc_errors, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (mc_rank == 0) {
        printf("%s %s: %d ranks, %s, %ld failed checks\n", total ? "FAIL" : "PASS", name,
               mc_size, detail, total);
        fflush(stdout);
    }
    MPI_Finalize();
    return total ? 1 : 0;
}

/* Parses "4096", "64K", "4M", "1G" (binary units); returns 0 and sets *out on success. */
static inline int mc_parse_size(const char *s, size_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);

    if (end == s) {
        return -1;
    }
    switch (*end) {
    case 'k': case 'K': v <<= 10; ++end; break;
    case 'm': case 'M': v <<= 20; ++end; break;
    case 'g': case 'G': v <<= 30; ++end; break;
    default: break;
    }
    if (*end == 'i' || *end == 'B') { /* accept KiB / KB spelling */
        end += (end[0] == 'i' && end[1] == 'B') ? 2 : 1;
    }
    if (*end != '\0') {
        return -1;
    }
    *out = (size_t)v;
    return 0;
}

#endif
