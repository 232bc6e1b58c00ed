/*
 * mpi_osc: MPI-3 one-sided communication between ranks 0 and 1, the figures of "MPI-3
 * one-sided communication on InfiniBand" (flush vs flush_local, request-based Rput/Rget and
 * their Get-Compute-Put overlap, dynamic windows, the atomic calls, Lock_all), measured
 * the way the OSU micro-benchmarks measure one-sided latency. Rank 0 is the origin, rank 1
 * the target; rank 1 waits in MPI_Barrier (its progress engine serves any active-message
 * emulation). Built against MPICH and Open MPI (perf/meson.build), so that a transport is
 * measured under both osc implementations. Every mode checks its data once after the
 * timed loop.
 *
 *   mpi_osc [-m lat|bw|overlap|lockall] [-W allocate|create|dynamic]
 *           [-y flush|flush_local|lock] [-o put,get,acc,gacc,fop,cas] [-s sizes]
 *           [-i iters] [-w warmup] [--csv]
 *
 *   -m lat      (default) one operation and its synchronisation, timed: under
 *               MPI_Win_lock_all with MPI_Win_flush (-y flush, default) or
 *               MPI_Win_flush_local (-y flush_local), or each in its own
 *               MPI_Win_lock(SHARED)/MPI_Win_unlock (-y lock)
 *      bw       a window of 64 puts or gets then one flush (MB/s)
 *      overlap  request-based Get-Compute-Put: MPI_Rget, compute, MPI_Wait, MPI_Rput,
 *               compute, MPI_Wait, MPI_Win_flush; the computation is calibrated to the
 *               communication time T; overlap = (2T - total) / T, in percent
 *      lockall  an epoch: MPI_Win_lock_all, one 8-byte put, MPI_Win_unlock_all
 *   -W          the window: MPI_Win_allocate (default), MPI_Win_create on malloc'd memory,
 *               or MPI_Win_create_dynamic with the memory attached
 *   -o          operations of lat mode (default put,get,fop,cas): acc is MPI_Accumulate
 *               (SUM, int64 elements), gacc MPI_Get_accumulate (SUM), fop
 *               MPI_Fetch_and_op(SUM) and cas MPI_Compare_and_swap on one int64_t (sizes do
 *               not apply to fop and cas); bw and overlap take put and get
 *   -s          sizes, comma-separated, K/M suffixes (default 8)
 *   -i          timed iterations (default 2000; fewer for large sizes), -w untimed first
 *               (default 100)
 *
 * Prints, with --csv, "mode,window,sync,op,bytes,lat_us_median,lat_us_mean,bw_MBps,
 * overlap_pct" (medians over iterations: a shared 2-core VM preempts).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_bench.h"

#define MAX_SIZES 32
#define BW_WINDOW 64

static void die(const char *what)
{
    fprintf(stderr, "mpi_osc: %s\n", what);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

typedef enum { OP_PUT, OP_GET, OP_ACC, OP_GACC, OP_FOP, OP_CAS, OP_COUNT } op_t;
static const char *op_names[OP_COUNT] = {"put", "get", "acc", "gacc", "fop", "cas"};

typedef enum { MODE_LAT, MODE_BW, MODE_OVERLAP, MODE_LOCKALL, MODE_COUNT } mode_t_;
static const char *mode_names[MODE_COUNT] = {"lat", "bw", "overlap", "lockall"};
typedef enum { WIN_ALLOCATE, WIN_CREATE, WIN_DYNAMIC, WIN_COUNT } win_kind_t;
static const char *win_names[WIN_COUNT] = {"allocate", "create", "dynamic"};
typedef enum { SYNC_FLUSH, SYNC_FLUSH_LOCAL, SYNC_LOCK, SYNC_COUNT } sync_t;
static const char *sync_names[SYNC_COUNT] = {"flush", "flush_local", "lock"};

static int pick(const char *what, const char *const *names, int n, const char *arg)
{
    int k;

    for (k = 0; k < n; ++k) {
        if (!strcmp(names[k], arg)) {
            return k;
        }
    }
    die(what);
    return 0;
}

/* The target's window: its base here, the displacement rank 0 addresses it by. */
typedef struct {
    MPI_Win  win;
    char     *base;
    void     *mem;      /* create/dynamic: malloc'd */
    MPI_Aint disp;      /* 0, or rank 1's address (dynamic) */
} window_t;

