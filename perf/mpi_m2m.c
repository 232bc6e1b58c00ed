/*
 * mpi_m2m: many-to-many multi-pair bandwidth, the stress test of "MVAPICH with XRC: Early
 * Experiences" (Panda, OFA 2007). A multi-pair test (OSU osu_mbw_mr) gives each process one
 * partner on the other host; here every process of host A exchanges with every process of host
 * B, so a transport has to keep P*P connections busy at once (what XRC's per-host connections
 * were meant to make cheaper).
 *
 *   mpi_m2m [-s sizes] [-i iters] [-x warmup] [-w window] [-b bytes] [-m bytes] [--bidir]
 *
 *   2P ranks: ranks [0,P) are host A, [P,2P) host B (P = size/2; the launcher puts them there).
 *   -s  message sizes, comma-separated, K/M suffixes (default 1K,16K,64K,256K,1M)
 *   -i  timed iterations per size (default: from -b, 1..100)
 *   -b  bytes each sending rank moves per size when -i is not given (default 64M)
 *   -x  untimed warm-up iterations per size (default iters/10, at least 1)
 *   -w  messages in flight per pair and iteration (default 64, as osu_mbw_mr)
 *   -m  receive memory per rank (default 256M): when window * P * size needs more, messages of
 *       one window share receive slots, as osu_mbw_mr's single receive buffer does
 *   --bidir  B ranks send to A ranks at the same time
 *
 * One iteration: every sender posts `window` MPI_Isend to each partner, round-robin over the
 * partners, every receiver the matching MPI_Irecv; all wait, then each receiver sends each
 * partner a zero-byte ack (as osu_bw), so a sender never runs more than a window ahead.
 * Bandwidth = bytes moved by all P*P pairs (both directions with --bidir) / the slowest rank's
 * elapsed time; MB = 10^6 bytes. Before the timed iterations of each size, one untimed check
 * iteration (up to CHECK_WINDOW messages per pair) sends a pattern that depends on (source,
 * destination, size) into zeroed, distinct receive slots and every byte is verified. Rank 0
 * prints "# size MB/s msgs/s", one row per size, "# bytes_total N" (payload that crossed
 * between the hosts, check and warm-up included, for a harness to compare with its network
 * counters), then "PASS mpi_m2m" only if every check passed on every rank (else
 * "FAIL mpi_m2m ..." and exit 1).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_bench.h"

#define MAX_SIZES 32
#define TAG_DATA  1
#define TAG_ACK   2
/* messages per pair in the check: enough to have many in flight on every connection at once,
 * few enough that a slow transport (UD under qemu TCG: a few MB/s) is not checked for minutes */
#define CHECK_WINDOW 16

static int rank, nranks, P, side, idx;   /* side 0 = host A, 1 = host B; idx within the side */
static MPI_Request *req;
static MPI_Status *st;   /* a real array: GCC 12 warns on MPI_STATUSES_IGNORE (false positive) */

