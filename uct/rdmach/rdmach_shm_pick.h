/*
 * Which way a get that could be staged goes (rdmach_shm.h, "Staged gets"), by measuring both.
 *
 * Staging is two memcpys through the owner's segment, with the line transfers between the
 * cores that they take; not staging is the kernel's page walk (process_vm_readv, in chunks
 * both processes take). Which is faster depends on the machine, not on the message:
 *   - a 2-core AMD EPYC VM (kernel 6.18): process_vm_readv moves 64 KiB in 6-7 us, a memcpy
 *     0.6 us; MPICH ping-pong 64 KiB staged 2.6 us against 4.8 not staged;
 *   - a 2-core Intel Xeon VM (kernel 6.18): process_vm_readv 3.4 us, a memcpy of 64 KiB
 *     1.5 us; staged 9.9 us against 3.1 not staged.
 * A fixed default loses 2-3x on one of them. So a process first probes its machine
 * (rdmach_shm_pick_probe): a 64 KiB process_vm_readv of its own memory against a memcpy of it,
 * each the best of a few. Staging is two memcpys and a line transfer between the cores per
 * line; the page walk is one copy and the walk. Where the walk costs more than
 * RDMACH_SHM_PICK_RATIO memcpys (AMD: 10, Intel: 2.3) staging is the choice. The probe does not
 * see the line transfers, so where its ratio is within RDMACH_SHM_PICK_NEAR of the line (2.7-6
 * memcpys), the traffic itself decides. A probe far from the line is trusted: timing the
 * other way costs a staged get's first-touch faults, or a page walk's, for nothing.
 *
 * Near the line, each class of sizes (64-256 KiB, -1 MiB, -4 MiB, above) checks that choice
 * on the traffic itself: exploring, it times periods of its gets staged and not in turn, until
 * each way has RDMACH_SHM_PICK_SAMPLES samples, per byte. A period runs from a get posted when
 * nothing else was (it opens the period and draws the way) until nothing is posted any more;
 * the gets of its class posted meanwhile go its way and count in its bytes. So a ping-pong's
 * get is one sample, and a window of rendezvous is one sample, all one way. Timing each get of
 * a window in turn instead mixed the ways in one window, and one the other way slowed the
 * window (0.70-0.92x windowed bandwidth on the Intel VM); timing only the gets that ran alone
 * left every window the probe's choice, which in the AMD VM's far mode was 0.5x the page walk
 * (perf/RESULTS.md). A period with another copy in it (a put, a get of another class, a
 * failed one) or longer than RDMACH_SHM_PICK_PERIOD_MAX gets times nothing.
 *
 * The way whose second best sample is lower wins (one preempted sample decides nothing); or
 * sooner, from RDMACH_SHM_PICK_EARLY samples each, the way whose every sample is
 * RDMACH_SHM_PICK_CLEAR times faster than every sample of the other, where every sample is a
 * period of RDMACH_SHM_PICK_EARLY_GETS gets or more (OSU's windowed bandwidth times 20 windows
 * at 64 KiB after 2 of warm-up: where the ways differ 2x, ending after 4 windows rather than
 * 8 makes its figure about 1.1x; a ping-pong's samples, one get each, are too few to end on,
 * and its 8 explored gets cost little). The winner takes the next
 * RDMACH_SHM_PICK_RUN gets, twice as many each time the same way wins again, up to
 * RDMACH_SHM_PICK_RUN_MAX; then the class explores again. Traffic that brings no samples for
 * RDMACH_SHM_PICK_GIVE_UP periods keeps the choice. A period's cost is the wire's to tell
 * (rdmach_shm_pick_start and _end take its clock): the wall time, or, where a peer read from
 * this process meanwhile, the work both processes did on its copies (rdmach_wire_shm_rma.c,
 * rdmach_shm_pick_clock). No clock of its own but in the probe: the unit tests pass made-up
 * times.
 */
#ifndef RDMACH_SHM_PICK_H
#define RDMACH_SHM_PICK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RDMACH_SHM_PICK_CLASSES 4
#define RDMACH_SHM_PICK_SAMPLES 4
#define RDMACH_SHM_PICK_RUN     1024
#define RDMACH_SHM_PICK_RUN_MAX 65536
#define RDMACH_SHM_PICK_GIVE_UP 256
#define RDMACH_SHM_PICK_RATIO   4.0
#define RDMACH_SHM_PICK_NEAR    1.5
#define RDMACH_SHM_PICK_PERIOD_MAX 256
#define RDMACH_SHM_PICK_EARLY   2
#define RDMACH_SHM_PICK_CLEAR   1.5
#define RDMACH_SHM_PICK_EARLY_GETS 8

