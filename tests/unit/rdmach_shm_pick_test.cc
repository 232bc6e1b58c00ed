/*
 * rdmach's choice between staged gets and the kernel's page walk (rdmach_shm_pick.c), fed
 * made-up times: it explores both ways in turn, takes the faster, holds it for a run that
 * doubles while the same way keeps winning, explores again, is not swayed by one preempted
 * sample, gives up when no period ends clean, and keeps its classes of sizes apart. A window
 * of gets is one period, all one way; a period with another copy in it, or too long, times
 * nothing; windows with a clear winner end the exploration early, single gets do not.
 */
#include <gtest/gtest.h>

extern "C" {
#include "rdmach_shm_pick.h"
}

namespace {

const size_t K64 = 64 * 1024, M1 = 1024 * 1024, M8 = 8 * 1024 * 1024;

/* Runs n gets of len, each timed one (when exploring) taking ns_staged or ns_not per byte;
 * returns how many went staged. */
unsigned run(rdmach_shm_pick_t *p, size_t len, unsigned n, double ns_staged, double ns_not,
             unsigned *decided_staged = nullptr)
{
    unsigned staged = 0;

    for (unsigned i = 0; i < n; ++i) {
        unsigned way = rdmach_shm_pick(p, len, 1);
        staged += way & RDMACH_SHM_PICK_STAGED;
        if (way & RDMACH_SHM_PICK_TIMED) {
            double per = (way & RDMACH_SHM_PICK_STAGED) ? ns_staged : ns_not;
            int won    = rdmach_shm_pick_sample(p, len, way, (uint64_t)(per * len));
            if ((won >= 0) && (decided_staged != nullptr)) {
                *decided_staged += won;
            }
        }
    }
    return staged;
}

}  // namespace

TEST(RdmachShmPick, TakesTheFasterWay)
{
    rdmach_shm_pick_t p;

    rdmach_shm_pick_init(&p, 1, 0);
    /* staged 1.3x slower (too close to end early): after 8 exploring gets, the rest of the
     * run goes the other way */
    EXPECT_EQ(4u, run(&p, K64, 8 + RDMACH_SHM_PICK_RUN, 0.13, 0.10));
    EXPECT_NE(0u, rdmach_shm_pick(&p, K64, 1) & RDMACH_SHM_PICK_TIMED);   /* exploring again */

    rdmach_shm_pick_init(&p, 1, 0);
    EXPECT_EQ(4u + RDMACH_SHM_PICK_RUN, run(&p, K64, 8 + RDMACH_SHM_PICK_RUN, 0.06, 0.08));
}

TEST(RdmachShmPick, RunsDoubleWhileTheSameWayWins)
{
    rdmach_shm_pick_t p;
    unsigned run_len = RDMACH_SHM_PICK_RUN, staged_total = 0;

    rdmach_shm_pick_init(&p, 1, 0);
    for (int round = 0; round < 5; ++round) {
        staged_total += run(&p, M1 / 2, 8 + run_len, 0.13, 0.1);
        run_len *= 2;
    }
    EXPECT_EQ(5u * 4, staged_total);   /* only the exploring gets */
    /* the machine changes: staging now wins, and the run starts short again */
    unsigned decided = 0;
    run(&p, M1 / 2, 8, 0.08, 0.1, &decided);
    EXPECT_EQ(1u, decided);
    EXPECT_EQ(RDMACH_SHM_PICK_RUN - 1, run(&p, M1 / 2, RDMACH_SHM_PICK_RUN - 1, 0.08, 0.1));
}

TEST(RdmachShmPick, OnePreemptedSampleDecidesNothing)
{
    rdmach_shm_pick_t p;
    unsigned n = 0;
    int won    = -1;

    rdmach_shm_pick_init(&p, 1, 0);
    /* staging is faster, but its first sample was preempted (a 4 ms pause) */
    while (won < 0) {
        unsigned way = rdmach_shm_pick(&p, K64, 1);
        ASSERT_TRUE(way & RDMACH_SHM_PICK_TIMED);
        double per = (way & RDMACH_SHM_PICK_STAGED) ? ((n++ == 0) ? 60.0 : 0.04) : 0.08;
        won = rdmach_shm_pick_sample(&p, K64, way, (uint64_t)(per * K64));
    }
    EXPECT_EQ(1, won);
}

