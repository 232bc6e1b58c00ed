/*
 * pingpong - MPI ping-pong between ranks 0 and 1 with a data check on every iteration.
 *
 *   pingpong [-s SIZES] [-i ITERS] [-w WARMUP] [--csv FILE] [--no-check] [-q]
 *
 *   -s SIZES    comma list of message sizes, units K/M/G allowed (binary), e.g. -s 1,64K,4M;
 *               a range "MIN:MAX" means every power of two from MIN to MAX.
 *               Default 1:4M (1 B .. 4 MiB, powers of two).
 *   -i ITERS    timed round trips per size. Default: 1000, fewer above 256 KiB so that a size
 *               moves about 256 MiB each way (at least 20).
 *   -w WARMUP   untimed round trips before each size (default: ITERS/10, at least 2).
 *   --csv FILE  also write CSV ("-" = stdout instead of the table; the PASS/FAIL line then
 *               follows the rows). Columns: bytes,iters,lat_us_median,lat_us_min,lat_us_avg,bw_MBps
 *   --no-check  skip the per-iteration pattern fill and check (pure timing).
 *   -q          no table (with --csv FILE), only the PASS/FAIL line.
 *
 * Latency is half the round trip, median over the timed iterations; bandwidth is
 * bytes / median latency in MB/s (10^6 bytes/s). Rank 0 fills a fresh pattern and clears its
 * receive buffer before each round trip (outside the timed region), rank 1 echoes, rank 0 checks
 * the echo after the timed region: a corrupted or stale transfer in either direction fails.
 * Ranks other than 0 and 1 only wait. Exit code 0 and a "PASS pingpong" line when every
 * check passed.
 */
#include "mpi_check.h"

#define MAX_SIZES 64
#define TAG       17

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static int add_size(size_t *sizes, int n, size_t s)
{
    if (n >= MAX_SIZES) {
        fprintf(stderr, "pingpong: more than %d sizes\n", MAX_SIZES);
        exit(2);
    }
    sizes[n] = s;
    return n + 1;
}

