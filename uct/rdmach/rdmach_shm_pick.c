/*
 * rdmach shared-memory wire: staged or not, measured per class of sizes (rdmach_shm_pick.h).
 */
#include "rdmach_shm_pick.h"

#include <string.h>

static void rdmach_shm_pick_explore(rdmach_shm_pick_class_t *c)
{
    c->left     = 0;
    c->turn     = 0;
    c->nsamp[0] = c->nsamp[1] = 0;
}

void rdmach_shm_pick_init(rdmach_shm_pick_t *pick)
{
    unsigned i;

    memset(pick, 0, sizeof(*pick));
    for (i = 0; i < RDMACH_SHM_PICK_CLASSES; ++i) {
        rdmach_shm_pick_explore(&pick->c[i]);
        pick->c[i].won = 1;
    }
}

static rdmach_shm_pick_class_t *rdmach_shm_pick_class(rdmach_shm_pick_t *pick, size_t len)
{
    return &pick->c[(len < (256ul << 10)) ? 0 : (len < (1ul << 20)) ? 1 :
                    (len < (4ul << 20)) ? 2 : 3];
}

/* The choice holds for c->run gets (won: the way that holds; new: the exploration decided). */
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
        rdmach_shm_pick_hold(c, c->won, 0);   /* no samples come: this traffic never runs
                                               * a get alone */
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

int rdmach_shm_pick_sample(rdmach_shm_pick_t *pick, size_t len, unsigned way, uint64_t ns)
{
    rdmach_shm_pick_class_t *c = rdmach_shm_pick_class(pick, len);
    unsigned s = way & RDMACH_SHM_PICK_STAGED, won;

    if (!(way & RDMACH_SHM_PICK_TIMED) || (c->left > 0) || (len == 0) ||
        (c->nsamp[s] >= RDMACH_SHM_PICK_SAMPLES)) {
        return -1;   /* from an exploration already decided */
    }
    c->samp[s][c->nsamp[s]++] = (double)ns / (double)len;
    if ((c->nsamp[0] < RDMACH_SHM_PICK_SAMPLES) || (c->nsamp[1] < RDMACH_SHM_PICK_SAMPLES)) {
        return -1;
    }
    won = rdmach_shm_pick_second(c->samp[1], RDMACH_SHM_PICK_SAMPLES) <=
          rdmach_shm_pick_second(c->samp[0], RDMACH_SHM_PICK_SAMPLES);
    rdmach_shm_pick_hold(c, won, 1);
    return (int)won;
}