static void window_open(window_t *w, win_kind_t kind, size_t size, int rank)
{
    /* whole pages: Debian's MPICH 4.0.2 ch4:ucx aligns a rank's MPI_Win_allocate base down
     * (tests/mpi/KNOWN_ISSUES.md), so an unaligned slice of its node-shared segment would
     * expose the neighbour's bytes */
    size_t bytes = (size + 4095) & ~(size_t)4095;
    MPI_Aint addr;

    w->mem  = NULL;
    w->disp = 0;
    if (kind == WIN_ALLOCATE) {
        MPI_Win_allocate((MPI_Aint)bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &w->base, &w->win);
        return;
    }
    if (posix_memalign(&w->mem, 4096, bytes) != 0) {
        die("out of memory");
    }
    memset(w->mem, 0, bytes);
    w->base = w->mem;
    if (kind == WIN_CREATE) {
        MPI_Win_create(w->base, (MPI_Aint)bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &w->win);
        return;
    }
    MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &w->win);
    MPI_Win_attach(w->win, w->base, (MPI_Aint)bytes);
    MPI_Get_address(w->base, &addr);
    MPI_Bcast(&addr, 1, MPI_AINT, 1, MPI_COMM_WORLD);   /* rank 1's is the one addressed */
    w->disp = (rank == 0) ? addr : 0;
}

static void window_close(window_t *w, win_kind_t kind)
{
    if (kind == WIN_DYNAMIC) {
        MPI_Win_detach(w->win, w->base);   /* detached before it is freed */
    }
    MPI_Win_free(&w->win);
    free(w->mem);
}

/* Rank 1's window, under a lock on itself (its stores reach the public copy; no fences,
 * which would open an epoch that lock_all may not overlap). */
static void target_fill(window_t *w, int byte, size_t bytes)
{
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, w->win);
    memset(w->base, byte, bytes);
    MPI_Win_unlock(1, w->win);
}

/* The operands and results of the atomic calls: they complete at the synchronisation,
 * after one_op has returned, so they cannot live on its stack. */
static int64_t amo_one = 1, amo_cmp, amo_val, amo_old;

/* One operation of lat mode on rank 1's window (not synchronised). */
static void one_op(op_t op, const window_t *w, char *src, char *dst, size_t size, int64_t i)
{
    int n = (int)(size / sizeof(int64_t));

    switch (op) {
    case OP_PUT:
        MPI_Put(src, (int)size, MPI_BYTE, 1, w->disp, (int)size, MPI_BYTE, w->win);
        break;
    case OP_GET:
        MPI_Get(dst, (int)size, MPI_BYTE, 1, w->disp, (int)size, MPI_BYTE, w->win);
        break;
    case OP_ACC:
        MPI_Accumulate(src, n, MPI_INT64_T, 1, w->disp, n, MPI_INT64_T, MPI_SUM, w->win);
        break;
    case OP_GACC:
        MPI_Get_accumulate(src, n, MPI_INT64_T, dst, n, MPI_INT64_T, 1, w->disp, n,
                           MPI_INT64_T, MPI_SUM, w->win);
        break;
    case OP_FOP:
        MPI_Fetch_and_op(&amo_one, &amo_old, MPI_INT64_T, 1, w->disp, MPI_SUM, w->win);
        break;
    case OP_CAS:
        amo_cmp = i;
        amo_val = i + 1;
        MPI_Compare_and_swap(&amo_val, &amo_cmp, &amo_old, MPI_INT64_T, 1, w->disp, w->win);
        break;
    default:
        break;
    }
}

static void sync_op(sync_t sync, MPI_Win win)
{
    if (sync == SYNC_FLUSH_LOCAL) {
        MPI_Win_flush_local(1, win);
    } else if (sync == SYNC_FLUSH) {
        MPI_Win_flush(1, win);
    }
}

/* Spins for us microseconds without calling MPI (no progress: what overlap measures). */
static void compute(double us)
{
    double end = MPI_Wtime() + us * 1e-6;
    volatile double x = 1.0;

    while (MPI_Wtime() < end) {
        x = x * 1.0000001 + 1e-9;
    }
}

typedef struct {
    mode_t_ mode;
    win_kind_t win;
    sync_t  sync;
    int     csv, iters, warmup;
} opts_t;

