/*
 * collectives - data-checked MPI collectives on MPI_COMM_WORLD.
 *
 *   collectives [-c MAXCOUNT] [-r REPEAT]
 *
 *   -c MAXCOUNT  largest element count (int32) per rank block (default 262144 = 1 MiB);
 *                counts used: those of 1, 7, 1024, 16411 (just over 64 KiB: rendezvous),
 *                65536 and 262144 that are not above MAXCOUNT.
 *   -r REPEAT    run the whole set this many times (default 1), roots rotating.
 *
 * Covers Barrier, Bcast, Reduce (SUM, MAX), Allreduce (also in place), Allgather, Alltoall,
 * Gather, Scatter, Reduce_scatter_block and the non-blocking Ibcast/Iallreduce/Ialltoall.
 * Every element depends on (case, contributing rank, index), so misplaced blocks, stale buffers
 * and wrong reductions are caught. Prints one "PASS collectives"/"FAIL collectives" line.
 */
#include "mpi_check.h"

#include <unistd.h>

static unsigned long mc_case; /* case number, part of every value */

/* Element i of rank r's contribution in the current case; < 2^20 so sums never overflow. */
static inline int32_t val(int r, size_t i)
{
    uint64_t x = (mc_case * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)r << 40) ^ (i * 0xbf58476d1ce4e5b9ull);

    x ^= x >> 31;
    x *= 0x94d049bb133111ebull;
    return (int32_t)((x ^ (x >> 29)) & 0xfffff);
}

/* Element i of what rank `from` sends to rank `to` in an alltoall. */
static inline int32_t val2(int from, int to, size_t i)
{
    return val(from * 4096 + to, i);
}

static void fill(int32_t *buf, size_t count, int r)
{
    size_t i;

    for (i = 0; i < count; ++i) {
        buf[i] = val(r, i);
    }
}

static void check_elem(const char *op, size_t count, int root, const int32_t *buf, size_t i,
                       int32_t expect, const char *part)
{
    mc_fail("%s count=%zu root=%d case=%lu %s: element %zu is %d, expected %d", op, count, root,
            mc_case, part, i, buf[i], expect);
}

/* Checks that buf[0..count) holds rank r's values; reports the first bad element only. */
static void check_rank_block(const char *op, size_t count, int root, const int32_t *buf, int r)
{
    size_t i;
    char part[32];

    for (i = 0; i < count; ++i) {
        if (buf[i] != val(r, i)) {
            snprintf(part, sizeof(part), "block of rank %d", r);
            check_elem(op, count, root, buf, i, val(r, i), part);
            return;
        }
    }
}

/* Sum (or max) over all ranks of val(r, i). */
static int32_t reduced(size_t i, MPI_Op op)
{
    int32_t acc = val(0, i);
    int r;

    for (r = 1; r < mc_size; ++r) {
        acc = (op == MPI_SUM) ? acc + val(r, i) : (val(r, i) > acc ? val(r, i) : acc);
    }
    return acc;
}

static void check_reduced(const char *opname, size_t count, int root, const int32_t *buf,
                          MPI_Op op)
{
    size_t i;

    for (i = 0; i < count; ++i) {
        if (buf[i] != reduced(i, op)) {
            check_elem(opname, count, root, buf, i, reduced(i, op), "result");
            return;
        }
    }
}

static void test_bcast(size_t count, int root, int32_t *a, int nonblocking)
{
    MPI_Request req;

    ++mc_case;
    if (mc_rank == root) {
        fill(a, count, root);
    } else {
        memset(a, 0xff, count * 4);
    }
    if (nonblocking) {
        MC_CALL(MPI_Ibcast(a, (int)count, MPI_INT32_T, root, MPI_COMM_WORLD, &req));
        MC_CALL(MPI_Wait(&req, MPI_STATUS_IGNORE));
    } else {
        MC_CALL(MPI_Bcast(a, (int)count, MPI_INT32_T, root, MPI_COMM_WORLD));
    }
    check_rank_block(nonblocking ? "Ibcast" : "Bcast", count, root, a, root);
}

