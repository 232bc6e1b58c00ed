/*
 * pingpong - MPI ping-pong between ranks 0 and 1 with a data check on every iteration.
 *
 *   pingpong [-s SIZES] [-i ITERS] [-w WARMUP] [-b WINDOW] [--csv FILE] [--no-check] [-q]
 *
 *   -s SIZES    comma list of message sizes, units K/M/G allowed (binary), e.g. -s 1,64K,4M;
 *               a range "MIN:MAX" means every power of two from MIN to MAX.
 *               Default 1:4M (1 B .. 4 MiB, powers of two).
 *   -i ITERS    timed round trips per size. Default: 1000, fewer above 256 KiB so that a size
 *               moves about 256 MiB each way (at least 20).
 *   -w WARMUP   untimed round trips before each size (default: ITERS/10, at least 2).
 *   --csv FILE  also write CSV ("-" = stdout instead of the table; the PASS/FAIL line then
 *               follows the rows). Columns: bytes,iters,lat_us_median,lat_us_min,lat_us_avg,bw_MBps
 *   -b WINDOW   bi-directional instead: in each iteration ranks 0 and 1 both send WINDOW
 *               messages to each other at once (MPI_Isend, MPI_Irecv into WINDOW buffers,
 *               MPI_Waitall), so that both read from each other at the same time (a
 *               rendezvous get each way); each message its own pattern, checked by its
 *               receiver. The latency columns are then the iteration's time / WINDOW.
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
#define MAX_WINDOW 64

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
    fprintf(stderr, "usage: pingpong [-s SIZES] [-i ITERS] [-w WARMUP] [-b WINDOW] [--csv FILE] "
                    "[--no-check] [-q]   (see the comment at the top of pingpong.c)\n");
    exit(2);
}

/* The pattern of message j of round it of size index k from rank 'from' (-b). */
static uint64_t bidir_seed(int k, int it, int j, int from)
{
    return ((uint64_t)k << 40) + ((uint64_t)from << 36) + ((uint64_t)it << 12) + (uint64_t)j;
}

/* -b, before a round: each message of ours its pattern, each receive slice cleared. */
static void bidir_fill(uint8_t *sbuf, uint8_t *rbuf, size_t size, int window, int k, int it)
{
    int j;

    for (j = 0; j < window; ++j) {
        mc_fill(sbuf + (size_t)j * size, size, bidir_seed(k, it, j, mc_rank));
        memset(rbuf + (size_t)j * size, 0xee, size);
    }
}

/* One round of -b between ranks 0 and 1: both send window messages of size bytes to each
 * other at once, each received into its own slice of rbuf. */
static void bidir_round(uint8_t *sbuf, uint8_t *rbuf, size_t size, int window)
{
    static MPI_Request req[2 * MAX_WINDOW];
    static MPI_Status  st[2 * MAX_WINDOW];
    int peer = 1 - mc_rank, j;

    for (j = 0; j < window; ++j) {
        MC_CALL(MPI_Irecv(rbuf + (size_t)j * size, (int)size, MPI_BYTE, peer, TAG + 1 + j,
                          MPI_COMM_WORLD, &req[j]));
    }
    for (j = 0; j < window; ++j) {
        MC_CALL(MPI_Isend(sbuf + (size_t)j * size, (int)size, MPI_BYTE, peer, TAG + 1 + j,
                          MPI_COMM_WORLD, &req[window + j]));
    }
    MC_CALL(MPI_Waitall(2 * window, req, st));
}

/* -b, after a round: every message from the peer as it sent it. */
static void bidir_check(const uint8_t *rbuf, size_t size, int window, int k, int it)
{
    char what[64];
    int j;

    for (j = 0; j < window; ++j) {
        snprintf(what, sizeof(what), "message %d of round %d from rank %d", j, it, 1 - mc_rank);
        mc_check(rbuf + (size_t)j * size, size, bidir_seed(k, it, j, 1 - mc_rank), what);
    }
}

int main(int argc, char **argv)
{
    size_t sizes[MAX_SIZES], max_size = 0, size, buf_len;
    char   default_sizes[] = "1:4M", *size_arg = default_sizes, detail[128];
    int    nsizes, iters_opt = 0, warmup_opt = -1, check = 1, quiet = 0, window = 0, i, k, it;
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
        } else if (!strcmp(argv[i], "-b") && i + 1 < argc) {
            window = atoi(argv[++i]);
            if ((window <= 0) || (window > MAX_WINDOW)) {
                usage();
            }
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
    buf_len = max_size * (size_t)(window ? window : 1);   /* -b: a slice per message */
    sbuf    = mc_malloc(buf_len);
    rbuf    = mc_malloc(buf_len);
    lat     = mc_malloc(sizeof(double) * (iters_opt > 0 ? iters_opt : 1000)); /* the max */
    memset(sbuf, 0, buf_len);
    memset(rbuf, 0, buf_len);

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
            printf("# pingpong rank 0 <-> rank 1, %d ranks, data check %s%s\n", mc_size,
                   check ? "on" : "off", window ? ", bi-directional windows" : "");
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

            if (window && (mc_rank <= 1)) {
                if (check) {
                    bidir_fill(sbuf, rbuf, size, window, k, it + warmup);
                }
                t0 = MPI_Wtime();
                bidir_round(sbuf, rbuf, size, window);
                if ((mc_rank == 0) && (it >= 0)) {
                    lat[it] = (MPI_Wtime() - t0) * 1e6 / window;
                    sum    += lat[it];
                }
                if (check) {
                    bidir_check(rbuf, size, window, k, it + warmup);
                }
            } else if (mc_rank == 0) {
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