TEST(RdmachShmPick, GetsThatCannotRunAloneGoTheChosenWay)
{
    rdmach_shm_pick_t p;

    rdmach_shm_pick_init(&p, 1, 0);
    run(&p, K64, 8, 0.13, 0.1);                    /* not staged won; explore again: */
    EXPECT_EQ(0u, run(&p, K64, RDMACH_SHM_PICK_RUN, 0.13, 0.1));
    for (int i = 0; i < 1000; ++i) {               /* a window's posted gets: untimed */
        ASSERT_EQ(0u, rdmach_shm_pick(&p, K64, 0));
    }
    EXPECT_NE(0u, rdmach_shm_pick(&p, K64, 1) & RDMACH_SHM_PICK_TIMED);
}

TEST(RdmachShmPick, FirstChoiceFromTheProbe)
{
    rdmach_shm_pick_t p;
    uint64_t walk = 0, copy = 0;
    int staged = rdmach_shm_pick_probe(&walk, &copy);

    EXPECT_GT(walk, 0u);
    EXPECT_GT(copy, 0u);
    EXPECT_EQ(staged, rdmach_shm_pick_rule(walk, copy));
    EXPECT_EQ(staged, rdmach_shm_pick_probe(nullptr, nullptr));   /* once per process */
    EXPECT_TRUE(rdmach_shm_pick_rule(6500, 600));    /* the AMD VM: stage */
    EXPECT_FALSE(rdmach_shm_pick_rule(3400, 1500));  /* the Intel VM: the page walk */
    EXPECT_FALSE(rdmach_shm_pick_near(6500, 600));   /* both far from the line: trusted */
    EXPECT_FALSE(rdmach_shm_pick_near(3400, 1500));
    EXPECT_TRUE(rdmach_shm_pick_near(3000, 1000));   /* near it: the traffic decides */
    EXPECT_TRUE(rdmach_shm_pick_near(5000, 1000));

    /* a trusted probe: nothing is timed, whatever runs alone */
    rdmach_shm_pick_init(&p, 0, 1);
    for (int i = 0; i < 3000; ++i) {
        ASSERT_EQ(0u, rdmach_shm_pick(&p, K64, 1));
    }

    /* a class keeps the probe's choice where nothing runs alone */
    rdmach_shm_pick_init(&p, 0, 0);
    for (int i = 0; i < 100; ++i) {
        ASSERT_EQ(0u, rdmach_shm_pick(&p, M1, 0));
    }
    for (int i = 0; i < RDMACH_SHM_PICK_GIVE_UP + 10; ++i) {
        rdmach_shm_pick(&p, M1, 1);
    }
    EXPECT_EQ(0u, rdmach_shm_pick(&p, M1, 1));
}

TEST(RdmachShmPick, GivesUpWithoutSamples)
{
    rdmach_shm_pick_t p;
    unsigned i, timed = 0;

    rdmach_shm_pick_init(&p, 1, 0);
    /* gets that never run alone bring no samples: the first choice (staged) holds */
    for (i = 0; i < RDMACH_SHM_PICK_GIVE_UP + 10; ++i) {
        timed += !!(rdmach_shm_pick(&p, M8, 1) & RDMACH_SHM_PICK_TIMED);
    }
    EXPECT_EQ((unsigned)RDMACH_SHM_PICK_GIVE_UP, timed);
    EXPECT_EQ((unsigned)RDMACH_SHM_PICK_STAGED, rdmach_shm_pick(&p, M8, 1));
}

