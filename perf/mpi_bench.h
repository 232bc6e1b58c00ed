/*
 * What the perf/ MPI programs (mpi_rotbuf.c, mpi_osc.c) share: size arguments with K/M/G
 * suffixes, and the median of a sample (their figures are medians: a shared 2-core VM
 * preempts). Header-only, so that perf/bench can still build one program from its one source
 * file with mpicc (the include is found next to the source).
 */
#ifndef PERF_MPI_BENCH_H
#define PERF_MPI_BENCH_H

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static inline size_t mpi_bench_parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);

    switch (toupper((unsigned char)*end)) {
    case 'K': v *= 1024.0; break;
    case 'M': v *= 1024.0 * 1024.0; break;
    case 'G': v *= 1024.0 * 1024.0 * 1024.0; break;
    default: break;
    }
    return (size_t)v;
}

/* Parses a comma-separated list of sizes into sizes[] (at most max_n; each 1..limit bytes)
 * and raises *max_size to the largest: their number, or 0 for a bad list. */
static inline size_t mpi_bench_parse_sizes(char *arg, size_t *sizes, size_t max_n,
                                           size_t limit, size_t *max_size)
{
    char *tok, *save = NULL;
    size_t n = 0;

    for (tok = strtok_r(arg, ",", &save); tok && (n < max_n); tok = strtok_r(NULL, ",", &save)) {
        sizes[n] = mpi_bench_parse_size(tok);
        if ((sizes[n] == 0) || (sizes[n] > limit)) {
            return 0;
        }
        *max_size = (sizes[n] > *max_size) ? sizes[n] : *max_size;
        ++n;
    }
    return n;
}

static inline int mpi_bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

/* Sorts v. */
static inline double mpi_bench_median(double *v, long n)
{
    qsort(v, (size_t)n, sizeof(*v), mpi_bench_cmp_double);
    return (n % 2) ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