static void test_reduce(size_t count, int root, int32_t *a, int32_t *b, MPI_Op op)
{
    const char *name = op == MPI_SUM ? "Reduce(SUM)" : "Reduce(MAX)";

    ++mc_case;
    fill(a, count, mc_rank);
    memset(b, 0xff, count * 4);
    MC_CALL(MPI_Reduce(a, b, (int)count, MPI_INT32_T, op, root, MPI_COMM_WORLD));
    if (mc_rank == root) {
        check_reduced(name, count, root, b, op);
    }
}

static void test_allreduce(size_t count, int32_t *a, int32_t *b, int mode)
{
    static const char *names[] = {"Allreduce", "Allreduce(IN_PLACE)", "Iallreduce"};
    MPI_Request req;

    ++mc_case;
    fill(a, count, mc_rank);
    memset(b, 0xff, count * 4);
    if (mode == 0) {
        MC_CALL(MPI_Allreduce(a, b, (int)count, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD));
    } else if (mode == 1) {
        memcpy(b, a, count * 4);
        MC_CALL(MPI_Allreduce(MPI_IN_PLACE, b, (int)count, MPI_INT32_T, MPI_SUM,
                              MPI_COMM_WORLD));
    } else {
        MC_CALL(MPI_Iallreduce(a, b, (int)count, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD, &req));
        MC_CALL(MPI_Wait(&req, MPI_STATUS_IGNORE));
    }
    check_reduced(names[mode], count, -1, b, MPI_SUM);
}

static void test_allgather(size_t count, int32_t *a, int32_t *big)
{
    int r;

    ++mc_case;
    fill(a, count, mc_rank);
    memset(big, 0xff, count * 4 * mc_size);
    MC_CALL(MPI_Allgather(a, (int)count, MPI_INT32_T, big, (int)count, MPI_INT32_T,
                          MPI_COMM_WORLD));
    for (r = 0; r < mc_size; ++r) {
        check_rank_block("Allgather", count, -1, big + r * count, r);
    }
}

static void test_gather_scatter(size_t count, int root, int32_t *a, int32_t *big)
{
    int r;

    ++mc_case;
    fill(a, count, mc_rank);
    memset(big, 0xff, count * 4 * mc_size);
    MC_CALL(MPI_Gather(a, (int)count, MPI_INT32_T, big, (int)count, MPI_INT32_T, root,
                       MPI_COMM_WORLD));
    if (mc_rank == root) {
        for (r = 0; r < mc_size; ++r) {
            check_rank_block("Gather", count, root, big + r * count, r);
        }
    }

    ++mc_case;
    if (mc_rank == root) {
        for (r = 0; r < mc_size; ++r) {
            fill(big + r * count, count, r);
        }
    }
    memset(a, 0xff, count * 4);
    MC_CALL(MPI_Scatter(big, (int)count, MPI_INT32_T, a, (int)count, MPI_INT32_T, root,
                        MPI_COMM_WORLD));
    check_rank_block("Scatter", count, root, a, mc_rank);
}

static void test_alltoall(size_t count, int32_t *sbig, int32_t *rbig, int nonblocking)
{
    const char *name = nonblocking ? "Ialltoall" : "Alltoall";
    MPI_Request req;
    size_t i;
    int r;

    ++mc_case;
    for (r = 0; r < mc_size; ++r) {
        for (i = 0; i < count; ++i) {
            sbig[r * count + i] = val2(mc_rank, r, i);
        }
    }
    memset(rbig, 0xff, count * 4 * mc_size);
    if (nonblocking) {
        MC_CALL(MPI_Ialltoall(sbig, (int)count, MPI_INT32_T, rbig, (int)count, MPI_INT32_T,
                              MPI_COMM_WORLD, &req));
        MC_CALL(MPI_Wait(&req, MPI_STATUS_IGNORE));
    } else {
        MC_CALL(MPI_Alltoall(sbig, (int)count, MPI_INT32_T, rbig, (int)count, MPI_INT32_T,
                             MPI_COMM_WORLD));
    }
    for (r = 0; r < mc_size; ++r) {
        for (i = 0; i < count; ++i) {
            if (rbig[r * count + i] != val2(r, mc_rank, i)) {
                char part[32];

                snprintf(part, sizeof(part), "block from rank %d", r);
                check_elem(name, count, -1, rbig + r * count, i, val2(r, mc_rank, i), part);
                break;
            }
        }
    }
}