static void die(const char *what)
{
    fprintf(stderr, "mpi_m2m: %s\n", what);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

/* The byte at offset i of the message src -> dst of this size: differs per pair and size, and
 * along the message (i >> 8 too), so a message delivered to the wrong peer or slot, shifted or
 * truncated does not pass. */
static inline uint8_t pattern(int src, int dst, size_t size, size_t i)
{
    return (uint8_t)(src * 37 + dst * 101 + size * 7 + i + (i >> 8) * 13);
}

/* The partner of round-robin step j: each rank starts with a different peer, so that the P
 * senders do not all queue on the same receiver at the same moment. */
static inline int partner(int j)
{
    return (1 - side) * P + (idx + j) % P;
}

/* One iteration: `window` messages each way that this rank sends or receives, per partner.
 * Message k from partner j lands in slot k % nslots of j's receive area. */
static void iteration(size_t size, int window, int nslots, int bidir, char **sbuf, char *rbuf)
{
    int send = (side == 0) || bidir, recv = (side == 1) || bidir;
    int n = 0, j, k;

    for (k = 0; k < window; ++k) {
        for (j = 0; j < P; ++j) {
            int peer = partner(j), slot = (peer % P) * nslots + k % nslots;
            if (recv) {
                MPI_Irecv(rbuf + (size_t)slot * size, (int)size, MPI_BYTE, peer, TAG_DATA,
                          MPI_COMM_WORLD, &req[n++]);
            }
            if (send) {
                MPI_Isend(sbuf[peer % P], (int)size, MPI_BYTE, peer, TAG_DATA, MPI_COMM_WORLD,
                          &req[n++]);
            }
        }
    }
    MPI_Waitall(n, req, st);
    /* the window's end: receivers ack, senders wait for the acks of all their partners */
    n = 0;
    for (j = 0; j < P; ++j) {
        if (recv) {
            MPI_Isend(NULL, 0, MPI_BYTE, partner(j), TAG_ACK, MPI_COMM_WORLD, &req[n++]);
        }
        if (send) {
            MPI_Irecv(NULL, 0, MPI_BYTE, partner(j), TAG_ACK, MPI_COMM_WORLD, &req[n++]);
        }
    }
    MPI_Waitall(n, req, st);
}

int main(int argc, char **argv)
{
    size_t sizes[MAX_SIZES] = {1 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20};
    size_t nsizes = 5, max_size = 0, budget = (size_t)64 << 20, rmem = (size_t)256 << 20;
    size_t moved = 0, s, i;
    int iters_opt = 0, warm_opt = -1, window = 64, bidir = 0, errors = 0, all_errors, j, a;
    char **sbuf, *rbuf = NULL;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    for (a = 1; a < argc; ++a) {
        const char *v = (a + 1 < argc) ? argv[a + 1] : NULL;
        if (!strcmp(argv[a], "--bidir")) {
            bidir = 1;
            continue;
        }
        if (v == NULL) {
            goto usage;
        }
        ++a;
        if (!strcmp(argv[a - 1], "-s")) {
            char *list = strdup(v), *tok, *save = NULL;
            for (nsizes = 0, tok = strtok_r(list, ",", &save); tok && (nsizes < MAX_SIZES);
                 tok = strtok_r(NULL, ",", &save)) {
                sizes[nsizes++] = mpi_bench_parse_size(tok);
            }
            free(list);
        } else if (!strcmp(argv[a - 1], "-i")) {
            iters_opt = atoi(v);
        } else if (!strcmp(argv[a - 1], "-x")) {
            warm_opt = atoi(v);
        } else if (!strcmp(argv[a - 1], "-w")) {
            window = atoi(v);
        } else if (!strcmp(argv[a - 1], "-b")) {
            budget = mpi_bench_parse_size(v);
        } else if (!strcmp(argv[a - 1], "-m")) {
            rmem = mpi_bench_parse_size(v);
        } else {
            goto usage;
        }
    }
    if ((nranks < 2) || (nranks % 2)) {
        die("needs an even number of ranks: half on each host");
    }
    if ((nsizes == 0) || (window < 1) || (iters_opt < 0)) {
        goto usage;
    }
    for (s = 0; s < nsizes; ++s) {
        if ((sizes[s] == 0) || (sizes[s] > (1u << 30))) {
            die("-s sizes must be 1 byte to 1 GiB");
        }
        max_size = (sizes[s] > max_size) ? sizes[s] : max_size;
    }
    P    = nranks / 2;
    side = rank / P;
    idx  = rank % P;

    /* one send buffer per partner (its pattern names the pair); receive slots per partner */
    sbuf = calloc((size_t)P, sizeof(*sbuf));
    req  = malloc(sizeof(*req) * (size_t)(2 * window * P + 2 * P));
    st   = malloc(sizeof(*st) * (size_t)(2 * window * P + 2 * P));
    if ((sbuf == NULL) || (req == NULL) || (st == NULL)) {
        die("out of memory");
    }
    for (j = 0; j < P; ++j) {
        if (posix_memalign((void**)&sbuf[j], 4096, max_size)) {
            die("out of memory");
        }
    }
    {
        size_t slots = rmem / ((size_t)P * max_size);
        slots = (slots < 1) ? 1 : (slots > (size_t)window) ? (size_t)window : slots;
        if (posix_memalign((void**)&rbuf, 4096, slots * (size_t)P * max_size)) {
            die("out of memory");
        }
        memset(rbuf, 0, slots * (size_t)P * max_size);   /* touched before any timing */
    }

    if (rank == 0) {
        printf("# mpi_m2m: %d ranks per host, every one with every one of the other host "
               "(%d pairs), %s, window %d\n", P, P * P, bidir ? "bidirectional" :
               "unidirectional A->B", window);
        printf("# %-10s %14s %16s\n", "size", "MB/s", "msgs/s");
        fflush(stdout);
    }
    for (s = 0; s < nsizes; ++s) {
        size_t size = sizes[s], slots = rmem / ((size_t)P * size);
        int nslots, ncheck, iters, warm, k;
        double t0, dt, dt_max;

        nslots = (int)((slots < 1) ? 1 : (slots > (size_t)window) ? (size_t)window : slots);
        iters  = (int)(budget / (size * (size_t)window * (size_t)P));   /* per sender */
        iters  = iters_opt ? iters_opt : (iters < 1) ? 1 : (iters > 100) ? 100 : iters;
        ncheck = (nslots < CHECK_WINDOW) ? nslots : CHECK_WINDOW;
        warm   = (warm_opt >= 0) ? warm_opt : (iters / 10 > 1) ? iters / 10 : 1;
        for (j = 0; j < P; ++j) {   /* sbuf[j] goes to peer (1 - side) * P + j */
            int dst = (1 - side) * P + j;
            for (i = 0; i < size; ++i) {
                sbuf[j][i] = (char)pattern(rank, dst, size, i);
            }
        }

        /* the check: a window within the distinct slots, every byte of every slot */
        memset(rbuf, 0, (size_t)nslots * (size_t)P * size);
        MPI_Barrier(MPI_COMM_WORLD);
        iteration(size, ncheck, nslots, bidir, sbuf, rbuf);
        if ((side == 1) || bidir) {
            for (j = 0; j < P; ++j) {
                int src = (1 - side) * P + j;
                for (k = 0; k < ncheck; ++k) {
                    const uint8_t *p = (const uint8_t*)rbuf + ((size_t)j * nslots + k) * size;
                    for (i = 0; (i < size) && (p[i] == pattern(src, rank, size, i)); ++i) {
                    }
                    if (i < size) {
                        if (errors++ < 5) {
                            fprintf(stderr, "mpi_m2m: rank %d: %zu B from rank %d, slot %d: "
                                    "byte %zu is 0x%02x, expected 0x%02x\n", rank, size, src,
                                    k, i, p[i], pattern(src, rank, size, i));
                        }
                    }
                }
            }
        }

        for (k = 0; k < warm; ++k) {
            iteration(size, window, nslots, bidir, sbuf, rbuf);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        for (k = 0; k < iters; ++k) {
            iteration(size, window, nslots, bidir, sbuf, rbuf);
        }
        dt = MPI_Wtime() - t0;
        /* the aggregate is limited by the slowest rank, as osu_mbw_mr reports it */
        MPI_Reduce(&dt, &dt_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        moved += (size_t)(ncheck + (warm + iters) * window) * size * (size_t)(P * P) *
                 (size_t)(bidir ? 2 : 1);
        if (rank == 0) {
            double msgs = (double)iters * window * P * P * (bidir ? 2 : 1);
            printf("%-12zu %14.2f %16.2f\n", size, msgs * (double)size / dt_max / 1e6,
                   msgs / dt_max);
            fflush(stdout);
        }
    }

    MPI_Allreduce(&errors, &all_errors, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("# bytes_total %zu\n", moved);
        if (all_errors) {
            printf("FAIL mpi_m2m: %d received messages did not match\n", all_errors);
        } else {
            printf("PASS mpi_m2m\n");
        }
        fflush(stdout);
    }
    for (j = 0; j < P; ++j) {
        free(sbuf[j]);
    }
    free(sbuf);
    free(rbuf);
    free(req);
    free(st);
    MPI_Finalize();
    return all_errors ? 1 : 0;

usage:
    if (rank == 0) {
        fprintf(stderr, "usage: mpi_m2m [-s sizes] [-i iters] [-x warmup] [-w window] "
                "[-b bytes] [-m bytes] [--bidir]   (an even number of ranks)\n");
    }
    MPI_Finalize();
    return 2;
}