static void report(const opts_t *o, op_t op, size_t size, double p50, double mean,
                   double bw, double overlap)
{
    if (o->csv) {
        printf("%s,%s,%s,%s,%zu,", mode_names[o->mode], win_names[o->win],
               sync_names[o->sync], op_names[op], size);
        printf((p50 >= 0) ? "%.3f,%.3f," : ",,", p50, mean);
        printf((bw >= 0) ? "%.1f," : ",", bw);
        printf((overlap >= 0) ? "%.1f\n" : "\n", overlap);
    } else {
        printf("%-7s %-8s %-11s %-4s %8zu bytes", mode_names[o->mode], win_names[o->win],
               sync_names[o->sync], op_names[op], size);
        if (p50 >= 0) {
            printf("  median %9.3f us  mean %9.3f us", p50, mean);
        }
        if (bw >= 0) {
            printf("  %10.1f MB/s", bw);
        }
        if (overlap >= 0) {
            printf("  overlap %5.1f %%", overlap);
        }
        printf("\n");
    }
    fflush(stdout);
}

/* Iterations for a transfer of size bytes: fewer from 64 KiB on (a 2-core VM's minutes). */
static int iters_for(const opts_t *o, size_t size)
{
    long n = (size <= 65536) ? o->iters : (long)o->iters * 65536 / (long)size;
    return (int)((n < 20) ? 20 : n);
}

