/*
 * line_demote: what CLDEMOTE does to a one-line record handed from one core to another, without
 * UCX. Two threads (CPU 0 and CPU 1) exchange records through two rings of 128-byte slots laid
 * out as rdmach's (the mark, then the rest of the record, in the slot's first line), each way with
 * and without the sender's CLDEMOTE of that line after the mark, alternating, 5 rounds:
 *
 *   ping-pong   one-way ns, a record and its answer;
 *   stream      records per us, one way, the receiver returning credit every 64 records.
 *
 *   line_demote [RECORDS]     (default 1000000 per run)
 *
 * Why: rdmach's ring demotes the line of a record that fits in one (uct/rdmach/rdmach_ring.h,
 * rdmach_tx_commit), so that the receiver's read finds it in the shared cache instead of
 * snooping the sender's core. The ping-pong shows what a reader gains. The stream shows what
 * the writer pays: here the reader does nothing but read, so the writer's instruction is all
 * that is measured, where in rdmach and under MPI the reader is the slower end (UCT's and
 * UCP's handlers, matching) and a stream of small records gains. The encoding is a hint NOP
 * where the CPU lacks the instruction (ucx_ext_cpu_demote, uct/common/ucx_ext_sys.h), and then
 * both ways measure the same. docs/rdmach.md, "One-line records", has the figures.
 */
#ifndef _GNU_SOURCE
#  define _GNU_SOURCE
#endif
#include "ucx_ext_sys.h"

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define NSLOTS 1024   /* 128 KiB rings: within a core's private cache, as a hot rdmach ring */
#define CREDIT 64
#define ROUNDS 5

typedef struct {
    volatile uint64_t mark;   /* position + 1, stored last (rdmach_rec_hdr_t's first field) */
    uint64_t data[7];
    char pad[64];
} __attribute__((aligned(128))) slot_t;

static slot_t ring[2][NSLOTS];
static volatile uint64_t credit __attribute__((aligned(64)));
static uint64_t records = 1000000;
static int demote, stream;

static void send_rec(slot_t *r, uint64_t pos)
{
    slot_t *s = &r[pos % NSLOTS];

    s->data[0] = pos;
    __atomic_store_n(&s->mark, pos + 1, __ATOMIC_RELEASE);
    if (demote) {
        ucx_ext_cpu_demote(s);
    }
}

static uint64_t recv_rec(slot_t *r, uint64_t pos)
{
    slot_t *s = &r[pos % NSLOTS];

    while (__atomic_load_n(&s->mark, __ATOMIC_ACQUIRE) != pos + 1) {
    }
    return s->data[0];
}

static void *peer(void *arg)
{
    uint64_t i, sum = 0;

    (void)arg;
    for (i = 0; i < records; ++i) {
        sum += recv_rec(ring[0], i);
        if (!stream) {
            send_rec(ring[1], i);
        } else if ((i + 1) % CREDIT == 0) {
            __atomic_store_n(&credit, i + 1, __ATOMIC_RELEASE);
        }
    }
    return (void*)(uintptr_t)sum;
}

static double run(void)
{
    pthread_attr_t attr;
    cpu_set_t one;
    pthread_t th;
    uint64_t i, t;

    for (i = 0; i < NSLOTS; ++i) {
        ring[0][i].mark = ring[1][i].mark = 0;
    }
    credit = 0;
    CPU_ZERO(&one);
    CPU_SET(1, &one);
    if ((pthread_attr_init(&attr) != 0) ||
        (pthread_attr_setaffinity_np(&attr, sizeof(one), &one) != 0) ||
        (pthread_create(&th, &attr, peer, NULL) != 0)) {
        fprintf(stderr, "line_demote: needs CPUs 0 and 1\n");
        exit(1);
    }
    t = ucx_ext_now_ns();
    for (i = 0; i < records; ++i) {
        if (stream) {
            while (i - __atomic_load_n(&credit, __ATOMIC_ACQUIRE) >= NSLOTS - CREDIT) {
            }
            send_rec(ring[0], i);
        } else {
            send_rec(ring[0], i);
            (void)recv_rec(ring[1], i);
        }
    }
    pthread_join(th, NULL);
    t = ucx_ext_now_ns() - t;
    return stream ? (double)records * 1000.0 / t : (double)t / records / 2;
}

int main(int argc, char **argv)
{
    cpu_set_t zero;
    int r;

    if (argc > 1) {
        records = strtoull(argv[1], NULL, 0);
    }
    if (records < CREDIT) {
        fprintf(stderr, "line_demote: RECORDS is at least %d\n", CREDIT);
        return 2;
    }
    CPU_ZERO(&zero);
    CPU_SET(0, &zero);
    if (sched_setaffinity(0, sizeof(zero), &zero) != 0) {
        fprintf(stderr, "line_demote: needs CPUs 0 and 1\n");
        return 1;
    }
    printf("round,ping-pong ns one way (plain),(demoted),stream records/us (plain),(demoted)\n");
    for (r = 0; r < ROUNDS; ++r) {
        double v[4];

        for (stream = 0; stream < 2; ++stream) {
            for (demote = 0; demote < 2; ++demote) {
                v[stream * 2 + demote] = run();
            }
        }
        printf("%d,%.1f,%.1f,%.1f,%.1f\n", r, v[0], v[1], v[2], v[3]);
    }
    return 0;
}
