/*
 * rdmach's served requests (uct/rdmach/rdmach_serve.[ch]): what a target does with the
 * records a peer wrote into its ring to have an atomic, a put or a get served. Every field
 * is the peer's: the checks are against what the target itself knows (its registrations),
 * without overflow, and a record never names the process a reply goes to.
 */
#include "rdmach_serve.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace {

/* The target's registrations, as its md keeps them. */
struct Regs {
    std::vector<rdmach_serve_reg_t> regs;

    static int cb(void *arg, uint64_t address, uint64_t length)
    {
        for (const rdmach_serve_reg_t &r : static_cast<Regs*>(arg)->regs) {
            if ((r.address == address) && (r.length == length)) {
                return 1;
            }
        }
        return 0;
    }
};

const uint64_t kBase = 0x10000, kLen = 0x1000;

rdmach_serve_amo_rec_t good_amo()
{
    rdmach_serve_amo_rec_t rec;

    memset(&rec, 0, sizeof(rec));
    rec.address      = kBase + 8;
    rec.value        = 1;
    rec.token        = 7;
    rec.reg.address  = kBase;
    rec.reg.length   = kLen;
    rec.replies.fd   = 5;
    rec.replies.ino  = 1234;
    rec.replies.base = 0x7f0000000000;
    rec.slot         = 3;
    rec.op           = RDMACH_SERVE_OP_ADD;
    rec.bits         = 64;
    return rec;
}

rdmach_serve_rma_rec_t good_rma()
{
    rdmach_serve_rma_rec_t rec;

    memset(&rec, 0, sizeof(rec));
    rec.address      = kBase + 16;
    rec.token        = 9;
    rec.reg.address  = kBase;
    rec.reg.length   = kLen;
    rec.replies.fd   = 5;
    rec.replies.ino  = 1234;
    rec.replies.base = 0x7f0000000000;
    rec.slot         = RDMACH_SERVE_POOL - 1;
    rec.length       = 64;
    rec.write        = 1;
    return rec;
}

class RdmachServe : public ::testing::Test {
protected:
    Regs regs;

    void SetUp() override { regs.regs.push_back({kBase, kLen}); }

    rdmach_serve_verdict_t amo(const rdmach_serve_amo_rec_t &in)
    {
        rdmach_serve_amo_rec_t out;
        return rdmach_serve_amo_decode(&in, sizeof(in), Regs::cb, &regs, &out);
    }

    rdmach_serve_verdict_t rma(const rdmach_serve_rma_rec_t &in)
    {
        rdmach_serve_rma_rec_t out;
        rdmach_serve_verdict_t v = rdmach_serve_rma_decode(&in, sizeof(in), &out);
        return (v == RDMACH_SERVE_DROP) ? v : rdmach_serve_rma_allowed(&out, Regs::cb, &regs);
    }
};

} // namespace

TEST(RdmachServeRange, WithinIsOverflowSafe)
{
    EXPECT_TRUE(ucx_ext_range_within(0x1000, 8, 0x1000, 0x1000));
    EXPECT_TRUE(ucx_ext_range_within(0x1ff8, 8, 0x1000, 0x1000));
    EXPECT_FALSE(ucx_ext_range_within(0x1ff9, 8, 0x1000, 0x1000));
    EXPECT_FALSE(ucx_ext_range_within(0xfff, 8, 0x1000, 0x1000));
    /* the sum address + length wraps to 0 and would pass "address + length <= end" */
    EXPECT_FALSE(ucx_ext_range_within(0xfffffffffffffff8ull, 8, 0x1000, 0x1000));
    EXPECT_FALSE(ucx_ext_range_within(0x1008, UINT64_MAX - 7, 0x1000, 0x1000));
    /* a region that itself wraps is no region */
    EXPECT_FALSE(ucx_ext_range_within(0xfffffffffffff000ull, 8, 0xfffffffffffff000ull,
                                      0x2000));
    EXPECT_TRUE(ucx_ext_range_within(0x1000, 0, 0x1000, 0));
}

TEST_F(RdmachServe, HonestRecordsAreServed)
{
    EXPECT_EQ(RDMACH_SERVE_DO, amo(good_amo()));
    EXPECT_EQ(RDMACH_SERVE_DO, rma(good_rma()));
}

