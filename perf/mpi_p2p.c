/*
 * mpi_p2p: MPI point-to-point as users measure it, the way the OSU micro-benchmarks do:
 * latency by ping-pong (osu_latency), bandwidth with a window of outstanding non-blocking
 * sends (osu_bw), bi-directional bandwidth (osu_bibw) and multi-pair bandwidth and message
 * rate (osu_mbw_mr: rank i of the first half with rank i of the second). Built against MPICH
 * and Open MPI (perf/meson.build). Every size's data is checked once after its timed loop.
 *
 *   mpi_p2p [-m lat|bw|bibw|mbw] [-r one|rotate] [-d same|fresh] [-s sizes] [-i iters]
 *           [-w warmup] [-W window] [--csv]
 *
 *   -m      lat (default; 2 ranks), bw and bibw (2 ranks), mbw (an even number of ranks)
 *   -r      receive buffers of a window: one (default, as OSU: every receive into the same
 *           buffer, which stays in cache) or rotate (each receive of the window into its own
 *           buffer: window x size bytes, out of cache from 64 KiB at window 64)
 *   -d      the data a ping-pong sends (lat only): same (default, as OSU: the send buffer is
 *           written once, so its lines stay in both cores' caches and a transport that reads
 *           it where it lies, as cma does, moves none of them between the cores) or fresh
 *           (each rank writes every line of its send buffer before it sends, outside the
 *           timed path, as an application that computes what it sends: the lines are then
 *           dirty in the sender's cache, and every transport moves each of them once)
 *   -s      sizes, comma-separated, K/M suffixes (default 8,64,512,4K,32K,256K,1M,4M)
 *   -i      timed iterations of a small size (fewer from 64 KiB on), -w untimed ones first
 *           (default 10% of them). Without -i, OSU's: lat 10000 (skip 100) up to 8 KiB and
 *           1000 (skip 10) above; bw, bibw, mbw 100 windows (skip 10) and 20 (skip 2)
 *   -W      sends in flight for bw, bibw and mbw (default 64)
 *
 * Prints, with --csv, "mode,bytes,lat_us_median,lat_us_mean,bw_MBps,msg_rate,bw_MBps_mean,recv"
 * (latency: one-way, median and mean over round trips; bandwidth: bytes moved by the pairs /
 * the median iteration time, and / the mean, which is OSU's statistic: the whole timed loop;
 * a shared 2-core VM preempts, which the median leaves out).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_bench.h"

#define MAX_SIZES 32
#define TAG       17

typedef enum { MODE_LAT, MODE_BW, MODE_BIBW, MODE_MBW, MODE_COUNT } p2p_mode_t;
static const char *mode_names[MODE_COUNT] = {"lat", "bw", "bibw", "mbw"};

static void die(const char *what)
{
    fprintf(stderr, "mpi_p2p: %s\n", what);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

static uint8_t pattern(size_t i, size_t size)
{
    return (uint8_t)((i * 131 + size) & 0xff);
}

static void fill(uint8_t *buf, size_t size)
{
    size_t i;

    for (i = 0; i < size; ++i) {
        buf[i] = pattern(i, size);
    }
}

static void check(const uint8_t *buf, size_t size, const char *what)
{
    size_t i;

    for (i = 0; i < size; ++i) {
        if (buf[i] != pattern(i, size)) {
            fprintf(stderr, "mpi_p2p: %s %zu bytes: byte %zu is 0x%02x, expected 0x%02x\n",
                    what, size, i, buf[i], pattern(i, size));
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
}

/* Iterations for size: fewer from 64 KiB on (a 2-core VM's minutes), at least 10. */
static int iters_for(int iters, size_t size)
{
    long n = (size <= 65536) ? iters : (long)iters * 65536 / (long)size;
    return (int)((n < 10) ? 10 : n);
}

/* OSU's iterations and warm-up (osu_util.h: LARGE_MESSAGE_SIZE 8192, LAT_LOOP_SMALL ...). */
#define OSU_LARGE 8192
static void osu_iters(int lat, size_t size, int *iters, int *skip)
{
    int large = size > OSU_LARGE;

    *iters = lat ? (large ? 1000 : 10000) : (large ? 20 : 100);
    *skip  = lat ? (large ? 10 : 100) : (large ? 2 : 10);
}

/* -d fresh: writes every cache line of the send buffer again (the same bytes, so that the
 * receiver's check still holds), which leaves each line dirty in this core's cache. */
static void rewrite(uint8_t *buf, size_t size)
{
    volatile uint8_t *v = buf;
    size_t i;

    for (i = 0; i < size; i += 64) {
        v[i] = pattern(i, size);
    }
}

