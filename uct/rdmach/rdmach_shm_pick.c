/*
 * rdmach shared-memory wire: staged or not, measured per class of sizes (rdmach_shm_pick.h).
 */
#include "rdmach_shm_pick.h"
#include "ucx_ext_sys.h"

#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

static void rdmach_shm_pick_explore(rdmach_shm_pick_class_t *c)
{
    c->left     = 0;
    c->turn     = 0;
    c->nsamp[0] = c->nsamp[1] = 0;
    c->thin     = 0;
}

void rdmach_shm_pick_init(rdmach_shm_pick_t *pick, int staged, int fixed)
{
    unsigned i;

    memset(pick, 0, sizeof(*pick));
    pick->fixed = fixed;
    for (i = 0; i < RDMACH_SHM_PICK_CLASSES; ++i) {
        rdmach_shm_pick_explore(&pick->c[i]);
        pick->c[i].won = !!staged;
    }
}

#define RDMACH_SHM_PROBE_LEN  (64ul * 1024)
#define RDMACH_SHM_PROBE_REPS 8

static int rdmach_shm_pick_measure(uint64_t *walk_ns, uint64_t *memcpy_ns)
{
    uint8_t *src = malloc(2 * RDMACH_SHM_PROBE_LEN), *dst;
    uint64_t t, best_walk = UINT64_MAX, best_copy = UINT64_MAX;
    struct iovec local, remote;
    unsigned i;

    if (src == NULL) {
        return -1;
    }
    dst = src + RDMACH_SHM_PROBE_LEN;
    memset(src, 0x5a, 2 * RDMACH_SHM_PROBE_LEN);
    local.iov_base  = dst;
    local.iov_len   = RDMACH_SHM_PROBE_LEN;
    remote.iov_base = src;
    remote.iov_len  = RDMACH_SHM_PROBE_LEN;
    for (i = 0; i < RDMACH_SHM_PROBE_REPS; ++i) {
        t = ucx_ext_now_ns();
        if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) !=
            (ssize_t)RDMACH_SHM_PROBE_LEN) {
            free(src);
            return -1;   /* no process_vm here (a seccomp filter): nothing to compare */
        }
        t = ucx_ext_now_ns() - t;
        best_walk = (t < best_walk) ? t : best_walk;
        t = ucx_ext_now_ns();
        memcpy(dst, src, RDMACH_SHM_PROBE_LEN);
        __asm__ __volatile__("" : : "r"(dst) : "memory");   /* the copy is not dropped */
        t = ucx_ext_now_ns() - t;
        best_copy = (t < best_copy) ? t : best_copy;
    }
    free(src);
    *walk_ns   = best_walk;
    *memcpy_ns = (best_copy > 0) ? best_copy : 1;
    return 0;
}

int rdmach_shm_pick_probe(uint64_t *walk_ns, uint64_t *memcpy_ns)
{
    /* once per process: 0 not yet, else 1 + the choice; the figures with it. Two threads
     * opening ifaces at once may both measure: either's figures hold. */
    static int probed;
    static uint64_t saved_walk, saved_copy;
    int done = __atomic_load_n(&probed, __ATOMIC_ACQUIRE);
    uint64_t walk, copy;

    if (done == 0) {
        if (rdmach_shm_pick_measure(&walk, &copy) != 0) {
            walk = copy = 0;
        }
        __atomic_store_n(&saved_walk, walk, __ATOMIC_RELAXED);
        __atomic_store_n(&saved_copy, copy, __ATOMIC_RELAXED);
        done = 1 + (((walk == 0) && (copy == 0)) ? 1 : rdmach_shm_pick_rule(walk, copy));
        __atomic_store_n(&probed, done, __ATOMIC_RELEASE);
    }
    if (walk_ns != NULL) {
        *walk_ns = __atomic_load_n(&saved_walk, __ATOMIC_RELAXED);
    }
    if (memcpy_ns != NULL) {
        *memcpy_ns = __atomic_load_n(&saved_copy, __ATOMIC_RELAXED);
    }
    return done - 1;
}

static rdmach_shm_pick_class_t *rdmach_shm_pick_class(rdmach_shm_pick_t *pick, size_t len)
{
    return &pick->c[rdmach_shm_pick_class_of(len)];
}

/* The choice holds for c->run gets (won: the way that holds; decided: an exploration chose
 * it, rather than gave up). */
static void rdmach_shm_pick_hold(rdmach_shm_pick_class_t *c, unsigned won, int decided)
{
    if (decided && (won == c->won) && (c->run > 0)) {
        c->run = (c->run < RDMACH_SHM_PICK_RUN_MAX) ? 2 * c->run : c->run;
    } else {
        c->run = RDMACH_SHM_PICK_RUN;
    }
    c->won  = (uint8_t)won;
    c->left = c->run;
}

unsigned rdmach_shm_pick(rdmach_shm_pick_t *pick, size_t len, int measurable)
{
    rdmach_shm_pick_class_t *c = rdmach_shm_pick_class(pick, len);
    unsigned way;

    if (pick->fixed) {
        return c->won;
    }
    if (c->left > 0) {
        if (--c->left == 0) {
            rdmach_shm_pick_explore(c);
        }
        return c->won;
    }
    if (!measurable) {
        return c->won;
    }
    if (++c->turn > RDMACH_SHM_PICK_GIVE_UP) {
        rdmach_shm_pick_hold(c, c->won, 0);   /* no samples come: this traffic's periods
                                               * never end clean */
        return c->won;
    }
    /* in turn; a way that has its samples leaves the gets to the other */
    way = (c->nsamp[1] >= RDMACH_SHM_PICK_SAMPLES) ? 0 :
          (c->nsamp[0] >= RDMACH_SHM_PICK_SAMPLES) ? 1 : (c->turn & 1);
    return way | RDMACH_SHM_PICK_TIMED;
}

