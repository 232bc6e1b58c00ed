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
 * A fixed default loses 2-3x on one of them, so each class of sizes (64-256 KiB, -1 MiB,
 * -4 MiB, above) measures. Exploring, it hands its gets out staged and not in turn, until
 * each way has RDMACH_SHM_PICK_SAMPLES samples: the time of a get that ran alone (done at
 * return, or posted while no other was and completed before the next), per byte. The way
 * whose second best is lower wins (one preempted sample decides nothing) and takes the next
 * RDMACH_SHM_PICK_RUN gets, twice as many each time the same way wins again, up to
 * RDMACH_SHM_PICK_RUN_MAX; then the class explores again. Only gets that will run alone
 * are handed out in turn (in a window of posted gets, the ones done at return); an
 * exploration that gets no samples for RDMACH_SHM_PICK_GIVE_UP of them keeps the last choice. Only exploring gets read
 * the clock. Plain C, no clock of its own: the unit tests pass made-up times.
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

typedef struct rdmach_shm_pick_class {
    uint32_t left;         /* gets before the next exploration; 0: exploring */
    uint32_t run;          /* gets the last choice held for */
    uint32_t turn;         /* exploring: gets handed out */
    uint32_t nsamp[2];     /* [staged] */
    double   samp[2][RDMACH_SHM_PICK_SAMPLES];   /* ns per byte */
    uint8_t  won;          /* the last choice: 1 staged */
} rdmach_shm_pick_class_t;

typedef struct rdmach_shm_pick {
    rdmach_shm_pick_class_t c[RDMACH_SHM_PICK_CLASSES];
} rdmach_shm_pick_t;

/* A get's way and whether it is timed (an exploring class's): RDMACH_SHM_PICK_STAGED and
 * RDMACH_SHM_PICK_TIMED bits. */
#define RDMACH_SHM_PICK_STAGED 1
#define RDMACH_SHM_PICK_TIMED  2

void rdmach_shm_pick_init(rdmach_shm_pick_t *pick);

/* The way of a get of len bytes (from RDMACH_SHM_COPY_MIN): the bits above. measurable: the
 * get will run alone (done at return, or posted while no other copy is); one that will not
 * brings no sample, so an exploring class sends it the last chosen way, untimed. */
unsigned rdmach_shm_pick(rdmach_shm_pick_t *pick, size_t len, int measurable);

/* A timed get (its pick's bits) of len bytes ran alone for ns nanoseconds. Returns the way
 * this sample's exploration chose (1 staged, 0 not), or -1: none yet. */
int  rdmach_shm_pick_sample(rdmach_shm_pick_t *pick, size_t len, unsigned way, uint64_t ns);

#ifdef __cplusplus
}
#endif

#endif
