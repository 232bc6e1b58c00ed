/*
 * bibw_bound: the floor under bi-directional bandwidth on shared memory, without UCX or MPI.
 * Two processes, one pinned on each CPU, move S-byte messages to each other at the same time,
 * each receive into the next of W slots (mpi_p2p -m bibw -r rotate: window 64, out of cache
 * from 64 KiB on) or always into one (-r one, OSU's pattern), by each mechanism a shared-memory
 * transport has:
 *
 *   memcpy  each process copies its own send buffer into its receive slots: one copy of every
 *           byte by the core that receives it, no page walk, no line between the cores. No
 *           transport moves a message with less, so this is the machine's own bound.
 *   pvm     each process reads the other's send buffer with process_vm_readv, one call per
 *           message (cma's zero copy, and rdmach's where it keeps the page walk)
 *   ring    each process copies its send buffer into a ring in shared memory in 16 KiB pieces
 *           and copies the other's pieces out of that one's 2 MiB ring into the receive slot: two
 *           copies, every line crossing between the cores (rdmach's ring, posix's FIFO)
 *
 *   bibw_bound [-r one|rotate] [-W window] [-o offset] [-n reps] [SIZES...]
 *              (bytes, K/M suffixes; default 16K 64K 256K 1M 4M; window 64; reps 9; -o: the
 *              send and receive buffers start offset bytes into a page, default 0, malloc's
 *              large blocks 16; the ring's pieces stay page-aligned)
 *
 * Prints per size and mechanism the bytes both processes received per second, in MB/s (10^6,
 * what mpi_p2p -m bibw reports): the median of the repetitions, their range and count, apart
 * for each mode of the VM. A 2-vCPU VM's cores change places: a line crosses between them in
 * 40-80 ns at some times and 200-250 at others (perf/core_to_core), and the ring, whose every
 * line crosses, runs 3-4x faster in the first. So each repetition is timed between two probes
 * of that trip (4,000 hand-overs of one line), and counts as "near" (both under 150 ns, perf/
 * bench's line), "far" (both above) or not at all (the mode changed during it).
 *
 * Why: in one direction rdmach beats sm by 2x from 1 MiB because the sender's idle core copies
 * half of each message; in both directions neither core is idle, and each core copies what it
 * receives. The ratio of sm's bi-directional figure to this program's memcpy
 * and pvm figures is how far any transport can get ahead of sm (perf/RESULTS.md,
 * "Bi-directional bandwidth into rotating buffers: the bound").
 */
#ifndef _GNU_SOURCE
#  define _GNU_SOURCE
#endif
#include "ucx_ext_sys.h"

#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_SIZES   16
#define MAX_REPS    31
#define PIECE       16384ul                 /* a ring piece: rdmach's chunk */
#define RING_PIECES 128ul                   /* 2 MiB a ring: rdmach's large ring */
#define BYTES_REP   (1ul << 30)             /* per process and repetition */
#define HANDOVERS   4000
#define NEAR_NS     150.0

enum { MECH_MEMCPY, MECH_PVM, MECH_RING, MECH_COUNT };
static const char *mech_names[MECH_COUNT] = {"memcpy", "pvm", "ring"};
enum { MODE_NEAR, MODE_FAR, MODE_COUNT };
static const char *mode_names[MODE_COUNT] = {"near", "far"};

/* one direction's ring: written by its sender, read by its receiver */
typedef struct {
    volatile uint64_t head __attribute__((aligned(64)));   /* pieces written */
    volatile uint64_t tail __attribute__((aligned(64)));   /* pieces read */
    char              data[RING_PIECES][PIECE] __attribute__((aligned(64)));
} ring_t;

/* what both processes see: the start barrier, each side's buffer address and time */
typedef struct {
    volatile uint64_t arrived[2] __attribute__((aligned(64)));
    volatile uint64_t ball __attribute__((aligned(64)));   /* the probe's line */
    uintptr_t         sbuf[2];
    pid_t             pid[2];
    double            secs[2];
    ring_t            ring[2];              /* ring[i]: from process i to the other */
} shared_t;

static double now_s(void)
{
    return ucx_ext_now_ns() * 1e-9;
}

static void pin(int cpu)
{
    cpu_set_t set;

    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0) {
        perror("bibw_bound: sched_setaffinity (needs 2 CPUs)");
        exit(1);
    }
}

/* both processes pass generation g together */
static void barrier(shared_t *sh, int me, uint64_t g)
{
    __atomic_store_n(&sh->arrived[me], g, __ATOMIC_RELEASE);
    while (__atomic_load_n(&sh->arrived[!me], __ATOMIC_ACQUIRE) < g) {
    }
}