/* The second smallest of n >= 2 values. */
static double rdmach_shm_pick_second(const double *v, unsigned n)
{
    double a = v[0] < v[1] ? v[0] : v[1], b = v[0] < v[1] ? v[1] : v[0];
    unsigned i;

    for (i = 2; i < n; ++i) {
        if (v[i] < a) {
            b = a;
            a = v[i];
        } else if (v[i] < b) {
            b = v[i];
        }
    }
    return b;
}

/* The smallest and largest of n values. */
static void rdmach_shm_pick_range(const double *v, unsigned n, double *lo, double *hi)
{
    unsigned i;

    *lo = *hi = v[0];
    for (i = 1; i < n; ++i) {
        *lo = (v[i] < *lo) ? v[i] : *lo;
        *hi = (v[i] > *hi) ? v[i] : *hi;
    }
}

/* Before all samples are in: 1 (0) where every staged (not staged) sample beats every sample
 * of the other way by RDMACH_SHM_PICK_CLEAR, else 2: not clear yet. */
static unsigned rdmach_shm_pick_clear(const rdmach_shm_pick_class_t *c)
{
    double lo[2], hi[2];

    if ((c->nsamp[0] < RDMACH_SHM_PICK_EARLY) || (c->nsamp[1] < RDMACH_SHM_PICK_EARLY)) {
        return 2;
    }
    rdmach_shm_pick_range(c->samp[0], c->nsamp[0], &lo[0], &hi[0]);
    rdmach_shm_pick_range(c->samp[1], c->nsamp[1], &lo[1], &hi[1]);
    return (lo[0] > RDMACH_SHM_PICK_CLEAR * hi[1]) ? 1 :
           (lo[1] > RDMACH_SHM_PICK_CLEAR * hi[0]) ? 0 : 2;
}

/* A sample of len's class: per_byte ns, from a period of gets gets */
static int rdmach_shm_pick_add(rdmach_shm_pick_t *pick, size_t len, unsigned way,
                               double per_byte, uint32_t gets)
{
    rdmach_shm_pick_class_t *c = rdmach_shm_pick_class(pick, len);
    unsigned s = way & RDMACH_SHM_PICK_STAGED, won;

    if (!(way & RDMACH_SHM_PICK_TIMED) || (c->left > 0) || (len == 0) ||
        (c->nsamp[s] >= RDMACH_SHM_PICK_SAMPLES)) {
        return -1;   /* from an exploration already decided */
    }
    c->samp[s][c->nsamp[s]++] = per_byte;
    c->thin                  |= (gets < RDMACH_SHM_PICK_EARLY_GETS);
    if ((c->nsamp[0] >= RDMACH_SHM_PICK_SAMPLES) && (c->nsamp[1] >= RDMACH_SHM_PICK_SAMPLES)) {
        won = rdmach_shm_pick_second(c->samp[1], RDMACH_SHM_PICK_SAMPLES) <=
              rdmach_shm_pick_second(c->samp[0], RDMACH_SHM_PICK_SAMPLES);
    } else if (c->thin || ((won = rdmach_shm_pick_clear(c)) > 1)) {
        return -1;
    }
    rdmach_shm_pick_hold(c, won, 1);
    return (int)won;
}

int rdmach_shm_pick_sample(rdmach_shm_pick_t *pick, size_t len, unsigned way, uint64_t ns)
{
    return rdmach_shm_pick_add(pick, len, way, (double)ns / (double)(len ? len : 1), 1);
}

unsigned rdmach_shm_pick_get(rdmach_shm_pick_t *pick, size_t len, int idle)
{
    rdmach_shm_pick_period_t *pd = &pick->period;
    unsigned way;

    if (pd->way != 0) {
        if (pd->pure && (pd->gets < RDMACH_SHM_PICK_PERIOD_MAX) &&
            (rdmach_shm_pick_class(pick, len) == rdmach_shm_pick_class(pick, pd->len))) {
            pd->bytes += len;
            ++pd->gets;
            return pd->way & RDMACH_SHM_PICK_STAGED;   /* the window goes one way */
        }
        pd->pure = 0;
        return rdmach_shm_pick(pick, len, 0);
    }
    way = rdmach_shm_pick(pick, len, idle);
    if (way & RDMACH_SHM_PICK_TIMED) {
        pd->way   = way;
        pd->len   = len;
        pd->bytes = len;
        pd->gets  = 1;
        pd->pure  = 1;
    }
    return way;
}

int rdmach_shm_pick_end(rdmach_shm_pick_t *pick, uint64_t now_ns)
{
    rdmach_shm_pick_period_t *pd = &pick->period;
    unsigned way                 = pd->way;

    pd->way = 0;
    if ((way == 0) || !pd->pure || (now_ns < pd->t0)) {
        return -1;
    }
    return rdmach_shm_pick_add(pick, pd->len, way,
                               (double)(now_ns - pd->t0) / (double)pd->bytes, pd->gets);
}
