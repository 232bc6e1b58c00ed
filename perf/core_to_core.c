/*
 * core_to_core: how long a cache line takes from CPU 0 to CPU 1 here, one way, in ns. Two
 * threads, one pinned on each CPU, hand a counter back and forth through one line; every
 * burst of 20,000 hand-overs gives a figure, and the median of the bursts is printed.
 *
 *   core_to_core [BURSTS]     (default 15, about 20-60 ms)
 *
 * Why: on a shared-memory transport an 8-byte message costs about two such transfers (the
 * record, then the reply), so this figure moves every small-message latency with it. A VM's
 * vCPUs land on host cores that share a cache or not, and the same 2-vCPU machine measured
 * 55-80 ns in some runs and 230-250 ns in others, minutes apart. perf/bench records the figure
 * at the start and end of each run (meta.json core_to_core_ns) and prints it, so that
 * absolute figures from different runs are read with the machine they ran on; the ratios
 * against a built-in come from the same run and alternate, which this does not replace.
 */
#ifndef _GNU_SOURCE
#  define _GNU_SOURCE
#endif
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define HANDOVERS 20000
#define MAX_BURSTS 101

static volatile uint64_t line[8] __attribute__((aligned(64)));
static int bursts = 15;

static int pin(int cpu)
{
    cpu_set_t set;

    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof(set), &set);
}

static double now_ns(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

/* the other end: answers every odd value with the next even one */
static void *pong(void *arg)
{
    uint64_t total = (uint64_t)bursts * HANDOVERS, i;

    (void)arg;
    for (i = 1; i <= total; ++i) {
        while (line[0] != 2 * i - 1) {
        }
        line[0] = 2 * i;
    }
    return NULL;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double*)a, y = *(const double*)b;

    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    double ns[MAX_BURSTS], t;
    uint64_t i = 0;
    pthread_attr_t attr;
    cpu_set_t one;
    pthread_t th;
    int b, k;

    if (argc > 1) {
        bursts = atoi(argv[1]);
    }
    if ((bursts < 1) || (bursts > MAX_BURSTS)) {
        fprintf(stderr, "core_to_core: BURSTS is 1-%d\n", MAX_BURSTS);
        return 2;
    }
    /* the answering thread starts on CPU 1 or not at all (it must never share CPU 0) */
    CPU_ZERO(&one);
    CPU_SET(1, &one);
    if ((pin(0) != 0) || (pthread_attr_init(&attr) != 0) ||
        (pthread_attr_setaffinity_np(&attr, sizeof(one), &one) != 0) ||
        (pthread_create(&th, &attr, pong, NULL) != 0)) {
        fprintf(stderr, "core_to_core: needs CPUs 0 and 1\n");
        return 1;
    }
    for (b = 0; b < bursts; ++b) {
        t = now_ns();
        for (k = 0; k < HANDOVERS; ++k) {
            ++i;
            line[0] = 2 * i - 1;
            while (line[0] != 2 * i) {
            }
        }
        ns[b] = (now_ns() - t) / HANDOVERS / 2;   /* a round trip is two transfers */
    }
    pthread_join(th, NULL);
    qsort(ns, bursts, sizeof(ns[0]), cmp);
    printf("%.1f\n", ns[bursts / 2]);
    return 0;
}