/* one line's trip from core to core, ns (process 0's figure; process 1 returns 0) */
static double line_trip_ns(shared_t *sh, int me, uint64_t *gen)
{
    uint64_t i;
    double t0;

    sh->ball = 0;
    barrier(sh, me, ++*gen);
    t0 = now_s();
    for (i = 0; i < HANDOVERS; i += 2) {
        while (__atomic_load_n(&sh->ball, __ATOMIC_ACQUIRE) != i + me) {
        }
        __atomic_store_n(&sh->ball, i + me + 1, __ATOMIC_RELEASE);
    }
    t0 = (now_s() - t0) * 1e9 / HANDOVERS;
    barrier(sh, me, ++*gen);    /* both are out of the loop before the next reset */
    return (me == 0) ? t0 : 0;
}

static size_t parse_size(const char *s)
{
    char *end;
    size_t v = strtoul(s, &end, 0);

    if ((*end == 'K') || (*end == 'k')) v <<= 10;
    else if ((*end == 'M') || (*end == 'm')) v <<= 20;
    return v;
}

/* the ring: push this process's message in pieces while pulling the other's into dst */
static void ring_message(shared_t *sh, int me, const char *src, char *dst, size_t size)
{
    ring_t *out = &sh->ring[me], *in = &sh->ring[!me];
    size_t sent = 0, got = 0, n;
    uint64_t h, t;

    while ((sent < size) || (got < size)) {
        h = out->head;
        if ((sent < size) && (h - __atomic_load_n(&out->tail, __ATOMIC_ACQUIRE) < RING_PIECES)) {
            n = (size - sent < PIECE) ? size - sent : PIECE;
            memcpy(out->data[h % RING_PIECES], src + sent, n);
            __atomic_store_n(&out->head, h + 1, __ATOMIC_RELEASE);
            sent += n;
        }
        t = in->tail;
        if ((got < size) && (__atomic_load_n(&in->head, __ATOMIC_ACQUIRE) != t)) {
            n = (size - got < PIECE) ? size - got : PIECE;
            memcpy(dst + got, in->data[t % RING_PIECES], n);
            __atomic_store_n(&in->tail, t + 1, __ATOMIC_RELEASE);
            got += n;
        }
    }
}

