/*
 * MPI_THREAD_MULTIPLE: several threads of every rank send, receive and do one-sided
 * communication at once, with every byte checked.
 *
 *   threads [-t THREADS] [-i ITERATIONS]
 *
 * Ranks pair up (0-1, 2-3, ...; an odd last rank pairs with rank 0's partner role skipped).
 * Each of THREADS threads (default 4), ITERATIONS times (default 50):
 *  - exchanges a message with the same thread of the partner rank (MPI_Isend/MPI_Irecv,
 *    tag = thread, sizes cycling 8 B .. 256 KiB, eager and rendezvous), data checked;
 *  - puts a block into its own slot of the partner's window, flushes, reads it back with
 *    MPI_Get, flushes, and checks it (passive target: one MPI_Win_lock_all for the run);
 *  - adds 1 to a counter on rank 0 with MPI_Fetch_and_op (atomics from every thread).
 * At the end rank 0's counter must equal ranks x THREADS x ITERATIONS, and each slot must hold
 * the last block its writer put. Prints "PASS threads" on success (mpi_check.h).
 */
#include "mpi_check.h"

#include <pthread.h>
#include <unistd.h>

#define MAX_THREADS 16
#define SLOT        (64 * 1024)

static const size_t sizes[] = {8, 1024, 8192, 65536, 262144};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static int nthreads = 4, iters = 50, partner;
static MPI_Win win;
static uint8_t *win_base;     /* nthreads slots written by the partner, then the counter */

/* The seed of what rank r's thread t sends / puts in iteration i. */
static uint64_t seed_of(int r, int t, int i, int put)
{
    return ((uint64_t)r << 40) ^ ((uint64_t)t << 32) ^ ((uint64_t)i << 1) ^ (uint64_t)put;
}

static void *worker(void *arg)
{
    int t = (int)(intptr_t)arg, i;
    size_t max = sizes[NSIZES - 1], len, blen;
    uint8_t *sbuf = mc_malloc(max), *rbuf = mc_malloc(max), *pbuf = mc_malloc(SLOT),
            *gbuf = mc_malloc(SLOT);
    MPI_Aint disp = (MPI_Aint)t * SLOT;
    MPI_Request reqs[2];
    MPI_Status sts[2];
    long one = 1, old;
    char what[96];

    for (i = 0; i < iters; ++i) {
        len = sizes[(i + t) % NSIZES];
        if (partner >= 0) {
            mc_fill(sbuf, len, seed_of(mc_rank, t, i, 0));
            memset(rbuf, 0, len);
            MC_CALL(MPI_Irecv(rbuf, (int)len, MPI_BYTE, partner, t, MPI_COMM_WORLD, &reqs[0]));
            MC_CALL(MPI_Isend(sbuf, (int)len, MPI_BYTE, partner, t, MPI_COMM_WORLD, &reqs[1]));
            MC_CALL(MPI_Waitall(2, reqs, sts));
            snprintf(what, sizeof(what), "thread %d iteration %d message from %d", t, i, partner);
            mc_check(rbuf, len, seed_of(partner, t, i, 0), what);

            /* our slot in the partner's window: put, flush, get back, flush, check */
            blen = 64 + (size_t)((i * 977 + t * 131) % (SLOT - 64));
            mc_fill(pbuf, blen, seed_of(mc_rank, t, i, 1));
            MC_CALL(MPI_Put(pbuf, (int)blen, MPI_BYTE, partner, disp, (int)blen, MPI_BYTE, win));
            MC_CALL(MPI_Win_flush(partner, win));
            memset(gbuf, 0, blen);
            MC_CALL(MPI_Get(gbuf, (int)blen, MPI_BYTE, partner, disp, (int)blen, MPI_BYTE, win));
            MC_CALL(MPI_Win_flush(partner, win));
            snprintf(what, sizeof(what), "thread %d iteration %d get after put", t, i);
            mc_check(gbuf, blen, seed_of(mc_rank, t, i, 1), what);
        }
        MC_CALL(MPI_Fetch_and_op(&one, &old, MPI_LONG, 0, (MPI_Aint)nthreads * SLOT, MPI_SUM,
                                 win));
        MC_CALL(MPI_Win_flush(0, win));
    }
    free(sbuf);
    free(rbuf);
    free(pbuf);
    free(gbuf);
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_t th[MAX_THREADS];
    int provided, c, t;
    long counter = 0, want;
    char detail[128];

    provided = mc_init_thread(&argc, &argv, MPI_THREAD_MULTIPLE);
    while ((c = getopt(argc, argv, "t:i:")) != -1) {
        switch (c) {
        case 't': nthreads = atoi(optarg); break;
        case 'i': iters = atoi(optarg); break;
        default:
            if (mc_rank == 0) {
                fprintf(stderr, "usage: threads [-t THREADS] [-i ITERATIONS]\n");
            }
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    if ((nthreads < 1) || (nthreads > MAX_THREADS) || (iters < 1)) {
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (provided != MPI_THREAD_MULTIPLE) {
        mc_fail("MPI_Init_thread provided level %d, not MPI_THREAD_MULTIPLE", provided);
        return mc_finish("threads", "MPI_THREAD_MULTIPLE not provided");
    }
    partner = mc_rank ^ 1;
    if (partner >= mc_size) {
        partner = -1;     /* an odd last rank: atomics only */
    }

    MC_CALL(MPI_Win_allocate((MPI_Aint)nthreads * SLOT + 64, 1, MPI_INFO_NULL, MPI_COMM_WORLD,
                             &win_base, &win));
    memset(win_base, 0, (size_t)nthreads * SLOT + 64);
    MC_CALL(MPI_Barrier(MPI_COMM_WORLD));
    MC_CALL(MPI_Win_lock_all(0, win));
    for (t = 0; t < nthreads; ++t) {
        pthread_create(&th[t], NULL, worker, (void*)(intptr_t)t);
    }
    for (t = 0; t < nthreads; ++t) {
        pthread_join(th[t], NULL);
    }
    MC_CALL(MPI_Win_unlock_all(win));
    MC_CALL(MPI_Barrier(MPI_COMM_WORLD));

    if (mc_rank == 0) {
        MC_CALL(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
        memcpy(&counter, win_base + (size_t)nthreads * SLOT, sizeof(counter));
        MC_CALL(MPI_Win_unlock(0, win));
        want = (long)mc_size * nthreads * iters;
        if (counter != want) {
            mc_fail("Fetch_and_op counter %ld, want %ld", counter, want);
        }
    }
    MC_CALL(MPI_Win_free(&win));
    snprintf(detail, sizeof(detail), "%d threads x %d iterations of send/recv, put/get, "
             "fetch_and_op", nthreads, iters);
    return mc_finish("threads", detail);
}