/* lat mode, one operation and size; rank 0 times, rank 1 waits. */
static void run_lat(const opts_t *o, window_t *w, op_t op, size_t size, size_t max_size,
                    char *src, char *dst, double *t, int rank)
{
    int atomic = (op == OP_FOP) || (op == OP_CAS), iters = iters_for(o, size), k;
    int64_t seed = 0, got = -1, start;
    double sum = 0;

    if (rank == 1) {
        target_fill(w, ((op == OP_PUT) || (op == OP_ACC) || (op == OP_GACC)) ? 0 : 0x5a,
                    max_size);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        memset(src, (op == OP_PUT) ? 0x5a : 0, size);
        if ((op == OP_ACC) || (op == OP_GACC)) {
            for (k = 0; k < (int)(size / sizeof(int64_t)); ++k) {
                ((int64_t*)src)[k] = 1;
            }
        }
        if (o->sync != SYNC_LOCK) {
            MPI_Win_lock_all(0, w->win);
        }
        for (k = 0; k < o->warmup + iters; ++k) {
            double t0 = MPI_Wtime();
            if (o->sync == SYNC_LOCK) {
                MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, w->win);
            }
            one_op(op, w, src, dst, size, seed);
            if (o->sync == SYNC_LOCK) {
                MPI_Win_unlock(1, w->win);
            } else {
                sync_op(o->sync, w->win);
            }
            if (k >= o->warmup) {
                t[k - o->warmup] = (MPI_Wtime() - t0) * 1e6;
                sum             += t[k - o->warmup];
            }
            seed += (op == OP_CAS) ? 1 : 0;
        }
        if (o->sync == SYNC_LOCK) {
            MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, w->win);
        }
        /* check: get fetched the pattern; fop, acc and gacc added one per iteration to the
         * (first) word; cas (comparing with 0, 1, 2, ...) never matched it */
        if (atomic || (op == OP_ACC) || (op == OP_GACC)) {
            memset(&start, atomic ? 0x5a : 0, sizeof(start));
            MPI_Get(&got, 1, MPI_INT64_T, 1, w->disp, 1, MPI_INT64_T, w->win);
            MPI_Win_flush(1, w->win);
            if (got != ((op == OP_CAS) ? start : start + o->warmup + iters)) {
                fprintf(stderr, "mpi_osc: %s: rank 1's word is %lld, expected %lld\n",
                        op_names[op], (long long)got,
                        (long long)((op == OP_CAS) ? start : start + o->warmup + iters));
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        } else if (op == OP_GET) {
            memset(src, 0x5a, size);
            if (memcmp(dst, src, size) != 0) {
                fprintf(stderr, "mpi_osc: get: data mismatch at %zu bytes\n", size);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
        if (o->sync == SYNC_LOCK) {
            MPI_Win_unlock(1, w->win);
        } else {
            MPI_Win_unlock_all(w->win);
        }
        report(o, op, atomic ? sizeof(int64_t) : size, mpi_bench_median(t, iters),
               sum / iters, -1, -1);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if ((rank == 1) && (op == OP_PUT)) {
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, w->win);   /* public copy -> private */
        if ((w->base[0] != 0x5a) || (w->base[size - 1] != 0x5a)) {
            fprintf(stderr, "mpi_osc: put: data mismatch at %zu bytes (0x%02x)\n", size,
                    (unsigned char)w->base[0]);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        MPI_Win_unlock(1, w->win);
    }
}

/* Rank 1 fills its window with the pattern; then rank 0 fills its source with it and opens
 * a lock_all epoch: 1 on rank 0. */
static int epoch_begin(window_t *w, char *src, size_t size, int rank)
{
    if (rank == 1) {
        target_fill(w, 0x5a, size);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank != 0) {
        return 0;
    }
    memset(src, 0x5a, size);
    MPI_Win_lock_all(0, w->win);
    return 1;
}

/* bw mode: BW_WINDOW puts or gets of size bytes, then one flush. */
static void run_bw(const opts_t *o, window_t *w, op_t op, size_t size, char *src, char *dst,
                   double *t, int rank)
{
    long n    = (long)(256u << 20) / (long)(size * BW_WINDOW);
    int iters = (int)((n < 10) ? 10 : (n > o->iters / 10) ? o->iters / 10 + 1 : n), k, j;
    double sum = 0;

    if (epoch_begin(w, src, size, rank)) {
        for (k = 0; k < o->warmup / 10 + iters; ++k) {
            double t0 = MPI_Wtime();
            for (j = 0; j < BW_WINDOW; ++j) {
                one_op(op, w, src, dst, size, 0);
            }
            MPI_Win_flush(1, w->win);
            if (k >= o->warmup / 10) {
                t[k - o->warmup / 10] = (MPI_Wtime() - t0) * 1e6;
                sum                  += t[k - o->warmup / 10];
            }
        }
        MPI_Win_unlock_all(w->win);
        if ((op == OP_GET) && (memcmp(dst, src, size) != 0)) {
            fprintf(stderr, "mpi_osc: bw get: data mismatch at %zu bytes\n", size);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        double p50 = mpi_bench_median(t, iters);
        report(o, op, size, -1, -1, (double)size * BW_WINDOW / p50, -1);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* The request-based transfer pair of overlap mode, with c us of computation after each
 * call (0: none). */
static double gcp(const window_t *w, char *src, char *dst, size_t size, double c)
{
    double t0 = MPI_Wtime();
    MPI_Request r;

    MPI_Rget(dst, (int)size, MPI_BYTE, 1, w->disp, (int)size, MPI_BYTE, w->win, &r);
    if (c > 0) {
        compute(c);
    }
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    MPI_Rput(src, (int)size, MPI_BYTE, 1, w->disp, (int)size, MPI_BYTE, w->win, &r);
    if (c > 0) {
        compute(c);
    }
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    MPI_Win_flush(1, w->win);
    return (MPI_Wtime() - t0) * 1e6;
}

/* overlap mode: Get-Compute-Put with MPI_Rget/MPI_Rput. */
static void run_overlap(const opts_t *o, window_t *w, size_t size, char *src, char *dst,
                        double *t, int rank)
{
    int iters = iters_for(o, size) / 2 + 10, k;
    double comm, total, overlap;

    if (epoch_begin(w, src, size, rank)) {
        for (k = 0; k < 5; ++k) {
            gcp(w, src, dst, size, 0);
        }
        for (k = 0; k < iters; ++k) {
            t[k] = gcp(w, src, dst, size, 0);
        }
        comm = mpi_bench_median(t, iters);
        for (k = 0; k < iters; ++k) {
            t[k] = gcp(w, src, dst, size, comm / 2);
        }
        total = mpi_bench_median(t, iters);
        MPI_Win_unlock_all(w->win);
        if (memcmp(dst, src, size) != 0) {
            fprintf(stderr, "mpi_osc: overlap: data mismatch at %zu bytes\n", size);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        overlap = 100.0 * (2 * comm - total) / comm;
        overlap = (overlap < 0) ? 0 : (overlap > 100) ? 100 : overlap;
        report(o, OP_GET, size, comm, total, -1, overlap);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* lockall mode: whole passive-target epochs of one 8-byte put. */
static void run_lockall(const opts_t *o, window_t *w, char *src, double *t, int rank)
{
    double sum = 0;
    int k;

    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        memset(src, 0x5a, 8);
        for (k = 0; k < o->warmup + o->iters; ++k) {
            double t0 = MPI_Wtime();
            MPI_Win_lock_all(0, w->win);
            MPI_Put(src, 8, MPI_BYTE, 1, w->disp, 8, MPI_BYTE, w->win);
            MPI_Win_unlock_all(w->win);
            if (k >= o->warmup) {
                t[k - o->warmup] = (MPI_Wtime() - t0) * 1e6;
                sum             += t[k - o->warmup];
            }
        }
        report(o, OP_PUT, 8, mpi_bench_median(t, o->iters), sum / o->iters, -1, -1);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
    size_t sizes[MAX_SIZES] = {8}, nsizes = 1, max_size = 8, s;
    int ops = -1, rank, nranks, i;
    opts_t o = {MODE_LAT, WIN_ALLOCATE, SYNC_FLUSH, 0, 2000, 100};
    char *src, *dst, *tok, *save = NULL;
    window_t w;
    double *t;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    for (i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "-o") && (i + 1 < argc)) {
            ops = 0;
            for (tok = strtok_r(argv[++i], ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                ops |= 1 << pick("-o takes put,get,acc,gacc,fop,cas", op_names, OP_COUNT, tok);
            }
        } else if (!strcmp(argv[i], "-s") && (i + 1 < argc)) {
            nsizes = mpi_bench_parse_sizes(argv[++i], sizes, MAX_SIZES, 1u << 30, &max_size);
            if (nsizes == 0) {
                die("-s sizes must be 1 byte to 1 GiB");
            }
        } else if (!strcmp(argv[i], "-m") && (i + 1 < argc)) {
            o.mode = (mode_t_)pick("-m takes lat, bw, overlap or lockall", mode_names,
                                   MODE_COUNT, argv[++i]);
        } else if (!strcmp(argv[i], "-W") && (i + 1 < argc)) {
            o.win = (win_kind_t)pick("-W takes allocate, create or dynamic", win_names,
                                     WIN_COUNT, argv[++i]);
        } else if (!strcmp(argv[i], "-y") && (i + 1 < argc)) {
            o.sync = (sync_t)pick("-y takes flush, flush_local or lock", sync_names,
                                  SYNC_COUNT, argv[++i]);
        } else if (!strcmp(argv[i], "-i") && (i + 1 < argc)) {
            o.iters = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "-w") && (i + 1 < argc)) {
            o.warmup = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--csv")) {
            o.csv = 1;
        } else {
            die("usage: mpi_osc [-m lat|bw|overlap|lockall] [-W allocate|create|dynamic] "
                "[-y flush|flush_local|lock] [-o put,get,acc,gacc,fop,cas] [-s sizes] "
                "[-i iters] [-w warmup] [--csv]");
        }
    }
    if (nranks != 2) {
        die("runs on exactly 2 ranks");
    }
    if ((o.iters < 1) || (o.warmup < 0)) {
        die("-i must be at least 1, -w at least 0");
    }
    if (ops == -1) {
        ops = (o.mode == MODE_LAT) ? ((1 << OP_PUT) | (1 << OP_GET) | (1 << OP_FOP) |
                                      (1 << OP_CAS)) : ((1 << OP_PUT) | (1 << OP_GET));
    }
    if (max_size < sizeof(int64_t)) {
        max_size = sizeof(int64_t);
    }
    src = malloc(max_size);
    dst = malloc(max_size);
    t   = malloc(sizeof(double) * (size_t)(o.iters + 64));
    if ((src == NULL) || (dst == NULL) || (t == NULL)) {
        die("out of memory");
    }
    window_open(&w, o.win, max_size, rank);
    if (o.csv && (rank == 0)) {
        printf("mode,window,sync,op,bytes,lat_us_median,lat_us_mean,bw_MBps,overlap_pct\n");
    }
    if (o.mode == MODE_LOCKALL) {
        run_lockall(&o, &w, src, t, rank);
    }
    for (s = 0; (o.mode == MODE_OVERLAP) && (s < nsizes); ++s) {
        run_overlap(&o, &w, sizes[s], src, dst, t, rank);
    }
    for (i = 0; (o.mode == MODE_LAT || o.mode == MODE_BW) && (i < OP_COUNT); ++i) {
        int atomic = (i == OP_FOP) || (i == OP_CAS);
        if (!(ops & (1 << i)) || ((o.mode == MODE_BW) && (i != OP_PUT) && (i != OP_GET))) {
            continue;
        }
        for (s = 0; s < (atomic ? 1 : nsizes); ++s) {
            size_t size = atomic ? sizeof(int64_t) : sizes[s];
            if (((i == OP_ACC) || (i == OP_GACC)) && (size < sizeof(int64_t))) {
                size = sizeof(int64_t);
            }
            if (o.mode == MODE_BW) {
                run_bw(&o, &w, (op_t)i, size, src, dst, t, rank);
            } else {
                run_lat(&o, &w, (op_t)i, size, max_size, src, dst, t, rank);
            }
        }
    }
    window_close(&w, o.win);
    free(src);
    free(dst);
    free(t);
    MPI_Finalize();
    return 0;
}
