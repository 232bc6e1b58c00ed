/*
 * mpi_rotbuf: MPI ping-pong latency and windowed bandwidth between ranks 0 and 1, where every
 * message uses the next slot of a large buffer pool ("rotating buffers"), so that with a pool
 * bigger than the last-level cache the copy paths of a shared-memory transport read and write
 * memory that is not in cache (ucx_perftest reuses a single buffer, so it always runs in cache).
 *
 *   mpi_rotbuf [-s sizes] [-i iters] [-b bytes] [-w warmup] [-W window] [-p pool] [-m lat|bw|both]
 *              [--csv]
 *
 *   -s  comma-separated message sizes, suffixes K/M/G allowed (default 8,4K,64K,1M,4M)
 *   -i  iterations (lat: round trips, bw: windows) per size; default: from -b
 *   -b  bytes to move one way per size and test when -i is not given (default 512M): lat
 *       iterations = b/size within 100..20000, bw windows = b/(size*W) within 8..5000
 *   -w  warm-up iterations per size (default: iters/10, at least 2)
 *   -W  messages in flight per bandwidth window (default 16)
 *   -p  pool size per buffer (send and receive pool each), suffixes allowed; 0 = one slot,
 *       i.e. the same buffer every time, like ucx_perftest (default 0)
 *   -m  lat, bw or both (default both)
 *
 * Latency is half the round trip; lat_us_p50 is the median over iterations (averages on a
 * shared 2-core VM are dominated by preemption). Bandwidth bw_MBps_p50 is size*window divided by
 * the median window time (window = W sends + 1 zero-byte ack); bw_MBps_overall uses total time.
 * MB = 10^6 bytes (ucx_perftest's "MB/s" are 2^20; perf/bench converts).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>

#include "mpi_bench.h"

#define MAX_SIZES 64

static long clamp_l(double v, long lo, long hi)
{
    if (v < lo) return lo;
    if (v > hi) return hi;
    return (long)v;
}

int main(int argc, char **argv)
{
    size_t sizes[MAX_SIZES];
    int nsizes = 0, csv = 0, window = 16, do_lat = 1, do_bw = 1;
    long iters_opt = 0, warm_opt = -1;
    size_t pool = 0, budget = (size_t)512 << 20;
    int rank, nprocs;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);

    for (int a = 1; a < argc; a++) {
        const char *o = argv[a];
        const char *v = (a + 1 < argc) ? argv[a + 1] : NULL;
        if (!strcmp(o, "--csv")) { csv = 1; continue; }
        if (v == NULL) goto usage;
        a++;
        if (!strcmp(o, "-s")) {
            char *dup = strdup(v), *save = NULL;
            for (char *t = strtok_r(dup, ",", &save); t && nsizes < MAX_SIZES;
                 t = strtok_r(NULL, ",", &save))
                sizes[nsizes++] = mpi_bench_parse_size(t);
            free(dup);
        } else if (!strcmp(o, "-i")) iters_opt = atol(v);
        else if (!strcmp(o, "-b")) budget = mpi_bench_parse_size(v);
        else if (!strcmp(o, "-w")) warm_opt = atol(v);
        else if (!strcmp(o, "-W")) window = atoi(v);
        else if (!strcmp(o, "-p")) pool = mpi_bench_parse_size(v);
        else if (!strcmp(o, "-m")) {
            do_lat = !strcmp(v, "lat") || !strcmp(v, "both");
            do_bw  = !strcmp(v, "bw") || !strcmp(v, "both");
        } else goto usage;
    }
    if (nprocs != 2) {
        if (rank == 0) fprintf(stderr, "mpi_rotbuf: needs exactly 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (nsizes == 0) {
        const size_t d[] = {8, 4096, 65536, 1 << 20, 4 << 20};
        for (unsigned i = 0; i < sizeof(d) / sizeof(d[0]); i++) sizes[nsizes++] = d[i];
    }
    if (window < 1) window = 1;

    size_t maxsz = 0;
    for (int i = 0; i < nsizes; i++) if (sizes[i] > maxsz) maxsz = sizes[i];
    size_t maxstride = (maxsz + 63) & ~(size_t)63;
    if (maxstride == 0) maxstride = 64;
    /* each pool holds at least one window of the largest message */
    size_t need = maxstride * (size_t)window;
    size_t alloc = pool > need ? pool : need;
    alloc = (alloc + 4095) & ~(size_t)4095;
    char *sbuf = aligned_alloc(4096, alloc), *rbuf = aligned_alloc(4096, alloc);
    char ack[4] = {0};
    if (!sbuf || !rbuf) {
        fprintf(stderr, "mpi_rotbuf: cannot allocate 2 x %zu bytes\n", alloc);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    memset(sbuf, rank + 1, alloc); /* fault every page in before timing */
    memset(rbuf, 0, alloc);

    if (rank == 0 && csv)
        printf("test,size,pool_bytes,slots,iters,lat_us_p50,lat_us_avg,bw_MBps_p50,"
               "bw_MBps_overall\n");
    else if (rank == 0)
        printf("# %-4s %10s %12s %8s %8s %12s %12s %14s %16s\n", "test", "size", "pool_bytes",
               "slots", "iters", "lat_us_p50", "lat_us_avg", "bw_MBps_p50", "bw_MBps_overall");

    for (int si = 0; si < nsizes; si++) {
        size_t size = sizes[si];
        size_t stride = (size + 63) & ~(size_t)63;
        if (stride == 0) stride = 64;
        /* pool==0: a single slot (same buffer each time); else as many as fit */
        size_t slots = pool ? alloc / stride : 1;
        if (slots == 0) slots = 1;
        size_t slot = 0;

        if (do_lat) {
            long iters = iters_opt ? iters_opt
                                   : clamp_l((double)budget / (double)(size + 64), 100, 20000);
            long warm = warm_opt >= 0 ? warm_opt : (iters / 10 > 2 ? iters / 10 : 2);
            double *t = malloc(sizeof(double) * (size_t)iters), total = 0;
            MPI_Barrier(MPI_COMM_WORLD);
            for (long it = -warm; it < iters; it++) {
                char *sp = sbuf + slot * stride, *rp = rbuf + slot * stride;
                slot = (slot + 1) % slots;
                double t0 = MPI_Wtime();
                if (rank == 0) {
                    MPI_Send(sp, (int)size, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
                    MPI_Recv(rp, (int)size, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else {
                    MPI_Recv(rp, (int)size, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(sp, (int)size, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
                }
                double dt = MPI_Wtime() - t0;
                if (it >= 0) { t[it] = dt; total += dt; }
            }
            if (rank == 0) {
                double avg = total / (double)iters * 0.5e6;
                double p50 = mpi_bench_median(t, iters) * 0.5e6;
                double bw = (double)size / (p50 * 1e-6) / 1e6;
                if (csv)
                    printf("lat,%zu,%zu,%zu,%ld,%.4f,%.4f,%.2f,%.2f\n", size, pool, slots, iters,
                           p50, avg, bw, (double)size / (avg * 1e-6) / 1e6);
                else
                    printf("  %-4s %10zu %12zu %8zu %8ld %12.4f %12.4f %14.2f %16.2f\n", "lat",
                           size,
                           pool, slots, iters, p50, avg, bw,
                           (double)size / (avg * 1e-6) / 1e6);
                fflush(stdout);
            }
            free(t);
        }

        if (do_bw) {
            long iters = iters_opt ? iters_opt
                                   : clamp_l((double)budget / ((double)(size + 64) * window),
                                             8, 5000);
            long warm = warm_opt >= 0 ? warm_opt : (iters / 10 > 2 ? iters / 10 : 2);
            double *t = malloc(sizeof(double) * (size_t)iters), total = 0;
            MPI_Request *req = malloc(sizeof(MPI_Request) * (size_t)window);
            /* a real status array: GCC 12 warns on MPI_STATUSES_IGNORE (a false positive) */
            MPI_Status *st = malloc(sizeof(MPI_Status) * (size_t)window);
            MPI_Barrier(MPI_COMM_WORLD);
            for (long it = -warm; it < iters; it++) {
                double t0 = MPI_Wtime();
                for (int j = 0; j < window; j++) {
                    /* with pool==0 every message of the window uses the same buffer */
                    size_t off = slot * stride;
                    if (pool) slot = (slot + 1) % slots;
                    if (rank == 0)
                        MPI_Isend(sbuf + off, (int)size, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &req[j]);
                    else
                        MPI_Irecv(rbuf + off, (int)size, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &req[j]);
                }
                MPI_Waitall(window, req, st);
                if (rank == 0)
                    MPI_Recv(ack, 0, MPI_BYTE, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                else
                    MPI_Send(ack, 0, MPI_BYTE, 0, 3, MPI_COMM_WORLD);
                double dt = MPI_Wtime() - t0;
                if (it >= 0) { t[it] = dt; total += dt; }
            }
            if (rank == 0) {
                double bytes = (double)size * window;
                double p50 = mpi_bench_median(t, iters);
                double bw = bytes / p50 / 1e6;
                double bwo = bytes * (double)iters / total / 1e6;
                double lat = p50 / window * 1e6;
                if (csv)
                    printf("bw,%zu,%zu,%zu,%ld,%.4f,%.4f,%.2f,%.2f\n", size, pool, slots, iters,
                           lat, total / (double)iters / window * 1e6, bw, bwo);
                else
                    printf("  %-4s %10zu %12zu %8zu %8ld %12.4f %12.4f %14.2f %16.2f\n", "bw", size,
                           pool, slots, iters, lat, total / (double)iters / window * 1e6, bw, bwo);
                fflush(stdout);
            }
            free(req);
            free(st);
            free(t);
        }
    }

    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return 0;

usage:
    if (rank == 0)
        fprintf(stderr, "usage: mpi_rotbuf [-s sizes] [-i iters] [-b bytes] [-w warmup] "
                        "[-W window] "
                        "[-p pool] [-m lat|bw|both] [--csv]\n");
    MPI_Finalize();
    return 2;
}