TEST_F(RdmachServe, RecordsOfAnotherLengthAreDropped)
{
    rdmach_serve_amo_rec_t a = good_amo(), out_a;
    rdmach_serve_rma_rec_t r = good_rma(), out_r;

    EXPECT_EQ(RDMACH_SERVE_DROP, rdmach_serve_amo_decode(&a, sizeof(a) - 1, Regs::cb, &regs,
                                                         &out_a));
    EXPECT_EQ(RDMACH_SERVE_DROP, rdmach_serve_amo_decode(&a, 0, Regs::cb, &regs, &out_a));
    EXPECT_EQ(RDMACH_SERVE_DROP, rdmach_serve_rma_decode(&r, sizeof(r) + 1, &out_r));
}

/* The reply segment a record names: a memfd of the sender's with its inode, never a file
 * mapping (fd -1) or an unchecked fd (ino 0), never a slot outside the pool. */
TEST_F(RdmachServe, ReplySegmentsThatCannotBeCheckedAreDropped)
{
    rdmach_serve_amo_rec_t a;
    rdmach_serve_rma_rec_t r;

    a = good_amo(); a.replies.ino = 0;
    EXPECT_EQ(RDMACH_SERVE_DROP, amo(a));
    a = good_amo(); a.replies.fd = -1;
    EXPECT_EQ(RDMACH_SERVE_DROP, amo(a));
    a = good_amo(); a.replies.reserved = 1;
    EXPECT_EQ(RDMACH_SERVE_DROP, amo(a));
    a = good_amo(); a.replies.base = UINT64_MAX - RDMACH_SERVE_REPLY_BYTES + 8;
    EXPECT_EQ(RDMACH_SERVE_DROP, amo(a));
    a = good_amo(); a.replies.base = 0;
    EXPECT_EQ(RDMACH_SERVE_DROP, amo(a));
    a = good_amo(); a.replies.base += 4;
    EXPECT_EQ(RDMACH_SERVE_DROP, amo(a));
    a = good_amo(); a.slot = RDMACH_SERVE_POOL;
    EXPECT_EQ(RDMACH_SERVE_DROP, amo(a));
    a = good_amo(); a.slot = UINT32_MAX;
    EXPECT_EQ(RDMACH_SERVE_DROP, amo(a));

    r = good_rma(); r.replies.ino = 0;
    EXPECT_EQ(RDMACH_SERVE_DROP, rma(r));
    r = good_rma(); r.slot = RDMACH_SERVE_POOL;
    EXPECT_EQ(RDMACH_SERVE_DROP, rma(r));
}

/* The last byte a reply can touch stays inside the segment. */
TEST_F(RdmachServe, TheLastSlotEndsAtTheSegmentEnd)
{
    EXPECT_EQ(RDMACH_SERVE_REPLY_BYTES,
              rdmach_serve_reply_offset(RDMACH_SERVE_POOL - 1, 2) + RDMACH_SERVE_RMA_MAX);
    EXPECT_EQ(0u, RDMACH_SERVE_REPLY_BYTES % 4096);
}

TEST_F(RdmachServe, BadTokensAndFieldsAreDropped)
{
    rdmach_serve_amo_rec_t a;
    rdmach_serve_rma_rec_t r;

    a = good_amo(); a.token = 0;
    EXPECT_EQ(RDMACH_SERVE_DROP, amo(a));
    a = good_amo(); a.token |= RDMACH_SERVE_OPEN;
    EXPECT_EQ(RDMACH_SERVE_DROP, amo(a));
    a = good_amo(); a.reserved[1] = 1;
    EXPECT_EQ(RDMACH_SERVE_DROP, amo(a));

    r = good_rma(); r.length = 0;
    EXPECT_EQ(RDMACH_SERVE_DROP, rma(r));
    r = good_rma(); r.length = RDMACH_SERVE_RMA_MAX + 1;
    EXPECT_EQ(RDMACH_SERVE_DROP, rma(r));
    r = good_rma(); r.write = 2;
    EXPECT_EQ(RDMACH_SERVE_DROP, rma(r));
    r = good_rma(); r.token = RDMACH_SERVE_REFUSED | 1;
    EXPECT_EQ(RDMACH_SERVE_DROP, rma(r));
    r = good_rma(); r.reserved[6] = 1;
    EXPECT_EQ(RDMACH_SERVE_DROP, rma(r));
}