/* Parses "-s" lists: items separated by commas, each a size or a power-of-two range MIN:MAX. */
static int parse_sizes(char *arg, size_t *sizes)
{
    int n = 0;
    char *item, *save = NULL, *colon;
    size_t lo, hi, s;

    for (item = strtok_r(arg, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        colon = strchr(item, ':');
        if (colon) {
            *colon = '\0';
            if (mc_parse_size(item, &lo) || mc_parse_size(colon + 1, &hi) || lo == 0 || hi < lo) {
                fprintf(stderr, "pingpong: bad size range '%s:%s'\n", item, colon + 1);
                exit(2);
            }
            for (s = lo; s <= hi; s *= 2) {
                n = add_size(sizes, n, s);
            }
        } else {
            if (mc_parse_size(item, &s)) {
                fprintf(stderr, "pingpong: bad size '%s'\n", item);
                exit(2);
            }
            n = add_size(sizes, n, s);
        }
    }
    return n;
}

static int default_iters(size_t size)
{
    size_t budget = (size_t)256 << 20;

    if (size <= (64 << 10) || budget / size >= 1000) {
        return 1000;
    }
    return (budget / size) < 20 ? 20 : (int)(budget / size);
}

static void usage(void)
{
    fprintf(stderr, "usage: pingpong [-s SIZES] [-i ITERS] [-w WARMUP] [--csv FILE] "
                    "[--no-check] [-q]   (see the comment at the top of pingpong.c)\n");
    exit(2);
}

int main(int argc, char **argv)
{
    size_t sizes[MAX_SIZES], max_size = 0, size;
    char   default_sizes[] = "1:4M", *size_arg = default_sizes, detail[128];
    int    nsizes, iters_opt = 0, warmup_opt = -1, check = 1, quiet = 0, i, k, it;
    const char *csv_path = NULL;
    FILE *csv = NULL;
    uint8_t *sbuf, *rbuf;
    double *lat;

    mc_init(&argc, &argv);
    for (i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "-s") && i + 1 < argc) {
            size_arg = argv[++i];
        } else if (!strcmp(argv[i], "-i") && i + 1 < argc) {
            if ((iters_opt = atoi(argv[++i])) <= 0) {
                usage();
            }
        } else if (!strcmp(argv[i], "-w") && i + 1 < argc) {
            warmup_opt = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--csv") && i + 1 < argc) {
            csv_path = argv[++i];
        } else if (!strcmp(argv[i], "--no-check")) {
            check = 0;
        } else if (!strcmp(argv[i], "-q")) {
            quiet = 1;
        } else {
            usage();
        }
    }
    if (mc_size < 2) {
        fprintf(stderr, "pingpong: needs at least 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    nsizes = parse_sizes(size_arg, sizes);
    for (k = 0; k < nsizes; ++k) {
        max_size = sizes[k] > max_size ? sizes[k] : max_size;
    }
    sbuf = mc_malloc(max_size);
    rbuf = mc_malloc(max_size);
    lat  = mc_malloc(sizeof(double) * (iters_opt > 0 ? iters_opt : 1000)); /* the max */
    memset(sbuf, 0, max_size);
    memset(rbuf, 0, max_size);

    if (mc_rank == 0) {
        if (csv_path && !strcmp(csv_path, "-")) {
            csv   = stdout;
            quiet = 1;
        } else if (csv_path && !(csv = fopen(csv_path, "w"))) {
            perror(csv_path);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        if (csv) {
            fprintf(csv, "bytes,iters,lat_us_median,lat_us_min,lat_us_avg,bw_MBps\n");
        }
        if (!quiet) {
            printf("# pingpong rank 0 <-> rank 1, %d ranks, data check %s\n", mc_size,
                   check ? "on" : "off");
            printf("%10s %7s %12s %10s %10s %11s\n", "bytes", "iters", "lat_us_med",
                   "lat_us_min", "lat_us_avg", "MB/s");
        }
    }

    for (k = 0; k < nsizes; ++k) {
        int iters  = iters_opt > 0 ? iters_opt : default_iters(sizes[k]);
        int warmup = warmup_opt >= 0 ? warmup_opt : (iters / 10 < 2 ? 2 : iters / 10);
        double sum = 0;

        size = sizes[k];
        MC_CALL(MPI_Barrier(MPI_COMM_WORLD));
        for (it = -warmup; it < iters; ++it) {
            uint64_t seed = ((uint64_t)k << 32) + (uint64_t)(it + warmup);
            double t0;

            if (mc_rank == 0) {
                if (check) {
                    mc_fill(sbuf, size, seed);
                    memset(rbuf, 0xee, size);
                }
                t0 = MPI_Wtime();
                MC_CALL(MPI_Send(sbuf, (int)size, MPI_BYTE, 1, TAG, MPI_COMM_WORLD));
                MC_CALL(MPI_Recv(rbuf, (int)size, MPI_BYTE, 1, TAG, MPI_COMM_WORLD,
                                 MPI_STATUS_IGNORE));
                if (it >= 0) {
                    lat[it] = (MPI_Wtime() - t0) * 1e6 / 2;
                    sum    += lat[it];
                }
                if (check) {
                    char what[64];

                    snprintf(what, sizeof(what), "echo of round trip %d", it + warmup);
                    mc_check(rbuf, size, seed, what);
                }
            } else if (mc_rank == 1) {
                MC_CALL(MPI_Recv(rbuf, (int)size, MPI_BYTE, 0, TAG, MPI_COMM_WORLD,
                                 MPI_STATUS_IGNORE));
                MC_CALL(MPI_Send(rbuf, (int)size, MPI_BYTE, 0, TAG, MPI_COMM_WORLD));
            }
        }
        if (mc_rank == 0) {
            double med;

            qsort(lat, iters, sizeof(double), cmp_double);
            med = (iters % 2) ? lat[iters / 2] : (lat[iters / 2 - 1] + lat[iters / 2]) / 2;
            if (!quiet) {
                printf("%10zu %7d %12.2f %10.2f %10.2f %11.2f\n", size, iters, med, lat[0],
                       sum / iters, size / med);
                fflush(stdout);
            }
            if (csv) {
                fprintf(csv, "%zu,%d,%.3f,%.3f,%.3f,%.3f\n", size, iters, med, lat[0],
                        sum / iters, size / med);
            }
        }
    }
    if (csv && csv != stdout) {
        fclose(csv);
    }
    free(sbuf);
    free(rbuf);
    free(lat);
    snprintf(detail, sizeof(detail), "%d sizes %zu..%zu bytes", nsizes, sizes[0],
             sizes[nsizes - 1]);
    return mc_finish("pingpong", detail);
}