/* lat: rank 0 sends, rank 1 returns; t[] one-way latencies of the timed round trips. With
 * fresh, rank 0 rewrites its send buffer before it starts the clock and rank 1 after its
 * send returned (the buffer is its own again), while rank 0 receives: neither is timed. */
static void run_lat(size_t size, int iters, int warmup, uint8_t *sbuf, uint8_t *rbuf,
                    double *t, int rank, int fresh)
{
    int k, peer = 1 - rank;

    fill(sbuf, size);
    MPI_Barrier(MPI_COMM_WORLD);
    for (k = 0; k < warmup + iters; ++k) {
        double t0;

        if (fresh && (rank == 0)) {
            rewrite(sbuf, size);
        }
        t0 = MPI_Wtime();
        if (rank == 0) {
            MPI_Send(sbuf, (int)size, MPI_BYTE, peer, TAG, MPI_COMM_WORLD);
            MPI_Recv(rbuf, (int)size, MPI_BYTE, peer, TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(rbuf, (int)size, MPI_BYTE, peer, TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(sbuf, (int)size, MPI_BYTE, peer, TAG, MPI_COMM_WORLD);
            if (fresh) {
                rewrite(sbuf, size);
            }
        }
        if (k >= warmup) {
            t[k - warmup] = (MPI_Wtime() - t0) * 1e6 / 2;
        }
    }
    check(rbuf, size, "lat");
}

/* bw, bibw, mbw: one iteration of a window of sends (and, bidirectional, of receives) from a
 * sender to its partner, then a 4-byte ack; returns its seconds on a sender, 0 elsewhere. */
static double window(size_t size, int win, int sender, int receiver, int bidir, int partner,
                     uint8_t *sbuf, uint8_t *rbuf, int rotate, MPI_Request req[])
{
    double t0 = MPI_Wtime();
    int ack = 0, j, n = 0;

    if (sender || bidir) {
        for (j = 0; j < win; ++j) {
            MPI_Isend(sbuf, (int)size, MPI_BYTE, partner, TAG, MPI_COMM_WORLD, &req[n++]);
        }
    }
    if (receiver || bidir) {
        for (j = 0; j < win; ++j) {
            MPI_Irecv(rbuf + (rotate ? (size_t)j * size : 0), (int)size, MPI_BYTE, partner, TAG,
                      MPI_COMM_WORLD, &req[n++]);
        }
    }
    for (j = 0; j < n; ++j) {   /* (MPI_Waitall: the same, and gcc 12 warns about it) */
        MPI_Wait(&req[j], MPI_STATUS_IGNORE);
    }
    if (sender) {
        MPI_Recv(&ack, 1, MPI_INT, partner, TAG + 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        return MPI_Wtime() - t0;
    }
    MPI_Send(&ack, 1, MPI_INT, partner, TAG + 1, MPI_COMM_WORLD);
    return 0;
}

int main(int argc, char **argv)
{
    size_t sizes[MAX_SIZES] = {8, 64, 512, 4096, 32768, 262144, 1 << 20, 4 << 20};
    size_t nsizes = 8, max_size = 4 << 20, s;
    int iters = -1, warmup = -1, win = 64, csv = 0, rotate = 0, fresh = 0, rank, nranks, i, k;
    p2p_mode_t mode = MODE_LAT;
    uint8_t *sbuf, *rbuf;
    MPI_Request *req;
    double *t;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    for (i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "-m") && (i + 1 < argc)) {
            for (k = 0; (k < MODE_COUNT) && strcmp(mode_names[k], argv[i + 1]); ++k) {
            }
            if (k == MODE_COUNT) {
                die("-m takes lat, bw, bibw or mbw");
            }
            mode = (p2p_mode_t)k;
            ++i;
        } else if (!strcmp(argv[i], "-r") && (i + 1 < argc)) {
            ++i;
            if (strcmp(argv[i], "one") && strcmp(argv[i], "rotate")) {
                die("-r takes one or rotate");
            }
            rotate = !strcmp(argv[i], "rotate");
        } else if (!strcmp(argv[i], "-d") && (i + 1 < argc)) {
            ++i;
            if (strcmp(argv[i], "same") && strcmp(argv[i], "fresh")) {
                die("-d takes same or fresh");
            }
            fresh = !strcmp(argv[i], "fresh");
        } else if (!strcmp(argv[i], "-s") && (i + 1 < argc)) {
            max_size = 1;
            nsizes   = mpi_bench_parse_sizes(argv[++i], sizes, MAX_SIZES, 64u << 20, &max_size);
            if (nsizes == 0) {
                die("-s sizes must be 1 byte to 64 MiB");
            }
        } else if (!strcmp(argv[i], "-i") && (i + 1 < argc)) {
            iters = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "-w") && (i + 1 < argc)) {
            warmup = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "-W") && (i + 1 < argc)) {
            win = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--csv")) {
            csv = 1;
        } else {
            die("usage: mpi_p2p [-m lat|bw|bibw|mbw] [-r one|rotate] [-d same|fresh] [-s sizes] "
                "[-i iters] [-w warmup] [-W window] [--csv]");
        }
    }
    if (((mode != MODE_MBW) && (nranks != 2)) || ((mode == MODE_MBW) && (nranks % 2))) {
        die("lat, bw and bibw run on 2 ranks, mbw on an even number");
    }
    if (fresh && (mode != MODE_LAT)) {
        die("-d fresh is for -m lat");
    }
    if ((iters == 0) || (iters < -1) || (win < 1) || (win > 1024)) {
        die("-i must be at least 1, -W 1 to 1024");
    }
    sbuf = malloc(max_size);
    rbuf = malloc(max_size * ((mode == MODE_LAT) || !rotate ? 1 : (size_t)win));
    req  = malloc(sizeof(*req) * 2 * (size_t)win);
    t    = malloc(sizeof(double) * (size_t)((iters > 10000) ? iters : 10000) + 1);
    if ((sbuf == NULL) || (rbuf == NULL) || (req == NULL) || (t == NULL)) {
        die("out of memory (try smaller -s or -W)");
    }
    if (csv && (rank == 0)) {
        printf("mode,bytes,lat_us_median,lat_us_mean,bw_MBps,msg_rate,bw_MBps_mean,recv\n");
    }
    for (s = 0; s < nsizes; ++s) {
        size_t size = sizes[s];
        int pairs = nranks / 2, half = rank < pairs, partner = half ? rank + pairs : rank - pairs;
        double sum = 0, p50, bw = -1, rate = -1, bw_mean = -1;
        int n, w;

        if (iters < 0) {
            osu_iters(mode == MODE_LAT, size, &n, &w);
            w = (warmup >= 0) ? warmup : w;
        } else {
            n = iters_for(iters, size);
            w = (warmup >= 0) ? (warmup * n + iters - 1) / iters : n / 10;
        }

        if (mode == MODE_LAT) {
            run_lat(size, n, w, sbuf, rbuf, t, rank, fresh);
        } else {
            fill(sbuf, size);
            MPI_Barrier(MPI_COMM_WORLD);
            for (k = 0; k < w + n; ++k) {
                double sec = window(size, win, half, !half, mode == MODE_BIBW, partner, sbuf,
                                    rbuf, rotate, req);
                if (k >= w) {
                    t[k - w] = sec * 1e6;
                }
            }
            if (!half || (mode == MODE_BIBW)) {   /* what this rank received */
                check(rbuf + (rotate ? (size_t)(win - 1) * size : 0), size, mode_names[mode]);
            }
        }
        for (k = 0; k < n; ++k) {
            sum += t[k];
        }
        p50 = mpi_bench_median(t, n);
        if (mode != MODE_LAT) {
            /* one sender's rate; the pairs' sum is rank 0's times the pairs (rank 0 reports) */
            double dirs = (mode == MODE_BIBW) ? 2 : 1;
            bw      = (double)size * win * dirs * pairs / p50;
            rate    = win * dirs * pairs / (p50 * 1e-6);
            bw_mean = (double)size * win * dirs * pairs * n / sum;
        }
        if (rank == 0) {
            if (csv) {
                printf("%s,%zu,", mode_names[mode], size);
                printf((mode == MODE_LAT) ? "%.3f,%.3f," : ",,", p50, sum / n);
                printf((bw >= 0) ? "%.1f,%.0f," : ",,", bw, rate);
                if (bw_mean >= 0) {
                    printf("%.1f", bw_mean);
                }
                printf(",%s\n", (mode == MODE_LAT) ? "" : rotate ? "rotate" : "one");
            } else if (mode == MODE_LAT) {
                printf("%-4s %9zu bytes  median %9.3f us  mean %9.3f us\n", mode_names[mode],
                       size, p50, sum / n);
            } else {
                printf("%-4s %9zu bytes  %10.1f MB/s (mean %10.1f)  %12.0f msg/s  receive %s\n",
                       mode_names[mode], size, bw, bw_mean, rate, rotate ? "rotate" : "one");
            }
            fflush(stdout);
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
    free(sbuf);
    free(rbuf);
    free(req);
    free(t);
    MPI_Finalize();
    return 0;
}