typedef struct rdmach_shm_pick_class {
    uint32_t left;         /* gets before the next exploration; 0: exploring */
    uint32_t run;          /* gets the last choice held for */
    uint32_t turn;         /* exploring: gets handed out */
    uint32_t nsamp[2];     /* [staged] */
    double   samp[2][RDMACH_SHM_PICK_SAMPLES];   /* ns per byte */
    uint8_t  won;          /* the last choice: 1 staged */
    uint8_t  thin;         /* a sample of this exploration is a period of fewer than
                            * RDMACH_SHM_PICK_EARLY_GETS gets: no early end */
} rdmach_shm_pick_class_t;

/* The timed period open, if any (rdmach_shm_pick_get) */
typedef struct rdmach_shm_pick_period {
    unsigned way;      /* its opener's bits (RDMACH_SHM_PICK_TIMED set); 0: none open */
    size_t   len;      /* its opener's length: the class */
    size_t   bytes;    /* of all its gets */
    uint32_t gets;
    int      pure;     /* nothing else ran in it: it is a sample */
    uint64_t t0;       /* ns, rdmach_shm_pick_start */
} rdmach_shm_pick_period_t;

typedef struct rdmach_shm_pick {
    rdmach_shm_pick_class_t  c[RDMACH_SHM_PICK_CLASSES];
    int                      fixed;   /* the probe's choice holds: nothing is timed */
    rdmach_shm_pick_period_t period;
} rdmach_shm_pick_t;

/* A get's way and whether it is timed (an exploring class's): RDMACH_SHM_PICK_STAGED and
 * RDMACH_SHM_PICK_TIMED bits. */
#define RDMACH_SHM_PICK_STAGED 1
#define RDMACH_SHM_PICK_TIMED  2

/* The class of a get of len bytes: 64-256 KiB, -1 MiB, -4 MiB, above. */
static inline unsigned rdmach_shm_pick_class_of(size_t len)
{
    return (len < (256ul << 10)) ? 0 : (len < (1ul << 20)) ? 1 : (len < (4ul << 20)) ? 2 : 3;
}

/* staged: the first choice of every class; fixed: it holds (rdmach_shm_pick_probe's). */
void rdmach_shm_pick_init(rdmach_shm_pick_t *pick, int staged, int fixed);

/* Staging pays where a page walk of 64 KiB took more than RDMACH_SHM_PICK_RATIO memcpys. */
static inline int rdmach_shm_pick_rule(uint64_t walk_ns, uint64_t memcpy_ns)
{
    return (double)walk_ns > RDMACH_SHM_PICK_RATIO * (double)memcpy_ns;
}

/* The probe is near the line: the traffic decides. */
static inline int rdmach_shm_pick_near(uint64_t walk_ns, uint64_t memcpy_ns)
{
    double ratio = (double)walk_ns / (double)(memcpy_ns ? memcpy_ns : 1);

    return (ratio * RDMACH_SHM_PICK_NEAR > RDMACH_SHM_PICK_RATIO) &&
           (ratio < RDMACH_SHM_PICK_RATIO * RDMACH_SHM_PICK_NEAR);
}

/* This machine's choice, probed once per process (about 50 us): 1 staged. walk_ns, memcpy_ns
 * (may be NULL): what it measured; both 0 when it could not (then 1, and near the line). */
int rdmach_shm_pick_probe(uint64_t *walk_ns, uint64_t *memcpy_ns);

/* The class's side of rdmach_shm_pick_get: the way of a get of len bytes (from
 * RDMACH_SHM_COPY_MIN), the bits above. measurable: it may open a timed period (no other copy
 * posted); one that may not goes the chosen way, untimed. */
unsigned rdmach_shm_pick(rdmach_shm_pick_t *pick, size_t len, int measurable);

/* A timed get (its pick's bits) of len bytes, alone, took ns nanoseconds. Returns the way
 * this sample's exploration chose (1 staged, 0 not), or -1: none yet. */
int  rdmach_shm_pick_sample(rdmach_shm_pick_t *pick, size_t len, unsigned way, uint64_t ns);

/* The way of a get of len bytes that could be staged, by periods (above). idle: no other
 * copy is posted. A result with RDMACH_SHM_PICK_TIMED opened a period: start it. */
unsigned rdmach_shm_pick_get(rdmach_shm_pick_t *pick, size_t len, int idle);

static inline void rdmach_shm_pick_start(rdmach_shm_pick_t *pick, uint64_t now_ns)
{
    pick->period.t0 = now_ns;
}

/* Is a period open (then the clock is wanted at its end)? */
static inline int rdmach_shm_pick_open(const rdmach_shm_pick_t *pick)
{
    return pick->period.way != 0;
}

/* Another copy, or a failed get, in the open period: it times nothing. Without one open it
 * changes nothing (the next period starts clean). */
static inline void rdmach_shm_pick_spoil(rdmach_shm_pick_t *pick)
{
    pick->period.pure = 0;
}

/* Nothing is posted any more: the open period ends at now_ns. Returns as
 * rdmach_shm_pick_sample. */
int rdmach_shm_pick_end(rdmach_shm_pick_t *pick, uint64_t now_ns);

#ifdef __cplusplus
}
#endif

#endif