/* A well-formed atomic on memory the target does not hold is refused: the requester learns. */
TEST_F(RdmachServe, AtomicsOutsideTheNamedRegistrationAreRefused)
{
    rdmach_serve_amo_rec_t a;

    a = good_amo(); a.address = 0xfffffffffffffff8ull;   /* d09a544 served this one */
    EXPECT_EQ(RDMACH_SERVE_REFUSE, amo(a));
    a = good_amo(); a.address = kBase + kLen - 4;         /* half outside */
    EXPECT_EQ(RDMACH_SERVE_REFUSE, amo(a));
    a = good_amo(); a.address = kBase - 8;
    EXPECT_EQ(RDMACH_SERVE_REFUSE, amo(a));
    /* a registration the target does not have, around the address */
    a = good_amo(); a.reg.address = 0; a.reg.length = UINT64_MAX; a.address = 0x400000;
    EXPECT_EQ(RDMACH_SERVE_REFUSE, amo(a));
    /* one that wraps, named to pass a sum check */
    a = good_amo(); a.reg.address = 0xfffffffffffff000ull; a.reg.length = 0x2000;
    a.address = 0x8;
    EXPECT_EQ(RDMACH_SERVE_REFUSE, amo(a));
    a = good_amo(); a.bits = 16;
    EXPECT_EQ(RDMACH_SERVE_REFUSE, amo(a));
    a = good_amo(); a.op = RDMACH_SERVE_OP_CSWAP + 1;
    EXPECT_EQ(RDMACH_SERVE_REFUSE, amo(a));
    a = good_amo(); a.address += 4;                       /* unaligned 64-bit */
    EXPECT_EQ(RDMACH_SERVE_REFUSE, amo(a));
    a = good_amo(); a.address += 4; a.bits = 32;          /* aligned 32-bit */
    EXPECT_EQ(RDMACH_SERVE_DO, amo(a));
    a = good_amo(); a.address = kBase + kLen - 8;         /* the last word */
    EXPECT_EQ(RDMACH_SERVE_DO, amo(a));
}

TEST_F(RdmachServe, PutsAndGetsOutsideTheNamedRegistrationAreRefused)
{
    rdmach_serve_rma_rec_t r;

    r = good_rma(); r.address = 0xffffffffffffff00ull; r.length = 0x100;
    EXPECT_EQ(RDMACH_SERVE_REFUSE, rma(r));
    r = good_rma(); r.address = kBase + kLen - 63;
    EXPECT_EQ(RDMACH_SERVE_REFUSE, rma(r));
    r = good_rma(); r.reg.length = kLen * 2;
    r.address = kBase + kLen;                                /* inside what it names */
    EXPECT_EQ(RDMACH_SERVE_REFUSE, rma(r));                  /* but that is not ours */
    r = good_rma(); r.address = kBase + kLen - 64;
    EXPECT_EQ(RDMACH_SERVE_DO, rma(r));
    regs.regs.clear();                                       /* deregistered */
    EXPECT_EQ(RDMACH_SERVE_REFUSE, rma(good_rma()));
}

TEST(RdmachServeApply, EveryOperationOnBothSizes)
{
    uint64_t w64 = 10;
    uint32_t w32[2] = {10, 99};

    EXPECT_EQ(10u, rdmach_serve_amo_apply(&w64, RDMACH_SERVE_OP_ADD, 64, 5, 0));
    EXPECT_EQ(15u, w64);
    EXPECT_EQ(15u, rdmach_serve_amo_apply(&w64, RDMACH_SERVE_OP_CSWAP, 64, 1, 14));
    EXPECT_EQ(15u, w64);                                     /* compare failed */
    EXPECT_EQ(15u, rdmach_serve_amo_apply(&w64, RDMACH_SERVE_OP_CSWAP, 64, 1, 15));
    EXPECT_EQ(1u, w64);
    EXPECT_EQ(1u, rdmach_serve_amo_apply(&w64, RDMACH_SERVE_OP_SWAP, 64, 7, 0));
    EXPECT_EQ(7u, rdmach_serve_amo_apply(&w64, RDMACH_SERVE_OP_XOR, 64, 3, 0));
    EXPECT_EQ(4u, rdmach_serve_amo_apply(&w64, RDMACH_SERVE_OP_OR, 64, 9, 0));
    EXPECT_EQ(13u, rdmach_serve_amo_apply(&w64, RDMACH_SERVE_OP_AND, 64, 6, 0));
    EXPECT_EQ(4u, w64);
    EXPECT_EQ(10u, rdmach_serve_amo_apply(&w32[0], RDMACH_SERVE_OP_ADD, 32, 0xffffffffull, 0));
    EXPECT_EQ(9u, w32[0]);
    EXPECT_EQ(99u, w32[1]);                                  /* the neighbour untouched */
}