/* one repetition of one mechanism: count messages of size bytes, each into the next slot */
static int run(shared_t *sh, int me, int mech, char *sbuf, char *rbuf, size_t size,
               size_t slots, long count)
{
    pid_t peer = sh->pid[!me];
    char *peer_sbuf = (char*)sh->sbuf[!me];
    double t0 = now_s();
    long k;

    for (k = 0; k < count; ++k) {
        char *dst = rbuf + (size_t)(k % (long)slots) * size;

        if (mech == MECH_MEMCPY) {
            memcpy(dst, sbuf, size);
            __asm__ volatile("" ::"r"(dst) : "memory");
        } else if (mech == MECH_PVM) {
            struct iovec l = {dst, size}, r = {peer_sbuf, size};

            if (process_vm_readv(peer, &l, 1, &r, 1, 0) != (ssize_t)size) {
                perror("bibw_bound: process_vm_readv");
                return -1;
            }
        } else {
            ring_message(sh, me, sbuf, dst, size);
        }
    }
    sh->secs[me] = now_s() - t0;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double*)a, y = *(const double*)b;

    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    static const size_t defaults[] = {16384, 65536, 262144, 1048576, 4194304};
    size_t sizes[MAX_SIZES], nsizes = 0, max_size = 0, slots, i;
    static double rates[MODE_COUNT][MECH_COUNT][MAX_REPS];
    int window = 64, rotate = 1, reps = 9, me, mech, mode, r, a;
    size_t offset = 0;
    uint64_t gen = 0;
    shared_t *sh;
    char *sbuf, *rbuf;
    pid_t child;
    long count;

    for (a = 1; a < argc; ++a) {
        if (!strcmp(argv[a], "-r") && (a + 1 < argc) &&
            (!strcmp(argv[a + 1], "one") || !strcmp(argv[a + 1], "rotate"))) {
            rotate = !strcmp(argv[++a], "rotate");
        } else if (!strcmp(argv[a], "-W") && (a + 1 < argc)) {
            window = atoi(argv[++a]);
        } else if (!strcmp(argv[a], "-o") && (a + 1 < argc)) {
            offset = strtoul(argv[++a], NULL, 0) % 4096;
        } else if (!strcmp(argv[a], "-n") && (a + 1 < argc)) {
            reps = atoi(argv[++a]);
        } else if ((argv[a][0] >= '0') && (argv[a][0] <= '9') && (nsizes < MAX_SIZES)) {
            sizes[nsizes++] = parse_size(argv[a]);
        } else {
            fprintf(stderr, "usage: bibw_bound [-r one|rotate] [-W window] [-o offset] [-n reps] "
                            "[SIZES...]\n");
            return 2;
        }
    }
    if ((window < 1) || (reps < 1) || (reps > MAX_REPS)) {
        fprintf(stderr, "bibw_bound: -W takes 1 or more, -n 1-%d\n", MAX_REPS);
        return 2;
    }
    if (nsizes == 0) {
        nsizes = sizeof(defaults) / sizeof(defaults[0]);
        memcpy(sizes, defaults, sizeof(defaults));
    }
    for (i = 0; i < nsizes; ++i) {
        if ((sizes[i] == 0) || (sizes[i] > (64ul << 20))) {
            fprintf(stderr, "bibw_bound: sizes are 1 byte-64 MiB\n");
            return 2;
        }
        max_size = (sizes[i] > max_size) ? sizes[i] : max_size;
    }
    slots = rotate ? (size_t)window : 1;

    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        perror("bibw_bound: mmap");
        return 1;
    }
    memset(sh, 0, sizeof(*sh));
    child = fork();
    if (child < 0) {
        perror("bibw_bound: fork");
        return 1;
    }
    me = (child == 0);
    pin(me);
    /* each process's buffers are its own, allocated and touched after the fork */
    sbuf = aligned_alloc(4096, max_size + 4096);
    rbuf = aligned_alloc(4096, max_size * slots + 4096);
    if ((sbuf == NULL) || (rbuf == NULL)) {
        fprintf(stderr, "bibw_bound: no memory\n");
        return 1;
    }
    memset(sbuf, 1 + me, max_size + 4096);
    memset(rbuf, 0, max_size * slots + 4096);
    sbuf += offset;   /* as malloc's large blocks, 16 bytes into a page: -o 16 */
    rbuf += offset;
    sh->sbuf[me] = (uintptr_t)sbuf;
    sh->pid[me]  = getpid();
    barrier(sh, me, ++gen);

    if (me == 0) {
        printf("# %s receive buffers, window %d; MB/s both directions, median [range] (count)"
               " of %d repetitions by mode\n", rotate ? "rotating" : "one", window, reps);
        printf("%10s %5s", "bytes", "mode");
        for (mech = 0; mech < MECH_COUNT; ++mech) printf(" %28s", mech_names[mech]);
        printf("\n");
    }
    for (i = 0; i < nsizes; ++i) {
        int n[MODE_COUNT][MECH_COUNT] = {{0}};

        count = (long)(BYTES_REP / sizes[i]);
        count = (count < 64) ? 64 : count;
        for (r = 0; r < reps; ++r) {
            for (mech = 0; mech < MECH_COUNT; ++mech) {
                double before, after, rate;

                sh->ring[0].head = sh->ring[0].tail = 0;
                sh->ring[1].head = sh->ring[1].tail = 0;
                barrier(sh, me, ++gen);
                /* a window's worth untimed first: the slots' pages and the caches settle */
                if (run(sh, me, mech, sbuf, rbuf, sizes[i], slots, (long)slots) != 0) {
                    kill(sh->pid[!me], SIGKILL);
                    return 1;
                }
                before = line_trip_ns(sh, me, &gen);
                if (run(sh, me, mech, sbuf, rbuf, sizes[i], slots, count) != 0) {
                    kill(sh->pid[!me], SIGKILL);
                    return 1;
                }
                after = line_trip_ns(sh, me, &gen);
                rate  = 2.0 * sizes[i] * count /
                        ((sh->secs[0] > sh->secs[1]) ? sh->secs[0] : sh->secs[1]) / 1e6;
                if ((before < NEAR_NS) && (after < NEAR_NS)) {
                    rates[MODE_NEAR][mech][n[MODE_NEAR][mech]++] = rate;
                } else if ((before >= NEAR_NS) && (after >= NEAR_NS)) {
                    rates[MODE_FAR][mech][n[MODE_FAR][mech]++] = rate;
                }
            }
        }
        for (mode = 0; (me == 0) && (mode < MODE_COUNT); ++mode) {
            printf("%10zu %5s", sizes[i], mode_names[mode]);
            for (mech = 0; mech < MECH_COUNT; ++mech) {
                double *v = rates[mode][mech];
                int     k = n[mode][mech];
                char    cell[64] = "-";

                if (k > 0) {
                    qsort(v, k, sizeof(double), cmp_double);
                    snprintf(cell, sizeof(cell), "%.0f [%.0f-%.0f] (%d)", v[k / 2], v[0],
                             v[k - 1], k);
                }
                printf(" %28s", cell);
            }
            printf("\n");
            fflush(stdout);
        }
    }
    if (me == 1) return 0;
    waitpid(child, NULL, 0);
    return 0;
}