static void test_reduce_scatter_block(size_t count, int32_t *sbig, int32_t *a)
{
    size_t i;
    int r;

    ++mc_case;
    /* rank r's contribution to block b is val(r, b * count + i) */
    for (i = 0; i < count * mc_size; ++i) {
        sbig[i] = val(mc_rank, i);
    }
    memset(a, 0xff, count * 4);
    MC_CALL(MPI_Reduce_scatter_block(sbig, a, (int)count, MPI_INT32_T, MPI_SUM,
                                     MPI_COMM_WORLD));
    for (i = 0; i < count; ++i) {
        int32_t expect = 0;

        for (r = 0; r < mc_size; ++r) {
            expect += val(r, mc_rank * count + i);
        }
        if (a[i] != expect) {
            check_elem("Reduce_scatter_block", count, -1, a, i, expect, "result");
            break;
        }
    }
}

/* A barrier must hold everyone until the last rank arrives: after a synchronising barrier the
 * last rank sleeps 50 ms, and every other rank must then spend at least 30 ms in the next one
 * (local clocks only; the 20 ms margin absorbs scheduling noise on an oversubscribed host). */
static void test_barrier(void)
{
    double t0, waited;
    int i;

    for (i = 0; i < 100; ++i) {
        MC_CALL(MPI_Barrier(MPI_COMM_WORLD));
    }
    t0 = MPI_Wtime();
    if (mc_rank == mc_size - 1) {
        usleep(50000);
    }
    MC_CALL(MPI_Barrier(MPI_COMM_WORLD));
    waited = MPI_Wtime() - t0;
    if (mc_rank != mc_size - 1 && waited < 0.030) {
        mc_fail("Barrier returned after %.1f ms although rank %d entered 50 ms late",
                waited * 1e3, mc_size - 1);
    }
}

int main(int argc, char **argv)
{
    static const size_t counts[] = {1, 7, 1024, 16411, 65536, 262144};
    size_t maxcount = 262144, count;
    int repeat = 1, rep, k, i, ncounts = 0, root = 0;
    int32_t *a, *b, *big, *big2;
    char detail[96];

    mc_init(&argc, &argv);
    for (i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "-c") && i + 1 < argc && !mc_parse_size(argv[i + 1], &maxcount)) {
            ++i;
        } else if (!strcmp(argv[i], "-r") && i + 1 < argc && (repeat = atoi(argv[i + 1])) > 0) {
            ++i;
        } else {
            if (mc_rank == 0) {
                fprintf(stderr, "usage: collectives [-c MAXCOUNT] [-r REPEAT]\n");
            }
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    a    = mc_malloc(maxcount * 4);
    b    = mc_malloc(maxcount * 4);
    big  = mc_malloc(maxcount * 4 * mc_size);
    big2 = mc_malloc(maxcount * 4 * mc_size);

    test_barrier();
    for (rep = 0; rep < repeat; ++rep) {
        for (k = 0; k < (int)(sizeof(counts) / sizeof(counts[0])); ++k) {
            if ((count = counts[k]) > maxcount) {
                continue;
            }
            ncounts += (rep == 0);
            root     = (root + 1) % mc_size;
            test_bcast(count, root, a, 0);
            test_bcast(count, (root + 1) % mc_size, a, 1);
            test_reduce(count, root, a, b, MPI_SUM);
            test_reduce(count, root, a, b, MPI_MAX);
            test_allreduce(count, a, b, 0);
            test_allreduce(count, a, b, 1);
            test_allreduce(count, a, b, 2);
            test_allgather(count, a, big);
            test_gather_scatter(count, root, a, big);
            test_alltoall(count, big, big2, 0);
            test_alltoall(count, big, big2, 1);
            test_reduce_scatter_block(count, big, a);
        }
    }
    test_barrier();
    free(a);
    free(b);
    free(big);
    free(big2);
    snprintf(detail, sizeof(detail), "%d counts up to %zu int32, %lu cases", ncounts, maxcount,
             mc_case);
    return mc_finish("collectives", detail);
}