TEST(RdmachShmPick, ClassesApartAndLateSamplesIgnored)
{
    rdmach_shm_pick_t p;

    rdmach_shm_pick_init(&p, 1, 0);
    run(&p, K64, 8, 0.13, 0.1);                    /* 64 KiB: not staged */
    EXPECT_EQ(4u, run(&p, 2 * M1, 8, 0.08, 0.1));   /* 2 MiB explores on its own */
    EXPECT_EQ(0u, rdmach_shm_pick(&p, 100 * 1024, 1));
    EXPECT_EQ((unsigned)RDMACH_SHM_PICK_STAGED, rdmach_shm_pick(&p, 3 * M1, 1));
    /* a timed get that completes after its exploration decided changes nothing */
    EXPECT_EQ(-1, rdmach_shm_pick_sample(&p, K64, RDMACH_SHM_PICK_TIMED | 1, 1));
    EXPECT_EQ(-1, rdmach_shm_pick_sample(&p, K64, RDMACH_SHM_PICK_TIMED, 0));
    EXPECT_EQ(0u, rdmach_shm_pick(&p, K64, 1));
}

namespace {

/* One window of n gets of len posted behind each other, as a rendezvous window: the first
 * finds nothing posted. The period ends when all are done, ns_staged or ns_not per byte each.
 * Returns how many went staged; *mixed: the window's gets did not all go one way. */
unsigned window(rdmach_shm_pick_t *p, size_t len, unsigned n, double ns_staged,
                double ns_not, uint64_t *clock, int *mixed, int *decided = nullptr)
{
    unsigned staged = 0;

    for (unsigned i = 0; i < n; ++i) {
        unsigned way = rdmach_shm_pick_get(p, len, i == 0);
        if ((i == 0) && (way & RDMACH_SHM_PICK_TIMED)) {
            rdmach_shm_pick_start(p, *clock);
        }
        staged += way & RDMACH_SHM_PICK_STAGED;
        *clock += (uint64_t)(((way & RDMACH_SHM_PICK_STAGED) ? ns_staged : ns_not) * len);
    }
    *mixed = (staged != 0) && (staged != n);
    int won = rdmach_shm_pick_open(p) ? rdmach_shm_pick_end(p, *clock) : -1;
    if (decided != nullptr) {
        *decided = won;
    }
    return staged;
}

}  // namespace

TEST(RdmachShmPick, AWindowOfGetsIsOneSampleAllOneWay)
{
    rdmach_shm_pick_t p;
    uint64_t clock = 1000;
    unsigned w, staged = 0;
    int mixed, decided = -1;

    /* the probe chose staging, and in windows the page walk is 2x faster (the AMD VM's far
     * mode): 4 windows explore, 2 each way, all clearly slower staged: the page walk holds */
    rdmach_shm_pick_init(&p, 1, 0);
    for (w = 0; (w < 100) && (decided < 0); ++w) {
        staged += window(&p, K64, 64, 0.2, 0.1, &clock, &mixed, &decided);
        ASSERT_FALSE(mixed) << "window " << w;
    }
    EXPECT_EQ(4u, w);
    EXPECT_EQ(0, decided);
    EXPECT_EQ(2u * 64, staged);
    /* the choice holds for RDMACH_SHM_PICK_RUN gets, windows untimed */
    for (w = 0; w < RDMACH_SHM_PICK_RUN / 64; ++w) {
        EXPECT_EQ(0u, window(&p, K64, 64, 0.2, 0.1, &clock, &mixed, &decided));
        EXPECT_EQ(-1, decided);
    }
    /* and where staging is faster, it wins */
    rdmach_shm_pick_init(&p, 0, 0);
    for (w = 0, decided = -1; (w < 100) && (decided < 0); ++w) {
        window(&p, M1 / 2, 16, 0.05, 0.1, &clock, &mixed, &decided);
    }
    EXPECT_EQ(1, decided);
}

TEST(RdmachShmPick, APeriodWithOtherCopiesOrTooLongTimesNothing)
{
    rdmach_shm_pick_t p;
    uint64_t clock = 1000;
    unsigned way;

    rdmach_shm_pick_init(&p, 1, 0);
    /* another copy (a put, a failed get) in the period */
    way = rdmach_shm_pick_get(&p, K64, 1);
    ASSERT_TRUE(way & RDMACH_SHM_PICK_TIMED);
    rdmach_shm_pick_start(&p, clock);
    rdmach_shm_pick_spoil(&p);
    EXPECT_EQ(-1, rdmach_shm_pick_end(&p, clock + 100));
    EXPECT_FALSE(rdmach_shm_pick_open(&p));
    EXPECT_EQ(0u, p.c[0].nsamp[0] + p.c[0].nsamp[1]);

    /* a get of another class: it goes its own class's way, and the period times nothing */
    way = rdmach_shm_pick_get(&p, K64, 1);
    ASSERT_TRUE(way & RDMACH_SHM_PICK_TIMED);
    rdmach_shm_pick_start(&p, clock);
    EXPECT_FALSE(rdmach_shm_pick_get(&p, 2 * M1, 0) & RDMACH_SHM_PICK_TIMED);
    EXPECT_EQ(-1, rdmach_shm_pick_end(&p, clock + 100));
    EXPECT_EQ(0u, p.c[0].nsamp[0] + p.c[0].nsamp[1]);

    /* a period that never drains stops after RDMACH_SHM_PICK_PERIOD_MAX gets; the rest go
     * the class's way and the period times nothing */
    way = rdmach_shm_pick_get(&p, K64, 1);
    ASSERT_TRUE(way & RDMACH_SHM_PICK_TIMED);
    rdmach_shm_pick_start(&p, clock);
    for (unsigned i = 1; i < 10 * RDMACH_SHM_PICK_PERIOD_MAX; ++i) {
        rdmach_shm_pick_get(&p, K64, 0);
    }
    EXPECT_EQ((uint32_t)RDMACH_SHM_PICK_PERIOD_MAX, p.period.gets);
    EXPECT_EQ(-1, rdmach_shm_pick_end(&p, clock + 100));
    EXPECT_EQ(0u, p.c[0].nsamp[0] + p.c[0].nsamp[1]);

    /* a clean period counts */
    way = rdmach_shm_pick_get(&p, K64, 1);
    ASSERT_TRUE(way & RDMACH_SHM_PICK_TIMED);
    rdmach_shm_pick_start(&p, clock);
    EXPECT_EQ(-1, rdmach_shm_pick_end(&p, clock + 100));
    EXPECT_EQ(1u, p.c[0].nsamp[0] + p.c[0].nsamp[1]);

    /* a trusted probe opens no period */
    rdmach_shm_pick_init(&p, 1, 1);
    EXPECT_EQ((unsigned)RDMACH_SHM_PICK_STAGED, rdmach_shm_pick_get(&p, K64, 1));
    EXPECT_FALSE(rdmach_shm_pick_open(&p));
}

TEST(RdmachShmPick, AClearWinnerEndsTheExplorationEarly)
{
    rdmach_shm_pick_t p;
    uint64_t clock = 1000;
    unsigned w;
    int mixed, decided = -1;

    /* windows 2x apart end after RDMACH_SHM_PICK_EARLY samples each (the test above); gets
     * alone 2x apart (a ping-pong) do not: samples of one get are too thin to end on */
    rdmach_shm_pick_init(&p, 1, 0);
    for (w = 0; (w < 100) && (decided < 0); ++w) {
        window(&p, K64, 1, 0.2, 0.1, &clock, &mixed, &decided);
    }
    EXPECT_EQ(2u * RDMACH_SHM_PICK_SAMPLES, w);
    EXPECT_EQ(0, decided);

    /* one preempted window of the faster way keeps it exploring to the end */
    rdmach_shm_pick_init(&p, 1, 0);
    for (w = 0, decided = -1; (w < 100) && (decided < 0); ++w) {
        unsigned way = rdmach_shm_pick_get(&p, K64, 1);
        ASSERT_TRUE(way & RDMACH_SHM_PICK_TIMED);
        rdmach_shm_pick_start(&p, clock);
        for (unsigned i = 1; i < 64; ++i) {
            ASSERT_EQ(way & RDMACH_SHM_PICK_STAGED, rdmach_shm_pick_get(&p, K64, 0));
        }
        double per = (way & RDMACH_SHM_PICK_STAGED) ? 0.2 : ((w == 1) ? 60.0 : 0.1);
        clock     += (uint64_t)(per * 64 * K64);
        decided    = rdmach_shm_pick_end(&p, clock);
    }
    EXPECT_EQ(2u * RDMACH_SHM_PICK_SAMPLES, w);
    EXPECT_EQ(0, decided);
}
